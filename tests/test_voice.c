/* Voices from TTS services, the parts that need no service (speech/voice.h): streamed PCM and
 * WAV cut anywhere, Edge's token, SSML and frames, error bodies, the streaming resampler, the
 * streaming MP3 decoder; and the providers' refusals. The providers against servers speaking
 * their protocols: tests/api/voice_test.py. */
#include "audio/resampler.h"
#include "facecast/audio.h"
#include "facecast/error.h"
#include "fc_test.h"
#include "media/audio_dec.h"
#include "speech/voice.h"

#include <glib.h>
#include <stdint.h>

typedef struct pcm_got {
  int16_t s[70000];
  size_t n;
  int rate;
} pcm_got;

static int collect(void *user, const int16_t *pcm, size_t n, int rate) {
  pcm_got *g = user;
  for (size_t i = 0; i < n && g->n < G_N_ELEMENTS(g->s); i++) g->s[g->n++] = pcm[i];
  g->rate = rate;
  return 0;
}

static size_t wav_header(uint8_t *h, int rate, int ch, int with_list) {
  size_t n = 0;
  memcpy(h, "RIFF\0\0\0\0WAVEfmt ", 16); /* sizes 0, as streaming servers write them */
  n = 16;
  uint8_t fmt[20] = {16, 0, 0, 0, 1, 0, (uint8_t)ch, 0};
  fmt[8] = rate & 255, fmt[9] = rate >> 8 & 255, fmt[10] = rate >> 16 & 255;
  int br = rate * 2 * ch;
  fmt[12] = br & 255, fmt[13] = br >> 8 & 255, fmt[14] = br >> 16 & 255;
  fmt[16] = (uint8_t)(2 * ch), fmt[18] = 16;
  memcpy(h + n, fmt, 20);
  n += 20;
  if (with_list) {
    memcpy(h + n, "LIST\3\0\0\0abc\0", 12); /* odd size: a pad byte follows */
    n += 12;
  }
  memcpy(h + n, "data\xff\xff\xff\xff", 8);
  return n + 8;
}

static void test_pcm_reader(void) {
  /* headerless, fed a byte at a time: samples come out whole, at the default rate */
  int16_t src[1000];
  for (int i = 0; i < 1000; i++) src[i] = (int16_t)(i * 31 - 15000);
  static pcm_got g;
  fc_pcm_reader r;
  fc_pcm_reader_init(&r, 24000);
  const uint8_t *b = (const uint8_t *)src;
  for (size_t i = 0; i < sizeof src; i++) FC_REQUIRE(fc_pcm_reader_feed(&r, b + i, 1, collect, &g) == 0);
  FC_CHECK_INT(g.n, ==, 1000);
  FC_CHECK_INT(g.rate, ==, 24000);
  FC_CHECK(!memcmp(g.s, src, sizeof src));
  /* a WAV header (stereo, 32 kHz, a LIST chunk) cut at every place: rate from the header,
   * channels averaged */
  uint8_t buf[2048];
  size_t h = wav_header(buf, 32000, 2, 1);
  for (int i = 0; i < 200; i++) {
    int16_t l = (int16_t)(i * 100), rr = (int16_t)(-i * 50);
    memcpy(buf + h + 4 * i, &l, 2);
    memcpy(buf + h + 4 * i + 2, &rr, 2);
  }
  size_t total = h + 800;
  for (size_t cut = 1; cut < total; cut += 7) {
    memset(&g, 0, sizeof g);
    fc_pcm_reader_init(&r, 24000);
    FC_REQUIRE(fc_pcm_reader_feed(&r, buf, cut, collect, &g) == 0);
    FC_REQUIRE(fc_pcm_reader_feed(&r, buf + cut, total - cut, collect, &g) == 0);
    FC_CHECK_INT(g.n, ==, 200);
    FC_CHECK_INT(g.rate, ==, 32000);
    FC_CHECK_INT(g.s[199], ==, (199 * 100 - 199 * 50) / 2);
  }
  /* not 16-bit PCM, and a header that never reaches its data: errors, not crashes */
  h = wav_header(buf, 16000, 1, 0);
  buf[34] = 8; /* 8 bits */
  fc_pcm_reader_init(&r, 24000);
  FC_CHECK_INT(fc_pcm_reader_feed(&r, buf, h, collect, &g), ==, FC_EREMOTE);
  memset(buf, 'x', sizeof buf);
  memcpy(buf, "RIFF\0\0\0\0WAVE", 12);
  for (int at = 12; at + 8 <= 1000; at += 8) memcpy(buf + at, "junk\0\0\0\0", 8);
  fc_pcm_reader_init(&r, 24000);
  FC_CHECK_INT(fc_pcm_reader_feed(&r, buf, 1000, collect, &g), ==, FC_EREMOTE);
  memcpy(buf, "RIFF\0\0\0\0WAVEfmt \x10\0\0\0", 20);
  fc_pcm_reader_init(&r, 24000);
  FC_CHECK_INT(fc_pcm_reader_feed(&r, buf, 36, collect, &g), ==, FC_EREMOTE); /* format 'xx' */
}

static void test_edge_wire(void) {
  /* Sec-MS-GEC: the rounded Windows file time and the token, SHA-256, upper-case hex */
  char gec[65];
  fc_edge_gec(1700000000, gec);
  FC_CHECK(!strcmp(gec, "42301B335578FEFDAE2637DED1ABD614505D432559EC08032B82048483726AFF"));
  char gec2[65];
  fc_edge_gec(1700000000 + 299 - 1700000000 % 300 + 0, gec2); /* the same five minutes */
  FC_CHECK(!strcmp(gec, gec2));
  fc_edge_gec(1767225600, gec);
  FC_CHECK(!strcmp(gec, "42D1947403FD94975436C65DBFCA8003073F9CB5C3F1CE25AF8961A11D7C3DFE"));
  /* SSML: escaped text, control characters blanked, the long voice name */
  char *s = fc_edge_ssml("a<b & 'c'\x01", "zh-CN-YunxiaNeural");
  FC_CHECK(strstr(s, "Microsoft Server Speech Text to Speech Voice (zh-CN, YunxiaNeural)"));
  FC_CHECK(strstr(s, ">a&lt;b &amp; &apos;c&apos; </prosody>"));
  g_free(s);
  s = fc_edge_ssml("x", "zh-CN-liaoning-XiaobeiNeural");
  FC_CHECK(strstr(s, "(zh-CN-liaoning, XiaobeiNeural)"));
  g_free(s);
  /* binary frames: 2-byte length, headers, MP3 */
  const char hdr[] = "X-RequestId:abc\r\nContent-Type:audio/mpeg\r\nPath:audio\r\n";
  uint8_t f[256];
  size_t hl = strlen(hdr);
  f[0] = (uint8_t)(hl >> 8), f[1] = (uint8_t)hl;
  memcpy(f + 2, hdr, hl);
  memcpy(f + 2 + hl, "MP3!", 4);
  const uint8_t *a;
  size_t n;
  FC_CHECK_INT(fc_edge_binary(f, 2 + hl + 4, &a, &n), ==, 0);
  FC_CHECK(n == 4 && !memcmp(a, "MP3!", 4));
  FC_CHECK_INT(fc_edge_binary(f, 2 + hl - 3, &a, &n), ==, FC_EREMOTE); /* headers cut */
  FC_CHECK_INT(fc_edge_binary(f, 1, &a, &n), ==, FC_EREMOTE);
  memcpy(f + 2 + hl - 7, "audix", 5); /* Path:audix */
  FC_CHECK_INT(fc_edge_binary(f, 2 + hl + 4, &a, &n), ==, FC_EREMOTE);
  char path[32];
  const char *t = "X-RequestId:1\r\nPath:turn.end\r\n\r\n{}";
  FC_CHECK_INT(fc_edge_text_path(t, strlen(t), path, sizeof path), ==, 0);
  FC_CHECK(!strcmp(path, "turn.end"));
  FC_CHECK_INT(fc_edge_text_path("Foo:bar\r\n\r\nPath:x", 18, path, sizeof path), ==, FC_EREMOTE);
}

static void test_error_text(void) {
  const char *cases[][2] = {
      {"{\"error\":{\"message\":\"Incorrect API key\",\"type\":\"x\"}}", "Incorrect API key"},
      {"{\"message\":\"ref_audio_path is required\"}", "ref_audio_path is required"},
      {"{\"detail\":[{\"type\":\"missing\",\"msg\":\"Field required\"}]}", "Field required"},
      {"Internal Server Error\nmore", "Internal Server Error"},
      {"{\"statusCode\":500,\"message\":\"No audio\",\"error\":\"Internal\"}", "No audio"},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
    char *m = fc_voice_error_text(cases[i][0], strlen(cases[i][0]));
    FC_CHECK(!strcmp(m, cases[i][1]));
    g_free(m);
  }
  char junk[300];
  memset(junk, 0x01, sizeof junk);
  char *m = fc_voice_error_text(junk, sizeof junk);
  FC_CHECK(strlen(m) <= 200);
  g_free(m);
  /* a body ending in a lead byte that promises more bytes than follow (0xfd: six): the text
   * is made valid before it is measured (measuring first read past its end once, under the
   * fuzzer) */
  static const char cut[] = "%%%%!%%%u0000%\xff\xfdu\xfd";
  m = fc_voice_error_text(cut, sizeof cut - 1);
  FC_CHECK(g_utf8_validate(m, -1, NULL) && g_utf8_strlen(m, -1) <= 200 && !strchr(m, '\n'));
  g_free(m);
}

/* Pieces of any size come out as one signal: the same as resampling it whole. */
static void test_resampler_stream(void) {
  fc_audio in = {malloc(48000 * sizeof(float)), 48000, 24000}, whole;
  for (int i = 0; i < 48000; i++) in.samples[i] = 0.5f * sinf(i * 2 * (float)M_PI * 440 / 24000);
  FC_REQUIRE(fc_resample(&in, 16000, &whole) == 0);
  int err;
  fc_resampler *r = fc_resampler_create(24000, 16000, &err);
  FC_REQUIRE(r);
  float *out = malloc(40000 * sizeof(float));
  size_t n = 0;
  int16_t piece[4000];
  for (size_t at = 0, k = 1; at < 48000; at += k, k = k * 7 % 3001 + 1) {
    if (at + k > 48000) k = 48000 - at;
    for (size_t i = 0; i < k; i++) piece[i] = (int16_t)lrintf(in.samples[at + i] * 32768);
    const float *o;
    size_t got;
    FC_REQUIRE(fc_resampler_s16(r, piece, k, 0, &o, &got) == 0);
    memcpy(out + n, o, got * sizeof(float));
    n += got;
  }
  const float *o;
  size_t got;
  FC_REQUIRE(fc_resampler_s16(r, NULL, 0, 1, &o, &got) == 0);
  memcpy(out + n, o, got * sizeof(float));
  n += got;
  FC_CHECK_INT(labs((long)n - 32000), <=, 2);
  double worst = 0;
  for (size_t i = 100; i < 31900; i++) worst = fmax(worst, fabs(out[i] - whole.samples[i]));
  FC_CHECK(worst < 1e-3); /* int16 steps and nothing else */
  FC_CHECK(fc_resampler_create(24000, 10, &err) == NULL && err == FC_EINVAL);
  fc_resampler_destroy(r);
  free(out);
  fc_audio_free(&in);
  fc_audio_free(&whole);
}

/* MP3 pushed in pieces decodes as it comes (the first samples before the end of the input)
 * to the tone it was made from; garbage is an error. */
static void test_mp3_stream(void) {
  char dir[] = "/tmp/fc_voice_XXXXXX", wav[128], mp3[128], cmd[512];
  FC_REQUIRE(mkdtemp(dir));
  snprintf(wav, sizeof wav, "%s/t.wav", dir);
  snprintf(mp3, sizeof mp3, "%s/t.mp3", dir);
  float *tone = malloc(24000 * 2 * sizeof(float));
  for (int i = 0; i < 48000; i++) tone[i] = 0.4f * sinf(i * 2 * (float)M_PI * 300 / 24000);
  FC_REQUIRE(fc_wav_write(wav, tone, 48000, 24000) == 0);
  free(tone);
  snprintf(cmd, sizeof cmd,
           "ffmpeg -loglevel error -y -i '%s' -ac 1 -ar 24000 -b:a 48k -f mp3 '%s'", wav, mp3);
  FC_REQUIRE(system(cmd) == 0);
  gchar *data;
  gsize size;
  FC_REQUIRE(g_file_get_contents(mp3, &data, &size, NULL));
  int err, done = 0;
  fc_audio_dec *d = fc_audio_dec_create("audio/mpeg, mpegversion=(int)1", &err);
  FC_REQUIRE(d);
  size_t total = 0, before_end = 0;
  double energy = 0;
  for (size_t at = 0; at < size; at += 1000) {
    FC_REQUIRE(fc_audio_dec_push(d, data + at, size - at < 1000 ? size - at : 1000) == 0);
    const float *pcm;
    size_t n;
    g_usleep(20000);
    FC_REQUIRE(fc_audio_dec_take(d, 0, &pcm, &n, &done) == 0);
    total += n;
  }
  before_end = total;
  FC_REQUIRE(fc_audio_dec_end(d) == 0);
  while (!done) {
    const float *pcm;
    size_t n;
    FC_REQUIRE(fc_audio_dec_take(d, 2000, &pcm, &n, &done) == 0);
    for (size_t i = 0; i < n; i++) energy += pcm[i] * pcm[i];
    total += n;
  }
  FC_CHECK(before_end > 8000); /* decoding ran while the input came */
  FC_CHECK_INT(labs((long)total - 32000), <, 2000); /* 2 s at 16 kHz (MP3 adds its padding) */
  fc_audio_dec_destroy(d);
  /* garbage */
  d = fc_audio_dec_create("audio/mpeg, mpegversion=(int)1", &err);
  FC_REQUIRE(d);
  char junk[4096];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)(i * 7919 >> 3);
  fc_audio_dec_push(d, junk, sizeof junk);
  fc_audio_dec_end(d);
  const float *pcm;
  size_t n;
  err = fc_audio_dec_take(d, 2000, &pcm, &n, &done);
  FC_CHECK(err == FC_EMEDIA || (err == 0 && n == 0)); /* nothing decodable: no audio */
  fc_audio_dec_destroy(d);
  g_free(data);
  unlink(wav), unlink(mp3), rmdir(dir);
  (void)energy;
}

static void test_voice_create(void) {
  int err;
  fc_voice_params p = {.provider = "nonesuch"};
  FC_CHECK(fc_voice_create(&p, &err) == NULL && err == FC_EINVAL);
  p.provider = "openai";
  p.url = "ftp://x";
  FC_CHECK(fc_voice_create(&p, &err) == NULL && err == FC_EINVAL);
  p.provider = "edge";
  p.url = "http://x"; /* edge is a WebSocket */
  FC_CHECK(fc_voice_create(&p, &err) == NULL && err == FC_EINVAL);
  p.provider = "fishtts"; /* LiveTalking's name */
  p.url = NULL;
  fc_voice *v = fc_voice_create(&p, &err);
  FC_REQUIRE(v);
  FC_CHECK(!strcmp(fc_voice_name(v), "fish") && !strcmp(fc_voice_url(v), "http://127.0.0.1:8080"));
  fc_voice_destroy(v);
  /* gpt-sovits without reference audio: refused before any connection */
  p.provider = "gpt-sovits";
  p.url = "http://127.0.0.1:9";
  FC_REQUIRE((v = fc_voice_create(&p, &err)));
  fc_voice_req r = {.text = "hi"};
  FC_CHECK_INT(fc_voice_speak(v, &r, NULL, NULL, NULL), ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(FC_EINVAL), "reference audio"));
  fc_voice_destroy(v);
  /* nothing listening: FC_EREMOTE naming the service */
  p.provider = "openai";
  FC_REQUIRE((v = fc_voice_create(&p, &err)));
  FC_CHECK_INT(fc_voice_speak(v, &r, NULL, NULL, NULL), ==, FC_EREMOTE);
  FC_CHECK(strstr(fc_error_detail(FC_EREMOTE), "openai TTS at http://127.0.0.1:9"));
  fc_voice_destroy(v);
  p.provider = "edge";
  p.url = "ws://127.0.0.1:9/edge/v1";
  FC_REQUIRE((v = fc_voice_create(&p, &err)));
  FC_CHECK_INT(fc_voice_speak(v, &r, NULL, NULL, NULL), ==, FC_EREMOTE);
  FC_CHECK(strstr(fc_error_detail(FC_EREMOTE), "edge TTS at ws://127.0.0.1:9"));
  fc_voice_destroy(v);
}

int main(void) {
  FC_RUN(test_pcm_reader);
  FC_RUN(test_edge_wire);
  FC_RUN(test_error_text);
  FC_RUN(test_resampler_stream);
  FC_RUN(test_mp3_stream);
  FC_RUN(test_voice_create);
  FC_TEST_EXIT();
}
