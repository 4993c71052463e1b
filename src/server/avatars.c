/* The avatar studio over HTTP, in LiveTalking's shapes:
 *   POST   /api/avatar/task         JSON {avatar_id, video_path | image_path, img_size?, task_id?,
 *                                         clips?: [{name, video_path}]}
 *                                   or multipart/form-data (avatar_id, file, img_size?)
 *          → {task_id, status: "pending"}
 *   GET    /api/avatar/task/{id}    → {task_id, avatar_id, status, progress, error?, reasons?, result?}
 *   GET    /api/avatar/tasks        → [ ...those... ]
 *   DELETE /api/avatar/task/{id}    pending or running: cancelled; finished: forgotten
 *   GET    /api/avatars             → the packs on disk (id, size, frames)
 * status: pending → running → completed | failed | canceled; progress 0–100; a refusal by the
 * quality gate fails with one reason per problem ({key, message}).
 *
 * Jobs run one at a time on their own thread at a lower CPU priority (nice 10), so creating
 * an avatar never takes a core from the live sessions' frame production; the face models are
 * loaded on that thread the first time and kept. Task state is shared between that thread
 * (progress, results) and the main loop (requests) under one mutex. An upload is written to a
 * temporary file (removed when the job ends) because the decoder reads files. video_path reads
 * a file on the server's machine: the API is for operators, not the public. */
#include "facecast/error.h"
#include "facecast/pack.h"
#include "facecast/studio.h"
#include "server/internal.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_TASKS 256 /* kept in the table; the oldest finished ones are forgotten first */

enum { T_PENDING, T_RUNNING, T_COMPLETED, T_FAILED, T_CANCELED };
static const char *const status_name[] = {"pending", "running", "completed", "failed", "canceled"};

typedef struct task {
  char id[64], avatar_id[64];
  char *src;    /* the file to read */
  int nclips;   /* action clips (JSON "clips": [{name, video_path}]) */
  char *clip_name[FC_STUDIO_MAX_CLIPS], *clip_file[FC_STUDIO_MAX_CLIPS];
  int upload;   /* src is our temporary file */
  int queued;   /* in the pool's queue: the pool holds the pointer, so it stays in the table */
  int crop;     /* 0, 96, 256 */
  int status, progress;
  volatile int cancel;
  int err;
  char error[512];
  fc_studio_result res;
  gint64 created;
} task;

typedef struct fc_avatar_tasks {
  GMutex lock;
  GHashTable *tasks; /* id → task* */
  GThreadPool *pool; /* one thread */
  fc_face_models models;
  int models_loaded, models_err;
  char models_msg[256];
  unsigned seq;
} fc_avatar_tasks;

static void free_task(gpointer p) {
  task *t = p;
  if (t->upload && t->src) remove(t->src);
  g_free(t->src);
  for (int k = 0; k < t->nclips; k++) g_free(t->clip_name[k]), g_free(t->clip_file[k]);
  g_free(t);
}

static void on_progress(void *user, int pct) {
  task *t = user;
  t->progress = pct; /* an int store; readers take the lock only for consistency of the rest */
}

static void run_task(gpointer data, gpointer user) {
  fc_server *srv = user;
  fc_avatar_tasks *at = srv->avatar_tasks;
  task *t = data;
  g_mutex_lock(&at->lock);
  t->queued = 0;
  if (t->status != T_PENDING) { /* cancelled while queued */
    g_mutex_unlock(&at->lock);
    return;
  }
  t->status = T_RUNNING;
  g_mutex_unlock(&at->lock);
  setpriority(PRIO_PROCESS, 0, 10); /* this thread only (Linux: per-thread nice) */
  if (!at->models_loaded && !at->models_err) {
    at->models_err = fc_face_models_load(&at->models);
    if (at->models_err) snprintf(at->models_msg, sizeof at->models_msg, "%s", fc_error_detail(at->models_err));
    else at->models_loaded = 1;
  }
  int err = at->models_err;
  fc_studio_result res;
  memset(&res, 0, sizeof res);
  if (!err) {
    fc_studio_params p = {.from = t->src, .id = t->avatar_id, .crop_size = t->crop,
                          .models = &at->models, .progress = on_progress, .user = t,
                          .cancel = &t->cancel, .nclips = t->nclips};
    for (int k = 0; k < t->nclips; k++) p.clip_name[k] = t->clip_name[k], p.clip_file[k] = t->clip_file[k];
    err = fc_studio_create(&p, &res);
  }
  g_mutex_lock(&at->lock);
  t->res = res;
  t->err = err;
  snprintf(t->error, sizeof t->error, "%s", err ? (at->models_err ? at->models_msg : fc_error_detail(err)) : "");
  t->status = !err ? T_COMPLETED : err == FC_ECANCELED ? T_CANCELED : T_FAILED;
  if (!err) t->progress = 100;
  if (t->upload && t->src) {
    remove(t->src);
    g_free(t->src);
    t->src = NULL;
  }
  g_mutex_unlock(&at->lock);
}

/* The task as JSON (call with the lock held). */
static void task_json(const task *t, GString *o) {
  g_string_append_printf(o, "{\"task_id\":\"%s\",\"avatar_id\":\"%s\",\"status\":\"%s\",\"progress\":%d",
                         t->id, t->avatar_id, status_name[t->status], t->progress);
  if (t->status == T_FAILED || t->status == T_CANCELED) {
    char *q = fc_http_json_quote(t->error);
    g_string_append_printf(o, ",\"error\":%s", q);
    g_free(q);
    if (fc_quality_failed(&t->res.quality)) {
      g_string_append(o, ",\"reasons\":[");
      int k = 0;
      for (int r = 0; r < FC_Q_COUNT; r++) {
        if (!t->res.quality.blocking[r]) continue;
        char *mq = fc_http_json_quote(t->res.quality.message[r]);
        g_string_append_printf(o, "%s{\"key\":\"%s\",\"message\":%s}", k++ ? "," : "", fc_quality_key(r), mq);
        g_free(mq);
      }
      g_string_append(o, "]");
    }
  }
  if (t->status == T_COMPLETED)
    g_string_append_printf(o, ",\"result\":{\"frames\":%d,\"width\":%d,\"height\":%d,\"seconds\":%.2f}",
                           t->res.frames, t->res.width, t->res.height, t->res.seconds_taken);
  g_string_append(o, "}");
}

/* Forgets the oldest finished task when the table is full (lock held). */
static int make_room(fc_avatar_tasks *at) {
  if (g_hash_table_size(at->tasks) < MAX_TASKS) return 1;
  GHashTableIter it;
  gpointer k, v;
  task *oldest = NULL;
  g_hash_table_iter_init(&it, at->tasks);
  while (g_hash_table_iter_next(&it, &k, &v)) {
    task *t = v;
    if (t->status >= T_COMPLETED && !t->queued && (!oldest || t->created < oldest->created))
      oldest = t;
  }
  if (!oldest) return 0;
  g_hash_table_remove(at->tasks, oldest->id);
  return 1;
}

static int crop_of(const char *s, int *crop) {
  if (!s || !*s) return *crop = 0, 1;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || (v != 96 && v != 256)) return 0;
  *crop = (int)v;
  return 1;
}

/* Starts a task; answers the request. Takes src (and the upload flag) and the clips. */
static void start_task(fc_server *srv, SoupServerMessage *msg, const char *avatar_id,
                       const char *task_id, char *src, int upload, int crop, int nclips,
                       char **clip_name, char **clip_file) {
  fc_avatar_tasks *at = srv->avatar_tasks;
  if (!fc_avatar_id_valid(avatar_id)) {
    fc_http_error(msg, 400, "avatar_id '%s': use 1-63 letters, digits, '_' or '-'", avatar_id ? avatar_id : "");
    goto fail;
  }
  if (task_id && !fc_avatar_id_valid(task_id)) {
    fc_http_error(msg, 400, "task_id '%s': use 1-63 letters, digits, '_' or '-'", task_id);
    goto fail;
  }
  if (!upload && access(src, R_OK) != 0) {
    fc_http_error(msg, 404, "%s: no such readable file on the server", src);
    goto fail;
  }
  g_mutex_lock(&at->lock);
  char id[64];
  if (task_id) snprintf(id, sizeof id, "%s", task_id);
  else snprintf(id, sizeof id, "task-%u-%s", ++at->seq, avatar_id);
  if (g_hash_table_lookup(at->tasks, id)) {
    g_mutex_unlock(&at->lock);
    fc_http_error(msg, 409, "task '%s' exists", id);
    goto fail;
  }
  if (!make_room(at)) {
    g_mutex_unlock(&at->lock);
    fc_http_error(msg, 503, "too many avatar tasks in progress (%d)", MAX_TASKS);
    goto fail;
  }
  task *t = g_new0(task, 1);
  snprintf(t->id, sizeof t->id, "%s", id);
  snprintf(t->avatar_id, sizeof t->avatar_id, "%s", avatar_id);
  t->src = src, t->upload = upload, t->crop = crop, t->status = T_PENDING;
  t->nclips = nclips;
  for (int k = 0; k < nclips; k++) t->clip_name[k] = clip_name[k], t->clip_file[k] = clip_file[k];
  nclips = 0; /* the task owns them now */
  t->created = g_get_monotonic_time();
  t->queued = 1;
  g_hash_table_insert(at->tasks, t->id, t);
  g_thread_pool_push(at->pool, t, NULL);
  char *data = g_strdup_printf("{\"task_id\":\"%s\",\"status\":\"pending\"}", t->id);
  g_mutex_unlock(&at->lock);
  fc_http_ok(msg, data);
  g_free(data);
  return;
fail:
  if (upload) remove(src);
  g_free(src);
  for (int k = 0; k < nclips; k++) g_free(clip_name[k]), g_free(clip_file[k]);
}

static void post_json(fc_server *srv, SoupServerMessage *msg) {
  JsonParser *parser = NULL;
  JsonObject *o = fc_http_json_body(msg, &parser);
  if (!o) return;
  const char *fields[] = {"avatar_id", "video_path", "image_path", "img_size", "task_id"};
  const char *v[5] = {0};
  char sizebuf[16] = "";
  for (int i = 0; i < 5; i++) {
    JsonNode *n = json_object_get_member(o, fields[i]);
    if (!n || JSON_NODE_HOLDS_NULL(n)) continue;
    if (i == 3 && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64) {
      snprintf(sizebuf, sizeof sizebuf, "%lld", (long long)json_node_get_int(n));
      v[i] = sizebuf;
    } else if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
      v[i] = json_node_get_string(n);
    } else {
      fc_http_error(msg, 400, "'%s' must be a string", fields[i]);
      g_object_unref(parser);
      return;
    }
  }
  int crop = 0, nclips = 0;
  char *cn[FC_STUDIO_MAX_CLIPS], *cf[FC_STUDIO_MAX_CLIPS];
  const char *src = v[1] ? v[1] : v[2];
  JsonNode *cl = json_object_get_member(o, "clips");
  const char *bad = NULL;
  if (cl && !JSON_NODE_HOLDS_NULL(cl)) {
    JsonArray *a = JSON_NODE_HOLDS_ARRAY(cl) ? json_node_get_array(cl) : NULL;
    if (!a || json_array_get_length(a) > FC_STUDIO_MAX_CLIPS) bad = "'clips' must be a list of at most 16 {name, video_path}";
    for (guint k = 0; a && !bad && k < json_array_get_length(a); k++) {
      JsonNode *e = json_array_get_element(a, k);
      JsonObject *eo = JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
      const char *nm = eo && json_object_has_member(eo, "name") ? json_object_get_string_member_with_default(eo, "name", NULL) : NULL;
      const char *vp = eo && json_object_has_member(eo, "video_path") ? json_object_get_string_member_with_default(eo, "video_path", NULL) : NULL;
      if (!nm || !vp) bad = "each clip needs a 'name' and a 'video_path' (strings)";
      else if (access(vp, R_OK) != 0) bad = "a clip's video_path is not a readable file on the server";
      else cn[nclips] = g_strdup(nm), cf[nclips++] = g_strdup(vp);
    }
  }
  if (bad) fc_http_error(msg, strstr(bad, "readable") ? 404 : 400, "%s", bad);
  else if (!v[0]) fc_http_error(msg, 400, "'avatar_id' is required");
  else if (!src) fc_http_error(msg, 400, "'video_path' or 'image_path' is required (or upload 'file' as multipart)");
  else if (!crop_of(v[3], &crop)) fc_http_error(msg, 400, "'img_size' must be 96 or 256");
  else {
    start_task(srv, msg, v[0], v[4], g_strdup(src), 0, crop, nclips, cn, cf);
    nclips = 0;
  }
  for (int k = 0; k < nclips; k++) g_free(cn[k]), g_free(cf[k]);
  g_object_unref(parser);
}

static void post_multipart(fc_server *srv, SoupServerMessage *msg) {
  GBytes *file = NULL;
  char *field_v[3]; /* avatar_id, img_size, task_id */
  static const char *const files[] = {"file", "video_file", NULL};
  static const char *const names[3] = {"avatar_id", "img_size", "task_id"};
  if (fc_http_multipart(msg, files, &file, NULL, names, field_v, 3)) return;
  int crop = 0;
  if (!field_v[0]) fc_http_error(msg, 400, "'avatar_id' field is required");
  else if (!file) fc_http_error(msg, 400, "'file' field (a video or a photo) is required");
  else if (!crop_of(field_v[1], &crop)) fc_http_error(msg, 400, "'img_size' must be 96 or 256");
  else {
    char *tmpl = g_build_filename(g_get_tmp_dir(), "facecast-avatar-XXXXXX", NULL);
    int fd = g_mkstemp(tmpl);
    gsize n;
    const char *d = g_bytes_get_data(file, &n);
    gboolean ok = fd >= 0;
    for (gsize off = 0; ok && off < n;) {
      ssize_t w = write(fd, d + off, n - off);
      if (w <= 0) ok = FALSE;
      else off += (gsize)w;
    }
    if (fd >= 0) close(fd);
    if (!ok) {
      if (fd >= 0) remove(tmpl);
      g_free(tmpl);
      fc_http_error(msg, 500, "cannot store the upload");
    } else {
      start_task(srv, msg, field_v[0], field_v[2], tmpl, 1, crop, 0, NULL, NULL);
    }
  }
  if (file) g_bytes_unref(file);
  for (int k = 0; k < 3; k++) g_free(field_v[k]);
}

static void h_task(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                   gpointer user) {
  fc_server *srv = user;
  fc_avatar_tasks *at = srv->avatar_tasks;
  const char *method = soup_server_message_get_method(msg);
  const char *id = strncmp(path, "/api/avatar/task/", 17) == 0 ? path + 17 : NULL;
  if (id && !*id) id = NULL;
  if (!id) {
    if (!fc_http_require_method(msg, "POST")) return;
    if (fc_http_has_content_type(msg, "multipart/form-data")) post_multipart(srv, msg);
    else post_json(srv, msg);
    return;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "DELETE") != 0) {
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow", "GET, DELETE");
    fc_http_error(msg, 405, "method %s not allowed here (use GET or DELETE)", method);
    return;
  }
  g_mutex_lock(&at->lock);
  task *t = g_hash_table_lookup(at->tasks, id);
  if (!t) {
    g_mutex_unlock(&at->lock);
    fc_http_error(msg, 404, "unknown avatar task '%s'", id);
    return;
  }
  GString *o = g_string_new(NULL);
  if (strcmp(method, "DELETE") == 0) {
    if (t->status == T_PENDING) {
      t->status = T_CANCELED; /* the pool skips it */
      snprintf(t->error, sizeof t->error, "canceled before it started");
    } else if (t->status == T_RUNNING) {
      t->cancel = 1; /* the job stops at its next frame */
    } else if (!t->queued) {
      g_hash_table_remove(at->tasks, id);
      t = NULL;
    }
  }
  if (t) task_json(t, o);
  else g_string_append_printf(o, "{\"task_id\":\"%s\",\"status\":\"deleted\"}", id);
  g_mutex_unlock(&at->lock);
  fc_http_ok(msg, o->str);
  g_string_free(o, TRUE);
  (void)server, (void)q;
}

static gint by_created(gconstpointer a, gconstpointer b) {
  const task *x = a, *y = b;
  return x->created < y->created ? -1 : x->created > y->created;
}

static void h_tasks(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                    gpointer user) {
  fc_server *srv = user;
  fc_avatar_tasks *at = srv->avatar_tasks;
  if (!fc_http_require_method(msg, "GET")) return;
  GString *o = g_string_new("[");
  g_mutex_lock(&at->lock);
  GList *all = g_list_sort(g_hash_table_get_values(at->tasks), by_created);
  for (GList *l = all; l; l = l->next) {
    if (l != all) g_string_append_c(o, ',');
    task_json(l->data, o);
  }
  g_list_free(all);
  g_mutex_unlock(&at->lock);
  g_string_append_c(o, ']');
  fc_http_ok(msg, o->str);
  g_string_free(o, TRUE);
  (void)server, (void)path, (void)q;
}

static void h_avatars(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                      gpointer user) {
  if (!fc_http_require_method(msg, "GET")) return;
  const char *dir = fc_avatar_dir();
  DIR *d = opendir(dir);
  GString *o = g_string_new("[");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 8 || strcmp(e->d_name + len - 7, ".fcpack") != 0) continue;
    char *p = g_build_filename(dir, e->d_name, NULL);
    int err;
    fc_pack *pk = fc_pack_open(p, &err);
    g_free(p);
    if (!pk) continue;
    const fc_pack_info *in = fc_pack_get_info(pk);
    g_string_append_printf(o, "%s{\"avatar_id\":\"%s\",\"width\":%d,\"height\":%d,\"frames\":%d,\"clips\":%d}",
                           n++ ? "," : "", in->id, in->width, in->height, in->frames,
                           fc_pack_clip_count(pk));
    fc_pack_close(pk);
  }
  if (d) closedir(d);
  g_string_append_c(o, ']');
  fc_http_ok(msg, o->str);
  g_string_free(o, TRUE);
  (void)server, (void)path, (void)q, (void)user;
}

void fc_avatar_tasks_register(fc_server *srv) {
  fc_avatar_tasks *at = g_new0(fc_avatar_tasks, 1);
  g_mutex_init(&at->lock);
  at->tasks = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, free_task);
  at->pool = g_thread_pool_new(run_task, srv, 1, TRUE, NULL);
  srv->avatar_tasks = at;
  SoupServer *s = srv->soup;
  soup_server_add_early_handler(s, "/api/avatar/task", fc_http_early, srv, NULL);
  soup_server_add_handler(s, "/api/avatar/task", h_task, srv, NULL);
  soup_server_add_handler(s, "/api/avatar/tasks", h_tasks, srv, NULL);
  soup_server_add_handler(s, "/api/avatars", h_avatars, srv, NULL);
}

void fc_avatar_tasks_free(fc_server *srv) {
  fc_avatar_tasks *at = srv->avatar_tasks;
  if (!at) return;
  g_mutex_lock(&at->lock); /* running jobs stop at their next frame */
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init(&it, at->tasks);
  while (g_hash_table_iter_next(&it, &k, &v)) ((task *)v)->cancel = 1;
  g_mutex_unlock(&at->lock);
  g_thread_pool_free(at->pool, TRUE, TRUE); /* pending ones see cancel and return at once */
  g_hash_table_destroy(at->tasks);
  fc_face_models_free(&at->models);
  g_mutex_clear(&at->lock);
  g_free(at);
  srv->avatar_tasks = NULL;
}
