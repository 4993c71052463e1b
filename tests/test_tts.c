/* espeak-ng synthesis: audio on the 16 kHz clock, phoneme events in order and inside it. */
#include "facecast/error.h"
#include "facecast/tts.h"
#include "fc_test.h"

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
  FC_RUN(test_bad_text);
  FC_RUN(test_rate);
  FC_TEST_EXIT();
}
