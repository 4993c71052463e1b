/* The scheduler's objects (see src/sched/sched.h): create/destroy, clients and their
 * placement, submit, stats.
 *
 * Everything a device needs per request (slots, heaps, the batch arrays) is allocated here at
 * create, so submit only takes a slot and pushes it on a heap under the device lock. Placement
 * reads the loads under the scheduler lock; the device lock is taken inside it only to read a
 * queue depth for ties (the documented order). destroy tolerates a half-built object: it undoes
 * what each device got to (sync_ok, started), so create's failure path is destroy.
 */
#include "facecast/error.h"
#include "sched/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t fc_sched_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int resolve(fc_sched_params *p) {
  if (!p->devices || p->n_devices < 1)
    return fc_error_set(FC_EINVAL, "sched: at least one device is required");
  for (int i = 0; i < p->n_devices; i++)
    if (!p->devices[i].run) return fc_error_set(FC_EINVAL, "sched: device %d has no run callback", i);
  if (p->max_batch < 0 || p->queue_cap < 0 || p->client_queue < 0 || p->budget_ms < 0 ||
      p->margin < 0 || p->margin >= 1 || p->bulk_wait_ms < 0)
    return fc_error_set(FC_EINVAL, "sched: negative size or time, or margin not in [0, 1)");
  if (!p->max_batch) p->max_batch = 16;
  if (!p->queue_cap) p->queue_cap = 256;
  if (!p->client_queue) p->client_queue = 32;
  if (!p->budget_ms) p->budget_ms = 40;
  if (!p->margin) p->margin = 0.2;
  if (!p->gather_ms) p->gather_ms = 10;
  if (!p->bulk_wait_ms) p->bulk_wait_ms = 2000;
  return FC_OK;
}

/* Mutex and the two condition variables, the latter on CLOCK_MONOTONIC (deadlines' clock). */
static int dev_sync_init(sched_dev *d) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca)) return fc_error_set(FC_ENOMEM, "sched: cannot make a condvar");
  int bad = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (!bad && !(bad = pthread_mutex_init(&d->lock, NULL))) {
    if (!(bad = pthread_cond_init(&d->wake, &ca))) {
      if (!(bad = pthread_cond_init(&d->idle, &ca))) d->sync_ok = 1;
      else pthread_cond_destroy(&d->wake);
    }
    if (bad) pthread_mutex_destroy(&d->lock);
  }
  pthread_condattr_destroy(&ca);
  return bad ? fc_error_set(FC_ENOMEM, "sched: cannot make the device %d locks", d->index) : FC_OK;
}

static int dev_init(fc_sched *s, sched_dev *d, int index, const fc_sched_device *cb) {
  const fc_sched_params *p = &s->p;
  int err;
  d->s = s;
  d->index = index;
  d->cb = *cb;
  d->mem_frac = -1;
  d->bulk_cap = (p->queue_cap + 1) / 2;
  if ((err = pool_init(&d->pool, p->queue_cap)) || (err = heap_init(&d->q[0], p->queue_cap)) ||
      (err = heap_init(&d->q[1], p->queue_cap)) ||
      (err = ctl_init(&d->ctl, p->max_batch, p->budget_ms * (1 - p->margin))))
    return err;
  d->batch = calloc((size_t)p->max_batch, sizeof *d->batch);
  d->reqs = calloc((size_t)p->max_batch, sizeof *d->reqs);
  if (!d->batch || !d->reqs) return fc_error_set(FC_ENOMEM, "sched: out of memory");
  return dev_sync_init(d);
}

fc_sched *fc_sched_create(const fc_sched_params *p, int *err) {
  fc_sched *s = NULL;
  fc_sched_params rp;
  if (!p) {
    *err = fc_error_set(FC_EINVAL, "sched: no parameters");
    return NULL;
  }
  rp = *p;
  if ((*err = resolve(&rp))) return NULL;
  if (!(s = calloc(1, sizeof *s))) goto oom;
  s->p = rp;
  s->p.devices = NULL; /* copied into the devices */
  s->gather_ns = rp.gather_ms > 0 ? (int64_t)(rp.gather_ms * 1e6) : 0;
  s->bulk_wait_ns = (int64_t)(rp.bulk_wait_ms * 1e6);
  if (pthread_mutex_init(&s->lock, NULL)) goto oom;
  s->lock_ok = 1;
  if (!(s->dev = calloc((size_t)rp.n_devices, sizeof *s->dev))) goto oom;
  s->n_dev = rp.n_devices;
  for (int i = 0; i < s->n_dev; i++)
    if ((*err = dev_init(s, &s->dev[i], i, &rp.devices[i]))) goto fail;
  for (int i = 0; i < s->n_dev; i++) {
    sched_dev *d = &s->dev[i];
    if (pthread_create(&d->thread, NULL, sched_worker_main, d)) {
      *err = fc_error_set(FC_ENOMEM, "sched: cannot start the worker of device %d", i);
      goto fail;
    }
    d->started = 1;
    char name[16];
    snprintf(name, sizeof name, "fc-sched-%d", i % 10000);
    pthread_setname_np(d->thread, name); /* for top/gdb only: failure does not matter */
  }
  *err = FC_OK;
  return s;
oom:
  *err = fc_error_set(FC_ENOMEM, "sched: out of memory");
fail:
  fc_sched_destroy(s);
  return NULL;
}

void fc_sched_destroy(fc_sched *s) {
  if (!s) return;
  if (s->lock_ok) {
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_mutex_unlock(&s->lock);
  }
  for (int i = 0; i < s->n_dev; i++) {
    sched_dev *d = &s->dev[i];
    if (!d->sync_ok) continue;
    pthread_mutex_lock(&d->lock);
    d->stopping = 1;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
  }
  for (int i = 0; i < s->n_dev; i++)
    if (s->dev[i].started) pthread_join(s->dev[i].thread, NULL);
  while (s->clients) {
    fc_sched_client *c = s->clients;
    s->clients = c->next;
    free(c);
  }
  for (int i = 0; i < s->n_dev; i++) {
    sched_dev *d = &s->dev[i];
    ctl_free(&d->ctl);
    pool_free(&d->pool);
    heap_free(&d->q[0]);
    heap_free(&d->q[1]);
    free(d->batch);
    free(d->reqs);
    if (d->sync_ok) {
      pthread_cond_destroy(&d->wake);
      pthread_cond_destroy(&d->idle);
      pthread_mutex_destroy(&d->lock);
    }
  }
  free(s->dev);
  if (s->lock_ok) pthread_mutex_destroy(&s->lock);
  free(s);
}

int fc_sched_device_count(const fc_sched *s) { return s ? s->n_dev : 0; }

static int dev_queued(sched_dev *d) {
  pthread_mutex_lock(&d->lock);
  int n = d->q[0].n + d->q[1].n;
  pthread_mutex_unlock(&d->lock);
  return n;
}

/* The least-loaded device; ties: shorter queue, then lower index. s->lock held. */
static sched_dev *place(fc_sched *s) {
  sched_dev *best = &s->dev[0];
  int best_q = dev_queued(best);
  for (int i = 1; i < s->n_dev; i++) {
    sched_dev *d = &s->dev[i];
    if (d->load > best->load + 1e-9) continue;
    int q = dev_queued(d);
    if (d->load < best->load - 1e-9 || q < best_q) {
      best = d;
      best_q = q;
    }
  }
  return best;
}

fc_sched_client *fc_sched_client_add(fc_sched *s, const fc_sched_client_params *p, int *err) {
  if (!s || !p || !p->done || (p->cls != FC_SCHED_LIVE && p->cls != FC_SCHED_BULK) ||
      p->weight < 0 || p->max_queued < 0) {
    *err = fc_error_set(FC_EINVAL, "sched: a client needs a done callback, a class and "
                                   "non-negative weight and queue");
    return NULL;
  }
  fc_sched_client *c = calloc(1, sizeof *c);
  if (!c) {
    *err = fc_error_set(FC_ENOMEM, "sched: out of memory");
    return NULL;
  }
  c->s = s;
  c->cls = p->cls;
  c->done = p->done;
  c->user = p->user;
  c->weight = p->weight > 0 ? p->weight : p->cls == FC_SCHED_LIVE ? 1.0 : 0.25;
  c->max_queued = p->max_queued ? p->max_queued : s->p.client_queue;
  pthread_mutex_lock(&s->lock);
  if (s->stopping) {
    pthread_mutex_unlock(&s->lock);
    free(c);
    *err = fc_error_set(FC_ECANCELED, "sched: shutting down");
    return NULL;
  }
  c->dev = place(s);
  c->dev->load += c->weight;
  if (c->cls == FC_SCHED_LIVE)
    c->dev->n_live++;
  else
    c->dev->n_bulk++;
  c->next = s->clients;
  if (s->clients) s->clients->prev = c;
  s->clients = c;
  pthread_mutex_unlock(&s->lock);
  *err = FC_OK;
  return c;
}

int fc_sched_client_device(const fc_sched_client *c) { return c ? c->dev->index : -1; }

int fc_sched_client_remove(fc_sched_client *c) {
  if (!c) return FC_OK;
  /* A worker waiting for its own client's running batch would wait for ever. */
  if (sched_on_worker())
    return fc_error_set(FC_EINVAL, "sched: a client cannot be removed from a scheduler callback");
  fc_sched *s = c->s;
  sched_dev *d = c->dev;
  sched_item *it;
  pthread_mutex_lock(&d->lock);
  c->removing = 1;
  while ((it = heap_take_client(&d->q[c->cls], c))) {
    sched_release_quota(d, it);
    pthread_mutex_unlock(&d->lock);
    sched_complete(d, it, FC_ECANCELED);
    pthread_mutex_lock(&d->lock);
  }
  while (c->pending > 0) pthread_cond_wait(&d->idle, &d->lock);
  pthread_mutex_unlock(&d->lock);
  pthread_mutex_lock(&s->lock);
  if (c->prev)
    c->prev->next = c->next;
  else
    s->clients = c->next;
  if (c->next) c->next->prev = c->prev;
  d->load -= c->weight;
  if (c->cls == FC_SCHED_LIVE)
    d->n_live--;
  else
    d->n_bulk--;
  pthread_mutex_unlock(&s->lock);
  free(c);
  return FC_OK;
}

int fc_sched_submit(fc_sched_client *c, int64_t deadline_ns, void *payload) {
  if (!c) return fc_error_set(FC_EINVAL, "sched: submit without a client");
  sched_dev *d = c->dev;
  int64_t now = fc_sched_now_ns();
  sched_item *it = NULL;
  pthread_mutex_lock(&d->lock);
  if (d->stopping || c->removing) {
    pthread_mutex_unlock(&d->lock);
    return fc_error_set(FC_ECANCELED, "sched: the scheduler or the client is closing");
  }
  int held = c->held, used = d->pool.used;
  if (held >= c->max_queued || (c->cls == FC_SCHED_BULK && d->bulk_held >= d->bulk_cap) ||
      !(it = pool_get(&d->pool))) {
    d->rejected++;
    pthread_mutex_unlock(&d->lock);
    return fc_error_set(FC_EAGAIN, "sched: device %d is full for this client (%d of %d held, "
                                   "%d of %d slots used)",
                        d->index, held, c->max_queued, used, d->pool.cap);
  }
  it->req = (fc_sched_req){.payload = payload,
                           .client_user = c->user,
                           .cls = c->cls,
                           .deadline_ns = deadline_ns,
                           .submit_ns = now};
  it->client = c;
  it->seq = d->seq++;
  heap_push(&d->q[c->cls], it);
  c->held++;
  c->pending++;
  if (c->cls == FC_SCHED_BULK) d->bulk_held++;
  if (d->sleeping) pthread_cond_signal(&d->wake);
  pthread_mutex_unlock(&d->lock);
  return FC_OK;
}

int fc_sched_stats_get(fc_sched *s, int device, fc_sched_stats *out) {
  if (!s || !out || device < 0 || device >= s->n_dev)
    return fc_error_set(FC_EINVAL, "sched: no device %d", device);
  sched_dev *d = &s->dev[device];
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&s->lock);
  out->load = d->load;
  out->live_clients = d->n_live;
  out->bulk_clients = d->n_bulk;
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_lock(&d->lock);
  out->batches = d->batches;
  out->frames = d->frames;
  out->failed = d->failed;
  out->canceled = d->canceled;
  out->late = d->late;
  out->oom_retries = d->oom_retries;
  out->rejected = d->rejected;
  out->bulk_aged = d->bulk_aged;
  out->wakeups = d->wakeups;
  out->mean_batch = d->batches ? (double)d->batch_frames / (double)d->batches : 0;
  ctl_window_pct(&d->ctl, &out->p50_ms, &out->p95_ms);
  out->mem_frac = d->mem_frac;
  out->limit = ctl_limit(&d->ctl, ctl_mem_cap(s->p.max_batch, d->mem_frac));
  out->queued = d->q[0].n + d->q[1].n;
  pthread_mutex_unlock(&d->lock);
  return FC_OK;
}
