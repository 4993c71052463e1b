/* A talking stream: speech in, composed frames out, on one sample clock.
 *
 * Speech (16 kHz PCM, optionally with phoneme timing) is appended to the stream's timeline.
 * Frames are pulled one at a time (FFmpeg-style receive): frame i is video pts i/25 s and carries
 * audio samples [640·i, 640·(i+1)), zero-padded past the end of the speech. Internally frames
 * are produced in batches: features for up to `batch` frames, one lip-sync call, then
 * compositing into a ring of I420 buffers; nothing is allocated per frame.
 * Offline (render, bulk) pulls as fast as the sink takes; a live session pulls at its pacer's
 * rate. One thread drives a stream. */
#ifndef FACECAST_STREAM_H
#define FACECAST_STREAM_H

#include "facecast/lipsync.h"
#include "facecast/tts.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_stream fc_stream;

typedef struct fc_stream_params {
  const fc_avatar *avatar; /* borrowed; outlives the stream */
  fc_lipsync *lipsync;     /* borrowed; outlives the stream */
  int batch;               /* frames per lip-sync call; 0 = 16 */
} fc_stream_params;

fc_stream *fc_stream_create(const fc_stream_params *p, int *err);
void fc_stream_destroy(fc_stream *s);

/* Appends speech at the end of the timeline; phoneme samples are relative to pcm[0]. Copies. */
int fc_stream_push_speech(fc_stream *s, const float *pcm, size_t n, const fc_phoneme *ph,
                          size_t n_ph);
/* No more speech will come: the last partial frame is padded, then FC_EEOF. */
void fc_stream_end(fc_stream *s);

/* The number of frames the timeline holds so far (ceil(samples / 640)). */
int64_t fc_stream_frames_total(const fc_stream *s);

/* Produces the next frame: its index, I420 pixels (borrowed, valid until the next call) and its
 * 640 samples of PCM (borrowed likewise). Returns 0, FC_EAGAIN when the timeline has no full
 * frame yet and the input has not ended, FC_EEOF after the last frame, or an error. */
int fc_stream_next_frame(fc_stream *s, int64_t *index, const uint8_t **i420, const int16_t **pcm);

#ifdef __cplusplus
}
#endif
#endif
