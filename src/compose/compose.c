/* CPU compositor (see compose.h): frame copy, then the patch rect converted to I420 (libyuv)
 * and blended into the frame's planes. Blending in YUV equals blending in RGB (the conversion
 * is affine) up to rounding and the 2×2 chroma subsampling of the mask, and needs no RGB copy of
 * the frame, so avatars kept only as I420 (memory-mapped packs) compose the same way. The frame
 * copy is fc_avatar_copy_i420: a pack's frame is assembled from its tiles straight into dst. */
#include "compose/compose.h"
#include "facecast/error.h"

#include <libyuv.h>
#include <string.h>

static inline uint8_t mix(unsigned p, unsigned b, unsigned a) {
  return (uint8_t)((p * a + b * (255 - a) + 127) / 255);
}

int fc_compose_i420(const fc_avatar *av, int frame, const fc_patch *patch, uint8_t *dst,
                    uint8_t *scratch) {
  return fc_compose_i420_update(av, frame, patch, dst, NULL, scratch);
}

int fc_compose_i420_update(const fc_avatar *av, int frame, const fc_patch *patch, uint8_t *dst,
                           fc_i420_delta *held, uint8_t *scratch) {
  int w = fc_avatar_width(av), h = fc_avatar_height(av);
  size_t ysz = (size_t)w * h;
  /* A photo's frames are one still picture: dst differs from it only in the rect it holds. */
  const uint8_t *base = fc_avatar_frame_i420(av, frame);
  if (held && base && held->base == base) {
    uint8_t *dp[3], *bp[3];
    int ds[3], bs[3];
    fc_i420_planes(dst, w, h, dp, ds);
    fc_i420_planes(base, w, h, bp, bs);
    fc_i420_copy_rect(dp, ds, (const uint8_t *const *)bp, bs, w, h, held->changed);
  } else {
    int err = fc_avatar_copy_i420(av, frame, dst);
    if (err) {
      if (held) *held = (fc_i420_delta){0};
      return err;
    }
  }
  if (held) *held = (fc_i420_delta){.base = base};
  if (!patch) return FC_OK;
  fc_rect r = patch->place;
  if (r.w <= 0 || r.h <= 0) return FC_OK;
  if (r.x < 0 || r.y < 0 || r.x + r.w > w || r.y + r.h > h || (r.x | r.y | r.w | r.h) & 1)
    return fc_error_set(FC_EINVAL, "patch %dx%d+%d+%d outside the %dx%d frame or odd", r.w, r.h,
                        r.x, r.y, w, h);
  if (held && base) held->changed = r;
  uint8_t *y = dst, *u = dst + ysz, *v = u + ysz / 4;
  int cw = r.w / 2, ch = r.h / 2, hw = w / 2;
  if (patch->i420) { /* finished pixels (blended on the backend's device): copy the rect */
    const uint8_t *sy = patch->rgb, *su = sy + (size_t)r.w * r.h, *sv = su + (size_t)cw * ch;
    for (int j = 0; j < r.h; j++)
      memcpy(y + (size_t)(r.y + j) * w + r.x, sy + (size_t)j * r.w, r.w);
    for (int j = 0; j < ch; j++) {
      size_t o = (size_t)(r.y / 2 + j) * hw + r.x / 2;
      memcpy(u + o, su + (size_t)j * cw, cw);
      memcpy(v + o, sv + (size_t)j * cw, cw);
    }
    return FC_OK;
  }
  /* the patch as I420 in scratch: Y r.w×r.h, then U, V (r.w/2)×(r.h/2) */
  uint8_t *py = scratch, *pu = py + (size_t)r.w * r.h, *pv = pu + (size_t)(r.w / 2) * (r.h / 2);
  RAWToI420(patch->rgb, r.w * 3, py, r.w, pu, r.w / 2, pv, r.w / 2, r.w, r.h);
  const uint8_t *al = patch->alpha;
  for (int j = 0; j < r.h; j++) {
    uint8_t *o = y + (size_t)(r.y + j) * w + r.x;
    const uint8_t *p = py + (size_t)j * r.w, *a = al + (size_t)j * r.w;
    for (int i = 0; i < r.w; i++) o[i] = mix(p[i], o[i], a[i]);
  }
  for (int j = 0; j < ch; j++) {
    uint8_t *ou = u + (size_t)(r.y / 2 + j) * hw + r.x / 2, *ov = v + (size_t)(r.y / 2 + j) * hw + r.x / 2;
    const uint8_t *su = pu + (size_t)j * cw, *sv = pv + (size_t)j * cw;
    const uint8_t *a0 = al + (size_t)(2 * j) * r.w, *a1 = a0 + r.w;
    for (int i = 0; i < cw; i++) {
      unsigned a = (a0[2 * i] + a0[2 * i + 1] + a1[2 * i] + a1[2 * i + 1] + 2) / 4;
      ou[i] = mix(su[i], ou[i], a);
      ov[i] = mix(sv[i], ov[i], a);
    }
  }
  return FC_OK;
}
