/* Webhook delivery: JSON POSTed to a URL from a thread of its own, signed when a secret is
 * configured, retried with back-off, every attempt recorded for the job that owns it.
 *
 * Why a module: a receiver that is down, slow or rate-limiting must cost the server nothing
 * (the main loop and the job threads only queue), and a client must be able to see what
 * happened to its notifications (the attempts log) and trust where they came from (the
 * signature). Avatar tasks' notifyurl use it today; bulk renders' callback_url will.
 *
 * Each POST carries Content-Type: application/json and
 *   X-Facecast-Event: NAME                  e.g. "task.completed"
 *   X-Facecast-Delivery: UUID               one per delivery, the same on every retry
 *   X-Facecast-Timestamp: UNIX_SECONDS      this attempt's
 *   X-Facecast-Signature: t=TS,v1=HEX       with a secret: HMAC-SHA256(secret, "TS.BODY")
 * A 2xx answer is success. Connection errors, timeouts (5 s), 5xx and 429 are retried after
 * 1, 2, 4, 8 s (or the answer's Retry-After, up to 60 s), 5 attempts in all; other answers
 * are final. The queue holds FC_WEBHOOK_QUEUE deliveries; when full the oldest is dropped
 * (counted, with a warning). */
#ifndef FC_JOBS_WEBHOOK_H
#define FC_JOBS_WEBHOOK_H

#include <glib.h>
#include <stddef.h>

enum {
  FC_WEBHOOK_QUEUE = 256,      /* deliveries waiting (first tries and retries) */
  FC_WEBHOOK_ATTEMPTS = 5,     /* per delivery */
  FC_WEBHOOK_TIMEOUT_S = 5,    /* per attempt: connect and answer */
  FC_WEBHOOK_MAX_DELAY_S = 60, /* a Retry-After is honoured up to this */
  FC_WEBHOOK_LOG_MAX = 64,     /* attempts a log keeps (the latest) */
};

/* ---- pure: tested by tests/test_webhook.c ---- */

/* HMAC-SHA256(key, data) as 64 lowercase hex digits; g_free it. */
char *fc_webhook_hmac_hex(const void *key, size_t key_len, const void *data, size_t len);
/* The X-Facecast-Signature value: "t=TS,v1=" HMAC-SHA256(secret, "TS.BODY"); g_free it. */
char *fc_webhook_signature(const char *secret, gint64 ts, const char *body, size_t len);
/* A Retry-After header (delta-seconds, or an HTTP date against now_s) in seconds, capped at
 * FC_WEBHOOK_MAX_DELAY_S; -1 when absent or unreadable. */
int fc_webhook_retry_after_s(const char *value, gint64 now_s);
/* Whether an attempt that ended so is tried again: status 0 (no answer: connection error,
 * timeout), 429 and 5xx. */
int fc_webhook_retryable(int status);
/* The wait before attempt n+1 after attempt n (1-based) failed: base_ms << (n-1), or the
 * Retry-After (seconds, >= 0) when the answer had one; -1 when no attempt is left. */
gint64 fc_webhook_delay_ms(int attempt, int base_ms, int retry_after_s);

/* ---- the attempts of the deliveries a job made (shared with the sender, refcounted) ---- */
typedef struct fc_webhook_log fc_webhook_log;
fc_webhook_log *fc_webhook_log_new(void);
fc_webhook_log *fc_webhook_log_ref(fc_webhook_log *log);
void fc_webhook_log_unref(fc_webhook_log *log); /* NULL is fine */
/* Appends [{"at": unix seconds, "event", "status": HTTP status | "error": text, "ms"}, ...]. */
void fc_webhook_log_json(fc_webhook_log *log, GString *out);

/* ---- the sender ---- */
typedef struct fc_webhook fc_webhook;
/* secret: NULL or "" = unsigned (copied; never logged). Starts the sender's thread, after
 * making the libsoup classes it needs on the calling thread (why: webhook.c).
 * $FACECAST_WEBHOOK_BACKOFF_MS and $FACECAST_WEBHOOK_TIMEOUT_S shorten the schedule (tests). */
fc_webhook *fc_webhook_new(const char *secret);
/* Stops: an attempt in flight gets up to 3 s, then is cancelled; queued deliveries are dropped
 * (counted in a warning). Returns within 5 s whatever the receivers do (a thread stuck where
 * cancelling cannot reach is left to finish alone). NULL is fine. */
void fc_webhook_free(fc_webhook *w);
/* Queues a POST of json to url (copied); its attempts go to log (may be NULL). Never blocks. */
void fc_webhook_send(fc_webhook *w, const char *url, const char *event, const char *json,
                     fc_webhook_log *log);
/* fc_webhook_send with the request id of what the delivery tells about (a bulk video's
 * X-Request-ID), sent as the X-Request-ID header of every attempt; NULL: none. */
void fc_webhook_send_rid(fc_webhook *w, const char *url, const char *event, const char *json,
                         fc_webhook_log *log, const char *request_id);
/* Deliveries dropped because the queue was full, since the start. */
unsigned fc_webhook_dropped(fc_webhook *w);
/* Deliveries that ended without a 2xx answer (attempts used up, or a final answer such as 400,
 * or a bad URL), since the start. Those dropped at shutdown are not counted. */
unsigned fc_webhook_failures(fc_webhook *w);

#endif
