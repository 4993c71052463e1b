/* fc_w2l_composite: lip-sync with compositing (wav2lip.h), on the CPU and on a GPU.
 *
 * The shared arithmetic (w2l_composite.h) on its own: resampling is exact at scale 1 and keeps
 * constant and monotonic images so, the mask is 0 above 45 % of the box and 255 in its middle.
 * The host path (width-16 test network, "cpu"; and the width-64 wav2lip256 test network, whose
 * crops are 256×256): equal to doing its steps by hand (crops, the network's byte path, the
 * blend), the background untouched above the mask, the callback asked
 * once per job, batches beyond max_batch, and bad jobs refused. On "cuda" (skipped without a
 * GPU): the same jobs against the host path — fp32 within 2 levels and nearly all bytes equal,
 * fp16 close — the sources uploaded once per key, and a working set beyond the device cache's
 * key table (dropped and refilled) still giving the right bytes; the face-feature cache giving
 * the bytes of a pass that computes the face encoder (test_*features*). */
#include "facecast/avatar.h"
#include "compose/compose.h"
#include "facecast/error.h"
#include "facecast/lipsync.h"
#include "facecast/stream.h"
#include "lipsync/wav2lip/wav2lip.h"
#include "fc_test.h"
#include "lipsync/wav2lip/w2l_composite.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CKPT FC_TEST_DATA_DIR "/wav2lip/ckpt_zip.pth"
/* the 256×256 variant (wav2lip256), a narrow test network: tools/gen_wav2lip_golden.py --v256 */
#define CKPT256 FC_TEST_DATA_DIR "/wav2lip256/ckpt_zip.pth"
#define MEL (FC_W2L_MEL_H * FC_W2L_MEL_W)
#define MAXJ 160

static size_t rect_bytes(const fc_w2l_job *j) { return (size_t)j->box_w * (j->box_h - j->y0) * 3 / 2; }

/* ---- the shared arithmetic ---- */

/* Row y of the side × side crop of a 200×150 box whose channel 0 is 77 and channel 1 = x: the
 * last pixel's channel 1 if channel 0 stayed 77 and channel 1 never decreased, else -1. */
static int ramp_ok(const uint8_t *box, int side, int y) {
  int prev = -1, mono = 1, flat = 1;
  for (int x = 0; x < side; x++) {
    uint8_t px[3];
    w2l_crop_px(box, 600, 200, 150, side, x, y, px);
    flat &= px[0] == 77;
    mono &= px[1] >= prev;
    prev = px[1];
  }
  return flat && mono ? prev : -1;
}

static void test_math(void) {
  int idx, w1, bad = 0;
  for (int d = 0; d < 96; d++) {
    w2l_axis(d, 96, 96, &idx, &w1);
    bad += idx != d || w1 != 0;
  }
  FC_CHECK(bad == 0);
  /* a constant box resizes to the constant; a horizontal ramp stays monotonic */
  static uint8_t box[200 * 150 * 3];
  for (int y = 0; y < 150; y++)
    for (int x = 0; x < 200; x++) {
      uint8_t *p = box + (y * 200 + x) * 3;
      p[0] = 77, p[1] = (uint8_t)x, p[2] = (uint8_t)(y + 50);
    }
  FC_CHECK(ramp_ok(box, 96, 40) > 190);  /* the ramp reaches its far end */
  FC_CHECK(ramp_ok(box, 256, 200) == 199); /* the 256 model's side: an upscale of the box */
  /* the mask */
  FC_CHECK(w2l_alpha(100, 0, 200, 200) == 0);
  FC_CHECK(w2l_alpha(100, 89, 200, 200) == 0);
  FC_CHECK(w2l_alpha(100, 150, 200, 200) == 255);
  FC_CHECK(w2l_alpha(0, 150, 200, 200) < 10 && w2l_alpha(199, 150, 200, 200) < 10);
  FC_CHECK(w2l_alpha(3, 150, 200, 200) == w2l_alpha(196, 150, 200, 200));
  FC_CHECK(w2l_alpha(100, 199, 200, 200) < 16 && w2l_alpha(100, 180, 200, 200) == 255);
  /* colour conversion: libyuv's limited range */
  FC_CHECK(w2l_y(0, 0, 0) == 16 && w2l_y(255, 255, 255) == 235);
  FC_CHECK(w2l_u(128, 128, 128) == 128 && w2l_v(128, 128, 128) == 128);
}

/* ---- jobs ---- */

typedef struct world {
  fc_w2l_job jobs[MAXJ];
  uint8_t *rgb;        /* one face picture per distinct source, 320×320 */
  uint8_t *bg[MAXJ];   /* the background each job's callback writes */
  uint8_t *out[MAXJ];
  float mel[MAXJ][MEL];
  int calls[MAXJ];
  int fail_at;         /* the callback fails for this job (-1: never) */
} world;

#define SRC 320

static int fill_bg(void *user, int j) {
  world *w = user;
  if (j == w->fail_at) return fc_error_set(FC_EIO, "test: no background for job %d", j);
  w->calls[j]++;
  memcpy(w->jobs[j].out, w->bg[j], rect_bytes(&w->jobs[j]));
  return FC_OK;
}

/* n jobs over nsrc distinct sources (job k shows source k % nsrc with its own box size). */
static world *make_world(int n, int nsrc, uint64_t key_base) {
  world *w = calloc(1, sizeof *w);
  w->fail_at = -1;
  w->rgb = malloc((size_t)nsrc * SRC * SRC * 3);
  uint32_t r = 12345;
  for (size_t i = 0; i < (size_t)nsrc * SRC * SRC * 3; i++) {
    r = r * 1664525u + 1013904223u;
    size_t px = i / 3;
    int x = (int)(px % SRC), y = (int)(px / SRC % SRC);
    w->rgb[i] = (uint8_t)((x + y) / 3 + (r >> 28) + 40 * (int)(i % 3)); /* texture + noise */
  }
  for (int k = 0; k < n; k++) {
    int s = k % nsrc;
    int bw = 96 + 2 * (s * 37 % 90), bh = 100 + 2 * (s * 53 % 100);
    fc_w2l_job *j = &w->jobs[k];
    *j = (fc_w2l_job){.key = key_base + (uint64_t)s, .box_w = bw, .box_h = bh,
                      .y0 = (int)(0.45f * bh) & ~1, .rgb = w->rgb + (size_t)s * SRC * SRC * 3 + 6 * 3 + 4 * SRC * 3,
                      .rgb_stride = SRC * 3, .mel = w->mel[k]};
    size_t nb = rect_bytes(j);
    w->bg[k] = malloc(nb);
    w->out[k] = malloc(nb);
    j->out = w->out[k];
    for (size_t i = 0; i < nb; i++) w->bg[k][i] = (uint8_t)(60 + (i * 7 + (size_t)s * 13) % 120);
    for (int i = 0; i < MEL; i++) w->mel[k][i] = (float)((i * 31 + k * 17) % 200) / 50.0f - 2.0f;
  }
  return w;
}

static void free_world(world *w, int n) {
  for (int k = 0; k < n; k++) free(w->bg[k]), free(w->out[k]);
  free(w->rgb);
  free(w);
}

static fc_w2l *load_ckpt(const char *ckpt, const char *device, int dtype, int max_batch,
                         int *skipped) {
  fc_w2l_params p = {.device = device, .max_batch = max_batch, .dtype = dtype};
  int err = 0;
  fc_w2l *m = fc_w2l_load(ckpt, &p, &err);
  *skipped = 0;
  if (!m && err == FC_EUNSUPPORTED && strncmp(device, "cuda", 4) == 0) {
    fprintf(stderr, "  skipped: %s\n", fc_error_detail(err));
    *skipped = 1;
  } else if (!m) {
    fprintf(stderr, "  load on %s: %s\n", device, fc_error_detail(err));
  }
  return m;
}

static fc_w2l *load(const char *device, int dtype, int max_batch, int *skipped) {
  return load_ckpt(CKPT, device, dtype, max_batch, skipped);
}

/* ---- host path ---- */

static void host_by_hand(const char *ckpt, int want_side) {
  int skipped;
  fc_w2l *m = load_ckpt(ckpt, "cpu", FC_W2L_FP32, 8, &skipped);
  FC_REQUIRE(m);
  const int S = fc_w2l_face_size(m);
  FC_CHECK_INT(S, ==, want_side);
  const int n = 11; /* two batches of 8 and 3 */
  world *w = make_world(n, 5, 1000);
  FC_REQUIRE(fc_w2l_composite(m, w->jobs, n, fill_bg, w) == 0);
  int once = 1;
  for (int k = 0; k < n; k++) once &= w->calls[k] == 1;
  FC_CHECK(once);
  /* by hand: crops, the byte path, the blend */
  const size_t cs = (size_t)3 * S * S;
  uint8_t *crops = malloc(n * cs), *net = malloc(n * cs);
  FC_REQUIRE(crops && net);
  static float mel[MAXJ][MEL];
  for (int k = 0; k < n; k++) {
    const fc_w2l_job *j = &w->jobs[k];
    for (int y = 0; y < S; y++)
      for (int x = 0; x < S; x++)
        w2l_crop_px(j->rgb, j->rgb_stride, j->box_w, j->box_h, S, x, y, crops + k * cs + 3 * (y * S + x));
    memcpy(mel[k], j->mel, sizeof mel[k]);
  }
  FC_REQUIRE(fc_w2l_infer_u8(m, mel[0], crops, net, 8) == 0);
  FC_REQUIRE(fc_w2l_infer_u8(m, mel[8], crops + 8 * cs, net + 8 * cs, 3) == 0);
  int same = 1, top_kept = 1, changed = 0;
  for (int k = 0; k < n; k++) {
    const fc_w2l_job *j = &w->jobs[k];
    size_t nb = rect_bytes(j);
    uint8_t *want = malloc(nb);
    for (int by = 0; by < (j->box_h - j->y0) / 2; by++)
      for (int bx = 0; bx < j->box_w / 2; bx++)
        w2l_paste_block(net + k * cs, S, j->box_w, j->box_h, j->y0, bx, by, w->bg[k], want);
    same &= memcmp(want, j->out, nb) == 0;
    /* rows whose centre lies above 45 % of the box keep the background */
    for (int y = 0; y < j->box_h - j->y0; y++)
      if ((y + j->y0 + 0.5f) / j->box_h < 0.45f)
        top_kept &= memcmp(j->out + (size_t)y * j->box_w, w->bg[k] + (size_t)y * j->box_w, j->box_w) == 0;
    changed += memcmp(j->out, w->bg[k], nb) != 0;
    free(want);
  }
  FC_CHECK(same);
  FC_CHECK(top_kept);
  FC_CHECK(changed == n);
  /* the same again: the same bytes */
  uint8_t *first = malloc(rect_bytes(&w->jobs[3]));
  memcpy(first, w->jobs[3].out, rect_bytes(&w->jobs[3]));
  FC_REQUIRE(fc_w2l_composite(m, w->jobs, n, fill_bg, w) == 0);
  FC_CHECK(memcmp(first, w->jobs[3].out, rect_bytes(&w->jobs[3])) == 0);
  free(first);
  free(crops), free(net);
  free_world(w, n);
  fc_w2l_destroy(m);
}

static void test_host_by_hand(void) { host_by_hand(CKPT, 96); }
static void test_host_by_hand_256(void) { host_by_hand(CKPT256, 256); }

static void test_bad_jobs(void) {
  int skipped;
  fc_w2l *m = load("cpu", FC_W2L_FP32, 4, &skipped);
  FC_REQUIRE(m);
  world *w = make_world(3, 3, 1);
  fc_w2l_job good = w->jobs[1];
  struct { const char *what; fc_w2l_job j; } bad[] = {
      {"key 0", good}, {"odd width", good}, {"y0 past the box", good}, {"odd y0", good},
      {"no mel", good}, {"short stride", good}, {"huge box", good}};
  bad[0].j.key = 0;
  bad[1].j.box_w = 97;
  bad[2].j.y0 = good.box_h;
  bad[3].j.y0 = 3;
  bad[4].j.mel = NULL;
  bad[5].j.rgb_stride = 10;
  bad[6].j.box_w = 4096;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    w->jobs[1] = bad[i].j;
    int err = fc_w2l_composite(m, w->jobs, 3, fill_bg, w);
    if (err != FC_EINVAL) fprintf(stderr, "  %s: %d\n", bad[i].what, err);
    FC_CHECK(err == FC_EINVAL);
  }
  w->jobs[1] = good;
  FC_CHECK(fc_w2l_composite(m, w->jobs, 0, fill_bg, w) == FC_EINVAL);
  FC_CHECK(fc_w2l_composite(m, w->jobs, 3, NULL, w) == FC_EINVAL);
  w->fail_at = 2; /* the caller's error comes back as it is */
  FC_CHECK(fc_w2l_composite(m, w->jobs, 3, fill_bg, w) == FC_EIO);
  w->fail_at = -1;
  FC_CHECK(fc_w2l_composite(m, w->jobs, 3, fill_bg, w) == 0);
  free_world(w, 3);
  fc_w2l_destroy(m);
}

/* The default photo avatar and the "wav2lip" backend on the test network (CPU), made once
 * for the tests below; NULL when either cannot be made. */
static fc_avatar *g_av;
static fc_lipsync *g_ls;

static int photo_and_backend(fc_avatar **av, fc_lipsync **ls) {
  int err = 0;
  fc_avatar_params ap = fc_avatar_params_default();
  if (!g_av) g_av = fc_avatar_create_from_image(fc_avatar_default_path(), &ap, &err);
  fc_lipsync_params lp = {.model = "wav2lip", .checkpoint = CKPT, .device = "cpu"};
  if (g_av && !g_ls) g_ls = fc_lipsync_create(&lp, &err);
  if (!g_av || !g_ls) fprintf(stderr, "  set-up: %s\n", fc_error_detail(err));
  *av = g_av, *ls = g_ls;
  return g_av && g_ls;
}

/* The "wav2lip" lip-sync backend on a photo avatar: finished I420 patches that the compositor
 * copies; the frame outside the patch rect is the avatar's to the byte. */
static void backend_photo(fc_avatar *av, fc_lipsync *ls) {
  size_t cap = fc_lipsync_patch_capacity(ls, av);
  FC_REQUIRE(cap > 0);
  static float mel[3][MEL];
  for (int i = 0; i < 3 * MEL; i++) mel[i / MEL][i % MEL] = (float)(i % 37) / 9.0f - 2.0f;
  fc_lipsync_req rq[3];
  fc_patch pt[3];
  for (int k = 0; k < 3; k++) {
    rq[k] = (fc_lipsync_req){.avatar = av, .frame = k, .mel = mel[k]};
    pt[k] = (fc_patch){.rgb = malloc(3 * cap), .alpha = malloc(cap)};
  }
  FC_REQUIRE(fc_lipsync_run(ls, rq, pt, 3) == 0);
  int w = fc_avatar_width(av), h = fc_avatar_height(av);
  size_t fsz = (size_t)w * h * 3 / 2;
  uint8_t *plain = malloc(fsz), *comp = malloc(fsz), *scratch = malloc(2 * cap);
  FC_REQUIRE(fc_avatar_copy_i420(av, 0, plain) == 0);
  fc_rect r = pt[0].place;
  FC_CHECK(pt[0].i420 == 1);
  FC_CHECK(r.w > 0 && r.h > 0 && r.x >= 0 && r.y >= 0 && r.x + r.w <= w && r.y + r.h <= h);
  FC_CHECK((size_t)r.w * r.h <= cap);
  FC_REQUIRE(fc_compose_i420(av, 0, &pt[0], comp, scratch) == 0);
  size_t outside = 0, inside = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int in = x >= r.x && x < r.x + r.w && y >= r.y && y < r.y + r.h;
      size_t i = (size_t)y * w + x;
      if (plain[i] != comp[i]) in ? inside++ : outside++;
    }
  fprintf(stderr, "  patch %dx%d+%d+%d: %zu luma samples changed inside, %zu outside\n", r.w, r.h,
          r.x, r.y, inside, outside);
  FC_CHECK(outside == 0);
  FC_CHECK(inside > (size_t)r.w * r.h / 4);
  size_t coutside = 0; /* chroma too */
  for (int y = 0; y < h / 2; y++)
    for (int x = 0; x < w / 2; x++) {
      int in = 2 * x >= r.x && 2 * x < r.x + r.w && 2 * y >= r.y && 2 * y < r.y + r.h;
      size_t i = (size_t)w * h + (size_t)y * (w / 2) + x, j = i + (size_t)w * h / 4;
      if (!in && (plain[i] != comp[i] || plain[j] != comp[j])) coutside++;
    }
  FC_CHECK(coutside == 0);
  for (int k = 0; k < 3; k++) free(pt[k].rgb), free(pt[k].alpha);
  free(plain), free(comp), free(scratch);
}

static void test_backend_photo(void) {
  fc_avatar *av;
  fc_lipsync *ls;
  FC_REQUIRE(photo_and_backend(&av, &ls));
  backend_photo(av, ls);
}

/* The same with a wav2lip256 checkpoint: the backend takes the face side from the file. */
static void test_backend_photo_256(void) {
  fc_avatar *av;
  fc_lipsync *ls;
  FC_REQUIRE(photo_and_backend(&av, &ls));
  fc_lipsync_params lp = {.model = "wav2lip", .checkpoint = CKPT256, .device = "cpu"};
  int err = 0;
  fc_lipsync *ls256 = fc_lipsync_create(&lp, &err);
  if (!ls256) fprintf(stderr, "  %s\n", fc_error_detail(err));
  FC_REQUIRE(ls256);
  backend_photo(av, ls256);
  fc_lipsync_destroy(ls256);
}

/* A stream on a neural backend: at rest the photo as it is (the backend draws only from
 * speech); streamed audio is producible once a mel window's 200 ms look-ahead has arrived, an
 * utterance at once. */
static void test_stream_neural(void) {
  fc_avatar *av;
  fc_lipsync *ls;
  int err;
  FC_REQUIRE(photo_and_backend(&av, &ls));
  fc_stream_params sp = {.avatar = av, .lipsync = ls, .batch = 4, .max_pending = 64000};
  fc_stream *st = fc_stream_create(&sp, &err);
  FC_REQUIRE(st);
  fc_frame_info fi;
  const uint8_t *img;
  const int16_t *pcm;
  size_t fsz = (size_t)fc_avatar_width(av) * fc_avatar_height(av) * 3 / 2;
  uint8_t *plain = malloc(fsz);
  FC_REQUIRE(fc_avatar_copy_i420(av, 0, plain) == 0);
  FC_REQUIRE(fc_stream_idle_frame(st, &fi, &img, &pcm) == 0);
  FC_CHECK(memcmp(img, plain, fsz) == 0);
  static float tone[16000];
  for (int i = 0; i < 16000; i++) tone[i] = 0.3f * (float)((i * 37 % 200) - 100) / 100.0f;
  FC_REQUIRE(fc_stream_push_audio(st, tone, 1280) == 0); /* two frames, no look-ahead yet */
  FC_CHECK_INT(fc_stream_pending_frames(st), ==, 2);
  FC_CHECK_INT(fc_stream_producible(st), ==, 0);
  FC_CHECK_INT(fc_stream_next_frame(st, &fi, &img, &pcm), ==, FC_EAGAIN);
  FC_REQUIRE(fc_stream_push_audio(st, tone + 1280, 6400) == 0);
  FC_CHECK_INT(fc_stream_producible(st), ==, 1);
  FC_REQUIRE(fc_stream_next_frame(st, &fi, &img, &pcm) == 0);
  FC_CHECK(fi.speaking && memcmp(img, plain, fsz) != 0);
  fc_stream_interrupt(st);
  FC_CHECK_INT(fc_stream_producible(st), ==, 0);
  FC_REQUIRE(fc_stream_push_speech(st, tone, 4000, NULL, 0, NULL) == 0); /* whole mel at once */
  FC_CHECK_INT(fc_stream_producible(st), ==, 1);
  fc_stream_destroy(st);
  free(plain);
}

/* ---- GPU against the host path ---- */

static void compare(const world *a, const world *b, int n, int tol, double min_equal,
                    const char *what) {
  size_t total = 0, equal = 0;
  int worst = 0;
  for (int k = 0; k < n; k++) {
    size_t nb = rect_bytes(&a->jobs[k]);
    for (size_t i = 0; i < nb; i++) {
      int d = abs((int)a->jobs[k].out[i] - (int)b->jobs[k].out[i]);
      worst = d > worst ? d : worst;
      equal += d == 0;
    }
    total += nb;
  }
  fprintf(stderr, "  %s: max byte diff %d, %.4f %% equal (%zu bytes)\n", what, worst,
          100.0 * equal / total, total);
  FC_CHECK(worst <= tol);
  FC_CHECK((double)equal / total >= min_equal);
}

static void cuda_case(const char *ckpt, int dtype) {
  int skipped;
  fc_w2l *g = load_ckpt(ckpt, "cuda", dtype, 64, &skipped);
  if (skipped) return;
  FC_REQUIRE(g);
  fc_w2l *c = load_ckpt(ckpt, "cpu", FC_W2L_FP32, 16, &skipped);
  FC_REQUIRE(c);
  FC_CHECK_INT(fc_w2l_face_size(g), ==, fc_w2l_face_size(c));
  const int n = 100; /* 64 + 36 (run as 64) */
  world *wg = make_world(n, 23, 5000), *wc = make_world(n, 23, 5000);
  FC_REQUIRE(fc_w2l_composite(c, wc->jobs, n, fill_bg, wc) == 0);
  for (int pass = 0; pass < 3; pass++) /* eager, captured, replayed */
    FC_REQUIRE(fc_w2l_composite(g, wg->jobs, n, fill_bg, wg) == 0);
  int uploads = 0;
  for (int k = 0; k < n; k++) uploads += wg->calls[k];
  fprintf(stderr, "  %d backgrounds asked for over 3 passes of %d jobs on 23 sources\n", uploads, n);
  FC_CHECK(uploads == 23); /* once per key, then resident */
  if (dtype == FC_W2L_FP32)
    compare(wg, wc, n, 2, 0.995, "cuda fp32 vs cpu");
  else
    compare(wg, wc, n, 12, 0.5, "cuda fp16 vs cpu");
  free_world(wg, n);
  free_world(wc, n);
  fc_w2l_destroy(c);
  fc_w2l_destroy(g);
}

static void test_cuda_fp32(void) { cuda_case(CKPT, FC_W2L_FP32); }
static void test_cuda_fp16(void) { cuda_case(CKPT, FC_W2L_FP16); }
/* the 256 model: crops and patches at 256 on the device (tolerances of the 96 net, not yet
 * measured on a GPU for this one) */
static void test_cuda256_fp32(void) { cuda_case(CKPT256, FC_W2L_FP32); }
static void test_cuda256_fp16(void) { cuda_case(CKPT256, FC_W2L_FP16); }

/* More keys than the device cache's table holds (8,192): it is dropped and refilled, and the
 * bytes stay right. */
static void test_cuda_cache_overflow(void) {
  int skipped;
  fc_w2l *g = load("cuda", FC_W2L_FP32, 64, &skipped);
  if (skipped) return;
  FC_REQUIRE(g);
  fc_w2l *c = load("cpu", FC_W2L_FP32, 16, &skipped);
  FC_REQUIRE(c);
  world *wg = make_world(64, 7, 1), *wc = make_world(64, 7, 1);
  int asked = 0;
  for (int round = 0; round < 150; round++) { /* 150 × 64 = 9,600 distinct keys */
    for (int k = 0; k < 64; k++) wg->jobs[k].key = 1 + (uint64_t)round * 64 + k, wg->calls[k] = 0;
    FC_REQUIRE(fc_w2l_composite(g, wg->jobs, 64, fill_bg, wg) == 0);
    for (int k = 0; k < 64; k++) asked += wg->calls[k];
  }
  FC_CHECK(asked == 150 * 64);
  /* round 0's keys were dropped with the first reset: asked for again */
  for (int k = 0; k < 64; k++) wg->jobs[k].key = 1 + (uint64_t)k, wg->calls[k] = 0;
  FC_REQUIRE(fc_w2l_composite(g, wg->jobs, 64, fill_bg, wg) == 0);
  int again = 0;
  for (int k = 0; k < 64; k++) again += wg->calls[k];
  FC_CHECK(again == 64);
  FC_REQUIRE(fc_w2l_composite(c, wc->jobs, 64, fill_bg, wc) == 0);
  compare(wg, wc, 64, 2, 0.995, "after cache drops, cuda fp32 vs cpu");
  free_world(wg, 64);
  free_world(wc, 64);
  fc_w2l_destroy(c);
  fc_w2l_destroy(g);
}

/* The face-feature cache (wav2lip.h): the CPU has none; on "cuda" a pass over keys already seen
 * skips the face encoder and gives the bytes of a pass that computes it (the cache off), also
 * in a batch mixing new and kept keys, and when a small arena is dropped and refilled. */
static void test_features_cpu(void) {
  int skipped;
  fc_w2l *c = load("cpu", FC_W2L_FP32, 8, &skipped);
  FC_REQUIRE(c);
  FC_CHECK_INT(fc_w2l_set_feature_cache(c, 1), ==, FC_EUNSUPPORTED);
  FC_CHECK_INT(fc_w2l_set_feature_cache(c, 0), ==, FC_OK);
  fc_w2l_feature_stats fs;
  fc_w2l_feature_stats_get(c, &fs);
  FC_CHECK(!fs.on && fs.capacity == 0 && fs.cached_frames == 0);
  fc_w2l_destroy(c);
}

/* Moves every job (and the background its callback writes) `by` places on: a kept pass then
 * reads each record at another batch position than the pass that stored it, so leftovers of
 * the previous pass in the activation buffers cannot stand in for the records. */
static void rotate_world(world *w, int n, int by) {
  fc_w2l_job jobs[MAXJ];
  uint8_t *bg[MAXJ];
  for (int k = 0; k < n; k++) jobs[(k + by) % n] = w->jobs[k], bg[(k + by) % n] = w->bg[k];
  memcpy(w->jobs, jobs, n * sizeof *jobs);
  memcpy(w->bg, bg, n * sizeof *bg);
}

/* Removes dir and the files in it (one level: the algorithm cache's). */
static void remove_dir(const char *dir) {
  GDir *d = g_dir_open(dir, 0, NULL);
  for (const char *f; d && (f = g_dir_read_name(d));) {
    char *p = g_build_filename(dir, f, NULL);
    g_remove(p);
    g_free(p);
  }
  if (d) g_dir_close(d);
  g_rmdir(dir);
}

/* eager: the model under test without CUDA graphs (the kept pass's eager path). The reference
 * model is loaded once the one under test has planned its batch sizes, from a cache folder of
 * this case's own: it reads those algorithm picks instead of searching (two searches, with the
 * small-batch retiming above all, pick differently, and fp16 then differs by one level in up to
 * 1 % of the bytes, seen on an H100), so both run the same convolutions. */
static void features_case(const char *ckpt, int dtype, int max_batch, const char *arena_mb,
                          int eager) {
  const double min_equal = 0.999;
  int skipped;
  char *old_dir = g_strdup(getenv("FACECAST_CACHE_DIR"));
  char *dir = g_mkdtemp(g_strdup("/tmp/fc_features_XXXXXX"));
  FC_REQUIRE(dir);
  setenv("FACECAST_CACHE_DIR", dir, 1);
  setenv("W2L_CUDA_FEATURE_MB", arena_mb ? arena_mb : "auto", 1);
  if (eager) setenv("W2L_CUDA_NOGRAPH", "1", 1);
  fc_w2l *g = load_ckpt(ckpt, "cuda", dtype, max_batch, &skipped);
  unsetenv("W2L_CUDA_NOGRAPH");
  /* the small arena: 16 keys fit (kept passes), 16 + pass 2's five new ones do not (drops) */
  const int n = 40, nsrc = arena_mb ? 16 : 13;
  world *wg = make_world(n, nsrc, 7000), *wr = make_world(n, nsrc, 7000);
  if (!skipped) FC_REQUIRE(g && fc_w2l_composite(g, wg->jobs, n, fill_bg, wg) == 0); /* pass 0 */
  setenv("W2L_CUDA_FEATURE_MB", "0", 1); /* read at load: the reference below has no arena */
  fc_w2l *ref = skipped ? NULL : load_ckpt(ckpt, "cuda", dtype, max_batch, &skipped);
  unsetenv("W2L_CUDA_FEATURE_MB");
  if (old_dir) setenv("FACECAST_CACHE_DIR", old_dir, 1);
  else unsetenv("FACECAST_CACHE_DIR");
  g_free(old_dir);
  if (skipped) {
    free_world(wg, n);
    free_world(wr, n);
    remove_dir(dir);
    g_free(dir);
    return;
  }
  FC_REQUIRE(ref);
  FC_CHECK_INT(fc_w2l_set_feature_cache(ref, 1), ==, FC_EUNSUPPORTED); /* =0: no arena */
  FC_REQUIRE(fc_w2l_set_feature_cache(ref, 0) == FC_OK);
  fc_w2l_feature_stats fs;
  for (int pass = 0; pass < 4; pass++) {
    if (pass == 2) /* a batch of kept keys and five new ones */
      for (int k = 0; k < 5; k++) wg->jobs[k].key = wr->jobs[k].key = 9000 + (uint64_t)k;
    if (pass & 1) rotate_world(wg, n, 7), rotate_world(wr, n, 7);
    if (pass) FC_REQUIRE(fc_w2l_composite(g, wg->jobs, n, fill_bg, wg) == 0);
    FC_REQUIRE(fc_w2l_composite(ref, wr->jobs, n, fill_bg, wr) == 0);
    char what[64];
    snprintf(what, sizeof what, "pass %d, kept features vs computed", pass);
    compare(wg, wr, n, 1, min_equal, what);
  }
  fc_w2l_feature_stats_get(g, &fs);
  fprintf(stderr, "  features: on %d, %lld of %lld records of %zu bytes, %lld frames kept, %lld "
                  "computed, %lld drops\n",
          fs.on, fs.records, fs.capacity, fs.record_bytes, fs.cached_frames, fs.full_frames, fs.drops);
  FC_CHECK(fs.on && fs.record_bytes > 0);
  if (!arena_mb) {
    /* pass 0 and 2 computed (new keys), 1 and 3 kept; 13 + 5 keys stored. Above max_batch a
     * call runs in chunks: the first chunk of pass 0 holds all 13 keys and the new ones of
     * pass 2 sit in its first chunk, so the later chunks of both are kept passes already. */
    int full = 2 * (n < max_batch ? n : max_batch);
    FC_CHECK_INT(fs.full_frames, ==, full);
    FC_CHECK_INT(fs.cached_frames, ==, 4 * n - full);
    FC_CHECK_INT(fs.records, ==, 18);
  } else {
    /* through a small arena: dropped and refilled, never wrong */
    FC_CHECK(fs.capacity >= nsrc && fs.capacity < nsrc + 5 && fs.capacity >= max_batch);
    FC_CHECK(fs.drops > 0 && fs.cached_frames > 0);
  }
  fc_w2l_feature_stats_get(ref, &fs);
  FC_CHECK(!fs.on && fs.cached_frames == 0 && fs.full_frames == 4 * n);
  /* off again: the next pass computes */
  FC_REQUIRE(fc_w2l_set_feature_cache(g, 0) == FC_OK);
  FC_REQUIRE(fc_w2l_composite(g, wg->jobs, n, fill_bg, wg) == 0);
  fc_w2l_feature_stats_get(g, &fs);
  FC_CHECK(!fs.on && fs.records == 0);
  compare(wg, wr, n, 1, min_equal, "cache off again");
  free_world(wg, n);
  free_world(wr, n);
  fc_w2l_destroy(ref);
  fc_w2l_destroy(g);
  remove_dir(dir);
  g_free(dir);
}

static void test_cuda_features_fp32(void) { features_case(CKPT, FC_W2L_FP32, 64, NULL, 0); }
static void test_cuda_features_fp16(void) { features_case(CKPT, FC_W2L_FP16, 64, NULL, 0); }
static void test_cuda_features_eager(void) { features_case(CKPT, FC_W2L_FP16, 64, NULL, 1); }
static void test_cuda256_features_fp16(void) { features_case(CKPT256, FC_W2L_FP16, 16, NULL, 0); }
/* an arena of 1 MB holds a few dozen of the width-16 network's records: fewer than 40 keys */
static void test_cuda_features_small(void) { features_case(CKPT, FC_W2L_FP16, 8, "1", 0); }

int main(void) {
  FC_RUN(test_math);
  FC_RUN(test_host_by_hand);
  FC_RUN(test_host_by_hand_256);
  FC_RUN(test_bad_jobs);
  FC_RUN(test_backend_photo);
  FC_RUN(test_backend_photo_256);
  FC_RUN(test_stream_neural);
  FC_RUN(test_cuda_fp32);
  FC_RUN(test_cuda_fp16);
  FC_RUN(test_cuda256_fp32);
  FC_RUN(test_cuda256_fp16);
  FC_RUN(test_cuda_cache_overflow);
  FC_RUN(test_features_cpu);
  FC_RUN(test_cuda_features_fp32);
  FC_RUN(test_cuda_features_fp16);
  FC_RUN(test_cuda_features_eager);
  FC_RUN(test_cuda256_features_fp16);
  FC_RUN(test_cuda_features_small);
  fc_lipsync_destroy(g_ls);
  fc_avatar_destroy(g_av);
  FC_TEST_EXIT();
}
