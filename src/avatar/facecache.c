/* The face cache (facecache.h): keys from the picture, parameters, model files and build;
 * one fixed-size little-endian record per file, checked whole before anything is taken from
 * it; atomic writes. The layout is in facecache.h. */
#include "avatar/facecache.h"
#include "avatar/pack_internal.h" /* pk_rd32/pk_wr32, pk_crc_of, pk_points_ok */
#include "core/file.h"
#include "facecast/error.h"

#include <glib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VERSION 1
#define OFF_ID 16
#define OFF_SIZES 48
#define OFF_FACE 64
#define OFF_POINTS 80
#define OFF_CRC (FC_FACE_CACHE_BYTES - 4)
_Static_assert(OFF_POINTS + FC_LANDMARKS * 8 == OFF_CRC, "face cache layout");

static const char magic[8] = "FCFACES\n";
static atomic_int n_hits, n_misses, n_writes, n_failures, failure_shown;

/* "label LEN:path SIZE MTIME" or "label LEN:path absent": which file, and which version of it,
 * without reading it. 1 when the file exists. */
static int feed_file(GChecksum *c, const char *label, const char *path) {
  struct stat st;
  int ok = path && stat(path, &st) == 0;
  char *s =
      ok ? g_strdup_printf("%s %zu:%s %lld %lld.%09ld\n", label, strlen(path), path,
                           (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                           (long)st.st_mtim.tv_nsec)
         : g_strdup_printf("%s %zu:%s absent\n", label, path ? strlen(path) : 0, path ? path : "");
  g_checksum_update(c, (const guchar *)s, (gssize)strlen(s));
  g_free(s);
  return ok;
}

void fc_face_key_make(const fc_image *src, const fc_avatar_params *p, const fc_haar_params *hp,
                      const char *cascade, const char *shape_model, fc_face_key *k) {
  memset(k, 0, sizeof *k);
  k->src_w = src->w, k->src_h = src->h, k->out_w = p->width, k->out_h = p->height;
  GChecksum *what = g_checksum_new(G_CHECKSUM_SHA256), *id = g_checksum_new(G_CHECKSUM_SHA256);
  char *s = g_strdup_printf("facecast-face-cache %d\npicture %d %d\navatar %d %d %d\n"
                            "haar %a %d %d %d\n",
                            VERSION, src->w, src->h, p->width, p->height, (int)p->framing,
                            hp->scale_factor, hp->min_neighbors, hp->min_size, hp->max_size);
  g_checksum_update(what, (const guchar *)s, (gssize)strlen(s));
  g_free(s);
  for (int y = 0; y < src->h; y++)
    g_checksum_update(what, src->rgb + (size_t)y * src->stride, (gssize)src->w * 3);
  feed_file(what, "cascade", cascade);
  k->model_present = feed_file(what, "shape-model", shape_model);
  guint8 d[32];
  gsize n = sizeof d;
  g_checksum_get_digest(what, d, &n);
  /* the build: without knowing which program computed the file, no cache at all */
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    g_checksum_update(id, d, (gssize)n);
    if (feed_file(id, "program", exe)) {
      for (int i = 0; i < 16; i++) snprintf(k->name + 2 * i, 3, "%02x", d[i]);
      n = sizeof k->id;
      g_checksum_get_digest(id, k->id, &n);
    }
  }
  g_checksum_free(what);
  g_checksum_free(id);
}

char *fc_face_cache_path(const char *dir, const fc_face_key *k) {
  if (!dir || !*dir || !k->name[0]) return NULL;
  return g_strdup_printf("%s/face-%s.fcface", dir, k->name);
}

static uint32_t f32_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float v;
  memcpy(&v, &u, 4);
  return v;
}

void fc_face_cache_encode(const fc_face_entry *e, uint8_t out[FC_FACE_CACHE_BYTES]) {
  memset(out, 0, FC_FACE_CACHE_BYTES);
  memcpy(out, magic, 8);
  pk_wr32(out + 8, VERSION);
  pk_wr32(out + 12, e->has_landmarks ? 1 : 0);
  memcpy(out + OFF_ID, e->id, 32);
  const int sizes[4] = {e->src_w, e->src_h, e->out_w, e->out_h},
            box[4] = {e->face.x, e->face.y, e->face.w, e->face.h};
  for (int i = 0; i < 4; i++) {
    pk_wr32(out + OFF_SIZES + 4 * i, (uint32_t)sizes[i]);
    pk_wr32(out + OFF_FACE + 4 * i, (uint32_t)box[i]);
  }
  for (int i = 0; e->has_landmarks && i < FC_LANDMARKS; i++) {
    pk_wr32(out + OFF_POINTS + 8 * i, f32_bits(e->landmarks[i].x));
    pk_wr32(out + OFF_POINTS + 8 * i + 4, f32_bits(e->landmarks[i].y));
  }
  pk_wr32(out + OFF_CRC, pk_crc_of(out, OFF_CRC));
}

int fc_face_cache_parse(const uint8_t *b, size_t n, const char *name, fc_face_entry *e) {
  if (n != FC_FACE_CACHE_BYTES)
    return fc_error_set(FC_EFORMAT, "face cache %s: %zu bytes, expected %d", name, n,
                        FC_FACE_CACHE_BYTES);
  if (memcmp(b, magic, 8) != 0)
    return fc_error_set(FC_EFORMAT, "face cache %s: not a face cache file", name);
  if (pk_rd32(b + 8) != VERSION)
    return fc_error_set(FC_EFORMAT, "face cache %s: version %u (this build reads %d)", name,
                        pk_rd32(b + 8), VERSION);
  uint32_t want = pk_rd32(b + OFF_CRC), got = pk_crc_of(b, OFF_CRC);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  want = got; /* let mutated records reach the checks behind it (tests/fuzz) */
#endif
  if (want != got) return fc_error_set(FC_EFORMAT, "face cache %s: fails its CRC check", name);
  uint32_t flags = pk_rd32(b + 12);
  if (flags > 1) return fc_error_set(FC_EFORMAT, "face cache %s: unknown flags 0x%x", name, flags);
  memset(e, 0, sizeof *e);
  memcpy(e->id, b + OFF_ID, 32);
  uint32_t sz[4];
  int32_t box[4];
  for (int i = 0; i < 4; i++) {
    sz[i] = pk_rd32(b + OFF_SIZES + 4 * i);
    box[i] = (int32_t)pk_rd32(b + OFF_FACE + 4 * i);
  }
  if (sz[0] < 1 || sz[1] < 1 || sz[0] > FC_IMAGE_MAX_SIDE || sz[1] > FC_IMAGE_MAX_SIDE ||
      sz[2] < 64 || sz[3] < 64 || sz[2] > 4096 || sz[3] > 4096 || (sz[2] | sz[3]) & 1)
    return fc_error_set(FC_EFORMAT, "face cache %s: sizes %ux%u -> %ux%u out of range", name, sz[0],
                        sz[1], sz[2], sz[3]);
  e->src_w = (int)sz[0], e->src_h = (int)sz[1], e->out_w = (int)sz[2], e->out_h = (int)sz[3];
  e->face = (fc_rect){box[0], box[1], box[2], box[3]};
  if (box[0] < 0 || box[1] < 0 || box[2] < 1 || box[3] < 1 || (int64_t)box[0] + box[2] > e->src_w ||
      (int64_t)box[1] + box[3] > e->src_h)
    return fc_error_set(FC_EFORMAT, "face cache %s: face box %d,%d %dx%d outside the %dx%d picture",
                        name, box[0], box[1], box[2], box[3], e->src_w, e->src_h);
  e->has_landmarks = (int)flags;
  for (int i = 0; i < FC_LANDMARKS; i++) {
    uint32_t x = pk_rd32(b + OFF_POINTS + 8 * i), y = pk_rd32(b + OFF_POINTS + 8 * i + 4);
    if (!flags && (x | y))
      return fc_error_set(FC_EFORMAT, "face cache %s: landmark bytes without landmarks", name);
    e->landmarks[i] = (fc_point){bits_f32(x), bits_f32(y)};
  }
  fc_pack_info frame = {.width = e->out_w, .height = e->out_h};
  char why[160];
  if (flags && !pk_points_ok(e->landmarks, &frame, why, sizeof why))
    return fc_error_set(FC_EFORMAT, "face cache %s: %s", name, why);
  return FC_OK;
}

int fc_face_cache_load(const char *path, const fc_face_key *k, fc_face_entry *e) {
  uint8_t *data = NULL;
  size_t n = 0;
  int hit = fc_file_read(path, FC_FACE_CACHE_BYTES + 1, &data, &n) == FC_OK &&
            fc_face_cache_parse(data, n, path, e) == FC_OK && memcmp(e->id, k->id, 32) == 0 &&
            e->src_w == k->src_w && e->src_h == k->src_h && e->out_w == k->out_w &&
            e->out_h == k->out_h;
  free(data);
  fc_error_clear(); /* a miss is no error of the caller's */
  atomic_fetch_add(hit ? &n_hits : &n_misses, 1);
  return hit;
}

int fc_face_cache_save(const char *path, const fc_face_entry *e) {
  uint8_t rec[FC_FACE_CACHE_BYTES];
  fc_face_cache_encode(e, rec);
  int err = fc_file_replace(path, rec, sizeof rec, "face cache");
  if (err) {
    atomic_fetch_add(&n_failures, 1);
    if (!atomic_exchange(&failure_shown, 1))
      fprintf(stderr, "facecast: %s (not cached; later failures are not shown)\n",
              fc_error_detail(err));
  } else {
    atomic_fetch_add(&n_writes, 1);
  }
  return err;
}

fc_face_cache_stats fc_face_cache_get_stats(void) {
  return (fc_face_cache_stats){atomic_load(&n_hits), atomic_load(&n_misses), atomic_load(&n_writes),
                               atomic_load(&n_failures)};
}
