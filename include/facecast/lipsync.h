/* The lip-sync backend interface: the seam between the engine and the models.
 *
 * A backend takes a batch of requests (per request: which avatar frame, the frame's features)
 * and returns per request a patch: RGB pixels, a blend mask and where they go in the frame. The
 * scheduler, compositor and transports never know which model runs. Backends are looked up by
 * name ("parametric": no weights; "wav2lip": a Wav2Lip checkpoint).
 *
 * Ownership: the caller owns the patch buffers (sized with fc_lipsync_patch_capacity), so a
 * batch runs without allocating. A backend handle may be shared by sessions but fc_lipsync_run
 * is called by one thread at a time (the device's scheduler). */
#ifndef FACECAST_LIPSYNC_H
#define FACECAST_LIPSYNC_H

#include "facecast/avatar.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The mouth shape a viseme asks for, each in [0, 1]. */
typedef struct fc_mouth {
  float open;  /* jaw drop / lip separation */
  float wide;  /* lips spread (ee, s) */
  float round; /* lips rounded and pushed forward (oo, w) */
} fc_mouth;

typedef struct fc_lipsync_req {
  const fc_avatar *avatar;
  int frame;        /* avatar frame index */
  const float *mel; /* 80×16 mel window of this video frame (needed by neural backends) */
  fc_mouth mouth;   /* viseme-derived shape (used by the parametric backend) */
} fc_lipsync_req;

typedef struct fc_patch {
  fc_rect place;  /* set by the backend: where the patch goes in the frame (even x, y, w, h) */
  uint8_t *rgb;   /* caller-owned, place.w × place.h × 3, row-major, no padding */
  uint8_t *alpha; /* caller-owned, place.w × place.h; 255 = patch, 0 = frame */
  int i420;       /* set by the backend: 0 = rgb and alpha as above; 1 = the backend blended
                   * already (e.g. on its GPU) and rgb holds the finished pixels of the rect as
                   * I420 (Y place.w × place.h, then U, V (place.w/2) × (place.h/2)), which
                   * the compositor copies; alpha is unused */
} fc_patch;

typedef struct fc_lipsync fc_lipsync;

typedef struct fc_lipsync_params {
  const char *model;      /* backend name; NULL = "parametric" */
  const char *checkpoint; /* weights file for neural backends */
  const char *device;     /* "cpu", "cuda", "cuda:N"; NULL = "cpu" */
} fc_lipsync_params;

fc_lipsync *fc_lipsync_create(const fc_lipsync_params *p, int *err);
void fc_lipsync_destroy(fc_lipsync *ls);
const char *fc_lipsync_name(const fc_lipsync *ls);
/* Whether requests must carry a mel window. */
int fc_lipsync_needs_mel(const fc_lipsync *ls);

/* The largest patch (in pixels) the backend produces for this avatar: allocate
 * fc_patch.rgb with 3× and .alpha with 1× this many bytes. */
size_t fc_lipsync_patch_capacity(fc_lipsync *ls, const fc_avatar *av);

/* Runs a batch of n requests, writing out[i] for reqs[i]. Returns 0 or a negative error. */
int fc_lipsync_run(fc_lipsync *ls, const fc_lipsync_req *reqs, fc_patch *out, int n);

/* The used fraction of the memory of the device the backend runs on, for the scheduler's
 * headroom rule: 0 and *fraction set, or FC_EUNSUPPORTED (CPU backends). Any thread. */
int fc_lipsync_memory_used(fc_lipsync *ls, double *fraction);

#ifdef __cplusplus
}
#endif
#endif
