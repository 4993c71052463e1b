/* The parametric backend's landmark renderer (v1) and the audio viseme classifier.
 *
 * Renderer: measured on the default avatar (a smile with teeth at rest) in the output patch —
 * a closed request hides the rest teeth, dark interior grows with open, wide and round change
 * the mouth's width, the patch border is the source itself, small shape steps give small
 * picture steps, and an avatar without landmarks still renders (v0). Classifier: on held-out
 * espeak-ng sentences its tracker output follows the phoneme-driven one better than the frame
 * level alone does, and silence is closed. */
#include "lipsync/audio_visemes.h"
#include "facecast/error.h"
#include "lipsync/visemes.h"
#include "fc_test.h"

#include <stdlib.h>
#include <string.h>

static fc_avatar *av;
static fc_lipsync *ls;
static uint8_t *mem;
static size_t cap;

static fc_patch render(fc_mouth m, const fc_avatar *a, fc_lipsync *l) {
  fc_patch p = {.rgb = mem, .alpha = mem + cap * 3};
  fc_lipsync_req rq = {.avatar = a, .mouth = m};
  if (fc_lipsync_run(l, &rq, &p, 1)) p.place.w = 0;
  return p;
}

static const uint8_t *src_px(int x, int y) {
  fc_rect where;
  const fc_image *im = fc_avatar_face_region(av, 0, &where);
  return im->rgb + (size_t)(y - where.y) * im->stride + 3 * (x - where.x);
}
static const uint8_t *patch_px(const fc_patch *p, int x, int y) {
  return p->rgb + ((size_t)(y - p->place.y) * p->place.w + (x - p->place.x)) * 3;
}

/* The photo's teeth are bright, nearly grey and a little yellow (about 242,226,213); its lips
 * (227,171,167) and skin (205,172,139) are more saturated, and the lower lip's specular
 * highlight (250,231,231), as grey, is pink rather than yellow (blue as high as green). */
static int is_teeth(const uint8_t *p) {
  int mx = p[0] > p[1] ? (p[0] > p[2] ? p[0] : p[2]) : (p[1] > p[2] ? p[1] : p[2]);
  int mn = p[0] < p[1] ? (p[0] < p[2] ? p[0] : p[2]) : (p[1] < p[2] ? p[1] : p[2]);
  return mx > 170 && mx - mn < 0.15f * mx && p[1] - p[2] >= 8;
}
static int is_dark(const uint8_t *p) { return p[0] < 100 && p[1] < 70 && p[2] < 80; }

/* The lower face around the mouth: corners ± a margin, nose base to chin. */
static fc_rect mouth_box(void) {
  const fc_point *l = fc_avatar_landmarks(av, 0);
  return (fc_rect){(int)l[48].x - 10, (int)l[33].y + 4, (int)(l[54].x - l[48].x) + 20,
                   (int)(l[8].y - l[33].y) - 8};
}

static int count(const fc_patch *p, fc_rect r, int (*pred)(const uint8_t *)) {
  int n = 0;
  for (int y = r.y; y < r.y + r.h; y++)
    for (int x = r.x; x < r.x + r.w; x++) n += pred(patch_px(p, x, y));
  return n;
}

static void test_closed_hides_teeth(void) {
  const fc_point *l = fc_avatar_landmarks(av, 0);
  FC_REQUIRE(l);
  /* the rest opening: between the inner lips, inside the inner corners */
  fc_rect gap = {(int)l[60].x + 3, (int)fminf(l[61].y, fminf(l[62].y, l[63].y)),
                 (int)(l[64].x - l[60].x) - 6, 0};
  gap.h = (int)fmaxf(l[65].y, fmaxf(l[66].y, l[67].y)) - gap.y;
  FC_REQUIRE(gap.w > 10 && gap.h > 4);
  int rest = 0;
  for (int y = gap.y; y < gap.y + gap.h; y++)
    for (int x = gap.x; x < gap.x + gap.w; x++) rest += is_teeth(src_px(x, y));
  FC_CHECK(rest > 50); /* the photo smiles with teeth */
  fc_patch p = render((fc_mouth){0, 0, 0}, av, ls);
  FC_REQUIRE(p.place.w > 0);
  FC_CHECK_INT(count(&p, gap, is_teeth), <=, 2);
  /* nor anything dark between the lips (a gap, a throat); the central half, as the photo's
   * own mouth corners are dark creases */
  fc_rect lips = {gap.x + gap.w / 4, gap.y - 4, gap.w / 2, gap.h + 8};
  FC_CHECK_INT(count(&p, lips, is_dark), <=, 2);
  /* while an open request shows them again (drawn) */
  p = render((fc_mouth){0.6f, 0.3f, 0}, av, ls);
  FC_CHECK(count(&p, lips, is_dark) > 100);
}

static void test_open_grows_interior(void) {
  fc_rect box = mouth_box();
  int prev = -1, n[4];
  for (int k = 0; k < 4; k++) {
    fc_patch p = render((fc_mouth){0.3f * k, 0.3f, 0}, av, ls);
    FC_REQUIRE(p.place.w > 0);
    n[k] = count(&p, box, is_dark);
    FC_CHECK(n[k] > prev);
    prev = n[k];
  }
  fprintf(stderr, "dark pixels at open 0, 0.3, 0.6, 0.9: %d %d %d %d\n", n[0], n[1], n[2], n[3]);
  FC_CHECK(n[1] > 100);
  /* roughly proportional: the opening's area grows with its height */
  FC_CHECK(n[3] > 2 * n[1]);
  FC_CHECK(n[2] > 1.3 * n[1] && n[3] > 1.2 * n[2]);
}

/* The widest row of dark interior pixels. */
static int interior_width(const fc_patch *p) {
  fc_rect b = mouth_box();
  int best = 0;
  for (int y = b.y; y < b.y + b.h; y++) {
    int lo = -1, hi = -1;
    for (int x = b.x; x < b.x + b.w; x++)
      if (is_dark(patch_px(p, x, y))) hi = x, lo = lo < 0 ? x : lo;
    if (lo >= 0 && hi - lo + 1 > best) best = hi - lo + 1;
  }
  return best;
}

static void test_wide_round(void) {
  fc_patch p = render((fc_mouth){0.5f, 1, 0}, av, ls);
  FC_REQUIRE(p.place.w > 0);
  int wide = interior_width(&p);
  p = render((fc_mouth){0.5f, 0, 0}, av, ls);
  int neutral = interior_width(&p);
  p = render((fc_mouth){0.5f, 0, 1}, av, ls);
  int round = interior_width(&p);
  fprintf(stderr, "interior width: wide %d, neutral %d, round %d px\n", wide, neutral, round);
  const fc_point *l = fc_avatar_landmarks(av, 0);
  float mw = l[54].x - l[48].x;
  FC_CHECK(wide > neutral + 0.1f * mw);
  FC_CHECK(round < neutral - 0.15f * mw);
}

/* Outside the anchor ring the patch is the source to the byte, and the mask fades to 0 there. */
static void test_border_is_source(void) {
  static const fc_mouth shapes[] = {{0, 0, 0}, {1, 1, 0}, {1, 0, 1}, {0.5f, 0.5f, 0.5f}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    fc_patch p = render(shapes[s], av, ls);
    FC_REQUIRE(p.place.w > 0);
    fc_rect r = p.place;
    FC_CHECK(!(r.x & 1) && !(r.y & 1) && !(r.w & 1) && !(r.h & 1) && (size_t)r.w * r.h <= cap);
    int bad = 0;
    for (int y = r.y; y < r.y + r.h; y++)
      for (int x = r.x; x < r.x + r.w; x++) {
        int e = x - r.x;
        e = e < r.x + r.w - 1 - x ? e : r.x + r.w - 1 - x;
        e = e < y - r.y ? e : y - r.y;
        e = e < r.y + r.h - 1 - y ? e : r.y + r.h - 1 - y;
        if (e < 8) bad += memcmp(patch_px(&p, x, y), src_px(x, y), 3) != 0;
      }
    FC_CHECK_INT(bad, ==, 0);
    FC_CHECK(p.alpha[0] == 0 && p.alpha[(size_t)r.w * r.h - 1] == 0);
    FC_CHECK(p.alpha[(size_t)(r.h / 2) * r.w + r.w / 2] == 255);
  }
}

/* A copy of a patch's pixels (the render buffer is reused), *n bytes. */
static uint8_t *keep(const fc_patch *p, size_t *n) {
  *n = (size_t)p->place.w * p->place.h * 3;
  uint8_t *c = malloc(*n);
  if (c) memcpy(c, p->rgb, *n);
  return c;
}

static double mean_diff(const uint8_t *a, const uint8_t *b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; i++) d += abs(a[i] - b[i]);
  return d / n;
}

/* The default avatar, head-and-shoulders (the framing the other lip-sync tests use). */
static fc_avatar *head_avatar(void) {
  int err;
  fc_avatar_params ap = fc_avatar_params_default();
  ap.framing = FC_FRAMING_HEAD;
  fc_avatar *a = fc_avatar_create_from_image(fc_avatar_default_path(), &ap, &err);
  if (!a) fprintf(stderr, "avatar: %s\n", fc_error_detail(err));
  return a;
}

/* A small step in the shape moves the picture a little, every step alike (no popping). */
static void test_smooth(void) {
  fc_patch p = render((fc_mouth){0, 0, 0}, av, ls);
  FC_REQUIRE(p.place.w > 0);
  size_t n;
  uint8_t *prev = keep(&p, &n);
  FC_REQUIRE(prev);
  double worst = 0, sum = 0;
  int steps = 0;
  for (int k = 1; k <= 50; k++) {
    float t = k / 50.0f;
    /* open, spread and round all sweep, out of phase */
    fc_mouth m = {t, 0.5f + 0.5f * sinf(6 * t), 0.5f - 0.5f * sinf(6 * t)};
    fc_patch q = render(m, av, ls);
    FC_REQUIRE(q.place.w == p.place.w && q.place.x == p.place.x);
    double d = mean_diff(q.rgb, prev, n);
    worst = fmax(worst, d), sum += d, steps++;
    memcpy(prev, q.rgb, n);
  }
  fprintf(stderr, "per-step change: mean %.3f, worst %.3f (grey levels per pixel)\n", sum / steps, worst);
  FC_CHECK(worst < 1.5);
  FC_CHECK(worst < 3 * sum / steps);
  free(prev);
}

/* Without landmarks (no shape model on the machine) the v0 renderer still moves the mouth. */
static void test_fallback_without_landmarks(void) {
  setenv("FACECAST_SHAPE_MODEL", "/nonexistent/shape_model.dat", 1);
  fc_avatar *bare = head_avatar();
  unsetenv("FACECAST_SHAPE_MODEL");
  FC_REQUIRE(bare);
  FC_CHECK(fc_avatar_landmarks(bare, 0) == NULL);
  size_t c = fc_lipsync_patch_capacity(ls, bare);
  FC_REQUIRE(c > 0 && c <= cap);
  fc_patch a = render((fc_mouth){0, 0, 0}, bare, ls);
  FC_REQUIRE(a.place.w > 0);
  size_t n;
  uint8_t *closed = keep(&a, &n);
  FC_REQUIRE(closed);
  fc_patch b = render((fc_mouth){0.9f, 0.3f, 0}, bare, ls);
  FC_CHECK(b.place.x == a.place.x && b.place.w == a.place.w);
  FC_CHECK(mean_diff(b.rgb, closed, n) > 2);
  free(closed);
  fc_avatar_destroy(bare);
}

/* Pearson's r from running sums (one pass). */
static double corr(const float *a, const float *b, int n) {
  double s[5] = {0}; /* Σa Σb Σab Σa² Σb² */
  for (int i = 0; i < n; i++) {
    double x = a[i], y = b[i];
    s[0] += x, s[1] += y, s[2] += x * y, s[3] += x * x, s[4] += y * y;
  }
  double cab = s[2] - s[0] * s[1] / n, caa = s[3] - s[0] * s[0] / n, cbb = s[4] - s[1] * s[1] / n;
  return caa > 0 && cbb > 0 ? cab / sqrt(caa * cbb) : 0;
}

/* Held-out sentences (never in the fit, see tools/fit_audio_visemes.c): the tracker driven by
 * audio against the tracker driven by espeak's phonemes. The bar: open must beat the frame
 * level alone (what v0's energy path had) by a margin, and wide/round — which the level
 * cannot tell at all — must correlate clearly (the fit gives 0.75–0.8 on these). */
static void test_classifier_held_out(void) {
  static const char *text[] = {
      "Tomorrow we will visit the museum and then have dinner by the harbour.",
      "Please put the blue bowl back on the top shelf.",
      "The old man opened the heavy wooden door very slowly.",
  };
  enum { MAXF = 1500 };
  static float a[3][MAXF], ph[3][MAXF], lev[MAXF];
  int n = 0;
  for (int s = 0; s < 3; s++) {
    fc_speech sp;
    FC_REQUIRE(fc_tts_speak(text[s], NULL, &sp) == 0);
    fc_viseme_tracker ta, tp;
    fc_viseme_tracker_init(&ta);
    fc_viseme_tracker_init(&tp);
    for (size_t f = 0; f + 640 <= sp.audio.n && n < MAXF; f += 640, n++) {
      fc_mouth x = fc_viseme_tracker_push(&ta, sp.audio.samples + f, (int64_t)f, NULL, 0);
      fc_mouth y = fc_viseme_tracker_push(&tp, sp.audio.samples + f, (int64_t)f, sp.ph, sp.n_ph);
      a[0][n] = x.open, a[1][n] = x.wide, a[2][n] = x.round;
      ph[0][n] = y.open, ph[1][n] = y.wide, ph[2][n] = y.round;
      double e = 0;
      for (int i = 0; i < 640; i++) e += sp.audio.samples[f + i] * sp.audio.samples[f + i];
      lev[n] = (float)(10 * log10(e / 640 + 1e-12));
    }
    fc_speech_free(&sp);
  }
  FC_REQUIRE(n > 200);
  double ro = corr(a[0], ph[0], n), rw = corr(a[1], ph[1], n), rr = corr(a[2], ph[2], n);
  double rl = corr(lev, ph[0], n);
  fprintf(stderr, "held-out (%d frames): open %.3f wide %.3f round %.3f; level alone vs open %.3f\n",
          n, ro, rw, rr, rl);
  FC_CHECK(ro > 0.7 && ro > rl + 0.05);
  FC_CHECK(rw > 0.6);
  FC_CHECK(rr > 0.55);
}

/* Silence and a faint hiss are closed; speech followed by silence closes within 4 frames. */
static void test_classifier_silence(void) {
  fc_avis c;
  fc_avis_init(&c);
  float buf[640] = {0};
  for (int k = 0; k < 50; k++) {
    fc_mouth m = fc_avis_push(&c, buf);
    FC_CHECK(m.open == 0 && m.wide == 0 && m.round == 0);
  }
  uint32_t r = 12345;
  for (int k = 0; k < 50; k++) {
    for (int i = 0; i < 640; i++) r = r * 1664525u + 1013904223u, buf[i] = ((r >> 8) / 16777216.0f - 0.5f) * 1e-3f;
    fc_mouth m = fc_avis_push(&c, buf); /* about −71 dB */
    FC_CHECK(m.open == 0);
  }
  fc_speech sp;
  FC_REQUIRE(fc_tts_speak("Hello there.", NULL, &sp) == 0);
  fc_viseme_tracker t;
  fc_viseme_tracker_init(&t);
  float most = 0;
  fc_mouth m = {0, 0, 0};
  for (size_t f = 0; f + 640 <= sp.audio.n; f += 640) {
    m = fc_viseme_tracker_push(&t, sp.audio.samples + f, (int64_t)f, NULL, 0);
    most = fmaxf(most, m.open);
  }
  FC_CHECK(most > 0.5f);
  memset(buf, 0, sizeof buf);
  for (int k = 0; k < 4; k++) m = fc_viseme_tracker_push(&t, buf, 0, NULL, 0);
  FC_CHECK(m.open < 0.02f);
  fc_speech_free(&sp);
}

int main(void) {
  int err = 0;
  av = head_avatar();
  ls = fc_lipsync_create(NULL, &err);
  if (!av || !ls || !fc_avatar_landmarks(av, 0)) {
    fprintf(stderr, "setup failed (the landmarks need libdlib-data): %s\n", fc_error_detail(err));
    return 1;
  }
  cap = fc_lipsync_patch_capacity(ls, av);
  mem = malloc(cap * 4);
  if (!mem) return 1;
  FC_RUN(test_closed_hides_teeth);
  FC_RUN(test_open_grows_interior);
  FC_RUN(test_wide_round);
  FC_RUN(test_border_is_source);
  FC_RUN(test_smooth);
  FC_RUN(test_fallback_without_landmarks);
  FC_RUN(test_classifier_held_out);
  FC_RUN(test_classifier_silence);
  free(mem);
  fc_lipsync_destroy(ls);
  fc_avatar_destroy(av);
  FC_TEST_EXIT();
}
