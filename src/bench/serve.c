/* The serving benchmark: real sessions (stream, ready queue, pacer, workers, encoders) with
 * FC_LIVE_NULL outputs instead of browsers, so it measures everything the server does per
 * session except the network. Talking sessions are kept fed with speech (a paragraph of TTS,
 * pushed again whenever less than 4 s is pending). */
#include "core/gpustat.h"
#include "facecast/error.h"
#include "facecast/tts.h"
#include "server/internal.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *paragraph =
    "Good evening. Here is the news at the top of the hour. The engine speaks with a human "
    "face, in real time, for many people at once, on an ordinary computer.";

typedef struct bench_ctx {
  fc_server *srv;
  fc_session **s;
  int n, talking;
  fc_speech sp;
  /* GPU readings during the measured window (4 a second on the main loop) */
  fc_gpustat *gpu;
  double util_sum;
  int util_n;
  unsigned long long mem_peak;
} bench_ctx;

/* CPU seconds of this process's threads, summed by name with digits removed. */
#define MAX_GROUPS 32
typedef struct tgroup {
  char name[20];
  double sec;
} tgroup;

static int thread_groups(tgroup *g) {
  int n = 0;
  DIR *d = opendir("/proc/self/task");
  if (!d) return 0;
  long tck = sysconf(_SC_CLK_TCK);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    /* pid (comm) state ... field 14 utime, 15 stime; comm may hold spaces: split at the last ')' */
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (!open || !close || close < open) continue;
    char name[20];
    int k = 0;
    for (char *c = open + 1; c < close && k < (int)sizeof name - 1; c++)
      if (*c < '0' || *c > '9') name[k++] = *c;
    name[k] = 0;
    unsigned long ut = 0, st = 0;
    if (sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
      continue;
    int i = 0;
    while (i < n && strcmp(g[i].name, name)) i++;
    if (i == n) {
      if (n == MAX_GROUPS) continue;
      snprintf(g[n].name, sizeof g[n].name, "%s", name);
      g[n++].sec = 0;
    }
    g[i].sec += (double)(ut + st) / tck;
  }
  closedir(d);
  return n;
}

static int cmp_group(const void *a, const void *b) {
  double x = ((const tgroup *)a)->sec, y = ((const tgroup *)b)->sec;
  return (x < y) - (x > y);
}

/* after - before, the largest groups first, as text in % of a core per session. */
static void describe_groups(tgroup *after, int na, const tgroup *before, int nb, double wall,
                            int sessions, char *out, size_t cap) {
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nb; j++)
      if (!strcmp(after[i].name, before[j].name)) after[i].sec -= before[j].sec;
  qsort(after, (size_t)na, sizeof *after, cmp_group);
  size_t len = 0;
  out[0] = 0;
  for (int i = 0; i < na && i < 6 && len < cap; i++) {
    double pct = after[i].sec / wall / sessions * 100;
    if (pct < 0.05) break;
    len += (size_t)snprintf(out + len, cap - len, "%s%s %.1f %%", i ? ", " : "", after[i].name, pct);
  }
}

static gboolean read_gpus(gpointer data) {
  bench_ctx *b = data;
  unsigned long long mem = 0;
  for (int k = 0; k < b->srv->n_devs; k++) {
    unsigned util;
    unsigned long long used;
    if (b->srv->devs[k].gpu < 0 || fc_gpustat_read(b->gpu, b->srv->devs[k].gpu, &util, &used))
      continue;
    b->util_sum += util, b->util_n++;
    mem += used;
  }
  if (mem > b->mem_peak) b->mem_peak = mem;
  return G_SOURCE_CONTINUE;
}

static gboolean top_up(gpointer data) {
  bench_ctx *b = data;
  for (int i = 0; i < b->talking; i++) {
    fc_session *s = b->s[i];
    g_mutex_lock(&s->lock);
    if (fc_stream_pending_frames(s->stream) < 4 * FC_FPS &&
        fc_stream_push_speech(s->stream, b->sp.audio.samples, b->sp.audio.n, b->sp.ph,
                              b->sp.n_ph, NULL) == 0)
      fc_session_want_fill_locked(s);
    g_mutex_unlock(&s->lock);
  }
  return G_SOURCE_CONTINUE;
}

static gboolean stop_loop(gpointer data) {
  g_main_loop_quit(data);
  return G_SOURCE_REMOVE;
}

/* Counters of the whole run, read at both ends of the measured window. */
typedef struct counts {
  uint64_t sent, dropped, bytes, encoded, delay_us, enc_late; /* the sessions' outputs */
  uint64_t skipped, late;                                      /* the pacers */
  uint64_t batches, batch_frames;                              /* scheduler or solo calls */
  uint64_t oom_retries;
  int limit;
  double batch_p95_ms;
} counts;

static void read_counts(const bench_ctx *b, counts *c) {
  fc_server *srv = b->srv;
  memset(c, 0, sizeof *c);
  for (int i = 0; i < b->n; i++) {
    fc_sink_stats st;
    fc_sink_get_stats(b->s[i]->out, &st);
    c->sent += st.frames_pushed - st.frames_dropped;
    c->dropped += st.frames_dropped;
    c->bytes += st.bytes_out;
    c->encoded += st.frames_encoded;
    c->delay_us += st.encode_delay_us;
    c->enc_late += st.frames_encoded_late;
  }
  c->skipped = srv->ticks_skipped;
  c->late = srv->frames_late;
  if (!srv->sched) {
    c->batches = srv->solo_calls;
    c->batch_frames = srv->solo_frames;
    return;
  }
  for (int k = 0; k < srv->n_devs; k++) {
    fc_sched_stats ss;
    if (fc_sched_stats_get(srv->sched, k, &ss)) continue;
    c->batches += ss.batches;
    c->batch_frames += ss.frames;
    c->oom_retries += ss.oom_retries;
    if (!c->limit || ss.limit < c->limit) c->limit = ss.limit;
    if (ss.p95_ms > c->batch_p95_ms) c->batch_p95_ms = ss.p95_ms;
  }
}

/* The nearest-rank percentile's index in n sorted samples (n > 0): ceil(q n) - 1. */
static size_t nearest_rank(size_t n, double q) {
  size_t r = (size_t)ceil(q * (double)n);
  return r ? r - 1 : 0;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

int fc_server_bench(const fc_server_params *p, int sessions, int talking, double seconds,
                    fc_serve_bench *out) {
  int err = FC_OK;
  fc_server_params sp = *p;
  sp.max_sessions = sessions;
  sp.port = 0;
  sp.host = "127.0.0.1";
  sp.quiet = 1;
  bench_ctx b = {.n = sessions, .talking = talking < sessions ? talking : sessions};
  memset(out, 0, sizeof *out);
  fc_server *srv = fc_server_create(&sp, &err);
  if (!srv) return err;
  b.srv = srv;
  b.s = g_new0(fc_session *, sessions);
  if ((err = fc_tts_speak(paragraph, NULL, &b.sp))) goto done;
  for (int i = 0; i < sessions; i++) {
    if (!(b.s[i] = fc_session_new(srv, srv->avatar, NULL, &err))) goto done;
    fc_live_params lp = fc_session_live_params(srv, b.s[i], FC_LIVE_NULL);
    fc_live *live = fc_live_create(&lp, NULL, NULL, NULL, &err);
    if (!live) goto done;
    g_mutex_lock(&b.s[i]->out_lock);
    b.s[i]->out = fc_live_sink(live);
    g_mutex_unlock(&b.s[i]->out_lock);
  }
  top_up(&b);
  /* Warm up for a second (encoders start, queues fill), then measure. */
  guint t1 = g_timeout_add(500, top_up, &b);
  g_timeout_add(1000, stop_loop, srv->loop);
  g_main_loop_run(srv->loop);
  size_t cap = (size_t)(sessions * FC_FPS * (seconds + 2));
  float *samples = g_new(float, cap);
  /* The slow probes first (NVML's start, a scan of every thread), so that the counters below
   * are read right next to the clock at both ends: the window they count is the one divided
   * by. */
  int gerr, any_gpu = 0;
  for (int k = 0; k < srv->n_devs; k++) any_gpu |= srv->devs[k].gpu >= 0;
  guint tg = 0;
  if (any_gpu && (b.gpu = fc_gpustat_open(&gerr))) tg = g_timeout_add(250, read_gpus, &b);
  tgroup g0[MAX_GROUPS], g1[MAX_GROUPS];
  int ng0 = thread_groups(g0);
  counts k0, k1;
  read_counts(&b, &k0);
  g_mutex_lock(&srv->stat_lock);
  srv->late_n = 0;
  srv->late_cap = cap;
  srv->late_samples = samples;
  g_mutex_unlock(&srv->stat_lock);
  double c0 = cpu_seconds();
  gint64 w0 = g_get_monotonic_time();
  g_timeout_add((guint)(seconds * 1000), stop_loop, srv->loop);
  g_main_loop_run(srv->loop);
  double wall = (g_get_monotonic_time() - w0) / 1e6;
  double cpu = cpu_seconds() - c0;
  g_mutex_lock(&srv->stat_lock);
  srv->late_samples = NULL;
  g_mutex_unlock(&srv->stat_lock);
  read_counts(&b, &k1);
  int ng1 = thread_groups(g1);
  describe_groups(g1, ng1, g0, ng0, wall, sessions, out->cpu_by_thread, sizeof out->cpu_by_thread);
  out->batch_p95_ms = k1.batch_p95_ms; /* the worst device's */
  out->oom_retries = k1.oom_retries - k0.oom_retries;
  out->batch_limit = k1.limit;
  out->production_failures = (unsigned long long)g_atomic_int_get(&srv->production_failures);
  g_mutex_lock(&srv->lock);
  out->sessions_alive = (int)g_hash_table_size(srv->sessions);
  g_mutex_unlock(&srv->lock);
  out->mean_batch = k1.batches > k0.batches
                        ? (double)(k1.batch_frames - k0.batch_frames) / (k1.batches - k0.batches)
                        : 0;
  uint64_t encoded = k1.encoded - k0.encoded;
  out->encode_delay_ms = encoded ? (double)(k1.delay_us - k0.delay_us) / 1000.0 / encoded : 0;
  out->encode_late_pct = encoded ? 100.0 * (double)(k1.enc_late - k0.enc_late) / encoded : 0;
  out->kbps = (double)(k1.bytes - k0.bytes) * 8 / 1000 / wall / sessions;
  g_source_remove(t1);
  if (tg) g_source_remove(tg);
  out->gpu_util_pct = b.util_n ? b.util_sum / b.util_n : -1;
  out->gpu_mem_peak_mb = (double)b.mem_peak / 1048576.0;
  size_t n = srv->late_n;
  qsort(samples, n, sizeof *samples, cmp_float);
  out->sessions = sessions;
  out->talking = b.talking;
  out->seconds = wall;
  out->final_fps = (double)(k1.sent - k0.sent) / sessions / wall;
  out->late_p50_ms = n ? samples[(n - 1) / 2] : 0;
  out->late_p99_ms = n ? samples[nearest_rank(n, 0.99)] : 0;
  out->cpu_per_session = cpu / wall / sessions;
  out->dropped = k1.dropped - k0.dropped;
  out->skipped_ticks = k1.skipped - k0.skipped;
  out->late_frames = k1.late - k0.late;
  g_free(samples);
done:
  for (int i = 0; i < sessions; i++)
    if (b.s[i]) {
      fc_session_close(b.s[i], "benchmark over");
      fc_session_unref(b.s[i]);
    }
  g_free(b.s);
  fc_gpustat_close(b.gpu);
  fc_speech_free(&b.sp);
  fc_server_destroy(srv);
  return err;
}
