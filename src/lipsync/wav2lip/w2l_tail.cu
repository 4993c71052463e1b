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

#include <cuda_fp16.h>
#include <mma.h>

namespace {

using namespace nvcuda;

constexpr int WARPS = 8; /* a block's warps */
constexpr int COLS = 16; /* output columns per block: one WMMA tile's M */
constexpr int TW = COLS + 2;

/* An output channel's weights in shared memory: 9 * cs halves and 8 of padding, so that the 8
 * rows of a tensor-core load (8 output channels, 16 bytes each) fall in distinct banks (a row
 * stride of 9 * cs halves alone is a multiple of 8 banks: two-way conflicts) */
__host__ __device__ constexpr int ldb(int cs) { return 9 * cs + 8; }

/* shared memory: the weights, then the input tile, which the epilogue's
 * scratch (a warp's 16 pixels x 16 * NO fp32 accumulators) reuses once every warp is done */
constexpr size_t weight_bytes(int cs, int no) { return (size_t)16 * no * ldb(cs) * 2; }
__host__ __device__ constexpr size_t tile_bytes(int cs, int no, int r) {
  return (size_t)(WARPS * r + 2) * TW * cs * 2 > (size_t)WARPS * 16 * 16 * no * 4
             ? (size_t)(WARPS * r + 2) * TW * cs * 2
             : (size_t)WARPS * 16 * 16 * no * 4;
}

/* 16 bytes global -> shared without a register round trip (cp.async: every copy of a thread in
 * flight at once, which the tile's dozen loads a thread need); valid false: zeros (the source
 * is not read, but must be a mapped address) */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) {
  const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* one tile's input: a's channels, then b's, then zeros to CS, with a one-pixel halo (zeros
 * outside the picture: the convolution's padding) */
template <int CS, int R>
__device__ __forceinline__ void load_tile(__half *tile, const __half *an, int ca, const __half *bn,
                                          int cb, int y0, int x0, int H, int W) {
  constexpr int TH = WARPS * R + 2, U = CS / 8;
  if (ca % 8 == 0 && cb % 8 == 0) { /* 16-byte units, asynchronously */
    for (int i = threadIdx.x; i < TH * TW * U; i += blockDim.x) {
      const int pix = i / U, u = i % U, ty = pix / TW, tx = pix % TW;
      const int gy = y0 + ty - 1, gx = x0 + tx - 1, c = u * 8;
      const __half *src = an;
      const bool in = gy >= 0 && gy < H && gx >= 0 && gx < W && c < ca + cb;
      if (in) {
        const size_t p = (size_t)gy * W + gx;
        src = c < ca ? an + p * ca + c : bn + p * cb + (c - ca);
      }
      cp16(tile + (size_t)i * 8, src, in);
    }
  } else { /* narrow networks (the test fixtures): a value at a time */
    for (int i = threadIdx.x; i < TH * TW * CS; i += blockDim.x) {
      const int pix = i / CS, c = i % CS, ty = pix / TW, tx = pix % TW;
      const int gy = y0 + ty - 1, gx = x0 + tx - 1;
      __half v = __float2half(0.f);
      if (gy >= 0 && gy < H && gx >= 0 && gx < W) {
        const size_t p = (size_t)gy * W + gx;
        if (c < ca) v = an[p * ca + c];
        else if (c < ca + cb) v = bn[p * cb + (c - ca)];
      }
      tile[i] = v;
    }
  }
}

/* A block a tile; tiles numbered frame by frame, row of tiles by row. (A persistent form, as
 * many blocks as fit, each fetching its next tile while computing this one, measured no faster
 * on an H100: docs/BENCHMARKS.md.) */
template <int CS, int NO, int R>
__global__ void __launch_bounds__(WARPS * 32)
    k_tail(const __half *__restrict__ a, int ca, const __half *__restrict__ b, int cb,
           const uint8_t *__restrict__ arena, unsigned long long off,
           const w2l_cjob *__restrict__ jobs, const __half *__restrict__ w,
           const float *__restrict__ bias, const float *__restrict__ hw, const float *__restrict__ hb,
           int cout, float *__restrict__ outf, uint8_t *__restrict__ out8, int n_img, int H, int W) {
  constexpr int ROWS = WARPS * R, LDB = ldb(CS), NW = 16 * NO * LDB, U = CS / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __half *ws = reinterpret_cast<__half *>(smem);
  __shared__ float sbias[16 * NO], shead[3 * 16 * NO + 3];

  const int tiles_x = (W + COLS - 1) / COLS, per_img = tiles_x * ((H + ROWS - 1) / ROWS);
  const size_t hwp = (size_t)H * W;
  /* the weights: [16 * NO][9 * CS] in device memory, rows LDB apart here */
  for (int i = threadIdx.x; i < 16 * NO * 9 * U; i += blockDim.x)
    cp16(ws + (i / (9 * U)) * LDB + (i % (9 * U)) * 8, w + (size_t)i * 8, true);
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
  load_tile<CS, R>(tile, an, ca, bn, cb, y0, x0, H, W);
  cp_wait_all();
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  auto out_row = [&](int r) { return warp + r * WARPS; }; /* a warp's output rows */
  {

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[R][NO];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int o = 0; o < NO; o++) wmma::fill_fragment(acc[r][o], 0.0f);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[NO];
#pragma unroll
    for (int tap = 0; tap < 9; tap++) {
      const int ky = tap / 3, kx = tap % 3;
#pragma unroll
      for (int ch = 0; ch < CS / 16; ch++) {
        /* B (k = input channel, n = output channel) at ws[n * LDB + tap * CS + ch * 16 + k]:
         * column-major with a column stride of LDB */
#pragma unroll
        for (int o = 0; o < NO; o++)
          wmma::load_matrix_sync(fb[o], ws + (size_t)o * 16 * LDB + tap * CS + ch * 16, LDB);
#pragma unroll
        for (int r = 0; r < R; r++) {
          /* A's rows: output pixels 0..15 of the tile's row warp + r * WARPS, i.e. tile pixels
           * (row + ky, 0..15 + kx); its columns: channels ch * 16 + 0..15 */
          wmma::load_matrix_sync(fa, tile + ((out_row(r) + ky) * TW + kx) * CS + ch * 16, CS);
#pragma unroll
          for (int o = 0; o < NO; o++) wmma::mma_sync(acc[r][o], fa, fb[o], acc[r][o]);
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
}

template <int CS, int NO, int R> constexpr size_t smem_of() {
  return weight_bytes(CS, NO) + tile_bytes(CS, NO, R);
}

template <int CS, int NO, int R>
void run(const __half *a, int ca, const __half *b, int cb, const uint8_t *arena, size_t off,
         const w2l_cjob *jobs, const __half *w, const float *bias, const float *hw,
         const float *hb, int cout, float *outf, uint8_t *out8, int n, int h, int wd,
         cudaStream_t s) {
  const unsigned tiles = (unsigned)((wd + COLS - 1) / COLS) * ((h + WARPS * R - 1) / (WARPS * R)) * n;
  k_tail<CS, NO, R><<<tiles, WARPS * 32, smem_of<CS, NO, R>(), s>>>(
      a, ca, b, cb, arena, off, jobs, w, bias, hw, hb, cout, outf, out8, n, h, wd);
}

template <int CS, int NO>
int launch(const __half *a, int ca, const __half *b, int cb, const uint8_t *arena, size_t off,
           const w2l_cjob *jobs, const __half *w, const float *bias, const float *hw,
           const float *hb, int cout, float *outf, uint8_t *out8, int n, int h, int wd,
           cudaStream_t s) {
  /* two rows a warp once there are blocks enough to fill the GPU twice over (batch 8 at
   * 96x96: 288); below, one, so that a small batch still spreads over many blocks */
  const long blocks2 = (long)((wd + COLS - 1) / COLS) * ((h + WARPS * 2 - 1) / (WARPS * 2)) * n;
  if (blocks2 >= 256)
    run<CS, NO, 2>(a, ca, b, cb, arena, off, jobs, w, bias, hw, hb, cout, outf, out8, n, h, wd, s);
  else
    run<CS, NO, 1>(a, ca, b, cb, arena, off, jobs, w, bias, hw, hb, cout, outf, out8, n, h, wd, s);
  return (int)cudaGetLastError();
}

template <int CS, int NO, int R> cudaError_t allow() {
  return cudaFuncSetAttribute((const void *)k_tail<CS, NO, R>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_of<CS, NO, R>());
}

template <int CS, int NO> cudaError_t allow_all() {
  cudaError_t e = allow<CS, NO, 1>();
  return e == cudaSuccess ? allow<CS, NO, 2>() : e;
}

} // namespace

extern "C" int w2l_cuda_tail_cs(int ca, int cb, int cout) {
  if (ca <= 0 || cb <= 0 || cout <= 0) return 0;
  if (ca + cb <= 16 && cout <= 16) return 16; /* the narrow test networks */
  if (ca + cb <= 80 && cout <= 32 && ca % 8 == 0 && cb % 8 == 0) return 80; /* the real ones */
  return 0;
}

extern "C" int w2l_cuda_tail_prepare(int cs) {
  /* above 48 KB of dynamic shared memory a kernel must be allowed it, once, before any launch
   * (not inside a graph capture) */
  return (int)(cs == 16 ? allow_all<16, 1>() : cs == 80 ? allow_all<80, 2>() : cudaErrorInvalidValue);
}

extern "C" int w2l_cuda_tail(const void *a, int ca, const void *b, int cb,
                             const uint8_t *arena, size_t off, const void *jobs, const void *w,
                             const float *bias, const float *head_w, const float *head_b,
                             int cout, float *outf, uint8_t *out8, int n, int h, int wd,
                             cudaStream_t s) {
  const int cs = w2l_cuda_tail_cs(ca, cb, cout);
  const __half *ai = (const __half *)a, *bi = (const __half *)b, *wi = (const __half *)w;
  const w2l_cjob *j = (const w2l_cjob *)jobs;
  if ((!b && (!arena || !jobs)) || (!outf && !out8)) return (int)cudaErrorInvalidValue;
  if (cs == 16)
    return launch<16, 1>(ai, ca, bi, cb, arena, off, j, wi, bias, head_w, head_b, cout,
                         outf, out8, n, h, wd, s);
  if (cs == 80)
    return launch<80, 2>(ai, ca, bi, cb, arena, off, j, wi, bias, head_w, head_b, cout,
                         outf, out8, n, h, wd, s);
  return (int)cudaErrorInvalidValue;
}
