/* Wav2Lip "cpu": the ops as oneDNN (2.x C API) primitives, OpenMP-threaded.
 *
 * Layout: every tensor stays NHWC in the model's slots (oneDNN's "nhwc" tag); weights are
 * reordered once into whatever blocked layout each convolution asks for ("any"), and those
 * copies are shared between batch sizes when the layouts agree.
 *
 * Per batch size a plan is built the first time that size is used and kept: a flat list of
 * (primitive, arguments) steps whose memory objects point straight into the slots, plus one
 * scratchpad (user-managed, so executing allocates nothing). fc_w2l_infer then only executes.
 *
 * How each op maps (the choices come from measurements on this library version):
 *   - Conv2d + BN + ReLU: one convolution with the folded bias and a ReLU post-op.
 *   - residual: y = relu(conv(x) + x) as a "sum" post-op, so dst must already hold x: a reorder
 *     copies x into dst first. (A binary-add post-op would avoid the copy but moves the
 *     convolution off the faster brgconv kernels; the copy is cheap next to a 3×3 conv.)
 *   - ConvTranspose2d: oneDNN 2.6's deconvolution on NHWC ran 3-7× slower than a convolution
 *     doing the same work (14-31 vs ~100+ GFLOP/s on the 2-core CI machine), so each one is
 *     split by output phase: output pixel (s·i + ry, s·j + rx) only meets the
 *     kernel taps ky ≡ ry + p (mod s) (same for x), which makes every phase an ordinary
 *     stride-1 convolution with a 1..ceil(k/s)-tap kernel over the input (same total work as
 *     the transposed conv). The phases write dense tensors in the op's scratch tensor; a
 *     reorder per phase then scatters each into its strided place in the output. Stride 1 is
 *     the one-phase case: a convolution with the flipped kernel writing the output directly.
 *   - concat: two reorders into strided channel slices of the output (a convolution cannot
 *     write a strided destination here: that falls back to oneDNN's reference kernel). */
#include "lipsync/wav2lip/w2l_internal.h"

#include "facecast/error.h"

#include <dlfcn.h>
#include <dnnl.h>
#include <dnnl_debug.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PHASES 16 /* stride up to 4×4 */

/* One reordered copy of a convolution's weights in the layout some primitive wants. */
typedef struct wvariant {
  dnnl_memory_desc_t md;
  dnnl_memory_t mem;
  struct wvariant *next;
} wvariant;

/* One oneDNN convolution: a whole Conv2d, or one output phase of a ConvTranspose2d. */
typedef struct dconv {
  int cin, cout, kh, kw, sh, sw, plh, plw, prh, prw;
  int ih, iw, oh, ow;   /* input and (phase) output size */
  int ry, rx;           /* phase offsets in the ConvTranspose2d output */
  const float *w_plain; /* [cout][cin][kh][kw] (oihw) */
  float *w_owned;       /* phase weights built here (w_plain points at them) */
  wvariant *wv;
} dconv;

typedef struct dlayer {
  int nconv;
  dconv conv[MAX_PHASES];
  dnnl_memory_t bias; /* wraps the model's folded bias */
} dlayer;

typedef struct step {
  dnnl_primitive_t prim;
  int nargs;
  dnnl_exec_arg_t args[5];
  dnnl_memory_desc_t scratch_md; /* zero-sized when the primitive needs none */
} step;

typedef struct plan {
  int batch;
  step *steps;
  int nsteps, cap;
  int op_first[W2L_MAX_OPS + 1]; /* steps [op_first[i], op_first[i+1]) run op i */
  dnnl_memory_t *mems;           /* memory objects this plan created */
  int nmems, capmems;
  void *scratch;
} plan;

typedef struct dstate {
  dnnl_engine_t eng;
  dnnl_stream_t st;
  dlayer layers[W2L_NLAYERS];
  plan **plans; /* [max_batch + 1], built on first use */
  int max_batch;
  void (*set_threads)(int); /* omp_set_num_threads, looked up at run time */
} dstate;

static int dnnl_fail(dnnl_status_t st, const char *what, const char *layer) {
  int err = st == dnnl_out_of_memory ? FC_ENOMEM
            : st == dnnl_unimplemented ? FC_EUNSUPPORTED
                                       : FC_EINVAL;
  return fc_error_set(err, "wav2lip cpu: oneDNN %s failed%s%s: %s", what, layer ? " for " : "",
                      layer ? layer : "", dnnl_status2str(st));
}

#define DN(call, what, layer)                                                                  \
  do {                                                                                         \
    dnnl_status_t st_ = (call);                                                                \
    if (st_ != dnnl_success) {                                                                 \
      err = dnnl_fail(st_, what, layer);                                                       \
      goto out;                                                                                \
    }                                                                                          \
  } while (0)

/* ---- descriptors ---- */

/* An NHWC tensor view: per sample h×w pixels, pixel p at p*pix_stride, with row stride
 * row_stride and sample stride n_stride (all in floats). Dense when the strides are the
 * natural ones. */
static dnnl_status_t md_view(dnnl_memory_desc_t *md, int n, int c, int h, int w, long n_stride,
                             long row_stride, long pix_stride) {
  dnnl_dims_t dims = {n, c, h, w};
  if (pix_stride == c && row_stride == (long)w * c && n_stride == (long)h * w * c)
    return dnnl_memory_desc_init_by_tag(md, 4, dims, dnnl_f32, dnnl_nhwc);
  dnnl_dims_t strides = {n_stride, 1, row_stride, pix_stride};
  return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

static dnnl_status_t md_nhwc(dnnl_memory_desc_t *md, int n, int c, int h, int w) {
  return md_view(md, n, c, h, w, (long)h * w * c, (long)w * c, c);
}

/* ---- plans ---- */

static void plan_destroy(plan *p) {
  if (!p) return;
  for (int i = 0; i < p->nsteps; i++) dnnl_primitive_destroy(p->steps[i].prim);
  for (int i = 0; i < p->nmems; i++) dnnl_memory_destroy(p->mems[i]);
  free(p->steps);
  free(p->mems);
  free(p->scratch);
  free(p);
}

static int plan_mem(plan *p, dstate *s, const dnnl_memory_desc_t *md, void *handle,
                    dnnl_memory_t *out) {
  if (p->nmems == p->capmems) {
    int cap = p->capmems ? 2 * p->capmems : 64;
    dnnl_memory_t *m = realloc(p->mems, (size_t)cap * sizeof *m);
    if (!m) return fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
    p->mems = m, p->capmems = cap;
  }
  dnnl_status_t st = dnnl_memory_create(out, md, s->eng, handle);
  if (st != dnnl_success) return dnnl_fail(st, "memory_create", NULL);
  p->mems[p->nmems++] = *out;
  return FC_OK;
}

/* Appends a step for pd (consumed: the primitive keeps its own copy). */
static int plan_step(plan *p, dnnl_primitive_desc_t pd, const char *what, const char *layer,
                     step **out) {
  int err = FC_OK;
  if (p->nsteps == p->cap) {
    int cap = p->cap ? 2 * p->cap : 128;
    step *st = realloc(p->steps, (size_t)cap * sizeof *st);
    if (!st) {
      err = fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
      goto out;
    }
    p->steps = st, p->cap = cap;
  }
  step *st = &p->steps[p->nsteps];
  memset(st, 0, sizeof *st);
  DN(dnnl_primitive_create(&st->prim, pd), what, layer);
  p->nsteps++;
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (smd) st->scratch_md = *smd; /* else stays zero: no scratchpad */
  *out = st;
out:
  dnnl_primitive_desc_destroy(pd);
  return err;
}

static dnnl_primitive_attr_t make_attr(int sum, int relu) {
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t po = NULL;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
  if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success)
    goto fail;
  if (sum || relu) {
    if (dnnl_post_ops_create(&po) != dnnl_success) goto fail;
    if (sum && dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success) goto fail;
    if (relu && dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) != dnnl_success)
      goto fail;
    if (dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success) goto fail;
    dnnl_post_ops_destroy(po);
  }
  return attr;
fail:
  if (po) dnnl_post_ops_destroy(po);
  dnnl_primitive_attr_destroy(attr);
  return NULL;
}

/* A reorder step (copy with layout change) from src to dst views. */
static int add_reorder(dstate *s, plan *p, const dnnl_memory_desc_t *smd, const float *src,
                       const dnnl_memory_desc_t *dmd, float *dst, const char *layer) {
  int err = FC_OK;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t attr = make_attr(0, 0);
  if (!attr) return fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
  DN(dnnl_reorder_primitive_desc_create(&pd, smd, s->eng, dmd, s->eng, attr), "reorder", layer);
  step *st;
  dnnl_memory_t ms = NULL, md = NULL;
  if ((err = plan_step(p, pd, "reorder", layer, &st))) goto out;
  if ((err = plan_mem(p, s, smd, (void *)src, &ms)) || (err = plan_mem(p, s, dmd, dst, &md)))
    goto out;
  st->args[st->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_FROM, ms};
  st->args[st->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_TO, md};
out:
  dnnl_primitive_attr_destroy(attr);
  return err;
}

/* The weights of c in the layout md, reordered from the plain copy the first time. */
static int weights_for(dstate *s, dconv *c, const dnnl_memory_desc_t *md, dnnl_memory_t *out,
                       const char *layer) {
  for (wvariant *v = c->wv; v; v = v->next)
    if (dnnl_memory_desc_equal(&v->md, md)) {
      *out = v->mem;
      return FC_OK;
    }
  int err = FC_OK;
  dnnl_memory_t user = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t re = NULL;
  wvariant *v = calloc(1, sizeof *v);
  if (!v) return fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
  v->md = *md;
  dnnl_memory_desc_t umd;
  dnnl_dims_t wd = {c->cout, c->cin, c->kh, c->kw};
  DN(dnnl_memory_desc_init_by_tag(&umd, 4, wd, dnnl_f32, dnnl_oihw), "weights desc", layer);
  DN(dnnl_memory_create(&user, &umd, s->eng, (void *)c->w_plain), "memory_create", layer);
  DN(dnnl_memory_create(&v->mem, md, s->eng, DNNL_MEMORY_ALLOCATE), "weights memory", layer);
  DN(dnnl_reorder_primitive_desc_create(&pd, &umd, s->eng, md, s->eng, NULL), "weights reorder",
     layer);
  DN(dnnl_primitive_create(&re, pd), "weights reorder", layer);
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, v->mem}};
  DN(dnnl_primitive_execute(re, s->st, 2, args), "weights reorder", layer);
  DN(dnnl_stream_wait(s->st), "weights reorder", layer);
  v->next = c->wv;
  c->wv = v;
  *out = v->mem;
  v = NULL;
out:
  if (re) dnnl_primitive_destroy(re);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (user) dnnl_memory_destroy(user);
  if (v) {
    if (v->mem) dnnl_memory_destroy(v->mem);
    free(v);
  }
  return err;
}

/* A convolution step: src/dst dense NHWC at the given pointers. */
static int add_conv(dstate *s, plan *p, dconv *c, dnnl_memory_t bias, int batch, const float *src,
                    float *dst, int sum, int relu, const char *layer) {
  int err = FC_OK;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_attr_t attr = make_attr(sum, relu);
  if (!attr) return fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
  dnnl_memory_desc_t smd, wmd, bmd, dmd;
  dnnl_dims_t wd = {c->cout, c->cin, c->kh, c->kw}, bd = {c->cout};
  dnnl_dims_t strides = {c->sh, c->sw}, pl = {c->plh, c->plw}, pr = {c->prh, c->prw};
  DN(md_nhwc(&smd, batch, c->cin, c->ih, c->iw), "src desc", layer);
  DN(md_nhwc(&dmd, batch, c->cout, c->oh, c->ow), "dst desc", layer);
  DN(dnnl_memory_desc_init_by_tag(&wmd, 4, wd, dnnl_f32, dnnl_format_tag_any), "weights desc",
     layer);
  DN(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a), "bias desc", layer);
  dnnl_convolution_desc_t cd;
  DN(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                        &smd, &wmd, &bmd, &dmd, strides, pl, pr),
     "convolution desc", layer);
  DN(dnnl_primitive_desc_create(&pd, &cd, attr, s->eng, NULL), "convolution", layer);
  dnnl_memory_t wmem = NULL, ms = NULL, mdst = NULL;
  if ((err = weights_for(s, c, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), &wmem,
                         layer)))
    goto out;
  step *st;
  err = plan_step(p, pd, "convolution", layer, &st);
  pd = NULL; /* consumed */
  if (err) goto out;
  if ((err = plan_mem(p, s, &smd, (void *)src, &ms)) || (err = plan_mem(p, s, &dmd, dst, &mdst)))
    goto out;
  st->args[st->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ms};
  st->args[st->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, wmem};
  st->args[st->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, bias};
  st->args[st->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mdst};
out:
  if (pd) dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  return err;
}

static int build_op(dstate *s, plan *p, const fc_w2l *m, int i) {
  const w2l_op *op = &m->ops[i];
  const w2l_tensor *ti = &m->tensors[op->in], *to = &m->tensors[op->out];
  const float *x = m->slots[ti->slot];
  float *y = m->slots[to->slot];
  const int B = p->batch;
  dnnl_memory_desc_t a, b;
  int err = FC_OK;

  if (op->kind == W2L_OP_CONCAT) {
    const w2l_tensor *t2 = &m->tensors[op->in2];
    long ns = (long)to->h * to->w * to->c, rs = (long)to->w * to->c;
    DN(md_nhwc(&a, B, ti->c, ti->h, ti->w), "concat desc", "concat");
    DN(md_view(&b, B, ti->c, to->h, to->w, ns, rs, to->c), "concat desc", "concat");
    if ((err = add_reorder(s, p, &a, x, &b, y, "concat"))) return err;
    DN(md_nhwc(&a, B, t2->c, t2->h, t2->w), "concat desc", "concat");
    DN(md_view(&b, B, t2->c, to->h, to->w, ns, rs, to->c), "concat desc", "concat");
    return add_reorder(s, p, &a, m->slots[t2->slot], &b, y + ti->c, "concat");
  }

  const w2l_layer *l = &m->layers[op->layer];
  dlayer *dl = &s->layers[op->layer];
  if (l->kind == W2L_CONV) {
    if (l->residual) { /* dst = x first; the conv then adds into it ("sum" post-op) */
      DN(md_nhwc(&a, B, ti->c, ti->h, ti->w), "residual desc", l->name);
      if ((err = add_reorder(s, p, &a, x, &a, y, l->name))) return err;
    }
    return add_conv(s, p, &dl->conv[0], dl->bias, B, x, y, l->residual, l->relu, l->name);
  }
  if (dl->nconv == 1) /* stride 1: the single phase is the whole output */
    return add_conv(s, p, &dl->conv[0], dl->bias, B, x, y, 0, l->relu, l->name);
  float *tmp = m->slots[m->tensors[op->tmp].slot];
  for (int k = 0; k < dl->nconv; k++) {
    dconv *c = &dl->conv[k];
    if ((err = add_conv(s, p, c, dl->bias, B, x, tmp, 0, l->relu, l->name))) return err;
    /* phase output (dense) -> output pixels (s·i + ry, s·j + rx) */
    DN(md_nhwc(&a, B, c->cout, c->oh, c->ow), "phase desc", l->name);
    DN(md_view(&b, B, c->cout, c->oh, c->ow, (long)to->h * to->w * to->c,
               (long)l->sh * to->w * to->c, (long)l->sw * to->c),
       "phase desc", l->name);
    if ((err = add_reorder(s, p, &a, tmp, &b, y + ((size_t)c->ry * to->w + c->rx) * to->c, l->name)))
      return err;
    tmp += (size_t)B * c->oh * c->ow * c->cout;
  }
out:
  return err;
}

static int build_plan(dstate *s, const fc_w2l *m, int batch, plan **out) {
  int err = FC_OK;
  plan *p = calloc(1, sizeof *p);
  if (!p) return fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
  p->batch = batch;
  for (int i = 0; i < m->nops; i++) {
    p->op_first[i] = p->nsteps;
    if ((err = build_op(s, p, m, i))) goto out;
  }
  p->op_first[m->nops] = p->nsteps;

  /* one scratchpad for all steps (they run one after another) */
  size_t need = 0;
  for (int i = 0; i < p->nsteps; i++) {
    size_t z = dnnl_memory_desc_get_size(&p->steps[i].scratch_md);
    if (z > need) need = z;
  }
  if (need) {
    need = (need + 63) / 64 * 64;
    if (!(p->scratch = aligned_alloc(64, need))) {
      err = fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory for the scratchpad");
      goto out;
    }
    memset(p->scratch, 0, need);
    for (int i = 0; i < p->nsteps; i++) {
      step *st = &p->steps[i];
      dnnl_memory_t mem;
      if (!dnnl_memory_desc_get_size(&st->scratch_md)) continue;
      if ((err = plan_mem(p, s, &st->scratch_md, p->scratch, &mem))) goto out;
      st->args[st->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem};
    }
  }
  *out = p;
  p = NULL;
out:
  plan_destroy(p);
  return err;
}

/* ---- ConvTranspose2d phases ---- */

typedef struct phase1d {
  int k, pl, pr, n; /* conv kernel size, paddings, outputs of this phase */
  int tap[8];       /* conv tap t uses ConvTranspose2d kernel index tap[t] (-1: none) */
} phase1d;

/* Phase r of one dimension: outputs o = s·i + r receive input i + d through kernel index
 * kk = r + p - s·d, for every d that puts kk in [0, k). As a stride-1 convolution (output i
 * reads input i - pl + t) that is a kernel over d in [dmin, dmax] with pl = -dmin. */
static int phase_dim(int k, int s, int p, int in, int out, int r, phase1d *ph) {
  int dmin = INT_MAX, dmax = INT_MIN;
  for (int kk = 0; kk < k; kk++) {
    int t = r + p - kk;
    if (((t % s) + s) % s) continue;
    int d = t / s; /* exact */
    if (d < dmin) dmin = d;
    if (d > dmax) dmax = d;
  }
  if (dmin == INT_MAX) return FC_EUNSUPPORTED; /* no tap reaches this phase */
  ph->k = dmax - dmin + 1;
  ph->pl = -dmin;
  ph->n = (out - r + s - 1) / s;
  ph->pr = ph->n + dmax - in;
  if (ph->k > 8 || ph->pl < 0 || ph->pr < 0 || ph->n < 1) return FC_EUNSUPPORTED;
  for (int t = 0; t < ph->k; t++) {
    int kk = r + p - s * (t + dmin);
    ph->tap[t] = kk >= 0 && kk < k ? kk : -1;
  }
  return FC_OK;
}

static int setup_convt(dlayer *dl, const w2l_layer *l, const w2l_tensor *ti, const w2l_tensor *to) {
  if (l->sh * l->sw > MAX_PHASES) goto unsupported;
  for (int ry = 0; ry < l->sh; ry++)
    for (int rx = 0; rx < l->sw; rx++) {
      phase1d py, px;
      if (phase_dim(l->kh, l->sh, l->ph, ti->h, to->h, ry, &py) ||
          phase_dim(l->kw, l->sw, l->pw, ti->w, to->w, rx, &px))
        goto unsupported;
      dconv *c = &dl->conv[dl->nconv++];
      *c = (dconv){.cin = l->cin, .cout = l->cout, .kh = py.k, .kw = px.k, .sh = 1, .sw = 1,
                   .plh = py.pl, .plw = px.pl, .prh = py.pr, .prw = px.pr, .ih = ti->h,
                   .iw = ti->w, .oh = py.n, .ow = px.n, .ry = ry, .rx = rx};
      size_t n = (size_t)c->cout * c->cin * c->kh * c->kw;
      if (!(c->w_owned = calloc(n, sizeof(float))))
        return fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
      c->w_plain = c->w_owned;
      /* [cout][cin][ty][tx] = transposed-conv weight [cin][cout][tap_y][tap_x] */
      for (int o = 0; o < c->cout; o++)
        for (int i = 0; i < c->cin; i++)
          for (int ty = 0; ty < c->kh; ty++)
            for (int tx = 0; tx < c->kw; tx++) {
              int ky = py.tap[ty], kx = px.tap[tx];
              if (ky < 0 || kx < 0) continue;
              c->w_owned[(((size_t)o * c->cin + i) * c->kh + ty) * c->kw + tx] =
                  l->w[(((size_t)i * l->cout + o) * l->kh + ky) * l->kw + kx];
            }
    }
  return FC_OK;
unsupported:
  return fc_error_set(FC_EUNSUPPORTED, "wav2lip cpu: %s: transposed conv geometry not supported",
                      l->name);
}

/* ---- backend ---- */

static void dn_destroy(void *state) {
  dstate *s = state;
  if (!s) return;
  for (int b = 0; s->plans && b <= s->max_batch; b++) plan_destroy(s->plans[b]);
  free(s->plans);
  for (int li = 0; li < W2L_NLAYERS; li++) {
    dlayer *dl = &s->layers[li];
    for (int k = 0; k < dl->nconv; k++) {
      for (wvariant *v = dl->conv[k].wv, *nx; v; v = nx) {
        nx = v->next;
        dnnl_memory_destroy(v->mem);
        free(v);
      }
      free(dl->conv[k].w_owned);
    }
    if (dl->bias) dnnl_memory_destroy(dl->bias);
  }
  if (s->st) dnnl_stream_destroy(s->st);
  if (s->eng) dnnl_engine_destroy(s->eng);
  free(s);
}

static int dn_create(const fc_w2l *m, void **state) {
  int err = FC_OK;
  dstate *s = calloc(1, sizeof *s);
  if (!s) return fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
  s->max_batch = m->max_batch;
  if (!(s->plans = calloc((size_t)m->max_batch + 1, sizeof *s->plans))) {
    err = fc_error_set(FC_ENOMEM, "wav2lip cpu: out of memory");
    goto out;
  }
  /* oneDNN here is built on OpenMP; libgomp comes in with libdnnl, so its thread-count setter
   * is found at run time without facecast linking OpenMP itself. */
  *(void **)&s->set_threads = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
  /* before any primitive exists: oneDNN sizes its work split by the thread count it sees when
   * a primitive is created, not when it runs */
  if (m->threads > 0 && s->set_threads) s->set_threads(m->threads);
  DN(dnnl_engine_create(&s->eng, dnnl_cpu, 0), "engine_create", NULL);
  DN(dnnl_stream_create(&s->st, s->eng, dnnl_stream_default_flags), "stream_create", NULL);
  for (int i = 0; i < m->nops; i++) {
    const w2l_op *op = &m->ops[i];
    if (op->kind != W2L_OP_CONV) continue;
    const w2l_layer *l = &m->layers[op->layer];
    const w2l_tensor *ti = &m->tensors[op->in], *to = &m->tensors[op->out];
    dlayer *dl = &s->layers[op->layer];
    dnnl_memory_desc_t bmd;
    dnnl_dims_t bd = {l->cout};
    DN(dnnl_memory_desc_init_by_tag(&bmd, 1, bd, dnnl_f32, dnnl_a), "bias desc", l->name);
    DN(dnnl_memory_create(&dl->bias, &bmd, s->eng, l->b), "bias memory", l->name);
    if (l->kind == W2L_CONVT) {
      if ((err = setup_convt(dl, l, ti, to))) goto out;
      continue;
    }
    dl->nconv = 1;
    dl->conv[0] = (dconv){.cin = l->cin, .cout = l->cout, .kh = l->kh, .kw = l->kw,
                          .sh = l->sh, .sw = l->sw, .plh = l->ph, .plw = l->pw, .prh = l->ph,
                          .prw = l->pw, .ih = ti->h, .iw = ti->w, .oh = to->h, .ow = to->w,
                          .w_plain = l->w};
    /* PyTorch drops the last rows a stride does not reach; oneDNN wants the right padding
     * that makes its size formula exact: (ih + pl + pr - k) / s + 1 == oh with no remainder */
    dconv *c = &dl->conv[0];
    c->prh = (c->oh - 1) * c->sh + c->kh - c->ih - c->plh;
    c->prw = (c->ow - 1) * c->sw + c->kw - c->iw - c->plw;
  }
  /* batch max_batch is the one a server uses all the time: build it now, not in a request */
  if ((err = build_plan(s, m, m->max_batch, &s->plans[m->max_batch]))) goto out;
  *state = s;
  s = NULL;
out:
  dn_destroy(s);
  return err;
}

static int dn_prepare(void *state, const fc_w2l *m, int batch) {
  dstate *s = state;
  /* OpenMP's thread count is per calling thread: set it for whichever thread runs infer */
  if (m->threads > 0 && s->set_threads) s->set_threads(m->threads);
  if (s->plans[batch]) return FC_OK;
  return build_plan(s, m, batch, &s->plans[batch]);
}

static int dn_run_op(void *state, const fc_w2l *m, int i, int batch) {
  dstate *s = state;
  const plan *p = s->plans[batch];
  int err = FC_OK;
  for (int k = p->op_first[i]; k < p->op_first[i + 1]; k++) {
    const step *st = &p->steps[k];
    DN(dnnl_primitive_execute(st->prim, s->st, st->nargs, st->args), "execute",
       m->ops[i].kind == W2L_OP_CONV ? m->layers[m->ops[i].layer].name : "concat");
  }
  DN(dnnl_stream_wait(s->st), "stream_wait", NULL);
out:
  return err;
}

const w2l_backend fc_w2l_backend_dnnl = {.name = "cpu", .create = dn_create, .destroy = dn_destroy,
                                         .prepare = dn_prepare, .run_op = dn_run_op};
