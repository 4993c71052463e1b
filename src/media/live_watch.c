/* What GStreamer's threads call into a live output, and its watch thread (live_internal.h; the
 * design note is live.c's). */
#include "media/live_internal.h"

#include "facecast/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- errors and state ---- */

/* Copies a recorded pipeline error into this thread's detail; returns its code (as_code when
 * nonzero), or 0 if there is none. */
int lv_report_recorded(live_shared *s, int as_code) {
  return fc_gst_report_recorded(&s->lock, &s->err, as_code);
}

/* Moves to `st` and tells the user if it differs from what they last heard. A pipeline error
 * makes FAILED final: webrtcbin may still report ICE as connected, but no media flows. */
void lv_set_state(live_shared *s, fc_live_state st) {
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

GstBusSyncReply lv_on_bus_message(GstBus *bus, GstMessage *msg, gpointer data) {
  live_shared *s = data;
  (void)bus;
  /* The first error only, as "live output: <element>: <message> (<reason>)", always
   * FC_EMEDIA. */
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR &&
      fc_gst_record_bus_error(&s->lock, &s->err, msg, "live output", NULL))
    lv_set_state(s, FC_LIVE_FAILED);
  /* Nobody pops this bus: keep its queue empty. A sync handler that drops a message owns it
   * (GstBusSyncHandler's contract); without this unref every message, and through its source
   * every element, would leak. */
  gst_message_unref(msg);
  return GST_BUS_DROP;
}

/* ---- webrtcbin signal handlers (webrtcbin's "pc" thread) ---- */

void lv_on_gathering_state(GObject *webrtc, GParamSpec *pspec, gpointer data) {
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

void lv_on_connection_state(GObject *webrtc, GParamSpec *pspec, gpointer data) {
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
  lv_set_state(s, st);
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
void lv_on_deep_element_added(GstBin *bin, GstBin *sub_bin, GstElement *element,
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
  lv_set_state(s, FC_LIVE_CLOSED);
}

/* Connects the liveness signals on webrtcbin's rtpbin (found by factory, not by its name). */
void lv_watch_rtpbin(GstElement *webrtc, live_shared *s) {
  GstIterator *it = gst_bin_iterate_elements(GST_BIN(webrtc));
  GValue v = G_VALUE_INIT;
  int done = 0;
  while (!done) {
    switch (gst_iterator_next(it, &v)) {
    case GST_ITERATOR_OK: {
      GstElement *e = g_value_get_object(&v);
      GstElementFactory *f = gst_element_get_factory(e);
      if (f && !g_strcmp0(gst_plugin_feature_get_name(GST_PLUGIN_FEATURE(f)), "rtpbin")) {
        g_signal_connect_data(e, "on-ssrc-active", G_CALLBACK(on_peer_rtcp), lv_shared_ref(s),
                              lv_shared_unref_closure, 0);
        g_signal_connect_data(e, "on-bye-ssrc", G_CALLBACK(on_peer_bye), lv_shared_ref(s),
                              lv_shared_unref_closure, 0);
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

GstPadProbeReturn lv_count_bytes(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
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
void lv_video_enough_data(GstAppSrc *src, gpointer data) {
  live_shared *s = data;
  (void)src;
  atomic_fetch_add_explicit(&s->frames_dropped, 1, memory_order_relaxed);
}

void lv_audio_enough_data(GstAppSrc *src, gpointer data) {
  live_shared *s = data;
  (void)src;
  atomic_fetch_add_explicit(&s->audio_dropped, 1, memory_order_relaxed);
}

/* The video encoder's output: bytes, and how long after its push each picture came out, which
 * the pacer's own lateness does not see: the wait in appsrc's queue plus the encoding. */
GstPadProbeReturn lv_video_out(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
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
  return lv_count_bytes(pad, info, data);
}

int lv_add_probe(GstElement *e, const char *pad_name, live_shared *s, GstPadProbeCallback cb) {
  GstPad *pad = gst_element_get_static_pad(e, pad_name);
  if (!pad) return fc_error_set(FC_EMEDIA, "%s has no %s pad", GST_ELEMENT_NAME(e), pad_name);
  gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST, cb,
                    lv_shared_ref(s), lv_shared_unref);
  gst_object_unref(pad);
  return 0;
}

/* The watch thread, one per WebRTC output. First it waits for ICE gathering (or the timeout)
 * and hands the local description, which by then lists the gathered candidates, to
 * on_answer. Then it checks once a second that a connected peer is still sending RTCP. */


gpointer lv_watch_main(gpointer data) {
  lv_watch_job *job = data;
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
      if (text && job->port_max && !strstr(text, "a=candidate:")) {
        /* libnice found no free port in the range on any address: without a candidate the
         * peer could never connect, so say why now rather than time out in 30 s */
        s->on_answer(s->answer_user, NULL,
                     fc_error_set(FC_EBUSY, "every ICE port (%d-%d) is in use: no session can "
                                  "be added until one closes (widen --ice-ports)",
                                  job->port_min, job->port_max));
      } else if (text) {
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
      lv_set_state(s, FC_LIVE_CLOSED);
      g_mutex_lock(&s->lock);
      continue;
    }
    g_cond_wait_until(&s->cond, &s->lock, now + G_TIME_SPAN_SECOND);
  }
  g_mutex_unlock(&s->lock);

  gst_object_unref(job->webrtc);
  lv_shared_unref(s);
  free(job);
  return NULL;
}

