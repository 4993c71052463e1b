/* JSON from outside (jsonin.c): json-glib behind a guard. json-glib recurses once per nesting
 * level on the calling thread (the server's main loop), so 75,000 '[' overflow its stack, and it
 * reads a "\u0000" escape as the end of a string; the guard scans the text first. Used by the
 * HTTP routes and the pack reader; fuzzed by tests/fuzz/fuzz_json.c. */
#ifndef FC_CORE_JSONIN_H
#define FC_CORE_JSONIN_H

#include <json-glib/json-glib.h>
#include <stddef.h>

#define FC_JSON_MAX_DEPTH 32

/* NULL when d[0..n) is UTF-8 without NULs, nests no deeper than max_depth and holds no
 * "\u0000" escape; else the reason ("nests deeper than 32 levels", ...). */
const char *fc_json_prescan(const char *d, size_t n, int max_depth);
/* d[0..n) as a JSON object: the parser that holds it (g_object_unref it) and the object in
 * *out; NULL with the reason in why ("is empty", "nests deeper than 32 levels", "does not parse
 * (line 1: ...)", "is not a JSON object": no input quoted, a subject to put before it). */
JsonParser *fc_json_parse_object(const char *d, size_t n, int max_depth, JsonObject **out,
                                 char *why, size_t why_size);

/* o's member `name` when it is a string (borrowed from o), else NULL (o may be NULL). */
const char *fc_json_str_member(JsonObject *o, const char *name);

#endif
