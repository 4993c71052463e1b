/* Private: the face cache, a photo avatar's detection results kept on disk so that a restart
 * skips them. fc_avatar_create_from_image finds the face with the Haar cascade (~0.09 s on a
 * 512×512 portrait) and its 68 landmarks with dlib's model, which takes ~0.43 s only to parse
 * (100 MB): most of a CPU server's start. Both depend on nothing but the pictures and the
 * model files, so they are kept per picture and read back on the next start without opening
 * either model.
 *
 * One small binary file per entry in fc_cache_dir() (the cuDNN algorithm cache's folder),
 * face-<32 hex digits>.fcface. Its name comes from what the results depend on: the decoded
 * source picture (SHA-256 of its size and pixels: the detectors' input, whatever the file's
 * format), the avatar parameters (output size, framing), the Haar parameters and the identity
 * (path, size, modification time; never their 100 MB of bytes) of the cascade and of dlib's
 * model (or that it is not installed). The file holds a 32-byte id, the SHA-256 of all that and
 * of the program's own identity (its executable's path, size and modification time: a rebuilt
 * detector must not be handed an older build's boxes), so a new build finds the file, sees a
 * foreign id and rewrites it: one file per picture and setting, however often one rebuilds.
 *
 *   offset  size
 *        0     8  magic "FCFACES\n"
 *        8     4  version (1)
 *       12     4  flags: bit 0 = landmarks present (else dlib's model was not installed)
 *       16    32  id
 *       48    16  source width, height; avatar width, height (u32 each)
 *       64    16  the face box in the source picture: x, y, w, h (i32)
 *       80   544  68 landmarks in avatar pixels: x, y (f32 bits; zeros when absent)
 *      624     4  CRC-32 of bytes 0..623
 *
 * Little-endian; 628 bytes exactly. Reading is forgiving: a missing, short, long, corrupt,
 * foreign-version or foreign-id file is a miss (the caller computes and rewrites), never an
 * error. Writing is atomic (a temporary file of this write's own name, fsync, rename), so two
 * processes starting at once leave one whole file; a failed write is reported once a process
 * on stderr and costs the next start a recomputation, nothing else. Thread-safe: no state but
 * the process-wide counters. */
#ifndef FC_FACECACHE_H
#define FC_FACECACHE_H

#include "avatar/haar.h"
#include "facecast/avatar.h"

#include <stddef.h>
#include <stdint.h>

#define FC_FACE_CACHE_BYTES 628

typedef struct fc_face_key {
  char name[33]; /* 32 hex digits: the file's name; "" when no key could be made (no cache) */
  uint8_t id[32];
  int model_present;              /* dlib's model file existed when the key was made */
  int src_w, src_h, out_w, out_h; /* the sizes a hit must have (the id covers them too) */
} fc_face_key;

/* What the detectors found, as stored. */
typedef struct fc_face_entry {
  uint8_t id[32];
  int src_w, src_h; /* the source picture's size */
  int out_w, out_h; /* the avatar's frame size */
  fc_rect face;     /* the Haar box in the source picture */
  int has_landmarks;
  fc_point landmarks[FC_LANDMARKS]; /* avatar frame pixels */
} fc_face_entry;

/* The key of src (the decoded picture) made into an avatar with p, its face found with hp on
 * the cascade file and its landmarks with the shape model file (paths; only stat()ed). */
void fc_face_key_make(const fc_image *src, const fc_avatar_params *p, const fc_haar_params *hp,
                      const char *cascade, const char *shape_model, fc_face_key *k);
/* dir/face-NAME.fcface, malloc'd (g_free); NULL when dir is NULL (caching off) or k has no
 * name. */
char *fc_face_cache_path(const char *dir, const fc_face_key *k);

/* The file format both ways. parse: FC_OK, or FC_EFORMAT with a detail naming `name` and the
 * problem (size, magic, version, CRC, a size or box out of range, a non-finite or far-away
 * point, stray bits); *e is then unspecified. encode writes exactly FC_FACE_CACHE_BYTES. */
int fc_face_cache_parse(const uint8_t *buf, size_t n, const char *name, fc_face_entry *e);
void fc_face_cache_encode(const fc_face_entry *e, uint8_t out[FC_FACE_CACHE_BYTES]);

/* 1 and *e when path holds a valid entry with k's id and sizes (a hit), else 0 (a miss: no
 * file, or one that does not parse or is another key's). Counts hits and misses. */
int fc_face_cache_load(const char *path, const fc_face_key *k, fc_face_entry *e);
/* Writes e to path (the folder made when missing). FC_OK, or FC_EIO with a detail naming the
 * path; the first failure of the process is also printed on stderr. Counts writes and
 * failures. */
int fc_face_cache_save(const char *path, const fc_face_entry *e);

typedef struct fc_face_cache_stats {
  int hits, misses, writes, write_failures;
} fc_face_cache_stats;
/* The process's counts so far. */
fc_face_cache_stats fc_face_cache_get_stats(void);

#endif
