/* libFuzzer: what an LLM provider may send (src/converse): the bytes as a Server-Sent Events
 * stream in two pieces cut where the first byte says, each event's data as a completion chunk,
 * and the text that comes out of them through the sentence splitter. A refusal must be an input
 * error (or FC_EREMOTE: the provider said it failed) with a detail; every sentence must be valid
 * UTF-8 within the cap. */
#include "converse/llm.h"
#include "converse/sentences.h"
#include "fuzz.h"

#include <glib.h>

typedef struct {
  GString *text;
  fc_sentences *sp;
} sink;

static void drain(sink *k, int end) {
  char *s;
  while ((s = fc_sentences_next(k->sp, end))) {
    /* 64 bytes of input; an invalid byte comes out as U+FFFD (3 bytes) */
    if (!*s || strlen(s) > 3 * 64 || !g_utf8_validate(s, -1, NULL)) __builtin_trap();
    g_free(s);
  }
}

static int on_event(void *user, const char *data, size_t n) {
  sink *k = user;
  int fin = 0;
  g_string_truncate(k->text, 0);
  int err = fc_llm_parse_event(data, n, k->text, &fin);
  if (err == FC_EREMOTE) {
    if (!fc_error_detail(err)[0]) __builtin_trap();
    return 0;
  }
  if (err) {
    fc_fuzz_refusal(err);
    return 0;
  }
  fc_sentences_push(k->sp, k->text->str, k->text->len);
  drain(k, 0);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  size_t cut = data[0] % size;
  data++, size--;
  if (cut > size) cut = size;
  sink k = {g_string_new(NULL), fc_sentences_create(64)};
  fc_sse_parser *p = fc_sse_parser_create(2048);
  int err = fc_sse_parser_feed(p, (const char *)data, cut, on_event, &k);
  if (!err) err = fc_sse_parser_feed(p, (const char *)data + cut, size - cut, on_event, &k);
  if (!err) err = fc_sse_parser_feed(p, "\n\n", 2, on_event, &k);
  if (err) fc_fuzz_refusal(err);
  drain(&k, 1);
  /* and the whole input as one non-streamed answer */
  int fin = 0;
  g_string_truncate(k.text, 0);
  err = fc_llm_parse_event((const char *)data, size, k.text, &fin);
  if (err && err != FC_EREMOTE) fc_fuzz_refusal(err);
  fc_sse_parser_destroy(p);
  fc_sentences_destroy(k.sp);
  g_string_free(k.text, TRUE);
  return 0;
}
