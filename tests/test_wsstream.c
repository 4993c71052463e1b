/* The WebSocket stream's output alone (media/wsstream.h; tests/e2e_wsstream.sh has the server
 * and ffmpeg): the header's bytes; its parameters checked; frames pushed at a few per 40 ms
 * give one audio message per frame as pushed and one access unit per frame (frames without a
 * picture repeat the last), in order, stamped index·40000 µs, the first a key frame with SPS
 * and PPS, then one every 50 frames and one on request; nothing after destroy. */
#include "facecast/error.h"
#include "fc_test.h"
#include "media/sink.h"
#include "media/wsstream.h"

#include <glib.h>
#include <string.h>

#define W 96
#define H 64
#define SPF 640
#define MAX_MSG 400

typedef struct seen {
  GMutex lock;
  int n_video, n_audio;
  uint32_t vindex[MAX_MSG], aindex[MAX_MSG];
  int64_t vpts[MAX_MSG], apts[MAX_MSG];
  int vkey[MAX_MSG], sps_before_key, bad_header, audio_bytes_ok;
} seen;

/* Whether Annex B access unit p holds a NAL unit of type t. */
static int has_nal(const uint8_t *p, size_t n, int t) {
  for (size_t i = 0; i + 3 < n; i++)
    if (p[i] == 0 && p[i + 1] == 0 && p[i + 2] == 1 && (p[i + 3] & 0x1f) == t) return 1;
  return 0;
}

static void on_message(void *user, const uint8_t *hdr, const uint8_t *p, size_t n, int kind,
                       int flags) {
  seen *s = user;
  g_mutex_lock(&s->lock);
  uint32_t index = 0;
  int64_t pts = 0;
  for (int i = 0; i < 4; i++) index |= (uint32_t)hdr[4 + i] << (8 * i);
  for (int i = 0; i < 8; i++) pts |= (int64_t)((uint64_t)hdr[8 + i] << (8 * i));
  if (hdr[0] != kind || hdr[1] != flags || hdr[2] != FC_WSS_HEADER_BYTES || hdr[3]) s->bad_header++;
  if (kind == FC_WSS_VIDEO && s->n_video < MAX_MSG) {
    s->vindex[s->n_video] = index;
    s->vpts[s->n_video] = pts;
    s->vkey[s->n_video] = flags & FC_WSS_KEY;
    /* Annex B, and a key frame carries its SPS and PPS (NAL types 7 and 8) */
    if ((flags & FC_WSS_KEY) && n > 5 && !memcmp(p, "\0\0\0\1", 4) && has_nal(p, n, 7) &&
        has_nal(p, n, 8))
      s->sps_before_key++;
    s->n_video++;
  } else if (kind == FC_WSS_AUDIO && s->n_audio < MAX_MSG) {
    s->aindex[s->n_audio] = index;
    s->apts[s->n_audio] = pts;
    s->audio_bytes_ok += n == SPF * 2 && ((const int16_t *)(const void *)p)[1] == (int16_t)index;
    s->n_audio++;
  }
  g_mutex_unlock(&s->lock);
}

static void test_header(void) {
  uint8_t h[FC_WSS_HEADER_BYTES];
  fc_wss_header(h, FC_WSS_VIDEO, FC_WSS_KEY, 0x01020304u, 40000LL * 0x01020304LL);
  const uint8_t want[] = {1, 1, 16, 0, 4, 3, 2, 1};
  FC_CHECK(memcmp(h, want, sizeof want) == 0);
  int64_t pts = 0;
  for (int i = 0; i < 8; i++) pts |= (int64_t)((uint64_t)h[8 + i] << (8 * i));
  FC_CHECK_INT(pts, ==, 40000LL * 0x01020304LL);
}

static void test_bad_params(void) {
  seen s = {0};
  fc_wss *w = NULL;
  int err = 0;
  fc_wss_params p = {.width = 95, .height = H, .on_message = on_message, .user = &s};
  FC_CHECK(fc_wss_sink_create(&p, &w, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p.width = W;
  p.on_message = NULL;
  FC_CHECK(fc_wss_sink_create(&p, &w, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p.on_message = on_message;
  p.x264_preset = "warp";
  FC_CHECK(fc_wss_sink_create(&p, &w, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
}

static void test_stream(void) {
  seen s = {0};
  g_mutex_init(&s.lock);
  fc_wss *w = NULL;
  int err = 0;
  const fc_wss_params p = {.width = W, .height = H, .on_message = on_message, .user = &s};
  fc_sink *q = fc_wss_sink_create(&p, &w, &err);
  FC_CHECK(q != NULL && w != NULL);
  if (!q) return;
  static uint8_t pic[W * H * 3 / 2];
  static int16_t pcm[SPF];
  const int frames = 120, first = 7, ask_at = 70;
  for (int i = first; i < first + frames; i++) {
    /* a small square moving on grey: not a scene change, which x264 would code as a key frame */
    memset(pic, 128, sizeof pic);
    for (int y = 0; y < 8; y++) memset(pic + (size_t)(y + 20) * W + (i % 80), 230, 8);
    for (int k = 0; k < SPF; k++) pcm[k] = (int16_t)(k == 1 ? i : (k * 31) % 500);
    const fc_sink_frame f = {.index = i,
                             .i420 = i % 3 ? NULL : pic, /* the first has none: nothing to show */
                             .pcm = pcm,
                             .n_samples = SPF,
                             .first_sample = (int64_t)i * SPF};
    FC_CHECK_INT(fc_sink_push(q, &f), ==, 0);
    if (i == ask_at) fc_wss_request_keyframe(w);
    g_usleep(5000);
  }
  for (int t = 0; t < 200; t++) { /* the encoder catches up */
    g_mutex_lock(&s.lock);
    const int n = s.n_video;
    g_mutex_unlock(&s.lock);
    if (n >= frames - 2) break;
    g_usleep(20000);
  }
  fc_sink_stats st = {0};
  fc_sink_get_stats(q, &st);
  fc_sink_destroy(q);
  const int after = s.n_video + s.n_audio;
  g_usleep(50000);
  FC_CHECK_INT(s.n_video + s.n_audio, ==, after); /* nothing after destroy */
  FC_CHECK_INT(s.bad_header, ==, 0);
  FC_CHECK_INT(s.n_audio, ==, frames);
  FC_CHECK_INT(s.audio_bytes_ok, ==, frames);
  for (int i = 0; i < s.n_audio; i++) {
    FC_CHECK_INT(s.aindex[i], ==, first + i);
    FC_CHECK_INT(s.apts[i], ==, (int64_t)(first + i) * 40000);
  }
  /* pictures from the first frame with one (index 9), every frame after it */
  FC_CHECK_INT(s.n_video, >=, frames - 2 - 8); /* appsrc may drop its oldest under load */
  FC_CHECK_INT(s.vindex[0], ==, 9);
  FC_CHECK(s.vkey[0]);
  int keys = 0, asked = 0;
  for (int i = 0; i < s.n_video; i++) {
    FC_CHECK_INT(s.vpts[i], ==, (int64_t)s.vindex[i] * 40000);
    if (i) FC_CHECK_INT(s.vindex[i], >, s.vindex[i - 1]);
    if (!s.vkey[i]) continue;
    keys++;
    /* 50 after the first (9), or within a few frames of the request (at 70) */
    if (s.vindex[i] != 9 && s.vindex[i] != 59 && s.vindex[i] >= 70 && s.vindex[i] <= 80) asked++;
  }
  FC_CHECK_INT(asked, ==, 1);
  FC_CHECK_INT(s.sps_before_key, ==, keys);
  FC_CHECK_INT(st.keyframes, ==, keys);
  FC_CHECK_INT(st.frames_encoded, ==, s.n_video);
  g_mutex_clear(&s.lock);
}

int main(void) {
  FC_RUN(test_header);
  FC_RUN(test_bad_params);
  FC_RUN(test_stream);
  FC_TEST_EXIT();
}
