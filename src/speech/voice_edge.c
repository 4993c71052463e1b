/* The Edge read-aloud provider (voice.h): one WebSocket per utterance, as Edge itself does.
 *
 *   → upgrade to {url}&ConnectionId=…&Sec-MS-GEC=…&Sec-MS-GEC-Version=…, with the headers of
 *     Edge's extension (Origin, User-Agent, a random muid cookie)
 *   → text "speech.config" (MP3 24 kHz 48 kbit/s: the one format the service still serves)
 *   → text "ssml" (the utterance)
 *   ← text turn.start / response / audio.metadata (ignored), binary audio frames (2-byte
 *     header length, headers, MP3 bytes), text turn.end: done
 *
 * libsoup's WebSocket API is asynchronous, so the call runs a GMainContext of its own in the
 * calling thread until turn.end, an error, the I/O timeout (between two frames) or the
 * cancellable (a GCancellable source on the same context wakes it at once). MP3 frames are
 * pushed into a GStreamer decoder as they come and what it has decoded goes on at once. */
#include "facecast/error.h"
#include "speech/voice_internal.h"

#include <libsoup/soup.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct edge_call {
  const fc_voice *v;
  voice_out *o;
  GMainContext *ctx;
  SoupWebsocketConnection *ws;
  const char *ssml;
  int done, err, connecting;
  gint64 last; /* when the last frame came (the I/O timeout counts from it) */
} edge_call;

static void finish(edge_call *c, int err) {
  if (c->done) return;
  c->done = 1;
  c->err = err;
}

static int fail(edge_call *c, const char *what) {
  return fc_error_set(FC_EREMOTE, "edge TTS at %s: %s", c->v->shown, what);
}

/* "Thu Jan 01 2026 00:00:00 GMT+0000 (Coordinated Universal Time)" */
static void js_date(char *out, size_t cap) {
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  static const char *const wd[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char *const mo[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  snprintf(out, cap, "%s %s %02d %04d %02d:%02d:%02d GMT+0000 (Coordinated Universal Time)",
           wd[tm.tm_wday], mo[tm.tm_mon], tm.tm_mday, tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
           tm.tm_sec);
}

static void hex_id(char *out, int upper) { /* 32 hex digits of 16 random bytes */
  for (int i = 0; i < 16; i++)
    snprintf(out + 2 * i, 3, upper ? "%02X" : "%02x", (unsigned)g_random_int_range(0, 256));
}

static void on_message(SoupWebsocketConnection *ws, gint type, GBytes *msg, gpointer user) {
  edge_call *c = user;
  if (c->done) return;
  c->last = g_get_monotonic_time();
  gsize n;
  const uint8_t *d = g_bytes_get_data(msg, &n);
  int err;
  if (type == SOUP_WEBSOCKET_DATA_BINARY) {
    const uint8_t *mp3;
    size_t k;
    if ((err = fc_edge_binary(d, n, &mp3, &k))) {
      char *why = g_strdup(fc_error_detail(err));
      finish(c, fail(c, why));
      g_free(why);
    } else if (k && (err = voice_out_mp3(c->o, mp3, k))) {
      if (err != FC_ECANCELED) {
        char *why = g_strdup(fc_error_detail(err));
        err = fail(c, why);
        g_free(why);
      }
      finish(c, err);
    }
    return;
  }
  char path[64];
  if ((err = fc_edge_text_path((const char *)d, n, path, sizeof path))) {
    char *why = g_strdup(fc_error_detail(err));
    finish(c, fail(c, why));
    g_free(why);
  } else if (!strcmp(path, "turn.end")) {
    finish(c, 0);
  } else if (strcmp(path, "turn.start") && strcmp(path, "response") &&
             strcmp(path, "audio.metadata")) {
    char what[128];
    snprintf(what, sizeof what, "an unknown message '%s'", path);
    finish(c, fail(c, what));
  }
}

static void on_closed(SoupWebsocketConnection *ws, gpointer user) {
  edge_call *c = user;
  if (!c->done) finish(c, fail(c, "the service closed the connection before the end"));
}

static void on_error(SoupWebsocketConnection *ws, GError *e, gpointer user) {
  edge_call *c = user;
  if (!c->done) finish(c, fail(c, e->message));
}

static void send_text(edge_call *c, const char *path, const char *type, const char *body,
                      int z) {
  char date[96], id[33];
  js_date(date, sizeof date);
  hex_id(id, 0);
  char *m = !strcmp(path, "ssml")
                ? g_strdup_printf("X-RequestId:%s\r\nContent-Type:%s\r\nX-Timestamp:%s%s\r\n"
                                  "Path:%s\r\n\r\n%s",
                                  id, type, date, z ? "Z" : "", path, body)
                : g_strdup_printf("X-Timestamp:%s\r\nContent-Type:%s\r\nPath:%s\r\n\r\n%s\r\n",
                                  date, type, path, body);
  soup_websocket_connection_send_text(c->ws, m);
  g_free(m);
}

static void on_connected(GObject *src, GAsyncResult *res, gpointer user) {
  edge_call *c = user;
  GError *e = NULL;
  c->connecting = 0;
  SoupWebsocketConnection *ws =
      soup_session_websocket_connect_finish(SOUP_SESSION(src), res, &e);
  if (c->done) { /* cancelled or timed out meanwhile */
    if (ws) g_object_unref(ws);
    g_clear_error(&e);
    return;
  }
  if (!ws) {
    if (g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
      finish(c, fc_error_set(FC_ECANCELED, "speech cancelled"));
    } else {
      char *what = g_strdup_printf("the WebSocket was refused: %s", e ? e->message : "?");
      finish(c, fail(c, what));
      g_free(what);
    }
    g_clear_error(&e);
    return;
  }
  c->ws = ws;
  c->last = g_get_monotonic_time();
  g_signal_connect(ws, "message", G_CALLBACK(on_message), c);
  g_signal_connect(ws, "closed", G_CALLBACK(on_closed), c);
  g_signal_connect(ws, "error", G_CALLBACK(on_error), c);
  send_text(c, "speech.config", "application/json; charset=utf-8",
            "{\"context\":{\"synthesis\":{\"audio\":{\"metadataoptions\":{"
            "\"sentenceBoundaryEnabled\":\"false\",\"wordBoundaryEnabled\":\"true\"},"
            "\"outputFormat\":\"audio-24khz-48kbitrate-mono-mp3\"}}}}",
            0);
  send_text(c, "ssml", "application/ssml+xml", c->ssml, 1); /* 'Z': as Edge sends it */
}

static void cancel_mine(GCancellable *theirs, gpointer mine) { g_cancellable_cancel(mine); }

static gboolean on_cancelled(GCancellable *cancel, gpointer user) {
  edge_call *c = user;
  if (!c->done) /* (after the end: the error detail must not be overwritten) */
    finish(c, fc_error_set(FC_ECANCELED, "speech cancelled"));
  return G_SOURCE_REMOVE;
}

static gboolean on_tick(gpointer user) {
  edge_call *c = user;
  if (!c->done && g_get_monotonic_time() - c->last > (gint64)c->v->timeout_s * G_USEC_PER_SEC) {
    char what[96];
    snprintf(what, sizeof what, "nothing for %d s", c->v->timeout_s);
    finish(c, fail(c, what));
  }
  return G_SOURCE_CONTINUE;
}

int voice_edge_speak(const fc_voice *v, const char *voice, const char *text, voice_out *o) {
  edge_call c = {.v = v, .o = o, .last = g_get_monotonic_time()};
  c.ctx = g_main_context_new();
  g_main_context_push_thread_default(c.ctx);
  char gec[65], conn_id[33], muid[33];
  fc_edge_gec((int64_t)time(NULL), gec);
  hex_id(conn_id, 0);
  hex_id(muid, 1);
  char *url = g_strdup_printf("%s%cConnectionId=%s&Sec-MS-GEC=%s&Sec-MS-GEC-Version=%s", v->url,
                              strchr(v->url, '?') ? '&' : '?', conn_id, gec, v->edge_version);
  char *ssml = fc_edge_ssml(text, voice);
  c.ssml = ssml;
  SoupSession *ss = soup_session_new_with_options("timeout", (guint)v->timeout_s, NULL);
  SoupMessage *m = soup_message_new("GET", url);
  GCancellable *mine = g_cancellable_new(); /* ours, so that a timeout can stop the connect */
  gulong link = o->cancel ? g_cancellable_connect(o->cancel, G_CALLBACK(cancel_mine),
                                                  g_object_ref(mine), g_object_unref)
                          : 0;
  GSource *cs = g_cancellable_source_new(mine), *tick = g_timeout_source_new(100);
  g_source_set_callback(cs, G_SOURCE_FUNC(on_cancelled), &c, NULL);
  g_source_set_callback(tick, on_tick, &c, NULL);
  g_source_attach(cs, c.ctx);
  g_source_attach(tick, c.ctx);
  if (!m) {
    finish(&c, fail(&c, "bad URL"));
  } else {
    SoupMessageHeaders *h = soup_message_get_request_headers(m);
    char cookie[48];
    snprintf(cookie, sizeof cookie, "muid=%s;", muid);
    soup_message_headers_replace(h, "Pragma", "no-cache");
    soup_message_headers_replace(h, "Cache-Control", "no-cache");
    soup_message_headers_replace(h, "User-Agent",
                                 "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
                                 "(KHTML, like Gecko) Chrome/143.0.0.0 Safari/537.36 "
                                 "Edg/143.0.0.0");
    soup_message_headers_replace(h, "Accept-Language", "en-US,en;q=0.9");
    soup_message_headers_replace(h, "Cookie", cookie);
    c.connecting = 1;
    soup_session_websocket_connect_async(ss, m, "chrome-extension://jdiccldimpdaibmpdkjnbmckianbfold",
                                         NULL, G_PRIORITY_DEFAULT, mine, on_connected, &c);
  }
  while (!c.done) g_main_context_iteration(c.ctx, TRUE);
  int err = c.err;
  if (c.ws) {
    g_signal_handlers_disconnect_by_data(c.ws, &c);
    if (soup_websocket_connection_get_state(c.ws) == SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close(c.ws, SOUP_WEBSOCKET_CLOSE_NORMAL, NULL);
    g_object_unref(c.ws);
  }
  g_cancellable_cancel(mine); /* a connect still pending ends (on_connected sees done) */
  soup_session_abort(ss);
  /* a connect that was cancelled still calls back, and c must be there when it does */
  while (c.connecting) g_main_context_iteration(c.ctx, TRUE);
  while (g_main_context_iteration(c.ctx, FALSE)) {
  }
  /* what came before a failure is still spoken: the decoder gives up what it holds */
  if (err != FC_ECANCELED) {
    char *why = err ? g_strdup(fc_error_detail(err)) : NULL;
    int ferr = voice_out_finish(o);
    if (!err && ferr && ferr != FC_ECANCELED) {
      why = g_strdup(fc_error_detail(ferr));
      err = fail(&c, why);
    } else if (err) {
      err = fc_error_set(err, "%s", why); /* the first failure is the one to tell */
    } else {
      err = ferr;
    }
    g_free(why);
  }
  if (o->cancel) g_cancellable_disconnect(o->cancel, link);
  g_source_destroy(cs);
  g_source_unref(cs);
  g_source_destroy(tick);
  g_source_unref(tick);
  if (m) g_object_unref(m);
  g_object_unref(ss);
  g_object_unref(mine);
  g_free(ssml);
  g_free(url);
  g_main_context_pop_thread_default(c.ctx);
  g_main_context_unref(c.ctx);
  return err;
}
