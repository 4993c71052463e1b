/* Private: the vtable every lip-sync backend fills (see include/facecast/lipsync.h). */
#ifndef FC_LIPSYNC_BACKEND_H
#define FC_LIPSYNC_BACKEND_H

#include "facecast/lipsync.h"

typedef struct fc_lipsync_backend {
  const char *name;
  int needs_mel;
  /* Builds the backend's state; returns 0 or an error (with a detail). */
  int (*create)(const fc_lipsync_params *p, void **state);
  void (*destroy)(void *state);
  size_t (*patch_capacity)(void *state, const fc_avatar *av);
  int (*run)(void *state, const fc_lipsync_req *reqs, fc_patch *out, int n);
  /* Optional: the used fraction of the device memory the backend runs in (GPUs). */
  int (*memory_used)(void *state, double *fraction);
} fc_lipsync_backend;

extern const fc_lipsync_backend fc_lipsync_parametric;
extern const fc_lipsync_backend fc_lipsync_wav2lip;

#endif
