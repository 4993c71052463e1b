/* facecast error model.
 *
 * Every fallible call returns 0 (FC_OK) or a negative FC_E* code; fc_strerror() names a code.
 * Bad data never aborts: it returns an error and, where the caller shows it to a person, a
 * one-line detail that names the problem ("audio.wav: unsupported WAV format 0x0055"). The
 * detail is thread-local, like dlerror(): set by the failing call, read by its caller.
 */
#ifndef FACECAST_ERROR_H
#define FACECAST_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
  FC_OK = 0,
  FC_ENOMEM = -1,        /* out of memory */
  FC_EINVAL = -2,        /* invalid argument (a programming or usage error) */
  FC_EIO = -3,           /* reading or writing a file failed */
  FC_EFORMAT = -4,       /* malformed or corrupt input data */
  FC_EUNSUPPORTED = -5,  /* well-formed input of a kind facecast does not handle */
  FC_ENOTFOUND = -6,     /* a file or named thing does not exist */
  FC_ENOFACE = -7,       /* no usable face in an image */
  FC_EMEDIA = -8,        /* the media pipeline (GStreamer) failed */
  FC_ETTS = -9,          /* speech synthesis failed */
  FC_EAGAIN = -10,       /* try again after the other side has been served */
  FC_EEOF = -11,         /* end of stream */
  FC_ECANCELED = -12,    /* the operation was cancelled */
  FC_EBUSY = -13,        /* at capacity (every place taken): try again later */
  FC_EREMOTE = -14,      /* a remote service (LLM, TTS, ASR) failed, timed out or answered garbage */
  FC_EEXIST = -15,       /* it exists already (a repeated submission: the earlier one stands) */
};

/* A static string naming err ("malformed data"); never NULL. */
const char *fc_strerror(int err);

/* Records a detail for the calling thread and returns err, so error paths read
 * `return fc_error_set(FC_EFORMAT, "%s: truncated chunk", path);`. */
int fc_error_set(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The detail of the last fc_error_set() on this thread, or fc_strerror(err) of the code passed
 * when no detail was set since the last fc_error_clear(). Never NULL. */
const char *fc_error_detail(int err);

/* Forgets this thread's detail. */
void fc_error_clear(void);

#ifdef __cplusplus
}
#endif
#endif
