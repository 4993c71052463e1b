/* Mouth shapes from audio alone (microphone, uploaded files): MFCC features and a linear model.
 *
 * Per video frame (640 samples at 16 kHz) the classifier takes four 25 ms windows 10 ms apart
 * that end with the frame (the first reaches 15 ms back into the previous frame: causal), and
 * computes 12 MFCCs per window (26 mel bands, 80–7600 Hz, own 512-point FFT), averaged over
 * the frame; with the previous frame's MFCCs, the level against a slow peak follower (so quiet
 * and loud speakers open alike) and the zero-crossing rate they form the feature vector. A
 * ridge-regression fit maps it to (open, wide, round); the coefficients are a constant table
 * (src/lipsync/audio_visemes_model.h) made by tools/fit_audio_visemes.c from espeak-ng speech
 * labelled by its own phoneme timing through the viseme table. Silence (below −55 dB) is
 * closed. No allocation; the state is a plain struct the viseme tracker embeds. */
#ifndef FACECAST_AUDIO_VISEMES_H
#define FACECAST_AUDIO_VISEMES_H

#include "facecast/lipsync.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FC_AVIS_WIN 400 /* 25 ms */
#define FC_AVIS_HOP 160 /* 10 ms */
#define FC_AVIS_NCEP 12 /* MFCCs c1..c12 (c0, the level, is taken against the peak instead) */
#define FC_AVIS_NFEAT (3 + 2 * FC_AVIS_NCEP)

typedef struct fc_avis {
  float tail[FC_AVIS_WIN - FC_AVIS_HOP]; /* the previous frame's last samples */
  float prev_cep[FC_AVIS_NCEP];          /* the previous frame's mean MFCCs */
  float peak_db;                         /* slow peak follower of the frame level */
  float prev_sample;                     /* for zero crossings across frames */
} fc_avis;

void fc_avis_init(fc_avis *a);

/* Advances one frame of FC_SAMPLES_PER_FRAME samples: writes the frame's features (may be
 * NULL) and returns the frame level in dB; *silent (may be NULL) says whether it is below the
 * silence threshold. */
float fc_avis_features(fc_avis *a, const float *pcm, float feat[FC_AVIS_NFEAT], int *silent);

/* The model's mouth shape for a feature vector (clamped to [0, 1]). */
fc_mouth fc_avis_predict(const float feat[FC_AVIS_NFEAT]);

/* Both: the frame's mouth shape from its audio (closed in silence). */
fc_mouth fc_avis_push(fc_avis *a, const float *pcm);

#ifdef __cplusplus
}
#endif
#endif
