/* Private: the Wav2Lip CUDA backend's cache of cuDNN algorithm choices, kept on disk so that a
 * restart skips the search (cudnnFind* times every candidate of every convolution at every
 * batch size: most of a GPU server's start-up). Plain C, no CUDA: tested and fuzzed on any
 * machine.
 *
 * One file per GPU model and library version (w2l_algo_cache_path), because an algorithm's
 * speed, and whether it runs at all, depends on both; inside it one line per convolution shape:
 *
 *   facecast-cudnn-algos 1
 *   KEY ALGO MATH WORKSPACE_BYTES
 *
 * KEY is any run of non-blank characters the caller makes from the convolution's shape and
 * data type. A line that does not parse is skipped (a half-written or edited file costs a
 * search, never a start). The file is replaced whole (a temporary file renamed over it), so
 * two servers starting at once leave one of their files, never a mix. Not thread-safe: one
 * cache per model instance. */
#ifndef FC_W2L_ALGO_CACHE_H
#define FC_W2L_ALGO_CACHE_H

#include <stddef.h>

typedef struct w2l_algo_cache w2l_algo_cache;

typedef struct w2l_algo {
  int algo;        /* cudnnConvolution{Fwd,BwdData}Algo_t */
  int math;        /* cudnnMathType_t */
  size_t ws_bytes; /* the workspace it needs */
} w2l_algo;

/* The cache file's path: dir/cudnn-<gpu>-sm<major><minor>-cudnn<cudnn>-cuda<runtime>.algos,
 * the GPU's name with anything but letters, digits, '-' and '.' made '_'. dir NULL or "":
 * w2l_algo_cache_dir(). NULL (no file: search every time) when caching is off or no folder is
 * known. Returns a malloc'd string. */
char *w2l_algo_cache_path(const char *dir, const char *gpu, int major, int minor, int cudnn,
                          int runtime);
/* $FACECAST_CACHE_DIR ("off" or "": no cache), else $XDG_CACHE_HOME/facecast, else
 * $HOME/.cache/facecast, else NULL. Valid until the environment changes. */
const char *w2l_algo_cache_dir(void);

/* An empty cache bound to path (NULL: memory only, save does nothing), then the file's lines
 * when it exists. A missing or unreadable file is an empty cache (the reason is kept for
 * w2l_algo_cache_note). NULL only when out of memory. */
w2l_algo_cache *w2l_algo_cache_open(const char *path);
void w2l_algo_cache_close(w2l_algo_cache *c);
/* Adds the lines of buf[0..n) (the file's format; the first line must be the header) and
 * returns how many were taken; a bad header takes none. */
int w2l_algo_cache_parse(w2l_algo_cache *c, const char *buf, size_t n);
/* 1 and *out when key is cached, else 0. Counts hits and misses. */
int w2l_algo_cache_get(w2l_algo_cache *c, const char *key, w2l_algo *out);
/* Adds or replaces key (no blanks, at most 255 characters; else FC_EINVAL); FC_ENOMEM. */
int w2l_algo_cache_put(w2l_algo_cache *c, const char *key, const w2l_algo *a);
/* Writes the file when something was put since the last save: the folder is made when
 * missing. FC_OK, or FC_EIO with a detail naming the path (the cache stays usable). */
int w2l_algo_cache_save(w2l_algo_cache *c);
/* Entries, hits and misses so far, and the file (NULL when memory only). */
void w2l_algo_cache_stats(const w2l_algo_cache *c, int *entries, int *hits, int *misses,
                          const char **path);

#endif
