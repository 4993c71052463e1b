/* H.264 for files made in pieces (bulk video shards): libx264 straight to an Annex B elementary
 * stream, and that stream cut back into access units for a muxer.
 *
 * Why not the MP4 writer's x264enc: shards are joined without re-encoding, so every shard must
 * start with an IDR picture, carry the same SPS/PPS as every other (same settings → same
 * bytes), and decode on its own (no B-frames reaching across a join, so decode order is
 * presentation order and a picture's index is its time). libx264 directly also takes
 * x264_picture_t.prop.mb_info: a talking head's frames differ from the one before only around
 * the mouth, and x264 skips the macroblocks it is told did not change without analysing them
 * (the live encoder's trick, x264_live.c), which is most of a frame's encoding time.
 *
 * Internal to src/media; the stream is plain bytes, so bulk keeps it in files. */
#ifndef FC_MEDIA_H264ENC_H
#define FC_MEDIA_H264ENC_H

#include "facecast/picture.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct fc_h264enc fc_h264enc;

typedef struct fc_h264enc_params {
  int width, height; /* even */
  int fps;           /* 0: 25 */
  const char *preset; /* x264 preset; NULL: ultrafast with CABAC and deblocking (h264enc.c) */
  int qp;            /* > 0: constant quantizer (lets unchanged macroblocks be skipped);
                      * 0: CRF crf */
  int crf;           /* 0: 23 */
  int threads;       /* x264 threads; 0: 1 */
  int keyint;        /* key frame at most every keyint pictures; 0: 2 s */
} fc_h264enc_params;

/* An encoder writing to out (borrowed, stays open). NULL and *err (FC_EINVAL: size, preset). */
fc_h264enc *fc_h264enc_create(const fc_h264enc_params *p, FILE *out, int *err);
/* Encodes one contiguous I420 picture. changed (may be NULL: unknown): the rect in which this
 * picture may differ from the one encoded just before it (w or h 0: the same picture); with a
 * constant quantizer the encoder skips the macroblocks outside it. */
int fc_h264enc_encode(fc_h264enc *e, const uint8_t *i420, const fc_rect *changed);
/* Writes the pictures still inside the encoder. 0 or FC_EIO / FC_EMEDIA. */
int fc_h264enc_finish(fc_h264enc *e);
/* Pictures written to the stream so far. */
int64_t fc_h264enc_frames(const fc_h264enc *e);
void fc_h264enc_destroy(fc_h264enc *e);

/* x264 mb_info for a picture that differs from the one before only inside rects a and b (w or
 * h 0: empty): X264_MBINFO_CONSTANT for every macroblock of the mbw × mbh map outside them.
 * Shared with the live encoder (x264_live.c). */
void fc_h264_mb_constant(uint8_t *map, int mbw, int mbh, const fc_rect *a, const fc_rect *b);

/* ---- reading an Annex B stream back (pure; fuzzed) ---- */

/* One access unit of an Annex B stream from x264 (one picture, its SEI, and SPS/PPS before an
 * IDR): its NAL units as AVC (4-byte big-endian lengths) without SPS/PPS, which go to the
 * parameter sets instead. */
typedef struct fc_h264_au {
  size_t size;   /* bytes of AVC data written to the output buffer */
  int key;       /* an IDR picture */
  const uint8_t *sps, *pps; /* the SPS / PPS NAL before it, if any (pointers into the input) */
  size_t sps_len, pps_len;
} fc_h264_au;

/* The access unit starting at *pos of buf[0..len): writes its AVC form into out, advances *pos
 * past it. 1: one access unit, 0: the end of buf, FC_EFORMAT: not a stream of pictures,
 * FC_ENOMEM: out_cap is smaller than the unit's au->size bytes (*pos unchanged: call again
 * with a larger buffer; len - *pos + len/3 + 16 is always enough). */
int fc_h264_next_au(const uint8_t *buf, size_t len, size_t *pos, uint8_t *out, size_t out_cap,
                    fc_h264_au *au);

/* The NAL unit after *pos of an Annex B buffer: *nal and *nal_len (header byte included,
 * without the next start code's zeros), *pos moved past it. 1, or 0 at the end of buf. Shared
 * with fc_h264_still's reading of x264's parameter sets (h264_still.c). */
int fc_h264_next_nal(const uint8_t *buf, size_t len, size_t *pos, const uint8_t **nal,
                     size_t *nal_len);

/* The avcC record (ISO/IEC 14496-15) of one SPS and one PPS, for the muxer's codec_data.
 * Returns its length (at most 11 + sps_len + pps_len, written to out), or FC_EFORMAT. */
int fc_h264_avcc(const uint8_t *sps, size_t sps_len, const uint8_t *pps, size_t pps_len,
                 uint8_t *out, size_t out_cap);

#endif
