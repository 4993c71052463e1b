/* Redis replies (RESP2, and RESP3's extra types where a server sends them), parsed from bytes
 * into a tree; and commands encoded as RESP arrays of binary-safe strings.
 *
 * Pure: no sockets, no GLib. The client (jobs/redis.c) reads into a buffer and calls
 * fc_resp_parse after every read; "not complete yet" (FC_EAGAIN) is told apart from "can never
 * parse" (FC_EFORMAT with a detail naming the byte offset), so a reply cut anywhere by the
 * network costs nothing but a later call. The parser scans first and allocates only once the
 * whole reply is in the buffer, sized by what is actually there, so a hostile length prefix
 * ("*2000000000") cannot make it allocate; nesting, bulk length, element count, line length
 * and the reply's total size are bounded (fc_resp_limits). Fuzzed by tests/fuzz/fuzz_resp.c. */
#ifndef FC_CORE_RESP_H
#define FC_CORE_RESP_H

#include <stddef.h>

typedef enum {
  FC_RESP_STRING,   /* +simple string (str, len) */
  FC_RESP_ERROR,    /* -simple error or RESP3 !blob error (str, len) */
  FC_RESP_INTEGER,  /* :integer (integer) */
  FC_RESP_BULK,     /* $bulk string (str, len; binary) */
  FC_RESP_NIL,      /* $-1, *-1, RESP3 _ */
  FC_RESP_ARRAY,    /* *array (elem, n) */
  FC_RESP_MAP,      /* RESP3 %map: n = 2 x pairs, keys and values alternating in elem */
  FC_RESP_SET,      /* RESP3 ~set (elem, n) */
  FC_RESP_PUSH,     /* RESP3 >push (elem, n) */
  FC_RESP_DOUBLE,   /* RESP3 ,double (dbl; its text in str) */
  FC_RESP_BOOL,     /* RESP3 #t / #f (integer 1 / 0) */
  FC_RESP_BIGNUM,   /* RESP3 (big number (its digits in str) */
  FC_RESP_VERBATIM, /* RESP3 =verbatim string (str without its "txt:" prefix; format in fmt) */
} fc_resp_type;

typedef struct fc_resp fc_resp;
struct fc_resp {
  fc_resp_type type;
  long long integer;
  double dbl;
  const char *str; /* NUL-terminated (binary data may hold NULs too: use len); else NULL */
  size_t len;
  fc_resp *elem; /* children of aggregates, n of them; else NULL */
  size_t n;
  char fmt[4]; /* a verbatim string's format ("txt", "mkd"), NUL-terminated */
};

typedef struct {
  int max_depth;       /* nesting of aggregates (default 16) */
  size_t max_bulk;     /* one bulk/verbatim/blob error's length (default 64 MiB) */
  size_t max_elements; /* nodes in one reply (default 1M) */
  size_t max_line;     /* a simple string/number line (default 64 KiB) */
  size_t max_total;    /* one reply's bytes (default 256 MiB) */
} fc_resp_limits;

/* The defaults above (a zero field in a caller's limits means its default). */
extern const fc_resp_limits fc_resp_default_limits;

/* One reply from the start of buf[0..len): 0 with the tree in *out (free with fc_resp_free)
 * and the bytes it took in *used; FC_EAGAIN when buf holds a correct beginning of a reply
 * (call again with more); FC_EFORMAT with a detail ("RESP: byte 12: ...") when no bytes added
 * can make it a reply, or a limit is passed; FC_ENOMEM. lim may be NULL (defaults). */
int fc_resp_parse(const void *buf, size_t len, const fc_resp_limits *lim, fc_resp **out,
                  size_t *used);

/* Frees a tree from fc_resp_parse (NULL is fine). */
void fc_resp_free(fc_resp *r);

/* A type's name ("bulk", "array"...), for messages. */
const char *fc_resp_type_name(fc_resp_type t);

/* argv[0..argc) (lens[i] bytes each; lens NULL: strlen) as a RESP array of bulk strings, the
 * form every Redis command is sent in: a malloc'd buffer in *out, its length in *out_len.
 * 0, FC_EINVAL (argc < 1, a NULL argument), FC_ENOMEM. */
int fc_resp_command(int argc, const char *const *argv, const size_t *lens, char **out,
                    size_t *out_len);

#endif
