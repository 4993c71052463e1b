/* libFuzzer: WebSockets through a real server in this process (harness.h): the first byte
 * picks the route (a live session's microphone lip-synced, /ws/audio; heard for voice chat,
 * ?mode=echo: the VAD and ASR; LiveTalking's ASR page protocol, /api/asr; the media stream,
 * /ws/stream, whose client commands are JSON text), the rest is written raw, as frames, to a
 * fresh upgraded connection; then the server must still answer. The stream's command parser
 * also gets the rest as one message, as it is (frames the fuzzer masks wrongly never reach
 * it through the server). */
#include "fuzz.h"
#include "harness.h"
#include "server/internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  fc_fuzz_server_start();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  int route = data[0] % 4;
  data++, size--;
  if (route == 3) {
    char why[160];
    why[0] = 0;
    int cmd = fc_wsstream_parse_client((const char *)data, size, why, sizeof why);
    if (cmd != FC_WSS_CMD_KEYFRAME && (cmd != -1 || !why[0])) __builtin_trap(); /* no reason */
  }
  int fd = fc_fuzz_connect();
  char req[512], path[128];
  if (route == 3)
    snprintf(path, sizeof path, "/ws/stream");
  else if (route == 2)
    snprintf(path, sizeof path, "/api/asr");
  else
    snprintf(path, sizeof path, "/ws/audio?sessionid=%s%s", fc_fuzz_session(),
             route ? "&mode=echo" : "");
  int k = snprintf(req, sizeof req,
                   "GET %s HTTP/1.1\r\nHost: fuzz\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "Sec-WebSocket-Version: 13\r\n\r\n",
                   path);
  if (send(fd, req, (size_t)k, MSG_NOSIGNAL) != k) __builtin_trap();
  char buf[4096];
  size_t got = 0;
  for (int i = 0; i < 5000 && !memmem(buf, got, "\r\n\r\n", 4); i++) {
    fc_fuzz_pump(0);
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 1) > 0) {
      ssize_t r = recv(fd, buf + got, sizeof buf - got, 0);
      if (r < 0 && errno == EINTR) continue; /* libFuzzer's SIGALRM */
      if (r <= 0) break;
      got += (size_t)r;
    }
  }
  if (got < 12 || memcmp(buf, "HTTP/1.1 101", 12) != 0) __builtin_trap(); /* upgrade refused */
  /* the input as it comes, in pieces the server reads between */
  for (size_t off = 0; off < size;) {
    size_t piece = size - off < 4096 ? size - off : 4096;
    if (send(fd, data + off, piece, MSG_NOSIGNAL | MSG_DONTWAIT) <= 0) break;
    off += piece;
    fc_fuzz_pump(0);
  }
  for (int i = 0; i < 8; i++) fc_fuzz_pump(0); /* the server reads what is left */
  fc_fuzz_close_reset(fd);
  fc_fuzz_pump(0);
  if (fc_fuzz_request("GET", "/healthz", "text/plain", (const uint8_t *)"", 0) != 200)
    __builtin_trap();
  return 0;
}
