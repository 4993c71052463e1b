/* dlib's 68-point shape predictor (an ensemble of regression trees, Kazemi & Sullivan 2014),
 * read and evaluated by our own code from the description in shared/research/formats.md §1.
 *
 * Design notes.
 * - Loading: the file (about 100 MB) is mapped read-only and parsed in one pass straight into
 *   per-level flat arrays (splits, leaves, anchors, deltas); nothing is allocated per value.
 *   Every read is bounds-checked, every count is checked against the bytes left before
 *   anything is allocated for it, and every index is checked before evaluation may use it, so
 *   a truncated or hostile file gives FC_EFORMAT with the byte offset, never a crash or a huge
 *   allocation. The parse must end exactly at the end of the file.
 * - Strictness: only what dlib 19.24 writes is accepted (version 1, the negated-dimension
 *   matrix format, binary floats, complete trees of one depth, 68 landmarks); non-finite
 *   numbers are refused too, since the real model has none and they could only poison the
 *   evaluation.
 * - Evaluation reproduces dlib's arithmetic, because the points are rounded to whole pixels
 *   and any difference in a feature pixel's rounding changes the tree paths: the shape is
 *   float32, the similarity transform from the initial shape to the current one is fitted in
 *   double (its closed form, equal to dlib's Umeyama fit on these inputs) and cast to float,
 *   the box maps the unit square onto l..r (scale r - l, not the width), and pixels are
 *   rounded with floor(v + 0.5). The build uses ISO C mode (-std=c11), where GCC does not
 *   contract a*b + c into FMA instructions, which would change float results.
 * - The model is immutable after loading and fc_shape_predict keeps its scratch on the stack,
 *   so it may run on several threads at once.
 */
#include "avatar/landmarks.h"

#include "facecast/error.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPARTS FC_LANDMARKS
#define NCOORD (2 * NPARTS)  /* floats per shape: x0, y0, x1, y1, ... */
#define MAX_POOL 4096        /* feature pixels per level (dlib's default is 400; this model 500) */
#define MAX_DEPTH 12         /* tree depth (this model: 4) */
#define MAX_LEVELS 10000     /* cascade levels (this model: 15) */
/* Fewest bytes an encoded value can take: an integer is a control byte and at least one byte,
 * a float is two integers. Used to bound counts by the bytes left. */
#define MIN_INT 2
#define MIN_FLOAT 4
#define MIN_MATRIX (2 * MIN_INT + NCOORD * MIN_FLOAT)

typedef struct lm_split {
  uint16_t i1, i2; /* feature pixel indices (< the level's pool size) */
  float thresh;
} lm_split;

typedef struct lm_level {
  int ntrees, npool;
  lm_split *splits;   /* ntrees × nsplits */
  float *leaves;      /* ntrees × nleaves × NCOORD */
  uint8_t *anchor;    /* npool landmark indices */
  float *deltas;      /* npool × (dx, dy), in initial-shape units */
  size_t trees_at;    /* byte offset of the level's tree vector (for error details) */
} lm_level;

struct fc_shape_model {
  int nlevels;
  int nsplits, nleaves; /* per tree, the same in every tree; nleaves == 0 until one is read */
  float init[NCOORD];
  lm_level *levels;     /* nlevels, zeroed when allocated: destroy frees what was built */
};

const char *fc_shape_model_default_path(void) {
  const char *env = getenv("FACECAST_SHAPE_MODEL");
  return env && *env ? env : "/usr/share/dlib/shape_predictor_68_face_landmarks.dat";
}

void fc_shape_model_destroy(fc_shape_model *m) {
  if (!m) return;
  for (int c = 0; m->levels && c < m->nlevels; c++) {
    free(m->levels[c].splits);
    free(m->levels[c].leaves);
    free(m->levels[c].anchor);
    free(m->levels[c].deltas);
  }
  free(m->levels);
  free(m);
}

/* ---- Reading dlib's serialisation ------------------------------------------------------- */

typedef struct rd {
  const uint8_t *p;
  size_t n, pos;
  const char *name;
  int level, tree; /* where the parse is, for details; -1 when not inside one */
} rd;

/* Sets a detail "NAME: byte AT (level L, tree T): MESSAGE" and returns FC_EFORMAT. */
static int rd_fail(const rd *r, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rd_fail(const rd *r, size_t at, const char *fmt, ...) {
  char msg[256], where[64] = "";
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (r->level >= 0 && r->tree >= 0)
    snprintf(where, sizeof where, " (level %d, tree %d)", r->level, r->tree);
  else if (r->level >= 0)
    snprintf(where, sizeof where, " (level %d)", r->level);
  return fc_error_set(FC_EFORMAT, "%s: byte %zu%s: %s", r->name, at, where, msg);
}

static size_t rd_left(const rd *r) { return r->n - r->pos; }

/* One integer: a control byte (bits 0-3: the count of little-endian magnitude bytes, 1..8;
 * bit 7: negative; bits 4-6: always 0 in binary data), then the magnitude. max_bytes is the
 * size of the C++ type dlib wrote. */
static inline int rd_int(rd *r, int max_bytes, int is_signed, const char *what, uint64_t *mag,
                         int *neg) {
  size_t at = r->pos;
  if (at >= r->n) return rd_fail(r, at, "truncated: %s missing", what);
  unsigned ctrl = r->p[at];
  unsigned cnt = ctrl & 0x0f;
  if (ctrl & 0x70)
    return rd_fail(r, at, "%s: control byte 0x%02x is not binary dlib data", what, ctrl);
  if ((ctrl & 0x80) && !is_signed)
    return rd_fail(r, at, "%s: sign bit on an unsigned value (control byte 0x%02x)", what, ctrl);
  if (cnt == 0 || cnt > (unsigned)max_bytes)
    return rd_fail(r, at, "%s: %u-byte integer (1..%d allowed)", what, cnt, max_bytes);
  if (cnt > r->n - at - 1)
    return rd_fail(r, at, "truncated: %s needs %u bytes, %zu left", what, cnt + 1, r->n - at);
  uint64_t v = 0;
  for (unsigned i = cnt; i > 0; i--) v = v << 8 | r->p[at + i];
  r->pos = at + 1 + cnt;
  *mag = v;
  *neg = (ctrl & 0x80) != 0;
  return 0;
}

/* An unsigned count or index (size_t / unsigned long in dlib), at most max. */
static int rd_count(rd *r, const char *what, uint64_t max, uint64_t *out) {
  size_t at = r->pos;
  int neg = 0, e = rd_int(r, 8, 0, what, out, &neg);
  if (e) return e;
  if (*out > max)
    return rd_fail(r, at, "%s is %llu (at most %llu here)", what, (unsigned long long)*out,
                   (unsigned long long)max);
  return 0;
}

/* A count that the structure read so far fixes: "N WHAT for M THAT" when it differs. */
static int rd_count_is(rd *r, const char *what, uint64_t want, const char *that) {
  size_t at = r->pos;
  uint64_t v;
  int e = rd_count(r, what, UINT64_MAX, &v);
  if (!e && v != want)
    e = rd_fail(r, at, "%llu %s for %llu %s", (unsigned long long)v, what,
                (unsigned long long)want, that);
  return e;
}

/* A signed value of a type of max_bytes bytes. */
static int rd_signed(rd *r, int max_bytes, const char *what, int64_t *out) {
  size_t at = r->pos;
  uint64_t mag = 0;
  int neg = 0, e = rd_int(r, max_bytes, 1, what, &mag, &neg);
  if (e) return e;
  uint64_t limit = (UINT64_C(1) << (8 * max_bytes - 1)) - 1; /* e.g. 32767 for int16 */
  if (mag > limit + (uint64_t)neg)
    return rd_fail(r, at, "%s: %s%llu does not fit in %d bytes", what, neg ? "-" : "",
                   (unsigned long long)mag, max_bytes);
  *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
  return 0;
}

/* mantissa · 2^ex as dlib converts it for a float: the mantissa to float, then scaled by the
 * power of two. Multiplying by an exact power of two rounds once, as ldexpf does, and is faster;
 * ldexpf only for exponents whose power of two is not a normal float. */
static inline float scale2(int64_t mant, int ex) {
  float m = (float)mant;
  if (ex >= -126 && ex <= 127) {
    union { uint32_t u; float f; } p2 = {(uint32_t)(ex + 127) << 23};
    return m * p2.f;
  }
  return ldexpf(m, ex);
}

/* A float: mantissa (int64) then exponent (int16), each an integer as above. */
static int rd_float_checked(rd *r, const char *what, float *out) {
  size_t at = r->pos;
  int64_t mant, ex;
  int e;
  if ((e = rd_signed(r, 8, what, &mant)) || (e = rd_signed(r, 2, what, &ex))) return e;
  if (ex >= 32000 && ex <= 32002)
    return rd_fail(r, at, "%s is %s (exponent code %lld)", what,
                   ex == 32002 ? "NaN" : "infinite", (long long)ex);
  float v = scale2(mant, (int)ex);
  if (!isfinite(v)) return rd_fail(r, at, "%s overflows a float", what);
  *out = v;
  return 0;
}

/* The same, with a fast path for the common case (a mantissa of 1..7 bytes and an ordinary
 * exponent, 12 bytes or more left): the leaves are 16 million floats. Anything else, including
 * every error, goes through rd_float_checked. */
static inline __attribute__((always_inline)) int rd_float(rd *r, const char *what, float *out) {
  const uint8_t *p = r->p + r->pos;
  if (r->n - r->pos >= 12) {
    unsigned c1 = p[0], n1 = c1 & 0x0f;
    if (!(c1 & 0x70) && n1 - 1 < 7) {
      unsigned c2 = p[1 + n1], n2 = c2 & 0x0f;
      if (!(c2 & 0x70) && n2 - 1 < 2) {
        uint64_t mag; /* 8 bytes are there (12 left): load them, keep n1 */
        memcpy(&mag, p + 1, 8);
        mag = le64toh(mag) & ((UINT64_C(1) << 8 * n1) - 1);
        unsigned emag = p[2 + n1] | (n2 == 2 ? (unsigned)p[3 + n1] << 8 : 0u);
        int ex = c2 & 0x80 ? -(int)emag : (int)emag;
        if (emag < 32000) {
          float v = scale2(c1 & 0x80 ? -(int64_t)mag : (int64_t)mag, ex);
          if (isfinite(v)) {
            r->pos += 2 + n1 + n2;
            *out = v;
            return 0;
          }
        }
      }
    }
  }
  return rd_float_checked(r, what, out);
}

/* A column vector of NCOORD floats: dims as negated longs (dlib's current format), then data. */
static int rd_shape_vector(rd *r, const char *what, float *out) {
  size_t at = r->pos;
  int64_t rows, cols;
  int e;
  if ((e = rd_signed(r, 8, what, &rows)) || (e = rd_signed(r, 8, what, &cols))) return e;
  if (rows > 0 || cols > 0)
    return rd_fail(r, at, "%s: positive dimensions %lldx%lld (an old dlib format)", what,
                   (long long)rows, (long long)cols);
  /* Both are <= 0 here; negated as unsigned, so INT64_MIN cannot overflow. */
  unsigned long long nr = 0 - (uint64_t)rows, nc = 0 - (uint64_t)cols;
  if (nc != 1 || nr == 0 || nr % 2)
    return rd_fail(r, at, "%s: matrix is %llux%llu, not a column of x,y pairs", what, nr, nc);
  if (nr != NCOORD)
    return rd_fail(r, at, "%s: model has %llu landmarks; facecast needs %d", what, nr / 2,
                   NPARTS);
  for (int i = 0; i < NCOORD; i++)
    if ((e = rd_float(r, what, &out[i]))) return e;
  return 0;
}

/* Bytes that one tree with s splits takes at the least. */
static uint64_t min_tree_bytes(uint64_t s) {
  return MIN_INT + s * (2 * MIN_INT + MIN_FLOAT) + MIN_INT + (s + 1) * MIN_MATRIX;
}

/* One cascade level's trees. The first tree of the model fixes the depth; the level's arrays
 * are allocated once its first tree's split count is known. */
static int parse_trees(rd *r, fc_shape_model *m, lm_level *lv) {
  uint64_t ntrees, s;
  int e;
  lv->trees_at = r->pos;
  if ((e = rd_count(r, "tree count", rd_left(r) / min_tree_bytes(0), &ntrees))) return e;
  for (uint64_t t = 0; t < ntrees; t++) {
    r->tree = (int)t;
    size_t at = r->pos;
    if ((e = rd_count(r, "split count", (1u << MAX_DEPTH) - 1, &s))) return e;
    if (!m->nleaves) {
      if ((s + 1) & s)
        return rd_fail(r, at, "split count %llu is not 2^depth - 1 (a complete tree)",
                       (unsigned long long)s);
      m->nsplits = (int)s;
      m->nleaves = (int)s + 1;
    } else if (s != (uint64_t)m->nsplits) {
      return rd_fail(r, at, "tree has %llu splits, the first one %d", (unsigned long long)s,
                     m->nsplits);
    }
    if (t == 0) {
      /* Now the size of a tree is known: bound the count by it before allocating. */
      size_t avail = r->n - at;
      if (ntrees > avail / min_tree_bytes(s) || ntrees > INT32_MAX)
        return rd_fail(r, lv->trees_at, "tree count %llu does not fit in the %zu bytes left",
                       (unsigned long long)ntrees, avail);
      lv->ntrees = (int)ntrees;
      lv->splits = malloc((size_t)ntrees * (size_t)(m->nsplits ? m->nsplits : 1) *
                          sizeof *lv->splits);
      lv->leaves = malloc((size_t)ntrees * (size_t)m->nleaves * NCOORD * sizeof(float));
      if (!lv->splits || !lv->leaves)
        return fc_error_set(FC_ENOMEM, "%s: out of memory for %llu trees", r->name,
                            (unsigned long long)ntrees);
    }
    lm_split *sp = lv->splits + (size_t)t * m->nsplits;
    for (int k = 0; k < m->nsplits; k++) {
      uint64_t i1, i2;
      /* The pool size is read after all trees: check against the cap now, the size later. */
      if ((e = rd_count(r, "split pixel index", MAX_POOL - 1, &i1)) ||
          (e = rd_count(r, "split pixel index", MAX_POOL - 1, &i2)) ||
          (e = rd_float(r, "split threshold", &sp[k].thresh)))
        return e;
      sp[k].i1 = (uint16_t)i1;
      sp[k].i2 = (uint16_t)i2;
    }
    if ((e = rd_count_is(r, "leaves", (uint64_t)m->nleaves, "leaves in a complete tree")))
      return e;
    float *lf = lv->leaves + (size_t)t * m->nleaves * NCOORD;
    for (int k = 0; k < m->nleaves; k++)
      if ((e = rd_shape_vector(r, "leaf value", lf + (size_t)k * NCOORD))) return e;
  }
  r->tree = -1;
  return 0;
}

/* Checks that the initial shape has some spread: the similarity fit divides by it. */
static int init_spread_ok(const float *s) {
  double mx = 0, my = 0, v = 0;
  for (int i = 0; i < NPARTS; i++) mx += s[2 * i], my += s[2 * i + 1];
  mx /= NPARTS, my /= NPARTS;
  for (int i = 0; i < NPARTS; i++)
    v += (s[2 * i] - mx) * (s[2 * i] - mx) + (s[2 * i + 1] - my) * (s[2 * i + 1] - my);
  return v > 0 && isfinite(v);
}

static int parse_model(rd *r, fc_shape_model *m) {
  int64_t version;
  uint64_t nlevels, cnt;
  int e;
  size_t at = r->pos;
  if (r->n == 0) return rd_fail(r, 0, "empty file");
  if ((e = rd_signed(r, 4, "version", &version))) return e;
  if (version != 1)
    return rd_fail(r, at, "version %lld (only dlib's version 1 is known)", (long long)version);
  at = r->pos;
  if ((e = rd_shape_vector(r, "initial shape", m->init))) return e;
  if (!init_spread_ok(m->init)) return rd_fail(r, at, "initial shape has all points equal");

  at = r->pos;
  uint64_t max_levels = rd_left(r) / (3 * MIN_INT); /* each level: trees, anchors, deltas */
  if ((e = rd_count(r, "level count", max_levels < MAX_LEVELS ? max_levels : MAX_LEVELS,
                    &nlevels)))
    return e;
  if (!(m->levels = calloc(nlevels ? nlevels : 1, sizeof *m->levels)))
    return fc_error_set(FC_ENOMEM, "%s: out of memory", r->name);
  m->nlevels = (int)nlevels;
  for (int c = 0; c < m->nlevels; c++) {
    r->level = c;
    if ((e = parse_trees(r, m, &m->levels[c]))) return e;
  }
  r->level = -1;

  /* anchor_idx: per level, the landmark each feature pixel hangs on */
  if ((e = rd_count_is(r, "anchor levels", nlevels, "cascade levels"))) return e;
  for (int c = 0; c < m->nlevels; c++) {
    lm_level *lv = &m->levels[c];
    r->level = c;
    at = r->pos;
    uint64_t max_pool = rd_left(r) / MIN_INT;
    if ((e = rd_count(r, "feature pixel count", max_pool < MAX_POOL ? max_pool : MAX_POOL,
                      &cnt)))
      return e;
    lv->npool = (int)cnt;
    if (!(lv->anchor = malloc(cnt ? cnt : 1)))
      return fc_error_set(FC_ENOMEM, "%s: out of memory", r->name);
    for (int i = 0; i < lv->npool; i++) {
      uint64_t a;
      if ((e = rd_count(r, "anchor landmark", NPARTS - 1, &a))) return e;
      lv->anchor[i] = (uint8_t)a;
    }
    /* Now every split of this level can be checked against the pool size. */
    for (size_t k = 0; k < (size_t)lv->ntrees * m->nsplits; k++)
      if (lv->splits[k].i1 >= lv->npool || lv->splits[k].i2 >= lv->npool) {
        r->tree = (int)(k / m->nsplits);
        return rd_fail(r, lv->trees_at,
                       "split %d reads feature pixel %d or %d of %d (pool at byte %zu)",
                       (int)(k % m->nsplits), lv->splits[k].i1, lv->splits[k].i2, lv->npool,
                       at);
      }
  }
  r->level = -1;

  /* deltas: per level and feature pixel, the offset from its anchor */
  if ((e = rd_count_is(r, "delta levels", nlevels, "cascade levels"))) return e;
  for (int c = 0; c < m->nlevels; c++) {
    lm_level *lv = &m->levels[c];
    r->level = c;
    if ((e = rd_count_is(r, "deltas", (uint64_t)lv->npool, "feature pixels"))) return e;
    if (!(lv->deltas = malloc(2 * sizeof(float) * (lv->npool ? lv->npool : 1))))
      return fc_error_set(FC_ENOMEM, "%s: out of memory", r->name);
    for (int i = 0; i < 2 * lv->npool; i++)
      if ((e = rd_float(r, "delta", &lv->deltas[i]))) return e;
  }
  r->level = -1;
  if (r->pos != r->n)
    return rd_fail(r, r->pos, "%zu bytes after the end of the model", r->n - r->pos);
  return 0;
}

fc_shape_model *fc_shape_model_load_mem(const void *data, size_t size, const char *name,
                                        int *err) {
  int dummy;
  if (!err) err = &dummy;
  if (!data && size) {
    *err = fc_error_set(FC_EINVAL, "fc_shape_model_load_mem: NULL data");
    return NULL;
  }
  fc_shape_model *m = calloc(1, sizeof *m);
  if (!m) {
    *err = fc_error_set(FC_ENOMEM, "out of memory");
    return NULL;
  }
  rd r = {data, size, 0, name ? name : "shape model", -1, -1};
  int e = parse_model(&r, m);
  if (e) {
    fc_shape_model_destroy(m);
    *err = e;
    return NULL;
  }
  *err = FC_OK;
  return m;
}

fc_shape_model *fc_shape_model_load(const char *path, int *err) {
  int dummy, fd = -1;
  void *map = MAP_FAILED;
  size_t size = 0;
  fc_shape_model *m = NULL;
  struct stat st;
  if (!err) err = &dummy;
  if (!path) {
    *err = fc_error_set(FC_EINVAL, "fc_shape_model_load: NULL path");
    return NULL;
  }
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    *err = fc_error_set(errno == ENOENT ? FC_ENOTFOUND : FC_EIO, "%s: %s", path, strerror(errno));
    goto done;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *err = fc_error_set(FC_EIO, "%s: not a regular file", path);
    goto done;
  }
  size = (size_t)st.st_size;
  if (size > 0) {
    /* Mapped rather than read: no 100 MB copy, and the pages stay in the page cache for the
     * next process. MAP_POPULATE reads ahead in one go, as the parse touches every byte. */
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) {
      *err = fc_error_set(FC_EIO, "%s: mmap: %s", path, strerror(errno));
      goto done;
    }
  }
  m = fc_shape_model_load_mem(size ? map : "", size, path, err);
done:
  if (map != MAP_FAILED) munmap(map, size);
  if (fd >= 0) close(fd);
  return m;
}

/* ---- Evaluation ------------------------------------------------------------------------ */

/* The least-squares similarity transform (scale·rotation [[a, -b], [b, a]] plus a shift) from
 * `from` to `to`, in double; only a and b are used, cast to float as dlib does. */
static void similarity(const float *from, const float *to, float *a, float *b) {
  double fx = 0, fy = 0, tx = 0, ty = 0;
  for (int i = 0; i < NPARTS; i++) {
    fx += from[2 * i], fy += from[2 * i + 1];
    tx += to[2 * i], ty += to[2 * i + 1];
  }
  fx /= NPARTS, fy /= NPARTS, tx /= NPARTS, ty /= NPARTS;
  double ss = 0, sa = 0, sb = 0;
  for (int i = 0; i < NPARTS; i++) {
    double x = from[2 * i] - fx, y = from[2 * i + 1] - fy;
    double u = to[2 * i] - tx, v = to[2 * i + 1] - ty;
    ss += x * x + y * y;
    sa += x * u + y * v;
    sb += x * v - y * u;
  }
  *a = (float)(sa / ss);
  *b = (float)(sb / ss);
}

#define LEAF_CHUNK 64
#define PREFETCH_AHEAD 8

static inline void prefetch_leaf(const float *leaf) {
  for (int j = 0; j < NCOORD; j += 16) __builtin_prefetch(leaf + j);
  __builtin_prefetch(leaf + NCOORD - 1); /* leaves are not line-aligned */
}

int fc_shape_predict(const fc_shape_model *m, const uint8_t *gray, int w, int h, int stride,
                     fc_dlib_box box, fc_point pts[FC_LANDMARKS]) {
  if (!m || !gray || !pts || w <= 0 || h <= 0 || stride < w)
    return fc_error_set(FC_EINVAL, "fc_shape_predict: bad arguments (%dx%d, stride %d)", w, h,
                        stride);
  if (box.r <= box.l || box.b <= box.t)
    return fc_error_set(FC_EINVAL, "fc_shape_predict: empty box (%d,%d)-(%d,%d)", box.l, box.t,
                        box.r, box.b);
  /* The unit square onto the box: u = 0 → l, u = 1 → r (so the scale is r - l). */
  const double ox = box.l, oy = box.t, sx = (double)box.r - box.l, sy = (double)box.b - box.t;
  float cur[NCOORD], vals[MAX_POOL];
  memcpy(cur, m->init, sizeof cur);
  const int ns = m->nsplits, nl = m->nleaves;
  for (int c = 0; c < m->nlevels; c++) {
    const lm_level *lv = &m->levels[c];
    float a, b;
    similarity(m->init, cur, &a, &b);
    for (int i = 0; i < lv->npool; i++) {
      float dx = lv->deltas[2 * i], dy = lv->deltas[2 * i + 1];
      int k = lv->anchor[i];
      float px = (a * dx - b * dy) + cur[2 * k];
      float py = (b * dx + a * dy) + cur[2 * k + 1];
      double X = floor(ox + sx * px + 0.5), Y = floor(oy + sy * py + 0.5);
      /* Compared as doubles before any conversion: a NaN or a far-off point reads 0. */
      vals[i] = X >= 0 && X < w && Y >= 0 && Y < h
                    ? (float)gray[(size_t)Y * (size_t)stride + (size_t)X]
                    : 0.0f;
    }
    /* The pixel values are fixed within a level, so the trees' leaves are found first, a
     * chunk at a time, and then added in tree order (the float sums stay dlib's) while the
     * leaves a few trees ahead are prefetched: the adds wait on memory otherwise, as the
     * leaves (65 MB) are far larger than the caches. */
    for (int t0 = 0; t0 < lv->ntrees; t0 += LEAF_CHUNK) {
      const float *leaf[LEAF_CHUNK];
      int n = lv->ntrees - t0 < LEAF_CHUNK ? lv->ntrees - t0 : LEAF_CHUNK;
      for (int i = 0; i < n; i++) {
        const lm_split *s = lv->splits + (size_t)(t0 + i) * ns;
        int k = 0;
        while (k < ns) k = vals[s[k].i1] - vals[s[k].i2] > s[k].thresh ? 2 * k + 1 : 2 * k + 2;
        leaf[i] = lv->leaves + ((size_t)(t0 + i) * nl + (size_t)(k - ns)) * NCOORD;
        if (i < PREFETCH_AHEAD) prefetch_leaf(leaf[i]);
      }
      for (int i = 0; i < n; i++) {
        if (i + PREFETCH_AHEAD < n) prefetch_leaf(leaf[i + PREFETCH_AHEAD]);
        for (int j = 0; j < NCOORD; j++) cur[j] += leaf[i][j];
      }
    }
  }
  for (int i = 0; i < NPARTS; i++) {
    pts[i].x = (float)floor(ox + sx * cur[2 * i] + 0.5);
    pts[i].y = (float)floor(oy + sy * cur[2 * i + 1] + 0.5);
  }
  return FC_OK;
}

void fc_rgb_to_gray_dlib(const fc_image *src, uint8_t *dst) {
  for (int y = 0; y < src->h; y++) {
    const uint8_t *s = src->rgb + (size_t)y * src->stride;
    uint8_t *d = dst + (size_t)y * src->w;
    for (int x = 0; x < src->w; x++, s += 3) d[x] = (uint8_t)((s[0] + s[1] + s[2]) / 3u);
  }
}

/* ---- Haar box → HOG box ------------------------------------------------------------------ */

/* dlib's HOG boxes are squares of about 0.95 Haar sides, centred half a side across and 0.6 down
 * from the Haar box's top-left corner: the Haar box sits higher and is larger (REFERENCE.md).
 * Fitted by tools/fit_dlib_box.py (least squares of each parameter, residuals in units of the
 * Haar side) on 69 pairs from tools/haar_augment.c + tools/dlib_golden.cpp: the astronaut and
 * Grace Hopper photos rescaled (faces 85-250 px), cropped at three places and mirrored
 * (tests/data/landmarks/haar_hog_pairs.txt). Residual (rms, in Haar sides): side 0.080, centre x
 * 0.028, centre y 0.033; corners are off by 6.4 px or 4.3% of the HOG side on average (10.4% at
 * most). The side's residual is mostly dlib's own: its HOG pyramid only has box sides 20%
 * apart, which no smooth mapping can follow. */
#define BOX_SIDE 0.9452
#define BOX_CX 0.5052
#define BOX_CY 0.6011

/* Saturates instead of overflowing for absurd boxes (the mapping has no error return). */
static int to_int(double v) { return v <= INT_MIN ? INT_MIN : v >= INT_MAX ? INT_MAX : (int)v; }

fc_dlib_box fc_dlib_box_from_haar(fc_rect haar) {
  double w = haar.w, side = floor(BOX_SIDE * w + 0.5);
  double l = floor(haar.x + BOX_CX * w - (side - 1) / 2 + 0.5);
  double t = floor(haar.y + BOX_CY * w - (side - 1) / 2 + 0.5);
  fc_dlib_box d = {to_int(l), to_int(t), to_int(l + side - 1), to_int(t + side - 1)};
  return d;
}
