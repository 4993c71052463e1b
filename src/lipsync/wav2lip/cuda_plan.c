/* A Wav2Lip "cuda" plan for one batch size (cuda_cudnn.h): the tensor descriptors of each
 * convolution and its algorithm — from the disk cache (algo_cache.h), as chosen at the caller's
 * search_upto for a larger batch, or timed now by cuDNN on the model's own buffers
 * (cudnnFind*Ex; W2L_CUDA_FIND=plain: cudnnFind*) — and the workspaces grown to the largest
 * choice. Runs on the thread that runs the model, before the plan's first pass. */
#include "lipsync/wav2lip/cuda_cudnn.h"

#include "facecast/error.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU W2L_CU

int w2l_dnn_err(cudnnStatus_t s, const char *what) {
  return fc_error_set(s == CUDNN_STATUS_ALLOC_FAILED ? FC_ENOMEM : FC_EUNSUPPORTED,
                      "wav2lip cuda: %s: %s", what, cudnnGetErrorString(s));
}

/* Whether op o of a plan for batch runs on w2l_cuda_dense: the filter covers the whole unpadded
 * input (one output pixel), 1x1 unless W2L_CUDA_DENSE=all, fp16, a batch the kernel takes.
 * Its weights are the layer's KRSC filter as it is: [cout][kh * kw * cin]. */
static int dense_fits(const cstate *s, const fc_w2l *m, const w2l_op *o, int batch) {
  const w2l_layer *l = &m->layers[o->layer];
  const w2l_tensor *ti = &m->tensors[o->in], *to = &m->tensors[o->out];
  const int K = ti->h * ti->w * ti->c;
  return s->own_dense && (s->own_dense == 2 || l->kh == 1) && l->kind == W2L_CONV &&
         o->in != m->t_face && to->h == 1 && to->w == 1 &&
         l->kh == ti->h && l->kw == ti->w && l->ph == 0 && l->pw == 0 && l->cin == ti->c &&
         (!l->residual || K == l->cout) && w2l_cuda_dense_fits(batch, K, l->cout);
}

static int tensor_desc(cstate *s, cudnnTensorDescriptor_t *d, const w2l_tensor *t, int batch,
                       int c) {
  DNN(cudnnCreateTensorDescriptor(d), "tensor");
  DNN(cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NHWC, s->dt, batch, c, t->h, t->w), "tensor");
  return FC_OK;
}

static int grow_ws(cstate *s, size_t need) {
  if (need <= s->ws_size) return FC_OK;
  /* the graphs captured so far name the old workspace: drop them, the next call recaptures */
  for (cplan *p = s->plans; p; p = p->next)
    for (int i = 0; i < W2L_IO_COUNT; i++)
      if (p->graph[i]) cudaGraphExecDestroy(p->graph[i]), p->graph[i] = NULL;
  cudaFree(s->ws);
  cudaFree(s->ws2);
  s->ws = s->ws2 = NULL, s->ws_size = 0;
  CU(cudaMalloc(&s->ws, need), "workspace");
  if (s->st2) CU(cudaMalloc(&s->ws2, need), "workspace");
  s->ws_size = need;
  return FC_OK;
}

/* The cache's key for one convolution: what cuDNN's choice depends on (direction, data type,
 * batch, input and output shapes, filter, padding, stride), in a form a person can read. 0 when
 * it does not fit (then the op is searched and not cached). */
static int algo_key(char *key, size_t n, const cstate *s, const w2l_layer *l, int batch,
                    const w2l_tensor *ti, const w2l_tensor *to) {
  static const char *dts[] = {"f32", "f16", "bf16"};
  int cin = ti->c < FACE_CP ? FACE_CP : ti->c; /* the face input is stored with FACE_CP */
  int k = snprintf(key, n, "%s.%s.n%d.x%dx%dx%d.y%dx%dx%d.k%dx%d.s%dx%d.p%dx%d",
                   l->kind == W2L_CONV ? "fwd" : "bwd", dts[s->dtype], batch, ti->h, ti->w, cin,
                   to->h, to->w, to->c, l->kh, l->kw, l->sh, l->sw, l->ph, l->pw);
  if (k <= 0 || (size_t)k >= n) key[0] = 0;
  return key[0] != 0;
}

/* A cached choice, if cuDNN still takes it for this convolution: its workspace in *mem. */
static int cached_ok(cstate *s, const w2l_layer *l, clayer *c, const cop *po, const w2l_algo *a,
                     size_t *mem) {
  if (cudnnSetConvolutionMathType(c->cd, (cudnnMathType_t)a->math) != CUDNN_STATUS_SUCCESS)
    return 0;
  cudnnStatus_t st =
      l->kind == W2L_CONV
          ? cudnnGetConvolutionForwardWorkspaceSize(s->h, po->x, c->wd, c->cd, po->y,
                                                    (cudnnConvolutionFwdAlgo_t)a->algo, mem)
          : cudnnGetConvolutionBackwardDataWorkspaceSize(s->h, c->wd, po->x, c->cd, po->y,
                                                         (cudnnConvolutionBwdDataAlgo_t)a->algo,
                                                         mem);
  return st == CUDNN_STATUS_SUCCESS && *mem <= WS_LIMIT;
}

static void remember(cstate *s, const char *key, const cop *po, size_t mem) {
  w2l_algo a = {po->algo, (int)po->math, mem};
  w2l_algo_cache_put(s->algos, key, &a); /* out of memory: searched again next time */
}

/* After a plan: the cache file rewritten when it learned something. A file that cannot be
 * written is said once; the server runs on (it searches again at its next start). */
void w2l_cudnn_save_algos(cstate *s) {
  if (w2l_algo_cache_save(s->algos) == FC_OK || s->save_failed) return;
  s->save_failed = 1;
  fprintf(stderr, "facecast: wav2lip cuda: cuDNN algorithms not cached (%s)\n",
          fc_error_detail(FC_EIO));
}

/* The search's workspace: at least want bytes (at most WS_LIMIT) when the device has them,
 * else as much as it gives in halvings (algorithms that need more are then not timed, as
 * cudnnFind* drops those it cannot allocate for). */
static size_t search_room(cstate *s, size_t want) {
  if (want > WS_LIMIT) want = WS_LIMIT;
  if (want <= s->search_ws_size) return s->search_ws_size;
  /* at least 16 MiB and twice the last size: fewer reallocations (each one a device sync) */
  size_t n = 2 * s->search_ws_size > ((size_t)16 << 20) ? 2 * s->search_ws_size : (size_t)16 << 20;
  n = n > WS_LIMIT ? WS_LIMIT : n < want ? want : n;
  cudaFree(s->search_ws);
  s->search_ws = NULL, s->search_ws_size = 0;
  for (; n >= want || n >= ((size_t)1 << 20); n /= 2)
    if (cudaMalloc(&s->search_ws, n) == cudaSuccess) {
      w2l_cudnn_note_memory(s); /* a start's peak includes it */
      return s->search_ws_size = n;
    }
  cudaGetLastError(); /* the failed allocations' error, not a sticky one */
  s->search_ws = NULL;
  return 0;
}

/* What cuDNN reports of one timed candidate, either direction. */
typedef struct found {
  int algo;
  cudnnMathType_t math;
  cudnnStatus_t status;
  float ms;
  size_t memory;
} found;

#define COPY_FOUND(dst, perf, got)                                                                 \
  for (int k_ = 0; k_ < (got); k_++)                                                               \
  (dst)[k_] = (found){(int)(perf)[k_].algo, (perf)[k_].mathType, (perf)[k_].status, (perf)[k_].time, \
                      (perf)[k_].memory}

/* Small batches: cudnnFind's times of candidates that run a few microseconds are noisy enough to
 * cost a pass a fifth (the same build's batch-1 pass ran 0.46 or 0.57 ms by which search's
 * choices it had; docs/BENCHMARKS.md). So at batches up to RETIME_UPTO the candidates within
 * RETIME_SPREAD of Find's best (RETIME_TOP at most) are timed again the way a pass runs them: a
 * CUDA graph of RETIME_CALLS calls in a row (eager calls would time cuDNN's host cost between
 * them), the least of RETIME_ROUNDS replays each. On by default (W2L_CUDA_RETIME=0: Find's picks);
 * measured on an H100 in docs/BENCHMARKS.md. */
#define RETIME_UPTO 32
#define RETIME_SPREAD 1.5f
#define RETIME_TOP 4
#define RETIME_CALLS 10
#define RETIME_ROUNDS 5

/* Enqueues op o's convolution with candidate f on the search's handle and workspace. */
static cudnnStatus_t run_candidate(cstate *s, const w2l_op *o, const w2l_layer *l, clayer *c,
                                   const cop *po, const found *f, size_t room) {
  const float one = 1.f, zero = 0.f;
  void *x = s->tp[o->in], *y = s->tp[o->out];
  if (l->kind == W2L_CONVT)
    return cudnnConvolutionBackwardData(s->h, &one, c->wd, c->w, po->x, x, c->cd,
                                        (cudnnConvolutionBwdDataAlgo_t)f->algo, s->search_ws,
                                        room, &zero, po->y, y);
  return cudnnConvolutionForward(s->h, &one, po->x, x, c->wd, c->w, c->cd,
                                 (cudnnConvolutionFwdAlgo_t)f->algo, s->search_ws, room, &zero,
                                 po->y, y);
}

/* The least time of one call of candidate f run as above, in ms; < 0 when it cannot be timed
 * so (the caller then keeps Find's pick). */
static float graph_time(cstate *s, const w2l_op *o, const w2l_layer *l, clayer *c, const cop *po,
                        const found *f, size_t room, cudaEvent_t e0, cudaEvent_t e1) {
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  float best = -1;
  if (cudnnSetConvolutionMathType(c->cd, f->math) != CUDNN_STATUS_SUCCESS ||
      cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
    goto done;
  cudnnStatus_t rc = CUDNN_STATUS_SUCCESS;
  for (int k = 0; k < RETIME_CALLS && rc == CUDNN_STATUS_SUCCESS; k++)
    rc = run_candidate(s, o, l, c, po, f, room);
  if (cudaStreamEndCapture(s->st, &g) != cudaSuccess || rc != CUDNN_STATUS_SUCCESS ||
      cudaGraphInstantiate(&ge, g, 0) != cudaSuccess || cudaGraphLaunch(ge, s->st) != cudaSuccess)
    goto done;
  for (int r = 0; r < RETIME_ROUNDS; r++) {
    float ms = 0;
    if (cudaEventRecord(e0, s->st) != cudaSuccess || cudaGraphLaunch(ge, s->st) != cudaSuccess ||
        cudaEventRecord(e1, s->st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
      best = -1;
      goto done;
    }
    ms /= RETIME_CALLS;
    if (best < 0 || ms < best) best = ms;
  }
done:
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError(); /* a failed capture's error is not sticky, and not ours to report */
  return best;
}

/* Find's candidates r[0..got) (fastest first, r[first] its pick) timed again; po and *mem take
 * the fastest. Counts the ops where the pick changed (s->n_retimed_changed). */
static void retime(cstate *s, const w2l_op *o, const w2l_layer *l, clayer *c, cop *po,
                   const found *r, int got, int first, size_t room, size_t *mem) {
  cudaEvent_t e0 = NULL, e1 = NULL;
  int pick = first, n = 0;
  float best = -1;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) goto done;
  for (int k = first; k < got && n < RETIME_TOP; k++) {
    if (r[k].status != CUDNN_STATUS_SUCCESS || r[k].memory > room ||
        r[k].ms > r[first].ms * RETIME_SPREAD)
      continue;
    n++;
    float ms = graph_time(s, o, l, c, po, &r[k], room, e0, e1);
    if (ms < 0) { /* cannot time it so: Find's pick stands */
      pick = first;
      break;
    }
    if (s->debug)
      fprintf(stderr, "w2l cuda: retime %s: algo %d math %d %.4f ms (find %.4f)\n", l->name,
              r[k].algo, (int)r[k].math, ms, r[k].ms);
    if (best < 0 || ms < best) best = ms, pick = k;
  }
  s->n_retimed++;
  if (pick != first) s->n_retimed_changed++;
  po->algo = r[pick].algo, po->math = r[pick].math, *mem = r[pick].memory;
done:
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  cudaGetLastError();
}

/* Times every algorithm of op o at the plan's batch (po's descriptors) and picks the fastest
 * that runs with at most WS_LIMIT of workspace: *best 0 and po->algo/math, *mem; *best -1 when
 * none. cudnnFind*Ex on the model's own device buffers (the op's input, weights and output,
 * all sized for the largest batch) and one workspace grown to the largest need: cudnnFind*
 * allocates and frees its tensors and workspaces on every call instead. A plan's outputs are
 * recomputed by every pass, so what the search writes there is never read. */
static int search(cstate *s, const fc_w2l *m, const w2l_op *o, cop *po, int half, int batch,
                  int *best, size_t *mem) {
  const w2l_layer *l = &m->layers[o->layer];
  clayer *c = &s->layers[o->layer];
  void *x = s->tp[o->in], *y = s->tp[o->out];
  int got = 0, fwd = l->kind == W2L_CONV;
  *best = -1;
  DNN(cudnnSetConvolutionMathType(c->cd, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
      "math type"); /* cached_ok may have set another */
  size_t want = 0, n;
  for (int a = 0; !s->find_plain && a < (fwd ? CUDNN_CONVOLUTION_FWD_ALGO_COUNT
                                            : CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT); a++) {
    cudnnStatus_t st =
        fwd ? cudnnGetConvolutionForwardWorkspaceSize(s->h, po->x, c->wd, c->cd, po->y,
                                                      (cudnnConvolutionFwdAlgo_t)a, &n)
            : cudnnGetConvolutionBackwardDataWorkspaceSize(s->h, c->wd, po->x, c->cd, po->y,
                                                           (cudnnConvolutionBwdDataAlgo_t)a, &n);
    if (st == CUDNN_STATUS_SUCCESS && n <= WS_LIMIT && n > want) want = n;
  }
  size_t room = s->find_plain ? 0 : search_room(s, want);
  found r[NALGO];
  if (fwd) {
    cudnnConvolutionFwdAlgoPerf_t perf[NALGO];
    if (s->find_plain)
      DNN(cudnnFindConvolutionForwardAlgorithm(s->h, po->x, c->wd, c->cd, po->y, NALGO, &got, perf),
          l->name);
    else
      DNN(cudnnFindConvolutionForwardAlgorithmEx(s->h, po->x, x, c->wd, c->w, c->cd, po->y, y,
                                                 NALGO, &got, perf, s->search_ws, room),
          l->name);
    COPY_FOUND(r, perf, got);
  } else {
    cudnnConvolutionBwdDataAlgoPerf_t perf[NALGO];
    if (s->find_plain)
      DNN(cudnnFindConvolutionBackwardDataAlgorithm(s->h, c->wd, po->x, c->cd, po->y, NALGO, &got,
                                                    perf),
          l->name);
    else
      DNN(cudnnFindConvolutionBackwardDataAlgorithmEx(s->h, c->wd, c->w, po->x, x, c->cd, po->y,
                                                      y, NALGO, &got, perf, s->search_ws, room),
          l->name);
    COPY_FOUND(r, perf, got);
  }
  for (int k = 0; k < got; k++) {
    if (s->debug)
      fprintf(stderr, "w2l cuda: search %s (workspace %zu): algo %d math %d status %d %.4f ms, "
                      "workspace %zu\n",
              l->name, room, r[k].algo, (int)r[k].math, (int)r[k].status, r[k].ms, r[k].memory);
    if (*best < 0 && r[k].status == CUDNN_STATUS_SUCCESS && r[k].memory <= WS_LIMIT)
      *best = k, po->algo = r[k].algo, po->math = r[k].math, *mem = r[k].memory;
  }
  if (*best >= 0 && batch <= RETIME_UPTO && s->retime && !s->find_plain)
    retime(s, o, l, c, po, r, got, *best, room, mem);
  if (*best >= 0) *best = 0;
  return FC_OK;
}

int w2l_cudnn_build_plan(cstate *s, const fc_w2l *m, cplan *p) {
  for (int i = 0; i < m->nops; i++) {
    const w2l_op *o = &m->ops[i];
    if (o->kind != W2L_OP_CONV || i == m->nops - 1) continue; /* the last one: w2l_cuda_head */
    const w2l_layer *l = &m->layers[o->layer];
    clayer *c = &s->layers[o->layer];
    cop *po = &p->ops[i];
    int err;
    const w2l_tensor *ti = &m->tensors[o->in], *to = &m->tensors[o->out];
    if ((err = tensor_desc(s, &po->x, ti, p->batch, o->in == m->t_face ? FACE_CP : ti->c)))
      return err;
    if ((err = tensor_desc(s, &po->y, to, p->batch, to->c))) return err;
    if (i == s->face_op && s->own_first) continue; /* w2l_cuda_conv_first: nothing to search */
    if (s->own_tail && i == s->tail_op + 1) continue; /* w2l_cuda_tail: nothing either */
    if (s->own_convt && i == s->convt_op + 1) continue; /* w2l_cuda_convt: nor here */
    if ((po->dense = dense_fits(s, m, o, p->batch))) { /* w2l_cuda_dense: nothing to search */
      s->n_dense++;
      continue;
    }
    int half = s->dtype != W2L_DT_F32;
    DNN(cudnnSetConvolutionMathType(c->cd, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
        "math type");
    int best = -1;
    size_t mem = 0;
    char key[200] = "", like[200];
    w2l_algo cached;
    if (s->fixed_algo) {
      best = 0;
      po->math = half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
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
    } else if (algo_key(key, sizeof key, s, l, p->batch, ti, to) &&
               w2l_algo_cache_get(s->algos, key, &cached) &&
               cached_ok(s, l, c, po, &cached, &mem)) {
      best = 0, po->algo = cached.algo, po->math = (cudnnMathType_t)cached.math;
      s->n_cached++;
    } else if (s->search_upto > 0 && p->batch > s->search_upto &&
               algo_key(like, sizeof like, s, l, s->search_upto, ti, to) &&
               w2l_algo_cache_get(s->algos, like, &cached) &&
               cached_ok(s, l, c, po, &cached, &mem)) { /* as at search_upto: not remembered */
      best = 0, po->algo = cached.algo, po->math = (cudnnMathType_t)cached.math;
      s->n_inherited++;
    } else {
      gint64 t0 = g_get_monotonic_time();
      if ((err = search(s, m, o, po, half, p->batch, &best, &mem))) return err;
      double took = (double)(g_get_monotonic_time() - t0) / 1e6;
      s->search_s += took, p->search_s += took, s->n_searched++;
      if (best >= 0 && *key) remember(s, key, po, mem);
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
