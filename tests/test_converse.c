/* The conversation's pure parts (src/converse): sentences out of streamed text, Server-Sent
 * Events framing, and OpenAI chat completion chunks — including what a broken provider sends.
 * The network half is tested end to end against a fake LLM (tests/api/chat_test.py). */
#include "converse/llm.h"
#include "converse/sentences.h"
#include "converse/vad.h"
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

/* A signal: noise at noise_db everywhere, a 200 Hz tone with syllable-like bursts at speech_db
 * in [a, b) seconds. */
static void signal_fill(int16_t *out, size_t n, double noise_db, double speech_db,
                        const double (*spans)[2], int n_spans) {
  double na = 32768 * pow(10, noise_db / 20) * 1.7, sa = 32768 * pow(10, speech_db / 20) * 1.41;
  uint32_t seed = 1;
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525 + 1013904223;
    double t = i / 16000.0, v = na * ((seed >> 8) / 16777216.0 - 0.5);
    for (int k = 0; k < n_spans; k++)
      if (t >= spans[k][0] && t < spans[k][1]) v += sa * sin(2 * M_PI * 200 * t);
    out[i] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
  }
}

typedef struct vad_ev {
  int kind;
  double t;
} vad_ev;

/* Feeds in 60 ms pieces (the browser's), collecting events. */
static int vad_run(fc_vad *v, const int16_t *pcm, size_t n, vad_ev *ev, int cap) {
  int k = 0;
  for (size_t at = 0; at < n;) {
    size_t piece = n - at < 960 ? n - at : 960, used;
    int64_t when;
    int e = fc_vad_feed(v, pcm + at, piece, &used, &when);
    at += used;
    if (e && k < cap) ev[k++] = (vad_ev){e, when / 16000.0};
  }
  return k;
}

static void test_vad(void) {
  size_t n = 16000 * 5;
  int16_t *pcm = malloc(n * sizeof *pcm);
  vad_ev ev[8];
  /* speech 1.0–2.0 s, a 300 ms pause (shorter than the hangover), 2.3–2.8 s: one segment */
  const double two[][2] = {{1.0, 2.0}, {2.3, 2.8}};
  signal_fill(pcm, n, -60, -20, two, 2);
  fc_vad *v = fc_vad_create(NULL);
  int k = vad_run(v, pcm, n, ev, 8);
  FC_CHECK_INT(k, ==, 2);
  FC_CHECK(k >= 1 && ev[0].kind == FC_VAD_START && fabs(ev[0].t - 1.0) <= 0.04);
  FC_CHECK(k >= 2 && ev[1].kind == FC_VAD_END && fabs(ev[1].t - 2.8) <= 0.04);
  FC_CHECK(!fc_vad_speaking(v) && fc_vad_position(v) == (int64_t)n);
  fc_vad_destroy(v);
  /* a pause longer than the hangover: two segments; a 40 ms click: none */
  const double gaps[][2] = {{0.5, 1.0}, {1.02, 1.06}, {2.0, 2.5}};
  signal_fill(pcm, n, -60, -20, gaps, 3);
  const double apart[][2] = {{0.5, 1.0}, {2.0, 2.5}, {3.0, 3.04}};
  signal_fill(pcm, n, -60, -20, apart, 3);
  v = fc_vad_create(NULL);
  k = vad_run(v, pcm, n, ev, 8);
  FC_CHECK_INT(k, ==, 4);
  FC_CHECK(k == 4 && ev[2].kind == FC_VAD_START && fabs(ev[2].t - 2.0) <= 0.04 &&
           ev[3].kind == FC_VAD_END && fabs(ev[3].t - 2.5) <= 0.04);
  fc_vad_destroy(v);
  /* steady noise at -35 dBFS (an open window): speech 15 dB above it is found, the noise not */
  const double one[][2] = {{2.0, 3.0}};
  signal_fill(pcm, n, -35, -20, one, 1);
  v = fc_vad_create(NULL);
  k = vad_run(v, pcm, n, ev, 8);
  FC_CHECK_INT(k, ==, 2);
  FC_CHECK(k == 2 && fabs(ev[0].t - 2.0) <= 0.06 && fabs(ev[1].t - 3.0) <= 0.06);
  fc_vad_destroy(v);
  /* a segment is cut at max_ms; onset and hangover are settings */
  const double longs[][2] = {{0.5, 4.5}};
  signal_fill(pcm, n, -60, -20, longs, 1);
  fc_vad_params p = {.max_ms = 1000, .hangover_ms = 200, .onset_ms = 40};
  v = fc_vad_create(&p);
  k = vad_run(v, pcm, n, ev, 8);
  FC_CHECK(k >= 2 && ev[1].kind == FC_VAD_END && fabs(ev[1].t - 1.5) <= 0.04);
  fc_vad_destroy(v);
  free(pcm);
}

int main(void) {
  FC_RUN(test_vad);
  FC_RUN(test_sentences);
  FC_RUN(test_sentences_cap);
  FC_RUN(test_sse);
  FC_RUN(test_chunks);
  return fc_test_failed_;
}
