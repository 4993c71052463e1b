/* What the CUDA sides of Wav2Lip (cuda_cudnn.c: the network; cuda_composite.c: crop, paste and
 * blend) share: CUDA errors as facecast's (w2l_cuda.h). */
#include "lipsync/wav2lip/w2l_cuda.h"

#include "facecast/error.h"

int w2l_cuda_error(cudaError_t e, const char *what) {
  cudaGetLastError(); /* clear it */
  return fc_error_set(e == cudaErrorMemoryAllocation ? FC_ENOMEM : FC_EUNSUPPORTED,
                      "wav2lip cuda: %s: %s", what, cudaGetErrorString(e));
}
