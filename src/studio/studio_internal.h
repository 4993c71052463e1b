/* Private to the avatar studio (studio.c, quality.c). */
#ifndef FC_STUDIO_INTERNAL_H
#define FC_STUDIO_INTERNAL_H

#include "studio/studio.h"

/* Checks one frame into q like fc_quality_check_frame and also reports the face: when *face
 * holds the previous frame's face (w > 0), the candidate nearest it is taken, else the
 * largest; *face is set to it and pts to its 68 landmarks (untouched when no face is found).
 * Returns 1 when a face was found. Reuses per-thread buffers: no allocation per frame. */
int fc_quality_measure(const fc_face_models *m, const fc_image *img, fc_quality *q, fc_rect *face,
                       fc_point *pts);

/* Frees this thread's measuring buffers (they are kept between frames of a job; a job ends
 * with this, so worker threads do not leak them). */
void fc_quality_thread_free(void);

#endif
