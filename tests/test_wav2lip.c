/* Wav2Lip CPU forward pass: parity with the PyTorch reference and load-time validation.
 *
 * Fixtures (tests/data/wav2lip/, from tools/gen_wav2lip_golden.py): a width-16 network (same
 * 51-conv topology as the real one, narrower) in both torch formats, inputs for batch 2, the
 * float64 reference output and sample 0's intermediate activations. Both devices ("cpu" =
 * oneDNN, "cpu-ref" = plain C) must match out.npy within 1e-4 (the float32 PyTorch forward
 * itself is 1.4e-5 off the float64 golden); the measured errors are printed. Then: the layer
 * taps against act_*.npy, the same weights re-saved as safetensors (and broken copies of it:
 * missing / unexpected / mis-shaped tensors, which must fail with FC_EFORMAT and say which),
 * a non-Wav2Lip checkpoint, loading from memory (fc_w2l_load_mem), a file of broadcast views
 * past the weight bound (wide_views.pth, tools/gen_w2l_fuzz_seeds.py), bad arguments, and the
 * CLI end to end (`facecast wav2lip infer`).
 * Then "cuda" (cuDNN) at fp32 (within 1e-3 of out.npy) and fp16 (3e-2), batches 1..128 from
 * tiled fixture samples; skipped (and passing) without a GPU or without CUDA in the build.
 * W2L_FULL_DIR=DIR adds the full-width network on cuda (see test_cuda_full).
 *
 * wav2lip256 (tests/data/wav2lip256/, tools/gen_wav2lip256_golden.py): a width-64 network of
 * the 256×256 variant (55 convs) in both torch formats, {"state_dict": {"module." + key}} as
 * LiveTalking stores it; inputs made here by the generator's formulas. cpu-ref against the
 * PyTorch float64 golden (a uint16 subsample of sample 0's output), "cpu" against cpu-ref on the
 * whole output (both within 1e-4), the taps, the byte path, broken copies (a block-7 tensor
 * missing, a block-7 kernel 3×3 instead of 4×4: FC_EFORMAT naming them), the CLI on 256 faces,
 * and "cuda" fp32 / fp16 against cpu-ref (skipped without a GPU). */
#include "modelfile/checkpoint.h"
#include "facecast/error.h"
#include "modelfile/npy.h"
#include "lipsync/wav2lip/wav2lip.h"
#include "fc_test.h"
#include "lipsync/wav2lip/w2l_internal.h"

#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define W2L_DIR FC_TEST_DATA_DIR "/wav2lip"
#define TOL 1e-4

typedef struct arr {
  float *d;
  int64_t shape[FC_NPY_MAX_DIMS];
  int ndim;
  size_t n;
} arr;

static int load_arr(const char *path, arr *a) {
  memset(a, 0, sizeof *a);
  int err = fc_npy_read_f32(path, &a->d, a->shape, &a->ndim);
  if (err) return err;
  a->n = 1;
  for (int i = 0; i < a->ndim; i++) a->n *= (size_t)a->shape[i];
  return 0;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= m)) m = d; /* NaN propagates as a failure */
  }
  return m;
}

static arr g_mel, g_faces, g_out;

static int load_inputs(void) {
  if (g_mel.d) return 0;
  if (load_arr(W2L_DIR "/mel.npy", &g_mel) || load_arr(W2L_DIR "/faces.npy", &g_faces) ||
      load_arr(W2L_DIR "/out.npy", &g_out))
    return -1;
  return 0;
}

/* Runs batch samples from the fixture inputs starting at sample `first`; returns the max error
 * against out.npy, or -1 on a failure. */
static double run_parity(fc_w2l *m, int first, int batch) {
  size_t per_out = 3 * 96 * 96;
  float *out = calloc((size_t)batch * per_out, sizeof(float));
  int err = fc_w2l_infer(m, g_mel.d + (size_t)first * 80 * 16, g_faces.d + (size_t)first * 6 * 96 * 96,
                         out, batch);
  double e = err ? -1 : max_abs_diff(out, g_out.d + (size_t)first * per_out, (size_t)batch * per_out);
  if (err) fprintf(stderr, "  infer: %s\n", fc_error_detail(err));
  free(out);
  return e;
}

static void parity_case(const char *ckpt, const char *device) {
  FC_REQUIRE(load_inputs() == 0);
  FC_REQUIRE(g_mel.shape[0] == 2 && g_faces.shape[0] == 2 && g_out.shape[0] == 2);
  fc_w2l_params p = {.device = device, .max_batch = 4};
  int err = -1;
  fc_w2l *m = fc_w2l_load(ckpt, &p, &err);
  if (!m) fprintf(stderr, "  load %s: %s\n", ckpt, fc_error_detail(err));
  FC_REQUIRE(m && err == FC_OK);
  double e2 = run_parity(m, 0, 2), e1 = run_parity(m, 0, 1), e1b = run_parity(m, 1, 1);
  double e2again = run_parity(m, 0, 2); /* the cached batch-2 plan, run a second time */
  fprintf(stderr, "  %-8s %-12s max|out - out.npy|: batch 2 %.3g, batch 1 (s0) %.3g, (s1) %.3g\n",
          device, strrchr(ckpt, '/') + 1, e2, e1, e1b);
  FC_CHECK(e2 >= 0 && e2 <= TOL);
  FC_CHECK(e1 >= 0 && e1 <= TOL);
  FC_CHECK(e1b >= 0 && e1b <= TOL);
  FC_CHECK(e2again >= 0 && e2again <= TOL);
  fc_w2l_destroy(m);
}

static void test_parity_legacy_cpu(void) { parity_case(W2L_DIR "/ckpt_legacy.pth", "cpu"); }
static void test_parity_zip_cpu(void) { parity_case(W2L_DIR "/ckpt_zip.pth", "cpu"); }
static void test_parity_legacy_ref(void) { parity_case(W2L_DIR "/ckpt_legacy.pth", "cpu-ref"); }
static void test_parity_zip_ref(void) { parity_case(W2L_DIR "/ckpt_zip.pth", "cpu-ref"); }

/* ---- intermediate activations ---- */

typedef struct tap_ctx {
  int compared, failed;
  double worst;
  const char *dir; /* the goldens' directory; NULL: the 96 fixture's */
} tap_ctx;

static void on_tap(const char *name, const float *nhwc, int n, int h, int w, int c, void *user) {
  tap_ctx *t = user;
  char path[256];
  snprintf(path, sizeof path, "%s/act_%s.npy", t->dir ? t->dir : W2L_DIR, name);
  struct stat sb;
  if (stat(path, &sb) != 0) return; /* not every tap has a golden */
  arr a;
  if (load_arr(path, &a) || a.ndim != 4 || a.shape[1] != c || a.shape[2] != h || a.shape[3] != w) {
    fprintf(stderr, "  tap %s: golden missing or of another shape\n", name);
    t->failed++;
    free(a.d);
    return;
  }
  /* sample 0, NHWC here vs NCHW in the golden; the tolerance scales with the tensor's range */
  double err = 0, scale = 1;
  for (size_t i = 0; i < a.n; i++) scale = fmax(scale, fabs(a.d[i]));
  for (int ch = 0; ch < c; ch++)
    for (int p = 0; p < h * w; p++) {
      double d = fabs((double)nhwc[(size_t)p * c + ch] - a.d[(size_t)ch * h * w + p]);
      if (!(d <= err)) err = d;
    }
  t->compared++;
  if (!(err <= TOL * scale)) {
    fprintf(stderr, "  tap %s: max error %.3g (scale %.3g)\n", name, err, scale);
    t->failed++;
  }
  if (!(err / scale <= t->worst)) t->worst = err / scale;
  (void)n;
  free(a.d);
}

static void taps_case(const char *device) {
  FC_REQUIRE(load_inputs() == 0);
  fc_w2l_params p = {.device = device, .max_batch = 2};
  int err;
  fc_w2l *m = fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err);
  FC_REQUIRE(m);
  float *out = calloc(2 * 3 * 96 * 96, sizeof(float));
  tap_ctx t = {0};
  FC_CHECK_INT(fc_w2l_infer_tap(m, g_mel.d, g_faces.d, out, 2, on_tap, &t), ==, FC_OK);
  fprintf(stderr, "  %-8s %d taps compared, worst relative error %.3g\n", device, t.compared,
          t.worst);
  FC_CHECK_INT(t.compared, ==, 13); /* audio_emb, face_f0..6, dec0..3_out, logits */
  FC_CHECK_INT(t.failed, ==, 0);
  FC_CHECK_INT(fc_w2l_macs_per_frame(m), ==, 42052992 / 2); /* README: 42,052,992 FLOP/frame */
  free(out);
  fc_w2l_destroy(m);
}

static void test_taps_cpu(void) { taps_case("cpu"); }
static void test_taps_ref(void) { taps_case("cpu-ref"); }

/* ---- checkpoints re-saved as safetensors, intact and broken ---- */

enum { ST_INTACT, ST_DROP, ST_EXTRA, ST_BADSHAPE, ST_BADKERNEL, ST_DROP7, ST_BADK7 };

/* Writes the tensors of checkpoint src as a float32 safetensors file, altered per mode (the
 * *7 modes: the 256 model's block 7 loses a tensor / gets a 3x3 kernel instead of 4x4). */
static int write_safetensors_from(const char *src, const char *path, int mode) {
  int err;
  fc_checkpoint *ck = fc_checkpoint_load(src, &err);
  if (!ck) return err;
  int n = fc_checkpoint_count(ck);
  size_t hcap = 1 << 16, hlen = 0, off = 0, dcap = 0;
  char *hdr = malloc(hcap);
  float *data = NULL;
  for (int pass = 0; pass < 2; pass++) { /* 1: sizes, 2: data */
    if (pass == 1) data = calloc(dcap + 16, sizeof(float));
    hlen = 0, off = 0;
    hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "{");
    for (int i = 0; i < n; i++) {
      const fc_tensor_info *ti = fc_checkpoint_info(ck, i);
      if (mode == ST_DROP && strcmp(ti->name, "face_decoder_blocks.3.1.conv_block.1.running_var") == 0)
        continue;
      if (mode == ST_DROP7 && strcmp(ti->name, "face_encoder_blocks.7.1.conv_block.0.bias") == 0)
        continue;
      int64_t shape[FC_TENSOR_MAX_DIMS];
      int nd = ti->ndim;
      memcpy(shape, ti->shape, sizeof shape);
      size_t numel = (size_t)fc_checkpoint_numel(ck, i), stored = numel;
      if (mode == ST_BADSHAPE && strcmp(ti->name, "audio_encoder.4.conv_block.0.bias") == 0)
        shape[0]++, stored++;
      if (mode == ST_BADKERNEL && strcmp(ti->name, "face_encoder_blocks.0.0.conv_block.0.weight") == 0)
        shape[2] = shape[3] = 5, stored = (size_t)(shape[0] * shape[1] * 25);
      if (mode == ST_BADK7 && strcmp(ti->name, "face_encoder_blocks.7.0.conv_block.0.weight") == 0)
        shape[2] = shape[3] = 3, stored = (size_t)(shape[0] * shape[1] * 9);
      if (pass == 1 && numel && stored == numel)
        fc_checkpoint_read_f32(ck, i, data + off, numel);
      hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[",
                               hlen > 1 ? "," : "", ti->name);
      for (int d = 0; d < nd; d++)
        hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, d ? ",%lld" : "%lld", (long long)shape[d]);
      hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "],\"data_offsets\":[%zu,%zu]}", off * 4,
                               (off + stored) * 4);
      off += stored;
    }
    if (mode == ST_EXTRA) {
      hlen += (size_t)snprintf(hdr + hlen, hcap - hlen,
                               ",\"face_encoder_blocks.7.0.conv_block.0.bias\":{\"dtype\":\"F32\","
                               "\"shape\":[4],\"data_offsets\":[%zu,%zu]}",
                               off * 4, (off + 4) * 4);
      off += 4;
    }
    hlen += (size_t)snprintf(hdr + hlen, hcap - hlen, "}");
    dcap = off;
  }
  FILE *f = fopen(path, "wb");
  uint64_t hl = hlen;
  int ok = f && fwrite(&hl, 8, 1, f) == 1 && fwrite(hdr, 1, hlen, f) == hlen &&
           fwrite(data, 4, off, f) == off;
  if (f) ok &= fclose(f) == 0;
  free(hdr);
  free(data);
  fc_checkpoint_destroy(ck);
  return ok ? 0 : FC_EIO;
}

static int write_safetensors(const char *path, int mode) {
  return write_safetensors_from(W2L_DIR "/ckpt_zip.pth", path, mode);
}

static char g_tmp[256];

static const char *tmpdir(void) {
  if (!g_tmp[0]) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fc_test_w2l_XXXXXX");
    if (!mkdtemp(g_tmp)) g_tmp[0] = 0;
  }
  return g_tmp;
}

static void test_safetensors(void) {
  FC_REQUIRE(load_inputs() == 0 && tmpdir()[0]);
  char path[512];
  snprintf(path, sizeof path, "%s/w2l.safetensors", tmpdir());
  FC_REQUIRE(write_safetensors(path, ST_INTACT) == 0);
  int err;
  fc_w2l_params p = {.device = "cpu", .max_batch = 2};
  fc_w2l *m = fc_w2l_load(path, &p, &err);
  if (!m) fprintf(stderr, "  %s\n", fc_error_detail(err));
  FC_REQUIRE(m);
  double e = run_parity(m, 0, 2);
  fprintf(stderr, "  safetensors copy: max error %.3g\n", e);
  FC_CHECK(e >= 0 && e <= TOL);
  fc_w2l_destroy(m);

  static const struct { int mode; const char *want; } bad[] = {
      {ST_DROP, "missing face_decoder_blocks.3.1.conv_block.1.running_var"},
      {ST_EXTRA, "unexpected face_encoder_blocks.7.0.conv_block.0.bias"},
      {ST_BADSHAPE, "shape mismatch: audio_encoder.4.conv_block.0.bias is ["},
      {ST_BADKERNEL, "shape mismatch: face_encoder_blocks.0.0.conv_block.0.weight is [2,6,5,5], "
                     "expected [2,6,7,7]"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    FC_REQUIRE(write_safetensors(path, bad[i].mode) == 0);
    err = 0;
    m = fc_w2l_load(path, &p, &err);
    FC_CHECK(m == NULL);
    FC_CHECK_INT(err, ==, FC_EFORMAT);
    const char *d = fc_error_detail(err);
    fprintf(stderr, "  broken copy %d: %s\n", bad[i].mode, d);
    FC_CHECK(strstr(d, bad[i].want) != NULL);
    FC_CHECK(strchr(d, '\n') == NULL);
    fc_w2l_destroy(m);
  }
  unlink(path);
}

/* ---- wrong checkpoints and arguments ---- */

static void test_not_wav2lip(void) {
  static const char *files[] = {FC_TEST_DATA_DIR "/ckpt/wav2lip_zip.pth",
                                FC_TEST_DATA_DIR "/ckpt/tensors.safetensors",
                                FC_TEST_DATA_DIR "/ckpt/flat_sd.pth"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    int err = 0;
    fc_w2l *m = fc_w2l_load(files[i], NULL, &err);
    FC_CHECK(m == NULL);
    FC_CHECK_INT(err, ==, FC_EFORMAT);
    const char *d = fc_error_detail(err);
    fprintf(stderr, "  %s\n", d);
    FC_CHECK(strstr(d, "does not look like Wav2Lip: missing "
                       "face_encoder_blocks.0.0.conv_block.0.weight (and ") != NULL);
    FC_CHECK(strstr(d, "unexpected") != NULL);
  }
  int err = 0;
  FC_CHECK(fc_w2l_load(W2L_DIR "/no_such.pth", NULL, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_ENOTFOUND);
  FC_CHECK(fc_w2l_load(W2L_DIR "/mel.npy", NULL, &err) == NULL); /* not a checkpoint at all */
  FC_CHECK(err == FC_EFORMAT || err == FC_EUNSUPPORTED);
}

/* The bytes of a file (free them), or NULL. */
static void *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  void *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) &&
        fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    }
    *len = n > 0 ? (size_t)n : 0;
  }
  fclose(f);
  return buf;
}

/* fc_w2l_load_mem (the fuzz target's way in) loads what fc_w2l_load loads, with the same
 * output, and names the buffer in its errors. */
static void test_load_mem(void) {
  FC_REQUIRE(load_inputs() == 0);
  size_t n = 0;
  unsigned char *buf = slurp(W2L_DIR "/ckpt_zip.pth", &n);
  FC_REQUIRE(buf);
  int err;
  fc_w2l_params p = {.device = "cpu-ref", .max_batch = 1};
  fc_w2l *m = fc_w2l_load_mem(buf, n, "in-memory.pth", &p, &err);
  FC_REQUIRE(m);
  FC_CHECK_INT(fc_w2l_face_size(m), ==, FC_W2L_FACE);
  double e = run_parity(m, 0, 1);
  fprintf(stderr, "  from memory: max error %.3g\n", e);
  FC_CHECK(e >= 0 && e <= TOL);
  fc_w2l_destroy(m);
  m = fc_w2l_load_mem(buf, n / 2, "in-memory.pth", &p, &err); /* cut short */
  FC_CHECK(m == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK(strstr(fc_error_detail(err), "in-memory.pth") != NULL);
  FC_CHECK(fc_w2l_load_mem(NULL, 10, "x", &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  free(buf);
}

/* Regression (found reviewing the sanity bounds for the w2l fuzz target): a torch file's
 * tensors may be broadcast views (stride 0) of a one-element storage. wide_views.pth is 59 KB
 * in that way, the 96 network at twice the real width: 145 M conv weights, under the old bound
 * of 2^28, so it loaded, holding 1.2 GB (the folded weights and cpu-ref's copy) and taking 16 s
 * under ASan. Now refused by the weight bound (2^27), and before any weight is read. */
static void test_wide_views(void) {
  int err = 0;
  fc_w2l_params p = {.device = "cpu-ref", .max_batch = 1};
  fc_w2l *m = fc_w2l_load(W2L_DIR "/wide_views.pth", &p, &err);
  FC_CHECK(m == NULL);
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  const char *d = fc_error_detail(err);
  fprintf(stderr, "  %s\n", d);
  FC_CHECK(strstr(d, "wide_views.pth: implausibly large Wav2Lip (145045440 weights)") != NULL);
  fc_w2l_destroy(m);
}

static void test_bad_args(void) {
  FC_REQUIRE(load_inputs() == 0);
  int err = 0;
  fc_w2l_params p = {.device = "tpu"};
  FC_CHECK(fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p.device = "cuda:999"; /* no build and no machine has it */
  FC_CHECK(fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  p.device = "cuda:x";
  FC_CHECK(fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p.device = "cpu";
  p.dtype = FC_W2L_FP16; /* 16-bit types are cuda only */
  FC_CHECK(fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  p.dtype = FC_W2L_BF16;
  FC_CHECK(fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  p.dtype = 7;
  FC_CHECK(fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p.dtype = FC_W2L_FP32;
  p.max_batch = -3;
  FC_CHECK(fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);

  p.max_batch = 1;
  p.threads = 1;
  fc_w2l *m = fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err);
  FC_REQUIRE(m);
  float *out = calloc(2 * 3 * 96 * 96, sizeof(float));
  FC_CHECK_INT(fc_w2l_infer(m, g_mel.d, g_faces.d, out, 2), ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(FC_EINVAL), "max_batch") != NULL);
  FC_CHECK_INT(fc_w2l_infer(m, g_mel.d, g_faces.d, out, 0), ==, FC_EINVAL);
  FC_CHECK_INT(fc_w2l_infer(m, NULL, g_faces.d, out, 1), ==, FC_EINVAL);
  FC_CHECK_INT(fc_w2l_infer(NULL, g_mel.d, g_faces.d, out, 1), ==, FC_EINVAL);
  /* still fine afterwards, with one thread */
  double e = run_parity(m, 1, 1);
  FC_CHECK(e >= 0 && e <= TOL);
  free(out);
  fc_w2l_destroy(m);
  fc_w2l_destroy(NULL);
}

/* ---- the CLI ---- */

static int run_cli(const char *args) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s wav2lip %s 2>>%s/cli.log", FC_BINARY, args, tmpdir());
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_cli(void) {
  FC_REQUIRE(load_inputs() == 0 && tmpdir()[0]);
  char args[1024], outp[512];
  snprintf(outp, sizeof outp, "%s/out.npy", tmpdir());
  static const char *devices[] = {"cpu", "cpu-ref"};
  for (int d = 0; d < 2; d++) {
    /* --max-batch 1 makes it run the two samples in two chunks */
    snprintf(args, sizeof args,
             "infer --checkpoint " W2L_DIR "/ckpt_legacy.pth --mel " W2L_DIR "/mel.npy --faces " W2L_DIR
             "/faces.npy --out %s --device %s --dtype fp32%s",
             outp, devices[d], d ? " --max-batch 1" : "");
    FC_CHECK_INT(run_cli(args), ==, 0);
    arr o;
    FC_REQUIRE(load_arr(outp, &o) == 0);
    FC_CHECK_INT(o.ndim, ==, 4);
    FC_CHECK(o.n == g_out.n && memcmp(o.shape, g_out.shape, sizeof o.shape) == 0);
    double e = o.n == g_out.n ? max_abs_diff(o.d, g_out.d, o.n) : 1;
    fprintf(stderr, "  cli --device %s: max error %.3g\n", devices[d], e);
    FC_CHECK(e <= TOL);
    free(o.d);
    unlink(outp);
  }

  /* bad inputs: exit code 2, one line, no output file */
  static const char *bad[] = {
      "infer --checkpoint " W2L_DIR "/ckpt_zip.pth --mel " W2L_DIR "/faces.npy --faces " W2L_DIR
      "/faces.npy --out %s", /* mel of the wrong shape */
      "infer --checkpoint " W2L_DIR "/ckpt_zip.pth --mel " W2L_DIR "/mel.npy --faces " W2L_DIR
      "/out.npy --out %s", /* faces of the wrong shape */
      "infer --checkpoint " W2L_DIR "/nope.pth --mel " W2L_DIR "/mel.npy --faces " W2L_DIR
      "/faces.npy --out %s",
      "infer --checkpoint " W2L_DIR "/ckpt_zip.pth --mel " W2L_DIR "/nope.npy --faces " W2L_DIR
      "/faces.npy --out %s",
      "infer --checkpoint " W2L_DIR "/ckpt_zip.pth --mel " W2L_DIR "/ckpt_zip.pth --faces " W2L_DIR
      "/faces.npy --out %s", /* not an npy */
      "infer --checkpoint " W2L_DIR "/mel.npy --mel " W2L_DIR "/mel.npy --faces " W2L_DIR
      "/faces.npy --out %s", /* not a checkpoint */
      "infer --checkpoint " W2L_DIR "/ckpt_zip.pth --mel " W2L_DIR "/mel.npy --faces " W2L_DIR
      "/faces.npy --out %s --dtype fp16",
      "infer --checkpoint " W2L_DIR "/ckpt_zip.pth --mel " W2L_DIR "/mel.npy --faces " W2L_DIR
      "/faces.npy --out %s --device cuda:999",
      "infer --checkpoint " W2L_DIR "/ckpt_zip.pth --mel " W2L_DIR "/mel.npy --faces " W2L_DIR
      "/faces.npy --out %s --device gpu",
      "infer --mel " W2L_DIR "/mel.npy --faces " W2L_DIR "/faces.npy --out %s", /* no checkpoint */
      "frobnicate --out %s",
  };
  char logp[512];
  snprintf(logp, sizeof logp, "%s/cli.log", tmpdir());
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    unlink(logp);
    snprintf(args, sizeof args, bad[i], outp);
    int rc = run_cli(args);
    if (rc != 2) fprintf(stderr, "  exit %d for: %s\n", rc, args);
    FC_CHECK_INT(rc, ==, 2);
    FC_CHECK(access(outp, F_OK) != 0);
    FILE *f = fopen(logp, "r");
    char line[1024] = "";
    int lines = 0;
    while (f && fgets(line, sizeof line, f)) lines++;
    if (f) fclose(f);
    if (i < 9) FC_CHECK_INT(lines, ==, 1); /* usage errors may print the usage too */
    if (i == 6) FC_CHECK(strstr(line, "not supported on the CPU") != NULL);
    if (i == 0 || i == 6) fprintf(stderr, "  cli: %s", line);
  }
}

/* ---- the byte path (fc_w2l_infer_u8) and the resident run ---- */

/* RGB bytes from the reference half (channels 3..5, BGR) of NCHW float faces. */
static void crops_from_faces(const float *faces, unsigned char *crops, int n) {
  const int P = 96 * 96;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < P; i++)
      for (int c = 0; c < 3; c++) {
        float v = faces[((size_t)k * 6 + 3 + (2 - c)) * P + i] * 255.0f + 0.5f;
        crops[((size_t)k * P + i) * 3 + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
}

/* What fc_w2l_infer_u8 must feed the network: BGR/255, masked copy with the lower half zero. */
static void faces_from_crops(const unsigned char *crops, float *faces, int n) {
  const int P = 96 * 96;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < P; i++)
      for (int c = 0; c < 3; c++) {
        float v = crops[((size_t)k * P + i) * 3 + (2 - c)] / 255.0f;
        faces[((size_t)k * 6 + 3 + c) * P + i] = v;
        faces[((size_t)k * 6 + c) * P + i] = i / 96 < 48 ? v : 0.0f;
      }
}

/* Largest |o8 - round(255 · out)| with out NCHW BGR floats and o8 RGB bytes, side × side. */
static int max_byte_diff_n(const unsigned char *o8, const float *out, int n, int side) {
  const int P = side * side;
  int worst = 0;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < P; i++)
      for (int c = 0; c < 3; c++) {
        int want = (int)lrintf(out[((size_t)k * 3 + (2 - c)) * P + i] * 255.0f);
        int d = abs((int)o8[((size_t)k * P + i) * 3 + c] - want);
        worst = d > worst ? d : worst;
      }
  return worst;
}

static int max_byte_diff(const unsigned char *o8, const float *out, int n) {
  return max_byte_diff_n(o8, out, n, 96);
}

static void test_u8_cpu(void) {
  FC_REQUIRE(load_inputs() == 0);
  int n = (int)g_faces.shape[0], err = 0;
  fc_w2l_params p = {.device = "cpu", .max_batch = n, .threads = 2};
  fc_w2l *m = fc_w2l_load(W2L_DIR "/ckpt_zip.pth", &p, &err);
  FC_REQUIRE(m);
  const size_t per = 3 * 96 * 96;
  unsigned char *crops = malloc(n * per), *o8 = malloc(n * per), *o8b = malloc(n * per);
  float *faces = malloc((size_t)n * 6 * 96 * 96 * sizeof(float)), *out = malloc(n * per * sizeof(float));
  FC_REQUIRE(crops && o8 && o8b && faces && out);
  FC_CHECK_INT(fc_w2l_run_resident(m, 1), ==, FC_EINVAL);
  crops_from_faces(g_faces.d, crops, n);
  faces_from_crops(crops, faces, n);
  FC_CHECK_INT(fc_w2l_infer_u8(m, g_mel.d, crops, o8, n), ==, FC_OK);
  FC_CHECK_INT(fc_w2l_infer(m, g_mel.d, faces, out, n), ==, FC_OK);
  int d = max_byte_diff(o8, out, n);
  fprintf(stderr, "  cpu bytes vs floats: max diff %d\n", d);
  FC_CHECK_INT(d, <=, 1);
  /* a changed crop changes the output: the bytes really are the input */
  for (size_t i = 0; i < per; i++) crops[i] = (unsigned char)(255 - crops[i]);
  FC_CHECK_INT(fc_w2l_infer_u8(m, g_mel.d, crops, o8b, n), ==, FC_OK);
  FC_CHECK(memcmp(o8, o8b, per) != 0);
  FC_CHECK_INT(fc_w2l_infer_u8(m, g_mel.d, NULL, o8b, n), ==, FC_EINVAL);
  FC_CHECK_INT(fc_w2l_run_resident(m, n), ==, FC_OK);
  FC_CHECK_INT(fc_w2l_run_resident(m, n + 1), ==, FC_EINVAL);
  FC_CHECK(fc_w2l_device_bytes(m) == 0);
  size_t fr, tot;
  FC_CHECK_INT(fc_w2l_device_memory(m, &fr, &tot), ==, FC_EUNSUPPORTED);
  free(crops), free(o8), free(o8b), free(faces), free(out);
  fc_w2l_destroy(m);
}

/* ---- wav2lip256: the 256x256 variant ---- */

/* The width-64 v2 fixture (tools/gen_wav2lip256_golden.py): its inputs are not stored but made
 * by the formulas below (the generator's fixture_crops / fixture_mel, repeated exactly); the
 * golden is sample 0's output on the odd rows and columns as uint16 (out * 65535). */
#define W256_DIR FC_TEST_DATA_DIR "/wav2lip256"
#define S256 256
#define P256 (S256 * S256)
#define N256 2

static unsigned char *g_crops256; /* [N256][256][256][3] RGB */
static float *g_mel256, *g_faces256, *g_ref256; /* g_ref256: cpu-ref's output, both samples */

static void fixture_crops256(unsigned char *crops, int batch) {
  for (int n = 0; n < batch; n++)
    for (int y = 0; y < S256; y++)
      for (int x = 0; x < S256; x++)
        for (int c = 0; c < 3; c++) {
          uint32_t h = (uint32_t)(x * 73 + y * 151 + c * 199 + n * 37) * 2654435761u;
          crops[(((size_t)n * S256 + y) * S256 + x) * 3 + c] =
              (unsigned char)((x / 2 + y / 3 + 70 * c + 23 * n + (int)(h >> 28)) & 255);
        }
}

/* The network input from RGB crops, as fc_w2l_infer_u8 builds it and LiveTalking feeds it. */
static void faces_from_crops_n(const unsigned char *crops, float *faces, int n, int side) {
  const int P = side * side;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < P; i++)
      for (int c = 0; c < 3; c++) {
        float v = crops[((size_t)k * P + i) * 3 + (2 - c)] / 255.0f;
        faces[((size_t)k * 6 + 3 + c) * P + i] = v;
        faces[((size_t)k * 6 + c) * P + i] = i / side < side / 2 ? v : 0.0f;
      }
}

static int load_inputs256(void) {
  if (g_faces256) return 0;
  arr mel;
  if (load_arr(W256_DIR "/mel.npy", &mel) || mel.n != (size_t)N256 * 80 * 16) return -1;
  /* the generator's formula, checked against the stored copy */
  for (int n = 0; n < N256; n++)
    for (int y = 0; y < 80; y++)
      for (int x = 0; x < 16; x++) {
        float v = (float)((y * y + 3 * x * y + 5 * x + 11 * n) % 65) / 8.0f - 4.0f;
        if (mel.d[((size_t)n * 80 + y) * 16 + x] != v) {
          fprintf(stderr, "  mel.npy differs from the formula at %d,%d,%d\n", n, y, x);
          free(mel.d);
          return -1;
        }
      }
  g_mel256 = mel.d;
  g_crops256 = malloc((size_t)N256 * P256 * 3);
  g_faces256 = malloc((size_t)N256 * 6 * P256 * sizeof(float));
  if (!g_crops256 || !g_faces256) return -1;
  fixture_crops256(g_crops256, N256);
  faces_from_crops_n(g_crops256, g_faces256, N256, S256);
  return 0;
}

/* Max |out sample 0 - golden| on the odd rows and columns; -1 if the golden is unreadable. */
static double golden256_err(const float *out) {
  arr g;
  if (load_arr(W256_DIR "/out_sub.npy", &g) || g.ndim != 4 || g.shape[1] != 3 ||
      g.shape[2] != S256 / 2 || g.shape[3] != S256 / 2) {
    free(g.d);
    return -1;
  }
  double e = 0;
  for (int c = 0; c < 3; c++)
    for (int y = 0; y < S256 / 2; y++)
      for (int x = 0; x < S256 / 2; x++) {
        double want = g.d[((size_t)c * (S256 / 2) + y) * (S256 / 2) + x] / 65535.0;
        double d = fabs(out[(size_t)c * P256 + (size_t)(2 * y + 1) * S256 + 2 * x + 1] - want);
        if (!(d <= e)) e = d;
      }
  free(g.d);
  return e;
}

static fc_w2l *load256(const char *ckpt, const char *device, int max_batch) {
  fc_w2l_params p = {.device = device, .max_batch = max_batch};
  int err = -1;
  fc_w2l *m = fc_w2l_load(ckpt, &p, &err);
  if (!m) fprintf(stderr, "  load %s on %s: %s\n", ckpt, device, fc_error_detail(err));
  return m;
}

/* cpu-ref against the PyTorch float64 golden (the quantised subsample: 7.7e-6 of rounding), and
 * batch 1 against batch 2; the full output is kept for the other devices. */
static void test_v256_ref(void) {
  FC_REQUIRE(load_inputs256() == 0);
  fc_w2l *m = load256(W256_DIR "/ckpt_legacy.pth", "cpu-ref", N256);
  FC_REQUIRE(m);
  FC_CHECK_INT(fc_w2l_face_size(m), ==, 256);
  const size_t per = (size_t)3 * P256;
  g_ref256 = malloc(N256 * per * sizeof(float));
  float *one = malloc(per * sizeof(float));
  FC_REQUIRE(g_ref256 && one);
  FC_REQUIRE(fc_w2l_infer(m, g_mel256, g_faces256, g_ref256, N256) == FC_OK);
  double e = golden256_err(g_ref256);
  FC_REQUIRE(fc_w2l_infer(m, g_mel256 + 80 * 16, g_faces256 + (size_t)6 * P256, one, 1) == FC_OK);
  double e1 = max_abs_diff(one, g_ref256 + per, per);
  fprintf(stderr, "  cpu-ref 256: max|out - golden| %.3g, batch 1 vs batch 2 (sample 1) %.3g\n", e, e1);
  FC_CHECK(e >= 0 && e <= TOL);
  FC_CHECK(e1 <= 1e-6);
  /* the two samples differ (the inputs reach the output) */
  FC_CHECK(max_abs_diff(g_ref256, g_ref256 + per, per) > 0.05);
  free(one);
  fc_w2l_destroy(m);
}

/* "cpu" (oneDNN) against cpu-ref on the whole output, and against the golden; both torch
 * formats, each {"state_dict": {"module." + key}} as LiveTalking's file. */
static void v256_cpu_case(const char *ckpt) {
  FC_REQUIRE(load_inputs256() == 0 && g_ref256);
  fc_w2l *m = load256(ckpt, "cpu", N256);
  FC_REQUIRE(m);
  FC_CHECK_INT(fc_w2l_face_size(m), ==, 256);
  const size_t per = (size_t)3 * P256;
  float *out = malloc(N256 * per * sizeof(float));
  FC_REQUIRE(out);
  double worst = 0, eg = 1;
  for (int call = 0; call < 2; call++) { /* a fresh plan, then the kept one */
    memset(out, 0xff, N256 * per * sizeof(float));
    FC_REQUIRE(fc_w2l_infer(m, g_mel256, g_faces256, out, N256) == FC_OK);
    double e = max_abs_diff(out, g_ref256, N256 * per);
    worst = e > worst ? e : worst;
    eg = golden256_err(out);
  }
  FC_REQUIRE(fc_w2l_infer(m, g_mel256, g_faces256, out, 1) == FC_OK); /* batch 1 */
  double e1 = max_abs_diff(out, g_ref256, per);
  fprintf(stderr, "  cpu 256 %s: max|cpu - cpu-ref| %.3g (batch 1: %.3g), vs golden %.3g\n",
          strrchr(ckpt, '/') + 1, worst, e1, eg);
  FC_CHECK(worst <= TOL);
  FC_CHECK(e1 <= TOL);
  FC_CHECK(eg >= 0 && eg <= TOL);
  free(out);
  fc_w2l_destroy(m);
}

static void test_v256_cpu_zip(void) { v256_cpu_case(W256_DIR "/ckpt_zip.pth"); }
static void test_v256_cpu_legacy(void) { v256_cpu_case(W256_DIR "/ckpt_legacy.pth"); }

/* The layer taps against act_*.npy of the v2 fixture. */
static void test_v256_taps(void) {
  FC_REQUIRE(load_inputs256() == 0);
  fc_w2l *m = load256(W256_DIR "/ckpt_zip.pth", "cpu", 1);
  FC_REQUIRE(m);
  float *out = malloc((size_t)3 * P256 * sizeof(float));
  tap_ctx t = {.dir = W256_DIR};
  FC_CHECK_INT(fc_w2l_infer_tap(m, g_mel256, g_faces256, out, 1, on_tap, &t), ==, FC_OK);
  fprintf(stderr, "  cpu 256: %d taps compared, worst relative error %.3g\n", t.compared, t.worst);
  FC_CHECK_INT(t.compared, ==, 9); /* audio_emb, face_f4..7, dec0..3_out */
  FC_CHECK_INT(t.failed, ==, 0);
  FC_CHECK_INT(fc_w2l_macs_per_frame(m), ==, 56713344); /* meta.json macs_per_frame */
  free(out);
  fc_w2l_destroy(m);
}

/* The byte path at 256: crops in, bytes out, against the float path on the same input. */
static void test_v256_u8(void) {
  FC_REQUIRE(load_inputs256() == 0 && g_ref256);
  fc_w2l *m = load256(W256_DIR "/ckpt_zip.pth", "cpu", N256);
  FC_REQUIRE(m);
  const size_t per = (size_t)3 * P256;
  unsigned char *o8 = malloc(N256 * per);
  FC_REQUIRE(o8);
  FC_CHECK_INT(fc_w2l_infer_u8(m, g_mel256, g_crops256, o8, N256), ==, FC_OK);
  int d = max_byte_diff_n(o8, g_ref256, N256, S256);
  fprintf(stderr, "  cpu 256 bytes vs cpu-ref floats: max diff %d\n", d);
  FC_CHECK_INT(d, <=, 1);
  free(o8);
  fc_w2l_destroy(m);
}

/* Broken v2 files: still detected as the 256 model, and the detail says what is wrong. */
static void test_v256_broken(void) {
  FC_REQUIRE(tmpdir()[0]);
  char path[512];
  snprintf(path, sizeof path, "%s/w2l256.safetensors", tmpdir());
  static const struct { int mode; const char *want; } bad[] = {
      {ST_INTACT, NULL},
      {ST_DROP7, "does not look like Wav2Lip 256x256 (it has face_encoder_blocks.7.0.conv_block.0.weight): "
                 "missing face_encoder_blocks.7.1.conv_block.0.bias"},
      {ST_BADK7, "does not look like Wav2Lip 256x256 (it has face_encoder_blocks.7.0.conv_block.0.weight): "
                 "shape mismatch: face_encoder_blocks.7.0.conv_block.0.weight is [8,8,3,3], expected "
                 "[8,8,4,4]"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    FC_REQUIRE(write_safetensors_from(W256_DIR "/ckpt_zip.pth", path, bad[i].mode) == 0);
    fc_w2l_params p = {.device = "cpu-ref", .max_batch = 1};
    int err = 0;
    fc_w2l *m = fc_w2l_load(path, &p, &err);
    if (!bad[i].want) { /* the intact copy loads, as the 256 model */
      FC_CHECK(m != NULL && fc_w2l_face_size(m) == 256);
      fc_w2l_destroy(m);
      continue;
    }
    FC_CHECK(m == NULL);
    FC_CHECK_INT(err, ==, FC_EFORMAT);
    const char *d = fc_error_detail(err);
    fprintf(stderr, "  broken 256 copy %d: %s\n", bad[i].mode, d);
    FC_CHECK(strstr(d, bad[i].want) != NULL);
    FC_CHECK(strchr(d, '\n') == NULL);
    fc_w2l_destroy(m);
  }
  unlink(path);
}

/* facecast wav2lip infer on 256 faces: the output file matches cpu-ref; 96 faces given to the
 * 256 checkpoint (and 256 faces to the 96 one) are refused with exit 2. */
static void test_v256_cli(void) {
  FC_REQUIRE(load_inputs256() == 0 && g_ref256 && tmpdir()[0]);
  char facesp[512], melp[512], outp[512], args[2048];
  snprintf(facesp, sizeof facesp, "%s/faces256.npy", tmpdir());
  snprintf(melp, sizeof melp, "%s/mel256.npy", tmpdir());
  snprintf(outp, sizeof outp, "%s/out256.npy", tmpdir());
  int64_t fs[4] = {N256, 6, S256, S256}, ms[4] = {N256, 1, 80, 16};
  FC_REQUIRE(fc_npy_write_f32(facesp, g_faces256, fs, 4) == 0);
  FC_REQUIRE(fc_npy_write_f32(melp, g_mel256, ms, 4) == 0);
  snprintf(args, sizeof args, "infer --checkpoint " W256_DIR "/ckpt_zip.pth --mel %s --faces %s --out %s --max-batch 1",
           melp, facesp, outp);
  FC_CHECK_INT(run_cli(args), ==, 0);
  arr o;
  FC_REQUIRE(load_arr(outp, &o) == 0);
  FC_CHECK(o.ndim == 4 && o.shape[0] == N256 && o.shape[1] == 3 && o.shape[2] == S256 && o.shape[3] == S256);
  double e = o.n == (size_t)N256 * 3 * P256 ? max_abs_diff(o.d, g_ref256, o.n) : 1;
  fprintf(stderr, "  cli 256: max|out - cpu-ref| %.3g\n", e);
  FC_CHECK(e <= TOL);
  free(o.d);
  unlink(outp);
  snprintf(args, sizeof args, "infer --checkpoint " W2L_DIR "/ckpt_zip.pth --mel %s --faces %s --out %s",
           melp, facesp, outp);
  FC_CHECK_INT(run_cli(args), ==, 2);
  FC_CHECK(access(outp, F_OK) != 0);
  snprintf(args, sizeof args, "infer --checkpoint " W256_DIR "/ckpt_zip.pth --mel " W2L_DIR
           "/mel.npy --faces " W2L_DIR "/faces.npy --out %s", outp);
  FC_CHECK_INT(run_cli(args), ==, 2);
  FC_CHECK(access(outp, F_OK) != 0);
  unlink(facesp);
  unlink(melp);
}

/* ---- CUDA ("cuda", cuDNN) ---- */

/* Loads ckpt on "cuda"; NULL (and "skipped" printed) when the build or the machine has no GPU. */
static fc_w2l *load_cuda(const char *ckpt, int dtype, int max_batch, int *skipped) {
  fc_w2l_params p = {.device = "cuda", .max_batch = max_batch, .dtype = dtype};
  int err = 0;
  fc_w2l *m = fc_w2l_load(ckpt, &p, &err);
  *skipped = 0;
  if (!m && err == FC_EUNSUPPORTED &&
      (strstr(fc_error_detail(err), "no CUDA device") || strstr(fc_error_detail(err), "no CUDA support"))) {
    fprintf(stderr, "  skipped: no CUDA device [%s]\n", fc_error_detail(err));
    *skipped = 1;
  } else if (!m) {
    fprintf(stderr, "  load %s on cuda: %s\n", ckpt, fc_error_detail(err));
  }
  return m;
}

/* Tiles the fixture's samples to batch frames (sample i = fixture sample i % n). */
static void tile(const arr *a, int batch, float *dst) {
  size_t per = a->n / (size_t)a->shape[0];
  for (int i = 0; i < batch; i++)
    memcpy(dst + (size_t)i * per, a->d + (size_t)(i % a->shape[0]) * per, per * sizeof(float));
}

static const char *dtype_name(int dt) {
  return dt == FC_W2L_FP16 ? "fp16" : dt == FC_W2L_BF16 ? "bf16" : "fp32";
}

/* Width-16 fixture on cuda: batches 1, 2 (the fixture) and 7, 16, 128 (tiled), each against
 * out.npy sample by sample, three calls each (eager, graph capture, graph replay); then the
 * byte path against the same model's float path, and the resident run. */
static void cuda_case(int dtype) {
  FC_REQUIRE(load_inputs() == 0);
  int skipped;
  fc_w2l *m = load_cuda(W2L_DIR "/ckpt_zip.pth", dtype, 128, &skipped);
  if (skipped) return;
  FC_REQUIRE(m);
  /* fp16: the width-16 net is 0.019-0.021 off on the H200 (the fused and unfused paths and
   * other algorithms alike: fp16 rounding of activations, not a bug); full width 0.014.
   * bf16 keeps 8 mantissa bits to fp16's 11: 0.277 here and 0.095 at full width on the H200
   * (the byte path agrees with the float path exactly, so this is rounding, not a path). */
  const double tol = dtype == FC_W2L_FP16 ? 3e-2 : dtype == FC_W2L_BF16 ? 0.35 : 1e-3;
  static const int batches[] = {1, 2, 7, 16, 128, 2};
  const size_t per_out = 3 * 96 * 96;
  float *mel = malloc(128 * 80 * 16 * sizeof(float)), *faces = malloc(128 * 6 * 96 * 96 * sizeof(float));
  float *out = malloc(128 * per_out * sizeof(float)), *want = malloc(128 * per_out * sizeof(float));
  FC_REQUIRE(mel && faces && out && want);
  tile(&g_mel, 128, mel), tile(&g_faces, 128, faces), tile(&g_out, 128, want);
  FC_CHECK_INT(fc_w2l_run_resident(m, 1), ==, FC_EINVAL); /* nothing on the device yet */
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
    int n = batches[b];
    double worst = 0;
    for (int call = 0; call < 3; call++) {
      memset(out, 0xff, (size_t)n * per_out * sizeof(float)); /* NaN: every value must be written */
      int err = fc_w2l_infer(m, mel, faces, out, n);
      if (err) fprintf(stderr, "  infer batch %d: %s\n", n, fc_error_detail(err));
      FC_CHECK_INT(err, ==, FC_OK);
      double e = err ? 1 : max_abs_diff(out, want, (size_t)n * per_out);
      worst = e > worst ? e : worst;
    }
    fprintf(stderr, "  cuda %s batch %3d: max|out - out.npy| %.3g (3 calls)\n", dtype_name(dtype),
            n, worst);
    FC_CHECK(worst <= tol);
  }
  /* bytes in and out: the same network through fc_w2l_infer_u8, against its float path on
   * inputs made from the same bytes (within one step of rounding) */
  enum { NB = 16 };
  unsigned char *crops = malloc(NB * per_out), *o8 = malloc(NB * per_out);
  FC_REQUIRE(crops && o8);
  crops_from_faces(faces, crops, NB);
  faces_from_crops(crops, faces, NB);
  for (int call = 0; call < 3; call++) {
    memset(o8, 0, NB * per_out);
    FC_CHECK_INT(fc_w2l_infer_u8(m, mel, crops, o8, NB), ==, FC_OK);
  }
  FC_CHECK_INT(fc_w2l_infer(m, mel, faces, out, NB), ==, FC_OK);
  int d8 = max_byte_diff(o8, out, NB);
  fprintf(stderr, "  cuda %s bytes vs floats, batch %d: max diff %d\n", dtype_name(dtype), NB, d8);
  FC_CHECK_INT(d8, <=, 1);
  /* resident: the inputs of the last call, run again; the next call's result is unchanged */
  FC_CHECK_INT(fc_w2l_run_resident(m, NB), ==, FC_OK);
  FC_CHECK_INT(fc_w2l_run_resident(m, NB), ==, FC_OK);
  FC_CHECK_INT(fc_w2l_infer_u8(m, mel, crops, o8, NB), ==, FC_OK);
  FC_CHECK_INT(max_byte_diff(o8, out, NB), <=, 1);
  size_t fr = 0, tot = 0;
  FC_CHECK_INT(fc_w2l_device_memory(m, &fr, &tot), ==, FC_OK);
  FC_CHECK(tot > 0 && fr <= tot);
  size_t dev = fc_w2l_device_bytes(m);
  fprintf(stderr, "  cuda %s device memory %.1f MiB\n", dtype_name(dtype), dev / 1048576.0);
  FC_CHECK(dev > 0);
  /* the tap hook is not available on cuda */
  FC_CHECK_INT(fc_w2l_infer_tap(m, mel, faces, out, 1, on_tap, NULL), ==, FC_EUNSUPPORTED);
  free(mel), free(faces), free(out), free(want), free(crops), free(o8);
  fc_w2l_destroy(m);
}

/* fp16: the last three ops on w2l_tail.cu (the default) against the concat kernel, cuDNN's
 * convolution and the head kernel (W2L_CUDA_TAIL=0), same inputs, batches small enough for
 * the kernel's one-row form and large enough for its two-row form; both models on cuDNN's
 * fixed algorithms (W2L_CUDA_FIXED_ALGO=1), so that the tail is the only difference. Only the
 * accumulation order of one convolution differs (both round its activations to fp16 before the
 * head): a few 1-ulp flips, under 3e-3 after the head; a wrong tap, channel or tile is off by
 * tenths. */
/* One of facecast's kernels (switched on by the environment variable sw = "1") against the
 * cuDNN path it replaces, both models on fixed algorithms, so the two differ only in that op's
 * accumulation order: the output at each batch (three calls: eager, capture, replay) within
 * 3e-3, and fc_w2l_describe naming the kernel (phrase) on one model only. */
static void kernel_vs_cudnn(const char *sw, const char *phrase, const char *ckpt, int side,
                            int maxb, const float *mel, const float *faces, const int *batches,
                            size_t nb) {
  int skipped;
  char how[512], how0[512];
  setenv("W2L_CUDA_FIXED_ALGO", "1", 1);
  setenv(sw, "0", 1);
  fc_w2l *m0 = load_cuda(ckpt, FC_W2L_FP16, maxb, &skipped), *m = NULL;
  setenv(sw, "1", 1);
  if (!skipped) m = load_cuda(ckpt, FC_W2L_FP16, maxb, &skipped);
  unsetenv(sw);
  unsetenv("W2L_CUDA_FIXED_ALGO");
  if (skipped) return;
  FC_REQUIRE(m0 && m);
  fc_w2l_describe(m0, how0, sizeof how0);
  fc_w2l_describe(m, how, sizeof how);
  FC_CHECK(strstr(how0, phrase) == NULL);
  FC_CHECK(strstr(how, phrase) != NULL);
  const size_t per = (size_t)3 * side * side;
  float *out = malloc(maxb * per * sizeof(float)), *ref = malloc(maxb * per * sizeof(float));
  FC_REQUIRE(out && ref);
  for (size_t b = 0; b < nb; b++) {
    int n = batches[b], err = 0;
    double worst = 0;
    for (int call = 0; call < 3 && !err; call++) { /* eager, capture, replay */
      memset(out, 0xff, (size_t)n * per * sizeof(float)); /* NaN: every value must be written */
      if (!(err = fc_w2l_infer(m0, mel, faces, ref, n))) err = fc_w2l_infer(m, mel, faces, out, n);
      double e = err ? 1 : max_abs_diff(out, ref, (size_t)n * per);
      worst = e > worst ? e : worst;
    }
    FC_CHECK_INT(err, ==, FC_OK);
    fprintf(stderr, "  %d fp16, batch %3d: %s kernel vs cuDNN's: max diff %.3g\n", side, n, sw,
            worst);
    FC_CHECK(worst <= 3e-3);
  }
  free(out), free(ref);
  fc_w2l_destroy(m);
  fc_w2l_destroy(m0);
}

static void tail_vs_cudnn(const char *ckpt, int side, int maxb, const float *mel,
                          const float *faces, const int *batches, size_t nb) {
  kernel_vs_cudnn("W2L_CUDA_TAIL", "output block + head on facecast's kernel", ckpt, side, maxb,
                  mel, faces, batches, nb);
}

/* The 256 fixture's samples repeated to n frames (mel and faces malloc'd; -1 without memory). */
static int tile256(int n, float **mel, float **faces) {
  const size_t perf = (size_t)6 * P256;
  *mel = malloc(n * 80 * 16 * sizeof(float)), *faces = malloc(n * perf * sizeof(float));
  if (!*mel || !*faces) return -1;
  for (int i = 0; i < n; i++) {
    memcpy(*mel + (size_t)i * 80 * 16, g_mel256 + (size_t)(i % N256) * 80 * 16, 80 * 16 * sizeof(float));
    memcpy(*faces + i * perf, g_faces256 + (i % N256) * perf, perf * sizeof(float));
  }
  return 0;
}

/* The concat + ConvT kernel (w2l_convt.cu) against the concat kernel + cuDNN's backward-data
 * call, on both fixtures (the narrow networks' instantiation; full width in test_cuda_full). */
static void test_cuda_convt(void) {
  FC_REQUIRE(load_inputs() == 0 && load_inputs256() == 0);
  static const int b96[] = {1, 7, 16}, b256[] = {1, 2, 16};
  float *mel = malloc(16 * 80 * 16 * sizeof(float)), *faces = malloc(16 * 6 * 96 * 96 * sizeof(float));
  FC_REQUIRE(mel && faces);
  tile(&g_mel, 16, mel), tile(&g_faces, 16, faces);
  enum { MB = 16 };
  float *mel2 = NULL, *faces2 = NULL;
  FC_REQUIRE(tile256(MB, &mel2, &faces2) == 0);
  static const char *forms[] = {"0", "1"}; /* W2L_CUDA_CONVT_FORM: resident, pipelined */
  for (int f = 0; f < 2; f++) {
    setenv("W2L_CUDA_CONVT_FORM", forms[f], 1);
    fprintf(stderr, "  convt form %s\n", forms[f]);
    kernel_vs_cudnn("W2L_CUDA_CONVT", "transposed convolution on facecast's kernel",
                    W2L_DIR "/ckpt_zip.pth", 96, 16, mel, faces, b96, 3);
    kernel_vs_cudnn("W2L_CUDA_CONVT", "transposed convolution on facecast's kernel",
                    W256_DIR "/ckpt_zip.pth", 256, MB, mel2, faces2, b256, 3);
  }
  unsetenv("W2L_CUDA_CONVT_FORM");
  free(mel), free(faces), free(mel2), free(faces2);
}

static void test_cuda_tail(void) {
  FC_REQUIRE(load_inputs() == 0 && load_inputs256() == 0);
  /* 96: batch 1 and 7 run the one-row form, 16 and 64 the two-row one; 256: always two rows */
  static const int b96[] = {1, 7, 16, 64}, b256[] = {1, 2, 16};
  float *mel = malloc(64 * 80 * 16 * sizeof(float)), *faces = malloc(64 * 6 * 96 * 96 * sizeof(float));
  FC_REQUIRE(mel && faces);
  tile(&g_mel, 64, mel), tile(&g_faces, 64, faces);
  static const char *forms[] = {"0", "1", "2", "3"};
  for (int f = 0; f < 4; f++) {
    setenv("W2L_CUDA_TAIL_FORM", forms[f], 1);
    fprintf(stderr, "  tail form %s\n", forms[f]);
    tail_vs_cudnn(W2L_DIR "/ckpt_zip.pth", 96, 64, mel, faces, b96, 4);
  }
  free(mel), free(faces);
  enum { MB = 16 };
  FC_REQUIRE(tile256(MB, &mel, &faces) == 0);
  for (int f = 0; f < 4; f++) {
    setenv("W2L_CUDA_TAIL_FORM", forms[f], 1);
    fprintf(stderr, "  tail form %s\n", forms[f]);
    tail_vs_cudnn(W256_DIR "/ckpt_zip.pth", 256, MB, mel, faces, b256, 3);
  }
  unsetenv("W2L_CUDA_TAIL_FORM");
  free(mel), free(faces);
}

/* The 256 model on cuda: batches 1, 2, 7, 16 (the fixture's two samples tiled) against cpu-ref's
 * output (test_v256_ref), three calls each (eager, capture, replay), then the byte path against
 * the float path. Tolerances as for the 96 fixture; not yet measured on a GPU for this net. */
static void cuda256_case(int dtype) {
  FC_REQUIRE(load_inputs256() == 0 && g_ref256);
  int skipped;
  enum { MB = 16 };
  fc_w2l *m = load_cuda(W256_DIR "/ckpt_zip.pth", dtype, MB, &skipped);
  if (skipped) return;
  FC_REQUIRE(m);
  FC_CHECK_INT(fc_w2l_face_size(m), ==, 256);
  /* fp16: 0.0343 measured on the H200 (2026-12-02) for this width-64 fixture, whose narrow
   * layers round worse than the full network (0.0156 against PyTorch at full width) */
  const double tol = dtype == FC_W2L_FP16 ? 5e-2 : 1e-3;
  const size_t per = (size_t)3 * P256, perf = (size_t)6 * P256;
  float *mel = malloc(MB * 80 * 16 * sizeof(float)), *faces = malloc(MB * perf * sizeof(float));
  float *out = malloc(MB * per * sizeof(float)), *want = malloc(MB * per * sizeof(float));
  unsigned char *crops = malloc(MB * per), *o8 = malloc(MB * per);
  FC_REQUIRE(mel && faces && out && want && crops && o8);
  for (int i = 0; i < MB; i++) {
    memcpy(mel + (size_t)i * 80 * 16, g_mel256 + (size_t)(i % N256) * 80 * 16, 80 * 16 * sizeof(float));
    memcpy(faces + i * perf, g_faces256 + (i % N256) * perf, perf * sizeof(float));
    memcpy(want + i * per, g_ref256 + (i % N256) * per, per * sizeof(float));
    memcpy(crops + i * per, g_crops256 + (i % N256) * per, per);
  }
  static const int batches[] = {1, 2, 7, 16};
  for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
    int n = batches[b];
    double worst = 0;
    for (int call = 0; call < 3; call++) {
      memset(out, 0xff, (size_t)n * per * sizeof(float));
      int err = fc_w2l_infer(m, mel, faces, out, n);
      if (err) fprintf(stderr, "  infer batch %d: %s\n", n, fc_error_detail(err));
      FC_CHECK_INT(err, ==, FC_OK);
      double e = err ? 1 : max_abs_diff(out, want, (size_t)n * per);
      worst = e > worst ? e : worst;
    }
    fprintf(stderr, "  cuda 256 %s batch %2d: max|out - cpu-ref| %.3g (3 calls)\n",
            dtype_name(dtype), n, worst);
    FC_CHECK(worst <= tol);
  }
  for (int call = 0; call < 3; call++) FC_CHECK_INT(fc_w2l_infer_u8(m, mel, crops, o8, MB), ==, FC_OK);
  FC_CHECK_INT(fc_w2l_infer(m, mel, faces, out, MB), ==, FC_OK);
  int d8 = max_byte_diff_n(o8, out, MB, S256);
  fprintf(stderr, "  cuda 256 %s bytes vs floats: max diff %d\n", dtype_name(dtype), d8);
  FC_CHECK_INT(d8, <=, 1);
  FC_CHECK_INT(fc_w2l_run_resident(m, MB), ==, FC_OK);
  FC_CHECK(fc_w2l_device_bytes(m) > 0);
  free(mel), free(faces), free(out), free(want), free(crops), free(o8);
  fc_w2l_destroy(m);
}

static void test_cuda256_fp32(void) { cuda256_case(FC_W2L_FP32); }
static void test_cuda256_fp16(void) { cuda256_case(FC_W2L_FP16); }

static void test_cuda_fp32(void) { cuda_case(FC_W2L_FP32); }
static void test_cuda_fp16(void) { cuda_case(FC_W2L_FP16); }
static void test_cuda_bf16(void) { cuda_case(FC_W2L_BF16); }

/* fp16 at full width: facecast's own kernels against cuDNN for every layer (W2L_CUDA_OWN=0, the
 * reference), same inputs, every batch: the default model (the first layer on
 * w2l_conv_first.cu, the three 1x1-on-1x1 layers on w2l_dense.cu at batches up to
 * W2L_DENSE_MAX_BATCH, cuDNN above; the output block and head on w2l_tail.cu) and one with W2L_CUDA_DENSE=all (the two 3x3-on-3x3 layers
 * on w2l_dense.cu as well). Only the accumulation order
 * differs, but one fp16 rounding apart grows through the ~60 layers after it: the first layer
 * alone put the outputs 0.004-0.0125 apart on the H200 (2026-12-02), each path 0.007-0.018 from
 * the float64 reference; a wrong tap or channel is off by tenths. So the limit is the fp16
 * path's own, 2e-2. The descriptions must say which kernels ran. */
static void own_vs_cudnn(fc_w2l *m, const char *path, int maxb, const float *mel,
                         const float *faces, float *out, const int *batches, size_t nb) {
  char how[512], how0[512], howd[512];
  int skipped;
  setenv("W2L_CUDA_OWN", "0", 1);
  fc_w2l *m0 = load_cuda(path, FC_W2L_FP16, maxb, &skipped);
  unsetenv("W2L_CUDA_OWN");
  setenv("W2L_CUDA_DENSE", "all", 1);
  fc_w2l *md = load_cuda(path, FC_W2L_FP16, maxb, &skipped);
  unsetenv("W2L_CUDA_DENSE");
  FC_REQUIRE(m0 && md);
  const size_t per_out = 3 * 96 * 96;
  float *ref = malloc((size_t)maxb * per_out * sizeof(float));
  FC_REQUIRE(ref);
  fc_w2l *cand[2] = {m, md};
  static const char *what[2] = {"first layer + 1x1 layers + output block",
                                "first layer + whole-input layers + output block"};
  int small = 0;
  for (size_t b = 0; b < nb; b++) small += batches[b] <= 32; /* W2L_DENSE_MAX_BATCH, w2l_cuda.h */
  for (int c = 0; c < 2; c++)
    for (size_t b = 0; b < nb; b++) {
      int n = batches[b];
      int err = 0;
      for (int call = 0; call < 3 && !err; call++) /* eager, capture, replay */
        if (!(err = fc_w2l_infer(m0, mel, faces, ref, n)))
          err = fc_w2l_infer(cand[c], mel, faces, out, n);
      FC_CHECK_INT(err, ==, FC_OK);
      double e = err ? 1 : max_abs_diff(out, ref, (size_t)n * per_out);
      fprintf(stderr, "  full width fp16, batch %3d: own kernels (%s) vs cuDNN's: max diff %.3g\n",
              n, what[c], e);
      FC_CHECK(e <= 2e-2);
    }
  fc_w2l_describe(m, how, sizeof how);
  fc_w2l_describe(m0, how0, sizeof how0);
  fc_w2l_describe(md, howd, sizeof howd);
  fprintf(stderr, "  default: %s\n  W2L_CUDA_DENSE=all: %s\n", how, howd);
  FC_CHECK(strstr(how, "first layer on facecast's kernel") != NULL);
  FC_CHECK(strstr(how0, "first layer on facecast's kernel") == NULL);
  FC_CHECK(strstr(how, "output block + head on facecast's kernel") != NULL);
  FC_CHECK(strstr(how0, "output block + head on facecast's kernel") == NULL);
  const char *ct = getenv("W2L_CUDA_CONVT"); /* opt-in: on in the full-width run when asked */
  FC_CHECK((strstr(how, "transposed convolution on facecast's kernel") != NULL) ==
           (ct && !strcmp(ct, "1")));
  FC_CHECK(strstr(how0, "transposed convolution on facecast's kernel") == NULL);
  FC_CHECK(strstr(how0, "whole-input layers") == NULL);
  /* the 96 network's three 1x1-on-1x1 layers in each small batch's plan by default, its five
   * whole-input layers with W2L_CUDA_DENSE=all */
  const char *k = strstr(how, "whole-input layers on facecast's kernel ");
  int times = -1;
  FC_CHECK(k && sscanf(k, "whole-input layers on facecast's kernel %d times", &times) == 1);
  FC_CHECK(times >= 3 * small && times % 3 == 0);
  k = strstr(howd, "whole-input layers on facecast's kernel ");
  times = -1;
  FC_CHECK(k && sscanf(k, "whole-input layers on facecast's kernel %d times", &times) == 1);
  FC_CHECK(times >= 5 * small && times % 5 == 0);
  free(ref);
  fc_w2l_destroy(m0);
  fc_w2l_destroy(md);
}

/* Optional, for the GPU machine: W2L_FULL_DIR=DIR (from tools/gen_wav2lip_golden.py --width 1)
 * runs the full-width network there on cuda fp32 and fp16 against DIR/out.npy, and the CPU
 * ("cpu") once for reference. */
static void test_cuda_full(void) {
  const char *dir = getenv("W2L_FULL_DIR");
  if (!dir || !*dir) {
    fprintf(stderr, "  skipped: W2L_FULL_DIR not set\n");
    return;
  }
  char path[512];
  arr mel, faces, want;
  snprintf(path, sizeof path, "%s/mel.npy", dir);
  FC_REQUIRE(load_arr(path, &mel) == 0);
  snprintf(path, sizeof path, "%s/faces.npy", dir);
  FC_REQUIRE(load_arr(path, &faces) == 0);
  snprintf(path, sizeof path, "%s/out.npy", dir);
  FC_REQUIRE(load_arr(path, &want) == 0);
  snprintf(path, sizeof path, "%s/ckpt_zip.pth", dir);
  /* the batch sizes, the golden samples tiled */
  static const int batches[] = {1, 7, 16, 128};
  const int maxb = 128;
  const size_t per_out = 3 * 96 * 96;
  float *m_in = malloc((size_t)maxb * 80 * 16 * sizeof(float));
  float *f_in = malloc((size_t)maxb * 6 * 96 * 96 * sizeof(float));
  float *w_out = malloc((size_t)maxb * per_out * sizeof(float)), *out = malloc((size_t)maxb * per_out * sizeof(float));
  FC_REQUIRE(m_in && f_in && w_out && out);
  tile(&mel, maxb, m_in), tile(&faces, maxb, f_in), tile(&want, maxb, w_out);
  for (int dt = FC_W2L_FP32; dt <= FC_W2L_BF16; dt++) {
    int skipped;
    fc_w2l *m = load_cuda(path, dt, maxb, &skipped);
    if (skipped) break;
    FC_REQUIRE(m);
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
      int n = batches[b];
      int err = fc_w2l_infer(m, m_in, f_in, out, n);
      if (!err) err = fc_w2l_infer(m, m_in, f_in, out, n); /* the captured graph too */
      FC_CHECK_INT(err, ==, FC_OK);
      double e = err ? 1 : max_abs_diff(out, w_out, (size_t)n * per_out);
      fprintf(stderr, "  full width, cuda %s, batch %3d: max|out - out.npy| %.3g\n",
              dtype_name(dt), n, e);
      FC_CHECK(e <= (dt == FC_W2L_FP16 ? 2e-2 : dt == FC_W2L_BF16 ? 0.15 : 1e-3));
    }
    if (dt == FC_W2L_FP16) own_vs_cudnn(m, path, maxb, m_in, f_in, out, batches,
                                        sizeof batches / sizeof batches[0]);
    fc_w2l_destroy(m);
  }
  free(m_in), free(f_in), free(w_out), free(out);
  free(mel.d), free(faces.d), free(want.d);
}

int main(void) {
  FC_RUN(test_parity_legacy_cpu);
  FC_RUN(test_parity_zip_cpu);
  FC_RUN(test_parity_legacy_ref);
  FC_RUN(test_parity_zip_ref);
  FC_RUN(test_taps_cpu);
  FC_RUN(test_taps_ref);
  FC_RUN(test_safetensors);
  FC_RUN(test_not_wav2lip);
  FC_RUN(test_load_mem);
  FC_RUN(test_wide_views);
  FC_RUN(test_bad_args);
  FC_RUN(test_cli);
  FC_RUN(test_u8_cpu);
  FC_RUN(test_v256_ref);
  FC_RUN(test_v256_cpu_zip);
  FC_RUN(test_v256_cpu_legacy);
  FC_RUN(test_v256_taps);
  FC_RUN(test_v256_u8);
  FC_RUN(test_v256_broken);
  FC_RUN(test_v256_cli);
  FC_RUN(test_cuda_fp32);
  FC_RUN(test_cuda_fp16);
  FC_RUN(test_cuda_bf16);
  FC_RUN(test_cuda256_fp32);
  FC_RUN(test_cuda256_fp16);
  FC_RUN(test_cuda_tail);
  FC_RUN(test_cuda_convt);
  FC_RUN(test_cuda_full);
  free(g_mel.d);
  free(g_faces.d);
  free(g_out.d);
  free(g_mel256), free(g_faces256), free(g_crops256), free(g_ref256);
  if (g_tmp[0]) fc_test_rmtree(g_tmp);
  FC_TEST_EXIT();
}
