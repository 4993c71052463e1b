/* Private to src/sched: the scheduler's objects and the pieces that share them.
 *
 *  - control.c: the batch limit (memory cap, latency AIMD, OOM halving) and batch-time figures;
 *    pure functions on an sched_ctl, no threads, so tests drive them with synthetic times;
 *  - queue.c: a device's request pool (free list) and its two deadline heaps (live, bulk);
 *  - worker.c: the worker thread (gather, batch, run, complete, cancel at shutdown);
 *  - sched.c: create/destroy, clients and placement, submit, stats.
 * Locks: fc_sched.lock guards the client list and placement loads; sched_dev.lock guards the
 * device's pool, heaps, controller, counters and each of its clients' held/removing. Order:
 * fc_sched.lock before sched_dev.lock; callbacks run with neither held. */
#ifndef FC_SCHED_INTERNAL_H
#define FC_SCHED_INTERNAL_H

#include "sched/sched.h"

#include <pthread.h>
#include <stdint.h>

/* ---- control.c ---------------------------------------------------------------------------- */

#define CTL_PER_SIZE 32   /* batch times kept per batch size */
#define CTL_WINDOW 64     /* last batches kept for the slope and the p50/p95 figures */
#define CTL_MIN_SAMPLES 4 /* samples at a size before its p95 decides anything */
#define CTL_GROW_AFTER 8  /* good full batches in a row before the limit grows by one */
#define CTL_OOM_HOLD 256  /* successful batches before a size that ran out of memory is retried */

typedef struct ctl_ring {
  float ms[CTL_PER_SIZE];
  int n, pos;
} ctl_ring;

typedef struct sched_ctl {
  int max_batch;
  double target_ms;
  int limit;       /* the latency limit, 1..max_batch */
  int ceiling;     /* sizes above it ran out of memory lately; max_batch when none */
  int oom_hold;    /* successful batches left before the ceiling lifts */
  int good;        /* consecutive good full batches at the limit */
  ctl_ring *size;  /* [max_batch + 1], by batch size */
  struct {
    int n;
    float ms;
  } win[CTL_WINDOW];
  int win_n, win_pos;
} sched_ctl;

int ctl_init(sched_ctl *c, int max_batch, double target_ms);
void ctl_free(sched_ctl *c);
/* The headroom rule: the batch cap for a used-memory fraction (negative: unknown). */
int ctl_mem_cap(int max_batch, double frac);
/* The limit for the next batch. */
int ctl_limit(const sched_ctl *c, int mem_cap);
/* A batch of n ran in ms; eff_limit was the limit it was formed under. */
void ctl_batch_done(sched_ctl *c, int n, int eff_limit, double ms);
/* A batch of n returned FC_ENOMEM. */
void ctl_oom(sched_ctl *c, int n);
/* Expected batch time at size n (the gather window leaves this much before a deadline). */
double ctl_predict_ms(const sched_ctl *c, int n);
/* p50/p95 of the last CTL_WINDOW batch times (0 before any). */
void ctl_window_pct(const sched_ctl *c, double *p50, double *p95);

/* ---- queue.c ------------------------------------------------------------------------------- */

typedef struct sched_item {
  fc_sched_req req; /* what run and done see */
  fc_sched_client *client;
  uint64_t seq;      /* submission order: equal deadlines go first-come */
  int next_free;     /* free-list link (slot index), -1 at the end */
} sched_item;

typedef struct sched_heap {
  sched_item **a;
  int n;
} sched_heap;

typedef struct sched_pool {
  sched_item *slot;
  int cap, free_head, used;
} sched_pool;

int pool_init(sched_pool *p, int cap);
void pool_free(sched_pool *p);
sched_item *pool_get(sched_pool *p); /* NULL when full */
void pool_put(sched_pool *p, sched_item *it);

int heap_init(sched_heap *h, int cap);
void heap_free(sched_heap *h);
void heap_push(sched_heap *h, sched_item *it);
sched_item *heap_pop(sched_heap *h);
/* Takes out one item of client c, or NULL when it has none queued. */
sched_item *heap_take_client(sched_heap *h, const fc_sched_client *c);

/* ---- the objects -------------------------------------------------------------------------- */

typedef struct sched_dev {
  fc_sched *s;
  int index;
  fc_sched_device cb;

  pthread_mutex_t lock;
  pthread_cond_t wake; /* the worker: requests came, or stop */
  pthread_cond_t idle; /* client_remove: a removing client's last request completed */
  pthread_t thread;
  int sync_ok, started; /* what create got to (destroy undoes that much) */

  sched_pool pool;
  sched_heap q[2]; /* by fc_sched_class */
  int bulk_held, bulk_cap;
  uint64_t seq;
  int stopping, sleeping;
  sched_item **batch;    /* max_batch, the batch being run */
  fc_sched_req **reqs;   /* max_batch, what run gets */
  sched_ctl ctl;
  double mem_frac; /* the last probe, -1 without one */

  uint64_t batches, batch_frames, frames, failed, canceled, late, oom_retries, rejected,
      bulk_aged, wakeups;

  /* Guarded by fc_sched.lock. */
  double load;
  int n_live, n_bulk;
} sched_dev;

struct fc_sched_client {
  fc_sched *s;
  sched_dev *dev;
  fc_sched_class cls;
  void (*done)(void *user, fc_sched_req *req, int status);
  void *user;
  double weight;
  int max_queued;
  int held;     /* dev->lock: queued or running (the max_queued quota) */
  int pending;  /* dev->lock: accepted and done not yet returned (what remove waits for) */
  int removing; /* dev->lock */
  fc_sched_client *prev, *next; /* fc_sched.clients, under fc_sched.lock */
};

struct fc_sched {
  fc_sched_params p; /* defaults resolved */
  int64_t gather_ns, bulk_wait_ns;
  sched_dev *dev;
  int n_dev;
  pthread_mutex_t lock;
  int lock_ok;
  int stopping;              /* lock: destroy has begun, no new clients */
  fc_sched_client *clients;  /* lock */
};

/* ---- worker.c ------------------------------------------------------------------------------ */

void *sched_worker_main(void *dev);
/* Whether the calling thread is a scheduler worker (callbacks run there). */
int sched_on_worker(void);
/* Gives back the request's share of its client's and the bulk quota: before done, so that done
 * can submit again. dev->lock held. */
void sched_release_quota(sched_dev *d, sched_item *it);
/* Calls done for a request and gives its slot back (locks dev->lock after the callback). */
void sched_complete(sched_dev *d, sched_item *it, int status);

#endif
