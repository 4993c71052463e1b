/* Private to the video job store (vstore.h): what an implementation provides. Each embeds
 * fc_vstore as its first member; vstore.c checks arguments and dispatches. */
#ifndef FC_JOBS_VSTORE_INTERNAL_H
#define FC_JOBS_VSTORE_INTERNAL_H

#include "jobs/vstore.h"

typedef struct fc_vstore_ops {
  fc_vstore *(*clone)(fc_vstore *s, int *err);
  void (*destroy)(fc_vstore *s);
  int (*submit)(fc_vstore *s, fc_vjob *j, const char *idem_key, const char *body_sha256,
                char existing_id[40]);
  int (*get)(fc_vstore *s, const char *id, fc_vjob *out);
  int (*list)(fc_vstore *s, const char *owner, const char *after, fc_vjob *out, int *n,
              int *more);
  int (*del)(fc_vstore *s, const char *id);
  int (*expire)(fc_vstore *s, int64_t now_ms, void (*drop)(void *user, const char *id),
                void *user);
  int (*depth)(fc_vstore *s, int *jobs_pending, int *items_queued);
  int (*take)(fc_vstore *s, int timeout_ms, fc_vwork *w);
  int (*touch)(fc_vstore *s, const fc_vwork *w);
  int (*progress)(fc_vstore *s, const char *job, int shard, int64_t done, int64_t total);
  int (*shard_done)(fc_vstore *s, const fc_vwork *w);
  int (*complete)(fc_vstore *s, const fc_vwork *w, int64_t frames, double seconds);
  int (*fail)(fc_vstore *s, const fc_vwork *w, const char *error);
  int (*set_webhook)(fc_vstore *s, const char *job, const char *attempts_json);
} fc_vstore_ops;

struct fc_vstore {
  const fc_vstore_ops *ops;
};

fc_vstore *fc_vstore_local_create(const fc_vstore_params *p, int *err);
fc_vstore *fc_vstore_redis_create(const fc_vstore_params *p, int *err);

/* The redis store's readers of what Redis answers (vstore_redis.c; fuzzed by
 * tests/fuzz/fuzz_resp.c): a job's HGETALL into *j (0; FC_ENOTFOUND for an empty hash;
 * FC_EFORMAT otherwise; fc_vjob_clear *j either way), and a stream entry [id, [field, value...]]
 * into *w (0, or 1 when it is no work item). */
struct fc_resp;
int fc_vstore_redis_read_job(const struct fc_resp *rep, fc_vjob *j);
int fc_vstore_redis_read_entry(const struct fc_resp *e, fc_vwork *w);

#endif
