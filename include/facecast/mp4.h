/* MP4 file writer: a GStreamer pipeline
 *   appsrc (I420) → x264enc → h264parse ┐
 *   appsrc (S16LE mono) → AAC encoder ──┴→ mp4mux → filesink
 * Every buffer is stamped from the one sample clock: video frame i at i/fps, audio at
 * first_sample/sample_rate. Pushing blocks while the encoders are behind (bounded appsrc queues),
 * so memory stays flat however long the render. Not thread-safe: one producer thread. */
#ifndef FACECAST_MP4_H
#define FACECAST_MP4_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_mp4_writer fc_mp4_writer;

typedef struct fc_mp4_params {
  int width, height;      /* even */
  int fps;                /* default 25 */
  int sample_rate;        /* default 16000 */
  int bitrate_kbps;       /* x264 bitrate; 0 = default (2000) */
  const char *preset;     /* x264 speed-preset name; NULL = "veryfast" */
  int threads;            /* x264 threads; 0 = auto */
} fc_mp4_params;

fc_mp4_params fc_mp4_params_default(int width, int height);

/* Creates the pipeline writing to path. NULL and *err (FC_EMEDIA for a missing element, FC_EIO
 * for an unwritable path) with a detail. */
fc_mp4_writer *fc_mp4_writer_create(const char *path, const fc_mp4_params *p, int *err);

/* Pushes frame `index` as contiguous I420 (Y w×h, then U and V (w/2)×(h/2)); the data is copied
 * into a pooled buffer, the caller keeps ownership. */
int fc_mp4_writer_push_video(fc_mp4_writer *w, const uint8_t *i420, int64_t index);

/* Pushes n mono samples starting at sample `first_sample` of the clock (caller keeps ownership). */
int fc_mp4_writer_push_audio(fc_mp4_writer *w, const int16_t *pcm, size_t n, int64_t first_sample);

/* Sends end-of-stream and waits until the file is complete. Returns 0 or FC_EMEDIA/FC_EIO. */
int fc_mp4_writer_finish(fc_mp4_writer *w);

/* Frees the writer. A writer that was not finished successfully stops its pipeline and removes
 * the partial file, so a failed render leaves nothing behind. */
void fc_mp4_writer_destroy(fc_mp4_writer *w);

#ifdef __cplusplus
}
#endif
#endif
