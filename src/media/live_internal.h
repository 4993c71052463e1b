/* Inside the live output (media/live.h): the state its files share. live.c builds, feeds and
 * tears down the pipeline; live_watch.c holds what GStreamer's threads call (the bus, webrtcbin's
 * and rtpbin's signals, the byte and delay probes) and the watch thread (the answer, the peer's
 * liveness); live_webrtc.c links the payloaders to webrtcbin, configures its ICE agent and
 * negotiates; sdp_offer.c reads the offer. live.c's opening comment is the design note for
 * all of them. */
#ifndef FC_MEDIA_LIVE_INTERNAL_H
#define FC_MEDIA_LIVE_INTERNAL_H

#include "media/live.h"

/* webrtcbin's library is "unstable API" in 1.22 and warns at compile time without this. */
#define GST_USE_UNSTABLE_API
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gst/webrtc/webrtc.h>

#include "media/gst_common.h"
#include "media/sdp_offer.h"
#include "media/sink.h"

#include <stdatomic.h>

/* Raw frames appsrc may queue before the oldest is dropped: at 25 fps, 160 ms of latency at
 * most when the encoder falls behind. */
#define VIDEO_QUEUE_FRAMES 4
/* Raw audio appsrc may queue before the oldest is dropped. Larger than one video frame's worth
 * because a caller may push a few frames' audio at once; small enough that the sound a viewer
 * hears after a stall (e.g. before DTLS is up) is not stale by more than this. */
#define AUDIO_QUEUE_MS 400
/* Samples per pooled audio buffer; a larger push is split. The pacer's 640 fit in one. */
#define AUDIO_CHUNK_SAMPLES 1024
/* How long on_answer waits for ICE gathering before answering with what it has. */
#define ANSWER_TIMEOUT_US (3 * G_TIME_SPAN_SECOND)
/* A connected peer that sends no RTCP for this long is gone. Browsers send receiver reports
 * (and congestion feedback) every second or so. 1.22's webrtcbin never notices a vanished
 * peer by itself (no ICE consent freshness): without this a closed tab would keep its
 * encoder running for ever. Five seconds is five missed reports: a stalled network, not a
 * late packet. */
#define PEER_TIMEOUT_US (5 * G_TIME_SPAN_SECOND)
/* Opus bit rate, CELT only (live.c): 48 kbit/s of 16 kHz mono speech measures better than the
 * SILK "voice" mode at 32 (segmental SNR 19.5 against 9.8 dB, log-spectral distance 2.8
 * against 3.3 dB below 4 kHz) for a third of its CPU; a few per cent of a session's bits. */
#define OPUS_BITRATE 48000
#define LIVE_CRF 23 /* x264 quality (see the encoder settings below) */
/* Pictures whose push time the encoder delay probe can look up (more than appsrc holds). */
#define PUSH_RING 16
/* Payload types used when there is no offer (FC_LIVE_NULL). */
#define NULL_VIDEO_PT 96
#define NULL_AUDIO_PT 111


typedef struct live_shared {
  gint refs; /* g_atomic_int */

  /* Serialises user callbacks against each other and against destroy. Never held while
   * calling into GStreamer. */
  GMutex cb_lock;
  int armed;              /* create has returned: callbacks may run */
  int destroyed;          /* destroy has started: no callback may run any more */
  fc_live_state reported; /* the last state given to on_state */
  fc_live_state_cb on_state;
  void *state_user;
  fc_live_answer_cb on_answer;
  void *answer_user;

  /* Data: short critical sections only, never held across a user callback. */
  GMutex lock;
  GCond cond;       /* signalled when `gathered` or `stop_waiting` changes */
  int gathered;     /* webrtcbin reported ICE gathering complete */
  int stop_waiting; /* destroy wants the watch thread to finish */
  int peer_gone;    /* the peer said BYE or went silent: CLOSED from then on */
  fc_live_state state;
  fc_gst_first_error err; /* the first pipeline error */

  _Atomic uint64_t frames_pushed, frames_dropped, audio_dropped, bytes_sent;
  /* Pictures out of the video encoder: count, summed delay after their push (µs), and
   * how many left more than a frame period after it (fc_live_stats). */
  _Atomic uint64_t frames_encoded, encode_delay_us, frames_encoded_late, keyframes;
  GstClockTime frame_period;
  /* When each of the last PUSH_RING pictures was pushed (running time), by PTS: the encoder's
   * delay counts from the push, not from the stamped time (which is anchored at the first
   * push and so carries that push's jitter). Written by push before the buffer is queued,
   * read by the probe after it was encoded. */
  struct {
    _Atomic uint64_t pts, pushed;
  } push_ring[PUSH_RING];
  _Atomic int64_t peer_heard_us; /* g_get_monotonic_time() of the peer's last RTCP, or of
                                    connecting; 0 before */
} live_shared;

struct fc_live {
  fc_live_params p;
  live_shared *sh;
  GstElement *pipeline;
  GstElement *webrtc;      /* owned by the pipeline; NULL for FC_LIVE_NULL */
  GstElement *vsrc, *asrc; /* owned by the pipeline */
  GstPad *venc_src;        /* a reference: force_keyframe sends its event here */
  GstBus *bus;
  int sync_handler_set;
  gulong sig_gathering, sig_connection;
  GstBufferPool *vpool, *apool;
  GstVideoInfo vinfo;
  GThread *watch_thread;
  gint keyframe_count; /* count field of the force-key-unit events we send (atomic) */

  /* Timestamp origin, fixed by the first push (pacer thread only). */
  int started;
  GstClockTime origin;       /* running time of the first push */
  GstClockTime origin_media; /* index/fps of the first push's frame */
  int64_t next_index;        /* the smallest frame index accepted next */
  /* Pictures pushed so far, and the one that gets an extra key frame: outputs created
   * together (a benchmark, a server's restart with its viewers reconnecting) would otherwise
   * make their 2-second key frames in the same tick, each costing several pictures' work. A
   * random phase spreads them; x264 counts its interval from the last key frame. */
  int64_t pictures, key_phase;
  int64_t next_sample;       /* the smallest audio sample accepted next */
  fc_sink sink;              /* this output as a sink (sink.h) */
};

/* live.c: the shared state's references (the last one frees it). */
live_shared *lv_shared_ref(live_shared *s);
void lv_shared_unref(gpointer data);
/* For g_signal_connect_data, whose destroy notify takes a GClosure as second argument. */
void lv_shared_unref_closure(gpointer data, GClosure *closure);

/* live_watch.c */
int lv_report_recorded(live_shared *s, int as_code);
void lv_set_state(live_shared *s, fc_live_state st);
GstBusSyncReply lv_on_bus_message(GstBus *bus, GstMessage *msg, gpointer data);
void lv_on_gathering_state(GObject *webrtc, GParamSpec *pspec, gpointer data);
void lv_on_connection_state(GObject *webrtc, GParamSpec *pspec, gpointer data);
void lv_on_deep_element_added(GstBin *bin, GstBin *sub_bin, GstElement *element, gpointer data);
void lv_watch_rtpbin(GstElement *webrtc, live_shared *s);
GstPadProbeReturn lv_count_bytes(GstPad *pad, GstPadProbeInfo *info, gpointer data);
GstPadProbeReturn lv_video_out(GstPad *pad, GstPadProbeInfo *info, gpointer data);
int lv_add_probe(GstElement *e, const char *pad_name, live_shared *s, GstPadProbeCallback cb);
void lv_video_enough_data(GstAppSrc *src, gpointer data);
void lv_audio_enough_data(GstAppSrc *src, gpointer data);
typedef struct lv_watch_job {
  live_shared *sh;    /* a reference */
  GstElement *webrtc; /* a reference */
  gint64 deadline;    /* for the answer, g_get_monotonic_time() units */
  int port_min, port_max; /* fc_live_params' ICE port range; 0, 0 = any */
} lv_watch_job;
gpointer lv_watch_main(gpointer data);

/* live_webrtc.c */
GstCaps *lv_rtp_caps(int video, int pt);
int lv_link_to_webrtc(GstElement *webrtc, GstElement *pay, GstCaps *caps);
int lv_negotiate(GstElement *webrtc, GstSDPMessage **offer, const fc_offer_choice *ch);
int lv_configure_ice(GstElement *webrtc, const fc_live_params *p);
int lv_make_offer(GstElement *webrtc, const fc_offer_choice *ch);
int lv_set_answer(GstElement *webrtc, const char *sdp);

#endif
