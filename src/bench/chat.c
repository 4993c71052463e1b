/* The conversation benchmark (facecast bench chat): how fast a turn goes from its start to the
 * first speaking frame sent, measured the way a client sees it.
 *
 * In this process: a server on 127.0.0.1 (a null-output session, so no browser is needed), and
 * on a thread of their own fakes of the remote services with no think time: an OpenAI-compatible
 * LLM that streams a two-sentence answer at once (or, for "ENDLESS", a sentence every 50 ms until
 * the client goes, noting when it went) and an OpenAI-compatible transcription service that
 * answers at once. The driver (the calling thread) talks to the server as a client does: HTTP
 * requests, the session's SSE stream read on a thread, the microphone as 60 ms PCM16 frames on
 * a WebSocket at real-time pace. Each turn's milestones come from the server's own timeline
 * (SSE chat "speaking"); interrupt times are the driver's clock from its request to the SSE
 * "cancelled" event and to the fake LLM seeing its connection closed.
 *
 *   typed   POST /human type=chat                       (from the request)
 *   voice   espeak speech into /ws/audio?mode=chat      (from the end of speech: the VAD's
 *           endpoint, which comes --vad-hangover-ms after the last voiced sound)
 *   instant the same with the transcription service instead of pocketsphinx
 *   interrupt POST /interrupt_talk during an endless answer
 *   barge-in  speech into the microphone during an endless answer: from the first sound
 *           (captured 60 ms before its chunk is sent) to the SSE listen "barge-in" (the avatar
 *           was cut then) */
#include "converse/llm.h"
#include "converse/wsc.h"
#include "core/tsan.h"
#include "facecast/error.h"
#include "facecast/server.h"
#include "facecast/tts.h"
#include "server/internal.h"

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUESTION "what is the weather like today"

/* ---- the fakes, on their own thread ---- */

typedef struct fakes {
  GMainContext *ctx;
  GMainLoop *loop;
  GThread *thread;
  SoupServer *soup;
  int port;
  GMutex lock;
  gint64 disconnected; /* when an ENDLESS answer's client went (µs, monotonic) */
} fakes;

static const char chunk_fmt[] =
    "data: {\"id\":\"b\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"bench\","
    "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"%s\"},\"finish_reason\":null}]}\n\n";

typedef struct endless {
  SoupServerMessage *msg;
  fakes *f;
  guint timer;
  GSource *watch; /* the client's socket: readable (or hung up) when it closes */
} endless;

static gboolean endless_tick(gpointer p) {
  endless *e = p;
  char *c = g_strdup_printf(chunk_fmt, "And there is more to say. ");
  soup_message_body_append(soup_server_message_get_response_body(e->msg), SOUP_MEMORY_TAKE, c,
                           strlen(c));
  soup_server_message_unpause(e->msg);
  return G_SOURCE_CONTINUE;
}

static void endless_stop(endless *e) {
  if (e->timer) g_source_remove(e->timer);
  e->timer = 0;
  if (e->watch) {
    g_source_destroy(e->watch);
    g_source_unref(e->watch);
  }
  e->watch = NULL;
}

/* The client's socket became readable: a request would be data; nothing (0 bytes) is its close,
 * seen the moment it happens, as the Python fakes see it with select(). */
static gboolean endless_watch(GSocket *sock, GIOCondition cond, gpointer p) {
  endless *e = p;
  char b;
  gssize n = (cond & (G_IO_HUP | G_IO_ERR)) ? 0 : g_socket_receive_with_blocking(sock, &b, 1, FALSE, NULL, NULL);
  if (n > 0) return G_SOURCE_CONTINUE; /* (it sends nothing else; should it, read on) */
  g_mutex_lock(&e->f->lock);
  e->f->disconnected = g_get_monotonic_time();
  g_mutex_unlock(&e->f->lock);
  if (e->timer) g_source_remove(e->timer);
  e->timer = 0;
  g_source_unref(e->watch);
  e->watch = NULL;
  return G_SOURCE_REMOVE;
}

static void endless_gone(SoupServerMessage *msg, gpointer p) { endless_stop(p); }

static void endless_free(gpointer p, GClosure *c) {
  endless_stop(p);
  g_free(p);
}

static void fake_route(SoupServer *s, SoupServerMessage *msg, const char *path, GHashTable *q,
                       gpointer user) {
  fakes *f = user;
  SoupMessageHeaders *h = soup_server_message_get_response_headers(msg);
  if (!strcmp(path, "/v1/audio/transcriptions")) {
    static const char t[] = "{\"text\":\"" QUESTION "\"}";
    soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_STATIC, t, strlen(t));
    soup_server_message_set_status(msg, 200, NULL);
    return;
  }
  SoupMessageBody *req = soup_server_message_get_request_body(msg);
  int forever = req->data && g_strstr_len(req->data, req->length, "ENDLESS") != NULL;
  soup_server_message_set_status(msg, 200, NULL);
  soup_message_headers_set_content_type(h, "text/event-stream", NULL);
  soup_message_headers_set_encoding(h, SOUP_ENCODING_CHUNKED);
  SoupMessageBody *body = soup_server_message_get_response_body(msg);
  if (!forever) {
    char *c = g_strdup_printf(chunk_fmt, "Sunny and warm today. Take a hat.");
    soup_message_body_append(body, SOUP_MEMORY_TAKE, c, strlen(c));
    static const char done[] = "data: [DONE]\n\n";
    soup_message_body_append(body, SOUP_MEMORY_STATIC, done, strlen(done));
    soup_message_body_complete(body);
    return;
  }
  endless *e = g_new0(endless, 1);
  e->msg = msg;
  e->f = f;
  endless_tick(e);
  e->timer = g_timeout_add(50, endless_tick, e); /* (the fakes' context is this thread's) */
  GSocket *sock = soup_server_message_get_socket(msg);
  if (sock) {
    e->watch = g_socket_create_source(sock, G_IO_IN | G_IO_HUP | G_IO_ERR, NULL);
    /* (parenthesised: see converse/wsc.c; a socket source's function takes the socket first) */
    (g_source_set_callback)(e->watch, G_SOURCE_FUNC(endless_watch), e, NULL);
    g_source_attach(e->watch, f->ctx);
  }
  g_signal_connect_data(msg, "disconnected", G_CALLBACK(endless_gone), e, endless_free, 0);
}

static gpointer fakes_main(gpointer p) {
  fakes *f = p;
  g_main_context_push_thread_default(f->ctx);
  g_main_loop_run(f->loop);
  g_main_context_pop_thread_default(f->ctx);
  return NULL;
}

static int fakes_start(fakes *f, int *err) {
  f->ctx = g_main_context_new();
  g_main_context_push_thread_default(f->ctx); /* the server binds on it */
  f->loop = g_main_loop_new(f->ctx, FALSE);
  f->soup = soup_server_new(NULL, NULL);
  soup_server_add_handler(f->soup, "/v1", fake_route, f, NULL);
  GError *e = NULL;
  int ok = soup_server_listen_local(f->soup, 0, SOUP_SERVER_LISTEN_IPV4_ONLY, &e);
  g_main_context_pop_thread_default(f->ctx);
  if (!ok) {
    *err = fc_error_set(FC_EIO, "bench chat: the fake services do not listen: %s", e->message);
    g_error_free(e);
    return *err;
  }
  GSList *uris = soup_server_get_uris(f->soup);
  f->port = g_uri_get_port(uris->data);
  g_slist_free_full(uris, (GDestroyNotify)g_uri_unref);
  g_mutex_init(&f->lock);
  f->thread = g_thread_new("bench-fakes", fakes_main, f);
  return 0;
}

static gboolean quit_loop(gpointer loop) {
  g_main_loop_quit(loop);
  return G_SOURCE_REMOVE;
}

static void fakes_stop(fakes *f) {
  if (f->thread) {
    g_main_context_invoke(f->ctx, quit_loop, f->loop);
    g_thread_join(f->thread);
    g_mutex_clear(&f->lock);
  }
  if (f->soup) {
    g_main_context_push_thread_default(f->ctx);
    soup_server_disconnect(f->soup);
    g_object_unref(f->soup);
    g_main_context_pop_thread_default(f->ctx);
  }
  if (f->loop) g_main_loop_unref(f->loop);
  if (f->ctx) g_main_context_unref(f->ctx);
}

/* ---- the server under test, on its own thread ---- */

typedef struct served {
  fc_server *srv;
  GThread *thread;
  char sid[40];
  GMutex lock;
  GCond cond;
  int made, err;
} served;

static gpointer server_main(gpointer p) {
  fc_server_run(((served *)p)->srv, 0);
  return NULL;
}

/* On the server's main loop: a session with a null output (no browser needed). */
static gboolean make_session(gpointer p) {
  served *sv = p;
  int err = 0;
  fc_session *s = fc_session_new(sv->srv, sv->srv->avatar, NULL, &err);
  fc_live *live = NULL;
  if (s) {
    fc_live_params lp = fc_session_live_params(sv->srv, s, FC_LIVE_NULL);
    if ((live = fc_live_create(&lp, NULL, NULL, NULL, &err))) {
      g_mutex_lock(&s->out_lock);
      s->out = fc_live_sink(live);
      g_mutex_unlock(&s->out_lock);
      g_strlcpy(sv->sid, s->id, sizeof sv->sid);
    }
    fc_session_unref(s);
  }
  g_mutex_lock(&sv->lock);
  sv->made = 1;
  sv->err = live ? 0 : err ? err : FC_EINVAL;
  g_cond_signal(&sv->cond);
  g_mutex_unlock(&sv->lock);
  return G_SOURCE_REMOVE;
}

/* ---- the client ---- */

typedef struct event {
  gint64 t; /* when the driver's reader got it */
  char *data;
} event;

typedef struct client {
  SoupSession *http;
  char base[64];
  GAsyncQueue *events; /* event* from the SSE reader */
  GThread *reader;
  GCancellable *stop;
  char sid[40];
} client;

static int on_sse(void *user, const char *data, size_t n) {
  client *c = user;
  event *e = g_new(event, 1);
  e->t = g_get_monotonic_time();
  e->data = g_strndup(data, n);
  FC_TSAN_RELEASE(e); /* (GAsyncQueue's hand-off is GLib's, unseen by ThreadSanitizer) */
  g_async_queue_push(c->events, e);
  return 0;
}

static gpointer sse_main(gpointer p) {
  client *c = p;
  GMainContext *ctx = g_main_context_new();
  g_main_context_push_thread_default(ctx);
  SoupSession *ss = soup_session_new();
  char *url = g_strdup_printf("%s/sse?sessionid=%s", c->base, c->sid);
  SoupMessage *m = soup_message_new("GET", url);
  GInputStream *in = soup_session_send(ss, m, c->stop, NULL);
  fc_sse_parser *sp = fc_sse_parser_create(1 << 16);
  char buf[4096];
  gssize n;
  while (in && (n = g_input_stream_read(in, buf, sizeof buf, c->stop, NULL)) > 0)
    fc_sse_parser_feed(sp, buf, (size_t)n, on_sse, c);
  fc_sse_parser_destroy(sp);
  if (in) g_object_unref(in);
  g_object_unref(m);
  g_free(url);
  g_object_unref(ss);
  g_main_context_pop_thread_default(ctx);
  g_main_context_unref(ctx);
  return NULL;
}

static int post(client *c, const char *path, const char *json) {
  char *url = g_strdup_printf("%s%s", c->base, path);
  SoupMessage *m = soup_message_new("POST", url);
  GBytes *b = g_bytes_new(json, strlen(json));
  soup_message_set_request_body_from_bytes(m, "application/json", b);
  GBytes *r = soup_session_send_and_read(c->http, m, NULL, NULL);
  int st = (int)soup_message_get_status(m);
  if (r) g_bytes_unref(r);
  g_bytes_unref(b);
  g_object_unref(m);
  g_free(url);
  return st;
}

/* A field of an event's JSON: string (copied) or number. */
static int ev_field(const event *e, const char *key, char **str, double *num) {
  JsonParser *jp = json_parser_new();
  int found = 0;
  if (json_parser_load_from_data(jp, e->data, -1, NULL) && JSON_NODE_HOLDS_OBJECT(json_parser_get_root(jp))) {
    JsonObject *o = json_node_get_object(json_parser_get_root(jp));
    JsonNode *n = json_object_get_member(o, key);
    if (n && JSON_NODE_HOLDS_VALUE(n)) {
      found = 1;
      if (str && json_node_get_value_type(n) == G_TYPE_STRING) *str = g_strdup(json_node_get_string(n));
      if (num && json_node_get_value_type(n) != G_TYPE_STRING) *num = json_node_get_double(n);
    }
  }
  g_object_unref(jp);
  return found;
}

/* The next chat event of `status` (others are dropped) within timeout_ms: its arrival time, and
 * the timeline's first_frame_ms etc. in tl (5 values) for "speaking". 0 on timeout. */
static gint64 wait_event(client *c, int listen, const char *status, int timeout_ms, double tl[5]);

static gint64 wait_chat(client *c, const char *status, int timeout_ms, double tl[5]) {
  return wait_event(c, 0, status, timeout_ms, tl);
}

/* The same for a voice chat (SSE listen) event. */
static gint64 wait_listen(client *c, const char *status, int timeout_ms) {
  return wait_event(c, 1, status, timeout_ms, NULL);
}

static gint64 wait_event(client *c, int listen, const char *status, int timeout_ms, double tl[5]) {
  gint64 until = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
  for (;;) {
    gint64 left = until - g_get_monotonic_time();
    event *e = left > 0 ? g_async_queue_timeout_pop(c->events, (guint64)left) : NULL;
    if (!e) return 0;
    FC_TSAN_ACQUIRE(e);
    char *st = NULL;
    double turn = 0;
    int kind_ok = listen ? ev_field(e, "status", &st, NULL) && strstr(e->data, "\"segment\"")
                         : ev_field(e, "status", &st, NULL) && ev_field(e, "turn", NULL, &turn) &&
                               !strstr(e->data, "\"segment\"");
    gint64 t = kind_ok && st && !strcmp(st, status) ? e->t : 0;
    if (t && tl) {
      static const char *const k[] = {"asr_ms", "llm_first_token_ms", "first_sentence_ms",
                                      "first_audio_ms", "first_frame_ms"};
      for (int i = 0; i < 5; i++) {
        tl[i] = -1;
        char *pos = strstr(e->data, k[i]);
        if (pos) tl[i] = g_ascii_strtod(pos + strlen(k[i]) + 2, NULL);
        if (pos && !strncmp(pos + strlen(k[i]) + 2, "null", 4)) tl[i] = -1;
      }
    }
    g_free(st);
    g_free(e->data);
    g_free(e);
    if (t) return t;
  }
}

static void drain(client *c) {
  event *e;
  while ((e = g_async_queue_try_pop(c->events))) {
    FC_TSAN_ACQUIRE(e);
    g_free(e->data);
    g_free(e);
  }
}

/* Percentiles of n values (sorted in place): p50, p95, max. */
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static void pcts(double *v, int n, double out[3]) {
  if (n <= 0) {
    out[0] = out[1] = out[2] = -1;
    return;
  }
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  out[0] = v[(n - 1) / 2];
  out[1] = v[(int)((n - 1) * 0.95 + 0.5)];
  out[2] = v[n - 1];
}

/* Streams speech then silence into the microphone socket at real-time pace until the turn's
 * "speaking" event (or 15 s). */
/* Streams speech then silence into the microphone socket at real-time pace until the turn's
 * "speaking" event (or, with barge, the listen "barge-in" event: then *barge_ms is the time
 * from the first sound of speech, as a microphone captured it, to its arrival), or 15 s. */
static gint64 voice_turn(client *c, fc_wsc *w, const int16_t *q, size_t nq, double tl[5],
                         double *barge_ms) {
  static const int16_t quiet[960];
  const size_t lead = 10; /* 0.6 s of quiet first */
  gint64 t0 = g_get_monotonic_time(), t_speech = 0;
  for (size_t i = 0;; i++) {
    size_t at = i >= lead ? (i - lead) * 960 : 0;
    const int16_t *chunk = i < lead || at >= nq ? quiet : q + at;
    size_t k = i < lead || at >= nq ? 960 : (nq - at < 960 ? nq - at : 960);
    if (i == lead) t_speech = g_get_monotonic_time();
    fc_wsc_send_binary(w, chunk, k * 2);
    fc_wsc_pump(w);
    gint64 next = t0 + (gint64)(i + 1) * 60000, now = g_get_monotonic_time();
    int wait_ms = next > now ? (int)((next - now) / 1000) : 0;
    gint64 got = barge_ms ? wait_listen(c, "barge-in", wait_ms) : wait_chat(c, "speaking", wait_ms, tl);
    /* a microphone sends a chunk once it has captured it: its first sound is 60 ms older */
    if (got && barge_ms) *barge_ms = (got - t_speech) / 1e3 + 60;
    if (got) return got;
    if (now - t0 > 15 * G_USEC_PER_SEC) return 0;
  }
}

static int run_server(const fc_server_params *p, fakes *f, int asr_instant, served *sv,
                      client *c) {
  fc_server_params sp = *p;
  char llm[64], asr[64];
  snprintf(llm, sizeof llm, "http://127.0.0.1:%d/v1", f->port);
  snprintf(asr, sizeof asr, "http://127.0.0.1:%d/v1", f->port);
  sp.llm_url = llm;
  sp.port = 0;
  sp.host = "127.0.0.1";
  sp.quiet = 1;
  sp.max_sessions = 1;
  if (asr_instant) {
    sp.asr = "openai";
    sp.asr_url = asr;
  }
  int err = 0;
  memset(sv, 0, sizeof *sv);
  memset(c, 0, sizeof *c);
  if (!(sv->srv = fc_server_create(&sp, &err))) return err;
  g_mutex_init(&sv->lock);
  g_cond_init(&sv->cond);
  sv->thread = g_thread_new("bench-server", server_main, sv);
  g_main_context_invoke(sv->srv->ctx, make_session, sv);
  g_mutex_lock(&sv->lock);
  while (!sv->made) g_cond_wait(&sv->cond, &sv->lock);
  g_mutex_unlock(&sv->lock);
  if (sv->err) return sv->err;
  snprintf(c->base, sizeof c->base, "http://127.0.0.1:%d", fc_server_port(sv->srv));
  g_strlcpy(c->sid, sv->sid, sizeof c->sid);
  c->http = soup_session_new();
  c->events = g_async_queue_new();
  c->stop = g_cancellable_new();
  c->reader = g_thread_new("bench-sse", sse_main, c);
  g_usleep(300000); /* the SSE stream is open */
  return 0;
}

static void stop_server(served *sv, client *c) {
  if (c->reader) {
    g_cancellable_cancel(c->stop);
    g_thread_join(c->reader);
  }
  if (c->events) {
    drain(c);
    g_async_queue_unref(c->events);
  }
  if (c->stop) g_object_unref(c->stop);
  if (c->http) g_object_unref(c->http);
  if (sv->thread) {
    fc_server_quit(sv->srv);
    g_thread_join(sv->thread);
  }
  if (sv->srv) fc_server_destroy(sv->srv);
  if (sv->thread) {
    g_mutex_clear(&sv->lock);
    g_cond_clear(&sv->cond);
  }
}

/* The question as a microphone hears it: espeak's US Klatt voice (what pocketsphinx hears best
 * of espeak) as PCM16. */
static int question(int16_t **out, size_t *n) {
  fc_speech sp;
  fc_tts_params tp = {.voice = "en-us+klatt"};
  int err = fc_tts_speak(QUESTION, &tp, &sp);
  if (err) return err;
  *out = g_new(int16_t, sp.audio.n);
  for (size_t i = 0; i < sp.audio.n; i++) {
    float v = sp.audio.samples[i] * 32767;
    (*out)[i] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
  }
  *n = sp.audio.n;
  fc_speech_free(&sp);
  return 0;
}

static void voice_round(const fc_server_params *p, fakes *f, int instant, int turns,
                        const int16_t *q, size_t nq, double frame[3], double asr[3],
                        double barge[3], int *fails) {
  served sv;
  client c;
  double *v = g_new0(double, turns), *a = g_new0(double, turns), *b = g_new0(double, turns);
  int n = 0, nb = 0, err = run_server(p, f, instant, &sv, &c);
  if (!err) {
    char url[256];
    snprintf(url, sizeof url, "ws%s/ws/audio?sessionid=%s&mode=chat", c.base + 4, c.sid);
    SoupMessage *m = soup_message_new("GET", url);
    fc_wsc *w = fc_wsc_connect(m, NULL, NULL, 10, NULL, "bench microphone", &err);
    g_object_unref(m);
    char stop[80], forever[160];
    snprintf(stop, sizeof stop, "{\"sessionid\":\"%s\"}", c.sid);
    snprintf(forever, sizeof forever, "{\"sessionid\":\"%s\",\"text\":\"ENDLESS\","
             "\"type\":\"chat\"}", c.sid);
    for (int i = 0; w && i < turns; i++) {
      double tl[5], ms = -1;
      if (voice_turn(&c, w, q, nq, tl, NULL) && tl[4] >= 0) {
        v[n] = tl[4];
        a[n++] = tl[0];
      } else {
        (*fails)++;
      }
      post(&c, "/interrupt_talk", stop);
      g_usleep(300000);
      drain(&c);
      if (!barge) continue;
      /* barge-in: the user speaks over an endless answer */
      if (post(&c, "/human", forever) == 200 && wait_chat(&c, "speaking", 10000, NULL) &&
          voice_turn(&c, w, q, nq, NULL, &ms) && ms >= 0)
        b[nb++] = ms;
      else
        (*fails)++;
      static const int16_t quiet[960];
      for (int k = 0; k < 20; k++) { /* silence ends the segment (its turn is then cut) */
        fc_wsc_send_binary(w, quiet, sizeof quiet);
        fc_wsc_pump(w);
        g_usleep(60000);
      }
      g_usleep(500000);
      post(&c, "/interrupt_talk", stop);
      g_usleep(300000);
      drain(&c);
    }
    fc_wsc_close(w);
  }
  if (err) *fails += turns;
  stop_server(&sv, &c);
  pcts(v, n, frame);
  pcts(a, n, asr);
  if (barge) pcts(b, nb, barge);
  g_free(v);
  g_free(a);
  g_free(b);
}

int fc_server_bench_chat(const fc_server_params *p, int turns, fc_chat_bench *out) {
  memset(out, 0, sizeof *out);
  out->turns = turns;
  fakes f = {0};
  int err = 0;
  if (fakes_start(&f, &err)) return err;
  int16_t *q = NULL;
  size_t nq = 0;
  if ((err = question(&q, &nq))) goto done;
  out->hangover_ms = p->vad_hangover_ms > 0 ? p->vad_hangover_ms : 500;

  /* typed turns and interrupts */
  served sv;
  client c;
  double *a = g_new0(double, turns), *b = g_new0(double, turns), *x = g_new0(double, turns),
         *y = g_new0(double, turns);
  int na = 0, ni = 0;
  if (!(err = run_server(p, &f, 0, &sv, &c))) {
    char *say = g_strdup_printf("{\"sessionid\":\"%s\",\"text\":\"How is the weather?\","
                                "\"type\":\"chat\",\"interrupt\":true}", c.sid);
    char *forever = g_strdup_printf("{\"sessionid\":\"%s\",\"text\":\"ENDLESS\",\"type\":\"chat\","
                                    "\"interrupt\":true}", c.sid);
    char *stop = g_strdup_printf("{\"sessionid\":\"%s\"}", c.sid);
    for (int i = 0; i < turns; i++) {
      double tl[5];
      drain(&c);
      if (post(&c, "/human", say) == 200 && wait_chat(&c, "speaking", 10000, tl) && tl[4] >= 0) {
        a[na] = tl[4];
        b[na++] = tl[4] - tl[2];
      } else {
        out->failed++;
      }
      g_usleep(200000);
      /* an endless answer, interrupted while it streams */
      drain(&c);
      g_mutex_lock(&f.lock);
      f.disconnected = 0;
      g_mutex_unlock(&f.lock);
      if (post(&c, "/human", forever) != 200 || !wait_chat(&c, "speaking", 10000, NULL)) {
        out->failed++;
        continue;
      }
      g_usleep(300000);
      gint64 t0 = g_get_monotonic_time();
      post(&c, "/interrupt_talk", stop);
      gint64 t_end = wait_chat(&c, "cancelled", 5000, NULL);
      gint64 t_gone = 0;
      for (int k = 0; k < 500 && !t_gone; k++) {
        g_mutex_lock(&f.lock);
        t_gone = f.disconnected;
        g_mutex_unlock(&f.lock);
        if (!t_gone) g_usleep(1000);
      }
      if (t_end && t_gone) {
        x[ni] = (t_end - t0) / 1e3;
        y[ni++] = (t_gone - t0) / 1e3;
      } else {
        out->failed++;
      }
      g_usleep(200000);
    }
    g_free(say);
    g_free(forever);
    g_free(stop);
  }
  stop_server(&sv, &c);
  pcts(a, na, out->typed_first_frame_ms);
  pcts(b, na, out->typed_after_sentence_ms);
  pcts(x, ni, out->interrupt_sse_ms);
  pcts(y, ni, out->interrupt_llm_closed_ms);
  g_free(a), g_free(b), g_free(x), g_free(y);
  if (err) goto done;
  voice_round(p, &f, 0, turns, q, nq, out->voice_first_frame_ms, out->voice_asr_ms,
              out->barge_in_ms, &out->failed);
  voice_round(p, &f, 1, turns, q, nq, out->instant_first_frame_ms, out->instant_asr_ms, NULL,
              &out->failed);
done:
  g_free(q);
  fakes_stop(&f);
  return err;
}
