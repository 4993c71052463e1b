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
#include <unistd.h>

int fc_stale_hold(int fd) { return flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : -1; }

int fc_stale_hold_dir(const char *dir) {
  char p[4200];
  snprintf(p, sizeof p, "%s/.lock", dir);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (fc_stale_hold(fd)) {
    close(fd);
    return -1;
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
  if (fd < 0) return S_ISDIR(st.st_mode) && errno == ENOENT ? 1 : -1; /* a folder never locked */
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

int fc_stale_sweep(const char *dir, const char *prefix, const char *infix) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (prefix && strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    if (infix && !strstr(e->d_name, infix)) continue;
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(p, &st) != 0 || (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))) continue;
    if (st.st_uid != geteuid()) continue; /* another user's: not ours to judge */
    if (fc_stale_is_free(p) != 1) continue;
    if (S_ISDIR(st.st_mode)) remove_tree(p);
    else unlink(p);
    n++;
  }
  if (d) closedir(d);
  return n;
}
