/* libFuzzer: LiveTalking's coords.pkl (a pickled list of (y1, y2, x1, x2) boxes) through the
 * restricted pickle VM: whatever the bytes, a box list or a refusal with a detail. */
#include "modelfile/ltcoords.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fc_lt_box *b = NULL;
  int n = -1;
  fc_error_clear();
  int err = fc_lt_coords_parse(data, size, "fuzz.pkl", 1000, &b, &n);
  if (err) {
    fc_fuzz_refusal(err);
    if (b || n != 0) __builtin_trap();
    return 0;
  }
  if (!b || n < 1 || n > 1000) __builtin_trap();
  fc_lt_box *again = NULL; /* the same bytes, the same boxes (and every box readable) */
  int m = 0;
  if (fc_lt_coords_parse(data, size, "fuzz.pkl", 1000, &again, &m) || m != n ||
      memcmp(again, b, (size_t)n * sizeof *b))
    __builtin_trap();
  free(again);
  free(b);
  return 0;
}
