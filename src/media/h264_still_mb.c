/* One macroblock of fc_h264_still's P pictures (see h264_still.h, h264_still_internal.h).
 *
 * Motion: whole-sample vectors only, found by a small diamond search on the luma SAD (plus a
 * cost for the vector's bits) from the zero vector and the two predicted ones; a talking
 * mouth's edges move a sample or two a picture, and that halves what the residual costs
 * against the zero vector. Whole-sample luma needs no interpolation; chroma then sits on whole
 * or half samples, interpolated as clause 8.4.2.2.2 says (bilinear, eighths). Vectors keep
 * the block and its chroma neighbour inside the picture, so no edge extension is needed.
 *
 * Residual: the 4x4 core transform, flat quantization with x264's inter dead zone (a sixth of
 * a step), decimation of blocks whose only levels are scattered +-1 (as x264 and JM do: they
 * cost more bits than they return), CAVLC. The reconstruction is the decoder's arithmetic
 * (clauses 8.5.12, 8.5.11), written to the stage until the picture is done. */
#include "media/h264_still_internal.h"

#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* forward multipliers and dequantizer scales by qp % 6 for the three kinds of position in a
 * 4x4 block: both coordinates even, both odd, mixed */
static const int MF[6][3] = {{13107, 5243, 8066}, {11916, 4660, 7490}, {10082, 4194, 6554},
                             {9362, 3647, 5825},  {8192, 3355, 5243}, {7282, 2893, 4559}};
static const int V[6][3] = {{10, 16, 13}, {11, 18, 14}, {13, 20, 16},
                            {14, 23, 18}, {16, 25, 20}, {18, 29, 23}};
static const uint8_t ZIGZAG[16] = {0, 1, 4, 8, 5, 2, 3, 6, 9, 12, 13, 10, 7, 11, 14, 15};
#define LEVEL_MAX 2047 /* CAVLC in a Baseline stream carries up to here for any suffix length */
#define SEARCH 16      /* the farthest a vector reaches, in whole samples */

static inline int kind(int i) { return ((i >> 2) & 1) == (i & 1) ? (i & 1) : 2; }

void fc_h264_quant_init(struct fc_quant *q, int qp) {
  q->shift = 15 + qp / 6;
  q->round = (1 << q->shift) / 5;
  for (int k = 0; k < 16; k++) {
    const int i = ZIGZAG[k];
    q->mf[k] = MF[qp % 6][kind(i)];
    q->mf_raster[i] = (int16_t)q->mf[k];
    q->dq[k] = V[qp % 6][kind(i)] * (1 << qp / 6);
  }
}

/* ---- transforms and quantization ---- */

/* the inverse transform of d (raster) added to the prediction, into dst (clause 8.5.12.2) */
static void idct4_add(const int32_t *d, const uint8_t *pred, int ps, uint8_t *dst, int ds) {
  int32_t t[16];
  for (int y = 0; y < 4; y++) {
    const int32_t *r = d + y * 4;
    const int32_t e0 = r[0] + r[2], e1 = r[0] - r[2], e2 = (r[1] >> 1) - r[3],
                  e3 = r[1] + (r[3] >> 1);
    t[y * 4] = e0 + e3, t[y * 4 + 1] = e1 + e2, t[y * 4 + 2] = e1 - e2, t[y * 4 + 3] = e0 - e3;
  }
  for (int x = 0; x < 4; x++) {
    const int32_t e0 = t[x] + t[8 + x], e1 = t[x] - t[8 + x], e2 = (t[4 + x] >> 1) - t[12 + x],
                  e3 = t[4 + x] + (t[12 + x] >> 1);
    const int32_t f[4] = {e0 + e3, e1 + e2, e1 - e2, e0 - e3};
    for (int y = 0; y < 4; y++) {
      const int v = pred[y * ps + x] + ((f[y] + 32) >> 6);
      dst[y * ds + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

/* A block's decimation score: a cost for each +-1 level by the zeros before it; any larger
 * level makes the block worth keeping (9). */
static int decimate_score(const int16_t *lev, int first) {
  static const uint8_t COST[16] = {3, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  int score = 0, run = 0;
  for (int k = first; k < 16; k++) {
    if (!lev[k]) {
      run++;
      continue;
    }
    if (lev[k] > 1 || lev[k] < -1) return 9;
    score += COST[run];
    run = 0;
  }
  return score;
}

/* ---- two 4x4 blocks side by side: residual, transform, quantization ---- */

/* The reference: levels (zigzag, from first on; those before are 0) of the two 4x4 blocks of
 * src - pred at columns 0-3 and 4-7, their counts, and their transforms' DC coefficients. */
void fc_h264_fdct_quant_pair_ref(const uint8_t *src, int ss, const uint8_t *pred, int ps,
                                 const struct fc_quant *q, int first, int16_t lev[2][16],
                                 int nz[2], int32_t dc[2]) {
  for (int b = 0; b < 2; b++) {
    int32_t t[16], c[16];
    for (int y = 0; y < 4; y++) {
      int x0 = src[y * ss + b * 4] - pred[y * ps + b * 4];
      int x1 = src[y * ss + b * 4 + 1] - pred[y * ps + b * 4 + 1];
      int x2 = src[y * ss + b * 4 + 2] - pred[y * ps + b * 4 + 2];
      int x3 = src[y * ss + b * 4 + 3] - pred[y * ps + b * 4 + 3];
      const int s0 = x0 + x3, s1 = x1 + x2, d0 = x0 - x3, d1 = x1 - x2;
      t[y * 4] = s0 + s1, t[y * 4 + 1] = 2 * d0 + d1, t[y * 4 + 2] = s0 - s1,
            t[y * 4 + 3] = d0 - 2 * d1;
    }
    for (int x = 0; x < 4; x++) {
      const int s0 = t[x] + t[12 + x], s1 = t[4 + x] + t[8 + x];
      const int d0 = t[x] - t[12 + x], d1 = t[4 + x] - t[8 + x];
      c[x] = s0 + s1, c[4 + x] = 2 * d0 + d1, c[8 + x] = s0 - s1, c[12 + x] = d0 - 2 * d1;
    }
    dc[b] = c[0];
    nz[b] = 0;
    for (int k = 0; k < 16; k++) {
      const int32_t v = c[ZIGZAG[k]];
      int32_t l = k < first ? 0 : (int32_t)(((uint32_t)abs(v) * (uint32_t)q->mf[k] + (uint32_t)q->round) >> q->shift);
      l = l > LEVEL_MAX ? LEVEL_MAX : l;
      lev[b][k] = (int16_t)(v < 0 ? -l : l);
      nz[b] += l != 0;
    }
  }
}

#if defined(__SSE2__)
/* 4x4 transposes of the two halves of four registers of 8 int16 */
static inline void transpose_halves(__m128i *x0, __m128i *x1, __m128i *x2, __m128i *x3) {
  const __m128i a0 = _mm_unpacklo_epi16(*x0, *x1), a1 = _mm_unpacklo_epi16(*x2, *x3);
  const __m128i b0 = _mm_unpackhi_epi16(*x0, *x1), b1 = _mm_unpackhi_epi16(*x2, *x3);
  const __m128i c0 = _mm_unpacklo_epi32(a0, a1), c1 = _mm_unpackhi_epi32(a0, a1);
  const __m128i d0 = _mm_unpacklo_epi32(b0, b1), d1 = _mm_unpackhi_epi32(b0, b1);
  *x0 = _mm_unpacklo_epi64(c0, d0), *x1 = _mm_unpackhi_epi64(c0, d0);
  *x2 = _mm_unpacklo_epi64(c1, d1), *x3 = _mm_unpackhi_epi64(c1, d1);
}

/* the core transform's butterflies across four registers, lane by lane */
static inline void butterflies(__m128i *x0, __m128i *x1, __m128i *x2, __m128i *x3) {
  const __m128i s0 = _mm_add_epi16(*x0, *x3), s1 = _mm_add_epi16(*x1, *x2);
  const __m128i d0 = _mm_sub_epi16(*x0, *x3), d1 = _mm_sub_epi16(*x1, *x2);
  *x0 = _mm_add_epi16(s0, s1);
  *x1 = _mm_add_epi16(_mm_add_epi16(d0, d0), d1);
  *x2 = _mm_sub_epi16(s0, s1);
  *x3 = _mm_sub_epi16(d0, _mm_add_epi16(d1, d1));
}

/* The same as the reference, eight lanes at a time: each register a row of the two blocks.
 * Coefficients fit int16 (at most 6 * 6 * 255); the quantizer's products take 32 bits. */
static void fdct_quant_pair(const uint8_t *src, int ss, const uint8_t *pred, int ps,
                            const struct fc_quant *q, int first, int16_t lev[2][16], int nz[2],
                            int32_t dc[2]) {
  const __m128i zero = _mm_setzero_si128();
  __m128i r[4];
  for (int y = 0; y < 4; y++)
    r[y] = _mm_sub_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(src + y * ss)), zero),
                         _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(pred + y * ps)), zero));
  transpose_halves(&r[0], &r[1], &r[2], &r[3]); /* registers: columns */
  butterflies(&r[0], &r[1], &r[2], &r[3]);      /* along each row */
  transpose_halves(&r[0], &r[1], &r[2], &r[3]); /* registers: rows again */
  butterflies(&r[0], &r[1], &r[2], &r[3]);      /* along each column */
  int16_t c[2][16];
  for (int y = 0; y < 4; y++) {
    _mm_storel_epi64((__m128i *)(c[0] + y * 4), r[y]);
    _mm_storel_epi64((__m128i *)(c[1] + y * 4), _mm_srli_si128(r[y], 8));
  }
  dc[0] = c[0][0], dc[1] = c[1][0];
  /* quantize in raster order with the multipliers laid out to match, then scan */
  const __m128i rnd = _mm_set1_epi32(q->round), cnt = _mm_cvtsi32_si128(q->shift);
  const __m128i top = _mm_set1_epi16(LEVEL_MAX);
  for (int b = 0; b < 2; b++) {
    int16_t l[16];
    for (int h = 0; h < 2; h++) {
      const __m128i v = _mm_loadu_si128((const __m128i *)(c[b] + h * 8));
      const __m128i sign = _mm_srai_epi16(v, 15);
      const __m128i a = _mm_max_epi16(v, _mm_sub_epi16(zero, v));
      const __m128i mf = _mm_loadu_si128((const __m128i *)(q->mf_raster + h * 8));
      const __m128i lo = _mm_mullo_epi16(a, mf), hi = _mm_mulhi_epi16(a, mf);
      __m128i p0 = _mm_srl_epi32(_mm_add_epi32(_mm_unpacklo_epi16(lo, hi), rnd), cnt);
      __m128i p1 = _mm_srl_epi32(_mm_add_epi32(_mm_unpackhi_epi16(lo, hi), rnd), cnt);
      __m128i lv = _mm_min_epi16(_mm_packs_epi32(p0, p1), top);
      lv = _mm_sub_epi16(_mm_xor_si128(lv, sign), sign);
      _mm_storeu_si128((__m128i *)(l + h * 8), lv);
    }
    int n = 0;
    for (int k = 0; k < 16; k++) {
      const int16_t v = k < first ? 0 : l[ZIGZAG[k]];
      lev[b][k] = v;
      n += v != 0;
    }
    nz[b] = n;
  }
}
#else
#define fdct_quant_pair fc_h264_fdct_quant_pair_ref
#endif

void fc_h264_fdct_quant_pair(const uint8_t *src, int ss, const uint8_t *pred, int ps,
                             const struct fc_quant *q, int first, int16_t lev[2][16], int nz[2],
                             int32_t dc[2]) {
  fdct_quant_pair(src, ss, pred, ps, q, first, lev, nz, dc);
}

/* ---- prediction ---- */

static int sad16(const uint8_t *a, int as, const uint8_t *b, int bs) {
#if defined(__SSE2__)
  __m128i acc = _mm_setzero_si128();
  for (int y = 0; y < 16; y++)
    acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_loadu_si128((const __m128i *)(a + y * as)),
                                          _mm_loadu_si128((const __m128i *)(b + y * bs))));
  return _mm_cvtsi128_si32(acc) + _mm_cvtsi128_si32(_mm_srli_si128(acc, 8));
#else
  int s = 0;
  for (int y = 0; y < 16; y++)
    for (int x = 0; x < 16; x++) s += abs(a[y * as + x] - b[y * bs + x]);
  return s;
#endif
}

/* bits of se(v) */
static inline int se_bits(int v) {
  const unsigned k = v > 0 ? 2u * (unsigned)v - 1 : 2u * (unsigned)-v;
  return 2 * (31 - __builtin_clz(k + 1)) + 1;
}

/* whether the vector (whole samples dx, dy) keeps what the prediction reads inside the
 * picture: the 16x16 luma block, and for an odd component (chroma between samples) the chroma
 * sample after the 8x8 block too */
static inline int in_picture(const fc_h264_still *s, int mbx, int mby, int dx, int dy) {
  const int x = mbx * 16 + dx, y = mby * 16 + dy;
  return x >= 0 && y >= 0 && x + 16 + (dx & 1) <= s->w && y + 16 + (dy & 1) <= s->h &&
         dx >= -SEARCH && dx <= SEARCH && dy >= -SEARCH && dy <= SEARCH;
}

/* The prediction for vector mv: 16x16 luma then 8x8 Cb and Cr, packed (strides 16, 8, 8). */
static void predict(const fc_h264_still *s, int mbx, int mby, fc_mv mv, uint8_t *p) {
  const int dx = mv.x >> 2, dy = mv.y >> 2;
  const uint8_t *l = s->rec[0] + (size_t)(mby * 16 + dy) * s->rs[0] + mbx * 16 + dx;
  for (int y = 0; y < 16; y++) memcpy(p + y * 16, l + (size_t)y * s->rs[0], 16);
  /* chroma: the vector in eighths of a chroma sample */
  const int cx = mbx * 8 + (mv.x >> 3), cy = mby * 8 + (mv.y >> 3), fx = mv.x & 7, fy = mv.y & 7;
  for (int c = 0; c < 2; c++) {
    const uint8_t *r = s->rec[1 + c] + (size_t)cy * s->rs[1 + c] + cx;
    uint8_t *o = p + 256 + c * 64;
    const int rs = s->rs[1 + c];
    if (!fx && !fy) { /* on whole samples: nothing past the block is read */
      for (int y = 0; y < 8; y++) memcpy(o + y * 8, r + (size_t)y * rs, 8);
      continue;
    }
    for (int y = 0; y < 8; y++)
      for (int x = 0; x < 8; x++) {
        const uint8_t *a = r + (size_t)y * rs + x;
        o[y * 8 + x] = (uint8_t)(((8 - fx) * (8 - fy) * a[0] + fx * (8 - fy) * a[1] +
                                  (8 - fx) * fy * a[rs] + fx * fy * a[rs + 1] + 32) >> 6);
      }
  }
}

/* ---- residual and bits ---- */

typedef struct mb_work {
  int16_t luma[16][16];  /* levels by 4x4 block (raster of blocks), zigzag order */
  int16_t cdc[2][4];     /* chroma DC levels, raster */
  int16_t cac[2][4][16]; /* chroma AC levels, zigzag order, [0] unused */
  uint8_t nz[NZ_PER_MB]; /* coefficient counts (0 for a block whose levels are dropped) */
  int cbp, chroma;       /* luma 8x8 bits; 0 no chroma, 1 DC only, 2 AC too */
} mb_work;

static inline int16_t clamp_level(int32_t v, int32_t l) {
  l = l > LEVEL_MAX ? LEVEL_MAX : l;
  return (int16_t)(v < 0 ? -l : l);
}

/* The levels of src against prediction p, after decimation: sets m; returns whether any is
 * left (a macroblock that must be coded, not skipped, at this vector). */
static int residual(const fc_h264_still *s, const uint8_t *const src[3], const int ss[3],
                    int mbx, int mby, const uint8_t *p, mb_work *m) {
  int score8[4] = {0, 0, 0, 0};
  memset(m->nz, 0, sizeof m->nz);
  m->cbp = m->chroma = 0;

  /* luma, two blocks at a time */
  const uint8_t *sy = src[0] + (size_t)mby * 16 * ss[0] + mbx * 16;
  for (int by = 0; by < 4; by++)
    for (int bx = 0; bx < 4; bx += 2) {
      int16_t lev[2][16];
      int n[2];
      int32_t dc[2];
      fdct_quant_pair(sy + by * 4 * ss[0] + bx * 4, ss[0], p + by * 64 + bx * 4, 16, &s->qy, 0,
                      lev, n, dc);
      for (int j = 0; j < 2; j++) {
        const int b = by * 4 + bx + j;
        memcpy(m->luma[b], lev[j], sizeof lev[j]);
        if ((m->nz[NZ_LUMA + b] = (uint8_t)n[j]))
          score8[(by >> 1) * 2 + (bx >> 1)] += decimate_score(m->luma[b], 0);
      }
    }
  /* decimation: an 8x8 scoring under 4 goes, and all of the luma when what is left scores
   * under 6 (x264's thresholds) */
  int total = 0;
  for (int b8 = 0; b8 < 4; b8++) total += score8[b8] >= 4 ? score8[b8] : 0;
  for (int b = 0; b < 16; b++) {
    const int b8 = (b >> 3) * 2 + ((b & 3) >> 1);
    if (!m->nz[NZ_LUMA + b]) continue;
    if (total < 6 || score8[b8] < 4) m->nz[NZ_LUMA + b] = 0;
    else m->cbp |= 1 << b8;
  }

  /* chroma: DC through the 2x2 transform, AC per block, a plane's AC dropped by decimation */
  for (int pl = 0; pl < 2; pl++) {
    const uint8_t *sc = src[1 + pl] + (size_t)mby * 8 * ss[1 + pl] + mbx * 8;
    const uint8_t *pc = p + 256 + pl * 64;
    uint8_t *nzc = m->nz + (pl ? NZ_CR : NZ_CB);
    int32_t dc[4] = {0, 0, 0, 0};
    int score = 0, any = 0;
    for (int by = 0; by < 2; by++) {
      int n[2];
      fdct_quant_pair(sc + by * 4 * ss[1 + pl], ss[1 + pl], pc + by * 32, 8, &s->qc, 1,
                      m->cac[pl] + by * 2, n, dc + by * 2);
      for (int j = 0; j < 2; j++)
        if ((nzc[by * 2 + j] = (uint8_t)n[j]))
          score += decimate_score(m->cac[pl][by * 2 + j], 1), any = 1;
    }
    if (any && score < 7) { /* x264's threshold for a plane's AC */
      memset(nzc, 0, 4);
      any = 0;
    }
    if (any) m->chroma = 2;
    const int32_t f[4] = {dc[0] + dc[1] + dc[2] + dc[3], dc[0] - dc[1] + dc[2] - dc[3],
                          dc[0] + dc[1] - dc[2] - dc[3], dc[0] - dc[1] - dc[2] + dc[3]};
    for (int k = 0; k < 4; k++) {
      const int32_t l = (int32_t)(((uint32_t)abs(f[k]) * (uint32_t)s->dc_mf +
                                   (uint32_t)s->dc_round) >> (s->qc.shift + 1));
      m->cdc[pl][k] = clamp_level(f[k], l);
      if (l && !m->chroma) m->chroma = 1;
    }
  }
  if (m->chroma < 2) memset(m->nz + NZ_CB, 0, 8);
  return m->cbp || m->chroma;
}

/* nC of block (bx, by) of a plane with n blocks a side at offset base in the counts */
static int nc_of(const fc_h264_still *s, int mbx, int mby, int bx, int by, int n, int base,
                 const uint8_t *cur) {
  int a = -1, b = -1;
  if (bx > 0) {
    a = cur[base + by * n + bx - 1];
  } else if (mbx > 0) {
    const int mb = mby * s->mbw + mbx - 1;
    a = s->stamp[mb] == s->picture ? s->nz[(size_t)mb * NZ_PER_MB + base + by * n + n - 1] : 0;
  }
  if (by > 0) {
    b = cur[base + (by - 1) * n + bx];
  } else if (mby > 0) {
    const int mb = (mby - 1) * s->mbw + mbx;
    b = s->stamp[mb] == s->picture ? s->nz[(size_t)mb * NZ_PER_MB + base + (n - 1) * n + bx] : 0;
  }
  if (a >= 0 && b >= 0) return (a + b + 1) >> 1;
  return a >= 0 ? a : b >= 0 ? b : 0;
}

/* mb_skip_run, P_L0_16x16 (one reference: no ref_idx), mvd, coded_block_pattern and, with any
 * levels, mb_qp_delta 0 and the residual */
static void write_mb(const fc_h264_still *s, fc_bitw *w, int mbx, int mby, fc_mv mv, fc_mv mvp,
                     mb_work *m, unsigned *skip_run) {
  for (int b = 0; b < 16; b++)
    if (!m->nz[NZ_LUMA + b]) memset(m->luma[b], 0, sizeof m->luma[b]);
  for (int pl = 0; pl < 2; pl++)
    for (int b = 0; b < 4; b++)
      if (!m->nz[(pl ? NZ_CR : NZ_CB) + b]) memset(m->cac[pl][b], 0, sizeof m->cac[pl][b]);
  fc_bitw_ue(w, *skip_run);
  *skip_run = 0;
  fc_bitw_ue(w, 0);
  fc_bitw_se(w, mv.x - mvp.x);
  fc_bitw_se(w, mv.y - mvp.y);
  fc_bitw_cbp_inter(w, m->cbp | m->chroma << 4);
  if (!m->cbp && !m->chroma) return;
  fc_bitw_se(w, 0);
  for (int b8 = 0; b8 < 4; b8++)
    for (int b4 = 0; b4 < 4 && (m->cbp & 1 << b8); b4++) {
      const int bx = (b8 & 1) * 2 + (b4 & 1), by = (b8 >> 1) * 2 + (b4 >> 1);
      fc_cavlc_block(w, m->luma[by * 4 + bx], 16, nc_of(s, mbx, mby, bx, by, 4, NZ_LUMA, m->nz));
    }
  if (m->chroma)
    for (int pl = 0; pl < 2; pl++) fc_cavlc_block(w, m->cdc[pl], 4, -1);
  if (m->chroma == 2)
    for (int pl = 0; pl < 2; pl++)
      for (int b = 0; b < 4; b++)
        fc_cavlc_block(w, m->cac[pl][b] + 1, 15,
                       nc_of(s, mbx, mby, b & 1, b >> 1, 2, pl ? NZ_CR : NZ_CB, m->nz));
}

/* prediction plus the dequantized residual, as a decoder makes it, into o (packed like p) */
static void reconstruct(const fc_h264_still *s, const uint8_t *p, const mb_work *m, uint8_t *o) {
  memcpy(o, p, MB_BYTES);
  for (int b = 0; b < 16; b++) {
    if (!m->nz[NZ_LUMA + b]) continue;
    int32_t d[16];
    for (int k = 0; k < 16; k++) d[ZIGZAG[k]] = m->luma[b][k] * s->qy.dq[k];
    const int off = (b >> 2) * 64 + (b & 3) * 4;
    idct4_add(d, p + off, 16, o + off, 16);
  }
  if (!m->chroma) return;
  for (int pl = 0; pl < 2; pl++) {
    const int16_t *l = m->cdc[pl];
    const int32_t g[4] = {l[0] + l[1] + l[2] + l[3], l[0] - l[1] + l[2] - l[3],
                          l[0] + l[1] - l[2] - l[3], l[0] - l[1] - l[2] + l[3]};
    const uint8_t *nzc = m->nz + (pl ? NZ_CR : NZ_CB);
    for (int b = 0; b < 4; b++) {
      int32_t d[16];
      d[0] = (g[b] * s->dc_dq) >> 5;
      for (int k = 1; k < 16; k++) d[ZIGZAG[k]] = nzc[b] ? m->cac[pl][b][k] * s->qc.dq[k] : 0;
      const int off = 256 + pl * 64 + (b >> 1) * 32 + (b & 1) * 4;
      if (d[0] || nzc[b]) idct4_add(d, p + off, 8, o + off, 8);
    }
  }
}

/* ---- the macroblock ---- */

static inline int same(fc_mv a, fc_mv b) { return a.x == b.x && a.y == b.y; }

/* SAD of the luma at whole-sample vector (dx, dy) plus its bits' cost */
static int cost(const fc_h264_still *s, const uint8_t *sy, int ss, int mbx, int mby, int dx,
                int dy, fc_mv mvp) {
  const uint8_t *r = s->rec[0] + (size_t)(mby * 16 + dy) * s->rs[0] + mbx * 16 + dx;
  return sad16(sy, ss, r, s->rs[0]) +
         s->lambda * (se_bits(dx * 4 - mvp.x) + se_bits(dy * 4 - mvp.y));
}

/* the best whole-sample vector: the start candidates, then a diamond until it settles */
static fc_mv search(const fc_h264_still *s, const uint8_t *sy, int ss, int mbx, int mby,
                    fc_mv mvp, fc_mv mv_skip, int *best_cost) {
  const fc_mv cand[3] = {{0, 0}, mvp, mv_skip};
  int bx = 0, by = 0, best = cost(s, sy, ss, mbx, mby, 0, 0, mvp);
  for (int i = 1; i < 3; i++) {
    const int dx = cand[i].x >> 2, dy = cand[i].y >> 2;
    if ((dx || dy) && in_picture(s, mbx, mby, dx, dy)) {
      const int c = cost(s, sy, ss, mbx, mby, dx, dy, mvp);
      if (c < best) best = c, bx = dx, by = dy;
    }
  }
  static const int8_t DX[4] = {1, -1, 0, 0}, DY[4] = {0, 0, 1, -1};
  for (int it = 0; it < 2 * SEARCH; it++) {
    int moved = 0;
    for (int k = 0; k < 4; k++) {
      const int dx = bx + DX[k], dy = by + DY[k];
      if (!in_picture(s, mbx, mby, dx, dy)) continue;
      const int c = cost(s, sy, ss, mbx, mby, dx, dy, mvp);
      if (c < best) best = c, bx = dx, by = dy, moved = 1;
    }
    if (!moved) break;
  }
  *best_cost = best;
  return (fc_mv){(int16_t)(bx * 4), (int16_t)(by * 4)};
}

int fc_h264_still_mb(fc_h264_still *s, fc_bitw *w, int mbx, int mby, const uint8_t *const src[3],
                     const int ss[3], fc_mv mvp, fc_mv mv_skip, unsigned *skip_run) {
  const int mb = mby * s->mbw + mbx;
  const uint8_t *sy = src[0] + (size_t)mby * 16 * ss[0] + mbx * 16;
  uint8_t p[MB_BYTES];
  mb_work m;
  int best_cost;
  const fc_mv mv = search(s, sy, ss[0], mbx, mby, mvp, mv_skip, &best_cost);
  int coded = 1, have = 0;
  fc_mv use = mv;
  /* P_Skip where its vector leaves nothing to code: tried first when it is the search's
   * choice or close to it (within the cost of a few bits) */
  const int skip_ok = mv_skip.x % 4 == 0 && mv_skip.y % 4 == 0 &&
                      in_picture(s, mbx, mby, mv_skip.x >> 2, mv_skip.y >> 2);
  if (skip_ok && (same(mv, mv_skip) ||
                  cost(s, sy, ss[0], mbx, mby, mv_skip.x >> 2, mv_skip.y >> 2, mvp) <=
                      best_cost + 8 * s->lambda)) {
    predict(s, mbx, mby, mv_skip, p);
    if (!residual(s, src, ss, mbx, mby, p, &m)) coded = 0, use = mv_skip;
    have = same(mv, mv_skip); /* p and m are the search's choice's already */
  }
  if (coded) {
    if (!have) {
      predict(s, mbx, mby, mv, p);
      residual(s, src, ss, mbx, mby, p, &m);
    }
    write_mb(s, w, mbx, mby, mv, mvp, &m, skip_run);
  } else {
    (*skip_run)++;
    memset(m.nz, 0, sizeof m.nz);
  }
  memcpy(s->nz + (size_t)mb * NZ_PER_MB, m.nz, NZ_PER_MB);
  s->mv[mb] = use;
  s->stamp[mb] = s->picture;
  if (coded || use.x || use.y) { /* otherwise the reference stands as it is */
    uint8_t *o = s->stage + (size_t)s->n_stage * MB_BYTES;
    if (coded) reconstruct(s, p, &m, o);
    else memcpy(o, p, MB_BYTES);
    s->stage_mb[s->n_stage++] = mb;
  }
  return coded;
}
