/* Request bodies as JSON: a nesting guard in front of json-glib (see jsonin.h). */
#include "core/jsonin.h"

#include <stdio.h>
#include <string.h>

const char *fc_json_prescan(const char *d, size_t n, int max_depth) {
  static _Thread_local char why[64];
  if (!g_utf8_validate(d, (gssize)n, NULL)) return "is not UTF-8 (or holds a NUL byte)";
  int depth = 0, in_str = 0;
  for (size_t i = 0; i < n; i++) {
    char c = d[i];
    if (in_str) {
      if (c == '\\') {
        if (n - i > 5 && memcmp(d + i + 1, "u0000", 5) == 0) return "holds a \\u0000 escape";
        i++; /* the escaped character cannot end the string */
      } else if (c == '"') {
        in_str = 0;
      }
      continue;
    }
    /* Outside strings only plain JSON: json-glib also takes comments and single-quoted
     * strings, inside which brackets would escape this count and reach its recursion. */
    if (c == '"') {
      in_str = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        snprintf(why, sizeof why, "nests deeper than %d levels", max_depth);
        return why;
      }
    } else if (c == ']' || c == '}') {
      if (--depth < 0) return "closes a bracket it never opened";
    } else if (!strchr(" \t\r\n,:-+.0123456789", c) && !(c >= 'a' && c <= 'z') &&
               !(c >= 'A' && c <= 'Z')) {
      return "is not plain JSON (comments and single quotes are not taken)";
    }
  }
  return NULL;
}

JsonParser *fc_json_parse_object(const char *d, size_t n, int max_depth, JsonObject **out,
                                 char *why, size_t why_size) {
  *out = NULL;
  size_t k = 0;
  while (k < n && (d[k] == ' ' || d[k] == '\t' || d[k] == '\r' || d[k] == '\n')) k++;
  if (k == n) {
    snprintf(why, why_size, "is empty");
    return NULL;
  }
  const char *bad = fc_json_prescan(d, n, max_depth);
  if (bad) {
    snprintf(why, why_size, "%s", bad);
    return NULL;
  }
  /* json-glib is lenient in ways that do not matter here (it keeps the last of duplicate keys,
   * takes comments and single quotes): callers check every member for type and range. */
  JsonParser *p = json_parser_new_immutable();
  GError *e = NULL;
  JsonNode *root = NULL;
  if (!json_parser_load_from_data(p, d, (gssize)n, &e)) {
    /* json-glib's messages hold a position, not the input */
    snprintf(why, why_size, "does not parse (%.120s)", e ? e->message : "?");
    if (e) g_error_free(e);
  } else if (!(root = json_parser_get_root(p)) || !JSON_NODE_HOLDS_OBJECT(root)) {
    snprintf(why, why_size, "is not a JSON object");
  } else {
    *out = json_node_get_object(root);
    return p;
  }
  g_object_unref(p);
  return NULL;
}

const char *fc_json_str_member(JsonObject *o, const char *name) {
  JsonNode *n = o ? json_object_get_member(o, name) : NULL;
  return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING
             ? json_node_get_string(n)
             : NULL;
}
