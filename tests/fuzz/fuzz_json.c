/* libFuzzer: request bodies as JSON (the guard in front of json-glib, core/jsonin.h). */
#include "core/jsonin.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  JsonObject *o = NULL;
  char why[160] = "";
  JsonParser *p = fc_json_parse_object((const char *)data, size, FC_JSON_MAX_DEPTH, &o, why, sizeof why);
  if (o) {
    /* walk it as the routes do */
    GList *members = json_object_get_members(o);
    for (GList *l = members; l; l = l->next) {
      JsonNode *n = json_object_get_member(o, l->data);
      if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING)
        (void)json_node_get_string(n);
    }
    g_list_free(members);
    g_object_unref(p);
  } else if (!why[0]) {
    __builtin_trap();
  }
  return 0;
}
