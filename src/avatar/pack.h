/* Avatar packs: one versioned file per prepared avatar, memory-mapped read-only so every session
 * and process on the machine shares one copy of its pages.
 *
 * Layout (all integers little-endian): the magic "FCAVPACK", a format version, the length and
 * bytes of a JSON header (id, size, fps, frame and clip tables, crop sizes, and a free "meta"
 * object: source, quality report, creation time), a section table (offset, size, CRC-32 of
 * each section), then page-aligned sections: a tile store (I420 frames cut into 64x64 luma +
 * 32x32 chroma tiles), one tile table per stored frame (which stored tile each tile position
 * shows), the frame index (which stored frame each frame shows: identical consecutive frames,
 * as from a photo, are stored once), face boxes, 68 landmarks per frame, face crops at each
 * crop size as RGB with an 8-bit blend mask each, and the clips' audio as interleaved s16.
 *
 * Why tiles (format version 2): a presenter video's background and body do not move, so a tile
 * equal (or equal but for codec noise, see pack.c) to the one the previous frame shows at its
 * position is not stored again. 10 s of 1080p is 778 MB as whole I420 frames; as tiles it is
 * the first frame plus what moves. Frames are therefore not contiguous in the mapping: readers
 * assemble one with fc_pack_copy_i420 (a memcpy per tile row, as fast as copying a frame).
 * Version 1 files (whole frames) are refused with FC_EUNSUPPORTED: none were ever distributed,
 * and a second reader path for them would be dead code; recreate such an avatar.
 *
 * Opening checks everything but the bulk data (magic, version, JSON, that every section lies in
 * the file and has the size the header implies, the CRCs of the small sections); a truncated,
 * foreign or inconsistent file is refused with FC_EFORMAT and a detail naming the problem, and
 * never read out of bounds. fc_pack_verify() also checks the bulk CRCs. */
#ifndef FACECAST_PACK_H
#define FACECAST_PACK_H

#include "avatar/image.h"
#include "avatar/landmarks.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FC_PACK_VERSION 2
#define FC_PACK_TILE 64 /* luma tile side in pixels; chroma tiles are half that */
#define FC_PACK_MAX_CROPS 2
#define FC_PACK_MAX_CLIPS 32

typedef struct fc_pack_info {
  char id[64];                       /* [A-Za-z0-9_-]{1,63} */
  int width, height;                 /* frame size, even */
  int fps_num, fps_den;              /* e.g. 25/1 */
  int frames;                        /* frame count (>= 1) */
  int ncrops;                        /* 0..FC_PACK_MAX_CROPS */
  int crop_size[FC_PACK_MAX_CROPS];  /* e.g. 96, 256: square RGB crops of the face box */
} fc_pack_info;

/* One frame: what the writer takes and the reader hands out (pointers into the mapping). */
typedef struct fc_pack_frame {
  /* Writer input: width*height*3/2 bytes, planes Y, U, V. The reader sets it NULL: stored
   * frames are tiles, assembled by fc_pack_copy_i420(). */
  const uint8_t *i420;
  fc_rect box;                              /* the padded face box the crops were cut from */
  fc_point landmarks[FC_LANDMARKS];         /* in frame pixels */
  const uint8_t *crop[FC_PACK_MAX_CROPS];   /* crop_size² × 3 RGB */
  const uint8_t *mask[FC_PACK_MAX_CROPS];   /* crop_size² blend mask (mouth/jaw), 0..255 */
} fc_pack_frame;

/* A named clip: frames [first, first + count) of the pack, with optional audio. */
typedef struct fc_pack_clip {
  char name[32];                 /* [A-Za-z0-9_-]{1,31}, unique in the pack */
  int first, count;
  int audio_rate, audio_channels; /* 0, 0: no audio */
  int64_t audio_frames;           /* samples per channel */
  const int16_t *audio;           /* interleaved */
} fc_pack_clip;

/* ---- writing (streaming: frames are appended one at a time) ---- */

typedef struct fc_pack_writer fc_pack_writer;

/* Starts a pack at path (written to a temporary file beside it, renamed by finish()).
 * meta_json: a JSON object stored as "meta" in the header (may be NULL). NULL with *err set:
 * FC_EINVAL (bad info), FC_EIO, FC_ENOMEM. */
fc_pack_writer *fc_pack_writer_create(const char *path, const fc_pack_info *info,
                                      const char *meta_json, int *err);
/* Appends the next frame (info.frames of them, in order). Copies what it needs. */
int fc_pack_writer_add_frame(fc_pack_writer *w, const fc_pack_frame *f);
/* Adds a clip over frames already or still to be added (checked at finish). */
int fc_pack_writer_add_clip(fc_pack_writer *w, const fc_pack_clip *c);
/* Writes the tables, syncs and renames into place. */
int fc_pack_writer_finish(fc_pack_writer *w);
/* Makes finish fail (FC_EINVAL) rather than replace a pack at its path, as one made meanwhile
 * by another process would be (the server's avatar tasks without "overwrite"). */
void fc_pack_writer_no_replace(fc_pack_writer *w);
/* Frees the writer; an unfinished pack's temporary file is removed. */
void fc_pack_writer_destroy(fc_pack_writer *w);

/* ---- reading ---- */

typedef struct fc_pack fc_pack;

/* Maps a pack read-only. NULL with *err set: FC_ENOTFOUND, FC_EIO, FC_EFORMAT (detail),
 * FC_EUNSUPPORTED (a newer version, or version 1), FC_ENOMEM. */
fc_pack *fc_pack_open(const char *path, int *err);
/* The same over a copy of size bytes in memory (name is used in error details); for tools
 * and fuzzing: fc_pack_verify needs a file. */
fc_pack *fc_pack_open_mem(const void *data, size_t size, const char *name, int *err);
void fc_pack_close(fc_pack *p);
const fc_pack_info *fc_pack_get_info(const fc_pack *p);
/* The header's "meta" object as JSON text ("{}" when none); valid while the pack is open. */
const char *fc_pack_meta_json(const fc_pack *p);
/* Frame i (0 <= i < frames): box, landmarks, and crops and masks as pointers into the mapping
 * (i420 is NULL: see fc_pack_copy_i420). FC_EINVAL for a bad index. */
int fc_pack_get_frame(const fc_pack *p, int i, fc_pack_frame *out);
/* Assembles frame i from its tiles into dst, width*height*3/2 bytes of contiguous I420 (Y, U,
 * V). Allocates nothing and may be called from any thread. FC_EINVAL for a bad index. */
int fc_pack_copy_i420(const fc_pack *p, int i, uint8_t *dst);
/* The rectangle r of frame i (x, y, w, h even, w and h >= 2, inside the frame) as contiguous
 * I420 of r.w x r.h into dst: Y r.w*r.h bytes, then U and V (r.w/2)*(r.h/2) each. FC_EINVAL
 * for a bad index or rectangle. */
int fc_pack_copy_i420_rect(const fc_pack *p, int i, fc_rect r, uint8_t *dst);
int fc_pack_clip_count(const fc_pack *p);
int fc_pack_get_clip(const fc_pack *p, int k, fc_pack_clip *out);
/* Index of the clip named name, or FC_ENOTFOUND. */
int fc_pack_find_clip(const fc_pack *p, const char *name);
/* Checks the CRCs of the bulk sections too (reads the whole file): 0 or FC_EFORMAT. */
int fc_pack_verify(const fc_pack *p);
/* This process's memory for the pack's mapping, from /proc/self/smaps (Linux): rss_kb counts
 * its resident pages, pss_kb divides each page by the processes mapping it. The pages are
 * shared, so Pss (summed over processes: what the machine holds) is the figure to report, not
 * Rss. Reads a /proc file: for metrics and benchmarks, not per frame. 0, FC_EINVAL, or
 * FC_EUNSUPPORTED where /proc/self/smaps cannot be read. */
int fc_pack_resident(const fc_pack *p, int64_t *rss_kb, int64_t *pss_kb);

#ifdef __cplusplus
}
#endif
#endif
