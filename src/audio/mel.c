/* The Wav2Lip mel spectrogram (see src/audio/mel.h and REFERENCE.md, "Wav2Lip data
 * contract").
 *
 * Design note. Wav2Lip computes its mel with librosa; the network was trained on exactly that,
 * so this file reproduces it step by step rather than approximating it:
 *   - pre-emphasis y[n] = x[n] - 0.97 x[n-1] with x[-1] = 0 (scipy lfilter), so y[0] = x[0];
 *   - centred STFT: y is padded by n_fft/2 = 400 samples on both sides in numpy 'reflect' mode
 *     (mirror about the edge sample without repeating it); column t covers padded samples
 *     [200 t, 200 t + 800), i.e. y[200 t - 400 .. 200 t + 400). That gives 1 + n/200 columns;
 *   - periodic Hann window of 800 (0.5 - 0.5 cos(2 pi i / 800)), FFTW single-precision r2c;
 *   - magnitude, then the 80-band Slaney mel filter bank (55..7600 Hz, Slaney mel scale, each
 *     triangle scaled by 2 / (upper - lower edge in Hz)), built in double and stored as float
 *     like librosa's;
 *   - 20 log10(max(1e-5, m)) - 20, then clip(8 (dB + 100) / 100 - 4, -4, 4).
 * Short signals: numpy's reflect padding keeps mirroring when the pad is longer than the signal
 * (the 2(n-1)-periodic mirror extension), and a 1-sample signal repeats its sample; this file
 * does the same for every n >= 1, so any n matches librosa run on a recent numpy. n = 0 (which
 * numpy rejects) is defined as silence: one column of -4 (the floor).
 * No padded copy is made: each column's 800 samples are gathered straight from pcm (with the
 * mirror mapping only for the few columns that touch an edge), pre-emphasised and windowed in
 * double and rounded to float for the FFT; magnitudes and the mel sums are accumulated in
 * double. So fc_mel_compute allocates nothing at all. The filter bank is stored sparsely as a
 * [first, last) bin range per band, which keeps 60 s of audio to a few milliseconds.
 * Threads: FFTW's planner (plan creation and destruction) is not thread-safe, so both run under
 * one static mutex; fftwf_execute on a handle's own plan is. A single fc_mel is NOT thread-safe
 * (its FFT buffers are scratch): use one per thread. */
#include "audio/mel.h"

#include "facecast/error.h"

#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SR 16000.0
#define N_FFT 800
#define N_BINS (N_FFT / 2 + 1)
#define PAD (N_FFT / 2)
#define PREEMPH 0.97
#define FMIN 55.0
#define FMAX 7600.0
#define FLOOR_VALUE (-4.0f) /* normalised silence; also fills windows of too-short mels */

struct fc_mel {
  fftwf_plan plan;
  float *frame;           /* N_FFT windowed samples: the plan's input */
  fftwf_complex *spec;    /* N_BINS: the plan's output */
  double window[N_FFT];   /* periodic Hann */
  double mag[N_BINS];     /* |X| of the current column */
  int band_lo[FC_MEL_BANDS], band_hi[FC_MEL_BANDS]; /* non-zero bins [lo, hi) of each band */
  float fb[FC_MEL_BANDS][N_BINS];
};

/* FFTW's planner is process-global state; serialise every call that touches it. */
static pthread_mutex_t fftw_planner_lock = PTHREAD_MUTEX_INITIALIZER;

/* Slaney's mel scale: linear (200/3 Hz per mel) below 1 kHz, logarithmic (6.4x per 27 mel)
 * above; htk=False in librosa. */
#define MEL_F_SP (200.0 / 3.0)
#define MEL_MIN_LOG_HZ 1000.0
#define MEL_MIN_LOG_MEL (MEL_MIN_LOG_HZ / MEL_F_SP)

static double mel_logstep(void) { return log(6.4) / 27.0; }

static double hz_to_mel(double hz) {
  if (hz >= MEL_MIN_LOG_HZ) return MEL_MIN_LOG_MEL + log(hz / MEL_MIN_LOG_HZ) / mel_logstep();
  return hz / MEL_F_SP;
}

static double mel_to_hz(double mel) {
  if (mel >= MEL_MIN_LOG_MEL) return MEL_MIN_LOG_HZ * exp(mel_logstep() * (mel - MEL_MIN_LOG_MEL));
  return MEL_F_SP * mel;
}

/* librosa.filters.mel(sr=16000, n_fft=800, n_mels=80, fmin=55, fmax=7600, htk=False,
 * norm='slaney'): band b is a triangle rising from edge[b] to edge[b+1] and falling to
 * edge[b+2] (82 edges equally spaced in mel), scaled by 2 / (edge[b+2] - edge[b]) so each band
 * has unit area in Hz. */
static void build_filter_bank(fc_mel *m) {
  double edge[FC_MEL_BANDS + 2];
  double lo_mel = hz_to_mel(FMIN), hi_mel = hz_to_mel(FMAX);
  double step = (hi_mel - lo_mel) / (FC_MEL_BANDS + 1);
  for (int i = 0; i < FC_MEL_BANDS + 2; i++) edge[i] = mel_to_hz(lo_mel + i * step);
  edge[FC_MEL_BANDS + 1] = FMAX; /* as numpy's linspace, the last point is exactly the end */

  for (int b = 0; b < FC_MEL_BANDS; b++) {
    double lo = edge[b], mid = edge[b + 1], hi = edge[b + 2];
    double norm = 2.0 / (hi - lo);
    m->band_lo[b] = N_BINS;
    m->band_hi[b] = 0;
    for (int k = 0; k < N_BINS; k++) {
      double f = k * (SR / N_FFT);
      double rising = (f - lo) / (mid - lo), falling = (hi - f) / (hi - mid);
      double w = rising < falling ? rising : falling;
      m->fb[b][k] = w > 0.0 ? (float)(w * norm) : 0.0f;
      if (m->fb[b][k] != 0.0f) {
        if (k < m->band_lo[b]) m->band_lo[b] = k;
        m->band_hi[b] = k + 1;
      }
    }
    if (m->band_hi[b] == 0) m->band_lo[b] = 0; /* an empty band (not the case here) sums to 0 */
  }
}

fc_mel *fc_mel_create(int *err) {
  fc_mel *m = calloc(1, sizeof *m);
  if (!m) {
    if (err) *err = fc_error_set(FC_ENOMEM, "fc_mel_create: out of memory");
    return NULL;
  }
  for (int i = 0; i < N_FFT; i++) m->window[i] = 0.5 - 0.5 * cos(2.0 * M_PI * i / N_FFT);
  build_filter_bank(m);

  pthread_mutex_lock(&fftw_planner_lock);
  m->frame = fftwf_malloc(sizeof(float) * N_FFT);
  m->spec = fftwf_malloc(sizeof(fftwf_complex) * N_BINS);
  if (m->frame && m->spec)
    m->plan = fftwf_plan_dft_r2c_1d(N_FFT, m->frame, m->spec, FFTW_ESTIMATE);
  pthread_mutex_unlock(&fftw_planner_lock);
  if (!m->plan) {
    fc_mel_destroy(m);
    if (err) *err = fc_error_set(FC_ENOMEM, "fc_mel_create: FFTW plan of size %d failed", N_FFT);
    return NULL;
  }
  if (err) *err = FC_OK;
  return m;
}

void fc_mel_destroy(fc_mel *m) {
  if (!m) return;
  pthread_mutex_lock(&fftw_planner_lock);
  if (m->plan) fftwf_destroy_plan(m->plan);
  fftwf_free(m->frame);
  fftwf_free(m->spec);
  pthread_mutex_unlock(&fftw_planner_lock);
  free(m);
}

size_t fc_mel_columns(size_t n_samples) { return 1 + n_samples / FC_MEL_HOP; }

/* numpy 'reflect' padding, generalised as np.pad does it: index j (any integer) of the infinite
 * mirror extension of a signal of n >= 1 samples, period 2(n-1); n = 1 repeats sample 0. */
static size_t reflect_index(int64_t j, size_t n) {
  if (n == 1) return 0;
  int64_t period = 2 * ((int64_t)n - 1);
  int64_t r = j % period;
  if (r < 0) r += period;
  if (r >= (int64_t)n) r = period - r;
  return (size_t)r;
}

/* The pre-emphasised sample y[j] for 0 <= j < n (x[-1] = 0). */
static double preemph_at(const float *x, size_t j) {
  return j == 0 ? (double)x[0] : (double)x[j] - PREEMPH * (double)x[j - 1];
}

/* Fills m->frame with windowed, pre-emphasised samples y[j0 .. j0 + 800) of the padded signal. */
static void gather_frame(fc_mel *m, const float *pcm, size_t n, int64_t j0) {
  if (n == 0) { /* silence by definition */
    memset(m->frame, 0, sizeof(float) * N_FFT);
  } else if (j0 >= 1 && j0 + N_FFT <= (int64_t)n) { /* interior: no padding, x[j-1] exists */
    const float *x = pcm + j0;
    for (int i = 0; i < N_FFT; i++)
      m->frame[i] = (float)(((double)x[i] - PREEMPH * (double)x[i - 1]) * m->window[i]);
  } else { /* touches an edge: reflect the pre-emphasised signal */
    for (int i = 0; i < N_FFT; i++)
      m->frame[i] = (float)(preemph_at(pcm, reflect_index(j0 + i, n)) * m->window[i]);
  }
}

int fc_mel_compute(fc_mel *m, const float *pcm, size_t n, float *out) {
  if (n > (size_t)(INT64_MAX / 4) || fc_mel_columns(n) > SIZE_MAX / sizeof(float) / FC_MEL_BANDS)
    return fc_error_set(FC_EINVAL, "fc_mel_compute: %zu samples is too many", n);
  size_t ncols = fc_mel_columns(n);
  return fc_mel_compute_columns(m, pcm, n, 0, ncols, out, ncols);
}

int fc_mel_compute_columns(fc_mel *m, const float *pcm, size_t n, size_t first, size_t count,
                           float *out, size_t out_stride) {
  if (!m || !out || (!pcm && n > 0))
    return fc_error_set(FC_EINVAL, "fc_mel_compute: NULL %s", !m ? "handle" : !out ? "output" : "pcm");
  /* Keeps the column arithmetic in int64_t and the output size representable. */
  if (n > (size_t)(INT64_MAX / 4) || fc_mel_columns(n) > SIZE_MAX / sizeof(float) / FC_MEL_BANDS)
    return fc_error_set(FC_EINVAL, "fc_mel_compute: %zu samples is too many", n);
  if (first > fc_mel_columns(n) || count > fc_mel_columns(n) - first || count > out_stride)
    return fc_error_set(FC_EINVAL, "fc_mel_compute: columns [%zu, +%zu) outside the %zu of the signal",
                        first, count, fc_mel_columns(n));

  size_t ncols = out_stride;
  for (size_t c = 0; c < count; c++) {
    size_t t = first + c;
    gather_frame(m, pcm, n, (int64_t)t * FC_MEL_HOP - PAD);
    fftwf_execute(m->plan);
    for (int k = 0; k < N_BINS; k++) {
      double re = m->spec[k][0], im = m->spec[k][1];
      m->mag[k] = sqrt(re * re + im * im);
    }
    for (int b = 0; b < FC_MEL_BANDS; b++) {
      double acc = 0.0;
      for (int k = m->band_lo[b]; k < m->band_hi[b]; k++) acc += (double)m->fb[b][k] * m->mag[k];
      double db = 20.0 * log10(acc > 1e-5 ? acc : 1e-5) - 20.0;
      double v = 8.0 * ((db + 100.0) / 100.0) - 4.0;
      v = v < -4.0 ? -4.0 : v > 4.0 ? 4.0 : v; /* NaN input falls to the floor via the max above */
      out[(size_t)b * ncols + c] = (float)v;
    }
  }
  return FC_OK;
}

/* Frame i at 25 fps starts at column int(i * 80 / 25) = (i * 16) / 5 exactly, in integers.
 * Past the end the window clamps to the last 16 columns, as Wav2Lip's inference does. A mel with
 * fewer than 16 columns (under 0.2 s of audio; Wav2Lip itself would slice garbage there) gives
 * its columns left-aligned and the rest filled with -4, the normalised value of silence, not 0
 * (0 would be a fairly loud -50 dB). A negative frame is taken as frame 0; a NULL mel as
 * silence. */
void fc_mel_window(const float *mel, size_t ncols, int frame, float *out) {
  if (!out) return;
  if (!mel || ncols < FC_MEL_WINDOW) {
    size_t have = mel ? ncols : 0;
    for (int b = 0; b < FC_MEL_BANDS; b++)
      for (size_t c = 0; c < FC_MEL_WINDOW; c++)
        out[(size_t)b * FC_MEL_WINDOW + c] = c < have ? mel[(size_t)b * ncols + c] : FLOOR_VALUE;
    return;
  }
  uint64_t start = frame > 0 ? (uint64_t)frame * 16u / 5u : 0;
  if (start > ncols - FC_MEL_WINDOW) start = ncols - FC_MEL_WINDOW;
  for (int b = 0; b < FC_MEL_BANDS; b++)
    memcpy(out + (size_t)b * FC_MEL_WINDOW, mel + (size_t)b * ncols + start,
           sizeof(float) * FC_MEL_WINDOW);
}
