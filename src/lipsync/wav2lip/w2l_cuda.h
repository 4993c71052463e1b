/* Private: the small CUDA kernels of the Wav2Lip "cuda" backend (w2l_kernels.cu), for the parts
 * cuDNN has no call for. Element type dt: W2L_DT_F32 (float), W2L_DT_F16 (__half) or
 * W2L_DT_BF16 (__nv_bfloat16); fp32 math inside. Each launcher enqueues on stream and returns
 * cudaGetLastError() (0 = fine). */
#ifndef FC_W2L_CUDA_H
#define FC_W2L_CUDA_H

#include "lipsync/wav2lip/wav2lip.h"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { W2L_DT_F32 = 0, W2L_DT_F16 = 1, W2L_DT_BF16 = 2 }; /* == FC_W2L_FP32 / FP16 / BF16 */

/* A failed CUDA runtime call as an fc error (cuda_cudnn.c): FC_ENOMEM for an allocation (the
 * scheduler halves the batch on it), FC_EUNSUPPORTED otherwise; clears the sticky last error. */
int w2l_cuda_error(cudaError_t e, const char *what);
#define W2L_CU(call, what)                                                                        \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) return w2l_cuda_error(e_, what);                                        \
  } while (0)

/* dst[n][p][c] = src[n][c][p] (NCHW fp32 -> NHWC), p over hw pixels; dst pixels are cdst >= c
 * channels apart (the channels past c are not written) */
int w2l_cuda_nchw_to_nhwc(const float *src, void *dst, int cdst, int n, int c, int hw, int dt,
                          cudaStream_t s);
/* dst[i] = (dt) src[i] */
int w2l_cuda_f32_to(const float *src, void *dst, size_t count, int dt, cudaStream_t s);
/* y[p][c] = act(y[p][c] + bias[c] + (z ? z[p][c] : 0)), act = ReLU if relu, p over npix */
int w2l_cuda_bias_act(void *y, const float *bias, const void *z, size_t npix, int c, int relu,
                      int dt, cudaStream_t s);
/* out[p] = concat(a[p] (ca channels), b[p] (cb channels)) */
int w2l_cuda_concat(const void *a, int ca, const void *b, int cb, void *out, size_t npix, int dt,
                    cudaStream_t s);
/* The network's face input from RGB bytes: crops [n][side][side][3] -> dst NHWC, pixels cdst
 * >= 6 channels apart: channels 0..2 the crop as BGR/255 with rows >= side/2 zeroed, 3..5 the
 * crop as BGR/255 (the channels past 6 are not written). */
int w2l_cuda_crops_to_input(const uint8_t *crops, void *dst, int cdst, int n, int side, int dt,
                            cudaStream_t s);
/* The network's last layer (1x1 conv cin -> 3, BGR) with the sigmoid and the output: x NHWC
 * [n][hw][cin], w [3][cin] and bias [3] fp32 on the device; writes outf [n][3][hw] floats, or
 * out8 [n][hw][3] RGB bytes round(255 * sigmoid) when out8 is not NULL. */
int w2l_cuda_head(const void *x, int cin, const float *w, const float *bias, float *outf,
                  uint8_t *out8, int n, int hw, int dt, cudaStream_t s);

/* The first layer as our own kernel (w2l_conv_first.cu), fp16 only: x NHWC [n][h][wd][8]
 * (input channels past the layer's zero), w [ks][(ks+1)/2][16][16] (filter row, tap pair,
 * tap-in-pair * 8 + input channel, output channel), bias fp32 [16]; y NHWC [n][h][wd][16] =
 * relu(conv(x, stride 1, padding ks/2) + bias). ks 3, 5 or 7. */
int w2l_cuda_conv_first(const void *x, const void *w, const float *bias, void *y, int n, int h,
                        int wd, int ks, cudaStream_t s);

/* The network's last three ops as our own kernel (w2l_tail.cu), fp16 only: the concatenation
 * of a NHWC [n][h][wd][ca] with b [n][h][wd][cb] (b NULL: each frame's b at arena + jobs[n].feat
 * + off, the face-feature cache), the output block's 3x3 convolution (stride 1, padding 1) +
 * bias + ReLU to cout channels, and the head as w2l_cuda_head (head_w [3][cout], head_b [3]
 * fp32; outf or out8). w: [16 * no][9][cs] fp16 (output channel, tap, input channel; zeros past
 * cout and ca + cb; no = 2 for cs 80, 1 for cs 16). _cs: the cs a shape runs with, 0 when the
 * kernel has no instantiation for it; _prepare(cs): once before the first launch (its shared
 * memory allowance; not inside a graph capture). */
int w2l_cuda_tail_cs(int ca, int cb, int cout);
int w2l_cuda_tail_prepare(int cs);
int w2l_cuda_tail(const void *a, int ca, const void *b, int cb, const uint8_t *arena,
                  size_t off, const void *jobs, const void *w, const float *bias,
                  const float *head_w, const float *head_b, int cout, float *outf,
                  uint8_t *out8, int n, int h, int wd, cudaStream_t s);

/* A concatenation and the transposed convolution reading it as our own kernel (w2l_convt.cu),
 * fp16 only: a NHWC [n][h][wd][ca] and b [n][h][wd][cb] as w2l_cuda_tail's (b and arena NULL
 * with cb 0: a alone) through a ConvTranspose2d with a 3x3 filter, stride 2, padding 1 and
 * output padding 1, + bias (+ ReLU) into y NHWC [n][2h][2wd][co]. w: [32 * groups][9][cs] fp16
 * (output channel, tap ky * 3 + kx, input channel; zeros past co and ca + cb). _cs: the cs a
 * shape runs with, 0 when none; _prepare(cs): once before the first launch. */
int w2l_cuda_convt_cs(int ca, int cb, int co);
int w2l_cuda_convt_prepare(int cs);
int w2l_cuda_convt(const void *a, int ca, const void *b, int cb, const uint8_t *arena,
                   size_t off, const void *jobs, const void *w, const float *bias, int co,
                   int relu, void *y, int n, int h, int wd, cudaStream_t s);

/* A convolution whose filter covers its whole unpadded input (one output pixel: 3x3 on 3x3,
 * 1x1 on 1x1) as a matrix-vector product per frame, our own kernel (w2l_dense.cu), fp16 only:
 * x [n][K] (a frame's NHWC input, K = h * w * cin), w [N][K] (KRSC), bias fp32 [N], z NULL or
 * [n][N] added before the activation; y [n][N] = act(w x + bias (+ z)), act = ReLU if relu.
 * _fits: n <= W2L_DENSE_MAX_BATCH, K % 8 == 0. */
#define W2L_DENSE_MAX_BATCH 32
int w2l_cuda_dense_fits(int n, int K, int N);
int w2l_cuda_dense(const void *x, const void *w, const float *bias, const void *z, void *y, int n,
                   int K, int N, int relu, cudaStream_t s);

/* Compositing (w2l_composite.h), jobs = n device w2l_cjob, side = the model's face side (96 or
 * 256): each live job's face box in src (the source arena) resized into crops
 * [n][side][side][3]; and each live job's patch rect made from net [n][side][side][3] (the
 * network's RGB bytes) over its background in src, into out. */
int w2l_cuda_crop_jobs(const uint8_t *src, const void *jobs, int n, int side, uint8_t *crops,
                       cudaStream_t s);
int w2l_cuda_paste_jobs(const uint8_t *net, int side, const uint8_t *src, const void *jobs, int n,
                        uint8_t *out, cudaStream_t s);

/* The face-feature cache's side of a pass (see cuda_composite.c): after the face encoder, each
 * job with store set copies its frame's skip tensors (n parts: part k is bytes[k] a frame at
 * src[k], frames packed) to arena + its feat offset + off[k]; a pass without the face encoder
 * then concatenates a (ca channels a pixel) with each job's part from the arena (cb channels a
 * pixel, part offset off bytes) into out. */
typedef struct w2l_skip_parts {
  const void *src[10];
  unsigned long long off[10], bytes[10];
  int n;
} w2l_skip_parts;
int w2l_cuda_store_features(const w2l_skip_parts *parts, const void *jobs, int n, uint8_t *arena,
                            cudaStream_t s);
int w2l_cuda_concat_cached(const void *a, int ca, const uint8_t *arena, size_t off,
                           const void *jobs, int cb, void *out, int n, int hw, int dt,
                           cudaStream_t s);

/* The composite path's device state (cuda_composite.c): the source cache (avatar face pixels by
 * key), the face features by key, the job table and the output buffer. All copies go on stream
 * st. */
typedef struct w2l_ccache w2l_ccache;
typedef struct w2l_ccache_bufs {
  uint8_t *d_src;          /* the source arena */
  void *d_jobs, *h_jobs;   /* w2l_cjob[max_batch], device and pinned host */
  uint8_t *d_out, *h_out;  /* the packed finished rects */
  uint8_t *d_feat;         /* the feature arena, NULL when there is none */
} w2l_ccache_bufs;
/* feat_bytes: one frame's feature record (0: no feature cache); feat_mb: the feature arena's
 * MiB (0: none, < 0: min(2 GiB, an eighth of the free device memory)) */
int w2l_ccache_create(w2l_ccache **c, int max_batch, size_t feat_bytes, long feat_mb,
                      cudaStream_t st);
void w2l_ccache_destroy(w2l_ccache *c);
/* Makes jobs[0..n) resident (uploading new keys, asking base(user, first + k) for their
 * background), fills the host job table (padding jobs n..nb-1 dead) and the packed output
 * offsets; *out_bytes: the bytes to copy back; *grew: the output buffer moved (graphs that name
 * it are stale); *cached: every job's face features are stored (the pass may skip the face
 * encoder), else the pass must store those of the jobs marked. */
int w2l_ccache_resolve(w2l_ccache *c, const struct fc_w2l_job *jobs, int n, int nb,
                       fc_w2l_base_fn base, void *user, int first, size_t *out_bytes, int *grew,
                       int *cached);
/* After a pass that finished: the records it stored count from now on. */
void w2l_ccache_commit(w2l_ccache *c, const struct fc_w2l_job *jobs, int n);
/* Feature cache on or off (what was stored is dropped when it changes); 0 when asked on without
 * an arena, else 1. */
int w2l_ccache_features(w2l_ccache *c, int on);
void w2l_ccache_feature_stats(const w2l_ccache *c, fc_w2l_feature_stats *fs);
/* After the copy back: each job's finished rect into its out buffer. */
void w2l_ccache_deliver(const w2l_ccache *c, const struct fc_w2l_job *jobs, int n);
void w2l_ccache_buffers(const w2l_ccache *c, w2l_ccache_bufs *b);

#ifdef __cplusplus
}
#endif
#endif
