/* Audio in: WAV reading (PCM 8/16/24/32-bit, IEEE float 32/64, WAVE_FORMAT_EXTENSIBLE, any
 * rate, any channel count downmixed to mono), resampling with libsoxr. Samples are float in
 * [-1, 1]. Malformed files fail with FC_EFORMAT and a detail naming the problem; unknown
 * encodings with FC_EUNSUPPORTED. */
#ifndef FACECAST_AUDIO_H
#define FACECAST_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The engine's one sample clock: 16 kHz mono, 25 fps video, 640 samples per video frame. */
#define FC_SAMPLE_RATE 16000
#define FC_FPS 25
#define FC_SAMPLES_PER_FRAME (FC_SAMPLE_RATE / FC_FPS)

typedef struct fc_audio {
  float *samples; /* owned, mono */
  size_t n;
  int rate;
} fc_audio;

void fc_audio_free(fc_audio *a);

/* Reads a WAV file or an in-memory WAV (name is used in error details). */
int fc_wav_read(const char *path, fc_audio *out);
int fc_wav_read_mem(const void *data, size_t size, const char *name, fc_audio *out);

/* Writes mono 16-bit PCM WAV (clipping to [-1, 1]). */
int fc_wav_write(const char *path, const float *samples, size_t n, int rate);

/* Resamples to out_rate with libsoxr (high quality). When the rates are equal, copies. */
int fc_resample(const fc_audio *in, int out_rate, fc_audio *out);

#ifdef __cplusplus
}
#endif
#endif
