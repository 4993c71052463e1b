/* End-to-end A/V sync: tone bursts at known times rendered by the facecast binary; in the
 * decoded MP4 the mouth region starts to change within one frame of each burst, measured
 * against the burst times in the input and against the bursts found in the file's own decoded
 * audio track. */
#include "facecast/audio.h"
#include "facecast/avatar.h"
#include "fc_test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W 512
#define RATE 44100 /* the input goes through the resampler too */
static const double bursts[] = {0.52, 1.36, 2.24, 3.12};
#define NB 4

static void test_sync(void) {
  char dir[] = "/tmp/fc_sync_XXXXXX", wav[128], mp4[128], cmd[512];
  FC_REQUIRE(mkdtemp(dir));
  snprintf(wav, sizeof wav, "%s/bursts.wav", dir);
  snprintf(mp4, sizeof mp4, "%s/out.mp4", dir);
  size_t n = (size_t)(4.0 * RATE);
  float *s = calloc(n, sizeof(float));
  for (int b = 0; b < NB; b++) {
    size_t a = (size_t)(bursts[b] * RATE), len = (size_t)(0.3 * RATE);
    for (size_t i = 0; i < len; i++) {
      double env = i < 40 ? i / 40.0 : i > len - 40 ? (len - i) / 40.0 : 1.0;
      s[a + i] = (float)(0.5 * env * sin(2 * M_PI * 300.0 * i / RATE));
    }
  }
  FC_REQUIRE(fc_wav_write(wav, s, n, RATE) == 0);
  free(s);
  snprintf(cmd, sizeof cmd, "'%s' render --audio '%s' -o '%s' --quiet", FC_BINARY, wav, mp4);
  FC_REQUIRE(system(cmd) == 0);

  /* Decoded video, grey. */
  const fc_mouth_geom *g;
  int err;
  fc_avatar_params ap = fc_avatar_params_default();
  ap.framing = FC_FRAMING_HEAD;
  fc_avatar *av = fc_avatar_create_from_image(fc_avatar_default_path(), &ap, &err);
  FC_REQUIRE(av);
  g = fc_avatar_mouth(av, 0);
  int x0 = (int)(g->cx - g->half_w), x1 = (int)(g->cx + g->half_w);
  int y0 = (int)(g->cy - 10), y1 = (int)(g->cy + 25);
  snprintf(cmd, sizeof cmd, "ffmpeg -v error -i '%s' -f rawvideo -pix_fmt gray -", mp4);
  FILE *f = popen(cmd, "r");
  FC_REQUIRE(f);
  /* Keep each frame's mouth region; compare them all with frame 2 (silence) afterwards. */
  static uint8_t frame[W * W], region[200][64 * 1024];
  size_t rsz = (size_t)(y1 - y0) * (x1 - x0);
  FC_REQUIRE(rsz <= sizeof region[0]);
  double diff[200];
  int nf = 0;
  while (nf < 200 && fread(frame, 1, sizeof frame, f) == sizeof frame) {
    for (int y = y0; y < y1; y++) memcpy(region[nf] + (size_t)(y - y0) * (x1 - x0), frame + y * W + x0, (size_t)(x1 - x0));
    nf++;
  }
  for (int i = 0; i < nf; i++) {
    double d = 0;
    for (size_t k = 0; k < rsz; k++) d += abs(region[i][k] - region[2][k]);
    diff[i] = d / rsz;
  }
  pclose(f);
  FC_CHECK_INT(nf, ==, 100);

  /* Decoded audio of the same file, 16 kHz mono. */
  snprintf(cmd, sizeof cmd, "ffmpeg -v error -i '%s' -f s16le -ac 1 -ar 16000 -", mp4);
  f = popen(cmd, "r");
  FC_REQUIRE(f);
  size_t an = 0, acap = 16000 * 6;
  int16_t *pcm = malloc(acap * sizeof(int16_t));
  an = fread(pcm, sizeof(int16_t), acap, f);
  pclose(f);
  FC_CHECK(an > 16000 * 39 / 10);

  /* Onsets: video, the first frame of a run above a third of the peak change; audio, the first
   * sample above 0.1 after at least 100 ms of quiet. */
  double peak = 0;
  for (int i = 0; i < nf; i++) peak = fmax(peak, diff[i]);
  FC_CHECK(peak > 10);
  if (getenv("FC_SYNC_DEBUG"))
    for (int i = 0; i < nf; i++) fprintf(stderr, "%d:%.1f ", i, diff[i]);
  int von[NB], nv = 0;
  for (int i = 1; i < nf && nv < NB; i++)
    if (diff[i] > peak / 3 && diff[i - 1] <= peak / 3) von[nv++] = i;
  double aon[NB];
  int na = 0;
  size_t quiet = 0;
  for (size_t i = 0; i < an && na < NB; i++) {
    if (abs(pcm[i]) > 3277) {
      if (quiet >= 1600) aon[na++] = i / 16000.0;
      quiet = 0;
    } else {
      quiet++;
    }
  }
  free(pcm);
  FC_CHECK_INT(nv, ==, NB);
  FC_CHECK_INT(na, ==, NB);
  for (int b = 0; b < NB && b < nv && b < na; b++) {
    int expect = (int)(bursts[b] * 25);
    fprintf(stderr, "burst %d: input %.3f s (frame %d), audio track %.3f s, mouth frame %d\n", b,
            bursts[b], expect, aon[b], von[b]);
    FC_CHECK(abs(von[b] - expect) <= 1);
    FC_CHECK(fabs(aon[b] - bursts[b]) <= 0.04);
    FC_CHECK(fabs(von[b] / 25.0 - aon[b]) <= 0.04 + 1e-9);
  }
  /* Between bursts the mouth rests again. */
  for (int b = 0; b + 1 < NB; b++) {
    int mid = (int)((bursts[b] + 0.3 + bursts[b + 1]) / 2 * 25);
    FC_CHECK(diff[mid] < peak / 6);
  }
  fc_avatar_destroy(av);
  remove(wav);
  remove(mp4);
  rmdir(dir);
}

int main(void) {
  FC_RUN(test_sync);
  FC_TEST_EXIT();
}
