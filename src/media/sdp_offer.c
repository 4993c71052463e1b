/* WebRTC offers and answers as SDP text (see sdp_offer.h; the negotiation around them is
 * live_webrtc.c). */
#include "media/sdp_offer.h"

#include "facecast/error.h"
#include "media/live.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>



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
int fc_sdp_parse_offer(const char *sdp, GstSDPMessage **out, fc_offer_choice *ch) {
  GstSDPMessage *msg = NULL;
  char seen_video[128] = "";
  int best_score = 0;
  ch->video_pt = ch->audio_pt = -1;
  ch->video_plid[0] = 0;
  *out = NULL;

  if (!sdp || !*sdp) return fc_error_set(FC_EINVAL, "malformed SDP offer (empty)");
  /* GstSDP keeps any bytes and later puts them in caps, where GStreamer warns of non-UTF-8 */
  if (!g_utf8_validate(sdp, -1, NULL)) return fc_error_set(FC_EINVAL, "SDP offer is not UTF-8");
  if (gst_sdp_message_new(&msg) != GST_SDP_OK) return fc_error_set(FC_ENOMEM, "out of memory");
  /* The parser skips what it does not understand, so success means little: require the
   * version line and at least one m-line, which any real offer has. */
  if (gst_sdp_message_parse_buffer((const guint8 *)sdp, (guint)strlen(sdp), msg) != GST_SDP_OK ||
      g_strcmp0(gst_sdp_message_get_version(msg), "0") != 0 ||
      gst_sdp_message_medias_len(msg) == 0) {
    gst_sdp_message_free(msg);
    return fc_error_set(FC_EINVAL, "malformed SDP offer");
  }

  /* ICE credentials on every m-line in use (its own or the session's): webrtcbin hands them
   * to libnice unchecked, and a missing ufrag is a GLib critical there (found by fuzzing). */
  const char *s_ufrag = gst_sdp_message_get_attribute_val(msg, "ice-ufrag");
  const char *s_pwd = gst_sdp_message_get_attribute_val(msg, "ice-pwd");
  for (guint i = 0; i < gst_sdp_message_medias_len(msg); i++) {
    const GstSDPMedia *m = gst_sdp_message_get_media(msg, i);
    if (gst_sdp_media_get_port(m) == 0) continue; /* rejected or bundle-only */
    const char *u = gst_sdp_media_get_attribute_val(m, "ice-ufrag");
    const char *pw = gst_sdp_media_get_attribute_val(m, "ice-pwd");
    if (!u) u = s_ufrag;
    if (!pw) pw = s_pwd;
    if (!u || !*u || !pw || !*pw) {
      gst_sdp_message_free(msg);
      return fc_error_set(FC_EINVAL, "offer has no ICE credentials (ice-ufrag, ice-pwd) for m-line %u",
                          i);
    }
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
void fc_sdp_fix_answer(GstSDPMessage *answer, const fc_offer_choice *ch) {
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

int fc_live_check_offer(const char *sdp) {
  GstSDPMessage *msg = NULL;
  fc_offer_choice ch;
  int err = fc_sdp_parse_offer(sdp, &msg, &ch);
  if (msg) gst_sdp_message_free(msg);
  return err;
}

