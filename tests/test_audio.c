/* WAV reader (every supported encoding, malformed files) and libsoxr resampler. */
#include "facecast/audio.h"
#include "facecast/error.h"
#include "fc_test.h"

#include <soxr.h>

#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Builds a WAV in memory: fmt tag, channels, rate, bits, and `frames` frames of a 440 Hz sine
 * (identical in every channel). Returns the byte count written to buf. */
static size_t make_wav(uint8_t *buf, int tag, int ch, int rate, int bits, int frames,
                       int extensible) {
  uint8_t *p = buf;
  int fmt_size = extensible ? 40 : 16;
  int data = frames * ch * bits / 8;
#define W32(v) do { uint32_t v_ = (uint32_t)(v); memcpy(p, &v_, 4); p += 4; } while (0)
#define W16(v) do { uint16_t v_ = (uint16_t)(v); memcpy(p, &v_, 2); p += 2; } while (0)
  memcpy(p, "RIFF", 4); p += 4;
  W32(4 + 8 + fmt_size + 8 + 10 + 8 + data);
  memcpy(p, "WAVE", 4); p += 4;
  memcpy(p, "fmt ", 4); p += 4;
  W32(fmt_size);
  W16(extensible ? 0xFFFE : tag);
  W16(ch);
  W32(rate);
  W32(rate * ch * bits / 8);
  W16(ch * bits / 8);
  W16(bits);
  if (extensible) {
    W16(22); W16(bits); W32(0);
    W16(tag); memcpy(p, "\x00\x00\x00\x00\x10\x00\x80\x00\x00\xAA\x00\x38\x9B\x71", 14); p += 14;
  }
  memcpy(p, "LIST", 4); p += 4; /* an unknown chunk with an odd size and its pad byte */
  W32(9);
  memcpy(p, "INFOxxxxx\0", 10); p += 10;
  memcpy(p, "data", 4); p += 4;
  W32(data);
  for (int i = 0; i < frames; i++) {
    double v = 0.5 * sin(2 * M_PI * 440 * i / rate);
    for (int c = 0; c < ch; c++) {
      if (tag == 3 && bits == 32) { float f = (float)v; memcpy(p, &f, 4); p += 4; }
      else if (tag == 3) { memcpy(p, &v, 8); p += 8; }
      else if (bits == 8) *p++ = (uint8_t)(128 + lrint(v * 127));
      else if (bits == 16) W16((int16_t)lrint(v * 32767));
      else if (bits == 24) { int32_t s = (int32_t)lrint(v * 8388607); *p++ = (uint8_t)s; *p++ = (uint8_t)(s >> 8); *p++ = (uint8_t)(s >> 16); }
      else W32((int32_t)lrint(v * 2147483647.0));
    }
  }
#undef W32
#undef W16
  return (size_t)(p - buf);
}

static uint8_t buf[1 << 20];

static void test_variants(void) {
  struct { int tag, ch, rate, bits, ext; double tol; } v[] = {
    {1, 1, 16000, 16, 0, 1e-4}, {1, 2, 44100, 16, 0, 1e-4}, {1, 1, 22050, 8, 0, 1e-2},
    {1, 2, 48000, 24, 0, 1e-6}, {1, 1, 8000, 32, 0, 1e-6},  {3, 1, 16000, 32, 0, 1e-7},
    {3, 2, 32000, 64, 0, 1e-7}, {1, 2, 48000, 16, 1, 1e-4}, {3, 1, 96000, 32, 1, 1e-7},
  };
  for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
    size_t n = make_wav(buf, v[k].tag, v[k].ch, v[k].rate, v[k].bits, 1000, v[k].ext);
    fc_audio a;
    int err = fc_wav_read_mem(buf, n, "v.wav", &a);
    FC_CHECK_INT(err, ==, 0);
    if (err) { fprintf(stderr, "variant %zu: %s\n", k, fc_error_detail(err)); continue; }
    FC_CHECK_INT(a.n, ==, 1000);
    FC_CHECK_INT(a.rate, ==, v[k].rate);
    double maxerr = 0;
    for (int i = 0; i < 1000; i++)
      maxerr = fmax(maxerr, fabs(a.samples[i] - 0.5 * sin(2 * M_PI * 440 * i / v[k].rate)));
    FC_CHECK_NEAR(maxerr, 0, v[k].tol);
    fc_audio_free(&a);
  }
}

static void expect_bad(const uint8_t *data, size_t n, int code, const char *what) {
  fc_audio a;
  fc_error_clear();
  int err = fc_wav_read_mem(data, n, "bad.wav", &a);
  if (err != code) fprintf(stderr, "case %s: got %d (%s)\n", what, err, fc_error_detail(err));
  FC_CHECK_INT(err, ==, code);
  FC_CHECK(strstr(fc_error_detail(err), "bad.wav") != NULL);
  FC_CHECK(a.samples == NULL);
}

static void test_malformed(void) {
  size_t n = make_wav(buf, 1, 1, 16000, 16, 500, 0);
  static uint8_t b2[1 << 16];
  expect_bad(buf, 0, FC_EFORMAT, "empty");
  expect_bad((const uint8_t *)"hello world, not a wav", 22, FC_EFORMAT, "text");
  expect_bad(buf, 30, FC_EFORMAT, "cut inside fmt");
  expect_bad(buf, n - 200, FC_EFORMAT, "truncated data");
  memcpy(b2, buf, n); memcpy(b2 + 8, "AVI ", 4);
  expect_bad(b2, n, FC_EFORMAT, "not WAVE");
  memcpy(b2, buf, n); b2[20] = 0x55; /* MP3-in-WAV */
  expect_bad(b2, n, FC_EUNSUPPORTED, "mp3 tag");
  memcpy(b2, buf, n); b2[22] = 0; /* zero channels */
  expect_bad(b2, n, FC_EFORMAT, "0 channels");
  memcpy(b2, buf, n); b2[34] = 12; /* 12-bit samples */
  expect_bad(b2, n, FC_EUNSUPPORTED, "12 bits");
  memcpy(b2, buf, n); b2[32] = 7; /* block align lies */
  expect_bad(b2, n, FC_EFORMAT, "block align");
  memcpy(b2, buf, n); memset(b2 + 24, 0, 4); /* rate 0 */
  expect_bad(b2, n, FC_EFORMAT, "rate 0");
  memcpy(b2, buf, n); memcpy(b2 + 12, "junk", 4); /* fmt renamed: data before fmt */
  expect_bad(b2, n, FC_EFORMAT, "no fmt");
  expect_bad(buf, 12 + 24 + 18, FC_EFORMAT, "no data chunk");
  /* A data chunk of 0 frames. */
  size_t z = make_wav(b2, 1, 1, 16000, 16, 0, 0);
  expect_bad(b2, z, FC_EFORMAT, "no samples");
  /* Huge chunk size in an unknown chunk must not wrap the cursor. */
  memcpy(b2, buf, n); memset(b2 + 40, 0xFF, 4);
  expect_bad(b2, n, FC_EFORMAT, "huge LIST");
  /* Random bytes after a valid RIFF header. */
  memcpy(b2, buf, 12);
  srand(7);
  for (int i = 12; i < 4000; i++) b2[i] = (uint8_t)rand();
  fc_audio a;
  int err = fc_wav_read_mem(b2, 4000, "bad.wav", &a);
  FC_CHECK(err < 0 || a.n > 0);
  fc_audio_free(&a);
}

/* A caller adding context to the detail it was given ("audio: %s" of fc_error_detail) gets
 * both, not a garbled copy of the buffer onto itself. */
static void test_error_context(void) {
  fc_error_set(FC_EFORMAT, "not audio GStreamer decodes here (WAV, MP3)");
  FC_CHECK_INT(fc_error_set(FC_EFORMAT, "audio: %s", fc_error_detail(FC_EFORMAT)), ==, FC_EFORMAT);
  FC_CHECK(strcmp(fc_error_detail(FC_EFORMAT), "audio: not audio GStreamer decodes here (WAV, MP3)") == 0);
  fc_error_clear();
}

static void test_streamed_size(void) {
  size_t n = make_wav(buf, 1, 1, 16000, 16, 800, 0);
  memset(buf + n - 1600 - 4, 0xFF, 4); /* data size 0xFFFFFFFF: runs to the end */
  fc_audio a;
  FC_CHECK_INT(fc_wav_read_mem(buf, n, "s.wav", &a), ==, 0);
  FC_CHECK_INT(a.n, ==, 800);
  fc_audio_free(&a);
}

static void test_file_roundtrip(void) {
  char dir[] = "/tmp/fc_audio_XXXXXX";
  FC_REQUIRE(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/x.wav", dir);
  float s[321];
  for (int i = 0; i < 321; i++) s[i] = (float)sin(i * 0.1) * 0.9f;
  FC_CHECK_INT(fc_wav_write(path, s, 321, 16000), ==, 0);
  fc_audio a;
  FC_CHECK_INT(fc_wav_read(path, &a), ==, 0);
  FC_CHECK_INT(a.n, ==, 321);
  for (int i = 0; a.samples && i < 321; i++) FC_CHECK_NEAR(a.samples[i], s[i], 1e-4);
  fc_audio_free(&a);
  remove(path);
  FC_CHECK_INT(fc_wav_read(path, &a), ==, FC_ENOTFOUND);
  FC_CHECK_INT(fc_wav_read(dir, &a), ==, FC_EIO); /* a directory */
  rmdir(dir);
}

/* Resampling keeps a tone's frequency and amplitude and the exact length. */
static double tone_amp(const float *x, size_t n, int rate, double f) {
  double re = 0, im = 0;
  for (size_t i = 0; i < n; i++) {
    re += x[i] * cos(2 * M_PI * f * i / rate);
    im += x[i] * sin(2 * M_PI * f * i / rate);
  }
  return 2 * sqrt(re * re + im * im) / n;
}

static void test_resample(void) {
  int rates[] = {8000, 22050, 44100, 48000, 16000};
  for (size_t k = 0; k < 5; k++) {
    int r = rates[k];
    fc_audio in = {malloc(sizeof(float) * r), (size_t)r, r}, out;
    for (int i = 0; i < r; i++) in.samples[i] = (float)(0.5 * sin(2 * M_PI * 1000.0 * i / r));
    FC_CHECK_INT(fc_resample(&in, 16000, &out), ==, 0);
    FC_CHECK_INT(out.n, ==, 16000);
    FC_CHECK_INT(out.rate, ==, 16000);
    /* Away from the edges the 1 kHz tone keeps amplitude 0.5; 3 kHz stays absent. */
    FC_CHECK_NEAR(tone_amp(out.samples + 1600, 12800, 16000, 1000), 0.5, 0.01);
    FC_CHECK_NEAR(tone_amp(out.samples + 1600, 12800, 16000, 3000), 0, 0.01);
    fc_audio_free(&in);
    fc_audio_free(&out);
  }
  /* Content above the new Nyquist is filtered out, not aliased. */
  fc_audio in = {malloc(sizeof(float) * 48000), 48000, 48000}, out;
  for (int i = 0; i < 48000; i++) in.samples[i] = (float)(0.5 * sin(2 * M_PI * 10000.0 * i / 48000));
  FC_CHECK_INT(fc_resample(&in, 16000, &out), ==, 0);
  FC_CHECK_NEAR(tone_amp(out.samples + 1600, 12800, 16000, 6000), 0, 0.01);
  fc_audio_free(&in);
  fc_audio_free(&out);
  fc_audio bad = {NULL, 0, 0};
  FC_CHECK_INT(fc_resample(&bad, 16000, &out), ==, FC_EINVAL);
}

/* Long input goes through in pieces: the same as one soxr_oneshot call, sample for sample,
 * across piece boundaries (espeak's 22050 Hz, 3 minutes: many 64 k pieces), and no samples
 * lost at the end. */
static void test_resample_long(void) {
  size_t n = 22050 * 180;
  fc_audio in = {malloc(sizeof(float) * n), n, 22050}, out;
  for (size_t i = 0; i < n; i++) in.samples[i] = (float)(0.4 * sin(2 * M_PI * 440.0 * i / 22050) * sin(i * 1e-4));
  FC_REQUIRE(fc_resample(&in, 16000, &out) == 0);
  size_t want = (size_t)((double)n * 16000 / 22050 + 0.5), done = 0;
  FC_CHECK_INT(out.n, ==, want);
  float *ref = malloc(sizeof(float) * want);
  soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
  FC_REQUIRE(!soxr_oneshot(22050, 16000, 1, in.samples, n, NULL, ref, want, &done, &io, &q, NULL));
  double worst = 0;
  for (size_t i = 0; i < done && i < out.n; i++) worst = fmax(worst, fabs(ref[i] - out.samples[i]));
  FC_CHECK(done + 2 >= want);
  FC_CHECK(worst < 1e-6);
  free(ref);
  fc_audio_free(&in);
  fc_audio_free(&out);
}

int main(void) {
  FC_RUN(test_variants);
  FC_RUN(test_malformed);
  FC_RUN(test_error_context);
  FC_RUN(test_streamed_size);
  FC_RUN(test_file_roundtrip);
  FC_RUN(test_resample);
  FC_RUN(test_resample_long);
  FC_TEST_EXIT();
}
