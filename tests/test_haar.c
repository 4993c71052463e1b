/* Tests for src/avatar/haar.c: OpenCV's reference boxes on the astronaut (both cascades, grouped
 * and raw), a hand-made one-stump cascade whose candidates can be worked out by hand, blank and
 * tiny images, thread safety, argument checks, and malformed or foreign cascade files (each
 * rejected with the right code and a detail naming the file).
 * Reference numbers: shared/research/formats.md §2.4 (cv2 4.6 detectMultiScale). */
#include "facecast/error.h"
#include "avatar/haar.h"
#include "avatar/image.h"

#include "fc_test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ASTRONAUT "/usr/lib/python3/dist-packages/skimage/data/astronaut.png"
#define ALT2 "/usr/share/opencv4/haarcascades/haarcascade_frontalface_alt2.xml"

static char tmpdir[64];

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* The astronaut as grey (caller frees), or NULL with a message saying why. */
static uint8_t *astronaut_gray(int *w, int *h) {
  fc_image img;
  int rc = fc_image_load(ASTRONAUT, &img);
  if (rc != FC_OK) {
    fprintf(stderr, "  cannot load %s (%s): the project set-up installs python3-skimage\n",
            ASTRONAUT, fc_error_detail(rc));
    return NULL;
  }
  uint8_t *g = malloc((size_t)img.w * img.h);
  if (g) fc_image_to_gray(&img, g, img.w);
  *w = img.w, *h = img.h;
  fc_image_free(&img);
  return g;
}

static fc_haar *load_cascade(const char *path) {
  int err = 0;
  fc_haar *c = fc_haar_load(path, &err);
  if (!c) fprintf(stderr, "  cannot load %s: %d %s\n", path, err, fc_error_detail(err));
  return c;
}

static int rect_eq(fc_rect r, int x, int y, int w, int h) {
  return r.x == x && r.y == y && r.w == w && r.h == h;
}

/* Runs a cascade on the astronaut and checks the single box against OpenCV's. */
static void check_astronaut(const char *cascade, fc_rect want) {
  int w, h;
  uint8_t *g = astronaut_gray(&w, &h);
  FC_REQUIRE(g);
  fc_haar *c = load_cascade(cascade);
  if (!c) free(g);
  FC_REQUIRE(c);
  fc_haar_params p = fc_haar_params_default();
  FC_CHECK_NEAR(p.scale_factor, 1.1, 1e-12);
  FC_CHECK_INT(p.min_neighbors, ==, 3);
  fc_rect out[8];
  double t0 = now_ms();
  int n = fc_haar_detect(c, g, w, h, w, &p, out, 8);
  fprintf(stderr, "  %s: %d face(s) in %.1f ms\n", strrchr(cascade, '/') + 1, n, now_ms() - t0);
  FC_CHECK_INT(n, ==, 1);
  if (n >= 1) {
    fc_rect r = out[0]; /* the largest */
    fprintf(stderr, "  largest [%d,%d,%d,%d], OpenCV [%d,%d,%d,%d]\n", r.x, r.y, r.w, r.h, want.x,
            want.y, want.w, want.h);
    /* Loose: the face is at x 176-271, y 66-161 */
    FC_CHECK_INT(abs(r.x - 176), <=, 10);
    FC_CHECK_INT(abs(r.y - 66), <=, 10);
    FC_CHECK_INT(abs(r.x + r.w - 271), <=, 10);
    FC_CHECK_INT(abs(r.y + r.h - 161), <=, 10);
    /* Exact: what cv2 4.6 returns */
    FC_CHECK(rect_eq(r, want.x, want.y, want.w, want.h));
  }
  fc_haar_destroy(c);
  free(g);
}

static void test_astronaut_default(void) {
  FC_CHECK(strcmp(fc_haar_default_cascade(),
                  "/usr/share/opencv4/haarcascades/haarcascade_frontalface_default.xml") == 0);
  check_astronaut(fc_haar_default_cascade(), (fc_rect){177, 66, 95, 95});
}

static void test_astronaut_alt2(void) { check_astronaut(ALT2, (fc_rect){177, 66, 97, 97}); }

/* min_neighbors 0: the raw candidates, 47 (default) and 43 (alt2) in cv2; sorted by area. */
static void test_raw_candidates(void) {
  int w, h;
  uint8_t *g = astronaut_gray(&w, &h);
  FC_REQUIRE(g);
  const char *files[2] = {fc_haar_default_cascade(), ALT2};
  const int want[2] = {47, 43};
  for (int k = 0; k < 2; k++) {
    fc_haar *c = load_cascade(files[k]);
    if (!c) continue;
    fc_haar_params p = fc_haar_params_default();
    p.min_neighbors = 0;
    fc_rect out[64];
    int n = fc_haar_detect(c, g, w, h, w, &p, out, 64);
    FC_CHECK_INT(n, ==, want[k]);
    for (int i = 1; i < n && i < 64; i++)
      FC_CHECK_INT((long)out[i - 1].w * out[i - 1].h, >=, (long)out[i].w * out[i].h);
    /* max_out smaller than the count: the total is still returned, nothing past max_out is
     * written */
    fc_rect few[6];
    memset(few, 0x7f, sizeof few);
    FC_CHECK_INT(fc_haar_detect(c, g, w, h, w, &p, few, 5), ==, want[k]);
    FC_CHECK(memcmp(few, out, 5 * sizeof *few) == 0);
    FC_CHECK_INT(few[5].x, ==, 0x7f7f7f7f);
    FC_CHECK_INT(fc_haar_detect(c, g, w, h, w, &p, NULL, 0), ==, want[k]);
    /* min_size / max_size bound the raw windows */
    p.min_size = 60;
    p.max_size = 90;
    n = fc_haar_detect(c, g, w, h, w, &p, out, 64);
    FC_CHECK_INT(n, >, 0);
    for (int i = 0; i < n && i < 64; i++) FC_CHECK(out[i].w >= 60 && out[i].w <= 90);
    fc_haar_destroy(c);
  }
  free(g);
}

/* More cv2 4.6 results on the astronaut, chosen because each one catches a different detail:
 * the nesting filter (a), the count filter (b), step 1 from factor 2 on (c, d), and the
 * choice of scales when none lies within [min_size, max_size] (e, f, g). */
static void test_opencv_table(void) {
  static const struct {
    int alt2;
    double scale;
    int neighbors, min_size, max_size, n;
    fc_rect boxes[3]; /* the largest ones, largest first */
  } cases[] = {
      {0, 1.05, 2, 0, 0, 3, {{284, 125, 127, 127}, {175, 66, 97, 97}, {419, 432, 27, 27}}}, /* a */
      {0, 1.1, 1, 0, 0, 3, {{4, 376, 105, 105}, {177, 66, 95, 95}, {128, 272, 25, 25}}},    /* b */
      {1, 1.05, 3, 0, 0, 2, {{281, 119, 133, 133}, {175, 64, 100, 100}}},
      {0, 2.0, 0, 0, 0, 13, {{0}}}, /* c */
      {1, 2.0, 0, 0, 0, 6, {{0}}},  /* d */
      {0, 1.1, 3, 60, 90, 1, {{187, 73, 76, 76}}},
      {0, 1.1, 0, 0, 10, 1, {{128, 272, 24, 24}}},  /* e: max below the window: scale 1 */
      {1, 1.1, 0, 96, 96, 8, {{0}}},                /* f: no 96 window; 92 is nearest */
      {0, 1.1, 0, 25, 25, 1, {{128, 272, 24, 24}}}, /* g: 24 and 26 tie; the first wins */
      {0, 1.1, 0, 1000, 0, 0, {{0}}},
  };
  int w, h;
  uint8_t *g = astronaut_gray(&w, &h);
  FC_REQUIRE(g);
  fc_haar *c[2] = {load_cascade(fc_haar_default_cascade()), load_cascade(ALT2)};
  for (size_t i = 0; c[0] && c[1] && i < sizeof cases / sizeof cases[0]; i++) {
    fc_haar_params p = {cases[i].scale, cases[i].neighbors, cases[i].min_size, cases[i].max_size};
    fc_rect out[32];
    int n = fc_haar_detect(c[cases[i].alt2], g, w, h, w, &p, out, 32);
    FC_CHECK_INT(n, ==, cases[i].n);
    int bad = 0;
    for (int k = 0; k < 3 && k < n && cases[i].boxes[k].w; k++)
      bad += !rect_eq(out[k], cases[i].boxes[k].x, cases[i].boxes[k].y, cases[i].boxes[k].w,
                      cases[i].boxes[k].h);
    if (cases[i].alt2 && cases[i].min_size == 96)
      for (int k = 0; k < n && k < 32; k++) bad += out[k].w != 92;
    FC_CHECK_INT(bad, ==, 0);
    if (n != cases[i].n || bad) fprintf(stderr, "  case %zu differs from cv2\n", i);
  }
  fc_haar_destroy(c[0]);
  fc_haar_destroy(c[1]);
  free(g);
}

static void test_blank_and_tiny(void) {
  fc_haar *c = load_cascade(fc_haar_default_cascade());
  FC_REQUIRE(c);
  enum { W = 320, H = 240 };
  uint8_t *g = malloc(W * H);
  FC_REQUIRE(g);
  memset(g, 128, W * H);
  fc_haar_params p = fc_haar_params_default();
  fc_rect out[4];
  FC_CHECK_INT(fc_haar_detect(c, g, W, H, W, &p, out, 4), ==, 0);
  p.min_neighbors = 0;
  FC_CHECK_INT(fc_haar_detect(c, g, W, H, W, &p, out, 4), ==, 0);
  FC_CHECK_INT(fc_haar_detect(c, g, 10, 10, W, &p, out, 4), ==, 0); /* smaller than 24×24 */
  free(g);
  fc_haar_destroy(c);
}

static void test_bad_args(void) {
  fc_haar *c = load_cascade(fc_haar_default_cascade());
  FC_REQUIRE(c);
  uint8_t g[64 * 64] = {0};
  fc_rect out[1];
  fc_haar_params p = fc_haar_params_default();
  p.scale_factor = 1.0; /* would never terminate */
  FC_CHECK_INT(fc_haar_detect(c, g, 64, 64, 64, &p, out, 1), ==, FC_EINVAL);
  p = fc_haar_params_default();
  FC_CHECK_INT(fc_haar_detect(c, NULL, 64, 64, 64, &p, out, 1), ==, FC_EINVAL);
  FC_CHECK_INT(fc_haar_detect(c, g, 64, 64, 32, &p, out, 1), ==, FC_EINVAL); /* stride < w */
  FC_CHECK_INT(fc_haar_detect(c, g, 64, 64, 64, &p, NULL, 1), ==, FC_EINVAL);
  FC_CHECK_INT(fc_haar_detect(NULL, g, 64, 64, 64, &p, out, 1), ==, FC_EINVAL);
  fc_haar_destroy(c);
  fc_haar_destroy(NULL);
}

typedef struct job {
  const fc_haar *c;
  const uint8_t *g;
  int w, h, n;
  fc_rect out[64];
} job;

static void *run_job(void *arg) {
  job *j = arg;
  fc_haar_params p = fc_haar_params_default();
  p.min_neighbors = 0;
  j->n = fc_haar_detect(j->c, j->g, j->w, j->h, j->w, &p, j->out, 64);
  return NULL;
}

/* One cascade, three threads at once: each must get the single-threaded answer. */
static void test_threads(void) {
  int w, h;
  uint8_t *g = astronaut_gray(&w, &h);
  FC_REQUIRE(g);
  fc_haar *c = load_cascade(fc_haar_default_cascade());
  if (!c) free(g);
  FC_REQUIRE(c);
  job ref = {c, g, w, h, 0, {{0}}};
  run_job(&ref);
  job jobs[3];
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    jobs[i] = ref;
    jobs[i].n = -1;
    memset(jobs[i].out, 0, sizeof jobs[i].out);
    FC_CHECK_INT(pthread_create(&th[i], NULL, run_job, &jobs[i]), ==, 0);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    FC_CHECK_INT(jobs[i].n, ==, ref.n);
    FC_CHECK(memcmp(jobs[i].out, ref.out, sizeof ref.out) == 0);
  }
  fc_haar_destroy(c);
  free(g);
}

/* ---- Hand-made cascades ---------------------------------------------------------------- */

/* A 12×12 window, one stage, one stump on the feature "2·right half − whole window"
 * (threshold 0, leaves −1/+1, stage threshold 0.5): it fires where the right half is brighter.
 * The pieces below are put together, or left out, to make good and broken files. */
#define HEAD_T(feature_type)                                                                       \
  "<?xml version=\"1.0\"?>\n<opencv_storage>\n"                                                    \
  "<cascade type_id=\"opencv-cascade-classifier\"><stageType>BOOST</stageType>\n"                  \
  "  <featureType>" feature_type "</featureType>\n  <height>12</height>\n  <width>12</width>\n"    \
  "  <stageParams>\n    <maxWeakCount>1</maxWeakCount></stageParams>\n"                            \
  "  <featureParams>\n    <maxCatCount>0</maxCatCount></featureParams>\n"                          \
  "  <stageNum>1</stageNum>\n"
#define HEAD HEAD_T("HAAR")
#define STAGES_T(threshold, nodes, leaves)                                                         \
  "  <stages>\n    <_>\n      <maxWeakCount>1</maxWeakCount>\n"                                    \
  "      <stageThreshold>" threshold "</stageThreshold>\n      <weakClassifiers>\n        <_>\n"   \
  "          <internalNodes>\n            " nodes "</internalNodes>\n"                             \
  "          <leafValues>\n            " leaves "</leafValues></_></weakClassifiers></_>"          \
  "</stages>\n"
#define STAGES_WITH(nodes, leaves) STAGES_T("5.0e-01", nodes, leaves)
#define STAGES STAGES_WITH("0 -1 0 0.", "-1. 1.")
#define FEATURES_WITH(rects)                                                                       \
  "  <features>\n    <_>\n      <rects>\n" rects "</rects></_></features>"
#define RECT(r) "        <_>\n          " r "</_>\n"
#define FEATURES FEATURES_WITH(RECT("0 0 12 12 -1.") RECT("6 0 6 12 2."))
#define TAIL "</cascade>\n</opencv_storage>\n"

static const char *write_tmp(const char *name, const char *data, size_t n) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return path;
  if (n) fwrite(data, 1, n, f);
  fclose(f);
  return path;
}

/* Runs a hand-made cascade at scale 1 only on a 40×h image (h <= 21) whose columns are dark or
 * bright as `bright` says. Returns the candidate count; sets *seen to the set of (x, y) found
 * (bit x/2·5 + y/2) and *bad to the number of boxes off the even 12×12 grid. */
static int tiny_run(const fc_haar *c, int h, int (*bright)(int), int neighbors, fc_rect *out,
                    uint64_t *seen, int *bad) {
  enum { W = 40 };
  uint8_t g[W * 21];
  for (int i = 0; i < W * h; i++) g[i] = bright(i % W) ? 255 : 0;
  fc_haar_params p = {1.1, neighbors, 0, 12}; /* max 12: scale 1 only */
  int n = fc_haar_detect(c, g, W, h, W, &p, out, 64);
  *seen = 0, *bad = 0;
  for (int i = 0; i < n && i < 64; i++) {
    int off = out[i].x % 2 || out[i].y % 2 || out[i].x > 18 || out[i].y > 8 || out[i].w != 12 ||
              out[i].h != 12;
    *bad += off;
    if (!off) *seen |= 1ull << (out[i].x / 2 * 5 + out[i].y / 2);
  }
  return n;
}

/* The set of (x, y) for x in x0..x1 and y in 0..y1, both in steps of 2, as tiny_run sets it. */
static uint64_t grid(int x0, int x1, int y1) {
  uint64_t m = 0;
  for (int x = x0; x <= x1; x += 2)
    for (int y = 0; y <= y1; y += 2) m |= 1ull << (x / 2 * 5 + y / 2);
  return m;
}

static int edge20(int x) { return x >= 20; }
static int edge20_mirrored(int x) { return x < 20; }
static int dark_band(int x) { return x < 10 || x >= 20; } /* bright | dark 10..19 | bright */

/* Hand-made cascades on vertical edges, where every candidate can be predicted. Each
 * expectation below was also checked against cv2 4.6 with the same XML and image. */
static void test_tiny_cascade(void) {
  static const char xml[] = HEAD STAGES FEATURES TAIL;
  const char *path = write_tmp("tiny.xml", xml, strlen(xml));
  fc_haar *c = load_cascade(path);
  unlink(path);
  FC_REQUIRE(c);
  fc_rect out[64];
  uint64_t seen;
  int bad;
  /* Flat windows are rejected by σ <= 10, so the inner 10×10 rect must straddle the edge at
   * x = 20: x ∈ {10, 12, ..., 18} (step 2). With 21 rows, y ∈ {0, 2, ..., 8}. */
  FC_CHECK_INT(tiny_run(c, 21, edge20, 0, out, &seen, &bad), ==, 25);
  FC_CHECK_INT(bad, ==, 0);
  FC_CHECK(seen == grid(10, 18, 8));
  /* With 20 rows y = 8 is a valid position too, but cv2's row stripes (one stripe of
   * 4 steps here) end before it, so it is never scanned. */
  FC_CHECK_INT(tiny_run(c, 20, edge20, 0, out, &seen, &bad), ==, 20);
  FC_CHECK_INT(bad, ==, 0);
  FC_CHECK(seen == grid(10, 18, 6));
  /* Mirrored edge (bright on the left): the feature is negative, nothing fires. */
  FC_CHECK_INT(tiny_run(c, 20, edge20_mirrored, 0, out, &seen, &bad), ==, 0);
  /* Bright-dark-bright: windows at x = 0, 4, 8 straddle the falling edge and fail stage 0, so
   * x = 2, 6 and 10 are skipped; 10 would have passed. */
  FC_CHECK_INT(tiny_run(c, 20, dark_band, 0, out, &seen, &bad), ==, 16);
  FC_CHECK(seen == grid(12, 18, 6));
  /* Grouping: neighbours 2 px apart are similar (δ = 0.2·12 = 2.4), so the 20 boxes form one
   * cluster, averaged to (14, 3). */
  FC_CHECK_INT(tiny_run(c, 20, edge20, 3, out, &seen, &bad), ==, 1);
  FC_CHECK(rect_eq(out[0], 14, 3, 12, 12));
  fc_haar_destroy(c);

  /* Stage threshold 1.000001 with leaf +1: passes only because, like OpenCV, the loader lowers
   * every stage threshold by 1e-5. At 1.0001 it fails. */
  static const char eps_xml[] = HEAD STAGES_T("1.000001", "0 -1 0 0.", "-1. 1.") FEATURES TAIL;
  static const char no_xml[] = HEAD STAGES_T("1.0001", "0 -1 0 0.", "-1. 1.") FEATURES TAIL;
  const char *xmls[2] = {eps_xml, no_xml};
  const int want[2] = {20, 0};
  for (int k = 0; k < 2; k++) {
    path = write_tmp("tiny_eps.xml", xmls[k], strlen(xmls[k]));
    c = load_cascade(path);
    unlink(path);
    FC_REQUIRE(c);
    FC_CHECK_INT(tiny_run(c, 20, edge20, 0, out, &seen, &bad), ==, want[k]);
    fc_haar_destroy(c);
  }
}

static void expect_reject(const char *name, const char *xml, size_t n, int code) {
  const char *path = write_tmp(name, xml, n);
  int err = 12345;
  fc_error_clear();
  fc_haar *c = fc_haar_load(path, &err);
  const char *detail = fc_error_detail(err);
  FC_CHECK(c == NULL);
  FC_CHECK_INT(err, ==, code);
  FC_CHECK(strstr(detail, path) != NULL && strlen(detail) > strlen(path) + 2);
  if (c || err != code) fprintf(stderr, "  %s: got %d (%s)\n", name, err, detail);
  fc_haar_destroy(c);
  unlink(path);
}

#define REJECT(name, xml, code) expect_reject(name, xml, sizeof(xml) - 1, code)

static void test_malformed_xml(void) {
  expect_reject("empty.xml", "", 0, FC_EFORMAT);
  REJECT("blank.xml", "  \n\n ", FC_EFORMAT);
  REJECT("binary.xml", "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", FC_EFORMAT);
  REJECT("wrong_root.xml", "<?xml version=\"1.0\"?>\n<svg><cascade/></svg>\n", FC_EFORMAT);
  REJECT("no_cascade.xml", "<opencv_storage><foo>1</foo></opencv_storage>", FC_EFORMAT);
  REJECT("empty_cascade.xml",
         "<opencv_storage><cascade type_id=\"opencv-cascade-classifier\"></cascade>"
         "</opencv_storage>",
         FC_EFORMAT);
  REJECT("missing_stages.xml", HEAD FEATURES TAIL, FC_EFORMAT);
  REJECT("missing_features.xml", HEAD STAGES TAIL, FC_EFORMAT);
  REJECT("unclosed.xml", HEAD STAGES FEATURES "</cascade>\n", FC_EFORMAT);
  REJECT("bad_number.xml", HEAD STAGES_WITH("0 -1 zero 0.", "-1. 1.") FEATURES TAIL, FC_EFORMAT);
  REJECT("bad_feature_index.xml", HEAD STAGES_WITH("0 -1 7 0.", "-1. 1.") FEATURES TAIL,
         FC_EFORMAT);
  REJECT("bad_child.xml", HEAD STAGES_WITH("1 -1 0 0.", "-1. 1.") FEATURES TAIL, FC_EFORMAT);
  REJECT("few_leaves.xml", HEAD STAGES_WITH("0 -1 0 0.", "-1.") FEATURES TAIL, FC_EFORMAT);
  REJECT("node_groups.xml", HEAD STAGES_WITH("0 -1 0", "-1. 1.") FEATURES TAIL, FC_EFORMAT);
  REJECT("rect_outside.xml",
         HEAD STAGES FEATURES_WITH(RECT("0 0 12 12 -1.") RECT("6 0 7 12 2.")) TAIL, FC_EFORMAT);
  REJECT("rect_fields.xml", HEAD STAGES FEATURES_WITH(RECT("0 0 12 12") RECT("6 0 6 12 2.")) TAIL,
         FC_EFORMAT);
  /* Well-formed, but not something we evaluate. */
  REJECT("old_format.xml",
         "<opencv_storage><haarcascade_frontalface_alt type_id=\"opencv-haar-classifier\">"
         "<size>20 20</size></haarcascade_frontalface_alt></opencv_storage>",
         FC_EUNSUPPORTED);
  REJECT("lbp.xml", HEAD_T("LBP") STAGES FEATURES TAIL, FC_EUNSUPPORTED);

  /* The real cascade, cut in half. */
  FILE *f = fopen(fc_haar_default_cascade(), "rb");
  FC_REQUIRE(f);
  static char half[200000];
  size_t n = fread(half, 1, sizeof half, f);
  fclose(f);
  FC_REQUIRE(n == sizeof half);
  expect_reject("truncated.xml", half, n, FC_EFORMAT);
}

static void test_missing_file(void) {
  char path[128];
  snprintf(path, sizeof path, "%s/no_such_cascade.xml", tmpdir);
  int err = 0;
  fc_haar *c = fc_haar_load(path, &err);
  FC_CHECK(c == NULL);
  FC_CHECK_INT(err, ==, FC_ENOTFOUND);
  FC_CHECK(strstr(fc_error_detail(err), path) != NULL);
  fc_haar_destroy(c);
  FC_CHECK(fc_haar_load(path, NULL) == NULL); /* err may be NULL */
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/fc_test_haar_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  FC_RUN(test_astronaut_default);
  FC_RUN(test_astronaut_alt2);
  FC_RUN(test_raw_candidates);
  FC_RUN(test_opencv_table);
  FC_RUN(test_blank_and_tiny);
  FC_RUN(test_bad_args);
  FC_RUN(test_threads);
  FC_RUN(test_tiny_cascade);
  FC_RUN(test_malformed_xml);
  FC_RUN(test_missing_file);
  fc_test_rmtree(tmpdir);
  FC_TEST_EXIT();
}
