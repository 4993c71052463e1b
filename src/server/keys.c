/* API keys: the keys file and checking a presented key (see keys.h).
 *
 * Only hashes are stored, so a leaked keys file (or a backup of it) does not let anyone in;
 * keys carry 256 random bits, so a plain SHA-256 needs no salt or stretching. A presented key
 * is hashed and looked up by its hash. */
#include "server/keys.h"

#include "facecast/error.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

struct fc_keys {
  GHashTable *by_hash; /* hex SHA-256 → name */
};

int fc_keys_name_valid(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > FC_KEY_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (!g_ascii_isalnum(name[i]) && !strchr("_-.", name[i])) return 0;
  return 1;
}

static int hex64(const char *s) {
  if (strlen(s) != 64) return 0;
  for (int i = 0; i < 64; i++)
    if (!g_ascii_isxdigit(s[i])) return 0;
  return 1;
}

/* Calls fn for each key line (name, lower-case hex hash); stops at a malformed line. */
static int parse(const char *path, const char *text, int (*fn)(void *, const char *, const char *),
                 void *user) {
  gchar **lines = g_strsplit(text, "\n", -1);
  int err = FC_OK;
  for (int i = 0; lines[i] && !err; i++) {
    char *l = g_strstrip(lines[i]);
    if (!*l || *l == '#') continue;
    gchar **f = g_strsplit_set(l, " \t", -1);
    int n = 0;
    const char *name = NULL, *hash = NULL;
    for (int k = 0; f[k]; k++) {
      if (!*f[k]) continue;
      if (n == 0) name = f[k];
      else if (n == 1) hash = f[k];
      n++;
    }
    if (n != 2 || !fc_keys_name_valid(name) || !hex64(hash)) {
      err = fc_error_set(FC_EFORMAT, "%s:%d: expected 'NAME SHA256HEX' (made by 'facecast keys add')",
                         path, i + 1);
    } else {
      char *lower = g_ascii_strdown(hash, -1);
      err = fn(user, name, lower);
      g_free(lower);
    }
    g_strfreev(f);
  }
  g_strfreev(lines);
  return err;
}

static int add_entry(void *user, const char *name, const char *hash) {
  g_hash_table_insert(((fc_keys *)user)->by_hash, g_strdup(hash), g_strdup(name));
  return FC_OK;
}

fc_keys *fc_keys_load(const char *path, int *err) {
  char *text = NULL;
  GError *e = NULL;
  if (!g_file_get_contents(path, &text, NULL, &e)) {
    *err = fc_error_set(e->code == G_FILE_ERROR_NOENT ? FC_ENOTFOUND : FC_EIO, "API keys: %s",
                        e->message);
    g_error_free(e);
    return NULL;
  }
  fc_keys *k = g_new0(fc_keys, 1);
  k->by_hash = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  *err = parse(path, text, add_entry, k);
  g_free(text);
  if (!*err && !g_hash_table_size(k->by_hash))
    *err = fc_error_set(FC_EINVAL, "API keys: %s holds no keys (add one: facecast keys add NAME)", path);
  if (*err) {
    fc_keys_free(k);
    return NULL;
  }
  return k;
}

void fc_keys_free(fc_keys *k) {
  if (!k) return;
  g_hash_table_destroy(k->by_hash);
  g_free(k);
}

int fc_keys_count(const fc_keys *k) { return k ? (int)g_hash_table_size(k->by_hash) : 0; }

const char *fc_keys_check(const fc_keys *k, const char *key, size_t len) {
  if (!k || !key || !len || len > 256) return NULL;
  char *h = g_compute_checksum_for_data(G_CHECKSUM_SHA256, (const guchar *)key, len);
  const char *name = g_hash_table_lookup(k->by_hash, h);
  g_free(h);
  return name;
}

static int has_name(void *user, const char *name, const char *hash) {
  return strcmp(name, user) == 0 ? fc_error_set(FC_EINVAL, "a key named '%s' exists", name) : FC_OK;
}

int fc_keys_add(const char *path, const char *name, char *key_out, size_t out_size) {
  if (!fc_keys_name_valid(name))
    return fc_error_set(FC_EINVAL, "key name '%s': use 1-%d letters, digits, '_', '-' or '.'",
                        name ? name : "", FC_KEY_NAME_MAX);
  if (out_size < 64) return fc_error_set(FC_EINVAL, "key buffer too small");
  char *text = NULL;
  int err = FC_OK;
  if (g_file_get_contents(path, &text, NULL, NULL)) {
    err = parse(path, text, has_name, (void *)name);
    g_free(text);
    if (err) return err;
  }
  guchar raw[32];
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
    return fc_error_set(FC_EIO, "no random bytes: %s", g_strerror(errno));
  char *b64 = g_base64_encode(raw, sizeof raw);
  /* base64url without padding: safe in headers, URLs and shells */
  for (char *p = b64; *p; p++) *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
  char *eq = strchr(b64, '=');
  if (eq) *eq = 0;
  snprintf(key_out, out_size, "fck_%s", b64);
  g_free(b64);
  char *h = g_compute_checksum_for_string(G_CHECKSUM_SHA256, key_out, -1);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    g_free(h);
    return fc_error_set(FC_EIO, "%s: %s", path, g_strerror(errno));
  }
  char *line = g_strdup_printf("%s %s\n", name, h);
  size_t n = strlen(line);
  err = write(fd, line, n) == (ssize_t)n && fsync(fd) == 0
            ? FC_OK
            : fc_error_set(FC_EIO, "%s: %s", path, g_strerror(errno));
  close(fd);
  g_free(line);
  g_free(h);
  return err;
}

int fc_keys_remove(const char *path, const char *name) {
  char *text = NULL;
  GError *e = NULL;
  if (!g_file_get_contents(path, &text, NULL, &e)) {
    int err = fc_error_set(FC_EIO, "%s", e->message);
    g_error_free(e);
    return err;
  }
  gchar **lines = g_strsplit(text, "\n", -1);
  GString *out = g_string_new(NULL);
  int found = 0;
  for (int i = 0; lines[i]; i++) {
    char *copy = g_strdup(lines[i]);
    char *l = g_strstrip(copy);
    size_t n = strlen(name);
    int match = *l && *l != '#' && strncmp(l, name, n) == 0 && (l[n] == ' ' || l[n] == '\t');
    g_free(copy);
    if (match) {
      found = 1;
      continue;
    }
    if (lines[i + 1] || *lines[i]) g_string_append_printf(out, "%s%s", lines[i], lines[i + 1] ? "\n" : "");
  }
  g_strfreev(lines);
  g_free(text);
  int err = FC_OK;
  if (!found) {
    err = fc_error_set(FC_ENOTFOUND, "no key named '%s' in %s", name, path);
  } else if (!g_file_set_contents_full(path, out->str, (gssize)out->len,
                                       G_FILE_SET_CONTENTS_CONSISTENT, 0600, &e)) {
    err = fc_error_set(FC_EIO, "%s", e->message);
    g_error_free(e);
  }
  g_string_free(out, TRUE);
  return err;
}
