/* Synchronous WebSocket exchanges on a private GMainContext (see wsc.h).
 *
 * The call owns a cancellable of its own, tied to the caller's: cancelling either wakes the
 * context (a GCancellable source on it), and the own one also stops a pending connect when the
 * call gives up on a timeout. A 100 ms tick checks the gap timeout. Signal handlers are
 * disconnected before the call's memory goes, and a connect still pending is waited for (it
 * calls back, cancelled, on this context), so nothing calls into freed memory. */
#include "converse/wsc.h"
#include "facecast/error.h"

#include <stdio.h>
#include <string.h>

struct fc_wsc {
  GMainContext *ctx;
  SoupSession *ss;
  SoupMessage *msg;
  SoupWebsocketConnection *ws;
  GCancellable *mine, *theirs;
  gulong link;
  GSource *cancel_src, *tick;
  char *who;
  int timeout_s;
  gint64 last;       /* the last sign of life (the timeout counts from it) */
  int connecting, done, err;
  fc_wsc_msg_fn on_msg;
  void *user;
};

static int fail(fc_wsc *w, const char *what) {
  return fc_error_set(FC_EREMOTE, "%s: %s", w->who, what);
}

/* Ends the current wait with err (the first end counts: later ones must not overwrite the
 * detail, which is why callers check `done` before making one). */
static void finish(fc_wsc *w, int err) {
  if (w->done) return;
  w->done = 1;
  w->err = err;
}

static void cancel_mine(GCancellable *theirs, gpointer mine) { g_cancellable_cancel(mine); }

static gboolean on_cancelled(GCancellable *c, gpointer user) {
  fc_wsc *w = user;
  if (!w->done) finish(w, fc_error_set(FC_ECANCELED, "cancelled"));
  return G_SOURCE_CONTINUE;
}

static gboolean on_tick(gpointer user) {
  fc_wsc *w = user;
  if (!w->done && g_get_monotonic_time() - w->last > (gint64)w->timeout_s * G_USEC_PER_SEC) {
    char what[64];
    snprintf(what, sizeof what, "nothing for %d s", w->timeout_s);
    finish(w, fail(w, what));
  }
  return G_SOURCE_CONTINUE;
}

static void on_message(SoupWebsocketConnection *ws, gint type, GBytes *msg, gpointer user) {
  fc_wsc *w = user;
  if (w->done || !w->on_msg) return;
  w->last = g_get_monotonic_time();
  gsize n;
  const uint8_t *d = g_bytes_get_data(msg, &n);
  int r = w->on_msg(w->user, type == SOUP_WEBSOCKET_DATA_BINARY, d, n);
  if (r) finish(w, r > 0 ? 0 : r);
}

static void on_closed(SoupWebsocketConnection *ws, gpointer user) {
  fc_wsc *w = user;
  if (!w->done) finish(w, fail(w, "the service closed the connection before the end"));
}

static void on_error(SoupWebsocketConnection *ws, GError *e, gpointer user) {
  fc_wsc *w = user;
  if (!w->done) finish(w, fail(w, e->message));
}

static void on_connected(GObject *src, GAsyncResult *res, gpointer user) {
  fc_wsc *w = user;
  GError *e = NULL;
  w->connecting = 0;
  w->ws = soup_session_websocket_connect_finish(SOUP_SESSION(src), res, &e);
  if (w->ws) {
    g_signal_connect(w->ws, "message", G_CALLBACK(on_message), w);
    g_signal_connect(w->ws, "closed", G_CALLBACK(on_closed), w);
    g_signal_connect(w->ws, "error", G_CALLBACK(on_error), w);
    w->last = g_get_monotonic_time();
    finish(w, 0);
  } else if (!w->done) {
    if (g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
      finish(w, fc_error_set(FC_ECANCELED, "cancelled"));
    } else {
      char *what = g_strdup_printf("the WebSocket was refused: %s", e ? e->message : "?");
      finish(w, fail(w, what));
      g_free(what);
    }
  }
  g_clear_error(&e);
}

/* Turns the context until the current wait ends; its result. */
static int wait(fc_wsc *w) {
  if (g_cancellable_is_cancelled(w->mine) && !w->done)
    finish(w, fc_error_set(FC_ECANCELED, "cancelled"));
  while (!w->done) g_main_context_iteration(w->ctx, TRUE);
  w->done = 0;
  return w->err;
}

fc_wsc *fc_wsc_connect(SoupMessage *msg, const char *origin, const char *const *protocols,
                       int timeout_s, GCancellable *cancel, const char *who, int *err) {
  fc_wsc *w = g_new0(fc_wsc, 1);
  w->ctx = g_main_context_new();
  g_main_context_push_thread_default(w->ctx);
  w->who = g_strdup(who);
  w->timeout_s = timeout_s > 0 ? timeout_s : 10;
  w->last = g_get_monotonic_time();
  w->msg = g_object_ref(msg);
  w->ss = soup_session_new_with_options("timeout", (guint)w->timeout_s, NULL);
  w->mine = g_cancellable_new();
  if (cancel) {
    w->theirs = g_object_ref(cancel);
    w->link = g_cancellable_connect(cancel, G_CALLBACK(cancel_mine), g_object_ref(w->mine),
                                    g_object_unref);
  }
  w->cancel_src = g_cancellable_source_new(w->mine);
  /* (parenthesised: the TSan build's g_source_set_callback wraps plain GSourceFuncs, and a
   * cancellable source calls its function with the cancellable first; this one runs on the
   * call's own thread, so there is no hand-off to annotate) */
  (g_source_set_callback)(w->cancel_src, G_SOURCE_FUNC(on_cancelled), w, NULL);
  g_source_attach(w->cancel_src, w->ctx);
  w->tick = g_timeout_source_new(100);
  g_source_set_callback(w->tick, on_tick, w, NULL);
  g_source_attach(w->tick, w->ctx);
  w->connecting = 1;
  soup_session_websocket_connect_async(w->ss, msg, origin, (char **)protocols, G_PRIORITY_DEFAULT,
                                       w->mine, on_connected, w);
  if ((*err = wait(w))) {
    fc_wsc_close(w);
    return NULL;
  }
  return w;
}

void fc_wsc_send_text(fc_wsc *w, const char *text) {
  soup_websocket_connection_send_text(w->ws, text);
}

void fc_wsc_send_binary(fc_wsc *w, const void *data, size_t n) {
  soup_websocket_connection_send_binary(w->ws, data, n);
}

void fc_wsc_pump(fc_wsc *w) {
  for (int i = 0; i < 16 && g_main_context_iteration(w->ctx, FALSE); i++) {
  }
}

int fc_wsc_run(fc_wsc *w, fc_wsc_msg_fn on_msg, void *user) {
  w->on_msg = on_msg;
  w->user = user;
  w->last = g_get_monotonic_time();
  int err = wait(w);
  w->on_msg = NULL;
  return err;
}

void fc_wsc_close(fc_wsc *w) {
  if (!w) return;
  w->done = 1; /* from here on nothing reports */
  /* a connect still pending calls back (cancelled, or connected after all) on this context */
  g_cancellable_cancel(w->mine);
  while (w->connecting) g_main_context_iteration(w->ctx, TRUE);
  if (w->ws) {
    g_signal_handlers_disconnect_by_data(w->ws, w);
    if (soup_websocket_connection_get_state(w->ws) == SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close(w->ws, SOUP_WEBSOCKET_CLOSE_NORMAL, NULL);
    g_object_unref(w->ws);
  }
  soup_session_abort(w->ss);
  while (g_main_context_iteration(w->ctx, FALSE)) {
  }
  if (w->theirs) {
    g_cancellable_disconnect(w->theirs, w->link);
    g_object_unref(w->theirs);
  }
  g_source_destroy(w->cancel_src);
  g_source_unref(w->cancel_src);
  g_source_destroy(w->tick);
  g_source_unref(w->tick);
  g_object_unref(w->msg);
  g_object_unref(w->ss);
  g_object_unref(w->mine);
  g_free(w->who);
  g_main_context_pop_thread_default(w->ctx);
  g_main_context_unref(w->ctx);
  g_free(w);
}
