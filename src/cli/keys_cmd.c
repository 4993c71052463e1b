/* facecast keys: API keys for `serve --api-keys FILE` (see src/server/keys.h).
 *   facecast keys add NAME [--file FILE]     prints a new key, appends its hash to FILE
 *   facecast keys remove NAME [--file FILE]
 *   facecast keys list [--file FILE]         the names (keys are not stored, only hashes)
 * FILE defaults to api_keys in the data directory ($FACECAST_DATA_DIR). */
#include "cli/cli.h"
#include "facecast/error.h"
#include "server/keys.h"

#include <glib.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void keys_usage(FILE *f) {
  fputs("usage: facecast keys add NAME [--file FILE]\n"
        "       facecast keys remove NAME [--file FILE]\n"
        "       facecast keys list [--file FILE]\n"
        "\n"
        "API keys for 'facecast serve --api-keys FILE': 'add' prints a new key once and appends\n"
        "its SHA-256 (never the key) to FILE; clients send 'Authorization: Bearer KEY'.\n"
        "FILE defaults to api_keys in the data directory ($FACECAST_DATA_DIR).\n",
        f);
}

static char *default_file(void) {
  char *data = g_path_get_dirname(fc_avatar_dir()); /* DATA/avatars → DATA */
  char *f = g_build_filename(data, "api_keys", NULL);
  g_free(data);
  return f;
}

int fc_cmd_keys(int argc, char **argv) {
  static const struct option opts[] = {{"file", required_argument, 0, 'f'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *file = NULL;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'f') file = optarg;
    else if (c == 'h') return keys_usage(stdout), FC_EXIT_OK;
    else return fc_cli_bad_option("keys", argv);
  }
  const char *verb = optind < argc ? argv[optind] : NULL;
  const char *name = optind + 1 < argc ? argv[optind + 1] : NULL;
  if (!verb || (strcmp(verb, "list") != 0 && !name) || argc > optind + 2) {
    fprintf(stderr, "facecast: error: keys: expected 'add NAME', 'remove NAME' or 'list'\n");
    return FC_EXIT_INPUT;
  }
  char *def = file ? NULL : default_file();
  const char *path = file ? file : def;
  int err = FC_OK, rc = FC_EXIT_OK;
  if (strcmp(verb, "add") == 0) {
    char key[96];
    if (!(err = fc_keys_add(path, name, key, sizeof key))) {
      printf("%s\n", key);
      fprintf(stderr, "facecast: key '%s' added to %s (shown once: keep it now)\n", name, path);
    }
  } else if (strcmp(verb, "remove") == 0) {
    if (!(err = fc_keys_remove(path, name)))
      fprintf(stderr, "facecast: key '%s' removed from %s (restart the server to apply)\n", name, path);
  } else if (strcmp(verb, "list") == 0) {
    char *text = NULL;
    GError *e = NULL;
    if (!g_file_get_contents(path, &text, NULL, &e)) {
      err = fc_error_set(FC_ENOTFOUND, "%s", e->message);
      g_error_free(e);
    } else {
      gchar **lines = g_strsplit(text, "\n", -1);
      for (int i = 0; lines[i]; i++) {
        char *l = g_strstrip(lines[i]);
        if (!*l || *l == '#') continue;
        char *sp = strpbrk(l, " \t");
        if (sp) *sp = 0;
        printf("%s\n", l);
      }
      g_strfreev(lines);
      g_free(text);
    }
  } else {
    fprintf(stderr, "facecast: error: keys: unknown action '%s' (add, remove, list)\n", verb);
    rc = FC_EXIT_INPUT;
  }
  g_free(def);
  return err ? fc_cli_fail(err) : rc;
}
