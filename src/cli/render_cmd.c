/* facecast render: text or WAV + portrait → lip-synced MP4. */
#include "cli/cli.h"
#include "facecast/error.h"
#include "facecast/render.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void render_usage(FILE *f) {
  fputs("usage: facecast render [--avatar IMG] (--text \"...\" | --audio FILE.wav) -o OUT.mp4\n"
        "\n"
        "  --avatar IMG      portrait (PNG/JPEG); default: the astronaut photo set up by the README\n"
        "  --text TEXT       words to speak (espeak-ng)\n"
        "  --audio FILE      speech as WAV (PCM 8/16/24/32-bit or float, any rate, any channels)\n"
        "  -o, --output OUT  the MP4 to write\n"
        "  --voice V         espeak-ng voice/language for --text (en, en-us, de, fr, ...)\n"
        "  --rate WPM        speaking rate for --text (default 175)\n"
        "  --size N|WxH      output size, even (default 512; an avatar pack keeps its own)\n"
        "  --framing F       auto, head (head and shoulders) or full (default auto; head for the\n"
        "                    default avatar)\n"
        "  --model NAME      lip-sync backend: parametric (default, no weights) or wav2lip\n"
        "  --checkpoint FILE Wav2Lip checkpoint (.pth, legacy or zip, or .safetensors)\n"
        "  --device D        where wav2lip runs: cpu (default), cpu-ref\n"
        "  --preset P        x264 speed preset (default veryfast)\n"
        "  --quiet           no progress output\n",
        f);
}

typedef struct progress {
  int tty, last_pct;
  double t0;
} progress;

static void on_progress(void *user, int64_t done, int64_t total) {
  progress *p = user;
  if (!p->tty || total <= 0) return;
  int pct = (int)(100 * done / total);
  if (pct == p->last_pct && done != total) return;
  p->last_pct = pct;
  double el = fc_cli_now() - p->t0;
  double speed = el > 0 ? done / 25.0 / el : 0;
  char bar[31];
  int fill = pct * 30 / 100;
  memset(bar, '#', (size_t)fill);
  memset(bar + fill, '-', (size_t)(30 - fill));
  bar[30] = 0;
  fprintf(stderr, "\r%3d%% [%s] %lld/%lld frames  %.1fx real time", pct, bar, (long long)done,
          (long long)total, speed);
  if (done == total) fputc('\n', stderr);
}

int fc_cmd_render(int argc, char **argv) {
  static const struct option opts[] = {
      {"avatar", required_argument, 0, 'a'}, {"text", required_argument, 0, 't'},
      {"audio", required_argument, 0, 'w'},  {"output", required_argument, 0, 'o'},
      {"voice", required_argument, 0, 'v'},  {"rate", required_argument, 0, 'r'},
      {"size", required_argument, 0, 's'},   {"framing", required_argument, 0, 'f'},
      {"model", required_argument, 0, 'm'},  {"preset", required_argument, 0, 'p'},
      {"checkpoint", required_argument, 0, 'c'}, {"device", required_argument, 0, 'd'},
      {"quiet", no_argument, 0, 'q'},        {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *avatar = NULL, *text = NULL, *audio = NULL, *out = NULL, *voice = NULL;
  const char *framing = NULL, *model = NULL, *preset = NULL, *checkpoint = NULL, *device = NULL;
  int rate = 0, quiet = 0, w = 512, h = 512, c, err;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
    switch (c) {
    case 'a': avatar = optarg; break;
    case 't': text = optarg; break;
    case 'w': audio = optarg; break;
    case 'o': out = optarg; break;
    case 'v': voice = optarg; break;
    case 'r': {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (*end || v < 40 || v > 600) {
        fprintf(stderr, "facecast: error: --rate '%s': expected 40..600 words per minute\n", optarg);
        return FC_EXIT_INPUT;
      }
      rate = (int)v;
      break;
    }
    case 's':
      if ((err = fc_cli_parse_size(optarg, &w, &h))) return fc_cli_fail(err);
      break;
    case 'f': framing = optarg; break;
    case 'm': model = optarg; break;
    case 'p': preset = optarg; break;
    case 'c': checkpoint = optarg; break;
    case 'd': device = optarg; break;
    case 'q': quiet = 1; break;
    case 'h': render_usage(stdout); return FC_EXIT_OK;
    default:
      fprintf(stderr, "facecast: error: render: unknown or incomplete option '%s'\n",
              argv[optind - 1]);
      return FC_EXIT_INPUT;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "facecast: error: render: unexpected argument '%s'\n", argv[optind]);
    return FC_EXIT_INPUT;
  }
  if (!!text == !!audio) {
    fprintf(stderr, "facecast: error: render: give exactly one of --text or --audio\n");
    return FC_EXIT_INPUT;
  }
  if (!out) {
    fprintf(stderr, "facecast: error: render: -o OUT.mp4 is required\n");
    return FC_EXIT_INPUT;
  }

  fc_speech sp = {0};
  fc_avatar *av = NULL;
  fc_lipsync *ls = NULL;
  fc_stream *st = NULL;
  int code = FC_EXIT_OK;

  /* Inputs first (cheap to reject), then the heavier set-up. */
  if (audio) {
    fc_audio raw;
    if ((err = fc_wav_read(audio, &raw))) goto fail;
    err = fc_resample(&raw, FC_SAMPLE_RATE, &sp.audio);
    fc_audio_free(&raw);
    if (err) goto fail;
  } else {
    fc_tts_params tp = {.voice = voice, .rate_wpm = rate};
    if ((err = fc_tts_speak(text, &tp, &sp))) goto fail;
  }
  if (!(av = fc_cli_load_avatar(avatar, w, h, framing, &err))) goto fail;
  fc_lipsync_params lp = {.model = model, .checkpoint = checkpoint, .device = device};
  if (!(ls = fc_lipsync_create(&lp, &err))) goto fail;
  fc_stream_params sparams = {.avatar = av, .lipsync = ls};
  if (!(st = fc_stream_create(&sparams, &err))) goto fail;
  if ((err = fc_stream_push_speech(st, sp.audio.samples, sp.audio.n, sp.ph, sp.n_ph, NULL))) goto fail;
  fc_stream_end(st);

  /* the stream's frames are the avatar's: a pack keeps its own size whatever --size says (a
   * 480x400 pack written as 512x512 read past each frame) */
  fc_mp4_params mp = fc_mp4_params_default(fc_avatar_width(av), fc_avatar_height(av));
  if (preset) mp.preset = preset;
  progress pr = {.tty = !quiet && isatty(2), .last_pct = -1, .t0 = fc_cli_now()};
  if ((err = fc_render_to_mp4(st, out, &mp, on_progress, &pr))) goto fail;
  if (!quiet) {
    double el = fc_cli_now() - pr.t0;
    int64_t frames = fc_stream_frames_total(st);
    fprintf(stderr, "wrote %s: %lld frames (%.2f s) in %.2f s, %.1fx real time\n", out,
            (long long)frames, frames / 25.0, el, el > 0 ? frames / 25.0 / el : 0);
  }
  goto done;
fail:
  code = fc_cli_fail(err);
done:
  fc_stream_destroy(st);
  fc_lipsync_destroy(ls);
  fc_avatar_destroy(av);
  fc_speech_free(&sp);
  return code;
}
