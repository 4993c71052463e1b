/* 68-point face landmarks: dlib's shape_predictor_68_face_landmarks.dat (Debian's libdlib-data)
 * read and evaluated by facecast's own code (an ensemble of regression trees, exactly as dlib
 * 19.24 evaluates it, so points match dlib's for the same box), plus the mapping from the Haar
 * detector's face box to the box dlib's model was trained on.
 *
 * Point order is dlib's (iBUG 300-W): 0–16 jaw, 17–26 brows, 27–35 nose, 36–47 eyes, 48–59
 * outer lips, 60–67 inner lips. The model is immutable after loading: fc_shape_predict() may
 * run on several threads at once. */
#ifndef FACECAST_LANDMARKS_H
#define FACECAST_LANDMARKS_H

#include "avatar/image.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_shape_model fc_shape_model;

/* $FACECAST_SHAPE_MODEL if set, else /usr/share/dlib/shape_predictor_68_face_landmarks.dat. */
const char *fc_shape_model_default_path(void);

/* Loads a dlib shape predictor file. NULL with *err set: FC_ENOTFOUND / FC_EIO (file),
 * FC_EFORMAT (truncated, foreign or inconsistent, or a model of other than 68 points: the
 * detail names what and where, as a byte offset), FC_ENOMEM. err may be NULL. */
fc_shape_model *fc_shape_model_load(const char *path, int *err);

/* The same from bytes in memory (read during the call, not kept); name labels the details.
 * Tests feed it truncated and corrupted copies without writing files. */
fc_shape_model *fc_shape_model_load_mem(const void *data, size_t size, const char *name,
                                        int *err);

void fc_shape_model_destroy(fc_shape_model *m);

/* dlib's face rectangle: inclusive corners. */
typedef struct fc_dlib_box {
  int l, t, r, b;
} fc_dlib_box;

/* The box dlib's HOG detector would give for a face that the Haar detector
 * (haarcascade_frontalface_default, as fc_haar_detect finds it) boxed as `haar`: the model's
 * points depend on the box, and it was trained on HOG boxes. A fixed linear mapping (fitted on
 * Haar/HOG pairs: corners 4% of the side off on average, see landmarks.c). */
fc_dlib_box fc_dlib_box_from_haar(fc_rect haar);

/* Predicts the 68 points of the face in box on an 8-bit grey image; pts in pixels, rounded as
 * dlib rounds them (whole numbers). Returns 0 or FC_EINVAL (NULL pointers, empty image or a
 * degenerate box: r <= l or b <= t). Pixels outside the image read as 0, as in dlib. Takes
 * about 1 ms (the trees' leaves are 65 MB, so it waits on memory more than it computes). */
int fc_shape_predict(const fc_shape_model *m, const uint8_t *gray, int w, int h, int stride,
                     fc_dlib_box box, fc_point pts[FC_LANDMARKS]);

/* dlib's grey conversion of an RGB image: (R + G + B) / 3, integer division. dst is w×h with
 * stride w. */
void fc_rgb_to_gray_dlib(const fc_image *src, uint8_t *dst);

#ifdef __cplusplus
}
#endif
#endif
