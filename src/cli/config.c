/* Configuration files for subcommands (facecast serve --config FILE): a YAML mapping whose keys
 * are the command's long options (`api_keys` or `api-keys` for --api-keys), read with libyaml.
 * The file becomes command-line arguments placed before the real ones, so every option is
 * defined once (its getopt entry and --help line) and the command line overrides the file.
 *
 *   port: 8010                 # --port 8010
 *   api_keys: /etc/facecast/keys
 *   quiet: true                # a flag: true includes it, false leaves it out
 *   media_dir: [/srv/a, /srv/b]  # a list: joined with ':' (the options that take lists)
 */
#include "cli/cli.h"
#include "facecast/error.h"

#include <getopt.h>
#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

static const struct option *find_option(const struct option *opts, const char *key) {
  char *name = g_strdup(key);
  for (char *p = name; *p; p++)
    if (*p == '_') *p = '-';
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
  FILE *f = fopen(path, "rb");
  if (!f) return fc_error_set(FC_ENOTFOUND, "--config %s: cannot open it", path);
  yaml_parser_t yp;
  yaml_document_t doc;
  int err = FC_OK;
  yaml_parser_initialize(&yp);
  yaml_parser_set_input_file(&yp, f);
  if (!yaml_parser_load(&yp, &doc)) {
    err = fc_error_set(FC_EFORMAT, "%s:%zu: YAML: %s", path, yp.problem_mark.line + 1,
                       yp.problem ? yp.problem : "malformed");
    yaml_parser_delete(&yp);
    fclose(f);
    return err;
  }
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (root && root->type != YAML_MAPPING_NODE) {
    err = fc_error_set(FC_EFORMAT, "%s: expected a mapping of options (key: value)", path);
  } else if (root) {
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; !err && p < root->data.mapping.pairs.top;
         p++) {
      yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
      size_t line = k->start_mark.line + 1;
      if (k->type != YAML_SCALAR_NODE) {
        err = fc_error_set(FC_EFORMAT, "%s:%zu: a key must be a plain name", path, line);
        break;
      }
      const char *key = (const char *)k->data.scalar.value;
      const struct option *o = find_option(opts, key);
      if (!o) {
        err = fc_error_set(FC_EINVAL, "%s:%zu: unknown option '%s' (see --help)", path, line, key);
        break;
      }
      GString *val = g_string_new(NULL);
      if (v->type == YAML_SCALAR_NODE) {
        g_string_append(val, (const char *)v->data.scalar.value);
      } else if (v->type == YAML_SEQUENCE_NODE && o->has_arg == required_argument) {
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
          yaml_node_t *e = yaml_document_get_node(&doc, *it);
          if (e->type != YAML_SCALAR_NODE) {
            err = fc_error_set(FC_EFORMAT, "%s:%zu: '%s': a list of plain values", path, line, key);
            break;
          }
          g_string_append_printf(val, "%s%s", val->len ? ":" : "", (const char *)e->data.scalar.value);
        }
      } else {
        err = fc_error_set(FC_EFORMAT, "%s:%zu: '%s' needs a value", path, line, key);
      }
      if (!err && o->has_arg == no_argument) {
        int on;
        if (!truthy(val->str, &on))
          err = fc_error_set(FC_EINVAL, "%s:%zu: '%s' is a flag: true or false", path, line, key);
        else if (on)
          g_ptr_array_add(args, g_strdup_printf("--%s", o->name));
      } else if (!err) {
        g_ptr_array_add(args, g_strdup_printf("--%s", o->name));
        g_ptr_array_add(args, g_strdup(val->str));
      }
      g_string_free(val, TRUE);
    }
  }
  yaml_document_delete(&doc);
  yaml_parser_delete(&yp);
  fclose(f);
  return err;
}

int fc_cli_with_config(int argc, char **argv, const struct option *opts, int *argc_out,
                       char ***argv_out, GPtrArray **keep) {
  GPtrArray *a = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(a, g_strdup(argv[0]));
  const char *cfg = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) cfg = argv[++i];
    else if (!strncmp(argv[i], "--config=", 9)) cfg = argv[i] + 9;
  }
  int err = cfg ? config_args(cfg, opts, a) : FC_OK;
  for (int i = 1; i < argc && !err; i++) {
    if (!strcmp(argv[i], "--config") && i + 1 < argc) i++;
    else if (strncmp(argv[i], "--config=", 9) != 0) g_ptr_array_add(a, g_strdup(argv[i]));
  }
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
