/* Private to the parametric backend: the landmark-driven renderer (v1, see lmwarp.c).
 *
 * pm_lm is the renderer's scratch: the mesh of one request (vertices at rest and at their
 * targets, triangles, per-triangle affine maps). It lives in the backend's state, allocated
 * once, because fc_lipsync_run is called by one thread at a time. */
#ifndef FC_PARAMETRIC_LMWARP_H
#define FC_PARAMETRIC_LMWARP_H

#include "facecast/lipsync.h"

/* 68 landmark slots, 4 more inner-lip points, 10 on the interior midlines, 16 border anchors. */
#define PM_MAXV 104
#define PM_MAXT 160

typedef struct pm_lm {
  float sx[PM_MAXV], sy[PM_MAXV]; /* rest (source) positions, region pixels */
  float tx[PM_MAXV], ty[PM_MAXV]; /* target positions */
  unsigned char tri[PM_MAXT][3];
  int nt;
} pm_lm;

/* The patch rectangle for a frame with landmarks lm (frame pixels), clamped to `bounds` (the
 * frame, or the face region the avatar keeps), even x, y, w, h; w = 0 when landmarks are
 * unusable (degenerate or outside bounds): the caller falls back to the v0 renderer. */
fc_rect pm_lm_rect(const fc_point *lm, fc_rect bounds);

/* Renders one patch: im is the face region, `where` its place in the frame, lm the frame's
 * landmarks (frame pixels), out->place the rect from pm_lm_rect in frame pixels. */
void pm_lm_render(pm_lm *st, const fc_image *im, fc_rect where, const fc_point *lm, fc_mouth m,
                  fc_patch *out);

#endif
