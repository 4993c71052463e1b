/* facecast bench still: the live encoder's two ways with a talking photo, side by side on the
 * same pictures — x264 for every picture (told the unchanged macroblocks, as fcx264enc does
 * with FACECAST_STILL_ENCODER=x264) against x264 for key frames and fc_h264_still for the P
 * pictures (the default). The pictures are the engine's own: a paragraph spoken (espeak-ng)
 * over the photo avatar, made first and kept in memory, so only the encoders are timed (CPU
 * time of this thread per picture). For each way: CPU per picture, bits per second, and PSNR
 * against the source picture over the mouth (the rect the engine changed) and over the whole
 * picture, from each encoder's reconstruction — the picture a viewer's decoder shows
 * (test_h264_still checks that fc_h264_still's reconstruction is what decoders show). */
#include "cli/cli.h"
#include "facecast/error.h"
#include "facecast/render.h"
#include "facecast/stream.h"
#include "media/h264_still.h"
#include "media/h264enc.h"
#include "media/live.h"
#include "media/x264_live.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x264.h>

static const char *text =
    "Good morning, and welcome to the evening news. Today we look at how a machine can speak "
    "with a human face, in real time, on an ordinary computer. The words you hear are "
    "synthesised, and the lips you see follow every sound.";

typedef struct way {
  const char *name;
  double cpu_s, key_cpu_s, bytes, se_mouth, se_all;
  long n_mouth;
  int key_frames;
} way;

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* squared error of the reconstruction (I420 planes) against the source picture */
static void score(way *wy, const uint8_t *src, int w, int h, const uint8_t *const rp[3],
                  const int rs[3], int nv12, const fc_rect *mouth) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      const double d = (double)src[y * w + x] - rp[0][(size_t)y * rs[0] + x];
      wy->se_all += d * d;
      if (x >= mouth->x && x < mouth->x + mouth->w && y >= mouth->y && y < mouth->y + mouth->h)
        wy->se_mouth += d * d, wy->n_mouth++;
    }
  const uint8_t *u = src + w * h, *v = u + w * h / 4;
  for (int y = 0; y < h / 2; y++)
    for (int x = 0; x < w / 2; x++) {
      const int ru = nv12 ? rp[1][(size_t)y * rs[1] + 2 * x] : rp[1][(size_t)y * rs[1] + x];
      const int rv = nv12 ? rp[1][(size_t)y * rs[1] + 2 * x + 1] : rp[2][(size_t)y * rs[2] + x];
      wy->se_all += (double)(u[y * w / 2 + x] - ru) * (u[y * w / 2 + x] - ru) +
                    (double)(v[y * w / 2 + x] - rv) * (v[y * w / 2 + x] - rv);
    }
}

static double psnr(double se, double n) { return n > 0 ? 10 * log10(255.0 * 255.0 * n / (se + 1e-9)) : 0; }

/* Encodes the pictures one way: own = 1 lets fc_h264_still write the P pictures. */
static int run_way(way *wy, int own, const fc_x264_config *cfg, uint8_t *const *pics,
                   const fc_i420_delta *deltas, int n, int w, int h) {
  x264_param_t p;
  fc_x264_config c = *cfg;
  c.x264_only = !own;
  if (fc_x264_live_params(&p, &c, w, h, 25, 1)) return fc_error_set(FC_EINVAL, "x264 preset");
  p.b_full_recon = 1; /* both ways: the reconstruction is what is scored */
  if (getenv("FC_BENCH_X264_LOG")) p.i_log_level = X264_LOG_INFO;
  x264_t *x = x264_encoder_open(&p);
  int err = 0;
  fc_h264_still *s = own ? fc_h264_still_create(w, h, cfg->qp, &err) : NULL;
  const int mbw = w / 16, mbh = h / 16;
  uint8_t *map = malloc((size_t)mbw * mbh), *out = s ? malloc(fc_h264_still_max_size(s)) : NULL;
  if (!x || (own && !s) || !map || (own && !out)) {
    err = err ? err : fc_error_set(FC_ENOMEM, "bench still: encoder set-up");
    goto done;
  }
  int since_key = 0;
  for (int i = 0; i < n; i++) {
    const uint8_t *pl[3] = {pics[i], pics[i] + w * h, pics[i] + w * h * 5 / 4};
    const int st[3] = {w, w / 2, w / 2};
    const fc_rect none = {0, 0, 0, 0};
    fc_h264_mb_constant(map, mbw, mbh, &deltas[i].changed, i ? &deltas[i - 1].changed : &none);
    const int key_due = since_key + 1 >= p.i_keyint_max;
    const double t0 = thread_cpu();
    if (own && i > 0 && !key_due && fc_h264_still_ready(s)) {
      const int size = fc_h264_still_encode(s, pl, st, map, out, fc_h264_still_max_size(s));
      wy->cpu_s += thread_cpu() - t0;
      if (size < 0) {
        err = size;
        goto done;
      }
      wy->bytes += size;
      since_key++;
      const uint8_t *rp[3];
      int rs[3];
      fc_h264_still_recon(s, rp, rs);
      score(wy, pics[i], w, h, rp, rs, 0, &deltas[i].changed);
      continue;
    }
    x264_picture_t in, o;
    x264_picture_init(&in);
    in.img.i_csp = X264_CSP_I420, in.img.i_plane = 3;
    for (int k = 0; k < 3; k++) in.img.plane[k] = (uint8_t *)pl[k], in.img.i_stride[k] = st[k];
    in.i_pts = i;
    in.i_type = own && i > 0 ? X264_TYPE_IDR : X264_TYPE_AUTO;
    if (i > 0 && !own) in.prop.mb_info = map;
    x264_nal_t *nals;
    int nn;
    const int size = x264_encoder_encode(x, &nals, &nn, &in, &o);
    if (size <= 0) {
      err = fc_error_set(FC_EMEDIA, "bench still: x264 wrote nothing");
      goto done;
    }
    const uint8_t *rp[3] = {o.img.plane[0], o.img.plane[1], o.img.plane[2]};
    const int nv12 = (o.img.i_csp & X264_CSP_MASK) == X264_CSP_NV12;
    if (own && (err = fc_h264_still_sync(s, nals[0].p_payload, (size_t)size, rp, o.img.i_stride,
                                         nv12 ? 2 : 3)))
      goto done;
    const double dt = thread_cpu() - t0;
    wy->cpu_s += dt;
    if (o.b_keyframe) wy->key_cpu_s += dt;
    wy->bytes += size;
    wy->key_frames += o.b_keyframe;
    since_key = o.b_keyframe ? 0 : since_key + 1;
    score(wy, pics[i], w, h, rp, o.img.i_stride, nv12, &deltas[i].changed);
  }
done:
  if (x) x264_encoder_close(x);
  fc_h264_still_destroy(s);
  free(map);
  free(out);
  return err;
}

int fc_bench_still(int argc, char **argv) {
  static const struct option opts[] = {
      {"seconds", required_argument, 0, 'S'}, {"size", required_argument, 0, 's'},
      {"avatar", required_argument, 0, 'a'},  {"preset", required_argument, 0, 'p'},
      {"qp", required_argument, 0, 'q'},      {"json", no_argument, 0, 'j'},
      {"runs", required_argument, 0, 'r'},    {"model", required_argument, 0, 'm'},
      {"checkpoint", required_argument, 0, 'c'}, {"device", required_argument, 0, 'd'},
      {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  double seconds = 12;
  int w = 512, h = 512, qp = 18, json = 0, c, err = 0, n = 0, runs = 3;
  const char *avatar = NULL, *preset = FC_LIVE_X264_PRESET, *model = NULL, *ckpt = NULL,
             *device = NULL;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'S':
      if ((err = fc_cli_parse_real("--seconds", optarg, 1, 120, &seconds))) return fc_cli_fail(err);
      break;
    case 's':
      if ((err = fc_cli_parse_size(optarg, &w, &h))) return fc_cli_fail(err);
      break;
    case 'a': avatar = optarg; break;
    case 'p':
      if (!fc_x264_preset_known(optarg))
        return fc_cli_fail(fc_error_set(FC_EINVAL, "--preset: unknown x264 preset '%s'", optarg));
      preset = optarg;
      break;
    case 'q': {
      double v;
      if ((err = fc_cli_parse_real("--qp", optarg, 1, 51, &v))) return fc_cli_fail(err);
      qp = (int)v;
      break;
    }
    case 'j': json = 1; break;
    case 'm': model = optarg; break;
    case 'c': ckpt = optarg; break;
    case 'd': device = optarg; break;
    case 'r': {
      double v;
      if ((err = fc_cli_parse_real("--runs", optarg, 1, 100, &v))) return fc_cli_fail(err);
      runs = (int)v;
      break;
    }
    case 'h':
      puts("usage: facecast bench still [--seconds S] [--size N|WxH] [--avatar IMG] [--preset P]\n"
           "                            [--qp Q] [--runs N] [--model NAME --checkpoint FILE]\n"
           "                            [--device D] [--json]");
      return FC_EXIT_OK;
    default: return fc_cli_bad_option("bench still", argv);
    }
  }
  if (w % 16 || h % 16)
    return fc_cli_fail(fc_error_set(FC_EINVAL, "bench still: %dx%d is not in whole macroblocks", w, h));
  fc_speech sp = {0};
  fc_avatar *av = NULL;
  fc_lipsync *ls = NULL;
  fc_stream *st = NULL;
  const int cap = (int)(seconds * 25);
  uint8_t **pics = calloc((size_t)cap, sizeof *pics);
  fc_i420_delta *deltas = calloc((size_t)cap, sizeof *deltas);
  if (!pics || !deltas) {
    err = fc_error_set(FC_ENOMEM, "bench still: out of memory");
    goto fail;
  }
  if ((err = fc_tts_speak(text, NULL, &sp))) goto fail;
  if (!(av = fc_cli_load_avatar(avatar, w, h, NULL, &err))) goto fail;
  fc_lipsync_params lp = {.model = model, .checkpoint = ckpt, .device = device};
  if (!(ls = fc_lipsync_create(&lp, &err))) goto fail;
  fc_stream_params spar = {.avatar = av, .lipsync = ls};
  if (!(st = fc_stream_create(&spar, &err))) goto fail;
  for (size_t have = 0; have < (size_t)(seconds * FC_SAMPLE_RATE); have += sp.audio.n)
    if ((err = fc_stream_push_speech(st, sp.audio.samples, sp.audio.n, sp.ph, sp.n_ph, NULL))) goto fail;
  fc_stream_end(st);
  while (n < cap) {
    fc_frame_info fi;
    const uint8_t *img;
    const int16_t *pcm;
    if ((err = fc_stream_next_frame(st, &fi, &img, &pcm)) == FC_EEOF) break;
    if (err) goto fail;
    if (!(pics[n] = malloc((size_t)w * h * 3 / 2))) {
      err = fc_error_set(FC_ENOMEM, "bench still: out of memory");
      goto fail;
    }
    memcpy(pics[n], img, (size_t)w * h * 3 / 2);
    deltas[n] = fc_stream_frame_delta(st);
    if (!deltas[n].base) deltas[n].changed = (fc_rect){0, 0, w, h}; /* not a still: all of it */
    n++;
  }
  err = 0;
  const fc_x264_config cfg = {.preset = preset, .threads = 1, .keyint = 50, .qp = qp};
  way ways[2] = {{.name = "x264"}, {.name = "x264 key frames + fc_h264_still"}};
  /* each way `runs` times, alternating, keeping the least CPU (the same stream every run) */
  for (int run = 0; run < runs && !err; run++)
    for (int k = 0; k < 2 && !err; k++) {
      way t = {.name = ways[k].name};
      if (!(err = run_way(&t, k, &cfg, pics, deltas, n, w, h)) &&
          (run == 0 || t.cpu_s < ways[k].cpu_s))
        ways[k] = t;
    }
  if (err) goto fail;
  const double secs = n / 25.0;
  if (!json)
    printf("bench still: %dx%d, %d pictures of a talking photo (%.1f s), x264 %s, QP %d, "
           "least CPU of %d runs\n"
           "  %-34s %10s %10s %10s %10s %12s %6s\n",
           w, h, n, secs, preset, qp, runs, "way", "CPU us/pic", "P us/pic", "kbit/s", "mouth dB", "picture dB", "keys");
  for (int k = 0; k < 2; k++) {
    const way *y = &ways[k];
    const double us = y->cpu_s / n * 1e6, kbps = y->bytes * 8 / secs / 1000;
    const double p_us = n > y->key_frames ? (y->cpu_s - y->key_cpu_s) / (n - y->key_frames) * 1e6 : 0;
    const double pm = psnr(y->se_mouth, (double)y->n_mouth), pa = psnr(y->se_all, (double)n * w * h * 1.5);
    if (json)
      printf("{\"bench\":\"still\",\"way\":\"%s\",\"width\":%d,\"height\":%d,\"pictures\":%d,"
             "\"preset\":\"%s\",\"qp\":%d,\"cpu_us_per_picture\":%.1f,\"cpu_us_per_p_picture\":%.1f,"
             "\"kbps\":%.1f,"
             "\"psnr_mouth_db\":%.3f,\"psnr_picture_db\":%.3f,\"key_frames\":%d}\n",
             k ? "own" : "x264", w, h, n, preset, qp, us, p_us, kbps, pm, pa, y->key_frames);
    else
      printf("  %-34s %10.1f %10.1f %10.1f %10.3f %12.3f %6d\n", y->name, us, p_us, kbps, pm, pa,
             y->key_frames);
  }
fail:
  for (int i = 0; i < n; i++) free(pics[i]);
  free(pics);
  free(deltas);
  fc_stream_destroy(st);
  fc_lipsync_destroy(ls);
  fc_avatar_destroy(av);
  fc_speech_free(&sp);
  return err ? fc_cli_fail(err) : FC_EXIT_OK;
}
