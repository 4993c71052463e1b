/* LiveTalking's wav2lip avatar folders as facecast avatar packs.
 *
 * A folder (genavatar.py) holds full_imgs/NNNNNNNN.png (every frame, also .jpg; LiveTalking
 * orders them by the number in the name), face_imgs/ (the box crops resized to 96 or 256 px,
 * optional here: the pack's crops are cut again from the frames) and coords.pkl (one
 * (y1, y2, x1, x2) box per frame, modelfile/ltcoords.h). LiveTalking plays the frames
 * ping-pong (forward, then backward), as facecast plays a pack's idle loop, so the pack keeps
 * the frames in the folder's order.
 *
 * The import keeps LiveTalking's boxes as the pack's face boxes (box x1, y1, x2 - x1, y2 - y1)
 * and finds the 68 landmarks a pack needs (mouth geometry for the backends, the crops' blend
 * masks) with the studio's detectors inside each box: the Haar face whose centre lies in the
 * box, mapped to dlib's box; where none is found, dlib's model runs on the box itself (less
 * exact: the box is S3FD's, padded below). No quality gate: the footage was accepted by
 * LiveTalking's user already. */
#ifndef FACECAST_LTIMPORT_H
#define FACECAST_LTIMPORT_H

#include "studio/studio.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FC_LT_MAX_FRAMES 90000 /* an hour at 25 fps */
#define FC_LT_MAX_SIDE 4096    /* frames wider or taller are refused */

/* Whether path is a folder holding coords.pkl (what LiveTalking's loader needs first). */
int fc_lt_is_avatar_dir(const char *path);

/* Which of a folder's names are frames and in which order, as LiveTalking's loader takes them:
 * names matching *.[jpJP][pnPN]*[gG] (not hidden), ordered by the integer their name has
 * before the last dot. names[0..n) are base names; order[] (room for n) receives the indices
 * of the frames, *count how many. 0, or FC_EFORMAT when a frame's name is not a number, two
 * frames have the same number, or there are more than max_frames (what names the folder).
 * Pure: no file access. */
int fc_lt_frame_order(const char *const *names, int n, const char *what, int max_frames,
                      int *order, int *count);

typedef struct fc_lt_import_params {
  const char *dir;     /* the LiveTalking avatar folder */
  const char *id;      /* NULL: the folder's name */
  const char *out_dir; /* NULL: fc_avatar_dir() */
  int crop_size;       /* 96 or 256: only that crop; 0: face_imgs/' size if 96 or 256, else both */
  const fc_face_models *models; /* NULL: loaded for this call */
  void (*progress)(void *user, int percent); /* may be NULL; called from this thread */
  void *user;
} fc_lt_import_params;

typedef struct fc_lt_import_result {
  char id[64];
  int frames, width, height;
  int detected;         /* frames whose landmarks came from a detected face (the rest: the box) */
  double seconds_taken;
  char path[512];       /* the pack written (empty on failure) */
} fc_lt_import_result;

/* Writes the pack (replacing one with the same id). Nothing is written on failure: the folder
 * is checked first (FC_ENOTFOUND: no folder, coords.pkl or full_imgs/; FC_EFORMAT: a bad
 * coords.pkl, frame and box counts that differ, a box empty or outside its frame, frames of
 * different sizes, an unreadable image; FC_EINVAL: a bad id, too many frames, frames too
 * large), each with a one-line detail. */
int fc_lt_import(const fc_lt_import_params *p, fc_lt_import_result *res);

/* What `serve --avatar ARG` does with a LiveTalking folder. ARG is one when it is a path to a
 * folder with coords.pkl, or an avatar id with no pack in the store but a folder
 * fc_avatar_dir()/ID/ with coords.pkl (LiveTalking's --avatar_id, both keep avatars in
 * data/avatars). The folder is imported as its name's id unless the pack of that id was
 * imported from the same folder after the folder last changed. Returns 1 with the id in id[n],
 * 0 when ARG is no LiveTalking folder (id untouched), or an error (also FC_EINVAL when the id's
 * pack exists but was made from something else). *imported says whether it imported now. */
int fc_lt_avatar_resolve(const char *arg, const fc_lt_import_params *how, char *id, size_t n,
                         int *imported);

#ifdef __cplusplus
}
#endif
#endif
