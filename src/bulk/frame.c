/* The output picture of a bulk video (frame.h): the stream's picture on the canvas, and the
 * caption of the moment burned in.
 *
 * Canvas. When the requested size is the avatar's, the stream's picture is the canvas. Else the
 * avatar is scaled to fit (libyuv, bilinear) and centred, and what it leaves uncovered is the
 * background: a colour, or an image scaled to cover the canvas (cropped to its aspect, centred).
 * The background is made once; each frame rewrites only the avatar's area (and the caption
 * band, restored from the background before the caption is blended in again).
 *
 * Captions. Each cue (a sentence, cut into pieces of at most two lines by characters) is laid
 * out by Pango once, when it first shows, into an ARGB band that is converted to Y/U/V with
 * alpha; each frame blends that band in. White text on a translucent dark box, centred near
 * the bottom, its size a twentieth of the height.
 *
 * What changed. The encoder skips macroblocks that are the same as in the frame before
 * (h264enc.h), so each picture comes with the rect in which it may differ from the last one:
 * the stream's changed rects (this frame's and the last one's, against the same still) mapped
 * onto the canvas with a margin for the scaler's reach, and the caption band when the piece
 * shown changes. Unknown (a pack's frames, which are not one still) means no skipping. */
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
  uint8_t *bg, *out;   /* w×h I420 */
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

static void blend_plane(uint8_t *dst, int dstride, const uint8_t *src, const uint8_t *a, int w,
                        int h) {
  for (int y = 0; y < h; y++) {
    uint8_t *d = dst + (size_t)y * dstride;
    const uint8_t *s = src + (size_t)y * w, *al = a + (size_t)y * w;
    for (int x = 0; x < w; x++)
      if (al[x]) d[x] = (uint8_t)((s[x] * al[x] + d[x] * (255 - al[x]) + 127) / 255);
  }
}

static void blend_band(fc_bulk_frame *f, uint8_t *pic) {
  uint8_t *y, *u, *v;
  planes(pic, f->w, f->h, &y, &u, &v);
  const fc_rect b = f->band;
  blend_plane(y + (size_t)b.y * f->w + b.x, f->w, f->by, f->ba, b.w, b.h);
  const size_t co = (size_t)(b.y / 2) * (f->w / 2) + b.x / 2;
  blend_plane(u + co, f->w / 2, f->bu, f->bua, b.w / 2, b.h / 2);
  blend_plane(v + co, f->w / 2, f->bv, f->bua, b.w / 2, b.h / 2);
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

/* An avatar rect on the canvas, widened by the scaler's reach. */
static fc_rect to_canvas(const fc_bulk_frame *f, fc_rect r) {
  if (r.w <= 0 || r.h <= 0) return (fc_rect){0, 0, 0, 0};
  const int m = f->sw == f->aw ? 0 : f->sw / f->aw + 3;
  int x0 = f->ox + (int)((int64_t)r.x * f->sw / f->aw) - m;
  int y0 = f->oy + (int)((int64_t)r.y * f->sh / f->ah) - m;
  int x1 = f->ox + (int)(((int64_t)(r.x + r.w) * f->sw + f->aw - 1) / f->aw) + m;
  int y1 = f->oy + (int)(((int64_t)(r.y + r.h) * f->sh + f->ah - 1) / f->ah) + m;
  if (x0 < f->ox) x0 = f->ox;
  if (y0 < f->oy) y0 = f->oy;
  if (x1 > f->ox + f->sw) x1 = f->ox + f->sw;
  if (y1 > f->oy + f->sh) y1 = f->oy + f->sh;
  return (fc_rect){x0, y0, x1 - x0, y1 - y0};
}

const uint8_t *fc_bulk_frame_draw(fc_bulk_frame *f, const uint8_t *i420, const fc_i420_delta *d,
                                  int64_t sample, const fc_cue *cues, int n, fc_rect *changed,
                                  int *known_out) {
  const int known = d->base && (!f->drawn || d->base == f->last_base);
  *known_out = known;
  fc_rect ch = known ? to_canvas(f, rect_union(d->changed, f->last_changed)) : (fc_rect){0};
  f->last_base = d->base, f->last_changed = d->changed;
  f->drawn++;
  if (f->direct) {
    *changed = ch;
    return i420;
  }
  const int shown = f->captions ? piece_at(f, cues, n, sample) : -1;
  uint8_t *sy, *su, *sv, *dy, *du, *dv;
  planes((uint8_t *)i420, f->aw, f->ah, &sy, &su, &sv);
  planes(f->out, f->w, f->h, &dy, &du, &dv);
  if (f->bg && f->last_shown >= 0 && f->band.w > 0) { /* the band back to the background */
    const fc_rect b = f->band;
    uint8_t *by, *bu, *bv;
    planes(f->bg, f->w, f->h, &by, &bu, &bv);
    for (int y = 0; y < b.h; y++)
      memcpy(dy + (size_t)(b.y + y) * f->w + b.x, by + (size_t)(b.y + y) * f->w + b.x, (size_t)b.w);
    for (int y = 0; y < b.h / 2; y++) {
      const size_t o = (size_t)(b.y / 2 + y) * (f->w / 2) + b.x / 2;
      memcpy(du + o, bu + o, (size_t)b.w / 2);
      memcpy(dv + o, bv + o, (size_t)b.w / 2);
    }
  }
  const size_t oy = (size_t)f->oy * f->w + f->ox, oc = (size_t)(f->oy / 2) * (f->w / 2) + f->ox / 2;
  if (f->sw == f->aw && f->sh == f->ah)
    I420Copy(sy, f->aw, su, f->aw / 2, sv, f->aw / 2, dy + oy, f->w, du + oc, f->w / 2, dv + oc,
             f->w / 2, f->aw, f->ah);
  else
    I420Scale(sy, f->aw, su, f->aw / 2, sv, f->aw / 2, f->aw, f->ah, dy + oy, f->w, du + oc,
              f->w / 2, dv + oc, f->w / 2, f->sw, f->sh, kFilterBilinear);
  const fc_rect old_band = f->band;
  if (shown >= 0) {
    if (shown != f->cur) render_piece(f, shown);
    blend_band(f, f->out);
  }
  if (shown != f->last_shown) /* the caption came, went or changed */
    ch = rect_union(ch, rect_union(old_band, f->band));
  f->last_shown = shown;
  *changed = ch;
  return f->out;
}
