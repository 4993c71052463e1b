/* Tests for src/avatar/haar.c: OpenCV's reference boxes on the astronaut (both cascades, grouped
 * and raw), a hand-made one-stump cascade whose candidates can be worked out by hand, blank and
 * tiny images, thread safety, argument checks, and malformed or foreign cascade files (each
 * rejected with the right code and a detail naming the file).
 * Reference numbers: shared/research/formats.md §2.4 (cv2 4.6 detectMultiScale). */
#include "facecast/error.h"
#include "facecast/haar.h"
#include "facecast/image.h"

#include "fc_test.h"

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
    fprintf(stderr, "  largest [%d,%d,%d,%d], OpenCV [%d,%d,%d,%d]\n", r.x, r.y, r.w, r.h,
            want.x, want.y, want.w, want.h);
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
#define HEAD_T(feature_type)                                                                   \
  "<?xml version=\"1.0\"?>\n<opencv_storage>\n"                                                \
  "<cascade type_id=\"opencv-cascade-classifier\"><stageType>BOOST</stageType>\n"              \
  "  <featureType>" feature_type "</featureType>\n  <height>12</height>\n  <width>12</width>\n" \
  "  <stageParams>\n    <maxWeakCount>1</maxWeakCount></stageParams>\n"                        \
  "  <featureParams>\n    <maxCatCount>0</maxCatCount></featureParams>\n"                      \
  "  <stageNum>1</stageNum>\n"
#define HEAD HEAD_T("HAAR")
#define STAGES_WITH(nodes, leaves)                                                             \
  "  <stages>\n    <_>\n      <maxWeakCount>1</maxWeakCount>\n"                                \
  "      <stageThreshold>5.0e-01</stageThreshold>\n      <weakClassifiers>\n        <_>\n"     \
  "          <internalNodes>\n            " nodes "</internalNodes>\n"                         \
  "          <leafValues>\n            " leaves "</leafValues></_></weakClassifiers></_>"      \
  "</stages>\n"
#define STAGES STAGES_WITH("0 -1 0 0.", "-1. 1.")
#define FEATURES_WITH(rects)                                                                   \
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

/* The hand-made cascade on a vertical edge: every candidate can be predicted. */
static void test_tiny_cascade(void) {
  static const char xml[] = HEAD STAGES FEATURES TAIL;
  const char *path = write_tmp("tiny.xml", xml, strlen(xml));
  fc_haar *c = load_cascade(path);
  unlink(path);
  FC_REQUIRE(c);
  enum { W = 40, H = 20 };
  uint8_t g[W * H];
  for (int i = 0; i < W * H; i++) g[i] = i % W < 20 ? 0 : 255;
  fc_haar_params p = {1.1, 0, 0, 12}; /* max 12: scale 1 only */
  fc_rect out[64];
  int n = fc_haar_detect(c, g, W, H, W, &p, out, 64);
  /* Step 2 in x and y; flat windows are rejected by σ <= 10, so the inner 10×10 rect must
   * straddle the edge at x = 20: x ∈ {10, 12, ..., 18}, y ∈ {0, 2, ..., 8}. */
  FC_CHECK_INT(n, ==, 25);
  int bad = 0, seen = 0;
  for (int i = 0; i < n && i < 64; i++) {
    bad += out[i].x < 10 || out[i].x > 18 || out[i].x % 2 || out[i].y % 2 || out[i].y > 8 ||
           out[i].w != 12 || out[i].h != 12;
    if (!bad) seen |= 1 << ((out[i].x - 10) / 2 * 5 + out[i].y / 2);
  }
  FC_CHECK_INT(bad, ==, 0);
  FC_CHECK_INT(seen, ==, (1 << 25) - 1);
  /* Mirrored edge (bright on the left): the feature is negative, nothing fires. */
  for (int i = 0; i < W * H; i++) g[i] = (uint8_t)(255 - g[i]);
  FC_CHECK_INT(fc_haar_detect(c, g, W, H, W, &p, out, 64), ==, 0);
  /* Grouping: neighbours 2 px apart are similar (δ = 0.2·12 = 2.4), so the 25 boxes form one
   * cluster, averaged to (14, 4). */
  for (int i = 0; i < W * H; i++) g[i] = (uint8_t)(255 - g[i]);
  p.min_neighbors = 3;
  n = fc_haar_detect(c, g, W, H, W, &p, out, 64);
  FC_CHECK_INT(n, ==, 1);
  FC_CHECK(n < 1 || rect_eq(out[0], 14, 4, 12, 12));
  fc_haar_destroy(c);
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
  REJECT("bad_number.xml", HEAD STAGES_WITH("0 -1 zero 0.", "-1. 1.") FEATURES TAIL,
         FC_EFORMAT);
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
  FC_RUN(test_blank_and_tiny);
  FC_RUN(test_bad_args);
  FC_RUN(test_threads);
  FC_RUN(test_tiny_cascade);
  FC_RUN(test_malformed_xml);
  FC_RUN(test_missing_file);
  rmdir(tmpdir);
  FC_TEST_EXIT();
}
