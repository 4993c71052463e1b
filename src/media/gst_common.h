/* Private to src/media: the GStreamer plumbing both pipelines share, the MP4 writer (mp4.c)
 * the live outputs (live.c) and the RTMP push (rtmp.c). It holds what is the same in the two: initialising
 * GStreamer once per process, making, adding and linking elements (with a detail that names
 * the package to install), x264's speed preset, the unbounded buffer pools the producers fill,
 * and the first-error slot a bus sync handler fills from GStreamer's threads and the producer
 * reports from its own. Pipeline structure, timing and teardown order stay in each pipeline.
 *
 * Every call that fails returns an FC_E* code and sets the thread's detail (fc_error_set);
 * where a detail should say whose pipeline failed, the caller passes a context, the output
 * file's path for mp4.c or "live output" for live.c, which starts the detail.
 *
 * GObject/GStreamer code stays inside src/media: only its files (mp4.c, decode.c, gst_common.c
 * and the live output through live_internal.h) include this header, and nothing in include/facecast/ exposes a GStreamer type. */
#ifndef FC_MEDIA_GST_COMMON_H
#define FC_MEDIA_GST_COMMON_H

#include <gst/gst.h>
#include <gst/video/video.h>

#include <stddef.h>
#include <stdint.h>

/* Initialises GStreamer on the first call in the process (later calls only report how that
 * went). Returns 0, or FC_EMEDIA with a detail giving GStreamer's reason. Thread-safe. */
int fc_gst_init(void);

/* Whether GObject obj (an element, a pad, ...) has a property called name. */
int fc_gst_has_property(gpointer obj, const char *name);

/* The Debian/Ubuntu package that ships element factory `factory`, for error details. */
const char *fc_gst_package_of(const char *factory);

/* Whether element factory `factory` is installed. */
int fc_gst_element_available(const char *factory);
/* 0 if it is, else FC_EMEDIA with a detail naming the package to install. */
int fc_gst_require(const char *factory);

/* Makes an element and puts it in pipeline at once, so the pipeline owns it and cleanup only
 * ever has to drop the pipeline; *out is the element (a borrowed pointer). FC_EMEDIA if the
 * factory is missing (the detail names the package) or the bin refused it. */
int fc_gst_add_element(GstElement *pipeline, const char *factory, const char *name,
                       GstElement **out);

/* Adds the first AAC encoder found among those known to take mono raw audio (avenc_aac,
 * fdkaacenc, voaacenc, faac), named "aenc", to pipeline; *priming is its delay in samples at
 * the start of the stream where it is known (FFmpeg's encoder: one frame, 1024), else 0. The
 * MP4 writer trims it with an edit list, the RTMP output by its audio timestamps. FC_EMEDIA
 * naming the package to install when there is none. */
int fc_gst_add_aac_encoder(GstElement *pipeline, GstElement **out, uint32_t *priming);

/* Links chain[0] → chain[1] → ... → chain[n-1]; FC_EMEDIA naming the pair that would not. */
int fc_gst_link_chain(GstElement *const *chain, size_t n);

/* Sets x264enc's speed-preset from its enum nick (preset, not NULL), refusing unknown names
 * instead of letting GObject print a warning and keep the default: FC_EINVAL with the detail
 * "<context>: unknown x264 speed preset '<preset>'". */
int fc_gst_set_speed_preset(GstElement *enc, const char *preset, const char *context);

/* An active buffer pool of buffers of `size` bytes for caps, min_buffers preallocated and no
 * upper bound: a bounded pool could deadlock against an encoder that holds on to its input
 * frames (see the ownership note in mp4.c). NULL on failure. */
GstBufferPool *fc_gst_make_pool(GstCaps *caps, guint size, guint min_buffers);

/* Deactivates and drops *pool if there is one and sets it to NULL. */
void fc_gst_release_pool(GstBufferPool **pool);

/* The raw inputs both pipelines take from their producer: I420 w×h at fps/1 with square
 * pixels (*vinfo says how push lays a picture out) and S16LE mono at rate. 0, or FC_EMEDIA
 * with a detail that starts with context; *vcaps and *acaps are the caller's (either may be
 * set when the other failed). */
int fc_gst_raw_caps(int w, int h, int fps, int rate, const char *context, GstVideoInfo *vinfo,
                    GstCaps **vcaps, GstCaps **acaps);

/* Copies packed I420 (Y w×h, then U and V (w/2)×(h/2)) into buf laid out as info says
 * (GStreamer pads rows to multiples of 4). Returns 0, or -1 when buf cannot be mapped. */
int fc_gst_fill_i420(GstBuffer *buf, const GstVideoInfo *info, const uint8_t *i420);

/* ---- the first pipeline error ----
 *
 * A bus sync handler runs in whatever thread posts a message, so the error it records is
 * written under a lock of the owner's (which may guard other fields too) and copied into the
 * producer thread's detail by fc_gst_report_recorded. Only the first error is kept: later ones
 * are usually consequences of it. A zeroed slot is empty. */
typedef struct fc_gst_first_error {
  int code; /* 0 until the pipeline posted an error */
  char msg[448];
} fc_gst_first_error;

/* Records the ERROR message msg in fe (under lock) unless fe already holds one, as
 * "<context>: <element>: <message> (<reason>)", the reason being the last line of
 * GStreamer's debug string so the detail stays on one line. The code is code_of(the GError),
 * or FC_EMEDIA when code_of is NULL. Returns 1 if this was the first error, else 0. */
int fc_gst_record_bus_error(GMutex *lock, fc_gst_first_error *fe, GstMessage *msg,
                            const char *context, int (*code_of)(const GError *e));

/* Copies a recorded error into this thread's detail; returns its code (as_code instead when
 * nonzero), or 0 if none was recorded. */
int fc_gst_report_recorded(GMutex *lock, const fc_gst_first_error *fe, int as_code);

#endif
