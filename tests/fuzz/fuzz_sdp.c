/* libFuzzer: a WebRTC offer's parsing and checks (what /offer and /whep do before building a
 * pipeline). */
#include "media/live.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *sdp = malloc(size + 1);
  if (!sdp) return 0;
  memcpy(sdp, data, size);
  sdp[size] = 0;
  fc_error_clear();
  int err = fc_live_check_offer(sdp);
  if (err) fc_fuzz_refusal(err);
  free(sdp);
  return 0;
}
