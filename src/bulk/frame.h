/* A bulk video's picture from a stream frame: the avatar's picture placed on the output canvas
 * (scaled to fit, centred on the background colour or image) and the caption of the moment
 * burned in. Per shard: nothing in it depends on another shard. Internal to src/bulk. */
#ifndef FC_BULK_FRAME_H
#define FC_BULK_FRAME_H

#include "bulk/bulk_internal.h"
#include "facecast/picture.h"

typedef struct fc_bulk_frame fc_bulk_frame;

/* For spec's size, background and captions around avatar av's pictures. NULL and *err
 * (FC_EINVAL, FC_ENOTFOUND / FC_EFORMAT for a background image) on failure. */
fc_bulk_frame *fc_bulk_frame_create(const fc_video_spec *s, const fc_avatar *av,
                                    const char *shared_dir, int *err);
void fc_bulk_frame_size(const fc_bulk_frame *f, int *w, int *h);
/* The output picture for stream picture i420 (d: what it holds against its still) at shard
 * sample `sample`, with the cue among cues[0..n) that covers it burned in. *known: whether
 * *changed is the rect in which the result may differ from the last result (w or h 0: the
 * same picture); unknown for the first picture and when the still changed. The picture is the
 * frame's buffer (or i420 itself), valid until the next call. */
const uint8_t *fc_bulk_frame_draw(fc_bulk_frame *f, const uint8_t *i420, const fc_i420_delta *d,
                                  int64_t sample, const fc_cue *cues, int n, fc_rect *changed,
                                  int *known);
void fc_bulk_frame_destroy(fc_bulk_frame *f);

#endif
