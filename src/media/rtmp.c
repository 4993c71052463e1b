/* The RTMP push output (media/rtmp.h): a session's frames to an RTMP server, as LiveTalking's
 * rtmp transport pushes its one session to nginx-rtmp or SRS for players to pull (FLV, HLS).
 *
 *   appsrc "v" (I420) → fcx264enc → h264parse ─────────────────────────┐
 *   appsrc "a" (S16LE mono) → audioconvert → audioresample → AAC → aacparse ┴→ flvmux → rtmp2sink
 *
 * Two threads, so that the session never waits for the network. The pacer's push goes to a
 * queued sink (sink.h) of queue_frames frames in front of this one: it copies the frame into
 * the ring and returns, and when the ring is full the new frame is dropped and counted. The
 * ring's thread pushes here, and this output does all its connection work on that thread: it
 * builds a pipeline per connection, watches it, tears it down and builds the next. A server
 * that is absent, slow to answer, stalled or gone can only hold up that thread, and even it
 * only for a teardown: every appsrc push is non-blocking.
 *
 * One pipeline per connection. rtmp2sink connects and publishes as soon as it starts (async
 * connect), before any media; a new connection needs an FLV header, the codecs' headers and a
 * key frame first anyway, which a fresh pipeline makes. The states (fc_sink_link):
 *   CONNECTING  the pipeline is up and rtmp2sink is connecting. Frames are dropped (counted):
 *               rtmp2sink would hold the first one until the server answers, and the stream
 *               is to start in sync at one frame. Connected when rtmp2sink's own statistics
 *               show bytes sent (polled every POLL_US while connecting only); a failure is
 *               the pipeline's error on the bus (refused, bad name, rejected publish); no
 *               answer within connect_timeout_ms (10 s) is a failure too.
 *   CONNECTED   frames are pushed. The connection is lost on an error on the bus (rtmp2sink
 *               posts one when the server closes or resets it), or when nothing has left
 *               the muxer for STALL_US although frames were pushed: a server that stopped
 *               reading (rtmp2sink waits while more than a few messages are queued, so the
 *               muxer stops and the appsrcs, leaky, drop their oldest).
 *   RETRYING    the pipeline is gone; the next attempt comes after a back-off of 1 s,
 *               doubling up to 30 s, back to 1 s once a connection was made.
 * The owner hears of a change (on_link, through fc_sink_retry: sink.h) when a connection is
 * made, when one is lost, and at the first failure after either: a server that is down for an
 * hour is one line, not 120.
 *
 * Timestamps. Each connection's stream starts at 0 with the first frame pushed on it (its
 * origin): picture `index` is stamped (index − origin)/fps, sample s (s − origin's first
 * sample − priming)/rate, on the session's own clock, never the wall clock. priming is the AAC
 * encoder's delay (FFmpeg's: 1024 samples of silence before the first real sample), which
 * FLV cannot signal: stamping audio that much early, and leaving out the first 1024 samples,
 * puts the decoded sound exactly on the pictures and starts both streams at 0 (the MP4 writer
 * does the same with an edit list). A frame without a picture (a still avatar at rest sends
 * one picture in five) repeats the last picture: players and servers expect a steady 25 fps
 * from an RTMP stream.
 *
 * Drops, in order: the ring in front (new frames, when this thread is behind: a teardown, a
 * slow encoder), frames while not connected, and the appsrcs' oldest (VIDEO_QUEUE_FRAMES
 * pictures, AUDIO_QUEUE_MS of sound) when the connection is slow. The first two are counted
 * as dropped frames; the last as in the live outputs, not at all (the stall check catches a
 * connection that stays slow).
 *
 * Threads: create and destroy on the owner's thread; push (and so every connection change)
 * on the ring's thread; stats and link from any thread (atomics; the retry's own lock for
 * the link; `lock` for the first error, which the bus sync handler writes from GStreamer's
 * threads). */
#include "media/rtmp.h"

#include "facecast/error.h"
#include "media/gst_common.h"
#include "media/live.h"
#include "media/x264_live.h"

#include <gst/app/gstappsrc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STALL_US (5 * G_TIME_SPAN_SECOND)
#define POLL_US (100 * G_TIME_SPAN_MILLISECOND)
/* Raw pictures appsrc holds before dropping its oldest (320 ms at 25 fps), and sound. */
#define VIDEO_QUEUE_FRAMES 8
#define AUDIO_QUEUE_MS 400
/* Samples per pooled audio buffer; the pacer's 640 fit in one. */
#define AUDIO_CHUNK_SAMPLES 1024
#define RTMP_CRF 23       /* x264's quality under the cap, as the live outputs' */
#define AAC_BITRATE 64000 /* mono speech */
#define EOS_WAIT_US (1 * G_TIME_SPAN_SECOND) /* for the last frames to leave at destroy */

typedef struct rtmp_out {
  fc_sink sink; /* this output; the queued sink in front of it is what create hands out */
  fc_rtmp_params p;
  char *url, *preset;
  GstVideoInfo vinfo;
  GstCaps *vcaps, *acaps;
  GstBufferPool *vpool, *apool;
  uint8_t *last; /* the last picture pushed, repeated for frames without one */
  int have_last;
  size_t pic_bytes;

  /* The connection: the ring's thread only. */
  GstElement *pipeline, *vsrc, *asrc, *rsink; /* elements owned by the pipeline */
  GstBus *bus;
  uint32_t priming;      /* the AAC encoder's delay, samples */
  int started;           /* the origin is set (a frame went out on this connection) */
  int64_t origin;        /* frame index stamped 0 on this connection */
  int64_t origin_sample; /* its first sample */
  int64_t next_sample;   /* the smallest sample accepted next */
  gint64 attempt_us, poll_us;
  fc_sink_retry retry; /* the link, its back-off and its reports (sink.h) */

  /* Any thread. */
  _Atomic gint64 progress_us; /* when data last left the muxer */
  _Atomic uint64_t pushed, dropped, bytes_out, encoded, keyframes;
  GMutex lock;            /* err */
  fc_gst_first_error err; /* the current pipeline's first error */
} rtmp_out;

/* ---- the URL ---- */

int fc_rtmp_check_url(const char *url) {
  const char *rest = NULL;
  if (url && g_str_has_prefix(url, "rtmp://")) rest = url + 7;
  if (url && g_str_has_prefix(url, "rtmps://")) rest = url + 8;
  if (!rest)
    return fc_error_set(FC_EINVAL, "push URL '%s': expected rtmp:// or rtmps://", url ? url : "");
  for (const char *c = url; *c; c++)
    if ((unsigned char)*c <= ' ' || *c == 0x7f)
      return fc_error_set(FC_EINVAL, "push URL: spaces or control characters in it");
  const char *app = strchr(rest, '/');
  const char *stream = app ? strrchr(app + 1, '/') : NULL;
  if (!app || app == rest || *rest == ':' || !stream || stream == app + 1 || !stream[1])
    return fc_error_set(FC_EINVAL, "push URL '%s': expected rtmp://HOST[:PORT]/APP/STREAM", url);
  return FC_OK;
}

/* ---- the connection's state ---- */

static GstBusSyncReply on_bus(GstBus *bus, GstMessage *msg, gpointer data) {
  rtmp_out *r = data;
  (void)bus;
  switch (GST_MESSAGE_TYPE(msg)) {
  case GST_MESSAGE_ERROR:
    fc_gst_record_bus_error(&r->lock, &r->err, msg, "rtmp push", NULL);
    return GST_BUS_PASS;
  case GST_MESSAGE_EOS: return GST_BUS_PASS; /* destroy waits for it */
  default:
    gst_message_unref(msg); /* nobody reads them: keep the bus empty */
    return GST_BUS_DROP;
  }
}

static GstPadProbeReturn on_muxed(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  rtmp_out *r = data;
  (void)pad;
  gsize n = 0;
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER)
    n = gst_buffer_get_size(GST_PAD_PROBE_INFO_BUFFER(info));
  else if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST)
    n = gst_buffer_list_calculate_size(GST_PAD_PROBE_INFO_BUFFER_LIST(info));
  atomic_fetch_add_explicit(&r->bytes_out, n, memory_order_relaxed);
  atomic_store_explicit(&r->progress_us, g_get_monotonic_time(), memory_order_relaxed);
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn on_encoded(GstPad *pad, GstPadProbeInfo *info, gpointer data) {
  rtmp_out *r = data;
  (void)pad;
  GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER(info);
  atomic_fetch_add_explicit(&r->encoded, 1, memory_order_relaxed);
  if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DELTA_UNIT))
    atomic_fetch_add_explicit(&r->keyframes, 1, memory_order_relaxed);
  return GST_PAD_PROBE_OK;
}

static void teardown(rtmp_out *r) {
  if (r->pipeline) {
    /* NULL unblocks rtmp2sink (waiting for the server) and joins the streaming threads, so
     * neither the bus handler nor a probe runs after it. */
    gst_element_set_state(r->pipeline, GST_STATE_NULL);
    if (r->bus) {
      gst_bus_set_sync_handler(r->bus, NULL, NULL, NULL);
      gst_object_unref(r->bus);
    }
    gst_object_unref(r->pipeline);
  }
  r->pipeline = r->vsrc = r->asrc = r->rsink = NULL;
  r->bus = NULL;
  r->started = 0;
  g_mutex_lock(&r->lock);
  memset(&r->err, 0, sizeof r->err);
  g_mutex_unlock(&r->lock);
}

/* A pad probe on element e's pad, or FC_EMEDIA. */
static int probe(GstElement *e, const char *pad, GstPadProbeType t, GstPadProbeCallback cb,
                 rtmp_out *r) {
  GstPad *p = gst_element_get_static_pad(e, pad);
  if (!p) return fc_error_set(FC_EMEDIA, "rtmp push: %s has no %s pad", GST_ELEMENT_NAME(e), pad);
  gst_pad_add_probe(p, t, cb, r, NULL);
  gst_object_unref(p);
  return 0;
}

/* Builds and starts the pipeline of one connection (rtmp2sink starts connecting). */
static int build(rtmp_out *r) {
  GstElement *venc = NULL, *vparse, *mux, *aconv, *ares, *aenc, *aparse;
  int rc;
  if (!(r->pipeline = gst_pipeline_new("fc-rtmp")))
    return fc_error_set(FC_EMEDIA, "could not create a GStreamer pipeline");
  const fc_sink_push_params *p = &r->p.out;
  const fc_x264_config xc = {.preset = p->x264_preset,
                             .threads = 1,
                             .keyint = 2 * p->fps,
                             .qp = p->video_qp,
                             .crf = RTMP_CRF,
                             .vbv_kbps = p->video_kbps};
  if (!(venc = fc_x264enc_new(&xc, &rc))) return rc;
  if (!gst_bin_add(GST_BIN(r->pipeline), venc)) {
    gst_object_unref(venc);
    return fc_error_set(FC_EMEDIA, "rtmp push: could not add the video encoder");
  }
  if ((rc = fc_gst_add_element(r->pipeline, "appsrc", "v", &r->vsrc)) ||
      (rc = fc_gst_add_element(r->pipeline, "h264parse", "vparse", &vparse)) ||
      (rc = fc_gst_add_element(r->pipeline, "appsrc", "a", &r->asrc)) ||
      (rc = fc_gst_add_element(r->pipeline, "audioconvert", "aconv", &aconv)) ||
      (rc = fc_gst_add_element(r->pipeline, "audioresample", "ares", &ares)) ||
      (rc = fc_gst_add_aac_encoder(r->pipeline, &aenc, &r->priming)) ||
      (rc = fc_gst_add_element(r->pipeline, "aacparse", "aparse", &aparse)) ||
      (rc = fc_gst_add_element(r->pipeline, "flvmux", "mux", &mux)) ||
      (rc = fc_gst_add_element(r->pipeline, "rtmp2sink", "rtmp", &r->rsink)))
    return rc;
  /* Non-blocking and leaky (the design note); our own timestamps. Not live: flvmux then
   * interleaves by timestamp alone, waiting for both inputs, which both get every frame. */
  g_object_set(r->vsrc, "caps", r->vcaps, "format", GST_FORMAT_TIME, "is-live", FALSE,
               "do-timestamp", FALSE, "block", FALSE, "max-buffers", (guint64)VIDEO_QUEUE_FRAMES,
               "max-bytes", (guint64)0, "emit-signals", FALSE, NULL);
  g_object_set(r->asrc, "caps", r->acaps, "format", GST_FORMAT_TIME, "is-live", FALSE,
               "do-timestamp", FALSE, "block", FALSE, "max-buffers", (guint64)0, "max-bytes",
               (guint64)0, "max-time", (guint64)AUDIO_QUEUE_MS * GST_MSECOND, "emit-signals", FALSE,
               NULL);
  if (!fc_gst_has_property(r->vsrc, "leaky-type")) /* 1.20+: else a full queue would grow */
    return fc_error_set(FC_EMEDIA, "appsrc has no leaky-type (GStreamer 1.20 or newer needed)");
  gst_util_set_object_arg(G_OBJECT(r->vsrc), "leaky-type", "downstream");
  gst_util_set_object_arg(G_OBJECT(r->asrc), "leaky-type", "downstream");
  if (fc_gst_has_property(aenc, "bitrate")) g_object_set(aenc, "bitrate", AAC_BITRATE, NULL);
  /* A live stream: no seeking back to write an index or the duration at the end. */
  g_object_set(mux, "streamable", TRUE, NULL);
  /* Out as soon as muxed: the pacer already paces; no preroll to wait for. */
  g_object_set(r->rsink, "location", r->url, "sync", FALSE, "async", FALSE, NULL);
  {
    GstElement *vchain[] = {r->vsrc, venc, vparse, mux, r->rsink};
    GstElement *achain[] = {r->asrc, aconv, ares, aenc, aparse, mux};
    if ((rc = fc_gst_link_chain(vchain, G_N_ELEMENTS(vchain))) ||
        (rc = fc_gst_link_chain(achain, G_N_ELEMENTS(achain))))
      return rc;
  }
  if ((rc = probe(mux, "src", GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_BUFFER_LIST, on_muxed,
                  r)) ||
      (rc = probe(venc, "src", GST_PAD_PROBE_TYPE_BUFFER, on_encoded, r)))
    return rc;
  r->bus = gst_pipeline_get_bus(GST_PIPELINE(r->pipeline));
  gst_bus_set_sync_handler(r->bus, on_bus, r, NULL);
  if (gst_element_set_state(r->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    rc = fc_gst_report_recorded(&r->lock, &r->err, FC_EMEDIA);
    return rc ? rc : fc_error_set(FC_EMEDIA, "rtmp push: the pipeline did not start");
  }
  return fc_gst_report_recorded(&r->lock, &r->err, FC_EMEDIA);
}

static void fail(rtmp_out *r, gint64 now, const char *why) {
  char msg[sizeof r->retry.link.error];
  g_strlcpy(msg, why, sizeof msg);
  teardown(r);
  fc_sink_retry_failed(&r->retry, now, msg);
}

static void attempt(rtmp_out *r, gint64 now) {
  fc_sink_retry_attempt(&r->retry);
  r->attempt_us = r->poll_us = now;
  int rc = build(r);
  if (rc) fail(r, now, fc_error_detail(rc));
}

/* Bytes rtmp2sink has written on its connection; 0 before it is made. */
static guint64 wire_bytes(rtmp_out *r) {
  GstStructure *st = NULL;
  guint64 n = 0;
  g_object_get(r->rsink, "stats", &st, NULL);
  if (st) {
    gst_structure_get_uint64(st, "out-bytes-total", &n);
    gst_structure_free(st);
  }
  return n;
}

/* Moves the connection on (see the states in the design note). */
static void step(rtmp_out *r, gint64 now) {
  if (r->pipeline) {
    g_mutex_lock(&r->lock);
    const int failed = r->err.code;
    char why[sizeof r->retry.link.error];
    g_strlcpy(why, r->err.msg, sizeof why);
    g_mutex_unlock(&r->lock);
    const fc_sink_link_state st = fc_sink_retry_state(&r->retry);
    if (failed) {
      fail(r, now, why);
    } else if (st == FC_SINK_LINK_CONNECTING && now - r->poll_us >= POLL_US) {
      r->poll_us = now;
      if (wire_bytes(r) > 0) {
        atomic_store_explicit(&r->progress_us, now, memory_order_relaxed);
        fc_sink_retry_connected(&r->retry);
      } else if (now - r->attempt_us > (gint64)r->p.out.connect_timeout_ms * 1000) {
        snprintf(why, sizeof why, "rtmp push: the server did not take the stream within %d ms",
                 r->p.out.connect_timeout_ms);
        fail(r, now, why);
      }
    } else if (st == FC_SINK_LINK_CONNECTED &&
               now - atomic_load_explicit(&r->progress_us, memory_order_relaxed) > STALL_US) {
      fail(r, now, "rtmp push: the server stopped taking the stream (nothing sent for 5 s)");
    }
  }
  if (!r->pipeline && fc_sink_retry_due(&r->retry, now)) attempt(r, now);
}

/* ---- pushing (the ring's thread) ---- */

static int push_video(rtmp_out *r, const uint8_t *i420, int64_t index) {
  GstBuffer *buf = NULL;
  if (gst_buffer_pool_acquire_buffer(r->vpool, &buf, NULL) != GST_FLOW_OK || !buf)
    return fc_error_set(FC_EMEDIA, "rtmp push: no video buffer from the pool");
  if (fc_gst_fill_i420(buf, &r->vinfo, i420)) {
    gst_buffer_unref(buf);
    return fc_error_set(FC_EMEDIA, "rtmp push: could not map a video buffer");
  }
  const guint64 k = (guint64)(index - r->origin), fps = (guint64)r->p.out.fps;
  GST_BUFFER_PTS(buf) = gst_util_uint64_scale(k, GST_SECOND, fps);
  GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(buf) = gst_util_uint64_scale(k + 1, GST_SECOND, fps) - GST_BUFFER_PTS(buf);
  /* Non-blocking: a full queue drops its oldest picture. An error is the pipeline's, which
   * the next step reads from the bus. */
  gst_app_src_push_buffer(GST_APP_SRC(r->vsrc), buf);
  return 0;
}

static int push_audio(rtmp_out *r, const int16_t *pcm, size_t n, int64_t first_sample) {
  const guint64 rate = (guint64)r->p.out.sample_rate;
  const int64_t zero = r->origin_sample + r->priming; /* the sample stamped 0 */
  size_t done = 0;
  if (first_sample < r->next_sample) return 0; /* overlaps what went out: not a clock */
  while (done < n) {
    size_t cnt = n - done < AUDIO_CHUNK_SAMPLES ? n - done : AUDIO_CHUNK_SAMPLES;
    int64_t s0 = first_sample + (int64_t)done;
    if (s0 + (int64_t)cnt <= zero) { /* the encoder's priming: left out (design note) */
      done += cnt;
      continue;
    }
    if (s0 < zero) {
      done += (size_t)(zero - s0), cnt -= (size_t)(zero - s0);
      s0 = zero;
    }
    GstBuffer *buf = NULL;
    if (gst_buffer_pool_acquire_buffer(r->apool, &buf, NULL) != GST_FLOW_OK || !buf)
      return fc_error_set(FC_EMEDIA, "rtmp push: no audio buffer from the pool");
    gst_buffer_fill(buf, 0, pcm + done, cnt * sizeof(int16_t));
    gst_buffer_set_size(buf, (gssize)(cnt * sizeof(int16_t)));
    const guint64 k = (guint64)(s0 - zero);
    GST_BUFFER_PTS(buf) = gst_util_uint64_scale(k, GST_SECOND, rate);
    GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION(buf) =
        gst_util_uint64_scale(k + cnt, GST_SECOND, rate) - GST_BUFFER_PTS(buf);
    /* A gap in the clock (frames dropped before us): let the encoder resync. */
    if (s0 > r->next_sample && r->next_sample > zero)
      GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
    gst_app_src_push_buffer(GST_APP_SRC(r->asrc), buf);
    r->next_sample = s0 + (int64_t)cnt;
    done += cnt;
  }
  return 0;
}

static int rtmp_push(void *self, const fc_sink_frame *f) {
  rtmp_out *r = self;
  atomic_fetch_add_explicit(&r->pushed, 1, memory_order_relaxed);
  if (f->i420) {
    memcpy(r->last, f->i420, r->pic_bytes);
    r->have_last = 1;
  }
  step(r, g_get_monotonic_time());
  const int up = fc_sink_retry_state(&r->retry) == FC_SINK_LINK_CONNECTED;
  if (!up || !r->have_last || (r->started && f->index < r->origin)) {
    atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
    return 0; /* the output's own policy: not an error for the pusher */
  }
  if (!r->started) {
    r->started = 1;
    r->origin = f->index;
    r->origin_sample = r->next_sample = f->first_sample;
  }
  int rc = push_video(r, r->last, f->index);
  if (!rc && f->n_samples) rc = push_audio(r, f->pcm, f->n_samples, f->first_sample);
  return rc;
}

static void rtmp_stats(void *self, fc_sink_stats *out) {
  rtmp_out *r = self;
  out->frames_pushed = atomic_load_explicit(&r->pushed, memory_order_relaxed);
  out->frames_dropped = atomic_load_explicit(&r->dropped, memory_order_relaxed);
  out->frames_encoded = atomic_load_explicit(&r->encoded, memory_order_relaxed);
  out->keyframes = atomic_load_explicit(&r->keyframes, memory_order_relaxed);
  out->bytes_out = atomic_load_explicit(&r->bytes_out, memory_order_relaxed);
}

static int rtmp_link(void *self, fc_sink_link *out) {
  fc_sink_retry_get(&((rtmp_out *)self)->retry, out);
  return FC_OK;
}

static void rtmp_destroy(void *self) {
  rtmp_out *r = self;
  if (!r) return;
  const int up = fc_sink_retry_state(&r->retry) == FC_SINK_LINK_CONNECTED;
  if (r->pipeline && up) {
    /* Let what is queued go out and the server close the stream cleanly (its recording
     * complete), for a moment at most: a stalled server is not waited for. */
    gst_app_src_end_of_stream(GST_APP_SRC(r->vsrc));
    gst_app_src_end_of_stream(GST_APP_SRC(r->asrc));
    GstMessage *m = gst_bus_timed_pop_filtered(r->bus, (GstClockTime)EOS_WAIT_US * 1000,
                                               GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
    if (m) gst_message_unref(m);
  }
  teardown(r);
  fc_gst_release_pool(&r->vpool);
  fc_gst_release_pool(&r->apool);
  if (r->vcaps) gst_caps_unref(r->vcaps);
  if (r->acaps) gst_caps_unref(r->acaps);
  g_mutex_clear(&r->lock);
  fc_sink_retry_clear(&r->retry);
  free(r->last);
  g_free(r->url);
  g_free(r->preset);
  free(r);
}

static const fc_sink_ops rtmp_ops = {.kind = "rtmp",
                                     .push = rtmp_push,
                                     .stats = rtmp_stats,
                                     .destroy = rtmp_destroy,
                                     .link = rtmp_link};

/* ---- creation ---- */

fc_sink *fc_rtmp_sink_create(const fc_rtmp_params *params, int *err) {
  int rc;
  rtmp_out *r = NULL;
  if (!params) {
    *err = fc_error_set(FC_EINVAL, "fc_rtmp_sink_create: no parameters");
    return NULL;
  }
  fc_rtmp_params p = *params;
  if ((rc = fc_rtmp_check_url(p.url)) || (rc = fc_sink_push_params_fill(&p.out, "rtmp push")))
    goto fail;
  /* Everything a connection needs, checked now rather than at the first attempt. */
  if ((rc = fc_gst_init()) || (rc = fc_gst_require("rtmp2sink")) ||
      (rc = fc_gst_require("flvmux")) || (rc = fc_gst_require("h264parse")) ||
      (rc = fc_gst_require("aacparse")))
    goto fail;
  if (!(r = calloc(1, sizeof *r))) {
    rc = fc_error_set(FC_ENOMEM, "rtmp push: out of memory");
    goto fail;
  }
  g_mutex_init(&r->lock);
  fc_sink_retry_init(&r->retry, p.out.on_link, p.out.user);
  r->sink = (fc_sink){&rtmp_ops, r};
  r->p = p;
  r->url = g_strdup(p.url);
  r->p.url = NULL;
  r->p.out.x264_preset = r->preset = g_strdup(p.out.x264_preset);
  r->pic_bytes = (size_t)p.out.width * p.out.height * 3 / 2;
  if (!(r->last = malloc(r->pic_bytes))) {
    rc = fc_error_set(FC_ENOMEM, "rtmp push: out of memory");
    goto fail;
  }
  if ((rc = fc_gst_raw_caps(p.out.width, p.out.height, p.out.fps, p.out.sample_rate, "rtmp push",
                            &r->vinfo, &r->vcaps, &r->acaps)))
    goto fail;
  r->vpool =
      fc_gst_make_pool(r->vcaps, (guint)GST_VIDEO_INFO_SIZE(&r->vinfo), VIDEO_QUEUE_FRAMES + 2);
  r->apool = fc_gst_make_pool(r->acaps, AUDIO_CHUNK_SAMPLES * sizeof(int16_t), 8);
  if (!r->vpool || !r->apool) {
    rc = fc_error_set(FC_EMEDIA, "rtmp push: could not set up buffer pools");
    goto fail;
  }
  const fc_sink_push_params *o = &p.out;
  const size_t per_frame = (size_t)(o->sample_rate + o->fps - 1) / (size_t)o->fps;
  fc_sink *q =
      fc_sink_queued_create(&r->sink, o->width, o->height, 2 * per_frame, o->queue_frames, &rc);
  if (!q) goto out; /* took r over */
  *err = FC_OK;
  return q;
fail:
  if (r) rtmp_destroy(r);
out:
  *err = rc;
  return NULL;
}
