/* The Wav2Lip "cuda" backend's own kernels (see w2l_cuda.h): layout and type conversion at the
 * edges (float tensors or RGB bytes in and out), the bias/residual/ReLU epilogue where cuDNN's
 * fused call is not used, channel concatenation, and the last layer fused with the sigmoid and
 * the output conversion. 16-bit element types go 8 to a 16-byte load where channel counts allow. Plain grid-stride
 * element-wise kernels, all memory-bound; 32-bit index arithmetic where the tensor allows it
 * (64-bit division is several times slower and these kernels are all index arithmetic). */
#include "lipsync/wav2lip/w2l_composite.h"
#include "lipsync/wav2lip/w2l_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace {

__device__ __forceinline__ float ld(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld(const __half *p, size_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float ld(const __nv_bfloat16 *p, size_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void st(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(__half *p, size_t i, float v) { p[i] = __float2half_rn(v); }
__device__ __forceinline__ void st(__nv_bfloat16 *p, size_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

#define GRID_STRIDE(I, i, n)                                                                      \
  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)(n); i += (I)gridDim.x * blockDim.x)

template <typename T, typename I>
__global__ void k_nchw_to_nhwc(const float *src, T *dst, int cdst, int c, int hw, I total) {
  GRID_STRIDE(I, i, total) {
    I ch = i % c, rest = i / c, p = rest % hw, n = rest / hw;
    st(dst, rest * cdst + ch, src[(n * c + ch) * hw + p]);
  }
}

template <typename T> __global__ void k_f32_to(const float *src, T *dst, size_t total) {
  GRID_STRIDE(size_t, i, total) st(dst, i, src[i]);
}

template <typename T, typename I>
__global__ void k_bias_act(T *y, const float *__restrict__ bias, const T *z, int c, int relu,
                           I total) {
  GRID_STRIDE(I, i, total) {
    float v = ld(y, i) + bias[i % c];
    if (z) v += ld(z, i);
    if (relu) v = fmaxf(v, 0.f);
    st(y, i, v);
  }
}

/* The same with V elements per thread through 16-byte loads and stores (c % V == 0). */
template <typename T, int V>
__global__ void k_bias_act_vec(uint4 *y, const float *__restrict__ bias, const uint4 *z, int c,
                               int relu, unsigned nvec) {
  GRID_STRIDE(unsigned, i, nvec) {
    union { uint4 u; T t[V]; } a, b;
    a.u = y[i];
    if (z) b.u = z[i];
    int ch = (int)((i * V) % c);
    for (int k = 0; k < V; k++) {
      float v = ld(a.t, k) + bias[ch + k];
      if (z) v += ld(b.t, k);
      if (relu) v = fmaxf(v, 0.f);
      st(a.t, k, v);
    }
    y[i] = a.u;
  }
}

/* concat as a copy of 16-byte units: a pixel's ua units from a, then ub from b */
__global__ void k_concat_vec(const uint4 *a, int ua, const uint4 *b, int ub, uint4 *out,
                             unsigned total) {
  int u = ua + ub;
  GRID_STRIDE(unsigned, i, total) {
    unsigned k = i % u, p = i / u;
    out[i] = k < (unsigned)ua ? a[p * ua + k] : b[p * ub + (k - ua)];
  }
}

/* The last layer (1x1 conv, cin -> 3, no activation) fused with the sigmoid and the output
 * conversion: per pixel three dot products over cin channels (weights [3][cin] fp32, in shared
 * memory), then NCHW floats (out8 == NULL) or RGB bytes. */
template <typename T, typename I>
__global__ void k_head(const T *x, int cin, const float *w, const float *bias, float *outf,
                       uint8_t *out8, int hw, I total) {
  extern __shared__ float sw[];
  for (int k = threadIdx.x; k < 3 * cin + 3; k += blockDim.x) sw[k] = k < 3 * cin ? w[k] : bias[k - 3 * cin];
  __syncthreads();
  constexpr int V = 16 / sizeof(T); /* elements per 16-byte load */
  const bool vec = cin % V == 0;    /* every pixel then starts 16-byte aligned */
  GRID_STRIDE(I, i, total) { /* i indexes pixels */
    float acc[3] = {sw[3 * cin], sw[3 * cin + 1], sw[3 * cin + 2]};
    const T *px = x + i * cin;
    if (vec) {
      for (int k0 = 0; k0 < cin; k0 += V) {
        union { uint4 u; T t[V]; } a;
        a.u = *(const uint4 *)(px + k0);
        for (int j = 0; j < V; j++) {
          float v = ld(a.t, j);
          int k = k0 + j;
          acc[0] += sw[k] * v, acc[1] += sw[cin + k] * v, acc[2] += sw[2 * cin + k] * v;
        }
      }
    } else {
      for (int k = 0; k < cin; k++) {
        float v = ld(px, k);
        acc[0] += sw[k] * v, acc[1] += sw[cin + k] * v, acc[2] += sw[2 * cin + k] * v;
      }
    }
    for (int c = 0; c < 3; c++) { /* acc is BGR */
      float sg = 1.f / (1.f + __expf(-acc[c]));
      if (out8) {
        out8[i * 3 + (2 - c)] = (uint8_t)__float2int_rn(fminf(fmaxf(255.f * sg, 0.f), 255.f));
      } else {
        I n = i / hw, p = i % hw;
        outf[(n * 3 + c) * hw + p] = sg;
      }
    }
  }
}

template <typename T, typename I>
__global__ void k_concat(const T *a, int ca, const T *b, int cb, T *out, I total) {
  int c = ca + cb;
  GRID_STRIDE(I, i, total) {
    I ch = i % c, p = i / c;
    out[i] = ch < (I)ca ? a[p * ca + ch] : b[p * cb + (ch - ca)];
  }
}

/* one thread per pixel: 3 bytes in, 6 channels out */
template <typename T, typename I>
__global__ void k_crops(const uint8_t *crops, T *dst, int cdst, int side, I total) {
  const float k = 1.f / 255.f;
  GRID_STRIDE(I, i, total) {
    const uint8_t *px = crops + i * 3;
    float r = px[0] * k, g = px[1] * k, b = px[2] * k;
    int upper = (int)((i / side) % side) < side / 2;
    T *o = dst + i * cdst;
    st(o, 0, upper ? b : 0.f);
    st(o, 1, upper ? g : 0.f);
    st(o, 2, upper ? r : 0.f);
    st(o, 3, b);
    st(o, 4, g);
    st(o, 5, r);
  }
}

unsigned blocks(size_t total) {
  size_t b = (total + 255) / 256;
  return (unsigned)(b < 65535 * 8 ? (b ? b : 1) : 65535 * 8);
}

/* Launches K<T, I> with the element type dt and 32-bit indices where total fits. */
#define LAUNCH(K, dt, total, s, ...)                                                              \
  do {                                                                                            \
    unsigned nb_ = blocks(total);                                                                 \
    bool small_ = (total) < (1u << 31);                                                           \
    if ((dt) == W2L_DT_F16) {                                                                     \
      typedef __half T;                                                                           \
      if (small_) K<T, unsigned><<<nb_, 256, 0, s>>>(__VA_ARGS__, (unsigned)(total));             \
      else K<T, size_t><<<nb_, 256, 0, s>>>(__VA_ARGS__, (size_t)(total));                        \
    } else if ((dt) == W2L_DT_BF16) {                                                             \
      typedef __nv_bfloat16 T;                                                                    \
      if (small_) K<T, unsigned><<<nb_, 256, 0, s>>>(__VA_ARGS__, (unsigned)(total));             \
      else K<T, size_t><<<nb_, 256, 0, s>>>(__VA_ARGS__, (size_t)(total));                        \
    } else {                                                                                      \
      typedef float T;                                                                            \
      if (small_) K<T, unsigned><<<nb_, 256, 0, s>>>(__VA_ARGS__, (unsigned)(total));             \
      else K<T, size_t><<<nb_, 256, 0, s>>>(__VA_ARGS__, (size_t)(total));                        \
    }                                                                                             \
  } while (0)

/* Compositing (w2l_composite.h): one thread per crop pixel / per 2x2 block of a patch rect;
 * blockIdx.y is the job. */
__global__ void k_crop_jobs(const uint8_t *src, const w2l_cjob *jobs, int side, uint8_t *crops) {
  const w2l_cjob j = jobs[blockIdx.y];
  int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (!j.live || p >= side * side) return;
  w2l_crop_px(src + j.rgb, 3 * j.bw, j.bw, j.bh, side, p % side, p / side,
              crops + (size_t)blockIdx.y * 3 * side * side + 3 * p);
}

__global__ void k_paste_jobs(const uint8_t *net, int side, const uint8_t *src,
                             const w2l_cjob *jobs, uint8_t *out) {
  const w2l_cjob j = jobs[blockIdx.y];
  if (!j.live) return;
  int nbx = j.bw / 2, total = nbx * ((j.bh - j.y0) / 2);
  const uint8_t *o = net + (size_t)blockIdx.y * 3 * side * side;
  GRID_STRIDE(int, i, total) {
    w2l_paste_block(o, side, j.bw, j.bh, j.y0, i % nbx, i / nbx, src + j.base, out + j.out);
  }
}

/* The feature cache (w2l_cuda.h): unit U is 16 bytes where every size and offset allows, else
 * 2 (the element size of a 16-bit type; fp32 parts are 4-byte multiples). Store: block row y is
 * job y; its threads walk the parts' units in turn. */
template <typename U>
__global__ void k_store_features(const w2l_skip_parts parts, const w2l_cjob *jobs, uint8_t *arena) {
  const w2l_cjob j = jobs[blockIdx.y];
  if (!j.live || !j.store) return;
  unsigned long long total = 0;
  for (int k = 0; k < parts.n; k++) total += parts.bytes[k] / sizeof(U);
  GRID_STRIDE(unsigned long long, i, total) {
    int k = 0;
    unsigned long long u = i;
    while (u >= parts.bytes[k] / sizeof(U)) u -= parts.bytes[k++] / sizeof(U);
    const U *src = (const U *)((const uint8_t *)parts.src[k] + blockIdx.y * parts.bytes[k]);
    ((U *)(arena + j.feat + parts.off[k]))[u] = src[u];
  }
}

/* concat with the second part from each job's record: ua units of a, then ub of the record.
 * I: 32-bit indices where the output has fewer than 2^31 units (cheaper divisions), else 64. */
template <typename U, typename I>
__global__ void k_concat_cached(const U *a, int ua, const uint8_t *arena, unsigned long long off,
                                const w2l_cjob *jobs, int ub, U *out, int hw, I total) {
  I u = (I)(ua + ub);
  GRID_STRIDE(I, i, total) {
    I k = i % u, p = i / u, n = p / (I)hw, q = p % (I)hw;
    out[i] = k < (I)ua ? a[p * ua + k]
                       : ((const U *)(arena + jobs[n].feat + off))[q * ub + (k - ua)];
  }
}

}  // namespace

static bool all16(const w2l_skip_parts *p) {
  for (int k = 0; k < p->n; k++)
    if (p->off[k] % 16 || p->bytes[k] % 16 || (uintptr_t)p->src[k] % 16) return false;
  return true;
}

extern "C" int w2l_cuda_store_features(const w2l_skip_parts *parts, const void *jobs, int n,
                                       uint8_t *arena, cudaStream_t s) {
  dim3 grid(64, (unsigned)n);
  if (all16(parts)) k_store_features<uint4><<<grid, 256, 0, s>>>(*parts, (const w2l_cjob *)jobs, arena);
  else k_store_features<uint16_t><<<grid, 256, 0, s>>>(*parts, (const w2l_cjob *)jobs, arena);
  return (int)cudaGetLastError();
}

template <typename U>
static void concat_cached(const void *a, int ua, const uint8_t *arena, size_t off, const void *jobs,
                          int ub, void *out, int hw, size_t nu, cudaStream_t s) {
  if (nu < ((size_t)1 << 31)) /* i + the grid stride stays below 2^32 */
    k_concat_cached<U, unsigned><<<blocks(nu), 256, 0, s>>>(
        (const U *)a, ua, arena, off, (const w2l_cjob *)jobs, ub, (U *)out, hw, (unsigned)nu);
  else
    k_concat_cached<U, unsigned long long><<<blocks(nu), 256, 0, s>>>(
        (const U *)a, ua, arena, off, (const w2l_cjob *)jobs, ub, (U *)out, hw, (unsigned long long)nu);
}

extern "C" int w2l_cuda_concat_cached(const void *a, int ca, const uint8_t *arena, size_t off,
                                      const void *jobs, int cb, void *out, int n, int hw, int dt,
                                      cudaStream_t s) {
  size_t esz = dt == W2L_DT_F32 ? 4 : 2, bytes = (size_t)n * hw * (ca + cb) * esz;
  if ((ca * esz) % 16 == 0 && (cb * esz) % 16 == 0 && off % 16 == 0)
    concat_cached<uint4>(a, (int)(ca * esz / 16), arena, off, jobs, (int)(cb * esz / 16), out, hw,
                         bytes / 16, s);
  else
    concat_cached<uint16_t>(a, (int)(ca * esz / 2), arena, off, jobs, (int)(cb * esz / 2), out, hw,
                            bytes / 2, s);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_nchw_to_nhwc(const float *src, void *dst, int cdst, int n, int c, int hw,
                                     int dt, cudaStream_t s) {
  size_t total = (size_t)n * c * hw;
  LAUNCH(k_nchw_to_nhwc, dt, total, s, src, (T *)dst, cdst, c, hw);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_f32_to(const float *src, void *dst, size_t count, int dt,
                               cudaStream_t s) {
  if (dt == W2L_DT_F16) k_f32_to<<<blocks(count), 256, 0, s>>>(src, (__half *)dst, count);
  else if (dt == W2L_DT_BF16)
    k_f32_to<<<blocks(count), 256, 0, s>>>(src, (__nv_bfloat16 *)dst, count);
  else k_f32_to<<<blocks(count), 256, 0, s>>>(src, (float *)dst, count);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_bias_act(void *y, const float *bias, const void *z, size_t npix, int c,
                                 int relu, int dt, cudaStream_t s) {
  size_t total = npix * c;
  int v = dt == W2L_DT_F32 ? 4 : 8; /* elements per 16 bytes */
  if (c % v == 0 && total / v < (1u << 31)) {
    unsigned nvec = (unsigned)(total / v);
    if (dt == W2L_DT_F16)
      k_bias_act_vec<__half, 8><<<blocks(nvec), 256, 0, s>>>((uint4 *)y, bias, (const uint4 *)z, c, relu, nvec);
    else if (dt == W2L_DT_BF16)
      k_bias_act_vec<__nv_bfloat16, 8>
          <<<blocks(nvec), 256, 0, s>>>((uint4 *)y, bias, (const uint4 *)z, c, relu, nvec);
    else k_bias_act_vec<float, 4><<<blocks(nvec), 256, 0, s>>>((uint4 *)y, bias, (const uint4 *)z, c, relu, nvec);
    return (int)cudaGetLastError();
  }
  LAUNCH(k_bias_act, dt, total, s, (T *)y, bias, (const T *)z, c, relu);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_concat(const void *a, int ca, const void *b, int cb, void *out,
                               size_t npix, int dt, cudaStream_t s) {
  size_t total = npix * (ca + cb), esz = dt == W2L_DT_F32 ? 4 : 2;
  if ((ca * esz) % 16 == 0 && (cb * esz) % 16 == 0 && total * esz / 16 < (1u << 31)) {
    int ua = (int)(ca * esz / 16), ub = (int)(cb * esz / 16);
    unsigned nu = (unsigned)(npix * (ua + ub));
    k_concat_vec<<<blocks(nu), 256, 0, s>>>((const uint4 *)a, ua, (const uint4 *)b, ub,
                                            (uint4 *)out, nu);
    return (int)cudaGetLastError();
  }
  LAUNCH(k_concat, dt, total, s, (const T *)a, ca, (const T *)b, cb, (T *)out);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_crops_to_input(const uint8_t *crops, void *dst, int cdst, int n,
                                       int side, int dt, cudaStream_t s) {
  size_t total = (size_t)n * side * side;
  LAUNCH(k_crops, dt, total, s, crops, (T *)dst, cdst, side);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_head(const void *x, int cin, const float *w, const float *bias, float *outf,
                             uint8_t *out8, int n, int hw, int dt, cudaStream_t s) {
  size_t total = (size_t)n * hw;
  size_t shm = (size_t)(3 * cin + 3) * sizeof(float);
  unsigned nb = blocks(total);
  /* 32-bit indices while pixel * cin fits (a 256 model's batch of 256 is 1.3 G) */
  if (total * (size_t)(cin > 3 ? cin : 3) < (1ull << 32)) {
    if (dt == W2L_DT_F16)
      k_head<__half, unsigned><<<nb, 256, shm, s>>>((const __half *)x, cin, w, bias, outf, out8, hw, (unsigned)total);
    else if (dt == W2L_DT_BF16)
      k_head<__nv_bfloat16, unsigned>
          <<<nb, 256, shm, s>>>((const __nv_bfloat16 *)x, cin, w, bias, outf, out8, hw, (unsigned)total);
    else
      k_head<float, unsigned><<<nb, 256, shm, s>>>((const float *)x, cin, w, bias, outf, out8, hw, (unsigned)total);
  } else {
    if (dt == W2L_DT_F16)
      k_head<__half, size_t><<<nb, 256, shm, s>>>((const __half *)x, cin, w, bias, outf, out8, hw, total);
    else if (dt == W2L_DT_BF16)
      k_head<__nv_bfloat16, size_t>
          <<<nb, 256, shm, s>>>((const __nv_bfloat16 *)x, cin, w, bias, outf, out8, hw, total);
    else
      k_head<float, size_t><<<nb, 256, shm, s>>>((const float *)x, cin, w, bias, outf, out8, hw, total);
  }
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_crop_jobs(const uint8_t *src, const void *jobs, int n, int side,
                                  uint8_t *crops, cudaStream_t s) {
  dim3 grid((unsigned)(side * side + 255) / 256, (unsigned)n);
  k_crop_jobs<<<grid, 256, 0, s>>>(src, (const w2l_cjob *)jobs, side, crops);
  return (int)cudaGetLastError();
}

extern "C" int w2l_cuda_paste_jobs(const uint8_t *net, int side, const uint8_t *src,
                                   const void *jobs, int n, uint8_t *out, cudaStream_t s) {
  dim3 grid(16, (unsigned)n);
  k_paste_jobs<<<grid, 256, 0, s>>>(net, side, src, (const w2l_cjob *)jobs, out);
  return (int)cudaGetLastError();
}
