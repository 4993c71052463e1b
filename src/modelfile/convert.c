/* Element conversion for the checkpoint and .npy readers: any stored element kind to float32,
 * walking a strided view in logical C order.
 *
 * Why one routine: torch tensors are views (storage offset + strides), safetensors tensors are
 * contiguous, and Fortran-order .npy arrays are views with column-major strides; all three reduce
 * to "visit the C-order index space, address offset + sum(i_k * stride_k)". Conversions follow
 * torch's .float() / numpy's astype(float32): IEEE round-to-nearest for f64 and wide integers,
 * exact widening for f16/bf16 (subnormals, infinities and NaN payloads kept), bool as 0/1.
 *
 * Limits: the caller validates bounds (this file trusts its arguments); elements are assembled
 * byte by byte, so storage alignment and host byte order do not matter.
 */
#include "modelfile/ckpt_internal.h"

#include <string.h>

int fc_el_size(int kind) {
  switch (kind) {
  case FC_DT_F64: case FC_DT_I64: case FC_EL_U64: return 8;
  case FC_DT_F32: case FC_DT_I32: case FC_EL_U32: return 4;
  case FC_DT_F16: case FC_DT_BF16: case FC_DT_I16: case FC_EL_U16: return 2;
  default: return 1;
  }
}

int fc_mul_i64(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0) return 0;
  if (a != 0 && b > INT64_MAX / a) return 0;
  *out = a * b;
  return 1;
}

int fc_add_i64(int64_t a, int64_t b, int64_t *out) {
  if (a < 0 || b < 0 || a > INT64_MAX - b) return 0;
  *out = a + b;
  return 1;
}

const char *fc_quote(char buf[FC_QUOTE_SIZE], const char *s, size_t n) {
  size_t k = 0;
  for (; k < n && k < 64; k++) {
    unsigned char ch = (unsigned char)s[k];
    buf[k] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
  }
  if (k < n) {
    memcpy(buf + k, "...", 3);
    k += 3;
  }
  buf[k] = 0;
  return buf;
}

static float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* IEEE half to single: exact. Subnormal halves are man * 2^-24, which float represents exactly. */
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | man << 13);
  if (exp != 0) return bits_to_float(sign | (exp + 112u) << 23 | man << 13);
  float mag = (float)man * 0x1p-24f;
  return sign ? -mag : mag;
}

/* Loads n bytes (2, 4 or 8) as an unsigned integer in the given byte order. */
static uint64_t load_u(const uint8_t *p, int n, int big_endian) {
  uint64_t v = 0;
  if (big_endian)
    for (int k = 0; k < n; k++) v = v << 8 | p[k];
  else
    for (int k = n - 1; k >= 0; k--) v = v << 8 | p[k];
  return v;
}

static float convert_one(const uint8_t *p, int kind, int be) {
  switch (kind) {
  case FC_DT_F32: return bits_to_float((uint32_t)load_u(p, 4, be));
  case FC_DT_F16: return half_to_float((uint16_t)load_u(p, 2, be));
  case FC_DT_BF16: return bits_to_float((uint32_t)load_u(p, 2, be) << 16);
  case FC_DT_F64: {
    uint64_t u = load_u(p, 8, be);
    double d;
    memcpy(&d, &u, 8);
    return (float)d;
  }
  case FC_DT_I64: return (float)(int64_t)load_u(p, 8, be);
  case FC_DT_I32: return (float)(int32_t)(uint32_t)load_u(p, 4, be);
  case FC_DT_I16: return (float)(int16_t)(uint16_t)load_u(p, 2, be);
  case FC_DT_I8: return (float)(int8_t)p[0];
  case FC_DT_U8: return (float)p[0];
  case FC_DT_BOOL: return p[0] ? 1.0f : 0.0f;
  case FC_EL_U16: return (float)(uint16_t)load_u(p, 2, be);
  case FC_EL_U32: return (float)(uint32_t)load_u(p, 4, be);
  case FC_EL_U64: return (float)load_u(p, 8, be);
  default: return 0.0f;
  }
}

void fc_convert_strided(const uint8_t *base, int kind, int big_endian, int ndim,
                        const int64_t *shape, const int64_t *stride, int64_t offset, float *out) {
  int64_t numel = 1;
  for (int k = 0; k < ndim; k++) numel *= shape[k];
  if (numel == 0) return;
  size_t es = (size_t)fc_el_size(kind);
  /* Contiguous views (the common case: conv weights) are one linear run. */
  int contiguous = 1;
  int64_t expect = 1;
  for (int k = ndim - 1; k >= 0; k--) {
    if (shape[k] != 1 && stride[k] != expect) contiguous = 0;
    expect *= shape[k];
  }
  const uint8_t *p0 = base + (size_t)offset * es;
  if (contiguous) {
    if (kind == FC_DT_F32 && !big_endian && sizeof(float) == 4 &&
        (const union { uint16_t u; uint8_t b[2]; }){.u = 1}.b[0] == 1) {
      memcpy(out, p0, (size_t)numel * 4); /* little-endian host: the bytes are the floats */
      return;
    }
    for (int64_t i = 0; i < numel; i++) out[i] = convert_one(p0 + (size_t)i * es, kind, big_endian);
    return;
  }
  /* General view: an odometer over the index space; the innermost dimension runs in a loop. */
  int64_t idx[FC_TENSOR_MAX_DIMS] = {0};
  int last = ndim - 1;
  int64_t inner = shape[last], istride = stride[last];
  int64_t pos = 0; /* element offset of idx[0..last-1] */
  for (int64_t o = 0; o < numel;) {
    const uint8_t *row = p0 + (size_t)pos * es;
    for (int64_t j = 0; j < inner; j++)
      out[o++] = convert_one(row + (size_t)(j * istride) * es, kind, big_endian);
    for (int k = last - 1; k >= 0; k--) {
      idx[k]++;
      pos += stride[k];
      if (idx[k] < shape[k]) break;
      pos -= stride[k] * shape[k];
      idx[k] = 0;
    }
  }
}
