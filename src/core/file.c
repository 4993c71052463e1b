/* Whole-file reading with the checks every input reader needs, whole-file replacing, and
 * facecast's folders (see file.h). */
#include "core/file.h"
#include "facecast/error.h"

#include <errno.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fc_file_read(const char *path, size_t max_size, uint8_t **data, size_t *size) {
  *data = NULL;
  *size = 0;
  FILE *f = fopen(path, "rb");
  if (!f)
    return fc_error_set(errno == ENOENT ? FC_ENOTFOUND : FC_EIO, "%s: %s", path, strerror(errno));
  int err = FC_OK;
  uint8_t *buf = NULL;
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    err = fc_error_set(FC_EIO, "%s: not a regular file", path);
    goto done;
  }
  if ((unsigned long long)st.st_size > max_size) {
    err = fc_error_set(FC_EINVAL, "%s: too large (%lld bytes, limit %zu)", path,
                       (long long)st.st_size, max_size);
    goto done;
  }
  size_t len = (size_t)st.st_size;
  buf = malloc(len + 1);
  if (!buf) {
    err = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    goto done;
  }
  if (fread(buf, 1, len, f) != len) {
    err = fc_error_set(FC_EIO, "%s: read error", path);
    free(buf);
    goto done;
  }
  buf[len] = 0;
  *data = buf;
  *size = len;
done:
  fclose(f);
  return err;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *fc_beside_exe(const char *name) {
  static _Thread_local char path[4096];
  char exe[3072];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return NULL;
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return NULL;
  *slash = 0;
  int len = snprintf(path, sizeof path, "%s/../%.512s", exe, name);
  return len > 0 && (size_t)len < sizeof path && is_dir(path) ? path : NULL;
}

/* Not a path compiled in: the binary and the tree may move. A checkout's build folders sit
 * beside its data/, hence the executable's parent as the last guess. */
const char *fc_data_dir(void) {
  const char *env = getenv("FACECAST_DATA_DIR");
  if (env && *env) return env;
  if (is_dir("data")) return "data";
  const char *b = fc_beside_exe("data");
  return b ? b : "data";
}

int fc_file_replace(const char *path, const void *data, size_t n, const char *what) {
  static gint serial; /* two writers of one process (two GPUs' models) get two names */
  char *dir = g_path_get_dirname(path),
       *tmp = g_strdup_printf("%s.%d.%d.tmp", path, (int)getpid(), g_atomic_int_add(&serial, 1));
  int err = FC_OK;
  FILE *f = NULL;
  if (g_mkdir_with_parents(dir, 0755) != 0 || !(f = fopen(tmp, "wb")) ||
      fwrite(data, 1, n, f) != n || fflush(f) != 0 || fsync(fileno(f)) != 0) {
    err = fc_error_set(FC_EIO, "%s %s: %s", what, path, strerror(errno));
    goto done;
  }
  int rc = fclose(f);
  f = NULL;
  if (rc != 0 || rename(tmp, path) != 0)
    err = fc_error_set(FC_EIO, "%s %s: %s", what, path, strerror(errno));
done:
  if (f) fclose(f);
  if (err) unlink(tmp);
  g_free(dir);
  g_free(tmp);
  return err;
}

const char *fc_cache_dir(void) {
  static _Thread_local char path[4096];
  const char *e = getenv("FACECAST_CACHE_DIR");
  if (e) return *e && strcmp(e, "off") != 0 ? e : NULL;
  const char *base = getenv("XDG_CACHE_HOME"), *sub = "facecast";
  if (!base || *base != '/') base = getenv("HOME"), sub = ".cache/facecast";
  if (!base || *base != '/') return NULL;
  int n = snprintf(path, sizeof path, "%s/%s", base, sub);
  return n > 0 && (size_t)n < sizeof path ? path : NULL;
}
