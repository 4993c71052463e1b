/* A live output and webrtcbin (live_internal.h; the design note is live.c's): the payloaders'
 * links to its transceivers, its ICE agent's ports and transports, and the negotiation of the
 * answer. */
#include "media/live_internal.h"

#include "facecast/error.h"

#include <stdio.h>
#include <string.h>

/* The caps a payloader sends with, which are also the transceiver's codec preferences: only
 * the fields the payloader's output always agrees with. profile-level-id is left out on
 * purpose: rtph264pay writes the one of the actual stream (e.g. 42c00d), and webrtcbin refuses
 * sink caps that do not intersect the preferences. create-answer intersects the offer's caps
 * with these, so the answer keeps the offer's fields (rtcp-fb nack pli, ...); the
 * profile-level-id it loses on the way is put back by fc_sdp_fix_answer. */
GstCaps *lv_rtp_caps(int video, int pt) {
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
int lv_link_to_webrtc(GstElement *webrtc, GstElement *pay, GstCaps *caps) {
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

/* set-remote-description (takes *offer), create-answer, set-local-description. */
int lv_negotiate(GstElement *webrtc, GstSDPMessage **offer, const fc_offer_choice *ch) {
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
  fc_sdp_fix_answer(answer->sdp, ch);

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

/* The offerer's side (a WHIP publisher): create-offer from our two SENDONLY transceivers, the
 * same fixes as an answer's (profile-level-id, which webrtcbin writes for no format it made
 * from caps alone, and a=msid), set-local-description. Gathering starts with the last; the
 * watch thread hands the offer out once it holds the candidates. */
int lv_make_offer(GstElement *webrtc, const fc_offer_choice *ch) {
  GstWebRTCSessionDescription *offer = NULL;
  GstStructure *reply;
  int rc;
  GstPromise *pr = gst_promise_new();
  g_signal_emit_by_name(webrtc, "create-offer", NULL, pr);
  if ((rc = wait_reply(pr, "creating the SDP offer", FC_EMEDIA, &reply))) return rc;
  if (reply) {
    gst_structure_get(reply, "offer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &offer, NULL);
    gst_structure_free(reply);
  }
  if (!offer) return fc_error_set(FC_EMEDIA, "webrtcbin created no SDP offer");
  fc_sdp_fix_answer(offer->sdp, ch);
  pr = gst_promise_new();
  g_signal_emit_by_name(webrtc, "set-local-description", offer, pr);
  rc = wait_reply(pr, "setting the SDP offer", FC_EMEDIA, &reply);
  if (reply) gst_structure_free(reply);
  gst_webrtc_session_description_free(offer);
  return rc;
}

/* The peer's answer to our offer. A bad one (not SDP, or not matching the offer) is the
 * peer's fault: FC_EINVAL. */
int lv_set_answer(GstElement *webrtc, const char *sdp) {
  GstSDPMessage *msg = NULL;
  GstStructure *reply;
  if (!sdp || gst_sdp_message_new(&msg) != GST_SDP_OK) return fc_error_set(FC_EINVAL, "no answer");
  if (gst_sdp_message_parse_buffer((const guint8 *)sdp, (guint)strlen(sdp), msg) != GST_SDP_OK ||
      gst_sdp_message_medias_len(msg) == 0) {
    gst_sdp_message_free(msg);
    return fc_error_set(FC_EINVAL, "the answer is not an SDP description with media");
  }
  GstWebRTCSessionDescription *desc =
      gst_webrtc_session_description_new(GST_WEBRTC_SDP_TYPE_ANSWER, msg);
  GstPromise *pr = gst_promise_new();
  g_signal_emit_by_name(webrtc, "set-remote-description", desc, pr);
  int rc = wait_reply(pr, "setting the SDP answer", FC_EINVAL, &reply);
  if (reply) gst_structure_free(reply);
  gst_webrtc_session_description_free(desc);
  return rc;
}

/* The ICE agent's ports and transports (fc_live_params). webrtcbin hands them to libnice when
 * a stream starts gathering: nice_agent_set_port_range on the one component (bundle + rtcp-mux)
 * and the agent's ice-tcp. libnice starts at a random port of the range and walks it, binding
 * one UDP socket and, with ICE-TCP, one passive TCP listener per local address (its active TCP
 * candidates connect out from ephemeral ports). GstWebRTCNice has these properties since 1.20
 * (the ports) and 1.22 (ice-tcp); another ICE implementation may lack them, so each is looked
 * up before it is set. */
int lv_configure_ice(GstElement *webrtc, const fc_live_params *p) {
  GObject *ice = NULL;
  int rc = FC_OK;
  if (!p->ice_port_min && !p->ice_port_max && !p->ice_no_tcp) return FC_OK; /* its defaults */
  g_object_get(webrtc, "ice-agent", &ice, NULL);
  if (!ice) return fc_error_set(FC_EMEDIA, "webrtcbin has no ICE agent");
  GObjectClass *k = G_OBJECT_GET_CLASS(ice);
  if (p->ice_port_min || p->ice_port_max) {
    if (!g_object_class_find_property(k, "min-rtp-port") ||
        !g_object_class_find_property(k, "max-rtp-port")) {
      rc = fc_error_set(FC_EMEDIA, "this GStreamer's ICE agent (%s) cannot limit its ports",
                        G_OBJECT_TYPE_NAME(ice));
      goto out;
    }
    /* min first: the range starts as 0..65535 and min <= max holds after each step */
    g_object_set(ice, "min-rtp-port", (guint)p->ice_port_min, NULL);
    g_object_set(ice, "max-rtp-port", (guint)p->ice_port_max, NULL);
  }
  if (p->ice_no_tcp) {
    if (!g_object_class_find_property(k, "ice-tcp")) {
      rc = fc_error_set(FC_EMEDIA, "this GStreamer's ICE agent (%s) cannot turn ICE-TCP off",
                        G_OBJECT_TYPE_NAME(ice));
      goto out;
    }
    g_object_set(ice, "ice-tcp", FALSE, NULL);
  }
out:
  g_object_unref(ice);
  return rc;
}
