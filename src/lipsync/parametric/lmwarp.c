/* The parametric backend's landmark renderer (v1): a mouth shape moves the avatar's own mouth.
 *
 * Targets. In a frame aligned with the mouth (u along the corners 48→54, v down, W the corner
 * distance) each mouth landmark (48–67) and jaw landmark (3–13) gets a displacement from its rest
 * position, built in steps that add up: (1) close the rest opening — a smiling photo shows teeth,
 * so the inner lips meet, the upper lip coming down a third of the gap and the lower lip and jaw
 * up two thirds; (2) open — the upper lip rises by 0.22 G and the lower lip and jaw drop by
 * 0.78 G (G = 0.42 W · open at the centre, less towards the corners; the chin follows with
 * a weight falling off along the jaw); (3) wide / round — the lips scale horizontally about the
 * mouth centre (+20 % / −30 %), stretched lips thin and rounded lips pout. Every step is linear
 * in (open, wide, round), so smooth shapes from the viseme tracker give smooth landmark motion.
 *
 * Mesh. Rings around the mouth, each triangulated against the next by merging their points in
 * angle order around the lips' centroid (valid for rings that are star-shaped about it, as a
 * frontal face's are): outer lips → skin ring (jaw 2–14, nose base 31–35, which stays put) →
 * 16 anchors fixed on a rectangle 9 px inside the patch border. The lips themselves are two
 * strips (upper, lower) zipped along u between the outer and inner lip lines. The inner-lip
 * polygon is triangulated too, against its midline, but its source is a thin band inside each
 * lip rather than the photo's teeth: where the drawn interior's anti-aliased edge lets the
 * warped pixels through, they are lip, and a closed mouth never shows the rest teeth.
 *
 * Pixels. The patch starts as a copy of the source (so outside the anchor ring, and in every
 * triangle that does not move, it is the source exactly: no seam under the 6 px feathered mask);
 * each moving triangle is rasterised over its target bounding box and its pixels are mapped back
 * by the triangle's affine map (barycentric) and sampled bilinearly. Then, inside the target
 * inner-lip polygon, the interior is drawn: a dark throat lighter towards the corners, a tongue
 * when wide open, upper teeth in the colour of the photo's own teeth (else ivory), lower teeth
 * when wide open, all blended with a one-pixel anti-aliased edge; nearly closed lips get a soft
 * crease. No allocation: the mesh lives in the backend's state (pm_lm).
 */
#include "lipsync/parametric/lmwarp.h"
#include "lipsync/parametric/pm_common.h"

#include <math.h>
#include <string.h>

#define V_IN 68     /* 68..71: inner-lip points between a corner and its neighbour */
#define V_MU 72     /* 72..76: interior midline, upper half (source inside the upper lip) */
#define V_ML 77     /* 77..81: the same, lower half */
#define V_ANCHOR 82 /* 82..97: border anchors */
#define N_LIP 7     /* points on each lip line */
#define N_ANCHOR 16
#define FEATHER 6 /* alpha ramp at the patch border */
#define INSET 9   /* anchor ring inset; outside it the patch is the source */

/* The mouth-aligned frame: origin between the corners, unit axis (ax, ay) along the mouth. */
typedef struct mframe {
  float cx, cy, ax, ay, W, s;
} mframe;

static int frame_of(const fc_point *p, float ox, float oy, mframe *f) {
  for (int i = 0; i < FC_LANDMARKS; i++)
    if (!isfinite(p[i].x) || !isfinite(p[i].y) || fabsf(p[i].x) > 1e5f || fabsf(p[i].y) > 1e5f)
      return 0;
  float dx = p[54].x - p[48].x, dy = p[54].y - p[48].y, W = sqrtf(dx * dx + dy * dy);
  /* corners closer than 4 px, or a mouth upside down / on its side: nothing sensible to warp */
  if (W < 4 || dx < 0.5f * W) return 0;
  f->cx = (p[48].x + p[54].x) / 2 - ox, f->cy = (p[48].y + p[54].y) / 2 - oy;
  f->ax = dx / W, f->ay = dy / W, f->W = W;
  float sx = p[8].x - p[27].x, sy = p[8].y - p[27].y;
  f->s = sqrtf(sx * sx + sy * sy);
  if (f->s < 1.2f * W) f->s = 1.6f * W; /* nose-to-chin is about 1.7 mouth widths */
  return 1;
}

/* The points that move or bound the moving region: jaw 2–14, nose base 31–35, lips 48–67. */
static int in_region(int i) { return (i >= 2 && i <= 14) || (i >= 31 && i <= 35) || i >= 48; }

fc_rect pm_lm_rect(const fc_point *lm, fc_rect b) {
  mframe f;
  if (!lm || !frame_of(lm, 0, 0, &f)) return (fc_rect){0, 0, 0, 0};
  float x0 = 1e9f, x1 = -1e9f, y0 = 1e9f, y1 = -1e9f;
  for (int i = 0; i < FC_LANDMARKS; i++) {
    if (!in_region(i)) continue;
    x0 = fminf(x0, lm[i].x), x1 = fmaxf(x1, lm[i].x);
    y0 = fminf(y0, lm[i].y), y1 = fmaxf(y1, lm[i].y);
  }
  /* Room for the chin's largest drop (0.33 W) plus some neck to absorb it, and for the anchors
   * and the feather outside everything that moves (the nose base is still: nothing above it
   * needs room). Every pixel inside is warped, so the margins are kept tight. */
  float m = INSET + FEATHER + 2;
  int ix0 = (int)floorf(x0 - 0.03f * f.s - m), ix1 = (int)ceilf(x1 + 0.03f * f.s + m);
  int iy0 = (int)floorf(y0 - m), iy1 = (int)ceilf(y1 + 0.34f * f.W + 0.08f * f.s + m);
  int bx1 = b.x + b.w, by1 = b.y + b.h;
  /* Landmarks too close to the bounds would put moving points outside the anchor ring. */
  if (x0 - m < b.x || x1 + m > bx1 || y0 - m < b.y || y1 + 0.34f * f.W + m > by1)
    return (fc_rect){0, 0, 0, 0};
  ix0 = (ix0 < b.x ? b.x : ix0) & ~1;
  iy0 = (iy0 < b.y ? b.y : iy0) & ~1;
  ix1 = ix1 > bx1 ? bx1 : ix1;
  iy1 = iy1 > by1 ? by1 : iy1;
  fc_rect r = {ix0, iy0, (ix1 - ix0) & ~1, (iy1 - iy0) & ~1};
  if (r.w < 4 * (INSET + FEATHER) || r.h < 4 * (INSET + FEATHER)) return (fc_rect){0, 0, 0, 0};
  return r;
}

/* Local coordinates of a point relative to the frame. */
static void to_local(const mframe *f, float x, float y, float *u, float *v) {
  float dx = x - f->cx, dy = y - f->cy;
  *u = dx * f->ax + dy * f->ay;
  *v = -dx * f->ay + dy * f->ax;
}

/* The lip lines, each left to right: inner top/bottom (with the points added between the
 * corners and their neighbours, so an opening is a smooth lens, not a diamond), outer top/bottom,
 * and the interior's midlines. */
static const int in_top[N_LIP] = {60, V_IN, 61, 62, 63, V_IN + 1, 64};
static const int in_bot[N_LIP] = {60, V_IN + 3, 67, 66, 65, V_IN + 2, 64};
static const int out_top[N_LIP] = {48, 49, 50, 51, 52, 53, 54};
static const int out_bot[N_LIP] = {48, 59, 58, 57, 56, 55, 54};
static const int mid_top[N_LIP] = {60, V_MU, V_MU + 1, V_MU + 2, V_MU + 3, V_MU + 4, 64};
static const int mid_bot[N_LIP] = {60, V_ML, V_ML + 1, V_ML + 2, V_ML + 3, V_ML + 4, 64};

/* A lip line in local coordinates. */
typedef struct line {
  float u[N_LIP], v[N_LIP];
} line;

static void line_of(const int *idx, const float *lu, const float *lv, line *l) {
  for (int k = 0; k < N_LIP; k++) l->u[k] = lu[idx[k]], l->v[k] = lv[idx[k]];
}

/* v of a line at u; 0 when u is outside it. */
static int line_at(const line *l, float u, float *v) {
  for (int k = 0; k < N_LIP - 1; k++) {
    float a = l->u[k], b = l->u[k + 1];
    if (u >= a && u <= b && b > a) {
      *v = l->v[k] + (u - a) / (b - a) * (l->v[k + 1] - l->v[k]);
      return 1;
    }
  }
  return 0;
}

/* The opening between two lines at u (0 outside or where they cross). */
static float gap_at(const line *top, const line *bot, float u) {
  float a, b;
  return line_at(top, u, &a) && line_at(bot, u, &b) && b > a ? b - a : 0;
}

static int is_upper(int i) {
  return (i >= 49 && i <= 53) || (i >= 61 && i <= 63) || i == V_IN || i == V_IN + 1;
}
static int is_lower(int i) {
  return (i >= 55 && i <= 59) || (i >= 65 && i <= 67) || i == V_IN + 2 || i == V_IN + 3;
}
static int is_outer(int i) { return i >= 48 && i <= 59; }

/* How far each jaw point follows the chin (3–13; 2 and 14 stay). */
static const float jaw_follow[17] = {0, 0, 0, 0.15f, 0.35f, 0.6f, 0.8f, 0.95f, 1,
                                     0.95f, 0.8f, 0.6f, 0.35f, 0.15f, 0, 0, 0};

/* Moves the lip and jaw points (0..V_IN+3) to their targets for mouth m; rest_in_* are the
 * rest inner lips. */
static void set_targets(pm_lm *st, const mframe *f, fc_mouth m, const float *lu,
                        const line *rest_top, const line *rest_bot) {
  float open = pm_clampf(m.open, 0, 1), wide = pm_clampf(m.wide, 0, 1);
  float round = pm_clampf(m.round, 0, 1), W = f->W;
  const float up_share = 0.35f; /* of the rest gap the upper lip closes */
  float G = 0.42f * W * open;
  float scale = 1 + 0.2f * wide - 0.3f * round - 0.08f * open;
  /* Opening profile: a lens (1 − q)^e over each lip line, rounder (smaller e) when rounded. */
  float e = 0.7f - 0.25f * round;
  float uc = (lu[60] + lu[64]) / 2, hw_in = fmaxf((lu[64] - lu[60]) / 2, 1), hw_out = W / 2;
  float g_mid = gap_at(rest_top, rest_bot, uc);
  for (int i = 0; i < V_IN + 4; i++) {
    float du = 0, dv = 0;
    if (i >= 48) {
      float q = is_outer(i) ? lu[i] / hw_out : (lu[i] - uc) / hw_in;
      float pf = powf(fmaxf(0, 1 - q * q), e), g = gap_at(rest_top, rest_bot, lu[i]);
      float pout = is_outer(i) ? (0.03f * wide - 0.035f * round) * W * pf : 0;
      if (is_upper(i)) {
        dv = up_share * g - 0.22f * G * pf * (is_outer(i) ? 0.9f : 1) + pout;
      } else if (is_lower(i)) {
        dv = -(1 - up_share) * g + 0.78f * G * pf * (is_outer(i) ? 0.95f : 1) - pout;
      } else {
        dv = 0.12f * G - 0.02f * W * wide; /* corners drop with the jaw, rise in a spread */
      }
      du = lu[i] * (scale - 1);
    } else if (i >= 3 && i <= 13) {
      dv = jaw_follow[i] * (0.75f * G - (1 - up_share) * g_mid);
    }
    st->tx[i] = st->sx[i] + du * f->ax - dv * f->ay;
    st->ty[i] = st->sy[i] + du * f->ay + dv * f->ax;
  }
}

static void add_tri(pm_lm *st, int a, int b, int c) {
  if (st->nt >= PM_MAXT) return;
  st->tri[st->nt][0] = (unsigned char)a, st->tri[st->nt][1] = (unsigned char)b;
  st->tri[st->nt][2] = (unsigned char)c;
  st->nt++;
}

/* Triangulates the band between two closed rings by merging their points in angle order. */
static void zip_rings(pm_lm *st, int *a, int na, int *b, int nb, const float ang[]) {
  int *ring[2] = {a, b}, n[2] = {na, nb};
  for (int r = 0; r < 2; r++) /* insertion sort by angle: a dozen points */
    for (int i = 1; i < n[r]; i++)
      for (int j = i; j > 0 && ang[ring[r][j]] < ang[ring[r][j - 1]]; j--) {
        int t = ring[r][j];
        ring[r][j] = ring[r][j - 1], ring[r][j - 1] = t;
      }
  const float two_pi = 6.2831853f;
  int ia = 0, ib = 0;
  while (ia < na || ib < nb) {
    float na_ang = ia < na ? ang[a[(ia + 1) % na]] + (ia + 1 >= na ? two_pi : 0) : 1e9f;
    float nb_ang = ib < nb ? ang[b[(ib + 1) % nb]] + (ib + 1 >= nb ? two_pi : 0) : 1e9f;
    if (na_ang <= nb_ang) {
      add_tri(st, a[ia % na], b[ib % nb], a[(ia + 1) % na]);
      ia++;
    } else {
      add_tri(st, a[ia % na], b[ib % nb], b[(ib + 1) % nb]);
      ib++;
    }
  }
}

/* Triangulates the strip between two open polylines that run left to right (by u). */
static void zip_lines(pm_lm *st, const int *a, int na, const int *b, int nb, const float lu[]) {
  int ia = 0, ib = 0;
  while (ia < na - 1 || ib < nb - 1) {
    float ua = ia < na - 1 ? lu[a[ia + 1]] : 1e9f, ub = ib < nb - 1 ? lu[b[ib + 1]] : 1e9f;
    if (ua <= ub) {
      add_tri(st, a[ia], b[ib], a[ia + 1]);
      ia++;
    } else {
      add_tri(st, a[ia], b[ib], b[ib + 1]);
      ib++;
    }
  }
}

static void build_mesh(pm_lm *st, const mframe *f, fc_rect r, const float lu[]) {
  st->nt = 0;
  /* Anchors: 4 per side of the inset rectangle, clockwise from the top-left corner. */
  float ax0 = r.x + INSET, ay0 = r.y + INSET, ax1 = r.x + r.w - 1 - INSET, ay1 = r.y + r.h - 1 - INSET;
  for (int k = 0; k < N_ANCHOR; k++) {
    int side = k / 4;
    float t = (k % 4) / 4.0f, x, y;
    if (side == 0) x = ax0 + t * (ax1 - ax0), y = ay0;
    else if (side == 1) x = ax1, y = ay0 + t * (ay1 - ay0);
    else if (side == 2) x = ax1 - t * (ax1 - ax0), y = ay1;
    else x = ax0, y = ay1 - t * (ay1 - ay0);
    st->sx[V_ANCHOR + k] = st->tx[V_ANCHOR + k] = x;
    st->sy[V_ANCHOR + k] = st->ty[V_ANCHOR + k] = y;
  }
  /* Angles about the outer lips' centroid (inside the lips however the mouth rests). */
  float gx = 0, gy = 0;
  for (int i = 48; i < 60; i++) gx += st->sx[i] / 12, gy += st->sy[i] / 12;
  float ang[PM_MAXV] = {0}, cu, cv;
  to_local(f, gx, gy, &cu, &cv);
  for (int i = 0; i < V_ANCHOR + N_ANCHOR; i++) {
    if (i >= V_IN && i < V_ANCHOR) continue; /* on no ring */
    float u, v;
    to_local(f, st->sx[i], st->sy[i], &u, &v);
    ang[i] = atan2f(v - cv, u - cu);
  }
  int outer[12], skin[18], anchors[N_ANCHOR], n = 0;
  for (int i = 0; i < 12; i++) outer[i] = 48 + i;
  for (int i = 2; i <= 14; i++) skin[n++] = i;
  for (int i = 35; i >= 31; i--) skin[n++] = i;
  for (int k = 0; k < N_ANCHOR; k++) anchors[k] = V_ANCHOR + k;
  zip_rings(st, skin, 18, anchors, N_ANCHOR, ang);
  zip_rings(st, outer, 12, skin, 18, ang);
  zip_lines(st, out_top, N_LIP, in_top, N_LIP, lu);
  zip_lines(st, out_bot, N_LIP, in_bot, N_LIP, lu);
  zip_lines(st, in_top, N_LIP, mid_top, N_LIP, lu);
  zip_lines(st, in_bot, N_LIP, mid_bot, N_LIP, lu);
}

/* Maps the target triangle back onto the source and writes its pixels. */
static void raster(const pm_lm *st, int t, const fc_image *im, fc_rect r, uint8_t *rgb) {
  const unsigned char *v = st->tri[t];
  float X0 = st->tx[v[0]], Y0 = st->ty[v[0]], X1 = st->tx[v[1]], Y1 = st->ty[v[1]];
  float X2 = st->tx[v[2]], Y2 = st->ty[v[2]];
  int still = 1;
  for (int k = 0; k < 3; k++) still &= st->tx[v[k]] == st->sx[v[k]] && st->ty[v[k]] == st->sy[v[k]];
  if (still) return; /* the copy already holds it */
  float area = (X1 - X0) * (Y2 - Y0) - (X2 - X0) * (Y1 - Y0);
  if (fabsf(area) < 1e-3f) return;
  float ia = 1 / area;
  /* barycentric weights as affine functions of (x, y): w1 = e1(x, y), w2 = e2(x, y) */
  float a1 = (Y2 - Y0) * ia, b1 = -(X2 - X0) * ia;
  float a2 = -(Y1 - Y0) * ia, b2 = (X1 - X0) * ia;
  float c1 = -(a1 * X0 + b1 * Y0), c2 = -(a2 * X0 + b2 * Y0);
  float S0x = st->sx[v[0]], S0y = st->sy[v[0]];
  float dx1 = st->sx[v[1]] - S0x, dy1 = st->sy[v[1]] - S0y;
  float dx2 = st->sx[v[2]] - S0x, dy2 = st->sy[v[2]] - S0y;
  int x0 = (int)floorf(fminf(X0, fminf(X1, X2))), x1 = (int)ceilf(fmaxf(X0, fmaxf(X1, X2)));
  int y0 = (int)floorf(fminf(Y0, fminf(Y1, Y2))), y1 = (int)ceilf(fmaxf(Y0, fmaxf(Y1, Y2)));
  x0 = x0 < r.x ? r.x : x0, y0 = y0 < r.y ? r.y : y0;
  x1 = x1 > r.x + r.w - 1 ? r.x + r.w - 1 : x1, y1 = y1 > r.y + r.h - 1 ? r.y + r.h - 1 : y1;
  /* the source point as an affine function of the target pixel: per-row start, per-x step */
  float gx = a1 * dx1 + a2 * dx2, gy = a1 * dy1 + a2 * dy2;
  float hx = b1 * dx1 + b2 * dx2, hy = b1 * dy1 + b2 * dy2;
  float kx = S0x + c1 * dx1 + c2 * dx2, ky = S0y + c1 * dy1 + c2 * dy2;
  /* 16.16 fixed point (images are at most 4096 px: no overflow), clamped so that the 2×2
   * neighbourhood stays inside the image */
  int32_t max_x = (im->w - 1) * 65536 - 1, max_y = (im->h - 1) * 65536 - 1;
  int32_t gxi = (int32_t)lrintf(gx * 65536), gyi = (int32_t)lrintf(gy * 65536);
  /* A pixel belongs to the triangle when its three weights are ≥ eps; the slight negative eps
   * makes neighbours overlap by a twentieth of a pixel, so shared edges leave no cracks. */
  const float eps = -1e-3f;
  for (int y = y0; y <= y1; y++) {
    uint8_t *row = rgb + (size_t)(y - r.y) * r.w * 3;
    /* the row's span inside the triangle, from the three weights (each affine in x) */
    float lo = (float)x0, hi = (float)x1;
    float ka[3] = {a1, a2, -a1 - a2}, kb[3] = {b1 * y + c1, b2 * y + c2, 1 - (b1 + b2) * y - c1 - c2};
    for (int e = 0; e < 3; e++) {
      if (fabsf(ka[e]) < 1e-12f) {
        if (kb[e] < eps) lo = 1, hi = 0;
      } else if (ka[e] > 0) {
        lo = fmaxf(lo, (eps - kb[e]) / ka[e]);
      } else {
        hi = fminf(hi, (eps - kb[e]) / ka[e]);
      }
    }
    if (lo > hi) continue;
    int xs = (int)ceilf(lo), xe = (int)floorf(hi);
    int32_t X = (int32_t)lrintf((kx + gx * xs + hx * y) * 65536);
    int32_t Y = (int32_t)lrintf((ky + gy * xs + hy * y) * 65536);
    uint8_t *o = row + 3 * (xs - r.x);
    for (int x = xs; x <= xe; x++, X += gxi, Y += gyi, o += 3) {
      int32_t cx = X < 0 ? 0 : X > max_x ? max_x : X, cy = Y < 0 ? 0 : Y > max_y ? max_y : Y;
      int fx = (cx >> 8) & 255, fy = (cy >> 8) & 255;
      const uint8_t *p = im->rgb + (size_t)(cy >> 16) * im->stride + 3 * (cx >> 16);
      const uint8_t *q = p + im->stride;
      for (int c = 0; c < 3; c++) {
        int top = p[c] * (256 - fx) + p[c + 3] * fx, bot = q[c] * (256 - fx) + q[c + 3] * fx;
        o[c] = (uint8_t)((top * (256 - fy) + bot * fy + 32768) >> 16);
      }
    }
  }
}

/* The photo's own teeth colour: teeth-like pixels inside the rest inner-lip polygon. */
static void teeth_colour(const fc_image *im, const mframe *f, const line *top_l,
                         const line *bot_l, const pm_lm *st, float out[3]) {
  float acc[3] = {0, 0, 0};
  int n = 0;
  float x0 = 1e9f, x1 = -1e9f, y0 = 1e9f, y1 = -1e9f;
  for (int i = 60; i < 68; i++) {
    x0 = fminf(x0, st->sx[i]), x1 = fmaxf(x1, st->sx[i]);
    y0 = fminf(y0, st->sy[i]), y1 = fmaxf(y1, st->sy[i]);
  }
  for (int y = (int)fmaxf(y0, 0); y <= (int)fminf(y1, (float)im->h - 1); y++)
    for (int x = (int)fmaxf(x0, 0); x <= (int)fminf(x1, (float)im->w - 1); x++) {
      float u, v, top, bot;
      to_local(f, (float)x, (float)y, &u, &v);
      if (!line_at(top_l, u, &top) || !line_at(bot_l, u, &bot)) continue;
      if (v < top + 0.5f || v > bot - 0.5f) continue;
      const uint8_t *p = im->rgb + (size_t)y * im->stride + 3 * x;
      if (!pm_is_teeth(p)) continue;
      for (int c = 0; c < 3; c++) acc[c] += p[c];
      n++;
    }
  for (int c = 0; c < 3; c++) out[c] = n >= 6 ? acc[c] / n : pm_ivory[c];
}

static void mix(float *dst, const float *src, float a) {
  for (int c = 0; c < 3; c++) dst[c] += a * (src[c] - dst[c]);
}

/* Draws the mouth interior inside the target inner-lip polygon over the warped pixels. */
static void interior(const pm_lm *st, const mframe *f, const line *top_l, const line *bot_l,
                     const float teeth[3], float open, fc_rect r, uint8_t *rgb) {
  float x0 = 1e9f, x1 = -1e9f, y0 = 1e9f, y1 = -1e9f;
  for (int k = 0; k < N_LIP; k++) {
    int a = in_top[k], b = in_bot[k];
    x0 = fminf(x0, fminf(st->tx[a], st->tx[b])), x1 = fmaxf(x1, fmaxf(st->tx[a], st->tx[b]));
    y0 = fminf(y0, fminf(st->ty[a], st->ty[b])), y1 = fmaxf(y1, fmaxf(st->ty[a], st->ty[b]));
  }
  int ix0 = (int)floorf(x0) - 1, ix1 = (int)ceilf(x1) + 1;
  int iy0 = (int)floorf(y0) - 2, iy1 = (int)ceilf(y1) + 2;
  ix0 = ix0 < r.x ? r.x : ix0, iy0 = iy0 < r.y ? r.y : iy0;
  ix1 = ix1 > r.x + r.w - 1 ? r.x + r.w - 1 : ix1, iy1 = iy1 > r.y + r.h - 1 ? r.y + r.h - 1 : iy1;
  float W = f->W, umid = (top_l->u[0] + top_l->u[N_LIP - 1]) / 2;
  float ihw = 2 / fmaxf(top_l->u[N_LIP - 1] - top_l->u[0], 1);
  float low_teeth = 0.045f * W * pm_smooth01((open - 0.5f) / 0.35f);
  static const float throat[3] = {72, 28, 33}, tongue[3] = {150, 66, 72}, crease[3] = {95, 45, 50};
  for (int y = iy0; y <= iy1; y++) {
    uint8_t *row = rgb + (size_t)(y - r.y) * r.w * 3;
    for (int x = ix0; x <= ix1; x++) {
      float u, v, top, bot;
      to_local(f, (float)x, (float)y, &u, &v);
      if (!line_at(top_l, u, &top) || !line_at(bot_l, u, &bot)) continue;
      float gap = bot - top, hu = (u - umid) * ihw, hu2 = hu * hu;
      /* coverage of the pixel by the opening: one-pixel ramps, never more than the gap */
      float cov = pm_clampf(fminf(fminf(v - top + 0.5f, bot - v + 0.5f), gap), 0, 1);
      /* a nearly closed mouth: the soft line where the lips meet */
      float cr = 0.35f * (1 - pm_smooth01(gap / 3)) * pm_clampf(1 - fabsf(v - (top + bot) / 2) / 1.2f, 0, 1) *
                 (1 - hu2);
      if (cov <= 0 && cr <= 0) continue;
      uint8_t *o = row + 3 * (x - r.x);
      float px[3] = {o[0], o[1], o[2]}, in[3];
      for (int c = 0; c < 3; c++) in[c] = throat[c] * (0.55f + 0.45f * hu2);
      /* tongue low in a wide-open mouth */
      float tg = pm_smooth01((v - (bot - 0.35f * gap)) / (0.2f * gap + 1)) *
                 pm_smooth01((gap - 0.12f * W) / (0.1f * W)) * (1 - hu2);
      mix(in, tongue, 0.6f * tg);
      /* lower teeth when the jaw is well down */
      float side2 = 1 - pm_smooth01((fabsf(hu) - 0.3f) / 0.2f);
      if (low_teeth > 0.3f) {
        float a = pm_clampf(v - (bot - low_teeth * (1 - 0.5f * hu2)) + 0.5f, 0, 1) * side2;
        float t[3] = {teeth[0] * 0.72f, teeth[1] * 0.72f, teeth[2] * 0.72f};
        mix(in, t, a);
      }
      /* upper teeth hang from under the upper lip, darker in its shadow and to the sides */
      float th = 0.1f * W * (1 - 0.5f * hu2), side = 1 - pm_smooth01((fabsf(hu) - 0.65f) / 0.25f);
      float a = pm_clampf(top + th - v + 0.5f, 0, 1) * side;
      if (a > 0) {
        float k = (0.95f - 0.35f * hu2) * (0.8f + 0.2f * pm_smooth01((v - top) / (0.4f * th)));
        float t[3] = {teeth[0] * k, teeth[1] * k, teeth[2] * k};
        mix(in, t, a);
      }
      mix(px, in, cov);
      mix(px, crease, cr);
      for (int c = 0; c < 3; c++) o[c] = (uint8_t)pm_clampf(px[c] + 0.5f, 0, 255);
    }
  }
}

void pm_lm_render(pm_lm *st, const fc_image *im, fc_rect where, const fc_point *lm, fc_mouth m,
                  fc_patch *out) {
  /* region coordinates throughout; out->place goes back to frame pixels at the end */
  fc_rect r = {out->place.x - where.x, out->place.y - where.y, out->place.w, out->place.h};
  mframe f;
  frame_of(lm, (float)where.x, (float)where.y, &f); /* checked by pm_lm_rect already */
  float lu[PM_MAXV], lv[PM_MAXV];
  for (int i = 0; i < FC_LANDMARKS; i++) st->sx[i] = lm[i].x - where.x, st->sy[i] = lm[i].y - where.y;
  static const int between[4][2] = {{60, 61}, {63, 64}, {64, 65}, {67, 60}};
  for (int k = 0; k < 4; k++) {
    st->sx[V_IN + k] = (st->sx[between[k][0]] + st->sx[between[k][1]]) / 2;
    st->sy[V_IN + k] = (st->sy[between[k][0]] + st->sy[between[k][1]]) / 2;
  }
  for (int i = 0; i < V_IN + 4; i++) to_local(&f, st->sx[i], st->sy[i], &lu[i], &lv[i]);
  line rest_top, rest_bot, rest_out_top, rest_out_bot;
  line_of(in_top, lu, lv, &rest_top);
  line_of(in_bot, lu, lv, &rest_bot);
  line_of(out_top, lu, lv, &rest_out_top);
  line_of(out_bot, lu, lv, &rest_out_bot);
  float teeth[3];
  teeth_colour(im, &f, &rest_top, &rest_bot, st, teeth);
  set_targets(st, &f, m, lu, &rest_top, &rest_bot);
  /* The inner lips' source moves a pixel into the lip where the rest mouth is open, so the
   * lips never carry the photo's teeth edge along; the interior's midline samples a band
   * inside each lip (see the note at the top). */
  for (int k = 1; k < N_LIP - 1; k++) {
    int up = in_top[k], lo = in_bot[k], mu = mid_top[k], ml = mid_bot[k];
    float g = lv[lo] - lv[up], push = g >= 2 ? 0.8f : 0, ou, ol;
    float thick_u = line_at(&rest_out_top, lu[up], &ou) ? fmaxf(lv[up] - ou, 1) : 1;
    float thick_l = line_at(&rest_out_bot, lu[lo], &ol) ? fmaxf(ol - lv[lo], 1) : 1;
    float du = push + 0.4f * thick_u, dl = push + 0.4f * thick_l;
    st->sx[mu] = st->sx[up] + du * f.ay, st->sy[mu] = st->sy[up] - du * f.ax;
    st->sx[ml] = st->sx[lo] - dl * f.ay, st->sy[ml] = st->sy[lo] + dl * f.ax;
    st->sx[up] += push * f.ay, st->sy[up] -= push * f.ax;
    st->sx[lo] -= push * f.ay, st->sy[lo] += push * f.ax;
    st->tx[mu] = st->tx[ml] = (st->tx[up] + st->tx[lo]) / 2;
    st->ty[mu] = st->ty[ml] = (st->ty[up] + st->ty[lo]) / 2;
    lu[mu] = lu[ml] = (lu[up] + lu[lo]) / 2;
  }
  build_mesh(st, &f, r, lu);

  for (int j = 0; j < r.h; j++)
    memcpy(out->rgb + (size_t)j * r.w * 3, im->rgb + (size_t)(r.y + j) * im->stride + 3 * r.x,
           (size_t)r.w * 3);
  for (int t = 0; t < st->nt; t++) raster(st, t, im, r, out->rgb);
  float tu[PM_MAXV], tv[PM_MAXV];
  for (int i = 48; i < V_IN + 4; i++) to_local(&f, st->tx[i], st->ty[i], &tu[i], &tv[i]);
  line now_top, now_bot;
  line_of(in_top, tu, tv, &now_top);
  line_of(in_bot, tu, tv, &now_bot);
  interior(st, &f, &now_top, &now_bot, teeth, pm_clampf(m.open, 0, 1), r, out->rgb);

  for (int j = 0; j < r.h; j++) {
    uint8_t *pa = out->alpha + (size_t)j * r.w;
    int ej = j < r.h - 1 - j ? j : r.h - 1 - j;
    for (int i = 0; i < r.w; i++) {
      int e = i < r.w - 1 - i ? i : r.w - 1 - i;
      e = e < ej ? e : ej;
      pa[i] = e >= FEATHER ? 255 : (uint8_t)(e * 255 / FEATHER);
    }
  }
}
