/* NumPy .npy reading and writing (API in src/modelfile/npy.h; format in formats.md §5).
 *
 * What: the reader checks the magic and version (1.0: u16 header length; 2.0 and 3.0: u32),
 * parses the header dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } with a
 * small tokenizer (never evaluated), requires exactly those three keys, and converts the data
 * (which must fill the rest of the file exactly) to float32 in C order; Fortran-order arrays are
 * read through column-major strides. The writer emits version 1.0 '<f4' C-order files with the
 * header padding numpy 1.24 uses, so its output is byte-identical to np.save.
 *
 * Why by hand: np.load's header is Python syntax; evaluating it would be code execution. Only
 * the literal forms numpy writes are accepted: quoted strings, True/False, and tuples of
 * non-negative integers (a trailing 'L' from Python 2 files is tolerated).
 *
 * Limits: FC_NPY_MAX_DIMS dimensions; dtypes f2 f4 f8, i1 i2 i4 i8, u1 u2 u4 u8, b1 in either
 * byte order. Object ('O', which would hold a pickle), structured, complex, string and datetime
 * dtypes are FC_EUNSUPPORTED. Memory: one malloc of numel floats (after the size check against
 * the file, so a lying header cannot request more than the file justifies).
 */
#include "core/file.h"
#include "facecast/error.h"
#include "modelfile/npy.h"
#include "modelfile/ckpt_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NPY_MAX_FILE ((size_t)1 << 40)

typedef struct tok {
  const char *p, *end, *what;
} tok;

static int herr(tok *t, const char *msg) {
  return fc_error_set(FC_EFORMAT, "%s: bad .npy header: %s", t->what, msg);
}

static void skip_ws(tok *t) {
  while (t->p < t->end && (*t->p == ' ' || *t->p == '\t' || *t->p == '\n' || *t->p == '\r'))
    t->p++;
}

static int accept(tok *t, char c) {
  skip_ws(t);
  if (t->p < t->end && *t->p == c) {
    t->p++;
    return 1;
  }
  return 0;
}

/* A quoted string without escapes (numpy writes none): start and length. */
static int qstring(tok *t, const char **s, size_t *n) {
  skip_ws(t);
  if (t->p >= t->end || (*t->p != '\'' && *t->p != '"')) return herr(t, "expected a string");
  char quote = *t->p++;
  const char *start = t->p;
  while (t->p < t->end && *t->p != quote) {
    if (*t->p == '\\' || *t->p == '\n') return herr(t, "unexpected character in a string");
    t->p++;
  }
  if (t->p >= t->end) return herr(t, "unterminated string");
  *s = start;
  *n = (size_t)(t->p - start);
  t->p++;
  return FC_OK;
}

static int word(tok *t, const char *w) {
  size_t n = strlen(w);
  skip_ws(t);
  if ((size_t)(t->end - t->p) >= n && memcmp(t->p, w, n) == 0) {
    t->p += n;
    return 1;
  }
  return 0;
}

static int shape_tuple(tok *t, int64_t *shape, int *ndim) {
  *ndim = 0;
  if (!accept(t, '(')) return herr(t, "shape is not a tuple");
  if (accept(t, ')')) return FC_OK;
  for (;;) {
    skip_ws(t);
    const char *s = t->p;
    int64_t v = 0;
    while (t->p < t->end && *t->p >= '0' && *t->p <= '9') {
      int d = *t->p++ - '0';
      if (v > (INT64_MAX - d) / 10) return herr(t, "dimension too large");
      v = v * 10 + d;
    }
    if (t->p == s) return herr(t, "shape holds a non-integer");
    if (t->p < t->end && *t->p == 'L') t->p++; /* Python 2 long literal */
    if (*ndim == FC_NPY_MAX_DIMS)
      return fc_error_set(FC_EUNSUPPORTED, "%s: .npy array has more than %d dimensions",
                          t->what, FC_NPY_MAX_DIMS);
    shape[(*ndim)++] = v;
    if (accept(t, ',')) {
      if (accept(t, ')')) return FC_OK; /* "(5,)" and "(3, 4,)" */
      continue;
    }
    if (!accept(t, ')')) return herr(t, "expected ',' in shape");
    /* "(5)" is an int in parentheses, not a tuple; numpy writes "(5,)". */
    return *ndim == 1 ? herr(t, "shape is not a tuple") : FC_OK;
  }
}

/* Element kind and byte order from a descr such as "<f4", "|u1", ">i8", "|b1". */
static int parse_descr(const char *what, const char *s, size_t n, int *kind, int *big) {
  char q[FC_QUOTE_SIZE];
  if (n == 3 && strchr("<>|=", s[0]) && s[0]) {
    int size = s[2] - '0';
    char k = s[1];
    int found = -1;
    if (k == 'f') found = size == 2 ? FC_DT_F16 : size == 4 ? FC_DT_F32 : size == 8 ? FC_DT_F64 : -1;
    else if (k == 'i')
      found = size == 1 ? FC_DT_I8 : size == 2 ? FC_DT_I16 : size == 4 ? FC_DT_I32
            : size == 8 ? FC_DT_I64 : -1;
    else if (k == 'u')
      found = size == 1 ? FC_DT_U8 : size == 2 ? FC_EL_U16 : size == 4 ? FC_EL_U32
            : size == 8 ? FC_EL_U64 : -1;
    else if (k == 'b' && size == 1) found = FC_DT_BOOL;
    /* '|' (not applicable) is only meaningful for one-byte elements; '=' is native (little). */
    if (found >= 0 && (size == 1 || s[0] != '|')) {
      *kind = found;
      *big = s[0] == '>';
      return FC_OK;
    }
  }
  return fc_error_set(FC_EUNSUPPORTED, "%s: .npy dtype '%s' is not supported", what,
                      fc_quote(q, s, n));
}

int fc_npy_read_mem(const void *data, size_t size, const char *name, float **out,
                    int64_t shape[FC_TENSOR_MAX_DIMS], int *ndim) {
  const uint8_t *b = data;
  const char *what = name ? name : "npy";
  *out = NULL;
  *ndim = 0;
  if (size < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
    return fc_error_set(FC_EFORMAT, "%s: not a .npy file (bad magic)", what);
  int major = b[6], minor = b[7];
  size_t hlen, hstart;
  if (major == 1 && minor == 0) {
    hlen = (size_t)(b[8] | b[9] << 8);
    hstart = 10;
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (size < 12) return fc_error_set(FC_EFORMAT, "%s: truncated .npy header", what);
    hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    hstart = 12;
  } else {
    return fc_error_set(FC_EUNSUPPORTED, "%s: .npy format version %d.%d is not supported", what,
                        major, minor);
  }
  if (hlen > size - hstart)
    return fc_error_set(FC_EFORMAT, "%s: truncated: .npy header needs %zu bytes, %zu present",
                        what, hlen, size - hstart);
  tok t = {(const char *)b + hstart, (const char *)b + hstart + hlen, what};
  const char *descr = NULL;
  size_t descr_len = 0;
  int fortran = -1, nd = -1, err;
  int64_t shp[FC_NPY_MAX_DIMS];
  if (!accept(&t, '{')) return herr(&t, "not a dict");
  while (!accept(&t, '}')) {
    const char *key;
    size_t klen;
    if ((err = qstring(&t, &key, &klen))) return err;
    if (!accept(&t, ':')) return herr(&t, "expected ':'");
    if (klen == 5 && !memcmp(key, "descr", 5) && !descr) {
      skip_ws(&t);
      if (t.p < t.end && *t.p == '[')
        return fc_error_set(FC_EUNSUPPORTED, "%s: structured .npy dtypes are not supported",
                            what);
      if ((err = qstring(&t, &descr, &descr_len))) return err;
    } else if (klen == 13 && !memcmp(key, "fortran_order", 13) && fortran < 0) {
      if (word(&t, "True")) fortran = 1;
      else if (word(&t, "False")) fortran = 0;
      else return herr(&t, "fortran_order is not True or False");
    } else if (klen == 5 && !memcmp(key, "shape", 5) && nd < 0) {
      if ((err = shape_tuple(&t, shp, &nd))) return err;
    } else {
      return herr(&t, "unknown or repeated key");
    }
    if (!accept(&t, ',')) {
      if (!accept(&t, '}')) return herr(&t, "expected ',' or '}'");
      break;
    }
  }
  skip_ws(&t);
  if (t.p != t.end) return herr(&t, "trailing characters after the dict");
  if (!descr || fortran < 0 || nd < 0) return herr(&t, "missing descr, fortran_order or shape");
  int kind = 0, big = 0;
  if ((err = parse_descr(what, descr, descr_len, &kind, &big))) return err;
  int64_t numel = 1, bytes;
  for (int k = 0; k < nd; k++)
    if (!fc_mul_i64(numel, shp[k], &numel))
      return fc_error_set(FC_EFORMAT, "%s: .npy shape product overflows", what);
  size_t dstart = hstart + hlen;
  if (!fc_mul_i64(numel, fc_el_size(kind), &bytes) || (uint64_t)bytes != size - dstart)
    return fc_error_set(FC_EFORMAT, "%s: %s: .npy data should be %lld elements, file has %zu "
                        "bytes after the header", what,
                        (uint64_t)bytes > size - dstart ? "truncated" : "size mismatch",
                        (long long)numel, size - dstart);
  /* The data fits in the file, but 1-byte elements widen to 4: check on 32-bit hosts. */
  if ((uint64_t)numel > SIZE_MAX / sizeof(float))
    return fc_error_set(FC_ENOMEM, "%s: .npy array too large", what);
  float *f = malloc(numel ? (size_t)numel * sizeof(float) : 1);
  if (!f) return fc_error_set(FC_ENOMEM, "%s: out of memory (%lld elements)", what,
                              (long long)numel);
  int64_t stride[FC_NPY_MAX_DIMS], s = 1;
  if (fortran)
    for (int k = 0; k < nd; k++) { stride[k] = s; s *= shp[k]; }
  else
    for (int k = nd - 1; k >= 0; k--) { stride[k] = s; s *= shp[k]; }
  fc_convert_strided(b + dstart, kind, big, nd, shp, stride, 0, f);
  memcpy(shape, shp, (size_t)nd * sizeof *shp);
  *ndim = nd;
  *out = f;
  return FC_OK;
}

int fc_npy_read_f32(const char *path, float **data, int64_t shape[FC_NPY_MAX_DIMS], int *ndim) {
  uint8_t *buf;
  size_t size;
  *data = NULL;
  *ndim = 0;
  int err = fc_file_read(path, NPY_MAX_FILE, &buf, &size);
  if (err) return err;
  err = fc_npy_read_mem(buf, size, path, data, shape, ndim);
  free(buf);
  return err;
}

int fc_npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim) {
  if (ndim < 0 || ndim > FC_NPY_MAX_DIMS || (ndim && !shape))
    return fc_error_set(FC_EINVAL, "%s: bad .npy shape (ndim %d)", path, ndim);
  int64_t numel = 1;
  for (int k = 0; k < ndim; k++)
    if (!fc_mul_i64(numel, shape[k], &numel) || (uint64_t)numel > SIZE_MAX / 4)
      return fc_error_set(FC_EINVAL, "%s: bad .npy shape", path);
  if (numel && !data) return fc_error_set(FC_EINVAL, "%s: NULL data", path);
  /* The header numpy 1.24 writes: the dict, spaces so the first dimension could grow to 21
   * digits in place, then spaces and '\n' so the data starts at a multiple of 64 (a whole extra
   * 64 when it already would). */
  char dims[FC_NPY_MAX_DIMS * 22 + 4] = "";
  size_t dl = 0;
  for (int k = 0; k < ndim; k++)
    dl += (size_t)snprintf(dims + dl, sizeof dims - dl, k ? ", %lld" : "%lld",
                           (long long)shape[k]);
  if (ndim == 1) dims[dl++] = ',', dims[dl] = 0;
  char header[512];
  int hl = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                    "(%s), }", dims);
  if (ndim > 0) {
    int digits = snprintf(NULL, 0, "%lld", (long long)shape[0]);
    for (int k = digits; k < 21; k++) header[hl++] = ' ';
  }
  int pad = 64 - (10 + hl + 1) % 64;
  for (int k = 0; k < pad; k++) header[hl++] = ' ';
  header[hl++] = '\n';
  uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(hl & 0xff),
                     (uint8_t)(hl >> 8)};
  FILE *f = fopen(path, "wb");
  if (!f) return fc_error_set(errno == ENOENT ? FC_ENOTFOUND : FC_EIO, "%s: %s", path,
                              strerror(errno));
  int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(header, 1, (size_t)hl, f) == (size_t)hl;
  uint8_t chunk[4096];
  for (int64_t i = 0; ok && i < numel;) {
    size_t n = 0;
    for (; n < sizeof chunk && i < numel; i++, n += 4) { /* little-endian, whatever the host */
      uint32_t u;
      memcpy(&u, &data[i], 4);
      chunk[n] = (uint8_t)u;
      chunk[n + 1] = (uint8_t)(u >> 8);
      chunk[n + 2] = (uint8_t)(u >> 16);
      chunk[n + 3] = (uint8_t)(u >> 24);
    }
    ok = fwrite(chunk, 1, n, f) == n;
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok) {
    unlink(path); /* never leave a half-written array behind */
    return fc_error_set(FC_EIO, "%s: write failed", path);
  }
  return FC_OK;
}
