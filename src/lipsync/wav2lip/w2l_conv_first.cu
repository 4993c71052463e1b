/* The Wav2Lip "cuda" backend's first layer, our own kernel (w2l_cuda.h: w2l_cuda_conv_first).
 *
 * Why: the network's first convolution (6 -> 16 channels, 7x7, at the face's full size) was the
 * slowest layer per FLOP under cuDNN (38 TFLOP/s at batch 256, 0.59 ms of a 5.9 ms pass on the
 * H200, docs/BENCHMARKS.md): with 8 input channels (6 and two zeros) an implicit-GEMM kernel's
 * K loop loads 16 bytes per filter tap. Here the whole input tile sits in shared memory and the
 * K dimension pairs two horizontally adjacent taps: with the input stored 8 channels a pixel,
 * the 16 values of taps (ky, kx) and (ky, kx + 1) for one output pixel are the 16 consecutive
 * halves starting at that pixel's (ky, kx) input, and the next output pixel's start 8 halves
 * later. So one 16x16x16 tensor-core step (WMMA) is 16 output pixels x 16 output channels x 2
 * taps, read straight from the tile with a row stride of 8 and no im2col: ceil(k/2) steps per
 * filter row (the odd tap pairs with a zero weight), 28 for the 7x7 layer.
 *
 * Layout: x NHWC fp16 with 8 channels a pixel (channels past cin zero, as the backend keeps its
 * face input); w [k][ceil(k/2)][16][16] fp16 (row ky, tap pair p, then k = tap-in-pair * 8 +
 * input channel, then output channel; zeros where a tap or channel does not exist); bias fp32;
 * y NHWC fp16 with 16 channels, relu(conv + bias). Accumulation in fp32 (as cuDNN's with
 * CUDNN_DATA_FLOAT compute). A block is 8 warps and 16 columns; a warp computes one output row
 * (small batches: many blocks) or four (large ones: each weight fragment loaded once for four
 * tensor-core steps whose chains run side by side).
 *
 * The cuDNN path stays the reference: W2L_CUDA_OWN=0 runs it instead, and test_wav2lip compares
 * the two on the GPU. */
#include "lipsync/wav2lip/w2l_cuda.h"

#include <cuda_fp16.h>
#include <mma.h>

namespace {

using namespace nvcuda;

constexpr int WARPS = 8; /* a block's warps */
constexpr int COLS = 16; /* output columns per block: one WMMA tile's M */
constexpr int CX = 8;    /* input channels a pixel */
constexpr int CO = 16;   /* output channels */

template <int KS, int R>
__global__ void __launch_bounds__(WARPS * 32)
    k_conv_first(const __half *__restrict__ x, const __half *__restrict__ w,
                 const float *__restrict__ bias, __half *__restrict__ y, int H, int W) {
  constexpr int P = KS / 2, PAIRS = (KS + 1) / 2;
  constexpr int ROWS = WARPS * R; /* output rows per block */
  constexpr int TH = ROWS + KS - 1;
  /* columns: the tile's COLS + KS - 1, one more for the zero tap of an odd KS, rounded to even
   * so that every (row, even column) start is 32-byte aligned as WMMA's loads want */
  constexpr int TW = (COLS + 2 * PAIRS - 1 + 1) & ~1;
  __shared__ __align__(32) __half tile[TH * TW * CX];
  __shared__ __align__(32) __half ws[KS * PAIRS * 256];
  __shared__ __align__(32) float acc_out[WARPS][COLS * CO];

  const int n = blockIdx.z, y0 = blockIdx.y * ROWS, x0 = blockIdx.x * COLS;
  const __half *xn = x + (size_t)n * H * W * CX;
  for (int i = threadIdx.x; i < KS * PAIRS * 256 / 8; i += blockDim.x)
    reinterpret_cast<uint4 *>(ws)[i] = reinterpret_cast<const uint4 *>(w)[i];
  for (int i = threadIdx.x; i < TH * TW; i += blockDim.x) {
    const int ty = i / TW, tx = i % TW, gy = y0 + ty - P, gx = x0 + tx - P;
    uint4 v = make_uint4(0, 0, 0, 0); /* outside the picture: the convolution's zero padding */
    if (gy >= 0 && gy < H && gx >= 0 && gx < W)
      v = *reinterpret_cast<const uint4 *>(xn + ((size_t)gy * W + gx) * CX);
    reinterpret_cast<uint4 *>(tile)[i] = v;
  }
  __syncthreads();

  /* a warp's R rows are warp, warp + WARPS, ...: R independent accumulators share each weight
   * fragment (fewer shared-memory loads, and R tensor-core chains in flight, not one) */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[R];
#pragma unroll
  for (int r = 0; r < R; r++) wmma::fill_fragment(acc[r], 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
#pragma unroll
  for (int ky = 0; ky < KS; ky++)
#pragma unroll
    for (int p = 0; p < PAIRS; p++) {
      wmma::load_matrix_sync(b, ws + (ky * PAIRS + p) * 256, CO);
#pragma unroll
      for (int r = 0; r < R; r++) {
        /* rows of A: output pixels x0 + 0..15 of row y0 + warp + r * WARPS; columns: taps
         * 2p, 2p + 1 */
        wmma::load_matrix_sync(a, tile + ((warp + r * WARPS + ky) * TW + 2 * p) * CX, CX);
        wmma::mma_sync(acc[r], a, b, acc[r]);
      }
    }
  /* epilogue, a row at a time through the warp's 1 KB: a lane writes 8 channels of one pixel */
  const int px = lane >> 1, c0 = (lane & 1) * 8, ox = x0 + px;
#pragma unroll
  for (int r = 0; r < R; r++) {
    wmma::store_matrix_sync(acc_out[warp], acc[r], CO, wmma::mem_row_major);
    __syncwarp();
    const int oy = y0 + warp + r * WARPS;
    if (oy < H && ox < W) {
      union { uint4 u; __half h[8]; } o;
#pragma unroll
      for (int j = 0; j < 8; j++)
        o.h[j] = __float2half_rn(fmaxf(acc_out[warp][px * CO + c0 + j] + bias[c0 + j], 0.0f));
      *reinterpret_cast<uint4 *>(y + (((size_t)n * H + oy) * W + ox) * CO + c0) = o.u;
    }
    __syncwarp(); /* read before the next row overwrites it */
  }
}

template <int KS>
int launch(const __half *x, const __half *w, const float *bias, __half *y, int n, int h, int wd,
           cudaStream_t s) {
  /* four rows a warp once there are blocks enough to fill the GPU (batch 8 at 96x96: 144);
   * below, one, so that a small batch still spreads over many blocks */
  const int blocks4 = (wd + COLS - 1) / COLS * ((h + WARPS * 4 - 1) / (WARPS * 4)) * n;
  if (blocks4 >= 128) {
    dim3 grid((unsigned)(wd + COLS - 1) / COLS, (unsigned)(h + WARPS * 4 - 1) / (WARPS * 4), (unsigned)n);
    k_conv_first<KS, 4><<<grid, WARPS * 32, 0, s>>>(x, w, bias, y, h, wd);
  } else {
    dim3 grid((unsigned)(wd + COLS - 1) / COLS, (unsigned)(h + WARPS - 1) / WARPS, (unsigned)n);
    k_conv_first<KS, 1><<<grid, WARPS * 32, 0, s>>>(x, w, bias, y, h, wd);
  }
  return (int)cudaGetLastError();
}

} // namespace

extern "C" int w2l_cuda_conv_first(const void *x, const void *w, const float *bias, void *y, int n,
                                   int h, int wd, int ks, cudaStream_t s) {
  const __half *xi = (const __half *)x, *wi = (const __half *)w;
  __half *yo = (__half *)y;
  switch (ks) {
  case 7: return launch<7>(xi, wi, bias, yo, n, h, wd, s);
  case 5: return launch<5>(xi, wi, bias, yo, n, h, wd, s);
  case 3: return launch<3>(xi, wi, bias, yo, n, h, wd, s);
  default: return (int)cudaErrorInvalidValue;
  }
}
