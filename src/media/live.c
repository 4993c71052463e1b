/* Live outputs (src/media/live.h): one GStreamer pipeline per viewer session,
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
 * Files: this one builds, feeds and tears down the pipeline; live_watch.c holds what
 * GStreamer's threads call and the watch thread; live_webrtc.c links the payloaders to
 * webrtcbin, sets its ICE agent's ports and transports (lv_configure_ice) and negotiates;
 * sdp_offer.c reads the offer and fixes the answer (pure GstSDP); live_internal.h is what they
 * share. Everything GObject/GStreamer stays in src/media, with
 * gst_common.c for the plumbing shared with mp4.c (initialisation, making and linking
 * elements, x264's preset, buffer pools, the first-error slot). */
#include "media/live_internal.h"

#include "facecast/error.h"
#include "core/tsan.h"
#include "facecast/picture.h"
#include "media/x264_live.h"

#include <gst/audio/audio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the shared state ---- */

live_shared *lv_shared_ref(live_shared *s) {
  g_atomic_int_inc(&s->refs);
  return s;
}

void lv_shared_unref(gpointer data) {
  live_shared *s = data;
  if (!g_atomic_int_dec_and_test(&s->refs)) return;
  g_mutex_clear(&s->cb_lock);
  g_mutex_clear(&s->lock);
  g_cond_clear(&s->cond);
  free(s);
}

/* For g_signal_connect_data, whose destroy notify takes a GClosure as second argument. */
void lv_shared_unref_closure(gpointer data, GClosure *closure) {
  (void)closure;
  lv_shared_unref(data);
}

/* ---- construction helpers (the ones shared with mp4.c are in gst_common.c) ---- */

/* Sets an enum or flags property from its nick if the element has it (optional tuning). */
static void set_optional(GstElement *e, const char *prop, const char *value) {
  if (fc_gst_has_property(e, prop)) gst_util_set_object_arg(G_OBJECT(e), prop, value);
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

/* ---- as an output (sink.h) ---- */

static int sink_push(void *self, const fc_sink_frame *f) {
  return fc_live_push_delta(self, f->i420, f->delta, f->index, f->pcm, f->n_samples,
                            f->first_sample);
}

static void sink_stats(void *self, fc_sink_stats *out) {
  fc_live_stats ls;
  fc_live_get_stats(self, &ls);
  *out = (fc_sink_stats){.frames_pushed = ls.frames_pushed, .frames_dropped = ls.frames_dropped,
                         .frames_encoded = ls.frames_encoded, .encode_delay_us = ls.encode_delay_us,
                         .frames_encoded_late = ls.frames_encoded_late, .keyframes = ls.keyframes,
                         .bytes_out = ls.bytes_sent};
}

static void sink_destroy(void *self) { fc_live_destroy(self); }

/* No finish: a live output has nothing to complete; it stops when destroyed. */
static const fc_sink_ops webrtc_sink_ops = {.kind = "webrtc", .push = sink_push,
                                            .stats = sink_stats, .destroy = sink_destroy};
static const fc_sink_ops null_sink_ops = {.kind = "null", .push = sink_push, .stats = sink_stats,
                                          .destroy = sink_destroy};

fc_sink *fc_live_sink(fc_live *l) { return l ? &l->sink : NULL; }

/* ---- public API ---- */

fc_live *fc_live_create(const fc_live_params *params, const char *offer_sdp,
                        fc_live_answer_cb on_answer, void *user, int *err) {
  int rc = 0;
  fc_live *l = NULL;
  GstSDPMessage *offer = NULL;
  fc_offer_choice ch = {.video_pt = NULL_VIDEO_PT, .audio_pt = NULL_AUDIO_PT, .video_plid = ""};
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
  if ((p.ice_port_min || p.ice_port_max) &&
      (p.ice_port_min < FC_LIVE_ICE_PORT_LO || p.ice_port_max > 65535 ||
       p.ice_port_min > p.ice_port_max)) {
    rc = fc_error_set(FC_EINVAL, "live output: ICE ports %d-%d: expected MIN-MAX within %d..65535",
                      p.ice_port_min, p.ice_port_max, FC_LIVE_ICE_PORT_LO);
    goto fail;
  }
  if (p.offerer && p.kind != FC_LIVE_WEBRTC) {
    rc = fc_error_set(FC_EINVAL, "live output: only a WebRTC output makes an offer");
    goto fail;
  }
  if (p.kind == FC_LIVE_WEBRTC && !on_answer) {
    rc = fc_error_set(FC_EINVAL, "live output: a WebRTC output needs an answer callback");
    goto fail;
  }

  /* The offer is checked before anything is built (and before GStreamer is even needed). */
  if (p.kind == FC_LIVE_WEBRTC && !p.offerer &&
      (rc = fc_sdp_parse_offer(offer_sdp, &offer, &ch)))
    goto fail;
  /* An offerer names its own formats: what it sends, as SFUs (SRS) prefer it. */
  if (p.offerer) g_strlcpy(ch.video_plid, "42e01f", sizeof ch.video_plid);

  if ((rc = fc_gst_init())) goto fail;
  /* webrtcbin only fails at pad-request time without these; name the package up front. */
  if (p.kind == FC_LIVE_WEBRTC &&
      ((rc = fc_gst_require("webrtcbin")) || (rc = fc_gst_require("nicesrc")) ||
       (rc = fc_gst_require("dtlssrtpenc"))))
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
  l->sink = (fc_sink){p.kind == FC_LIVE_WEBRTC ? &webrtc_sink_ops : &null_sink_ops, l};
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
  if ((rc = fc_gst_raw_caps(p.width, p.height, p.fps, p.sample_rate, "live output", &l->vinfo,
                            &vcaps, &acaps)))
    goto fail;
  h264caps =
      gst_caps_new_simple("video/x-h264", "profile", G_TYPE_STRING, "constrained-baseline", NULL);
  vrtp = lv_rtp_caps(1, ch.video_pt);
  /* An answer takes the mode from the offer it answers; an offer must say it (RFC 6184's
   * default, mode 0, forbids the FU-A fragments rtph264pay makes of large frames). */
  if (vrtp && p.offerer)
    gst_caps_set_simple(vrtp, "packetization-mode", G_TYPE_STRING, "1", NULL);
  artp = lv_rtp_caps(0, ch.audio_pt);
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
    cbs.enough_data = lv_video_enough_data;
    gst_app_src_set_callbacks(GST_APP_SRC(l->vsrc), &cbs, lv_shared_ref(sh), lv_shared_unref);
    cbs.enough_data = lv_audio_enough_data;
    gst_app_src_set_callbacks(GST_APP_SRC(l->asrc), &cbs, lv_shared_ref(sh), lv_shared_unref);
  }

  g_object_set(vfilter, "caps", h264caps, NULL);
  /* SPS/PPS before every IDR, so a viewer can start at any key frame; zero-latency STAP-A
   * aggregation of SPS+PPS+IDR without waiting for the next frame. */
  g_object_set(vpay, "pt", (guint)ch.video_pt, "config-interval", -1, NULL);
  set_optional(vpay, "aggregate-mode", "zero-latency");

  /* Audio encoder: speech, 40 ms frames — the pacer hands over 40 ms of sound per video
   * frame, so shorter frames would add no responsiveness, only packets and encoder calls.
   * Complexity FC_LIVE_OPUS_COMPLEXITY (see live.h) instead of libopus' 10. CELT only
   * ("restricted-lowdelay", at OPUS_BITRATE): a third of the CPU of "voice" (SILK, whose
   * delayed-decision quantiser is most of its time) — 2.3 against 6.5 ms per second of
   * sound — with 4 ms less delay and better measured quality (docs/BENCHMARKS.md). */
  g_object_set(aenc, "bitrate", OPUS_BITRATE, NULL);
  char cx[8];
  snprintf(cx, sizeof cx, "%d", p.opus_complexity ? p.opus_complexity : FC_LIVE_OPUS_COMPLEXITY);
  set_optional(aenc, "complexity", cx);
  set_optional(aenc, "frame-size", "40");
  set_optional(aenc, "audio-type", "restricted-lowdelay");
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
  if ((rc = lv_add_probe(venc, "src", sh, lv_video_out)) || (rc = lv_add_probe(aenc, "src", sh, lv_count_bytes)))
    goto fail;
  l->venc_src = gst_element_get_static_pad(venc, "src");

  l->vpool = fc_gst_make_pool(vcaps, (guint)GST_VIDEO_INFO_SIZE(&l->vinfo), VIDEO_QUEUE_FRAMES + 2);
  l->apool = fc_gst_make_pool(acaps, AUDIO_CHUNK_SAMPLES * sizeof(int16_t), 8);
  if (!l->vpool || !l->apool) {
    rc = fc_error_set(FC_EMEDIA, "live output: could not set up buffer pools");
    goto fail;
  }

  l->bus = gst_pipeline_get_bus(GST_PIPELINE(l->pipeline));
  gst_bus_set_sync_handler(l->bus, lv_on_bus_message, lv_shared_ref(sh), lv_shared_unref);
  l->sync_handler_set = 1;

  if (p.kind == FC_LIVE_WEBRTC) {
    g_signal_connect(l->pipeline, "deep-element-added", G_CALLBACK(lv_on_deep_element_added), NULL);
    lv_watch_rtpbin(l->webrtc, sh);
    g_object_set(l->webrtc, "bundle-policy", GST_WEBRTC_BUNDLE_POLICY_MAX_BUNDLE, NULL);
    if (params->stun_server) g_object_set(l->webrtc, "stun-server", params->stun_server, NULL);
    if (params->turn_server) g_object_set(l->webrtc, "turn-server", params->turn_server, NULL);
    if ((rc = lv_configure_ice(l->webrtc, &p))) goto fail;
    l->sig_gathering = g_signal_connect_data(l->webrtc, "notify::ice-gathering-state",
                                             G_CALLBACK(lv_on_gathering_state), lv_shared_ref(sh),
                                             lv_shared_unref_closure, 0);
    l->sig_connection = g_signal_connect_data(l->webrtc, "notify::connection-state",
                                              G_CALLBACK(lv_on_connection_state), lv_shared_ref(sh),
                                              lv_shared_unref_closure, 0);
    if ((rc = lv_link_to_webrtc(l->webrtc, vpay, vrtp)) ||
        (rc = lv_link_to_webrtc(l->webrtc, apay, artp)))
      goto fail;
  }

  /* Live sources: the pipeline reaches PLAYING without preroll, inside this call, so the
   * clock and base time exist before the first push. webrtcbin starts its thread here. */
  if (gst_element_set_state(l->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    rc = lv_report_recorded(sh, FC_EMEDIA);
    if (!rc) rc = fc_error_set(FC_EMEDIA, "live output: the GStreamer pipeline did not start");
    goto fail;
  }
  if ((rc = lv_report_recorded(sh, FC_EMEDIA))) goto fail;

  if (p.kind == FC_LIVE_WEBRTC) {
    if ((rc = p.offerer ? lv_make_offer(l->webrtc, &ch) : lv_negotiate(l->webrtc, &offer, &ch)))
      goto fail;
    if ((rc = lv_report_recorded(sh, FC_EMEDIA))) goto fail;
    lv_watch_job *job = calloc(1, sizeof *job);
    if (!job) {
      rc = fc_error_set(FC_ENOMEM, "live output: out of memory");
      goto fail;
    }
    job->sh = lv_shared_ref(sh);
    job->webrtc = gst_object_ref(l->webrtc);
    job->deadline = g_get_monotonic_time() + ANSWER_TIMEOUT_US;
    job->port_min = p.ice_port_min;
    job->port_max = p.ice_port_max;
    GError *e = NULL;
    l->watch_thread = g_thread_try_new("fc-live-watch", lv_watch_main, job, &e);
    if (!l->watch_thread) {
      gst_object_unref(job->webrtc);
      lv_shared_unref(job->sh);
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
    lv_shared_unref(l->sh);
    free(l);
  }
  if (err) *err = rc;
  return NULL;
}

int fc_live_set_answer(fc_live *l, const char *answer_sdp) {
  if (!l || !l->webrtc || !l->p.offerer)
    return fc_error_set(FC_EINVAL, "fc_live_set_answer: not an offering WebRTC output");
  int rc = lv_set_answer(l->webrtc, answer_sdp);
  return rc ? rc : lv_report_recorded(l->sh, FC_EMEDIA);
}

void fc_live_destroy(fc_live *l) {
  if (!l) return;
  /* Waits for a callback in progress; none starts after this. */
  g_mutex_lock(&l->sh->cb_lock);
  l->sh->destroyed = 1;
  g_mutex_unlock(&l->sh->cb_lock);
  teardown(l);
  lv_shared_unref(l->sh);
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
  FC_TSAN_ACQUIRE(held); /* back from the encoder through the pool (core/tsan.h) */
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
  FC_TSAN_RELEASE(held); /* to the encoder through appsrc's queue */
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
    int rc = lv_report_recorded(l->sh, FC_EMEDIA);
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
      int rc = lv_report_recorded(l->sh, FC_EMEDIA);
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
  int rc = lv_report_recorded(l->sh, FC_EMEDIA);
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
