/* Internals shared by the checkpoint readers (checkpoint.c, pickle.c, zipfile.c, safetensors.c,
 * convert.c, npy.c). Not part of the public API.
 *
 * Ownership model: a reader gets the whole file as one read-only byte range (a mapping owned by
 * the fc_checkpoint, or a caller's buffer for the _mem entry points). Everything the parsers
 * produce (strings, storage keys, tensor data) points into that range; nothing is copied except
 * tensor names. The pickle VM owns its objects in an arena freed with pk_vm_free().
 */
#ifndef FC_RUNTIME_CKPT_INTERNAL_H
#define FC_RUNTIME_CKPT_INTERNAL_H

#include "modelfile/checkpoint.h"

#include <stddef.h>
#include <stdint.h>

/* ---- In-memory entry points (used by the file loaders, the tests and the fuzzer). ---- */

enum { FC_CKPT_AUTO, FC_CKPT_ZIP, FC_CKPT_LEGACY, FC_CKPT_SAFETENSORS };

/* Like fc_checkpoint_load() on the bytes data[0..size). The buffer is borrowed: it must stay
 * unchanged and alive until fc_checkpoint_destroy(). name prefixes error details. format forces
 * one parser (FC_CKPT_AUTO detects it). */
fc_checkpoint *fc_checkpoint_load_mem(const void *data, size_t size, const char *name, int format,
                                      int *err);

/* Like fc_npy_read_f32() on the bytes data[0..size). */
int fc_npy_read_mem(const void *data, size_t size, const char *name, float **out,
                    int64_t shape[FC_TENSOR_MAX_DIMS], int *ndim);

/* ---- Element conversion (convert.c). ---- */

/* Element kinds: the fc_dtype values, plus unsigned kinds that only .npy files carry. */
enum { FC_EL_U16 = FC_DT_BOOL + 1, FC_EL_U32, FC_EL_U64 };

int fc_el_size(int kind); /* bytes per element */

/* Checked arithmetic on non-negative int64 values: 0 on overflow. */
int fc_mul_i64(int64_t a, int64_t b, int64_t *out);
int fc_add_i64(int64_t a, int64_t b, int64_t *out);

/* Writes the elements of a strided view to out in logical C order, converted to float32. base is
 * the storage start, offset and strides are in elements; the caller has checked that every
 * addressed element lies inside the storage. big_endian selects the byte order of the stored
 * elements. Loads use memcpy-free byte assembly, so base needs no alignment. */
void fc_convert_strided(const uint8_t *base, int kind, int big_endian, int ndim,
                        const int64_t *shape, const int64_t *stride, int64_t offset, float *out);

/* Copies s[0..n) into buf for an error detail: at most 64 characters, non-printable bytes shown
 * as '?', "..." appended when cut. Returns buf. */
enum { FC_QUOTE_SIZE = 72 };
const char *fc_quote(char buf[FC_QUOTE_SIZE], const char *s, size_t n);

/* ---- Zip directory (zipfile.c). ---- */

typedef struct fc_zip_entry {
  const char *name; /* points into the archive, not NUL-terminated */
  size_t name_len;
  const uint8_t *data; /* the stored bytes */
  uint64_t size;
  uint32_t crc;
} fc_zip_entry;

/* Reads the central directory of the archive buf[0..size): every entry STORED, inside the file,
 * names unique. *entries is malloc'd, sorted by name (memcmp order). */
int fc_zip_open(const uint8_t *buf, size_t size, const char *what, fc_zip_entry **entries,
                size_t *n);
const fc_zip_entry *fc_zip_find(const fc_zip_entry *e, size_t n, const char *name, size_t len);
uint32_t fc_crc32(const uint8_t *p, size_t n);

/* ---- safetensors header (safetensors.c). ---- */

typedef struct fc_st_tensor {
  char *name; /* malloc'd, decoded UTF-8 */
  int dtype;  /* fc_dtype */
  int ndim;
  int64_t shape[FC_TENSOR_MAX_DIMS];
  uint64_t begin, end; /* byte offsets into the data buffer */
  size_t index;        /* position in the header */
} fc_st_tensor;

/* Parses and validates a safetensors file; *out (header order) is freed with fc_st_free();
 * *data_start is where the byte buffer begins. */
int fc_st_parse(const uint8_t *buf, size_t size, const char *what, fc_st_tensor **out,
                size_t *n, const uint8_t **data_start);
void fc_st_free(fc_st_tensor *t, size_t n);

/* ---- Pickle VM (pickle.c). ---- */

enum {
  PV_NONE, PV_BOOL, PV_INT, PV_BIGINT, PV_FLOAT, PV_STR, PV_TUPLE, PV_LIST, PV_DICT,
  PV_GLOBAL, PV_STORAGE, PV_TENSOR, PV_BYTES, PV_DTYPE
};

typedef struct pk_storage {
  const char *key; /* points into the pickle bytes */
  uint32_t key_len;
  int dtype;        /* fc_dtype */
  int64_t numel;    /* elements, as the persistent id states */
  const uint8_t *data; /* set when the container format locates the bytes */
  struct pk_storage *next; /* creation order */
  struct pk_storage *hnext; /* hash chain */
} pk_storage;

typedef struct pk_tensor {
  pk_storage *st;
  int ndim;
  int64_t offset, numel;
  int64_t size[FC_TENSOR_MAX_DIMS], stride[FC_TENSOR_MAX_DIMS];
} pk_tensor;

typedef struct pv {
  int type;
  union {
    int64_t i;       /* PV_INT, PV_BOOL */
    double f;        /* PV_FLOAT */
    struct {         /* PV_STR (UTF-8), PV_BIGINT (little-endian two's complement), PV_BYTES */
      const char *s; /* points into the pickle bytes, not NUL-terminated */
      uint32_t n;
    } str;
    struct {         /* PV_TUPLE, PV_LIST; PV_DICT holds n key/value pairs in v[2i], v[2i+1] */
      struct pv **v;
      uint32_t n, cap;
    } seq;
    int global;      /* PV_GLOBAL: one of the pk_global kinds */
    pk_storage *st;  /* PV_STORAGE */
    pk_tensor *t;    /* PV_TENSOR */
    struct {         /* PV_DTYPE: a numpy integer dtype ('i' or 'u', 1/2/4/8 bytes) */
      char kind;
      uint8_t size, big_endian;
    } dt;
  } u;
} pv;

typedef struct pk_vm pk_vm;

pk_vm *pk_vm_new(const char *what);
void pk_vm_free(pk_vm *vm);

/* Runs one pickle starting at buf[0] (file offset base, for details) up to its STOP. Persistent
 * ids (storages) are accepted only when allow_persid is set. *consumed is the pickle's length.
 * The result lives until pk_vm_free(). */
int pk_run(pk_vm *vm, const uint8_t *buf, size_t len, size_t base, int allow_persid,
           size_t *consumed, const pv **out);

/* The storage record with this key, or NULL. */
pk_storage *pk_find_storage(pk_vm *vm, const char *key, size_t len);

/* The storages the pickles referenced, first-seen order (one record per key). */
pk_storage *pk_storages(pk_vm *vm);

/* The value stored under a string key in a dict (the last one, as Python keeps), or NULL. */
const pv *pk_dict_get(const pv *dict, const char *key);

/* "dict", "list", ... for details. */
const char *pk_type_name(const pv *v);

#endif
