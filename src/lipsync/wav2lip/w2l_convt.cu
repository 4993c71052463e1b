/* A concatenation and the transposed convolution that reads it as one kernel of our own
 * (w2l_cuda.h: w2l_cuda_convt), for the Wav2Lip "cuda" backend in fp16: the decoder's last
 * ConvTranspose2d (3x3, stride 2, padding 1, output padding 1: 48x48 -> 96x96, 160 -> 64
 * channels, + bias + ReLU) over the concat of the decoder's 128 channels with the face encoder's
 * 32-channel skip tensor.
 *
 * Why: cuDNN runs this layer as a backward-data convolution at 175 TFLOP/s at batch 256 on an
 * H100 (0.62 ms) after a concat pass (0.13 ms) that writes and reads a 160-channel tensor
 * (docs/BENCHMARKS.md). Here the concat happens in shared memory (w2l_wmma.cuh) and the layer
 * runs as its four sub-pixel phases: output pixel (2m + py, 2n + px) sums input pixels
 * (m + dy, n + dx), dy, dx in {0, 1}, through the taps of its phase only (phase (0,0) one tap,
 * (0,1) and (1,0) two, (1,1) four: nine in all, none of them zeros).
 *
 * A block: 16 x 16 input pixels of one frame (+ one row and column of halo below and right)
 * and 32 output channels; 8 warps, each 4 adjacent input rows and 16 of the channels. A warp
 * makes two passes, px = 0 (taps kx = 1) and px = 1 (kx = 0 and 2), each over both row phases
 * (py = 0: ky = 1; py = 1: ky = 0 and 2) with 2 x 4 accumulator tiles; each A fragment (16
 * pixels x 16 input channels of one tile row) serves up to three taps of up to two output rows.
 * The epilogue adds the bias, applies the ReLU, rounds to fp16 and writes each pixel's 16
 * channels in two 16-byte stores.
 *
 * Layout: a NHWC fp16 [n][h][w][ca], b [n][h][w][cb] (or each frame's at arena + jobs[n].feat
 * + off: the face-feature cache; b and arena NULL with cb 0: no concat); w fp16
 * [32 * groups][9][CS] (output channel, tap ky * 3 + kx, input channel: PyTorch's [ci][co][ky][kx]
 * re-laid, zeros past the layer's channels); bias fp32 [co]; y NHWC [n][2h][2w][co]. The cuDNN
 * path is the default and the reference; W2L_CUDA_CONVT=1 asks for this kernel (opt-in until it
 * has been measured on a GPU) and test_wav2lip compares the two there. */
#include "lipsync/wav2lip/w2l_composite.h"
#include "lipsync/wav2lip/w2l_cuda.h"
#include "lipsync/wav2lip/w2l_wmma.cuh"

#include <mma.h>

namespace {

using namespace nvcuda;

constexpr int COLS = 16, TW = COLS + 1; /* input columns a block (+ halo) */
constexpr int RQ = 4;                   /* input rows a warp */
constexpr int GROUPS = 4;               /* row groups a block */
constexpr int HALVES = 2;               /* 16-channel output groups a block */
constexpr int WARPS = GROUPS * HALVES;
constexpr int ROWS = GROUPS * RQ, TH = ROWS + 1;
constexpr int CO_B = 16 * HALVES; /* output channels a block */

template <int CS> struct Shape {
  static constexpr int LDA = CS + 8;    /* w2l_wmma.cuh */
  static constexpr int LDB = 9 * CS + 8; /* an output channel's row, banks as in w2l_tail.cu */
  static constexpr size_t WBYTES = (size_t)CO_B * LDB * 2;
  static constexpr size_t TBYTES = (size_t)TH * TW * LDA * 2;
  static constexpr size_t SBYTES = (size_t)WARPS * 16 * 16 * 4; /* epilogue scratch */
  static constexpr size_t SMEM = WBYTES + TBYTES + SBYTES;
};

/* A tile's input column offset dx (0 or 1) of a pass's d-th tap column: px = 0 has kx = 1
 * (dx 0); px = 1 has kx = 2 (dx 0) and kx = 0 (dx 1). */
template <int PX> __device__ __forceinline__ constexpr int kx_of(int d) {
  return PX == 0 ? 1 : d == 0 ? 2 : 0;
}

template <int CS, int PX>
__device__ __forceinline__ void convt_pass(const __half *tile, const __half *wsh, float *sc,
                                           const float *sb, int r0, int lane, __half *yn,
                                           int co0, int co, int relu, int y0, int x0, int H,
                                           int W) {
  constexpr int LDA = Shape<CS>::LDA, LDB = Shape<CS>::LDB, ND = PX == 0 ? 1 : 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][RQ];
#pragma unroll
  for (int py = 0; py < 2; py++)
#pragma unroll
    for (int r = 0; r < RQ; r++) wmma::fill_fragment(acc[py][r], 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[3][ND];
#pragma unroll 2
  for (int ch = 0; ch < CS / 16; ch++) {
    /* B (k = input channel, n = output channel) of tap (ky, kx) at wsh[n * LDB + tap * CS + k] */
#pragma unroll
    for (int ky = 0; ky < 3; ky++)
#pragma unroll
      for (int d = 0; d < ND; d++)
        wmma::load_matrix_sync(fb[ky][d], wsh + (ky * 3 + kx_of<PX>(d)) * CS + ch * 16, LDB);
    /* tile row r0 + j: dy = 0 for output row j (py 0 through ky 1, py 1 through ky 2), dy = 1
     * for output row j - 1 (py 1 through ky 0) */
#pragma unroll
    for (int j = 0; j <= RQ; j++)
#pragma unroll
      for (int d = 0; d < ND; d++) {
        wmma::load_matrix_sync(fa, tile + ((r0 + j) * TW + d) * LDA + ch * 16, LDA);
        if (j < RQ) {
          wmma::mma_sync(acc[0][j], fa, fb[1][d], acc[0][j]);
          wmma::mma_sync(acc[1][j], fa, fb[2][d], acc[1][j]);
        }
        if (j >= 1) wmma::mma_sync(acc[1][j - 1], fa, fb[0][d], acc[1][j - 1]);
      }
  }
  /* epilogue: two lanes a pixel, 8 channels each */
  const int m = lane >> 1, part = lane & 1, ix = x0 + m, c0 = co0 + part * 8;
#pragma unroll
  for (int py = 0; py < 2; py++)
#pragma unroll
    for (int r = 0; r < RQ; r++) {
      wmma::store_matrix_sync(sc, acc[py][r], 16, wmma::mem_row_major);
      __syncwarp();
      const int iy = y0 + r0 + r;
      if (iy < H && ix < W && c0 < co) {
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
          v[k] = sc[m * 16 + part * 8 + k] + sb[part * 8 + k];
          if (relu) v[k] = fmaxf(v[k], 0.f);
        }
        __half *dst = yn + ((size_t)(2 * iy + py) * (2 * W) + (2 * ix + PX)) * co + c0;
        if (co % 8 == 0) {
          __align__(16) __half2 h[4];
#pragma unroll
          for (int k = 0; k < 4; k++) h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
          *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(h);
        } else {
#pragma unroll
          for (int k = 0; k < 8; k++)
            if (c0 + k < co) dst[k] = __float2half_rn(v[k]);
        }
      }
      __syncwarp(); /* read before the next tile overwrites it */
    }
}

/* A block a tile and channel group; blocks numbered frame, tile, group (a tile's groups
 * adjacent, so the second reads the input tile from L2) */
template <int CS>
__global__ void __launch_bounds__(WARPS * 32, 1)
    k_convt(const __half *__restrict__ a, int ca, const __half *__restrict__ b, int cb,
            const uint8_t *__restrict__ arena, unsigned long long off,
            const w2l_cjob *__restrict__ jobs, const __half *__restrict__ w,
            const float *__restrict__ bias, int co, int relu, __half *__restrict__ y, int n_img,
            int H, int W) {
  using S = Shape<CS>;
  constexpr int U = CS / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __half *ws = reinterpret_cast<__half *>(smem);
  __half *tile = reinterpret_cast<__half *>(smem + S::WBYTES);
  float *scr = reinterpret_cast<float *>(smem + S::WBYTES + S::TBYTES);
  __shared__ float sbias[CO_B];

  const int groups = (co + CO_B - 1) / CO_B, tiles_x = (W + COLS - 1) / COLS;
  const int per_img = tiles_x * ((H + ROWS - 1) / ROWS) * groups;
  const int n = blockIdx.x / per_img, rem = blockIdx.x % per_img;
  if (n >= n_img) return;
  const int g = rem % groups, tt = rem / groups;
  const int y0 = tt / tiles_x * ROWS, x0 = tt % tiles_x * COLS;
  const __half *wg = w + (size_t)g * CO_B * 9 * CS;
  for (int i = threadIdx.x; i < CO_B * 9 * U; i += blockDim.x)
    w2l::cp16(ws + (i / (9 * U)) * S::LDB + (i % (9 * U)) * 8, wg + (size_t)i * 8, true);
  for (int i = threadIdx.x; i < CO_B; i += blockDim.x)
    sbias[i] = g * CO_B + i < co ? bias[g * CO_B + i] : 0.f;
  const size_t hwp = (size_t)H * W;
  const __half *an = a + (size_t)n * hwp * ca;
  const __half *bn = b       ? b + (size_t)n * hwp * cb
                     : arena ? reinterpret_cast<const __half *>(arena + jobs[n].feat + off)
                             : an; /* cb 0: never read */
  w2l::load_concat_tile<CS, S::LDA>(tile, TH, TW, an, ca, bn, cb, y0, x0, H, W);
  w2l::cp_wait_all();
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = warp % GROUPS * RQ, hf = warp / GROUPS;
  const __half *wsh = ws + (size_t)hf * 16 * S::LDB;
  float *sc = scr + warp * 256;
  __half *yn = y + (size_t)n * 4 * hwp * co;
  const int co0 = g * CO_B + hf * 16;
  convt_pass<CS, 0>(tile, wsh, sc, sbias + hf * 16, r0, lane, yn, co0, co, relu, y0, x0, H, W);
  convt_pass<CS, 1>(tile, wsh, sc, sbias + hf * 16, r0, lane, yn, co0, co, relu, y0, x0, H, W);
}

template <int CS>
int launch(const __half *a, int ca, const __half *b, int cb, const uint8_t *arena, size_t off,
           const w2l_cjob *jobs, const __half *w, const float *bias, int co, int relu,
           __half *y, int n, int h, int wd, cudaStream_t s) {
  const long blocks = (long)((wd + COLS - 1) / COLS) * ((h + ROWS - 1) / ROWS) *
                      ((co + CO_B - 1) / CO_B) * n;
  k_convt<CS><<<(unsigned)blocks, WARPS * 32, Shape<CS>::SMEM, s>>>(
      a, ca, b, cb, arena, off, jobs, w, bias, co, relu, y, n, h, wd);
  return (int)cudaGetLastError();
}

} // namespace

extern "C" int w2l_cuda_convt_cs(int ca, int cb, int co) {
  if (ca <= 0 || cb < 0 || co <= 0) return 0;
  if (ca + cb <= 16) return 16; /* the narrow test networks */
  if (ca + cb <= 160 && ca % 8 == 0 && cb % 8 == 0 && co % 8 == 0) return 160; /* the real one */
  return 0;
}

extern "C" int w2l_cuda_convt_prepare(int cs) {
  if (cs == 16)
    return (int)cudaFuncSetAttribute((const void *)k_convt<16>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)Shape<16>::SMEM);
  if (cs == 160)
    return (int)cudaFuncSetAttribute((const void *)k_convt<160>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)Shape<160>::SMEM);
  return (int)cudaErrorInvalidValue;
}

extern "C" int w2l_cuda_convt(const void *a, int ca, const void *b, int cb, const uint8_t *arena,
                              size_t off, const void *jobs, const void *w, const float *bias,
                              int co, int relu, void *y, int n, int h, int wd, cudaStream_t s) {
  const int cs = w2l_cuda_convt_cs(ca, cb, co);
  if (cb > 0 && !b && (!arena || !jobs)) return (int)cudaErrorInvalidValue;
  const __half *ai = (const __half *)a, *bi = (const __half *)b, *wi = (const __half *)w;
  const w2l_cjob *j = (const w2l_cjob *)jobs;
  if (cs == 16)
    return launch<16>(ai, ca, bi, cb, arena, off, j, wi, bias, co, relu, (__half *)y, n, h, wd, s);
  if (cs == 160)
    return launch<160>(ai, ca, bi, cb, arena, off, j, wi, bias, co, relu, (__half *)y, n, h, wd, s);
  return (int)cudaErrorInvalidValue;
}
