/* libFuzzer: the Haar cascade XML reader; a cascade that loads is run on a small picture. */
#include "avatar/haar.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int err;
  fc_error_clear();
  fc_haar *h = fc_haar_load_mem(data, size, "fuzz.xml", &err);
  if (!h) {
    fc_fuzz_refusal(err);
    return 0;
  }
  static uint8_t gray[64 * 64];
  for (int i = 0; i < 64 * 64; i++) gray[i] = (uint8_t)(i * 7 + (i >> 6) * 13);
  fc_haar_params hp = fc_haar_params_default();
  fc_rect out[4];
  fc_haar_detect(h, gray, 64, 64, 64, &hp, out, 4);
  fc_haar_destroy(h);
  return 0;
}
