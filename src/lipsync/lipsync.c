/* Backend registry and dispatch for the lip-sync interface. */
#include "facecast/error.h"
#include "lipsync/backend.h"

#include <stdlib.h>
#include <string.h>

struct fc_lipsync {
  const fc_lipsync_backend *be;
  void *state;
};

static const fc_lipsync_backend *const backends[] = {&fc_lipsync_parametric, &fc_lipsync_wav2lip};

fc_lipsync *fc_lipsync_create(const fc_lipsync_params *p, int *err) {
  const char *name = p && p->model ? p->model : "parametric";
  const fc_lipsync_backend *be = NULL;
  for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
    if (strcmp(backends[i]->name, name) == 0) be = backends[i];
  if (!be) {
    *err = fc_error_set(FC_ENOTFOUND, "unknown lip-sync model '%s' (available: parametric, wav2lip)", name);
    return NULL;
  }
  fc_lipsync *ls = calloc(1, sizeof *ls);
  if (!ls) {
    *err = fc_error_set(FC_ENOMEM, "out of memory");
    return NULL;
  }
  ls->be = be;
  if ((*err = be->create(p, &ls->state))) {
    free(ls);
    return NULL;
  }
  return ls;
}

void fc_lipsync_destroy(fc_lipsync *ls) {
  if (!ls) return;
  ls->be->destroy(ls->state);
  free(ls);
}

const char *fc_lipsync_name(const fc_lipsync *ls) { return ls->be->name; }
int fc_lipsync_needs_mel(const fc_lipsync *ls) { return ls->be->needs_mel; }

size_t fc_lipsync_patch_capacity(fc_lipsync *ls, const fc_avatar *av) {
  return ls->be->patch_capacity(ls->state, av);
}

int fc_lipsync_run(fc_lipsync *ls, const fc_lipsync_req *reqs, fc_patch *out, int n) {
  if (n < 0 || (n > 0 && (!reqs || !out))) return fc_error_set(FC_EINVAL, "lipsync: bad batch");
  for (int k = 0; k < n; k++) out[k].i420 = 0; /* a backend that blends itself says so */
  return n ? ls->be->run(ls->state, reqs, out, n) : FC_OK;
}

int fc_lipsync_memory_used(fc_lipsync *ls, double *fraction) {
  if (!ls || !fraction) return fc_error_set(FC_EINVAL, "lipsync: bad arguments");
  if (!ls->be->memory_used)
    return fc_error_set(FC_EUNSUPPORTED, "lipsync: %s runs on the CPU", ls->be->name);
  return ls->be->memory_used(ls->state, fraction);
}
