/* Speech recognition (converse/asr.h): real pocketsphinx on espeak-ng speech, its word error
 * rate asserted; the VAD finding that speech in a stream; the services' answers parsed; the
 * refusals. The remote providers against fakes of their protocols: tests/api/listen_test.py. */
#include "converse/asr.h"
#include "converse/vad.h"
#include "facecast/audio.h"
#include "facecast/error.h"
#include "facecast/tts.h"
#include "fc_test.h"

#include <glib.h>
#include <time.h>

/* espeak-ng's US voice with its Klatt synthesiser: of espeak's voices, what pocketsphinx's
 * US model, trained on human voices, hears best (22 % word errors on these sentences, against
 * 46-65 % for the default en-us; measured when this test was written) */
static int16_t *speak(const char *text, size_t *n) {
  fc_speech sp;
  fc_tts_params tp = {.voice = "en-us+klatt"};
  if (fc_tts_speak(text, &tp, &sp)) return NULL;
  int16_t *pcm = malloc(sp.audio.n * sizeof *pcm);
  for (size_t i = 0; i < sp.audio.n; i++) {
    float v = sp.audio.samples[i] * 32767;
    pcm[i] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
  }
  *n = sp.audio.n;
  fc_speech_free(&sp);
  return pcm;
}

/* Word-level edit distance between two transcripts. */
static int word_errors(const char *ref, const char *hyp, int *n_ref) {
  gchar **r = g_strsplit_set(ref, " ", -1), **h = g_strsplit_set(hyp, " ", -1);
  int nr = 0, nh = 0;
  while (r[nr]) nr++;
  while (h[nh]) nh++;
  if (nh == 1 && !*h[0]) nh = 0;
  int *d = malloc((size_t)(nr + 1) * (nh + 1) * sizeof(int));
  for (int i = 0; i <= nr; i++)
    for (int j = 0; j <= nh; j++) {
      int *c = &d[i * (nh + 1) + j];
      if (!i || !j) *c = i + j;
      else {
        int sub = d[(i - 1) * (nh + 1) + j - 1] + (g_ascii_strcasecmp(r[i - 1], h[j - 1]) != 0);
        int del = d[(i - 1) * (nh + 1) + j] + 1, ins = d[i * (nh + 1) + j - 1] + 1;
        *c = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
      }
    }
  int e = d[nr * (nh + 1) + nh];
  free(d);
  g_strfreev(r);
  g_strfreev(h);
  *n_ref = nr;
  return e;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void test_pocketsphinx_wer(void) {
  static const char *const said[] = {
      "what is the weather like today",   "tell me a story about a dog",
      "how are you doing this morning",   "please open the door",
      "can you help me with my homework", "i would like a cup of coffee",
  };
  int err;
  fc_asr_params p = {0};
  fc_asr *a = fc_asr_create(&p, &err);
  FC_REQUIRE(a);
  FC_CHECK(!strcmp(fc_asr_name(a), "pocketsphinx"));
  int errors = 0, words = 0;
  double worst_finish = 0;
  for (size_t k = 0; k < G_N_ELEMENTS(said); k++) {
    size_t n;
    int16_t *pcm = speak(said[k], &n);
    FC_REQUIRE(pcm);
    fc_asr_stream *s = fc_asr_begin(a, &err);
    FC_REQUIRE(s);
    for (size_t i = 0; i < n; i += 960) /* as a microphone's 60 ms frames come */
      FC_REQUIRE(fc_asr_feed(s, pcm + i, n - i < 960 ? n - i : 960) == 0);
    double t0 = now_ms();
    char *text = NULL;
    FC_REQUIRE(fc_asr_finish(s, NULL, &text) == 0);
    worst_finish = fmax(worst_finish, now_ms() - t0);
    int nr;
    int e = word_errors(said[k], text, &nr);
    fprintf(stderr, "  \"%s\" -> \"%s\" (%d of %d words wrong)\n", said[k], text, e, nr);
    errors += e;
    words += nr;
    g_free(text);
    fc_asr_stream_free(s);
    free(pcm);
  }
  double wer = (double)errors / words;
  fprintf(stderr, "  word error rate %.0f %% (%d of %d); the transcript %.0f ms after the end at "
          "worst\n", 100 * wer, errors, words, worst_finish);
  FC_CHECK(wer <= 0.40); /* a robot voice heard by a model of human ones */
  FC_CHECK(worst_finish < 1000); /* decoded while fed: only the end is left */
  /* a stream freed unfinished gives its decoder back usable */
  fc_asr_stream *s = fc_asr_begin(a, &err);
  FC_REQUIRE(s);
  int16_t quiet[1600] = {0};
  fc_asr_feed(s, quiet, 1600);
  fc_asr_stream_free(s);
  FC_REQUIRE((s = fc_asr_begin(a, &err)));
  char *text = NULL;
  FC_CHECK(fc_asr_finish(s, NULL, &text) == 0 && text);
  g_free(text);
  fc_asr_stream_free(s);
  /* the decoders are bounded */
  fc_asr_params small = {.max_decoders = 1};
  fc_asr *one = fc_asr_create(&small, &err);
  FC_REQUIRE(one);
  fc_asr_stream *s1 = fc_asr_begin(one, &err), *s2 = fc_asr_begin(one, &err);
  FC_CHECK(s1 && !s2 && err == FC_EBUSY);
  fc_asr_stream_free(s1);
  fc_asr_destroy(one);
  fc_asr_destroy(a);
}

/* The VAD brackets real speech in a stream of quiet noise. */
static void test_vad_on_speech(void) {
  size_t n;
  int16_t *sp = speak("hello there, can you hear me", &n);
  FC_REQUIRE(sp);
  size_t lead = 16000, tail = 16000, total = lead + n + tail;
  int16_t *pcm = malloc(total * sizeof *pcm);
  uint32_t seed = 7;
  for (size_t i = 0; i < total; i++) {
    seed = seed * 1664525 + 1013904223;
    pcm[i] = (int16_t)((int)(seed >> 24) - 128) / 4; /* about -60 dBFS of noise */
    if (i >= lead && i < lead + n) pcm[i] = (int16_t)(pcm[i] + sp[i - lead]);
  }
  /* where the speech really is: its first and last samples above -40 dBFS */
  size_t first = 0, last = 0;
  for (size_t i = 0; i < n; i++)
    if (abs(sp[i]) > 328) {
      if (!first) first = i;
      last = i;
    }
  fc_vad *v = fc_vad_create(NULL);
  int starts = 0, ends = 0;
  int64_t t_start = -1, t_end = -1;
  for (size_t at = 0; at < total;) {
    size_t used;
    int64_t when;
    int e = fc_vad_feed(v, pcm + at, total - at < 960 ? total - at : 960, &used, &when);
    at += used;
    if (e == FC_VAD_START) starts++, t_start = when;
    if (e == FC_VAD_END) ends++, t_end = when;
  }
  FC_CHECK_INT(starts, ==, 1);
  FC_CHECK_INT(ends, ==, 1);
  FC_CHECK(labs((long)(t_start - (int64_t)(lead + first))) <= 1600); /* within 100 ms */
  FC_CHECK(labs((long)(t_end - (int64_t)(lead + last))) <= 1600);
  fc_vad_destroy(v);
  free(pcm);
  free(sp);
}

static void test_parse(void) {
  char *t;
  const char *ok = "{\"text\":\" Hello there. \",\"usage\":{\"seconds\":2}}";
  FC_CHECK(fc_asr_parse_openai(ok, strlen(ok), 1, &t) == 0 && !strcmp(t, "Hello there."));
  g_free(t);
  const char *bad = "{\"error\":{\"message\":\"Invalid file format.\",\"type\":\"x\"}}";
  FC_CHECK(fc_asr_parse_openai(bad, strlen(bad), 1, &t) == FC_EREMOTE && !t);
  FC_CHECK(strstr(fc_error_detail(FC_EREMOTE), "Invalid file format."));
  const char *wc = "{\"error\":\"no 'file' field in the request\"}"; /* whisper.cpp's shape */
  FC_CHECK(fc_asr_parse_openai(wc, strlen(wc), 1, &t) == FC_EREMOTE);
  FC_CHECK(strstr(fc_error_detail(FC_EREMOTE), "no 'file' field"));
  FC_CHECK(fc_asr_parse_openai("plain words\n", 12, 0, &t) == 0 && !strcmp(t, "plain words"));
  g_free(t);
  FC_CHECK(fc_asr_parse_openai("[1,2]", 5, 1, &t) == FC_EREMOTE);
  const char *empty = "{\"error\":{\"message\":\"\"}}"; /* found by fuzzing: an empty detail */
  FC_CHECK(fc_asr_parse_openai(empty, strlen(empty), 1, &t) == FC_EREMOTE);
  FC_CHECK(strstr(fc_error_detail(FC_EREMOTE), "without a message"));
  int final;
  const char *fin = "{\"mode\":\"2pass-offline\",\"text\":\"今天天气很好\",\"wav_name\":\"h5\","
                    "\"is_final\":false}";
  FC_CHECK(fc_asr_parse_funasr(fin, strlen(fin), &t, &final) == 0 && final &&
           !strcmp(t, "今天天气很好"));
  g_free(t);
  const char *part = "{\"mode\":\"2pass-online\",\"text\":\"今天\",\"is_final\":false}";
  FC_CHECK(fc_asr_parse_funasr(part, strlen(part), &t, &final) == 0 && !final);
  g_free(t);
  const char *weird = "{\"mode\":\"karaoke\",\"text\":\"x\"}";
  FC_CHECK(fc_asr_parse_funasr(weird, strlen(weird), &t, &final) == FC_EREMOTE);
  FC_CHECK(fc_asr_parse_funasr("{}", 2, &t, &final) == FC_EREMOTE);
}

static void test_refusals(void) {
  int err;
  fc_asr_params p = {.provider = "klingon"};
  FC_CHECK(!fc_asr_create(&p, &err) && err == FC_EINVAL);
  p.provider = "funasr";
  p.url = "http://x"; /* a WebSocket service */
  FC_CHECK(!fc_asr_create(&p, &err) && err == FC_EINVAL);
  p.provider = "pocketsphinx";
  p.url = NULL;
  p.model = "/nonexistent/model";
  FC_CHECK(!fc_asr_create(&p, &err) && err == FC_ENOTFOUND);
  FC_CHECK(strstr(fc_error_detail(err), "pocketsphinx-en-us"));
  /* nothing listening: FC_EREMOTE naming the service; a segment past the cap: FC_EINVAL */
  fc_asr_params o = {.provider = "openai", .url = "http://127.0.0.1:9/v1", .max_seconds = 1};
  fc_asr *a = fc_asr_create(&o, &err);
  FC_REQUIRE(a);
  fc_asr_stream *s = fc_asr_begin(a, &err);
  int16_t buf[16001] = {0};
  FC_CHECK_INT(fc_asr_feed(s, buf, 16001), ==, FC_EINVAL);
  FC_CHECK_INT(fc_asr_feed(s, buf, 8000), ==, 0);
  char *t;
  FC_CHECK_INT(fc_asr_finish(s, NULL, &t), ==, FC_EREMOTE);
  FC_CHECK(strstr(fc_error_detail(FC_EREMOTE), "openai ASR at http://127.0.0.1:9/v1"));
  fc_asr_stream_free(s);
  fc_asr_destroy(a);
  fc_asr_params f = {.provider = "funasr", .url = "ws://127.0.0.1:9", .timeout_s = 2};
  FC_REQUIRE((a = fc_asr_create(&f, &err)));
  FC_REQUIRE((s = fc_asr_begin(a, &err)));
  fc_asr_feed(s, buf, 8000);
  FC_CHECK_INT(fc_asr_finish(s, NULL, &t), ==, FC_EREMOTE);
  FC_CHECK(strstr(fc_error_detail(FC_EREMOTE), "funasr ASR at ws://127.0.0.1:9"));
  fc_asr_stream_free(s);
  fc_asr_destroy(a);
}

int main(void) {
  FC_RUN(test_pocketsphinx_wer);
  FC_RUN(test_vad_on_speech);
  FC_RUN(test_parse);
  FC_RUN(test_refusals);
  FC_TEST_EXIT();
}
