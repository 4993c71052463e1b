/* Private to the avatar studio (studio.c, quality.c). */
#ifndef FC_STUDIO_INTERNAL_H
#define FC_STUDIO_INTERNAL_H

#include "studio/studio.h"
#include "avatar/pack.h"

/* Checks one frame into q like fc_quality_check_frame and also reports the face: when *face
 * holds the previous frame's face (w > 0), the candidate nearest it is taken, else the
 * largest; *face is set to it and pts to its 68 landmarks (untouched when no face is found).
 * Returns 1 when a face was found. Reuses per-thread buffers: no allocation per frame. */
int fc_quality_measure(const fc_face_models *m, const fc_image *img, fc_quality *q, fc_rect *face,
                       fc_point *pts);

/* Frees this thread's measuring buffers (they are kept between frames of a job; a job ends
 * with this, so worker threads do not leak them). */
void fc_quality_thread_free(void);

/* mkdir -p: 0, or -1 with errno set. */
int fc_studio_mkdirs(const char *dir);

/* A frame's pack entry from its RGB picture, box and 68 landmarks: the picture as I420, the
 * box's crops at each crop size and their mouth/jaw masks (studio.c). Shared by the studio and
 * the LiveTalking import; its buffers are sized by init, nothing is allocated per frame. */
typedef struct fc_frame_packer {
  int w, h, ncrops, crop_size[FC_PACK_MAX_CROPS];
  uint8_t *i420, *mask[FC_PACK_MAX_CROPS], *tmp;
  fc_image crop[FC_PACK_MAX_CROPS];
} fc_frame_packer;
/* Frames of w×h (even), ncrops crops of crop_size[k] (at most 256) px. 0 or FC_ENOMEM. */
int fc_frame_packer_init(fc_frame_packer *fp, int w, int h, int ncrops, const int *crop_size);
/* Appends img (w×h RGB) with its box and points as the writer's next frame. */
int fc_frame_packer_add(fc_frame_packer *fp, fc_pack_writer *wr, const fc_image *img, fc_rect box,
                        const fc_point *pts);
void fc_frame_packer_free(fc_frame_packer *fp);

#endif
