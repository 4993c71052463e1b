/* Private: the small CUDA kernels of the Wav2Lip "cuda" backend (w2l_kernels.cu), for the parts
 * cuDNN has no call for. Element type dt: W2L_DT_F32 (float), W2L_DT_F16 (__half) or
 * W2L_DT_BF16 (__nv_bfloat16); fp32 math inside. Each launcher enqueues on stream and returns
 * cudaGetLastError() (0 = fine). */
#ifndef FC_W2L_CUDA_H
#define FC_W2L_CUDA_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { W2L_DT_F32 = 0, W2L_DT_F16 = 1, W2L_DT_BF16 = 2 }; /* == FC_W2L_FP32 / FP16 / BF16 */

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

#ifdef __cplusplus
}
#endif
#endif
