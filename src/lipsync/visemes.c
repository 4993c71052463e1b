/* Visemes: phoneme → mouth shape table and the causal per-frame tracker (see visemes.h).
 *
 * The table follows the usual viseme classes (closed bilabials, labiodental f/v, spread
 * vowels, rounded vowels, open vowels) over espeak-ng's ASCII phoneme mnemonics; longer names
 * are matched first ("aI" before "a"). The audio path measures, per frame, the RMS level against
 * a slowly decaying peak (so quiet and loud speakers both open fully), the zero-crossing rate
 * (fricatives: high, lips nearly closed and spread) and the share of energy below ~700 Hz
 * (rounded back vowels put most of theirs there).
 */
#include "facecast/audio.h"
#include "facecast/visemes.h"

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
  t->peak_db = -20.0f;
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The overlap-weighted phoneme target over [a, b). */
static fc_mouth phoneme_target(const fc_phoneme *ph, size_t n, int64_t a, int64_t b) {
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
  const int n = FC_SAMPLES_PER_FRAME;
  /* One-pole low-pass at ~700 Hz: a = exp(-2π·700/16000). */
  const float a = 0.7596f;
  double e = 0, e_low = 0;
  int zc = 0;
  float prev = t->prev_sample, lp = t->lp;
  for (int i = 0; i < n; i++) {
    float x = pcm[i];
    e += (double)x * x;
    lp = a * lp + (1 - a) * x;
    e_low += (double)lp * lp;
    zc += (x >= 0) != (prev >= 0);
    prev = x;
  }
  t->prev_sample = prev;
  t->lp = lp;
  float db = 10.0f * log10f((float)(e / n) + 1e-12f);
  t->peak_db = db > t->peak_db ? db : t->peak_db - 0.05f;
  if (t->peak_db < -40.0f) t->peak_db = -40.0f;
  int silent = db < -55.0f;
  float level = silent ? 0 : clampf((db - (t->peak_db - 32.0f)) / 26.0f, 0, 1);

  fc_mouth target;
  if (ph && n_ph) {
    target = phoneme_target(ph, n_ph, frame_start, frame_start + n);
    if (silent) target = (fc_mouth){0, 0, 0};
  } else {
    float zcr = (float)zc / n;
    float fric = clampf((zcr - 0.18f) / 0.25f, 0, 1);
    float low = e > 0 ? (float)(e_low / e) : 0;
    target.open = powf(level, 0.8f) * (1.0f - 0.6f * fric);
    target.wide = level * clampf(0.25f + 0.6f * fric, 0, 1);
    target.round = level * 0.7f * clampf((low - 0.8f) / 0.15f, 0, 1) * (1 - fric);
  }
  /* Closing (p, b, m, silence) is quick; opening a little slower, as muscles are. */
  float k = target.open < t->cur.open ? 0.75f : 0.6f;
  t->cur.open += k * (target.open - t->cur.open);
  t->cur.wide += 0.5f * (target.wide - t->cur.wide);
  t->cur.round += 0.5f * (target.round - t->cur.round);
  return t->cur;
}
