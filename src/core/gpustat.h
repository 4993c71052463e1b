/* GPU load and memory as the driver reports them (NVML), for benchmarks: utilisation is the
 * fraction of the last sample period in which a kernel ran, memory is what is allocated on the
 * card by everyone. The NVML library is opened at run time (dlopen), so builds and machines
 * without the NVIDIA driver need nothing and get FC_EUNSUPPORTED. NVML numbers its GPUs in PCI
 * order, as CUDA does by default (not under CUDA_DEVICE_ORDER=FASTEST_FIRST). */
#ifndef FC_CORE_GPUSTAT_H
#define FC_CORE_GPUSTAT_H

typedef struct fc_gpustat fc_gpustat;

/* NULL with *err FC_EUNSUPPORTED when there is no NVML (no driver) or no GPU. */
fc_gpustat *fc_gpustat_open(int *err);
void fc_gpustat_close(fc_gpustat *g);
/* GPU index's utilisation in percent and memory in use in bytes. 0 or FC_EINVAL / FC_EIO. */
int fc_gpustat_read(fc_gpustat *g, int index, unsigned *util_pct, unsigned long long *mem_used);

#endif
