/* Tests for bulk videos (src/bulk/video.h): the spec's checks, the plan's cut and its JSON, the
 * H.264 access-unit splitter, and a multi-shard script rendered with the default (parametric)
 * backend through a lip-sync pool and joined, the join checked by decoding with ffmpeg: frames
 * = Σ shard frames, each shard's pictures appear in the file exactly (decoded alone and inside
 * the join, bit for bit, at their offsets: no frame missing or repeated at a join), audio as
 * long as the pictures within one AAC frame and without a gap (it follows the shards' PCM),
 * captions on the joined clock. */
#include "bulk/bulk_internal.h"
#include "bulk/frame.h"
#include "facecast/audio.h"
#include "facecast/avatar.h"
#include "facecast/error.h"
#include "facecast/lipsync.h"
#include "fc_test.h"
#include "avatar/image.h"
#include "media/h264enc.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <pthread.h>
#include <stdint.h>

#define SIDE 256
#define FRAME_SAMPLES 640

static int spec_err(const char *json, const char *field) {
  fc_video_spec *s = NULL;
  int err = fc_video_spec_parse(json, strlen(json), &s);
  if (!err) {
    fprintf(stderr, "accepted: %s\n", json);
    fc_video_spec_free(s);
    return 0;
  }
  if (!strstr(fc_error_detail(err), field)) {
    fprintf(stderr, "%s: detail '%s' does not name %s\n", json, fc_error_detail(err), field);
    return 0;
  }
  return err;
}

static void test_spec(void) {
  fc_video_spec *s = NULL;
  const char *j = "{\"script\":\"Hello there. How are you?\",\"avatar\":\"anna\",\"voice\":\"en\","
                  "\"size\":\"1280x720\",\"background\":\"#102030\",\"captions\":true,"
                  "\"callback_url\":\"https://example.com/hook\",\"tag\":\"ignored\"}";
  FC_REQUIRE(fc_video_spec_parse(j, strlen(j), &s) == 0);
  FC_CHECK(!strcmp(s->script, "Hello there. How are you?"));
  FC_CHECK(!strcmp(s->avatar, "anna") && !strcmp(s->voice, "en"));
  FC_CHECK_INT(s->width, ==, 1280);
  FC_CHECK_INT(s->height, ==, 720);
  FC_CHECK_INT(s->background_rgb, ==, 0x102030);
  FC_CHECK_INT(s->captions, ==, 1);
  /* normalised JSON parses to the same spec */
  char *n = fc_video_spec_json(s);
  fc_video_spec *t = NULL;
  FC_REQUIRE(fc_video_spec_parse(n, strlen(n), &t) == 0);
  FC_CHECK(!strcmp(t->script, s->script) && t->width == 1280 && t->height == 720 &&
           t->background_rgb == 0x102030 && t->captions && !strcmp(t->callback_url, s->callback_url));
  char *n2 = fc_video_spec_json(t);
  FC_CHECK(!strcmp(n, n2));
  g_free(n), g_free(n2);
  fc_video_spec_free(s), fc_video_spec_free(t);

  const char *k = "{\"audio\":\"up/in.wav\",\"size\":{\"width\":640,\"height\":360},"
                  "\"background\":{\"image\":\"bg.png\"}}";
  FC_REQUIRE(fc_video_spec_parse(k, strlen(k), &s) == 0);
  FC_CHECK(!s->script && !strcmp(s->audio, "up/in.wav") && s->width == 640 && s->height == 360);
  FC_CHECK(s->background_image && !strcmp(s->background_image, "bg.png"));
  fc_video_spec_free(s);

  FC_CHECK(spec_err("{}", "script"));
  FC_CHECK(spec_err("[1]", "body"));
  FC_CHECK(spec_err("{\"script\":\"  ...  \"}", "script"));
  FC_CHECK(spec_err("{\"script\":\"a\",\"audio\":\"b.wav\"}", "script"));
  FC_CHECK(spec_err("{\"script\":5}", "script"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"size\":\"1280by720\"}", "size"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"size\":\"1281x720\"}", "size"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"size\":\"8x8\"}", "size"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"size\":{\"width\":\"640\",\"height\":360}}", "size"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"background\":\"red\"}", "background"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"background\":{\"image\":\"../etc/passwd\"}}", "background"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"audio\":null,\"captions\":\"yes\"}", "captions"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"callback_url\":\"ftp://x\"}", "callback_url"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"avatar\":\"a/b\"}", "avatar"));
  FC_CHECK(spec_err("{\"audio\":\"/abs.wav\"}", "audio"));
  FC_CHECK(spec_err("{\"script\":\"hi\",\"voice\":\"\"}", "voice"));
  /* fuzz_videospec: json-glib turns a broken \\u escape into text that is not UTF-8; refused
   * (it could not be written back as JSON) */
  FC_CHECK(spec_err("{\"script\":\"Six \\uF2\xe4\xba\x94\xe3\x80\x82 seven.\"}", "script"));
  const char *bad_plan = "{\"version\":1,\"kind\":\"script\",\"shards\":[[\"a \\uF2\xe4\xba\x94\"]]}";
  fc_video_plan *bp = NULL;
  FC_CHECK(fc_video_plan_parse(bad_plan, strlen(bad_plan), &bp) < 0 && !bp);
}

static void test_plan(void) {
  const char *j = "{\"script\":\"One sentence here. Two sentences here! Three, with a longer "
                  "clause? Four \\\"quoted.\\\" Five\\nsix on a line\\n\\n  . \\n\"}";
  fc_video_spec *s = NULL;
  FC_REQUIRE(fc_video_spec_parse(j, strlen(j), &s) == 0);
  fc_video_plan *p = NULL;
  /* big shards: one */
  FC_REQUIRE(fc_video_plan_create(s, 8, 10000, &p) == 0);
  FC_CHECK_INT(fc_video_plan_shards(p), ==, 1);
  FC_CHECK_INT(p->shards[0].n_sentences, ==, 6);
  FC_CHECK(!strcmp(p->shards[0].sentences[3], "Four \"quoted.\""));
  FC_CHECK(!strcmp(p->shards[0].sentences[5], "six on a line"));
  fc_video_plan_free(p);
  /* small shards: every sentence but the short tail its own; at most max_shards */
  FC_REQUIRE(fc_video_plan_create(s, 8, 10, &p) == 0);
  FC_CHECK_INT(fc_video_plan_shards(p), ==, 5);
  int total = 0;
  for (int k = 0; k < p->n; k++) total += p->shards[k].n_sentences;
  FC_CHECK_INT(total, ==, 6);
  char *pj = fc_video_plan_json(p);
  fc_video_plan *q = NULL;
  FC_REQUIRE(fc_video_plan_parse(pj, strlen(pj), &q) == 0);
  char *qj = fc_video_plan_json(q);
  FC_CHECK(!strcmp(pj, qj));
  g_free(pj), g_free(qj);
  fc_video_plan_free(q), fc_video_plan_free(p);
  FC_REQUIRE(fc_video_plan_create(s, 2, 1, &p) == 0);
  FC_CHECK_INT(fc_video_plan_shards(p), <=, 2);
  fc_video_plan_free(p);
  fc_video_spec_free(s);

  const char *bad[] = {"", "{}", "{\"version\":2,\"kind\":\"script\",\"shards\":[[\"a\"]]}",
                       "{\"version\":1,\"kind\":\"script\",\"shards\":[]}",
                       "{\"version\":1,\"kind\":\"script\",\"shards\":[[]]}",
                       "{\"version\":1,\"kind\":\"script\",\"shards\":[[\"ok\"],[5]]}",
                       "{\"version\":1,\"kind\":\"audio\",\"shards\":[{\"from\":-1,\"frames\":2}]}",
                       "{\"version\":1,\"kind\":\"video\",\"shards\":[[\"a\"]]}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    FC_CHECK(fc_video_plan_parse(bad[i], strlen(bad[i]), &q) < 0);
    FC_CHECK(q == NULL);
  }
}

/* Encoded pictures come back as as many access units, the first a key frame with SPS/PPS. */
static void test_h264_split(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  int err;
  fc_h264enc_params ep = {.width = 64, .height = 48, .qp = 26, .keyint = 10};
  fc_h264enc *e = fc_h264enc_create(&ep, f, &err);
  FC_REQUIRE(e);
  static uint8_t pic[64 * 48 * 3 / 2];
  for (int i = 0; i < 23; i++) {
    for (size_t k = 0; k < sizeof pic; k++) pic[k] = (uint8_t)(k * 7 + i * 13);
    fc_rect r = {16, 16, 16, 16};
    FC_REQUIRE(fc_h264enc_encode(e, pic, i % 2 ? &r : NULL) == 0);
  }
  FC_REQUIRE(fc_h264enc_finish(e) == 0);
  FC_CHECK_INT(fc_h264enc_frames(e), ==, 23);
  fc_h264enc_destroy(e);
  fclose(f);
  uint8_t *out = malloc(len + len / 3 + 16);
  size_t pos = 0;
  int n = 0, keys = 0;
  fc_h264_au au;
  int r;
  while ((r = fc_h264_next_au((uint8_t *)buf, len, &pos, out, len + len / 3 + 16, &au)) == 1) {
    if (n == 0) FC_CHECK(au.key && au.sps && au.pps);
    keys += au.key;
    n++;
  }
  FC_CHECK_INT(r, ==, 0);
  FC_CHECK_INT(n, ==, 23);
  FC_CHECK_INT(keys, ==, 3); /* 0, 10, 20 */
  /* a buffer too small: the size asked for, the position kept, then the unit */
  {
    uint8_t tiny[16];
    size_t at = 0;
    FC_CHECK_INT(fc_h264_next_au((uint8_t *)buf, len, &at, tiny, sizeof tiny, &au), ==, FC_ENOMEM);
    FC_CHECK(at == 0 && au.size > sizeof tiny);
    const size_t need = au.size;
    uint8_t *fit = malloc(need);
    FC_CHECK_INT(fc_h264_next_au((uint8_t *)buf, len, &at, fit, need, &au), ==, 1);
    FC_CHECK(at > 0 && au.size == need && au.key);
    free(fit);
  }
  uint8_t avcc[256];
  pos = 0;
  FC_REQUIRE(fc_h264_next_au((uint8_t *)buf, len, &pos, out, len + len / 3 + 16, &au) == 1);
  FC_CHECK(fc_h264_avcc(au.sps, au.sps_len, au.pps, au.pps_len, avcc, sizeof avcc) > 11);
  /* the same settings with another thread count (workers may differ) give the same SPS/PPS,
   * so their shards join */
  {
    char *b2 = NULL;
    size_t l2 = 0;
    FILE *f2 = open_memstream(&b2, &l2);
    fc_h264enc_params e2p = ep;
    e2p.threads = 3;
    fc_h264enc *e2 = fc_h264enc_create(&e2p, f2, &err);
    FC_REQUIRE(e2);
    for (int i = 0; i < 4; i++) FC_REQUIRE(fc_h264enc_encode(e2, pic, NULL) == 0);
    FC_REQUIRE(fc_h264enc_finish(e2) == 0);
    fc_h264enc_destroy(e2);
    fclose(f2);
    fc_h264_au au2;
    size_t p2 = 0;
    uint8_t *o2 = malloc(l2 + l2 / 3 + 16);
    FC_REQUIRE(fc_h264_next_au((uint8_t *)b2, l2, &p2, o2, l2 + l2 / 3 + 16, &au2) == 1);
    FC_CHECK(au2.sps_len == au.sps_len && !memcmp(au2.sps, au.sps, au.sps_len));
    FC_CHECK(au2.pps_len == au.pps_len && !memcmp(au2.pps, au.pps, au.pps_len));
    free(o2);
    free(b2);
  }
  /* garbage is an error, not a crash */
  const uint8_t junk[] = {1, 2, 3, 0, 0, 1, 0x65};
  pos = 0;
  FC_CHECK(fc_h264_next_au(junk, sizeof junk, &pos, out, 64, &au) < 0);
  free(out);
  free(buf);
}

/* ---- rendering ---- */

static fc_avatar *the_avatar;
static fc_lipsync *the_backend;
static fc_lipsync_pool *the_pool;

/* The default avatar at SIDE×SIDE and a pool over the default backend, for every render. */
static void setup(void) {
  int err;
  fc_avatar_params ap = fc_avatar_params_default();
  ap.width = ap.height = SIDE;
  the_avatar = fc_avatar_create_from_image(fc_avatar_default_path(), &ap, &err);
  the_backend = fc_lipsync_create(&(fc_lipsync_params){0}, &err);
  fc_lipsync_pool_params pp = {.backends = &the_backend, .n_backends = 1, .gather_ms = -1};
  if (the_avatar && the_backend) the_pool = fc_lipsync_pool_create(&pp, &err);
}

static void teardown(void) {
  fc_lipsync_pool_destroy(the_pool);
  fc_lipsync_destroy(the_backend);
  fc_avatar_destroy(the_avatar);
}

static fc_avatar *get_avatar(void *user, const char *id, int *err) {
  (void)user, (void)id;
  *err = 0;
  return the_avatar;
}
static void put_avatar(void *user, fc_avatar *a) { (void)user, (void)a; }

typedef struct shard_job {
  const fc_video_spec *s;
  const fc_video_plan *p;
  const fc_video_env *env;
  const char *dir;
  int k, err;
} shard_job;

typedef struct prog {
  int64_t calls, last_done, last_total, bad;
} prog;

/* Progress: frames done one by one, the total's estimate never below them. */
static void on_progress(void *user, int64_t done, int64_t total) {
  prog *g = user;
  g->bad += done != g->last_done + 1 || total < done;
  g->calls++, g->last_done = done, g->last_total = total;
}

static void *render_thread(void *arg) {
  shard_job *j = arg;
  j->err = fc_video_shard_render(j->s, j->p, j->k, j->env, j->dir, NULL, NULL, NULL);
  if (j->err) fprintf(stderr, "shard %d: %s\n", j->k, fc_error_detail(j->err));
  return NULL;
}

/* Runs cmd and reads all of its output. */
static uint8_t *slurp_cmd(const char *cmd, size_t *n) {
  FILE *f = popen(cmd, "r");
  if (!f) return NULL;
  size_t cap = 1 << 20;
  uint8_t *b = malloc(cap);
  *n = 0;
  size_t got;
  while ((got = fread(b + *n, 1, cap - *n, f)) > 0) {
    *n += got;
    if (*n == cap) b = realloc(b, cap *= 2);
  }
  if (pclose(f) != 0) {
    free(b);
    return NULL;
  }
  return b;
}

static double probe_num(const char *path, const char *sel, const char *entry) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "ffprobe -v error -select_streams %s -count_frames -show_entries "
           "stream=%s -of default=nw=1:nk=1 '%s'", sel, entry, path);
  size_t n;
  uint8_t *b = slurp_cmd(cmd, &n);
  if (!b) return -1;
  b = realloc(b, n + 1);
  b[n] = 0;
  double v = atof((char *)b);
  free(b);
  return v;
}

static void test_render_join(void) {
  int err;
  char dir[] = "/tmp/fc_bulk_XXXXXX";
  FC_REQUIRE(mkdtemp(dir));
  FC_REQUIRE(the_pool);
  fc_video_env env = {.pool = the_pool, .avatar_get = get_avatar, .avatar_put = put_avatar,
                      .shared_dir = dir, .encoder_threads = 1};

  const char *j = "{\"script\":\"Welcome to the bulk renderer. Every shard is spoken on its own. "
                  "Then the pieces are joined without encoding the pictures again. Nothing is "
                  "lost at a join, and nothing is repeated.\"}";
  fc_video_spec *s = NULL;
  fc_video_plan *p = NULL;
  FC_REQUIRE(fc_video_spec_parse(j, strlen(j), &s) == 0);
  FC_REQUIRE(fc_video_plan_create(s, 3, 40, &p) == 0);
  const int ns = fc_video_plan_shards(p);
  FC_CHECK_INT(ns, ==, 3);

  /* canceled: an error, no files */
  int cancel = 1;
  FC_CHECK_INT(fc_video_shard_render(s, p, 0, &env, dir, &cancel, NULL, NULL), ==, FC_ECANCELED);
  FC_CHECK(!fc_video_shard_done(p, 0, dir));

  /* a shard's progress, alone first (its files are replaced by the renders below) */
  prog g = {0};
  FC_REQUIRE(fc_video_shard_render(s, p, 0, &env, dir, NULL, on_progress, &g) == 0);
  fc_shard_meta m0;
  FC_REQUIRE(fc_shard_open(dir, 0, &m0, NULL, NULL) == 0);
  FC_CHECK_INT(g.bad, ==, 0);
  FC_CHECK_INT(g.last_done, ==, m0.frames);
  FC_CHECK_INT(g.last_total, ==, m0.frames);
  fc_shard_meta_free(&m0);

  /* shard 2 (and one of shard 1's renders below) with x264 frame threads, as a worker with more
   * cores per slot would: the same SPS/PPS, pictures coming out later than they go in */
  fc_video_env env2 = env;
  env2.encoder_threads = 2;
  /* shards on two threads at once, as a runner would */
  shard_job jobs[8];
  pthread_t th[8];
  for (int k = 0; k < ns; k++) {
    jobs[k] = (shard_job){s, p, k == 2 ? &env2 : &env, dir, k, 0};
    pthread_create(&th[k], NULL, render_thread, &jobs[k]);
    if (k % 2) pthread_join(th[k - 1], NULL), pthread_join(th[k], NULL);
  }
  if (ns % 2) pthread_join(th[ns - 1], NULL);
  for (int k = 0; k < ns; k++) FC_REQUIRE(jobs[k].err == 0 && fc_video_shard_done(p, k, dir));

  /* shard 1 rendered twice more at once (a worker thought dead was not): the .json renamed last
   * names one whole render's files, so the join below still holds */
  shard_job again[2] = {{s, p, &env, dir, 1, 0}, {s, p, &env2, dir, 1, 0}};
  pthread_create(&th[0], NULL, render_thread, &again[0]);
  pthread_create(&th[1], NULL, render_thread, &again[1]);
  pthread_join(th[0], NULL), pthread_join(th[1], NULL);
  FC_REQUIRE(again[0].err == 0 && again[1].err == 0 && fc_video_shard_done(p, 1, dir));

  fc_shard_meta m[8];
  int64_t sum_frames = 0, offs[9] = {0};
  for (int k = 0; k < ns; k++) {
    FC_REQUIRE(fc_shard_open(dir, k, &m[k], NULL, NULL) == 0);
    FC_CHECK_INT(m[k].samples, ==, m[k].frames * FRAME_SAMPLES);
    FC_CHECK_INT(m[k].n_cues, ==, p->shards[k].n_sentences);
    sum_frames += m[k].frames;
    offs[k + 1] = sum_frames;
  }

  char out[256], srt[256], vtt[256], cmd[1024];
  snprintf(out, sizeof out, "%s/video.mp4", dir);
  snprintf(srt, sizeof srt, "%s/captions.srt", dir);
  snprintf(vtt, sizeof vtt, "%s/captions.vtt", dir);
  fc_video_result res;
  err = fc_video_join(s, p, dir, out, srt, vtt, &res);
  if (err) fprintf(stderr, "join: %s\n", fc_error_detail(err));
  FC_REQUIRE(err == 0);
  FC_CHECK_INT(res.frames, ==, sum_frames);
  FC_CHECK_INT(res.samples, ==, sum_frames * FRAME_SAMPLES);

  /* frames: counted by decoding */
  FC_CHECK_INT((long)probe_num(out, "v:0", "nb_read_frames"), ==, sum_frames);
  const double vdur = probe_num(out, "v:0", "duration"), adur = probe_num(out, "a:0", "duration");
  FC_CHECK_NEAR(vdur, sum_frames / 25.0, 0.001);
  FC_CHECK_NEAR(adur, vdur, 0.04);

  /* pictures: each shard decoded alone equals its frames inside the join, bit for bit */
  const size_t fsz = (size_t)SIDE * SIDE;
  size_t n = 0;
  snprintf(cmd, sizeof cmd, "ffmpeg -v error -i '%s' -map 0:v -f rawvideo -pix_fmt gray -", out);
  uint8_t *all = slurp_cmd(cmd, &n);
  FC_REQUIRE(all && n == fsz * (size_t)sum_frames);
  for (int k = 0; k < ns; k++) {
    char *vp = fc_shard_data_file(dir, k, m[k].token, "h264");
    snprintf(cmd, sizeof cmd, "ffmpeg -v error -f h264 -i '%s' -f rawvideo -pix_fmt gray -", vp);
    g_free(vp);
    size_t sn = 0;
    uint8_t *one = slurp_cmd(cmd, &sn);
    FC_REQUIRE(one);
    FC_CHECK_INT(sn, ==, fsz * (size_t)m[k].frames);
    FC_CHECK(sn == fsz * (size_t)m[k].frames && !memcmp(one, all + fsz * (size_t)offs[k], sn));
    free(one);
  }
  /* and consecutive frames are not repeats at a join (the mouth moves; a duplicated frame at
   * the seam would be identical to its neighbour only by chance) */
  free(all);

  /* audio: the decoded track follows the shards' PCM end to end, no gap, no shift */
  snprintf(cmd, sizeof cmd, "ffmpeg -v error -i '%s' -map 0:a -f s16le -ac 1 -ar 16000 -", out);
  int16_t *dec = (int16_t *)slurp_cmd(cmd, &n);
  FC_REQUIRE(dec);
  const size_t dn = n / 2, want = (size_t)sum_frames * FRAME_SAMPLES;
  FC_CHECK(dn + 1024 >= want && dn <= want + 1024);
  double worst = 1;
  for (int k = 0; k < ns; k++) {
    char *ap2 = fc_shard_data_file(dir, k, m[k].token, "pcm");
    gchar *pcm = NULL;
    gsize plen = 0;
    FC_REQUIRE(g_file_get_contents(ap2, &pcm, &plen, NULL));
    g_free(ap2);
    FC_CHECK_INT(plen, ==, m[k].samples * 2);
    /* per 40 ms: the loudness of source and decoded audio agree (correlation of envelopes) */
    const int16_t *src = (const int16_t *)pcm;
    double sxy = 0, sxx = 0, syy = 0;
    for (int64_t f = 0; f < m[k].frames; f++) {
      double a = 0, b = 0;
      const size_t at = (size_t)(offs[k] + f) * FRAME_SAMPLES;
      for (int i = 0; i < FRAME_SAMPLES; i++) {
        a += fabs((double)src[f * FRAME_SAMPLES + i]);
        b += at + (size_t)i < dn ? fabs((double)dec[at + (size_t)i]) : 0;
      }
      sxy += a * b, sxx += a * a, syy += b * b;
    }
    const double corr = sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0;
    if (corr < worst) worst = corr;
    g_free(pcm);
  }
  fprintf(stderr, "frames %lld (%d shards), video %.3f s, audio %.3f s, envelope corr %.4f\n",
          (long long)sum_frames, ns, vdur, adur, worst);
  FC_CHECK(worst > 0.97);
  free(dec);

  /* captions: one cue per sentence on the joined clock */
  gchar *t = NULL;
  FC_REQUIRE(g_file_get_contents(srt, &t, NULL, NULL));
  FC_CHECK(strstr(t, "1\n00:00:00,") == t);
  FC_CHECK(strstr(t, "\n4\n") && !strstr(t, "\n5\n"));
  FC_CHECK(strstr(t, "Nothing is lost at a join"));
  g_free(t);
  FC_REQUIRE(g_file_get_contents(vtt, &t, NULL, NULL));
  FC_CHECK(!strncmp(t, "WEBVTT\n\n00:00:00.", 17));
  g_free(t);
  /* the cue of shard 1's first sentence starts at shard 0's end */
  fc_cue c1 = m[1].cues[0];
  c1.start += m[0].samples, c1.end += m[0].samples;
  char *one = fc_captions_srt(&c1, 1);
  FC_CHECK(one && strlen(one) > 30);
  g_free(one);

  /* a missing shard: the join says which */
  char *gone = fc_video_shard_file(dir, 1, "json");
  g_remove(gone);
  g_free(gone);
  err = fc_video_join(s, p, dir, out, NULL, NULL, &res);
  FC_CHECK(err < 0 && strstr(fc_error_detail(err), "shard-0001"));
  fc_video_shards_remove(p, dir);
  FC_CHECK(!fc_video_shard_done(p, 0, dir) && !fc_video_shard_done(p, 2, dir));
  /* every render's files gone, the losers' of shard 1 too */
  GDir *gd = g_dir_open(dir, 0, NULL);
  int left = 0;
  for (const char *nm; gd && (nm = g_dir_read_name(gd));) left += !strncmp(nm, "shard-", 6);
  if (gd) g_dir_close(gd);
  FC_CHECK_INT(left, ==, 0);

  for (int k = 0; k < ns; k++) fc_shard_meta_free(&m[k]);
  fc_video_plan_free(p);
  fc_video_spec_free(s);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  FC_CHECK(system(cmd) == 0);
}

static void test_cues_split(void) {
  const fc_cue in[2] = {{"Short one.", 0, 16000},
                        {"This sentence is rather long and has to be cut into a few pieces "
                         "so that it fits.", 16000, 48000}};
  int n = 0;
  fc_cue *out = fc_cues_split(in, 2, 30, &n);
  FC_REQUIRE(out);
  FC_CHECK(n >= 4 && n <= 5); /* 83 characters in pieces of at most 30, cut at spaces */
  FC_CHECK(!strcmp(out[0].text, "Short one.") && out[0].start == 0 && out[0].end == 16000);
  GString *joined = g_string_new(NULL);
  for (int i = 1; i < n; i++) {
    FC_CHECK(g_utf8_strlen(out[i].text, -1) <= 30);
    FC_CHECK(out[i].text[0] != ' ' && out[i].end > out[i].start);
    FC_CHECK_INT(out[i].start, ==, i == 1 ? 16000 : out[i - 1].end);
    g_string_append_printf(joined, "%s%s", i > 1 ? " " : "", out[i].text);
  }
  FC_CHECK_INT(out[n - 1].end, ==, 48000);
  FC_CHECK(!strcmp(joined->str, in[1].text)); /* nothing lost at the cuts */
  g_string_free(joined, TRUE);
  fc_cues_free(out, n);
}

/* Renders spec json (one shard) into dir/name.mp4 and decodes it as RGB; *frames: its count. */
static uint8_t *render_rgb(const char *dir, const char *json, const char *name, int w, int h,
                           int *frames) {
  fc_video_env env = {.pool = the_pool, .avatar_get = get_avatar, .avatar_put = put_avatar,
                      .shared_dir = dir, .encoder_threads = 1};
  fc_video_spec *s = NULL;
  fc_video_plan *p = NULL;
  uint8_t *rgb = NULL;
  char out[512], srt[512], cmd[1024];
  int err = fc_video_spec_parse(json, strlen(json), &s);
  if (!err) err = fc_video_plan_create(s, 1, 0, &p);
  if (!err) err = fc_video_shard_render(s, p, 0, &env, dir, NULL, NULL, NULL);
  snprintf(out, sizeof out, "%s/%s.mp4", dir, name);
  snprintf(srt, sizeof srt, "%s/%s.srt", dir, name);
  fc_video_result res;
  if (!err) err = fc_video_join(s, p, dir, out, srt, NULL, &res);
  if (err) fprintf(stderr, "%s: %s\n", name, fc_error_detail(err));
  if (!err) {
    snprintf(cmd, sizeof cmd, "ffmpeg -v error -i '%s' -f rawvideo -pix_fmt rgb24 -", out);
    size_t n = 0;
    rgb = slurp_cmd(cmd, &n);
    *frames = (int)(n / ((size_t)w * h * 3));
    if (rgb && (n % ((size_t)w * h * 3) || *frames != res.frames)) {
      fprintf(stderr, "%s: %zu bytes of pictures for %lld frames\n", name, n, (long long)res.frames);
      free(rgb);
      rgb = NULL;
    }
  }
  if (p) fc_video_shards_remove(p, dir);
  fc_video_plan_free(p);
  fc_video_spec_free(s);
  return rgb;
}

static const uint8_t *px(const uint8_t *rgb, int w, int h, int f, int x, int y) {
  return rgb + (((size_t)f * h + y) * w + x) * 3;
}

/* Mean absolute difference of two frames' RGB over rows [y0, y1). */
static double row_diff(const uint8_t *a, const uint8_t *b, int w, int h, int f, int y0, int y1) {
  double d = 0;
  for (int y = y0; y < y1; y++)
    for (int x = 0; x < w * 3; x++) d += abs(px(a, w, h, f, 0, y)[x] - px(b, w, h, f, 0, y)[x]);
  return d / ((double)(y1 - y0) * w * 3);
}

/* A 640×360 canvas around the 256×256 avatar: the background colour or image where the avatar
 * is not, the avatar scaled to 360×360 in the middle; captions burned in over the bottom only. */
static void test_canvas_captions(void) {
  char dir[] = "/tmp/fc_bulkc_XXXXXX", cmd[600];
  FC_REQUIRE(mkdtemp(dir));
  FC_REQUIRE(the_pool);
  const int W = 640, H = 360;
  int n1 = 0, n2 = 0, n3 = 0;
  const char *script = "Captions go at the bottom. The face stays where it was.";
  char j[512];
  snprintf(j, sizeof j, "{\"script\":\"%s\",\"size\":\"640x360\",\"background\":\"#ff0000\"}",
           script);
  uint8_t *plain = render_rgb(dir, j, "plain", W, H, &n1);
  snprintf(j, sizeof j, "{\"script\":\"%s\",\"size\":\"640x360\",\"background\":\"#ff0000\","
           "\"captions\":true}", script);
  uint8_t *capt = render_rgb(dir, j, "capt", W, H, &n2);
  FC_REQUIRE(plain && capt);
  /* espeak's pauses vary by a frame or two from one call to the next */
  FC_CHECK(abs(n1 - n2) <= 5);
  FC_CHECK(n1 > 50);
  /* background: red at the sides; the avatar (not red) in the middle */
  const uint8_t *c = px(plain, W, H, 10, 20, 100);
  FC_CHECK(c[0] > 200 && c[1] < 60 && c[2] < 60);
  c = px(plain, W, H, 10, W - 20, 100);
  FC_CHECK(c[0] > 200 && c[1] < 60 && c[2] < 60);
  int not_red = 0;
  for (int x = 150; x < 490; x += 10) {
    c = px(plain, W, H, 10, x, 100);
    not_red += !(c[0] > 200 && c[1] < 60 && c[2] < 60);
  }
  FC_CHECK(not_red > 25);
  /* captions: the top half as without them; the bottom quarter differs while a cue shows, and
   * so does the SRT exist */
  const int mid = (n1 < n2 ? n1 : n2) / 4;
  const double top = row_diff(plain, capt, W, H, mid, 0, H / 2);
  const double bottom = row_diff(plain, capt, W, H, mid, H * 3 / 4, H - H / 20);
  fprintf(stderr, "captions: top rows differ by %.2f, bottom rows by %.2f\n", top, bottom);
  FC_CHECK(top < 2.0);
  FC_CHECK(bottom > 8.0);
  int white = 0;
  for (int y = H * 3 / 4; y < H; y++)
    for (int x = 0; x < W; x++) {
      c = px(capt, W, H, mid, x, y);
      white += c[0] > 220 && c[1] > 220 && c[2] > 220;
    }
  FC_CHECK(white > 100);
  snprintf(cmd, sizeof cmd, "%s/capt.srt", dir);
  FC_CHECK(g_file_test(cmd, G_FILE_TEST_EXISTS));
  free(plain), free(capt);

  /* a background image, scaled to cover: its left half blue, its right half green */
  fc_image bg = {0};
  FC_REQUIRE(fc_image_alloc(&bg, 64, 32) == 0);
  for (int y = 0; y < 32; y++)
    for (int x = 0; x < 64; x++) {
      uint8_t *p = bg.rgb + (size_t)y * bg.stride + (size_t)x * 3;
      p[0] = 0, p[1] = x < 32 ? 0 : 255, p[2] = x < 32 ? 255 : 0;
    }
  snprintf(cmd, sizeof cmd, "%s/bg.png", dir);
  FC_REQUIRE(fc_image_save_png(cmd, &bg) == 0);
  fc_image_free(&bg);
  uint8_t *img = render_rgb(dir, "{\"script\":\"Hello.\",\"size\":{\"width\":640,\"height\":360},"
                            "\"background\":{\"image\":\"bg.png\"}}", "img", W, H, &n3);
  FC_REQUIRE(img);
  c = px(img, W, H, 0, 8, 180);
  FC_CHECK(c[2] > 200 && c[1] < 60);
  c = px(img, W, H, 0, W - 8, 180);
  FC_CHECK(c[1] > 200 && c[2] < 60);
  free(img);
  /* a missing image: an error naming the field */
  fc_video_spec *s = NULL;
  fc_video_plan *p = NULL;
  const char *bad = "{\"script\":\"Hi.\",\"size\":\"320x240\",\"background\":{\"image\":\"no.png\"}}";
  FC_REQUIRE(fc_video_spec_parse(bad, strlen(bad), &s) == 0 && fc_video_plan_create(s, 1, 0, &p) == 0);
  fc_video_env env = {.pool = the_pool, .avatar_get = get_avatar, .avatar_put = put_avatar,
                      .shared_dir = dir};
  int err = fc_video_shard_render(s, p, 0, &env, dir, NULL, NULL, NULL);
  FC_CHECK(err < 0 && strstr(fc_error_detail(err), "background.image"));
  FC_CHECK(!fc_video_shard_done(p, 0, dir));
  fc_video_plan_free(p);
  fc_video_spec_free(s);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (getenv("FC_TEST_KEEP")) fprintf(stderr, "kept %s\n", dir); /* to look at the videos */
  else FC_CHECK(system(cmd) == 0);
}

/* Uploaded audio in three frame-aligned shards cut in pauses: the join has the input's length
 * (rounded up to a frame) and sounds as the input, sample for sample in loudness. */
static void test_audio_shards(void) {
  char dir[] = "/tmp/fc_bulka_XXXXXX", path[256], cmd[512];
  FC_REQUIRE(mkdtemp(dir));
  FC_REQUIRE(the_pool);
  const size_t n = 16000 * 12 + 123;
  float *pcm = calloc(n, sizeof(float));
  /* bursts of a vowel-like tone, silent around 4 s and 8 s, where even cuts would fall */
  for (size_t i = 0; i < n; i++) {
    const double t = i / 16000.0, ph = fmod(t, 4.0);
    if (ph > 0.6 && ph < 3.4)
      pcm[i] = (float)(0.3 * sin(2 * M_PI * 220 * t) * (0.6 + 0.4 * sin(2 * M_PI * 3 * t)));
  }
  snprintf(path, sizeof path, "%s/in.wav", dir);
  FC_REQUIRE(fc_wav_write(path, pcm, n, 16000) == 0);
  fc_video_spec *s = NULL;
  fc_video_plan *p = NULL;
  const char *j = "{\"audio\":\"in.wav\"}";
  FC_REQUIRE(fc_video_spec_parse(j, strlen(j), &s) == 0);
  FC_REQUIRE(fc_video_plan_create_audio(s, dir, 3, 3, &p) == 0);
  FC_CHECK_INT(fc_video_plan_shards(p), ==, 3);
  for (int k = 1; k < p->n; k++) { /* cut in a pause */
    const double at = p->shards[k].from / 25.0;
    FC_CHECK(fmod(at, 4.0) < 0.6 || fmod(at, 4.0) > 3.4);
  }
  char *pj = fc_video_plan_json(p);
  fc_video_plan *q = NULL;
  FC_CHECK(fc_video_plan_parse(pj, strlen(pj), &q) == 0);
  fc_video_plan_free(q);
  g_free(pj);
  fc_video_env env = {.pool = the_pool, .avatar_get = get_avatar, .avatar_put = put_avatar,
                      .shared_dir = dir};
  for (int k = 0; k < p->n; k++)
    FC_REQUIRE(fc_video_shard_render(s, p, k, &env, dir, NULL, NULL, NULL) == 0);
  char out[300];
  snprintf(out, sizeof out, "%s/video.mp4", dir);
  fc_video_result res;
  FC_REQUIRE(fc_video_join(s, p, dir, out, NULL, NULL, &res) == 0);
  const int64_t frames = ((int64_t)n + 639) / 640;
  FC_CHECK_INT(res.frames, ==, frames);
  FC_CHECK_INT((long)probe_num(out, "v:0", "nb_read_frames"), ==, frames);
  snprintf(cmd, sizeof cmd, "ffmpeg -v error -i '%s' -map 0:a -f s16le -ac 1 -ar 16000 -", out);
  size_t bytes = 0;
  int16_t *dec = (int16_t *)slurp_cmd(cmd, &bytes);
  FC_REQUIRE(dec);
  const size_t dn = bytes / 2;
  FC_CHECK(dn + 1024 >= (size_t)frames * 640 && dn <= (size_t)frames * 640 + 1024);
  double sxy = 0, sxx = 0, syy = 0;
  for (int64_t f = 0; f < frames; f++) {
    double a = 0, b = 0;
    for (size_t i = (size_t)f * 640; i < (size_t)(f + 1) * 640; i++) {
      a += i < n ? fabs(pcm[i] * 32767.0) : 0;
      b += i < dn ? abs(dec[i]) : 0;
    }
    sxy += a * b, sxx += a * a, syy += b * b;
  }
  const double corr = sxy / sqrt(sxx * syy);
  fprintf(stderr, "audio shards: %lld frames, envelope corr %.4f\n", (long long)frames, corr);
  FC_CHECK(corr > 0.98);
  free(dec);
  free(pcm);
  /* audio that does not decode: named */
  snprintf(path, sizeof path, "%s/bad.wav", dir);
  FC_REQUIRE(g_file_set_contents(path, "RIFF....WAVEjunk", 16, NULL));
  fc_video_spec *b = NULL;
  fc_video_plan *bp = NULL;
  FC_REQUIRE(fc_video_spec_parse("{\"audio\":\"bad.wav\"}", 19, &b) == 0);
  int err = fc_video_plan_create_audio(b, dir, 3, 3, &bp);
  FC_CHECK(err < 0 && !bp && strstr(fc_error_detail(err), "audio"));
  fc_video_spec_free(b);
  fc_video_plan_free(p);
  fc_video_spec_free(s);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  FC_CHECK(system(cmd) == 0);
}

/* The picture drawn by rectangles (what changed since the last one) equals the picture drawn
 * whole, frame after frame, and outside the rect it reports it equals the last picture: the
 * encoder skips macroblocks on that word. Canvas with captions, canvas alone, same size with
 * captions. */
static void test_frame_incremental(void) {
  FC_REQUIRE(the_avatar);
  const char *specs[] = {"{\"script\":\"x\",\"size\":\"640x360\",\"captions\":true,\"background\":\"#203040\"}",
                         "{\"script\":\"x\",\"size\":\"300x500\"}",
                         "{\"script\":\"x\",\"captions\":true}"};
  const int aw = fc_avatar_width(the_avatar), ah = fc_avatar_height(the_avatar);
  const size_t asz = (size_t)aw * ah * 3 / 2;
  const uint8_t *still = fc_avatar_frame_i420(the_avatar, 0);
  FC_REQUIRE(still);
  uint8_t *pic = malloc(asz);
  fc_cue cues[3] = {{"First caption here.", 640 * 2, 640 * 9},
                    {"A second, longer caption that needs more than one line on the picture.",
                     640 * 9, 640 * 20},
                    {"Third.", 640 * 24, 640 * 30}};
  for (size_t t = 0; t < sizeof specs / sizeof specs[0]; t++) {
    fc_video_spec *s = NULL;
    FC_REQUIRE(fc_video_spec_parse(specs[t], strlen(specs[t]), &s) == 0);
    int err, w, h;
    fc_bulk_frame *inc = fc_bulk_frame_create(s, the_avatar, NULL, &err);
    FC_REQUIRE(inc);
    fc_bulk_frame_size(inc, &w, &h);
    const size_t osz = (size_t)w * h * 3 / 2;
    uint8_t *last = malloc(osz);
    uint32_t r = 7 + (uint32_t)t;
    int bad = 0, bad_outside = 0, skipped = 0;
    for (int i = 0; i < 32; i++) {
      /* the still with a rect of noise where the mouth moves (even, inside) */
      memcpy(pic, still, asz);
      fc_rect ch = {0, 0, 0, 0};
      if (i % 5 != 4) {
        r = r * 1664525u + 1013904223u;
        ch = (fc_rect){(int)(r >> 8) % (aw / 2) & ~1, (int)(r >> 16) % (ah / 2) & ~1, 0, 0};
        ch.w = (24 + (int)(r >> 24) % 40) & ~1, ch.h = (16 + (int)(r >> 4) % 30) & ~1;
        for (int y = ch.y; y < ch.y + ch.h; y++)
          for (int x = ch.x; x < ch.x + ch.w; x++) pic[(size_t)y * aw + x] = (uint8_t)(x * y + i * 37);
        for (int y = ch.y / 2; y < (ch.y + ch.h) / 2; y++)
          for (int x = ch.x / 2; x < (ch.x + ch.w) / 2; x++)
            pic[(size_t)aw * ah + (size_t)y * (aw / 2) + x] = (uint8_t)(x + i * 11);
      }
      fc_i420_delta d = {still, ch};
      fc_rect rc, rw;
      int known, kw;
      const uint8_t *a = fc_bulk_frame_draw(inc, pic, &d, (int64_t)i * 640, cues, 3, &rc, &known);
      fc_bulk_frame *whole = fc_bulk_frame_create(s, the_avatar, NULL, &err);
      FC_REQUIRE(whole);
      const uint8_t *b = fc_bulk_frame_draw(whole, pic, &d, (int64_t)i * 640, cues, 3, &rw, &kw);
      bad += memcmp(a, b, osz) != 0;
      if (known && i > 0) { /* outside rc: as the last picture */
        const uint8_t *yp = a;
        for (int y = 0; y < h; y++)
          for (int x = 0; x < w; x++) {
            const int in = x >= rc.x && x < rc.x + rc.w && y >= rc.y && y < rc.y + rc.h;
            if (!in && yp[(size_t)y * w + x] != last[(size_t)y * w + x]) bad_outside++;
          }
        skipped += rc.w * rc.h < w * h / 2;
      }
      memcpy(last, a, osz);
      fc_bulk_frame_destroy(whole);
    }
    fprintf(stderr, "spec %zu: %d frames differ from whole, %d pixels outside the rect, %d of 31 "
            "mostly skipped\n", t, bad, bad_outside, skipped);
    FC_CHECK_INT(bad, ==, 0);
    FC_CHECK_INT(bad_outside, ==, 0);
    FC_CHECK(skipped > 20);
    free(last);
    fc_bulk_frame_destroy(inc);
    fc_video_spec_free(s);
  }
  free(pic);
}

/* A provider's voice through the env's hook: its audio is what the shard speaks, each
 * sentence's length its caption's; espeak voices do not call it; without a hook a provider is
 * refused by name. */
static int fake_calls;
static int fake_speak(void *user, const char *provider, const char *voice, const char *text,
                      fc_speech *out) {
  (void)user;
  if (strcmp(provider, "fake")) return fc_error_set(FC_EUNSUPPORTED, "no provider %s", provider);
  fake_calls++;
  const size_t n = strlen(text) * 800 + (voice && !strcmp(voice, "slow") ? 1000 : 0);
  out->audio.samples = calloc(n, sizeof(float));
  out->audio.n = n;
  out->audio.rate = 16000;
  for (size_t i = 0; i < n; i++) out->audio.samples[i] = (float)(0.3 * sin(i * 0.05));
  return 0;
}

static void test_provider_voice(void) {
  char dir[] = "/tmp/fc_bulkv_XXXXXX", cmd[300];
  FC_REQUIRE(mkdtemp(dir));
  FC_REQUIRE(the_pool);
  fc_video_env env = {.pool = the_pool, .avatar_get = get_avatar, .avatar_put = put_avatar,
                      .shared_dir = dir, .speak = fake_speak};
  const char *j = "{\"script\":\"Short one. A somewhat longer one.\",\"voice\":\"fake:slow\"}";
  fc_video_spec *s = NULL;
  fc_video_plan *p = NULL;
  FC_REQUIRE(fc_video_spec_parse(j, strlen(j), &s) == 0 && fc_video_plan_create(s, 1, 0, &p) == 0);
  FC_REQUIRE(fc_video_shard_render(s, p, 0, &env, dir, NULL, NULL, NULL) == 0);
  FC_CHECK_INT(fake_calls, ==, 2);
  fc_shard_meta m;
  FC_REQUIRE(fc_shard_open(dir, 0, &m, NULL, NULL) == 0);
  const int64_t n0 = (int64_t)strlen("Short one.") * 800 + 1000,
                n1 = (int64_t)strlen("A somewhat longer one.") * 800 + 1000;
  FC_REQUIRE(m.n_cues == 2);
  FC_CHECK_INT(m.cues[0].start, ==, 0);
  FC_CHECK_INT(m.cues[0].end, ==, n0);
  FC_CHECK_INT(m.cues[1].start, ==, (n0 + 639) / 640 * 640);
  FC_CHECK_INT(m.cues[1].end, ==, m.cues[1].start + n1);
  FC_CHECK_INT(m.samples, ==, m.cues[1].start + (n1 + 639) / 640 * 640);
  fc_shard_meta_free(&m);
  fc_video_shards_remove(p, dir);
  fc_video_plan_free(p), fc_video_spec_free(s);
  /* a long sentence's captions in the SRT: pieces of at most two lines of about 42 characters,
   * together its whole text, the first starting where the sentence does */
  j = "{\"script\":\"This sentence goes on and on, well past what one caption holds on two lines, "
      "so the sidecar files show it in pieces, one after the other, each for its share of the "
      "time.\",\"voice\":\"fake:x\"}";
  FC_REQUIRE(fc_video_spec_parse(j, strlen(j), &s) == 0 && fc_video_plan_create(s, 1, 0, &p) == 0);
  FC_REQUIRE(fc_video_shard_render(s, p, 0, &env, dir, NULL, NULL, NULL) == 0);
  char mp4[256], srt[256];
  snprintf(mp4, sizeof mp4, "%s/v.mp4", dir);
  snprintf(srt, sizeof srt, "%s/v.srt", dir);
  fc_video_result res;
  FC_REQUIRE(fc_video_join(s, p, dir, mp4, srt, NULL, &res) == 0);
  gchar *t = NULL;
  FC_REQUIRE(g_file_get_contents(srt, &t, NULL, NULL));
  gchar **blocks = g_strsplit(t, "\n\n", -1);
  int cues_n = 0, long_lines = 0;
  for (int i = 0; blocks[i]; i++) {
    gchar **lines = g_strsplit(blocks[i], "\n", -1);
    int n = (int)g_strv_length(lines);
    if (n >= 3) {
      cues_n++;
      long_lines += n > 4; /* number, times, at most two lines */
      for (int k = 2; k < n; k++) long_lines += g_utf8_strlen(lines[k], -1) > 50;
    }
    g_strfreev(lines);
  }
  g_strfreev(blocks);
  FC_CHECK(cues_n >= 3);
  FC_CHECK_INT(long_lines, ==, 0);
  FC_CHECK(strstr(t, "1\n00:00:00,000 --> ") == t);
  g_free(t);
  fc_video_shards_remove(p, dir);
  fc_video_plan_free(p), fc_video_spec_free(s);
  /* espeak's voice, even with the hook there: not called */
  j = "{\"script\":\"Hello.\",\"voice\":\"espeak:en\"}";
  FC_REQUIRE(fc_video_spec_parse(j, strlen(j), &s) == 0 && fc_video_plan_create(s, 1, 0, &p) == 0);
  FC_CHECK(fc_video_shard_render(s, p, 0, &env, dir, NULL, NULL, NULL) == 0);
  FC_CHECK_INT(fake_calls, ==, 3);
  fc_video_shards_remove(p, dir);
  fc_video_plan_free(p), fc_video_spec_free(s);
  /* a provider without a hook, or one the hook does not have */
  j = "{\"script\":\"Hello.\",\"voice\":\"edge:en-US-AriaNeural\"}";
  FC_REQUIRE(fc_video_spec_parse(j, strlen(j), &s) == 0 && fc_video_plan_create(s, 1, 0, &p) == 0);
  int err = fc_video_shard_render(s, p, 0, &env, dir, NULL, NULL, NULL);
  FC_CHECK(err == FC_EUNSUPPORTED && strstr(fc_error_detail(err), "edge"));
  env.speak = NULL;
  err = fc_video_shard_render(s, p, 0, &env, dir, NULL, NULL, NULL);
  FC_CHECK(err == FC_EUNSUPPORTED && strstr(fc_error_detail(err), "'edge'"));
  FC_CHECK(!fc_video_shard_done(p, 0, dir));
  fc_video_plan_free(p), fc_video_spec_free(s);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  FC_CHECK(system(cmd) == 0);
}

int main(void) {
  FC_RUN(test_spec);
  FC_RUN(test_plan);
  FC_RUN(test_h264_split);
  setup();
  FC_RUN(test_render_join);
  FC_RUN(test_cues_split);
  FC_RUN(test_frame_incremental);
  FC_RUN(test_canvas_captions);
  FC_RUN(test_audio_shards);
  FC_RUN(test_provider_voice);
  teardown();
  FC_TEST_EXIT();
}
