/* libFuzzer: what fc_h264_still reads back from x264's stream (media/h264_still.h) — an Annex B
 * access unit whose SPS, PPS and first slice header it follows — for a 64x64 picture. A
 * refusal must be an input error with its detail; a stream it accepts must then take a P
 * picture of its own (all of the picture looked at) into a buffer of fc_h264_still_max_size
 * bytes, and an encoder not in step must refuse to write. */
#include "fuzz.h"
#include "media/h264_still.h"

#include <stdlib.h>

enum { W = 64, H = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static uint8_t rec[W * H * 3 / 2], pic[W * H * 3 / 2];
  int err = 0;
  fc_h264_still *s = fc_h264_still_create(W, H, 1 + (size ? data[0] % 51 : 20), &err);
  if (!s) __builtin_trap();
  for (size_t i = 0; i < sizeof pic; i++) pic[i] = (uint8_t)(i * 7 + (size ? data[i % size] : 0));
  const uint8_t *rp[3] = {rec, rec + W * H, rec + W * H * 5 / 4}, *pp[3] = {pic, pic + W * H,
                                                                           pic + W * H * 5 / 4};
  const int st[3] = {W, W / 2, W / 2};
  const int r = fc_h264_still_sync(s, data, size, rp, st, 3);
  if (r) {
    fc_fuzz_refusal(r);
    if (fc_h264_still_ready(s)) __builtin_trap();
  } else if (!fc_h264_still_ready(s)) {
    __builtin_trap();
  }
  const size_t cap = fc_h264_still_max_size(s);
  uint8_t *out = malloc(cap);
  if (out) {
    const int n = fc_h264_still_encode(s, pp, st, NULL, out, cap);
    if (r == 0 && (n <= 5 || (size_t)n > cap)) __builtin_trap();
    if (r != 0 && n != FC_EINVAL) __builtin_trap();
    free(out);
  }
  fc_h264_still_destroy(s);
  return 0;
}
