/* "fcx264enc": libx264 behind a GstVideoEncoder, the live outputs' video encoder.
 *
 * Why not GStreamer's x264enc: on a talking photo almost every macroblock is skipped, and what
 * x264 still spends per picture is mostly its skip test on each of them. libx264 can be told
 * which macroblocks are unchanged (x264_picture_t.prop.mb_info, X264_MBINFO_CONSTANT) and then
 * skips them without analysis; x264enc has no way to pass that. The live output knows: every
 * raw picture it pushes carries what it holds against the avatar's still picture
 * (fc_i420_delta as qdata, see fc_x264_delta_quark), so a macroblock outside both this
 * picture's and the previously encoded picture's changed rects is the same in both. Only the
 * constant-quantizer mode uses it (x264 honours mb_info only where the reference's quantizer
 * is not above this picture's, which a constant quantizer guarantees).
 *
 * Settings mirror what the live output used with x264enc: the preset with tune zerolatency (no
 * B-frames, no look-ahead: one picture in, one out), x264 threads as configured, a key frame
 * every keyint pictures and on request (GstVideoEncoder's force-key-unit handling, which a
 * viewer's PLI reaches through the payloader), SPS/PPS before every key frame, Annex B byte
 * stream, constrained baseline, trellis off; either a constant quantizer or CRF capped through
 * the VBV (buffer 600 ms of the cap, x264enc's default).
 *
 * Threads: GstVideoEncoder calls set_format/handle_frame on the streaming thread (appsrc's);
 * start/stop on the state-changing thread. No allocation per picture besides the output
 * buffer GstVideoEncoder hands out; the mb_info arrays are made in set_format. */
#include "media/x264_live.h"

#include "media/h264_still.h"
#include "media/h264enc.h"

#include "core/tsan.h"
#include "facecast/error.h"
#include "facecast/picture.h"

#include <gst/video/gstvideoencoder.h>
#include <gst/video/video.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <x264.h>

/* mb_info arrays in rotation: x264 reads a picture's array while encoding it, which with
 * zerolatency happens inside the call; a few spare ones cost nothing and need no proof. */
#define MB_RING 4

typedef struct FcX264Enc {
  GstVideoEncoder parent;
  fc_x264_config cfg;
  char preset[32];
  x264_t *x;
  GstVideoCodecState *in;
  int mbw, mbh;
  uint8_t *mb[MB_RING];
  int mb_next;
  fc_i420_delta last; /* what the last encoded picture held against its still */
  /* P pictures of a talking photo written by fc_h264_still (constant quantizer only) */
  fc_h264_still *still;
  uint8_t *still_out; /* one picture's bytes */
  size_t still_cap;
  int keyint;
  int since_key;   /* pictures since the last key frame */
  int x264_behind; /* the decoder's reference is ours, not x264's: x264 must start afresh */
  int hold;        /* x264 codes until its next key frame (the still went away mid-stream) */
} FcX264Enc;

typedef struct FcX264EncClass {
  GstVideoEncoderClass parent_class;
} FcX264EncClass;

GType fc_x264enc_get_type(void);
G_DEFINE_TYPE(FcX264Enc, fc_x264enc, GST_TYPE_VIDEO_ENCODER)

static GstStaticPadTemplate sink_template =
    GST_STATIC_PAD_TEMPLATE("sink", GST_PAD_SINK, GST_PAD_ALWAYS,
                            GST_STATIC_CAPS("video/x-raw, format=(string)I420, "
                                            "width=(int)[16, 8192], height=(int)[16, 8192], "
                                            "framerate=(fraction)[1/1, 240/1]"));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE(
    "src", GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS("video/x-h264, stream-format=(string)byte-stream, alignment=(string)au, "
                    "profile=(string)constrained-baseline"));

GQuark fc_x264_delta_quark(void) {
  static gsize q; /* pacer and streaming threads ask concurrently */
  if (g_once_init_enter(&q)) g_once_init_leave(&q, g_quark_from_static_string("facecast-i420-held"));
  return (GQuark)q;
}

int fc_x264_preset_known(const char *preset) {
  for (int i = 0; preset && x264_preset_names[i]; i++)
    if (!strcmp(preset, x264_preset_names[i])) return 1;
  return 0;
}

static void close_encoder(FcX264Enc *e) {
  if (e->x) x264_encoder_close(e->x);
  e->x = NULL;
  for (int i = 0; i < MB_RING; i++) g_free(e->mb[i]), e->mb[i] = NULL;
  fc_h264_still_destroy(e->still);
  e->still = NULL;
  g_free(e->still_out);
  e->still_out = NULL;
  e->since_key = e->x264_behind = e->hold = 0;
  if (e->in) gst_video_codec_state_unref(e->in);
  e->in = NULL;
  memset(&e->last, 0, sizeof e->last);
}

static gboolean enc_stop(GstVideoEncoder *enc) {
  close_encoder((FcX264Enc *)enc);
  return TRUE;
}

int fc_x264_live_params(x264_param_t *pp, const fc_x264_config *cfg, int width, int height,
                        int fps_n, int fps_d) {
  x264_param_t p;
  if (x264_param_default_preset(&p, cfg->preset, "zerolatency") < 0) return FC_EINVAL;
  p.i_log_level = X264_LOG_NONE;
  p.i_width = width;
  p.i_height = height;
  p.i_csp = X264_CSP_I420;
  p.i_threads = cfg->threads > 0 ? cfg->threads : 1;
  p.i_fps_num = (uint32_t)(fps_n > 0 ? fps_n : 25);
  p.i_fps_den = (uint32_t)(fps_d > 0 ? fps_d : 1);
  p.i_timebase_num = p.i_fps_den;
  p.i_timebase_den = p.i_fps_num;
  p.b_vfr_input = 0;
  p.i_keyint_max = cfg->keyint > 0 ? cfg->keyint : 2 * (int)p.i_fps_num;
  p.b_repeat_headers = 1;
  p.b_annexb = 1;
  p.b_aud = 0;
  p.analyse.i_trellis = 0;
  if (cfg->qp > 0) {
    p.rc.i_rc_method = X264_RC_CQP;
    p.rc.i_qp_constant = cfg->qp;
    p.analyse.b_mb_info = 1;
    /* No scene-cut test: with a constant quantizer it is the only reason x264 makes a
     * half-size copy of every picture and analyses it — 7-12 % of its time on a talking
     * photo, for key frames that keyint and the viewers' requests make anyway (same output
     * size and PSNR measured on the engine's pictures; docs/BENCHMARKS.md). */
    p.i_scenecut_threshold = 0;
    /* x264's reconstruction of each picture, which fc_h264_still continues from */
    p.b_full_recon = !cfg->x264_only;
  } else {
    p.rc.i_rc_method = X264_RC_CRF;
    p.rc.f_rf_constant = (float)(cfg->crf > 0 ? cfg->crf : 23);
    p.rc.i_vbv_max_bitrate = cfg->vbv_kbps;
    p.rc.i_vbv_buffer_size = cfg->vbv_kbps * 600 / 1000;
  }
  if (x264_param_apply_profile(&p, "baseline") < 0) return FC_EINVAL;
  *pp = p;
  return 0;
}

static gboolean enc_set_format(GstVideoEncoder *enc, GstVideoCodecState *state) {
  FcX264Enc *e = (FcX264Enc *)enc;
  close_encoder(e);
  const GstVideoInfo *vi = &state->info;
  x264_param_t p;
  if (fc_x264_live_params(&p, &e->cfg, GST_VIDEO_INFO_WIDTH(vi), GST_VIDEO_INFO_HEIGHT(vi),
                          GST_VIDEO_INFO_FPS_N(vi), GST_VIDEO_INFO_FPS_D(vi)) < 0 ||
      !(e->x = x264_encoder_open(&p))) {
    GST_ELEMENT_ERROR(e, LIBRARY, SETTINGS, ("x264 refused its settings"), (NULL));
    return FALSE;
  }
  e->mbw = (p.i_width + 15) / 16;
  e->mbh = (p.i_height + 15) / 16;
  for (int i = 0; i < MB_RING; i++) e->mb[i] = g_malloc((gsize)e->mbw * e->mbh);
  e->keyint = p.i_keyint_max;
  if (e->cfg.qp > 0 && !e->cfg.x264_only) {
    int err = 0;
    /* NULL where the size is not in whole macroblocks: x264 then codes every picture */
    if ((e->still = fc_h264_still_create(p.i_width, p.i_height, e->cfg.qp, &err))) {
      e->still_cap = fc_h264_still_max_size(e->still);
      e->still_out = g_malloc(e->still_cap);
    }
  }
  e->in = gst_video_codec_state_ref(state);
  GstCaps *caps = gst_caps_new_simple("video/x-h264", "stream-format", G_TYPE_STRING, "byte-stream",
                                      "alignment", G_TYPE_STRING, "au", "profile", G_TYPE_STRING,
                                      "constrained-baseline", NULL);
  GstVideoCodecState *out = gst_video_encoder_set_output_state(enc, caps, state);
  gst_video_codec_state_unref(out);
  gst_video_encoder_set_latency(enc, 0, 0);
  return gst_video_encoder_negotiate(enc);
}

/* Which macroblocks are the same as in the last encoded picture: those outside the rects in
 * which either picture differs from their common still. NULL when that cannot be known. */
static uint8_t *constant_map(FcX264Enc *e, const fc_i420_delta *d) {
  if (!d || !d->base || d->base != e->last.base) return NULL;
  uint8_t *m = e->mb[e->mb_next];
  e->mb_next = (e->mb_next + 1) % MB_RING;
  fc_h264_mb_constant(m, e->mbw, e->mbh, &d->changed, &e->last.changed);
  return m;
}

/* A P picture written by fc_h264_still, when this picture and the one before are the same
 * still with a changed rect each, and no key frame is due. 1: written; 0: x264's turn. */
static int still_picture(FcX264Enc *e, GstVideoCodecFrame *frame, GstVideoFrame *vf,
                         const fc_i420_delta *d) {
  if (!e->still || e->hold || !fc_h264_still_ready(e->still) ||
      GST_VIDEO_CODEC_FRAME_IS_FORCE_KEYFRAME(frame) || e->since_key + 1 >= e->keyint)
    return 0;
  if (!d || !d->base || d->base != e->last.base) {
    /* the still went away (another picture source): x264 takes over from a key frame and
     * keeps the stream until its next one, so a flickering source costs one key frame per
     * interval at most */
    if (e->x264_behind) e->hold = 1;
    return 0;
  }
  const uint8_t *pl[3];
  int st[3];
  for (int i = 0; i < 3; i++) {
    pl[i] = GST_VIDEO_FRAME_PLANE_DATA(vf, i);
    st[i] = GST_VIDEO_FRAME_PLANE_STRIDE(vf, i);
  }
  const int n = fc_h264_still_encode(e->still, pl, st, constant_map(e, d), e->still_out,
                                     e->still_cap);
  if (n < 0) return 0; /* cannot happen with still_cap; x264 then starts afresh */
  frame->output_buffer = gst_video_encoder_allocate_output_buffer(GST_VIDEO_ENCODER(e), (gsize)n);
  gst_buffer_fill(frame->output_buffer, 0, e->still_out, (gsize)n);
  e->x264_behind = 1;
  e->since_key++;
  return 1;
}

static GstFlowReturn enc_handle_frame(GstVideoEncoder *enc, GstVideoCodecFrame *frame) {
  FcX264Enc *e = (FcX264Enc *)enc;
  if (!e->x || !e->in) {
    gst_video_encoder_finish_frame(enc, frame); /* no output: dropped */
    return GST_FLOW_NOT_NEGOTIATED;
  }
  GstVideoFrame vf;
  if (!gst_video_frame_map(&vf, &e->in->info, frame->input_buffer, GST_MAP_READ)) {
    gst_video_encoder_finish_frame(enc, frame); /* no output: dropped */
    GST_ELEMENT_ERROR(e, STREAM, ENCODE, ("could not map a picture"), (NULL));
    return GST_FLOW_ERROR;
  }
  const fc_i420_delta *d =
      gst_mini_object_get_qdata(GST_MINI_OBJECT(frame->input_buffer), fc_x264_delta_quark());
  if (d) FC_TSAN_ACQUIRE(d); /* the live output's hand-off (live.c fill_video) */
  if (still_picture(e, frame, &vf, d)) {
    gst_video_frame_unmap(&vf);
    if (d) FC_TSAN_RELEASE(d);
    e->last = *d;
    return gst_video_encoder_finish_frame(enc, frame);
  }

  x264_picture_t pic, out;
  x264_picture_init(&pic);
  pic.img.i_csp = X264_CSP_I420;
  pic.img.i_plane = 3;
  for (int i = 0; i < 3; i++) {
    pic.img.plane[i] = GST_VIDEO_FRAME_PLANE_DATA(&vf, i);
    pic.img.i_stride[i] = GST_VIDEO_FRAME_PLANE_STRIDE(&vf, i);
  }
  pic.i_pts = (int64_t)frame->system_frame_number;
  /* after pictures of fc_h264_still x264's reference is not the decoder's: a key frame */
  const int force = GST_VIDEO_CODEC_FRAME_IS_FORCE_KEYFRAME(frame) || e->x264_behind ||
                    (e->still && !e->hold && e->since_key + 1 >= e->keyint);
  pic.i_type = force ? X264_TYPE_IDR : X264_TYPE_AUTO;
  if (e->cfg.qp > 0 && !force) pic.prop.mb_info = constant_map(e, d);
  e->last = d ? *d : (fc_i420_delta){0};

  x264_nal_t *nals = NULL;
  int n_nals = 0;
  const int size = x264_encoder_encode(e->x, &nals, &n_nals, &pic, &out);
  gst_video_frame_unmap(&vf);
  if (d) FC_TSAN_RELEASE(d); /* x264 copied the picture: the buffer may go back to the pool */
  if (size < 0) {
    gst_video_encoder_finish_frame(enc, frame);
    GST_ELEMENT_ERROR(e, STREAM, ENCODE, ("x264 failed to encode a picture"), (NULL));
    return GST_FLOW_ERROR;
  }
  if (size == 0) return gst_video_encoder_finish_frame(enc, frame); /* nothing out: dropped */
  if (out.b_keyframe) {
    if (!e->x264_behind) e->hold = 0; /* a key frame of x264's own choosing ends a hold */
    e->x264_behind = 0;
    e->since_key = 0;
  } else {
    e->since_key++;
  }
  /* The next picture may be ours: follow this one (its reconstruction, as a decoder has it)
   * when it is described against a still; an undescribed one (a source without deltas, the
   * WHIP push's) or x264 holding the stream leaves nothing to follow, and the picture after an
   * undescribed one is x264's again (its e->last has no still). */
  if (e->still && !e->hold && d && d->base) {
    const uint8_t *rp[3] = {out.img.plane[0], out.img.plane[1], out.img.plane[2]};
    const int nv12 = (out.img.i_csp & X264_CSP_MASK) == X264_CSP_NV12;
    if (fc_h264_still_sync(e->still, nals[0].p_payload, (size_t)size, rp, out.img.i_stride,
                           nv12 ? 2 : 3) == FC_EUNSUPPORTED) {
      fc_h264_still_destroy(e->still); /* this x264 writes what it cannot follow */
      e->still = NULL;
    }
  }
  /* x264 lays a picture's NAL units out back to back from the first payload on. */
  frame->output_buffer = gst_video_encoder_allocate_output_buffer(enc, (gsize)size);
  gst_buffer_fill(frame->output_buffer, 0, nals[0].p_payload, (gsize)size);
  if (out.b_keyframe) GST_VIDEO_CODEC_FRAME_SET_SYNC_POINT(frame);
  return gst_video_encoder_finish_frame(enc, frame);
}

static void fc_x264enc_finalize(GObject *obj) {
  close_encoder((FcX264Enc *)obj);
  G_OBJECT_CLASS(fc_x264enc_parent_class)->finalize(obj);
}

static void fc_x264enc_class_init(FcX264EncClass *k) {
  GstElementClass *ek = GST_ELEMENT_CLASS(k);
  GstVideoEncoderClass *vk = GST_VIDEO_ENCODER_CLASS(k);
  G_OBJECT_CLASS(k)->finalize = fc_x264enc_finalize;
  gst_element_class_add_static_pad_template(ek, &sink_template);
  gst_element_class_add_static_pad_template(ek, &src_template);
  gst_element_class_set_static_metadata(ek, "facecast live H.264 encoder", "Codec/Encoder/Video",
                                        "libx264, told which macroblocks did not change",
                                        "facecast");
  vk->stop = enc_stop;
  vk->set_format = enc_set_format;
  vk->handle_frame = enc_handle_frame;
}

static void fc_x264enc_init(FcX264Enc *e) { (void)e; }

GstElement *fc_x264enc_new(const fc_x264_config *cfg, int *err) {
  if (!fc_x264_preset_known(cfg->preset)) {
    *err = fc_error_set(FC_EINVAL, "unknown x264 preset '%s'", cfg->preset ? cfg->preset : "");
    return NULL;
  }
  FcX264Enc *e = g_object_new(fc_x264enc_get_type(), NULL);
  e->cfg = *cfg;
  g_strlcpy(e->preset, cfg->preset, sizeof e->preset);
  e->cfg.preset = e->preset;
  /* Which writes a talking photo's P pictures: "auto" (the default) fc_h264_still with the
   * ultrafast preset, where it matches x264's quality at the same bits (bench still), and x264
   * with the others (their sub-sample motion and deblocking are worth 0.6 dB on the mouth at
   * superfast); "own" fc_h264_still always; "x264" never. */
  const char *which = getenv("FACECAST_STILL_ENCODER");
  if (which && !strcmp(which, "x264")) e->cfg.x264_only = 1;
  else if (!(which && !strcmp(which, "own")) && strcmp(e->preset, "ultrafast")) e->cfg.x264_only = 1;
  *err = 0;
  return GST_ELEMENT(e);
}
