/* Accepting connections for the HTTP server (see listener.h for why libsoup does not).
 *
 * Each accepted socket (after its TLS handshake, with --tls-cert) is handed to libsoup as a
 * GSimpleIOStream whose input side is FcConnInput, a pollable stream over the socket's own that
 * counts bytes and watches for the end of the stream. libsoup's request signals move the
 * connection through its states; a timer checks them once a second:
 *
 *   TLS ──handshake──► IDLE ──first byte──► HEADERS ──headers──► BODY ──body──► BUSY
 *                       ▲                                                      │
 *                       └──────────────── response sent (keep-alive) ◄─────────┘
 *   IDLE longer than idle_timeout, HEADERS longer than header_timeout, BODY without a byte for
 *   body_timeout, TLS longer than header_timeout: the socket is shut down. BUSY (a handler
 *   working, a response streaming: SSE) and WS (an upgraded WebSocket) have no timeout.
 *
 * The leak this fixes: libsoup 3.2 reads the next request of a kept-alive connection through a
 * message that has no completion callback until its first byte; an end of stream (or error)
 * there ends that reader and nothing ever closes the connection. So when FcConnInput sees the
 * end of the stream (or an error) while the connection is IDLE, it shuts the socket down and
 * hands libsoup a malformed request line instead ("X"): libsoup starts a message for it
 * (with its completion callback), answers 400 into the closed socket and disconnects, freeing
 * the connection and its socket. Shutting a socket down (never closing it under libsoup) is
 * also how timeouts end connections: libsoup's pending read sees the end of the stream.
 *
 * Keep-alive: libsoup 3.2 keeps a connection open after a response only while it has a
 * listener of its own, so it is given one it can never accept on (a Unix socket whose path is
 * unlinked at once).
 *
 * Out of file descriptors: accept() fails with EMFILE and the listening socket stays readable;
 * a spare descriptor (/dev/null) is closed to accept the waiting client, answer 503 and close
 * it, so clients are told instead of hanging; while even that fails, accepting pauses for
 * 100 ms at a time. Connections freed later are accepted again as normal. */
#include "server/listener.h"

#include "facecast/error.h"

#include <errno.h>
#include <fcntl.h>
#include <gio/gunixsocketaddress.h>
#include <glib/gstdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef enum conn_state { C_TLS, C_IDLE, C_HEADERS, C_BODY, C_BUSY, C_WS } conn_state;

struct fc_conn {
  gint refs;
  fc_listener *l; /* NULL once the listener is gone */
  GSocket *sock;
  GIOStream *base;          /* the GSocketConnection, or the TLS connection over it */
  GSocketAddress *remote;   /* handed to libsoup: its qdata leads back here */
  char peer[64];            /* the client's address (the per-client count's key) */
  conn_state state;
  gint64 since, last_read;  /* µs, monotonic: state entered, last byte read */
  int killed, injected;
  size_t ws_pending;        /* WebSocket bytes read since the last complete message */
  GList link;               /* in l->conns (data = this) */
};

struct fc_listener {
  fc_listener_params p;
  SoupServer *soup;
  GSocket *sock;            /* listening */
  GSource *accept_src, *pause_src, *timer;
  GSocket *keepalive_sock;  /* the unreachable listener that makes libsoup keep connections */
  GTlsCertificate *cert;
  int port, reserve_fd;
  gulong sig[4];
  GMutex lock;              /* conns, per_client, stats (a connection may be freed off the loop) */
  GQueue conns;
  GHashTable *per_client;   /* peer → open connections (GINT_TO_POINTER) */
  fc_listener_stats st;
  gint64 last_fd_warning;
};

static const char k_conn_key[] = "fc-conn";
/* Not a request line: libsoup answers 400 (into a closed socket) and disconnects. */
static const char k_closing_request[] = "X\r\n\r\n";

/* ---- connections ------------------------------------------------------------------------ */

static void conn_free(fc_conn *c) {
  fc_listener *l = c->l;
  if (l) {
    g_mutex_lock(&l->lock);
    g_queue_unlink(&l->conns, &c->link);
    int n = GPOINTER_TO_INT(g_hash_table_lookup(l->per_client, c->peer)) - 1;
    if (n > 0)
      g_hash_table_insert(l->per_client, g_strdup(c->peer), GINT_TO_POINTER(n));
    else
      g_hash_table_remove(l->per_client, c->peer);
    l->st.open--;
    g_mutex_unlock(&l->lock);
  }
  if (c->remote) {
    g_object_set_data(G_OBJECT(c->remote), k_conn_key, NULL);
    g_object_unref(c->remote);
  }
  if (c->base) {
    g_io_stream_close(c->base, NULL, NULL);
    g_object_unref(c->base);
  }
  if (c->sock) g_object_unref(c->sock);
  g_free(c);
}

void fc_conn_unref(fc_conn *c) {
  if (c && g_atomic_int_dec_and_test(&c->refs)) conn_free(c);
}

static fc_conn *conn_ref(fc_conn *c) {
  g_atomic_int_inc(&c->refs);
  return c;
}

/* Ends a connection without closing its socket under whoever reads it: their next read sees
 * the end of the stream. */
static void conn_kill(fc_conn *c) {
  if (c->killed) return;
  c->killed = 1;
  g_socket_shutdown(c->sock, TRUE, TRUE, NULL);
}

static void conn_set(fc_conn *c, conn_state st) {
  c->state = st;
  c->since = g_get_monotonic_time();
}

fc_conn *fc_conn_of(SoupServerMessage *msg) {
  GSocketAddress *a = soup_server_message_get_remote_address(msg);
  fc_conn *c = a ? g_object_get_data(G_OBJECT(a), k_conn_key) : NULL;
  return c ? conn_ref(c) : NULL;
}

void fc_conn_mark_websocket(fc_conn *c) {
  if (!c) return;
  conn_set(c, C_WS);
  c->ws_pending = 0;
}

void fc_conn_ws_message(fc_conn *c) {
  if (c) c->ws_pending = 0;
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
    if (c->state == C_WS) {
      c->ws_pending += (size_t)r;
      if (c->l && c->ws_pending > c->l->p.ws_max_message) {
        g_mutex_lock(&c->l->lock);
        c->l->st.ws_too_large++;
        g_mutex_unlock(&c->l->lock);
        conn_kill(c);
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_MESSAGE_TOO_LARGE,
                    "WebSocket message over %zu bytes", c->l->p.ws_max_message);
        return -1;
      }
    }
    return r;
  }
  if (r < 0 && g_error_matches(*error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK)) return r;
  if (c->state == C_IDLE && !c->injected) { /* the case libsoup 3.2 would leak */
    c->injected = 1;
    conn_kill(c);
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

/* ---- handing connections to libsoup ----------------------------------------------------- */

static void hand_to_soup(fc_conn *c) {
  fc_listener *l = c->l;
  FcConnInput *in = g_object_new(FC_TYPE_CONN_INPUT, NULL);
  in->base = g_object_ref(g_io_stream_get_input_stream(c->base));
  in->conn = conn_ref(c);
  GIOStream *io = g_simple_io_stream_new(G_INPUT_STREAM(in), g_io_stream_get_output_stream(c->base));
  g_object_unref(in);
  conn_set(c, C_IDLE);
  GSocketAddress *local = g_socket_get_local_address(c->sock, NULL);
  soup_server_accept_iostream(l->soup, io, local, c->remote, NULL);
  if (local) g_object_unref(local);
  g_object_unref(io); /* libsoup's now: the connection lives as long as it keeps it */
}

static void handshake_done(GObject *src, GAsyncResult *res, gpointer user) {
  fc_conn *c = user;
  GError *e = NULL;
  if (g_tls_connection_handshake_finish(G_TLS_CONNECTION(src), res, &e) && c->l && !c->killed) {
    hand_to_soup(c);
  } else if (c->l) {
    g_mutex_lock(&c->l->lock);
    c->l->st.tls_failed++;
    g_mutex_unlock(&c->l->lock);
  }
  if (e) g_error_free(e);
  fc_conn_unref(c); /* the handshake's reference */
}

/* Writes a short answer to a client that is refused before libsoup sees it, and closes. */
static void refuse_fd(int fd, int status, const char *reason, const char *msg) {
  char buf[512];
  int body = (int)strlen(msg) + 21;
  int n = snprintf(buf, sizeof buf,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                   "Connection: close\r\nRetry-After: 1\r\n\r\n{\"code\":-1,\"msg\":\"%s\"}",
                   status, reason, body, msg);
  if (n > 0 && n < (int)sizeof buf) (void)!send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
  close(fd);
}

static void admit(fc_listener *l, int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  GSocketAddress *remote = getpeername(fd, (struct sockaddr *)&ss, &len) == 0
                               ? g_socket_address_new_from_native(&ss, len)
                               : NULL;
  if (!remote || !G_IS_INET_SOCKET_ADDRESS(remote)) { /* gone already */
    if (remote) g_object_unref(remote);
    close(fd);
    return;
  }
  char peer[64];
  char *a = g_inet_address_to_string(g_inet_socket_address_get_address(G_INET_SOCKET_ADDRESS(remote)));
  g_strlcpy(peer, a, sizeof peer);
  g_free(a);
  g_mutex_lock(&l->lock);
  int n = GPOINTER_TO_INT(g_hash_table_lookup(l->per_client, peer));
  int over = l->p.max_per_client > 0 && n >= l->p.max_per_client;
  if (over) {
    l->st.refused_per_client++;
  } else {
    g_hash_table_insert(l->per_client, g_strdup(peer), GINT_TO_POINTER(n + 1));
    l->st.open++;
    l->st.accepted++;
  }
  g_mutex_unlock(&l->lock);
  if (over) {
    char m[96];
    snprintf(m, sizeof m, "too many connections from this address (at most %d)",
             l->p.max_per_client);
    refuse_fd(fd, 429, "Too Many Requests", m);
    g_object_unref(remote);
    return;
  }
  GError *e = NULL;
  GSocket *sock = g_socket_new_from_fd(fd, &e);
  if (!sock) {
    g_warning("http: cannot use an accepted connection: %s", e->message);
    g_error_free(e);
    close(fd);
    g_mutex_lock(&l->lock);
    l->st.open--;
    if (n > 0)
      g_hash_table_insert(l->per_client, g_strdup(peer), GINT_TO_POINTER(n));
    else
      g_hash_table_remove(l->per_client, peer);
    g_mutex_unlock(&l->lock);
    g_object_unref(remote);
    return;
  }
  g_socket_set_option(sock, IPPROTO_TCP, TCP_NODELAY, 1, NULL);
  fc_conn *c = g_new0(fc_conn, 1);
  c->refs = 1; /* the listener's until libsoup (or the handshake) takes over */
  c->l = l;
  c->sock = sock;
  c->remote = remote;
  g_strlcpy(c->peer, peer, sizeof c->peer);
  c->link.data = c;
  g_object_set_data(G_OBJECT(remote), k_conn_key, c);
  c->base = G_IO_STREAM(g_socket_connection_factory_create_connection(sock));
  c->last_read = g_get_monotonic_time();
  g_mutex_lock(&l->lock);
  g_queue_push_tail_link(&l->conns, &c->link);
  g_mutex_unlock(&l->lock);
  if (l->cert) {
    GIOStream *tls = g_tls_server_connection_new(c->base, l->cert, &e);
    if (!tls) {
      g_warning("http: TLS: %s", e->message);
      g_error_free(e);
      fc_conn_unref(c);
      return;
    }
    g_object_unref(c->base);
    c->base = tls;
    conn_set(c, C_TLS);
    g_tls_connection_handshake_async(G_TLS_CONNECTION(tls), G_PRIORITY_DEFAULT, NULL,
                                     handshake_done, c); /* takes the listener's reference */
    return;
  }
  hand_to_soup(c);
  fc_conn_unref(c);
}

/* ---- accepting -------------------------------------------------------------------------- */

static gboolean on_incoming(GSocket *s, GIOCondition cond, gpointer user);

static gboolean resume_accept(gpointer user) {
  fc_listener *l = user;
  g_source_unref(l->pause_src);
  l->pause_src = NULL;
  l->accept_src = g_socket_create_source(l->sock, G_IO_IN, NULL);
  g_source_set_callback(l->accept_src, G_SOURCE_FUNC(on_incoming), l, NULL);
  g_source_attach(l->accept_src, NULL);
  return G_SOURCE_REMOVE;
}

/* accept() ran out of descriptors: answer the waiting client through the spare one, or pause. */
static void out_of_fds(fc_listener *l, int err) {
  gint64 now = g_get_monotonic_time();
  if (now - l->last_fd_warning > 10 * G_USEC_PER_SEC) {
    l->last_fd_warning = now;
    g_warning("http: out of file descriptors (%s): refusing new connections with 503 until some "
              "close (raise the limit with ulimit -n)", g_strerror(err));
  }
  if (l->reserve_fd >= 0) {
    close(l->reserve_fd);
    l->reserve_fd = -1;
    int fd = accept4(g_socket_get_fd(l->sock), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      g_mutex_lock(&l->lock);
      l->st.refused_no_fd++;
      g_mutex_unlock(&l->lock);
      refuse_fd(fd, 503, "Service Unavailable", "the server is out of connections; try again");
    }
    l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (l->reserve_fd >= 0) return;
  }
  /* Not even one descriptor: stop polling the listening socket (it would spin) for a while. */
  if (l->accept_src) {
    g_source_destroy(l->accept_src);
    g_source_unref(l->accept_src);
    l->accept_src = NULL;
  }
  if (!l->pause_src) {
    l->pause_src = g_timeout_source_new(100);
    g_source_set_callback(l->pause_src, resume_accept, l, NULL);
    g_source_attach(l->pause_src, NULL);
  }
  if (l->reserve_fd < 0) l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static gboolean on_incoming(GSocket *s, GIOCondition cond, gpointer user) {
  fc_listener *l = user;
  for (int i = 0; i < 64; i++) { /* a burst at a time: the loop has other work */
    int fd = accept4(g_socket_get_fd(l->sock), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(l, fd);
      continue;
    }
    int e = errno;
    if (e == EINTR || e == ECONNABORTED || e == EPROTO) continue;
    if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
      out_of_fds(l, e);
      if (!l->accept_src) return G_SOURCE_REMOVE; /* paused (the source is gone) */
      continue;
    }
    if (e != EAGAIN && e != EWOULDBLOCK) g_warning("http: accept: %s", g_strerror(e));
    break;
  }
  return G_SOURCE_CONTINUE;
}

/* ---- libsoup's view of each request ------------------------------------------------------ */

static fc_conn *conn_of_msg(SoupServerMessage *msg) {
  GSocketAddress *a = soup_server_message_get_remote_address(msg);
  return a ? g_object_get_data(G_OBJECT(a), k_conn_key) : NULL;
}

static void on_got_headers(SoupServerMessage *msg, gpointer user) {
  fc_conn *c = conn_of_msg(msg);
  if (c && c->state == C_HEADERS) conn_set(c, C_BODY);
}

static void on_started(SoupServer *srv, SoupServerMessage *msg, gpointer user) {
  fc_conn *c = conn_of_msg(msg);
  if (!c) return;
  conn_set(c, C_HEADERS);
  g_signal_connect(msg, "got-headers", G_CALLBACK(on_got_headers), NULL);
}

static void on_read(SoupServer *srv, SoupServerMessage *msg, gpointer user) {
  fc_conn *c = conn_of_msg(msg);
  if (c) conn_set(c, C_BUSY);
}

static void on_finished(SoupServer *srv, SoupServerMessage *msg, gpointer user) {
  fc_conn *c = conn_of_msg(msg);
  if (c && c->state != C_WS) conn_set(c, C_IDLE);
}

/* Once a second: ends connections that overstayed their state's time. */
static gboolean check_timeouts(gpointer user) {
  fc_listener *l = user;
  const gint64 now = g_get_monotonic_time(), s = G_USEC_PER_SEC;
  GPtrArray *kill = g_ptr_array_new();
  g_mutex_lock(&l->lock);
  for (GList *it = l->conns.head; it; it = it->next) {
    fc_conn *c = it->data;
    if (c->killed) continue;
    uint64_t *count = NULL;
    switch (c->state) {
    case C_TLS:
    case C_HEADERS:
      if (now - c->since > l->p.header_timeout_s * s) count = &l->st.timeout_header;
      break;
    case C_BODY:
      if (now - c->last_read > l->p.body_timeout_s * s) count = &l->st.timeout_body;
      break;
    case C_IDLE:
      if (now - c->since > l->p.idle_timeout_s * s) count = &l->st.timeout_idle;
      break;
    default: break;
    }
    if (count) {
      (*count)++;
      g_ptr_array_add(kill, conn_ref(c));
    }
  }
  g_mutex_unlock(&l->lock);
  for (guint i = 0; i < kill->len; i++) {
    conn_kill(kill->pdata[i]);
    fc_conn_unref(kill->pdata[i]);
  }
  g_ptr_array_free(kill, TRUE);
  return G_SOURCE_CONTINUE;
}

/* ---- lifetime --------------------------------------------------------------------------- */

static GSocket *bind_socket(fc_listener *l, GSocketFamily fam, const char *host, GError **e) {
  GSocket *s = g_socket_new(fam, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, e);
  if (!s) return NULL;
  if (fam == G_SOCKET_FAMILY_IPV6 && !host) /* one socket for IPv6 and IPv4 clients */
    g_socket_set_option(s, IPPROTO_IPV6, IPV6_V6ONLY, 0, NULL);
  GInetAddress *a = host ? g_inet_address_new_from_string(host) : g_inet_address_new_any(fam);
  GSocketAddress *sa = g_inet_socket_address_new(a, (guint16)l->p.port);
  g_object_unref(a);
  g_socket_set_listen_backlog(s, l->p.backlog);
  gboolean ok = g_socket_bind(s, sa, TRUE, e) && g_socket_listen(s, e);
  g_object_unref(sa);
  if (!ok) g_clear_object(&s);
  return s;
}

/* libsoup keeps connections alive only while it has a listener of its own: a Unix socket
 * nobody can reach (its path is gone as soon as it listens). */
static GSocket *unreachable_listener(void) {
  char *dir = g_dir_make_tmp("facecast-ka-XXXXXX", NULL);
  if (!dir) return NULL;
  char *path = g_build_filename(dir, "s", NULL);
  GSocket *s = g_socket_new(G_SOCKET_FAMILY_UNIX, G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_DEFAULT,
                            NULL);
  GSocketAddress *a = g_unix_socket_address_new(path);
  if (s && !(g_socket_bind(s, a, FALSE, NULL) && g_socket_listen(s, NULL))) g_clear_object(&s);
  g_object_unref(a);
  g_unlink(path);
  g_rmdir(dir);
  g_free(path);
  g_free(dir);
  return s;
}

fc_listener *fc_listener_create(SoupServer *soup, const fc_listener_params *p, int *err) {
  fc_listener *l = g_new0(fc_listener, 1);
  l->p = *p;
  if (l->p.backlog <= 0) l->p.backlog = 1024;
  if (l->p.max_per_client == 0) l->p.max_per_client = 256;
  if (l->p.header_timeout_s <= 0) l->p.header_timeout_s = 15;
  if (l->p.body_timeout_s <= 0) l->p.body_timeout_s = 30;
  if (l->p.idle_timeout_s <= 0) l->p.idle_timeout_s = 60;
  if (!l->p.ws_max_message) l->p.ws_max_message = 1 << 20;
  l->soup = soup;
  l->reserve_fd = -1;
  g_mutex_init(&l->lock);
  g_queue_init(&l->conns);
  l->per_client = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
  GError *e = NULL;
  if ((l->p.tls_cert != NULL) != (l->p.tls_key != NULL)) {
    *err = fc_error_set(FC_EINVAL, "TLS needs both --tls-cert and --tls-key");
    goto fail;
  }
  if (l->p.tls_cert) {
    if (!g_tls_backend_supports_tls(g_tls_backend_get_default())) {
      *err = fc_error_set(FC_EUNSUPPORTED, "TLS: GLib has no TLS backend (install glib-networking)");
      goto fail;
    }
    if (!(l->cert = g_tls_certificate_new_from_files(l->p.tls_cert, l->p.tls_key, &e))) {
      *err = fc_error_set(FC_EINVAL, "TLS: %s / %s: %s", l->p.tls_cert, l->p.tls_key, e->message);
      goto fail;
    }
  }
  if (l->p.host) {
    GInetAddress *a = g_inet_address_new_from_string(l->p.host);
    if (!a) {
      *err = fc_error_set(FC_EINVAL, "--host '%s' is not an IP address", l->p.host);
      goto fail;
    }
    GSocketFamily fam = g_inet_address_get_family(a);
    g_object_unref(a);
    l->sock = bind_socket(l, fam, l->p.host, &e);
  } else {
    l->sock = bind_socket(l, G_SOCKET_FAMILY_IPV6, NULL, &e);
    if (!l->sock) { /* no IPv6 here */
      g_clear_error(&e);
      l->sock = bind_socket(l, G_SOCKET_FAMILY_IPV4, NULL, &e);
    }
  }
  if (!l->sock) {
    *err = fc_error_set(FC_EIO, "cannot listen on port %d: %s", l->p.port, e->message);
    goto fail;
  }
  GSocketAddress *bound = g_socket_get_local_address(l->sock, NULL);
  l->port = bound ? g_inet_socket_address_get_port(G_INET_SOCKET_ADDRESS(bound)) : l->p.port;
  if (bound) g_object_unref(bound);
  if (!(l->keepalive_sock = unreachable_listener()) ||
      !soup_server_listen_socket(soup, l->keepalive_sock, 0, NULL))
    g_message("http: connections will not be kept alive (no private listener)");
  l->sig[0] = g_signal_connect(soup, "request-started", G_CALLBACK(on_started), l);
  l->sig[1] = g_signal_connect(soup, "request-read", G_CALLBACK(on_read), l);
  l->sig[2] = g_signal_connect(soup, "request-finished", G_CALLBACK(on_finished), l);
  l->sig[3] = g_signal_connect(soup, "request-aborted", G_CALLBACK(on_finished), l);
  l->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  l->accept_src = g_socket_create_source(l->sock, G_IO_IN, NULL);
  g_source_set_callback(l->accept_src, G_SOURCE_FUNC(on_incoming), l, NULL);
  g_source_attach(l->accept_src, NULL);
  l->timer = g_timeout_source_new_seconds(1);
  g_source_set_callback(l->timer, check_timeouts, l, NULL);
  g_source_attach(l->timer, NULL);
  *err = FC_OK;
  return l;
fail:
  if (e) g_error_free(e);
  fc_listener_destroy(l);
  return NULL;
}

int fc_listener_port(const fc_listener *l) { return l->port; }
int fc_listener_is_tls(const fc_listener *l) { return l->cert != NULL; }

void fc_listener_get_stats(fc_listener *l, fc_listener_stats *out) {
  g_mutex_lock(&l->lock);
  *out = l->st;
  g_mutex_unlock(&l->lock);
}

void fc_listener_destroy(fc_listener *l) {
  if (!l) return;
  for (int i = 0; i < 4; i++)
    if (l->sig[i]) g_signal_handler_disconnect(l->soup, l->sig[i]);
  GSource **srcs[] = {&l->accept_src, &l->pause_src, &l->timer};
  for (size_t i = 0; i < G_N_ELEMENTS(srcs); i++)
    if (*srcs[i]) {
      g_source_destroy(*srcs[i]);
      g_source_unref(*srcs[i]);
    }
  /* Connections still open outlive the listener (libsoup's disconnect closes them): they only
   * forget it, and are shut down so that nothing waits on them. */
  g_mutex_lock(&l->lock);
  for (GList *it = l->conns.head; it; it = it->next) {
    fc_conn *c = it->data;
    c->l = NULL;
    if (!c->killed) {
      c->killed = 1;
      g_socket_shutdown(c->sock, TRUE, TRUE, NULL);
    }
  }
  g_mutex_unlock(&l->lock);
  if (l->sock) g_object_unref(l->sock);
  if (l->keepalive_sock) g_object_unref(l->keepalive_sock);
  if (l->cert) g_object_unref(l->cert);
  if (l->reserve_fd >= 0) close(l->reserve_fd);
  g_hash_table_destroy(l->per_client);
  g_mutex_clear(&l->lock);
  g_free(l);
}
