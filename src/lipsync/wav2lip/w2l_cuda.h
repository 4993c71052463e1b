/* Private: the small CUDA kernels of the Wav2Lip "cuda" backend (w2l_kernels.cu), for the parts
 * cuDNN has no call for. Element type: fp32 when half == 0, else fp16 (__half); fp32 math inside.
 * Each launcher enqueues on stream and returns cudaGetLastError() (0 = fine). */
#ifndef FC_W2L_CUDA_H
#define FC_W2L_CUDA_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dst[n][p][c] = src[n][c][p] (NCHW fp32 -> NHWC), p over hw pixels */
int w2l_cuda_nchw_to_nhwc(const float *src, void *dst, int n, int c, int hw, int half,
                          cudaStream_t s);
/* dst[i] = (half) src[i] */
int w2l_cuda_f32_to_f16(const float *src, void *dst, size_t count, cudaStream_t s);
/* y[p][c] = act(y[p][c] + bias[c] + (z ? z[p][c] : 0)), act = ReLU if relu, p over npix */
int w2l_cuda_bias_act(void *y, const float *bias, const void *z, size_t npix, int c, int relu,
                      int half, cudaStream_t s);
/* out[p] = concat(a[p] (ca channels), b[p] (cb channels)) */
int w2l_cuda_concat(const void *a, int ca, const void *b, int cb, void *out, size_t npix,
                    int half, cudaStream_t s);
/* out[n][c][p] (fp32) = sigmoid(logits[n][p][c]) */
int w2l_cuda_sigmoid_nhwc_to_nchw(const void *logits, float *out, int n, int c, int hw, int half,
                                  cudaStream_t s);

#ifdef __cplusplus
}
#endif
#endif
