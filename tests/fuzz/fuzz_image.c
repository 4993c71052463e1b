/* libFuzzer: the PNG/JPEG decoder (avatars, uploads), then the grey conversion every face
 * detector call makes. */
#include "avatar/image.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fc_image im;
  fc_error_clear();
  int err = fc_image_load_mem(data, size, "fuzz.img", &im);
  if (err) {
    fc_fuzz_refusal(err);
    return 0;
  }
  if ((size_t)im.w * im.h <= 4u << 20) {
    uint8_t *g = malloc((size_t)im.w * im.h);
    if (g) fc_image_to_gray(&im, g, im.w);
    free(g);
  }
  fc_image_free(&im);
  return 0;
}
