/* Leftovers of killed runs, found by their locks (see stale.h). */
#include "core/stale.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOCKLESS_AGE_S 3600 /* a folder without a lock: an older facecast's, left this long */

int fc_stale_hold(int fd) { return flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : -1; }

/* The hidden sibling of tmpl that a file or folder is made under: dir/.fcnew-XXXXXX. */
static int hidden_of(const char *tmpl, char *out, size_t n) {
  size_t len = strlen(tmpl);
  if (len < 6 || strcmp(tmpl + len - 6, "XXXXXX") != 0) return -1;
  const char *slash = strrchr(tmpl, '/');
  int dl = slash ? (int)(slash - tmpl + 1) : 0;
  return snprintf(out, n, "%.*s.fcnew-XXXXXX", dl, tmpl) < (int)n ? 0 : -1;
}

/* tmpl's X's become the hidden name's random ones, then hidden is renamed to it. */
static int publish(const char *hidden, char *tmpl) {
  memcpy(tmpl + strlen(tmpl) - 6, hidden + strlen(hidden) - 6, 6);
  return rename(hidden, tmpl);
}

int fc_stale_mkstemp(char *tmpl) {
  char hidden[4200];
  if (hidden_of(tmpl, hidden, sizeof hidden)) return errno = EINVAL, -1;
  int fd = mkostemp(hidden, O_CLOEXEC);
  if (fd < 0) return -1;
  if (fc_stale_hold(fd) || publish(hidden, tmpl)) {
    int e = errno;
    unlink(hidden);
    close(fd);
    return errno = e, -1;
  }
  return fd;
}

int fc_stale_mkdtemp(char *tmpl) {
  char hidden[4200], lock[4300];
  if (hidden_of(tmpl, hidden, sizeof hidden)) return errno = EINVAL, -1;
  if (!mkdtemp(hidden)) return -1;
  snprintf(lock, sizeof lock, "%s/.lock", hidden);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || fc_stale_hold(fd) || publish(hidden, tmpl)) {
    int e = errno;
    if (fd >= 0) close(fd);
    unlink(lock);
    rmdir(hidden);
    return errno = e, -1;
  }
  return fd;
}

int fc_stale_is_free(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return -1;
  char p[4200];
  if (S_ISDIR(st.st_mode)) snprintf(p, sizeof p, "%s/.lock", path);
  else if (S_ISREG(st.st_mode)) snprintf(p, sizeof p, "%s", path);
  else return -1;
  int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return S_ISDIR(st.st_mode) && errno == ENOENT && time(NULL) - st.st_mtime > LOCKLESS_AGE_S ? 1
                                                                                              : -1;
  int free_ = flock(fd, LOCK_EX | LOCK_NB) == 0;
  close(fd); /* drops the probe's lock */
  return free_;
}

static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
    else unlink(p);
  }
  if (d) closedir(d);
  rmdir(path);
}

int fc_stale_sweep(const char *dir, const char *prefix, const char *infix, int dirs_too) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    /* a hidden name is held only for the moment between its creation and its rename: one
     * older than a minute was left by a crash in that moment */
    const int hidden = strncmp(e->d_name, ".fcnew-", 7) == 0;
    if (!hidden && prefix && strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    if (!hidden && infix && !strstr(e->d_name, infix)) continue;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) != 0 || !(S_ISREG(st.st_mode) || (dirs_too && S_ISDIR(st.st_mode)))) continue;
    if (st.st_uid != geteuid()) continue; /* another user's: not ours to judge */
    if (hidden ? time(NULL) - st.st_mtime < 60 : fc_stale_is_free(p) != 1) continue;
    if (S_ISDIR(st.st_mode)) remove_tree(p);
    else unlink(p);
    n++;
  }
  if (d) closedir(d);
  return n;
}
