/* Between listener.c (sockets, accepting, the timeout scan) and conn.c (one connection: its
 * lifetime and the streams libsoup reads and writes through). */
#ifndef FC_SERVER_CONN_INTERNAL_H
#define FC_SERVER_CONN_INTERNAL_H

#include "server/listener.h"

#include <gio/gio.h>

/* A connection's life, as the listener sees it (listener.c says what each allows):
 *   TLS ──handshake──► IDLE ──first byte──► HEADERS ──headers──► BODY ──body──► BUSY
 *                       ▲                                                      │
 *                       └──────────────── response sent (keep-alive) ◄─────────┘
 *   and WS once a route upgraded it to a WebSocket. */
typedef enum conn_state { C_TLS, C_IDLE, C_HEADERS, C_BODY, C_BUSY, C_WS } conn_state;

struct fc_conn {
  gint refs;              /* under fc_conn_lock when it may reach 0 */
  fc_listener *l;         /* NULL once the listener is gone (under fc_conn_lock) */
  GSocket *sock;
  GIOStream *base;        /* the GSocketConnection, or the TLS connection over it */
  GSocketAddress *remote; /* handed to libsoup: its qdata leads back here */
  char peer[64];          /* the client's address (/64 for IPv6): the per-client count's key */
  conn_state state;
  gint64 since, last_read;  /* µs, monotonic: state entered, last byte read */
  gint64 write_blocked;     /* since when a write is waiting for the client to read (0: none) */
  uint64_t written;         /* bytes written to the client so far (atomic) */
  int killed, injected;
  size_t ws_pending;        /* WebSocket bytes read since the last complete message */
  size_t ws_max;
  GList link;               /* in the listener's list (data = this) */
};

/* One lock for every connection's last reference, the listener's list and counts, and the
 * remote address's link back to its connection: a connection can lose its last reference on
 * a worker thread while the main loop's timeout scan or a route looks it up. */
extern GMutex fc_conn_lock;

/* A new connection (one reference, the caller's) on sock from remote. */
fc_conn *fc_conn_new(fc_listener *l, GSocket *sock, GSocketAddress *remote, const char *peer);
/* A reference if the connection is still alive, else NULL (fc_conn_lock held). */
fc_conn *fc_conn_ref_locked(fc_conn *c);
/* The stream libsoup gets: FcConnInput and FcConnOutput over c->base (they reference c). */
GIOStream *fc_conn_stream(fc_conn *c);
/* Ends a connection without closing its socket under whoever reads it: their next read sees
 * the end of the stream. Any thread. */
void fc_conn_kill(fc_conn *c);
void fc_conn_set(fc_conn *c, conn_state st);
/* listener.c: c leaves the listener's list and counts (fc_conn_lock held). */
void fc_listener_forget_locked(fc_listener *l, fc_conn *c);
/* listener.c: counts a WebSocket message over its cap. */
void fc_listener_count_ws_too_large(fc_listener *l);
/* Writes a short JSON answer straight to fd (not yet libsoup's), without blocking, and
 * closes it. */
void fc_conn_refuse_fd(int fd, int status, const char *reason, const char *text);

#endif
