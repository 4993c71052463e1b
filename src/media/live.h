/* Live outputs: one session's encoded media leaving the process in real time.
 *
 * A live output takes the session's frames as the pacer releases them (I420 + 640 samples of
 * 16 kHz PCM per frame, stamped from the session's sample clock) and encodes them for its
 * transport:
 *   FC_LIVE_WEBRTC  appsrc → x264enc (zerolatency, constrained baseline) → rtph264pay ┐
 *                   appsrc → audioresample → opusenc → rtpopuspay ───────────────────┴→ webrtcbin
 *                   answering a remote SDP offer (browser or WHEP player);
 *   FC_LIVE_NULL    the same encoders into fakesinks: benchmarks without browsers.
 * All GStreamer objects stay inside src/media/. Pushing never blocks the pacer: the appsrc
 * queues are bounded and leak the oldest buffers when a consumer stalls (counted as dropped).
 *
 * Threads: create/destroy from any one thread (the server's main loop); push from the pacer
 * thread; callbacks arrive on GStreamer's threads — the caller marshals them to its loop, and
 * a callback must not call fc_live_destroy (destroy waits for callbacks in progress). As in
 * libuv, when a call returns an error its callback is never called. */
#ifndef FACECAST_LIVE_H
#define FACECAST_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "facecast/picture.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fc_live_kind { FC_LIVE_WEBRTC, FC_LIVE_NULL } fc_live_kind;

typedef enum fc_live_state {
  FC_LIVE_CONNECTING,
  FC_LIVE_CONNECTED, /* ICE + DTLS up: media flows */
  FC_LIVE_FAILED,    /* ICE or DTLS failed, or the pipeline broke */
  FC_LIVE_CLOSED,    /* the peer went away: ICE closed, an RTCP BYE, or no RTCP for 5 s */
} fc_live_state;

typedef struct fc_live fc_live;

/* The SDP answer (with all ICE candidates gathered, so no trickle is needed), or NULL and err
 * when negotiation failed (bad offer, no common codec). sdp is borrowed for the call. */
typedef void (*fc_live_answer_cb)(void *user, const char *sdp, int err);
typedef void (*fc_live_state_cb)(void *user, fc_live_state state);

/* Opus' default complexity for live audio: a quarter of its cost at 10, and speech decoded
 * from 1, 3, 5 and 10 matches the input equally well (segmental SNR within 0.1 dB;
 * docs/BENCHMARKS.md) — Opus was a fifth of a session's CPU at 5. */
#define FC_LIVE_OPUS_COMPLEXITY 3
/* x264 preset for live streams unless told otherwise: superfast costs about a fifth less CPU
 * than veryfast for a talking head (mostly skipped blocks) at a small loss of quality at the
 * same bit rate, and CPU decides how many sessions a machine holds (docs/BENCHMARKS.md). */
#define FC_LIVE_X264_PRESET "superfast"

/* The lowest port --ice-ports may name: below are the system's privileged ports. */
#define FC_LIVE_ICE_PORT_LO 1024

typedef struct fc_live_params {
  fc_live_kind kind;
  int width, height;        /* even */
  int fps;                  /* default 25 */
  int sample_rate;          /* of the pushed PCM; default 16000 */
  int video_kbps;           /* the most the video may take (constant quality, capped); 1500 */
  /* Video rate control. 0: constant quality (CRF 23) capped at video_kbps, for pictures that
   * move. 1..51: this constant quantizer and no cap, for a still picture whose only motion is
   * the mouth: x264's quality and rate modes analyse every whole frame at half size first,
   * which is most of its work when nearly every block is skipped (docs/BENCHMARKS.md). */
  int video_qp;
  const char *x264_preset;  /* NULL: FC_LIVE_X264_PRESET */
  int x264_threads;         /* default 1: many sessions share the cores */
  int opus_complexity;      /* 1..10; 0 = FC_LIVE_OPUS_COMPLEXITY */
  const char *stun_server;  /* "stun://host:port" or NULL */
  const char *turn_server;  /* "turn(s)://user:pass@host:port" or NULL (user and pass
                               percent-escaped when they hold ':', as time-limited ones do) */
  /* The ports the ICE agent's host candidates bind (UDP, and TCP for ICE-TCP's passive
   * candidates), so that a firewall need open only this range: 0, 0 = any free port; else
   * FC_LIVE_ICE_PORT_LO <= ice_port_min <= ice_port_max <= 65535. */
  int ice_port_min, ice_port_max;
  int ice_no_tcp;           /* 1: UDP candidates only; 0: UDP and TCP (libnice's default) */
  /* FC_LIVE_WEBRTC only. 0: answer the remote offer given to create. 1: make the offer
   * (a WHIP publisher, media/whip.h): create takes no offer, on_answer receives our own offer
   * (H.264 constrained baseline in packetization mode 1 on payload type 96, Opus on 111, both
   * sendonly, candidates gathered) and the peer's answer comes through fc_live_set_answer. */
  int offerer;
  fc_live_state_cb on_state;
  void *user;
} fc_live_params;

/* Creates the output. For FC_LIVE_WEBRTC, offer_sdp is the remote offer and on_answer is called
 * once (from a GStreamer thread) with the answer, after ICE gathering completes or 3 s pass
 * (an offerer: offer_sdp NULL, and on_answer gets our offer the same way).
 * Errors (no callback then): FC_EINVAL for an offer that does not parse or offers no H.264 or
 * no Opus it can receive, FC_EMEDIA for a missing GStreamer element; each with a detail. */
fc_live *fc_live_create(const fc_live_params *p, const char *offer_sdp,
                        fc_live_answer_cb on_answer, void *user, int *err);

/* An offerer's (fc_live_params.offerer) remote answer: sets it, after which ICE and DTLS
 * start (the state callback tells how they go). 0, or FC_EINVAL for an answer that does not
 * parse or that webrtcbin refuses, with a detail. Once, from the owner's thread. */
int fc_live_set_answer(fc_live *l, const char *answer_sdp);

/* Whether `preset` is one of x264's speed presets (the live encoder's): 0, or FC_EINVAL with a
 * detail. For checking options before any session. */
int fc_live_check_preset(const char *preset);
/* Checks a WebRTC offer as fc_live_create does before it builds anything (an SDP with H.264
 * video in packetization mode 1 and Opus audio): 0 or FC_EINVAL with a detail. Builds nothing;
 * the offer's parsing, on its own (tests/fuzz/fuzz_sdp.c). */
int fc_live_check_offer(const char *sdp);

/* Stops the pipeline and frees everything; no callback runs after it returns. NULL is fine. */
void fc_live_destroy(fc_live *l);

/* Pushes frame `index` (I420, width×height, contiguous; copied into a pooled buffer) and its n
 * audio samples starting at sample `first_sample`. Timestamps: pts = index/fps on the output's
 * clock, which starts at the first push. i420 NULL (not for the first push): the previous
 * picture stands — no video frame is encoded or sent for this index (the viewer keeps showing
 * the last one; a still avatar at rest need not be encoded 25 times a second), the audio goes
 * out as usual. Returns 0, or FC_EMEDIA after a pipeline error. */
int fc_live_push(fc_live *l, const uint8_t *i420, int64_t index, const int16_t *pcm, size_t n,
                 int64_t first_sample);

/* fc_live_push with what the picture holds against a still base (image.h; delta may be NULL:
 * unknown). The output's reused frame buffers then take two rectangles instead of the whole
 * picture when it and they were described against the same base. */
int fc_live_push_delta(fc_live *l, const uint8_t *i420, const fc_i420_delta *delta, int64_t index,
                       const int16_t *pcm, size_t n, int64_t first_sample);

/* Asks the encoder for a key frame now (a new viewer, a PLI from the peer is handled inside). */
void fc_live_force_keyframe(fc_live *l);

typedef struct fc_live_stats {
  uint64_t frames_pushed, frames_dropped; /* dropped: discarded from a full queue, also while
                                             the connection is still coming up */
  uint64_t bytes_sent;                    /* encoded bytes leaving the encoders */
  /* Pictures leaving the video encoder; their summed delay after their push (the queue in
   * front of the encoder plus the encoding), in µs, and those more than a frame period late,
   * both over the pictures timed (all but any that leave before the pipeline's clock runs). */
  uint64_t frames_encoded, encode_delay_us, frames_encoded_late;
  /* Key frames among them: the first, one every 2 s, those asked for, and one early extra at a
   * random picture (2 .. 2*fps-1) so that outputs started together do not make theirs in the
   * same tick. */
  uint64_t keyframes;
  fc_live_state state;
} fc_live_stats;
void fc_live_get_stats(fc_live *l, fc_live_stats *st);

#ifdef __cplusplus
}
#endif
#endif
