/* Checkpoint loading: format detection, the torch containers (zip and legacy stream), the tensor
 * table and float32 reads (API in src/modelfile/checkpoint.h).
 *
 * What: fc_checkpoint_load() maps the file read-only, detects the format from its first bytes and
 * builds a table of tensors (name, dtype, shape, storage pointer, offset, strides). Nothing is
 * copied or converted at load; fc_checkpoint_read_f32() converts one tensor when asked.
 *   zip (torch >= 1.6):  the one entry named data.pkl or ending in /data.pkl gives the prefix;
 *                        its pickle runs in the VM (pickle.c), and each storage key resolves to
 *                        the STORED entry <prefix>data/<key> (zipfile.c). An optional
 *                        <prefix>byteorder record must say "little".
 *   legacy (torch < 1.6): five pickles back to back (magic number, protocol 1001, sys_info,
 *                        the object, the sorted storage keys) and then, per key in that list's
 *                        order, an int64 element count and the raw storage bytes.
 *   safetensors:         safetensors.c validates the header; tensors are contiguous.
 * For torch files the state dict is the top-level dict's "state_dict" value when present, else
 * the top-level dict; its tensor-valued string keys become the table, other values are ignored.
 *
 * Why validate everything up front: the VM checks each view against its storage's declared size,
 * and here each storage's declared size is checked against the bytes present, so a loaded
 * checkpoint can be read without further checks (and concurrently).
 *
 * Ownership: the fc_checkpoint owns the mapping (or borrows the caller's buffer for the _mem
 * form), the tensor table and the names. Limits: FC_TENSOR_MAX_DIMS dimensions, INT_MAX tensors.
 */
#include "modelfile/checkpoint.h"
#include "facecast/error.h"
#include "modelfile/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ck_tensor {
  const uint8_t *data; /* storage start */
  int64_t offset;      /* elements */
  int64_t numel;
  int64_t stride[FC_TENSOR_MAX_DIMS];
} ck_tensor;

struct fc_checkpoint {
  void *map; /* owned mapping, or NULL when the bytes are borrowed */
  size_t map_len;
  int n;
  fc_tensor_info *info; /* names malloc'd */
  ck_tensor *t;
  int *sorted; /* indices ordered by name, for fc_checkpoint_find */
};

static const uint8_t legacy_magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

void fc_checkpoint_destroy(fc_checkpoint *c) {
  if (!c) return;
  if (c->info)
    for (int i = 0; i < c->n; i++) free((char *)c->info[i].name);
  free(c->info);
  free(c->t);
  free(c->sorted);
  if (c->map) munmap(c->map, c->map_len);
  free(c);
}

/* Reserves the table for n tensors (names are filled in as they are added). */
static int table_alloc(fc_checkpoint *c, size_t n, const char *what) {
  if (n > INT_MAX) return fc_error_set(FC_EUNSUPPORTED, "%s: too many tensors (%zu)", what, n);
  size_t m = n ? n : 1;
  c->info = calloc(m, sizeof *c->info);
  c->t = calloc(m, sizeof *c->t);
  c->sorted = calloc(m, sizeof *c->sorted);
  if (!c->info || !c->t || !c->sorted) return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
  return FC_OK;
}

/* Appends a tensor; the name is copied with a leading "module." removed. */
static int table_add(fc_checkpoint *c, const char *name, size_t len, int dtype, int ndim,
                     const int64_t *shape, const int64_t *stride, int64_t offset, int64_t numel,
                     const uint8_t *data, const char *what) {
  char q[FC_QUOTE_SIZE];
  if (memchr(name, 0, len))
    return fc_error_set(FC_EFORMAT, "%s: tensor name '%s' contains a NUL byte", what,
                        fc_quote(q, name, len));
  if (len >= 7 && memcmp(name, "module.", 7) == 0) {
    name += 7;
    len -= 7;
  }
  char *copy = malloc(len + 1);
  if (!copy) return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
  memcpy(copy, name, len);
  copy[len] = 0;
  fc_tensor_info *in = &c->info[c->n];
  ck_tensor *t = &c->t[c->n];
  in->name = copy;
  in->dtype = (fc_dtype)dtype;
  in->ndim = ndim;
  memcpy(in->shape, shape, (size_t)ndim * sizeof *shape);
  memcpy(t->stride, stride, (size_t)ndim * sizeof *stride);
  t->offset = offset;
  t->numel = numel;
  t->data = data;
  c->sorted[c->n] = c->n;
  c->n++;
  return FC_OK;
}

typedef struct name_ref {
  const char *name;
  int index;
} name_ref;

static int cmp_ref(const void *a, const void *b) {
  return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

/* Sorts the name index and rejects duplicate names ("module.x" next to "x" included). */
static int table_finish(fc_checkpoint *c, const char *what) {
  int n = c->n, *a = c->sorted;
  name_ref *refs = malloc((n ? (size_t)n : 1) * sizeof *refs);
  if (!refs) return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
  for (int i = 0; i < n; i++) refs[i] = (name_ref){c->info[i].name, i};
  qsort(refs, (size_t)n, sizeof *refs, cmp_ref);
  for (int i = 0; i < n; i++) a[i] = refs[i].index;
  free(refs);
  for (int i = 1; i < n; i++)
    if (strcmp(c->info[a[i - 1]].name, c->info[a[i]].name) == 0) {
      char q[FC_QUOTE_SIZE];
      const char *nm = c->info[a[i]].name;
      return fc_error_set(FC_EFORMAT, "%s: duplicate tensor name '%s'", what,
                          fc_quote(q, nm, strlen(nm)));
    }
  return FC_OK;
}

/* ---- torch: from the unpickled object to the table ---- */

static int add_state_dict(fc_checkpoint *c, const pv *root, const char *what) {
  if (root->type != PV_DICT)
    return fc_error_set(FC_EUNSUPPORTED, "%s: the checkpoint holds a %s, not a dict of tensors",
                        what, pk_type_name(root));
  const pv *sd = pk_dict_get(root, "state_dict");
  if (sd && sd->type != PV_DICT)
    return fc_error_set(FC_EFORMAT, "%s: 'state_dict' is a %s, not a dict", what,
                        pk_type_name(sd));
  if (!sd) sd = root;
  size_t n = 0;
  for (uint32_t i = 0; i < sd->u.seq.n; i++)
    if (sd->u.seq.v[2 * i]->type == PV_STR && sd->u.seq.v[2 * i + 1]->type == PV_TENSOR) n++;
  int err = table_alloc(c, n, what);
  for (uint32_t i = 0; !err && i < sd->u.seq.n; i++) {
    const pv *k = sd->u.seq.v[2 * i], *v = sd->u.seq.v[2 * i + 1];
    if (k->type != PV_STR || v->type != PV_TENSOR) continue;
    const pk_tensor *t = v->u.t;
    err = table_add(c, k->u.str.s, k->u.str.n, t->st->dtype, t->ndim, t->size, t->stride,
                    t->offset, t->numel, t->st->data, what);
  }
  return err ? err : table_finish(c, what);
}

static int storage_bytes(const pk_storage *st, uint64_t *bytes) {
  int64_t b;
  if (!fc_mul_i64(st->numel, fc_el_size(st->dtype), &b)) return 0;
  *bytes = (uint64_t)b;
  return 1;
}

static int load_legacy(fc_checkpoint *c, const uint8_t *buf, size_t size, const char *what) {
  pk_vm *vm = pk_vm_new(what);
  if (!vm) return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
  const pv *v[5];
  size_t pos = 0, used;
  int err = FC_OK;
  char q[FC_QUOTE_SIZE];
  for (int k = 0; k < 5; k++) {
    if ((err = pk_run(vm, buf + pos, size - pos, pos, k == 3, &used, &v[k]))) goto done;
    pos += used;
    if (k == 0 && (v[0]->type != PV_BIGINT || v[0]->u.str.n != sizeof legacy_magic ||
                   memcmp(v[0]->u.str.s, legacy_magic, sizeof legacy_magic) != 0)) {
      err = fc_error_set(FC_EFORMAT, "%s: not a PyTorch checkpoint (a pickle without torch's "
                         "magic number)", what);
      goto done;
    }
    if (k == 1 && (v[1]->type != PV_INT || v[1]->u.i != 1001)) {
      err = fc_error_set(FC_EUNSUPPORTED, "%s: legacy torch protocol version is not 1001", what);
      goto done;
    }
    if (k == 2) {
      const pv *le = pk_dict_get(v[2], "little_endian");
      if (v[2]->type != PV_DICT) {
        err = fc_error_set(FC_EFORMAT, "%s: legacy sys_info is a %s, not a dict", what,
                           pk_type_name(v[2]));
        goto done;
      }
      if (le && le->type == PV_BOOL && !le->u.i) {
        err = fc_error_set(FC_EUNSUPPORTED, "%s: big-endian checkpoints are not supported", what);
        goto done;
      }
    }
  }
  if (v[4]->type != PV_LIST) {
    err = fc_error_set(FC_EFORMAT, "%s: legacy storage key list is a %s", what,
                       pk_type_name(v[4]));
    goto done;
  }
  /* Storage data, in key-list order: int64 element count, then the elements. */
  for (uint32_t i = 0; i < v[4]->u.seq.n; i++) {
    const pv *key = v[4]->u.seq.v[i];
    if (key->type != PV_STR) {
      err = fc_error_set(FC_EFORMAT, "%s: legacy storage key %u is a %s", what, i,
                         pk_type_name(key));
      goto done;
    }
    pk_storage *st = pk_find_storage(vm, key->u.str.s, key->u.str.n);
    fc_quote(q, key->u.str.s, key->u.str.n);
    if (!st || st->data) {
      err = fc_error_set(FC_EFORMAT, "%s: legacy storage key '%s' is %s", what, q,
                         st ? "listed twice" : "not used by any tensor");
      goto done;
    }
    if (size - pos < 8) {
      err = fc_error_set(FC_EFORMAT, "%s: truncated: storage %s header needs 8 bytes at %zu, %zu "
                         "present", what, q, pos, size - pos);
      goto done;
    }
    uint64_t count = 0, bytes;
    for (int b = 7; b >= 0; b--) count = count << 8 | buf[pos + (size_t)b];
    pos += 8;
    if (count != (uint64_t)st->numel) {
      err = fc_error_set(FC_EFORMAT, "%s: storage %s holds %llu elements, its tensors declare "
                         "%lld", what, q, (unsigned long long)count, (long long)st->numel);
      goto done;
    }
    if (!storage_bytes(st, &bytes)) {
      err = fc_error_set(FC_EFORMAT, "%s: storage %s size overflows (%lld elements)", what, q,
                         (long long)st->numel);
      goto done;
    }
    if (bytes > size - pos) {
      err = fc_error_set(FC_EFORMAT, "%s: truncated: storage %s needs %llu bytes at %zu, %zu "
                         "present", what, q, (unsigned long long)bytes, pos, size - pos);
      goto done;
    }
    st->data = buf + pos;
    pos += (size_t)bytes;
  }
  for (pk_storage *st = pk_storages(vm); st; st = st->next)
    if (!st->data) {
      err = fc_error_set(FC_EFORMAT, "%s: storage %s has no data", what,
                         fc_quote(q, st->key, st->key_len));
      goto done;
    }
  err = add_state_dict(c, v[3], what);
done:
  pk_vm_free(vm);
  return err;
}

/* The entry <prefix><suffix>, or NULL. */
static const fc_zip_entry *zip_get(const fc_zip_entry *e, size_t n, const char *prefix,
                                   size_t plen, const char *suffix, size_t slen) {
  char stack[256];
  char *name = plen + slen <= sizeof stack ? stack : malloc(plen + slen);
  if (!name) return NULL;
  memcpy(name, prefix, plen);
  memcpy(name + plen, suffix, slen);
  const fc_zip_entry *r = fc_zip_find(e, n, name, plen + slen);
  if (name != stack) free(name);
  return r;
}

static int load_zip(fc_checkpoint *c, const uint8_t *buf, size_t size, const char *what) {
  fc_zip_entry *e = NULL;
  size_t n = 0;
  pk_vm *vm = NULL;
  char q[FC_QUOTE_SIZE];
  int err = fc_zip_open(buf, size, what, &e, &n);
  if (err) return err;
  const fc_zip_entry *pkl = NULL;
  for (size_t i = 0; i < n; i++) {
    size_t l = e[i].name_len;
    if (l >= 8 && memcmp(e[i].name + l - 8, "data.pkl", 8) == 0 &&
        (l == 8 || e[i].name[l - 9] == '/')) {
      if (pkl) {
        err = fc_error_set(FC_EFORMAT, "%s: the archive holds more than one data.pkl", what);
        goto done;
      }
      pkl = &e[i];
    }
  }
  if (!pkl) {
    err = fc_error_set(FC_EFORMAT, "%s: zip archive without data.pkl (not a PyTorch "
                       "checkpoint)", what);
    goto done;
  }
  const char *prefix = pkl->name;
  size_t plen = pkl->name_len - 8;
  /* The pickle is small, so its CRC is checked (storages are not: that would read the whole
   * file at load). Fuzzing builds skip it so that mutated pickles reach the VM. */
#ifndef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  if (fc_crc32(pkl->data, (size_t)pkl->size) != pkl->crc) {
    err = fc_error_set(FC_EFORMAT, "%s: zip entry '%s' fails its CRC check", what,
                       fc_quote(q, pkl->name, pkl->name_len));
    goto done;
  }
#endif
  const fc_zip_entry *bo = zip_get(e, n, prefix, plen, "byteorder", 9);
  if (bo && !(bo->size == 6 && memcmp(bo->data, "little", 6) == 0)) {
    err = fc_error_set(bo->size == 3 && memcmp(bo->data, "big", 3) == 0 ? FC_EUNSUPPORTED
                       : FC_EFORMAT, "%s: byteorder record says '%s'; only little-endian "
                       "checkpoints are supported", what,
                       fc_quote(q, (const char *)bo->data, (size_t)bo->size));
    goto done;
  }
  vm = pk_vm_new(what);
  if (!vm) {
    err = fc_error_set(FC_ENOMEM, "%s: out of memory", what);
    goto done;
  }
  const pv *root;
  size_t used;
  if ((err = pk_run(vm, pkl->data, (size_t)pkl->size, (size_t)(pkl->data - buf), 1, &used,
                    &root)))
    goto done;
  for (pk_storage *st = pk_storages(vm); st; st = st->next) {
    char *sfx = malloc(5 + (size_t)st->key_len);
    if (!sfx) {
      err = fc_error_set(FC_ENOMEM, "%s: out of memory", what);
      goto done;
    }
    memcpy(sfx, "data/", 5);
    memcpy(sfx + 5, st->key, st->key_len);
    const fc_zip_entry *d = zip_get(e, n, prefix, plen, sfx, 5 + (size_t)st->key_len);
    free(sfx);
    uint64_t bytes;
    fc_quote(q, st->key, st->key_len);
    if (!d) {
      err = fc_error_set(FC_EFORMAT, "%s: storage %s has no entry data/%s in the archive", what,
                         q, q);
      goto done;
    }
    if (!storage_bytes(st, &bytes)) {
      err = fc_error_set(FC_EFORMAT, "%s: storage %s size overflows (%lld elements)", what, q,
                         (long long)st->numel);
      goto done;
    }
    if (bytes > d->size) {
      err = fc_error_set(FC_EFORMAT, "%s: truncated: storage %s needs %llu bytes, %llu present",
                         what, q, (unsigned long long)bytes, (unsigned long long)d->size);
      goto done;
    }
    st->data = d->data;
  }
  err = add_state_dict(c, root, what);
done:
  pk_vm_free(vm);
  free(e);
  return err;
}

static int load_safetensors(fc_checkpoint *c, const uint8_t *buf, size_t size, const char *what) {
  fc_st_tensor *t = NULL;
  size_t n = 0;
  const uint8_t *data;
  int err = fc_st_parse(buf, size, what, &t, &n, &data);
  if (!err) err = table_alloc(c, n, what);
  for (size_t i = 0; !err && i < n; i++) {
    int64_t stride[FC_TENSOR_MAX_DIMS], numel = 1;
    for (int k = t[i].ndim - 1; k >= 0; k--) {
      stride[k] = numel; /* C order; the product was checked by the parser */
      numel *= t[i].shape[k];
    }
    err = table_add(c, t[i].name, strlen(t[i].name), t[i].dtype, t[i].ndim, t[i].shape, stride,
                    0, numel, data + t[i].begin, what);
  }
  if (!err) err = table_finish(c, what);
  fc_st_free(t, n);
  return err;
}

static int detect(const uint8_t *b, size_t size, const char *what) {
  if (size == 0) return fc_error_set(FC_EFORMAT, "%s: empty file", what);
  if (size >= 4 && b[0] == 'P' && b[1] == 'K' &&
      ((b[2] == 3 && b[3] == 4) || (b[2] == 5 && b[3] == 6)))
    return FC_CKPT_ZIP;
  if (b[0] == 0x80) return FC_CKPT_LEGACY;
  if (size >= 9 && b[8] == '{' && b[5] == 0 && b[6] == 0 && b[7] == 0) return FC_CKPT_SAFETENSORS;
  if (size >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
    return fc_error_set(FC_EUNSUPPORTED, "%s: a NumPy .npy file, not a checkpoint", what);
  if (size >= 262 && memcmp(b + 257, "ustar", 5) == 0)
    return fc_error_set(FC_EUNSUPPORTED, "%s: the tar-based torch format (torch < 0.4) is not "
                        "supported", what);
  char hex[3 * 8 + 1] = "";
  for (size_t i = 0; i < 8 && i < size; i++) snprintf(hex + 3 * i, 4, "%02x ", b[i]);
  hex[strlen(hex) - 1] = 0;
  return fc_error_set(FC_EFORMAT, "%s: not a PyTorch checkpoint (starts with %s)", what, hex);
}

fc_checkpoint *fc_checkpoint_load_mem(const void *data, size_t size, const char *name, int format,
                                      int *err_out) {
  const uint8_t *b = data;
  const char *what = name ? name : "checkpoint";
  fc_checkpoint *c = NULL;
  int err = format;
  if (format == FC_CKPT_AUTO && (err = detect(b, size, what)) < 0) goto fail;
  c = calloc(1, sizeof *c);
  if (!c) {
    err = fc_error_set(FC_ENOMEM, "%s: out of memory", what);
    goto fail;
  }
  switch (err) {
  case FC_CKPT_ZIP: err = load_zip(c, b, size, what); break;
  case FC_CKPT_LEGACY: err = load_legacy(c, b, size, what); break;
  case FC_CKPT_SAFETENSORS: err = load_safetensors(c, b, size, what); break;
  default: err = fc_error_set(FC_EINVAL, "%s: unknown checkpoint format %d", what, format);
  }
  if (err) goto fail;
  if (err_out) *err_out = FC_OK;
  return c;
fail:
  fc_checkpoint_destroy(c);
  if (err_out) *err_out = err;
  return NULL;
}

fc_checkpoint *fc_checkpoint_load(const char *path, int *err_out) {
  int err;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    err = fc_error_set(errno == ENOENT ? FC_ENOTFOUND : FC_EIO, "%s: %s", path, strerror(errno));
    if (err_out) *err_out = err;
    return NULL;
  }
  struct stat st;
  void *map = NULL;
  size_t len = 0;
  fc_checkpoint *c = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    err = fc_error_set(FC_EIO, "%s: not a regular file", path);
    goto done;
  }
  len = (size_t)st.st_size;
  if (len == 0) {
    err = fc_error_set(FC_EFORMAT, "%s: empty file", path);
    goto done;
  }
  /* One read-only mapping: pages are read on first touch, and tensors are converted straight
   * out of it, so a 400 MB checkpoint costs no copy. */
  map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) {
    map = NULL;
    err = fc_error_set(FC_EIO, "%s: mmap failed: %s", path, strerror(errno));
    goto done;
  }
  c = fc_checkpoint_load_mem(map, len, path, FC_CKPT_AUTO, &err);
  if (c) {
    c->map = map;
    c->map_len = len;
    map = NULL;
  }
done:
  if (map) munmap(map, len);
  close(fd);
  if (err_out) *err_out = err;
  return c;
}

int fc_checkpoint_count(const fc_checkpoint *c) { return c ? c->n : 0; }

const fc_tensor_info *fc_checkpoint_info(const fc_checkpoint *c, int i) {
  return c && i >= 0 && i < c->n ? &c->info[i] : NULL;
}

int64_t fc_checkpoint_numel(const fc_checkpoint *c, int i) {
  return c && i >= 0 && i < c->n ? c->t[i].numel : -1;
}

int fc_checkpoint_find(const fc_checkpoint *c, const char *name) {
  if (!c || !name) return -1;
  int lo = 0, hi = c->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, k = c->sorted[mid];
    int d = strcmp(c->info[k].name, name);
    if (d == 0) return k;
    if (d < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

int fc_checkpoint_read_f32(const fc_checkpoint *c, int i, float *out, size_t count) {
  if (!c || i < 0 || i >= c->n)
    return fc_error_set(FC_EINVAL, "checkpoint: tensor index %d out of range", i);
  const fc_tensor_info *in = &c->info[i];
  const ck_tensor *t = &c->t[i];
  if ((uint64_t)t->numel != count)
    return fc_error_set(FC_EINVAL, "checkpoint: tensor '%s' has %lld elements, %zu requested",
                        in->name, (long long)t->numel, count);
  if (count && !out) return fc_error_set(FC_EINVAL, "checkpoint: NULL output");
  fc_convert_strided(t->data, in->dtype, 0, in->ndim, in->shape, t->stride, t->offset, out);
  return FC_OK;
}
