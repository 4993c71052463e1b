/* Checkpoint (torch zip / legacy, safetensors) and .npy readers.
 *
 * Goldens come from tools/gen_ckpt_fixtures.py (tests/data/ckpt/golden.txt + golden.bin: torch's
 * own .float() of every tensor); every tensor must match bit for bit, names and order included.
 * Then the hostile inputs: empty and random files, every fixture truncated at many offsets and
 * with single bytes flipped (each must load or fail cleanly - run under ASan), hand-written
 * pickles with forbidden globals, unsupported opcodes, lying views and bombs, a compressed zip
 * entry, bad safetensors offsets and malicious .npy headers. Crafted inputs are built in memory
 * by the small pickle and zip writers below.
 */
#include "modelfile/checkpoint.h"
#include "facecast/error.h"
#include "modelfile/npy.h"
#include "fc_test.h"
#include "modelfile/ckpt_internal.h"

#include <stdint.h>
#include <string.h>

#define CKPT_DIR FC_TEST_DATA_DIR "/ckpt"

/* ---- helpers ---- */

/* The error code was set with a detail of its own (not just the code's generic text). */
static int has_detail(int err) {
  const char *d = fc_error_detail(err);
  return d[0] && strcmp(d, fc_strerror(err)) != 0;
}

static int detail_has(int err, const char *s) { return strstr(fc_error_detail(err), s) != NULL; }

/* Loads a private, exact-size copy (so ASan sees any read past the end). */
static fc_checkpoint *load_copy(const uint8_t *b, size_t n, int format, int *err, uint8_t **keep) {
  *keep = malloc(n ? n : 1);
  memcpy(*keep, b, n);
  fc_error_clear();
  return fc_checkpoint_load_mem(*keep, n, "mem", format, err);
}

/* Reads every tensor of a loaded checkpoint (skipping absurd broadcast sizes); 1 if all fine. */
static int read_all(const fc_checkpoint *c) {
  int ok = 1;
  for (int i = 0; i < fc_checkpoint_count(c); i++) {
    int64_t n = fc_checkpoint_numel(c, i);
    if (n < 0) return 0;
    if (n > (1 << 22)) continue;
    float *f = malloc((size_t)n * sizeof *f + 1);
    if (fc_checkpoint_read_f32(c, i, f, (size_t)n) != FC_OK) ok = 0;
    free(f);
  }
  return ok;
}

/* ---- goldens ---- */

typedef struct golden {
  char file[64], name[128];
  int ndim;
  int64_t shape[8];
  long off;
} golden;

static golden *goldens;
static int ngoldens;
static float *gvals;
static size_t ngvals;

static int load_goldens(void) {
  if (goldens) return 1;
  size_t n;
  uint8_t *b = fc_test_read_file(CKPT_DIR "/golden.bin", &n);
  if (!b) return 0;
  gvals = (float *)b;
  ngvals = n / 4;
  FILE *f = fopen(CKPT_DIR "/golden.txt", "r");
  if (!f) return 0;
  char line[1024];
  int cap = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    if (ngoldens == cap) goldens = realloc(goldens, (size_t)(cap = cap ? cap * 2 : 64) * sizeof *goldens);
    golden *g = &goldens[ngoldens];
    memset(g, 0, sizeof *g);
    int used = 0;
    if (sscanf(line, "%63s %127s %d%n", g->file, g->name, &g->ndim, &used) != 3) break;
    char *p = line + used;
    for (int k = 0; k < g->ndim; k++) g->shape[k] = strtoll(p, &p, 10);
    g->off = strtol(p, &p, 10);
    ngoldens++;
  }
  fclose(f);
  return ngoldens > 0;
}

static int64_t gnumel(const golden *g) {
  int64_t n = 1;
  for (int k = 0; k < g->ndim; k++) n *= g->shape[k];
  return n;
}

static int is_npy(const char *file) { return strstr(file, ".npy") != NULL; }

/* Compares floats bit for bit; prints the first mismatch. */
static int same_bits(const float *got, const float *want, int64_t n, const char *what) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], 4) != 0) {
      fprintf(stderr, "%s: element %lld is %.9g, golden %.9g\n", what, (long long)i,
              (double)got[i], (double)want[i]);
      return 0;
    }
  return 1;
}

static void test_checkpoints_match_golden(void) {
  FC_REQUIRE(load_goldens());
  int files = 0, tensors = 0;
  for (int i = 0; i < ngoldens;) {
    int j = i;
    while (j < ngoldens && strcmp(goldens[j].file, goldens[i].file) == 0) j++;
    if (is_npy(goldens[i].file)) {
      i = j;
      continue;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CKPT_DIR, goldens[i].file);
    int err;
    fc_checkpoint *c = fc_checkpoint_load(path, &err);
    if (!c) fprintf(stderr, "%s: %s\n", path, fc_error_detail(err));
    FC_REQUIRE(c);
    files++;
    FC_CHECK_INT(fc_checkpoint_count(c), ==, j - i);
    for (int k = i; k < j && k - i < fc_checkpoint_count(c); k++) {
      const golden *g = &goldens[k];
      const fc_tensor_info *in = fc_checkpoint_info(c, k - i);
      FC_REQUIRE(in);
      if (strcmp(in->name, g->name) != 0)
        fprintf(stderr, "%s: tensor %d is '%s', golden '%s'\n", g->file, k - i, in->name, g->name);
      FC_CHECK(strcmp(in->name, g->name) == 0);
      FC_CHECK_INT(fc_checkpoint_find(c, g->name), ==, k - i);
      FC_CHECK_INT(in->ndim, ==, g->ndim);
      for (int d = 0; d < g->ndim && d < in->ndim; d++) FC_CHECK_INT(in->shape[d], ==, g->shape[d]);
      int64_t n = gnumel(g);
      FC_CHECK_INT(fc_checkpoint_numel(c, k - i), ==, n);
      FC_REQUIRE((size_t)(g->off + n) <= ngvals);
      float *f = malloc((size_t)n * 4 + 4);
      FC_CHECK_INT(fc_checkpoint_read_f32(c, k - i, f, (size_t)n), ==, FC_OK);
      char what[256];
      snprintf(what, sizeof what, "%s:%s", g->file, g->name);
      FC_CHECK(same_bits(f, gvals + g->off, n, what));
      free(f);
      tensors++;
    }
    fc_checkpoint_destroy(c);
    i = j;
  }
  FC_CHECK_INT(files, ==, 7);
  fprintf(stderr, "     %d checkpoint files, %d tensors bit-identical\n", files, tensors);
}

static void test_npy_match_golden(void) {
  FC_REQUIRE(load_goldens());
  int files = 0;
  for (int k = 0; k < ngoldens; k++) {
    const golden *g = &goldens[k];
    if (!is_npy(g->file)) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CKPT_DIR, g->file);
    float *f = NULL;
    int64_t shape[8];
    int nd = -1;
    int err = fc_npy_read_f32(path, &f, shape, &nd);
    if (err) fprintf(stderr, "%s: %s\n", path, fc_error_detail(err));
    FC_CHECK_INT(err, ==, FC_OK);
    if (err) continue;
    FC_CHECK(f != NULL);
    FC_CHECK_INT(nd, ==, g->ndim);
    for (int d = 0; d < g->ndim && d < nd; d++) FC_CHECK_INT(shape[d], ==, g->shape[d]);
    FC_CHECK(same_bits(f, gvals + g->off, gnumel(g), g->file));
    free(f);
    files++;
  }
  FC_CHECK_INT(files, ==, 19);
}

static void test_names_and_dtypes(void) {
  int err;
  fc_checkpoint *c = fc_checkpoint_load(CKPT_DIR "/wav2lip_legacy.pth", &err);
  FC_REQUIRE(c);
  FC_CHECK(fc_checkpoint_find(c, "conv.weight") >= 0);
  FC_CHECK_INT(fc_checkpoint_find(c, "module.conv.weight"), ==, -1); /* stripped */
  FC_CHECK(fc_checkpoint_find(c, "plain.tensor") >= 0);              /* no prefix: kept */
  FC_CHECK_INT(fc_checkpoint_find(c, "extra.note"), ==, -1);         /* a string: ignored */
  FC_CHECK_INT(fc_checkpoint_find(c, "global_step"), ==, -1);
  FC_CHECK_INT(fc_checkpoint_find(c, ""), ==, -1);
  int i = fc_checkpoint_find(c, "bn.num_batches_tracked");
  FC_REQUIRE(i >= 0);
  const fc_tensor_info *in = fc_checkpoint_info(c, i);
  FC_CHECK_INT(in->dtype, ==, FC_DT_I64);
  FC_CHECK_INT(in->ndim, ==, 0);
  float v = 0;
  FC_CHECK_INT(fc_checkpoint_read_f32(c, i, &v, 1), ==, FC_OK);
  FC_CHECK(v == 3.0f);
  struct { const char *name; fc_dtype dt; } dts[] = {
    {"extra.f16", FC_DT_F16}, {"extra.bf16", FC_DT_BF16}, {"extra.f64", FC_DT_F64},
    {"extra.i32", FC_DT_I32}, {"extra.i16", FC_DT_I16},   {"extra.i8", FC_DT_I8},
    {"extra.u8", FC_DT_U8},   {"extra.bool", FC_DT_BOOL}, {"extra.param", FC_DT_F32},
  };
  for (size_t k = 0; k < sizeof dts / sizeof *dts; k++) {
    int j = fc_checkpoint_find(c, dts[k].name);
    FC_CHECK(j >= 0);
    if (j >= 0) FC_CHECK_INT(fc_checkpoint_info(c, j)->dtype, ==, dts[k].dt);
  }
  /* Argument errors. */
  FC_CHECK(fc_checkpoint_info(c, -1) == NULL);
  FC_CHECK(fc_checkpoint_info(c, fc_checkpoint_count(c)) == NULL);
  FC_CHECK_INT(fc_checkpoint_read_f32(c, i, &v, 2), ==, FC_EINVAL);
  FC_CHECK_INT(fc_checkpoint_read_f32(c, -1, &v, 1), ==, FC_EINVAL);
  int e = fc_checkpoint_find(c, "extra.empty");
  FC_REQUIRE(e >= 0);
  FC_CHECK_INT(fc_checkpoint_numel(c, e), ==, 0);
  FC_CHECK_INT(fc_checkpoint_read_f32(c, e, NULL, 0), ==, FC_OK);
  fc_checkpoint_destroy(c);
  fc_checkpoint_destroy(NULL);
}

static void test_missing_and_empty(void) {
  int err = 0;
  fc_error_clear();
  FC_CHECK(fc_checkpoint_load(CKPT_DIR "/no-such-file.pth", &err) == NULL);
  FC_CHECK_INT(err, ==, FC_ENOTFOUND);
  FC_CHECK(has_detail(err));
  float *f;
  int64_t shape[8];
  int nd;
  FC_CHECK_INT(fc_npy_read_f32(CKPT_DIR "/no-such-file.npy", &f, shape, &nd), ==, FC_ENOTFOUND);
  FC_CHECK(fc_checkpoint_load(CKPT_DIR, &err) == NULL); /* a directory */
  FC_CHECK_INT(err, ==, FC_EIO);

  char dir[] = "/tmp/fc_ckpt_XXXXXX";
  FC_REQUIRE(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/empty.pth", dir);
  FC_REQUIRE(fc_test_write_file(path, "", 0));
  fc_error_clear();
  FC_CHECK(fc_checkpoint_load(path, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(has_detail(err));
  FC_CHECK_INT(fc_npy_read_f32(path, &f, shape, &nd), ==, FC_EFORMAT);

  /* Random bytes (a fixed LCG; first byte kept away from the signatures). */
  uint8_t rnd[4096];
  uint32_t s = 12345;
  for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 16);
  rnd[0] = 0x17;
  snprintf(path, sizeof path, "%s/random.pth", dir);
  FC_REQUIRE(fc_test_write_file(path, rnd, sizeof rnd));
  fc_error_clear();
  FC_CHECK(fc_checkpoint_load(path, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "not a PyTorch checkpoint (starts with 17 "));
  /* The same random bytes forced through every parser. */
  uint8_t *keep;
  for (int fmt = FC_CKPT_ZIP; fmt <= FC_CKPT_SAFETENSORS; fmt++) {
    fc_checkpoint *c = load_copy(rnd, sizeof rnd, fmt, &err, &keep);
    FC_CHECK(c == NULL);
    FC_CHECK(err == FC_EFORMAT || err == FC_EUNSUPPORTED);
    FC_CHECK(has_detail(err));
    free(keep);
  }
  FC_CHECK_INT(fc_npy_read_mem(rnd, sizeof rnd, "rnd", &f, shape, &nd), ==, FC_EFORMAT);
  fc_test_rmtree(dir);
}

static void test_npy_writer_matches_numpy(void) {
  const char *refs[] = {"npy_f4.npy", "npy_f4_1d.npy", "npy_4d.npy", "npy_0d.npy",
                        "npy_empty.npy", "npy_v2.npy"};
  char dir[] = "/tmp/fc_npy_XXXXXX";
  FC_REQUIRE(mkdtemp(dir));
  for (size_t k = 0; k < sizeof refs / sizeof *refs; k++) {
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/%s", CKPT_DIR, refs[k]);
    snprintf(out, sizeof out, "%s/out.npy", dir);
    float *f;
    int64_t shape[8];
    int nd;
    FC_REQUIRE(fc_npy_read_f32(in, &f, shape, &nd) == FC_OK);
    FC_CHECK_INT(fc_npy_write_f32(out, f, shape, nd), ==, FC_OK);
    size_t na, nb;
    uint8_t *a = fc_test_read_file(in, &na), *b = fc_test_read_file(out, &nb);
    /* npy_v2 was written as format 2.0; the writer emits 1.0, so compare it by value. */
    if (strcmp(refs[k], "npy_v2.npy") != 0) {
      FC_CHECK(a && b && na == nb && memcmp(a, b, na) == 0);
    } else {
      float *g;
      int64_t s2[8];
      int n2;
      FC_CHECK_INT(fc_npy_read_f32(out, &g, s2, &n2), ==, FC_OK);
      FC_CHECK(n2 == nd && memcmp(g, f, 6 * 4) == 0);
      free(g);
    }
    free(a);
    free(b);
    free(f);
  }
  /* A shape with a long first dimension (numpy's growth padding shrinks). */
  int64_t big[3] = {0, 123456789012LL, 3};
  char out[512];
  snprintf(out, sizeof out, "%s/big.npy", dir);
  FC_CHECK_INT(fc_npy_write_f32(out, NULL, big, 3), ==, FC_OK);
  size_t n;
  uint8_t *b = fc_test_read_file(out, &n);
  FC_CHECK(b && n == 128 && b[127] == '\n');
  free(b);
  FC_CHECK_INT(fc_npy_write_f32(out, NULL, big, 9), ==, FC_EINVAL);
  FC_CHECK_INT(fc_npy_write_f32("/nonexistent-dir/x.npy", NULL, big, 3), ==, FC_ENOTFOUND);
  fc_test_rmtree(dir);
}

/* ---- corruption sweeps ---- */

static const char *const sweep_files[] = {
  "wav2lip_zip.pth", "wav2lip_legacy.pth", "wav2lip_zip_p4.pth", "wav2lip_legacy_p4.pth",
  "zip64.pth", "flat_sd.pth", "tensors.safetensors", "npy_f8_fortran.npy", "npy_i2_fortran.npy",
  "npy_v3.npy", "npy_f4_be.npy",
};

/* Runs the matching reader over b; returns the error code (loaded ones are read in full). */
static int try_load(const char *file, const uint8_t *b, size_t n, int *read_ok) {
  int err;
  *read_ok = 1;
  if (is_npy(file)) {
    float *f = NULL;
    int64_t shape[8];
    int nd;
    uint8_t *keep = malloc(n ? n : 1);
    memcpy(keep, b, n);
    fc_error_clear();
    err = fc_npy_read_mem(keep, n, file, &f, shape, &nd);
    free(f);
    free(keep);
    return err;
  }
  uint8_t *keep;
  fc_checkpoint *c = load_copy(b, n, FC_CKPT_AUTO, &err, &keep);
  if (c) *read_ok = read_all(c);
  fc_checkpoint_destroy(c);
  free(keep);
  return err;
}

static void test_truncated_fixtures(void) {
  int cases = 0;
  for (size_t k = 0; k < sizeof sweep_files / sizeof *sweep_files; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CKPT_DIR, sweep_files[k]);
    size_t n;
    uint8_t *b = fc_test_read_file(path, &n);
    FC_REQUIRE(b);
    for (size_t cut = 0; cut < n; cut = cut + 97 < n - 8 ? cut + 97 : cut + 1) {
      int read_ok, err = try_load(sweep_files[k], b, cut, &read_ok);
      if (err != FC_EFORMAT || !has_detail(err))
        fprintf(stderr, "%s cut at %zu: %d %s\n", sweep_files[k], cut, err, fc_error_detail(err));
      FC_CHECK_INT(err, ==, FC_EFORMAT);
      FC_CHECK(has_detail(err));
      cases++;
    }
    free(b);
  }
  fprintf(stderr, "     %d truncations rejected\n", cases);
}

static void test_flipped_bytes(void) {
  int loaded = 0, failed = 0;
  for (size_t k = 0; k < sizeof sweep_files / sizeof *sweep_files; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", CKPT_DIR, sweep_files[k]);
    size_t n;
    uint8_t *b = fc_test_read_file(path, &n);
    FC_REQUIRE(b);
    static const uint8_t masks[] = {0xFF, 0x01, 0x80, 0x10};
    for (size_t pos = 0; pos < n; pos++) {
      /* Every byte with one mask; every 3rd byte with all of them. */
      for (size_t m = 0; m < (pos % 3 ? 1u : sizeof masks); m++) {
        b[pos] ^= masks[m];
        int read_ok, err = try_load(sweep_files[k], b, n, &read_ok);
        b[pos] ^= masks[m];
        if (err == FC_OK) {
          loaded++;
          FC_CHECK(read_ok);
        } else {
          failed++;
          if (!(err == FC_EFORMAT || err == FC_EUNSUPPORTED) || !has_detail(err))
            fprintf(stderr, "%s flip at %zu: %d %s\n", sweep_files[k], pos, err,
                    fc_error_detail(err));
          FC_CHECK(err == FC_EFORMAT || err == FC_EUNSUPPORTED);
          FC_CHECK(has_detail(err));
        }
      }
    }
    free(b);
  }
  fprintf(stderr, "     flips: %d loaded, %d rejected cleanly\n", loaded, failed);
}

/* ---- hand-built pickles and archives ---- */

typedef struct buf {
  uint8_t d[1 << 16];
  size_t n;
} buf;

static void put(buf *b, const void *p, size_t n) {
  memcpy(b->d + b->n, p, n);
  b->n += n;
}
static void put_s(buf *b, const char *s) { put(b, s, strlen(s)); }
static void put_u8(buf *b, uint8_t v) { b->d[b->n++] = v; }
static void put_u16(buf *b, uint16_t v) { put_u8(b, (uint8_t)v); put_u8(b, (uint8_t)(v >> 8)); }
static void put_u32(buf *b, uint32_t v) { put_u16(b, (uint16_t)v); put_u16(b, (uint16_t)(v >> 16)); }
static void put_u64(buf *b, uint64_t v) { put_u32(b, (uint32_t)v); put_u32(b, (uint32_t)(v >> 32)); }

static void pk_str(buf *b, const char *s) {
  put_u8(b, 'X');
  put_u32(b, (uint32_t)strlen(s));
  put_s(b, s);
}

static void pk_int(buf *b, int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    put_u8(b, 'J');
    put_u32(b, (uint32_t)v);
  } else {
    put_u8(b, 0x8a);
    put_u8(b, 8);
    put_u64(b, (uint64_t)v);
  }
}

typedef struct view {
  const char *key, *cls; /* storage key and class ("FloatStorage") */
  int64_t numel, offset;
  int ndim;
  int64_t size[9], stride[9];
} view;

/* Protocol 2: {'state_dict': {'module.w': _rebuild_tensor_v2(...), ...}} with the given views.
 * legacy adds the 6th persistent-id field (None). */
static void pk_state_dict(buf *b, const view *v, int n, int legacy) {
  put_s(b, "\x80\x02}");
  pk_str(b, "state_dict");
  put_s(b, "}(");
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "module.w%d", i);
    pk_str(b, name);
    put_s(b, "ctorch._utils\n_rebuild_tensor_v2\n((");
    pk_str(b, "storage");
    put_s(b, "ctorch\n");
    put_s(b, v[i].cls);
    put_s(b, "\n");
    pk_str(b, v[i].key);
    pk_str(b, "cpu");
    pk_int(b, v[i].numel);
    if (legacy) put_u8(b, 'N');
    put_s(b, "tQ");
    pk_int(b, v[i].offset);
    put_u8(b, '(');
    for (int k = 0; k < v[i].ndim; k++) pk_int(b, v[i].size[k]);
    put_s(b, "t(");
    for (int k = 0; k < v[i].ndim; k++) pk_int(b, v[i].stride[k]);
    put_s(b, "t\x89" "ccollections\nOrderedDict\n)RtR");
  }
  put_s(b, "us.");
}

typedef struct zentry {
  const char *name;
  const uint8_t *data;
  size_t n;
  int method;
} zentry;

/* A plain (non-ZIP64, unaligned) archive of STORED entries. */
static void make_zip(buf *z, const zentry *e, int n) {
  size_t offs[16];
  z->n = 0;
  for (int i = 0; i < n; i++) {
    offs[i] = z->n;
    put_u32(z, 0x04034b50);
    put_u16(z, 20); put_u16(z, 0); put_u16(z, (uint16_t)e[i].method); put_u32(z, 0);
    put_u32(z, fc_crc32(e[i].data, e[i].n));
    put_u32(z, (uint32_t)e[i].n); put_u32(z, (uint32_t)e[i].n);
    put_u16(z, (uint16_t)strlen(e[i].name)); put_u16(z, 0);
    put_s(z, e[i].name);
    put(z, e[i].data, e[i].n);
  }
  size_t cd = z->n;
  for (int i = 0; i < n; i++) {
    put_u32(z, 0x02014b50);
    put_u16(z, 20); put_u16(z, 20); put_u16(z, 0); put_u16(z, (uint16_t)e[i].method);
    put_u32(z, 0);
    put_u32(z, fc_crc32(e[i].data, e[i].n));
    put_u32(z, (uint32_t)e[i].n); put_u32(z, (uint32_t)e[i].n);
    put_u16(z, (uint16_t)strlen(e[i].name)); put_u16(z, 0); put_u16(z, 0);
    put_u16(z, 0); put_u16(z, 0); put_u32(z, 0);
    put_u32(z, (uint32_t)offs[i]);
    put_s(z, e[i].name);
  }
  size_t cd_size = z->n - cd;
  put_u32(z, 0x06054b50);
  put_u16(z, 0); put_u16(z, 0); put_u16(z, (uint16_t)n); put_u16(z, (uint16_t)n);
  put_u32(z, (uint32_t)cd_size); put_u32(z, (uint32_t)cd);
  put_u16(z, 0);
}

static float store[64]; /* storage "0": 0, 1, 2, ... */

/* A zip checkpoint holding one storage of `bytes` bytes and the given views of it. */
static fc_checkpoint *zip_ckpt(const view *v, int n, size_t bytes, int *err) {
  static buf pk, z;
  static uint8_t keep[sizeof z.d];
  pk.n = 0;
  pk_state_dict(&pk, v, n, 0);
  for (int i = 0; i < 64; i++) store[i] = (float)i;
  zentry e[] = {{"t/data.pkl", pk.d, pk.n, 0}, {"t/data/0", (const uint8_t *)store, bytes, 0},
                {"t/version", (const uint8_t *)"3\n", 2, 0}};
  make_zip(&z, e, 3);
  memcpy(keep, z.d, z.n);
  fc_error_clear();
  return fc_checkpoint_load_mem(keep, z.n, "crafted", FC_CKPT_AUTO, err);
}

static void test_crafted_views(void) {
  int err;
  /* A valid transposed, offset view: 2x3 over storage elements offset 5, strides (1, 4). */
  view ok = {"0", "FloatStorage", 64, 5, 2, {2, 3}, {1, 4}};
  fc_checkpoint *c = zip_ckpt(&ok, 1, 64 * 4, &err);
  if (!c) fprintf(stderr, "%s\n", fc_error_detail(err));
  FC_REQUIRE(c);
  FC_CHECK_INT(fc_checkpoint_find(c, "w0"), ==, 0);
  float f[6];
  FC_CHECK_INT(fc_checkpoint_read_f32(c, 0, f, 6), ==, FC_OK);
  const float want[6] = {5, 9, 13, 6, 10, 14};
  FC_CHECK(memcmp(f, want, sizeof f) == 0);
  fc_checkpoint_destroy(c);

  /* The view's last element (offset 5 + 1*1 + 2*30 = 66) lies past the 64-element storage. */
  view over = {"0", "FloatStorage", 64, 5, 2, {2, 3}, {1, 30}};
  FC_CHECK(zip_ckpt(&over, 1, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "exceeds storage"));

  /* Shape product overflow. */
  view huge = {"0", "FloatStorage", 64, 0, 3, {1LL << 40, 1LL << 40, 1LL << 40}, {0, 0, 0}};
  FC_CHECK(zip_ckpt(&huge, 1, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "overflow"));

  /* Extent overflow with a legal shape. */
  view far = {"0", "FloatStorage", 64, 0, 2, {3, 3}, {INT64_MAX / 2, 1}};
  FC_CHECK(zip_ckpt(&far, 1, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);

  /* Negative stride, negative offset. */
  view neg = {"0", "FloatStorage", 64, 10, 1, {3}, {-1}};
  FC_CHECK(zip_ckpt(&neg, 1, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  view nego = {"0", "FloatStorage", 64, -1, 1, {3}, {1}};
  FC_CHECK(zip_ckpt(&nego, 1, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);

  /* Nine dimensions. */
  view nine = {"0", "FloatStorage", 64, 0, 9, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}};
  FC_CHECK(zip_ckpt(&nine, 1, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);

  /* The storage entry is shorter than its declared 64 floats. */
  FC_CHECK(zip_ckpt(&ok, 1, 100, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "truncated: storage 0 needs 256 bytes, 100 present"));

  /* A storage key without an entry; one key declared with two types. */
  view other = {"7", "FloatStorage", 4, 0, 1, {4}, {1}};
  FC_CHECK(zip_ckpt(&other, 1, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  view twice[2] = {ok, {"0", "HalfStorage", 64, 0, 1, {4}, {1}}};
  FC_CHECK(zip_ckpt(twice, 2, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);

  /* Zero-stride broadcast: fine, and numel may exceed the storage. */
  view bc = {"0", "FloatStorage", 64, 2, 2, {1000, 3}, {0, 1}};
  c = zip_ckpt(&bc, 1, 64 * 4, &err);
  FC_REQUIRE(c);
  FC_CHECK_INT(fc_checkpoint_numel(c, 0), ==, 3000);
  float *g = malloc(3000 * sizeof *g);
  FC_CHECK_INT(fc_checkpoint_read_f32(c, 0, g, 3000), ==, FC_OK);
  FC_CHECK(g[2997] == 2 && g[2998] == 3 && g[2999] == 4);
  free(g);
  fc_checkpoint_destroy(c);

  /* A class that is not a storage, and an unknown storage class. */
  view bad = {"0", "Tensor", 64, 0, 1, {4}, {1}};
  FC_CHECK(zip_ckpt(&bad, 1, 64 * 4, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "pickle global torch.Tensor is not allowed"));
}

/* A legacy stream: the five pickles and the storage records. */
static fc_checkpoint *legacy_ckpt_n(const view *v, int n, const char *keys_pickle, size_t keys_len,
                                    int64_t count, size_t bytes, int *err) {
  static buf b;
  static uint8_t keep[sizeof b.d];
  b.n = 0;
  put(&b, "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e", 15);
  put(&b, "\x80\x02\x4d\xe9\x03\x2e", 6);
  put_s(&b, "\x80\x02}(");
  pk_str(&b, "little_endian");
  put_s(&b, "\x88u.");
  pk_state_dict(&b, v, n, 1);
  put(&b, keys_pickle, keys_len);
  if (count >= 0) put_u64(&b, (uint64_t)count);
  for (int i = 0; i < 64; i++) store[i] = (float)i;
  put(&b, store, bytes);
  memcpy(keep, b.d, b.n);
  fc_error_clear();
  return fc_checkpoint_load_mem(keep, b.n, "legacy", FC_CKPT_AUTO, err);
}

/* keys_pickle is a string literal (it holds NUL bytes). */
#define legacy_ckpt(v, n, keys, count, bytes, err)                                             \
  legacy_ckpt_n(v, n, keys, sizeof keys - 1, count, bytes, err)

static void test_crafted_legacy(void) {
  int err;
  view v = {"140", "FloatStorage", 16, 3, 1, {4}, {2}};
#define keys "\x80\x02]X\x03\x00\x00\x00" "140a."
  fc_checkpoint *c = legacy_ckpt(&v, 1, keys, 16, 64, &err);
  if (!c) fprintf(stderr, "%s\n", fc_error_detail(err));
  FC_REQUIRE(c);
  float f[4];
  FC_CHECK_INT(fc_checkpoint_read_f32(c, 0, f, 4), ==, FC_OK);
  FC_CHECK(f[0] == 3 && f[1] == 5 && f[2] == 7 && f[3] == 9);
  fc_checkpoint_destroy(c);
  /* Count disagrees with the persistent id. */
  FC_CHECK(legacy_ckpt(&v, 1, keys, 15, 60, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  /* Data cut short. */
  FC_CHECK(legacy_ckpt(&v, 1, keys, 16, 40, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "truncated: storage 140"));
  /* Key listed twice, key never used, key missing from the list. */
  FC_CHECK(legacy_ckpt(&v, 1, "\x80\x02](X\x03\x00\x00\x00" "140X\x03\x00\x00\x00" "140e.", 16, 64,
                       &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(legacy_ckpt(&v, 1, "\x80\x02]X\x01\x00\x00\x00" "9a.", 16, 64, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(legacy_ckpt(&v, 1, "\x80\x02]." , -1, 0, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "has no data"));
#undef keys
}

/* Loads raw pickle bytes as a legacy stream's first pickle. */
static int run_pickle(const char *p, size_t n) {
  int err;
  uint8_t *keep;
  fc_checkpoint *c = load_copy((const uint8_t *)p, n, FC_CKPT_LEGACY, &err, &keep);
  fc_checkpoint_destroy(c);
  free(keep);
  return c ? FC_OK : err;
}
#define RUN_PICKLE(lit) run_pickle(lit, sizeof lit - 1)
#define RUN_ZIP_PICKLE(lit) run_zip_pickle(lit, sizeof lit - 1)

/* The same bytes as data.pkl of an archive (the object pickle, persistent ids allowed). */
static int run_zip_pickle(const void *p, size_t n) {
  static buf z;
  zentry e[] = {{"archive/data.pkl", p, n, 0}};
  make_zip(&z, e, 1);
  int err;
  uint8_t *keep;
  fc_checkpoint *c = load_copy(z.d, z.n, FC_CKPT_AUTO, &err, &keep);
  fc_checkpoint_destroy(c);
  free(keep);
  return c ? FC_OK : err;
}

static void test_forbidden_globals_and_opcodes(void) {
  int err = RUN_PICKLE("\x80\x02" "cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85R.");
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "pickle global os.system is not allowed"));
  err = RUN_ZIP_PICKLE("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8c\x02os\x94\x8c\x06system"
                       "\x94\x93.");
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "os.system"));
  err = RUN_PICKLE("\x80\x02" "cbuiltins\neval\n.");
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "builtins.eval"));
  err = RUN_PICKLE("\x80\x02" "ctorch._utils\n_rebuild_qtensor\n.");
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "torch._utils._rebuild_qtensor"));
  err = RUN_PICKLE("\x80\x02" "ctorch._tensor\n_rebuild_from_type_v2\n.");
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "_rebuild_from_type_v2"));
  /* Newlines and control bytes in the name are not echoed raw. */
  err = RUN_PICKLE("\x80\x02" "c\x1b[31m\nx\n.");
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(strchr(fc_error_detail(err), '\x1b') == NULL);

  err = RUN_PICKLE("\x80\x02I1\n.");
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "unsupported pickle opcode 0x49 at byte 2"));
  err = RUN_PICKLE("\x80\x02}(X\x01\x00\x00\x00kX\x01\x00\x00\x00vu0.");
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "opcode 0x30"));
  err = RUN_PICKLE("\x80\x06N."); /* 5 is read (LiveTalking's coords.pkl may use it) */
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "protocol 6"));
  /* A plain pickle that is not torch's. */
  err = RUN_PICKLE("\x80\x02K\x05.");
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "not a PyTorch checkpoint"));
}

static void test_pickle_bombs(void) {
  static char p[1 << 21];
  int err;
  /* Deep MARK nesting. */
  memcpy(p, "\x80\x02", 2);
  memset(p + 2, '(', 5000);
  p[5002] = '.';
  err = run_pickle(p, 5003);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "MARK"));
  /* A stack of more than a million values. */
  memset(p + 2, 'N', sizeof p - 3);
  p[sizeof p - 1] = '.';
  err = run_pickle(p, sizeof p);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "stack deeper"));
  /* Memo: huge index, unset index, stores with an empty stack. */
  FC_CHECK_INT(RUN_PICKLE("\x80\x02Nr\xff\xff\xff\xff."), ==, FC_EFORMAT);
  FC_CHECK_INT(RUN_PICKLE("\x80\x02h\x07."), ==, FC_EFORMAT);
  FC_CHECK_INT(RUN_PICKLE("\x80\x02q\x00."), ==, FC_EFORMAT);
  /* Underflows and type confusion. */
  FC_CHECK_INT(RUN_PICKLE("\x80\x02."), ==, FC_EFORMAT);
  FC_CHECK_INT(RUN_PICKLE("\x80\x02s."), ==, FC_EFORMAT);
  FC_CHECK_INT(RUN_PICKLE("\x80\x02N(NNs."), ==, FC_EFORMAT);   /* SETITEM crossing a MARK */
  FC_CHECK_INT(RUN_PICKLE("\x80\x02](NNNu."), ==, FC_EFORMAT);  /* SETITEMS on a list, odd */
  FC_CHECK_INT(RUN_PICKLE("\x80\x02}Na."), ==, FC_EFORMAT);     /* APPEND to a dict */
  FC_CHECK_INT(RUN_PICKLE("\x80\x02NN\x85R."), ==, FC_EFORMAT); /* calling None */
  FC_CHECK_INT(RUN_PICKLE("\x80\x02t."), ==, FC_EFORMAT);       /* TUPLE without MARK */
  FC_CHECK_INT(RUN_PICKLE("\x80\x02X\xff\xff\xff\x7f"), ==, FC_EFORMAT);
  FC_CHECK_INT(RUN_PICKLE("\x80\x02\x95\xff\xff\xff\xff\xff\xff\xff\xffN."), ==, FC_EFORMAT);
  FC_CHECK_INT(RUN_PICKLE("\x80\x02" "ccollections\nOrderedDict"), ==, FC_EFORMAT);
  FC_CHECK_INT(RUN_PICKLE("\x80\x02N"), ==, FC_EFORMAT); /* no STOP */
  /* A persistent id in the magic-number pickle. */
  FC_CHECK_INT(RUN_PICKLE("\x80\x02NQ."), ==, FC_EFORMAT);
  /* Self-referencing containers are harmless (nothing walks them recursively). */
  FC_CHECK_INT(RUN_ZIP_PICKLE("\x80\x02}q\x00X\n\x00\x00\x00state_dicth\x00s."), ==, FC_OK);
  FC_CHECK_INT(RUN_ZIP_PICKLE("\x80\x02]q\x00h\x00" "a."), ==, FC_EUNSUPPORTED); /* a list */
  /* Empty SETITEMS/APPENDS on containers that have no items yet (found by the fuzzer). */
  FC_CHECK_INT(RUN_ZIP_PICKLE("\x80\x02}(u."), ==, FC_OK);
  FC_CHECK_INT(RUN_PICKLE("(tq\x05s\x09" "92\x92\x00"), ==, FC_EFORMAT); /* empty TUPLE first */
  FC_CHECK_INT(RUN_ZIP_PICKLE("\x80\x02}X\x01\x00\x00\x00k](es."), ==, FC_OK);
  /* 'state_dict' that is not a dict. */
  err = RUN_ZIP_PICKLE("\x80\x02}X\n\x00\x00\x00state_dictK\x01s.");
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "'state_dict' is a int"));
}

static void test_zip_structure(void) {
  size_t n;
  uint8_t *b = fc_test_read_file(CKPT_DIR "/wav2lip_zip.pth", &n);
  FC_REQUIRE(b);
  int err;
  uint8_t *keep;
  /* The first central directory entry marked DEFLATE. */
  uint8_t *cd = NULL;
  for (size_t i = 0; i + 4 <= n; i++)
    if (!memcmp(b + i, "PK\1\2", 4)) {
      cd = b + i;
      break;
    }
  FC_REQUIRE(cd);
  cd[10] = 8;
  fc_checkpoint *c = load_copy(b, n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c == NULL);
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(detail_has(err, "compressed (method 8)"));
  free(keep);
  cd[10] = 0;
  /* An encrypted entry. */
  cd[8] |= 1;
  c = load_copy(b, n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c == NULL && err == FC_EUNSUPPORTED && detail_has(err, "encrypted"));
  free(keep);
  cd[8] &= 0xFE;
  /* data.pkl corrupted in place: the CRC catches it. */
  uint8_t *pk = memmem(b, n, "\x80\x02}", 3);
  FC_REQUIRE(pk);
  pk[2] = ']';
  c = load_copy(b, n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c == NULL && err == FC_EFORMAT && detail_has(err, "CRC"));
  free(keep);
  pk[2] = '}';
  c = load_copy(b, n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c != NULL);
  fc_checkpoint_destroy(c);
  free(keep);
  free(b);

  /* Built archives: compressed entry, no data.pkl, two data.pkl, big-endian byteorder. */
  static buf z;
  const uint8_t pkl[] = "\x80\x02}.";
  zentry comp[] = {{"a/data.pkl", pkl, 4, 8}};
  make_zip(&z, comp, 1);
  c = load_copy(z.d, z.n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c == NULL && err == FC_EUNSUPPORTED);
  free(keep);
  zentry none[] = {{"a/other.pkl", pkl, 4, 0}};
  make_zip(&z, none, 1);
  c = load_copy(z.d, z.n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c == NULL && err == FC_EFORMAT && detail_has(err, "without data.pkl"));
  free(keep);
  zentry two[] = {{"a/data.pkl", pkl, 4, 0}, {"b/data.pkl", pkl, 4, 0}};
  make_zip(&z, two, 2);
  c = load_copy(z.d, z.n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c == NULL && err == FC_EFORMAT);
  free(keep);
  zentry dup[] = {{"a/data.pkl", pkl, 4, 0}, {"a/data.pkl", pkl, 4, 0}};
  make_zip(&z, dup, 2);
  c = load_copy(z.d, z.n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c == NULL && err == FC_EFORMAT && detail_has(err, "twice"));
  free(keep);
  zentry big[] = {{"a/data.pkl", pkl, 4, 0}, {"a/byteorder", (const uint8_t *)"big", 3, 0}};
  make_zip(&z, big, 2);
  c = load_copy(z.d, z.n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c == NULL && err == FC_EUNSUPPORTED);
  free(keep);
  zentry little[] = {{"data.pkl", pkl, 4, 0}, {"byteorder", (const uint8_t *)"little", 6, 0}};
  make_zip(&z, little, 2);
  c = load_copy(z.d, z.n, FC_CKPT_AUTO, &err, &keep);
  FC_CHECK(c != NULL && fc_checkpoint_count(c) == 0); /* an empty dict: no tensors, no error */
  fc_checkpoint_destroy(c);
  free(keep);
}

/* Loads a safetensors file made of this header and data; returns the error code. */
static int st_load(const char *json, const void *data, size_t n, int *err) {
  static buf b;
  b.n = 0;
  put_u64(&b, strlen(json));
  put_s(&b, json);
  put(&b, data, n);
  uint8_t *keep;
  fc_checkpoint *c = load_copy(b.d, b.n, FC_CKPT_AUTO, err, &keep);
  if (c && !read_all(c)) *err = FC_EIO;
  fc_checkpoint_destroy(c);
  free(keep);
  return *err;
}

static void test_safetensors_rules(void) {
  int err;
  int32_t d[6] = {1, 2, 3, 4, 5, 6};
  /* The reference example shape: I32 [2, 2], plus metadata, extra fields, escapes. */
  FC_CHECK(st_load("{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                   "\"__metadata__\":{\"foo\":\"bar\"}}", d, 16, &err) == FC_OK);
  FC_CHECK(st_load("{\"a\\u00e9\\ud83d\\ude00\":{\"shape\":[],\"x\":[{\"y\":null}],\"dtype\":\"F32\","
                   "\"data_offsets\":[0,4]}}   ", d, 4, &err) == FC_OK);
  FC_CHECK(st_load("{}", d, 0, &err) == FC_OK);
  /* Overlap, gap, short buffer, trailing bytes, size mismatch. */
  FC_CHECK(st_load("{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[4,12]}}", d, 12,
                   &err) != FC_OK);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(detail_has(err, "overlap"));
  FC_CHECK(st_load("{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}", d, 8,
                   &err) != FC_OK);
  FC_CHECK(err == FC_EFORMAT && detail_has(err, "gap"));
  FC_CHECK(st_load("{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 4,
                   &err) != FC_OK);
  FC_CHECK(err == FC_EFORMAT && detail_has(err, "truncated"));
  FC_CHECK(st_load("{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", d, 12,
                   &err) != FC_OK);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(st_load("{\"a\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[0,8]}}", d, 8,
                   &err) != FC_OK);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  /* Malformed JSON and values. */
  const char *bad[] = {
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"a\":{\"dtype\":\"I32\",\"shape\":[0],\"data_offsets\":[8,8]}}",   /* duplicate name */
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", /* float offset */
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",  /* negative dim */
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,0]}}",   /* end < begin */
    "{\"a\":{\"dtype\":\"Q32\",\"shape\":[2],\"data_offsets\":[0,8]}}",   /* unknown dtype */
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[2]}}",                          /* no offsets */
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}",    /* unterminated */
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", /* trailing */
    "{\"a\xff\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", /* bad UTF-8 */
    "{\"a\\ud800\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", /* surrogate */
    "{\"__metadata__\":{\"k\":1},\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[4294967296,4294967296,4294967296],"
    "\"data_offsets\":[0,8]}}",                                            /* product overflow */
    "{\"a\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999999]}}",
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    fc_error_clear();
    int ok = st_load(bad[k], d, 8, &err) == FC_EFORMAT && err == FC_EFORMAT && has_detail(err);
    if (!ok) fprintf(stderr, "safetensors case %zu: %d %s\n", k, err, fc_error_detail(err));
    FC_CHECK(ok);
  }
  /* Deeply nested unknown field. */
  static char deep[4096];
  strcpy(deep, "{\"a\":{\"x\":");
  for (int k = 0; k < 1000; k++) strcat(deep, "[");
  FC_CHECK(st_load(deep, d, 0, &err) == FC_EFORMAT);
  /* Unsupported dtypes; header length over the limit. */
  FC_CHECK(st_load("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", d, 2,
                   &err) != FC_OK);
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  uint8_t hdr[16] = {0x00, 0xe2, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100,000,256 */
  uint8_t *keep;
  FC_CHECK(load_copy(hdr, sizeof hdr, FC_CKPT_AUTO, &err, &keep) == NULL);
  FC_CHECK(err == FC_EFORMAT && detail_has(err, "limit"));
  free(keep);
}

static int npy_mem(const char *header, const void *data, size_t n, int version) {
  static buf b;
  b.n = 0;
  put(&b, "\x93NUMPY", 6);
  put_u8(&b, (uint8_t)version);
  put_u8(&b, 0);
  if (version == 1) put_u16(&b, (uint16_t)strlen(header));
  else put_u32(&b, (uint32_t)strlen(header));
  put_s(&b, header);
  put(&b, data, n);
  float *f = NULL;
  int64_t shape[8];
  int nd;
  uint8_t *keep = malloc(b.n);
  memcpy(keep, b.d, b.n);
  fc_error_clear();
  int err = fc_npy_read_mem(keep, b.n, "npy", &f, shape, &nd);
  free(keep);
  free(f);
  return err;
}

static void test_npy_malicious_headers(void) {
  float d[8] = {0};
  FC_CHECK_INT(npy_mem("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", d, 8, 1),
               ==, FC_OK);
  FC_CHECK_INT(npy_mem("{\"shape\": (2L, 1L), \"descr\": \"<f4\", \"fortran_order\": True}", d, 8,
                       2), ==, FC_OK);
  struct { const char *h; int code; size_t n; } cases[] = {
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", FC_EFORMAT, 8},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", FC_EFORMAT, 8},
    {"{'descr': __import__('os').system('x'), 'fortran_order': False, 'shape': (2,), }", FC_EFORMAT, 8},
    {"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", FC_EUNSUPPORTED, 8},
    {"{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", FC_EUNSUPPORTED, 8},
    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", FC_EUNSUPPORTED, 8},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", FC_EFORMAT, 8},
    {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", FC_EFORMAT, 8},
    {"{'descr': '<f4', 'fortran_order': False}", FC_EFORMAT, 8},
    {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", FC_EFORMAT, 8},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", FC_EFORMAT, 8},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", FC_EFORMAT, 8},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", FC_EUNSUPPORTED, 4},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", FC_EFORMAT, 8}, /* short data */
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", FC_EFORMAT, 8}, /* extra data */
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", FC_EFORMAT, 8},
    {"{'descr': '<f4\\', 'fortran_order': False, 'shape': (2,)}", FC_EFORMAT, 8},
    {"{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", FC_EUNSUPPORTED, 8},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': ((((((2,),),),),),)}", FC_EFORMAT, 8},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    int err = npy_mem(cases[k].h, d, cases[k].n, 1);
    if (err != cases[k].code || !has_detail(err))
      fprintf(stderr, "npy case %zu: %d %s\n", k, err, fc_error_detail(err));
    FC_CHECK_INT(err, ==, cases[k].code);
    FC_CHECK(has_detail(err));
  }
  /* Header length beyond the file, unknown version. */
  uint8_t h[] = "\x93NUMPY\x01\x00\xff\xff{}";
  float *f;
  int64_t shape[8];
  int nd;
  FC_CHECK_INT(fc_npy_read_mem(h, sizeof h - 1, "npy", &f, shape, &nd), ==, FC_EFORMAT);
  h[6] = 4;
  FC_CHECK_INT(fc_npy_read_mem(h, sizeof h - 1, "npy", &f, shape, &nd), ==, FC_EUNSUPPORTED);
  h[6] = 2; /* v2 with a 2-byte length field missing */
  FC_CHECK_INT(fc_npy_read_mem(h, 11, "npy", &f, shape, &nd), ==, FC_EFORMAT);
}

int main(void) {
  FC_RUN(test_checkpoints_match_golden);
  FC_RUN(test_npy_match_golden);
  FC_RUN(test_names_and_dtypes);
  FC_RUN(test_missing_and_empty);
  FC_RUN(test_npy_writer_matches_numpy);
  FC_RUN(test_crafted_views);
  FC_RUN(test_crafted_legacy);
  FC_RUN(test_forbidden_globals_and_opcodes);
  FC_RUN(test_pickle_bombs);
  FC_RUN(test_zip_structure);
  FC_RUN(test_safetensors_rules);
  FC_RUN(test_npy_malicious_headers);
  FC_RUN(test_truncated_fixtures);
  FC_RUN(test_flipped_bytes);
  free(goldens);
  free(gvals);
  FC_TEST_EXIT();
}
