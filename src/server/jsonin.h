/* Request bodies as JSON (jsonin.c): json-glib behind a guard. json-glib parses recursively on
 * the calling thread (the main loop), so a body of 75,000 '[' crashes it; the guard scans the
 * text first and refuses nesting deeper than FC_JSON_MAX_DEPTH. Pure: no libsoup, fuzzed by
 * tests/fuzz/fuzz_http.c. */
#ifndef FC_SERVER_JSONIN_H
#define FC_SERVER_JSONIN_H

#include <json-glib/json-glib.h>
#include <stddef.h>

#define FC_JSON_MAX_DEPTH 32

/* 1 when no array/object in d[0..n) opens deeper than max_depth (strings skipped). */
int fc_json_depth_ok(const char *d, size_t n, int max_depth);
/* The body as a JSON object, with *parser holding it (g_object_unref it); NULL with a one-line
 * reason in why (no input quoted) when it is empty, too deep, malformed or not an object. */
JsonObject *fc_json_parse_object(const char *d, size_t n, JsonParser **parser, char *why,
                                 size_t why_size);

#endif
