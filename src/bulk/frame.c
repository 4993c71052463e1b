/* The output picture of a bulk video (frame.h): the stream's picture on the canvas, and the
 * caption of the moment burned in.
 *
 * Canvas. When the requested size is the avatar's, the stream's picture is the canvas. Else the
 * avatar is scaled to fit (bilinear, our own taps: see below) and centred, and what it leaves
 * uncovered is the background: a colour, or an image scaled to cover the canvas (cropped to
 * its aspect, centred), made once.
 *
 * Captions. Each cue (a sentence, cut into pieces of at most two lines by characters) is laid
 * out by Pango once, when it first shows, into an ARGB band that is converted to Y/U/V with
 * alpha; each frame blends that band in. White text on a translucent dark box, centred near
 * the bottom, its size a twentieth of the height.
 *
 * By rectangles. A talking head changes around the mouth only, so each frame redraws only
 * what changed since the last one: the stream's changed rects (this frame's and the last one's,
 * against the same still) mapped onto the canvas with the scaler's reach, and the caption band
 * where the caption came, went or changed. The scaler computes every output pixel from its own
 * taps alone, so a rect of it is exactly the whole picture's rect (libyuv's scalers would not
 * promise that); the captioned picture is the clean one copied by the same rect with the band
 * blended over its part of it. The rect goes to the encoder, which skips the macroblocks
 * outside it (h264enc.h); a picture not known against the last one's still (the first, a
 * pack's frames) is redrawn and encoded whole. test_bulk_video checks that pictures drawn by
 * rectangles equal pictures drawn whole, and that nothing outside a reported rect changed.
 */
#include "bulk/frame.h"

#include "avatar/image.h"
#include "facecast/avatar.h"
#include "facecast/error.h"

#include <libyuv.h>
#include <pango/pangocairo.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINES_CHARS 2 /* lines of a caption piece */

struct fc_bulk_frame {
  int w, h, aw, ah;
  int direct;          /* the stream's picture is the output as it is */
  int sw, sh, ox, oy;  /* the avatar's place on the canvas (even) */
  uint8_t *bg;         /* w×h I420: the background with the scaled avatar on it (no caption) */
  uint8_t *out;        /* w×h I420: the picture with its caption (captions only) */
  /* the scaler's taps, per output column / row of the avatar's place: source index and
   * weight of the next one (0..256), for luma and for chroma */
  int *xi, *yi, *cxi, *cyi;
  uint16_t *xf, *yf, *cxf, *cyf;
  /* captions */
  int captions, font_px, line_chars;
  const fc_cue *cues_of; /* the cues `pieces` were cut from */
  int n_cues_of;
  fc_cue *pieces;
  int n_pieces, cur;    /* cur: the piece that is in the band, -1 none */
  fc_rect band;         /* where the band is drawn (even), w 0 when nothing is shown */
  uint8_t *by, *bu, *bv, *ba, *bua; /* the band: Y, U, V and alpha (full and half size) */
  /* the last picture's */
  const uint8_t *last_base;
  fc_rect last_changed;
  int last_shown, drawn;
};

static void rgb_to_yuv(int r, int g, int b, uint8_t *y, uint8_t *u, uint8_t *v) {
  /* BT.601 limited range, as libyuv's RAWToI420 */
  *y = (uint8_t)(((66 * r + 129 * g + 25 * b + 128) >> 8) + 16);
  *u = (uint8_t)(((-38 * r - 74 * g + 112 * b + 128) >> 8) + 128);
  *v = (uint8_t)(((112 * r - 94 * g - 18 * b + 128) >> 8) + 128);
}

static void planes(uint8_t *buf, int w, int h, uint8_t **y, uint8_t **u, uint8_t **v) {
  *y = buf;
  *u = buf + (size_t)w * h;
  *v = *u + (size_t)(w / 2) * (h / 2);
}

/* The background image scaled to cover w×h (cropped to its aspect, centred). */
static int load_background(fc_bulk_frame *f, const char *path) {
  fc_image img = {0};
  int err = fc_image_load(path, &img);
  if (err) return fc_error_set(err, "background.image: %s", fc_error_detail(err));
  /* the part of the image with the canvas's aspect */
  int cw = img.w, ch = img.h;
  if ((int64_t)img.w * f->h > (int64_t)img.h * f->w) cw = (int)((int64_t)img.h * f->w / f->h);
  else ch = (int)((int64_t)img.w * f->h / f->w);
  cw &= ~1, ch &= ~1;
  if (cw < 2 || ch < 2) {
    fc_image_free(&img);
    return fc_error_set(FC_EFORMAT, "background.image: %dx%d is too small", img.w, img.h);
  }
  const int cx = ((img.w - cw) / 2) & ~1, cy = ((img.h - ch) / 2) & ~1;
  uint8_t *tmp = malloc((size_t)cw * ch * 3 / 2);
  if (!tmp) {
    fc_image_free(&img);
    return fc_error_set(FC_ENOMEM, "out of memory");
  }
  uint8_t *ty, *tu, *tv, *dy, *du, *dv;
  planes(tmp, cw, ch, &ty, &tu, &tv);
  planes(f->bg, f->w, f->h, &dy, &du, &dv);
  RAWToI420(img.rgb + (size_t)cy * img.stride + (size_t)cx * 3, img.stride, ty, cw, tu, cw / 2,
            tv, cw / 2, cw, ch);
  I420Scale(ty, cw, tu, cw / 2, tv, cw / 2, cw, ch, dy, f->w, du, f->w / 2, dv, f->w / 2, f->w,
            f->h, kFilterBilinear);
  free(tmp);
  fc_image_free(&img);
  return 0;
}

/* Bilinear taps from a source of n pixels to an output of m, pixel centres aligned: output
 * pixel i samples source position (i + 0.5)·n/m − 0.5, clamped to the source. */
static void taps(int n, int m, int *idx, uint16_t *frac) {
  for (int i = 0; i < m; i++) {
    int64_t p = (((int64_t)2 * i + 1) * n * 256) / (2 * (int64_t)m) - 128; /* 1/256 pixels */
    if (p < 0) p = 0;
    if (p > (int64_t)(n - 1) * 256) p = (int64_t)(n - 1) * 256;
    idx[i] = (int)(p >> 8);
    frac[i] = (uint16_t)(p & 255);
    if (idx[i] >= n - 1) idx[i] = n - 1, frac[i] = 0;
  }
}

/* Output rows [y0, y1) and columns [x0, x1) of a plane scaled with the taps. Every output
 * pixel depends only on its own taps, so any rect of it comes out as the whole would. */
static void scale_rect(const uint8_t *src, int sstride, uint8_t *dst, int dstride,
                       const int *xi, const uint16_t *xf, const int *yi, const uint16_t *yf,
                       int x0, int y0, int x1, int y1) {
  for (int y = y0; y < y1; y++) {
    const uint8_t *r0 = src + (size_t)yi[y] * sstride;
    const uint8_t *r1 = yf[y] ? r0 + sstride : r0;
    const int fy = yf[y];
    uint8_t *d = dst + (size_t)y * dstride;
    for (int x = x0; x < x1; x++) {
      const int i = xi[x], fx = xf[x], j = fx ? i + 1 : i;
      const int top = r0[i] * (256 - fx) + r0[j] * fx, bot = r1[i] * (256 - fx) + r1[j] * fx;
      d[x] = (uint8_t)((top * (256 - fy) + bot * fy + 32768) >> 16);
    }
  }
}

static int make_canvas(fc_bulk_frame *f, const fc_video_spec *s, const char *shared_dir) {
  /* fit: the larger scale at which the avatar is inside the canvas */
  if ((int64_t)f->aw * f->h > (int64_t)f->ah * f->w) {
    f->sw = f->w;
    f->sh = (int)((int64_t)f->ah * f->w / f->aw);
  } else {
    f->sh = f->h;
    f->sw = (int)((int64_t)f->aw * f->h / f->ah);
  }
  f->sw &= ~1, f->sh &= ~1;
  if (f->sw < 2) f->sw = 2;
  if (f->sh < 2) f->sh = 2;
  f->ox = ((f->w - f->sw) / 2) & ~1, f->oy = ((f->h - f->sh) / 2) & ~1;
  const size_t n = (size_t)f->w * f->h * 3 / 2;
  if (!(f->bg = malloc(n)) || !(f->out = malloc(n))) return fc_error_set(FC_ENOMEM, "out of memory");
  uint8_t *y, *u, *v, cy, cu, cv;
  planes(f->bg, f->w, f->h, &y, &u, &v);
  const uint32_t c = s->background_rgb;
  rgb_to_yuv((int)(c >> 16 & 255), (int)(c >> 8 & 255), (int)(c & 255), &cy, &cu, &cv);
  memset(y, cy, (size_t)f->w * f->h);
  memset(u, cu, (size_t)(f->w / 2) * (f->h / 2));
  memset(v, cv, (size_t)(f->w / 2) * (f->h / 2));
  if (s->background_image) {
    char *path = g_build_filename(shared_dir ? shared_dir : ".", s->background_image, NULL);
    int err = load_background(f, path);
    g_free(path);
    if (err) return err;
  }
  memcpy(f->out, f->bg, n);
  if (!(f->xi = malloc(sizeof(int) * f->sw)) || !(f->yi = malloc(sizeof(int) * f->sh)) ||
      !(f->cxi = malloc(sizeof(int) * f->sw / 2)) || !(f->cyi = malloc(sizeof(int) * f->sh / 2)) ||
      !(f->xf = malloc(2u * f->sw)) || !(f->yf = malloc(2u * f->sh)) ||
      !(f->cxf = malloc(2u * (f->sw / 2))) || !(f->cyf = malloc(2u * (f->sh / 2))))
    return fc_error_set(FC_ENOMEM, "out of memory");
  taps(f->aw, f->sw, f->xi, f->xf);
  taps(f->ah, f->sh, f->yi, f->yf);
  taps(f->aw / 2, f->sw / 2, f->cxi, f->cxf);
  taps(f->ah / 2, f->sh / 2, f->cyi, f->cyf);
  return 0;
}

fc_bulk_frame *fc_bulk_frame_create(const fc_video_spec *s, const fc_avatar *av,
                                    const char *shared_dir, int *err) {
  fc_bulk_frame *f = calloc(1, sizeof *f);
  if (!f) {
    *err = fc_error_set(FC_ENOMEM, "out of memory");
    return NULL;
  }
  f->aw = fc_avatar_width(av), f->ah = fc_avatar_height(av);
  f->w = s->width > 0 ? s->width : f->aw;
  f->h = s->height > 0 ? s->height : f->ah;
  f->captions = s->captions && s->script;
  f->direct = f->w == f->aw && f->h == f->ah && !f->captions;
  f->cur = f->last_shown = -1;
  if (f->w == f->aw && f->h == f->ah) { /* no canvas: the avatar fills it */
    f->sw = f->w, f->sh = f->h;
    if (!f->direct && !(f->out = malloc((size_t)f->w * f->h * 3 / 2)))
      *err = fc_error_set(FC_ENOMEM, "out of memory");
    else *err = 0;
  } else {
    *err = make_canvas(f, s, shared_dir);
  }
  if (!*err && f->captions) {
    f->font_px = f->h / 20 < 12 ? 12 : f->h / 20;
    /* characters a line holds at about 0.55 em each in 90 % of the width */
    f->line_chars = (int)(f->w * 0.9 / (f->font_px * 0.55));
    f->band.w = 0;
    const size_t n = (size_t)f->w * f->h;
    f->by = malloc(n), f->bu = malloc(n / 4), f->bv = malloc(n / 4), f->ba = malloc(n),
    f->bua = malloc(n / 4);
    if (!f->by || !f->bu || !f->bv || !f->ba || !f->bua) *err = fc_error_set(FC_ENOMEM, "out of memory");
  }
  if (*err) {
    fc_bulk_frame_destroy(f);
    return NULL;
  }
  return f;
}

void fc_bulk_frame_size(const fc_bulk_frame *f, int *w, int *h) { *w = f->w, *h = f->h; }

void fc_bulk_frame_destroy(fc_bulk_frame *f) {
  if (!f) return;
  fc_cues_free(f->pieces, f->n_pieces);
  free(f->bg), free(f->out), free(f->by), free(f->bu), free(f->bv), free(f->ba), free(f->bua);
  free(f->xi), free(f->yi), free(f->cxi), free(f->cyi);
  free(f->xf), free(f->yf), free(f->cxf), free(f->cyf);
  free(f);
}

/* ---- captions ---- */

/* Lays piece k out into the band (Y/U/V/alpha) and sets f->band. */
static void render_piece(fc_bulk_frame *f, int k) {
  const int pad = f->font_px / 3, bw = f->w, bh = f->font_px * 5;
  cairo_surface_t *cs = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, bw, bh);
  cairo_t *cr = cairo_create(cs);
  PangoLayout *lay = pango_cairo_create_layout(cr);
  PangoFontDescription *fd = pango_font_description_from_string("Sans Bold");
  pango_font_description_set_absolute_size(fd, f->font_px * PANGO_SCALE);
  pango_layout_set_font_description(lay, fd);
  pango_font_description_free(fd);
  pango_layout_set_width(lay, (int)(bw * 0.9) * PANGO_SCALE);
  pango_layout_set_wrap(lay, PANGO_WRAP_WORD_CHAR);
  pango_layout_set_alignment(lay, PANGO_ALIGN_CENTER);
  pango_layout_set_text(lay, f->pieces[k].text, -1);
  PangoRectangle ink, logical;
  pango_layout_get_pixel_extents(lay, &ink, &logical);
  const int lx = (bw - (int)(bw * 0.9)) / 2;
  int tw = logical.width, th = logical.height;
  if (th > bh - 2 * pad) th = bh - 2 * pad;
  const int x0 = lx + logical.x - pad, y0 = bh - th - 2 * pad;
  cairo_set_source_rgba(cr, 0, 0, 0, 0.6);
  cairo_rectangle(cr, x0, y0, tw + 2 * pad, th + 2 * pad);
  cairo_fill(cr);
  cairo_move_to(cr, lx, y0 + pad - logical.y);
  cairo_set_source_rgb(cr, 1, 1, 1);
  pango_cairo_show_layout(cr, lay);
  cairo_surface_flush(cs);
  g_object_unref(lay);
  cairo_destroy(cr);

  /* the box, even, inside the picture; the band sits a twentieth of the height above the
   * bottom */
  int bx0 = x0 < 0 ? 0 : x0 & ~1, by0 = y0 < 0 ? 0 : y0 & ~1;
  int bx1 = x0 + tw + 2 * pad, by1 = bh;
  if (bx1 > bw) bx1 = bw;
  bx1 = (bx1 + 1) & ~1, by1 &= ~1;
  if (bx1 > bw) bx1 = bw & ~1;
  const int top = ((f->h - f->h / 20 - bh) & ~1) < 0 ? 0 : (f->h - f->h / 20 - bh) & ~1;
  f->band = (fc_rect){bx0, top + by0, bx1 - bx0, by1 - by0};
  if (f->band.y + f->band.h > f->h) f->band.h = (f->h - f->band.y) & ~1;
  const uint8_t *px = cairo_image_surface_get_data(cs);
  const int stride = cairo_image_surface_get_stride(cs);
  const int W = f->band.w;
  for (int y = 0; y < f->band.h; y++)
    for (int x = 0; x < W; x++) {
      const uint8_t *p = px + (size_t)(by0 + y) * stride + (size_t)(bx0 + x) * 4;
      uint32_t argb;
      memcpy(&argb, p, 4); /* native-endian ARGB32, premultiplied */
      const int a = (int)(argb >> 24);
      int r = (int)(argb >> 16 & 255), g = (int)(argb >> 8 & 255), b = (int)(argb & 255);
      if (a > 0 && a < 255) r = r * 255 / a, g = g * 255 / a, b = b * 255 / a;
      uint8_t yy, uu, vv;
      rgb_to_yuv(r > 255 ? 255 : r, g > 255 ? 255 : g, b > 255 ? 255 : b, &yy, &uu, &vv);
      f->by[(size_t)y * W + x] = yy;
      f->ba[(size_t)y * W + x] = (uint8_t)a;
      if (!(x & 1) && !(y & 1)) {
        const size_t c = (size_t)(y / 2) * (W / 2) + x / 2;
        f->bu[c] = uu, f->bv[c] = vv, f->bua[c] = (uint8_t)a;
      }
    }
  cairo_surface_destroy(cs);
  f->cur = k;
}

/* w×h of src (rows sstride apart) blended over dst by alpha a (same layout as src). */
static void blend_plane(uint8_t *dst, int dstride, const uint8_t *src, const uint8_t *a,
                        int sstride, int w, int h) {
  for (int y = 0; y < h; y++) {
    uint8_t *d = dst + (size_t)y * dstride;
    const uint8_t *s = src + (size_t)y * sstride, *al = a + (size_t)y * sstride;
    for (int x = 0; x < w; x++)
      if (al[x]) d[x] = (uint8_t)((s[x] * al[x] + d[x] * (255 - al[x]) + 127) / 255);
  }
}

/* The piece to show at sample (-1: none); pieces are cut from cues on first use. */
static int piece_at(fc_bulk_frame *f, const fc_cue *cues, int n, int64_t sample) {
  if (cues != f->cues_of || n != f->n_cues_of) {
    fc_cues_free(f->pieces, f->n_pieces);
    f->pieces = fc_cues_split(cues, n, f->line_chars * MAX_LINES_CHARS, &f->n_pieces);
    f->cues_of = cues, f->n_cues_of = n, f->cur = -1;
  }
  int k = f->cur >= 0 ? f->cur : 0; /* frames come in order: search from the last */
  if (k < f->n_pieces && f->pieces[k].start > sample) k = 0;
  for (; k < f->n_pieces; k++) {
    if (sample < f->pieces[k].start) return -1;
    if (sample < f->pieces[k].end) return k;
  }
  return -1;
}

/* ---- the picture ---- */

static fc_rect rect_union(fc_rect a, fc_rect b) {
  if (a.w <= 0 || a.h <= 0) return b;
  if (b.w <= 0 || b.h <= 0) return a;
  const int x0 = a.x < b.x ? a.x : b.x, y0 = a.y < b.y ? a.y : b.y;
  const int x1 = a.x + a.w > b.x + b.w ? a.x + a.w : b.x + b.w;
  const int y1 = a.y + a.h > b.y + b.h ? a.y + a.h : b.y + b.h;
  return (fc_rect){x0, y0, x1 - x0, y1 - y0};
}

/* An avatar rect on the canvas (even), widened by the scaler's reach in chroma (a changed
 * chroma sample moves outputs up to a source chroma pixel, two luma pixels, away). */
static fc_rect to_canvas(const fc_bulk_frame *f, fc_rect r) {
  if (r.w <= 0 || r.h <= 0) return (fc_rect){0, 0, 0, 0};
  const int m = 2 * (f->sw + f->aw - 1) / f->aw + 4;
  int x0 = f->ox + (int)((int64_t)r.x * f->sw / f->aw) - m;
  int y0 = f->oy + (int)((int64_t)r.y * f->sh / f->ah) - m;
  int x1 = f->ox + (int)(((int64_t)(r.x + r.w) * f->sw + f->aw - 1) / f->aw) + m;
  int y1 = f->oy + (int)(((int64_t)(r.y + r.h) * f->sh + f->ah - 1) / f->ah) + m;
  if (x0 < f->ox) x0 = f->ox;
  if (y0 < f->oy) y0 = f->oy;
  if (x1 > f->ox + f->sw) x1 = f->ox + f->sw;
  if (y1 > f->oy + f->sh) y1 = f->oy + f->sh;
  x0 &= ~1, y0 &= ~1, x1 = (x1 + 1) & ~1, y1 = (y1 + 1) & ~1;
  return (fc_rect){x0, y0, x1 - x0, y1 - y0};
}

/* The avatar's pixels in rect r of the canvas (inside its place) from picture i420. */
static void scale_into_canvas(fc_bulk_frame *f, const uint8_t *i420, fc_rect r) {
  if (r.w <= 0 || r.h <= 0) return;
  uint8_t *sy, *su, *sv, *dy, *du, *dv;
  planes((uint8_t *)i420, f->aw, f->ah, &sy, &su, &sv);
  planes(f->bg, f->w, f->h, &dy, &du, &dv);
  const int x0 = r.x - f->ox, y0 = r.y - f->oy; /* in the place */
  scale_rect(sy, f->aw, dy + (size_t)f->oy * f->w + f->ox, f->w, f->xi, f->xf, f->yi, f->yf, x0,
             y0, x0 + r.w, y0 + r.h);
  const size_t oc = (size_t)(f->oy / 2) * (f->w / 2) + f->ox / 2;
  scale_rect(su, f->aw / 2, du + oc, f->w / 2, f->cxi, f->cxf, f->cyi, f->cyf, x0 / 2, y0 / 2,
             (x0 + r.w) / 2, (y0 + r.h) / 2);
  scale_rect(sv, f->aw / 2, dv + oc, f->w / 2, f->cxi, f->cxf, f->cyi, f->cyf, x0 / 2, y0 / 2,
             (x0 + r.w) / 2, (y0 + r.h) / 2);
}

/* Rect r (even) of picture src (w×h) into the same place of dst. */
static void copy_rect(const uint8_t *src, uint8_t *dst, int w, int h, fc_rect r) {
  if (r.w <= 0 || r.h <= 0) return;
  uint8_t *sp[3], *dp[3];
  planes((uint8_t *)src, w, h, &sp[0], &sp[1], &sp[2]);
  planes(dst, w, h, &dp[0], &dp[1], &dp[2]);
  for (int y = r.y; y < r.y + r.h; y++)
    memcpy(dp[0] + (size_t)y * w + r.x, sp[0] + (size_t)y * w + r.x, (size_t)r.w);
  for (int p = 1; p < 3; p++)
    for (int y = r.y / 2; y < (r.y + r.h) / 2; y++)
      memcpy(dp[p] + (size_t)y * (w / 2) + r.x / 2, sp[p] + (size_t)y * (w / 2) + r.x / 2,
             (size_t)r.w / 2);
}

static fc_rect rect_clip(fc_rect a, fc_rect b) {
  const int x0 = a.x > b.x ? a.x : b.x, y0 = a.y > b.y ? a.y : b.y;
  const int x1 = a.x + a.w < b.x + b.w ? a.x + a.w : b.x + b.w;
  const int y1 = a.y + a.h < b.y + b.h ? a.y + a.h : b.y + b.h;
  return x1 > x0 && y1 > y0 ? (fc_rect){x0, y0, x1 - x0, y1 - y0} : (fc_rect){0, 0, 0, 0};
}

/* The caption band's part in r blended into pic. */
static void blend_band(fc_bulk_frame *f, uint8_t *pic, fc_rect r) {
  r = rect_clip(r, f->band);
  if (r.w <= 0 || r.h <= 0) return;
  uint8_t *y, *u, *v;
  planes(pic, f->w, f->h, &y, &u, &v);
  const fc_rect b = f->band;
  const size_t o = (size_t)(r.y - b.y) * b.w + (r.x - b.x);
  blend_plane(y + (size_t)r.y * f->w + r.x, f->w, f->by + o, f->ba + o, b.w, r.w, r.h);
  const size_t so = (size_t)((r.y - b.y) / 2) * (b.w / 2) + (r.x - b.x) / 2;
  const size_t co = (size_t)(r.y / 2) * (f->w / 2) + r.x / 2;
  blend_plane(u + co, f->w / 2, f->bu + so, f->bua + so, b.w / 2, r.w / 2, r.h / 2);
  blend_plane(v + co, f->w / 2, f->bv + so, f->bua + so, b.w / 2, r.w / 2, r.h / 2);
}

const uint8_t *fc_bulk_frame_draw(fc_bulk_frame *f, const uint8_t *i420, const fc_i420_delta *d,
                                  int64_t sample, const fc_cue *cues, int n, fc_rect *changed,
                                  int *known_out) {
  /* what differs from the last picture, in the avatar's pixels (known: against one still) */
  const int known = d->base && f->drawn && d->base == f->last_base;
  const fc_rect src_changed = rect_union(d->changed, f->last_changed);
  f->last_base = d->base, f->last_changed = d->changed;
  f->drawn++;
  *known_out = known;
  const fc_rect whole = {0, 0, f->w, f->h};
  if (f->direct) {
    *changed = known ? src_changed : whole;
    return i420;
  }
  /* the clean picture (no caption) and what changed in it */
  const uint8_t *clean = i420;
  fc_rect dirty = known ? src_changed : whole;
  if (f->bg) {
    dirty = known ? to_canvas(f, src_changed) : (fc_rect){f->ox, f->oy, f->sw, f->sh};
    scale_into_canvas(f, i420, dirty);
    clean = f->bg;
  }
  if (!f->captions) {
    *changed = dirty;
    return clean;
  }
  /* the caption: the band where it came, went or changed is redrawn whole */
  const int shown = piece_at(f, cues, n, sample);
  if (shown != f->last_shown) {
    const fc_rect old_band = f->last_shown >= 0 ? f->band : (fc_rect){0, 0, 0, 0};
    if (shown >= 0 && shown != f->cur) render_piece(f, shown);
    dirty = rect_union(dirty, rect_union(old_band, shown >= 0 ? f->band : (fc_rect){0, 0, 0, 0}));
    f->last_shown = shown;
  }
  if (!known) dirty = whole;
  copy_rect(clean, f->out, f->w, f->h, dirty);
  if (shown >= 0) blend_band(f, f->out, dirty);
  *changed = dirty;
  return f->out;
}
