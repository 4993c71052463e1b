/* An OpenAI-compatible chat client: POST {base}/chat/completions with "stream": true, the
 * answer read as Server-Sent Events while the model writes it, each piece of text handed on at
 * once (so speech can start after the first sentence, not after the whole answer).
 *
 * Threads: a fc_llm belongs to one GMainContext (the server's main loop); create, stream and
 * cancel there, and the callbacks run there. Ownership and callbacks follow libuv's rule: when
 * fc_llm_stream returns NULL no callback is ever called; otherwise exactly one `done` comes
 * unless fc_llm_cancel is called first, after which nothing more is called at all (and the
 * connection is closed, so a paying API stops writing). A server that ignores "stream" and
 * answers one JSON completion is read too. Answers past max_answer bytes are cut there (the call
 * ends as if the model had stopped). Nothing here logs the API key. */
#ifndef FC_LLM_H
#define FC_LLM_H

#include <glib.h>
#include <stddef.h>

typedef struct fc_llm fc_llm;
typedef struct fc_llm_call fc_llm_call;

typedef struct fc_llm_params {
  const char *base_url; /* "http://127.0.0.1:8000/v1": …/chat/completions is appended */
  const char *api_key;  /* sent as "Authorization: Bearer KEY"; NULL or "": none */
  const char *model;    /* NULL: "gpt-4o-mini" */
  int timeout_s;        /* connect and between two reads; 0 = 30 */
  int max_tokens;       /* 0: not sent */
  size_t max_answer;    /* bytes of answer text kept; 0 = 16 KiB */
} fc_llm_params;

/* One message of the conversation ("system", "user" or "assistant"). */
typedef struct fc_llm_msg {
  const char *role, *content;
} fc_llm_msg;

typedef struct fc_llm_cbs {
  /* A piece of the answer (UTF-8, not NUL-terminated; may cut a character in two). */
  void (*text)(void *user, const char *text, size_t n);
  /* The end: 0 when the model finished (or the answer reached max_answer), else FC_EREMOTE
   * (unreachable, HTTP error, malformed stream, timeout) with detail, a one-line message. */
  void (*done)(void *user, int err, const char *detail);
} fc_llm_cbs;

/* FC_EINVAL for a base URL that is not http(s). ctx: the context the calls run on. */
fc_llm *fc_llm_create(const fc_llm_params *p, GMainContext *ctx, int *err);
/* Cancels the calls still running (their callbacks are not called) and frees the client. */
void fc_llm_destroy(fc_llm *l);

/* Starts a call with the conversation msgs[0..n). NULL (with *err) when it cannot start. */
fc_llm_call *fc_llm_stream(fc_llm *l, const fc_llm_msg *msgs, size_t n, const fc_llm_cbs *cbs,
                           void *user, int *err);
/* Stops the call and closes its connection; no callback of it runs after this. Only for a
 * call whose `done` has not come: after `done` the call is gone. */
void fc_llm_cancel(fc_llm_call *c);

/* The parsing, pure (also for the fuzzer): one SSE event's data of a streamed completion.
 * Appends the delta's text to out; *finished is set by "[DONE]" or a finish_reason. Returns 0,
 * FC_EREMOTE for an {"error": …} event (detail: its message), FC_EFORMAT for anything else that
 * is not a completion chunk. Also takes a whole non-streamed completion (message.content). */
int fc_llm_parse_event(const char *data, size_t n, GString *out, int *finished);

/* Server-Sent Events framing: bytes in, each event's data (its "data:" lines joined by "\n")
 * out through cb; other fields and comments are skipped. An event over max bytes is an error
 * (FC_EFORMAT) and so is a line over max. Pure. */
typedef struct fc_sse_parser fc_sse_parser;
fc_sse_parser *fc_sse_parser_create(size_t max);
void fc_sse_parser_destroy(fc_sse_parser *p);
/* cb returns non-zero to stop (that value is returned). */
int fc_sse_parser_feed(fc_sse_parser *p, const char *data, size_t n,
                       int (*cb)(void *user, const char *data, size_t n), void *user);

#endif
