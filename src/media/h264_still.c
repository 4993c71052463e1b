/* fc_h264_still (design note in h264_still.h): parameter sets read back from x264's stream,
 * the P slice and its motion vector prediction (clause 8.4.1: the median of the left, above
 * and above-right neighbours', and P_Skip's own rule). One macroblock's coding is in
 * h264_still_mb.c.
 *
 * A skipped macroblock moves with its neighbours: P_Skip takes the predicted vector unless the
 * left or the one above stands still. The unchanged macroblocks must show the reference as it
 * is, so where the vectors around one would move it, it is written as a zero vector with no
 * residual instead (a few bits) — and the same rule holds for the changed ones the search
 * leaves without levels. */
#include "media/h264_still.h"

#include "media/h264_cavlc.h"
#include "media/h264_still_internal.h"
#include "media/h264enc.h"

#include "facecast/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t QPC[52] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
                                13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
                                26, 27, 28, 29, 29, 30, 31, 32, 32, 33, 34, 34, 35,
                                35, 36, 36, 37, 37, 37, 38, 38, 38, 39, 39, 39, 39};
/* dequantizer scale of a chroma DC level at position 0 (V[qp % 6][0]) */
static const int V0[6] = {10, 11, 13, 14, 16, 18};

/* ---- motion vector prediction ---- */

typedef struct nb {
  int avail;
  fc_mv mv;
} nb;

static nb neighbour(const fc_h264_still *s, int mbx, int mby) {
  if (mbx < 0 || mby < 0 || mbx >= s->mbw) return (nb){0, {0, 0}};
  const int mb = mby * s->mbw + mbx;
  return (nb){1, s->stamp[mb] == s->picture ? s->mv[mb] : (fc_mv){0, 0}};
}

static inline int16_t median3(int16_t a, int16_t b, int16_t c) {
  return (int16_t)(a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b));
}

/* the predicted vector of a 16x16 partition with reference 0 (clause 8.4.1.3) and P_Skip's
 * (8.4.1.1), of macroblock (mbx, mby) */
static void predict_mv(const fc_h264_still *s, int mbx, int mby, fc_mv *mvp, fc_mv *mv_skip) {
  nb a = neighbour(s, mbx - 1, mby), b = neighbour(s, mbx, mby - 1),
     c = neighbour(s, mbx + 1, mby - 1);
  const nb a0 = a, b0 = b;
  if (!c.avail) c = neighbour(s, mbx - 1, mby - 1); /* D stands in for C */
  if (!b.avail && !c.avail && a.avail) b = c = a;
  if (a.avail + b.avail + c.avail == 1) *mvp = a.avail ? a.mv : b.avail ? b.mv : c.mv;
  else *mvp = (fc_mv){median3(a.mv.x, b.mv.x, c.mv.x), median3(a.mv.y, b.mv.y, c.mv.y)};
  if (!a0.avail || !b0.avail || (!a0.mv.x && !a0.mv.y) || (!b0.mv.x && !b0.mv.y))
    *mv_skip = (fc_mv){0, 0};
  else
    *mv_skip = *mvp;
}

/* ---- the slice ---- */

static void slice_header(const fc_h264_still *s, fc_bitw *w) {
  fc_bitw_ue(w, 0);         /* first_mb_in_slice */
  fc_bitw_ue(w, 5);         /* slice_type: P, as every slice of the picture */
  fc_bitw_ue(w, (uint32_t)s->pps_id);
  fc_bitw_put(w, s->frame_num, s->log2_max_frame_num);
  if (s->poc_type == 0) {
    fc_bitw_put(w, s->poc_lsb, s->log2_max_poc_lsb);
    if (s->bottom_field_poc) fc_bitw_se(w, 0);
  }
  fc_bitw_put(w, 1, 1);     /* num_ref_idx_active_override_flag: one reference, */
  fc_bitw_ue(w, 0);         /* whatever the PPS's default, so no ref_idx is coded */
  fc_bitw_put(w, 0, 1);     /* ref_pic_list_modification_flag_l0 */
  fc_bitw_put(w, 0, 1);     /* adaptive_ref_pic_marking_mode_flag: sliding window */
  fc_bitw_se(w, s->qp - s->pic_init_qp);
  fc_bitw_ue(w, 1);         /* disable_deblocking_filter_idc: off */
}

int fc_h264_still_encode(fc_h264_still *s, const uint8_t *const plane[3], const int stride[3],
                         const uint8_t *constant, uint8_t *out, size_t cap) {
  if (!s->ready) return fc_error_set(FC_EINVAL, "h264 still: not in step with a stream");
  s->frame_num = (s->frame_num + 1) & ((1u << s->log2_max_frame_num) - 1);
  s->poc_lsb = (s->poc_lsb + 2) & ((1u << s->log2_max_poc_lsb) - 1);
  if (++s->picture == 0) { /* stamps wrapped: forget them all */
    memset(s->stamp, 0xff, (size_t)s->mbw * s->mbh * sizeof *s->stamp);
    s->picture = 1;
  }
  fc_bitw w;
  fc_bitw_init(&w, out, cap);
  fc_bitw_nal_begin(&w, 2, 1);
  slice_header(s, &w);
  unsigned skip = 0;
  s->n_stage = 0;
  for (int y = 0; y < s->mbh; y++)
    for (int x = 0; x < s->mbw; x++) {
      fc_mv mvp, mv_skip;
      predict_mv(s, x, y, &mvp, &mv_skip);
      if (!constant || !constant[y * s->mbw + x]) {
        fc_h264_still_mb(s, &w, x, y, plane, stride, mvp, mv_skip, &skip);
      } else if (!mv_skip.x && !mv_skip.y) {
        skip++;
      } else { /* a skip would move it: the zero vector, no residual */
        fc_bitw_ue(&w, skip);
        skip = 0;
        fc_bitw_ue(&w, 0);
        fc_bitw_se(&w, -mvp.x);
        fc_bitw_se(&w, -mvp.y);
        fc_bitw_cbp_inter(&w, 0);
      }
    }
  if (skip) fc_bitw_ue(&w, skip);
  fc_bitw_nal_end(&w);
  /* the picture is done: its macroblocks become the reference */
  for (int i = 0; i < s->n_stage; i++) {
    const int mb = s->stage_mb[i], mx = mb % s->mbw, my = mb / s->mbw;
    const uint8_t *o = s->stage + (size_t)i * MB_BYTES;
    for (int y = 0; y < 16; y++)
      memcpy(s->rec[0] + (size_t)(my * 16 + y) * s->rs[0] + mx * 16, o + y * 16, 16);
    for (int c = 0; c < 2; c++)
      for (int y = 0; y < 8; y++)
        memcpy(s->rec[1 + c] + (size_t)(my * 8 + y) * s->rs[1 + c] + mx * 8,
               o + 256 + c * 64 + y * 8, 8);
  }
  if (w.n > cap) {
    s->ready = 0; /* the reconstruction moved on without a picture out: wait for a key frame */
    return fc_error_set(FC_EINVAL, "h264 still: %zu bytes do not fit in %zu", w.n, cap);
  }
  return (int)w.n;
}

/* ---- reading x264's parameter sets and slice header back ---- */

typedef struct bitr {
  uint8_t b[512];
  size_t n, pos; /* bytes, bit position */
  int bad;
} bitr;

/* The NAL payload after its header byte, emulation prevention removed (the first 512 bytes:
 * every field read here lies well inside them). */
static void bitr_init(bitr *r, const uint8_t *p, size_t n) {
  r->n = r->pos = 0;
  r->bad = 0;
  int zeros = 0;
  for (size_t i = 1; i < n && r->n < sizeof r->b; i++) {
    if (zeros >= 2 && p[i] == 3) {
      zeros = 0;
      continue;
    }
    r->b[r->n++] = p[i];
    zeros = p[i] ? 0 : zeros + 1;
  }
}

static uint32_t get(bitr *r, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; i++) {
    if (r->pos >= r->n * 8) {
      r->bad = 1;
      return 0;
    }
    v = v << 1 | ((r->b[r->pos >> 3] >> (7 - (r->pos & 7))) & 1);
    r->pos++;
  }
  return v;
}

static uint32_t get_ue(bitr *r) {
  int z = 0;
  while (!r->bad && get(r, 1) == 0)
    if (++z > 31) {
      r->bad = 1;
      return 0;
    }
  return z ? ((1u << z) - 1) + get(r, z) : 0;
}

static int32_t get_se(bitr *r) {
  const uint32_t k = get_ue(r);
  return k & 1 ? (int32_t)((k + 1) / 2) : -(int32_t)(k / 2);
}

/* more_rbsp_data(): anything before the stop bit */
static int more_data(const bitr *r) {
  size_t last = r->n;
  while (last > 0 && r->b[last - 1] == 0) last--;
  if (!last) return 0;
  const int tz = __builtin_ctz(r->b[last - 1]);
  return r->pos < (last - 1) * 8 + (size_t)(7 - tz);
}

static int read_sps(fc_h264_still *s, bitr *r) {
  int unsupported = 0;
  const uint32_t profile = get(r, 8);
  get(r, 16); /* constraint flags, level */
  get_ue(r);  /* seq_parameter_set_id */
  if (profile == 100 || profile == 110 || profile == 122 || profile == 244 || profile == 44 ||
      profile == 83 || profile == 86 || profile == 118 || profile == 128 || profile == 138 ||
      profile == 139 || profile == 134 || profile == 135) {
    if (get_ue(r) != 1) return r->bad ? FC_EFORMAT : FC_EUNSUPPORTED; /* 4:2:0 only */
    unsupported |= get_ue(r) || get_ue(r); /* 8-bit only */
    unsupported |= get(r, 1) || get(r, 1); /* transform bypass, scaling matrices */
  }
  s->log2_max_frame_num = (int)get_ue(r) + 4;
  s->poc_type = (int)get_ue(r);
  if (s->poc_type == 0) s->log2_max_poc_lsb = (int)get_ue(r) + 4;
  else if (s->poc_type != 2) return r->bad ? FC_EFORMAT : FC_EUNSUPPORTED;
  get_ue(r); /* max_num_ref_frames */
  get(r, 1);
  const uint32_t mbw = get_ue(r) + 1, mbh = get_ue(r) + 1;
  unsupported |= !get(r, 1); /* frame_mbs_only_flag: no field coding */
  if (r->bad || s->log2_max_frame_num > 16 || s->log2_max_poc_lsb > 16) return FC_EFORMAT;
  if (unsupported || (int)mbw != s->mbw || (int)mbh != s->mbh) return FC_EUNSUPPORTED;
  if (s->poc_type == 2) s->log2_max_poc_lsb = 16; /* unused: keeps the arithmetic defined */
  s->have_sps = 1;
  return 0;
}

static void set_chroma_qp(fc_h264_still *s, int qpc) {
  s->qpc = qpc;
  fc_h264_quant_init(&s->qc, qpc);
  s->dc_mf = s->qc.mf[0];
  s->dc_round = (1 << (s->qc.shift + 1)) / 6;
  s->dc_dq = 16 * V0[qpc % 6] * (1 << qpc / 6);
}

static int read_pps(fc_h264_still *s, bitr *r) {
  s->pps_id = (int)get_ue(r);
  get_ue(r);
  if (get(r, 1)) return FC_EUNSUPPORTED; /* CABAC */
  s->bottom_field_poc = (int)get(r, 1);
  if (get_ue(r)) return FC_EUNSUPPORTED; /* slice groups */
  get_ue(r);
  get_ue(r);
  if (get(r, 1) || get(r, 2)) return FC_EUNSUPPORTED; /* weighted prediction */
  s->pic_init_qp = 26 + get_se(r);
  get_se(r);
  s->chroma_qp_offset = get_se(r);
  if (!get(r, 1)) return FC_EUNSUPPORTED; /* no deblocking_filter_control_present_flag */
  get(r, 1);
  if (get(r, 1)) return FC_EUNSUPPORTED; /* redundant_pic_cnt_present_flag */
  if (r->bad || s->pps_id > 255 || s->chroma_qp_offset < -12 || s->chroma_qp_offset > 12)
    return FC_EFORMAT;
  if (more_data(r)) return FC_EUNSUPPORTED; /* the 8x8 transform, scaling matrices */
  int q = s->qp + s->chroma_qp_offset;
  set_chroma_qp(s, QPC[q < 0 ? 0 : q > 51 ? 51 : q]);
  s->have_pps = 1;
  return 0;
}

static int read_slice(fc_h264_still *s, bitr *r, int idr) {
  get_ue(r); /* first_mb_in_slice */
  get_ue(r); /* slice_type */
  if ((int)get_ue(r) != s->pps_id) return FC_EUNSUPPORTED;
  s->frame_num = get(r, s->log2_max_frame_num);
  if (idr) get_ue(r);
  s->poc_lsb = s->poc_type == 0 ? get(r, s->log2_max_poc_lsb) : 0;
  return r->bad ? FC_EFORMAT : 0;
}

int fc_h264_still_sync(fc_h264_still *s, const uint8_t *au, size_t n,
                       const uint8_t *const plane[3], const int stride[3], int n_planes) {
  s->ready = 0;
  int rc = FC_EFORMAT, slice = 0;
  bitr r;
  const uint8_t *nal;
  size_t nal_len, pos = 0;
  while (fc_h264_next_nal(au, n, &pos, &nal, &nal_len)) {
    const int type = nal[0] & 31;
    if (type != 7 && type != 8 && type != 1 && type != 5) continue;
    bitr_init(&r, nal, nal_len);
    if (type == 7) rc = read_sps(s, &r);
    else if (type == 8) rc = s->have_sps ? read_pps(s, &r) : FC_EFORMAT;
    else if (!slice) rc = s->have_pps ? read_slice(s, &r, type == 5) : FC_EFORMAT, slice = 1;
    if (rc) {
      if (type == 7 || type == 8) s->have_sps = s->have_pps = 0;
      return fc_error_set(rc, "h264 still: cannot follow this stream (NAL type %d)", type);
    }
  }
  if (!slice) return fc_error_set(FC_EFORMAT, "h264 still: no picture in the access unit");
  for (int y = 0; y < s->h; y++) memcpy(s->rec[0] + (size_t)y * s->rs[0], plane[0] + (size_t)y * stride[0], (size_t)s->w);
  for (int y = 0; y < s->h / 2; y++) {
    uint8_t *u = s->rec[1] + (size_t)y * s->rs[1], *v = s->rec[2] + (size_t)y * s->rs[2];
    if (n_planes == 2) {
      const uint8_t *uv = plane[1] + (size_t)y * stride[1];
      for (int x = 0; x < s->w / 2; x++) u[x] = uv[2 * x], v[x] = uv[2 * x + 1];
    } else {
      memcpy(u, plane[1] + (size_t)y * stride[1], (size_t)s->w / 2);
      memcpy(v, plane[2] + (size_t)y * stride[2], (size_t)s->w / 2);
    }
  }
  s->ready = 1;
  return 0;
}

int fc_h264_still_ready(const fc_h264_still *s) { return s->ready; }

size_t fc_h264_still_max_size(const fc_h264_still *s) {
  /* a macroblock's levels at their largest (16+16 bits each, 384 of them) with its headers,
   * doubled for emulation prevention's worst case; and the slice header */
  return (size_t)s->mbw * s->mbh * 3200 + 64;
}

void fc_h264_still_recon(const fc_h264_still *s, const uint8_t *plane[3], int stride[3]) {
  for (int i = 0; i < 3; i++) plane[i] = s->rec[i], stride[i] = s->rs[i];
}

fc_h264_still *fc_h264_still_create(int width, int height, int qp, int *err) {
  if (width < 16 || height < 16 || width > 8192 || height > 8192 || qp < 1 || qp > 51) {
    *err = fc_error_set(FC_EINVAL, "h264 still: %dx%d at QP %d", width, height, qp);
    return NULL;
  }
  if (width % 16 || height % 16) {
    *err = fc_error_set(FC_EUNSUPPORTED, "h264 still: %dx%d is not in whole macroblocks",
                        width, height);
    return NULL;
  }
  fc_h264_still *s = calloc(1, sizeof *s);
  if (!s) goto nomem;
  s->w = width, s->h = height, s->mbw = width / 16, s->mbh = height / 16, s->qp = qp;
  fc_h264_quant_init(&s->qy, qp);
  set_chroma_qp(s, QPC[qp]);
  /* a vector's bits against SAD: the square root of the mode decision's lambda,
   * 0.85*2^((qp-12)/3), as x264 and JM weigh motion */
  s->lambda = (int)(sqrt(0.85 * pow(2.0, (qp - 12) / 3.0)) + 0.5);
  if (s->lambda < 1) s->lambda = 1;
  s->rs[0] = width, s->rs[1] = s->rs[2] = width / 2;
  const size_t mbs = (size_t)s->mbw * s->mbh;
  /* a spare row: chroma interpolation on a whole-sample row still reads (times zero) the one
   * after the block, which at the last row of Cr is past the planes */
  s->rec[0] = malloc((size_t)width * height * 3 / 2 + (size_t)width);
  s->nz = malloc(mbs * NZ_PER_MB);
  s->mv = malloc(mbs * sizeof *s->mv);
  s->stamp = malloc(mbs * sizeof *s->stamp);
  s->stage = malloc(mbs * MB_BYTES);
  s->stage_mb = malloc(mbs * sizeof *s->stage_mb);
  if (!s->rec[0] || !s->nz || !s->mv || !s->stamp || !s->stage || !s->stage_mb) goto nomem;
  memset(s->rec[0] + (size_t)width * height * 3 / 2, 0, (size_t)width);
  s->rec[1] = s->rec[0] + (size_t)width * height;
  s->rec[2] = s->rec[1] + (size_t)width * height / 4;
  memset(s->stamp, 0xff, mbs * sizeof *s->stamp);
  *err = 0;
  return s;
nomem:
  fc_h264_still_destroy(s);
  *err = fc_error_set(FC_ENOMEM, "h264 still: out of memory");
  return NULL;
}

void fc_h264_still_destroy(fc_h264_still *s) {
  if (!s) return;
  free(s->rec[0]);
  free(s->nz);
  free(s->mv);
  free(s->stamp);
  free(s->stage);
  free(s->stage_mb);
  free(s);
}
