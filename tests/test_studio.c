/* Avatar studio: the quality gate on degraded copies of the default portrait (each reason is
 * triggered by the degradation made for it, and the untouched portrait passes), avatar packs
 * made from a photo and from a video (round trip through fc_avatar_open_pack and the
 * compositor), and the CLI (create, list, show, refusals and corrupt packs). */
#include "studio/studio_internal.h"
#include "facecast/avatar.h"
#include "compose/compose.h"
#include "facecast/error.h"
#include "avatar/pack.h"
#include "facecast/stream.h"
#include "studio/studio.h"
#include "fc_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define ASTRONAUT "/usr/lib/python3/dist-packages/skimage/data/astronaut.png"

static fc_face_models g_m;
static fc_image g_src;
static char g_tmp[256];

static const char *tmpdir(void) {
  if (!g_tmp[0]) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fc_test_studio_XXXXXX");
    if (!mkdtemp(g_tmp)) g_tmp[0] = 0;
  }
  return g_tmp;
}

static int setup(void) {
  if (g_m.haar) return 0;
  int err = fc_face_models_load(&g_m);
  if (err) {
    fprintf(stderr, "  cannot load the face models (run scripts/deps.sh): %s\n", fc_error_detail(err));
    return err;
  }
  return fc_image_load(ASTRONAUT, &g_src);
}

static fc_quality check(const fc_image *img) {
  fc_quality q;
  memset(&q, 0, sizeof q);
  fc_quality_check_frame(&g_m, img, &q);
  fc_quality_finish(&q, 1);
  return q;
}

static void print_q(const char *what, const fc_quality *q) {
  fprintf(stderr, "  %-14s face %3.0f px sharp %6.1f luma %5.1f±%4.1f yaw %5.1f:", what, q->face_px,
          q->sharpness, q->luma_mean, q->luma_std, q->yaw_deg);
  int any = 0;
  for (int r = 0; r < FC_Q_COUNT; r++)
    if (q->blocking[r]) fprintf(stderr, " %s", fc_quality_key(r)), any = 1;
  fprintf(stderr, "%s\n", any ? "" : " ok");
}

/* A copy of the portrait with f applied to every pixel value. */
static void remap(const fc_image *src, fc_image *dst, double mul, double add) {
  fc_image_alloc(dst, src->w, src->h);
  for (int y = 0; y < src->h; y++)
    for (int x = 0; x < 3 * src->w; x++) {
      double v = src->rgb[(size_t)y * src->stride + x] * mul + add;
      dst->rgb[(size_t)y * dst->stride + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

static void blur(const fc_image *src, fc_image *dst, int r) {
  fc_image tmp;
  fc_image_alloc(&tmp, src->w, src->h);
  fc_image_alloc(dst, src->w, src->h);
  for (int pass = 0; pass < 2; pass++) {
    const fc_image *in = pass ? &tmp : src;
    fc_image *out = pass ? dst : &tmp;
    for (int y = 0; y < src->h; y++)
      for (int x = 0; x < src->w; x++)
        for (int c = 0; c < 3; c++) {
          int s = 0, n = 0;
          for (int k = -r; k <= r; k++) {
            int xx = pass ? x : x + k, yy = pass ? y + k : y;
            if (xx < 0 || yy < 0 || xx >= src->w || yy >= src->h) continue;
            s += in->rgb[(size_t)yy * in->stride + 3 * xx + c], n++;
          }
          out->rgb[(size_t)y * out->stride + 3 * x + c] = (uint8_t)(s / n);
        }
  }
  fc_image_free(&tmp);
}

/* The face box and landmarks of the untouched portrait. */
static fc_rect g_face;
static fc_point g_pts[FC_LANDMARKS];

static void test_gate_reasons(void) {
  FC_REQUIRE(setup() == 0);
  fc_quality q = check(&g_src);
  print_q("original", &q);
  FC_CHECK(!fc_quality_failed(&q));
  FC_CHECK(q.face_px >= 90 && q.face_px <= 100);
  FC_CHECK(fabs(q.yaw_deg) < 15);

  fc_image im = {0};
  /* no face: a flat grey picture */
  fc_image_alloc(&im, 320, 240);
  memset(im.rgb, 128, (size_t)im.stride * im.h);
  q = check(&im);
  print_q("no face", &q);
  FC_CHECK(q.blocking[FC_Q_NO_FACE]);
  FC_CHECK(strstr(q.message[FC_Q_NO_FACE], "no face") != NULL);
  fc_image_free(&im);

  /* several faces: the portrait twice, side by side */
  fc_image_alloc(&im, 2 * g_src.w, g_src.h);
  for (int y = 0; y < g_src.h; y++)
    for (int k = 0; k < 2; k++)
      memcpy(im.rgb + (size_t)y * im.stride + (size_t)k * 3 * g_src.w, g_src.rgb + (size_t)y * g_src.stride,
             (size_t)3 * g_src.w);
  q = check(&im);
  print_q("two faces", &q);
  FC_CHECK(q.blocking[FC_Q_MANY_FACES]);
  fc_image_free(&im);

  /* small face: the portrait at half size (the face ~47 px) */
  fc_image_alloc(&im, g_src.w / 2, g_src.h / 2);
  fc_image_resize_region(&g_src, (fc_rect){0, 0, g_src.w, g_src.h}, &im);
  q = check(&im);
  print_q("half size", &q);
  FC_CHECK(q.blocking[FC_Q_FACE_SMALL]);
  FC_CHECK(strstr(q.message[FC_Q_FACE_SMALL], "96 px") != NULL);
  fc_image_free(&im);

  blur(&g_src, &im, 3);
  q = check(&im);
  print_q("blurred", &q);
  FC_CHECK(q.blocking[FC_Q_BLURRED]);
  fc_image_free(&im);

  remap(&g_src, &im, 0.2, 0);
  q = check(&im);
  print_q("dark", &q);
  FC_CHECK(q.blocking[FC_Q_DARK]);
  fc_image_free(&im);

  remap(&g_src, &im, 0.45, 150);
  q = check(&im);
  print_q("bright", &q);
  FC_CHECK(q.blocking[FC_Q_BRIGHT]);
  fc_image_free(&im);

  remap(&g_src, &im, 0.18, 105);
  q = check(&im);
  print_q("flat", &q);
  FC_CHECK(q.blocking[FC_Q_LOW_CONTRAST]);
  FC_CHECK(!q.blocking[FC_Q_DARK] && !q.blocking[FC_Q_BRIGHT]);
  fc_image_free(&im);
}

/* Needs the landmarks of the original for the next two degradations. */
static void find_original(void) {
  fc_quality q;
  memset(&q, 0, sizeof q);
  g_face = (fc_rect){0};
  fc_quality_measure(&g_m, &g_src, &q, &g_face, g_pts);
}

static void test_gate_turned_and_mouth(void) {
  FC_REQUIRE(setup() == 0);
  find_original();
  FC_REQUIRE(g_face.w > 0);
  fc_image im = {0};
  /* a turned head, as a camera sees it: the far half of the face foreshortened. Columns from
   * the face's left edge to the nose are squeezed towards the left edge (x' = x0 + 0.35 (x - x0))
   * and the gap filled by stretching the right half; the rest of the picture stays. */
  fc_image_alloc(&im, g_src.w, g_src.h);
  memcpy(im.rgb, g_src.rgb, (size_t)g_src.stride * g_src.h);
  int x0 = g_face.x, x1 = g_face.x + g_face.w, xn = (int)g_pts[30].x;
  int xm = x0 + (int)(0.35 * (xn - x0));
  for (int y = g_face.y - g_face.h / 4; y < g_face.y + g_face.h * 5 / 4 && y < g_src.h; y++)
    for (int x = x0; x < x1; x++) {
      double sx = x < xm ? x0 + (x - x0) / 0.35 : xn + (double)(x - xm) * (x1 - xn) / (x1 - xm);
      int si = (int)sx < g_src.w - 1 ? (int)sx : g_src.w - 1;
      memcpy(im.rgb + (size_t)y * im.stride + 3 * x, g_src.rgb + (size_t)y * g_src.stride + 3 * si, 3);
    }
  fc_quality q = check(&im);
  print_q("turned", &q);
  FC_CHECK(q.blocking[FC_Q_TURNED]);
  /* a covered mouth: the lips' box painted in the skin colour next to it */
  memcpy(im.rgb, g_src.rgb, (size_t)g_src.stride * g_src.h);
  int mx0 = (int)g_pts[48].x - 6, mx1 = (int)g_pts[54].x + 6;
  int my0 = (int)fminf(g_pts[50].y, g_pts[52].y) - 6, my1 = (int)g_pts[57].y + 6;
  const uint8_t *skin = g_src.rgb + (size_t)(my0 - 10) * g_src.stride + 3 * (mx0 - 10);
  for (int y = my0; y <= my1; y++)
    for (int x = mx0; x <= mx1; x++) memcpy(im.rgb + (size_t)y * im.stride + 3 * x, skin, 3);
  q = check(&im);
  print_q("mouth covered", &q);
  FC_CHECK(q.blocking[FC_Q_MOUTH_HIDDEN]);
  fc_image_free(&im);
}

static void test_photo_pack(void) {
  FC_REQUIRE(setup() == 0);
  fc_studio_params p = {.from = ASTRONAUT, .id = "astro", .out_dir = tmpdir(), .models = &g_m};
  fc_studio_result res;
  int err = fc_studio_create(&p, &res);
  if (err) fprintf(stderr, "  %s\n", fc_error_detail(err));
  FC_REQUIRE(err == 0);
  fprintf(stderr, "  photo pack: %d frame %dx%d in %.2f s -> %s\n", res.frames, res.width,
          res.height, res.seconds_taken, res.path);
  FC_CHECK_INT(res.frames, ==, 1);
  fc_pack *pk = fc_pack_open(res.path, &err);
  FC_REQUIRE(pk);
  const fc_pack_info *in = fc_pack_get_info(pk);
  FC_CHECK_INT(in->width, ==, 512);
  FC_CHECK_INT(in->ncrops, ==, 2);
  fc_pack_frame f;
  FC_REQUIRE(fc_pack_get_frame(pk, 0, &f) == 0);
  /* the framed face is ~36 % of the frame: box and mouth where a face has them */
  FC_CHECK(f.box.w > 150 && f.box.w < 260);
  FC_CHECK(f.landmarks[57].y > f.landmarks[51].y && f.landmarks[54].x > f.landmarks[48].x);
  FC_CHECK(f.landmarks[57].y < f.box.y + f.box.h && f.landmarks[8].y <= f.box.y + f.box.h);
  /* the mask covers the mouth, not the eyes */
  int s = in->crop_size[0];
  float mx = (f.landmarks[62].x - f.box.x) * s / f.box.w, my = (f.landmarks[62].y - f.box.y) * s / f.box.h;
  float ex = (f.landmarks[37].x - f.box.x) * s / f.box.w, ey = (f.landmarks[37].y - f.box.y) * s / f.box.h;
  FC_CHECK(f.mask[0][(int)my * s + (int)mx] > 200);
  FC_CHECK(f.mask[0][(int)ey * s + (int)ex] < 20);
  FC_CHECK(strstr(fc_pack_meta_json(pk), "\"photo\"") != NULL);
  fc_pack_close(pk);

  /* as an avatar: geometry from the landmarks, frames compose */
  fc_avatar *av = fc_avatar_open_pack(res.path, &err);
  FC_REQUIRE(av);
  FC_CHECK(strcmp(fc_avatar_id(av), "astro") == 0);
  const fc_mouth_geom *g = fc_avatar_mouth(av, 0);
  fprintf(stderr, "  mouth from landmarks: centre %.1f,%.1f half width %.1f gap %.1f\n", g->cx, g->cy,
          g->half_w, g->rest_gap);
  FC_CHECK(g->half_w > 15 && g->half_w < 60);
  uint8_t *dst = malloc(512 * 512 * 3 / 2), *scratch = malloc(512 * 512 * 3);
  FC_REQUIRE(dst && scratch);
  FC_CHECK_INT(fc_compose_i420(av, 0, NULL, dst, scratch), ==, 0);
  FC_CHECK(fc_avatar_frame_i420(av, 0) == NULL); /* a pack's frames are tiles */
  FC_REQUIRE(fc_avatar_copy_i420(av, 0, scratch) == 0);
  FC_CHECK(memcmp(dst, scratch, 512 * 512 * 3 / 2) == 0);
  free(dst), free(scratch);
  fc_avatar_destroy(av);
}

static void test_video_pack(void) {
  FC_REQUIRE(setup() == 0);
  char mp4[512], cmd[1200];
  snprintf(mp4, sizeof mp4, "%s/talk.mp4", tmpdir());
  /* 2 s of the portrait as H.264 at 30 fps (the studio resamples to 25) */
  snprintf(cmd, sizeof cmd,
           "ffmpeg -y -loglevel error -loop 1 -i %s -t 2 -r 30 -c:v libx264 -preset ultrafast "
           "-pix_fmt yuv420p %s", ASTRONAUT, mp4);
  FC_REQUIRE(system(cmd) == 0);
  fc_studio_params p = {.from = mp4, .id = "talk", .out_dir = tmpdir(), .models = &g_m, .crop_size = 96};
  fc_studio_result res;
  int err = fc_studio_create(&p, &res);
  if (err) fprintf(stderr, "  %s\n", fc_error_detail(err));
  FC_REQUIRE(err == 0);
  fprintf(stderr, "  video pack: %d frames %dx%d in %.2f s (%.1f frames/s)\n", res.frames, res.width,
          res.height, res.seconds_taken, res.frames / res.seconds_taken);
  FC_CHECK(res.frames >= 48 && res.frames <= 52);
  FC_CHECK_INT(res.width, ==, 512);
  fc_pack *pk = fc_pack_open(res.path, &err);
  FC_REQUIRE(pk);
  FC_CHECK_INT(fc_pack_get_info(pk)->ncrops, ==, 1);
  FC_CHECK_INT(fc_pack_get_info(pk)->crop_size[0], ==, 96);
  FC_CHECK_INT(fc_pack_verify(pk), ==, 0);
  fc_pack_frame a, b;
  FC_REQUIRE(fc_pack_get_frame(pk, 0, &a) == 0 && fc_pack_get_frame(pk, res.frames - 1, &b) == 0);
  FC_CHECK(abs(a.box.x - b.box.x) <= 4 && abs(a.box.w - b.box.w) <= 4); /* a still face: stable */
  fc_pack_close(pk);

  /* refused material writes nothing: a video of a flat grey picture */
  snprintf(mp4, sizeof mp4, "%s/grey.mp4", tmpdir());
  snprintf(cmd, sizeof cmd,
           "ffmpeg -y -loglevel error -f lavfi -i color=gray:s=320x240:d=0.8 -c:v libx264 "
           "-preset ultrafast -pix_fmt yuv420p %s", mp4);
  FC_REQUIRE(system(cmd) == 0);
  p.from = mp4, p.id = "grey";
  err = fc_studio_create(&p, &res);
  FC_CHECK_INT(err, ==, FC_ENOFACE);
  FC_CHECK(res.quality.blocking[FC_Q_NO_FACE]);
  char path[600];
  snprintf(path, sizeof path, "%s/grey.fcpack", tmpdir());
  FC_CHECK(access(path, F_OK) != 0);
  /* not a video at all */
  p.from = ASTRONAUT ".nope", p.id = "x";
  FC_CHECK_INT(fc_studio_create(&p, &res), ==, FC_ENOTFOUND);
  p.from = "/etc/hostname", p.id = "x"; /* the input's fault: exit 2 on the command line */
  FC_CHECK_INT(fc_studio_create(&p, &res), ==, FC_EFORMAT);
  p.from = ASTRONAUT, p.id = "bad id!";
  FC_CHECK_INT(fc_studio_create(&p, &res), ==, FC_EINVAL);
}

/* A video avatar with an action clip: the pack holds "idle" and "wave" (with its audio at 16 kHz),
 * the avatar loops only the idle frames, and a stream plays the clip in idle time, once, with
 * its audio, until speech cuts it. */
static void test_clips(void) {
  FC_REQUIRE(setup() == 0);
  char main_mp4[512], clip_mp4[512], cmd[1400];
  snprintf(main_mp4, sizeof main_mp4, "%s/talk.mp4", tmpdir()); /* made by test_video_pack */
  snprintf(clip_mp4, sizeof clip_mp4, "%s/wave.mp4", tmpdir());
  snprintf(cmd, sizeof cmd,
           "ffmpeg -y -loglevel error -loop 1 -i %s -f lavfi -i sine=frequency=500:sample_rate=44100 "
           "-t 1.2 -r 25 -c:v libx264 -preset ultrafast -pix_fmt yuv420p -c:a aac -shortest %s",
           ASTRONAUT, clip_mp4);
  FC_REQUIRE(system(cmd) == 0);
  fc_studio_params p = {.from = main_mp4, .id = "clipper", .out_dir = tmpdir(), .models = &g_m,
                        .crop_size = 96, .nclips = 1};
  p.clip_name[0] = "wave", p.clip_file[0] = clip_mp4;
  fc_studio_result res;
  int err = fc_studio_create(&p, &res);
  if (err) fprintf(stderr, "  %s\n", fc_error_detail(err));
  FC_REQUIRE(err == 0);
  fc_pack *pk = fc_pack_open(res.path, &err);
  FC_REQUIRE(pk);
  FC_CHECK_INT(fc_pack_clip_count(pk), ==, 2);
  fc_pack_clip idle, wave;
  FC_REQUIRE(fc_pack_get_clip(pk, fc_pack_find_clip(pk, "idle"), &idle) == 0);
  FC_REQUIRE(fc_pack_get_clip(pk, fc_pack_find_clip(pk, "wave"), &wave) == 0);
  fprintf(stderr, "  clips: idle %d+%d, wave %d+%d, audio %lld samples at %d Hz\n", idle.first,
          idle.count, wave.first, wave.count, (long long)wave.audio_frames, wave.audio_rate);
  FC_CHECK(idle.first == 0 && idle.count >= 48 && wave.first == idle.count);
  FC_CHECK(wave.count >= 29 && wave.count <= 31);
  FC_CHECK(wave.audio_rate == 16000 && wave.audio_channels == 1);
  FC_CHECK(wave.audio_frames > 16000 && wave.audio_frames < 21000);
  fc_pack_close(pk);

  fc_avatar *av = fc_avatar_open_pack(res.path, &err);
  FC_REQUIRE(av);
  FC_CHECK_INT(fc_avatar_frame_count(av), ==, idle.count);
  FC_CHECK_INT(fc_avatar_clip_count(av), ==, 1);
  FC_CHECK_INT(fc_avatar_find_clip(av, "wave"), ==, 0);
  FC_CHECK_INT(fc_avatar_find_clip(av, "jump"), ==, FC_ENOTFOUND);
  fc_lipsync *ls = fc_lipsync_create(NULL, &err);
  FC_REQUIRE(ls);
  fc_stream_params sp = {.avatar = av, .lipsync = ls, .batch = 4};
  fc_stream *st = fc_stream_create(&sp, &err);
  FC_REQUIRE(st);
  fc_frame_info info;
  const uint8_t *img;
  const int16_t *pcm;
  size_t fsz = (size_t)fc_avatar_width(av) * fc_avatar_height(av) * 3 / 2;
  uint8_t *want = malloc(fsz);
  FC_REQUIRE(want);
  FC_REQUIRE(fc_stream_idle_frame(st, &info, &img, &pcm) == 0);
  FC_REQUIRE(fc_avatar_copy_i420(av, 0, want) == 0);
  FC_CHECK(memcmp(img, want, fsz) == 0); /* a recorded avatar rests as recorded */
  FC_CHECK_INT(fc_stream_play_clip(st, 3), ==, FC_EINVAL);
  FC_REQUIRE(fc_stream_play_clip(st, 0) == 0);
  int frames = 0, loud = 0;
  const int16_t *clip_pcm;
  size_t clip_n;
  fc_avatar_clip_info(av, 0, &frames, &clip_pcm, &clip_n);
  for (int k = 0; k < frames; k++) {
    FC_REQUIRE(fc_stream_idle_frame(st, &info, &img, &pcm) == 0);
    if (fc_avatar_clip_copy_i420(av, 0, k, want) || memcmp(img, want, fsz) != 0) break;
    int peak = 0;
    for (int i = 0; i < 640; i++) peak = abs(pcm[i]) > peak ? abs(pcm[i]) : peak;
    loud += peak > 3000;
    if (k == frames - 1) FC_CHECK_INT(fc_stream_clip_playing(st), ==, -1);
  }
  FC_REQUIRE(fc_avatar_clip_copy_i420(av, 0, frames - 1, want) == 0);
  FC_CHECK(memcmp(img, want, fsz) == 0);
  FC_CHECK_INT(fc_avatar_clip_copy_i420(av, 0, frames, want), ==, FC_EINVAL);
  FC_CHECK(loud >= frames - 3); /* the clip's tone, frame after frame */
  FC_REQUIRE(fc_stream_idle_frame(st, &info, &img, &pcm) == 0); /* back to the idle loop */
  FC_REQUIRE(fc_avatar_copy_i420(av, (int)info.index, want) == 0);
  FC_CHECK(memcmp(img, want, fsz) == 0);
  FC_CHECK(pcm[100] == 0 && pcm[300] == 0);
  /* speech cuts a clip */
  FC_REQUIRE(fc_stream_play_clip(st, 0) == 0);
  FC_REQUIRE(fc_stream_idle_frame(st, &info, &img, &pcm) == 0);
  float speech[1280] = {0};
  FC_REQUIRE(fc_stream_push_speech(st, speech, 1280, NULL, 0, NULL) == 0);
  FC_REQUIRE(fc_stream_next_frame(st, &info, &img, &pcm) == 0);
  FC_CHECK_INT(fc_stream_clip_playing(st), ==, -1);
  fc_stream_destroy(st);
  fc_lipsync_destroy(ls);
  fc_avatar_destroy(av);
  free(want);
  /* clips need a video avatar and proper names */
  p.from = ASTRONAUT;
  FC_CHECK_INT(fc_studio_create(&p, &res), ==, FC_EINVAL);
  p.from = main_mp4, p.clip_name[0] = "idle";
  FC_CHECK_INT(fc_studio_create(&p, &res), ==, FC_EINVAL);
  p.clip_name[0] = "wave", p.clip_file[0] = "/no/such.mp4";
  FC_CHECK_INT(fc_studio_create(&p, &res), ==, FC_ENOTFOUND);
}

static long status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0) v = strtol(line + n, NULL, 10);
  if (f) fclose(f);
  return v;
}

/* Two sessions on one video avatar: the second adds next to nothing. Each stream shows every
 * frame of the loop; the frames (20 MB of I420 here) stay in the pack's shared mapping and the
 * face regions in the one avatar, so private memory grows by the streams' own buffers only. */
static void test_sessions_share(void) {
  FC_REQUIRE(setup() == 0);
  char mp4[512], cmd[1400];
  snprintf(mp4, sizeof mp4, "%s/zoom.mp4", tmpdir());
  /* every frame different: the portrait slowly zooming */
  snprintf(cmd, sizeof cmd,
           "ffmpeg -y -loglevel error -loop 1 -i %s -vf \"zoompan=z='1+0.004*on':d=1:s=512x512:fps=25\" "
           "-frames:v 40 -c:v libx264 -preset ultrafast -crf 12 -pix_fmt yuv420p %s", ASTRONAUT, mp4);
  FC_REQUIRE(system(cmd) == 0);
  fc_studio_params p = {.from = mp4, .id = "zoom", .out_dir = tmpdir(), .models = &g_m, .crop_size = 96};
  fc_studio_result res;
  int err = fc_studio_create(&p, &res);
  if (err) fprintf(stderr, "  %s\n", fc_error_detail(err));
  FC_REQUIRE(err == 0);
  fc_lipsync *ls = fc_lipsync_create(NULL, &err);
  FC_REQUIRE(ls);
  long anon[3], file[3];
  anon[0] = status_kb("RssAnon:"), file[0] = status_kb("RssFile:");
  fc_avatar *av = fc_avatar_open_pack(res.path, &err);
  FC_REQUIRE(av);
  size_t frame = (size_t)fc_avatar_width(av) * fc_avatar_height(av) * 3 / 2;
  fc_stream *st[2] = {0};
  for (int k = 0; k < 2; k++) {
    fc_stream_params sp = {.avatar = av, .lipsync = ls, .batch = 4};
    st[k] = fc_stream_create(&sp, &err);
    FC_REQUIRE(st[k]);
    unsigned sum = 0;
    for (int i = 0; i < 2 * fc_avatar_frame_count(av); i++) {
      fc_frame_info info;
      const uint8_t *img;
      const int16_t *pcm;
      FC_REQUIRE(fc_stream_idle_frame(st[k], &info, &img, &pcm) == 0);
      for (size_t b = 0; b < frame; b += 4096) sum += img[b]; /* touch every page */
    }
    FC_CHECK(sum > 0);
    anon[k + 1] = status_kb("RssAnon:"), file[k + 1] = status_kb("RssFile:");
  }
  double frames_mb = fc_avatar_frame_count(av) * frame / 1048576.0;
  fprintf(stderr, "  %d frames (%.1f MB of I420): private +%.1f MB for the avatar and session 1, "
          "+%.1f MB for session 2; file pages +%.1f MB, then +%.1f MB\n", fc_avatar_frame_count(av), frames_mb,
          (anon[1] - anon[0]) / 1024.0, (anon[2] - anon[1]) / 1024.0, (file[1] - file[0]) / 1024.0,
          (file[2] - file[1]) / 1024.0);
  FC_CHECK((file[1] - file[0]) / 1024.0 > 0.5 * frames_mb); /* the first really read them */
  FC_CHECK((anon[2] - anon[1]) / 1024.0 < 0.1 * frames_mb);
  FC_CHECK((file[2] - file[1]) / 1024.0 < 0.1 * frames_mb);
  for (int k = 0; k < 2; k++) fc_stream_destroy(st[k]);
  fc_lipsync_destroy(ls);
  fc_avatar_destroy(av);
}

static int run_cli(const char *args, char *out, size_t n) {
  char cmd[2048], log[600];
  snprintf(log, sizeof log, "%s/cli.out", tmpdir());
  snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>&1", FC_BINARY, args, log);
  int rc = system(cmd);
  FILE *f = fopen(log, "r");
  size_t k = f ? fread(out, 1, n - 1, f) : 0;
  out[k] = 0;
  if (f) fclose(f);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_cli(void) {
  FC_REQUIRE(setup() == 0);
  char args[1024], out[65536];
  snprintf(args, sizeof args, "avatar create --from %s --id cli1 --size 256 --out-dir %s", ASTRONAUT, tmpdir());
  int rc = run_cli(args, out, sizeof out);
  if (rc) fprintf(stderr, "%s", out);
  FC_CHECK_INT(rc, ==, 0);
  FC_CHECK(strstr(out, "100%") != NULL);
  snprintf(args, sizeof args, "avatar list --dir %s", tmpdir());
  FC_CHECK_INT(run_cli(args, out, sizeof out), ==, 0);
  FC_CHECK(strstr(out, "cli1") != NULL);
  snprintf(args, sizeof args, "avatar show cli1 --dir %s --json --frame 0", tmpdir());
  FC_CHECK_INT(run_cli(args, out, sizeof out), ==, 0);
  FC_CHECK(strstr(out, "\"landmarks\":[[") != NULL && strstr(out, "\"crops\":[256]") != NULL);
  int commas = 0;
  for (const char *c = strstr(out, "\"landmarks\""); c && *c && *c != '}'; c++) commas += *c == '[';
  FC_CHECK_INT(commas, ==, 69); /* the list and 68 points */

  /* a refusal names the reason, exit 2 */
  char grey[600];
  snprintf(grey, sizeof grey, "%s/grey.mp4", tmpdir());
  snprintf(args, sizeof args, "avatar create --from %s --id g --out-dir %s", grey, tmpdir());
  FC_CHECK_INT(run_cli(args, out, sizeof out), ==, 2);
  FC_CHECK(strstr(out, "no_face:") != NULL);
  /* corrupt packs: one line, exit 2 */
  char bad[600];
  snprintf(bad, sizeof bad, "%s/broken.fcpack", tmpdir());
  FILE *f = fopen(bad, "w");
  fputs("FCAVPACK garbage", f);
  fclose(f);
  snprintf(args, sizeof args, "avatar show %s", bad);
  FC_CHECK_INT(run_cli(args, out, sizeof out), ==, 2);
  FC_CHECK(strstr(out, "facecast: error:") == out && strchr(out, '\n') == out + strlen(out) - 1);
  snprintf(args, sizeof args, "avatar list --dir %s", tmpdir());
  FC_CHECK_INT(run_cli(args, out, sizeof out), ==, 0);
  FC_CHECK(strstr(out, "broken.fcpack") && strstr(out, "unusable"));
  snprintf(args, sizeof args, "avatar show nosuch --dir %s", tmpdir());
  FC_CHECK_INT(run_cli(args, out, sizeof out), ==, 2);
  FC_CHECK_INT(run_cli("avatar create --id x", out, sizeof out), ==, 2);
  FC_CHECK_INT(run_cli("avatar frobnicate", out, sizeof out), ==, 2);
  /* render with the pack as the avatar */
  snprintf(args, sizeof args, "render --text hello --avatar %s/cli1.fcpack -o %s/cli1.mp4 --quiet",
           tmpdir(), tmpdir());
  rc = run_cli(args, out, sizeof out);
  if (rc) fprintf(stderr, "%s", out);
  FC_CHECK_INT(rc, ==, 0);
}

int main(void) {
  FC_RUN(test_gate_reasons);
  FC_RUN(test_gate_turned_and_mouth);
  FC_RUN(test_photo_pack);
  FC_RUN(test_video_pack);
  FC_RUN(test_clips);
  FC_RUN(test_sessions_share);
  FC_RUN(test_cli);
  fc_face_models_free(&g_m);
  fc_image_free(&g_src);
  if (g_tmp[0]) fc_test_rmtree(g_tmp);
  FC_TEST_EXIT();
}
