/* libFuzzer entry point for the checkpoint (torch zip / legacy pickle, safetensors) and .npy
 * readers. Build and run: see tests/fuzz/README.md.
 *
 * Each input goes through format detection and then through every parser forced on it (so the
 * pickle VM, the zip reader and the safetensors header parser all see every input, whatever its
 * first bytes), and through the .npy reader. A load that succeeds is read in full; one that fails
 * must fail with FC_EFORMAT or FC_EUNSUPPORTED and a detail of its own - anything else traps, so
 * the fuzzer reports it alongside ASan/UBSan findings. The input buffer is used in place (the
 * _mem entry points borrow it), so any read past its end is caught by ASan.
 */
#include "modelfile/checkpoint.h"
#include "facecast/error.h"
#include "modelfile/ckpt_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

static void check_failure(int err) {
  const char *d = fc_error_detail(err);
  if ((err != FC_EFORMAT && err != FC_EUNSUPPORTED) || !d[0] || !strcmp(d, fc_strerror(err)))
    __builtin_trap();
}

/* FC_FUZZ_ONLY_SAFETENSORS: the safetensors target (fuzz_safetensors), one parser alone. */
#ifdef FC_FUZZ_ONLY_SAFETENSORS
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int err;
  fc_error_clear();
  fc_checkpoint *c = fc_checkpoint_load_mem(data, size, "fuzz", FC_CKPT_SAFETENSORS, &err);
  if (!c) {
    check_failure(err);
    return 0;
  }
  for (int i = 0; i < fc_checkpoint_count(c); i++) {
    int64_t n = fc_checkpoint_numel(c, i);
    if (n < 0) __builtin_trap();
    if (n > (1 << 20)) continue;
    float *f = malloc((size_t)n * sizeof *f + 1);
    if (f && fc_checkpoint_read_f32(c, i, f, (size_t)n) != FC_OK) __builtin_trap();
    free(f);
  }
  fc_checkpoint_destroy(c);
  return 0;
}
#else

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const int formats[] = {FC_CKPT_AUTO, FC_CKPT_ZIP, FC_CKPT_LEGACY, FC_CKPT_SAFETENSORS};
  for (size_t k = 0; k < sizeof formats / sizeof *formats; k++) {
    int err;
    fc_error_clear();
    fc_checkpoint *c = fc_checkpoint_load_mem(data, size, "fuzz", formats[k], &err);
    if (!c) {
      check_failure(err);
      continue;
    }
    for (int i = 0; i < fc_checkpoint_count(c); i++) {
      const fc_tensor_info *in = fc_checkpoint_info(c, i);
      int64_t n = fc_checkpoint_numel(c, i);
      if (!in || n < 0 || fc_checkpoint_find(c, in->name) != i) __builtin_trap();
      if (n > (1 << 20)) continue; /* zero-stride views may be huge; reading them proves nothing */
      float *f = malloc((size_t)n * sizeof *f + 1);
      if (f && fc_checkpoint_read_f32(c, i, f, (size_t)n) != FC_OK) __builtin_trap();
      free(f);
    }
    fc_checkpoint_destroy(c);
  }
  float *f = NULL;
  int64_t shape[FC_TENSOR_MAX_DIMS];
  int nd;
  fc_error_clear();
  int err = fc_npy_read_mem(data, size, "fuzz", &f, shape, &nd);
  if (err) check_failure(err);
  free(f);
  return 0;
}
#endif
