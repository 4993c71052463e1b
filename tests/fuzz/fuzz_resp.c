/* libFuzzer: what a Redis server may send (core/resp.h). The bytes are parsed whole with small
 * limits, and fed as the client feeds them, in two pieces cut where the first byte says: the
 * first piece must ask for more while it is a beginning of the whole's reply, parse to the same
 * tree when it holds it, and stay refused once refused (errors never depend on bytes after
 * them). Every tree is walked (types, lengths, NUL-terminated strings, node counts within the
 * limits); a refusal must be FC_EFORMAT with a detail. Every tree is also read as the video
 * job store on Redis reads its answers (a job's hash, a stream entry: jobs/vstore_redis.c). */
#include "core/resp.h"
#include "fuzz.h"
#include "jobs/vstore_internal.h"

#include <math.h>
#include <stdlib.h>

static const fc_resp_limits lim = {
    .max_depth = 8, .max_bulk = 1024, .max_elements = 512, .max_line = 256, .max_total = 4096};

static size_t walk(const fc_resp *r, int depth) {
  if (depth > lim.max_depth + 1) __builtin_trap();
  size_t nodes = 1;
  switch (r->type) {
  case FC_RESP_STRING:
  case FC_RESP_ERROR:
  case FC_RESP_BULK:
  case FC_RESP_BIGNUM:
  case FC_RESP_VERBATIM:
  case FC_RESP_DOUBLE:
    if (!r->str || r->str[r->len] != 0 || r->elem) __builtin_trap();
    break;
  case FC_RESP_INTEGER:
  case FC_RESP_NIL:
  case FC_RESP_BOOL:
    if (r->str || r->elem || r->n) __builtin_trap();
    break;
  case FC_RESP_ARRAY:
  case FC_RESP_SET:
  case FC_RESP_PUSH:
  case FC_RESP_MAP:
    if ((r->n && !r->elem) || (r->type == FC_RESP_MAP && r->n % 2)) __builtin_trap();
    for (size_t i = 0; i < r->n; i++) nodes += walk(&r->elem[i], depth + 1);
    break;
  default:
    __builtin_trap();
  }
  return nodes;
}

static int same(const fc_resp *a, const fc_resp *b) {
  if (a->type != b->type || a->integer != b->integer || a->len != b->len || a->n != b->n ||
      memcmp(a->fmt, b->fmt, sizeof a->fmt))
    return 0;
  if (a->type == FC_RESP_DOUBLE && !(a->dbl == b->dbl || (isnan(a->dbl) && isnan(b->dbl)))) return 0;
  if (a->str && memcmp(a->str, b->str, a->len)) return 0;
  for (size_t i = 0; i < a->n; i++)
    if (!same(&a->elem[i], &b->elem[i])) return 0;
  return 1;
}

/* Every node of a tree read as the video job store reads Redis' answers (jobs/vstore_redis.c):
 * a job's hash, a stream entry. Either reads it or says it cannot; what it reads is sane. */
static void store_reads(const fc_resp *r) {
  fc_vjob j;
  int err = fc_vstore_redis_read_job(r, &j);
  if (err == 0 && (!j.id[0] || !memchr(j.id, 0, sizeof j.id))) __builtin_trap();
  if (err && err != FC_ENOTFOUND && err != FC_EFORMAT) __builtin_trap();
  if (j.status < FC_VJOB_PENDING || j.status > FC_VJOB_CANCELED) __builtin_trap();
  fc_vjob_clear(&j);
  fc_vwork w;
  err = fc_vstore_redis_read_entry(r, &w);
  if (err != 0 && err != 1) __builtin_trap();
  if (err == 0 && (w.shard < -1 || !fc_vjob_id_valid(w.job) || !memchr(w.entry, 0, sizeof w.entry)))
    __builtin_trap();
  for (size_t i = 0; i < r->n; i++) store_reads(&r->elem[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  size_t cut = data[0] % size;
  data++, size--;
  if (cut > size) cut = size;
  fc_resp *whole = NULL, *part = NULL;
  size_t used = 0, pused = 0;
  int err = fc_resp_parse(data, size, &lim, &whole, &used);
  if (err == FC_EAGAIN) {
    if (whole || used) __builtin_trap();
  } else if (err) {
    if (err != FC_EFORMAT || whole) __builtin_trap();
    fc_fuzz_refusal(err);
  } else {
    if (!whole || used == 0 || used > size || walk(whole, 0) > lim.max_elements) __builtin_trap();
    store_reads(whole);
  }
  /* the first piece alone, as the client sees it before the rest arrives */
  int perr = fc_resp_parse(data, cut, &lim, &part, &pused);
  if (perr == 0) {
    if (err || pused != used || !same(part, whole)) __builtin_trap(); /* prefix-free */
  } else if (perr == FC_EFORMAT) {
    if (err != FC_EFORMAT) __builtin_trap(); /* refused stays refused */
    fc_fuzz_refusal(perr);
  } else if (perr == FC_EAGAIN) {
    if (err == 0 && cut >= used) __builtin_trap(); /* it held the reply yet asked for more */
  } else {
    __builtin_trap();
  }
  fc_resp_free(part);
  /* and the rest appended: a second read into the client's buffer gives the whole's answer */
  if (perr == FC_EAGAIN) {
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, cut);
    memcpy(buf + cut, data + cut, size - cut);
    part = NULL;
    int e2 = fc_resp_parse(buf, size, &lim, &part, &pused);
    if (e2 != err || (!err && (pused != used || !same(part, whole)))) __builtin_trap();
    fc_resp_free(part);
    free(buf);
  }
  fc_resp_free(whole);
  return 0;
}
