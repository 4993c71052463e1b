/* safetensors header parsing and validation (formats.md §4).
 *
 * What: reads the u64 header length, parses the JSON header with a small strict parser of its
 * own, and hands each tensor (name, dtype, shape, begin offset) to the checkpoint through a
 * callback, after checking the rules of the reference implementation: header at most
 * 100,000,000 bytes; data_offsets sorted by begin are contiguous from 0, each tensor's byte size
 * equals numel x element size, and the last end equals the buffer length (so no two tensors
 * overlap and no byte is unaccounted for).
 *
 * Why a hand parser: the header is untrusted input; this parser bounds nesting depth, rejects
 * duplicate keys, checks UTF-8 and reads offsets as exact unsigned 64-bit integers (a double
 * would silently round offsets above 2^53). "__metadata__" must map strings to strings; unknown
 * fields in a tensor entry are skipped, as the reference does.
 *
 * Limits: up to FC_TENSOR_MAX_DIMS dimensions; dtypes F32 F16 BF16 F64 I64 I32 I16 I8 U8 BOOL
 * (U16/U32/U64 and the F8 kinds are FC_EUNSUPPORTED). Strings are decoded into malloc'd copies.
 */
#include "facecast/error.h"
#include "modelfile/ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ST_MAX_HEADER 100000000ull
enum { ST_MAX_DEPTH = 64 };

typedef struct js {
  const char *p, *end;
  const char *what;
  const char *start; /* header start, for byte positions in details */
} js;

static int jerr(js *j, const char *msg) {
  return fc_error_set(FC_EFORMAT, "%s: safetensors header: %s at header byte %zu", j->what, msg,
                      (size_t)(j->p - j->start));
}

static void ws(js *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

static int expect(js *j, char c) {
  ws(j);
  if (j->p >= j->end || *j->p != c) {
    char msg[32];
    snprintf(msg, sizeof msg, "expected '%c'", c);
    return jerr(j, msg);
  }
  j->p++;
  return FC_OK;
}

/* Appends code point cp as UTF-8. */
static size_t put_utf8(char *o, uint32_t cp) {
  if (cp < 0x80) { o[0] = (char)cp; return 1; }
  if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | cp >> 12);
    o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | cp >> 18);
  o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n) {
  uint32_t c = p[0], cp;
  size_t len;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; }
  else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; }
  else return 0;
  if (n < len) return 0;
  for (size_t k = 1; k < len; k++) {
    if ((p[k] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (p[k] & 0x3F);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return len;
}

static int hex4(const char *p, uint32_t *v) {
  *v = 0;
  for (int k = 0; k < 4; k++) {
    char c = p[k];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return 0;
    *v = *v << 4 | (uint32_t)d;
  }
  return 1;
}

/* Parses a JSON string into a malloc'd NUL-terminated copy (out may be NULL to only skip). The
 * decoded form is never longer than the source, so one allocation of the source length does. */
static int jstring(js *j, char **out) {
  if (out) *out = NULL;
  int err = expect(j, '"');
  if (err) return err;
  const char *s = j->p;
  const char *q = s;
  while (q < j->end && *q != '"') q += *q == '\\' && q + 1 < j->end ? 2 : 1;
  if (q >= j->end) return jerr(j, "unterminated string");
  char *o = out ? malloc((size_t)(q - s) + 1) : NULL, *w = o;
  if (out && !o) return fc_error_set(FC_ENOMEM, "%s: out of memory", j->what);
  char tmp[4];
  while (j->p < q) {
    unsigned char c = (unsigned char)*j->p;
    size_t n;
    if (c < 0x20) { err = jerr(j, "control character in string"); goto fail; }
    if (c != '\\') {
      if (!(n = utf8_len((const unsigned char *)j->p, (size_t)(q - j->p)))) {
        err = jerr(j, "invalid UTF-8 in string");
        goto fail;
      }
      if (w) { memcpy(w, j->p, n); w += n; }
      j->p += n;
      continue;
    }
    char e = j->p[1];
    j->p += 2;
    uint32_t cp;
    switch (e) {
    case '"': case '\\': case '/': cp = (uint32_t)e; break;
    case 'b': cp = '\b'; break;
    case 'f': cp = '\f'; break;
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'u':
      if (q - j->p < 4 || !hex4(j->p, &cp)) { err = jerr(j, "bad \\u escape"); goto fail; }
      j->p += 4;
      if (cp >= 0xD800 && cp <= 0xDBFF) { /* a high surrogate needs its low half */
        uint32_t lo;
        if (q - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || !hex4(j->p + 2, &lo) ||
            lo < 0xDC00 || lo > 0xDFFF) {
          err = jerr(j, "unpaired surrogate in string");
          goto fail;
        }
        j->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        err = jerr(j, "unpaired surrogate in string");
        goto fail;
      }
      break;
    default: err = jerr(j, "bad escape in string"); goto fail;
    }
    n = put_utf8(tmp, cp);
    if (w) { memcpy(w, tmp, n); w += n; }
  }
  j->p = q + 1;
  if (o) {
    *w = 0;
    *out = o;
  }
  return FC_OK;
fail:
  free(o);
  return err;
}

/* A non-negative integer without sign, fraction or exponent, exactly (serde's u64/usize). */
static int juint(js *j, uint64_t *v) {
  ws(j);
  const char *s = j->p;
  *v = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    uint64_t d = (uint64_t)(*j->p - '0');
    if (*v > (UINT64_MAX - d) / 10) return jerr(j, "integer too large");
    *v = *v * 10 + d;
    j->p++;
  }
  if (j->p == s) return jerr(j, "expected a non-negative integer");
  if (j->p - s > 1 && *s == '0') return jerr(j, "integer with a leading zero");
  if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
    return jerr(j, "expected an integer, not a fraction");
  return FC_OK;
}

/* Skips any JSON value (unknown fields), depth-limited. */
static int jskip(js *j, int depth) {
  ws(j);
  if (depth > ST_MAX_DEPTH) return jerr(j, "nesting too deep");
  if (j->p >= j->end) return jerr(j, "unexpected end");
  char c = *j->p;
  int err;
  if (c == '"') return jstring(j, NULL);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->p++;
    ws(j);
    if (j->p < j->end && *j->p == close) { j->p++; return FC_OK; }
    for (;;) {
      if (c == '{') {
        if ((err = jstring(j, NULL)) || (err = expect(j, ':'))) return err;
      }
      if ((err = jskip(j, depth + 1))) return err;
      ws(j);
      if (j->p < j->end && *j->p == ',') { j->p++; continue; }
      return expect(j, close);
    }
  }
  static const char *const words[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(words[k]);
    if ((size_t)(j->end - j->p) >= n && memcmp(j->p, words[k], n) == 0) {
      j->p += n;
      return FC_OK;
    }
  }
  /* A number: -?digits(.digits)?([eE][+-]?digits)? */
  const char *s = j->p;
  if (j->p < j->end && *j->p == '-') j->p++;
  const char *d = j->p;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  if (j->p == d) { j->p = s; return jerr(j, "unexpected character"); }
  if (j->p < j->end && *j->p == '.') {
    d = ++j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p == d) return jerr(j, "bad number");
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    j->p++;
    if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
    d = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p == d) return jerr(j, "bad number");
  }
  return FC_OK;
}

static const struct {
  const char *name;
  int dtype; /* -1: a valid safetensors dtype that facecast does not read */
} st_dtypes[] = {
  {"F32", FC_DT_F32}, {"F16", FC_DT_F16}, {"BF16", FC_DT_BF16}, {"F64", FC_DT_F64},
  {"I64", FC_DT_I64}, {"I32", FC_DT_I32}, {"I16", FC_DT_I16},   {"I8", FC_DT_I8},
  {"U8", FC_DT_U8},   {"BOOL", FC_DT_BOOL}, {"U16", -1}, {"U32", -1}, {"U64", -1},
  {"F8_E5M2", -1}, {"F8_E4M3", -1},
};

/* One tensor entry: {"dtype": .., "shape": [..], "data_offsets": [b, e]} in any key order. */
static int jtensor(js *j, const char *name, fc_st_tensor *t) {
  int err = expect(j, '{');
  if (err) return err;
  int have_dtype = 0, have_shape = 0, have_offsets = 0;
  char q[FC_QUOTE_SIZE], q2[FC_QUOTE_SIZE];
  ws(j);
  if (j->p < j->end && *j->p == '}') return jerr(j, "empty tensor entry");
  for (;;) {
    char *key;
    if ((err = jstring(j, &key))) return err;
    int which = !strcmp(key, "dtype") ? 1 : !strcmp(key, "shape") ? 2
              : !strcmp(key, "data_offsets") ? 3 : 0;
    free(key);
    if ((err = expect(j, ':'))) return err;
    if ((which == 1 && have_dtype) || (which == 2 && have_shape) || (which == 3 && have_offsets))
      return jerr(j, "duplicate key in tensor entry");
    if (which == 1) {
      char *dt;
      if ((err = jstring(j, &dt))) return err;
      int found = 0;
      for (size_t k = 0; k < sizeof st_dtypes / sizeof *st_dtypes; k++)
        if (!strcmp(dt, st_dtypes[k].name)) {
          found = 1;
          t->dtype = st_dtypes[k].dtype;
        }
      if (!found || t->dtype < 0) {
        err = fc_error_set(found ? FC_EUNSUPPORTED : FC_EFORMAT, "%s: safetensors tensor '%s' "
                           "has %s dtype '%s'", j->what, fc_quote(q, name, strlen(name)),
                           found ? "unsupported" : "unknown", fc_quote(q2, dt, strlen(dt)));
        free(dt);
        return err;
      }
      free(dt);
      have_dtype = 1;
    } else if (which == 2) {
      if ((err = expect(j, '['))) return err;
      t->ndim = 0;
      ws(j);
      if (j->p < j->end && *j->p == ']') j->p++;
      else
        for (;;) {
          uint64_t d;
          if ((err = juint(j, &d))) return err;
          if (t->ndim == FC_TENSOR_MAX_DIMS)
            return fc_error_set(FC_EUNSUPPORTED, "%s: safetensors tensor '%s' has more than %d "
                                "dimensions", j->what, fc_quote(q, name, strlen(name)),
                                FC_TENSOR_MAX_DIMS);
          if (d > INT64_MAX) return jerr(j, "dimension too large");
          t->shape[t->ndim++] = (int64_t)d;
          ws(j);
          if (j->p < j->end && *j->p == ',') { j->p++; continue; }
          if ((err = expect(j, ']'))) return err;
          break;
        }
      have_shape = 1;
    } else if (which == 3) {
      if ((err = expect(j, '[')) || (err = juint(j, &t->begin)) || (err = expect(j, ',')) ||
          (err = juint(j, &t->end)) || (err = expect(j, ']')))
        return err;
      have_offsets = 1;
    } else if ((err = jskip(j, 2))) {
      return err;
    }
    ws(j);
    if (j->p < j->end && *j->p == ',') { j->p++; continue; }
    if ((err = expect(j, '}'))) return err;
    break;
  }
  if (!have_dtype || !have_shape || !have_offsets)
    return fc_error_set(FC_EFORMAT, "%s: safetensors tensor '%s' lacks %s", j->what,
                        fc_quote(q, name, strlen(name)),
                        !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
  return FC_OK;
}

/* "__metadata__": an object of string values. */
static int jmetadata(js *j) {
  int err = expect(j, '{');
  if (err) return err;
  ws(j);
  if (j->p < j->end && *j->p == '}') { j->p++; return FC_OK; }
  for (;;) {
    if ((err = jstring(j, NULL)) || (err = expect(j, ':'))) return err;
    ws(j);
    if (j->p >= j->end || *j->p != '"') return jerr(j, "__metadata__ value is not a string");
    if ((err = jstring(j, NULL))) return err;
    ws(j);
    if (j->p < j->end && *j->p == ',') { j->p++; continue; }
    return expect(j, '}');
  }
}

static int cmp_begin(const void *a, const void *b) {
  const fc_st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int cmp_index(const void *a, const void *b) {
  const fc_st_tensor *x = a, *y = b;
  return x->index < y->index ? -1 : x->index > y->index;
}

void fc_st_free(fc_st_tensor *t, size_t n) {
  if (!t) return;
  for (size_t i = 0; i < n; i++) free(t[i].name);
  free(t);
}

int fc_st_parse(const uint8_t *buf, size_t size, const char *what, fc_st_tensor **out,
                size_t *n_out, const uint8_t **data_start) {
  *out = NULL;
  *n_out = 0;
  if (size < 8)
    return fc_error_set(FC_EFORMAT, "%s: truncated: safetensors needs an 8-byte header length, "
                        "%zu bytes present", what, size);
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; k--) hlen = hlen << 8 | buf[k];
  if (hlen > ST_MAX_HEADER)
    return fc_error_set(FC_EFORMAT, "%s: safetensors header of %llu bytes exceeds the "
                        "100,000,000-byte limit", what, (unsigned long long)hlen);
  if (hlen > size - 8)
    return fc_error_set(FC_EFORMAT, "%s: truncated: safetensors header needs %llu bytes, %zu "
                        "present", what, (unsigned long long)hlen, size - 8);
  js j = {.p = (const char *)buf + 8, .end = (const char *)buf + 8 + hlen, .what = what,
          .start = (const char *)buf + 8};
  const uint8_t *data = buf + 8 + hlen;
  uint64_t data_len = size - 8 - hlen;
  fc_st_tensor *list = NULL, *t;
  size_t n = 0, cap = 0;
  int have_meta = 0, err;
  char q[FC_QUOTE_SIZE];
  if ((err = expect(&j, '{'))) goto fail;
  ws(&j);
  if (j.p < j.end && *j.p == '}') j.p++;
  else
    for (;;) {
      char *name;
      if ((err = jstring(&j, &name))) goto fail;
      if ((err = expect(&j, ':'))) { free(name); goto fail; }
      if (!strcmp(name, "__metadata__")) {
        free(name);
        if (have_meta) { err = jerr(&j, "duplicate __metadata__"); goto fail; }
        have_meta = 1;
        if ((err = jmetadata(&j))) goto fail;
      } else {
        if (n == cap) {
          size_t c2 = cap ? cap * 2 : 16;
          fc_st_tensor *l2 = realloc(list, c2 * sizeof *l2);
          if (!l2) { free(name); err = fc_error_set(FC_ENOMEM, "%s: out of memory", what); goto fail; }
          list = l2;
          cap = c2;
        }
        t = &list[n++];
        memset(t, 0, sizeof *t);
        t->name = name;
        t->index = n - 1;
        if ((err = jtensor(&j, name, t))) goto fail;
      }
      ws(&j);
      if (j.p < j.end && *j.p == ',') { j.p++; continue; }
      if ((err = expect(&j, '}'))) goto fail;
      break;
    }
  ws(&j);
  if (j.p != j.end) { err = jerr(&j, "trailing bytes after the header object"); goto fail; }
  /* Sizes, then contiguity: sorted by begin, each tensor starts where the previous ended. */
  for (size_t i = 0; i < n; i++) {
    t = &list[i];
    int64_t numel = 1, bytes;
    for (int k = 0; k < t->ndim; k++)
      if (!fc_mul_i64(numel, t->shape[k], &numel)) {
        err = fc_error_set(FC_EFORMAT, "%s: safetensors tensor '%s' shape product overflows",
                           what, fc_quote(q, t->name, strlen(t->name)));
        goto fail;
      }
    if (!fc_mul_i64(numel, fc_el_size(t->dtype), &bytes) || t->end < t->begin ||
        t->end - t->begin != (uint64_t)bytes) {
      err = fc_error_set(FC_EFORMAT, "%s: safetensors tensor '%s' data_offsets [%llu, %llu] do "
                         "not hold its %lld elements", what, fc_quote(q, t->name, strlen(t->name)),
                         (unsigned long long)t->begin, (unsigned long long)t->end,
                         (long long)numel);
      goto fail;
    }
  }
  if (n) qsort(list, n, sizeof *list, cmp_begin);
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (list[i].begin != at) {
      err = fc_error_set(FC_EFORMAT, "%s: safetensors tensor '%s' data_offsets [%llu, %llu] %s "
                         "(expected begin %llu)", what,
                         fc_quote(q, list[i].name, strlen(list[i].name)),
                         (unsigned long long)list[i].begin, (unsigned long long)list[i].end,
                         list[i].begin < at ? "overlap another tensor" : "leave a gap",
                         (unsigned long long)at);
      goto fail;
    }
    at = list[i].end;
  }
  if (at != data_len) {
    err = fc_error_set(FC_EFORMAT, "%s: %s: safetensors tensors end at byte %llu of a %llu-byte "
                       "buffer", what, at > data_len ? "truncated" : "trailing data",
                       (unsigned long long)at, (unsigned long long)data_len);
    goto fail;
  }
  if (n) qsort(list, n, sizeof *list, cmp_index); /* back to the header's order */
  *out = list;
  *n_out = n;
  *data_start = data;
  return FC_OK;
fail:
  fc_st_free(list, n);
  return err;
}
