/* Conversation on a session (/human type=chat): the session's chat (src/converse/chat.h) runs
 * on the main loop; each sentence of the answer goes, the moment it is whole, to a queue that one
 * worker job at a time empties in order (synthesis, then into the stream), so the avatar starts
 * speaking after the LLM's first sentence while the rest is still being written.
 *
 * Cancelling (interrupt, a new turn, closing) must stop everything of the turn at once: the
 * LLM's connection is closed (fc_chat_cancel), queued sentences are dropped, and chat_gen is
 * bumped under s->lock so a sentence a worker is synthesising right now is not pushed after the
 * interrupt cut the stream (the worker checks chat_gen under the same lock when it pushes). */
#include "converse/chat.h"
#include "facecast/error.h"
#include "facecast/tts.h"
#include "server/internal.h"

#include <stdio.h>
#include <string.h>

/* The default system prompt: answers that sound right spoken. */
#define DEFAULT_SYSTEM                                                                          \
  "You are a friendly digital human in a spoken conversation. Answer briefly, in one to three " \
  "short sentences, in the language the user speaks. No markdown, lists or emoji."

typedef struct chat_line {
  int gen;
  char *text, *voice;
} chat_line;

static void line_free(gpointer p) {
  chat_line *l = p;
  g_free(l->text);
  g_free(l->voice);
  g_free(l);
}

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
  chat_line *l = g_new0(chat_line, 1);
  l->gen = g_atomic_int_get(&s->chat_gen);
  l->text = g_strdup(text);
  l->voice = g_strdup(s->chat_voice);
  int start = 0;
  g_mutex_lock(&s->chat_lock);
  g_queue_push_tail(&s->chat_q, l);
  if (!s->chat_job) start = s->chat_job = 1;
  g_mutex_unlock(&s->chat_lock);
  if (start) {
    fc_job *j = g_new0(fc_job, 1);
    j->kind = FC_JOB_SAY;
    j->s = s;
    fc_session_ref(s);
    fc_job_push(s->srv, j);
  }
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
  g_mutex_lock(&s->chat_lock);
  int dropped = (int)s->chat_q.length;
  g_queue_clear_full(&s->chat_q, line_free);
  g_mutex_unlock(&s->chat_lock);
  g_mutex_lock(&s->lock);
  g_atomic_int_inc(&s->chat_gen);
  g_mutex_unlock(&s->lock);
  if (t) {
    char extra[48];
    snprintf(extra, sizeof extra, "\"dropped\":%d", dropped);
    chat_event(s, t, "cancelled", extra);
  }
  return t;
}

int fc_session_chat_say(fc_session *s, const char *text, const char *voice, uint32_t *turn) {
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
  g_free(s->chat_voice);
  s->chat_voice = g_strdup(voice);
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
  g_free(s->chat_voice);
  s->chat_voice = NULL;
}

void fc_session_chat_speak(fc_session *s) {
  for (;;) {
    g_mutex_lock(&s->chat_lock);
    chat_line *l = g_queue_pop_head(&s->chat_q);
    if (!l) s->chat_job = 0;
    g_mutex_unlock(&s->chat_lock);
    if (!l) return;
    fc_speech sp;
    fc_tts_params tp = {.voice = l->voice};
    int err = g_atomic_int_get(&s->chat_gen) != l->gen ? FC_ECANCELED
                                                       : fc_tts_speak(l->text, &tp, &sp);
    if (!err) {
      g_mutex_lock(&s->lock);
      if (g_atomic_int_get(&s->chat_gen) != l->gen || g_atomic_int_get(&s->closed))
        err = FC_ECANCELED;
      else if (!(err = fc_stream_push_speech(s->stream, sp.audio.samples, sp.audio.n, sp.ph,
                                             sp.n_ph, NULL)))
        fc_session_want_fill_locked(s);
      g_mutex_unlock(&s->lock);
      fc_speech_free(&sp);
    }
    if (err && err != FC_ECANCELED)
      g_warning("session %llu: a sentence of the chat was not spoken: %s",
                (unsigned long long)s->serial, fc_error_detail(err));
    line_free(l);
  }
}
