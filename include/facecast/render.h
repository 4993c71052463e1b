/* Offline rendering: drive a stream as fast as the encoder takes frames and write an MP4.
 * The stream's input must have ended (fc_stream_end) so the loop knows where to stop. On any
 * error the partial file is removed. */
#ifndef FACECAST_RENDER_H
#define FACECAST_RENDER_H

#include "facecast/mp4.h"
#include "facecast/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Called after each frame with frames done and the total. */
typedef void (*fc_render_progress_cb)(void *user, int64_t done, int64_t total);

int fc_render_to_mp4(fc_stream *s, const char *path, const fc_mp4_params *mp4,
                     fc_render_progress_cb progress, void *user);

#ifdef __cplusplus
}
#endif
#endif
