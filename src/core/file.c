/* Whole-file reading with the checks every input reader needs (see file.h). */
#include "core/file.h"
#include "facecast/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
