/* H.264 bit writing for fc_h264_still: a NAL unit writer (emulation prevention on the fly),
 * Exp-Golomb codes, and CAVLC's residual_block() (ITU-T H.264 clause 9.2) from coefficients.
 * Internal to src/media. The writer never writes past its buffer: it counts what it would have
 * written, and the caller compares the count with the capacity at the end. */
#ifndef FC_MEDIA_H264_CAVLC_H
#define FC_MEDIA_H264_CAVLC_H

#include <stddef.h>
#include <stdint.h>

typedef struct fc_bitw {
  uint8_t *p;
  size_t cap, n; /* n: bytes written (or that would have been, past cap) */
  uint64_t acc;  /* bits not yet out, the newest lowest */
  int bits;      /* how many of acc's low bits are pending */
  int zeros;     /* zero bytes just written (for emulation prevention) */
  int escape;    /* inside a NAL unit's payload: emulation prevention applies */
} fc_bitw;

void fc_bitw_init(fc_bitw *w, uint8_t *p, size_t cap);
/* A start code and the NAL header byte; what follows is escaped until fc_bitw_nal_end. */
void fc_bitw_nal_begin(fc_bitw *w, int nal_ref_idc, int nal_unit_type);
/* rbsp_trailing_bits(): the stop bit and zero bits to the byte boundary. */
void fc_bitw_nal_end(fc_bitw *w);

/* n (0..32) bits of v, most significant first. */
void fc_bitw_put(fc_bitw *w, uint32_t v, int n);
void fc_bitw_ue(fc_bitw *w, uint32_t v);
void fc_bitw_se(fc_bitw *w, int32_t v);

/* me(v) of an inter macroblock's coded_block_pattern (Table 9-4, 4:2:0). */
void fc_bitw_cbp_inter(fc_bitw *w, int cbp);

/* residual_block_cavlc() of coeff[0..max_coeff-1] (scan order), nc the block's nC (-1 for
 * 4:2:0 chroma DC). Levels must lie within +-2047 (the quantizer clamps them). Returns
 * TotalCoeff. */
int fc_cavlc_block(fc_bitw *w, const int16_t *coeff, int max_coeff, int nc);

#endif
