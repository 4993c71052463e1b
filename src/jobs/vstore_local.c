/* The local video job store (vstore.h without --redis): jobs in a table, work items in a queue,
 * both in this process's memory behind one lock, shared by every handle (fc_vstore_clone).
 *
 * It keeps the redis store's semantics so that the runner, the API and tests/test_vstore.c see
 * one behaviour: an item taken is "in flight" until acknowledged (shard_done, complete, fail),
 * and one quiet for claim_idle_ms goes back to the queue's head with its attempt counted (here
 * that only happens to a runner stuck in a shard, which touch keeps from happening to a live
 * one); the join is queued once, when the last distinct shard is reported; a canceled job's
 * items are dropped as take meets them; idempotency keys are per owner and remember the body's
 * hash; finished jobs are kept until their expiry, then removed with their keys.
 *
 * Why not a GThreadPool: items must outlive a take (the acknowledgement is separate), and
 * take waits with a timeout so a runner can notice it is being stopped. Lists walk the jobs in
 * submission order (a queue with the newest at the tail): tables of thousands, not millions —
 * retention bounds them, and max_jobs bounds the unfinished ones. */
#include "jobs/vstore_internal.h"

#include "facecast/error.h"

#include <glib.h>
#include <stdio.h>
#include <string.h>

typedef struct ljob {
  fc_vjob j;             /* its strings are owned here */
  uint64_t seq;          /* submission order: lists are newest first */
  char *idem;            /* its key in shared.idem (owner "\n" key), or NULL */
  char body_sha[72];
  unsigned char *done;   /* shards reported done (one byte each) */
  double *frac;          /* each shard's progress, 0..1 */
  int join_queued;
  GList *link;           /* its place in shared.order */
} ljob;

typedef struct litem {
  fc_vwork w;
  int64_t touched_ms;    /* in flight: when last taken or touched */
} litem;

typedef struct shared {
  gint refs;
  GMutex lock;
  GCond more;            /* an item was queued */
  GHashTable *jobs;      /* id → ljob* */
  GQueue order;          /* ljob*, oldest first */
  GHashTable *idem;      /* owner "\n" key → ljob* */
  GQueue queue;          /* litem* waiting */
  GHashTable *flight;    /* entry → litem* taken, not yet acknowledged */
  uint64_t next_seq, next_entry;
  int unfinished;
  int claim_idle_ms, retention_s, max_jobs;
} shared;

typedef struct local {
  fc_vstore base; /* first */
  shared *sh;
} local;

static const fc_vstore_ops local_ops;

static int64_t now_ms(void) { return g_get_real_time() / 1000; }

static void free_ljob(gpointer p) {
  ljob *l = p;
  fc_vjob_clear(&l->j);
  g_free(l->idem), g_free(l->done), g_free(l->frac);
  g_free(l);
}

static int active(const ljob *l) {
  return l->j.status == FC_VJOB_PENDING || l->j.status == FC_VJOB_PROCESSING;
}

static void copy_job(const ljob *l, fc_vjob *out) {
  *out = l->j;
  out->spec_json = g_strdup(l->j.spec_json);
  out->plan_json = g_strdup(l->j.plan_json);
  out->webhook_json = g_strdup(l->j.webhook_json);
}

/* Lock held: a new item for job at the queue's tail (or head). */
static void queue_item(shared *sh, const char *job, int shard, int head) {
  litem *it = g_new0(litem, 1);
  g_strlcpy(it->w.job, job, sizeof it->w.job);
  it->w.shard = shard;
  snprintf(it->w.entry, sizeof it->w.entry, "%llu-0", (unsigned long long)++sh->next_entry);
  if (head) g_queue_push_head(&sh->queue, it);
  else g_queue_push_tail(&sh->queue, it);
  g_cond_broadcast(&sh->more);
}

/* Lock held: the job leaves a live state (finished, failed, canceled). */
static void finish(shared *sh, ljob *l, int status, const char *error) {
  if (active(l)) sh->unfinished--;
  l->j.status = status;
  if (error) g_strlcpy(l->j.error, error, sizeof l->j.error);
  l->j.finished_ms = now_ms();
  l->j.expires_ms = l->j.finished_ms + (int64_t)sh->retention_s * 1000;
}

/* Lock held: removes the job, its key and its queued items (items in flight are dropped when
 * acknowledged: their job is gone). */
static void remove_job(shared *sh, ljob *l) {
  for (GList *q = sh->queue.head; q;) {
    GList *next = q->next;
    litem *it = q->data;
    if (!strcmp(it->w.job, l->j.id)) {
      g_queue_delete_link(&sh->queue, q);
      g_free(it);
    }
    q = next;
  }
  if (l->idem) g_hash_table_remove(sh->idem, l->idem);
  if (active(l)) sh->unfinished--;
  g_queue_delete_link(&sh->order, l->link);
  g_hash_table_remove(sh->jobs, l->j.id); /* frees l */
}

/* Lock held: acknowledges an item in flight (gone already: nothing to do). */
static void ack(shared *sh, const fc_vwork *w) { g_hash_table_remove(sh->flight, w->entry); }

fc_vstore *fc_vstore_local_create(const fc_vstore_params *p, int *err) {
  shared *sh = g_new0(shared, 1);
  sh->refs = 1;
  g_mutex_init(&sh->lock);
  g_cond_init(&sh->more);
  sh->jobs = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, free_ljob);
  sh->idem = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, NULL); /* keys: ljob.idem */
  sh->flight = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free); /* keys: item's */
  g_queue_init(&sh->order);
  g_queue_init(&sh->queue);
  sh->claim_idle_ms = p->claim_idle_ms > 0 ? p->claim_idle_ms : 15000;
  sh->retention_s = p->retention_s > 0 ? p->retention_s : 86400;
  sh->max_jobs = p->max_jobs > 0 ? p->max_jobs : 1000;
  local *l = g_new0(local, 1);
  l->base.ops = &local_ops;
  l->sh = sh;
  *err = FC_OK;
  return &l->base;
}

static fc_vstore *l_clone(fc_vstore *s, int *err) {
  local *o = (local *)s, *l = g_new0(local, 1);
  l->base.ops = &local_ops;
  l->sh = o->sh;
  g_atomic_int_inc(&o->sh->refs);
  *err = FC_OK;
  return &l->base;
}

static void l_destroy(fc_vstore *s) {
  local *l = (local *)s;
  shared *sh = l->sh;
  g_free(l);
  if (!g_atomic_int_dec_and_test(&sh->refs)) return;
  g_queue_clear_full(&sh->queue, g_free);
  g_queue_clear(&sh->order);
  g_hash_table_destroy(sh->flight);
  g_hash_table_destroy(sh->idem);
  g_hash_table_destroy(sh->jobs);
  g_cond_clear(&sh->more);
  g_mutex_clear(&sh->lock);
  g_free(sh);
}

static int l_submit(fc_vstore *s, fc_vjob *j, const char *idem_key, const char *body_sha256,
                    char existing_id[40]) {
  shared *sh = ((local *)s)->sh;
  int err = FC_OK;
  char *key = idem_key ? g_strdup_printf("%s\n%s", j->owner, idem_key) : NULL;
  g_mutex_lock(&sh->lock);
  ljob *same = key ? g_hash_table_lookup(sh->idem, key) : NULL;
  if (same) {
    if (strcmp(same->body_sha, body_sha256) == 0) {
      g_strlcpy(existing_id, same->j.id, 40);
      err = FC_EEXIST;
    } else {
      err = fc_error_set(FC_EINVAL, "Idempotency-Key '%.64s' was used with a different body "
                                    "(job %s)", idem_key, same->j.id);
    }
    goto out;
  }
  if (sh->unfinished >= sh->max_jobs) {
    err = fc_error_set(FC_EBUSY, "%d video jobs are waiting or rendering; try again later",
                       sh->unfinished);
    goto out;
  }
  if (!j->id[0]) {
    do fc_vjob_new_id(j->id);
    while (g_hash_table_contains(sh->jobs, j->id));
  } else if (g_hash_table_contains(sh->jobs, j->id)) {
    err = fc_error_set(FC_EINVAL, "video job %s exists already", j->id);
    goto out;
  }
  ljob *l = g_new0(ljob, 1);
  l->j = *j;
  l->j.status = FC_VJOB_PENDING;
  l->j.progress = 0, l->j.shards_done = 0;
  l->j.error[0] = 0;
  l->j.started_ms = l->j.finished_ms = l->j.expires_ms = 0;
  if (!l->j.created_ms) l->j.created_ms = now_ms();
  j->created_ms = l->j.created_ms;
  l->j.spec_json = g_strdup(j->spec_json);
  l->j.plan_json = g_strdup(j->plan_json);
  l->j.webhook_json = g_strdup(j->webhook_json ? j->webhook_json : "[]");
  l->seq = ++sh->next_seq;
  l->done = g_new0(unsigned char, j->shards);
  l->frac = g_new0(double, j->shards);
  if (key) {
    l->idem = key, key = NULL;
    g_strlcpy(l->body_sha, body_sha256, sizeof l->body_sha);
    g_hash_table_insert(sh->idem, l->idem, l);
  }
  g_hash_table_insert(sh->jobs, l->j.id, l);
  l->link = (g_queue_push_tail(&sh->order, l), sh->order.tail);
  sh->unfinished++;
  for (int k = 0; k < j->shards; k++) queue_item(sh, l->j.id, k, 0);
  j->status = FC_VJOB_PENDING;
out:
  g_mutex_unlock(&sh->lock);
  g_free(key);
  return err;
}

static int l_get(fc_vstore *s, const char *id, fc_vjob *out) {
  shared *sh = ((local *)s)->sh;
  g_mutex_lock(&sh->lock);
  ljob *l = g_hash_table_lookup(sh->jobs, id);
  if (l) copy_job(l, out);
  g_mutex_unlock(&sh->lock);
  return l ? FC_OK : fc_error_set(FC_ENOTFOUND, "no video job %s", id);
}

static int l_list(fc_vstore *s, const char *owner, const char *after, fc_vjob *out, int *n,
                  int *more) {
  shared *sh = ((local *)s)->sh;
  int err = FC_OK, got = 0;
  g_mutex_lock(&sh->lock);
  GList *from = sh->order.tail;
  if (after) {
    ljob *a = g_hash_table_lookup(sh->jobs, after);
    if (!a || (owner && strcmp(a->j.owner, owner))) {
      err = fc_error_set(FC_ENOTFOUND, "no video job %s to list after", after);
      goto out;
    }
    from = a->link->prev;
  }
  for (GList *q = from; q; q = q->prev) {
    ljob *l = q->data;
    if (owner && strcmp(l->j.owner, owner)) continue;
    if (got == *n) {
      *more = 1;
      break;
    }
    copy_job(l, &out[got++]);
  }
out:
  g_mutex_unlock(&sh->lock);
  *n = got;
  return err;
}

static int l_del(fc_vstore *s, const char *id) {
  shared *sh = ((local *)s)->sh;
  g_mutex_lock(&sh->lock);
  ljob *l = g_hash_table_lookup(sh->jobs, id);
  if (l && active(l)) finish(sh, l, FC_VJOB_CANCELED, "canceled by the client");
  else if (l) remove_job(sh, l);
  g_mutex_unlock(&sh->lock);
  return l ? FC_OK : fc_error_set(FC_ENOTFOUND, "no video job %s", id);
}

static int l_expire(fc_vstore *s, int64_t now, void (*drop)(void *user, const char *id),
                    void *user) {
  shared *sh = ((local *)s)->sh;
  GPtrArray *gone = g_ptr_array_new_with_free_func(g_free);
  g_mutex_lock(&sh->lock);
  for (GList *q = sh->order.head; q;) {
    GList *next = q->next;
    ljob *l = q->data;
    if (!active(l) && l->j.expires_ms && l->j.expires_ms <= now) {
      g_ptr_array_add(gone, g_strdup(l->j.id));
      remove_job(sh, l);
    }
    q = next;
  }
  g_mutex_unlock(&sh->lock);
  /* files are removed outside the lock: a folder of shards takes a while */
  for (guint i = 0; drop && i < gone->len; i++) drop(user, gone->pdata[i]);
  int n = (int)gone->len;
  g_ptr_array_free(gone, TRUE);
  return n;
}

static int l_depth(fc_vstore *s, int *jobs_pending, int *items_queued) {
  shared *sh = ((local *)s)->sh;
  g_mutex_lock(&sh->lock);
  *jobs_pending = sh->unfinished;
  *items_queued = (int)sh->queue.length;
  g_mutex_unlock(&sh->lock);
  return FC_OK;
}

/* Lock held: items in flight quiet past claim_idle_ms go back to the head of the queue. */
static void reclaim(shared *sh, int64_t now) {
  GHashTableIter it;
  gpointer v;
  g_hash_table_iter_init(&it, sh->flight);
  while (g_hash_table_iter_next(&it, NULL, &v)) {
    litem *i = v;
    if (now - i->touched_ms < sh->claim_idle_ms) continue;
    g_hash_table_iter_steal(&it);
    g_queue_push_head(&sh->queue, i);
  }
}

static int l_take(fc_vstore *s, int timeout_ms, fc_vwork *w) {
  shared *sh = ((local *)s)->sh;
  gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
  int err = FC_EAGAIN;
  g_mutex_lock(&sh->lock);
  for (;;) {
    int64_t now = now_ms();
    reclaim(sh, now);
    litem *it;
    while ((it = g_queue_pop_head(&sh->queue))) {
      ljob *l = g_hash_table_lookup(sh->jobs, it->w.job);
      if (!l || !active(l)) { /* canceled, failed or removed: dropped, never handed out */
        g_free(it);
        continue;
      }
      it->w.attempt++;
      it->touched_ms = now;
      g_hash_table_insert(sh->flight, it->w.entry, it);
      if (l->j.status == FC_VJOB_PENDING) {
        l->j.status = FC_VJOB_PROCESSING;
        l->j.started_ms = now;
      }
      *w = it->w;
      err = FC_OK;
      goto out;
    }
    if (!g_cond_wait_until(&sh->more, &sh->lock, deadline)) break;
  }
out:
  g_mutex_unlock(&sh->lock);
  return err;
}

/* Lock held: the item's job, if it is still wanted; FC_ECANCELED (and the item acknowledged
 * when ack_gone) otherwise. */
static int wanted(shared *sh, const fc_vwork *w, ljob **out, int ack_gone) {
  ljob *l = g_hash_table_lookup(sh->jobs, w->job);
  if (l && active(l)) {
    *out = l;
    return FC_OK;
  }
  if (ack_gone) ack(sh, w);
  return fc_error_set(FC_ECANCELED, "video job %s is %s", w->job,
                      l ? fc_vjob_status_name(l->j.status) : "gone");
}

static int l_touch(fc_vstore *s, const fc_vwork *w) {
  shared *sh = ((local *)s)->sh;
  ljob *l;
  g_mutex_lock(&sh->lock);
  int err = wanted(sh, w, &l, 0);
  litem *it = g_hash_table_lookup(sh->flight, w->entry);
  if (!err && it) it->touched_ms = now_ms();
  g_mutex_unlock(&sh->lock);
  return err;
}

static int l_progress(fc_vstore *s, const char *job, int shard, int64_t done, int64_t total) {
  shared *sh = ((local *)s)->sh;
  g_mutex_lock(&sh->lock);
  ljob *l = g_hash_table_lookup(sh->jobs, job);
  int err = FC_OK;
  if (!l) err = fc_error_set(FC_ENOTFOUND, "no video job %s", job);
  else if (shard < 0 || shard >= l->j.shards)
    err = fc_error_set(FC_EINVAL, "video job %s has no shard %d", job, shard);
  else if (active(l)) {
    if (l->j.status == FC_VJOB_PENDING) {
      l->j.status = FC_VJOB_PROCESSING;
      l->j.started_ms = now_ms();
    }
    l->frac[shard] = total > 0 ? (done >= total ? 1.0 : (double)done / (double)total) : 0;
    double sum = 0;
    for (int k = 0; k < l->j.shards; k++) sum += l->done[k] ? 1.0 : l->frac[k];
    /* 100 is for the joined file: rendering every shard is 99 */
    int pct = (int)(99.0 * sum / l->j.shards);
    if (pct > l->j.progress) l->j.progress = pct;
  }
  g_mutex_unlock(&sh->lock);
  return err;
}

static int l_shard_done(fc_vstore *s, const fc_vwork *w) {
  shared *sh = ((local *)s)->sh;
  ljob *l;
  g_mutex_lock(&sh->lock);
  int err = wanted(sh, w, &l, 1);
  if (!err && w->shard >= l->j.shards)
    err = fc_error_set(FC_EINVAL, "video job %s has no shard %d", w->job, w->shard);
  if (!err) {
    ack(sh, w);
    if (!l->done[w->shard]) { /* a shard done twice (taken over) counts once */
      l->done[w->shard] = 1;
      l->j.shards_done++;
      l->j.progress = l->j.progress > 99 * l->j.shards_done / l->j.shards
                          ? l->j.progress : 99 * l->j.shards_done / l->j.shards;
    }
    if (l->j.shards_done == l->j.shards && !l->join_queued) {
      l->join_queued = 1;
      queue_item(sh, l->j.id, -1, 1); /* the job is nearly done: ahead of new jobs' shards */
    }
  }
  g_mutex_unlock(&sh->lock);
  return err;
}

/* The last item of a job (the join, or one that failed it): the job ends with status. */
static int end_job(fc_vstore *s, const fc_vwork *w, int status, const char *error,
                   int64_t frames, double seconds) {
  shared *sh = ((local *)s)->sh;
  ljob *l;
  g_mutex_lock(&sh->lock);
  int err = wanted(sh, w, &l, 1);
  if (!err) {
    ack(sh, w);
    if (status == FC_VJOB_COMPLETED) {
      l->j.frames = frames;
      l->j.seconds = seconds;
      l->j.progress = 100;
    }
    finish(sh, l, status, error);
  }
  g_mutex_unlock(&sh->lock);
  return err;
}

static int l_complete(fc_vstore *s, const fc_vwork *w, int64_t frames, double seconds) {
  return end_job(s, w, FC_VJOB_COMPLETED, NULL, frames, seconds);
}

static int l_fail(fc_vstore *s, const fc_vwork *w, const char *error) {
  return end_job(s, w, FC_VJOB_FAILED, error, 0, 0);
}

static int l_set_webhook(fc_vstore *s, const char *job, const char *attempts_json) {
  shared *sh = ((local *)s)->sh;
  g_mutex_lock(&sh->lock);
  ljob *l = g_hash_table_lookup(sh->jobs, job);
  if (l) {
    g_free(l->j.webhook_json);
    l->j.webhook_json = g_strdup(attempts_json);
  }
  g_mutex_unlock(&sh->lock);
  return l ? FC_OK : fc_error_set(FC_ENOTFOUND, "no video job %s", job);
}

static const fc_vstore_ops local_ops = {
    .clone = l_clone, .destroy = l_destroy, .submit = l_submit, .get = l_get, .list = l_list,
    .del = l_del, .expire = l_expire, .depth = l_depth, .take = l_take, .touch = l_touch,
    .progress = l_progress, .shard_done = l_shard_done, .complete = l_complete, .fail = l_fail,
    .set_webhook = l_set_webhook};
