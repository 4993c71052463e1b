/* libFuzzer: the fleet's node records as read back from Redis (server/fleet.h): any bytes a
 * Redis holding other software's keys, or an older facecast's, may return for
 * facecast:fleet:node:ID. A record that parses has what routing relies on (a hex id that fits,
 * an http(s) URL without spaces or line breaks, free places within 0..max); a refusal is
 * FC_EFORMAT with a detail. */
#include "fuzz.h"
#include "server/fleet.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fc_fleet_node *n = NULL;
  int err = fc_fleet_node_parse((const char *)data, size, &n);
  if (err) {
    if (n || err != FC_EFORMAT) __builtin_trap();
    fc_fuzz_refusal(err);
    return 0;
  }
  if (!n || !n->id[0] || strlen(n->id) > 39 || strspn(n->id, "0123456789abcdef") != strlen(n->id))
    __builtin_trap();
  if (strncmp(n->url, "http://", 7) && strncmp(n->url, "https://", 8)) __builtin_trap();
  if (strpbrk(n->url, " \r\n\t") || n->free_places < 0 || n->free_places > n->max_sessions ||
      n->sessions < 0)
    __builtin_trap();
  fc_fleet_node_free(n);
  return 0;
}
