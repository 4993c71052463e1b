/* Avatar packs: the validating, memory-mapped reader (the format is described atop pack.c). */
#include "avatar/pack_internal.h"

/* ---- reader ---- */

struct fc_pack {
  uint8_t *map;
  size_t size;
  uint8_t *copy;    /* fc_pack_open_mem: map points here (malloc'd), not into a mapping */
  int fd;           /* kept for fc_pack_verify's own mapping */
  uint64_t hdr_end; /* E: the header's CRC covers [0, E) and sits at E */
  char *path;
  char *meta; /* g_malloc'd */
  fc_pack_info info;
  int stored_frames, stored_faces;
  int tile_size;  /* from the header: TILE */
  uint32_t tiles; /* stored tiles */
  int tx, ntiles; /* tile columns, tile positions per frame */
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
  if (p->copy) free(p->copy);
  else if (p->map) munmap(p->map, p->size);
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
  return fc_error_set(FC_EFORMAT, "pack %s: %s field '%s' must be %s, not %s", j.p->path, j.where,
                      key, want, node_kind(n));
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
    return fc_error_set(FC_EFORMAT, "pack %s: %s field '%s' is %lld, outside %lld..%lld", j.p->path,
                        j.where, key, (long long)*out, (long long)lo, (long long)hi);
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
    return fc_error_set(FC_EFORMAT, "pack %s: %s field '%s' has %u entries (at most %u)", j.p->path,
                        j.where, key, json_array_get_length(*out), max);
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
  if (!pk_clip_ok(c, p->clips, k, p->info.frames, why, sizeof why))
    return fc_error_set(FC_EFORMAT, "pack %s: %s", p->path, why);
  return FC_OK;
}

static int parse_json(fc_pack *p, const char *text, size_t n) {
  char why[200];
  JsonNode *root;
  JsonParser *jp = pk_json_object_parse(text, n, &root, why, sizeof why);
  if (!jp) return fc_error_set(FC_EFORMAT, "pack %s: the JSON header %s", p->path, why);
  static const char *const keys[] = {
      "id",           "width",     "height", "fps_num", "fps_den", "frames", "stored_frames",
      "stored_faces", "tile_size", "tiles",  "crops",   "clips",   "meta",   NULL};
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
      err =
          fc_error_set(FC_EFORMAT, "pack %s: the header's crop size %d must be an integer, not %s",
                       p->path, k, node_kind(c));
      goto done;
    }
    int64_t v = json_node_get_int(c);
    if (v < MIN_CROP || v > MAX_CROP) {
      err = fc_error_set(FC_EFORMAT, "pack %s: the header's crop size %lld is not in %d..%d",
                         p->path, (long long)v, MIN_CROP, MAX_CROP);
      goto done;
    }
    in->crop_size[k] = (int)v;
  }
  if (!pk_info_ok(in, why, sizeof why)) {
    err = fc_error_set(FC_EFORMAT, "pack %s: the header's %s", p->path, why);
    goto done;
  }
  if (p->stored_frames < 1 || p->stored_frames > in->frames || p->stored_faces < 1 ||
      p->stored_faces > in->frames) {
    err = fc_error_set(FC_EFORMAT,
                       "pack %s: the header's stored_frames %d and stored_faces %d "
                       "must be in 1..%d (frames)",
                       p->path, p->stored_frames, p->stored_faces, in->frames);
    goto done;
  }
  if (p->tile_size != TILE) {
    err = fc_error_set(FC_EFORMAT,
                       "pack %s: the header's tile_size %d is not %d (the only size "
                       "this build reads)",
                       p->path, p->tile_size, TILE);
    goto done;
  }
  p->tiles = (uint32_t)tiles;
  p->tx = pk_tiles_x(in);
  p->ntiles = pk_tiles_per_frame(in);
  /* The first stored frame stores every position, each later one at least one tile. */
  if (tiles < p->ntiles + p->stored_frames - 1 || tiles > (int64_t)p->ntiles * p->stored_frames) {
    err = fc_error_set(FC_EFORMAT,
                       "pack %s: the header's tiles %lld cannot make %d stored "
                       "frames of %d tiles",
                       p->path, (long long)tiles, p->stored_frames, p->ntiles);
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
  if (size < sizeof pk_magic || memcmp(m, pk_magic, sizeof pk_magic) != 0)
    return fc_error_set(FC_EFORMAT,
                        "pack %s: not an avatar pack (it does not start with "
                        "FCAVPACK)",
                        p->path);
  if (size < FIXED)
    return fc_error_set(FC_EFORMAT, "pack %s: truncated in its fixed header (%zu of %d bytes)",
                        p->path, size, FIXED);
  uint32_t version = pk_rd32(m + 8), flags = pk_rd32(m + 12);
  uint64_t j = pk_rd64(m + 16);
  if (version == 0 || version > 0xFFFF)
    return fc_error_set(FC_EFORMAT, "pack %s: implausible format version %u", p->path, version);
  if (version > FC_PACK_VERSION)
    return fc_error_set(FC_EUNSUPPORTED,
                        "pack %s: format version %u is newer than this build "
                        "reads (up to %d)",
                        p->path, version, FC_PACK_VERSION);
  if (version < FC_PACK_VERSION)
    return fc_error_set(FC_EUNSUPPORTED,
                        "pack %s: format version %u (whole frames) is no longer "
                        "read; create the avatar again (facecast avatar create)",
                        p->path, version);
  if (flags != 0) return fc_error_set(FC_EFORMAT, "pack %s: unknown flags 0x%x", p->path, flags);
  if (j == 0 || j > MAX_JSON)
    return fc_error_set(FC_EFORMAT, "pack %s: JSON header length %llu is not in 1..%d", p->path,
                        (unsigned long long)j, MAX_JSON);
  uint64_t t = pk_align_up(FIXED + j, 8);
  if (t > size || size - t < 8)
    return fc_error_set(FC_EFORMAT,
                        "pack %s: truncated in its header (the section table at "
                        "%llu lies past the end of the %zu-byte file)",
                        p->path, (unsigned long long)t, size);
  uint32_t n = pk_rd32(m + t);
  if (n < 1 || n > S_COUNT || pk_rd32(m + t + 4) != 0)
    return fc_error_set(FC_EFORMAT, "pack %s: section table claims %u sections (at most %d)",
                        p->path, n, S_COUNT);
  uint64_t e = t + 8 + (uint64_t)n * ENTRY;
  if (e > size || size - e < 4)
    return fc_error_set(FC_EFORMAT,
                        "pack %s: truncated in its section table (%llu bytes needed, "
                        "file has %zu)",
                        p->path, (unsigned long long)(e + 4), size);
  uint32_t want = pk_rd32(m + e), got = pk_crc_of(m, e);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  want = got; /* let mutated headers reach the parsers behind the check (tests/fuzz) */
#endif
  if (want != got)
    return fc_error_set(FC_EFORMAT,
                        "pack %s: header fails its CRC check (stored 0x%08x, "
                        "computed 0x%08x)",
                        p->path, want, got);
  uint64_t prev_end = e + 4;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *en = m + t + 8 + (uint64_t)i * ENTRY;
    char name[NAME_LEN + 1];
    memcpy(name, en, NAME_LEN);
    name[NAME_LEN] = 0;
    uint64_t off = pk_rd64(en + 16), len = pk_rd64(en + 24);
    char q[40];
    printable(q, name);
    if (off % PAGE)
      return fc_error_set(FC_EFORMAT,
                          "pack %s: section '%s' at %llu does not start on a "
                          "%d-byte boundary",
                          p->path, q, (unsigned long long)off, PAGE);
    if (off < prev_end)
      return fc_error_set(FC_EFORMAT,
                          "pack %s: section '%s' at %llu overlaps what precedes it "
                          "(ending at %llu)",
                          p->path, q, (unsigned long long)off, (unsigned long long)prev_end);
    if (off > size || len > size - off)
      return fc_error_set(FC_EFORMAT,
                          "pack %s: section '%s' extends past the end of the file "
                          "(offset %llu + %llu > %zu)",
                          p->path, q, (unsigned long long)off, (unsigned long long)len, size);
    prev_end = off + len;
  }
  if (prev_end != size)
    return fc_error_set(FC_EFORMAT,
                        "pack %s: the file is %zu bytes but its sections end at "
                        "%llu",
                        p->path, size, (unsigned long long)prev_end);
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
  for (int k = 0; k < p->nclips; k++) audio += pk_clip_audio_bytes(&p->clips[k]);
  /* Ranges checked above bound every product below 2^51, so none overflows. */
  int want_n = pk_sec_count(in->ncrops);
  if ((int)n != want_n)
    return fc_error_set(FC_EFORMAT, "pack %s: %u sections, the header implies %d", p->path, n,
                        want_n);
  const uint8_t *en = table;
  for (int s = 0; s < S_COUNT; s++) {
    if (!pk_sec_present(s, in->ncrops)) continue;
    char name[NAME_LEN] = {0}, q[40];
    memcpy(name, pk_sec_name[s], strlen(pk_sec_name[s]));
    if (memcmp(en, name, NAME_LEN) != 0) {
      memcpy(name, en, NAME_LEN - 1);
      return fc_error_set(FC_EFORMAT, "pack %s: section %d is '%s', expected '%s'", p->path,
                          (int)((en - table) / ENTRY), printable(q, name), pk_sec_name[s]);
    }
    if (pk_rd32(en + 36) != 0)
      return fc_error_set(FC_EFORMAT, "pack %s: section '%s' has a non-zero reserved field",
                          p->path, pk_sec_name[s]);
    p->item[s] = pk_item_bytes(in, s);
    uint64_t want = s == S_AUDIO ? audio : count[s] * p->item[s];
    p->off[s] = pk_rd64(en + 16);
    p->len[s] = pk_rd64(en + 24);
    p->crc[s] = pk_rd32(en + 32);
    if (p->len[s] != want)
      return fc_error_set(FC_EFORMAT,
                          "pack %s: section '%s' is %llu bytes, the header implies "
                          "%llu",
                          p->path, pk_sec_name[s], (unsigned long long)p->len[s],
                          (unsigned long long)want);
    en += ENTRY;
  }
  return FC_OK;
}

static int check_crc(const fc_pack *p, int s) {
  uint32_t got = pk_crc_of(p->map + p->off[s], p->len[s]);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  got = p->crc[s];
#endif
  if (got != p->crc[s])
    return fc_error_set(FC_EFORMAT,
                        "pack %s: section '%s' fails its CRC check (stored 0x%08x, "
                        "computed 0x%08x)",
                        p->path, pk_sec_name[s], p->crc[s], got);
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
        return fc_error_set(FC_EFORMAT,
                            "pack %s: tile table 0, position %d: tile %u is not %llu "
                            "(the first table stores every tile in order)",
                            p->path, t, v, (unsigned long long)next);
      } else if (v != pv[t]) {
        return fc_error_set(FC_EFORMAT,
                            "pack %s: tile table %d, position %d (column %d, row %d):"
                            " tile %u is neither the previous table's %u nor the next new tile "
                            "%llu",
                            p->path, f, t, t % p->tx, t / p->tx, v, pv[t],
                            (unsigned long long)next);
      }
    }
    if (f > 0 && next == before)
      return fc_error_set(FC_EFORMAT,
                          "pack %s: tile table %d repeats table %d (a repeated frame "
                          "reuses its table)",
                          p->path, f, f - 1);
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
      return fc_error_set(FC_EFORMAT,
                          "pack %s: index entry %d (stored frame %u, face %u) does "
                          "not follow %u, %u (entries start at 0 and step by 0 or 1)",
                          p->path, i, f, c, pf, pc);
    pf = f;
    pc = c;
    fc_rect b;
    fc_point pts[FC_LANDMARKS];
    memcpy(&b, boxes + (size_t)i * sizeof b, sizeof b);
    memcpy(pts, lm + (size_t)i * LM_BYTES, LM_BYTES);
    if (!pk_box_ok(b, in, why, sizeof why) || !pk_points_ok(pts, in, why, sizeof why))
      return fc_error_set(FC_EFORMAT, "pack %s: frame %d: %s", p->path, i, why);
  }
  if (pf + 1 != (uint32_t)p->stored_frames || pc + 1 != (uint32_t)p->stored_faces)
    return fc_error_set(FC_EFORMAT,
                        "pack %s: the index uses %u stored frames and %u faces, the "
                        "header says %d and %d",
                        p->path, pf + 1, pc + 1, p->stored_frames, p->stored_faces);
  /* Clips' audio lies back to back in the audio section, in header order. */
  uint64_t a = p->off[S_AUDIO];
  for (int k = 0; k < p->nclips; k++) {
    fc_pack_clip *c = &p->clips[k];
    c->audio = c->audio_rate ? (const int16_t *)(p->map + a) : NULL;
    a += pk_clip_audio_bytes(c);
  }
  return FC_OK;
}

static int parse_all(fc_pack *p);

/* The end of both opens: p, or NULL (p closed) with the error. */
static fc_pack *opened(fc_pack *p, int err, int *err_out) {
  if (err_out) *err_out = err;
  if (!err) return p;
  fc_pack_close(p);
  return NULL;
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
    err =
        fc_error_set(errno == ENOENT ? FC_ENOTFOUND : FC_EIO, "pack %s: %s", path, strerror(errno));
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
  err = parse_all(p);
fail:
  return opened(p, err, err_out);
}

fc_pack *fc_pack_open_mem(const void *data, size_t size, const char *name, int *err_out) {
  int err = FC_OK;
  fc_pack *p = calloc(1, sizeof *p);
  if (p) p->fd = -1;
  if (!p || !(p->path = strdup(name ? name : "pack")) || !(p->copy = malloc(size ? size : 1))) {
    err = fc_error_set(FC_ENOMEM, "pack: out of memory");
    goto fail;
  }
  if (!size) {
    err = fc_error_set(FC_EFORMAT, "pack %s: empty", p->path);
    goto fail;
  }
  memcpy(p->copy, data, size);
  p->map = p->copy;
  p->size = size;
  err = parse_all(p);
fail:
  return opened(p, err, err_out);
}

static int parse_all(fc_pack *p) {
  int err;
  const char *json = NULL;
  size_t jlen = 0;
  const uint8_t *table = NULL;
  uint32_t nsec = 0;
  if ((err = parse_frame(p, &json, &jlen, &table, &nsec)) || (err = parse_json(p, json, jlen)) ||
      (err = check_table(p, table, nsec)) || (err = check_small(p)))
    return err;
  return FC_OK;
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
    return fc_error_set(FC_EINVAL, "pack %s: frame %d is not in 0..%d", p->path, i, in->frames - 1);
  if (r.w < 2 || r.h < 2 || (r.x | r.y | r.w | r.h) & 1 || r.x < 0 || r.y < 0 ||
      r.x > in->width - r.w || r.y > in->height - r.h)
    return fc_error_set(FC_EINVAL,
                        "pack %s: rectangle %dx%d+%d+%d is odd or outside the %dx%d "
                        "frame",
                        p->path, r.w, r.h, r.x, r.y, in->width, in->height);
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
    return fc_error_set(FC_EUNSUPPORTED, "pack %s: /proc/self/smaps: %s", p->path, strerror(errno));
  /* madvise on part of a mapping splits it into several areas: sum those inside it. */
  uintptr_t lo = (uintptr_t)p->map, hi = lo + p->size;
  char line[512];
  int in = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    long long v;
    if (sscanf(line, "%lx-%lx ", &a, &b) == 2)
      in = a >= lo && a < hi;
    else if (in && sscanf(line, "Rss: %lld", &v) == 1)
      *rss_kb += v;
    else if (in && sscanf(line, "Pss: %lld", &v) == 1)
      *pss_kb += v;
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
  if (pk_rd32(m + e) != pk_crc_of(m, e))
    err = fc_error_set(FC_EFORMAT, "pack %s: header fails its CRC check", p->path);
  for (int s = 0; s < S_COUNT && !err; s++) {
    if (!pk_sec_present(s, p->info.ncrops)) continue;
    for (; pos < p->off[s] && !err; pos++)
      if (m[pos] != 0)
        err = fc_error_set(FC_EFORMAT, "pack %s: byte %llu between sections is not zero", p->path,
                           (unsigned long long)pos);
    uint32_t got = pk_crc_of(m + p->off[s], p->len[s]);
    if (!err && got != p->crc[s])
      err = fc_error_set(FC_EFORMAT,
                         "pack %s: section '%s' fails its CRC check (stored "
                         "0x%08x, computed 0x%08x)",
                         p->path, pk_sec_name[s], p->crc[s], got);
    pos = p->off[s] + p->len[s];
  }
  munmap(m, p->size);
  return err;
}
