/* libFuzzer: the .npy reader alone (fuzz_checkpoint.c also feeds it every input). */
#include "modelfile/checkpoint.h"
#include "modelfile/ckpt_internal.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  float *f = NULL;
  int64_t shape[FC_TENSOR_MAX_DIMS];
  int nd;
  fc_error_clear();
  int err = fc_npy_read_mem(data, size, "fuzz.npy", &f, shape, &nd);
  if (err) fc_fuzz_refusal(err);
  free(f);
  return 0;
}
