/* Samples for the Haar-to-HOG box mapping (fc_dlib_box_from_haar): writes augmented copies of
 * the two Debian sample photos (rescaled, cropped so the face moves, mirrored) as binary PPMs
 * into OUTDIR and prints, for each, the boxes facecast's Haar detector finds in it (default
 * cascade, scale 1.1, 3 neighbours, as the avatar code calls it): "OUTDIR/NAME.ppm x y w h".
 * tools/dlib_golden.cpp `pairs` then adds dlib's HOG boxes, and tools/fit_dlib_box.py fits the
 * mapping. Not part of the build; from the repository root:
 *
 *   cc -std=c11 -O2 -D_GNU_SOURCE -Iinclude -Isrc -o /tmp/haar_augment tools/haar_augment.c \
 *      src/avatar/haar.c src/avatar/image.c src/core/error.c src/core/file.c \
 *      $(pkg-config --cflags --libs glib-2.0 libpng) -ljpeg -lm
 *   /tmp/haar_augment /tmp/aug > /tmp/aug/haar.txt
 *   /tmp/dlib_golden pairs /tmp/aug/haar.txt tests/data/landmarks/haar_hog_pairs.txt
 *   python3 tools/fit_dlib_box.py tests/data/landmarks/haar_hog_pairs.txt
 */
#include "facecast/error.h"
#include "avatar/haar.h"
#include "avatar/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int write_ppm(const char *path, const fc_image *img) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  fprintf(f, "P6\n%d %d\n255\n", img->w, img->h);
  for (int y = 0; y < img->h; y++) fwrite(img->rgb + (size_t)y * img->stride, 3, img->w, f);
  return fclose(f);
}

static void mirror(fc_image *img) {
  for (int y = 0; y < img->h; y++) {
    uint8_t *row = img->rgb + (size_t)y * img->stride;
    for (int a = 0, b = img->w - 1; a < b; a++, b--)
      for (int c = 0; c < 3; c++) {
        uint8_t t = row[3 * a + c];
        row[3 * a + c] = row[3 * b + c];
        row[3 * b + c] = t;
      }
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: haar_augment OUTDIR > HAARLIST\n");
    return 2;
  }
  /* Scales chosen so the face is 85-250 px: dlib's HOG finds faces from about 80 px. */
  static const struct {
    const char *name, *path;
    double scales[7];
  } src[2] = {
      {"astronaut", "/usr/lib/python3/dist-packages/skimage/data/astronaut.png",
       {1.0, 1.15, 1.3, 1.5, 1.75, 2.0, 2.4}},
      {"grace_hopper", "/usr/share/matplotlib/mpl-data/sample_data/grace_hopper.jpg",
       {0.45, 0.55, 0.6, 0.7, 0.85, 1.0, 1.2}},
  };
  /* Crops of 80% of the image at three places (fractions of the width and height) */
  static const double crops[3][2] = {{0.0, 0.0}, {0.2, 0.1}, {0.1, 0.2}};
  int err = 0;
  fc_haar *haar = fc_haar_load(fc_haar_default_cascade(), &err);
  if (!haar) {
    fprintf(stderr, "%s\n", fc_error_detail(err));
    return 1;
  }
  fc_haar_params hp = fc_haar_params_default();
  for (int i = 0; i < 2; i++) {
    fc_image img;
    if ((err = fc_image_load(src[i].path, &img))) {
      fprintf(stderr, "%s\n", fc_error_detail(err));
      return 1;
    }
    for (int s = 0; s < 7; s++)
      for (int c = 0; c < 3; c++)
        for (int m = 0; m < 2; m++) {
          fc_rect crop = {(int)(crops[c][0] * img.w), (int)(crops[c][1] * img.h),
                          (int)(0.8 * img.w), (int)(0.8 * img.h)};
          fc_image out;
          double k = src[i].scales[s];
          if (fc_image_alloc(&out, (int)(crop.w * k + 0.5), (int)(crop.h * k + 0.5))) return 1;
          fc_image_resize_region(&img, crop, &out);
          if (m) mirror(&out);
          char path[512];
          snprintf(path, sizeof path, "%s/%s_s%.2f_c%d%s.ppm", argv[1], src[i].name, k, c,
                   m ? "_m" : "");
          uint8_t *gray = malloc((size_t)out.w * out.h);
          fc_rect boxes[16];
          int n = 0;
          if (gray) {
            fc_image_to_gray(&out, gray, out.w);
            n = fc_haar_detect(haar, gray, out.w, out.h, out.w, &hp, boxes, 16);
          }
          if (!gray || n < 0 || write_ppm(path, &out)) {
            fprintf(stderr, "%s: failed\n", path);
            return 1;
          }
          for (int b = 0; b < n && b < 16; b++)
            printf("%s %d %d %d %d\n", path, boxes[b].x, boxes[b].y, boxes[b].w, boxes[b].h);
          free(gray);
          fc_image_free(&out);
        }
    fc_image_free(&img);
  }
  fc_haar_destroy(haar);
  return 0;
}
