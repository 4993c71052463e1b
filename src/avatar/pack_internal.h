/* Private to the avatar pack code (pack.c: the format's rules, pack_write.c: the writer,
 * pack_read.c: the reader): the layout's constants and the checks both sides apply. The format
 * itself is described atop pack.c. */
#ifndef FC_PACK_INTERNAL_H
#define FC_PACK_INTERNAL_H

#include "facecast/error.h"
#include "avatar/pack.h"

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
  FIXED = 24,          /* pk_magic, version, flags, JSON length */
  ENTRY = 40,          /* one section table entry */
  NAME_LEN = 16,       /* a section name, NUL-padded */
  MAX_JSON = 16 << 20, /* the JSON header's length limit */
  MAX_DEPTH = 32,      /* JSON nesting limit (json-glib recurses per level) */
  MAX_FRAMES = 1000000,
  MAX_DIM = 8192,
  MIN_CROP = 16,
  MAX_CROP = 1024,
  MAX_FPS_TERM = 1000000, /* fps_num and fps_den: 30000/1001 fits */
  MAX_AUDIO_RATE = 384000,
  MAX_AUDIO_CHANNELS = 8,
  LM_BYTES = FC_LANDMARKS * 8,
  /* Upper bounds of the JSON the writer produces, for the header reservation: the fixed fields
   * with the longest id and numbers come to under 400 bytes, one clip to under 170. */
  JSON_FIXED_MAX = 512,
  JSON_CLIP_MAX = 192,
  COPY_CHUNK = 1 << 20,
  TILE = FC_PACK_TILE,    /* luma tile side */
  CTILE = TILE / 2,       /* chroma tile side */
  TILE_Y = TILE * TILE,   /* bytes of a tile's Y plane */
  TILE_C = CTILE * CTILE, /* bytes of each chroma plane */
  TILE_BYTES = TILE_Y + 2 * TILE_C,
  NEAR_MAX = 2, /* near-equal tiles: no sample differs by more than this, */
  /* and the summed absolute difference is at most half the samples (a mean of 0.5) */
};
#define MAX_AUDIO_FRAMES (1ll << 40) /* per clip: keeps the byte counts far below 2^63 */

extern const char pk_magic[8];

/* Sections in file and table order. */
enum {
  S_TILES,
  S_TILEMAP,
  S_INDEX,
  S_BOXES,
  S_LANDMARKS,
  S_CROP0,
  S_MASK0,
  S_CROP1,
  S_MASK1,
  S_AUDIO,
  S_COUNT
};
extern const char *const pk_sec_name[S_COUNT];

static inline uint64_t pk_align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
static inline uint32_t pk_rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t pk_rd64(const uint8_t *p) {
  return (uint64_t)pk_rd32(p) | (uint64_t)pk_rd32(p + 4) << 32;
}
static inline void pk_wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static inline void pk_wr64(uint8_t *p, uint64_t v) {
  pk_wr32(p, (uint32_t)v);
  pk_wr32(p + 4, (uint32_t)(v >> 32));
}
static inline int pk_tiles_x(const fc_pack_info *in) { return (in->width + TILE - 1) / TILE; }
static inline int pk_tiles_y(const fc_pack_info *in) { return (in->height + TILE - 1) / TILE; }
static inline int pk_tiles_per_frame(const fc_pack_info *in) {
  return pk_tiles_x(in) * pk_tiles_y(in);
}

int pk_sec_present(int s, int ncrops);
int pk_sec_count(int ncrops);
uint32_t pk_crc_of(const uint8_t *p, uint64_t n);
int pk_name_ok(const char *s, size_t max);
int pk_info_ok(const fc_pack_info *in, char *why, size_t n);
int pk_reach_ok(double v, const fc_pack_info *in);
int pk_box_ok(fc_rect b, const fc_pack_info *in, char *why, size_t n);
int pk_points_ok(const fc_point *p, const fc_pack_info *in, char *why, size_t n);
int pk_clip_ok(const fc_pack_clip *c, const fc_pack_clip *prev, int nprev, int frames, char *why,
               size_t n);
uint64_t pk_clip_audio_bytes(const fc_pack_clip *c);
uint64_t pk_item_bytes(const fc_pack_info *in, int s);
JsonParser *pk_json_object_parse(const char *s, size_t n, JsonNode **root, char *why, size_t wn);

#endif
