/* Pictures' ground floor, for every module: rectangles, I420 pictures described against a
 * still base (what a talking photo's frames are), and copying them by rectangles. No image
 * decoding, no avatar: image.h (RGB images, PNG/JPEG), compose.h (patches into frames) and the
 * media outputs build on this. */
#ifndef FACECAST_PICTURE_H
#define FACECAST_PICTURE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_rect {
  int x, y, w, h;
} fc_rect;

/* An I420 picture (tightly packed planes) described against a still base picture of the same
 * size: outside `changed` every pixel is base's. base NULL: nothing is known. A holder of an
 * earlier copy can then rewrite two rectangles instead of the whole picture (fc_i420_update,
 * below): a talking photo changes only around the mouth. */
typedef struct fc_i420_delta {
  const uint8_t *base;
  fc_rect changed; /* even x, y, w, h inside the picture; w or h 0: the picture is base */
} fc_i420_delta;

/* A point in a picture (landmarks: FC_LANDMARKS of them, dlib's 68-point order). */
#define FC_LANDMARKS 68

typedef struct fc_point {
  float x, y;
} fc_point;

/* Sizes an image may have (a forged header cannot ask for more). */
#define FC_IMAGE_MAX_SIDE 32768
#define FC_IMAGE_MAX_PIXELS (1L << 28) /* 256 Mpixel, 768 MiB of RGB */

/* An 8-bit RGB image, packed, row-major; it owns its pixels, and fc_image_free() tolerates a
 * zeroed or half-built one. (Decoding, grey conversion and resampling: image.h.) */
typedef struct fc_image {
  int w, h;
  int stride;   /* bytes per row, >= 3*w */
  uint8_t *rgb; /* owned */
} fc_image;

/* Allocates a w×h image (stride 3*w, zero-filled). */
int fc_image_alloc(fc_image *img, int w, int h);
void fc_image_free(fc_image *img);

/* Copies rect r (even x, y, w, h; clipped to the w×h picture) of an I420 picture of width w
 * and height h between planes with the given strides (bytes per row, per plane). */
void fc_i420_copy_rect(uint8_t *const dst[3], const int dst_stride[3], const uint8_t *const src[3],
                       const int src_stride[3], int w, int h, fc_rect r);

/* Makes dst (planes and strides; it holds what *held describes) equal to src (tightly packed
 * w×h I420, described by *src_delta, which may be NULL) with the least copying: when both are
 * described against the same base, held->changed is restored from base and src_delta->changed
 * copied from src; otherwise the whole picture is copied. *held becomes *src_delta. */
void fc_i420_update(uint8_t *const dst[3], const int dst_stride[3], fc_i420_delta *held,
                    const uint8_t *src, const fc_i420_delta *src_delta, int w, int h);

/* The planes and strides of a tightly packed w×h I420 buffer. */
void fc_i420_planes(const uint8_t *buf, int w, int h, uint8_t *planes[3], int strides[3]);

#ifdef __cplusplus
}
#endif
#endif
