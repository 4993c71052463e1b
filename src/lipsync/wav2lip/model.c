/* Wav2Lip: the layer graph, loading a checkpoint into it, buffer planning and the infer loop.
 *
 * Design: the topology (which layers, kernel sizes, strides, paddings, where the residuals and
 * the skip concatenations are) is fixed here, written from tools/wav2lip_ref.py, in two
 * variants (96×96, and the 256×256 wav2lip256; the checkpoint's keys pick one, see
 * build_graph); every channel count comes from the checkpoint's tensor shapes, checked for
 * consistency as the graph is built, so the real networks and the narrow test fixtures load
 * through the same code. The
 * check collects every problem (missing keys, unexpected keys, shape mismatches) and reports
 * them in one line rather than stopping at the first, since a wrong file usually has hundreds.
 *
 * BatchNorm (eval mode, eps 1e-5) is folded into the preceding conv in double precision:
 * scale = gamma / sqrt(var + eps), w' = w * scale[cout], b' = (b - mean) * scale + beta.
 *
 * Tensors are NHWC per sample (see w2l_internal.h). A greedy lifetime allocator packs them into
 * a handful of slots (reusing a slot once its tensor is dead), all allocated at load for
 * max_batch, so fc_w2l_infer itself allocates nothing. Input NCHW→NHWC, output NHWC→NCHW and
 * the final sigmoid happen here, shared by the backends. */
#include "lipsync/wav2lip/w2l_internal.h"

#include "modelfile/checkpoint.h"
#include "modelfile/ckpt_internal.h"
#include "facecast/error.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BN_EPS 1e-5
/* Sanity bounds on what a file may ask for, so a hostile header fails cleanly instead of
 * allocating gigabytes. The real networks: at most 1024 channels (a concatenation), 36 M (96)
 * and 54 M (256) weights, and per frame 2.0 M (96) and 14.2 M (256: the last decoder level
 * alone is 80 × 256 × 256) activation floats in the planned slots. Only channel counts come
 * from the file (the spatial sizes are fixed by the variant), so the activation bound is what
 * stops a 256 file with, say, 8192-channel layers (over 500 M floats per frame). The weights'
 * bound is 2.5 times the 256 network: a torch file's tensors may be broadcast views (stride 0)
 * of a one-element storage, so a few kilobytes can claim any shape, and every float claimed
 * is held twice (the folded copy here and the backend's own layout): 2^28 let a 70 KB file
 * cost 2 GB before the first frame. */
#define MAX_CHANNELS 8192
#define MAX_WEIGHTS (1u << 27)      /* floats, all layers: 512 MB */
#define MAX_ACT_PER_FRAME (1u << 26) /* floats, all slots */

/* ---- checking a checkpoint against the graph ---- */

typedef struct problems {
  const fc_checkpoint *ck;
  unsigned char *used; /* per checkpoint tensor: claimed by the graph */
  int nmissing, nshape;
  char missing[160], shape[200];
} problems;

typedef struct builder {
  fc_w2l *m;
  problems *pr;
  int weight_idx[W2L_NLAYERS][6]; /* checkpoint index: w, b, gamma, beta, mean, var */
  int err;                        /* first structural error (table overflow) */
} builder;

static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, n - o, "[");
  for (int i = 0; i < ndim && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
}

/* Looks a key up and marks it used; records it as missing when absent. */
static int lookup(problems *pr, const char *key, int required) {
  int i = fc_checkpoint_find(pr->ck, key);
  if (i >= 0) {
    pr->used[i] = 1;
  } else if (required) {
    if (pr->nmissing++ == 0) snprintf(pr->missing, sizeof pr->missing, "%.150s", key);
  }
  return i;
}

/* Compares tensor idx's shape with want (entries < 0: not known, accept anything). */
static int check_shape(problems *pr, int idx, const char *key, const int64_t *want, int ndim) {
  if (idx < 0) return 0;
  const fc_tensor_info *ti = fc_checkpoint_info(pr->ck, idx);
  int ok = ti->ndim == ndim;
  for (int d = 0; ok && d < ndim; d++) ok = want[d] < 0 || ti->shape[d] == want[d];
  if (ok) return 1;
  if (pr->nshape++ == 0) {
    char have[64], exp[64];
    shape_str(have, sizeof have, ti->shape, ti->ndim);
    shape_str(exp, sizeof exp, want, ndim);
    /* unknown entries print as -1; say "?" instead */
    for (char *q = exp; (q = strstr(q, "-1")); q++) memmove(q, q + 1, strlen(q)), *q = '?';
    snprintf(pr->shape, sizeof pr->shape, "%s is %s, expected %s", key, have, exp);
  }
  return 0;
}

static int add_tensor(builder *b, int h, int w, int c, const char *tap) {
  fc_w2l *m = b->m;
  if (m->ntensors >= W2L_MAX_TENSORS) {
    b->err = FC_EINVAL;
    return 0;
  }
  w2l_tensor *t = &m->tensors[m->ntensors];
  memset(t, 0, sizeof *t);
  t->h = h, t->w = w, t->c = c, t->slot = -1, t->first = -1, t->last = -1;
  if (tap) snprintf(t->tap, sizeof t->tap, "%s", tap);
  return m->ntensors++;
}

static void add_op(builder *b, int kind, int layer, int in, int in2, int out, int tmp) {
  fc_w2l *m = b->m;
  if (m->nops >= W2L_MAX_OPS) {
    b->err = FC_EINVAL;
    return;
  }
  m->ops[m->nops++] = (w2l_op){kind, layer, in, in2, out, tmp};
}

/* Adds one conv layer reading tensor `in` and returns its output tensor. Geometry comes from
 * the architecture; cin/cout from the checkpoint (cin checked against the input tensor). */
static int conv(builder *b, int in, const char *prefix, int kind, int k, int sh, int sw, int p,
                int op, int res, int bn, int relu, const char *tap) {
  fc_w2l *m = b->m;
  if (b->err || m->nlayers >= W2L_NLAYERS) {
    b->err = FC_EINVAL;
    return in;
  }
  int li = m->nlayers++;
  w2l_layer *l = &m->layers[li];
  memset(l, 0, sizeof *l);
  snprintf(l->name, sizeof l->name, "%s", prefix);
  l->kind = kind, l->bn = bn, l->residual = res, l->relu = relu;
  l->kh = l->kw = k, l->sh = sh, l->sw = sw, l->ph = l->pw = p, l->oph = l->opw = op;

  static const char *const bn_keys[6] = {"conv_block.0.weight", "conv_block.0.bias",
                                         "conv_block.1.weight", "conv_block.1.bias",
                                         "conv_block.1.running_mean", "conv_block.1.running_var"};
  static const char *const plain_keys[2] = {"weight", "bias"};
  char keys[6][96];
  int nk = bn ? 6 : 2;
  problems *pr = b->pr;
  for (int j = 0; j < 6; j++) b->weight_idx[li][j] = -1;
  for (int j = 0; j < nk; j++) {
    snprintf(keys[j], sizeof keys[j], "%s.%s", prefix, bn ? bn_keys[j] : plain_keys[j]);
    b->weight_idx[li][j] = lookup(pr, keys[j], 1);
  }
  if (bn) { /* a buffer PyTorch keeps but inference never reads: accepted, not required */
    char nbt[96];
    snprintf(nbt, sizeof nbt, "%s.conv_block.1.num_batches_tracked", prefix);
    lookup(pr, nbt, 0);
  }

  /* channels: from the weight's shape; unknown (-1) if it is missing or malformed */
  int cin = m->tensors[in].c, cout = -1;
  int wi = b->weight_idx[li][0];
  if (wi >= 0) {
    const fc_tensor_info *ti = fc_checkpoint_info(pr->ck, wi);
    if (ti->ndim == 4 && ti->shape[0] > 0 && ti->shape[1] > 0 && ti->shape[0] <= MAX_CHANNELS &&
        ti->shape[1] <= MAX_CHANNELS) {
      cout = (int)(kind == W2L_CONVT ? ti->shape[1] : ti->shape[0]);
      if (res && cin > 0 && cout != cin) cout = cin; /* reported by the check below */
    }
    int64_t want[4] = {kind == W2L_CONVT ? cin : cout, kind == W2L_CONVT ? cout : cin, k, k};
    if (cout < 0) want[0] = want[1] = -1;
    check_shape(pr, wi, keys[0], want, 4);
  }
  for (int j = 1; j < nk; j++) {
    int64_t want[1] = {cout};
    check_shape(pr, b->weight_idx[li][j], keys[j], want, 1);
  }
  l->cin = cin, l->cout = cout;

  const w2l_tensor *ti = &m->tensors[in];
  int ho = w2l_out_dim(l, ti->h, 1), wo = w2l_out_dim(l, ti->w, 0);
  int out = add_tensor(b, ho, wo, cout, tap);
  int tmp = kind == W2L_CONVT ? add_tensor(b, ho, wo, cout, NULL) : -1;
  add_op(b, W2L_OP_CONV, li, in, -1, out, tmp);
  return out;
}

static int concat(builder *b, int x, int skip, const char *tap) {
  fc_w2l *m = b->m;
  const w2l_tensor *a = &m->tensors[x], *s = &m->tensors[skip];
  if (a->h != s->h || a->w != s->w) b->err = FC_EINVAL; /* the fixed topology guarantees this */
  int c = a->c > 0 && s->c > 0 ? a->c + s->c : -1;
  int out = add_tensor(b, a->h, a->w, c, tap);
  add_op(b, W2L_OP_CONCAT, -1, x, skip, out, -1);
  return out;
}

/* The network, in one of its two variants: the 96×96 original, or the 256×256
 * "wav2lip256" (LiveTalking's wav2lip_v2) with one more encoder level and one more decoder level.
 * Both share the building blocks, the audio encoder and the output block; where they differ:
 *   encoder:  96: 7 blocks, the last one k3 p0 + k1 (3×3 -> 1×1);
 *             256: 8 blocks, block 6 = s2 conv + 1 residual (8×8 -> 4×4), the last one k4 p0 + k1
 *   decoder:  96: 7 blocks, block 1 = ConvT k3 s1 p0 (1 -> 3) + 1 residual;
 *             256: 8 blocks, block 1 = ConvT k4 s1 p0 (1 -> 4) + 1 residual, block 2 = ConvT s2 +
 *             1 residual (4 -> 8); the remaining blocks are the 96 model's blocks 2..6.
 * Face encoder first: its keys come first in the state dict, so the first missing key named in
 * an error is the one PyTorch would name. */
static void build_graph(builder *b, int v256) {
  fc_w2l *m = b->m;
  char name[48], tap[16];
  const int nb = v256 ? 8 : 7;   /* encoder blocks = decoder blocks */
  const int kbot = v256 ? 4 : 3; /* the kernel that takes the encoder to 1×1 and back */
  m->t_mel = add_tensor(b, FC_W2L_MEL_H, FC_W2L_MEL_W, 1, NULL);
  m->t_face = add_tensor(b, m->face, m->face, FC_W2L_FACE_C, NULL);

  /* face encoder: block 0 = k7 p3; blocks 1..nb-2 = s2 conv + residuals; the last = k p0, k1 */
  static const int nres[7] = {0, 2, 3, 2, 2, 1, 1};
  int feat[8];
  int x = m->t_face;
  for (int i = 0; i < nb; i++) {
    int last = i == nb - 1;
    int nl = last ? 2 : 1 + nres[i];
    for (int j = 0; j < nl; j++) {
      snprintf(name, sizeof name, "face_encoder_blocks.%d.%d", i, j);
      snprintf(tap, sizeof tap, "face_f%d", i);
      const char *t = j == nl - 1 ? tap : NULL;
      if (i == 0) x = conv(b, x, name, W2L_CONV, 7, 1, 1, 3, 0, 0, 1, 1, t);
      else if (last) x = conv(b, x, name, W2L_CONV, j ? 1 : kbot, 1, 1, 0, 0, 0, 1, 1, t);
      else if (j == 0) x = conv(b, x, name, W2L_CONV, 3, 2, 2, 1, 0, 0, 1, 1, t);
      else x = conv(b, x, name, W2L_CONV, 3, 1, 1, 1, 0, 1, 1, 1, t);
    }
    feat[i] = x;
  }

  /* audio encoder: one flat Sequential */
  static const struct { int k, sh, sw, p, res; } aud[13] = {
      {3, 1, 1, 1, 0}, {3, 1, 1, 1, 1}, {3, 1, 1, 1, 1}, {3, 3, 1, 1, 0}, {3, 1, 1, 1, 1},
      {3, 1, 1, 1, 1}, {3, 3, 3, 1, 0}, {3, 1, 1, 1, 1}, {3, 1, 1, 1, 1}, {3, 3, 2, 1, 0},
      {3, 1, 1, 1, 1}, {3, 1, 1, 0, 0}, {1, 1, 1, 0, 0}};
  x = m->t_mel;
  for (int i = 0; i < 13; i++) {
    snprintf(name, sizeof name, "audio_encoder.%d", i);
    x = conv(b, x, name, W2L_CONV, aud[i].k, aud[i].sh, aud[i].sw, aud[i].p, 0, aud[i].res, 1, 1,
             i == 12 ? "audio_emb" : NULL);
  }
  int emb = x;

  /* decoder: block 0 = k1 conv; 1 = ConvT kbot s1 p0 + 1 res; the rest = ConvT k3 s2 p1 op1 +
   * 2 res (1 res in the 256 model's block 2); after each block: x = cat((x, feat[nb-1-i]), 1),
   * decoder output first */
  x = emb;
  for (int i = 0; i < nb; i++) {
    int nl = i == 0 ? 1 : i == 1 || (v256 && i == 2) ? 2 : 3;
    for (int j = 0; j < nl; j++) {
      snprintf(name, sizeof name, "face_decoder_blocks.%d.%d", i, j);
      snprintf(tap, sizeof tap, "dec%d_out", i);
      const char *t = j == nl - 1 ? tap : NULL;
      if (i == 0) x = conv(b, x, name, W2L_CONV, 1, 1, 1, 0, 0, 0, 1, 1, t);
      else if (j == 0 && i == 1) x = conv(b, x, name, W2L_CONVT, kbot, 1, 1, 0, 0, 0, 1, 1, t);
      else if (j == 0) x = conv(b, x, name, W2L_CONVT, 3, 2, 2, 1, 1, 0, 1, 1, t);
      else x = conv(b, x, name, W2L_CONV, 3, 1, 1, 1, 0, 1, 1, 1, t);
    }
    snprintf(tap, sizeof tap, "dec%d_cat", i);
    x = concat(b, x, feat[nb - 1 - i], tap);
  }

  x = conv(b, x, "output_block.0", W2L_CONV, 3, 1, 1, 1, 0, 0, 1, 1, "out_conv0");
  x = conv(b, x, "output_block.1", W2L_CONV, 1, 1, 1, 0, 0, 0, 0, 0, "logits");
  m->t_logits = x;
  if (!b->err && (m->tensors[x].h != m->face || m->tensors[x].w != m->face))
    b->err = FC_EINVAL;
  if (m->tensors[x].c >= 0 && m->tensors[x].c != FC_W2L_OUT_C) {
    /* a 32->k output conv with k != 3: report it like any shape mismatch */
    problems *pr = b->pr;
    if (pr->nshape++ == 0)
      snprintf(pr->shape, sizeof pr->shape, "output_block.1.weight has %d output channels, expected %d",
               m->tensors[x].c, FC_W2L_OUT_C);
  }
}

/* ---- weights ---- */

static int read_tensor(const fc_checkpoint *ck, int idx, float *dst, size_t n, const char *what) {
  int err = fc_checkpoint_read_f32(ck, idx, dst, n);
  if (err && err != FC_ENOMEM)
    return fc_error_set(FC_EFORMAT, "checkpoint tensor %s: %s", what, fc_error_detail(err));
  return err;
}

/* Reads layer li's tensors and folds its BatchNorm. */
static int load_layer(fc_w2l *m, const builder *b, const fc_checkpoint *ck, int li) {
  w2l_layer *l = &m->layers[li];
  size_t nw = (size_t)l->cin * l->cout * l->kh * l->kw, co = (size_t)l->cout;
  float *bn = NULL;
  int err = FC_ENOMEM;
  l->w = malloc(nw * sizeof(float));
  l->b = malloc(co * sizeof(float));
  if (!l->w || !l->b) goto out;
  if ((err = read_tensor(ck, b->weight_idx[li][0], l->w, nw, l->name))) goto out;
  if ((err = read_tensor(ck, b->weight_idx[li][1], l->b, co, l->name))) goto out;
  if (!l->bn) goto out;
  err = FC_ENOMEM;
  if (!(bn = malloc(4 * co * sizeof(float)))) goto out;
  for (int j = 0; j < 4; j++)
    if ((err = read_tensor(ck, b->weight_idx[li][2 + j], bn + j * co, co, l->name))) goto out;
  const float *gamma = bn, *beta = bn + co, *mean = bn + 2 * co, *var = bn + 3 * co;
  size_t per = (size_t)l->kh * l->kw; /* one (cin, cout) kernel */
  for (size_t o = 0; o < co; o++) {
    double s = (double)gamma[o] / sqrt((double)var[o] + BN_EPS);
    l->b[o] = (float)(((double)l->b[o] - mean[o]) * s + beta[o]);
    for (size_t i = 0; i < (size_t)l->cin; i++) {
      /* Conv2d [cout][cin][k][k]; ConvTranspose2d [cin][cout][k][k]: scale the cout index */
      float *w = l->kind == W2L_CONVT ? l->w + (i * co + o) * per : l->w + (o * l->cin + i) * per;
      for (size_t k = 0; k < per; k++) w[k] = (float)(w[k] * s);
    }
  }
  err = FC_OK;
out:
  free(bn);
  return err;
}

/* ---- buffer planning ---- */

static size_t tensor_floats(const w2l_tensor *t) { return (size_t)t->h * t->w * t->c; }

/* Greedy: at each op, give its outputs a free slot (best fit, else grow the largest free one,
 * else a new slot), then free the tensors whose last reader was this op. Host buffers only for
 * a backend without infer() (one with it, e.g. on a GPU, only uses the plan). */
static int plan_slots(fc_w2l *m, const w2l_backend *be) {
  const int host_slots = be->infer == NULL;
  int owner[W2L_MAX_TENSORS]; /* tensor holding each slot, -1 = free */
  size_t cap[W2L_MAX_TENSORS];
  int ns = 0;
  for (int t = 0; t < m->ntensors; t++) m->tensors[t].first = -2, m->tensors[t].last = -1;
  m->tensors[m->t_mel].first = m->tensors[m->t_face].first = -1;
  for (int i = 0; i < m->nops; i++) {
    const w2l_op *o = &m->ops[i];
    m->tensors[o->out].first = i;
    m->tensors[o->in].last = i;
    if (o->in2 >= 0) m->tensors[o->in2].last = i;
    if (o->tmp >= 0) m->tensors[o->tmp].first = m->tensors[o->tmp].last = i;
  }
  m->tensors[m->t_logits].last = m->nops; /* read by the output conversion */
  /* A concat read only by a transposed convolution keeps its inputs alive until that has
   * run when the backend may run the two as one kernel (w2l_backend.fuses_concat_convt). */
  const int fuse = be->fuses_concat_convt && be->fuses_concat_convt(m);
  for (int i = 0; fuse && i < m->nops; i++) {
    const w2l_op *o = &m->ops[i];
    if (o->kind != W2L_OP_CONCAT) continue;
    int reader = -1, readers = 0;
    for (int j = 0; j < m->nops; j++)
      if (m->ops[j].in == o->out || m->ops[j].in2 == o->out) reader = j, readers++;
    if (readers != 1 || reader <= i || m->ops[reader].kind != W2L_OP_CONV ||
        m->layers[m->ops[reader].layer].kind != W2L_CONVT)
      continue;
    if (m->tensors[o->in].last < reader) m->tensors[o->in].last = reader;
    if (o->in2 >= 0 && m->tensors[o->in2].last < reader) m->tensors[o->in2].last = reader;
  }

  for (int step = -1; step < m->nops; step++) {
    for (int t = 0; t < m->ntensors; t++) {
      if (m->tensors[t].first != step) continue;
      size_t need = tensor_floats(&m->tensors[t]);
      int best = -1, largest = -1;
      for (int s = 0; s < ns; s++) {
        if (owner[s] >= 0) continue;
        if (cap[s] >= need && (best < 0 || cap[s] < cap[best])) best = s;
        if (largest < 0 || cap[s] > cap[largest]) largest = s;
      }
      if (best < 0) best = largest;
      if (best < 0) best = ns++, cap[best] = 0;
      if (cap[best] < need) cap[best] = need;
      owner[best] = t;
      m->tensors[t].slot = best;
    }
    for (int t = 0; t < m->ntensors; t++)
      if (m->tensors[t].last == step && m->tensors[t].slot >= 0) owner[m->tensors[t].slot] = -1;
  }

  size_t total = 0;
  for (int i = 0; i < ns; i++) total += cap[i];
  if (total > MAX_ACT_PER_FRAME)
    return fc_error_set(FC_EFORMAT, "wav2lip: implausibly wide network (%zu activations per frame)",
                        total);
  m->nslots = ns;
  m->slots = calloc((size_t)ns, sizeof *m->slots);
  m->slot_floats = calloc((size_t)ns, sizeof *m->slot_floats);
  if (!m->slots || !m->slot_floats) return FC_ENOMEM;
  for (int s = 0; s < ns; s++) {
    size_t bytes = cap[s] * (size_t)m->max_batch * sizeof(float);
    bytes = (bytes + 63) / 64 * 64;
    m->slot_floats[s] = cap[s];
    if (!host_slots) continue; /* the backend keeps its own (device) buffers */
    if (!(m->slots[s] = aligned_alloc(64, bytes))) return FC_ENOMEM;
    memset(m->slots[s], 0, bytes); /* touch now, not in the first infer */
  }
  return FC_OK;
}

/* Appends "; missing KEY (and N more)" style parts to the one-line load error. */
static void append_problem(char *msg, size_t n, size_t *o, const char **sep, const char *what,
                           const char *first, int count) {
  if (!count || *o >= n) return;
  int w = count > 1 ? snprintf(msg + *o, n - *o, "%s %s %s (and %d more)", *sep, what, first, count - 1)
                    : snprintf(msg + *o, n - *o, "%s %s %s", *sep, what, first);
  *o += w > 0 ? (size_t)w : 0;
  *sep = ";";
}

/* ---- public API ---- */

static int parse_device(const char *dev, const w2l_backend **be, int *cuda_device) {
  if (!dev || strcmp(dev, "cpu") == 0) {
    *be = &fc_w2l_backend_dnnl;
    return FC_OK;
  }
  if (strcmp(dev, "cpu-ref") == 0) {
    *be = &fc_w2l_backend_ref;
    return FC_OK;
  }
  if (strncmp(dev, "cuda", 4) == 0 &&
      (dev[4] == 0 || (dev[4] == ':' && dev[5] && strlen(dev + 5) <= 4 &&
                       strspn(dev + 5, "0123456789") == strlen(dev + 5)))) {
#ifdef FC_HAVE_CUDA
    *be = &fc_w2l_backend_cudnn;
    *cuda_device = dev[4] ? atoi(dev + 5) : 0;
    return FC_OK;
#else
    (void)cuda_device;
    return fc_error_set(FC_EUNSUPPORTED,
                        "wav2lip: device '%s': this build has no CUDA support (use cpu or cpu-ref)",
                        dev);
#endif
  }
  return fc_error_set(FC_EINVAL, "wav2lip: unknown device '%s' (expected cpu, cpu-ref or cuda[:N])",
                      dev);
}

/* Both entry points: the checkpoint from the file at path, or (data != NULL) from the bytes
 * data[0..size), path then only naming it in error details. */
static fc_w2l *load(const char *path, const void *data, size_t size, const fc_w2l_params *p,
                    int *err_out) {
  fc_w2l_params def = {0};
  fc_checkpoint *ck = NULL;
  fc_w2l *m = NULL;
  problems pr = {0};
  builder *b = NULL;
  int err;
  if (!p) p = &def;
  const w2l_backend *be = NULL;
  fc_error_clear();
  if (!path) {
    err = fc_error_set(FC_EINVAL, "wav2lip: no checkpoint given");
    goto fail;
  }
  int cuda_device = 0;
  if ((err = parse_device(p->device, &be, &cuda_device))) goto fail;
  if (p->dtype < FC_W2L_FP32 || p->dtype > FC_W2L_BF16) {
    err = fc_error_set(FC_EINVAL, "wav2lip: unknown dtype %d", p->dtype);
    goto fail;
  }
  if (p->dtype != FC_W2L_FP32 && !be->infer) {
    err = fc_error_set(FC_EUNSUPPORTED, "wav2lip: %s needs a cuda device ('%s' computes in fp32)",
                       p->dtype == FC_W2L_FP16 ? "fp16" : "bf16", p->device ? p->device : "cpu");
    goto fail;
  }
  if (p->max_batch < 0 || p->max_batch > 4096 || p->threads < 0 || p->threads > 4096) {
    err = fc_error_set(FC_EINVAL, "wav2lip: max_batch %d / threads %d out of range", p->max_batch,
                       p->threads);
    goto fail;
  }
  ck = data ? fc_checkpoint_load_mem(data, size, path, FC_CKPT_AUTO, &err)
            : fc_checkpoint_load(path, &err);
  if (!ck) goto fail;

  err = FC_ENOMEM;
  if (!(m = calloc(1, sizeof *m)) || !(b = calloc(1, sizeof *b))) goto fail;
  m->max_batch = p->max_batch ? p->max_batch : 16;
  m->threads = p->threads;
  m->dtype = p->dtype;
  m->cuda_device = cuda_device;
  const char *su = getenv("W2L_CUDA_SEARCH_UPTO");
  m->search_upto = su && *su ? atoi(su) : p->search_upto;
  int nt = fc_checkpoint_count(ck);
  if (!(pr.used = calloc((size_t)nt + 1, 1))) goto fail;
  pr.ck = ck;
  b->m = m, b->pr = &pr;
  /* the variant: only the 256 model has an eighth encoder block (the weight, not any key of
   * it: a 96 file with a stray block-7 bias is a broken 96 file, reported as unexpected) */
  int v256 = fc_checkpoint_find(ck, W2L_KEY_256) >= 0;
  m->face = v256 ? FC_W2L_FACE_256 : FC_W2L_FACE;
  build_graph(b, v256);

  int nunexp = 0;
  char unexp[160] = "";
  for (int i = 0; i < nt; i++)
    if (!pr.used[i] && nunexp++ == 0)
      snprintf(unexp, sizeof unexp, "%.150s", fc_checkpoint_info(ck, i)->name);
  if (pr.nmissing || nunexp || pr.nshape) {
    char msg[768];
    size_t o = (size_t)snprintf(msg, sizeof msg, "%s: checkpoint does not look like Wav2Lip%s", path,
                                v256 ? " 256x256 (it has " W2L_KEY_256 ")" : "");
    const char *sep = ":";
    append_problem(msg, sizeof msg, &o, &sep, "missing", pr.missing, pr.nmissing);
    append_problem(msg, sizeof msg, &o, &sep, "unexpected", unexp, nunexp);
    append_problem(msg, sizeof msg, &o, &sep, "shape mismatch:", pr.shape, pr.nshape);
    err = fc_error_set(FC_EFORMAT, "%s", msg);
    goto fail;
  }
  if (b->err) {
    err = fc_error_set(FC_EINVAL, "wav2lip: internal error building the layer graph");
    goto fail;
  }

  size_t total = 0;
  for (int li = 0; li < m->nlayers; li++) {
    const w2l_layer *l = &m->layers[li];
    total += (size_t)l->cin * l->cout * l->kh * l->kw;
  }
  if (total > MAX_WEIGHTS) {
    err = fc_error_set(FC_EFORMAT, "%s: implausibly large Wav2Lip (%zu weights)", path, total);
    goto fail;
  }
  /* the plan (and its bound on activations) before any weight is read: a file that asks for
   * too much is refused before it costs memory */
  if ((err = plan_slots(m, be))) goto fail;
  for (int li = 0; li < m->nlayers; li++)
    if ((err = load_layer(m, b, ck, li))) goto fail;
  fc_checkpoint_destroy(ck);
  ck = NULL;

  m->be = be;
  if ((err = be->create(m, &m->bstate))) {
    m->be = NULL; /* create cleans up after itself */
    goto fail;
  }
  free(pr.used);
  free(b);
  if (err_out) *err_out = FC_OK;
  return m;

fail:
  if (err == FC_ENOMEM && strcmp(fc_error_detail(err), fc_strerror(err)) == 0)
    fc_error_set(FC_ENOMEM, "wav2lip: out of memory loading %s", path ? path : "(null)");
  free(pr.used);
  free(b);
  fc_checkpoint_destroy(ck);
  fc_w2l_destroy(m);
  if (err_out) *err_out = err;
  return NULL;
}

fc_w2l *fc_w2l_load(const char *path, const fc_w2l_params *p, int *err_out) {
  return load(path, NULL, 0, p, err_out);
}

fc_w2l *fc_w2l_load_mem(const void *data, size_t size, const char *name, const fc_w2l_params *p,
                        int *err_out) {
  if (!data) {
    fc_error_clear();
    int err = fc_error_set(FC_EINVAL, "wav2lip: no checkpoint bytes given");
    if (err_out) *err_out = err;
    return NULL;
  }
  return load(name ? name : "(memory)", data, size, p, err_out);
}

void fc_w2l_destroy(fc_w2l *m) {
  if (!m) return;
  if (m->be) m->be->destroy(m->bstate);
  for (int li = 0; li < m->nlayers; li++) {
    free(m->layers[li].w);
    free(m->layers[li].b);
  }
  free(m->c_crops);
  free(m->c_out);
  free(m->c_mel);
  for (int s = 0; m->slots && s < m->nslots; s++) free(m->slots[s]);
  free(m->slots);
  free(m->slot_floats);
  free(m);
}

int fc_w2l_face_size(const fc_w2l *m) { return m ? m->face : 0; }

long long fc_w2l_macs_per_frame(const fc_w2l *m) {
  long long macs = 0;
  for (int i = 0; i < m->nops; i++) {
    const w2l_op *o = &m->ops[i];
    if (o->kind != W2L_OP_CONV) continue;
    const w2l_layer *l = &m->layers[o->layer];
    const w2l_tensor *t = &m->tensors[l->kind == W2L_CONVT ? o->in : o->out];
    macs += (long long)t->h * t->w * l->cin * l->cout * l->kh * l->kw;
  }
  return macs;
}

int w2l_face_split_of(const fc_w2l *m, w2l_face_split *fs) {
  unsigned char face[W2L_MAX_TENSORS] = {0};
  memset(fs, 0, sizeof *fs);
  face[m->t_face] = 1;
  int e = 0;
  while (e < m->nops && m->ops[e].kind == W2L_OP_CONV && face[m->ops[e].in]) face[m->ops[e++].out] = 1;
  if (e == 0) return 0;
  w2l_face_split r = {.face_ops = e};
  for (int i = e; i < m->nops; i++) {
    const w2l_op *o = &m->ops[i];
    if (face[o->in] || face[o->out]) return 0;
    if (o->kind != W2L_OP_CONCAT || !face[o->in2]) continue;
    if (r.nskip == W2L_MAX_SKIPS) return 0;
    const w2l_tensor *t = &m->tensors[o->in2];
    r.skip_op[r.nskip] = i;
    r.skip_off[r.nskip++] = r.frame_elems;
    r.frame_elems += ((size_t)t->h * t->w * t->c + 7) & ~(size_t)7;
  }
  if (!r.nskip) return 0;
  *fs = r;
  return 1;
}

/* Host side of the u8 path for backends without infer(): the six NHWC input channels from RGB
 * bytes, and bytes from the logits (the cuda backend does both in w2l_kernels.cu). */
static void crops_to_nhwc(const unsigned char *crops, float *dst, int batch, int F) {
  for (size_t i = 0; i < (size_t)batch * F * F; i++) {
    const unsigned char *px = crops + i * 3;
    float r = px[0] / 255.0f, g = px[1] / 255.0f, b = px[2] / 255.0f;
    int upper = (int)((i / F) % F) < F / 2;
    float *o = dst + i * FC_W2L_FACE_C;
    o[0] = upper ? b : 0, o[1] = upper ? g : 0, o[2] = upper ? r : 0;
    o[3] = b, o[4] = g, o[5] = r;
  }
}

static int run(fc_w2l *m, int io, const float *mel, const void *in, void *out, int batch,
               fc_w2l_tap_fn tap, void *user) {
  if (!m || (io != W2L_IO_RESIDENT && (!mel || !in || !out)))
    return fc_error_set(FC_EINVAL, "wav2lip: infer needs a model and mel, faces, out buffers");
  if (batch < 1 || batch > m->max_batch)
    return fc_error_set(FC_EINVAL, "wav2lip: batch %d out of range 1..%d (max_batch)", batch,
                        m->max_batch);
  if (io == W2L_IO_RESIDENT && !m->warm)
    return fc_error_set(FC_EINVAL, "wav2lip: run_resident before any infer call");
  int err = m->be->prepare(m->bstate, m, batch);
  if (err) return err;
  if (m->be->infer) {
    if (tap) return fc_error_set(FC_EUNSUPPORTED, "wav2lip: device %s has no layer taps", m->be->name);
    err = m->be->infer(m->bstate, m, io, mel, in, out, batch);
    if (!err && io != W2L_IO_RESIDENT) m->warm = 1;
    return err;
  }

  /* inputs: mel has one channel, so NCHW and NHWC are the same bytes; faces are transposed */
  const int F = m->face, C = FC_W2L_FACE_C, P = F * F;
  float *fx = m->slots[m->tensors[m->t_face].slot];
  if (io != W2L_IO_RESIDENT)
    memcpy(m->slots[m->tensors[m->t_mel].slot], mel,
           (size_t)batch * FC_W2L_MEL_H * FC_W2L_MEL_W * sizeof(float));
  if (io == W2L_IO_U8) {
    crops_to_nhwc(in, fx, batch, F);
  } else if (io == W2L_IO_F32) {
    const float *faces = in;
    for (int n = 0; n < batch; n++) {
      const float *src = faces + (size_t)n * C * P;
      float *dst = fx + (size_t)n * C * P;
      for (int i = 0; i < P; i++)
        for (int c = 0; c < C; c++) dst[(size_t)i * C + c] = src[(size_t)c * P + i];
    }
  }

  for (int i = 0; i < m->nops; i++) {
    if ((err = m->be->run_op(m->bstate, m, i, batch))) return err;
    const w2l_tensor *t = &m->tensors[m->ops[i].out];
    if (tap && t->tap[0]) tap(t->tap, m->slots[t->slot], batch, t->h, t->w, t->c, user);
  }
  if (io != W2L_IO_RESIDENT) m->warm = 1;

  /* output: NHWC logits -> NCHW sigmoid, or RGB bytes */
  const float *lg = m->slots[m->tensors[m->t_logits].slot];
  const int K = FC_W2L_OUT_C;
  if (io == W2L_IO_U8) {
    unsigned char *o8 = out;
    for (size_t i = 0; i < (size_t)batch * P; i++)
      for (int c = 0; c < K; c++) {
        float v = 255.0f / (1.0f + expf(-lg[i * K + (2 - c)]));
        o8[i * K + c] = (unsigned char)lrintf(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  } else if (io == W2L_IO_F32) {
    float *of = out;
    for (int n = 0; n < batch; n++) {
      const float *src = lg + (size_t)n * K * P;
      float *dst = of + (size_t)n * K * P;
      for (int i = 0; i < P; i++)
        for (int c = 0; c < K; c++) dst[(size_t)c * P + i] = 1.0f / (1.0f + expf(-src[(size_t)i * K + c]));
    }
  }
  return FC_OK;
}

int fc_w2l_infer_tap(fc_w2l *m, const float *mel, const float *faces, float *out, int batch,
                     fc_w2l_tap_fn tap, void *user) {
  return run(m, W2L_IO_F32, mel, faces, out, batch, tap, user);
}

int fc_w2l_infer(fc_w2l *m, const float *mel, const float *faces, float *out, int batch) {
  return run(m, W2L_IO_F32, mel, faces, out, batch, NULL, NULL);
}

int fc_w2l_infer_u8(fc_w2l *m, const float *mel, const unsigned char *crops, unsigned char *out,
                    int batch) {
  return run(m, W2L_IO_U8, mel, crops, out, batch, NULL, NULL);
}

int fc_w2l_run_resident(fc_w2l *m, int batch) {
  return run(m, W2L_IO_RESIDENT, NULL, NULL, NULL, batch, NULL, NULL);
}

int fc_w2l_device_memory(const fc_w2l *m, size_t *free_bytes, size_t *total_bytes) {
  if (!m || !free_bytes || !total_bytes) return fc_error_set(FC_EINVAL, "wav2lip: bad arguments");
  if (!m->be || !m->be->device_memory)
    return fc_error_set(FC_EUNSUPPORTED, "wav2lip: device %s has no device memory", m->be ? m->be->name : "?");
  return m->be->device_memory(m->bstate, free_bytes, total_bytes);
}

void fc_w2l_describe(const fc_w2l *m, char *buf, size_t n) {
  if (!buf || !n) return;
  buf[0] = 0;
  if (m && m->be && m->be->describe) m->be->describe(m->bstate, buf, n);
}

int fc_w2l_set_feature_cache(fc_w2l *m, int on) {
  if (!m) return fc_error_set(FC_EINVAL, "wav2lip: bad arguments");
  if (m->be && m->be->features) return m->be->features(m->bstate, on);
  return on ? fc_error_set(FC_EUNSUPPORTED, "wav2lip: device %s keeps no face features",
                           m->be ? m->be->name : "?")
            : FC_OK;
}

void fc_w2l_feature_stats_get(const fc_w2l *m, fc_w2l_feature_stats *st) {
  if (!st) return;
  memset(st, 0, sizeof *st);
  if (m && m->be && m->be->feature_stats) m->be->feature_stats(m->bstate, st);
}

size_t fc_w2l_device_bytes(const fc_w2l *m) {
  return m && m->be && m->be->device_bytes ? m->be->device_bytes(m->bstate) : 0;
}
