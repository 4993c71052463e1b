/* Avatar v0: one photo → framed frame(s) with face box and mouth geometry (see avatar.h).
 *
 * Mouth location without landmarks: the lips sit in the lower third of a Haar face box. Inside a
 * search window there we classify pixels against the face's own skin colour: "open" pixels
 * (teeth: brighter than skin and nearly grey; mouth interior: much darker than skin) and "lip"
 * pixels (redder than skin). Rows whose centre is mostly open form the rest gap (a smiling photo
 * shows teeth); otherwise the darkest row of the window is the line where the lips meet. The
 * corners are where lip and open pixels end along that line. Anything the heuristics cannot
 * decide falls back to average face proportions, so every face gets a usable geometry.
 */
#include "facecast/avatar.h"
#include "facecast/error.h"
#include "avatar/facecache.h"
#include "avatar/haar.h"
#include "core/file.h"
#include "avatar/pack.h"

#include <glib.h>
#include <libyuv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fc_avatar {
  int w, h, n_frames;
  fc_image *frames; /* photo: the whole frame; pack: the region around the face (where[]) */
  fc_rect *where;   /* pack: where frames[i] lies in frame i */
  uint8_t **i420; /* photo: owned contiguous frames; NULL for a pack (its frames are tiles) */
  fc_pack *pack;  /* an avatar opened from a pack (fc_avatar_open_pack) */
  int first;      /* pack: the pack frame of idle frame 0 */
  /* pack: the clips other than "idle" (n_frames covers only the idle loop) */
  int nclips;
  fc_pack_clip clips[FC_PACK_MAX_CLIPS];
  fc_rect *faces;
  fc_point *landmarks; /* 68 per frame, or NULL (a photo when the shape model is not installed) */
  fc_mouth_geom *mouths;
  fc_rect source_face;
  uint64_t serial; /* process-unique, for fc_avatar_frame_key */
  char *detection; /* photo: how the face and landmarks were had (fc_avatar_detection) */
  int cached;      /* photo: they came from the face cache */
};

/* Serials start at 1 so that no frame key is 0. */
static uint64_t next_serial(void) {
  static _Atomic uint64_t counter;
  return ++counter;
}

fc_avatar_params fc_avatar_params_default(void) {
  return (fc_avatar_params){.width = 512, .height = 512, .framing = FC_FRAMING_AUTO};
}

const char *fc_avatar_default_path(void) {
  static _Thread_local char path[4096];
  /* the data folder's, else the one set-up put beside the binary (a data folder of one's own
   * need not carry the default avatar) */
  const char *dirs[] = {fc_data_dir(), "data", fc_beside_exe("data")};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    if (!dirs[i]) continue;
    snprintf(path, sizeof path, "%s/avatars/default.png", dirs[i]);
    if (access(path, R_OK) == 0) return path;
  }
  return "/usr/lib/python3/dist-packages/skimage/data/astronaut.png";
}

static int ping_pong(int i, int n) {
  if (n <= 1) return 0;
  int period = 2 * (n - 1);
  int k = i % period;
  if (k < 0) k += period;
  return k < n ? k : period - k;
}

static float luma(const uint8_t *p) { return 0.299f * p[0] + 0.587f * p[1] + 0.114f * p[2]; }
static float redness(const uint8_t *p) { return p[0] - 0.5f * (p[1] + p[2]); }
static float sat(const uint8_t *p) {
  int mx = p[0] > p[1] ? p[0] : p[1], mn = p[0] < p[1] ? p[0] : p[1];
  mx = mx > p[2] ? mx : p[2];
  mn = mn < p[2] ? mn : p[2];
  return mx ? (float)(mx - mn) / mx : 0;
}

typedef struct skin {
  float y, sat, red;
} skin;

/* Teeth: as bright as skin but much greyer; the mouth's interior: much darker than skin. */
static int is_open(const uint8_t *p, skin s) {
  float l = luma(p);
  return (l > s.y * 0.95f && sat(p) < s.sat * 0.75f) || l < s.y * 0.5f;
}
static int is_lip(const uint8_t *p, skin s) { return redness(p) > s.red + 8.0f; }

static const uint8_t *px(const fc_image *im, int x, int y) {
  x = x < 0 ? 0 : x >= im->w ? im->w - 1 : x;
  y = y < 0 ? 0 : y >= im->h ? im->h - 1 : y;
  return im->rgb + (size_t)y * im->stride + 3 * x;
}

/* The longest run of open pixels in column x between rows y0 and y1; 0 when none. */
static int open_run(const fc_image *im, skin sk, int x, int y0, int y1, float *mid) {
  int best = 0, run = 0;
  for (int y = y0; y <= y1 + 1; y++) {
    if (y <= y1 && is_open(px(im, x, y), sk)) {
      run++;
    } else {
      if (run > best) {
        best = run;
        *mid = y - run / 2.0f;
      }
      run = 0;
    }
  }
  return best;
}

static void locate_mouth(const fc_image *im, fc_rect f, fc_mouth_geom *m) {
  float s = (float)f.w;
  skin sk = {0, 0, 0};
  int cnt = 0;
  for (int y = f.y + (int)(0.45f * s); y < f.y + (int)(0.6f * s); y++)
    for (int x = f.x + (int)(0.25f * s); x < f.x + (int)(0.75f * s); x++, cnt++) {
      const uint8_t *p = px(im, x, y);
      sk.y += luma(p);
      sk.sat += sat(p);
      sk.red += redness(p);
    }
  if (cnt) sk.y /= cnt, sk.sat /= cnt, sk.red /= cnt;

  m->cx = f.x + 0.5f * s;
  m->cy = f.y + 0.8f * s;
  m->half_w = 0.2f * s;
  m->curve = 0;
  m->rest_gap = 0;
  m->face_h = s;

  /* The rest opening column by column: where a run of open pixels crosses the mouth window.
   * A least-squares fit of mid(x) = cy + b·dx² gives the line and its smile curvature. */
  int y0 = f.y + (int)(0.64f * s), y1 = f.y + (int)(0.98f * s);
  double S0 = 0, S1 = 0, S2 = 0, T0 = 0, T1 = 0;
  float centre_gap = 0;
  int ncol = 0, reach = (int)(0.22f * s);
  for (int dx = -reach; dx <= reach; dx++) {
    float mid = 0;
    int run = open_run(im, sk, (int)m->cx + dx, y0, y1, &mid);
    if (run < 2 || run > 0.2f * s) continue;
    double q = (double)dx * dx;
    S0 += 1, S1 += q, S2 += q * q, T0 += mid, T1 += mid * q;
    if (abs(dx) <= 3) centre_gap = centre_gap > run ? centre_gap : run;
    ncol++;
  }
  if (ncol >= 0.3f * reach && centre_gap >= 2) {
    double det = S0 * S2 - S1 * S1;
    double a = det > 1e-9 ? (T0 * S2 - T1 * S1) / det : T0 / S0;
    double b = det > 1e-9 ? (S0 * T1 - S1 * T0) / det : 0;
    m->cy = (float)a;
    m->rest_gap = centre_gap;
    m->curve = (float)b; /* per px², scaled to half_w below */
  } else {
    /* Closed lips: the darkest row near the expected line is where they meet. */
    float darkest = 1e9f;
    int xa = (int)(m->cx - 0.1f * s), xb = (int)(m->cx + 0.1f * s);
    for (int y = f.y + (int)(0.7f * s); y < f.y + (int)(0.92f * s); y++) {
      float l = 0;
      for (int x = xa; x < xb; x++) l += luma(px(im, x, y));
      l /= (float)(xb - xa);
      if (l < darkest) {
        darkest = l;
        if (l < sk.y * 0.85f) m->cy = y + 0.5f;
      }
    }
  }

  /* Corners: walk out along the (curved) line while pixels are lip or open. */
  float ext[2];
  for (int side = 0; side < 2; side++) {
    int d = 0;
    for (; d < 0.32f * s; d++) {
      float dx = side ? (float)d : -(float)d;
      int y = (int)(m->cy + m->curve * dx * dx);
      const uint8_t *p = px(im, (int)(m->cx + dx), y);
      if (!is_lip(p, sk) && !is_open(p, sk)) break;
    }
    ext[side] = (float)d;
  }
  float hw = 0.5f * (ext[0] + ext[1]);
  if (hw > 0.13f * s && hw < 0.31f * s) m->half_w = hw;
  m->curve *= m->half_w * m->half_w;
  /* A fit thrown by stray pixels would bend the mouth absurdly: keep it plausible. */
  if (m->curve < -0.06f * s) m->curve = -0.06f * s;
  if (m->curve > 0.03f * s) m->curve = 0.03f * s;
}

/* The crop of the source picture that becomes the output frame. */
static fc_rect frame_crop(const fc_image *src, fc_rect face, const fc_avatar_params *p) {
  double aspect = (double)p->width / p->height;
  fc_framing fr = p->framing;
  if (fr == FC_FRAMING_AUTO) {
    int side = src->w < src->h ? src->w : src->h;
    fr = face.w * 3.2 < side ? FC_FRAMING_HEAD : FC_FRAMING_FULL;
  }
  fc_rect c;
  if (fr == FC_FRAMING_HEAD) {
    /* The face takes ~36 % of the frame width, its centre 42 % down: room for hair above and
     * shoulders below, lips large enough to read. */
    double cw = face.w * 2.8, ch = cw / aspect;
    if (ch < face.h * 2.8) {
      ch = face.h * 2.8;
      cw = ch * aspect;
    }
    double cx = face.x + face.w / 2.0, cy = face.y + face.h / 2.0;
    c = (fc_rect){(int)lround(cx - cw / 2), (int)lround(cy - 0.42 * ch), (int)lround(cw),
                  (int)lround(ch)};
  } else {
    /* Cover: the largest centred region of the output's aspect. */
    int cw = src->w, ch = (int)lround(src->w / aspect);
    if (ch > src->h) {
      ch = src->h;
      cw = (int)lround(src->h * aspect);
    }
    c = (fc_rect){(src->w - cw) / 2, (src->h - ch) / 2, cw, ch};
  }
  /* Slide the crop inside the picture where it fits, so the frame shows no repeated edges. */
  if (c.w <= src->w) c.x = c.x < 0 ? 0 : c.x + c.w > src->w ? src->w - c.w : c.x;
  if (c.h <= src->h) c.y = c.y < 0 ? 0 : c.y + c.h > src->h ? src->h - c.h : c.y;
  return c;
}

void fc_avatar_destroy(fc_avatar *av) {
  if (!av) return;
  for (int i = 0; av->frames && i < av->n_frames; i++) fc_image_free(&av->frames[i]);
  for (int i = 0; av->i420 && i < av->n_frames; i++) free(av->i420[i]);
  fc_pack_close(av->pack);
  free(av->frames);
  free(av->where);
  free(av->i420);
  free(av->faces);
  free(av->landmarks);
  free(av->mouths);
  g_free(av->detection);
  free(av);
}

/* A photo's 68 landmarks, when dlib's model is installed (the lip-sync backends fall back to
 * the mouth geometry without them). The model is loaded, used once and dropped: it is 65 MB of
 * trees that a server would otherwise hold for nothing. 1 with av->landmarks set, 0 when the
 * model is not installed, else a negative code (no landmarks, and nothing to cache). */
static int photo_landmarks(fc_avatar *av) {
  int e = FC_OK;
  fc_shape_model *m = fc_shape_model_load(fc_shape_model_default_path(), &e);
  uint8_t *gray = m ? malloc((size_t)av->w * av->h) : NULL;
  if (m && !gray) e = FC_ENOMEM;
  if (gray && !(av->landmarks = malloc(FC_LANDMARKS * sizeof *av->landmarks))) e = FC_ENOMEM;
  if (gray && av->landmarks) {
    fc_rgb_to_gray_dlib(&av->frames[0], gray);
    if ((e = fc_shape_predict(m, gray, av->w, av->h, av->w, fc_dlib_box_from_haar(av->faces[0]),
                              av->landmarks)) != 0) {
      free(av->landmarks);
      av->landmarks = NULL;
    }
  }
  free(gray);
  fc_shape_model_destroy(m);
  fc_error_clear(); /* a missing model is not this call's error */
  return av->landmarks ? 1 : e == FC_ENOTFOUND ? 0 : e < 0 ? e : FC_ENOMEM;
}

/* The largest face in src, in its pixels, with OpenCV's frontal cascade. */
static int find_face(const fc_image *src, const char *path, const fc_haar_params *hp,
                     fc_rect *face) {
  int e = FC_OK;
  uint8_t *gray = NULL;
  fc_haar *haar = fc_haar_load(fc_haar_default_cascade(), &e);
  if (!haar) return e;
  if (!(gray = malloc((size_t)src->w * src->h))) {
    e = fc_error_set(FC_ENOMEM, "out of memory");
    goto done;
  }
  fc_image_to_gray(src, gray, src->w);
  int nf = fc_haar_detect(haar, gray, src->w, src->h, src->w, hp, face, 1);
  if (nf < 0)
    e = nf;
  else if (nf == 0)
    e = fc_error_set(FC_ENOFACE, "%s: no face found (use a frontal photo, face at least 24 px)",
                     path);
done:
  free(gray);
  fc_haar_destroy(haar);
  return e;
}

/* After a miss: the results into the face cache, when they are what the key promises (the
 * landmarks found, or the model missing both when keyed and when loaded). Returns the phrase
 * for fc_avatar_detection's note (g_free). */
static char *store_detection(const fc_avatar *av, const char *cache, const fc_face_key *k, int lm) {
  if (!cache)
    return g_strdup(getenv("FACECAST_CACHE_DIR") ? "not cached (FACECAST_CACHE_DIR=off)"
                                                 : "not cached (no cache folder known)");
  if (lm < 0 || (lm == 0 && k->model_present)) return g_strdup("not cached (landmarks failed)");
  fc_face_entry ent = {.src_w = k->src_w,
                       .src_h = k->src_h,
                       .out_w = av->w,
                       .out_h = av->h,
                       .face = av->source_face,
                       .has_landmarks = lm == 1};
  memcpy(ent.id, k->id, sizeof ent.id);
  if (lm == 1) memcpy(ent.landmarks, av->landmarks, sizeof ent.landmarks);
  int e = fc_face_cache_save(cache, &ent);
  fc_error_clear(); /* a cache that cannot be written costs the next start time, nothing else */
  return e ? g_strdup("not cached (the cache could not be written)")
           : g_strdup_printf("cached as %s", cache);
}

fc_avatar *fc_avatar_create_from_image(const char *path, const fc_avatar_params *p, int *err) {
  fc_avatar_params def = fc_avatar_params_default();
  if (!p) p = &def;
  fc_image src = {0};
  fc_avatar *av = NULL;
  char *cache = NULL;
  int e = FC_OK;

  if (p->width < 64 || p->height < 64 || p->width > 4096 || p->height > 4096 || p->width % 2 ||
      p->height % 2) {
    e = fc_error_set(FC_EINVAL, "output size %dx%d: must be even, 64..4096", p->width, p->height);
    goto fail;
  }
  if ((e = fc_image_load(path, &src))) goto fail;
  /* The face and landmarks from the face cache when this picture was seen with these settings
   * and models (facecache.h); else the detectors run and the cache learns them. */
  gint64 t0 = g_get_monotonic_time();
  fc_haar_params hp = fc_haar_params_default();
  hp.min_size = 24;
  fc_face_key key;
  fc_face_key_make(&src, p, &hp, fc_haar_default_cascade(), fc_shape_model_default_path(), &key);
  cache = fc_face_cache_path(fc_cache_dir(), &key);
  fc_face_entry hit;
  int cached = cache && fc_face_cache_load(cache, &key, &hit);
  fc_rect face = cached ? hit.face : (fc_rect){0, 0, 0, 0};
  if (!cached && (e = find_face(&src, path, &hp, &face))) goto fail;

  if (!(av = calloc(1, sizeof *av))) goto oom;
  av->serial = next_serial();
  av->w = p->width;
  av->h = p->height;
  av->n_frames = 1;
  av->source_face = face;
  av->frames = calloc(1, sizeof *av->frames);
  av->i420 = calloc(1, sizeof *av->i420);
  av->faces = calloc(1, sizeof *av->faces);
  av->mouths = calloc(1, sizeof *av->mouths);
  if (!av->frames || !av->i420 || !av->faces || !av->mouths) goto oom;

  fc_rect crop = frame_crop(&src, face, p);
  if ((e = fc_image_alloc(&av->frames[0], av->w, av->h))) goto fail;
  fc_image_resize_region(&src, crop, &av->frames[0]);
  double sx = (double)av->w / crop.w, sy = (double)av->h / crop.h;
  av->faces[0] = (fc_rect){(int)lround((face.x - crop.x) * sx), (int)lround((face.y - crop.y) * sy),
                           (int)lround(face.w * sx), (int)lround(face.h * sy)};
  locate_mouth(&av->frames[0], av->faces[0], &av->mouths[0]);
  char *stored = NULL;
  if (!cached) {
    stored = store_detection(av, cache, &key, photo_landmarks(av));
  } else if (hit.has_landmarks) {
    if (!(av->landmarks = malloc(sizeof hit.landmarks))) goto oom;
    memcpy(av->landmarks, hit.landmarks, sizeof hit.landmarks);
  }
  double secs = (double)(g_get_monotonic_time() - t0) / 1e6;
  const char *pts = av->landmarks ? " and 68 landmarks" : " (no landmarks)";
  av->cached = cached;
  av->detection =
      cached ? g_strdup_printf("face box%s from the cache in %.3f s (%s)", pts, secs, cache)
             : g_strdup_printf("face box%s found in %.2f s; %s", pts, secs, stored);
  g_free(stored);

  size_t ysz = (size_t)av->w * av->h;
  if (!(av->i420[0] = malloc(ysz * 3 / 2))) goto oom;
  uint8_t *y = av->i420[0], *u = y + ysz, *v = u + ysz / 4;
  RAWToI420(av->frames[0].rgb, av->frames[0].stride, y, av->w, u, av->w / 2, v, av->w / 2, av->w,
            av->h);

  g_free(cache);
  fc_image_free(&src);
  *err = FC_OK;
  return av;
oom:
  e = fc_error_set(FC_ENOMEM, "out of memory");
fail:
  g_free(cache);
  fc_image_free(&src);
  fc_avatar_destroy(av);
  *err = e;
  return NULL;
}

/* Mouth geometry from the 68 landmarks: the lips' meeting line is the middle of the inner lips
 * (60–67), the corners are 48 and 54, the rest opening is the inner lips' gap. */
static void mouth_from_landmarks(const fc_point *p, fc_rect box, fc_mouth_geom *m) {
  float top = (p[61].y + p[62].y + p[63].y) / 3, bot = (p[65].y + p[66].y + p[67].y) / 3;
  m->cx = (p[48].x + p[54].x) / 2;
  m->cy = (top + bot) / 2;
  m->half_w = (p[54].x - p[48].x) / 2;
  if (m->half_w < 2) m->half_w = 2;
  m->curve = (p[48].y + p[54].y) / 2 - m->cy;
  m->rest_gap = bot - top > 0 ? bot - top : 0;
  m->face_h = (float)box.h;
}

int fc_avatar_is_pack_ref(const char *s) {
  size_t n = s ? strlen(s) : 0;
  return (n > 7 && strcmp(s + n - 7, ".fcpack") == 0) || fc_avatar_id_valid(s);
}

fc_avatar *fc_avatar_open_pack(const char *path_or_id, int *err) {
  char path[4096];
  fc_avatar *av = NULL;
  uint8_t *region = NULL;
  int e = FC_OK;
  if ((e = fc_avatar_pack_path(NULL, path_or_id, path, sizeof path))) goto fail;
  if (!(av = calloc(1, sizeof *av))) goto oom;
  av->serial = next_serial();
  if (!(av->pack = fc_pack_open(path, &e))) {
    if (e == FC_ENOTFOUND && !strchr(path_or_id, '/'))
      e = fc_error_set(FC_ENOTFOUND, "avatar '%s' not found (facecast avatar list)", path_or_id);
    goto fail;
  }
  const fc_pack_info *in = fc_pack_get_info(av->pack);
  av->w = in->width, av->h = in->height, av->n_frames = in->frames;
  /* The idle loop: the clip named "idle" (the studio writes one), else every frame; the other
   * clips are played whole by fc_stream_play_clip and need no RGB or geometry. */
  int first = 0;
  for (int k = 0; k < fc_pack_clip_count(av->pack); k++) {
    fc_pack_clip c;
    if (fc_pack_get_clip(av->pack, k, &c)) continue;
    if (strcmp(c.name, "idle") == 0) first = c.first, av->n_frames = c.count;
    else if (av->nclips < FC_PACK_MAX_CLIPS) av->clips[av->nclips++] = c;
  }
  if (av->n_frames < 1) {
    e = fc_error_set(FC_EFORMAT, "avatar '%s': empty idle clip", path_or_id);
    goto fail;
  }
  av->first = first;
  av->frames = calloc((size_t)av->n_frames, sizeof *av->frames);
  av->where = calloc((size_t)av->n_frames, sizeof *av->where);
  av->faces = calloc((size_t)av->n_frames, sizeof *av->faces);
  av->mouths = calloc((size_t)av->n_frames, sizeof *av->mouths);
  av->landmarks = calloc((size_t)av->n_frames * FC_LANDMARKS, sizeof *av->landmarks);
  /* One frame's room for the region's I420, assembled from the tiles (at load only). */
  region = malloc((size_t)av->w * av->h * 3 / 2);
  if (!av->frames || !av->where || !av->faces || !av->mouths || !av->landmarks || !region)
    goto oom;
  for (int i = 0; i < av->n_frames; i++) {
    fc_pack_frame f;
    if ((e = fc_pack_get_frame(av->pack, first + i, &f))) goto fail;
    av->faces[i] = f.box;
    mouth_from_landmarks(f.landmarks, f.box, &av->mouths[i]);
    memcpy(av->landmarks + (size_t)i * FC_LANDMARKS, f.landmarks, sizeof f.landmarks);
    /* The lip-sync backends read pixels only around the face: from half a box left of it to
     * half a box right, a quarter above, down to the neck (the jaw moves). That region is kept
     * as RGB, privately (about 14 box-widths² bytes a frame); the whole frame stays I420 in the
     * shared mapping. */
    fc_rect b = f.box;
    int x0 = (b.x - b.w / 2) & ~1, y0 = (b.y - b.h / 4) & ~1;
    int x1 = b.x + b.w + b.w / 2, y1 = b.y + 2 * b.h;
    x0 = x0 < 0 ? 0 : x0, y0 = y0 < 0 ? 0 : y0;
    x1 = x1 > av->w ? av->w : x1, y1 = y1 > av->h ? av->h : y1;
    fc_rect r = {x0, y0, (x1 - x0) & ~1, (y1 - y0) & ~1};
    if (r.w < 2 || r.h < 2) r = (fc_rect){0, 0, av->w, av->h};
    av->where[i] = r;
    if ((e = fc_image_alloc(&av->frames[i], r.w, r.h)) ||
        (e = fc_pack_copy_i420_rect(av->pack, first + i, r, region)))
      goto fail;
    size_t rsz = (size_t)r.w * r.h;
    I420ToRAW(region, r.w, region + rsz, r.w / 2, region + rsz + rsz / 4, r.w / 2,
              av->frames[i].rgb, av->frames[i].stride, r.w, r.h);
  }
  free(region);
  av->source_face = av->faces[0];
  *err = FC_OK;
  return av;
oom:
  e = fc_error_set(FC_ENOMEM, "out of memory");
fail:
  free(region);
  fc_avatar_destroy(av);
  *err = e;
  return NULL;
}

const char *fc_avatar_id(const fc_avatar *av) {
  return av->pack ? fc_pack_get_info(av->pack)->id : "default";
}

int fc_avatar_width(const fc_avatar *av) { return av->w; }
int fc_avatar_height(const fc_avatar *av) { return av->h; }
int fc_avatar_frame_count(const fc_avatar *av) { return av->n_frames; }
const fc_image *fc_avatar_frame(const fc_avatar *av, int i) {
  return av->pack ? NULL : &av->frames[ping_pong(i, av->n_frames)];
}
const fc_image *fc_avatar_face_region(const fc_avatar *av, int i, fc_rect *where) {
  int k = ping_pong(i, av->n_frames);
  *where = av->pack ? av->where[k] : (fc_rect){0, 0, av->w, av->h};
  return &av->frames[k];
}
const uint8_t *fc_avatar_frame_i420(const fc_avatar *av, int i) {
  return av->pack ? NULL : av->i420[ping_pong(i, av->n_frames)];
}
int fc_avatar_copy_i420(const fc_avatar *av, int i, uint8_t *dst) {
  int k = ping_pong(i, av->n_frames);
  if (av->pack) return fc_pack_copy_i420(av->pack, av->first + k, dst);
  memcpy(dst, av->i420[k], (size_t)av->w * av->h * 3 / 2);
  return FC_OK;
}
int fc_avatar_copy_i420_rect(const fc_avatar *av, int i, fc_rect r, uint8_t *dst) {
  int k = ping_pong(i, av->n_frames);
  if (r.x < 0 || r.y < 0 || r.w < 2 || r.h < 2 || r.x + r.w > av->w || r.y + r.h > av->h ||
      (r.x | r.y | r.w | r.h) & 1)
    return fc_error_set(FC_EINVAL, "rectangle %dx%d+%d+%d outside the %dx%d frame or odd", r.w,
                        r.h, r.x, r.y, av->w, av->h);
  if (av->pack) return fc_pack_copy_i420_rect(av->pack, av->first + k, r, dst);
  const uint8_t *y = av->i420[k], *u = y + (size_t)av->w * av->h, *v = u + (size_t)av->w * av->h / 4;
  for (int j = 0; j < r.h; j++) memcpy(dst + (size_t)j * r.w, y + (size_t)(r.y + j) * av->w + r.x, r.w);
  uint8_t *du = dst + (size_t)r.w * r.h, *dv = du + (size_t)r.w * r.h / 4;
  for (int j = 0; j < r.h / 2; j++) {
    size_t so = (size_t)(r.y / 2 + j) * (av->w / 2) + r.x / 2, d = (size_t)j * (r.w / 2);
    memcpy(du + d, u + so, r.w / 2);
    memcpy(dv + d, v + so, r.w / 2);
  }
  return FC_OK;
}
uint64_t fc_avatar_frame_key(const fc_avatar *av, int i) {
  return av->serial << 24 | (uint64_t)ping_pong(i, av->n_frames);
}
fc_rect fc_avatar_face(const fc_avatar *av, int i) { return av->faces[ping_pong(i, av->n_frames)]; }
const fc_mouth_geom *fc_avatar_mouth(const fc_avatar *av, int i) {
  return &av->mouths[ping_pong(i, av->n_frames)];
}
fc_rect fc_avatar_source_face(const fc_avatar *av) { return av->source_face; }
int fc_avatar_clip_count(const fc_avatar *av) { return av->nclips; }

int fc_avatar_find_clip(const fc_avatar *av, const char *name) {
  for (int k = 0; name && k < av->nclips; k++)
    if (strcmp(av->clips[k].name, name) == 0) return k;
  return fc_error_set(FC_ENOTFOUND, "avatar %s has no clip '%s'", fc_avatar_id(av), name ? name : "");
}

const char *fc_avatar_clip_info(const fc_avatar *av, int k, int *frames, const int16_t **pcm,
                                size_t *samples) {
  if (k < 0 || k >= av->nclips) return NULL;
  const fc_pack_clip *c = &av->clips[k];
  *frames = c->count;
  /* the studio stores clip audio on the engine's clock (16 kHz mono); anything else is mute */
  int usable = c->audio && c->audio_rate == FC_AVATAR_CLIP_RATE && c->audio_channels == 1;
  *pcm = usable ? c->audio : NULL;
  *samples = usable ? (size_t)c->audio_frames : 0;
  return c->name;
}

int fc_avatar_clip_copy_i420(const fc_avatar *av, int k, int j, uint8_t *dst) {
  if (k < 0 || k >= av->nclips || j < 0 || j >= av->clips[k].count)
    return fc_error_set(FC_EINVAL, "avatar %s: no frame %d of clip %d", fc_avatar_id(av), j, k);
  return fc_pack_copy_i420(av->pack, av->clips[k].first + j, dst);
}

const fc_point *fc_avatar_landmarks(const fc_avatar *av, int i) {
  return av->landmarks ? av->landmarks + (size_t)ping_pong(i, av->n_frames) * FC_LANDMARKS : NULL;
}

const char *fc_avatar_detection(const fc_avatar *av, int *cached) {
  if (cached) *cached = av->cached;
  return av->detection;
}
