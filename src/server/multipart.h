/* multipart/form-data bodies (multipart.c), parsed here rather than by libsoup: the route
 * fuzzer found libsoup 3.2.3's soup_multipart_new_from_message handing out a part of
 * (gsize)-2 bytes for a body with a boundary at its very end (an out-of-bounds read, fixed
 * upstream since). Pure: no libsoup, no allocation; parts point into the body. */
#ifndef FC_SERVER_MULTIPART_H
#define FC_SERVER_MULTIPART_H

#include <stddef.h>

#define FC_MULTIPART_MAX_PARTS 32

typedef struct fc_form_part {
  char name[64];      /* the form field (Content-Disposition name); "" if none */
  char filename[128]; /* its file name, if given ("" otherwise) */
  int has_filename;
  const char *data;   /* the part's bytes, inside the body */
  size_t size;
} fc_form_part;

/* Splits body[0..n) by boundary (the Content-Type's parameter, at most 70 characters, as
 * RFC 2046 says) into at most max parts; the count, or -1 with a reason in why (no input
 * quoted) when the body is not such a form: no first boundary, a part without its header
 * end or closing boundary, too many parts, over-long names. */
int fc_multipart_parse(const char *body, size_t n, const char *boundary, fc_form_part *parts,
                       int max, char *why, size_t why_size);

#endif
