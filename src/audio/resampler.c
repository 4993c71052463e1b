/* Streaming resampling with libsoxr (see resampler.h). Equal rates pass through (a copy into
 * the output buffer, int16 scaled to float the same way everywhere: x / 32768). */
#include "audio/resampler.h"
#include "facecast/error.h"

#include <soxr.h>
#include <stdlib.h>
#include <string.h>

struct fc_resampler {
  soxr_t sx; /* NULL when the rates are equal */
  double ratio;
  float *in, *out; /* the float copy of an int16 piece; the output */
  size_t cap_in, cap_out;
};

fc_resampler *fc_resampler_create(int in_rate, int out_rate, int *err) {
  *err = FC_OK;
  if (in_rate < 1000 || in_rate > 384000 || out_rate < 1000 || out_rate > 384000) {
    *err = fc_error_set(FC_EINVAL, "resample: rate %d -> %d Hz out of range", in_rate, out_rate);
    return NULL;
  }
  fc_resampler *r = calloc(1, sizeof *r);
  if (!r) {
    *err = fc_error_set(FC_ENOMEM, "resample: out of memory");
    return NULL;
  }
  r->ratio = (double)out_rate / in_rate;
  if (in_rate != out_rate) {
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    soxr_error_t e = NULL;
    r->sx = soxr_create(in_rate, out_rate, 1, &e, &io, &q, NULL);
    if (e || !r->sx) {
      *err = fc_error_set(FC_EINVAL, "resample %d -> %d Hz: %s", in_rate, out_rate,
                          e ? e : "cannot start");
      fc_resampler_destroy(r);
      return NULL;
    }
  }
  return r;
}

void fc_resampler_destroy(fc_resampler *r) {
  if (!r) return;
  if (r->sx) soxr_delete(r->sx);
  free(r->in);
  free(r->out);
  free(r);
}

static int grow(float **p, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 4096;
  while (c < need) c *= 2;
  float *q = realloc(*p, c * sizeof(float));
  if (!q) return fc_error_set(FC_ENOMEM, "resample: out of memory");
  *p = q;
  *cap = c;
  return 0;
}

int fc_resampler_f32(fc_resampler *r, const float *in, size_t n, int flush, const float **out,
                     size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  /* room for this piece's share plus what the filter may release on flush (its delay is well
   * under a few thousand samples at HQ) */
  size_t room = (size_t)((double)n * r->ratio) + 4096;
  int err = grow(&r->out, &r->cap_out, room);
  if (err) return err;
  if (!r->sx) {
    if (n) memcpy(r->out, in, n * sizeof(float));
    *out = r->out;
    *n_out = n;
    return FC_OK;
  }
  size_t fed = 0, done = 0;
  while (fed < n) {
    size_t used = 0, got = 0;
    if (done == r->cap_out && (err = grow(&r->out, &r->cap_out, r->cap_out * 2))) return err;
    soxr_error_t e = soxr_process(r->sx, in + fed, n - fed, &used, r->out + done,
                                  r->cap_out - done, &got);
    if (e) return fc_error_set(FC_EINVAL, "resample: %s", e);
    if (!used && !got && (err = grow(&r->out, &r->cap_out, r->cap_out * 2))) return err;
    fed += used;
    done += got;
  }
  /* the end: NULL input makes soxr release what its filter holds, over as many calls as it
   * takes */
  for (size_t got = 1; flush && got;) {
    if (done == r->cap_out && (err = grow(&r->out, &r->cap_out, r->cap_out * 2))) return err;
    soxr_error_t e = soxr_process(r->sx, NULL, 0, NULL, r->out + done, r->cap_out - done, &got);
    if (e) return fc_error_set(FC_EINVAL, "resample: %s", e);
    done += got;
  }
  *out = r->out;
  *n_out = done;
  return FC_OK;
}

int fc_resampler_s16(fc_resampler *r, const int16_t *in, size_t n, int flush, const float **out,
                     size_t *n_out) {
  int err = grow(&r->in, &r->cap_in, n ? n : 1);
  if (err) return err;
  for (size_t i = 0; i < n; i++) r->in[i] = in[i] * (1.0f / 32768.0f);
  return fc_resampler_f32(r, r->in, n, flush, out, n_out);
}
