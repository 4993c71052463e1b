/* WebRTC offers and answers as SDP text (src/media/sdp_offer.c), without a pipeline: what is
 * taken from an offer, what is refused and why, and the two fixes to webrtcbin's answer. */
#include "facecast/error.h"
#include "fc_test.h"
#include "media/sdp_offer.h"

#define FP "sha-256 AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB:AB"

/* A browser-like offer: video (the given rtpmap lines) and Opus audio, fingerprint per media. */
static char *offer(const char *video_fmts, const char *video_lines, const char *audio_fp) {
  static char buf[4096];
  snprintf(buf, sizeof buf,
           "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n"
           "m=video 9 UDP/TLS/RTP/SAVPF %s\r\nc=IN IP4 0.0.0.0\r\na=ice-ufrag:u\r\na=ice-pwd:pppppppppppppppppppppp\r\n"
           "a=fingerprint:" FP "\r\na=setup:actpass\r\na=mid:0\r\na=recvonly\r\na=rtcp-mux\r\n%s"
           "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=ice-ufrag:u\r\na=ice-pwd:pppppppppppppppppppppp\r\n"
           "a=fingerprint:%s\r\na=setup:actpass\r\na=mid:1\r\na=recvonly\r\na=rtcp-mux\r\n"
           "a=rtpmap:111 opus/48000/2\r\n",
           video_fmts, video_lines, audio_fp);
  return buf;
}

static void test_choice(void) {
  GstSDPMessage *m = NULL;
  fc_offer_choice ch;
  /* constrained baseline (42e01f) is preferred over the offer's first H.264 format */
  const char *v = "a=rtpmap:100 H264/90000\r\na=fmtp:100 packetization-mode=1;profile-level-id=640032\r\n"
                  "a=rtpmap:102 H264/90000\r\na=fmtp:102 packetization-mode=1;profile-level-id=42e01f\r\n"
                  "a=rtpmap:104 H264/90000\r\na=fmtp:104 packetization-mode=0;profile-level-id=42e01f\r\n";
  FC_CHECK_INT(fc_sdp_parse_offer(offer("100 102 104", v, FP), &m, &ch), ==, 0);
  FC_CHECK_INT(ch.video_pt, ==, 102);
  FC_CHECK_INT(ch.audio_pt, ==, 111);
  FC_CHECK(strcmp(ch.video_plid, "42e01f") == 0);
  if (m) gst_sdp_message_free(m);
}

static void refused(const char *sdp, const char *why) {
  GstSDPMessage *m = NULL;
  fc_offer_choice ch;
  fc_error_clear();
  int err = fc_sdp_parse_offer(sdp, &m, &ch);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  FC_CHECK(m == NULL);
  if (!strstr(fc_error_detail(err), why)) {
    fprintf(stderr, "  detail '%s' lacks '%s'\n", fc_error_detail(err), why);
    FC_CHECK(0);
  }
}

static void test_refusals(void) {
  refused("", "empty");
  refused("this is not SDP", "malformed");
  refused(offer("96", "a=rtpmap:96 VP8/90000\r\n", FP), "it offers VP8");
  refused(offer("102", "a=rtpmap:102 H264/90000\r\na=fmtp:102 packetization-mode=0\r\n", FP),
          "packetization-mode=1");
  refused(offer("102", "a=rtpmap:102 H264/90000\r\na=fmtp:102 packetization-mode=1\r\n",
                "sha-256 CD:CD"),
          "different DTLS fingerprints");
  /* no Opus: the audio m-line offers PCMU only */
  char *o = offer("102", "a=rtpmap:102 H264/90000\r\na=fmtp:102 packetization-mode=1\r\n", FP);
  char *opus = strstr(o, "a=rtpmap:111 opus/48000/2");
  memcpy(opus, "a=rtpmap:111 PCMU/08000/1", 25);
  refused(o, "no Opus");
  /* no ICE credentials on a media (webrtcbin would hand libnice a NULL ufrag: a critical) */
  const char *h264 = "a=rtpmap:102 H264/90000\r\na=fmtp:102 packetization-mode=1\r\n";
  o = offer("102", h264, FP);
  char *u = strstr(o, "a=ice-ufrag:u\r\n");
  memmove(u, u + 15, strlen(u + 15) + 1); /* the video m-line's ufrag goes */
  refused(o, "no ICE credentials");
  o = offer("102", h264, FP);
  u = strstr(strstr(o, "m=audio"), "a=ice-pwd:");
  const char *eol = strstr(u, "\r\n") + 2;
  memmove(u, eol, strlen(eol) + 1); /* the audio m-line's pwd line goes */
  refused(o, "ice-pwd) for m-line 1");
  /* not UTF-8 */
  o = offer("102", "a=rtpmap:102 H264/90000\r\na=fmtp:102 packetization-mode=1\r\na=x:\xff\r\n", FP);
  refused(o, "not UTF-8");
}

static void test_fix_answer(void) {
  GstSDPMessage *a;
  gst_sdp_message_new(&a);
  const char *text = "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
                     "m=video 9 UDP/TLS/RTP/SAVPF 102\r\na=sendonly\r\na=rtpmap:102 H264/90000\r\n"
                     "a=fmtp:102 packetization-mode=1\r\n"
                     "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=sendonly\r\na=rtpmap:111 OPUS/48000/2\r\n";
  FC_REQUIRE(gst_sdp_message_parse_buffer((const guint8 *)text, (guint)strlen(text), a) == GST_SDP_OK);
  fc_offer_choice ch = {.video_pt = 102, .audio_pt = 111};
  strcpy(ch.video_plid, "42e01f");
  fc_sdp_fix_answer(a, &ch);
  char *out = gst_sdp_message_as_text(a);
  FC_CHECK(strstr(out, "a=fmtp:102 packetization-mode=1;profile-level-id=42e01f") != NULL);
  FC_CHECK(strstr(out, "a=msid:facecast facecast-video") != NULL);
  FC_CHECK(strstr(out, "a=msid:facecast facecast-audio") != NULL);
  g_free(out);
  gst_sdp_message_free(a);
}

int main(void) {
  FC_RUN(test_choice);
  FC_RUN(test_refusals);
  FC_RUN(test_fix_answer);
  FC_TEST_EXIT();
}
