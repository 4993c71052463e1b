/* facecast bench startup: how long a server takes to be useful, from cold (seed 004's method).
 *
 * Each run starts `facecast serve` as a new process (this executable, on a free loopback port,
 * with the options given) and times, from the moment it was spawned:
 *   ready          /healthz answers 200 (polled every 2 ms);
 *   first frame    a WebSocket stream session (WS /ws/stream) opened at once: its first video
 *                  access unit, timed from the request (and from the spawn);
 *   speaking       POST /human (echo) on that session: the first frame whose sound is speech
 *                  (its audio message louder than silence, and the video of that frame index),
 *                  timed from the request;
 * and the server's peak resident memory (VmHWM) and, where NVML is there, the peak device memory
 * used above what was in use before it started. The server is then stopped (SIGTERM).
 *
 * A first start runs with an empty cache folder (a temporary FACECAST_CACHE_DIR: no cuDNN
 * algorithm picks, no face detection of the avatar photo; what a new machine pays); the measured
 * runs then reuse that folder (what every later start pays).
 * Reported: each run and the medians. The servers' log goes to a file in that temporary folder;
 * when a run fails its last lines are shown and the folder is kept, else it is removed. */
#include "cli/cli.h"
#include "core/gpustat.h"
#include "facecast/error.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <libsoup/soup.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define MAX_RUNS 20
#define MAX_ARGS 200
#define SPEECH_PEAK 1000 /* |sample| above which a frame's sound is speech, not silence */

typedef struct srun {
  double ready_ms, frame_ms, frame_abs_ms, speak_ms;
  double rss_mib, gpu_mib; /* gpu_mib < 0: no NVML */
} srun;

typedef struct sctx {
  GMainLoop *loop;
  SoupSession *http;
  SoupWebsocketConnection *ws;
  char *sessionid;
  gint64 t_spawn, t_ws, t_human;
  gint64 t_frame, t_speak;
  int speak_index;    /* the first speaking frame's index (audio seen), -1 before */
  int last_video;     /* the highest video index seen since /human, -1 before */
  gint64 t_last_video;
  char err[300];
  /* GPU memory sampling */
  fc_gpustat *gpu;
  unsigned long long gpu_base, gpu_peak;
} sctx;

static void usage(FILE *f) {
  fputs("usage: facecast bench startup [--runs N] [--timeout S] [--text TEXT] [--json]\n"
        "                              [SERVE OPTIONS...]\n"
        "Starts `facecast serve SERVE OPTIONS` N times (default 3) after one start with an\n"
        "empty cuDNN algorithm cache, and reports per run and as medians: process start ->\n"
        "/healthz 200 (ready), a new WebSocket stream session -> its first frame, POST /human\n"
        "-> the first speaking frame, the server's peak memory and (with NVML) device memory.\n"
        "Any option not listed here goes to serve, e.g. --model wav2lip --checkpoint FILE\n"
        "--device cuda. --timeout: seconds a start may take (default 120).\n",
        f);
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t n = sizeof a;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &n) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

static double ms_since(gint64 t0, gint64 t) { return (double)(t - t0) / 1000.0; }

static unsigned long long gpu_used(sctx *c) {
  unsigned long long sum = 0, mem;
  unsigned util;
  for (int i = 0; c->gpu && i < 16 && fc_gpustat_read(c->gpu, i, &util, &mem) == FC_OK; i++)
    sum += mem;
  return sum;
}

static gboolean sample_gpu(gpointer data) {
  sctx *c = data;
  unsigned long long m = gpu_used(c);
  if (m > c->gpu_peak) c->gpu_peak = m;
  return G_SOURCE_CONTINUE;
}

static gboolean tick(gpointer data) {
  (void)data;
  return G_SOURCE_CONTINUE; /* wakes the loop so that deadlines are seen */
}

/* One WebSocket message: the session (text, first), then frames (binary) and events (text). */
static void on_ws_message(SoupWebsocketConnection *ws, gint type, GBytes *msg, gpointer data) {
  (void)ws;
  sctx *c = data;
  gint64 now = g_get_monotonic_time();
  gsize n = 0;
  const uint8_t *b = g_bytes_get_data(msg, &n);
  if (type == SOUP_WEBSOCKET_DATA_TEXT) {
    if (c->sessionid || n < 2) return;
    char *text = g_strndup((const char *)b, n), *p = strstr(text, "\"sessionid\":\"");
    if (p) {
      p += 13;
      char *q = strchr(p, '"');
      if (q) c->sessionid = g_strndup(p, (gsize)(q - p));
    }
    g_free(text);
    return;
  }
  if (n < 16) return;
  int kind = b[0];
  uint32_t index = (uint32_t)b[4] | (uint32_t)b[5] << 8 | (uint32_t)b[6] << 16 | (uint32_t)b[7] << 24;
  size_t hl = (size_t)b[2] | (size_t)b[3] << 8;
  if (hl < 16 || hl > n) return;
  if (kind == 1 && !c->t_frame) c->t_frame = now;
  if (!c->t_human || c->t_speak) return;
  if (kind == 1) {
    if ((int)index > c->last_video) c->last_video = (int)index, c->t_last_video = now;
    if (c->speak_index >= 0 && (int)index >= c->speak_index) c->t_speak = now;
  } else if (kind == 2 && c->speak_index < 0) {
    int peak = 0;
    for (size_t i = hl; i + 1 < n; i += 2) {
      int v = (int16_t)(b[i] | b[i + 1] << 8);
      if (abs(v) > peak) peak = abs(v);
    }
    if (peak > SPEECH_PEAK) {
      c->speak_index = (int)index;
      if (c->last_video >= c->speak_index) c->t_speak = now; /* its picture came first */
    }
  }
}

static void on_ws(GObject *src, GAsyncResult *res, gpointer data) {
  sctx *c = data;
  GError *e = NULL;
  c->ws = soup_session_websocket_connect_finish(SOUP_SESSION(src), res, &e);
  if (!c->ws) {
    snprintf(c->err, sizeof c->err, "WS /ws/stream: %s", e ? e->message : "failed");
    g_clear_error(&e);
    return;
  }
  soup_websocket_connection_set_max_incoming_payload_size(c->ws, 64 << 20);
  g_signal_connect(c->ws, "message", G_CALLBACK(on_ws_message), c);
}

static void on_human(GObject *src, GAsyncResult *res, gpointer data) {
  sctx *c = data;
  GError *e = NULL;
  GBytes *body = soup_session_send_and_read_finish(SOUP_SESSION(src), res, &e);
  if (!body) snprintf(c->err, sizeof c->err, "POST /human: %s", e ? e->message : "failed");
  g_clear_error(&e);
  if (body) g_bytes_unref(body);
}

/* Runs the main context until *done or the deadline (or an error); 0 when done. */
static int wait_for(sctx *c, gint64 *done, gint64 deadline, const char *what) {
  guint t = g_timeout_add(50, tick, NULL);
  while (!*done && !c->err[0] && g_get_monotonic_time() < deadline)
    g_main_context_iteration(NULL, TRUE);
  g_source_remove(t);
  if (*done) return 0;
  if (!c->err[0]) snprintf(c->err, sizeof c->err, "no %s in time", what);
  return -1;
}

static int alive(pid_t pid, int *status) {
  pid_t r = waitpid(pid, status, WNOHANG);
  return r == 0;
}

static void stop_child(pid_t pid) {
  int status;
  if (!alive(pid, &status)) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 1000; i++) { /* 10 s */
    if (waitpid(pid, &status, WNOHANG) == pid) return;
    g_usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
}

static double rss_peak_mib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  double kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmHWM:", 6)) kib = atof(line + 6);
  if (f) fclose(f);
  return kib < 0 ? -1 : kib / 1024.0;
}

/* Whether a start failed because another process bound the port between free_port() and the
 * server's own bind (the server says so in its one line). */
static int port_was_taken(const char *log) {
  char *text = NULL;
  int taken = g_file_get_contents(log, &text, NULL, NULL) && strstr(text, "Address already in use");
  g_free(text);
  return taken;
}

static void show_log(const char *log) {
  char *text = NULL;
  gsize n = 0;
  if (!g_file_get_contents(log, &text, &n, NULL)) return;
  const char *p = text + n;
  for (int lines = 0; p > text && lines < 15; p--)
    if (p[-1] == '\n' && p != text + n) lines++;
  fprintf(stderr, "facecast: the server's log (%s) ends:\n%s", log, p);
  g_free(text);
}

/* One start: spawn, ready, first frame, speaking, stop. 0, or -1 with c->err. */
static int one_run(sctx *c, char **serve_argv, int nargs, const char *cache_dir, double timeout,
                   const char *text, srun *r, const char *log) {
  int port = free_port();
  if (port < 0) {
    snprintf(c->err, sizeof c->err, "no free port: %s", strerror(errno));
    return -1;
  }
  char portstr[16];
  snprintf(portstr, sizeof portstr, "%d", port);
  char *argv[MAX_ARGS + 8];
  int k = 0;
  argv[k++] = "facecast";
  argv[k++] = "serve";
  argv[k++] = "--host";
  argv[k++] = "127.0.0.1";
  argv[k++] = "--port";
  argv[k++] = portstr;
  for (int i = 0; i < nargs; i++) argv[k++] = serve_argv[i];
  argv[k] = NULL;
  g_setenv("FACECAST_CACHE_DIR", cache_dir, TRUE); /* inherited by the child */

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  c->gpu_base = c->gpu_peak = gpu_used(c);
  c->t_spawn = g_get_monotonic_time();
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    snprintf(c->err, sizeof c->err, "cannot start the server: %s", strerror(rc));
    return -1;
  }
  guint gpu_src = c->gpu ? g_timeout_add(20, sample_gpu, c) : 0;
  int ret = -1, status = 0;
  char *base = g_strdup_printf("http://127.0.0.1:%d", port), *url = NULL;
  gint64 deadline = c->t_spawn + (gint64)(timeout * 1e6), t_ready = 0;

  /* ready: /healthz polled until 200 (a refused connection comes back at once) */
  url = g_strdup_printf("%s/healthz", base);
  while (!t_ready) {
    if (!alive(pid, &status)) {
      snprintf(c->err, sizeof c->err, "the server exited (%s %d) before it was ready",
               WIFEXITED(status) ? "status" : "signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
      pid = 0;
      goto done;
    }
    if (g_get_monotonic_time() > deadline) {
      snprintf(c->err, sizeof c->err, "not ready after %.0f s", timeout);
      goto done;
    }
    SoupMessage *m = soup_message_new("GET", url);
    GBytes *b = soup_session_send_and_read(c->http, m, NULL, NULL);
    if (b && soup_message_get_status(m) == SOUP_STATUS_OK) t_ready = g_get_monotonic_time();
    if (b) g_bytes_unref(b);
    g_object_unref(m);
    while (g_main_context_iteration(NULL, FALSE)) { /* GPU samples */
    }
    if (!t_ready) g_usleep(2000);
  }
  r->ready_ms = ms_since(c->t_spawn, t_ready);

  /* a new session's first frame */
  g_free(url);
  url = g_strdup_printf("ws://127.0.0.1:%d/ws/stream", port);
  SoupMessage *wm = soup_message_new("GET", url);
  c->t_ws = g_get_monotonic_time();
  soup_session_websocket_connect_async(c->http, wm, NULL, NULL, G_PRIORITY_DEFAULT, NULL, on_ws, c);
  g_object_unref(wm);
  if (wait_for(c, &c->t_frame, c->t_ws + 30 * G_USEC_PER_SEC, "first frame")) goto done;
  r->frame_ms = ms_since(c->t_ws, c->t_frame);
  r->frame_abs_ms = ms_since(c->t_spawn, c->t_frame);
  if (!c->sessionid) {
    snprintf(c->err, sizeof c->err, "the stream named no session");
    goto done;
  }

  /* speech: the first frame that speaks after /human */
  g_free(url);
  url = g_strdup_printf("%s/human", base);
  SoupMessage *hm = soup_message_new("POST", url);
  char *body = g_strdup_printf("{\"sessionid\":\"%s\",\"type\":\"echo\",\"text\":\"%s\"}",
                               c->sessionid, text);
  GBytes *bb = g_bytes_new_take(body, strlen(body));
  soup_message_set_request_body_from_bytes(hm, "application/json", bb);
  g_bytes_unref(bb);
  c->t_human = g_get_monotonic_time();
  soup_session_send_and_read_async(c->http, hm, G_PRIORITY_DEFAULT, NULL, on_human, c);
  g_object_unref(hm);
  if (wait_for(c, &c->t_speak, c->t_human + 30 * G_USEC_PER_SEC, "speaking frame")) goto done;
  r->speak_ms = ms_since(c->t_human, c->t_speak);
  ret = 0;
done:
  if (gpu_src) g_source_remove(gpu_src);
  r->gpu_mib = c->gpu ? (double)(c->gpu_peak - c->gpu_base) / 1048576.0 : -1;
  if (pid > 0) r->rss_mib = rss_peak_mib(pid);
  if (c->ws) {
    soup_websocket_connection_close(c->ws, SOUP_WEBSOCKET_CLOSE_NORMAL, NULL);
    g_object_unref(c->ws);
    c->ws = NULL;
  }
  if (pid > 0) stop_child(pid);
  while (g_main_context_iteration(NULL, FALSE)) {
  }
  g_free(url);
  g_free(base);
  return ret;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(const srun *r, int n, size_t off) {
  double v[MAX_RUNS];
  for (int i = 0; i < n; i++) v[i] = *(const double *)((const char *)&r[i] + off);
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void print_run(FILE *f, const char *name, const srun *r, int json, int last) {
  if (json) {
    fprintf(f, "{\"run\":\"%s\",\"ready_ms\":%.1f,\"first_frame_ms\":%.1f,"
               "\"first_frame_from_start_ms\":%.1f,\"first_speaking_frame_ms\":%.1f,"
               "\"rss_peak_mib\":%.1f,\"gpu_mem_peak_mib\":%.1f}%s",
            name, r->ready_ms, r->frame_ms, r->frame_abs_ms, r->speak_ms, r->rss_mib, r->gpu_mib,
            last ? "" : ",");
    return;
  }
  char gpu[32] = "-";
  if (r->gpu_mib >= 0) snprintf(gpu, sizeof gpu, "%.0f", r->gpu_mib);
  fprintf(f, "%-12s %9.1f %14.1f %16.1f %12.1f %9.0f %9s\n", name, r->ready_ms, r->frame_ms,
          r->frame_abs_ms, r->speak_ms, r->rss_mib, gpu);
}

int fc_bench_startup(int argc, char **argv) {
  int runs = 3, json = 0, nargs = 0;
  double timeout = 120;
  const char *text = "Hello, I am ready when you are.";
  char *serve_argv[MAX_ARGS];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return FC_EXIT_OK;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--runs") || !strcmp(a, "--timeout") || !strcmp(a, "--text")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "facecast: error: %s needs a value\n", a);
        return FC_EXIT_INPUT;
      }
      const char *v = argv[++i];
      double d;
      if (!strcmp(a, "--text")) {
        if (!*v || strpbrk(v, "\"\\") || strlen(v) > 500) {
          fprintf(stderr, "facecast: error: --text: 1..500 characters, no quotes or backslashes\n");
          return FC_EXIT_INPUT;
        }
        text = v;
      } else if (!strcmp(a, "--runs")) {
        if (fc_cli_parse_real(a, v, 1, MAX_RUNS, &d)) return fc_cli_fail(FC_EINVAL);
        runs = (int)d;
      } else {
        if (fc_cli_parse_real(a, v, 1, 3600, &d)) return fc_cli_fail(FC_EINVAL);
        timeout = d;
      }
    } else if (!strcmp(a, "--port") || !strcmp(a, "--host")) {
      fprintf(stderr, "facecast: error: bench startup picks the port and host itself\n");
      return FC_EXIT_INPUT;
    } else {
      if (nargs >= MAX_ARGS) {
        fprintf(stderr, "facecast: error: too many serve options\n");
        return FC_EXIT_INPUT;
      }
      serve_argv[nargs++] = argv[i];
    }
  }

  sctx c = {0};
  int gerr;
  c.gpu = fc_gpustat_open(&gerr);
  c.http = soup_session_new_with_options("timeout", 5, NULL);
  char *cache = g_dir_make_tmp("facecast-startup-XXXXXX", NULL);
  char *log = g_strdup_printf("%s/serve.log", cache ? cache : g_get_tmp_dir());
  srun r[MAX_RUNS + 1];
  memset(r, 0, sizeof r);
  int ret = FC_EXIT_OK;
  if (!cache) {
    fprintf(stderr, "facecast: error: cannot make a temporary folder\n");
    ret = FC_EXIT_FAIL;
    goto out;
  }
  if (!json) {
    fprintf(stderr, "facecast bench startup: serve");
    for (int i = 0; i < nargs; i++) fprintf(stderr, " %s", serve_argv[i]);
    fprintf(stderr, ": 1 start with an empty cuDNN algorithm cache, then %d with it\n", runs);
  }
  for (int i = 0, tries = 0; i <= runs; i++) {
    g_free(c.sessionid);
    c.sessionid = NULL;
    c.t_frame = c.t_speak = c.t_human = 0;
    c.speak_index = c.last_video = -1;
    c.err[0] = 0;
    int failed = one_run(&c, serve_argv, nargs, cache, timeout, text, &r[i], log);
    if (failed && ++tries < 3 && port_was_taken(log)) { /* the free port went to someone else */
      i--;
      continue;
    }
    if (failed) {
      fprintf(stderr, "facecast: error: bench startup run %d: %s\n", i, c.err);
      show_log(log);
      ret = FC_EXIT_FAIL;
      goto out;
    }
  }
  FILE *f = stdout;
  if (json) {
    fprintf(f, "{\"runs\":%d,\"serve_args\":[", runs);
    for (int i = 0; i < nargs; i++) {
      char *q = g_strescape(serve_argv[i], NULL);
      fprintf(f, "%s\"%s\"", i ? "," : "", q);
      g_free(q);
    }
    fprintf(f, "],\"empty_cache\":");
    print_run(f, "empty-cache", &r[0], 1, 1);
    fprintf(f, ",\"each\":[");
    for (int i = 1; i <= runs; i++) print_run(f, "cached", &r[i], 1, i == runs);
    fprintf(f, "],\"median\":");
  } else {
    fprintf(f, "%-12s %9s %14s %16s %12s %9s %9s\n", "start", "ready ms", "first frame ms",
            "(from spawn) ms", "speaking ms", "RSS MiB", "GPU MiB");
    print_run(f, "empty cache", &r[0], 0, 0);
    for (int i = 1; i <= runs; i++) {
      char name[24];
      snprintf(name, sizeof name, "cached %d", i);
      print_run(f, name, &r[i], 0, 0);
    }
  }
  srun m = {
      .ready_ms = median(r + 1, runs, offsetof(srun, ready_ms)),
      .frame_ms = median(r + 1, runs, offsetof(srun, frame_ms)),
      .frame_abs_ms = median(r + 1, runs, offsetof(srun, frame_abs_ms)),
      .speak_ms = median(r + 1, runs, offsetof(srun, speak_ms)),
      .rss_mib = median(r + 1, runs, offsetof(srun, rss_mib)),
      .gpu_mib = median(r + 1, runs, offsetof(srun, gpu_mib)),
  };
  print_run(f, "median", &m, json, 1);
  if (json) fprintf(f, "}\n");
out:
  if (cache && ret == FC_EXIT_OK) { /* kept after a failure, to be looked at */
    GDir *d = g_dir_open(cache, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name(d))) {
      char *p = g_build_filename(cache, name, NULL);
      g_unlink(p);
      g_free(p);
    }
    if (d) g_dir_close(d);
    g_rmdir(cache);
  }
  g_free(c.sessionid);
  g_free(log);
  g_free(cache);
  g_object_unref(c.http);
  fc_gpustat_close(c.gpu);
  return ret;
}
