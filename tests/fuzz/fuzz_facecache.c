/* libFuzzer: a face cache record (avatar/facecache.h), which every photo avatar's start reads
 * from a folder anyone with the account may edit. Whatever the bytes: a refusal is an input
 * error with a detail; what is taken lies inside its own sizes (the box in the picture, the
 * points finite and near the frame) and writes back as the same bytes (the CRC aside: this
 * build skips its check), which parse again to the same entry. */
#include "avatar/facecache.h"
#include "fuzz.h"

#include <math.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fc_face_entry e, again;
  int err = fc_face_cache_parse(data, size, "fuzz", &e);
  if (err) {
    fc_fuzz_refusal(err);
    return 0;
  }
  if (size != FC_FACE_CACHE_BYTES || e.face.x < 0 || e.face.y < 0 || e.face.w < 1 || e.face.h < 1 ||
      e.face.x + e.face.w > e.src_w || e.face.y + e.face.h > e.src_h || e.out_w < 64 ||
      e.out_h < 64)
    __builtin_trap();
  for (int k = 0; e.has_landmarks && k < FC_LANDMARKS; k++)
    if (!isfinite(e.landmarks[k].x) || !isfinite(e.landmarks[k].y)) __builtin_trap();
  uint8_t out[FC_FACE_CACHE_BYTES];
  fc_face_cache_encode(&e, out);
  if (memcmp(out, data, FC_FACE_CACHE_BYTES - 4) != 0) __builtin_trap();
  if (fc_face_cache_parse(out, sizeof out, "fuzz", &again) != FC_OK ||
      memcmp(&e, &again, sizeof e) != 0)
    __builtin_trap();
  return 0;
}
