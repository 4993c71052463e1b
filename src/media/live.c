/* Live outputs (include/facecast/live.h): one GStreamer pipeline per viewer session,
 *
 *   appsrc "v" (I420) → fcx264enc → capsfilter (constrained-baseline) → rtph264pay ─┐
 *   appsrc "a" (S16LE mono) → audioconvert → audioresample → opusenc → rtpopuspay ┴→ webrtcbin
 *
 * or, for FC_LIVE_NULL, the same two chains each ending in a fakesink (sync off), so a benchmark
 * pays for exactly the encoding and packetising a viewer would cost. fcx264enc is our libx264
 * element (x264_live.c): each pooled picture carries what it holds against the avatar's still
 * (fc_i420_delta qdata, written by push), from which it tells x264 the unchanged macroblocks.
 *
 * Negotiation (FC_LIVE_WEBRTC). facecast answers the viewer's offer; everything up to the answer
 * happens inside fc_live_create, on the caller's thread, before it returns:
 *   1. The offer is parsed (gst_sdp_message_parse_buffer) and checked before anything is built:
 *      it must offer H.264 with packetization-mode=1 and Opus on m-lines we may send on
 *      (recvonly or sendrecv). We pick one payload type of each, preferring profile-level-id
 *      42e01f (constrained baseline, what we send) over other H.264 variants.
 *   2. The pipeline is built. Each payloader is linked to a webrtcbin sink pad requested with
 *      caps of that payload type; the pad's new transceiver is set to SENDONLY and its
 *      codec-preferences to exactly that payload type, so create-answer (which intersects the
 *      offer with the transceiver's caps) answers with one codec per m-line and the payloader
 *      sends with the payload type the viewer expects.
 *   3. PLAYING, then set-remote-description (the offer; webrtcbin matches our unassociated
 *      transceivers to the offer's m-lines by kind, or by caps while answering; m-lines it
 *      creates transceivers for beyond ours are set inactive), create-answer, two fixes to the
 *      answer (fix_answer: profile-level-id and a=msid, which 1.22 leaves out), and
 *      set-local-description, each waited for through its GstPromise. webrtcbin's own thread
 *      runs these operations and is alive throughout, so the waits end. A failure here is
 *      returned from create (no callback), as the header promises.
 * The answer is handed out asynchronously by the output's watch thread: it waits until ICE
 * gathering is complete (webrtcbin merges each gathered candidate into its local description)
 * or ANSWER_TIMEOUT_US passed, then calls on_answer with the local description's text. The
 * candidates the offer carries are added by webrtcbin itself once both descriptions are set, so
 * neither side needs trickle ICE.
 *
 * State. webrtcbin's connection-state (ICE + DTLS) maps onto fc_live_state. 1.22 never notices
 * a peer that simply goes away, so the watch thread also declares the peer gone (CLOSED) when a
 * connected peer has sent no RTCP for PEER_TIMEOUT_US, or at once on an RTCP BYE. A pipeline
 * error is FAILED for good.
 *
 * Timestamps. The pipeline runs on the system clock. The first push fixes the origin: the
 * running time "now" maps to that push's frame index, and every later frame `index` and audio
 * sample `s` are stamped origin + index/fps and origin + s/sample_rate on the caller's own
 * sample clock (gst_util_uint64_scale, so nothing drifts by rounding). Video and audio share the
 * origin, so they stay in sync however the caller's pushes jitter; the RTCP sender reports that
 * rtpbin derives from these times let the browser line them up. Nothing waits on these times
 * (see on_deep_element_added): the caller's pacer already releases frames in real time.
 *
 * Buffers and drops. push copies the caller's frame into a buffer from an unbounded
 * GstBufferPool (see mp4.c: a bounded pool could deadlock against the encoder's hold on
 * frames; this one grows to the queue bound plus what the encoder holds and stays there) and
 * hands it to appsrc. Both appsrcs are non-blocking and leaky-downstream: when the encoder (or a
 * stalled transport: webrtcbin holds data back until DTLS is up) cannot keep up, pushing into a
 * full queue drops the *oldest* queued item, so what the viewer gets next is as fresh as
 * possible and the pacer never waits. The video queue holds VIDEO_QUEUE_FRAMES frames, the
 * audio queue AUDIO_QUEUE_MS of sound. appsrc's own queue is the only buffer in front of the
 * encoder (its streaming thread is the encoding thread): a separate leaky queue element would
 * add a thread and a second, uncountable drop point. appsrc calls enough-data exactly once per
 * push into a full queue, i.e. once per dropped item, which is how frames_dropped is counted.
 *
 * Threads and lifetime. Create, destroy and push run on the caller's threads (create/destroy
 * on one, push on the pacer's). GStreamer calls us from its own threads: the bus sync handler
 * (any thread that posts), webrtcbin's notify signals (its "pc" thread), rtpbin's RTCP signals
 * and the byte-counting probes (streaming threads), appsrc's enough-data (the pushing thread);
 * and each WebRTC output has its watch thread, joined by destroy. All of them see only
 * a reference-counted `live_shared`, never the fc_live handle, and each holds its own
 * reference, released by GStreamer's destroy notifies once no call can be in flight, so no
 * callback can touch freed memory whatever the teardown order. User callbacks run under
 * `cb_lock` and only while `armed` (create has returned) and not `destroyed`; destroy sets
 * `destroyed` under that lock, which waits for a callback in progress, so none runs after
 * destroy returns. Consequently a callback must not call fc_live_destroy (it would wait for
 * itself); the header already asks callers to marshal callbacks to their own loop.
 *
 * Everything GObject/GStreamer stays in src/media: this file, and gst_common.c for the
 * plumbing it shares with mp4.c (initialisation, making and linking elements, x264's preset,
 * buffer pools, the first-error slot). */
#include "facecast/live.h"

#include "facecast/error.h"

/* webrtcbin's library is "unstable API" in 1.22 and warns at compile time without this. */
#define GST_USE_UNSTABLE_API
#include <gst/app/gstappsrc.h>
#include <gst/audio/audio.h>
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <gst/video/video.h>
#include <gst/webrtc/webrtc.h>

#include "facecast/compose.h"
#include "media/gst_common.h"
#include "media/x264_live.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
/* Opus bit rate: mono speech is transparent well below the encoder's 64 kbit/s default. */
#define OPUS_BITRATE 32000
#define LIVE_CRF 23 /* x264 quality (see the encoder settings below) */
/* Pictures whose push time the encoder delay probe can look up (more than appsrc holds). */
#define PUSH_RING 16
/* Payload types used when there is no offer (FC_LIVE_NULL). */
#define NULL_VIDEO_PT 96
#define NULL_AUDIO_PT 111

/* ---- state shared with GStreamer's threads ---- */

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

static live_shared *shared_ref(live_shared *s) {
  g_atomic_int_inc(&s->refs);
  return s;
}

static void shared_unref(gpointer data) {
  live_shared *s = data;
  if (!g_atomic_int_dec_and_test(&s->refs)) return;
  g_mutex_clear(&s->cb_lock);
  g_mutex_clear(&s->lock);
  g_cond_clear(&s->cond);
  free(s);
}

/* For g_signal_connect_data, whose destroy notify takes a GClosure as second argument. */
static void shared_unref_closure(gpointer data, GClosure *closure) {
  (void)closure;
  shared_unref(data);
}

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
};

/* ---- errors and state ---- */

/* Copies a recorded pipeline error into this thread's detail; returns its code (as_code when
 * nonzero), or 0 if there is none. */
static int report_recorded(live_shared *s, int as_code) {
  return fc_gst_report_recorded(&s->lock, &s->err, as_code);
}

/* Moves to `st` and tells the user if it differs from what they last heard. A pipeline error
 * makes FAILED final: webrtcbin may still report ICE as connected, but no media flows. */
static void set_state(live_shared *s, fc_live_state st) {
  g_mutex_lock(&s->cb_lock);
  g_mutex_lock(&s->lock);
  if (s->err.code)
    st = FC_LIVE_FAILED;
  else if (s->peer_gone)
    st = FC_LIVE_CLOSED;
  /* The liveness clock starts when the connection does. */
  if (st == FC_LIVE_CONNECTED && s->state != FC_LIVE_CONNECTED)
    atomic_store(&s->peer_heard_us, g_get_monotonic_time());
  s->state = st;
  g_mutex_unlock(&s->lock);
  if (s->armed && !s->destroyed && s->reported != st) {
    s->reported = st;
    if (s->on_state) s->on_state(s->state_user, st);
  }
  g_mutex_unlock(&s->cb_lock);
}

static GstBusSyncReply on_bus_message(GstBus *bus, GstMessage *msg, gpointer data) {
  live_shared *s = data;
  (void)bus;
  /* The first error only, as "live output: <element>: <message> (<reason>)", always
   * FC_EMEDIA. */
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR &&
      fc_gst_record_bus_error(&s->lock, &s->err, msg, "live output", NULL))
    set_state(s, FC_LIVE_FAILED);
  /* Nobody pops this bus: keep its queue empty. A sync handler that drops a message owns it
   * (GstBusSyncHandler's contract); without this unref every message, and through its source
   * every element, would leak. */
  gst_message_unref(msg);
  return GST_BUS_DROP;
}

/* ---- webrtcbin signal handlers (webrtcbin's "pc" thread) ---- */

static void on_gathering_state(GObject *webrtc, GParamSpec *pspec, gpointer data) {
  live_shared *s = data;
  GstWebRTCICEGatheringState gs = GST_WEBRTC_ICE_GATHERING_STATE_NEW;
  (void)pspec;
  g_object_get(webrtc, "ice-gathering-state", &gs, NULL);
  if (gs != GST_WEBRTC_ICE_GATHERING_STATE_COMPLETE) return;
  g_mutex_lock(&s->lock);
  s->gathered = 1;
  g_cond_broadcast(&s->cond);
  g_mutex_unlock(&s->lock);
}

static void on_connection_state(GObject *webrtc, GParamSpec *pspec, gpointer data) {
  live_shared *s = data;
  GstWebRTCPeerConnectionState cs = GST_WEBRTC_PEER_CONNECTION_STATE_NEW;
  (void)pspec;
  g_object_get(webrtc, "connection-state", &cs, NULL);
  fc_live_state st;
  switch (cs) {
  case GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTED: st = FC_LIVE_CONNECTED; break;
  case GST_WEBRTC_PEER_CONNECTION_STATE_FAILED: st = FC_LIVE_FAILED; break;
  /* ICE "disconnected" can recover; if it does, CONNECTED is reported again. */
  case GST_WEBRTC_PEER_CONNECTION_STATE_DISCONNECTED:
  case GST_WEBRTC_PEER_CONNECTION_STATE_CLOSED: st = FC_LIVE_CLOSED; break;
  default: st = FC_LIVE_CONNECTING; break;
  }
  set_state(s, st);
}

/* Workaround for 1.22: webrtcbin puts a clocksync (sync=TRUE) in front of each sink pad, which
 * holds every buffer until its running time. Our timestamps come from the caller's frame
 * index (see the design note), so a caller that catches up after a hiccup, or whose first push
 * came late, stamps frames slightly in the future; clocksync then stalls the encoding thread by
 * that much on every frame and the small leaky queue drops most frames (seen with Chromium:
 * 8 fps of 25 after a 400 ms hiccup at start-up). The caller already paces in real time, so
 * the output sends as soon as a frame is encoded; the timestamps still carry the timing (RTP
 * timestamps and RTCP sender reports, from one origin for audio and video) and the viewer's
 * jitter buffer smooths any burst. */
static void on_deep_element_added(GstBin *bin, GstBin *sub_bin, GstElement *element,
                                  gpointer data) {
  (void)bin;
  (void)sub_bin;
  (void)data;
  GstElementFactory *f = gst_element_get_factory(element);
  if (f && !g_strcmp0(gst_plugin_feature_get_name(GST_PLUGIN_FEATURE(f)), "clocksync") &&
      fc_gst_has_property(element, "sync"))
    g_object_set(element, "sync", FALSE, NULL);
}

/* rtpbin: RTCP arrived from a remote SSRC (the peer's receiver reports). Streaming thread. */
static void on_peer_rtcp(GstElement *rtpbin, guint session, guint ssrc, gpointer data) {
  live_shared *s = data;
  (void)rtpbin;
  (void)session;
  (void)ssrc;
  atomic_store_explicit(&s->peer_heard_us, g_get_monotonic_time(), memory_order_relaxed);
}

/* rtpbin: the peer sent RTCP BYE. Some stacks do when they close; Chromium 156 did not in our
 * test (pc.close() was noticed through the RTCP timeout), so this is only the fast path. */
static void on_peer_bye(GstElement *rtpbin, guint session, guint ssrc, gpointer data) {
  live_shared *s = data;
  (void)rtpbin;
  (void)session;
  (void)ssrc;
  g_mutex_lock(&s->lock);
  s->peer_gone = 1;
  g_mutex_unlock(&s->lock);
  set_state(s, FC_LIVE_CLOSED);
}

/* Connects the liveness signals on webrtcbin's rtpbin (found by factory, not by its name). */
static void watch_rtpbin(GstElement *webrtc, live_shared *s) {
  GstIterator *it = gst_bin_iterate_elements(GST_BIN(webrtc));
  GValue v = G_VALUE_INIT;
  int done = 0;
  while (!done) {
    switch (gst_iterator_next(it, &v)) {
    case GST_ITERATOR_OK: {
      GstElement *e = g_value_get_object(&v);
      GstElementFactory *f = gst_element_get_factory(e);
      if (f && !g_strcmp0(gst_plugin_feature_get_name(GST_PLUGIN_FEATURE(f)), "rtpbin")) {
        g_signal_connect_data(e, "on-ssrc-active", G_CALLBACK(on_peer_rtcp), shared_ref(s),
                              shared_unref_closure, 0);
        g_signal_connect_data(e, "on-bye-ssrc", G_CALLBACK(on_peer_bye), shared_ref(s),
                              shared_unref_closure, 0);
        done = 1;
      }
      g_value_reset(&v);
      break;
    }
    case GST_ITERATOR_RESYNC: gst_iterator_resync(it); break;
    default: done = 1; break;
    }
  }
  g_value_unset(&v);
  gst_iterator_free(it);
}

/* ---- statistics hooks (streaming threads / the pushing thread) ---- */

static GstPadProbeReturn count_bytes(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  live_shared *s = data;
  (void)pad;
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    atomic_fetch_add_explicit(&s->bytes_sent, gst_buffer_get_size(GST_PAD_PROBE_INFO_BUFFER(info)),
                              memory_order_relaxed);
  } else if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    atomic_fetch_add_explicit(&s->bytes_sent,
                              gst_buffer_list_calculate_size(GST_PAD_PROBE_INFO_BUFFER_LIST(info)),
                              memory_order_relaxed);
  }
  return GST_PAD_PROBE_OK;
}

/* appsrc calls this once for every push into a full queue, and with leaky-type downstream each
 * such push drops exactly one queued buffer (see the design note). */
static void video_enough_data(GstAppSrc *src, gpointer data) {
  live_shared *s = data;
  (void)src;
  atomic_fetch_add_explicit(&s->frames_dropped, 1, memory_order_relaxed);
}

static void audio_enough_data(GstAppSrc *src, gpointer data) {
  live_shared *s = data;
  (void)src;
  atomic_fetch_add_explicit(&s->audio_dropped, 1, memory_order_relaxed);
}

/* ---- the offer ---- */

typedef struct offer_choice {
  int video_pt, audio_pt;
  char video_plid[8]; /* the chosen format's profile-level-id, "" if it had none */
} offer_choice;

/* The value of attribute `key` whose value starts with "<pt> " in media m, or NULL. */
static const char *pt_attribute(const GstSDPMedia *m, const char *key, int pt) {
  char prefix[16];
  int n = snprintf(prefix, sizeof prefix, "%d ", pt);
  for (guint i = 0; i < gst_sdp_media_attributes_len(m); i++) {
    const GstSDPAttribute *a = gst_sdp_media_get_attribute(m, i);
    if (a->key && a->value && !strcmp(a->key, key) && !strncmp(a->value, prefix, (size_t)n))
      return a->value + n;
  }
  return NULL;
}

/* Looks for `name=` in an fmtp parameter list ("a=1;b=2", spaces allowed); copies its value
 * into out. Returns 1 if found. */
static int fmtp_param(const char *fmtp, const char *name, char *out, size_t out_size) {
  const size_t len = strlen(name);
  const char *p = fmtp;
  while (p && *p) {
    while (*p == ' ' || *p == ';') p++;
    if (!strncasecmp(p, name, len) && p[len] == '=') {
      p += len + 1;
      size_t k = 0;
      while (p[k] && p[k] != ';' && p[k] != ' ' && p[k] != '\r' && p[k] != '\n') k++;
      if (k >= out_size) k = out_size - 1;
      memcpy(out, p, k);
      out[k] = 0;
      return 1;
    }
    p = strchr(p, ';');
  }
  return 0;
}

/* Whether attribute `key` is present (flag attributes such as "recvonly" have no value, so
 * gst_sdp_*_get_attribute_val cannot tell). */
static int media_has(const GstSDPMedia *m, const char *key) {
  for (guint i = 0; i < gst_sdp_media_attributes_len(m); i++) {
    const GstSDPAttribute *a = gst_sdp_media_get_attribute(m, i);
    if (a->key && !strcmp(a->key, key)) return 1;
  }
  return 0;
}

static int session_has(const GstSDPMessage *msg, const char *key) {
  for (guint i = 0; i < gst_sdp_message_attributes_len(msg); i++) {
    const GstSDPAttribute *a = gst_sdp_message_get_attribute(msg, i);
    if (a->key && !strcmp(a->key, key)) return 1;
  }
  return 0;
}

/* Whether we may send on media m: not rejected (port 0 is fine when bundle-only, which a
 * bundling offerer may use for all but the first m-line), and the offerer wants to receive. */
static int media_usable(const GstSDPMessage *msg, const GstSDPMedia *m) {
  if (gst_sdp_media_get_port(m) == 0 && !media_has(m, "bundle-only")) return 0;
  if (media_has(m, "sendonly") || media_has(m, "inactive")) return 0;
  if (!media_has(m, "recvonly") && !media_has(m, "sendrecv")) {
    /* No direction on the m-line: the session-level one, sendrecv by default. */
    if (session_has(msg, "sendonly") || session_has(msg, "inactive")) return 0;
  }
  return 1;
}

/* How well an H.264 format suits what we send (constrained baseline), 0 if unusable.
 * rtph264pay's caps only allow dynamic payload types (96-127). */
static int h264_score(const GstSDPMedia *m, int pt) {
  const char *rtpmap = pt_attribute(m, "rtpmap", pt);
  if (!rtpmap || strncasecmp(rtpmap, "H264/90000", 10) != 0) return 0;
  if (pt < 96 || pt > 127) return 0;
  const char *fmtp = pt_attribute(m, "fmtp", pt);
  char mode[8] = "0", plid[16] = "";
  if (fmtp) fmtp_param(fmtp, "packetization-mode", mode, sizeof mode);
  if (strcmp(mode, "1") != 0) return 0; /* mode 0 needs one NAL per packet: not what we send */
  if (fmtp) fmtp_param(fmtp, "profile-level-id", plid, sizeof plid);
  if (strlen(plid) != 6) return 1; /* unspecified: RFC 6184 says baseline */
  /* profile_idc 0x42 with constraint_set1 (0xe0 or 0x40 in the iop byte) is constrained
   * baseline; plain baseline decoders also take it; main/high decoders do too. */
  if (!strncasecmp(plid, "42e0", 4)) return 4;
  if (!strncasecmp(plid, "4200", 4) || !strncasecmp(plid, "42c0", 4) ||
      !strncasecmp(plid, "4240", 4))
    return 3;
  return 2;
}

static int opus_ok(const GstSDPMedia *m, int pt) {
  const char *rtpmap = pt_attribute(m, "rtpmap", pt);
  return rtpmap && !strncasecmp(rtpmap, "opus/48000", 10) && pt >= 96 && pt <= 127;
}

/* Parses and checks the offer before anything is built; on success *out owns the message. */
static int parse_offer(const char *sdp, GstSDPMessage **out, offer_choice *ch) {
  GstSDPMessage *msg = NULL;
  char seen_video[128] = "";
  int best_score = 0;
  ch->video_pt = ch->audio_pt = -1;
  ch->video_plid[0] = 0;
  *out = NULL;

  if (!sdp || !*sdp) return fc_error_set(FC_EINVAL, "malformed SDP offer (empty)");
  if (gst_sdp_message_new(&msg) != GST_SDP_OK) return fc_error_set(FC_ENOMEM, "out of memory");
  /* The parser skips what it does not understand, so success means little: require the
   * version line and at least one m-line, which any real offer has. */
  if (gst_sdp_message_parse_buffer((const guint8 *)sdp, (guint)strlen(sdp), msg) != GST_SDP_OK ||
      g_strcmp0(gst_sdp_message_get_version(msg), "0") != 0 ||
      gst_sdp_message_medias_len(msg) == 0) {
    gst_sdp_message_free(msg);
    return fc_error_set(FC_EINVAL, "malformed SDP offer");
  }

  /* One DTLS fingerprint for the whole offer (BUNDLE: one transport): webrtcbin refuses to
   * answer an offer whose media name different ones. */
  const char *fp = gst_sdp_message_get_attribute_val(msg, "fingerprint");
  for (guint i = 0; i < gst_sdp_message_medias_len(msg); i++) {
    const char *f = gst_sdp_media_get_attribute_val(gst_sdp_message_get_media(msg, i), "fingerprint");
    if (f && fp && strcmp(f, fp) != 0) {
      gst_sdp_message_free(msg);
      return fc_error_set(FC_EINVAL, "offer names different DTLS fingerprints in its media");
    }
    if (f) fp = f;
  }

  for (guint i = 0; i < gst_sdp_message_medias_len(msg); i++) {
    const GstSDPMedia *m = gst_sdp_message_get_media(msg, i);
    const char *kind = gst_sdp_media_get_media(m);
    if (!kind || !media_usable(msg, m)) continue;
    const int is_video = !strcmp(kind, "video"), is_audio = !strcmp(kind, "audio");
    if (is_video && ch->video_pt >= 0) continue; /* one video m-line is all we fill */
    if (is_audio && ch->audio_pt >= 0) continue;
    for (guint f = 0; f < gst_sdp_media_formats_len(m); f++) {
      const int pt = atoi(gst_sdp_media_get_format(m, f));
      if (is_video) {
        const int score = h264_score(m, pt);
        if (score > best_score) {
          const char *fmtp = pt_attribute(m, "fmtp", pt);
          best_score = score;
          ch->video_pt = pt;
          ch->video_plid[0] = 0;
          if (fmtp) fmtp_param(fmtp, "profile-level-id", ch->video_plid, sizeof ch->video_plid);
        }
        /* Remember the codec names for the error detail. */
        const char *rtpmap = pt_attribute(m, "rtpmap", pt);
        if (rtpmap && strlen(seen_video) < sizeof seen_video - 24) {
          char name[16];
          size_t k = strcspn(rtpmap, "/");
          if (k >= sizeof name) k = sizeof name - 1;
          memcpy(name, rtpmap, k);
          name[k] = 0;
          if (!strstr(seen_video, name)) {
            if (*seen_video) strcat(seen_video, ", ");
            strcat(seen_video, name);
          }
        }
      } else if (is_audio && ch->audio_pt < 0 && opus_ok(m, pt)) {
        ch->audio_pt = pt;
      }
    }
  }

  if (ch->video_pt < 0) {
    gst_sdp_message_free(msg);
    if (*seen_video) {
      return fc_error_set(FC_EINVAL,
                          "offer has no H.264 video with packetization-mode=1 on a "
                          "dynamic payload type (it offers %s)",
                          seen_video);
    }
    return fc_error_set(FC_EINVAL, "offer has no H.264 video");
  }
  if (ch->audio_pt < 0) {
    gst_sdp_message_free(msg);
    return fc_error_set(FC_EINVAL, "offer has no Opus audio");
  }
  *out = msg;
  return 0;
}

/* ---- construction helpers (the ones shared with mp4.c are in gst_common.c) ---- */

/* Fails, naming the package to install, unless element factory `factory` is installed. */
static int require_element(const char *factory) {
  if (fc_gst_element_available(factory)) return 0;
  return fc_error_set(FC_EMEDIA, "GStreamer element '%s' is not available (install %s)", factory,
                      fc_gst_package_of(factory));
}

/* Sets an enum or flags property from its nick if the element has it (optional tuning). */
static void set_optional(GstElement *e, const char *prop, const char *value) {
  if (fc_gst_has_property(e, prop)) gst_util_set_object_arg(G_OBJECT(e), prop, value);
}

/* The video encoder's output: bytes, and how long after its push each picture came out, which
 * the pacer's own lateness does not see: the wait in appsrc's queue plus the encoding. */
static GstPadProbeReturn video_out(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  live_shared *s = data;
  GstBuffer *buf = info->type & GST_PAD_PROBE_TYPE_BUFFER ? GST_PAD_PROBE_INFO_BUFFER(info) : NULL;
  if (buf && GST_BUFFER_PTS_IS_VALID(buf)) {
    /* The encoder keeps its input's PTS; which push it was, by the ring. */
    const GstClockTime pts = GST_BUFFER_PTS(buf);
    const size_t slot = (size_t)(pts / s->frame_period) % PUSH_RING;
    const int found = atomic_load_explicit(&s->push_ring[slot].pts, memory_order_acquire) == pts;
    const GstClockTime pushed = atomic_load_explicit(&s->push_ring[slot].pushed, memory_order_relaxed);
    GstElement *enc = GST_ELEMENT(GST_OBJECT_PARENT(pad));
    atomic_fetch_add_explicit(&s->frames_encoded, 1, memory_order_relaxed);
    if (!GST_BUFFER_FLAG_IS_SET(buf, GST_BUFFER_FLAG_DELTA_UNIT))
      atomic_fetch_add_explicit(&s->keyframes, 1, memory_order_relaxed);
    /* Timed when its push is still in the ring and the clock runs (all but the first few). */
    GstClock *clock = found && enc ? gst_element_get_clock(enc) : NULL;
    if (clock) {
      const GstClockTime now = gst_clock_get_time(clock), base = gst_element_get_base_time(enc);
      gst_object_unref(clock);
      const GstClockTime run = now > base ? now - base : 0;
      const GstClockTime d = run > pushed ? run - pushed : 0;
      atomic_fetch_add_explicit(&s->encode_delay_us, d / 1000, memory_order_relaxed);
      if (d > s->frame_period)
        atomic_fetch_add_explicit(&s->frames_encoded_late, 1, memory_order_relaxed);
    }
  }
  return count_bytes(pad, info, data);
}

static int add_probe(GstElement *e, const char *pad_name, live_shared *s, GstPadProbeCallback cb) {
  GstPad *pad = gst_element_get_static_pad(e, pad_name);
  if (!pad) return fc_error_set(FC_EMEDIA, "%s has no %s pad", GST_ELEMENT_NAME(e), pad_name);
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST, cb,
                    shared_ref(s), shared_unref);
  gst_object_unref(pad);
  return 0;
}

/* The caps a payloader sends with, which are also the transceiver's codec preferences: only
 * the fields the payloader's output always agrees with. profile-level-id is left out on
 * purpose: rtph264pay writes the one of the actual stream (e.g. 42c00d), and webrtcbin refuses
 * sink caps that do not intersect the preferences. create-answer intersects the offer's caps
 * with these, so the answer keeps the offer's fields (rtcp-fb nack pli, ...); the
 * profile-level-id it loses on the way is put back by fix_answer. */
static GstCaps *rtp_caps(int video, int pt) {
  if (video) {
    return gst_caps_new_simple("application/x-rtp", "media", G_TYPE_STRING, "video",
                               "encoding-name", G_TYPE_STRING, "H264", "payload", G_TYPE_INT, pt,
                               "clock-rate", G_TYPE_INT, 90000, NULL);
  }
  return gst_caps_new_simple("application/x-rtp", "media", G_TYPE_STRING, "audio", "encoding-name",
                             G_TYPE_STRING, "OPUS", "payload", G_TYPE_INT, pt, "clock-rate",
                             G_TYPE_INT, 48000, NULL);
}

/* Links payloader `pay` to a new webrtcbin sink pad whose transceiver sends `caps` only. */
static int link_to_webrtc(GstElement *webrtc, GstElement *pay, GstCaps *caps) {
  GstPadTemplate *templ =
      gst_element_class_get_pad_template(GST_ELEMENT_GET_CLASS(webrtc), "sink_%u");
  GstPad *sink = templ ? gst_element_request_pad(webrtc, templ, NULL, caps) : NULL;
  GstPad *src = NULL;
  GstWebRTCRTPTransceiver *trans = NULL;
  int rc = 0;
  if (!sink) {
    rc = fc_error_set(FC_EMEDIA, "webrtcbin refused a sink pad (are gstreamer1.0-nice and the "
                                 "dtls plugin installed?)");
    goto out;
  }
  g_object_get(sink, "transceiver", &trans, NULL);
  if (!trans) {
    rc = fc_error_set(FC_EMEDIA, "webrtcbin gave a sink pad without a transceiver");
    goto out;
  }
  /* A pad request makes a SENDRECV transceiver; we never receive (and answering sendrecv to a
   * recvonly offer would be intersected to sendonly anyway, but say what we mean). */
  g_object_set(trans, "direction", GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_SENDONLY,
               "codec-preferences", caps, NULL);
  src = gst_element_get_static_pad(pay, "src");
  if (!src || gst_pad_link(src, sink) != GST_PAD_LINK_OK) {
    rc = fc_error_set(FC_EMEDIA, "could not link %s to webrtcbin", GST_ELEMENT_NAME(pay));
    goto out;
  }
out:
  if (trans) gst_object_unref(trans);
  if (src) gst_object_unref(src);
  /* The pipeline keeps the request pad; release it on failure so the bin does not carry a
   * half-linked pad into teardown (harmless either way). */
  if (sink) {
    if (rc) gst_element_release_request_pad(webrtc, sink);
    gst_object_unref(sink);
  }
  return rc;
}

/* ---- negotiation (caller's thread, inside create) ---- */

/* Waits for the reply to a webrtcbin action signal and gives a copy of it in *out; on failure
 * returns fail_code (FC_EMEDIA if webrtcbin never replied) with a detail. webrtcbin runs the
 * operation on its own thread, which stays alive for as long as the pipeline is not in NULL, so the
 * wait ends. */
static int wait_reply(GstPromise *promise, const char *what, int fail_code, GstStructure **out) {
  const GstPromiseResult r = gst_promise_wait(promise);
  /* Replied with no structure is success for the set-*-description signals. */
  const GstStructure *reply =
      r == GST_PROMISE_RESULT_REPLIED ? gst_promise_get_reply(promise) : NULL;
  GError *e = NULL;
  int rc = 0;
  *out = NULL;
  if (r != GST_PROMISE_RESULT_REPLIED) {
    rc = fc_error_set(FC_EMEDIA, "webrtcbin did not answer %s", what);
  } else if (reply && gst_structure_has_field(reply, "error")) {
    gst_structure_get(reply, "error", G_TYPE_ERROR, &e, NULL);
    rc = fc_error_set(fail_code, "%s failed: %s", what,
                      e && e->message ? e->message : "unknown error");
    if (e) g_error_free(e);
  } else if (reply) {
    *out = gst_structure_copy(reply);
  }
  gst_promise_unref(promise);
  return rc;
}

/* Sets every transceiver that is not ours (webrtcbin makes one for each further audio/video
 * m-line of the offer) inactive, so they are answered inactive instead of opening receive
 * paths with nothing behind them. */
static void park_other_transceivers(GstElement *webrtc) {
  GArray *all = NULL;
  g_signal_emit_by_name(webrtc, "get-transceivers", &all);
  if (!all) return;
  for (guint i = 0; i < all->len; i++) {
    GstWebRTCRTPTransceiver *t = g_array_index(all, GstWebRTCRTPTransceiver *, i);
    GstWebRTCRTPTransceiverDirection dir;
    g_object_get(t, "direction", &dir, NULL);
    if (dir != GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_SENDONLY)
      g_object_set(t, "direction", GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_INACTIVE, NULL);
  }
  g_array_unref(all);
}

/* Two fixes to the answer webrtcbin 1.22 writes, applied before it is set locally:
 *
 * profile-level-id: gst_sdp_media_get_caps_from_media turns an H.264 format's
 * profile-level-id into a "profile" caps field whenever level-asymmetry-allowed=1 (every
 * browser offer), so the answer written from those caps has none. RFC 6184 reads a missing
 * one as baseline level 1.0; Chrome's own default (constrained baseline 3.1) happens to match,
 * other players may not. The chosen format's value from the offer is put back.
 *
 * msid: webrtcbin only writes a stream id (in a=ssrc lines) when the payloader's caps, with
 * their ssrc, arrived before the answer was made, which never happens here. A browser then
 * puts each track in no stream or a stream of its own, and Chrome synchronises audio and video
 * playout only within one stream (and pages use event.streams[0]). So both m-lines get an
 * RFC 8830 a=msid naming the same stream. */
static void fix_answer(GstSDPMessage *answer, const offer_choice *ch) {
  for (guint i = 0; i < gst_sdp_message_medias_len(answer); i++) {
    /* webrtcbin edits medias in place the same way; the array element is ours to change. */
    GstSDPMedia *m = (GstSDPMedia *)gst_sdp_message_get_media(answer, i);
    const int video = !g_strcmp0(gst_sdp_media_get_media(m), "video");
    const int pt = video ? ch->video_pt : ch->audio_pt;
    if (!pt_attribute(m, "rtpmap", pt) || !media_has(m, "sendonly") || media_has(m, "msid"))
      continue;
    gst_sdp_media_add_attribute(m, "msid",
                                video ? "facecast facecast-video" : "facecast facecast-audio");
    if (!video || !ch->video_plid[0]) continue;
    char prefix[16];
    const int n = snprintf(prefix, sizeof prefix, "%d ", pt);
    guint k;
    for (k = 0; k < gst_sdp_media_attributes_len(m); k++) {
      const GstSDPAttribute *a = gst_sdp_media_get_attribute(m, k);
      if (!g_strcmp0(a->key, "fmtp") && a->value && !strncmp(a->value, prefix, (size_t)n)) break;
    }
    if (k == gst_sdp_media_attributes_len(m)) {
      gchar *v = g_strdup_printf("%d packetization-mode=1;profile-level-id=%s", pt, ch->video_plid);
      gst_sdp_media_add_attribute(m, "fmtp", v);
      g_free(v);
    } else if (!strstr(gst_sdp_media_get_attribute(m, k)->value, "profile-level-id=")) {
      GstSDPAttribute na;
      gchar *v = g_strdup_printf("%s;profile-level-id=%s", gst_sdp_media_get_attribute(m, k)->value,
                                 ch->video_plid);
      gst_sdp_attribute_set(&na, "fmtp", v);
      gst_sdp_media_replace_attribute(m, k, &na); /* takes na's contents */
      g_free(v);
    }
  }
}

/* set-remote-description (takes *offer), create-answer, set-local-description. */
static int negotiate(GstElement *webrtc, GstSDPMessage **offer, const offer_choice *ch) {
  GstWebRTCSessionDescription *desc =
      gst_webrtc_session_description_new(GST_WEBRTC_SDP_TYPE_OFFER, *offer);
  GstWebRTCSessionDescription *answer = NULL;
  GstStructure *reply;
  int rc = 0;
  *offer = NULL; /* desc owns it */

  GstPromise *pr = gst_promise_new();
  g_signal_emit_by_name(webrtc, "set-remote-description", desc, pr);
  /* webrtcbin rejects offers it cannot use, e.g. without ICE credentials or fingerprint. */
  if ((rc = wait_reply(pr, "setting the SDP offer", FC_EINVAL, &reply))) goto out;
  if (reply) gst_structure_free(reply);

  park_other_transceivers(webrtc);

  pr = gst_promise_new();
  g_signal_emit_by_name(webrtc, "create-answer", NULL, pr);
  if ((rc = wait_reply(pr, "creating the SDP answer", FC_EINVAL, &reply))) goto out;
  if (reply) {
    gst_structure_get(reply, "answer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &answer, NULL);
    gst_structure_free(reply);
  }
  if (!answer) {
    rc = fc_error_set(FC_EMEDIA, "webrtcbin created no SDP answer");
    goto out;
  }
  fix_answer(answer->sdp, ch);

  pr = gst_promise_new();
  g_signal_emit_by_name(webrtc, "set-local-description", answer, pr);
  /* the answer is made from the offer: what it refuses (e.g. two DTLS fingerprints) is the
   * offer's doing */
  if ((rc = wait_reply(pr, "answering the offer", FC_EINVAL, &reply))) goto out;
  if (reply) gst_structure_free(reply);

out:
  if (answer) gst_webrtc_session_description_free(answer);
  gst_webrtc_session_description_free(desc);
  return rc;
}

/* The watch thread, one per WebRTC output. First it waits for ICE gathering (or the timeout)
 * and hands the local description, which by then lists the gathered candidates, to
 * on_answer. Then it checks once a second that a connected peer is still sending RTCP. */
typedef struct watch_job {
  live_shared *sh;    /* a reference */
  GstElement *webrtc; /* a reference */
  gint64 deadline;    /* for the answer, g_get_monotonic_time() units */
} watch_job;

static gpointer watch_main(gpointer data) {
  watch_job *job = data;
  live_shared *s = job->sh;

  g_mutex_lock(&s->lock);
  while (!s->gathered && !s->stop_waiting) {
    if (!g_cond_wait_until(&s->cond, &s->lock, job->deadline)) break; /* timed out */
  }
  int stop = s->stop_waiting;
  g_mutex_unlock(&s->lock);

  if (!stop) {
    GstWebRTCSessionDescription *local = NULL;
    g_object_get(job->webrtc, "local-description", &local, NULL);
    gchar *text = local ? gst_sdp_message_as_text(local->sdp) : NULL;
    g_mutex_lock(&s->cb_lock);
    if (!s->destroyed && s->on_answer) {
      if (text) {
        s->on_answer(s->answer_user, text, 0);
      } else {
        /* The callee may read the detail on this thread, as after any failed call. */
        s->on_answer(s->answer_user, NULL,
                     fc_error_set(FC_EMEDIA, "live output: webrtcbin has no local description"));
      }
    }
    g_mutex_unlock(&s->cb_lock);
    g_free(text);
    if (local) gst_webrtc_session_description_free(local);
  }

  g_mutex_lock(&s->lock);
  while (!s->stop_waiting) {
    const gint64 now = g_get_monotonic_time();
    const gint64 heard = atomic_load(&s->peer_heard_us);
    if (s->state == FC_LIVE_CONNECTED && !s->peer_gone && heard && now - heard > PEER_TIMEOUT_US) {
      s->peer_gone = 1;
      g_mutex_unlock(&s->lock);
      set_state(s, FC_LIVE_CLOSED);
      g_mutex_lock(&s->lock);
      continue;
    }
    g_cond_wait_until(&s->cond, &s->lock, now + G_TIME_SPAN_SECOND);
  }
  g_mutex_unlock(&s->lock);

  gst_object_unref(job->webrtc);
  shared_unref(s);
  free(job);
  return NULL;
}

/* ---- teardown ---- */

static void teardown(fc_live *l) {
  if (l->watch_thread) {
    g_mutex_lock(&l->sh->lock);
    l->sh->stop_waiting = 1;
    g_cond_broadcast(&l->sh->cond);
    g_mutex_unlock(&l->sh->lock);
    g_thread_join(l->watch_thread); /* it holds its own references; joined so it is gone */
    l->watch_thread = NULL;
  }
  if (l->webrtc) {
    /* The handlers hold their own references to the shared state, so one already running on
     * webrtcbin's thread is safe; disconnecting first just spares them the work. */
    if (l->sig_gathering) g_signal_handler_disconnect(l->webrtc, l->sig_gathering);
    if (l->sig_connection) g_signal_handler_disconnect(l->webrtc, l->sig_connection);
    l->sig_gathering = l->sig_connection = 0;
  }
  if (l->pipeline) {
    /* NULL joins the streaming threads and webrtcbin's own thread. */
    gst_element_set_state(l->pipeline, GST_STATE_NULL);
  }
  if (l->bus) {
    if (l->sync_handler_set) gst_bus_set_sync_handler(l->bus, NULL, NULL, NULL);
    l->sync_handler_set = 0;
    gst_object_unref(l->bus);
    l->bus = NULL;
  }
  if (l->venc_src) {
    gst_object_unref(l->venc_src);
    l->venc_src = NULL;
  }
  fc_gst_release_pool(&l->vpool);
  fc_gst_release_pool(&l->apool);
  if (l->pipeline) {
    gst_object_unref(l->pipeline);
    l->pipeline = NULL;
  }
  l->webrtc = l->vsrc = l->asrc = NULL;
}

/* ---- public API ---- */

fc_live *fc_live_create(const fc_live_params *params, const char *offer_sdp,
                        fc_live_answer_cb on_answer, void *user, int *err) {
  int rc = 0;
  fc_live *l = NULL;
  GstSDPMessage *offer = NULL;
  offer_choice ch = {.video_pt = NULL_VIDEO_PT, .audio_pt = NULL_AUDIO_PT, .video_plid = ""};
  GstCaps *vcaps = NULL, *acaps = NULL, *h264caps = NULL, *vrtp = NULL, *artp = NULL;
  GstElement *venc = NULL, *vfilter = NULL, *vpay = NULL, *aconv = NULL, *ares = NULL, *aenc = NULL,
             *apay = NULL, *vsink = NULL, *asink = NULL;
  fc_live_params p;

  if (!params) {
    rc = fc_error_set(FC_EINVAL, "fc_live_create: no parameters");
    goto fail;
  }
  p = *params;
  if (p.fps == 0) p.fps = 25;
  if (p.sample_rate == 0) p.sample_rate = 16000;
  if (p.video_kbps == 0) p.video_kbps = 1500;
  if (!p.x264_preset) p.x264_preset = FC_LIVE_X264_PRESET;
  if (p.x264_threads == 0) p.x264_threads = 1;
  if (p.kind != FC_LIVE_WEBRTC && p.kind != FC_LIVE_NULL) {
    rc = fc_error_set(FC_EINVAL, "live output: unknown kind %d", (int)p.kind);
    goto fail;
  }
  if (p.width <= 0 || p.height <= 0 || (p.width & 1) || (p.height & 1) || p.width > 8192 ||
      p.height > 8192) {
    rc = fc_error_set(FC_EINVAL, "live output: video size %dx%d must be positive and even", p.width,
                      p.height);
    goto fail;
  }
  if (p.fps < 1 || p.fps > 240 || p.sample_rate < 8000 || p.sample_rate > 192000 ||
      p.video_kbps < 1 || p.video_kbps > 100000 || p.video_qp < 0 || p.video_qp > 51 ||
      p.x264_threads < 0 || p.x264_threads > 64 ||
      p.opus_complexity < 0 || p.opus_complexity > 10) {
    rc = fc_error_set(FC_EINVAL,
                      "live output: invalid parameters (fps %d, sample rate %d, "
                      "video %d kbit/s, QP %d, %d x264 threads, Opus complexity %d)",
                      p.fps, p.sample_rate, p.video_kbps, p.video_qp, p.x264_threads,
                      p.opus_complexity);
    goto fail;
  }
  if (p.stun_server && strncmp(p.stun_server, "stun://", 7) != 0) {
    rc = fc_error_set(FC_EINVAL, "live output: STUN server '%s' is not stun://host:port",
                      p.stun_server);
    goto fail;
  }
  if (p.turn_server && strncmp(p.turn_server, "turn://", 7) != 0 &&
      strncmp(p.turn_server, "turns://", 8) != 0) {
    rc = fc_error_set(FC_EINVAL, "live output: TURN server is not turn(s)://user:pass@host:port");
    goto fail;
  }
  if (p.kind == FC_LIVE_WEBRTC && !on_answer) {
    rc = fc_error_set(FC_EINVAL, "live output: a WebRTC output needs an answer callback");
    goto fail;
  }

  /* The offer is checked before anything is built (and before GStreamer is even needed). */
  if (p.kind == FC_LIVE_WEBRTC && (rc = parse_offer(offer_sdp, &offer, &ch))) goto fail;

  if ((rc = fc_gst_init())) goto fail;
  /* webrtcbin only fails at pad-request time without these; name the package up front. */
  if (p.kind == FC_LIVE_WEBRTC &&
      ((rc = require_element("webrtcbin")) || (rc = require_element("nicesrc")) ||
       (rc = require_element("dtlssrtpenc"))))
    goto fail;

  l = calloc(1, sizeof *l);
  live_shared *sh = l ? calloc(1, sizeof *sh) : NULL;
  if (!l || !sh) {
    free(l);
    l = NULL;
    rc = fc_error_set(FC_ENOMEM, "live output: out of memory");
    goto fail;
  }
  l->sh = sh;
  sh->refs = 1;
  g_mutex_init(&sh->cb_lock);
  g_mutex_init(&sh->lock);
  g_cond_init(&sh->cond);
  sh->on_state = p.on_state;
  sh->state_user = p.user;
  sh->on_answer = on_answer;
  sh->answer_user = user;
  /* Without a peer there is nothing to connect: media "flows" from the start. */
  sh->state = sh->reported = p.kind == FC_LIVE_NULL ? FC_LIVE_CONNECTED : FC_LIVE_CONNECTING;
  /* The strings are only used below (through p and params); do not keep the caller's
   * pointers. */
  l->p = p;
  l->p.x264_preset = NULL;
  l->p.stun_server = l->p.turn_server = NULL;

  l->pipeline = gst_pipeline_new("fc-live");
  if (!l->pipeline) {
    rc = fc_error_set(FC_EMEDIA, "could not create a GStreamer pipeline");
    goto fail;
  }
  /* Pin the clock: timestamps are running times on it (see the design note). */
  {
    GstClock *clock = gst_system_clock_obtain();
    gst_pipeline_use_clock(GST_PIPELINE(l->pipeline), clock);
    gst_object_unref(clock);
  }

  /* Video encoder: real-time settings (x264_live.c). Rate control: constant quality (CRF 23,
   * x264's default quality) capped at video_kbps through the VBV, not an average bit rate: a
   * talking head is mostly still, so an average rate spends its bits on noise at a low
   * quantizer, and x264's time grows with what it codes. Measured with bench serve at 512x512
   * (ultrafast; docs/BENCHMARKS.md): 1.5 -> 0.53 Mbit/s per session, encoder thread 3.8-3.9
   * -> 2.2-2.8 % of a core. A still picture (video_qp set) uses a constant quantizer instead:
   * no half-size look at each whole frame, which CRF and VBV need and which was a third of
   * x264's time on a talking photo; its bits are bounded by the moving mouth; and x264 is told
   * which macroblocks did not change. trellis off: little gain at these rates for its CPU. */
  const fc_x264_config xc = {.preset = p.x264_preset, .threads = p.x264_threads,
                             .keyint = 2 * p.fps, .qp = p.video_qp, .crf = LIVE_CRF,
                             .vbv_kbps = p.video_kbps};
  if (!(venc = fc_x264enc_new(&xc, &rc))) goto fail;
  if (!gst_bin_add(GST_BIN(l->pipeline), venc)) {
    rc = fc_error_set(FC_EMEDIA, "live output: could not add the video encoder");
    goto fail;
  }
  if ((rc = fc_gst_add_element(l->pipeline, "appsrc", "v", &l->vsrc)) ||
      (rc = fc_gst_add_element(l->pipeline, "capsfilter", "vfilter", &vfilter)) ||
      (rc = fc_gst_add_element(l->pipeline, "rtph264pay", "vpay", &vpay)) ||
      (rc = fc_gst_add_element(l->pipeline, "appsrc", "a", &l->asrc)) ||
      (rc = fc_gst_add_element(l->pipeline, "audioconvert", "aconv", &aconv)) ||
      (rc = fc_gst_add_element(l->pipeline, "audioresample", "ares", &ares)) ||
      (rc = fc_gst_add_element(l->pipeline, "opusenc", "aenc", &aenc)) ||
      (rc = fc_gst_add_element(l->pipeline, "rtpopuspay", "apay", &apay)))
    goto fail;
  if (p.kind == FC_LIVE_WEBRTC) {
    if ((rc = fc_gst_add_element(l->pipeline, "webrtcbin", "webrtc", &l->webrtc))) goto fail;
  } else {
    if ((rc = fc_gst_add_element(l->pipeline, "fakesink", "vsink", &vsink)) ||
        (rc = fc_gst_add_element(l->pipeline, "fakesink", "asink", &asink)))
      goto fail;
  }

  /* Raw inputs. */
  gst_video_info_init(&l->vinfo);
  if (!gst_video_info_set_format(&l->vinfo, GST_VIDEO_FORMAT_I420, (guint)p.width,
                                 (guint)p.height)) {
    rc = fc_error_set(FC_EMEDIA, "live output: GStreamer rejected video size %dx%d", p.width,
                      p.height);
    goto fail;
  }
  GST_VIDEO_INFO_FPS_N(&l->vinfo) = p.fps;
  GST_VIDEO_INFO_FPS_D(&l->vinfo) = 1;
  GST_VIDEO_INFO_PAR_N(&l->vinfo) = 1;
  GST_VIDEO_INFO_PAR_D(&l->vinfo) = 1;
  vcaps = gst_video_info_to_caps(&l->vinfo);
  GstAudioInfo ainfo;
  gst_audio_info_init(&ainfo);
  gst_audio_info_set_format(&ainfo, GST_AUDIO_FORMAT_S16LE, p.sample_rate, 1, NULL);
  acaps = gst_audio_info_to_caps(&ainfo);
  h264caps =
      gst_caps_new_simple("video/x-h264", "profile", G_TYPE_STRING, "constrained-baseline", NULL);
  vrtp = rtp_caps(1, ch.video_pt);
  artp = rtp_caps(0, ch.audio_pt);
  if (!vcaps || !acaps || !h264caps || !vrtp || !artp) {
    rc = fc_error_set(FC_EMEDIA, "live output: could not build stream caps");
    goto fail;
  }

  /* Live, non-blocking, leaky: see the design note. Timestamps are ours (do-timestamp off). */
  g_object_set(l->vsrc, "caps", vcaps, "format", GST_FORMAT_TIME, "is-live", TRUE, "do-timestamp",
               FALSE, "block", FALSE, "max-buffers", (guint64)VIDEO_QUEUE_FRAMES, "max-bytes",
               (guint64)0, "emit-signals", FALSE, NULL);
  g_object_set(l->asrc, "caps", acaps, "format", GST_FORMAT_TIME, "is-live", TRUE, "do-timestamp",
               FALSE, "block", FALSE, "max-buffers", (guint64)0, "max-bytes", (guint64)0,
               "max-time", (guint64)AUDIO_QUEUE_MS * GST_MSECOND, "emit-signals", FALSE, NULL);
  if (!fc_gst_has_property(l->vsrc, "leaky-type")) {
    /* 1.20+ has it; without it a full non-blocking appsrc would grow without bound. */
    rc = fc_error_set(FC_EMEDIA, "appsrc has no leaky-type (GStreamer 1.20 or newer needed)");
    goto fail;
  }
  gst_util_set_object_arg(G_OBJECT(l->vsrc), "leaky-type", "downstream");
  gst_util_set_object_arg(G_OBJECT(l->asrc), "leaky-type", "downstream");
  {
    GstAppSrcCallbacks cbs;
    memset(&cbs, 0, sizeof cbs);
    cbs.enough_data = video_enough_data;
    gst_app_src_set_callbacks(GST_APP_SRC(l->vsrc), &cbs, shared_ref(sh), shared_unref);
    cbs.enough_data = audio_enough_data;
    gst_app_src_set_callbacks(GST_APP_SRC(l->asrc), &cbs, shared_ref(sh), shared_unref);
  }

  g_object_set(vfilter, "caps", h264caps, NULL);
  /* SPS/PPS before every IDR, so a viewer can start at any key frame; zero-latency STAP-A
   * aggregation of SPS+PPS+IDR without waiting for the next frame. */
  g_object_set(vpay, "pt", (guint)ch.video_pt, "config-interval", -1, NULL);
  set_optional(vpay, "aggregate-mode", "zero-latency");

  /* Audio encoder: speech, 40 ms frames — the pacer hands over 40 ms of sound per video
   * frame, so shorter frames would add no responsiveness, only packets and encoder calls.
   * Complexity FC_LIVE_OPUS_COMPLEXITY (see live.h) instead of libopus' 10. */
  g_object_set(aenc, "bitrate", OPUS_BITRATE, NULL);
  char cx[8];
  snprintf(cx, sizeof cx, "%d", p.opus_complexity ? p.opus_complexity : FC_LIVE_OPUS_COMPLEXITY);
  set_optional(aenc, "complexity", cx);
  set_optional(aenc, "frame-size", "40");
  set_optional(aenc, "audio-type", "voice");
  g_object_set(apay, "pt", (guint)ch.audio_pt, NULL);

  {
    GstElement *vchain[] = {l->vsrc, venc, vfilter, vpay};
    GstElement *achain[] = {l->asrc, aconv, ares, aenc, apay};
    if ((rc = fc_gst_link_chain(vchain, 4)) || (rc = fc_gst_link_chain(achain, 5))) goto fail;
  }
  if (p.kind == FC_LIVE_NULL) {
    /* No clock sync, no preroll wait, no last-sample reference holding a buffer. */
    g_object_set(vsink, "sync", FALSE, "async", FALSE, "enable-last-sample", FALSE, NULL);
    g_object_set(asink, "sync", FALSE, "async", FALSE, "enable-last-sample", FALSE, NULL);
    if (!gst_element_link(vpay, vsink) || !gst_element_link(apay, asink)) {
      rc = fc_error_set(FC_EMEDIA, "could not link the payloaders to fakesinks");
      goto fail;
    }
  }

  sh->frame_period = gst_util_uint64_scale(1, GST_SECOND, (guint64)p.fps);
  /* picture 2 .. 2*fps - 1 (none at 1 fps, where every other picture is a key frame anyway) */
  l->key_phase = p.fps > 1 ? 1 + g_random_int_range(1, 2 * p.fps - 1) : 0;
  if ((rc = add_probe(venc, "src", sh, video_out)) || (rc = add_probe(aenc, "src", sh, count_bytes)))
    goto fail;
  l->venc_src = gst_element_get_static_pad(venc, "src");

  l->vpool = fc_gst_make_pool(vcaps, (guint)GST_VIDEO_INFO_SIZE(&l->vinfo), VIDEO_QUEUE_FRAMES + 2);
  l->apool = fc_gst_make_pool(acaps, AUDIO_CHUNK_SAMPLES * sizeof(int16_t), 8);
  if (!l->vpool || !l->apool) {
    rc = fc_error_set(FC_EMEDIA, "live output: could not set up buffer pools");
    goto fail;
  }

  l->bus = gst_pipeline_get_bus(GST_PIPELINE(l->pipeline));
  gst_bus_set_sync_handler(l->bus, on_bus_message, shared_ref(sh), shared_unref);
  l->sync_handler_set = 1;

  if (p.kind == FC_LIVE_WEBRTC) {
    g_signal_connect(l->pipeline, "deep-element-added", G_CALLBACK(on_deep_element_added), NULL);
    watch_rtpbin(l->webrtc, sh);
    g_object_set(l->webrtc, "bundle-policy", GST_WEBRTC_BUNDLE_POLICY_MAX_BUNDLE, NULL);
    if (params->stun_server) g_object_set(l->webrtc, "stun-server", params->stun_server, NULL);
    if (params->turn_server) g_object_set(l->webrtc, "turn-server", params->turn_server, NULL);
    l->sig_gathering = g_signal_connect_data(l->webrtc, "notify::ice-gathering-state",
                                             G_CALLBACK(on_gathering_state), shared_ref(sh),
                                             shared_unref_closure, 0);
    l->sig_connection = g_signal_connect_data(l->webrtc, "notify::connection-state",
                                              G_CALLBACK(on_connection_state), shared_ref(sh),
                                              shared_unref_closure, 0);
    if ((rc = link_to_webrtc(l->webrtc, vpay, vrtp)) ||
        (rc = link_to_webrtc(l->webrtc, apay, artp)))
      goto fail;
  }

  /* Live sources: the pipeline reaches PLAYING without preroll, inside this call, so the
   * clock and base time exist before the first push. webrtcbin starts its thread here. */
  if (gst_element_set_state(l->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    rc = report_recorded(sh, FC_EMEDIA);
    if (!rc) rc = fc_error_set(FC_EMEDIA, "live output: the GStreamer pipeline did not start");
    goto fail;
  }
  if ((rc = report_recorded(sh, FC_EMEDIA))) goto fail;

  if (p.kind == FC_LIVE_WEBRTC) {
    if ((rc = negotiate(l->webrtc, &offer, &ch))) goto fail;
    if ((rc = report_recorded(sh, FC_EMEDIA))) goto fail;
    watch_job *job = calloc(1, sizeof *job);
    if (!job) {
      rc = fc_error_set(FC_ENOMEM, "live output: out of memory");
      goto fail;
    }
    job->sh = shared_ref(sh);
    job->webrtc = gst_object_ref(l->webrtc);
    job->deadline = g_get_monotonic_time() + ANSWER_TIMEOUT_US;
    GError *e = NULL;
    l->watch_thread = g_thread_try_new("fc-live-watch", watch_main, job, &e);
    if (!l->watch_thread) {
      gst_object_unref(job->webrtc);
      shared_unref(job->sh);
      free(job);
      rc = fc_error_set(FC_EMEDIA, "live output: cannot start a thread: %s",
                        e ? e->message : "unknown error");
      if (e) g_error_free(e);
      goto fail;
    }
  }

  /* From here on callbacks may run. A state change that happened during create (only
   * CONNECTING can: nothing connects before the peer has our answer) is not replayed. */
  g_mutex_lock(&sh->cb_lock);
  g_mutex_lock(&sh->lock);
  sh->reported = sh->state;
  g_mutex_unlock(&sh->lock);
  sh->armed = 1;
  g_mutex_unlock(&sh->cb_lock);

  gst_caps_unref(vcaps);
  gst_caps_unref(acaps);
  gst_caps_unref(h264caps);
  gst_caps_unref(vrtp);
  gst_caps_unref(artp);
  if (err) *err = 0;
  return l;

fail:
  if (offer) gst_sdp_message_free(offer);
  if (vcaps) gst_caps_unref(vcaps);
  if (acaps) gst_caps_unref(acaps);
  if (h264caps) gst_caps_unref(h264caps);
  if (vrtp) gst_caps_unref(vrtp);
  if (artp) gst_caps_unref(artp);
  if (l) {
    /* Not armed: nothing reaches the user even if a handler runs during teardown. */
    g_mutex_lock(&l->sh->cb_lock);
    l->sh->destroyed = 1;
    g_mutex_unlock(&l->sh->cb_lock);
    teardown(l);
    shared_unref(l->sh);
    free(l);
  }
  if (err) *err = rc;
  return NULL;
}

void fc_live_destroy(fc_live *l) {
  if (!l) return;
  /* Waits for a callback in progress; none starts after this. */
  g_mutex_lock(&l->sh->cb_lock);
  l->sh->destroyed = 1;
  g_mutex_unlock(&l->sh->cb_lock);
  teardown(l);
  shared_unref(l->sh);
  free(l);
}

/* The pipeline's running time now. */
static GstClockTime running_time_now(fc_live *l) {
  GstClock *clock = gst_element_get_clock(l->pipeline);
  if (!clock) return 0;
  const GstClockTime now = gst_clock_get_time(clock);
  gst_object_unref(clock);
  const GstClockTime base = gst_element_get_base_time(l->pipeline);
  return now > base ? now - base : 0;
}

/* Copies the caller's picture into a pooled buffer: by rectangles when the buffer already
 * holds a picture of the same still base (a talking photo), else whole. */
static int fill_video(fc_live *l, GstBuffer *buf, const uint8_t *i420, const fc_i420_delta *delta) {
  fc_i420_delta *held = gst_mini_object_get_qdata(GST_MINI_OBJECT(buf), fc_x264_delta_quark());
  if (!held) { /* once per buffer the pool makes */
    held = g_new0(fc_i420_delta, 1);
    gst_mini_object_set_qdata(GST_MINI_OBJECT(buf), fc_x264_delta_quark(), held, g_free);
  }
  GstVideoFrame vf;
  if (!gst_video_frame_map(&vf, &l->vinfo, buf, GST_MAP_WRITE)) {
    held->base = NULL;
    return -1;
  }
  uint8_t *planes[3];
  int strides[3];
  for (int i = 0; i < 3; i++) {
    planes[i] = GST_VIDEO_FRAME_PLANE_DATA(&vf, i);
    strides[i] = GST_VIDEO_FRAME_PLANE_STRIDE(&vf, i);
  }
  fc_i420_update(planes, strides, held, i420, delta, l->p.width, l->p.height);
  gst_video_frame_unmap(&vf);
  return 0;
}

static int push_video(fc_live *l, const uint8_t *i420, const fc_i420_delta *delta,
                      int64_t index) {
  GstBuffer *buf = NULL;
  GstFlowReturn flow = gst_buffer_pool_acquire_buffer(l->vpool, &buf, NULL);
  if (flow != GST_FLOW_OK || !buf) {
    return fc_error_set(FC_EMEDIA, "live output: no video buffer from the pool (%s)",
                        gst_flow_get_name(flow));
  }
  if (fill_video(l, buf, i420, delta)) {
    gst_buffer_unref(buf);
    return fc_error_set(FC_EMEDIA, "live output: could not map a video buffer");
  }

  const guint64 fps = (guint64)l->p.fps;
  const GstClockTime t0 = gst_util_uint64_scale((guint64)index, GST_SECOND, fps);
  const GstClockTime t1 = gst_util_uint64_scale((guint64)index + 1, GST_SECOND, fps);
  GST_BUFFER_PTS(buf) = l->origin + (t0 - l->origin_media);
  GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(buf) = t1 - t0;
  GST_BUFFER_OFFSET(buf) = (guint64)index;
  if (index > l->next_index && l->started) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
  {
    const GstClockTime pts = GST_BUFFER_PTS(buf);
    const size_t slot = (size_t)(pts / l->sh->frame_period) % PUSH_RING;
    atomic_store_explicit(&l->sh->push_ring[slot].pushed, running_time_now(l), memory_order_relaxed);
    atomic_store_explicit(&l->sh->push_ring[slot].pts, pts, memory_order_release);
  }

  /* Non-blocking: a full queue drops its oldest frame instead (counted by the callback). */
  flow = gst_app_src_push_buffer(GST_APP_SRC(l->vsrc), buf);
  if (flow != GST_FLOW_OK) {
    int rc = report_recorded(l->sh, FC_EMEDIA);
    return rc ? rc
              : fc_error_set(FC_EMEDIA, "live output: GStreamer refused a frame (%s)",
                             gst_flow_get_name(flow));
  }
  atomic_fetch_add_explicit(&l->sh->frames_pushed, 1, memory_order_relaxed);
  if (++l->pictures == l->key_phase) fc_live_force_keyframe(l);
  return 0;
}

static int push_audio(fc_live *l, const int16_t *pcm, size_t n, int64_t first_sample) {
  const guint64 rate = (guint64)l->p.sample_rate;
  size_t done = 0;
  while (done < n) {
    const size_t cnt = n - done < AUDIO_CHUNK_SAMPLES ? n - done : AUDIO_CHUNK_SAMPLES;
    const guint64 s0 = (guint64)first_sample + done;
    const GstClockTime t0 = gst_util_uint64_scale(s0, GST_SECOND, rate);
    const GstClockTime t1 = gst_util_uint64_scale(s0 + cnt, GST_SECOND, rate);
    /* Audio from before the first pushed frame would land before the origin: skip it. */
    if (l->origin + t0 < l->origin_media) {
      done += cnt;
      continue;
    }
    GstBuffer *buf = NULL;
    GstFlowReturn flow = gst_buffer_pool_acquire_buffer(l->apool, &buf, NULL);
    if (flow != GST_FLOW_OK || !buf) {
      return fc_error_set(FC_EMEDIA, "live output: no audio buffer from the pool (%s)",
                          gst_flow_get_name(flow));
    }
    /* The pool restores the full size when the buffer comes back. */
    gst_buffer_fill(buf, 0, pcm + done, cnt * sizeof(int16_t));
    gst_buffer_set_size(buf, (gssize)(cnt * sizeof(int16_t)));
    GST_BUFFER_PTS(buf) = l->origin + t0 - l->origin_media;
    GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION(buf) = t1 - t0;
    GST_BUFFER_OFFSET(buf) = s0;
    GST_BUFFER_OFFSET_END(buf) = s0 + cnt;
    /* A gap in the caller's clock: let the encoder resync rather than stretch the audio. */
    if (done == 0 && first_sample > l->next_sample)
      GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
    flow = gst_app_src_push_buffer(GST_APP_SRC(l->asrc), buf);
    if (flow != GST_FLOW_OK) {
      int rc = report_recorded(l->sh, FC_EMEDIA);
      return rc ? rc
                : fc_error_set(FC_EMEDIA, "live output: GStreamer refused audio (%s)",
                               gst_flow_get_name(flow));
    }
    done += cnt;
  }
  l->next_sample = first_sample + (int64_t)n;
  return 0;
}

int fc_live_push(fc_live *l, const uint8_t *i420, int64_t index, const int16_t *pcm, size_t n,
                 int64_t first_sample) {
  return fc_live_push_delta(l, i420, NULL, index, pcm, n, first_sample);
}

int fc_live_push_delta(fc_live *l, const uint8_t *i420, const fc_i420_delta *delta, int64_t index,
                       const int16_t *pcm, size_t n, int64_t first_sample) {
  if (!l || (!i420 && !l->started) || index < 0 || (!pcm && n) || first_sample < 0)
    return fc_error_set(FC_EINVAL, "fc_live_push: bad argument");
  int rc = report_recorded(l->sh, FC_EMEDIA);
  if (rc) return rc;
  if (l->started && index < l->next_index) {
    return fc_error_set(FC_EINVAL, "live output: frame %lld pushed after frame %lld",
                        (long long)index, (long long)(l->next_index - 1));
  }
  if (l->started && n && first_sample < l->next_sample) {
    return fc_error_set(FC_EINVAL,
                        "live output: audio at sample %lld overlaps audio already "
                        "pushed (up to %lld)",
                        (long long)first_sample, (long long)l->next_sample);
  }
  if (!l->started) {
    /* The origin: this frame is shown "now" on the pipeline's clock. */
    l->origin = running_time_now(l);
    l->origin_media = gst_util_uint64_scale((guint64)index, GST_SECOND, (guint64)l->p.fps);
    l->next_sample = first_sample;
  }
  if (i420 && (rc = push_video(l, i420, delta, index))) return rc;
  if (!i420) /* the picture stands: nothing to encode, the frame still counts as delivered */
    atomic_fetch_add_explicit(&l->sh->frames_pushed, 1, memory_order_relaxed);
  l->started = 1;
  l->next_index = index + 1;
  if (n && (rc = push_audio(l, pcm, n, first_sample))) return rc;
  return 0;
}

int fc_live_check_offer(const char *sdp) {
  GstSDPMessage *msg = NULL;
  offer_choice ch;
  int err = parse_offer(sdp, &msg, &ch);
  if (msg) gst_sdp_message_free(msg);
  return err;
}

int fc_live_check_preset(const char *preset) {
  if (!fc_x264_preset_known(preset))
    return fc_error_set(FC_EINVAL, "--preset: unknown x264 speed preset '%s'", preset ? preset : "");
  return 0;
}

void fc_live_force_keyframe(fc_live *l) {
  if (!l || !l->venc_src) return;
  /* The same upstream event rtpsession sends for a viewer's PLI/FIR (it reaches the encoder
   * through rtph264pay); all-headers so SPS/PPS come with it. GstVideoEncoder applies it to
   * the next frame it encodes. */
  GstEvent *ev = gst_video_event_new_upstream_force_key_unit(
      GST_CLOCK_TIME_NONE, TRUE, (guint)g_atomic_int_add(&l->keyframe_count, 1) + 1);
  gst_pad_send_event(l->venc_src, ev);
}

void fc_live_get_stats(fc_live *l, fc_live_stats *st) {
  if (!st) return;
  memset(st, 0, sizeof *st);
  if (!l) return;
  st->frames_pushed = atomic_load_explicit(&l->sh->frames_pushed, memory_order_relaxed);
  st->frames_dropped = atomic_load_explicit(&l->sh->frames_dropped, memory_order_relaxed);
  st->bytes_sent = atomic_load_explicit(&l->sh->bytes_sent, memory_order_relaxed);
  st->frames_encoded = atomic_load_explicit(&l->sh->frames_encoded, memory_order_relaxed);
  st->encode_delay_us = atomic_load_explicit(&l->sh->encode_delay_us, memory_order_relaxed);
  st->frames_encoded_late = atomic_load_explicit(&l->sh->frames_encoded_late, memory_order_relaxed);
  st->keyframes = atomic_load_explicit(&l->sh->keyframes, memory_order_relaxed);
  g_mutex_lock(&l->sh->lock);
  st->state = l->sh->state;
  g_mutex_unlock(&l->sh->lock);
}
