/* The cuDNN algorithm cache (algo_cache.h): a hash table of key -> choice, read from and
 * written to one text file. Reading is forgiving (a bad line is skipped), writing is atomic
 * (temporary file, fsync, rename). */
#include "lipsync/wav2lip/algo_cache.h"

#include "core/file.h"
#include "facecast/error.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER "facecast-cudnn-algos 1"
#define MAX_KEY 255
#define MAX_FILE ((size_t)4 << 20) /* ~40,000 lines: far more than any model's shapes */

struct w2l_algo_cache {
  GHashTable *map; /* char* key -> w2l_algo* */
  char *path;
  int dirty, hits, misses;
};

const char *w2l_algo_cache_dir(void) { return fc_cache_dir(); }

char *w2l_algo_cache_path(const char *dir, const char *gpu, int major, int minor, int cudnn,
                          int runtime) {
  if (!dir || !*dir) dir = w2l_algo_cache_dir();
  if (!dir) return NULL;
  char name[128];
  size_t k = 0;
  for (const char *p = gpu ? gpu : "gpu"; *p && k + 1 < sizeof name; p++)
    name[k++] = g_ascii_isalnum(*p) || *p == '-' || *p == '.' ? *p : '_';
  name[k] = 0;
  return g_strdup_printf("%s/cudnn-%s-sm%d%d-cudnn%d-cuda%d.algos", dir, name, major, minor, cudnn,
                         runtime);
}

static int valid_key(const char *key) {
  size_t n = strlen(key);
  if (n == 0 || n > MAX_KEY) return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)key[i] <= ' ' || key[i] == 0x7f) return 0;
  return 1;
}

int w2l_algo_cache_put(w2l_algo_cache *c, const char *key, const w2l_algo *a) {
  if (!valid_key(key) || a->algo < 0 || a->math < 0)
    return fc_error_set(FC_EINVAL, "algorithm cache: a bad key or choice");
  w2l_algo *v = g_try_new(w2l_algo, 1);
  char *k = v ? g_strdup(key) : NULL;
  if (!k) {
    g_free(v);
    return fc_error_set(FC_ENOMEM, "algorithm cache: out of memory");
  }
  *v = *a;
  g_hash_table_replace(c->map, k, v);
  c->dirty = 1;
  return FC_OK;
}

int w2l_algo_cache_parse(w2l_algo_cache *c, const char *buf, size_t n) {
  size_t hl = strlen(HEADER), i = 0;
  if (n < hl || memcmp(buf, HEADER, hl) != 0 || (n > hl && buf[hl] != '\n')) return 0;
  i = hl + 1;
  int taken = 0;
  while (i < n) {
    const char *line = buf + i, *end = memchr(line, '\n', n - i);
    size_t len = end ? (size_t)(end - line) : n - i;
    i += len + 1;
    char tmp[MAX_KEY + 80], key[MAX_KEY + 1];
    if (len >= sizeof tmp) continue;
    memcpy(tmp, line, len);
    tmp[len] = 0;
    int algo, math, used = 0;
    unsigned long long ws;
    if (sscanf(tmp, "%255s %d %d %llu%n", key, &algo, &math, &ws, &used) != 4 || tmp[used] != 0 ||
        algo < 0 || algo > 64 || math < 0 || math > 16 || ws > ((unsigned long long)1 << 40))
      continue;
    w2l_algo a = {algo, math, (size_t)ws};
    /* the key is the line's first word, whole (not the first 255 characters of a longer one) */
    if ((unsigned char)tmp[0] <= ' ' || tmp[strlen(key)] != ' ' ||
        w2l_algo_cache_put(c, key, &a) != FC_OK)
      continue;
    taken++;
  }
  return taken;
}

w2l_algo_cache *w2l_algo_cache_open(const char *path) {
  w2l_algo_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->map = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  if (path && !(c->path = strdup(path))) {
    w2l_algo_cache_close(c);
    return NULL;
  }
  uint8_t *data = NULL;
  size_t size = 0;
  if (path && fc_file_read(path, MAX_FILE, &data, &size) == FC_OK)
    w2l_algo_cache_parse(c, (const char *)data, size);
  free(data);
  c->dirty = 0;
  return c;
}

void w2l_algo_cache_close(w2l_algo_cache *c) {
  if (!c) return;
  if (c->map) g_hash_table_destroy(c->map);
  free(c->path);
  free(c);
}

int w2l_algo_cache_get(w2l_algo_cache *c, const char *key, w2l_algo *out) {
  const w2l_algo *v = g_hash_table_lookup(c->map, key);
  if (!v) {
    c->misses++;
    return 0;
  }
  c->hits++;
  *out = *v;
  return 1;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int w2l_algo_cache_save(w2l_algo_cache *c) {
  if (!c->path || !c->dirty) return FC_OK;
  guint n = 0;
  gpointer *keys = g_hash_table_get_keys_as_array(c->map, &n);
  qsort(keys, n, sizeof *keys, cmp_str); /* a stable file: diffs show what changed */
  GString *text = g_string_new(HEADER "\n");
  for (guint i = 0; i < n; i++) {
    const w2l_algo *a = g_hash_table_lookup(c->map, keys[i]);
    g_string_append_printf(text, "%s %d %d %zu\n", (const char *)keys[i], a->algo, a->math,
                           a->ws_bytes);
  }
  int err = fc_file_replace(c->path, text->str, text->len, "algorithm cache");
  if (!err) c->dirty = 0;
  g_string_free(text, TRUE);
  g_free(keys);
  return err;
}

void w2l_algo_cache_stats(const w2l_algo_cache *c, int *entries, int *hits, int *misses,
                          const char **path) {
  if (entries) *entries = (int)g_hash_table_size(c->map);
  if (hits) *hits = c->hits;
  if (misses) *misses = c->misses;
  if (path) *path = c->path;
}
