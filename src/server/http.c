/* The HTTP plumbing every route shares, on libsoup 3, knowing no route: responses and the one
 * error-code → status map, request parsing (JSON, forms, the session a request names, its API
 * key), the early check every request passes before its body is read, and registration. The
 * route table is routes.c; sessions are made in routes_session.c, spoken to in
 * routes_speech.c; background jobs (avatars, renders) are src/jobs/.
 *
 * Every handler runs on the main loop and returns quickly: work that can take longer is queued
 * on the worker pool with the request paused, and finished from there (workers.c). Request bodies
 * are bounded before they are read (an early handler refuses a missing or too large
 * Content-Length), JSON must be an object of the expected members, and every failure answers
 * {"code": -1, "msg": "..."} with a fitting 4xx/5xx status.
 */
#include "facecast/error.h"
#include "server/internal.h"
#include "core/jsonin.h"
#include "server/fleet.h"
#include "server/keys.h"
#include "server/listener.h"
#include "server/multipart.h"

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

/* Messages are capped: a detail that quotes a client's input (a path, an id) must never send a
 * large input back. */
#define MAX_ERROR_TEXT 300

void fc_http_error(SoupServerMessage *msg, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *text = g_strdup_vprintf(fmt, ap);
  va_end(ap);
  if (strlen(text) > MAX_ERROR_TEXT) {
    const char *end = g_utf8_find_prev_char(text, text + MAX_ERROR_TEXT - 3);
    strcpy((char *)(end ? end : text), "...");
  }
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

/* The one map from facecast's error codes to HTTP statuses: what the client can fix is 4xx,
 * what the server could not do is 5xx. */
int fc_http_status_of(int err) {
  switch (err) {
  case FC_EAGAIN: return 429;   /* this client's queue is full: slow down */
  case FC_EBUSY: return 503;    /* the server is full: try again later */
  case FC_EREMOTE: return 502;  /* the LLM, a TTS or ASR service behind us failed */
  case FC_ENOTFOUND: return 404;
  case FC_ECANCELED: return 409;
  case FC_EEXIST: return 409;
  case FC_ENOMEM:
  case FC_EMEDIA:
  case FC_EIO:
  case FC_ETTS: return 500;
  default: return 400;          /* FC_EINVAL, FC_EFORMAT, FC_EUNSUPPORTED, FC_ENOFACE */
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
  char why[160];
  JsonObject *o = NULL;
  *parser = fc_json_parse_object(d, n, FC_JSON_MAX_DEPTH, &o, why, sizeof why);
  if (!o) fc_http_error(msg, 400, "malformed JSON: the body %s", why);
  g_bytes_unref(bytes);
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

int fc_http_opt_str(SoupServerMessage *msg, JsonObject *o, const char *name, const char **out) {
  JsonNode *n = json_object_get_member(o, name);
  *out = NULL;
  if (!n || JSON_NODE_HOLDS_NULL(n)) return 0;
  if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
    *out = json_node_get_string(n);
    return 0;
  }
  fc_http_error(msg, 400, "'%s' must be a string", name);
  return -1;
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
  fc_session *s = fc_http_session_find(srv, msg, id);
  if (!s) fc_http_error(msg, 404, "unknown session");
  return s;
}

const char *fc_http_owner(SoupServerMessage *msg) {
  return g_object_get_data(G_OBJECT(msg), "fc-owner");
}

fc_session *fc_http_session_find(fc_server *srv, SoupServerMessage *msg, const char *id) {
  fc_session *s = fc_session_find(srv, id);
  const char *who = fc_http_owner(msg);
  /* With API keys, a key sees only its own sessions (and no one learns that others exist);
   * a request without a key (the capability routes) is let through by the id alone. The push
   * session's id is no secret ("0"): any key may act on it, and no request without one. */
  if (s && srv->keys && (s->push ? !who : who && strcmp(who, s->owner) != 0)) {
    fc_session_unref(s);
    s = NULL;
  }
  return s;
}

const char *fc_http_query_get(GHashTable *q, const char *k) {
  return q ? g_hash_table_lookup(q, k) : NULL;
}

/* multipart/form-data through our own parser (multipart.h says why not libsoup's). */
int fc_http_multipart(SoupServerMessage *msg, const char *const *file_fields, GBytes **file,
                      char **filename, const char *const *names, char **values, int n) {
  SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
  GHashTable *params = NULL;
  soup_message_headers_get_content_type(h, &params);
  const char *boundary = params ? g_hash_table_lookup(params, "boundary") : NULL;
  GBytes *body = soup_message_body_flatten(soup_server_message_get_request_body(msg));
  gsize len;
  const char *d = g_bytes_get_data(body, &len);
  fc_form_part parts[FC_MULTIPART_MAX_PARTS];
  char why[120];
  int np = fc_multipart_parse(d ? d : "", len, boundary, parts, FC_MULTIPART_MAX_PARTS, why, sizeof why);
  *file = NULL;
  if (filename) *filename = NULL;
  for (int k = 0; k < n; k++) values[k] = NULL;
  if (np < 0) {
    fc_http_error(msg, 400, "%s", why);
  } else {
    for (int i = 0; i < np; i++) {
      const fc_form_part *pt = &parts[i];
      for (int k = 0; file_fields[k] && !*file; k++)
        if (strcmp(pt->name, file_fields[k]) == 0) {
          *file = g_bytes_new_from_bytes(body, (gsize)(pt->data - d), pt->size);
          if (filename) *filename = g_strdup(pt->has_filename ? pt->filename : "upload");
        }
      for (int k = 0; k < n; k++)
        if (strcmp(pt->name, names[k]) == 0 && !values[k])
          values[k] = g_strstrip(g_strndup(pt->data, pt->size < 1024 ? pt->size : 1024));
    }
  }
  g_bytes_unref(body);
  if (params) g_hash_table_destroy(params);
  return np < 0 ? -1 : 0;
}

/* Queues a job that answers msg when done, with msg paused until then. */
void fc_http_queue_paused(fc_server *srv, SoupServerMessage *msg, fc_job *j) {
  /* Speech waiting for a worker is bounded per session: each holds its text or upload and a
   * connection until its turn. */
  if (j->s && (j->kind == FC_JOB_SPEAK || j->kind == FC_JOB_AUDIO)) {
    if (g_atomic_int_add(&j->s->jobs_waiting, 1) >= FC_SESSION_MAX_WAITING) {
      g_atomic_int_add(&j->s->jobs_waiting, -1);
      fc_http_error(msg, 429, "%d requests of this session already wait to be spoken; try again "
                              "when one is done", FC_SESSION_MAX_WAITING);
      fc_job_free(j);
      return;
    }
    j->counted = 1;
  }
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
  /* Byte ranges: libsoup answers a satisfiable Range of a complete 200 body itself (206 with
   * Content-Range, or multipart/byteranges for several); an unsatisfiable one is answered
   * here, with the size a client needs to ask again (RFC 9110's Content-Range: bytes * /N). */
  SoupMessageHeaders *rq = soup_server_message_get_request_headers(msg);
  SoupMessageHeaders *rs = soup_server_message_get_response_headers(msg);
  soup_message_headers_replace(rs, "Accept-Ranges", "bytes");
  SoupRange *ranges = NULL;
  int nr = 0, satisfiable = 0;
  goffset size = (goffset)g_bytes_get_size(b);
  /* a Range that does not parse is ignored (the whole file), one that parses but starts past
   * the end everywhere is refused */
  if (soup_message_headers_get_one(rq, "Range") &&
      soup_message_headers_get_ranges(rq, size, &ranges, &nr)) {
    for (int i = 0; i < nr; i++) satisfiable |= ranges[i].start < size;
  } else {
    satisfiable = 1;
  }
  if (!satisfiable) {
    char cr[48];
    snprintf(cr, sizeof cr, "bytes */%zu", g_bytes_get_size(b));
    soup_message_headers_replace(rs, "Content-Range", cr);
    fc_http_error(msg, 416, "Range: not satisfiable for a file of %zu bytes", g_bytes_get_size(b));
    g_bytes_unref(b);
    return;
  }
  if (ranges) soup_message_headers_free_ranges(rq, ranges);
  soup_server_message_set_status(msg, 200, NULL);
  soup_message_headers_set_content_type(rs, type, NULL);
  soup_message_body_append_bytes(soup_server_message_get_response_body(msg), b);
  g_bytes_unref(b);
}

/* ---- CORS ---------------------------------------------------------------------------------
 * A page or player on another origin (LiveTalking's pages served elsewhere, a WHEP player) may
 * call every route: --cors-origins (default "*", as LiveTalking answers) lists the origins, and
 * a preflight (OPTIONS) is answered before the API key check, since browsers send it without
 * credentials. Keys travel in the Authorization header, never cookies, so "*" exposes nothing
 * a key does not already guard. */

static int origin_allowed(fc_server *srv, const char *origin) {
  const char *list = srv->p.cors_origins ? srv->p.cors_origins : "*";
  if (!strcmp(list, "*")) return 1;
  size_t n = strlen(origin);
  for (const char *p = list; *p;) {
    p += strspn(p, ", ");
    size_t k = strcspn(p, ", ");
    if (k && ((k == 1 && *p == '*') || (k == n && !g_ascii_strncasecmp(p, origin, n)))) return 1;
    p += k;
  }
  return 0;
}

/* The CORS response headers for msg ("" when it has no Origin or one not allowed), as raw
 * header lines. */
static void cors_lines(fc_server *srv, SoupServerMessage *msg, GString *out) {
  SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
  const char *origin = soup_message_headers_get_one(h, "Origin");
  const char *list = srv->p.cors_origins ? srv->p.cors_origins : "*";
  if (!origin || !strcmp(list, "none") || !origin_allowed(srv, origin) || strlen(origin) > 256 ||
      strpbrk(origin, "\r\n"))
    return;
  if (!strcmp(list, "*"))
    g_string_append(out, "Access-Control-Allow-Origin: *\r\n");
  else
    g_string_append_printf(out, "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n", origin);
  g_string_append(out, "Access-Control-Expose-Headers: Location, ETag, Link, Retry-After, "
                       "Content-Range, Accept-Ranges, X-Request-ID\r\n");
  if (!fc_http_is_method(msg, "OPTIONS")) return;
  /* a preflight: what the request may then do; the headers it asks for are granted as named
   * (token characters only) */
  const char *want = soup_message_headers_get_one(h, "Access-Control-Request-Headers");
  g_string_append(out, "Access-Control-Allow-Methods: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n"
                       "Access-Control-Max-Age: 600\r\n");
  if (want && strlen(want) <= 512 &&
      strspn(want, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_, ") == strlen(want))
    g_string_append_printf(out, "Access-Control-Allow-Headers: %s\r\n", want);
  else
    g_string_append(out, "Access-Control-Allow-Headers: Authorization, Content-Type, "
                         "X-Request-ID, Idempotency-Key, If-Match\r\n");
}

/* Puts cors_lines' headers on msg's response. */
static void cors_apply(fc_server *srv, SoupServerMessage *msg) {
  GString *l = g_string_new(NULL);
  cors_lines(srv, msg, l);
  SoupMessageHeaders *rh = soup_server_message_get_response_headers(msg);
  for (char *p = l->str; *p;) {
    char *colon = strchr(p, ':'), *eol = strstr(p, "\r\n");
    if (!colon || !eol) break;
    *colon = *eol = 0;
    soup_message_headers_replace(rh, p, colon + 2);
    p = eol + 2;
  }
  g_string_free(l, TRUE);
}

/* Refusals before the body is read go straight to the connection (listener.h): libsoup reads
 * a request's body even after an early handler has set the status. They carry the CORS
 * headers, so a page on another origin sees the refusal rather than a CORS failure. */
static void refuse_now(fc_server *srv, SoupServerMessage *msg, int status, const char *reason,
                       const char *text) {
  GString *extra = g_string_new(NULL);
  cors_lines(srv, msg, extra);
  if (status == 401) g_string_append(extra, "WWW-Authenticate: Bearer realm=\"facecast\"\r\n");
  /* /v1 answers carry the request's id, refusals too (the client's when valid, else a new one) */
  const char *upath = g_uri_get_path(soup_server_message_get_uri(msg));
  if (upath && g_str_has_prefix(upath, "/v1/")) {
    const char *rid = soup_message_headers_get_one(soup_server_message_get_request_headers(msg),
                                                   "X-Request-ID");
    char *made = NULL;
    if (!rid || strlen(rid) > 95 ||
        strspn(rid, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") != strlen(rid) || !*rid) {
      char *u = g_uuid_string_random();
      rid = made = g_strdup_printf("req_%s", u);
      g_free(u);
    }
    g_string_append_printf(extra, "X-Request-ID: %s\r\n", rid);
    g_free(made);
  }
  fc_conn_refuse(msg, status, reason, text, extra->len ? extra->str : NULL);
  g_string_free(extra, TRUE);
}

/* The largest body a request may bring: POST/PUT/PATCH up to the route's limit, nothing for
 * the other methods. */
static goffset body_limit(SoupServerMessage *msg, const char *path) {
  if (!fc_http_is_method(msg, "POST") && !fc_http_is_method(msg, "PUT") &&
      !fc_http_is_method(msg, "PATCH"))
    return 0;
  if (strcmp(path, "/humanaudio") == 0) return MAX_UPLOAD;
  if (strcmp(path, "/v1/videos") == 0 && fc_http_has_content_type(msg, "multipart/form-data"))
    return FC_MAX_VIDEO_BODY;
  if (strncmp(path, "/api/avatar/task", 16) == 0 && fc_http_has_content_type(msg, "multipart/form-data"))
    return FC_MAX_AVATAR_UPLOAD;
  return MAX_JSON_BODY;
}

/* Routes a browser opens without headers of its own (an EventSource, a WebSocket, a download
 * link): the session id they name is their credential, since ids are unguessable. */
static int session_capability_route(SoupServerMessage *msg, const char *path) {
  return strcmp(path, "/sse") == 0 || strcmp(path, "/ws/audio") == 0 ||
         (g_str_has_prefix(path, "/record/") && fc_http_is_method(msg, "GET"));
}

/* The key a request presents: the name it belongs to, "" for none, NULL for a wrong one. */
static const char *presented_key(fc_server *srv, SoupServerMessage *msg) {
  const char *a =
      soup_message_headers_get_one(soup_server_message_get_request_headers(msg), "Authorization");
  if (!a) return "";
  if (g_ascii_strncasecmp(a, "Bearer ", 7) != 0) return NULL;
  a += 7;
  while (*a == ' ') a++;
  return fc_keys_check(srv->keys, a, strlen(a));
}

/* Everything a request must pass before its body is read: a body only where the method takes
 * one, framed by a plain Content-Length (digits only) within the route's limit; with API keys,
 * a valid key on every control route. A refusal is written at once and the connection closed:
 * libsoup would otherwise go on to read the body. */
static int check_request(fc_server *srv, SoupServerMessage *msg, const char *path, int api) {
  if (srv->closing) { /* the server is being torn down: its jobs and sessions are going */
    refuse_now(srv, msg, 503, "Service Unavailable", "the server is stopping");
    return 0;
  }
  /* A worker (facecast worker) renders what the job store hands out; it takes no requests
   * but its health and its figures. */
  if (srv->p.worker && strcmp(path, "/healthz") != 0 && strcmp(path, "/metrics") != 0) {
    refuse_now(srv, msg, 404, "Not Found",
               "a worker node serves /healthz and /metrics only (requests go to an API node)");
    return 0;
  }
  cors_apply(srv, msg);
  /* A preflight is answered here, before the key check (browsers send it without one); a
   * WHEP player's OPTIONS goes on to its route (its ICE servers, behind the key check); any
   * other OPTIONS is told what the server allows. */
  int preflight = soup_message_headers_get_one(soup_server_message_get_request_headers(msg),
                                               "Access-Control-Request-Method") != NULL;
  if (fc_http_is_method(msg, "OPTIONS") && (preflight || strcmp(path, "/whep") != 0)) {
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Allow",
                                 "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS");
    soup_server_message_set_status(msg, 204, NULL);
    return 0;
  }
  SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
  goffset limit = body_limit(msg, path);
  const char *cl = soup_message_headers_get_one(h, "Content-Length");
  SoupEncoding enc = soup_message_headers_get_encoding(h);
  char t[160];
  if (cl && (!*cl || strspn(cl, "0123456789") != strlen(cl) || strlen(cl) > 15)) {
    refuse_now(srv, msg, 400, "Bad Request", "Content-Length must be a number of bytes");
    return 0;
  }
  goffset len = cl ? g_ascii_strtoll(cl, NULL, 10) : 0;
  if (enc == SOUP_ENCODING_CHUNKED || (enc != SOUP_ENCODING_CONTENT_LENGTH && enc != SOUP_ENCODING_NONE)) {
    if (limit)
      refuse_now(srv, msg, 411, "Length Required", "a request body needs a Content-Length");
    else
      refuse_now(srv, msg, 413, "Payload Too Large", "this request takes no body");
    return 0;
  }
  if (len > limit) {
    if (limit)
      snprintf(t, sizeof t, "request body of %lld bytes is over the limit of %lld", (long long)len,
               (long long)limit);
    else
      snprintf(t, sizeof t, "%s %s takes no body", soup_server_message_get_method(msg),
               api ? "here" : "of a page");
    refuse_now(srv, msg, 413, "Payload Too Large", t);
    return 0;
  }
  if (limit && !cl) {
    refuse_now(srv, msg, 411, "Length Required", "a request body needs a Content-Length");
    return 0;
  }
  if (!srv->keys || !api) return 1;
  const char *who = presented_key(srv, msg);
  int capability = session_capability_route(msg, path);
  if (!who || (!*who && !capability)) {
    refuse_now(srv, msg, 401, "Unauthorized",
               who ? "this server needs an API key: send 'Authorization: Bearer KEY'"
                   : "unknown API key");
    return 0;
  }
  if (*who) g_object_set_data(G_OBJECT(msg), "fc-owner", (gpointer)who); /* lives in srv->keys */
  return 1;
}

void fc_http_early_api(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                      gpointer user) {
  check_request(user, msg, path, 1);
}

void fc_http_early_page(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                       gpointer user) {
  check_request(user, msg, path, strcmp(path, "/healthz") != 0 && strncmp(path, "/api/", 5) == 0);
}

void fc_http_route(fc_server *srv, const char *path, SoupServerCallback cb) {
  soup_server_add_early_handler(srv->soup, path, fc_http_early_api, srv, NULL);
  fc_fleet_add_handler(srv, path, cb); /* fleet.h: a session's route may be sent on */
}

