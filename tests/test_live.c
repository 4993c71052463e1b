/* Live outputs: a WebRTC loopback against a second webrtcbin in this process playing the
 * browser (it offers recvonly H.264 + Opus, non-trickle, and decodes what it gets), key frames
 * on request and on the viewer's PLI, offers that must be refused, the benchmark (NULL) kind,
 * and destroy at awkward moments. All traffic stays on this machine's own addresses. */
#define GST_USE_UNSTABLE_API
#include "core/tsan.h"
#include "facecast/error.h"
#include "media/live.h"
#include "media/sink.h"
#include "fc_test.h"
#include "media/x264_live.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <gst/video/video.h>
#include <gst/webrtc/webrtc.h>

#include <stdatomic.h>

#define W 320
#define H 240
#define FPS 25
#define RATE 16000
#define SPF (RATE / FPS) /* samples per frame */

/* ---- what the output tells us ---- */

typedef struct cb_log {
  GMutex lock;
  GCond cond;
  int answers;
  char *answer;
  int answer_err;
  int states;
  int connected, failed, closed;
  int destroyed;     /* set by the test right after fc_live_destroy returns */
  int after_destroy; /* callbacks seen after that: must stay 0 */
} cb_log;

static void log_init(cb_log *c) {
  memset(c, 0, sizeof *c);
  g_mutex_init(&c->lock);
  g_cond_init(&c->cond);
}

static void log_clear(cb_log *c) {
  g_free(c->answer);
  g_mutex_clear(&c->lock);
  g_cond_clear(&c->cond);
}

static void on_answer(void *user, const char *sdp, int err) {
  cb_log *c = user;
  g_mutex_lock(&c->lock);
  if (c->destroyed) c->after_destroy++;
  c->answers++;
  g_free(c->answer);
  c->answer = g_strdup(sdp);
  c->answer_err = err;
  g_cond_broadcast(&c->cond);
  g_mutex_unlock(&c->lock);
}

static void on_state(void *user, fc_live_state st) {
  cb_log *c = user;
  g_mutex_lock(&c->lock);
  if (c->destroyed) c->after_destroy++;
  c->states++;
  if (st == FC_LIVE_CONNECTED) c->connected++;
  if (st == FC_LIVE_FAILED) c->failed++;
  if (st == FC_LIVE_CLOSED) c->closed++;
  g_cond_broadcast(&c->cond);
  g_mutex_unlock(&c->lock);
}

/* Waits until *field (read under the lock) is nonzero, for at most ms. */
static int log_wait(cb_log *c, const int *field, int ms) {
  const gint64 deadline = g_get_monotonic_time() + (gint64)ms * 1000;
  g_mutex_lock(&c->lock);
  while (!*field && g_cond_wait_until(&c->cond, &c->lock, deadline)) {
  }
  const int v = *field;
  g_mutex_unlock(&c->lock);
  return v;
}

static void log_mark_destroyed(cb_log *c) {
  g_mutex_lock(&c->lock);
  c->destroyed = 1;
  g_mutex_unlock(&c->lock);
}

static fc_live_params params(fc_live_kind kind, cb_log *c) {
  fc_live_params p = {.kind = kind,
                      .width = W,
                      .height = H,
                      .fps = FPS,
                      .sample_rate = RATE,
                      .video_kbps = 600,
                      .on_state = on_state,
                      .user = c};
  return p;
}

/* ---- media ---- */

static uint8_t frame[W * H * 3 / 2];
static int16_t pcm[SPF];

/* A diagonal gradient sliding with the frame index, plus a bright square crossing the picture:
 * smooth motion, no scene cuts (so x264 adds no key frames of its own). */
static void make_frame(int64_t index) {
  uint8_t *y = frame, *u = frame + W * H, *v = u + W * H / 4;
  const int sx = (int)(index * 4 % (W - 40));
  for (int r = 0; r < H; r++)
    for (int c = 0; c < W; c++) {
      int val = (c + r + (int)index * 3) & 255;
      if (c >= sx && c < sx + 40 && r >= 100 && r < 140) val = 235;
      y[r * W + c] = (uint8_t)val;
    }
  for (int r = 0; r < H / 2; r++)
    for (int c = 0; c < W / 2; c++) {
      u[r * (W / 2) + c] = (uint8_t)(128 + (c - W / 4) / 2);
      v[r * (W / 2) + c] = (uint8_t)(128 + (r - H / 4) / 2);
    }
  for (int i = 0; i < SPF; i++) {
    const double t = (double)(index * SPF + i) / RATE;
    pcm[i] = (int16_t)(8000 * sin(2 * M_PI * 440 * t));
  }
}

/* Pushes frames [from, from+count) at real-time pace (one per 40 ms on an absolute schedule). */
static int push_realtime(fc_live *l, int64_t from, int count) {
  const gint64 t0 = g_get_monotonic_time();
  for (int k = 0; k < count; k++) {
    const int64_t i = from + k;
    make_frame(i);
    const int rc = fc_live_push(l, frame, i, pcm, SPF, i * SPF);
    if (rc) return rc;
    const gint64 due = t0 + (gint64)(k + 1) * (G_USEC_PER_SEC / FPS);
    const gint64 now = g_get_monotonic_time();
    if (due > now) g_usleep((gulong)(due - now));
  }
  return 0;
}

/* ---- the "browser": a receiving webrtcbin ---- */

typedef enum { OFFER_BROWSER, OFFER_WHEP } offer_style;

typedef struct receiver {
  GstElement *pipe, *webrtc;
  GMutex lock;
  GCond cond;
  int gathered;
  GstPad *video_depay_sink; /* for sending a PLI upstream; a reference */
  _Atomic int video_frames, audio_buffers, width, height;
  _Atomic int au_total, keyframes, last_kf_au; /* access units out of the depayloader */
} receiver;

static GstPadProbeReturn count_decoded_video(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  receiver *r = data;
  if (atomic_fetch_add(&r->video_frames, 1) == 0) {
    GstCaps *caps = gst_pad_get_current_caps(pad);
    GstVideoInfo vi;
    if (caps && gst_video_info_from_caps(&vi, caps)) {
      atomic_store(&r->width, GST_VIDEO_INFO_WIDTH(&vi));
      atomic_store(&r->height, GST_VIDEO_INFO_HEIGHT(&vi));
    }
    if (caps) gst_caps_unref(caps);
  }
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn count_access_units(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  receiver *r = data;
  GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info);
  const int n = atomic_fetch_add(&r->au_total, 1) + 1;
  if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DELTA_UNIT)) {
    atomic_store(&r->last_kf_au, n);
    atomic_fetch_add(&r->keyframes, 1);
  }
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn count_audio(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  receiver *r = data;
  atomic_fetch_add(&r->audio_buffers, 1);
  return GST_PAD_PROBE_OK;
}

static void add_probe(GstElement *bin, const char *name, const char *pad_name,
                      GstPadProbeCallback cb, receiver *r) {
  GstElement *e = gst_bin_get_by_name(GST_BIN(bin), name);
  GstPad *pad = gst_element_get_static_pad(e, pad_name);
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, cb, r, NULL);
  gst_object_unref(pad);
  gst_object_unref(e);
}

/* A new incoming stream: decode it (the au capsfilter makes one buffer per picture, so the
 * depayloader's output counts pictures and key frames). */
static void on_pad_added(GstElement *webrtc, GstPad *pad, gpointer data) {
  receiver *r = data;
  if (GST_PAD_DIRECTION(pad) != GST_PAD_SRC) return;
  GstCaps *caps = gst_pad_get_current_caps(pad);
  if (!caps) caps = gst_pad_query_caps(pad, NULL);
  const char *enc = gst_structure_get_string(gst_caps_get_structure(caps, 0), "encoding-name");
  const char *desc = "fakesink sync=false async=false";
  int kind = 0;
  if (enc && !g_ascii_strcasecmp(enc, "H264")) {
    desc = "rtph264depay name=depay ! video/x-h264,alignment=au ! avdec_h264 ! "
           "fakesink name=sink sync=false async=false";
    kind = 1;
  } else if (enc && !g_ascii_strcasecmp(enc, "OPUS")) {
    desc = "rtpopusdepay ! opusdec ! fakesink name=sink sync=false async=false";
    kind = 2;
  }
  gst_caps_unref(caps);
  GError *e = NULL;
  GstElement *bin = gst_parse_bin_from_description(desc, TRUE, &e);
  if (!bin) {
    fprintf(stderr, "receiver: %s\n", e ? e->message : "?");
    if (e) g_error_free(e);
    return;
  }
  if (kind == 1) {
    add_probe(bin, "depay", "src", count_access_units, r);
    add_probe(bin, "sink", "sink", count_decoded_video, r);
    GstElement *depay = gst_bin_get_by_name(GST_BIN(bin), "depay");
    g_mutex_lock(&r->lock);
    if (!r->video_depay_sink) r->video_depay_sink = gst_element_get_static_pad(depay, "sink");
    g_mutex_unlock(&r->lock);
    gst_object_unref(depay);
  } else if (kind == 2) {
    add_probe(bin, "sink", "sink", count_audio, r);
  }
  gst_bin_add(GST_BIN(r->pipe), bin);
  gst_element_sync_state_with_parent(bin);
  GstPad *sink = gst_element_get_static_pad(bin, "sink");
  if (gst_pad_link(pad, sink) != GST_PAD_LINK_OK) fprintf(stderr, "receiver: link failed\n");
  gst_object_unref(sink);
}

static void on_recv_gathering(GObject *webrtc, GParamSpec *ps, gpointer data) {
  receiver *r = data;
  GstWebRTCICEGatheringState gs;
  g_object_get(webrtc, "ice-gathering-state", &gs, NULL);
  if (gs != GST_WEBRTC_ICE_GATHERING_STATE_COMPLETE) return;
  g_mutex_lock(&r->lock);
  r->gathered = 1;
  g_cond_broadcast(&r->cond);
  g_mutex_unlock(&r->lock);
}

static const char *const VIDEO_CAPS =
    /* as a browser would: VP8 first, H.264 in several flavours; the output must pick 106 */
    "application/x-rtp,media=video,encoding-name=VP8,payload=96,clock-rate=90000,"
    "rtcp-fb-nack-pli=(boolean)true;"
    "application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000,"
    "packetization-mode=(string)1,profile-level-id=(string)42001f,"
    "level-asymmetry-allowed=(string)1,rtcp-fb-nack-pli=(boolean)true;"
    "application/x-rtp,media=video,encoding-name=H264,payload=106,clock-rate=90000,"
    "packetization-mode=(string)1,profile-level-id=(string)42e01f,"
    "level-asymmetry-allowed=(string)1,rtcp-fb-nack-pli=(boolean)true;"
    "application/x-rtp,media=video,encoding-name=H264,payload=108,clock-rate=90000,"
    "packetization-mode=(string)0,profile-level-id=(string)42e01f,"
    "level-asymmetry-allowed=(string)1";
static const char *const WHEP_VIDEO_CAPS =
    "application/x-rtp,media=video,encoding-name=H264,payload=97,clock-rate=90000,"
    "packetization-mode=(string)1,profile-level-id=(string)42e01f,"
    "rtcp-fb-nack-pli=(boolean)true";
static const char *const AUDIO_CAPS =
    "application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000,"
    "encoding-params=(string)2";

static void add_recvonly(receiver *r, const char *caps_str) {
  GstCaps *caps = gst_caps_from_string(caps_str);
  GstWebRTCRTPTransceiver *t = NULL;
  g_signal_emit_by_name(r->webrtc, "add-transceiver", GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_RECVONLY,
                        caps, &t);
  if (t) gst_object_unref(t);
  gst_caps_unref(caps);
}

static receiver *receiver_new(offer_style style) {
  receiver *r = calloc(1, sizeof *r);
  g_mutex_init(&r->lock);
  g_cond_init(&r->cond);
  r->pipe = gst_pipeline_new("browser");
  r->webrtc = gst_element_factory_make("webrtcbin", "recv");
  gst_bin_add(GST_BIN(r->pipe), r->webrtc);
  /* A browser bundles with every m-line on port 9 (max-compat writes that); a WHEP player
   * built on webrtcbin uses max-bundle, whose later m-lines are port 0 + bundle-only. */
  gst_util_set_object_arg(G_OBJECT(r->webrtc), "bundle-policy",
                          style == OFFER_BROWSER ? "max-compat" : "max-bundle");
  g_signal_connect(r->webrtc, "pad-added", G_CALLBACK(on_pad_added), r);
  g_signal_connect(r->webrtc, "notify::ice-gathering-state", G_CALLBACK(on_recv_gathering), r);
  if (style == OFFER_BROWSER) {
    add_recvonly(r, VIDEO_CAPS);
    add_recvonly(r, AUDIO_CAPS);
  } else {
    add_recvonly(r, AUDIO_CAPS); /* audio first, as WHEP players tend to */
    add_recvonly(r, WHEP_VIDEO_CAPS);
  }
  gst_element_set_state(r->pipe, GST_STATE_PLAYING);
  return r;
}

static void receiver_free(receiver *r) {
  if (!r) return;
  gst_element_set_state(r->pipe, GST_STATE_NULL);
  if (r->video_depay_sink) gst_object_unref(r->video_depay_sink);
  gst_object_unref(r->pipe);
  g_mutex_clear(&r->lock);
  g_cond_clear(&r->cond);
  free(r);
}

static GstStructure *await(GstPromise *p) {
  gst_promise_wait(p);
  const GstStructure *s = gst_promise_get_reply(p);
  GstStructure *copy = s ? gst_structure_copy(s) : NULL;
  gst_promise_unref(p);
  return copy;
}

/* Creates the offer, sets it locally and waits for ICE gathering so that it carries the
 * candidates (non-trickle, as the LiveTalking client does). Returns its text (g_free). */
static char *receiver_offer(receiver *r) {
  GstPromise *p = gst_promise_new();
  g_signal_emit_by_name(r->webrtc, "create-offer", NULL, p);
  GstStructure *reply = await(p);
  GstWebRTCSessionDescription *offer = NULL;
  if (reply) gst_structure_get(reply, "offer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &offer, NULL);
  if (reply) gst_structure_free(reply);
  if (!offer) return NULL;
  p = gst_promise_new();
  g_signal_emit_by_name(r->webrtc, "set-local-description", offer, p);
  reply = await(p);
  if (reply) gst_structure_free(reply);
  gst_webrtc_session_description_free(offer);

  const gint64 deadline = g_get_monotonic_time() + 3 * G_USEC_PER_SEC;
  g_mutex_lock(&r->lock);
  while (!r->gathered && g_cond_wait_until(&r->cond, &r->lock, deadline)) {
  }
  g_mutex_unlock(&r->lock);
  GstWebRTCSessionDescription *local = NULL;
  g_object_get(r->webrtc, "local-description", &local, NULL);
  char *text = local ? gst_sdp_message_as_text(local->sdp) : NULL;
  if (local) gst_webrtc_session_description_free(local);
  return text;
}

static int receiver_answer(receiver *r, const char *sdp) {
  GstSDPMessage *msg = NULL;
  gst_sdp_message_new_from_text(sdp, &msg);
  if (!msg) return 0;
  GstWebRTCSessionDescription *d =
      gst_webrtc_session_description_new(GST_WEBRTC_SDP_TYPE_ANSWER, msg);
  GstPromise *p = gst_promise_new();
  g_signal_emit_by_name(r->webrtc, "set-remote-description", d, p);
  GstStructure *reply = await(p);
  const int ok = !reply || !gst_structure_has_field(reply, "error");
  if (reply) gst_structure_free(reply);
  gst_webrtc_session_description_free(d);
  return ok;
}

/* Asks the sender for a key frame the way a browser's decoder does: an upstream
 * force-key-unit from the depayloader, which the receiving rtpsession turns into an RTCP PLI. */
static void receiver_send_pli(receiver *r) {
  g_mutex_lock(&r->lock);
  GstPad *pad = r->video_depay_sink ? gst_object_ref(r->video_depay_sink) : NULL;
  g_mutex_unlock(&r->lock);
  if (!pad) return;
  gst_pad_push_event(pad,
                     gst_video_event_new_upstream_force_key_unit(GST_CLOCK_TIME_NONE, FALSE, 0));
  gst_object_unref(pad);
}

/* ---- a connected pair ---- */

typedef struct pair {
  cb_log log;
  receiver *r;
  fc_live *l;
  int ice_port_min, ice_port_max, ice_no_tcp; /* for the output, set before pair_connect */
} pair;

/* Offer → fc_live_create → answer → receiver; returns 0 with everything set up. */
static int pair_connect(pair *pr, offer_style style) {
  log_init(&pr->log);
  pr->r = receiver_new(style);
  char *offer = receiver_offer(pr->r);
  if (!offer) {
    fprintf(stderr, "receiver made no offer\n");
    return -1;
  }
  fc_live_params p = params(FC_LIVE_WEBRTC, &pr->log);
  p.ice_port_min = pr->ice_port_min, p.ice_port_max = pr->ice_port_max;
  p.ice_no_tcp = pr->ice_no_tcp;
  int err = 0;
  pr->l = fc_live_create(&p, offer, on_answer, &pr->log, &err);
  g_free(offer);
  if (!pr->l) {
    fprintf(stderr, "fc_live_create: %s\n", fc_error_detail(err));
    return -1;
  }
  if (!log_wait(&pr->log, &pr->log.answers, 5000) || !pr->log.answer) {
    fprintf(stderr, "no answer\n");
    return -1;
  }
  if (!receiver_answer(pr->r, pr->log.answer)) {
    fprintf(stderr, "the receiver refused the answer:\n%s\n", pr->log.answer);
    return -1;
  }
  return 0;
}

static void pair_close(pair *pr) {
  fc_live_destroy(pr->l);
  log_mark_destroyed(&pr->log);
  receiver_free(pr->r);
  /* Anything late would have been counted meanwhile. */
  g_usleep(50000);
  FC_CHECK_INT(pr->log.after_destroy, ==, 0);
  log_clear(&pr->log);
}

/* ---- cases ---- */

static void test_webrtc_loopback(void) {
  pair pr;
  memset(&pr, 0, sizeof pr);
  if (pair_connect(&pr, OFFER_BROWSER) != 0) {
    FC_CHECK(0);
    if (pr.l || pr.r) pair_close(&pr);
    return;
  }
  const char *a = pr.log.answer;
  /* One codec per m-line, the H.264 flavour we send, both sendonly, candidates included. */
  FC_CHECK(strstr(a, "a=rtpmap:106 H264/90000") != NULL);
  FC_CHECK(strstr(a, "a=rtpmap:102 ") == NULL && strstr(a, "VP8") == NULL);
  FC_CHECK(strstr(a, "a=rtpmap:111 OPUS/48000") || strstr(a, "a=rtpmap:111 opus/48000"));
  FC_CHECK(strstr(a, "a=sendonly") != NULL && strstr(a, "a=recvonly") == NULL);
  FC_CHECK(strstr(a, "a=candidate:") != NULL);
  FC_CHECK(strstr(a, "a=group:BUNDLE") != NULL);

  /* A pacer catching up after a hiccup: 10 frames at once, which stamps every later frame
   * 400 ms "in the future" of the output's clock. Then real-time pace until the peer is
   * connected (frames before that wait for DTLS, and the oldest are dropped), and ~3 s more.
   * The output must neither stall on those timestamps nor drop frames once connected. */
  const int burst = 10;
  int64_t i = 0;
  for (; i < burst; i++) {
    make_frame(i);
    FC_CHECK_INT(fc_live_push(pr.l, frame, i, pcm, SPF, i * SPF), ==, 0);
  }
  for (int k = 0; k < 3 * FPS && !log_wait(&pr.log, &pr.log.connected, 0); k++)
    FC_CHECK_INT(push_realtime(pr.l, i++, 1), ==, 0);
  if (!log_wait(&pr.log, &pr.log.connected, 0)) {
    FC_CHECK(!"the peer connected");
    pair_close(&pr);
    return;
  }
  fc_live_stats st;
  fc_live_get_stats(pr.l, &st);
  const uint64_t dropped_before = st.frames_dropped;
  const int decoded_before = atomic_load(&pr.r->video_frames);
  FC_CHECK_INT(push_realtime(pr.l, i, 3 * FPS), ==, 0);
  i += 3 * FPS;
  g_usleep(300000); /* the last frames' trip through encoder, network and decoder */
  FC_CHECK_INT(pr.log.failed + pr.log.closed, ==, 0);
  FC_CHECK_INT(atomic_load(&pr.r->video_frames) - decoded_before, >=, 3 * FPS - 5);
  FC_CHECK_INT(atomic_load(&pr.r->width), ==, W);
  FC_CHECK_INT(atomic_load(&pr.r->height), ==, H);
  FC_CHECK_INT(atomic_load(&pr.r->audio_buffers), >, 0);
  fc_live_get_stats(pr.l, &st);
  FC_CHECK_INT(st.frames_pushed, ==, i);
  /* a few at most: the pushes are paced in real time, but a loaded machine (ThreadSanitizer's
   * build: 3 once in CI) can hold the encoder back by a frame or so */
  FC_CHECK_INT(st.frames_dropped - dropped_before, <=, 4);
  FC_CHECK(st.bytes_sent > 1000);
  FC_CHECK_INT(st.state, ==, FC_LIVE_CONNECTED);
  fprintf(stderr,
          "  loopback: %d video frames and %d audio buffers decoded, %llu bytes sent, "
          "%llu frames dropped (%llu before connecting)\n",
          atomic_load(&pr.r->video_frames), atomic_load(&pr.r->audio_buffers),
          (unsigned long long)st.bytes_sent, (unsigned long long)st.frames_dropped,
          (unsigned long long)dropped_before);
  pair_close(&pr);
}

/* --ice-ports and --ice-tcp off: every candidate of the answer is UDP in the range, and the
 * peer still connects and decodes. */
static void test_webrtc_port_range(void) {
  pair pr;
  memset(&pr, 0, sizeof pr);
  pr.ice_port_min = 47311, pr.ice_port_max = 47330, pr.ice_no_tcp = 1;
  if (pair_connect(&pr, OFFER_BROWSER) != 0) {
    FC_CHECK(0);
    if (pr.l || pr.r) pair_close(&pr);
    return;
  }
  int n = 0;
  for (const char *c = strstr(pr.log.answer, "a=candidate:"); c; c = strstr(c + 1, "a=candidate:")) {
    char transport[8] = "", addr[64] = "";
    unsigned port = 0;
    FC_CHECK_INT(sscanf(c, "a=candidate:%*s %*d %7s %*u %63s %u", transport, addr, &port), ==, 3);
    FC_CHECK(g_ascii_strcasecmp(transport, "UDP") == 0);
    FC_CHECK(port >= 47311 && port <= 47330);
    n++;
  }
  FC_CHECK_INT(n, >, 0);
  int64_t i = 0;
  for (int k = 0; k < 3 * FPS && !log_wait(&pr.log, &pr.log.connected, 0); k++)
    FC_CHECK_INT(push_realtime(pr.l, i++, 1), ==, 0);
  FC_CHECK(log_wait(&pr.log, &pr.log.connected, 0));
  FC_CHECK_INT(push_realtime(pr.l, i, FPS), ==, 0);
  g_usleep(300000);
  FC_CHECK_INT(atomic_load(&pr.r->video_frames), >=, FPS / 2);
  pair_close(&pr);
}

/* Pushes until the receiver has seen at least `gap` pictures since its last key frame. */
static int64_t push_until_gap(pair *pr, int64_t i, int gap) {
  for (int k = 0; k < 3 * FPS; k++) {
    if (atomic_load(&pr->r->au_total) - atomic_load(&pr->r->last_kf_au) >= gap) break;
    push_realtime(pr->l, i++, 1);
  }
  return i;
}

/* Pushes up to `limit` frames until a new key frame arrives; returns how many it took or -1. */
static int push_until_keyframe(pair *pr, int64_t *i, int keyframes_before, int limit) {
  for (int k = 1; k <= limit; k++) {
    push_realtime(pr->l, (*i)++, 1);
    if (atomic_load(&pr->r->keyframes) > keyframes_before) return k;
  }
  g_usleep(100000);
  return atomic_load(&pr->r->keyframes) > keyframes_before ? limit : -1;
}

static void test_webrtc_keyframes(void) {
  pair pr;
  memset(&pr, 0, sizeof pr);
  if (pair_connect(&pr, OFFER_BROWSER) != 0) {
    FC_CHECK(0);
    if (pr.l || pr.r) pair_close(&pr);
    return;
  }
  int64_t i = 0;
  /* Connected and decoding: the first picture is a key frame. */
  for (int k = 0; k < 3 * FPS && atomic_load(&pr.r->keyframes) == 0; k++)
    push_realtime(pr.l, i++, 1);
  if (atomic_load(&pr.r->keyframes) == 0) {
    FC_CHECK(!"a first key frame arrived");
    pair_close(&pr);
    return;
  }

  /* The encoder's own next key frame is 2*fps = 50 pictures after the last one, and the
   * moving pattern has no scene cut; so a key frame within 10 pictures of a request made 15
   * pictures after the last one can only be the requested one. */
  i = push_until_gap(&pr, i, 15);
  int before = atomic_load(&pr.r->keyframes);
  fc_live_force_keyframe(pr.l);
  int took = push_until_keyframe(&pr, &i, before, 10);
  fprintf(stderr, "  fc_live_force_keyframe: key frame after %d pictures\n", took);
  FC_CHECK(took > 0 && took <= 10);

  /* The viewer's PLI (RTCP from the receiving webrtcbin) must do the same. */
  i = push_until_gap(&pr, i, 15);
  before = atomic_load(&pr.r->keyframes);
  receiver_send_pli(pr.r);
  took = push_until_keyframe(&pr, &i, before, 10);
  fprintf(stderr, "  viewer PLI: key frame after %d pictures\n", took);
  FC_CHECK(took > 0 && took <= 10);
  pair_close(&pr);
}

/* A WHEP-style offer: audio first, port-0 bundle-only video, H.264 only. */
static void test_webrtc_whep_style(void) {
  pair pr;
  memset(&pr, 0, sizeof pr);
  if (pair_connect(&pr, OFFER_WHEP) != 0) {
    FC_CHECK(0);
    if (pr.l || pr.r) pair_close(&pr);
    return;
  }
  FC_CHECK(strstr(pr.log.answer, "a=rtpmap:97 H264/90000") != NULL);
  int64_t i = 0;
  for (int k = 0; k < 3 * FPS && !log_wait(&pr.log, &pr.log.connected, 0); k++)
    FC_CHECK_INT(push_realtime(pr.l, i++, 1), ==, 0);
  if (!log_wait(&pr.log, &pr.log.connected, 0)) {
    FC_CHECK(!"the peer connected");
    pair_close(&pr);
    return;
  }
  const int decoded_before = atomic_load(&pr.r->video_frames);
  FC_CHECK_INT(push_realtime(pr.l, i, FPS), ==, 0);
  g_usleep(200000);
  FC_CHECK_INT(atomic_load(&pr.r->video_frames) - decoded_before, >=, FPS - 5);
  FC_CHECK_INT(atomic_load(&pr.r->audio_buffers), >, 0);
  pair_close(&pr);
}

/* An offer as Chrome writes it (recvonly transceivers, many codecs, RTX, extensions), with a
 * single host candidate on the loopback address. */
static const char *const CHROME_OFFER =
    "v=0\r\n"
    "o=- 4215775240449105457 2 IN IP4 127.0.0.1\r\n"
    "s=-\r\n"
    "t=0 0\r\n"
    "a=group:BUNDLE 0 1\r\n"
    "a=extmap-allow-mixed\r\n"
    "a=msid-semantic: WMS\r\n"
    "m=video 9 UDP/TLS/RTP/SAVPF 96 97 102 103 104 105 106 107 108 109 127 125 112 113 116\r\n"
    "c=IN IP4 0.0.0.0\r\n"
    "a=rtcp:9 IN IP4 0.0.0.0\r\n"
    "a=candidate:1467250027 1 udp 2122260223 127.0.0.1 9 typ host generation 0\r\n"
    "a=ice-ufrag:Vq3B\r\n"
    "a=ice-pwd:q1W6hXP0zmwBvIN5YtbpBLFm\r\n"
    "a=ice-options:trickle\r\n"
    "a=fingerprint:sha-256 4C:AE:6E:0E:87:20:4F:5C:1F:22:6E:4A:67:3B:1B:07:37:AB:6A:"
    "26:58:C1:5A:EF:3E:72:28:6C:3A:F0:8E:7B\r\n"
    "a=setup:actpass\r\n"
    "a=mid:0\r\n"
    "a=extmap:1 urn:ietf:params:rtp-hdrext:toffset\r\n"
    "a=extmap:2 http://www.webrtc.org/experiments/rtp-hdrext/abs-send-time\r\n"
    "a=extmap:3 urn:3gpp:video-orientation\r\n"
    "a=extmap:4 http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01\r\n"
    "a=recvonly\r\n"
    "a=rtcp-mux\r\n"
    "a=rtcp-rsize\r\n"
    "a=rtpmap:96 VP8/90000\r\n"
    "a=rtcp-fb:96 goog-remb\r\n"
    "a=rtcp-fb:96 transport-cc\r\n"
    "a=rtcp-fb:96 ccm fir\r\n"
    "a=rtcp-fb:96 nack\r\n"
    "a=rtcp-fb:96 nack pli\r\n"
    "a=rtpmap:97 rtx/90000\r\n"
    "a=fmtp:97 apt=96\r\n"
    "a=rtpmap:102 H264/90000\r\n"
    "a=rtcp-fb:102 goog-remb\r\n"
    "a=rtcp-fb:102 transport-cc\r\n"
    "a=rtcp-fb:102 ccm fir\r\n"
    "a=rtcp-fb:102 nack\r\n"
    "a=rtcp-fb:102 nack pli\r\n"
    "a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42001f\r\n"
    "a=rtpmap:103 rtx/90000\r\n"
    "a=fmtp:103 apt=102\r\n"
    "a=rtpmap:104 H264/90000\r\n"
    "a=rtcp-fb:104 nack pli\r\n"
    "a=fmtp:104 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42001f\r\n"
    "a=rtpmap:105 rtx/90000\r\n"
    "a=fmtp:105 apt=104\r\n"
    "a=rtpmap:106 H264/90000\r\n"
    "a=rtcp-fb:106 goog-remb\r\n"
    "a=rtcp-fb:106 transport-cc\r\n"
    "a=rtcp-fb:106 ccm fir\r\n"
    "a=rtcp-fb:106 nack\r\n"
    "a=rtcp-fb:106 nack pli\r\n"
    "a=fmtp:106 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n"
    "a=rtpmap:107 rtx/90000\r\n"
    "a=fmtp:107 apt=106\r\n"
    "a=rtpmap:108 H264/90000\r\n"
    "a=rtcp-fb:108 nack pli\r\n"
    "a=fmtp:108 level-asymmetry-allowed=1;packetization-mode=0;profile-level-id=42e01f\r\n"
    "a=rtpmap:109 rtx/90000\r\n"
    "a=fmtp:109 apt=108\r\n"
    "a=rtpmap:127 H264/90000\r\n"
    "a=rtcp-fb:127 nack pli\r\n"
    "a=fmtp:127 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=4d001f\r\n"
    "a=rtpmap:125 rtx/90000\r\n"
    "a=fmtp:125 apt=127\r\n"
    "a=rtpmap:112 H264/90000\r\n"
    "a=rtcp-fb:112 nack pli\r\n"
    "a=fmtp:112 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=64001f\r\n"
    "a=rtpmap:113 rtx/90000\r\n"
    "a=fmtp:113 apt=112\r\n"
    "a=rtpmap:116 red/90000\r\n"
    "m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126\r\n"
    "c=IN IP4 0.0.0.0\r\n"
    "a=rtcp:9 IN IP4 0.0.0.0\r\n"
    "a=ice-ufrag:Vq3B\r\n"
    "a=ice-pwd:q1W6hXP0zmwBvIN5YtbpBLFm\r\n"
    "a=ice-options:trickle\r\n"
    "a=fingerprint:sha-256 4C:AE:6E:0E:87:20:4F:5C:1F:22:6E:4A:67:3B:1B:07:37:AB:6A:"
    "26:58:C1:5A:EF:3E:72:28:6C:3A:F0:8E:7B\r\n"
    "a=setup:actpass\r\n"
    "a=mid:1\r\n"
    "a=extmap:14 urn:ietf:params:rtp-hdrext:ssrc-audio-level\r\n"
    "a=recvonly\r\n"
    "a=rtcp-mux\r\n"
    "a=rtpmap:111 opus/48000/2\r\n"
    "a=rtcp-fb:111 transport-cc\r\n"
    "a=fmtp:111 minptime=10;useinbandfec=1\r\n"
    "a=rtpmap:63 red/48000/2\r\n"
    "a=fmtp:63 111/111\r\n"
    "a=rtpmap:9 G722/8000\r\n"
    "a=rtpmap:0 PCMU/8000\r\n"
    "a=rtpmap:8 PCMA/8000\r\n"
    "a=rtpmap:13 CN/8000\r\n"
    "a=rtpmap:110 telephone-event/48000\r\n"
    "a=rtpmap:126 telephone-event/8000\r\n";

static void test_chrome_offer_answer(void) {
  cb_log c;
  log_init(&c);
  fc_live_params p = params(FC_LIVE_WEBRTC, &c);
  int err = -1;
  fc_live *l = fc_live_create(&p, CHROME_OFFER, on_answer, &c, &err);
  if (!l) fprintf(stderr, "fc_live_create: %s\n", fc_error_detail(err));
  FC_REQUIRE(l);
  FC_CHECK_INT(err, ==, 0);
  FC_CHECK(log_wait(&c, &c.answers, 4000));
  g_mutex_lock(&c.lock);
  const char *a = c.answer ? c.answer : "";
  FC_CHECK_INT(c.answer_err, ==, 0);
  FC_CHECK(strstr(a, "a=rtpmap:106 H264/90000") != NULL);
  FC_CHECK(strstr(a, "profile-level-id=42e01f") != NULL);
  FC_CHECK(strstr(a, "a=rtpmap:102 ") == NULL && strstr(a, "VP8") == NULL);
  FC_CHECK(strstr(a, "a=rtpmap:111 ") != NULL);
  FC_CHECK(strstr(a, "a=rtcp-fb:106 nack pli") != NULL); /* so the browser sends PLIs */
  FC_CHECK(strstr(a, "a=setup:active") != NULL);
  FC_CHECK(strstr(a, "a=mid:0") != NULL && strstr(a, "a=mid:1") != NULL);
  FC_CHECK(strstr(a, "a=candidate:") != NULL);
  const char *s1 = strstr(a, "a=sendonly");
  FC_CHECK(s1 && strstr(s1 + 1, "a=sendonly")); /* both m-lines */
  g_mutex_unlock(&c.lock);
  /* Pushing before the peer connects is fine: the frames wait or are dropped. */
  for (int i = 0; i < 10; i++) {
    make_frame(i);
    FC_CHECK_INT(fc_live_push(l, frame, i, pcm, SPF, (int64_t)i * SPF), ==, 0);
  }
  fc_live_destroy(l);
  log_mark_destroyed(&c);
  g_usleep(50000);
  FC_CHECK_INT(c.answers, ==, 1);
  FC_CHECK_INT(c.after_destroy, ==, 0);
  log_clear(&c);
}

/* The offerer (a WHIP publisher, media/whip.c): our own offer, handed out once gathered, says
 * what an SFU needs (H.264 mode 1 constrained baseline and Opus, sendonly, candidates, one
 * stream); an answer that is no SDP is refused; an answerer takes no answer. */
static void test_offerer(void) {
  cb_log c;
  log_init(&c);
  fc_live_params p = params(FC_LIVE_WEBRTC, &c);
  p.offerer = 1;
  int err = -1;
  fc_live *l = fc_live_create(&p, NULL, on_answer, &c, &err);
  if (!l) fprintf(stderr, "fc_live_create: %s\n", fc_error_detail(err));
  FC_REQUIRE(l);
  FC_CHECK(log_wait(&c, &c.answers, 4000));
  g_mutex_lock(&c.lock);
  const char *o = c.answer ? c.answer : "";
  FC_CHECK_INT(c.answer_err, ==, 0);
  FC_CHECK(strstr(o, "a=rtpmap:96 H264/90000") != NULL);
  FC_CHECK(strstr(o, "packetization-mode=1") != NULL);
  FC_CHECK(strstr(o, "profile-level-id=42e01f") != NULL);
  FC_CHECK(strstr(o, "a=rtpmap:111 OPUS/48000") != NULL || strstr(o, "a=rtpmap:111 opus/48000"));
  FC_CHECK(strstr(o, "a=setup:actpass") != NULL);
  FC_CHECK(strstr(o, "a=candidate:") != NULL);
  FC_CHECK(strstr(o, "a=msid:facecast facecast-video") != NULL);
  const char *s1 = strstr(o, "a=sendonly");
  FC_CHECK(s1 && strstr(s1 + 1, "a=sendonly")); /* both m-lines */
  g_mutex_unlock(&c.lock);
  fc_error_clear();
  FC_CHECK_INT(fc_live_set_answer(l, "not SDP at all"), ==, FC_EINVAL);
  fc_live_destroy(l);
  log_mark_destroyed(&c);
  FC_CHECK_INT(c.after_destroy, ==, 0);
  log_clear(&c);

  log_init(&c);
  p = params(FC_LIVE_WEBRTC, &c);
  l = fc_live_create(&p, CHROME_OFFER, on_answer, &c, &err);
  FC_REQUIRE(l);
  FC_CHECK_INT(fc_live_set_answer(l, CHROME_OFFER), ==, FC_EINVAL); /* not an offerer */
  fc_live_destroy(l);
  log_mark_destroyed(&c);
  log_clear(&c);
  p = params(FC_LIVE_NULL, NULL);
  p.offerer = 1;
  FC_CHECK(fc_live_create(&p, NULL, NULL, NULL, &err) == NULL && err == FC_EINVAL);
}

/* Replaces every occurrence of `from` with `to` (g_free the result). */
static char *replace(const char *s, const char *from, const char *to) {
  gchar **parts = g_strsplit(s, from, -1);
  gchar *r = g_strjoinv(to, parts);
  g_strfreev(parts);
  return r;
}

static void expect_refused(cb_log *c, const char *offer, const char *detail_part) {
  fc_live_params p = params(FC_LIVE_WEBRTC, c);
  int err = 0;
  fc_error_clear();
  fc_live *l = fc_live_create(&p, offer, on_answer, c, &err);
  FC_CHECK(l == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  const char *d = fc_error_detail(err);
  if (!strstr(d, detail_part)) fprintf(stderr, "  detail was: %s\n", d);
  FC_CHECK(strstr(d, detail_part) != NULL);
  if (l) fc_live_destroy(l);
}

static void test_bad_offers(void) {
  cb_log c;
  log_init(&c);
  expect_refused(&c, NULL, "malformed SDP offer");
  expect_refused(&c, "", "malformed SDP offer");
  expect_refused(&c, "hello, this is not SDP\r\nreally not\r\n", "malformed SDP offer");
  expect_refused(&c, "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n", "malformed SDP offer");

  /* Only audio: the session part and the audio m-line. */
  const char *audio = strstr(CHROME_OFFER, "m=audio");
  const char *video = strstr(CHROME_OFFER, "m=video");
  char *audio_only = g_strdup_printf("%.*s%s", (int)(video - CHROME_OFFER), CHROME_OFFER, audio);
  expect_refused(&c, audio_only, "offer has no H.264 video");
  g_free(audio_only);

  /* Video with VP8 only (every H.264 format renamed). */
  char *vp8 = replace(CHROME_OFFER, "H264/90000", "VP8/90000");
  expect_refused(&c, vp8, "offer has no H.264 video");
  expect_refused(&c, vp8, "VP8");
  g_free(vp8);

  /* H.264 only in packetization mode 0. */
  char *mode0 = replace(CHROME_OFFER, "packetization-mode=1", "packetization-mode=0");
  expect_refused(&c, mode0, "offer has no H.264 video");
  g_free(mode0);

  /* No Opus. */
  char *no_opus = replace(CHROME_OFFER, "opus/48000/2", "ISAC/16000");
  expect_refused(&c, no_opus, "offer has no Opus audio");
  g_free(no_opus);

  /* The viewer only sends (a=sendonly): nothing we may send on. */
  char *sendonly = replace(CHROME_OFFER, "a=recvonly", "a=sendonly");
  expect_refused(&c, sendonly, "offer has no H.264 video");
  g_free(sendonly);

  /* Codecs fine but no ICE credentials: webrtcbin refuses it, and so do we. */
  char *no_ice = replace(CHROME_OFFER, "a=ice-ufrag:Vq3B\r\n", "");
  expect_refused(&c, no_ice, "offer");
  g_free(no_ice);

  g_usleep(100000);
  FC_CHECK_INT(c.answers, ==, 0);
  FC_CHECK_INT(c.states, ==, 0);

  /* The process keeps working: a good offer afterwards. */
  fc_live_params p = params(FC_LIVE_WEBRTC, &c);
  int err = -1;
  fc_live *l = fc_live_create(&p, CHROME_OFFER, on_answer, &c, &err);
  FC_CHECK(l != NULL);
  FC_CHECK(log_wait(&c, &c.answers, 4000));
  fc_live_destroy(l);
  log_clear(&c);
}

static void test_bad_params(void) {
  cb_log c;
  log_init(&c);
  int err = 0;
  fc_live_params p = params(FC_LIVE_NULL, &c);
  p.width = 321;
  FC_CHECK(fc_live_create(&p, NULL, NULL, NULL, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p = params(FC_LIVE_NULL, &c);
  p.x264_preset = "warp-speed";
  FC_CHECK(fc_live_create(&p, NULL, NULL, NULL, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(err), "warp-speed") != NULL);
  p = params(FC_LIVE_NULL, &c);
  p.video_qp = 52; /* H.264 quantizers end at 51 */
  FC_CHECK(fc_live_create(&p, NULL, NULL, NULL, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p = params(FC_LIVE_WEBRTC, &c);
  p.stun_server = "stun.example.org:3478";
  FC_CHECK(fc_live_create(&p, CHROME_OFFER, on_answer, &c, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p = params(FC_LIVE_WEBRTC, &c);
  p.ice_port_min = 100, p.ice_port_max = 200; /* privileged ports */
  FC_CHECK(fc_live_create(&p, CHROME_OFFER, on_answer, &c, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(err), "ICE ports 100-200") != NULL);
  p.ice_port_min = 50010, p.ice_port_max = 50000; /* upside down */
  FC_CHECK(fc_live_create(&p, CHROME_OFFER, on_answer, &c, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p = params(FC_LIVE_WEBRTC, &c);
  FC_CHECK(fc_live_create(&p, CHROME_OFFER, NULL, &c, &err) == NULL); /* no answer callback */
  FC_CHECK_INT(err, ==, FC_EINVAL);
  FC_CHECK_INT(c.answers + c.states, ==, 0);
  fc_live_destroy(NULL);
  fc_live_force_keyframe(NULL);
  log_clear(&c);
}

/* A NULL output (encoders into fakesinks) at constant quantizer qp (0: capped CRF). */
static fc_live *null_output(cb_log *c, int qp) {
  fc_live_params p = params(FC_LIVE_NULL, c);
  p.video_qp = qp;
  int err = -1;
  fc_live *l = fc_live_create(&p, NULL, NULL, NULL, &err);
  FC_CHECK(l != NULL);
  return l;
}

/* Waits until an output's encoders stop producing bytes (at most 2.5 s); its stats then. */
static void wait_settled(fc_live *l, fc_live_stats *st) {
  uint64_t last = 0;
  memset(st, 0, sizeof *st);
  for (int t = 0, still = 0; t < 100 && still < 4; t++) {
    g_usleep(25000);
    fc_live_get_stats(l, st);
    still = st->bytes_sent == last ? still + 1 : 0;
    last = st->bytes_sent;
  }
}

static void test_null_kind(void) {
  cb_log c;
  log_init(&c);
  fc_live *l = null_output(&c, 0);
  FC_REQUIRE(l);
  fc_live_stats st;
  fc_live_get_stats(l, &st);
  FC_CHECK_INT(st.state, ==, FC_LIVE_CONNECTED);
  /* As fast as we can: pushing never waits for the encoder (the queue drops the oldest). */
  const gint64 t0 = g_get_monotonic_time();
  for (int i = 0; i < 50; i++) {
    make_frame(i);
    FC_CHECK_INT(fc_live_push(l, frame, i, pcm, SPF, (int64_t)i * SPF), ==, 0);
  }
  const gint64 push_us = g_get_monotonic_time() - t0;
  fc_live_force_keyframe(l);
  /* Out-of-order pushes are refused. */
  FC_CHECK_INT(fc_live_push(l, frame, 10, pcm, SPF, 60 * SPF), ==, FC_EINVAL);
  for (int k = 0; k < 100; k++) {
    fc_live_get_stats(l, &st);
    if (st.bytes_sent > 0) break;
    g_usleep(20000);
  }
  g_usleep(200000);
  fc_live_get_stats(l, &st);
  FC_CHECK_INT(st.frames_pushed, ==, 50);
  FC_CHECK(st.bytes_sent > 0);
  FC_CHECK(st.frames_dropped < 50);
  fprintf(stderr, "  null: 50 pushes in %.1f ms, %llu dropped, %llu bytes\n", push_us / 1000.0,
          (unsigned long long)st.frames_dropped, (unsigned long long)st.bytes_sent);
  /* The same output as a sink (media/sink.h): pushes and figures go through it alike, and
   * destroying the sink destroys the output. */
  fc_sink *k = fc_live_sink(l);
  FC_CHECK(!strcmp(fc_sink_kind(k), "null"));
  make_frame(50);
  const fc_sink_frame f = {.index = 50, .i420 = frame, .pcm = pcm, .n_samples = SPF,
                           .first_sample = 50 * SPF};
  FC_CHECK_INT(fc_sink_push(k, &f), ==, 0);
  const fc_sink_frame stale = {.index = 20, .i420 = frame, .pcm = pcm, .n_samples = SPF,
                               .first_sample = 70 * SPF};
  FC_CHECK_INT(fc_sink_push(k, &stale), ==, FC_EINVAL);
  fc_sink_stats ks;
  fc_sink_get_stats(k, &ks);
  FC_CHECK_INT(ks.frames_pushed, ==, 51);
  FC_CHECK(ks.bytes_out >= st.bytes_sent);
  FC_CHECK_INT(fc_sink_finish(k), ==, 0); /* nothing to complete */
  fc_sink_destroy(k);
  FC_CHECK_INT(c.states, ==, 0);
  log_clear(&c);
}

/* video_qp reaches x264: the same 20 frames at a fine and at a coarse constant quantizer (and
 * the capped constant quality) all encode, the fine one to several times the bytes (the same Opus in each). */
static void test_null_qp(void) {
  cb_log c;
  log_init(&c);
  const int qps[3] = {10, 40, 0};
  uint64_t bytes[3] = {0};
  for (int k = 0; k < 3; k++) {
    fc_live *l = null_output(&c, qps[k]);
    FC_REQUIRE(l);
    FC_CHECK_INT(push_realtime(l, 0, 20), ==, 0);
    fc_live_stats st;
    wait_settled(l, &st);
    FC_CHECK_INT(st.frames_dropped, ==, 0);
    FC_CHECK_INT(st.frames_encoded, ==, 20);
    bytes[k] = st.bytes_sent;
    fc_live_destroy(l);
  }
  fprintf(stderr, "  qp: 20 frames at QP 10 %llu bytes, QP 40 %llu, capped CRF %llu\n",
          (unsigned long long)bytes[0], (unsigned long long)bytes[1],
          (unsigned long long)bytes[2]);
  FC_CHECK(bytes[1] > 0 && bytes[2] > 0);
  FC_CHECK(bytes[0] > 2 * bytes[1]); /* ~3.7x with the same audio in both */
  log_clear(&c);
}

/* Outputs started together spread their key frames: besides the first, each makes one extra at
 * a random picture before its 2-second interval ends (x264 counts the interval from there). */
static void test_null_key_phase(void) {
  cb_log c;
  log_init(&c);
  fc_live *l = null_output(&c, 0);
  FC_REQUIRE(l);
  /* 2*fps pictures: the phase's key frame is asked for after picture key_phase - 1 is pushed
   * (at most 2*fps - 2) and lands on a later one, which must exist; the regular one would be
   * picture 2*fps, not pushed. */
  FC_CHECK_INT(push_realtime(l, 0, 2 * FPS), ==, 0);
  fc_live_stats st;
  wait_settled(l, &st);
  FC_CHECK_INT(st.frames_dropped, ==, 0);
  FC_CHECK_INT(st.keyframes, ==, 2); /* picture 0 and the phase's */
  FC_CHECK(st.encode_delay_us / (st.frames_encoded ? st.frames_encoded : 1) < 40000);
  fc_live_destroy(l);
  log_clear(&c);
}

/* fcx264enc on its own, decoded by avdec_h264: pictures that differ from a still only in a
 * moving square, each described as such (fc_i420_delta qdata), come out as they went in; and
 * the description is what x264 acts on: a change the description leaves out (the last
 * picture) does not reach the decoded picture, because its macroblocks were declared
 * unchanged. */
static double mean_abs_y(const uint8_t *a, int as, const uint8_t *b, int bs, fc_rect r) {
  double s = 0;
  for (int y = r.y; y < r.y + r.h; y++)
    for (int x = r.x; x < r.x + r.w; x++) s += abs((int)a[(size_t)y * as + x] - b[(size_t)y * bs + x]);
  return s / ((double)r.w * r.h);
}

static void test_encoder_unchanged_blocks(void) {
  int err = 0;
  const fc_x264_config xc = {.preset = "ultrafast", .threads = 1, .keyint = 250, .qp = 20};
  GstElement *pipe = gst_pipeline_new(NULL), *src = gst_element_factory_make("appsrc", NULL),
             *enc = fc_x264enc_new(&xc, &err), *dec = gst_element_factory_make("avdec_h264", NULL),
             *conv = gst_element_factory_make("videoconvert", NULL),
             *sink = gst_element_factory_make("appsink", NULL);
  FC_REQUIRE(pipe && src && enc && dec && conv && sink);
  gst_bin_add_many(GST_BIN(pipe), src, enc, dec, conv, sink, NULL);
  GstCaps *raw = gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, "I420", "width",
                                     G_TYPE_INT, W, "height", G_TYPE_INT, H, "framerate",
                                     GST_TYPE_FRACTION, FPS, 1, NULL);
  g_object_set(src, "caps", raw, "format", GST_FORMAT_TIME, NULL);
  g_object_set(sink, "caps", raw, "sync", FALSE, "max-buffers", 0u, NULL);
  gst_caps_unref(raw);
  int linked = gst_element_link_many(src, enc, dec, conv, sink, NULL);
  FC_CHECK(linked);
  if (linked && gst_element_set_state(pipe, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    FC_CHECK(!"the encoder test pipeline plays");
    linked = 0;
  }

  /* The pictures: a still with a square that moves 16 px a picture, each described as such;
   * the last one also changes `hidden` without saying so. */
  enum { N = 12 };
  static uint8_t base[W * H * 3 / 2], pics[N][W * H * 3 / 2];
  const fc_rect hidden = {256, 160, 48, 48};
  make_frame(0);
  memcpy(base, frame, sizeof base);
  for (int k = 0; linked && k < N; k++) {
    uint8_t *pic = pics[k];
    memcpy(pic, base, sizeof base);
    const fc_rect r = {16 + 16 * k, 64, 48, 48};
    for (int y = r.y; y < r.y + r.h; y++)
      for (int x = r.x; x < r.x + r.w; x++) pic[y * W + x] = (uint8_t)(40 + 15 * k + (x ^ y) % 7);
    if (k == N - 1)
      for (int y = hidden.y; y < hidden.y + hidden.h; y++)
        for (int x = hidden.x; x < hidden.x + hidden.w; x++) pic[y * W + x] ^= 0x80;
    GstBuffer *buf = gst_buffer_new_memdup(pic, sizeof base);
    fc_i420_delta *d = g_new(fc_i420_delta, 1);
    *d = (fc_i420_delta){.base = base, .changed = r};
    gst_mini_object_set_qdata(GST_MINI_OBJECT(buf), fc_x264_delta_quark(), d, g_free);
    FC_TSAN_RELEASE(d); /* to the encoder through appsrc, as live.c does (core/tsan.h) */
    GST_BUFFER_PTS(buf) = gst_util_uint64_scale(k, GST_SECOND, FPS);
    GST_BUFFER_DURATION(buf) = GST_SECOND / FPS;
    FC_CHECK(gst_app_src_push_buffer(GST_APP_SRC(src), buf) == GST_FLOW_OK);
  }
  if (linked) gst_app_src_end_of_stream(GST_APP_SRC(src));

  double worst_told = 0, untold_vs_base = 1e9, untold_vs_src = 0;
  int got = 0;
  for (; linked && got < N; got++) {
    GstSample *s = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), 10 * GST_SECOND);
    if (!s) break;
    GstMapInfo m;
    GstBuffer *ob = gst_sample_get_buffer(s);
    if (gst_buffer_map(ob, &m, GST_MAP_READ)) {
      const fc_rect r = {16 + 16 * got, 64, 48, 48};
      const double told = mean_abs_y(m.data, W, pics[got], W, r);
      if (told > worst_told) worst_told = told;
      if (got == N - 1) {
        untold_vs_base = mean_abs_y(m.data, W, base, W, hidden);
        untold_vs_src = mean_abs_y(m.data, W, pics[got], W, hidden);
      }
      gst_buffer_unmap(ob, &m);
    }
    gst_sample_unref(s);
  }
  fprintf(stderr, "  unchanged blocks: %d pictures decoded, described squares off by %.2f levels at "
          "worst; the undescribed change: %.2f from the still, %.2f from the picture\n",
          got, worst_told, untold_vs_base, untold_vs_src);
  FC_CHECK_INT(got, ==, N);
  FC_CHECK(worst_told < 3.0);
  FC_CHECK(untold_vs_base < 3.0 && untold_vs_src > 50.0);
  gst_element_set_state(pipe, GST_STATE_NULL);
  gst_object_unref(pipe);
}

static void test_destroy_while_connecting(void) {
  cb_log c;
  log_init(&c);
  fc_live_params p = params(FC_LIVE_WEBRTC, &c);
  /* Immediately after create, a few times: the answer is still being gathered. */
  for (int k = 0; k < 5; k++) {
    int err = -1;
    fc_live *l = fc_live_create(&p, CHROME_OFFER, on_answer, &c, &err);
    FC_CHECK(l != NULL);
    if (k & 1) {
      make_frame(0);
      fc_live_push(l, frame, 0, pcm, SPF, 0);
    }
    fc_live_destroy(l);
  }
  log_mark_destroyed(&c);
  g_usleep(200000);
  FC_CHECK_INT(c.after_destroy, ==, 0);
  log_clear(&c);

  /* And with a peer that got its answer but never connects. */
  log_init(&c);
  p = params(FC_LIVE_WEBRTC, &c);
  receiver *r = receiver_new(OFFER_BROWSER);
  char *offer = receiver_offer(r);
  FC_REQUIRE(offer);
  int err = -1;
  fc_live *l = fc_live_create(&p, offer, on_answer, &c, &err);
  g_free(offer);
  FC_CHECK(l != NULL);
  FC_CHECK(log_wait(&c, &c.answers, 4000));
  fc_live_destroy(l);
  log_mark_destroyed(&c);
  receiver_free(r);
  g_usleep(200000);
  FC_CHECK_INT(c.after_destroy, ==, 0);
  FC_CHECK_INT(c.connected, ==, 0);
  log_clear(&c);
}

int main(void) {
  gst_init(NULL, NULL);
  FC_RUN(test_bad_params);
  FC_RUN(test_bad_offers);
  FC_RUN(test_null_kind);
  FC_RUN(test_null_qp);
  FC_RUN(test_null_key_phase);
  FC_RUN(test_encoder_unchanged_blocks);
  FC_RUN(test_chrome_offer_answer);
  FC_RUN(test_offerer);
  FC_RUN(test_destroy_while_connecting);
  FC_RUN(test_webrtc_loopback);
  FC_RUN(test_webrtc_port_range);
  FC_RUN(test_webrtc_keyframes);
  FC_RUN(test_webrtc_whep_style);
  gst_deinit();
  FC_TEST_EXIT();
}
