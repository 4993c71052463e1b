/* libFuzzer: what a webhook receiver may answer that facecast reads (src/jobs/webhook.c): its
 * Retry-After header, in either form, against any clock (the first 8 bytes), must come out as
 * -1 or 0..FC_WEBHOOK_MAX_DELAY_S; and the signature over any body must be "t=TS,v1=" and 64
 * hex digits, the same for the same input. */
#include "fuzz.h"
#include "jobs/webhook.h"

#include <glib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8) return 0;
  gint64 now;
  memcpy(&now, data, sizeof now);
  now %= (gint64)1 << 40; /* the dates a clock may say (µs-free seconds) */
  data += 8, size -= 8;
  char *v = g_strndup((const char *)data, size); /* a header value: up to its first NUL */
  int s = fc_webhook_retry_after_s(v, now);
  if (s < -1 || s > FC_WEBHOOK_MAX_DELAY_S) __builtin_trap();
  for (int a = 0; a <= FC_WEBHOOK_ATTEMPTS; a++) {
    gint64 d = fc_webhook_delay_ms(a, 1000, s);
    if (d < -1 || d > (gint64)FC_WEBHOOK_MAX_DELAY_S * 1000 + 16000) __builtin_trap();
  }
  char *sig = fc_webhook_signature(v, now, (const char *)data, size);
  char *again = fc_webhook_signature(v, now, (const char *)data, size);
  const char *hex = strstr(sig, ",v1=");
  if (strncmp(sig, "t=", 2) || !hex || strlen(hex + 4) != 64 || strcmp(sig, again)) __builtin_trap();
  for (const char *p = hex + 4; *p; p++)
    if (!g_ascii_isxdigit(*p)) __builtin_trap();
  g_free(again);
  g_free(sig);
  g_free(v);
  return 0;
}
