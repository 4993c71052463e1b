/* LiveTalking avatar folders → avatar packs (see ltimport.h).
 *
 * Everything that can be checked before a frame is decoded is checked first (the folder's
 * parts, coords.pkl, the frame names and counts, face_imgs/' count, the boxes against the first
 * frame's size), so that a folder LiveTalking would mis-play is refused with one line before
 * minutes of work. Frames are then decoded one at a time and streamed into the pack writer
 * (memory stays at a few frames whatever the length); a later failure (an unreadable image)
 * leaves no pack, as the writer only renames its temporary file at the end. */
#include "studio/ltimport.h"
#include "studio/studio_internal.h"
#include "facecast/avatar.h"
#include "facecast/error.h"
#include "modelfile/ltcoords.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MIN_BOX 16 /* px: a smaller box holds no mouth to animate */
#define MAX_ENTRIES (4 * FC_LT_MAX_FRAMES) /* names read from one folder */
#define META_FOLDER_MAX 1000 /* longer folder paths are not recorded (no import cache then) */

int fc_lt_is_avatar_dir(const char *path) {
  char f[4096];
  struct stat st;
  if (!path || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  snprintf(f, sizeof f, "%s/coords.pkl", path);
  return stat(f, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- which names are frames, in which order (pure) ---- */

typedef struct numbered {
  long long num;
  int idx;
} numbered;

static int by_number(const void *a, const void *b) {
  const numbered *x = a, *y = b;
  return x->num < y->num ? -1 : x->num > y->num ? 1 : x->idx - y->idx;
}

int fc_lt_frame_order(const char *const *names, int n, const char *what, int max_frames,
                      int *order, int *count) {
  *count = 0;
  numbered *v = n > 0 ? malloc((size_t)n * sizeof *v) : NULL;
  if (n > 0 && !v) return fc_error_set(FC_ENOMEM, "out of memory");
  int k = 0, err = FC_OK;
  for (int i = 0; i < n; i++) {
    const char *s = names[i];
    /* LiveTalking's glob; like Python's glob, hidden names never match */
    if (!s || s[0] == '.' || fnmatch("*.[jpJP][pnPN]*[gG]", s, 0) != 0) continue;
    const char *dot = strrchr(s, '.');
    size_t len = (size_t)(dot - s);
    long long num = 0;
    int digits = len >= 1 && len <= 18;
    for (size_t c = 0; digits && c < len; c++) {
      if (s[c] < '0' || s[c] > '9') digits = 0;
      else num = num * 10 + (s[c] - '0');
    }
    if (!digits) {
      err = fc_error_set(FC_EFORMAT, "%s/%.200s: the name is not a frame number (LiveTalking "
                         "orders frames by it)", what, s);
      goto done;
    }
    if (k == max_frames) {
      err = fc_error_set(FC_EFORMAT, "%s: more than %d frames", what, max_frames);
      goto done;
    }
    v[k++] = (numbered){num, i};
  }
  if (k > 1) qsort(v, (size_t)k, sizeof *v, by_number);
  for (int i = 0; i < k; i++) {
    if (i > 0 && v[i].num == v[i - 1].num) {
      err = fc_error_set(FC_EFORMAT, "%s: %.200s and %.200s are the same frame number", what,
                         names[v[i - 1].idx], names[v[i].idx]);
      goto done;
    }
    order[i] = v[i].idx;
  }
  *count = k;
done:
  free(v);
  return err;
}

/* ---- the folder ---- */

static void free_names(char **names, int n) {
  for (int i = 0; names && i < n; i++) free(names[i]);
  free(names);
}

/* The frames of dir/sub as full paths, in LiveTalking's order. */
static int list_frames(const char *dir, const char *sub, char ***paths, int *count) {
  char what[4200], **names = NULL, **out = NULL;
  int n = 0, cap = 0, err = FC_OK, *order = NULL;
  *paths = NULL, *count = 0;
  snprintf(what, sizeof what, "%s/%s", dir, sub);
  DIR *d = opendir(what);
  if (!d) return fc_error_set(errno == ENOENT ? FC_ENOTFOUND : FC_EIO, "%s: cannot open the folder: %s",
                              what, strerror(errno));
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (n == MAX_ENTRIES) {
      err = fc_error_set(FC_EINVAL, "%s: more than %d files", what, MAX_ENTRIES);
      goto done;
    }
    if (n == cap) {
      cap = cap ? 2 * cap : 256;
      char **a = realloc(names, (size_t)cap * sizeof *a);
      if (!a) goto oom;
      names = a;
    }
    if (!(names[n] = strdup(e->d_name))) goto oom;
    n++;
  }
  if (n && !(order = malloc((size_t)n * sizeof *order))) goto oom;
  int k = 0;
  if ((err = fc_lt_frame_order((const char *const *)names, n, what, FC_LT_MAX_FRAMES, order, &k)))
    goto done;
  if (k && !(out = calloc((size_t)k, sizeof *out))) goto oom;
  for (int i = 0; i < k; i++) {
    size_t len = strlen(what) + strlen(names[order[i]]) + 2;
    if (!(out[i] = malloc(len))) {
      free_names(out, i);
      out = NULL;
      goto oom;
    }
    snprintf(out[i], len, "%s/%s", what, names[order[i]]);
  }
  *paths = out, *count = k;
  goto done;
oom:
  err = fc_error_set(FC_ENOMEM, "out of memory");
done:
  closedir(d);
  free(order);
  free_names(names, n);
  return err;
}

/* The folder's name (without trailing slashes) into out. */
static void base_name(const char *dir, char *out, size_t n) {
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') len--;
  size_t start = len;
  while (start > 0 && dir[start - 1] != '/') start--;
  snprintf(out, n, "%.*s", (int)(len - start), dir + start);
}

/* A JSON string body: quotes and backslashes escaped, control and non-ASCII bytes as '_' (the
 * pack header must stay valid UTF-8 whatever the file system allows). */
static void json_text(const char *s, char *out, size_t n) {
  size_t o = 0;
  for (; *s && o + 3 < n; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') out[o++] = '\\', out[o++] = (char)c;
    else out[o++] = c < 0x20 || c >= 0x80 ? '_' : (char)c;
  }
  out[o] = 0;
}

/* The "folder" member recorded in the pack's meta ("" when the folder cannot be resolved): the
 * import cache compares it. */
static void folder_member(const char *dir, char *out, size_t n) {
  char real[PATH_MAX], esc[2 * META_FOLDER_MAX + 4];
  out[0] = 0;
  if (!realpath(dir, real) || strlen(real) > META_FOLDER_MAX) return;
  json_text(real, esc, sizeof esc);
  snprintf(out, n, "\"folder\":\"%s\"", esc);
}

/* The 68 points of the face in box: the Haar face whose centre lies in the box (largest), as
 * the studio maps it; else dlib's model on the box less LiveTalking's 10 px pad below. */
static int box_landmarks(const fc_face_models *m, const fc_image *img, uint8_t *gcv, uint8_t *gdl,
                         fc_rect box, fc_point *pts) {
  int w = img->w, h = img->h, found = 0;
  fc_image_to_gray(img, gcv, w);
  int x0 = box.x - box.w / 4, y0 = box.y - box.h / 4;
  int x1 = box.x + box.w + box.w / 4, y1 = box.y + box.h + box.h / 4;
  x0 = x0 < 0 ? 0 : x0, y0 = y0 < 0 ? 0 : y0, x1 = x1 > w ? w : x1, y1 = y1 > h ? h : y1;
  fc_haar_params hp = fc_haar_params_default();
  int side = box.w < box.h ? box.w : box.h, big = box.w > box.h ? box.w : box.h;
  hp.min_size = side * 2 / 5, hp.max_size = big * 13 / 10 + 1;
  fc_rect faces[8], face = {0};
  int nf = x1 - x0 >= 24 && y1 - y0 >= 24
               ? fc_haar_detect(m->haar, gcv + (size_t)y0 * w + x0, x1 - x0, y1 - y0, w, &hp, faces, 8)
               : 0;
  for (int i = 0; i < nf && i < 8 && !found; i++) { /* largest first */
    int cx = x0 + faces[i].x + faces[i].w / 2, cy = y0 + faces[i].y + faces[i].h / 2;
    if (cx >= box.x && cx < box.x + box.w && cy >= box.y && cy < box.y + box.h)
      face = (fc_rect){x0 + faces[i].x, y0 + faces[i].y, faces[i].w, faces[i].h}, found = 1;
  }
  fc_dlib_box db = found ? fc_dlib_box_from_haar(face)
                         : (fc_dlib_box){box.x, box.y, box.x + box.w - 1,
                                         box.y + box.h - 1 - (box.h > 40 ? 10 : 0)};
  fc_rgb_to_gray_dlib(img, gdl);
  int err = fc_shape_predict(m->shape, gdl, w, h, w, db, pts);
  return err ? err : found;
}

static void progress(const fc_lt_import_params *p, int *last, int pct) {
  if (pct != *last && p->progress) p->progress(p->user, pct);
  *last = pct;
}

int fc_lt_import(const fc_lt_import_params *p, fc_lt_import_result *res) {
  if (!p || !res || !p->dir) return fc_error_set(FC_EINVAL, "avatar import: no folder given");
  memset(res, 0, sizeof *res);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const char *dir = p->dir;
  char coords_path[4200], face_dir[4200], folder[2 * META_FOLDER_MAX + 32];
  char **frames = NULL, **faces = NULL;
  int nframes = 0, nfaces = 0, nboxes = 0, last = -1, err = FC_OK;
  fc_lt_box *boxes = NULL;
  fc_face_models own = {0};
  const fc_face_models *models = p->models;
  fc_image img = {0}, face0 = {0};
  fc_frame_packer fp = {0};
  fc_pack_writer *wr = NULL;
  uint8_t *gcv = NULL, *gdl = NULL;
  struct stat st;

  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return fc_error_set(FC_ENOTFOUND, "%s: no such folder", dir);
  if (p->id) snprintf(res->id, sizeof res->id, "%s", p->id);
  else base_name(dir, res->id, sizeof res->id);
  if (!fc_avatar_id_valid(p->id ? p->id : res->id))
    return fc_error_set(FC_EINVAL, "avatar id '%s': use 1-63 letters, digits, '_' or '-' (--id)",
                        p->id ? p->id : res->id);
  if (p->crop_size != 0 && p->crop_size != 96 && p->crop_size != 256)
    return fc_error_set(FC_EINVAL, "avatar import: crop size %d: expected 96 or 256", p->crop_size);
  snprintf(coords_path, sizeof coords_path, "%s/coords.pkl", dir);
  if (stat(coords_path, &st) != 0)
    return fc_error_set(FC_ENOTFOUND, "%s: no coords.pkl (not a LiveTalking wav2lip avatar folder)",
                        dir);
  if ((err = fc_lt_coords_load(coords_path, FC_LT_MAX_FRAMES, &boxes, &nboxes))) goto done;
  if ((err = list_frames(dir, "full_imgs", &frames, &nframes))) goto done;
  if (nframes != nboxes) {
    err = fc_error_set(FC_EFORMAT, "%s: %d frames in full_imgs/ but %d boxes in coords.pkl", dir,
                       nframes, nboxes);
    goto done;
  }
  /* face_imgs/: optional, but when present LiveTalking indexes it with the same numbers */
  snprintf(face_dir, sizeof face_dir, "%s/face_imgs", dir);
  int crop_sizes[FC_PACK_MAX_CROPS] = {96, 256}, ncrops = 2;
  if (stat(face_dir, &st) == 0) {
    if ((err = list_frames(dir, "face_imgs", &faces, &nfaces))) goto done;
    if (nfaces != nboxes) {
      err = fc_error_set(FC_EFORMAT, "%s: %d images in face_imgs/ but %d boxes in coords.pkl", dir,
                         nfaces, nboxes);
      goto done;
    }
    if ((err = fc_image_load(faces[0], &face0))) goto done;
    if (face0.w == face0.h && (face0.w == 96 || face0.w == 256)) crop_sizes[0] = face0.w, ncrops = 1;
  }
  if (p->crop_size) crop_sizes[0] = p->crop_size, ncrops = 1;

  /* the boxes against the first frame's size */
  if ((err = fc_image_load(frames[0], &img))) goto done;
  int W = img.w, H = img.h;
  if (W > FC_LT_MAX_SIDE || H > FC_LT_MAX_SIDE || W < 32 || H < 32) {
    err = fc_error_set(FC_EINVAL, "%s: %dx%d frames: 32..%d px a side are supported", frames[0],
                       W, H, FC_LT_MAX_SIDE);
    goto done;
  }
  int w = W & ~1, h = H & ~1; /* I420 needs even sides: an odd last column or row is dropped */
  for (int i = 0; i < nboxes; i++) {
    fc_lt_box b = boxes[i];
    if (b.x1 < 0 || b.y1 < 0 || b.x2 > W || b.y2 > H || b.x2 - b.x1 < 1 || b.y2 - b.y1 < 1) {
      err = fc_error_set(FC_EFORMAT, "%s: box %d (y1 %d, y2 %d, x1 %d, x2 %d) is empty or outside "
                         "the %dx%d frame", coords_path, i, b.y1, b.y2, b.x1, b.x2, W, H);
      goto done;
    }
    if ((b.x2 > w ? w : b.x2) - b.x1 < MIN_BOX || (b.y2 > h ? h : b.y2) - b.y1 < MIN_BOX) {
      err = fc_error_set(FC_EFORMAT, "%s: box %d (y1 %d, y2 %d, x1 %d, x2 %d) is smaller than "
                         "%d px", coords_path, i, b.y1, b.y2, b.x1, b.x2, MIN_BOX);
      goto done;
    }
  }

  if (!models) {
    if ((err = fc_face_models_load(&own))) goto done;
    models = &own;
  }
  const char *out_dir = p->out_dir ? p->out_dir : fc_avatar_dir();
  if (fc_studio_mkdirs(out_dir) != 0) {
    err = fc_error_set(FC_EIO, "%s: cannot create the folder: %s", out_dir, strerror(errno));
    goto done;
  }
  if (strlen(out_dir) > 440) {
    err = fc_error_set(FC_EINVAL, "%s: avatar folder path too long", out_dir);
    goto done;
  }
  snprintf(res->path, sizeof res->path, "%s/%s.fcpack", out_dir, res->id);
  fc_pack_info info = {.width = w, .height = h, .fps_num = 25, .fps_den = 1, .frames = nboxes,
                       .ncrops = ncrops};
  snprintf(info.id, sizeof info.id, "%s", res->id);
  for (int k = 0; k < ncrops; k++) info.crop_size[k] = crop_sizes[k];
  char meta[2 * META_FOLDER_MAX + 256], src[128], name[128];
  base_name(dir, name, sizeof name);
  json_text(name, src, sizeof src);
  folder_member(dir, folder, sizeof folder);
  snprintf(meta, sizeof meta, "{\"kind\":\"livetalking\",\"source\":\"%s\"%s%s,\"created\":%lld}",
           src, folder[0] ? "," : "", folder, (long long)time(NULL));
  if ((err = fc_frame_packer_init(&fp, w, h, ncrops, crop_sizes))) goto done;
  gcv = malloc((size_t)W * H), gdl = malloc((size_t)W * H);
  if (!gcv || !gdl) {
    err = fc_error_set(FC_ENOMEM, "out of memory");
    goto done;
  }
  if (!(wr = fc_pack_writer_create(res->path, &info, meta, &err))) goto done;
  progress(p, &last, 0);
  for (int i = 0; i < nboxes; i++) {
    if (i > 0) {
      fc_image_free(&img);
      if ((err = fc_image_load(frames[i], &img))) goto done;
      if (img.w != W || img.h != H) {
        err = fc_error_set(FC_EFORMAT, "%s: %dx%d, but %s is %dx%d: the frames differ in size",
                           frames[i], img.w, img.h, frames[0], W, H);
        goto done;
      }
    }
    fc_lt_box b = boxes[i];
    fc_rect box = {b.x1, b.y1, (b.x2 > w ? w : b.x2) - b.x1, (b.y2 > h ? h : b.y2) - b.y1};
    fc_point pts[FC_LANDMARKS];
    int found = box_landmarks(models, &img, gcv, gdl, box, pts);
    if (found < 0) {
      err = found;
      goto done;
    }
    res->detected += found;
    if ((err = fc_frame_packer_add(&fp, wr, &img, box, pts))) goto done;
    progress(p, &last, 100 * (i + 1) / nboxes);
  }
  if ((err = fc_pack_writer_finish(wr))) goto done;
  res->frames = nboxes, res->width = w, res->height = h;
done:
  if (err) res->path[0] = 0;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  res->seconds_taken = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  fc_pack_writer_destroy(wr);
  fc_frame_packer_free(&fp);
  free(gcv);
  free(gdl);
  fc_image_free(&img);
  fc_image_free(&face0);
  free_names(frames, nframes);
  free_names(faces, nfaces);
  free(boxes);
  fc_face_models_free(&own);
  return err;
}

/* ---- serve --avatar DIR ---- */

/* The newest change to the folder's parts (coords.pkl, the image folders' listings). */
static time_t folder_changed(const char *dir) {
  static const char *const parts[] = {"coords.pkl", "full_imgs", "face_imgs", ""};
  time_t t = 0;
  char f[4200];
  struct stat st;
  for (int k = 0; k < 4; k++) {
    snprintf(f, sizeof f, "%.4000s/%s", dir, parts[k]);
    if (stat(f, &st) == 0 && st.st_mtime > t) t = st.st_mtime;
  }
  return t;
}

int fc_lt_avatar_resolve(const char *arg, const fc_lt_import_params *how, char *id, size_t n,
                         int *imported) {
  char dir[4200], pack[4200], want[2 * META_FOLDER_MAX + 32];
  *imported = 0;
  if (!arg || !*arg) return 0;
  const char *store = how && how->out_dir ? how->out_dir : fc_avatar_dir();
  int by_path = fc_lt_is_avatar_dir(arg);
  struct stat st;
  if (by_path) {
    snprintf(dir, sizeof dir, "%s", arg);
  } else {
    /* an id: its pack first (the store's rule), else LiveTalking's folder of that name */
    if (!fc_avatar_id_valid(arg)) return 0;
    snprintf(dir, sizeof dir, "%s/%s", store, arg);
    if (!fc_lt_is_avatar_dir(dir)) return 0;
  }
  char name[128];
  base_name(dir, name, sizeof name);
  if (!fc_avatar_id_valid(name))
    return fc_error_set(FC_EINVAL, "%s: the folder's name is no avatar id (1-63 letters, digits, "
                        "'_' or '-'): import it with facecast avatar import DIR --id NAME", dir);
  if (strlen(name) >= n) return fc_error_set(FC_EINVAL, "avatar id '%s' too long", name);
  snprintf(pack, sizeof pack, "%s/%s.fcpack", store, name);
  if (stat(pack, &st) == 0) {
    int err = FC_OK;
    fc_pack *pk = fc_pack_open(pack, &err);
    folder_member(dir, want, sizeof want);
    int same = pk && want[0] && strstr(fc_pack_meta_json(pk), want) != NULL;
    fc_pack_close(pk);
    if (!same && !by_path) return 0; /* the id's own pack wins, as before */
    if (!same)
      return fc_error_set(FC_EINVAL, "%s: avatar '%s' exists and was not imported from this folder: "
                          "import it under another id (facecast avatar import DIR --id NAME)",
                          dir, name);
    if (st.st_mtime >= folder_changed(dir)) {
      snprintf(id, n, "%s", name);
      return 1;
    }
  }
  fc_lt_import_params q = how ? *how : (fc_lt_import_params){0};
  q.dir = dir, q.id = name, q.out_dir = store;
  fc_lt_import_result res;
  int err = fc_lt_import(&q, &res);
  if (err) return err;
  snprintf(id, n, "%s", name);
  *imported = 1;
  return 1;
}
