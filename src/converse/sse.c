/* The pure half of the LLM client (llm.h): Server-Sent Events framing and the completion chunk
 * JSON. Both take anything a remote service may send — cut lines, CR/LF mixtures, huge events,
 * errors in the middle of a stream — and are fuzzed (tests/fuzz/fuzz_llm.c). */
#include "converse/llm.h"
#include "core/jsonin.h"
#include "facecast/error.h"

#include <string.h>

struct fc_sse_parser {
  GString *line, *data;
  size_t max;
  int has_data, after_cr;
};

fc_sse_parser *fc_sse_parser_create(size_t max) {
  fc_sse_parser *p = g_new0(fc_sse_parser, 1);
  p->line = g_string_new(NULL);
  p->data = g_string_new(NULL);
  p->max = max ? max : 1 << 20;
  return p;
}

void fc_sse_parser_destroy(fc_sse_parser *p) {
  if (!p) return;
  g_string_free(p->line, TRUE);
  g_string_free(p->data, TRUE);
  g_free(p);
}

/* One whole line: a field, a comment, or the blank line that ends an event. */
static int take_line(fc_sse_parser *p, int (*cb)(void *, const char *, size_t), void *user) {
  GString *l = p->line;
  int r = 0;
  if (l->len == 0) {
    if (p->has_data) {
      GString *d = p->data; /* the last data line's newline is not the event's */
      if (d->len && d->str[d->len - 1] == '\n') g_string_truncate(d, d->len - 1);
      r = cb(user, p->data->str, p->data->len);
    }
    g_string_truncate(p->data, 0);
    p->has_data = 0;
    return r;
  }
  if (l->str[0] == ':') goto done; /* a comment (keep-alives) */
  const char *colon = memchr(l->str, ':', l->len);
  size_t name = colon ? (size_t)(colon - l->str) : l->len;
  if (name == 4 && memcmp(l->str, "data", 4) == 0) {
    const char *v = colon ? colon + 1 : l->str + l->len;
    if (v < l->str + l->len && *v == ' ') v++;
    size_t vn = (size_t)(l->str + l->len - v);
    if (p->data->len + vn + 1 > p->max) {
      r = fc_error_set(FC_EFORMAT, "an event of more than %zu bytes", p->max);
      goto done;
    }
    g_string_append_len(p->data, v, (gssize)vn);
    g_string_append_c(p->data, '\n');
    p->has_data = 1;
  }
done:
  g_string_truncate(l, 0);
  return r;
}

int fc_sse_parser_feed(fc_sse_parser *p, const char *data, size_t n,
                       int (*cb)(void *user, const char *data, size_t n), void *user) {
  for (size_t i = 0; i < n;) {
    char c = data[i];
    if (c == '\n' && p->after_cr) { /* the LF of a CRLF */
      p->after_cr = 0;
      i++;
      continue;
    }
    p->after_cr = 0;
    if (c == '\r' || c == '\n') {
      p->after_cr = c == '\r';
      i++;
      int r = take_line(p, cb, user);
      if (r) return r;
      continue;
    }
    /* the rest of this line in one append */
    size_t j = i;
    while (j < n && data[j] != '\r' && data[j] != '\n') j++;
    if (p->line->len + (j - i) > p->max)
      return fc_error_set(FC_EFORMAT, "a line of more than %zu bytes", p->max);
    g_string_append_len(p->line, data + i, (gssize)(j - i));
    i = j;
  }
  return 0;
}

/* The "message" of an error object or string, for one line in a log (capped, no newlines). */
static int remote_error(JsonNode *e) {
  const char *m = NULL;
  if (JSON_NODE_HOLDS_OBJECT(e)) {
    JsonNode *mn = json_object_get_member(json_node_get_object(e), "message");
    if (mn && JSON_NODE_HOLDS_VALUE(mn) && json_node_get_value_type(mn) == G_TYPE_STRING)
      m = json_node_get_string(mn);
  } else if (JSON_NODE_HOLDS_VALUE(e) && json_node_get_value_type(e) == G_TYPE_STRING) {
    m = json_node_get_string(e);
  }
  char buf[201];
  g_strlcpy(buf, m ? m : "(no message)", sizeof buf);
  for (char *q = buf; *q; q++)
    if (*q == '\n' || *q == '\r') *q = ' ';
  return fc_error_set(FC_EREMOTE, "the LLM answered an error: %s", buf);
}

int fc_llm_parse_event(const char *data, size_t n, GString *out, int *finished) {
  while (n && (*data == ' ' || *data == '\t' || *data == '\n')) data++, n--;
  while (n && (data[n - 1] == ' ' || data[n - 1] == '\t' || data[n - 1] == '\n')) n--;
  if (n == 0) return 0; /* an empty event: a keep-alive */
  if (n == 6 && memcmp(data, "[DONE]", 6) == 0) {
    *finished = 1;
    return 0;
  }
  JsonObject *o = NULL;
  char why[160];
  JsonParser *jp = fc_json_parse_object(data, n, FC_JSON_MAX_DEPTH, &o, why, sizeof why);
  if (!jp) return fc_error_set(FC_EFORMAT, "an event of the LLM's stream %s", why);
  int err = 0;
  JsonNode *e = json_object_get_member(o, "error");
  JsonNode *ch = json_object_get_member(o, "choices");
  if (e && !JSON_NODE_HOLDS_NULL(e)) {
    err = remote_error(e);
  } else if (ch && JSON_NODE_HOLDS_ARRAY(ch)) {
    JsonArray *a = json_node_get_array(ch);
    JsonNode *c0 = json_array_get_length(a) ? json_array_get_element(a, 0) : NULL;
    if (c0 && JSON_NODE_HOLDS_OBJECT(c0)) {
      JsonObject *c = json_node_get_object(c0);
      JsonNode *d = json_object_get_member(c, "delta");
      if (!d || !JSON_NODE_HOLDS_OBJECT(d)) d = json_object_get_member(c, "message");
      const char *text =
          d && JSON_NODE_HOLDS_OBJECT(d) ? fc_json_str_member(json_node_get_object(d), "content") : NULL;
      if (text) g_string_append(out, text);
      if (fc_json_str_member(c, "finish_reason")) *finished = 1;
    } else if (c0) {
      err = fc_error_set(FC_EFORMAT, "the LLM's choices[0] is not an object");
    }
  } else if (ch && !JSON_NODE_HOLDS_NULL(ch)) {
    err = fc_error_set(FC_EFORMAT, "the LLM's 'choices' is not an array");
  }
  /* an object without choices (usage, keep-alive) carries no text */
  g_object_unref(jp);
  return err;
}
