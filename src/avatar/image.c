/* Images: PNG/JPEG decoding, PNG writing, OpenCV-exact grey, bilinear crop-and-scale.
 *
 * Design notes.
 * - Files are read whole and decoded from memory, so the file and memory entry points share
 *   one code path and the format is chosen by magic bytes, never by the file name.
 * - libpng and libjpeg report errors by longjmp. Each decoder keeps everything that must be
 *   released in a context struct allocated before setjmp(), so the error path frees it
 *   without relying on locals that setjmp may have clobbered.
 * - libjpeg's *warnings* for premature end of data or corrupt entropy data are promoted to
 *   errors: a truncated JPEG would otherwise "decode" into grey filler. Only the harmless
 *   "extraneous bytes before marker" warning is tolerated.
 * - Dimensions are capped (FC_IMAGE_MAX_SIDE, FC_IMAGE_MAX_PIXELS) so a forged header cannot
 *   make us allocate gigabytes.
 * - Grey uses OpenCV's 15-bit coefficients exactly, because the Haar detector's boxes must
 *   match OpenCV's bit for bit.
 * - Resizing uses 8-bit fixed-point weights (like INTER_LINEAR_EXACT) so results are the same
 *   on every machine and compiler.
 */
#include "core/file.h"
#include "avatar/image.h"

#include "facecast/error.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* jpeglib.h needs FILE and size_t declared first; jerror.h needs jpeglib.h. */
#include <jpeglib.h>

#include <jerror.h>

#define FC_IMAGE_MAX_FILE (1 << 30)    /* compressed input, bytes */

static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
static const uint8_t jpeg_magic[3] = {0xff, 0xd8, 0xff};

/* ---- PNG decoding ---------------------------------------------------------------------- */

typedef struct png_src {
  const uint8_t *data;
  size_t size, pos;
  char msg[200]; /* libpng's error text, kept for the detail */
  png_bytep *rows;
} png_src;

static void png_on_error(png_structp png, png_const_charp msg) {
  png_src *src = png_get_error_ptr(png);
  snprintf(src->msg, sizeof src->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void png_read_mem(png_structp png, png_bytep out, size_t n) {
  png_src *src = png_get_io_ptr(png);
  if (n > src->size - src->pos) png_error(png, "truncated file (unexpected end of data)");
  memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

static int decode_png(const uint8_t *data, size_t size, const char *name, fc_image *out) {
  png_src *src = calloc(1, sizeof *src);
  if (!src) return fc_error_set(FC_ENOMEM, "%s: out of memory", name);
  src->data = data;
  src->size = size;
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, src, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  int rc = FC_OK;
  if (!png || !info) {
    rc = fc_error_set(FC_ENOMEM, "%s: out of memory", name);
    goto cleanup;
  }
  if (setjmp(png_jmpbuf(png))) {
    /* `out` may hold a half-decoded image; the caller must not see it. */
    fc_image_free(out);
    rc = fc_error_set(FC_EFORMAT, "%s: corrupt PNG: %s", name, src->msg);
    goto cleanup;
  }
  png_set_user_limits(png, FC_IMAGE_MAX_SIDE, FC_IMAGE_MAX_SIDE);
  png_set_read_fn(png, src, png_read_mem);
  png_read_info(png, info);
  png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if ((unsigned long)w * h > (unsigned long)FC_IMAGE_MAX_PIXELS) {
    rc = fc_error_set(FC_EUNSUPPORTED, "%s: PNG of %ux%u pixels is too large", name, (unsigned)w,
                      (unsigned)h);
    goto cleanup;
  }
  /* Normalise every colour type and depth to 8-bit RGB without alpha. */
  png_set_expand(png);   /* palette -> RGB, grey < 8 bit -> 8 bit, tRNS -> alpha */
  png_set_strip_16(png); /* 16 -> 8 bit */
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != (size_t)w * 3)
    png_error(png, "unexpected row layout after conversion to RGB");
  if ((rc = fc_image_alloc(out, (int)w, (int)h)) != FC_OK) goto cleanup;
  src->rows = malloc(sizeof *src->rows * h);
  if (!src->rows) {
    fc_image_free(out);
    rc = fc_error_set(FC_ENOMEM, "%s: out of memory", name);
    goto cleanup;
  }
  for (png_uint_32 y = 0; y < h; y++) src->rows[y] = out->rgb + (size_t)y * out->stride;
  png_read_image(png, src->rows);
  png_read_end(png, NULL); /* checks the trailing chunks' CRCs and that IEND is there */

cleanup:
  if (png) png_destroy_read_struct(&png, info ? &info : NULL, NULL);
  free(src->rows);
  free(src);
  return rc;
}

/* ---- JPEG decoding --------------------------------------------------------------------- */

typedef struct jpeg_ctx {
  struct jpeg_error_mgr mgr; /* first, so the libjpeg callbacks can cast back */
  jmp_buf jmp;
  char msg[JMSG_LENGTH_MAX];
} jpeg_ctx;

static void jpeg_on_error(j_common_ptr cinfo) {
  jpeg_ctx *ctx = (jpeg_ctx *)cinfo->err;
  cinfo->err->format_message(cinfo, ctx->msg);
  longjmp(ctx->jmp, 1);
}

static void jpeg_on_message(j_common_ptr cinfo, int level) {
  /* level -1 is a warning about corrupt data; positive levels are trace messages. */
  if (level < 0 && cinfo->err->msg_code != JWRN_EXTRANEOUS_DATA) jpeg_on_error(cinfo);
}

static int decode_jpeg(const uint8_t *data, size_t size, const char *name, fc_image *out) {
  struct jpeg_decompress_struct cinfo;
  jpeg_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return fc_error_set(FC_ENOMEM, "%s: out of memory", name);
  int rc = FC_OK;
  memset(&cinfo, 0, sizeof cinfo);
  cinfo.err = jpeg_std_error(&ctx->mgr);
  ctx->mgr.error_exit = jpeg_on_error;
  ctx->mgr.emit_message = jpeg_on_message;
  if (setjmp(ctx->jmp)) {
    fc_image_free(out);
    rc = fc_error_set(FC_EFORMAT, "%s: corrupt JPEG: %s", name, ctx->msg);
    goto cleanup;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, (unsigned long)size);
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    rc = fc_error_set(FC_EUNSUPPORTED, "%s: CMYK JPEGs are not supported", name);
    goto cleanup;
  }
  if ((long)cinfo.image_width * cinfo.image_height > FC_IMAGE_MAX_PIXELS ||
      cinfo.image_width > FC_IMAGE_MAX_SIDE || cinfo.image_height > FC_IMAGE_MAX_SIDE) {
    rc = fc_error_set(FC_EUNSUPPORTED, "%s: JPEG of %ux%u pixels is too large", name,
                      (unsigned)cinfo.image_width, (unsigned)cinfo.image_height);
    goto cleanup;
  }
  cinfo.out_color_space = JCS_RGB; /* libjpeg-turbo also expands greyscale to RGB */
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_components != 3) {
    rc = fc_error_set(FC_EUNSUPPORTED, "%s: JPEG decodes to %d components, not RGB", name,
                      cinfo.output_components);
    goto cleanup;
  }
  if ((rc = fc_image_alloc(out, (int)cinfo.output_width, (int)cinfo.output_height)) != FC_OK)
    goto cleanup;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->rgb + (size_t)cinfo.output_scanline * out->stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);

cleanup:
  jpeg_destroy_decompress(&cinfo); /* safe on a zeroed or half-built struct */
  free(ctx);
  return rc;
}

/* ---- Loading --------------------------------------------------------------------------- */

int fc_image_load_mem(const void *data, size_t size, const char *name, fc_image *out) {
  if (!name) name = "<memory>";
  if (!out || (!data && size)) return fc_error_set(FC_EINVAL, "%s: invalid argument", name);
  memset(out, 0, sizeof *out);
  const uint8_t *p = data;
  if (size == 0) return fc_error_set(FC_EFORMAT, "%s: empty file", name);
  if (size >= sizeof png_magic && !memcmp(p, png_magic, sizeof png_magic))
    return decode_png(p, size, name, out);
  if (size >= sizeof jpeg_magic && !memcmp(p, jpeg_magic, sizeof jpeg_magic))
    return decode_jpeg(p, size, name, out);
  /* A file cut inside the signature is a truncated image, not a foreign format. */
  if ((size < sizeof png_magic && !memcmp(p, png_magic, size)) ||
      (size < sizeof jpeg_magic && !memcmp(p, jpeg_magic, size)))
    return fc_error_set(FC_EFORMAT, "%s: truncated image (%zu bytes)", name, size);
  return fc_error_set(FC_EUNSUPPORTED,
                      "%s: not a PNG or JPEG file (starts with %02x %02x %02x %02x)", name, p[0],
                      size > 1 ? p[1] : 0, size > 2 ? p[2] : 0, size > 3 ? p[3] : 0);
}

int fc_image_load(const char *path, fc_image *out) {
  if (!path || !out) return fc_error_set(FC_EINVAL, "fc_image_load: NULL argument");
  memset(out, 0, sizeof *out);
  uint8_t *buf = NULL;
  size_t size = 0;
  int rc = fc_file_read(path, FC_IMAGE_MAX_FILE, &buf, &size);
  if (rc == FC_OK) rc = fc_image_load_mem(buf, size, path, out);
  free(buf);
  return rc;
}

/* ---- PNG writing ----------------------------------------------------------------------- */

typedef struct png_dst {
  FILE *f;
  char msg[200];
} png_dst;

static void png_on_write_error(png_structp png, png_const_charp msg) {
  png_dst *dst = png_get_error_ptr(png);
  snprintf(dst->msg, sizeof dst->msg, "%s", msg);
  png_longjmp(png, 1);
}

int fc_image_save_png(const char *path, const fc_image *img) {
  if (!path || !img || !img->rgb || img->w <= 0 || img->h <= 0 || img->stride < 3 * img->w)
    return fc_error_set(FC_EINVAL, "%s: invalid image", path ? path : "fc_image_save_png");
  png_dst *dst = calloc(1, sizeof *dst);
  if (!dst) return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
  png_structp png = NULL;
  png_infop info = NULL;
  int rc = FC_OK;
  dst->f = fopen(path, "wb");
  if (!dst->f) {
    rc = fc_error_set(FC_EIO, "%s: %s", path, strerror(errno));
    goto cleanup;
  }
  png = png_create_write_struct(PNG_LIBPNG_VER_STRING, dst, png_on_write_error, png_on_warning);
  info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    rc = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    goto cleanup;
  }
  if (setjmp(png_jmpbuf(png))) {
    rc = fc_error_set(FC_EIO, "%s: writing PNG failed: %s", path, dst->msg);
    goto cleanup;
  }
  png_init_io(png, dst->f);
  png_set_IHDR(png, info, (png_uint_32)img->w, (png_uint_32)img->h, 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < img->h; y++) png_write_row(png, img->rgb + (size_t)y * img->stride);
  png_write_end(png, NULL);

cleanup:
  if (png) png_destroy_write_struct(&png, info ? &info : NULL);
  if (dst->f && fclose(dst->f) != 0 && rc == FC_OK)
    rc = fc_error_set(FC_EIO, "%s: %s", path, strerror(errno));
  free(dst);
  return rc;
}

/* ---- Pixel operations ------------------------------------------------------------------ */

void fc_image_to_gray(const fc_image *img, uint8_t *gray, int gray_stride) {
  for (int y = 0; y < img->h; y++) {
    const uint8_t *s = img->rgb + (size_t)y * img->stride;
    uint8_t *d = gray + (size_t)y * gray_stride;
    for (int x = 0; x < img->w; x++, s += 3)
      d[x] = (uint8_t)((9798u * s[0] + 19235u * s[1] + 3735u * s[2] + 16384u) >> 15);
  }
}

/* Source sample positions and weights along one axis: the left/top pixel index, clamped into
 * the image, and the 1/256 weight of its right/bottom neighbour. */
static void resize_axis(int src_len, int crop_pos, int crop_len, int dst_len, int *idx, int *w1) {
  double scale = crop_len > 0 ? (double)crop_len / dst_len : 0.0;
  for (int d = 0; d < dst_len; d++) {
    double s = crop_pos + (d + 0.5) * scale - 0.5;
    double fl = floor(s);
    int c1 = (int)lrint((s - fl) * 256.0);
    if (fl < 0) { /* left of the image: repeat the edge */
      idx[d] = 0;
      w1[d] = 0;
    } else if (fl >= src_len - 1) { /* right of the image */
      idx[d] = src_len - 1;
      w1[d] = 0;
    } else {
      idx[d] = (int)fl;
      w1[d] = c1;
    }
  }
}

void fc_image_resize_region(const fc_image *src, fc_rect crop, fc_image *dst) {
  if (!src || !src->rgb || src->w <= 0 || src->h <= 0 || !dst || !dst->rgb || dst->w <= 0 ||
      dst->h <= 0)
    return;
  /* One allocation for the four axis tables; on failure the output is left untouched
   * (the function has no error return, and this only happens for absurd sizes). */
  int *tab = malloc(sizeof(int) * 2 * ((size_t)dst->w + dst->h));
  if (!tab) return;
  int *xi = tab, *xw = xi + dst->w, *yi = xw + dst->w, *yw = yi + dst->h;
  resize_axis(src->w, crop.x, crop.w, dst->w, xi, xw);
  resize_axis(src->h, crop.y, crop.h, dst->h, yi, yw);
  for (int dy = 0; dy < dst->h; dy++) {
    const uint8_t *r0 = src->rgb + (size_t)yi[dy] * src->stride;
    /* With a zero weight the second row is never used; keep it in bounds anyway. */
    const uint8_t *r1 = yw[dy] ? r0 + src->stride : r0;
    int b1 = yw[dy], b0 = 256 - b1;
    uint8_t *out = dst->rgb + (size_t)dy * dst->stride;
    for (int dx = 0; dx < dst->w; dx++) {
      int x0 = 3 * xi[dx], x1 = xw[dx] ? x0 + 3 : x0;
      int a1 = xw[dx], a0 = 256 - a1;
      for (int c = 0; c < 3; c++) {
        int top = a0 * r0[x0 + c] + a1 * r0[x1 + c];
        int bot = a0 * r1[x0 + c] + a1 * r1[x1 + c];
        out[3 * dx + c] = (uint8_t)((b0 * top + b1 * bot + 32768) >> 16);
      }
    }
  }
  free(tab);
}
