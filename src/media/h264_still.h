/* fc_h264_still: the P pictures of a talking photo, written directly instead of by x264.
 *
 * Why: a talking photo's picture differs from the one before only around the mouth (~15 % of
 * a 512x512 picture's macroblocks), yet most of what x264 spends on a P picture is fixed
 * per-picture work no setting removes (half-pel planes and border expansion of the whole
 * reference, per-macroblock loops over skipped blocks, a picture copy; docs/BENCHMARKS.md).
 * Here a P picture costs only its changed macroblocks: one slice whose unchanged macroblocks
 * are skip runs, and whose changed ones are P_L0_16x16 after a whole-sample motion search, or
 * P_Skip where that leaves nothing to code, with the residual against the reference: 4x4
 * integer transform, flat quantization, decimation, CAVLC (h264_still_mb.c). No sub-sample
 * luma motion, no intra macroblocks, no deblocking (the slice turns it off), so the
 * reconstruction is exact integer arithmetic kept in step with every decoder's. Against x264's
 * ultrafast preset: the same mouth PSNR at 2-3 % more bits, for less CPU (bench still).
 *
 * x264 keeps the key frames: fc_h264_still_sync() takes what x264 wrote (its SPS/PPS, its
 * slice header's frame_num/POC) and its reconstruction, and the P pictures written here carry
 * on from there with the same parameter sets. What it cannot follow (CABAC, the 8x8 transform,
 * weighted or field coding, slice groups, a PPS without deblocking control, a size not a
 * multiple of 16) is refused with FC_EUNSUPPORTED; x264 then codes every picture.
 *
 * Ownership: the encoder owns its reconstruction (a copy); inputs are borrowed for the call.
 * Not thread-safe; one encoder per stream. No allocation after create. */
#ifndef FC_MEDIA_H264_STILL_H
#define FC_MEDIA_H264_STILL_H

#include <stddef.h>
#include <stdint.h>

typedef struct fc_h264_still fc_h264_still;

/* An encoder for width x height pictures (multiples of 16, at most 8192) at quantizer qp
 * (1..51). NULL and *err: FC_EUNSUPPORTED (a size not a multiple of 16), FC_EINVAL, FC_ENOMEM. */
fc_h264_still *fc_h264_still_create(int width, int height, int qp, int *err);
void fc_h264_still_destroy(fc_h264_still *s);

/* Follows a picture another encoder (x264) wrote: au is its Annex B access unit (with SPS and
 * PPS when it is a key frame), plane/stride its reconstruction as a decoder has it — I420
 * (n_planes 3) or NV12 (n_planes 2, x264's own layout). 0: the next picture may be written
 * here; FC_EUNSUPPORTED: the stream uses what this encoder does not write; FC_EFORMAT: au is
 * not a readable picture. On an error the encoder waits for the next key frame's sync. */
int fc_h264_still_sync(fc_h264_still *s, const uint8_t *au, size_t au_size,
                       const uint8_t *const plane[3], const int stride[3], int n_planes);

/* Whether the last sync (and every picture since) leaves the encoder able to write the next. */
int fc_h264_still_ready(const fc_h264_still *s);

/* Writes the next picture, an I420 picture (plane/stride), as one P slice in Annex B into out
 * (cap bytes): constant (mbw*mbh bytes, nonzero = the macroblock is the same as in the picture
 * before, as fc_h264_mb_constant marks it) says which macroblocks to skip without looking.
 * Returns the size written, or FC_EINVAL (not ready, or out too small: then the encoder needs a
 * new sync, as the stream would otherwise lose a picture). */
int fc_h264_still_encode(fc_h264_still *s, const uint8_t *const plane[3], const int stride[3],
                         const uint8_t *constant, uint8_t *out, size_t cap);

/* Bytes that fc_h264_still_encode may need for one picture of this size: the most a picture
 * of all-coded macroblocks can take, plus the slice header. */
size_t fc_h264_still_max_size(const fc_h264_still *s);

/* The reconstruction of the last picture (what a decoder shows), for tests and measurements. */
void fc_h264_still_recon(const fc_h264_still *s, const uint8_t *plane[3], int stride[3]);

#endif
