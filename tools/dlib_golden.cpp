// dlib's own answers for the landmark tests: HOG face boxes and 68-point shapes from Debian's
// libdlib (19.24) and its shape_predictor_68_face_landmarks.dat, written as small text files.
// Never built in CI; build by hand (about 20 s):
//
//   g++ -O2 -std=c++14 -o /tmp/dlib_golden tools/dlib_golden.cpp $(pkg-config --cflags --libs dlib-1)
//
// Commands:
//   dlib_golden golden OUTDIR
//       writes OUTDIR/astronaut.txt and OUTDIR/grace_hopper.txt (the two Debian sample photos):
//       dlib's grey-image checksum, its HOG boxes, and the 68 points for the largest HOG box, two
//       hand-picked boxes, random boxes around the face and boxes partly outside the image.
//   dlib_golden pairs HAARLIST OUT
//       HAARLIST has lines "IMAGE x y w h" (Haar boxes from tools/haar_augment.c; the images are
//       binary PPMs it wrote). For every image, runs the HOG detector and writes to OUT one line
//       "IMAGE x y w h l t r b" per HOG box matched to the Haar box it overlaps most (IoU > 0.4):
//       the samples the Haar-to-HOG box mapping is fitted on (tools/fit_dlib_box.py).
//   dlib_golden shape IMAGE l t r b     prints dlib's 68 points for one box
//   dlib_golden hog IMAGE...            prints dlib's HOG boxes, largest first
//   dlib_golden bench                   dlib's model load time and µs per prediction (astronaut,
//                                       its HOG box), to compare with test_landmarks' figures
//
// Images: PNG/JPEG through dlib's own loader, or binary PPM (P6) through the reader below (dlib
// has none), so the Haar and HOG sides of a pair see the same pixels. The detector runs without
// upsampling (faces of 80 px and up), as on the boxes quoted in shared/REFERENCE.md.
//
// File format of a golden file (one record per line, '#' starts a comment):
//   image NAME W H GRAYFNV       GRAYFNV: FNV-1a 32 of dlib's grey image, row by row, in hex
//   hog l t r b                  each HOG box, largest first
//   box KIND l t r b x0 y0 ... x67 y67    KIND: hog, hand, random, outside
#include <dlib/image_io.h>
#include <dlib/image_processing.h>
#include <dlib/image_processing/frontal_face_detector.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dlib;

static const char *kModel = "/usr/share/dlib/shape_predictor_68_face_landmarks.dat";
static const char *kAstronaut = "/usr/lib/python3/dist-packages/skimage/data/astronaut.png";
static const char *kGrace = "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg";

static bool ends_with(const std::string &s, const char *suffix) {
  size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Binary PPM, maxval 255, no comments (what tools/haar_augment.c writes).
static void load_ppm(const std::string &path, array2d<rgb_pixel> &img) {
  std::ifstream f(path, std::ios::binary);
  std::string magic;
  long w = 0, h = 0, maxval = 0;
  f >> magic >> w >> h >> maxval;
  f.get();
  if (!f || magic != "P6" || w <= 0 || h <= 0 || maxval != 255)
    throw std::runtime_error(path + ": not a binary 8-bit PPM");
  img.set_size(h, w);
  std::vector<unsigned char> row(3 * w);
  for (long y = 0; y < h; y++) {
    if (!f.read(reinterpret_cast<char *>(row.data()), row.size()))
      throw std::runtime_error(path + ": truncated PPM");
    for (long x = 0; x < w; x++) img[y][x] = rgb_pixel(row[3 * x], row[3 * x + 1], row[3 * x + 2]);
  }
}

static void load_any(const std::string &path, array2d<rgb_pixel> &img) {
  if (ends_with(path, ".ppm"))
    load_ppm(path, img);
  else
    load_image(img, path);
}

static std::vector<rectangle> hog_boxes(frontal_face_detector &det, const array2d<rgb_pixel> &img) {
  std::vector<rectangle> boxes = det(img);
  std::stable_sort(boxes.begin(), boxes.end(),
                   [](const rectangle &a, const rectangle &b) { return a.area() > b.area(); });
  return boxes;
}

static uint32_t gray_fnv(const array2d<rgb_pixel> &img) {
  array2d<unsigned char> g;
  assign_image(g, img);
  uint32_t hsh = 2166136261u;
  for (long y = 0; y < g.nr(); y++)
    for (long x = 0; x < g.nc(); x++) hsh = (hsh ^ g[y][x]) * 16777619u;
  return hsh;
}

static void write_box(std::FILE *f, shape_predictor &sp, const array2d<rgb_pixel> &img,
                      const char *kind, const rectangle &r) {
  full_object_detection d = sp(img, r);
  std::fprintf(f, "box %s %ld %ld %ld %ld", kind, r.left(), r.top(), r.right(), r.bottom());
  for (unsigned long i = 0; i < d.num_parts(); i++)
    std::fprintf(f, " %ld %ld", d.part(i).x(), d.part(i).y());
  std::fprintf(f, "\n");
}

// One golden file: the HOG box, two hand-picked boxes (the HOG box shifted and grown, and
// shrunk), 8 random boxes (side 0.7-1.6 of the HOG side, centre within a quarter side), and two
// boxes partly outside the image (past the top-left and the bottom-right corner).
static int golden(const std::string &outdir, const char *name, const char *path,
                  frontal_face_detector &det, shape_predictor &sp, unsigned seed) {
  array2d<rgb_pixel> img;
  load_any(path, img);
  std::vector<rectangle> hog = hog_boxes(det, img);
  if (hog.empty()) {
    std::fprintf(stderr, "%s: no HOG face\n", path);
    return 1;
  }
  std::string out = outdir + "/" + name + ".txt";
  std::FILE *f = std::fopen(out.c_str(), "w");
  if (!f) {
    std::perror(out.c_str());
    return 1;
  }
  std::fprintf(f, "# dlib 19.24 on %s: tools/dlib_golden.cpp golden\n", path);
  std::fprintf(f, "image %s %ld %ld %08x\n", name, img.nc(), img.nr(), gray_fnv(img));
  for (const rectangle &r : hog)
    std::fprintf(f, "hog %ld %ld %ld %ld\n", r.left(), r.top(), r.right(), r.bottom());
  const rectangle h = hog[0];
  const long s = h.width();
  write_box(f, sp, img, "hog", h);
  write_box(f, sp, img, "hand",
            rectangle(h.left() + s / 10, h.top() - s / 8, h.right() + s / 5, h.bottom() + s / 10));
  write_box(f, sp, img, "hand",
            rectangle(h.left() + s / 6, h.top() + s / 6, h.right() - s / 6, h.bottom() - s / 6));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> size(0.7, 1.6), shift(-0.25, 0.25), aspect(0.85, 1.15);
  for (int i = 0; i < 8; i++) {
    double side = s * size(rng), cx = h.left() + s / 2.0 + s * shift(rng),
           cy = h.top() + s / 2.0 + s * shift(rng), sy = side * aspect(rng);
    rectangle r((long)(cx - side / 2), (long)(cy - sy / 2), (long)(cx + side / 2),
                (long)(cy + sy / 2));
    write_box(f, sp, img, "random", r);
  }
  write_box(f, sp, img, "outside", rectangle(-s / 2, -s / 3, s / 2, 2 * s / 3));
  write_box(f, sp, img, "outside",
            rectangle(img.nc() - s / 2, img.nr() - s / 2, img.nc() + s / 2, img.nr() + s / 2));
  std::fclose(f);
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

static double iou(const rectangle &a, const rectangle &b) {
  double inter = a.intersect(b).area();
  return inter / (a.area() + b.area() - inter);
}

static int pairs(const char *list, const char *out, frontal_face_detector &det) {
  std::ifstream in(list);
  std::FILE *f = std::fopen(out, "w");
  if (!in || !f) {
    std::fprintf(stderr, "cannot open %s or %s\n", list, out);
    return 1;
  }
  // Haar boxes grouped by image, in file order
  std::vector<std::pair<std::string, std::vector<rectangle>>> images;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string path;
    long x, y, w, h;
    if (!(ls >> path >> x >> y >> w >> h)) continue;
    if (images.empty() || images.back().first != path) images.push_back({path, {}});
    images.back().second.push_back(rectangle(x, y, x + w - 1, y + h - 1));
  }
  std::fprintf(f, "# image haar_x haar_y haar_w haar_h hog_l hog_t hog_r hog_b\n");
  int n = 0;
  for (auto &im : images) {
    array2d<rgb_pixel> img;
    load_any(im.first, img);
    for (const rectangle &hb : hog_boxes(det, img)) {
      const rectangle *best = nullptr;
      double best_iou = 0.4;
      for (const rectangle &r : im.second)
        if (iou(r, hb) > best_iou) best_iou = iou(r, hb), best = &r;
      if (!best) continue;
      std::string tag = im.first.substr(im.first.find_last_of('/') + 1);
      std::fprintf(f, "%s %ld %ld %ld %ld %ld %ld %ld %ld\n", tag.c_str(), best->left(),
                   best->top(), best->width(), best->height(), hb.left(), hb.top(), hb.right(),
                   hb.bottom());
      n++;
    }
  }
  std::fclose(f);
  std::fprintf(stderr, "%d pairs from %zu images\n", n, images.size());
  return 0;
}

int main(int argc, char **argv) try {
  std::string cmd = argc > 1 ? argv[1] : "";
  frontal_face_detector det = get_frontal_face_detector();
  if (cmd == "hog" && argc > 2) {
    for (int i = 2; i < argc; i++) {
      array2d<rgb_pixel> img;
      load_any(argv[i], img);
      for (const rectangle &r : hog_boxes(det, img))
        std::printf("%s %ld %ld %ld %ld\n", argv[i], r.left(), r.top(), r.right(), r.bottom());
    }
    return 0;
  }
  if (cmd == "pairs" && argc == 4) return pairs(argv[2], argv[3], det);
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  shape_predictor sp;
  deserialize(kModel) >> sp;
  double load_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  if (cmd == "bench") {
    array2d<rgb_pixel> img;
    load_image(img, kAstronaut);
    array2d<unsigned char> gray;
    assign_image(gray, img);
    rectangle box = hog_boxes(det, img).at(0);
    const int n = 200;
    t0 = clock::now();
    long sink = 0;
    for (int i = 0; i < n; i++) sink += sp(gray, translate_rect(box, i % 5, i % 3)).part(30).x();
    double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / n;
    std::printf("dlib: model loaded in %.1f ms, %.1f us per prediction (%ld)\n", load_ms, us,
                sink);
    return 0;
  }
  if (cmd == "golden" && argc == 3)
    return golden(argv[2], "astronaut", kAstronaut, det, sp, 1) ||
           golden(argv[2], "grace_hopper", kGrace, det, sp, 2);
  if (cmd == "shape" && argc == 7) {
    array2d<rgb_pixel> img;
    load_any(argv[2], img);
    write_box(stdout, sp, img, "given",
              rectangle(std::atol(argv[3]), std::atol(argv[4]), std::atol(argv[5]),
                        std::atol(argv[6])));
    return 0;
  }
  std::fprintf(stderr,
               "usage: dlib_golden golden OUTDIR | pairs HAARLIST OUT | shape IMAGE l t r b | "
               "hog IMAGE... | bench\n");
  return 2;
} catch (const std::exception &e) {
  std::fprintf(stderr, "dlib_golden: %s\n", e.what());
  return 1;
}
