/* Files and folders in progress, and their leftovers (stale.c). A process writing a temporary
 * file (an MP4 being rendered, a pack being written, an upload) or owning a temporary folder
 * holds an flock on it (a folder: on its ".lock" file); a kill -9 or a crash drops the lock
 * with the process, so whatever matches a temporary name and can be locked is a leftover, and
 * the next run sweeps it. No ages, no pid files: the kernel knows who is alive. */
#ifndef FC_CORE_STALE_H
#define FC_CORE_STALE_H

/* Takes an exclusive lock on the open file fd (kept while fd stays open). 0 or -1. */
int fc_stale_hold(int fd);
/* Makes dir/.lock and holds it: returns its fd (keep it open while using dir), or -1. */
int fc_stale_hold_dir(const char *dir);
/* 1 when path (a file, or a folder with a .lock) is in nobody's hands, 0 when held, -1 when it
 * cannot be checked (gone, unreadable). */
int fc_stale_is_free(const char *path);
/* Removes the entries of dir whose names start with prefix and contain infix (either may be
 * NULL) and that nobody holds: files, and folders with their contents. Returns how many. */
int fc_stale_sweep(const char *dir, const char *prefix, const char *infix);

#endif
