/* Media in: any file GStreamer can decode (MP4, WebM, MOV, MKV, ...) as RGB frames on the
 * engine's clock (25 fps, frames dropped or repeated by videorate) and its audio as 16 kHz mono.
 *
 * Frames come out in order through fc_decoder_next(); the audio track is gathered on the side
 * while the frames are read and handed over once the video has ended (fc_decoder_audio), so a
 * caller reads one stream and gets both. Frames are scaled down (never up) to fit max_w×max_h,
 * keeping the aspect ratio, with even sides (I420 later). One thread uses a decoder at a time.
 * Errors: FC_ENOTFOUND (no file), FC_EMEDIA (not decodable, no video stream: the detail says
 * which), FC_ENOMEM. */
#ifndef FACECAST_DECODE_H
#define FACECAST_DECODE_H

#include "facecast/audio.h"
#include "facecast/picture.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_decoder fc_decoder;

/* Opens path and prerolls, so the frame size is known: *w, *h (either may be NULL). max_w,
 * max_h: 0 = no limit. */
fc_decoder *fc_decoder_open(const char *path, int max_w, int max_h, int *w, int *h, int *err);

/* The next frame into out (allocated by the caller at the size fc_decoder_open reported).
 * Returns 0, FC_EEOF after the last frame, or FC_EMEDIA. */
int fc_decoder_next(fc_decoder *d, fc_image *out);

/* After FC_EEOF: the audio track (16 kHz mono; n = 0 when the file has none). The samples move
 * to out (free with fc_audio_free). */
int fc_decoder_audio(fc_decoder *d, fc_audio *out);

/* Duration in seconds as the container reports it, or -1 if unknown. */
double fc_decoder_duration(const fc_decoder *d);

void fc_decoder_close(fc_decoder *d);

#ifdef __cplusplus
}
#endif
#endif
