/* The fleet on the main loop (fleet.h says what the fleet is): the route wrappers that decide
 * where a request goes, and the HTTP proxy that takes it there.
 *
 * A wrapper runs before the route it wraps, after the early check (body limits, API keys):
 *  - POST /offer and POST /whep: answered here while this node has a free place; when it is
 *    full, sent to the node with the most free places by the registry (the next one if that
 *    one answers 503 meanwhile) and its answer returned unchanged, or with --fleet-redirect
 *    answered 307 with that node's URL; with no node with room, the route answers 503 itself.
 *  - every request that names a session (in its path, its query, its JSON body's or form's
 *    "sessionid"): answered here when the session is here; else the registry thread is asked
 *    which node holds it, and the request is proxied there (502 when that node is gone, 404
 *    when no node holds it, 503 while Redis does not answer).
 * A proxied request carries X-Facecast-Fleet-Hop, and a request carrying it is always answered
 * where it arrives: two nodes with stale views of each other cannot bounce a request forever.
 * WebSocket routes (/ws/audio, /ws/stream, /api/asr) are not proxied: a client opens them on
 * the node that holds its session (or, for /ws/stream, on any node with room).
 *
 * The proxy never blocks: libsoup's asynchronous client on the main loop, the answer's body
 * passed on as it arrives (an event stream stays open as long as both ends do; a download is
 * read only as fast as the client takes it), a deadline for the answer's headers, and a clear
 * JSON error when the other node fails before answering. */
#include "server/fleet.h"

#include "facecast/error.h"
#include "core/jsonin.h"
#include "server/multipart.h"

#include <stdio.h>
#include <string.h>

#define HEAD_TIMEOUT_S 30     /* the other node's answer must begin within this */
#define IO_TIMEOUT_S 30       /* and then never stall longer (event streams excepted) */
#define HINT_US (10 * G_USEC_PER_SEC) /* a placement this node made is trusted this long */
#define MAX_WAITING (1 << 20) /* an answer's bytes queued for a slow client before reading pauses */
#define LEARN_MAX 65536       /* bytes of an offer's answer kept to learn its session id */

enum { K_OFFER, K_WHEP, K_JSON, K_FORM, K_QUERY, K_SESSION_PATH, K_RECORD, K_ADMIN, K_PLAIN };

static const struct {
  const char *path;
  int kind;
} scoped[] = {{"/offer", K_OFFER},
              {"/whep", K_WHEP},
              {"/session", K_SESSION_PATH},
              {"/human", K_JSON},
              {"/humanaudio", K_FORM},
              {"/interrupt_talk", K_JSON},
              {"/is_speaking", K_JSON},
              {"/set_audiotype", K_JSON},
              {"/record", K_RECORD},
              {"/sse", K_QUERY},
              {"/api/admin/sessions", K_ADMIN}};

typedef struct route {
  fc_fleet *f;
  SoupServerCallback cb;
  int kind;
} route;

typedef struct owner_hint {
  char node[40];
  gint64 until;
} owner_hint;

/* ---- the proxy ----------------------------------------------------------------------------- */

typedef struct proxy {
  fc_fleet *f;
  SoupServerMessage *msg;
  gulong on_finished, on_wrote;
  int gone;            /* the client's request finished (it went away, or we answered) */
  int offer;           /* a session is being placed: try the next node on 503 */
  int stream;          /* an event stream: no I/O timeout */
  char *method, *path_q;
  GBytes *body;        /* the request's body (NULL: none) */
  GPtrArray *targets;  /* fc_fleet_node*: where to try, in order */
  guint next;
  const fc_fleet_node *target;
  SoupMessage *up;
  GCancellable *cancel;
  GInputStream *in;
  guint timer;
  int timed_out;
  gint64 waiting;      /* bytes appended to the answer and not yet written to the client */
  int reading;         /* a read is in flight */
  GByteArray *learn;   /* an offer's answer (its first LEARN_MAX bytes) */
} proxy;

static void send_next(proxy *p);
static void read_more(proxy *p);

static void proxy_free(proxy *p) {
  fc_fleet *f = p->f;
  f->proxies = g_list_remove(f->proxies, p);
  if (p->timer) g_source_remove(p->timer);
  if (p->on_finished) g_signal_handler_disconnect(p->msg, p->on_finished);
  if (p->on_wrote) g_signal_handler_disconnect(p->msg, p->on_wrote);
  g_object_unref(p->msg);
  g_clear_object(&p->in);
  g_clear_object(&p->up);
  g_object_unref(p->cancel);
  if (p->body) g_bytes_unref(p->body);
  if (p->targets) g_ptr_array_unref(p->targets);
  if (p->learn) g_byte_array_unref(p->learn);
  g_free(p->method);
  g_free(p->path_q);
  g_free(p);
}

/* Answers the client with an error (unless it went away) and ends the proxy. */
static void proxy_fail(proxy *p, int status, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
static void proxy_fail(proxy *p, int status, const char *fmt, ...) {
  p->f->proxy_failures++;
  if (!p->gone) {
    va_list ap;
    va_start(ap, fmt);
    char *t = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    fc_http_error(p->msg, status, "%s", t);
    g_free(t);
    soup_server_message_unpause(p->msg);
  }
  proxy_free(p);
}

static void on_finished(SoupServerMessage *msg, gpointer user) {
  proxy *p = user;
  p->gone = 1;
  g_cancellable_cancel(p->cancel); /* the other node's connection closes */
}

static void on_wrote(SoupServerMessage *msg, guint n, gpointer user) {
  proxy *p = user;
  p->waiting -= n;
  if (p->in && !p->reading && p->waiting < MAX_WAITING / 4) read_more(p);
}

static gboolean on_head_timeout(gpointer user) {
  proxy *p = user;
  p->timer = 0;
  p->timed_out = 1;
  g_cancellable_cancel(p->cancel);
  return G_SOURCE_REMOVE;
}

/* Headers that describe one hop, not the message: never passed on. */
static int hop_by_hop(const char *name) {
  static const char *const names[] = {"Connection", "Keep-Alive", "Proxy-Authenticate",
                                      "Proxy-Authorization", "Proxy-Connection", "TE", "Trailer",
                                      "Transfer-Encoding", "Upgrade", "Host", "Content-Length",
                                      "Expect", FC_FLEET_HOP_HEADER};
  for (size_t i = 0; i < G_N_ELEMENTS(names); i++)
    if (!g_ascii_strcasecmp(name, names[i])) return 1;
  return 0;
}

/* An offer placed elsewhere: which session went where, so that the client's next requests to
 * this node go straight there (the other node's key in Redis may be a beat behind). */
static void learn_placement(proxy *p, guint status) {
  char *sid = NULL;
  if (status == 201) { /* WHEP: Location /whep/ID */
    const char *loc = soup_message_headers_get_one(soup_message_get_response_headers(p->up),
                                                   "Location");
    const char *slash = loc ? strrchr(loc, '/') : NULL;
    if (slash && slash[1]) sid = g_strdup(slash + 1);
  } else if (status == 200 && p->learn) {
    JsonObject *o = NULL;
    char why[64];
    JsonParser *jp = fc_json_parse_object((const char *)p->learn->data, p->learn->len,
                                          FC_JSON_MAX_DEPTH, &o, why, sizeof why);
    const char *s = o ? fc_json_str_member(o, "sessionid") : NULL;
    if (s) sid = g_strdup(s);
    if (jp) g_object_unref(jp);
  }
  if (sid && strlen(sid) < 64) {
    if (g_hash_table_size(p->f->owners) >= 4096) { /* a busy node: the stale ones go */
      GHashTableIter it;
      gpointer v;
      gint64 now = g_get_monotonic_time();
      g_hash_table_iter_init(&it, p->f->owners);
      while (g_hash_table_iter_next(&it, NULL, &v))
        if (((owner_hint *)v)->until < now) g_hash_table_iter_remove(&it);
    }
    owner_hint *h = g_new0(owner_hint, 1);
    g_strlcpy(h->node, p->target->id, sizeof h->node);
    h->until = g_get_monotonic_time() + HINT_US;
    g_hash_table_replace(p->f->owners, sid, h);
    sid = NULL;
  }
  g_free(sid);
}

static void got_bytes(GObject *src, GAsyncResult *res, gpointer user) {
  proxy *p = user;
  GError *e = NULL;
  GBytes *b = g_input_stream_read_bytes_finish(G_INPUT_STREAM(src), res, &e);
  p->reading = 0;
  SoupMessageBody *body = soup_server_message_get_response_body(p->msg);
  if (!b || p->gone) { /* the other node or the client went away: end what was begun */
    if (e && !p->gone)
      g_message("fleet: answer from %s cut short: %s", p->target->url, e->message);
    if (!p->gone) {
      soup_message_body_complete(body);
      soup_server_message_unpause(p->msg);
    }
    g_clear_error(&e);
    if (b) g_bytes_unref(b);
    proxy_free(p);
    return;
  }
  gsize n = g_bytes_get_size(b);
  if (n == 0) {
    g_bytes_unref(b);
    if (p->learn) learn_placement(p, soup_message_get_status(p->up));
    soup_message_body_complete(body);
    soup_server_message_unpause(p->msg);
    proxy_free(p);
    return;
  }
  if (p->learn && p->learn->len < LEARN_MAX)
    g_byte_array_append(p->learn, g_bytes_get_data(b, NULL),
                        (guint)MIN(n, LEARN_MAX - p->learn->len));
  soup_message_body_append_bytes(body, b);
  g_bytes_unref(b);
  p->waiting += (gint64)n;
  soup_server_message_unpause(p->msg);
  if (p->waiting < MAX_WAITING) read_more(p); /* else on_wrote resumes */
}

static void read_more(proxy *p) {
  p->reading = 1;
  g_input_stream_read_bytes_async(p->in, 65536, G_PRIORITY_DEFAULT, p->cancel, got_bytes, p);
}

static void sent(GObject *src, GAsyncResult *res, gpointer user) {
  proxy *p = user;
  GError *e = NULL;
  GInputStream *in = soup_session_send_finish(SOUP_SESSION(src), res, &e);
  if (p->timer) g_source_remove(p->timer);
  p->timer = 0;
  if (!in) {
    int more = p->offer && p->next < p->targets->len && !p->gone && !p->f->srv->closing;
    if (!p->gone && !p->f->srv->closing)
      g_message("fleet: node %s did not answer %s %s: %s", p->target->url, p->method, p->path_q,
                p->timed_out ? "timed out" : e->message);
    if (p->gone) {
      p->f->proxy_failures++;
      proxy_free(p);
    } else if (more) {
      g_clear_object(&p->up);
      send_next(p);
    } else if (p->f->srv->closing) {
      proxy_fail(p, 503, "this node is stopping");
    } else if (p->timed_out) {
      proxy_fail(p, 504, "node %s did not answer within %d s", p->target->url, HEAD_TIMEOUT_S);
    } else {
      proxy_fail(p, 502, "node %s, which %s, did not answer: %s", p->target->url,
                 p->offer ? "had room for the session" : "holds this session", e->message);
    }
    g_clear_error(&e);
    return;
  }
  guint status = soup_message_get_status(p->up);
  if (p->offer && status == 503 && p->next < p->targets->len && !p->gone) {
    g_object_unref(in); /* filled up meanwhile: the next one */
    g_clear_object(&p->up);
    send_next(p);
    return;
  }
  if (p->gone) {
    g_object_unref(in);
    proxy_free(p);
    return;
  }
  p->in = in;
  SoupMessageHeaders *from = soup_message_get_response_headers(p->up);
  SoupMessageHeaders *to = soup_server_message_get_response_headers(p->msg);
  /* the other node's headers replace what this one set early (CORS), several of a name (Link)
   * all kept */
  SoupMessageHeadersIter it;
  const char *name, *value;
  soup_message_headers_iter_init(&it, from);
  while (soup_message_headers_iter_next(&it, &name, &value))
    if (!hop_by_hop(name)) soup_message_headers_remove(to, name);
  soup_message_headers_iter_init(&it, from);
  while (soup_message_headers_iter_next(&it, &name, &value))
    if (!hop_by_hop(name) && g_ascii_strcasecmp(name, "Date") && g_ascii_strcasecmp(name, "Server"))
      soup_message_headers_append(to, name, value);
  goffset len = soup_message_headers_get_content_length(from);
  if (soup_message_headers_get_encoding(from) == SOUP_ENCODING_CONTENT_LENGTH)
    soup_message_headers_set_content_length(to, len);
  else
    soup_message_headers_set_encoding(to, SOUP_ENCODING_CHUNKED);
  soup_server_message_set_status(p->msg, status, soup_message_get_reason_phrase(p->up));
  /* written chunks are let go: a long stream or a large download is not held whole */
  soup_message_body_set_accumulate(soup_server_message_get_response_body(p->msg), FALSE);
  if (p->offer && (status == 200 || status == 201)) p->learn = g_byte_array_new();
  if (p->offer) p->f->proxied_offers++;
  else p->f->proxied_requests++;
  soup_server_message_unpause(p->msg);
  read_more(p);
}

static void send_next(proxy *p) {
  fc_fleet *f = p->f;
  p->target = p->targets->pdata[p->next++];
  char *url = g_strconcat(p->target->url, p->path_q, NULL);
  GUri *u = g_uri_parse(url, SOUP_HTTP_URI_FLAGS, NULL);
  g_free(url);
  if (!u) {
    proxy_fail(p, 502, "node %s has an address that does not parse", p->target->id);
    return;
  }
  p->up = soup_message_new_from_uri(p->method, u);
  g_uri_unref(u);
  soup_message_add_flags(p->up, SOUP_MESSAGE_NO_REDIRECT); /* a 307 goes back as it is */
  SoupMessageHeaders *from = soup_server_message_get_request_headers(p->msg);
  SoupMessageHeaders *to = soup_message_get_request_headers(p->up);
  SoupMessageHeadersIter it;
  const char *name, *value;
  soup_message_headers_iter_init(&it, from);
  while (soup_message_headers_iter_next(&it, &name, &value))
    if (!hop_by_hop(name) && g_ascii_strcasecmp(name, "X-Forwarded-For") &&
        g_ascii_strcasecmp(name, "Accept-Encoding"))
      soup_message_headers_append(to, name, value);
  soup_message_headers_replace(to, FC_FLEET_HOP_HEADER, f->node_id);
  const char *xff = soup_message_headers_get_list(from, "X-Forwarded-For");
  const char *peer = soup_server_message_get_remote_host(p->msg);
  char *chain = xff && peer ? g_strdup_printf("%s, %s", xff, peer) : g_strdup(peer ? peer : xff);
  if (chain) soup_message_headers_replace(to, "X-Forwarded-For", chain);
  g_free(chain);
  if (p->body) soup_message_set_request_body_from_bytes(p->up, NULL, p->body);
  p->timed_out = 0;
  p->timer = g_timeout_add_seconds(HEAD_TIMEOUT_S, on_head_timeout, p);
  soup_session_send_async(p->stream ? f->stream : f->http, p->up, G_PRIORITY_DEFAULT, p->cancel,
                          sent, p);
}

/* Sends msg (paused from here until the proxy answers it) to targets[0], then the next ones
 * if offer and they fail or are full. Takes targets. */
static void proxy_begin(fc_fleet *f, SoupServerMessage *msg, GPtrArray *targets, int offer,
                        int stream) {
  proxy *p = g_new0(proxy, 1);
  p->f = f;
  p->msg = g_object_ref(msg);
  p->offer = offer;
  p->stream = stream;
  p->targets = targets;
  p->cancel = g_cancellable_new();
  p->method = g_strdup(soup_server_message_get_method(msg));
  GUri *u = soup_server_message_get_uri(msg);
  const char *path = g_uri_get_path(u), *query = g_uri_get_query(u);
  p->path_q = query ? g_strconcat(path, "?", query, NULL) : g_strdup(path);
  if (!strcmp(p->method, "POST") || !strcmp(p->method, "PUT") || !strcmp(p->method, "PATCH"))
    p->body = soup_message_body_flatten(soup_server_message_get_request_body(msg));
  f->proxies = g_list_prepend(f->proxies, p);
  soup_server_message_pause(msg);
  p->on_finished = g_signal_connect(msg, "finished", G_CALLBACK(on_finished), p);
  p->on_wrote = g_signal_connect(msg, "wrote-body-data", G_CALLBACK(on_wrote), p);
  send_next(p);
}

/* ---- where a request goes ---------------------------------------------------------------- */

/* A session id as facecast makes them (a UUID); anything else cannot be another node's. */
static char *plausible_id(const char *s, size_t n) {
  if (!s || !n || n > 63) return NULL;
  for (size_t i = 0; i < n; i++)
    if (!g_ascii_isalnum(s[i]) && s[i] != '-' && s[i] != '_') return NULL;
  return g_strndup(s, n);
}

static char *id_of_json(SoupServerMessage *msg) {
  if (!fc_http_has_content_type(msg, "application/json")) return NULL;
  GBytes *b = soup_message_body_flatten(soup_server_message_get_request_body(msg));
  gsize n;
  const char *d = g_bytes_get_data(b, &n);
  JsonObject *o = NULL;
  char why[64], *id = NULL;
  JsonParser *jp = fc_json_parse_object(d ? d : "", n, FC_JSON_MAX_DEPTH, &o, why, sizeof why);
  JsonNode *m = o ? json_object_get_member(o, "sessionid") : NULL;
  if (m && JSON_NODE_HOLDS_VALUE(m) && json_node_get_value_type(m) == G_TYPE_STRING) {
    const char *s = json_node_get_string(m);
    id = plausible_id(s, strlen(s));
  } else if (m && JSON_NODE_HOLDS_VALUE(m) && json_node_get_value_type(m) == G_TYPE_INT64) {
    id = g_strdup_printf("%lld", (long long)json_node_get_int(m));
  }
  if (jp) g_object_unref(jp);
  g_bytes_unref(b);
  return id;
}

static char *id_of_form(SoupServerMessage *msg) {
  GHashTable *params = NULL;
  soup_message_headers_get_content_type(soup_server_message_get_request_headers(msg), &params);
  const char *boundary = params ? g_hash_table_lookup(params, "boundary") : NULL;
  GBytes *b = soup_message_body_flatten(soup_server_message_get_request_body(msg));
  gsize n;
  const char *d = g_bytes_get_data(b, &n);
  fc_form_part parts[FC_MULTIPART_MAX_PARTS];
  char why[120], *id = NULL;
  int np = fc_multipart_parse(d ? d : "", n, boundary, parts, FC_MULTIPART_MAX_PARTS, why,
                              sizeof why);
  for (int i = 0; i < np && !id; i++)
    if (!strcmp(parts[i].name, "sessionid")) {
      char *v = g_strstrip(g_strndup(parts[i].data, MIN(parts[i].size, 64)));
      id = plausible_id(v, strlen(v));
      g_free(v);
    }
  g_bytes_unref(b);
  if (params) g_hash_table_destroy(params);
  return id;
}

/* The session a request names, or NULL when it names none (or one of no possible form): then
 * the route answers it as it would without a fleet. */
static char *session_id_of(SoupServerMessage *msg, const char *path, GHashTable *q, int kind) {
  const char *s;
  switch (kind) {
  case K_WHEP:
    return fc_http_is_method(msg, "DELETE") && g_str_has_prefix(path, "/whep/")
               ? plausible_id(path + 6, strlen(path + 6)) : NULL;
  case K_SESSION_PATH:
    return g_str_has_prefix(path, "/session/") ? plausible_id(path + 9, strlen(path + 9)) : NULL;
  case K_RECORD:
    if (g_str_has_prefix(path, "/record/")) return plausible_id(path + 8, strlen(path + 8));
    return fc_http_is_method(msg, "POST") ? id_of_json(msg) : NULL;
  case K_ADMIN:
    if (!g_str_has_prefix(path, "/api/admin/sessions/")) return NULL;
    s = path + strlen("/api/admin/sessions/");
    return plausible_id(s, strcspn(s, "/"));
  case K_JSON: return fc_http_is_method(msg, "POST") ? id_of_json(msg) : NULL;
  case K_FORM: return fc_http_is_method(msg, "POST") ? id_of_form(msg) : NULL;
  case K_QUERY:
    s = fc_http_query_get(q, "sessionid");
    return s ? plausible_id(s, strlen(s)) : NULL;
  default: return NULL;
  }
}

static int held_here(fc_server *srv, const char *sid, int kind, const char *path) {
  fc_session *s = fc_session_find(srv, sid);
  if (s) {
    fc_session_unref(s);
    return 1;
  }
  /* a finished recording is kept by the node where its session was */
  return kind == K_RECORD && g_str_has_prefix(path, "/record/") &&
         g_hash_table_contains(srv->recordings, sid);
}

static GPtrArray *one_node(const char *id, char *url) {
  GPtrArray *t = g_ptr_array_new_with_free_func(fc_fleet_node_free);
  fc_fleet_node *n = g_new0(fc_fleet_node, 1);
  n->id = g_strdup(id);
  n->url = url;
  g_ptr_array_add(t, n);
  return t;
}

void fc_fleet_lookup_done(fc_fleet_lookup *l) {
  fc_fleet *f = l->f;
  SoupServerMessage *msg = l->msg;
  f->lookups_waiting--;
  int gone = GPOINTER_TO_INT(g_object_get_data(G_OBJECT(msg), "fc-fleet-gone"));
  g_signal_handlers_disconnect_matched(msg, G_SIGNAL_MATCH_DATA, 0, 0, NULL, NULL, l);
  char *url = l->owner ? fc_fleet_node_url(f, l->owner) : NULL;
  if (gone) {
    g_free(url);
  } else if (f->srv->closing) {
    g_free(url);
    fc_http_error(msg, 503, "this node is stopping");
    soup_server_message_unpause(msg);
  } else if (!l->redis_ok) {
    g_free(url);
    f->not_routed++;
    fc_http_error(msg, 503, "session %s is not on this node, and the fleet registry (Redis) does "
                            "not answer; try again", l->sid);
    soup_server_message_unpause(msg);
  } else if (!l->owner || !strcmp(l->owner, f->node_id)) {
    g_free(url);
    fc_http_error(msg, 404, "unknown session");
    soup_server_message_unpause(msg);
  } else if (!url) {
    f->not_routed++;
    fc_http_error(msg, 502, "session %s was on node %s, which is gone (it stopped renewing its "
                            "registration); open a new session", l->sid, l->owner);
    soup_server_message_unpause(msg);
  } else {
    proxy_begin(f, msg, one_node(l->owner, url), 0, l->kind == K_QUERY);
  }
  g_object_unref(msg);
  g_free(l->sid);
  g_free(l->owner);
  g_free(l);
}

static void lookup_msg_finished(SoupServerMessage *msg, gpointer user) {
  g_object_set_data(G_OBJECT(msg), "fc-fleet-gone", GINT_TO_POINTER(1));
}

/* A request for session sid, which is not here. */
static void route_session(fc_fleet *f, SoupServerMessage *msg, char *sid, int kind) {
  g_mutex_lock(&f->lock);
  int up = f->redis_up;
  g_mutex_unlock(&f->lock);
  if (!up) {
    f->not_routed++;
    fc_http_error(msg, 503, "session %s is not on this node, and the fleet registry (Redis) does "
                            "not answer; try again", sid);
    g_free(sid);
    return;
  }
  owner_hint *h = g_hash_table_lookup(f->owners, sid);
  if (h && h->until > g_get_monotonic_time()) {
    char *url = fc_fleet_node_url(f, h->node);
    if (url) {
      proxy_begin(f, msg, one_node(h->node, url), 0, kind == K_QUERY);
      g_free(sid);
      return;
    }
  }
  if (h) g_hash_table_remove(f->owners, sid);
  fc_fleet_lookup *l = g_new0(fc_fleet_lookup, 1);
  l->f = f;
  l->sid = sid;
  l->msg = g_object_ref(msg);
  l->kind = kind;
  soup_server_message_pause(msg);
  g_signal_connect(msg, "finished", G_CALLBACK(lookup_msg_finished), l);
  f->lookups_waiting++;
  fc_fleet_lookup_queue(f, l);
}

/* A full node's offer: sent to the node with the most room. 0 when there is none (the route
 * then answers: 503, all places taken). */
static int offer_elsewhere(fc_fleet *f, SoupServerMessage *msg) {
  fc_server *srv = f->srv;
  g_mutex_lock(&srv->lock);
  int open = (int)g_hash_table_size(srv->sessions);
  g_mutex_unlock(&srv->lock);
  if (open < srv->p.max_sessions) return 0;
  GPtrArray *room = fc_fleet_nodes_with_room(f);
  if (!room->len) {
    g_ptr_array_unref(room);
    return 0;
  }
  if (f->redirect) {
    const fc_fleet_node *n = room->pdata[0];
    GUri *u = soup_server_message_get_uri(msg);
    const char *query = g_uri_get_query(u);
    char *loc = g_strconcat(n->url, g_uri_get_path(u), query ? "?" : "", query ? query : "", NULL);
    char *q = fc_http_json_quote(loc);
    char *body = g_strdup_printf("{\"code\":0,\"msg\":\"this node is full: offer to %s\","
                                 "\"data\":{\"location\":%s,\"node\":\"%s\"}}",
                                 n->url, q, n->id);
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Location", loc);
    soup_server_message_set_status(msg, 307, NULL);
    soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, body, strlen(body));
    f->redirects++;
    g_free(q);
    g_free(loc);
    g_ptr_array_unref(room);
    return 1;
  }
  proxy_begin(f, msg, room, 1, 0);
  return 1;
}

static void fleet_route(SoupServer *server, SoupServerMessage *msg, const char *path,
                        GHashTable *q, gpointer user) {
  route *rt = user;
  fc_fleet *f = rt->f;
  fc_server *srv = f->srv;
  SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
  if (!srv->closing && !soup_message_headers_get_one(h, FC_FLEET_HOP_HEADER)) {
    int offer = fc_http_is_method(msg, "POST") &&
                ((rt->kind == K_OFFER && !strcmp(path, "/offer")) ||
                 (rt->kind == K_WHEP && !strcmp(path, "/whep")));
    if (offer) {
      if (offer_elsewhere(f, msg)) return;
    } else {
      char *sid = session_id_of(msg, path, q, rt->kind);
      if (sid && !held_here(srv, sid, rt->kind, path)) {
        route_session(f, msg, sid, rt->kind); /* takes sid */
        return;
      }
      g_free(sid);
    }
  }
  rt->cb(server, msg, path, q, srv);
}

void fc_fleet_add_handler(fc_server *srv, const char *path, SoupServerCallback cb) {
  for (size_t i = 0; srv->fleet && path && i < G_N_ELEMENTS(scoped); i++)
    if (!strcmp(path, scoped[i].path)) {
      route *rt = g_new0(route, 1);
      *rt = (route){srv->fleet, cb, scoped[i].kind};
      soup_server_add_handler(srv->soup, path, fleet_route, rt, g_free);
      return;
    }
  soup_server_add_handler(srv->soup, path, cb, srv, NULL);
}

/* ---- GET /api/fleet, /metrics -------------------------------------------------------------- */

static void h_fleet(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                    gpointer user) {
  fc_fleet *f = ((fc_server *)user)->fleet;
  if (!fc_http_require_method(msg, "GET")) return;
  GString *o = g_string_new(NULL);
  char *u = fc_http_json_quote(f->node_url);
  g_mutex_lock(&f->lock);
  g_string_append_printf(o, "{\"node\":{\"id\":\"%s\",\"url\":%s},\"redis\":%s,\"nodes\":[",
                         f->node_id, u, f->redis_up ? "true" : "false");
  g_free(u);
  for (guint i = 0; i < f->nodes->len; i++) {
    const fc_fleet_node *n = f->nodes->pdata[i];
    u = fc_http_json_quote(n->url);
    char *id = fc_http_json_quote(n->id);
    g_string_append_printf(o, "%s{\"id\":%s,\"url\":%s,\"max_sessions\":%d,\"sessions\":%d,"
                              "\"free\":%d,\"self\":%s}",
                           i ? "," : "", id, u, n->max_sessions, n->sessions, n->free_places,
                           strcmp(n->id, f->node_id) ? "false" : "true");
    g_free(u);
    g_free(id);
  }
  g_mutex_unlock(&f->lock);
  g_string_append(o, "]}");
  fc_http_ok(msg, o->str);
  g_string_free(o, TRUE);
}

void fc_fleet_register(fc_server *srv) {
  if (srv->fleet) fc_http_route(srv, "/api/fleet", h_fleet);
}

void fc_fleet_metrics(fc_fleet *f, GString *o) {
  if (!f) return;
  g_mutex_lock(&f->lock);
  int up = f->redis_up, nodes = (int)f->nodes->len, room = 0;
  for (guint i = 0; i < f->nodes->len; i++)
    room += ((fc_fleet_node *)f->nodes->pdata[i])->free_places;
  uint64_t errors = f->redis_errors;
  g_mutex_unlock(&f->lock);
  g_string_append_printf(
      o,
      "# HELP facecast_fleet_redis_up Whether the fleet registry (Redis) answered last.\n"
      "# TYPE facecast_fleet_redis_up gauge\nfacecast_fleet_redis_up %d\n"
      "# HELP facecast_fleet_redis_errors_total Registry commands that failed.\n"
      "# TYPE facecast_fleet_redis_errors_total counter\nfacecast_fleet_redis_errors_total %llu\n"
      "# HELP facecast_fleet_nodes Live nodes in the fleet (this one too), as last read.\n"
      "# TYPE facecast_fleet_nodes gauge\nfacecast_fleet_nodes %d\n"
      "# HELP facecast_fleet_free_places Free session places over the fleet, as last read.\n"
      "# TYPE facecast_fleet_free_places gauge\nfacecast_fleet_free_places %d\n"
      "# HELP facecast_fleet_proxied_total Requests this node passed to the node that serves "
      "them: offers it had no room for, requests for sessions held elsewhere.\n"
      "# TYPE facecast_fleet_proxied_total counter\n"
      "facecast_fleet_proxied_total{kind=\"offer\"} %llu\n"
      "facecast_fleet_proxied_total{kind=\"session\"} %llu\n"
      "# HELP facecast_fleet_redirects_total Offers answered 307 (--fleet-redirect).\n"
      "# TYPE facecast_fleet_redirects_total counter\nfacecast_fleet_redirects_total %llu\n"
      "# HELP facecast_fleet_proxy_failures_total Proxied requests the other node failed.\n"
      "# TYPE facecast_fleet_proxy_failures_total counter\n"
      "facecast_fleet_proxy_failures_total %llu\n"
      "# HELP facecast_fleet_unroutable_total Requests for sessions held elsewhere that could "
      "not be routed (Redis down, the node gone).\n"
      "# TYPE facecast_fleet_unroutable_total counter\nfacecast_fleet_unroutable_total %llu\n",
      up, (unsigned long long)errors, nodes, room, (unsigned long long)f->proxied_offers,
      (unsigned long long)f->proxied_requests, (unsigned long long)f->redirects,
      (unsigned long long)f->proxy_failures, (unsigned long long)f->not_routed);
}

/* ---- lifetime ------------------------------------------------------------------------------ */

int fc_fleet_proxy_init(fc_fleet *f) {
  f->owners = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  /* many sessions' requests and streams to one other node at once: libsoup's default of two
   * connections per host would queue them behind each other */
  f->http = soup_session_new_with_options("timeout", IO_TIMEOUT_S, "idle-timeout", 60,
                                          "max-conns", 4096, "max-conns-per-host", 1024,
                                          "user-agent", "facecast-fleet", NULL);
  f->stream = soup_session_new_with_options("timeout", 0, "idle-timeout", 60, "max-conns", 4096,
                                            "max-conns-per-host", 1024, "user-agent",
                                            "facecast-fleet", NULL);
  /* the answer passes as the other node wrote it: no decoding on the way */
  soup_session_remove_feature_by_type(f->http, SOUP_TYPE_CONTENT_DECODER);
  soup_session_remove_feature_by_type(f->stream, SOUP_TYPE_CONTENT_DECODER);
  return FC_OK;
}

void fc_fleet_proxy_stop(fc_fleet *f) {
  for (GList *l = f->proxies; l; l = l->next) g_cancellable_cancel(((proxy *)l->data)->cancel);
  /* their callbacks (and the registry thread's last answers) run on the main loop */
  gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
  while ((f->proxies || f->lookups_waiting > 0) && g_get_monotonic_time() < deadline)
    if (!g_main_context_iteration(f->srv->ctx, FALSE)) g_usleep(1000);
  if (f->owners) g_hash_table_destroy(f->owners);
  if (f->http) soup_session_abort(f->http);
  if (f->stream) soup_session_abort(f->stream);
  g_clear_object(&f->http);
  g_clear_object(&f->stream);
}
