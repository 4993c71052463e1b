/* Accepting connections for the HTTP server (see listener.h for why libsoup does not, and
 * conn.c for what each connection's streams do).
 *
 * Each accepted socket (after its TLS handshake, with --tls-cert) is handed to libsoup through
 * fc_conn_stream(). libsoup's request signals and the first byte of each request move the
 * connection through the states of conn_internal.h; a timer checks them once a second:
 * IDLE longer than idle_timeout (new or kept alive), HEADERS longer than header_timeout, BODY
 * without a byte for body_timeout, TLS longer than header_timeout, and a response the client
 * has not read for write_timeout: the socket is shut down (never closed under libsoup: its
 * pending read sees the end of the stream). BUSY (a handler working, an SSE stream idle) and
 * WS have no other timeout.
 *
 * Keep-alive: libsoup 3.2 keeps a connection open after a response only while it has a
 * listener of its own, so it is given one it can never accept on (a Unix socket whose path is
 * unlinked at once).
 *
 * Clients are counted by address (IPv6 by their /64: one host has a whole /64 to pick from)
 * and refused with 429 past max_per_client. Out of file descriptors: accept() fails with
 * EMFILE and the listening socket stays readable; a spare descriptor (/dev/null) is closed to
 * accept the waiting client, answer 503 and close it, so clients are told instead of hanging;
 * while even that fails, accepting pauses for 100 ms at a time. */
#include "server/conn_internal.h"

/* The listener's sources are its own, on the main loop (nothing handed between threads), and
 * its socket source's callback is not a GSourceFunc: ThreadSanitizer builds' wrapper of
 * g_source_set_callback (core/tsan_glib.h) must not touch them. */
#ifdef FC_CORE_TSAN_GLIB_H
#undef g_source_set_callback
#endif

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

struct fc_listener {
  fc_listener_params p;
  SoupServer *soup;
  GSocket *sock;            /* listening */
  GSource *accept_src, *pause_src, *timer;
  GSocket *keepalive_sock;  /* the unreachable listener that makes libsoup keep connections */
  GTlsCertificate *cert;
  int port, reserve_fd;
  gulong sig[4];
  GQueue conns;
  GHashTable *per_client;   /* peer → open connections (GINT_TO_POINTER) */
  fc_listener_stats st;
  gint64 last_fd_warning;
};

void fc_listener_forget_locked(fc_listener *l, fc_conn *c) {
  g_queue_unlink(&l->conns, &c->link);
  int n = GPOINTER_TO_INT(g_hash_table_lookup(l->per_client, c->peer)) - 1;
  if (n > 0)
    g_hash_table_insert(l->per_client, g_strdup(c->peer), GINT_TO_POINTER(n));
  else
    g_hash_table_remove(l->per_client, c->peer);
  l->st.open--;
}

void fc_listener_count_ws_too_large(fc_listener *l) { l->st.ws_too_large++; }

/* ---- handing connections to libsoup ----------------------------------------------------- */

static void hand_to_soup(fc_conn *c) {
  GIOStream *io = fc_conn_stream(c);
  fc_conn_set(c, C_IDLE);
  GSocketAddress *local = g_socket_get_local_address(c->sock, NULL);
  soup_server_accept_iostream(c->l->soup, io, local, c->remote, NULL);
  if (local) g_object_unref(local);
  g_object_unref(io); /* libsoup's now: the connection lives as long as it keeps it */
}

static void handshake_done(GObject *src, GAsyncResult *res, gpointer user) {
  fc_conn *c = user;
  GError *e = NULL;
  gboolean ok = g_tls_connection_handshake_finish(G_TLS_CONNECTION(src), res, &e);
  g_mutex_lock(&fc_conn_lock);
  fc_listener *l = c->l;
  if (l && (!ok || c->killed)) l->st.tls_failed++;
  g_mutex_unlock(&fc_conn_lock);
  if (ok && l && !c->killed) hand_to_soup(c);
  if (e) g_error_free(e);
  fc_conn_unref(c); /* the handshake's reference */
}

/* The per-client key: the address, or for IPv6 its /64 (IPv4-mapped ones stay IPv4). */
static void peer_key(GInetAddress *a, char *out, size_t n) {
  if (g_inet_address_get_family(a) == G_SOCKET_FAMILY_IPV6 && !g_inet_address_get_is_loopback(a)) {
    const guint8 *b = g_inet_address_to_bytes(a);
    static const guint8 mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(b, mapped, 12) != 0) {
      snprintf(out, n, "%02x%02x:%02x%02x:%02x%02x:%02x%02x::/64", b[0], b[1], b[2], b[3], b[4],
               b[5], b[6], b[7]);
      return;
    }
  }
  char *s = g_inet_address_to_string(a);
  g_strlcpy(out, s, n);
  g_free(s);
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
  peer_key(g_inet_socket_address_get_address(G_INET_SOCKET_ADDRESS(remote)), peer, sizeof peer);
  GError *e = NULL;
  GSocket *sock = g_socket_new_from_fd(fd, &e);
  if (!sock) {
    g_warning("http: cannot use an accepted connection: %s", e->message);
    g_error_free(e);
    g_object_unref(remote);
    close(fd);
    return;
  }
  g_mutex_lock(&fc_conn_lock);
  int n = GPOINTER_TO_INT(g_hash_table_lookup(l->per_client, peer));
  int over = l->p.max_per_client > 0 && n >= l->p.max_per_client;
  if (over) {
    l->st.refused_per_client++;
  } else {
    g_hash_table_insert(l->per_client, g_strdup(peer), GINT_TO_POINTER(n + 1));
    l->st.open++;
    l->st.accepted++;
  }
  g_mutex_unlock(&fc_conn_lock);
  if (over) {
    char m[96];
    snprintf(m, sizeof m, "too many connections from this address (at most %d)",
             l->p.max_per_client);
    g_socket_set_blocking(sock, FALSE);
    fc_conn_refuse_fd(dup(fd), 429, "Too Many Requests", m);
    g_object_unref(sock); /* closes fd */
    g_object_unref(remote);
    return;
  }
  g_socket_set_option(sock, IPPROTO_TCP, TCP_NODELAY, 1, NULL);
  fc_conn *c = fc_conn_new(l, sock, remote, peer); /* the listener's reference, for now */
  g_mutex_lock(&fc_conn_lock);
  g_queue_push_tail_link(&l->conns, &c->link);
  g_mutex_unlock(&fc_conn_lock);
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
    fc_conn_set(c, C_TLS);
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
      g_mutex_lock(&fc_conn_lock);
      l->st.refused_no_fd++;
      g_mutex_unlock(&fc_conn_lock);
      fc_conn_refuse_fd(fd, 503, "Service Unavailable", "the server is out of connections; try again");
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

/* After libsoup's own header checks and the routes' early handlers: a request libsoup refused
 * by itself (a path with %00 or %2e%2e, a target it cannot take) still has its body read and
 * kept by libsoup; that body is refused unread instead. */
static void on_got_headers(SoupServerMessage *msg, gpointer user) {
  fc_listener *l = user;
  fc_conn *c = fc_conn_of(msg);
  if (!c) return;
  if (c->state == C_HEADERS) fc_conn_set(c, C_BODY);
  SoupMessageHeaders *h = soup_server_message_get_request_headers(msg);
  SoupEncoding enc = soup_message_headers_get_encoding(h);
  int body = enc == SOUP_ENCODING_CHUNKED ||
             (enc == SOUP_ENCODING_CONTENT_LENGTH && soup_message_headers_get_content_length(h) != 0);
  if (!c->killed && soup_server_message_get_status(msg) >= 400 && body) {
    g_mutex_lock(&fc_conn_lock);
    l->st.refused_malformed++;
    g_mutex_unlock(&fc_conn_lock);
    fc_conn_refuse(msg, soup_server_message_get_status(msg), "Bad Request",
                   "malformed request (its path or target)", NULL);
  }
  fc_conn_unref(c);
}

static void on_started(SoupServer *srv, SoupServerMessage *msg, gpointer user) {
  /* The state moves with the request's first byte (conn.c): libsoup starts the first message
   * of a connection before any byte arrives. */
  g_signal_connect(msg, "got-headers", G_CALLBACK(on_got_headers), user);
}

static void on_read(SoupServer *srv, SoupServerMessage *msg, gpointer user) {
  fc_conn *c = fc_conn_of(msg);
  if (c && c->state != C_WS) fc_conn_set(c, C_BUSY);
  fc_conn_unref(c);
}

static void on_finished(SoupServer *srv, SoupServerMessage *msg, gpointer user) {
  fc_conn *c = fc_conn_of(msg);
  if (c && c->state != C_WS) fc_conn_set(c, C_IDLE);
  fc_conn_unref(c);
}

/* Once a second: ends connections that overstayed their state's time. */
static gboolean check_timeouts(gpointer user) {
  fc_listener *l = user;
  const gint64 now = g_get_monotonic_time(), s = G_USEC_PER_SEC;
  GPtrArray *kill = g_ptr_array_new();
  g_mutex_lock(&fc_conn_lock);
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
    const gint64 wb = __atomic_load_n(&c->write_blocked, __ATOMIC_RELAXED); /* conn.c */
    if (!count && wb && now - wb > l->p.write_timeout_s * s) count = &l->st.timeout_write;
    fc_conn *r = count ? fc_conn_ref_locked(c) : NULL;
    if (r) {
      (*count)++;
      g_ptr_array_add(kill, r);
    }
  }
  g_mutex_unlock(&fc_conn_lock);
  for (guint i = 0; i < kill->len; i++) {
    fc_conn_kill(kill->pdata[i]);
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
  if (l->p.write_timeout_s <= 0) l->p.write_timeout_s = 60;
  l->soup = soup;
  l->reserve_fd = -1;
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
  g_mutex_lock(&fc_conn_lock);
  *out = l->st;
  g_mutex_unlock(&fc_conn_lock);
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
  g_mutex_lock(&fc_conn_lock);
  for (GList *it = l->conns.head; it; it = it->next) {
    fc_conn *c = it->data;
    c->l = NULL;
    fc_conn_kill(c);
  }
  g_mutex_unlock(&fc_conn_lock);
  if (l->sock) g_object_unref(l->sock);
  if (l->keepalive_sock) g_object_unref(l->keepalive_sock);
  if (l->cert) g_object_unref(l->cert);
  if (l->reserve_fd >= 0) close(l->reserve_fd);
  g_hash_table_destroy(l->per_client);
  g_free(l);
}
