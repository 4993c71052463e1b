/* facecast: the entry point, dispatching to the subcommands (their shared helpers: common.c). */
#include "cli/cli.h"
#include "facecast/error.h"

#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
  fputs("usage: facecast [--data-dir DIR] <command> [options]\n"
        "\n"
        "commands:\n"
        "  serve    real-time talking sessions in the browser (WebRTC), LiveTalking's API\n"
        "  worker   render bulk video jobs from Redis (beside serve --redis nodes)\n"
        "  render   speech (text or WAV) + portrait -> lip-synced MP4\n"
        "  bench    measure speed (bench render|serve|model|pack|chat|bulk)\n"
        "  wav2lip  run the Wav2Lip network on .npy tensors (wav2lip infer)\n"
        "  avatar   prepare avatars from a video or photo (avatar create|list|show)\n"
        "  keys     API keys for serve --api-keys (keys add|remove|list)\n"
        "  say      text -> WAV with the embedded espeak-ng voice\n"
        "\n"
        "Run 'facecast <command> --help' for the options of a command.\n"
        "--data-dir DIR (or $FACECAST_DATA_DIR): where avatars and api_keys live; default ./data,\n"
        "else the data/ beside the folder of the facecast binary.\n",
        f);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return FC_EXIT_INPUT;
  }
  /* --data-dir before the command: every command's avatars and keys (serve takes it too) */
  while (argc >= 3 && (!strcmp(argv[1], "--data-dir") || !strncmp(argv[1], "--data-dir=", 11))) {
    const char *dir = argv[1][10] == '=' ? argv[1] + 11 : argv[2];
    setenv("FACECAST_DATA_DIR", dir, 1);
    int used = argv[1][10] == '=' ? 1 : 2;
    argv[used] = argv[0];
    argv += used;
    argc -= used;
  }
  if (argc < 2) {
    usage(stderr);
    return FC_EXIT_INPUT;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "serve") == 0) return fc_cmd_serve(argc - 1, argv + 1);
  if (strcmp(cmd, "render") == 0) return fc_cmd_render(argc - 1, argv + 1);
  if (strcmp(cmd, "bench") == 0) return fc_cmd_bench(argc - 1, argv + 1);
  if (strcmp(cmd, "wav2lip") == 0) return fc_cmd_wav2lip(argc - 1, argv + 1);
  if (strcmp(cmd, "avatar") == 0) return fc_cmd_avatar(argc - 1, argv + 1);
  if (strcmp(cmd, "keys") == 0) return fc_cmd_keys(argc - 1, argv + 1);
  if (strcmp(cmd, "say") == 0) return fc_cmd_say(argc - 1, argv + 1);
  if (strcmp(cmd, "worker") == 0) return fc_cmd_worker(argc - 1, argv + 1);
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    usage(stdout);
    return FC_EXIT_OK;
  }
  if (strcmp(cmd, "--version") == 0) {
    puts("facecast 0.1.0");
    return FC_EXIT_OK;
  }
  fprintf(stderr, "facecast: error: unknown command '%s'\n", cmd);
  usage(stderr);
  return FC_EXIT_INPUT;
}
