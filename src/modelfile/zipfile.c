/* A read-only zip directory reader for torch.save archives (STORED entries only).
 *
 * What: locates the end-of-central-directory record (and the ZIP64 locator/record when a field is
 * saturated), walks the central directory, takes each entry's data offset from its LOCAL header
 * (torch pads entries to 64-byte alignment inside the local extra field, which the central
 * directory does not repeat) and returns entries sorted by name for binary search.
 *
 * Why not a library: all we need is "where are the bytes of entry X", with every field checked
 * against the file; decompression is never needed because torch stores entries uncompressed.
 * Compressed or encrypted entries are FC_EUNSUPPORTED; anything inconsistent is FC_EFORMAT.
 *
 * Limits: single-disk archives; at most one entry per 46 bytes of central directory; entry data
 * is not CRC-checked here (the caller checks the small records it parses).
 */
#include "facecast/error.h"
#include "modelfile/ckpt_internal.h"

#include <stdlib.h>
#include <string.h>

enum {
  EOCD_SIZE = 22,
  EOCD64_LOCATOR_SIZE = 20,
  EOCD64_SIZE = 56,
  CENTRAL_SIZE = 46,
  LOCAL_SIZE = 30,
  METHOD_STORED = 0,
};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

uint32_t fc_crc32(const uint8_t *p, size_t n) {
  /* Bitwise CRC-32 (IEEE, reflected): only small records are checked, so no table is needed
   * (and no shared state to initialise across threads). */
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ c >> 1 : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

static int cmp_entry(const void *a, const void *b) {
  const fc_zip_entry *x = a, *y = b;
  size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
  int c = memcmp(x->name, y->name, n);
  if (c) return c;
  return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

const fc_zip_entry *fc_zip_find(const fc_zip_entry *e, size_t n, const char *name, size_t len) {
  fc_zip_entry key = {.name = name, .name_len = len};
  return bsearch(&key, e, n, sizeof *e, cmp_entry);
}

/* Finds the EOCD: the last "PK\5\6" whose comment runs exactly to the end of the file (a
 * signature inside a comment or inside stored data would not satisfy that). */
static int find_eocd(const uint8_t *buf, size_t size, size_t *pos) {
  if (size < EOCD_SIZE) return 0;
  size_t lowest = size - EOCD_SIZE > 65535 ? size - EOCD_SIZE - 65535 : 0;
  for (size_t p = size - EOCD_SIZE + 1; p-- > lowest;) {
    if (buf[p] == 'P' && buf[p + 1] == 'K' && buf[p + 2] == 5 && buf[p + 3] == 6 &&
        p + EOCD_SIZE + rd16(buf + p + 20) == size) {
      *pos = p;
      return 1;
    }
  }
  return 0;
}

int fc_zip_open(const uint8_t *buf, size_t size, const char *what, fc_zip_entry **entries,
                size_t *n_out) {
  *entries = NULL;
  *n_out = 0;
  size_t eocd;
  if (!find_eocd(buf, size, &eocd))
    return fc_error_set(FC_EFORMAT, "%s: zip end-of-central-directory record not found "
                        "(truncated archive?)", what);
  const uint8_t *e = buf + eocd;
  uint64_t disk = rd16(e + 4), cd_disk = rd16(e + 6), n_disk = rd16(e + 8), n_total = rd16(e + 10);
  uint64_t cd_size = rd32(e + 12), cd_off = rd32(e + 16);
  if (n_disk == 0xFFFF || n_total == 0xFFFF || cd_size == 0xFFFFFFFFu ||
      cd_off == 0xFFFFFFFFu || disk == 0xFFFF || cd_disk == 0xFFFF) {
    /* ZIP64: the locator sits right before the EOCD and points at the ZIP64 EOCD record. */
    if (eocd < EOCD64_LOCATOR_SIZE || memcmp(e - EOCD64_LOCATOR_SIZE, "PK\6\7", 4) != 0)
      return fc_error_set(FC_EFORMAT, "%s: zip64 end-of-central-directory locator missing", what);
    const uint8_t *loc = e - EOCD64_LOCATOR_SIZE;
    uint64_t rec = rd64(loc + 8);
    if (rd32(loc + 4) != 0 || rd32(loc + 16) > 1)
      return fc_error_set(FC_EUNSUPPORTED, "%s: multi-disk zip archives are not supported", what);
    if (rec > eocd - EOCD64_LOCATOR_SIZE || eocd - EOCD64_LOCATOR_SIZE - rec < EOCD64_SIZE ||
        memcmp(buf + rec, "PK\6\6", 4) != 0)
      return fc_error_set(FC_EFORMAT, "%s: zip64 end-of-central-directory record at %llu is "
                          "missing or truncated", what, (unsigned long long)rec);
    const uint8_t *r = buf + rec;
    disk = rd32(r + 16);
    cd_disk = rd32(r + 20);
    n_disk = rd64(r + 24);
    n_total = rd64(r + 32);
    cd_size = rd64(r + 40);
    cd_off = rd64(r + 48);
    eocd = (size_t)rec; /* the central directory must end before the ZIP64 record */
  }
  if (disk != 0 || cd_disk != 0 || n_disk != n_total)
    return fc_error_set(FC_EUNSUPPORTED, "%s: multi-disk zip archives are not supported", what);
  if (cd_off > eocd || cd_size > eocd - cd_off)
    return fc_error_set(FC_EFORMAT, "%s: zip central directory (offset %llu, %llu bytes) lies "
                        "outside the file", what, (unsigned long long)cd_off,
                        (unsigned long long)cd_size);
  if (n_total > cd_size / CENTRAL_SIZE)
    return fc_error_set(FC_EFORMAT, "%s: zip claims %llu entries in a %llu-byte central "
                        "directory", what, (unsigned long long)n_total,
                        (unsigned long long)cd_size);
  fc_zip_entry *list = calloc(n_total ? (size_t)n_total : 1, sizeof *list);
  if (!list) return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
  int err = FC_OK;
  char q[FC_QUOTE_SIZE];
  const uint8_t *p = buf + cd_off, *end = buf + cd_off + cd_size;
  for (uint64_t i = 0; i < n_total; i++) {
    if ((size_t)(end - p) < CENTRAL_SIZE || memcmp(p, "PK\1\2", 4) != 0) {
      err = fc_error_set(FC_EFORMAT, "%s: zip central directory entry %llu is corrupt", what,
                         (unsigned long long)i);
      goto fail;
    }
    uint16_t flags = rd16(p + 8), method = rd16(p + 10);
    uint32_t crc = rd32(p + 16);
    uint64_t csize = rd32(p + 20), usize = rd32(p + 24), local = rd32(p + 42);
    size_t name_len = rd16(p + 28), extra_len = rd16(p + 30), comment_len = rd16(p + 32);
    if ((size_t)(end - p) - CENTRAL_SIZE < name_len + extra_len + comment_len) {
      err = fc_error_set(FC_EFORMAT, "%s: zip central directory entry %llu overruns the "
                         "directory", what, (unsigned long long)i);
      goto fail;
    }
    const char *name = (const char *)p + CENTRAL_SIZE;
    const uint8_t *x = p + CENTRAL_SIZE + name_len, *xend = x + extra_len;
    /* ZIP64 extended information: only the saturated fields are present, in this order. */
    if (usize == 0xFFFFFFFFu || csize == 0xFFFFFFFFu || local == 0xFFFFFFFFu) {
      int found = 0;
      while (xend - x >= 4) {
        uint16_t id = rd16(x), len = rd16(x + 2);
        if ((size_t)(xend - x - 4) < len) break;
        if (id == 0x0001) {
          const uint8_t *f = x + 4, *fend = f + len;
          uint64_t *fields[3] = {&usize, &csize, &local};
          int ok = 1;
          for (int k = 0; k < 3; k++) {
            if (*fields[k] != 0xFFFFFFFFu) continue;
            if (fend - f < 8) { ok = 0; break; }
            *fields[k] = rd64(f);
            f += 8;
          }
          if (!ok) {
            err = fc_error_set(FC_EFORMAT, "%s: zip64 extra field of '%s' is too short", what,
                               fc_quote(q, name, name_len));
            goto fail;
          }
          found = 1;
          break;
        }
        x += 4 + len;
      }
      if (!found) {
        err = fc_error_set(FC_EFORMAT, "%s: zip entry '%s' lacks its zip64 extra field", what,
                           fc_quote(q, name, name_len));
        goto fail;
      }
    }
    if (flags & 0x41) { /* bit 0: encrypted, bit 6: strong encryption */
      err = fc_error_set(FC_EUNSUPPORTED, "%s: zip entry '%s' is encrypted", what,
                         fc_quote(q, name, name_len));
      goto fail;
    }
    if (method != METHOD_STORED) {
      err = fc_error_set(FC_EUNSUPPORTED, "%s: zip entry '%s' is compressed (method %u); only "
                         "stored entries are supported", what,
                         fc_quote(q, name, name_len), method);
      goto fail;
    }
    if (csize != usize) {
      err = fc_error_set(FC_EFORMAT, "%s: stored zip entry '%s' has compressed size %llu != "
                         "size %llu", what, fc_quote(q, name, name_len),
                         (unsigned long long)csize, (unsigned long long)usize);
      goto fail;
    }
    /* The local header decides where the data starts (its extra field holds torch's padding). */
    if (local > size || size - local < LOCAL_SIZE || memcmp(buf + local, "PK\3\4", 4) != 0) {
      err = fc_error_set(FC_EFORMAT, "%s: zip local header of '%s' at %llu is missing", what,
                         fc_quote(q, name, name_len), (unsigned long long)local);
      goto fail;
    }
    const uint8_t *lh = buf + local;
    uint64_t data = local + LOCAL_SIZE + (uint64_t)rd16(lh + 26) + rd16(lh + 28);
    if (rd16(lh + 26) != name_len || size - local - LOCAL_SIZE < name_len ||
        memcmp(lh + LOCAL_SIZE, name, name_len) != 0) {
      err = fc_error_set(FC_EFORMAT, "%s: zip local header of '%s' names another entry", what,
                         fc_quote(q, name, name_len));
      goto fail;
    }
    if (data > size || usize > size - data) {
      err = fc_error_set(FC_EFORMAT, "%s: truncated: zip entry '%s' needs %llu bytes at %llu, "
                         "file has %zu", what, fc_quote(q, name, name_len),
                         (unsigned long long)usize, (unsigned long long)data, size);
      goto fail;
    }
    list[i] = (fc_zip_entry){.name = name, .name_len = name_len, .data = buf + data,
                             .size = usize, .crc = crc};
    p += CENTRAL_SIZE + name_len + extra_len + comment_len;
  }
  qsort(list, (size_t)n_total, sizeof *list, cmp_entry);
  for (uint64_t i = 1; i < n_total; i++)
    if (cmp_entry(&list[i - 1], &list[i]) == 0) {
      err = fc_error_set(FC_EFORMAT, "%s: zip entry '%s' appears twice", what,
                         fc_quote(q, list[i].name, list[i].name_len));
      goto fail;
    }
  *entries = list;
  *n_out = (size_t)n_total;
  return FC_OK;
fail:
  free(list);
  return err;
}
