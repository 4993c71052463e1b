/* Viola-Jones face detection with OpenCV's Haar cascades (the XML files of Debian's opencv-data),
 * evaluated by facecast's own code: the XML is read at run time and detectMultiScale's CPU path is
 * reproduced step by step (scales, INTER_LINEAR_EXACT pyramid, variance normalisation, stage-0
 * skip, groupRectangles), so boxes match OpenCV's. The cascade is immutable after loading:
 * fc_haar_detect() may run on several threads at once. */
#ifndef FACECAST_HAAR_H
#define FACECAST_HAAR_H

#include "avatar/image.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_haar fc_haar;

typedef struct fc_haar_params {
  double scale_factor; /* > 1; default 1.1 */
  int min_neighbors;   /* default 3; <= 0 returns the raw (clipped) candidates */
  int min_size;        /* smallest window side in pixels; 0 = no limit */
  int max_size;        /* largest window side; 0 = no limit */
} fc_haar_params;

fc_haar_params fc_haar_params_default(void);

/* The path of Debian's haarcascade_frontalface_default.xml (opencv-data). */
const char *fc_haar_default_cascade(void);

/* Loads a cascade (new "opencv-cascade-classifier" format, BOOST, HAAR, untilted features).
 * Returns NULL and sets *err (FC_ENOTFOUND, FC_EFORMAT, FC_EUNSUPPORTED) with a detail. */
fc_haar *fc_haar_load(const char *xml_path, int *err);
/* The same from memory (name is used in error details). */
fc_haar *fc_haar_load_mem(const void *data, size_t size, const char *name, int *err);
void fc_haar_destroy(fc_haar *h);

/* Detects objects in an 8-bit grey image. Writes at most max_out rectangles to out, sorted by
 * area, largest first, and returns how many were found in total (may exceed max_out), or a
 * negative error. */
int fc_haar_detect(const fc_haar *h, const uint8_t *gray, int w, int hgt, int stride,
                   const fc_haar_params *p, fc_rect *out, int max_out);

#ifdef __cplusplus
}
#endif
#endif
