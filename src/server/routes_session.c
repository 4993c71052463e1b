/* HTTP routes that make and end sessions: POST /offer, POST /whep and DELETE /whep/{id},
 * DELETE /session/{id} (see http.c for the plumbing they share). */
#include "facecast/error.h"
#include "server/internal.h"

#include <json-glib/json-glib.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    fc_http_error(msg, fc_http_status_of(a->err), "%s", a->detail);
    soup_server_message_unpause(msg);
    g_object_unref(msg);
    fc_session_close(s, "negotiation failed");
    return G_SOURCE_REMOVE;
  }
  if (s->whep) {
    char *loc = g_strdup_printf("/whep/%s", s->id);
    soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Location", loc);
    g_free(loc);
    /* the ICE servers this client may use (RFC 9725 §4.4), e.g. TURN when UDP is blocked */
    fc_ice_link_headers(s->srv, soup_server_message_get_response_headers(msg));
    soup_server_message_set_status(msg, 201, NULL);
    soup_server_message_set_response(msg, "application/sdp", SOUP_MEMORY_COPY, a->sdp,
                                     strlen(a->sdp));
  } else {
    char *q = fc_http_json_quote(a->sdp);
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
    if (!s->srv->p.quiet) g_message("session %llu connected", (unsigned long long)s->serial);
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
                          fc_avatar *av, fc_say_opts *ref) {
  int err;
  fc_session *s = fc_session_new(srv, av, fc_http_owner(msg), &err);
  if (!s) {
    fc_http_error(msg, fc_http_status_of(err), "%s", fc_error_detail(err));
    return;
  }
  s->whep = whep;
  if (ref) { /* LiveTalking's refaudio/reftext: the session's voice to clone */
    s->ref_audio = g_strdup(ref->ref_audio);
    s->ref_text = g_strdup(ref->ref_text);
    s->ref_local = ref->ref_local;
  }
  s->offer_msg = g_object_ref(msg);
  soup_server_message_pause(msg);
  fc_live_params lp = fc_session_live_params(srv, s, FC_LIVE_WEBRTC);
  char *turn; /* time-limited credentials, when so configured */
  lp.turn_server = fc_ice_session_turn(srv, &turn);
  lp.on_state = on_state;
  lp.user = s;
  /* The callbacks hold no reference: they only run while the output exists, and the session
   * outlives its output (fc_session_close destroys the output before dropping the table's
   * reference; the marshalled events take their own). */
  fc_live *live = fc_live_create(&lp, sdp, on_answer, s, &err);
  g_free(turn); /* the output keeps no pointer to its parameters' strings */
  if (!live) {
    g_object_unref(s->offer_msg);
    s->offer_msg = NULL;
    fc_http_error(msg, fc_http_status_of(err), "%s", fc_error_detail(err));
    soup_server_message_unpause(msg);
    fc_session_close(s, "bad offer");
    fc_session_unref(s);
    return;
  }
  g_mutex_lock(&s->out_lock);
  s->out = fc_live_sink(live); /* the session knows it only as an output from here on */
  g_mutex_unlock(&s->out_lock);
  s->connect_timer = g_timeout_add_seconds(30, connect_timeout, s);
  if (!srv->p.quiet)
    g_message("session %llu created (%s, id %.8s..., %s)", (unsigned long long)s->serial,
              whep ? "WHEP" : "offer", s->id, s->owner[0] ? s->owner : "no API key");
  fc_session_unref(s);
}

void fc_route_offer(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                    gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  const char *sdp = fc_http_str_member(msg, o, "sdp");
  const char *type = sdp ? fc_http_str_member(msg, o, "type") : NULL;
  const char *avname = NULL;
  fc_say_opts ref = {0};
  if (type && strcmp(type, "offer") != 0) {
    fc_http_error(msg, 400, "'type' must be \"offer\"");
  } else if (type && !fc_http_opt_str(msg, o, "avatar", &avname) &&
             !fc_http_say_opts(srv, msg, o, 1, &ref)) {
    int err = 0;
    fc_avatar *a = fc_server_avatar_get(srv, avname, &err);
    if (!a)
      fc_http_error(msg, err == FC_ENOTFOUND ? 404 : 400, "%s", fc_error_detail(err));
    else
      start_session(srv, msg, sdp, 0, a, &ref);
  }
  g_free(ref.voice);
  g_free(ref.emotion);
  g_free(ref.ref_audio);
  g_free(ref.ref_text);
  g_object_unref(jp);
}

void fc_route_whep(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                   gpointer user) {
  fc_server *srv = user;
  if (fc_http_is_method(msg, "DELETE") && g_str_has_prefix(path, "/whep/")) {
    fc_session *s = fc_http_session_find(srv, msg, path + 6);
    if (!s) {
      fc_http_error(msg, 404, "unknown session");
      return;
    }
    if (s->push) { /* not a WHEP resource (and only the server's end closes it) */
      fc_session_unref(s);
      fc_http_error(msg, 404, "unknown session");
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
  if (fc_http_is_method(msg, "OPTIONS")) { /* a player asking for ICE servers before its offer */
    SoupMessageHeaders *h = soup_server_message_get_response_headers(msg);
    fc_ice_link_headers(srv, h);
    soup_message_headers_replace(h, "Accept-Post", "application/sdp");
    soup_server_message_set_status(msg, 204, NULL);
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
  fc_avatar *a = fc_server_avatar_get(srv, fc_http_query_get(q, "avatar"), &err);
  if (!a)
    fc_http_error(msg, err == FC_ENOTFOUND ? 404 : 400, "%s", fc_error_detail(err));
  else
    start_session(srv, msg, sdp, 1, a, NULL);
  g_free(sdp);
}

void fc_route_session(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                      gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "DELETE")) return;
  const char *id = g_str_has_prefix(path, "/session/") ? path + 9 : "";
  fc_session *s = fc_http_session_find(srv, msg, id);
  if (!s) {
    fc_http_error(msg, 404, "unknown session");
    return;
  }
  if (s->push) { /* nothing would make it again: it lives as long as the server */
    fc_session_unref(s);
    fc_http_error(msg, 409, "session %s is the push transport's: it lives as long as the server",
                  id);
    return;
  }
  fc_session_close(s, "deleted");
  fc_session_unref(s);
  fc_http_ok(msg, NULL);
}

