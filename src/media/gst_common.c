/* GStreamer plumbing shared by mp4.c, live.c and rtmp.c; see gst_common.h. */
#include "media/gst_common.h"

#include "facecast/error.h"

#include <gst/audio/audio.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- initialisation, once per process ---- */

static pthread_once_t gst_once = PTHREAD_ONCE_INIT;
static int gst_ok;
static char gst_init_msg[256];

static void gst_init_once(void) {
  GError *e = NULL;
  gst_ok = gst_init_check(NULL, NULL, &e) ? 1 : 0;
  if (!gst_ok) snprintf(gst_init_msg, sizeof gst_init_msg, "%s", e ? e->message : "unknown reason");
  if (e) g_error_free(e);
}

int fc_gst_init(void) {
  pthread_once(&gst_once, gst_init_once);
  if (!gst_ok)
    return fc_error_set(FC_EMEDIA, "GStreamer could not be initialised: %s", gst_init_msg);
  return 0;
}

/* ---- elements ---- */

int fc_gst_has_property(gpointer obj, const char *name) {
  return g_object_class_find_property(G_OBJECT_GET_CLASS(obj), name) != NULL;
}

const char *fc_gst_package_of(const char *factory) {
  static const char *const map[][2] = {
      {"x264enc", "gstreamer1.0-plugins-ugly"},
      {"mp4mux", "gstreamer1.0-plugins-good"},
      {"aacparse", "gstreamer1.0-plugins-good"},
      {"rtph264pay", "gstreamer1.0-plugins-good"},
      {"rtpopuspay", "gstreamer1.0-plugins-good"},
      {"webrtcbin", "gstreamer1.0-plugins-bad"},
      {"rtmp2sink", "gstreamer1.0-plugins-bad"},
      {"h264parse", "gstreamer1.0-plugins-bad"},
      {"flvmux", "gstreamer1.0-plugins-good"},
      {"dtlssrtpenc", "gstreamer1.0-plugins-bad"},
      {"nicesrc", "gstreamer1.0-nice"},
      {"queue", "libgstreamer1.0-0"},
      {"filesink", "libgstreamer1.0-0"},
      {"fakesink", "libgstreamer1.0-0"},
      {"capsfilter", "libgstreamer1.0-0"},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcmp(factory, map[i][0])) return map[i][1];
  /* appsrc, audioconvert, audioresample, opusenc */
  return "gstreamer1.0-plugins-base";
}

int fc_gst_element_available(const char *factory) {
  GstElementFactory *f = gst_element_factory_find(factory);
  if (!f) return 0;
  gst_object_unref(f);
  return 1;
}

int fc_gst_require(const char *factory) {
  if (fc_gst_element_available(factory)) return 0;
  return fc_error_set(FC_EMEDIA, "GStreamer element '%s' is not available (install %s)", factory,
                      fc_gst_package_of(factory));
}

int fc_gst_add_element(GstElement *pipeline, const char *factory, const char *name,
                       GstElement **out) {
  GstElement *e = gst_element_factory_make(factory, name);
  if (!e) {
    return fc_error_set(FC_EMEDIA, "GStreamer element '%s' is not available (install %s)", factory,
                        fc_gst_package_of(factory));
  }
  if (!gst_bin_add(GST_BIN(pipeline), e)) {
    gst_object_unref(e);
    return fc_error_set(FC_EMEDIA, "could not add GStreamer element '%s' to the pipeline", factory);
  }
  *out = e;
  return 0;
}

int fc_gst_link_chain(GstElement *const *chain, size_t n) {
  for (size_t i = 0; i + 1 < n; i++) {
    if (!gst_element_link(chain[i], chain[i + 1])) {
      return fc_error_set(FC_EMEDIA, "could not link GStreamer elements %s and %s",
                          GST_ELEMENT_NAME(chain[i]), GST_ELEMENT_NAME(chain[i + 1]));
    }
  }
  return 0;
}

int fc_gst_set_speed_preset(GstElement *enc, const char *preset, const char *context) {
  GParamSpec *ps = g_object_class_find_property(G_OBJECT_GET_CLASS(enc), "speed-preset");
  if (!ps || !G_IS_PARAM_SPEC_ENUM(ps))
    return fc_error_set(FC_EMEDIA, "x264enc has no speed-preset property");
  GEnumValue *v = g_enum_get_value_by_nick(G_PARAM_SPEC_ENUM(ps)->enum_class, preset);
  if (!v) return fc_error_set(FC_EINVAL, "%s: unknown x264 speed preset '%s'", context, preset);
  g_object_set(enc, "speed-preset", v->value, NULL);
  return 0;
}

/* ---- buffer pools ---- */

GstBufferPool *fc_gst_make_pool(GstCaps *caps, guint size, guint min_buffers) {
  GstBufferPool *pool = gst_buffer_pool_new();
  GstStructure *config = gst_buffer_pool_get_config(pool);
  /* max_buffers 0: unbounded, see the header. */
  gst_buffer_pool_config_set_params(config, caps, size, min_buffers, 0);
  if (!gst_buffer_pool_set_config(pool, config) || !gst_buffer_pool_set_active(pool, TRUE)) {
    gst_object_unref(pool);
    return NULL;
  }
  return pool;
}

void fc_gst_release_pool(GstBufferPool **pool) {
  if (!*pool) return;
  gst_buffer_pool_set_active(*pool, FALSE);
  gst_object_unref(*pool);
  *pool = NULL;
}

/* ---- the first pipeline error ---- */

int fc_gst_record_bus_error(GMutex *lock, fc_gst_first_error *fe, GstMessage *msg,
                            const char *context, int (*code_of)(const GError *e)) {
  GError *e = NULL;
  gchar *dbg = NULL;
  gst_message_parse_error(msg, &e, &dbg);
  /* The debug string is "file(line): function (): element path:\nreason"; only the last line
   * says something to a person, and the detail must stay on one line. */
  const char *why = dbg ? strrchr(dbg, '\n') : NULL;
  why = why ? why + 1 : dbg;
  const int code = code_of ? code_of(e) : FC_EMEDIA;
  int first = 0;
  g_mutex_lock(lock);
  if (!fe->code) {
    snprintf(fe->msg, sizeof fe->msg, "%s: %s: %s%s%s%s", context,
             GST_MESSAGE_SRC_NAME(msg) ? GST_MESSAGE_SRC_NAME(msg) : "pipeline",
             e ? e->message : "unknown error", why ? " (" : "", why ? why : "", why ? ")" : "");
    fe->code = code;
    first = 1;
  }
  g_mutex_unlock(lock);
  if (e) g_error_free(e);
  g_free(dbg);
  return first;
}

int fc_gst_report_recorded(GMutex *lock, const fc_gst_first_error *fe, int as_code) {
  int code;
  char msg[sizeof fe->msg];
  g_mutex_lock(lock);
  code = fe->code;
  memcpy(msg, fe->msg, sizeof msg);
  g_mutex_unlock(lock);
  if (!code) return 0;
  return fc_error_set(as_code ? as_code : code, "%s", msg);
}

int fc_gst_raw_caps(int w, int h, int fps, int rate, const char *context, GstVideoInfo *vinfo,
                    GstCaps **vcaps, GstCaps **acaps) {
  gst_video_info_init(vinfo);
  if (!gst_video_info_set_format(vinfo, GST_VIDEO_FORMAT_I420, (guint)w, (guint)h))
    return fc_error_set(FC_EMEDIA, "%s: GStreamer rejected video size %dx%d", context, w, h);
  GST_VIDEO_INFO_FPS_N(vinfo) = fps;
  GST_VIDEO_INFO_FPS_D(vinfo) = 1;
  GST_VIDEO_INFO_PAR_N(vinfo) = 1;
  GST_VIDEO_INFO_PAR_D(vinfo) = 1;
  *vcaps = gst_video_info_to_caps(vinfo);
  GstAudioInfo ainfo;
  gst_audio_info_init(&ainfo);
  gst_audio_info_set_format(&ainfo, GST_AUDIO_FORMAT_S16LE, rate, 1, NULL);
  *acaps = gst_audio_info_to_caps(&ainfo);
  if (!*vcaps || !*acaps) return fc_error_set(FC_EMEDIA, "%s: could not build stream caps", context);
  return FC_OK;
}

int fc_gst_fill_i420(GstBuffer *buf, const GstVideoInfo *info, const uint8_t *i420) {
  GstMapInfo map;
  if (!gst_buffer_map(buf, &map, GST_MAP_WRITE)) return -1;
  /* The caller's planes are tightly packed; GstVideoInfo pads each row to a multiple of 4
   * (e.g. width 202: Y stride 204, chroma stride 104), so copy row by row unless they agree. */
  const uint8_t *src = i420;
  for (guint pl = 0; pl < 3; pl++) {
    const size_t cols =
        pl == 0 ? (size_t)GST_VIDEO_INFO_WIDTH(info) : (size_t)GST_VIDEO_INFO_WIDTH(info) / 2;
    const size_t rows =
        pl == 0 ? (size_t)GST_VIDEO_INFO_HEIGHT(info) : (size_t)GST_VIDEO_INFO_HEIGHT(info) / 2;
    const size_t stride = (size_t)GST_VIDEO_INFO_PLANE_STRIDE(info, pl);
    uint8_t *dst = map.data + GST_VIDEO_INFO_PLANE_OFFSET(info, pl);
    if (stride == cols) {
      memcpy(dst, src, cols * rows);
    } else {
      for (size_t y = 0; y < rows; y++) memcpy(dst + y * stride, src + y * cols, cols);
    }
    src += cols * rows;
  }
  gst_buffer_unmap(buf, &map);
  return 0;
}

int fc_gst_add_aac_encoder(GstElement *pipeline, GstElement **out, uint32_t *priming) {
  static const char *const names[] = {"avenc_aac", "fdkaacenc", "voaacenc", "faac"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (!fc_gst_element_available(names[i])) continue;
    /* FFmpeg's native AAC encoder always starts with one frame of priming (its
     * initial_padding); the delay of the others is not known here. */
    *priming = i == 0 ? 1024 : 0;
    return fc_gst_add_element(pipeline, names[i], "aenc", out);
  }
  return fc_error_set(FC_EMEDIA,
                      "no AAC encoder GStreamer element (tried avenc_aac, fdkaacenc, voaacenc, "
                      "faac; install gstreamer1.0-libav)");
}
