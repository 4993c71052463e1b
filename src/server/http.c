/* HTTP routes (LiveTalking's API plus WHEP, SSE, metrics, the web page) on libsoup 3.
 *
 * Every handler runs on the main loop and returns quickly: work that can take longer is queued
 * on the worker pool with the request paused, and finished from there (jobs.c). Request bodies
 * are bounded before they are read (an early handler refuses a missing or too large
 * Content-Length), JSON must be an object of the expected members, and every failure answers
 * {"code": -1, "msg": "..."} with a fitting 4xx/5xx status.
 */
#include "facecast/error.h"
#include "server/internal.h"

#include <json-glib/json-glib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_JSON_BODY (256 * 1024)
#define MAX_UPLOAD (32 * 1024 * 1024)

/* ---- responses -------------------------------------------------------------------------- */

static char *json_quote(const char *s) {
  JsonNode *n = json_node_new(JSON_NODE_VALUE);
  json_node_set_string(n, s ? s : "");
  char *q = json_to_string(n, FALSE);
  json_node_unref(n);
  return q;
}

void fc_http_error(SoupServerMessage *msg, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *text = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  char *q = json_quote(text);
  char *body = g_strdup_printf("{\"code\":-1,\"msg\":%s}", q);
  soup_server_message_set_status(msg, (guint)status, NULL);
  soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, body, strlen(body));
  g_free(q);
  g_free(text);
}

void fc_http_ok(SoupServerMessage *msg, const char *data_json) {
  char *body = data_json ? g_strdup_printf("{\"code\":0,\"msg\":\"ok\",\"data\":%s}", data_json)
                         : g_strdup("{\"code\":0,\"msg\":\"ok\"}");
  soup_server_message_set_status(msg, 200, NULL);
  soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, body, strlen(body));
}

static int status_of(int err) {
  switch (err) {
  case FC_EAGAIN: return 503;
  case FC_ENOTFOUND: return 404;
  case FC_ENOMEM:
  case FC_EMEDIA:
  case FC_EIO: return 500;
  default: return 400;
  }
}

/* ---- request helpers -------------------------------------------------------------------- */

static int is_method(SoupServerMessage *msg, const char *m) {
  return strcmp(soup_server_message_get_method(msg), m) == 0;
}

int fc_http_require_method(SoupServerMessage *msg, const char *m) {
  if (is_method(msg, m)) return 1;
  soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow", m);
  fc_http_error(msg, 405, "method %s not allowed here (use %s)",
                soup_server_message_get_method(msg), m);
  return 0;
}

int fc_http_has_content_type(SoupServerMessage *msg, const char *want) {
  const char *ct =
      soup_message_headers_get_content_type(soup_server_message_get_request_headers(msg), NULL);
  return ct && g_ascii_strcasecmp(ct, want) == 0;
}

/* Parses the body as a JSON object; answers 4xx and returns NULL when it is not one. */
JsonObject *fc_http_json_body(SoupServerMessage *msg, JsonParser **parser) {
  if (!fc_http_has_content_type(msg, "application/json")) {
    fc_http_error(msg, 415, "expected Content-Type: application/json");
    return NULL;
  }
  SoupMessageBody *b = soup_server_message_get_request_body(msg);
  GBytes *bytes = soup_message_body_flatten(b);
  gsize n;
  const char *d = g_bytes_get_data(bytes, &n);
  *parser = json_parser_new();
  GError *e = NULL;
  JsonObject *o = NULL;
  if (!n || !json_parser_load_from_data(*parser, d, (gssize)n, &e)) {
    fc_http_error(msg, 400, "malformed JSON: %s", e ? e->message : "empty body");
    if (e) g_error_free(e);
  } else if (!JSON_NODE_HOLDS_OBJECT(json_parser_get_root(*parser))) {
    fc_http_error(msg, 400, "malformed JSON: expected an object");
  } else {
    o = json_node_get_object(json_parser_get_root(*parser));
  }
  g_bytes_unref(bytes);
  if (!o) g_clear_object(parser);
  return o;
}

/* A string member, or NULL (answering 400) when absent or of another type. */
static const char *str_member(SoupServerMessage *msg, JsonObject *o, const char *name) {
  JsonNode *n = json_object_get_member(o, name);
  if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING)
    return json_node_get_string(n);
  fc_http_error(msg, 400, "'%s' must be a string", name);
  return NULL;
}

/* The session named by the "sessionid" member (a string, or a number as LiveTalking's page
 * sends it), referenced; answers 400/404 and returns NULL otherwise. */
static fc_session *session_of(fc_server *srv, SoupServerMessage *msg, JsonObject *o) {
  JsonNode *n = json_object_get_member(o, "sessionid");
  char buf[32];
  const char *id = NULL;
  if (n && JSON_NODE_HOLDS_VALUE(n)) {
    GType t = json_node_get_value_type(n);
    if (t == G_TYPE_STRING)
      id = json_node_get_string(n);
    else if (t == G_TYPE_INT64) {
      snprintf(buf, sizeof buf, "%lld", (long long)json_node_get_int(n));
      id = buf;
    }
  }
  if (!id) {
    fc_http_error(msg, 400, "'sessionid' is required");
    return NULL;
  }
  fc_session *s = fc_session_find(srv, id);
  if (!s) fc_http_error(msg, 404, "unknown session '%s'", id);
  return s;
}

static const char *query_get(GHashTable *q, const char *k) {
  return q ? g_hash_table_lookup(q, k) : NULL;
}

/* Queues a job that answers msg when done, with msg paused until then. */
static void queue_paused(fc_server *srv, SoupServerMessage *msg, fc_job *j) {
  j->msg = g_object_ref(msg);
  soup_server_message_pause(msg);
  if (fc_job_push(srv, j)) { /* the job (and its reference to msg) is gone */
    fc_http_error(msg, 500, "cannot queue the work");
    soup_server_message_unpause(msg);
  }
}

/* ---- sessions: /offer, /whep, DELETE ---------------------------------------------------- */

typedef struct answer_ev {
  fc_session *s;
  char *sdp;
  int err;
  char *detail;
} answer_ev;

static gboolean deliver_answer(gpointer data) {
  answer_ev *a = data;
  fc_session *s = a->s;
  SoupServerMessage *msg = s->offer_msg;
  if (!msg) return G_SOURCE_REMOVE; /* closed meanwhile */
  s->offer_msg = NULL;
  if (a->err) {
    fc_http_error(msg, status_of(a->err), "%s", a->detail);
    soup_server_message_unpause(msg);
    g_object_unref(msg);
    fc_session_close(s, "negotiation failed");
    return G_SOURCE_REMOVE;
  }
  if (s->whep) {
    char *loc = g_strdup_printf("/whep/%s", s->id);
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Location", loc);
    g_free(loc);
    soup_server_message_set_status(msg, 201, NULL);
    soup_server_message_set_response(msg, "application/sdp", SOUP_MEMORY_COPY, a->sdp,
                                     strlen(a->sdp));
  } else {
    char *q = json_quote(a->sdp);
    /* Top level, not wrapped: LiveTalking's page hands it to setRemoteDescription as it is. */
    char *body = g_strdup_printf("{\"sdp\":%s,\"type\":\"answer\",\"sessionid\":\"%s\"}", q, s->id);
    soup_server_message_set_status(msg, 200, NULL);
    soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, body, strlen(body));
    g_free(q);
  }
  soup_server_message_unpause(msg);
  g_object_unref(msg);
  return G_SOURCE_REMOVE;
}

static void free_answer(gpointer data) {
  answer_ev *a = data;
  fc_session_unref(a->s);
  g_free(a->sdp);
  g_free(a->detail);
  g_free(a);
}

/* From a GStreamer thread: hand the answer to the main loop. */
static void on_answer(void *user, const char *sdp, int err) {
  fc_session *s = user;
  answer_ev *a = g_new0(answer_ev, 1);
  fc_session_ref(s);
  a->s = s;
  a->sdp = g_strdup(sdp);
  a->err = err;
  a->detail = g_strdup(err ? fc_error_detail(err) : "");
  GSource *src = g_idle_source_new();
  g_source_set_callback(src, deliver_answer, a, free_answer);
  g_source_attach(src, s->srv->ctx);
  g_source_unref(src);
}

typedef struct state_ev {
  fc_session *s;
  fc_live_state st;
} state_ev;

static gboolean deliver_state(gpointer data) {
  state_ev *e = data;
  fc_session *s = e->s;
  s->state = e->st;
  if (e->st == FC_LIVE_CONNECTED) {
    if (s->connect_timer) g_source_remove(s->connect_timer);
    s->connect_timer = 0;
    if (!s->srv->p.quiet) g_message("session %s connected", s->id);
  } else if (e->st == FC_LIVE_FAILED || e->st == FC_LIVE_CLOSED) {
    fc_session_close(s, e->st == FC_LIVE_FAILED ? "connection failed" : "peer closed");
  }
  return G_SOURCE_REMOVE;
}

static void free_state(gpointer data) {
  state_ev *e = data;
  fc_session_unref(e->s);
  g_free(e);
}

static void on_state(void *user, fc_live_state st) {
  fc_session *s = user;
  state_ev *e = g_new(state_ev, 1);
  fc_session_ref(s);
  *e = (state_ev){s, st};
  GSource *src = g_idle_source_new();
  g_source_set_callback(src, deliver_state, e, free_state);
  g_source_attach(src, s->srv->ctx);
  g_source_unref(src);
}

static gboolean connect_timeout(gpointer data) {
  fc_session *s = data;
  s->connect_timer = 0;
  fc_session_close(s, "the peer never connected");
  return G_SOURCE_REMOVE;
}

/* Creates a session for an SDP offer and pauses msg until the answer is ready. */
static void start_session(fc_server *srv, SoupServerMessage *msg, const char *sdp, int whep,
                          fc_avatar *av) {
  int err;
  fc_session *s = fc_session_new(srv, av, &err);
  if (!s) {
    fc_http_error(msg, status_of(err), "%s", fc_error_detail(err));
    return;
  }
  s->whep = whep;
  s->offer_msg = g_object_ref(msg);
  soup_server_message_pause(msg);
  fc_live_params lp = {.kind = FC_LIVE_WEBRTC,
                       .width = fc_avatar_width(s->avatar),
                       .height = fc_avatar_height(s->avatar),
                       .fps = FC_FPS,
                       .sample_rate = FC_SAMPLE_RATE,
                       .stun_server = srv->p.stun_server,
                       .turn_server = srv->p.turn_server,
                       .x264_preset = srv->p.x264_preset,
                       .on_state = on_state,
                       .user = s};
  /* The callbacks hold no reference: they only run while the output exists, and the session
   * outlives its output (fc_session_close destroys the output before dropping the table's
   * reference; the marshalled events take their own). */
  fc_live *live = fc_live_create(&lp, sdp, on_answer, s, &err);
  if (!live) {
    g_object_unref(s->offer_msg);
    s->offer_msg = NULL;
    fc_http_error(msg, status_of(err), "%s", fc_error_detail(err));
    soup_server_message_unpause(msg);
    fc_session_close(s, "bad offer");
    fc_session_unref(s);
    return;
  }
  g_mutex_lock(&s->out_lock);
  s->live = live;
  g_mutex_unlock(&s->out_lock);
  s->connect_timer = g_timeout_add_seconds(30, connect_timeout, s);
  if (!srv->p.quiet) g_message("session %s created (%s)", s->id, whep ? "WHEP" : "offer");
  fc_session_unref(s);
}

static void h_offer(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                    gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  const char *sdp = str_member(msg, o, "sdp");
  const char *type = sdp ? str_member(msg, o, "type") : NULL;
  if (type && strcmp(type, "offer") != 0) {
    fc_http_error(msg, 400, "'type' must be \"offer\", not \"%s\"", type);
  } else if (type) {
    JsonNode *av = json_object_get_member(o, "avatar");
    const char *avname =
        av && JSON_NODE_HOLDS_VALUE(av) && json_node_get_value_type(av) == G_TYPE_STRING
            ? json_node_get_string(av)
            : NULL;
    int err = 0;
    fc_avatar *a = fc_server_avatar_get(srv, avname, &err);
    if (!a)
      fc_http_error(msg, err == FC_ENOTFOUND ? 404 : 400, "%s", fc_error_detail(err));
    else
      start_session(srv, msg, sdp, 0, a);
  }
  g_object_unref(jp);
}

static void h_whep(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                   gpointer user) {
  fc_server *srv = user;
  if (is_method(msg, "DELETE") && g_str_has_prefix(path, "/whep/")) {
    fc_session *s = fc_session_find(srv, path + 6);
    if (!s) {
      fc_http_error(msg, 404, "unknown session '%s'", path + 6);
      return;
    }
    fc_session_close(s, "WHEP resource deleted");
    fc_session_unref(s);
    {
      fc_http_ok(msg, NULL);
      return;
    }
  }
  if (strcmp(path, "/whep") != 0) {
    fc_http_error(msg, 405, "WHEP: POST /whep, DELETE /whep/{id}");
    return;
  }
  if (!fc_http_require_method(msg, "POST")) return;
  if (!fc_http_has_content_type(msg, "application/sdp")) {
    fc_http_error(msg, 415, "expected Content-Type: application/sdp");
    return;
  }
  GBytes *b = soup_message_body_flatten(soup_server_message_get_request_body(msg));
  gsize n;
  const char *d = g_bytes_get_data(b, &n);
  char *sdp = g_strndup(d, n);
  g_bytes_unref(b);
  int err = 0; /* WHEP has no body for options: the avatar comes as ?avatar=ID */
  fc_avatar *a = fc_server_avatar_get(srv, query_get(q, "avatar"), &err);
  if (!a)
    fc_http_error(msg, err == FC_ENOTFOUND ? 404 : 400, "%s", fc_error_detail(err));
  else
    start_session(srv, msg, sdp, 1, a);
  g_free(sdp);
}

static void h_session(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                      gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "DELETE")) return;
  const char *id = g_str_has_prefix(path, "/session/") ? path + 9 : "";
  fc_session *s = fc_session_find(srv, id);
  if (!s) {
    fc_http_error(msg, 404, "unknown session '%s'", id);
    return;
  }
  fc_session_close(s, "deleted");
  fc_session_unref(s);
  fc_http_ok(msg, NULL);
}

/* ---- speech ----------------------------------------------------------------------------- */

static void h_human(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                    gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = session_of(srv, msg, o);
  const char *text = s ? str_member(msg, o, "text") : NULL;
  JsonNode *tn = json_object_get_member(o, "type");
  const char *type =
      tn && JSON_NODE_HOLDS_VALUE(tn) && json_node_get_value_type(tn) == G_TYPE_STRING
          ? json_node_get_string(tn)
          : "echo";
  JsonNode *vn = json_object_get_member(o, "voice");
  const char *voice =
      vn && JSON_NODE_HOLDS_VALUE(vn) && json_node_get_value_type(vn) == G_TYPE_STRING
          ? json_node_get_string(vn)
          : NULL;
  if (text) {
    JsonNode *in = json_object_get_member(o, "interrupt");
    int interrupt = 0, bad_interrupt = 0;
    if (in && JSON_NODE_HOLDS_VALUE(in) && json_node_get_value_type(in) == G_TYPE_BOOLEAN)
      interrupt = json_node_get_boolean(in);
    else if (in && !JSON_NODE_HOLDS_NULL(in))
      bad_interrupt = 1;
    if (bad_interrupt) {
      fc_http_error(msg, 400, "'interrupt' must be true or false");
    } else if (strcmp(type, "chat") == 0) {
      fc_http_error(msg, 501, "type 'chat' is not configured on this server (no LLM); use 'echo'");
    } else if (strcmp(type, "echo") != 0) {
      fc_http_error(msg, 400, "'type' must be \"echo\" or \"chat\"");
    } else {
      fc_job *j = g_new0(fc_job, 1);
      j->kind = FC_JOB_SPEAK;
      j->s = s;
      fc_session_ref(s);
      j->text = g_strdup(text);
      j->voice = g_strdup(voice);
      j->interrupt = interrupt;
      queue_paused(srv, msg, j);
    }
  }
  if (s) fc_session_unref(s);
  g_object_unref(jp);
}

int fc_http_multipart(SoupServerMessage *msg, const char *const *file_fields, GBytes **file,
                      char **filename, const char *const *names, char **values, int n) {
  SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
  GBytes *body = soup_message_body_flatten(soup_server_message_get_request_body(msg));
  SoupMultipart *mp = soup_multipart_new_from_message(h, body);
  g_bytes_unref(body);
  *file = NULL;
  if (filename) *filename = NULL;
  for (int k = 0; k < n; k++) values[k] = NULL;
  if (!mp) {
    fc_http_error(msg, 400, "malformed multipart body");
    return -1;
  }
  for (int i = 0; i < soup_multipart_get_length(mp); i++) {
    SoupMessageHeaders *ph;
    GBytes *pb;
    if (!soup_multipart_get_part(mp, i, &ph, &pb)) continue;
    GHashTable *params = NULL;
    char *disp = NULL;
    if (soup_message_headers_get_content_disposition(ph, &disp, &params) && params) {
      const char *field = g_hash_table_lookup(params, "name");
      const char *fname = g_hash_table_lookup(params, "filename");
      for (int k = 0; field && file_fields[k] && !*file; k++)
        if (strcmp(field, file_fields[k]) == 0) {
          *file = g_bytes_ref(pb);
          if (filename) *filename = g_strdup(fname ? fname : "upload");
        }
      for (int k = 0; field && k < n; k++)
        if (strcmp(field, names[k]) == 0 && !values[k]) {
          gsize len;
          const char *d = g_bytes_get_data(pb, &len);
          values[k] = g_strstrip(g_strndup(d, len < 1024 ? len : 1024));
        }
    }
    g_free(disp);
    if (params) g_hash_table_destroy(params);
  }
  soup_multipart_free(mp);
  return 0;
}

static void h_humanaudio(SoupServer *server, SoupServerMessage *msg, const char *path,
                         GHashTable *q, gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "POST")) return;
  if (!fc_http_has_content_type(msg, "multipart/form-data")) {
    fc_http_error(msg, 415, "expected multipart/form-data with 'file' and 'sessionid'");
    return;
  }
  GBytes *file = NULL;
  char *name = NULL, *sid = NULL;
  static const char *const file_fields[] = {"file", NULL}, *const names[] = {"sessionid"};
  if (fc_http_multipart(msg, file_fields, &file, &name, names, &sid, 1)) return;
  fc_session *s = NULL;
  if (!sid)
    fc_http_error(msg, 400, "'sessionid' field is required");
  else if (!file)
    fc_http_error(msg, 400, "'file' field (a WAV file) is required");
  else if (!(s = fc_session_find(srv, sid)))
    fc_http_error(msg, 404, "unknown session '%s'", sid);
  else {
    fc_job *j = g_new0(fc_job, 1);
    j->kind = FC_JOB_AUDIO;
    j->s = s;
    j->data = file;
    j->name = name;
    file = NULL;
    name = NULL;
    queue_paused(srv, msg, j);
  }
  if (file) g_bytes_unref(file);
  g_free(name);
  g_free(sid);
}

static void h_interrupt(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                        gpointer user) {
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = session_of(user, msg, o);
  if (s) {
    fc_session_interrupt(s);
    fc_http_ok(msg, NULL);
    fc_session_unref(s);
  }
  g_object_unref(jp);
}

static void h_is_speaking(SoupServer *server, SoupServerMessage *msg, const char *path,
                          GHashTable *q, gpointer user) {
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = session_of(user, msg, o);
  if (s) {
    fc_http_ok(msg, fc_session_is_speaking(s) ? "true" : "false");
    fc_session_unref(s);
  }
  g_object_unref(jp);
}

/* ---- recording -------------------------------------------------------------------------- */

/* POST /set_audiotype {sessionid, audiotype}: plays one of the avatar's action clips in the
 * session's idle time. audiotype: a clip's name, or a number as LiveTalking's pages send it
 * (N >= 1: the N-th clip; 0: stop the clip playing). */
static void h_set_audiotype(SoupServer *server, SoupServerMessage *msg, const char *path,
                            GHashTable *q, gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = session_of(srv, msg, o);
  JsonNode *n = s ? json_object_get_member(o, "audiotype") : NULL;
  int clip = -2;
  if (!s) {
    /* answered */
  } else if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
    clip = fc_avatar_find_clip(s->avatar, json_node_get_string(n));
    if (clip < 0) {
      fc_http_error(msg, 404, "%s", fc_error_detail(clip));
      clip = -2;
    }
  } else if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64) {
    gint64 v = json_node_get_int(n);
    if (v < 0 || v > fc_avatar_clip_count(s->avatar))
      fc_http_error(msg, 404, "audiotype %lld: the avatar has %d action clips", (long long)v,
                    fc_avatar_clip_count(s->avatar));
    else
      clip = (int)v - 1;
  } else {
    fc_http_error(msg, 400, "'audiotype' must be a clip name or a number");
  }
  if (clip >= -1) {
    g_mutex_lock(&s->lock);
    int err = fc_stream_play_clip(s->stream, clip);
    g_mutex_unlock(&s->lock);
    if (err) fc_http_error(msg, 400, "%s", fc_error_detail(err));
    else fc_http_ok(msg, NULL);
  }
  if (s) fc_session_unref(s);
  g_object_unref(jp);
}

static void serve_file(SoupServerMessage *msg, const char *file, const char *type) {
  GError *e = NULL;
  GMappedFile *mf = g_mapped_file_new(file, FALSE, &e);
  if (!mf) {
    fc_http_error(msg, 404, "not found");
    g_error_free(e);
    return;
  }
  GBytes *b = g_mapped_file_get_bytes(mf);
  g_mapped_file_unref(mf);
  soup_server_message_set_status(msg, 200, NULL);
  soup_message_headers_set_content_type(soup_server_message_get_response_headers(msg), type, NULL);
  soup_message_body_append_bytes(soup_server_message_get_response_body(msg), b);
  g_bytes_unref(b);
}

static void h_record(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                     gpointer user) {
  fc_server *srv = user;
  if (g_str_has_prefix(path, "/record/")) {
    if (!fc_http_require_method(msg, "GET")) return;
    const char *file = g_hash_table_lookup(srv->recordings, path + 8);
    if (!file) {
      fc_http_error(msg, 404, "no finished recording for session '%s'", path + 8);
      return;
    }
    {
      serve_file(msg, file, "video/mp4");
      return;
    }
  }
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = session_of(srv, msg, o);
  const char *type = s ? str_member(msg, o, "type") : NULL;
  if (type && strcmp(type, "start_record") == 0) {
    g_mutex_lock(&s->out_lock);
    int busy = s->rec != NULL;
    g_mutex_unlock(&s->out_lock);
    if (busy) {
      fc_http_error(msg, 409, "session %s is already recording", s->id);
    } else {
      int err;
      char *file =
          g_strdup_printf("%s/%s-%lld.mp4", srv->record_dir, s->id, (long long)g_get_real_time());
      fc_recorder *rec = fc_recorder_start(file, fc_avatar_width(s->avatar),
                                           fc_avatar_height(s->avatar), &err);
      g_free(file);
      if (!rec) {
        fc_http_error(msg, 500, "cannot record: %s", fc_error_detail(err));
      } else {
        g_mutex_lock(&s->out_lock);
        s->rec = rec;
        s->rec_first = -1; /* the pacer numbers the recording from its first frame */
        g_mutex_unlock(&s->out_lock);
        fc_http_ok(msg, NULL);
      }
    }
  } else if (type && strcmp(type, "end_record") == 0) {
    g_mutex_lock(&s->out_lock);
    fc_recorder *rec = s->rec;
    s->rec = NULL;
    g_mutex_unlock(&s->out_lock);
    if (!rec) {
      fc_http_error(msg, 409, "session %s is not recording", s->id);
    } else {
      fc_job *j = g_new0(fc_job, 1);
      j->kind = FC_JOB_RECORD_STOP;
      j->s = s;
      fc_session_ref(s);
      j->rec = rec;
      queue_paused(srv, msg, j);
    }
  } else if (type) {
    fc_http_error(msg, 400, "'type' must be \"start_record\" or \"end_record\"");
  }
  if (s) fc_session_unref(s);
  g_object_unref(jp);
}

/* ---- events and audio in ---------------------------------------------------------------- */

static void h_sse(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                  gpointer user) {
  if (!fc_http_require_method(msg, "GET")) return;
  const char *id = query_get(q, "sessionid");
  if (!id) {
    fc_http_error(msg, 400, "'sessionid' query parameter is required");
    return;
  }
  fc_session *s = fc_session_find(user, id);
  if (!s) {
    fc_http_error(msg, 404, "unknown session '%s'", id);
    return;
  }
  SoupMessageHeaders *h = soup_server_message_get_response_headers(msg);
  soup_message_headers_set_encoding(h, SOUP_ENCODING_CHUNKED);
  soup_message_headers_set_content_type(h, "text/event-stream", NULL);
  soup_message_headers_replace(h, "Cache-Control", "no-cache");
  soup_server_message_set_status(msg, 200, NULL);
  static const char hello[] = ": facecast events\n\n";
  soup_message_body_append(soup_server_message_get_response_body(msg), SOUP_MEMORY_STATIC, hello,
                           sizeof hello - 1);
  fc_session_add_sse(s, msg);
  fc_session_unref(s);
}

typedef struct ws_ctx {
  fc_server *srv;
  char id[24];
  float buf[8192];
} ws_ctx;

static void ws_message(SoupWebsocketConnection *c, gint type, GBytes *msg, gpointer user) {
  ws_ctx *w = user;
  if (type != SOUP_WEBSOCKET_DATA_BINARY) {
    soup_websocket_connection_send_text(
        c, "{\"code\":-1,\"msg\":\"send binary PCM16LE, 16 kHz mono\"}");
    return;
  }
  fc_session *s = fc_session_find(w->srv, w->id);
  if (!s) {
    soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "session closed");
    return;
  }
  gsize n;
  const uint8_t *d = g_bytes_get_data(msg, &n);
  size_t samples = n / 2;
  for (size_t off = 0; off < samples;) {
    size_t k = samples - off < G_N_ELEMENTS(w->buf) ? samples - off : G_N_ELEMENTS(w->buf);
    for (size_t i = 0; i < k; i++) {
      const uint8_t *p = d + 2 * (off + i);
      w->buf[i] = (int16_t)(p[0] | p[1] << 8) / 32768.0f;
    }
    g_mutex_lock(&s->lock);
    int err = s->closed ? FC_ENOTFOUND : fc_stream_push_audio(s->stream, w->buf, k);
    if (!err) fc_session_want_fill_locked(s);
    g_mutex_unlock(&s->lock);
    if (err) break; /* queue full: the rest of this message is dropped */
    off += k;
  }
  fc_session_unref(s);
}

static void ws_closed(SoupWebsocketConnection *c, gpointer user) {
  ws_ctx *w = user;
  fc_session *s = fc_session_find(w->srv, w->id);
  if (s) {
    GList *l = g_list_find(s->ws, c);
    if (l) {
      s->ws = g_list_delete_link(s->ws, l);
      g_object_unref(c);
    }
    fc_session_unref(s);
  }
}

static void free_ws_ctx(gpointer data, GClosure *closure) { g_free(data); }

static void h_ws_audio(SoupServer *server, SoupServerMessage *msg, const char *path,
                       SoupWebsocketConnection *c, gpointer user) {
  fc_server *srv = user;
  GUri *uri = soup_server_message_get_uri(msg);
  const char *query = g_uri_get_query(uri);
  GHashTable *q = query ? g_uri_parse_params(query, -1, "&", G_URI_PARAMS_NONE, NULL) : NULL;
  const char *id = q ? g_hash_table_lookup(q, "sessionid") : NULL;
  fc_session *s = fc_session_find(srv, id);
  if (!s) {
    soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION,
                                    id ? "unknown session" : "sessionid query parameter required");
  } else {
    ws_ctx *w = g_new0(ws_ctx, 1);
    w->srv = srv;
    g_strlcpy(w->id, s->id, sizeof w->id);
    s->ws = g_list_prepend(s->ws, g_object_ref(c));
    g_signal_connect_data(c, "message", G_CALLBACK(ws_message), w, NULL, 0);
    g_signal_connect_data(c, "closed", G_CALLBACK(ws_closed), w, free_ws_ctx, 0);
    fc_session_unref(s);
  }
  if (q) g_hash_table_destroy(q);
}

/* ---- health, metrics, static files ------------------------------------------------------ */

static void h_healthz(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                      gpointer user) {
  fc_server *srv = user;
  g_mutex_lock(&srv->lock);
  guint n = g_hash_table_size(srv->sessions);
  g_mutex_unlock(&srv->lock);
  /* The frame size and the mouth's box let clients (and tests) watch the lips. */
  const fc_mouth_geom *m = fc_avatar_mouth(srv->avatar, 0);
  char *d = g_strdup_printf(
      "{\"sessions\":%u,\"max_sessions\":%d,\"model\":\"%s\",\"width\":%d,\"height\":%d,"
      "\"mouth\":{\"x\":%d,\"y\":%d,\"w\":%d,\"h\":%d}}",
      n, srv->p.max_sessions, fc_lipsync_name(srv->lipsync), fc_avatar_width(srv->avatar),
      fc_avatar_height(srv->avatar), (int)(m->cx - m->half_w), (int)(m->cy - 0.05f * m->face_h),
      (int)(2 * m->half_w), (int)(0.2f * m->face_h));
  fc_http_ok(msg, d);
  g_free(d);
}

static void h_metrics(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                      gpointer user) {
  GString *o = g_string_new(NULL);
  fc_metrics_render(user, o);
  soup_server_message_set_status(msg, 200, NULL);
  gsize len = o->len;
  soup_server_message_set_response(msg, "text/plain; version=0.0.4", SOUP_MEMORY_TAKE,
                                   g_string_free(o, FALSE), len);
}

static const char *mime_of(const char *path) {
  const char *dot = strrchr(path, '.');
  static const char *const map[][2] = {{".html", "text/html; charset=utf-8"},
                                       {".js", "text/javascript"},
                                       {".mjs", "text/javascript"},
                                       {".css", "text/css"},
                                       {".json", "application/json"},
                                       {".svg", "image/svg+xml"},
                                       {".png", "image/png"},
                                       {".ico", "image/x-icon"}};
  for (size_t i = 0; dot && i < G_N_ELEMENTS(map); i++)
    if (g_ascii_strcasecmp(dot, map[i][0]) == 0) return map[i][1];
  return "application/octet-stream";
}

static void h_static(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                     gpointer user) {
  fc_server *srv = user;
  if (!is_method(msg, "GET") && !is_method(msg, "HEAD")) {
    fc_http_error(msg, 404, "no route %s %s", soup_server_message_get_method(msg), path);
    return;
  }
  if (strcmp(path, "/") == 0) path = "/index.html";
  if (strstr(path, "..") || strchr(path, '\\')) {
    fc_http_error(msg, 400, "bad path");
    return;
  }
  char *file = g_build_filename(srv->web_dir, path + 1, NULL);
  if (g_file_test(file, G_FILE_TEST_IS_REGULAR))
    serve_file(msg, file, mime_of(file));
  else
    fc_http_error(msg, 404, "not found: %s", path);
  g_free(file);
}

/* Answers on a stolen connection and closes it. libsoup reads a request's body even after an
 * early handler has set the status, so a refused body must not be left to it: the answer is
 * written straight to the socket and the connection dropped, unread. */
static void refuse_now(SoupServerMessage *msg, int status, const char *reason, const char *text) {
  char *q = json_quote(text);
  char *body = g_strdup_printf("{\"code\":-1,\"msg\":%s}", q);
  char *resp = g_strdup_printf("HTTP/1.1 %d %s\r\nServer: facecast\r\nContent-Type: application/json\r\n"
                               "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                               status, reason, strlen(body), body);
  GIOStream *io = soup_server_message_steal_connection(msg);
  if (io) {
    g_output_stream_write_all(g_io_stream_get_output_stream(io), resp, strlen(resp), NULL, NULL,
                              NULL);
    g_io_stream_close(io, NULL, NULL);
    g_object_unref(io);
  }
  g_free(resp);
  g_free(body);
  g_free(q);
}

/* Bodies are refused before they are read: POST needs a Content-Length within the route's
 * limit (chunked uploads of unknown size would have to be buffered whole first). */
static void early(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                  gpointer user) {
  if (!is_method(msg, "POST") && !is_method(msg, "PUT") && !is_method(msg, "PATCH")) return;
  SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
  goffset limit = strcmp(path, "/humanaudio") == 0            ? MAX_UPLOAD
                  : strncmp(path, "/api/avatar/task", 16) == 0 ? FC_MAX_AVATAR_UPLOAD
                                                               : MAX_JSON_BODY;
  if (soup_message_headers_get_encoding(h) != SOUP_ENCODING_CONTENT_LENGTH) {
    refuse_now(msg, 411, "Length Required", "a request body needs a Content-Length");
  } else if (soup_message_headers_get_content_length(h) > limit) {
    char *t = g_strdup_printf("request body of %lld bytes is over the limit of %lld",
                              (long long)soup_message_headers_get_content_length(h),
                              (long long)limit);
    refuse_now(msg, 413, "Payload Too Large", t);
    g_free(t);
  }
}

void fc_http_early(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                   gpointer user) {
  early(server, msg, path, q, user);
}

void fc_http_register(fc_server *srv) {
  static const struct {
    const char *path;
    SoupServerCallback cb;
  } routes[] = {{"/offer", h_offer},
                {"/whep", h_whep},
                {"/session", h_session},
                {"/human", h_human},
                {"/humanaudio", h_humanaudio},
                {"/interrupt_talk", h_interrupt},
                {"/is_speaking", h_is_speaking},
                {"/set_audiotype", h_set_audiotype},
                {"/record", h_record},
                {"/sse", h_sse},
                {"/healthz", h_healthz},
                {"/metrics", h_metrics},
                {NULL, h_static}};
  SoupServer *s = srv->soup;
  /* libsoup keeps early and normal handlers in one entry per path and picks the most specific
   * path, so the body check is registered on every path, not once at the root. */
  for (size_t i = 0; i < G_N_ELEMENTS(routes); i++) {
    soup_server_add_early_handler(s, routes[i].path, early, srv, NULL);
    soup_server_add_handler(s, routes[i].path, routes[i].cb, srv, NULL);
  }
  soup_server_add_websocket_handler(s, "/ws/audio", NULL, NULL, h_ws_audio, srv, NULL);
  fc_avatar_tasks_register(srv);
}
