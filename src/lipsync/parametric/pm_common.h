/* Private to the parametric backend: small pixel helpers both renderers (v0 in parametric.c,
 * the landmark mesh in lmwarp.c) share. Inline: they run per patch pixel. */
#ifndef FC_PARAMETRIC_COMMON_H
#define FC_PARAMETRIC_COMMON_H

#include "avatar/image.h"

static inline float pm_clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline float pm_smooth01(float t) {
  t = pm_clampf(t, 0, 1);
  return t * t * (3 - 2 * t);
}

/* Bilinear sample at (x, y) in pixel-index coordinates (pixel (i, j)'s centre is (i, j)),
 * clamped to the image. */
static inline void pm_sample(const fc_image *im, float x, float y, float out[3]) {
  x = pm_clampf(x, 0, (float)im->w - 1.001f);
  y = pm_clampf(y, 0, (float)im->h - 1.001f);
  int xi = (int)x, yi = (int)y;
  float fx = x - xi, fy = y - yi;
  const uint8_t *p = im->rgb + (size_t)yi * im->stride + 3 * xi, *q = p + im->stride;
  for (int c = 0; c < 3; c++) {
    float top = p[c] + fx * (p[c + 3] - p[c]);
    float bot = q[c] + fx * (q[c + 3] - q[c]);
    out[c] = top + fy * (bot - top);
  }
}

/* Teeth in a photo: bright and nearly grey (lips and skin are saturated, the throat dark). */
static inline int pm_is_teeth(const uint8_t *p) {
  int mx = p[0] > p[1] ? (p[0] > p[2] ? p[0] : p[2]) : (p[1] > p[2] ? p[1] : p[2]);
  int mn = p[0] < p[1] ? (p[0] < p[2] ? p[0] : p[2]) : (p[1] < p[2] ? p[1] : p[2]);
  return mx > 140 && mx - mn < 0.25f * mx;
}

/* Used when the photo shows no teeth to take the colour from. */
static const float pm_ivory[3] = {226, 221, 208};

#endif
