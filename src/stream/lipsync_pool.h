/* Scheduled lip-sync: the device scheduler (src/sched/sched.h) over one lip-sync backend per
 * compute device, and the clients whose frames it batches together.
 *
 * A frame's way: the stream asks for its lip-sync through its run hook → fc_lipsync_pool_hook
 * turns each request into a typed work item (the stream's fc_lipsync_req and the patch it
 * owns) and submits it with a deadline → the scheduler batches the items of every client on
 * the device by deadline, live before bulk → the device's backend runs the batch
 * (fc_lipsync_run) and writes each patch into its owner's buffer → the call returns when all
 * of its frames are done. Only this file's .c knows what a scheduler payload is.
 *
 * A client is a live session (FC_SCHED_LIVE: its deadlines are when its pacer will need the
 * frames) or a bulk job (FC_SCHED_BULK: deadlines a second out, so bulk work keeps its own
 * order behind every live frame). fc_lipsync_pool_hook has the shape of fc_stream_params.run
 * with run_user = the client, so a stream needs no code of its own to be scheduled.
 *
 * Threads. One call per client at a time (a stream's producer holds its stream lock around
 * it); clients from any threads. The device threads fill the patches and post completions;
 * the calling thread waits on its client's condition variable. Lifetimes: the backends are
 * borrowed and outlive the pool; remove a client when no call of it is in progress (its
 * frames are then all done); destroy the pool after its clients. */
#ifndef FC_STREAM_LIPSYNC_POOL_H
#define FC_STREAM_LIPSYNC_POOL_H

#include "facecast/lipsync.h"
#include "facecast/stream.h"
#include "sched/sched.h"

#define FC_LIPSYNC_POOL_MAX_DEVICES 16
#define FC_LIPSYNC_POOL_MAX_CALL 16 /* frames per call (a stream's largest batch) */

typedef struct fc_lipsync_pool fc_lipsync_pool;
typedef struct fc_lipsync_client fc_lipsync_client;

typedef struct fc_lipsync_pool_params {
  fc_lipsync *const *backends; /* one per device; borrowed */
  int n_backends;
  /* Largest batch a device runs (0: 16). A GPU gains from batches across clients; a CPU
   * backend costs per frame, so 16 there. */
  int max_batch;
  /* Longest wait to fill a batch (fc_sched_params.gather_ms): a GPU waits a little for more
   * clients' frames (2 ms), a CPU not at all (negative). 0: the scheduler's default. */
  double gather_ms;
} fc_lipsync_pool_params;

/* Starts the scheduler's device threads. NULL and *err (FC_EINVAL, FC_ENOMEM) on failure. */
fc_lipsync_pool *fc_lipsync_pool_create(const fc_lipsync_pool_params *p, int *err);
/* After every client is removed. NULL is a no-op. */
void fc_lipsync_pool_destroy(fc_lipsync_pool *pool);
/* The scheduler, for its figures (fc_sched_stats_get, fc_sched_device_count). */
fc_sched *fc_lipsync_pool_sched(fc_lipsync_pool *pool);

typedef struct fc_lipsync_client_params {
  fc_sched_class cls;
  /* The deadline of a call's first frame on fc_sched_now_ns's clock; the others follow 40 ms
   * apart. NULL: a second from now (bulk). Called on the calling thread. */
  int64_t (*first_due)(void *user);
  void *user;
} fc_lipsync_client_params;

/* Registers a client on the least-loaded device. NULL and *err on failure. */
fc_lipsync_client *fc_lipsync_client_add(fc_lipsync_pool *pool, const fc_lipsync_client_params *p,
                                         int *err);
/* Unregisters and frees it (no call of it in progress). NULL is a no-op. */
void fc_lipsync_client_remove(fc_lipsync_client *c);
/* The device the client was placed on. */
int fc_lipsync_client_device(const fc_lipsync_client *c);
/* The backend of that device (borrowed): what a stream of the client is created with, for its
 * patch sizes and whether requests carry mel windows. */
fc_lipsync *fc_lipsync_client_backend(const fc_lipsync_client *c);

/* Runs n (1..FC_LIPSYNC_POOL_MAX_CALL) requests through the scheduler and waits for all of
 * them: out[i] is filled for reqs[i] (buffers owned by the caller, as for fc_lipsync_run).
 * 0, or the first error of a frame (with its detail), FC_EAGAIN when the scheduler's bounds
 * refused a frame (the frames it took are still waited for), FC_EINVAL for a bad n. */
int fc_lipsync_client_run(fc_lipsync_client *c, const fc_lipsync_req *reqs, fc_patch *out, int n);
/* fc_lipsync_client_run as a stream's run hook: user is the client. */
int fc_lipsync_pool_hook(void *user, const fc_lipsync_req *reqs, fc_patch *out,
                         const fc_frame_info *info, int n);

#endif
