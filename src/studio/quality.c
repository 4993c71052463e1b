/* The avatar quality gate (see studio.h): per-frame measurements of the face, and the decision
 * over all frames with a message per reason that says what to change.
 *
 * Measurements, on the Haar face box of OpenCV-weighted grey:
 *   sharpness  variance of the 4-neighbour Laplacian relative to the variance of the grey
 *              levels (a focused face has strong second derivatives at eyes, lips and hair;
 *              blur removes them first; the ratio keeps a dim but sharp face sharp);
 *   luma       mean and standard deviation (exposure and contrast);
 *   yaw        where the nose tip (point 30) sits between the outer eye corners (36, 45):
 *              r = 0.5 facing the camera; a head turned by θ moves the tip by about
 *              sin θ of the half-span, so yaw ≈ asin(2r − 1);
 *   mouth      the outer lip points (48–59) inside the picture, and texture (grey spread)
 *              in their bounding box against the face's: a covered mouth is flat.
 * Thresholds were set on the two public-domain portraits Debian ships (skimage's astronaut,
 * matplotlib's grace_hopper) and degraded copies of them (tests/test_studio.c makes them). */
#include "studio/studio_internal.h"
#include "facecast/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_FACE_PX 96
/* The detector's boxes come in steps of its 1.1 scale factor: a face that measures 96 px on the
 * picture may get a box one step smaller. */
#define FACE_PX_SLACK 1.1
#define MIN_SHARPNESS 2.0   /* 100 × Laplacian variance / luma variance of the face */
#define MIN_LUMA 50.0
#define MAX_LUMA 205.0
#define MIN_LUMA_STD 18.0
#define MAX_YAW_DEG 30.0
#define MIN_MOUTH_TEXTURE 0.2 /* grey spread in the lips' box relative to the face's */
#define OTHER_FACE_RATIO 0.6 /* a second face this wide (relative) counts as another person */
#define BAD_FRAME_SHARE 0.10 /* a video fails a reason when more than this share of frames do */
#define MAX_DETECT 8
/* Whole-picture searches ask for this many overlapping detections (OpenCV's minNeighbors):
 * at 3, clothing and background give face-sized false positives in some frames (seen on a
 * 1080p portrait), which would pass for a second person. */
#define STRICT_NEIGHBORS 6
#define TRACK_FULL_EVERY 25 /* frames between searches of the whole picture (one a second) */

static const char *const keys[FC_Q_COUNT] = {
    "no_face",  "several_faces", "face_too_small", "blurred",          "too_dark",
    "too_bright", "low_contrast", "head_turned",   "mouth_not_visible"};

const char *fc_quality_key(int reason) {
  return reason >= 0 && reason < FC_Q_COUNT ? keys[reason] : "unknown";
}

int fc_quality_failed(const fc_quality *q) {
  for (int i = 0; i < FC_Q_COUNT; i++)
    if (q->blocking[i]) return 1;
  return 0;
}

int fc_face_models_load(fc_face_models *m) {
  int err = FC_OK;
  memset(m, 0, sizeof *m);
  if (!(m->haar = fc_haar_load(fc_haar_default_cascade(), &err))) return err;
  if (!(m->shape = fc_shape_model_load(fc_shape_model_default_path(), &err))) {
    fc_face_models_free(m);
    return err;
  }
  return FC_OK;
}

void fc_face_models_free(fc_face_models *m) {
  if (!m) return;
  fc_haar_destroy(m->haar);
  fc_shape_model_destroy(m->shape);
  m->haar = NULL, m->shape = NULL;
}

/* Per-frame values kept for the medians (bounded: a long video keeps every 4th sample). */
#define MAX_SAMPLES 4096

typedef struct samples {
  int n;
  float face[MAX_SAMPLES], sharp[MAX_SAMPLES], mean[MAX_SAMPLES], sd[MAX_SAMPLES], yaw[MAX_SAMPLES];
} samples;

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static double median(float *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, cmpf);
  return v[n / 2];
}

/* Laplacian variance, luma mean and spread over box r of grey g (stride w). */
static void box_stats(const uint8_t *g, int w, fc_rect r, double *lapvar, double *mean, double *sd) {
  double s = 0, s2 = 0, l = 0, l2 = 0;
  long n = 0, nl = 0;
  for (int y = r.y; y < r.y + r.h; y++)
    for (int x = r.x; x < r.x + r.w; x++) {
      double v = g[(size_t)y * w + x];
      s += v, s2 += v * v, n++;
      if (y > r.y && y < r.y + r.h - 1 && x > r.x && x < r.x + r.w - 1) {
        const uint8_t *p = g + (size_t)y * w + x;
        double lap = p[-1] + p[1] + p[-w] + p[w] - 4.0 * p[0];
        l += lap, l2 += lap * lap, nl++;
      }
    }
  *mean = n ? s / n : 0;
  *sd = n ? sqrt(fmax(0, s2 / n - *mean * *mean)) : 0;
  *lapvar = nl ? l2 / nl - (l / nl) * (l / nl) : 0;
}

static fc_rect clip_rect(fc_rect r, int w, int h) {
  int x0 = r.x < 0 ? 0 : r.x, y0 = r.y < 0 ? 0 : r.y;
  int x1 = r.x + r.w > w ? w : r.x + r.w, y1 = r.y + r.h > h ? h : r.y + r.h;
  return (fc_rect){x0, y0, x1 > x0 ? x1 - x0 : 0, y1 > y0 ? y1 - y0 : 0};
}

/* The state a frame check needs besides the frame: grey buffers, reused across frames. */
typedef struct qstate {
  uint8_t *gcv, *gdl;
  size_t cap;
  samples s;
} qstate;

static _Thread_local qstate *tls_q;

void fc_quality_thread_free(void) {
  if (!tls_q) return;
  free(tls_q->gcv);
  free(tls_q->gdl);
  free(tls_q);
  tls_q = NULL;
}

int fc_quality_measure(const fc_face_models *m, const fc_image *img, fc_quality *q,
                       fc_rect *face_out, fc_point *pts_out) {
  if (!tls_q && !(tls_q = calloc(1, sizeof *tls_q))) return 0;
  qstate *st = tls_q;
  size_t need = (size_t)img->w * img->h;
  if (need > st->cap) {
    uint8_t *a = realloc(st->gcv, need), *b = a ? realloc(st->gdl, need) : NULL;
    if (a) st->gcv = a;
    if (!a || !b) return 0;
    st->gdl = b, st->cap = need;
  }
  if (q->frames == 0) st->s.n = 0;
  q->frames++;
  fc_image_to_gray(img, st->gcv, img->w);
  fc_rect faces[MAX_DETECT];
  fc_haar_params hp = fc_haar_params_default();
  fc_rect prev = face_out ? *face_out : (fc_rect){0};
  int nf = 0, full = 1;
  /* Tracking: between full-picture searches (every TRACK_FULL_EVERY frames, and whenever the
   * face is lost) only a window around the last face is searched, at nearby sizes: the
   * detector's cost grows with the area and the number of scales. */
  if (prev.w > 0 && q->frames % TRACK_FULL_EVERY != 1) {
    fc_rect roi = clip_rect((fc_rect){prev.x - prev.w / 2, prev.y - prev.h / 2, 2 * prev.w, 2 * prev.h},
                            img->w, img->h);
    fc_haar_params tp = hp;
    tp.min_size = (int)(prev.w * 0.75), tp.max_size = (int)(prev.w * 1.35) + 1;
    if (roi.w >= 24 && roi.h >= 24) {
      nf = fc_haar_detect(m->haar, st->gcv + (size_t)roi.y * img->w + roi.x, roi.w, roi.h, img->w,
                          &tp, faces, MAX_DETECT);
      for (int i = 0; i < nf && i < MAX_DETECT; i++) faces[i].x += roi.x, faces[i].y += roi.y;
      full = nf <= 0;
    }
  }
  if (full) { /* strict first (more overlapping hits: false positives rarely have them) */
    fc_haar_params sp = hp;
    sp.min_neighbors = STRICT_NEIGHBORS;
    nf = fc_haar_detect(m->haar, st->gcv, img->w, img->h, img->w, &sp, faces, MAX_DETECT);
    if (nf <= 0) nf = fc_haar_detect(m->haar, st->gcv, img->w, img->h, img->w, &hp, faces, MAX_DETECT);
  }
  if (full) q->full_searches++;
  if (nf <= 0) {
    q->failed[FC_Q_NO_FACE]++;
    return 0;
  }
  fc_rect f = faces[0]; /* largest first */
  if (face_out) {       /* the caller tracks: prefer the candidate nearest its previous face */
    if (prev.w > 0) {
      double best = 1e30;
      for (int i = 0; i < nf && i < MAX_DETECT; i++) {
        double dx = faces[i].x + faces[i].w / 2.0 - (prev.x + prev.w / 2.0);
        double dy = faces[i].y + faces[i].h / 2.0 - (prev.y + prev.h / 2.0);
        double d = dx * dx + dy * dy + 4.0 * (faces[i].w - prev.w) * (faces[i].w - prev.w);
        if (d < best) best = d, f = faces[i];
      }
    }
    *face_out = f;
  }
  /* other people are looked for only where the whole picture was searched */
  if (full)
  for (int i = 0; i < nf && i < MAX_DETECT; i++)
    if ((faces[i].x != f.x || faces[i].y != f.y) && faces[i].w >= OTHER_FACE_RATIO * f.w) {
      q->failed[FC_Q_MANY_FACES]++;
      break;
    }
  if (f.w * FACE_PX_SLACK < MIN_FACE_PX) q->failed[FC_Q_FACE_SMALL]++;
  double lapvar, mean, sd;
  box_stats(st->gcv, img->w, clip_rect(f, img->w, img->h), &lapvar, &mean, &sd);
  double lap = sd > 0.5 ? 100.0 * lapvar / (sd * sd) : 0;
  if (lap < MIN_SHARPNESS) q->failed[FC_Q_BLURRED]++;
  if (mean < MIN_LUMA) q->failed[FC_Q_DARK]++;
  if (mean > MAX_LUMA) q->failed[FC_Q_BRIGHT]++;
  if (sd < MIN_LUMA_STD) q->failed[FC_Q_LOW_CONTRAST]++;

  fc_point pts[FC_LANDMARKS];
  fc_rgb_to_gray_dlib(img, st->gdl);
  double yaw = 0;
  if (fc_shape_predict(m->shape, st->gdl, img->w, img->h, img->w, fc_dlib_box_from_haar(f), pts) == 0) {
    double span = pts[45].x - pts[36].x;
    double r = span > 1 ? (pts[30].x - pts[36].x) / span : 0.5;
    double s = 2 * r - 1;
    yaw = asin(s < -1 ? -1 : s > 1 ? 1 : s) * 180 / M_PI;
    if (fabs(yaw) > MAX_YAW_DEG) q->failed[FC_Q_TURNED]++;
    float x0 = 1e9f, y0 = 1e9f, x1 = -1e9f, y1 = -1e9f;
    for (int i = 48; i < 60; i++) {
      x0 = fminf(x0, pts[i].x), x1 = fmaxf(x1, pts[i].x);
      y0 = fminf(y0, pts[i].y), y1 = fmaxf(y1, pts[i].y);
    }
    int inside = x0 >= 0 && y0 >= 0 && x1 < img->w && y1 < img->h;
    double ml, mm, msd = 0;
    if (inside) {
      fc_rect mr = {(int)x0, (int)y0, (int)(x1 - x0) + 1, (int)(y1 - y0) + 1};
      box_stats(st->gcv, img->w, clip_rect(mr, img->w, img->h), &ml, &mm, &msd);
    }
    if (!inside || msd < MIN_MOUTH_TEXTURE * sd) q->failed[FC_Q_MOUTH_HIDDEN]++;
    if (pts_out) memcpy(pts_out, pts, sizeof pts);
  }
  samples *sm = &st->s;
  if (sm->n < MAX_SAMPLES) {
    sm->face[sm->n] = (float)f.w, sm->sharp[sm->n] = (float)lap, sm->mean[sm->n] = (float)mean;
    sm->sd[sm->n] = (float)sd, sm->yaw[sm->n] = (float)yaw;
    sm->n++;
  }
  return 1;
}

void fc_quality_check_frame(const fc_face_models *m, const fc_image *img, fc_quality *q) {
  fc_quality_measure(m, img, q, NULL, NULL);
}

void fc_quality_finish(fc_quality *q, int is_photo) {
  samples *sm = tls_q ? &tls_q->s : NULL;
  int n = sm ? sm->n : 0;
  if (n > 0) {
    q->face_px = median(sm->face, n), q->sharpness = median(sm->sharp, n);
    q->luma_mean = median(sm->mean, n), q->luma_std = median(sm->sd, n);
    q->yaw_deg = median(sm->yaw, n);
  }
  static const char *const advice[FC_Q_COUNT] = {
      "no face found: use footage where one face looks at the camera, fully in the picture",
      "more than one face: use footage with only the presenter in the picture",
      "the face is smaller than 96 px: move closer or use a higher resolution (face %.0f px)",
      "the face is blurred (sharpness %.1f, need %.1f): focus on the face, avoid motion blur",
      "the face is too dark (mean %.0f of 255): add light on the face",
      "the face is too bright (mean %.0f of 255): reduce light or exposure",
      "the face has too little contrast (spread %.0f): light the face from one side, avoid haze",
      "the head is turned (about %.0f degrees): the presenter should face the camera",
      "the mouth is not visible: keep the mouth uncovered and inside the picture"};
  for (int r = 0; r < FC_Q_COUNT; r++) {
    int fails = q->failed[r];
    int tested = r == FC_Q_MANY_FACES ? q->full_searches : q->frames;
    q->blocking[r] = is_photo ? fails > 0 : tested > 0 && fails > BAD_FRAME_SHARE * tested;
    if (r == FC_Q_NO_FACE && q->frames == 0) q->blocking[r] = 1;
    if (!q->blocking[r]) continue;
    double v = r == FC_Q_FACE_SMALL ? q->face_px
               : r == FC_Q_BLURRED ? q->sharpness
               : r == FC_Q_DARK || r == FC_Q_BRIGHT ? q->luma_mean
               : r == FC_Q_LOW_CONTRAST ? q->luma_std
               : fabs(q->yaw_deg);
    char msg[160];
    snprintf(msg, sizeof msg, advice[r], v, MIN_SHARPNESS);
    if (!is_photo)
      snprintf(q->message[r], sizeof q->message[r], "%s (%d of %d frames)", msg, fails,
               r == FC_Q_MANY_FACES ? q->full_searches : q->frames);
    else
      snprintf(q->message[r], sizeof q->message[r], "%s", msg);
  }
}
