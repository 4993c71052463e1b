/* WebRTC offers and answers as SDP text (sdp_offer.c): what facecast takes from a viewer's offer
 * and the two fixes its answer needs. Pure GstSDP (no pipeline, no webrtcbin): tested on its
 * own (tests/test_live.c) and fuzzed (tests/fuzz/fuzz_sdp.c). */
#ifndef FC_MEDIA_SDP_OFFER_H
#define FC_MEDIA_SDP_OFFER_H

#include <gst/sdp/sdp.h>

typedef struct fc_offer_choice {
  int video_pt, audio_pt;
  char video_plid[8]; /* the chosen format's profile-level-id, "" if it had none */
} fc_offer_choice;

/* Parses and checks an offer before anything is built: H.264 in packetization mode 1 and Opus
 * on m-lines we may send on, one DTLS fingerprint; picks the payload types (constrained
 * baseline preferred). 0 with *out owning the message, or FC_EINVAL with a detail. */
int fc_sdp_parse_offer(const char *sdp, GstSDPMessage **out, fc_offer_choice *ch);
/* The answer webrtcbin 1.22 writes, fixed before it is set locally (sdp_offer.c says which). */
void fc_sdp_fix_answer(GstSDPMessage *answer, const fc_offer_choice *ch);

#endif
