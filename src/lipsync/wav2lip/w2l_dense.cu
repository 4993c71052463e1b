/* The Wav2Lip "cuda" backend's whole-picture convolutions at small batches as our own kernel
 * (w2l_cuda.h: w2l_cuda_dense). The engine runs the three 1x1 ones on it by default (4.5-4.7 us
 * each at batch 1 on the H200 against cuDNN's 69.7); the two 3x3 ones stay on cuDNN, which is
 * faster there (12.8 against 20.6 us: each 256-wide step through K waits on one weight load a
 * lane), unless W2L_CUDA_DENSE=all (docs/BENCHMARKS.md).
 *
 * Why: five convolutions of the 96 network see their whole input at once — a 3x3 kernel on a
 * 3x3 picture or a 1x1 kernel on a 1x1 one, no padding, one output pixel (face_encoder_blocks.6
 * both, audio_encoder.11 and .12, face_decoder_blocks.0). Each is a matrix-vector product per
 * frame: y[n][co] = act(b[co] + sum_k w[co][k] x[n][k] (+ z[n][co])) with k over
 * (ky, kx, ci), which is exactly the NHWC input of one frame and the KRSC filter row of one
 * output channel. At batch 1 on the H200 cuDNN runs the three 512 -> 512 ones on a generic
 * kernel of 4 blocks, 69 us each, two of them on the critical path of a 0.66 ms pass (ncu
 * kernel list, docs/BENCHMARKS.md); reading 512 KB of weights takes well under 5 us.
 *
 * How: a block is 8 warps, one output channel a warp; the block stages its frames' inputs 256
 * values at a time in shared memory, each lane multiplies 8 consecutive weights (one 16-byte
 * load) with the 8 matching inputs of every frame, and the warp sums its lanes at the end. Up to
 * W2L_DENSE_MAX_BATCH frames a call (their partial sums live in registers); above that cuDNN's
 * tensor-core GEMMs are the better tool. fp16 data, fp32 accumulation and bias. */
#include "lipsync/wav2lip/w2l_cuda.h"

#include <cuda_fp16.h>

namespace {

constexpr int WARPS = 8;
constexpr int KC = 256; /* inputs staged a step: 32 lanes x 8 */

__global__ void __launch_bounds__(WARPS * 32)
    k_dense(const __half *__restrict__ x, const __half *__restrict__ w,
            const float *__restrict__ bias, const __half *__restrict__ z, __half *__restrict__ y,
            int n, int K, int N, int relu) {
  __shared__ __align__(16) __half xs[W2L_DENSE_MAX_BATCH * KC];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int co = blockIdx.x * WARPS + warp;
  float acc[W2L_DENSE_MAX_BATCH];
#pragma unroll
  for (int j = 0; j < W2L_DENSE_MAX_BATCH; j++) acc[j] = 0.f;
  for (int k0 = 0; k0 < K; k0 += KC) {
    const int kc = K - k0 < KC ? K - k0 : KC; /* a multiple of 8 (w2l_cuda_dense_fits) */
    __syncthreads();                           /* the last step's inputs are read */
    for (int i = threadIdx.x; i < n * (kc / 8); i += WARPS * 32) {
      const int j = i / (kc / 8), v = i % (kc / 8);
      reinterpret_cast<uint4 *>(xs + j * KC)[v] =
          *reinterpret_cast<const uint4 *>(x + (size_t)j * K + k0 + v * 8);
    }
    __syncthreads();
    if (co >= N || lane * 8 >= kc) continue;
    union { uint4 u; __half2 h[4]; } wv, xv;
    wv.u = *reinterpret_cast<const uint4 *>(w + (size_t)co * K + k0 + lane * 8);
    float2 wf[4];
#pragma unroll
    for (int q = 0; q < 4; q++) wf[q] = __half22float2(wv.h[q]);
#pragma unroll
    for (int j = 0; j < W2L_DENSE_MAX_BATCH; j++) {
      if (j >= n) break;
      xv.u = reinterpret_cast<const uint4 *>(xs + j * KC)[lane];
#pragma unroll
      for (int q = 0; q < 4; q++) {
        const float2 xf = __half22float2(xv.h[q]);
        acc[j] = fmaf(wf[q].x, xf.x, fmaf(wf[q].y, xf.y, acc[j]));
      }
    }
  }
  if (co >= N) return;
#pragma unroll
  for (int j = 0; j < W2L_DENSE_MAX_BATCH; j++) {
    if (j >= n) break;
    float v = acc[j];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == (j & 31)) {
      v += bias[co];
      if (z) v += __half2float(z[(size_t)j * N + co]);
      y[(size_t)j * N + co] = __float2half_rn(relu ? fmaxf(v, 0.f) : v);
    }
  }
}

} // namespace

extern "C" int w2l_cuda_dense_fits(int n, int K, int N) {
  return n >= 1 && n <= W2L_DENSE_MAX_BATCH && K > 0 && K % 8 == 0 && N > 0;
}

extern "C" int w2l_cuda_dense(const void *x, const void *w, const float *bias, const void *z,
                              void *y, int n, int K, int N, int relu, cudaStream_t s) {
  if (!w2l_cuda_dense_fits(n, K, N)) return (int)cudaErrorInvalidValue;
  k_dense<<<(unsigned)((N + WARPS - 1) / WARPS), WARPS * 32, 0, s>>>(
      (const __half *)x, (const __half *)w, bias, (const __half *)z, (__half *)y, n, K, N, relu);
  return (int)cudaGetLastError();
}
