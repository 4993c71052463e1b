/* Visemes: phoneme → mouth shape table and the causal per-frame tracker (see visemes.h).
 *
 * The table follows the usual viseme classes (closed bilabials, labiodental f/v, spread
 * vowels, rounded vowels, open vowels) over espeak-ng's ASCII phoneme mnemonics; longer names
 * are matched first ("aI" before "a"). The audio path is the MFCC classifier of
 * audio_visemes.c, whose state the tracker embeds; the phoneme path uses its silence test.
 */
#include "facecast/audio.h"
#include "lipsync/visemes.h"

#include <math.h>
#include <string.h>

typedef struct viseme_entry {
  const char *name;
  fc_mouth m;
} viseme_entry;

/* Longest names first within a shared first letter, so prefix matching is greedy. */
static const viseme_entry table[] = {
    {"_", {0, 0, 0}},         {"aI", {0.85f, 0.35f, 0}}, {"aU", {0.8f, 0.1f, 0.3f}},
    {"a", {0.85f, 0.3f, 0}},  {"A", {0.85f, 0.2f, 0}},   {"eI", {0.55f, 0.55f, 0}},
    {"e", {0.6f, 0.5f, 0}},   {"E", {0.6f, 0.45f, 0}},   {"i", {0.35f, 0.85f, 0}},
    {"I", {0.4f, 0.7f, 0}},   {"@", {0.45f, 0.25f, 0}},  {"3", {0.45f, 0.2f, 0.2f}},
    {"V", {0.6f, 0.25f, 0}},  {"0", {0.7f, 0, 0.5f}},    {"OI", {0.6f, 0, 0.7f}},
    {"O", {0.65f, 0, 0.75f}}, {"oU", {0.5f, 0, 0.8f}},   {"o", {0.55f, 0, 0.8f}},
    {"u", {0.3f, 0, 0.95f}},  {"U", {0.35f, 0, 0.8f}},   {"p", {0, 0.1f, 0}},
    {"b", {0, 0.1f, 0}},      {"m", {0, 0.1f, 0}},       {"f", {0.08f, 0.25f, 0}},
    {"v", {0.08f, 0.25f, 0}}, {"T", {0.2f, 0.2f, 0}},    {"D", {0.2f, 0.2f, 0}},
    {"tS", {0.25f, 0.1f, 0.6f}}, {"t", {0.25f, 0.3f, 0}}, {"dZ", {0.25f, 0.1f, 0.6f}},
    {"d", {0.25f, 0.3f, 0}},  {"n", {0.25f, 0.3f, 0}},   {"N", {0.3f, 0.2f, 0}},
    {"l", {0.3f, 0.3f, 0}},   {"s", {0.15f, 0.6f, 0}},   {"z", {0.15f, 0.6f, 0}},
    {"S", {0.25f, 0.1f, 0.6f}}, {"Z", {0.25f, 0.1f, 0.6f}}, {"r", {0.25f, 0, 0.45f}},
    {"w", {0.15f, 0, 0.95f}}, {"j", {0.2f, 0.6f, 0}},    {"k", {0.35f, 0.2f, 0}},
    {"g", {0.35f, 0.2f, 0}},  {"x", {0.35f, 0.2f, 0}},   {"h", {0.4f, 0.2f, 0}},
    {"?", {0.1f, 0.1f, 0}},
};

fc_mouth fc_viseme_of_phoneme(const char *name) {
  if (!name || !*name) return (fc_mouth){0, 0, 0};
  /* espeak marks stress and length with ' , : which do not change the lips. */
  while (*name == '\'' || *name == ',' || *name == '%' || *name == '=') name++;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    size_t k = strlen(table[i].name);
    if (strncmp(name, table[i].name, k) == 0) return table[i].m;
  }
  return (fc_mouth){0.4f, 0.2f, 0};
}

void fc_viseme_tracker_init(fc_viseme_tracker *t) {
  memset(t, 0, sizeof *t);
  fc_avis_init(&t->avis);
}

fc_mouth fc_viseme_target(const fc_phoneme *ph, size_t n, int64_t a, int64_t b) {
  fc_mouth m = {0, 0, 0};
  float wsum = 0;
  for (size_t k = 0; k < n; k++) {
    int64_t s = ph[k].sample, e = k + 1 < n ? ph[k + 1].sample : b;
    if (e <= a) continue;
    if (s >= b) break;
    float w = (float)((e < b ? e : b) - (s > a ? s : a));
    fc_mouth v = fc_viseme_of_phoneme(ph[k].name);
    m.open += w * v.open;
    m.wide += w * v.wide;
    m.round += w * v.round;
    wsum += w;
  }
  if (wsum > 0) {
    m.open /= wsum;
    m.wide /= wsum;
    m.round /= wsum;
  }
  return m;
}

fc_mouth fc_viseme_tracker_push(fc_viseme_tracker *t, const float *pcm, int64_t frame_start,
                                const fc_phoneme *ph, size_t n_ph) {
  /* The classifier's state advances on every frame, phonemes or not, so streamed audio after
   * an utterance finds its level follower and context warm. */
  float feat[FC_AVIS_NFEAT];
  int silent;
  fc_avis_features(&t->avis, pcm, feat, &silent);
  fc_mouth target = {0, 0, 0};
  if (!silent)
    target = ph && n_ph ? fc_viseme_target(ph, n_ph, frame_start, frame_start + FC_SAMPLES_PER_FRAME)
                        : fc_avis_predict(feat);
  /* Closing (p, b, m, silence) is quick; opening a little slower, as muscles are. */
  float k = target.open < t->cur.open ? 0.75f : 0.6f;
  t->cur.open += k * (target.open - t->cur.open);
  t->cur.wide += 0.5f * (target.wide - t->cur.wide);
  t->cur.round += 0.5f * (target.round - t->cur.round);
  return t->cur;
}
