/* The conversation's pure parts (src/converse): sentences out of streamed text, Server-Sent
 * Events framing, and OpenAI chat completion chunks — including what a broken provider sends.
 * The network half is tested end to end against a fake LLM (tests/api/chat_test.py). */
#include "converse/llm.h"
#include "converse/sentences.h"
#include "facecast/error.h"
#include "fc_test.h"

#include <glib.h>

/* Pushes text in pieces of `step` bytes (cutting characters anywhere) and collects sentences. */
static GPtrArray *split(const char *text, size_t step, size_t max) {
  fc_sentences *sp = fc_sentences_create(max);
  GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
  size_t n = strlen(text);
  char *s;
  for (size_t i = 0; i < n; i += step) {
    fc_sentences_push(sp, text + i, i + step > n ? n - i : step);
    while ((s = fc_sentences_next(sp, 0))) g_ptr_array_add(out, s);
  }
  while ((s = fc_sentences_next(sp, 1))) g_ptr_array_add(out, s);
  fc_sentences_destroy(sp);
  return out;
}

static int same(GPtrArray *got, const char *const *want) {
  size_t n = 0;
  while (want[n]) n++;
  int ok = got->len == n;
  for (size_t i = 0; ok && i < n; i++) ok = strcmp(g_ptr_array_index(got, i), want[i]) == 0;
  if (!ok)
    for (guint i = 0; i < got->len; i++) fprintf(stderr, "  got [%s]\n", (char *)g_ptr_array_index(got, i));
  return ok;
}

static void test_sentences(void) {
  static const char *const en[] = {"Hello there!", "Pi is 3.14, roughly.", "Is it?!",
                                   "\"Quoted.\"", "Last one without a mark", NULL};
  const char *text = "Hello there! Pi is 3.14, roughly. Is it?! \"Quoted.\" Last one without a mark";
  for (size_t step = 1; step <= 7; step++) {
    GPtrArray *g = split(text, step, 0);
    FC_CHECK(same(g, en));
    g_ptr_array_unref(g);
  }
  /* CJK marks end a sentence at once, closing brackets stay with it */
  static const char *const zh[] = {"你好。", "今天天气怎么样？", "「很好！」", "谢谢；", "再见", NULL};
  for (size_t step = 1; step <= 5; step++) {
    GPtrArray *g = split("你好。今天天气怎么样？「很好！」谢谢；再见", step, 0);
    FC_CHECK(same(g, zh));
    g_ptr_array_unref(g);
  }
  /* a newline ends one; marks alone and markdown are dropped; an ellipsis ends one */
  static const char *const misc[] = {"First line", "Second…", "Third", "Wait…", "really.", NULL};
  GPtrArray *g = split("First line\n**\n...\nSecond… Third\nWait… really.", 3, 0);
  FC_CHECK(same(g, misc));
  g_ptr_array_unref(g);
  /* the first sentence comes before the text is over (that is the point) */
  fc_sentences *sp = fc_sentences_create(0);
  fc_sentences_push(sp, "Sure. And th", 12);
  char *s = fc_sentences_next(sp, 0);
  FC_CHECK(s && strcmp(s, "Sure.") == 0);
  g_free(s);
  FC_CHECK(fc_sentences_next(sp, 0) == NULL);
  fc_sentences_reset(sp);
  FC_CHECK(fc_sentences_next(sp, 1) == NULL);
  fc_sentences_destroy(sp);
}

static void test_sentences_cap(void) {
  /* run-on text: cut at the last comma or space before the cap, never inside a character */
  GString *t = g_string_new(NULL);
  for (int i = 0; i < 60; i++) g_string_append(t, "word, ");
  GPtrArray *g = split(t->str, 5, 50);
  FC_CHECK(g->len > 6);
  for (guint i = 0; i < g->len; i++) {
    const char *x = g_ptr_array_index(g, i);
    FC_CHECK(strlen(x) <= 50 && g_utf8_validate(x, -1, NULL));
  }
  g_ptr_array_unref(g);
  g_string_truncate(t, 0);
  for (int i = 0; i < 100; i++) g_string_append(t, "长"); /* 300 bytes, no break anywhere */
  g = split(t->str, 7, 50);
  FC_CHECK(g->len >= 6);
  for (guint i = 0; i < g->len; i++) {
    const char *x = g_ptr_array_index(g, i);
    FC_CHECK(strlen(x) <= 50 && strlen(x) % 3 == 0 && g_utf8_validate(x, -1, NULL));
  }
  g_ptr_array_unref(g);
  /* invalid UTF-8 comes out valid */
  g = split("Bad \xff\xfe bytes. Fine.", 2, 0);
  FC_CHECK(g->len == 2 && g_utf8_validate(g_ptr_array_index(g, 0), -1, NULL));
  g_ptr_array_unref(g);
  g_string_free(t, TRUE);
}

static int collect(void *user, const char *data, size_t n) {
  g_ptr_array_add(user, g_strndup(data, n));
  return 0;
}

static void test_sse(void) {
  const char *in = ": keep-alive\r\n\r\ndata: one\r\n\r\ndata:two\ndata: lines\n\nevent: x\nid: 3\ndata: {\"a\":1}\n\n"
                   "retry: 5\n\ndata\n\ndata: last";
  static const char *const want[] = {"one", "two\nlines", "{\"a\":1}", "", "last", NULL};
  for (size_t step = 1; step <= 9; step++) {
    fc_sse_parser *p = fc_sse_parser_create(0);
    GPtrArray *got = g_ptr_array_new_with_free_func(g_free);
    size_t n = strlen(in);
    for (size_t i = 0; i < n; i += step)
      FC_CHECK_INT(fc_sse_parser_feed(p, in + i, i + step > n ? n - i : step, collect, got), ==, 0);
    FC_CHECK_INT(fc_sse_parser_feed(p, "\n\n", 2, collect, got), ==, 0); /* end of stream */
    FC_CHECK(same(got, want));
    g_ptr_array_unref(got);
    fc_sse_parser_destroy(p);
  }
  /* an endless line or event is refused, not buffered */
  fc_sse_parser *p = fc_sse_parser_create(1000);
  GPtrArray *got = g_ptr_array_new_with_free_func(g_free);
  char big[600];
  memset(big, 'x', sizeof big);
  FC_CHECK_INT(fc_sse_parser_feed(p, "data: ", 6, collect, got), ==, 0);
  FC_CHECK_INT(fc_sse_parser_feed(p, big, sizeof big, collect, got), ==, 0);
  FC_CHECK_INT(fc_sse_parser_feed(p, big, sizeof big, collect, got), ==, FC_EFORMAT);
  fc_sse_parser_destroy(p);
  p = fc_sse_parser_create(1000);
  int err = 0;
  for (int i = 0; i < 10 && !err; i++) {
    err = fc_sse_parser_feed(p, "data: ", 6, collect, got);
    if (!err) err = fc_sse_parser_feed(p, big, 200, collect, got);
    if (!err) err = fc_sse_parser_feed(p, "\n", 1, collect, got);
  }
  FC_CHECK_INT(err, ==, FC_EFORMAT);
  FC_CHECK_INT(got->len, ==, 0);
  g_ptr_array_unref(got);
  fc_sse_parser_destroy(p);
}

static int parse(const char *data, GString *out, int *fin) {
  return fc_llm_parse_event(data, strlen(data), out, fin);
}

static void test_chunks(void) {
  GString *out = g_string_new(NULL);
  int fin = 0;
  FC_CHECK_INT(parse("{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}", out, &fin), ==, 0);
  FC_CHECK_INT(parse("{\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}", out, &fin), ==, 0);
  FC_CHECK_INT(parse("{\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}", out, &fin), ==, 0);
  FC_CHECK(strcmp(out->str, "Hello") == 0 && !fin);
  /* reasoning models' thoughts are not spoken; usage chunks carry nothing */
  FC_CHECK_INT(parse("{\"choices\":[{\"delta\":{\"reasoning_content\":\"hmm\"}}]}", out, &fin), ==, 0);
  FC_CHECK_INT(parse("{\"choices\":[],\"usage\":{\"total_tokens\":9}}", out, &fin), ==, 0);
  FC_CHECK_INT(parse("{\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}", out, &fin), ==, 0);
  FC_CHECK(strcmp(out->str, "Hello") == 0 && fin);
  fin = 0;
  FC_CHECK_INT(parse(" [DONE] ", out, &fin), ==, 0);
  FC_CHECK(fin);
  /* a whole completion (a server that does not stream) */
  g_string_truncate(out, 0);
  fin = 0;
  FC_CHECK_INT(parse("{\"object\":\"chat.completion\",\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"All of it.\"},\"finish_reason\":\"stop\"}]}", out, &fin), ==, 0);
  FC_CHECK(strcmp(out->str, "All of it.") == 0 && fin);
  /* errors: the provider's message, one line, capped */
  FC_CHECK_INT(parse("{\"error\":{\"message\":\"Rate limit\\nreached\",\"type\":\"requests\"}}", out, &fin), ==, FC_EREMOTE);
  FC_CHECK(strstr(fc_error_detail(FC_EREMOTE), "Rate limit reached") != NULL);
  GString *longer = g_string_new("{\"error\":\"");
  for (int i = 0; i < 5000; i++) g_string_append_c(longer, 'e');
  g_string_append(longer, "\"}");
  FC_CHECK_INT(parse(longer->str, out, &fin), ==, FC_EREMOTE);
  FC_CHECK(strlen(fc_error_detail(FC_EREMOTE)) < 300);
  g_string_free(longer, TRUE);
  /* garbage */
  FC_CHECK_INT(parse("{not json", out, &fin), ==, FC_EFORMAT);
  FC_CHECK_INT(parse("[1,2]", out, &fin), ==, FC_EFORMAT);
  FC_CHECK_INT(parse("{\"choices\":7}", out, &fin), ==, FC_EFORMAT);
  FC_CHECK_INT(parse("{\"choices\":[7]}", out, &fin), ==, FC_EFORMAT);
  FC_CHECK_INT(parse("{\"choices\":[{\"delta\":{\"content\":7}}]}", out, &fin), ==, 0); /* no text */
  FC_CHECK_INT(parse("", out, &fin), ==, 0); /* an empty keep-alive */
  GString *deep = g_string_new("{\"a\":");
  for (int i = 0; i < 100000; i++) g_string_append_c(deep, '[');
  FC_CHECK_INT(parse(deep->str, out, &fin), ==, FC_EFORMAT); /* no stack overflow */
  g_string_free(deep, TRUE);
  g_string_free(out, TRUE);
}

int main(void) {
  FC_RUN(test_sentences);
  FC_RUN(test_sentences_cap);
  FC_RUN(test_sse);
  FC_RUN(test_chunks);
  return fc_test_failed_;
}
