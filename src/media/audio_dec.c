/* Streaming audio decoding through GStreamer (see audio_dec.h).
 *
 * The appsrc never blocks (its queue is unbounded; the producer is a network stream of a few
 * kB/s) and the appsink keeps what is decoded until taken; take() empties the appsink without
 * waiting until the input has ended. A pipeline error is found on the bus at the next take().
 * decodebin's typefinding needs a few kB before the first sample comes out: at 48 kbit/s MP3,
 * about a quarter of a second of audio. */
#include "media/audio_dec.h"
#include "facecast/audio.h"
#include "facecast/error.h"
#include "media/gst_common.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <stdlib.h>
#include <string.h>

struct fc_audio_dec {
  GstElement *pipe, *src, *sink;
  GstBus *bus;
  float *pcm;
  size_t cap;
  int ended, eos;
};

fc_audio_dec *fc_audio_dec_create(const char *caps, int *err) {
  *err = fc_gst_init();
  if (*err) return NULL;
  fc_audio_dec *d = g_new0(fc_audio_dec, 1);
  char *desc = g_strdup_printf(
      "appsrc name=src format=bytes stream-type=stream %s%s%s ! decodebin ! audioconvert ! "
      "audioresample ! audio/x-raw,format=F32LE,rate=%d,channels=1,layout=interleaved ! "
      "appsink name=sink sync=false",
      caps ? "caps=\"" : "", caps ? caps : "", caps ? "\"" : "", FC_SAMPLE_RATE);
  GError *e = NULL;
  d->pipe = gst_parse_launch(desc, &e);
  g_free(desc);
  if (!d->pipe || e) {
    *err = fc_error_set(FC_EMEDIA, "audio decoder: %s", e ? e->message : "cannot build it");
    g_clear_error(&e);
    fc_audio_dec_destroy(d);
    return NULL;
  }
  d->src = gst_bin_get_by_name(GST_BIN(d->pipe), "src");
  d->sink = gst_bin_get_by_name(GST_BIN(d->pipe), "sink");
  d->bus = gst_element_get_bus(d->pipe);
  g_object_set(d->src, "max-bytes", (guint64)0, NULL); /* unbounded: see the note above */
  if (gst_element_set_state(d->pipe, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    *err = fc_error_set(FC_EMEDIA, "audio decoder: the pipeline does not start");
    fc_audio_dec_destroy(d);
    return NULL;
  }
  return d;
}

void fc_audio_dec_destroy(fc_audio_dec *d) {
  if (!d) return;
  if (d->pipe) gst_element_set_state(d->pipe, GST_STATE_NULL);
  if (d->bus) gst_object_unref(d->bus);
  if (d->src) gst_object_unref(d->src);
  if (d->sink) gst_object_unref(d->sink);
  if (d->pipe) gst_object_unref(d->pipe);
  g_free(d->pcm);
  g_free(d);
}

int fc_audio_dec_push(fc_audio_dec *d, const void *data, size_t n) {
  if (d->ended) return fc_error_set(FC_EINVAL, "audio decoder: input after the end");
  if (!n) return FC_OK;
  GstBuffer *b = gst_buffer_new_memdup(data, n);
  if (gst_app_src_push_buffer(GST_APP_SRC(d->src), b) != GST_FLOW_OK)
    return fc_error_set(FC_EMEDIA, "audio decoder: the stream was refused (not audio?)");
  return FC_OK;
}

int fc_audio_dec_end(fc_audio_dec *d) {
  if (!d->ended) gst_app_src_end_of_stream(GST_APP_SRC(d->src));
  d->ended = 1;
  return FC_OK;
}

/* The first error on the bus, as a detail. */
static int bus_error(fc_audio_dec *d) {
  GstMessage *m = gst_bus_pop_filtered(d->bus, GST_MESSAGE_ERROR);
  if (!m) return FC_OK;
  GError *e = NULL;
  gst_message_parse_error(m, &e, NULL);
  int err = fc_error_set(FC_EMEDIA, "audio decoder: %s", e ? e->message : "error");
  g_clear_error(&e);
  gst_message_unref(m);
  return err;
}

static int append(fc_audio_dec *d, GstSample *s, size_t *n) {
  GstBuffer *b = gst_sample_get_buffer(s);
  GstMapInfo mi;
  if (!b || !gst_buffer_map(b, &mi, GST_MAP_READ)) return FC_OK;
  size_t k = mi.size / sizeof(float);
  if (*n + k > d->cap) {
    size_t c = d->cap ? d->cap : 4096;
    while (c < *n + k) c *= 2;
    d->pcm = g_realloc(d->pcm, c * sizeof(float));
    d->cap = c;
  }
  memcpy(d->pcm + *n, mi.data, k * sizeof(float));
  *n += k;
  gst_buffer_unmap(b, &mi);
  return FC_OK;
}

int fc_audio_dec_take(fc_audio_dec *d, int timeout_ms, const float **pcm, size_t *n, int *done) {
  *n = 0;
  *pcm = d->pcm;
  *done = d->eos;
  int err = bus_error(d);
  if (err) return err;
  GstSample *s;
  while ((s = gst_app_sink_try_pull_sample(GST_APP_SINK(d->sink), 0))) {
    append(d, s, n);
    gst_sample_unref(s);
  }
  if (d->ended && !d->eos) {
    gint64 until = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    while (!gst_app_sink_is_eos(GST_APP_SINK(d->sink))) {
      gint64 left = until - g_get_monotonic_time();
      if (left <= 0) break;
      /* short waits so that an error on the bus (no EOS will come) is seen */
      s = gst_app_sink_try_pull_sample(GST_APP_SINK(d->sink),
                                       (GstClockTime)MIN(left, 50000) * 1000);
      if (s) {
        append(d, s, n);
        gst_sample_unref(s);
      } else if ((err = bus_error(d))) {
        return err;
      }
    }
    if (gst_app_sink_is_eos(GST_APP_SINK(d->sink))) d->eos = 1;
    else if (!(err = bus_error(d)))
      err = fc_error_set(FC_EMEDIA, "audio decoder: not finished after %d ms", timeout_ms);
  }
  *pcm = d->pcm;
  *done = d->eos;
  return err;
}

int fc_audio_decode_file(const char *path, double max_seconds, fc_audio *out) {
  memset(out, 0, sizeof *out);
  int err = fc_gst_init();
  if (err) return err;
  char *q = g_strescape(path, NULL);
  char *desc = g_strdup_printf(
      "filesrc location=\"%s\" ! decodebin ! audioconvert ! audioresample ! "
      "audio/x-raw,format=F32LE,rate=%d,channels=1,layout=interleaved ! appsink name=sink "
      "sync=false",
      q, FC_SAMPLE_RATE);
  g_free(q);
  GError *e = NULL;
  GstElement *pipe = gst_parse_launch(desc, &e);
  g_free(desc);
  if (!pipe || e) {
    err = fc_error_set(FC_EMEDIA, "audio decoder: %s", e ? e->message : "cannot build it");
    g_clear_error(&e);
    if (pipe) gst_object_unref(pipe);
    return err;
  }
  GstElement *sink = gst_bin_get_by_name(GST_BIN(pipe), "sink");
  GstBus *bus = gst_element_get_bus(pipe);
  size_t cap = 0, max = (size_t)(max_seconds * FC_SAMPLE_RATE);
  gst_element_set_state(pipe, GST_STATE_PLAYING);
  for (;;) {
    GstSample *smp = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), 100 * GST_MSECOND);
    if (smp) {
      GstBuffer *b = gst_sample_get_buffer(smp);
      GstMapInfo mi;
      if (b && gst_buffer_map(b, &mi, GST_MAP_READ)) {
        size_t k = mi.size / sizeof(float);
        if (out->n + k > max) err = fc_error_set(FC_EFORMAT, "the audio is over %.0f s", max_seconds);
        if (!err && out->n + k > cap) {
          cap = MAX(cap * 2, out->n + k + 16000);
          float *grown = realloc(out->samples, cap * sizeof(float)); /* (fc_audio_free frees) */
          if (grown) out->samples = grown;
          else err = fc_error_set(FC_ENOMEM, "audio decoder: out of memory");
        }
        if (!err) memcpy(out->samples + out->n, mi.data, k * sizeof(float));
        if (!err) out->n += k;
        gst_buffer_unmap(b, &mi);
      }
      gst_sample_unref(smp);
      if (err) break;
      continue;
    }
    GstMessage *m = gst_bus_pop_filtered(bus, GST_MESSAGE_ERROR);
    if (m) {
      GError *ge = NULL;
      gst_message_parse_error(m, &ge, NULL);
      err = fc_error_set(FC_EFORMAT, "not audio GStreamer decodes here (WAV, MP3, M4A, Ogg, "
                                     "WebM, FLAC): %s", ge ? ge->message : "error");
      g_clear_error(&ge);
      gst_message_unref(m);
      break;
    }
    if (gst_app_sink_is_eos(GST_APP_SINK(sink))) break;
  }
  gst_element_set_state(pipe, GST_STATE_NULL);
  gst_object_unref(bus);
  gst_object_unref(sink);
  gst_object_unref(pipe);
  if (!err && !out->n) err = fc_error_set(FC_EFORMAT, "the file holds no audio");
  if (err) {
    free(out->samples);
    memset(out, 0, sizeof *out);
    return err;
  }
  out->rate = FC_SAMPLE_RATE;
  return FC_OK;
}
