/* The Wav2Lip "cuda" backend's last three ops as one kernel of our own (w2l_cuda.h:
 * w2l_cuda_tail): the concatenation of the decoder's output with the face encoder's first skip
 * tensor, the output block's 3x3 convolution (+ bias + ReLU) and the head (1x1 convolution to 3
 * channels, sigmoid, floats or RGB bytes out).
 *
 * Why: at the face's full size these were four passes over the picture's largest tensors (the
 * 80-channel concat written and read, the 32-channel activations written and read) and a
 * convolution cuDNN runs at a quarter of the card's tensor-core rate (32 output channels, 80
 * input: 203 TFLOP/s at batch 256 on the H200, docs/BENCHMARKS.md); together ~0.9 ms of a
 * 5.8 ms pass. Here a block loads its output tile's input (the tile + a one-pixel halo) from
 * both tensors into one shared-memory tile, the concatenation done by where the channels land,
 * so the 80-channel tensor never exists in device memory; the convolution is 9 taps x CS / 16
 * channel steps of 16x16x16 tensor-core products (WMMA) read straight from that tile (a row of A
 * is a pixel: its 16 channels of one tap; no im2col); the epilogue adds the bias, rounds to fp16
 * (as the cuDNN path stores its activations, so the two paths differ only in the accumulation
 * order), applies the ReLU and the head's dot products in registers, and writes the output.
 *
 * Layout: a NHWC fp16 [n][h][w][ca], b [n][h][w][cb] (or each frame's part at arena +
 * jobs[n].feat + off: the face-feature cache); w fp16 [16 * NO][9][CS] (output channel, tap,
 * input channel: cuDNN's KRSC with the input channels padded to CS and the output channels to a
 * multiple of 16, zeros there); bias fp32 [cout]; the head's w [3][cout], bias [3] fp32, BGR
 * order. A block is 8 warps x 16 columns; a warp computes R output rows of 16 pixels x 16 * NO
 * channels (R = 2 once a batch fills the GPU, so each weight fragment serves two rows; 1 below).
 *
 * The cuDNN path stays the reference: W2L_CUDA_TAIL=0 (or W2L_CUDA_OWN=0) runs the concat kernel,
 * cuDNN's convolution and w2l_cuda_head instead; test_wav2lip compares the two on the GPU. */
#include "lipsync/wav2lip/w2l_composite.h"
#include "lipsync/wav2lip/w2l_cuda.h"
#include "lipsync/wav2lip/w2l_wmma.cuh"

#include <cstdlib>
#include <cuda_fp16.h>
#include <mma.h>

namespace {

using namespace nvcuda;

constexpr int COLS = 16; /* output columns per block: one WMMA tile's M */
constexpr int TW = COLS + 2;

/* An output channel's weights in shared memory: 9 * cs halves and 8 of padding, so that the 8
 * rows of a tensor-core load (8 output channels, 16 bytes each) fall in distinct banks (a row
 * stride of 9 * cs halves alone is a multiple of 8 banks: two-way conflicts) */
__host__ __device__ constexpr int ldb(int cs) { return 9 * cs + 8; }

/* The forms of the kernel: W warps a block, each R output rows; ADJ: a warp's rows adjacent, so
 * that one A fragment (a tile row) serves up to three output rows (R + 2 loads a step instead
 * of 3R), else interleaved (warp + r * W); PAD: a tile pixel's channels CS + 8 halves apart
 * (w2l_wmma.cuh) */
template <int CS_, int NO_, int R_, int W_, bool ADJ_, bool PAD_> struct Form {
  static constexpr int CS = CS_, NO = NO_, R = R_, W = W_, LDA = PAD_ ? CS_ + 8 : CS_;
  static constexpr bool ADJ = ADJ_;
  static constexpr int ROWS = W * R, TH = ROWS + 2;
  /* shared memory: the weights, then the input tile, which the epilogue's scratch (a warp's
   * 16 pixels x 16 * NO fp32 accumulators) reuses once every warp is done */
  static constexpr size_t WBYTES = (size_t)16 * NO * ldb(CS) * 2;
  static constexpr size_t TBYTES = (size_t)TH * TW * LDA * 2 > (size_t)W * 16 * 16 * NO * 4
                                       ? (size_t)TH * TW * LDA * 2
                                       : (size_t)W * 16 * 16 * NO * 4;
  static constexpr size_t SMEM = WBYTES + TBYTES;
};

/* A block a tile; tiles numbered frame by frame, row of tiles by row. (A persistent form, as
 * many blocks as fit, each fetching its next tile while computing this one, measured no faster
 * on an H100: docs/BENCHMARKS.md.) */
template <class F>
__global__ void __launch_bounds__(F::W * 32)
    k_tail(const __half *__restrict__ a, int ca, const __half *__restrict__ b, int cb,
           const uint8_t *__restrict__ arena, unsigned long long off,
           const w2l_cjob *__restrict__ jobs, const __half *__restrict__ w,
           const float *__restrict__ bias, const float *__restrict__ hw, const float *__restrict__ hb,
           int cout, float *__restrict__ outf, uint8_t *__restrict__ out8, int n_img, int H, int W) {
  constexpr int CS = F::CS, NO = F::NO, R = F::R, WARPS = F::W, ROWS = F::ROWS, LDA = F::LDA;
  constexpr int LDB = ldb(CS), NW = 16 * NO * LDB, U = CS / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __half *ws = reinterpret_cast<__half *>(smem);
  __shared__ float sbias[16 * NO], shead[3 * 16 * NO + 3];

  const int tiles_x = (W + COLS - 1) / COLS, per_img = tiles_x * ((H + ROWS - 1) / ROWS);
  const size_t hwp = (size_t)H * W;
  /* the weights: [16 * NO][9 * CS] in device memory, rows LDB apart here */
  for (int i = threadIdx.x; i < 16 * NO * 9 * U; i += blockDim.x)
    w2l::cp16(ws + (i / (9 * U)) * LDB + (i % (9 * U)) * 8, w + (size_t)i * 8, true);
  for (int i = threadIdx.x; i < 16 * NO; i += blockDim.x) sbias[i] = i < cout ? bias[i] : 0.f;
  for (int i = threadIdx.x; i < 3 * cout + 3; i += blockDim.x)
    shead[i] = i < 3 * cout ? hw[i] : hb[i - 3 * cout];
  const int t = blockIdx.x, n = t / per_img;
  if (n >= n_img) return;
  const int y0 = (t % per_img) / tiles_x * ROWS, x0 = (t % per_img) % tiles_x * COLS;
  __half *tile = ws + NW;
  const __half *an = a + (size_t)n * hwp * ca;
  const __half *bn = b ? b + (size_t)n * hwp * cb
                       : reinterpret_cast<const __half *>(arena + jobs[n].feat + off);
  w2l::load_concat_tile<CS, LDA>(tile, F::TH, TW, an, ca, bn, cb, y0 - 1, x0 - 1, H, W);
  w2l::cp_wait_all();
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  /* a warp's output rows within the tile */
  auto out_row = [&](int r) { return F::ADJ ? warp * R + r : warp + r * WARPS; };
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[R][NO];
#pragma unroll
  for (int r = 0; r < R; r++)
#pragma unroll
    for (int o = 0; o < NO; o++) wmma::fill_fragment(acc[r][o], 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  /* B (k = input channel, n = output channel) of tap t, channel step ch at
   * ws[n * LDB + t * CS + ch * 16 + k]: column-major with a column stride of LDB */
  auto wsb = [&](int o, int tap, int ch) { return ws + (size_t)o * 16 * LDB + tap * CS + ch * 16; };
  /* A's rows: 16 pixels of tile row ty from column kx; its columns: channels ch * 16 + 0..15 */
  auto tla = [&](int ty, int kx, int ch) { return tile + (ty * TW + kx) * LDA + ch * 16; };
  if constexpr (F::ADJ) {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[3][NO];
#pragma unroll
    for (int kx = 0; kx < 3; kx++)
#pragma unroll
      for (int ch = 0; ch < CS / 16; ch++) {
#pragma unroll
        for (int ky = 0; ky < 3; ky++)
#pragma unroll
          for (int o = 0; o < NO; o++) wmma::load_matrix_sync(fb[ky][o], wsb(o, ky * 3 + kx, ch), LDB);
        /* tile row warp * R + j is tap ky = j - r of output row r */
#pragma unroll
        for (int j = 0; j < R + 2; j++) {
          wmma::load_matrix_sync(fa, tla(warp * R + j, kx, ch), LDA);
#pragma unroll
          for (int r = 0; r < R; r++)
            if (j - r >= 0 && j - r <= 2)
#pragma unroll
              for (int o = 0; o < NO; o++) wmma::mma_sync(acc[r][o], fa, fb[j - r][o], acc[r][o]);
        }
      }
  } else {
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[NO];
#pragma unroll
    for (int tap = 0; tap < 9; tap++) {
      const int ky = tap / 3, kx = tap % 3;
#pragma unroll
      for (int ch = 0; ch < CS / 16; ch++) {
#pragma unroll
        for (int o = 0; o < NO; o++) wmma::load_matrix_sync(fb[o], wsb(o, tap, ch), LDB);
#pragma unroll
        for (int r = 0; r < R; r++) {
          wmma::load_matrix_sync(fa, tla(out_row(r) + ky, kx, ch), LDA);
#pragma unroll
          for (int o = 0; o < NO; o++) wmma::mma_sync(acc[r][o], fa, fb[o], acc[r][o]);
        }
      }
    }
  }
  __syncthreads(); /* every warp is done with the tile: its room becomes the scratch */

  /* epilogue, a row at a time: two lanes a pixel, each half of the channels, then one shuffle */
  float *sc = reinterpret_cast<float *>(tile) + warp * 16 * 16 * NO;
  const int px = lane >> 1, part = lane & 1, ox = x0 + px;
  constexpr int PER = 8 * NO; /* channels a lane */
#pragma unroll
  for (int r = 0; r < R; r++) {
#pragma unroll
    for (int o = 0; o < NO; o++)
      wmma::store_matrix_sync(sc + o * 16, acc[r][o], 16 * NO, wmma::mem_row_major);
    __syncwarp();
    float s0 = 0.f, s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int j = 0; j < PER; j++) {
      const int c = part * PER + j;
      if (c < cout) {
        /* the activation as the cuDNN path stores it: fp16, after bias and ReLU */
        const float v = __half2float(__float2half_rn(fmaxf(sc[px * 16 * NO + c] + sbias[c], 0.f)));
        s0 += shead[c] * v, s1 += shead[cout + c] * v, s2 += shead[2 * cout + c] * v;
      }
    }
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s2 += __shfl_xor_sync(0xffffffffu, s2, 1);
    const int oy = y0 + out_row(r);
    if (part == 0 && oy < H && ox < W) {
      const float acc3[3] = {s0 + shead[3 * cout], s1 + shead[3 * cout + 1], s2 + shead[3 * cout + 2]};
      const size_t p = (size_t)oy * W + ox, i = (size_t)n * hwp + p;
#pragma unroll
      for (int c = 0; c < 3; c++) { /* BGR, as w2l_cuda_head */
        const float sg = 1.f / (1.f + __expf(-acc3[c]));
        if (out8) out8[i * 3 + (2 - c)] = (uint8_t)__float2int_rn(fminf(fmaxf(255.f * sg, 0.f), 255.f));
        else outf[((size_t)n * 3 + c) * hwp + p] = sg;
      }
    }
    __syncwarp(); /* read before the next row overwrites it */
  }
}

struct Args {
  const __half *a, *b, *w;
  int ca, cb, cout, n, h, wd;
  const uint8_t *arena;
  size_t off;
  const w2l_cjob *jobs;
  const float *bias, *hw, *hb;
  float *outf;
  uint8_t *out8;
};

template <class F> long blocks_of(const Args &g) {
  return (long)((g.wd + COLS - 1) / COLS) * ((g.h + F::ROWS - 1) / F::ROWS) * g.n;
}

template <class F> void run(const Args &g, cudaStream_t s) {
  k_tail<F><<<(unsigned)blocks_of<F>(g), F::W * 32, F::SMEM, s>>>(
      g.a, g.ca, g.b, g.cb, g.arena, g.off, g.jobs, g.w, g.bias, g.hw, g.hb, g.cout, g.outf,
      g.out8, g.n, g.h, g.wd);
}

template <class F> cudaError_t allow() {
  return cudaFuncSetAttribute((const void *)k_tail<F>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              (int)F::SMEM);
}

/* which form a large batch gets (W2L_CUDA_TAIL_FORM, read at prepare; an experiment's switch):
 * 0 interleaved rows, unpadded (the first measured form); 1 padded; 2 padded, adjacent rows;
 * 3 padded, four adjacent rows a warp, four warps */
int g_form = 0;

template <int CS, int NO> struct Forms {
  using Small = Form<CS, NO, 1, 8, false, true>;
  using Small0 = Form<CS, NO, 1, 8, false, false>;
  using F0 = Form<CS, NO, 2, 8, false, false>;
  using F1 = Form<CS, NO, 2, 8, false, true>;
  using F2 = Form<CS, NO, 2, 8, true, true>;
  using F3 = Form<CS, NO, 4, 4, true, true>;
  static cudaError_t allow_all() {
    cudaError_t e = allow<Small>();
    if (e == cudaSuccess) e = allow<Small0>();
    if (e == cudaSuccess) e = allow<F0>();
    if (e == cudaSuccess) e = allow<F1>();
    if (e == cudaSuccess) e = allow<F2>();
    if (e == cudaSuccess) e = allow<F3>();
    return e;
  }
  /* two rows a warp once there are blocks enough to fill the GPU twice over (batch 8 at
   * 96x96: 288); below, one, so that a small batch still spreads over many blocks */
  static int launch(const Args &g, cudaStream_t s) {
    if (blocks_of<F1>(g) < 256) {
      if (g_form == 0) run<Small0>(g, s);
      else run<Small>(g, s);
    } else if (g_form == 0) run<F0>(g, s);
    else if (g_form == 1) run<F1>(g, s);
    else if (g_form == 3) run<F3>(g, s);
    else run<F2>(g, s);
    return (int)cudaGetLastError();
  }
};

} // namespace

extern "C" int w2l_cuda_tail_cs(int ca, int cb, int cout) {
  if (ca <= 0 || cb <= 0 || cout <= 0) return 0;
  if (ca + cb <= 16 && cout <= 16) return 16; /* the narrow test networks */
  if (ca + cb <= 80 && cout <= 32 && ca % 8 == 0 && cb % 8 == 0) return 80; /* the real ones */
  return 0;
}

extern "C" int w2l_cuda_tail_prepare(int cs) {
  const char *e = getenv("W2L_CUDA_TAIL_FORM");
  g_form = e && *e >= '0' && *e <= '3' ? *e - '0' : 0; /* the process's latest load decides */
  /* above 48 KB of dynamic shared memory a kernel must be allowed it, once, before any launch
   * (not inside a graph capture) */
  return (int)(cs == 16 ? Forms<16, 1>::allow_all() : cs == 80 ? Forms<80, 2>::allow_all()
                                                               : cudaErrorInvalidValue);
}

extern "C" int w2l_cuda_tail(const void *a, int ca, const void *b, int cb,
                             const uint8_t *arena, size_t off, const void *jobs, const void *w,
                             const float *bias, const float *head_w, const float *head_b,
                             int cout, float *outf, uint8_t *out8, int n, int h, int wd,
                             cudaStream_t s) {
  const int cs = w2l_cuda_tail_cs(ca, cb, cout);
  if ((!b && (!arena || !jobs)) || (!outf && !out8)) return (int)cudaErrorInvalidValue;
  const Args g = {(const __half *)a, (const __half *)b, (const __half *)w, ca, cb, cout, n, h, wd,
                  arena, off, (const w2l_cjob *)jobs, bias, head_w, head_b, outf, out8};
  if (cs == 16) return Forms<16, 1>::launch(g, s);
  if (cs == 80) return Forms<80, 2>::launch(g, s);
  return (int)cudaErrorInvalidValue;
}
