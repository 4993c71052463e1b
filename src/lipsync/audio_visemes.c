/* The audio viseme classifier (see src/lipsync/audio_visemes.h): MFCCs and a linear model.
 *
 * The FFT is our own (a 256-point complex radix-2 transform packing the 512-point real one):
 * four windows a frame cost a few microseconds, and FFTW's planner would need a global lock
 * shared with the mel code. The tables (window, twiddles, mel bands, DCT) are built once,
 * under pthread_once; the model's coefficients come from the generated audio_visemes_model.h.
 * Everything per frame works on the stack and the caller's fc_avis.
 */
#include "lipsync/audio_visemes.h"
#include "facecast/audio.h"
#include "lipsync/audio_visemes_model.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#define NFFT 512
#define NC 256 /* the complex transform packing the real one */
#define NBIN (NFFT / 2 + 1)
#define NMEL 26
#define SILENT_DB (-55.0f)

static struct {
  float win[FC_AVIS_WIN];
  float cw[NC / 2], sw[NC / 2]; /* exp(−2πik/256) */
  float cs[NBIN], ss[NBIN];     /* exp(−2πik/512) */
  unsigned char rev[NC];
  short band[NBIN]; /* the mel band whose rising edge holds the bin (its falling edge: band−1) */
  float bw[NBIN];   /* the rising weight */
  float dct[FC_AVIS_NCEP][NMEL];
} T;
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static float hz_to_mel(float f) { return 2595.0f * log10f(1 + f / 700.0f); }
static float mel_to_hz(float m) { return 700.0f * (powf(10, m / 2595.0f) - 1); }

static void build_tables(void) {
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < FC_AVIS_WIN; i++) T.win[i] = (float)(0.54 - 0.46 * cos(2 * pi * i / (FC_AVIS_WIN - 1)));
  for (int k = 0; k < NC / 2; k++) T.cw[k] = (float)cos(2 * pi * k / NC), T.sw[k] = (float)-sin(2 * pi * k / NC);
  for (int k = 0; k < NBIN; k++) T.cs[k] = (float)cos(2 * pi * k / NFFT), T.ss[k] = (float)-sin(2 * pi * k / NFFT);
  for (int i = 0; i < NC; i++) {
    int r = 0;
    for (int b = 0; b < 8; b++) r |= ((i >> b) & 1) << (7 - b);
    T.rev[i] = (unsigned char)r;
  }
  /* NMEL triangles with centres equally spaced in mel between 80 and 7600 Hz */
  float c[NMEL + 2], lo = hz_to_mel(80), hi = hz_to_mel(7600);
  for (int j = 0; j < NMEL + 2; j++) c[j] = mel_to_hz(lo + (hi - lo) * j / (NMEL + 1));
  for (int k = 0; k < NBIN; k++) {
    float f = (float)k * FC_SAMPLE_RATE / NFFT;
    T.band[k] = -1, T.bw[k] = 0;
    for (int j = 0; j < NMEL + 1; j++)
      if (f >= c[j] && f < c[j + 1]) {
        T.band[k] = (short)j;
        T.bw[k] = (f - c[j]) / (c[j + 1] - c[j]);
      }
  }
  for (int n = 0; n < FC_AVIS_NCEP; n++)
    for (int m = 0; m < NMEL; m++) T.dct[n][m] = (float)cos(pi * (n + 1) * (m + 0.5) / NMEL);
}

static void fft256(float *re, float *im) {
  for (int i = 0; i < NC; i++) {
    int j = T.rev[i];
    if (j > i) {
      float t = re[i];
      re[i] = re[j], re[j] = t;
      t = im[i], im[i] = im[j], im[j] = t;
    }
  }
  for (int len = 2; len <= NC; len <<= 1) {
    int half = len / 2, step = NC / len;
    for (int i = 0; i < NC; i += len)
      for (int j = 0; j < half; j++) {
        float wr = T.cw[j * step], wi = T.sw[j * step];
        int a = i + j, b = a + half;
        float tr = re[b] * wr - im[b] * wi, ti = re[b] * wi + im[b] * wr;
        re[b] = re[a] - tr, im[b] = im[a] - ti;
        re[a] += tr, im[a] += ti;
      }
  }
}

/* MFCCs c1..c12 of one 25 ms window (pre-emphasised, Hamming, zero-padded to 512). */
static void mfcc(const float *x, float cep[FC_AVIS_NCEP]) {
  float re[NC], im[NC], y[NFFT];
  for (int i = 0; i < FC_AVIS_WIN; i++) y[i] = (x[i] - 0.97f * (i ? x[i - 1] : x[0])) * T.win[i];
  memset(y + FC_AVIS_WIN, 0, sizeof(float) * (NFFT - FC_AVIS_WIN));
  for (int n = 0; n < NC; n++) re[n] = y[2 * n], im[n] = y[2 * n + 1];
  fft256(re, im);
  float mel[NMEL] = {0};
  for (int k = 0; k < NBIN; k++) {
    /* the real transform's bin k from the packed complex one */
    int a = k % NC, b = (NC - k) % NC;
    float er = (re[a] + re[b]) / 2, ei = (im[a] - im[b]) / 2;
    float orr = (im[a] + im[b]) / 2, oi = -(re[a] - re[b]) / 2;
    float xr = er + T.cs[k] * orr - T.ss[k] * oi, xi = ei + T.cs[k] * oi + T.ss[k] * orr;
    float p = xr * xr + xi * xi;
    int j = T.band[k];
    if (j < 0) continue;
    if (j < NMEL) mel[j] += T.bw[k] * p;
    if (j >= 1) mel[j - 1] += (1 - T.bw[k]) * p;
  }
  for (int m = 0; m < NMEL; m++) mel[m] = logf(mel[m] + 1e-10f);
  for (int n = 0; n < FC_AVIS_NCEP; n++) {
    float s = 0;
    for (int m = 0; m < NMEL; m++) s += T.dct[n][m] * mel[m];
    cep[n] = s;
  }
}

void fc_avis_init(fc_avis *a) {
  pthread_once(&tables_once, build_tables);
  memset(a, 0, sizeof *a);
  a->peak_db = -20.0f;
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

float fc_avis_features(fc_avis *a, const float *pcm, float feat[FC_AVIS_NFEAT], int *silent) {
  pthread_once(&tables_once, build_tables); /* a zeroed fc_avis works too */
  const int n = FC_SAMPLES_PER_FRAME, keep = FC_AVIS_WIN - FC_AVIS_HOP;
  double e = 0;
  int zc = 0;
  float prev = a->prev_sample;
  for (int i = 0; i < n; i++) {
    e += (double)pcm[i] * pcm[i];
    zc += (pcm[i] >= 0) != (prev >= 0);
    prev = pcm[i];
  }
  a->prev_sample = prev;
  float db = 10.0f * log10f((float)(e / n) + 1e-12f);
  /* The level against a slowly decaying peak: loud and quiet speakers open alike. */
  a->peak_db = db > a->peak_db ? db : a->peak_db - 0.05f;
  if (a->peak_db < -40.0f) a->peak_db = -40.0f;
  int sil = db < SILENT_DB;
  if (silent) *silent = sil;
  float level = sil ? 0 : clampf((db - (a->peak_db - 32.0f)) / 26.0f, 0, 1);

  float buf[FC_AVIS_WIN - FC_AVIS_HOP + FC_SAMPLES_PER_FRAME], cep[FC_AVIS_NCEP] = {0};
  memcpy(buf, a->tail, sizeof a->tail);
  memcpy(buf + keep, pcm, sizeof(float) * n);
  const int nwin = (keep + n - FC_AVIS_WIN) / FC_AVIS_HOP + 1; /* 4 */
  for (int w = 0; w < nwin; w++) {
    float c[FC_AVIS_NCEP];
    mfcc(buf + w * FC_AVIS_HOP, c);
    for (int k = 0; k < FC_AVIS_NCEP; k++) cep[k] += c[k] / nwin;
  }
  memcpy(a->tail, buf + n, sizeof a->tail);
  if (feat) {
    feat[0] = level;
    feat[1] = level * level;
    feat[2] = (float)zc / n;
    memcpy(feat + 3, cep, sizeof cep);
    memcpy(feat + 3 + FC_AVIS_NCEP, a->prev_cep, sizeof cep);
  }
  memcpy(a->prev_cep, cep, sizeof cep);
  return db;
}

fc_mouth fc_avis_predict(const float feat[FC_AVIS_NFEAT]) {
  float y[3];
  for (int o = 0; o < 3; o++) {
    float s = avis_w[o][FC_AVIS_NFEAT];
    for (int k = 0; k < FC_AVIS_NFEAT; k++) s += avis_w[o][k] * (feat[k] - avis_mean[k]) * avis_scale[k];
    y[o] = clampf(s, 0, 1);
  }
  return (fc_mouth){y[0], y[1], y[2]};
}

fc_mouth fc_avis_push(fc_avis *a, const float *pcm) {
  float f[FC_AVIS_NFEAT];
  int silent;
  fc_avis_features(a, pcm, f, &silent);
  return silent ? (fc_mouth){0, 0, 0} : fc_avis_predict(f);
}
