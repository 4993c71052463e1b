/* Configuration files for subcommands (facecast serve --config FILE): a YAML mapping whose keys
 * are the command's long options (`api_keys` or `api-keys` for --api-keys), parsed by
 * core/config.c. The file becomes command-line arguments placed before the real ones, so every
 * option is defined once (its getopt entry and --help line) and the command line overrides the
 * file.
 *
 *   port: 8010                 # --port 8010
 *   api_keys: /etc/facecast/keys
 *   quiet: true                # a flag: true includes it, false leaves it out
 *   media_dir: [/srv/a, /srv/b]  # a list: joined with ':' (the options that take lists)
 *   push_url: ''               # empty: left at its default (LiveTalking's file blanks keys so)
 *
 * LiveTalking's names (its config.yaml keys and flags: listenport, max_session, avatar_id,
 * REF_FILE, -l, -c, ...) are translated to facecast's, in the file and on the command line, so
 * its config.yaml and its start commands work unchanged. */
#include "cli/cli.h"
#include "core/config.h"
#include "core/file.h"
#include "facecast/error.h"

#include <getopt.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (1u << 20)

/* facecast's name for an option called `key` (LiveTalking's names; '_' for '-'), g_free it. */
static char *option_name(const char *key) {
  const char *lt = fc_config_lt_alias(key);
  if (lt) return g_strdup(lt);
  char *name = g_strdup(key);
  for (char *p = name; *p; p++)
    if (*p == '_') *p = '-';
  return name;
}

static const struct option *find_option(const struct option *opts, const char *key) {
  char *name = option_name(key);
  const struct option *o = NULL;
  for (int i = 0; opts[i].name && !o; i++)
    if (strcmp(opts[i].name, name) == 0 && strcmp(name, "help") != 0 && strcmp(name, "config") != 0)
      o = &opts[i];
  g_free(name);
  return o;
}

static int truthy(const char *v, int *out) {
  static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
  for (size_t i = 0; i < G_N_ELEMENTS(yes); i++) {
    if (!g_ascii_strcasecmp(v, yes[i])) return *out = 1, 1;
    if (!g_ascii_strcasecmp(v, no[i])) return *out = 0, 1;
  }
  return 0;
}

static int config_args(const char *path, const struct option *opts, GPtrArray *args) {
  uint8_t *text;
  size_t n;
  int err = fc_file_read(path, CONFIG_MAX_BYTES, &text, &n);
  if (err == FC_ENOTFOUND) return fc_error_set(FC_ENOTFOUND, "--config %s: cannot open it", path);
  if (err) return err;
  GPtrArray *items;
  err = fc_config_parse_yaml((const char *)text, n, path, &items);
  free(text);
  for (guint i = 0; !err && i < items->len; i++) {
    const fc_config_item *it = items->pdata[i];
    const struct option *o = find_option(opts, it->key);
    if (!o) {
      err = fc_error_set(FC_EINVAL, "%s:%d: unknown option '%s' (see --help)", path, it->line, it->key);
    } else if (!*it->value) {
      continue; /* blank: the default */
    } else if (o->has_arg == no_argument) {
      int on;
      if (it->is_list || !truthy(it->value, &on))
        err = fc_error_set(FC_EINVAL, "%s:%d: '%s' is a flag: true or false", path, it->line, it->key);
      else if (on)
        g_ptr_array_add(args, g_strdup_printf("--%s", o->name));
    } else {
      g_ptr_array_add(args, g_strdup_printf("--%s", o->name));
      g_ptr_array_add(args, g_strdup(it->value));
    }
  }
  if (items) g_ptr_array_unref(items);
  return err;
}

/* A command-line argument in facecast's spelling: "--avatar_id=x" → "--avatar=x", "-l" →
 * "--lt-l"; anything else as it is. */
static char *normalize_arg(const char *a) {
  const char *lt = fc_config_lt_alias(a);
  if (a[0] == '-' && a[1] && a[1] != '-' && lt) return g_strdup_printf("--%s", lt);
  if (strncmp(a, "--", 2) != 0 || !a[2]) return g_strdup(a);
  const char *eq = strchr(a, '=');
  char *key = g_strndup(a + 2, eq ? (gsize)(eq - a - 2) : strlen(a + 2));
  char *name = option_name(key);
  char *out = g_strdup_printf("--%s%s", name, eq ? eq : "");
  g_free(key);
  g_free(name);
  return out;
}

int fc_cli_with_config(int argc, char **argv, const struct option *opts, int *argc_out,
                       char ***argv_out, GPtrArray **keep) {
  GPtrArray *cl = g_ptr_array_new_with_free_func(g_free);
  for (int i = 1; i < argc; i++) g_ptr_array_add(cl, normalize_arg(argv[i]));
  GPtrArray *a = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(a, g_strdup(argv[0]));
  const char *cfg = NULL;
  for (guint i = 0; i < cl->len; i++) {
    const char *s = cl->pdata[i];
    if (!strcmp(s, "--config") && i + 1 < cl->len) cfg = cl->pdata[++i];
    else if (!strncmp(s, "--config=", 9)) cfg = s + 9;
  }
  int err = cfg && *cfg ? config_args(cfg, opts, a) : FC_OK; /* '' (LiveTalking): no file */
  for (guint i = 0; i < cl->len && !err; i++) {
    const char *s = cl->pdata[i];
    if (!strcmp(s, "--config") && i + 1 < cl->len) i++;
    else if (strncmp(s, "--config=", 9) != 0) g_ptr_array_add(a, g_strdup(s));
  }
  g_ptr_array_unref(cl);
  if (err) {
    g_ptr_array_free(a, TRUE);
    return err;
  }
  *argc_out = (int)a->len;
  g_ptr_array_add(a, NULL);
  *argv_out = (char **)a->pdata;
  *keep = a;
  return FC_OK;
}

int fc_cli_load_dotenv(const char *path, int required) {
  uint8_t *text;
  size_t n;
  int err = fc_file_read(path, CONFIG_MAX_BYTES, &text, &n);
  if (err == FC_ENOTFOUND && !required) return FC_OK;
  if (err) return err;
  GPtrArray *items;
  err = fc_config_parse_dotenv((const char *)text, n, path, &items);
  free(text);
  if (err) return err;
  GString *names = g_string_new(NULL);
  for (guint i = 0; i < items->len; i++) {
    const fc_config_item *it = items->pdata[i];
    if (getenv(it->key)) continue; /* the environment wins, as with every .env reader */
    setenv(it->key, it->value, 1);
    g_string_append_printf(names, "%s%s", names->len ? ", " : "", it->key);
  }
  /* names only: the values are secrets */
  if (names->len) fprintf(stderr, "facecast: %s set %s\n", path, names->str);
  g_string_free(names, TRUE);
  g_ptr_array_unref(items);
  return FC_OK;
}
