/* Where avatar packs live and what they may be called (declared in avatar.h): the runtime opens
 * packs by these rules and the studio writes them by the same ones; neither depends on the
 * other. */
#include "facecast/avatar.h"
#include "core/file.h"
#include "facecast/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *fc_avatar_dir(void) {
  static _Thread_local char path[4096];
  snprintf(path, sizeof path, "%s/avatars", fc_data_dir());
  return path;
}

int fc_avatar_id_valid(const char *id) {
  size_t n = id ? strlen(id) : 0;
  if (n < 1 || n > 63) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = id[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return 0;
  }
  return 1;
}

int fc_avatar_pack_path(const char *dir, const char *path_or_id, char *out, size_t n) {
  if (!path_or_id || !*path_or_id) return fc_error_set(FC_EINVAL, "no avatar given");
  if (strchr(path_or_id, '/') || strstr(path_or_id, ".fcpack")) {
    snprintf(out, n, "%s", path_or_id);
    return FC_OK;
  }
  if (!fc_avatar_id_valid(path_or_id))
    return fc_error_set(FC_EINVAL, "avatar '%s': not an avatar id or a .fcpack file", path_or_id);
  snprintf(out, n, "%.3900s/%s.fcpack", dir ? dir : fc_avatar_dir(), path_or_id);
  return FC_OK;
}
