/* espeak-ng synthesis: audio on the 16 kHz clock, phoneme events in order and inside it. */
#include "facecast/error.h"
#include "facecast/tts.h"
#include "fc_test.h"

#include <glib.h>
#include <string.h>

static void test_hello(void) {
  fc_speech s;
  FC_REQUIRE(fc_tts_speak("hello world", NULL, &s) == 0);
  FC_CHECK_INT(s.audio.rate, ==, 16000);
  /* espeak speaks "hello world" in about 0.76 s. */
  FC_CHECK(s.audio.n > 16000 * 5 / 10 && s.audio.n < 16000 * 15 / 10);
  FC_CHECK(s.n_ph >= 6);
  int saw_h = 0, saw_l = 0;
  for (size_t i = 0; i < s.n_ph; i++) {
    if (i) FC_CHECK(s.ph[i].sample >= s.ph[i - 1].sample);
    FC_CHECK(s.ph[i].sample <= (int64_t)s.audio.n);
    saw_h |= strcmp(s.ph[i].name, "h") == 0;
    saw_l |= strcmp(s.ph[i].name, "l") == 0;
  }
  FC_CHECK(saw_h && saw_l);
  double e = 0;
  for (size_t i = 0; i < s.audio.n; i++) e += s.audio.samples[i] * s.audio.samples[i];
  FC_CHECK(e / s.audio.n > 1e-4); /* it is not silence */
  fc_speech_free(&s);
}

static void test_voices(void) {
  fc_speech s;
  fc_tts_params p = {.voice = "de"};
  FC_CHECK_INT(fc_tts_speak("Guten Tag", &p, &s), ==, 0);
  fc_speech_free(&s);
  p.voice = "no-such-voice";
  FC_CHECK_INT(fc_tts_speak("hello", &p, &s), ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(FC_EINVAL), "no-such-voice") != NULL);
  /* The engine still works after the failure. */
  FC_CHECK_INT(fc_tts_speak("again", NULL, &s), ==, 0);
  fc_speech_free(&s);
}

/* Whether a phoneme sequence holds `seq` (names separated by spaces) in a row. */
static int has_run(const fc_speech *s, const char *seq) {
  gchar **want = g_strsplit(seq, " ", -1);
  guint n = g_strv_length(want);
  int found = 0;
  for (size_t i = 0; !found && i + n <= s->n_ph; i++) {
    found = 1;
    for (guint k = 0; k < n && found; k++) found = strcmp(s->ph[i + k].name, want[k]) == 0;
  }
  g_strfreev(want);
  return found;
}

/* Chinese: "zh" and the other tags people use reach a Mandarin voice that speaks Mandarin —
 * not "Chinese letter" for every character (the English voice), nor pinyin read as English
 * with its tone digits ("ni three": espeak-ng 1.51's plain cmn voice) — and Han text without
 * a voice gets Mandarin too; Cantonese has its own voice. */
static void test_chinese(void) {
  const char *zh = "你好，今天天气很好。";
  fc_speech en, zhs, cmn, none, hk;
  fc_tts_params p = {.voice = "en"};
  FC_REQUIRE(fc_tts_speak(zh, &p, &en) == 0);
  p.voice = "zh";
  FC_REQUIRE(fc_tts_speak(zh, &p, &zhs) == 0);
  p.voice = "cmn";
  FC_REQUIRE(fc_tts_speak(zh, &p, &cmn) == 0);
  FC_REQUIRE(fc_tts_speak(zh, NULL, &none) == 0);
  p.voice = "zh-HK";
  FC_REQUIRE(fc_tts_speak(zh, &p, &hk) == 0);
  FC_CHECK(has_run(&en, "tS aI n i: z")); /* the English voice: "Chinese letter" */
  const fc_speech *mandarin[] = {&zhs, &cmn, &none};
  for (int i = 0; i < 3; i++) {
    const fc_speech *m = mandarin[i];
    FC_CHECK(has_run(m, "n i") && !has_run(m, "tS aI n") && !has_run(m, "T r i:"));
    /* nine syllables */
    FC_CHECK(m->audio.n > 16000 && m->audio.n < 16000 * 4 && m->audio.n * 3 / 2 < en.audio.n);
  }
  /* the same voice: the same length within 2 % (the first synthesis after switching voices
   * comes out a few ms longer) */
  FC_CHECK_NEAR(zhs.audio.n, cmn.audio.n, cmn.audio.n / 50);
  FC_CHECK_NEAR(none.audio.n, cmn.audio.n, cmn.audio.n / 50);
  FC_CHECK(has_run(&hk, "n ei") && hk.audio.n > 16000); /* Cantonese: nei hou */
  fc_speech_free(&en);
  fc_speech_free(&zhs);
  fc_speech_free(&cmn);
  fc_speech_free(&none);
  fc_speech_free(&hk);
  /* cloud voice names as LiveTalking's pages send them speak their language; a region espeak
   * has no voice for falls back to the language */
  fc_speech v;
  p.voice = "zh-CN-YunxiaNeural";
  FC_REQUIRE(fc_tts_speak(zh, &p, &v) == 0);
  FC_CHECK(has_run(&v, "n i") && !has_run(&v, "tS aI n"));
  fc_speech_free(&v);
  p.voice = "de-DE";
  FC_CHECK_INT(fc_tts_speak("Guten Tag", &p, &v), ==, 0);
  fc_speech_free(&v);
  p.voice = "xx-YY";
  FC_CHECK_INT(fc_tts_speak("hello", &p, &v), ==, FC_EINVAL);
  p.voice = "klingon-xx"; /* only a language code loses its region, not any name */
  FC_CHECK_INT(fc_tts_speak("hello", &p, &v), ==, FC_EINVAL);
  /* English text without a voice stays English */
  fc_speech a, b;
  p.voice = "en";
  FC_REQUIRE(fc_tts_speak("Hello there", &p, &a) == 0);
  FC_REQUIRE(fc_tts_speak("Hello there", NULL, &b) == 0);
  FC_CHECK_NEAR(a.audio.n, b.audio.n, a.audio.n / 50);
  fc_speech_free(&a);
  fc_speech_free(&b);
}

static void test_bad_text(void) {
  fc_speech s;
  FC_CHECK_INT(fc_tts_speak("", NULL, &s), ==, FC_EINVAL);
  FC_CHECK_INT(fc_tts_speak("  \n\t ", NULL, &s), ==, FC_EINVAL);
  FC_CHECK_INT(fc_tts_speak(NULL, NULL, &s), ==, FC_EINVAL);
  /* Invalid UTF-8 must not crash. */
  int err = fc_tts_speak("\xff\xfe\xc3 abc", NULL, &s);
  FC_CHECK(err == 0 || err == FC_EINVAL);
  fc_speech_free(&s);
}

static void test_rate(void) {
  fc_speech slow, fast;
  fc_tts_params p = {.rate_wpm = 120};
  FC_REQUIRE(fc_tts_speak("the quick brown fox", &p, &slow) == 0);
  p.rate_wpm = 300;
  FC_REQUIRE(fc_tts_speak("the quick brown fox", &p, &fast) == 0);
  FC_CHECK(fast.audio.n < slow.audio.n * 8 / 10);
  fc_speech_free(&slow);
  fc_speech_free(&fast);
}

int main(void) {
  FC_RUN(test_hello);
  FC_RUN(test_voices);
  FC_RUN(test_chinese);
  FC_RUN(test_bad_text);
  FC_RUN(test_rate);
  FC_TEST_EXIT();
}
