/* Outputs behind one interface: where a stream's frames go — a viewer over WebRTC, an MP4 file,
 * nothing but the encoders (benchmarks), an RTMP server, and next WHIP and WebSocket. The pacer, the
 * session recorder and the offline render push to whichever they hold the same way; a new
 * output is one ops table (ggml's backends, FFmpeg's muxers), not a change in each of them.
 *
 * An output that connects to a server by itself (the RTMP push) also tells how its connection
 * stands (fc_sink_get_link); the others have no connection of their own to report.
 *
 * A frame is one picture and its audio on one clock: frame `index` shows at index/fps and its
 * n_samples start at first_sample (a session's frames are index × 640 at 16 kHz). Indices and
 * samples only grow; a gap (a frame not pushed) is the picture before it shown longer and, in
 * a file, silence.
 *
 * Ownership. An output embeds its fc_sink and hands out a pointer to it (fc_live_sink,
 * fc_mp4_writer_sink); the sink lives as long as the output, and fc_sink_destroy destroys the
 * output (its own destroy does the same). fc_sink_queued_create wraps a sink, taking it over.
 *
 * Threads. push, finish and destroy from one thread at a time (the pusher's), finish and
 * destroy after the last push; stats from any thread. */
#ifndef FC_MEDIA_SINK_H
#define FC_MEDIA_SINK_H

#include "facecast/picture.h"

#include <glib.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fc_sink_frame {
  int64_t index;
  const uint8_t *i420;        /* width×height I420, contiguous; NULL: the picture before stands */
  const fc_i420_delta *delta; /* what i420 holds against a still base (picture.h), or NULL */
  const int16_t *pcm;         /* the frame's audio: mono, the output's rate */
  size_t n_samples;
  int64_t first_sample;
} fc_sink_frame;

typedef struct fc_sink_stats {
  uint64_t frames_pushed;  /* frames given to push */
  uint64_t frames_dropped; /* of them, not output (a full queue; a connection not up yet) */
  /* The video encoder's figures, where the output has one it can read (else 0): pictures
   * encoded, their summed delay after their push (µs), those more than a frame period late,
   * key frames; encoded bytes out. */
  uint64_t frames_encoded, encode_delay_us, frames_encoded_late, keyframes, bytes_out;
} fc_sink_stats;

/* A pushing output's connection (fc_sink_get_link). */
typedef enum fc_sink_link_state {
  FC_SINK_LINK_CONNECTING, /* an attempt is under way */
  FC_SINK_LINK_CONNECTED,  /* the server took the stream: frames flow */
  FC_SINK_LINK_RETRYING,   /* the attempt failed or the connection was lost: waiting to retry */
} fc_sink_link_state;

typedef struct fc_sink_link {
  fc_sink_link_state state;
  uint64_t connects;  /* connections made: the first and every reconnection */
  uint64_t failures;  /* attempts that failed and connections lost */
  int retry_in_ms;    /* RETRYING: until the next attempt */
  char error[192];    /* the last failure ("" before any) */
} fc_sink_link;

/* "connecting", "connected", "retrying" */
const char *fc_sink_link_state_name(fc_sink_link_state s);

/* What a pushing output (rtmp.h, whip.h) encodes and how it connects, the same for each. */
typedef struct fc_sink_push_params {
  int width, height;       /* even */
  int fps;                 /* default 25 */
  int sample_rate;         /* of the pushed PCM; default 16000 */
  int video_kbps;          /* the video's cap (constant quality under it); default 1500 */
  int video_qp;            /* 1..51: a constant quantizer instead (a still avatar); 0: CRF */
  const char *x264_preset; /* NULL: the live outputs' (FC_LIVE_X264_PRESET); borrowed */
  int queue_frames;        /* frames waiting for the connection's thread; default 25 (1 s) */
  int connect_timeout_ms;  /* an attempt not connected by then fails (then a retry); 10000 */
  /* Called on the connection's thread when its state changes (connected, lost, the first
   * failure of a run of attempts), for the owner's log; not for every retry. May be NULL. */
  void (*on_link)(void *user, const fc_sink_link *link);
  void *user;
} fc_sink_push_params;

/* Fills in p's defaults and checks it: 0, or FC_EINVAL with a detail naming `who`. */
int fc_sink_push_params_fill(fc_sink_push_params *p, const char *who);

/* A pushing output's connection bookkeeping, the same for each (rtmp.c, whip.c): the link's
 * state and counts, the back-off between attempts (1 s, doubling up to 30 s, back to 1 s once
 * a connection was made), and the owner told of a change (on_link: a connection made, one
 * lost, the first failure after either; not each retry: a server down for an hour is one
 * line). The output's connection thread moves it; get reads it from any thread. */
typedef struct fc_sink_retry {
  GMutex lock; /* link, retry_at_us */
  fc_sink_link link;
  gint64 retry_at_us;
  int backoff_s; /* the connection thread's */
  int told_down;
  void (*on_link)(void *user, const fc_sink_link *link);
  void *user;
} fc_sink_retry;

/* CONNECTING, waiting for the first frame's attempt. */
void fc_sink_retry_init(fc_sink_retry *r, void (*on_link)(void *, const fc_sink_link *),
                        void *user);
void fc_sink_retry_clear(fc_sink_retry *r);
/* An attempt starts (CONNECTING); whether one is due (RETRYING and its time has come, or
 * the first). */
void fc_sink_retry_attempt(fc_sink_retry *r);
int fc_sink_retry_due(fc_sink_retry *r, gint64 now_us);
/* The attempt made a connection (told); the attempt or the connection failed (why copied:
 * it may be the thread's error detail; told if it is news). now_us: g_get_monotonic_time(). */
void fc_sink_retry_connected(fc_sink_retry *r);
void fc_sink_retry_failed(fc_sink_retry *r, gint64 now_us, const char *why);
fc_sink_link_state fc_sink_retry_state(fc_sink_retry *r);
/* The link as fc_sink_get_link gives it (retry_in_ms counted down). */
void fc_sink_retry_get(fc_sink_retry *r, fc_sink_link *out);

typedef struct fc_sink_ops {
  const char *kind; /* "webrtc", "null", "mp4", "rtmp", "queued" */
  /* Takes a frame: 0 (also when the output's own policy drops it: counted in its stats), or
   * an FC_E* error (FC_EMEDIA after a pipeline error, FC_EIO, FC_EINVAL). */
  int (*push)(void *self, const fc_sink_frame *f);
  void (*stats)(void *self, fc_sink_stats *out); /* out zeroed by the caller */
  /* Optional: completes the output (a file's index); 0 or an error. */
  int (*finish)(void *self);
  void (*destroy)(void *self);
  /* Optional, for an output with a connection of its own: how it stands (out zeroed by the
   * caller); 0, or FC_EUNSUPPORTED (a wrapper whose inner output has none). Any thread. */
  int (*link)(void *self, fc_sink_link *out);
} fc_sink_ops;

typedef struct fc_sink {
  const fc_sink_ops *ops;
  void *self;
} fc_sink;

int fc_sink_push(fc_sink *s, const fc_sink_frame *f);
void fc_sink_get_stats(fc_sink *s, fc_sink_stats *out);
int fc_sink_finish(fc_sink *s);
/* NULL is a no-op. */
void fc_sink_destroy(fc_sink *s);
const char *fc_sink_kind(const fc_sink *s);
/* The connection of an output that has one: 0, or FC_EUNSUPPORTED (no detail set) for the
 * others and for NULL. Through a queued sink, its inner output's. */
int fc_sink_get_link(fc_sink *s, fc_sink_link *out);

/* The outputs' own sinks (see Ownership). */
struct fc_live;
struct fc_mp4_writer;
fc_sink *fc_live_sink(struct fc_live *l);
fc_sink *fc_mp4_writer_sink(struct fc_mp4_writer *w);

/* A sink that never makes its pusher wait: frames are copied into a ring of `depth` (made at
 * create) and pushed to `inner` by its own thread. When the ring is full the new frame is
 * dropped and counted (what a live session's recording does when its encoder falls behind,
 * rather than stall the session). Pictures are width×height I420, audio at most max_samples
 * per frame; the delta is not carried (its base need not outlive the push). An error of
 * inner's stops the pushing and comes back from finish. Takes inner over, also on failure;
 * NULL and *err (FC_EINVAL, FC_ENOMEM) on failure. */
fc_sink *fc_sink_queued_create(fc_sink *inner, int width, int height, size_t max_samples, int depth,
                               int *err);

#endif
