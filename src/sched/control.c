/* The batch limit of a device (see src/sched/sched.h, "Batch limit").
 *
 * Three inputs, one number: the memory headroom rule caps the batch before each batch; the
 * latency controller moves its own limit from measured batch times; running out of memory
 * halves that limit and keeps the failed size out of reach for a while. The controller is
 * AIMD-shaped on purpose: decreases are immediate and proportional to the overshoot (a batch
 * over budget makes every session in it late), increases are one frame at a time after a run of
 * good batches (a too-large batch costs a frame budget, a too-small one only throughput).
 * Measurements are kept per batch size because a batch's time depends on its size: the p95 at
 * the limit decides, and the per-frame cost for a step up comes from a least-squares line
 * through the recent batches of all sizes. Pure functions: no clock, no threads.
 */
#include "facecast/error.h"
#include "sched/internal.h"

#include <stdlib.h>
#include <string.h>

int ctl_init(sched_ctl *c, int max_batch, double target_ms) {
  memset(c, 0, sizeof *c);
  c->max_batch = max_batch;
  c->target_ms = target_ms;
  c->limit = max_batch;
  c->ceiling = max_batch;
  c->size = calloc((size_t)max_batch + 1, sizeof *c->size);
  if (!c->size) return fc_error_set(FC_ENOMEM, "sched: out of memory");
  return FC_OK;
}

void ctl_free(sched_ctl *c) {
  free(c->size);
  c->size = NULL;
}

int ctl_mem_cap(int max_batch, double frac) {
  int cap = max_batch;
  if (frac > 0.90)
    cap = max_batch / 4;
  else if (frac >= 0.70)
    cap = max_batch / 2;
  return cap < 1 ? 1 : cap;
}

int ctl_limit(const sched_ctl *c, int mem_cap) {
  int l = c->limit < mem_cap ? c->limit : mem_cap;
  return l < 1 ? 1 : l;
}

/* The p-quantile of n values (linear interpolation between order statistics). */
static double quantile(const float *v, int n, double p) {
  float s[CTL_WINDOW > CTL_PER_SIZE ? CTL_WINDOW : CTL_PER_SIZE];
  if (n <= 0) return 0;
  memcpy(s, v, sizeof(float) * (size_t)n);
  for (int i = 1; i < n; i++) /* insertion sort: at most 64 values, once per batch */
    for (int j = i; j > 0 && s[j - 1] > s[j]; j--) {
      float t = s[j];
      s[j] = s[j - 1];
      s[j - 1] = t;
    }
  double x = p * (n - 1);
  int i = (int)x;
  return i + 1 < n ? s[i] + (x - i) * (s[i + 1] - s[i]) : s[i];
}

/* Least-squares ms = a·n + b through the recent batches; 0 when their sizes do not vary. The
 * slope is clamped at 0 (noise can tilt it; a batch never gets cheaper by growing). */
static int fit(const sched_ctl *c, double *a, double *b) {
  double mn = 0, mt = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < c->win_n; i++) {
    mn += c->win[i].n;
    mt += c->win[i].ms;
  }
  if (c->win_n < 2) return 0;
  mn /= c->win_n;
  mt /= c->win_n;
  for (int i = 0; i < c->win_n; i++) {
    sxx += (c->win[i].n - mn) * (c->win[i].n - mn);
    sxy += (c->win[i].n - mn) * (c->win[i].ms - mt);
  }
  if (sxx < 1e-9) return 0;
  *a = sxy / sxx > 0 ? sxy / sxx : 0;
  *b = mt - *a * mn;
  return 1;
}

double ctl_predict_ms(const sched_ctl *c, int n) {
  double a, b;
  if (n >= 1 && n <= c->max_batch && c->size[n].n > 0)
    return quantile(c->size[n].ms, c->size[n].n, 0.95);
  if (fit(c, &a, &b)) return a * n + b > 0 ? a * n + b : 0;
  return 0;
}

void ctl_batch_done(sched_ctl *c, int n, int eff_limit, double ms) {
  if (n < 1 || n > c->max_batch) return;
  ctl_ring *r = &c->size[n];
  r->ms[r->pos] = (float)ms;
  r->pos = (r->pos + 1) % CTL_PER_SIZE;
  if (r->n < CTL_PER_SIZE) r->n++;
  c->win[c->win_pos].n = n;
  c->win[c->win_pos].ms = (float)ms;
  c->win_pos = (c->win_pos + 1) % CTL_WINDOW;
  if (c->win_n < CTL_WINDOW) c->win_n++;
  if (c->oom_hold > 0 && --c->oom_hold == 0) c->ceiling = c->max_batch;

  /* A size with few batches yet is on probation: one batch over the target ends it (a growth
   * probe costs one slow batch, not CTL_MIN_SAMPLES of them). Afterwards the p95 decides, so one
   * outlier at an established size moves nothing. */
  double p = r->n >= CTL_MIN_SAMPLES ? quantile(r->ms, r->n, 0.95) : ms > c->target_ms ? ms : -1;
  if (p > c->target_ms) {
    int to = (int)(n * c->target_ms / p);
    if (to > n - 1) to = n - 1;
    if (to < 1) to = 1;
    if (to < c->limit) c->limit = to;
    c->good = 0;
    return;
  }
  /* Growth is judged only on full batches at the limit that memory did not cap: a partial
   * batch says nothing about the next size. */
  if (p < 0 || n != c->limit || n != eff_limit || c->limit >= c->ceiling) return;
  double a, b;
  double step = fit(c, &a, &b) ? a : p / n; /* one size only: the mean cost, an overestimate */
  if (p + step > c->target_ms) {
    c->good = 0;
    return;
  }
  if (++c->good >= CTL_GROW_AFTER) {
    c->limit++;
    c->good = 0;
    /* The new size is judged on fresh batches, not on ones from before a change of load. */
    c->size[c->limit].n = c->size[c->limit].pos = 0;
  }
}

void ctl_oom(sched_ctl *c, int n) {
  int to = n / 2 < 1 ? 1 : n / 2;
  if (to < c->limit) c->limit = to;
  if (n - 1 < c->ceiling) c->ceiling = n - 1 < 1 ? 1 : n - 1;
  c->oom_hold = CTL_OOM_HOLD;
  c->good = 0;
}

void ctl_window_pct(const sched_ctl *c, double *p50, double *p95) {
  float v[CTL_WINDOW];
  for (int i = 0; i < c->win_n; i++) v[i] = c->win[i].ms;
  *p50 = quantile(v, c->win_n, 0.50);
  *p95 = quantile(v, c->win_n, 0.95);
}
