/* libFuzzer: the WAV reader (what /humanaudio and render --audio read), then resampling. */
#include "facecast/audio.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fc_audio a;
  fc_error_clear();
  int err = fc_wav_read_mem(data, size, "fuzz.wav", &a);
  if (err) {
    fc_fuzz_refusal(err);
    return 0;
  }
  if (a.n < 200000) { /* resampling long audio proves nothing more */
    fc_audio r;
    if (fc_resample(&a, 16000, &r) == FC_OK) fc_audio_free(&r);
  }
  fc_audio_free(&a);
  return 0;
}
