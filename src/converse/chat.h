/* A conversation with an LLM (llm.h), one per session: its history, the turn running now, and
 * the answer cut into sentences (sentences.h) handed on the moment each is whole, so the voice
 * starts after the first sentence instead of after the whole answer.
 *
 * Threads: one GMainContext, the LLM client's; everything here runs and calls back there.
 * A turn ends with exactly one `done` unless it is cancelled (fc_chat_cancel, a new turn, or
 * destroying the chat), after which nothing of it is called. History keeps the system prompt,
 * then user and assistant messages, oldest dropped first beyond max_messages; an interrupted
 * answer is kept as far as it came. */
#ifndef FC_CHAT_H
#define FC_CHAT_H

#include "converse/llm.h"

#include <stdint.h>

typedef struct fc_chat fc_chat;

typedef struct fc_chat_params {
  const char *system;  /* the system prompt; NULL/"" none */
  int max_messages;    /* user and assistant messages kept; 0 = 20 */
  size_t max_sentence; /* bytes (sentences.h); 0 = 300 */
} fc_chat_params;

/* When a turn's milestones came, in µs after fc_chat_say (0: did not happen). */
typedef struct fc_chat_turn_info {
  int64_t first_token_us, first_sentence_us, done_us;
  int sentences;
} fc_chat_turn_info;

typedef struct fc_chat_cbs {
  /* A whole sentence of turn `turn`, in order (text valid during the call). */
  void (*sentence)(void *user, uint32_t turn, const char *text);
  /* The turn is over: err 0, or FC_EREMOTE with a one-line detail (sentences already handed on
   * stay handed on). */
  void (*done)(void *user, uint32_t turn, int err, const char *detail,
               const fc_chat_turn_info *info);
} fc_chat_cbs;

/* The chat uses llm (not owned: it must outlive the chat). */
fc_chat *fc_chat_create(fc_llm *llm, const fc_chat_params *p, const fc_chat_cbs *cbs, void *user);
void fc_chat_destroy(fc_chat *c);

/* Starts a turn answering text (a running one is cancelled first). Its number in *turn (1, 2,
 * ...). FC_EINVAL for empty text; FC_EREMOTE etc. when the call cannot start (then no done). */
int fc_chat_say(fc_chat *c, const char *text, uint32_t *turn);
/* Cancels the running turn: its LLM connection is closed, no more sentences. Returns the turn's
 * number, 0 when none was running. */
uint32_t fc_chat_cancel(fc_chat *c);
/* The turn running now (0: none). */
uint32_t fc_chat_turn(const fc_chat *c);
/* The running turn's milestones so far (all 0 when none runs). */
fc_chat_turn_info fc_chat_turn_progress(const fc_chat *c);
/* History length in messages (system prompt excluded). */
int fc_chat_history_len(const fc_chat *c);

#endif
