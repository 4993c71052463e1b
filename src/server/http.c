/* HTTP routes (LiveTalking's API plus WHEP, SSE, metrics, the web page) on libsoup 3: this file
 * holds the plumbing every route shares (responses, request parsing, the early body check,
 * registration) and the small routes; sessions are made in routes_session.c, spoken to in
 * routes_speech.c, avatars prepared in avatars.c.
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

char *fc_http_json_quote(const char *s) {
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
  char *q = fc_http_json_quote(text);
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

int fc_http_status_of(int err) {
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

int fc_http_is_method(SoupServerMessage *msg, const char *m) {
  return strcmp(soup_server_message_get_method(msg), m) == 0;
}

int fc_http_require_method(SoupServerMessage *msg, const char *m) {
  if (fc_http_is_method(msg, m)) return 1;
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
const char *fc_http_str_member(SoupServerMessage *msg, JsonObject *o, const char *name) {
  JsonNode *n = json_object_get_member(o, name);
  if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING)
    return json_node_get_string(n);
  fc_http_error(msg, 400, "'%s' must be a string", name);
  return NULL;
}

/* The session named by the "sessionid" member (a string, or a number as LiveTalking's page
 * sends it), referenced; answers 400/404 and returns NULL otherwise. */
fc_session *fc_http_session_of(fc_server *srv, SoupServerMessage *msg, JsonObject *o) {
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

const char *fc_http_query_get(GHashTable *q, const char *k) {
  return q ? g_hash_table_lookup(q, k) : NULL;
}

/* Queues a job that answers msg when done, with msg paused until then. */
void fc_http_queue_paused(fc_server *srv, SoupServerMessage *msg, fc_job *j) {
  j->msg = g_object_ref(msg);
  soup_server_message_pause(msg);
  if (fc_job_push(srv, j)) { /* the job (and its reference to msg) is gone */
    fc_http_error(msg, 500, "cannot queue the work");
    soup_server_message_unpause(msg);
  }
}

void fc_http_serve_file(SoupServerMessage *msg, const char *file, const char *type) {
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
  if (!fc_http_is_method(msg, "GET") && !fc_http_is_method(msg, "HEAD")) {
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
    fc_http_serve_file(msg, file, mime_of(file));
  else
    fc_http_error(msg, 404, "not found: %s", path);
  g_free(file);
}

/* Answers on a stolen connection and closes it. libsoup reads a request's body even after an
 * early handler has set the status, so a refused body must not be left to it: the answer is
 * written straight to the socket and the connection dropped, unread. */
static void refuse_now(SoupServerMessage *msg, int status, const char *reason, const char *text) {
  char *q = fc_http_json_quote(text);
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
  if (!fc_http_is_method(msg, "POST") && !fc_http_is_method(msg, "PUT") && !fc_http_is_method(msg, "PATCH")) return;
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
  } routes[] = {{"/offer", fc_route_offer},
                {"/whep", fc_route_whep},
                {"/session", fc_route_session},
                {"/human", fc_route_human},
                {"/humanaudio", fc_route_humanaudio},
                {"/interrupt_talk", fc_route_interrupt},
                {"/is_speaking", fc_route_is_speaking},
                {"/set_audiotype", fc_route_set_audiotype},
                {"/record", fc_route_record},
                {"/sse", fc_route_sse},
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
  soup_server_add_websocket_handler(s, "/ws/audio", NULL, NULL, fc_route_ws_audio, srv, NULL);
  fc_avatar_tasks_register(srv);
  fc_render_tasks_register(srv);
}
