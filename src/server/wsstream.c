/* WS /ws/stream: a session whose output is the WebSocket itself, for front ends that do not
 * speak WebRTC (game engines, native apps, kiosks). Opening it makes a session as POST /offer
 * does (the same limits, keys and ?avatar=); closing it closes the session, and a session
 * closed otherwise (admin stop, DELETE, the server stopping) closes it with the reason.
 *
 * The protocol (README "WebSocket stream"): a text message {"type":"session",...} first, then
 * binary messages of media/wsstream.h's header and payload (H.264 access units, PCM), and the
 * session's speech events as text, the JSON its SSE events carry. The client may send
 * {"type":"keyframe"}; anything else is answered {"type":"error","msg":...} and ignored.
 *
 * Why the bookkeeping. libsoup's WebSocket queues whatever it is given, without bound and
 * without saying how much waits, so a client that reads slowly would make the server hold
 * ever more of its stream and the client ever later pictures. What waits is counted here: the
 * wire bytes handed to libsoup minus those the connection wrote (listener.h counts them), plus
 * the messages not yet handed over. Over the limit (about one second of the stream) video is
 * dropped until a key frame comes with the backlog down to half of it (one is asked for as
 * soon as the backlog has drained that far: one asked for earlier would only be dropped, and
 * the periodic one may be up to 2 s away); sound goes on for about two seconds more and is
 * then dropped as well. Both are counted (admin API, /metrics). The kernel's send buffer is capped so that the
 * backlog is where it can be counted, not seconds of it in the socket.
 *
 * Threads. The media output calls on_message from its threads (the encoder's for video, the
 * queue's for audio): it decides, under `lock`, to drop or queue the message and wakes the
 * main loop through `wake` (one source for the output's life: nothing to free per message).
 * The main loop hands the queued messages to libsoup. Neither the pacer (whose push only
 * copies into the output's ring) nor the main loop ever waits for the client. */
#include "facecast/error.h"
#include "media/wsstream.h"
#include "server/internal.h"
#include "server/listener.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define MIN_LIMIT (48 * 1024)       /* backlog bytes before video is dropped, at the least */
#define AUDIO_EXTRA_S 2             /* sound goes on this long past the video's limit */
#define SEND_BUFFER (64 * 1024)     /* the kernel's send buffer (Linux doubles it) */
#define CLIENT_MAX_MESSAGE 4096     /* what a client sends is a small command */

struct fc_wsout {
  fc_server *srv;
  fc_session *s;               /* not referenced: the session frees this at its close */
  SoupWebsocketConnection *ws; /* referenced */
  fc_conn *conn;               /* referenced (NULL outside a listener: then nothing is counted) */
  GSource *wake;               /* dispatches drain() on the main loop */
  int closing;                 /* main loop: fc_wsout_close ran */

  GMutex lock;         /* everything below but the atomics */
  fc_wss *media;       /* the output's handle for key frame requests (NULL until made) */
  GQueue q;            /* GBytes* of binary messages not yet handed to libsoup */
  uint64_t queued;     /* their wire bytes */
  uint64_t handed;     /* wire bytes handed to libsoup (also written by the main loop) */
  uint64_t base;       /* the connection's bytes written before the WebSocket began */
  int video_gap;       /* dropping video until a key frame */
  int asked;           /* a key frame was asked for since the backlog drained */
  double frame_bytes;  /* video bytes per frame, a moving average */
  uint64_t limit;      /* the backlog over which video is dropped */
  uint64_t audio_limit;
  int fps, rate;
  _Atomic uint64_t video_dropped, audio_dropped, sent_messages;
};

/* The bytes a server frame of a payload of n takes on the wire (RFC 6455 §5.2, unmasked). */
static uint64_t wire(size_t n) {
  return n + (n < 126 ? 2 : n < 65536 ? 4 : 10);
}

/* What waits for the client (lock held). */
static uint64_t backlog_locked(fc_wsout *o) {
  const uint64_t out = fc_conn_bytes_written(o->conn) - o->base;
  const uint64_t in_soup = o->handed > out ? o->handed - out : 0;
  return o->conn ? o->queued + in_soup : o->queued;
}

int fc_wsstream_parse_client(const char *data, size_t n, char *why, size_t why_n) {
  JsonParser *jp = json_parser_new();
  GError *e = NULL;
  int cmd = -1;
  if (n > CLIENT_MAX_MESSAGE) {
    snprintf(why, why_n, "message too long (%zu bytes; commands are small JSON objects)", n);
  } else if (!json_parser_load_from_data(jp, data, (gssize)n, &e)) {
    snprintf(why, why_n, "not JSON: %s", e ? e->message : "?");
  } else {
    JsonNode *root = json_parser_get_root(jp);
    JsonObject *o = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
    JsonNode *t = o ? json_object_get_member(o, "type") : NULL;
    const char *type = t && JSON_NODE_HOLDS_VALUE(t) && json_node_get_value_type(t) == G_TYPE_STRING
                           ? json_node_get_string(t)
                           : NULL;
    if (!o)
      snprintf(why, why_n, "expected a JSON object");
    else if (!type)
      snprintf(why, why_n, "expected a string member \"type\"");
    else if (!strcmp(type, "keyframe"))
      cmd = FC_WSS_CMD_KEYFRAME;
    else
      snprintf(why, why_n, "unknown type \"%.40s\" (known: keyframe)", type);
  }
  if (e) g_error_free(e);
  g_object_unref(jp);
  return cmd;
}

/* ---- from the output's threads ---- */

static void request_keyframe_locked(fc_wsout *o) {
  if (o->media) fc_wss_request_keyframe(o->media);
}

static void on_message(void *user, const uint8_t *hdr, const uint8_t *payload, size_t n, int kind,
                       int flags) {
  fc_wsout *o = user;
  g_mutex_lock(&o->lock);
  const uint64_t backlog = backlog_locked(o);
  if (kind == FC_WSS_VIDEO) {
    o->frame_bytes = o->frame_bytes * 0.9 + (double)n * 0.1;
    const uint64_t second = (uint64_t)(o->frame_bytes * o->fps) + 2u * (uint64_t)o->rate;
    o->limit = second > MIN_LIMIT ? second : MIN_LIMIT;
    o->audio_limit = o->limit + AUDIO_EXTRA_S * (wire(2u * (size_t)o->rate / (size_t)o->fps +
                                                      FC_WSS_HEADER_BYTES) *
                                                 (uint64_t)o->fps);
    if (!o->video_gap && backlog > o->limit) { /* the client fell behind: a gap from here */
      o->video_gap = 1;
      o->asked = 0;
    }
    if (o->video_gap) {
      const int drained = backlog <= o->limit / 2;
      if (!drained || !(flags & FC_WSS_KEY)) {
        atomic_fetch_add_explicit(&o->video_dropped, 1, memory_order_relaxed);
        if (drained && !o->asked) { /* the next key frame can go out: ask for it now */
          o->asked = 1;
          request_keyframe_locked(o);
        }
        g_mutex_unlock(&o->lock);
        return;
      }
      o->video_gap = 0; /* a key frame, and room for it: the stream goes on from here */
    }
  } else if (backlog > o->audio_limit) {
    atomic_fetch_add_explicit(&o->audio_dropped, 1, memory_order_relaxed);
    g_mutex_unlock(&o->lock);
    return;
  }
  uint8_t *m = g_malloc(FC_WSS_HEADER_BYTES + n);
  memcpy(m, hdr, FC_WSS_HEADER_BYTES);
  memcpy(m + FC_WSS_HEADER_BYTES, payload, n);
  const int was_empty = g_queue_is_empty(&o->q);
  g_queue_push_tail(&o->q, g_bytes_new_take(m, FC_WSS_HEADER_BYTES + n));
  o->queued += wire(FC_WSS_HEADER_BYTES + n);
  if (was_empty) g_source_set_ready_time(o->wake, 0); /* any thread */
  g_mutex_unlock(&o->lock);
}

/* ---- the main loop ---- */

static gboolean drain(gpointer data) {
  fc_wsout *o = data;
  g_source_set_ready_time(o->wake, -1);
  GQueue q = G_QUEUE_INIT;
  g_mutex_lock(&o->lock);
  q = o->q;
  g_queue_init(&o->q);
  o->handed += o->queued; /* in libsoup's queue from here on */
  o->queued = 0;
  g_mutex_unlock(&o->lock);
  const int open = !o->closing && soup_websocket_connection_get_state(o->ws) ==
                                      SOUP_WEBSOCKET_STATE_OPEN;
  GBytes *b;
  while ((b = g_queue_pop_head(&q))) {
    if (open) {
      soup_websocket_connection_send_message(o->ws, SOUP_WEBSOCKET_DATA_BINARY, b);
      atomic_fetch_add_explicit(&o->sent_messages, 1, memory_order_relaxed);
    }
    g_bytes_unref(b);
  }
  return G_SOURCE_CONTINUE;
}

static gboolean wake_dispatch(GSource *src, GSourceFunc cb, gpointer data) {
  (void)src;
  return cb(data);
}

static GSourceFuncs wake_funcs = {.dispatch = wake_dispatch};

void fc_wsout_send_text(fc_wsout *o, const char *text, size_t n) {
  if (!o || o->closing || soup_websocket_connection_get_state(o->ws) != SOUP_WEBSOCKET_STATE_OPEN)
    return;
  g_mutex_lock(&o->lock);
  o->handed += wire(n);
  g_mutex_unlock(&o->lock);
  GBytes *b = g_bytes_new(text, n);
  soup_websocket_connection_send_message(o->ws, SOUP_WEBSOCKET_DATA_TEXT, b);
  g_bytes_unref(b);
}

static void send_json(fc_wsout *o, const char *json) {
  fc_wsout_send_text(o, json, strlen(json));
}

static void ws_message(SoupWebsocketConnection *c, gint type, GBytes *msg, gpointer user) {
  fc_wsout *o = user;
  (void)c;
  fc_conn_ws_message(o->conn);
  if (o->closing) return;
  char why[160];
  gsize n;
  const char *d = g_bytes_get_data(msg, &n);
  int cmd = -1;
  if (type != SOUP_WEBSOCKET_DATA_TEXT)
    snprintf(why, sizeof why, "send JSON text messages, e.g. {\"type\":\"keyframe\"}");
  else
    cmd = fc_wsstream_parse_client(d, n, why, sizeof why);
  if (cmd == FC_WSS_CMD_KEYFRAME) {
    g_mutex_lock(&o->lock);
    request_keyframe_locked(o);
    g_mutex_unlock(&o->lock);
    return;
  }
  char *q = fc_http_json_quote(why);
  char *err = g_strdup_printf("{\"type\":\"error\",\"msg\":%s}", q);
  send_json(o, err);
  g_free(err);
  g_free(q);
}

static void unref_session(gpointer data) {
  fc_session_unref(data);
}

static gboolean close_session(gpointer data) {
  fc_session_close(data, "its stream WebSocket closed");
  return G_SOURCE_REMOVE;
}

static void ws_closed(SoupWebsocketConnection *c, gpointer user) {
  fc_wsout *o = user;
  (void)c;
  if (o->closing) return;
  /* Not from inside the connection's own signal: closing the session frees this and drops
   * what may be the connection's last reference. */
  fc_session_ref(o->s);
  GSource *src = g_idle_source_new();
  g_source_set_callback(src, close_session, o->s, unref_session);
  g_source_attach(src, o->srv->ctx);
  g_source_unref(src);
}

void fc_wsout_close(fc_wsout *o, const char *why) {
  if (!o || o->closing) return;
  o->closing = 1;
  g_signal_handlers_disconnect_by_data(o->ws, o);
  if (soup_websocket_connection_get_state(o->ws) == SOUP_WEBSOCKET_STATE_OPEN) {
    char reason[124]; /* a close frame's reason fits in 123 bytes */
    snprintf(reason, sizeof reason, "session closed: %s", why ? why : "");
    if (strlen(reason) >= 120) { /* cut on a character boundary */
      const char *end = NULL;
      g_utf8_validate(reason, 120, &end);
      reason[end - reason] = 0;
    }
    soup_websocket_connection_close(o->ws, SOUP_WEBSOCKET_CLOSE_NORMAL, reason);
  }
}

void fc_wsout_free(fc_wsout *o) {
  if (!o) return;
  fc_wsout_close(o, "closed");
  g_source_destroy(o->wake);
  g_source_unref(o->wake);
  g_queue_clear_full(&o->q, (GDestroyNotify)g_bytes_unref);
  g_mutex_clear(&o->lock);
  g_object_unref(o->ws);
  fc_conn_unref(o->conn);
  g_free(o);
}

void fc_wsout_stats(fc_wsout *o, uint64_t *video_dropped, uint64_t *audio_dropped,
                    uint64_t *backlog) {
  *video_dropped = atomic_load_explicit(&o->video_dropped, memory_order_relaxed);
  *audio_dropped = atomic_load_explicit(&o->audio_dropped, memory_order_relaxed);
  g_mutex_lock(&o->lock);
  *backlog = backlog_locked(o);
  g_mutex_unlock(&o->lock);
}

/* ---- the route ---- */

/* Before the upgrade (libsoup runs a path's plain handler first, and upgrades only when it set
 * no status): the refusals a client can act on come as HTTP errors, not as an open socket
 * that closes at once. Creation checks again (the server may fill up meanwhile). */
void fc_route_ws_stream_check(SoupServer *server, SoupServerMessage *msg, const char *path,
                              GHashTable *q, gpointer user) {
  fc_server *srv = user;
  (void)server, (void)path;
  if (!fc_http_require_method(msg, "GET")) return;
  int err = 0;
  fc_avatar *a = fc_server_avatar_get(srv, fc_http_query_get(q, "avatar"), &err);
  if (!a) {
    fc_http_error(msg, err == FC_ENOTFOUND ? 404 : 400, "%s", fc_error_detail(err));
    return;
  }
  fc_server_avatar_put(srv, a);
  g_mutex_lock(&srv->lock);
  const int full = (int)g_hash_table_size(srv->sessions) >= srv->p.max_sessions;
  g_mutex_unlock(&srv->lock);
  if (full)
    fc_http_error(msg, 503, "all %d sessions are in use; try again later", srv->p.max_sessions);
  else if (srv->closing)
    fc_http_error(msg, 503, "the server is stopping");
}

static void refuse(SoupWebsocketConnection *c, int err) {
  /* 1013 "try again later" for a full server, else 1011 (RFC 6455 §7.4, IANA registry) */
  soup_websocket_connection_close(c, err == FC_EBUSY ? 1013 : SOUP_WEBSOCKET_CLOSE_SERVER_ERROR,
                                  fc_error_detail(err));
}

void fc_route_ws_stream(SoupServer *server, SoupServerMessage *msg, const char *path,
                        SoupWebsocketConnection *c, gpointer user) {
  fc_server *srv = user;
  (void)server, (void)path;
  GUri *uri = soup_server_message_get_uri(msg);
  const char *query = g_uri_get_query(uri);
  GHashTable *q = query ? g_uri_parse_params(query, -1, "&", G_URI_PARAMS_NONE, NULL) : NULL;
  int err = 0;
  fc_avatar *av = fc_server_avatar_get(srv, q ? g_hash_table_lookup(q, "avatar") : NULL, &err);
  if (q) g_hash_table_destroy(q);
  fc_session *s = av ? fc_session_new(srv, av, fc_http_owner(msg), &err) : NULL;
  if (!s) {
    refuse(c, err);
    return;
  }
  fc_wsout *o = g_new0(fc_wsout, 1);
  o->srv = srv;
  o->s = s;
  o->ws = g_object_ref(c);
  o->conn = fc_conn_of(msg);
  g_mutex_init(&o->lock);
  g_queue_init(&o->q);
  o->video_gap = 1; /* the first picture out is a key frame (the encoder's first is one) */
  o->asked = 1;
  o->fps = FC_FPS;
  o->rate = FC_SAMPLE_RATE;
  o->limit = MIN_LIMIT;
  o->audio_limit = MIN_LIMIT + AUDIO_EXTRA_S * 2u * FC_SAMPLE_RATE;
  o->wake = g_source_new(&wake_funcs, sizeof(GSource));
  g_source_set_callback(o->wake, drain, o, NULL);
  g_source_set_ready_time(o->wake, -1);
  g_source_attach(o->wake, srv->ctx);
  fc_conn_mark_websocket(o->conn, CLIENT_MAX_MESSAGE);
  soup_websocket_connection_set_max_incoming_payload_size(c, CLIENT_MAX_MESSAGE);
  fc_conn_limit_send_buffer(o->conn, SEND_BUFFER);
  o->base = fc_conn_bytes_written(o->conn); /* the 101 answer is not the stream's */
  s->wsout = o;
  s->state = FC_LIVE_CONNECTED; /* the client is here: nothing to wait for */
  g_signal_connect(c, "message", G_CALLBACK(ws_message), o);
  g_signal_connect(c, "closed", G_CALLBACK(ws_closed), o);

  const fc_live_params lp = fc_session_live_params(srv, s, FC_LIVE_WEBRTC);
  const fc_wss_params wp = {.width = lp.width,
                            .height = lp.height,
                            .fps = lp.fps,
                            .sample_rate = lp.sample_rate,
                            .video_qp = lp.video_qp,
                            .x264_preset = lp.x264_preset,
                            .on_message = on_message,
                            .user = o};
  fc_wss *media = NULL;
  fc_sink *out = fc_wss_sink_create(&wp, &media, &err);
  if (!out) {
    g_signal_handlers_disconnect_by_data(c, o);
    o->closing = 1;
    refuse(c, err);
    fc_session_close(s, "its stream output could not be made");
    fc_session_unref(s);
    return;
  }
  g_mutex_lock(&o->lock);
  o->media = media;
  g_mutex_unlock(&o->lock);
  char *hello = g_strdup_printf(
      "{\"type\":\"session\",\"sessionid\":\"%s\",\"width\":%d,\"height\":%d,\"fps\":%d,"
      "\"video\":{\"codec\":\"h264\",\"format\":\"annexb\",\"profile\":\"" FC_WSS_PROFILE "\"},"
      "\"audio\":{\"format\":\"s16le\",\"rate\":%d,\"channels\":1},\"header_bytes\":%d}",
      s->id, lp.width, lp.height, lp.fps, lp.sample_rate, FC_WSS_HEADER_BYTES);
  send_json(o, hello); /* before any media: the output has not had a frame yet */
  g_free(hello);
  g_mutex_lock(&s->out_lock);
  s->out = out; /* the pacer's from here on */
  g_mutex_unlock(&s->out_lock);
  if (!srv->p.quiet)
    g_message("session %llu created (WebSocket stream, id %.8s..., %s)",
              (unsigned long long)s->serial, s->id, s->owner[0] ? s->owner : "no API key");
  fc_session_unref(s); /* the table holds it */
}
