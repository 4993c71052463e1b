/* Avatars: the frames a session speaks over, each with its face box and mouth geometry.
 *
 * v0 builds an avatar from one photo (PNG/JPEG): the face is found with the Haar detector, the
 * picture is framed to the output size (head-and-shoulders: a crop around the face with a margin,
 * or the whole picture), and the mouth is located inside the face box (lip colour, teeth and
 * shadow of an open smile), so the lip-sync backends know where the lips are and how far apart
 * they rest. An avatar is immutable once built and may be shared by any number of sessions and
 * threads. Each frame is kept as I420 (copied straight into encoder frames, so unchanged pixels
 * are never converted again) and, for the lip-sync backends, as RGB: the whole frame for a
 * photo, the region around the face for a pack (whose I420 frames stay in the shared mapping,
 * as tiles: fc_avatar_copy_i420 assembles one). */
#ifndef FACECAST_AVATAR_H
#define FACECAST_AVATAR_H

#include "facecast/picture.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fc_framing {
  FC_FRAMING_AUTO = 0, /* head-and-shoulders when the face is small in the picture, else full */
  FC_FRAMING_HEAD,     /* crop around the face with a margin, scaled to the output size */
  FC_FRAMING_FULL,     /* the whole picture, scaled to cover the output size (centre crop) */
} fc_framing;

typedef struct fc_avatar_params {
  int width, height;  /* output size, even; default 512×512 */
  fc_framing framing; /* default FC_FRAMING_AUTO */
} fc_avatar_params;

/* Mouth geometry of one frame, in output pixels. */
typedef struct fc_mouth_geom {
  float cx, cy;    /* centre of the lips' meeting line (centre of the rest gap when open) */
  float half_w;    /* half the width between the mouth corners */
  float curve;     /* smile curvature: the lips meet at y = cy + curve·(dx/half_w)², so a smile
                      (corners up) has curve < 0 */
  float rest_gap;  /* height of the visible opening (teeth, dark) at rest; 0 when closed */
  float face_h;    /* face height (box side), the scale for jaw and lip motion */
} fc_mouth_geom;

typedef struct fc_avatar fc_avatar;

fc_avatar_params fc_avatar_params_default(void);

/* Where the set-up puts the default avatar (the public-domain astronaut photograph of Debian's
 * python3-skimage): $FACECAST_DATA_DIR/avatars/default.png, else the build's data dir, else
 * the skimage file itself. */
const char *fc_avatar_default_path(void);

/* Builds an avatar from a photo. The face box and landmarks come from the face cache when the
 * same picture was made into an avatar of the same size and framing before, with the same
 * model files and build (fc_avatar_detection says which; the cache is a file per picture in
 * $FACECAST_CACHE_DIR, else $XDG_CACHE_HOME/facecast or ~/.cache/facecast; "off" disables it),
 * and are then exactly what the detectors would give. Errors: those of fc_image_load,
 * FC_ENOFACE when no face is found, FC_EINVAL for a bad size; each with a detail. A cache that
 * cannot be read or written is never an error. */
fc_avatar *fc_avatar_create_from_image(const char *path, const fc_avatar_params *p, int *err);
/* Opens an avatar pack made by the studio (studio.h): a path to a .fcpack file, or an avatar
 * id looked up in fc_avatar_dir(). The pack's I420 tiles are used in place (its pages are
 * shared by every session and process); the mouth geometry comes from its landmarks. Frames
 * play in a ping-pong loop. Errors: FC_ENOTFOUND, FC_EFORMAT (corrupt pack), FC_EINVAL,
 * FC_EUNSUPPORTED (too large for memory), FC_ENOMEM; each with a detail. */
fc_avatar *fc_avatar_open_pack(const char *path_or_id, int *err);
/* Whether an --avatar argument names a pack (a .fcpack file, or a bare id such as "anna")
 * rather than a photo (any other file name). */
int fc_avatar_is_pack_ref(const char *s);

/* Where packs live: $FACECAST_DATA_DIR/avatars, else the build's data/avatars. */
const char *fc_avatar_dir(void);
/* Whether id is a valid avatar id. */
int fc_avatar_id_valid(const char *id);
/* The pack file an avatar argument names: a path (with a '/' or ending in .fcpack) as it is,
 * an id as dir/ID.fcpack (dir NULL: fc_avatar_dir()). 0, or FC_EINVAL with a detail. */
int fc_avatar_pack_path(const char *dir, const char *path_or_id, char *out, size_t n);
void fc_avatar_destroy(fc_avatar *av);

/* The pack's avatar id, or "default" for an avatar made from a photo. */
const char *fc_avatar_id(const fc_avatar *av);
int fc_avatar_width(const fc_avatar *av);
int fc_avatar_height(const fc_avatar *av);
int fc_avatar_frame_count(const fc_avatar *av);
/* Frame i's pixels (i is taken modulo the frame count, ping-pong for several frames). Avatars
 * made from a photo only: NULL for a pack, whose frames exist only as I420. */
const fc_image *fc_avatar_frame(const fc_avatar *av, int i);
/* The RGB pixels around frame i's face, all a lip-sync backend reads: *where is the rectangle
 * of the frame the image shows (even x, y). The whole frame for a photo avatar. */
const fc_image *fc_avatar_face_region(const fc_avatar *av, int i, fc_rect *where);
/* Frame i as contiguous I420 (width*height*3/2 bytes): avatars made from a photo only (NULL
 * for a pack, whose frames are tiles: use fc_avatar_copy_i420). */
const uint8_t *fc_avatar_frame_i420(const fc_avatar *av, int i);
/* Copies frame i (i as above) into dst as contiguous I420, width*height*3/2 bytes: a memcpy for
 * a photo, tiles assembled for a pack. Allocates nothing. 0, or an error of fc_pack_copy_i420. */
int fc_avatar_copy_i420(const fc_avatar *av, int i, uint8_t *dst);
/* The rectangle r of frame i (x, y, w, h even, inside the frame) as contiguous I420 into dst:
 * Y r.w*r.h bytes, then U and V (r.w/2)*(r.h/2) each. Allocates nothing. FC_EINVAL for a bad
 * rectangle. */
int fc_avatar_copy_i420_rect(const fc_avatar *av, int i, fc_rect r, uint8_t *dst);
/* A key for frame i's pixels, unique in the process and never 0: equal keys mean equal pixels
 * (the same avatar object and the same stored frame), so caches of derived data (a GPU's copy
 * of the face) can be keyed by it. A new avatar object, even of the same file, gets new keys. */
uint64_t fc_avatar_frame_key(const fc_avatar *av, int i);
fc_rect fc_avatar_face(const fc_avatar *av, int i);
const fc_mouth_geom *fc_avatar_mouth(const fc_avatar *av, int i);
/* Frame i's 68 landmarks (dlib's order, frame pixels), or NULL when the avatar has none (a
 * photo on a machine without dlib's model file). */
const fc_point *fc_avatar_landmarks(const fc_avatar *av, int i);
/* Action clips (a pack's named clips other than its "idle" loop, e.g. "wave"): played whole, as
 * recorded, with their audio (16 kHz mono s16 when present) by fc_stream_play_clip. */
#define FC_AVATAR_CLIP_RATE 16000
int fc_avatar_clip_count(const fc_avatar *av);
/* Index of the clip called name, or FC_ENOTFOUND. */
int fc_avatar_find_clip(const fc_avatar *av, const char *name);
/* Clip k's name (NULL for a bad k), frame count and audio (*pcm NULL, *samples 0: none). */
const char *fc_avatar_clip_info(const fc_avatar *av, int k, int *frames, const int16_t **pcm,
                                size_t *samples);
/* Copies frame j of clip k into dst as contiguous I420 (width*height*3/2 bytes). FC_EINVAL for
 * a bad k or j. */
int fc_avatar_clip_copy_i420(const fc_avatar *av, int k, int j, uint8_t *dst);
/* The face box found in the source picture, before framing. */
fc_rect fc_avatar_source_face(const fc_avatar *av);
/* A photo avatar: how its face box and landmarks were had, as a phrase for a start-up log
 * ("face box and 68 landmarks from the cache in 0.004 s (FILE)", "... found in 0.52 s; cached
 * as FILE"), with *cached 1 when they were read from the face cache (neither detector nor
 * model opened), else 0. NULL and 0 for a pack. cached may be NULL. */
const char *fc_avatar_detection(const fc_avatar *av, int *cached);

#ifdef __cplusplus
}
#endif
#endif
