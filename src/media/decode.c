/* Media in (see decode.h): filesrc ! decodebin, and for each stream decodebin exposes a branch
 * made when its pad appears:
 *   video: queue ! videoconvert ! videoscale ! videorate ! RGB 25/1 [w×h] ! appsink (pulled)
 *   audio: queue ! audioconvert ! audioresample ! F32LE 16 kHz mono ! appsink (callback)
 * The video appsink is pulled by the caller, 4 buffers deep, which throttles decoding; the audio
 * appsink appends each buffer to a growing array from the streaming thread, so the two
 * branches never wait on each other (a demuxer feeding both would otherwise stall when the
 * pulled branch is full and the other is not drained). Only the first video and the first
 * audio stream are used; any further stream is sent to a fakesink. */
#include "media/decode.h"
#include "facecast/error.h"
#include "media/gst_common.h"

#include <gst/app/gstappsink.h>
#include <gst/audio/audio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fc_decoder {
  GstElement *pipe;
  GstElement *vsink; /* NULL until a video pad appeared */
  int max_w, max_h, w, h;
  int have_audio, eof;
  GMutex lock; /* guards audio and fe */
  float *audio;
  size_t n_audio, cap_audio;
  int audio_oom;
  fc_gst_first_error fe;
  char path[256];
};

/* Target size: the source scaled down to fit max_w×max_h (0 = no limit), even sides. */
static void fit(int sw, int sh, int max_w, int max_h, int *w, int *h) {
  double s = 1;
  if (max_w > 0 && sw > max_w) s = (double)max_w / sw;
  if (max_h > 0 && sh * s > max_h) s = (double)max_h / sh;
  *w = ((int)(sw * s + 0.5)) & ~1;
  *h = ((int)(sh * s + 0.5)) & ~1;
  if (*w < 2) *w = 2;
  if (*h < 2) *h = 2;
}

static GstFlowReturn on_audio(GstAppSink *sink, gpointer user) {
  fc_decoder *d = user;
  GstSample *s = gst_app_sink_pull_sample(sink);
  if (!s) return GST_FLOW_OK;
  GstBuffer *b = gst_sample_get_buffer(s);
  GstMapInfo mi;
  if (b && gst_buffer_map(b, &mi, GST_MAP_READ)) {
    size_t n = mi.size / sizeof(float);
    g_mutex_lock(&d->lock);
    if (d->n_audio + n > d->cap_audio && !d->audio_oom) {
      size_t cap = d->cap_audio ? d->cap_audio : 16000 * 8;
      while (cap < d->n_audio + n) cap *= 2;
      float *a = realloc(d->audio, cap * sizeof(float));
      if (a) d->audio = a, d->cap_audio = cap;
      else d->audio_oom = 1;
    }
    if (!d->audio_oom) {
      memcpy(d->audio + d->n_audio, mi.data, n * sizeof(float));
      d->n_audio += n;
    }
    g_mutex_unlock(&d->lock);
    gst_buffer_unmap(b, &mi);
  }
  gst_sample_unref(s);
  return GST_FLOW_OK;
}

/* Adds factories[0..n) to the pipeline, links them in a row and to the decodebin pad. */
static int add_branch(fc_decoder *d, GstPad *pad, const char *const *factories, int n,
                      GstElement **el) {
  for (int i = 0; i < n; i++) {
    int err = fc_gst_add_element(d->pipe, factories[i], NULL, &el[i]);
    if (err) return err;
  }
  int err = fc_gst_link_chain(el, (size_t)n);
  if (err) return err;
  for (int i = n - 1; i >= 0; i--) gst_element_sync_state_with_parent(el[i]);
  GstPad *sinkpad = gst_element_get_static_pad(el[0], "sink");
  GstPadLinkReturn lr = gst_pad_link(pad, sinkpad);
  gst_object_unref(sinkpad);
  return lr == GST_PAD_LINK_OK ? FC_OK : fc_error_set(FC_EMEDIA, "%s: could not link a decoded stream", d->path);
}

static void on_pad(GstElement *dbin, GstPad *pad, gpointer user) {
  fc_decoder *d = user;
  GstCaps *caps = gst_pad_get_current_caps(pad);
  if (!caps) caps = gst_pad_query_caps(pad, NULL);
  const GstStructure *st = caps && gst_caps_get_size(caps) ? gst_caps_get_structure(caps, 0) : NULL;
  const char *name = st ? gst_structure_get_name(st) : "";
  GstElement *el[7] = {0};
  int err = FC_OK;
  if (g_str_has_prefix(name, "video/") && !d->vsink) {
    int sw = 0, sh = 0;
    if (!gst_structure_get_int(st, "width", &sw) || !gst_structure_get_int(st, "height", &sh) ||
        sw <= 0 || sh <= 0) {
      err = fc_error_set(FC_EMEDIA, "%s: the video stream has no frame size", d->path);
    } else {
      fit(sw, sh, d->max_w, d->max_h, &d->w, &d->h);
      static const char *const f[] = {"queue", "videoconvert", "videoscale", "videorate",
                                      "capsfilter", "appsink"};
      if (!(err = add_branch(d, pad, f, 6, el))) {
        GstCaps *want = gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, "RGB",
                                            "width", G_TYPE_INT, d->w, "height", G_TYPE_INT, d->h,
                                            "pixel-aspect-ratio", GST_TYPE_FRACTION, 1, 1,
                                            "framerate", GST_TYPE_FRACTION, FC_FPS, 1, NULL);
        g_object_set(el[4], "caps", want, NULL);
        gst_caps_unref(want);
        g_object_set(el[5], "max-buffers", 4, "sync", FALSE, NULL);
        d->vsink = el[5];
      }
    }
  } else if (g_str_has_prefix(name, "audio/") && !d->have_audio) {
    static const char *const f[] = {"queue", "audioconvert", "audioresample", "capsfilter",
                                    "appsink"};
    if (!(err = add_branch(d, pad, f, 5, el))) {
      GstCaps *want = gst_caps_new_simple("audio/x-raw", "format", G_TYPE_STRING, "F32LE",
                                          "rate", G_TYPE_INT, FC_SAMPLE_RATE, "channels",
                                          G_TYPE_INT, 1, "layout", G_TYPE_STRING, "interleaved",
                                          NULL);
      g_object_set(el[3], "caps", want, NULL);
      gst_caps_unref(want);
      GstAppSinkCallbacks cb = {.new_sample = on_audio};
      g_object_set(el[4], "sync", FALSE, NULL);
      gst_app_sink_set_callbacks(GST_APP_SINK(el[4]), &cb, d, NULL);
      d->have_audio = 1;
    }
  } else {
    static const char *const f[] = {"fakesink"};
    err = add_branch(d, pad, f, 1, el);
    if (!err) g_object_set(el[0], "sync", FALSE, "async", FALSE, NULL);
  }
  if (caps) gst_caps_unref(caps);
  if (err) { /* keep the first problem for the reader thread */
    g_mutex_lock(&d->lock);
    if (!d->fe.code) {
      d->fe.code = err;
      snprintf(d->fe.msg, sizeof d->fe.msg, "%s", fc_error_detail(err));
    }
    g_mutex_unlock(&d->lock);
  }
  (void)dbin;
}

/* A decoding error is the input's fault (exit 2, HTTP 4xx) unless GStreamer says otherwise:
 * an unrecognised, corrupt or unsupported stream, or a file that cannot be read. */
static int input_error_code(const GError *e) {
  if (!e) return FC_EMEDIA;
  if (e->domain == GST_STREAM_ERROR)
    return e->code == GST_STREAM_ERROR_CODEC_NOT_FOUND || e->code == GST_STREAM_ERROR_NOT_IMPLEMENTED
               ? FC_EUNSUPPORTED
               : FC_EFORMAT;
  if (e->domain == GST_RESOURCE_ERROR)
    return e->code == GST_RESOURCE_ERROR_NOT_FOUND ? FC_ENOTFOUND : FC_EIO;
  return FC_EMEDIA;
}

static GstBusSyncReply on_bus(GstBus *bus, GstMessage *msg, gpointer user) {
  fc_decoder *d = user;
  if (GST_MESSAGE_TYPE(msg) == GST_MESSAGE_ERROR)
    fc_gst_record_bus_error(&d->lock, &d->fe, msg, d->path, input_error_code);
  (void)bus;
  return GST_BUS_PASS;
}

/* The recorded pipeline error, or fallback. */
static int failure(fc_decoder *d, int fallback) {
  int err = fc_gst_report_recorded(&d->lock, &d->fe, 0);
  return err ? err : fallback;
}

fc_decoder *fc_decoder_open(const char *path, int max_w, int max_h, int *w, int *h, int *errp) {
  int err;
  fc_decoder *d = NULL;
  if (!path || max_w < 0 || max_h < 0) {
    err = fc_error_set(FC_EINVAL, "decoder: bad arguments");
    goto fail;
  }
  if (access(path, R_OK) != 0) {
    err = fc_error_set(FC_ENOTFOUND, "%s: cannot read the file", path);
    goto fail;
  }
  if ((err = fc_gst_init())) goto fail;
  if (!(d = calloc(1, sizeof *d))) {
    err = fc_error_set(FC_ENOMEM, "out of memory");
    goto fail;
  }
  g_mutex_init(&d->lock);
  d->max_w = max_w, d->max_h = max_h;
  snprintf(d->path, sizeof d->path, "%s", path);
  if (!(d->pipe = gst_pipeline_new("decode"))) {
    err = fc_error_set(FC_EMEDIA, "%s: cannot make a pipeline", path);
    goto fail;
  }
  GstBus *bus = gst_element_get_bus(d->pipe);
  gst_bus_set_sync_handler(bus, on_bus, d, NULL);
  gst_object_unref(bus);
  GstElement *chain[2];
  if ((err = fc_gst_add_element(d->pipe, "filesrc", NULL, &chain[0])) ||
      (err = fc_gst_add_element(d->pipe, "decodebin", NULL, &chain[1])) ||
      (err = fc_gst_link_chain(chain, 2)))
    goto fail;
  g_object_set(chain[0], "location", path, NULL);
  g_signal_connect(chain[1], "pad-added", G_CALLBACK(on_pad), d);
  gst_element_set_state(d->pipe, GST_STATE_PAUSED);
  GstStateChangeReturn sr = gst_element_get_state(d->pipe, NULL, NULL, 20 * GST_SECOND);
  if (sr == GST_STATE_CHANGE_FAILURE || d->fe.code) {
    err = failure(d, fc_error_set(FC_EFORMAT, "%s: not a media file GStreamer can decode", path));
    goto fail;
  }
  if (sr == GST_STATE_CHANGE_ASYNC) {
    err = fc_error_set(FC_EMEDIA, "%s: decoding did not start within 20 s", path);
    goto fail;
  }
  if (!d->vsink) {
    err = fc_error_set(FC_EFORMAT, "%s: no video stream", path);
    goto fail;
  }
  if (gst_element_set_state(d->pipe, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    err = failure(d, fc_error_set(FC_EMEDIA, "%s: cannot start decoding", path));
    goto fail;
  }
  if (w) *w = d->w;
  if (h) *h = d->h;
  if (errp) *errp = FC_OK;
  return d;
fail:
  fc_decoder_close(d);
  if (errp) *errp = err;
  return NULL;
}

int fc_decoder_next(fc_decoder *d, fc_image *out) {
  if (!d || !out || out->w != d->w || out->h != d->h)
    return fc_error_set(FC_EINVAL, "decoder: output image must be %dx%d", d ? d->w : 0, d ? d->h : 0);
  if (d->eof) return FC_EEOF;
  GstSample *s = gst_app_sink_try_pull_sample(GST_APP_SINK(d->vsink), 30 * GST_SECOND);
  if (!s) {
    if (gst_app_sink_is_eos(GST_APP_SINK(d->vsink)) && !d->fe.code) {
      d->eof = 1;
      return FC_EEOF;
    }
    return failure(d, fc_error_set(FC_EMEDIA, "%s: decoding stalled", d->path));
  }
  GstBuffer *b = gst_sample_get_buffer(s);
  GstVideoInfo info;
  GstVideoFrame vf;
  int err = FC_OK;
  if (!b || !gst_video_info_from_caps(&info, gst_sample_get_caps(s)) ||
      !gst_video_frame_map(&vf, &info, b, GST_MAP_READ)) {
    err = fc_error_set(FC_EMEDIA, "%s: unreadable decoded frame", d->path);
  } else {
    const uint8_t *src = GST_VIDEO_FRAME_PLANE_DATA(&vf, 0);
    int stride = GST_VIDEO_FRAME_PLANE_STRIDE(&vf, 0);
    for (int y = 0; y < d->h; y++)
      memcpy(out->rgb + (size_t)y * out->stride, src + (size_t)y * stride, (size_t)d->w * 3);
    gst_video_frame_unmap(&vf);
  }
  gst_sample_unref(s);
  return err;
}

int fc_decoder_audio(fc_decoder *d, fc_audio *out) {
  if (!d || !out) return fc_error_set(FC_EINVAL, "decoder: bad arguments");
  memset(out, 0, sizeof *out);
  out->rate = FC_SAMPLE_RATE;
  g_mutex_lock(&d->lock);
  int oom = d->audio_oom;
  out->samples = d->audio, out->n = d->n_audio;
  d->audio = NULL, d->n_audio = d->cap_audio = 0;
  g_mutex_unlock(&d->lock);
  if (oom) {
    fc_audio_free(out);
    return fc_error_set(FC_ENOMEM, "%s: out of memory for the audio track", d->path);
  }
  return FC_OK;
}

double fc_decoder_duration(const fc_decoder *d) {
  gint64 ns = -1;
  if (!d || !gst_element_query_duration(d->pipe, GST_FORMAT_TIME, &ns) || ns < 0) return -1;
  return ns / 1e9;
}

void fc_decoder_close(fc_decoder *d) {
  if (!d) return;
  if (d->pipe) {
    gst_element_set_state(d->pipe, GST_STATE_NULL);
    gst_object_unref(d->pipe);
  }
  free(d->audio);
  g_mutex_clear(&d->lock);
  free(d);
}
