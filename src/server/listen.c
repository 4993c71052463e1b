/* Ears (listen.h): the VAD on the main loop, each speech segment to the ASR through a queue
 * emptied by one job at a time on the listening workers, results back on the main loop; and a
 * session's voice chat on top (barge-in, SSE `listen` events, the transcript as a chat turn or
 * echoed).
 *
 * References: the owner holds one (dropped by fc_ear_close), each queued job one, each result
 * posted to the main loop one; the owner's `user` goes with the last. A queued item list is
 * bounded (about two minutes of audio): past it audio is dropped and the segment fails. */
#include "server/listen.h"
#include "converse/asr.h"
#include "converse/chat.h"
#include "converse/vad.h"
#include "facecast/error.h"

#include <stdio.h>
#include <string.h>

#define PRE 4800          /* samples of audio kept before speech: 300 ms */
#define MAX_ITEMS 2000    /* queued pieces (60 ms each from a browser) */

enum { ITEM_BEGIN, ITEM_AUDIO, ITEM_END, ITEM_EMPTY };

typedef struct item {
  int kind;
  uint32_t seg;
  int16_t *pcm;
  size_t n;
  gint64 t; /* END: when the segment ended */
} item;

struct fc_ear {
  gint refs;
  fc_server *srv;
  fc_ear_cbs cbs;
  void *user;
  GDestroyNotify free_user;
  GCancellable *cancel; /* a service's answer being waited for, at close */
  /* main loop */
  int closed, in_seg;
  fc_vad *vad;
  int16_t pre[PRE];
  size_t pre_n, pre_at; /* samples in the ring, where the next goes */
  uint32_t seg;
  gint64 seg_t0;
  /* the queue (lock) */
  GMutex lock;
  GQueue q;
  int job, dropping;
  /* the job (one at a time) */
  fc_asr_stream *as;
  int failed;
  char *why;
};

static void ear_unref(fc_ear *e) {
  if (!g_atomic_int_dec_and_test(&e->refs)) return;
  fc_asr_stream_free(e->as);
  item *it;
  while ((it = g_queue_pop_head(&e->q))) {
    g_free(it->pcm);
    g_free(it);
  }
  g_mutex_clear(&e->lock);
  fc_vad_destroy(e->vad);
  g_object_unref(e->cancel);
  g_free(e->why);
  if (e->free_user) e->free_user(e->user);
  g_free(e);
}

/* ---- the server's ASR ---- */

static void ear_job(gpointer data, gpointer unused);

int fc_server_asr_start(fc_server *srv, int *err) {
  GError *e = NULL;
  /* threads come and go with the work: a remote service's answer is waited for there */
  if (!(srv->listen_workers = g_thread_pool_new(ear_job, NULL, 64, FALSE, &e))) {
    *err = fc_error_set(FC_ENOMEM, "cannot start the listening workers: %s", e->message);
    g_error_free(e);
    return *err;
  }
  const char *p = srv->p.asr;
  /* a service is made now (its URL is checked at start); pocketsphinx on first use, since it
   * loads ~40 MB of model that a server without voice chat never needs */
  if (p && *p && g_ascii_strcasecmp(p, "none") && g_ascii_strcasecmp(p, "pocketsphinx")) {
    if (!fc_server_asr(srv, err)) return *err;
  } else if (p && !g_ascii_strcasecmp(p, "none")) {
    g_message("asr: none (voice chat and /api/asr are off)");
  }
  return 0;
}

int fc_server_asr_enabled(fc_server *srv, int *err) {
  *err = 0;
  if (srv->p.asr && !g_ascii_strcasecmp(srv->p.asr, "none"))
    *err = fc_error_set(FC_EUNSUPPORTED, "speech recognition is off on this server (--asr none)");
  return !*err;
}

void fc_server_asr_stop(fc_server *srv) {
  fc_asr_destroy(srv->asr);
  srv->asr = NULL;
}

fc_asr *fc_server_asr(fc_server *srv, int *err) {
  if (!fc_server_asr_enabled(srv, err)) return NULL;
  g_mutex_lock(&srv->asr_lock);
  if (!srv->asr) {
    fc_asr_params ap = {.provider = srv->p.asr,
                        .url = srv->p.asr_url,
                        .api_key = srv->p.asr_key,
                        .model = srv->p.asr_model,
                        .lang = srv->p.asr_lang,
                        .timeout_s = srv->p.asr_timeout_s};
    gint64 t0 = g_get_monotonic_time();
    if ((srv->asr = fc_asr_create(&ap, err)))
      g_message("asr: %s%s%s (ready in %.0f ms)", fc_asr_name(srv->asr),
                *fc_asr_url(srv->asr) ? " at " : "", fc_asr_url(srv->asr),
                (g_get_monotonic_time() - t0) / 1e3);
  }
  fc_asr *a = srv->asr;
  g_mutex_unlock(&srv->asr_lock);
  return a;
}

/* ---- results, on the main loop ---- */

typedef struct result {
  fc_ear *e;
  uint32_t seg;
  char *text, *detail;
  int err;
  gint64 t_end, t_final;
} result;

static gboolean deliver(gpointer data) {
  result *r = data;
  if (!r->e->closed && r->e->cbs.final)
    r->e->cbs.final(r->e->user, r->seg, r->text, r->err, r->detail, r->t_end, r->t_final);
  return G_SOURCE_REMOVE;
}

static void free_result(gpointer data) {
  result *r = data;
  ear_unref(r->e);
  g_free(r->text);
  g_free(r->detail);
  g_free(r);
}

static void post_result(fc_ear *e, uint32_t seg, char *text, int err, const char *detail,
                        gint64 t_end) {
  result *r = g_new0(result, 1);
  g_atomic_int_inc(&e->refs);
  *r = (result){e, seg, text, err ? g_strdup(detail) : NULL, err, t_end, g_get_monotonic_time()};
  GSource *src = g_idle_source_new();
  g_source_set_priority(src, G_PRIORITY_DEFAULT);
  g_source_set_callback(src, deliver, r, free_result);
  g_source_attach(src, e->srv->ctx);
  g_source_unref(src);
}

/* ---- the job ---- */

static void fail(fc_ear *e, int err) {
  if (e->failed) return;
  e->failed = err;
  g_free(e->why);
  e->why = g_strdup(fc_error_detail(err));
}

static void run_item(fc_ear *e, item *it) {
  int err = 0;
  switch (it->kind) {
  case ITEM_BEGIN: {
    fc_asr_stream_free(e->as);
    e->as = NULL;
    e->failed = 0;
    fc_asr *a = fc_server_asr(e->srv, &err);
    if (!a || !(e->as = fc_asr_begin(a, &err))) fail(e, err);
    break;
  }
  case ITEM_AUDIO:
    if (e->as && !e->failed && (err = fc_asr_feed(e->as, it->pcm, it->n))) fail(e, err);
    break;
  case ITEM_END: {
    char *text = NULL;
    if (e->as && !e->failed && (err = fc_asr_finish(e->as, e->cancel, &text))) fail(e, err);
    if (!e->failed && !e->as) fail(e, fc_error_set(FC_EINVAL, "the segment never began"));
    if (e->failed != FC_ECANCELED)
      post_result(e, it->seg, e->failed ? NULL : text, e->failed, e->why, it->t);
    if (e->failed) g_free(text);
    fc_asr_stream_free(e->as);
    e->as = NULL;
    break;
  }
  case ITEM_EMPTY: post_result(e, it->seg, g_strdup(""), 0, NULL, it->t); break;
  }
}

static void ear_job(gpointer data, gpointer unused) {
  fc_ear *e = data;
  for (;;) {
    g_mutex_lock(&e->lock);
    item *it = g_queue_pop_head(&e->q);
    if (!it) e->job = 0;
    g_mutex_unlock(&e->lock);
    if (!it) break;
    run_item(e, it);
    g_free(it->pcm);
    g_free(it);
  }
  ear_unref(e);
}

/* ---- the main loop's side ---- */

static void queue_item(fc_ear *e, int kind, const int16_t *pcm, size_t n, gint64 t) {
  item *it = g_new0(item, 1);
  *it = (item){kind, e->seg, pcm && n ? g_memdup2(pcm, n * sizeof *pcm) : NULL, n, t};
  int start = 0;
  g_mutex_lock(&e->lock);
  if (kind == ITEM_AUDIO && e->q.length >= MAX_ITEMS) { /* the ASR cannot keep up: drop */
    if (!e->dropping) g_warning("asr: cannot keep up with the microphone; audio dropped");
    e->dropping = 1;
    g_free(it->pcm);
    g_free(it);
    it = NULL;
  } else {
    if (kind != ITEM_AUDIO) e->dropping = 0;
    g_queue_push_tail(&e->q, it);
    if (!e->job) start = e->job = 1;
  }
  g_mutex_unlock(&e->lock);
  if (start) {
    g_atomic_int_inc(&e->refs);
    g_thread_pool_push(e->srv->listen_workers, e, NULL);
  }
}

fc_ear *fc_ear_new(fc_server *srv, const fc_ear_cbs *cbs, void *user, GDestroyNotify free_user) {
  fc_ear *e = g_new0(fc_ear, 1);
  e->refs = 1;
  e->srv = srv;
  e->cbs = *cbs;
  e->user = user;
  e->free_user = free_user;
  e->cancel = g_cancellable_new();
  fc_vad_params vp = {.onset_ms = 60, .hangover_ms = srv->p.vad_hangover_ms};
  e->vad = fc_vad_create(&vp);
  g_mutex_init(&e->lock);
  g_queue_init(&e->q);
  return e;
}

static void pre_push(fc_ear *e, const int16_t *pcm, size_t n) {
  for (size_t i = 0; i < n; i++) {
    e->pre[e->pre_at] = pcm[i];
    e->pre_at = (e->pre_at + 1) % PRE;
  }
  e->pre_n = e->pre_n + n > PRE ? PRE : e->pre_n + n;
}

static void begin_segment(fc_ear *e) {
  e->in_seg = 1;
  e->seg++;
  e->seg_t0 = g_get_monotonic_time();
  queue_item(e, ITEM_BEGIN, NULL, 0, 0);
  /* the ring, oldest first: up to the wrap, then from its start */
  size_t first = (e->pre_at + PRE - e->pre_n) % PRE, k = PRE - first < e->pre_n ? PRE - first : e->pre_n;
  queue_item(e, ITEM_AUDIO, e->pre + first, k, 0);
  if (k < e->pre_n) queue_item(e, ITEM_AUDIO, e->pre, e->pre_n - k, 0);
  e->pre_n = 0;
  if (e->cbs.speech) e->cbs.speech(e->user, e->seg);
}

static void end_segment(fc_ear *e) {
  gint64 now = g_get_monotonic_time();
  e->in_seg = 0;
  queue_item(e, ITEM_END, NULL, 0, now);
  if (e->cbs.end && !e->closed) e->cbs.end(e->user, e->seg, (now - e->seg_t0) / 1e6);
}

void fc_ear_audio(fc_ear *e, const int16_t *pcm, size_t n) {
  while (n && !e->closed) {
    size_t used;
    int64_t at;
    int ev = fc_vad_feed(e->vad, pcm, n, &used, &at);
    if (e->in_seg) queue_item(e, ITEM_AUDIO, pcm, used, 0);
    else pre_push(e, pcm, used);
    if (ev == FC_VAD_START && !e->in_seg) begin_segment(e);
    else if (ev == FC_VAD_END && e->in_seg) end_segment(e);
    pcm += used;
    n -= used;
  }
}

void fc_ear_flush(fc_ear *e, int always) {
  if (e->closed) return;
  if (e->in_seg) {
    fc_vad_reset(e->vad);
    end_segment(e);
  } else if (always) {
    e->seg++;
    queue_item(e, ITEM_EMPTY, NULL, 0, g_get_monotonic_time());
  }
}

uint32_t fc_ear_segment(const fc_ear *e) { return e->seg; }

void fc_ear_close(fc_ear *e) {
  if (!e) return;
  e->closed = 1;
  g_cancellable_cancel(e->cancel);
  ear_unref(e);
}

/* ---- a session's voice chat ---- */

static void listen_event(fc_session *s, const char *status, uint32_t seg, const char *extra) {
  char *ev = g_strdup_printf("{\"sessionid\":\"%s\",\"segment\":%u,\"status\":\"%s\"%s%s}",
                             s->id, seg, status, extra ? "," : "", extra ? extra : "");
  fc_session_send_sse_json(s, "listen", ev);
  g_free(ev);
}

static void on_speech(void *user, uint32_t seg) {
  fc_session *s = user;
  g_mutex_lock(&s->chat_lock);
  int queued = s->chat_job; /* sentences waiting or being made into speech */
  g_mutex_unlock(&s->chat_lock);
  /* barge-in: the user speaks while the avatar does (or is about to): it stops at once */
  if (s->srv->p.barge_in && (fc_session_is_speaking(s) || (s->chat && fc_chat_turn(s->chat)) ||
                             queued)) {
    uint32_t turn = fc_session_chat_cancel(s);
    fc_session_interrupt(s);
    char extra[32];
    snprintf(extra, sizeof extra, "\"turn\":%u", turn);
    listen_event(s, "barge-in", seg, extra);
  }
  listen_event(s, "speech", seg, NULL);
}

static void on_end(void *user, uint32_t seg, double speech_s) {
  char extra[48];
  snprintf(extra, sizeof extra, "\"speech_ms\":%.0f", speech_s * 1e3);
  listen_event(user, "end", seg, extra);
}

static void on_final(void *user, uint32_t seg, const char *text, int err, const char *detail,
                     gint64 t_end, gint64 t_final) {
  fc_session *s = user;
  if (!text) {
    g_warning("session %llu: speech not recognised: %s", (unsigned long long)s->serial, detail);
    char *q = fc_http_json_quote(detail), *extra = g_strdup_printf("\"error\":%s", q);
    listen_event(s, "error", seg, extra);
    g_free(extra);
    g_free(q);
    return;
  }
  char *q = fc_http_json_quote(text);
  char *extra = g_strdup_printf("\"text\":%s,\"asr_ms\":%.1f", q, (t_final - t_end) / 1e3);
  listen_event(s, "final", seg, extra);
  g_free(extra);
  g_free(q);
  if (!*text) return; /* nothing understood: no turn */
  if (s->listen_mode == FC_LISTEN_ECHO) {
    fc_session_say_text(s, text, NULL);
    return;
  }
  uint32_t turn;
  int e = fc_session_chat_say(s, text, NULL, t_end, t_final, &turn);
  if (e) {
    char *d = fc_http_json_quote(fc_error_detail(e)), *x = g_strdup_printf("\"error\":%s", d);
    listen_event(s, "error", seg, x);
    g_free(x);
    g_free(d);
  }
}

static void unref_session(gpointer s) { fc_session_unref(s); }

void fc_session_listen_audio(fc_session *s, int mode, const int16_t *pcm, size_t n) {
  if (!s->ear) {
    static const fc_ear_cbs cbs = {on_speech, on_end, on_final};
    fc_session_ref(s);
    s->ear = fc_ear_new(s->srv, &cbs, s, unref_session);
  }
  s->listen_mode = mode;
  fc_ear_audio(s->ear, pcm, n);
}

void fc_session_listen_flush(fc_session *s) {
  if (s->ear) fc_ear_flush(s->ear, 0);
}

void fc_session_listen_free(fc_session *s) {
  fc_ear_close(s->ear);
  s->ear = NULL;
}
