/* I420 pictures by rectangles (see include/facecast/picture.h). */
#include "facecast/picture.h"

#include "facecast/error.h"

#include <stdlib.h>
#include <string.h>

void fc_i420_planes(const uint8_t *buf, int w, int h, uint8_t *planes[3], int strides[3]) {
  const size_t ysz = (size_t)w * h;
  planes[0] = (uint8_t *)buf;
  planes[1] = planes[0] + ysz;
  planes[2] = planes[1] + ysz / 4;
  strides[0] = w;
  strides[1] = strides[2] = w / 2;
}

void fc_i420_copy_rect(uint8_t *const dst[3], const int dst_stride[3], const uint8_t *const src[3],
                       const int src_stride[3], int w, int h, fc_rect r) {
  /* Clip to the picture and round out to even (chroma covers 2×2 pixels). */
  int x0 = r.x < 0 ? 0 : r.x & ~1, y0 = r.y < 0 ? 0 : r.y & ~1;
  int x1 = r.x + r.w > w ? w : r.x + r.w, y1 = r.y + r.h > h ? h : r.y + r.h;
  x1 += x1 & 1, y1 += y1 & 1;
  if (x1 > w) x1 = w & ~1;
  if (y1 > h) y1 = h & ~1;
  if (x1 <= x0 || y1 <= y0) return;
  for (int pl = 0; pl < 3; pl++) {
    const int sh = pl ? 1 : 0;
    const size_t n = (size_t)((x1 - x0) >> sh);
    for (int y = y0 >> sh; y < y1 >> sh; y++)
      memcpy(dst[pl] + (size_t)y * dst_stride[pl] + (x0 >> sh),
             src[pl] + (size_t)y * src_stride[pl] + (x0 >> sh), n);
  }
}

void fc_i420_update(uint8_t *const dst[3], const int dst_stride[3], fc_i420_delta *held,
                    const uint8_t *src, const fc_i420_delta *src_delta, int w, int h) {
  uint8_t *sp[3];
  int ss[3];
  fc_i420_planes(src, w, h, sp, ss);
  if (src_delta && src_delta->base && held->base == src_delta->base) {
    uint8_t *bp[3];
    int bs[3];
    fc_i420_planes(src_delta->base, w, h, bp, bs);
    fc_i420_copy_rect(dst, dst_stride, (const uint8_t *const *)bp, bs, w, h, held->changed);
    fc_i420_copy_rect(dst, dst_stride, (const uint8_t *const *)sp, ss, w, h, src_delta->changed);
  } else {
    fc_i420_copy_rect(dst, dst_stride, (const uint8_t *const *)sp, ss, w, h,
                      (fc_rect){0, 0, w, h});
  }
  *held = src_delta ? *src_delta : (fc_i420_delta){0};
}

int fc_image_alloc(fc_image *img, int w, int h) {
  if (!img) return fc_error_set(FC_EINVAL, "fc_image_alloc: NULL image");
  memset(img, 0, sizeof *img);
  if (w <= 0 || h <= 0 || w > FC_IMAGE_MAX_SIDE || h > FC_IMAGE_MAX_SIDE ||
      (long)w * h > FC_IMAGE_MAX_PIXELS)
    return fc_error_set(FC_EINVAL, "image size %dx%d out of range", w, h);
  img->rgb = calloc((size_t)w * (size_t)h, 3);
  if (!img->rgb) return fc_error_set(FC_ENOMEM, "out of memory for a %dx%d image", w, h);
  img->w = w;
  img->h = h;
  img->stride = 3 * w;
  return FC_OK;
}

void fc_image_free(fc_image *img) {
  if (!img) return;
  free(img->rgb);
  memset(img, 0, sizeof *img);
}
