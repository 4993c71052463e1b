/* The device scheduler: batches the frame requests of all sessions on a compute device.
 *
 * One worker thread per device takes the requests that clients (sessions, bulk jobs) submit,
 * forms batches and hands each batch to the device's run callback (in the engine: the device's
 * lip-sync backend). A request carries an absolute deadline on CLOCK_MONOTONIC and an opaque
 * payload; the scheduler never looks inside the payload.
 *
 * Batching. A batch is every queued live request before any bulk one, each class in earliest-
 * deadline-first order (equal deadlines: first submitted first), up to the device's current
 * batch limit. When fewer requests than the limit are queued the worker gathers for a short
 * window: until the limit is reached, gather_ms have passed, or the earliest deadline minus the
 * predicted batch time arrives, whichever is first. Bulk ageing: when a batch is all live and
 * the bulk request first in line has waited bulk_wait_ms, it takes the batch's last seat, so a
 * device saturated by live sessions still makes bulk progress (one frame per batch).
 *
 * Batch limit = min(latency limit, memory cap), at least 1:
 *  - memory cap, from the device's memory probe before each batch: used fraction below 0.70
 *    → max_batch; 0.70 to 0.90 → max_batch / 2; above 0.90 → max_batch / 4 (no probe, or a
 *    probe error: max_batch);
 *  - latency limit (starts at max_batch): batch times are kept per batch size (the last 32);
 *    when their p95 at a size exceeds target = budget_ms × (1 − margin) (at a size with fewer
 *    than 4 batches yet: any one batch over the target), the limit drops below that size in
 *    proportion (n × target / p95); when full batches at the limit have p95 + the per-frame
 *    cost (least-squares slope of the last 64 batches) within the target 8 batches in a row,
 *    it grows by one (AIMD);
 *  - out of device memory: a batch whose run returns FC_ENOMEM is put back in the queue whole
 *    (deadlines and order kept) and the latency limit halves (n / 2); the failed size is then
 *    not tried again for 256 successful batches. A single-request batch that returns FC_ENOMEM
 *    completes with FC_ENOMEM. Every request completes exactly once either way.
 *
 * Placement. A client is placed at registration, for its lifetime, on the device with the
 * lowest load = the sum of its clients' weights (live 1, bulk 0.25 unless given); ties go to the
 * shorter queue, then the lower index. Silent clients cost nothing at run time: the worker
 * sleeps while nothing is queued and never visits clients, only requests.
 *
 * Bounds and backpressure (nothing is dropped silently): each device has queue_cap request
 * slots, allocated at create (no allocation per request). fc_sched_submit returns FC_EAGAIN,
 * and the request is not taken, when the client already holds max_queued requests (queued or
 * running), when the device has no free slot, or for bulk when bulk requests hold half of the
 * device's slots (the other half stays for live sessions). A request leaves its client's and
 * the bulk count when its done is called (so done can submit the next one) and frees its slot
 * when done returns.
 *
 * Threads. run and the memory probe are called on the device's worker thread, one call at a
 * time per device, with no scheduler lock held. done is called exactly once per accepted
 * request, with no scheduler lock held: on the worker thread, except for requests cancelled by
 * fc_sched_client_remove (on the thread that calls it, before it returns). done may call
 * fc_sched_submit and fc_sched_stats_get; it must not call fc_sched_client_remove or
 * fc_sched_destroy (the server posts completions to its own loop). When a call returns an error
 * no callback is called for it (libuv's rule). The other functions may be called from any
 * thread.
 *
 * Shutdown. fc_sched_destroy lets each device finish the batch it is running, then completes
 * every queued request with FC_ECANCELED (on the worker threads), joins them and frees the
 * clients still registered; submits racing with it return FC_ECANCELED. */
#ifndef FACECAST_SCHED_H
#define FACECAST_SCHED_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_sched fc_sched;
typedef struct fc_sched_client fc_sched_client;

typedef enum fc_sched_class {
  FC_SCHED_LIVE = 0, /* a session that someone watches: served first */
  FC_SCHED_BULK = 1, /* offline work (renders): fills what live sessions leave */
} fc_sched_class;

/* One request, as run and done see it. The scheduler owns the memory (a pool slot): valid from
 * submit until done returns. */
typedef struct fc_sched_req {
  void *payload;       /* the submitter's, untouched */
  void *client_user;   /* the client's user pointer */
  fc_sched_class cls;
  int64_t deadline_ns; /* absolute, CLOCK_MONOTONIC (fc_sched_now_ns); none: INT64_MAX */
  int64_t submit_ns;
  int64_t finish_ns;   /* when its batch ended; 0 when cancelled */
  int batch_size;      /* size of the batch that ran it; 0 when cancelled */
  int status;          /* 0 when run starts; run may set a per-request error here */
} fc_sched_req;

/* A compute device: its backend and memory probe. */
typedef struct fc_sched_device {
  void *user;
  /* Runs a batch; returns 0 (requests with req->status still 0 succeeded) or a negative error
   * for the whole batch (FC_ENOMEM: the batch is retried smaller). */
  int (*run)(void *user, fc_sched_req *const *reqs, int n);
  /* Optional: the device's used memory fraction in [0, 1] (GPU: from cudaMemGetInfo). */
  int (*mem_used_fraction)(void *user, double *frac);
} fc_sched_device;

typedef struct fc_sched_params {
  const fc_sched_device *devices; /* copied */
  int n_devices;
  int max_batch;       /* largest batch; 0 = 16 */
  int queue_cap;       /* request slots per device; 0 = 256 */
  int client_queue;    /* default max_queued of a client; 0 = 32 */
  double budget_ms;    /* frame budget a batch must fit in; 0 = 40 (25 fps) */
  double margin;       /* target p95 = budget × (1 − margin); 0 = 0.2 */
  double gather_ms;    /* longest wait to fill a batch; 0 = 10; negative = no wait */
  double bulk_wait_ms; /* bulk ageing (see above); 0 = 2000 */
} fc_sched_params;

typedef struct fc_sched_client_params {
  fc_sched_class cls;
  /* Called once per accepted request (see Threads); status 0, the batch's or the request's
   * error, or FC_ECANCELED. Required. */
  void (*done)(void *user, fc_sched_req *req, int status);
  void *user;
  double weight;  /* placement weight; 0 = 1 for live, 0.25 for bulk */
  int max_queued; /* requests held at once (queued or running); 0 = params.client_queue */
} fc_sched_client_params;

typedef struct fc_sched_stats {
  uint64_t batches;     /* batches that ran successfully */
  uint64_t frames;      /* requests completed with status 0 */
  uint64_t failed;      /* requests completed with an error (not cancelled) */
  uint64_t canceled;    /* requests completed with FC_ECANCELED */
  uint64_t late;        /* requests (not cancelled) whose batch ended after their deadline */
  uint64_t oom_retries; /* batches put back after FC_ENOMEM */
  uint64_t rejected;    /* submits answered FC_EAGAIN */
  uint64_t bulk_aged;   /* bulk requests seated by ageing */
  uint64_t wakeups;     /* worker wake-ups (0 while only silent clients are registered) */
  double mean_batch;    /* frames / batches */
  double p50_ms, p95_ms; /* batch time over the last 64 successful batches; 0 before any */
  double mem_frac;      /* last memory probe; −1 without one */
  int limit;            /* the batch limit now (latency limit capped by memory) */
  int queued;           /* requests waiting (not running) */
  int live_clients, bulk_clients;
  double load;          /* placement load: sum of client weights */
} fc_sched_stats;

/* Starts one worker per device. NULL and *err on failure (FC_EINVAL, FC_ENOMEM). */
fc_sched *fc_sched_create(const fc_sched_params *p, int *err);
/* See Shutdown. NULL is a no-op. Not from a done callback, nor while another thread is in
 * fc_sched_client_remove. */
void fc_sched_destroy(fc_sched *s);
int fc_sched_device_count(const fc_sched *s);

/* Registers a client on the least-loaded device. NULL and *err on failure. */
fc_sched_client *fc_sched_client_add(fc_sched *s, const fc_sched_client_params *p, int *err);
/* The device the client was placed on (index into params.devices). */
int fc_sched_client_device(const fc_sched_client *c);
/* Unregisters and frees c: its queued requests complete with FC_ECANCELED (on this thread), then
 * it waits for those in the running batch (one batch time; longer only if that batch runs out
 * of memory and is retried). After it returns no callback for c comes. FC_EINVAL (and nothing
 * done) when called on a worker thread (from a callback). NULL is a no-op. */
int fc_sched_client_remove(fc_sched_client *c);

/* Queues a request. 0, or FC_EAGAIN (bounds above: retry after a completion), FC_ECANCELED
 * (the scheduler is shutting down or c is being removed), FC_EINVAL; on error done is not
 * called for it. */
int fc_sched_submit(fc_sched_client *c, int64_t deadline_ns, void *payload);

/* A snapshot of one device's figures. */
int fc_sched_stats_get(fc_sched *s, int device, fc_sched_stats *out);

/* CLOCK_MONOTONIC in nanoseconds: the clock of deadlines. */
int64_t fc_sched_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
