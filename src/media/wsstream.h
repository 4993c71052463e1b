/* The WebSocket stream's output (GET /ws/stream): a session's pictures encoded to H.264 and its
 * sound as it is, cut into messages for a front end that does not speak WebRTC (a game engine,
 * a native app, a kiosk). This module makes the messages; the server sends them (its WebSocket
 * is no business of src/media).
 *
 * A message is a fixed little-endian header of FC_WSS_HEADER_BYTES, then the payload:
 *   u8  kind     FC_WSS_VIDEO: one H.264 access unit, Annex B, SPS and PPS before each key
 *                frame; FC_WSS_AUDIO: the frame's samples, s16le mono at the session's rate
 *   u8  flags    FC_WSS_KEY: a key frame (video)
 *   u16 hdr_len  FC_WSS_HEADER_BYTES: a reader skips that many bytes, so the header can grow
 *   u32 index    video: the frame's index; audio: the index of the frame it belongs to
 *   i64 pts_us   on the session's clock: video index·1e6/fps, audio first_sample·1e6/rate
 * (README "WebSocket stream" has the whole protocol.) */
#ifndef FC_MEDIA_WSSTREAM_H
#define FC_MEDIA_WSSTREAM_H

#include "media/sink.h"

#include <stddef.h>
#include <stdint.h>

#define FC_WSS_HEADER_BYTES 16
enum { FC_WSS_VIDEO = 1, FC_WSS_AUDIO = 2 };
#define FC_WSS_KEY 0x01
/* The encoder's profile, as the session message names it. */
#define FC_WSS_PROFILE "constrained-baseline"

typedef struct fc_wss fc_wss;

typedef struct fc_wss_params {
  int width, height;       /* even */
  int fps;                 /* default 25 */
  int sample_rate;         /* of the pushed PCM; default 16000 */
  int video_kbps;          /* the video's cap (constant quality under it); default 1500 */
  int video_qp;            /* 1..51: a constant quantizer instead (a still avatar); 0: CRF */
  const char *x264_preset; /* NULL: the live outputs' (FC_LIVE_X264_PRESET) */
  int queue_frames;        /* frames waiting for the encoder's thread; default 25 (1 s) */
  /* One message: hdr (FC_WSS_HEADER_BYTES, filled in) and its payload, valid during the call
   * only. Video from the encoder's streaming thread, audio from the queue's thread; calls of
   * one kind come in order, the two kinds interleave as they will (pts orders them). */
  void (*on_message)(void *user, const uint8_t *hdr, const uint8_t *payload, size_t n, int kind,
                     int flags);
  void *user;
} fc_wss_params;

/* The output as a sink (behind a queued sink of queue_frames: the pusher never waits; destroy
 * it with fc_sink_destroy, after which on_message is not called any more), and in *out the
 * handle for fc_wss_request_keyframe, valid as long as the sink. NULL and *err (FC_EINVAL,
 * FC_EMEDIA: an element missing, FC_ENOMEM) on failure. */
fc_sink *fc_wss_sink_create(const fc_wss_params *p, fc_wss **out, int *err);
/* The next picture encoded is a key frame (with SPS/PPS). Any thread. */
void fc_wss_request_keyframe(fc_wss *w);
/* Writes a message header into hdr[FC_WSS_HEADER_BYTES]. */
void fc_wss_header(uint8_t *hdr, int kind, int flags, uint32_t index, int64_t pts_us);

#endif
