/* Shared-memory staging for facecast's tensor-core kernels of the Wav2Lip "cuda" backend
 * (w2l_tail.cu, w2l_convt.cu): 16-byte cp.async copies and the loader of an input tile that is
 * the channel concatenation of two NHWC fp16 tensors, so that neither kernel needs the
 * concatenated tensor in device memory.
 *
 * A tile is th x tw pixels of the picture from (gy0, gx0) on (either may be negative: a halo);
 * pixel (ty, tx) holds channels 0..CS-1 at tile + (ty * tw + tx) * LDA: a's ca channels, then
 * b's cb, then zeros, and zeros for pixels outside the picture (a convolution's padding).
 * LDA = CS + 8 keeps a tensor-core load's 8 rows (pixels) in distinct shared-memory banks: at a
 * row stride of CS halves (a multiple of 16 bytes times 5 or 10) two of the 8 rows share banks. */
#ifndef FC_W2L_WMMA_CUH
#define FC_W2L_WMMA_CUH

#include <cuda_fp16.h>

namespace w2l {

/* 16 bytes global -> shared without a register round trip (every copy of a thread in flight at
 * once); valid false: zeros (the source is not read, but must be a mapped address) */
__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) {
  const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

template <int CS, int LDA>
__device__ __forceinline__ void load_concat_tile(__half *tile, int th, int tw, const __half *an,
                                                 int ca, const __half *bn, int cb, int gy0,
                                                 int gx0, int H, int W) {
  if (ca % 8 == 0 && cb % 8 == 0) { /* 16-byte units, asynchronously */
    constexpr int U = CS / 8;
    for (int i = threadIdx.x; i < th * tw * U; i += blockDim.x) {
      const int pix = i / U, c = i % U * 8, gy = gy0 + pix / tw, gx = gx0 + pix % tw;
      const __half *src = an;
      const bool in = gy >= 0 && gy < H && gx >= 0 && gx < W && c < ca + cb;
      if (in) {
        const size_t p = (size_t)gy * W + gx;
        src = c < ca ? an + p * ca + c : bn + p * cb + (c - ca);
      }
      cp16(tile + (size_t)pix * LDA + c, src, in);
    }
  } else { /* narrow networks (the test fixtures): a value at a time */
    for (int i = threadIdx.x; i < th * tw * CS; i += blockDim.x) {
      const int pix = i / CS, c = i % CS, gy = gy0 + pix / tw, gx = gx0 + pix % tw;
      __half v = __float2half(0.f);
      if (gy >= 0 && gy < H && gx >= 0 && gx < W) {
        const size_t p = (size_t)gy * W + gx;
        if (c < ca) v = an[p * ca + c];
        else if (c < ca + cb) v = bn[p * cb + (c - ca)];
      }
      tile[(size_t)pix * LDA + c] = v;
    }
  }
}

} // namespace w2l

#endif
