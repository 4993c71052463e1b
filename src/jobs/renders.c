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
 * Jobs run one at a time on the task table's thread at nice 10 (tasks.h; the encoder, speech
 * synthesis and compositing are CPU work the live sessions need more). Each job is a bulk
 * client of the scheduler for its lifetime, placed like a session; its stream asks for 16
 * frames per request. Speech is synthesised a few sentences at a time: espeak is one engine
 * behind one lock, which a live session's /human must not wait minutes for. The avatar is
 * opened when the request comes (an unknown one is a 404). The file is written under the
 * server's recording folder as render-ID.mp4 (the MP4 writer renames it into place when
 * complete). */
#include "facecast/error.h"
#include "facecast/render.h"
#include "studio/studio.h"
#include "facecast/tts.h"
#include "server/internal.h"
#include "jobs/tasks.h"

#include <stdio.h>
#include <string.h>

#define MAX_RENDERS 64   /* kept in the table; the oldest finished ones are forgotten first */
#define MAX_TEXT 20000   /* bytes of text per render */
#define BULK_BATCH 16    /* frames per scheduler request */
#define TTS_CHUNK 400    /* bytes of text synthesised at a time (whole sentences, roughly) */

typedef struct render {
  fc_task t; /* first: the table's part (tasks.h) */
  fc_server *srv;
  char *text, *voice;
  fc_avatar *avatar; /* referenced (fc_server_avatar_get) */
  char *path;        /* the MP4, named when the job starts */
  int64_t frames;
  fc_lipsync_client *lsc; /* the running job's bulk client of the lip-sync pool (job thread) */
} render;

static void free_render(fc_task *p) {
  render *r = (render *)p;
  if (r->path && r->srv->own_record_dir) remove(r->path); /* a temporary folder: goes too */
  if (r->avatar) fc_server_avatar_put(r->srv, r->avatar);
  g_free(r->text), g_free(r->voice), g_free(r->path);
  g_free(r);
}

/* Leaves the table: its file goes too. */
static void forget_render(fc_task *p) {
  render *r = (render *)p;
  if (r->path) remove(r->path);
}

/* The stream's lip-sync hook: the pool's (bulk: deadlines a second out, so bulk work is
 * ordered among itself, after every live frame), stopping at a cancel. */
static int bulk_lipsync(void *user, const fc_lipsync_req *reqs, fc_patch *out,
                        const fc_frame_info *info, int n) {
  render *r = user;
  if (fc_task_canceled(&r->t)) return fc_error_set(FC_ECANCELED, "render %s canceled", r->t.id);
  return fc_lipsync_pool_hook(r->lsc, reqs, out, info, n);
}

static void on_progress(void *user, int64_t done, int64_t total) {
  render *r = user;
  fc_task_set_progress(&r->t, total > 0 ? (int)(done * 100 / total) : 0);
  r->frames = done;
}

/* The length of the next piece of text to synthesise: up to the end of the sentence (or line)
 * that reaches TTS_CHUNK bytes, else at a space, else all of it. */
static size_t next_chunk(const char *s) {
  size_t n = strlen(s), space = 0;
  if (n <= TTS_CHUNK) return n;
  for (size_t i = 0; i < n; i++) {
    const int end = s[i] == '.' || s[i] == '!' || s[i] == '?' || s[i] == '\n';
    if (end && i + 1 >= TTS_CHUNK / 2 && (s[i + 1] == ' ' || s[i + 1] == '\n' || !s[i + 1]))
      return i + 1;
    if (s[i] == ' ') space = i + 1;
    if (i + 1 >= 2 * TTS_CHUNK && space) return space; /* no sentence end: at a word */
  }
  return n;
}

/* The text's speech into st, a chunk at a time (the espeak lock is let go in between). */
static int push_speech(render *r, fc_stream *st) {
  fc_tts_params tp = {.voice = r->voice};
  int err = FC_OK, pushed = 0;
  for (const char *p = r->text; !err && *p;) {
    size_t n = next_chunk(p);
    char *piece = g_strndup(p, n);
    p += n;
    fc_speech sp = {0};
    if (!g_strstrip(piece)[0]) { /* blank between sentences */
      g_free(piece);
      continue;
    }
    if (fc_task_canceled(&r->t)) err = fc_error_set(FC_ECANCELED, "render %s canceled", r->t.id);
    else if (!(err = fc_tts_speak(piece, &tp, &sp)))
      err = fc_stream_push_speech(st, sp.audio.samples, sp.audio.n, sp.ph, sp.n_ph, NULL);
    pushed += !err;
    fc_speech_free(&sp);
    g_free(piece);
  }
  if (!err && !pushed) err = fc_error_set(FC_EINVAL, "render %s: no words to speak", r->t.id);
  return err;
}

/* Runs one job on the task thread; returns 0 or an error with its detail. */
static int run_render(fc_server *srv, fc_task *base) {
  render *r = (render *)base;
  fc_stream *st = NULL;
  int err;
  if (!srv->pool) /* benchmarks' solo servers have no scheduler to share */
    return fc_error_set(FC_EUNSUPPORTED, "this server renders no files (no scheduler)");
  char *name = g_strdup_printf("render-%s.mp4", r->t.id);
  char *path = g_build_filename(srv->record_dir, name, NULL);
  g_free(name);
  fc_tasks_lock(srv->render_tasks); /* read by /file and forget under the lock */
  r->path = path;
  fc_tasks_unlock(srv->render_tasks);
  fc_lipsync_client_params cp = {.cls = FC_SCHED_BULK};
  if (!(r->lsc = fc_lipsync_client_add(srv->pool, &cp, &err))) goto done;
  /* The whole text waits in the stream (MAX_TEXT is about 25 minutes of speech). */
  fc_stream_params spar = {.avatar = r->avatar, .lipsync = srv->lipsync, .run = bulk_lipsync,
                           .run_user = r, .batch = BULK_BATCH,
                           .max_pending = (size_t)3600 * FC_SAMPLE_RATE};
  if (!(st = fc_stream_create(&spar, &err))) goto done;
  if ((err = push_speech(r, st))) goto done;
  fc_stream_end(st);
  fc_mp4_params mp = fc_mp4_params_default(fc_avatar_width(r->avatar), fc_avatar_height(r->avatar));
  err = fc_render_to_mp4(st, r->path, &mp, on_progress, r);
done:
  fc_stream_destroy(st);
  fc_lipsync_client_remove(r->lsc);
  r->lsc = NULL;
  return err;
}

/* The job as JSON (lock held). */
static void render_json(const fc_task *base, GString *o) {
  const render *r = (const render *)base;
  g_string_append_c(o, '{');
  fc_task_json_fields(&r->t, o);
  if (r->t.status == FC_TASK_COMPLETED)
    g_string_append_printf(o, ",\"frames\":%lld,\"url\":\"/api/render/%s/file\"",
                           (long long)r->frames, r->t.id);
  g_string_append(o, "}");
}

static const fc_task_kind render_kind = {.noun = "render", .max = MAX_RENDERS, .run = run_render,
                                         .json = render_json, .forget = forget_render,
                                         .destroy = free_render};

static void post_render(fc_server *srv, SoupServerMessage *msg) {
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
  int err = 0;
  fc_avatar *av = NULL;
  if (!v[0] || !v[0][strspn(v[0], " \t\r\n")])
    fc_http_error(msg, 400, "'text' is required (the words to speak)");
  else if (strlen(v[0]) > MAX_TEXT)
    fc_http_error(msg, 413, "'text' is longer than %d bytes", MAX_TEXT);
  else if (v[2] && !fc_avatar_id_valid(v[2]))
    fc_http_error(msg, 400, "avatar: use 1-63 letters, digits, '_' or '-'");
  else if (v[3] && !fc_avatar_id_valid(v[3]))
    fc_http_error(msg, 400, "task_id: use 1-63 letters, digits, '_' or '-'");
  else if (!(av = fc_server_avatar_get(srv, v[2], &err))) /* "default" and the server's own too */
    fc_http_error(msg, err == FC_ENOTFOUND ? 404 : 400, "%s", fc_error_detail(err));
  if (!av) goto out;
  render *r = g_new0(render, 1);
  r->srv = srv;
  r->text = g_strdup(v[0]), r->voice = g_strdup(v[1]), r->avatar = av;
  fc_tasks_submit(srv->render_tasks, msg, &r->t, v[3], "render"); /* owns r now */
out:
  g_object_unref(parser);
}

static void h_render(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                     gpointer user) {
  fc_server *srv = user;
  fc_tasks *ts = srv->render_tasks;
  if (!ts) { /* a request that got past the early check as the server began to stop */
    fc_http_error(msg, 503, "the server is stopping");
    return;
  }
  const char *rest = strncmp(path, "/api/render/", 12) == 0 ? path + 12 : NULL;
  if (!rest || !*rest) {
    if (fc_http_require_method(msg, "POST")) post_render(srv, msg);
    return;
  }
  char id[64];
  const char *slash = strchr(rest, '/');
  size_t len = slash ? (size_t)(slash - rest) : strlen(rest);
  if (len >= sizeof id || (slash && strcmp(slash, "/file") != 0)) {
    fc_http_error(msg, 404, "not found");
    return;
  }
  memcpy(id, rest, len);
  id[len] = 0;
  if (!slash) {
    fc_tasks_answer(ts, msg, id);
    return;
  }
  if (!fc_http_require_method(msg, "GET")) return;
  fc_tasks_lock(ts);
  const render *r = (const render *)fc_tasks_find_locked(ts, id);
  if (r && !fc_task_visible(ts, &r->t, msg)) r = NULL;
  int status = r ? r->t.status : -1;
  char *p = status == FC_TASK_COMPLETED ? g_strdup(r->path) : NULL;
  fc_tasks_unlock(ts);
  if (p) fc_http_serve_file(msg, p, "video/mp4");
  else if (status < 0) fc_http_error(msg, 404, "unknown render");
  else fc_http_error(msg, 409, "the render is %s, not completed", fc_task_status_name(status));
  g_free(p);
  (void)server, (void)q;
}

void fc_render_tasks_register(fc_server *srv) {
  srv->render_tasks = fc_tasks_new(srv, &render_kind);
  fc_http_route(srv, "/api/render", h_render);
}

void fc_render_tasks_free(fc_server *srv) {
  fc_tasks_free(srv->render_tasks); /* a running job stops at its next lip-sync request */
  srv->render_tasks = NULL;
}
