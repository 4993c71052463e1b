/* POST /v1/videos (videos_internal.h): a request body into a stored job.
 *
 * The body is a JSON spec (bulk/video.h's fc_video_spec_parse checks it, naming the field), or
 * multipart/form-data whose text fields are the same members (or one `spec` part holding the
 * JSON) with an `audio` file and/or a `background_image` file, or JSON with an `audio_url`
 * fetched here (capped at FC_VIDEO_MAX_UPLOAD). Files go into the job's folder on the shared
 * folder (<shared>/<id>/input.EXT, background.EXT) before the job is stored, so any worker
 * that takes a shard finds them. A client never names a shared-folder path itself (`audio`, a
 * background `image`): the spec's paths are only ever the ones written here, so one client
 * cannot point a job at another's files.
 *
 * Idempotency: the body's SHA-256 goes with the Idempotency-Key to the store, which answers
 * the earlier job for the same key and body (200 with it; the files just written are
 * removed) and refuses the key with another body (409). */
#include "facecast/error.h"
#include "bulk/video.h"
#include "core/jsonin.h"
#include "jobs/videos_internal.h"
#include "jobs/vrun.h"
#include "server/internal.h"
#include "server/multipart.h"

#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>

#define MAX_SHARDS 16 /* a job's pieces at most: as many workers can render it at once */
#define FETCH_TIMEOUT_S 30

void fc_video_post_clear(fc_video_post *p) {
  if (p->body) g_bytes_unref(p->body);
  g_free(p->boundary), g_free(p->idem_key);
  memset(p, 0, sizeof *p);
}

static void fail(fc_video_answer *a, int status, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void fail(fc_video_answer *a, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  g_free(a->text);
  a->text = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  a->status = status;
}

/* What a file's first bytes say it is: an extension, or NULL. */
static const char *audio_ext(const guint8 *d, size_t n) {
  if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WAVE", 4)) return "wav";
  if (n >= 3 && !memcmp(d, "ID3", 3)) return "mp3";
  if (n >= 2 && d[0] == 0xFF && (d[1] & 0xE0) == 0xE0) return "mp3";
  if (n >= 4 && !memcmp(d, "OggS", 4)) return "ogg";
  if (n >= 4 && !memcmp(d, "fLaC", 4)) return "flac";
  if (n >= 8 && !memcmp(d + 4, "ftyp", 4)) return "m4a";
  return NULL;
}

static const char *image_ext(const guint8 *d, size_t n) {
  if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) return "png";
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return "jpg";
  return NULL;
}

/* Writes data into the job's folder as base.EXT (ext from its first bytes); the name relative
 * to the shared folder in *rel (g_free). 0, or the HTTP status after fail(). */
static int save_file(fc_videos *v, const char *id, const char *field, const char *base,
                     const guint8 *d, size_t n, fc_video_answer *a, char **rel) {
  const char *ext = !strcmp(base, "input") ? audio_ext(d, n) : image_ext(d, n);
  if (!ext) {
    fail(a, 400, "%s: expected %s", field, !strcmp(base, "input")
                                               ? "a WAV or MP3 file (or OGG, FLAC, M4A)"
                                               : "a PNG or JPEG image");
    return a->status;
  }
  char *dir = g_build_filename(v->shared, id, NULL);
  char *name = g_strdup_printf("%s.%s", base, ext);
  char *path = g_build_filename(dir, name, NULL);
  GError *e = NULL;
  int ok = g_mkdir_with_parents(dir, 0755) == 0 &&
           g_file_set_contents(path, (const char *)d, (gssize)n, &e);
  if (!ok) {
    fail(a, 500, "cannot store the %s file", field);
    g_warning("video %s: %s: %s", id, path, e ? e->message : "cannot make the folder");
  } else {
    *rel = g_build_filename(id, name, NULL);
  }
  if (e) g_error_free(e);
  g_free(dir), g_free(name), g_free(path);
  return ok ? 0 : a->status;
}

/* GETs url into memory (at most FC_VIDEO_MAX_UPLOAD bytes). A pool thread: the session is
 * this call's own, synchronous. 0, or the HTTP status after fail(). */
static int fetch(const char *url, GByteArray **out, fc_video_answer *a) {
  if (g_ascii_strncasecmp(url, "http://", 7) && g_ascii_strncasecmp(url, "https://", 8)) {
    fail(a, 400, "audio_url: expected an http(s) URL");
    return a->status;
  }
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  fail(a, 400, "audio_url: not fetched in fuzzing builds"); /* no network waits in a fuzzer */
  return a->status;
#endif
  SoupSession *ss = soup_session_new_with_options("timeout", FETCH_TIMEOUT_S, "user-agent",
                                                  "facecast", NULL);
  SoupMessage *m = soup_message_new("GET", url);
  GError *e = NULL;
  GInputStream *in = m ? soup_session_send(ss, m, NULL, &e) : NULL;
  GByteArray *b = NULL;
  if (!m) {
    fail(a, 400, "audio_url: not a URL");
  } else if (!in) {
    fail(a, 400, "audio_url: %s", e ? e->message : "cannot fetch");
  } else if (!SOUP_STATUS_IS_SUCCESSFUL(soup_message_get_status(m))) {
    fail(a, 400, "audio_url: the server answered %u", soup_message_get_status(m));
  } else if (soup_message_headers_get_content_length(soup_message_get_response_headers(m)) >
             FC_VIDEO_MAX_UPLOAD) {
    fail(a, 413, "audio_url: the file is over %d bytes", FC_VIDEO_MAX_UPLOAD);
  } else {
    b = g_byte_array_new();
    guint8 buf[65536];
    gssize r;
    while ((r = g_input_stream_read(in, buf, sizeof buf, NULL, &e)) > 0 && !a->status) {
      if (b->len + (size_t)r > FC_VIDEO_MAX_UPLOAD) fail(a, 413, "audio_url: the file is over %d "
                                                                 "bytes", FC_VIDEO_MAX_UPLOAD);
      else g_byte_array_append(b, buf, (guint)r);
    }
    if (r < 0 && !a->status) fail(a, 400, "audio_url: %s", e ? e->message : "read failed");
  }
  if (e) g_error_free(e);
  if (in) g_object_unref(in);
  if (m) g_object_unref(m);
  g_object_unref(ss);
  if (a->status && b) g_byte_array_unref(b), b = NULL;
  *out = b;
  return a->status;
}

/* A multipart form's fields as a JSON object (a `spec` part's object, the text fields on top),
 * and its files. 0, or the HTTP status after fail(). */
static int form_object(const fc_video_post *in, JsonObject *o, GBytes **audio, GBytes **image,
                       fc_video_answer *a) {
  gsize len;
  const char *d = g_bytes_get_data(in->body, &len);
  fc_form_part parts[FC_MULTIPART_MAX_PARTS];
  char why[120];
  int np = fc_multipart_parse(d ? d : "", len, in->boundary, parts, FC_MULTIPART_MAX_PARTS, why,
                              sizeof why);
  if (np < 0) {
    fail(a, 400, "%s", why);
    return a->status;
  }
  static const char *const text_fields[] = {"script", "avatar", "voice", "size", "background",
                                            "callback_url", "audio_url"};
  for (int i = 0; i < np; i++) {
    const fc_form_part *p = &parts[i];
    GBytes *piece = g_bytes_new_from_bytes(in->body, (gsize)(p->data - d), p->size);
    if (!strcmp(p->name, "audio") && !*audio) {
      *audio = piece;
      continue;
    }
    if (!strcmp(p->name, "background_image") && !*image) {
      *image = piece;
      continue;
    }
    g_bytes_unref(piece);
    char *val = g_strndup(p->data, p->size);
    if (!g_utf8_validate(val, -1, NULL)) {
      fail(a, 400, "%s: not UTF-8 text", p->name);
    } else if (!strcmp(p->name, "spec")) {
      JsonObject *so = NULL;
      JsonParser *jp = fc_json_parse_object(val, strlen(val), FC_JSON_MAX_DEPTH, &so, why, sizeof why);
      if (!so) fail(a, 400, "spec: malformed JSON: the part %s", why);
      else {
        GList *names = json_object_get_members(so);
        for (GList *l = names; l; l = l->next)
          json_object_set_member(o, l->data, json_node_copy(json_object_get_member(so, l->data)));
        g_list_free(names);
      }
      if (jp) g_object_unref(jp); /* NULL when the part is no JSON object (fuzz_multipart) */
    } else if (!strcmp(p->name, "captions")) {
      g_strstrip(val);
      json_object_set_boolean_member(o, "captions", !strcmp(val, "true") || !strcmp(val, "1") ||
                                                        !strcmp(val, "on"));
    } else {
      for (size_t k = 0; k < G_N_ELEMENTS(text_fields); k++)
        if (!strcmp(p->name, text_fields[k]))
          json_object_set_string_member(o, p->name, !strcmp(p->name, "script") ? val : g_strstrip(val));
    }
    g_free(val);
    if (a->status) return a->status;
  }
  return 0;
}

/* With API keys: whether owner may have another unfinished job (its jobs submitted here, read
 * back from the store); submit_lock held. */
static int under_limit(fc_videos *v, fc_vstore *st, const char *owner) {
  g_mutex_lock(&v->lock);
  GPtrArray *ids = g_hash_table_lookup(v->active, owner);
  GPtrArray *copy = g_ptr_array_new_with_free_func(g_free);
  for (guint i = 0; ids && i < ids->len; i++) g_ptr_array_add(copy, g_strdup(ids->pdata[i]));
  g_mutex_unlock(&v->lock);
  int live = 0;
  for (guint i = 0; i < copy->len; i++) {
    fc_vjob j = {0};
    int gone = fc_vstore_get(st, copy->pdata[i], &j) == FC_ENOTFOUND;
    int done = gone || (j.status != FC_VJOB_PENDING && j.status != FC_VJOB_PROCESSING);
    fc_vjob_clear(&j);
    if (!done) {
      live++;
      continue;
    }
    g_mutex_lock(&v->lock);
    for (guint k = 0; ids && k < ids->len; k++)
      if (!strcmp(ids->pdata[k], copy->pdata[i])) g_ptr_array_remove_index_fast(ids, k--);
    g_mutex_unlock(&v->lock);
  }
  g_ptr_array_free(copy, TRUE);
  return live < v->max_active;
}

static void note_active(fc_videos *v, const char *owner, const char *id) {
  g_mutex_lock(&v->lock);
  GPtrArray *ids = g_hash_table_lookup(v->active, owner);
  if (!ids) {
    ids = g_ptr_array_new_with_free_func(g_free);
    g_hash_table_insert(v->active, g_strdup(owner), ids);
  }
  g_ptr_array_add(ids, g_strdup(id));
  g_mutex_unlock(&v->lock);
}

/* The JSON object a client sent (or its form's fields), the files it brought in place and the
 * object rewritten to name them. 0, or the HTTP status after fail(). */
static int prepare(fc_videos *v, const fc_video_post *in, const char *id, JsonObject *o,
                   fc_video_answer *a) {
  GBytes *audio = NULL, *image = NULL;
  char *rel = NULL;
  int st = 0;
  if (in->multipart && (st = form_object(in, o, &audio, &image, a))) goto out;
  /* paths in the shared folder are the server's to give */
  JsonNode *bg = json_object_get_member(o, "background");
  if (json_object_has_member(o, "audio")) {
    fail(a, 400, "audio: upload the file (multipart field 'audio') or give 'audio_url'");
    goto out;
  }
  if (bg && JSON_NODE_HOLDS_OBJECT(bg) && json_object_has_member(json_node_get_object(bg), "image")) {
    fail(a, 400, "background: an image is uploaded (multipart field 'background_image'); "
                 "here give a colour \"#RRGGBB\"");
    goto out;
  }
  JsonNode *url = json_object_get_member(o, "audio_url");
  if (url && !JSON_NODE_HOLDS_NULL(url)) {
    if (!JSON_NODE_HOLDS_VALUE(url) || json_node_get_value_type(url) != G_TYPE_STRING) {
      fail(a, 400, "audio_url: expected a string");
      goto out;
    }
    if (audio) {
      fail(a, 400, "audio_url: give either an uploaded 'audio' file or 'audio_url'");
      goto out;
    }
    GByteArray *b = NULL;
    if ((st = fetch(json_node_get_string(url), &b, a))) goto out;
    audio = g_byte_array_free_to_bytes(b);
  }
  json_object_remove_member(o, "audio_url");
  if (audio) {
    gsize n;
    const guint8 *d = g_bytes_get_data(audio, &n);
    if ((st = save_file(v, id, "audio", "input", d, n, a, &rel))) goto out;
    json_object_set_string_member(o, "audio", rel);
    g_free(rel), rel = NULL;
  }
  if (image) {
    gsize n;
    const guint8 *d = g_bytes_get_data(image, &n);
    if ((st = save_file(v, id, "background_image", "background", d, n, a, &rel))) goto out;
    JsonObject *b = json_object_new();
    bg = json_object_get_member(o, "background");
    if (bg && JSON_NODE_HOLDS_VALUE(bg) && json_node_get_value_type(bg) == G_TYPE_STRING)
      json_object_set_string_member(b, "color", json_node_get_string(bg));
    json_object_set_string_member(b, "image", rel);
    json_object_set_object_member(o, "background", b);
    g_free(rel), rel = NULL;
  }
out:
  if (audio) g_bytes_unref(audio);
  if (image) g_bytes_unref(image);
  return st ? st : a->status;
}

void fc_videos_create(fc_videos *v, fc_vstore *st, const fc_video_post *in, const char *owner,
                      const char *request_id, fc_video_answer *a) {
  fc_server *srv = v->srv;
  fc_vjob j = {0};
  fc_video_spec *spec = NULL;
  fc_video_plan *plan = NULL;
  JsonParser *jp = NULL;
  JsonObject *o = NULL;
  char *text = NULL, *sha = NULL, why[160];
  int err, keep_files = 0;
  fc_vjob_new_id(j.id);
  if (in->multipart) {
    o = json_object_new();
  } else {
    gsize n;
    const char *d = g_bytes_get_data(in->body, &n);
    if (!(jp = fc_json_parse_object(d ? d : "", n, FC_JSON_MAX_DEPTH, &o, why, sizeof why))) {
      fail(a, 400, "malformed JSON: the body %s", why);
      goto out;
    }
    json_object_ref(o);
  }
  if (prepare(v, in, j.id, o, a)) goto out;
  JsonNode *root = json_node_init_object(json_node_alloc(), o);
  text = json_to_string(root, FALSE);
  json_node_unref(root);
  if ((err = fc_video_spec_parse(text, strlen(text), &spec))) {
    fail(a, err == FC_EINVAL || err == FC_EFORMAT ? 400 : fc_http_status_of(err), "%s",
         fc_error_detail(err));
    goto out;
  }
  fc_avatar *av = fc_server_avatar_get(srv, spec->avatar, &err);
  if (!av) {
    fail(a, 400, "avatar: %s", fc_error_detail(err));
    goto out;
  }
  fc_server_avatar_put(srv, av);
  if ((err = fc_video_plan_create(spec, MAX_SHARDS, 0, &plan))) {
    fail(a, fc_http_status_of(err), "%s", fc_error_detail(err));
    goto out;
  }
  g_strlcpy(j.owner, owner, sizeof j.owner);
  g_strlcpy(j.request_id, request_id, sizeof j.request_id);
  j.shards = fc_video_plan_shards(plan);
  j.spec_json = fc_video_spec_json(spec);
  j.plan_json = fc_video_plan_json(plan);
  sha = g_compute_checksum_for_bytes(G_CHECKSUM_SHA256, in->body);
  char existing[40] = "";
  g_mutex_lock(&v->submit_lock);
  if (srv->keys && !under_limit(v, st, owner)) {
    g_mutex_unlock(&v->submit_lock);
    a->retry_after = 10;
    fail(a, 429, "%d videos of this key are waiting or rendering (the limit); try again when "
                 "one is done", v->max_active);
    goto out;
  }
  err = fc_vstore_submit(st, &j, in->idem_key, sha, existing);
  if (!err && srv->keys) note_active(v, owner, j.id); /* the cap is per key: none without */
  g_mutex_unlock(&v->submit_lock);
  if (err == FC_EEXIST) { /* the same request again: the first one's job */
    fc_vjob e = {0};
    if ((err = fc_vstore_get(st, existing, &e))) {
      fail(a, fc_http_status_of(err), "%s", fc_error_detail(err));
      goto out;
    }
    a->status = 200;
    a->text = g_strdup_printf("{\"id\":\"%s\",\"status\":\"%s\",\"request_id\":\"%s\","
                              "\"idempotent_replay\":true}", e.id,
                              fc_vjob_status_name(e.status), e.request_id);
    fc_vjob_clear(&e);
    goto out;
  }
  if (err == FC_EINVAL && in->idem_key) {
    fail(a, 409, "%s", fc_error_detail(err));
  } else if (err == FC_EBUSY) {
    a->retry_after = 30;
    fail(a, 503, "%s", fc_error_detail(err));
  } else if (err) {
    fail(a, err == FC_EIO ? 503 : fc_http_status_of(err), "%s", fc_error_detail(err));
  } else {
    keep_files = 1;
    a->status = 201;
    a->location = g_strdup_printf("/v1/videos/%s", j.id);
    a->text = g_strdup_printf("{\"id\":\"%s\",\"status\":\"pending\",\"request_id\":\"%s\","
                              "\"shards\":%d}", j.id, request_id, j.shards);
    g_message("video %s (request %s): submitted%s%s, %s, %d shard%s", j.id, request_id,
              *owner ? " by " : "", owner, spec->script ? "script" : "audio", j.shards,
              j.shards == 1 ? "" : "s");
  }
out:
  if (!keep_files) fc_vrun_remove_job_files(v->shared, j.id); /* what prepare() wrote */
  fc_vjob_clear(&j);
  fc_video_plan_free(plan);
  fc_video_spec_free(spec);
  if (o) json_object_unref(o);
  if (jp) g_object_unref(jp);
  g_free(text), g_free(sha);
}
