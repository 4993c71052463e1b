/* MP4 writer (include/facecast/mp4.h): one GStreamer pipeline per file,
 *
 *   appsrc "v" (I420) → x264enc [→ h264parse if installed] → queue ───────────┐
 *   appsrc "a" (S16LE mono) → audiorate → audioconvert → audioresample → AAC enc
 *                                                               → aacparse ┴→ mp4mux
 *                                                                                → filesink
 *
 * Timestamps come only from the caller's clock: video frame i is stamped i/fps and audio sample s
 * is stamped s/sample_rate (gst_util_uint64_scale, so long renders do not drift by rounding).
 * A caller may skip frames (the session recorder drops a frame, picture and audio, when it
 * falls behind): the picture before the gap is simply shown longer, but the AAC encoder numbers
 * its samples consecutively, so without audiorate, which turns the gap into silence, every
 * later sample would play early by the gap's length (a 60-minute soak drifted 136 ms that way).
 * After the file is complete, the audio track's edit list is patched to skip the AAC encoder's
 * priming samples (see "AAC priming" below), without which audio would play 64 ms late.
 *
 * Buffer ownership. push_* copy the caller's data into a buffer taken from a GstBufferPool and
 * hand that buffer to appsrc (gst_app_src_push_buffer takes it); the caller keeps its memory.
 * Buffers go back to their pool when the encoders are done with them, so after warm-up no frame
 * costs an allocation. The video pool has no upper bound on purpose: x264enc keeps its input
 * frames until it has encoded them (lookahead, B-frames, frame threads), and a bounded pool
 * would block acquire() on frames only more input can free, i.e. deadlock. It grows to the
 * encoder latency plus the appsrc queue and then stays there. Audio is pooled the same way in
 * chunks of AUDIO_CHUNK_SAMPLES (a larger push is split, a smaller one uses part of a buffer).
 *
 * Backpressure. Both appsrcs have block=true and a byte bound, so push_* block while the
 * encoders are behind and memory stays flat. mp4mux interleaves by time: it waits until it has
 * data from both inputs, so one stream can only run ahead of the other as far as the buffering
 * on its own path. The raw-video appsrc holds only VIDEO_QUEUE_FRAMES frames (large buffers);
 * the skew room is where data is small: AUDIO_QUEUE_SECONDS of raw audio in its appsrc, and
 * VIDEO_SKEW_SECONDS of *encoded* video in the queue before mp4mux. So audio and video may be
 * pushed up to about a minute apart in either order (the renderer interleaves them every
 * frame); a caller that pushes more than that of one stream before the other blocks for ever,
 * because mp4mux is waiting for the stream nobody is pushing. A file with video but no audio
 * works as long as it is no longer than VIDEO_SKEW_SECONDS.
 *
 * Errors. A bus sync handler runs in whatever thread posts a message: it records the first
 * ERROR (under a mutex, since it is not the producer's thread) and sends end-of-stream into
 * both appsrcs, which wakes a producer blocked in push (appsrc then answers GST_FLOW_EOS), so a
 * failed pipeline turns into an error return, never a hang. The handler drops every other
 * message except EOS, so the bus does not accumulate messages nobody reads. The detail is
 * copied into the producer thread's fc_error_set() by the call that reports it.
 *
 * Everything GObject/GStreamer stays in src/media: this file, and gst_common.c for the
 * plumbing it shares with live.c (initialisation, making and linking elements, x264's preset,
 * buffer pools, the first-error slot). */
#include "facecast/mp4.h"

#include "facecast/error.h"
#include "media/gst_common.h"
#include "media/mp4_coded.h"
#include "media/sink.h"

#include <gst/app/gstappsrc.h>
#include <gst/audio/audio.h>
#include <gst/gst.h>
#include <gst/video/video.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Video frames appsrc may hold before push_video blocks; the encoder's own lookahead comes on
 * top, so a small number is enough to keep x264 busy. */
#define VIDEO_QUEUE_FRAMES 4
/* Seconds of audio appsrc may hold (32 KB/s at 16 kHz, so cheap); see the backpressure note. */
#define AUDIO_QUEUE_SECONDS 60
/* Seconds of encoded video held before mp4mux (about 15 MB at 2 Mbit/s); same note. */
#define VIDEO_SKEW_SECONDS 60
/* Samples per pooled audio buffer (one AAC frame); a larger push is split into several, a
 * smaller one (the renderer's 640) uses part of one. Small, because a buffer costs its full
 * capacity in memory while appsrc's byte bound counts only the bytes used. */
#define AUDIO_CHUNK_SAMPLES 1024
/* How long finish() waits for the drain (only the encoders' latency is left to encode). */
#define FINISH_TIMEOUT_S 60
/* AAC bit rate for mono speech. */
#define AAC_BITRATE 64000
/* Bytes of encoded video appsrc may hold in the coded mode (mp4_coded.h). */
#define CODED_QUEUE_BYTES (4u << 20)

enum { W_RUNNING, W_FINISHED, W_FAILED };

struct fc_mp4_writer {
  char *path;
  fc_mp4_params p;
  GstElement *pipeline;
  GstElement *vsrc, *asrc; /* owned by the pipeline */
  GstBus *bus;
  int sync_handler_set;
  GstBufferPool *vpool, *apool;
  GstVideoInfo vinfo;
  int state;
  int64_t next_index;  /* the smallest video index accepted next */
  int64_t next_sample; /* the smallest audio sample accepted next */
  int64_t frames;      /* video frames pushed */
  uint64_t sink_frames; /* frames pushed through the sink */
  fc_sink sink;         /* this writer as an output (sink.h) */
  uint32_t aac_priming; /* encoder delay in samples, trimmed by an edit list; 0 = unknown */
  int coded;            /* video arrives encoded (mp4_coded.h): no encoder, no pool */

  /* Written by the bus sync handler from streaming threads, read by the producer. */
  GMutex lock;
  fc_gst_first_error err; /* under lock */
};

/* ---- as an output (sink.h) ---- */

/* A frame without a picture leaves the one before it up longer (mp4mux keeps each sample's
 * duration); its audio goes in as usual. */
static int sink_push(void *self, const fc_sink_frame *f) {
  fc_mp4_writer *w = self;
  int err = f->i420 ? fc_mp4_writer_push_video(w, f->i420, f->index) : FC_OK;
  if (!err && f->n_samples) err = fc_mp4_writer_push_audio(w, f->pcm, f->n_samples, f->first_sample);
  if (!err) __atomic_store_n(&w->sink_frames, w->sink_frames + 1, __ATOMIC_RELAXED);
  return err;
}

static void sink_stats(void *self, fc_sink_stats *out) {
  /* The pusher's own count: read from other threads without a lock, one aligned word. */
  out->frames_pushed = __atomic_load_n(&((fc_mp4_writer *)self)->sink_frames, __ATOMIC_RELAXED);
}

static int sink_finish(void *self) { return fc_mp4_writer_finish(self); }
static void sink_destroy(void *self) { fc_mp4_writer_destroy(self); }

static const fc_sink_ops mp4_sink_ops = {.kind = "mp4", .push = sink_push, .stats = sink_stats,
                                         .finish = sink_finish, .destroy = sink_destroy};

fc_sink *fc_mp4_writer_sink(fc_mp4_writer *w) { return w ? &w->sink : NULL; }

/* ---- errors ---- */

/* Resource errors about the output file are I/O errors to our callers; the rest (negotiation,
 * encoder, muxer) are pipeline errors. */
static int code_for_gerror(const GError *e) {
  if (e && e->domain == GST_RESOURCE_ERROR) {
    switch (e->code) {
    case GST_RESOURCE_ERROR_NOT_FOUND:
    case GST_RESOURCE_ERROR_OPEN_WRITE:
    case GST_RESOURCE_ERROR_OPEN_READ_WRITE:
    case GST_RESOURCE_ERROR_WRITE:
    case GST_RESOURCE_ERROR_CLOSE:
    case GST_RESOURCE_ERROR_SEEK:
    case GST_RESOURCE_ERROR_SYNC:
    case GST_RESOURCE_ERROR_NO_SPACE_LEFT:
    case GST_RESOURCE_ERROR_NOT_AUTHORIZED: return FC_EIO;
    default: break;
    }
  }
  return FC_EMEDIA;
}

/* Copies a recorded pipeline error into this thread's detail; returns its code, or 0 if none.
 * as_code overrides the code when nonzero (push_* report FC_EMEDIA whatever the cause). */
static int report_recorded(fc_mp4_writer *w, int as_code) {
  return fc_gst_report_recorded(&w->lock, &w->err, as_code);
}

static GstBusSyncReply on_bus_message(GstBus *bus, GstMessage *msg, gpointer data) {
  fc_mp4_writer *w = data;
  switch (GST_MESSAGE_TYPE(msg)) {
  case GST_MESSAGE_ERROR: {
    /* The first error only, as "<path>: <element>: <message> (<reason>)". */
    fc_gst_record_bus_error(&w->lock, &w->err, msg, w->path, code_for_gerror);
    /* Wakes a producer blocked on a full appsrc queue: the streaming threads have stopped and
     * would never drain it. appsrc takes its own lock, so this is safe from any thread. */
    if (w->vsrc) gst_app_src_end_of_stream(GST_APP_SRC(w->vsrc));
    if (w->asrc) gst_app_src_end_of_stream(GST_APP_SRC(w->asrc));
    return GST_BUS_PASS; /* finish() pops it to stop waiting */
  }
  case GST_MESSAGE_EOS: return GST_BUS_PASS;
  default:
    /* Nobody reads them; keep the bus queue empty. A sync handler that drops a message owns
     * it and must unref it, or every message (and through them the pipeline) leaks. */
    gst_message_unref(msg);
    return GST_BUS_DROP;
  }
}

/* ---- construction ---- */

fc_mp4_params fc_mp4_params_default(int width, int height) {
  fc_mp4_params p;
  memset(&p, 0, sizeof p);
  p.width = width;
  p.height = height;
  p.fps = 25;
  p.sample_rate = 16000;
  p.bitrate_kbps = 0;
  p.preset = NULL;
  p.threads = 0;
  return p;
}

/* Removes the output if it is a regular file: a device such as /dev/null given as the path
 * must survive a failed render (this may run as root). */
static void remove_output(const char *path) {
  struct stat st;
  if (path && stat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path);
}

static void teardown(fc_mp4_writer *w) {
  if (w->pipeline) {
    /* NULL joins the streaming threads, so the sync handler cannot run after this. */
    gst_element_set_state(w->pipeline, GST_STATE_NULL);
    if (w->bus && w->sync_handler_set) gst_bus_set_sync_handler(w->bus, NULL, NULL, NULL);
    w->sync_handler_set = 0;
  }
  fc_gst_release_pool(&w->vpool);
  fc_gst_release_pool(&w->apool);
  if (w->bus) {
    gst_object_unref(w->bus);
    w->bus = NULL;
  }
  if (w->pipeline) {
    gst_object_unref(w->pipeline);
    w->pipeline = NULL;
  }
  w->vsrc = w->asrc = NULL;
}

/* avcc: NULL for raw pictures (x264 here), else the codec data of the H.264 pushed. */
static fc_mp4_writer *create_writer(const char *path, const fc_mp4_params *params,
                                    const uint8_t *avcc, size_t avcc_len, int *err) {
  int rc = 0;
  fc_mp4_writer *w = NULL;
  GstCaps *vcaps = NULL, *acaps = NULL;
  GstElement *venc = NULL, *vparse = NULL, *vqueue = NULL, *arate = NULL, *aconv = NULL,
             *ares = NULL, *aenc = NULL, *aparse = NULL, *mux = NULL, *sink = NULL;
  int created_file = 0;
  fc_mp4_params p;

  if (!path || !*path || !params) {
    rc = fc_error_set(FC_EINVAL, "fc_mp4_writer_create: no path or parameters");
    goto fail;
  }
  p = *params;
  if (p.fps == 0) p.fps = 25;
  if (p.sample_rate == 0) p.sample_rate = 16000;
  if (p.bitrate_kbps == 0) p.bitrate_kbps = 2000;
  if (!p.preset) p.preset = "veryfast";
  if (p.width <= 0 || p.height <= 0 || (p.width & 1) || (p.height & 1) || p.width > 16384 ||
      p.height > 16384) {
    rc = fc_error_set(FC_EINVAL, "%s: video size %dx%d must be positive and even", path,
                      p.width, p.height);
    goto fail;
  }
  if (p.fps < 0 || p.fps > 1000 || p.sample_rate < 1000 || p.sample_rate > 384000 ||
      p.bitrate_kbps < 0 || p.threads < 0) {
    rc = fc_error_set(FC_EINVAL, "%s: invalid parameters (fps %d, sample rate %d, bitrate %d, "
                      "threads %d)", path, p.fps, p.sample_rate, p.bitrate_kbps, p.threads);
    goto fail;
  }

  if ((rc = fc_gst_init())) goto fail;

  w = calloc(1, sizeof *w);
  if (!w) {
    rc = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    goto fail;
  }
  g_mutex_init(&w->lock);
  w->sink = (fc_sink){&mp4_sink_ops, w};
  w->p = p;
  w->coded = avcc != NULL;
  w->path = strdup(path);
  if (!w->path) {
    rc = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    goto fail;
  }

  w->pipeline = gst_pipeline_new("fc-mp4");
  if (!w->pipeline) {
    rc = fc_error_set(FC_EMEDIA, "could not create a GStreamer pipeline");
    goto fail;
  }

  if ((rc = fc_gst_add_element(w->pipeline, "appsrc", "v", &w->vsrc)) ||
      (!avcc && (rc = fc_gst_add_element(w->pipeline, "x264enc", "venc", &venc))) ||
      (rc = fc_gst_add_element(w->pipeline, "queue", "vqueue", &vqueue)) ||
      (rc = fc_gst_add_element(w->pipeline, "appsrc", "a", &w->asrc)) ||
      (rc = fc_gst_add_element(w->pipeline, "audiorate", "arate", &arate)) ||
      (rc = fc_gst_add_element(w->pipeline, "audioconvert", "aconv", &aconv)) ||
      (rc = fc_gst_add_element(w->pipeline, "audioresample", "ares", &ares)) ||
      (rc = fc_gst_add_aac_encoder(w->pipeline, &aenc, &w->aac_priming)) ||
      (rc = fc_gst_add_element(w->pipeline, "aacparse", "aparse", &aparse)) ||
      (rc = fc_gst_add_element(w->pipeline, "mp4mux", "mux", &mux)) ||
      (rc = fc_gst_add_element(w->pipeline, "filesink", "sink", &sink)))
    goto fail;
  /* h264parse lives in gst-plugins-bad, which a minimal install lacks. x264enc with
   * byte-stream=false already emits what mp4mux takes (stream-format=avc, alignment=au, codec
   * data in the caps), so the parser is only a nicety: use it when present. */
  if (!avcc && fc_gst_element_available("h264parse") &&
      (rc = fc_gst_add_element(w->pipeline, "h264parse", "vparse", &vparse)))
    goto fail;

  /* Video input: the caps fix the stride layout that push_video writes into. */
  if ((rc = fc_gst_raw_caps(p.width, p.height, p.fps, p.sample_rate, path, &w->vinfo, &vcaps,
                            &acaps)))
    goto fail;

  guint64 frame_bytes = GST_VIDEO_INFO_SIZE(&w->vinfo);
  if (avcc) { /* encoded pictures in, as they are: AVC access units with their codec data */
    GstBuffer *cd = gst_buffer_new_memdup(avcc, avcc_len);
    gst_caps_unref(vcaps);
    vcaps = gst_caps_new_simple("video/x-h264", "stream-format", G_TYPE_STRING, "avc",
                                "alignment", G_TYPE_STRING, "au", "codec_data", GST_TYPE_BUFFER,
                                cd, "width", G_TYPE_INT, p.width, "height", G_TYPE_INT, p.height,
                                "framerate", GST_TYPE_FRACTION, p.fps, 1, NULL);
    gst_buffer_unref(cd);
    frame_bytes = CODED_QUEUE_BYTES / VIDEO_QUEUE_FRAMES;
  }
  /* emit-signals off: nobody listens, and signal emission per push is not free. */
  g_object_set(w->vsrc, "caps", vcaps, "format", GST_FORMAT_TIME, "is-live", FALSE, "block",
               TRUE, "max-bytes", (guint64)(VIDEO_QUEUE_FRAMES * frame_bytes), "emit-signals",
               FALSE, NULL);
  g_object_set(w->asrc, "caps", acaps, "format", GST_FORMAT_TIME, "is-live", FALSE, "block",
               TRUE, "max-bytes", (guint64)AUDIO_QUEUE_SECONDS * (guint64)p.sample_rate * 2u,
               "emit-signals", FALSE, NULL);

  if (venc && (rc = fc_gst_set_speed_preset(venc, p.preset, path))) goto fail;
  /* A keyframe every 2 s keeps seeking in the result cheap; byte-stream off gives the avc
   * format mp4mux stores. */
  if (venc) g_object_set(venc, "bitrate", (guint)p.bitrate_kbps, "threads", (guint)p.threads,
               "key-int-max", (guint)(2 * p.fps), "byte-stream", FALSE, "trellis", FALSE, NULL);
  if (fc_gst_has_property(aenc, "bitrate")) g_object_set(aenc, "bitrate", AAC_BITRATE, NULL);
  /* Joined bulk videos encode their whole audio in one go, on the job's critical path: FFmpeg's
   * default two-loop search costs as much CPU as the pictures' encoding; its fast coder is
   * several times quicker and still transparent for speech at this rate. */
  if (avcc && fc_gst_has_property(aenc, "aac-coder")) gst_util_set_object_arg(G_OBJECT(aenc), "aac-coder", "fast");
  g_object_set(sink, "location", path, NULL);
  /* Its default tolerance (40 ms) would let exactly one skipped frame through unfilled; the
   * caller's stamps are sample-exact, so anything over a millisecond is a real gap. Gaps only:
   * audio that starts after 0 (a caller numbering from its own clock) is not preceded by
   * silence, as its video is not preceded by pictures. */
  g_object_set(arate, "tolerance", (guint64)GST_MSECOND, "skip-to-first", TRUE, NULL);

  /* The encoded-video queue is bounded by time only: VIDEO_SKEW_SECONDS of H.264 is a few MB,
   * and it lets the caller push video that far ahead of its audio (see the design note). */
  g_object_set(vqueue, "max-size-buffers", 0u, "max-size-bytes", 0u, "max-size-time",
               (guint64)VIDEO_SKEW_SECONDS * GST_SECOND, NULL);
  GstElement *vchain[6];
  size_t nv = 0;
  vchain[nv++] = w->vsrc;
  if (venc) vchain[nv++] = venc;
  if (vparse) vchain[nv++] = vparse;
  vchain[nv++] = vqueue;
  if (!avcc) vchain[nv++] = mux, vchain[nv++] = sink;
  GstElement *achain[] = {w->asrc, arate, aconv, ares, aenc, aparse, mux};
  GstElement *mchain[] = {mux, sink};
  if ((rc = fc_gst_link_chain(vchain, nv)) ||
      /* encoded input: the queue's caps are not known before it runs, so a plain link could
       * take the muxer's audio pad; ask for the video one by name */
      (avcc && !gst_element_link_pads(vqueue, "src", mux, "video_%u") &&
       (rc = fc_error_set(FC_EMEDIA, "%s: cannot link the video to mp4mux", path))) ||
      (avcc && (rc = fc_gst_link_chain(mchain, 2))) ||
      (rc = fc_gst_link_chain(achain, sizeof achain / sizeof achain[0])))
    goto fail;

  if (!avcc) w->vpool = fc_gst_make_pool(vcaps, (guint)frame_bytes, VIDEO_QUEUE_FRAMES);
  w->apool = fc_gst_make_pool(acaps, AUDIO_CHUNK_SAMPLES * sizeof(int16_t), 4);
  if ((!avcc && !w->vpool) || !w->apool) {
    rc = fc_error_set(FC_EMEDIA, "%s: could not set up buffer pools", path);
    goto fail;
  }

  /* Creating the file here, after everything else that can fail, gives a plain errno message
   * before any thread starts and leaves an existing file alone if the set-up is refused.
   * filesink reopens (and truncates) it when the pipeline starts. */
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = fc_error_set(FC_EIO, "%s: cannot create output file: %s", path, strerror(errno));
    goto fail;
  }
  close(fd);
  created_file = 1;

  w->bus = gst_pipeline_get_bus(GST_PIPELINE(w->pipeline));
  gst_bus_set_sync_handler(w->bus, on_bus_message, w, NULL);
  w->sync_handler_set = 1;

  /* filesink opens the file on the way to PAUSED, inside this call; the rest of the start-up
   * (preroll) waits for data and completes asynchronously. */
  if (gst_element_set_state(w->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    rc = report_recorded(w, 0);
    if (!rc) rc = fc_error_set(FC_EMEDIA, "%s: the GStreamer pipeline did not start", path);
    goto fail;
  }
  if ((rc = report_recorded(w, 0))) goto fail;

  gst_caps_unref(vcaps);
  gst_caps_unref(acaps);
  w->state = W_RUNNING;
  if (err) *err = 0;
  return w;

fail:
  if (vcaps) gst_caps_unref(vcaps);
  if (acaps) gst_caps_unref(acaps);
  if (w) {
    teardown(w);
    if (created_file) remove_output(w->path);
    free(w->path);
    g_mutex_clear(&w->lock);
    free(w);
  }
  if (err) *err = rc;
  return NULL;
}

fc_mp4_writer *fc_mp4_writer_create(const char *path, const fc_mp4_params *params, int *err) {
  return create_writer(path, params, NULL, 0, err);
}

fc_mp4_writer *fc_mp4_writer_create_coded(const char *path, const fc_mp4_params *params,
                                          const uint8_t *avcc, size_t avcc_len, int *err) {
  if (!avcc || !avcc_len) {
    if (err) *err = fc_error_set(FC_EINVAL, "%s: no H.264 codec data", path ? path : "mp4");
    return NULL;
  }
  return create_writer(path, params, avcc, avcc_len, err);
}

/* ---- pushing ---- */

/* The error a push reports when the writer cannot take data, or 0. */
static int check_writable(fc_mp4_writer *w) {
  if (w->state == W_FINISHED)
    return fc_error_set(FC_EINVAL, "%s: push after fc_mp4_writer_finish", w->path);
  int rc = report_recorded(w, FC_EMEDIA);
  if (rc) return rc;
  if (w->state == W_FAILED) return fc_error_set(FC_EMEDIA, "%s: the writer has failed", w->path);
  return 0;
}

/* Hands buf (ownership included) to appsrc; may block while the encoders are behind. */
static int push_buffer(fc_mp4_writer *w, GstElement *src, GstBuffer *buf) {
  GstFlowReturn flow = gst_app_src_push_buffer(GST_APP_SRC(src), buf);
  if (flow == GST_FLOW_OK) return 0;
  /* EOS here means the error handler closed the queue: report the error behind it. */
  int rc = report_recorded(w, FC_EMEDIA);
  if (rc) return rc;
  return fc_error_set(FC_EMEDIA, "%s: GStreamer refused a buffer (%s)", w->path,
                      gst_flow_get_name(flow));
}

/* Stamps video frame `index` on buf: its time on the frame clock, decode = presentation. */
static void stamp_video(const fc_mp4_writer *w, GstBuffer *buf, int64_t index) {
  const guint64 fps = (guint64)w->p.fps;
  const GstClockTime pts = gst_util_uint64_scale((guint64)index, GST_SECOND, fps);
  GST_BUFFER_PTS(buf) = pts;
  GST_BUFFER_DTS(buf) = w->coded ? pts : GST_CLOCK_TIME_NONE;
  GST_BUFFER_DURATION(buf) = gst_util_uint64_scale((guint64)index + 1, GST_SECOND, fps) - pts;
  GST_BUFFER_OFFSET(buf) = (guint64)index;
}

int fc_mp4_writer_push_coded(fc_mp4_writer *w, const uint8_t *au, size_t n, int key,
                             int64_t index) {
  if (!w || !w->coded || !au || !n || index < 0)
    return fc_error_set(FC_EINVAL, "fc_mp4_writer_push_coded: bad argument");
  int rc = check_writable(w);
  if (rc) return rc;
  if (index < w->next_index)
    return fc_error_set(FC_EINVAL, "%s: video frame %lld pushed after frame %lld", w->path,
                        (long long)index, (long long)(w->next_index - 1));
  /* One buffer per access unit: the join copies each once, and GStreamer owns it after. */
  GstBuffer *buf = gst_buffer_new_memdup(au, n);
  stamp_video(w, buf, index);
  if (!key) GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DELTA_UNIT);
  if ((rc = push_buffer(w, w->vsrc, buf))) return rc;
  w->next_index = index + 1;
  w->frames++;
  return 0;
}

int fc_mp4_writer_push_video(fc_mp4_writer *w, const uint8_t *i420, int64_t index) {
  if (!w || !i420 || index < 0 || w->coded)
    return fc_error_set(FC_EINVAL, "fc_mp4_writer_push_video: bad argument");
  int rc = check_writable(w);
  if (rc) return rc;
  if (index < w->next_index) {
    return fc_error_set(FC_EINVAL, "%s: video frame %lld pushed after frame %lld", w->path,
                        (long long)index, (long long)(w->next_index - 1));
  }

  GstBuffer *buf = NULL;
  GstFlowReturn flow = gst_buffer_pool_acquire_buffer(w->vpool, &buf, NULL);
  if (flow != GST_FLOW_OK || !buf) {
    return fc_error_set(FC_EMEDIA, "%s: no video buffer from the pool (%s)", w->path,
                        gst_flow_get_name(flow));
  }
  if (fc_gst_fill_i420(buf, &w->vinfo, i420)) {
    gst_buffer_unref(buf);
    return fc_error_set(FC_EMEDIA, "%s: could not map a video buffer", w->path);
  }

  stamp_video(w, buf, index);
  if ((rc = push_buffer(w, w->vsrc, buf))) return rc;
  w->next_index = index + 1;
  w->frames++;
  return 0;
}

int fc_mp4_writer_push_audio(fc_mp4_writer *w, const int16_t *pcm, size_t n,
                             int64_t first_sample) {
  if (!w || (!pcm && n) || first_sample < 0)
    return fc_error_set(FC_EINVAL, "fc_mp4_writer_push_audio: bad argument");
  int rc = check_writable(w);
  if (rc) return rc;
  if (n == 0) return 0;
  if (first_sample < w->next_sample) {
    return fc_error_set(FC_EINVAL, "%s: audio at sample %lld overlaps audio already pushed "
                        "(up to %lld)", w->path, (long long)first_sample,
                        (long long)w->next_sample);
  }

  const guint64 rate = (guint64)w->p.sample_rate;
  size_t done = 0;
  while (done < n) {
    const size_t cnt = n - done < AUDIO_CHUNK_SAMPLES ? n - done : AUDIO_CHUNK_SAMPLES;
    GstBuffer *buf = NULL;
    GstFlowReturn flow = gst_buffer_pool_acquire_buffer(w->apool, &buf, NULL);
    if (flow != GST_FLOW_OK || !buf) {
      return fc_error_set(FC_EMEDIA, "%s: no audio buffer from the pool (%s)", w->path,
                          gst_flow_get_name(flow));
    }
    /* Pool buffers are AUDIO_CHUNK_SAMPLES long; the pool restores the full size when the
     * buffer comes back, so shrinking it here is fine. */
    gst_buffer_fill(buf, 0, pcm + done, cnt * sizeof(int16_t));
    gst_buffer_set_size(buf, (gssize)(cnt * sizeof(int16_t)));
    const guint64 s0 = (guint64)first_sample + done;
    const GstClockTime pts = gst_util_uint64_scale(s0, GST_SECOND, rate);
    GST_BUFFER_PTS(buf) = pts;
    GST_BUFFER_DTS(buf) = GST_CLOCK_TIME_NONE;
    GST_BUFFER_DURATION(buf) = gst_util_uint64_scale(s0 + cnt, GST_SECOND, rate) - pts;
    GST_BUFFER_OFFSET(buf) = s0;
    GST_BUFFER_OFFSET_END(buf) = s0 + cnt;
    /* A gap in the caller's clock: let the encoder resync rather than stretch the audio. */
    if (done == 0 && first_sample > w->next_sample)
      GST_BUFFER_FLAG_SET(buf, GST_BUFFER_FLAG_DISCONT);
    if ((rc = push_buffer(w, w->asrc, buf))) return rc;
    done += cnt;
    w->next_sample = (int64_t)(s0 + cnt);
  }
  return 0;
}

/* ---- AAC priming ----
 *
 * An AAC encoder emits one frame of priming before the first input sample (1024 samples for
 * FFmpeg's encoder), but GstAudioEncoder in 1.22 stamps its output as if it had no delay and
 * mp4mux writes the audio edit list with media_time 0. Played as written, the audio would lag
 * the video by 1024/16000 s = 64 ms, which is visible on lips. The standard MP4 answer is an
 * edit list that starts the audio presentation after the priming, so once mp4mux has closed
 * the file we patch the audio track's single edit in place: media_time = priming, its duration
 * (and the track and movie durations) shortened to match. The patch keeps every box the same
 * size, so nothing else in the file moves. A layout we do not recognise is left untouched
 * (the file stays valid, only 64 ms out of sync), an I/O failure is an error. */

#define MAX_MOOV_BYTES (64u << 20) /* hours of samples; anything larger is not ours */

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) << 32 | rd32(p + 4); }
static void wr32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static void wr64(uint8_t *p, uint64_t v) {
  wr32(p, (uint32_t)(v >> 32));
  wr32(p + 4, (uint32_t)v);
}

/* A box inside buf: payload from `body` to `end`. */
typedef struct {
  size_t body, end;
} mp4_box;

/* Finds the first child box of `type` in [start, end) of buf. */
static int find_box(const uint8_t *buf, size_t start, size_t end, const char *type,
                    mp4_box *out) {
  size_t off = start;
  while (off + 8 <= end) {
    uint64_t size = rd32(buf + off);
    size_t hdr = 8;
    if (size == 1) {
      if (off + 16 > end) return 0;
      size = rd64(buf + off + 8);
      hdr = 16;
    } else if (size == 0) {
      size = end - off;
    }
    if (size < hdr || size > end - off) return 0;
    if (memcmp(buf + off + 4, type, 4) == 0) {
      out->body = off + hdr;
      out->end = off + (size_t)size;
      return 1;
    }
    off += (size_t)size;
  }
  return 0;
}

/* Reads the top-level moov box of f into memory. Returns 1 and its file offset, 0 if there
 * is none we can use, negative on an I/O error. */
static int read_moov(FILE *f, uint8_t **out, size_t *len, off_t *at) {
  uint8_t h[16];
  off_t off = 0;
  for (;;) {
    if (fseeko(f, off, SEEK_SET) != 0) return -1;
    size_t got = fread(h, 1, sizeof h, f);
    if (got < 8) return ferror(f) ? -1 : 0;
    uint64_t size = rd32(h);
    if (size == 1) {
      if (got < 16) return 0;
      size = rd64(h + 8);
    }
    if (size < 8) return 0; /* size 0 ("to end of file") only ever ends an mdat here */
    if (memcmp(h + 4, "moov", 4) == 0) {
      if (size > MAX_MOOV_BYTES) return 0;
      uint8_t *buf = malloc((size_t)size);
      if (!buf) return -1;
      if (fseeko(f, off, SEEK_SET) != 0 || fread(buf, 1, (size_t)size, f) != size) {
        free(buf);
        return -1;
      }
      *out = buf;
      *len = (size_t)size;
      *at = off;
      return 1;
    }
    off += (off_t)size;
  }
}

/* Duration field of a full box at `body` (version byte first): v0 32-bit at v0_off, v1 64-bit
 * at v1_off. */
static uint64_t get_dur(const uint8_t *b, size_t body, size_t v0_off, size_t v1_off) {
  return b[body] == 1 ? rd64(b + body + v1_off) : rd32(b + body + v0_off);
}
static void set_dur(uint8_t *b, size_t body, size_t v0_off, size_t v1_off, uint64_t v) {
  if (b[body] == 1) wr64(b + body + v1_off, v);
  else wr32(b + body + v0_off, v > UINT32_MAX ? UINT32_MAX : (uint32_t)v);
}

/* Patches the sound track's edit list of the moov in buf; returns 1 if it changed anything. */
static int patch_moov(uint8_t *b, size_t len, uint32_t priming) {
  mp4_box mvhd, trak, tkhd, mdia, mdhd, hdlr, edts, elst;
  const size_t body = rd32(b) == 1 ? 16 : 8; /* moov's own header */
  if (!find_box(b, body, len, "mvhd", &mvhd) || mvhd.end - mvhd.body < 32) return 0;
  const uint32_t movie_ts =
      b[mvhd.body] == 1 ? rd32(b + mvhd.body + 20) : rd32(b + mvhd.body + 12);
  if (!movie_ts) return 0;
  int changed = 0;
  uint64_t movie_dur = 0;
  for (size_t off = body; find_box(b, off, len, "trak", &trak); off = trak.end) {
    if (!find_box(b, trak.body, trak.end, "tkhd", &tkhd) || tkhd.end - tkhd.body < 36) break;
    if (find_box(b, trak.body, trak.end, "mdia", &mdia) &&
        find_box(b, mdia.body, mdia.end, "hdlr", &hdlr) && hdlr.end - hdlr.body >= 12 &&
        memcmp(b + hdlr.body + 8, "soun", 4) == 0 &&
        find_box(b, mdia.body, mdia.end, "mdhd", &mdhd) &&
        mdhd.end - mdhd.body >= (b[mdhd.body] == 1 ? 32u : 20u) &&
        find_box(b, trak.body, trak.end, "edts", &edts) &&
        find_box(b, edts.body, edts.end, "elst", &elst) && elst.end - elst.body >= 8 &&
        rd32(b + elst.body + 4) == 1) {
      const int v1 = b[elst.body] == 1;
      uint8_t *e = b + elst.body + 8;
      if ((size_t)(elst.end - elst.body) >= 8u + (v1 ? 20u : 12u)) {
        const int64_t media_time = v1 ? (int64_t)rd64(e + 8) : (int32_t)rd32(e + 4);
        const uint32_t media_ts = b[mdhd.body] == 1 ? rd32(b + mdhd.body + 20)
                                                     : rd32(b + mdhd.body + 12);
        const uint64_t media_dur = get_dur(b, mdhd.body, 16, 24);
        if (media_time == 0 && media_ts && media_dur > priming) {
          /* Movie-timescale length of what is left after the priming, rounded. */
          const uint64_t seg = ((media_dur - priming) * movie_ts + media_ts / 2) / media_ts;
          if (v1) {
            wr64(e, seg);
            wr64(e + 8, priming);
          } else {
            wr32(e, seg > UINT32_MAX ? UINT32_MAX : (uint32_t)seg);
            wr32(e + 4, priming);
          }
          set_dur(b, tkhd.body, 20, 28, seg);
          changed = 1;
        }
      }
    }
    uint64_t d = get_dur(b, tkhd.body, 20, 28);
    if (d > movie_dur) movie_dur = d;
  }
  if (changed) set_dur(b, mvhd.body, 16, 24, movie_dur);
  return changed;
}

static int trim_audio_priming(const char *path, uint32_t priming) {
  uint8_t *moov = NULL;
  size_t len = 0;
  off_t at = 0;
  int rc = 0;
  errno = 0;
  FILE *f = fopen(path, "r+b");
  if (!f) return fc_error_set(FC_EIO, "%s: cannot reopen to fix the audio start: %s", path,
                              strerror(errno));
  int found = read_moov(f, &moov, &len, &at);
  if (found < 0) {
    rc = fc_error_set(FC_EIO, "%s: cannot read the finished file: %s", path,
                      errno ? strerror(errno) : "short read");
  } else if (found > 0 && patch_moov(moov, len, priming)) {
    if (fseeko(f, at, SEEK_SET) != 0 || fwrite(moov, 1, len, f) != len || fflush(f) != 0)
      rc = fc_error_set(FC_EIO, "%s: cannot fix the audio start: %s", path, strerror(errno));
  }
  free(moov);
  if (fclose(f) != 0 && !rc)
    rc = fc_error_set(FC_EIO, "%s: cannot close: %s", path, strerror(errno));
  return rc;
}

/* ---- finishing ---- */

static int fail_writer(fc_mp4_writer *w, int rc) {
  w->state = W_FAILED;
  if (w->pipeline) gst_element_set_state(w->pipeline, GST_STATE_NULL);
  return rc;
}

int fc_mp4_writer_finish(fc_mp4_writer *w) {
  if (!w) return fc_error_set(FC_EINVAL, "fc_mp4_writer_finish: no writer");
  if (w->state == W_FINISHED) return 0;
  int rc = report_recorded(w, 0);
  if (rc) return fail_writer(w, rc);
  if (w->state == W_FAILED) return fc_error_set(FC_EMEDIA, "%s: the writer has failed", w->path);
  /* mp4mux can write no valid file without a video sample; say so instead of leaving a file
   * with an empty track (destroy() then removes it). */
  if (w->frames == 0) {
    return fail_writer(w, fc_error_set(FC_EMEDIA, "%s: no video frames were written", w->path));
  }

  /* mp4mux turns an audio input that saw caps but no sample into a broken empty track, so a
   * render without audio gets silence as long as the video instead. */
  if (w->next_sample == 0) {
    static const int16_t silence[AUDIO_CHUNK_SAMPLES];
    const int64_t end = (int64_t)gst_util_uint64_scale((guint64)w->next_index,
                                                       (guint64)w->p.sample_rate,
                                                       (guint64)w->p.fps);
    for (int64_t s = 0; s < end;) {
      const size_t n = end - s < AUDIO_CHUNK_SAMPLES ? (size_t)(end - s) : AUDIO_CHUNK_SAMPLES;
      if ((rc = fc_mp4_writer_push_audio(w, silence, n, s))) return fail_writer(w, rc);
      s += (int64_t)n;
    }
  }

  gst_app_src_end_of_stream(GST_APP_SRC(w->vsrc));
  gst_app_src_end_of_stream(GST_APP_SRC(w->asrc));

  /* The pipeline posts EOS once filesink has it, i.e. after mp4mux wrote the moov. */
  GstMessage *msg = gst_bus_timed_pop_filtered(
      w->bus, (GstClockTime)FINISH_TIMEOUT_S * GST_SECOND,
      (GstMessageType)(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
  if (!msg) {
    return fail_writer(w, fc_error_set(FC_EMEDIA, "%s: the GStreamer pipeline did not finish "
                                       "within %d s", w->path, FINISH_TIMEOUT_S));
  }
  const int is_eos = GST_MESSAGE_TYPE(msg) == GST_MESSAGE_EOS;
  gst_message_unref(msg);
  if (!is_eos) {
    /* The sync handler recorded the error before it was queued. */
    rc = report_recorded(w, 0);
    return fail_writer(w, rc ? rc : fc_error_set(FC_EMEDIA, "%s: pipeline error", w->path));
  }

  /* NULL closes the file. */
  if (gst_element_set_state(w->pipeline, GST_STATE_NULL) == GST_STATE_CHANGE_FAILURE) {
    rc = report_recorded(w, 0);
    return fail_writer(w, rc ? rc : fc_error_set(FC_EIO, "%s: could not close", w->path));
  }
  if ((rc = report_recorded(w, 0))) return fail_writer(w, rc);
  if (w->aac_priming && (rc = trim_audio_priming(w->path, w->aac_priming)))
    return fail_writer(w, rc);
  w->state = W_FINISHED;
  return 0;
}

void fc_mp4_writer_destroy(fc_mp4_writer *w) {
  if (!w) return;
  teardown(w);
  if (w->state != W_FINISHED) remove_output(w->path);
  free(w->path);
  g_mutex_clear(&w->lock);
  free(w);
}
