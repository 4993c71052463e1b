/* A conversation (chat.h): history, one turn at a time, the answer into sentences. */
#include "converse/chat.h"
#include "converse/sentences.h"
#include "facecast/error.h"

#include <string.h>

typedef struct msg {
  char *role; /* static strings */
  char *content;
} msg;

struct fc_chat {
  fc_llm *llm;
  fc_chat_cbs cbs;
  void *user;
  char *system;
  int max_messages;
  GArray *history; /* of msg, oldest first (no system prompt) */
  fc_sentences *split;
  /* the running turn */
  fc_llm_call *call;
  uint32_t turn, next_turn;
  GString *answer; /* its text so far, for the history */
  int64_t t0;
  fc_chat_turn_info info;
};

static void msg_clear(gpointer p) { g_free(((msg *)p)->content); }

fc_chat *fc_chat_create(fc_llm *llm, const fc_chat_params *p, const fc_chat_cbs *cbs, void *user) {
  fc_chat *c = g_new0(fc_chat, 1);
  c->llm = llm;
  c->cbs = *cbs;
  c->user = user;
  c->system = p->system && *p->system ? g_strdup(p->system) : NULL;
  c->max_messages = p->max_messages > 0 ? p->max_messages : 20;
  c->history = g_array_new(FALSE, TRUE, sizeof(msg));
  g_array_set_clear_func(c->history, msg_clear);
  c->split = fc_sentences_create(p->max_sentence);
  c->answer = g_string_new(NULL);
  c->next_turn = 1;
  return c;
}

static void remember(fc_chat *c, const char *role, const char *content) {
  msg m = {(char *)role, g_strdup(content)};
  g_array_append_val(c->history, m);
  /* whole exchanges go: a user message first, its answer with it */
  while ((int)c->history->len > c->max_messages) g_array_remove_index(c->history, 0);
  while (c->history->len && strcmp(g_array_index(c->history, msg, 0).role, "user") != 0)
    g_array_remove_index(c->history, 0);
}

/* Ends the running turn's bookkeeping: its answer (as far as it came) into the history. */
static void end_turn(fc_chat *c) {
  if (c->answer->len) remember(c, "assistant", c->answer->str);
  g_string_truncate(c->answer, 0);
  fc_sentences_reset(c->split);
  c->call = NULL;
  c->turn = 0;
}

uint32_t fc_chat_cancel(fc_chat *c) {
  uint32_t t = c->turn;
  if (!c->call) return 0;
  fc_llm_cancel(c->call);
  end_turn(c);
  return t;
}

void fc_chat_destroy(fc_chat *c) {
  if (!c) return;
  fc_chat_cancel(c);
  g_array_free(c->history, TRUE);
  fc_sentences_destroy(c->split);
  g_string_free(c->answer, TRUE);
  g_free(c->system);
  g_free(c);
}

uint32_t fc_chat_turn(const fc_chat *c) { return c->turn; }
int fc_chat_history_len(const fc_chat *c) { return (int)c->history->len; }

static int64_t since(const fc_chat *c) {
  int64_t d = g_get_monotonic_time() - c->t0;
  return d > 0 ? d : 1;
}

/* Hands on every sentence that is whole; end: the answer is over. */
static void flush(fc_chat *c, int end) {
  uint32_t t = c->turn;
  char *s;
  while (c->turn == t && (s = fc_sentences_next(c->split, end))) {
    if (!c->info.first_sentence_us) c->info.first_sentence_us = since(c);
    c->info.sentences++;
    c->cbs.sentence(c->user, t, s); /* may cancel the turn: then the loop stops */
    g_free(s);
  }
}

static void on_text(void *user, const char *text, size_t n) {
  fc_chat *c = user;
  if (!c->info.first_token_us) c->info.first_token_us = since(c);
  g_string_append_len(c->answer, text, (gssize)n);
  fc_sentences_push(c->split, text, n);
  flush(c, 0);
}

static void on_done(void *user, int err, const char *detail) {
  fc_chat *c = user;
  uint32_t t = c->turn;
  c->call = NULL; /* gone with this callback */
  flush(c, !err); /* a cut answer's unfinished last sentence is not spoken */
  if (c->turn != t) return; /* a sentence callback started another turn or cancelled this one */
  c->info.done_us = since(c);
  fc_chat_turn_info info = c->info;
  char *why = err ? g_strdup(detail ? detail : fc_strerror(err)) : NULL;
  end_turn(c);
  c->cbs.done(c->user, t, err, why, &info);
  g_free(why);
}

int fc_chat_say(fc_chat *c, const char *text, uint32_t *turn) {
  if (!text || !*text) return fc_error_set(FC_EINVAL, "nothing to say");
  fc_chat_cancel(c);
  /* the conversation as the LLM reads it: system, history, the new message */
  size_t n = 0;
  fc_llm_msg *m = g_new(fc_llm_msg, c->history->len + 2);
  if (c->system) m[n++] = (fc_llm_msg){"system", c->system};
  for (guint i = 0; i < c->history->len; i++) {
    msg *h = &g_array_index(c->history, msg, i);
    m[n++] = (fc_llm_msg){h->role, h->content};
  }
  m[n++] = (fc_llm_msg){"user", text};
  static const fc_llm_cbs cbs = {on_text, on_done};
  int err = 0;
  c->t0 = g_get_monotonic_time();
  memset(&c->info, 0, sizeof c->info);
  c->call = fc_llm_stream(c->llm, m, n, &cbs, c, &err);
  g_free(m);
  if (!c->call) return err;
  remember(c, "user", text);
  c->turn = c->next_turn++;
  if (!c->next_turn) c->next_turn = 1;
  *turn = c->turn;
  return 0;
}

fc_chat_turn_info fc_chat_turn_progress(const fc_chat *c) {
  fc_chat_turn_info none = {0};
  return fc_chat_turn(c) ? c->info : none;
}
