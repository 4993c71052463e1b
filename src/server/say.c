/* A session's spoken sentences: the chat's answer (chat.c) and, when a TTS service speaks,
 * /human echo's text, queued in order and spoken by one worker job at a time (FC_JOB_SAY).
 *
 * With the embedded espeak-ng voice a sentence is synthesised whole (phoneme timing and all)
 * and pushed as one utterance. With a TTS service (src/speech/voice.h) the sentence's audio
 * goes into the stream as it arrives: the first piece opens a streamed utterance, so the mouth
 * moves ~one network round trip after the request, not after the whole sentence. Should the
 * service fail before any audio came, espeak speaks the sentence instead; after some audio, the
 * utterance is closed where it got to. Either way the log says so and SSE clients get a `tts`
 * event — the avatar never falls silent because a service did.
 *
 * Cancelling (fc_session_say_cancel, from the main loop) drops what waits, cancels the running
 * request (its connection closes at once) and bumps chat_gen under s->lock; audio arriving
 * after that is not pushed (the worker checks chat_gen under the same lock). */
#include "converse/sentences.h"
#include "facecast/error.h"
#include "facecast/tts.h"
#include "server/internal.h"
#include "speech/voice.h"

#include <stdio.h>
#include <string.h>

typedef struct say_line {
  int gen;
  uint32_t turn; /* the chat turn, 0 for /human echo */
  char *text;
  fc_say_opts *tts;
} say_line;

void fc_say_opts_free(fc_say_opts *o) {
  if (!o) return;
  g_free(o->voice);
  g_free(o->emotion);
  g_free(o->ref_audio);
  g_free(o->ref_text);
  g_free(o);
}

fc_say_opts *fc_say_opts_copy(const fc_say_opts *o) {
  fc_say_opts *c = g_new0(fc_say_opts, 1);
  if (o) {
    c->voice = g_strdup(o->voice);
    c->emotion = g_strdup(o->emotion);
    c->ref_audio = g_strdup(o->ref_audio);
    c->ref_text = g_strdup(o->ref_text);
    c->ref_local = o->ref_local;
  }
  return c;
}

static void line_free(gpointer p) {
  say_line *l = p;
  g_free(l->text);
  fc_say_opts_free(l->tts);
  g_free(l);
}

int fc_server_voice_start(fc_server *srv, int *err) {
  const fc_server_params *p = &srv->p;
  if (!p->tts || !*p->tts || !g_ascii_strcasecmp(p->tts, "espeak")) {
    if (p->tts_voice) { /* the embedded voice's default: refused now, not at every sentence */
      fc_speech sp;
      fc_tts_params tp = {.voice = p->tts_voice};
      if ((*err = fc_tts_speak("a", &tp, &sp))) {
        char *why = g_strdup(fc_error_detail(*err));
        *err = fc_error_set(*err, "--tts-voice %s: %s", p->tts_voice, why);
        g_free(why);
        return *err;
      }
      fc_speech_free(&sp);
    }
    return 0;
  }
  fc_voice_params vp = {.provider = p->tts,
                        .url = p->tts_url,
                        .api_key = p->tts_key,
                        .model = p->tts_model,
                        .voice = p->tts_voice,
                        .ref_audio = p->tts_ref_audio,
                        .ref_text = p->tts_ref_text,
                        .lang = p->tts_lang,
                        .rate = p->tts_rate,
                        .timeout_s = p->tts_timeout_s,
                        .edge_version = p->tts_edge_version};
  if (!(srv->voice = fc_voice_create(&vp, err))) return *err;
  GError *e = NULL;
  /* one thread per session speaking at once, up to a bound; they mostly wait */
  if (!(srv->say_workers = g_thread_pool_new(fc_job_run, srv, 256, FALSE, &e))) {
    *err = fc_error_set(FC_ENOMEM, "cannot start the speech workers: %s", e->message);
    g_error_free(e);
    return *err;
  }
  g_message("tts: %s at %s%s%s%s, espeak-ng where it fails", fc_voice_name(srv->voice),
            fc_voice_url(srv->voice), fc_voice_default(srv->voice) ? ", voice " : "",
            fc_voice_default(srv->voice) ? fc_voice_default(srv->voice) : "",
            p->tts_key && *p->tts_key ? ", with an API key" : "");
  return 0;
}

void fc_session_say_line(fc_session *s, uint32_t turn, const char *text, const fc_say_opts *tts) {
  say_line *l = g_new0(say_line, 1);
  l->gen = g_atomic_int_get(&s->chat_gen);
  l->turn = turn;
  l->text = g_strdup(text);
  l->tts = fc_say_opts_copy(tts);
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
}

int fc_session_say_text(fc_session *s, const char *text, const fc_say_opts *tts) {
  fc_sentences *sp = fc_sentences_create(300);
  if (!sp) return fc_error_set(FC_ENOMEM, "out of memory");
  fc_sentences_push(sp, text, strlen(text));
  GPtrArray *lines = g_ptr_array_new_with_free_func(g_free);
  for (char *t; (t = fc_sentences_next(sp, 1));) g_ptr_array_add(lines, t);
  fc_sentences_destroy(sp);
  g_mutex_lock(&s->chat_lock);
  guint waiting = s->chat_q.length;
  g_mutex_unlock(&s->chat_lock);
  int err = 0;
  if (!lines->len)
    err = fc_error_set(FC_EINVAL, "'text' has nothing to say (no letter or digit)");
  else if (waiting + lines->len > FC_SAY_MAX_LINES) /* the queue's bound: the client waits */
    err = fc_error_set(FC_EAGAIN, "%u sentences would wait to be spoken: at most %d; try again "
                       "when some are said", waiting + lines->len, FC_SAY_MAX_LINES);
  for (guint i = 0; !err && i < lines->len; i++)
    fc_session_say_line(s, 0, g_ptr_array_index(lines, i), tts);
  g_ptr_array_free(lines, TRUE);
  return err;
}

int fc_session_say_cancel(fc_session *s) {
  g_mutex_lock(&s->chat_lock);
  int dropped = (int)s->chat_q.length;
  g_queue_clear_full(&s->chat_q, line_free);
  if (s->say_cancel) g_cancellable_cancel(s->say_cancel);
  g_mutex_unlock(&s->chat_lock);
  g_mutex_lock(&s->lock);
  g_atomic_int_inc(&s->chat_gen);
  g_mutex_unlock(&s->lock);
  return dropped;
}

/* ---- speaking a line ---- */

static int say_espeak(fc_session *s, const say_line *l) {
  fc_speech sp;
  fc_tts_params tp = {.voice = l->tts->voice ? l->tts->voice : s->srv->p.tts_voice};
  int err = fc_tts_speak(l->text, &tp, &sp);
  if (err == FC_EINVAL && tp.voice) { /* a service's voice espeak does not know: by the text */
    tp.voice = NULL;
    err = fc_tts_speak(l->text, &tp, &sp);
  }
  if (err) return err;
  uint32_t utt = 0;
  g_mutex_lock(&s->lock);
  if (g_atomic_int_get(&s->chat_gen) != l->gen || g_atomic_int_get(&s->closed))
    err = FC_ECANCELED;
  else if (!(err = fc_stream_push_speech(s->stream, sp.audio.samples, sp.audio.n, sp.ph,
                                         sp.n_ph, &utt))) {
    fc_session_utt_text(s, utt, l->text); /* before a frame of it can be produced */
    fc_session_want_fill_locked(s);
  }
  g_mutex_unlock(&s->lock);
  fc_speech_free(&sp);
  if (!err && l->turn) fc_session_post_turn_audio(s, l->turn, utt);
  return err;
}

typedef struct say_call {
  fc_session *s;
  const say_line *l;
  int opened, err;
  uint32_t utt;
} say_call;

/* The service's audio as it comes, into the stream (the worker's thread). */
static int on_audio(void *user, const float *pcm, size_t n) {
  say_call *c = user;
  fc_session *s = c->s;
  int stop = 0;
  g_mutex_lock(&s->lock);
  if (g_atomic_int_get(&s->chat_gen) != c->l->gen || g_atomic_int_get(&s->closed)) {
    stop = 1;
  } else {
    if (!c->opened && !(c->err = fc_stream_open_speech(s->stream, &c->utt))) {
      fc_session_utt_text(s, c->utt, c->l->text);
      if (c->l->turn) fc_session_post_turn_audio(s, c->l->turn, c->utt);
    }
    c->opened = 1;
    if (!c->err) c->err = fc_stream_push_audio(s->stream, pcm, n);
    if (!c->err) fc_session_want_fill_locked(s);
    stop = c->err != 0;
  }
  g_mutex_unlock(&s->lock);
  return stop;
}

static int say_service(fc_session *s, const say_line *l, int *opened) {
  fc_server *srv = s->srv;
  GCancellable *cancel = g_cancellable_new();
  g_mutex_lock(&s->chat_lock);
  s->say_cancel = cancel;
  g_mutex_unlock(&s->chat_lock);
  /* a cancel that came before say_cancel was there: chat_gen tells */
  if (g_atomic_int_get(&s->chat_gen) != l->gen) g_cancellable_cancel(cancel);
  const fc_say_opts *o = l->tts;
  fc_voice_req r = {.text = l->text,
                    .voice = o->voice,
                    .emotion = o->emotion,
                    .ref_audio = o->ref_audio ? o->ref_audio : s->ref_audio,
                    .ref_text = o->ref_text ? o->ref_text : s->ref_text,
                    .ref_local = o->ref_audio ? o->ref_local : s->ref_local};
  say_call c = {s, l, 0, 0, 0};
  int err = fc_voice_speak(srv->voice, &r, cancel, on_audio, &c);
  if (c.err) err = c.err; /* the stream refused (full): that is the reason */
  g_mutex_lock(&s->chat_lock);
  s->say_cancel = NULL;
  g_mutex_unlock(&s->chat_lock);
  g_object_unref(cancel);
  g_mutex_lock(&s->lock);
  if (c.opened) {
    fc_stream_close_speech(s->stream); /* ends where it got to, even when cut short */
    fc_session_want_fill_locked(s);
  }
  g_mutex_unlock(&s->lock);
  *opened = c.opened;
  return err;
}

/* The service failed: say so in the log and to SSE clients. */
static void report_fallback(fc_session *s, const say_line *l, int err, int partial) {
  const char *why = fc_error_detail(err);
  g_warning("session %llu: %s TTS failed%s: %s", (unsigned long long)s->serial,
            fc_voice_name(s->srv->voice),
            partial ? " mid-sentence (the sentence stops there)" : ", espeak-ng speaks instead",
            why);
  char *q = fc_http_json_quote(why), *t = fc_http_json_quote(l->text);
  char *ev = g_strdup_printf("{\"sessionid\":\"%s\",\"turn\":%u,\"status\":\"%s\","
                             "\"provider\":\"%s\",\"error\":%s,\"text\":%s}",
                             s->id, l->turn, partial ? "partial" : "fallback",
                             fc_voice_name(s->srv->voice), q, t);
  fc_session_post_sse_json(s, "tts", ev);
  g_free(ev);
  g_free(q);
  g_free(t);
}

void fc_session_say_run(fc_session *s) {
  for (;;) {
    g_mutex_lock(&s->chat_lock);
    say_line *l = g_queue_pop_head(&s->chat_q);
    if (!l) s->chat_job = 0;
    g_mutex_unlock(&s->chat_lock);
    if (!l) return;
    int err = FC_ECANCELED;
    if (g_atomic_int_get(&s->chat_gen) == l->gen && !g_atomic_int_get(&s->closed)) {
      int opened = 0;
      if (s->srv->voice && (err = say_service(s, l, &opened)) && err != FC_ECANCELED &&
          err != FC_EAGAIN) {
        report_fallback(s, l, err, opened);
        err = opened ? 0 : say_espeak(s, l);
      } else if (!s->srv->voice) {
        err = say_espeak(s, l);
      }
    }
    if (err && err != FC_ECANCELED)
      g_warning("session %llu: a sentence was not spoken: %s", (unsigned long long)s->serial,
                fc_error_detail(err));
    line_free(l);
  }
}
