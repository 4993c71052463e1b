/* A device's worker thread: gather, form a batch, run it, complete it; cancel at shutdown.
 *
 * The loop sleeps on the device's condition variable while nothing is queued (a device whose
 * clients are silent costs no wake-ups). With requests queued it probes device memory (outside
 * the lock: the probe may be a driver call), sets the batch limit, and gathers until the limit
 * is reached, the gather window closes, or the earliest deadline minus the predicted batch time
 * arrives, so waiting for company never makes the most urgent request late by itself. Every
 * submit while the worker waits wakes it to re-check (a new request may be more urgent).
 * Completions call each client's done outside the lock, then give the slot back; a client
 * being removed is woken when its last request is through.
 */
#include "facecast/error.h"
#include "sched/internal.h"

#include <time.h>

static _Thread_local int on_worker;

int sched_on_worker(void) { return on_worker; }

static int queued(const sched_dev *d) { return d->q[0].n + d->q[1].n; }

static int64_t earliest(const sched_dev *d) {
  int64_t t = INT64_MAX;
  for (int k = 0; k < 2; k++)
    if (d->q[k].n && d->q[k].a[0]->req.deadline_ns < t) t = d->q[k].a[0]->req.deadline_ns;
  return t;
}

/* Waits on d->wake, until t (CLOCK_MONOTONIC ns) or for ever when t < 0. Lock held. */
static void wait_until(sched_dev *d, int64_t t) {
  d->sleeping = 1;
  if (t < 0) {
    pthread_cond_wait(&d->wake, &d->lock);
  } else {
    struct timespec ts = {(time_t)(t / 1000000000LL), (long)(t % 1000000000LL)};
    pthread_cond_timedwait(&d->wake, &d->lock, &ts);
  }
  d->sleeping = 0;
  d->wakeups++;
}

void sched_release_quota(sched_dev *d, sched_item *it) {
  it->client->held--;
  if (it->req.cls == FC_SCHED_BULK) d->bulk_held--;
}

void sched_complete(sched_dev *d, sched_item *it, int status) {
  fc_sched_client *c = it->client;
  c->done(c->user, &it->req, status);
  pthread_mutex_lock(&d->lock);
  if (status == FC_ECANCELED) {
    d->canceled++;
  } else {
    if (status)
      d->failed++;
    else
      d->frames++;
    if (it->req.finish_ns > it->req.deadline_ns) d->late++;
  }
  pool_put(&d->pool, it);
  if (--c->pending == 0 && c->removing) pthread_cond_broadcast(&d->idle);
  pthread_mutex_unlock(&d->lock);
}

/* Live first, then bulk, each earliest deadline first; bulk ageing may take the last seat. */
static int form_batch(sched_dev *d, int limit, int64_t now) {
  int n = 0;
  for (int k = 0; k < 2; k++)
    while (n < limit && d->q[k].n) d->batch[n++] = heap_pop(&d->q[k]);
  sched_heap *bulk = &d->q[FC_SCHED_BULK];
  if (bulk->n && d->batch[n - 1]->req.cls == FC_SCHED_LIVE &&
      now - bulk->a[0]->req.submit_ns >= d->s->bulk_wait_ns) {
    heap_push(&d->q[FC_SCHED_LIVE], d->batch[n - 1]);
    d->batch[n - 1] = heap_pop(bulk);
    d->bulk_aged++;
  }
  return n;
}

static void run_batch(sched_dev *d, int n, int limit) {
  for (int i = 0; i < n; i++) {
    d->reqs[i] = &d->batch[i]->req;
    d->reqs[i]->status = 0;
    d->reqs[i]->batch_size = n;
  }
  int64_t t0 = fc_sched_now_ns();
  int err = d->cb.run(d->cb.user, d->reqs, n);
  int64_t t1 = fc_sched_now_ns();
  pthread_mutex_lock(&d->lock);
  if (err == FC_ENOMEM && n > 1) {
    /* Put the batch back whole (deadlines and submission order are in the items, so the heaps
     * give the same requests first) and retry at half the size. */
    ctl_oom(&d->ctl, n);
    d->oom_retries++;
    for (int i = 0; i < n; i++) {
      d->batch[i]->req.batch_size = 0;
      heap_push(&d->q[d->batch[i]->req.cls], d->batch[i]);
    }
    pthread_mutex_unlock(&d->lock);
    return;
  }
  if (err == FC_ENOMEM) {
    ctl_oom(&d->ctl, 1); /* one request does not fit: it fails, nothing spins */
  } else if (!err) {
    ctl_batch_done(&d->ctl, n, limit, (double)(t1 - t0) / 1e6);
    d->batches++;
    d->batch_frames += (uint64_t)n;
  }
  for (int i = 0; i < n; i++) sched_release_quota(d, d->batch[i]);
  pthread_mutex_unlock(&d->lock);
  for (int i = 0; i < n; i++) {
    d->batch[i]->req.finish_ns = t1;
    sched_complete(d, d->batch[i], err ? err : d->batch[i]->req.status);
  }
}

void *sched_worker_main(void *arg) {
  sched_dev *d = arg;
  const fc_sched *s = d->s;
  on_worker = 1;
  pthread_mutex_lock(&d->lock);
  for (;;) {
    while (!d->stopping && !queued(d)) wait_until(d, -1);
    if (d->stopping) break;
    pthread_mutex_unlock(&d->lock);
    double frac = -1;
    if (d->cb.mem_used_fraction && d->cb.mem_used_fraction(d->cb.user, &frac)) frac = -1;
    pthread_mutex_lock(&d->lock);
    d->mem_frac = frac;
    int limit = ctl_limit(&d->ctl, ctl_mem_cap(s->p.max_batch, frac));
    int64_t lead = (int64_t)(ctl_predict_ms(&d->ctl, limit) * 1e6);
    int64_t end = fc_sched_now_ns() + s->gather_ns;
    while (!d->stopping && queued(d) && queued(d) < limit) {
      int64_t t = earliest(d) - lead;
      if (t > end) t = end;
      if (fc_sched_now_ns() >= t) break;
      wait_until(d, t);
    }
    if (d->stopping) break;
    if (!queued(d)) continue; /* a removed client took its requests back */
    int n = form_batch(d, limit, fc_sched_now_ns());
    pthread_mutex_unlock(&d->lock);
    run_batch(d, n, limit);
    pthread_mutex_lock(&d->lock);
  }
  /* Shutdown: what is still queued is cancelled, each request once. */
  sched_item *it;
  while ((it = heap_pop(&d->q[FC_SCHED_LIVE])) || (it = heap_pop(&d->q[FC_SCHED_BULK]))) {
    sched_release_quota(d, it);
    pthread_mutex_unlock(&d->lock);
    sched_complete(d, it, FC_ECANCELED);
    pthread_mutex_lock(&d->lock);
  }
  pthread_mutex_unlock(&d->lock);
  return NULL;
}
