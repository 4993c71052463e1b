/* The RTMP push output: a session's frames, encoded (H.264 + AAC) and muxed into FLV, pushed to
 * an RTMP server (nginx-rtmp, SRS, a streaming service) at a URL, as LiveTalking's
 * `--transport rtmp --push_url rtmp://host/app/stream` does. It is an output like the others
 * (media/sink.h): the pacer pushes to it and never waits for it; it connects by itself,
 * reconnects when the server is absent or the connection drops, and tells how its connection
 * stands through fc_sink_get_link. rtmp.c's opening comment is the design note. */
#ifndef FC_MEDIA_RTMP_H
#define FC_MEDIA_RTMP_H

#include "media/sink.h"

typedef struct fc_rtmp_params {
  const char *url;         /* rtmp://host[:port]/app/stream (rtmps:// too); copied */
  int width, height;       /* even */
  int fps;                 /* default 25 */
  int sample_rate;         /* of the pushed PCM; default 16000 */
  int video_kbps;          /* the video's cap (constant quality under it); default 1500 */
  int video_qp;            /* 1..51: a constant quantizer instead (a still avatar); 0: CRF */
  const char *x264_preset; /* NULL: the live outputs' (FC_LIVE_X264_PRESET) */
  int queue_frames;        /* frames waiting for the connection's thread; default 25 (1 s) */
  int connect_timeout_ms;  /* a server that has not taken the stream by then: retry; 10000 */
  /* Called on the connection's thread when its state changes (connected, lost, the first
   * failure of a run of attempts), for the owner's log; not for every retry. May be NULL. */
  void (*on_link)(void *user, const fc_sink_link *link);
  void *user;
} fc_rtmp_params;

/* Checks an RTMP URL as the output will use it: rtmp:// or rtmps://, a host, an application
 * and a stream name. 0, or FC_EINVAL with a detail. */
int fc_rtmp_check_url(const char *url);

/* The output, as a sink (destroy it with fc_sink_destroy). Checks its parameters and that the
 * GStreamer elements it needs are installed, and starts its thread; the first connection is
 * attempted with the first frame. NULL and *err (FC_EINVAL, FC_EMEDIA naming the package to
 * install, FC_ENOMEM) on failure. */
fc_sink *fc_rtmp_sink_create(const fc_rtmp_params *p, int *err);

#endif
