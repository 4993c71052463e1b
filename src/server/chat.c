/* Conversation on a session (/human type=chat): the session's chat (src/converse/chat.h) runs
 * on the main loop; each sentence of the answer goes, the moment it is whole, to the session's
 * queue of sentences (say.c), which one worker job at a time speaks in order, so the avatar
 * starts speaking after the LLM's first sentence while the rest is still being written.
 *
 * Cancelling (interrupt, a new turn, closing) must stop everything of the turn at once: the
 * LLM's connection is closed (fc_chat_cancel), queued sentences are dropped, a TTS request
 * running is cancelled (its connection closed), and chat_gen is bumped under s->lock so that
 * audio being made right now is not pushed after the interrupt cut the stream (the worker
 * checks chat_gen under the same lock when it pushes). */
#include "converse/chat.h"
#include "facecast/error.h"
#include "server/internal.h"

#include <stdio.h>
#include <string.h>

/* The default system prompt: answers that sound right spoken. */
#define DEFAULT_SYSTEM                                                                          \
  "You are a friendly digital human in a spoken conversation. Answer briefly, in one to three " \
  "short sentences, in the language the user speaks. No markdown, lists or emoji."

int fc_server_llm_start(fc_server *srv, int *err) {
  if (!srv->p.llm_url) return 0;
  fc_llm_params lp = {.base_url = srv->p.llm_url,
                      .api_key = srv->p.llm_key,
                      .model = srv->p.llm_model,
                      .timeout_s = srv->p.llm_timeout_s};
  if (!(srv->llm = fc_llm_create(&lp, srv->ctx, err))) return *err;
  g_message("chat: LLM at %s, model %s%s", srv->p.llm_url,
            srv->p.llm_model ? srv->p.llm_model : "gpt-4o-mini",
            srv->p.llm_key && *srv->p.llm_key ? ", with an API key" : ", no API key");
  return 0;
}

/* SSE "chat" events: {"sessionid", "turn", "status", ...extra} */
static void chat_event(fc_session *s, uint32_t turn, const char *status, const char *extra) {
  char *ev = g_strdup_printf("{\"sessionid\":\"%s\",\"turn\":%u,\"status\":\"%s\"%s%s}", s->id,
                             turn, status, extra ? "," : "", extra ? extra : "");
  fc_session_send_sse_json(s, "chat", ev);
  g_free(ev);
}

static void on_sentence(void *user, uint32_t turn, const char *text) {
  fc_session *s = user;
  fc_session_say_line(s, turn, text, s->chat_tts);
  char *q = fc_http_json_quote(text);
  char *extra = g_strdup_printf("\"text\":%s", q);
  chat_event(s, turn, "sentence", extra);
  g_free(extra);
  g_free(q);
}

static void on_done(void *user, uint32_t turn, int err, const char *detail,
                    const fc_chat_turn_info *info) {
  fc_session *s = user;
  char *q = err ? fc_http_json_quote(detail) : NULL;
  char *extra = g_strdup_printf("\"error\":%s,\"sentences\":%d,\"llm_first_token_ms\":%.1f,"
                                "\"first_sentence_ms\":%.1f,\"llm_done_ms\":%.1f",
                                q ? q : "null", info->sentences, info->first_token_us / 1e3,
                                info->first_sentence_us / 1e3, info->done_us / 1e3);
  if (err)
    g_warning("session %llu: chat turn %u: %s", (unsigned long long)s->serial, turn, detail);
  chat_event(s, turn, err ? "error" : "done", extra);
  g_free(extra);
  g_free(q);
}

uint32_t fc_session_chat_cancel(fc_session *s) {
  uint32_t t = s->chat ? fc_chat_cancel(s->chat) : 0;
  int dropped = fc_session_say_cancel(s);
  if (t) {
    char extra[48];
    snprintf(extra, sizeof extra, "\"dropped\":%d", dropped);
    chat_event(s, t, "cancelled", extra);
  }
  return t;
}

int fc_session_chat_say(fc_session *s, const char *text, const fc_say_opts *tts, uint32_t *turn) {
  fc_server *srv = s->srv;
  if (!srv->llm)
    return fc_error_set(FC_EUNSUPPORTED, "type 'chat' is not configured on this server (no LLM: "
                                         "--llm-url or OPENAI_BASE_URL); use 'echo'");
  if (!s->chat) {
    static const fc_chat_cbs cbs = {on_sentence, on_done};
    fc_chat_params cp = {.system = srv->p.llm_system ? srv->p.llm_system : DEFAULT_SYSTEM};
    s->chat = fc_chat_create(srv->llm, &cp, &cbs, s);
  }
  fc_session_chat_cancel(s); /* one turn at a time: the new one replaces what is left */
  fc_say_opts_free(s->chat_tts);
  s->chat_tts = fc_say_opts_copy(tts);
  int err = fc_chat_say(s->chat, text, turn);
  if (err) return err;
  char *q = fc_http_json_quote(text);
  char *extra = g_strdup_printf("\"text\":%s", q);
  chat_event(s, *turn, "start", extra);
  g_free(extra);
  g_free(q);
  return 0;
}

void fc_session_chat_free(fc_session *s) {
  fc_session_chat_cancel(s);
  fc_chat_destroy(s->chat);
  s->chat = NULL;
  fc_say_opts_free(s->chat_tts);
  s->chat_tts = NULL;
}
