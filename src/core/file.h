/* Small file helpers shared by the readers (WAV, images, cascades, checkpoints). */
#ifndef FC_CORE_FILE_H
#define FC_CORE_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Reads a whole regular file into a malloc'd buffer (NUL-terminated one byte past *size, so text
 * parsers may treat it as a string). Files larger than max_size bytes are refused (FC_EINVAL),
 * so a stray multi-gigabyte input cannot exhaust memory. Errors: FC_ENOTFOUND, FC_EIO (not a
 * regular file, read error), FC_ENOMEM; each sets a detail naming the path. */
int fc_file_read(const char *path, size_t max_size, uint8_t **data, size_t *size);

/* facecast's data folder (avatars/, api_keys, ...): $FACECAST_DATA_DIR (which --data-dir sets),
 * else ./data where it exists, else the data/ beside the executable's folder (a checkout's
 * build folders), else "data". The returned string is valid until the next call on the
 * thread. */
const char *fc_data_dir(void);

/* "<the executable's folder>/../name" when that is a folder, else NULL (same lifetime). */
const char *fc_beside_exe(const char *name);

/* Replaces path with data[0..n) whole, so a reader sees the old file or the new one, never a
 * mix: a temporary file of this call's own name beside it (the folder made when missing),
 * written, flushed to disk and renamed over path; nothing of it is left after an error.
 * FC_OK, or FC_EIO with a detail "<what> <path>: <reason>". Thread-safe. */
int fc_file_replace(const char *path, const void *data, size_t n, const char *what);

/* The folder of facecast's caches (what a later start may reuse, never needed to run):
 * $FACECAST_CACHE_DIR ("off" or "": no cache, NULL), else $XDG_CACHE_HOME/facecast, else
 * $HOME/.cache/facecast (those two only when absolute), else NULL. The returned string is
 * valid until the next call on the thread or a change of the environment. */
const char *fc_cache_dir(void);

#endif
