/* One accepted connection (see listener.h, conn_internal.h): its lifetime, the streams libsoup
 * reads and writes it through, and refusals written straight to it.
 *
 * libsoup gets a GSimpleIOStream of FcConnInput and FcConnOutput over the socket's (or TLS
 * connection's) own streams. FcConnInput sees every read: the first byte of a request moves the
 * connection from IDLE to HEADERS (header timeout from then on), bytes are counted against a
 * WebSocket message's cap, and an end of stream (or error) read while IDLE, with nothing read
 * since, is the case libsoup 3.2 leaks: its reader for the next request has no completion
 * callback before a first byte, so it would drop the end of stream and never close. There the
 * socket is shut down and libsoup is handed a malformed request line ("X") instead, which it
 * answers (into the closed socket) and then disconnects properly, freeing everything.
 * FcConnOutput notes since when a write has waited for the client to read, so that a client
 * that stops reading a response is timed out too (listener.c). */
#include "core/tsan.h"
#include "server/conn_internal.h"

#include "facecast/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

GMutex fc_conn_lock;

static const char k_conn_key[] = "fc-conn";
/* Not a request line: libsoup answers 400 (into a closed socket) and disconnects. */
static const char k_closing_request[] = "X\r\n\r\n";

/* ---- lifetime --------------------------------------------------------------------------- */

fc_conn *fc_conn_new(fc_listener *l, GSocket *sock, GSocketAddress *remote, const char *peer) {
  fc_conn *c = g_new0(fc_conn, 1);
  c->refs = 1;
  c->l = l;
  c->sock = sock;
  c->remote = remote;
  g_strlcpy(c->peer, peer, sizeof c->peer);
  c->link.data = c;
  c->base = G_IO_STREAM(g_socket_connection_factory_create_connection(sock));
  c->last_read = c->since = g_get_monotonic_time();
  c->state = C_IDLE;
  g_mutex_lock(&fc_conn_lock);
  g_object_set_data(G_OBJECT(remote), k_conn_key, c);
  g_mutex_unlock(&fc_conn_lock);
  return c;
}

fc_conn *fc_conn_ref_locked(fc_conn *c) {
  if (!c || c->refs <= 0) return NULL;
  c->refs++;
  return c;
}

void fc_conn_unref(fc_conn *c) {
  if (!c) return;
  g_mutex_lock(&fc_conn_lock);
  int last = --c->refs == 0;
  if (last) {
    if (c->l) fc_listener_forget_locked(c->l, c);
    g_object_set_data(G_OBJECT(c->remote), k_conn_key, NULL);
  }
  g_mutex_unlock(&fc_conn_lock);
  if (!last) return;
  g_object_unref(c->remote);
  if (c->base) {
    g_io_stream_close(c->base, NULL, NULL);
    g_object_unref(c->base);
  }
  g_object_unref(c->sock);
  g_free(c);
}

void fc_conn_kill(fc_conn *c) {
  if (g_atomic_int_exchange(&c->killed, 1)) return;
  g_socket_shutdown(c->sock, TRUE, TRUE, NULL);
}

void fc_conn_set(fc_conn *c, conn_state st) {
  c->state = st;
  c->since = g_get_monotonic_time();
}

fc_conn *fc_conn_of(SoupServerMessage *msg) {
  GSocketAddress *a = soup_server_message_get_remote_address(msg);
  g_mutex_lock(&fc_conn_lock);
  fc_conn *c = a ? fc_conn_ref_locked(g_object_get_data(G_OBJECT(a), k_conn_key)) : NULL;
  g_mutex_unlock(&fc_conn_lock);
  return c;
}

void fc_conn_mark_websocket(fc_conn *c, size_t max_message) {
  if (!c) return;
  fc_conn_set(c, C_WS);
  c->ws_pending = 0;
  c->ws_max = max_message;
}

void fc_conn_ws_message(fc_conn *c) {
  if (c) c->ws_pending = 0;
}

uint64_t fc_conn_bytes_written(fc_conn *c) {
  return c ? __atomic_load_n(&c->written, __ATOMIC_RELAXED) : 0;
}

void fc_conn_limit_send_buffer(fc_conn *c, int bytes) {
  if (c && c->sock) g_socket_set_option(c->sock, SOL_SOCKET, SO_SNDBUF, bytes, NULL);
}

/* ---- FcConnInput: the socket's input as libsoup reads it -------------------------------- */

#define FC_TYPE_CONN_INPUT (fc_conn_input_get_type())
G_DECLARE_FINAL_TYPE(FcConnInput, fc_conn_input, FC, CONN_INPUT, GInputStream)

struct _FcConnInput {
  GInputStream parent;
  GInputStream *base; /* the connection's input stream (pollable) */
  fc_conn *conn;      /* referenced */
  const char *inject; /* the rest of k_closing_request still to hand out */
};

static void fc_conn_input_pollable_init(GPollableInputStreamInterface *iface);
G_DEFINE_TYPE_WITH_CODE(FcConnInput, fc_conn_input, G_TYPE_INPUT_STREAM,
                        G_IMPLEMENT_INTERFACE(G_TYPE_POLLABLE_INPUT_STREAM,
                                              fc_conn_input_pollable_init))

static gssize hand_out_injected(FcConnInput *s, void *buf, gsize n) {
  gsize k = strlen(s->inject);
  if (k > n) k = n;
  memcpy(buf, s->inject, k);
  s->inject += k;
  return (gssize)k;
}

/* What every read passes through: r bytes (0 at the end, -1 with *error). */
static gssize after_read(FcConnInput *s, void *buf, gsize n, gssize r, GError **error) {
  fc_conn *c = s->conn;
  if (r > 0) {
    c->last_read = g_get_monotonic_time();
    if (c->state == C_IDLE) fc_conn_set(c, C_HEADERS); /* a request's first byte */
    if (c->state == C_WS && c->ws_max && (c->ws_pending += (size_t)r) > c->ws_max) {
      g_mutex_lock(&fc_conn_lock);
      if (c->l) fc_listener_count_ws_too_large(c->l);
      g_mutex_unlock(&fc_conn_lock);
      fc_conn_kill(c);
      g_set_error(error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                  "WebSocket message over %zu bytes", c->ws_max);
      return -1;
    }
    return r;
  }
  if (r < 0 && g_error_matches(*error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK)) return r;
  if (c->state == C_IDLE && !c->injected) { /* the case libsoup 3.2 would leak */
    c->injected = 1;
    fc_conn_kill(c);
    g_clear_error(error);
    s->inject = k_closing_request;
    return hand_out_injected(s, buf, n);
  }
  return r;
}

static gssize ci_read_nonblocking(GPollableInputStream *p, void *buf, gsize n, GError **error) {
  FcConnInput *s = FC_CONN_INPUT(p);
  if (s->inject && *s->inject) return hand_out_injected(s, buf, n);
  if (s->inject) return 0;
  gssize r = g_pollable_input_stream_read_nonblocking(G_POLLABLE_INPUT_STREAM(s->base), buf, n,
                                                      NULL, error);
  return after_read(s, buf, n, r, error);
}

static gssize ci_read(GInputStream *in, void *buf, gsize n, GCancellable *cancel, GError **error) {
  FcConnInput *s = FC_CONN_INPUT(in);
  if (s->inject && *s->inject) return hand_out_injected(s, buf, n);
  if (s->inject) return 0;
  gssize r = g_input_stream_read(s->base, buf, n, cancel, error);
  return after_read(s, buf, n, r, error);
}

static gboolean ci_close(GInputStream *in, GCancellable *cancel, GError **error) {
  FcConnInput *s = FC_CONN_INPUT(in);
  FC_TSAN_ACQUIRE(s); /* (may run on GIO's close thread: see fc_conn_stream) */
  /* libsoup is done with the connection: close the socket now, not when the last reference
   * to it goes. */
  return g_io_stream_close(s->conn->base, cancel, error);
}

static gboolean ci_can_poll(GPollableInputStream *p) { return TRUE; }

static gboolean ci_is_readable(GPollableInputStream *p) {
  FcConnInput *s = FC_CONN_INPUT(p);
  return s->inject || g_pollable_input_stream_is_readable(G_POLLABLE_INPUT_STREAM(s->base));
}

static GSource *ci_create_source(GPollableInputStream *p, GCancellable *cancel) {
  FcConnInput *s = FC_CONN_INPUT(p);
  GSource *child = s->inject ? g_timeout_source_new(0)
                             : g_pollable_input_stream_create_source(
                                   G_POLLABLE_INPUT_STREAM(s->base), NULL);
  GSource *src = g_pollable_source_new_full(p, child, cancel);
  g_source_unref(child);
  return src;
}

static void ci_finalize(GObject *o) {
  FcConnInput *s = FC_CONN_INPUT(o);
  g_object_unref(s->base);
  fc_conn_unref(s->conn);
  G_OBJECT_CLASS(fc_conn_input_parent_class)->finalize(o);
}

static void fc_conn_input_class_init(FcConnInputClass *k) {
  G_OBJECT_CLASS(k)->finalize = ci_finalize;
  G_INPUT_STREAM_CLASS(k)->read_fn = ci_read;
  G_INPUT_STREAM_CLASS(k)->close_fn = ci_close;
}

static void fc_conn_input_pollable_init(GPollableInputStreamInterface *iface) {
  iface->can_poll = ci_can_poll;
  iface->is_readable = ci_is_readable;
  iface->create_source = ci_create_source;
  iface->read_nonblocking = ci_read_nonblocking;
}

static void fc_conn_input_init(FcConnInput *s) {}

/* ---- FcConnOutput: the socket's output as libsoup writes it ------------------------------ */

#define FC_TYPE_CONN_OUTPUT (fc_conn_output_get_type())
G_DECLARE_FINAL_TYPE(FcConnOutput, fc_conn_output, FC, CONN_OUTPUT, GOutputStream)

struct _FcConnOutput {
  GOutputStream parent;
  GOutputStream *base; /* the connection's output stream (pollable) */
  fc_conn *conn;       /* referenced */
};

static void fc_conn_output_pollable_init(GPollableOutputStreamInterface *iface);
G_DEFINE_TYPE_WITH_CODE(FcConnOutput, fc_conn_output, G_TYPE_OUTPUT_STREAM,
                        G_IMPLEMENT_INTERFACE(G_TYPE_POLLABLE_OUTPUT_STREAM,
                                              fc_conn_output_pollable_init))

/* A write that would block starts the clock of a client that does not read; one that goes
 * through stops it. Atomic: GIO may run a blocking write of ours on a thread of its pool (an
 * async operation with no pollable path), while the listener reads the clock on the main loop. */
static gssize after_write(FcConnOutput *s, gssize w, GError **error) {
  gint64 *wb = &s->conn->write_blocked;
  if (w > 0) __atomic_add_fetch(&s->conn->written, (uint64_t)w, __ATOMIC_RELAXED);
  if (w >= 0)
    __atomic_store_n(wb, 0, __ATOMIC_RELAXED);
  else if (g_error_matches(*error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK) &&
           !__atomic_load_n(wb, __ATOMIC_RELAXED))
    __atomic_store_n(wb, g_get_monotonic_time(), __ATOMIC_RELAXED);
  return w;
}

static gssize co_write_nonblocking(GPollableOutputStream *p, const void *buf, gsize n,
                                   GError **error) {
  FcConnOutput *s = FC_CONN_OUTPUT(p);
  return after_write(s, g_pollable_output_stream_write_nonblocking(
                            G_POLLABLE_OUTPUT_STREAM(s->base), buf, n, NULL, error), error);
}

static gssize co_write(GOutputStream *out, const void *buf, gsize n, GCancellable *cancel,
                       GError **error) {
  FcConnOutput *s = FC_CONN_OUTPUT(out);
  return after_write(s, g_output_stream_write(s->base, buf, n, cancel, error), error);
}

static gboolean co_flush(GOutputStream *out, GCancellable *cancel, GError **error) {
  FC_TSAN_ACQUIRE(out); /* (may run on GIO's close thread: see fc_conn_stream) */
  return g_output_stream_flush(FC_CONN_OUTPUT(out)->base, cancel, error);
}

/* Flushing a socket (or TLS) stream does nothing, so the asynchronous flush a WebSocket asks
 * for completes at once: GOutputStream's default would run co_flush on a thread of GLib's pool
 * for every message (and ThreadSanitizer, not seeing that hand-off, reports the read of `base`
 * there as a race with its write at construction). */
static void co_flush_async(GOutputStream *out, int prio, GCancellable *cancel,
                           GAsyncReadyCallback cb, gpointer user) {
  GTask *t = g_task_new(out, cancel, cb, user);
  GError *e = NULL;
  if (co_flush(out, cancel, &e)) g_task_return_boolean(t, TRUE);
  else g_task_return_error(t, e);
  g_object_unref(t);
}

static gboolean co_flush_finish(GOutputStream *out, GAsyncResult *r, GError **error) {
  return g_task_propagate_boolean(G_TASK(r), error);
}

static gboolean co_close(GOutputStream *out, GCancellable *cancel, GError **error) {
  return TRUE; /* the input side's close closes the whole connection */
}

static gboolean co_can_poll(GPollableOutputStream *p) { return TRUE; }

static gboolean co_is_writable(GPollableOutputStream *p) {
  return g_pollable_output_stream_is_writable(G_POLLABLE_OUTPUT_STREAM(FC_CONN_OUTPUT(p)->base));
}

static GSource *co_create_source(GPollableOutputStream *p, GCancellable *cancel) {
  GSource *child = g_pollable_output_stream_create_source(
      G_POLLABLE_OUTPUT_STREAM(FC_CONN_OUTPUT(p)->base), NULL);
  GSource *src = g_pollable_source_new_full(p, child, cancel);
  g_source_unref(child);
  return src;
}

static void co_finalize(GObject *o) {
  FcConnOutput *s = FC_CONN_OUTPUT(o);
  g_object_unref(s->base);
  fc_conn_unref(s->conn);
  G_OBJECT_CLASS(fc_conn_output_parent_class)->finalize(o);
}

static void fc_conn_output_class_init(FcConnOutputClass *k) {
  G_OBJECT_CLASS(k)->finalize = co_finalize;
  G_OUTPUT_STREAM_CLASS(k)->write_fn = co_write;
  G_OUTPUT_STREAM_CLASS(k)->flush = co_flush;
  G_OUTPUT_STREAM_CLASS(k)->flush_async = co_flush_async;
  G_OUTPUT_STREAM_CLASS(k)->flush_finish = co_flush_finish;
  G_OUTPUT_STREAM_CLASS(k)->close_fn = co_close;
}

static void fc_conn_output_pollable_init(GPollableOutputStreamInterface *iface) {
  iface->can_poll = co_can_poll;
  iface->is_writable = co_is_writable;
  iface->create_source = co_create_source;
  iface->write_nonblocking = co_write_nonblocking;
}

static void fc_conn_output_init(FcConnOutput *s) {}

GIOStream *fc_conn_stream(fc_conn *c) {
  FcConnInput *in = g_object_new(FC_TYPE_CONN_INPUT, NULL);
  FcConnOutput *out = g_object_new(FC_TYPE_CONN_OUTPUT, NULL);
  in->base = g_object_ref(g_io_stream_get_input_stream(c->base));
  out->base = g_object_ref(g_io_stream_get_output_stream(c->base));
  g_mutex_lock(&fc_conn_lock);
  in->conn = fc_conn_ref_locked(c);
  out->conn = fc_conn_ref_locked(c);
  g_mutex_unlock(&fc_conn_lock);
  /* A WebSocket's close runs GIOStream's default close_async: the streams' close (and flush)
   * on a thread of GIO's pool, a hand-off ThreadSanitizer cannot see (GLib is not built
   * with it): told here and in ci_close/co_flush. */
  FC_TSAN_RELEASE(in);
  FC_TSAN_RELEASE(out);
  GIOStream *io = g_simple_io_stream_new(G_INPUT_STREAM(in), G_OUTPUT_STREAM(out));
  g_object_unref(in);
  g_object_unref(out);
  return io;
}

/* ---- refusals ---------------------------------------------------------------------------- */

/* "HTTP/1.1 status reason ..." with a JSON {code:-1,msg} body, into buf; its length. */
static int refusal(char *buf, size_t size, int status, const char *reason, const char *text,
                   const char *extra) {
  char body[400];
  int bn = snprintf(body, sizeof body, "{\"code\":-1,\"msg\":\"");
  for (const char *t = text; *t && bn < (int)sizeof body - 8; t++) /* JSON-safe */
    body[bn++] = *t == '"' || *t == '\\' || (unsigned char)*t < 0x20 ? '\'' : *t;
  bn += snprintf(body + bn, sizeof body - (size_t)bn, "\"}");
  int n = snprintf(buf, size,
                   "HTTP/1.1 %d %s\r\nServer: facecast\r\nContent-Type: application/json\r\n"
                   "Content-Length: %d\r\nConnection: close\r\n%s\r\n%s",
                   status, reason, bn, extra ? extra : "", body);
  return n > 0 && n < (int)size ? n : 0;
}

/* Reads what the client already sent, so that closing does not reset the connection (and
 * throw away the answer) because of unread data. Never blocks. */
static void drain_fd(int fd) {
  char junk[4096];
  for (int i = 0; i < 64 && recv(fd, junk, sizeof junk, MSG_DONTWAIT) > 0; i++) {
  }
}

void fc_conn_refuse_fd(int fd, int status, const char *reason, const char *text) {
  char buf[700];
  int n = refusal(buf, sizeof buf, status, reason, text, "Retry-After: 1\r\n");
  if (n) (void)!send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  drain_fd(fd);
  close(fd);
}

void fc_conn_refuse(SoupServerMessage *msg, int status, const char *reason, const char *text,
                    const char *extra_headers) {
  fc_conn *c = fc_conn_of(msg);
  char buf[1600];
  int n = refusal(buf, sizeof buf, status, reason, text, extra_headers);
  /* Written past libsoup, without blocking: a client that does not read gets what fits. */
  GOutputStream *out = c ? g_io_stream_get_output_stream(c->base) : NULL;
  if (out && n && G_IS_POLLABLE_OUTPUT_STREAM(out))
    g_pollable_output_stream_write_nonblocking(G_POLLABLE_OUTPUT_STREAM(out), buf, (gsize)n, NULL,
                                               NULL);
  if (c) {
    if (!G_IS_TLS_CONNECTION(c->base)) {
      g_socket_shutdown(c->sock, FALSE, TRUE, NULL);
      drain_fd(g_socket_get_fd(c->sock));
    }
    fc_conn_kill(c);
  }
  /* libsoup lets go of the connection; closing it closes the socket (FcConnInput) */
  GIOStream *io = soup_server_message_steal_connection(msg);
  if (io) {
    g_io_stream_close(io, NULL, NULL);
    g_object_unref(io);
  }
  fc_conn_unref(c);
}
