/* facecast say: text to a WAV file with the embedded espeak-ng voice (what the engine speaks;
 * handy for test audio, a fake microphone, checking a voice name). */
#include "cli/cli.h"
#include "facecast/audio.h"
#include "facecast/error.h"
#include "facecast/tts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void say_usage(FILE *f) {
  fputs("usage: facecast say TEXT -o OUT.wav [--voice NAME] [--rate HZ] [--wpm N]\n"
        "  TEXT spoken by espeak-ng into a mono 16-bit WAV at --rate (16000); --voice as for\n"
        "  /human (en, de, zh, ...; default by the text), --wpm words per minute (175).\n",
        f);
}

int fc_cmd_say(int argc, char **argv) {
  static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                       {"voice", required_argument, 0, 'v'},
                                       {"rate", required_argument, 0, 'r'},
                                       {"wpm", required_argument, 0, 'w'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *out = NULL;
  fc_tts_params tp = {0};
  double rate = FC_SAMPLE_RATE, wpm = 0;
  int c, err;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
    switch (c) {
    case 'o': out = optarg; break;
    case 'v': tp.voice = optarg; break;
    case 'r':
      if ((err = fc_cli_parse_real("--rate", optarg, 8000, 48000, &rate))) return fc_cli_fail(err);
      break;
    case 'w':
      if ((err = fc_cli_parse_real("--wpm", optarg, 80, 450, &wpm))) return fc_cli_fail(err);
      break;
    case 'h': say_usage(stdout); return FC_EXIT_OK;
    default: return fc_cli_bad_option("say", argv);
    }
  }
  if (optind != argc - 1 || !out) {
    say_usage(stderr);
    return FC_EXIT_INPUT;
  }
  tp.rate_wpm = (int)wpm;
  fc_speech sp;
  if ((err = fc_tts_speak(argv[optind], &tp, &sp))) return fc_cli_fail(err);
  fc_audio res = {0};
  if (!(err = fc_resample(&sp.audio, (int)rate, &res))) {
    err = fc_wav_write(out, res.samples, res.n, res.rate);
    fc_audio_free(&res);
  }
  fc_speech_free(&sp);
  return err ? fc_cli_fail(err) : FC_EXIT_OK;
}
