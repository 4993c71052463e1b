/* The WebSocket stream's output (media/wsstream.h): a session's frames as messages for a front
 * end that decodes H.264 itself (WebCodecs, MediaCodec, VideoToolbox, FFmpeg) and plays raw PCM.
 *
 *   appsrc (I420) → fcx264enc → h264parse (SPS/PPS before each IDR) → byte-stream/au → appsink
 *
 * Why raw access units and PCM, not a container (fMP4, MPEG-TS): every platform's decoder takes
 * Annex B access units as they are, a 16-byte header is read in any language without a demuxer,
 * and each message stands alone, so the server may drop whole messages when a client falls
 * behind (down to the next key frame) without corrupting what follows. The sound is not encoded:
 * 32 kB/s of speech is small next to the picture, and it spares the client an Opus/AAC decoder.
 *
 * Threads, as the RTMP output's: the pacer pushes to a queued sink in front (it copies into a
 * ring and returns; a full ring drops the frame, counted); the ring's thread pushes here, into
 * a leaky non-blocking appsrc, and hands the frame's sound to on_message at once; the encoded
 * pictures come to on_message from appsink's streaming thread. Nothing here waits for the
 * client: the owner decides what to do with a message (queue or drop it) without blocking.
 *
 * Timestamps are the session's clock, never the wall clock: picture `index` is stamped
 * index/fps into the encoder (x264 here has no B-frames, so pictures leave in order with the
 * same stamps) and its index is read back from the stamp. A frame without a picture repeats the
 * last one: a player expects a steady frame rate, and x264 codes an unchanged picture in a few
 * bytes. A key frame comes every 2 s and on request (fc_wss_request_keyframe: a client that
 * joined late, lost messages, or asked). */
#include "media/wsstream.h"

#include "facecast/error.h"
#include "media/gst_common.h"
#include "media/live.h"
#include "media/x264_live.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/video/video.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define VIDEO_QUEUE_FRAMES 8 /* raw pictures appsrc holds before dropping its oldest */
#define WSS_CRF 23           /* x264's quality under the cap, as the live outputs' */
#define DEFAULT_QUEUE 25     /* 1 s of frames in the ring in front */
#define KEY_SECONDS 2

struct fc_wss {
  fc_sink sink; /* this output; the queued sink in front of it is what create hands out */
  fc_wss_params p;
  char *preset;
  GstVideoInfo vinfo;
  GstCaps *vcaps, *acaps;
  GstBufferPool *vpool;
  GstElement *pipeline, *vsrc; /* vsrc owned by the pipeline */
  GstPad *venc_src;            /* a reference: key frame requests go here */
  GstBus *bus;
  uint8_t *last; /* the last picture pushed, repeated for frames without one */
  int have_last;
  size_t pic_bytes;
  int64_t last_index; /* the last picture's index pushed (-1: none) */
  gint key_count;     /* the force-key-unit events' count field (atomic) */
  _Atomic uint64_t pushed, encoded, keyframes, bytes_out;
  GMutex lock; /* err */
  fc_gst_first_error err;
};

void fc_wss_header(uint8_t *h, int kind, int flags, uint32_t index, int64_t pts_us) {
  const uint64_t pts = (uint64_t)pts_us;
  h[0] = (uint8_t)kind;
  h[1] = (uint8_t)flags;
  h[2] = FC_WSS_HEADER_BYTES & 0xff;
  h[3] = FC_WSS_HEADER_BYTES >> 8;
  for (int i = 0; i < 4; i++) h[4 + i] = (uint8_t)(index >> (8 * i));
  for (int i = 0; i < 8; i++) h[8 + i] = (uint8_t)(pts >> (8 * i));
}

void fc_wss_request_keyframe(fc_wss *w) {
  if (!w || !w->venc_src) return;
  /* all-headers: SPS/PPS come with it (h264parse puts them before every IDR anyway).
   * GstVideoEncoder applies it to the next picture it encodes. */
  GstEvent *ev = gst_video_event_new_upstream_force_key_unit(
      GST_CLOCK_TIME_NONE, TRUE, (guint)g_atomic_int_add(&w->key_count, 1) + 1);
  gst_pad_send_event(w->venc_src, ev);
}

static GstBusSyncReply on_bus(GstBus *bus, GstMessage *msg, gpointer data) {
  fc_wss *w = data;
  (void)bus;
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR)
    fc_gst_record_bus_error(&w->lock, &w->err, msg, "WebSocket stream", NULL);
  gst_message_unref(msg); /* nobody reads the bus: keep it empty */
  return GST_BUS_DROP;
}

/* appsink's streaming thread: one access unit. */
static GstFlowReturn on_sample(GstAppSink *sink, gpointer data) {
  fc_wss *w = data;
  GstSample *smp = gst_app_sink_pull_sample(sink);
  if (!smp) return GST_FLOW_EOS;
  GstBuffer *b = gst_sample_get_buffer(smp);
  GstMapInfo m;
  if (b && GST_BUFFER_PTS_IS_VALID(b) && gst_buffer_map(b, &m, GST_MAP_READ)) {
    const int key = !GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DELTA_UNIT);
    const guint64 fps = (guint64)w->p.fps;
    /* the index back from its stamp (index/fps, rounded to the nanosecond on the way in) */
    const guint64 index = gst_util_uint64_scale_round(GST_BUFFER_PTS(b), fps, GST_SECOND);
    uint8_t hdr[FC_WSS_HEADER_BYTES];
    fc_wss_header(hdr, FC_WSS_VIDEO, key ? FC_WSS_KEY : 0, (uint32_t)index,
                  (int64_t)gst_util_uint64_scale(index, 1000000, fps));
    atomic_fetch_add_explicit(&w->encoded, 1, memory_order_relaxed);
    if (key) atomic_fetch_add_explicit(&w->keyframes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->bytes_out, m.size, memory_order_relaxed);
    w->p.on_message(w->p.user, hdr, m.data, m.size, FC_WSS_VIDEO, key ? FC_WSS_KEY : 0);
    gst_buffer_unmap(b, &m);
  }
  gst_sample_unref(smp);
  return GST_FLOW_OK;
}

static int build(fc_wss *w) {
  int rc;
  GstElement *venc, *vparse, *filter, *vsink;
  if (!(w->pipeline = gst_pipeline_new("wsstream")))
    return fc_error_set(FC_EMEDIA, "WebSocket stream: could not make a pipeline");
  const fc_x264_config xc = {.preset = w->p.x264_preset,
                             .threads = 1,
                             .keyint = KEY_SECONDS * w->p.fps,
                             .qp = w->p.video_qp,
                             .crf = WSS_CRF,
                             .vbv_kbps = w->p.video_kbps};
  if (!(venc = fc_x264enc_new(&xc, &rc))) return rc;
  if (!gst_bin_add(GST_BIN(w->pipeline), venc)) {
    gst_object_unref(venc);
    return fc_error_set(FC_EMEDIA, "WebSocket stream: could not add the video encoder");
  }
  if ((rc = fc_gst_add_element(w->pipeline, "appsrc", "v", &w->vsrc)) ||
      (rc = fc_gst_add_element(w->pipeline, "h264parse", "vparse", &vparse)) ||
      (rc = fc_gst_add_element(w->pipeline, "capsfilter", "au", &filter)) ||
      (rc = fc_gst_add_element(w->pipeline, "appsink", "out", &vsink)))
    return rc;
  g_object_set(w->vsrc, "caps", w->vcaps, "format", GST_FORMAT_TIME, "is-live", FALSE,
               "do-timestamp", FALSE, "block", FALSE, "max-buffers", (guint64)VIDEO_QUEUE_FRAMES,
               "max-bytes", (guint64)0, "emit-signals", FALSE, NULL);
  if (!fc_gst_has_property(w->vsrc, "leaky-type")) /* 1.20+: else a full queue would grow */
    return fc_error_set(FC_EMEDIA, "appsrc has no leaky-type (GStreamer 1.20 or newer needed)");
  gst_util_set_object_arg(G_OBJECT(w->vsrc), "leaky-type", "downstream");
  g_object_set(vparse, "config-interval", -1, NULL); /* SPS/PPS before every key frame */
  GstCaps *au = gst_caps_from_string("video/x-h264,stream-format=byte-stream,alignment=au");
  g_object_set(filter, "caps", au, NULL);
  gst_caps_unref(au);
  /* Out as soon as encoded: the pacer already paces. */
  g_object_set(vsink, "sync", FALSE, "async", FALSE, "emit-signals", FALSE, NULL);
  GstAppSinkCallbacks cb = {.new_sample = on_sample};
  gst_app_sink_set_callbacks(GST_APP_SINK(vsink), &cb, w, NULL);
  GstElement *chain[] = {w->vsrc, venc, vparse, filter, vsink};
  if ((rc = fc_gst_link_chain(chain, G_N_ELEMENTS(chain)))) return rc;
  if (!(w->venc_src = gst_element_get_static_pad(venc, "src")))
    return fc_error_set(FC_EMEDIA, "WebSocket stream: the encoder has no src pad");
  w->bus = gst_pipeline_get_bus(GST_PIPELINE(w->pipeline));
  gst_bus_set_sync_handler(w->bus, on_bus, w, NULL);
  if (gst_element_set_state(w->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    rc = fc_gst_report_recorded(&w->lock, &w->err, FC_EMEDIA);
    return rc ? rc : fc_error_set(FC_EMEDIA, "WebSocket stream: the pipeline did not start");
  }
  return fc_gst_report_recorded(&w->lock, &w->err, FC_EMEDIA);
}

/* ---- the sink (the ring's thread) ---- */

static int wss_push(void *self, const fc_sink_frame *f) {
  fc_wss *w = self;
  atomic_fetch_add_explicit(&w->pushed, 1, memory_order_relaxed);
  int rc = fc_gst_report_recorded(&w->lock, &w->err, FC_EMEDIA);
  if (rc) return rc;
  if (f->n_samples) {
    uint8_t hdr[FC_WSS_HEADER_BYTES];
    const int64_t pts = (int64_t)gst_util_uint64_scale((guint64)f->first_sample, 1000000,
                                                       (guint64)w->p.sample_rate);
    fc_wss_header(hdr, FC_WSS_AUDIO, 0, (uint32_t)f->index, pts);
#if G_BYTE_ORDER != G_LITTLE_ENDIAN
#error "the WebSocket stream sends the samples as they lie in memory: s16le"
#endif
    w->p.on_message(w->p.user, hdr, (const uint8_t *)f->pcm, f->n_samples * sizeof(int16_t),
                    FC_WSS_AUDIO, 0);
  }
  if (f->i420) {
    memcpy(w->last, f->i420, w->pic_bytes);
    w->have_last = 1;
  }
  if (!w->have_last || f->index <= w->last_index) return 0; /* nothing to show yet; not a clock */
  w->last_index = f->index;
  GstBuffer *buf = NULL;
  if (gst_buffer_pool_acquire_buffer(w->vpool, &buf, NULL) != GST_FLOW_OK || !buf)
    return fc_error_set(FC_EMEDIA, "WebSocket stream: no video buffer from the pool");
  if (fc_gst_fill_i420(buf, &w->vinfo, w->last)) {
    gst_buffer_unref(buf);
    return fc_error_set(FC_EMEDIA, "WebSocket stream: could not map a video buffer");
  }
  const guint64 k = (guint64)f->index, fps = (guint64)w->p.fps;
  GST_BUFFER_PTS(buf) = gst_util_uint64_scale(k, GST_SECOND, fps);
  GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(buf) = gst_util_uint64_scale(k + 1, GST_SECOND, fps) - GST_BUFFER_PTS(buf);
  /* Non-blocking: a full queue drops its oldest picture. */
  gst_app_src_push_buffer(GST_APP_SRC(w->vsrc), buf);
  return 0;
}

static void wss_stats(void *self, fc_sink_stats *out) {
  fc_wss *w = self;
  out->frames_pushed = atomic_load_explicit(&w->pushed, memory_order_relaxed);
  out->frames_encoded = atomic_load_explicit(&w->encoded, memory_order_relaxed);
  out->keyframes = atomic_load_explicit(&w->keyframes, memory_order_relaxed);
  out->bytes_out = atomic_load_explicit(&w->bytes_out, memory_order_relaxed);
}

static void wss_destroy(void *self) {
  fc_wss *w = self;
  if (!w) return;
  if (w->pipeline) {
    /* NULL joins the streaming threads: on_sample does not run after it */
    gst_element_set_state(w->pipeline, GST_STATE_NULL);
    if (w->bus) {
      gst_bus_set_sync_handler(w->bus, NULL, NULL, NULL);
      gst_object_unref(w->bus);
    }
    gst_object_unref(w->pipeline);
  }
  if (w->venc_src) gst_object_unref(w->venc_src);
  fc_gst_release_pool(&w->vpool);
  if (w->vcaps) gst_caps_unref(w->vcaps);
  if (w->acaps) gst_caps_unref(w->acaps);
  g_mutex_clear(&w->lock);
  free(w->last);
  g_free(w->preset);
  free(w);
}

static const fc_sink_ops wss_ops = {
    .kind = "wsstream", .push = wss_push, .stats = wss_stats, .destroy = wss_destroy};

fc_sink *fc_wss_sink_create(const fc_wss_params *params, fc_wss **out, int *err) {
  int rc;
  fc_wss *w = NULL;
  if (!params || !out || !params->on_message) {
    *err = fc_error_set(FC_EINVAL, "fc_wss_sink_create: no parameters or no on_message");
    return NULL;
  }
  fc_wss_params p = *params;
  if (!p.fps) p.fps = 25;
  if (!p.sample_rate) p.sample_rate = 16000;
  if (!p.video_kbps) p.video_kbps = 1500;
  if (!p.queue_frames) p.queue_frames = DEFAULT_QUEUE;
  if (!p.x264_preset) p.x264_preset = FC_LIVE_X264_PRESET;
  if (p.width <= 0 || p.height <= 0 || (p.width | p.height) & 1 || p.width > 8192 ||
      p.height > 8192 || p.fps < 1 || p.fps > 240 || p.sample_rate < 8000 ||
      p.sample_rate > 192000 || p.video_kbps < 1 || p.video_kbps > 100000 || p.video_qp < 0 ||
      p.video_qp > 51 || p.queue_frames < 1 || p.queue_frames > 1000) {
    rc = fc_error_set(FC_EINVAL,
                      "WebSocket stream: invalid parameters (%dx%d, fps %d, sample rate %d, "
                      "%d kbit/s, QP %d, queue %d)",
                      p.width, p.height, p.fps, p.sample_rate, p.video_kbps, p.video_qp,
                      p.queue_frames);
    goto fail;
  }
  if ((rc = fc_live_check_preset(p.x264_preset))) goto fail;
  if ((rc = fc_gst_init()) || (rc = fc_gst_require("h264parse")) || (rc = fc_gst_require("appsink"))) goto fail;
  if (!(w = calloc(1, sizeof *w))) {
    rc = fc_error_set(FC_ENOMEM, "WebSocket stream: out of memory");
    goto fail;
  }
  g_mutex_init(&w->lock);
  w->sink = (fc_sink){&wss_ops, w};
  w->p = p;
  w->p.x264_preset = w->preset = g_strdup(p.x264_preset);
  w->last_index = -1;
  w->pic_bytes = (size_t)p.width * p.height * 3 / 2;
  if (!(w->last = malloc(w->pic_bytes))) {
    rc = fc_error_set(FC_ENOMEM, "WebSocket stream: out of memory");
    goto fail;
  }
  if ((rc = fc_gst_raw_caps(p.width, p.height, p.fps, p.sample_rate, "WebSocket stream",
                            &w->vinfo, &w->vcaps, &w->acaps)))
    goto fail;
  w->vpool =
      fc_gst_make_pool(w->vcaps, (guint)GST_VIDEO_INFO_SIZE(&w->vinfo), VIDEO_QUEUE_FRAMES + 2);
  if (!w->vpool) {
    rc = fc_error_set(FC_EMEDIA, "WebSocket stream: could not set up a buffer pool");
    goto fail;
  }
  if ((rc = build(w))) goto fail;
  const size_t per_frame = (size_t)(p.sample_rate + p.fps - 1) / (size_t)p.fps;
  fc_sink *q =
      fc_sink_queued_create(&w->sink, p.width, p.height, 2 * per_frame, p.queue_frames, &rc);
  if (!q) goto out; /* took w over */
  *out = w;
  *err = FC_OK;
  return q;
fail:
  if (w) wss_destroy(w);
out:
  *err = rc;
  return NULL;
}
