/* fc_h264_still's state, shared by h264_still.c (parameter sets, the slice, motion vector
 * prediction) and h264_still_mb.c (one macroblock: motion search, transform, quantization,
 * CAVLC, reconstruction). Internal to src/media. */
#ifndef FC_MEDIA_H264_STILL_INTERNAL_H
#define FC_MEDIA_H264_STILL_INTERNAL_H

#include "media/h264_cavlc.h"
#include "media/h264_still.h"

#include <stdint.h>

typedef struct fc_mv {
  int16_t x, y; /* quarter luma samples; every vector written here is whole samples */
} fc_mv;

struct fc_quant { /* one quantizer's per-position factors, zigzag order */
  int32_t mf[16], dq[16]; /* forward multiplier; dequantizer scale (V << qp/6) */
  int16_t mf_raster[16];  /* the multipliers again, raster order (the SIMD quantizer's) */
  int shift;
  int32_t round;
};

enum { NZ_LUMA = 0, NZ_CB = 16, NZ_CR = 20, NZ_PER_MB = 24, MB_BYTES = 384 };

struct fc_h264_still {
  int w, h, mbw, mbh, qp;
  int qpc; /* chroma quantizer, from qp and the PPS's offset */
  /* from the SPS/PPS x264 wrote */
  int have_sps, have_pps, log2_max_frame_num, poc_type, log2_max_poc_lsb, pps_id, pic_init_qp;
  int bottom_field_poc, chroma_qp_offset;
  int ready;
  unsigned frame_num, poc_lsb; /* of the last picture */
  uint8_t *rec[3];             /* the reference: the last picture as decoded, tightly packed I420 */
  int rs[3];
  /* per macroblock, valid where stamp == picture (else: no coefficients, vector zero) */
  uint8_t *nz;      /* 16 luma + 2x4 chroma AC coefficient counts */
  fc_mv *mv;        /* its vector */
  uint32_t *stamp;  /* the picture that set them */
  uint32_t picture; /* pictures written */
  /* this picture's reconstructed macroblocks, put into rec once the picture is done (the
   * reference must stay as it was while vectors may point anywhere in it) */
  uint8_t *stage;   /* MB_BYTES per entry: 256 luma, 64 Cb, 64 Cr */
  int *stage_mb;
  int n_stage;
  struct fc_quant qy, qc;
  int32_t dc_mf, dc_round, dc_dq; /* chroma DC: multiplier, rounding (shift qc.shift + 1), scale */
  int lambda;                     /* motion cost per bit of a vector difference, in SAD units */
};

/* The factors of quantizer qp. */
void fc_h264_quant_init(struct fc_quant *q, int qp);

/* Codes macroblock (mbx, mby) of the picture src: motion search around the predicted vectors,
 * then P_L0_16x16 or P_Skip, whichever holds. mvp: the predicted vector; mv_skip: P_Skip's.
 * Counts a skip into *skip_run or writes it and the macroblock. Returns 1 if written. */
int fc_h264_still_mb(fc_h264_still *s, fc_bitw *w, int mbx, int mby, const uint8_t *const src[3],
                     const int ss[3], fc_mv mvp, fc_mv mv_skip, unsigned *skip_run);

/* Two 4x4 blocks side by side (columns 0-3 and 4-7 of src - pred): their levels in zigzag
 * order from first on (those before are 0), counts of non-zero levels, and the transforms' DC
 * coefficients. _ref is the plain C reference; the other is the SIMD version where there is
 * one (SSE2), the same numbers (test_h264_still compares them). */
void fc_h264_fdct_quant_pair_ref(const uint8_t *src, int ss, const uint8_t *pred, int ps,
                                 const struct fc_quant *q, int first, int16_t lev[2][16],
                                 int nz[2], int32_t dc[2]);
void fc_h264_fdct_quant_pair(const uint8_t *src, int ss, const uint8_t *pred, int ps,
                             const struct fc_quant *q, int first, int16_t lev[2][16], int nz[2],
                             int32_t dc[2]);

#endif
