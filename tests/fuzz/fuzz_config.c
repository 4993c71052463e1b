/* libFuzzer: settings files (core/config.h): the input as a YAML settings file and as a .env
 * file; every item must be a named key with a value, and every key's LiveTalking name looked up
 * (as the command line does with each). */
#include "core/config.h"
#include "fuzz.h"

#include <glib.h>

static void walk(GPtrArray *items, int env) {
  for (guint i = 0; i < items->len; i++) {
    const fc_config_item *it = items->pdata[i];
    if (!it->key || !it->key[0] || !it->value || it->line < 1) __builtin_trap();
    if (env && (strchr(it->key, '=') || strchr(it->key, ' '))) __builtin_trap();
    (void)fc_config_lt_alias(it->key);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  GPtrArray *items = NULL;
  int err = fc_config_parse_yaml((const char *)data, size, "fuzz.yaml", &items);
  if (err) fc_fuzz_refusal(err);
  else walk(items, 0), g_ptr_array_unref(items);
  err = fc_config_parse_dotenv((const char *)data, size, "fuzz.env", &items);
  if (err) fc_fuzz_refusal(err);
  else walk(items, 1), g_ptr_array_unref(items);
  return 0;
}
