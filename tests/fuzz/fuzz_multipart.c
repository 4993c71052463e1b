/* libFuzzer: multipart/form-data uploads (/humanaudio's WAV, /api/avatar/task's video or
 * photo, /v1/videos' audio, background image and fields) through a real server in this process (harness.h). The first byte picks the route
 * and the boundary's length, the rest is the body ("SID" becomes a live session's id). */
#include "fuzz.h"
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fc_fuzz_server_start();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const char *path = data[0] & 4 ? "/v1/videos" : data[0] & 1 ? "/api/avatar/task" : "/humanaudio";
  const char *ctype = data[0] & 2 ? "multipart/form-data; boundary=XyZ"
                                  : "multipart/form-data; boundary=\"----fcFuzzBoundary\"";
  uint8_t *body;
  size_t n = fc_fuzz_with_session(data + 1, size - 1, &body);
  int st = fc_fuzz_request("POST", path, ctype, body, n);
  free(body);
  if (st >= 500 && st != 503) __builtin_trap();
  if (fc_fuzz_request("GET", "/healthz", "text/plain", (const uint8_t *)"", 0) != 200)
    __builtin_trap();
  return 0;
}
