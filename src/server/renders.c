/* Bulk renders on a running server: offline MP4s made by the same lip-sync devices as the live
 * sessions, as the scheduler's bulk class — live frames go first; a bulk request that waited
 * 2 s takes the last seat of a batch full of live ones, so a render progresses on a device
 * the live sessions saturate and never delays them by more than that seat.
 *   POST   /api/render            JSON {text, voice?, avatar?, task_id?} → {task_id, status}
 *   GET    /api/render/{id}       → {task_id, status, progress, frames?, url?, error?}
 *   GET    /api/render/{id}/file  → the MP4 (when completed)
 *   DELETE /api/render/{id}       pending or running: cancelled; finished: forgotten (and the
 *                                 file removed)
 * status: pending → running → completed | failed | canceled.
 *
 * Jobs run one at a time on their own thread at nice 10 (the encoder, speech synthesis and
 * compositing are CPU work the live sessions need more). Each job is a bulk client of the
 * scheduler for its lifetime, placed like a session; its stream asks for 16 frames per
 * request. The file is written under the server's recording folder as render-ID.mp4 (the
 * MP4 writer renames it into place when complete). Task state is shared between that thread
 * and the main loop under one mutex, like the avatar tasks (avatars.c). */
#include "facecast/error.h"
#include "facecast/render.h"
#include "facecast/studio.h"
#include "facecast/tts.h"
#include "server/internal.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_RENDERS 64   /* kept in the table; the oldest finished ones are forgotten first */
#define MAX_TEXT 20000   /* characters of text per render */
#define BULK_BATCH 16    /* frames per scheduler request */

enum { R_PENDING, R_RUNNING, R_COMPLETED, R_FAILED, R_CANCELED };
static const char *const status_name[] = {"pending", "running", "completed", "failed", "canceled"};

typedef struct render {
  fc_server *srv;
  char id[64];
  char *text, *voice, *avatar; /* avatar NULL: the server's own */
  char *path;                  /* the MP4 once completed */
  int status, progress, queued;
  volatile int cancel;
  int64_t frames;
  char error[512];
  gint64 created;
  /* the running job's scheduler client (job thread only) */
  fc_sched_client *client;
  fc_sched_waiter wait;
} render;

typedef struct fc_render_tasks {
  GMutex lock;
  GHashTable *jobs; /* id → render* */
  GThreadPool *pool; /* one thread */
  unsigned seq;
} fc_render_tasks;

/* The table's destructor; the file stays (forget() removes it). */
static void free_render(gpointer p) {
  render *r = p;
  fc_sched_waiter_clear(&r->wait);
  g_free(r->text), g_free(r->voice), g_free(r->avatar), g_free(r->path);
  g_free(r);
}

/* Drops a finished job and its file (lock held). */
static void forget(fc_render_tasks *rt, render *r) {
  if (r->path) remove(r->path);
  g_hash_table_remove(rt->jobs, r->id);
}

static void bulk_done(void *user, fc_sched_req *req, int status) {
  fc_sched_waiter_done(&((render *)user)->wait, status);
  (void)req;
}

/* The stream's lip-sync hook: the frames as bulk requests (deadlines a second out, 40 ms
 * apart: bulk work is ordered among itself, after every live request). */
static int bulk_lipsync(void *user, const fc_lipsync_req *reqs, fc_patch *out,
                        const fc_frame_info *info, int n) {
  render *r = user;
  (void)info;
  if (r->cancel) return fc_error_set(FC_ECANCELED, "render %s canceled", r->id);
  return fc_sched_waiter_run(&r->wait, r->client, reqs, out, n,
                             fc_sched_now_ns() + 1000000000LL, 40000000);
}

/* Without a scheduler (benchmarks' solo mode) the backend is shared under the solo lock. */
static int solo_render_lipsync(void *user, const fc_lipsync_req *reqs, fc_patch *out,
                               const fc_frame_info *info, int n) {
  render *r = user;
  (void)info;
  if (r->cancel) return fc_error_set(FC_ECANCELED, "render %s canceled", r->id);
  g_mutex_lock(&r->srv->solo_lock);
  int err = fc_lipsync_run(r->srv->lipsync, reqs, out, n);
  g_mutex_unlock(&r->srv->solo_lock);
  return err;
}

static void on_progress(void *user, int64_t done, int64_t total) {
  render *r = user;
  r->progress = total > 0 ? (int)(done * 100 / total) : 0; /* an int store (see avatars.c) */
  r->frames = done;
}

/* Runs one job; returns 0 or an error with its detail. */
static int run_render(fc_server *srv, render *r) {
  fc_speech sp = {0};
  fc_avatar *av = NULL;
  fc_stream *st = NULL;
  int err;
  fc_tts_params tp = {.voice = r->voice};
  if ((err = fc_tts_speak(r->text, &tp, &sp))) goto done;
  if (r->avatar) {
    if (!(av = fc_server_avatar_get(srv, r->avatar, &err))) goto done;
  }
  const fc_avatar *use = av ? av : srv->avatar;
  fc_sched_client_params cp = {.cls = FC_SCHED_BULK, .done = bulk_done, .user = r};
  if (srv->sched && !(r->client = fc_sched_client_add(srv->sched, &cp, &err))) goto done;
  fc_stream_params spar = {.avatar = use, .lipsync = srv->lipsync,
                           .run = srv->sched ? bulk_lipsync : solo_render_lipsync, .run_user = r,
                           .batch = BULK_BATCH};
  if (!(st = fc_stream_create(&spar, &err))) goto done;
  if ((err = fc_stream_push_speech(st, sp.audio.samples, sp.audio.n, sp.ph, sp.n_ph, NULL)))
    goto done;
  fc_stream_end(st);
  fc_mp4_params mp = fc_mp4_params_default(fc_avatar_width(use), fc_avatar_height(use));
  err = fc_render_to_mp4(st, r->path, &mp, on_progress, r);
done:
  fc_stream_destroy(st);
  if (r->client) fc_sched_client_remove(r->client);
  r->client = NULL;
  if (av) fc_server_avatar_put(srv, av);
  fc_speech_free(&sp);
  return err;
}

static void run_task(gpointer data, gpointer user) {
  fc_server *srv = user;
  fc_render_tasks *rt = srv->render_tasks;
  render *r = data;
  g_mutex_lock(&rt->lock);
  r->queued = 0;
  if (r->status != R_PENDING) { /* cancelled while queued */
    g_mutex_unlock(&rt->lock);
    return;
  }
  r->status = R_RUNNING;
  g_mutex_unlock(&rt->lock);
  setpriority(PRIO_PROCESS, 0, 10); /* this thread only (Linux: per-thread nice) */
  int err = r->cancel ? fc_error_set(FC_ECANCELED, "render %s canceled", r->id) : run_render(srv, r);
  g_mutex_lock(&rt->lock);
  snprintf(r->error, sizeof r->error, "%s", err ? fc_error_detail(err) : "");
  r->status = !err ? R_COMPLETED : r->cancel || err == FC_ECANCELED ? R_CANCELED : R_FAILED;
  if (!err) r->progress = 100;
  g_mutex_unlock(&rt->lock);
}

/* The job as JSON (lock held). */
static void render_json(const render *r, GString *o) {
  g_string_append_printf(o, "{\"task_id\":\"%s\",\"status\":\"%s\",\"progress\":%d", r->id,
                         status_name[r->status], r->progress);
  if (r->status == R_COMPLETED)
    g_string_append_printf(o, ",\"frames\":%lld,\"url\":\"/api/render/%s/file\"",
                           (long long)r->frames, r->id);
  if (r->status == R_FAILED || r->status == R_CANCELED) {
    char *q = fc_http_json_quote(r->error);
    g_string_append_printf(o, ",\"error\":%s", q);
    g_free(q);
  }
  g_string_append(o, "}");
}

/* Forgets the oldest finished job when the table is full (lock held). */
static int make_room(fc_render_tasks *rt) {
  if (g_hash_table_size(rt->jobs) < MAX_RENDERS) return 1;
  GHashTableIter it;
  gpointer k, v;
  render *oldest = NULL;
  g_hash_table_iter_init(&it, rt->jobs);
  while (g_hash_table_iter_next(&it, &k, &v)) {
    render *r = v;
    if (r->status >= R_COMPLETED && !r->queued && (!oldest || r->created < oldest->created))
      oldest = r;
  }
  if (!oldest) return 0;
  forget(rt, oldest);
  return 1;
}

static void post_render(fc_server *srv, SoupServerMessage *msg) {
  fc_render_tasks *rt = srv->render_tasks;
  JsonParser *parser = NULL;
  JsonObject *o = fc_http_json_body(msg, &parser);
  if (!o) return;
  const char *names[] = {"text", "voice", "avatar", "task_id"};
  const char *v[4] = {0};
  for (int i = 0; i < 4; i++) {
    JsonNode *n = json_object_get_member(o, names[i]);
    if (!n || JSON_NODE_HOLDS_NULL(n)) continue;
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING) {
      fc_http_error(msg, 400, "'%s' must be a string", names[i]);
      goto out;
    }
    v[i] = json_node_get_string(n);
  }
  if (!v[0] || !*v[0]) {
    fc_http_error(msg, 400, "'text' is required (the words to speak)");
    goto out;
  }
  if (strlen(v[0]) > MAX_TEXT) {
    fc_http_error(msg, 413, "'text' is longer than %d characters", MAX_TEXT);
    goto out;
  }
  if (v[2] && !fc_avatar_id_valid(v[2])) {
    fc_http_error(msg, 400, "avatar '%s': use 1-63 letters, digits, '_' or '-'", v[2]);
    goto out;
  }
  char pack[4096];
  if (v[2] && (fc_avatar_pack_path(NULL, v[2], pack, sizeof pack) || access(pack, R_OK) != 0)) {
    fc_http_error(msg, 404, "no avatar '%s' on this server", v[2]);
    goto out;
  }
  if (v[3] && !fc_avatar_id_valid(v[3])) {
    fc_http_error(msg, 400, "task_id '%s': use 1-63 letters, digits, '_' or '-'", v[3]);
    goto out;
  }
  g_mutex_lock(&rt->lock);
  char id[64];
  if (v[3]) snprintf(id, sizeof id, "%s", v[3]);
  else snprintf(id, sizeof id, "render-%u", ++rt->seq);
  if (g_hash_table_lookup(rt->jobs, id)) {
    g_mutex_unlock(&rt->lock);
    fc_http_error(msg, 409, "render '%s' exists", id);
    goto out;
  }
  if (!make_room(rt)) {
    g_mutex_unlock(&rt->lock);
    fc_http_error(msg, 503, "too many renders in progress (%d)", MAX_RENDERS);
    goto out;
  }
  render *r = g_new0(render, 1);
  r->srv = srv;
  snprintf(r->id, sizeof r->id, "%s", id);
  r->text = g_strdup(v[0]), r->voice = g_strdup(v[1]), r->avatar = g_strdup(v[2]);
  char *name = g_strdup_printf("render-%s.mp4", id);
  r->path = g_build_filename(srv->record_dir, name, NULL);
  g_free(name);
  r->status = R_PENDING, r->queued = 1, r->created = g_get_monotonic_time();
  fc_sched_waiter_init(&r->wait);
  g_hash_table_insert(rt->jobs, r->id, r);
  g_thread_pool_push(rt->pool, r, NULL);
  char *data = g_strdup_printf("{\"task_id\":\"%s\",\"status\":\"pending\"}", r->id);
  g_mutex_unlock(&rt->lock);
  fc_http_ok(msg, data);
  g_free(data);
out:
  g_object_unref(parser);
}

static void h_render(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                     gpointer user) {
  fc_server *srv = user;
  fc_render_tasks *rt = srv->render_tasks;
  const char *method = soup_server_message_get_method(msg);
  const char *rest = strncmp(path, "/api/render/", 12) == 0 ? path + 12 : NULL;
  if (!rest || !*rest) {
    if (fc_http_require_method(msg, "POST")) post_render(srv, msg);
    return;
  }
  char id[64];
  const char *slash = strchr(rest, '/');
  size_t len = slash ? (size_t)(slash - rest) : strlen(rest);
  int file = slash && strcmp(slash, "/file") == 0;
  if (len >= sizeof id || (slash && !file)) {
    fc_http_error(msg, 404, "not found: %s", path);
    return;
  }
  memcpy(id, rest, len);
  id[len] = 0;
  if (strcmp(method, "GET") != 0 && (file || strcmp(method, "DELETE") != 0)) {
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow",
                                 file ? "GET" : "GET, DELETE");
    fc_http_error(msg, 405, "method %s not allowed here", method);
    return;
  }
  g_mutex_lock(&rt->lock);
  render *r = g_hash_table_lookup(rt->jobs, id);
  if (!r) {
    g_mutex_unlock(&rt->lock);
    fc_http_error(msg, 404, "unknown render '%s'", id);
    return;
  }
  if (file) {
    char *p = r->status == R_COMPLETED ? g_strdup(r->path) : NULL;
    int status = r->status;
    g_mutex_unlock(&rt->lock);
    if (p) fc_http_serve_file(msg, p, "video/mp4");
    else fc_http_error(msg, 409, "render '%s' is %s, not completed", id, status_name[status]);
    g_free(p);
    return;
  }
  GString *o = g_string_new(NULL);
  if (strcmp(method, "DELETE") == 0) {
    if (r->status == R_PENDING) {
      r->status = R_CANCELED; /* the pool skips it */
      snprintf(r->error, sizeof r->error, "canceled before it started");
    } else if (r->status == R_RUNNING) {
      r->cancel = 1; /* the job stops at its next lip-sync request */
    } else if (!r->queued) {
      forget(rt, r);
      r = NULL;
    }
  }
  if (r) render_json(r, o);
  else g_string_append_printf(o, "{\"task_id\":\"%s\",\"status\":\"deleted\"}", id);
  g_mutex_unlock(&rt->lock);
  fc_http_ok(msg, o->str);
  g_string_free(o, TRUE);
  (void)server, (void)q;
}

void fc_render_tasks_register(fc_server *srv) {
  fc_render_tasks *rt = g_new0(fc_render_tasks, 1);
  g_mutex_init(&rt->lock);
  rt->jobs = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, free_render);
  rt->pool = g_thread_pool_new(run_task, srv, 1, TRUE, NULL);
  srv->render_tasks = rt;
  soup_server_add_early_handler(srv->soup, "/api/render", fc_http_early, srv, NULL);
  soup_server_add_handler(srv->soup, "/api/render", h_render, srv, NULL);
}

void fc_render_tasks_free(fc_server *srv) {
  fc_render_tasks *rt = srv->render_tasks;
  if (!rt) return;
  g_mutex_lock(&rt->lock); /* a running job stops at its next request */
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init(&it, rt->jobs);
  while (g_hash_table_iter_next(&it, &k, &v)) ((render *)v)->cancel = 1;
  g_mutex_unlock(&rt->lock);
  g_thread_pool_free(rt->pool, TRUE, TRUE);
  if (srv->own_record_dir) { /* a temporary folder goes away: its renders with it */
    g_hash_table_iter_init(&it, rt->jobs);
    while (g_hash_table_iter_next(&it, &k, &v)) remove(((render *)v)->path);
  }
  g_hash_table_destroy(rt->jobs);
  g_mutex_clear(&rt->lock);
  g_free(rt);
  srv->render_tasks = NULL;
}
