/* The Wav2Lip "cuda" backend's own kernels (see w2l_cuda.h): layout conversion at the edges,
 * the bias/residual/ReLU epilogue where cuDNN's fused call is not used, channel concatenation
 * and the output sigmoid. Plain grid-stride element-wise kernels: all memory-bound and small next
 * to the convolutions. */
#include "lipsync/wav2lip/w2l_cuda.h"

#include <cuda_fp16.h>

namespace {

__device__ __forceinline__ float ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void st(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }

#define GRID_STRIDE(i, n)                                                                         \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
       i += (size_t)gridDim.x * blockDim.x)

template <typename T>
__global__ void k_nchw_to_nhwc(const float *src, T *dst, int c, int hw, size_t total) {
  GRID_STRIDE(i, total) {
    size_t ch = i % c, rest = i / c, p = rest % hw, n = rest / hw;
    st(dst, i, src[(n * c + ch) * hw + p]);
  }
}

__global__ void k_f32_to_f16(const float *src, __half *dst, size_t total) {
  GRID_STRIDE(i, total) dst[i] = __float2half_rn(src[i]);
}

template <typename T>
__global__ void k_bias_act(T *y, const float *bias, const T *z, int c, int relu, size_t total) {
  GRID_STRIDE(i, total) {
    float v = ld(y, i) + bias[i % c];
    if (z) v += ld(z, i);
    if (relu) v = fmaxf(v, 0.f);
    st(y, i, v);
  }
}

template <typename T>
__global__ void k_concat(const T *a, int ca, const T *b, int cb, T *out, size_t total) {
  int c = ca + cb;
  GRID_STRIDE(i, total) {
    size_t ch = i % c, p = i / c;
    out[i] = ch < (size_t)ca ? a[p * ca + ch] : b[p * cb + (ch - ca)];
  }
}

template <typename T>
__global__ void k_sigmoid(const T *lg, float *out, int c, int hw, size_t total) {
  GRID_STRIDE(i, total) { /* i indexes the NCHW output */
    size_t p = i % hw, rest = i / hw, ch = rest % c, n = rest / c;
    float v = ld(lg, (n * hw + p) * c + ch);
    out[i] = 1.f / (1.f + __expf(-v));
  }
}

unsigned blocks(size_t total) {
  size_t b = (total + 255) / 256;
  return (unsigned)(b < 65535 * 8 ? (b ? b : 1) : 65535 * 8);
}

} // namespace

extern "C" int w2l_cuda_nchw_to_nhwc(const float *src, void *dst, int n, int c, int hw, int half,
                                     cudaStream_t s) {
  size_t total = (size_t)n * c * hw;
  if (half) k_nchw_to_nhwc<<<blocks(total), 256, 0, s>>>(src, (__half *)dst, c, hw, total);
  else k_nchw_to_nhwc<<<blocks(total), 256, 0, s>>>(src, (float *)dst, c, hw, total);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_f32_to_f16(const float *src, void *dst, size_t count, cudaStream_t s) {
  k_f32_to_f16<<<blocks(count), 256, 0, s>>>(src, (__half *)dst, count);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_bias_act(void *y, const float *bias, const void *z, size_t npix, int c,
                                 int relu, int half, cudaStream_t s) {
  size_t total = npix * c;
  if (half)
    k_bias_act<<<blocks(total), 256, 0, s>>>((__half *)y, bias, (const __half *)z, c, relu, total);
  else
    k_bias_act<<<blocks(total), 256, 0, s>>>((float *)y, bias, (const float *)z, c, relu, total);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_concat(const void *a, int ca, const void *b, int cb, void *out,
                               size_t npix, int half, cudaStream_t s) {
  size_t total = npix * (ca + cb);
  if (half)
    k_concat<<<blocks(total), 256, 0, s>>>((const __half *)a, ca, (const __half *)b, cb,
                                           (__half *)out, total);
  else
    k_concat<<<blocks(total), 256, 0, s>>>((const float *)a, ca, (const float *)b, cb,
                                           (float *)out, total);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_sigmoid_nhwc_to_nchw(const void *logits, float *out, int n, int c, int hw,
                                             int half, cudaStream_t s) {
  size_t total = (size_t)n * c * hw;
  if (half) k_sigmoid<<<blocks(total), 256, 0, s>>>((const __half *)logits, out, c, hw, total);
  else k_sigmoid<<<blocks(total), 256, 0, s>>>((const float *)logits, out, c, hw, total);
  return (int)cudaGetLastError();
}
