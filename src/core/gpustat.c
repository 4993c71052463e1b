/* NVML through dlopen (see gpustat.h). Only five entry points are used; their signatures and
 * the two result structs are NVML's documented C API (nvml.h), declared here so that no NVIDIA
 * header or library is needed to build. */
#include "core/gpustat.h"
#include "facecast/error.h"

#include <dlfcn.h>
#include <stdlib.h>

typedef struct nvml_util {
  unsigned int gpu, memory;
} nvml_util;
typedef struct nvml_mem {
  unsigned long long total, free, used;
} nvml_mem;
typedef void *nvml_dev;

struct fc_gpustat {
  void *lib;
  int (*shutdown)(void);
  int (*handle)(unsigned int, nvml_dev *);
  int (*util)(nvml_dev, nvml_util *);
  int (*mem)(nvml_dev, nvml_mem *);
};

void fc_gpustat_close(fc_gpustat *g) {
  if (!g) return;
  if (g->shutdown) g->shutdown();
  if (g->lib) dlclose(g->lib);
  free(g);
}

fc_gpustat *fc_gpustat_open(int *err) {
  fc_gpustat *g = calloc(1, sizeof *g);
  if (!g) {
    *err = fc_error_set(FC_ENOMEM, "out of memory");
    return NULL;
  }
  int (*init)(void) = NULL;
  if (!(g->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL))) goto none;
  *(void **)&init = dlsym(g->lib, "nvmlInit_v2");
  *(void **)&g->handle = dlsym(g->lib, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&g->util = dlsym(g->lib, "nvmlDeviceGetUtilizationRates");
  *(void **)&g->mem = dlsym(g->lib, "nvmlDeviceGetMemoryInfo");
  if (!init || !g->handle || !g->util || !g->mem || init() != 0) goto none;
  *(void **)&g->shutdown = dlsym(g->lib, "nvmlShutdown");
  return g;
none:
  fc_gpustat_close(g);
  *err = fc_error_set(FC_EUNSUPPORTED, "no NVIDIA driver (libnvidia-ml) on this machine");
  return NULL;
}

int fc_gpustat_read(fc_gpustat *g, int index, unsigned *util_pct, unsigned long long *mem_used) {
  if (!g || index < 0) return fc_error_set(FC_EINVAL, "gpustat: bad arguments");
  nvml_dev d;
  nvml_util u;
  nvml_mem m;
  if (g->handle((unsigned)index, &d) != 0 || g->util(d, &u) != 0 || g->mem(d, &m) != 0)
    return fc_error_set(FC_EIO, "gpustat: GPU %d cannot be read", index);
  *util_pct = u.gpu;
  *mem_used = m.used;
  return FC_OK;
}
