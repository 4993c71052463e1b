/* Avatar packs: the streaming writer and the memory-mapped reader (include/facecast/pack.h says
 * what a pack holds and why it is mapped).
 *
 * On-disk layout, version 2. Integers are little-endian; the reader hands out the s16 audio and
 * reads the i32 boxes and f32 landmarks in place, so big-endian builds are refused below.
 *
 *   offset     bytes   field
 *   0          8       magic "FCAVPACK"
 *   8          4       u32 format version (2; 1 and anything larger are FC_EUNSUPPORTED)
 *   12         4       u32 flags (version 2 defines none: must be 0)
 *   16         8       u64 J, the length of the JSON header
 *   24         J       the JSON header (UTF-8)
 *   T          8       u32 section count n, u32 zero              T = 24 + J rounded up to 8
 *   T + 8      40 n    section table: char name[16] (NUL-padded), u64 offset, u64 size,
 *                      u32 CRC-32 of the section, u32 zero
 *   E          4       u32 CRC-32 of bytes [0, E)                 E = T + 8 + 40 n
 *   E + 4              zeros up to the first section
 *
 * The sections follow in this order, each at a multiple of 4096 (bulk data starts on a page and
 * every typed array is aligned), none overlapping, zeros between them, the file ending exactly
 * where the last one ends (an empty section still has an aligned offset):
 *
 *   tiles      tiles x 6144                64x64 Y, then 32x32 U, then 32x32 V, row by row
 *   tilemap    stored_frames x TX*TY x 4   u32 tile per tile position, row by row of tiles
 *   index      frames x 8                  u32 stored frame, u32 stored face, per frame
 *   boxes      frames x 16                 i32 x, y, w, h (fc_rect)
 *   landmarks  frames x 68 x 8             f32 x, y (fc_point)
 *   crop<k>    stored_faces x S_k^2 x 3    RGB crops at crop size k (k = 0, 1 as there are sizes)
 *   mask<k>    stored_faces x S_k^2        8-bit blend masks at crop size k
 *   audio      sum of clip frames x channels x 2   s16 interleaved, the clips' audio in order
 *
 * TX = ceil(W / 64), TY = ceil(H / 64). Tile (tx, ty) covers luma [64 tx, 64 tx + 64) x
 * [64 ty, 64 ty + 64) and chroma [32 tx, ...) x [32 ty, ...); the parts past the frame's right
 * and bottom edges are zeros (W and H are even, so a chroma tile covers exactly half its luma
 * tile's pixels).
 *
 * The JSON header (every field required, no others):
 *   {"id":"me","width":1920,"height":1080,"fps_num":25,"fps_den":1,"frames":250,
 *    "stored_frames":250,"stored_faces":250,"tile_size":64,"tiles":21400,"crops":[96,256],
 *    "clips":[{"name":"idle","first":0,"count":250,"audio":null},
 *             {"name":"wave","first":10,"count":50,"audio":{"rate":16000,"channels":1,
 *              "frames":32000}}],
 *    "meta":{...}}
 *
 * Deduplication, tiles: the writer compares each tile of a frame with the tile the previous
 * frame shows at the same position (the shown one, not the previous source frame's: errors
 * cannot accumulate) and reuses it when the two are equal or nearly so: every sample within
 * NEAR_MAX = 2 levels and the mean absolute difference at most 0.5 (over the samples inside the
 * frame). Encoders leave skipped blocks of a static scene exactly equal; near-equality catches
 * the noise of re-coded ones (a static background at CRF 18 flickers by 1-2 levels). 2 of 255
 * levels is under what the eye tells apart, and the mean bound keeps a real change of a whole
 * area (a fade, a shadow: every sample off by 1) from being dropped: such a tile is stored.
 * A new tile gets the next tile number, so each table entry is either the previous table's
 * entry at that position or the next new tile, and the first table is 0, 1, 2, ...; the
 * reader checks exactly that (and so that every index is below the tile count).
 *
 * Deduplication, frames: a frame all of whose tiles are reused is not stored again; its index
 * entry names the previous stored frame (tile table), as for a photo avatar's 250 identical
 * frames. Its crops and masks (the "face") are deduplicated the same way on their own, exactly:
 * a still face has identical crops even where the frame changes, and the reverse. Index
 * entries therefore start at 0, advance by 0 or 1 from frame to frame and end at stored - 1,
 * which the reader checks exactly; a stored table after the first holds at least one new tile.
 *
 * Writing streams: tiles go straight into a temporary file beside the target
 * (PATH.tmp.XXXXXX), after room reserved for the header (whose size is bounded when writing
 * starts: names are short, clips at most 32, meta is known); every other section streams into
 * its own temporary file in the same directory, unlinked at once so a crash leaves nothing, and
 * finish() copies it into place, writes the header, fsyncs and renames. CRCs are computed as
 * the bytes go out. Memory: the tiles shown at each position (one frame), one tile being
 * compared, and the last stored face.
 *
 * Reading validates before handing anything out: magic, version, flags, the header's CRC, the
 * JSON (types and ranges), that each section lies inside the file with exactly the size the
 * header implies, the CRCs and contents of the small sections (tile tables, index, boxes,
 * landmarks). The bulk sections are checked by fc_pack_verify() only, since that reads the
 * whole file. After open, accessors allocate nothing and are safe from any thread; a frame is
 * assembled by a memcpy per tile row. The file must not be truncated while mapped (a read past
 * its new end raises SIGBUS); the writer never does that, it renames a new file into place.
 *
 * Memory: a 10 s 1080p avatar with every tile changing would be 250 x 510 tiles x 6 KB = 783 MB;
 * a presenter video (static background and body) stores the first frame (3.1 MB) and what
 * moves. Mapped MAP_SHARED, those pages exist once in the page cache however many processes
 * and sessions use the avatar, and they are clean file pages: under memory pressure the kernel
 * drops and later re-reads them instead of swapping. Each process's Rss counts the pages it has
 * touched, but its Pss (its share) is Rss divided by the sharers. The tile tables are copied
 * privately at open (2 KB a stored frame at 1080p), since they become addresses.
 * Access advice: the mapping keeps MADV_NORMAL: with whole frames (version 1) MADV_RANDOM
 * turned a cold frame into ~760 single-page reads, and MADV_SEQUENTIAL was no faster and would
 * let reclaim ignore the accesses of a hot, shared avatar. fc_pack_verify() reads every byte
 * once through a mapping of its own with MADV_SEQUENTIAL (further read-ahead; unmapped
 * afterwards, so the caller's Rss is unchanged). Figures: docs/BENCHMARKS.md, from `facecast
 * bench pack`.
 */
#include "facecast/pack.h"
#include "facecast/error.h"

#include <errno.h>
#include <fcntl.h>
#include <json-glib/json-glib.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "avatar packs are read in place as little-endian data"
#endif
_Static_assert(sizeof(fc_point) == 8, "fc_point is stored as two f32");
_Static_assert(sizeof(fc_rect) == 16, "fc_rect is stored as four i32");

enum {
  PAGE = 4096,
  FIXED = 24,                /* magic, version, flags, JSON length */
  ENTRY = 40,                /* one section table entry */
  NAME_LEN = 16,             /* a section name, NUL-padded */
  MAX_JSON = 16 << 20,       /* the JSON header's length limit */
  MAX_DEPTH = 32,            /* JSON nesting limit (json-glib recurses per level) */
  MAX_FRAMES = 1000000,
  MAX_DIM = 8192,
  MIN_CROP = 16,
  MAX_CROP = 1024,
  MAX_FPS_TERM = 1000000,    /* fps_num and fps_den: 30000/1001 fits */
  MAX_AUDIO_RATE = 384000,
  MAX_AUDIO_CHANNELS = 8,
  LM_BYTES = FC_LANDMARKS * 8,
  /* Upper bounds of the JSON the writer produces, for the header reservation: the fixed fields
   * with the longest id and numbers come to under 400 bytes, one clip to under 170. */
  JSON_FIXED_MAX = 512,
  JSON_CLIP_MAX = 192,
  COPY_CHUNK = 1 << 20,
  TILE = FC_PACK_TILE,       /* luma tile side */
  CTILE = TILE / 2,          /* chroma tile side */
  TILE_Y = TILE * TILE,      /* bytes of a tile's Y plane */
  TILE_C = CTILE * CTILE,    /* bytes of each chroma plane */
  TILE_BYTES = TILE_Y + 2 * TILE_C,
  NEAR_MAX = 2,              /* near-equal tiles: no sample differs by more than this, */
  /* and the summed absolute difference is at most half the samples (a mean of 0.5) */
};
#define MAX_AUDIO_FRAMES (1ll << 40) /* per clip: keeps the byte counts far below 2^63 */

static const char magic[8] = {'F', 'C', 'A', 'V', 'P', 'A', 'C', 'K'};

/* Sections in file and table order. */
enum { S_TILES, S_TILEMAP, S_INDEX, S_BOXES, S_LANDMARKS, S_CROP0, S_MASK0, S_CROP1, S_MASK1,
       S_AUDIO, S_COUNT };
static const char *const sec_name[S_COUNT] = {"tiles", "tilemap", "index", "boxes",
                                              "landmarks", "crop0", "mask0", "crop1",
                                              "mask1", "audio"};

static int sec_present(int s, int ncrops) {
  return s < S_CROP0 || s == S_AUDIO || (s - S_CROP0) / 2 < ncrops;
}

static int sec_count(int ncrops) {
  int n = 0;
  for (int s = 0; s < S_COUNT; s++) n += sec_present(s, ncrops);
  return n;
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static void wr64(uint8_t *p, uint64_t v) {
  wr32(p, (uint32_t)v);
  wr32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t crc_of(const uint8_t *p, uint64_t n) {
  return (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), p, (z_size_t)n);
}

/* ---- rules shared by the writer (FC_EINVAL) and the reader (FC_EFORMAT) ----
 * Each returns 1 when the value is acceptable, else 0 with what is wrong written to why. */

static int name_ok(const char *s, size_t max) {
  size_t n = strnlen(s, max + 1);
  if (n == 0 || n > max) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '-'))
      return 0;
  }
  return 1;
}

static int info_ok(const fc_pack_info *in, char *why, size_t n) {
  if (!name_ok(in->id, sizeof in->id - 1))
    snprintf(why, n, "id must be 1..63 characters of [A-Za-z0-9_-]");
  else if (in->width < 2 || in->width > MAX_DIM || in->width % 2)
    snprintf(why, n, "width %d is not an even number in 2..%d", in->width, MAX_DIM);
  else if (in->height < 2 || in->height > MAX_DIM || in->height % 2)
    snprintf(why, n, "height %d is not an even number in 2..%d", in->height, MAX_DIM);
  else if (in->fps_num < 1 || in->fps_num > MAX_FPS_TERM || in->fps_den < 1 ||
           in->fps_den > MAX_FPS_TERM)
    snprintf(why, n, "fps %d/%d: both terms must be in 1..%d", in->fps_num, in->fps_den,
             MAX_FPS_TERM);
  else if (in->frames < 1 || in->frames > MAX_FRAMES)
    snprintf(why, n, "frames %d is not in 1..%d", in->frames, MAX_FRAMES);
  else if (in->ncrops < 0 || in->ncrops > FC_PACK_MAX_CROPS)
    snprintf(why, n, "%d crop sizes (at most %d)", in->ncrops, FC_PACK_MAX_CROPS);
  else {
    for (int k = 0; k < in->ncrops; k++) {
      if (in->crop_size[k] < MIN_CROP || in->crop_size[k] > MAX_CROP) {
        snprintf(why, n, "crop size %d is not in %d..%d", in->crop_size[k], MIN_CROP, MAX_CROP);
        return 0;
      }
      if (k > 0 && in->crop_size[k] == in->crop_size[0]) {
        snprintf(why, n, "crop size %d appears twice", in->crop_size[k]);
        return 0;
      }
    }
    return 1;
  }
  return 0;
}

/* A padded face box may reach past the frame, but not absurdly far: boxes and points stay
 * within four frame sizes of it, which keeps every consumer's integer arithmetic far from
 * overflow. */
static int reach_ok(double v, const fc_pack_info *in) {
  double m = in->width > in->height ? in->width : in->height;
  return v >= -4 * m && v <= 5 * m;
}

static int box_ok(fc_rect b, const fc_pack_info *in, char *why, size_t n) {
  if (b.w < 1 || b.h < 1 || !reach_ok(b.x, in) || !reach_ok(b.y, in) ||
      !reach_ok((double)b.x + b.w, in) || !reach_ok((double)b.y + b.h, in)) {
    snprintf(why, n, "face box %d,%d %dx%d is empty or far outside the %dx%d frame", b.x, b.y,
             b.w, b.h, in->width, in->height);
    return 0;
  }
  return 1;
}

static int points_ok(const fc_point *p, const fc_pack_info *in, char *why, size_t n) {
  for (int k = 0; k < FC_LANDMARKS; k++)
    if (!isfinite(p[k].x) || !isfinite(p[k].y) || !reach_ok(p[k].x, in) || !reach_ok(p[k].y, in)) {
      snprintf(why, n, "landmark %d (%g, %g) is not finite or far outside the frame", k,
               (double)p[k].x, (double)p[k].y);
      return 0;
    }
  return 1;
}

/* The clip on its own, and against the clips before it (names unique). */
static int clip_ok(const fc_pack_clip *c, const fc_pack_clip *prev, int nprev, int frames,
                   char *why, size_t n) {
  if (!name_ok(c->name, sizeof c->name - 1)) {
    snprintf(why, n, "clip name must be 1..31 characters of [A-Za-z0-9_-]");
    return 0;
  }
  for (int k = 0; k < nprev; k++)
    if (strcmp(prev[k].name, c->name) == 0) {
      snprintf(why, n, "clip '%s' appears twice", c->name);
      return 0;
    }
  if (c->first < 0 || c->count < 1 || (int64_t)c->first + c->count > frames)
    snprintf(why, n, "clip '%s' (frames %d + %d) does not lie inside the %d frames", c->name,
             c->first, c->count, frames);
  else if (c->audio_rate == 0 && c->audio_channels == 0 && c->audio_frames == 0)
    return 1;
  else if (c->audio_rate < 1 || c->audio_rate > MAX_AUDIO_RATE || c->audio_channels < 1 ||
           c->audio_channels > MAX_AUDIO_CHANNELS || c->audio_frames < 1 ||
           c->audio_frames > MAX_AUDIO_FRAMES)
    snprintf(why, n, "clip '%s': audio %d Hz x %d channels x %lld frames is out of range (or "
             "0, 0, 0 for none)", c->name, c->audio_rate, c->audio_channels,
             (long long)c->audio_frames);
  else
    return 1;
  return 0;
}

static uint64_t clip_audio_bytes(const fc_pack_clip *c) {
  return (uint64_t)c->audio_frames * (uint64_t)c->audio_channels * 2;
}

static int tiles_x(const fc_pack_info *in) { return (in->width + TILE - 1) / TILE; }
static int tiles_y(const fc_pack_info *in) { return (in->height + TILE - 1) / TILE; }
/* Tile positions per frame: at most 128 x 128 (MAX_DIM 8192). */
static int tiles_per_frame(const fc_pack_info *in) { return tiles_x(in) * tiles_y(in); }

/* Bytes per stored item of a per-item section (the audio section has none). */
static uint64_t item_bytes(const fc_pack_info *in, int s) {
  switch (s) {
  case S_TILES: return TILE_BYTES;
  case S_TILEMAP: return (uint64_t)tiles_per_frame(in) * 4;
  case S_INDEX: return 8;
  case S_BOXES: return sizeof(fc_rect);
  case S_LANDMARKS: return LM_BYTES;
  case S_CROP0: case S_CROP1: {
    uint64_t c = (uint64_t)in->crop_size[(s - S_CROP0) / 2];
    return c * c * 3;
  }
  case S_MASK0: case S_MASK1: {
    uint64_t c = (uint64_t)in->crop_size[(s - S_CROP0) / 2];
    return c * c;
  }
  default: return 0;
  }
}

/* json-glib recurses once per nesting level (100,000 levels overflow the stack) and reads a
 * "\u0000" escape as the end of the string; both are refused before it sees the text. */
static const char *json_prescan(const char *s, size_t n) {
  int depth = 0, in_str = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (in_str) {
      if (c == '\\') {
        if (n - i > 5 && memcmp(s + i + 1, "u0000", 5) == 0) return "holds a \\u0000 escape";
        i++;
      } else if (c == '"') {
        in_str = 0;
      }
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '{' || c == '[') {
      if (++depth > MAX_DEPTH) return "nests deeper than 32 levels";
    } else if (c == '}' || c == ']') {
      depth--;
    }
  }
  return NULL;
}

/* Parses JSON text that must be an object. Returns the parser (owner of *root) or NULL with a
 * reason in why. json-glib is lenient in ways that do not matter here (it keeps the last of
 * duplicate keys, takes comments and single quotes): the header's CRC is what refuses a
 * damaged header, and every field is then checked for type and range. */
static JsonParser *json_object_parse(const char *s, size_t n, JsonNode **root, char *why,
                                     size_t wn) {
  const char *bad = NULL;
  if (!g_utf8_validate(s, (gssize)n, NULL)) bad = "is not UTF-8 (or holds a NUL byte)";
  else bad = json_prescan(s, n);
  if (bad) {
    snprintf(why, wn, "%s", bad);
    return NULL;
  }
  JsonParser *jp = json_parser_new();
  GError *e = NULL;
  if (!json_parser_load_from_data(jp, s, (gssize)n, &e)) {
    snprintf(why, wn, "does not parse (%s)", e ? e->message : "?");
    if (e) g_error_free(e);
    g_object_unref(jp);
    return NULL;
  }
  *root = json_parser_get_root(jp);
  if (!*root || !JSON_NODE_HOLDS_OBJECT(*root)) {
    snprintf(why, wn, "is not a JSON object");
    g_object_unref(jp);
    return NULL;
  }
  return jp;
}

/* ---- writer ---- */

/* One section being written: appended at fd's offset base + size, CRC kept as it grows. */
typedef struct spool {
  int fd; /* -1: section absent */
  uint64_t base, size;
  uint32_t crc;
} spool;

struct fc_pack_writer {
  char *path;
  char *tmp;      /* the temporary file's path until it is renamed (NULL after) */
  int fd;         /* the temporary file: header reservation, then the tiles */
  spool sp[S_COUNT]; /* sp[S_TILES].fd is fd; the others own an unlinked file each */
  fc_pack_info info;
  char *meta;     /* the meta object as compact JSON (g_malloc'd) */
  uint64_t reserve; /* bytes before the tiles section */
  int ntiles;     /* tile positions per frame */
  uint8_t *shown; /* ntiles x TILE_BYTES: the stored tile each position shows now */
  uint32_t *shown_idx; /* ntiles: its number; the last stored tile table */
  uint8_t *cur;   /* TILE_BYTES: the tile being compared */
  uint64_t tiles; /* tiles stored */
  uint8_t *last_face; /* the last stored face (crops, then masks) */
  int added, stored_frames, stored_faces;
  int nclips;
  fc_pack_clip clips[FC_PACK_MAX_CLIPS]; /* audio pointers cleared: the samples are spooled */
  int failed;     /* a write failed: the spools are inconsistent, every later call fails */
  int finished;
};

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
  const uint8_t *p = buf;
  while (n) {
    ssize_t r = pwrite(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) errno = EIO;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

static int spool_put(fc_pack_writer *w, int s, const void *data, size_t n) {
  spool *sp = &w->sp[s];
  if (pwrite_all(sp->fd, data, n, sp->base + sp->size) != 0) {
    w->failed = fc_error_set(FC_EIO, "pack %s: writing section '%s' failed: %s", w->path,
                             sec_name[s], strerror(errno));
    return w->failed;
  }
  sp->crc = (uint32_t)crc32_z(sp->crc, data, (z_size_t)n);
  sp->size += n;
  return FC_OK;
}

/* A temporary file beside the target, unlinked at once: it is only a spool. */
static int spool_open(fc_pack_writer *w, int s) {
  size_t len = strlen(w->path) + 16;
  char *t = malloc(len);
  if (!t) return fc_error_set(FC_ENOMEM, "pack %s: out of memory", w->path);
  snprintf(t, len, "%s.spool.XXXXXX", w->path);
  int fd = mkostemp(t, O_CLOEXEC);
  int e = errno;
  if (fd >= 0) unlink(t);
  free(t);
  if (fd < 0)
    return fc_error_set(FC_EIO, "pack %s: cannot create a temporary file beside it: %s",
                        w->path, strerror(e));
  w->sp[s] = (spool){.fd = fd, .crc = crc_of(NULL, 0)};
  return FC_OK;
}

void fc_pack_writer_destroy(fc_pack_writer *w) {
  if (!w) return;
  for (int s = S_TILEMAP; s < S_COUNT; s++)
    if (w->sp[s].fd >= 0) close(w->sp[s].fd);
  if (w->fd >= 0) close(w->fd);
  if (w->tmp) unlink(w->tmp);
  free(w->tmp);
  free(w->path);
  g_free(w->meta);
  free(w->shown);
  free(w->shown_idx);
  free(w->cur);
  free(w->last_face);
  free(w);
}

/* The compact text of the caller's meta object ("{}" for NULL). */
static int meta_text(const char *path, const char *meta_json, char **out) {
  if (!meta_json) {
    *out = g_strdup("{}");
    return FC_OK;
  }
  char why[160];
  JsonNode *root;
  JsonParser *jp = json_object_parse(meta_json, strlen(meta_json), &root, why, sizeof why);
  if (!jp) return fc_error_set(FC_EINVAL, "pack %s: meta %s", path, why);
  *out = json_to_string(root, FALSE);
  g_object_unref(jp);
  return FC_OK;
}

static uint64_t face_bytes(const fc_pack_info *in) {
  uint64_t n = 0;
  for (int s = S_CROP0; s <= S_MASK1; s++)
    if (sec_present(s, in->ncrops)) n += item_bytes(in, s);
  return n;
}

fc_pack_writer *fc_pack_writer_create(const char *path, const fc_pack_info *info,
                                      const char *meta_json, int *err_out) {
  int err = FC_OK;
  fc_pack_writer *w = NULL;
  char why[200];
  if (!path || !path[0] || !info) {
    err = fc_error_set(FC_EINVAL, "pack writer: no path or info");
    goto fail;
  }
  if (!info_ok(info, why, sizeof why)) {
    err = fc_error_set(FC_EINVAL, "pack %s: %s", path, why);
    goto fail;
  }
  w = calloc(1, sizeof *w);
  if (!w) {
    err = fc_error_set(FC_ENOMEM, "pack %s: out of memory", path);
    goto fail;
  }
  w->fd = -1;
  for (int s = 0; s < S_COUNT; s++) w->sp[s].fd = -1;
  w->info = *info;
  for (int k = info->ncrops; k < FC_PACK_MAX_CROPS; k++) w->info.crop_size[k] = 0;
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 16);
  w->path = strdup(path);
  w->ntiles = tiles_per_frame(info);
  w->shown = malloc((size_t)w->ntiles * TILE_BYTES);
  w->shown_idx = malloc((size_t)w->ntiles * sizeof *w->shown_idx);
  w->cur = malloc(TILE_BYTES);
  w->last_face = malloc(face_bytes(info) + 1);
  if (!tmp || !w->path || !w->shown || !w->shown_idx || !w->cur || !w->last_face) {
    free(tmp);
    err = fc_error_set(FC_ENOMEM, "pack %s: out of memory", path);
    goto fail;
  }
  if ((err = meta_text(path, meta_json, &w->meta))) {
    free(tmp);
    goto fail;
  }
  snprintf(tmp, plen + 16, "%s.tmp.XXXXXX", path);
  w->fd = mkostemp(tmp, O_CLOEXEC);
  if (w->fd < 0) {
    err = fc_error_set(FC_EIO, "pack %s: cannot create a temporary file beside it: %s", path,
                       strerror(errno));
    free(tmp);
    goto fail;
  }
  w->tmp = tmp; /* from here on, destroy() removes it unless finish() renamed it */
  /* mkstemp's 0600 would keep other users' server processes out of a shared avatar. */
  if (fchmod(w->fd, 0644) != 0) {
    err = fc_error_set(FC_EIO, "pack %s: chmod of the temporary file failed: %s", path,
                       strerror(errno));
    goto fail;
  }
  int nsec = sec_count(info->ncrops);
  uint64_t bound = FIXED + JSON_FIXED_MAX + (uint64_t)FC_PACK_MAX_CLIPS * JSON_CLIP_MAX +
                   strlen(w->meta) + 8 + 8 + (uint64_t)nsec * ENTRY + 4;
  w->reserve = align_up(bound, PAGE);
  w->sp[S_TILES] = (spool){.fd = w->fd, .base = w->reserve, .crc = crc_of(NULL, 0)};
  for (int s = S_TILEMAP; s < S_COUNT; s++)
    if (sec_present(s, info->ncrops) && (err = spool_open(w, s))) goto fail;
  if (err_out) *err_out = FC_OK;
  return w;
fail:
  fc_pack_writer_destroy(w);
  if (err_out) *err_out = err;
  return NULL;
}

/* 1 if frame f's crops and masks equal the last stored face. */
static int same_face(const fc_pack_writer *w, const fc_pack_frame *f) {
  const uint8_t *p = w->last_face;
  for (int s = S_CROP0; s <= S_MASK1; s++) {
    if (!sec_present(s, w->info.ncrops)) continue;
    int k = (s - S_CROP0) / 2;
    const uint8_t *src = (s - S_CROP0) % 2 == 0 ? f->crop[k] : f->mask[k];
    size_t n = (size_t)item_bytes(&w->info, s);
    if (memcmp(p, src, n) != 0) return 0;
    p += n;
  }
  return 1;
}

static int put_face(fc_pack_writer *w, const fc_pack_frame *f) {
  uint8_t *p = w->last_face;
  for (int s = S_CROP0; s <= S_MASK1; s++) {
    if (!sec_present(s, w->info.ncrops)) continue;
    int k = (s - S_CROP0) / 2;
    const uint8_t *src = (s - S_CROP0) % 2 == 0 ? f->crop[k] : f->mask[k];
    size_t n = (size_t)item_bytes(&w->info, s);
    int err = spool_put(w, s, src, n);
    if (err) return err;
    memcpy(p, src, n);
    p += n;
  }
  return FC_OK;
}

/* Cuts tile t of an I420 frame into tile (Y, U, V planes of TILE_BYTES), zeros past the
 * frame's edges. Returns the samples inside the frame. */
static int cut_tile(const fc_pack_info *in, const uint8_t *i420, int t, uint8_t *tile) {
  int tx = t % tiles_x(in), ty = t / tiles_x(in);
  int x0 = tx * TILE, y0 = ty * TILE, w = in->width, h = in->height;
  int vw = w - x0 < TILE ? w - x0 : TILE, vh = h - y0 < TILE ? h - y0 : TILE;
  if (vw < TILE || vh < TILE) memset(tile, 0, TILE_BYTES);
  for (int r = 0; r < vh; r++) memcpy(tile + r * TILE, i420 + (size_t)(y0 + r) * w + x0, (size_t)vw);
  size_t ysz = (size_t)w * h, cw = (size_t)w / 2;
  for (int pl = 0; pl < 2; pl++) {
    const uint8_t *src = i420 + ysz + (size_t)pl * (ysz / 4);
    uint8_t *dst = tile + TILE_Y + pl * TILE_C;
    for (int r = 0; r < vh / 2; r++)
      memcpy(dst + r * CTILE, src + (size_t)(y0 / 2 + r) * cw + x0 / 2, (size_t)vw / 2);
  }
  return vw * vh + 2 * (vw / 2) * (vh / 2);
}

/* 1 when tile a may show as b: equal, or near-equal (see the top of the file). Padding is zero
 * in both, so it adds nothing to the sums; vis counts the samples inside the frame. */
static int tile_close(const uint8_t *a, const uint8_t *b, int vis) {
  if (memcmp(a, b, TILE_BYTES) == 0) return 1;
  unsigned sum = 0;
  for (int k = 0; k < TILE_BYTES; k += 64) {
    unsigned bad = 0;
    for (int j = k; j < k + 64; j++) { /* branch-free inner loop: vectorizes */
      int d = a[j] - b[j];
      unsigned ad = (unsigned)(d < 0 ? -d : d);
      sum += ad;
      bad |= ad > NEAR_MAX;
    }
    if (bad) return 0;
  }
  return 2 * sum <= (unsigned)vis;
}

/* Common refusals of the mutating calls. */
static int writer_usable(const fc_pack_writer *w) {
  if (!w) return fc_error_set(FC_EINVAL, "pack writer: NULL");
  if (w->failed) return fc_error_set(w->failed, "pack %s: an earlier write failed", w->path);
  if (w->finished) return fc_error_set(FC_EINVAL, "pack %s: already finished", w->path);
  return FC_OK;
}

int fc_pack_writer_add_frame(fc_pack_writer *w, const fc_pack_frame *f) {
  int err = writer_usable(w);
  if (err) return err;
  const fc_pack_info *in = &w->info;
  char why[200];
  if (w->added >= in->frames)
    return fc_error_set(FC_EINVAL, "pack %s: all %d frames were added already", w->path,
                        in->frames);
  if (!f || !f->i420) return fc_error_set(FC_EINVAL, "pack %s: frame %d has no pixels", w->path,
                                          w->added);
  for (int k = 0; k < in->ncrops; k++)
    if (!f->crop[k] || !f->mask[k])
      return fc_error_set(FC_EINVAL, "pack %s: frame %d lacks its crop or mask at %d", w->path,
                          w->added, in->crop_size[k]);
  if (!box_ok(f->box, in, why, sizeof why) || !points_ok(f->landmarks, in, why, sizeof why))
    return fc_error_set(FC_EINVAL, "pack %s: frame %d: %s", w->path, w->added, why);

  uint32_t idx[2];
  int fresh = 0; /* tiles this frame stores */
  for (int t = 0; t < w->ntiles; t++) {
    int vis = cut_tile(in, f->i420, t, w->cur);
    uint8_t *shown = w->shown + (size_t)t * TILE_BYTES;
    if (w->stored_frames > 0 && tile_close(w->cur, shown, vis)) continue;
    if (w->tiles >= UINT32_MAX)
      return w->failed = fc_error_set(FC_EINVAL, "pack %s: more than 2^32 tiles", w->path);
    if ((err = spool_put(w, S_TILES, w->cur, TILE_BYTES))) return err;
    memcpy(shown, w->cur, TILE_BYTES);
    w->shown_idx[t] = (uint32_t)w->tiles++;
    fresh++;
  }
  if (fresh) {
    if ((err = spool_put(w, S_TILEMAP, w->shown_idx, (size_t)w->ntiles * 4))) return err;
    idx[0] = (uint32_t)w->stored_frames++;
  } else {
    idx[0] = (uint32_t)w->stored_frames - 1; /* every tile reused: the same table */
  }
  if (w->stored_faces > 0 && same_face(w, f)) {
    idx[1] = (uint32_t)w->stored_faces - 1;
  } else {
    if ((err = put_face(w, f))) return err;
    idx[1] = (uint32_t)w->stored_faces++;
  }
  /* Little-endian host (checked above): the structs are the stored bytes. */
  if ((err = spool_put(w, S_INDEX, idx, sizeof idx)) ||
      (err = spool_put(w, S_BOXES, &f->box, sizeof f->box)) ||
      (err = spool_put(w, S_LANDMARKS, f->landmarks, LM_BYTES)))
    return err;
  w->added++;
  return FC_OK;
}

int fc_pack_writer_add_clip(fc_pack_writer *w, const fc_pack_clip *c) {
  int err = writer_usable(w);
  if (err) return err;
  char why[200];
  if (!c) return fc_error_set(FC_EINVAL, "pack %s: NULL clip", w->path);
  if (w->nclips >= FC_PACK_MAX_CLIPS)
    return fc_error_set(FC_EINVAL, "pack %s: more than %d clips", w->path, FC_PACK_MAX_CLIPS);
  if (!clip_ok(c, w->clips, w->nclips, w->info.frames, why, sizeof why))
    return fc_error_set(FC_EINVAL, "pack %s: %s", w->path, why);
  if (c->audio_rate && !c->audio)
    return fc_error_set(FC_EINVAL, "pack %s: clip '%s' has no audio samples", w->path, c->name);
  if (c->audio_rate && (err = spool_put(w, S_AUDIO, c->audio, (size_t)clip_audio_bytes(c))))
    return err;
  fc_pack_clip *d = &w->clips[w->nclips++];
  *d = *c;
  d->audio = NULL;
  return FC_OK;
}

/* Copies a side spool to offset off of the pack. */
static int spool_copy(fc_pack_writer *w, int s, uint64_t off, uint8_t *buf) {
  const spool *sp = &w->sp[s];
  for (uint64_t done = 0; done < sp->size;) {
    size_t n = sp->size - done < COPY_CHUNK ? (size_t)(sp->size - done) : COPY_CHUNK;
    ssize_t r = pread(sp->fd, buf, n, (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || pwrite_all(w->fd, buf, (size_t)r, off + done) != 0)
      return fc_error_set(FC_EIO, "pack %s: copying section '%s' into place failed: %s",
                          w->path, sec_name[s], r == 0 ? "short read" : strerror(errno));
    done += (uint64_t)r;
  }
  return FC_OK;
}

/* Appends to a fixed buffer; *ok drops to 0 when it would overflow. */
static void jcat(char *buf, size_t cap, size_t *len, int *ok, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void jcat(char *buf, size_t cap, size_t *len, int *ok, const char *fmt, ...) {
  if (!*ok) return;
  va_list ap;
  va_start(ap, fmt);
  int r = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (r < 0 || (size_t)r >= cap - *len) *ok = 0;
  else *len += (size_t)r;
}

/* The JSON header. Ids and names are [A-Za-z0-9_-] and meta is json-glib's output, so nothing
 * needs escaping. */
static size_t header_json(const fc_pack_writer *w, char *buf, size_t cap) {
  const fc_pack_info *in = &w->info;
  size_t len = 0;
  int ok = 1;
  jcat(buf, cap, &len, &ok,
       "{\"id\":\"%s\",\"width\":%d,\"height\":%d,\"fps_num\":%d,\"fps_den\":%d,\"frames\":%d,"
       "\"stored_frames\":%d,\"stored_faces\":%d,\"tile_size\":%d,\"tiles\":%llu,"
       "\"crops\":[",
       in->id, in->width, in->height, in->fps_num, in->fps_den, in->frames, w->stored_frames,
       w->stored_faces, TILE, (unsigned long long)w->tiles);
  for (int k = 0; k < in->ncrops; k++)
    jcat(buf, cap, &len, &ok, "%s%d", k ? "," : "", in->crop_size[k]);
  jcat(buf, cap, &len, &ok, "],\"clips\":[");
  for (int k = 0; k < w->nclips; k++) {
    const fc_pack_clip *c = &w->clips[k];
    jcat(buf, cap, &len, &ok, "%s{\"name\":\"%s\",\"first\":%d,\"count\":%d,\"audio\":",
         k ? "," : "", c->name, c->first, c->count);
    if (c->audio_rate)
      jcat(buf, cap, &len, &ok, "{\"rate\":%d,\"channels\":%d,\"frames\":%lld}}", c->audio_rate,
           c->audio_channels, (long long)c->audio_frames);
    else
      jcat(buf, cap, &len, &ok, "null}");
  }
  jcat(buf, cap, &len, &ok, "],\"meta\":%s}", w->meta);
  return ok ? len : 0;
}

/* fsync of the directory, so the rename itself survives a crash. */
static int sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (!dir) return -1;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  free(dir);
  if (fd < 0) return -1;
  int r = fsync(fd);
  close(fd);
  return r;
}

int fc_pack_writer_finish(fc_pack_writer *w) {
  int err = writer_usable(w);
  if (err) return err;
  const fc_pack_info *in = &w->info;
  if (w->added != in->frames)
    return fc_error_set(FC_EINVAL, "pack %s: %d of %d frames were added", w->path, w->added,
                        in->frames);
  uint8_t *buf = NULL, *hdr = NULL;
  uint64_t off[S_COUNT] = {0};
  int nsec = 0;
  off[S_TILES] = w->reserve;
  uint64_t end = w->reserve + w->sp[S_TILES].size;
  buf = malloc(COPY_CHUNK);
  hdr = calloc(1, (size_t)w->reserve);
  if (!buf || !hdr) {
    err = fc_error_set(FC_ENOMEM, "pack %s: out of memory", w->path);
    goto done;
  }
  for (int s = S_TILEMAP; s < S_COUNT; s++) {
    if (!sec_present(s, in->ncrops)) continue;
    off[s] = align_up(end, PAGE);
    if ((err = spool_copy(w, s, off[s], buf))) goto done;
    end = off[s] + w->sp[s].size;
  }
  if (ftruncate(w->fd, (off_t)end) != 0) {
    err = fc_error_set(FC_EIO, "pack %s: sizing the file failed: %s", w->path, strerror(errno));
    goto done;
  }

  /* The header, built in the reserved area's image. */
  size_t table_room = 8 + 8 + (size_t)sec_count(in->ncrops) * ENTRY + 4;
  size_t jlen = header_json(w, (char *)hdr + FIXED, (size_t)w->reserve - FIXED - table_room);
  if (jlen == 0) { /* cannot happen: the reservation bounds every header */
    err = fc_error_set(FC_EINVAL, "pack %s: the header outgrew its reservation", w->path);
    goto done;
  }
  memcpy(hdr, magic, sizeof magic);
  wr32(hdr + 8, FC_PACK_VERSION);
  wr32(hdr + 12, 0);
  wr64(hdr + 16, jlen);
  uint8_t *t = hdr + align_up(FIXED + jlen, 8);
  uint8_t *e = t + 8;
  for (int s = 0; s < S_COUNT; s++) {
    if (!sec_present(s, in->ncrops)) continue;
    memset(e, 0, ENTRY);
    memcpy(e, sec_name[s], strlen(sec_name[s]));
    wr64(e + 16, off[s]);
    wr64(e + 24, w->sp[s].size);
    wr32(e + 32, w->sp[s].crc);
    e += ENTRY;
    nsec++;
  }
  wr32(t, (uint32_t)nsec);
  wr32(e, crc_of(hdr, (uint64_t)(e - hdr)));
  if (pwrite_all(w->fd, hdr, (size_t)(e + 4 - hdr), 0) != 0 || fsync(w->fd) != 0) {
    err = fc_error_set(FC_EIO, "pack %s: writing the header failed: %s", w->path,
                       strerror(errno));
    goto done;
  }
  if (rename(w->tmp, w->path) != 0) {
    err = fc_error_set(FC_EIO, "pack %s: rename into place failed: %s", w->path,
                       strerror(errno));
    goto done;
  }
  free(w->tmp);
  w->tmp = NULL;
  w->finished = 1;
  if (sync_dir(w->path) != 0)
    err = fc_error_set(FC_EIO, "pack %s: syncing its directory failed: %s", w->path,
                       strerror(errno));
done:
  if (err && !w->finished) w->failed = err;
  free(buf);
  free(hdr);
  return err;
}

/* ---- reader ---- */

struct fc_pack {
  uint8_t *map;
  size_t size;
  int fd;      /* kept for fc_pack_verify's own mapping */
  uint64_t hdr_end; /* E: the header's CRC covers [0, E) and sits at E */
  char *path;
  char *meta;  /* g_malloc'd */
  fc_pack_info info;
  int stored_frames, stored_faces;
  int tile_size;          /* from the header: TILE */
  uint32_t tiles;         /* stored tiles */
  int tx, ntiles;         /* tile columns, tile positions per frame */
  uint64_t off[S_COUNT], len[S_COUNT];
  uint32_t crc[S_COUNT];
  uint64_t item[S_COUNT]; /* bytes per stored item */
  uint32_t *index;        /* a private copy of the index section (see check_small) */
  uint32_t *tilemap;      /* and of the tile tables */
  int nclips;
  fc_pack_clip clips[FC_PACK_MAX_CLIPS];
};

void fc_pack_close(fc_pack *p) {
  if (!p) return;
  if (p->map) munmap(p->map, p->size);
  if (p->fd >= 0) close(p->fd);
  free(p->index);
  free(p->tilemap);
  free(p->path);
  g_free(p->meta);
  free(p);
}

/* Copies a JSON key for a detail, non-printable bytes as '?' (keys come from the file). */
static const char *printable(char out[40], const char *s) {
  size_t i = 0;
  for (; s[i] && i < 32; i++) out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  out[i] = 0;
  return out;
}

static const char *node_kind(JsonNode *n) {
  if (JSON_NODE_HOLDS_OBJECT(n)) return "an object";
  if (JSON_NODE_HOLDS_ARRAY(n)) return "an array";
  if (JSON_NODE_HOLDS_NULL(n)) return "null";
  GType t = json_node_get_value_type(n);
  if (t == G_TYPE_INT64) return "an integer";
  if (t == G_TYPE_DOUBLE) return "a fractional number";
  if (t == G_TYPE_BOOLEAN) return "a boolean";
  if (t == G_TYPE_STRING) return "a string";
  return "a value of unknown kind";
}

/* A JSON object being read: where names it in details ("the header", "clip 2"). */
typedef struct jobj {
  const fc_pack *p;
  JsonObject *o;
  const char *where;
} jobj;

/* Refuses fields other than keys (so a typo or a field of another version is not ignored). */
static int j_only(jobj j, const char *const *keys) {
  GList *members = json_object_get_members(j.o);
  int err = FC_OK;
  for (GList *m = members; m && !err; m = m->next) {
    const char *k = m->data;
    int known = 0;
    for (int i = 0; keys[i] && !known; i++) known = strcmp(keys[i], k) == 0;
    char q[40];
    if (!known)
      err = fc_error_set(FC_EFORMAT, "pack %s: %s has an unknown field '%s'", j.p->path, j.where,
                         printable(q, k));
  }
  g_list_free(members);
  return err;
}

static int j_get(jobj j, const char *key, JsonNode **out) {
  *out = json_object_get_member(j.o, key);
  if (!*out)
    return fc_error_set(FC_EFORMAT, "pack %s: %s lacks the field '%s'", j.p->path, j.where, key);
  return FC_OK;
}

static int j_type(jobj j, const char *key, JsonNode *n, const char *want) {
  return fc_error_set(FC_EFORMAT, "pack %s: %s field '%s' must be %s, not %s", j.p->path,
                      j.where, key, want, node_kind(n));
}

/* An integer field narrowed to [lo, hi] (the real ranges are the rules above: this only keeps
 * the value representable). */
static int j_int(jobj j, const char *key, int64_t lo, int64_t hi, int64_t *out) {
  JsonNode *n;
  int err = j_get(j, key, &n);
  if (err) return err;
  if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64)
    return j_type(j, key, n, "an integer");
  *out = json_node_get_int(n);
  if (*out < lo || *out > hi)
    return fc_error_set(FC_EFORMAT, "pack %s: %s field '%s' is %lld, outside %lld..%lld",
                        j.p->path, j.where, key, (long long)*out, (long long)lo, (long long)hi);
  return FC_OK;
}

static int j_int32(jobj j, const char *key, int *out) {
  int64_t v;
  int err = j_int(j, key, INT_MIN, INT_MAX, &v);
  *out = (int)v;
  return err;
}

/* A string field copied into dst[cap] (its characters are checked by the rules above). */
static int j_name(jobj j, const char *key, char *dst, size_t cap) {
  JsonNode *n;
  int err = j_get(j, key, &n);
  if (err) return err;
  if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING)
    return j_type(j, key, n, "a string");
  const char *s = json_node_get_string(n);
  if (strlen(s) >= cap)
    return fc_error_set(FC_EFORMAT, "pack %s: %s field '%s' is longer than %zu characters",
                        j.p->path, j.where, key, cap - 1);
  memcpy(dst, s, strlen(s) + 1);
  return FC_OK;
}

static int j_array(jobj j, const char *key, guint max, JsonArray **out) {
  JsonNode *n;
  int err = j_get(j, key, &n);
  if (err) return err;
  if (!JSON_NODE_HOLDS_ARRAY(n)) return j_type(j, key, n, "an array");
  *out = json_node_get_array(n);
  if (json_array_get_length(*out) > max)
    return fc_error_set(FC_EFORMAT, "pack %s: %s field '%s' has %u entries (at most %u)",
                        j.p->path, j.where, key, json_array_get_length(*out), max);
  return FC_OK;
}

static int parse_clip(fc_pack *p, JsonNode *n, int k) {
  char where[32], why[200];
  snprintf(where, sizeof where, "clip %d", k);
  jobj j = {p, NULL, where};
  if (!JSON_NODE_HOLDS_OBJECT(n))
    return fc_error_set(FC_EFORMAT, "pack %s: %s must be an object, not %s", p->path, where,
                        node_kind(n));
  j.o = json_node_get_object(n);
  static const char *const keys[] = {"name", "first", "count", "audio", NULL};
  static const char *const akeys[] = {"rate", "channels", "frames", NULL};
  fc_pack_clip *c = &p->clips[k];
  JsonNode *an;
  int err;
  if ((err = j_only(j, keys)) || (err = j_name(j, "name", c->name, sizeof c->name)) ||
      (err = j_int32(j, "first", &c->first)) || (err = j_int32(j, "count", &c->count)) ||
      (err = j_get(j, "audio", &an)))
    return err;
  if (JSON_NODE_HOLDS_OBJECT(an)) {
    jobj a = {p, json_node_get_object(an), where};
    if ((err = j_only(a, akeys)) || (err = j_int32(a, "rate", &c->audio_rate)) ||
        (err = j_int32(a, "channels", &c->audio_channels)) ||
        (err = j_int(a, "frames", 0, INT64_MAX, &c->audio_frames)))
      return err;
    if (c->audio_rate == 0 && c->audio_channels == 0 && c->audio_frames == 0)
      return fc_error_set(FC_EFORMAT, "pack %s: %s has an empty audio object (null means none)",
                          p->path, where);
  } else if (!JSON_NODE_HOLDS_NULL(an)) {
    return j_type(j, "audio", an, "an object or null");
  }
  if (!clip_ok(c, p->clips, k, p->info.frames, why, sizeof why))
    return fc_error_set(FC_EFORMAT, "pack %s: %s", p->path, why);
  return FC_OK;
}

static int parse_json(fc_pack *p, const char *text, size_t n) {
  char why[200];
  JsonNode *root;
  JsonParser *jp = json_object_parse(text, n, &root, why, sizeof why);
  if (!jp) return fc_error_set(FC_EFORMAT, "pack %s: the JSON header %s", p->path, why);
  static const char *const keys[] = {"id", "width", "height", "fps_num", "fps_den", "frames",
                                     "stored_frames", "stored_faces", "tile_size", "tiles",
                                     "crops", "clips", "meta", NULL};
  jobj j = {p, json_node_get_object(root), "the header"};
  fc_pack_info *in = &p->info;
  JsonArray *crops, *clips;
  JsonNode *meta;
  int64_t tiles = 0;
  int err;
  if ((err = j_only(j, keys)) || (err = j_name(j, "id", in->id, sizeof in->id)) ||
      (err = j_int32(j, "width", &in->width)) || (err = j_int32(j, "height", &in->height)) ||
      (err = j_int32(j, "fps_num", &in->fps_num)) || (err = j_int32(j, "fps_den", &in->fps_den)) ||
      (err = j_int32(j, "frames", &in->frames)) ||
      (err = j_int32(j, "stored_frames", &p->stored_frames)) ||
      (err = j_int32(j, "stored_faces", &p->stored_faces)) ||
      (err = j_int32(j, "tile_size", &p->tile_size)) ||
      (err = j_int(j, "tiles", 1, UINT32_MAX, &tiles)) ||
      (err = j_array(j, "crops", FC_PACK_MAX_CROPS, &crops)) ||
      (err = j_array(j, "clips", FC_PACK_MAX_CLIPS, &clips)) || (err = j_get(j, "meta", &meta)))
    goto done;
  in->ncrops = (int)json_array_get_length(crops);
  for (int k = 0; k < in->ncrops; k++) {
    JsonNode *c = json_array_get_element(crops, (guint)k);
    if (!JSON_NODE_HOLDS_VALUE(c) || json_node_get_value_type(c) != G_TYPE_INT64) {
      err = fc_error_set(FC_EFORMAT, "pack %s: the header's crop size %d must be an integer, not %s", p->path,
                         k, node_kind(c));
      goto done;
    }
    int64_t v = json_node_get_int(c);
    if (v < MIN_CROP || v > MAX_CROP) {
      err = fc_error_set(FC_EFORMAT, "pack %s: the header's crop size %lld is not in %d..%d", p->path,
                         (long long)v, MIN_CROP, MAX_CROP);
      goto done;
    }
    in->crop_size[k] = (int)v;
  }
  if (!info_ok(in, why, sizeof why)) {
    err = fc_error_set(FC_EFORMAT, "pack %s: the header's %s", p->path, why);
    goto done;
  }
  if (p->stored_frames < 1 || p->stored_frames > in->frames || p->stored_faces < 1 ||
      p->stored_faces > in->frames) {
    err = fc_error_set(FC_EFORMAT, "pack %s: the header's stored_frames %d and stored_faces %d "
                       "must be in 1..%d (frames)", p->path, p->stored_frames, p->stored_faces,
                       in->frames);
    goto done;
  }
  if (p->tile_size != TILE) {
    err = fc_error_set(FC_EFORMAT, "pack %s: the header's tile_size %d is not %d (the only size "
                       "this build reads)", p->path, p->tile_size, TILE);
    goto done;
  }
  p->tiles = (uint32_t)tiles;
  p->tx = tiles_x(in);
  p->ntiles = tiles_per_frame(in);
  /* The first stored frame stores every position, each later one at least one tile. */
  if (tiles < p->ntiles + p->stored_frames - 1 ||
      tiles > (int64_t)p->ntiles * p->stored_frames) {
    err = fc_error_set(FC_EFORMAT, "pack %s: the header's tiles %lld cannot make %d stored "
                       "frames of %d tiles", p->path, (long long)tiles, p->stored_frames,
                       p->ntiles);
    goto done;
  }
  p->nclips = (int)json_array_get_length(clips);
  for (int k = 0; k < p->nclips; k++)
    if ((err = parse_clip(p, json_array_get_element(clips, (guint)k), k))) goto done;
  if (!JSON_NODE_HOLDS_OBJECT(meta)) {
    err = j_type(j, "meta", meta, "an object");
    goto done;
  }
  p->meta = json_to_string(meta, FALSE);
done:
  g_object_unref(jp);
  return err;
}

/* The fixed header, the header CRC and where each section lies (before the JSON is trusted:
 * these checks only need the table, and they are what a truncated file fails). */
static int parse_frame(fc_pack *p, const char **json, size_t *jlen, const uint8_t **table,
                       uint32_t *nsec) {
  const uint8_t *m = p->map;
  size_t size = p->size;
  if (size < sizeof magic || memcmp(m, magic, sizeof magic) != 0)
    return fc_error_set(FC_EFORMAT, "pack %s: not an avatar pack (it does not start with "
                        "FCAVPACK)", p->path);
  if (size < FIXED)
    return fc_error_set(FC_EFORMAT, "pack %s: truncated in its fixed header (%zu of %d bytes)",
                        p->path, size, FIXED);
  uint32_t version = rd32(m + 8), flags = rd32(m + 12);
  uint64_t j = rd64(m + 16);
  if (version == 0 || version > 0xFFFF)
    return fc_error_set(FC_EFORMAT, "pack %s: implausible format version %u", p->path, version);
  if (version > FC_PACK_VERSION)
    return fc_error_set(FC_EUNSUPPORTED, "pack %s: format version %u is newer than this build "
                        "reads (up to %d)", p->path, version, FC_PACK_VERSION);
  if (version < FC_PACK_VERSION)
    return fc_error_set(FC_EUNSUPPORTED, "pack %s: format version %u (whole frames) is no longer "
                        "read; create the avatar again (facecast avatar create)", p->path,
                        version);
  if (flags != 0)
    return fc_error_set(FC_EFORMAT, "pack %s: unknown flags 0x%x", p->path, flags);
  if (j == 0 || j > MAX_JSON)
    return fc_error_set(FC_EFORMAT, "pack %s: JSON header length %llu is not in 1..%d", p->path,
                        (unsigned long long)j, MAX_JSON);
  uint64_t t = align_up(FIXED + j, 8);
  if (t > size || size - t < 8)
    return fc_error_set(FC_EFORMAT, "pack %s: truncated in its header (the section table at "
                        "%llu lies past the end of the %zu-byte file)", p->path,
                        (unsigned long long)t, size);
  uint32_t n = rd32(m + t);
  if (n < 1 || n > S_COUNT || rd32(m + t + 4) != 0)
    return fc_error_set(FC_EFORMAT, "pack %s: section table claims %u sections (at most %d)",
                        p->path, n, S_COUNT);
  uint64_t e = t + 8 + (uint64_t)n * ENTRY;
  if (e > size || size - e < 4)
    return fc_error_set(FC_EFORMAT, "pack %s: truncated in its section table (%llu bytes needed, "
                        "file has %zu)", p->path, (unsigned long long)(e + 4), size);
  uint32_t want = rd32(m + e), got = crc_of(m, e);
  if (want != got)
    return fc_error_set(FC_EFORMAT, "pack %s: header fails its CRC check (stored 0x%08x, "
                        "computed 0x%08x)", p->path, want, got);
  uint64_t prev_end = e + 4;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *en = m + t + 8 + (uint64_t)i * ENTRY;
    char name[NAME_LEN + 1];
    memcpy(name, en, NAME_LEN);
    name[NAME_LEN] = 0;
    uint64_t off = rd64(en + 16), len = rd64(en + 24);
    char q[40];
    printable(q, name);
    if (off % PAGE)
      return fc_error_set(FC_EFORMAT, "pack %s: section '%s' at %llu does not start on a "
                          "%d-byte boundary", p->path, q, (unsigned long long)off, PAGE);
    if (off < prev_end)
      return fc_error_set(FC_EFORMAT, "pack %s: section '%s' at %llu overlaps what precedes it "
                          "(ending at %llu)", p->path, q, (unsigned long long)off,
                          (unsigned long long)prev_end);
    if (off > size || len > size - off)
      return fc_error_set(FC_EFORMAT, "pack %s: section '%s' extends past the end of the file "
                          "(offset %llu + %llu > %zu)", p->path, q, (unsigned long long)off,
                          (unsigned long long)len, size);
    prev_end = off + len;
  }
  if (prev_end != size)
    return fc_error_set(FC_EFORMAT, "pack %s: the file is %zu bytes but its sections end at "
                        "%llu", p->path, size, (unsigned long long)prev_end);
  p->hdr_end = e;
  *json = (const char *)m + FIXED;
  *jlen = (size_t)j;
  *table = m + t + 8;
  *nsec = n;
  return FC_OK;
}

/* The table against the JSON: names, order and exact sizes. */
static int check_table(fc_pack *p, const uint8_t *table, uint32_t n) {
  const fc_pack_info *in = &p->info;
  uint64_t count[S_COUNT];
  for (int s = 0; s < S_COUNT; s++) count[s] = (uint64_t)in->frames;
  count[S_TILES] = p->tiles;
  count[S_TILEMAP] = (uint64_t)p->stored_frames;
  for (int s = S_CROP0; s <= S_MASK1; s++) count[s] = (uint64_t)p->stored_faces;
  uint64_t audio = 0;
  for (int k = 0; k < p->nclips; k++) audio += clip_audio_bytes(&p->clips[k]);
  /* Ranges checked above bound every product below 2^51, so none overflows. */
  int want_n = sec_count(in->ncrops);
  if ((int)n != want_n)
    return fc_error_set(FC_EFORMAT, "pack %s: %u sections, the header implies %d", p->path, n,
                        want_n);
  const uint8_t *en = table;
  for (int s = 0; s < S_COUNT; s++) {
    if (!sec_present(s, in->ncrops)) continue;
    char name[NAME_LEN] = {0}, q[40];
    memcpy(name, sec_name[s], strlen(sec_name[s]));
    if (memcmp(en, name, NAME_LEN) != 0) {
      memcpy(name, en, NAME_LEN - 1);
      return fc_error_set(FC_EFORMAT, "pack %s: section %d is '%s', expected '%s'", p->path,
                          (int)((en - table) / ENTRY), printable(q, name), sec_name[s]);
    }
    if (rd32(en + 36) != 0)
      return fc_error_set(FC_EFORMAT, "pack %s: section '%s' has a non-zero reserved field",
                          p->path, sec_name[s]);
    p->item[s] = item_bytes(in, s);
    uint64_t want = s == S_AUDIO ? audio : count[s] * p->item[s];
    p->off[s] = rd64(en + 16);
    p->len[s] = rd64(en + 24);
    p->crc[s] = rd32(en + 32);
    if (p->len[s] != want)
      return fc_error_set(FC_EFORMAT, "pack %s: section '%s' is %llu bytes, the header implies "
                          "%llu", p->path, sec_name[s], (unsigned long long)p->len[s],
                          (unsigned long long)want);
    en += ENTRY;
  }
  return FC_OK;
}

static int check_crc(const fc_pack *p, int s) {
  uint32_t got = crc_of(p->map + p->off[s], p->len[s]);
  if (got != p->crc[s])
    return fc_error_set(FC_EFORMAT, "pack %s: section '%s' fails its CRC check (stored 0x%08x, "
                        "computed 0x%08x)", p->path, sec_name[s], p->crc[s], got);
  return FC_OK;
}

/* The tile tables' shape (see the top of the file): the first is 0, 1, 2, ...; each entry of
 * a later one is the previous table's entry at its position or the next new tile; every later
 * table has a new tile; and the tables use exactly the header's tile count. Every index is
 * therefore below the tile count. */
static int check_tilemap(fc_pack *p) {
  uint64_t next = 0;
  int n = p->ntiles;
  for (int f = 0; f < p->stored_frames; f++) {
    const uint32_t *tb = p->tilemap + (size_t)f * n, *pv = f ? tb - n : tb; /* pv: f > 0 only */
    uint64_t before = next;
    for (int t = 0; t < n; t++) {
      uint32_t v = tb[t];
      if (v == next) {
        next++;
      } else if (f == 0) {
        return fc_error_set(FC_EFORMAT, "pack %s: tile table 0, position %d: tile %u is not %llu "
                            "(the first table stores every tile in order)", p->path, t, v,
                            (unsigned long long)next);
      } else if (v != pv[t]) {
        return fc_error_set(FC_EFORMAT, "pack %s: tile table %d, position %d (column %d, row %d):"
                            " tile %u is neither the previous table's %u nor the next new tile "
                            "%llu", p->path, f, t, t % p->tx, t / p->tx, v, pv[t],
                            (unsigned long long)next);
      }
    }
    if (f > 0 && next == before)
      return fc_error_set(FC_EFORMAT, "pack %s: tile table %d repeats table %d (a repeated frame "
                          "reuses its table)", p->path, f, f - 1);
  }
  if (next != p->tiles)
    return fc_error_set(FC_EFORMAT, "pack %s: the tile tables use %llu tiles, the header says %u",
                        p->path, (unsigned long long)next, p->tiles);
  return FC_OK;
}

/* The small per-frame sections: CRCs, then the tile tables' and the index's shape, boxes and
 * points. The tables and the index are what accessors turn into addresses, so they are copied
 * and the copies are checked: a shared mapping shows later writes to the file, and a pack
 * rewritten in place (which the writer never does: it renames a new file into place) could
 * then give wrong pixels, never an address outside the mapping. */
static int check_small(fc_pack *p) {
  int err;
  for (int s = S_TILEMAP; s <= S_LANDMARKS; s++)
    if ((err = check_crc(p, s))) return err;
  const fc_pack_info *in = &p->info;
  p->tilemap = malloc((size_t)p->len[S_TILEMAP]);
  if (!p->tilemap) return fc_error_set(FC_ENOMEM, "pack %s: out of memory", p->path);
  memcpy(p->tilemap, p->map + p->off[S_TILEMAP], (size_t)p->len[S_TILEMAP]);
  if ((err = check_tilemap(p))) return err;
  p->index = malloc((size_t)p->len[S_INDEX]);
  if (!p->index) return fc_error_set(FC_ENOMEM, "pack %s: out of memory", p->path);
  memcpy(p->index, p->map + p->off[S_INDEX], (size_t)p->len[S_INDEX]);
  const uint8_t *boxes = p->map + p->off[S_BOXES];
  const uint8_t *lm = p->map + p->off[S_LANDMARKS];
  uint32_t pf = 0, pc = 0;
  char why[200];
  for (int i = 0; i < in->frames; i++) {
    uint32_t f = p->index[2 * i], c = p->index[2 * i + 1];
    int ok = i == 0 ? f == 0 && c == 0 : (f == pf || f == pf + 1) && (c == pc || c == pc + 1);
    if (!ok)
      return fc_error_set(FC_EFORMAT, "pack %s: index entry %d (stored frame %u, face %u) does "
                          "not follow %u, %u (entries start at 0 and step by 0 or 1)", p->path, i,
                          f, c, pf, pc);
    pf = f;
    pc = c;
    fc_rect b;
    fc_point pts[FC_LANDMARKS];
    memcpy(&b, boxes + (size_t)i * sizeof b, sizeof b);
    memcpy(pts, lm + (size_t)i * LM_BYTES, LM_BYTES);
    if (!box_ok(b, in, why, sizeof why) || !points_ok(pts, in, why, sizeof why))
      return fc_error_set(FC_EFORMAT, "pack %s: frame %d: %s", p->path, i, why);
  }
  if (pf + 1 != (uint32_t)p->stored_frames || pc + 1 != (uint32_t)p->stored_faces)
    return fc_error_set(FC_EFORMAT, "pack %s: the index uses %u stored frames and %u faces, the "
                        "header says %d and %d", p->path, pf + 1, pc + 1, p->stored_frames,
                        p->stored_faces);
  /* Clips' audio lies back to back in the audio section, in header order. */
  uint64_t a = p->off[S_AUDIO];
  for (int k = 0; k < p->nclips; k++) {
    fc_pack_clip *c = &p->clips[k];
    c->audio = c->audio_rate ? (const int16_t *)(p->map + a) : NULL;
    a += clip_audio_bytes(c);
  }
  return FC_OK;
}

fc_pack *fc_pack_open(const char *path, int *err_out) {
  int err = FC_OK;
  fc_pack *p = NULL;
  if (!path) {
    err = fc_error_set(FC_EINVAL, "pack: NULL path");
    goto fail;
  }
  p = calloc(1, sizeof *p);
  if (p) p->fd = -1;
  if (!p || !(p->path = strdup(path))) {
    err = fc_error_set(FC_ENOMEM, "pack %s: out of memory", path);
    goto fail;
  }
  p->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (p->fd < 0) {
    err = fc_error_set(errno == ENOENT ? FC_ENOTFOUND : FC_EIO, "pack %s: %s", path,
                       strerror(errno));
    goto fail;
  }
  struct stat st;
  if (fstat(p->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    err = fc_error_set(FC_EIO, "pack %s: not a regular file", path);
    goto fail;
  }
  if (st.st_size == 0) {
    err = fc_error_set(FC_EFORMAT, "pack %s: empty file", path);
    goto fail;
  }
  /* MAP_SHARED: the page cache's pages themselves, one copy per machine. */
  void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, p->fd, 0);
  if (map == MAP_FAILED) {
    err = fc_error_set(FC_EIO, "pack %s: mmap failed: %s", path, strerror(errno));
    goto fail;
  }
  p->map = map;
  p->size = (size_t)st.st_size;
  const char *json = NULL;
  size_t jlen = 0;
  const uint8_t *table = NULL;
  uint32_t nsec = 0;
  if ((err = parse_frame(p, &json, &jlen, &table, &nsec)) || (err = parse_json(p, json, jlen)) ||
      (err = check_table(p, table, nsec)) || (err = check_small(p)))
    goto fail;
  if (err_out) *err_out = FC_OK;
  return p;
fail:
  fc_pack_close(p);
  if (err_out) *err_out = err;
  return NULL;
}

const fc_pack_info *fc_pack_get_info(const fc_pack *p) { return p ? &p->info : NULL; }

const char *fc_pack_meta_json(const fc_pack *p) { return p && p->meta ? p->meta : "{}"; }

int fc_pack_get_frame(const fc_pack *p, int i, fc_pack_frame *out) {
  if (!p || !out) return fc_error_set(FC_EINVAL, "pack: NULL argument");
  if (i < 0 || i >= p->info.frames)
    return fc_error_set(FC_EINVAL, "pack %s: frame %d is not in 0..%d", p->path, i,
                        p->info.frames - 1);
  uint64_t c = p->index[2 * (size_t)i + 1];
  out->i420 = NULL; /* tiles: fc_pack_copy_i420 */
  memcpy(&out->box, p->map + p->off[S_BOXES] + (size_t)i * sizeof out->box, sizeof out->box);
  memcpy(out->landmarks, p->map + p->off[S_LANDMARKS] + (size_t)i * LM_BYTES, LM_BYTES);
  for (int k = 0; k < FC_PACK_MAX_CROPS; k++) {
    int cs = S_CROP0 + 2 * k, ms = cs + 1;
    int have = k < p->info.ncrops;
    out->crop[k] = have ? p->map + p->off[cs] + c * p->item[cs] : NULL;
    out->mask[k] = have ? p->map + p->off[ms] + c * p->item[ms] : NULL;
  }
  return FC_OK;
}

/* Copies the part [x0, x0 + w) x [y0, y0 + h) of one plane (pl: 0 Y, 1 U, 2 V; coordinates
 * in that plane's pixels) from the tiles of table tb into dst (rows of w bytes). Tile by tile,
 * each tile's rows in turn: the source is read in order; whole tile rows are fixed-size copies
 * the compiler inlines. */
static void copy_plane(const fc_pack *p, const uint32_t *tb, int pl, int x0, int y0, int w, int h,
                       uint8_t *dst) {
  int side = pl ? CTILE : TILE;
  size_t poff = pl == 0 ? 0 : pl == 1 ? TILE_Y : TILE_Y + TILE_C;
  const uint8_t *tiles = p->map + p->off[S_TILES] + poff;
  for (int ty = y0 / side; ty * side < y0 + h; ty++) {
    int r0 = y0 > ty * side ? y0 - ty * side : 0;
    int r1 = y0 + h < (ty + 1) * side ? y0 + h - ty * side : side;
    uint8_t *drow = dst + (size_t)(ty * side + r0 - y0) * w;
    for (int tx = x0 / side; tx * side < x0 + w; tx++) {
      int c0 = x0 > tx * side ? x0 - tx * side : 0;
      int c1 = x0 + w < (tx + 1) * side ? x0 + w - tx * side : side;
      size_t n = (size_t)(c1 - c0);
      const uint8_t *s = tiles + (size_t)tb[ty * p->tx + tx] * TILE_BYTES + (size_t)r0 * side + c0;
      uint8_t *d = drow + (tx * side + c0 - x0);
      if (n == TILE)
        for (int r = r0; r < r1; r++, s += side, d += w) memcpy(d, s, TILE);
      else if (n == CTILE)
        for (int r = r0; r < r1; r++, s += side, d += w) memcpy(d, s, CTILE);
      else
        for (int r = r0; r < r1; r++, s += side, d += w) memcpy(d, s, n);
    }
  }
}

int fc_pack_copy_i420_rect(const fc_pack *p, int i, fc_rect r, uint8_t *dst) {
  if (!p || !dst) return fc_error_set(FC_EINVAL, "pack: NULL argument");
  const fc_pack_info *in = &p->info;
  if (i < 0 || i >= in->frames)
    return fc_error_set(FC_EINVAL, "pack %s: frame %d is not in 0..%d", p->path, i,
                        in->frames - 1);
  if (r.w < 2 || r.h < 2 || (r.x | r.y | r.w | r.h) & 1 || r.x < 0 || r.y < 0 ||
      r.x > in->width - r.w || r.y > in->height - r.h)
    return fc_error_set(FC_EINVAL, "pack %s: rectangle %dx%d+%d+%d is odd or outside the %dx%d "
                        "frame", p->path, r.w, r.h, r.x, r.y, in->width, in->height);
  const uint32_t *tb = p->tilemap + (size_t)p->index[2 * (size_t)i] * p->ntiles;
  size_t ysz = (size_t)r.w * r.h;
  copy_plane(p, tb, 0, r.x, r.y, r.w, r.h, dst);
  copy_plane(p, tb, 1, r.x / 2, r.y / 2, r.w / 2, r.h / 2, dst + ysz);
  copy_plane(p, tb, 2, r.x / 2, r.y / 2, r.w / 2, r.h / 2, dst + ysz + ysz / 4);
  return FC_OK;
}

int fc_pack_copy_i420(const fc_pack *p, int i, uint8_t *dst) {
  if (!p) return fc_error_set(FC_EINVAL, "pack: NULL argument");
  return fc_pack_copy_i420_rect(p, i, (fc_rect){0, 0, p->info.width, p->info.height}, dst);
}

int fc_pack_clip_count(const fc_pack *p) { return p ? p->nclips : 0; }

int fc_pack_get_clip(const fc_pack *p, int k, fc_pack_clip *out) {
  if (!p || !out) return fc_error_set(FC_EINVAL, "pack: NULL argument");
  if (k < 0 || k >= p->nclips)
    return fc_error_set(FC_EINVAL, "pack %s: clip %d is not in 0..%d", p->path, k, p->nclips - 1);
  *out = p->clips[k];
  return FC_OK;
}

int fc_pack_find_clip(const fc_pack *p, const char *name) {
  if (!p || !name) return fc_error_set(FC_EINVAL, "pack: NULL argument");
  for (int k = 0; k < p->nclips; k++)
    if (strcmp(p->clips[k].name, name) == 0) return k;
  return fc_error_set(FC_ENOTFOUND, "pack %s: no clip named '%.40s'", p->path, name);
}

int fc_pack_resident(const fc_pack *p, int64_t *rss_kb, int64_t *pss_kb) {
  if (!p || !rss_kb || !pss_kb) return fc_error_set(FC_EINVAL, "pack: NULL argument");
  *rss_kb = *pss_kb = 0;
  FILE *f = fopen("/proc/self/smaps", "re");
  if (!f)
    return fc_error_set(FC_EUNSUPPORTED, "pack %s: /proc/self/smaps: %s", p->path,
                        strerror(errno));
  /* madvise on part of a mapping splits it into several areas: sum those inside it. */
  uintptr_t lo = (uintptr_t)p->map, hi = lo + p->size;
  char line[512];
  int in = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    long long v;
    if (sscanf(line, "%lx-%lx ", &a, &b) == 2) in = a >= lo && a < hi;
    else if (in && sscanf(line, "Rss: %lld", &v) == 1) *rss_kb += v;
    else if (in && sscanf(line, "Pss: %lld", &v) == 1) *pss_kb += v;
  }
  fclose(f);
  return FC_OK;
}

int fc_pack_verify(const fc_pack *p) {
  if (!p) return fc_error_set(FC_EINVAL, "pack: NULL argument");
  /* A mapping of its own, read once front to back: MADV_SEQUENTIAL reads ahead further, and
   * unmapping it leaves the caller's Rss as it was (the pages stay in the page cache). */
  uint8_t *m = mmap(NULL, p->size, PROT_READ, MAP_SHARED, p->fd, 0);
  if (m == MAP_FAILED)
    return fc_error_set(FC_EIO, "pack %s: mmap failed: %s", p->path, strerror(errno));
  madvise(m, p->size, MADV_SEQUENTIAL);
  int err = FC_OK;
  /* The header's CRC covers [0, E); the sections have theirs; everything else must be zero,
   * so every byte of the file is checked. */
  uint64_t e = p->hdr_end, pos = e + 4;
  if (rd32(m + e) != crc_of(m, e))
    err = fc_error_set(FC_EFORMAT, "pack %s: header fails its CRC check", p->path);
  for (int s = 0; s < S_COUNT && !err; s++) {
    if (!sec_present(s, p->info.ncrops)) continue;
    for (; pos < p->off[s] && !err; pos++)
      if (m[pos] != 0)
        err = fc_error_set(FC_EFORMAT, "pack %s: byte %llu between sections is not zero",
                           p->path, (unsigned long long)pos);
    uint32_t got = crc_of(m + p->off[s], p->len[s]);
    if (!err && got != p->crc[s])
      err = fc_error_set(FC_EFORMAT, "pack %s: section '%s' fails its CRC check (stored "
                         "0x%08x, computed 0x%08x)", p->path, sec_name[s], p->crc[s], got);
    pos = p->off[s] + p->len[s];
  }
  munmap(m, p->size);
  return err;
}
