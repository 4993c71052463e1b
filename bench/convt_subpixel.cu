/* An experiment, measured and not used by the engine: Wav2Lip's stride-2 transposed
 * convolutions as one sub-pixel tensor-core kernel of our own (bench/cudnn_convt_probe.cu
 * times it against cuDNN; docs/BENCHMARKS.md has the result: correct, but 2-3x slower than
 * cuDNN's backward data at large batches and slower inside a CUDA graph at small ones, so the
 * backend keeps cuDNN for these layers).
 *
 * Why it was tried: cuDNN runs ConvTranspose2d as backward data, 130-340 TFLOP/s at batch 256
 * on the H200, plus a bias/ReLU pass over the output; and cuDNN's legacy calls take no strided
 * tensors, so the layer cannot be handed to it as four sub-pixel forward convolutions either
 * (the probe: refused).
 *
 * The layer (k3, stride 2, padding 1, output padding 1: H -> 2H) is four sub-pixel convolutions:
 * output pixel (2m + a, 2n + b) takes input rows {m} (a = 0, filter row 1) or {m, m + 1} (a = 1,
 * rows 2 and 0), and likewise columns; input past the last row or column is zero. Every filter
 * tap belongs to exactly one phase, so it is 9 taps of GEMM work per input pixel, no zeros:
 *   phase (0,0): shift (0,0) tap (1,1)
 *   phase (0,1): (0,0) tap (1,2); (0,1) tap (1,0)
 *   phase (1,0): (0,0) tap (2,1); (1,0) tap (0,1)
 *   phase (1,1): (0,0) tap (2,2); (0,1) tap (2,0); (1,0) tap (0,2); (1,1) tap (0,0)
 * A block takes 64 input pixels (flattened over batch, rows and columns, so small pictures fill
 * whole tiles) and 64 output channels; for each 16 input channels it stages the four shifted
 * 64 x 16 input tiles and the nine 16 x 64 weight tiles in shared memory (the next chunk's
 * global loads in flight during this chunk's tensor-core steps), and each of its 8 warps runs
 * 16 x 16 x 16 WMMA steps for 2 pixel tiles x 4 phases x 16 output channels. The epilogue adds
 * the bias, applies the ReLU and writes each phase's pixels to their place in the 2H x 2W
 * output. What it lacks against a fast kernel: a deeper pipeline (cp.async, several stages),
 * larger K steps per barrier, and Hopper's wgmma; at small batches, split-K (the 3x3 and 6x6
 * layers are a few blocks with a 48-64 step K loop).
 *
 * Layout: x NHWC fp16 [n][h][w][cin]; w fp16 [9][cin][cout] (tap ky * 3 + kx, PyTorch's
 * ConvTranspose2d weight [cin][cout][ky][kx] re-laid); bias fp32 [cout]; y NHWC fp16
 * [n][2h][2w][cout] = relu(convt(x) + bias). cin % 16 == 0, cout % 64 == 0; fp32 accumulation.
 * Variant 1 lets the compiler keep everything in registers (222: one block a multiprocessor),
 * 2 caps them at 128 (two blocks, a few spills). */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

namespace {

using namespace nvcuda;

constexpr int WARPS = 8;
constexpr int PIX = 64;  /* input pixels a block */
constexpr int COT = 64;  /* output channels a block */
constexpr int KC = 16;   /* input channels a step */
constexpr int ALD = 24;  /* row stride of the staged input tiles (halves; breaks bank conflicts) */
constexpr int BLD = 72;  /* row stride of the staged weight tiles */
constexpr int AV = 4 * PIX * (KC / 8) / (WARPS * 32);             /* 16-byte loads a thread: 2 */
constexpr int BV = (9 * KC * (COT / 8) + WARPS * 32 - 1) / (WARPS * 32); /* 5 (4.5) */

template <int MINB>
__global__ void __launch_bounds__(WARPS * 32, MINB)
    k_convt_s2(const __half *__restrict__ x, const __half *__restrict__ w,
               const float *__restrict__ bias, __half *__restrict__ y, int npix, int H, int W,
               int cin, int cout) {
  __shared__ __align__(32) __half As[4 * PIX * ALD];  /* [shift][pixel][KC] */
  __shared__ __align__(32) __half Bs[9 * KC * BLD];   /* [tap][ci][COT] */
  __shared__ __align__(32) float ep[WARPS][16 * 16];  /* a warp's accumulator, for the epilogue */

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int p0 = blockIdx.x * PIX, co0 = blockIdx.y * COT;
  const int HW = H * W;

  /* this thread's input loads: (shift, pixel, half of the 16 channels), fixed across chunks */
  const __half *asrc[AV];
  int adst[AV];
#pragma unroll
  for (int k = 0; k < AV; k++) {
    const int v = tid + k * WARPS * 32, s = v / (2 * PIX), px = (v >> 1) % PIX, h8 = v & 1;
    const int p = p0 + px, dy = s >> 1, dx = s & 1;
    const __half *src = nullptr;
    if (p < npix) {
      const int img = p / HW, r = p % HW, m = r / W + dy, c = r % W + dx;
      if (m < H && c < W) src = x + ((size_t)(img * H + m) * W + c) * cin + h8 * 8;
    }
    asrc[k] = src;
    adst[k] = (s * PIX + px) * ALD + h8 * 8;
  }
  uint4 ra[AV], rb[BV];
  auto load = [&](int kc) {
#pragma unroll
    for (int k = 0; k < AV; k++)
      ra[k] = asrc[k] ? *reinterpret_cast<const uint4 *>(asrc[k] + kc) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < BV; k++) {
      const int v = tid + k * WARPS * 32;
      if (v < 9 * KC * (COT / 8)) {
        const int t = v / (KC * (COT / 8)), r = v % (KC * (COT / 8)), ci = r / (COT / 8);
        const int cv = r % (COT / 8);
        rb[k] = *reinterpret_cast<const uint4 *>(w + ((size_t)t * cin + kc + ci) * cout + co0 + cv * 8);
      }
    }
  };
  auto stage = [&]() {
#pragma unroll
    for (int k = 0; k < AV; k++) *reinterpret_cast<uint4 *>(As + adst[k]) = ra[k];
#pragma unroll
    for (int k = 0; k < BV; k++) {
      const int v = tid + k * WARPS * 32;
      if (v < 9 * KC * (COT / 8)) {
        const int t = v / (KC * (COT / 8)), r = v % (KC * (COT / 8)), ci = r / (COT / 8);
        const int cv = r % (COT / 8);
        *reinterpret_cast<uint4 *>(Bs + (t * KC + ci) * BLD + cv * 8) = rb[k];
      }
    }
  };

  /* warp -> 2 pixel tiles (0-1 or 2-3) x 16 output channels (cb) */
  const int ptile = (warp >> 2) * 2, cb = warp & 3;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
#pragma unroll
  for (int i = 0; i < 2; i++)
#pragma unroll
    for (int ph = 0; ph < 4; ph++) wmma::fill_fragment(acc[i][ph], 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;

  load(0);
  for (int kc = 0; kc < cin; kc += KC) {
    __syncthreads(); /* the last chunk's tiles are read */
    stage();
    __syncthreads();
    if (kc + KC < cin) load(kc + KC); /* in flight during the tensor-core steps */
    /* by input shift (dy, dx): the (phase, tap) pairs of the table above that read it */
    static constexpr int NP[4] = {4, 2, 2, 1};
    static constexpr int PH[4][4] = {{0, 1, 2, 3}, {1, 3}, {2, 3}, {3}};
    static constexpr int TP[4][4] = {{4, 5, 7, 8}, {3, 6}, {1, 2}, {0}};
#pragma unroll
    for (int sh = 0; sh < 4; sh++) {
#pragma unroll
      for (int i = 0; i < 2; i++)
        wmma::load_matrix_sync(fa[i], As + (sh * PIX + (ptile + i) * 16) * ALD, ALD);
#pragma unroll
      for (int j = 0; j < NP[sh]; j++) {
        wmma::load_matrix_sync(fb, Bs + TP[sh][j] * KC * BLD + cb * 16, BLD);
#pragma unroll
        for (int i = 0; i < 2; i++)
          wmma::mma_sync(acc[i][PH[sh][j]], fa[i], fb, acc[i][PH[sh][j]]);
      }
    }
  }

  /* epilogue: a lane writes 8 channels of one pixel, bias and ReLU applied */
  const int row = lane >> 1, c8 = (lane & 1) * 8, co = co0 + cb * 16 + c8;
  float bv[8];
#pragma unroll
  for (int j = 0; j < 8; j++) bv[j] = bias[co + j];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int p = p0 + (ptile + i) * 16 + row;
    int img = 0, m = 0, c = 0;
    if (p < npix) img = p / HW, m = (p % HW) / W, c = p % W;
#pragma unroll
    for (int ph = 0; ph < 4; ph++) {
      wmma::store_matrix_sync(ep[warp], acc[i][ph], 16, wmma::mem_row_major);
      __syncwarp();
      if (p < npix) {
        const int oy = 2 * m + (ph >> 1), ox = 2 * c + (ph & 1);
        union { uint4 u; __half h[8]; } o;
#pragma unroll
        for (int j = 0; j < 8; j++) o.h[j] = __float2half_rn(fmaxf(ep[warp][row * 16 + c8 + j] + bv[j], 0.0f));
        *reinterpret_cast<uint4 *>(y + (((size_t)img * 2 * H + oy) * 2 * W + ox) * cout + co) = o.u;
      }
      __syncwarp(); /* read before the next fragment overwrites it */
    }
  }
}

} // namespace

int convt_subpixel_fits(int cin, int cout) {
  return cin > 0 && cout > 0 && cin % KC == 0 && cout % COT == 0;
}

int convt_subpixel(const void *x, const void *w, const float *bias, void *y,
                                  int n, int h, int wd, int cin, int cout, int variant,
                                  cudaStream_t s) {
  if (!convt_subpixel_fits(cin, cout)) return (int)cudaErrorInvalidValue;
  const int npix = n * h * wd;
  dim3 grid((unsigned)((npix + PIX - 1) / PIX), (unsigned)(cout / COT));
  if (variant == 1)
    k_convt_s2<1><<<grid, WARPS * 32, 0, s>>>((const __half *)x, (const __half *)w, bias,
                                              (__half *)y, npix, h, wd, cin, cout);
  else
    k_convt_s2<2><<<grid, WARPS * 32, 0, s>>>((const __half *)x, (const __half *)w, bias,
                                              (__half *)y, npix, h, wd, cin, cout);
  return (int)cudaGetLastError();
}
