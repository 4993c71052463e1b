/* libFuzzer: the JSON bodies of every route, through a real server in this process
 * (harness.h). The first byte picks the route, the rest is the body; "SID" in it becomes a live
 * session's id, so inputs reach past the session lookup. Every answer must be a status with,
 * for errors, a JSON {"code":-1,"msg"} body; the server must keep answering. */
#include "fuzz.h"
#include "harness.h"

#include <stdlib.h>

static const struct {
  const char *method, *path, *ctype;
} routes[] = {
    {"POST", "/human", "application/json"},         {"POST", "/interrupt_talk", "application/json"},
    {"POST", "/is_speaking", "application/json"},   {"POST", "/set_audiotype", "application/json"},
    {"POST", "/record", "application/json"},        {"POST", "/offer", "application/json"},
    {"POST", "/api/render", "application/json"},    {"POST", "/api/avatar/task", "application/json"},
    {"POST", "/whep", "application/sdp"},           {"POST", "/human", "text/plain"},
    {"POST", "/v1/videos", "application/json"},
};
#define NROUTES (sizeof routes / sizeof *routes)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fc_fuzz_server_start();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const int r = data[0] % NROUTES;
  uint8_t *body;
  size_t n = fc_fuzz_with_session(data + 1, size - 1, &body);
  int st = fc_fuzz_request(routes[r].method, routes[r].path, routes[r].ctype, body, n);
  free(body);
  if (st >= 500 && st != 501 && st != 503) __builtin_trap(); /* a 500 is the server's fault */
  /* still serving */
  if (fc_fuzz_request("GET", "/healthz", "text/plain", (const uint8_t *)"", 0) != 200)
    __builtin_trap();
  return 0;
}
