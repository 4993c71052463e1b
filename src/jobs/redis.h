/* A small synchronous Redis client: one connection, one command at a time, each call waiting
 * for its reply within a timeout. The foundation for jobs and shards on Redis Streams (issue
 * 17: XADD / XREADGROUP / XACK / XAUTOCLAIM); nothing in the server uses it yet.
 *
 * Blocking on purpose: its users will be worker threads that do nothing else while Redis
 * answers, never the server's main loop. Replies are parsed by core/resp.h. The connection is
 * made on demand (AUTH and SELECT as the URL says) and dropped on any transport error or
 * timeout, since a half-read reply leaves the stream out of step; the next command connects
 * again. A command is never resent by the client: XADD twice is two entries, so retrying is
 * the caller's decision. One handle is used by one thread at a time. */
#ifndef FC_JOBS_REDIS_H
#define FC_JOBS_REDIS_H

#include "core/resp.h"

#include <stddef.h>

typedef struct fc_redis fc_redis;

typedef struct {
  const char *url;        /* redis://[[user]:password@]host[:port][/db] (port 6379, db 0) */
  int connect_timeout_ms; /* 0: 2000 */
  int io_timeout_ms;      /* one command's send and reply; 0: 5000 (BLOCK must be shorter) */
} fc_redis_params;

/* A client for p->url; does not connect yet. NULL with FC_EINVAL (a bad URL, the detail says
 * why) or FC_ENOMEM in *err. */
fc_redis *fc_redis_create(const fc_redis_params *p, int *err);
void fc_redis_destroy(fc_redis *r);

/* Connects now (and authenticates, selects the database) unless connected: 0, or FC_EIO when
 * the server cannot be reached or the connection fails (detail: address and cause), or
 * FC_EREMOTE when AUTH or SELECT is refused (detail: the server's error text). */
int fc_redis_connect(fc_redis *r);

/* 1 while a connection is open (it may still have been closed by the other end). */
int fc_redis_connected(const fc_redis *r);

/* Sends argv[0..argc) (lens[i] bytes each, binary-safe; lens NULL: strlen) and reads one
 * reply, connecting first if needed: 0 with the reply in *reply (fc_resp_free it); FC_EREMOTE
 * when the server answers with an error (detail: "redis: " and its text, e.g. "redis:
 * BUSYGROUP Consumer Group name already exists"; the connection stays); FC_EIO on a transport
 * error or timeout, FC_EFORMAT on a reply that does not parse (both close the connection: the
 * command may or may not have run). *reply is NULL on every error. */
int fc_redis_command(fc_redis *r, int argc, const char *const *argv, const size_t *lens,
                     fc_resp **reply);

/* fc_redis_command with text arguments, NULL-terminated: fc_redis_cmd(r, &rep, "GET", k, NULL). */
int fc_redis_cmd(fc_redis *r, fc_resp **reply, ...) __attribute__((sentinel));

/* Closes the connection (the next command reconnects). */
void fc_redis_disconnect(fc_redis *r);

#endif
