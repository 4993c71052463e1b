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

/* ---- the turn's timeline ---- */

static void mark(fc_session *s, uint32_t turn, int stage, gint64 at) {
  if (s->tl.turn != turn || !turn || s->tl.at[stage]) return;
  s->tl.at[stage] = at;
}

void fc_session_turn_audio(fc_session *s, uint32_t turn, uint32_t utt, gint64 at) {
  if (s->tl.turn != turn || !turn || s->tl.at[FC_TURN_AUDIO]) return;
  s->tl.at[FC_TURN_AUDIO] = at;
  s->tl.first_utt = utt;
}

/* The first speaking frame of the turn went out: the timeline is complete; it goes to SSE
 * clients and /metrics' histograms. */
void fc_session_turn_frame(fc_session *s, uint32_t utt) {
  fc_turn_timeline *t = &s->tl;
  if (!t->turn || !utt || utt != t->first_utt || t->at[FC_TURN_FRAME]) return;
  t->at[FC_TURN_FRAME] = g_get_monotonic_time();
  GString *e = g_string_new(NULL);
  g_string_append_printf(e, "\"voice\":%s,\"timeline\":{", t->voice ? "true" : "false");
  for (int k = 0; k < FC_TURN_STAGES; k++) {
    double sec = t->at[k] ? (t->at[k] - t->t0) / 1e6 : -1;
    if (sec < 0 && t->at[k]) sec = 0; /* (a clock step: never negative) */
    if (t->at[k]) g_string_append_printf(e, "%s\"%s_ms\":%.1f", k ? "," : "",
                                         fc_turn_stage_names[k], sec * 1e3);
    else g_string_append_printf(e, "%s\"%s_ms\":null", k ? "," : "", fc_turn_stage_names[k]);
    if (!t->at[k]) continue;
    fc_server *srv = s->srv;
    int b = 0;
    while (b < FC_TURN_BUCKETS && sec > fc_turn_bounds_s[b]) b++;
    srv->turn_hist[k][b]++;
    srv->turn_count[k]++;
    srv->turn_sum[k] += sec;
  }
  g_string_append_c(e, '}');
  chat_event(s, t->turn, "speaking", e->str);
  g_string_free(e, TRUE);
}

static void on_sentence(void *user, uint32_t turn, const char *text) {
  fc_session *s = user;
  fc_chat_turn_info so_far = fc_chat_turn_progress(s->chat);
  if (so_far.first_token_us) mark(s, turn, FC_TURN_TOKEN, s->tl.said + so_far.first_token_us);
  mark(s, turn, FC_TURN_SENTENCE, g_get_monotonic_time());
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
  if (info->first_token_us) mark(s, turn, FC_TURN_TOKEN, s->tl.said + info->first_token_us);
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

int fc_session_chat_say(fc_session *s, const char *text, const fc_say_opts *tts, gint64 t0,
                        gint64 asr_at, uint32_t *turn) {
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
  gint64 said = g_get_monotonic_time();
  int err = fc_chat_say(s->chat, text, turn);
  if (err) return err;
  s->tl = (fc_turn_timeline){.turn = *turn, .voice = asr_at != 0, .t0 = t0 ? t0 : said,
                             .said = said};
  s->tl.at[FC_TURN_ASR] = asr_at;
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
