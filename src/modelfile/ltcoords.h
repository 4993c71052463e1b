/* LiveTalking's coords.pkl: the face box of every frame of a wav2lip avatar folder, as a pickled
 * Python list of (y1, y2, x1, x2) tuples (genavatar.py writes Python ints; its 2024 version
 * wrote numpy int64 scalars taken from an array; lists of lists are accepted too). Read through
 * the restricted pickle VM (pickle.c), which executes nothing. */
#ifndef FC_MODELFILE_LTCOORDS_H
#define FC_MODELFILE_LTCOORDS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One frame's box in LiveTalking's order: rows y1..y2-1, columns x1..x2-1 of the full frame. */
typedef struct fc_lt_box {
  int y1, y2, x1, x2;
} fc_lt_box;

/* The largest coords.pkl read (a box takes about 50 bytes as numpy scalars, so this is far
 * above what FC_LT_MAX_FRAMES boxes need). */
#define FC_LT_COORDS_MAX_BYTES ((size_t)64 << 20)

/* Parses the pickle data[0..size) (name labels the details): a list (or tuple) of 1..max_boxes
 * items, each a tuple or list of four ints that fit an int (Python ints or numpy integer
 * scalars). *out (malloc'd, *n boxes) in the file's order. Values are not checked against any
 * image (the caller knows the frames' size). 0, or FC_EFORMAT / FC_EUNSUPPORTED (anything else,
 * e.g. a global other than numpy's scalar) / FC_ENOMEM with a one-line detail. */
int fc_lt_coords_parse(const void *data, size_t size, const char *name, int max_boxes,
                       fc_lt_box **out, int *n);

/* The same on a file (at most FC_LT_COORDS_MAX_BYTES): also FC_ENOTFOUND, FC_EIO. */
int fc_lt_coords_load(const char *path, int max_boxes, fc_lt_box **out, int *n);

#ifdef __cplusplus
}
#endif
#endif
