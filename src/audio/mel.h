/* The Wav2Lip mel spectrogram, exactly as Wav2Lip's audio.py computes it (see REFERENCE.md):
 * 16 kHz, pre-emphasis 0.97, centred STFT (reflect padding) n_fft 800 / hop 200 / Hann 800,
 * magnitude, 80 Slaney mel bands 55..7600 Hz, 20·log10(max(1e-5, m)) − 20, then
 * clip(8·(dB + 100)/100 − 4, −4, 4). 80 columns per second of audio. */
#ifndef FACECAST_MEL_H
#define FACECAST_MEL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FC_MEL_BANDS 80
#define FC_MEL_HOP 200
#define FC_MEL_WINDOW 16 /* columns per video frame's window */

typedef struct fc_mel fc_mel;

/* Plans the FFT and builds the filter bank once. NULL and *err on failure. */
fc_mel *fc_mel_create(int *err);
void fc_mel_destroy(fc_mel *m);

/* Number of columns for n samples: 1 + n / 200. */
size_t fc_mel_columns(size_t n_samples);

/* Computes the normalised mel of n samples of 16 kHz mono audio into out, which holds
 * FC_MEL_BANDS × fc_mel_columns(n) floats, row-major ([band][column]). A single fc_mel is not
 * thread-safe; use one per thread. */
int fc_mel_compute(fc_mel *m, const float *pcm, size_t n, float *out);

/* Computes only columns [first, first + count) of the mel of the whole signal pcm[0..n) —
 * the same values fc_mel_compute gives for them — into out, row b at out + b·out_stride.
 * Streams use it for the few columns a frame needs. */
int fc_mel_compute_columns(fc_mel *m, const float *pcm, size_t n, size_t first, size_t count,
                           float *out, size_t out_stride);

/* Copies video frame `frame`'s window (25 fps): columns [int(frame·80/25), +16) of the
 * [80][ncols] mel, clamped to the last 16 columns at the end (when ncols < 16, left-aligned
 * and filled with −4, the normalised value of silence).
 * out holds 80 × 16 floats, row-major. */
void fc_mel_window(const float *mel, size_t ncols, int frame, float *out);

#ifdef __cplusplus
}
#endif
#endif
