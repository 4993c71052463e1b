/* CPU compositor (see compose.h): frame copy + blend of the patch rect + RAW(RGB)→I420. */
#include "facecast/compose.h"
#include "facecast/error.h"

#include <libyuv.h>
#include <string.h>

int fc_compose_i420(const fc_avatar *av, int frame, const fc_patch *patch, uint8_t *dst,
                    uint8_t *scratch) {
  int w = fc_avatar_width(av), h = fc_avatar_height(av);
  size_t ysz = (size_t)w * h;
  memcpy(dst, fc_avatar_frame_i420(av, frame), ysz * 3 / 2);
  if (!patch) return FC_OK;
  fc_rect r = patch->place;
  if (r.w <= 0 || r.h <= 0) return FC_OK;
  if (r.x < 0 || r.y < 0 || r.x + r.w > w || r.y + r.h > h || (r.x | r.y | r.w | r.h) & 1)
    return fc_error_set(FC_EINVAL, "patch %dx%d+%d+%d outside the %dx%d frame or odd", r.w, r.h,
                        r.x, r.y, w, h);
  const fc_image *base = fc_avatar_frame(av, frame);
  for (int j = 0; j < r.h; j++) {
    const uint8_t *b = base->rgb + (size_t)(r.y + j) * base->stride + 3 * r.x;
    const uint8_t *p = patch->rgb + (size_t)j * r.w * 3, *a = patch->alpha + (size_t)j * r.w;
    uint8_t *o = scratch + (size_t)j * r.w * 3;
    for (int i = 0; i < r.w; i++) {
      unsigned al = a[i], bl = 255 - al;
      for (int c = 0; c < 3; c++)
        o[3 * i + c] = (uint8_t)((p[3 * i + c] * al + b[3 * i + c] * bl + 127) / 255);
    }
  }
  uint8_t *y = dst, *u = dst + ysz, *v = u + ysz / 4;
  RAWToI420(scratch, r.w * 3, y + (size_t)r.y * w + r.x, w, u + (size_t)(r.y / 2) * (w / 2) + r.x / 2,
            w / 2, v + (size_t)(r.y / 2) * (w / 2) + r.x / 2, w / 2, r.w, r.h);
  return FC_OK;
}
