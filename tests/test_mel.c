/* Tests for the Wav2Lip mel (src/audio/mel.c).
 *
 * Design note. The mel must match librosa as Wav2Lip uses it, so the main check compares every
 * value against golden vectors from an independent float64 numpy/scipy reference
 * (tools/gen_mel_golden.py, which documents the tests/data/mel_<name>.bin format). The golden
 * signals start and end mid-waveform and include tiny lengths (1, 2, 3, 150, 399, 401 samples)
 * where numpy's reflect padding mirrors more than once, so wrong pre-emphasis or padding fails
 * here (the generator asserts each such mistake moves some value by > 0.05, far above the 1e-3
 * tolerance). Windows are checked against the generator's column indices, which it computes as
 * int(i * 80 / 25) in floating point, independently of the C integer formula. The remaining
 * cases cover n = 0, bad arguments, short-mel window padding, handle reuse, concurrent handles,
 * and time 60 s of audio. */
#include "facecast/error.h"
#include "audio/mel.h"

#include "fc_test.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#ifndef FC_TEST_DATA_DIR
#error "FC_TEST_DATA_DIR must name tests/data"
#endif

#define TOL 1e-3

static double max_err_all = 0.0;

typedef struct {
  int kind;
  size_t n, bands, ncols, nwin;
  float *pcm;
  float *mel;
  int *win_frame, *win_start;
} golden;

static int32_t le_i32(const unsigned char *p) {
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  int32_t v;
  memcpy(&v, &u, sizeof v);
  return v;
}

static float le_f32(const unsigned char *p) {
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  float v;
  memcpy(&v, &u, sizeof v);
  return v;
}

static void golden_free(golden *g) {
  free(g->pcm);
  free(g->mel);
  free(g->win_frame);
  free(g->win_start);
  memset(g, 0, sizeof *g);
}

/* Reads tests/data/mel_<name>.bin; 0 on success. */
static int golden_load(const char *name, golden *g) {
  char path[512];
  snprintf(path, sizeof path, "%s/mel_%s.bin", FC_TEST_DATA_DIR, name);
  memset(g, 0, sizeof *g);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s (run tools/gen_mel_golden.py)\n", path);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *buf = size > 0 ? malloc((size_t)size) : NULL;
  int ok = buf && fread(buf, 1, (size_t)size, f) == (size_t)size && size >= 28 &&
           memcmp(buf, "FCML", 4) == 0 && le_i32(buf + 4) == 1;
  fclose(f);
  if (ok) {
    g->kind = le_i32(buf + 8);
    int32_t n = le_i32(buf + 12), bands = le_i32(buf + 16), ncols = le_i32(buf + 20),
            nwin = le_i32(buf + 24);
    size_t sample_size = g->kind == 16 ? 2 : 4;
    ok = (g->kind == 16 || g->kind == 32) && n >= 0 && bands == FC_MEL_BANDS && ncols > 0 &&
         nwin >= 0 &&
         (size_t)size == 28 + sample_size * (size_t)n + 4 * (size_t)bands * (size_t)ncols +
                             8 * (size_t)nwin;
    if (ok) {
      g->n = (size_t)n;
      g->bands = (size_t)bands;
      g->ncols = (size_t)ncols;
      g->nwin = (size_t)nwin;
      g->pcm = malloc(sizeof(float) * (g->n + 1));
      g->mel = malloc(sizeof(float) * g->bands * g->ncols);
      g->win_frame = malloc(sizeof(int) * (g->nwin + 1));
      g->win_start = malloc(sizeof(int) * (g->nwin + 1));
      ok = g->pcm && g->mel && g->win_frame && g->win_start;
    }
    if (ok) {
      const unsigned char *p = buf + 28;
      for (size_t i = 0; i < g->n; i++, p += sample_size) {
        if (g->kind == 16) {
          int16_t s = (int16_t)(uint16_t)(p[0] | p[1] << 8);
          g->pcm[i] = (float)s / 32768.0f;
        } else {
          g->pcm[i] = le_f32(p);
        }
      }
      for (size_t i = 0; i < g->bands * g->ncols; i++, p += 4) g->mel[i] = le_f32(p);
      for (size_t i = 0; i < g->nwin; i++, p += 8) {
        g->win_frame[i] = le_i32(p);
        g->win_start[i] = le_i32(p + 4);
      }
    }
  }
  free(buf);
  if (!ok) {
    fprintf(stderr, "%s: malformed golden file\n", path);
    golden_free(g);
    return -1;
  }
  return 0;
}

static void check_golden_case(const char *name) {
  golden g;
  FC_REQUIRE(golden_load(name, &g) == 0);
  int err = 0;
  fc_mel *m = fc_mel_create(&err);
  FC_CHECK_INT(err, ==, FC_OK);
  float *mel = malloc(sizeof(float) * FC_MEL_BANDS * g.ncols);
  float win[FC_MEL_BANDS * FC_MEL_WINDOW];
  if (!m || !mel) {
    FC_CHECK(m && mel);
    goto done;
  }
  FC_CHECK_INT(fc_mel_columns(g.n), ==, g.ncols);
  FC_CHECK_INT(fc_mel_compute(m, g.pcm, g.n, mel), ==, FC_OK);

  double max_err = 0.0;
  size_t worst = 0;
  int floors = 0, ceilings = 0;
  for (size_t i = 0; i < FC_MEL_BANDS * g.ncols; i++) {
    double e = fabs((double)mel[i] - (double)g.mel[i]);
    if (!(e <= max_err)) { /* also catches NaN */
      max_err = isnan(e) ? INFINITY : e;
      worst = i;
    }
    floors += g.mel[i] == -4.0f;
    ceilings += g.mel[i] == 4.0f;
  }
  fprintf(stderr, "  mel_%-6s n=%-6zu cols=%-4zu max |err| %.3g (band %zu col %zu)%s%s\n", name,
          g.n, g.ncols, max_err, worst / g.ncols, worst % g.ncols, floors ? ", hits -4" : "",
          ceilings ? ", hits +4" : "");
  FC_CHECK_NEAR(max_err, 0.0, TOL);
  if (max_err > max_err_all) max_err_all = max_err;

  /* Windows: the C window must be exactly the columns the reference chose. */
  for (size_t w = 0; w < g.nwin; w++) {
    int start = g.win_start[w];
    fc_mel_window(mel, g.ncols, g.win_frame[w], win);
    int bad = 0;
    for (size_t b = 0; b < FC_MEL_BANDS; b++)
      for (size_t c = 0; c < FC_MEL_WINDOW; c++) {
        float want;
        if (start >= 0)
          want = mel[b * g.ncols + (size_t)start + c];
        else
          want = c < g.ncols ? mel[b * g.ncols + c] : -4.0f;
        bad += win[b * FC_MEL_WINDOW + c] != want;
      }
    if (bad) fprintf(stderr, "  mel_%s: window of frame %d (start %d) differs\n", name,
                     g.win_frame[w], start);
    FC_CHECK_INT(bad, ==, 0);
  }
done:
  free(mel);
  fc_mel_destroy(m);
  golden_free(&g);
}

static void test_mel_golden(void) {
  static const char *const names[] = {"mix", "short", "loud", "n1", "n2", "n3",
                                      "n150", "n399", "n401", "n2999", "n3001"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) check_golden_case(names[i]);
  fprintf(stderr, "  max |err| over all golden values: %.3g (tolerance %g)\n", max_err_all, TOL);
}

static void test_mel_columns(void) {
  FC_CHECK_INT(fc_mel_columns(0), ==, 1);
  FC_CHECK_INT(fc_mel_columns(1), ==, 1);
  FC_CHECK_INT(fc_mel_columns(199), ==, 1);
  FC_CHECK_INT(fc_mel_columns(200), ==, 2);
  FC_CHECK_INT(fc_mel_columns(16000), ==, 81);
  FC_CHECK_INT(fc_mel_columns(20837), ==, 105);
}

static int all_equal(const float *v, size_t n, float x) {
  for (size_t i = 0; i < n; i++)
    if (v[i] != x) return 0;
  return 1;
}

/* n = 0 is silence: one column of the floor; tiny inputs give finite in-range values. */
static void test_mel_empty_and_tiny(void) {
  int err;
  fc_mel *m = fc_mel_create(&err);
  FC_REQUIRE(m);
  float out[FC_MEL_BANDS * 2];
  for (size_t i = 0; i < FC_MEL_BANDS * 2; i++) out[i] = 123.0f;
  FC_CHECK_INT(fc_mel_compute(m, NULL, 0, out), ==, FC_OK);
  FC_CHECK(all_equal(out, FC_MEL_BANDS, -4.0f));
  FC_CHECK(out[FC_MEL_BANDS] == 123.0f); /* wrote exactly 80 x 1 */
  float one = 0.5f;
  FC_CHECK_INT(fc_mel_compute(m, &one, 0, out), ==, FC_OK);
  FC_CHECK(all_equal(out, FC_MEL_BANDS, -4.0f));

  /* Every length up to two hops, and 400/401/402 where the pad first fits. */
  float x[402], *mel = malloc(sizeof(float) * FC_MEL_BANDS * 3);
  FC_REQUIRE(mel);
  uint32_t seed = 12345;
  for (size_t i = 0; i < 402; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = (float)((int32_t)(seed >> 8) - (1 << 23)) / (float)(1 << 23);
  }
  for (size_t n = 1; n <= 402; n++) {
    size_t cols = fc_mel_columns(n);
    FC_CHECK_INT(fc_mel_compute(m, x, n, mel), ==, FC_OK);
    int bad = 0;
    for (size_t i = 0; i < FC_MEL_BANDS * cols; i++) bad += !(mel[i] >= -4.0f && mel[i] <= 4.0f);
    FC_CHECK_INT(bad, ==, 0);
  }
  /* Silence and a constant (pure DC: below the 55 Hz first band) are the floor everywhere. */
  float zeros[300] = {0}, dc[300];
  for (size_t i = 0; i < 300; i++) dc[i] = 0.25f;
  FC_CHECK_INT(fc_mel_compute(m, zeros, 300, mel), ==, FC_OK);
  FC_CHECK(all_equal(mel, FC_MEL_BANDS * 2, -4.0f));
  FC_CHECK_INT(fc_mel_compute(m, dc, 1, mel), ==, FC_OK);
  FC_CHECK(all_equal(mel, FC_MEL_BANDS, -4.0f));
  /* NaN input does not crash and stays in range (the max(1e-5, .) floor absorbs it). */
  x[0] = NAN;
  FC_CHECK_INT(fc_mel_compute(m, x, 250, mel), ==, FC_OK);
  int bad = 0;
  for (size_t i = 0; i < FC_MEL_BANDS * 2; i++) bad += !(mel[i] >= -4.0f && mel[i] <= 4.0f);
  FC_CHECK_INT(bad, ==, 0);
  free(mel);
  fc_mel_destroy(m);
}

static void test_mel_bad_args(void) {
  int err;
  fc_mel *m = fc_mel_create(&err);
  FC_REQUIRE(m);
  float pcm[10] = {0}, out[FC_MEL_BANDS];
  FC_CHECK_INT(fc_mel_compute(NULL, pcm, 10, out), ==, FC_EINVAL);
  FC_CHECK_INT(fc_mel_compute(m, pcm, 10, NULL), ==, FC_EINVAL);
  FC_CHECK_INT(fc_mel_compute(m, NULL, 10, out), ==, FC_EINVAL);
  FC_CHECK_INT(fc_mel_compute(m, pcm, SIZE_MAX, out), ==, FC_EINVAL);
  fc_error_clear();
  fc_mel_destroy(NULL);
  fc_mel_window(out, 1, 0, NULL); /* no output: nothing to do, no crash */
  fc_mel_destroy(m);
  fc_mel *m2 = fc_mel_create(NULL); /* err is optional */
  FC_CHECK(m2 != NULL);
  fc_mel_destroy(m2);
}

/* Windows on synthetic mels whose values name their cell (band * 1000 + column). */
static void test_mel_window_rules(void) {
  enum { COLS = 40 };
  static float mel[FC_MEL_BANDS * COLS];
  float win[FC_MEL_BANDS * FC_MEL_WINDOW];
  for (int b = 0; b < FC_MEL_BANDS; b++)
    for (int c = 0; c < COLS; c++) mel[b * COLS + c] = (float)(b * 1000 + c);

  /* start = int(frame * 3.2); clamp to COLS - 16 = 24 from frame 8 (25.6 -> 25 > 24). */
  static const int frames[][2] = {{0, 0}, {1, 3}, {2, 6}, {3, 9}, {4, 12}, {5, 16}, {7, 22},
                                  {8, 24}, {9, 24}, {1000, 24}, {INT_MAX, 24}, {-1, 0},
                                  {INT_MIN, 0}};
  for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
    fc_mel_window(mel, COLS, frames[i][0], win);
    int bad = 0;
    for (int b = 0; b < FC_MEL_BANDS; b++)
      for (int c = 0; c < FC_MEL_WINDOW; c++)
        bad += win[b * FC_MEL_WINDOW + c] != (float)(b * 1000 + frames[i][1] + c);
    if (bad) fprintf(stderr, "  frame %d: window does not start at %d\n", frames[i][0], frames[i][1]);
    FC_CHECK_INT(bad, ==, 0);
  }

  /* Exactly 16 columns: every frame gets all of them. */
  static float mel16[FC_MEL_BANDS * 16];
  for (int b = 0; b < FC_MEL_BANDS; b++)
    for (int c = 0; c < 16; c++) mel16[b * 16 + c] = (float)(b * 1000 + c);
  fc_mel_window(mel16, 16, 77, win);
  FC_CHECK(memcmp(win, mel16, sizeof win) == 0);

  /* Fewer than 16 columns: left-aligned, the rest is the -4 floor, for any frame. */
  static float mel5[FC_MEL_BANDS * 5];
  for (int b = 0; b < FC_MEL_BANDS; b++)
    for (int c = 0; c < 5; c++) mel5[b * 5 + c] = (float)(b * 1000 + c);
  for (int frame = 0; frame < 3; frame++) {
    fc_mel_window(mel5, 5, frame, win);
    int bad = 0;
    for (int b = 0; b < FC_MEL_BANDS; b++)
      for (int c = 0; c < FC_MEL_WINDOW; c++)
        bad += win[b * FC_MEL_WINDOW + c] != (c < 5 ? (float)(b * 1000 + c) : -4.0f);
    FC_CHECK_INT(bad, ==, 0);
  }
  fc_mel_window(NULL, 0, 0, win);
  FC_CHECK(all_equal(win, FC_MEL_BANDS * FC_MEL_WINDOW, -4.0f));
}

/* A synthetic speech-like test signal of n samples (deterministic). */
static void synth(float *x, size_t n) {
  uint32_t seed = 777;
  for (size_t i = 0; i < n; i++) {
    double t = (double)i / 16000.0;
    seed = seed * 1664525u + 1013904223u;
    double noise = (double)((int32_t)(seed >> 8) - (1 << 23)) / (double)(1 << 23);
    double env = 0.5 + 0.5 * sin(2.0 * M_PI * 3.0 * t);
    x[i] = (float)(env * (0.3 * sin(2.0 * M_PI * 180.0 * t) + 0.1 * sin(2.0 * M_PI * 2400.0 * t)) +
                   0.02 * noise);
  }
}

/* The same input gives bit-identical output on a reused handle and on a fresh one: no state
 * leaks between calls (e.g. from a longer previous input). */
static void test_mel_reuse(void) {
  enum { N = 16000 + 77 };
  static float x[N], a[FC_MEL_BANDS * (1 + N / 200)], b[FC_MEL_BANDS * (1 + N / 200)];
  synth(x, N);
  int err;
  fc_mel *m1 = fc_mel_create(&err), *m2 = fc_mel_create(&err);
  FC_REQUIRE(m1 && m2);
  FC_CHECK_INT(fc_mel_compute(m1, x, N, a), ==, FC_OK);
  FC_CHECK_INT(fc_mel_compute(m1, x + 100, 5000, b), ==, FC_OK);
  FC_CHECK_INT(fc_mel_compute(m1, x, N, b), ==, FC_OK);
  FC_CHECK(memcmp(a, b, sizeof a) == 0);
  FC_CHECK_INT(fc_mel_compute(m2, x, N, b), ==, FC_OK);
  FC_CHECK(memcmp(a, b, sizeof a) == 0);
  fc_mel_destroy(m1);
  fc_mel_destroy(m2);
}

/* One handle per thread, created and destroyed concurrently (FFTW's planner is serialised
 * inside), each must give the single-threaded result. */
enum { THREADS = 4, TN = 8000 + 13 };
static float thread_x[TN];
static float thread_ref[FC_MEL_BANDS * (1 + TN / 200)];

static void *thread_main(void *arg) {
  int *ok = arg;
  *ok = 1;
  for (int rep = 0; rep < 5; rep++) {
    int err;
    fc_mel *m = fc_mel_create(&err);
    float *out = malloc(sizeof thread_ref);
    if (!m || !out || fc_mel_compute(m, thread_x, TN, out) != FC_OK ||
        memcmp(out, thread_ref, sizeof thread_ref) != 0)
      *ok = 0;
    free(out);
    fc_mel_destroy(m);
  }
  return NULL;
}

static void test_mel_threads(void) {
  synth(thread_x, TN);
  int err;
  fc_mel *m = fc_mel_create(&err);
  FC_REQUIRE(m);
  FC_CHECK_INT(fc_mel_compute(m, thread_x, TN, thread_ref), ==, FC_OK);
  fc_mel_destroy(m);
  pthread_t th[THREADS];
  int ok[THREADS];
  for (int i = 0; i < THREADS; i++) FC_REQUIRE(pthread_create(&th[i], NULL, thread_main, &ok[i]) == 0);
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    FC_CHECK(ok[i]);
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reports how long 60 s of audio takes (no pass/fail threshold: sanitizer builds are slow). */
static void test_mel_speed_60s(void) {
  const size_t n = 60 * 16000;
  size_t cols = fc_mel_columns(n);
  float *x = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * FC_MEL_BANDS * cols);
  int err;
  double t0 = now_s();
  fc_mel *m = fc_mel_create(&err);
  double t_create = now_s() - t0;
  if (!x || !out || !m) {
    FC_CHECK(x && out && m);
    goto done;
  }
  synth(x, n);
  double best = 1e9;
  for (int rep = 0; rep < 5; rep++) {
    t0 = now_s();
    FC_CHECK_INT(fc_mel_compute(m, x, n, out), ==, FC_OK);
    double dt = now_s() - t0;
    if (dt < best) best = dt;
  }
  int bad = 0;
  for (size_t i = 0; i < FC_MEL_BANDS * cols; i++) bad += !(out[i] >= -4.0f && out[i] <= 4.0f);
  FC_CHECK_INT(bad, ==, 0);
  fprintf(stderr, "  60 s of audio (%zu columns): fc_mel_compute %.2f ms (best of 5), create %.2f ms\n",
          cols, best * 1e3, t_create * 1e3);
done:
  fc_mel_destroy(m);
  free(x);
  free(out);
}

/* A range of columns equals the same columns of the whole mel, at the edges too. */
static void test_mel_column_range(void) {
  int err;
  fc_mel *m = fc_mel_create(&err);
  FC_REQUIRE(m);
  size_t n = 9000, nc = fc_mel_columns(n);
  float *x = malloc(n * sizeof(float)), *full = malloc(nc * FC_MEL_BANDS * sizeof(float));
  float part[FC_MEL_BANDS * 20];
  for (size_t i = 0; i < n; i++) x[i] = (float)(0.3 * sin(i * 0.05) + 0.1 * sin(i * 0.7));
  FC_REQUIRE(fc_mel_compute(m, x, n, full) == 0);
  size_t firsts[] = {0, 1, 13, nc - 20};
  for (int k = 0; k < 4; k++) {
    FC_REQUIRE(fc_mel_compute_columns(m, x, n, firsts[k], 20, part, 20) == 0);
    for (int b = 0; b < FC_MEL_BANDS; b++)
      for (int c = 0; c < 20; c++)
        FC_CHECK(part[b * 20 + c] == full[(size_t)b * nc + firsts[k] + c]);
  }
  FC_CHECK_INT(fc_mel_compute_columns(m, x, n, nc - 5, 20, part, 20), ==, FC_EINVAL);
  FC_CHECK_INT(fc_mel_compute_columns(m, x, n, 0, 21, part, 20), ==, FC_EINVAL);
  free(x);
  free(full);
  fc_mel_destroy(m);
}

int main(void) {
  FC_RUN(test_mel_columns);
  FC_RUN(test_mel_column_range);
  FC_RUN(test_mel_golden);
  FC_RUN(test_mel_empty_and_tiny);
  FC_RUN(test_mel_bad_args);
  FC_RUN(test_mel_window_rules);
  FC_RUN(test_mel_reuse);
  FC_RUN(test_mel_threads);
  FC_RUN(test_mel_speed_60s);
  FC_TEST_EXIT();
}
