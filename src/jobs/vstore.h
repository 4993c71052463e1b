/* The store of bulk video jobs (issue 17): their state, and the queue of work their shards make.
 * Two implementations behind one interface, chosen at creation:
 *  - local: in this process (a table and a queue in memory); `serve` without --redis;
 *  - redis: job state in Redis hashes, work on a Redis Stream read through a consumer group
 *    (XADD / XREADGROUP / XACK; XAUTOCLAIM hands work whose worker went quiet to another);
 *    `serve --redis URL` (submits) and `worker --redis URL` (takes work) share it.
 *
 * A job is cut into shards when submitted (bulk/video.h's plan); each shard is one work item,
 * and when the last shard is done a join item is queued. A work item is acknowledged only after
 * its files are in place, so a worker killed mid-item leaves it pending, and another worker
 * takes it over once it has been quiet for `claim_idle_ms` (a worker touches its item while it
 * works, so a long shard is not taken from a live worker). Shard files are renamed into place,
 * so doing an item twice leaves one output (bulk/video.h).
 *
 * Threads: every function may be called from any thread; the redis store keeps one connection
 * per calling thread's handle (fc_vstore_clone), as fc_redis is one-thread-at-a-time. Nothing
 * here blocks the server's main loop except the local store's brief lock; the server calls the
 * redis store from its worker threads.
 *
 * Errors: negative FC_E* codes with a detail (fc_error_detail). FC_EIO when Redis cannot be
 * reached (the caller answers 503 and keeps running; the next call reconnects). */
#ifndef FC_JOBS_VSTORE_H
#define FC_JOBS_VSTORE_H

#include <stdint.h>

enum { FC_VJOB_PENDING, FC_VJOB_PROCESSING, FC_VJOB_COMPLETED, FC_VJOB_FAILED,
       FC_VJOB_CANCELED };

/* One job as read from the store: a copy, the caller's (fc_vjob_clear frees its strings). */
typedef struct fc_vjob {
  char id[40];          /* "vid_" + 24 hex digits */
  char owner[64];       /* the API key's name; "" without keys */
  char request_id[96];  /* X-Request-ID of the submitting request */
  int status;
  int progress;         /* 0..100: frames rendered of the frames planned */
  char error[512];      /* failed/canceled: why */
  int shards, shards_done;
  int64_t created_ms, started_ms, finished_ms; /* wall clock, ms since the epoch; 0: not yet */
  int64_t expires_ms;   /* finished jobs (and their files) are removed after this */
  double seconds;       /* completed: the video's length */
  int64_t frames;       /* completed: its frames */
  char *spec_json;      /* bulk/video.h fc_video_spec_json */
  char *plan_json;      /* bulk/video.h fc_video_plan_json */
  char *webhook_json;   /* the callback's delivery attempts as a JSON array ("[]" or NULL) */
} fc_vjob;

void fc_vjob_clear(fc_vjob *j);
const char *fc_vjob_status_name(int status); /* "pending", "processing", ... */
/* Whether id has a job id's shape ("vid_" + 24 lowercase hex digits); a fresh random one. */
int fc_vjob_id_valid(const char *id);
void fc_vjob_new_id(char id[40]);

/* A work item taken from the queue. */
typedef struct fc_vwork {
  char job[40];
  int shard;       /* 0..shards-1, or -1: the join */
  char entry[48];  /* the queue's id of the item (a stream entry id for redis) */
  int attempt;     /* 1 the first time the item is taken, more after a take-over */
} fc_vwork;

typedef struct fc_vstore fc_vstore;

typedef struct fc_vstore_params {
  const char *redis_url;   /* NULL: the local store */
  const char *prefix;      /* key prefix in Redis (NULL: "facecast:") */
  const char *consumer;    /* this process's consumer name (NULL: host-pid) */
  int claim_idle_ms;       /* take over an item idle this long (0: 15000) */
  int retention_s;         /* keep finished jobs this long (0: 86400) */
  int max_jobs;            /* local: unfinished jobs kept at most (0: 1000); beyond: FC_EBUSY */
} fc_vstore_params;

fc_vstore *fc_vstore_create(const fc_vstore_params *p, int *err);
/* Another handle on the same store for another thread (redis: its own connection; local: the
 * same table). Destroy each. */
fc_vstore *fc_vstore_clone(fc_vstore *s, int *err);
void fc_vstore_destroy(fc_vstore *s);

/* --- the API's side --- */

/* Stores a new job j (status pending, j->shards from its plan) and queues its shards. j->id:
 * the caller's (fc_vjob_new_id: its uploads are in place under it already) or "" for a new one,
 * written back; created_ms 0: now. At most max_jobs unfinished jobs: FC_EBUSY. With an
 * idempotency key: the same key (for the same owner) and the same body_sha256 → FC_EEXIST and
 * the earlier job's id in existing_id (nothing stored); a different body → FC_EINVAL with
 * detail "Idempotency-Key ... was used with a different body" (the API answers 409). */
int fc_vstore_submit(fc_vstore *s, fc_vjob *j, const char *idem_key, const char *body_sha256,
                     char existing_id[40]);
/* The job id: 0 and *out, or FC_ENOTFOUND. */
int fc_vstore_get(fc_vstore *s, const char *id, fc_vjob *out);
/* owner's jobs (NULL: everyone's), newest first, after the job `after` (NULL: from the newest):
 * up to *n into out[], *n set to the count; *more 1 when there are more. */
int fc_vstore_list(fc_vstore *s, const char *owner, const char *after, fc_vjob *out, int *n,
                   int *more);
/* Pending/processing: canceled (its work is dropped as workers meet it); finished: removed
 * with its files (removed_files is called with each job's output folder). */
int fc_vstore_delete(fc_vstore *s, const char *id);
/* Removes finished jobs whose expires_ms has passed; calls drop(user, id) for each (to remove
 * its files). Returns how many. */
int fc_vstore_expire(fc_vstore *s, int64_t now_ms, void (*drop)(void *user, const char *id),
                     void *user);
/* Unfinished jobs and queued work items (for /metrics). */
int fc_vstore_depth(fc_vstore *s, int *jobs_pending, int *items_queued);

/* --- the workers' side --- */

/* The next work item: waits up to timeout_ms (taking over items idle past claim_idle_ms first).
 * 0 and *w, or FC_EAGAIN when nothing came. A canceled job's items are acknowledged here and
 * never returned. */
int fc_vstore_take(fc_vstore *s, int timeout_ms, fc_vwork *w);
/* Still working on w (call every few seconds): keeps it from being taken over. FC_ECANCELED
 * when its job is no longer wanted (canceled, failed by another item, removed): stop. */
int fc_vstore_touch(fc_vstore *s, const fc_vwork *w);
/* The job's state moves on: processing (first item taken; started_ms), progress. */
int fc_vstore_progress(fc_vstore *s, const char *job, int shard, int64_t frames_done,
                       int64_t frames_total);
/* Shard w is rendered (its files in place): acknowledges it; when it was the last one, queues
 * the join (once, however many workers finish shards at the same moment). */
int fc_vstore_shard_done(fc_vstore *s, const fc_vwork *w);
/* The join w is done: the job completes (frames, seconds), w is acknowledged. shard_done and
 * complete on a job no longer processing acknowledge w and return FC_ECANCELED. */
int fc_vstore_complete(fc_vstore *s, const fc_vwork *w, int64_t frames, double seconds);
/* w failed for good: the job fails with error, w is acknowledged. */
int fc_vstore_fail(fc_vstore *s, const fc_vwork *w, const char *error);
/* The callback's delivery attempts (a JSON array) replace the job's. */
int fc_vstore_set_webhook(fc_vstore *s, const char *job, const char *attempts_json);

#endif
