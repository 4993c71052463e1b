/* The Redis client (jobs/redis.h) against a real redis-server that this test starts itself
 * (Debian's redis-server package; scripts/deps.sh installs it): in a temporary folder, on a
 * free port of 127.0.0.1, nothing saved, killed at the end. PING, binary SET/GET, errors as
 * FC_EREMOTE with the server's text, a stream with a consumer group (XADD, XGROUP CREATE,
 * XREADGROUP, XACK, XAUTOCLAIM taking over a dead consumer's entries), AUTH and SELECT from the
 * URL, a server killed mid-session (a clear FC_EIO) and started again (the next command
 * reconnects); without the server, connection refused and a silent peer's timeout. A machine
 * without redis-server fails this test, naming the package. */
#include "facecast/error.h"
#include "fc_redis_server.h"
#include "fc_test.h"
#include "jobs/redis.h"

#include <glib.h>
#include <time.h>

static char tmpdir[256];

static pid_t start_server(int port, const char *password) {
  return fc_test_redis_start(tmpdir, port, password, 0);
}

static void stop_server(pid_t pid) { fc_test_redis_stop(pid); }

static fc_redis *client(const char *fmt, int port, int io_ms) {
  char url[200];
  snprintf(url, sizeof url, fmt, port);
  fc_redis_params p = {.url = url, .connect_timeout_ms = 1000, .io_timeout_ms = io_ms};
  int err = 0;
  fc_redis *r = fc_redis_create(&p, &err);
  if (!r) fprintf(stderr, "client %s: %s\n", url, fc_error_detail(err));
  return r;
}

static int port;   /* the plain server's */
static pid_t server;

static void test_url(void) {
  static const char *const bad[] = {NULL, "", "http://127.0.0.1:6379", "redis://", "redis://h/abc",
                                    "redis://h/1?x=2", "redis://user@h:1", "redis://h:1/-1"};
  for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
    fc_redis_params p = {.url = bad[i]};
    int err = 0;
    fc_redis *r = fc_redis_create(&p, &err);
    FC_CHECK(!r && err == FC_EINVAL && strstr(fc_error_detail(err), "redis"));
    fc_redis_destroy(r);
  }
  fc_redis_params p = {.url = "redis://:pw@[::1]:7000/3"};
  int err = -1;
  fc_redis *r = fc_redis_create(&p, &err);
  FC_CHECK(r && err == 0 && !fc_redis_connected(r));
  fc_redis_destroy(r);
}

static void test_ping_get_set(void) {
  fc_redis *r = client("redis://127.0.0.1:%d", port, 2000);
  FC_REQUIRE(r);
  fc_resp *rep = NULL;
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "PING", NULL), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_STRING && !strcmp(rep->str, "PONG"));
  fc_resp_free(rep);
  FC_CHECK(fc_redis_connected(r));
  /* binary key and value: every byte value, CR LF and NUL included; and a 1 MiB value */
  char key[] = "k\0\r\n1", val[256];
  for (int i = 0; i < 256; i++) val[i] = (char)i;
  size_t big_n = 1 << 20;
  char *big = malloc(big_n);
  for (size_t i = 0; i < big_n; i++) big[i] = (char)(i * 31 + 7);
  const char *set[] = {"SET", key, val}, *get[] = {"GET", key};
  size_t setl[] = {3, sizeof key - 1, sizeof val}, getl[] = {3, sizeof key - 1};
  FC_CHECK_INT(fc_redis_command(r, 3, set, setl, &rep), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_STRING && !strcmp(rep->str, "OK"));
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_command(r, 2, get, getl, &rep), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_BULK && rep->len == sizeof val && !memcmp(rep->str, val, sizeof val));
  fc_resp_free(rep);
  const char *setb[] = {"SET", "big", big};
  size_t setbl[] = {3, 3, big_n};
  FC_CHECK_INT(fc_redis_command(r, 3, setb, setbl, &rep), ==, 0);
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "GET", "big", NULL), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_BULK && rep->len == big_n && !memcmp(rep->str, big, big_n));
  fc_resp_free(rep);
  free(big);
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "GET", "missing", NULL), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_NIL);
  fc_resp_free(rep);
  /* the server's errors: FC_EREMOTE with its text, and the connection stays */
  int err = fc_redis_cmd(r, &rep, "INCR", "big", NULL);
  FC_CHECK(err == FC_EREMOTE && !rep && strstr(fc_error_detail(err), "redis: ERR value is not an integer"));
  err = fc_redis_cmd(r, &rep, "NOSUCHCOMMAND", "x", NULL);
  FC_CHECK(err == FC_EREMOTE && strstr(fc_error_detail(err), "unknown command"));
  FC_CHECK(fc_redis_connected(r));
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "INCRBY", "n", "-5", NULL), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_INTEGER && rep->integer == -5);
  fc_resp_free(rep);
  fc_redis_destroy(r);
}

static const char *str_at(const fc_resp *r, size_t i) {
  return r && r->n > i && (r->elem[i].type == FC_RESP_BULK || r->elem[i].type == FC_RESP_STRING)
             ? r->elem[i].str
             : "";
}

static void test_streams(void) {
  fc_redis *r = client("redis://127.0.0.1:%d", port, 2000);
  FC_REQUIRE(r);
  fc_resp *rep = NULL;
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "XGROUP", "CREATE", "jobs", "workers", "$", "MKSTREAM", NULL), ==, 0);
  fc_resp_free(rep);
  int err = fc_redis_cmd(r, &rep, "XGROUP", "CREATE", "jobs", "workers", "$", "MKSTREAM", NULL);
  FC_CHECK(err == FC_EREMOTE && strstr(fc_error_detail(err), "BUSYGROUP"));
  char ids[3][64] = {"", "", ""};
  for (int i = 0; i < 3; i++) {
    char job[16];
    snprintf(job, sizeof job, "job-%d", i);
    FC_CHECK_INT(fc_redis_cmd(r, &rep, "XADD", "jobs", "*", "id", job, NULL), ==, 0);
    FC_CHECK(rep && rep->type == FC_RESP_BULK && rep->len > 2 && strchr(rep->str, '-'));
    if (rep) g_strlcpy(ids[i], rep->str, sizeof ids[i]);
    fc_resp_free(rep);
  }
  /* consumer a takes all three: [[stream, [[id, [field, value]]...]]] */
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "XREADGROUP", "GROUP", "workers", "a", "COUNT", "10", "BLOCK",
                            "100", "STREAMS", "jobs", ">", NULL), ==, 0);
  FC_REQUIRE(rep && rep->type == FC_RESP_ARRAY && rep->n == 1);
  fc_resp *s = &rep->elem[0];
  FC_CHECK(!strcmp(str_at(s, 0), "jobs"));
  FC_REQUIRE(s->n == 2 && s->elem[1].n == 3);
  for (int i = 0; i < 3; i++) {
    fc_resp *e = &s->elem[1].elem[i];
    char job[16];
    snprintf(job, sizeof job, "job-%d", i);
    FC_CHECK(!strcmp(str_at(e, 0), ids[i]));
    FC_CHECK(e->n == 2 && !strcmp(str_at(&e->elem[1], 0), "id") && !strcmp(str_at(&e->elem[1], 1), job));
  }
  fc_resp_free(rep);
  /* nothing new: a BLOCK that times out answers nil */
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "XREADGROUP", "GROUP", "workers", "b", "BLOCK", "50",
                            "STREAMS", "jobs", ">", NULL), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_NIL);
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "XACK", "jobs", "workers", ids[0], NULL), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_INTEGER && rep->integer == 1);
  fc_resp_free(rep);
  /* a "died": b takes over what it left pending: [next, [[id, fields]...], [deleted ids]] */
  usleep(20000);
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "XAUTOCLAIM", "jobs", "workers", "b", "10", "0-0", NULL), ==, 0);
  FC_REQUIRE(rep && rep->type == FC_RESP_ARRAY && rep->n >= 2);
  FC_CHECK(!strcmp(str_at(rep, 0), "0-0"));
  FC_REQUIRE(rep->elem[1].n == 2);
  FC_CHECK(!strcmp(str_at(&rep->elem[1].elem[0], 0), ids[1]));
  FC_CHECK(!strcmp(str_at(&rep->elem[1].elem[1], 0), ids[2]));
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "XACK", "jobs", "workers", ids[1], ids[2], NULL), ==, 0);
  FC_CHECK(rep && rep->integer == 2);
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "XPENDING", "jobs", "workers", NULL), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_ARRAY && rep->n >= 1 && rep->elem[0].integer == 0);
  fc_resp_free(rep);
  fc_redis_destroy(r);
}

static void test_auth_select(void) {
  int p2 = fc_test_free_port();
  pid_t pid = start_server(p2, "s3cret pass");
  FC_REQUIRE(pid > 0);
  fc_redis *none = client("redis://127.0.0.1:%d", p2, 2000);
  fc_redis *wrong = client("redis://:nope@127.0.0.1:%d", p2, 2000);
  fc_redis *db2 = client("redis://:s3cret%%20pass@127.0.0.1:%d/2", p2, 2000);
  fc_redis *user = client("redis://default:s3cret%%20pass@127.0.0.1:%d", p2, 2000);
  fc_resp *rep = NULL;
  if (!none || !wrong || !db2 || !user) {
    fc_test_case_failed_ = 1;
    goto out;
  }
  int err = fc_redis_cmd(none, &rep, "PING", NULL);
  FC_CHECK(err == FC_EREMOTE && strstr(fc_error_detail(err), "NOAUTH"));
  err = fc_redis_connect(wrong);
  FC_CHECK(err == FC_EREMOTE && strstr(fc_error_detail(err), "WRONGPASS") && !fc_redis_connected(wrong));
  FC_CHECK_INT(fc_redis_cmd(db2, &rep, "SET", "where", "two", NULL), ==, 0);
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_cmd(user, &rep, "GET", "where", NULL), ==, 0); /* database 0 */
  FC_CHECK(rep && rep->type == FC_RESP_NIL);
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_cmd(user, &rep, "SELECT", "2", NULL), ==, 0);
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_cmd(user, &rep, "GET", "where", NULL), ==, 0);
  FC_CHECK(rep && rep->type == FC_RESP_BULK && !strcmp(rep->str, "two"));
  fc_resp_free(rep);
out:
  fc_redis_destroy(none);
  fc_redis_destroy(wrong);
  fc_redis_destroy(db2);
  fc_redis_destroy(user);
  stop_server(pid);
}

static void test_server_goes_away(void) {
  fc_redis *r = client("redis://127.0.0.1:%d/1", port, 2000);
  FC_REQUIRE(r);
  fc_resp *rep = NULL;
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "SET", "x", "1", NULL), ==, 0);
  fc_resp_free(rep);
  stop_server(server);
  server = -1;
  int err = fc_redis_cmd(r, &rep, "GET", "x", NULL);
  FC_CHECK(err == FC_EIO && !rep);
  FC_CHECK(strstr(fc_error_detail(err), "127.0.0.1") &&
           (strstr(fc_error_detail(err), "closed") || strstr(fc_error_detail(err), "lost")));
  FC_CHECK(!fc_redis_connected(r));
  err = fc_redis_cmd(r, &rep, "PING", NULL); /* nobody there: refused, said so */
  FC_CHECK(err == FC_EIO && strstr(fc_error_detail(err), "cannot connect"));
  server = start_server(port, NULL);
  FC_REQUIRE(server > 0);
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "PING", NULL), ==, 0); /* connects again, SELECTs 1 */
  FC_CHECK(rep && rep->type == FC_RESP_STRING);
  fc_resp_free(rep);
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "CLIENT", "INFO", NULL), ==, 0);
  FC_CHECK(rep && rep->str && strstr(rep->str, " db=1 "));
  fc_resp_free(rep);
  fc_redis_destroy(r);
}

static void test_silent_peer(void) {
  /* a socket that listens but never answers: the reply's deadline holds */
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  FC_REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 && listen(s, 4) == 0 &&
             getsockname(s, (struct sockaddr *)&a, &l) == 0);
  fc_redis *r = client("redis://127.0.0.1:%d", ntohs(a.sin_port), 200);
  fc_resp *rep = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int err = r ? fc_redis_cmd(r, &rep, "PING", NULL) : 0;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  FC_CHECK(err == FC_EIO && strstr(fc_error_detail(err), "timed out"));
  FC_CHECK(secs >= 0.15 && secs < 2.0);
  FC_CHECK(r && !fc_redis_connected(r));
  fc_redis_destroy(r);
  close(s);
}

int main(void) {
  if (!fc_test_have_redis()) return 1;
  snprintf(tmpdir, sizeof tmpdir, "%s/fc-redis-XXXXXX", g_get_tmp_dir());
  if (!g_mkdtemp(tmpdir)) return 1;
  port = fc_test_free_port();
  server = start_server(port, NULL);
  if (server <= 0) {
    fprintf(stderr, "FAIL: could not start redis-server\n");
    fc_test_rmtree(tmpdir);
    return 1;
  }
  FC_RUN(test_url);
  FC_RUN(test_ping_get_set);
  FC_RUN(test_streams);
  FC_RUN(test_auth_select);
  FC_RUN(test_server_goes_away);
  FC_RUN(test_silent_peer);
  stop_server(server);
  fc_test_rmtree(tmpdir);
  FC_TEST_EXIT();
}
