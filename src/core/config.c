/* Settings files (config.h): YAML through libyaml's document loader, .env by hand (a line
 * format too small for a library), and LiveTalking's option names.
 *
 * The YAML document is built whole (a settings file is small; --config caps it) and walked
 * once; anchors and aliases resolve in the loader, so a key's value is always a node here. Tags
 * are ignored: "8010" and 8010 both arrive as the text the command line would carry. */
#include "core/config.h"

#include "facecast/error.h"

#include <string.h>
#include <yaml.h>

static void item_free(gpointer p) {
  fc_config_item *it = p;
  g_free(it->key);
  g_free(it->value);
  g_free(it);
}

static fc_config_item *item_add(GPtrArray *a, const char *key, char *value, int line, int list) {
  fc_config_item *it = g_new0(fc_config_item, 1);
  it->key = g_strdup(key);
  it->value = value;
  it->line = line;
  it->is_list = list;
  g_ptr_array_add(a, it);
  return it;
}

int fc_config_parse_yaml(const char *text, size_t n, const char *name, GPtrArray **items) {
  *items = NULL;
  yaml_parser_t yp;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&yp)) return fc_error_set(FC_ENOMEM, "%s: YAML parser", name);
  yaml_parser_set_input_string(&yp, (const unsigned char *)text, n);
  if (!yaml_parser_load(&yp, &doc)) {
    int err = fc_error_set(FC_EFORMAT, "%s:%zu: YAML: %s", name, yp.problem_mark.line + 1,
                           yp.problem ? yp.problem : "malformed");
    yaml_parser_delete(&yp);
    return err;
  }
  GPtrArray *a = g_ptr_array_new_with_free_func(item_free);
  int err = FC_OK;
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (root && root->type == YAML_SCALAR_NODE && root->data.scalar.length == 0) root = NULL;
  if (root && root->type != YAML_MAPPING_NODE)
    err = fc_error_set(FC_EFORMAT, "%s:%zu: expected a mapping of options (key: value)", name,
                       root->start_mark.line + 1);
  for (yaml_node_pair_t *p = root && !err ? root->data.mapping.pairs.start : NULL;
       p && !err && p < root->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
    int line = k ? (int)k->start_mark.line + 1 : 0;
    if (!k || !v || k->type != YAML_SCALAR_NODE || k->data.scalar.length == 0 ||
        memchr(k->data.scalar.value, 0, k->data.scalar.length)) {
      err = fc_error_set(FC_EFORMAT, "%s:%d: a key must be a plain name", name, line);
      break;
    }
    const char *key = (const char *)k->data.scalar.value;
    if (v->type == YAML_SCALAR_NODE) {
      item_add(a, key, g_strndup((const char *)v->data.scalar.value, v->data.scalar.length), line, 0);
    } else if (v->type == YAML_SEQUENCE_NODE) {
      GString *val = g_string_new(NULL);
      for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++) {
        yaml_node_t *e = yaml_document_get_node(&doc, *i);
        if (!e || e->type != YAML_SCALAR_NODE) {
          err = fc_error_set(FC_EFORMAT, "%s:%d: '%s': a list of plain values", name, line, key);
          break;
        }
        if (val->len) g_string_append_c(val, ':');
        g_string_append_len(val, (const char *)e->data.scalar.value, (gssize)e->data.scalar.length);
      }
      item_add(a, key, g_string_free(val, FALSE), line, 1);
    } else {
      err = fc_error_set(FC_EFORMAT, "%s:%d: '%s': a value or a list of values, not a mapping",
                         name, line, key);
    }
  }
  yaml_document_delete(&doc);
  yaml_parser_delete(&yp);
  if (err) {
    g_ptr_array_unref(a);
    return err;
  }
  *items = a;
  return FC_OK;
}

static int env_key_char(char c, int first) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (!first && c >= '0' && c <= '9');
}

/* One line's value, p..end: quoted or bare; NULL on an unterminated quote or junk after it. */
static char *env_value(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  GString *v = g_string_new(NULL);
  if (p < end && (*p == '\'' || *p == '"')) {
    char q = *p++;
    for (; p < end && *p != q; p++) {
      if (q == '"' && *p == '\\' && p + 1 < end) {
        p++;
        g_string_append_c(v, *p == 'n' ? '\n' : *p == 't' ? '\t' : *p);
      } else {
        g_string_append_c(v, *p);
      }
    }
    if (p >= end) goto bad; /* no closing quote on this line */
    for (p++; p < end && (*p == ' ' || *p == '\t'); p++) {}
    if (p < end && *p != '#') goto bad;
    return g_string_free(v, FALSE);
  }
  const char *e = p;
  while (e < end && !(*e == '#' && (e == p || e[-1] == ' ' || e[-1] == '\t'))) e++;
  while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
  g_string_append_len(v, p, e - p);
  return g_string_free(v, FALSE);
bad:
  g_string_free(v, TRUE);
  return NULL;
}

int fc_config_parse_dotenv(const char *text, size_t n, const char *name, GPtrArray **items) {
  *items = NULL;
  GPtrArray *a = g_ptr_array_new_with_free_func(item_free);
  const char *p = text, *end = text + n;
  int err = FC_OK;
  for (int line = 1; p < end && !err; line++) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    const char *s = p;
    p = eol < end ? eol + 1 : end;
    while (s < eol && (*s == ' ' || *s == '\t' || *s == '\r')) s++;
    if (s == eol || *s == '#') continue;
    if (eol - s > 7 && !memcmp(s, "export", 6) && (s[6] == ' ' || s[6] == '\t'))
      for (s += 7; s < eol && (*s == ' ' || *s == '\t');) s++;
    const char *k = s;
    while (s < eol && env_key_char(*s, s == k)) s++;
    const char *ke = s;
    while (s < eol && (*s == ' ' || *s == '\t')) s++;
    if (ke == k || s == eol || *s != '=') {
      err = fc_error_set(FC_EFORMAT, "%s:%d: expected NAME=VALUE", name, line);
      break;
    }
    char *v = env_value(s + 1, eol);
    if (!v) {
      err = fc_error_set(FC_EFORMAT, "%s:%d: a quoted value must close on its line", name, line);
      break;
    }
    char *key = g_strndup(k, (gsize)(ke - k));
    item_add(a, key, v, line, 0);
    g_free(key);
  }
  if (err) {
    g_ptr_array_unref(a);
    return err;
  }
  *items = a;
  return FC_OK;
}

/* LiveTalking's config.py names (flags and config.yaml keys) → facecast serve's options. Those
 * facecast has no use for map to options that say so when set (src/cli/serve_cmd.c). */
static const char *const lt_names[][2] = {
    {"listenport", "port"},
    {"max_session", "max-sessions"},
    {"avatar_id", "avatar"},
    {"TTS_SERVER", "tts-server"}, /* the cloning services' URL (its edgetts ignores it) */
    {"REF_TEXT", "tts-ref-text"},
    {"REF_FILE", "ref-file"}, /* a voice (edge) or a reference recording: by --tts */
    {"modelfile", "checkpoint"},
    {"push_url", "push-url"},
    {"batch_size", "batch-size"},
    {"customvideo_config", "customvideo-config"},
    {"audio_output_device", "audio-output-device"},
    {"l", "lt-l"},
    {"m", "lt-m"},
    {"r", "lt-r"},
    {"-l", "lt-l"},
    {"-m", "lt-m"},
    {"-r", "lt-r"},
    {"-c", "config"},
};

const char *fc_config_lt_alias(const char *name) {
  for (size_t i = 0; name && i < G_N_ELEMENTS(lt_names); i++)
    if (!strcmp(name, lt_names[i][0])) return lt_names[i][1];
  return NULL;
}
