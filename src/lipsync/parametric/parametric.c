/* The "parametric" lip-sync backend: no weights, a mouth drawn by warping the lower face.
 *
 * Frames with usable 68-point landmarks go to the landmark mesh renderer (v1, lmwarp.c); the
 * rest (no shape model installed, a face too close to the region's edge) to the v0 renderer
 * below, so every avatar still speaks. The capacity covers whichever path a frame takes.
 *
 * v0: given the avatar's mouth geometry (centre of the lips' meeting line, corner half-width, the
 * opening visible at rest, face height) and a requested shape (open, wide, round), each patch
 * pixel is produced by an inverse warp of the avatar frame:
 *   - horizontally, the lips spread or purse around the centre (weight falling off away from
 *     the mouth line and past the corners);
 *   - vertically, the upper lip moves to the top of the new opening and the lower lip and jaw
 *     to its bottom; the original rest opening (a smile's teeth) is squeezed out first, so a
 *     closed request gives closed lips even on a smiling photo. The upper displacement fades
 *     out towards the nose; the jaw moves rigidly to the chin, then fades out down the neck;
 *   - inside the new opening (a lens between the lips) the mouth is drawn: a dark throat, upper
 *     teeth in the colour found in the photo's own smile, lower teeth when wide open, with an
 *     anti-aliased lip edge.
 * Near the patch border the warp is the identity, so the feathered mask blends without seams.
 * The work is per patch pixel (a bilinear sample), about 25 k pixels per frame at 512×512.
 */
#include "facecast/error.h"
#include "lipsync/backend.h"
#include "lipsync/parametric/lmwarp.h"
#include "lipsync/parametric/pm_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Output frames are at most 4096 wide (avatar.c), so patch columns fit fixed arrays. */
#define MAX_PATCH_W 4096

typedef struct geom {
  float cx, cy, hw, curve, g0, s;
} geom;


/* The patch rectangle for a geometry: cheeks to either side, nose to neck vertically. */
static fc_rect patch_rect(const geom *g, int fw, int fh) {
  int x0 = (int)floorf(g->cx - 1.9f * g->hw), x1 = (int)ceilf(g->cx + 1.9f * g->hw);
  int y0 = (int)floorf(g->cy - 0.32f * g->s), y1 = (int)ceilf(g->cy + 0.75f * g->s);
  x0 = x0 < 0 ? 0 : x0 & ~1;
  y0 = y0 < 0 ? 0 : y0 & ~1;
  x1 = x1 > fw ? fw : x1;
  y1 = y1 > fh ? fh : y1;
  int w = (x1 - x0) & ~1, h = (y1 - y0) & ~1;
  if (w > MAX_PATCH_W) w = MAX_PATCH_W;
  return (fc_rect){x0, y0, w > 0 ? w : 0, h > 0 ? h : 0};
}

static geom geom_of(const fc_avatar *av, int frame) {
  const fc_mouth_geom *m = fc_avatar_mouth(av, frame);
  return (geom){m->cx, m->cy, m->half_w, m->curve, m->rest_gap, m->face_h};
}

/* The colour of the photo's own teeth (bright, nearly grey pixels of the rest opening), or a
 * neutral ivory when the photo's mouth is closed. */
static void teeth_colour(const fc_image *im, const geom *g, float out[3]) {
  float acc[3] = {0, 0, 0};
  int n = 0;
  for (int y = (int)(g->cy - g->g0 / 2); g->g0 >= 2 && y <= (int)(g->cy + g->g0 / 2); y++)
    for (int x = (int)(g->cx - 0.5f * g->hw); x <= (int)(g->cx + 0.5f * g->hw); x++) {
      if (x < 0 || y < 0 || x >= im->w || y >= im->h) continue;
      const uint8_t *p = im->rgb + (size_t)y * im->stride + 3 * x;
      if (pm_is_teeth(p)) {
        for (int c = 0; c < 3; c++) acc[c] += p[c];
        n++;
      }
    }
  for (int c = 0; c < 3; c++) out[c] = n >= 4 ? acc[c] / n : pm_ivory[c];
}

/* The landmark renderer's rect for frame i, in frame pixels (w = 0: not usable, v0 runs). */
static fc_rect lm_rect(const fc_avatar *av, int i, const fc_image **im, fc_rect *where) {
  const fc_point *lm = fc_avatar_landmarks(av, i);
  *im = fc_avatar_face_region(av, i, where);
  return lm ? pm_lm_rect(lm, *where) : (fc_rect){0, 0, 0, 0};
}

static size_t pm_capacity(void *state, const fc_avatar *av) {
  size_t best = 0;
  for (int i = 0; i < fc_avatar_frame_count(av); i++) {
    geom g = geom_of(av, i);
    fc_rect r = patch_rect(&g, fc_avatar_width(av), fc_avatar_height(av)), where;
    const fc_image *im;
    fc_rect l = lm_rect(av, i, &im, &where);
    if ((size_t)r.w * r.h > best) best = (size_t)r.w * r.h;
    if ((size_t)l.w * l.h > best) best = (size_t)l.w * l.h;
  }
  return best;
}

/* (1 − q)^e for q = u² in [0, 1], tabulated: the profiles are evaluated per pixel. */
#define LENS_N 256
typedef struct lens_lut {
  float v[LENS_N + 2];
} lens_lut;

static void lens_init(lens_lut *l, float e) {
  for (int i = 0; i <= LENS_N + 1; i++) {
    float q = (float)i / LENS_N;
    l->v[i] = q < 1 ? powf(1 - q, e) : 0;
  }
}

static float lens(const lens_lut *l, float q) {
  if (q >= 1) return 0;
  float f = q * LENS_N;
  int i = (int)f;
  return l->v[i] + (f - i) * (l->v[i + 1] - l->v[i]);
}

/* exp(−t) for t ≥ 0 to within 2 %, cheaply: (1 − t/4)⁴, 0 past t = 4. */
static float bump(float t) {
  if (t >= 4) return 0;
  float a = 1 - 0.25f * t;
  a *= a;
  return a * a;
}


static void render(const fc_image *im, const geom *g, fc_mouth m, const lens_lut *lut_new,
                   const lens_lut *lut_rest, fc_patch *out) {
  fc_rect r = out->place;
  float open = pm_clampf(m.open, 0, 1), wide = pm_clampf(m.wide, 0, 1), round = pm_clampf(m.round, 0, 1);
  float s = g->s;
  float G = open * 0.2f * s;                      /* new opening at the centre */
  float wf = 1.0f + 0.14f * wide - 0.30f * round; /* corner spread factor */
  float hw1 = g->hw * wf;
  float teeth[3];
  teeth_colour(im, g, teeth);
  float teeth_h = fminf(0.05f * s, 0.5f * G) * (1.0f - 0.5f * round);
  float low_teeth = open > 0.5f ? (open - 0.5f) * 2.0f * 0.35f * teeth_h : 0;
  float inv_wv = 1.0f / (0.02f * s * s), inv_nose = 1.0f / (0.28f * s);
  float inv_neck = 1.0f / (0.35f * s), chin = 0.3f * s;

  /* Per column: the meeting line, the lateral weight of the spread, the new lens and the
   * edges of the new and (where the column is not spread) the rest opening. */
  float col_cy[MAX_PATCH_W], col_k[MAX_PATCH_W], col_p[MAX_PATCH_W], col_u2[MAX_PATCH_W];
  float col_top0[MAX_PATCH_W], col_bot0[MAX_PATCH_W];
  int w = r.w < MAX_PATCH_W ? r.w : MAX_PATCH_W;
  for (int i = 0; i < w; i++) {
    float dx = r.x + i + 0.5f - g->cx;
    float ul = pm_clampf(dx / g->hw, -1, 1);
    col_cy[i] = g->cy + g->curve * ul * ul;
    col_k[i] = (wf - 1.0f) * (1.0f - pm_smooth01((fabsf(dx) - hw1) / (0.8f * g->hw)));
    float u = dx / hw1, u0 = dx / g->hw, p0 = lens(lut_rest, u0 * u0);
    col_u2[i] = u * u;
    col_p[i] = lens(lut_new, u * u);
    col_top0[i] = col_cy[i] - 0.5f * g->g0 * p0;
    col_bot0[i] = col_cy[i] + 0.5f * g->g0 * p0;
  }

  for (int j = 0; j < r.h; j++) {
    float y = r.y + j + 0.5f;
    uint8_t *po = out->rgb + (size_t)j * r.w * 3, *pa = out->alpha + (size_t)j * r.w;
    for (int i = 0; i < w; i++) {
      float x = r.x + i + 0.5f, dx = x - g->cx;
      float cy = col_cy[i], p = col_p[i];
      /* Horizontal spread/purse, strongest on the mouth line. Most of the patch is not
       * spread at all: there the column's precomputed rest opening holds. */
      float k = col_k[i] * bump((y - cy) * (y - cy) * inv_wv);
      float sx = x, top0 = col_top0[i], bot0 = col_bot0[i];
      if (fabsf(k) > 1e-4f) {
        sx = g->cx + dx / (1.0f + k);
        float u0 = (sx - g->cx) / g->hw;
        float p0 = lens(lut_rest, u0 * u0);
        top0 = cy - 0.5f * g->g0 * p0;
        bot0 = cy + 0.5f * g->g0 * p0;
      }
      float top_d = cy - 0.35f * G * p, bot_d = cy + 0.65f * G * p;

      float rgb[3], lip[3], sy;
      if (y <= cy + 0.15f * G * p) {
        /* Upper face: the displacement fades out towards the nose. */
        float t = y <= top_d ? 1.0f - pm_smooth01((top_d - y) * inv_nose) : 1.0f;
        sy = y - (top_d - top0) * t;
      } else {
        /* Lower lip and jaw: rigid down to the chin, then fading out down the neck. */
        float t = y >= bot_d ? 1.0f - pm_smooth01((y - bot_d - chin) * inv_neck) : 1.0f;
        sy = y - (bot_d - bot0) * t;
      }
      float cover = pm_clampf(y - top_d, 0, 1) * pm_clampf(bot_d - y, 0, 1);
      if (sx == x && fabsf(sy - y) < 1.0f / 256 && cover <= 0) {
        /* The identity (most of the patch): the pixel itself. */
        memcpy(po + 3 * i, im->rgb + (size_t)(r.y + j) * im->stride + 3 * (r.x + i), 3);
      } else {
        pm_sample(im, sx - 0.5f, sy - 0.5f, lip);
        if (cover > 0) {
          /* Inside the opening: throat, upper teeth, lower teeth. */
          float in[3], u2 = col_u2[i];
          float shade = 0.55f + 0.45f * u2;
          in[0] = 62 * shade, in[1] = 24 * shade, in[2] = 28 * shade;
          float tu = y - top_d;
          if (tu < teeth_h && u2 < 0.64f) {
            float kt = (1.0f - 0.35f * u2) * (0.8f + 0.2f * (1 - tu / (teeth_h + 1e-3f)));
            for (int c = 0; c < 3; c++) in[c] = teeth[c] * kt;
          } else if (bot_d - y < low_teeth && u2 < 0.36f) {
            for (int c = 0; c < 3; c++) in[c] = teeth[c] * 0.8f;
          }
          for (int c = 0; c < 3; c++) rgb[c] = lip[c] + cover * (in[c] - lip[c]);
        } else {
          memcpy(rgb, lip, sizeof rgb);
        }
        for (int c = 0; c < 3; c++) po[3 * i + c] = (uint8_t)pm_clampf(rgb[c] + 0.5f, 0, 255);
      }
      /* Feathered edge: 4 px ramp at the patch border (the warp is the identity there). */
      int e = i < j ? i : j;
      e = e < r.w - 1 - i ? e : r.w - 1 - i;
      e = e < r.h - 1 - j ? e : r.h - 1 - j;
      pa[i] = e >= 4 ? 255 : (uint8_t)(e * 64);
    }
  }
}

typedef struct pm_state {
  lens_lut lut_new, lut_rest;
  pm_lm lm; /* the landmark renderer's mesh, reused by every request */
} pm_state;

static int pm_create(const fc_lipsync_params *p, void **state) {
  pm_state *st = calloc(1, sizeof *st);
  if (!st) return fc_error_set(FC_ENOMEM, "parametric: out of memory");
  lens_init(&st->lut_new, 0.6f);
  lens_init(&st->lut_rest, 0.7f);
  *state = st;
  return FC_OK;
}
static void pm_destroy(void *state) { free(state); }

static int pm_run(void *state, const fc_lipsync_req *reqs, fc_patch *out, int n) {
  pm_state *st = state;
  for (int k = 0; k < n; k++) {
    const fc_avatar *av = reqs[k].avatar;
    if (!av) return fc_error_set(FC_EINVAL, "parametric: request without an avatar");
    fc_rect where;
    const fc_image *im;
    fc_rect lr = lm_rect(av, reqs[k].frame, &im, &where);
    if (lr.w > 0) {
      /* v1: the frame has usable landmarks */
      out[k].place = lr;
      pm_lm_render(&st->lm, im, where, fc_avatar_landmarks(av, reqs[k].frame), reqs[k].mouth,
                   &out[k]);
      continue;
    }
    /* v0: work in the coordinates of the face region the avatar keeps as RGB */
    geom g = geom_of(av, reqs[k].frame);
    g.cx -= where.x, g.cy -= where.y;
    out[k].place = patch_rect(&g, im->w, im->h);
    render(im, &g, reqs[k].mouth, &st->lut_new, &st->lut_rest, &out[k]);
    out[k].place.x += where.x, out[k].place.y += where.y;
  }
  return FC_OK;
}

const fc_lipsync_backend fc_lipsync_parametric = {
    .name = "parametric",
    .needs_mel = 0,
    .create = pm_create,
    .destroy = pm_destroy,
    .patch_capacity = pm_capacity,
    .run = pm_run,
};
