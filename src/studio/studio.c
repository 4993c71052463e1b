/* Avatar creation (see studio.h). A video is read twice: the first pass finds the face, its
 * landmarks and the quality measurements of every frame (keeping only those numbers), so the
 * gate decides before anything is written and the boxes can be smoothed over the whole
 * sequence; the second pass decodes again and writes each frame with its crops and masks
 * straight into the pack (memory stays at a few frames whatever the length). */
#include "studio/studio_internal.h"
#include "facecast/avatar.h"
#include "media/decode.h"
#include "facecast/error.h"
#include "avatar/pack.h"

#include <errno.h>
#include <libyuv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SMOOTH 5     /* frames in the box-smoothing window (Wav2Lip's T) */
#define PAD_BOTTOM 10 /* px added below the face box (Wav2Lip's pads 0 10 0 0) */

int fc_studio_mkdirs(const char *dir) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
      *p = '/';
    }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Whether the file starts like a PNG or a JPEG. */
static int is_photo(const char *path) {
  unsigned char b[8] = {0};
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  return (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) || (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF);
}

/* ---- per-frame analysis (pass 1) ---- */

typedef struct track {
  int n, cap;
  fc_rect *face; /* w == 0: no face in that frame */
  fc_point *pts; /* 68 per frame */
} track;

static int track_push(track *t, int found, fc_rect f, const fc_point *pts) {
  if (t->n == t->cap) {
    int cap = t->cap ? t->cap * 2 : 256;
    fc_rect *a = realloc(t->face, (size_t)cap * sizeof *a);
    if (!a) return FC_ENOMEM;
    t->face = a;
    fc_point *b = realloc(t->pts, (size_t)cap * FC_LANDMARKS * sizeof *b);
    if (!b) return FC_ENOMEM;
    t->pts = b, t->cap = cap;
  }
  t->face[t->n] = found ? f : (fc_rect){0, 0, 0, 0};
  if (found) memcpy(t->pts + (size_t)t->n * FC_LANDMARKS, pts, FC_LANDMARKS * sizeof *pts);
  else memset(t->pts + (size_t)t->n * FC_LANDMARKS, 0, FC_LANDMARKS * sizeof *pts);
  t->n++;
  return FC_OK;
}

/* Frames without a face borrow the nearest face (and its points) before or after them. */
static void track_fill(track *t) {
  int last = -1;
  for (int i = 0; i < t->n; i++) {
    if (t->face[i].w > 0) {
      for (int j = last + 1; j < i; j++) { /* the gap before i: nearest side */
        int src = last >= 0 && j - last <= i - j ? last : i;
        t->face[j] = t->face[src];
        memcpy(t->pts + (size_t)j * FC_LANDMARKS, t->pts + (size_t)src * FC_LANDMARKS,
               FC_LANDMARKS * sizeof(fc_point));
      }
      last = i;
    }
  }
  for (int j = last + 1; last >= 0 && j < t->n; j++) {
    t->face[j] = t->face[last];
    memcpy(t->pts + (size_t)j * FC_LANDMARKS, t->pts + (size_t)last * FC_LANDMARKS,
           FC_LANDMARKS * sizeof(fc_point));
  }
}

/* The box the crops are cut from: the mean over a centred window, down to the chin (the Haar
 * box ends at the lower lip on many faces, and the generated mouth needs the jaw), padded down,
 * even, inside the frame. */
static fc_rect crop_box(const track *t, int i, int w, int h) {
  double x = 0, y = 0, bw = 0, bh = 0, chin = 0;
  int n = 0;
  for (int k = i - SMOOTH / 2; k <= i + SMOOTH / 2; k++) {
    if (k < 0 || k >= t->n) continue;
    x += t->face[k].x, y += t->face[k].y, bw += t->face[k].w, bh += t->face[k].h, n++;
    chin += t->pts[(size_t)k * FC_LANDMARKS + 8].y;
  }
  x /= n, y /= n, bw /= n, bh /= n, chin /= n;
  int x0 = (int)lround(x), y0 = (int)lround(y);
  int x1 = (int)lround(x + bw), y1 = (int)lround(fmax(y + bh, chin)) + PAD_BOTTOM;
  x0 = x0 < 0 ? 0 : x0 & ~1;
  y0 = y0 < 0 ? 0 : y0 & ~1;
  x1 = x1 > w ? w : x1;
  y1 = y1 > h ? h : y1;
  return (fc_rect){x0, y0, (x1 - x0) & ~1, (y1 - y0) & ~1};
}

/* ---- masks: the mouth/jaw polygon, feathered ---- */

/* Jaw from the right cheek over the chin to the left one (2..14), closed under the nose. */
static const int poly_idx[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 35, 33, 31};
#define NPOLY ((int)(sizeof poly_idx / sizeof poly_idx[0]))

/* One box-filter pass along a line of n values (step apart) from src to dst, running sums. */
static void blur_line(const uint8_t *src, uint8_t *dst, int n, int step, int r) {
  int sum = 0, cnt = 0;
  for (int k = 0; k < r && k < n; k++) sum += src[k * step], cnt++;
  for (int i = 0; i < n; i++) {
    if (i + r < n) sum += src[(i + r) * step], cnt++;
    if (i - r - 1 >= 0) sum -= src[(i - r - 1) * step], cnt--;
    dst[i * step] = (uint8_t)(sum / cnt);
  }
}

/* Two box passes each way: close to a Gaussian of the feather width. */
static void box_blur(uint8_t *m, uint8_t *tmp, int s, int r) {
  for (int pass = 0; pass < 2; pass++) {
    for (int y = 0; y < s; y++) blur_line(m + y * s, tmp + y * s, s, 1, r);
    for (int x = 0; x < s; x++) blur_line(tmp + x, m + x, s, s, r);
  }
}

/* Fills the polygon (in crop pixels) with 255 by even-odd scanlines, then feathers it. */
static void make_mask(const fc_point *pts, fc_rect box, int s, uint8_t *m, uint8_t *tmp) {
  float px[NPOLY], py[NPOLY];
  for (int i = 0; i < NPOLY; i++) {
    px[i] = (pts[poly_idx[i]].x - box.x) * s / (float)box.w;
    py[i] = (pts[poly_idx[i]].y - box.y) * s / (float)box.h;
  }
  memset(m, 0, (size_t)s * s);
  for (int y = 0; y < s; y++) {
    float yc = y + 0.5f, xs[NPOLY];
    int n = 0;
    for (int i = 0, j = NPOLY - 1; i < NPOLY; j = i++)
      if ((py[i] <= yc) != (py[j] <= yc))
        xs[n++] = px[j] + (yc - py[j]) * (px[i] - px[j]) / (py[i] - py[j]);
    for (int a = 1; a < n; a++) /* insertion sort: n is tiny */
      for (int b = a; b > 0 && xs[b - 1] > xs[b]; b--) {
        float t = xs[b];
        xs[b] = xs[b - 1], xs[b - 1] = t;
      }
    for (int k = 0; k + 1 < n; k += 2) {
      int x0 = (int)ceilf(xs[k] - 0.5f), x1 = (int)floorf(xs[k + 1] - 0.5f);
      for (int x = x0 < 0 ? 0 : x0; x <= x1 && x < s; x++) m[y * s + x] = 255;
    }
  }
  box_blur(m, tmp, s, s / 32 > 1 ? s / 32 : 1);
}

/* ---- the job ---- */

typedef struct job {
  const fc_studio_params *p;
  fc_studio_result *res;
  const fc_face_models *m;
  int w, h, ncrops, crop_size[FC_PACK_MAX_CROPS];
  track t;
  int last_pct;
  /* sources: 0 the main video, 1.. the clips; first frame of each in the track */
  int nsrc, src_first[FC_STUDIO_MAX_CLIPS + 2];
  const char *src_file[FC_STUDIO_MAX_CLIPS + 1];
} job;

static void progress(job *j, int pct) {
  if (pct > 100) pct = 100;
  if (pct == j->last_pct || !j->p->progress) return;
  j->last_pct = pct;
  j->p->progress(j->p->user, pct);
}

static int canceled(const job *j) {
  return j->p->cancel && __atomic_load_n(j->p->cancel, __ATOMIC_RELAXED);
}

static int add_clips(struct job *j, fc_pack_writer *wr, void *ctx);

int fc_frame_packer_init(fc_frame_packer *fp, int w, int h, int ncrops, const int *crop_size) {
  memset(fp, 0, sizeof *fp);
  fp->w = w, fp->h = h, fp->ncrops = ncrops;
  fp->i420 = malloc((size_t)w * h * 3 / 2);
  fp->tmp = malloc(256 * 256);
  if (!fp->i420 || !fp->tmp) goto oom;
  for (int k = 0; k < ncrops; k++) {
    int s = fp->crop_size[k] = crop_size[k];
    if (!(fp->mask[k] = malloc((size_t)s * s)) || fc_image_alloc(&fp->crop[k], s, s)) goto oom;
  }
  return FC_OK;
oom:
  fc_frame_packer_free(fp);
  return fc_error_set(FC_ENOMEM, "out of memory");
}

void fc_frame_packer_free(fc_frame_packer *fp) {
  for (int k = 0; k < FC_PACK_MAX_CROPS; k++) {
    free(fp->mask[k]);
    fc_image_free(&fp->crop[k]);
  }
  free(fp->tmp);
  free(fp->i420);
  memset(fp, 0, sizeof *fp);
}

int fc_frame_packer_add(fc_frame_packer *fp, fc_pack_writer *wr, const fc_image *img, fc_rect box,
                        const fc_point *pts) {
  size_t ysz = (size_t)fp->w * fp->h;
  uint8_t *i420 = fp->i420;
  RAWToI420(img->rgb, img->stride, i420, fp->w, i420 + ysz, fp->w / 2, i420 + ysz + ysz / 4,
            fp->w / 2, fp->w, fp->h);
  fc_pack_frame f = {.i420 = i420, .box = box};
  memcpy(f.landmarks, pts, sizeof f.landmarks);
  for (int k = 0; k < fp->ncrops; k++) {
    fc_image_resize_region(img, f.box, &fp->crop[k]);
    make_mask(f.landmarks, f.box, fp->crop_size[k], fp->mask[k], fp->tmp);
    f.crop[k] = fp->crop[k].rgb, f.mask[k] = fp->mask[k];
  }
  return fc_pack_writer_add_frame(wr, &f);
}

/* Writes the pack from frames that next_frame() yields (the second pass). */
static int write_pack(job *j, const char *path, int (*next_frame)(void *ctx, int i, fc_image *img),
                      void *ctx, fc_image *img, const char *meta) {
  fc_pack_info info = {.width = j->w, .height = j->h, .fps_num = 25, .fps_den = 1,
                       .frames = j->t.n, .ncrops = j->ncrops};
  snprintf(info.id, sizeof info.id, "%s", j->p->id);
  for (int k = 0; k < j->ncrops; k++) info.crop_size[k] = j->crop_size[k];
  fc_frame_packer fp;
  fc_pack_writer *wr = NULL;
  int err = fc_frame_packer_init(&fp, j->w, j->h, j->ncrops, j->crop_size);
  if (err) return err;
  if (!(wr = fc_pack_writer_create(path, &info, meta, &err))) goto done;
  if (j->p->no_replace) fc_pack_writer_no_replace(wr);
  for (int i = 0; i < j->t.n; i++) {
    if (canceled(j)) {
      err = fc_error_set(FC_ECANCELED, "avatar %s: canceled", j->p->id);
      goto done;
    }
    int e = next_frame(ctx, i, img);
    if (e == FC_EEOF) { /* a second decode may end a frame early: repeat the last one */
      if (i == 0) {
        err = fc_error_set(FC_EMEDIA, "%s: no frames on the second pass", j->p->from);
        goto done;
      }
    } else if (e) {
      err = e;
      goto done;
    }
    if ((err = fc_frame_packer_add(&fp, wr, img, crop_box(&j->t, i, j->w, j->h),
                                   j->t.pts + (size_t)i * FC_LANDMARKS)))
      goto done;
    progress(j, 60 + 40 * (i + 1) / j->t.n);
  }
  if (!err && j->nsrc > 0) err = add_clips(j, wr, ctx);
  if (!err) err = fc_pack_writer_finish(wr);
done:
  fc_pack_writer_destroy(wr);
  fc_frame_packer_free(&fp);
  return err;
}

/* The second pass over the sources: frame i comes from the source it was analysed from; each
 * source's decoder is opened when its first frame is due, and a clip's audio is kept (as s16)
 * when its last frame has been read. */
typedef struct reader {
  job *j;
  fc_decoder *d;
  int src;
  int16_t *audio[FC_STUDIO_MAX_CLIPS + 1];
  size_t n_audio[FC_STUDIO_MAX_CLIPS + 1];
} reader;

static int keep_audio(reader *r) {
  fc_audio a;
  int err = fc_decoder_audio(r->d, &a);
  if (err) return err;
  if (a.n && (r->audio[r->src] = malloc(a.n * sizeof(int16_t)))) {
    for (size_t k = 0; k < a.n; k++) {
      float v = a.samples[k] * 32767.0f;
      r->audio[r->src][k] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
    }
    r->n_audio[r->src] = a.n;
  }
  fc_audio_free(&a);
  return FC_OK;
}

static int next_decoded(void *ctx, int i, fc_image *img) {
  reader *r = ctx;
  job *j = r->j;
  int err;
  while (r->src < j->nsrc && i >= j->src_first[r->src + 1]) { /* on to the next source */
    if (r->d) {
      fc_image tmp = {0}; /* drain it to the end so its audio is complete */
      if (fc_image_alloc(&tmp, j->w, j->h)) return fc_error_set(FC_ENOMEM, "out of memory");
      while ((err = fc_decoder_next(r->d, &tmp)) == FC_OK) {}
      fc_image_free(&tmp);
      if (err != FC_EEOF) return err;
      if (r->src > 0 && (err = keep_audio(r))) return err;
      fc_decoder_close(r->d);
      r->d = NULL;
    }
    r->src++;
  }
  if (!r->d) {
    int w, h;
    if (!(r->d = fc_decoder_open(j->src_file[r->src], j->w, j->h, &w, &h, &err))) return err;
  }
  return fc_decoder_next(r->d, img);
}

/* The pack's clips: "idle" over the main video, then each action clip with its audio. */
static int add_clips(job *j, fc_pack_writer *wr, void *ctx) {
  reader *r = ctx;
  int err;
  if (r->d) { /* the last source's audio */
    fc_image tmp = {0};
    if (fc_image_alloc(&tmp, j->w, j->h)) return fc_error_set(FC_ENOMEM, "out of memory");
    while ((err = fc_decoder_next(r->d, &tmp)) == FC_OK) {}
    fc_image_free(&tmp);
    if (err != FC_EEOF) return err;
    if (r->src > 0 && (err = keep_audio(r))) return err;
  }
  fc_pack_clip c = {.name = "idle", .first = 0, .count = j->src_first[1]};
  if ((err = fc_pack_writer_add_clip(wr, &c))) return err;
  for (int k = 1; k < j->nsrc; k++) {
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", j->p->clip_name[k - 1]);
    c.first = j->src_first[k], c.count = j->src_first[k + 1] - j->src_first[k];
    if (r->n_audio[k]) {
      c.audio_rate = FC_SAMPLE_RATE, c.audio_channels = 1;
      c.audio_frames = (int64_t)r->n_audio[k], c.audio = r->audio[k];
    }
    if ((err = fc_pack_writer_add_clip(wr, &c))) return err;
  }
  return FC_OK;
}

static int same_photo(void *ctx, int i, fc_image *img) {
  (void)i;
  const fc_image *src = ctx;
  for (int y = 0; y < src->h; y++)
    memcpy(img->rgb + (size_t)y * img->stride, src->rgb + (size_t)y * src->stride, (size_t)src->w * 3);
  return FC_OK;
}

static void meta_json(const job *j, const char *kind, char *out, size_t n) {
  const fc_quality *q = &j->res->quality;
  const char *base = j->p->name ? j->p->name : strrchr(j->p->from, '/');
  base = j->p->name ? base : base ? base + 1 : j->p->from;
  char src[128];
  size_t o = 0;
  for (const char *c = base; *c && o + 2 < sizeof src; c++) /* a file name, JSON-safe */
    src[o++] = (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) ? '_' : *c;
  src[o] = 0;
  snprintf(out, n,
           "{\"kind\":\"%s\",\"source\":\"%s\",\"created\":%lld,\"quality\":{\"frames\":%d,"
           "\"face_px\":%.0f,\"sharpness\":%.1f,\"luma_mean\":%.1f,\"luma_std\":%.1f,"
           "\"yaw_deg\":%.1f,\"frames_without_face\":%d}}",
           kind, src, (long long)time(NULL), q->frames, q->face_px, q->sharpness, q->luma_mean,
           q->luma_std, q->yaw_deg, q->failed[FC_Q_NO_FACE]);
}

static int run_photo(job *j, const char *path) {
  fc_image src = {0};
  fc_avatar *av = NULL;
  fc_image frame = {0};
  int err = fc_image_load(j->p->from, &src);
  if (err) return err;
  fc_rect face = {0};
  fc_point pts[FC_LANDMARKS];
  /* the gate judges the photo as taken; the pack holds it framed */
  fc_quality_measure(j->m, &src, &j->res->quality, &face, pts);
  fc_quality_finish(&j->res->quality, 1);
  progress(j, 40);
  if (fc_quality_failed(&j->res->quality)) {
    err = fc_error_set(FC_ENOFACE, "%s: refused by the quality gate", j->p->from);
    goto done;
  }
  fc_avatar_params ap = fc_avatar_params_default();
  ap.width = j->p->photo_w, ap.height = j->p->photo_h;
  if (!(av = fc_avatar_create_from_image(j->p->from, &ap, &err))) goto done;
  const fc_image *fr = fc_avatar_frame(av, 0);
  j->w = fr->w, j->h = fr->h;
  fc_quality q2 = {0}; /* the framed picture: its face and points for the crops */
  face = (fc_rect){0};
  if (!fc_quality_measure(j->m, fr, &q2, &face, pts)) {
    err = fc_error_set(FC_ENOFACE, "%s: no face after framing", j->p->from);
    goto done;
  }
  if ((err = track_push(&j->t, 1, face, pts)) || (err = fc_image_alloc(&frame, j->w, j->h))) goto done;
  char meta[768];
  meta_json(j, "photo", meta, sizeof meta);
  err = write_pack(j, path, same_photo, (void *)fr, &frame, meta);
done:
  fc_image_free(&frame);
  fc_image_free(&src);
  fc_avatar_destroy(av);
  return err;
}

static int run_video(job *j, const char *path) {
  fc_decoder *d = NULL;
  fc_image img = {0};
  reader rd = {.j = j};
  int err = FC_OK;
  int max_w = j->p->max_w ? j->p->max_w : 1920, max_h = j->p->max_h ? j->p->max_h : 1080;
  double max_s = j->p->max_seconds > 0 ? j->p->max_seconds : 60;
  int max_frames = (int)(max_s * 25 + 0.5);
  j->nsrc = 1 + j->p->nclips;
  j->src_file[0] = j->p->from;
  for (int k = 0; k < j->p->nclips; k++) j->src_file[k + 1] = j->p->clip_file[k];
  int expect = 0;
  for (int src = 0; src < j->nsrc; src++) {
    int w, h;
    j->src_first[src] = j->t.n;
    if (!(d = fc_decoder_open(j->src_file[src], src ? j->w : max_w, src ? j->h : max_h, &w, &h, &err)))
      goto done;
    if (src == 0) {
      j->w = w, j->h = h;
      if ((err = fc_image_alloc(&img, w, h))) goto done;
    } else if (w != j->w || h != j->h) {
      err = fc_error_set(FC_EINVAL, "%s: clip '%s' is %dx%d at the avatar's scale, the avatar %dx%d: "
                         "clips must have the main video's shape", j->src_file[src],
                         j->p->clip_name[src - 1], w, h, j->w, j->h);
      goto done;
    }
    double dur = fc_decoder_duration(d);
    expect += dur > 0 ? (int)(fmin(dur, max_s) * 25) + 1 : max_frames;
    fc_rect face = {0}; /* each source is tracked on its own */
    fc_point pts[FC_LANDMARKS];
    for (int n = 0; n < max_frames; n++) {
      if (canceled(j)) {
        err = fc_error_set(FC_ECANCELED, "avatar %s: canceled", j->p->id);
        goto done;
      }
      err = fc_decoder_next(d, &img);
      if (err == FC_EEOF) break;
      if (err) goto done;
      int found = fc_quality_measure(j->m, &img, &j->res->quality, &face, pts);
      if ((err = track_push(&j->t, found, face, pts))) {
        err = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
      }
      progress(j, 60 * j->t.n / (expect > j->t.n ? expect : j->t.n + 1));
    }
    err = FC_OK;
    if (j->t.n == j->src_first[src]) {
      err = fc_error_set(FC_EMEDIA, "%s: no video frames", j->src_file[src]);
      goto done;
    }
    fc_decoder_close(d);
    d = NULL;
  }
  j->src_first[j->nsrc] = j->t.n;
  fc_quality_finish(&j->res->quality, 0);
  if (fc_quality_failed(&j->res->quality)) {
    err = fc_error_set(FC_ENOFACE, "%s: refused by the quality gate", j->p->from);
    goto done;
  }
  track_fill(&j->t);
  char meta[768];
  meta_json(j, "video", meta, sizeof meta);
  err = write_pack(j, path, next_decoded, &rd, &img, meta);
done:
  fc_image_free(&img);
  fc_decoder_close(d);
  fc_decoder_close(rd.d);
  for (int k = 0; k <= FC_STUDIO_MAX_CLIPS; k++) free(rd.audio[k]);
  return err;
}

int fc_studio_create(const fc_studio_params *p, fc_studio_result *res) {
  if (!p || !res) return fc_error_set(FC_EINVAL, "avatar: no parameters");
  memset(res, 0, sizeof *res);
  if (!p->from) return fc_error_set(FC_EINVAL, "avatar: no source file (--from)");
  if (!fc_avatar_id_valid(p->id))
    return fc_error_set(FC_EINVAL, "avatar id '%s': use 1-63 letters, digits, '_' or '-'",
                        p->id ? p->id : "");
  if (p->crop_size != 0 && p->crop_size != 96 && p->crop_size != 256)
    return fc_error_set(FC_EINVAL, "avatar: crop size %d: expected 96 or 256", p->crop_size);
  if (access(p->from, R_OK) != 0)
    return fc_error_set(FC_ENOTFOUND, "%s: cannot read the file", p->from);
  if (p->nclips < 0 || p->nclips > FC_STUDIO_MAX_CLIPS)
    return fc_error_set(FC_EINVAL, "avatar: at most %d clips", FC_STUDIO_MAX_CLIPS);
  for (int k = 0; k < p->nclips; k++) {
    const char *n = p->clip_name[k];
    if (!fc_avatar_id_valid(n) || strlen(n) > 31 || strcmp(n, "idle") == 0)
      return fc_error_set(FC_EINVAL, "clip name '%s': use 1-31 letters, digits, '_' or '-' (not 'idle')",
                          n ? n : "");
    for (int q = 0; q < k; q++)
      if (strcmp(n, p->clip_name[q]) == 0) return fc_error_set(FC_EINVAL, "clip '%s' given twice", n);
    if (!p->clip_file[k] || access(p->clip_file[k], R_OK) != 0)
      return fc_error_set(FC_ENOTFOUND, "%s: cannot read the clip file", p->clip_file[k] ? p->clip_file[k] : "");
  }
  if (p->nclips && is_photo(p->from))
    return fc_error_set(FC_EINVAL, "%s: action clips need a video avatar, not a photo", p->from);
  job j = {.p = p, .res = res, .last_pct = -1};
  if (p->crop_size) j.ncrops = 1, j.crop_size[0] = p->crop_size;
  else j.ncrops = 2, j.crop_size[0] = 96, j.crop_size[1] = 256;
  fc_face_models own = {0};
  int err = FC_OK;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!(j.m = p->models)) {
    if ((err = fc_face_models_load(&own))) return err;
    j.m = &own;
  }
  const char *dir = p->out_dir ? p->out_dir : fc_avatar_dir();
  if (fc_studio_mkdirs(dir) != 0) {
    err = fc_error_set(FC_EIO, "%s: cannot create the directory: %s", dir, strerror(errno));
    goto done;
  }
  if (strlen(dir) + strlen(p->id) + 9 > sizeof res->path) {
    err = fc_error_set(FC_EINVAL, "%s: avatar directory path too long", dir);
    goto done;
  }
  snprintf(res->path, sizeof res->path, "%.440s/%.63s.fcpack", dir, p->id);
  if (p->photo_w == 0 && p->photo_h == 0) {
    fc_studio_params q = *p;
    q.photo_w = 512, q.photo_h = 512;
    j.p = &q;
    err = is_photo(p->from) ? run_photo(&j, res->path) : run_video(&j, res->path);
    j.p = p;
  } else {
    err = is_photo(p->from) ? run_photo(&j, res->path) : run_video(&j, res->path);
  }
  res->frames = j.t.n, res->width = j.w, res->height = j.h;
done:
  if (err) res->path[0] = 0;
  else progress(&j, 100);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  res->seconds_taken = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  free(j.t.face);
  free(j.t.pts);
  fc_face_models_free(&own);
  fc_quality_thread_free();
  return err;
}
