/* The WHIP push output (media/whip.h): a session's frames published to a WHIP endpoint (RFC
 * 9725), as LiveTalking's rtcpush transport publishes each of its sessions to SRS for viewers
 * to play over WHEP.
 *
 *   the live output as the offerer (media/live.h, offerer = 1):
 *   appsrc (I420) → fcx264enc → constrained baseline → rtph264pay (mode 1) ┐
 *   appsrc (S16LE) → audioresample → opusenc → rtpopuspay ──────────────┴→ webrtcbin
 *   (both transceivers sendonly)
 *
 * The media side is the WebRTC answerer's pipeline with the roles of the SDP turned round, so
 * the encoders, timestamps, drops, key frames and peer liveness are the same code a viewer
 * gets. What this file adds is the WHIP exchange and a connection that comes back by itself.
 *
 * Two threads, so that the session never waits for the network. The pacer's push goes to a
 * queued sink (sink.h) of queue_frames frames in front of this one: it copies the frame into
 * the ring and returns; a full ring drops the new frame, counted. The ring's thread pushes
 * here, and this output does all its connection work on that thread. States (fc_sink_link):
 *   CONNECTING  a live output is made; its watch thread gathers ICE candidates (host ones:
 *               at most the live output's 3 s) and hands out the offer; then the offer is
 *               POSTed (Content-Type application/sdp, the Bearer token if any; http_timeout_s)
 *               and the endpoint's 201 (SRS answers 200: taken too) carries the answer and a
 *               Location, the resource to DELETE at the end (resolved against the URL). The
 *               answer is set and ICE + DTLS run: connected when the live output says so.
 *               Frames are dropped (counted) until then: the stream starts on a key frame at
 *               the first frame pushed. Any other status, a transport error, a bad answer, a
 *               failed ICE/DTLS, or nothing connected within connect_timeout_ms: a failure.
 *   CONNECTED   frames are pushed to the live output. Lost when it reports FAILED or CLOSED
 *               (the endpoint's RTCP stopped for 5 s or it said BYE: a restarted SFU, a
 *               network gone) or a push fails.
 *   RETRYING    the live output is gone (its resource DELETEd if the endpoint gave one); the
 *               next attempt after a back-off of 1 s, doubling up to 30 s, back to 1 s once a
 *               connection was made.
 * As the RTMP push does (the same fc_sink_retry, sink.h), the owner hears of a change
 * (on_link) when a connection is made, when one is lost, and at the first failure after
 * either: not once per retry.
 *
 * Blocking. The POST and the DELETE are synchronous libsoup calls on the ring's thread, each
 * bounded by http_timeout_s (a new SoupSession per call, so the thread that makes it uses it;
 * a slow endpoint holds only this thread while the ring in front drops). The gathering is not
 * waited for: each push looks whether the offer has come.
 *
 * Timestamps: the live output's, from the session clock (frame index / fps and sample / rate),
 * each connection starting at its first frame. A frame without a picture repeats the picture
 * before only for a connection's first frame (the live output needs one to start); after it
 * the live output lets the picture stand, as for a viewer.
 *
 * Threads: create and destroy on the owner's thread; push (and every connection change) on the
 * ring's thread; stats and link from any thread (atomics; the retry's own lock for the link;
 * `lock` for the current live output's figures and the offer handed over by the live
 * output's watch thread). */
#include "media/whip.h"

#include "facecast/error.h"
#include "media/gst_common.h"
#include "media/live.h"

#include <libsoup/soup.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_QUEUE 25       /* 1 s of frames in the ring in front */
#define MAX_ANSWER (64 * 1024) /* an SDP answer is a few kB */

typedef enum { PH_NONE, PH_OFFER, PH_ICE, PH_UP } phase;

typedef struct whip_out {
  fc_sink sink; /* this output; the queued sink in front is what create hands out */
  fc_whip_params p;
  char *url, *token, *preset, *stun;
  uint8_t *last; /* the last picture pushed, for a connection's first frame */
  int have_last;
  size_t pic_bytes;

  /* The connection: the ring's thread only (live also under lock: stats reads it). */
  fc_live *live;
  phase ph;
  char *location; /* the resource to DELETE, absolute; NULL: none */
  gint64 attempt_us;
  fc_sink_retry retry; /* the link, its back-off and its reports (sink.h) */

  /* From the live output's threads. */
  _Atomic int live_state; /* fc_live_state */
  GMutex lock;            /* live, offer, offer_err, the totals */
  char *offer;            /* handed out by the live output's watch thread */
  char offer_err[160];
  fc_sink_stats done; /* the figures of the connections before the current one */

  _Atomic uint64_t pushed, dropped;
} whip_out;

/* ---- the URL ---- */

int fc_whip_check_url(const char *url) {
  if (!url || (!g_str_has_prefix(url, "http://") && !g_str_has_prefix(url, "https://")))
    return fc_error_set(FC_EINVAL, "push URL '%s': expected a WHIP endpoint, http(s)://...",
                        url ? url : "");
  for (const char *c = url; *c; c++)
    if ((unsigned char)*c <= ' ' || *c == 0x7f)
      return fc_error_set(FC_EINVAL, "push URL: spaces or control characters in it");
  GError *e = NULL;
  GUri *u = g_uri_parse(url, G_URI_FLAGS_ENCODED, &e);
  const int ok = u && g_uri_get_host(u) && *g_uri_get_host(u);
  if (u) g_uri_unref(u);
  if (!ok) {
    int rc = fc_error_set(FC_EINVAL, "push URL '%s': %s", url, e ? e->message : "no host in it");
    if (e) g_error_free(e);
    return rc;
  }
  return FC_OK;
}

/* ---- the live output's callbacks (its threads) ---- */

static void on_offer(void *user, const char *sdp, int err) {
  whip_out *w = user;
  g_mutex_lock(&w->lock);
  if (sdp) {
    g_free(w->offer);
    w->offer = g_strdup(sdp);
  } else {
    g_strlcpy(w->offer_err, err ? fc_error_detail(err) : "no offer", sizeof w->offer_err);
  }
  g_mutex_unlock(&w->lock);
}

static void on_state(void *user, fc_live_state st) {
  whip_out *w = user;
  atomic_store(&w->live_state, (int)st);
}

/* ---- HTTP (the ring's thread, or the owner's at destroy) ---- */

static SoupMessage *request(whip_out *w, const char *method, const char *url) {
  SoupMessage *m = soup_message_new(method, url);
  if (!m) return NULL;
  SoupMessageHeaders *h = soup_message_get_request_headers(m);
  if (w->token) {
    char *v = g_strdup_printf("Bearer %s", w->token);
    soup_message_headers_replace(h, "Authorization", v);
    g_free(v);
  }
  return m;
}

static SoupSession *new_session(const whip_out *w) {
  return soup_session_new_with_options("timeout", (guint)w->p.http_timeout_s, "idle-timeout",
                                       (guint)w->p.http_timeout_s, "user-agent", "facecast", NULL);
}

/* POSTs the offer: 0 with the answer and the resource's absolute URL (NULL if the endpoint
 * gave none), or FC_EIO with a detail: no exchange (refused, timed out), a status other than
 * 201/200, or no usable answer in the body. */
static int post_offer(whip_out *w, const char *offer, char **answer, char **location) {
  *answer = *location = NULL;
  SoupMessage *m = request(w, "POST", w->url);
  if (!m) return fc_error_set(FC_EINVAL, "whip push: the URL cannot be requested");
  GBytes *body = g_bytes_new(offer, strlen(offer));
  soup_message_set_request_body_from_bytes(m, "application/sdp", body);
  g_bytes_unref(body);
  SoupSession *ss = new_session(w);
  GError *e = NULL;
  GBytes *resp = soup_session_send_and_read(ss, m, NULL, &e);
  const guint status = soup_message_get_status(m);
  int rc = FC_OK;
  if (!resp) {
    rc = fc_error_set(FC_EIO, "whip push: %s", e ? e->message : "no answer");
  } else if (status != 201 && status != 200) {
    rc = fc_error_set(FC_EIO, "whip push: the endpoint answered %u %s", status,
                      soup_message_get_reason_phrase(m) ? soup_message_get_reason_phrase(m) : "");
  } else {
    gsize n = 0;
    const char *d = g_bytes_get_data(resp, &n);
    if (!d || n == 0 || n > MAX_ANSWER || memchr(d, 0, n)) {
      rc = fc_error_set(FC_EIO, "whip push: the endpoint's %u has no SDP answer (%zu bytes)",
                        status, (size_t)n);
    } else {
      *answer = g_strndup(d, n);
      const char *loc =
          soup_message_headers_get_one(soup_message_get_response_headers(m), "Location");
      if (loc && *loc) *location = g_uri_resolve_relative(w->url, loc, G_URI_FLAGS_NONE, NULL);
    }
  }
  if (e) g_error_free(e);
  if (resp) g_bytes_unref(resp);
  g_object_unref(m);
  g_object_unref(ss);
  return rc;
}

/* DELETEs the resource of a connection that ends (RFC 9725 §4.2), best effort: the endpoint
 * would time it out anyway. */
static void delete_resource(whip_out *w) {
  if (!w->location) return;
  SoupMessage *m = request(w, "DELETE", w->location);
  if (m) {
    SoupSession *ss = new_session(w);
    GBytes *resp = soup_session_send_and_read(ss, m, NULL, NULL);
    if (resp) g_bytes_unref(resp);
    g_object_unref(m);
    g_object_unref(ss);
  }
  g_free(w->location);
  w->location = NULL;
}

/* ---- the connection's state ---- */

static void add_stats(fc_sink_stats *to, fc_live *l) {
  fc_live_stats ls;
  fc_live_get_stats(l, &ls);
  to->frames_dropped += ls.frames_dropped;
  to->frames_encoded += ls.frames_encoded;
  to->encode_delay_us += ls.encode_delay_us;
  to->frames_encoded_late += ls.frames_encoded_late;
  to->keyframes += ls.keyframes;
  to->bytes_out += ls.bytes_sent;
}

static void teardown(whip_out *w) {
  g_mutex_lock(&w->lock);
  fc_live *l = w->live;
  if (l) add_stats(&w->done, l);
  w->live = NULL;
  g_free(w->offer);
  w->offer = NULL;
  w->offer_err[0] = 0;
  g_mutex_unlock(&w->lock);
  fc_live_destroy(l); /* no callback after it */
  delete_resource(w);
  w->ph = PH_NONE; /* the last picture stays, for the next connection's first frame */
}

static void fail(whip_out *w, gint64 now, const char *why) {
  char msg[sizeof w->retry.link.error];
  g_strlcpy(msg, why, sizeof msg); /* why may be the thread's detail, which teardown reuses */
  teardown(w);
  fc_sink_retry_failed(&w->retry, now, msg);
}

static void attempt(whip_out *w, gint64 now) {
  fc_sink_retry_attempt(&w->retry);
  w->attempt_us = now;
  atomic_store(&w->live_state, (int)FC_LIVE_CONNECTING);
  const fc_live_params lp = {.kind = FC_LIVE_WEBRTC,
                             .offerer = 1,
                             .width = w->p.out.width,
                             .height = w->p.out.height,
                             .fps = w->p.out.fps,
                             .sample_rate = w->p.out.sample_rate,
                             .video_kbps = w->p.out.video_kbps,
                             .video_qp = w->p.out.video_qp,
                             .x264_preset = w->preset,
                             .stun_server = w->stun,
                             .on_state = on_state,
                             .user = w};
  int rc;
  fc_live *l = fc_live_create(&lp, NULL, on_offer, w, &rc);
  if (!l) {
    fail(w, now, fc_error_detail(rc));
    return;
  }
  g_mutex_lock(&w->lock);
  w->live = l;
  g_mutex_unlock(&w->lock);
  w->ph = PH_OFFER;
}

/* The offer came: the WHIP exchange, then the answer into the live output. */
static void exchange(whip_out *w, gint64 now, char *offer) {
  char *answer = NULL;
  int rc = post_offer(w, offer, &answer, &w->location);
  if (!rc) rc = fc_live_set_answer(w->live, answer);
  g_free(answer);
  if (rc) {
    fail(w, now, fc_error_detail(rc));
    return;
  }
  w->ph = PH_ICE;
  w->attempt_us = g_get_monotonic_time(); /* the connection's time starts after the POST */
}

/* Moves the connection on (see the states in the design note). */
static void step(whip_out *w, gint64 now) {
  const fc_live_state ls = (fc_live_state)atomic_load(&w->live_state);
  if (w->ph == PH_OFFER) {
    g_mutex_lock(&w->lock);
    char *offer = w->offer;
    w->offer = NULL;
    char err[sizeof w->offer_err];
    g_strlcpy(err, w->offer_err, sizeof err);
    g_mutex_unlock(&w->lock);
    if (offer) {
      exchange(w, now, offer);
      g_free(offer);
    } else if (*err) {
      fail(w, now, err);
    } else if (now - w->attempt_us > (gint64)w->p.out.connect_timeout_ms * 1000) {
      fail(w, now, "whip push: no offer (ICE gathering did not finish)");
    }
  } else if (w->ph == PH_ICE) {
    if (ls == FC_LIVE_CONNECTED) {
      w->ph = PH_UP;
      fc_sink_retry_connected(&w->retry);
    } else if (ls == FC_LIVE_FAILED || ls == FC_LIVE_CLOSED) {
      fail(w, now, "whip push: ICE/DTLS with the endpoint failed");
    } else if (now - w->attempt_us > (gint64)w->p.out.connect_timeout_ms * 1000) {
      char why[sizeof w->retry.link.error];
      snprintf(why, sizeof why, "whip push: ICE/DTLS with the endpoint not up within %d ms",
               w->p.out.connect_timeout_ms);
      fail(w, now, why);
    }
  } else if (w->ph == PH_UP && (ls == FC_LIVE_FAILED || ls == FC_LIVE_CLOSED)) {
    fail(w, now,
         ls == FC_LIVE_FAILED ? "whip push: the connection failed"
                              : "whip push: the endpoint went away (no RTCP for 5 s)");
  }
  if (w->ph == PH_NONE && fc_sink_retry_due(&w->retry, now)) attempt(w, now);
}

/* ---- as an output (the ring's thread) ---- */

static int whip_push(void *self, const fc_sink_frame *f) {
  whip_out *w = self;
  atomic_fetch_add_explicit(&w->pushed, 1, memory_order_relaxed);
  if (f->i420) {
    memcpy(w->last, f->i420, w->pic_bytes);
    w->have_last = 1;
  }
  const int was_up = w->ph == PH_UP;
  step(w, g_get_monotonic_time());
  if (w->ph != PH_UP || !w->have_last) {
    atomic_fetch_add_explicit(&w->dropped, 1, memory_order_relaxed);
    return 0; /* the output's own policy: not an error for the pusher */
  }
  /* A new connection starts with a picture; after it a missing one stands. */
  const uint8_t *pic = f->i420 ? f->i420 : was_up ? NULL : w->last;
  int rc = fc_live_push(w->live, pic, f->index, f->pcm, f->n_samples, f->first_sample);
  if (rc) fail(w, g_get_monotonic_time(), fc_error_detail(rc)); /* the next one reconnects */
  return 0;
}

static void whip_stats(void *self, fc_sink_stats *out) {
  whip_out *w = self;
  g_mutex_lock(&w->lock);
  *out = w->done;
  if (w->live) add_stats(out, w->live);
  g_mutex_unlock(&w->lock);
  out->frames_pushed = atomic_load_explicit(&w->pushed, memory_order_relaxed);
  out->frames_dropped += atomic_load_explicit(&w->dropped, memory_order_relaxed);
}

static int whip_link(void *self, fc_sink_link *out) {
  fc_sink_retry_get(&((whip_out *)self)->retry, out);
  return FC_OK;
}

static void whip_destroy(void *self) {
  whip_out *w = self;
  if (!w) return;
  teardown(w); /* the live output, and the DELETE of its resource */
  g_mutex_clear(&w->lock);
  fc_sink_retry_clear(&w->retry);
  free(w->last);
  g_free(w->url);
  g_free(w->token);
  g_free(w->preset);
  g_free(w->stun);
  free(w);
}

static const fc_sink_ops whip_ops = {.kind = "whip",
                                     .push = whip_push,
                                     .stats = whip_stats,
                                     .destroy = whip_destroy,
                                     .link = whip_link};

/* ---- creation ---- */

fc_sink *fc_whip_sink_create(const fc_whip_params *params, int *err) {
  int rc;
  whip_out *w = NULL;
  if (!params) {
    *err = fc_error_set(FC_EINVAL, "fc_whip_sink_create: no parameters");
    return NULL;
  }
  fc_whip_params p = *params;
  if (!p.http_timeout_s) p.http_timeout_s = 5;
  if ((rc = fc_whip_check_url(p.url)) || (rc = fc_sink_push_params_fill(&p.out, "whip push")))
    goto fail;
  if (p.http_timeout_s < 1 || p.http_timeout_s > 600) {
    rc = fc_error_set(FC_EINVAL, "whip push: HTTP timeout %d s: expected 1..600", p.http_timeout_s);
    goto fail;
  }
  /* Everything a connection needs, checked now rather than at the first attempt. */
  if ((rc = fc_gst_init()) || (rc = fc_gst_require("webrtcbin")) ||
      (rc = fc_gst_require("nicesrc")) || (rc = fc_gst_require("dtlssrtpenc")) ||
      (rc = fc_gst_require("rtph264pay")) || (rc = fc_gst_require("opusenc")))
    goto fail;
  if (!(w = calloc(1, sizeof *w))) {
    rc = fc_error_set(FC_ENOMEM, "whip push: out of memory");
    goto fail;
  }
  g_mutex_init(&w->lock);
  fc_sink_retry_init(&w->retry, p.out.on_link, p.out.user);
  w->sink = (fc_sink){&whip_ops, w};
  w->p = p;
  w->url = g_strdup(p.url);
  w->token = p.token && *p.token ? g_strdup(p.token) : NULL;
  w->preset = g_strdup(p.out.x264_preset);
  w->stun = p.stun_server ? g_strdup(p.stun_server) : NULL;
  w->p.url = w->p.token = w->p.out.x264_preset = w->p.stun_server = NULL;
  w->pic_bytes = (size_t)p.out.width * p.out.height * 3 / 2;
  if (!(w->last = malloc(w->pic_bytes))) {
    rc = fc_error_set(FC_ENOMEM, "whip push: out of memory");
    goto fail;
  }
  const fc_sink_push_params *o = &p.out;
  const size_t per_frame = (size_t)(o->sample_rate + o->fps - 1) / (size_t)o->fps;
  fc_sink *q =
      fc_sink_queued_create(&w->sink, o->width, o->height, 2 * per_frame, o->queue_frames, &rc);
  if (!q) goto out; /* took w over */
  *err = FC_OK;
  return q;
fail:
  if (w) whip_destroy(w);
out:
  *err = rc;
  return NULL;
}
