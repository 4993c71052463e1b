/* Private to src/server: the server, its sessions, and the pieces that share them.
 *
 * Threads and what they own:
 *  - main loop (GLib): HTTP/WS/SSE handlers, session create/close, SSE delivery, the live
 *    outputs' answer/state callbacks (marshalled here), finishing requests paused for workers,
 *    the chats' LLM streams (chat.c);
 *  - worker pool (GThreadPool, one per core): speech synthesis, upload decoding, frame
 *    production into a session's ready queue (its lip-sync requests go to the device
 *    scheduler and the worker waits for them; composing runs on the worker), stopping
 *    recordings;
 *  - the device scheduler's thread (src/sched): every lip-sync batch, gathered across
 *    sessions, one backend call at a time;
 *  - pacer thread: every 40 ms takes one frame per session (ready queue, else produced late on
 *    the spot, else an idle frame) and pushes it to the live output and the recorder.
 * Locks: srv->lock guards the session table; s->lock guards a session's stream (held while a
 * worker produces frames, which includes waiting for the lip-sync batch); s->q_lock guards its
 * ready queue and is only ever held for a few instructions; s->out_lock guards its live output
 * and recorder. Order: s->lock before s->q_lock. The pacer never waits for a session: it takes
 * q_lock (brief) and only try-locks s->lock and out_lock, so one session's production or
 * closing never stalls the other sessions' frames. Sessions are reference counted; the table
 * holds one reference. */
#ifndef FC_SERVER_INTERNAL_H
#define FC_SERVER_INTERNAL_H

#include "facecast/audio.h"
#include "media/live.h"
#include "media/sink.h"
#include "sched/sched.h"
#include "stream/lipsync_pool.h"
#include "facecast/server.h"
#include "facecast/stream.h"

#include <glib.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#define FC_READY_FRAMES 4 /* frames produced ahead of the pacer per session (160 ms) */
/* A counter with one writer read by other threads (see fc_session's pacer fields). */
#define FC_STAT_SET(field, value)                                                             \
  do {                                                                                        \
    __typeof__(field) v_ = (value);                                                           \
    __atomic_store(&(field), &v_, __ATOMIC_RELAXED);                                          \
  } while (0)
#define FC_STAT_GET(field)                                                                    \
  __extension__({                                                                             \
    __typeof__(field) v_;                                                                     \
    __atomic_load(&(field), &v_, __ATOMIC_RELAXED);                                           \
    v_;                                                                                       \
  })
/* A WebSocket message (all its fragments): microphone audio comes in 20-100 ms pieces. */
#define FC_WS_MAX_MESSAGE (1 << 20)

typedef struct fc_recorder fc_recorder;
typedef struct fc_wsout fc_wsout;

typedef struct fc_ready_slot {
  uint8_t *i420;
  fc_i420_delta held; /* what i420 holds (frames are copied in by rectangles where they can) */
  int16_t pcm[FC_SAMPLES_PER_FRAME];
  fc_frame_info info;
} fc_ready_slot;

/* Frame lateness histogram bucket bounds, in ms (a last bucket for +Inf). */
#define FC_LATE_BUCKETS 8
extern const double fc_late_bounds_ms[FC_LATE_BUCKETS];

/* A conversation turn's milestones after its start (t0: the end of the user's speech for a
 * spoken turn, the request for a typed one), in the order they come; /metrics keeps a
 * histogram of each (metrics.c). */
enum { FC_TURN_ASR, FC_TURN_TOKEN, FC_TURN_SENTENCE, FC_TURN_AUDIO, FC_TURN_FRAME, FC_TURN_STAGES };
#define FC_TURN_BUCKETS 12
extern const double fc_turn_bounds_s[FC_TURN_BUCKETS];
extern const char *const fc_turn_stage_names[FC_TURN_STAGES];
/* Seconds a session stayed open, 10 s to 2 h (metrics.c). */
#define FC_LIFE_BUCKETS 9
extern const double fc_life_bounds_s[FC_LIFE_BUCKETS];
typedef struct fc_turn_timeline {
  uint32_t turn;       /* 0: none */
  int voice;
  gint64 t0, said;     /* µs, monotonic; said: when the LLM was asked */
  gint64 at[FC_TURN_STAGES]; /* 0: not yet */
  uint32_t first_utt;  /* the stream utterance of its first audio */
} fc_turn_timeline;

typedef struct fc_session fc_session;

/* A tick (40 ms) is cut into this many slots, and each session is sent in one of them, so that
 * the sessions' encoders do not all wake in the same millisecond (pacer.c). */
#define FC_PACER_PHASES 8

#define FC_SERVER_MAX_DEVICES FC_LIPSYNC_POOL_MAX_DEVICES

typedef struct fc_server {
  fc_server_params p;
  GMainContext *ctx;
  GMainLoop *loop;
  SoupServer *soup;
  struct fc_listener *listener; /* accepts connections for soup (listener.h) */
  int port;
  char *web_dir, *record_dir;
  int own_record_dir, record_lock; /* record_lock: held on our own folder (core/stale.h) */

  fc_avatar *avatar;       /* the server's default avatar (--avatar) */
  GMutex avatar_lock;      /* avatar_cache */
  GHashTable *avatar_cache; /* pack id → struct fc_avatar_ref*: avatars sessions chose */
  fc_lipsync *lipsync;
  /* Scheduled lip-sync (src/stream/lipsync_pool.h): every session's and render's frames go
   * through it, so a backend sees batches across sessions (and one call at a time). NULL with
   * solo_batches: then solo_lock serialises backend calls. sched is its scheduler (figures). */
  fc_lipsync_pool *pool;
  fc_sched *sched;
  GMutex solo_lock;
  uint64_t solo_calls, solo_frames;
  /* One backend per compute device ("--device cuda:0,cuda:1"); lipsync is devs[0]'s. The
   * pool places each session on the least-loaded device. */
  struct fc_server_device {
    fc_lipsync *ls;
    int gpu; /* N of "cuda[:N]", else -1 (for the benchmark's GPU readings) */
  } devs[FC_SERVER_MAX_DEVICES];
  int n_devs;
  int gpu; /* the lip-sync devices are GPUs: a frame costs a batch's round trip, not CPU work */

  struct fc_llm *llm;     /* chat.c: the LLM for /human type=chat; NULL without --llm-url */
  struct fc_voice *voice; /* say.c: the TTS service; NULL: the embedded espeak-ng voice */
  struct fc_asr *asr;       /* listen.c: the ASR, made on first use (under asr_lock) */
  GMutex asr_lock;
  GThreadPool *listen_workers; /* the ears' jobs: ASR decoding, or waiting for a service */
  GThreadPool *say_workers; /* with a TTS service, FC_JOB_SAY runs here: its threads wait on
                             * the network for whole sentences, the compute pool must not */
  struct fc_keys *keys;   /* --api-keys: control routes want a key; NULL: open server */
  struct fc_fleet *fleet; /* fleet.h: --redis, the sessions of several nodes; NULL: one node */
  struct fc_push_out *push; /* push.c: the push transport's sessions "0".. (n_push of them) */
  int n_push;
  GMutex lock;            /* sessions table */
  GHashTable *sessions;   /* id → fc_session* (one reference) */
  GHashTable *recordings; /* session id → fc_recording: its last finished one (main loop) */
  GThreadPool *workers;

  /* The server's one webhook sender (jobs/webhook.h): the task tables' notify URLs go through
   * it, and /metrics reports its failures; made before them, freed after them. */
  struct fc_webhook *webhook;
  struct fc_avatar_tasks *avatar_tasks; /* src/jobs/avatars.c */
  struct fc_tasks *render_tasks;       /* src/jobs/renders.c (jobs/tasks.h) */
  struct fc_videos *videos;            /* src/jobs/videos.c: /v1/videos, its store and runner */

  /* Pacer threads: each paces the sessions whose shard is its index (pacer.c). */
  struct fc_pacer *pacers;
  int n_pacers;
  gint next_shard;
  gint stopping;
  int closing; /* main loop: fc_server_destroy has begun; requests are answered 503 */
  GMutex stat_lock;   /* the pacers' shared counters below */

  /* Pacer-written counters, under stat_lock (/metrics copies them under it too). */
  uint64_t late_hist[FC_LATE_BUCKETS + 1];
  double late_sum_ms;
  uint64_t frames_out, frames_idle, frames_late, ticks_skipped;
  uint64_t ticks_busy; /* a session sent nothing: its stream was busy producing (pacer only) */
  uint64_t sessions_created, sessions_rejected;
  gint production_failures; /* frame productions that failed (their speech dropped) */
  /* Per-session counters of the sessions closed so far (under lock, added as each leaves
   * `sessions`), so /metrics' totals never fall when a session goes. */
  uint64_t closed_infer, closed_dropped, closed_enc_late;
  uint64_t closed_ws_dropped[2]; /* WebSocket streams' video and audio messages dropped */
  /* Conversation turns' milestones (main loop only: written and rendered there) */
  uint64_t turn_hist[FC_TURN_STAGES][FC_TURN_BUCKETS + 1], turn_count[FC_TURN_STAGES];
  double turn_sum[FC_TURN_STAGES];
  /* Closed sessions' lifetimes (under lock, added as each leaves `sessions`): how long people
   * stay, and with _sum the session-seconds served. */
  uint64_t life_hist[FC_LIFE_BUCKETS + 1];
  double life_sum_s;
  /* Benchmarks only: every frame's lateness in ms (preallocated; NULL otherwise). */
  float *late_samples;
  size_t late_cap, late_n;
} fc_server;

struct fc_session {
  gint refs;
  fc_server *srv;
  fc_avatar *avatar; /* the session's: srv->avatar, or one from srv->avatar_cache (referenced) */
  char id[40];       /* a random UUID: knowing it is what lets a client act on the session */
  char owner[64];    /* the API key (its name) that opened it; "" without keys */
  uint64_t serial;   /* 1, 2, ...: names it in logs and /metrics without giving the id away */
  gint64 opened_us;  /* g_get_monotonic_time() at creation */
  int whep;
  int push;  /* a push transport's session (push.c): made at start, lives until the end */
  int shard; /* the pacer thread that sends its frames */
  int phase; /* which of the pacer's FC_PACER_PHASES slots of a tick it is sent in */

  GMutex lock;        /* the stream (and closed) */
  fc_stream *stream;
  gint closed;        /* set once (atomic: the pacers read it without the lock) */
  gint pending;       /* atomic: the stream can make a frame now (fc_stream_producible) */
  gint jobs_waiting;  /* atomic: speech requests queued for a worker (FC_SESSION_MAX_WAITING) */
  gint speech;        /* atomic: the stream holds speech not yet made into frames
                       * (both set under s->lock by whoever changed that; read without it) */
  GMutex q_lock;      /* the ready queue, fill_queued and pushed_utt */
  fc_ready_slot ready[FC_READY_FRAMES];
  int r_head, r_count, r_peeked; /* r_peeked: the head slot is being pushed by the pacer */
  int fill_queued;
  uint32_t pushed_utt; /* utterance whose first frame the pacer pushed and last not yet */

  /* Conversation (chat.c). chat and chat_tts: main loop only. chat_q: sentences waiting to
   * be spoken (the chat's, and /human echo's when a TTS service speaks), emptied in order by
   * one FC_JOB_SAY job (chat_job set while one is queued or running), both under chat_lock,
   * and so is say_cancel, the TTS request running now. chat_gen: bumped under s->lock when a
   * turn is cancelled; a sentence is pushed only if chat_gen has not changed since it was
   * queued. ref_audio/ref_text: the session's reference voice (POST /offer refaudio, reftext),
   * set before anyone else sees the session. */
  struct fc_chat *chat;
  struct fc_say_opts *chat_tts;
  GMutex chat_lock;
  GQueue chat_q;
  int chat_job;
  gint chat_gen;
  GCancellable *say_cancel;
  char *ref_audio, *ref_text;
  int ref_local; /* ref_audio was checked to lie under a --media-dir */

  /* lip-sync through the pool: the pulling thread waits until its frames are done */
  fc_lipsync_client *lsc;

  /* What the last few utterances say (SSE's "text"): written by the speaking worker as it
   * pushes one, read by the main loop when its start and end are sent. Its own lock, so the
   * main loop never waits for s->lock (held through whole lip-sync batches). */
  GMutex text_lock;
  struct {
    uint32_t utt;
    char *text;
  } texts[8];
  unsigned text_next;

  GMutex out_lock;
  fc_sink *out; /* the viewer's output (a WebRTC peer; the benchmark's null output) */
  fc_recorder *rec;
  int64_t rec_first; /* stream frame index of the recording's first frame; -1: none yet */

  /* Main loop only. */
  fc_live_state state;
  SoupServerMessage *offer_msg; /* paused /offer or /whep request awaiting the answer */
  GList *sse;                   /* SoupServerMessage* streaming events */
  GList *ws;                    /* SoupWebsocketConnection* of microphone audio */
  fc_wsout *wsout;              /* WS /ws/stream: the WebSocket that is its output, or NULL */
  guint connect_timer;          /* closes a session whose peer never connects */
  uint32_t heard;               /* utterance between its SSE start and end */
  fc_turn_timeline tl;          /* the conversation turn running now (chat.c) */
  struct fc_ear *ear;           /* voice chat: the microphone's VAD and ASR (listen.c) */
  int listen_mode;              /* FC_LISTEN_CHAT or _ECHO (listen.h) */

  /* Pacer only; /metrics and closing read them from other threads, so the pacer stores them
   * with FC_STAT_SET and they read them with FC_STAT_GET (relaxed atomics: no order, no tear). */
  int still_run; /* idle frames in a row showing the same still picture */
  uint64_t out_frames, infer_frames, dropped_frames;
  uint64_t late_frames; /* ticks it sent nothing (busy) or a frame made late, on the spot */
  int64_t log_t0;
  uint64_t log_out0, log_infer0;
  uint64_t infer_total; /* written under q_lock by producers */
  double infer_fps, final_fps; /* over the last 100 frames (LiveTalking's two health figures) */
};

/* session.c */
/* A session on avatar av (srv->avatar or one from fc_server_avatar_get, whose reference it
 * takes over: released when the session is freed), belonging to the API key named owner
 * (NULL: none). */
fc_session *fc_session_new(fc_server *srv, fc_avatar *av, const char *owner, int *err);
/* The same with a given id instead of a random one (the push session's "0"): FC_EBUSY when
 * a session has it already. */
fc_session *fc_session_new_id(fc_server *srv, fc_avatar *av, const char *owner, const char *id,
                              int *err);
/* The live output's settings for s (size, clock, the server's encoder options; a still
 * avatar gets a constant quantizer, see fc_live_params.video_qp). */
fc_live_params fc_session_live_params(const fc_server *srv, const fc_session *s, fc_live_kind k);
void fc_session_ref(fc_session *s);
void fc_session_unref(fc_session *s);
/* Looks up and references a session; NULL when unknown or closed. */
fc_session *fc_session_find(fc_server *srv, const char *id);
/* Main loop: removes it from the table, stops its output, recorder, SSE and WS clients. */
void fc_session_close(fc_session *s, const char *why);
/* After the stream changed (speech pushed): notes whether frames are pending and queues a fill
 * job unless one is queued; call with s->lock held. */
void fc_session_want_fill_locked(fc_session *s);
/* Queues a fill job when speech is pending, the queue has room and none is queued; any thread
 * (takes q_lock; s->lock may be held). */
void fc_session_want_fill(fc_session *s);
/* Worker: produces frames into the ready queue. The _locked form expects s->lock held. */
void fc_session_fill(fc_session *s);
void fc_session_fill_locked(fc_session *s, int max);
int fc_session_is_speaking(fc_session *s);
/* Interrupts speech; posts the cut utterance's end to SSE. Any thread. */
void fc_session_interrupt(fc_session *s);
/* Posts an SSE event (start/end of an utterance) to the main loop. Any thread. */
void fc_session_post_event(fc_session *s, const char *type, uint32_t utt);
/* Main loop: adds an event stream (the response of GET /sse). */
void fc_session_add_sse(fc_session *s, SoupServerMessage *msg);
/* Any thread: utterance utt says text (its SSE events carry it). */
void fc_session_utt_text(fc_session *s, uint32_t utt, const char *text);
/* Main loop: writes an utterance's start or end to the session's SSE clients, as LiveTalking
 * does: an unnamed event, data {"status": type, "text": what it says (when known), ...}. */
void fc_session_send_sse(fc_session *s, const char *type, uint32_t utt);
/* Main loop: writes "event: NAME" with one JSON object as its data to the SSE clients. */
void fc_session_send_sse_json(fc_session *s, const char *name, const char *json);
/* The same from any thread: sent from the main loop, after events posted before it. name must
 * be a string literal (kept by pointer). */
void fc_session_post_sse_json(fc_session *s, const char *name, const char *json);

/* chat.c: conversation. fc_server_llm_start makes srv->llm when --llm-url is set. The session
 * functions run on the main loop: _say starts a turn answering text (FC_EUNSUPPORTED without an
 * LLM), _cancel stops the running turn and drops its queued sentences (the stream itself is cut
 * by fc_session_interrupt; returns the turn cancelled, 0 if none), _free at close. _speak is
 * the FC_JOB_SAY job (worker). */
int fc_server_llm_start(fc_server *srv, int *err);
/* What a request says about its voice (LiveTalking's "tts" object and facecast's "voice");
 * NULL fields: the session's, then the server's. ref_local: ref_audio may be read from this
 * machine (checked to lie under a --media-dir). */
typedef struct fc_say_opts {
  char *voice, *emotion, *ref_audio, *ref_text;
  int ref_local;
} fc_say_opts;
void fc_say_opts_free(fc_say_opts *o);
fc_say_opts *fc_say_opts_copy(const fc_say_opts *o);
int fc_server_voice_start(fc_server *srv, int *err);
/* Parses a request's voice: "voice" and LiveTalking's "tts" object ({voice, emotion, ref_file,
 * ref_text}) of o, plus refaudio/reftext when session_keys (POST /offer). Reference audio the
 * provider reads from this machine must lie under a --media-dir. 0, or -1 after answering. */
int fc_http_say_opts(fc_server *srv, SoupServerMessage *msg, JsonObject *o, int session_keys,
                     fc_say_opts *out);
/* jobs/avatars.c: a server path a request may name: under a --media-dir, existing, a regular
 * file. 0 with the resolved path in *resolved (free()), or the HTTP status after answering. */
int fc_media_path_check(fc_server *srv, SoupServerMessage *msg, const char *path,
                        char **resolved);
/* t0: when the turn began (a spoken turn: the end of the speech; 0: now), asr_at: when its
 * transcript came (0: typed). */
int fc_session_chat_say(fc_session *s, const char *text, const fc_say_opts *tts, gint64 t0,
                        gint64 asr_at, uint32_t *turn);
/* Timeline milestones (main loop): the turn's first audio went into the stream as utterance
 * utt; an utterance's first frame went out (fc_session_send_sse "start"). */
void fc_session_turn_audio(fc_session *s, uint32_t turn, uint32_t utt, gint64 at);
void fc_session_turn_frame(fc_session *s, uint32_t utt);
/* The same first-audio milestone from any thread (posted to the main loop in order). */
void fc_session_post_turn_audio(fc_session *s, uint32_t turn, uint32_t utt);
/* /human echo through a TTS service: text cut into sentences and queued like the chat's;
 * FC_EAGAIN (429) past FC_SAY_MAX_LINES waiting (a chat's answer is bounded by the LLM
 * client's 16 KiB cap, and a new turn empties the queue). */
#define FC_SAY_MAX_LINES 200
int fc_session_say_text(fc_session *s, const char *text, const fc_say_opts *tts);
uint32_t fc_session_chat_cancel(fc_session *s);
void fc_session_chat_free(fc_session *s);
/* say.c: the session's queue of sentences to speak (see its opening note). */
void fc_session_say_line(fc_session *s, uint32_t turn, const char *text, const fc_say_opts *tts);
int fc_session_say_cancel(fc_session *s); /* returns how many queued sentences it dropped */
void fc_session_say_run(fc_session *s);   /* the FC_JOB_SAY job */

/* server.c: the avatar a session asked for — NULL, "", "default" or the server's own id: the
 * server's avatar; another id: that avatar's pack in fc_avatar_dir(), opened on first use and
 * shared by the sessions on it (FC_ENOTFOUND, FC_EFORMAT, ... otherwise). Any thread; opening a
 * pack reads it, so the caller may wait a moment. fc_server_avatar_put releases one. */
fc_avatar *fc_server_avatar_get(fc_server *srv, const char *name, int *err);
void fc_server_avatar_put(fc_server *srv, fc_avatar *av);
/* server.c: starts the lip-sync pool over the devices' backends. */
int fc_server_sched_start(fc_server *srv);

/* push.c: the push transports (--transport rtmp: session "0"; rtcpush: sessions "0".. one per
 * --max-sessions), made at start, whose outputs are pushed to a server instead of answering a
 * viewer. _check refuses a transport or URL it cannot use (server creation, before anything
 * starts); _start makes the sessions (nothing for webrtc); _stop drops the server's
 * references (after the sessions were closed); _json appends ,"transport":... and the push
 * outputs' state to /healthz's data and _metrics their series. Main loop (start and stop);
 * _json and _metrics from any. */
typedef struct fc_push_out {
  fc_server *srv;
  fc_session *s; /* referenced */
  char *url;     /* where it pushes: --push-url, + its number for "1".. (rtcpush) */
} fc_push_out;
int fc_push_check(const fc_server_params *p);
int fc_push_start(fc_server *srv);
void fc_push_stop(fc_server *srv);
/* A push URL as logs and the admin API show it: without the stream name (often a key). */
void fc_push_shown_url(const char *url, char *out, size_t n);
void fc_push_json(fc_server *srv, GString *out);
void fc_push_metrics(fc_server *srv, GString *out);

/* pacer.c */
int fc_pacer_start(fc_server *srv);
void fc_pacer_stop(fc_server *srv);

/* workers.c: the worker pool and its jobs. */
typedef enum fc_job_kind {
  FC_JOB_FILL,
  FC_JOB_SPEAK,
  FC_JOB_AUDIO,
  FC_JOB_RECORD_STOP,
  FC_JOB_SAY /* the chat's queued sentences (chat.c) */
} fc_job_kind;
typedef struct fc_job {
  fc_job_kind kind;
  fc_session *s;          /* referenced */
  SoupServerMessage *msg; /* paused request to answer when done (referenced), or NULL */
  char *text, *voice;     /* SPEAK */
  GBytes *data;           /* AUDIO: the WAV file */
  char *name;             /* AUDIO: its file name, for messages */
  int interrupt;
  fc_recorder *rec; /* RECORD_STOP */
  int counted;      /* in s->jobs_waiting until freed */
} fc_job;
void fc_job_free(fc_job *j);
#define FC_SESSION_MAX_WAITING 8 /* /human and /humanaudio requests of a session in the queue */
void fc_job_run(gpointer job, gpointer srv);
int fc_job_push(fc_server *srv, fc_job *job);

/* A finished recording, downloadable at GET /record/{session id}. At most FC_MAX_RECORDINGS
 * are listed (one per session), the oldest forgotten first; in the server's own temporary
 * folder its file goes with it, in a --record-dir every file stays. */
#define FC_MAX_RECORDINGS 256
typedef struct fc_recording {
  char *path;
  char owner[64]; /* the API key of its session ("" without) */
  gint64 made;
  int remove_file; /* in the server's own folder: the file goes with the entry */
} fc_recording;
void fc_recordings_add(fc_server *srv, char *id, fc_recording *r); /* main loop; takes both */
void fc_recording_free(gpointer r);                                /* removes its file too */

/* recorder.c: MP4 recording fed by the pacer without ever blocking it. */
fc_recorder *fc_recorder_start(const char *path, int w, int h, int *err);
/* The recording as an output: a push copies the frame into a bounded queue; when it is full
 * the frame is dropped (counted). */
fc_sink *fc_recorder_sink(fc_recorder *r);
/* Stops the thread, finishes the file; returns 0 or an error. Frees r. Blocks: call it from a
 * worker. */
int fc_recorder_finish(fc_recorder *r, char **path);

/* routes.c: the route table */
void fc_http_register(fc_server *srv);
/* http.c: plumbing */
/* Helpers for the route files: answer 405 / parse a JSON object body (answering 4xx and
 * returning NULL when it is not one) / the early body-size check every POST route needs. */
int fc_http_require_method(SoupServerMessage *msg, const char *m);
int fc_http_has_content_type(SoupServerMessage *msg, const char *want);
JsonObject *fc_http_json_body(SoupServerMessage *msg, JsonParser **parser);
/* A multipart/form-data body: the first part named by one of file_fields (NULL-terminated) as
 * bytes (*file, NULL if absent; its file name in *filename if asked), and the text fields
 * names[0..n) into values[] (g_free them; NULL if absent). -1 after answering 400. */
int fc_http_multipart(SoupServerMessage *msg, const char *const *file_fields, GBytes **file,
                      char **filename, const char *const *names, char **values, int n);
/* Registers a control route: the early request check (body caps, API keys) and the handler,
 * for path and everything below it. Every route is registered through this (or in
 * fc_http_register's table): a path without the early check would read any body. */
void fc_http_route(fc_server *srv, const char *path, SoupServerCallback cb);
/* The early check (http.c) of a control route and of a page (/healthz, static files). */
void fc_http_early_api(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                       gpointer user);
void fc_http_early_page(SoupServer *server, SoupServerMessage *msg, const char *path,
                        GHashTable *q, gpointer user);
#define FC_MAX_AVATAR_UPLOAD (256 * 1024 * 1024) /* a video for avatar creation */
#define FC_MAX_VIDEO_BODY (64 * 1024 * 1024 + 512 * 1024) /* POST /v1/videos multipart: an
                                                            * audio file and the fields */
/* More helpers of http.c for the route files (routes_session.c, routes_speech.c): */
char *fc_http_json_quote(const char *s);               /* a JSON string literal (g_free it) */
int fc_http_status_of(int err);                        /* the HTTP status for an FC_E* code */
int fc_http_is_method(SoupServerMessage *msg, const char *m);
/* A string member, or NULL (answering 400) when absent or of another type. */
const char *fc_http_str_member(SoupServerMessage *msg, JsonObject *o, const char *name);
/* The session the "sessionid" member names, referenced; NULL after answering 400/404. */
fc_session *fc_http_session_of(fc_server *srv, SoupServerMessage *msg, JsonObject *o);
/* The session id names, referenced, if the request may act on it (with API keys: the key that
 * opened it, or no key at all on the routes where the id is the credential); NULL otherwise,
 * without answering. */
fc_session *fc_http_session_find(fc_server *srv, SoupServerMessage *msg, const char *id);
/* The name of the API key the request presented, or NULL (no keys, or none sent). */
const char *fc_http_owner(SoupServerMessage *msg);
/* An optional string member: 0 with *out NULL when absent or null, -1 after answering 400
 * when of another type. */
int fc_http_opt_str(SoupServerMessage *msg, JsonObject *o, const char *name, const char **out);
const char *fc_http_query_get(GHashTable *q, const char *k);
/* Answers with the file's contents (404 JSON when it cannot be read). */
void fc_http_serve_file(SoupServerMessage *msg, const char *file, const char *type);
/* Queues a job that answers msg when done, with msg paused until then. */
void fc_http_queue_paused(fc_server *srv, SoupServerMessage *msg, fc_job *j);
/* The routes (libsoup handlers), registered by fc_http_register. */
#define FC_ROUTE(name)                                                                             \
  void fc_route_##name(SoupServer *server, SoupServerMessage *msg, const char *path,            \
                       GHashTable *q, gpointer user)
FC_ROUTE(offer);
FC_ROUTE(whep);
FC_ROUTE(session);
FC_ROUTE(human);
FC_ROUTE(humanaudio);
FC_ROUTE(interrupt);
FC_ROUTE(is_speaking);
FC_ROUTE(set_audiotype);
FC_ROUTE(record);
FC_ROUTE(sse);
FC_ROUTE(ice_servers);

/* ice.c: the ICE servers (--stun, --turn, $TURN_SECRET) for both ends of a session. */
/* The options' check at start: 0 or FC_EINVAL with a detail. */
int fc_ice_check(const fc_server_params *p);
/* The TURN URL for a new session's ICE agent: params.turn_server, one with fresh time-limited
 * credentials (also in *owned, to g_free after fc_live_create), or NULL (none; turns://). */
const char *fc_ice_session_turn(const fc_server *srv, char **owned);
/* {"iceServers":[...]}, an RTCConfiguration (g_free). */
char *fc_ice_servers_json(const fc_server *srv);
/* The same as RFC 9725 Link headers (rel="ice-server"), appended to h. */
void fc_ice_link_headers(const fc_server *srv, SoupMessageHeaders *h);
void fc_route_ws_audio(SoupServer *server, SoupServerMessage *msg, const char *path,
                       SoupWebsocketConnection *conn, gpointer user);

/* wsstream.c: WS /ws/stream, a session whose output is the WebSocket (see its opening note).
 * _check is the path's plain handler, run before the upgrade (refusals as HTTP errors). */
void fc_route_ws_stream_check(SoupServer *server, SoupServerMessage *msg, const char *path,
                              GHashTable *q, gpointer user);
void fc_route_ws_stream(SoupServer *server, SoupServerMessage *msg, const char *path,
                        SoupWebsocketConnection *conn, gpointer user);
/* Main loop: a text message to the stream's client (a speech event's JSON); NULL: no-op. */
void fc_wsout_send_text(fc_wsout *o, const char *text, size_t n);
/* Main loop, from fc_session_close: _close closes the WebSocket with why (the session's end
 * no longer follows its close); _free after the session's output is destroyed. */
void fc_wsout_close(fc_wsout *o, const char *why);
void fc_wsout_free(fc_wsout *o);
/* Any thread while the session holds it: video frames and audio messages dropped for a slow
 * client, and the bytes waiting for it now. */
void fc_wsout_stats(fc_wsout *o, uint64_t *video_dropped, uint64_t *audio_dropped,
                    uint64_t *backlog);
/* A client's text message: FC_WSS_CMD_KEYFRAME, or -1 with why (a sentence) filled in. Pure:
 * no server needed (the ws fuzz target and tests call it). */
#define FC_WSS_CMD_KEYFRAME 1
int fc_wsstream_parse_client(const char *data, size_t n, char *why, size_t why_n);

/* src/jobs/avatars.c: the avatar studio's HTTP tasks (/api/avatar/task...). */
void fc_avatar_tasks_register(fc_server *srv);
void fc_avatar_tasks_free(fc_server *srv);
/* src/jobs/renders.c: bulk MP4 renders through the scheduler (POST/GET/DELETE /api/render). Free
 * before the scheduler: a running render is its client. */
void fc_render_tasks_register(fc_server *srv);
/* The lip-sync scheduler's largest batch (server.c sizes it; the admin API reports it as
 * LiveTalking's batch_size). */
static inline int fc_server_max_batch(const fc_server *srv) { return srv->gpu ? 128 : 16; }
/* src/jobs/videos.c: bulk videos (/v1/videos): the job store, the runner's render slots, the
 * retention sweep. _start registers the routes (0 or an error with its detail); _free before
 * the lip-sync pool (renders are its clients); _metrics appends the job families. */
int fc_videos_start(fc_server *srv, int *err);
void fc_videos_log_start(fc_server *srv); /* says how it runs, once the server has started */
void fc_videos_free(fc_server *srv);
void fc_videos_metrics(fc_server *srv, GString *out);
/* admin.c: GET /api/admin/config, /api/admin/sessions; stopping a session. */
void fc_admin_register(fc_server *srv);
void fc_render_tasks_free(fc_server *srv);
/* Answers {code:-1,msg} with an HTTP status. */
void fc_http_error(SoupServerMessage *msg, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void fc_http_ok(SoupServerMessage *msg, const char *data_json);

/* metrics.c */
/* owner: the API key of the request (NULL: none); with --metrics-session-ids and keys, only
 * that key's sessions are listed by id. */
void fc_metrics_render(fc_server *srv, GString *out, const char *owner);
void fc_metrics_late(fc_server *srv, double ms);
/* metrics_process.c: the process' CPU, memory and descriptors under the usual process_* names */
void fc_metrics_process(GString *out);
/* A session leaving the table after `seconds` open (srv->lock held). */
void fc_metrics_session_closed(fc_server *srv, double seconds);

#endif
