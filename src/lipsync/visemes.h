/* Mouth shapes per video frame, from phoneme timing (TTS) or from the audio itself.
 *
 * Both paths are causal: frame i's shape depends only on audio samples before 640·(i+1) and on
 * phonemes that started before then, so the same tracker drives offline renders and live
 * sessions. Shapes move smoothly (a per-frame first-order filter, faster when closing for
 * p/b/m) and close in silence. */
#ifndef FACECAST_VISEMES_H
#define FACECAST_VISEMES_H

#include "lipsync/audio_visemes.h"
#include "facecast/lipsync.h"
#include "facecast/tts.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_viseme_tracker {
  fc_mouth cur; /* the smoothed shape of the last frame */
  fc_avis avis; /* the audio classifier's state (level follower, window tail, context) */
} fc_viseme_tracker;

void fc_viseme_tracker_init(fc_viseme_tracker *t);

/* The viseme target of one espeak phoneme mnemonic (unknown names get a neutral vowel). */
fc_mouth fc_viseme_of_phoneme(const char *name);

/* The phoneme-derived target over samples [a, b): each phoneme's viseme weighted by its overlap
 * (zeros when no phoneme overlaps). The audio classifier is fitted to these. */
fc_mouth fc_viseme_target(const fc_phoneme *ph, size_t n, int64_t a, int64_t b);

/* Advances one video frame. pcm holds the frame's FC_SAMPLES_PER_FRAME samples. When phonemes
 * are given (TTS), the shape follows them (closed where the audio is silent); otherwise it comes
 * from the audio classifier (audio_visemes.h). frame_start is the frame's first sample on the clock. */
fc_mouth fc_viseme_tracker_push(fc_viseme_tracker *t, const float *pcm, int64_t frame_start,
                                const fc_phoneme *ph, size_t n_ph);

#ifdef __cplusplus
}
#endif
#endif
