/* The server's own accept loop in front of libsoup (listener.c): listening sockets with a real
 * backlog, TLS, a cap on connections per client address, header/body/idle timeouts, recovery
 * from running out of file descriptors, and no leaked connections. Route-agnostic plumbing:
 * it knows HTTP only through libsoup's request signals.
 *
 * Why not soup_server_listen(): libsoup 3.2 (Debian 12) never closes a keep-alive connection
 * the client closes between requests (its idle reader drops EOF on the floor; fixed upstream in
 * 3.3), listens with GLib's backlog of 10, has no timeouts and no way to recover once accept()
 * fails with EMFILE. Connections accepted here reach libsoup through
 * soup_server_accept_iostream() behind small streams that see every read and write (conn.c
 * says how that closes what libsoup would leak). The listener's calls run on the main loop. */
#ifndef FC_SERVER_LISTENER_H
#define FC_SERVER_LISTENER_H

#include <libsoup/soup.h>
#include <stdint.h>

typedef struct fc_listener fc_listener;
typedef struct fc_conn fc_conn;

typedef struct fc_listener_params {
  const char *host;      /* IP address to bind; NULL = every interface (IPv6 and IPv4) */
  int port;              /* 0 = any free port (fc_listener_port) */
  int backlog;           /* listen() queue; 0 = 1024 */
  const char *tls_cert;  /* PEM files: serve HTTPS (and WSS) when both are set */
  const char *tls_key;
  int max_per_client;    /* open connections per client address; 0 = 256, < 0 = no cap */
  int header_timeout_s;  /* first byte (or TLS handshake) to the end of the headers; 0 = 15 */
  int body_timeout_s;    /* a request body with no byte for this long; 0 = 30 */
  int idle_timeout_s;    /* a connection with no request (new or kept alive); 0 = 60 */
  int write_timeout_s;   /* a response the client stopped reading; 0 = 60 */
} fc_listener_params;

typedef struct fc_listener_stats {
  uint64_t open, accepted;
  uint64_t refused_per_client, refused_no_fd; /* answered 429 / 503 and closed */
  uint64_t timeout_header, timeout_body, timeout_idle, timeout_write, tls_failed, ws_too_large;
  uint64_t refused_malformed; /* a request libsoup could not take, closed before its body */
} fc_listener_stats;

/* Binds and starts accepting into soup (which must not listen itself). NULL and *err (with a
 * detail) when the address cannot be bound or the TLS files cannot be read. */
fc_listener *fc_listener_create(SoupServer *soup, const fc_listener_params *p, int *err);
int fc_listener_port(const fc_listener *l);
int fc_listener_is_tls(const fc_listener *l);
void fc_listener_get_stats(fc_listener *l, fc_listener_stats *out);
/* Stops accepting and closes every connection still open. */
void fc_listener_destroy(fc_listener *l);

/* The connection a request came on, referenced (NULL if it did not come through a listener).
 * A WebSocket route marks its connection so that a message can grow to max_message bytes at
 * most, all fragments together (fc_conn_ws_message after each complete message resets the
 * count); libsoup itself checks single frames only. Any thread. */
fc_conn *fc_conn_of(SoupServerMessage *msg);
void fc_conn_mark_websocket(fc_conn *c, size_t max_message);
void fc_conn_ws_message(fc_conn *c);
void fc_conn_unref(fc_conn *c);
/* Bytes written to the client so far (0 for NULL): what a route that streams to it subtracts
 * from what it handed libsoup to see what is still waiting (libsoup's WebSocket queue has no
 * such count). Any thread. */
uint64_t fc_conn_bytes_written(fc_conn *c);
/* Caps the kernel's send buffer (SO_SNDBUF): a stream's backlog then stays where the route
 * can count it rather than seconds of it hiding in the kernel. Best effort. */
void fc_conn_limit_send_buffer(fc_conn *c, int bytes);
/* Answers msg at once with status and a JSON {"code":-1,"msg":text} body written straight to
 * its connection (never blocking: a client that does not read gets what fits), then closes
 * the connection, unread: libsoup would otherwise go on to read a refused body. extra_headers:
 * NULL or "Name: value\r\n" lines. Main loop, from an early handler or a got-headers signal. */
void fc_conn_refuse(SoupServerMessage *msg, int status, const char *reason, const char *text,
                    const char *extra_headers);

#endif
