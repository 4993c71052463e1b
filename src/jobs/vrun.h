/* The video job runner (issue 17): K render slots, each a thread with its own handle on a job
 * store (vstore.h), taking work items and doing them with bulk/video.h — a shard rendered
 * into <shared>/<job>/shards/, or the join into <shared>/<job>/video.mp4 (+ captions.srt and
 * .vtt for a script) — and, when a job completes or fails, POSTing its callback_url through the
 * webhook sender (webhook.h) with the job's request id in the body.
 *
 * The same runner serves `facecast serve` (the local store, or --redis) and `facecast worker
 * --redis`: it knows no HTTP, only a store, a folder and what shards render with.
 *
 * A keeper thread (its own store handle too) touches the items being worked on every 2 s and
 * reports their progress, so a slot deep in a long shard is never taken over and makes no
 * store calls while it renders; when a touch says the job is no longer wanted (canceled,
 * failed by another shard), the slot's render is stopped at its next lip-sync request. It also
 * copies each callback's delivery attempts into the job as they happen. */
#ifndef FC_JOBS_VRUN_H
#define FC_JOBS_VRUN_H

#include "bulk/video.h"
#include "jobs/vstore.h"

#include <stdint.h>

typedef struct fc_vrun fc_vrun;

typedef struct fc_vrun_params {
  fc_vstore *store;       /* cloned for each thread; not kept */
  int slots;              /* render threads; 0: the machine's cores */
  const char *shared_dir; /* the jobs' folders (copied) */
  fc_video_env env;       /* what a shard renders with (its shared_dir is set from the above) */
  struct fc_webhook *webhook; /* the sender for callbacks (the server's; not owned), or NULL:
                              * the runner makes its own, signing with webhook_secret */
  const char *webhook_secret; /* (NULL: unsigned); copied */
} fc_vrun_params;

fc_vrun *fc_vrun_create(const fc_vrun_params *p, int *err);
/* Stops: renders in progress are stopped at their next lip-sync request and their items left
 * unacknowledged (a shared store hands them to another worker); waits for the threads; the
 * webhook sender gets its few seconds (webhook.h). NULL is fine. */
void fc_vrun_destroy(fc_vrun *r);

/* Figures for /metrics (a copy). The histograms' buckets: fc_vrun_bounds_s, then +Inf. */
#define FC_VRUN_BUCKETS 12
extern const double fc_vrun_bounds_s[FC_VRUN_BUCKETS];
typedef struct fc_vrun_hist {
  uint64_t n[FC_VRUN_BUCKETS + 1];
  uint64_t count;
  double sum;
} fc_vrun_hist;
typedef struct fc_vrun_stats {
  int slots, busy;           /* render threads; working now */
  int busy_jobs;             /* distinct jobs those are working on */
  uint64_t completed, failed; /* jobs this runner finished */
  fc_vrun_hist wait_s;       /* submit → first item taken */
  fc_vrun_hist render_s;     /* first item taken → completed */
  double x_realtime_last;    /* video seconds / render seconds of the last completed job */
  double video_seconds;      /* of every completed job */
  uint64_t webhook_failures; /* callbacks whose every attempt failed (or got a final refusal);
                              * the sender's own figures (webhook.h) count every delivery */
} fc_vrun_stats;
void fc_vrun_stats_get(fc_vrun *r, fc_vrun_stats *out);

/* Removes <shared>/<id> and everything in it (a job expired or deleted). */
void fc_vrun_remove_job_files(const char *shared_dir, const char *id);

#endif
