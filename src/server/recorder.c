/* Session recording to MP4 without ever blocking the pacer: an MP4 writer, as a sink, behind a
 * queued sink (media/sink.h) of QUEUE frames. The pacer's push copies the frame into the ring
 * and returns; the ring's thread feeds the writer, whose pushes may block while x264 catches
 * up. When the ring is full the new frame is dropped and counted — the recording then misses a
 * frame rather than the live session stuttering: the picture before it stays up 40 ms longer
 * and its audio becomes silence (the MP4 writer's audiorate), so what follows stays in sync.
 */
#include "facecast/error.h"
#include "facecast/mp4.h"
#include "media/sink.h"
#include "server/internal.h"

#define QUEUE 50 /* 2 s of frames */

struct fc_recorder {
  fc_sink *sink; /* the queue, which owns the writer */
  char *path;
};

fc_recorder *fc_recorder_start(const char *path, int w, int h, int *err) {
  fc_mp4_params mp = fc_mp4_params_default(w, h);
  mp.threads = 1; /* one of many encoders on the machine */
  fc_mp4_writer *wr = fc_mp4_writer_create(path, &mp, err);
  if (!wr) return NULL;
  fc_sink *q = fc_sink_queued_create(fc_mp4_writer_sink(wr), w, h, FC_SAMPLES_PER_FRAME, QUEUE, err);
  if (!q) return NULL; /* the writer went with it */
  fc_recorder *r = g_new0(fc_recorder, 1);
  r->sink = q;
  r->path = g_strdup(path);
  return r;
}

fc_sink *fc_recorder_sink(fc_recorder *r) { return r->sink; }

int fc_recorder_finish(fc_recorder *r, char **path) {
  int err = fc_sink_finish(r->sink);
  fc_sink_stats st;
  fc_sink_get_stats(r->sink, &st);
  if (st.frames_dropped)
    g_message("recording %s: %llu of %llu frames dropped (encoder behind)", r->path,
              (unsigned long long)st.frames_dropped, (unsigned long long)st.frames_pushed);
  fc_sink_destroy(r->sink); /* removes the file unless it was finished */
  if (path) *path = err ? NULL : g_strdup(r->path);
  g_free(r->path);
  g_free(r);
  return err;
}
