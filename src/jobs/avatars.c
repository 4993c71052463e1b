/* The avatar studio over HTTP, in LiveTalking's shapes:
 *   POST   /api/avatar/task         JSON {avatar_id, video_path | image_path, img_size?, task_id?,
 *                                         clips?: [{name, video_path}]}
 *                                   or multipart/form-data (avatar_id, file, img_size?)
 *          → {task_id, status: "pending"}
 *          (LiveTalking's fields too: model, notifyurl; its pads, bbox_shift, ... are ignored)
 *   GET    /api/avatar/task/{id}    → {task_id, avatar_id, model_type, status, progress, error_msg,
 *                                      start_time, end_time, duration, notify_url, error?,
 *                                      reasons?, result?}
 *   GET    /api/avatar/tasks        → {tasks: [ ...those, newest first... ]}
 *   DELETE /api/avatar/task/{id}    pending or running: cancelled; finished: forgotten
 *   GET    /api/avatars             → the packs on disk (id, size, frames)
 * status: pending → running → completed | failed | canceled; progress 0–100; a refusal by the
 * quality gate fails with one reason per problem ({key, message}).
 *
 * Jobs run one at a time on the task table's thread at nice 10 (tasks.h: states, answers,
 * eviction), so creating an avatar never takes a core from the live sessions' frame
 * production; the face models are loaded on that thread the first time and kept. An upload is
 * written to a temporary file (removed when the job ends) because the decoder reads files.
 *
 * video_path/image_path name a file on the server's machine: only under the folders the
 * operator listed (--media-dir), none by default, and only a regular file (a FIFO or a device
 * would hang the task thread, and with it DELETE and shutdown). A path outside those folders
 * is refused without looking at it, so nobody learns which files exist. An avatar id in use is
 * replaced only with "overwrite": true; "default" and the server's own avatar never. */
#include "facecast/error.h"
#include "avatar/pack.h"
#include "studio/studio.h"
#include "server/internal.h"
#include "jobs/tasks.h"

#include "core/stale.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MAX_TASKS 256 /* kept in the table; the oldest finished ones are forgotten first */
/* Uploads waiting for their task, all together: each may be 256 MiB, and they sit in the
 * temporary folder (often memory) until their task runs. */
#define MAX_QUEUED_UPLOADS ((gint64)1 << 30)

typedef struct task {
  fc_task t; /* first: the table's part (tasks.h) */
  char avatar_id[64];
  char model[16]; /* LiveTalking's model_type: which of its models the avatar is for */
  char *src;    /* the file to read (a server path: resolved when the task was made) */
  int nclips;   /* action clips (JSON "clips": [{name, video_path}]) */
  char *clip_name[FC_STUDIO_MAX_CLIPS], *clip_file[FC_STUDIO_MAX_CLIPS];
  int upload;   /* src is our temporary file */
  int crop;     /* 0, 96, 256 */
  int lock_fd;  /* upload: holds src's lock (fc_stale) until the file is removed */
  int overwrite; /* may replace an existing pack */
  gint64 upload_bytes; /* counted in *queued (fc_avatar_tasks.queued_upload) until the file goes */
  gint64 *queued;
  fc_studio_result res;
} task;

typedef struct fc_avatar_tasks {
  fc_tasks *tasks;
  fc_face_models models; /* the task thread's, loaded on its first job */
  int models_loaded, models_err;
  char models_msg[256];
  gint64 queued_upload; /* bytes of uploads not yet removed (atomic) */
} fc_avatar_tasks;

/* An upload's file goes as soon as its task has read it, or will not run (any thread). */
static void drop_upload(task *t) {
  if (!t->upload || !t->src) return;
  remove(t->src);
  g_free(t->src);
  t->src = NULL;
  if (t->lock_fd >= 0) close(t->lock_fd);
  t->lock_fd = -1;
  if (t->queued) __atomic_fetch_sub(t->queued, t->upload_bytes, __ATOMIC_RELAXED);
}

static void free_task(fc_task *p) {
  task *t = (task *)p;
  drop_upload(t);
  if (t->lock_fd >= 0) close(t->lock_fd);
  g_free(t->src);
  for (int k = 0; k < t->nclips; k++) g_free(t->clip_name[k]), g_free(t->clip_file[k]);
  g_free(t);
}

static void on_progress(void *user, int pct) {
  task *t = user;
  fc_task_set_progress(&t->t, pct);
}

/* Whether a resolved (real) path lies in one of the --media-dir folders. */
static int under_media_dirs(const fc_server *srv, const char *real) {
  if (!srv->p.media_dirs || !real) return 0;
  gchar **roots = g_strsplit(srv->p.media_dirs, ":", -1);
  int in = 0;
  for (int i = 0; roots[i] && !in; i++) {
    char *root = *roots[i] ? realpath(roots[i], NULL) : NULL;
    size_t n = root ? strlen(root) : 0;
    in = root && strncmp(real, root, n) == 0 && (real[n] == '/' || (n == 1 && root[0] == '/'));
    free(root);
  }
  g_strfreev(roots);
  return in;
}

/* A server path a task may read: under a --media-dir, existing, a regular file. 0 with the
 * resolved path in *resolved, or the HTTP status after answering (403: outside or no folders;
 * 404; 400: not a regular file). The answer never says whether a path outside the folders
 * exists: the path is checked as written before anything is looked up. */
int fc_media_path_check(fc_server *srv, SoupServerMessage *msg, const char *path,
                            char **resolved) {
  *resolved = NULL;
  if (!srv->p.media_dirs) {
    fc_http_error(msg, 403, "server paths are off: upload the file (multipart 'file'), or start "
                            "the server with --media-dir DIR");
    return 403;
  }
  if (!g_path_is_absolute(path)) {
    fc_http_error(msg, 400, "a server path must be absolute");
    return 400;
  }
  gchar **roots = g_strsplit(srv->p.media_dirs, ":", -1);
  char *lexical = g_canonicalize_filename(path, "/");
  int inside_lex = 0;
  for (int i = 0; roots[i] && !inside_lex; i++) {
    char *lroot = *roots[i] ? g_canonicalize_filename(roots[i], "/") : NULL;
    size_t n = lroot ? strlen(lroot) : 0;
    inside_lex = lroot && strncmp(lexical, lroot, n) == 0 && (lexical[n] == '/' || (n == 1 && lroot[0] == '/'));
    g_free(lroot);
  }
  g_strfreev(roots);
  g_free(lexical);
  char *real = inside_lex ? realpath(path, NULL) : NULL;
  int status = 0;
  if (!inside_lex || (real && !under_media_dirs(srv, real))) {
    fc_http_error(msg, 403, "server paths must lie under a --media-dir folder");
    status = 403;
  } else if (!real) {
    fc_http_error(msg, 404, "no such file in the media folders");
    status = 404;
  } else {
    /* O_NONBLOCK: opening a FIFO must not wait for a writer */
    int fd = open(real, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      fc_http_error(msg, fd < 0 ? 404 : 400, fd < 0 ? "the file cannot be read"
                                                     : "not a regular file (a FIFO, device or folder)");
      status = fd < 0 ? 404 : 400;
    }
    if (fd >= 0) close(fd);
  }
  if (status) free(real);
  else *resolved = real;
  return status;
}

/* At run time, a server path is opened again and checked again (it may have been replaced by
 * a FIFO or a link out of the folders since): an fd on a regular file in the media folders,
 * or -1 with the error set. The decoder then reads it through /proc/self/fd/N, the very file
 * checked, whatever the path names by then. */
static int open_checked(const fc_server *srv, const char *real, int *err) {
  int fd = open(real, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  char proc[64], *now = NULL;
  if (fd >= 0) {
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    now = realpath(proc, NULL);
  }
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !under_media_dirs(srv, now)) {
    *err = fc_error_set(FC_ENOTFOUND, "%s: no longer a regular file in the media folders", real);
    if (fd >= 0) close(fd);
    fd = -1;
  }
  free(now);
  return fd;
}

static int run_task(fc_server *srv, fc_task *base) {
  fc_avatar_tasks *at = srv->avatar_tasks;
  task *t = (task *)base;
  if (!at->models_loaded && !at->models_err) {
    at->models_err = fc_face_models_load(&at->models);
    if (at->models_err) snprintf(at->models_msg, sizeof at->models_msg, "%s", fc_error_detail(at->models_err));
    else at->models_loaded = 1;
  }
  int err = at->models_err ? fc_error_set(at->models_err, "%s", at->models_msg) : FC_OK;
  int fds[1 + FC_STUDIO_MAX_CLIPS];
  char paths[1 + FC_STUDIO_MAX_CLIPS][64];
  int nfd = 0;
  for (int k = 0; !err && k <= t->nclips; k++) { /* the source, then the clips */
    const char *f = k ? t->clip_file[k - 1] : t->src;
    if (!k && t->upload) { /* our own temporary file */
      snprintf(paths[0], sizeof paths[0], "%s", "");
      continue;
    }
    if ((fds[nfd] = open_checked(srv, f, &err)) < 0) break;
    snprintf(paths[k], sizeof paths[k], "/proc/self/fd/%d", fds[nfd++]);
  }
  if (!err) {
    const char *slash = strrchr(t->src, '/');
    fc_studio_params p = {.from = t->upload ? t->src : paths[0], .name = slash ? slash + 1 : t->src,
                          .id = t->avatar_id, .crop_size = t->crop, .models = &at->models,
                          .progress = on_progress, .user = t, .cancel = &t->t.cancel,
                          .nclips = t->nclips, .no_replace = !t->overwrite};
    for (int k = 0; k < t->nclips; k++) p.clip_name[k] = t->clip_name[k], p.clip_file[k] = paths[k + 1];
    err = fc_studio_create(&p, &t->res);
    if (err) { /* the details name /proc/self/fd/N: say the files' names instead */
      GString *d = g_string_new(fc_error_detail(err));
      for (int k = 0; k <= t->nclips; k++)
        if (paths[k][0]) {
          const char *f = k ? t->clip_file[k - 1] : t->src;
          const char *b = strrchr(f, '/');
          g_string_replace(d, paths[k], b ? b + 1 : f, 0);
        }
      err = fc_error_set(err, "%s", d->str);
      g_string_free(d, TRUE);
    }
  }
  for (int k = 0; k < nfd; k++) close(fds[k]);
  drop_upload(t); /* read: not needed any more */
  return err;
}

static void skipped_task(fc_server *srv, fc_task *base) { drop_upload((task *)base); }

/* The task as JSON (the table's lock held). */
static void task_json(const fc_task *base, GString *o) {
  const task *t = (const task *)base;
  g_string_append_printf(o, "{\"avatar_id\":\"%s\",\"model_type\":\"%s\",", t->avatar_id, t->model);
  fc_task_json_fields(&t->t, o);
  if (t->t.status == FC_TASK_FAILED && fc_quality_failed(&t->res.quality)) {
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
  if (t->t.status == FC_TASK_COMPLETED)
    g_string_append_printf(o, ",\"result\":{\"frames\":%d,\"width\":%d,\"height\":%d,\"seconds\":%.2f}",
                           t->res.frames, t->res.width, t->res.height, t->res.seconds_taken);
  g_string_append(o, "}");
}

static const fc_task_kind avatar_kind = {.noun = "avatar task", .max = MAX_TASKS, .run = run_task,
                                         .json = task_json, .skipped = skipped_task,
                                         .destroy = free_task};

static int crop_of(const char *s, int *crop) {
  if (!s || !*s) return *crop = 0, 1;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || (v != 96 && v != 256)) return 0;
  *crop = (int)v;
  return 1;
}

/* The avatar id may be made: not the server's own, not a pack that exists (without
 * overwrite), not the target of another unfinished task. Answers 409 otherwise. */
static int avatar_id_free(fc_server *srv, SoupServerMessage *msg, const char *id, int overwrite) {
  if (strcmp(id, "default") == 0 || strcmp(id, fc_avatar_id(srv->avatar)) == 0) {
    fc_http_error(msg, 409, "avatar_id '%s' names the server's own avatar", id);
    return 0;
  }
  char pack[4200];
  if (!overwrite && !fc_avatar_pack_path(NULL, id, pack, sizeof pack) && access(pack, F_OK) == 0) {
    fc_http_error(msg, 409, "avatar '%s' exists: send \"overwrite\": true to replace it", id);
    return 0;
  }
  fc_avatar_tasks *at = srv->avatar_tasks;
  int busy = 0;
  fc_tasks_lock(at->tasks);
  GList *all = fc_tasks_all_locked(at->tasks);
  for (GList *l = all; l && !busy; l = l->next) {
    const task *t = l->data;
    busy = t->t.status <= FC_TASK_RUNNING && strcmp(t->avatar_id, id) == 0;
  }
  g_list_free(all);
  fc_tasks_unlock(at->tasks);
  if (busy) fc_http_error(msg, 409, "another task is making avatar '%s'", id);
  return !busy;
}

/* LiveTalking's extra fields: model (its avatar pipelines; facecast's packs serve every model,
 * so it is only recorded) and notifyurl. NULL and 400 when one is not acceptable. */
typedef struct lt_fields {
  const char *model, *notify;
} lt_fields;

static int lt_fields_ok(SoupServerMessage *msg, const lt_fields *lt) {
  static const char *const models[] = {"wav2lip", "musetalk", "ultralight"};
  int known = !lt->model || !*lt->model;
  for (size_t i = 0; !known && i < G_N_ELEMENTS(models); i++) known = !strcmp(lt->model, models[i]);
  if (!known) {
    fc_http_error(msg, 400, "'model' must be wav2lip, musetalk or ultralight");
    return 0;
  }
  if (lt->notify && *lt->notify &&
      ((strncmp(lt->notify, "http://", 7) && strncmp(lt->notify, "https://", 8)) ||
       strlen(lt->notify) >= sizeof(((fc_task *)0)->notify_url) || strpbrk(lt->notify, " \r\n"))) {
    fc_http_error(msg, 400, "'notifyurl' must be an http:// or https:// URL under 512 bytes");
    return 0;
  }
  return 1;
}

/* Starts a task; answers the request. Takes src, the clips and, for an upload (upload: its
 * size in bytes, else 0), its file and lock. */
static void start_task(fc_server *srv, SoupServerMessage *msg, const char *avatar_id,
                       const char *task_id, char *src, gint64 upload, int lock_fd, int crop,
                       int overwrite, int nclips, char **clip_name, char **clip_file,
                       const lt_fields *lt) {
  fc_avatar_tasks *at = srv->avatar_tasks;
  if (!lt_fields_ok(msg, lt)) goto fail;
  if (!fc_avatar_id_valid(avatar_id)) {
    fc_http_error(msg, 400, "avatar_id: use 1-63 letters, digits, '_' or '-'");
    goto fail;
  }
  if (task_id && !fc_avatar_id_valid(task_id)) {
    fc_http_error(msg, 400, "task_id: use 1-63 letters, digits, '_' or '-'");
    goto fail;
  }
  if (!avatar_id_free(srv, msg, avatar_id, overwrite)) goto fail;
  task *t = g_new0(task, 1);
  snprintf(t->avatar_id, sizeof t->avatar_id, "%s", avatar_id);
  snprintf(t->model, sizeof t->model, "%s", lt->model && *lt->model ? lt->model : "wav2lip");
  snprintf(t->t.notify_url, sizeof t->t.notify_url, "%s", lt->notify ? lt->notify : "");
  t->src = src, t->upload = upload > 0, t->crop = crop, t->lock_fd = lock_fd, t->overwrite = overwrite;
  if (upload > 0) __atomic_fetch_add(t->queued = &at->queued_upload, t->upload_bytes = upload, __ATOMIC_RELAXED);
  t->nclips = nclips;
  for (int k = 0; k < nclips; k++) t->clip_name[k] = clip_name[k], t->clip_file[k] = clip_file[k];
  char prefix[80];
  snprintf(prefix, sizeof prefix, "task-%s", avatar_id);
  fc_tasks_submit(at->tasks, msg, &t->t, task_id, prefix); /* owns t (and src, clips) now */
  return;
fail:
  if (upload) remove(src);
  if (lock_fd >= 0) close(lock_fd);
  g_free(src);
  for (int k = 0; k < nclips; k++) g_free(clip_name[k]), g_free(clip_file[k]);
}

static void post_json(fc_server *srv, SoupServerMessage *msg) {
  JsonParser *parser = NULL;
  JsonObject *o = fc_http_json_body(msg, &parser);
  if (!o) return;
  const char *fields[] = {"avatar_id", "video_path", "image_path", "img_size", "task_id", "model", "notifyurl"};
  const char *v[7] = {0};
  char sizebuf[16] = "";
  for (int i = 0; i < 7; i++) {
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
  int crop = 0, nclips = 0, overwrite = 0;
  char *cn[FC_STUDIO_MAX_CLIPS], *cf[FC_STUDIO_MAX_CLIPS];
  const char *src = v[1] ? v[1] : v[2];
  JsonNode *ow = json_object_get_member(o, "overwrite");
  JsonNode *cl = json_object_get_member(o, "clips");
  const char *bad = NULL;
  int answered = 0;
  if (ow && !JSON_NODE_HOLDS_NULL(ow)) {
    if (JSON_NODE_HOLDS_VALUE(ow) && json_node_get_value_type(ow) == G_TYPE_BOOLEAN)
      overwrite = json_node_get_boolean(ow);
    else
      bad = "'overwrite' must be true or false";
  }
  if (!bad && cl && !JSON_NODE_HOLDS_NULL(cl)) {
    JsonArray *a = JSON_NODE_HOLDS_ARRAY(cl) ? json_node_get_array(cl) : NULL;
    if (!a || json_array_get_length(a) > FC_STUDIO_MAX_CLIPS) bad = "'clips' must be a list of at most 16 {name, video_path}";
    for (guint k = 0; a && !bad && !answered && k < json_array_get_length(a); k++) {
      JsonNode *e = json_array_get_element(a, k);
      JsonObject *eo = JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
      JsonNode *nn = eo ? json_object_get_member(eo, "name") : NULL;
      JsonNode *vn = eo ? json_object_get_member(eo, "video_path") : NULL;
      int ok = nn && vn && JSON_NODE_HOLDS_VALUE(nn) && JSON_NODE_HOLDS_VALUE(vn) &&
               json_node_get_value_type(nn) == G_TYPE_STRING &&
               json_node_get_value_type(vn) == G_TYPE_STRING;
      char *real = NULL;
      if (!ok) bad = "each clip needs a 'name' and a 'video_path' (strings)";
      else if (fc_media_path_check(srv, msg, json_node_get_string(vn), &real)) answered = 1;
      else cn[nclips] = g_strdup(json_node_get_string(nn)), cf[nclips++] = real;
    }
  }
  char *real = NULL;
  lt_fields lt = {v[5], v[6]};
  if (answered) { /* answered */
  } else if (bad) fc_http_error(msg, 400, "%s", bad);
  else if (!lt_fields_ok(msg, &lt)) { /* answered */
  }
  else if (!v[0]) fc_http_error(msg, 400, "'avatar_id' is required");
  else if (!src) fc_http_error(msg, 400, "'video_path' or 'image_path' is required (or upload 'file' as multipart)");
  else if (!crop_of(v[3], &crop)) fc_http_error(msg, 400, "'img_size' must be 96 or 256");
  else if (!fc_media_path_check(srv, msg, src, &real)) {
    start_task(srv, msg, v[0], v[4], g_strdup(real), 0, -1, crop, overwrite, nclips, cn, cf, &lt);
    nclips = 0;
  }
  free(real);
  for (int k = 0; k < nclips; k++) g_free(cn[k]), free(cf[k]);
  g_object_unref(parser);
}

static void post_multipart(fc_server *srv, SoupServerMessage *msg) {
  GBytes *file = NULL;
  char *field_v[6]; /* avatar_id, img_size, task_id, overwrite, model, notifyurl */
  static const char *const files[] = {"file", "video_file", NULL};
  static const char *const names[6] = {"avatar_id", "img_size", "task_id", "overwrite", "model", "notifyurl"};
  if (fc_http_multipart(msg, files, &file, NULL, names, field_v, 6)) return;
  int crop = 0;
  int overwrite = field_v[3] && (!strcmp(field_v[3], "true") || !strcmp(field_v[3], "1"));
  if (!field_v[0]) fc_http_error(msg, 400, "'avatar_id' field is required");
  else if (!file) fc_http_error(msg, 400, "'file' field (a video or a photo) is required");
  else if (!crop_of(field_v[1], &crop)) fc_http_error(msg, 400, "'img_size' must be 96 or 256");
  else if (__atomic_load_n(&srv->avatar_tasks->queued_upload, __ATOMIC_RELAXED) +
               (gint64)g_bytes_get_size(file) > MAX_QUEUED_UPLOADS)
    fc_http_error(msg, 503, "too many uploads wait for their tasks (at most %lld MiB together): "
                            "try again later", (long long)(MAX_QUEUED_UPLOADS >> 20));
  else {
    char *tmpl = g_build_filename(g_get_tmp_dir(), "facecast-upload-XXXXXX", NULL);
    int fd = fc_stale_mkstemp(tmpl); /* locked: a kill -9 leaves it to the next server's sweep */
    gsize n;
    const char *d = g_bytes_get_data(file, &n);
    gboolean ok = fd >= 0;
    for (gsize off = 0; ok && off < n;) {
      ssize_t w = write(fd, d + off, n - off);
      if (w <= 0) ok = FALSE;
      else off += (gsize)w;
    }
    if (!ok) {
      if (fd >= 0) remove(tmpl), close(fd);
      g_free(tmpl);
      fc_http_error(msg, 500, "cannot store the upload");
    } else {
      lt_fields lt = {field_v[4], field_v[5]};
      start_task(srv, msg, field_v[0], field_v[2], tmpl, (gint64)(n ? n : 1), fd, crop, overwrite, 0,
                 NULL, NULL, &lt);
    }
  }
  if (file) g_bytes_unref(file);
  for (int k = 0; k < 6; k++) g_free(field_v[k]);
}

static void h_task(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                   gpointer user) {
  fc_server *srv = user;
  fc_avatar_tasks *at = srv->avatar_tasks;
  if (!at) { /* a request that got past the early check as the server began to stop */
    fc_http_error(msg, 503, "the server is stopping");
    return;
  }
  const char *id = strncmp(path, "/api/avatar/task/", 17) == 0 ? path + 17 : NULL;
  if (id && !*id) id = NULL;
  if (!id) {
    if (!fc_http_require_method(msg, "POST")) return;
    if (fc_http_has_content_type(msg, "multipart/form-data")) post_multipart(srv, msg);
    else post_json(srv, msg);
    return;
  }
  fc_tasks_answer(at->tasks, msg, id);
  (void)server, (void)q;
}

static void h_tasks(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                    gpointer user) {
  fc_server *srv = user;
  fc_avatar_tasks *at = srv->avatar_tasks;
  if (!at) { /* a request that got past the early check as the server began to stop */
    fc_http_error(msg, 503, "the server is stopping");
    return;
  }
  fc_tasks_list(at->tasks, msg);
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
  srv->avatar_tasks = at;
  at->tasks = fc_tasks_new(srv, &avatar_kind);
  fc_http_route(srv, "/api/avatar/task", h_task);
  fc_http_route(srv, "/api/avatar/tasks", h_tasks);
  fc_http_route(srv, "/api/avatars", h_avatars);
}

void fc_avatar_tasks_free(fc_server *srv) {
  fc_avatar_tasks *at = srv->avatar_tasks;
  if (!at) return;
  fc_tasks_free(at->tasks); /* running jobs stop at their next frame */
  fc_face_models_free(&at->models);
  g_free(at);
  srv->avatar_tasks = NULL;
}
