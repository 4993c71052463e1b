/* libFuzzer: which names of a LiveTalking frame folder are frames, and their order
 * (fc_lt_frame_order). The input is the folder's names, one a line. A result must be the
 * frames by strictly increasing number, each name once; a refusal must carry a detail. */
#include "studio/ltimport.h"
#include "fuzz.h"

#include <stdlib.h>

#define MAX_NAMES 512

static long long number(const char *s) {
  long long v = 0;
  for (; *s >= '0' && *s <= '9'; s++) v = v * 10 + (*s - '0');
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1), *names[MAX_NAMES];
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  int n = 0;
  for (char *s = text; n < MAX_NAMES;) {
    char *nl = strchr(s, '\n');
    if (nl) *nl = 0;
    names[n++] = s;
    if (!nl) break;
    s = nl + 1;
  }
  int order[MAX_NAMES], count = -1, seen[MAX_NAMES] = {0};
  fc_error_clear();
  int err = fc_lt_frame_order((const char *const *)names, n, "fuzz", 64, order, &count);
  if (err) {
    fc_fuzz_refusal(err);
  } else {
    if (count < 0 || count > n || count > 64) __builtin_trap();
    for (int i = 0; i < count; i++) {
      if (order[i] < 0 || order[i] >= n || seen[order[i]]++) __builtin_trap();
      if (i > 0 && number(names[order[i - 1]]) >= number(names[order[i]])) __builtin_trap();
    }
  }
  free(text);
  return 0;
}
