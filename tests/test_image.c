/* Tests for src/avatar/image.c: decoding the real astronaut PNG (pixel values checked against
 * OpenCV's reading of it), PNG round trips, PNG colour-type conversions, JPEG decoding of images
 * encoded here with libjpeg, grey conversion, bilinear resize, and malformed inputs (each must
 * return the right negative code with a detail naming the file, never crash).
 * Files are written under a mkdtemp() directory that is removed at the end. */
#include "facecast/error.h"
#include "avatar/image.h"

#include "fc_test.h"

#include <dirent.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* jpeglib.h needs FILE and size_t declared first. */
#include <jpeglib.h>

#define ASTRONAUT "/usr/lib/python3/dist-packages/skimage/data/astronaut.png"

static char tmpdir[64];

/* A path inside the temporary directory (one static buffer per call site is enough here). */
static const char *tmp_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/%s", tmpdir, name);
  return buf;
}


static const uint8_t *px(const fc_image *img, int x, int y) {
  return img->rgb + (size_t)y * img->stride + 3 * (size_t)x;
}

/* Encodes an RGB (components 3) or grey (1) buffer as a baseline JPEG in memory. */
static unsigned char *encode_jpeg(const uint8_t *pix, int w, int h, int components,
                                  unsigned long *size) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr jerr;
  unsigned char *out = NULL;
  c.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, &out, size);
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = components;
  c.in_color_space = components == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 95, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = (JSAMPROW)(pix + (size_t)c.next_scanline * w * components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return out;
}

/* A smooth colour pattern: JPEG keeps it within a few levels. */
static void fill_gradient(uint8_t *rgb, int w, int h) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint8_t *p = rgb + 3 * ((size_t)y * w + x);
      p[0] = (uint8_t)(x * 255 / (w - 1));
      p[1] = (uint8_t)(y * 255 / (h - 1));
      p[2] = (uint8_t)(128 + (x - y) / 4);
    }
}

/* Checks that loading `path` fails with `code`, a detail naming the file, and a clean image. */
static void expect_load_error(const char *path, int code) {
  fc_image img;
  memset(&img, 0x5a, sizeof img);
  fc_error_clear();
  int rc = fc_image_load(path, &img);
  const char *detail = fc_error_detail(rc);
  FC_CHECK_INT(rc, ==, code);
  FC_CHECK(strstr(detail, path) != NULL);
  FC_CHECK(strlen(detail) > strlen(path) + 2);
  FC_CHECK(img.rgb == NULL);
  if (rc != code) fprintf(stderr, "  %s: got %d (%s)\n", path, rc, detail);
  fc_image_free(&img);
}

static void test_load_astronaut(void) {
  fc_image img;
  int rc = fc_image_load(ASTRONAUT, &img);
  if (rc != FC_OK)
    fprintf(stderr, "  cannot load %s (%s): the project set-up installs python3-skimage\n",
            ASTRONAUT, fc_error_detail(rc));
  FC_REQUIRE(rc == FC_OK);
  FC_CHECK_INT(img.w, ==, 512);
  FC_CHECK_INT(img.h, ==, 512);
  FC_CHECK_INT(img.stride, >=, 3 * 512);
  /* Values as cv2.imread gives them (BGR swapped to RGB). */
  static const struct {
    int x, y;
    uint8_t rgb[3], grey;
  } ref[] = {
      {0, 0, {154, 147, 151}, 150}, {511, 0, {125, 119, 110}, 120}, {0, 511, {184, 167, 172}, 173},
      {511, 511, {0, 0, 0}, 0},     {200, 100, {81, 57, 17}, 60},   {300, 400, {131, 118, 97}, 119},
      {256, 256, {19, 14, 7}, 15},
  };
  uint8_t *grey = malloc(512 * 512);
  FC_REQUIRE(grey);
  fc_image_to_gray(&img, grey, 512);
  for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++) {
    const uint8_t *p = px(&img, ref[i].x, ref[i].y);
    for (int c = 0; c < 3; c++) FC_CHECK_INT(p[c], ==, ref[i].rgb[c]);
    FC_CHECK_INT(grey[ref[i].y * 512 + ref[i].x], ==, ref[i].grey);
  }
  /* Whole-image sums: a wrong channel order or row stride would change them. */
  long long sum[3] = {0, 0, 0}, gsum = 0;
  for (int y = 0; y < 512; y++)
    for (int x = 0; x < 512; x++) {
      for (int c = 0; c < 3; c++) sum[c] += px(&img, x, y)[c];
      gsum += grey[y * 512 + x];
    }
  FC_CHECK_NEAR(sum[0] / 262144.0, 141.5625, 0.001); /* red dominates: spacesuit and flag */
  FC_CHECK_NEAR(sum[1] / 262144.0, 105.7594, 0.001);
  FC_CHECK_NEAR(sum[2] / 262144.0, 96.4751, 0.001);
  FC_CHECK_INT(gsum, ==, 30252742); /* cv2.cvtColor(RGB2GRAY) sum */
  free(grey);
  fc_image_free(&img);
  FC_CHECK(img.rgb == NULL && img.w == 0);
}

static void test_gray_coefficients(void) {
  fc_image img;
  FC_REQUIRE(fc_image_alloc(&img, 4, 2) == FC_OK);
  static const uint8_t colours[8][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255},   {255, 255, 255},
                                        {0, 0, 0},   {1, 2, 3},   {128, 64, 32}, {10, 200, 100}};
  for (int i = 0; i < 8; i++) memcpy(img.rgb + 3 * i, colours[i], 3);
  uint8_t g[2 * 5];
  memset(g, 0xee, sizeof g);
  fc_image_to_gray(&img, g, 5); /* stride 5: the padding byte must be left alone */
  static const uint8_t want[8] = {76, 150, 29, 255, 0, 2, 79, 132};
  for (int i = 0; i < 8; i++) FC_CHECK_INT(g[(i / 4) * 5 + i % 4], ==, want[i]);
  FC_CHECK_INT(g[4], ==, 0xee);
  fc_image_free(&img);
}

static void test_png_roundtrip(void) {
  char path[128];
  fc_image a, b;
  FC_REQUIRE(fc_image_alloc(&a, 37, 23) == FC_OK);
  for (int i = 0; i < 37 * 23 * 3; i++) a.rgb[i] = (uint8_t)(i * 7 + i / 13);
  FC_REQUIRE(fc_image_save_png(tmp_path(path, sizeof path, "rt.png"), &a) == FC_OK);
  FC_REQUIRE(fc_image_load(path, &b) == FC_OK);
  FC_CHECK_INT(b.w, ==, 37);
  FC_CHECK_INT(b.h, ==, 23);
  FC_CHECK(memcmp(a.rgb, b.rgb, (size_t)37 * 23 * 3) == 0);
  fc_image_free(&b);
  /* The same bytes through the memory entry point. */
  size_t n;
  uint8_t *buf = fc_test_read_file(path, &n);
  FC_REQUIRE(buf);
  FC_CHECK_INT(fc_image_load_mem(buf, n, "rt.png", &b), ==, FC_OK);
  FC_CHECK(b.rgb && memcmp(a.rgb, b.rgb, (size_t)37 * 23 * 3) == 0);
  fc_image_free(&b);
  free(buf);
  /* Saving into a missing directory fails cleanly. */
  char bad[160];
  snprintf(bad, sizeof bad, "%s/no/such/dir.png", tmpdir);
  FC_CHECK_INT(fc_image_save_png(bad, &a), ==, FC_EIO);
  FC_CHECK(strstr(fc_error_detail(FC_EIO), bad) != NULL);
  fc_image_free(&a);
  unlink(path);
}

/* Grey, 16-bit, alpha and palette PNGs (written with libpng's simplified API) become RGB. */
static void test_png_conversions(void) {
  char path[128];
  fc_image img;
  tmp_path(path, sizeof path, "conv.png");
  enum { W = 5, H = 3 };
  png_image pi;

  uint16_t grey16[W * H];
  for (int i = 0; i < W * H; i++) grey16[i] = (uint16_t)(i * 17 * 257);
  memset(&pi, 0, sizeof pi);
  pi.version = PNG_IMAGE_VERSION;
  pi.width = W, pi.height = H, pi.format = PNG_FORMAT_LINEAR_Y;
  FC_REQUIRE(png_image_write_to_file(&pi, path, 0, grey16, 0, NULL));
  FC_REQUIRE(fc_image_load(path, &img) == FC_OK);
  for (int i = 0; i < W * H; i++)
    for (int c = 0; c < 3; c++) FC_CHECK_INT(img.rgb[3 * i + c], ==, i * 17);
  fc_image_free(&img);

  uint8_t rgba[W * H * 4];
  for (int i = 0; i < W * H * 4; i++) rgba[i] = (uint8_t)(i * 11);
  memset(&pi, 0, sizeof pi);
  pi.version = PNG_IMAGE_VERSION;
  pi.width = W, pi.height = H, pi.format = PNG_FORMAT_RGBA;
  FC_REQUIRE(png_image_write_to_file(&pi, path, 0, rgba, 0, NULL));
  FC_REQUIRE(fc_image_load(path, &img) == FC_OK);
  for (int i = 0; i < W * H; i++) /* alpha dropped, colour kept as stored */
    for (int c = 0; c < 3; c++) FC_CHECK_INT(img.rgb[3 * i + c], ==, rgba[4 * i + c]);
  fc_image_free(&img);

  static const uint8_t cmap[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {9, 99, 199}};
  uint8_t idx[W * H];
  for (int i = 0; i < W * H; i++) idx[i] = (uint8_t)(i % 4);
  memset(&pi, 0, sizeof pi);
  pi.version = PNG_IMAGE_VERSION;
  pi.width = W, pi.height = H, pi.format = PNG_FORMAT_RGB_COLORMAP, pi.colormap_entries = 4;
  FC_REQUIRE(png_image_write_to_file(&pi, path, 0, idx, 0, cmap));
  FC_REQUIRE(fc_image_load(path, &img) == FC_OK);
  for (int i = 0; i < W * H; i++)
    for (int c = 0; c < 3; c++) FC_CHECK_INT(img.rgb[3 * i + c], ==, cmap[i % 4][c]);
  fc_image_free(&img);
  unlink(path);
}

static void test_jpeg_load(void) {
  enum { W = 64, H = 48 };
  uint8_t src[W * H * 3];
  fill_gradient(src, W, H);
  unsigned long n = 0;
  unsigned char *jpg = encode_jpeg(src, W, H, 3, &n);
  FC_REQUIRE(jpg && n > 100);
  char path[128];
  /* The name says .png; the magic bytes say JPEG, and they decide. */
  FC_REQUIRE(fc_test_write_file(tmp_path(path, sizeof path, "actually_jpeg.png"), jpg, n));
  fc_image img;
  int rc = fc_image_load(path, &img);
  FC_REQUIRE(rc == FC_OK);
  FC_CHECK_INT(img.w, ==, W);
  FC_CHECK_INT(img.h, ==, H);
  int worst = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < 3; c++) {
        int d = abs(px(&img, x, y)[c] - src[3 * (y * W + x) + c]);
        if (d > worst) worst = d;
      }
  FC_CHECK_INT(worst, <=, 12);
  fc_image_free(&img);

  /* Truncated: libjpeg would pad it with grey; we must call it corrupt. */
  FC_REQUIRE(fc_test_write_file(path, jpg, n * 6 / 10));
  expect_load_error(path, FC_EFORMAT);
  FC_CHECK(strstr(fc_error_detail(FC_EFORMAT), "JPEG") != NULL);
  /* Header only, then garbage. */
  uint8_t junk[64];
  memcpy(junk, jpg, 3);
  for (int i = 3; i < 64; i++) junk[i] = (uint8_t)(i * 37);
  FC_REQUIRE(fc_test_write_file(path, junk, sizeof junk));
  expect_load_error(path, FC_EFORMAT);
  free(jpg);

  /* Greyscale JPEG expands to equal channels. */
  uint8_t grey[W * H];
  for (int i = 0; i < W * H; i++) grey[i] = (uint8_t)(i % W * 4);
  jpg = encode_jpeg(grey, W, H, 1, &n);
  FC_REQUIRE(jpg);
  FC_REQUIRE(fc_image_load_mem(jpg, n, NULL, &img) == FC_OK);
  FC_CHECK_INT(img.w, ==, W);
  int unequal = 0;
  for (int i = 0; i < W * H; i++)
    unequal += img.rgb[3 * i] != img.rgb[3 * i + 1] || img.rgb[3 * i] != img.rgb[3 * i + 2];
  FC_CHECK_INT(unequal, ==, 0);
  FC_CHECK_INT(abs(px(&img, 40, 20)[0] - 160), <=, 6);
  fc_image_free(&img);
  free(jpg);
  unlink(path);
}

static void test_malformed(void) {
  char path[128];
  tmp_path(path, sizeof path, "bad.png");

  FC_REQUIRE(fc_test_write_file(path, "", 0));
  expect_load_error(path, FC_EFORMAT); /* empty */

  uint8_t rnd[4096];
  uint32_t s = 12345;
  for (size_t i = 0; i < sizeof rnd; i++) rnd[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 24);
  rnd[0] = 0x42; /* neither 0x89 (PNG) nor 0xff (JPEG) */
  FC_REQUIRE(fc_test_write_file(path, rnd, sizeof rnd));
  expect_load_error(path, FC_EUNSUPPORTED);

  const char *text = "this is a text file, not an image\n";
  FC_REQUIRE(fc_test_write_file(path, text, strlen(text)));
  expect_load_error(path, FC_EUNSUPPORTED);

  /* A genuine PNG, truncated in several places, and with a corrupted data byte. */
  fc_image img;
  FC_REQUIRE(fc_image_alloc(&img, 64, 64) == FC_OK);
  for (int i = 0; i < 64 * 64 * 3; i++) img.rgb[i] = (uint8_t)(i * 31 + i / 192);
  char good[128];
  FC_REQUIRE(fc_image_save_png(tmp_path(good, sizeof good, "good.png"), &img) == FC_OK);
  fc_image_free(&img);
  size_t n;
  uint8_t *png = fc_test_read_file(good, &n);
  FC_REQUIRE(png && n > 200);
  const size_t cuts[] = {4, 8, 20, 40, n / 2, n - 13, n - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    FC_REQUIRE(fc_test_write_file(path, png, cuts[i]));
    expect_load_error(path, FC_EFORMAT);
  }
  png[n / 2] ^= 0x55; /* inside IDAT: the chunk CRC (or zlib) catches it */
  FC_REQUIRE(fc_test_write_file(path, png, n));
  expect_load_error(path, FC_EFORMAT);
  free(png);
  unlink(good);

  char missing[160];
  snprintf(missing, sizeof missing, "%s/does_not_exist.png", tmpdir);
  expect_load_error(missing, FC_ENOTFOUND);
  expect_load_error(tmpdir, FC_EIO); /* a directory */
  unlink(path);

  /* Memory entry point: NULL name still gives a detail. */
  fc_error_clear();
  int rc = fc_image_load_mem(rnd, 16, NULL, &img);
  FC_CHECK_INT(rc, ==, FC_EUNSUPPORTED);
  FC_CHECK(strlen(fc_error_detail(rc)) > 0);
  fc_image_free(&img); /* tolerated on a failed load */
}

static void test_resize_region(void) {
  fc_image src, dst;
  FC_REQUIRE(fc_image_alloc(&src, 256, 4) == FC_OK);
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 256; x++) {
      uint8_t *p = src.rgb + (size_t)y * src.stride + 3 * x;
      p[0] = (uint8_t)x, p[1] = (uint8_t)(255 - x), p[2] = (uint8_t)(y * 60);
    }
  /* Identity. */
  FC_REQUIRE(fc_image_alloc(&dst, 256, 4) == FC_OK);
  fc_image_resize_region(&src, (fc_rect){0, 0, 256, 4}, &dst);
  FC_CHECK(memcmp(src.rgb, dst.rgb, (size_t)256 * 4 * 3) == 0);
  fc_image_free(&dst);

  /* Halving a ramp: output d samples source 2d+0.5, i.e. the mean of two pixels. */
  FC_REQUIRE(fc_image_alloc(&dst, 128, 2) == FC_OK);
  fc_image_resize_region(&src, (fc_rect){0, 0, 256, 4}, &dst);
  int wrong = 0; /* (2x + 0.5) and (254.5 - 2x) round half up in the fixed-point blend */
  for (int x = 0; x < 128; x++)
    wrong += px(&dst, x, 0)[0] != 2 * x + 1 || px(&dst, x, 0)[1] != 255 - 2 * x;
  FC_CHECK_INT(wrong, ==, 0);
  FC_CHECK_INT(px(&dst, 10, 0)[2], ==, 30); /* rows 0,1 -> (0+60)/2 */
  FC_CHECK_INT(px(&dst, 10, 1)[2], ==, 150);
  fc_image_free(&dst);

  /* A crop far outside the image repeats the nearest edge pixel. */
  FC_REQUIRE(fc_image_alloc(&dst, 8, 8) == FC_OK);
  fc_image_resize_region(&src, (fc_rect){-100, -50, 20, 20}, &dst);
  for (int i = 0; i < 64; i++) {
    const uint8_t *p = dst.rgb + 3 * i;
    FC_CHECK(p[0] == 0 && p[1] == 255 && p[2] == 0);
  }
  fc_image_resize_region(&src, (fc_rect){300, 10, 20, 20}, &dst);
  for (int i = 0; i < 64; i++) {
    const uint8_t *p = dst.rgb + 3 * i;
    FC_CHECK(p[0] == 255 && p[1] == 0 && p[2] == 180);
  }
  /* Crop straddling the right edge: inside part interpolates, outside part clamps. */
  fc_image_resize_region(&src, (fc_rect){248, 0, 16, 4}, &dst);
  FC_CHECK_INT(px(&dst, 0, 0)[0], ==, 249); /* samples x = 248 + 0.5*2 - 0.5 = 248.5 */
  FC_CHECK_INT(px(&dst, 7, 0)[0], ==, 255);
  fc_image_free(&dst);
  fc_image_free(&src);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/fc_test_image_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  FC_RUN(test_load_astronaut);
  FC_RUN(test_gray_coefficients);
  FC_RUN(test_png_roundtrip);
  FC_RUN(test_png_conversions);
  FC_RUN(test_jpeg_load);
  FC_RUN(test_malformed);
  FC_RUN(test_resize_region);
  fc_test_rmtree(tmpdir);
  FC_TEST_EXIT();
}
