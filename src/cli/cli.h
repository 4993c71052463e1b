/* The facecast command line: one file per subcommand, this header between them. */
#ifndef FC_CLI_H
#define FC_CLI_H

#include "facecast/avatar.h"
#include "facecast/lipsync.h"
#include "facecast/tts.h"

#include <getopt.h>
#include <glib.h>
#include <stdio.h>

/* Exit codes: bad input or usage (the user can fix it) vs. a failure inside facecast. */
enum { FC_EXIT_OK = 0, FC_EXIT_FAIL = 1, FC_EXIT_INPUT = 2 };

int fc_cmd_render(int argc, char **argv);
int fc_cmd_bench(int argc, char **argv);
int fc_cmd_serve(int argc, char **argv);
int fc_cmd_wav2lip(int argc, char **argv);
int fc_cmd_avatar(int argc, char **argv);
int fc_cmd_keys(int argc, char **argv);
int fc_cmd_say(int argc, char **argv);
int fc_cmd_worker(int argc, char **argv);

/* serve's options and server (serve_cmd.c), as `serve` or, worker 1, as `worker`. */
struct fc_server_params;
int fc_cli_serve(int argc, char **argv, int worker);
/* worker_cmd.c: its --help; its checks of serve's parsed options (0 or FC_EINVAL with a
 * detail), which make them a worker's; its line once started. */
void fc_cli_worker_usage(FILE *f);
int fc_cli_worker_check(struct fc_server_params *p);
void fc_cli_worker_started(const struct fc_server_params *p, int port);
/* facecast bench pack (bench_pack.c); argv[0] is "pack". */
int fc_bench_pack(int argc, char **argv);
/* facecast bench bulk (bench_bulk.c); argv[0] is "bulk". */
int fc_bench_bulk(int argc, char **argv);
/* facecast bench still (bench_still.c); argv[0] is "still". */
int fc_bench_still(int argc, char **argv);
/* facecast bench startup (bench_startup.c); argv[0] is "startup". */
int fc_bench_startup(int argc, char **argv);

/* serve --avatar: when *avatar names a LiveTalking wav2lip avatar folder (a path, or an id with
 * a folder in the store), imports it unless done before (progress on stderr) and points *avatar
 * at the pack's id. 0 or an error (avatar_cmd.c). */
int fc_cli_lt_avatar(const char **avatar);

/* Prints "facecast: error: <detail>" for err and returns the exit code it maps to. */
int fc_cli_fail(int err);

/* Parses option opt's value s as a number in lo..hi (the whole string). */
int fc_cli_parse_real(const char *opt, const char *s, double lo, double hi, double *out);

/* After getopt_long answered '?' (opterr 0): one line naming the option; FC_EXIT_INPUT. */
int fc_cli_bad_option(const char *cmd, char **argv);

/* Parses --opus-complexity: 1..10. */
int fc_cli_parse_opus_complexity(const char *s, int *out);

/* Parses a port range "MIN-MAX" (e.g. --ice-ports 50000-50100): 1024 <= MIN <= MAX <= 65535,
 * unprivileged ports only. */
int fc_cli_parse_port_range(const char *opt, const char *s, int *lo, int *hi);

/* Parses "512" or "640x360" into an even size. */
int fc_cli_parse_size(const char *s, int *w, int *h);

/* Loads the avatar (path NULL: the default avatar) at the given size and framing. */
fc_avatar *fc_cli_load_avatar(const char *path, int w, int h, const char *framing, int *err);

/* --config FILE (config.c): argv with the file's options (YAML: long option names as keys)
 * placed before the command line's, which override them, every name in facecast's spelling
 * (LiveTalking's translated, see core/config.h); *keep owns the new argv (free it
 * with g_ptr_array_free(keep, TRUE) when done). argv unchanged without --config. */
int fc_cli_with_config(int argc, char **argv, const struct option *opts, int *argc_out,
                       char ***argv_out, GPtrArray **keep);

/* Reads a .env file (core/config.h's format) into the environment, leaving variables already
 * set alone, and names (never shows) what it set on stderr. A missing file is no error unless
 * required. */
int fc_cli_load_dotenv(const char *path, int required);

/* Monotonic seconds. */
double fc_cli_now(void);

#endif
