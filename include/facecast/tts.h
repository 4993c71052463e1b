/* Text to speech with the embedded espeak-ng voice, keeping the phoneme timing. Voices are
 * espeak-ng's names or language tags; "zh" and its kin are Mandarin, "zh-HK"/"yue" Cantonese, and
 * with no voice, text that is mostly Chinese characters gets Mandarin, anything else English.
 *
 * The result is 16 kHz mono audio on the engine's sample clock plus the phoneme events espeak
 * reports, each with the sample where it starts; the parametric lip-sync turns those into
 * visemes. espeak-ng keeps global state, so calls are serialised internally (safe from any
 * thread, one synthesis at a time). */
#ifndef FACECAST_TTS_H
#define FACECAST_TTS_H

#include "facecast/audio.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_phoneme {
  int64_t sample; /* start, in 16 kHz samples from the utterance start */
  char name[9];   /* espeak phoneme mnemonic ("h", "@", "oU", "_:" …), NUL-terminated */
} fc_phoneme;

typedef struct fc_speech {
  fc_audio audio;  /* 16 kHz mono, owned */
  fc_phoneme *ph;  /* owned, in time order */
  size_t n_ph;
} fc_speech;

typedef struct fc_tts_params {
  const char *voice; /* espeak voice or language ("en", "en-us", "de", "zh" …); NULL/"": by text */
  int rate_wpm;      /* words per minute; 0 = espeak's default (175) */
} fc_tts_params;

/* Synthesises text (UTF-8). Errors: FC_EINVAL for empty text or an unknown voice, FC_ETTS when
 * espeak-ng cannot start (data missing), each with a detail. */
int fc_tts_speak(const char *text, const fc_tts_params *p, fc_speech *out);
void fc_speech_free(fc_speech *s);

#ifdef __cplusplus
}
#endif
#endif
