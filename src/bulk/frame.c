/* The output picture of a bulk video (frame.h). */
#include "bulk/frame.h"

#include "facecast/error.h"

#include <stdlib.h>

struct fc_bulk_frame {
  int w, h;
};

fc_bulk_frame *fc_bulk_frame_create(const fc_video_spec *s, const fc_avatar *av,
                                    const char *shared_dir, int *err) {
  const int aw = fc_avatar_width(av), ah = fc_avatar_height(av);
  if ((s->width && s->width != aw) || (s->height && s->height != ah)) {
    *err = fc_error_set(FC_EUNSUPPORTED, "size: only the avatar's size (%dx%d) for now", aw, ah);
    return NULL;
  }
  fc_bulk_frame *f = calloc(1, sizeof *f);
  if (!f) {
    *err = fc_error_set(FC_ENOMEM, "out of memory");
    return NULL;
  }
  f->w = aw, f->h = ah;
  (void)shared_dir;
  *err = 0;
  return f;
}

void fc_bulk_frame_size(const fc_bulk_frame *f, int *w, int *h) { *w = f->w, *h = f->h; }

const uint8_t *fc_bulk_frame_draw(fc_bulk_frame *f, const uint8_t *i420, const fc_i420_delta *d,
                                  int64_t sample, const fc_cue *cues, int n, fc_rect *changed) {
  (void)f, (void)sample, (void)cues, (void)n;
  *changed = d->changed;
  return i420;
}

void fc_bulk_frame_destroy(fc_bulk_frame *f) { free(f); }
