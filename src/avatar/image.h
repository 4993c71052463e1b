/* Images: 8-bit RGB, packed, row-major. PNG/JPEG decoding (libpng, libjpeg), grey conversion
 * with OpenCV's exact coefficients (the Haar detector depends on them), bilinear crop-and-scale.
 * An fc_image owns its pixels; fc_image_free() tolerates a zeroed or half-built image. */
#ifndef FACECAST_IMAGE_H
#define FACECAST_IMAGE_H

#include "facecast/picture.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decodes a PNG or JPEG file (chosen by its magic bytes, not its name) into RGB: grey, palette,
 * 16-bit and alpha inputs are converted (alpha dropped). Errors: FC_ENOTFOUND, FC_EIO,
 * FC_EFORMAT (corrupt), FC_EUNSUPPORTED (not PNG/JPEG), each with a detail naming the file. */
int fc_image_load(const char *path, fc_image *out);
int fc_image_load_mem(const void *data, size_t size, const char *name, fc_image *out);

/* Writes an 8-bit RGB PNG (tests, debugging, avatar tools). */
int fc_image_save_png(const char *path, const fc_image *img);

/* Grey as OpenCV's cvtColor(RGB2GRAY): (9798 R + 19235 G + 3735 B + 16384) >> 15.
 * gray has gray_stride bytes per row. */
void fc_image_to_gray(const fc_image *img, uint8_t *gray, int gray_stride);

/* Bilinear resample of the src region `crop` (may extend past the image: outside pixels repeat
 * the edge) into dst, whose size is already set (allocated by the caller). */
void fc_image_resize_region(const fc_image *src, fc_rect crop, fc_image *dst);

#ifdef __cplusplus
}
#endif
#endif
