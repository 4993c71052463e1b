/* Background tasks over HTTP (see tasks.h): the table, its one job thread and its answers. */
#include "jobs/tasks.h"

#include "facecast/error.h"
#include "jobs/webhook.h"
#include "server/internal.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

struct fc_tasks {
  fc_server *srv;
  const fc_task_kind *kind;
  GMutex lock;
  GHashTable *jobs; /* id → fc_task* (the kind's struct) */
  GThreadPool *pool; /* one thread */
  fc_webhook *notifier; /* the server's (srv->webhook): POSTs to notify URLs (webhook.h) */
  unsigned seq;
};

static const char *const status_name[] = {"pending", "running", "completed", "failed", "canceled"};

const char *fc_task_status_name(int status) { return status_name[status]; }

/* Queues a notice of t's state now (lock held): signed, retried and logged in t's
 * notify_attempts by the webhook sender (LiveTalking's notifyurl posts once, unsigned). */
static void notify_locked(fc_tasks *ts, const fc_task *t) {
  if (!t->notify_url[0]) return;
  GString *o = g_string_new(NULL);
  ts->kind->json(t, o);
  char event[32];
  g_snprintf(event, sizeof event, "task.%s", fc_task_status_name(t->status));
  fc_webhook_send(ts->notifier, t->notify_url, event, o->str, t->notify_log);
  g_string_free(o, TRUE);
}


void fc_task_json_fields(const fc_task *t, GString *o) {
  g_string_append_printf(o, "\"task_id\":\"%s\",\"status\":\"%s\",\"progress\":%d", t->id,
                         status_name[t->status], fc_task_progress(t));
  const int failed = t->status == FC_TASK_FAILED || t->status == FC_TASK_CANCELED;
  char *q = fc_http_json_quote(failed ? t->error : "");
  if (failed) g_string_append_printf(o, ",\"error\":%s", q);
  /* LiveTalking's: error_msg always, times in seconds since the epoch, duration so far */
  gint64 end = t->end_real ? t->end_real : g_get_real_time();
  g_string_append_printf(o, ",\"error_msg\":%s,\"start_time\":%.3f,\"end_time\":", q,
                         (double)t->start_real / 1e6);
  if (t->end_real) g_string_append_printf(o, "%.3f", (double)t->end_real / 1e6);
  else g_string_append(o, "null");
  g_string_append_printf(o, ",\"duration\":%.3f,\"notify_url\":",
                         t->start_real ? (double)(end - t->start_real) / 1e6 : 0.0);
  g_free(q);
  if (t->notify_url[0]) {
    q = fc_http_json_quote(t->notify_url);
    g_string_append(o, q);
    g_free(q);
    g_string_append(o, ",\"notify_attempts\":");
    fc_webhook_log_json(t->notify_log, o);
  } else {
    g_string_append(o, "null");
  }
}

static void run_job(gpointer data, gpointer user) {
  fc_tasks *ts = user;
  fc_task *t = data;
  g_mutex_lock(&ts->lock);
  t->queued = 0;
  if (t->status != FC_TASK_PENDING) { /* cancelled while queued */
    g_mutex_unlock(&ts->lock);
    if (ts->kind->skipped) ts->kind->skipped(ts->srv, t);
    return;
  }
  t->status = FC_TASK_RUNNING;
  notify_locked(ts, t);
  g_mutex_unlock(&ts->lock);
  /* This thread only (Linux: per-thread nice): the jobs' CPU work yields to the live
   * sessions' frame production. */
  setpriority(PRIO_PROCESS, 0, 10);
  int err = fc_task_canceled(t)
                ? fc_error_set(FC_ECANCELED, "%s %s canceled", ts->kind->noun, t->id)
                : ts->kind->run(ts->srv, t);
  g_mutex_lock(&ts->lock);
  snprintf(t->error, sizeof t->error, "%s", err ? fc_error_detail(err) : "");
  t->status = !err                                          ? FC_TASK_COMPLETED
              : fc_task_canceled(t) || err == FC_ECANCELED ? FC_TASK_CANCELED
                                                            : FC_TASK_FAILED;
  if (!err) fc_task_set_progress(t, 100);
  t->end_real = g_get_real_time();
  notify_locked(ts, t);
  g_mutex_unlock(&ts->lock);
}

static void destroy(fc_tasks *ts, fc_task *t) {
  fc_webhook_log_unref(t->notify_log); /* the sender keeps its own reference while it sends */
  ts->kind->destroy(t);
}

/* Drops a finished job (lock held). */
static void forget(fc_tasks *ts, fc_task *t) {
  if (ts->kind->forget) ts->kind->forget(t);
  g_hash_table_steal(ts->jobs, t->id);
  destroy(ts, t);
}

/* Forgets the oldest finished job when the table is full (lock held); 0: all unfinished. */
static int make_room(fc_tasks *ts) {
  if ((int)g_hash_table_size(ts->jobs) < ts->kind->max) return 1;
  GHashTableIter it;
  gpointer v;
  fc_task *oldest = NULL;
  g_hash_table_iter_init(&it, ts->jobs);
  while (g_hash_table_iter_next(&it, NULL, &v)) {
    fc_task *t = v;
    if (t->status >= FC_TASK_COMPLETED && !t->queued && (!oldest || t->created < oldest->created))
      oldest = t;
  }
  if (!oldest) return 0;
  forget(ts, oldest);
  return 1;
}

fc_tasks *fc_tasks_new(fc_server *srv, const fc_task_kind *kind) {
  fc_tasks *ts = g_new0(fc_tasks, 1);
  ts->srv = srv;
  ts->kind = kind;
  g_mutex_init(&ts->lock);
  ts->jobs = g_hash_table_new(g_str_hash, g_str_equal); /* values freed by hand: kind->destroy */
  ts->pool = g_thread_pool_new(run_job, ts, 1, TRUE, NULL);
  ts->notifier = srv->webhook;
  return ts;
}

void fc_tasks_free(fc_tasks *ts) {
  if (!ts) return;
  GHashTableIter it;
  gpointer v;
  g_mutex_lock(&ts->lock); /* a running job stops at its next check; queued ones at once */
  g_hash_table_iter_init(&it, ts->jobs);
  while (g_hash_table_iter_next(&it, NULL, &v)) fc_task_cancel(v);
  g_mutex_unlock(&ts->lock);
  g_thread_pool_free(ts->pool, TRUE, TRUE);
  g_hash_table_iter_init(&it, ts->jobs);
  while (g_hash_table_iter_next(&it, NULL, &v)) destroy(ts, v);
  g_hash_table_destroy(ts->jobs);
  g_mutex_clear(&ts->lock);
  g_free(ts);
}

void fc_tasks_submit(fc_tasks *ts, SoupServerMessage *msg, fc_task *t, const char *id,
                     const char *prefix) {
  g_mutex_lock(&ts->lock);
  if (id) {
    snprintf(t->id, sizeof t->id, "%s", id);
  } else { /* the next number whose id no client has taken */
    /* The prefix is cut to leave the number its room: a cut number would make the same id
     * each time round, and this loop would never end (found by fuzzing, a 63-byte avatar id). */
    const int room = (int)sizeof t->id - 12; /* '-', 10 digits, NUL */
    do snprintf(t->id, sizeof t->id, "%.*s-%u", room, prefix, ++ts->seq);
    while (g_hash_table_contains(ts->jobs, t->id));
  }
  if (g_hash_table_contains(ts->jobs, t->id)) {
    g_mutex_unlock(&ts->lock);
    fc_http_error(msg, 409, "%s '%s' exists", ts->kind->noun, t->id); /* a valid id: short */
    ts->kind->destroy(t);
    return;
  }
  if (!make_room(ts)) {
    g_mutex_unlock(&ts->lock);
    fc_http_error(msg, 503, "too many %ss in progress (%d)", ts->kind->noun, ts->kind->max);
    ts->kind->destroy(t);
    return;
  }
  t->status = FC_TASK_PENDING, t->queued = 1, t->created = g_get_monotonic_time();
  t->start_real = g_get_real_time();
  const char *who = fc_http_owner(msg);
  g_strlcpy(t->owner, who ? who : "", sizeof t->owner);
  if (t->notify_url[0]) t->notify_log = fc_webhook_log_new();
  g_hash_table_insert(ts->jobs, t->id, t);
  g_thread_pool_push(ts->pool, t, NULL);
  notify_locked(ts, t);
  char *data = g_strdup_printf("{\"task_id\":\"%s\",\"status\":\"pending\"}", t->id);
  g_mutex_unlock(&ts->lock);
  fc_http_ok(msg, data);
  g_free(data);
}

void fc_tasks_answer(fc_tasks *ts, SoupServerMessage *msg, const char *id) {
  const char *method = soup_server_message_get_method(msg);
  if (strcmp(method, "GET") != 0 && strcmp(method, "DELETE") != 0) {
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow",
                                 "GET, DELETE");
    fc_http_error(msg, 405, "method %s not allowed here (use GET or DELETE)", method);
    return;
  }
  g_mutex_lock(&ts->lock);
  fc_task *t = g_hash_table_lookup(ts->jobs, id);
  if (!t || !fc_task_visible(ts, t, msg)) {
    g_mutex_unlock(&ts->lock);
    fc_http_error(msg, 404, "unknown %s", ts->kind->noun);
    return;
  }
  GString *o = g_string_new(NULL);
  if (strcmp(method, "DELETE") == 0) {
    if (t->status == FC_TASK_PENDING) {
      t->status = FC_TASK_CANCELED; /* the pool skips it */
      snprintf(t->error, sizeof t->error, "canceled before it started");
      t->end_real = g_get_real_time();
      notify_locked(ts, t);
    } else if (t->status == FC_TASK_RUNNING) {
      fc_task_cancel(t);
    } else if (!t->queued) {
      forget(ts, t);
      t = NULL;
    }
  }
  if (t) ts->kind->json(t, o);
  else g_string_append_printf(o, "{\"task_id\":\"%s\",\"status\":\"deleted\"}", id);
  g_mutex_unlock(&ts->lock);
  fc_http_ok(msg, o->str);
  g_string_free(o, TRUE);
}

static gint by_created_desc(gconstpointer a, gconstpointer b) {
  const fc_task *x = a, *y = b;
  return x->created > y->created ? -1 : x->created < y->created;
}

void fc_tasks_list(fc_tasks *ts, SoupServerMessage *msg) {
  if (!fc_http_require_method(msg, "GET")) return;
  GString *o = g_string_new("{\"tasks\":[");
  g_mutex_lock(&ts->lock);
  GList *all = g_list_sort(g_hash_table_get_values(ts->jobs), by_created_desc);
  int n = 0;
  for (GList *l = all; l; l = l->next) {
    if (!fc_task_visible(ts, l->data, msg)) continue;
    if (n++) g_string_append_c(o, ',');
    ts->kind->json(l->data, o);
  }
  g_list_free(all);
  g_mutex_unlock(&ts->lock);
  g_string_append(o, "]}");
  fc_http_ok(msg, o->str);
  g_string_free(o, TRUE);
}

void fc_tasks_lock(fc_tasks *ts) { g_mutex_lock(&ts->lock); }
void fc_tasks_unlock(fc_tasks *ts) { g_mutex_unlock(&ts->lock); }
fc_task *fc_tasks_find_locked(fc_tasks *ts, const char *id) {
  return g_hash_table_lookup(ts->jobs, id);
}
GList *fc_tasks_all_locked(fc_tasks *ts) { return g_hash_table_get_values(ts->jobs); }

int fc_task_visible(const fc_tasks *ts, const fc_task *t, SoupServerMessage *msg) {
  const char *who = fc_http_owner(msg);
  return !ts->srv->keys || (who && strcmp(who, t->owner) == 0); /* with keys: a key's own only */
}
