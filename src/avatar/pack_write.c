/* Avatar packs: the streaming writer (the format is described atop pack.c). */
#include "avatar/pack_internal.h"
#include "core/stale.h"

/* ---- writer ---- */

/* One section being written: appended at fd's offset base + size, CRC kept as it grows. */
typedef struct spool {
  int fd; /* -1: section absent */
  uint64_t base, size;
  uint32_t crc;
} spool;

struct fc_pack_writer {
  char *path;
  char *tmp;         /* the temporary file's path until it is renamed (NULL after) */
  int no_replace;    /* finish fails rather than replace a pack that appeared meanwhile */
  int fd;            /* the temporary file: header reservation, then the tiles */
  spool sp[S_COUNT]; /* sp[S_TILES].fd is fd; the others own an unlinked file each */
  fc_pack_info info;
  char *meta;          /* the meta object as compact JSON (g_malloc'd) */
  uint64_t reserve;    /* bytes before the tiles section */
  int ntiles;          /* tile positions per frame */
  uint8_t *shown;      /* ntiles x TILE_BYTES: the stored tile each position shows now */
  uint32_t *shown_idx; /* ntiles: its number; the last stored tile table */
  uint8_t *cur;        /* TILE_BYTES: the tile being compared */
  uint64_t tiles;      /* tiles stored */
  uint8_t *last_face;  /* the last stored face (crops, then masks) */
  int added, stored_frames, stored_faces;
  int nclips;
  fc_pack_clip clips[FC_PACK_MAX_CLIPS]; /* audio pointers cleared: the samples are spooled */
  int failed; /* a write failed: the spools are inconsistent, every later call fails */
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
                             pk_sec_name[s], strerror(errno));
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
    return fc_error_set(FC_EIO, "pack %s: cannot create a temporary file beside it: %s", w->path,
                        strerror(e));
  w->sp[s] = (spool){.fd = fd, .crc = pk_crc_of(NULL, 0)};
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
  JsonParser *jp = pk_json_object_parse(meta_json, strlen(meta_json), &root, why, sizeof why);
  if (!jp) return fc_error_set(FC_EINVAL, "pack %s: meta %s", path, why);
  *out = json_to_string(root, FALSE);
  g_object_unref(jp);
  return FC_OK;
}

static uint64_t face_bytes(const fc_pack_info *in) {
  uint64_t n = 0;
  for (int s = S_CROP0; s <= S_MASK1; s++)
    if (pk_sec_present(s, in->ncrops)) n += pk_item_bytes(in, s);
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
  if (!pk_info_ok(info, why, sizeof why)) {
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
  w->ntiles = pk_tiles_per_frame(info);
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
  /* locked from the start: a sweep by another run knows it is in use (core/stale.h) */
  w->fd = fc_stale_mkstemp(tmp);
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
  int nsec = pk_sec_count(info->ncrops);
  uint64_t bound = FIXED + JSON_FIXED_MAX + (uint64_t)FC_PACK_MAX_CLIPS * JSON_CLIP_MAX +
                   strlen(w->meta) + 8 + 8 + (uint64_t)nsec * ENTRY + 4;
  w->reserve = pk_align_up(bound, PAGE);
  w->sp[S_TILES] = (spool){.fd = w->fd, .base = w->reserve, .crc = pk_crc_of(NULL, 0)};
  for (int s = S_TILEMAP; s < S_COUNT; s++)
    if (pk_sec_present(s, info->ncrops) && (err = spool_open(w, s))) goto fail;
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
    if (!pk_sec_present(s, w->info.ncrops)) continue;
    int k = (s - S_CROP0) / 2;
    const uint8_t *src = (s - S_CROP0) % 2 == 0 ? f->crop[k] : f->mask[k];
    size_t n = (size_t)pk_item_bytes(&w->info, s);
    if (memcmp(p, src, n) != 0) return 0;
    p += n;
  }
  return 1;
}

static int put_face(fc_pack_writer *w, const fc_pack_frame *f) {
  uint8_t *p = w->last_face;
  for (int s = S_CROP0; s <= S_MASK1; s++) {
    if (!pk_sec_present(s, w->info.ncrops)) continue;
    int k = (s - S_CROP0) / 2;
    const uint8_t *src = (s - S_CROP0) % 2 == 0 ? f->crop[k] : f->mask[k];
    size_t n = (size_t)pk_item_bytes(&w->info, s);
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
  int tx = t % pk_tiles_x(in), ty = t / pk_tiles_x(in);
  int x0 = tx * TILE, y0 = ty * TILE, w = in->width, h = in->height;
  int vw = w - x0 < TILE ? w - x0 : TILE, vh = h - y0 < TILE ? h - y0 : TILE;
  if (vw < TILE || vh < TILE) memset(tile, 0, TILE_BYTES);
  for (int r = 0; r < vh; r++)
    memcpy(tile + r * TILE, i420 + (size_t)(y0 + r) * w + x0, (size_t)vw);
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
  if (!f || !f->i420)
    return fc_error_set(FC_EINVAL, "pack %s: frame %d has no pixels", w->path, w->added);
  for (int k = 0; k < in->ncrops; k++)
    if (!f->crop[k] || !f->mask[k])
      return fc_error_set(FC_EINVAL, "pack %s: frame %d lacks its crop or mask at %d", w->path,
                          w->added, in->crop_size[k]);
  if (!pk_box_ok(f->box, in, why, sizeof why) || !pk_points_ok(f->landmarks, in, why, sizeof why))
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
  if (!pk_clip_ok(c, w->clips, w->nclips, w->info.frames, why, sizeof why))
    return fc_error_set(FC_EINVAL, "pack %s: %s", w->path, why);
  if (c->audio_rate && !c->audio)
    return fc_error_set(FC_EINVAL, "pack %s: clip '%s' has no audio samples", w->path, c->name);
  if (c->audio_rate && (err = spool_put(w, S_AUDIO, c->audio, (size_t)pk_clip_audio_bytes(c))))
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
      return fc_error_set(FC_EIO, "pack %s: copying section '%s' into place failed: %s", w->path,
                          pk_sec_name[s], r == 0 ? "short read" : strerror(errno));
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
  if (r < 0 || (size_t)r >= cap - *len)
    *ok = 0;
  else
    *len += (size_t)r;
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
    jcat(buf, cap, &len, &ok,
         "%s{\"name\":\"%s\",\"first\":%d,\"count\":%d,\"audio\":", k ? "," : "", c->name, c->first,
         c->count);
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

void fc_pack_writer_no_replace(fc_pack_writer *w) {
  if (w) w->no_replace = 1;
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
    if (!pk_sec_present(s, in->ncrops)) continue;
    off[s] = pk_align_up(end, PAGE);
    if ((err = spool_copy(w, s, off[s], buf))) goto done;
    end = off[s] + w->sp[s].size;
  }
  if (ftruncate(w->fd, (off_t)end) != 0) {
    err = fc_error_set(FC_EIO, "pack %s: sizing the file failed: %s", w->path, strerror(errno));
    goto done;
  }

  /* The header, built in the reserved area's image. */
  size_t table_room = 8 + 8 + (size_t)pk_sec_count(in->ncrops) * ENTRY + 4;
  size_t jlen = header_json(w, (char *)hdr + FIXED, (size_t)w->reserve - FIXED - table_room);
  if (jlen == 0) { /* cannot happen: the reservation bounds every header */
    err = fc_error_set(FC_EINVAL, "pack %s: the header outgrew its reservation", w->path);
    goto done;
  }
  memcpy(hdr, pk_magic, sizeof pk_magic);
  pk_wr32(hdr + 8, FC_PACK_VERSION);
  pk_wr32(hdr + 12, 0);
  pk_wr64(hdr + 16, jlen);
  uint8_t *t = hdr + pk_align_up(FIXED + jlen, 8);
  uint8_t *e = t + 8;
  for (int s = 0; s < S_COUNT; s++) {
    if (!pk_sec_present(s, in->ncrops)) continue;
    memset(e, 0, ENTRY);
    memcpy(e, pk_sec_name[s], strlen(pk_sec_name[s]));
    pk_wr64(e + 16, off[s]);
    pk_wr64(e + 24, w->sp[s].size);
    pk_wr32(e + 32, w->sp[s].crc);
    e += ENTRY;
    nsec++;
  }
  pk_wr32(t, (uint32_t)nsec);
  pk_wr32(e, pk_crc_of(hdr, (uint64_t)(e - hdr)));
  if (pwrite_all(w->fd, hdr, (size_t)(e + 4 - hdr), 0) != 0 || fsync(w->fd) != 0) {
    err = fc_error_set(FC_EIO, "pack %s: writing the header failed: %s", w->path, strerror(errno));
    goto done;
  }
  if (w->no_replace ? renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->path, RENAME_NOREPLACE) != 0
                    : rename(w->tmp, w->path) != 0) {
    err = errno == EEXIST
              ? fc_error_set(FC_EINVAL, "pack %s exists (made meanwhile by someone else); not replaced",
                             w->path)
              : fc_error_set(FC_EIO, "pack %s: rename into place failed: %s", w->path, strerror(errno));
    goto done;
  }
  free(w->tmp);
  w->tmp = NULL;
  w->finished = 1;
  if (sync_dir(w->path) != 0)
    err =
        fc_error_set(FC_EIO, "pack %s: syncing its directory failed: %s", w->path, strerror(errno));
done:
  if (err && !w->finished) w->failed = err;
  free(buf);
  free(hdr);
  return err;
}
