/* Compositing: a lip-sync patch pasted into its avatar frame, output as I420 for the encoder.
 *
 * The avatar keeps every frame in I420 already, so composing copies that frame, converts only
 * the patch rectangle to I420 (libyuv) and blends it in with its feathered mask. Buffers that
 * are reused frame after frame are updated by rectangles where the picture underneath is one
 * still (fc_i420_delta): each full-frame copy of a 512×512 frame costs more than its patch. */
#ifndef FACECAST_COMPOSE_H
#define FACECAST_COMPOSE_H

#include "facecast/lipsync.h"
#include "facecast/picture.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes avatar frame `frame` with `patch` blended in (patch may be NULL: the plain frame) into
 * dst (contiguous I420, width*height*3/2 bytes). scratch holds at least
 * patch->place.w × place.h × 3 / 2 bytes. The patch rect must lie inside the frame with even x, y,
 * w, h; otherwise FC_EINVAL and dst holds the plain frame. */
int fc_compose_i420(const fc_avatar *av, int frame, const fc_patch *patch, uint8_t *dst,
                    uint8_t *scratch);

/* fc_compose_i420 into a dst that is reused: *held says what dst holds (zeroed for a fresh
 * buffer) and is updated to describe the result. For a photo avatar, whose frame is one
 * still picture, only the previous and the new patch rect are written instead of the whole
 * frame. */
int fc_compose_i420_update(const fc_avatar *av, int frame, const fc_patch *patch, uint8_t *dst,
                           fc_i420_delta *held, uint8_t *scratch);

#ifdef __cplusplus
}
#endif
#endif
