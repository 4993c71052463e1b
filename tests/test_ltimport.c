/* LiveTalking avatar folders → packs (studio/ltimport.h), end to end: the test writes folders
 * as genavatar.py does (full_imgs/ from the default avatar, moving 2 px a frame so that every
 * frame differs; face_imgs/ at 96 px; coords.pkl by Python's pickle module through
 * tests/lt_coords.py at protocols 2, 4 and 5, as tuples, lists and numpy scalars), imports them
 * through the library and the CLI, checks the packs' frame counts, order and boxes, renders and
 * serves an imported avatar, and has every kind of bad folder refused in one line, exit 2. */
#include "fc_test.h"
#include "facecast/avatar.h"
#include "facecast/error.h"
#include "avatar/pack.h"
#include "studio/ltimport.h"

#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <utime.h>

#define ROOT "test_ltimport.d" /* in the working directory (the build folder), removed first */
#define STORE ROOT "/data/avatars"
#define FW 480
#define FH 400
#define NF 12

static fc_face_models g_m;
static fc_image g_base; /* the default avatar's 512×512 frame */
static fc_rect g_face;
static int g_y0;

static int setup(void) {
  if (g_m.haar) return 0;
  if (system("rm -rf " ROOT) != 0 || mkdir(ROOT, 0755) != 0) return -1;
  int err = fc_face_models_load(&g_m);
  if (err) {
    fprintf(stderr, "  cannot load the face models (run scripts/deps.sh): %s\n", fc_error_detail(err));
    return err;
  }
  fc_avatar_params ap = fc_avatar_params_default();
  ap.framing = FC_FRAMING_HEAD;
  fc_avatar *av = fc_avatar_create_from_image(fc_avatar_default_path(), &ap, &err);
  if (!av) return err;
  const fc_image *f = fc_avatar_frame(av, 0);
  g_face = fc_avatar_face(av, 0);
  if ((err = fc_image_alloc(&g_base, f->w, f->h))) return err;
  for (int y = 0; y < f->h; y++)
    memcpy(g_base.rgb + (size_t)y * g_base.stride, f->rgb + (size_t)y * f->stride, (size_t)f->w * 3);
  fc_avatar_destroy(av);
  g_y0 = g_face.y + g_face.h / 2 - FH / 2;
  g_y0 = g_y0 < 0 ? 0 : g_y0 > g_base.h - FH ? g_base.h - FH : g_y0;
  return 0;
}

/* Frame i: the FW×FH window of the base at (2i, g_y0). */
static void frame_of(int i, fc_image *out) {
  for (int y = 0; y < FH; y++)
    memcpy(out->rgb + (size_t)y * out->stride, g_base.rgb + (size_t)(g_y0 + y) * g_base.stride + 6 * i,
           FW * 3);
}

/* The box genavatar would write for frame i: the face, 10 px more below. */
static int box_of(int i, int *b) {
  b[0] = g_face.y - g_y0, b[1] = g_face.y + g_face.h + 10 - g_y0;
  b[2] = g_face.x - 2 * i, b[3] = g_face.x + g_face.w - 2 * i;
  return b[0] >= 0 && b[1] <= FH && b[2] >= 0 && b[3] <= FW;
}

static int coords(const char *dir, int proto, const char *kind, int n, int bad_box) {
  char cmd[4096];
  int o = snprintf(cmd, sizeof cmd, "python3 '%s/../lt_coords.py' '%s/coords.pkl' %d %s",
                   FC_TEST_DATA_DIR, dir, proto, kind);
  for (int i = 0; i < n; i++) {
    int b[4];
    box_of(i, b);
    if (i == 1 && bad_box == 1) b[3] = FW + 1; /* past the right edge */
    if (i == 1 && bad_box == 2) b[1] = b[0];   /* empty */
    o += snprintf(cmd + o, sizeof cmd - o, " %d,%d,%d,%d", b[0], b[1], b[2], b[3]);
  }
  return system(cmd);
}

/* A folder as genavatar writes it, n frames (names with and without zero padding: the order
 * is numeric), a 96 px face_imgs/ with nfaces images, a stray text file and a hidden file. */
static int folder(const char *dir, int n, int nfaces, int proto, const char *kind) {
  char p[600];
  snprintf(p, sizeof p, "rm -rf '%s'", dir);
  if (system(p) != 0 || mkdir(dir, 0755) != 0) return -1;
  snprintf(p, sizeof p, "%s/full_imgs", dir);
  if (mkdir(p, 0755) != 0) return -1;
  fc_image fr = {0}, face = {0};
  if (fc_image_alloc(&fr, FW, FH) || fc_image_alloc(&face, 96, 96)) return -1;
  int err = 0;
  for (int i = 0; i < n && !err; i++) {
    frame_of(i, &fr);
    snprintf(p, sizeof p, i % 2 ? "%s/full_imgs/%08d.png" : "%s/full_imgs/%d.png", dir, i);
    err = fc_image_save_png(p, &fr);
  }
  snprintf(p, sizeof p, "%s/full_imgs/readme.txt", dir);
  err = err || !fc_test_write_file(p, "not a frame", 11);
  snprintf(p, sizeof p, "%s/full_imgs/.99.png", dir);
  err = err || !fc_test_write_file(p, "hidden", 6);
  if (nfaces >= 0) {
    snprintf(p, sizeof p, "%s/face_imgs", dir);
    err = err || mkdir(p, 0755) != 0;
    for (int i = 0; i < nfaces && !err; i++) {
      int b[4];
      box_of(i, b);
      frame_of(i, &fr);
      fc_image_resize_region(&fr, (fc_rect){b[2], b[0], b[3] - b[2], b[1] - b[0]}, &face);
      snprintf(p, sizeof p, "%s/face_imgs/%08d.png", dir, i);
      err = fc_image_save_png(p, &face);
    }
  }
  fc_image_free(&fr);
  fc_image_free(&face);
  return err || coords(dir, proto, kind, n, 0) != 0 ? -1 : 0;
}

static double luma_diff(const uint8_t *y, int i) {
  fc_image fr = {0};
  if (fc_image_alloc(&fr, FW, FH)) return 1e9;
  frame_of(i, &fr);
  double sum = 0;
  for (int r = 0; r < FH; r++)
    for (int c = 0; c < FW; c++) {
      const uint8_t *px = fr.rgb + (size_t)r * fr.stride + 3 * c;
      int l = (66 * px[0] + 129 * px[1] + 25 * px[2] + 0x1080) >> 8;
      sum += abs(l - y[(size_t)r * FW + c]);
    }
  fc_image_free(&fr);
  return sum / (FW * FH);
}

/* The pack holds n frames in the folder's order with LiveTalking's boxes. */
static void check_pack(const char *path, int n, int crop) {
  int err;
  fc_pack *pk = fc_pack_open(path, &err);
  if (!pk) fprintf(stderr, "  %s: %s\n", path, fc_error_detail(err));
  FC_REQUIRE(pk);
  const fc_pack_info *in = fc_pack_get_info(pk);
  FC_CHECK_INT(in->frames, ==, n);
  FC_CHECK_INT(in->width, ==, FW);
  FC_CHECK_INT(in->height, ==, FH);
  FC_CHECK_INT(in->ncrops, ==, 1);
  FC_CHECK_INT(in->crop_size[0], ==, crop);
  FC_CHECK(strstr(fc_pack_meta_json(pk), "\"kind\":\"livetalking\"") != NULL);
  for (int i = 0; i < in->frames && i < n; i++) {
    fc_pack_frame f;
    int b[4];
    FC_REQUIRE(fc_pack_get_frame(pk, i, &f) == 0);
    box_of(i, b);
    FC_CHECK_INT(f.box.x, ==, b[2]);
    FC_CHECK_INT(f.box.y, ==, b[0]);
    FC_CHECK_INT(f.box.w, ==, b[3] - b[2]);
    FC_CHECK_INT(f.box.h, ==, b[1] - b[0]);
    /* the mouth's corners inside the box */
    FC_CHECK(f.landmarks[48].x > f.box.x && f.landmarks[54].x < f.box.x + f.box.w);
    FC_CHECK(f.landmarks[57].y > f.box.y + f.box.h / 2 && f.landmarks[57].y < f.box.y + f.box.h);
  }
  uint8_t *y = malloc((size_t)FW * FH * 3 / 2);
  FC_REQUIRE(y);
  for (int i = 0; i < n; i += n - 1) { /* frame i is the folder's frame i, not its neighbour */
    FC_REQUIRE(fc_pack_copy_i420(pk, i, y) == 0);
    double same = luma_diff(y, i), other = luma_diff(y, i ? i - 1 : 1);
    FC_CHECK(same < 1.0);
    FC_CHECK(other > 2 * same + 0.5);
  }
  free(y);
  fc_pack_close(pk);
}

static void test_frame_order(void) {
  const char *names[] = {"10.png", "9.jpg", ".1.png", "notes.txt", "00000002.PNG", "x.json", "0.jpeg"};
  int order[7], n = 0;
  FC_REQUIRE(fc_lt_frame_order(names, 7, "d", 100, order, &n) == 0);
  FC_REQUIRE(n == 4);
  FC_CHECK_INT(order[0], ==, 6); /* 0.jpeg */
  FC_CHECK_INT(order[1], ==, 4); /* 00000002.PNG */
  FC_CHECK_INT(order[2], ==, 1); /* 9.jpg */
  FC_CHECK_INT(order[3], ==, 0); /* 10.png */
  FC_CHECK_INT(fc_lt_frame_order(names, 7, "d", 3, order, &n), ==, FC_EFORMAT);
  FC_CHECK(strstr(fc_error_detail(FC_EFORMAT), "more than 3 frames") != NULL);
  const char *dup[] = {"1.png", "001.jpg"};
  FC_CHECK_INT(fc_lt_frame_order(dup, 2, "d", 10, order, &n), ==, FC_EFORMAT);
  FC_CHECK(strstr(fc_error_detail(FC_EFORMAT), "same frame number") != NULL);
  const char *word[] = {"1.png", "frame.png"};
  FC_CHECK_INT(fc_lt_frame_order(word, 2, "d", 10, order, &n), ==, FC_EFORMAT);
  FC_CHECK(strstr(fc_error_detail(FC_EFORMAT), "d/frame.png: the name is not a frame number") != NULL);
  FC_CHECK_INT(fc_lt_frame_order(NULL, 0, "d", 10, order, &n), ==, 0);
  FC_CHECK_INT(n, ==, 0);
}

static void test_import_protocols(void) {
  FC_REQUIRE(setup() == 0);
  int b[4];
  FC_REQUIRE(box_of(NF - 1, b) && box_of(0, b));
  static const struct {
    int proto;
    const char *kind;
  } v[] = {{2, "tuples"}, {4, "tuples"}, {5, "tuples"}, {2, "numpy"}, {4, "numpy"}, {5, "lists"}};
  for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
    char dir[256], id[64];
    snprintf(id, sizeof id, "lt_%s_p%d", v[k].kind, v[k].proto);
    snprintf(dir, sizeof dir, ROOT "/%s", id);
    FC_REQUIRE(folder(dir, NF, NF, v[k].proto, v[k].kind) == 0);
    fc_lt_import_params p = {.dir = dir, .out_dir = STORE, .models = &g_m};
    fc_lt_import_result res;
    int err = fc_lt_import(&p, &res);
    if (err) fprintf(stderr, "  %s: %s\n", dir, fc_error_detail(err));
    FC_REQUIRE(err == 0);
    FC_CHECK(strcmp(res.id, id) == 0); /* the folder's name */
    FC_CHECK_INT(res.frames, ==, NF);
    FC_CHECK_INT(res.detected, ==, NF); /* the default face is found in every box */
    check_pack(res.path, NF, 96);
  }
}

static int run_cli(const char *args, char *out, size_t n) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s >" ROOT "/cli.out 2>&1", FC_BINARY, args);
  int rc = system(cmd);
  FILE *f = fopen(ROOT "/cli.out", "r");
  size_t k = f ? fread(out, 1, n - 1, f) : 0;
  out[k] = 0;
  if (f) fclose(f);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* One line, "facecast: error: ...", naming the problem; exit code 2. Found while frames are
 * written (an unreadable or odd-sized frame), the progress shown so far comes before it. */
static void refused(const char *dir, const char *extra, const char *word) {
  char args[1024], out[4096];
  snprintf(args, sizeof args, "avatar import %s --out-dir " STORE " %s", dir, extra);
  int rc = run_cli(args, out, sizeof out);
  FC_CHECK_INT(rc, ==, 2);
  const char *line = out;
  while (!strncmp(line, "importing avatar: ", 18) && strchr(line, '\n')) line = strchr(line, '\n') + 1;
  int lines = 0;
  for (const char *c = line; *c; c++) lines += *c == '\n';
  if (lines != 1 || strncmp(line, "facecast: error: ", 17) || !strstr(line, word)) {
    fprintf(stderr, "  %s: expected one error line with '%s', got:\n%s", dir, word, out);
    FC_CHECK(0);
  }
}

static void test_cli_import_and_render(void) {
  FC_REQUIRE(setup() == 0);
  char out[8192];
  FC_REQUIRE(folder(ROOT "/cli_src", NF, -1, 4, "numpy") == 0); /* no face_imgs/ */
  int rc = run_cli("avatar import " ROOT "/cli_src --id lt_cli --size 256 --out-dir " STORE, out,
                   sizeof out);
  if (rc) fprintf(stderr, "%s", out);
  FC_CHECK_INT(rc, ==, 0);
  FC_CHECK(strstr(out, "importing avatar") != NULL && strstr(out, "100%") != NULL);
  FC_CHECK(strstr(out, "avatar lt_cli: 12 frames 480x400") != NULL);
  check_pack(STORE "/lt_cli.fcpack", NF, 256);
  /* the store's avatars render by id */
  FC_REQUIRE(system("rm -f " ROOT "/out.mp4") == 0);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "FACECAST_DATA_DIR=" ROOT "/data '%s' render --avatar lt_cli --text "
           "'hello from live talking' -o " ROOT "/out.mp4 --quiet >" ROOT "/cli.out 2>&1", FC_BINARY);
  rc = system(cmd);
  FC_CHECK_INT(rc, ==, 0);
  struct stat st;
  FC_CHECK(stat(ROOT "/out.mp4", &st) == 0 && st.st_size > 10000);
}

static void test_refusals(void) {
  FC_REQUIRE(setup() == 0);
  char p[600];
  refused(ROOT "/nowhere", "", "no such folder");
  FC_REQUIRE(folder(ROOT "/bad", 4, 4, 4, "tuples") == 0);
  FC_REQUIRE(unlink(ROOT "/bad/coords.pkl") == 0);
  refused(ROOT "/bad", "", "no coords.pkl");
  FC_REQUIRE(coords(ROOT "/bad", 4, "tuples", 3, 0) == 0);
  refused(ROOT "/bad", "", "4 frames in full_imgs/ but 3 boxes in coords.pkl");
  FC_REQUIRE(coords(ROOT "/bad", 2, "tuples", 4, 1) == 0);
  refused(ROOT "/bad", "", "is empty or outside the 480x400 frame");
  FC_REQUIRE(coords(ROOT "/bad", 5, "numpy", 4, 2) == 0);
  refused(ROOT "/bad", "", "box 1 (y1");
  FC_REQUIRE(coords(ROOT "/bad", 4, "dict", 4, 0) == 0);
  refused(ROOT "/bad", "", "holds a dict, expected a list");
  FC_REQUIRE(coords(ROOT "/bad", 4, "triples", 4, 0) == 0);
  refused(ROOT "/bad", "", "item 0 is a tuple not of 4 items");
  FC_REQUIRE(fc_test_write_file(ROOT "/bad/coords.pkl", "\x80\x02" "cos\nsystem\n.", 14));
  refused(ROOT "/bad", "", "pickle global os.system is not allowed");
  FC_REQUIRE(fc_test_write_file(ROOT "/bad/coords.pkl", "\x80\x04]", 3));
  refused(ROOT "/bad", "", "truncated pickle");
  FC_REQUIRE(coords(ROOT "/bad", 4, "tuples", 4, 0) == 0);
  FC_REQUIRE(unlink(ROOT "/bad/face_imgs/00000003.png") == 0);
  refused(ROOT "/bad", "", "3 images in face_imgs/ but 4 boxes");
  FC_REQUIRE(folder(ROOT "/bad", 4, 4, 4, "tuples") == 0);
  FC_REQUIRE(fc_test_write_file(ROOT "/bad/full_imgs/00000002.png", "\x89PNG\r\n\x1a\nbroken", 14));
  refused(ROOT "/bad", "", "00000002.png");
  FC_REQUIRE(folder(ROOT "/bad", 4, 4, 4, "tuples") == 0);
  FC_REQUIRE(fc_test_write_file(ROOT "/bad/full_imgs/frame.png", "x", 1));
  refused(ROOT "/bad", "", "frame.png: the name is not a frame number");
  FC_REQUIRE(unlink(ROOT "/bad/full_imgs/frame.png") == 0);
  fc_image big = {0}; /* too large a frame */
  FC_REQUIRE(fc_image_alloc(&big, FC_LT_MAX_SIDE + 2, 40) == 0);
  FC_REQUIRE(fc_image_save_png(ROOT "/bad/full_imgs/0.png", &big) == 0);
  fc_image_free(&big);
  refused(ROOT "/bad", "", "4098x40 frames");
  FC_REQUIRE(folder(ROOT "/bad", 4, 4, 4, "tuples") == 0);
  fc_image small = {0}; /* frames of different sizes */
  FC_REQUIRE(fc_image_alloc(&small, FW - 2, FH) == 0);
  FC_REQUIRE(fc_image_save_png(ROOT "/bad/full_imgs/00000003.png", &small) == 0);
  fc_image_free(&small);
  refused(ROOT "/bad", "", "the frames differ in size");
  FC_REQUIRE(system("rm -rf " ROOT "/bad/full_imgs") == 0);
  refused(ROOT "/bad", "", "bad/full_imgs: cannot open the folder");
  snprintf(p, sizeof p, "--id 'no/such id'");
  refused(ROOT "/lt_tuples_p2", p, "avatar id 'no/such id'");
  refused(ROOT "/lt_tuples_p2", "--size 128", "--size '128'");
  struct stat st; /* nothing was left in the store by the refusals */
  FC_CHECK(stat(STORE "/bad.fcpack", &st) != 0);
}

static void test_serve_resolve(void) {
  FC_REQUIRE(setup() == 0);
  /* a LiveTalking folder in the store (data/avatars/ID/), named by its id as --avatar_id is */
  FC_REQUIRE(folder(STORE "/lt_srv", 4, 4, 4, "tuples") == 0);
  fc_lt_import_params how = {.out_dir = STORE, .models = &g_m};
  char id[64] = "";
  int imported = -1;
  FC_CHECK_INT(fc_lt_avatar_resolve("lt_srv", &how, id, sizeof id, &imported), ==, 1);
  FC_CHECK(strcmp(id, "lt_srv") == 0 && imported == 1);
  check_pack(STORE "/lt_srv.fcpack", 4, 96);
  /* once imported, the pack is used as it is, by id or path */
  FC_CHECK_INT(fc_lt_avatar_resolve(STORE "/lt_srv", &how, id, sizeof id, &imported), ==, 1);
  FC_CHECK_INT(imported, ==, 0);
  /* until the folder changes */
  struct utimbuf later = {time(NULL) + 5, time(NULL) + 5};
  FC_REQUIRE(utime(STORE "/lt_srv/coords.pkl", &later) == 0);
  FC_CHECK_INT(fc_lt_avatar_resolve("lt_srv", &how, id, sizeof id, &imported), ==, 1);
  FC_CHECK_INT(imported, ==, 1);
  /* not LiveTalking's: an id without a folder, a photo, nothing */
  FC_CHECK_INT(fc_lt_avatar_resolve("lt_cli", &how, id, sizeof id, &imported), ==, 0);
  FC_CHECK_INT(fc_lt_avatar_resolve(fc_avatar_default_path(), &how, id, sizeof id, &imported), ==, 0);
  /* a pack of that id made from something else is not replaced */
  FC_REQUIRE(folder(ROOT "/lt_cli", 4, 4, 4, "tuples") == 0);
  FC_CHECK_INT(fc_lt_avatar_resolve(ROOT "/lt_cli", &how, id, sizeof id, &imported), ==, FC_EINVAL);
  FC_CHECK(strstr(fc_error_detail(FC_EINVAL), "was not imported from this folder") != NULL);

  /* facecast serve --avatar ID with LiveTalking's folder: imported, then served */
  FC_REQUIRE(folder(STORE "/lt_srv2", 4, 4, 4, "numpy") == 0);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "FACECAST_DATA_DIR=" ROOT "/data '%s' serve --avatar lt_srv2 --port 0 >" ROOT
           "/serve.log 2>&1 & pid=$!; for i in $(seq 600); do grep -q 'serving on' " ROOT
           "/serve.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done; "
           "kill $pid 2>/dev/null; wait $pid; exit 0",
           FC_BINARY);
  FC_REQUIRE(system(cmd) == 0);
  size_t n;
  char *log = (char *)fc_test_read_file(ROOT "/serve.log", &n);
  FC_REQUIRE(log);
  log = realloc(log, n + 1);
  FC_REQUIRE(log);
  log[n] = 0;
  if (!strstr(log, "LiveTalking avatar lt_srv2 imported as avatar lt_srv2") ||
      !strstr(log, "serving on")) {
    fprintf(stderr, "%s", log);
    FC_CHECK(0);
  }
  free(log);
  check_pack(STORE "/lt_srv2.fcpack", 4, 96);
}

int main(void) {
  FC_RUN(test_frame_order);
  FC_RUN(test_import_protocols);
  FC_RUN(test_cli_import_and_render);
  FC_RUN(test_refusals);
  FC_RUN(test_serve_resolve);
  fc_face_models_free(&g_m);
  fc_image_free(&g_base);
  if (!fc_test_failed_ && system("rm -rf " ROOT) != 0) return 1;
  FC_TEST_EXIT();
}
