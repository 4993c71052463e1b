/* The device scheduler on the CPU, with a slow fake backend.
 *
 * The fake device sleeps a·n + b ms per batch, records batch sizes and the order requests ran
 * in, can inject FC_ENOMEM (above a batch size, on the k-th call, always), reports a set memory
 * fraction, and has a gate: a batch blocks in run while the gate is closed, so a test can stock
 * the queue behind one "plug" request and then watch exactly how it is drained. Assertions are
 * on order and counts; timing bounds are loose (a loaded 2-core machine must pass). The
 * latency controller is also driven directly with synthetic batch times (exact, no clock). */
#include "facecast/error.h"
#include "sched/sched.h"
#include "fc_test.h"
#include "sched/internal.h"
#include "stream/lipsync_pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#define MS 1000000LL
#define MAX_LOG 8192

typedef struct fake_dev {
  int id;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  double a_ms, b_ms;  /* cost a·n + b */
  int oom_above;      /* ENOMEM when n > this (0: never) */
  int oom_call;       /* ENOMEM on this call (1-based; 0: never) */
  int oom_always;
  double mem_frac;    /* probe result; negative: the probe fails */
  int gate_closed, in_run, calls, ooms;
  int sizes[MAX_LOG], n_sizes; /* successful batches */
  int order[MAX_LOG], n_order; /* job ids in the order they ran */
} fake_dev;

typedef struct job {
  int id;
  int device;  /* where it ran */
  int done;    /* done callbacks seen */
  int status;
  int resubmit_rc;
  int64_t finish_ns, deadline_ns, submit_ns;
} job;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int n_done;

static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000 * (time_t)(ms / 1000)) * 1e6)};
  while (nanosleep(&ts, &ts)) {
  }
}

static void fake_init(fake_dev *f, int id, double a, double b) {
  memset(f, 0, sizeof *f);
  f->id = id;
  f->a_ms = a;
  f->b_ms = b;
  f->mem_frac = 0.1;
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
}

static void fake_fini(fake_dev *f) {
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
}

static int fake_run(void *user, fc_sched_req *const *reqs, int n) {
  fake_dev *f = user;
  pthread_mutex_lock(&f->mu);
  f->in_run = 1;
  pthread_cond_broadcast(&f->cv);
  while (f->gate_closed) pthread_cond_wait(&f->cv, &f->mu);
  int call = ++f->calls;
  int oom = f->oom_always || (f->oom_above && n > f->oom_above) || call == f->oom_call;
  double ms = f->a_ms * n + f->b_ms;
  pthread_mutex_unlock(&f->mu);
  sleep_ms(ms);
  pthread_mutex_lock(&f->mu);
  f->in_run = 0;
  if (oom) {
    f->ooms++;
  } else {
    if (f->n_sizes < MAX_LOG) f->sizes[f->n_sizes++] = n;
    for (int i = 0; i < n; i++) {
      job *j = reqs[i]->payload;
      j->device = f->id;
      if (f->n_order < MAX_LOG) f->order[f->n_order++] = j->id;
    }
  }
  pthread_mutex_unlock(&f->mu);
  return oom ? FC_ENOMEM : FC_OK;
}

static int fake_mem(void *user, double *frac) {
  fake_dev *f = user;
  pthread_mutex_lock(&f->mu);
  *frac = f->mem_frac;
  pthread_mutex_unlock(&f->mu);
  return *frac < 0 ? FC_EIO : FC_OK;
}

static void fake_set(fake_dev *f, int *field, int v) {
  pthread_mutex_lock(&f->mu);
  *field = v;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* Waits until a batch is blocked in the (closed) gate. */
static void fake_wait_in_run(fake_dev *f) {
  pthread_mutex_lock(&f->mu);
  while (!f->in_run) pthread_cond_wait(&f->cv, &f->mu);
  pthread_mutex_unlock(&f->mu);
}

static void on_done(void *user, fc_sched_req *req, int status) {
  job *j = req->payload;
  pthread_mutex_lock(&mu);
  j->done++;
  j->status = status;
  j->finish_ns = req->finish_ns;
  j->deadline_ns = req->deadline_ns;
  j->submit_ns = req->submit_ns;
  n_done++;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

/* Waits until n completions in all (since the last reset); 0 on timeout. */
static int wait_done(int n, double seconds) {
  int64_t end = fc_sched_now_ns() + (int64_t)(seconds * 1e9);
  pthread_mutex_lock(&mu);
  while (n_done < n && fc_sched_now_ns() < end) {
    pthread_mutex_unlock(&mu);
    sleep_ms(2);
    pthread_mutex_lock(&mu);
  }
  int ok = n_done >= n;
  pthread_mutex_unlock(&mu);
  return ok;
}

static void reset_done(void) {
  pthread_mutex_lock(&mu);
  n_done = 0;
  pthread_mutex_unlock(&mu);
}

static fc_sched *make_sched(fake_dev *f, int n_dev, fc_sched_params p) {
  fc_sched_device dev[8];
  for (int i = 0; i < n_dev; i++) dev[i] = (fc_sched_device){&f[i], fake_run, fake_mem};
  p.devices = dev;
  p.n_devices = n_dev;
  int err;
  fc_sched *s = fc_sched_create(&p, &err);
  if (!s) fprintf(stderr, "fc_sched_create: %s\n", fc_error_detail(err));
  reset_done();
  return s;
}

/* One fake device costing a·n + b ms per batch, and a scheduler on it. */
static fc_sched *one_device(fake_dev *f, double a, double b, fc_sched_params p) {
  fake_init(f, 0, a, b);
  return make_sched(f, 1, p);
}

static fc_sched_client *add_client(fc_sched *s, fc_sched_class cls, void (*done)(void *,
                                   fc_sched_req *, int), void *user, int max_queued) {
  int err;
  fc_sched_client_params cp = {.cls = cls, .done = done ? done : on_done, .user = user,
                               .max_queued = max_queued};
  fc_sched_client *c = fc_sched_client_add(s, &cp, &err);
  if (!c) fprintf(stderr, "fc_sched_client_add: %s\n", fc_error_detail(err));
  return c;
}

static void init_jobs(job *j, int n) {
  memset(j, 0, sizeof *j * (size_t)n);
  for (int i = 0; i < n; i++) j[i].id = i;
}

/* Every job completed exactly once with `status`. */
static int all_once(const job *j, int n, int status) {
  int bad = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < n; i++) bad += j[i].done != 1 || j[i].status != status;
  pthread_mutex_unlock(&mu);
  if (bad) fprintf(stderr, "  %d of %d jobs not completed exactly once with %d\n", bad, n, status);
  return bad == 0;
}

/* Submits job 0 alone and waits until its batch is blocked in the closed gate: what is
 * submitted next queues up behind it. */
static void plug(fake_dev *f, fc_sched_client *c, job *j0) {
  fake_set(f, &f->gate_closed, 1);
  FC_CHECK(fc_sched_submit(c, fc_sched_now_ns() + 1000 * MS, j0) == 0);
  fake_wait_in_run(f);
}

/* A gated rig: one fake device (0.1·n + 0.5 ms a batch), clients by class letter ('L' live,
 * 'B' bulk) with quotas, all completing through `done`, fresh jobs, and job 0 from the first
 * client blocked in the gate. */
typedef struct rig {
  fake_dev f;
  fc_sched *s;
  fc_sched_client *c[4];
  job j[64];
} rig;

static int rig_plugged(rig *r, fc_sched_params p, const char *classes, const int *quota,
                       void (*done)(void *, fc_sched_req *, int)) {
  if (!(r->s = one_device(&r->f, 0.1, 0.5, p))) return 0;
  for (int i = 0; classes[i] && i < 4; i++)
    if (!(r->c[i] = add_client(r->s, classes[i] == 'B' ? FC_SCHED_BULK : FC_SCHED_LIVE, done,
                               NULL, quota[i])))
      return 0;
  init_jobs(r->j, 64);
  plug(&r->f, r->c[0], &r->j[0]);
  return 1;
}

/* (1) Stocked behind a plug, requests run live before bulk, each earliest deadline first
 * (equal deadlines in submission order), in full batches. */
static void test_deadline_order(void) {
  static rig r;
  /* A long budget: the plug's time in the gate must not move the latency limit. */
  FC_REQUIRE(rig_plugged(&r, (fc_sched_params){.max_batch = 4, .budget_ms = 5000}, "LLB",
                         (const int[]){64, 64, 64}, NULL));
  job *j = r.j;
  fc_sched_client *a = r.c[0], *b = r.c[1], *bulk = r.c[2];
  int64_t base = fc_sched_now_ns() + 500 * MS;
  int64_t dl[51];
  /* Live jobs 1..40: deadlines a shuffled multiple of 1 ms, in pairs (equal deadlines). */
  for (int i = 1; i <= 40; i++) {
    int k = (i * 17) % 40; /* a permutation of 0..39 */
    dl[i] = base + (k / 2) * MS;
    FC_CHECK(fc_sched_submit(i % 2 ? a : b, dl[i], &j[i]) == 0);
  }
  /* Bulk jobs 41..50 with earlier deadlines than any live one still go after them. */
  for (int i = 41; i <= 50; i++) {
    dl[i] = base - (100 - i) * MS;
    FC_CHECK(fc_sched_submit(bulk, dl[i], &j[i]) == 0);
  }
  fake_set(&r.f, &r.f.gate_closed, 0);
  FC_REQUIRE(wait_done(51, 10));
  fc_sched_destroy(r.s);
  FC_CHECK(all_once(j, 51, 0));
  FC_REQUIRE(r.f.n_order == 51);
  FC_CHECK_INT(r.f.order[0], ==, 0);
  for (int i = 2; i <= 50; i++) {
    int p = r.f.order[i - 1], q = r.f.order[i];
    int same_class = (p <= 40) == (q <= 40);
    FC_CHECK(!(q <= 40 && p > 40));                           /* no live after a bulk one */
    FC_CHECK(!same_class || dl[p] < dl[q] || (dl[p] == dl[q] && p < q)); /* EDF, then FIFO */
  }
  /* After the plug: 10 full batches of live, then the bulk 4, 4, 2. */
  FC_REQUIRE(r.f.n_sizes == 14);
  for (int i = 1; i <= 12; i++) FC_CHECK_INT(r.f.sizes[i], ==, 4);
  FC_CHECK_INT(r.f.sizes[13], ==, 2);
  fake_fini(&r.f);
}

/* (2a) The controller alone, fed exact batch times a·n + b (+ a small deterministic jitter):
 * from the maximum and from 1 it settles at the largest size whose time fits the target, and
 * once settled never tries a larger one. */
static void converge(double a, double b, double jitter, int start_oom, int want) {
  const double target = 40;
  sched_ctl c;
  FC_REQUIRE(ctl_init(&c, 16, target) == 0);
  if (start_oom) { /* from 1: an OOM at 2, then the hold must run out before growing */
    ctl_oom(&c, 2);
    FC_CHECK_INT(ctl_limit(&c, 16), ==, 1);
  }
  uint32_t r = 12345;
  int above = 0;
  for (int i = 0; i < 2000; i++) {
    int n = ctl_limit(&c, 16);
    r = r * 1103515245u + 12345u;
    ctl_batch_done(&c, n, n, a * n + b + jitter * (r >> 16) / 65536.0);
    if (i == 100 && start_oom) FC_CHECK_INT(ctl_limit(&c, 16), ==, 1); /* held */
    above += i >= 1000 && n > want;
  }
  FC_CHECK_INT(ctl_limit(&c, 16), ==, want);
  FC_CHECK_INT(above, ==, 0);
  double p50, p95;
  ctl_window_pct(&c, &p50, &p95);
  if (a + b <= target) FC_CHECK(p95 <= target);
  /* One outlier at the settled size moves nothing (the p95 of 32 batches decides). */
  ctl_batch_done(&c, want, want, 10 * target);
  FC_CHECK_INT(ctl_limit(&c, 16), ==, want);
  ctl_free(&c);
}

static void test_controller(void) {
  converge(10, 5, 0, 0, 3);  /* 35 ms at 3, 45 at 4 */
  converge(10, 5, 0, 1, 3);
  converge(3, 4, 0, 0, 12);  /* 40 at 12 fits exactly */
  converge(2.5, 7, 2, 0, 12); /* 37..39 at 12, 39.5.. at 13 */
  converge(2.5, 7, 2, 1, 12);
  converge(1, 2, 0, 0, 16);  /* everything fits: the maximum */
  converge(1, 2, 0, 1, 16);
  converge(60, 0, 0, 0, 1);  /* nothing fits: still 1, never 0 */
  FC_CHECK_INT(ctl_mem_cap(16, -1), ==, 16);
  FC_CHECK_INT(ctl_mem_cap(16, 0.5), ==, 16);
  FC_CHECK_INT(ctl_mem_cap(16, 0.69), ==, 16);
  FC_CHECK_INT(ctl_mem_cap(16, 0.7), ==, 8);
  FC_CHECK_INT(ctl_mem_cap(16, 0.8), ==, 8);
  FC_CHECK_INT(ctl_mem_cap(16, 0.9), ==, 8);
  FC_CHECK_INT(ctl_mem_cap(16, 0.95), ==, 4);
  FC_CHECK_INT(ctl_mem_cap(2, 0.95), ==, 1);
}

/* A client that keeps its queue stocked: each completion submits again while `left` lasts. */
typedef struct refill {
  fc_sched_client *c;
  int left;
  int64_t ahead_ns; /* deadline = now + ahead */
  int completed, late;
  job j;
} refill;

static void refill_done(void *user, fc_sched_req *req, int status) {
  refill *r = user;
  pthread_mutex_lock(&mu);
  r->completed++;
  r->late += req->finish_ns > req->deadline_ns;
  int again = r->left > 0 && status == 0;
  if (again) r->left--;
  n_done++;
  pthread_mutex_unlock(&mu);
  if (again && fc_sched_submit(r->c, fc_sched_now_ns() + r->ahead_ns, &r->j) != 0) {
    pthread_mutex_lock(&mu);
    r->left = -1000000; /* marks the failure for the test */
    pthread_mutex_unlock(&mu);
  }
}

static void refill_start(refill *r, int stock) {
  for (int i = 0; i < stock; i++)
    FC_CHECK(fc_sched_submit(r->c, fc_sched_now_ns() + r->ahead_ns, &r->j) == 0);
}

/* Submits until refused; returns how many were taken. */
static int refill_flood(refill *r) {
  int n = 0;
  while (n < 100000 && fc_sched_submit(r->c, fc_sched_now_ns() + r->ahead_ns, &r->j) == 0) n++;
  return n;
}

/* (2b) Threads and a real clock: cost 50·n + 10 ms, budget 250 ms (target 200): the limit
 * comes down from 16 and settles at 3 (160 ms; 4 would take 210). Scheduling noise only adds
 * time: the 40 ms between 3's time and the target absorb most of it, and where a loaded
 * machine really makes batches of 3 too slow the limit rightly drops for a while; it never
 * rises past 3 except for a one-batch probe of 4. Exact convergence is (2a)'s job. */
static void test_adaptive_converges(void) {
  fake_dev f;
  fc_sched *s = one_device(&f, 50, 10, (fc_sched_params){.max_batch = 16, .budget_ms = 250});
  FC_REQUIRE(s);
  refill r = {.left = 75, .ahead_ns = 10000 * MS};
  FC_REQUIRE((r.c = add_client(s, FC_SCHED_LIVE, refill_done, &r, 64)));
  refill_start(&r, 24);
  FC_CHECK(wait_done(99, 20));
  fc_sched_stats st;
  FC_CHECK(fc_sched_stats_get(s, 0, &st) == 0);
  fc_sched_destroy(s);
  FC_CHECK(r.left == 0);
  int count[17] = {0}, tail = 20;
  FC_REQUIRE(f.n_sizes > tail + 2);
  for (int i = f.n_sizes - tail; i < f.n_sizes; i++) count[f.sizes[i]]++;
  FC_CHECK_INT(count[3], >=, tail / 3); /* all of them on a quiet machine */
  FC_CHECK_INT(count[4], <=, 2);
  FC_CHECK_INT(count[1] + count[2] + count[3] + count[4], ==, tail);
  FC_CHECK(st.limit >= 1 && st.limit <= 4);
  FC_CHECK(st.p50_ms <= 250);
  fprintf(stderr, "  converged: limit %d, p50 %.1f ms, p95 %.1f ms, %llu batches, mean %.2f\n",
          st.limit, st.p50_ms, st.p95_ms, (unsigned long long)st.batches, st.mean_batch);
  fake_fini(&f);
}

/* Stocks 64 jobs behind a plug at memory fraction frac: every batch after the plug has `want`
 * requests. */
static void mem_case(double frac, int want) {
  fake_dev f;
  fake_init(&f, 0, 0.05, 0.5);
  f.mem_frac = frac;
  fc_sched *s = make_sched(&f, 1, (fc_sched_params){.max_batch = 16, .budget_ms = 5000});
  FC_REQUIRE(s);
  fc_sched_client *c = add_client(s, FC_SCHED_LIVE, NULL, NULL, 128);
  static job j[65];
  init_jobs(j, 65);
  plug(&f, c, &j[0]);
  for (int i = 1; i <= 64; i++) FC_CHECK(fc_sched_submit(c, fc_sched_now_ns() + 1000 * MS, &j[i]) == 0);
  fake_set(&f, &f.gate_closed, 0);
  FC_REQUIRE(wait_done(65, 10));
  fc_sched_stats st;
  FC_CHECK(fc_sched_stats_get(s, 0, &st) == 0);
  fc_sched_destroy(s);
  FC_CHECK(all_once(j, 65, 0));
  FC_CHECK_INT(f.n_sizes, ==, 1 + 64 / want);
  for (int i = 1; i < f.n_sizes; i++) FC_CHECK_INT(f.sizes[i], ==, want);
  FC_CHECK_INT(st.limit, ==, want);
  FC_CHECK_NEAR(st.mem_frac, frac < 0 ? -1 : frac, 1e-9);
  fake_fini(&f);
}

/* (2c) Memory headroom: below 70 % the maximum, 70–90 % half, above 90 % a quarter; a failing
 * probe caps nothing. */
static void test_memory_caps(void) {
  mem_case(0.5, 16);
  mem_case(0.8, 8);
  mem_case(0.95, 4);
  mem_case(-1, 16);
}

/* Submits n jobs to c (deadlines 1 s ahead), waits for them, and returns the device stats. */
static fc_sched_stats run_jobs(fc_sched *s, fc_sched_client *c, job *j, int n) {
  fc_sched_stats st;
  init_jobs(j, n);
  for (int i = 0; i < n; i++) FC_CHECK(fc_sched_submit(c, fc_sched_now_ns() + 1000 * MS, &j[i]) == 0);
  FC_CHECK(wait_done(n, 15));
  FC_CHECK(fc_sched_stats_get(s, 0, &st) == 0);
  return st;
}

/* One OOM case: a device failing as configured, n jobs from one client; checks that each job
 * completed exactly once with `want` and returns the device's figures. */
static fc_sched_stats oom_case(int above, int call, int always, int n, int want) {
  static job j[200];
  fc_sched_stats st = {0};
  fake_dev f;
  fake_init(&f, 0, 0.05, 0.3);
  f.oom_above = above;
  f.oom_call = call;
  f.oom_always = always;
  fc_sched *s = make_sched(&f, 1, (fc_sched_params){.max_batch = 16});
  fc_sched_client *c = s ? add_client(s, FC_SCHED_LIVE, NULL, NULL, 256) : NULL;
  if (c) {
    st = run_jobs(s, c, j, n);
    FC_CHECK(all_once(j, n, want));
    FC_CHECK_INT(st.oom_retries, ==, f.ooms - (want ? (int)st.failed : 0));
    for (int i = 0; i < f.n_sizes; i++) FC_CHECK_INT(f.sizes[i], <=, above ? above : 16);
  }
  FC_CHECK(c != NULL);
  fc_sched_destroy(s);
  fake_fini(&f);
  return st;
}

/* (3) Out of device memory: batches above 5 fail; one failure on the 3rd call; every call
 * fails. Nothing is lost, nothing hangs. */
static void test_oom(void) {
  fc_sched_stats st = oom_case(5, 0, 0, 200, 0);
  FC_CHECK_INT(st.oom_retries, >=, 1);
  FC_CHECK_INT(st.frames, ==, 200);
  FC_CHECK_INT(st.failed, ==, 0);
  FC_CHECK_INT(st.limit, <=, 5);
  fprintf(stderr, "  OOM above 5: %llu retries, %llu batches, limit %d\n",
          (unsigned long long)st.oom_retries, (unsigned long long)st.batches, st.limit);
  st = oom_case(0, 3, 0, 100, 0);
  FC_CHECK_INT(st.oom_retries, ==, 1);
  st = oom_case(0, 0, 1, 40, FC_ENOMEM);
  FC_CHECK_INT(st.failed, ==, 40);
  FC_CHECK_INT(st.frames, ==, 0);
  FC_CHECK_INT(st.oom_retries, <=, 4); /* 16 → 8 → 4 → 2 → 1 at most */
  FC_CHECK_INT(st.limit, ==, 1);
}

/* A session: a thread submitting one frame per 40 ms tick, deadline `ahead` after submission. */
typedef struct session {
  fc_sched *s;
  fc_sched_client *c;
  int frames, phase_ms, ahead_ms;
  int submit_errors;
  job j[64];
  /* Filled by done (under mu). */
  int completed, late;
  double lat_sum_ms, lat_max_ms;
} session;

static void session_done(void *user, fc_sched_req *req, int status) {
  session *ss = user;
  double lat = (double)(req->finish_ns - req->submit_ns) / 1e6;
  pthread_mutex_lock(&mu);
  ss->completed += status == 0;
  ss->late += req->finish_ns > req->deadline_ns;
  ss->lat_sum_ms += lat;
  if (lat > ss->lat_max_ms) ss->lat_max_ms = lat;
  n_done++;
  pthread_mutex_unlock(&mu);
}

static void *session_main(void *arg) {
  session *ss = arg;
  int64_t t0 = fc_sched_now_ns() + ss->phase_ms * MS;
  for (int k = 0; k < ss->frames; k++) {
    int64_t t = t0 + k * 40 * MS;
    struct timespec ts = {(time_t)(t / 1000000000LL), (long)(t % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL)) {
    }
    if (fc_sched_submit(ss->c, fc_sched_now_ns() + ss->ahead_ms * MS, &ss->j[k % 64]))
      ss->submit_errors++;
  }
  return NULL;
}

/* Waits until the sessions completed `want` frames in all; 0 on timeout. */
static int wait_sessions(const session *ss, int n, int want, double seconds) {
  int64_t end = fc_sched_now_ns() + (int64_t)(seconds * 1e9);
  for (;;) {
    int got = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n; i++) got += ss[i].completed;
    pthread_mutex_unlock(&mu);
    if (got >= want) return 1;
    if (fc_sched_now_ns() > end) return 0;
    sleep_ms(2);
  }
}

static void sessions_run(session *ss, int n) {
  pthread_t th[16];
  for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, session_main, &ss[i]);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static int sessions_add(fc_sched *s, session *ss, int n, int frames, int ahead_ms) {
  for (int i = 0; i < n; i++) {
    ss[i] = (session){.s = s, .frames = frames, .phase_ms = i * 40 / n,
                       .ahead_ms = ahead_ms};
    if (!(ss[i].c = add_client(s, FC_SCHED_LIVE, session_done, &ss[i], 0))) return 0;
  }
  return 1;
}

/* (4) Six sessions at 25 fps (independent threads and phases) on a device that can take them
 * (about 60 % busy): all frames served, the mean latency of the best- and worst-served session
 * within 30 ms of each other, and lateness, if a loaded machine causes any, spread alike. When
 * the machine overloads the device, latencies grow for everyone: then the bounds are a quarter
 * of the worst. */
static void test_fairness(void) {
  fake_dev f;
  fc_sched *s = one_device(&f, 2, 4, (fc_sched_params){.max_batch = 4});
  FC_REQUIRE(s);
  static session ss[6];
  FC_REQUIRE(sessions_add(s, ss, 6, 40, 200));
  sessions_run(ss, 6);
  FC_CHECK(wait_done(240, 10));
  fc_sched_destroy(s);
  double lo = 1e9, hi = 0;
  int late_lo = 40, late_hi = 0;
  for (int i = 0; i < 6; i++) {
    FC_CHECK_INT(ss[i].submit_errors, ==, 0);
    FC_CHECK_INT(ss[i].completed, ==, 40);
    double mean = ss[i].lat_sum_ms / (ss[i].completed ? ss[i].completed : 1);
    lo = mean < lo ? mean : lo;
    hi = mean > hi ? mean : hi;
    late_lo = ss[i].late < late_lo ? ss[i].late : late_lo;
    late_hi = ss[i].late > late_hi ? ss[i].late : late_hi;
  }
  fprintf(stderr, "  mean latency per session: %.1f .. %.1f ms, late frames %d .. %d\n", lo, hi,
          late_lo, late_hi);
  FC_CHECK(hi - lo <= 30 || hi - lo <= hi / 4);
  FC_CHECK(late_hi - late_lo <= 4 || late_hi - late_lo <= late_hi / 4);
  fake_fini(&f);
}

/* (5) A bulk flood (holding every bulk slot, deadlines earlier than the sessions') does not
 * make four live sessions late (300 ms deadlines; a frame takes about 25 ms), and still
 * progresses; then, on a device saturated by live work,
 * ageing still seats bulk requests. */
static void test_no_starvation(void) {
  fake_dev f;
  fc_sched *s = one_device(&f, 1, 4, (fc_sched_params){.max_batch = 8, .queue_cap = 64});
  FC_REQUIRE(s);
  static session ss[4];
  FC_REQUIRE(sessions_add(s, ss, 4, 25, 300));
  refill flood = {.left = 1000000, .ahead_ns = 0};
  FC_REQUIRE((flood.c = add_client(s, FC_SCHED_BULK, refill_done, &flood, 1000)));
  FC_CHECK_INT(refill_flood(&flood), >=, 32); /* the bulk half of 64 slots, and refills */
  sessions_run(ss, 4);
  FC_CHECK(wait_sessions(ss, 4, 100, 10));
  pthread_mutex_lock(&mu);
  int live = 0, bulk = flood.completed, late_live = 0;
  for (int i = 0; i < 4; i++) {
    live += ss[i].completed;
    late_live += ss[i].late;
    FC_CHECK_INT(ss[i].submit_errors, ==, 0);
  }
  pthread_mutex_unlock(&mu);
  fc_sched_destroy(s);
  fprintf(stderr, "  flood: %d live frames (%d late), %d bulk frames meanwhile\n", live, late_live,
          bulk);
  FC_CHECK_INT(live, ==, 100);
  FC_CHECK_INT(late_live, ==, 0);
  FC_CHECK_INT(bulk, >=, 100);
  fake_fini(&f);

  /* Live work alone fills every batch; bulk waits 100 ms, then gets a seat per batch. */
  FC_REQUIRE((s = one_device(&f, 1, 4, (fc_sched_params){.max_batch = 4, .bulk_wait_ms = 100})));
  refill busy = {.left = 300, .ahead_ns = 0};
  FC_REQUIRE((busy.c = add_client(s, FC_SCHED_LIVE, refill_done, &busy, 64)));
  fc_sched_client *b = add_client(s, FC_SCHED_BULK, NULL, NULL, 0);
  static job j[5];
  init_jobs(j, 5);
  refill_start(&busy, 16);
  for (int i = 0; i < 5; i++) FC_CHECK(fc_sched_submit(b, 0, &j[i]) == 0);
  FC_CHECK(wait_done(321, 15));
  fc_sched_stats st;
  FC_CHECK(fc_sched_stats_get(s, 0, &st) == 0);
  fc_sched_destroy(s);
  FC_CHECK(all_once(j, 5, 0));
  FC_CHECK_INT(st.bulk_aged, >=, 1);
  pthread_mutex_lock(&mu);
  FC_CHECK_INT(busy.completed, ==, 316);
  pthread_mutex_unlock(&mu);
  fake_fini(&f);
}

/* (6) Placement: live clients spread over three devices by load, bulk counts a quarter, a
 * removal makes room, requests run on their client's device, silent clients cost nothing. */
static void test_placement(void) {
  fake_dev f[3];
  for (int i = 0; i < 3; i++) fake_init(&f[i], i, 0.1, 0.5);
  fc_sched *s = make_sched(f, 3, (fc_sched_params){0});
  FC_REQUIRE(s);
  FC_CHECK_INT(fc_sched_device_count(s), ==, 3);
  fc_sched_client *c[9];
  for (int i = 0; i < 6; i++) {
    FC_REQUIRE((c[i] = add_client(s, FC_SCHED_LIVE, NULL, NULL, 0)));
    FC_CHECK_INT(fc_sched_client_device(c[i]), ==, i % 3);
  }
  FC_REQUIRE((c[6] = add_client(s, FC_SCHED_BULK, NULL, NULL, 0)));
  FC_CHECK_INT(fc_sched_client_device(c[6]), ==, 0); /* all at 2: the lowest index */
  FC_REQUIRE((c[7] = add_client(s, FC_SCHED_LIVE, NULL, NULL, 0)));
  FC_CHECK_INT(fc_sched_client_device(c[7]), ==, 1); /* 0 carries 2.25 */
  FC_CHECK(fc_sched_client_remove(c[2]) == 0);
  FC_CHECK(fc_sched_client_remove(c[5]) == 0);
  FC_REQUIRE((c[8] = add_client(s, FC_SCHED_LIVE, NULL, NULL, 0)));
  FC_CHECK_INT(fc_sched_client_device(c[8]), ==, 2);
  c[2] = c[5] = NULL;
  sleep_ms(50);
  fc_sched_stats st[3];
  for (int d = 0; d < 3; d++) {
    FC_CHECK(fc_sched_stats_get(s, d, &st[d]) == 0);
    FC_CHECK_INT(st[d].wakeups, ==, 0); /* nine registered clients, none speaking */
    FC_CHECK_INT(st[d].batches, ==, 0);
  }
  FC_CHECK_NEAR(st[0].load, 2.25, 1e-9);
  FC_CHECK_NEAR(st[1].load, 3, 1e-9);
  FC_CHECK_NEAR(st[2].load, 1, 1e-9);
  FC_CHECK_INT(st[0].bulk_clients, ==, 1);
  FC_CHECK_INT(st[1].live_clients, ==, 3);
  static job j[9];
  init_jobs(j, 9);
  int n = 0;
  for (int i = 0; i < 9; i++)
    if (c[i]) {
      FC_CHECK(fc_sched_submit(c[i], fc_sched_now_ns() + 100 * MS, &j[i]) == 0);
      n++;
    }
  FC_CHECK(wait_done(n, 10));
  for (int i = 0; i < 9; i++)
    if (c[i]) FC_CHECK_INT(j[i].device, ==, fc_sched_client_device(c[i]));
  fc_sched_stats_get(s, 0, &st[0]);
  FC_CHECK_INT(st[0].wakeups, >=, 1);
  fc_sched_destroy(s);
  for (int i = 0; i < 3; i++) fake_fini(&f[i]);
}

/* A done that calls back into the scheduler: submits to again_to and removes remove_me when
 * they are set (the first is refused during shutdown, the second always). */
static fc_sched_client *again_to, *remove_me;
static int remove_rc = 1;
static void reentrant_done(void *user, fc_sched_req *req, int status) {
  job *j = req->payload;
  if (again_to) j->resubmit_rc = fc_sched_submit(again_to, 0, j);
  if (remove_me) remove_rc = fc_sched_client_remove(remove_me);
  on_done(user, req, status);
}

/* A blocking call on a helper thread: removes c, or destroys s when c is NULL. */
typedef struct closer {
  fc_sched *s;
  fc_sched_client *c;
  pthread_t th;
} closer;

static void *closer_main(void *arg) {
  closer *k = arg;
  if (k->c)
    fc_sched_client_remove(k->c);
  else
    fc_sched_destroy(k->s);
  return NULL;
}

/* (7) Shutdown with requests queued behind a running batch: the running one completes, each
 * queued one is cancelled exactly once, and submits from those callbacks are refused. */
static void test_shutdown(void) {
  static rig r;
  FC_REQUIRE(rig_plugged(&r, (fc_sched_params){.max_batch = 4}, "LB", (const int[]){64, 64},
                         reentrant_done));
  job *j = r.j;
  fc_sched *s = r.s;
  fake_dev *f = &r.f;
  fc_sched_client *a = r.c[0], *b = r.c[1];
  again_to = a;
  for (int i = 1; i <= 30; i++)
    FC_CHECK(fc_sched_submit(i % 3 ? a : b, fc_sched_now_ns() + 1000 * MS, &j[i]) == 0);
  closer k = {.s = s};
  pthread_create(&k.th, NULL, closer_main, &k);
  sleep_ms(50); /* destroy is waiting for the running batch */
  fake_set(f, &f->gate_closed, 0);
  pthread_join(k.th, NULL);
  again_to = NULL;
  FC_CHECK(all_once(j, 1, 0));
  FC_CHECK(all_once(j + 1, 30, FC_ECANCELED));
  for (int i = 0; i <= 30; i++) FC_CHECK_INT(j[i].resubmit_rc, ==, FC_ECANCELED);
  FC_CHECK_INT(f->n_sizes, ==, 1);
  fake_fini(f);
}

/* Removing a client cancels its queued requests at once, lets its running one finish, and
 * returns only then; other clients are untouched. Bounds: a client's max_queued, the bulk half
 * of the slots, the pool; refused submits get no callback. */
static void test_remove_and_bounds(void) {
  static rig r;
  FC_REQUIRE(rig_plugged(&r, (fc_sched_params){.max_batch = 4, .queue_cap = 8}, "LBL",
                         (const int[]){3, 100, 100}, NULL));
  job *j = r.j;
  fc_sched *s = r.s;
  fake_dev *f = &r.f;
  fc_sched_client *a = r.c[0], *b = r.c[1], *l = r.c[2];
  int64_t dl = fc_sched_now_ns() + 1000 * MS;
  FC_CHECK(fc_sched_submit(a, dl, &j[1]) == 0);
  FC_CHECK(fc_sched_submit(a, dl, &j[2]) == 0);
  FC_CHECK(fc_sched_submit(a, dl, &j[11]) == FC_EAGAIN); /* a holds 3 */
  for (int i = 3; i < 7; i++) FC_CHECK(fc_sched_submit(b, dl, &j[i]) == 0);
  FC_CHECK(fc_sched_submit(b, dl, &j[11]) == FC_EAGAIN); /* bulk holds half of 8 */
  FC_CHECK(fc_sched_submit(l, dl, &j[7]) == 0);
  FC_CHECK(fc_sched_submit(l, dl, &j[11]) == FC_EAGAIN); /* all 8 slots used */
  closer k = {.c = a};
  pthread_create(&k.th, NULL, closer_main, &k);
  FC_CHECK(wait_done(2, 10)); /* j1, j2 cancelled while the plug still runs */
  FC_CHECK(all_once(j + 1, 2, FC_ECANCELED));
  FC_CHECK_INT(j[0].done, ==, 0);
  fake_set(f, &f->gate_closed, 0);
  pthread_join(k.th, NULL);
  FC_CHECK(all_once(j, 1, 0)); /* done before remove returned */
  FC_CHECK(wait_done(8, 10));
  FC_CHECK(all_once(j + 3, 5, 0));
  FC_CHECK_INT(j[11].done, ==, 0);
  fc_sched_stats st;
  FC_CHECK(fc_sched_stats_get(s, 0, &st) == 0);
  FC_CHECK_INT(st.rejected, ==, 3);
  FC_CHECK_INT(st.canceled, ==, 2);
  FC_CHECK_INT(st.live_clients, ==, 1);
  /* Removing from a callback is refused (it would wait for its own batch). */
  remove_me = l;
  fc_sched_client *re = add_client(s, FC_SCHED_LIVE, reentrant_done, NULL, 0);
  FC_CHECK(fc_sched_submit(re, 0, &j[8]) == 0);
  FC_CHECK(wait_done(9, 10));
  remove_me = NULL;
  FC_CHECK_INT(remove_rc, ==, FC_EINVAL);
  FC_CHECK(fc_sched_client_remove(re) == 0);
  fc_sched_destroy(s);
  fake_fini(f);
}

static void test_bad_params(void) {
  int err;
  fc_sched_params p = {0};
  FC_CHECK(!fc_sched_create(&p, &err) && err == FC_EINVAL);
  fc_sched_device d = {NULL, NULL, NULL};
  p = (fc_sched_params){.devices = &d, .n_devices = 1};
  FC_CHECK(!fc_sched_create(&p, &err) && err == FC_EINVAL);
  d.run = fake_run;
  p.margin = 1.5;
  FC_CHECK(!fc_sched_create(&p, &err) && err == FC_EINVAL);
  FC_CHECK(fc_sched_submit(NULL, 0, NULL) == FC_EINVAL);
  FC_CHECK(fc_sched_client_remove(NULL) == 0);
  fc_sched_destroy(NULL);
}

/* ---- scheduled lip-sync (src/stream/lipsync_pool.h), on two parametric backends ---------- */

#define POOL_CLIENTS 4
#define POOL_CALLS 12
#define POOL_FRAMES 8

typedef struct pool_client {
  fc_lipsync_client *c;
  const fc_avatar *av;
  size_t cap;
  const uint8_t *want; /* the reference patches: rgb then alpha, cap * 4 bytes per frame */
  const fc_rect *want_place;
  int dues;            /* first_due calls */
  int err, mismatches;
} pool_client;

static int64_t count_due(void *user) {
  ((pool_client *)user)->dues++;
  return fc_sched_now_ns() + 40 * MS;
}

static fc_lipsync_req pool_req(const fc_avatar *av, int k) {
  return (fc_lipsync_req){.avatar = av, .mouth = {0.1f * (k % 9), 0.05f * (k % 5), 0.2f * (k % 3)}};
}

/* POOL_CALLS calls of POOL_FRAMES frames, each patch compared with the direct backend's. */
static void *pool_client_main(void *arg) {
  pool_client *pc = arg;
  uint8_t *mem = malloc(pc->cap * 4 * POOL_FRAMES);
  fc_lipsync_req rq[POOL_FRAMES];
  fc_patch pt[POOL_FRAMES];
  for (int call = 0; mem && call < POOL_CALLS && !pc->err; call++) {
    memset(mem, 0xAA, pc->cap * 4 * POOL_FRAMES);
    for (int i = 0; i < POOL_FRAMES; i++) {
      rq[i] = pool_req(pc->av, call * POOL_FRAMES + i);
      pt[i] = (fc_patch){.rgb = mem + pc->cap * 4 * i, .alpha = mem + pc->cap * (4 * i + 3)};
    }
    if ((pc->err = fc_lipsync_client_run(pc->c, rq, pt, POOL_FRAMES))) break;
    for (int i = 0; i < POOL_FRAMES; i++) {
      const int k = (call * POOL_FRAMES + i) % (POOL_CALLS * POOL_FRAMES);
      const fc_rect r = pt[i].place, w = pc->want_place[k];
      const size_t px = (size_t)r.w * r.h;
      if (r.x != w.x || r.y != w.y || r.w != w.w || r.h != w.h || pt[i].i420 ||
          memcmp(pt[i].rgb, pc->want + pc->cap * 4 * k, px * 3) ||
          memcmp(pt[i].alpha, pc->want + pc->cap * (4 * k + 3), px))
        pc->mismatches++;
    }
  }
  if (!mem) pc->err = FC_ENOMEM;
  free(mem);
  return NULL;
}

static void test_lipsync_pool(void) {
  int err = 0;
  fc_avatar_params ap = fc_avatar_params_default();
  ap.width = ap.height = 256;
  fc_avatar *av = fc_avatar_create_from_image(fc_avatar_default_path(), &ap, &err);
  fc_lipsync *ls[2] = {fc_lipsync_create(NULL, &err), fc_lipsync_create(NULL, &err)};
  FC_REQUIRE(av && ls[0] && ls[1]);
  const size_t cap = fc_lipsync_patch_capacity(ls[0], av);
  const int nref = POOL_CALLS * POOL_FRAMES;
  uint8_t *want = malloc(cap * 4 * nref);
  fc_rect *place = calloc(nref, sizeof *place);
  FC_REQUIRE(want && place);
  /* The reference: the backend called directly, one frame at a time. */
  for (int k = 0; k < nref; k++) {
    fc_lipsync_req rq = pool_req(av, k);
    fc_patch pt = {.rgb = want + cap * 4 * k, .alpha = want + cap * (4 * k + 3)};
    FC_REQUIRE(fc_lipsync_run(ls[0], &rq, &pt, 1) == 0);
    place[k] = pt.place;
  }

  /* Bad arguments: one line each, nothing started. */
  fc_lipsync_pool_params bad = {.backends = ls, .n_backends = 0};
  FC_CHECK(fc_lipsync_pool_create(&bad, &err) == NULL && err == FC_EINVAL);
  FC_CHECK(fc_lipsync_client_add(NULL, &(fc_lipsync_client_params){0}, &err) == NULL &&
           err == FC_EINVAL);

  fc_lipsync_pool_params pp = {.backends = ls, .n_backends = 2, .max_batch = 32, .gather_ms = 2};
  fc_lipsync_pool *pool = fc_lipsync_pool_create(&pp, &err);
  FC_REQUIRE(pool);
  FC_CHECK_INT(fc_sched_device_count(fc_lipsync_pool_sched(pool)), ==, 2);

  /* Three live clients and a bulk one, each on its own thread: every patch is the backend's
   * own, whichever batch and device it ran in; clients are spread over both devices. */
  pool_client pc[POOL_CLIENTS];
  pthread_t th[POOL_CLIENTS];
  int on[2] = {0, 0};
  for (int i = 0; i < POOL_CLIENTS; i++) {
    pc[i] = (pool_client){.av = av, .cap = cap, .want = want, .want_place = place};
    fc_lipsync_client_params cp = {.cls = i < 3 ? FC_SCHED_LIVE : FC_SCHED_BULK,
                                   .first_due = i < 3 ? count_due : NULL, .user = &pc[i]};
    pc[i].c = fc_lipsync_client_add(pool, &cp, &err);
    FC_REQUIRE(pc[i].c);
    on[fc_lipsync_client_device(pc[i].c)]++;
  }
  FC_CHECK(on[0] > 0 && on[1] > 0);
  for (int i = 0; i < POOL_CLIENTS; i++) pthread_create(&th[i], NULL, pool_client_main, &pc[i]);
  for (int i = 0; i < POOL_CLIENTS; i++) pthread_join(th[i], NULL);
  /* A device counts a batch's frames after their done callbacks have woken the callers: the
   * figures settle a moment after the last call returns. */
  uint64_t frames = 0, batches = 0, failed = 0;
  for (int tries = 0; tries < 100; tries++) {
    frames = batches = failed = 0;
    for (int k = 0; k < 2; k++) {
      fc_sched_stats st;
      FC_REQUIRE(fc_sched_stats_get(fc_lipsync_pool_sched(pool), k, &st) == 0);
      frames += st.frames, batches += st.batches, failed += st.failed;
    }
    if (frames >= (uint64_t)POOL_CLIENTS * POOL_CALLS * POOL_FRAMES) break;
    sleep_ms(10);
  }
  FC_CHECK_INT(failed, ==, 0);
  for (int i = 0; i < POOL_CLIENTS; i++) {
    FC_CHECK_INT(pc[i].err, ==, 0);
    FC_CHECK_INT(pc[i].mismatches, ==, 0);
    FC_CHECK_INT(pc[i].dues, ==, i < 3 ? POOL_CALLS : 0); /* once per call; bulk has none */
  }
  FC_CHECK_INT(frames, ==, (uint64_t)POOL_CLIENTS * POOL_CALLS * POOL_FRAMES);
  fprintf(stderr, "  pool: %llu frames in %llu batches on 2 devices\n", (unsigned long long)frames,
          (unsigned long long)batches);

  /* Errors: a call of 0 or too many frames is refused before anything is queued; a frame
   * the backend refuses fails its call with the backend's detail; the client still works. */
  fc_lipsync_client *c = pc[0].c;
  uint8_t *mem = malloc(cap * 4 * 17);
  FC_REQUIRE(mem);
  fc_lipsync_req rq[17];
  fc_patch pt[17];
  for (int i = 0; i < 17; i++) {
    rq[i] = pool_req(av, i);
    pt[i] = (fc_patch){.rgb = mem + cap * 4 * i, .alpha = mem + cap * (4 * i + 3)};
  }
  FC_CHECK_INT(fc_lipsync_client_run(c, rq, pt, 0), ==, FC_EINVAL);
  FC_CHECK_INT(fc_lipsync_client_run(c, rq, pt, 17), ==, FC_EINVAL);
  rq[2].avatar = NULL;
  FC_CHECK_INT(fc_lipsync_client_run(c, rq, pt, 4), ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(FC_EINVAL), "without an avatar") != NULL);
  rq[2].avatar = av;
  FC_CHECK_INT(fc_lipsync_client_run(c, rq, pt, 4), ==, 0);
  FC_CHECK(memcmp(pt[3].rgb, want + cap * 4 * 3, (size_t)pt[3].place.w * pt[3].place.h * 3) == 0);
  /* As a stream's run hook: the same call. */
  FC_CHECK_INT(fc_lipsync_pool_hook(c, rq, pt, NULL, 2), ==, 0);
  free(mem);

  for (int i = 0; i < POOL_CLIENTS; i++) fc_lipsync_client_remove(pc[i].c);
  fc_lipsync_client_remove(NULL);
  fc_lipsync_pool_destroy(pool);

  /* More bulk clients than the bulk half of a device's places (the scheduler keeps the other
   * half for live frames): BULK_CLIENTS × POOL_FRAMES frames in flight against 128 places
   * on one slow device (batches of 1). A bulk call waits for room; none fails, every patch
   * is still the backend's own (a render's slots on a busy GPU found the bulk half full). */
  enum { BULK_CLIENTS = 24 };
  fc_lipsync_pool_params one = {.backends = ls, .n_backends = 1, .max_batch = 1, .gather_ms = -1};
  FC_REQUIRE((pool = fc_lipsync_pool_create(&one, &err)));
  pool_client bc[BULK_CLIENTS];
  pthread_t bth[BULK_CLIENTS];
  for (int i = 0; i < BULK_CLIENTS; i++) {
    bc[i] = (pool_client){.av = av, .cap = cap, .want = want, .want_place = place};
    fc_lipsync_client_params cp = {.cls = FC_SCHED_BULK};
    FC_REQUIRE((bc[i].c = fc_lipsync_client_add(pool, &cp, &err)));
  }
  for (int i = 0; i < BULK_CLIENTS; i++) pthread_create(&bth[i], NULL, pool_client_main, &bc[i]);
  for (int i = 0; i < BULK_CLIENTS; i++) pthread_join(bth[i], NULL);
  fc_sched_stats bst;
  FC_REQUIRE(fc_sched_stats_get(fc_lipsync_pool_sched(pool), 0, &bst) == 0);
  int failed_calls = 0, bad_patches = 0;
  for (int i = 0; i < BULK_CLIENTS; i++) {
    failed_calls += bc[i].err != 0;
    bad_patches += bc[i].mismatches;
    fc_lipsync_client_remove(bc[i].c);
  }
  FC_CHECK_INT(failed_calls, ==, 0);
  FC_CHECK_INT(bad_patches, ==, 0);
  fprintf(stderr, "  bulk: %d clients, %llu submissions refused for room and retried\n",
          BULK_CLIENTS, (unsigned long long)bst.rejected);
  fc_lipsync_pool_destroy(pool);
  fc_lipsync_destroy(ls[0]);
  fc_lipsync_destroy(ls[1]);
  fc_avatar_destroy(av);
  free(want);
  free(place);
}

int main(void) {
  FC_RUN(test_bad_params);
  FC_RUN(test_deadline_order);
  FC_RUN(test_controller);
  FC_RUN(test_adaptive_converges);
  FC_RUN(test_memory_caps);
  FC_RUN(test_oom);
  FC_RUN(test_fairness);
  FC_RUN(test_no_starvation);
  FC_RUN(test_placement);
  FC_RUN(test_shutdown);
  FC_RUN(test_remove_and_bounds);
  FC_RUN(test_lipsync_pool);
  FC_TEST_EXIT();
}
