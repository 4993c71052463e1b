/* Private: the arithmetic of fc_w2l_composite (wav2lip.h), shared by the C reference
 * (composite.c) and the CUDA kernels (w2l_kernels.cu), so that both make the same bytes from the
 * same network output. Integer bilinear sampling with positions in 1/256 pixel; the mask in
 * float with only multiplications, divisions and subtractions (nothing a compiler may fuse into
 * an FMA, which would round differently on the two sides); libyuv's BT.601 integer formulas.
 *
 * Work unit: one 2×2 block of the patch rect (4 luma samples, one chroma pair), so chroma and
 * its mask average the four pixels the block's luma uses. */
#ifndef FC_W2L_COMPOSITE_H
#define FC_W2L_COMPOSITE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define W2L_HD static inline __host__ __device__
#else
#define W2L_HD static inline
#endif

/* One job as the CUDA kernels read it: byte offsets into the source arena (face box RGB, tight
 * rows; the patch rect's background I420), into the output buffer (the finished I420) and into
 * the feature arena (the job's face-encoder outputs, cuda_composite.c: written after the face
 * encoder when store is set, read by a pass that skips the face encoder). */
typedef struct w2l_cjob {
  uint64_t rgb, base, out, feat;
  int32_t bw, bh, y0, live; /* live 0: a padding job (nothing read or written) */
  int32_t store, pad_;
} w2l_cjob;

/* Sample d of dst_len along an axis of src_len samples (pixel centres aligned): source index and
 * the weight of the next sample (0..255); edges repeat. */
W2L_HD void w2l_axis(int d, int src_len, int dst_len, int *idx, int *w1) {
  int pos = (int)(((2LL * d + 1) * src_len * 128) / dst_len) - 128;
  if (pos < 0) {
    *idx = 0, *w1 = 0;
  } else if ((pos >> 8) >= src_len - 1) {
    *idx = src_len - 1, *w1 = 0;
  } else {
    *idx = pos >> 8, *w1 = pos & 255;
  }
}

/* Bilinear sample of channel c of an RGB byte image at (x + wx/256, y + wy/256). */
W2L_HD int w2l_bilerp(const uint8_t *img, int stride, int x, int wx, int y, int wy, int c) {
  const uint8_t *r0 = img + (long)y * stride + 3 * x + c, *r1 = wy ? r0 + stride : r0;
  int dx = wx ? 3 : 0;
  int top = (256 - wx) * r0[0] + wx * r0[dx], bot = (256 - wx) * r1[0] + wx * r1[dx];
  return ((256 - wy) * top + wy * bot + 32768) >> 16;
}

/* The mask at pixel (x, by) of a bw × bh box, 0..255 (see wav2lip.h). */
W2L_HD int w2l_alpha(int x, int by, int bw, int bh) {
  float v = (by + 0.5f) / bh, u = (x + 0.5f) / bw;
  float av = v < 0.45f ? 0.0f : v > 0.6f ? 1.0f : (v - 0.45f) / 0.15f;
  float ab = v > 0.95f ? (1.0f - v) / 0.05f : 1.0f;
  float as = u < 0.08f ? u / 0.08f : u > 0.92f ? (1.0f - u) / 0.08f : 1.0f;
  /* rintf, not (int)(a + 0.5f): nvcc would fuse that last multiply and add into one fma and
   * round differently from the host near .5 (the two sides must give the same bytes). */
  return (int)rintf(255.0f * av * ab * as);
}

W2L_HD int w2l_mix(int p, int b, int a) { return (p * a + b * (255 - a) + 127) / 255; }
W2L_HD int w2l_y(int r, int g, int b) { return (66 * r + 129 * g + 25 * b + 0x1080) >> 8; }
W2L_HD int w2l_u(int r, int g, int b) { return (112 * b - 74 * g - 38 * r + 0x8080) >> 8; }
W2L_HD int w2l_v(int r, int g, int b) { return (112 * r - 94 * g - 18 * b + 0x8080) >> 8; }

/* Crop pixel (x, y) of the S×S network input (S = the model's face side, 96 or 256): the
 * bw × bh face box resized. */
W2L_HD void w2l_crop_px(const uint8_t *box, int stride, int bw, int bh, int S, int x, int y,
                        uint8_t *dst) {
  int ix, wx, iy, wy;
  w2l_axis(x, bw, S, &ix, &wx);
  w2l_axis(y, bh, S, &iy, &wy);
  for (int c = 0; c < 3; c++) dst[c] = (uint8_t)w2l_bilerp(box, stride, ix, wx, iy, wy, c);
}

/* Block (bx, by) of the patch rect (bx < bw/2, by < (bh-y0)/2): the network's S×S RGB output
 * net resized over the box, blended into the background bg, written to dst (both I420 of the
 * rect, tight; they may be the same buffer: a block reads only what it then writes). */
W2L_HD void w2l_paste_block(const uint8_t *net, int S, int bw, int bh, int y0, int bx, int by,
                            const uint8_t *bg, uint8_t *dst) {
  int rw = bw, rh = bh - y0;
  long ysz = (long)rw * rh, csz = (long)(rw / 2) * (rh / 2);
  const uint8_t *ybg = bg, *ubg = bg + ysz, *vbg = ubg + csz;
  uint8_t *yp = dst, *up = dst + ysz, *vp = up + csz;
  int rs = 0, gs = 0, bs = 0, as = 0;
  for (int k = 0; k < 4; k++) {
    int x = 2 * bx + (k & 1), yr = 2 * by + (k >> 1), yb = yr + y0;
    int ix, wx, iy, wy;
    w2l_axis(x, S, bw, &ix, &wx);
    w2l_axis(yb, S, bh, &iy, &wy);
    int r = w2l_bilerp(net, 3 * S, ix, wx, iy, wy, 0);
    int g = w2l_bilerp(net, 3 * S, ix, wx, iy, wy, 1);
    int b = w2l_bilerp(net, 3 * S, ix, wx, iy, wy, 2);
    int a = w2l_alpha(x, yb, bw, bh);
    long o = (long)yr * rw + x;
    yp[o] = (uint8_t)w2l_mix(w2l_y(r, g, b), ybg[o], a);
    rs += r, gs += g, bs += b, as += a;
  }
  int r = (rs + 2) >> 2, g = (gs + 2) >> 2, b = (bs + 2) >> 2, a = (as + 2) >> 2;
  long c = (long)by * (rw / 2) + bx;
  up[c] = (uint8_t)w2l_mix(w2l_u(r, g, b), ubg[c], a);
  vp[c] = (uint8_t)w2l_mix(w2l_v(r, g, b), vbg[c], a);
}

#endif
