/* facecast bench bulk: the throughput of bulk videos (src/bulk/video.h) on this machine,
 * recorded in docs/BENCHMARKS.md.
 *
 * N jobs of about S seconds of speech each are submitted at once; K slots (threads) take their
 * shards in submission order and render them through one lip-sync pool (the default backend,
 * or --model/--device), and the slot that finishes a job's last shard joins it. Reported:
 * aggregate × real time (video seconds of all jobs / wall seconds), p50/p95 job latency
 * (submission → joined file), CPU use (getrusage: cores busy on average) and, where NVML is
 * there, GPU use sampled every 200 ms. This is the work /v1/videos does with its runner's slots,
 * without HTTP. The files go to a temporary folder (or --dir) and are removed (--keep with
 * --dir: the joined videos and captions stay, DIR/job-N/video.mp4, to be looked at). */
#include "bulk/video.h"
#include "cli/cli.h"
#include "core/gpustat.h"
#include "facecast/error.h"

#include <getopt.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_JOBS 1000
#define MAX_SLOTS 256

static const char *paragraph =
    "Good morning, and welcome to the evening news. Today we look at how a machine can speak "
    "with a human face, in real time, on an ordinary computer. The words you hear are "
    "synthesised, and the lips you see follow every sound. ";

typedef struct bjob {
  fc_video_spec *spec;
  fc_video_plan *plan;
  char *dir;
  int left; /* shards not yet rendered (under the bench lock) */
  double done_at;
  int64_t bytes; /* of the joined file */
  fc_video_result res;
} bjob;

typedef struct bench {
  fc_video_env env;
  fc_avatar *av;
  bjob *jobs;
  int n_jobs;
  int next_job, next_shard; /* the next work item (under lock) */
  int err, keep;
  char detail[300];
  double t0;
  pthread_mutex_t lock;
  /* GPU sampling */
  fc_gpustat *gpu;
  int gpu_index, stop;
  double gpu_util_sum;
  int gpu_samples;
  unsigned long long gpu_mem_peak;
} bench;

static fc_avatar *get_avatar(void *user, const char *id, int *err) {
  (void)id;
  *err = 0;
  return ((bench *)user)->av;
}
static void put_avatar(void *user, fc_avatar *a) { (void)user, (void)a; }

static void fail(bench *b, int err) {
  pthread_mutex_lock(&b->lock);
  if (!b->err) {
    b->err = err;
    snprintf(b->detail, sizeof b->detail, "%s", fc_error_detail(err));
  }
  pthread_mutex_unlock(&b->lock);
}

/* A slot: shards in submission order; the last shard of a job is followed by its join. */
static void *slot(void *arg) {
  bench *b = arg;
  for (;;) {
    pthread_mutex_lock(&b->lock);
    if (b->err || b->next_job >= b->n_jobs) {
      pthread_mutex_unlock(&b->lock);
      return NULL;
    }
    bjob *j = &b->jobs[b->next_job];
    const int k = b->next_shard++;
    if (b->next_shard >= fc_video_plan_shards(j->plan)) b->next_job++, b->next_shard = 0;
    pthread_mutex_unlock(&b->lock);
    int err = fc_video_shard_render(j->spec, j->plan, k, &b->env, j->dir, &b->err, NULL, NULL);
    if (err) {
      fail(b, err);
      return NULL;
    }
    pthread_mutex_lock(&b->lock);
    const int last = --j->left == 0;
    pthread_mutex_unlock(&b->lock);
    if (!last) continue;
    char *out = g_build_filename(j->dir, "video.mp4", NULL);
    char *srt = g_build_filename(j->dir, "captions.srt", NULL);
    char *vtt = g_build_filename(j->dir, "captions.vtt", NULL);
    err = fc_video_join(j->spec, j->plan, j->dir, out, srt, vtt, &j->res);
    fc_video_shards_remove(j->plan, j->dir);
    GStatBuf st;
    if (!err && !g_stat(out, &st)) j->bytes = (int64_t)st.st_size;
    if (!b->keep) remove(out), remove(srt), remove(vtt);
    g_free(out), g_free(srt), g_free(vtt);
    if (err) {
      fail(b, err);
      return NULL;
    }
    j->done_at = fc_cli_now() - b->t0;
  }
}

static void *gpu_sampler(void *arg) {
  bench *b = arg;
  while (!__atomic_load_n(&b->stop, __ATOMIC_RELAXED)) {
    unsigned util;
    unsigned long long mem;
    if (!fc_gpustat_read(b->gpu, b->gpu_index, &util, &mem)) {
      b->gpu_util_sum += util, b->gpu_samples++;
      if (mem > b->gpu_mem_peak) b->gpu_mem_peak = mem;
    }
    g_usleep(200000);
  }
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec / 1e6;
}

/* The paragraph's sentences, round and round, to about `seconds` of speech: each sentence's
 * length as a shard speaks it (one call, padded to whole frames) measured once. */
static char *script_for(double seconds, int *err) {
  fc_video_spec sp = {.script = (char *)paragraph};
  fc_video_plan *plan = NULL;
  if ((*err = fc_video_plan_create(&sp, 1, 0, &plan))) return NULL;
  const int n = fc_video_plan_sentences(plan, 0);
  double *len = g_new0(double, n);
  for (int i = 0; i < n && !*err; i++) {
    fc_speech one = {0};
    if (!(*err = fc_tts_speak(fc_video_plan_sentence(plan, 0, i), NULL, &one)))
      len[i] = (double)((one.audio.n + 639) / 640 * 640) / FC_SAMPLE_RATE;
    fc_speech_free(&one);
  }
  GString *s = g_string_new(NULL);
  for (double at = 0; !*err && (at == 0 || at + len[0] / 2 < seconds);) {
    for (int i = 0; i < n && (at == 0 || at + len[i] / 2 < seconds); i++) {
      g_string_append_printf(s, "%s%s", s->len ? " " : "", fc_video_plan_sentence(plan, 0, i));
      at += len[i];
    }
  }
  g_free(len);
  fc_video_plan_free(plan);
  if (*err) {
    g_string_free(s, TRUE);
    return NULL;
  }
  return g_string_free(s, FALSE);
}

int fc_bench_bulk(int argc, char **argv) {
  static const struct option opts[] = {
      {"jobs", required_argument, 0, 'n'},   {"seconds", required_argument, 0, 'S'},
      {"slots", required_argument, 0, 'k'},  {"size", required_argument, 0, 's'},
      {"avatar", required_argument, 0, 'a'}, {"model", required_argument, 0, 'm'},
      {"checkpoint", required_argument, 0, 'c'}, {"device", required_argument, 0, 'd'},
      {"preset", required_argument, 0, 'p'}, {"shards", required_argument, 0, 'x'},
      {"captions", no_argument, 0, 'C'},     {"canvas", required_argument, 0, 'v'},
      {"dir", required_argument, 0, 'D'},    {"keep", no_argument, 0, 'K'},
      {"json", no_argument, 0, 'j'},
      {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
  double seconds = 30, jobs_d = 8, slots_d = (double)sysconf(_SC_NPROCESSORS_ONLN), shards_d = 0;
  const char *avatar = NULL, *model = NULL, *ckpt = NULL, *device = NULL, *preset = NULL;
  const char *canvas = NULL, *dir_arg = NULL;
  int w = 512, h = 512, json = 0, captions = 0, keep = 0, c, err = 0;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'n':
      if ((err = fc_cli_parse_real("--jobs", optarg, 1, MAX_JOBS, &jobs_d))) return fc_cli_fail(err);
      break;
    case 'S':
      if ((err = fc_cli_parse_real("--seconds", optarg, 1, 3600, &seconds))) return fc_cli_fail(err);
      break;
    case 'k':
      if ((err = fc_cli_parse_real("--slots", optarg, 1, MAX_SLOTS, &slots_d))) return fc_cli_fail(err);
      break;
    case 'x':
      if ((err = fc_cli_parse_real("--shards", optarg, 1, 4096, &shards_d))) return fc_cli_fail(err);
      break;
    case 's':
      if ((err = fc_cli_parse_size(optarg, &w, &h))) return fc_cli_fail(err);
      break;
    case 'a': avatar = optarg; break;
    case 'm': model = optarg; break;
    case 'c': ckpt = optarg; break;
    case 'd': device = optarg; break;
    case 'p': preset = optarg; break;
    case 'C': captions = 1; break;
    case 'v': canvas = optarg; break;
    case 'D': dir_arg = optarg; break;
    case 'K': keep = 1; break;
    case 'j': json = 1; break;
    case 'h':
      fputs("usage: facecast bench bulk [--jobs N] [--seconds S] [--slots K] [--shards M]\n"
            "                           [--size N|WxH] [--avatar IMG] [--canvas WxH] [--captions]\n"
            "                           [--model NAME --checkpoint FILE] [--device D]\n"
            "                           [--preset X264_PRESET] [--dir DIR [--keep]] [--json]\n",
            stdout);
      return FC_EXIT_OK;
    default: return fc_cli_bad_option("bench bulk", argv);
    }
  }
  const int n_jobs = (int)jobs_d, n_slots = (int)slots_d;
  /* shards per job: enough for every slot to have work from the first job on */
  const int max_shards = shards_d > 0 ? (int)shards_d : n_slots;
  bench b = {0};
  pthread_mutex_init(&b.lock, NULL);
  fc_lipsync *ls[FC_LIPSYNC_POOL_MAX_DEVICES] = {0};
  int n_ls = 0;
  fc_lipsync_pool *pool = NULL;
  char *script = NULL, *root = NULL;
  double *lat = NULL;
  int code = FC_EXIT_OK;
  char canvas_json[64] = "";
  if (canvas) {
    int cw, ch;
    if ((err = fc_cli_parse_size(canvas, &cw, &ch))) return fc_cli_fail(err);
    snprintf(canvas_json, sizeof canvas_json, ",\"size\":\"%dx%d\"", cw, ch);
  }

  if (!(b.av = fc_cli_load_avatar(avatar, w, h, NULL, &err))) goto fail;
  /* The lip-sync devices as `serve` makes them: one backend per --device (comma-separated),
   * and for the parametric renderer on the CPU one per two cores, each with its own scheduler
   * thread (one renderer draws one frame at a time); GPU batches up to 128 frames across the
   * slots' streams, gathered for 2 ms. */
  gchar **names = g_strsplit(device ? device : "cpu", ",", -1);
  for (int k = 0; names[k] && !err; k++) {
    if (n_ls >= FC_LIPSYNC_POOL_MAX_DEVICES || !*names[k]) {
      err = fc_error_set(FC_EINVAL, "--device '%s': 1 to %d devices, comma-separated", device,
                         FC_LIPSYNC_POOL_MAX_DEVICES);
      break;
    }
    fc_lipsync_params lp = {.model = model, .checkpoint = ckpt, .device = names[k]};
    if ((ls[n_ls] = fc_lipsync_create(&lp, &err))) n_ls++;
  }
  g_strfreev(names);
  if (err) goto fail;
  const int gpu = device && !strncmp(device, "cuda", 4);
  if (n_ls == 1 && !gpu && (!device || !strcmp(device, "cpu")) && !fc_lipsync_needs_mel(ls[0])) {
    const int want = (int)(g_get_num_processors() / 2) > FC_LIPSYNC_POOL_MAX_DEVICES
                         ? FC_LIPSYNC_POOL_MAX_DEVICES
                         : (int)(g_get_num_processors() / 2);
    for (; n_ls < want; n_ls++) {
      fc_lipsync_params lp = {.model = model, .checkpoint = ckpt, .device = "cpu"};
      if (!(ls[n_ls] = fc_lipsync_create(&lp, &err))) goto fail;
    }
  }
  fc_lipsync_pool_params pp = {.backends = ls, .n_backends = n_ls, .max_batch = gpu ? 128 : 16,
                               .gather_ms = gpu ? 2 : -1};
  if (!(pool = fc_lipsync_pool_create(&pp, &err))) goto fail;
  if (!(script = script_for(seconds, &err))) goto fail;
  if (dir_arg) root = g_strdup(dir_arg);
  else if (!(root = g_dir_make_tmp("facecast-bench-bulk-XXXXXX", NULL))) {
    err = fc_error_set(FC_EIO, "cannot make a temporary folder");
    goto fail;
  }
  b.env = (fc_video_env){.pool = pool, .avatar_get = get_avatar, .avatar_put = put_avatar,
                         .user = &b, .shared_dir = root, .encoder_threads = 1, .preset = preset};
  b.keep = keep && dir_arg; /* the videos stay in DIR/job-N/ to be looked at */
  b.jobs = g_new0(bjob, n_jobs);
  b.n_jobs = n_jobs;
  int64_t shards = 0;
  for (int i = 0; i < n_jobs; i++) {
    GString *body = g_string_new("{\"script\":");
    JsonNode *sn = json_node_init_string(json_node_alloc(), script);
    char *q = json_to_string(sn, FALSE);
    g_string_append(body, q);
    g_free(q);
    json_node_unref(sn);
    g_string_append_printf(body, ",\"captions\":%s%s}", captions ? "true" : "false", canvas_json);
    err = fc_video_spec_parse(body->str, body->len, &b.jobs[i].spec);
    g_string_free(body, TRUE);
    if (err || (err = fc_video_plan_create(b.jobs[i].spec, max_shards, 0, &b.jobs[i].plan)))
      goto fail;
    b.jobs[i].left = fc_video_plan_shards(b.jobs[i].plan);
    shards += b.jobs[i].left;
    char name[32];
    snprintf(name, sizeof name, "job-%d", i);
    b.jobs[i].dir = g_build_filename(root, name, NULL);
    if (g_mkdir_with_parents(b.jobs[i].dir, 0700)) {
      err = fc_error_set(FC_EIO, "%s: cannot make the folder", b.jobs[i].dir);
      goto fail;
    }
  }
  int gerr;
  if (gpu && (b.gpu = fc_gpustat_open(&gerr))) /* the first device's */
    b.gpu_index = device[4] == ':' ? atoi(device + 5) : 0;

  pthread_t th[MAX_SLOTS], gth;
  const double c0 = cpu_seconds();
  b.t0 = fc_cli_now();
  if (b.gpu) pthread_create(&gth, NULL, gpu_sampler, &b);
  for (int i = 0; i < n_slots; i++) pthread_create(&th[i], NULL, slot, &b);
  for (int i = 0; i < n_slots; i++) pthread_join(th[i], NULL);
  const double wall = fc_cli_now() - b.t0, cpu = cpu_seconds() - c0;
  if (b.gpu) {
    __atomic_store_n(&b.stop, 1, __ATOMIC_RELAXED);
    pthread_join(gth, NULL);
  }
  if (b.err) {
    err = fc_error_set(b.err, "%s", b.detail);
    goto fail;
  }
  double video_s = 0, bytes = 0;
  lat = g_new(double, n_jobs);
  for (int i = 0; i < n_jobs; i++)
    video_s += b.jobs[i].res.seconds, lat[i] = b.jobs[i].done_at, bytes += (double)b.jobs[i].bytes;
  const double kbps = video_s > 0 ? bytes * 8 / video_s / 1000 : 0;
  qsort(lat, (size_t)n_jobs, sizeof *lat, cmp_double);
  const double p50 = lat[(n_jobs - 1) / 2], p95 = lat[(int)((n_jobs - 1) * 0.95 + 0.5)];
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const double gpu_util = b.gpu_samples ? b.gpu_util_sum / b.gpu_samples : -1;
  const char *pr = preset ? preset : "default";
  char gpu_txt[32] = "-";
  if (gpu_util >= 0) snprintf(gpu_txt, sizeof gpu_txt, "%.0f %%", gpu_util);
  if (json)
    printf("{\"bench\":\"bulk\",\"width\":%d,\"height\":%d,\"model\":\"%s\",\"preset\":\"%s\","
           "\"devices\":%d,\"jobs\":%d,\"slots\":%d,\"shards\":%lld,\"video_s\":%.2f,\"wall_s\":%.3f,"
           "\"x_realtime\":%.2f,\"latency_p50_s\":%.3f,\"latency_p95_s\":%.3f,"
           "\"cpu_s\":%.3f,\"x_realtime_per_core\":%.2f,\"cpu_cores_busy\":%.2f,"
           "\"cpu_util_pct\":%.1f,\"cores\":%ld,\"gpu_util_pct\":%.1f,\"gpu_mem_peak_mb\":%.0f,"
           "\"kbps\":%.0f}\n",
           fc_avatar_width(b.av), fc_avatar_height(b.av), fc_lipsync_name(ls[0]), pr, n_ls,
           n_jobs, n_slots, (long long)shards, video_s, wall, video_s / wall, p50, p95, cpu, video_s / cpu,
           cpu / wall, 100 * cpu / wall / cores, cores, gpu_util, b.gpu ? b.gpu_mem_peak / 1048576.0 : -1,
           kbps);
  else
    printf("bench bulk: %dx%d, model %s on %d device(s), x264 %s, %d jobs of %.0f s in %lld "
           "shards on %d slots\n"
           "  %.1f s of video (%.0f kbit/s) in %.2f s: %.1fx real time\n"
           "  job latency p50 %.2f s, p95 %.2f s\n"
           "  CPU %.2f cores busy of %ld (%.0f %%): %.1fx real time per core; GPU %s\n",
           fc_avatar_width(b.av), fc_avatar_height(b.av), fc_lipsync_name(ls[0]), n_ls, pr, n_jobs,
           n_jobs ? video_s / n_jobs : 0, (long long)shards, n_slots, video_s, kbps, wall,
           video_s / wall, p50, p95, cpu / wall, cores, 100 * cpu / wall / cores, video_s / cpu,
           gpu_txt);
  goto done;
fail:
  code = fc_cli_fail(err);
done:
  for (int i = 0; b.jobs && i < b.n_jobs; i++) {
    if (b.jobs[i].dir && !b.keep) g_rmdir(b.jobs[i].dir);
    g_free(b.jobs[i].dir);
    fc_video_plan_free(b.jobs[i].plan);
    fc_video_spec_free(b.jobs[i].spec);
  }
  if (root && !dir_arg) g_rmdir(root);
  g_free(b.jobs), g_free(root), g_free(script), g_free(lat);
  fc_gpustat_close(b.gpu);
  fc_lipsync_pool_destroy(pool);
  for (int k = 0; k < n_ls; k++) fc_lipsync_destroy(ls[k]);
  fc_avatar_destroy(b.av);
  pthread_mutex_destroy(&b.lock);
  return code;
}
