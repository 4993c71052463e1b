/* The video job store's front (vstore.h): arguments checked once here, then the chosen
 * implementation's function (vstore_internal.h). Why a front at all: the API, the runner and
 * the worker command call one set of functions whatever the store is, and a bad argument (a
 * NULL, an id of the wrong shape from a URL) is refused the same way for both stores, before
 * it reaches a Redis key or a hash table. */
#include "jobs/vstore_internal.h"

#include "facecast/error.h"

#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

void fc_vjob_clear(fc_vjob *j) {
  if (!j) return;
  g_free(j->spec_json), g_free(j->plan_json), g_free(j->webhook_json);
  j->spec_json = j->plan_json = j->webhook_json = NULL;
}

const char *fc_vjob_status_name(int status) {
  switch (status) {
  case FC_VJOB_PENDING: return "pending";
  case FC_VJOB_PROCESSING: return "processing";
  case FC_VJOB_COMPLETED: return "completed";
  case FC_VJOB_FAILED: return "failed";
  case FC_VJOB_CANCELED: return "canceled";
  default: return "unknown";
  }
}

/* A job id as the stores make them: "vid_" and 24 lowercase hex digits. Anything else (from a
 * URL, a queue entry) names no job. */
static int id_ok(const char *id) {
  if (!id || strncmp(id, "vid_", 4) != 0 || strlen(id) != 28) return 0;
  for (int i = 4; i < 28; i++)
    if (!g_ascii_isxdigit(id[i]) || g_ascii_isupper(id[i])) return 0;
  return 1;
}

#define BAD_ID(id) fc_error_set(FC_ENOTFOUND, "no video job '%.40s'", (id) ? (id) : "(null)")

fc_vstore *fc_vstore_create(const fc_vstore_params *p, int *err) {
  fc_vstore_params d = {0};
  if (!p) p = &d;
  if (p->retention_s < 0 || p->claim_idle_ms < 0 || p->max_jobs < 0) {
    *err = fc_error_set(FC_EINVAL, "video store: negative retention, claim time or job cap");
    return NULL;
  }
  return p->redis_url ? fc_vstore_redis_create(p, err) : fc_vstore_local_create(p, err);
}

fc_vstore *fc_vstore_clone(fc_vstore *s, int *err) {
  if (!s) {
    *err = fc_error_set(FC_EINVAL, "video store: no store to clone");
    return NULL;
  }
  return s->ops->clone(s, err);
}

void fc_vstore_destroy(fc_vstore *s) {
  if (s) s->ops->destroy(s);
}

int fc_vstore_submit(fc_vstore *s, fc_vjob *j, const char *idem_key, const char *body_sha256,
                     char existing_id[40]) {
  if (!s || !j || !j->spec_json || !j->plan_json || j->shards < 1)
    return fc_error_set(FC_EINVAL, "video store: a job needs its spec, its plan and a shard");
  if (j->id[0] && !id_ok(j->id))
    return fc_error_set(FC_EINVAL, "video store: job id '%.40s' is not vid_ + 24 hex digits", j->id);
  if (idem_key && (!body_sha256 || !existing_id))
    return fc_error_set(FC_EINVAL, "video store: an idempotency key needs the body's hash");
  return s->ops->submit(s, j, idem_key, body_sha256, existing_id);
}

int fc_vstore_get(fc_vstore *s, const char *id, fc_vjob *out) {
  if (!s || !out) return fc_error_set(FC_EINVAL, "video store: get without a store or a job");
  if (!id_ok(id)) return BAD_ID(id);
  return s->ops->get(s, id, out);
}

int fc_vstore_list(fc_vstore *s, const char *owner, const char *after, fc_vjob *out, int *n,
                   int *more) {
  if (!s || !out || !n || *n < 0 || !more)
    return fc_error_set(FC_EINVAL, "video store: list without a store or room");
  if (after && !id_ok(after)) return BAD_ID(after);
  *more = 0;
  if (*n == 0) return FC_OK;
  return s->ops->list(s, owner, after, out, n, more);
}

int fc_vstore_delete(fc_vstore *s, const char *id) {
  if (!s) return fc_error_set(FC_EINVAL, "video store: no store");
  if (!id_ok(id)) return BAD_ID(id);
  return s->ops->del(s, id);
}

int fc_vstore_expire(fc_vstore *s, int64_t now_ms, void (*drop)(void *user, const char *id),
                     void *user) {
  if (!s) return fc_error_set(FC_EINVAL, "video store: no store");
  return s->ops->expire(s, now_ms, drop, user);
}

int fc_vstore_depth(fc_vstore *s, int *jobs_pending, int *items_queued) {
  if (!s || !jobs_pending || !items_queued) return fc_error_set(FC_EINVAL, "video store: no store");
  return s->ops->depth(s, jobs_pending, items_queued);
}

int fc_vstore_take(fc_vstore *s, int timeout_ms, fc_vwork *w) {
  if (!s || !w || timeout_ms < 0) return fc_error_set(FC_EINVAL, "video store: take without room");
  return s->ops->take(s, timeout_ms, w);
}

int fc_vstore_touch(fc_vstore *s, const fc_vwork *w) {
  if (!s || !w) return fc_error_set(FC_EINVAL, "video store: touch without an item");
  if (!id_ok(w->job)) return BAD_ID(w->job);
  return s->ops->touch(s, w);
}

int fc_vstore_progress(fc_vstore *s, const char *job, int shard, int64_t frames_done,
                       int64_t frames_total) {
  if (!s || frames_done < 0 || frames_total < 0)
    return fc_error_set(FC_EINVAL, "video store: progress without a store or with negative frames");
  if (!id_ok(job)) return BAD_ID(job);
  return s->ops->progress(s, job, shard, frames_done, frames_total);
}

int fc_vstore_shard_done(fc_vstore *s, const fc_vwork *w) {
  if (!s || !w || w->shard < 0)
    return fc_error_set(FC_EINVAL, "video store: shard_done needs a shard's item");
  if (!id_ok(w->job)) return BAD_ID(w->job);
  return s->ops->shard_done(s, w);
}

int fc_vstore_complete(fc_vstore *s, const fc_vwork *w, int64_t frames, double seconds) {
  if (!s || !w || w->shard != -1 || frames < 0 || seconds < 0)
    return fc_error_set(FC_EINVAL, "video store: complete needs the join's item");
  if (!id_ok(w->job)) return BAD_ID(w->job);
  return s->ops->complete(s, w, frames, seconds);
}

int fc_vstore_fail(fc_vstore *s, const fc_vwork *w, const char *error) {
  if (!s || !w) return fc_error_set(FC_EINVAL, "video store: fail without an item");
  if (!id_ok(w->job)) return BAD_ID(w->job);
  return s->ops->fail(s, w, error ? error : "failed");
}

int fc_vstore_set_webhook(fc_vstore *s, const char *job, const char *attempts_json) {
  if (!s || !attempts_json) return fc_error_set(FC_EINVAL, "video store: no attempts");
  if (!id_ok(job)) return BAD_ID(job);
  return s->ops->set_webhook(s, job, attempts_json);
}

int fc_vjob_id_valid(const char *id) { return id_ok(id); }

/* 96 bits from the kernel: without API keys an id is what lets a client reach its job. */
void fc_vjob_new_id(char id[40]) {
  uint32_t r[3];
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
    for (int i = 0; i < 3; i++) r[i] = g_random_int();
  snprintf(id, 40, "vid_%08x%08x%08x", r[0], r[1], r[2]);
}
