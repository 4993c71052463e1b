/* libFuzzer: the cuDNN algorithm cache file (lipsync/wav2lip/algo_cache.h), which a server reads
 * at start from a folder anyone with the account may edit. Whatever the bytes, parsing takes
 * only well-formed lines, every entry it took reads back as parsed, and putting them into a
 * fresh cache and parsing that cache's file again gives the same entries. */
#include "fuzz.h"
#include "lipsync/wav2lip/algo_cache.h"

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  w2l_algo_cache *c = w2l_algo_cache_open(NULL);
  if (!c) return 0;
  int taken = w2l_algo_cache_parse(c, (const char *)data, size), entries = 0;
  w2l_algo_cache_stats(c, &entries, NULL, NULL, NULL);
  if (taken < entries || (taken > 0 && entries == 0)) __builtin_trap();
  /* each line that names a taken key reads back with a valid choice */
  GString *again = g_string_new("facecast-cudnn-algos 1\n");
  const char *p = (const char *)data, *end = p + size;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
    char key[256];
    if (len < 400) { /* the parser takes lines up to 334 bytes */
      char line[400];
      memcpy(line, p, len);
      line[len] = 0;
      w2l_algo a;
      if (sscanf(line, "%255s", key) == 1 && w2l_algo_cache_get(c, key, &a)) {
        if (a.algo < 0 || a.math < 0 || strchr(key, ' ')) __builtin_trap();
        g_string_append_printf(again, "%s %d %d %zu\n", key, a.algo, a.math, a.ws_bytes);
      }
    }
    p += len + 1;
  }
  w2l_algo_cache *d = w2l_algo_cache_open(NULL);
  if (d) {
    w2l_algo_cache_parse(d, again->str, again->len);
    int n2 = 0;
    w2l_algo_cache_stats(d, &n2, NULL, NULL, NULL);
    if (n2 != entries) __builtin_trap();
    w2l_algo_cache_close(d);
  }
  g_string_free(again, TRUE);
  w2l_algo_cache_close(c);
  return 0;
}
