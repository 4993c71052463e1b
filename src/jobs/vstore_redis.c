/* The video job store on Redis (vstore.h): job state that every API node and worker sees, and
 * the work of every job's shards on one Stream read through one consumer group.
 *
 * Keys (P = the prefix, "facecast:" by default; one standalone Redis, not a cluster — the
 * scripts build key names from the prefix):
 *   P vjob:ID            hash: the job (fields as fc_vjob; spec, plan, webhook; idem, join)
 *   P vjobs              sorted set of job ids in submission order (P vseq counts them)
 *   P vjobs:owner:OWNER  the same, one owner's
 *   P vactive            set of unfinished job ids (the pending gauge)
 *   P vexpire            sorted set of finished job ids by expires_ms (retention)
 *   P videm:N:OWNER:KEY  "ID SHA256" of the job an Idempotency-Key made (N: the owner's length,
 *                        so no owner/key pair reads as another)
 *   P vdone:ID           set of the shard numbers done; P vprog:ID hash shard → ‰ rendered
 *   P vwork              the Stream of work items {job, shard}; group "render"
 *
 * Why Lua: every change that touches more than one key (submit with its idempotency check, a
 * shard done and the join queued once, completion, cancel, removal) is one script, so it is
 * atomic against other clients and, with appendonly, against a crash of Redis itself: the AOF
 * holds a script's effects whole or not at all. Scripts are sent as EVALSHA and again as EVAL
 * when Redis answers NOSCRIPT (after a restart its script cache is empty).
 *
 * Why items are XDEL'd once acknowledged: the stream then holds only work not yet done, so its
 * length is the queue depth, and a consumer group recreated at "0" (after the group was lost)
 * sees exactly the outstanding work again.
 *
 * Each handle (fc_vstore_clone) has its own connection; all of a process's handles are one
 * consumer (host-pid, or the name given), because a runner touches its slots' items from a
 * thread of its own (jobs/vrun.h): touch keeps an item only while this consumer holds it, and
 * says FC_ECANCELED once another process has taken it over. */
#include "jobs/vstore_internal.h"

#include "facecast/error.h"
#include "jobs/redis.h"
#include "jobs/vstore_redis_lua.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GROUP FC_VSTORE_REDIS_GROUP
/* An item delivered this many times without being done fails its job: a shard that kills its
 * workers must not take down every worker in turn forever. */
#define MAX_ATTEMPTS 5
/* One XREADGROUP BLOCK at most this long, so idle items are looked for between waits. */
#define BLOCK_SLICE_MS 2000
#define IO_TIMEOUT_MS 10000
/* A consumer with nothing pending and not seen for this many claim times (15 s: 10 min) is a
 * process gone for good (a live worker reads every 2 s at most): it is removed from the group,
 * so restarts and crashes do not pile names up there. Looked for every 4 claim times (1 min at
 * most). */
#define FORGET_CLAIMS 40

typedef struct rstore {
  fc_vstore base;
  fc_redis *r;
  char *url, *prefix, *consumer, *stream;
  int claim_idle_ms, retention_s, max_jobs;
  int group_ok; /* the group was made (or found) on this connection's server */
  gint64 next_forget_us; /* monotonic: when to look for dead consumers again */
} rstore;

/* --- talking to Redis --- */

static int is_remote(int err, const char *what) {
  return err == FC_EREMOTE && strstr(fc_error_detail(err), what) != NULL;
}

/* Redis refused a command: FC_EREMOTE, its text said to be the job store's. */
static int remote_error(void) {
  char why[400];
  g_strlcpy(why, fc_error_detail(FC_EREMOTE), sizeof why); /* the detail is rewritten below */
  return fc_error_set(FC_EREMOTE, "video jobs on Redis: %s", why);
}

/* Redis answers LOADING while it reads its data back after a start: a few seconds at most for
 * a job store, so the call waits for it (a worker thread's, never the main loop's) rather than
 * failing every caller around a restart. */
#define LOADING_WAIT_MS 5000

static int raw_command(rstore *s, int argc, const char *const *argv, const size_t *lens,
                       fc_resp **rep) {
  gint64 until = g_get_monotonic_time() + LOADING_WAIT_MS * 1000LL;
  for (;;) {
    int err = fc_redis_command(s->r, argc, argv, lens, rep);
    if (!is_remote(err, "LOADING")) return err;
    if (g_get_monotonic_time() >= until)
      return fc_error_set(FC_EIO, "video jobs on Redis: still loading its data after %d s",
                          LOADING_WAIT_MS / 1000);
    g_usleep(50 * 1000);
  }
}

/* The consumer group, made unless it is there ("0": any work already on the stream is its). */
static int ensure_group(rstore *s) {
  fc_resp *rep = NULL;
  const char *argv[] = {"XGROUP", "CREATE", s->stream, GROUP, "0", "MKSTREAM"};
  int err = raw_command(s, G_N_ELEMENTS(argv), argv, NULL, &rep);
  fc_resp_free(rep);
  if (err == 0 || is_remote(err, "BUSYGROUP")) {
    s->group_ok = 1;
    return 0;
  }
  return err;
}

/* One command (argv, lens as fc_redis_command); when Redis says the group is missing (it lost
 * its data, or someone deleted the stream), the group is made again and the command resent. A
 * dropped connection means the server may have restarted: the group is checked before the
 * next command. */
static int command(rstore *s, int argc, const char *const *argv, const size_t *lens,
                   fc_resp **rep) {
  if (!s->group_ok) {
    int err = ensure_group(s);
    if (err) return err;
  }
  int err = raw_command(s, argc, argv, lens, rep);
  if (is_remote(err, "NOGROUP")) {
    s->group_ok = 0;
    if ((err = ensure_group(s)) == 0) err = raw_command(s, argc, argv, lens, rep);
  }
  if (err == FC_EIO || err == FC_EFORMAT) s->group_ok = 0;
  return err;
}

#define MAX_ARGS 16

/* Runs script which with args (text, NUL-terminated list after the prefix). */
static int eval(rstore *s, int which, fc_resp **rep, int nargs, const char *const *args) {
  const char *argv[MAX_ARGS + 4];
  int argc = 0;
  argv[argc++] = "EVALSHA";
  argv[argc++] = fc_vstore_redis_lua_sha[which];
  argv[argc++] = "0";
  argv[argc++] = s->prefix;
  for (int i = 0; i < nargs && i < MAX_ARGS; i++) argv[argc++] = args[i];
  int err = command(s, argc, argv, NULL, rep);
  if (is_remote(err, "NOSCRIPT")) {
    argv[0] = "EVAL";
    argv[1] = fc_vstore_redis_lua[which];
    err = command(s, argc, argv, NULL, rep);
  }
  return err == FC_EREMOTE ? remote_error() : err;
}

static const char *rstr(const fc_resp *r) {
  return r && (r->type == FC_RESP_BULK || r->type == FC_RESP_STRING) && r->str ? r->str : NULL;
}

static int bad_reply(const char *what) {
  return fc_error_set(FC_EFORMAT, "video jobs on Redis: unexpected reply to %s", what);
}

static int64_t now_wall_ms(void) { return g_get_real_time() / 1000; }

/* --- the job hash --- */

static int status_of(const char *name) {
  static const char *const names[] = {"pending", "processing", "completed", "failed", "canceled"};
  for (int i = 0; i < 5; i++)
    if (name && !strcmp(name, names[i])) return i;
  return FC_VJOB_FAILED;
}

/* HGETALL's answer (pairs in an array, or a RESP3 map) into *j. */
int fc_vstore_redis_read_job(const fc_resp *rep, fc_vjob *j) {
  memset(j, 0, sizeof *j);
  if (!rep || (rep->type != FC_RESP_ARRAY && rep->type != FC_RESP_MAP) || rep->n % 2)
    return bad_reply("HGETALL");
  if (rep->n == 0) return FC_ENOTFOUND;
  for (size_t i = 0; i + 1 < rep->n; i += 2) {
    const char *k = rstr(&rep->elem[i]), *v = rstr(&rep->elem[i + 1]);
    if (!k || !v) continue;
    if (!strcmp(k, "id")) g_strlcpy(j->id, v, sizeof j->id);
    else if (!strcmp(k, "owner")) g_strlcpy(j->owner, v, sizeof j->owner);
    else if (!strcmp(k, "request_id")) g_strlcpy(j->request_id, v, sizeof j->request_id);
    else if (!strcmp(k, "status")) j->status = status_of(v);
    else if (!strcmp(k, "progress")) j->progress = atoi(v);
    else if (!strcmp(k, "error")) g_strlcpy(j->error, v, sizeof j->error);
    else if (!strcmp(k, "shards")) j->shards = atoi(v);
    else if (!strcmp(k, "shards_done")) j->shards_done = atoi(v);
    else if (!strcmp(k, "created_ms")) j->created_ms = g_ascii_strtoll(v, NULL, 10);
    else if (!strcmp(k, "started_ms")) j->started_ms = g_ascii_strtoll(v, NULL, 10);
    else if (!strcmp(k, "finished_ms")) j->finished_ms = g_ascii_strtoll(v, NULL, 10);
    else if (!strcmp(k, "expires_ms")) j->expires_ms = g_ascii_strtoll(v, NULL, 10);
    else if (!strcmp(k, "seconds")) j->seconds = g_ascii_strtod(v, NULL);
    else if (!strcmp(k, "frames")) j->frames = g_ascii_strtoll(v, NULL, 10);
    else if (!strcmp(k, "spec")) g_free(j->spec_json), j->spec_json = g_strdup(v);
    else if (!strcmp(k, "plan")) g_free(j->plan_json), j->plan_json = g_strdup(v);
    else if (!strcmp(k, "webhook")) g_free(j->webhook_json), j->webhook_json = g_strdup(v);
  }
  return j->id[0] ? 0 : bad_reply("HGETALL (a job without an id)");
}

static int get_job(rstore *s, const char *id, fc_vjob *out) {
  char *key = g_strdup_printf("%svjob:%s", s->prefix, id);
  const char *argv[] = {"HGETALL", key};
  fc_resp *rep = NULL;
  int err = command(s, 2, argv, NULL, &rep);
  g_free(key);
  if (err == 0) {
    err = fc_vstore_redis_read_job(rep, out);
    if (err == FC_ENOTFOUND) err = fc_error_set(FC_ENOTFOUND, "no video job %s", id);
    if (err) fc_vjob_clear(out);
  }
  fc_resp_free(rep);
  return err;
}

/* --- the vtable --- */

static const fc_vstore_ops redis_ops;
static void r_destroy(fc_vstore *base);

static rstore *rstore_new(const char *url, const char *prefix, const char *consumer,
                          int claim_idle_ms, int retention_s, int max_jobs, int *err) {
  fc_redis_params rp = {.url = url, .io_timeout_ms = IO_TIMEOUT_MS};
  fc_redis *r = fc_redis_create(&rp, err);
  if (!r) return NULL;
  rstore *s = g_new0(rstore, 1);
  s->base.ops = &redis_ops;
  s->r = r;
  s->url = g_strdup(url);
  s->prefix = g_strdup(prefix);
  s->consumer = g_strdup(consumer);
  s->stream = g_strdup_printf("%svwork", prefix);
  s->claim_idle_ms = claim_idle_ms;
  s->retention_s = retention_s;
  s->max_jobs = max_jobs;
  return s;
}

fc_vstore *fc_vstore_redis_create(const fc_vstore_params *p, int *err) {
  fc_vstore_redis_lua_init();
  char consumer[200];
  if (p->consumer && p->consumer[0]) {
    g_strlcpy(consumer, p->consumer, sizeof consumer);
  } else {
    char host[128] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) g_strlcpy(host, "host", sizeof host);
    snprintf(consumer, sizeof consumer, "%s-%d", host, (int)getpid());
  }
  rstore *s = rstore_new(p->redis_url, p->prefix && p->prefix[0] ? p->prefix : "facecast:",
                         consumer, p->claim_idle_ms > 0 ? p->claim_idle_ms : 15000,
                         p->retention_s > 0 ? p->retention_s : 86400,
                         p->max_jobs > 0 ? p->max_jobs : 1000, err);
  if (!s) return NULL;
  /* Redis down now is not an error: every call connects again (and makes the group). */
  if (ensure_group(s) == FC_EREMOTE) {
    *err = remote_error();
    r_destroy(&s->base);
    return NULL;
  }
  return &s->base;
}

static fc_vstore *r_clone(fc_vstore *base, int *err) {
  rstore *s = (rstore *)base;
  rstore *c = rstore_new(s->url, s->prefix, s->consumer, s->claim_idle_ms, s->retention_s,
                         s->max_jobs, err);
  return c ? &c->base : NULL;
}

static void r_destroy(fc_vstore *base) {
  rstore *s = (rstore *)base;
  if (!s) return;
  fc_redis_destroy(s->r);
  g_free(s->url);
  g_free(s->prefix);
  g_free(s->consumer);
  g_free(s->stream);
  g_free(s);
}

/* --- the API's side --- */

static int r_submit(fc_vstore *base, fc_vjob *j, const char *idem_key, const char *body_sha256,
                    char existing_id[40]) {
  rstore *s = (rstore *)base;
  if (!j->id[0]) fc_vjob_new_id(j->id);
  if (!j->created_ms) j->created_ms = now_wall_ms();
  j->status = FC_VJOB_PENDING;
  j->progress = j->shards_done = 0;
  j->started_ms = j->finished_ms = j->expires_ms = 0;
  char *ik = idem_key ? g_strdup_printf("%svidem:%zu:%s:%s", s->prefix, strlen(j->owner),
                                        j->owner, idem_key)
                      : g_strdup("");
  char created[24], shards[16], max[16];
  snprintf(created, sizeof created, "%lld", (long long)j->created_ms);
  snprintf(shards, sizeof shards, "%d", j->shards);
  snprintf(max, sizeof max, "%d", s->max_jobs);
  const char *args[] = {j->id, ik, body_sha256 ? body_sha256 : "", j->owner, j->request_id,
                        created, shards, j->spec_json ? j->spec_json : "",
                        j->plan_json ? j->plan_json : "",
                        j->webhook_json ? j->webhook_json : "[]", max};
  fc_resp *rep = NULL;
  int err = eval(s, VLUA_SUBMIT, &rep, G_N_ELEMENTS(args), args);
  g_free(ik);
  if (err) return err;
  const char *what = rep->type == FC_RESP_ARRAY && rep->n == 2 ? rstr(&rep->elem[0]) : NULL;
  const char *id = what ? rstr(&rep->elem[1]) : NULL;
  if (!what || !id) err = bad_reply("submit");
  else if (!strcmp(what, "exists")) {
    if (existing_id) g_strlcpy(existing_id, id, 40);
    err = fc_error_set(FC_EEXIST, "Idempotency-Key '%.64s' made job %s already", idem_key, id);
  } else if (!strcmp(what, "conflict")) {
    err = fc_error_set(FC_EINVAL, "Idempotency-Key '%.64s' was used with a different body (job %s)",
                       idem_key ? idem_key : "", id);
  } else if (!strcmp(what, "taken")) {
    err = fc_error_set(FC_EINVAL, "video job %s exists already", id);
  } else if (!strcmp(what, "busy")) {
    err = fc_error_set(FC_EBUSY, "%s video jobs are waiting or rendering; try again later", id);
  }
  fc_resp_free(rep);
  return err;
}

static int r_get(fc_vstore *base, const char *id, fc_vjob *out) {
  return get_job((rstore *)base, id, out);
}

static int r_list(fc_vstore *base, const char *owner, const char *after, fc_vjob *out, int *n,
                  int *more) {
  rstore *s = (rstore *)base;
  int want = *n, err = 0, got = 0;
  *n = 0;
  *more = 0;
  char *key = owner ? g_strdup_printf("%svjobs:owner:%s", s->prefix, owner)
                    : g_strdup_printf("%svjobs", s->prefix);
  fc_resp *rep = NULL;
  long long start = 0;
  if (after) {
    const char *argv[] = {"ZREVRANK", key, after};
    if ((err = command(s, 3, argv, NULL, &rep))) goto out;
    if (rep->type != FC_RESP_INTEGER) {
      err = fc_error_set(FC_ENOTFOUND, "no video job %s to list after", after);
      goto out;
    }
    start = rep->integer + 1;
    fc_resp_free(rep);
    rep = NULL;
  }
  /* one more than asked, to tell whether there are more */
  char a[24], b[24];
  snprintf(a, sizeof a, "%lld", start);
  snprintf(b, sizeof b, "%lld", start + want);
  const char *argv[] = {"ZREVRANGE", key, a, b};
  if ((err = command(s, 4, argv, NULL, &rep))) goto out;
  if (rep->type != FC_RESP_ARRAY) {
    err = bad_reply("ZREVRANGE");
    goto out;
  }
  for (size_t i = 0; i < rep->n && got <= want; i++) {
    const char *id = rstr(&rep->elem[i]);
    if (!id) continue;
    if (got == want) {
      *more = 1;
      break;
    }
    err = get_job(s, id, &out[got]);
    if (err == FC_ENOTFOUND) { /* removed since the range was read */
      err = 0;
      continue;
    }
    if (err) break;
    got++;
  }
  if (err)
    for (int i = 0; i < got; i++) fc_vjob_clear(&out[i]);
  else
    *n = got;
out:
  fc_resp_free(rep);
  g_free(key);
  return err;
}

static void args_now(char now[24], char ret[24], const rstore *s) {
  int64_t t = now_wall_ms();
  snprintf(now, 24, "%lld", (long long)t);
  snprintf(ret, 24, "%lld", (long long)s->retention_s * 1000);
}

static int r_del(fc_vstore *base, const char *id) {
  rstore *s = (rstore *)base;
  char now[24], ret[24];
  args_now(now, ret, s);
  const char *args[] = {id, now, ret};
  fc_resp *rep = NULL;
  int err = eval(s, VLUA_DELETE, &rep, 3, args);
  if (err) return err;
  const char *what = rstr(rep);
  if (!what) err = bad_reply("delete");
  else if (!strcmp(what, "notfound")) err = fc_error_set(FC_ENOTFOUND, "no video job %s", id);
  fc_resp_free(rep);
  return err;
}

static int r_expire(fc_vstore *base, int64_t now_ms, void (*drop)(void *user, const char *id),
                    void *user) {
  rstore *s = (rstore *)base;
  char now[24], key[300];
  snprintf(now, sizeof now, "%lld", (long long)now_ms);
  snprintf(key, sizeof key, "%svexpire", s->prefix);
  int removed = 0;
  for (;;) { /* a hundred at a time, so one call never holds Redis long */
    const char *argv[] = {"ZRANGEBYSCORE", key, "-inf", now, "LIMIT", "0", "100"};
    fc_resp *rep = NULL;
    int err = command(s, G_N_ELEMENTS(argv), argv, NULL, &rep);
    if (err) return removed ? removed : err;
    if (rep->type != FC_RESP_ARRAY) {
      fc_resp_free(rep);
      return removed ? removed : bad_reply("ZRANGEBYSCORE");
    }
    size_t seen = rep->n;
    for (size_t i = 0; i < rep->n; i++) {
      const char *id = rstr(&rep->elem[i]);
      if (!id) continue;
      const char *args[] = {id, now};
      fc_resp *r2 = NULL;
      /* the script removes it only if it is still due: another node may have been first */
      if (eval(s, VLUA_EXPIRE, &r2, 2, args) == 0 && r2->type == FC_RESP_INTEGER && r2->integer == 1) {
        removed++;
        if (drop) drop(user, id);
      }
      fc_resp_free(r2);
    }
    fc_resp_free(rep);
    if (seen < 100) break;
  }
  return removed;
}

static int r_depth(fc_vstore *base, int *jobs_pending, int *items_queued) {
  rstore *s = (rstore *)base;
  char key[300];
  snprintf(key, sizeof key, "%svactive", s->prefix);
  const char *a1[] = {"SCARD", key}, *a2[] = {"XLEN", s->stream},
             *a3[] = {"XPENDING", s->stream, GROUP};
  fc_resp *r1 = NULL, *r2 = NULL, *r3 = NULL;
  int err = command(s, 2, a1, NULL, &r1);
  if (!err) err = command(s, 2, a2, NULL, &r2);
  if (!err) err = command(s, 3, a3, NULL, &r3);
  if (!err && (r1->type != FC_RESP_INTEGER || r2->type != FC_RESP_INTEGER ||
               r3->type != FC_RESP_ARRAY || r3->n < 1 || r3->elem[0].type != FC_RESP_INTEGER))
    err = bad_reply("SCARD/XLEN/XPENDING");
  if (!err) {
    /* acknowledged items are deleted, so the stream is the work not yet done; less what is
     * being worked on (delivered, not acknowledged) is what waits */
    long long q = r2->integer - r3->elem[0].integer;
    *jobs_pending = (int)r1->integer;
    *items_queued = q > 0 ? (int)q : 0;
  }
  fc_resp_free(r1);
  fc_resp_free(r2);
  fc_resp_free(r3);
  return err;
}

/* --- the workers' side --- */

/* Acknowledges and deletes entry (work that is not to be done). */
static int ack(rstore *s, const char *entry) {
  const char *a1[] = {"XACK", s->stream, GROUP, entry}, *a2[] = {"XDEL", s->stream, entry};
  fc_resp *rep = NULL;
  int err = command(s, 4, a1, NULL, &rep);
  fc_resp_free(rep);
  rep = NULL;
  if (!err) err = command(s, 3, a2, NULL, &rep);
  fc_resp_free(rep);
  return err;
}

/* An entry [id, [field, value...]] as a work item; 0, or 1 when it is not one (ill-formed). */
int fc_vstore_redis_read_entry(const fc_resp *e, fc_vwork *w) {
  memset(w, 0, sizeof *w);
  const char *id = e && e->type == FC_RESP_ARRAY && e->n == 2 ? rstr(&e->elem[0]) : NULL;
  if (!id) return 1;
  g_strlcpy(w->entry, id, sizeof w->entry);
  const fc_resp *f = &e->elem[1];
  if (f->type != FC_RESP_ARRAY && f->type != FC_RESP_MAP) return 1;
  int have = 0;
  for (size_t i = 0; i + 1 < f->n; i += 2) {
    const char *k = rstr(&f->elem[i]), *v = rstr(&f->elem[i + 1]);
    if (!k || !v) continue;
    if (!strcmp(k, "job")) {
      g_strlcpy(w->job, v, sizeof w->job);
      have |= 1;
    } else if (!strcmp(k, "shard")) {
      char *end = NULL;
      long k2 = strtol(v, &end, 10);
      if (end && !*end && k2 >= -1 && k2 < 1000000) {
        w->shard = (int)k2;
        have |= 2;
      }
    }
  }
  return have == 3 && fc_vjob_id_valid(w->job) ? 0 : 1;
}

/* How many times entry has been delivered (1 when Redis does not say). */
static int deliveries(rstore *s, const char *entry) {
  const char *argv[] = {"XPENDING", s->stream, GROUP, entry, entry, "1"};
  fc_resp *rep = NULL;
  int n = 1;
  if (command(s, G_N_ELEMENTS(argv), argv, NULL, &rep) == 0 && rep->type == FC_RESP_ARRAY &&
      rep->n == 1 && rep->elem[0].type == FC_RESP_ARRAY && rep->elem[0].n == 4 &&
      rep->elem[0].elem[3].type == FC_RESP_INTEGER)
    n = (int)rep->elem[0].elem[3].integer;
  fc_resp_free(rep);
  return n;
}

/* An item just delivered to us: 0 when it is to be worked on; 1 when it was skipped
 * (acknowledged: its job is gone, canceled, finished, or the shard done already). */
static int accept_item(rstore *s, fc_vwork *w) {
  if (w->attempt > MAX_ATTEMPTS) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s %d was taken %d times and never finished (its workers stopped)",
             w->shard < 0 ? "the join" : "shard", w->shard < 0 ? 0 : w->shard, w->attempt - 1);
    int err = redis_ops.fail(&s->base, w, msg);
    return err && err != FC_ECANCELED ? err : 1;
  }
  char shard[16], now[24];
  snprintf(shard, sizeof shard, "%d", w->shard);
  snprintf(now, sizeof now, "%lld", (long long)now_wall_ms());
  const char *args[] = {w->job, shard, now};
  fc_resp *rep = NULL;
  int err = eval(s, VLUA_TAKEN, &rep, 3, args);
  if (err) return err;
  int use = rstr(rep) && !strcmp(rstr(rep), "processing");
  fc_resp_free(rep);
  if (use) return 0;
  err = ack(s, w->entry);
  return err ? err : 1;
}

/* An item idle past claim_idle_ms, taken over: 0 and *w, FC_EAGAIN when none. */
static int claim_idle(rstore *s, fc_vwork *w) {
  char idle[24];
  snprintf(idle, sizeof idle, "%d", s->claim_idle_ms);
  /* Redis finds the oldest quiet item itself (XPENDING IDLE: one round trip however many items
   * busy workers hold), and XAUTOCLAIM from there takes it, if no one else was quicker */
  for (int round = 0; round < 8; round++) {
    const char *pv[] = {"XPENDING", s->stream, GROUP, "IDLE", idle, "-", "+", "1"};
    fc_resp *rep = NULL;
    int err = command(s, G_N_ELEMENTS(pv), pv, NULL, &rep);
    if (err) return err;
    char cursor[48] = "";
    if (rep->type == FC_RESP_ARRAY && rep->n == 1 && rep->elem[0].type == FC_RESP_ARRAY &&
        rep->elem[0].n == 4 && rstr(&rep->elem[0].elem[0]))
      g_strlcpy(cursor, rstr(&rep->elem[0].elem[0]), sizeof cursor);
    int none = rep->type == FC_RESP_ARRAY && rep->n == 0;
    fc_resp_free(rep);
    if (none) return FC_EAGAIN;
    if (!cursor[0]) return bad_reply("XPENDING IDLE");
    const char *argv[] = {"XAUTOCLAIM", s->stream, GROUP, s->consumer, idle, cursor, "COUNT", "1"};
    rep = NULL;
    if ((err = command(s, G_N_ELEMENTS(argv), argv, NULL, &rep))) return err;
    if (rep->type != FC_RESP_ARRAY || rep->n < 2 || rep->elem[1].type != FC_RESP_ARRAY) {
      fc_resp_free(rep);
      return bad_reply("XAUTOCLAIM");
    }
    const fc_resp *e = rep->elem[1].n ? &rep->elem[1].elem[0] : NULL;
    if (e && e->type != FC_RESP_NIL) { /* nil: deleted meanwhile (Redis 6.2) */
      if (fc_vstore_redis_read_entry(e, w)) {
        if (w->entry[0]) ack(s, w->entry); /* not ours to read: dropped */
      } else {
        w->attempt = deliveries(s, w->entry);
        err = accept_item(s, w);
        if (err <= 0) {
          fc_resp_free(rep);
          return err;
        }
      }
    }
    fc_resp_free(rep);
  }
  return FC_EAGAIN;
}

/* Removes the group's consumers that are gone (see FORGET_CLAIMS); errors are left for the
 * next command to meet. XINFO CONSUMERS: [[name, N, pending, N, idle, N, ...], ...]. */
static void forget_dead_consumers(rstore *s) {
  gint64 now = g_get_monotonic_time();
  if (now < s->next_forget_us) return;
  gint64 every_ms = 4LL * s->claim_idle_ms < 60000 ? 4LL * s->claim_idle_ms : 60000;
  s->next_forget_us = now + every_ms * 1000;
  const char *argv[] = {"XINFO", "CONSUMERS", s->stream, GROUP};
  fc_resp *rep = NULL;
  if (command(s, 4, argv, NULL, &rep) == 0 && rep->type == FC_RESP_ARRAY) {
    for (size_t i = 0; i < rep->n; i++) {
      const fc_resp *c = &rep->elem[i];
      const char *name = NULL;
      long long pending = -1, idle = -1;
      for (size_t k = 0; k + 1 < c->n && (c->type == FC_RESP_ARRAY || c->type == FC_RESP_MAP); k += 2) {
        const char *f = rstr(&c->elem[k]);
        const fc_resp *v = &c->elem[k + 1];
        if (!f) continue;
        if (!strcmp(f, "name")) name = rstr(v);
        else if (!strcmp(f, "pending") && v->type == FC_RESP_INTEGER) pending = v->integer;
        else if (!strcmp(f, "idle") && v->type == FC_RESP_INTEGER) idle = v->integer;
      }
      if (!name || pending != 0 || idle < (long long)FORGET_CLAIMS * s->claim_idle_ms ||
          !strcmp(name, s->consumer))
        continue;
      const char *del[] = {"XGROUP", "DELCONSUMER", s->stream, GROUP, name};
      fc_resp *r2 = NULL;
      command(s, 5, del, NULL, &r2);
      fc_resp_free(r2);
    }
  }
  fc_resp_free(rep);
}

static int r_take(fc_vstore *base, int timeout_ms, fc_vwork *w) {
  rstore *s = (rstore *)base;
  gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
  forget_dead_consumers(s);
  for (;;) {
    int err = claim_idle(s, w);
    if (err != FC_EAGAIN) return err;
    gint64 left = (deadline - g_get_monotonic_time()) / 1000;
    if (left < 0) left = 0;
    if (left > BLOCK_SLICE_MS) left = BLOCK_SLICE_MS;
    char block[24];
    /* BLOCK 0 would wait forever: an expired deadline still reads what is there, briefly */
    snprintf(block, sizeof block, "%lld", (long long)(left > 0 ? left : 1));
    const char *argv[] = {"XREADGROUP", "GROUP", GROUP, s->consumer, "COUNT", "1", "BLOCK",
                          block, "STREAMS", s->stream, ">"};
    fc_resp *rep = NULL;
    if ((err = command(s, G_N_ELEMENTS(argv), argv, NULL, &rep))) return err;
    /* [[stream, [[id, fields]]]] or nil when nothing came */
    const fc_resp *e = NULL;
    if (rep->type == FC_RESP_ARRAY && rep->n == 1 && rep->elem[0].type == FC_RESP_ARRAY &&
        rep->elem[0].n == 2 && rep->elem[0].elem[1].type == FC_RESP_ARRAY &&
        rep->elem[0].elem[1].n == 1)
      e = &rep->elem[0].elem[1].elem[0];
    else if (rep->type == FC_RESP_MAP && rep->n == 2 && rep->elem[1].type == FC_RESP_ARRAY &&
             rep->elem[1].n == 1)
      e = &rep->elem[1].elem[0];
    if (e) {
      if (fc_vstore_redis_read_entry(e, w)) {
        if (w->entry[0]) ack(s, w->entry);
        err = 1;
      } else {
        w->attempt = 1;
        err = accept_item(s, w);
      }
    } else {
      err = rep->type == FC_RESP_NIL ? 1 : bad_reply("XREADGROUP");
    }
    fc_resp_free(rep);
    if (err <= 0) return err;
    if (g_get_monotonic_time() >= deadline) return FC_EAGAIN;
  }
}

static int r_touch(fc_vstore *base, const fc_vwork *w) {
  rstore *s = (rstore *)base;
  const char *args[] = {w->entry, s->consumer, w->job};
  fc_resp *rep = NULL;
  int err = eval(s, VLUA_TOUCH, &rep, 3, args);
  if (err) return err;
  const char *what = rstr(rep);
  if (!what) err = bad_reply("touch");
  else if (!strcmp(what, "lost"))
    err = fc_error_set(FC_ECANCELED, "video job %s: its item %s was taken over by another worker",
                       w->job, w->entry);
  else if (!strcmp(what, "canceled"))
    err = fc_error_set(FC_ECANCELED, "video job %s is no longer wanted", w->job);
  fc_resp_free(rep);
  return err;
}

static int r_progress(fc_vstore *base, const char *job, int shard, int64_t done, int64_t total) {
  rstore *s = (rstore *)base;
  char k[16], d[24], t[24], now[24];
  snprintf(k, sizeof k, "%d", shard);
  snprintf(d, sizeof d, "%lld", (long long)done);
  snprintf(t, sizeof t, "%lld", (long long)total);
  snprintf(now, sizeof now, "%lld", (long long)now_wall_ms());
  const char *args[] = {job, k, d, t, now};
  fc_resp *rep = NULL;
  int err = eval(s, VLUA_PROGRESS, &rep, 5, args);
  if (!err && rep->type != FC_RESP_INTEGER) err = bad_reply("progress");
  else if (!err && rep->integer == -1) err = fc_error_set(FC_ENOTFOUND, "no video job %s", job);
  else if (!err && rep->integer == -2)
    err = fc_error_set(FC_EINVAL, "video job %s has no shard %d", job, shard);
  fc_resp_free(rep);
  return err;
}

static int r_shard_done(fc_vstore *base, const fc_vwork *w) {
  rstore *s = (rstore *)base;
  char k[16];
  snprintf(k, sizeof k, "%d", w->shard);
  const char *args[] = {w->job, k, w->entry};
  fc_resp *rep = NULL;
  int err = eval(s, VLUA_SHARD_DONE, &rep, 3, args);
  if (!err && rep->type != FC_RESP_INTEGER) err = bad_reply("shard done");
  else if (!err && rep->integer == -1)
    err = fc_error_set(FC_EINVAL, "video job %s has no shard %d", w->job, w->shard);
  else if (!err && rep->integer == 0)
    err = fc_error_set(FC_ECANCELED, "video job %s is no longer wanted", w->job);
  fc_resp_free(rep);
  return err;
}

/* complete and fail: the job's last word, and the item acknowledged. */
static int finish(rstore *s, int which, const fc_vwork *w, const char *last, const char *last2) {
  char now[24], ret[24];
  args_now(now, ret, s);
  const char *args[] = {w->job, w->entry, now, ret, last, last2};
  fc_resp *rep = NULL;
  int err = eval(s, which, &rep, last2 ? 6 : 5, args);
  if (!err && rep->type != FC_RESP_INTEGER) err = bad_reply("finish");
  else if (!err && rep->integer == 0)
    err = fc_error_set(FC_ECANCELED, "video job %s is no longer wanted", w->job);
  fc_resp_free(rep);
  return err;
}

static int r_complete(fc_vstore *base, const fc_vwork *w, int64_t frames, double seconds) {
  char f[24], sec[G_ASCII_DTOSTR_BUF_SIZE];
  snprintf(f, sizeof f, "%lld", (long long)frames);
  g_ascii_dtostr(sec, sizeof sec, seconds);
  return finish((rstore *)base, VLUA_COMPLETE, w, f, sec);
}

static int r_fail(fc_vstore *base, const fc_vwork *w, const char *error) {
  return finish((rstore *)base, VLUA_FAIL, w, error, NULL);
}

static int r_set_webhook(fc_vstore *base, const char *job, const char *attempts_json) {
  rstore *s = (rstore *)base;
  const char *args[] = {job, attempts_json};
  fc_resp *rep = NULL;
  int err = eval(s, VLUA_WEBHOOK, &rep, 2, args);
  if (!err && (rep->type != FC_RESP_INTEGER || rep->integer != 1))
    err = fc_error_set(FC_ENOTFOUND, "no video job %s", job);
  fc_resp_free(rep);
  return err;
}

static const fc_vstore_ops redis_ops = {
    .clone = r_clone,
    .destroy = r_destroy,
    .submit = r_submit,
    .get = r_get,
    .list = r_list,
    .del = r_del,
    .expire = r_expire,
    .depth = r_depth,
    .take = r_take,
    .touch = r_touch,
    .progress = r_progress,
    .shard_done = r_shard_done,
    .complete = r_complete,
    .fail = r_fail,
    .set_webhook = r_set_webhook,
};
