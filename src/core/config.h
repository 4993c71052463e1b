/* Settings files, parsed: a YAML mapping of option names (facecast serve --config, LiveTalking's
 * config.yaml) and .env files of secrets. Pure parsers — bytes in, items out, nothing read or
 * set — so they can be fuzzed; what a key means is the command line's business
 * (src/cli/config.c). Also the names LiveTalking gives facecast's options.
 *
 * Ownership: *items is a new GPtrArray of fc_config_item that frees them; the caller unrefs it
 * (also on error it is NULL). */
#ifndef FC_CORE_CONFIG_H
#define FC_CORE_CONFIG_H

#include <glib.h>
#include <stddef.h>

typedef struct fc_config_item {
  char *key;
  char *value; /* a scalar as written; a list's values joined with ':'; "" for an empty one */
  int line;    /* 1-based, for messages */
  int is_list;
} fc_config_item;

/* YAML: the root must be a mapping (an empty document is no items) of plain keys to scalars or
 * lists of scalars. Errors FC_EFORMAT with "NAME:LINE: ..." as the detail. */
int fc_config_parse_yaml(const char *text, size_t n, const char *name, GPtrArray **items);

/* .env: KEY=VALUE lines; '#' comments, blank lines and a leading "export " are allowed; a value
 * may be 'single' (taken as is) or "double" quoted (\n \" \\ understood), else it ends before
 * an unquoted " #". Keys are [A-Za-z_][A-Za-z0-9_]*. Errors FC_EFORMAT naming NAME:LINE. */
int fc_config_parse_dotenv(const char *text, size_t n, const char *name, GPtrArray **items);

/* The facecast option a LiveTalking option or config.yaml key stands for ("listenport" →
 * "port", "REF_TEXT" → "tts-ref-text", "-l" → "lt-l"), or NULL when name is not one of them. */
const char *fc_config_lt_alias(const char *name);

#endif
