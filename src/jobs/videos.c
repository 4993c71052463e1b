/* Bulk videos over HTTP (issue 17): the /v1/videos API over the job store (vstore.h), with
 * the runner (vrun.h) rendering what the store hands out.
 *   POST   /v1/videos                      JSON spec (bulk/video.h), or multipart with an
 *                                          `audio` file (and `background_image`), or audio_url
 *   GET    /v1/videos?limit=N&after=ID     newest first, has_more / next
 *   GET    /v1/videos/{id}                 status, progress, error, timing, webhook attempts
 *   GET    /v1/videos/{id}/file            the MP4 (single byte ranges: 206 / 416)
 *   GET    /v1/videos/{id}/captions.srt|vtt
 *   DELETE /v1/videos/{id}                 unfinished: canceled; finished: removed with files
 * Answers are facecast's envelope ({"code":0,"msg":"ok","data":...} / {"code":-1,"msg"}).
 *
 * Why every request goes to a thread of its own pool, paused meanwhile: the store may be Redis
 * (a network round trip), an upload is written to the shared folder, an audio_url is fetched,
 * an avatar pack is opened to check it; the main loop must never wait for any of that. What
 * is decided on the main loop, in memory: the request id, the rate limit, the route.
 *
 * Limits: a token bucket per API key (per client address without keys) for every /v1 request
 * (429 with Retry-After); with keys, a key's unfinished jobs are capped (429 too), counted
 * from the jobs this node submitted (their status read back from the store). Each key sees
 * only its own jobs: another key's id answers 404, as an unknown one does. */
#include "facecast/error.h"
#include "bulk/video.h"
#include "core/file.h"
#include "jobs/videos_internal.h"
#include "jobs/vrun.h"
#include "jobs/vstore.h"
#include "server/internal.h"
#include "speech/voice.h"

#include <glib/gstdio.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPIRE_EVERY_S 10 /* the retention sweep */
#define LIST_DEFAULT 20
#define LIST_MAX 100

/* ---- request ids ------------------------------------------------------------------------ */

int fc_videos_request_id_valid(const char *id) {
  size_t n = id ? strlen(id) : 0;
  if (n < 1 || n > FC_VIDEO_REQUEST_ID_MAX) return 0;
  return strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") == n;
}

/* The request's id: its valid X-Request-ID, else a new one; echoed on the answer. 0, or -1
 * when the header is there but malformed (answered 400, a new id echoed). */
static int request_id(SoupServerMessage *msg, char out[FC_VIDEO_REQUEST_ID_MAX + 1]) {
  const char *h = soup_message_headers_get_one(soup_server_message_get_request_headers(msg),
                                               "X-Request-ID");
  int ok = !h || fc_videos_request_id_valid(h);
  if (h && ok) {
    g_strlcpy(out, h, FC_VIDEO_REQUEST_ID_MAX + 1);
  } else {
    char *u = g_uuid_string_random();
    snprintf(out, FC_VIDEO_REQUEST_ID_MAX + 1, "req_%s", u);
    g_free(u);
  }
  soup_message_headers_replace(soup_server_message_get_response_headers(msg), "X-Request-ID", out);
  if (ok) return 0;
  fc_http_error(msg, 400, "X-Request-ID: expected 1-%d characters of A-Z a-z 0-9 . _ : -",
                FC_VIDEO_REQUEST_ID_MAX);
  return -1;
}

/* ---- answers ---------------------------------------------------------------------------- */

/* A request on its way through the pool, and what to answer. */
typedef struct vreq {
  fc_videos *v;
  SoupServerMessage *msg;  /* referenced, paused */
  enum { OP_CREATE, OP_LIST, OP_GET, OP_DELETE, OP_FILE } op;
  char id[40];
  char owner[64];          /* the API key's name, "" without keys */
  char rid[FC_VIDEO_REQUEST_ID_MAX + 1];
  const char *file_name;   /* OP_FILE: "video.mp4", "captions.srt", "captions.vtt" */
  int limit;
  char after[40];
  fc_video_post post;      /* OP_CREATE */
  fc_video_answer a;       /* the answer */
  char *file;              /* or a file to serve */
  const char *file_type;
} vreq;

static void vreq_free(gpointer p) {
  vreq *q = p;
  if (q->msg) g_object_unref(q->msg);
  fc_video_post_clear(&q->post);
  g_free(q->a.text), g_free(q->a.location), g_free(q->file);
  g_free(q);
}

static void answer_err(vreq *q, int status, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void answer_err(vreq *q, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  g_free(q->a.text);
  q->a.text = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  q->a.status = status;
}

static void answer_data(vreq *q, int status, char *data) {
  g_free(q->a.text);
  q->a.text = data;
  q->a.status = status;
}

/* The envelope with any status (fc_http_ok's is 200). */
static void envelope(SoupServerMessage *msg, int status, const char *data) {
  char *body = g_strdup_printf("{\"code\":0,\"msg\":\"ok\",\"data\":%s}", data ? data : "null");
  soup_server_message_set_status(msg, (guint)status, NULL);
  soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, body, strlen(body));
}

static gboolean deliver(gpointer p) {
  vreq *q = p;
  SoupMessageHeaders *h = soup_server_message_get_response_headers(q->msg);
  if (q->a.retry_after > 0) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", q->a.retry_after);
    soup_message_headers_replace(h, "Retry-After", ra);
  }
  if (q->a.location) soup_message_headers_replace(h, "Location", q->a.location);
  if (q->file) fc_http_serve_file(q->msg, q->file, q->file_type);
  else if (q->a.status >= 400) fc_http_error(q->msg, q->a.status, "%s", q->a.text ? q->a.text : "error");
  else envelope(q->msg, q->a.status, q->a.text);
  soup_server_message_unpause(q->msg);
  return G_SOURCE_REMOVE;
}

static void post_answer(vreq *q) {
  GSource *src = g_idle_source_new();
  g_source_set_callback(src, deliver, q, vreq_free);
  g_source_attach(src, q->v->srv->ctx);
  g_source_unref(src);
}

/* ---- jobs as JSON ----------------------------------------------------------------------- */

static void time_field(GString *o, const char *name, int64_t ms) {
  if (ms) g_string_append_printf(o, ",\"%s\":%.3f", name, ms / 1000.0);
  else g_string_append_printf(o, ",\"%s\":null", name);
}

/* The job as the API shows it (full: with its spec and webhook attempts). */
static void job_json(const fc_vjob *j, int full, GString *o) {
  char *rid = fc_http_json_quote(j->request_id);
  g_string_append_printf(o, "{\"id\":\"%s\",\"status\":\"%s\",\"progress\":%d,\"request_id\":%s",
                         j->id, fc_vjob_status_name(j->status), j->progress, rid);
  g_free(rid);
  if (j->status == FC_VJOB_FAILED || j->status == FC_VJOB_CANCELED) {
    char *e = fc_http_json_quote(j->error);
    g_string_append_printf(o, ",\"error\":%s", e);
    g_free(e);
  }
  time_field(o, "created_at", j->created_ms);
  time_field(o, "started_at", j->started_ms);
  time_field(o, "finished_at", j->finished_ms);
  time_field(o, "expires_at", j->expires_ms);
  double wait = j->started_ms ? (j->started_ms - j->created_ms) / 1000.0 : 0;
  double took = j->started_ms && j->finished_ms ? (j->finished_ms - j->started_ms) / 1000.0 : 0;
  g_string_append_printf(o, ",\"shards\":%d,\"shards_done\":%d,\"wait_seconds\":%.3f", j->shards,
                         j->shards_done, wait);
  if (j->status == FC_VJOB_COMPLETED) {
    g_string_append_printf(o, ",\"render_seconds\":%.3f,\"seconds\":%.3f,\"frames\":%lld,"
                              "\"x_realtime\":%.2f,\"url\":\"/v1/videos/%s/file\"",
                           took, j->seconds, (long long)j->frames, took > 0 ? j->seconds / took : 0,
                           j->id);
    if (j->spec_json && strstr(j->spec_json, "\"script\""))
      g_string_append_printf(o, ",\"captions\":{\"srt\":\"/v1/videos/%s/captions.srt\","
                                "\"vtt\":\"/v1/videos/%s/captions.vtt\"}", j->id, j->id);
  }
  if (full) {
    g_string_append_printf(o, ",\"spec\":%s", j->spec_json ? j->spec_json : "null");
    g_string_append_printf(o, ",\"webhook_attempts\":%s",
                           j->webhook_json && *j->webhook_json ? j->webhook_json : "[]");
  }
  g_string_append_c(o, '}');
}

/* ---- the pool's side -------------------------------------------------------------------- */

/* A store handle for one request (Redis connections are one-thread-at-a-time): an idle one,
 * or a new clone; given back with put_store. */
static fc_vstore *take_store(fc_videos *v) {
  g_mutex_lock(&v->lock);
  fc_vstore *st = v->handles->len ? g_ptr_array_steal_index_fast(v->handles, v->handles->len - 1)
                                  : NULL;
  g_mutex_unlock(&v->lock);
  int err;
  return st ? st : fc_vstore_clone(v->store, &err);
}

static void put_store(fc_videos *v, fc_vstore *st) {
  if (!st) return;
  g_mutex_lock(&v->lock);
  g_ptr_array_add(v->handles, st);
  g_mutex_unlock(&v->lock);
}

/* A store's error as an HTTP status: the store unreachable (Redis down or restarting) is 503,
 * try again, as POST answers it too; the rest as everywhere (fc_http_status_of). */
static int store_status(int err) { return err == FC_EIO ? 503 : fc_http_status_of(err); }

/* The job id names, if the request may see it (its key's, or any without keys). */
static int visible_job(vreq *q, fc_vstore *st, fc_vjob *j) {
  int err = fc_vstore_get(st, q->id, j);
  if (!err && q->v->srv->keys && strcmp(j->owner, q->owner)) {
    fc_vjob_clear(j);
    err = FC_ENOTFOUND;
  }
  if (err == FC_ENOTFOUND) answer_err(q, 404, "no video %s", q->id);
  else if (err) answer_err(q, store_status(err), "%s", fc_error_detail(err));
  return err;
}

static void op_get(vreq *q, fc_vstore *st) {
  fc_vjob j = {0};
  if (visible_job(q, st, &j)) return;
  GString *o = g_string_new(NULL);
  job_json(&j, 1, o);
  answer_data(q, 200, g_string_free(o, FALSE));
  fc_vjob_clear(&j);
}

static void op_list(vreq *q, fc_vstore *st) {
  fc_vjob *jobs = g_new0(fc_vjob, q->limit);
  int n = q->limit, more = 0;
  int err = fc_vstore_list(st, q->v->srv->keys ? q->owner : NULL, q->after[0] ? q->after : NULL,
                           jobs, &n, &more);
  if (err == FC_ENOTFOUND) answer_err(q, 400, "after: no video %s to list after", q->after);
  else if (err) answer_err(q, store_status(err), "%s", fc_error_detail(err));
  else {
    GString *o = g_string_new("{\"videos\":[");
    for (int i = 0; i < n; i++) {
      if (i) g_string_append_c(o, ',');
      job_json(&jobs[i], 0, o);
    }
    g_string_append_printf(o, "],\"has_more\":%s,\"next\":", more ? "true" : "false");
    if (more && n) g_string_append_printf(o, "\"%s\"}", jobs[n - 1].id);
    else g_string_append(o, "null}");
    answer_data(q, 200, g_string_free(o, FALSE));
  }
  for (int i = 0; i < n; i++) fc_vjob_clear(&jobs[i]);
  g_free(jobs);
}

static void op_delete(vreq *q, fc_vstore *st) {
  fc_vjob j = {0};
  if (visible_job(q, st, &j)) return;
  int finished = j.status != FC_VJOB_PENDING && j.status != FC_VJOB_PROCESSING;
  int err = fc_vstore_delete(st, q->id);
  if (err) {
    answer_err(q, store_status(err), "%s", fc_error_detail(err));
  } else if (finished) {
    fc_vrun_remove_job_files(q->v->shared, q->id);
    answer_data(q, 200, g_strdup_printf("{\"id\":\"%s\",\"deleted\":true}", q->id));
    g_message("video %s (request %s): removed by request %s", q->id, j.request_id, q->rid);
  } else {
    g_atomic_int_inc(&q->v->canceled);
    fc_vjob_clear(&j);
    if (!fc_vstore_get(st, q->id, &j)) {
      GString *o = g_string_new(NULL);
      job_json(&j, 0, o);
      answer_data(q, 200, g_string_free(o, FALSE));
    }
    g_message("video %s (request %s): canceled by request %s", q->id, j.request_id, q->rid);
  }
  fc_vjob_clear(&j);
}

static void op_file(vreq *q, fc_vstore *st) {
  fc_vjob j = {0};
  if (visible_job(q, st, &j)) return;
  if (j.status != FC_VJOB_COMPLETED) {
    answer_err(q, 409, "video %s is %s, not completed", q->id, fc_vjob_status_name(j.status));
  } else {
    char *path = g_build_filename(q->v->shared, q->id, q->file_name, NULL);
    if (g_file_test(path, G_FILE_TEST_IS_REGULAR)) {
      q->file = path;
      q->a.status = 200;
    } else {
      answer_err(q, 404, "video %s has no %s", q->id, q->file_name);
      g_free(path);
    }
  }
  fc_vjob_clear(&j);
}

static void pool_run(gpointer data, gpointer user) {
  vreq *q = data;
  fc_videos *v = user;
  fc_vstore *st = take_store(v);
  fc_error_clear();
  if (!st) answer_err(q, 503, "the video store cannot be reached");
  else if (q->op == OP_CREATE) fc_videos_create(v, st, &q->post, q->owner, q->rid, &q->a);
  else if (q->op == OP_GET) op_get(q, st);
  else if (q->op == OP_LIST) op_list(q, st);
  else if (q->op == OP_DELETE) op_delete(q, st);
  else op_file(q, st);
  put_store(v, st);
  post_answer(q);
}

/* ---- the main loop's side ---------------------------------------------------------------- */

/* Token bucket: rate_limit_per_min tokens a minute, as many at once. 0, or the seconds to
 * wait for the next token. */
static int bucket_take(fc_videos *v, const char *who) {
  if (v->rate_per_min <= 0) return 0;
  gint64 now = g_get_monotonic_time();
  fc_bucket *b = g_hash_table_lookup(v->buckets, who);
  if (!b) {
    if (g_hash_table_size(v->buckets) >= 100000) g_hash_table_remove_all(v->buckets); /* a flood of
                                                                   * addresses: start over */
    b = g_new0(fc_bucket, 1);
    b->tokens = v->rate_per_min;
    b->at = now;
    g_hash_table_insert(v->buckets, g_strdup(who), b);
  }
  double per_us = v->rate_per_min / 60e6;
  b->tokens += (double)(now - b->at) * per_us;
  if (b->tokens > v->rate_per_min) b->tokens = v->rate_per_min;
  b->at = now;
  if (b->tokens >= 1) {
    b->tokens -= 1;
    return 0;
  }
  int wait = (int)((1 - b->tokens) / per_us / 1e6) + 1;
  return wait < 1 ? 1 : wait;
}

static void h_videos(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *qs,
                     gpointer user) {
  fc_server *srv = user;
  fc_videos *v = srv->videos;
  char rid[FC_VIDEO_REQUEST_ID_MAX + 1];
  if (request_id(msg, rid)) return;
  if (!v || !v->pool) {
    fc_http_error(msg, 503, v && v->off ? "bulk videos are off on this server: no shared folder "
                                          "(--shared-dir)" : "the server is stopping");
    return;
  }
  const char *owner = fc_http_owner(msg);
  char who[128];
  if (owner) snprintf(who, sizeof who, "k:%s", owner);
  else snprintf(who, sizeof who, "a:%s", soup_server_message_get_remote_host(msg) ?: "?");
  /* Downloads of a finished job's files are not counted: a player fetches a video in many
   * byte ranges (seeking), and the files cost no rendering. The connection caps bound them. */
  const char *tail = g_str_has_prefix(path, "/v1/videos/") ? strchr(path + 11, '/') : NULL;
  int download = tail && (!strcmp(tail, "/file") || g_str_has_prefix(tail, "/captions."));
  int wait = download ? 0 : bucket_take(v, who);
  if (wait) {
    char ra[16];
    snprintf(ra, sizeof ra, "%d", wait);
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Retry-After", ra);
    fc_http_error(msg, 429, "rate limit: %d requests a minute; retry in %d s", v->rate_per_min, wait);
    return;
  }
  vreq *q = g_new0(vreq, 1);
  q->v = v;
  g_strlcpy(q->owner, owner ? owner : "", sizeof q->owner);
  g_strlcpy(q->rid, rid, sizeof q->rid);
  const char *rest = path + strlen("/v1/videos");
  const char *method = soup_server_message_get_method(msg);
  int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
  if (!*rest || !strcmp(rest, "/")) {
    if (!strcmp(method, "POST")) {
      SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
      const char *key = soup_message_headers_get_one(h, "Idempotency-Key");
      if (key && (!*key || strlen(key) > 255)) {
        fc_http_error(msg, 400, "Idempotency-Key: expected 1-255 characters");
        goto refused;
      }
      GHashTable *params = NULL;
      const char *ct = soup_message_headers_get_content_type(h, &params);
      q->post.multipart = ct && !g_ascii_strcasecmp(ct, "multipart/form-data");
      if (q->post.multipart)
        q->post.boundary = g_strdup(params ? g_hash_table_lookup(params, "boundary") : NULL);
      if (params) g_hash_table_destroy(params);
      if (!q->post.multipart && !fc_http_has_content_type(msg, "application/json")) {
        fc_http_error(msg, 415, "expected Content-Type: application/json or multipart/form-data");
        goto refused;
      }
      q->post.idem_key = g_strdup(key);
      q->post.body = soup_message_body_flatten(soup_server_message_get_request_body(msg));
      q->op = OP_CREATE;
    } else if (get) {
      const char *l = fc_http_query_get(qs, "limit"), *a = fc_http_query_get(qs, "after");
      char *end = NULL;
      long n = l ? strtol(l, &end, 10) : LIST_DEFAULT;
      if (l && (!*l || *end || n < 1 || n > LIST_MAX)) {
        fc_http_error(msg, 400, "limit: expected 1..%d", LIST_MAX);
        goto refused;
      }
      if (a && *a && !fc_vjob_id_valid(a)) {
        fc_http_error(msg, 400, "after: not a video id");
        goto refused;
      }
      q->op = OP_LIST;
      q->limit = (int)n;
      g_strlcpy(q->after, a ? a : "", sizeof q->after);
    } else {
      soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow", "GET, POST");
      fc_http_error(msg, 405, "method %s not allowed here (use GET or POST)", method);
      goto refused;
    }
  } else {
    rest++;
    const char *slash = strchr(rest, '/');
    size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
    if (n >= sizeof q->id) n = sizeof q->id - 1;
    memcpy(q->id, rest, n);
    q->id[n] = 0;
    if (!fc_vjob_id_valid(q->id)) {
      fc_http_error(msg, 404, "no video with that id");
      goto refused;
    }
    if (!slash && get) q->op = OP_GET;
    else if (!slash && !strcmp(method, "DELETE")) q->op = OP_DELETE;
    else if (slash && get && !strcmp(slash, "/file"))
      q->op = OP_FILE, q->file_name = "video.mp4", q->file_type = "video/mp4";
    else if (slash && get && !strcmp(slash, "/captions.srt"))
      q->op = OP_FILE, q->file_name = "captions.srt", q->file_type = "application/x-subrip";
    else if (slash && get && !strcmp(slash, "/captions.vtt"))
      q->op = OP_FILE, q->file_name = "captions.vtt", q->file_type = "text/vtt";
    else {
      if (slash) fc_http_error(msg, 404, "no such video route");
      else fc_http_error(msg, 405, "method %s not allowed here (use GET or DELETE)", method);
      goto refused;
    }
  }
  q->msg = g_object_ref(msg);
  soup_server_message_pause(msg);
  g_thread_pool_push(v->pool, q, NULL);
  return;
refused:
  vreq_free(q);
  (void)server;
}

/* ---- lifetime and the retention sweep ---------------------------------------------------- */

static void drop_files(void *user, const char *id) {
  fc_videos *v = user;
  fc_vrun_remove_job_files(v->shared, id);
  g_message("video %s: expired (kept %d s), removed", id, v->retention_s);
}

/* The sweeper's tasks: the retention sweep (1), the depth for /metrics (2): a Redis store is
 * a network away from the main loop. */
/* The local store lives in memory: the folders of an earlier run's jobs have no job left to
 * expire them. Those older than the retention are removed at start (younger ones may belong to
 * another server sharing the folder; they go at the next start). */
static void sweep_orphans(fc_videos *v) {
  GDir *d = g_dir_open(v->shared, 0, NULL);
  const char *name;
  gint64 before = g_get_real_time() / G_USEC_PER_SEC - v->retention_s;
  int n = 0;
  while (d && (name = g_dir_read_name(d))) {
    if (!fc_vjob_id_valid(name)) continue;
    char *path = g_build_filename(v->shared, name, NULL);
    GStatBuf sb;
    if (g_stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && sb.st_mtime < before) {
      fc_vrun_remove_job_files(v->shared, name);
      n++;
    }
    g_free(path);
  }
  if (d) g_dir_close(d);
  if (n) g_message("videos: removed %d job folders of earlier runs, older than %d s", n, v->retention_s);
}

static void sweeper_run(gpointer data, gpointer user) {
  fc_videos *v = user;
  if (GPOINTER_TO_INT(data) == 3) {
    sweep_orphans(v);
    return;
  }
  fc_vstore *st = take_store(v);
  int pending = 0, queued = 0;
  if (st && GPOINTER_TO_INT(data) == 1) {
    fc_vstore_expire(st, g_get_real_time() / 1000, drop_files, v);
    g_atomic_int_set(&v->expiring, 0);
  } else if (st) {
    if (fc_vstore_depth(st, &pending, &queued) == 0) {
      g_atomic_int_set(&v->depth_pending, pending);
      g_atomic_int_set(&v->depth_queued, queued);
    }
    g_atomic_int_set(&v->depth_asked, 0);
  }
  put_store(v, st);
}

static gboolean expire_tick(gpointer p) {
  fc_videos *v = p;
  /* buckets unused for a minute are full again: forgotten (made anew, full, when needed) */
  GHashTableIter it;
  gpointer b;
  gint64 now = g_get_monotonic_time();
  g_hash_table_iter_init(&it, v->buckets);
  while (g_hash_table_iter_next(&it, NULL, &b))
    if (now - ((fc_bucket *)b)->at > 60 * G_USEC_PER_SEC) g_hash_table_iter_remove(&it);
  /* one sweep at a time, on the pool (a Redis store is a network away) */
  if (g_atomic_int_compare_and_exchange(&v->expiring, 0, 1))
    g_thread_pool_push(v->sweeper, GINT_TO_POINTER(1), NULL);
  return G_SOURCE_CONTINUE;
}

static fc_avatar *env_avatar_get(void *user, const char *id, int *err) {
  return fc_server_avatar_get(user, id, err);
}

static void env_avatar_put(void *user, fc_avatar *a) { fc_server_avatar_put(user, a); }

/* A provider voice ("provider:voice") speaks through the server's TTS service (serve --tts,
 * with its URL and key): the job's sentence in one call, its audio gathered (16 kHz mono from
 * the voice module) and handed to the shard whole, as its length is the sentence's caption
 * time. Another provider than the server's is refused: each needs its address and key. */
typedef struct pcm_buf {
  float *pcm;
  size_t n, cap;
} pcm_buf;

static int gather_pcm(void *user, const float *pcm, size_t n) {
  pcm_buf *b = user;
  if (b->n + n > b->cap) {
    size_t cap = MAX(b->cap * 2, b->n + n + FC_SAMPLE_RATE);
    float *p = realloc(b->pcm, cap * sizeof *p);
    if (!p) return 1; /* stops the call: FC_ECANCELED, reported as out of memory below */
    b->pcm = p, b->cap = cap;
  }
  memcpy(b->pcm + b->n, pcm, n * sizeof *pcm);
  b->n += n;
  return 0;
}

static int env_speak(void *user, const char *provider, const char *voice, const char *text,
                     fc_speech *out) {
  fc_server *srv = user;
  fc_voice *tts = srv->voice;
  if (!tts || g_ascii_strcasecmp(provider, fc_voice_name(tts)))
    return fc_error_set(FC_EUNSUPPORTED, "voice: provider '%s' is not this server's (%s%s)",
                        provider, tts ? "serve --tts " : "espeak voices only: no --tts",
                        tts ? fc_voice_name(tts) : "");
  fc_voice_req r = {.text = text, .voice = voice && *voice ? voice : NULL};
  pcm_buf b = {0};
  int err = fc_voice_speak(tts, &r, NULL, gather_pcm, &b);
  if (err == FC_ECANCELED) err = fc_error_set(FC_ENOMEM, "voice: out of memory for the audio");
  else if (!err && !b.n) err = fc_error_set(FC_EREMOTE, "voice: %s answered no audio", provider);
  if (err) {
    free(b.pcm);
    return err;
  }
  *out = (fc_speech){.audio = {.samples = b.pcm, .n = b.n, .rate = FC_SAMPLE_RATE}};
  return FC_OK;
}

int fc_videos_start(fc_server *srv, int *err) {
  const fc_server_params *p = &srv->p;
  fc_videos *v = g_new0(fc_videos, 1);
  srv->videos = v;
  v->srv = srv;
  g_mutex_init(&v->lock);
  g_mutex_init(&v->submit_lock);
  v->handles = g_ptr_array_new();
  v->active = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)g_ptr_array_unref);
  v->buckets = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  v->retention_s = p->video_retention_s > 0 ? p->video_retention_s : 86400;
  v->max_active = p->video_max_active > 0 ? p->video_max_active : 10;
  v->rate_per_min = p->rate_limit_per_min == 0 ? 50 : p->rate_limit_per_min;
  v->shared = p->shared_dir ? g_strdup(p->shared_dir) : g_build_filename(fc_data_dir(), "videos", NULL);
  if (g_mkdir_with_parents(v->shared, 0755) != 0) {
    if (p->shared_dir) {
      *err = fc_error_set(FC_EIO, "--shared-dir %s: cannot make the folder", v->shared);
      return *err;
    }
    /* the default place (a read-only data folder): the live server runs, /v1 answers 503 */
    g_warning("videos: cannot make %s (give --shared-dir): /v1/videos is off", v->shared);
    v->off = 1;
    fc_http_route(srv, "/v1/videos", h_videos);
    return *err = FC_OK;
  }
  fc_vstore_params sp = {.redis_url = p->redis_url, .retention_s = v->retention_s,
                         .claim_idle_ms = p->claim_idle_s * 1000};
  if (!(v->store = fc_vstore_create(&sp, err))) return *err;
  GError *e = NULL;
  v->pool = g_thread_pool_new(pool_run, v, 4, FALSE, &e);
  if (v->pool) v->sweeper = g_thread_pool_new(sweeper_run, v, 1, FALSE, &e);
  if (!v->sweeper) {
    *err = fc_error_set(FC_ENOMEM, "cannot start the video API's threads: %s", e->message);
    g_error_free(e);
    return *err;
  }
  if (p->render_slots >= 0) {
    int slots = p->render_slots ? p->render_slots : (int)g_get_num_processors();
    int cores = (int)g_get_num_processors();
    fc_vrun_params rp = {.store = v->store, .slots = slots, .shared_dir = v->shared,
                         .webhook = srv->webhook, .webhook_secret = p->webhook_secret,
                         .env = {.pool = srv->pool, .avatar_get = env_avatar_get,
                                 .avatar_put = env_avatar_put, .speak = env_speak, .user = srv,
                                 .encoder_threads = cores > slots ? cores / slots : 1}};
    if (!(v->run = fc_vrun_create(&rp, err))) return *err;
  }
  if (!p->redis_url) g_thread_pool_push(v->sweeper, GINT_TO_POINTER(3), NULL);
  /* a short retention is swept often enough to be kept to within a second or two */
  v->expire_timer = g_timeout_add_seconds(MIN(EXPIRE_EVERY_S, MAX(1, v->retention_s / 2)), expire_tick, v);
  fc_http_route(srv, "/v1/videos", h_videos);
  return *err = FC_OK;
}

void fc_videos_log_start(fc_server *srv) {
  fc_videos *v = srv->videos;
  if (!v || v->off) return;
  int slots = srv->p.render_slots < 0 ? 0 : srv->p.render_slots ? srv->p.render_slots
                                                                 : (int)g_get_num_processors();
  char rate[48] = "no rate limit";
  if (v->rate_per_min > 0) snprintf(rate, sizeof rate, "%d requests/min", v->rate_per_min);
  g_message("videos: /v1/videos, files in %s, %s store, %d render slots, kept %d s, %s",
            v->shared, srv->p.redis_url ? "redis" : "local", slots, v->retention_s, rate);
  if (!slots && !srv->p.redis_url)
    g_warning("videos: --render-slots 0 with the local store: nothing will render the jobs "
              "submitted here (workers need --redis)");
}

void fc_videos_free(fc_server *srv) {
  fc_videos *v = srv->videos;
  if (!v) return;
  if (v->expire_timer) g_source_remove(v->expire_timer);
  /* requests in the pool finish (their answers are dropped with the main loop's sources) */
  if (v->pool) g_thread_pool_free(v->pool, FALSE, TRUE);
  if (v->sweeper) g_thread_pool_free(v->sweeper, FALSE, TRUE);
  v->pool = v->sweeper = NULL;
  fc_vrun_destroy(v->run); /* before the lip-sync pool: its renders are the pool's clients */
  for (guint i = 0; i < v->handles->len; i++) fc_vstore_destroy(v->handles->pdata[i]);
  g_ptr_array_free(v->handles, TRUE);
  fc_vstore_destroy(v->store);
  g_hash_table_destroy(v->active);
  g_hash_table_destroy(v->buckets);
  g_mutex_clear(&v->lock);
  g_mutex_clear(&v->submit_lock);
  g_free(v->shared);
  g_free(v);
  srv->videos = NULL;
}

void fc_videos_metrics(fc_server *srv, GString *o) {
  fc_videos *v = srv->videos;
  if (!v || !v->store) return;
  int pending = 0, queued = 0, processing = 0;
  if (!v->srv->p.redis_url) { /* the local store: a brief lock */
    fc_vstore_depth(v->store, &pending, &queued);
  } else { /* Redis: the figures the sweeper last read, and a new reading asked for */
    pending = g_atomic_int_get(&v->depth_pending);
    queued = g_atomic_int_get(&v->depth_queued);
    if (v->sweeper && g_atomic_int_compare_and_exchange(&v->depth_asked, 0, 1))
      g_thread_pool_push(v->sweeper, GINT_TO_POINTER(2), NULL);
  }
  fc_vrun_stats rs = {0};
  if (v->run) fc_vrun_stats_get(v->run, &rs);
  /* processing: the jobs this node's slots are rendering now (the store counts unfinished) */
  processing = rs.busy_jobs < pending ? rs.busy_jobs : pending;
  g_string_append_printf(o,
      "# HELP facecast_video_jobs Video jobs not finished, by status\n"
      "# TYPE facecast_video_jobs gauge\n"
      "facecast_video_jobs{status=\"pending\"} %d\nfacecast_video_jobs{status=\"processing\"} %d\n"
      "# HELP facecast_video_items_queued Work items (shards, joins) waiting for a render slot\n"
      "# TYPE facecast_video_items_queued gauge\nfacecast_video_items_queued %d\n"
      "# HELP facecast_video_jobs_total Video jobs finished, by status\n"
      "# TYPE facecast_video_jobs_total counter\n"
      "facecast_video_jobs_total{status=\"completed\"} %llu\n"
      "facecast_video_jobs_total{status=\"failed\"} %llu\n"
      "facecast_video_jobs_total{status=\"canceled\"} %u\n",
      pending - processing, processing, queued, (unsigned long long)rs.completed,
      (unsigned long long)rs.failed, (unsigned)g_atomic_int_get(&v->canceled));
  const struct {
    const char *name, *help;
    const fc_vrun_hist *h;
  } hs[] = {{"facecast_video_wait_seconds", "Video jobs' wait from submission to the first item "
                                            "taken", &rs.wait_s},
            {"facecast_video_render_seconds", "Video jobs' render time from the first item taken "
                                              "to completion", &rs.render_s}};
  for (size_t k = 0; k < G_N_ELEMENTS(hs); k++) {
    g_string_append_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", hs[k].name, hs[k].help,
                           hs[k].name);
    uint64_t cum = 0;
    for (int b = 0; b <= FC_VRUN_BUCKETS; b++) {
      cum += hs[k].h->n[b];
      if (b < FC_VRUN_BUCKETS)
        g_string_append_printf(o, "%s_bucket{le=\"%g\"} %llu\n", hs[k].name, fc_vrun_bounds_s[b],
                               (unsigned long long)cum);
      else
        g_string_append_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n", hs[k].name,
                               (unsigned long long)cum);
    }
    g_string_append_printf(o, "%s_sum %.3f\n%s_count %llu\n", hs[k].name, hs[k].h->sum,
                           hs[k].name, (unsigned long long)hs[k].h->count);
  }
  g_string_append_printf(o,
      "# HELP facecast_video_x_realtime Video seconds per render second of the last completed job\n"
      "# TYPE facecast_video_x_realtime gauge\nfacecast_video_x_realtime %.3f\n"
      "# HELP facecast_video_seconds_total Seconds of video completed\n"
      "# TYPE facecast_video_seconds_total counter\nfacecast_video_seconds_total %.3f\n",
      rs.x_realtime_last, rs.video_seconds);
  /* callbacks go through the server's sender: facecast_webhook_failures_total and
   * facecast_webhook_dropped_total (metrics.c) count them with the tasks' notices */
}
