/* facecast serve: real-time talking sessions over HTTP + WebRTC.
 *
 * One GLib main loop runs HTTP, WebSocket and SSE (libsoup 3) and never blocks: speech
 * synthesis and uploads are decoded on a worker pool, frames are produced by that pool into
 * each session's small ready queue, and one pacer thread releases a frame per session every
 * 40 ms to its live output (WebRTC, or for the push session an RTMP server) and recorder.
 * The HTTP API is LiveTalking's, so its web clients work unchanged; the page in web/ is
 * served at /. */
#ifndef FACECAST_SERVER_H
#define FACECAST_SERVER_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_server fc_server;

typedef struct fc_server_params {
  const char *host;        /* listen address; NULL = all interfaces */
  int port;                /* default 8010; 0 = any free port (see fc_server_port) */
  const char *avatar;      /* portrait; NULL = the default avatar (head-and-shoulders) */
  int width, height;       /* output size; default 512×512 */
  const char *model;       /* lip-sync backend; NULL = parametric */
  const char *checkpoint;  /* weights for neural backends (wav2lip) */
  const char *device;      /* where a neural backend runs: "cpu" (default), "cpu-ref" */
  int max_sessions;        /* default 5 (LiveTalking's max_session) */
  const char *stun_server; /* "stun://host:port" or NULL */
  const char *turn_server; /* "turn(s)://user:pass@host:port" (or host:port with turn_secret)
                            * or NULL; also handed to browsers (GET /api/ice-servers, WHEP's
                            * Link headers) */
  const char *turn_secret; /* coturn's static-auth-secret: time-limited TURN credentials per
                            * client and session instead of turn_server's user; NULL = none */
  int ice_port_min, ice_port_max; /* the UDP/TCP ports of sessions' ICE host candidates
                            * (--ice-ports MIN-MAX); 0, 0 = any */
  int ice_no_tcp;          /* no ICE-TCP candidates (--ice-tcp off) */
  const char *cors_origins; /* origins other pages may call from: "*" (NULL, the default, as
                             * LiveTalking), "none", or a comma-separated list of origins */
  const char *web_dir;     /* static files served at /; NULL = the built-in web/ folder */
  const char *record_dir;  /* where recordings go; NULL = a private temporary folder */
  int quiet;               /* no per-session fps log lines */
  /* How sessions leave: NULL/"webrtc", a viewer per session (/offer, /whep); "rtmp", also
   * session "0", made at start and pushed to push_url (LiveTalking's --transport rtmp). */
  const char *transport;
  const char *push_url;    /* rtmp://host[:port]/app/stream for "rtmp" */
  const char *x264_preset; /* live video encoder preset; NULL = superfast (see live.h) */
  int opus_complexity;     /* live audio encoder, 1..10; 0 = FC_LIVE_OPUS_COMPLEXITY */
  const char *tls_cert;    /* PEM certificate and key: serve HTTPS/WSS (both or neither) */
  const char *tls_key;
  int max_conns_per_client; /* open connections per client address; 0 = 256, -1 = no cap */
  int header_timeout_s;    /* a request's headers (or TLS handshake) must arrive within; 0 = 15 */
  int body_timeout_s;      /* a request body may pause this long between bytes; 0 = 30 */
  int idle_timeout_s;      /* a connection without a request is closed after; 0 = 60 */
  int write_timeout_s;     /* a response the client has not read for this long; 0 = 60 */
  const char *api_keys;    /* keys file (facecast keys add): control routes want
                            * "Authorization: Bearer KEY", sessions belong to their key;
                            * NULL = an open server (said at start-up) */
  const char *webhook_secret; /* signs notifications (X-Facecast-Signature; src/jobs/webhook.h);
                              * never logged; NULL = unsigned */
  const char *media_dirs;  /* ':'-separated folders whose files avatar tasks may name by path
                            * (video_path/image_path); NULL = uploads only */
  int metrics_session_ids; /* label /metrics' per-session series with the session id (a
                            * credential) instead of its serial number */
  /* Conversation (/human type=chat): an OpenAI-compatible chat completions API. */
  const char *llm_url;     /* its base URL ("http://host:port/v1"); NULL = no chat (501) */
  const char *llm_key;     /* its API key, sent as a bearer token, never logged; NULL = none */
  const char *llm_model;   /* NULL = "gpt-4o-mini" */
  const char *llm_system;  /* the system prompt; NULL = a short one asking for spoken answers */
  int llm_timeout_s;       /* connect, and between two pieces of the answer; 0 = 30 */
  /* Voices (/human echo and chat): a TTS service instead of the embedded espeak-ng voice,
   * which stays the fallback for any sentence the service fails (src/speech/voice.h). */
  const char *tts;           /* NULL/"espeak", openai, edge, gpt-sovits, cosyvoice, fish */
  const char *tts_url;       /* the service; NULL = its usual address */
  const char *tts_key;       /* bearer token, never logged; NULL = none */
  const char *tts_model;     /* openai's model; NULL = "tts-1" */
  const char *tts_voice;     /* the voice when a request names none (espeak's too) */
  const char *tts_ref_audio; /* reference audio for cloning (a WAV here; gpt-sovits: a path on
                              * its server; fish: a WAV here or a reference id) */
  const char *tts_ref_text;  /* what the reference says */
  const char *tts_lang;      /* gpt-sovits' text_lang/prompt_lang; NULL = "auto" */
  int tts_rate;              /* rate of headerless PCM; 0 = the provider's */
  int tts_timeout_s;         /* connect, and between two pieces of audio; 0 = 10 */
  const char *tts_edge_version; /* edge: Sec-MS-GEC-Version; NULL = a recent Edge's */
  /* Ears (voice chat on /ws/audio?mode=chat|echo, and /api/asr): speech recognition. */
  const char *asr;         /* NULL/"pocketsphinx" (loaded on first use), openai, funasr, none */
  const char *asr_url;     /* the service; NULL = its usual local address */
  const char *asr_key;     /* bearer token, never logged */
  const char *asr_model;   /* openai: NULL = "whisper-1"; pocketsphinx: its model folder */
  const char *asr_lang;    /* openai: the language (ISO-639-1); NULL = detected */
  int asr_timeout_s;       /* 0 = 15 */
  int barge_in;            /* user speech stops the avatar (1, the default) or not (0) */
  int vad_hangover_ms;     /* silence that ends a spoken turn; 0 = 500 */
  /* Bulk videos (/v1/videos; src/jobs/videos.c). */
  int render_slots;        /* render threads taking the store's work; 0 = the cores, -1 = none
                            * (this node only submits: another process renders) */
  const char *shared_dir;  /* the jobs' files; NULL = <data dir>/videos */
  const char *redis_url;   /* redis://[[user]:password@]host[:port][/db]: the job store on Redis
                            * and the live fleet's registry; NULL = in this process, one node */
  int worker;              /* `facecast worker`: this node only renders the store's work; its
                            * HTTP answers /healthz and /metrics, nothing else (404) */
  int claim_idle_s;        /* a work item quiet this long (its worker died) is taken over by
                            * another; 0 = 15 */
  int video_retention_s;   /* finished jobs (and files) kept; 0 = 86400 */
  int video_max_active;    /* with API keys, a key's unfinished jobs at most; 0 = 10 */
  int rate_limit_per_min;  /* /v1 requests per key (or client address without keys) and
                            * minute, a token bucket; 0 = 50, -1 = no limit */
  /* Live sessions across machines (src/server/fleet.h): nodes register in Redis (redis_url); a
   * full node's offers go to a node with room, requests follow their session to its node. */
  const char *node_url;    /* http(s)://HOST:PORT others reach this node at; NULL = derived
                            * from the listen address (this machine's name on 0.0.0.0) */
  int fleet_redirect;      /* a full node answers an offer 307 to a node with room instead of
                            * proxying it */
  int solo_batches;        /* benchmarks: no cross-session batching — each session runs its own
                            * batches of 16 frames, one backend call at a time (LiveTalking's
                            * design), instead of the device scheduler */
} fc_server_params;

fc_server_params fc_server_params_default(void);

/* Loads the avatar and backend, starts listening and the pacer. NULL and *err on failure. */
fc_server *fc_server_create(const fc_server_params *p, int *err);
/* The port actually bound. */
int fc_server_port(const fc_server *s);
/* Runs the main loop until fc_server_quit (or SIGINT/SIGTERM when handle_signals). */
int fc_server_run(fc_server *s, int handle_signals);
void fc_server_quit(fc_server *s);
void fc_server_destroy(fc_server *s);

/* The conversation benchmark (facecast bench chat, src/bench/chat.c): `turns` of each kind
 * against zero-think-time fakes of an LLM and a transcription service; each figure is
 * {p50, p95, max} in ms (-1: none measured). */
typedef struct fc_chat_bench {
  int turns, failed, hangover_ms;
  double typed_first_frame_ms[3];    /* /human chat → first speaking frame sent */
  double typed_after_sentence_ms[3]; /* the LLM's first sentence → first speaking frame */
  double voice_first_frame_ms[3];    /* end of speech (VAD endpoint) → first frame, pocketsphinx */
  double voice_asr_ms[3];            /*   … → transcript */
  double instant_first_frame_ms[3];  /* the same with an instant transcription service */
  double instant_asr_ms[3];
  double interrupt_sse_ms[3];        /* /interrupt_talk → SSE chat "cancelled" at the client */
  double interrupt_llm_closed_ms[3]; /* /interrupt_talk → the LLM sees its connection closed */
  double barge_in_ms[3];             /* speech over the avatar (its first sound, captured 60 ms
                                      * before its chunk is sent) → SSE listen "barge-in" */
} fc_chat_bench;
int fc_server_bench_chat(const fc_server_params *p, int turns, fc_chat_bench *out);

/* One run of the serving benchmark: `sessions` live sessions without browsers (the same
 * encoders into fakesinks), `talking` of them speaking all the time, for `seconds`. */
typedef struct fc_serve_bench {
  int sessions, talking;
  double seconds;
  double final_fps;         /* frames per second per session that reached the encoder */
  double kbps;              /* encoded bits per second per session (video and audio) */
  double late_p50_ms, late_p99_ms; /* pacer push time minus deadline, over all frames */
  double encode_delay_ms;   /* mean time from a picture's push to its leaving the encoder */
  double encode_late_pct;   /* % of pictures out more than a frame period after their push */
  double cpu_per_session;   /* CPU cores used by the process per session */
  double mean_batch;        /* frames per lip-sync backend call */
  double batch_p95_ms;      /* backend call time, p95 (scheduler runs only) */
  double gpu_util_pct;      /* the GPUs' utilisation as the driver reports it, mean over the
                             * run and the devices; -1 without GPUs or without the driver */
  double gpu_mem_peak_mb;   /* the GPUs' memory in use at the peak (all devices, every
                             * process), MiB; 0 without */
  unsigned long long dropped, skipped_ticks, late_frames;
  unsigned long long oom_retries; /* batches halved after the device ran out of memory (window) */
  int batch_limit;          /* the scheduler's batch size limit at the end (smallest device) */
  int sessions_alive;       /* sessions still open at the end (none is ever closed by a bench) */
  unsigned long long production_failures; /* frame productions that failed (speech dropped) */
  /* Where the CPU went, by thread (names with their digits dropped: GStreamer's streaming
   * threads are "v:src" for video, "a:src" for audio, the worker pool's "pool-…"): the
   * largest groups as "name 2.9 %, ..." in % of a core per session. */
  char cpu_by_thread[256];
} fc_serve_bench;

int fc_server_bench(const fc_server_params *p, int sessions, int talking, double seconds,
                    fc_serve_bench *out);

#ifdef __cplusplus
}
#endif
#endif
