/* libFuzzer: a bulk shard's H.264 elementary stream as the join reads it back (media/h264enc.h):
 * cut into access units in AVC form until the end or a refusal, the first unit's parameter
 * sets made into an avcC record. Every unit must fit a buffer of len + len/3 + 16 bytes,
 * consume input and hold a picture; and with a buffer of 8 bytes the call must ask for the
 * unit's size and leave *pos where it was. */
#include "fuzz.h"
#include "media/h264enc.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const size_t cap = size + size / 3 + 16;
  uint8_t *out = malloc(cap);
  if (!out) return 0;
  size_t pos = 0;
  int first = 1;
  for (;;) {
    const size_t before = pos;
    fc_h264_au au;
    uint8_t small[8];
    size_t p2 = pos;
    int r2 = fc_h264_next_au(data, size, &p2, small, sizeof small, &au);
    if (r2 == FC_ENOMEM && (p2 != pos || au.size <= sizeof small || au.size > cap)) __builtin_trap();
    int r = fc_h264_next_au(data, size, &pos, out, cap, &au);
    if ((r2 == FC_ENOMEM) != (r == 1 && au.size > sizeof small)) __builtin_trap();
    if (r < 0) {
      fc_fuzz_refusal(r);
      break;
    }
    if (r == 0) break;
    if (pos <= before || pos > size || au.size > cap || au.size < 5) __builtin_trap();
    if (first && au.sps && au.pps) {
      uint8_t avcc[512];
      int n = fc_h264_avcc(au.sps, au.sps_len, au.pps, au.pps_len, avcc, sizeof avcc);
      if (n < 0) fc_fuzz_refusal(n);
      else if ((size_t)n > sizeof avcc) __builtin_trap();
    }
    first = 0;
  }
  free(out);
  return 0;
}
