/* Avatar packs: the streaming writer and the memory-mapped reader (src/avatar/pack.h says
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
#include "avatar/pack_internal.h"
#include "core/jsonin.h"

const char pk_magic[8] = {'F', 'C', 'A', 'V', 'P', 'A', 'C', 'K'};
const char *const pk_sec_name[S_COUNT] = {"tiles", "tilemap", "index", "boxes", "landmarks",
                                          "crop0", "mask0",   "crop1", "mask1", "audio"};

int pk_sec_present(int s, int ncrops) {
  return s < S_CROP0 || s == S_AUDIO || (s - S_CROP0) / 2 < ncrops;
}

int pk_sec_count(int ncrops) {
  int n = 0;
  for (int s = 0; s < S_COUNT; s++) n += pk_sec_present(s, ncrops);
  return n;
}

uint32_t pk_crc_of(const uint8_t *p, uint64_t n) {
  return (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), p, (z_size_t)n);
}

/* ---- rules shared by the writer (FC_EINVAL) and the reader (FC_EFORMAT) ----
 * Each returns 1 when the value is acceptable, else 0 with what is wrong written to why. */

int pk_name_ok(const char *s, size_t max) {
  size_t n = strnlen(s, max + 1);
  if (n == 0 || n > max) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-'))
      return 0;
  }
  return 1;
}

int pk_info_ok(const fc_pack_info *in, char *why, size_t n) {
  if (!pk_name_ok(in->id, sizeof in->id - 1))
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
int pk_reach_ok(double v, const fc_pack_info *in) {
  double m = in->width > in->height ? in->width : in->height;
  return v >= -4 * m && v <= 5 * m;
}

int pk_box_ok(fc_rect b, const fc_pack_info *in, char *why, size_t n) {
  if (b.w < 1 || b.h < 1 || !pk_reach_ok(b.x, in) || !pk_reach_ok(b.y, in) ||
      !pk_reach_ok((double)b.x + b.w, in) || !pk_reach_ok((double)b.y + b.h, in)) {
    snprintf(why, n, "face box %d,%d %dx%d is empty or far outside the %dx%d frame", b.x, b.y, b.w,
             b.h, in->width, in->height);
    return 0;
  }
  return 1;
}

int pk_points_ok(const fc_point *p, const fc_pack_info *in, char *why, size_t n) {
  for (int k = 0; k < FC_LANDMARKS; k++)
    if (!isfinite(p[k].x) || !isfinite(p[k].y) || !pk_reach_ok(p[k].x, in) ||
        !pk_reach_ok(p[k].y, in)) {
      snprintf(why, n, "landmark %d (%g, %g) is not finite or far outside the frame", k,
               (double)p[k].x, (double)p[k].y);
      return 0;
    }
  return 1;
}

/* The clip on its own, and against the clips before it (names unique). */
int pk_clip_ok(const fc_pack_clip *c, const fc_pack_clip *prev, int nprev, int frames, char *why,
               size_t n) {
  if (!pk_name_ok(c->name, sizeof c->name - 1)) {
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
    snprintf(why, n,
             "clip '%s': audio %d Hz x %d channels x %lld frames is out of range (or "
             "0, 0, 0 for none)",
             c->name, c->audio_rate, c->audio_channels, (long long)c->audio_frames);
  else
    return 1;
  return 0;
}

uint64_t pk_clip_audio_bytes(const fc_pack_clip *c) {
  return (uint64_t)c->audio_frames * (uint64_t)c->audio_channels * 2;
}

/* Tile positions per frame: at most 128 x 128 (MAX_DIM 8192). */

/* Bytes per stored item of a per-item section (the audio section has none). */
uint64_t pk_item_bytes(const fc_pack_info *in, int s) {
  switch (s) {
  case S_TILES: return TILE_BYTES;
  case S_TILEMAP: return (uint64_t)pk_tiles_per_frame(in) * 4;
  case S_INDEX: return 8;
  case S_BOXES: return sizeof(fc_rect);
  case S_LANDMARKS: return LM_BYTES;
  case S_CROP0:
  case S_CROP1: {
    uint64_t c = (uint64_t)in->crop_size[(s - S_CROP0) / 2];
    return c * c * 3;
  }
  case S_MASK0:
  case S_MASK1: {
    uint64_t c = (uint64_t)in->crop_size[(s - S_CROP0) / 2];
    return c * c;
  }
  default: return 0;
  }
}

/* Parses JSON text that must be an object. Returns the parser (owner of *root) or NULL with a
 * reason in why. The header's CRC is what refuses a damaged header, and every field is then
 * checked for type and range. */
JsonParser *pk_json_object_parse(const char *s, size_t n, JsonNode **root, char *why, size_t wn) {
  JsonObject *o;
  JsonParser *jp = fc_json_parse_object(s, n, MAX_DEPTH, &o, why, wn);
  *root = jp ? json_parser_get_root(jp) : NULL;
  return jp;
}
