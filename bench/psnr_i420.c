/* Y-plane PSNR between two raw I420 files of equal size (bench/x264_still_quality.sh).
 *
 *   psnr_i420 W H SOURCE.i420 DECODED.i420
 *
 * Prints one line: the whole picture's PSNR (mean and worst frame) and the same over the
 * "moving box", the bounding box of the source pixels that change by more than 8 levels
 * anywhere in the clip (the mouth, for a talking photo), where an encoder's losses show. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double psnr(double sse, double n) {
  double mse = sse / n;
  return 10.0 * log10(255.0 * 255.0 / (mse > 1e-9 ? mse : 1e-9));
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: psnr_i420 W H SOURCE.i420 DECODED.i420\n");
    return 2;
  }
  const int w = atoi(argv[1]), h = atoi(argv[2]);
  if (w <= 0 || h <= 0 || (w & 1) || (h & 1)) {
    fprintf(stderr, "psnr_i420: bad size %sx%s\n", argv[1], argv[2]);
    return 2;
  }
  const size_t fsz = (size_t)w * h * 3 / 2;
  FILE *a = fopen(argv[3], "rb"), *b = fopen(argv[4], "rb");
  uint8_t *x = malloc(fsz), *y = malloc(fsz), *first = malloc((size_t)w * h);
  if (!a || !b || !x || !y || !first) {
    fprintf(stderr, "psnr_i420: cannot open %s or %s\n", argv[3], argv[4]);
    return 1;
  }
  /* Pass 1: the moving box over the source. */
  int x0 = w, y0 = h, x1 = -1, y1 = -1, n = 0;
  while (fread(x, 1, fsz, a) == fsz) {
    if (!n++) memcpy(first, x, (size_t)w * h);
    for (int r = 0; r < h; r++)
      for (int c = 0; c < w; c++)
        if (abs(x[r * w + c] - first[r * w + c]) > 8) {
          if (c < x0) x0 = c;
          if (c > x1) x1 = c;
          if (r < y0) y0 = r;
          if (r > y1) y1 = r;
        }
  }
  if (!n) {
    fprintf(stderr, "psnr_i420: %s holds no whole frame\n", argv[3]);
    return 1;
  }
  if (x1 < 0) x0 = 0, y0 = 0, x1 = w - 1, y1 = h - 1; /* nothing moves: the whole picture */
  rewind(a);
  double sum = 0, worst = 1e9, bsum = 0, bworst = 1e9;
  int m = 0;
  const double bn = (double)(x1 - x0 + 1) * (y1 - y0 + 1);
  while (fread(x, 1, fsz, a) == fsz && fread(y, 1, fsz, b) == fsz) {
    double e = 0, eb = 0;
    for (int r = 0; r < h; r++)
      for (int c = 0; c < w; c++) {
        const double d = (double)x[r * w + c] - y[r * w + c];
        e += d * d;
        if (r >= y0 && r <= y1 && c >= x0 && c <= x1) eb += d * d;
      }
    const double p = psnr(e, (double)w * h), pb = psnr(eb, bn);
    sum += p, bsum += pb, m++;
    if (p < worst) worst = p;
    if (pb < bworst) bworst = pb;
  }
  if (m != n) {
    fprintf(stderr, "psnr_i420: %d source frames but %d decoded\n", n, m);
    return 1;
  }
  printf("Y-PSNR %.2f dB (worst frame %.2f), moving box %dx%d %.2f dB (worst %.2f), %d frames\n",
         sum / m, worst, x1 - x0 + 1, y1 - y0 + 1, bsum / m, bworst, m);
  free(x), free(y), free(first);
  fclose(a), fclose(b);
  return 0;
}
