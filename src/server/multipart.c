/* multipart/form-data (RFC 7578 over RFC 2046), strictly and without allocating; see
 * multipart.h for why not libsoup's. A body is
 *   [preamble CRLF] "--" boundary CRLF headers CRLF CRLF data CRLF "--" boundary ... "--" */
#include "server/multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static int fail(char *why, size_t n, const char *what) {
  snprintf(why, n, "malformed multipart body: %s", what);
  return -1;
}

/* The value of parameter key in a Content-Disposition line [p, end): quoted (with backslash
 * escapes) or a token; 1 if found, 0 if absent, -1 if malformed or too long. */
static int disposition_param(const char *p, const char *end, const char *key, char *out,
                             size_t outn) {
  size_t kl = strlen(key);
  for (const char *q = p; q < end; q++) {
    if (*q != ';') continue;
    const char *k = q + 1;
    while (k < end && (*k == ' ' || *k == '\t')) k++;
    if ((size_t)(end - k) <= kl || strncasecmp(k, key, kl) != 0) continue;
    const char *v = k + kl;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    if (v >= end || *v != '=') continue;
    v++;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    size_t o = 0;
    if (v < end && *v == '"') {
      for (v++; v < end && *v != '"'; v++) {
        if (*v == '\\' && v + 1 < end) v++;
        if (o + 1 >= outn) return -1;
        out[o++] = *v;
      }
      if (v >= end) return -1; /* unterminated */
    } else {
      for (; v < end && *v != ';' && *v != ' ' && *v != '\t'; v++) {
        if (o + 1 >= outn) return -1;
        out[o++] = *v;
      }
    }
    out[o] = 0;
    return 1;
  }
  return 0;
}

/* Reads a part's headers [p, end): its name and file name. */
static int part_headers(const char *p, const char *end, fc_form_part *part) {
  static const char cd[] = "Content-Disposition:";
  while (p < end) {
    const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
    if (!eol) eol = end;
    if ((size_t)(eol - p) > sizeof cd - 1 && strncasecmp(p, cd, sizeof cd - 1) == 0) {
      if (disposition_param(p, eol, "name", part->name, sizeof part->name) < 0) return -1;
      int f = disposition_param(p, eol, "filename", part->filename, sizeof part->filename);
      if (f < 0) return -1;
      part->has_filename = f;
    }
    p = eol + 2;
  }
  return 0;
}

int fc_multipart_parse(const char *body, size_t n, const char *boundary, fc_form_part *parts,
                       int max, char *why, size_t why_size) {
  char delim[80];
  size_t bl = boundary ? strlen(boundary) : 0;
  if (bl == 0 || bl > 70) return fail(why, why_size, "no boundary (1-70 characters)");
  int dl = snprintf(delim, sizeof delim, "\r\n--%s", boundary); /* CRLF, then "--" boundary */
  /* the first delimiter: at the very start (no CRLF before it), or after a preamble */
  const char *p;
  if (n >= (size_t)dl - 2 && memcmp(body, delim + 2, (size_t)dl - 2) == 0) {
    p = body + dl - 2;
  } else {
    const char *f = memmem(body, n, delim, (size_t)dl);
    if (!f) return fail(why, why_size, "no boundary line");
    p = f + dl;
  }
  const char *end = body + n;
  int count = 0;
  for (;;) {
    if (end - p >= 2 && p[0] == '-' && p[1] == '-') return count; /* the closing delimiter */
    while (p < end && (*p == ' ' || *p == '\t')) p++;            /* transport padding */
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return fail(why, why_size, "a boundary line does not end");
    p += 2;
    if (count == max) return fail(why, why_size, "too many parts");
    fc_form_part *part = &parts[count];
    memset(part, 0, sizeof *part);
    const char *hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
    /* a part without headers starts with its blank line */
    if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') hend = p - 2;
    if (!hend) return fail(why, why_size, "a part's headers do not end");
    if (hend > p && part_headers(p, hend, part)) return fail(why, why_size, "a part's Content-Disposition is malformed");
    const char *data = hend + 4;
    const char *next = memmem(data, (size_t)(end - data), delim, (size_t)dl);
    if (!next) return fail(why, why_size, "a part has no closing boundary");
    part->data = data;
    part->size = (size_t)(next - data);
    count++;
    p = next + dl;
  }
}
