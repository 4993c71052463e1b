/* Shared by the libFuzzer targets (tests/fuzz/README.md): the entry point's prototype and the
 * rule every parser keeps — a refusal is an input error (FC_EFORMAT, FC_EUNSUPPORTED, FC_EINVAL,
 * FC_ENOFACE, or FC_ENOMEM for sizes past a limit) with a detail of its own; anything else
 * traps, so the fuzzer reports it alongside ASan and UBSan findings. */
#ifndef FC_FUZZ_H
#define FC_FUZZ_H

#include "facecast/error.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static inline void fc_fuzz_refusal(int err) {
  const char *d = fc_error_detail(err);
  int input_error = err == FC_EFORMAT || err == FC_EUNSUPPORTED || err == FC_EINVAL ||
                    err == FC_ENOFACE || err == FC_ENOMEM;
  if (!input_error || !d[0] || !strcmp(d, fc_strerror(err))) __builtin_trap();
}

#endif
