/* Wav2Lip "cpu-ref": the ops as plain C loops, one thread.
 *
 * This is the reference other backends are tested against (the llm.c idea: a slow version whose
 * correctness is evident from reading it), so every loop is written straight from the PyTorch
 * definition, with no tiling or tricks:
 *   Conv2d:           y[o,oy,ox] = b[o] + sum_{i,ky,kx} w[o,i,ky,kx] * x[i, oy*s-p+ky, ox*s-p+kx]
 *   ConvTranspose2d:  y[o,oy,ox] = b[o] + sum over (iy,ky) with iy*s-p+ky == oy (same for x)
 *                                  of w[i,o,ky,kx] * x[i,iy,ix]   (the adjoint of Conv2d)
 * followed by "+ x" for residual layers and ReLU. Sums are accumulated in double so the result
 * sits close to the float64 golden vectors; the only layout change is that weights are copied
 * to [cout][kh][kw][cin] at creation, so the innermost loop runs over contiguous input channels
 * of an NHWC pixel and a contiguous weight row (a full-width frame takes seconds, not minutes). */
#include "lipsync/wav2lip/w2l_internal.h"

#include "facecast/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct ref_state {
  float *w[W2L_NLAYERS]; /* [cout][kh][kw][cin] */
} ref_state;

static void ref_destroy(void *state) {
  ref_state *s = state;
  if (!s) return;
  for (int i = 0; i < W2L_NLAYERS; i++) free(s->w[i]);
  free(s);
}

static int ref_create(const fc_w2l *m, void **state) {
  ref_state *s = calloc(1, sizeof *s);
  if (!s) return fc_error_set(FC_ENOMEM, "wav2lip cpu-ref: out of memory");
  for (int li = 0; li < m->nlayers; li++) {
    const w2l_layer *l = &m->layers[li];
    size_t ci = (size_t)l->cin, co = (size_t)l->cout, kh = (size_t)l->kh, kw = (size_t)l->kw;
    float *w = s->w[li] = malloc(ci * co * kh * kw * sizeof(float));
    if (!w) {
      ref_destroy(s);
      return fc_error_set(FC_ENOMEM, "wav2lip cpu-ref: out of memory for weights");
    }
    for (size_t o = 0; o < co; o++)
      for (size_t i = 0; i < ci; i++)
        for (size_t y = 0; y < kh; y++)
          for (size_t x = 0; x < kw; x++) {
            size_t src = l->kind == W2L_CONVT ? ((i * co + o) * kh + y) * kw + x
                                              : ((o * ci + i) * kh + y) * kw + x;
            w[((o * kh + y) * kw + x) * ci + i] = l->w[src];
          }
  }
  *state = s;
  return FC_OK;
}

static int ref_prepare(void *state, const fc_w2l *m, int batch) { return FC_OK; }

static void ref_conv(const w2l_layer *l, const float *wt, const float *x, const w2l_tensor *ti,
                     float *y, const w2l_tensor *to, int batch) {
  const int ci = l->cin, co = l->cout;
  for (int n = 0; n < batch; n++)
    for (int oy = 0; oy < to->h; oy++)
      for (int ox = 0; ox < to->w; ox++) {
        float *yp = y + (((size_t)n * to->h + oy) * to->w + ox) * co;
        for (int o = 0; o < co; o++) {
          double acc = l->b[o];
          for (int ky = 0; ky < l->kh; ky++)
            for (int kx = 0; kx < l->kw; kx++) {
              int iy, ix;
              if (l->kind == W2L_CONV) {
                iy = oy * l->sh - l->ph + ky;
                ix = ox * l->sw - l->pw + kx;
              } else { /* which input pixel lands on (oy, ox) through tap (ky, kx), if any */
                int ty = oy + l->ph - ky, tx = ox + l->pw - kx;
                if (ty < 0 || tx < 0 || ty % l->sh || tx % l->sw) continue;
                iy = ty / l->sh;
                ix = tx / l->sw;
              }
              if (iy < 0 || iy >= ti->h || ix < 0 || ix >= ti->w) continue;
              const float *xp = x + (((size_t)n * ti->h + iy) * ti->w + ix) * ci;
              const float *wp = wt + (((size_t)o * l->kh + ky) * l->kw + kx) * ci;
              for (int i = 0; i < ci; i++) acc += (double)xp[i] * wp[i];
            }
          /* residual layers keep the spatial size and channels, so x's pixel is y's pixel */
          if (l->residual) acc += x[(((size_t)n * ti->h + oy) * ti->w + ox) * ci + o];
          if (l->relu && acc < 0) acc = 0;
          yp[o] = (float)acc;
        }
      }
}

static int ref_run_op(void *state, const fc_w2l *m, int i, int batch) {
  ref_state *s = state;
  const w2l_op *op = &m->ops[i];
  const w2l_tensor *ti = &m->tensors[op->in], *to = &m->tensors[op->out];
  const float *x = m->slots[ti->slot];
  float *y = m->slots[to->slot];
  if (op->kind == W2L_OP_CONV) {
    ref_conv(&m->layers[op->layer], s->w[op->layer], x, ti, y, to, batch);
    return FC_OK;
  }
  /* concat along channels: each output pixel = [x's channels, then the skip's] */
  const w2l_tensor *t2 = &m->tensors[op->in2];
  const float *x2 = m->slots[t2->slot];
  size_t pix = (size_t)batch * to->h * to->w;
  for (size_t p = 0; p < pix; p++) {
    memcpy(y + p * to->c, x + p * ti->c, (size_t)ti->c * sizeof(float));
    memcpy(y + p * to->c + ti->c, x2 + p * t2->c, (size_t)t2->c * sizeof(float));
  }
  return FC_OK;
}

const w2l_backend fc_w2l_backend_ref = {.name = "cpu-ref", .create = ref_create, .destroy = ref_destroy,
                                        .prepare = ref_prepare, .run_op = ref_run_op};
