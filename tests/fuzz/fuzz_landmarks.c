/* libFuzzer: dlib's shape predictor model reader (shape_predictor_68_face_landmarks.dat); a
 * model that loads predicts on a small picture. */
#include "avatar/landmarks.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int err;
  fc_error_clear();
  fc_shape_model *m = fc_shape_model_load_mem(data, size, "fuzz.dat", &err);
  if (!m) {
    fc_fuzz_refusal(err);
    return 0;
  }
  static uint8_t gray[64 * 64];
  for (int i = 0; i < 64 * 64; i++) gray[i] = (uint8_t)(i * 5 + (i >> 6) * 11);
  fc_point pts[FC_LANDMARKS];
  fc_shape_predict(m, gray, 64, 64, 64, (fc_dlib_box){8, 8, 55, 55}, pts);
  fc_shape_model_destroy(m);
  return 0;
}
