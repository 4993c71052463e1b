/* facecast bench: speed measurements recorded in docs/BENCHMARKS.md.
 *
 * bench render: speaks a paragraph (espeak-ng) repeated to --seconds of audio over the avatar,
 * first producing the frames alone (lip-sync + compositing: the engine's own cost), then a full
 * render to MP4 (adding x264 + AAC + mux), and prints both as frames/s and × real time. */
#include "cli/cli.h"
#include "facecast/error.h"
#include "media/live.h"
#include "facecast/render.h"
#include "facecast/server.h"
#include "lipsync/wav2lip/wav2lip.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *paragraph =
    "Good morning, and welcome to the evening news. Today we look at how a machine can speak "
    "with a human face, in real time, on an ordinary computer. The words you hear are "
    "synthesised, and the lips you see follow every sound.";

static void bench_usage(FILE *f) {
  fputs("usage: facecast bench render [--seconds S] [--size N|WxH] [--avatar IMG]\n"
        "                             [--preset P] [--json]\n"
        "       facecast bench serve [--sessions N[,N...]] [--seconds S] [--talking FRACTION]\n"
        "                            [--size N|WxH] [--avatar IMG|PACK] [--json] [--out PREFIX]\n"
        "                            [--model parametric|wav2lip --checkpoint FILE]\n"
        "                            [--device cpu|cuda[:N]] [--solo] [--preset X264_PRESET]\n"
        "                            [--opus-complexity 1..10]\n"
        "       facecast bench model --checkpoint FILE [--device cpu|cuda] [--dtype fp32|fp16|bf16]\n"
        "                            [--batches 1,4,8,16,...] [--seconds S] [--json]\n"
        "       facecast bench pack [--frames N] [--size WxH] [--processes P] [--runs R]\n"
        "                           [--dir DIR]\n"
        "       facecast bench chat [--turns N] [--vad-hangover-ms MS] [--json]\n"
        "       facecast bench bulk [--jobs N] [--seconds S] [--slots K] [--shards M]\n"
        "                           [--size N|WxH] [--canvas WxH] [--captions] [--json]\n"
        "                           [--model NAME --checkpoint FILE] [--device D] [--preset P]\n"
        "       facecast bench startup [--runs N] [--timeout S] [--text TEXT] [--json]\n"
        "                              [SERVE OPTIONS...]\n"
        "       facecast bench still [--seconds S] [--size N|WxH] [--avatar IMG] [--preset P]\n"
        "                            [--qp Q] [--runs N] [--model NAME --checkpoint FILE]\n"
        "                            [--device D] [--json]\n",
        f);
}

/* bench serve: for each session count, N live sessions (NULL outputs: encoders into
 * fakesinks) with the real pacer and workers; prints final fps, lateness and CPU, and the
 * largest N that holds: 25 fps, p99 lateness <= 40 ms at the pacer, and at most 1 % of the
 * pictures out of the video encoders more than a frame period after their push (the queue
 * in front of an encoder hides its lateness from the pacer). */
static int serve_holds(const fc_serve_bench *r) {
  return r->final_fps >= 24.5 && r->late_p99_ms <= 40.0 && r->encode_late_pct <= 1.0;
}

/* A GPU reading as table text ("-" without one); two rotating buffers per kind. */
static const char *gpu_cell(double v, const char *unit, int which) {
  static char buf[2][32];
  if (v < 0) return "-";
  snprintf(buf[which], sizeof buf[which], "%.0f%s", v, unit);
  return buf[which];
}

/* The host CPU as /proc/cpuinfo names it and how many this process may use: machines of one
 * kind differ (a serve benchmark is CPU-bound), so every report says which it ran on. */
static void cpu_name(char *out, size_t cap) {
  snprintf(out, cap, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) || !colon) continue;
    colon += 1 + (colon[1] == ' ');
    colon[strcspn(colon, "\n\"\\")] = 0;
    snprintf(out, cap, "%s", colon);
    break;
  }
  if (f) fclose(f);
  size_t n = strlen(out);
  snprintf(out + n, cap - n, " x %ld", sysconf(_SC_NPROCESSORS_ONLN));
}

/* bench serve --out PREFIX: PREFIX.json (every point), PREFIX.md (the table) and PREFIX.svg
 * (final fps and p99 lateness against sessions, the 25 fps and 40 ms lines drawn). */
static int write_serve_report(const char *prefix, const fc_server_params *sp, const char *model,
                              const char *device, const char *mode, double talking,
                              const fc_serve_bench *r, int n, int best) {
  char path[4096], cpu[200];
  FILE *f;
  cpu_name(cpu, sizeof cpu);
  snprintf(path, sizeof path, "%s.json", prefix);
  if (!(f = fopen(path, "w"))) return fc_error_set(FC_EIO, "%s: cannot write", path);
  fprintf(f, "{\"cpu\":\"%s\",\"width\":%d,\"height\":%d,\"model\":\"%s\",\"device\":\"%s\",\"batching\":\"%s\","
          "\"talking\":%.2f,\"max_sessions_holding\":%d,\"points\":[", cpu, sp->width, sp->height,
          model, device, mode, talking, best);
  for (int i = 0; i < n; i++)
    fprintf(f, "%s{\"sessions\":%d,\"final_fps\":%.2f,\"late_p50_ms\":%.2f,\"late_p99_ms\":%.2f,"
            "\"cpu_per_session\":%.4f,\"mean_batch\":%.2f,\"batch_p95_ms\":%.3f,\"dropped\":%llu,"
            "\"gpu_util_pct\":%.1f,\"gpu_mem_peak_mb\":%.0f,\"kbps\":%.0f,"
            "\"encode_delay_ms\":%.2f,\"encode_late_pct\":%.2f}",
            i ? "," : "", r[i].sessions, r[i].final_fps, r[i].late_p50_ms, r[i].late_p99_ms,
            r[i].cpu_per_session, r[i].mean_batch, r[i].batch_p95_ms, r[i].dropped,
            r[i].gpu_util_pct, r[i].gpu_mem_peak_mb, r[i].kbps, r[i].encode_delay_ms,
            r[i].encode_late_pct);
  fprintf(f, "]}\n");
  fclose(f);
  snprintf(path, sizeof path, "%s.md", prefix);
  if (!(f = fopen(path, "w"))) return fc_error_set(FC_EIO, "%s: cannot write", path);
  fprintf(f, "%s; %dx%d, %s on %s, %s batches, x264 %s, Opus complexity %d, %.0f %% talking: %d "
          "sessions hold 25 fps with p99 lateness <= 40 ms and <= 1 %% encoded late\n\n| sessions "
          "| final fps | p50 late ms | p99 late ms | encoder delay ms | encoded late | "
          "CPU/session | frames/batch | GPU util | GPU memory | kbit/s | dropped "
          "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
          cpu, sp->width, sp->height, model, device, mode,
          sp->x264_preset ? sp->x264_preset : FC_LIVE_X264_PRESET,
          sp->opus_complexity ? sp->opus_complexity : FC_LIVE_OPUS_COMPLEXITY, talking * 100, best);
  for (int i = 0; i < n; i++)
    fprintf(f, "| %d | %.2f | %.2f | %.2f | %.1f | %.2f %% | %.1f %% | %.1f | %s | %s | %.0f | %llu |\n",
            r[i].sessions, r[i].final_fps, r[i].late_p50_ms, r[i].late_p99_ms,
            r[i].encode_delay_ms, r[i].encode_late_pct, r[i].cpu_per_session * 100, r[i].mean_batch, gpu_cell(r[i].gpu_util_pct, " %", 0),
            gpu_cell(r[i].gpu_util_pct < 0 ? -1 : r[i].gpu_mem_peak_mb, " MiB", 1), r[i].kbps,
            r[i].dropped);
  fclose(f);
  snprintf(path, sizeof path, "%s.svg", prefix);
  if (!(f = fopen(path, "w"))) return fc_error_set(FC_EIO, "%s: cannot write", path);
  const double W = 640, H = 360, L = 60, R = 60, T = 30, B = 40;
  int xmax = 1;
  double lmax = 80;
  for (int i = 0; i < n; i++) {
    if (r[i].sessions > xmax) xmax = r[i].sessions;
    if (r[i].late_p99_ms > lmax) lmax = r[i].late_p99_ms;
  }
  if (lmax > 400) lmax = 400;
#define X(v) (L + (W - L - R) * (double)(v) / xmax)
#define YF(v) (H - B - (H - T - B) * (v) / 30.0)
#define YL(v) (H - B - (H - T - B) * ((v) < lmax ? (v) : lmax) / lmax)
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
          "<text x=\"%.0f\" y=\"18\">%dx%d %s on %s, %s batches: final fps (blue) and p99 lateness ms "
          "(red) per session count</text>\n", W, H, L, sp->width, sp->height, model, device, mode);
  fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#88f\" stroke-dasharray=\"4\"/>\n",
          L, YF(25), W - R, YF(25));
  fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#f88\" stroke-dasharray=\"4\"/>\n",
          L, YL(40), W - R, YL(40));
  fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">0</text><text x=\"%.0f\" y=\"%.0f\">%d sessions</text>\n",
          L, H - B + 16, W - R - 60, H - B + 16, xmax);
  for (int k = 0; k < 2; k++) {
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", k ? "#d22" : "#22d");
    for (int i = 0; i < n; i++)
      fprintf(f, "%.1f,%.1f ", X(r[i].sessions), k ? YL(r[i].late_p99_ms) : YF(r[i].final_fps));
    fprintf(f, "\"/>\n");
  }
  fprintf(f, "<text x=\"4\" y=\"%.1f\" fill=\"#22d\">25 fps</text><text x=\"%.0f\" y=\"%.1f\" "
          "fill=\"#d22\">40 ms</text>\n</svg>\n", YF(25) + 4, W - R + 4, YL(40) + 4);
#undef X
#undef YF
#undef YL
  fclose(f);
  return FC_OK;
}

/* bench chat: conversation turns against zero-think-time fakes (src/bench/chat.c). */
static void chat_row(const char *what, const double v[3], int json, const char *key) {
  if (json)
    printf("%s\"%s\":{\"p50\":%.1f,\"p95\":%.1f,\"max\":%.1f}", *key == 't' &&
           !strcmp(key, "typed_first_frame_ms") ? "" : ",", key, v[0], v[1], v[2]);
  else
    printf("  %-58s %7.1f %7.1f %7.1f\n", what, v[0], v[1], v[2]);
}

static int bench_chat(int argc, char **argv) {
  static const struct option opts[] = {{"turns", required_argument, 0, 't'},
                                       {"vad-hangover-ms", required_argument, 0, 'v'},
                                       {"json", no_argument, 0, 'j'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  double turns = 10, hang = 500;
  int json = 0, c, err;
  fc_server_params sp = fc_server_params_default();
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 't':
      if ((err = fc_cli_parse_real("--turns", optarg, 1, 1000, &turns))) return fc_cli_fail(err);
      break;
    case 'v':
      if ((err = fc_cli_parse_real("--vad-hangover-ms", optarg, 100, 5000, &hang)))
        return fc_cli_fail(err);
      break;
    case 'j': json = 1; break;
    case 'h': bench_usage(stdout); return FC_EXIT_OK;
    default: return fc_cli_bad_option("bench", argv);
    }
  }
  sp.vad_hangover_ms = (int)hang;
  fc_chat_bench r;
  if (!json)
    fprintf(stderr, "bench chat: %d turns of each kind (typed, interrupted, spoken with "
                    "pocketsphinx, spoken with an instant ASR); about %d s\n",
            (int)turns, (int)(turns * 10));
  if ((err = fc_server_bench_chat(&sp, (int)turns, &r))) return fc_cli_fail(err);
  if (json) printf("{\"bench\":\"chat\",\"turns\":%d,\"failed\":%d,\"hangover_ms\":%d,",
                   r.turns, r.failed, r.hangover_ms);
  else printf("bench chat: %d turns each, %d failed; ms                                 p50     p95     max\n",
              r.turns, r.failed);
  chat_row("typed: /human chat -> first speaking frame sent", r.typed_first_frame_ms, json,
           "typed_first_frame_ms");
  chat_row("typed: the LLM's first sentence -> first speaking frame", r.typed_after_sentence_ms,
           json, "typed_after_sentence_ms");
  chat_row("spoken, pocketsphinx: end of speech -> transcript", r.voice_asr_ms, json,
           "voice_asr_ms");
  chat_row("spoken, pocketsphinx: end of speech -> first speaking frame", r.voice_first_frame_ms,
           json, "voice_first_frame_ms");
  chat_row("spoken, instant ASR: end of speech -> transcript", r.instant_asr_ms, json,
           "instant_asr_ms");
  chat_row("spoken, instant ASR: end of speech -> first speaking frame",
           r.instant_first_frame_ms, json, "instant_first_frame_ms");
  chat_row("interrupt -> SSE cancelled at the client", r.interrupt_sse_ms, json,
           "interrupt_sse_ms");
  chat_row("interrupt -> the LLM's connection closed, at the fake LLM",
           r.interrupt_llm_closed_ms, json, "interrupt_llm_closed_ms");
  chat_row("barge-in: first sound over the avatar -> SSE barge-in", r.barge_in_ms, json,
           "barge_in_ms");
  if (json) printf("}\n");
  else printf("  (end of speech: the VAD's endpoint, %d ms after the last voiced sound)\n",
              r.hangover_ms);
  return r.failed ? FC_EXIT_FAIL : FC_EXIT_OK;
}

static int bench_serve(int argc, char **argv) {
  static const struct option opts[] = {
      {"sessions", required_argument, 0, 'n'}, {"seconds", required_argument, 0, 'S'},
      {"talking", required_argument, 0, 't'},  {"size", required_argument, 0, 's'},
      {"avatar", required_argument, 0, 'a'},   {"json", no_argument, 0, 'j'},
      {"model", required_argument, 0, 'm'},    {"device", required_argument, 0, 'd'},
      {"checkpoint", required_argument, 0, 'c'}, {"solo", no_argument, 0, 'o'},
      {"out", required_argument, 0, 'O'},      {"preset", required_argument, 0, 'P'},
      {"opus-complexity", required_argument, 0, 'C'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *list = "1,2,4,8,12,16,20,24,28,32", *outp = NULL;
  double seconds = 10, talking = 1.0;
  int json = 0, c, err;
  fc_server_params sp = fc_server_params_default();
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'n': list = optarg; break;
    case 'S':
      if ((err = fc_cli_parse_real("--seconds", optarg, 2, 3600, &seconds))) return fc_cli_fail(err);
      break;
    case 't':
      if ((err = fc_cli_parse_real("--talking", optarg, 0, 1, &talking))) return fc_cli_fail(err);
      break;
    case 's':
      if ((err = fc_cli_parse_size(optarg, &sp.width, &sp.height))) return fc_cli_fail(err);
      break;
    case 'a': sp.avatar = optarg; break;
    case 'j': json = 1; break;
    case 'm': sp.model = optarg; break;
    case 'd': sp.device = optarg; break;
    case 'c': sp.checkpoint = optarg; break;
    case 'o': sp.solo_batches = 1; break;
    case 'O': outp = optarg; break;
    case 'P': sp.x264_preset = optarg; break;
    case 'C':
      if ((err = fc_cli_parse_opus_complexity(optarg, &sp.opus_complexity))) return fc_cli_fail(err);
      break;
    case 'h': bench_usage(stdout); return FC_EXIT_OK;
    default: return fc_cli_bad_option("bench", argv);
    }
  }
  int counts[64], nc = 0;
  fc_serve_bench res[64];
  for (const char *q = list; *q;) {
    char *end;
    long v = strtol(q, &end, 10);
    if (end == q || v < 1 || v > 4096 || (*end && *end != ',') || nc == 64) {
      fprintf(stderr, "facecast: error: --sessions '%s': expected N or N,N,... (at most 64)\n", list);
      return FC_EXIT_INPUT;
    }
    counts[nc++] = (int)v;
    q = *end ? end + 1 : end;
  }
  const char *model = sp.model ? sp.model : "parametric", *device = sp.device ? sp.device : "cpu";
  const char *mode = sp.solo_batches ? "solo" : "cross-session";
  if (!json)
    printf("bench serve: %dx%d, %s on %s, %s batches, x264 %s, %.0f %% talking, %.0f s per point\n"
           "sessions  final fps  p50 late ms  p99 late ms  CPU/session  batch  GPU %%  GPU MiB  "
           "dropped  holds\n",
           sp.width, sp.height, model, device, mode, sp.x264_preset ? sp.x264_preset : FC_LIVE_X264_PRESET,
           talking * 100, seconds);
  int best = 0;
  for (int i = 0; i < nc; i++) {
    fc_serve_bench r;
    int talk = (int)(counts[i] * talking + 0.5);
    if ((err = fc_server_bench(&sp, counts[i], talk, seconds, &r))) return fc_cli_fail(err);
    res[i] = r;
    int holds = serve_holds(&r);
    if (holds && counts[i] > best) best = counts[i];
    if (json)
      printf("{\"bench\":\"serve\",\"sessions\":%d,\"talking\":%d,\"width\":%d,\"height\":%d,"
             "\"final_fps\":%.2f,\"late_p50_ms\":%.2f,\"late_p99_ms\":%.2f,"
             "\"cpu_per_session\":%.4f,\"dropped\":%llu,\"skipped_ticks\":%llu,"
             "\"late_frames\":%llu,\"mean_batch\":%.2f,\"batch_p95_ms\":%.3f,"
             "\"gpu_util_pct\":%.1f,\"gpu_mem_peak_mb\":%.0f,\"kbps\":%.0f,\"encode_delay_ms\":%.2f,"
             "\"encode_late_pct\":%.2f,\"oom_retries\":%llu,\"batch_limit\":%d,"
             "\"sessions_alive\":%d,\"production_failures\":%llu,"
             "\"model\":\"%s\",\"device\":\"%s\",\"batching\":\"%s\",\"holds\":%s}\n",
             r.sessions, r.talking, sp.width, sp.height, r.final_fps, r.late_p50_ms,
             r.late_p99_ms, r.cpu_per_session, r.dropped, r.skipped_ticks, r.late_frames,
             r.mean_batch, r.batch_p95_ms, r.gpu_util_pct, r.gpu_mem_peak_mb, r.kbps,
             r.encode_delay_ms, r.encode_late_pct, r.oom_retries, r.batch_limit, r.sessions_alive,
             r.production_failures, model, device, mode, holds ? "true" : "false");
    else
      printf("%8d  %9.2f  %11.2f  %11.2f  %10.1f%%  %5.1f  %5s  %7s  %7llu  %s\n", r.sessions,
             r.final_fps, r.late_p50_ms, r.late_p99_ms, r.cpu_per_session * 100, r.mean_batch,
             gpu_cell(r.gpu_util_pct, "", 0), gpu_cell(r.gpu_util_pct < 0 ? -1 : r.gpu_mem_peak_mb, "", 1),
             r.dropped, holds ? "yes" : "no");
    if (!json)
      printf("          %.0f kbit/s per session; encoded %.1f ms after the push (mean), %.2f %% more "
             "than a frame late; CPU by thread: %s\n",
             r.kbps, r.encode_delay_ms, r.encode_late_pct, r.cpu_by_thread);
    if (!json && (r.oom_retries || r.production_failures || r.sessions_alive != r.sessions))
      printf("          device out of memory: %llu batches halved (limit now %d), %llu productions "
             "failed, %d of %d sessions open\n",
             r.oom_retries, r.batch_limit, r.production_failures, r.sessions_alive, r.sessions);
    fflush(stdout);
  }
  if (json) printf("{\"bench\":\"serve\",\"max_sessions_holding\":%d}\n", best);
  else
    printf("largest session count holding 25 fps with p99 lateness <= 40 ms and <= 1 %% encoded "
           "late: %d\n", best);
  if (outp && (err = write_serve_report(outp, &sp, model, device, mode, talking, res, nc, best)))
    return fc_cli_fail(err);
  return FC_EXIT_OK;
}

static int make_stream(const fc_speech *sp, double seconds, const fc_avatar *av, fc_lipsync *ls,
                       fc_stream **out) {
  int err;
  fc_stream_params p = {.avatar = av, .lipsync = ls};
  fc_stream *st = fc_stream_create(&p, &err);
  if (!st) return err;
  size_t want = (size_t)(seconds * FC_SAMPLE_RATE), have = 0;
  while (have < want) {
    if ((err = fc_stream_push_speech(st, sp->audio.samples, sp->audio.n, sp->ph, sp->n_ph, NULL))) {
      fc_stream_destroy(st);
      return err;
    }
    have += sp->audio.n;
  }
  fc_stream_end(st);
  *out = st;
  return FC_OK;
}

static int bench_render(int argc, char **argv) {
  static const struct option opts[] = {
      {"seconds", required_argument, 0, 'S'}, {"size", required_argument, 0, 's'},
      {"avatar", required_argument, 0, 'a'},  {"preset", required_argument, 0, 'p'},
      {"json", no_argument, 0, 'j'},          {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  double seconds = 30;
  int w = 512, h = 512, json = 0, c, err;
  const char *avatar = NULL, *preset = NULL;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'S':
      if ((err = fc_cli_parse_real("--seconds", optarg, 1, 3600, &seconds))) return fc_cli_fail(err);
      break;
    case 's':
      if ((err = fc_cli_parse_size(optarg, &w, &h))) return fc_cli_fail(err);
      break;
    case 'a': avatar = optarg; break;
    case 'p': preset = optarg; break;
    case 'j': json = 1; break;
    case 'h': bench_usage(stdout); return FC_EXIT_OK;
    default: return fc_cli_bad_option("bench", argv);
    }
  }
  fc_speech sp = {0};
  fc_avatar *av = NULL;
  fc_lipsync *ls = NULL;
  fc_stream *st = NULL;
  char dir[] = "/tmp/facecast-bench-XXXXXX", path[64] = "";
  int code = FC_EXIT_OK;
  if ((err = fc_tts_speak(paragraph, NULL, &sp))) goto fail;
  if (!(av = fc_cli_load_avatar(avatar, w, h, NULL, &err))) goto fail;
  fc_lipsync_params lp = {0};
  if (!(ls = fc_lipsync_create(&lp, &err))) goto fail;

  /* 1. Frames alone. */
  if ((err = make_stream(&sp, seconds, av, ls, &st))) goto fail;
  int64_t frames = fc_stream_frames_total(st);
  double t0 = fc_cli_now();
  for (;;) {
    fc_frame_info fi;
    const uint8_t *img;
    const int16_t *pcm;
    err = fc_stream_next_frame(st, &fi, &img, &pcm);
    if (err == FC_EEOF) break;
    if (err) goto fail;
  }
  double t_frames = fc_cli_now() - t0;
  fc_stream_destroy(st);
  st = NULL;

  /* 2. Full render to MP4. */
  if (!mkdtemp(dir)) {
    err = fc_error_set(FC_EIO, "cannot create a temporary directory");
    goto fail;
  }
  snprintf(path, sizeof path, "%s/bench.mp4", dir);
  if ((err = make_stream(&sp, seconds, av, ls, &st))) goto fail;
  fc_mp4_params mp = fc_mp4_params_default(w, h);
  if (preset) mp.preset = preset;
  t0 = fc_cli_now();
  if ((err = fc_render_to_mp4(st, path, &mp, NULL, NULL))) goto fail;
  double t_render = fc_cli_now() - t0;
  double audio_s = frames / 25.0;
  const char *pr = preset ? preset : "veryfast";
  if (json)
    printf("{\"bench\":\"render\",\"width\":%d,\"height\":%d,\"model\":\"%s\",\"preset\":\"%s\","
           "\"frames\":%lld,\"audio_s\":%.2f,\"frames_only_fps\":%.1f,\"render_s\":%.3f,"
           "\"render_fps\":%.1f,\"realtime_x\":%.2f}\n",
           w, h, fc_lipsync_name(ls), pr, (long long)frames, audio_s, frames / t_frames,
           t_render, frames / t_render, audio_s / t_render);
  else
    printf("bench render: %dx%d, model %s, x264 %s, %lld frames (%.1f s of speech)\n"
           "  lip-sync + compositing only: %8.1f frames/s  (%.1fx real time)\n"
           "  full render to MP4:          %8.1f frames/s  (%.1fx real time, %.2f s)\n",
           w, h, fc_lipsync_name(ls), pr, (long long)frames, audio_s, frames / t_frames,
           audio_s / t_frames, frames / t_render, audio_s / t_render, t_render);
  goto done;
fail:
  code = fc_cli_fail(err);
done:
  if (path[0]) remove(path);
  if (path[0]) rmdir(dir);
  fc_stream_destroy(st);
  fc_lipsync_destroy(ls);
  fc_avatar_destroy(av);
  fc_speech_free(&sp);
  return code;
}

/* Peak resident memory of the process so far (VmHWM), in MiB. */
static double peak_rss_mib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  double kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmHWM:", 6) == 0) kb = strtod(line + 6, NULL);
  if (f) fclose(f);
  return kb / 1024.0;
}

/* bench model: the Wav2Lip network per batch size, after two warm-up calls (the first builds the
 * batch size's primitives, the second captures its CUDA graph), each timed for about --seconds:
 *   model: the network alone on inputs already on the device (fc_w2l_run_resident), the way the
 *          PyTorch anchors time it;
 *   e2e:   RGB byte crops in and out through host memory (fc_w2l_infer_u8);
 *   composite: what the engine runs (fc_w2l_composite): a batch of face boxes of distinct
 *          avatar frames (resident on a GPU after their first use) resized, the network, the
 *          patches blended and the finished I420 rects copied back — with the face encoder
 *          computed every time (the feature cache off), and with the frames' face features
 *          kept ("kept": what a GPU does once it has seen an avatar's frames; "-" where the
 *          device keeps none).
 * Plus the device memory the model holds at its peak (0 on the CPU). */

typedef struct bench_jobs {
  fc_w2l_job *jobs;
  unsigned char *rgb, *out;
  size_t rect;
} bench_jobs;

static int bench_base(void *user, int j) {
  bench_jobs *bj = user;
  memset(bj->jobs[j].out, 120, bj->rect);
  return 0;
}

/* Times fc_w2l_composite of b jobs for about span seconds after three warm-up calls (a whole
 * eager pass, then captured ones); ms per batch, or < 0 on an error. */
static double time_composite(fc_w2l *m, bench_jobs *bj, int b, double span, int *reps,
                             int *err) {
  for (int k = 0; k < 3; k++)
    if ((*err = fc_w2l_composite(m, bj->jobs, b, bench_base, bj))) return -1;
  double t0 = fc_cli_now(), t = 0;
  int n = 0;
  while (t < span || n < 3) {
    if ((*err = fc_w2l_composite(m, bj->jobs, b, bench_base, bj))) return -1;
    n++;
    t = fc_cli_now() - t0;
  }
  *reps += n;
  return t * 1000 / n;
}
static int bench_model(int argc, char **argv) {
  static const struct option opts[] = {
      {"checkpoint", required_argument, 0, 'c'}, {"device", required_argument, 0, 'd'},
      {"dtype", required_argument, 0, 't'},      {"batches", required_argument, 0, 'b'},
      {"seconds", required_argument, 0, 'S'},    {"json", no_argument, 0, 'j'},
      {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
  const char *ckpt = NULL, *device = "cpu", *dtype = "fp32", *list = NULL;
  double seconds = 2;
  int json = 0, c, err;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'c': ckpt = optarg; break;
    case 'd': device = optarg; break;
    case 't': dtype = optarg; break;
    case 'b': list = optarg; break;
    case 'S':
      if ((err = fc_cli_parse_real("--seconds", optarg, 0.01, 600, &seconds))) return fc_cli_fail(err);
      break;
    case 'j': json = 1; break;
    case 'h': bench_usage(stdout); return FC_EXIT_OK;
    default: return fc_cli_bad_option("bench", argv);
    }
  }
  if (!ckpt) {
    fprintf(stderr, "facecast: error: bench model: --checkpoint FILE is required (a full-size "
                    "one with random weights: tools/gen_wav2lip_golden.py --width 1 --out DIR, or "
                    "for wav2lip256 tools/bench_wav2lip256.py make FILE)\n");
    return FC_EXIT_INPUT;
  }
  int dt = strcmp(dtype, "fp32") == 0   ? FC_W2L_FP32
           : strcmp(dtype, "fp16") == 0 ? FC_W2L_FP16
           : strcmp(dtype, "bf16") == 0 ? FC_W2L_BF16
                                        : -1;
  if (dt < 0) {
    fprintf(stderr, "facecast: error: bench model: --dtype '%s': expected fp32, fp16 or bf16\n",
            dtype);
    return FC_EXIT_INPUT;
  }
  /* The sweep; on the CPU the large batches only take long to say the same. */
  if (!list) list = strncmp(device, "cpu", 3) == 0 ? "1,4,8,16,32" : "1,4,8,16,32,64,128,256,512";
  int batches[32], nb = 0, maxb = 0;
  for (const char *q = list; *q && nb < 32;) {
    char *end;
    long v = strtol(q, &end, 10);
    if (end == q || v < 1 || v > 4096 || (*end && *end != ',')) {
      fprintf(stderr, "facecast: error: --batches '%s': expected N,N,...\n", list);
      return FC_EXIT_INPUT;
    }
    batches[nb++] = (int)v;
    if (v > maxb) maxb = (int)v;
    q = *end ? end + 1 : end;
  }
  fc_w2l_params wp = {.device = device, .max_batch = maxb, .dtype = dt};
  fc_w2l *m = fc_w2l_load(ckpt, &wp, &err);
  if (!m) return fc_cli_fail(err);
  size_t nmel = (size_t)maxb * FC_W2L_MEL_H * FC_W2L_MEL_W;
  const int side = fc_w2l_face_size(m); /* 96, or 256 for a wav2lip256 checkpoint */
  size_t ncrop = (size_t)maxb * 3 * side * side;
  float *mel = malloc(nmel * sizeof(float));
  unsigned char *crops = malloc(ncrop), *out = malloc(ncrop);
  /* the composite jobs: a face box 1.5 times the crop's side (a 512x512 portrait's is ~150 px),
   * patch rect from 45 % of its height, pixels of its own per job */
  const int box = side * 3 / 2, y0 = (int)(box * 0.45) & ~1;
  bench_jobs bj = {.rect = (size_t)box * (box - y0) * 3 / 2};
  bj.jobs = calloc((size_t)maxb, sizeof *bj.jobs);
  bj.rgb = malloc((size_t)maxb * box * box * 3);
  bj.out = malloc((size_t)maxb * bj.rect);
  int code = FC_EXIT_OK;
  if (!mel || !crops || !out || !bj.jobs || !bj.rgb || !bj.out) {
    code = fc_cli_fail(fc_error_set(FC_ENOMEM, "out of memory"));
    goto done;
  }
  /* Deterministic inputs in the ranges the network sees (mel in [-4, 4], any pixels). */
  uint32_t r = 12345;
  for (size_t i = 0; i < nmel; i++) mel[i] = ((r = r * 1664525u + 1013904223u) >> 8) / 2097152.0f - 4;
  for (size_t i = 0; i < ncrop; i++) crops[i] = (unsigned char)((r = r * 1664525u + 1013904223u) >> 24);
  for (size_t i = 0; i < (size_t)maxb * box * box * 3; i++)
    bj.rgb[i] = (unsigned char)((r = r * 1664525u + 1013904223u) >> 24);
  for (int k = 0; k < maxb; k++)
    bj.jobs[k] = (fc_w2l_job){.key = 1 + (unsigned long long)k, .box_w = box, .box_h = box,
                              .y0 = y0, .rgb = bj.rgb + (size_t)k * box * box * 3,
                              .rgb_stride = box * 3,
                              .mel = mel + (size_t)k * FC_W2L_MEL_H * FC_W2L_MEL_W,
                              .out = bj.out + (size_t)k * bj.rect};
  if (!json)
    printf("bench model: wav2lip %dx%d, device %s, %s; composite: %dx%d boxes\n"
           " batch   model ms/batch  frames/s   e2e ms/batch  frames/s   composite ms  frames/s"
           "   kept ms/batch  frames/s   device MiB\n",
           side, side, device, dtype, box, box);
  for (int i = 0; i < nb; i++) {
    int b = batches[i];
    double ms[2], span = seconds / 2;
    int reps[2];
    for (int k = 0; k < 2; k++) /* warm-up: plan, then graph capture */
      if ((err = fc_w2l_infer_u8(m, mel, crops, out, b))) {
        code = fc_cli_fail(err);
        goto done;
      }
    for (int e2e = 0; e2e < 2; e2e++) {
      double t0 = fc_cli_now(), t = 0;
      int n = 0;
      while (t < span || n < 3) {
        err = e2e ? fc_w2l_infer_u8(m, mel, crops, out, b) : fc_w2l_run_resident(m, b);
        if (err) {
          code = fc_cli_fail(err);
          goto done;
        }
        n++;
        t = fc_cli_now() - t0;
      }
      ms[e2e] = t * 1000 / n, reps[e2e] = n;
    }
    int creps = 0;
    fc_w2l_set_feature_cache(m, 0); /* FC_OK everywhere */
    double cms = time_composite(m, &bj, b, span, &creps, &err), kms = -1;
    if (cms < 0) {
      code = fc_cli_fail(err);
      goto done;
    }
    if (fc_w2l_set_feature_cache(m, 1) == FC_OK) {
      if ((kms = time_composite(m, &bj, b, span, &creps, &err)) < 0) {
        code = fc_cli_fail(err);
        goto done;
      }
    } else {
      fc_error_clear(); /* no feature cache on this device: not an error of the bench */
    }
    char kept[96] = "null,\"kept_frames_per_s\":null";
    if (kms > 0)
      snprintf(kept, sizeof kept, "%.4f,\"kept_frames_per_s\":%.1f", kms, b * 1000.0 / kms);
    double mib = fc_w2l_device_bytes(m) / 1048576.0;
    if (json)
      printf("{\"bench\":\"model\",\"face\":%d,\"device\":\"%s\",\"dtype\":\"%s\",\"batch\":%d,"
             "\"ms_per_batch\":%.4f,\"frames_per_s\":%.1f,\"e2e_ms_per_batch\":%.4f,"
             "\"e2e_frames_per_s\":%.1f,\"composite_ms_per_batch\":%.4f,"
             "\"composite_frames_per_s\":%.1f,\"kept_ms_per_batch\":%s,\"device_mib\":%.1f,"
             "\"reps\":%d}\n",
             side, device, dtype, b, ms[0], b * 1000.0 / ms[0], ms[1], b * 1000.0 / ms[1], cms,
             b * 1000.0 / cms, kept, mib, reps[0] + reps[1] + creps);
    else if (kms > 0)
      printf("%6d  %14.4f  %9.1f  %13.4f  %9.1f  %12.4f  %8.1f  %14.4f  %8.1f  %10.1f\n", b, ms[0],
             b * 1000.0 / ms[0], ms[1], b * 1000.0 / ms[1], cms, b * 1000.0 / cms, kms,
             b * 1000.0 / kms, mib);
    else
      printf("%6d  %14.4f  %9.1f  %13.4f  %9.1f  %12.4f  %8.1f  %14s  %8s  %10.1f\n", b, ms[0],
             b * 1000.0 / ms[0], ms[1], b * 1000.0 / ms[1], cms, b * 1000.0 / cms, "-", "-", mib);
    fflush(stdout);
  }
  if (json) printf("{\"bench\":\"model\",\"peak_host_rss_mib\":%.1f}\n", peak_rss_mib());
  else printf("peak host memory (RSS): %.1f MiB\n", peak_rss_mib());
done:
  free(mel);
  free(crops);
  free(out);
  free(bj.jobs);
  free(bj.rgb);
  free(bj.out);
  fc_w2l_destroy(m);
  return code;
}

int fc_cmd_bench(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "render") == 0) return bench_render(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "serve") == 0) return bench_serve(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "model") == 0) return bench_model(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "pack") == 0) return fc_bench_pack(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "bulk") == 0) return fc_bench_bulk(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "startup") == 0) return fc_bench_startup(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "still") == 0) return fc_bench_still(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "chat") == 0) return bench_chat(argc - 1, argv + 1);
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    bench_usage(stdout);
    return FC_EXIT_OK;
  }
  fprintf(stderr, "facecast: error: bench: expected a benchmark name (render, serve, model, pack, chat, bulk, startup, still)\n");
  bench_usage(stderr);
  return FC_EXIT_INPUT;
}
