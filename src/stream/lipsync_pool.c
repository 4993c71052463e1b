/* Scheduled lip-sync (see lipsync_pool.h): the scheduler's devices run lip-sync batches, and
 * a client's call waits for its frames on its own lock and condition variable. */
#include "stream/lipsync_pool.h"

#include "facecast/error.h"

#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>

#define FRAME_NS 40000000LL /* 25 fps */

/* A scheduler payload: one frame's request and the patch its owner gave for it. */
typedef struct work {
  const fc_lipsync_req *req;
  fc_patch *patch;
} work;

/* A device: its backend and the batch arrays it hands to it (the device thread's alone). */
typedef struct device {
  fc_lipsync *ls;
  fc_lipsync_req *reqs;
  fc_patch *patches;
} device;

struct fc_lipsync_pool {
  fc_sched *sched;
  int n;
  device dev[FC_LIPSYNC_POOL_MAX_DEVICES];
};

struct fc_lipsync_client {
  fc_lipsync_pool *pool;
  fc_sched_client *sc;
  int64_t (*first_due)(void *user);
  void *user;
  pthread_mutex_t lock; /* left, err, detail: the device threads complete frames under it */
  pthread_cond_t cond;
  int left, err;
  int bulk; /* FC_SCHED_BULK: waits for room in the scheduler rather than failing (below) */
  char detail[200];
  work w[FC_LIPSYNC_POOL_MAX_CALL];
};

/* How long a bulk client waits for room at most before its call fails. The scheduler keeps
 * half of a device's places for live frames, so many bulk clients at once (a machine's render
 * slots) can find the bulk half full; their work is not urgent, so they wait for their own
 * frames in flight, else a few milliseconds, and try again. */
#define BULK_WAIT_MS 60000
#define BULK_RETRY_MS 2

/* The scheduler's run: a batch of frames from any clients, as one backend call. */
static int device_run(void *user, fc_sched_req *const *reqs, int n) {
  device *d = user;
  for (int i = 0; i < n; i++) {
    const work *w = reqs[i]->payload;
    d->reqs[i] = *w->req;
    d->patches[i] = *w->patch; /* the owner's buffers; the backend fills them */
  }
  int err = fc_lipsync_run(d->ls, d->reqs, d->patches, n);
  for (int i = 0; i < n && !err; i++) {
    const work *w = reqs[i]->payload;
    *w->patch = d->patches[i]; /* where the patch goes, and how it is laid out */
  }
  return err;
}

/* The headroom rule's probe: the backend's device memory (GPUs; CPU backends have none). */
static int device_memory(void *user, double *frac) {
  return fc_lipsync_memory_used(((device *)user)->ls, frac);
}

fc_lipsync_pool *fc_lipsync_pool_create(const fc_lipsync_pool_params *p, int *err) {
  if (!p || !p->backends || p->n_backends < 1 || p->n_backends > FC_LIPSYNC_POOL_MAX_DEVICES ||
      p->max_batch < 0) {
    *err = fc_error_set(FC_EINVAL, "lip-sync pool: 1 to %d backends and a batch size >= 0",
                        FC_LIPSYNC_POOL_MAX_DEVICES);
    return NULL;
  }
  fc_lipsync_pool *pool = calloc(1, sizeof *pool);
  if (!pool) goto oom;
  const int cap = p->max_batch ? p->max_batch : 16;
  fc_sched_device sd[FC_LIPSYNC_POOL_MAX_DEVICES];
  for (int k = 0; k < p->n_backends; k++) {
    device *d = &pool->dev[k];
    d->ls = p->backends[k];
    d->reqs = calloc((size_t)cap, sizeof *d->reqs);
    d->patches = calloc((size_t)cap, sizeof *d->patches);
    pool->n = k + 1;
    if (!d->reqs || !d->patches) goto oom;
    double probe;
    /* Only backends that can say how full their device is get the headroom rule. */
    const int has_memory = fc_lipsync_memory_used(d->ls, &probe) != FC_EUNSUPPORTED;
    sd[k] = (fc_sched_device){.user = d, .run = device_run,
                              .mem_used_fraction = has_memory ? device_memory : NULL};
  }
  /* Room for four full batches of requests per device (at least 256), 16 per client: a
   * client asks for at most FC_LIPSYNC_POOL_MAX_CALL frames at a time. */
  fc_sched_params sp = {.devices = sd, .n_devices = p->n_backends, .max_batch = cap,
                        .queue_cap = 4 * cap > 256 ? 4 * cap : 256,
                        .client_queue = FC_LIPSYNC_POOL_MAX_CALL, .gather_ms = p->gather_ms};
  if (!(pool->sched = fc_sched_create(&sp, err))) {
    fc_lipsync_pool_destroy(pool);
    return NULL;
  }
  return pool;
oom:
  fc_lipsync_pool_destroy(pool);
  *err = fc_error_set(FC_ENOMEM, "lip-sync pool: out of memory");
  return NULL;
}

void fc_lipsync_pool_destroy(fc_lipsync_pool *pool) {
  if (!pool) return;
  fc_sched_destroy(pool->sched);
  for (int k = 0; k < pool->n; k++) {
    free(pool->dev[k].reqs);
    free(pool->dev[k].patches);
  }
  free(pool);
}

fc_sched *fc_lipsync_pool_sched(fc_lipsync_pool *pool) { return pool ? pool->sched : NULL; }

/* A frame is done (a device thread, or the removing thread for a cancelled one). */
static void frame_done(void *user, fc_sched_req *req, int status) {
  fc_lipsync_client *c = user;
  (void)req;
  pthread_mutex_lock(&c->lock);
  if (status && !c->err) {
    c->err = status;
    snprintf(c->detail, sizeof c->detail, "%s", fc_error_detail(status));
  }
  c->left--;
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
}

fc_lipsync_client *fc_lipsync_client_add(fc_lipsync_pool *pool, const fc_lipsync_client_params *p,
                                         int *err) {
  if (!pool || !p) {
    *err = fc_error_set(FC_EINVAL, "lip-sync client: no pool or parameters");
    return NULL;
  }
  fc_lipsync_client *c = calloc(1, sizeof *c);
  if (!c) {
    *err = fc_error_set(FC_ENOMEM, "lip-sync client: out of memory");
    return NULL;
  }
  c->pool = pool;
  c->first_due = p->first_due;
  c->user = p->user;
  c->bulk = p->cls == FC_SCHED_BULK;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->cond, NULL);
  fc_sched_client_params cp = {.cls = p->cls, .done = frame_done, .user = c};
  if (!(c->sc = fc_sched_client_add(pool->sched, &cp, err))) {
    fc_lipsync_client_remove(c);
    return NULL;
  }
  return c;
}

void fc_lipsync_client_remove(fc_lipsync_client *c) {
  if (!c) return;
  fc_sched_client_remove(c->sc); /* no frame of ours is queued: no call is in progress */
  pthread_mutex_destroy(&c->lock);
  pthread_cond_destroy(&c->cond);
  free(c);
}

int fc_lipsync_client_device(const fc_lipsync_client *c) { return fc_sched_client_device(c->sc); }

fc_lipsync *fc_lipsync_client_backend(const fc_lipsync_client *c) {
  const int d = fc_sched_client_device(c->sc);
  return c->pool->dev[d >= 0 && d < c->pool->n ? d : 0].ls;
}

int fc_lipsync_client_run(fc_lipsync_client *c, const fc_lipsync_req *reqs, fc_patch *out, int n) {
  if (!c || !reqs || !out || n < 1 || n > FC_LIPSYNC_POOL_MAX_CALL)
    return fc_error_set(FC_EINVAL, "lip-sync calls through the scheduler are 1 to %d frames",
                        FC_LIPSYNC_POOL_MAX_CALL);
  const int64_t due = c->first_due ? c->first_due(c->user) : fc_sched_now_ns() + 1000000000LL;
  pthread_mutex_lock(&c->lock);
  c->left = 0, c->err = 0;
  int err = 0;
  /* Submitted under the lock: a frame done at once waits for it, so `left` never goes below
   * zero while frames are still being handed out. */
  int waited_ms = 0;
  for (int i = 0; i < n && !err;) {
    c->w[i] = (work){&reqs[i], &out[i]};
    if (!(err = fc_sched_submit(c->sc, due + i * FRAME_NS, &c->w[i]))) {
      c->left++, i++;
      continue;
    }
    if (err != FC_EAGAIN || !c->bulk || waited_ms >= BULK_WAIT_MS) break;
    err = 0; /* a bulk client waits for room */
    if (c->left > 0) {
      while (c->left > 0) pthread_cond_wait(&c->cond, &c->lock);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts); /* the condition's clock */
      ts.tv_nsec += BULK_RETRY_MS * 1000000L;
      if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
      pthread_cond_timedwait(&c->cond, &c->lock, &ts);
      waited_ms += BULK_RETRY_MS;
    }
  }
  while (c->left > 0) pthread_cond_wait(&c->cond, &c->lock);
  if (!err && c->err) err = fc_error_set(c->err, "%s", c->detail);
  pthread_mutex_unlock(&c->lock);
  return err;
}

int fc_lipsync_pool_hook(void *user, const fc_lipsync_req *reqs, fc_patch *out,
                         const fc_frame_info *info, int n) {
  (void)info;
  return fc_lipsync_client_run(user, reqs, out, n);
}
