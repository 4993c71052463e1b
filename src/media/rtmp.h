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
  fc_sink_push_params out; /* the encoding, the queue, the connection's timeout, on_link */
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
