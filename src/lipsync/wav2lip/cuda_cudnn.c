/* Wav2Lip "cuda[:N]": the ops as cuDNN 9 (legacy API) calls on one CUDA stream, fp32, fp16 or
 * bf16.
 *
 * Layout: every tensor is NHWC in device slots that mirror model.c's slot plan (so the host
 * slots are not allocated for this backend); weights are re-laid out once at load into cuDNN's
 * NHWC filter format (KRSC), converted to fp16 on the device when fp16 is asked for. Bias stays
 * fp32 for our epilogue kernel, with a copy in the data type for the fused cuDNN call.
 *
 * Per batch size a plan is built the first time that size is used and kept: tensor descriptors
 * and the fastest algorithm of each convolution (cudnnFind*Ex, which times them on the model's
 * own buffers and one search workspace; W2L_CUDA_FIND=plain: cudnnFind*, which allocates its
 * own per call, 0.3-1 s more per start), plus one shared workspace grown to the largest need
 * (cuda_plan.c; the state both files share is in cuda_cudnn.h). The search is most of a server's start-up, so its
 * choices are kept on disk per GPU model and cuDNN version (algo_cache.h) and a restart asks
 * cuDNN only for a cached algorithm's workspace (searching again if cuDNN refuses it). Inference then allocates nothing: the inputs go through
 * pinned host staging buffers, are converted on the device (NCHW floats, or RGB bytes -> the six
 * NHWC channels), the ops run, and one kernel computes the last layer (1x1 conv to 3 channels)
 * with the sigmoid and writes NCHW floats or RGB bytes, copied back to pinned memory.
 *
 * Two lanes: the audio encoder (13 small ops) runs on a second stream with its own cuDNN handle
 * and workspace, forked after the inputs arrive and joined before the decoder, beside the face
 * encoder; at small batches, where every op is latency-bound, that shortens the critical path.
 *
 * CUDA graphs: the first call of a batch size runs the sequence eagerly (that settles which
 * layers cuDNN fuses); the next call of each I/O kind (float, bytes, resident) captures the
 * whole sequence (copies in, kernels, copy out) into a graph, which every later call replays
 * with one launch. Below batch 64 the ~110 launches of an eager pass cost more than the GPU
 * work. A capture that fails (a library call that cannot be captured) leaves that kind eager.
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
 * fp16/bf16: data 16-bit, accumulation fp32 (CUDNN_DATA_FLOAT compute type, tensor-op math).
 * fp32 uses FMA math (no TF32), so it matches the CPU to ~1e-5.
 * Measured on an H200 (cuDNN 9.14), max |out - PyTorch float64|: fp32 2.4e-5 (width-16 fixture)
 * and 1.6e-5 (full width); fp16 0.021 and 0.014, the same with the fused and unfused paths and
 * fixed algorithms (so fp16 rounding, not a path's bug).
 *
 * The 96 network's first layer (6 -> 16 channels, 7x7, at the face's full size) runs on our own
 * tensor-core kernel in fp16 (w2l_conv_first.cu: 1-4 % faster passes on the H200 than cuDNN's, whose
 * implicit GEMM is weakest on 8 input channels); W2L_CUDA_OWN=0 keeps cuDNN for it, the
 * reference the GPU tests compare the kernel with. The 1x1 convolutions on a 1x1 input (512 ->
 * 512: cuDNN runs them on a generic kernel, 69.7 us each at batch 1 on the H200; ours 4.6 us)
 * run on w2l_dense.cu at batches up to W2L_DENSE_MAX_BATCH: batch 1 0.87 -> 0.74 ms, batch 16
 * 0.86 -> 0.75 ms (docs/BENCHMARKS.md). W2L_CUDA_DENSE=0 keeps cuDNN for them; W2L_CUDA_DENSE=all
 * puts the 3x3-on-3x3 ones there too (measured slower than cuDNN: 20.6 against 12.8 us, kept
 * for the parity test and for trying the kernel).
 *
 * The last three ops (the concat of the decoder's output with the first skip tensor, the output
 * block's 3x3 convolution, the head) run as one kernel of ours in fp16 (w2l_tail.cu: the
 * 80-channel concat never written, the 32-channel activations never leave the chip);
 * W2L_CUDA_TAIL=0 (or W2L_CUDA_OWN=0) keeps the concat kernel, cuDNN and w2l_cuda_head.
 * Likewise the concat at 48x48 and the transposed convolution to 96x96 that reads it
 * (w2l_convt.cu: its four sub-pixel phases, no zeros multiplied, the 160-channel concat never
 * written), opt-in with W2L_CUDA_CONVT=1 until its parity is shown on a GPU; otherwise the
 * concat kernel and cuDNN's backward-data call.
 *
 * Diagnostics (environment, read at load): W2L_CUDA_NOFUSE=1, W2L_CUDA_FIXED_ALGO=1,
 * W2L_CUDA_FIND=plain (see above), W2L_CUDA_SEARCH_UPTO=N (wav2lip.h), W2L_CUDA_RETIME=0 (no
 * small-batch retiming, cuda_plan.c), W2L_CUDA_FEATURE_MB=N|auto|0 (the face-feature arena,
 * cuda_composite.c), W2L_CUDA_NOGRAPH=1, W2L_CUDA_TIMING=1 (each op's time by CUDA events on stderr, on the third
 * eager pass of each batch size; implies no graphs), W2L_CUDA_PROFILE=1 (cudaProfilerStart/Stop
 * around the first resident run, for `ncu --profile-from-start off`) and W2L_CUDA_DEBUG=1 (per-op algorithm and
 * output range on stderr; that one allocates, syncs and never captures). */
#include "lipsync/wav2lip/cuda_cudnn.h"
#include "lipsync/wav2lip/w2l_composite.h"

#include "facecast/error.h"

#include <cuda_profiler_api.h>
#include <glib.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU W2L_CU

static void free_plan(cplan *p) {
  for (int i = 0; i < W2L_IO_COUNT; i++)
    if (p->graph[i]) cudaGraphExecDestroy(p->graph[i]);
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
  w2l_ccache_destroy(s->cc);
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
  cudaFree(s->ws2);
  cudaFree(s->search_ws);
  for (int k = 0; k < 2; k++) cudaFree(s->abuf[k]);
  if (s->fork) cudaEventDestroy(s->fork);
  if (s->join) cudaEventDestroy(s->join);
  if (s->h2) cudnnDestroy(s->h2);
  if (s->st2) cudaStreamDestroy(s->st2);
  for (int i = 0; i <= W2L_MAX_OPS; i++)
    if (s->ev[i]) cudaEventDestroy(s->ev[i]);
  if (s->relu) cudnnDestroyActivationDescriptor(s->relu);
  if (s->h) cudnnDestroy(s->h);
  if (s->st) cudaStreamDestroy(s->st);
  w2l_algo_cache_close(s->algos);
  cudaFree(s->first_w);
  cudaFree(s->tail_w);
  cudaFree(s->convt_w);
  free(s);
}

/* Uploads n floats (host) as the data type into a new device buffer; tmp: fp32 scratch.
 * Everything goes through our (non-blocking) stream: a plain cudaMemcpy from pageable memory
 * may return before its DMA is done, and nothing would order it before the conversion kernel. */
static int upload(cstate *s, const float *src, size_t n, void **dst, float *tmp) {
  CU(cudaMalloc(dst, n * s->esz), "weights");
  int half = s->dtype != W2L_DT_F32;
  CU(cudaMemcpyAsync(half ? (void *)tmp : *dst, src, n * sizeof(float), cudaMemcpyHostToDevice,
                     s->st),
     "upload");
  if (half) CU((cudaError_t)w2l_cuda_f32_to(tmp, *dst, n, s->dtype, s->st), "weight conversion");
  CU(cudaStreamSynchronize(s->st), "upload");
  return FC_OK;
}

/* cpad: input channels as stored on the device (>= the layer's; the extra weights are zero) */
static int setup_layer(cstate *s, const w2l_layer *l, clayer *c, int cpad, float *host, float *tmp) {
  int K = l->kind == W2L_CONVT ? l->cin : l->cout, C = l->kind == W2L_CONVT ? l->cout : l->cin;
  int R = l->kh, S = l->kw, CS = cpad > C ? cpad : C;
  /* PyTorch [K][C][R][S] (Conv2d: K = cout; ConvTranspose2d [cin][cout]: K = cin) -> KRSC */
  for (int k = 0; k < K; k++)
    for (int ci = 0; ci < CS; ci++)
      for (int r = 0; r < R; r++)
        for (int q = 0; q < S; q++)
          host[(((size_t)k * R + r) * S + q) * CS + ci] =
              ci < C ? l->w[(((size_t)k * C + ci) * R + r) * S + q] : 0.0f;
  int err = upload(s, host, (size_t)K * CS * R * S, &c->w, tmp);
  if (err) return err;
  CU(cudaMalloc((void **)&c->b32, (size_t)l->cout * sizeof(float)), "bias");
  CU(cudaMemcpyAsync(c->b32, l->b, (size_t)l->cout * sizeof(float), cudaMemcpyHostToDevice, s->st),
     "bias");
  CU(cudaStreamSynchronize(s->st), "bias");
  if (s->dtype != W2L_DT_F32) {
    if ((err = upload(s, l->b, (size_t)l->cout, &c->bdt, tmp))) return err;
  } else {
    c->bdt = c->b32;
  }
  DNN(cudnnCreateFilterDescriptor(&c->wd), "filter");
  DNN(cudnnSetFilter4dDescriptor(c->wd, s->dt, CUDNN_TENSOR_NHWC, K, CS, R, S), "filter");
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

/* Samples the device memory this model holds (after each step that allocates). */
void w2l_cudnn_note_memory(cstate *s) {
  size_t fr = 0, total = 0;
  if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (fr < s->free0 && s->free0 - fr > s->peak) s->peak = s->free0 - fr;
}

static void cuda_describe(void *state, char *buf, size_t n) {
  const cstate *s = state;
  const char *path = NULL;
  w2l_algo_cache_stats(s->algos, NULL, NULL, NULL, &path);
  char dense[64] = "";
  if (s->own_dense)
    snprintf(dense, sizeof dense, "whole-input layers on facecast's kernel %d times; ", s->n_dense);
  char by[160] = ""; /* the search's seconds by batch size, smallest first */
  size_t k = 0;
  for (int b = 1; s->n_searched && b <= 1 << 20 && k < sizeof by; b *= 2)
    for (const cplan *p = s->plans; p && k < sizeof by; p = p->next)
      if (p->batch == b && p->search_s > 0)
        k += (size_t)snprintf(by + k, sizeof by - k, "%s%d: %.2f", k ? ", " : "; batch ", b,
                              p->search_s);
  char like[64] = "";
  if (s->n_inherited)
    snprintf(like, sizeof like, ", %d as at batch %d", s->n_inherited, s->search_upto);
  if (s->n_retimed)
    snprintf(like + strlen(like), sizeof like - strlen(like), ", %d retimed (%d changed)",
             s->n_retimed, s->n_retimed_changed);
  char feat[96] = "";
  fc_w2l_feature_stats fs = {0};
  if (s->cc) w2l_ccache_feature_stats(s->cc, &fs);
  if (fs.capacity)
    snprintf(feat, sizeof feat, "face features kept for up to %lld frames (%zu MiB)%s; ",
             fs.capacity, (size_t)(fs.capacity * (long long)fs.record_bytes) >> 20,
             fs.on ? "" : ", off");
  snprintf(buf, n, "%s%s%s%s%scuDNN algorithms: %d from the cache, %d searched (%.2f s%s, %s)%s%s%s",
           s->own_first ? "first layer on facecast's kernel; " : "",
           s->own_convt ? "concat + transposed convolution on facecast's kernel; " : "",
           s->own_tail ? "output block + head on facecast's kernel; " : "", dense, feat, s->n_cached,
           s->n_searched, s->search_s, by, s->find_plain ? "cudnnFind" : "cudnnFindEx", like,
           path ? "; cache " : "; no cache (FACECAST_CACHE_DIR=off)", path ? path : "");
}

static size_t cuda_device_bytes(void *state) { return ((cstate *)state)->peak; }

static int cuda_device_memory(void *state, size_t *free_bytes, size_t *total_bytes) {
  cstate *s = state;
  CU(cudaSetDevice(s->dev), "cudaSetDevice"); /* the calling thread may not have it current */
  CU(cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
  return FC_OK;
}

/* Whether the first layer runs on our own kernel (w2l_cuda_conv_first): fp16, a layer of its
 * shape (6 -> 16 channels, odd square filter, stride 1, "same" padding, ReLU), and not turned
 * off (W2L_CUDA_OWN=0 keeps cuDNN: the reference the GPU tests compare it with). */
static int own_first_fits(const cstate *s, const w2l_layer *l) {
  const char *ev = getenv("W2L_CUDA_OWN");
  if ((ev && strcmp(ev, "0") == 0) || s->dtype != W2L_DT_F16) return 0;
  return l->kind == W2L_CONV && l->cin <= FACE_CP && l->cout == 16 && l->kh == l->kw &&
         (l->kh == 3 || l->kh == 5 || l->kh == 7) && l->sh == 1 && l->sw == 1 &&
         l->ph == l->kh / 2 && l->pw == l->kw / 2 && l->relu && !l->residual;
}

/* Its weights in the kernel's layout: [ky][tap pair][tap-in-pair * 8 + input channel][16]. */
static int setup_own_first(cstate *s, const w2l_layer *l, float *host, float *tmp, size_t cap) {
  const int ks = l->kh, pairs = (ks + 1) / 2;
  const size_t n = (size_t)ks * pairs * 256;
  if (n > cap) return FC_OK; /* a test network whose scratch is smaller: cuDNN does it */
  memset(host, 0, n * sizeof(float));
  for (int ky = 0; ky < ks; ky++)
    for (int kx = 0; kx < ks; kx++)
      for (int ci = 0; ci < l->cin; ci++)
        for (int co = 0; co < 16; co++)
          host[((size_t)(ky * pairs + kx / 2) * 16 + (kx & 1) * 8 + ci) * 16 + co] =
              l->w[(((size_t)co * l->cin + ci) * ks + ky) * ks + kx];
  int err = upload(s, host, n, &s->first_w, tmp);
  if (!err) s->own_first = 1;
  return err;
}

/* A 3x3 layer's weights as our kernels read them: [rows][9][cs] (output channel, tap, input
 * channel), n = rows * 9 * cs values, zeros past the layer's channels; from PyTorch's
 * [co][ci][3][3] (Conv2d) or [ci][co][3][3] (ConvTranspose2d). */
static int upload_taps(cstate *s, const w2l_layer *l, size_t n, int cs, void **dst, float *host,
                       float *tmp) {
  memset(host, 0, n * sizeof(float));
  for (int co = 0; co < l->cout; co++)
    for (int ci = 0; ci < l->cin; ci++)
      for (int tap = 0; tap < 9; tap++)
        host[((size_t)co * 9 + tap) * cs + ci] =
            l->w[(l->kind == W2L_CONVT ? (size_t)ci * l->cout + co : (size_t)co * l->cin + ci) * 9 + tap];
  return upload(s, host, n, dst, tmp);
}

/* Whether the last three ops run as w2l_cuda_tail: fp16, not turned off (W2L_CUDA_TAIL=0 or
 * W2L_CUDA_OWN=0 keep the concat kernel, cuDNN and w2l_cuda_head: the reference the GPU tests
 * compare it with), and the network ending as Wav2Lip's does: a concatenation read only by a
 * 3x3 "same" convolution with ReLU, read only by the head; the kernel instantiated for the
 * channel counts. Its weights: [16 * no][9][cs], zeros past the layer's channels. */
static int setup_own_tail(cstate *s, const fc_w2l *m, float *host, float *tmp, size_t cap) {
  const char *ev = getenv("W2L_CUDA_OWN"), *et = getenv("W2L_CUDA_TAIL");
  if ((ev && !strcmp(ev, "0")) || (et && !strcmp(et, "0")) || s->dtype != W2L_DT_F16 || m->nops < 3)
    return FC_OK;
  const int t = m->nops - 3;
  const w2l_op *oc = &m->ops[t], *ov = &m->ops[t + 1], *oh = &m->ops[t + 2];
  if (oc->kind != W2L_OP_CONCAT || ov->kind != W2L_OP_CONV || ov->in != oc->out ||
      oh->in != ov->out)
    return FC_OK;
  for (int i = 0; i < m->nops; i++) /* nothing else may read what the kernel never writes */
    if ((i != t + 1 && (m->ops[i].in == oc->out || m->ops[i].in2 == oc->out)) ||
        (i != t + 2 && (m->ops[i].in == ov->out || m->ops[i].in2 == ov->out)))
      return FC_OK;
  const w2l_layer *l = &m->layers[ov->layer];
  const int ca = m->tensors[oc->in].c, cb = m->tensors[oc->in2].c;
  const int cs = w2l_cuda_tail_cs(ca, cb, l->cout), no = cs == 80 ? 2 : 1;
  if (!cs || l->kind != W2L_CONV || l->kh != 3 || l->kw != 3 || l->sh != 1 || l->sw != 1 ||
      l->ph != 1 || l->pw != 1 || !l->relu || l->residual || l->cin != ca + cb)
    return FC_OK;
  const size_t n = (size_t)16 * no * 9 * cs;
  if (n > cap) return FC_OK;
  if (w2l_cuda_tail_prepare(cs)) { /* no shared memory allowance: cuDNN does it */
    cudaGetLastError();
    return FC_OK;
  }
  int err = upload_taps(s, l, n, cs, &s->tail_w, host, tmp);
  if (!err) s->own_tail = 1, s->tail_op = t;
  return err;
}

/* w2l_backend.fuses_concat_convt: whether w2l_cuda_convt may run, i.e. fp16 and asked for
 * (W2L_CUDA_CONVT=1: opt-in until its parity with the slot plan's fix is shown on a GPU; never
 * with W2L_CUDA_OWN=0). Read at the plan and again at set-up, the same switches both times. */
static int cuda_fuses_concat_convt(const fc_w2l *m) {
  const char *ev = getenv("W2L_CUDA_OWN"), *et = getenv("W2L_CUDA_CONVT");
  return !(ev && !strcmp(ev, "0")) && et && !strcmp(et, "1") && m->dtype == W2L_DT_F16;
}

/* Whether a concat and the ConvT reading it run as w2l_cuda_convt: cuda_fuses_concat_convt, a
 * concatenation read only by a ConvTranspose2d (3x3, stride 2, padding 1, output padding 1, no
 * residual) whose channels the kernel is instantiated for: the last such pair (the largest
 * picture, where cuDNN is weakest; in the 96 network the only one). Its weights:
 * [32 * groups][9][cs], zeros past the layer's channels. */
static int setup_own_convt(cstate *s, const fc_w2l *m, float *host, float *tmp, size_t cap) {
  if (!cuda_fuses_concat_convt(m)) return FC_OK;
  for (int t = m->nops - 2; t >= 0; t--) {
    const w2l_op *oc = &m->ops[t], *ot = &m->ops[t + 1];
    if (oc->kind != W2L_OP_CONCAT || ot->kind != W2L_OP_CONV || ot->in != oc->out) continue;
    const w2l_layer *l = &m->layers[ot->layer];
    const w2l_tensor *a = &m->tensors[oc->in], *b = &m->tensors[oc->in2], *y = &m->tensors[ot->out];
    const int cs = w2l_cuda_convt_cs(a->c, b->c, l->cout);
    if (!cs || l->kind != W2L_CONVT || l->kh != 3 || l->kw != 3 || l->sh != 2 || l->sw != 2 ||
        l->ph != 1 || l->pw != 1 || l->oph != 1 || l->opw != 1 || l->residual ||
        l->cin != a->c + b->c || y->h != 2 * a->h || y->w != 2 * a->w)
      continue;
    int other = 0; /* nothing else may read the concat the kernel never writes */
    for (int i = 0; i < m->nops; i++)
      if (i != t + 1 && (m->ops[i].in == oc->out || m->ops[i].in2 == oc->out)) other = 1;
    const int rows = (l->cout + 31) / 32 * 32;
    const size_t n = (size_t)rows * 9 * cs;
    /* the kernel writes y while it reads a and b: the plan keeps them apart (model.c, asked
     * by cuda_fuses_concat_convt with the same switches) */
    if (other || n > cap || y->slot == a->slot || y->slot == b->slot) continue;
    if (w2l_cuda_convt_prepare(cs)) { /* no shared memory allowance: cuDNN does it */
      cudaGetLastError();
      return FC_OK;
    }
    int err = upload_taps(s, l, n, cs, &s->convt_w, host, tmp);
    if (!err) s->own_convt = 1, s->convt_op = t;
    return err;
  }
  return FC_OK;
}

static int create_inner(cstate *s, const fc_w2l *m) {
  const char *ev;
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
  CU(cudaFree(NULL), "CUDA context"); /* create the context first: it is not ours to count */
  size_t total = 0;
  CU(cudaMemGetInfo(&s->free0, &total), "cudaMemGetInfo");
  struct cudaDeviceProp prop;
  int runtime = 0;
  CU(cudaGetDeviceProperties(&prop, s->dev), "cudaGetDeviceProperties");
  CU(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  char *apath = w2l_algo_cache_path(NULL, prop.name, prop.major, prop.minor,
                                    (int)cudnnGetVersion(), runtime);
  s->algos = w2l_algo_cache_open(apath);
  g_free(apath);
  if (!s->algos) return FC_ENOMEM;
  CU(cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking), "stream");
  DNN(cudnnCreate(&s->h), "cudnnCreate");
  DNN(cudnnSetStream(s->h, s->st), "cudnnSetStream");
  DNN(cudnnCreateActivationDescriptor(&s->relu), "activation");
  DNN(cudnnSetActivationDescriptor(s->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
      "activation");

  size_t maxw = (size_t)16 * 2 * 9 * 80; /* at least setup_own_tail's, for narrow networks */
  for (int i = 0; i < m->nlayers; i++) {
    const w2l_layer *l = &m->layers[i];
    size_t nw = (size_t)(l->cin > FACE_CP ? l->cin : FACE_CP) * l->cout * l->kh * l->kw;
    if (nw > maxw) maxw = nw;
  }
  for (int i = 0; i < m->nops; i++)
    if (m->ops[i].in == m->t_face) s->face_op = i;
  float *host = malloc(maxw * sizeof(float)), *tmp = NULL;
  if (!host) return FC_ENOMEM;
  int err = FC_OK;
  e = cudaMalloc((void **)&tmp, maxw * sizeof(float));
  if (e != cudaSuccess) err = w2l_cuda_error(e, "weights");
  for (int i = 0; !err && i < m->nlayers; i++) {
    s->nlayers = i + 1;
    err = setup_layer(s, &m->layers[i], &s->layers[i],
                      i == m->ops[s->face_op].layer ? FACE_CP : 0, host, tmp);
  }
  /* the 96 network only for now: the kernel is checked against cuDNN on the GPU at full width
   * there (test_wav2lip, W2L_FULL_DIR); wav2lip256's test fixture is too narrow to reach it */
  if (!err && m->face == 96 && own_first_fits(s, &m->layers[m->ops[s->face_op].layer]))
    err = setup_own_first(s, &m->layers[m->ops[s->face_op].layer], host, tmp, maxw);
  if (!err) err = setup_own_tail(s, m, host, tmp, maxw);
  if (!err) err = setup_own_convt(s, m, host, tmp, maxw);
  if (s->dtype == W2L_DT_F16 && !((ev = getenv("W2L_CUDA_OWN")) && strcmp(ev, "0") == 0)) {
    ev = getenv("W2L_CUDA_DENSE");
    s->own_dense = !ev ? 1 : !strcmp(ev, "0") ? 0 : !strcmp(ev, "all") ? 2 : 1;
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
  size_t fbytes = (size_t)m->max_batch * m->face * m->face * FACE_CP * s->esz;
  CU(cudaMalloc(&s->face, fbytes), "activation buffers");
  CU(cudaMemsetAsync(s->face, 0, fbytes, s->st), "activation buffers"); /* channels 6, 7 stay 0 */
  /* the last layer runs in w2l_cuda_head (fused with the sigmoid and output conversion) */
  const w2l_layer *last = &m->layers[m->ops[m->nops - 1].layer];
  if (m->ops[m->nops - 1].kind != W2L_OP_CONV || last->kh != 1 || last->kw != 1 ||
      last->cout != FC_W2L_OUT_C || last->relu)
    return fc_error_set(FC_EINVAL, "wav2lip cuda: unexpected last layer");
  CU(cudaMalloc((void **)&s->head_w, (size_t)3 * last->cin * sizeof(float)), "weights");
  CU(cudaMemcpyAsync(s->head_w, last->w, (size_t)3 * last->cin * sizeof(float),
                     cudaMemcpyHostToDevice, s->st),
     "weights");
  s->mel_off = (size_t)m->max_batch * FC_W2L_FACE_C * m->face * m->face * sizeof(float);
  size_t in = s->mel_off + (size_t)m->max_batch * FC_W2L_MEL_H * FC_W2L_MEL_W * sizeof(float);
  size_t out = (size_t)m->max_batch * FC_W2L_OUT_C * m->face * m->face * sizeof(float);
  CU(cudaMalloc((void **)&s->d_in, in), "staging");
  CU(cudaMalloc(&s->d_out, out), "staging");
  CU(cudaMallocHost((void **)&s->h_in, in), "pinned staging");
  CU(cudaMallocHost(&s->h_out, out), "pinned staging");
  for (int i = 0; s->timing && i <= m->nops; i++) CU(cudaEventCreate(&s->ev[i]), "events");
  /* the audio encoder's ops: a contiguous range that only the decoder after it reads */
  s->audio_first = s->audio_last = -1;
  for (int i = 0; i < m->nops; i++)
    if (m->ops[i].kind == W2L_OP_CONV && strncmp(m->layers[m->ops[i].layer].name, "audio_encoder.", 14) == 0) {
      if (s->audio_first < 0) s->audio_first = i;
      s->audio_last = i;
    }
  /* the lane needs a chain (each op reads the previous one's output) to ping-pong */
  size_t amax = 0;
  for (int i = s->audio_first; i >= 0 && i <= s->audio_last; i++) {
    const w2l_tensor *t = &m->tensors[m->ops[i].out];
    if (m->ops[i].kind != W2L_OP_CONV || (i > s->audio_first && m->ops[i].in != m->ops[i - 1].out))
      s->audio_first = s->audio_last = -1;
    else if ((size_t)t->h * t->w * t->c > amax)
      amax = (size_t)t->h * t->w * t->c;
  }
  if (s->timing || s->debug || ((ev = getenv("W2L_CUDA_ONELANE")) && atoi(ev) > 0))
    s->audio_first = s->audio_last = -1; /* per-op timing and debugging want one ordered lane */
  for (int t = 0; t < m->ntensors; t++) s->tp[t] = s->slots[m->tensors[t].slot];
  s->tp[m->t_face] = s->face;
  if (s->audio_first >= 0) {
    CU(cudaStreamCreateWithFlags(&s->st2, cudaStreamNonBlocking), "stream");
    DNN(cudnnCreate(&s->h2), "cudnnCreate");
    DNN(cudnnSetStream(s->h2, s->st2), "cudnnSetStream");
    CU(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming), "events");
    CU(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming), "events");
    for (int k = 0; k < 2; k++)
      CU(cudaMalloc(&s->abuf[k], amax * (size_t)m->max_batch * s->esz), "activation buffers");
    for (int i = s->audio_first; i <= s->audio_last; i++)
      s->tp[m->ops[i].out] = s->abuf[(i - s->audio_first) & 1];
  }
  /* the feature cache's parts: the face encoder's skip tensors, where its last op leaves them */
  _Static_assert(sizeof s->parts.src / sizeof s->parts.src[0] >= W2L_MAX_SKIPS, "skip parts");
  if (w2l_face_split_of(m, &s->fsplit)) {
    s->parts.n = s->fsplit.nskip;
    for (int k = 0; k < s->fsplit.nskip; k++) {
      const w2l_op *o = &m->ops[s->fsplit.skip_op[k]];
      const w2l_tensor *t = &m->tensors[o->in2];
      s->skip_part[s->fsplit.skip_op[k]] = k + 1;
      s->parts.src[k] = s->tp[o->in2];
      s->parts.off[k] = s->fsplit.skip_off[k] * s->esz;
      s->parts.bytes[k] = (size_t)t->h * t->w * t->c * s->esz;
    }
  }
  CU(cudaStreamSynchronize(s->st), "activation buffers");
  w2l_cudnn_note_memory(s);
  return FC_OK;
}

static int cuda_create(const fc_w2l *m, void **state) {
  cstate *s = calloc(1, sizeof *s);
  if (!s) return FC_ENOMEM;
  s->dev = m->cuda_device;
  s->dtype = m->dtype;
  s->esz = s->dtype == W2L_DT_F32 ? 4 : 2;
  s->dt = s->dtype == W2L_DT_F16    ? CUDNN_DATA_HALF
          : s->dtype == W2L_DT_BF16 ? CUDNN_DATA_BFLOAT16
                                    : CUDNN_DATA_FLOAT;
  const char *ev;
  s->nofuse = (ev = getenv("W2L_CUDA_NOFUSE")) && atoi(ev) > 0;
  s->fixed_algo = (ev = getenv("W2L_CUDA_FIXED_ALGO")) && atoi(ev) > 0;
  s->debug = (ev = getenv("W2L_CUDA_DEBUG")) && atoi(ev) > 0;
  s->timing = (ev = getenv("W2L_CUDA_TIMING")) && atoi(ev) > 0;
  s->profile = (ev = getenv("W2L_CUDA_PROFILE")) && atoi(ev) > 0;
  s->find_plain = (ev = getenv("W2L_CUDA_FIND")) && strcmp(ev, "plain") == 0;
  s->search_upto = m->search_upto;
  s->feat_want = 1;
  /* the face-feature arena: W2L_CUDA_FEATURE_MB unset, empty or auto: min(2 GiB, free/8); =N
   * MiB; =0 none (measured on an H100, 2026-12-07: docs/BENCHMARKS.md) */
  ev = getenv("W2L_CUDA_FEATURE_MB");
  s->feat_mb = !ev || !*ev || strcmp(ev, "auto") == 0 ? -1 : strtol(ev, NULL, 10);
  if (s->feat_mb < -1) s->feat_mb = 0;
  s->retime = !(ev = getenv("W2L_CUDA_RETIME")) || strcmp(ev, "0") != 0; /* =0: Find's picks */
  s->nograph = s->debug || s->timing || ((ev = getenv("W2L_CUDA_NOGRAPH")) && atoi(ev) > 0);
  int err = create_inner(s, m);
  if (err) {
    cuda_destroy(s);
    return err;
  }
  *state = s;
  return FC_OK;
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 31, f = h & 1023;
  float v = e == 0 ? ldexpf((float)f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexpf((float)(f | 1024), e - 25);
  return h & 0x8000 ? -v : v;
}

static float bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float v;
  memcpy(&v, &u, sizeof v);
  return v;
}

/* W2L_CUDA_DEBUG: the output range of op i (allocates; a diagnostic only) */
static void debug_op(cstate *s, const fc_w2l *m, int i, int batch) {
  const w2l_op *o = &m->ops[i];
  const w2l_tensor *t = &m->tensors[o->out];
  size_t n = (size_t)batch * t->h * t->w * t->c;
  void *h = malloc(n * s->esz);
  if (!h || cudaStreamSynchronize(s->st) != cudaSuccess ||
      cudaMemcpy(h, s->tp[o->out], n * s->esz, cudaMemcpyDeviceToHost) != cudaSuccess) {
    fprintf(stderr, "w2l cuda: op %d: debug download failed\n", i);
    free(h);
    return;
  }
  double mx = 0, sum = 0;
  size_t bad = 0;
  for (size_t k = 0; k < n; k++) {
    float v = s->dtype == W2L_DT_F16    ? half_to_float(((uint16_t *)h)[k])
              : s->dtype == W2L_DT_BF16 ? bf16_to_float(((uint16_t *)h)[k])
                                        : ((float *)h)[k];
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
  int err = w2l_cudnn_build_plan(s, m, p);
  cudaFree(s->search_ws); /* the search's room is not kept for serving */
  s->search_ws = NULL, s->search_ws_size = 0;
  if (err) { /* dropped, so a later call tries again */
    free_plan(p);
    return err;
  }
  p->next = s->plans;
  s->plans = p;
  w2l_cudnn_note_memory(s);
  w2l_cudnn_save_algos(s);
  return FC_OK;
}

static cplan *find_plan(cstate *s, int batch) {
  for (cplan *p = s->plans; p; p = p->next)
    if (p->batch == batch) return p;
  return NULL;
}

static int run_conv(cstate *s, const fc_w2l *m, const w2l_op *o, const cop *po, int batch,
                    int lane2) {
  cudnnHandle_t h = lane2 ? s->h2 : s->h;
  cudaStream_t st = lane2 ? s->st2 : s->st;
  void *ws = lane2 ? s->ws2 : s->ws;
  const w2l_layer *l = &m->layers[o->layer];
  clayer *c = &s->layers[o->layer];
  const w2l_tensor *to = &m->tensors[o->out];
  void *x = s->tp[o->in], *y = s->tp[o->out];
  const float one = 1.f, zero = 0.f;
  if (po->dense) { /* bias, residual and ReLU in its epilogue */
    const w2l_tensor *ti = &m->tensors[o->in];
    CU((cudaError_t)w2l_cuda_dense(x, c->w, c->b32, l->residual ? x : NULL, y, batch,
                                   ti->h * ti->w * ti->c, l->cout, l->relu, st),
       "whole-input layer kernel");
    return FC_OK;
  }
  /* fp32: FMA only, whatever Find reported (the default math type may allow TF32) */
  DNN(cudnnSetConvolutionMathType(c->cd, s->dtype != W2L_DT_F32 ? po->math : CUDNN_FMA_MATH),
      "math type");
  if (l->kind == W2L_CONVT) {
    DNN(cudnnConvolutionBackwardData(h, &one, c->wd, c->w, po->x, x, c->cd,
                                     (cudnnConvolutionBwdDataAlgo_t)po->algo, ws, s->ws_size,
                                     &zero, po->y, y),
        l->name);
  } else {
    while (c->fused >= 0) {
      const float a2 = l->residual ? 1.f : 0.f;
      int f32b = c->fused == 2;
      cudnnStatus_t rc = cudnnConvolutionBiasActivationForward(
          h, &one, po->x, x, c->wd, c->w, c->cd, (cudnnConvolutionFwdAlgo_t)po->algo, ws,
          s->ws_size, &a2, po->y, l->residual ? x : y, f32b ? c->bd_f32 : c->bd_dt,
          f32b ? (void *)c->b32 : c->bdt, s->relu, po->y, y);
      if (rc == CUDNN_STATUS_SUCCESS) {
        if (c->fused == 0) c->fused = 1;
        return FC_OK;
      }
      /* refused: try the fp32 bias (fp16 data), then give up fusing this layer */
      c->fused = c->fused == 0 && s->dtype != W2L_DT_F32 ? 2 : -1;
    }
    DNN(cudnnConvolutionForward(h, &one, po->x, x, c->wd, c->w, c->cd,
                                (cudnnConvolutionFwdAlgo_t)po->algo, ws, s->ws_size, &zero,
                                po->y, y),
        l->name);
  }
  size_t npix = (size_t)batch * to->h * to->w;
  CU((cudaError_t)w2l_cuda_bias_act(y, c->b32, l->residual ? x : NULL, npix, to->c, l->relu,
                                    s->dtype, st),
     "bias kernel");
  return FC_OK;
}

/* W2L_CUDA_TIMING: each op's time of the pass just synchronised, one line per op. */
static void print_timing(cstate *s, const fc_w2l *m, int batch) {
  float total = 0;
  for (int i = 0; i < m->nops; i++) {
    const w2l_op *o = &m->ops[i];
    const w2l_tensor *t = &m->tensors[o->out];
    float ms = 0;
    cudaEventElapsedTime(&ms, s->ev[i], s->ev[i + 1]);
    total += ms;
    double gflop = 0;
    /* our ConvT kernel's time stands at the concat's op: the ConvT's work counts there, none
     * at the ConvT's own (empty) op */
    const int fused = s->own_convt && (i == s->convt_op || i == s->convt_op + 1);
    const w2l_op *oc = fused ? &m->ops[s->convt_op + 1] : o;
    if (oc->kind == W2L_OP_CONV && !(fused && i != s->convt_op)) {
      const w2l_layer *l = &m->layers[oc->layer];
      const w2l_tensor *sp = l->kind == W2L_CONVT ? &m->tensors[oc->in] : &m->tensors[oc->out];
      gflop = 2.0 * batch * sp->h * sp->w * l->cin * l->cout * l->kh * l->kw / 1e9;
    }
    const char *name = s->own_tail && i == s->tail_op     ? "concat+out conv+head (ours)"
                       : s->own_convt && i == s->convt_op ? "concat+ConvT (ours)"
                       : i == m->nops - 1             ? "head (+sigmoid, output)"
                       : o->kind == W2L_OP_CONV ? m->layers[o->layer].name
                                                : "concat";
    fprintf(stderr, "w2l timing: batch %d op %2d %-28s %3dx%-3d c%-4d fused %2d %8.4f ms %7.1f TFLOP/s\n",
            batch, i, name, t->h, t->w,
            t->c, o->kind == W2L_OP_CONV ? s->layers[o->layer].fused : 0, ms,
            ms > 0 ? gflop / ms : 0);
  }
  fprintf(stderr, "w2l timing: batch %d total %.4f ms (%.0f frames/s)\n", batch, total,
          batch * 1000.0 / total);
}

/* Enqueues one pass for io (no host-side copies; the staging buffers hold the inputs). */
static int enqueue(cstate *s, const fc_w2l *m, const cplan *p, int io, int batch) {
  const int P = m->face * m->face;
  size_t nface = (size_t)batch * FC_W2L_FACE_C * P, nmel = (size_t)batch * FC_W2L_MEL_H * FC_W2L_MEL_W;
  size_t ncrop = (size_t)batch * 3 * P, nout = (size_t)batch * FC_W2L_OUT_C * P;
  void *face = s->face;
  w2l_ccache_bufs cb = {0};
  /* cached: the face encoder's outputs come from the feature cache, so no crops, no face input
   * and no face encoder; a whole composite pass stores them for the jobs marked */
  const int cached = io == W2L_IO_COMPOSITE_CACHED;
  if (io == W2L_IO_COMPOSITE || cached) { /* the job table in; the crops made from the resident faces */
    w2l_ccache_buffers(s->cc, &cb);
    CU(cudaMemcpyAsync(cb.d_jobs, cb.h_jobs, sizeof(w2l_cjob) * batch, cudaMemcpyHostToDevice,
                       s->st),
       "upload");
    if (!cached)
      CU((cudaError_t)w2l_cuda_crop_jobs(cb.d_src, cb.d_jobs, batch, m->face, (uint8_t *)s->d_in,
                                         s->st),
         "crop kernel");
  }
  const int store = io == W2L_IO_COMPOSITE && cb.d_feat && s->fsplit.face_ops > 0;
  if (io != W2L_IO_RESIDENT) {
    size_t fbytes = io == W2L_IO_U8 ? ncrop : io == W2L_IO_F32 ? nface * sizeof(float) : 0;
    if (fbytes)
      CU(cudaMemcpyAsync(s->d_in, s->h_in, fbytes, cudaMemcpyHostToDevice, s->st), "upload");
    CU(cudaMemcpyAsync(s->d_in + s->mel_off, s->h_in + s->mel_off, nmel * sizeof(float),
                       cudaMemcpyHostToDevice, s->st),
       "upload");
    if (cached) {
      /* no face input */
    } else if (io != W2L_IO_F32)
      CU((cudaError_t)w2l_cuda_crops_to_input((const uint8_t *)s->d_in, face, FACE_CP, batch,
                                              m->face, s->dtype, s->st),
         "input kernel");
    else
      CU((cudaError_t)w2l_cuda_nchw_to_nhwc((const float *)s->d_in, face, FACE_CP, batch,
                                            FC_W2L_FACE_C, P, s->dtype, s->st),
         "input kernel");
  }
  /* fork: the second lane starts once the inputs are on the device */
  int two = s->audio_first >= 0;
  if (two) {
    CU(cudaEventRecord(s->fork, s->st), "fork");
    CU(cudaStreamWaitEvent(s->st2, s->fork, 0), "fork");
  }
  if (io != W2L_IO_RESIDENT)
    CU((cudaError_t)w2l_cuda_nchw_to_nhwc((const float *)(s->d_in + s->mel_off),
                                          s->tp[m->t_mel], 1, batch, 1,
                                          FC_W2L_MEL_H * FC_W2L_MEL_W, s->dtype,
                                          two ? s->st2 : s->st),
       "input kernel");
  for (int i = 0; i < m->nops - 1; i++) { /* the last one is the head, below */
    const w2l_op *o = &m->ops[i];
    int err;
    if (s->timing) cudaEventRecord(s->ev[i], s->st);
    int lane2 = two && i >= s->audio_first && i <= s->audio_last;
    if (two && i == s->audio_last + 1) { /* join before the first op after the audio encoder */
      CU(cudaEventRecord(s->join, s->st2), "join");
      CU(cudaStreamWaitEvent(s->st, s->join, 0), "join");
    }
    if (cached && i < s->fsplit.face_ops) continue;
    if ((s->own_tail && i > s->tail_op) || (s->own_convt && i == s->convt_op + 1)) {
      /* done by the tail kernel, or by the ConvT kernel at the concat before it */
    } else if (s->own_convt && i == s->convt_op) { /* concat + ConvT + bias + ReLU, one kernel */
      const w2l_op *ot = &m->ops[i + 1];
      const w2l_tensor *a = &m->tensors[o->in], *b = &m->tensors[o->in2];
      const w2l_layer *l = &m->layers[ot->layer];
      const int from_cache = cached && s->skip_part[i];
      CU((cudaError_t)w2l_cuda_convt(s->tp[o->in], a->c, from_cache ? NULL : s->tp[o->in2], b->c,
                                     from_cache ? cb.d_feat : NULL,
                                     from_cache ? s->parts.off[s->skip_part[i] - 1] : 0,
                                     cb.d_jobs, s->convt_w, s->layers[ot->layer].b32, l->cout,
                                     l->relu, s->tp[ot->out], batch, a->h, a->w, s->st),
         "transposed convolution kernel");
    } else if (s->own_tail && i == s->tail_op) { /* concat + output block + head, one kernel */
      const w2l_tensor *a = &m->tensors[o->in], *b = &m->tensors[o->in2];
      const int from_cache = cached && s->skip_part[i];
      CU((cudaError_t)w2l_cuda_tail(s->tp[o->in], a->c, from_cache ? NULL : s->tp[o->in2], b->c,
                                    from_cache ? cb.d_feat : NULL,
                                    from_cache ? s->parts.off[s->skip_part[i] - 1] : 0,
                                    cb.d_jobs, s->tail_w, s->layers[m->ops[i + 1].layer].b32,
                                    s->head_w, s->layers[m->ops[m->nops - 1].layer].b32,
                                    m->layers[m->ops[i + 1].layer].cout,
                                    io == W2L_IO_F32 ? (float *)s->d_out : NULL,
                                    io == W2L_IO_F32 ? NULL : (uint8_t *)s->d_out, batch, a->h,
                                    a->w, s->st),
         "output block kernel");
    } else if (o->kind == W2L_OP_CONV && i == s->face_op && s->own_first) {
      const w2l_tensor *t = &m->tensors[o->out];
      CU((cudaError_t)w2l_cuda_conv_first(s->tp[o->in], s->first_w, s->layers[o->layer].b32,
                                          s->tp[o->out], batch, t->h, t->w,
                                          m->layers[o->layer].kh, s->st),
         "first layer kernel");
    } else if (o->kind == W2L_OP_CONV) {
      if ((err = run_conv(s, m, o, &p->ops[i], batch, lane2))) return err;
    } else if (cached && s->skip_part[i]) {
      const w2l_tensor *a = &m->tensors[o->in], *b = &m->tensors[o->in2];
      CU((cudaError_t)w2l_cuda_concat_cached(s->tp[o->in], a->c, cb.d_feat,
                                             s->parts.off[s->skip_part[i] - 1], cb.d_jobs, b->c,
                                             s->tp[o->out], batch, a->h * a->w, s->dtype, s->st),
         "concat kernel");
    } else {
      const w2l_tensor *a = &m->tensors[o->in], *b = &m->tensors[o->in2];
      CU((cudaError_t)w2l_cuda_concat(s->tp[o->in], a->c, s->tp[o->in2], b->c, s->tp[o->out],
                                      (size_t)batch * a->h * a->w, s->dtype, s->st),
         "concat kernel");
    }
    if (store && i == s->fsplit.face_ops - 1) /* every skip tensor is made and still alive */
      CU((cudaError_t)w2l_cuda_store_features(&s->parts, cb.d_jobs, batch, cb.d_feat, s->st),
         "feature store kernel");
    if (s->debug && !(s->own_tail && i >= s->tail_op) && !(s->own_convt && i == s->convt_op))
      debug_op(s, m, i, batch);
  }
  /* head: the last 1x1 conv + sigmoid + output conversion; resident runs write bytes too */
  const w2l_op *last = &m->ops[m->nops - 1];
  if (s->timing) cudaEventRecord(s->ev[m->nops - 1], s->st);
  if (!s->own_tail)
    CU((cudaError_t)w2l_cuda_head(s->tp[last->in], m->layers[last->layer].cin,
                                  s->head_w, s->layers[last->layer].b32,
                                  io == W2L_IO_F32 ? s->d_out : NULL,
                                  io == W2L_IO_F32 ? NULL : s->d_out, batch, P, s->dtype, s->st),
       "output kernel");
  if (s->timing) cudaEventRecord(s->ev[m->nops], s->st);
  if (io == W2L_IO_COMPOSITE || cached) /* the patches, blended into their backgrounds, stay on the device */
    CU((cudaError_t)w2l_cuda_paste_jobs((const uint8_t *)s->d_out, m->face, cb.d_src, cb.d_jobs, batch,
                                        cb.d_out, s->st),
       "paste kernel");
  if (io == W2L_IO_RESIDENT || io == W2L_IO_COMPOSITE || cached) return FC_OK;
  CU(cudaMemcpyAsync(s->h_out, s->d_out, io == W2L_IO_U8 ? ncrop : nout * sizeof(float),
                     cudaMemcpyDeviceToHost, s->st),
     "download");
  return FC_OK;
}

/* Captures enqueue(io) as a graph. Failing is not an error: the kind stays eager. */
static void capture(cstate *s, const fc_w2l *m, cplan *p, int io, int batch) {
  cudaGraph_t g = NULL;
  if (cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    p->nograph[io] = 1;
    return;
  }
  int err = enqueue(s, m, p, io, batch);
  cudaError_t e = cudaStreamEndCapture(s->st, &g);
  if (!err && e == cudaSuccess) e = cudaGraphInstantiate(&p->graph[io], g, 0);
  if (g) cudaGraphDestroy(g);
  if (err || e != cudaSuccess) {
    if (s->debug || getenv("W2L_CUDA_VERBOSE"))
      fprintf(stderr, "w2l cuda: batch %d: no graph (%s)\n", batch,
              err ? fc_error_detail(err) : cudaGetErrorString(e));
    cudaGetLastError();
    p->graph[io] = NULL;
    p->nograph[io] = 1;
  }
  w2l_cudnn_note_memory(s);
}

static int cuda_infer(void *state, const fc_w2l *m, int io, const float *mel, const void *in,
                      void *out, int batch) {
  cstate *s = state;
  cplan *p = find_plan(s, batch);
  if (!p) return fc_error_set(FC_EINVAL, "wav2lip cuda: batch %d not prepared", batch);
  const int P = m->face * m->face;
  size_t nmel = (size_t)batch * FC_W2L_MEL_H * FC_W2L_MEL_W;
  size_t inb = io == W2L_IO_U8 ? (size_t)batch * 3 * P : (size_t)batch * FC_W2L_FACE_C * P * 4;
  size_t outb = io == W2L_IO_U8 ? (size_t)batch * 3 * P : (size_t)batch * FC_W2L_OUT_C * P * 4;
  if (io != W2L_IO_RESIDENT) {
    memcpy(s->h_in, in, inb);
    memcpy(s->h_in + s->mel_off, mel, nmel * sizeof(float));
  }
  if (p->warm && !s->nograph && !p->graph[io] && !p->nograph[io]) capture(s, m, p, io, batch);
  int profile = s->profile == 1 && io == W2L_IO_RESIDENT;
  if (profile) s->profile = 2, cudaProfilerStart();
  if (p->graph[io]) {
    CU(cudaGraphLaunch(p->graph[io], s->st), "graph launch");
  } else {
    int err = enqueue(s, m, p, io, batch);
    if (err) return err;
  }
  CU(cudaStreamSynchronize(s->st), "infer");
  if (profile) cudaProfilerStop();
  if (s->timing && !p->graph[io] && ++p->passes == 3) print_timing(s, m, batch);
  p->warm = 1;
  if (io != W2L_IO_RESIDENT) memcpy(out, s->h_out, outb);
  return FC_OK;
}

/* fc_w2l_composite on the GPU: the batch padded to the smallest plan set up that holds it (the
 * next power of two, set up now, when there is none; the server sets up 1, 16, 32, 64, 128),
 * the sources made
 * resident (cuda_composite.c), the mel windows staged; then one graph (job table in, crops,
 * network, paste) and one copy back of exactly the finished rects. */
static int cuda_composite(void *state, const fc_w2l *m, const fc_w2l_job *jobs, int n,
                          fc_w2l_base_fn base, void *user, int first) {
  cstate *s = state;
  int nb = 0, err, grew = 0;
  for (const cplan *q = s->plans; q; q = q->next)
    if (q->batch >= n && (!nb || q->batch < nb)) nb = q->batch;
  if (!nb) { /* none big enough yet: the next power of two, set up now */
    for (nb = n; nb & (nb - 1);) nb += nb & -nb;
    if (nb > m->max_batch) nb = m->max_batch;
  }
  if ((err = cuda_prepare(s, m, nb))) return err; /* also makes the device current */
  cplan *p = find_plan(s, nb);
  if (!s->cc) {
    size_t rec = s->fsplit.face_ops ? s->fsplit.frame_elems * s->esz : 0;
    if ((err = w2l_ccache_create(&s->cc, m->max_batch, rec, s->feat_mb, s->st))) return err;
    if (!s->feat_want) w2l_ccache_features(s->cc, 0);
    w2l_cudnn_note_memory(s);
  }
  size_t outb = 0;
  int cached = 0;
  err = w2l_ccache_resolve(s->cc, jobs, n, nb, base, user, first, &outb, &grew, &cached);
  if (grew) { /* the output buffer moved (or is gone): the composite graphs name the old one */
    for (cplan *q = s->plans; q; q = q->next)
      for (int k = W2L_IO_COMPOSITE; k <= W2L_IO_COMPOSITE_CACHED; k++)
        if (q->graph[k]) cudaGraphExecDestroy(q->graph[k]), q->graph[k] = NULL;
    w2l_cudnn_note_memory(s);
  }
  if (err) return err;
  const size_t mel = (size_t)FC_W2L_MEL_H * FC_W2L_MEL_W;
  for (int k = 0; k < n; k++)
    memcpy((float *)(s->h_in + s->mel_off) + k * mel, jobs[k].mel, sizeof(float) * mel);
  /* a pass without the face encoder is captured once any eager pass ran (its ops are a subset);
   * a whole one only after a whole eager pass (that settles the face encoder's fused calls) */
  int io = cached ? W2L_IO_COMPOSITE_CACHED : W2L_IO_COMPOSITE;
  int warm = p->warm || (cached && p->warm_cached);
  if (warm && !s->nograph && !p->graph[io] && !p->nograph[io]) capture(s, m, p, io, nb);
  if (p->graph[io]) {
    CU(cudaGraphLaunch(p->graph[io], s->st), "graph launch");
  } else if ((err = enqueue(s, m, p, io, nb))) {
    return err;
  }
  w2l_ccache_bufs cb;
  w2l_ccache_buffers(s->cc, &cb);
  CU(cudaMemcpyAsync(cb.h_out, cb.d_out, outb, cudaMemcpyDeviceToHost, s->st), "download");
  CU(cudaStreamSynchronize(s->st), "composite");
  if (cached) p->warm_cached = 1;
  else p->warm = 1;
  w2l_ccache_commit(s->cc, jobs, n);
  w2l_ccache_deliver(s->cc, jobs, n);
  return FC_OK;
}

static int cuda_features(void *state, int on) {
  cstate *s = state;
  if (on && !s->fsplit.face_ops)
    return fc_error_set(FC_EUNSUPPORTED, "wav2lip cuda: this network's face encoder does not split off");
  if (on && !s->feat_mb)
    return fc_error_set(FC_EUNSUPPORTED, "wav2lip cuda: no feature cache "
                                         "(W2L_CUDA_FEATURE_MB=0 at load)");
  s->feat_want = on;
  if (s->cc && !w2l_ccache_features(s->cc, on))
    return fc_error_set(FC_EUNSUPPORTED, "wav2lip cuda: no room for a feature cache "
                                         "(W2L_CUDA_FEATURE_MB, or too little device memory)");
  return FC_OK;
}

static void cuda_feature_stats(void *state, fc_w2l_feature_stats *st) {
  cstate *s = state;
  if (s->cc) w2l_ccache_feature_stats(s->cc, st);
}

static int cuda_run_op(void *state, const fc_w2l *m, int op, int batch) {
  return fc_error_set(FC_EUNSUPPORTED, "wav2lip cuda: runs whole batches only");
}

const w2l_backend fc_w2l_backend_cudnn = {
    .name = "cuda", .create = cuda_create, .destroy = cuda_destroy, .prepare = cuda_prepare,
    .run_op = cuda_run_op, .infer = cuda_infer, .composite = cuda_composite,
    .device_bytes = cuda_device_bytes, .device_memory = cuda_device_memory,
    .describe = cuda_describe, .features = cuda_features, .feature_stats = cuda_feature_stats,
    .fuses_concat_convt = cuda_fuses_concat_convt};
