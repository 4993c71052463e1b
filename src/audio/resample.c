/* Sample-rate conversion with libsoxr (high quality; whole utterances and files, fed in pieces). */
#include "facecast/audio.h"
#include "facecast/error.h"

#include <soxr.h>
#include <stdlib.h>
#include <string.h>

int fc_resample(const fc_audio *in, int out_rate, fc_audio *out) {
  memset(out, 0, sizeof *out);
  if (!in || in->rate <= 0 || out_rate <= 0)
    return fc_error_set(FC_EINVAL, "resample: bad rate %d -> %d", in ? in->rate : 0, out_rate);
  size_t n_out = (size_t)((double)in->n * out_rate / in->rate + 0.5);
  out->samples = malloc((n_out ? n_out : 1) * sizeof(float));
  if (!out->samples) return fc_error_set(FC_ENOMEM, "resample: out of memory");
  out->rate = out_rate;
  if (in->rate == out_rate) {
    memcpy(out->samples, in->samples, in->n * sizeof(float));
    out->n = in->n;
    return FC_OK;
  }
  /* In pieces, not soxr_oneshot: handed a whole long utterance at once, soxr grows its input
   * FIFO by realloc step after step (minutes of CPU for a few minutes of audio under ASan, found
   * by fuzzing /human); fed 64 k samples at a time with room to write, it never grows. */
  soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
  soxr_error_t e = NULL;
  soxr_t sx = soxr_create(in->rate, out_rate, 1, &e, &io, &q, NULL);
  size_t done = 0, fed = 0;
  while (!e && done < n_out) {
    size_t piece = in->n - fed < 65536 ? in->n - fed : 65536, used = 0, got = 0;
    /* NULL input once all is fed: soxr flushes what it holds back */
    e = soxr_process(sx, fed < in->n ? in->samples + fed : NULL, piece, &used,
                     out->samples + done, n_out - done, &got);
    fed += used;
    done += got;
    if (!e && !got && (fed >= in->n || !used)) break; /* flushed (or, never, stuck) */
  }
  if (sx) soxr_delete(sx);
  if (e) {
    fc_audio_free(out);
    return fc_error_set(FC_EINVAL, "resample %d -> %d Hz: %s", in->rate, out_rate, e);
  }
  /* soxr may hand back a sample or so fewer than the exact ratio; keep the length exact so the
   * audio timeline and the video frame count agree. */
  for (size_t i = done; i < n_out; i++) out->samples[i] = done ? out->samples[done - 1] : 0.0f;
  out->n = n_out;
  return FC_OK;
}
