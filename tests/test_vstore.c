/* The video job store's contract (src/jobs/vstore.h), checked against any store: the local one
 * always, and a Redis one too when $FC_VSTORE_REDIS_URL names a server (the redis store's own
 * test sets it on the redis-server it starts). Each case gets a fresh store (for Redis, a key
 * prefix of its own), so the cases say nothing about each other. */
#include "jobs/vstore.h"

#include "facecast/error.h"
#include "fc_test.h"

#include <glib.h>
#include <stdio.h>
#include <string.h>

static const char *g_redis; /* NULL: the local store */
static int g_case;

static fc_vstore *open_store(int claim_idle_ms, int retention_s, int max_jobs) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "fctest:%d:%u:%d:", (int)getpid(), g_random_int(), ++g_case);
  fc_vstore_params p = {.redis_url = g_redis, .prefix = prefix, .claim_idle_ms = claim_idle_ms,
                        .retention_s = retention_s, .max_jobs = max_jobs};
  int err;
  fc_vstore *s = fc_vstore_create(&p, &err);
  if (!s) fprintf(stderr, "store: %s\n", fc_error_detail(err));
  return s;
}

/* A job of `shards` shards for owner (the store keeps spec and plan as opaque JSON). */
static fc_vjob job_of(const char *owner, int shards) {
  fc_vjob j = {0};
  g_strlcpy(j.owner, owner, sizeof j.owner);
  g_strlcpy(j.request_id, "req-1.a:b", sizeof j.request_id);
  j.shards = shards;
  j.spec_json = (char *)"{\"script\":\"Hello there.\"}";
  j.plan_json = (char *)"{\"shards\":[]}";
  return j;
}

static int submit(fc_vstore *s, const char *owner, int shards, char id[40]) {
  fc_vjob j = job_of(owner, shards);
  char existing[40];
  int err = fc_vstore_submit(s, &j, NULL, NULL, existing);
  if (!err) g_strlcpy(id, j.id, 40);
  return err;
}

static void test_submit_get(void) {
  fc_vstore *s = open_store(0, 0, 0);
  FC_REQUIRE(s);
  fc_vjob j = job_of("alice", 3);
  char existing[40] = "";
  FC_CHECK_INT(fc_vstore_submit(s, &j, NULL, NULL, existing), ==, 0);
  FC_CHECK(fc_vjob_id_valid(j.id));
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, j.id, &g) == 0);
  FC_CHECK(!strcmp(g.id, j.id));
  FC_CHECK(!strcmp(g.owner, "alice"));
  FC_CHECK(!strcmp(g.request_id, "req-1.a:b"));
  FC_CHECK_INT(g.status, ==, FC_VJOB_PENDING);
  FC_CHECK(!strcmp(fc_vjob_status_name(g.status), "pending"));
  FC_CHECK_INT(g.shards, ==, 3);
  FC_CHECK_INT(g.shards_done, ==, 0);
  FC_CHECK_INT(g.progress, ==, 0);
  FC_CHECK(g.created_ms > 1600000000000LL);
  FC_CHECK_INT(g.started_ms, ==, 0);
  FC_CHECK_INT(g.finished_ms, ==, 0);
  FC_CHECK(g.spec_json && !strcmp(g.spec_json, j.spec_json));
  FC_CHECK(g.plan_json && !strcmp(g.plan_json, j.plan_json));
  fc_vjob_clear(&g);
  /* a caller's own id (uploads already under it) is kept; a second job with it is refused */
  fc_vjob k = job_of("alice", 1);
  fc_vjob_new_id(k.id);
  char want[40];
  g_strlcpy(want, k.id, sizeof want);
  FC_CHECK_INT(fc_vstore_submit(s, &k, NULL, NULL, existing), ==, 0);
  FC_CHECK(!strcmp(k.id, want));
  fc_vjob k2 = job_of("alice", 1);
  g_strlcpy(k2.id, want, sizeof k2.id);
  FC_CHECK(fc_vstore_submit(s, &k2, NULL, NULL, existing) < 0);
  /* ids of the wrong shape, unknown ids, a job without shards */
  FC_CHECK_INT(fc_vstore_get(s, "vid_000000000000000000000000", &g), ==, FC_ENOTFOUND);
  FC_CHECK_INT(fc_vstore_get(s, "../../etc/passwd", &g), ==, FC_ENOTFOUND);
  FC_CHECK_INT(fc_vstore_get(s, "VID_ABCDEF", &g), ==, FC_ENOTFOUND);
  fc_vjob none = job_of("alice", 0);
  FC_CHECK_INT(fc_vstore_submit(s, &none, NULL, NULL, existing), ==, FC_EINVAL);
  int pending, queued;
  FC_CHECK_INT(fc_vstore_depth(s, &pending, &queued), ==, 0);
  FC_CHECK_INT(pending, ==, 2);
  FC_CHECK_INT(queued, ==, 4);
  fc_vstore_destroy(s);
}

static void test_list_paging(void) {
  fc_vstore *s = open_store(0, 0, 0);
  FC_REQUIRE(s);
  char a[3][40], b[2][40];
  for (int i = 0; i < 3; i++) {
    FC_REQUIRE(submit(s, "a", 1, a[i]) == 0);
    if (i < 2) FC_REQUIRE(submit(s, "b", 1, b[i]) == 0);
    g_usleep(2000); /* distinct creation times, so "newest" is not a tie */
  }
  fc_vjob out[8];
  int n = 2, more = -1;
  FC_REQUIRE(fc_vstore_list(s, "a", NULL, out, &n, &more) == 0);
  FC_CHECK_INT(n, ==, 2);
  FC_CHECK_INT(more, ==, 1);
  FC_CHECK(!strcmp(out[0].id, a[2]));
  FC_CHECK(!strcmp(out[1].id, a[1]));
  char next[40];
  g_strlcpy(next, out[1].id, sizeof next);
  for (int i = 0; i < n; i++) fc_vjob_clear(&out[i]);
  n = 2;
  FC_REQUIRE(fc_vstore_list(s, "a", next, out, &n, &more) == 0);
  FC_CHECK_INT(n, ==, 1);
  FC_CHECK_INT(more, ==, 0);
  FC_CHECK(n == 1 && !strcmp(out[0].id, a[0]));
  for (int i = 0; i < n; i++) fc_vjob_clear(&out[i]);
  /* everyone's: 5, newest first; exactly a page's worth says no more */
  n = 5;
  FC_REQUIRE(fc_vstore_list(s, NULL, NULL, out, &n, &more) == 0);
  FC_CHECK_INT(n, ==, 5);
  FC_CHECK_INT(more, ==, 0);
  FC_CHECK(n == 5 && !strcmp(out[0].id, a[2]) && !strcmp(out[4].id, a[0]));
  for (int i = 0; i + 1 < n; i++) FC_CHECK(out[i].created_ms >= out[i + 1].created_ms);
  for (int i = 0; i < n; i++) fc_vjob_clear(&out[i]);
  /* another owner's job is no cursor for this one; an empty owner has none */
  n = 2;
  FC_CHECK(fc_vstore_list(s, "a", b[0], out, &n, &more) < 0);
  n = 2;
  FC_REQUIRE(fc_vstore_list(s, "c", NULL, out, &n, &more) == 0);
  FC_CHECK_INT(n, ==, 0);
  FC_CHECK_INT(more, ==, 0);
  fc_vstore_destroy(s);
}

static void test_idempotency(void) {
  fc_vstore *s = open_store(0, 0, 0);
  FC_REQUIRE(s);
  const char *h1 = "1111111111111111111111111111111111111111111111111111111111111111";
  const char *h2 = "2222222222222222222222222222222222222222222222222222222222222222";
  fc_vjob j = job_of("a", 2);
  char existing[40] = "";
  FC_REQUIRE(fc_vstore_submit(s, &j, "key-1", h1, existing) == 0);
  fc_vjob again = job_of("a", 2);
  FC_CHECK_INT(fc_vstore_submit(s, &again, "key-1", h1, existing), ==, FC_EEXIST);
  FC_CHECK(!strcmp(existing, j.id));
  fc_vjob other = job_of("a", 2);
  FC_CHECK_INT(fc_vstore_submit(s, &other, "key-1", h2, existing), ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(FC_EINVAL), "different body") != NULL);
  /* keys are per owner: b's key-1 is b's own job */
  fc_vjob theirs = job_of("b", 2);
  FC_CHECK_INT(fc_vstore_submit(s, &theirs, "key-1", h2, existing), ==, 0);
  FC_CHECK(strcmp(theirs.id, j.id) != 0);
  /* one job each, nothing else queued by the repeats */
  int pending, queued;
  FC_CHECK_INT(fc_vstore_depth(s, &pending, &queued), ==, 0);
  FC_CHECK_INT(pending, ==, 2);
  FC_CHECK_INT(queued, ==, 4);
  fc_vstore_destroy(s);
}

static void test_take_to_complete(void) {
  fc_vstore *s = open_store(0, 0, 0);
  FC_REQUIRE(s);
  char id[40];
  FC_REQUIRE(submit(s, "a", 3, id) == 0);
  fc_vwork w[3];
  int seen = 0;
  for (int i = 0; i < 3; i++) {
    FC_REQUIRE(fc_vstore_take(s, 1000, &w[i]) == 0);
    FC_CHECK(!strcmp(w[i].job, id));
    FC_CHECK(w[i].shard >= 0 && w[i].shard < 3);
    FC_CHECK_INT(w[i].attempt, ==, 1);
    seen |= 1 << w[i].shard;
  }
  FC_CHECK_INT(seen, ==, 7);
  fc_vwork x;
  FC_CHECK_INT(fc_vstore_take(s, 50, &x), ==, FC_EAGAIN);
  FC_CHECK_INT(fc_vstore_touch(s, &w[0]), ==, 0);
  FC_CHECK_INT(fc_vstore_progress(s, id, w[0].shard, 50, 100), ==, 0);
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_PROCESSING);
  FC_CHECK(g.started_ms >= g.created_ms);
  FC_CHECK(g.progress > 0 && g.progress < 50);
  fc_vjob_clear(&g);
  FC_CHECK_INT(fc_vstore_shard_done(s, &w[0]), ==, 0);
  FC_CHECK_INT(fc_vstore_shard_done(s, &w[1]), ==, 0);
  FC_CHECK_INT(fc_vstore_shard_done(s, &w[1]), ==, 0); /* reported twice: counts once */
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.shards_done, ==, 2);
  fc_vjob_clear(&g);
  FC_CHECK_INT(fc_vstore_take(s, 50, &x), ==, FC_EAGAIN); /* no join before the last shard */
  FC_CHECK_INT(fc_vstore_shard_done(s, &w[2]), ==, 0);
  FC_CHECK_INT(fc_vstore_shard_done(s, &w[2]), ==, 0);
  fc_vwork join;
  FC_REQUIRE(fc_vstore_take(s, 1000, &join) == 0);
  FC_CHECK_INT(join.shard, ==, -1);
  FC_CHECK(!strcmp(join.job, id));
  FC_CHECK_INT(fc_vstore_take(s, 50, &x), ==, FC_EAGAIN); /* the join was queued once */
  FC_CHECK_INT(fc_vstore_complete(s, &join, 250, 10.0), ==, 0);
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_COMPLETED);
  FC_CHECK_INT(g.progress, ==, 100);
  FC_CHECK_INT(g.frames, ==, 250);
  FC_CHECK_NEAR(g.seconds, 10.0, 1e-9);
  FC_CHECK_INT(g.shards_done, ==, 3);
  FC_CHECK(g.finished_ms >= g.started_ms);
  FC_CHECK_INT(g.expires_ms, ==, g.finished_ms + 86400LL * 1000);
  fc_vjob_clear(&g);
  int pending, queued;
  FC_CHECK_INT(fc_vstore_depth(s, &pending, &queued), ==, 0);
  FC_CHECK_INT(pending, ==, 0);
  FC_CHECK_INT(queued, ==, 0);
  FC_CHECK_INT(fc_vstore_set_webhook(s, id, "[{\"status\":200}]"), ==, 0);
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK(g.webhook_json && !strcmp(g.webhook_json, "[{\"status\":200}]"));
  fc_vjob_clear(&g);
  fc_vstore_destroy(s);
}

/* Several runners finishing the shards of one job at once queue its join exactly once. */
typedef struct racer {
  fc_vstore *s;
  int shards_done, joins;
} racer;

static gpointer race(gpointer p) {
  racer *r = p;
  fc_vwork w;
  while (fc_vstore_take(r->s, 300, &w) == 0) {
    if (w.shard >= 0) {
      if (fc_vstore_shard_done(r->s, &w) == 0) r->shards_done++;
    } else {
      r->joins++;
      fc_vstore_complete(r->s, &w, 1, 0.04);
    }
  }
  return NULL;
}

static void test_concurrent_shards(void) {
  fc_vstore *s = open_store(0, 0, 0);
  FC_REQUIRE(s);
  char id[40];
  FC_REQUIRE(submit(s, "a", 16, id) == 0);
  racer r[4] = {{0}};
  GThread *t[4];
  int err;
  for (int i = 0; i < 4; i++) {
    r[i].s = fc_vstore_clone(s, &err);
    FC_REQUIRE(r[i].s);
    t[i] = g_thread_new("racer", race, &r[i]);
  }
  int shards = 0, joins = 0;
  for (int i = 0; i < 4; i++) {
    g_thread_join(t[i]);
    shards += r[i].shards_done, joins += r[i].joins;
    fc_vstore_destroy(r[i].s);
  }
  FC_CHECK_INT(shards, ==, 16);
  FC_CHECK_INT(joins, ==, 1);
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_COMPLETED);
  fc_vjob_clear(&g);
  fc_vstore_destroy(s);
}

/* An item nobody touches is taken over; one that is touched is not. */
static void test_take_over(void) {
  fc_vstore *s = open_store(400, 0, 0);
  FC_REQUIRE(s);
  char id[40];
  FC_REQUIRE(submit(s, "a", 2, id) == 0);
  fc_vwork quiet, busy, x;
  FC_REQUIRE(fc_vstore_take(s, 1000, &quiet) == 0);
  FC_REQUIRE(fc_vstore_take(s, 1000, &busy) == 0);
  for (int i = 0; i < 4; i++) {
    g_usleep(200 * 1000);
    FC_CHECK_INT(fc_vstore_touch(s, &busy), ==, 0);
  }
  FC_REQUIRE(fc_vstore_take(s, 1000, &x) == 0); /* quiet for 800 ms: taken over */
  FC_CHECK_INT(x.shard, ==, quiet.shard);
  FC_CHECK_INT(x.attempt, ==, 2);
  FC_CHECK_INT(fc_vstore_take(s, 100, &x), ==, FC_EAGAIN); /* busy was touched */
  FC_CHECK_INT(fc_vstore_shard_done(s, &busy), ==, 0);
  FC_CHECK_INT(fc_vstore_shard_done(s, &x), ==, 0);
  FC_CHECK_INT(fc_vstore_shard_done(s, &quiet), ==, 0); /* the first taker finishes late too */
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.shards_done, ==, 2);
  fc_vjob_clear(&g);
  fc_vwork join;
  FC_REQUIRE(fc_vstore_take(s, 1000, &join) == 0);
  FC_CHECK_INT(join.shard, ==, -1);
  FC_CHECK_INT(fc_vstore_take(s, 100, &x), ==, FC_EAGAIN);
  fc_vstore_destroy(s);
}

static void test_fail(void) {
  fc_vstore *s = open_store(0, 0, 0);
  FC_REQUIRE(s);
  char id[40];
  FC_REQUIRE(submit(s, "a", 3, id) == 0);
  fc_vwork w, other, x;
  FC_REQUIRE(fc_vstore_take(s, 1000, &w) == 0);
  FC_REQUIRE(fc_vstore_take(s, 1000, &other) == 0);
  FC_CHECK_INT(fc_vstore_fail(s, &w, "shard 0: speech synthesis failed"), ==, 0);
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_FAILED);
  FC_CHECK(strstr(g.error, "speech synthesis failed") != NULL);
  FC_CHECK(g.finished_ms > 0 && g.expires_ms > g.finished_ms);
  fc_vjob_clear(&g);
  /* the job's other items: the queued one is dropped, the running one told to stop */
  FC_CHECK_INT(fc_vstore_take(s, 100, &x), ==, FC_EAGAIN);
  FC_CHECK_INT(fc_vstore_touch(s, &other), ==, FC_ECANCELED);
  FC_CHECK_INT(fc_vstore_shard_done(s, &other), ==, FC_ECANCELED);
  int pending, queued;
  FC_CHECK_INT(fc_vstore_depth(s, &pending, &queued), ==, 0);
  FC_CHECK_INT(pending, ==, 0);
  fc_vstore_destroy(s);
}

static void test_cancel_delete(void) {
  fc_vstore *s = open_store(0, 0, 0);
  FC_REQUIRE(s);
  char id[40], done_id[40];
  FC_REQUIRE(submit(s, "a", 2, id) == 0);
  fc_vwork w, x;
  FC_REQUIRE(fc_vstore_take(s, 1000, &w) == 0);
  FC_CHECK_INT(fc_vstore_delete(s, id), ==, 0);
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, id, &g) == 0);
  FC_CHECK_INT(g.status, ==, FC_VJOB_CANCELED);
  FC_CHECK(g.error[0] != 0);
  fc_vjob_clear(&g);
  FC_CHECK_INT(fc_vstore_touch(s, &w), ==, FC_ECANCELED);
  FC_CHECK_INT(fc_vstore_take(s, 100, &x), ==, FC_EAGAIN); /* its other shard: dropped */
  FC_CHECK_INT(fc_vstore_shard_done(s, &w), ==, FC_ECANCELED);
  FC_CHECK_INT(fc_vstore_delete(s, id), ==, 0); /* finished (canceled): removed */
  FC_CHECK_INT(fc_vstore_get(s, id, &g), ==, FC_ENOTFOUND);
  FC_CHECK_INT(fc_vstore_delete(s, id), ==, FC_ENOTFOUND);
  /* a completed job is removed by one delete */
  FC_REQUIRE(submit(s, "a", 1, done_id) == 0);
  FC_REQUIRE(fc_vstore_take(s, 1000, &w) == 0);
  FC_REQUIRE(fc_vstore_shard_done(s, &w) == 0);
  FC_REQUIRE(fc_vstore_take(s, 1000, &w) == 0);
  FC_REQUIRE(fc_vstore_complete(s, &w, 25, 1.0) == 0);
  FC_CHECK_INT(fc_vstore_delete(s, done_id), ==, 0);
  FC_CHECK_INT(fc_vstore_get(s, done_id, &g), ==, FC_ENOTFOUND);
  int n = 4, more;
  fc_vjob out[4];
  FC_CHECK_INT(fc_vstore_list(s, NULL, NULL, out, &n, &more), ==, 0);
  FC_CHECK_INT(n, ==, 0);
  fc_vstore_destroy(s);
}

static void count_drop(void *user, const char *id) {
  GPtrArray *a = user;
  g_ptr_array_add(a, g_strdup(id));
}

static void test_expire(void) {
  fc_vstore *s = open_store(0, 1, 0);
  FC_REQUIRE(s);
  const char *h = "3333333333333333333333333333333333333333333333333333333333333333";
  fc_vjob j = job_of("a", 1);
  char existing[40], live[40];
  FC_REQUIRE(fc_vstore_submit(s, &j, "k", h, existing) == 0);
  FC_REQUIRE(submit(s, "a", 1, live) == 0);
  fc_vwork w;
  FC_REQUIRE(fc_vstore_take(s, 1000, &w) == 0);
  FC_REQUIRE(!strcmp(w.job, j.id));
  FC_REQUIRE(fc_vstore_fail(s, &w, "no") == 0);
  fc_vjob g = {0};
  FC_REQUIRE(fc_vstore_get(s, j.id, &g) == 0);
  int64_t at = g.expires_ms;
  FC_CHECK_INT(at, ==, g.finished_ms + 1000);
  fc_vjob_clear(&g);
  GPtrArray *dropped = g_ptr_array_new_with_free_func(g_free);
  FC_CHECK_INT(fc_vstore_expire(s, at - 1, count_drop, dropped), ==, 0);
  FC_CHECK_INT(dropped->len, ==, 0);
  /* long after: the finished job goes (and its files with the callback); the live one stays */
  FC_CHECK_INT(fc_vstore_expire(s, at + 3600 * 1000, count_drop, dropped), ==, 1);
  FC_CHECK(dropped->len == 1 && !strcmp(dropped->pdata[0], j.id));
  FC_CHECK_INT(fc_vstore_get(s, j.id, &g), ==, FC_ENOTFOUND);
  FC_CHECK_INT(fc_vstore_get(s, live, &g), ==, 0);
  fc_vjob_clear(&g);
  /* the expired job's idempotency key is free again */
  fc_vjob again = job_of("a", 1);
  FC_CHECK_INT(fc_vstore_submit(s, &again, "k", h, existing), ==, 0);
  FC_CHECK(strcmp(again.id, j.id) != 0);
  g_ptr_array_free(dropped, TRUE);
  fc_vstore_destroy(s);
}

static void test_max_jobs(void) {
  fc_vstore *s = open_store(0, 0, 2);
  FC_REQUIRE(s);
  char id[40];
  FC_CHECK_INT(submit(s, "a", 1, id), ==, 0);
  FC_CHECK_INT(submit(s, "a", 1, id), ==, 0);
  FC_CHECK_INT(submit(s, "a", 1, id), ==, FC_EBUSY);
  FC_CHECK_INT(fc_vstore_delete(s, id), ==, 0); /* canceled: no longer unfinished */
  FC_CHECK_INT(submit(s, "a", 1, id), ==, 0);
  fc_vstore_destroy(s);
}

static void run_all(void) {
  FC_RUN(test_submit_get);
  FC_RUN(test_list_paging);
  FC_RUN(test_idempotency);
  FC_RUN(test_take_to_complete);
  FC_RUN(test_concurrent_shards);
  FC_RUN(test_take_over);
  FC_RUN(test_fail);
  FC_RUN(test_cancel_delete);
  FC_RUN(test_expire);
  FC_RUN(test_max_jobs);
}

int main(void) {
  fprintf(stderr, "-- local store\n");
  run_all();
  const char *url = getenv("FC_VSTORE_REDIS_URL");
  if (url && *url) {
    fprintf(stderr, "-- redis store at %s\n", url);
    g_redis = url;
    run_all();
  }
  return fc_test_failed_ ? 1 : 0;
}
