/* Tests for the MP4 writer (src/media/mp4.c): files it writes are checked with ffprobe, the
 * failure paths must return errors (never hang) and leave no file behind. Also prints the frame
 * rate the writer sustains at 512×512 for two x264 presets. */
#include "facecast/error.h"
#include "facecast/mp4.h"
#include "media/sink.h"

#include "fc_test.h"

#include <errno.h>
#include <pthread.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RATE 16000
#define FPS 25
#define CHUNK (RATE / FPS) /* 640 samples of audio per video frame, as the renderer pushes */

static char tmpdir[256];

#ifdef __SANITIZE_ADDRESS__
/* GLib 2.74 allocates 16 KB in its library constructor and never frees it, which LeakSanitizer
 * reports. Suppress exactly that (allocated under _dl_init), so leaks of ours still fail the
 * test. The system GLib has no frame pointers, so the stack only reaches _dl_init with the slow
 * unwinder. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) { return "print_suppressions=0"; }
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:_dl_init\n"; }
#endif

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A moving diagonal gradient with a bright square crossing the frame, plus slowly changing
 * chroma, so the encoder has real motion to code. */
static void fill_frame(uint8_t *f, int w, int h, int i) {
  uint8_t *y = f, *u = f + (size_t)w * h, *v = u + (size_t)(w / 2) * (h / 2);
  const int sq = w / 8, sx = (i * 7) % (w - sq), sy = (i * 3) % (h - sq);
  for (int r = 0; r < h; r++) {
    for (int c = 0; c < w; c++) {
      int in = c >= sx && c < sx + sq && r >= sy && r < sy + sq;
      y[(size_t)r * w + c] = in ? 235 : (uint8_t)((c + r + 4 * i) & 0xff) / 2 + 32;
    }
  }
  for (int r = 0; r < h / 2; r++) {
    for (int c = 0; c < w / 2; c++) {
      u[(size_t)r * (w / 2) + c] = (uint8_t)(128 + 40 * sin((c + i) * 0.05));
      v[(size_t)r * (w / 2) + c] = (uint8_t)(128 + 40 * cos((r - i) * 0.05));
    }
  }
}

static void fill_sine(int16_t *pcm, size_t n, int64_t first) {
  for (size_t k = 0; k < n; k++)
    pcm[k] = (int16_t)(8000.0 * sin(2.0 * M_PI * 440.0 * (double)(first + (int64_t)k) / RATE));
}

enum order {
  INTERLEAVED, /* each frame's 40 ms of audio, then the frame: what the renderer does */
  AUDIO_FIRST, /* all audio in one call, then all frames */
  VIDEO_FIRST, /* all frames, then the audio in 40 ms chunks */
  VIDEO_ONLY,  /* no audio at all */
};

/* Writes `frames` frames and the matching audio in the given order; returns the first error. */
static int write_clip_order(const char *path, int w, int h, int frames, const char *preset,
                            enum order order) {
  fc_mp4_params p = fc_mp4_params_default(w, h);
  p.preset = preset;
  int err = 0, rc = 0;
  size_t fsize = (size_t)w * h * 3 / 2;
  uint8_t *frame = malloc(fsize);
  int16_t pcm[CHUNK];
  if (!frame) return FC_ENOMEM;
  fc_mp4_writer *wr = fc_mp4_writer_create(path, &p, &err);
  if (!wr) {
    fprintf(stderr, "create %s: %s\n", path, fc_error_detail(err));
    free(frame);
    return err;
  }
  if (order == AUDIO_FIRST) {
    size_t n = (size_t)frames * CHUNK;
    int16_t *all = malloc(n * sizeof *all);
    if (!all) rc = FC_ENOMEM;
    if (!rc) fill_sine(all, n, 0);
    if (!rc) rc = fc_mp4_writer_push_audio(wr, all, n, 0);
    free(all);
  }
  for (int i = 0; i < frames && !rc; i++) {
    if (order == INTERLEAVED) {
      fill_sine(pcm, CHUNK, (int64_t)i * CHUNK);
      rc = fc_mp4_writer_push_audio(wr, pcm, CHUNK, (int64_t)i * CHUNK);
      if (rc) break;
    }
    fill_frame(frame, w, h, i);
    rc = fc_mp4_writer_push_video(wr, frame, i);
  }
  for (int i = 0; i < frames && !rc && order == VIDEO_FIRST; i++) {
    fill_sine(pcm, CHUNK, (int64_t)i * CHUNK);
    rc = fc_mp4_writer_push_audio(wr, pcm, CHUNK, (int64_t)i * CHUNK);
  }
  if (!rc) rc = fc_mp4_writer_finish(wr);
  if (rc) fprintf(stderr, "write %s: %s\n", path, fc_error_detail(rc));
  fc_mp4_writer_destroy(wr);
  free(frame);
  return rc;
}

static int write_clip(const char *path, int w, int h, int frames, const char *preset) {
  return write_clip_order(path, w, h, frames, preset, INTERLEAVED);
}

/* ---- ffprobe ---- */

typedef struct {
  char type[16], codec[32], rate[32];
  int width, height;
  long nb_frames;
  double duration;
} probe_stream;

typedef struct {
  int n;
  probe_stream s[4];
} probe_result;

/* Appends s to out as one single-quoted shell word. */
static void shell_quote(char *out, size_t cap, const char *s) {
  size_t o = 0;
  if (o + 1 < cap) out[o++] = '\'';
  for (; *s && o + 5 < cap; s++) {
    if (*s == '\'') {
      memcpy(out + o, "'\\''", 4);
      o += 4;
    } else {
      out[o++] = *s;
    }
  }
  if (o + 1 < cap) out[o++] = '\'';
  out[o] = 0;
}

/* Runs ffprobe in its default key=value format, one [STREAM] section per stream. */
static int probe(const char *path, probe_result *r) {
  char q[1024], cmd[1400], line[256];
  memset(r, 0, sizeof *r);
  shell_quote(q, sizeof q, path);
  snprintf(cmd, sizeof cmd,
           "ffprobe -v error -show_entries "
           "stream=codec_type,codec_name,avg_frame_rate,nb_frames,duration,width,height "
           "-of default %s", q);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  probe_stream *cur = NULL;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (!strcmp(line, "[STREAM]")) {
      cur = r->n < 4 ? &r->s[r->n++] : NULL;
      continue;
    }
    char *eq = strchr(line, '=');
    if (!cur || !eq) continue;
    *eq = 0;
    const char *k = line, *v = eq + 1;
    if (!strcmp(k, "codec_type")) snprintf(cur->type, sizeof cur->type, "%s", v);
    else if (!strcmp(k, "codec_name")) snprintf(cur->codec, sizeof cur->codec, "%s", v);
    else if (!strcmp(k, "avg_frame_rate")) snprintf(cur->rate, sizeof cur->rate, "%s", v);
    else if (!strcmp(k, "nb_frames")) cur->nb_frames = atol(v);
    else if (!strcmp(k, "duration")) cur->duration = atof(v);
    else if (!strcmp(k, "width")) cur->width = atoi(v);
    else if (!strcmp(k, "height")) cur->height = atoi(v);
  }
  return pclose(f) == 0 ? 0 : -1;
}

/* Decodes the audio with ffmpeg (which honours edit lists) and returns the index of the first
 * sample louder than 1000, or -1. */
static long audio_onset(const char *path) {
  char q[1024], cmd[1400];
  shell_quote(q, sizeof q, path);
  snprintf(cmd, sizeof cmd, "ffmpeg -v error -i %s -map 0:a -f s16le -ac 1 -", q);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  int16_t s;
  long i = 0, onset = -1;
  while (fread(&s, sizeof s, 1, f) == 1) {
    if (onset < 0 && abs(s) > 1000) onset = i;
    i++;
  }
  return pclose(f) == 0 ? onset : -1;
}

/* Decodes every video frame and returns the lowest luma PSNR against the source pattern, so a
 * stride or plane-offset mistake (a sheared or shifted picture) shows as a low value. */
static double min_luma_psnr(const char *path, int w, int h, int frames) {
  char q[1024], cmd[1400];
  shell_quote(q, sizeof q, path);
  snprintf(cmd, sizeof cmd, "ffmpeg -v error -i %s -map 0:v -f rawvideo -pix_fmt yuv420p -", q);
  const size_t fsize = (size_t)w * h * 3 / 2;
  uint8_t *got = malloc(fsize), *want = malloc(fsize);
  FILE *f = got && want ? popen(cmd, "r") : NULL;
  double worst = -1;
  int n = 0;
  while (f && fread(got, 1, fsize, f) == fsize) {
    fill_frame(want, w, h, n);
    double se = 0;
    for (size_t k = 0; k < (size_t)w * h; k++) {
      const double d = (double)got[k] - (double)want[k];
      se += d * d;
    }
    double mse = se / ((double)w * h);
    double psnr = mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : 99;
    if (worst < 0 || psnr < worst) worst = psnr;
    n++;
  }
  if (f && pclose(f) != 0) worst = -1;
  if (n != frames) worst = -1;
  free(got);
  free(want);
  return worst;
}

static const probe_stream *find_stream(const probe_result *r, const char *type) {
  for (int i = 0; i < r->n; i++)
    if (!strcmp(r->s[i].type, type)) return &r->s[i];
  return NULL;
}

/* Checks one h264 stream of `frames` frames at 25/1 and w×h, and one aac stream as long. */
static void check_file(const char *path, int w, int h, int frames) {
  probe_result r;
  FC_REQUIRE(probe(path, &r) == 0);
  FC_CHECK_INT(r.n, ==, 2);
  const probe_stream *v = find_stream(&r, "video"), *a = find_stream(&r, "audio");
  FC_REQUIRE(v && a);
  FC_CHECK(!strcmp(v->codec, "h264"));
  FC_CHECK(!strcmp(v->rate, "25/1"));
  FC_CHECK_INT(v->nb_frames, ==, frames);
  FC_CHECK_INT(v->width, ==, w);
  FC_CHECK_INT(v->height, ==, h);
  FC_CHECK(!strcmp(a->codec, "aac"));
  FC_CHECK_NEAR(v->duration, frames / (double)FPS, 1e-3);
  FC_CHECK_NEAR(a->duration, v->duration, 0.04);
  /* A/V sync: the sine starts at sample 0, so decoded audio must be loud from the start. An
   * untrimmed AAC priming frame would put the onset at sample 1024 (64 ms late). */
  long onset = audio_onset(path);
  FC_CHECK(onset >= 0 && onset < RATE / 100);
  fprintf(stderr, "     %s: video %s %dx%d %s %ld frames %.4f s; audio %s %ld frames %.4f s, "
          "onset at sample %ld\n",
          strrchr(path, '/') + 1, v->codec, v->width, v->height, v->rate, v->nb_frames,
          v->duration, a->codec, a->nb_frames, a->duration, onset);
}

/* ---- cases ---- */

static void check_pictures(const char *path, int w, int h, int frames) {
  double psnr = min_luma_psnr(path, w, h, frames);
  fprintf(stderr, "     %s: lowest luma PSNR over %d frames %.1f dB\n", strrchr(path, '/') + 1,
          frames, psnr);
  FC_CHECK(psnr > 30.0);
}

static void test_three_seconds_512(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/clip512.mp4", tmpdir);
  FC_REQUIRE(write_clip(path, 512, 512, 75, NULL) == 0);
  check_file(path, 512, 512, 75);
  check_pictures(path, 512, 512, 75);
  unlink(path);
}

/* The renderer interleaves, but whole-stream skews within the queues' room must work too. */
static void test_push_orders(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/audio-first.mp4", tmpdir);
  FC_CHECK(write_clip_order(path, 320, 240, 75, "ultrafast", AUDIO_FIRST) == 0);
  check_file(path, 320, 240, 75);
  unlink(path);
  snprintf(path, sizeof path, "%s/video-first.mp4", tmpdir);
  FC_CHECK(write_clip_order(path, 320, 240, 75, "ultrafast", VIDEO_FIRST) == 0);
  check_file(path, 320, 240, 75);
  unlink(path);
}

/* Video without any audio: the writer fills the audio track with silence as long as the
 * video (mp4mux would otherwise write a broken empty track). */
static void test_video_only(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/video-only.mp4", tmpdir);
  FC_CHECK(write_clip_order(path, 320, 240, 50, "ultrafast", VIDEO_ONLY) == 0);
  probe_result r;
  FC_CHECK(probe(path, &r) == 0);
  const probe_stream *v = find_stream(&r, "video"), *a = find_stream(&r, "audio");
  FC_CHECK(v && a);
  if (v && a) {
    FC_CHECK_INT(v->nb_frames, ==, 50);
    FC_CHECK_NEAR(v->duration, 2.0, 1e-3);
    FC_CHECK_NEAR(a->duration, 2.0, 0.04);
    FC_CHECK_INT(audio_onset(path), ==, -1); /* silent */
  }
  unlink(path);
}

/* 320 is a multiple of 4 at chroma width too (contiguous strides); 202×150 is not (GStreamer
 * pads rows to 4 bytes), so the row-by-row copy runs. The first path has a space and a quote. */
static void test_other_sizes(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/clip 320 'q'.mp4", tmpdir);
  FC_CHECK(write_clip(path, 320, 240, 25, NULL) == 0);
  check_file(path, 320, 240, 25);
  check_pictures(path, 320, 240, 25);
  unlink(path);
  snprintf(path, sizeof path, "%s/clip202.mp4", tmpdir);
  FC_CHECK(write_clip(path, 202, 150, 25, "ultrafast") == 0);
  check_file(path, 202, 150, 25);
  check_pictures(path, 202, 150, 25);
  unlink(path);
}

static void test_unwritable_path(void) {
  fc_mp4_params p = fc_mp4_params_default(64, 64);
  int err = 0;
  fc_error_clear();
  double t0 = now_s();
  fc_mp4_writer *w = fc_mp4_writer_create("/nonexistent-dir/out.mp4", &p, &err);
  FC_CHECK(w == NULL);
  FC_CHECK(err == FC_EIO || err == FC_EMEDIA);
  FC_CHECK(strstr(fc_error_detail(err), "/nonexistent-dir/out.mp4") != NULL);
  FC_CHECK(now_s() - t0 < 5.0);
  fprintf(stderr, "     detail: %s\n", fc_error_detail(err));
  fc_mp4_writer_destroy(w); /* NULL is fine */

  /* A directory where the file should be. */
  w = fc_mp4_writer_create(tmpdir, &p, &err);
  FC_CHECK(w == NULL);
  FC_CHECK_INT(err, ==, FC_EIO);
  FC_CHECK(file_exists(tmpdir)); /* and it is left alone */
}

static void test_bad_arguments(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/bad.mp4", tmpdir);
  int err = 0;
  fc_mp4_params p = fc_mp4_params_default(201, 150);
  FC_CHECK(fc_mp4_writer_create(path, &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  p = fc_mp4_params_default(64, 64);
  p.preset = "warpspeed";
  FC_CHECK(fc_mp4_writer_create(path, &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(err), "warpspeed") != NULL);
  FC_CHECK(!file_exists(path));

  /* Frames must move forward; audio must not overlap; nothing after finish. */
  p = fc_mp4_params_default(64, 64);
  fc_mp4_writer *w = fc_mp4_writer_create(path, &p, &err);
  FC_REQUIRE(w != NULL);
  uint8_t frame[64 * 64 * 3 / 2];
  int16_t pcm[CHUNK];
  fill_sine(pcm, CHUNK, 0);
  memset(frame, 100, sizeof frame);
  FC_CHECK_INT(fc_mp4_writer_push_audio(w, pcm, CHUNK, 0), ==, 0);
  FC_CHECK_INT(fc_mp4_writer_push_video(w, frame, 0), ==, 0);
  FC_CHECK_INT(fc_mp4_writer_push_video(w, frame, 0), ==, FC_EINVAL);
  FC_CHECK_INT(fc_mp4_writer_push_audio(w, pcm, CHUNK, 100), ==, FC_EINVAL);
  FC_CHECK_INT(fc_mp4_writer_push_audio(w, pcm, 0, 5000), ==, 0);
  FC_CHECK_INT(fc_mp4_writer_push_video(w, NULL, 1), ==, FC_EINVAL);
  FC_CHECK_INT(fc_mp4_writer_finish(w), ==, 0);
  FC_CHECK_INT(fc_mp4_writer_finish(w), ==, 0); /* idempotent */
  FC_CHECK_INT(fc_mp4_writer_push_video(w, frame, 1), ==, FC_EINVAL);
  fc_mp4_writer_destroy(w);
  FC_CHECK(file_exists(path)); /* a finished file stays */
  unlink(path);
}

static void test_destroy_without_finish(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/partial.mp4", tmpdir);
  fc_mp4_params p = fc_mp4_params_default(320, 240);
  int err = 0;
  fc_mp4_writer *w = fc_mp4_writer_create(path, &p, &err);
  FC_REQUIRE(w != NULL);
  FC_CHECK(file_exists(path));
  uint8_t *frame = malloc(320 * 240 * 3 / 2);
  int16_t pcm[CHUNK];
  FC_REQUIRE(frame != NULL);
  for (int i = 0; i < 40; i++) {
    fill_sine(pcm, CHUNK, (int64_t)i * CHUNK);
    FC_CHECK_INT(fc_mp4_writer_push_audio(w, pcm, CHUNK, (int64_t)i * CHUNK), ==, 0);
    fill_frame(frame, 320, 240, i);
    FC_CHECK_INT(fc_mp4_writer_push_video(w, frame, i), ==, 0);
  }
  fc_mp4_writer_destroy(w);
  free(frame);
  FC_CHECK(!file_exists(path));
}

/* Defined behaviour: finish() with no video frame fails with FC_EMEDIA (an MP4 without video
 * samples is no use to anyone) and destroy() removes the file. Must not hang. */
static void test_zero_frames(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/empty.mp4", tmpdir);
  fc_mp4_params p = fc_mp4_params_default(64, 64);
  int err = 0;
  double t0 = now_s();
  fc_mp4_writer *w = fc_mp4_writer_create(path, &p, &err);
  FC_REQUIRE(w != NULL);
  int rc = fc_mp4_writer_finish(w);
  FC_CHECK_INT(rc, ==, FC_EMEDIA);
  fprintf(stderr, "     detail: %s\n", fc_error_detail(rc));
  FC_CHECK_INT(fc_mp4_writer_push_video(w, (const uint8_t *)"", 0), ==, FC_EMEDIA);
  fc_mp4_writer_destroy(w);
  FC_CHECK(!file_exists(path));
  FC_CHECK(now_s() - t0 < 5.0);

  /* Audio only is the same: no video, no file. */
  w = fc_mp4_writer_create(path, &p, &err);
  FC_REQUIRE(w != NULL);
  int16_t pcm[CHUNK];
  fill_sine(pcm, CHUNK, 0);
  FC_CHECK_INT(fc_mp4_writer_push_audio(w, pcm, CHUNK, 0), ==, 0);
  FC_CHECK_INT(fc_mp4_writer_finish(w), ==, FC_EMEDIA);
  fc_mp4_writer_destroy(w);
  FC_CHECK(!file_exists(path));
}

/* A write error in the middle of a render (the file size limit stands in for a full disk) must
 * come back as an error from push or finish, not a hang, and leave no file. It runs in a fresh
 * process (this executable re-executed) because RLIMIT_FSIZE is per process. */
static int fsize_child(const char *path) {
  struct rlimit rl = {64 * 1024, 64 * 1024};
  signal(SIGXFSZ, SIG_IGN); /* write() then fails with EFBIG instead of killing us */
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 3;
  alarm(120); /* a hang kills the child, which the parent reports */
  fc_mp4_params p = fc_mp4_params_default(320, 240);
  p.preset = "ultrafast";
  int err = 0, rc = 0, i = 0;
  fc_mp4_writer *w = fc_mp4_writer_create(path, &p, &err);
  if (!w) {
    fprintf(stderr, "     child: create failed: %s\n", fc_error_detail(err));
    return 5;
  }
  static uint8_t frame[320 * 240 * 3 / 2];
  int16_t pcm[CHUNK];
  /* 250 frames of changing content is well over 64 KB at 2 Mbit/s. */
  for (i = 0; i < 250 && !rc; i++) {
    fill_sine(pcm, CHUNK, (int64_t)i * CHUNK);
    rc = fc_mp4_writer_push_audio(w, pcm, CHUNK, (int64_t)i * CHUNK);
    fill_frame(frame, 320, 240, i);
    if (!rc) rc = fc_mp4_writer_push_video(w, frame, i);
  }
  const char *where = rc ? "push" : "finish";
  if (!rc) rc = fc_mp4_writer_finish(w);
  fprintf(stderr, "     child: %s returned %d after %d frames: %s\n", where, rc, i,
          rc ? fc_error_detail(rc) : "no error");
  fc_mp4_writer_destroy(w);
  if (rc != FC_EIO && rc != FC_EMEDIA) return 1;
  return file_exists(path) ? 2 : 0;
}

static void test_write_error(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/full.mp4", tmpdir);
  pid_t pid = fork();
  FC_REQUIRE(pid >= 0);
  if (pid == 0) {
    execl("/proc/self/exe", "test_mp4", "--fsize-child", path, (char *)NULL);
    _exit(4);
  }
  int status = 0;
  FC_REQUIRE(waitpid(pid, &status, 0) == pid);
  FC_CHECK(WIFEXITED(status));
  if (WIFEXITED(status)) FC_CHECK_INT(WEXITSTATUS(status), ==, 0);
  else fprintf(stderr, "     child killed by signal %d\n", WTERMSIG(status));
  FC_CHECK(!file_exists(path));
}

/* A producer that skips frames (the session recorder drops both the picture and its audio when
 * its queue is full) must not shift the audio against the video: the AAC encoder numbers samples
 * consecutively, so the gap has to become silence. Frames 20-22 are skipped; the tone starts
 * with frame 50 and must be heard at 2.0 s, not three frames (120 ms) early. */
static void test_skipped_frames_keep_sync(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/gap.mp4", tmpdir);
  const int w = 128, h = 96, frames = 75;
  fc_mp4_params p = fc_mp4_params_default(w, h);
  int err = 0, rc = 0;
  uint8_t *frame = malloc((size_t)w * h * 3 / 2);
  int16_t pcm[CHUNK];
  fc_mp4_writer *wr = frame ? fc_mp4_writer_create(path, &p, &err) : NULL;
  FC_CHECK(wr != NULL);
  for (int i = 0; wr && i < frames && !rc; i++) {
    if (i >= 20 && i <= 22) continue;
    if (i < 50) memset(pcm, 0, sizeof pcm);
    else fill_sine(pcm, CHUNK, (int64_t)i * CHUNK);
    rc = fc_mp4_writer_push_audio(wr, pcm, CHUNK, (int64_t)i * CHUNK);
    fill_frame(frame, w, h, i);
    if (!rc) rc = fc_mp4_writer_push_video(wr, frame, i);
  }
  if (wr && !rc) rc = fc_mp4_writer_finish(wr);
  FC_CHECK_INT(rc, ==, 0);
  fc_mp4_writer_destroy(wr);
  free(frame);
  long onset = audio_onset(path);
  /* a sine from phase 0 passes 1000 within a few samples; AAC smears a little more */
  FC_CHECK_INT(onset, >=, 50L * CHUNK - 64);
  FC_CHECK_INT(onset, <=, 50L * CHUNK + 64);
  unlink(path);
}

/* ---- outputs (media/sink.h) ---- */

/* A fake output: records what reaches it, blocks while its gate is closed, fails on a chosen
 * frame, counts its destruction. */
typedef struct fake_sink {
  fc_sink sink;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int gate_closed, fail_at, destroyed, finished;
  int n;
  int64_t index[64], first_sample[64];
  uint8_t pic0[64]; /* first byte of each picture (0 when none) */
  int16_t pcm0[64];
} fake_sink;

static int fake_push(void *self, const fc_sink_frame *f) {
  fake_sink *k = self;
  pthread_mutex_lock(&k->mu);
  while (k->gate_closed) pthread_cond_wait(&k->cv, &k->mu);
  int err = k->n == k->fail_at ? fc_error_set(FC_EIO, "fake output: disk full") : 0;
  if (!err && k->n < 64) {
    k->index[k->n] = f->index, k->first_sample[k->n] = f->first_sample;
    k->pic0[k->n] = f->i420 ? f->i420[0] : 0, k->pcm0[k->n] = f->n_samples ? f->pcm[0] : 0;
  }
  k->n += !err;
  pthread_mutex_unlock(&k->mu);
  return err;
}
static void fake_stats(void *self, fc_sink_stats *out) { (void)self, (void)out; }
static int fake_finish(void *self) { return ((fake_sink *)self)->finished++, 0; }
static void fake_destroy(void *self) { ((fake_sink *)self)->destroyed++; }
static const fc_sink_ops fake_ops = {.kind = "fake", .push = fake_push, .stats = fake_stats,
                                     .finish = fake_finish, .destroy = fake_destroy};

static void fake_init(fake_sink *k) {
  memset(k, 0, sizeof *k);
  k->sink = (fc_sink){&fake_ops, k};
  k->fail_at = -1;
  pthread_mutex_init(&k->mu, NULL);
  pthread_cond_init(&k->cv, NULL);
}

static void fake_gate(fake_sink *k, int closed) {
  pthread_mutex_lock(&k->mu);
  k->gate_closed = closed;
  pthread_cond_broadcast(&k->cv);
  pthread_mutex_unlock(&k->mu);
}

/* The queued output never makes its pusher wait: with the output stuck, a ring of 4 holds
 * frames 0-3 (the one being pushed still counts), frames 4-9 are dropped and counted, and
 * what it passes on later are copies of what was pushed, in order. */
static void test_sink_queued(void) {
  enum { W = 16, H = 8, N = 10 };
  fake_sink k;
  fake_init(&k);
  fake_gate(&k, 1);
  int err = 0;
  fc_sink *q = fc_sink_queued_create(&k.sink, W, H, 4, 4, &err);
  FC_REQUIRE(q);
  FC_CHECK(!strcmp(fc_sink_kind(q), "queued"));
  uint8_t pic[W * H * 3 / 2];
  int16_t pcm[4];
  for (int i = 0; i < N; i++) {
    memset(pic, 10 + i, sizeof pic);
    for (int j = 0; j < 4; j++) pcm[j] = (int16_t)(100 * i + j);
    fc_sink_frame f = {.index = i, .i420 = i == 2 ? NULL : pic, .pcm = pcm, .n_samples = 4,
                       .first_sample = 4 * i};
    FC_CHECK_INT(fc_sink_push(q, &f), ==, 0);
  }
  memset(pic, 0, sizeof pic); /* the copies must not see this */
  fc_sink_stats st;
  fc_sink_get_stats(q, &st);
  FC_CHECK_INT(st.frames_pushed, ==, N);
  FC_CHECK_INT(st.frames_dropped, ==, 6);
  fc_sink_frame big = {.index = N, .i420 = pic, .pcm = pcm, .n_samples = 5, .first_sample = 40};
  FC_CHECK_INT(fc_sink_push(q, &big), ==, FC_EINVAL); /* more audio than the ring holds */
  fake_gate(&k, 0);
  FC_CHECK_INT(fc_sink_finish(q), ==, 0);
  FC_CHECK_INT(k.finished, ==, 1);
  FC_REQUIRE(k.n == 4);
  for (int i = 0; i < 4; i++) {
    FC_CHECK_INT(k.index[i], ==, i);
    FC_CHECK_INT(k.first_sample[i], ==, 4 * i);
    FC_CHECK_INT(k.pic0[i], ==, i == 2 ? 0 : 10 + i); /* frame 2 had no picture */
    FC_CHECK_INT(k.pcm0[i], ==, 100 * i);
  }
  fc_sink_destroy(q);
  FC_CHECK_INT(k.destroyed, ==, 1);

  /* An error of the output stops the pushing and comes back from finish. */
  fake_init(&k);
  k.fail_at = 1;
  q = fc_sink_queued_create(&k.sink, W, H, 4, 4, &err);
  FC_REQUIRE(q);
  for (int i = 0; i < 4; i++) {
    fc_sink_frame f = {.index = i, .i420 = pic, .pcm = pcm, .n_samples = 4, .first_sample = 4 * i};
    FC_CHECK_INT(fc_sink_push(q, &f), ==, 0);
  }
  FC_CHECK_INT(fc_sink_finish(q), ==, FC_EIO);
  FC_CHECK_INT(k.n, ==, 1);
  FC_CHECK_INT(k.finished, ==, 0);
  fc_sink_destroy(q);
  FC_CHECK_INT(k.destroyed, ==, 1);

  /* Bad arguments: refused, and the output it was given is destroyed all the same. */
  fake_init(&k);
  FC_CHECK(fc_sink_queued_create(&k.sink, 15, 8, 4, 4, &err) == NULL && err == FC_EINVAL);
  FC_CHECK_INT(k.destroyed, ==, 1);
  FC_CHECK_INT(fc_sink_push(NULL, NULL), ==, FC_EINVAL);
  fc_sink_destroy(NULL);
}

/* The MP4 writer as an output, behind a queue, as a session records: frames without a picture
 * leave the one before up (the file has fewer pictures, the same length) and keep A/V sync. */
static void test_sink_mp4(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/sink.mp4", tmpdir);
  const int w = 128, h = 96, frames = 50;
  int err = 0;
  fc_mp4_params p = fc_mp4_params_default(w, h);
  fc_mp4_writer *wr = fc_mp4_writer_create(path, &p, &err);
  FC_REQUIRE(wr);
  fc_sink *q = fc_sink_queued_create(fc_mp4_writer_sink(wr), w, h, CHUNK, frames, &err);
  FC_REQUIRE(q);
  uint8_t *frame = malloc((size_t)w * h * 3 / 2);
  int16_t pcm[CHUNK];
  FC_REQUIRE(frame);
  for (int i = 0; i < frames; i++) {
    fill_frame(frame, w, h, i);
    fill_sine(pcm, CHUNK, (int64_t)i * CHUNK);
    fc_sink_frame f = {.index = i, .i420 = i >= 10 && i < 20 ? NULL : frame, .pcm = pcm,
                       .n_samples = CHUNK, .first_sample = (int64_t)i * CHUNK};
    FC_CHECK_INT(fc_sink_push(q, &f), ==, 0);
  }
  FC_CHECK_INT(fc_sink_finish(q), ==, 0);
  fc_sink_stats st;
  fc_sink_get_stats(q, &st);
  FC_CHECK_INT(st.frames_pushed, ==, frames);
  FC_CHECK_INT(st.frames_dropped, ==, 0);
  fc_sink_destroy(q);
  free(frame);
  probe_result r;
  FC_REQUIRE(probe(path, &r) == 0);
  const probe_stream *v = find_stream(&r, "video"), *a = find_stream(&r, "audio");
  FC_REQUIRE(v && a);
  FC_CHECK_INT(v->nb_frames, ==, frames - 10);
  FC_CHECK_NEAR(v->duration, frames / (double)FPS, 1e-3);
  FC_CHECK_NEAR(a->duration, v->duration, 0.04);
  long onset = audio_onset(path);
  FC_CHECK(onset >= 0 && onset < RATE / 100);
  unlink(path);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--fsize-child")) return fsize_child(argv[2]);

  snprintf(tmpdir, sizeof tmpdir, "/tmp/fc_test_mp4_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  FC_RUN(test_three_seconds_512);
  FC_RUN(test_other_sizes);
  FC_RUN(test_push_orders);
  FC_RUN(test_skipped_frames_keep_sync);
  FC_RUN(test_sink_queued);
  FC_RUN(test_sink_mp4);
  FC_RUN(test_video_only);
  FC_RUN(test_unwritable_path);
  FC_RUN(test_bad_arguments);
  FC_RUN(test_destroy_without_finish);
  FC_RUN(test_zero_frames);
  FC_RUN(test_write_error);
  if (rmdir(tmpdir) != 0) {
    fprintf(stderr, "leftover files in %s: %s\n", tmpdir, strerror(errno));
    fc_test_failed_ = 1;
  }
  FC_TEST_EXIT();
}
