/* Avatar v0 from a photo: framing, face box mapping, mouth geometry, bad inputs. */
#include "facecast/avatar.h"
#include "avatar/image.h"
#include "facecast/error.h"
#include "fc_test.h"

#include <math.h>
#include <stdio.h>

#include <string.h>
#include <unistd.h>

static void test_default_head_framing(void) {
  int err;
  const char *path = fc_avatar_default_path();
  FC_REQUIRE(access(path, R_OK) == 0); /* the set-up (scripts/deps.sh) puts it in place */
  fc_avatar_params p = fc_avatar_params_default();
  p.framing = FC_FRAMING_HEAD;
  fc_avatar *av = fc_avatar_create_from_image(path, &p, &err);
  FC_REQUIRE(av);
  FC_CHECK_INT(fc_avatar_width(av), ==, 512);
  FC_CHECK_INT(fc_avatar_frame_count(av), ==, 1);
  fc_rect src = fc_avatar_source_face(av), f = fc_avatar_face(av, 0);
  /* OpenCV finds the face at about x 176–271, y 66–161 of the photo. */
  FC_CHECK(abs(src.x - 176) <= 10 && abs(src.y - 66) <= 10);
  FC_CHECK(abs(src.x + src.w - 271) <= 10 && abs(src.y + src.h - 161) <= 10);
  /* Head and shoulders: the face fills about a third of the frame, centred, in the upper half. */
  FC_CHECK(f.w > 150 && f.w < 220);
  FC_CHECK(abs(f.x + f.w / 2 - 256) < 20);
  FC_CHECK(f.y > 60 && f.y + f.h / 2 < 256);
  /* The mouth: the smile's teeth are found, the line is in the lower part of the face. */
  const fc_mouth_geom *m = fc_avatar_mouth(av, 0);
  FC_CHECK(m->cy > f.y + 0.7f * f.h && m->cy < f.y + 0.9f * f.h);
  FC_CHECK(fabsf(m->cx - (f.x + f.w / 2.0f)) < 10);
  FC_CHECK(m->half_w > 0.15f * f.w && m->half_w < 0.3f * f.w);
  FC_CHECK(m->rest_gap >= 4 && m->rest_gap < 0.12f * f.h);
  FC_CHECK(m->curve < 0); /* she smiles: the corners are higher than the centre */
  fc_avatar_destroy(av);
}

static void test_full_framing_and_sizes(void) {
  int err;
  fc_avatar_params p = {.width = 640, .height = 360, .framing = FC_FRAMING_FULL};
  fc_avatar *av = fc_avatar_create_from_image(fc_avatar_default_path(), &p, &err);
  FC_REQUIRE(av);
  FC_CHECK_INT(fc_avatar_height(av), ==, 360);
  fc_rect f = fc_avatar_face(av, 0);
  /* Full framing scales the 512×512 photo to cover 640×360: 1.25×, face ~119 px. */
  FC_CHECK(f.w > 105 && f.w < 135);
  /* I420 frame agrees with the RGB frame: luma of a white-ish and a dark pixel. */
  const fc_image *im = fc_avatar_frame(av, 0);
  const uint8_t *yuv = fc_avatar_frame_i420(av, 0);
  for (int k = 0; k < 5; k++) {
    int x = 100 + 90 * k, y = 50 + 60 * k;
    const uint8_t *px = im->rgb + (size_t)y * im->stride + 3 * x;
    float yy = 16 + (65.7f * px[0] + 129.0f * px[1] + 25.1f * px[2]) / 256;
    FC_CHECK_NEAR(yuv[(size_t)y * 640 + x], yy, 3);
  }
  fc_avatar_destroy(av);
  p = (fc_avatar_params){.width = 511, .height = 512};
  FC_CHECK(fc_avatar_create_from_image(fc_avatar_default_path(), &p, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_EINVAL);
}

/* A photo avatar carries dlib's 68 points (libdlib-data is installed by scripts/deps.sh): the
 * lips' points agree with the mouth found from colour, and the jaw is below them. */
static void test_photo_landmarks(void) {
  int err;
  fc_avatar_params p = fc_avatar_params_default();
  p.framing = FC_FRAMING_HEAD;
  fc_avatar *av = fc_avatar_create_from_image(fc_avatar_default_path(), &p, &err);
  FC_REQUIRE(av);
  const fc_point *pt = fc_avatar_landmarks(av, 0);
  FC_REQUIRE(pt != NULL);
  const fc_mouth_geom *m = fc_avatar_mouth(av, 0);
  float cx = (pt[48].x + pt[54].x) / 2, cy = (pt[62].y + pt[66].y) / 2;
  fprintf(stderr, "  lips from landmarks %.0f,%.0f; from colour %.0f,%.0f (half width %.0f)\n", cx,
          cy, m->cx, m->cy, m->half_w);
  FC_CHECK(fabsf(cx - m->cx) < 0.3f * m->half_w && fabsf(cy - m->cy) < 0.3f * m->half_w);
  FC_CHECK(pt[8].y > cy + 0.5f * m->half_w);
  fc_avatar_destroy(av);
}

static void test_bad_inputs(void) {
  char dir[] = "/tmp/fc_avatar_XXXXXX", path[128];
  FC_REQUIRE(mkdtemp(dir));
  int err;
  /* No face: a smooth gradient. */
  fc_image img;
  FC_REQUIRE(fc_image_alloc(&img, 200, 160) == 0);
  for (int y = 0; y < 160; y++)
    for (int x = 0; x < 200; x++) memset(img.rgb + (size_t)y * img.stride + 3 * x, x / 2 + y / 3, 3);
  snprintf(path, sizeof path, "%s/blank.png", dir);
  FC_REQUIRE(fc_image_save_png(path, &img) == 0);
  fc_image_free(&img);
  FC_CHECK(fc_avatar_create_from_image(path, NULL, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_ENOFACE);
  FC_CHECK(strstr(fc_error_detail(err), "no face") != NULL);
  remove(path);
  /* Not an image. */
  snprintf(path, sizeof path, "%s/notes.png", dir);
  FILE *f = fopen(path, "w");
  FC_REQUIRE(f);
  fputs("this is text", f);
  fclose(f);
  FC_CHECK(fc_avatar_create_from_image(path, NULL, &err) == NULL);
  FC_CHECK(err == FC_EUNSUPPORTED || err == FC_EFORMAT);
  remove(path);
  FC_CHECK(fc_avatar_create_from_image(path, NULL, &err) == NULL);
  FC_CHECK_INT(err, ==, FC_ENOTFOUND);
  rmdir(dir);
}

int main(void) {
  FC_RUN(test_default_head_framing);
  FC_RUN(test_full_framing_and_sizes);
  FC_RUN(test_photo_landmarks);
  FC_RUN(test_bad_inputs);
  FC_TEST_EXIT();
}
