/* Encoded audio arriving in pieces (a TTS service's MP3 stream), decoded by GStreamer as it
 * comes: appsrc → decodebin → audioconvert → audioresample → 16 kHz mono float → appsink.
 *
 * Push bytes as they arrive, take what is decoded so far after each push, end the input, then
 * take the rest. decodebin finds the format itself (MP3, Ogg, WebM/Opus, FLAC, WAV, ADTS); a
 * caps hint ("audio/mpeg, mpegversion=1") skips the guessing. Pieces are copied. One thread
 * uses a decoder at a time (GStreamer's own threads run behind it). Errors: FC_EMEDIA with a
 * detail (not audio, corrupt data, a missing plug-in's package), FC_ENOMEM. */
#ifndef FC_MEDIA_AUDIO_DEC_H
#define FC_MEDIA_AUDIO_DEC_H

#include "facecast/audio.h"

#include <stddef.h>

typedef struct fc_audio_dec fc_audio_dec;

/* caps: NULL to let decodebin find the format. NULL and *err on failure. */
fc_audio_dec *fc_audio_dec_create(const char *caps, int *err);
void fc_audio_dec_destroy(fc_audio_dec *d);

int fc_audio_dec_push(fc_audio_dec *d, const void *data, size_t n);
/* No more input. */
int fc_audio_dec_end(fc_audio_dec *d);

/* What has been decoded since the last call (*n may be 0). After fc_audio_dec_end, waits up to
 * timeout_ms for the decoder to finish, and *done becomes 1 once everything has come out.
 * *pcm is the decoder's buffer, valid until the next call. */
int fc_audio_dec_take(fc_audio_dec *d, int timeout_ms, const float **pcm, size_t *n, int *done);

/* A whole file of any audio GStreamer decodes (MP3, M4A/AAC, Ogg, WebM/Opus, FLAC, WAV …),
 * as 16 kHz mono (out->samples owned). FC_EFORMAT (one line naming the problem) for what does
 * not decode or holds no audio, or audio past max_seconds. */
int fc_audio_decode_file(const char *path, double max_seconds, fc_audio *out);

#endif
