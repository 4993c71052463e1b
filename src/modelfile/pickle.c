/* A minimal, safe pickle VM for PyTorch state dicts.
 *
 * What: runs one pickle (protocols 2-5) and returns the object it builds, as a tree of pv values
 * (None, bool, int, float, str, tuple, list, dict, storage, tensor). It knows only the opcodes
 * torch.save emits for a state dict (formats.md §3.1) and only these globals:
 *   collections.OrderedDict                 called with () -> an empty dict
 *   torch._utils._rebuild_tensor_v2         (storage, offset, size, stride, requires_grad,
 *                                            backward_hooks[, metadata, ...]) -> tensor
 *   torch._utils._rebuild_tensor            (storage, offset, size, stride) -> tensor
 *   torch._utils._rebuild_parameter[_with_state]  (tensor, ...) -> that tensor
 *   torch[.cuda].{Float,Half,BFloat16,Double,Long,Int,Short,Char,Byte,Bool}Storage
 *                                           only as the class inside a persistent id
 * and, for plain data that numpy and Python 2-compatible pickles spell as calls (LiveTalking's
 * coords.pkl holds numpy integers when written from an array):
 *   numpy.dtype                             ('i8'|'u4'|..., False, True) + BUILD (3, '<'|'>'|'|',
 *                                            ...) -> an integer dtype (byte order from the state)
 *   numpy[._]core.multiarray.scalar         (dtype, bytes) -> int
 *   _codecs.encode                          (str, 'latin1') -> bytes (protocol 2's bytes)
 * Persistent ids ('storage', class, key, location, numel[, view_metadata=None]) become storage
 * records, one per key; the container format (zip or legacy stream) later points them at bytes.
 *
 * Why: a pickle is a program for Python's unpickler; loading one with Python runs arbitrary code.
 * Here nothing is ever executed or imported: a GLOBAL outside the list is refused
 * (FC_EUNSUPPORTED, "pickle global os.system is not allowed"), as is any other opcode
 * ("unsupported pickle opcode 0x49 at byte 123"). BUILD's state is discarded (for a state dict it
 * is the OrderedDict's _metadata). Every tensor view is checked against its storage when it is
 * rebuilt, so later reads need no checks.
 *
 * Ownership: every pv, array and storage record belongs to the VM and dies with pk_vm_free().
 * Strings point into the pickle bytes, which the caller keeps alive.
 *
 * Limits (memory stays bounded whatever the input): value stack 1M entries, 1024 nested MARKs,
 * memo indices below 16M and below the pickle's length, 256 MiB of VM heap in all.
 */
#include "facecast/error.h"
#include "modelfile/ckpt_internal.h"

#include <stdlib.h>
#include <string.h>

enum {
  PK_MAX_STACK = 1 << 20,
  PK_MAX_MARKS = 1024,
  PK_MAX_MEMO = 1 << 24,
  PK_CHUNK = 64 * 1024,
};
#define PK_MAX_HEAP ((size_t)256 << 20)

/* Kinds of allowed globals (pv.u.global); storage classes are PK_G_STORAGE + fc_dtype. */
enum {
  PK_G_ODICT = 1,
  PK_G_REBUILD_V2,
  PK_G_REBUILD_V1,
  PK_G_PARAMETER,
  PK_G_NP_DTYPE,
  PK_G_NP_SCALAR,
  PK_G_CODECS_ENCODE,
  PK_G_STORAGE = 16,
};

typedef struct pk_chunk {
  struct pk_chunk *next;
  size_t used, cap;
  max_align_t data[];
} pk_chunk;

struct pk_vm {
  const char *what;   /* file name for details */
  pk_chunk *chunks;   /* bump arena for pv values, tuples and records */
  size_t heap;        /* bytes taken from malloc, checked against PK_MAX_HEAP */
  pv **stack;
  size_t sp, stack_cap;
  size_t marks[PK_MAX_MARKS];
  size_t nmarks;
  pv **memo;
  size_t memo_cap, memo_count;
  pv **growable;      /* lists and dicts, whose item arrays are malloc'd and freed at the end */
  size_t ngrowable, growable_cap;
  pk_storage **st_hash; /* open hash of storages by key; size st_hash_cap (a power of two) */
  size_t st_hash_cap, st_count;
  pk_storage *st_first, *st_last;
};

static pv pv_none = {.type = PV_NONE};
static pv pv_true = {.type = PV_BOOL, .u.i = 1};
static pv pv_false = {.type = PV_BOOL, .u.i = 0};

pk_vm *pk_vm_new(const char *what) {
  pk_vm *vm = calloc(1, sizeof *vm);
  if (vm) vm->what = what ? what : "checkpoint";
  return vm;
}

void pk_vm_free(pk_vm *vm) {
  if (!vm) return;
  for (size_t i = 0; i < vm->ngrowable; i++) free(vm->growable[i]->u.seq.v);
  free(vm->growable);
  free(vm->stack);
  free(vm->memo);
  free(vm->st_hash);
  for (pk_chunk *c = vm->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(vm);
}

pk_storage *pk_storages(pk_vm *vm) { return vm->st_first; }

const char *pk_type_name(const pv *v) {
  switch (v->type) {
  case PV_NONE: return "None";
  case PV_BOOL: return "bool";
  case PV_INT: case PV_BIGINT: return "int";
  case PV_FLOAT: return "float";
  case PV_STR: return "str";
  case PV_TUPLE: return "tuple";
  case PV_LIST: return "list";
  case PV_DICT: return "dict";
  case PV_GLOBAL: return "class or function";
  case PV_STORAGE: return "storage";
  case PV_TENSOR: return "tensor";
  case PV_BYTES: return "bytes";
  case PV_DTYPE: return "numpy dtype";
  default: return "object";
  }
}

static int str_eq(const pv *v, const char *s) {
  size_t n = strlen(s);
  return v->type == PV_STR && v->u.str.n == n && memcmp(v->u.str.s, s, n) == 0;
}

const pv *pk_dict_get(const pv *dict, const char *key) {
  if (!dict || dict->type != PV_DICT) return NULL;
  const pv *found = NULL;
  for (uint32_t i = 0; i < dict->u.seq.n; i++)
    if (str_eq(dict->u.seq.v[2 * i], key)) found = dict->u.seq.v[2 * i + 1];
  return found;
}

/* ---- Memory: everything is accounted against PK_MAX_HEAP. ---- */

static int heap_take(pk_vm *vm, size_t n) {
  if (n > PK_MAX_HEAP - vm->heap) return 0;
  vm->heap += n;
  return 1;
}

static void *arena_alloc(pk_vm *vm, size_t n) {
  n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  pk_chunk *c = vm->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > PK_CHUNK ? n : PK_CHUNK;
    if (!heap_take(vm, sizeof *c + cap)) return NULL;
    c = malloc(sizeof *c + cap);
    if (!c) return NULL;
    c->next = vm->chunks;
    c->used = 0;
    c->cap = cap;
    vm->chunks = c;
  }
  void *p = (char *)c->data + c->used;
  c->used += n;
  return p;
}

/* Grows a malloc'd array to hold at least `need` items of `size` bytes (doubling). */
static int grow(pk_vm *vm, void **arr, size_t *cap, size_t need, size_t size, size_t limit) {
  if (need <= *cap) return 1;
  if (need > limit) return 0;
  size_t n = *cap ? *cap : 16;
  while (n < need) n *= 2;
  if (n > limit) n = limit;
  if (!heap_take(vm, (n - *cap) * size)) return 0;
  void *p = realloc(*arr, n * size);
  if (!p) return 0;
  *arr = p;
  *cap = n;
  return 1;
}

/* ---- The run state: one pickle. ---- */

typedef struct run {
  pk_vm *vm;
  const uint8_t *buf;
  size_t len, pos, op_pos, base;
  int allow_persid;
} run;

#define FAIL(code, ...) fc_error_set(code, __VA_ARGS__)

static int oom(run *r) {
  if (r->vm->heap + PK_CHUNK >= PK_MAX_HEAP)
    return FAIL(FC_EFORMAT, "%s: pickle needs more than %zu MiB of parser memory (at byte %zu)",
                r->vm->what, PK_MAX_HEAP >> 20, r->base + r->op_pos);
  return FAIL(FC_ENOMEM, "%s: out of memory reading the pickle", r->vm->what);
}

static int bad(run *r, const char *what) {
  return FAIL(FC_EFORMAT, "%s: malformed pickle: %s at byte %zu", r->vm->what, what,
              r->base + r->op_pos);
}

static pv *new_pv(run *r, int type) {
  pv *v = arena_alloc(r->vm, sizeof *v);
  if (v) {
    memset(v, 0, sizeof *v);
    v->type = type;
  }
  return v;
}

static int push(run *r, pv *v) {
  pk_vm *vm = r->vm;
  if (!v) return oom(r);
  if (vm->sp == vm->stack_cap) {
    if (vm->sp >= PK_MAX_STACK)
      return FAIL(FC_EFORMAT, "%s: pickle stack deeper than %d entries at byte %zu", vm->what,
                  PK_MAX_STACK, r->base + r->op_pos);
    if (!grow(vm, (void **)&vm->stack, &vm->stack_cap, vm->sp + 1, sizeof *vm->stack,
              PK_MAX_STACK))
      return oom(r);
  }
  vm->stack[vm->sp++] = v;
  return FC_OK;
}

/* The lowest stack position ordinary pops may reach: the innermost MARK. */
static size_t fence(const run *r) { return r->vm->nmarks ? r->vm->marks[r->vm->nmarks - 1] : 0; }

static int pop(run *r, pv **out) {
  if (r->vm->sp <= fence(r)) return bad(r, "stack underflow");
  *out = r->vm->stack[--r->vm->sp];
  return FC_OK;
}

static int pop_mark(run *r, size_t *mark) {
  if (!r->vm->nmarks) return bad(r, "no MARK on the stack");
  *mark = r->vm->marks[--r->vm->nmarks];
  return FC_OK;
}

/* Takes n bytes of opcode argument, or fails as truncated. */
static int take(run *r, size_t n, const uint8_t **p) {
  if (r->len - r->pos < n)
    return FAIL(FC_EFORMAT, "%s: truncated pickle: opcode at byte %zu needs %zu more bytes",
                r->vm->what, r->base + r->op_pos, n);
  *p = r->buf + r->pos;
  r->pos += n;
  return FC_OK;
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int make_tuple(run *r, pv **items, size_t n, pv **out) {
  pv *t = new_pv(r, PV_TUPLE);
  if (!t) return oom(r);
  if (n) {
    t->u.seq.v = arena_alloc(r->vm, n * sizeof *items);
    if (!t->u.seq.v) return oom(r);
    memcpy(t->u.seq.v, items, n * sizeof *items);
  }
  t->u.seq.n = t->u.seq.cap = (uint32_t)n;
  *out = t;
  return FC_OK;
}

static int new_growable(run *r, int type) {
  pk_vm *vm = r->vm;
  pv *v = new_pv(r, type);
  if (!v) return oom(r);
  if (!grow(vm, (void **)&vm->growable, &vm->growable_cap, vm->ngrowable + 1,
            sizeof *vm->growable, SIZE_MAX / sizeof(pv *)))
    return oom(r);
  vm->growable[vm->ngrowable++] = v;
  return push(r, v);
}

/* Appends n values to a list (or n/2 pairs to a dict). */
static int extend(run *r, pv *c, pv **items, size_t n) {
  if (n == 0) return FC_OK; /* an empty APPENDS/SETITEMS on a container with no array yet */
  size_t per = c->type == PV_DICT ? 2 : 1, have = (size_t)c->u.seq.n * per, cap = c->u.seq.cap;
  if (!grow(r->vm, (void **)&c->u.seq.v, &cap, have + n, sizeof(pv *), UINT32_MAX))
    return oom(r);
  c->u.seq.cap = (uint32_t)cap;
  memcpy(c->u.seq.v + have, items, n * sizeof *items);
  c->u.seq.n += (uint32_t)(n / per);
  return FC_OK;
}

/* ---- Memo ---- */

static int memo_put(run *r, uint64_t idx) {
  pk_vm *vm = r->vm;
  if (vm->sp <= fence(r)) return bad(r, "memo store with an empty stack");
  if (idx >= PK_MAX_MEMO || idx > r->len)
    return FAIL(FC_EFORMAT, "%s: pickle memo index %llu out of range at byte %zu", vm->what,
                (unsigned long long)idx, r->base + r->op_pos);
  size_t old = vm->memo_cap;
  if (!grow(vm, (void **)&vm->memo, &vm->memo_cap, (size_t)idx + 1, sizeof *vm->memo,
            PK_MAX_MEMO))
    return oom(r);
  if (vm->memo_cap > old) memset(vm->memo + old, 0, (vm->memo_cap - old) * sizeof *vm->memo);
  if (!vm->memo[idx]) vm->memo_count++;
  vm->memo[idx] = vm->stack[vm->sp - 1];
  return FC_OK;
}

static int memo_get(run *r, uint64_t idx) {
  pk_vm *vm = r->vm;
  if (idx >= vm->memo_cap || !vm->memo[idx])
    return FAIL(FC_EFORMAT, "%s: pickle memo %llu is not set at byte %zu", vm->what,
                (unsigned long long)idx, r->base + r->op_pos);
  return push(r, vm->memo[idx]);
}

/* ---- Globals ---- */

static const struct {
  const char *name;
  int dtype;
} storage_classes[] = {
  {"FloatStorage", FC_DT_F32}, {"HalfStorage", FC_DT_F16},  {"BFloat16Storage", FC_DT_BF16},
  {"DoubleStorage", FC_DT_F64}, {"LongStorage", FC_DT_I64}, {"IntStorage", FC_DT_I32},
  {"ShortStorage", FC_DT_I16}, {"CharStorage", FC_DT_I8},   {"ByteStorage", FC_DT_U8},
  {"BoolStorage", FC_DT_BOOL},
};

static int span_eq(const char *s, size_t n, const char *lit) {
  return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static int global(run *r, const char *mod, size_t mod_len, const char *name, size_t name_len) {
  int kind = 0;
  if (span_eq(mod, mod_len, "collections") && span_eq(name, name_len, "OrderedDict"))
    kind = PK_G_ODICT;
  else if (span_eq(mod, mod_len, "numpy") && span_eq(name, name_len, "dtype"))
    kind = PK_G_NP_DTYPE;
  else if ((span_eq(mod, mod_len, "numpy.core.multiarray") || /* numpy 1.x */
            span_eq(mod, mod_len, "numpy._core.multiarray")) && /* numpy 2.x */
           span_eq(name, name_len, "scalar"))
    kind = PK_G_NP_SCALAR;
  else if (span_eq(mod, mod_len, "_codecs") && span_eq(name, name_len, "encode"))
    kind = PK_G_CODECS_ENCODE;
  else if (span_eq(mod, mod_len, "torch._utils")) {
    if (span_eq(name, name_len, "_rebuild_tensor_v2")) kind = PK_G_REBUILD_V2;
    else if (span_eq(name, name_len, "_rebuild_tensor")) kind = PK_G_REBUILD_V1;
    else if (span_eq(name, name_len, "_rebuild_parameter") ||
             span_eq(name, name_len, "_rebuild_parameter_with_state"))
      kind = PK_G_PARAMETER;
  } else if (span_eq(mod, mod_len, "torch") || span_eq(mod, mod_len, "torch.cuda")) {
    /* torch < 1.6 normalises CUDA storages to torch.*Storage, but accept torch.cuda.* too: the
     * bytes are the same, and location strings ('cuda:0') are ignored anyway. */
    for (size_t k = 0; k < sizeof storage_classes / sizeof *storage_classes; k++)
      if (span_eq(name, name_len, storage_classes[k].name))
        kind = PK_G_STORAGE + storage_classes[k].dtype;
  }
  if (!kind) {
    char qm[FC_QUOTE_SIZE], qn[FC_QUOTE_SIZE];
    fc_quote(qm, mod, mod_len);
    fc_quote(qn, name, name_len);
    if (mod_len >= 5 && memcmp(mod, "torch", 5) == 0 && name_len >= 8 &&
        memcmp(name, "_rebuild", 8) == 0)
      return FAIL(FC_EUNSUPPORTED, "%s: pickle global %s.%s (a tensor kind other than a plain "
                  "dense tensor) is not supported, at byte %zu", r->vm->what, qm, qn,
                  r->base + r->op_pos);
    return FAIL(FC_EUNSUPPORTED, "%s: pickle global %s.%s is not allowed (at byte %zu)",
                r->vm->what, qm, qn, r->base + r->op_pos);
  }
  pv *g = new_pv(r, PV_GLOBAL);
  if (!g) return oom(r);
  g->u.global = kind;
  return push(r, g);
}

/* GLOBAL's argument: "module\nname\n". */
static int op_global(run *r) {
  const char *s[2];
  size_t n[2];
  for (int k = 0; k < 2; k++) {
    const uint8_t *start = r->buf + r->pos;
    const uint8_t *nl = memchr(start, '\n', r->len - r->pos);
    if (!nl)
      return FAIL(FC_EFORMAT, "%s: truncated pickle: GLOBAL at byte %zu has no newline",
                  r->vm->what, r->base + r->op_pos);
    s[k] = (const char *)start;
    n[k] = (size_t)(nl - start);
    r->pos += n[k] + 1;
  }
  return global(r, s[0], n[0], s[1], n[1]);
}

/* ---- Storages (persistent ids) ---- */

static uint32_t hash_key(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
  return h;
}

static int st_rehash(run *r) {
  pk_vm *vm = r->vm;
  size_t cap = vm->st_hash_cap ? vm->st_hash_cap * 2 : 64;
  if (!heap_take(vm, cap * sizeof(pk_storage *))) return oom(r);
  pk_storage **h = calloc(cap, sizeof *h);
  if (!h) return oom(r);
  for (pk_storage *s = vm->st_first; s; s = s->next) {
    size_t b = hash_key(s->key, s->key_len) & (cap - 1);
    s->hnext = h[b];
    h[b] = s;
  }
  free(vm->st_hash);
  vm->st_hash = h;
  vm->st_hash_cap = cap;
  return FC_OK;
}

pk_storage *pk_find_storage(pk_vm *vm, const char *key, size_t len) {
  if (!vm->st_hash_cap) return NULL;
  for (pk_storage *st = vm->st_hash[hash_key(key, len) & (vm->st_hash_cap - 1)]; st;
       st = st->hnext)
    if (st->key_len == len && memcmp(st->key, key, len) == 0) return st;
  return NULL;
}

static int op_persid(run *r) {
  pk_vm *vm = r->vm;
  pv *pid = NULL;
  int err = pop(r, &pid);
  if (err) return err;
  if (!r->allow_persid) return bad(r, "persistent id outside the object pickle");
  if (pid->type != PV_TUPLE || (pid->u.seq.n != 5 && pid->u.seq.n != 6))
    return bad(r, "persistent id is not a 5- or 6-tuple");
  pv **f = pid->u.seq.v;
  if (!str_eq(f[0], "storage")) return bad(r, "persistent id is not a storage");
  if (f[1]->type != PV_GLOBAL || f[1]->u.global < PK_G_STORAGE)
    return bad(r, "persistent id names no storage class");
  if (f[2]->type != PV_STR) return bad(r, "storage key is not a string");
  if (f[4]->type != PV_INT || f[4]->u.i < 0 || f[4]->u.i > INT64_MAX / 8)
    return bad(r, "storage size is not a valid element count");
  if (pid->u.seq.n == 6 && f[5]->type != PV_NONE)
    return FAIL(FC_EUNSUPPORTED, "%s: legacy storage views are not supported (byte %zu)",
                vm->what, r->base + r->op_pos);
  int dtype = f[1]->u.global - PK_G_STORAGE;
  const char *key = f[2]->u.str.s;
  uint32_t key_len = f[2]->u.str.n;
  pk_storage *st = pk_find_storage(vm, key, key_len);
  if (st) {
    if (st->dtype != dtype || st->numel != f[4]->u.i) {
      char q[FC_QUOTE_SIZE];
      return FAIL(FC_EFORMAT, "%s: storage '%s' is declared twice with different types or "
                  "sizes (byte %zu)", vm->what, fc_quote(q, key, key_len), r->base + r->op_pos);
    }
  } else {
    st = arena_alloc(vm, sizeof *st);
    if (!st) return oom(r);
    *st = (pk_storage){.key = key, .key_len = key_len, .dtype = dtype, .numel = f[4]->u.i};
    if (vm->st_last) vm->st_last->next = st;
    else vm->st_first = st;
    vm->st_last = st;
    if (++vm->st_count > vm->st_hash_cap / 2) {
      if ((err = st_rehash(r))) return err; /* the rehash links st in */
    } else {
      size_t b = hash_key(key, key_len) & (vm->st_hash_cap - 1);
      st->hnext = vm->st_hash[b];
      vm->st_hash[b] = st;
    }
  }
  pv *v = new_pv(r, PV_STORAGE);
  if (!v) return oom(r);
  v->u.st = st;
  return push(r, v);
}

/* ---- numpy scalars and protocol 2's bytes: data spelled as calls ---- */

/* numpy.dtype(code, False, True): integer codes only ("i8", "u1", ...). */
static int np_dtype(run *r, pv **a, uint32_t n, pv **out) {
  if (n != 3 || a[0]->type != PV_STR) return bad(r, "numpy.dtype needs (code, align, copy)");
  const char *c = a[0]->u.str.s;
  uint32_t len = a[0]->u.str.n;
  int size = len == 2 ? c[1] - '0' : 0;
  if (len != 2 || (c[0] != 'i' && c[0] != 'u') || (size != 1 && size != 2 && size != 4 && size != 8)) {
    char q[FC_QUOTE_SIZE];
    return FAIL(FC_EUNSUPPORTED, "%s: numpy dtype '%s' is not supported (integers only), at byte %zu",
                r->vm->what, fc_quote(q, c, len), r->base + r->op_pos);
  }
  pv *v = new_pv(r, PV_DTYPE);
  if (!v) return oom(r);
  v->u.dt.kind = c[0], v->u.dt.size = (uint8_t)size; /* byte order: BUILD's state, else little */
  *out = v;
  return FC_OK;
}

/* BUILD on a dtype: the state tuple's second item is the byte order. */
static int np_dtype_state(run *r, pv *dt, const pv *state) {
  if (state->type != PV_TUPLE || state->u.seq.n < 2 || state->u.seq.v[1]->type != PV_STR ||
      state->u.seq.v[1]->u.str.n != 1 || !strchr("<>|=", state->u.seq.v[1]->u.str.s[0]))
    return bad(r, "numpy dtype state without a byte order");
  dt->u.dt.big_endian = state->u.seq.v[1]->u.str.s[0] == '>';
  return FC_OK;
}

/* numpy.core.multiarray.scalar(dtype, bytes) -> int. */
static int np_scalar(run *r, pv **a, uint32_t n, pv **out) {
  if (n != 2 || a[0]->type != PV_DTYPE || a[1]->type != PV_BYTES ||
      a[1]->u.str.n != a[0]->u.dt.size)
    return bad(r, "numpy scalar needs (integer dtype, bytes of its size)");
  const uint8_t *b = (const uint8_t *)a[1]->u.str.s;
  int size = a[0]->u.dt.size;
  uint64_t u = 0;
  for (int k = 0; k < size; k++) u = u << 8 | b[a[0]->u.dt.big_endian ? k : size - 1 - k];
  int neg = a[0]->u.dt.kind == 'i' && (u >> (8 * size - 1) & 1);
  if (neg && size < 8) u |= ~(uint64_t)0 << (8 * size); /* sign-extend */
  if (!neg && u > INT64_MAX)
    return FAIL(FC_EUNSUPPORTED, "%s: numpy uint64 %llu does not fit an int64 (byte %zu)",
                r->vm->what, (unsigned long long)u, r->base + r->op_pos);
  pv *v = new_pv(r, PV_INT);
  if (!v) return oom(r);
  v->u.i = (int64_t)u;
  *out = v;
  return FC_OK;
}

/* _codecs.encode(text, 'latin1'): protocol 2 writes bytes as their Latin-1 text (UTF-8 in the
 * pickle: each byte is one code point below 256). */
static int latin1_bytes(run *r, pv **a, uint32_t n, pv **out) {
  if (n != 2 || a[0]->type != PV_STR || a[1]->type != PV_STR ||
      (!str_eq(a[1], "latin1") && !str_eq(a[1], "latin-1")))
    return FAIL(FC_EUNSUPPORTED, "%s: _codecs.encode other than (text, 'latin1') at byte %zu",
                r->vm->what, r->base + r->op_pos);
  const uint8_t *s = (const uint8_t *)a[0]->u.str.s;
  uint32_t len = a[0]->u.str.n, o = 0;
  uint8_t *d = arena_alloc(r->vm, len ? len : 1);
  if (!d) return oom(r);
  for (uint32_t k = 0; k < len; k++) {
    if (s[k] < 0x80) d[o++] = s[k];
    else if ((s[k] == 0xC2 || s[k] == 0xC3) && k + 1 < len && (s[k + 1] & 0xC0) == 0x80)
      d[o++] = (uint8_t)((s[k] & 0x1F) << 6 | (s[k + 1] & 0x3F)), k++;
    else return bad(r, "_codecs.encode of text that is not Latin-1");
  }
  pv *v = new_pv(r, PV_BYTES);
  if (!v) return oom(r);
  v->u.str.s = (const char *)d;
  v->u.str.n = o;
  *out = v;
  return FC_OK;
}

/* ---- REDUCE: the only "calls" are the allowed rebuild functions. ---- */

static int int_tuple(const pv *t, int64_t *out, int *n) {
  if (t->type != PV_TUPLE) return 0;
  if (t->u.seq.n > FC_TENSOR_MAX_DIMS) return -1;
  for (uint32_t k = 0; k < t->u.seq.n; k++) {
    if (t->u.seq.v[k]->type != PV_INT) return 0;
    out[k] = t->u.seq.v[k]->u.i;
  }
  *n = (int)t->u.seq.n;
  return 1;
}

static int rebuild_tensor(run *r, pv **a, pv **out) {
  pk_vm *vm = r->vm;
  if (a[0]->type != PV_STORAGE) return bad(r, "tensor rebuilt from a non-storage");
  if (a[1]->type != PV_INT || a[1]->u.i < 0) return bad(r, "tensor storage offset is invalid");
  pk_tensor *t = arena_alloc(vm, sizeof *t);
  if (!t) return oom(r);
  memset(t, 0, sizeof *t);
  int nd_size = 0, nd_stride = 0;
  int ok1 = int_tuple(a[2], t->size, &nd_size), ok2 = int_tuple(a[3], t->stride, &nd_stride);
  if (ok1 < 0 || ok2 < 0)
    return FAIL(FC_EUNSUPPORTED, "%s: tensor with more than %d dimensions (byte %zu)", vm->what,
                FC_TENSOR_MAX_DIMS, r->base + r->op_pos);
  if (!ok1 || !ok2 || nd_size != nd_stride) return bad(r, "tensor size/stride are not int tuples");
  t->st = a[0]->u.st;
  t->ndim = nd_size;
  t->offset = a[1]->u.i;
  /* numel with overflow checks, and the last element the view addresses. */
  int64_t numel = 1, last = t->offset;
  for (int k = 0; k < t->ndim; k++) {
    if (t->size[k] < 0 || t->stride[k] < 0) return bad(r, "negative tensor size or stride");
    if (!fc_mul_i64(numel, t->size[k], &numel))
      return FAIL(FC_EFORMAT, "%s: tensor shape product overflows (byte %zu)", vm->what,
                  r->base + r->op_pos);
  }
  if (numel > 0) {
    for (int k = 0; k < t->ndim; k++) {
      int64_t span;
      if (!fc_mul_i64(t->size[k] - 1, t->stride[k], &span) || !fc_add_i64(last, span, &last))
        return FAIL(FC_EFORMAT, "%s: tensor view extent overflows (byte %zu)", vm->what,
                    r->base + r->op_pos);
    }
    if (last >= t->st->numel) {
      char q[FC_QUOTE_SIZE];
      return FAIL(FC_EFORMAT, "%s: tensor view (offset %lld, last element %lld) exceeds storage "
                  "'%s' of %lld elements (byte %zu)", vm->what, (long long)t->offset,
                  (long long)last, fc_quote(q, t->st->key, t->st->key_len),
                  (long long)t->st->numel, r->base + r->op_pos);
    }
  }
  t->numel = numel;
  pv *v = new_pv(r, PV_TENSOR);
  if (!v) return oom(r);
  v->u.t = t;
  *out = v;
  return FC_OK;
}

static int op_reduce(run *r) {
  pv *args = NULL, *fn = NULL, *res = NULL;
  int err;
  if ((err = pop(r, &args)) || (err = pop(r, &fn))) return err;
  if (fn->type != PV_GLOBAL) return bad(r, "REDUCE of a non-callable");
  if (args->type != PV_TUPLE) return bad(r, "REDUCE arguments are not a tuple");
  uint32_t n = args->u.seq.n;
  pv **a = args->u.seq.v;
  switch (fn->u.global) {
  case PK_G_ODICT:
    if (n != 0)
      return FAIL(FC_EUNSUPPORTED, "%s: OrderedDict called with arguments (byte %zu)",
                  r->vm->what, r->base + r->op_pos);
    return new_growable(r, PV_DICT);
  case PK_G_REBUILD_V2: /* torch 2.x may add a metadata argument; extras are ignored */
    if (n < 6) return bad(r, "_rebuild_tensor_v2 needs 6 arguments");
    if ((err = rebuild_tensor(r, a, &res))) return err;
    break;
  case PK_G_REBUILD_V1:
    if (n < 4) return bad(r, "_rebuild_tensor needs 4 arguments");
    if ((err = rebuild_tensor(r, a, &res))) return err;
    break;
  case PK_G_PARAMETER:
    if (n < 1 || a[0]->type != PV_TENSOR) return bad(r, "_rebuild_parameter needs a tensor");
    res = a[0];
    break;
  case PK_G_NP_DTYPE:
    if ((err = np_dtype(r, a, n, &res))) return err;
    break;
  case PK_G_NP_SCALAR:
    if ((err = np_scalar(r, a, n, &res))) return err;
    break;
  case PK_G_CODECS_ENCODE:
    if ((err = latin1_bytes(r, a, n, &res))) return err;
    break;
  default:
    return FAIL(FC_EUNSUPPORTED, "%s: pickle calls a storage class (byte %zu)", r->vm->what,
                r->base + r->op_pos);
  }
  return push(r, res);
}

/* ---- The interpreter loop ---- */

int pk_run(pk_vm *vm, const uint8_t *buf, size_t len, size_t base, int allow_persid,
           size_t *consumed, const pv **out) {
  run rr = {.vm = vm, .buf = buf, .len = len, .base = base, .allow_persid = allow_persid};
  run *r = &rr;
  *out = NULL;
  *consumed = 0;
  vm->sp = 0;
  vm->nmarks = 0;
  vm->memo_count = 0; /* each pickle has its own memo */
  if (vm->memo) memset(vm->memo, 0, vm->memo_cap * sizeof *vm->memo);
  int err = FC_OK;
  for (;;) {
    if (r->pos >= r->len)
      return FAIL(FC_EFORMAT, "%s: truncated pickle: no STOP opcode before byte %zu", vm->what,
                  base + r->len);
    r->op_pos = r->pos;
    uint8_t op = buf[r->pos++];
    const uint8_t *p = NULL;
    pv *v = NULL, *k = NULL, *x = NULL;
    size_t m = 0;
    switch (op) {
    case 0x80: /* PROTO */
      if ((err = take(r, 1, &p))) return err;
      if (p[0] < 2 || p[0] > 5) /* 5 adds out-of-band buffers, which are refused as opcodes */
        return FAIL(FC_EUNSUPPORTED, "%s: pickle protocol %d is not supported (byte %zu)",
                    vm->what, p[0], base + r->op_pos);
      break;
    case 0x95: { /* FRAME: a length hint for buffering; the bytes follow inline */
      if ((err = take(r, 8, &p))) return err;
      uint64_t n = (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
      if (n > r->len - r->pos)
        return FAIL(FC_EFORMAT, "%s: truncated pickle: frame at byte %zu needs %llu bytes",
                    vm->what, base + r->op_pos, (unsigned long long)n);
      break;
    }
    case '.': /* STOP */
      if ((err = pop(r, &v))) return err;
      *out = v;
      *consumed = r->pos;
      return FC_OK;
    case '(': /* MARK */
      if (vm->nmarks == PK_MAX_MARKS)
        return FAIL(FC_EFORMAT, "%s: pickle nests more than %d MARKs (byte %zu)", vm->what,
                    PK_MAX_MARKS, base + r->op_pos);
      vm->marks[vm->nmarks++] = vm->sp;
      break;
    case '}': err = new_growable(r, PV_DICT); break;
    case ']': err = new_growable(r, PV_LIST); break;
    case ')':
      if ((err = make_tuple(r, NULL, 0, &v))) return err;
      err = push(r, v);
      break;
    case 't': /* TUPLE: everything above the innermost MARK */
      if ((err = pop_mark(r, &m))) return err;
      /* (the stack array may not exist yet when the tuple is empty) */
      if ((err = make_tuple(r, vm->sp > m ? vm->stack + m : NULL, vm->sp - m, &v))) return err;
      vm->sp = m;
      err = push(r, v);
      break;
    case 0x85: case 0x86: case 0x87: { /* TUPLE1/2/3 */
      size_t n = (size_t)(op - 0x84);
      if (vm->sp - fence(r) < n) return bad(r, "stack underflow");
      if ((err = make_tuple(r, vm->stack + vm->sp - n, n, &v))) return err;
      vm->sp -= n;
      err = push(r, v);
      break;
    }
    case 'q': /* BINPUT */
      if ((err = take(r, 1, &p))) return err;
      err = memo_put(r, p[0]);
      break;
    case 'r': /* LONG_BINPUT */
      if ((err = take(r, 4, &p))) return err;
      err = memo_put(r, le32(p));
      break;
    case 0x94: /* MEMOIZE */
      err = memo_put(r, vm->memo_count);
      break;
    case 'h': /* BINGET */
      if ((err = take(r, 1, &p))) return err;
      err = memo_get(r, p[0]);
      break;
    case 'j': /* LONG_BINGET */
      if ((err = take(r, 4, &p))) return err;
      err = memo_get(r, le32(p));
      break;
    case 'X': case 0x8c: { /* BINUNICODE (u32 length), SHORT_BINUNICODE (u8 length) */
      size_t n;
      if (op == 'X') {
        if ((err = take(r, 4, &p))) return err;
        n = le32(p);
      } else {
        if ((err = take(r, 1, &p))) return err;
        n = p[0];
      }
      if ((err = take(r, n, &p))) return err;
      if (!(v = new_pv(r, PV_STR))) return oom(r);
      v->u.str.s = (const char *)p;
      v->u.str.n = (uint32_t)n;
      err = push(r, v);
      break;
    }
    case 'C': case 'B': case 0x8e: { /* SHORT_BINBYTES (u8), BINBYTES (u32), BINBYTES8 (u64) */
      uint64_t n;
      if ((err = take(r, op == 'C' ? 1 : op == 'B' ? 4 : 8, &p))) return err;
      n = op == 'C' ? p[0] : op == 'B' ? le32(p) : (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
      if (n > UINT32_MAX || n > r->len - r->pos)
        return FAIL(FC_EFORMAT, "%s: truncated pickle: bytes at byte %zu need %llu bytes",
                    vm->what, base + r->op_pos, (unsigned long long)n);
      if ((err = take(r, (size_t)n, &p))) return err;
      if (!(v = new_pv(r, PV_BYTES))) return oom(r);
      v->u.str.s = (const char *)p;
      v->u.str.n = (uint32_t)n;
      err = push(r, v);
      break;
    }
    case 'K': case 'M': case 'J': { /* BININT1 (u8), BININT2 (u16), BININT (i32) */
      size_t n = op == 'K' ? 1 : op == 'M' ? 2 : 4;
      if ((err = take(r, n, &p))) return err;
      if (!(v = new_pv(r, PV_INT))) return oom(r);
      v->u.i = n == 1 ? p[0] : n == 2 ? (int64_t)(p[0] | p[1] << 8) : (int64_t)(int32_t)le32(p);
      err = push(r, v);
      break;
    }
    case 0x8a: { /* LONG1: length byte + little-endian two's complement */
      if ((err = take(r, 1, &p))) return err;
      size_t n = p[0];
      if ((err = take(r, n, &p))) return err;
      if (n <= 8) {
        uint64_t u = 0;
        for (size_t b = n; b-- > 0;) u = u << 8 | p[b];
        if (n > 0 && n < 8 && (p[n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n); /* sign-extend */
        if (!(v = new_pv(r, PV_INT))) return oom(r);
        v->u.i = (int64_t)u;
      } else { /* wider than int64 (torch's magic number): kept as raw bytes */
        if (!(v = new_pv(r, PV_BIGINT))) return oom(r);
        v->u.str.s = (const char *)p;
        v->u.str.n = (uint32_t)n;
      }
      err = push(r, v);
      break;
    }
    case 'G': { /* BINFLOAT: big-endian double */
      if ((err = take(r, 8, &p))) return err;
      uint64_t u = 0;
      for (int b = 0; b < 8; b++) u = u << 8 | p[b];
      if (!(v = new_pv(r, PV_FLOAT))) return oom(r);
      memcpy(&v->u.f, &u, 8);
      err = push(r, v);
      break;
    }
    case 'N': err = push(r, &pv_none); break;
    case 0x88: err = push(r, &pv_true); break;
    case 0x89: err = push(r, &pv_false); break;
    case 'c': err = op_global(r); break;
    case 0x93: /* STACK_GLOBAL: module and name strings from the stack */
      if ((err = pop(r, &x)) || (err = pop(r, &k))) return err;
      if (k->type != PV_STR || x->type != PV_STR) return bad(r, "STACK_GLOBAL of non-strings");
      err = global(r, k->u.str.s, k->u.str.n, x->u.str.s, x->u.str.n);
      break;
    case 'Q': err = op_persid(r); break;
    case 'R': err = op_reduce(r); break;
    case 'b': /* BUILD: a dtype takes its byte order; other states (an OrderedDict's
               * _metadata) are dropped, not applied */
      if ((err = pop(r, &x))) return err;
      if (vm->sp <= fence(r)) return bad(r, "BUILD without an object");
      if (vm->stack[vm->sp - 1]->type == PV_DTYPE) err = np_dtype_state(r, vm->stack[vm->sp - 1], x);
      break;
    case 's': /* SETITEM */
      if ((err = pop(r, &x)) || (err = pop(r, &k))) return err;
      if (vm->sp <= fence(r) || vm->stack[vm->sp - 1]->type != PV_DICT)
        return bad(r, "SETITEM on a non-dict");
      {
        pv *kv[2] = {k, x};
        err = extend(r, vm->stack[vm->sp - 1], kv, 2);
      }
      break;
    case 'u': case 'e': /* SETITEMS, APPENDS: everything above the MARK into the object below */
      if ((err = pop_mark(r, &m))) return err;
      if (m == 0 || m - 1 < fence(r)) return bad(r, "SETITEMS/APPENDS without a target");
      v = vm->stack[m - 1];
      if (v->type != (op == 'u' ? PV_DICT : PV_LIST))
        return bad(r, op == 'u' ? "SETITEMS on a non-dict" : "APPENDS on a non-list");
      if (op == 'u' && (vm->sp - m) % 2) return bad(r, "SETITEMS with an odd item count");
      err = extend(r, v, vm->stack + m, vm->sp - m);
      vm->sp = m;
      break;
    case 'a': /* APPEND */
      if ((err = pop(r, &x))) return err;
      if (vm->sp <= fence(r) || vm->stack[vm->sp - 1]->type != PV_LIST)
        return bad(r, "APPEND on a non-list");
      err = extend(r, vm->stack[vm->sp - 1], &x, 1);
      break;
    default:
      return FAIL(FC_EUNSUPPORTED, "%s: unsupported pickle opcode 0x%02x at byte %zu", vm->what,
                  op, base + r->op_pos);
    }
    if (err) return err;
  }
}
