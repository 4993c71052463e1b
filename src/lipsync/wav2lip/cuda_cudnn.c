/* Wav2Lip "cuda[:N]": the ops as cuDNN 9 (legacy API) calls on one CUDA stream, fp32 or fp16.
 *
 * Layout: every tensor is NHWC in device slots that mirror model.c's slot plan (so the host
 * slots are not allocated for this backend); weights are re-laid out once at load into cuDNN's
 * NHWC filter format (KRSC), converted to fp16 on the device when fp16 is asked for. Bias stays
 * fp32 for our epilogue kernel, with a copy in the data type for the fused cuDNN call.
 *
 * Per batch size a plan is built the first time that size is used and kept: tensor descriptors
 * and the fastest algorithm of each convolution (cudnnFind*, which times them), plus one shared
 * workspace grown to the largest need. fc_w2l_infer then allocates nothing: the inputs go
 * through pinned host staging buffers, NCHW->NHWC (and fp16) on the device, the ops, and a
 * sigmoid kernel writing NCHW fp32 back to pinned memory.
 *
 * How each op maps:
 *   - Conv2d + BN + ReLU (+ residual): cudnnConvolutionBiasActivationForward, z = the block's
 *     input for y = relu(conv(x) + b + x). Where cuDNN refuses that call for a configuration
 *     (it is checked per layer, on the first run), cudnnConvolutionForward + our bias/act kernel.
 *   - The last 1x1 conv (no ReLU; the fused call allows an identity activation with one
 *     algorithm only): cudnnConvolutionForward + bias kernel.
 *   - ConvTranspose2d: cudnnConvolutionBackwardData with the PyTorch weights as the forward
 *     filter (K = ConvT input channels), output padding through the dx size; + bias/ReLU kernel.
 *   - concat: one kernel writing both channel ranges.
 * fp16: data fp16, accumulation fp32 (CUDNN_DATA_FLOAT compute type, tensor-op math). fp32 uses
 * FMA math (no TF32), so it matches the CPU to ~1e-5.
 * Measured on an H200 (cuDNN 9.14), max |out - PyTorch float64|: fp32 2.4e-5 (width-16 fixture)
 * and 1.6e-5 (full width); fp16 0.021 and 0.014, the same with the fused and unfused paths and
 * fixed algorithms (so fp16 rounding, not a path's bug).
 *
 * Diagnostics (environment, read at load): W2L_CUDA_NOFUSE=1, W2L_CUDA_FIXED_ALGO=1 and
 * W2L_CUDA_DEBUG=1 (per-op algorithm and output range on stderr; that one allocates and syncs). */
#include "lipsync/wav2lip/w2l_internal.h"
#include "lipsync/wav2lip/w2l_cuda.h"

#include "facecast/error.h"

#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WS_LIMIT ((size_t)2 << 30) /* largest workspace an algorithm may ask for */
#define NALGO 8

typedef struct clayer {
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnTensorDescriptor_t bd_dt, bd_f32; /* bias [1][cout][1][1] in the data type / fp32 */
  void *w;                               /* KRSC, data type */
  float *b32;                            /* fp32 bias */
  void *bdt;                             /* bias in the data type (== b32 for fp32) */
  int fused;                             /* 0 untried, 1 bias in dt, 2 fp32 bias, -1 unfused */
} clayer;

typedef struct cop {
  cudnnTensorDescriptor_t x, y;
  int algo;
  cudnnMathType_t math;
} cop;

typedef struct cplan {
  int batch;
  cop ops[W2L_MAX_OPS];
  struct cplan *next;
} cplan;

typedef struct cstate {
  int dev, half;
  size_t esz;
  cudnnDataType_t dt;
  cudaStream_t st;
  cudnnHandle_t h;
  cudnnActivationDescriptor_t relu;
  clayer layers[W2L_NLAYERS];
  int nlayers;
  void **slots;
  int nslots;
  float *d_in, *d_out, *h_in, *h_out; /* staging: faces then mel (fp32 NCHW); output */
  void *ws;
  size_t ws_size;
  cplan *plans;
  /* diagnostics from the environment, read at load: W2L_CUDA_NOFUSE=1 never uses the fused
   * cuDNN call; W2L_CUDA_FIXED_ALGO=1 takes IMPLICIT_PRECOMP_GEMM / BWD_DATA_ALGO_1 instead of
   * timing the algorithms; W2L_CUDA_DEBUG=1 prints each op's algorithm and output range */
  int nofuse, fixed_algo, debug;
} cstate;

static int cuda_err(cudaError_t e, const char *what) {
  cudaGetLastError(); /* clear it */
  return fc_error_set(e == cudaErrorMemoryAllocation ? FC_ENOMEM : FC_EUNSUPPORTED,
                      "wav2lip cuda: %s: %s", what, cudaGetErrorString(e));
}

static int dnn_err(cudnnStatus_t s, const char *what) {
  return fc_error_set(s == CUDNN_STATUS_ALLOC_FAILED ? FC_ENOMEM : FC_EUNSUPPORTED,
                      "wav2lip cuda: %s: %s", what, cudnnGetErrorString(s));
}

#define CU(call, what)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) return cuda_err(e_, what);                                              \
  } while (0)
#define DNN(call, what)                                                                            \
  do {                                                                                             \
    cudnnStatus_t s_ = (call);                                                                     \
    if (s_ != CUDNN_STATUS_SUCCESS) return dnn_err(s_, what);                                      \
  } while (0)

static void free_plan(cplan *p) {
  for (int i = 0; i < W2L_MAX_OPS; i++) {
    if (p->ops[i].x) cudnnDestroyTensorDescriptor(p->ops[i].x);
    if (p->ops[i].y) cudnnDestroyTensorDescriptor(p->ops[i].y);
  }
  free(p);
}

static void free_plans(cstate *s) {
  while (s->plans) {
    cplan *p = s->plans;
    s->plans = p->next;
    free_plan(p);
  }
}

static void cuda_destroy(void *state) {
  cstate *s = state;
  if (!s) return;
  if (s->st) cudaStreamSynchronize(s->st);
  free_plans(s);
  for (int i = 0; i < s->nlayers; i++) {
    clayer *l = &s->layers[i];
    if (l->wd) cudnnDestroyFilterDescriptor(l->wd);
    if (l->cd) cudnnDestroyConvolutionDescriptor(l->cd);
    if (l->bd_dt) cudnnDestroyTensorDescriptor(l->bd_dt);
    if (l->bd_f32) cudnnDestroyTensorDescriptor(l->bd_f32);
    cudaFree(l->w);
    if (l->bdt != l->b32) cudaFree(l->bdt);
    cudaFree(l->b32);
  }
  for (int i = 0; s->slots && i < s->nslots; i++) cudaFree(s->slots[i]);
  free(s->slots);
  cudaFree(s->d_in);
  cudaFree(s->d_out);
  cudaFreeHost(s->h_in);
  cudaFreeHost(s->h_out);
  cudaFree(s->ws);
  if (s->relu) cudnnDestroyActivationDescriptor(s->relu);
  if (s->h) cudnnDestroy(s->h);
  if (s->st) cudaStreamDestroy(s->st);
  free(s);
}

/* Uploads n floats (host) as the data type into a new device buffer; tmp: fp32 scratch.
 * Everything goes through our (non-blocking) stream: a plain cudaMemcpy from pageable memory
 * may return before its DMA is done, and nothing would order it before the conversion kernel. */
static int upload(cstate *s, const float *src, size_t n, void **dst, float *tmp) {
  CU(cudaMalloc(dst, n * s->esz), "weights");
  CU(cudaMemcpyAsync(s->half ? (void *)tmp : *dst, src, n * sizeof(float), cudaMemcpyHostToDevice,
                     s->st),
     "upload");
  if (s->half) CU((cudaError_t)w2l_cuda_f32_to_f16(tmp, *dst, n, s->st), "fp16 conversion");
  CU(cudaStreamSynchronize(s->st), "upload");
  return FC_OK;
}

static int setup_layer(cstate *s, const w2l_layer *l, clayer *c, float *host, float *tmp) {
  int K = l->kind == W2L_CONVT ? l->cin : l->cout, C = l->kind == W2L_CONVT ? l->cout : l->cin;
  int R = l->kh, S = l->kw;
  /* PyTorch [K][C][R][S] (Conv2d: K = cout; ConvTranspose2d [cin][cout]: K = cin) -> KRSC */
  for (int k = 0; k < K; k++)
    for (int ci = 0; ci < C; ci++)
      for (int r = 0; r < R; r++)
        for (int q = 0; q < S; q++)
          host[(((size_t)k * R + r) * S + q) * C + ci] = l->w[(((size_t)k * C + ci) * R + r) * S + q];
  int err = upload(s, host, (size_t)K * C * R * S, &c->w, tmp);
  if (err) return err;
  CU(cudaMalloc((void **)&c->b32, (size_t)l->cout * sizeof(float)), "bias");
  CU(cudaMemcpyAsync(c->b32, l->b, (size_t)l->cout * sizeof(float), cudaMemcpyHostToDevice, s->st),
     "bias");
  CU(cudaStreamSynchronize(s->st), "bias");
  if (s->half) {
    if ((err = upload(s, l->b, (size_t)l->cout, &c->bdt, tmp))) return err;
  } else {
    c->bdt = c->b32;
  }
  DNN(cudnnCreateFilterDescriptor(&c->wd), "filter");
  DNN(cudnnSetFilter4dDescriptor(c->wd, s->dt, CUDNN_TENSOR_NHWC, K, C, R, S), "filter");
  DNN(cudnnCreateConvolutionDescriptor(&c->cd), "conv");
  DNN(cudnnSetConvolution2dDescriptor(c->cd, l->ph, l->pw, l->sh, l->sw, 1, 1,
                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      "conv");
  DNN(cudnnCreateTensorDescriptor(&c->bd_dt), "bias");
  DNN(cudnnSetTensor4dDescriptor(c->bd_dt, CUDNN_TENSOR_NHWC, s->dt, 1, l->cout, 1, 1), "bias");
  DNN(cudnnCreateTensorDescriptor(&c->bd_f32), "bias");
  DNN(cudnnSetTensor4dDescriptor(c->bd_f32, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, l->cout, 1, 1),
      "bias");
  c->fused = l->relu && !s->nofuse ? 0 : -1;
  return FC_OK;
}

static int create_inner(cstate *s, const fc_w2l *m) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    cudaGetLastError();
    return fc_error_set(FC_EUNSUPPORTED, "wav2lip: no CUDA device (%s)",
                        e != cudaSuccess ? cudaGetErrorString(e) : "none found");
  }
  if (s->dev >= n)
    return fc_error_set(FC_EUNSUPPORTED, "wav2lip: no CUDA device %d (%d present)", s->dev, n);
  CU(cudaSetDevice(s->dev), "cudaSetDevice");
  CU(cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking), "stream");
  DNN(cudnnCreate(&s->h), "cudnnCreate");
  DNN(cudnnSetStream(s->h, s->st), "cudnnSetStream");
  DNN(cudnnCreateActivationDescriptor(&s->relu), "activation");
  DNN(cudnnSetActivationDescriptor(s->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
      "activation");

  size_t maxw = 0;
  for (int i = 0; i < m->nlayers; i++) {
    const w2l_layer *l = &m->layers[i];
    size_t nw = (size_t)l->cin * l->cout * l->kh * l->kw;
    if (nw > maxw) maxw = nw;
  }
  float *host = malloc(maxw * sizeof(float)), *tmp = NULL;
  if (!host) return FC_ENOMEM;
  int err = FC_OK;
  e = cudaMalloc((void **)&tmp, maxw * sizeof(float));
  if (e != cudaSuccess) err = cuda_err(e, "weights");
  for (int i = 0; !err && i < m->nlayers; i++) {
    s->nlayers = i + 1;
    err = setup_layer(s, &m->layers[i], &s->layers[i], host, tmp);
  }
  free(host);
  cudaFree(tmp);
  if (err) return err;

  s->nslots = m->nslots;
  if (!(s->slots = calloc((size_t)m->nslots, sizeof *s->slots))) return FC_ENOMEM;
  for (int i = 0; i < m->nslots; i++) {
    size_t bytes = m->slot_floats[i] * (size_t)m->max_batch * s->esz;
    CU(cudaMalloc(&s->slots[i], bytes ? bytes : 16), "activation buffers");
    CU(cudaMemsetAsync(s->slots[i], 0, bytes ? bytes : 16, s->st), "activation buffers");
  }
  size_t in = (size_t)m->max_batch * (FC_W2L_FACE_C * FC_W2L_FACE * FC_W2L_FACE +
                                      FC_W2L_MEL_H * FC_W2L_MEL_W);
  size_t out = (size_t)m->max_batch * FC_W2L_OUT_C * FC_W2L_FACE * FC_W2L_FACE;
  CU(cudaMalloc((void **)&s->d_in, in * sizeof(float)), "staging");
  CU(cudaMalloc((void **)&s->d_out, out * sizeof(float)), "staging");
  CU(cudaMallocHost((void **)&s->h_in, in * sizeof(float)), "pinned staging");
  CU(cudaMallocHost((void **)&s->h_out, out * sizeof(float)), "pinned staging");
  CU(cudaStreamSynchronize(s->st), "activation buffers");
  return FC_OK;
}

static int cuda_create(const fc_w2l *m, void **state) {
  cstate *s = calloc(1, sizeof *s);
  if (!s) return FC_ENOMEM;
  s->dev = m->cuda_device;
  s->half = m->fp16;
  s->esz = s->half ? 2 : 4;
  s->dt = s->half ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  const char *ev;
  s->nofuse = (ev = getenv("W2L_CUDA_NOFUSE")) && atoi(ev) > 0;
  s->fixed_algo = (ev = getenv("W2L_CUDA_FIXED_ALGO")) && atoi(ev) > 0;
  s->debug = (ev = getenv("W2L_CUDA_DEBUG")) && atoi(ev) > 0;
  int err = create_inner(s, m);
  if (err) {
    cuda_destroy(s);
    return err;
  }
  *state = s;
  return FC_OK;
}

static int tensor_desc(cstate *s, cudnnTensorDescriptor_t *d, const w2l_tensor *t, int batch) {
  DNN(cudnnCreateTensorDescriptor(d), "tensor");
  DNN(cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NHWC, s->dt, batch, t->c, t->h, t->w), "tensor");
  return FC_OK;
}

static int grow_ws(cstate *s, size_t need) {
  if (need <= s->ws_size) return FC_OK;
  cudaFree(s->ws);
  s->ws = NULL, s->ws_size = 0;
  CU(cudaMalloc(&s->ws, need), "workspace");
  s->ws_size = need;
  return FC_OK;
}

static int build_plan(cstate *s, const fc_w2l *m, cplan *p) {
  for (int i = 0; i < m->nops; i++) {
    const w2l_op *o = &m->ops[i];
    if (o->kind != W2L_OP_CONV) continue;
    const w2l_layer *l = &m->layers[o->layer];
    clayer *c = &s->layers[o->layer];
    cop *po = &p->ops[i];
    int err;
    if ((err = tensor_desc(s, &po->x, &m->tensors[o->in], p->batch))) return err;
    if ((err = tensor_desc(s, &po->y, &m->tensors[o->out], p->batch))) return err;
    DNN(cudnnSetConvolutionMathType(c->cd, s->half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
        "math type");
    int got = 0, best = -1;
    size_t mem = 0;
    if (s->fixed_algo) {
      best = 0;
      po->math = s->half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
      if (l->kind == W2L_CONV) {
        po->algo = (int)CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
        DNN(cudnnGetConvolutionForwardWorkspaceSize(s->h, po->x, c->wd, c->cd, po->y,
                                                    (cudnnConvolutionFwdAlgo_t)po->algo, &mem),
            l->name);
      } else {
        po->algo = (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
        DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(s->h, c->wd, po->x, c->cd, po->y,
                                                         (cudnnConvolutionBwdDataAlgo_t)po->algo,
                                                         &mem),
            l->name);
      }
    } else if (l->kind == W2L_CONV) {
      cudnnConvolutionFwdAlgoPerf_t perf[NALGO];
      DNN(cudnnFindConvolutionForwardAlgorithm(s->h, po->x, c->wd, c->cd, po->y, NALGO, &got, perf),
          l->name);
      for (int k = 0; k < got && best < 0; k++)
        if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= WS_LIMIT)
          best = k, po->algo = (int)perf[k].algo, po->math = perf[k].mathType, mem = perf[k].memory;
    } else {
      cudnnConvolutionBwdDataAlgoPerf_t perf[NALGO];
      DNN(cudnnFindConvolutionBackwardDataAlgorithm(s->h, c->wd, po->x, c->cd, po->y, NALGO, &got,
                                                    perf),
          l->name);
      for (int k = 0; k < got && best < 0; k++)
        if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= WS_LIMIT)
          best = k, po->algo = (int)perf[k].algo, po->math = perf[k].mathType, mem = perf[k].memory;
    }
    if (best < 0)
      return fc_error_set(FC_EUNSUPPORTED, "wav2lip cuda: no cuDNN algorithm for %s at batch %d",
                          l->name, p->batch);
    if (s->debug)
      fprintf(stderr, "w2l cuda: batch %d op %d %s: algo %d math %d workspace %zu\n", p->batch, i,
              l->name, po->algo, (int)po->math, mem);
    if ((err = grow_ws(s, mem))) return err;
  }
  return FC_OK;
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 31, f = h & 1023;
  float v = e == 0 ? ldexpf((float)f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexpf((float)(f | 1024), e - 25);
  return h & 0x8000 ? -v : v;
}

/* W2L_CUDA_DEBUG: the output range of op i (allocates; a diagnostic only) */
static void debug_op(cstate *s, const fc_w2l *m, int i, int batch) {
  const w2l_op *o = &m->ops[i];
  const w2l_tensor *t = &m->tensors[o->out];
  size_t n = (size_t)batch * t->h * t->w * t->c;
  void *h = malloc(n * s->esz);
  if (!h || cudaStreamSynchronize(s->st) != cudaSuccess ||
      cudaMemcpy(h, s->slots[t->slot], n * s->esz, cudaMemcpyDeviceToHost) != cudaSuccess) {
    fprintf(stderr, "w2l cuda: op %d: debug download failed\n", i);
    free(h);
    return;
  }
  double mx = 0, sum = 0;
  size_t bad = 0;
  for (size_t k = 0; k < n; k++) {
    float v = s->half ? half_to_float(((uint16_t *)h)[k]) : ((float *)h)[k];
    if (!isfinite(v)) bad++;
    else mx = fmax(mx, fabs(v)), sum += fabs(v);
  }
  fprintf(stderr, "w2l cuda: op %2d %-28s fused %2d [%d,%d,%d] max|y| %.5g mean|y| %.5g nonfinite %zu\n",
          i, o->kind == W2L_OP_CONV ? m->layers[o->layer].name : "concat",
          o->kind == W2L_OP_CONV ? s->layers[o->layer].fused : 0, t->h, t->w, t->c, mx, sum / (double)n,
          bad);
  free(h);
}

static int cuda_prepare(void *state, const fc_w2l *m, int batch) {
  cstate *s = state;
  CU(cudaSetDevice(s->dev), "cudaSetDevice"); /* the calling thread may not have it current */
  for (cplan *p = s->plans; p; p = p->next)
    if (p->batch == batch) return FC_OK;
  cplan *p = calloc(1, sizeof *p);
  if (!p) return FC_ENOMEM;
  p->batch = batch;
  int err = build_plan(s, m, p);
  if (err) { /* dropped, so a later call tries again */
    free_plan(p);
    return err;
  }
  p->next = s->plans;
  s->plans = p;
  return FC_OK;
}

static cplan *find_plan(cstate *s, int batch) {
  for (cplan *p = s->plans; p; p = p->next)
    if (p->batch == batch) return p;
  return NULL;
}

static int run_conv(cstate *s, const fc_w2l *m, const w2l_op *o, const cop *po, int batch) {
  const w2l_layer *l = &m->layers[o->layer];
  clayer *c = &s->layers[o->layer];
  const w2l_tensor *to = &m->tensors[o->out];
  void *x = s->slots[m->tensors[o->in].slot], *y = s->slots[to->slot];
  const float one = 1.f, zero = 0.f;
  /* fp32: FMA only, whatever Find reported (the default math type may allow TF32) */
  DNN(cudnnSetConvolutionMathType(c->cd, s->half ? po->math : CUDNN_FMA_MATH), "math type");
  if (l->kind == W2L_CONVT) {
    DNN(cudnnConvolutionBackwardData(s->h, &one, c->wd, c->w, po->x, x, c->cd,
                                     (cudnnConvolutionBwdDataAlgo_t)po->algo, s->ws, s->ws_size,
                                     &zero, po->y, y),
        l->name);
  } else {
    while (c->fused >= 0) {
      const float a2 = l->residual ? 1.f : 0.f;
      int f32b = c->fused == 2;
      cudnnStatus_t st = cudnnConvolutionBiasActivationForward(
          s->h, &one, po->x, x, c->wd, c->w, c->cd, (cudnnConvolutionFwdAlgo_t)po->algo, s->ws,
          s->ws_size, &a2, po->y, l->residual ? x : y, f32b ? c->bd_f32 : c->bd_dt,
          f32b ? (void *)c->b32 : c->bdt, s->relu, po->y, y);
      if (st == CUDNN_STATUS_SUCCESS) {
        if (c->fused == 0) c->fused = 1;
        return FC_OK;
      }
      /* refused: try the fp32 bias (fp16 data), then give up fusing this layer */
      c->fused = c->fused == 0 && s->half ? 2 : -1;
    }
    DNN(cudnnConvolutionForward(s->h, &one, po->x, x, c->wd, c->w, c->cd,
                                (cudnnConvolutionFwdAlgo_t)po->algo, s->ws, s->ws_size, &zero,
                                po->y, y),
        l->name);
  }
  size_t npix = (size_t)batch * to->h * to->w;
  CU((cudaError_t)w2l_cuda_bias_act(y, c->b32, l->residual ? x : NULL, npix, to->c, l->relu,
                                    s->half, s->st),
     "bias kernel");
  return FC_OK;
}

static int cuda_infer(void *state, const fc_w2l *m, const float *mel, const float *faces,
                      float *out, int batch) {
  cstate *s = state;
  cplan *p = find_plan(s, batch);
  if (!p) return fc_error_set(FC_EINVAL, "wav2lip cuda: batch %d not prepared", batch);
  const int P = FC_W2L_FACE * FC_W2L_FACE;
  size_t nface = (size_t)batch * FC_W2L_FACE_C * P, nmel = (size_t)batch * FC_W2L_MEL_H * FC_W2L_MEL_W;
  size_t nout = (size_t)batch * FC_W2L_OUT_C * P;
  memcpy(s->h_in, faces, nface * sizeof(float));
  memcpy(s->h_in + nface, mel, nmel * sizeof(float));
  CU(cudaMemcpyAsync(s->d_in, s->h_in, (nface + nmel) * sizeof(float), cudaMemcpyHostToDevice,
                     s->st),
     "upload");
  CU((cudaError_t)w2l_cuda_nchw_to_nhwc(s->d_in, s->slots[m->tensors[m->t_face].slot], batch,
                                        FC_W2L_FACE_C, P, s->half, s->st),
     "input kernel");
  CU((cudaError_t)w2l_cuda_nchw_to_nhwc(s->d_in + nface, s->slots[m->tensors[m->t_mel].slot], batch,
                                        1, FC_W2L_MEL_H * FC_W2L_MEL_W, s->half, s->st),
     "input kernel");
  for (int i = 0; i < m->nops; i++) {
    const w2l_op *o = &m->ops[i];
    int err;
    if (o->kind == W2L_OP_CONV) {
      if ((err = run_conv(s, m, o, &p->ops[i], batch))) return err;
    } else {
      const w2l_tensor *a = &m->tensors[o->in], *b = &m->tensors[o->in2];
      CU((cudaError_t)w2l_cuda_concat(s->slots[a->slot], a->c, s->slots[b->slot], b->c,
                                      s->slots[m->tensors[o->out].slot],
                                      (size_t)batch * a->h * a->w, s->half, s->st),
         "concat kernel");
    }
    if (s->debug) debug_op(s, m, i, batch);
  }
  CU((cudaError_t)w2l_cuda_sigmoid_nhwc_to_nchw(s->slots[m->tensors[m->t_logits].slot], s->d_out,
                                                batch, FC_W2L_OUT_C, P, s->half, s->st),
     "output kernel");
  CU(cudaMemcpyAsync(s->h_out, s->d_out, nout * sizeof(float), cudaMemcpyDeviceToHost, s->st),
     "download");
  CU(cudaStreamSynchronize(s->st), "infer");
  memcpy(out, s->h_out, nout * sizeof(float));
  return FC_OK;
}

static int cuda_run_op(void *state, const fc_w2l *m, int op, int batch) {
  return fc_error_set(FC_EUNSUPPORTED, "wav2lip cuda: runs whole batches only");
}

const w2l_backend fc_w2l_backend_cudnn = {"cuda", cuda_create, cuda_destroy, cuda_prepare,
                                          cuda_run_op, cuda_infer};
