/* The synchronous Redis client (see redis.h for why it blocks and never retries).
 *
 * Plain POSIX sockets, non-blocking, with poll() for every wait so that connect, send and the
 * reply each keep to a deadline (SO_RCVTIMEO would restart per byte). Replies accumulate in
 * one buffer that core/resp.c scans after every read; what follows a reply stays for the next.
 * The buffer never grows past the parser's max_total plus one read, so a server that sends
 * without end is refused, not buffered. */
#include "jobs/redis.h"

#include "facecast/error.h"

#include <errno.h>
#include <glib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK 65536

struct fc_redis {
  char *host, *port, *user, *password;
  int db;
  int connect_ms, io_ms;
  int fd;
  char *buf;
  size_t len, cap;
  char where[300]; /* "host:port", for messages */
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int parse_url(fc_redis *r, const char *url) {
  GError *ge = NULL;
  GUri *u = url ? g_uri_parse(url, G_URI_FLAGS_HAS_PASSWORD, &ge) : NULL;
  int err = 0;
  if (!u) {
    err = fc_error_set(FC_EINVAL, "redis URL '%s': %s", url ? url : "(null)",
                       ge ? ge->message : "missing");
    goto out;
  }
  const char *host = g_uri_get_host(u), *path = g_uri_get_path(u);
  if (g_strcmp0(g_uri_get_scheme(u), "redis") != 0) {
    err = fc_error_set(FC_EINVAL, "redis URL '%s': the scheme must be redis://", url);
    goto out;
  }
  if (!host || !host[0]) {
    err = fc_error_set(FC_EINVAL, "redis URL '%s': no host", url);
    goto out;
  }
  if (g_uri_get_query(u) || g_uri_get_fragment(u)) {
    err = fc_error_set(FC_EINVAL, "redis URL '%s': a query or fragment is not understood", url);
    goto out;
  }
  r->db = 0;
  if (path && path[0] && strcmp(path, "/") != 0) {
    char *end = NULL;
    long db = strtol(path + 1, &end, 10);
    if (path[0] != '/' || !g_ascii_isdigit(path[1]) || *end || db < 0 || db > 1000000) {
      err = fc_error_set(FC_EINVAL, "redis URL '%s': the path must be a database number", url);
      goto out;
    }
    r->db = (int)db;
  }
  int port = g_uri_get_port(u);
  r->host = g_strdup(host);
  r->port = g_strdup_printf("%d", port > 0 ? port : 6379);
  const char *user = g_uri_get_user(u), *pw = g_uri_get_password(u);
  r->user = user && user[0] ? g_strdup(user) : NULL;
  r->password = pw && pw[0] ? g_strdup(pw) : NULL;
  if (r->user && !r->password) {
    err = fc_error_set(FC_EINVAL, "redis URL '%s': a user without a password", url);
    goto out;
  }
  snprintf(r->where, sizeof r->where, "redis %s:%s", r->host, r->port);
out:
  if (u) g_uri_unref(u);
  g_clear_error(&ge);
  return err;
}

fc_redis *fc_redis_create(const fc_redis_params *p, int *err) {
  int e = 0;
  fc_redis *r = NULL;
  if (!p) {
    e = fc_error_set(FC_EINVAL, "redis: no parameters");
    goto fail;
  }
  r = g_try_new0(fc_redis, 1);
  if (!r) {
    e = fc_error_set(FC_ENOMEM, "redis: client");
    goto fail;
  }
  r->fd = -1;
  r->connect_ms = p->connect_timeout_ms > 0 ? p->connect_timeout_ms : 2000;
  r->io_ms = p->io_timeout_ms > 0 ? p->io_timeout_ms : 5000;
  if ((e = parse_url(r, p->url))) goto fail;
  if (err) *err = 0;
  return r;
fail:
  fc_redis_destroy(r);
  if (err) *err = e;
  return NULL;
}

void fc_redis_disconnect(fc_redis *r) {
  if (!r) return;
  if (r->fd >= 0) close(r->fd);
  r->fd = -1;
  r->len = 0;
}

void fc_redis_destroy(fc_redis *r) {
  if (!r) return;
  fc_redis_disconnect(r);
  g_free(r->host);
  g_free(r->port);
  g_free(r->user);
  if (r->password) memset(r->password, 0, strlen(r->password));
  g_free(r->password);
  free(r->buf);
  g_free(r);
}

int fc_redis_connected(const fc_redis *r) { return r && r->fd >= 0; }

/* Waits for fd to be ready for ev until deadline: 0, or FC_EIO (detail names what). */
static int wait_fd(fc_redis *r, short ev, long long deadline, const char *what) {
  for (;;) {
    long long left = deadline - now_ms();
    if (left <= 0) return fc_error_set(FC_EIO, "%s: %s timed out", r->where, what);
    struct pollfd pfd = {.fd = r->fd, .events = ev};
    int n = poll(&pfd, 1, (int)(left > 60000 ? 60000 : left));
    if (n > 0) return 0;
    if (n < 0 && errno != EINTR) return fc_error_set(FC_EIO, "%s: poll: %s", r->where, strerror(errno));
  }
}

static int open_socket(fc_redis *r) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int gai = getaddrinfo(r->host, r->port, &hints, &res);
  if (gai) return fc_error_set(FC_EIO, "%s: cannot resolve: %s", r->where, gai_strerror(gai));
  int err = fc_error_set(FC_EIO, "%s: no address", r->where);
  long long deadline = now_ms() + r->connect_ms;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    r->fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (r->fd < 0) {
      err = fc_error_set(FC_EIO, "%s: socket: %s", r->where, strerror(errno));
      continue;
    }
    int rc = connect(r->fd, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      rc = wait_fd(r, POLLOUT, deadline, "connect");
      if (rc == 0) {
        int so = 0;
        socklen_t sl = sizeof so;
        if (getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &so, &sl) < 0) so = errno;
        if (so) errno = so, rc = -1;
      } else {
        err = rc;
        close(r->fd);
        r->fd = -1;
        continue;
      }
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* commands are small */
      err = 0;
      break;
    }
    err = fc_error_set(FC_EIO, "%s: cannot connect: %s", r->where, strerror(errno));
    close(r->fd);
    r->fd = -1;
  }
  freeaddrinfo(res);
  return err;
}

static int send_all(fc_redis *r, const char *b, size_t n, long long deadline) {
  while (n) {
    ssize_t k = send(r->fd, b, n, MSG_NOSIGNAL);
    if (k > 0) {
      b += k;
      n -= (size_t)k;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int err = wait_fd(r, POLLOUT, deadline, "sending a command");
      if (err) return err;
    } else if (k < 0 && errno != EINTR) {
      return fc_error_set(FC_EIO, "%s: connection lost while sending: %s", r->where, strerror(errno));
    }
  }
  return 0;
}

static int read_reply(fc_redis *r, long long deadline, fc_resp **reply) {
  for (;;) {
    if (r->len) {
      size_t used = 0;
      int err = fc_resp_parse(r->buf, r->len, NULL, reply, &used);
      if (err == 0) {
        memmove(r->buf, r->buf + used, r->len - used);
        r->len -= used;
        return 0;
      }
      if (err != FC_EAGAIN) return err;
    }
    if (r->cap - r->len < READ_CHUNK) {
      size_t cap = r->cap ? r->cap * 2 : 2 * READ_CHUNK;
      if (cap > fc_resp_default_limits.max_total + 2 * READ_CHUNK)
        return fc_error_set(FC_EFORMAT, "%s: reply larger than the limit", r->where);
      char *nb = realloc(r->buf, cap);
      if (!nb) return fc_error_set(FC_ENOMEM, "%s: reply buffer of %zu bytes", r->where, cap);
      r->buf = nb;
      r->cap = cap;
    }
    ssize_t k = recv(r->fd, r->buf + r->len, r->cap - r->len, 0);
    if (k > 0) {
      r->len += (size_t)k;
    } else if (k == 0) {
      return fc_error_set(FC_EIO, "%s: connection closed by the server", r->where);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int err = wait_fd(r, POLLIN, deadline, "waiting for the reply");
      if (err) return err;
    } else if (errno != EINTR) {
      return fc_error_set(FC_EIO, "%s: connection lost: %s", r->where, strerror(errno));
    }
  }
}

/* One command on the open connection; a server error reply becomes FC_EREMOTE. */
static int exchange(fc_redis *r, int argc, const char *const *argv, const size_t *lens,
                    fc_resp **reply) {
  char *cmd = NULL;
  size_t n = 0;
  fc_resp *rep = NULL;
  int err = fc_resp_command(argc, argv, lens, &cmd, &n);
  if (err) return err;
  long long deadline = now_ms() + r->io_ms;
  if ((err = send_all(r, cmd, n, deadline)) || (err = read_reply(r, deadline, &rep))) {
    fc_redis_disconnect(r); /* the stream is out of step: what was sent may have run */
    goto out;
  }
  if (rep->type == FC_RESP_ERROR) {
    err = fc_error_set(FC_EREMOTE, "redis: %.*s", (int)(rep->len > 400 ? 400 : rep->len), rep->str);
    goto out;
  }
  *reply = rep;
  rep = NULL;
out:
  fc_resp_free(rep);
  free(cmd);
  return err;
}

int fc_redis_connect(fc_redis *r) {
  if (!r) return fc_error_set(FC_EINVAL, "redis: no client");
  if (r->fd >= 0) return 0;
  r->len = 0;
  int err = open_socket(r);
  fc_resp *rep = NULL;
  if (err) return err;
  if (r->password) {
    const char *a3[] = {"AUTH", r->user, r->password}, *a2[] = {"AUTH", r->password};
    err = r->user ? exchange(r, 3, a3, NULL, &rep) : exchange(r, 2, a2, NULL, &rep);
    fc_resp_free(rep);
    rep = NULL;
    if (err) goto fail;
  }
  if (r->db) {
    char db[16];
    snprintf(db, sizeof db, "%d", r->db);
    const char *a[] = {"SELECT", db};
    err = exchange(r, 2, a, NULL, &rep);
    fc_resp_free(rep);
    if (err) goto fail;
  }
  return 0;
fail:
  fc_redis_disconnect(r);
  return err;
}

int fc_redis_command(fc_redis *r, int argc, const char *const *argv, const size_t *lens,
                     fc_resp **reply) {
  if (!reply) return fc_error_set(FC_EINVAL, "redis: no reply pointer");
  *reply = NULL;
  /* Bytes nobody asked for (RESP2 has no unsolicited replies) would be taken as this
   * command's answer: start again on a fresh connection instead. */
  if (r && r->len) fc_redis_disconnect(r);
  int err = fc_redis_connect(r);
  if (err) return err;
  return exchange(r, argc, argv, lens, reply);
}

int fc_redis_cmd(fc_redis *r, fc_resp **reply, ...) {
  const char *argv[64];
  int argc = 0;
  va_list ap;
  va_start(ap, reply);
  for (const char *a; (a = va_arg(ap, const char *));) {
    if (argc == (int)(sizeof argv / sizeof argv[0])) {
      va_end(ap);
      if (reply) *reply = NULL;
      return fc_error_set(FC_EINVAL, "redis: more than 64 arguments (use fc_redis_command)");
    }
    argv[argc++] = a;
  }
  va_end(ap);
  return fc_redis_command(r, argc, argv, NULL, reply);
}
