/* Helpers the subcommands share (declared in cli.h): errors to exit codes, option values, the
 * avatar a command draws. */
#include "cli/cli.h"
#include "facecast/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int fc_cli_fail(int err) {
  fprintf(stderr, "facecast: error: %s\n", fc_error_detail(err));
  switch (err) {
  case FC_EINVAL: case FC_EFORMAT: case FC_EUNSUPPORTED: case FC_ENOTFOUND: case FC_ENOFACE:
  case FC_EIO:
    return FC_EXIT_INPUT;
  default:
    return FC_EXIT_FAIL;
  }
}

int fc_cli_parse_real(const char *opt, const char *s, double lo, double hi, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v >= lo && v <= hi))
    return fc_error_set(FC_EINVAL, "%s '%s': expected a number from %g to %g", opt, s, lo, hi);
  *out = v;
  return FC_OK;
}

int fc_cli_bad_option(const char *cmd, char **argv) {
  fprintf(stderr, "facecast: error: %s: unknown or incomplete option '%s' (see --help)\n", cmd,
          argv[optind - 1]);
  return FC_EXIT_INPUT;
}

int fc_cli_parse_opus_complexity(const char *s, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < 1 || v > 10)
    return fc_error_set(FC_EINVAL, "--opus-complexity '%s': expected 1..10", s);
  *out = (int)v;
  return FC_OK;
}

int fc_cli_parse_port_range(const char *opt, const char *s, int *lo, int *hi) {
  char *end, *end2 = NULL;
  long a = strtol(s, &end, 10), b = -1;
  if (end != s && *end == '-' && end[1] >= '0' && end[1] <= '9') b = strtol(end + 1, &end2, 10);
  if (b < 0 || *end2 || a < 1024 || b > 65535 || a > b)
    return fc_error_set(FC_EINVAL, "%s '%s': expected MIN-MAX, 1024 <= MIN <= MAX <= 65535", opt,
                        s);
  *lo = (int)a;
  *hi = (int)b;
  return FC_OK;
}

int fc_cli_parse_size(const char *s, int *w, int *h) {
  char *end;
  long a = strtol(s, &end, 10), b = a;
  if (end == s) goto bad;
  if (*end == 'x' || *end == 'X') {
    const char *t = end + 1;
    b = strtol(t, &end, 10);
    if (end == t) goto bad;
  }
  if (*end || a < 64 || b < 64 || a > 4096 || b > 4096 || a % 2 || b % 2) goto bad;
  *w = (int)a;
  *h = (int)b;
  return FC_OK;
bad:
  return fc_error_set(FC_EINVAL, "--size '%s': expected N or WxH, even, 64..4096", s);
}

fc_avatar *fc_cli_load_avatar(const char *path, int w, int h, const char *framing, int *err) {
  fc_avatar_params p = fc_avatar_params_default();
  p.width = w;
  p.height = h;
  if (!framing || strcmp(framing, "auto") == 0) p.framing = FC_FRAMING_AUTO;
  else if (strcmp(framing, "head") == 0) p.framing = FC_FRAMING_HEAD;
  else if (strcmp(framing, "full") == 0) p.framing = FC_FRAMING_FULL;
  else {
    *err = fc_error_set(FC_EINVAL, "--framing '%s': expected auto, head or full", framing);
    return NULL;
  }
  if (path && fc_avatar_is_pack_ref(path)) return fc_avatar_open_pack(path, err);
  /* The default avatar is a small face in a large photo: always frame head and shoulders. */
  if (!path) {
    path = fc_avatar_default_path();
    if (!framing) p.framing = FC_FRAMING_HEAD;
  }
  return fc_avatar_create_from_image(path, &p, err);
}

double fc_cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
