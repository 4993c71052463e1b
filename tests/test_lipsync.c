/* Visemes, the parametric backend, the compositor and the stream that ties them together. */
#include "compose/compose.h"
#include "facecast/error.h"
#include "facecast/stream.h"
#include "lipsync/visemes.h"
#include "fc_test.h"

#include <stdlib.h>
#include <string.h>

static fc_avatar *av;
static fc_lipsync *ls;

static void test_viseme_table(void) {
  fc_mouth m = fc_viseme_of_phoneme("m");
  FC_CHECK(m.open == 0);
  FC_CHECK(fc_viseme_of_phoneme("p").open == 0 && fc_viseme_of_phoneme("b").open == 0);
  FC_CHECK(fc_viseme_of_phoneme("_:").open == 0);
  FC_CHECK(fc_viseme_of_phoneme("a").open > 0.7f);
  FC_CHECK(fc_viseme_of_phoneme("aI").wide > fc_viseme_of_phoneme("aU").wide);
  FC_CHECK(fc_viseme_of_phoneme("u:").round > 0.8f);
  FC_CHECK(fc_viseme_of_phoneme("i:").wide > 0.7f);
  FC_CHECK(fc_viseme_of_phoneme("'a").open == fc_viseme_of_phoneme("a").open);
  FC_CHECK(fc_viseme_of_phoneme(NULL).open == 0);
}

/* Audio path (the MFCC classifier): silence closed; a loud low tone opens within its first
 * frame (a pure low tone reads as a rounded vowel, "oo"), closes soon after. */
static void test_tracker_audio(void) {
  fc_viseme_tracker t;
  fc_viseme_tracker_init(&t);
  float buf[640];
  memset(buf, 0, sizeof buf);
  for (int i = 0; i < 10; i++) FC_CHECK(fc_viseme_tracker_push(&t, buf, i * 640, NULL, 0).open == 0);
  for (int i = 0; i < 640; i++) buf[i] = 0.3f * sinf(2 * 3.14159265f * 300 * i / 16000.0f);
  fc_mouth m = fc_viseme_tracker_push(&t, buf, 6400, NULL, 0);
  FC_CHECK(m.open > 0.2f);
  for (int k = 0; k < 5; k++) m = fc_viseme_tracker_push(&t, buf, 7040 + k * 640, NULL, 0);
  FC_CHECK(m.open > 0.45f);
  FC_CHECK(m.round > 0.6f);
  float loud = m.open;
  memset(buf, 0, sizeof buf);
  for (int k = 0; k < 4; k++) m = fc_viseme_tracker_push(&t, buf, 10240 + k * 640, NULL, 0);
  FC_CHECK(m.open < 0.02f);
  /* A quiet speaker opens nearly as wide as a loud one once the level follower has adapted. */
  fc_viseme_tracker_init(&t);
  for (int i = 0; i < 640; i++) buf[i] = 0.01f * sinf(2 * 3.14159265f * 300 * i / 16000.0f);
  for (int k = 0; k < 100; k++) m = fc_viseme_tracker_push(&t, buf, k * 640, NULL, 0);
  FC_CHECK(m.open > 0.6f * loud);
}

/* Phoneme path: the shape follows the phoneme of the frame, p/b/m close. */
static void test_tracker_phonemes(void) {
  fc_phoneme ph[] = {{0, "_"}, {1280, "a"}, {6400, "m"}, {9600, "u:"}, {14000, "_"}};
  fc_viseme_tracker t;
  fc_viseme_tracker_init(&t);
  float buf[640];
  for (int i = 0; i < 640; i++) buf[i] = 0.2f * sinf(i * 0.3f);
  fc_mouth m[25];
  for (int k = 0; k < 25; k++) m[k] = fc_viseme_tracker_push(&t, buf, k * 640, ph, 5);
  FC_CHECK(m[0].open < 0.05f);
  FC_CHECK(m[8].open > 0.7f);   /* "a" */
  FC_CHECK(m[13].open < 0.1f);  /* "m" after a few frames */
  FC_CHECK(m[20].round > 0.7f); /* "u:" */
  FC_CHECK(m[24].open < 0.1f);  /* silence again */
}

static double region_diff(const uint8_t *a, const uint8_t *b, int w, fc_rect r) {
  double d = 0;
  for (int y = r.y; y < r.y + r.h; y++)
    for (int x = r.x; x < r.x + r.w; x++) d += abs(a[(size_t)y * w + x] - b[(size_t)y * w + x]);
  return d / ((double)r.w * r.h);
}

static void test_parametric_patch(void) {
  size_t cap = fc_lipsync_patch_capacity(ls, av);
  FC_REQUIRE(cap > 0);
  uint8_t *mem = malloc(cap * 8), *scratch = malloc(cap * 3);
  int w = fc_avatar_width(av), h = fc_avatar_height(av);
  uint8_t *closed = malloc((size_t)w * h * 3 / 2), *open = malloc((size_t)w * h * 3 / 2);
  fc_patch pt[2] = {{.rgb = mem, .alpha = mem + cap * 3}, {.rgb = mem + cap * 4, .alpha = mem + cap * 7}};
  fc_lipsync_req rq[2] = {{.avatar = av, .mouth = {0, 0, 0}}, {.avatar = av, .mouth = {0.9f, 0.3f, 0}}};
  FC_REQUIRE(fc_lipsync_run(ls, rq, pt, 2) == 0);
  fc_rect r = pt[0].place;
  FC_CHECK(r.w > 0 && r.h > 0 && (size_t)r.w * r.h <= cap);
  FC_CHECK(!(r.x & 1) && !(r.y & 1) && !(r.w & 1) && !(r.h & 1));
  const fc_mouth_geom *g = fc_avatar_mouth(av, 0);
  FC_CHECK(r.x < g->cx - g->half_w && r.x + r.w > g->cx + g->half_w);
  FC_CHECK(r.y < g->cy && r.y + r.h > g->cy);
  /* Border of the mask is feathered to 0, centre opaque. */
  FC_CHECK(pt[0].alpha[0] == 0 && pt[0].alpha[(size_t)(r.h / 2) * r.w + r.w / 2] == 255);
  FC_REQUIRE(fc_compose_i420(av, 0, &pt[0], closed, scratch) == 0);
  FC_REQUIRE(fc_compose_i420(av, 0, &pt[1], open, scratch) == 0);
  /* The open mouth differs from the closed one around the mouth, not elsewhere. */
  fc_rect mouth = {(int)(g->cx - g->half_w), (int)(g->cy - 4), (int)(2 * g->half_w), 24};
  fc_rect forehead = {(int)(g->cx - 30), (int)(g->cy - 0.75f * g->face_h), 60, 20};
  double dm = region_diff(closed, open, w, mouth), df = region_diff(closed, open, w, forehead);
  FC_CHECK(dm > 20);
  FC_CHECK(df < 0.5);
  /* The open mouth is darker inside (throat) right below the line. */
  double lum_open = 0, lum_closed = 0;
  for (int x = (int)g->cx - 5; x < (int)g->cx + 5; x++) {
    lum_open += open[(size_t)(g->cy + 0.08f * g->face_h) * w + x];
    lum_closed += closed[(size_t)(g->cy + 0.08f * g->face_h) * w + x];
  }
  FC_CHECK(lum_open < lum_closed - 200);
  /* A bad placement is refused and leaves the plain frame. */
  fc_patch bad = pt[0];
  bad.place.x = w - 2;
  FC_CHECK_INT(fc_compose_i420(av, 0, &bad, open, scratch), ==, FC_EINVAL);
  FC_CHECK(memcmp(open, fc_avatar_frame_i420(av, 0), (size_t)w * h * 3 / 2) == 0);
  free(mem), free(scratch), free(closed), free(open);
}

/* Composing into a reused buffer by rectangles (fc_compose_i420_update) gives exactly what
 * composing the whole frame gives, whatever the patches do between frames (move, vanish, fail);
 * fc_i420_update then copies such frames into a strided buffer, by rectangles when it can. */
static void test_compose_by_rects(void) {
  size_t cap = fc_lipsync_patch_capacity(ls, av);
  const int w = fc_avatar_width(av), h = fc_avatar_height(av);
  const size_t fsz = (size_t)w * h * 3 / 2;
  uint8_t *mem = malloc(cap * 4), *scratch = malloc(cap * 3);
  uint8_t *want = malloc(fsz), *got = malloc(fsz);
  const int ds[3] = {w + 8, w / 2 + 4, w / 2 + 4}; /* a padded copy, as GStreamer's */
  uint8_t *copy = malloc((size_t)ds[0] * h + 2 * (size_t)ds[1] * (h / 2));
  uint8_t *dp[3] = {copy, copy + (size_t)ds[0] * h, copy + (size_t)ds[0] * h + (size_t)ds[1] * (h / 2)};
  FC_REQUIRE(mem && scratch && want && got && copy);
  fc_patch pt = {.rgb = mem, .alpha = mem + cap * 3};
  fc_i420_delta held = {0}, copy_held = {0};
  const int shifts[][2] = {{0, 0}, {0, 0}, {8, -6}, {-10, 4}, {99, 0}, {0, 0}, {-4, -4}, {2, 12}};
  int rect_path = 0;
  for (int k = 0; k < 8; k++) {
    fc_lipsync_req rq = {.avatar = av, .mouth = {0.15f * k, 0.1f * (k % 3), 0}};
    FC_REQUIRE(fc_lipsync_run(ls, &rq, &pt, 1) == 0);
    const fc_patch *use = k == 5 ? NULL : &pt; /* frame 5: no patch at all */
    pt.place.x += shifts[k][0];
    pt.place.y += shifts[k][1];
    if (shifts[k][0] == 99) pt.place.x = w - 2; /* frame 4: a bad rect, refused */
    int e1 = fc_compose_i420(av, 0, use, want, scratch);
    int e2 = fc_compose_i420_update(av, 0, use, got, &held, scratch);
    FC_CHECK_INT(e1, ==, e2);
    FC_CHECK(memcmp(want, got, fsz) == 0);
    FC_CHECK(held.base == fc_avatar_frame_i420(av, 0));
    /* A pixel outside both rects of the strided copy is poisoned before the update: the rect
     * path leaves it (the copy is trusted to hold what copy_held says), a whole copy heals it. */
    const int same_base = copy_held.base && copy_held.base == held.base;
    dp[0][0] ^= 0x5a;
    fc_i420_update(dp, ds, &copy_held, got, &held, w, h);
    rect_path += same_base && dp[0][0] != got[0];
    dp[0][0] = got[0];
    int equal = 1;
    for (int y = 0; y < h; y++) equal &= !memcmp(dp[0] + (size_t)y * ds[0], got + (size_t)y * w, w);
    for (int y = 0; y < h / 2; y++)
      for (int pl = 1; pl < 3; pl++)
        equal &= !memcmp(dp[pl] + (size_t)y * ds[pl],
                         got + (size_t)w * h * (pl == 1 ? 4 : 5) / 4 + (size_t)y * (w / 2), w / 2);
    FC_CHECK(equal);
  }
  FC_CHECK_INT(rect_path, ==, 7); /* every frame after the first went by rectangles */
  /* Without a description (or with another base) the whole picture is copied. */
  dp[0][0] ^= 0x5a;
  fc_i420_update(dp, ds, &copy_held, got, NULL, w, h);
  FC_CHECK(dp[0][0] == got[0] && copy_held.base == NULL);
  free(mem), free(scratch), free(want), free(got), free(copy);
}

/* Stream: the mouth region differs more from the rest frame during speech than in silence,
 * and every frame carries its own 640 samples. */
static void test_stream_speech_vs_silence(void) {
  int err;
  fc_stream_params p = {.avatar = av, .lipsync = ls, .batch = 7};
  fc_stream *st = fc_stream_create(&p, &err);
  FC_REQUIRE(st);
  fc_speech sp;
  FC_REQUIRE(fc_tts_speak("Hello there, how are you today?", NULL, &sp) == 0);
  float *sil = calloc(16000, sizeof(float));
  FC_REQUIRE(fc_stream_push_audio(st, sil, 16000) == 0); /* 25 silent frames */
  FC_REQUIRE(fc_stream_push_speech(st, sp.audio.samples, sp.audio.n, sp.ph, sp.n_ph, NULL) == 0);
  FC_REQUIRE(fc_stream_push_audio(st, sil, 16000) == 0);
  fc_stream_end(st);
  int64_t total = fc_stream_frames_total(st);
  FC_CHECK_INT(total, ==, 50 + (int64_t)(sp.audio.n + 639) / 640);
  int w = fc_avatar_width(av);
  size_t fsz = (size_t)w * fc_avatar_height(av) * 3 / 2;
  uint8_t *rest = malloc(fsz);
  const fc_mouth_geom *g = fc_avatar_mouth(av, 0);
  fc_rect mouth = {(int)(g->cx - g->half_w), (int)(g->cy - 10), (int)(2 * g->half_w), 30};
  double sil_max = 0, speech_max = 0;
  int64_t n = 0;
  fc_frame_info fi;
  const uint8_t *img;
  const int16_t *pcm;
  while ((err = fc_stream_next_frame(st, &fi, &img, &pcm)) == 0) {
    FC_CHECK_INT(fi.index, ==, n);
    if (n == 5) memcpy(rest, img, fsz);
    if (n > 5 && n < 25) sil_max = fmax(sil_max, region_diff(rest, img, w, mouth));
    if (n >= 25 && n < total - 25) speech_max = fmax(speech_max, region_diff(rest, img, w, mouth));
    /* The frame's audio is the timeline's samples [640 n, 640 n + 640). */
    if (n == 30) {
      size_t off = 30 * 640 - 16000;
      FC_CHECK_NEAR(pcm[100], sp.audio.samples[off + 100] * 32767, 1.5);
    }
    n++;
  }
  FC_CHECK_INT(err, ==, FC_EEOF);
  FC_CHECK_INT(n, ==, total);
  FC_CHECK(sil_max < 0.5);
  FC_CHECK(speech_max > 15);
  FC_CHECK(speech_max > 20 * (sil_max + 0.1));
  FC_CHECK_INT(fc_stream_push_speech(st, sil, 10, NULL, 0, NULL), ==, FC_EINVAL); /* ended */
  fc_stream_destroy(st);
  fc_speech_free(&sp);
  free(sil), free(rest);
}

static void test_stream_partial_and_again(void) {
  int err;
  fc_stream_params p = {.avatar = av, .lipsync = ls};
  fc_stream *st = fc_stream_create(&p, &err);
  FC_REQUIRE(st);
  float buf[1000] = {0};
  fc_frame_info fi;
  const uint8_t *img;
  const int16_t *pcm;
  FC_REQUIRE(fc_stream_push_audio(st, buf, 1000) == 0);
  FC_CHECK_INT(fc_stream_next_frame(st, &fi, &img, &pcm), ==, 0); /* one full frame */
  FC_CHECK_INT(fc_stream_next_frame(st, &fi, &img, &pcm), ==, FC_EAGAIN);
  fc_stream_end(st);
  FC_CHECK_INT(fc_stream_next_frame(st, &fi, &img, &pcm), ==, 0); /* the padded remainder */
  FC_CHECK_INT(fi.index, ==, 1);
  FC_CHECK_INT(pcm[639], ==, 0);
  FC_CHECK_INT(fc_stream_next_frame(st, &fi, &img, &pcm), ==, FC_EEOF);
  fc_stream_destroy(st);
  fc_lipsync_params bad = {.model = "no-such-model"};
  FC_CHECK(fc_lipsync_create(&bad, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_ENOTFOUND);
  FC_CHECK(fc_stream_create(NULL, &err) == NULL);
}

/* Pulls the next frame the way a live pacer does: speech if any, else an idle frame. */
static int live_pull(fc_stream *st, fc_frame_info *fi, const uint8_t **img, const int16_t **pcm) {
  int err = fc_stream_next_frame(st, fi, img, pcm);
  return err == FC_EAGAIN ? fc_stream_idle_frame(st, fi, img, pcm) : err;
}

/* Live use: idle frames advance the clock at rest; an utterance starts at the next frame and
 * reports its first and last frames; interrupt cuts it; the queue is bounded. */
static void test_stream_live(void) {
  int err;
  fc_stream_params p = {.avatar = av, .lipsync = ls, .batch = 4, .max_pending = 16000};
  fc_stream *st = fc_stream_create(&p, &err);
  FC_REQUIRE(st);
  fc_frame_info fi;
  const uint8_t *img, *rest = NULL;
  const int16_t *pcm;
  for (int i = 0; i < 10; i++) {
    FC_REQUIRE(live_pull(st, &fi, &img, &pcm) == 0);
    FC_CHECK_INT(fi.index, ==, i);
    FC_CHECK(!fi.speaking && pcm[0] == 0 && pcm[639] == 0);
    if (i == 0) rest = img;
    FC_CHECK(img == rest); /* the cached rest picture: no lip-sync work per idle frame */
  }
  /* A 0.5 s utterance (12.5 frames → 13) of a loud tone. */
  float tone[8000];
  for (int i = 0; i < 8000; i++) tone[i] = 0.5f * sinf(i * 0.12f);
  uint32_t id = 0;
  FC_REQUIRE(fc_stream_push_speech(st, tone, 8000, NULL, 0, &id) == 0);
  FC_CHECK(id > 0);
  FC_CHECK_INT(fc_stream_pending_frames(st), ==, 13);
  int first = -1, last = -1;
  for (int i = 10; i < 30; i++) {
    FC_REQUIRE(live_pull(st, &fi, &img, &pcm) == 0);
    FC_CHECK_INT(fi.index, ==, i);
    if (fi.utt_started == id) first = i;
    if (fi.utt_ended == id) last = i;
    if (i == 10) FC_CHECK(fi.speaking && abs(pcm[100] - (int)lrintf(tone[100] * 32767)) <= 1);
    if (i == 23) FC_CHECK(!fi.speaking);
  }
  FC_CHECK_INT(first, ==, 10);
  FC_CHECK_INT(last, ==, 22);
  /* After an utterance with phonemes, streamed audio (a microphone) drives the mouth again. */
  fc_speech sp;
  FC_REQUIRE(fc_tts_speak("Hi.", NULL, &sp) == 0);
  FC_REQUIRE(fc_stream_push_speech(st, sp.audio.samples, sp.audio.n, sp.ph, sp.n_ph, NULL) == 0);
  while (fc_stream_next_frame(st, &fi, &img, &pcm) == 0) {
  }
  fc_speech_free(&sp);
  FC_REQUIRE(fc_stream_push_audio(st, tone, 6400) == 0);
  double moved = 0;
  int w = fc_avatar_width(av);
  const fc_mouth_geom *g = fc_avatar_mouth(av, 0);
  fc_rect mouth = {(int)(g->cx - g->half_w), (int)(g->cy - 10), (int)(2 * g->half_w), 30};
  while (fc_stream_next_frame(st, &fi, &img, &pcm) == 0)
    moved = fmax(moved, region_diff(rest, img, w, mouth));
  FC_CHECK(moved > 15);
  /* The bound: 1 s of pending speech at most. */
  float big[17000] = {0};
  FC_CHECK_INT(fc_stream_push_speech(st, big, 17000, NULL, 0, NULL), ==, FC_EAGAIN);
  /* Interrupt in the middle of an utterance: the cut id comes back, speech stops at once. */
  FC_REQUIRE(fc_stream_push_speech(st, tone, 8000, NULL, 0, &id) == 0);
  FC_REQUIRE(live_pull(st, &fi, &img, &pcm) == 0);
  FC_CHECK_INT(fi.utt_started, ==, id);
  int64_t at = fi.index;
  FC_CHECK_INT(fc_stream_interrupt(st), ==, id);
  FC_CHECK_INT(fc_stream_pending_frames(st), ==, 0);
  FC_REQUIRE(live_pull(st, &fi, &img, &pcm) == 0);
  FC_CHECK(!fi.speaking);
  FC_CHECK_INT(fi.index, ==, at + 1); /* dropped frames in the ring gave back their numbers */
  FC_CHECK_INT(fc_stream_interrupt(st), ==, 0);
  /* Streamed audio: a partial frame waits through idle ticks, then goes out whole. */
  FC_CHECK_INT(fc_stream_producible(st), ==, 0);
  FC_REQUIRE(fc_stream_push_audio(st, tone, 300) == 0);
  FC_CHECK_INT(fc_stream_producible(st), ==, 0); /* a partial frame waits */
  FC_CHECK_INT(fc_stream_next_frame(st, &fi, &img, &pcm), ==, FC_EAGAIN);
  FC_REQUIRE(fc_stream_idle_frame(st, &fi, &img, &pcm) == 0);
  FC_REQUIRE(fc_stream_push_audio(st, tone + 300, 340) == 0);
  FC_CHECK_INT(fc_stream_producible(st), ==, 1);
  FC_REQUIRE(fc_stream_next_frame(st, &fi, &img, &pcm) == 0);
  FC_CHECK(fi.speaking && fi.utt_started == 0);
  FC_CHECK(abs(pcm[299] - (int)lrintf(tone[299] * 32767)) <= 1);
  FC_CHECK(abs(pcm[639] - (int)lrintf(tone[639] * 32767)) <= 1);
  fc_stream_destroy(st);
}

/* Streamed speech (a TTS service's pieces): one utterance however many pieces it came in, its
 * start reported at its first frame, a gap in the audio filled with idle frames without ending
 * it, its end reported only once closed, padded to a whole frame; interrupt drops it. */
static void test_stream_open_speech(void) {
  int err;
  fc_stream_params p = {.avatar = av, .lipsync = ls, .batch = 4};
  fc_stream *st = fc_stream_create(&p, &err);
  FC_REQUIRE(st);
  fc_frame_info fi;
  const uint8_t *img;
  const int16_t *pcm;
  float tone[8000];
  for (int i = 0; i < 8000; i++) tone[i] = 0.5f * sinf(i * 0.12f);
  FC_REQUIRE(live_pull(st, &fi, &img, &pcm) == 0); /* frame 0 idle */
  FC_REQUIRE(fc_stream_push_audio(st, tone, 100) == 0); /* a partial frame of a microphone */
  uint32_t id = 0;
  FC_REQUIRE(fc_stream_open_speech(st, &id) == 0);
  FC_CHECK(id > 0);
  /* 1000 samples in three pieces; then a gap */
  FC_REQUIRE(fc_stream_push_audio(st, tone, 300) == 0);
  FC_REQUIRE(fc_stream_push_audio(st, tone + 300, 500) == 0);
  FC_REQUIRE(fc_stream_push_audio(st, tone + 800, 200) == 0);
  int started = -1, ended = -1, idle_in_gap = 0;
  for (int i = 1; i < 8; i++) {
    FC_REQUIRE(live_pull(st, &fi, &img, &pcm) == 0);
    if (fi.utt_started == id) started = i;
    if (fi.utt_ended == id) ended = i;
    if (i == 2) /* the utterance's first frame: its first sample right after the mic's frame */
      FC_CHECK(abs(pcm[5] - (int)lrintf(tone[5] * 32767)) <= 1);
    if (i >= 4 && !fi.speaking) idle_in_gap++;
  }
  FC_CHECK_INT(started, ==, 2); /* frame 1: the microphone's 100 samples, padded */
  FC_CHECK_INT(ended, ==, -1);  /* open: the 360-sample tail waits, the gap is idle */
  FC_CHECK(idle_in_gap >= 3);
  FC_REQUIRE(fc_stream_push_audio(st, tone + 1000, 500) == 0); /* more, after the gap */
  fc_stream_close_speech(st);
  FC_CHECK_INT(fc_stream_pending_frames(st), ==, 2); /* 360 + 500 → 2 frames, padded */
  for (int i = 0; i < 4; i++) {
    FC_REQUIRE(live_pull(st, &fi, &img, &pcm) == 0);
    if (fi.utt_ended == id) ended = (int)fi.index;
    if (i == 0) FC_CHECK(fi.speaking && abs(pcm[0] - (int)lrintf(tone[640] * 32767)) <= 1);
  }
  FC_CHECK_INT(ended, ==, 9);
  /* closed after all of it went out: a frame of silence carries the end */
  FC_REQUIRE(fc_stream_open_speech(st, &id) == 0);
  FC_REQUIRE(fc_stream_push_audio(st, tone, 640) == 0);
  FC_REQUIRE(fc_stream_next_frame(st, &fi, &img, &pcm) == 0);
  FC_CHECK(fi.utt_started == id && fi.utt_ended == 0);
  fc_stream_close_speech(st);
  FC_REQUIRE(fc_stream_next_frame(st, &fi, &img, &pcm) == 0);
  FC_CHECK(fi.utt_ended == id && pcm[0] == 0);
  /* interrupt drops an open one; audio after it is plain streamed audio */
  FC_REQUIRE(fc_stream_open_speech(st, &id) == 0);
  FC_REQUIRE(fc_stream_push_audio(st, tone, 1280) == 0);
  FC_REQUIRE(fc_stream_next_frame(st, &fi, &img, &pcm) == 0);
  FC_CHECK_INT(fc_stream_interrupt(st), ==, id);
  FC_REQUIRE(fc_stream_push_audio(st, tone, 640) == 0);
  FC_REQUIRE(fc_stream_next_frame(st, &fi, &img, &pcm) == 0);
  FC_CHECK(fi.speaking && fi.utt_started == 0 && fi.utt_ended == 0);
  fc_stream_destroy(st);
}

int main(void) {
  int err;
  fc_avatar_params p = fc_avatar_params_default();
  p.framing = FC_FRAMING_HEAD;
  av = fc_avatar_create_from_image(fc_avatar_default_path(), &p, &err);
  ls = fc_lipsync_create(NULL, &err);
  if (!av || !ls) {
    fprintf(stderr, "setup failed: %s\n", fc_error_detail(err));
    return 1;
  }
  double frac = -1;
  FC_CHECK_INT(fc_lipsync_memory_used(ls, &frac), ==, FC_EUNSUPPORTED); /* a CPU backend */
  FC_CHECK(frac == -1);
  FC_RUN(test_viseme_table);
  FC_RUN(test_tracker_audio);
  FC_RUN(test_tracker_phonemes);
  FC_RUN(test_parametric_patch);
  FC_RUN(test_compose_by_rects);
  FC_RUN(test_stream_speech_vs_silence);
  FC_RUN(test_stream_partial_and_again);
  FC_RUN(test_stream_live);
  FC_RUN(test_stream_open_speech);
  fc_lipsync_destroy(ls);
  fc_avatar_destroy(av);
  FC_TEST_EXIT();
}
