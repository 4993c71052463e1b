/* A real redis-server for a test (Debian's redis-server package; scripts/deps.sh installs it):
 * started by the test in a folder of its own, on a free port of 127.0.0.1, killed (SIGKILL,
 * as a crash would) at the end. Shared by the tests that talk to Redis (test_redis,
 * test_vstore_redis). */
#ifndef FC_REDIS_SERVER_H
#define FC_REDIS_SERVER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* A port of 127.0.0.1 nothing listens on now (redis-server has no "--port 0"). */
static inline int fc_test_free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  int port = -1;
  if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(s, (struct sockaddr *)&a, &l) == 0)
    port = ntohs(a.sin_port);
  if (s >= 0) close(s);
  return port;
}

static inline int fc_test_port_open(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int ok = s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0;
  if (s >= 0) close(s);
  return ok;
}

/* Starts redis-server on port with its files in dir (requiring password when not NULL;
 * durable: every write fsync'd to an append-only file before it is answered, so a SIGKILL loses
 * nothing answered and a restart in the same dir finds it all): its pid, or -1. */
static inline pid_t fc_test_redis_start(const char *dir, int port, const char *password,
                                        int durable) {
  char p[16], log[600];
  snprintf(p, sizeof p, "%d", port);
  snprintf(log, sizeof log, "%s/redis-%d.log", dir, port);
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = freopen(log, "a", stdout);
    if (f) dup2(fileno(f), 2);
    const char *argv[] = {"redis-server", "--port", p, "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", durable ? "yes" : "no", "--appendfsync", "always",
                          "--dir", dir, "--daemonize", "no", "--dbfilename", "unused.rdb",
                          password ? "--requirepass" : NULL, password, NULL};
    execvp("redis-server", (char *const *)argv);
    _exit(127);
  }
  for (int i = 0; pid > 0 && i < 500; i++) { /* up to 5 s */
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      fprintf(stderr, "redis-server exited at start (see %s)\n", log);
      return -1;
    }
    if (fc_test_port_open(port)) return pid;
    usleep(10000);
  }
  fprintf(stderr, "redis-server did not listen on %d within 5 s\n", port);
  if (pid > 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
  return -1;
}

/* 1 when redis-server is on PATH; else 0, having said which package to install. */
static inline int fc_test_have_redis(void) {
  const char *path = getenv("PATH");
  char exe[4096];
  for (const char *p = path ? path : ""; *p;) {
    const char *end = strchr(p, ':');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    snprintf(exe, sizeof exe, "%.*s/redis-server", (int)n, p);
    if (access(exe, X_OK) == 0) return 1;
    p += n + (end ? 1 : 0);
  }
  fprintf(stderr, "FAIL: redis-server not found: install Debian's redis-server package "
                  "(scripts/deps.sh installs it)\n");
  return 0;
}

static inline void fc_test_redis_stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

#endif
