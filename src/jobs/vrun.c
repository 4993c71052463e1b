/* The video job runner (vrun.h): slots taking work items from a store, a keeper thread touching
 * them, and the callbacks.
 *
 * Why a keeper instead of touching from the render's progress callback: how often a shard
 * reports progress is bulk/video.h's business (speech synthesis of a long shard reports none),
 * and a store call in the middle of a render would put a network round trip (Redis) into it.
 * The slot only writes its item and progress under its own small lock; the keeper makes the
 * store calls. Why callbacks are followed here: the job's record (GET /v1/videos/{id}, which may
 * be served by another node) must show the delivery attempts, and the sender only keeps them
 * in memory; the keeper copies them into the store until the delivery is over, and counts
 * failures for /metrics. */
#include "jobs/vrun.h"

#include "facecast/error.h"
#include "jobs/webhook.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

const double fc_vrun_bounds_s[FC_VRUN_BUCKETS] = {0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800};

#define TOUCH_EVERY_MS 2000
#define KEEPER_TICK_MS 500
#define HOOK_FOLLOW_MAX_S 600 /* a delivery is followed this long at most (5 attempts ≪) */

typedef struct slot {
  struct fc_vrun *r;
  GThread *thread;
  fc_vstore *st;
  GMutex lock;          /* cur, has, done, total */
  fc_vwork cur;
  int has;
  int64_t done, total;  /* the shard's frames */
  int64_t reported;     /* the done the keeper last reported (lock) */
  gint64 touched_us;    /* the keeper's last touch (lock) */
  int cancel;           /* atomic: stop the render (job no longer wanted, or stopping) */
} slot;

typedef struct hook {
  char job[40];
  fc_webhook_log *log;
  char *last;           /* the attempts as last copied into the job */
  gint64 since_us;
} hook;

struct fc_vrun {
  fc_vrun_params p;
  char *shared, *secret;
  fc_webhook *webhook;
  int own_webhook;      /* made here (no sender given) */
  slot *slots;
  int n_slots;
  gint stop;
  GThread *keeper;
  fc_vstore *keeper_st;
  GMutex keeper_lock;   /* keeper_wake and hooks */
  GCond keeper_wake;
  GPtrArray *hooks;     /* hook*: deliveries being followed */
  GMutex stat_lock;
  fc_vrun_stats stats;
};

static void hist_add(fc_vrun_hist *h, double v) {
  int b = 0;
  while (b < FC_VRUN_BUCKETS && v > fc_vrun_bounds_s[b]) b++;
  h->n[b]++;
  h->count++;
  h->sum += v;
}

/* ---- files ------------------------------------------------------------------------------ */

static void rm_tree(const char *path, int depth) {
  GDir *d = depth < 4 ? g_dir_open(path, 0, NULL) : NULL;
  const char *name;
  while (d && (name = g_dir_read_name(d))) {
    char *p = g_build_filename(path, name, NULL);
    if (g_file_test(p, G_FILE_TEST_IS_DIR) && !g_file_test(p, G_FILE_TEST_IS_SYMLINK))
      rm_tree(p, depth + 1);
    else
      g_unlink(p);
    g_free(p);
  }
  if (d) g_dir_close(d);
  g_rmdir(path);
}

void fc_vrun_remove_job_files(const char *shared_dir, const char *id) {
  if (!shared_dir || !fc_vjob_id_valid(id)) return; /* never a path from elsewhere */
  char *dir = g_build_filename(shared_dir, id, NULL);
  rm_tree(dir, 0);
  g_free(dir);
}

/* ---- callbacks -------------------------------------------------------------------------- */

/* A JSON string literal (g_free). */
static char *jq(const char *s) {
  JsonNode *n = json_node_new(JSON_NODE_VALUE);
  json_node_set_string(n, s ? s : "");
  char *q = json_to_string(n, FALSE);
  json_node_unref(n);
  return q;
}

/* POSTs the job's end to its callback_url, and follows the delivery (keeper). */
static void callback(fc_vrun *r, const fc_video_spec *spec, const fc_vjob *j) {
  if (!spec || !spec->callback_url || !*spec->callback_url) return;
  GString *o = g_string_new(NULL);
  char *rid = jq(j->request_id), *e = jq(j->error);
  g_string_append_printf(o, "{\"event\":\"video.%s\",\"id\":\"%s\",\"status\":\"%s\","
                            "\"request_id\":%s",
                         fc_vjob_status_name(j->status), j->id, fc_vjob_status_name(j->status), rid);
  if (j->status == FC_VJOB_COMPLETED)
    g_string_append_printf(o, ",\"seconds\":%.3f,\"frames\":%lld,\"url\":\"/v1/videos/%s/file\"",
                           j->seconds, (long long)j->frames, j->id);
  else
    g_string_append_printf(o, ",\"error\":%s", e);
  g_string_append_c(o, '}');
  hook *h = g_new0(hook, 1);
  g_strlcpy(h->job, j->id, sizeof h->job);
  h->log = fc_webhook_log_new();
  h->since_us = g_get_monotonic_time();
  char event[32];
  snprintf(event, sizeof event, "video.%s", fc_vjob_status_name(j->status));
  fc_webhook_send_rid(r->webhook, spec->callback_url, event, o->str, h->log, j->request_id);
  g_mutex_lock(&r->keeper_lock);
  g_ptr_array_add(r->hooks, h);
  g_mutex_unlock(&r->keeper_lock);
  g_string_free(o, TRUE);
  g_free(rid), g_free(e);
}

/* Whether the attempts (webhook.h's log JSON) are a finished delivery: 1 delivered, -1 failed
 * for good, 0 still going. */
static int delivery_over(const char *json) {
  JsonParser *jp = json_parser_new();
  int over = 0;
  if (json_parser_load_from_data(jp, json, -1, NULL) && JSON_NODE_HOLDS_ARRAY(json_parser_get_root(jp))) {
    JsonArray *a = json_node_get_array(json_parser_get_root(jp));
    guint n = json_array_get_length(a);
    JsonObject *last = n ? json_array_get_object_element(a, n - 1) : NULL;
    int status = last && json_object_has_member(last, "status")
                     ? (int)json_object_get_int_member(last, "status") : 0;
    if (!last) over = 0;
    else if (status >= 200 && status < 300) over = 1;
    else if (!fc_webhook_retryable(status) || n >= FC_WEBHOOK_ATTEMPTS) over = -1;
  }
  g_object_unref(jp);
  return over;
}

/* Keeper, keeper_lock not held: copies changed attempts into their jobs; forgets deliveries
 * that are over. */
static void follow_hooks(fc_vrun *r) {
  g_mutex_lock(&r->keeper_lock);
  GPtrArray *now = g_ptr_array_new();
  for (guint i = 0; i < r->hooks->len; i++) g_ptr_array_add(now, r->hooks->pdata[i]);
  g_mutex_unlock(&r->keeper_lock);
  for (guint i = 0; i < now->len; i++) {
    hook *h = now->pdata[i];
    GString *o = g_string_new(NULL);
    fc_webhook_log_json(h->log, o);
    int over = delivery_over(o->str);
    if (!h->last || strcmp(h->last, o->str)) {
      fc_vstore_set_webhook(r->keeper_st, h->job, o->str); /* a job removed meanwhile: fine */
      g_free(h->last);
      h->last = g_strdup(o->str);
    }
    g_string_free(o, TRUE);
    if (!over && g_get_monotonic_time() - h->since_us < (gint64)HOOK_FOLLOW_MAX_S * G_USEC_PER_SEC)
      continue;
    if (over < 0) {
      g_mutex_lock(&r->stat_lock);
      r->stats.webhook_failures++;
      g_mutex_unlock(&r->stat_lock);
      g_warning("video %s: callback failed: %s", h->job, h->last);
    }
    g_mutex_lock(&r->keeper_lock);
    g_ptr_array_remove(r->hooks, h);
    g_mutex_unlock(&r->keeper_lock);
    fc_webhook_log_unref(h->log);
    g_free(h->last);
    g_free(h);
  }
  g_ptr_array_free(now, TRUE);
}

/* ---- the keeper ------------------------------------------------------------------------- */

static gpointer keeper_main(gpointer p) {
  fc_vrun *r = p;
  while (!g_atomic_int_get(&r->stop)) {
    gint64 now = g_get_monotonic_time();
    for (int i = 0; i < r->n_slots; i++) {
      slot *s = &r->slots[i];
      /* what to do decided under the slot's lock, the store calls made after it */
      g_mutex_lock(&s->lock);
      fc_vwork w = s->cur;
      int has = s->has;
      int64_t done = s->done, total = s->total;
      int report = has && w.shard >= 0 && total > 0 && done != s->reported;
      int touch = has && now - s->touched_us >= (gint64)TOUCH_EVERY_MS * 1000;
      if (report) s->reported = done;
      if (touch) s->touched_us = now;
      g_mutex_unlock(&s->lock);
      if (report) fc_vstore_progress(r->keeper_st, w.job, w.shard, done, total);
      if (touch && fc_vstore_touch(r->keeper_st, &w) == FC_ECANCELED) {
        g_atomic_int_set(&s->cancel, 1);
        g_message("video %s: no longer wanted; stopping its %s", w.job,
                  w.shard >= 0 ? "shard" : "join");
      }
    }
    follow_hooks(r);
    g_mutex_lock(&r->keeper_lock);
    if (!g_atomic_int_get(&r->stop))
      g_cond_wait_until(&r->keeper_wake, &r->keeper_lock,
                        g_get_monotonic_time() + KEEPER_TICK_MS * 1000);
    g_mutex_unlock(&r->keeper_lock);
  }
  return NULL;
}

/* ---- a slot ----------------------------------------------------------------------------- */

static void on_progress(void *user, int64_t done, int64_t total) {
  slot *s = user;
  g_mutex_lock(&s->lock);
  s->done = done, s->total = total;
  g_mutex_unlock(&s->lock);
}

static void set_item(slot *s, const fc_vwork *w) {
  g_mutex_lock(&s->lock);
  if (w) s->cur = *w;
  s->has = w != NULL;
  s->done = s->total = 0;
  s->reported = -1;
  s->touched_us = g_get_monotonic_time();
  g_mutex_unlock(&s->lock);
}

/* The job ended (completed or failed by this item): figures, log line, callback. */
static void job_ended(slot *s, const fc_video_spec *spec, const char *id) {
  fc_vrun *r = s->r;
  fc_vjob j = {0};
  if (fc_vstore_get(s->st, id, &j)) return; /* deleted meanwhile */
  double wait = j.started_ms ? (double)(j.started_ms - j.created_ms) / 1000 : 0;
  double took = j.started_ms ? (double)(j.finished_ms - j.started_ms) / 1000 : 0;
  g_mutex_lock(&r->stat_lock);
  if (j.status == FC_VJOB_COMPLETED) {
    r->stats.completed++;
    hist_add(&r->stats.wait_s, wait);
    hist_add(&r->stats.render_s, took);
    r->stats.video_seconds += j.seconds;
    if (took > 0) r->stats.x_realtime_last = j.seconds / took;
  } else {
    r->stats.failed++;
  }
  g_mutex_unlock(&r->stat_lock);
  if (j.status == FC_VJOB_COMPLETED)
    g_message("video %s (request %s): completed, %.1f s of video in %.1f s (%.1fx real time, "
              "%d shards, waited %.1f s)", j.id, j.request_id, j.seconds, took,
              took > 0 ? j.seconds / took : 0, j.shards, wait);
  else
    g_message("video %s (request %s): %s: %s", j.id, j.request_id, fc_vjob_status_name(j.status),
              j.error);
  callback(r, spec, &j);
  fc_vjob_clear(&j);
}

/* One work item, start to end; leaves it unacknowledged only when the runner is stopping. */
static void do_item(slot *s, const fc_vwork *w) {
  fc_vrun *r = s->r;
  fc_vjob j = {0};
  fc_video_spec *spec = NULL;
  fc_video_plan *plan = NULL;
  char *dir = NULL, *shards = NULL;
  int err;
  char why[600];
  if ((err = fc_vstore_get(s->st, w->job, &j))) {
    /* gone: the item is acknowledged; the store unreachable: left for a later take */
    if (err == FC_ENOTFOUND) fc_vstore_fail(s->st, w, "the job is gone");
    return;
  }
  if ((err = fc_video_spec_parse(j.spec_json, strlen(j.spec_json), &spec)) ||
      (err = fc_video_plan_parse(j.plan_json, strlen(j.plan_json), &plan))) {
    snprintf(why, sizeof why, "stored job unreadable: %s", fc_error_detail(err));
    goto failed;
  }
  dir = g_build_filename(r->shared, j.id, NULL);
  shards = g_build_filename(dir, "shards", NULL);
  if (g_mkdir_with_parents(shards, 0755) != 0) {
    err = FC_EIO;
    snprintf(why, sizeof why, "cannot make the job's folder %s/shards", j.id);
    goto failed;
  }
  g_atomic_int_set(&s->cancel, g_atomic_int_get(&r->stop)); /* stopping since the take: at once */
  set_item(s, w);
  gint64 t0 = g_get_monotonic_time();
  if (w->shard >= 0) {
    if (!fc_video_shard_done(plan, w->shard, shards)) /* taken over after its rename: done */
      err = fc_video_shard_render(spec, plan, w->shard, &r->p.env, shards, &s->cancel,
                                  on_progress, s);
    set_item(s, NULL);
    if (!err) {
      g_message("video %s (request %s): shard %d of %d rendered in %.1f s (attempt %d)", j.id,
                j.request_id, w->shard + 1, j.shards, (g_get_monotonic_time() - t0) / 1e6,
                w->attempt);
      fc_vstore_shard_done(s->st, w); /* FC_ECANCELED: the job ended meanwhile */
      goto out;
    }
    snprintf(why, sizeof why, "shard %d: %s", w->shard + 1, fc_error_detail(err));
  } else {
    char *mp4 = g_build_filename(dir, "video.mp4", NULL);
    char *srt = spec->script ? g_build_filename(dir, "captions.srt", NULL) : NULL;
    char *vtt = spec->script ? g_build_filename(dir, "captions.vtt", NULL) : NULL;
    fc_video_result res = {0};
    err = fc_video_join(spec, plan, shards, mp4, srt, vtt, &res);
    set_item(s, NULL);
    g_free(mp4), g_free(srt), g_free(vtt);
    if (!err) {
      if (fc_vstore_complete(s->st, w, res.frames, res.seconds) == 0) {
        fc_video_shards_remove(plan, shards);
        g_rmdir(shards);
        job_ended(s, spec, j.id);
      }
      goto out;
    }
    snprintf(why, sizeof why, "join: %s", fc_error_detail(err));
  }
failed:
  set_item(s, NULL);
  if (g_atomic_int_get(&r->stop)) goto out; /* stopped, not failed: the item stays pending */
  if (err == FC_ECANCELED && g_atomic_int_get(&s->cancel)) {
    fc_vstore_fail(s->st, w, "canceled"); /* acknowledges the item of a job already ended */
    goto out;
  }
  if (fc_vstore_fail(s->st, w, why) == 0) job_ended(s, spec, j.id);
out:
  fc_video_plan_free(plan);
  fc_video_spec_free(spec);
  g_free(dir), g_free(shards);
  fc_vjob_clear(&j);
}

static gpointer slot_main(gpointer p) {
  slot *s = p;
  fc_vrun *r = s->r;
  gint64 quiet_until = 0;
  while (!g_atomic_int_get(&r->stop)) {
    fc_vwork w;
    int err = fc_vstore_take(s->st, 500, &w);
    if (err == FC_EAGAIN) continue;
    if (err) { /* the store cannot be reached (Redis down): said once a minute, retried */
      if (g_get_monotonic_time() > quiet_until) {
        g_warning("video runner: %s", fc_error_detail(err));
        quiet_until = g_get_monotonic_time() + 60 * G_USEC_PER_SEC;
      }
      g_usleep(G_USEC_PER_SEC);
      continue;
    }
    g_mutex_lock(&r->stat_lock);
    r->stats.busy++;
    g_mutex_unlock(&r->stat_lock);
    do_item(s, &w);
    g_mutex_lock(&r->stat_lock);
    r->stats.busy--;
    g_mutex_unlock(&r->stat_lock);
  }
  return NULL;
}

/* ---- lifetime --------------------------------------------------------------------------- */

fc_vrun *fc_vrun_create(const fc_vrun_params *p, int *err) {
  if (!p || !p->store || !p->shared_dir || p->slots < 0) {
    *err = fc_error_set(FC_EINVAL, "video runner: needs a store, a folder and slots >= 0");
    return NULL;
  }
  if (g_mkdir_with_parents(p->shared_dir, 0755) != 0) {
    *err = fc_error_set(FC_EIO, "video runner: cannot make the folder %s", p->shared_dir);
    return NULL;
  }
  fc_vrun *r = g_new0(fc_vrun, 1);
  r->p = *p;
  r->shared = g_strdup(p->shared_dir);
  r->secret = g_strdup(p->webhook_secret);
  r->p.shared_dir = r->shared, r->p.webhook_secret = r->secret;
  r->p.env.shared_dir = r->shared;
  r->p.store = NULL;
  r->n_slots = p->slots ? p->slots : (int)g_get_num_processors();
  r->stats.slots = r->n_slots;
  g_mutex_init(&r->keeper_lock);
  g_cond_init(&r->keeper_wake);
  g_mutex_init(&r->stat_lock);
  r->hooks = g_ptr_array_new();
  r->own_webhook = !p->webhook;
  r->webhook = p->webhook ? p->webhook : fc_webhook_new(r->secret);
  r->slots = g_new0(slot, r->n_slots);
  if (!(r->keeper_st = fc_vstore_clone(p->store, err))) goto fail;
  for (int i = 0; i < r->n_slots; i++) {
    slot *s = &r->slots[i];
    s->r = r;
    g_mutex_init(&s->lock);
    if (!(s->st = fc_vstore_clone(p->store, err))) goto fail;
  }
  for (int i = 0; i < r->n_slots; i++) r->slots[i].thread = g_thread_new("video-slot", slot_main, &r->slots[i]);
  r->keeper = g_thread_new("video-keeper", keeper_main, r);
  *err = FC_OK;
  return r;
fail:
  fc_vrun_destroy(r);
  return NULL;
}

void fc_vrun_destroy(fc_vrun *r) {
  if (!r) return;
  g_atomic_int_set(&r->stop, 1);
  for (int i = 0; i < r->n_slots; i++) g_atomic_int_set(&r->slots[i].cancel, 1);
  g_mutex_lock(&r->keeper_lock);
  g_cond_broadcast(&r->keeper_wake);
  g_mutex_unlock(&r->keeper_lock);
  for (int i = 0; i < r->n_slots; i++)
    if (r->slots[i].thread) g_thread_join(r->slots[i].thread);
  if (r->keeper) g_thread_join(r->keeper);
  if (r->own_webhook) fc_webhook_free(r->webhook); /* a callback in flight gets its seconds */
  for (guint i = 0; i < r->hooks->len; i++) {
    hook *h = r->hooks->pdata[i];
    fc_webhook_log_unref(h->log);
    g_free(h->last);
    g_free(h);
  }
  g_ptr_array_free(r->hooks, TRUE);
  for (int i = 0; i < r->n_slots; i++) {
    fc_vstore_destroy(r->slots[i].st);
    g_mutex_clear(&r->slots[i].lock);
  }
  fc_vstore_destroy(r->keeper_st);
  g_free(r->slots);
  g_mutex_clear(&r->keeper_lock);
  g_cond_clear(&r->keeper_wake);
  g_mutex_clear(&r->stat_lock);
  g_free(r->shared), g_free(r->secret);
  g_free(r);
}

void fc_vrun_stats_get(fc_vrun *r, fc_vrun_stats *out) {
  g_mutex_lock(&r->stat_lock);
  *out = r->stats;
  g_mutex_unlock(&r->stat_lock);
  char (*jobs)[40] = g_malloc0(sizeof *jobs * (size_t)r->n_slots);
  out->busy_jobs = 0;
  for (int i = 0; i < r->n_slots; i++) {
    slot *s = &r->slots[i];
    g_mutex_lock(&s->lock);
    int seen = !s->has;
    for (int k = 0; !seen && k < out->busy_jobs; k++) seen = !strcmp(jobs[k], s->cur.job);
    if (!seen) g_strlcpy(jobs[out->busy_jobs++], s->cur.job, 40);
    g_mutex_unlock(&s->lock);
  }
  g_free(jobs);
}
