/* The live outputs' video encoder: libx264 behind a GstVideoEncoder, so that each picture can
 * tell x264 which macroblocks did not change (see x264_live.c). Internal to src/media. */
#ifndef FACECAST_MEDIA_X264_LIVE_H
#define FACECAST_MEDIA_X264_LIVE_H

#include <gst/gst.h>

typedef struct fc_x264_config {
  const char *preset; /* x264 preset name, e.g. "superfast" */
  int threads;        /* x264 threads */
  int keyint;         /* key frame interval, pictures */
  int qp;             /* > 0: constant quantizer; 0: CRF crf capped at vbv_kbps */
  int crf, vbv_kbps;
  int x264_only;      /* with qp > 0: no P pictures of fc_h264_still (h264_still.h); also
                       * when the environment has FACECAST_STILL_ENCODER=x264 */
} fc_x264_config;

/* A new "fcx264enc" element with this configuration (copied), or NULL and FC_EINVAL (an
 * unknown preset). */
GstElement *fc_x264enc_new(const fc_x264_config *cfg, int *err);

/* x264's parameters for the live outputs (preset with tune zerolatency, baseline, the rate
 * control of cfg) for width x height at fps_n/fps_d (0: 25/1): what fcx264enc opens x264 with,
 * shared with `bench still`. 0 or FC_EINVAL (an unknown preset). */
struct x264_param_t;
int fc_x264_live_params(struct x264_param_t *p, const fc_x264_config *cfg, int width, int height,
                        int fps_n, int fps_d);

/* Whether preset is one of x264's preset names. */
int fc_x264_preset_known(const char *preset);

/* The qdata key under which a raw picture buffer carries an fc_i420_delta (image.h): what it
 * holds against a still picture. The encoder marks macroblocks outside the changed rects of
 * this picture and the previous one as unchanged. */
GQuark fc_x264_delta_quark(void);

#endif
