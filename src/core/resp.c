/* Redis replies parsed (see resp.h for the contract).
 *
 * Design: one recursive walker, run twice over the same bytes. The first pass only checks and
 * counts (nodes, string bytes) and stops at the first byte missing (FC_EAGAIN) or wrong
 * (FC_EFORMAT); nothing is allocated, so a reply that declares a billion elements but sends
 * three costs three. Once a whole reply is there, one block is allocated for all its nodes and
 * string bytes and the second pass fills it, so a tree is freed with one free(). A reply cut
 * by the network is simply scanned again on the next call: RESP replies are prefix-free (no
 * complete reply is the beginning of a longer one), so the only state is the caller's buffer,
 * and re-scanning is cheap next to a read (bulk payloads are skipped, not scanned).
 * Errors are decided by the bytes before them, so a prefix that is refused stays refused
 * however many bytes follow (the fuzz target checks this). The walker's recursion is bounded
 * by max_depth; RESP3 attributes ("|"), which only annotate the value after them, are checked
 * and dropped in a loop, not by recursion. */
#include "core/resp.h"

#include "facecast/error.h"

#include <glib.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const fc_resp_limits fc_resp_default_limits = {
    .max_depth = 16,
    .max_bulk = 64u << 20,
    .max_elements = 1u << 20,
    .max_line = 64u << 10,
    .max_total = 256u << 20,
};

typedef struct {
  const unsigned char *b;
  size_t len;
  fc_resp_limits lim;
  int build;          /* second pass: fill nodes */
  size_t nodes;       /* counted in both passes (the limit is checked in the first) */
  size_t strbytes;
  fc_resp *pool;      /* build: the block's nodes, pool_used of them handed out */
  size_t pool_used;
  char *arena;        /* build: string bytes after the nodes */
  size_t arena_used;
} walker;

static int bad(size_t at, const char *what) {
  return fc_error_set(FC_EFORMAT, "RESP: byte %zu: %s", at, what);
}

/* The line starting at pos: 0 with the index of its CR in *cr; FC_EAGAIN; FC_EFORMAT. */
static int line(walker *w, size_t pos, size_t *cr) {
  size_t max = w->lim.max_line;
  for (size_t i = pos; i < w->len; i++) {
    unsigned char ch = w->b[i];
    if (i - pos > max) return bad(pos, "line longer than the limit without CRLF");
    if (i >= w->lim.max_total) return bad(pos, "reply larger than the limit");
    if (ch == '\n') return bad(i, "LF without CR");
    if (ch == '\r') {
      if (i + 1 >= w->len) return FC_EAGAIN;
      if (w->b[i + 1] != '\n') return bad(i, "CR not followed by LF");
      *cr = i;
      return 0;
    }
  }
  if (w->len - pos > max) return bad(pos, "line longer than the limit without CRLF");
  return FC_EAGAIN;
}

/* b[s..e) as a decimal integer (optional '-'), no overflow. */
static int to_ll(walker *w, size_t s, size_t e, long long *out) {
  size_t i = s;
  int neg = 0;
  if (i < e && w->b[i] == '-') neg = 1, i++;
  if (i == e) return bad(s, "empty number");
  unsigned long long v = 0, cap = neg ? (unsigned long long)LLONG_MAX + 1 : LLONG_MAX;
  for (; i < e; i++) {
    unsigned d = w->b[i] - '0';
    if (d > 9) return bad(i, "not a decimal digit in a number");
    if (v > (cap - d) / 10) return bad(s, "number out of the 64-bit range");
    v = v * 10 + d;
  }
  *out = neg ? (long long)(0 - v) : (long long)v; /* two's complement: LLONG_MIN exact */
  return 0;
}

static int count_node(walker *w, size_t at) {
  if (++w->nodes > w->lim.max_elements) return bad(at, "more elements than the limit");
  return 0;
}

/* Copies b[s..s+n) into the arena (build pass) and points node at it. */
static void set_str(walker *w, fc_resp *node, size_t s, size_t n) {
  if (!w->build) {
    w->strbytes += n + 1;
    return;
  }
  if (!node) return;
  char *d = w->arena + w->arena_used;
  memcpy(d, w->b + s, n);
  d[n] = 0;
  w->arena_used += n + 1;
  node->str = d;
  node->len = n;
}

static int value(walker *w, size_t *pos, int depth, fc_resp *node);

/* n children of an aggregate (header already read) at depth+1; node NULL: checked only. */
static int children(walker *w, size_t *pos, int depth, size_t n, fc_resp *node) {
  if (depth + 1 > w->lim.max_depth) return bad(*pos, "nested deeper than the limit");
  if (n > w->lim.max_elements - (w->nodes < w->lim.max_elements ? w->nodes : w->lim.max_elements))
    return bad(*pos, "more elements than the limit");
  fc_resp *kids = NULL;
  if (w->build && node && n) {
    kids = w->pool + w->pool_used;
    w->pool_used += n;
    node->elem = kids;
    node->n = n;
  }
  for (size_t i = 0; i < n; i++) {
    int err = value(w, pos, depth + 1, kids ? kids + i : NULL);
    if (err) return err;
  }
  return 0;
}

/* A length line ("$5", "*3"): -1 allowed where nil_ok. */
static int length(walker *w, size_t s, size_t e, int nil_ok, long long *n) {
  if (e - s == 1 && w->b[s] == '?') return bad(s, "streamed (chunked) aggregates are not supported");
  int err = to_ll(w, s, e, n);
  if (err) return err;
  if (*n < 0 && !(nil_ok && *n == -1)) return bad(s, "negative length");
  return 0;
}

static int value(walker *w, size_t *pos, int depth, fc_resp *node) {
  size_t at, s, cr = 0;
  int err;
  unsigned char t;
  for (;;) { /* attributes first: checked and dropped */
    at = *pos;
    if (at >= w->len) return FC_EAGAIN;
    t = w->b[at];
    s = at + 1;
    if ((err = line(w, s, &cr))) return err;
    if ((err = count_node(w, at))) return err;
    if (t != '|') break;
    long long n;
    if ((err = length(w, s, cr, 0, &n))) return err;
    *pos = cr + 2;
    if ((err = children(w, pos, depth, (size_t)n > SIZE_MAX / 2 ? SIZE_MAX : (size_t)n * 2, NULL)))
      return err;
  }
  if (node) memset(node, 0, sizeof *node);
  *pos = cr + 2;
  size_t n_len = cr - s;
  switch (t) {
  case '+':
  case '-':
    if (node) node->type = t == '+' ? FC_RESP_STRING : FC_RESP_ERROR;
    set_str(w, node, s, n_len);
    return 0;
  case ':': {
    long long v;
    if ((err = to_ll(w, s, cr, &v))) return err;
    if (node) node->type = FC_RESP_INTEGER, node->integer = v;
    return 0;
  }
  case '_':
    if (n_len) return bad(s, "null with a payload");
    if (node) node->type = FC_RESP_NIL;
    return 0;
  case '#':
    if (n_len != 1 || (w->b[s] != 't' && w->b[s] != 'f')) return bad(s, "boolean not t or f");
    if (node) node->type = FC_RESP_BOOL, node->integer = w->b[s] == 't';
    return 0;
  case '(': {
    size_t i = s + (n_len && w->b[s] == '-');
    if (i == cr) return bad(s, "empty big number");
    for (; i < cr; i++)
      if (w->b[i] < '0' || w->b[i] > '9') return bad(i, "not a decimal digit in a big number");
    if (node) node->type = FC_RESP_BIGNUM;
    set_str(w, node, s, n_len);
    return 0;
  }
  case ',': {
    char tmp[128];
    if (n_len == 0 || n_len >= sizeof tmp) return bad(s, "double empty or too long");
    memcpy(tmp, w->b + s, n_len);
    tmp[n_len] = 0;
    char *end = NULL;
    double d = g_ascii_strtod(tmp, &end); /* "inf", "-inf", "nan" too; never the locale's */
    if (end != tmp + n_len || memchr(tmp, 0, n_len)) return bad(s, "not a double");
    if (node) node->type = FC_RESP_DOUBLE, node->dbl = d;
    set_str(w, node, s, n_len);
    return 0;
  }
  case '$':
  case '!':
  case '=': {
    long long n;
    if ((err = length(w, s, cr, t == '$', &n))) return err;
    if (n == -1) {
      if (node) node->type = FC_RESP_NIL;
      return 0;
    }
    if ((unsigned long long)n > w->lim.max_bulk) return bad(s, "bulk string longer than the limit");
    size_t d = cr + 2, end = d + (size_t)n;
    if (end + 2 > w->lim.max_total) return bad(s, "reply larger than the limit");
    if (t == '=') { /* "txt:" then the text; the format must be there before the text is */
      size_t have = w->len > d ? w->len - d : 0;
      if (n < 4) return bad(s, "verbatim string without its format");
      if (have >= 4 && w->b[d + 3] != ':') return bad(d + 3, "verbatim string's format not followed by ':'");
    }
    if (w->len < end + 2) {
      if (w->len > end && w->b[end] != '\r') return bad(end, "bulk string not followed by CRLF");
      return FC_EAGAIN;
    }
    if (w->b[end] != '\r' || w->b[end + 1] != '\n') return bad(end, "bulk string not followed by CRLF");
    *pos = end + 2;
    if (t == '=') {
      if (node) node->type = FC_RESP_VERBATIM, memcpy(node->fmt, w->b + d, 3);
      set_str(w, node, d + 4, (size_t)n - 4);
    } else {
      if (node) node->type = t == '$' ? FC_RESP_BULK : FC_RESP_ERROR;
      set_str(w, node, d, (size_t)n);
    }
    return 0;
  }
  case '*':
  case '~':
  case '>':
  case '%': {
    long long n;
    if ((err = length(w, s, cr, t == '*', &n))) return err;
    if (n == -1) {
      if (node) node->type = FC_RESP_NIL;
      return 0;
    }
    size_t k = (size_t)n;
    if (t == '%') k = k > SIZE_MAX / 2 ? SIZE_MAX : k * 2;
    if (node)
      node->type = t == '*' ? FC_RESP_ARRAY : t == '~' ? FC_RESP_SET : t == '>' ? FC_RESP_PUSH : FC_RESP_MAP;
    return children(w, pos, depth, k, node);
  }
  default: {
    char why[64];
    snprintf(why, sizeof why, "unknown type byte 0x%02x", t);
    return bad(at, why);
  }
  }
}

int fc_resp_parse(const void *buf, size_t len, const fc_resp_limits *lim, fc_resp **out,
                  size_t *used) {
  if (!out || !used || (!buf && len)) return fc_error_set(FC_EINVAL, "fc_resp_parse: NULL argument");
  *out = NULL;
  *used = 0;
  walker w = {.b = buf, .len = len, .lim = fc_resp_default_limits};
  if (lim) {
    if (lim->max_depth > 0) w.lim.max_depth = lim->max_depth;
    if (lim->max_bulk) w.lim.max_bulk = lim->max_bulk;
    if (lim->max_elements) w.lim.max_elements = lim->max_elements;
    if (lim->max_line) w.lim.max_line = lim->max_line;
    if (lim->max_total) w.lim.max_total = lim->max_total;
  }
  size_t pos = 0;
  int err = value(&w, &pos, 0, NULL);
  if (err) return err;
  size_t nodes_bytes = w.nodes * sizeof(fc_resp);
  char *block = malloc(nodes_bytes + w.strbytes + 1);
  if (!block) return fc_error_set(FC_ENOMEM, "RESP: %zu nodes, %zu string bytes", w.nodes, w.strbytes);
  size_t end = pos;
  walker b = {.b = buf, .len = len, .lim = w.lim, .build = 1, .pool = (fc_resp *)block,
              .pool_used = 1, .arena = block + nodes_bytes};
  pos = 0;
  err = value(&b, &pos, 0, b.pool); /* cannot fail: the same bytes passed the first walk */
  if (err || pos != end) {
    free(block);
    return fc_error_set(FC_EFORMAT, "RESP: second pass disagrees with the first");
  }
  *out = b.pool;
  *used = end;
  return 0;
}

void fc_resp_free(fc_resp *r) { free(r); }

const char *fc_resp_type_name(fc_resp_type t) {
  static const char *const names[] = {"simple string", "error", "integer", "bulk string",
                                      "nil", "array", "map", "set", "push", "double",
                                      "boolean", "big number", "verbatim string"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

int fc_resp_command(int argc, const char *const *argv, const size_t *lens, char **out,
                    size_t *out_len) {
  if (!out || !out_len || argc < 1 || !argv) return fc_error_set(FC_EINVAL, "redis command: no arguments");
  *out = NULL;
  *out_len = 0;
  size_t total = 32;
  for (int i = 0; i < argc; i++) {
    if (!argv[i]) return fc_error_set(FC_EINVAL, "redis command: argument %d is NULL", i);
    size_t n = lens ? lens[i] : strlen(argv[i]);
    if (n > SIZE_MAX / 2 - total) return fc_error_set(FC_EINVAL, "redis command: too long");
    total += n + 32;
  }
  char *b = malloc(total);
  if (!b) return fc_error_set(FC_ENOMEM, "redis command: %zu bytes", total);
  size_t o = (size_t)snprintf(b, total, "*%d\r\n", argc);
  for (int i = 0; i < argc; i++) {
    size_t n = lens ? lens[i] : strlen(argv[i]);
    o += (size_t)snprintf(b + o, total - o, "$%zu\r\n", n);
    memcpy(b + o, argv[i], n);
    o += n;
    b[o++] = '\r';
    b[o++] = '\n';
  }
  *out = b;
  *out_len = o;
  return 0;
}
