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
 * path is the default and the reference; W2L_CUDA_CONVT=1 asks for this kernel (opt-in until
 * its parity with the slot plan's fix is shown on a GPU: model.c keeps the concat's inputs
 * alive through the ConvT, since this kernel writes y while it reads them) and test_wav2lip
 * compares the two there. W2L_CUDA_CONVT_FORM=1
 * runs the pipelined form below (chunked::k_convt: 16 channels a stage, two blocks an SM). */
#include "lipsync/wav2lip/w2l_composite.h"
#include "lipsync/wav2lip/w2l_cuda.h"
#include "lipsync/wav2lip/w2l_wmma.cuh"

#include <cstdlib>
#include <cstring>
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

/* The epilogue of a pass (both forms): a warp's 2 x RQ accumulator tiles (output rows 2 iy + py
 * for input rows iy0 .. iy0 + RQ - 1, columns 2 ix + PX) through its scratch; two lanes a
 * pixel, 8 channels each: + bias, ReLU, fp16, one 16-byte store */
template <int PX>
__device__ __forceinline__ void store(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[2][RQ],
                                      float *sc, const float *sb, int lane, __half *yn, int co0,
                                      int co, int relu, int iy0, int x0, int H, int W) {
  const int m = lane >> 1, part = lane & 1, ix = x0 + m, c0 = co0 + part * 8;
#pragma unroll
  for (int py = 0; py < 2; py++)
#pragma unroll
    for (int r = 0; r < RQ; r++) {
      wmma::store_matrix_sync(sc, acc[py][r], 16, wmma::mem_row_major);
      __syncwarp();
      const int iy = iy0 + r;
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

/* One 16-channel step of a pass: B (k = input channel, n = output channel) of tap (ky, kx_of(d))
 * at bp[ky][d] (ldb halves an output channel); A: tile row r0 + j at a + (j * TW + d) * lda
 * (lda halves a pixel). Tile row r0 + j: dy = 0 for output row j (py 0 through ky 1, py 1
 * through ky 2), dy = 1 for output row j - 1 (py 1 through ky 0). */
template <int PX, int ND = PX == 0 ? 1 : 2>
__device__ __forceinline__ void mma_step(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[2][RQ],
                                         const __half *a, int lda,
                                         const __half *const (&bp)[3][ND], int ldb) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[3][ND];
#pragma unroll
  for (int ky = 0; ky < 3; ky++)
#pragma unroll
    for (int d = 0; d < ND; d++) wmma::load_matrix_sync(fb[ky][d], bp[ky][d], ldb);
#pragma unroll
  for (int j = 0; j <= RQ; j++)
#pragma unroll
    for (int d = 0; d < ND; d++) {
      wmma::load_matrix_sync(fa, a + (j * TW + d) * lda, lda);
      if (j < RQ) {
        wmma::mma_sync(acc[0][j], fa, fb[1][d], acc[0][j]);
        wmma::mma_sync(acc[1][j], fa, fb[2][d], acc[1][j]);
      }
      if (j >= 1) wmma::mma_sync(acc[1][j - 1], fa, fb[0][d], acc[1][j - 1]);
    }
}

__device__ __forceinline__ void zero(wmma::fragment<wmma::accumulator, 16, 16, 16, float> (&acc)[2][RQ]) {
#pragma unroll
  for (int py = 0; py < 2; py++)
#pragma unroll
    for (int r = 0; r < RQ; r++) wmma::fill_fragment(acc[py][r], 0.0f);
}

template <int CS, int PX>
__device__ __forceinline__ void convt_pass(const __half *tile, const __half *wsh, float *sc,
                                           const float *sb, int r0, int lane, __half *yn,
                                           int co0, int co, int relu, int y0, int x0, int H,
                                           int W) {
  constexpr int LDA = Shape<CS>::LDA, LDB = Shape<CS>::LDB, ND = PX == 0 ? 1 : 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][RQ];
  zero(acc);
#pragma unroll 2
  for (int ch = 0; ch < CS / 16; ch++) {
    const __half *bp[3][ND]; /* weights at wsh[n * LDB + tap * CS + k] */
#pragma unroll
    for (int ky = 0; ky < 3; ky++)
#pragma unroll
      for (int d = 0; d < ND; d++) bp[ky][d] = wsh + (ky * 3 + kx_of<PX>(d)) * CS + ch * 16;
    mma_step<PX>(acc, tile + r0 * TW * LDA + ch * 16, LDA, bp, LDB);
  }
  store<PX>(acc, sc, sb, lane, yn, co0, co, relu, y0 + r0, x0, H, W);
}

/* What a block works on (both forms): frame n, channel group g (its weights wg), the input
 * tile from (y0, x0), its frame's a and b; false for a block past the batch. Loads the group's
 * biases into sbias (visible after the caller's next barrier). */
struct Blk {
  int n, g, y0, x0;
  const __half *an, *bn, *wg;
};

template <int CS>
__device__ __forceinline__ bool block_of(Blk &k, const __half *a, int ca, const __half *b, int cb,
                                         const uint8_t *arena, unsigned long long off,
                                         const w2l_cjob *jobs, const __half *w, const float *bias,
                                         int co, int n_img, int H, int W, float *sbias) {
  const int groups = (co + CO_B - 1) / CO_B, tiles_x = (W + COLS - 1) / COLS;
  const int per_img = tiles_x * ((H + ROWS - 1) / ROWS) * groups;
  k.n = blockIdx.x / per_img;
  const int rem = blockIdx.x % per_img;
  if (k.n >= n_img) return false;
  k.g = rem % groups;
  const int tt = rem / groups;
  k.y0 = tt / tiles_x * ROWS, k.x0 = tt % tiles_x * COLS;
  k.wg = w + (size_t)k.g * CO_B * 9 * CS;
  for (int i = threadIdx.x; i < CO_B; i += blockDim.x)
    sbias[i] = k.g * CO_B + i < co ? bias[k.g * CO_B + i] : 0.f;
  const size_t hwp = (size_t)H * W;
  k.an = a + (size_t)k.n * hwp * ca;
  k.bn = b       ? b + (size_t)k.n * hwp * cb
         : arena ? reinterpret_cast<const __half *>(arena + jobs[k.n].feat + off)
                 : k.an; /* cb 0: never read */
  return true;
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
  Blk k;
  if (!block_of<CS>(k, a, ca, b, cb, arena, off, jobs, w, bias, co, n_img, H, W, sbias)) return;
  for (int i = threadIdx.x; i < CO_B * 9 * U; i += blockDim.x)
    w2l::cp16(ws + (i / (9 * U)) * S::LDB + (i % (9 * U)) * 8, k.wg + (size_t)i * 8, true);
  w2l::load_concat_tile<CS, S::LDA>(tile, TH, TW, k.an, ca, k.bn, cb, k.y0, k.x0, H, W);
  w2l::cp_wait_all();
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = warp % GROUPS * RQ, hf = warp / GROUPS;
  const __half *wsh = ws + (size_t)hf * 16 * S::LDB;
  float *sc = scr + warp * 256;
  __half *yn = y + (size_t)k.n * 4 * H * W * co;
  const int co0 = k.g * CO_B + hf * 16;
  convt_pass<CS, 0>(tile, wsh, sc, sbias + hf * 16, r0, lane, yn, co0, co, relu, k.y0, k.x0, H, W);
  convt_pass<CS, 1>(tile, wsh, sc, sbias + hf * 16, r0, lane, yn, co0, co, relu, k.y0, k.x0, H, W);
}

/* The pipelined form (W2L_CUDA_CONVT_FORM=1): the same block, warps and passes, but the
 * input tile and the weights stream through shared memory 16 channels at a time, three stages
 * of cp.async in flight, so that loads overlap the products and ~77 KB of shared memory and
 * <= 128 registers a thread let two blocks share an SM (the first form holds the whole tile and
 * all weights: ~198 KB, one block an SM, loads and products one after the other). A stage: the
 * tile's 16 channels (TH x TW pixels, 24 halves apart: 48-byte rows keep a load's 8 rows in
 * distinct banks) and the pass's taps' weights for those channels ([tap slot][32 co][24]). */
namespace chunked {
constexpr int KC = 16, LD = KC + 8;
constexpr int TBY = TH * TW * LD * 2, WBY = 6 * CO_B * LD * 2, STAGE = TBY + WBY, NST = 3;
constexpr size_t SMEM = (size_t)NST * STAGE + (size_t)WARPS * 16 * 16 * 4;
static_assert(TBY % 16 == 0 && STAGE % 16 == 0, "16-byte aligned stage parts");

/* chunk it of the block's 2 * nch (pass px = it / nch, channels 16 * (it % nch) on) into stage
 * st: every thread issues its copies; narrow networks store a value at a time */
template <int CS>
__device__ __forceinline__ void load_chunk(unsigned char *st, int it, const Blk &k, int ca, int cb,
                                           int H, int W) {
  constexpr int NCH = CS / KC;
  const int px = it / NCH, c0 = it % NCH * KC;
  __half *tile = reinterpret_cast<__half *>(st);
  __half *wst = reinterpret_cast<__half *>(st + TBY);
  if (ca % 8 == 0 && cb % 8 == 0) {
    for (int i = threadIdx.x; i < TH * TW * 2; i += blockDim.x) {
      const int pix = i >> 1, c = c0 + (i & 1) * 8, gy = k.y0 + pix / TW, gx = k.x0 + pix % TW;
      const __half *src = k.an;
      const bool in = gy < H && gx < W && c < ca + cb;
      if (in) {
        const size_t q = (size_t)gy * W + gx;
        src = c < ca ? k.an + q * ca + c : k.bn + q * cb + (c - ca);
      }
      w2l::cp16(tile + pix * LD + (i & 1) * 8, src, in);
    }
  } else {
    for (int i = threadIdx.x; i < TH * TW * KC; i += blockDim.x) {
      const int pix = i / KC, j = i % KC, c = c0 + j, gy = k.y0 + pix / TW, gx = k.x0 + pix % TW;
      __half v = __float2half(0.f);
      if (gy < H && gx < W) {
        const size_t q = (size_t)gy * W + gx;
        if (c < ca) v = k.an[q * ca + c];
        else if (c < ca + cb) v = k.bn[q * cb + (c - ca)];
      }
      tile[pix * LD + j] = v;
    }
  }
  /* the pass's taps: px 0 has kx 1 (slots ky), px 1 kx 2 and 0 (slots ky * 2 + d) */
  const int nd = px == 0 ? 1 : 2;
  for (int i = threadIdx.x; i < 3 * nd * CO_B * 2; i += blockDim.x) {
    const int u = i & 1, co = (i >> 1) % CO_B, slot = (i >> 1) / CO_B;
    const int ky = slot / nd, d = slot % nd, kx = px == 0 ? 1 : d == 0 ? 2 : 0;
    w2l::cp16(wst + (slot * CO_B + co) * LD + u * 8,
              k.wg + ((size_t)co * 9 + ky * 3 + kx) * CS + c0 + u * 8, true);
  }
}

__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void wait_but1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

/* one pass (PX) over its nch chunks, iterations it0 .. it0 + nch - 1 of the pipeline; loads
 * run two chunks ahead (into the next pass's first ones near the end), then the epilogue */
template <int CS, int PX>
__device__ __forceinline__ void pass(unsigned char *smem, int it0, const Blk &k, int ca, int cb,
                                     float *sc, const float *sb, int r0, int hf, int lane,
                                     __half *yn, int co0, int co, int relu, int H, int W) {
  constexpr int NCH = CS / KC, ND = PX == 0 ? 1 : 2, TOTAL = 2 * NCH;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][RQ];
  zero(acc);
  for (int c = 0; c < NCH; c++) {
    const int it = it0 + c;
    wait_but1();     /* this thread's copies of chunk it are done */
    __syncthreads(); /* everyone's are, and nobody still reads the stage refilled below */
    if (it + 2 < TOTAL) load_chunk<CS>(smem + (it + 2) % NST * STAGE, it + 2, k, ca, cb, H, W);
    commit(); /* (empty near the end: the group count stays one a step) */
    const unsigned char *st = smem + it % NST * STAGE;
    const __half *wst = reinterpret_cast<const __half *>(st + TBY) + hf * 16 * LD;
    const __half *bp[3][ND]; /* slots ky * ND + d, CO_B rows of LD halves each */
#pragma unroll
    for (int ky = 0; ky < 3; ky++)
#pragma unroll
      for (int d = 0; d < ND; d++) bp[ky][d] = wst + (ky * ND + d) * CO_B * LD;
    mma_step<PX>(acc, reinterpret_cast<const __half *>(st) + r0 * TW * LD, LD, bp, LD);
  }
  store<PX>(acc, sc, sb, lane, yn, co0, co, relu, k.y0 + r0, k.x0, H, W);
}

template <int CS>
__global__ void __launch_bounds__(WARPS * 32, 2)
    k_convt(const __half *__restrict__ a, int ca, const __half *__restrict__ b, int cb,
            const uint8_t *__restrict__ arena, unsigned long long off,
            const w2l_cjob *__restrict__ jobs, const __half *__restrict__ w,
            const float *__restrict__ bias, int co, int relu, __half *__restrict__ y, int n_img,
            int H, int W) {
  constexpr int NCH = CS / KC;
  extern __shared__ __align__(128) unsigned char smem[];
  float *scr = reinterpret_cast<float *>(smem + NST * STAGE);
  __shared__ float sbias[CO_B];
  Blk k;
  if (!block_of<CS>(k, a, ca, b, cb, arena, off, jobs, w, bias, co, n_img, H, W, sbias)) return;
  load_chunk<CS>(smem, 0, k, ca, cb, H, W);
  commit();
  load_chunk<CS>(smem + STAGE, 1, k, ca, cb, H, W); /* (nch 1: pass 1's) */
  commit();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = warp % GROUPS * RQ, hf = warp / GROUPS;
  float *sc = scr + warp * 256;
  __half *yn = y + (size_t)k.n * 4 * H * W * co;
  const int co0 = k.g * CO_B + hf * 16;
  __syncthreads(); /* sbias */
  pass<CS, 0>(smem, 0, k, ca, cb, sc, sbias + hf * 16, r0, hf, lane, yn, co0, co, relu, H, W);
  pass<CS, 1>(smem, NCH, k, ca, cb, sc, sbias + hf * 16, r0, hf, lane, yn, co0, co, relu, H, W);
}
} // namespace chunked

/* which form runs (W2L_CUDA_CONVT_FORM, read at prepare; an experiment's switch): 0 the whole
 * tile and weights resident, 1 pipelined */
int g_cform = 0;

template <int CS>
int launch(const __half *a, int ca, const __half *b, int cb, const uint8_t *arena, size_t off,
           const w2l_cjob *jobs, const __half *w, const float *bias, int co, int relu,
           __half *y, int n, int h, int wd, cudaStream_t s) {
  const long blocks = (long)((wd + COLS - 1) / COLS) * ((h + ROWS - 1) / ROWS) *
                      ((co + CO_B - 1) / CO_B) * n;
  if (g_cform == 1)
    chunked::k_convt<CS><<<(unsigned)blocks, WARPS * 32, chunked::SMEM, s>>>(
        a, ca, b, cb, arena, off, jobs, w, bias, co, relu, y, n, h, wd);
  else
    k_convt<CS><<<(unsigned)blocks, WARPS * 32, Shape<CS>::SMEM, s>>>(
        a, ca, b, cb, arena, off, jobs, w, bias, co, relu, y, n, h, wd);
  return (int)cudaGetLastError();
}

template <int CS> int prepare() {
  cudaError_t e = cudaFuncSetAttribute((const void *)k_convt<CS>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)Shape<CS>::SMEM);
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute((const void *)chunked::k_convt<CS>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)chunked::SMEM);
  return (int)e;
}

} // namespace

extern "C" int w2l_cuda_convt_cs(int ca, int cb, int co) {
  if (ca <= 0 || cb < 0 || co <= 0) return 0;
  if (ca + cb <= 16) return 16; /* the narrow test networks */
  if (ca + cb <= 160 && ca % 8 == 0 && cb % 8 == 0 && co % 8 == 0) return 160; /* the real one */
  return 0;
}

extern "C" int w2l_cuda_convt_prepare(int cs) {
  const char *e = getenv("W2L_CUDA_CONVT_FORM");
  g_cform = e && !strcmp(e, "1"); /* the process's latest load decides */
  return cs == 16 ? prepare<16>() : cs == 160 ? prepare<160>() : (int)cudaErrorInvalidValue;
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
