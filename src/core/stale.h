/* Files and folders in progress, and their leftovers (stale.c). A process writing a temporary
 * file (a pack being written, an upload) or owning a temporary folder holds an flock on it (a
 * folder: on its ".lock" file); a kill -9 or a crash drops the lock with the process, so
 * whatever matches a temporary name and can be locked is a leftover, and the next run sweeps
 * it. No pid files: the kernel knows who is alive.
 *
 * A file or folder is made under a name no sweep matches (".fcnew-XXXXXX"), locked, and only
 * then renamed to its own name, so a sweep never sees one that is not yet held. */
#ifndef FC_CORE_STALE_H
#define FC_CORE_STALE_H

/* Takes an exclusive lock on the open file fd (kept while fd stays open). 0 or -1. */
int fc_stale_hold(int fd);
/* Makes a file named by tmpl (ending in "XXXXXX", replaced in place), locked: its fd (keep it
 * open while the file is in use), or -1 with errno. */
int fc_stale_mkstemp(char *tmpl);
/* Makes a folder named by tmpl (ending in "XXXXXX", replaced in place) with a locked ".lock":
 * the lock's fd (keep it open while the folder is in use), or -1 with errno. */
int fc_stale_mkdtemp(char *tmpl);
/* 1 when path (a file, or a folder with a .lock) is in nobody's hands, 0 when held, -1 when it
 * cannot be checked. A folder without a .lock (made by an older facecast) counts as free only
 * when it has not changed for an hour. */
int fc_stale_is_free(const char *path);
/* Removes the entries of dir whose names start with prefix and contain infix (either may be
 * NULL), are owned by this user and are in nobody's hands: files, and with dirs_too folders
 * with their contents. Returns how many. */
int fc_stale_sweep(const char *dir, const char *prefix, const char *infix, int dirs_too);

#endif
