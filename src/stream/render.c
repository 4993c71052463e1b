/* Offline render loop: stream frames → the MP4 writer, as an output (see render.h, media/sink.h).
 * The file is written as <path>.part and renamed into place only when complete. The writer stamps
 * every buffer from the frame index and the sample count, so the file's audio and video share one
 * clock. */
#include "facecast/audio.h"
#include "facecast/error.h"
#include "facecast/render.h"

#include "core/stale.h"
#include "media/sink.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

int fc_render_to_mp4(fc_stream *s, const char *path, const fc_mp4_params *mp4,
                     fc_render_progress_cb progress, void *user) {
  /* Write next to the target and rename at the end: a failed render leaves no partial file and
   * does not clobber an earlier good one. */
  size_t len = strlen(path);
  char *tmp = malloc(len + 6);
  if (!tmp) return fc_error_set(FC_ENOMEM, "out of memory");
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".part", 6);
  int err = FC_OK;
  /* The partial file is locked while it is written: one left by a killed run can be taken
   * (and is overwritten now); one being written by another run cannot. */
  int lock = open(tmp, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || fc_stale_hold(lock)) {
    err = lock < 0 ? fc_error_set(FC_EIO, "%s: cannot write the output file", path)
                   : fc_error_set(FC_EAGAIN, "%s: another render is writing it now", path);
    if (lock >= 0) close(lock);
    free(tmp);
    return err;
  }
  fc_mp4_writer *w = fc_mp4_writer_create(tmp, mp4, &err);
  if (!w) {
    if (err == FC_EIO) err = fc_error_set(FC_EIO, "%s: cannot write the output file", path);
    remove(tmp);
    close(lock);
    free(tmp);
    return err;
  }
  fc_sink *out = fc_mp4_writer_sink(w); /* the file, as an output (media/sink.h) */
  int64_t total = fc_stream_frames_total(s);
  for (;;) {
    fc_frame_info fi;
    const uint8_t *img;
    const int16_t *pcm;
    err = fc_stream_next_frame(s, &fi, &img, &pcm);
    if (err == FC_EEOF) {
      err = FC_OK;
      break;
    }
    if (err == FC_EAGAIN) {
      err = fc_error_set(FC_EINVAL, "render: the stream's input has not ended");
      break;
    }
    if (err) break;
    const fc_sink_frame f = {.index = fi.index, .i420 = img, .pcm = pcm,
                             .n_samples = FC_SAMPLES_PER_FRAME,
                             .first_sample = fi.index * FC_SAMPLES_PER_FRAME};
    if ((err = fc_sink_push(out, &f))) break;
    if (progress) progress(user, fi.index + 1, total);
  }
  if (!err) err = fc_sink_finish(out);
  fc_sink_destroy(out); /* removes the file unless finish succeeded */
  if (!err && rename(tmp, path) != 0) {
    remove(tmp);
    err = fc_error_set(FC_EIO, "%s: cannot write the output file", path);
  }
  close(lock);
  free(tmp);
  return err;
}
