/* The video job store on Redis (jobs/vstore_redis.c) against a real redis-server that this
 * test starts (durable: appendonly, every write fsync'd): first the whole contract of
 * tests/test_vstore.c (its cases, included here and run against this server), then what only
 * a shared store has: a second consumer (another process's) taking over an item after
 * claim_idle_ms, and a touch that learns it lost its item; Redis killed (SIGKILL) between
 * submit and take and started again on the same folder, with nothing lost; the consumer group
 * and the scripts gone from Redis (made again); an item that keeps killing its workers failing
 * its job; and Redis down: FC_EIO, then work again once it is back. A machine without
 * redis-server fails this test, naming the package. */
int vstore_contract_main(void);
#define main vstore_contract_main
#include "test_vstore.c"
#undef main

#include "fc_redis_server.h"
#include "jobs/redis.h"

#include <ftw.h>

static char tmpdir[256];
static int port;
static pid_t server = -1;
static char url[64];

/* A store with its own prefix and, unlike open_store's, a consumer name given. */
static fc_vstore *open_named(const char *prefix, const char *consumer, int claim_idle_ms) {
  fc_vstore_params p = {.redis_url = url, .prefix = prefix, .consumer = consumer,
                        .claim_idle_ms = claim_idle_ms};
  int err;
  fc_vstore *s = fc_vstore_create(&p, &err);
  if (!s) fprintf(stderr, "store: %s\n", fc_error_detail(err));
  return s;
}

static void fresh_prefix(char *buf, size_t n) {
  snprintf(buf, n, "fcr:%u:%d:", g_random_int(), ++g_case);
}

static int redis_do(fc_resp **rep, const char *a, const char *b, const char *c, const char *d) {
  fc_redis_params p = {.url = url};
  int err = 0;
  fc_redis *r = fc_redis_create(&p, &err);
  if (!r) return err;
  err = fc_redis_cmd(r, rep, a, b, c, d, NULL);
  fc_redis_destroy(r);
  return err;
}

/* Worker a's item, touched from another thread of a's (a runner's keeper), stays a's; left
 * quiet, worker b (another process: another consumer) takes it over, a's touches then say it
 * was lost, and a's late report still counts the shard once. */
static void test_second_consumer(void) {
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  fc_vstore *a = open_named(prefix, "worker-a", 300), *b = open_named(prefix, "worker-b", 300);
  FC_REQUIRE(a && b);
  char id[40];
  FC_REQUIRE(submit(a, "o", 1, id) == 0);
  fc_vwork wa, wb;
  FC_REQUIRE(fc_vstore_take(a, 1000, &wa) == 0);
  FC_CHECK_INT(wa.attempt, ==, 1);
  /* a's process touches its item from another thread (a runner's keeper): that keeps it a's */
  int e2;
  fc_vstore *keeper = fc_vstore_clone(a, &e2);
  FC_REQUIRE(keeper);
  for (int i = 0; i < 3; i++) {
    g_usleep(200 * 1000);
    FC_CHECK_INT(fc_vstore_touch(keeper, &wa), ==, 0);
  }
  FC_CHECK_INT(fc_vstore_take(b, 100, &wb), ==, FC_EAGAIN); /* touched: not taken over */
  g_usleep(400 * 1000);
  FC_REQUIRE(fc_vstore_take(b, 1000, &wb) == 0);
  FC_CHECK(!strcmp(wb.entry, wa.entry));
  FC_CHECK_INT(wb.attempt, ==, 2);
  FC_CHECK_INT(fc_vstore_touch(b, &wb), ==, 0);
  int err = fc_vstore_touch(a, &wa);
  FC_CHECK(err == FC_ECANCELED && strstr(fc_error_detail(err), "taken over"));
  FC_CHECK_INT(fc_vstore_touch(keeper, &wa), ==, FC_ECANCELED);
  fc_vstore_destroy(keeper);
  FC_CHECK_INT(fc_vstore_shard_done(b, &wb), ==, 0);
  FC_CHECK_INT(fc_vstore_shard_done(a, &wa), ==, 0); /* late: counted once, no second join */
  fc_vwork join, x;
  FC_REQUIRE(fc_vstore_take(a, 1000, &join) == 0);
  FC_CHECK_INT(join.shard, ==, -1);
  FC_CHECK_INT(fc_vstore_take(b, 100, &x), ==, FC_EAGAIN);
  FC_CHECK_INT(fc_vstore_complete(a, &join, 25, 1.0), ==, 0);
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(b, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_COMPLETED);
  FC_CHECK_INT(g.shards_done, ==, 1);
  fc_vjob_clear(&g);
  fc_vstore_destroy(a);
  fc_vstore_destroy(b);
}

/* Redis dies (SIGKILL) right after a submit was answered, and comes back on the same folder: the
 * job and all its items are there, and the connections made before reconnect by themselves. */
static void test_restart_between_submit_and_take(void) {
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  fc_vstore *api = open_named(prefix, "api", 0), *w = open_named(prefix, "w", 0);
  FC_REQUIRE(api && w);
  char id[40];
  FC_REQUIRE(submit(api, "o", 3, id) == 0);
  fc_vwork first;
  FC_REQUIRE(fc_vstore_take(w, 1000, &first) == 0); /* w is connected, and holds an item */
  fc_test_redis_stop(server);
  server = -1;
  fc_vwork x;
  int err = fc_vstore_take(w, 100, &x);
  FC_CHECK(err == FC_EIO);
  fc_vjob g = {0};
  FC_CHECK_INT(fc_vstore_get(api, id, &g), ==, FC_EIO);
  server = fc_test_redis_start(tmpdir, port, NULL, 1);
  FC_REQUIRE(server > 0);
  FC_REQUIRE(fc_vstore_get(api, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_PROCESSING);
  FC_CHECK_INT(g.shards, ==, 3);
  fc_vjob_clear(&g);
  int seen = 1 << first.shard;
  for (int i = 0; i < 2; i++) {
    fc_vwork it;
    FC_REQUIRE(fc_vstore_take(w, 1000, &it) == 0);
    seen |= 1 << it.shard;
    FC_CHECK_INT(fc_vstore_shard_done(w, &it), ==, 0);
  }
  FC_CHECK_INT(seen, ==, 7);
  FC_CHECK_INT(fc_vstore_touch(w, &first), ==, 0); /* still ours after the restart */
  FC_CHECK_INT(fc_vstore_shard_done(w, &first), ==, 0);
  fc_vwork join;
  FC_REQUIRE(fc_vstore_take(w, 1000, &join) == 0);
  FC_CHECK_INT(join.shard, ==, -1);
  FC_CHECK_INT(fc_vstore_complete(w, &join, 75, 3.0), ==, 0);
  FC_REQUIRE(fc_vstore_get(api, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_COMPLETED);
  fc_vjob_clear(&g);
  fc_vstore_destroy(api);
  fc_vstore_destroy(w);
}

/* The group deleted and the script cache flushed behind the store's back: both made again. */
static void test_group_and_scripts_lost(void) {
  char prefix[64], stream[96];
  fresh_prefix(prefix, sizeof prefix);
  snprintf(stream, sizeof stream, "%svwork", prefix);
  fc_vstore *s = open_named(prefix, "w", 0);
  FC_REQUIRE(s);
  char id[40];
  FC_REQUIRE(submit(s, "o", 2, id) == 0);
  fc_resp *rep = NULL;
  FC_REQUIRE(redis_do(&rep, "XGROUP", "DESTROY", stream, "render") == 0);
  fc_resp_free(rep);
  FC_REQUIRE(redis_do(&rep, "SCRIPT", "FLUSH", NULL, NULL) == 0);
  fc_resp_free(rep);
  fc_vwork w[2];
  FC_REQUIRE(fc_vstore_take(s, 1000, &w[0]) == 0); /* the group again, from the stream's start */
  FC_REQUIRE(fc_vstore_take(s, 1000, &w[1]) == 0);
  FC_CHECK_INT((1 << w[0].shard) | (1 << w[1].shard), ==, 3);
  FC_CHECK_INT(fc_vstore_shard_done(s, &w[0]), ==, 0);
  FC_CHECK_INT(fc_vstore_shard_done(s, &w[1]), ==, 0);
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.shards_done, ==, 2);
  fc_vjob_clear(&g);
  fc_vstore_destroy(s);
}

/* An item whose workers keep going quiet (a shard that crashes them) fails its job in the end,
 * instead of being handed to every worker in turn forever. */
static void test_poison_item(void) {
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  fc_vstore *s = open_named(prefix, "w", 50);
  FC_REQUIRE(s);
  char id[40];
  FC_REQUIRE(submit(s, "o", 1, id) == 0);
  fc_vwork w;
  int takes = 0;
  while (fc_vstore_take(s, 300, &w) == 0 && takes < 20) {
    takes++;
    g_usleep(80 * 1000); /* "dies": never touches, never reports */
  }
  FC_CHECK_INT(takes, ==, 5);
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_FAILED);
  FC_CHECK(strstr(g.error, "never finished") != NULL);
  fc_vjob_clear(&g);
  int pending, queued;
  FC_CHECK_INT(fc_vstore_depth(s, &pending, &queued), ==, 0);
  FC_CHECK_INT(queued, ==, 0);
  fc_vstore_destroy(s);
}

/* A consumer gone for good (nothing pending, not seen for 40 claim times) leaves the group; one
 * with an item pending stays (its item is taken over first). */
static void test_dead_consumers_forgotten(void) {
  char prefix[64], stream[96];
  fresh_prefix(prefix, sizeof prefix);
  snprintf(stream, sizeof stream, "%svwork", prefix);
  fc_vstore *s = open_named(prefix, "alive", 25); /* forgotten after 1 s */
  FC_REQUIRE(s);
  fc_redis_params rp = {.url = url};
  int err = 0;
  fc_redis *r = fc_redis_create(&rp, &err);
  FC_REQUIRE(r);
  fc_resp *rep = NULL;
  FC_CHECK_INT(fc_redis_cmd(r, &rep, "XGROUP", "CREATECONSUMER", stream, "render", "ghost", NULL), ==, 0);
  fc_resp_free(rep);
  g_usleep(1100 * 1000);
  char id[40];
  FC_REQUIRE(submit(s, "o", 1, id) == 0);
  fc_vwork w; /* alive takes an item (a consumer exists once it has read one) */
  FC_CHECK_INT(fc_vstore_take(s, 1000, &w), ==, 0);
  FC_CHECK_INT(fc_vstore_shard_done(s, &w), ==, 0);
  FC_REQUIRE(fc_redis_cmd(r, &rep, "XINFO", "CONSUMERS", stream, "render", NULL) == 0);
  int ghost = 0, alive = 0;
  for (size_t i = 0; rep && i < rep->n; i++)
    for (size_t k = 0; k + 1 < rep->elem[i].n; k += 2)
      if (!strcmp(rep->elem[i].elem[k].str ? rep->elem[i].elem[k].str : "", "name")) {
        ghost += !strcmp(rep->elem[i].elem[k + 1].str, "ghost");
        alive += !strcmp(rep->elem[i].elem[k + 1].str, "alive");
      }
  fc_resp_free(rep);
  FC_CHECK_INT(ghost, ==, 0);
  FC_CHECK_INT(alive, ==, 1);
  fc_redis_destroy(r);
  fc_vstore_destroy(s);
}

/* Nobody listening: every call answers FC_EIO quickly (the API answers 503), nothing hangs; a
 * store can be made while Redis is down, and works once it is up. */
static void test_redis_down(void) {
  fc_test_redis_stop(server);
  server = -1;
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  fc_vstore *s = open_named(prefix, "w", 0);
  FC_REQUIRE(s);
  char id[40];
  gint64 t0 = g_get_monotonic_time();
  int err = submit(s, "o", 1, id);
  FC_CHECK(err == FC_EIO && strstr(fc_error_detail(err), "cannot connect"));
  fc_vwork w;
  FC_CHECK_INT(fc_vstore_take(s, 500, &w), ==, FC_EIO);
  FC_CHECK(g_get_monotonic_time() - t0 < 3 * G_USEC_PER_SEC);
  server = fc_test_redis_start(tmpdir, port, NULL, 1);
  FC_REQUIRE(server > 0);
  err = submit(s, "o", 1, id);
  if (err) fprintf(stderr, "submit: %s\n", fc_error_detail(err));
  FC_CHECK_INT(err, ==, 0);
  FC_CHECK_INT(fc_vstore_take(s, 1000, &w), ==, 0);
  FC_CHECK(!strcmp(w.job, id));
  fc_vstore_destroy(s);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f) {
  return remove(path);
}

int main(void) {
  if (!fc_test_have_redis()) return 1;
  snprintf(tmpdir, sizeof tmpdir, "%s/fc-vstore-redis-XXXXXX", g_get_tmp_dir());
  if (!g_mkdtemp(tmpdir)) return 1;
  port = fc_test_free_port();
  server = fc_test_redis_start(tmpdir, port, NULL, 1);
  if (server <= 0) {
    fprintf(stderr, "FAIL: could not start redis-server\n");
    nftw(tmpdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return 1;
  }
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  fprintf(stderr, "-- the contract (tests/test_vstore.c) on redis at %s\n", url);
  g_redis = url;
  run_all();
  fprintf(stderr, "-- redis only\n");
  FC_RUN(test_second_consumer);
  FC_RUN(test_restart_between_submit_and_take);
  FC_RUN(test_group_and_scripts_lost);
  FC_RUN(test_poison_item);
  FC_RUN(test_dead_consumers_forgotten);
  FC_RUN(test_redis_down);
  fc_test_redis_stop(server);
  nftw(tmpdir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
  FC_TEST_EXIT();
}
