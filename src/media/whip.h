/* The WHIP push output (RFC 9725): a session's frames published over WebRTC to a WHIP endpoint
 * (an SFU such as SRS, viewers then play it over WHEP), as LiveTalking's
 * `--transport rtcpush --push_url URL` does. It is an output like the others (media/sink.h): the
 * pacer pushes to it and never waits for it; it connects by itself (offer POSTed, answer set,
 * ICE + DTLS), reconnects when the endpoint refuses, is absent or the connection drops, and
 * tells how its connection stands through fc_sink_get_link. whip.c's opening comment is the
 * design note. */
#ifndef FC_MEDIA_WHIP_H
#define FC_MEDIA_WHIP_H

#include "media/sink.h"

typedef struct fc_whip_params {
  const char *url;         /* http(s)://host[:port]/path[?query]: the WHIP endpoint; copied */
  const char *token;       /* sent as "Authorization: Bearer TOKEN", never logged; NULL: none */
  const char *stun_server; /* as fc_live_params' (NULL: host candidates only); copied */
  int http_timeout_s;      /* for each HTTP exchange (the POST, the DELETE); default 5 */
  /* The encoding, the queue, on_link; the connection's timeout runs from the offer's POST
   * to ICE + DTLS up. */
  fc_sink_push_params out;
} fc_whip_params;

/* Checks a WHIP endpoint URL as the output will use it: http:// or https:// with a host, no
 * spaces or control characters. 0, or FC_EINVAL with a detail. */
int fc_whip_check_url(const char *url);

/* The output, as a sink (destroy it with fc_sink_destroy; that DELETEs the endpoint's resource
 * of a connection still up). Checks its parameters and that the GStreamer elements it needs
 * are installed, and starts its thread; the first connection is attempted with the first
 * frame. NULL and *err (FC_EINVAL, FC_EMEDIA naming the package to install, FC_ENOMEM) on
 * failure. */
fc_sink *fc_whip_sink_create(const fc_whip_params *p, int *err);

#endif
