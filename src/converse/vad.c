/* Energy VAD with an adaptive noise floor, onset and hangover (see vad.h). */
#include "converse/vad.h"

#include <math.h>
#include <stdlib.h>

#define FRAME 320 /* 20 ms at 16 kHz */
#define HIST 75   /* frames of level history for the noise floor: 1.5 s */

struct fc_vad {
  fc_vad_params p;
  int16_t buf[FRAME];
  int n_buf;
  int64_t pos;      /* samples fed */
  float hist[HIST]; /* the last frames' levels (dB) */
  int n_hist, at_hist;
  int voiced_run;   /* voiced frames in a row */
  int silent_run;   /* unvoiced frames in a row while speaking */
  int speaking;
  int64_t seg_start, last_voiced; /* samples */
};

fc_vad *fc_vad_create(const fc_vad_params *p) {
  fc_vad *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  if (p) v->p = *p;
  if (v->p.onset_ms <= 0) v->p.onset_ms = 80;
  if (v->p.hangover_ms <= 0) v->p.hangover_ms = 500;
  if (v->p.max_ms <= 0) v->p.max_ms = 15000;
  if (v->p.margin_db <= 0) v->p.margin_db = 12;
  if (v->p.floor_dbfs >= 0) v->p.floor_dbfs = -45;
  return v;
}

void fc_vad_destroy(fc_vad *v) { free(v); }

void fc_vad_reset(fc_vad *v) {
  v->voiced_run = v->silent_run = v->speaking = 0;
}

int fc_vad_speaking(const fc_vad *v) { return v->speaking; }
int64_t fc_vad_position(const fc_vad *v) { return v->pos; }

/* One 20 ms frame ending at sample v->pos: returns an event or FC_VAD_NONE. */
static int frame(fc_vad *v, int64_t *at) {
  double e = 0;
  for (int i = 0; i < FRAME; i++) e += (double)v->buf[i] * v->buf[i];
  float db = (float)(10 * log10(e / FRAME / (32768.0 * 32768.0) + 1e-12));
  /* the noise floor: the quietest frame of the last 1.5 s (minimum statistics: speech has
   * dips between syllables and words, noise does not, so the minimum is the noise) */
  v->hist[v->at_hist] = db;
  v->at_hist = (v->at_hist + 1) % HIST;
  if (v->n_hist < HIST) v->n_hist++;
  float floor_db = db;
  for (int i = 0; i < v->n_hist; i++)
    if (v->hist[i] < floor_db) floor_db = v->hist[i];
  int voiced = db > floor_db + v->p.margin_db && db > v->p.floor_dbfs;
  int onset = v->p.onset_ms / 20, hang = v->p.hangover_ms / 20;
  int64_t end = v->pos; /* this frame covers [end - FRAME, end) */
  if (voiced) {
    v->voiced_run++;
    v->silent_run = 0;
    v->last_voiced = end;
  } else {
    v->voiced_run = 0;
    if (v->speaking) v->silent_run++;
  }
  if (!v->speaking && v->voiced_run >= (onset > 0 ? onset : 1)) {
    v->speaking = 1;
    v->silent_run = 0;
    v->seg_start = end - (int64_t)v->voiced_run * FRAME;
    *at = v->seg_start;
    return FC_VAD_START;
  }
  if (v->speaking && (v->silent_run >= hang || (end - v->seg_start) * 1000 / 16000 >= v->p.max_ms)) {
    v->speaking = 0;
    v->voiced_run = v->silent_run = 0;
    *at = v->last_voiced;
    return FC_VAD_END;
  }
  return FC_VAD_NONE;
}

int fc_vad_feed(fc_vad *v, const int16_t *pcm, size_t n, size_t *used, int64_t *at) {
  size_t i = 0;
  int ev = FC_VAD_NONE;
  *at = 0;
  while (i < n && !ev) {
    size_t k = (size_t)(FRAME - v->n_buf) < n - i ? (size_t)(FRAME - v->n_buf) : n - i;
    for (size_t j = 0; j < k; j++) v->buf[v->n_buf + j] = pcm[i + j];
    v->n_buf += (int)k;
    v->pos += (int64_t)k;
    i += k;
    if (v->n_buf < FRAME) break;
    v->n_buf = 0;
    ev = frame(v, at);
  }
  *used = i;
  return ev;
}
