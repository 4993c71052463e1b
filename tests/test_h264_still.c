/* fc_h264_still: P pictures written beside x264 must decode, in two independent decoders
 * (libavcodec's avdec_h264 and Cisco's openh264), to exactly the encoder's reconstruction,
 * picture after picture (any drift would show as a mismatch that grows); the quality inside the
 * changed box is checked against the source; and what it cannot follow is refused cleanly. */
#include "facecast/error.h"
#include "fc_test.h"
#include "media/h264_still.h"
#include "media/h264_still_internal.h"
#include "media/h264enc.h"
#include "media/x264_live.h"

#include "core/tsan.h"

#include <gst/app/gstappsink.h>
#include <gst/app/gstappsrc.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <x264.h>

typedef struct clip {
  int w, h, n;
  uint8_t **rec; /* the reconstruction of each picture, I420 */
  uint8_t *stream;
  size_t size, cap;
} clip;

static void append(clip *c, const uint8_t *p, size_t n) {
  if (c->size + n > c->cap) {
    c->cap = (c->size + n) * 2;
    c->stream = realloc(c->stream, c->cap);
  }
  memcpy(c->stream + c->size, p, n);
  c->size += n;
}

static void keep_recon(clip *c, const uint8_t *const pl[3], const int st[3], int nv12) {
  uint8_t *r = malloc((size_t)c->w * c->h * 3 / 2), *u = r + c->w * c->h, *v = u + c->w * c->h / 4;
  for (int y = 0; y < c->h; y++) memcpy(r + y * c->w, pl[0] + (size_t)y * st[0], (size_t)c->w);
  for (int y = 0; y < c->h / 2; y++)
    for (int x = 0; x < c->w / 2; x++) {
      u[y * c->w / 2 + x] = nv12 ? pl[1][y * st[1] + 2 * x] : pl[1][y * st[1] + x];
      v[y * c->w / 2 + x] = nv12 ? pl[1][y * st[1] + 2 * x + 1] : pl[2][y * st[2] + x];
    }
  c->rec[c->n++] = r;
}

/* A photo-like picture: smooth shading and some texture, plus in box a pattern that moves with
 * t (detail = how busy it is: high detail makes large levels and long CAVLC codes). */
static void draw(uint8_t *i420, int w, int h, int t, const fc_rect *box, int detail) {
  uint8_t *u = i420 + w * h, *v = u + w * h / 4;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      int p = 60 + (x * 120) / w + (y * 50) / h + ((x * 7 + y * 13) % 9);
      if (x >= box->x && x < box->x + box->w && y >= box->y && y < box->y + box->h) {
        const double a = (x - box->x) * 0.11 + t * 0.37, b = (y - box->y) * 0.07 - t * 0.21;
        p = (int)(128 + 60 * sin(a) * cos(b));
        if (detail) p = (int)((unsigned)(x * 2654435761u ^ y * 40503u ^ t * 97u) >> 24);
      }
      i420[y * w + x] = (uint8_t)(p < 0 ? 0 : p > 255 ? 255 : p);
    }
  for (int y = 0; y < h / 2; y++)
    for (int x = 0; x < w / 2; x++) {
      int cu = 110 + x * 20 / w, cv = 140 - y * 20 / h;
      if (2 * x >= box->x && 2 * x < box->x + box->w && 2 * y >= box->y && 2 * y < box->y + box->h) {
        cu = 128 + (int)(30 * sin(x * 0.2 + t * 0.5));
        cv = detail ? (int)((unsigned)(x * 2246822519u ^ y * 3266489917u ^ t) >> 24)
                    : 128 + (int)(25 * cos(y * 0.15 - t * 0.3));
      }
      u[y * w / 2 + x] = (uint8_t)cu;
      v[y * w / 2 + x] = (uint8_t)cv;
    }
}

static x264_t *open_x264(int w, int h, int qp, const char *profile) {
  x264_param_t p;
  if (x264_param_default_preset(&p, "superfast", "zerolatency") < 0) return NULL;
  p.i_log_level = X264_LOG_NONE;
  p.i_width = w, p.i_height = h, p.i_csp = X264_CSP_I420;
  p.i_threads = 1;
  p.i_fps_num = 25, p.i_fps_den = 1;
  p.i_keyint_max = 50;
  p.b_repeat_headers = 1, p.b_annexb = 1;
  p.rc.i_rc_method = X264_RC_CQP;
  p.rc.i_qp_constant = qp;
  p.b_full_recon = 1;
  if (x264_param_apply_profile(&p, profile) < 0) return NULL;
  return x264_encoder_open(&p);
}

/* x264 writes picture 0 as a key frame, fc_h264_still the rest; returns 0 or an error. */
static int make_clip(clip *c, int w, int h, int qp, int frames, const fc_rect *box, int detail,
                     double *psnr_box) {
  memset(c, 0, sizeof *c);
  c->w = w, c->h = h;
  c->rec = calloc((size_t)frames, sizeof *c->rec);
  uint8_t *pic = malloc((size_t)w * h * 3 / 2);
  int err = 0;
  fc_h264_still *s = fc_h264_still_create(w, h, qp, &err);
  x264_t *x = open_x264(w, h, qp, "baseline");
  if (!s || !x) return err ? err : FC_EINVAL;
  const int mbw = w / 16, mbh = h / 16;
  uint8_t *constant = malloc((size_t)mbw * mbh);
  uint8_t *out = malloc(fc_h264_still_max_size(s));
  double se = 0;
  long cnt = 0;
  for (int t = 0; t < frames; t++) {
    draw(pic, w, h, t, box, detail);
    const uint8_t *pl[3] = {pic, pic + w * h, pic + w * h + w * h / 4};
    const int st[3] = {w, w / 2, w / 2};
    if (t == 0) {
      x264_picture_t in, o;
      x264_picture_init(&in);
      in.img.i_csp = X264_CSP_I420, in.img.i_plane = 3;
      for (int i = 0; i < 3; i++) in.img.plane[i] = (uint8_t *)pl[i], in.img.i_stride[i] = st[i];
      in.i_type = X264_TYPE_IDR;
      x264_nal_t *nals;
      int nn;
      const int size = x264_encoder_encode(x, &nals, &nn, &in, &o);
      if (size <= 0) {
        err = FC_EMEDIA;
        break;
      }
      append(c, nals[0].p_payload, (size_t)size);
      const int nv12 = (o.img.i_csp & X264_CSP_MASK) == X264_CSP_NV12;
      const uint8_t *rp[3] = {o.img.plane[0], o.img.plane[1], o.img.plane[2]};
      err = fc_h264_still_sync(s, nals[0].p_payload, (size_t)size, rp, o.img.i_stride,
                               nv12 ? 2 : 3);
      if (err) break;
      keep_recon(c, rp, o.img.i_stride, nv12);
      continue;
    }
    fc_h264_mb_constant(constant, mbw, mbh, box, box);
    const int n = fc_h264_still_encode(s, pl, st, constant, out, fc_h264_still_max_size(s));
    if (n < 0) {
      err = n;
      break;
    }
    append(c, out, (size_t)n);
    const uint8_t *rp[3];
    int rs[3];
    fc_h264_still_recon(s, rp, rs);
    keep_recon(c, rp, rs, 0);
    for (int y = box->y; y < box->y + box->h; y++)
      for (int xx = box->x; xx < box->x + box->w; xx++) {
        const double d = (double)pic[y * w + xx] - rp[0][y * rs[0] + xx];
        se += d * d, cnt++;
      }
  }
  if (psnr_box) *psnr_box = cnt ? 10 * log10(255.0 * 255.0 / (se / cnt + 1e-9)) : 0;
  x264_encoder_close(x);
  fc_h264_still_destroy(s);
  free(constant), free(out), free(pic);
  return err;
}

static void free_clip(clip *c) {
  for (int i = 0; i < c->n; i++) free(c->rec[i]);
  free(c->rec), free(c->stream);
}

/* Decodes the clip with decoder (a GStreamer element) and compares every picture with c->rec:
 * returns the number of pictures that matched — exactly with tol 0, else within a mean
 * absolute difference of tol levels — or -1 if the decoder is missing. */
static int decode_within(const clip *c, const char *decoder, int *decoded, double tol) {
  if (!gst_registry_check_feature_version(gst_registry_get(), decoder, 1, 0, 0)) return -1;
  const char *dump = getenv("FC_H264_STILL_DUMP"); /* keep the stream to look at by hand */
  FILE *df = dump ? fopen(dump, "wb") : NULL;
  if (df) fwrite(c->stream, 1, c->size, df), fclose(df);
  char path[] = "/tmp/fc_h264_still_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return -2;
  const ssize_t wrote = write(fd, c->stream, c->size);
  close(fd);
  if (wrote != (ssize_t)c->size) return -2;
  char desc[512];
  snprintf(desc, sizeof desc,
           "filesrc location=%s ! h264parse ! %s ! videoconvert ! video/x-raw,format=I420 ! "
           "appsink name=s sync=false",
           path, decoder);
  GstElement *pipe = gst_parse_launch(desc, NULL);
  if (!pipe) return -2;
  GstAppSink *sink = GST_APP_SINK(gst_bin_get_by_name(GST_BIN(pipe), "s"));
  gst_element_set_state(pipe, GST_STATE_PLAYING);
  int same = 0, n = 0;
  GstSample *smp;
  while ((smp = gst_app_sink_pull_sample(sink))) {
    GstVideoInfo vi;
    GstVideoFrame f;
    gst_video_info_from_caps(&vi, gst_sample_get_caps(smp));
    if (n < c->n && gst_video_frame_map(&f, &vi, gst_sample_get_buffer(smp), GST_MAP_READ)) {
      int ok = 1;
      double sum = 0;
      for (int p = 0; p < 3 && ok; p++) {
        const int pw = p ? c->w / 2 : c->w, ph = p ? c->h / 2 : c->h;
        const uint8_t *r = c->rec[n] + (p ? c->w * c->h + (p - 1) * c->w * c->h / 4 : 0);
        const uint8_t *d = GST_VIDEO_FRAME_PLANE_DATA(&f, p);
        const int ds = GST_VIDEO_FRAME_PLANE_STRIDE(&f, p);
        for (int y = 0; y < ph && ok; y++) {
          if (tol == 0) ok = !memcmp(d + (size_t)y * ds, r + y * pw, (size_t)pw);
          else
            for (int x = 0; x < pw; x++) sum += abs(d[(size_t)y * ds + x] - r[y * pw + x]);
        }
      }
      if (tol > 0) ok = sum / (c->w * c->h * 1.5) <= tol;
      same += ok;
      gst_video_frame_unmap(&f);
    }
    n++;
    gst_sample_unref(smp);
  }
  gst_element_set_state(pipe, GST_STATE_NULL);
  gst_object_unref(sink);
  gst_object_unref(pipe);
  unlink(path);
  *decoded = n;
  return same;
}

static void check_decoders(const clip *c, const char *what) {
  const char *decs[] = {"avdec_h264", "openh264dec"};
  for (int i = 0; i < 2; i++) {
    int n = 0;
    const int same = decode_within(c, decs[i], &n, 0);
    if (same < 0 && i == 1) continue; /* openh264 is the second opinion, where installed */
    if (same != c->n || n != c->n)
      fprintf(stderr, "  %s, %s: %d of %d pictures decoded, %d identical\n", what, decs[i], n,
              c->n, same);
    FC_CHECK_INT(n, ==, c->n);
    FC_CHECK_INT(same, ==, c->n);
  }
}

static void test_decodes_exactly(void) {
  const fc_rect mouth = {176, 288, 160, 112}; /* not on macroblock edges */
  clip c;
  double psnr = 0;
  FC_REQUIRE(make_clip(&c, 512, 512, 18, 40, &mouth, 0, &psnr) == 0);
  fprintf(stderr, "  512x512 QP 18: %zu bytes for 40 pictures, box PSNR %.2f dB\n", c.size, psnr);
  FC_CHECK(psnr > 40.0);
  check_decoders(&c, "smooth");
  free_clip(&c);
}

static void test_busy_residual(void) {
  /* noise in the box: levels past CAVLC's escapes, nC >= 8 tables, every cbp pattern */
  const fc_rect box = {8, 40, 200, 72};
  const int qps[] = {1, 12, 30, 51};
  for (int i = 0; i < 4; i++) {
    clip c;
    double psnr = 0;
    FC_REQUIRE(make_clip(&c, 256, 128, qps[i], 8, &box, 1, &psnr) == 0);
    char what[32];
    snprintf(what, sizeof what, "noise QP %d", qps[i]);
    fprintf(stderr, "  %s: %zu bytes, box PSNR %.2f dB\n", what, c.size, psnr);
    check_decoders(&c, what);
    free_clip(&c);
  }
}

static void test_720p(void) {
  const fc_rect box = {560, 400, 200, 150};
  clip c;
  FC_REQUIRE(make_clip(&c, 1280, 720, 18, 6, &box, 0, NULL) == 0);
  check_decoders(&c, "720p");
  free_clip(&c);
}

static void test_refusals(void) {
  int err = 0;
  FC_CHECK(!fc_h264_still_create(500, 512, 18, &err));
  FC_CHECK_INT(err, ==, FC_EUNSUPPORTED);
  FC_CHECK(!fc_h264_still_create(512, 512, 0, &err));
  FC_CHECK_INT(err, ==, FC_EINVAL);
  fc_h264_still *s = fc_h264_still_create(64, 64, 20, &err);
  FC_REQUIRE(s);
  uint8_t pic[64 * 64 * 3 / 2] = {0}, out[4096];
  const uint8_t *pl[3] = {pic, pic + 4096, pic + 4096 + 1024};
  const int st[3] = {64, 32, 32};
  /* not in step with any stream yet */
  FC_CHECK_INT(fc_h264_still_encode(s, pl, st, NULL, out, sizeof out), ==, FC_EINVAL);
  /* garbage is no picture */
  const uint8_t junk[] = {0, 0, 1, 0x67, 0x42, 0, 0, 1, 0x65, 0x88}; /* a cut-off SPS */
  FC_CHECK_INT(fc_h264_still_sync(s, junk, sizeof junk, pl, st, 3), ==, FC_EFORMAT);
  FC_CHECK(!fc_h264_still_ready(s));
  FC_CHECK_INT(fc_h264_still_sync(s, junk, 2, pl, st, 3), ==, FC_EFORMAT);
  /* CABAC (x264's main profile) cannot be followed */
  x264_t *x = open_x264(64, 64, 20, "main");
  FC_REQUIRE(x);
  x264_picture_t in, o;
  x264_picture_init(&in);
  in.img.i_csp = X264_CSP_I420, in.img.i_plane = 3;
  for (int i = 0; i < 3; i++) in.img.plane[i] = (uint8_t *)pl[i], in.img.i_stride[i] = st[i];
  x264_nal_t *nals;
  int nn;
  const int size = x264_encoder_encode(x, &nals, &nn, &in, &o);
  FC_REQUIRE(size > 0);
  FC_CHECK_INT(fc_h264_still_sync(s, nals[0].p_payload, (size_t)size, pl, st, 3), ==,
               FC_EUNSUPPORTED);
  x264_encoder_close(x);
  /* a baseline key frame is followed; a picture that does not fit the buffer drops the step */
  x = open_x264(64, 64, 20, "baseline");
  const int size2 = x264_encoder_encode(x, &nals, &nn, &in, &o);
  FC_REQUIRE(size2 > 0);
  FC_CHECK_INT(fc_h264_still_sync(s, nals[0].p_payload, (size_t)size2, pl, st, 3), ==, 0);
  FC_CHECK(fc_h264_still_ready(s));
  for (int i = 0; i < 64 * 64; i++) pic[i] = (uint8_t)(i * 37);
  FC_CHECK_INT(fc_h264_still_encode(s, pl, st, NULL, out, 16), ==, FC_EINVAL);
  FC_CHECK(!fc_h264_still_ready(s));
  x264_encoder_close(x);
  fc_h264_still_destroy(s);
}

/* the SIMD transform and quantizer against the plain C reference: same levels, counts, DCs */
static void test_simd_parity(void) {
  uint32_t seed = 12345;
  int bad = 0;
  for (int it = 0; it < 4000; it++) {
    uint8_t src[4 * 8], pred[4 * 8];
    const int range = it % 4 == 0 ? 255 : it % 4 == 1 ? 40 : it % 4 == 2 ? 8 : 2;
    for (int i = 0; i < 32; i++) {
      seed = seed * 1664525u + 1013904223u;
      const int base = (int)(seed >> 24);
      seed = seed * 1664525u + 1013904223u;
      int v = base + (int)((seed >> 16) % (2 * range + 1)) - range;
      src[i] = (uint8_t)(it % 7 == 0 ? (i & 1) * 255 : base);
      pred[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      if (it % 7 == 0) pred[i] = (uint8_t)((i & 1) ? 0 : 255);
    }
    struct fc_quant q;
    fc_h264_quant_init(&q, 1 + it % 51);
    const int first = it & 1;
    int16_t a[2][16], b[2][16];
    int na[2], nb[2];
    int32_t da[2], db[2];
    fc_h264_fdct_quant_pair_ref(src, 8, pred, 8, &q, first, a, na, da);
    fc_h264_fdct_quant_pair(src, 8, pred, 8, &q, first, b, nb, db);
    bad += memcmp(a, b, sizeof a) || na[0] != nb[0] || na[1] != nb[1] || da[0] != db[0] ||
           da[1] != db[1];
  }
  FC_CHECK_INT(bad, ==, 0);
}

/* fcx264enc (the live encoder) switching between fc_h264_still and x264: a talking still,
 * then pictures that are not described against it (another source), then the still again.
 * Every picture must decode close to what went in — a wrong hand-over (x264 predicting from
 * a reference the decoder does not have, or fc_h264_still from one x264 moved past) shows as
 * a picture far off — and the key frames come where they should: a viewer's request (a
 * force-key-unit event, as a PLI makes) at once, keyint's, and one where the still goes away. */
/* The next encoded picture from sink into c; notes where key frames are. 0 at the end. */
static int pull_one(GstElement *sink, clip *c, int *keys, int *key_at, int index) {
  GstSample *smp = gst_app_sink_try_pull_sample(GST_APP_SINK(sink), 10 * GST_SECOND);
  if (!smp) return 0;
  GstBuffer *b = gst_sample_get_buffer(smp);
  GstMapInfo m;
  if (gst_buffer_map(b, &m, GST_MAP_READ)) {
    append(c, m.data, m.size);
    gst_buffer_unmap(b, &m);
  }
  if (!GST_BUFFER_FLAG_IS_SET(b, GST_BUFFER_FLAG_DELTA_UNIT)) key_at[(*keys)++] = index;
  gst_sample_unref(smp);
  return 1;
}

static size_t element_switches(const char *which, clip *c) {
  enum { W = 256, H = 192, N = 60, KEYINT = 20 };
  static uint8_t base[W * H * 3 / 2];
  setenv("FACECAST_STILL_ENCODER", which, 1);
  memset(c, 0, sizeof *c);
  c->w = W, c->h = H;
  c->rec = calloc(N, sizeof *c->rec);
  for (int i = 0; i < W * H; i++) base[i] = (uint8_t)(40 + (i % W) * 150 / W + (i / W) % 7);
  memset(base + W * H, 120, W * H / 2);
  int err = 0;
  const fc_x264_config xc = {.preset = "ultrafast", .threads = 1, .keyint = KEYINT, .qp = 20};
  GstElement *pipe = gst_pipeline_new(NULL), *src = gst_element_factory_make("appsrc", NULL),
             *enc = fc_x264enc_new(&xc, &err), *sink = gst_element_factory_make("appsink", NULL);
  unsetenv("FACECAST_STILL_ENCODER");
  if (!pipe || !src || !enc || !sink) return 0;
  gst_bin_add_many(GST_BIN(pipe), src, enc, sink, NULL);
  GstCaps *raw = gst_caps_new_simple("video/x-raw", "format", G_TYPE_STRING, "I420", "width",
                                     G_TYPE_INT, W, "height", G_TYPE_INT, H, "framerate",
                                     GST_TYPE_FRACTION, 25, 1, NULL);
  g_object_set(src, "caps", raw, "format", GST_FORMAT_TIME, NULL);
  g_object_set(sink, "sync", FALSE, NULL);
  gst_caps_unref(raw);
  if (!gst_element_link_many(src, enc, sink, NULL) ||
      gst_element_set_state(pipe, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE)
    return 0;
  int keys = 0, out = 0, key_at[N];
  for (int k = 0; k < N; k++) {
    if (k == 10) { /* a viewer's request (PLI) once the first 10 are out */
      for (; out < 10; out++) pull_one(sink, c, &keys, key_at, out);
      gst_element_send_event(sink, gst_video_event_new_upstream_force_key_unit(GST_CLOCK_TIME_NONE, TRUE, 1));
    }
    uint8_t *pic = malloc(sizeof base);
    memcpy(pic, base, sizeof base);
    const int described = k < 25 || k >= 35;
    const fc_rect r = {64 + (k % 8) * 8, 80, 48, 40};
    if (described) {
      for (int y = r.y; y < r.y + r.h; y++)
        for (int x = r.x; x < r.x + r.w; x++) pic[y * W + x] = (uint8_t)(30 + 5 * k + (x * y) % 23);
    } else { /* another picture altogether */
      for (int i = 0; i < W * H; i++) pic[i] = (uint8_t)(200 - (i % W) * 150 / W + k);
    }
    c->rec[c->n++] = pic;
    GstBuffer *buf = gst_buffer_new_memdup(pic, sizeof base);
    if (described) {
      fc_i420_delta *d = g_new(fc_i420_delta, 1);
      *d = (fc_i420_delta){.base = base, .changed = r};
      gst_mini_object_set_qdata(GST_MINI_OBJECT(buf), fc_x264_delta_quark(), d, g_free);
      FC_TSAN_RELEASE(d);
    }
    GST_BUFFER_PTS(buf) = gst_util_uint64_scale(k, GST_SECOND, 25);
    GST_BUFFER_DURATION(buf) = GST_SECOND / 25;
    FC_CHECK(gst_app_src_push_buffer(GST_APP_SRC(src), buf) == GST_FLOW_OK);
  }
  gst_app_src_end_of_stream(GST_APP_SRC(src));
  while (out < N && pull_one(sink, c, &keys, key_at, out)) out++;
  gst_element_set_state(pipe, GST_STATE_NULL);
  gst_object_unref(pipe);
  int n = 0;
  const int close = decode_within(c, "avdec_h264", &n, 2.0);
  fprintf(stderr, "  switches (%s): %d pictures out, %d key frames, %zu bytes, %d of %d decoded "
          "within 2 levels\n", which, out, keys, c->size, close, N);
  FC_CHECK_INT(out, ==, N);
  FC_CHECK_INT(n, ==, N);
  FC_CHECK_INT(close, ==, N);
  /* own: 0, the request's (10), 25 where the still goes away, then x264 holds until its own
   * next key frame (45, keyint after 25) — keyint's 30 never comes; x264 alone: 0, 10, 30, 50
   * (keyint counts from the requested one) */
  char ks[128] = "";
  for (int i = 0; i < keys; i++) snprintf(ks + strlen(ks), sizeof ks - strlen(ks), " %d", key_at[i]);
  fprintf(stderr, "  key frames at%s\n", ks);
  const int own = strcmp(which, "x264") != 0;
  FC_CHECK_INT(keys, ==, 4);
  FC_CHECK(keys >= 4 && key_at[0] == 0 && key_at[1] >= 10 && key_at[1] <= 12);
  FC_CHECK(keys >= 4 && (own ? key_at[2] == 25 && key_at[3] == 45 : key_at[2] == key_at[1] + 20));
  return c->size;
}

static void test_element_switches(void) {
  clip own, x;
  const size_t a = element_switches("auto", &own), b = element_switches("x264", &x);
  FC_CHECK(a > 0 && b > 0);
  /* the same pictures: the P pictures of the still were not x264's */
  FC_CHECK(a != b || memcmp(own.stream, x.stream, a) != 0);
  free_clip(&own);
  free_clip(&x);
}

int main(void) {
  gst_init(NULL, NULL);
  FC_RUN(test_simd_parity);
  FC_RUN(test_refusals);
  FC_RUN(test_decodes_exactly);
  FC_RUN(test_busy_residual);
  FC_RUN(test_720p);
  FC_RUN(test_element_switches);
  FC_TEST_EXIT();
}
