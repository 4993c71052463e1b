/* Error codes and the thread-local error detail (see include/facecast/error.h). */
#include "facecast/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char detail[512];
static _Thread_local int detail_set;

const char *fc_strerror(int err) {
  switch (err) {
  case FC_OK: return "success";
  case FC_ENOMEM: return "out of memory";
  case FC_EINVAL: return "invalid argument";
  case FC_EIO: return "input/output error";
  case FC_EFORMAT: return "malformed data";
  case FC_EUNSUPPORTED: return "unsupported format";
  case FC_ENOTFOUND: return "not found";
  case FC_ENOFACE: return "no face found";
  case FC_EMEDIA: return "media pipeline error";
  case FC_ETTS: return "speech synthesis failed";
  case FC_EAGAIN: return "resource temporarily unavailable";
  case FC_EBUSY: return "at capacity";
  case FC_EREMOTE: return "remote service failed";
  case FC_EEXIST: return "already exists";
  case FC_EEOF: return "end of stream";
  case FC_ECANCELED: return "operation cancelled";
  default: return "unknown error";
  }
}

int fc_error_set(int err, const char *fmt, ...) {
  /* Formatted aside first: an argument may be the current detail itself (a caller adding
   * context, "audio: %s" of fc_error_detail), which vsnprintf into the same buffer garbles. */
  char buf[sizeof detail];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(detail, buf, sizeof detail);
  detail_set = 1;
  return err;
}

const char *fc_error_detail(int err) { return detail_set ? detail : fc_strerror(err); }

void fc_error_clear(void) {
  detail_set = 0;
  detail[0] = 0;
}
