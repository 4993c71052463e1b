/* libFuzzer: the avatar pack reader (its CRCs are off in fuzzing builds, so mutated headers
 * reach the parsers behind them); what opens is read: frames, crops, clips. */
#include "avatar/pack.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int err;
  fc_error_clear();
  fc_pack *p = fc_pack_open_mem(data, size, "fuzz.fcpack", &err);
  if (!p) {
    fc_fuzz_refusal(err);
    return 0;
  }
  const fc_pack_info *in = fc_pack_get_info(p);
  size_t fsz = (size_t)in->width * in->height * 3 / 2;
  uint8_t *buf = fsz <= (8u << 20) ? malloc(fsz) : NULL;
  for (int i = 0; i < in->frames && i < 4; i++) {
    fc_pack_frame f;
    if (fc_pack_get_frame(p, i, &f) != FC_OK) __builtin_trap(); /* opened: must be readable */
    if (buf && fc_pack_copy_i420(p, i, buf) != FC_OK) __builtin_trap();
  }
  for (int k = 0; k < fc_pack_clip_count(p); k++) {
    fc_pack_clip c;
    if (fc_pack_get_clip(p, k, &c) != FC_OK) __builtin_trap();
  }
  free(buf);
  fc_pack_close(p);
  return 0;
}
