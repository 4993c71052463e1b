/* The face cache (avatar/facecache.h): a photo avatar made twice finds its face box and
 * landmarks in the cache the second time, bit for bit what the detectors give; a truncated,
 * corrupt or foreign file is a miss with the same result and is rewritten; another picture,
 * another model path or no model is another entry; FACECAST_CACHE_DIR=off writes nothing; a
 * folder that cannot be written costs nothing but the note (reported once); and the record's
 * parser refuses every damaged form of it. Each case sets FACECAST_CACHE_DIR itself, so nothing
 * is written outside its temporary folder. */
#include "avatar/facecache.h"
#include "avatar/image.h"
#include "avatar/landmarks.h"
#include "core/file.h"
#include "facecast/avatar.h"
#include "facecast/error.h"
#include "fc_test.h"

#include <fcntl.h>
#include <glib.h>
#include <sys/stat.h>
#include <zlib.h>

static char *tmpdir(void) { return g_mkdtemp(g_strdup("/tmp/fc_facecache_XXXXXX")); }

/* the server's default avatar: the default portrait, 512×512, head framing */
static fc_avatar *make(const char *path, int *cached) {
  fc_avatar_params p = fc_avatar_params_default();
  p.framing = FC_FRAMING_HEAD;
  int err;
  fc_avatar *av = fc_avatar_create_from_image(path, &p, &err);
  if (!av) fprintf(stderr, "  avatar: %s\n", fc_error_detail(err));
  if (av && cached) fc_avatar_detection(av, cached);
  return av;
}

/* Everything a detection decides, and what follows from it, to the bit. */
static int same(const fc_avatar *a, const fc_avatar *b) {
  fc_rect sa = fc_avatar_source_face(a), sb = fc_avatar_source_face(b);
  fc_rect fa = fc_avatar_face(a, 0), fb = fc_avatar_face(b, 0);
  const fc_point *la = fc_avatar_landmarks(a, 0), *lb = fc_avatar_landmarks(b, 0);
  size_t frame = (size_t)fc_avatar_width(a) * fc_avatar_height(a) * 3 / 2;
  return memcmp(&sa, &sb, sizeof sa) == 0 && memcmp(&fa, &fb, sizeof fa) == 0 &&
         memcmp(fc_avatar_mouth(a, 0), fc_avatar_mouth(b, 0), sizeof(fc_mouth_geom)) == 0 &&
         (la && lb ? memcmp(la, lb, FC_LANDMARKS * sizeof *la) == 0 : la == lb) &&
         fc_avatar_width(a) == fc_avatar_width(b) && fc_avatar_height(a) == fc_avatar_height(b) &&
         memcmp(fc_avatar_frame_i420(a, 0), fc_avatar_frame_i420(b, 0), frame) == 0;
}

/* The .fcface files in dir: how many, and the path of the last one found. */
static int entries(const char *dir, char *last, size_t n) {
  GDir *d = g_dir_open(dir, 0, NULL);
  int k = 0;
  for (const char *f; d && (f = g_dir_read_name(d));)
    if (g_str_has_suffix(f, ".fcface")) {
      if (last) snprintf(last, n, "%s/%s", dir, f);
      k++;
    }
  if (d) g_dir_close(d);
  return k;
}

static fc_avatar *fresh; /* the default avatar computed with no cache: the reference */

static void test_hit_is_identical(void) {
  setenv("FACECAST_CACHE_DIR", "off", 1);
  int cached = -1;
  fresh = make(fc_avatar_default_path(), &cached);
  FC_REQUIRE(fresh);
  FC_REQUIRE(fc_avatar_landmarks(fresh, 0)); /* scripts/deps.sh installs dlib's model */
  FC_CHECK_INT(cached, ==, 0);
  FC_CHECK(strstr(fc_avatar_detection(fresh, NULL), "FACECAST_CACHE_DIR=off") != NULL);

  char *dir = tmpdir(), path[4200];
  setenv("FACECAST_CACHE_DIR", dir, 1);
  fc_face_cache_stats s0 = fc_face_cache_get_stats();
  fc_avatar *a = make(fc_avatar_default_path(), &cached);
  FC_REQUIRE(a);
  fc_face_cache_stats s1 = fc_face_cache_get_stats();
  FC_CHECK_INT(cached, ==, 0);
  FC_CHECK_INT(s1.misses - s0.misses, ==, 1);
  FC_CHECK_INT(s1.writes - s0.writes, ==, 1);
  FC_CHECK(strstr(fc_avatar_detection(a, NULL), "cached as ") != NULL);
  FC_CHECK_INT(entries(dir, path, sizeof path), ==, 1);
  struct stat st;
  FC_CHECK(stat(path, &st) == 0 && st.st_size == FC_FACE_CACHE_BYTES);
  FC_CHECK(same(a, fresh));

  fc_avatar *b = make(fc_avatar_default_path(), &cached);
  FC_REQUIRE(b);
  fc_face_cache_stats s2 = fc_face_cache_get_stats();
  FC_CHECK_INT(cached, ==, 1);
  FC_CHECK_INT(s2.hits - s1.hits, ==, 1);
  FC_CHECK_INT(s2.misses, ==, s1.misses);
  FC_CHECK_INT(s2.writes, ==, s1.writes);
  FC_CHECK(strstr(fc_avatar_detection(b, NULL), "from the cache") != NULL);
  FC_CHECK(same(b, fresh));
  fprintf(stderr, "  first: %s\n  second: %s\n", fc_avatar_detection(a, NULL),
          fc_avatar_detection(b, NULL));
  fc_avatar_destroy(a);
  fc_avatar_destroy(b);

  /* another size is another entry */
  fc_avatar_params p = {.width = 256, .height = 320, .framing = FC_FRAMING_HEAD};
  int err;
  fc_avatar *c = fc_avatar_create_from_image(fc_avatar_default_path(), &p, &err);
  FC_REQUIRE(c);
  fc_avatar_detection(c, &cached);
  FC_CHECK_INT(cached, ==, 0);
  FC_CHECK_INT(entries(dir, NULL, 0), ==, 2);
  fc_avatar_destroy(c);
  fc_test_rmtree(dir);
  g_free(dir);
}

/* A damaged file: a miss, the same result, the file whole again (the next start a hit). */
static void damaged(const char *dir, const char *path, const void *bytes, size_t n,
                    const char *what) {
  FC_REQUIRE(fc_test_write_file(path, bytes, n));
  int cached = -1;
  fc_face_cache_stats s0 = fc_face_cache_get_stats();
  fc_avatar *a = make(fc_avatar_default_path(), &cached);
  FC_REQUIRE(a);
  fc_face_cache_stats s1 = fc_face_cache_get_stats();
  if (cached != 0 || s1.misses - s0.misses != 1 || s1.writes - s0.writes != 1)
    fprintf(stderr, "  %s: not a miss and a rewrite\n", what);
  FC_CHECK_INT(cached, ==, 0);
  FC_CHECK_INT(s1.writes - s0.writes, ==, 1);
  FC_CHECK(same(a, fresh));
  fc_avatar_destroy(a);
  FC_CHECK_INT(entries(dir, NULL, 0), ==, 1); /* rewritten in place, no temporary left */
  a = make(fc_avatar_default_path(), &cached);
  FC_REQUIRE(a);
  FC_CHECK_INT(cached, ==, 1);
  FC_CHECK(same(a, fresh));
  fc_avatar_destroy(a);
}

static void test_damaged_files_are_misses(void) {
  FC_REQUIRE(fresh);
  char *dir = tmpdir(), path[4200];
  setenv("FACECAST_CACHE_DIR", dir, 1);
  fc_avatar *a = make(fc_avatar_default_path(), NULL);
  FC_REQUIRE(a);
  fc_avatar_destroy(a);
  FC_REQUIRE(entries(dir, path, sizeof path) == 1);
  size_t n = 0;
  uint8_t *good = fc_test_read_file(path, &n);
  FC_REQUIRE(good && n == FC_FACE_CACHE_BYTES);
  uint8_t bad[FC_FACE_CACHE_BYTES + 8];

  damaged(dir, path, good, 0, "empty");
  damaged(dir, path, good, 100, "truncated in the id");
  damaged(dir, path, good, n - 1, "one byte short");
  memcpy(bad, good, n);
  bad[n] = 0;
  damaged(dir, path, bad, n + 1, "one byte long");
  memcpy(bad, good, n);
  bad[200] ^= 0x40; /* a landmark's bits */
  damaged(dir, path, bad, n, "a flipped bit");
  memcpy(bad, good, n);
  bad[8] = 2; /* a later version, with its own valid CRC */
  uLong crc = crc32(0, bad, FC_FACE_CACHE_BYTES - 4);
  for (int i = 0; i < 4; i++) bad[FC_FACE_CACHE_BYTES - 4 + i] = (uint8_t)(crc >> 8 * i);
  damaged(dir, path, bad, n, "a foreign version");
  memcpy(bad, good, n);
  bad[20] ^= 1; /* another key's (or build's) id, otherwise valid */
  crc = crc32(0, bad, FC_FACE_CACHE_BYTES - 4);
  for (int i = 0; i < 4; i++) bad[FC_FACE_CACHE_BYTES - 4 + i] = (uint8_t)(crc >> 8 * i);
  damaged(dir, path, bad, n, "a foreign id");
  for (size_t i = 0; i < n; i++) bad[i] = (uint8_t)(i * 131 + 7);
  damaged(dir, path, bad, n, "noise");
  free(good);
  fc_test_rmtree(dir);
  g_free(dir);
}

static void test_other_inputs_are_other_entries(void) {
  FC_REQUIRE(fresh);
  char *dir = tmpdir(), *png = g_strdup_printf("%s/changed.png", dir),
       *link = g_strdup_printf("%s/model.dat", dir);
  setenv("FACECAST_CACHE_DIR", dir, 1);
  fc_avatar *a = make(fc_avatar_default_path(), NULL);
  FC_REQUIRE(a);
  fc_avatar_destroy(a);

  /* one pixel of the picture changed, far from the face: a miss, a second file */
  fc_image im = {0};
  FC_REQUIRE(fc_image_load(fc_avatar_default_path(), &im) == FC_OK);
  im.rgb[(size_t)(im.h - 1) * im.stride] ^= 0x01;
  FC_REQUIRE(fc_image_save_png(png, &im) == FC_OK);
  fc_image_free(&im);
  int cached = -1;
  fc_face_cache_stats s0 = fc_face_cache_get_stats();
  a = make(png, &cached);
  FC_REQUIRE(a);
  FC_CHECK_INT(cached, ==, 0);
  FC_CHECK_INT(fc_face_cache_get_stats().misses - s0.misses, ==, 1);
  FC_CHECK_INT(entries(dir, NULL, 0), ==, 2);
  fc_avatar_destroy(a);
  a = make(png, &cached);
  FC_CHECK(a && cached == 1);
  fc_avatar_destroy(a);
  a = make(fc_avatar_default_path(), &cached); /* the first picture's entry still stands */
  FC_CHECK(a && cached == 1 && same(a, fresh));
  fc_avatar_destroy(a);

  /* the model by another path: another entry, the same points */
  FC_REQUIRE(symlink(fc_shape_model_default_path(), link) == 0);
  setenv("FACECAST_SHAPE_MODEL", link, 1);
  a = make(fc_avatar_default_path(), &cached);
  FC_CHECK(a && cached == 0 && same(a, fresh));
  fc_avatar_destroy(a);
  FC_CHECK_INT(entries(dir, NULL, 0), ==, 3);
  /* no model: the face alone is cached, and read back without landmarks */
  setenv("FACECAST_SHAPE_MODEL", "/nonexistent/shape_predictor.dat", 1);
  a = make(fc_avatar_default_path(), &cached);
  FC_CHECK(a && cached == 0 && !fc_avatar_landmarks(a, 0));
  fc_avatar *b = make(fc_avatar_default_path(), &cached);
  FC_CHECK(b && cached == 1 && !fc_avatar_landmarks(b, 0));
  if (a && b) FC_CHECK(same(a, b));
  if (b) {
    fc_rect f = fc_avatar_source_face(b), g = fc_avatar_source_face(fresh);
    FC_CHECK(memcmp(&f, &g, sizeof f) == 0);
  }
  fc_avatar_destroy(a);
  fc_avatar_destroy(b);
  unsetenv("FACECAST_SHAPE_MODEL");
  a = make(fc_avatar_default_path(), &cached); /* the model back: its entry again */
  FC_CHECK(a && cached == 1 && same(a, fresh));
  fc_avatar_destroy(a);
  FC_CHECK_INT(entries(dir, NULL, 0), ==, 4);
  g_free(png);
  g_free(link);
  fc_test_rmtree(dir);
  g_free(dir);
}

static void test_off_writes_nothing(void) {
  FC_REQUIRE(fresh);
  char *home = tmpdir(), *xdg = g_strdup_printf("%s/xdg", home);
  char *old_home = g_strdup(getenv("HOME")), *old_xdg = g_strdup(getenv("XDG_CACHE_HOME"));
  setenv("HOME", home, 1);
  setenv("XDG_CACHE_HOME", xdg, 1);
  const char *offs[] = {"off", ""};
  for (int i = 0; i < 2; i++) {
    setenv("FACECAST_CACHE_DIR", offs[i], 1);
    FC_CHECK(fc_cache_dir() == NULL);
    fc_face_cache_stats s0 = fc_face_cache_get_stats();
    int cached = -1;
    fc_avatar *a = make(fc_avatar_default_path(), &cached);
    FC_CHECK(a && cached == 0 && same(a, fresh));
    fc_avatar_destroy(a);
    fc_face_cache_stats s1 = fc_face_cache_get_stats();
    FC_CHECK(memcmp(&s0, &s1, sizeof s0) == 0); /* not even looked up */
    GDir *d = g_dir_open(home, 0, NULL);
    FC_CHECK(d && g_dir_read_name(d) == NULL); /* nothing in HOME, not even the xdg folder */
    if (d) g_dir_close(d);
  }
  /* the folder's rules, as the cuDNN algorithm cache's */
  unsetenv("FACECAST_CACHE_DIR");
  char *want = g_strdup_printf("%s/facecast", xdg);
  FC_CHECK(fc_cache_dir() && strcmp(fc_cache_dir(), want) == 0);
  g_free(want);
  setenv("XDG_CACHE_HOME", "relative", 1);
  want = g_strdup_printf("%s/.cache/facecast", home);
  FC_CHECK(fc_cache_dir() && strcmp(fc_cache_dir(), want) == 0);
  g_free(want);
  setenv("HOME", "relative", 1);
  FC_CHECK(fc_cache_dir() == NULL);
  if (old_home)
    setenv("HOME", old_home, 1);
  else
    unsetenv("HOME");
  if (old_xdg)
    setenv("XDG_CACHE_HOME", old_xdg, 1);
  else
    unsetenv("XDG_CACHE_HOME");
  g_free(old_home);
  g_free(old_xdg);
  g_free(xdg);
  fc_test_rmtree(home);
  g_free(home);
}

/* A cache folder that cannot be made: the avatars come as always, the failure is counted each
 * time and printed once. */
static void test_write_failure(void) {
  FC_REQUIRE(fresh);
  char *dir = tmpdir(), *file = g_strdup_printf("%s/a-file", dir),
       *cache = g_strdup_printf("%s/cache", file), *log = g_strdup_printf("%s/stderr", dir);
  FC_REQUIRE(fc_test_write_file(file, "x", 1));
  setenv("FACECAST_CACHE_DIR", cache, 1);
  fflush(stderr);
  int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  FC_REQUIRE(saved >= 0 && fd >= 0);
  dup2(fd, 2);
  close(fd);
  fc_face_cache_stats s0 = fc_face_cache_get_stats();
  int ok = 1, cached = -1;
  for (int i = 0; i < 2; i++) {
    fc_avatar *a = make(fc_avatar_default_path(), &cached);
    ok &= a && cached == 0 && same(a, fresh) &&
          strstr(fc_avatar_detection(a, NULL), "could not be written") != NULL;
    fc_avatar_destroy(a);
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  FC_CHECK(ok);
  FC_CHECK_INT(fc_face_cache_get_stats().write_failures - s0.write_failures, ==, 2);
  size_t n = 0;
  char *text = (char *)fc_test_read_file(log, &n);
  FC_REQUIRE(text);
  text = realloc(text, n + 1);
  text[n] = 0;
  int shown = 0;
  for (const char *p = text; (p = strstr(p, "later failures are not shown")); p++) shown++;
  FC_CHECK_INT(shown, ==, 1);
  fprintf(stderr, "  %s", text);
  free(text);
  unlink(log);
  fc_test_rmtree(dir);
  g_free(dir);
  g_free(file);
  g_free(cache);
  g_free(log);
}

static void put_crc(uint8_t *b) {
  uLong crc = crc32(0, b, FC_FACE_CACHE_BYTES - 4);
  for (int i = 0; i < 4; i++) b[FC_FACE_CACHE_BYTES - 4 + i] = (uint8_t)(crc >> 8 * i);
}

/* The record's parser, without files: what it writes reads back exactly; every other length,
 * every flipped byte, and each field out of range is refused with a detail. */
static void test_record(void) {
  fc_face_entry e = {.src_w = 512,
                     .src_h = 400,
                     .out_w = 512,
                     .out_h = 512,
                     .face = {176, 66, 95, 95},
                     .has_landmarks = 1},
                r;
  for (int i = 0; i < 32; i++) e.id[i] = (uint8_t)(i * 7 + 1);
  for (int k = 0; k < FC_LANDMARKS; k++) e.landmarks[k] = (fc_point){100.0f + k, -3.5f * k};
  e.landmarks[5].x = -0.0f; /* signed zero survives: bits, not values */
  uint8_t b[FC_FACE_CACHE_BYTES], c[FC_FACE_CACHE_BYTES];
  fc_face_cache_encode(&e, b);
  FC_CHECK_INT(fc_face_cache_parse(b, sizeof b, "t", &r), ==, FC_OK);
  FC_CHECK(memcmp(&e, &r, sizeof e) == 0);
  FC_CHECK(signbit(r.landmarks[5].x));
  fc_face_cache_encode(&r, c);
  FC_CHECK(memcmp(b, c, sizeof b) == 0);
  for (size_t n = 0; n < sizeof b; n++)
    FC_CHECK_INT(fc_face_cache_parse(b, n, "t", &r), ==, FC_EFORMAT);
  int refused = 0;
  for (size_t i = 0; i < sizeof b; i++) {
    memcpy(c, b, sizeof b);
    c[i] ^= 0x10;
    refused += fc_face_cache_parse(c, sizeof c, "t", &r) == FC_EFORMAT;
  }
  FC_CHECK_INT(refused, ==, (int)sizeof b);
  /* fields out of range, each behind a valid CRC */
  struct {
    size_t off;
    uint8_t v;
    const char *why;
  } cases[] = {{12, 2, "flags"},
               {49, 0, "source width 0"},
               {50, 1, "source too wide"},
               {56, 1, "odd avatar width"},
               {67, 0x80, "box x < 0"},
               {75, 0x80, "box w < 0"},
               {65, 1, "box past the right edge"},
               {83, 0x7f, "a NaN point"},
               {83, 0x4f, "a point far away"}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    memcpy(c, b, sizeof b);
    c[cases[k].off] = cases[k].v;
    put_crc(c);
    int rc = fc_face_cache_parse(c, sizeof c, "t", &r);
    FC_CHECK_INT(rc, ==, FC_EFORMAT);
    if (rc == FC_EFORMAT && !strstr(fc_error_detail(rc), "face cache t"))
      fprintf(stderr, "  %s: detail '%s'\n", cases[k].why, fc_error_detail(rc));
  }
  /* no landmarks: zeros, and only zeros */
  e.has_landmarks = 0;
  fc_face_cache_encode(&e, b);
  FC_CHECK_INT(fc_face_cache_parse(b, sizeof b, "t", &r), ==, FC_OK);
  FC_CHECK(r.has_landmarks == 0 && r.landmarks[3].x == 0 && r.face.w == 95);
  b[100] = 1;
  put_crc(b);
  FC_CHECK_INT(fc_face_cache_parse(b, sizeof b, "t", &r), ==, FC_EFORMAT);
}

int main(void) {
  FC_RUN(test_record);
  FC_RUN(test_hit_is_identical);
  FC_RUN(test_damaged_files_are_misses);
  FC_RUN(test_other_inputs_are_other_entries);
  FC_RUN(test_off_writes_nothing);
  FC_RUN(test_write_failure);
  fc_avatar_destroy(fresh);
  FC_TEST_EXIT();
}
