/* Avatar studio: a video or a photo of a presenter → an avatar pack (pack.h) with per-frame face
 * boxes, 68 landmarks, face crops and blend masks, after a quality gate that refuses unusable
 * material with reasons a person can act on.
 *
 * Per frame: the Haar detector (largest face; with several candidates, the one nearest the
 * previous frame's face, so a passer-by cannot steal the track), dlib's 68 landmarks on the
 * mapped box, the face box padded 10 px down (Wav2Lip's pads 0 10 0 0) and smoothed over 5
 * frames, RGB crops of that box at 96 and/or 256 px, and a feathered mouth/jaw polygon from the
 * landmarks as each crop's blend mask. Photos are framed as the v0 avatar frames them
 * (head-and-shoulders when the face is small) and become a one-frame pack.
 *
 * Quality gate (each reason has its own message; a video fails a reason when more than 10 % of
 * its frames do, a photo when its frame does): no face, several faces, face smaller than 96 px,
 * blurred (variance of the Laplacian of the face), too dark / too bright / too little contrast
 * (the face's luma mean and spread), head turned more than about 30° (nose against the eye
 * corners), mouth not visible (mouth outside the picture, or no texture where it should be).
 *
 * One call runs the whole job on the calling thread; progress and cancellation go through the
 * params (the HTTP task runs it on a worker). */
#ifndef FACECAST_STUDIO_H
#define FACECAST_STUDIO_H

#include "avatar/haar.h"
#include "avatar/image.h"
#include "avatar/landmarks.h"

#ifdef __cplusplus
extern "C" {
#endif

enum fc_quality_reason {
  FC_Q_NO_FACE = 0,
  FC_Q_MANY_FACES,
  FC_Q_FACE_SMALL,
  FC_Q_BLURRED,
  FC_Q_DARK,
  FC_Q_BRIGHT,
  FC_Q_LOW_CONTRAST,
  FC_Q_TURNED,
  FC_Q_MOUTH_HIDDEN,
  FC_Q_COUNT
};

/* The reason's stable key ("no_face", "several_faces", "face_too_small", "blurred",
 * "too_dark", "too_bright", "low_contrast", "head_turned", "mouth_not_visible"). */
const char *fc_quality_key(int reason);

typedef struct fc_quality {
  int frames;                /* frames checked */
  int full_searches;         /* of which searched whole for faces (others: near the last face) */
  int failed[FC_Q_COUNT];    /* frames failing each reason */
  int blocking[FC_Q_COUNT];  /* the reason refuses the material */
  char message[FC_Q_COUNT][200]; /* for blocking reasons: what is wrong and what to do */
  /* measurements (medians over the frames with a face) */
  double face_px, sharpness, luma_mean, luma_std, yaw_deg;
} fc_quality;

/* Whether any reason blocks. */
int fc_quality_failed(const fc_quality *q);

/* The detectors a job needs; load once and share (both are immutable). */
typedef struct fc_face_models {
  fc_haar *haar;
  fc_shape_model *shape;
} fc_face_models;
int fc_face_models_load(fc_face_models *m);
void fc_face_models_free(fc_face_models *m);

/* Checks one RGB frame (also what the video path runs per frame). */
void fc_quality_check_frame(const fc_face_models *m, const fc_image *img, fc_quality *q);
/* Decides the blocking reasons and writes their messages once all frames are checked. */
void fc_quality_finish(fc_quality *q, int is_photo);

#define FC_STUDIO_MAX_CLIPS 16

typedef struct fc_studio_params {
  const char *from;        /* video (anything GStreamer decodes) or photo (PNG/JPEG) */
  const char *id;          /* [A-Za-z0-9_-]{1,63} */
  const char *out_dir;     /* NULL: fc_avatar_dir() */
  int crop_size;           /* 96 or 256: only that crop; 0: both */
  int max_w, max_h;        /* videos are scaled down to fit (default 1920×1080) */
  double max_seconds;      /* videos are cut there (default 60) */
  int photo_w, photo_h;    /* a photo's output frame (default 512×512) */
  const fc_face_models *models; /* NULL: loaded for this call */
  /* Action clips (video avatars only): nclips videos played whole by /set_audiotype, each
   * named (the pack's "idle" loop is the main video), at the main video's frame size, with
   * their audio. They pass the same quality gate. */
  int nclips;
  const char *clip_name[FC_STUDIO_MAX_CLIPS];
  const char *clip_file[FC_STUDIO_MAX_CLIPS];
  void (*progress)(void *user, int percent); /* may be NULL; called from this thread */
  void *user;
  const int *cancel;       /* set nonzero (atomically) from anywhere to stop: FC_ECANCELED */
  const char *name;        /* the source's name for the pack's "source" (NULL: from's) */
  int no_replace;          /* fail rather than replace a pack with this id */
} fc_studio_params;

typedef struct fc_studio_result {
  fc_quality quality;
  int frames, width, height;
  double seconds_taken;
  char path[512]; /* the pack written (empty on failure) */
} fc_studio_result;

/* Runs the job. 0: the pack is written; FC_ENOFACE with res->quality saying why when the gate
 * refuses (no file is written); FC_ECANCELED; or the error of a failing step (FC_ENOTFOUND,
 * FC_EMEDIA, FC_EFORMAT, FC_EINVAL for a bad id or size, FC_EIO, FC_ENOMEM) with its detail. */
int fc_studio_create(const fc_studio_params *p, fc_studio_result *res);



#ifdef __cplusplus
}
#endif
#endif
