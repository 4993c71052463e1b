/* An in-process server for the route fuzzers (see harness.h). */
#include "harness.h"

#include "facecast/server.h"

#include <errno.h>
#include <glib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <glib/gstdio.h>
#include <sys/stat.h>
#include <unistd.h>

static fc_server *srv;
static int port, conn = -1;
static char sid[64];
static gint64 sid_made; /* µs: unconnected sessions close after 30 s */

static const char offer_json[] =
    "{\"type\":\"offer\",\"sdp\":\"v=0\\r\\no=- 1 2 IN IP4 127.0.0.1\\r\\ns=-\\r\\nt=0 0\\r\\n"
    "a=group:BUNDLE 0 1\\r\\nm=video 9 UDP/TLS/RTP/SAVPF 102\\r\\nc=IN IP4 0.0.0.0\\r\\n"
    "a=ice-ufrag:fcTe\\r\\na=ice-pwd:facecastfacecastfacecast\\r\\n"
    "a=fingerprint:sha-256 AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:"
    "AB:AB:AB:AB:AB:AB:AB:AB:AB\\r\\na=setup:actpass\\r\\na=mid:0\\r\\na=recvonly\\r\\na=rtcp-mux\\r\\n"
    "a=rtpmap:102 H264/90000\\r\\na=fmtp:102 packetization-mode=1;profile-level-id=42e01f\\r\\n"
    "m=audio 9 UDP/TLS/RTP/SAVPF 111\\r\\nc=IN IP4 0.0.0.0\\r\\na=ice-ufrag:fcTe\\r\\n"
    "a=ice-pwd:facecastfacecastfacecast\\r\\na=fingerprint:sha-256 AB:AB:AB:AB:AB:AB:AB:AB:AB:"
    "AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB\\r\\na=setup:actpass\\r\\n"
    "a=mid:1\\r\\na=recvonly\\r\\na=rtcp-mux\\r\\na=rtpmap:111 opus/48000/2\\r\\n\"}";

void fc_fuzz_pump(int ms) {
  gint64 end = g_get_monotonic_time() + (gint64)ms * 1000;
  do {
    while (g_main_context_iteration(NULL, FALSE)) {
    }
    if (ms) g_usleep(500);
  } while (g_get_monotonic_time() < end);
}

int fc_fuzz_connect(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  /* Hundreds of thousands of short connections can run the loopback's ephemeral ports out (in
   * TIME_WAIT): that is the harness's limit, so connecting is retried for a while first. */
  int e = 0;
  for (int tries = 0; tries < 200; tries++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      e = errno;
      fc_fuzz_pump(50);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
    e = errno;
    close(fd);
    /* EINTR: libFuzzer's -timeout ticks SIGALRM every second; a fresh socket is simplest */
    if (e != EADDRNOTAVAIL && e != EAGAIN && e != ECONNREFUSED && e != EINTR) break;
    fc_fuzz_pump(50); /* the server's loop goes on meanwhile */
  }
  fprintf(stderr, "fuzz: cannot connect to the server: %s\n", g_strerror(e));
  __builtin_trap(); /* the server does not take connections any more */
}

void fc_fuzz_close_reset(int fd) {
  struct linger lg = {1, 0}; /* a reset: no TIME_WAIT left on this side */
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  close(fd);
}

static int send_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    /* the server reads on this thread: turn its loop while the socket buffer is full */
    ssize_t w = send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      c += w, n -= (size_t)w;
    } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return -1;
    } else {
      fc_fuzz_pump(0);
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, 1);
    }
  }
  return 0;
}

/* Reads one answer (headers + Content-Length body); its status, or -1 when closed first. */
static int read_answer(int fd, int *closed) {
  GString *got = g_string_new(NULL);
  gint64 deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;
  int status = -1;
  *closed = 0;
  for (;;) {
    if (g_get_monotonic_time() > deadline) __builtin_trap(); /* no answer: a hang */
    fc_fuzz_pump(0);
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 1) <= 0) continue;
    char buf[65536];
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      *closed = 1;
      break;
    }
    g_string_append_len(got, buf, r);
    const char *end = strstr(got->str, "\r\n\r\n");
    if (!end) continue;
    const char *cl = strcasestr(got->str, "\r\nContent-Length:");
    size_t want = cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0;
    if ((size_t)got->len >= (size_t)(end + 4 - got->str) + want) break;
  }
  if (sscanf(got->str, "HTTP/1.1 %d", &status) != 1) status = -1;
  if (status >= 400) { /* errors are JSON {code:-1, msg} */
    const char *body = strstr(got->str, "\r\n\r\n");
    if (body && (!strstr(body, "\"code\":-1") || !strstr(body, "\"msg\":"))) __builtin_trap();
  }
  if (strstr(got->str, "\r\nConnection: close")) *closed = 1;
  g_string_free(got, TRUE);
  return status;
}

int fc_fuzz_request(const char *method, const char *path, const char *ctype, const uint8_t *body,
                    size_t n) {
  if (conn < 0) conn = fc_fuzz_connect();
  char head[512];
  int k = snprintf(head, sizeof head,
                   "%s %s HTTP/1.1\r\nHost: fuzz\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                   method, path, ctype, n);
  int closed = 0, st = -1;
  if (send_all(conn, head, (size_t)k) == 0 && send_all(conn, body, n) == 0)
    st = read_answer(conn, &closed);
  else
    closed = 1;
  if (closed) {
    close(conn);
    conn = -1;
  }
  return st;
}

static void new_session(void) {
  int fd = fc_fuzz_connect();
  char head[256];
  int k = snprintf(head, sizeof head,
                   "POST /offer HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                   strlen(offer_json));
  send_all(fd, head, (size_t)k);
  send_all(fd, offer_json, strlen(offer_json));
  GString *got = g_string_new(NULL);
  gint64 deadline = g_get_monotonic_time() + 30 * G_USEC_PER_SEC;
  while (g_get_monotonic_time() < deadline) {
    fc_fuzz_pump(0);
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 1) <= 0) continue;
    char buf[8192];
    ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    g_string_append_len(got, buf, r);
  }
  close(fd);
  const char *s = strstr(got->str, "\"sessionid\":\"");
  if (s) {
    s += 13;
    size_t len = strcspn(s, "\"");
    if (len < sizeof sid) memcpy(sid, s, len), sid[len] = 0;
  }
  g_string_free(got, TRUE);
}

const char *fc_fuzz_session(void) {
  /* unconnected sessions close after 30 s: a new one every 20 s, the old one deleted */
  if (!sid[0] || g_get_monotonic_time() - sid_made > 20 * G_USEC_PER_SEC) {
    if (sid[0]) {
      char path[128];
      snprintf(path, sizeof path, "/session/%s", sid);
      fc_fuzz_request("DELETE", path, "text/plain", (const uint8_t *)"", 0);
    }
    sid[0] = 0;
    new_session();
    sid_made = g_get_monotonic_time();
  }
  return sid;
}

size_t fc_fuzz_with_session(const uint8_t *body, size_t n, uint8_t **out) {
  const char *id = fc_fuzz_session();
  const char *media = srv ? fc_fuzz_media_dir() : "";
  size_t idn = strlen(id), mn = strlen(media), m = 0;
  size_t grow = idn > mn ? idn : mn;
  uint8_t *o = malloc(n * (grow > 3 ? grow : 3) + 1);
  for (size_t i = 0; i < n;) {
    if (i + 3 <= n && !memcmp(body + i, "SID", 3)) {
      memcpy(o + m, id, idn), m += idn, i += 3;
    } else if (i + 5 <= n && !memcmp(body + i, "MEDIA", 5)) {
      memcpy(o + m, media, mn), m += mn, i += 5;
    } else {
      o[m++] = body[i++];
    }
  }
  *out = o;
  return m;
}

static char media_dir[4200];
const char *fc_fuzz_media_dir(void) { return media_dir; }

/* A folder of its own for everything the server writes (avatar packs, uploads, recordings),
 * and a media folder holding what a path check must refuse: a FIFO and a link out of it. */
static void private_folders(void) {
  char *root = g_dir_make_tmp("fc-fuzz-XXXXXX", NULL);
  if (!root) abort();
  char *media = g_build_filename(root, "media", NULL), *tmp = g_build_filename(root, "tmp", NULL);
  g_mkdir(media, 0700);
  g_mkdir(tmp, 0700);
  char *fifo = g_build_filename(media, "fifo.mp4", NULL), *link = g_build_filename(media, "out.png", NULL);
  mkfifo(fifo, 0600);
  symlink("/etc/hostname", link);
  g_setenv("FACECAST_DATA_DIR", root, TRUE);
  g_setenv("TMPDIR", tmp, TRUE);
  snprintf(media_dir, sizeof media_dir, "%s", media);
  g_free(fifo), g_free(link), g_free(media), g_free(tmp), g_free(root);
}

/* A GLib critical (an assertion in GLib, json-glib, libsoup, GStreamer) is a bug: it crashes
 * the fuzzer with the stack that raised it. abort(), not GLib's own trap, because libFuzzer
 * catches SIGABRT (and saves the input) but not SIGTRAP; the stack because an avatar task
 * decodes on its own thread, so the input saved is not always the one that did it. */
void __sanitizer_print_stack_trace(void);
static void critical_is_fatal(const gchar *domain, GLogLevelFlags level, const gchar *msg,
                              gpointer user) {
  g_log_default_handler(domain, level, msg, user);
  if (level & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_ERROR | G_LOG_FLAG_FATAL)) {
    __sanitizer_print_stack_trace();
    abort();
  }
}

void fc_fuzz_server_start(void) {
  if (srv) return;
  private_folders();
  g_log_set_default_handler(critical_is_fatal, NULL);
  fc_server_params p = fc_server_params_default();
  p.host = "127.0.0.1";
  p.port = 0;
  p.quiet = 1;
  p.max_sessions = 8;
  p.media_dirs = media_dir;
  p.render_slots = -1;        /* /v1/videos: jobs are stored, not rendered */
  p.rate_limit_per_min = -1;  /* every input is answered on its merits, not 429 */
  int err;
  if (!(srv = fc_server_create(&p, &err))) {
    fprintf(stderr, "fuzz: server did not start\n");
    abort();
  }
  port = fc_server_port(srv);
}
