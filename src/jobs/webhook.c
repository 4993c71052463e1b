/* Webhook delivery (see webhook.h).
 *
 * One thread per sender owns its SoupSession (libsoup sessions belong to one thread) and a
 * small queue ordered by when each delivery is due; it waits on a condition until the
 * earliest is due, so a receiver in back-off never holds up another's first try, and callers
 * only take a mutex to queue. The schedule and the signature are pure functions, tested on
 * their own (tests/test_webhook.c) against RFC 4231's HMAC-SHA256 vectors.
 *
 * Start-up: the classes the sender needs are made on the caller's thread before the sender
 * thread exists, and that thread makes its session at its first delivery. GObject makes a
 * class under one process-wide lock, and SoupSession's class asks for GInetSocketAddress's
 * type; a server starting registers that type itself (binding its port, which takes the same
 * lock), so a sender thread making its session at that moment and the server waited for each
 * other for ever: e2e_api and e2e_hardening hung so under ASan (test_webhook's
 * test_startup_race makes it happen).
 *
 * Shutdown is bounded: the attempt in flight gets 3 s, then is cancelled; a thread still not
 * done 2 s later (a name lookup, which GLib cannot cancel) is left to finish on its own and
 * frees the sender itself (hence the reference count). */
#include "jobs/webhook.h"

#include <libsoup/soup.h>
#include <stdlib.h>
#include <string.h>

/* ---- pure ---- */

char *fc_webhook_hmac_hex(const void *key, size_t key_len, const void *data, size_t len) {
  return g_compute_hmac_for_data(G_CHECKSUM_SHA256, key, key_len, data, len);
}

char *fc_webhook_signature(const char *secret, gint64 ts, const char *body, size_t len) {
  /* "TS.BODY": the timestamp is signed with the body so that a captured request cannot be
   * replayed later with a fresh timestamp */
  GString *msg = g_string_sized_new(len + 24);
  g_string_printf(msg, "%" G_GINT64_FORMAT ".", ts);
  g_string_append_len(msg, body, (gssize)len);
  char *hex = fc_webhook_hmac_hex(secret, strlen(secret), msg->str, msg->len);
  char *sig = g_strdup_printf("t=%" G_GINT64_FORMAT ",v1=%s", ts, hex);
  g_free(hex);
  g_string_free(msg, TRUE);
  return sig;
}

int fc_webhook_retry_after_s(const char *value, gint64 now_s) {
  if (!value) return -1;
  while (*value == ' ' || *value == '\t') value++;
  if (!*value) return -1;
  gint64 s;
  if (g_ascii_isdigit(*value)) {
    char *end;
    guint64 v = g_ascii_strtoull(value, &end, 10);
    while (*end == ' ' || *end == '\t') end++;
    if (*end) return -1;
    s = v > FC_WEBHOOK_MAX_DELAY_S ? FC_WEBHOOK_MAX_DELAY_S : (gint64)v;
  } else { /* an HTTP date */
    GDateTime *d = soup_date_time_new_from_http_string(value);
    if (!d) return -1;
    s = g_date_time_to_unix(d) - now_s;
    g_date_time_unref(d);
    if (s < 0) s = 0;
  }
  return (int)(s > FC_WEBHOOK_MAX_DELAY_S ? FC_WEBHOOK_MAX_DELAY_S : s);
}

int fc_webhook_retryable(int status) { return status == 0 || status == 429 || status >= 500; }

gint64 fc_webhook_delay_ms(int attempt, int base_ms, int retry_after_s) {
  if (attempt < 1 || attempt >= FC_WEBHOOK_ATTEMPTS) return -1;
  if (retry_after_s >= 0) return (gint64)retry_after_s * 1000;
  return (gint64)base_ms << (attempt - 1);
}

/* ---- the log ---- */

typedef struct attempt {
  gint64 at_us; /* wall clock */
  int status;   /* HTTP status, 0: none (error says why) */
  int ms;
  char event[48];
  char error[128];
} attempt;

struct fc_webhook_log {
  gint ref;
  GMutex lock;
  GArray *a; /* attempt, oldest first, at most FC_WEBHOOK_LOG_MAX */
};

fc_webhook_log *fc_webhook_log_new(void) {
  fc_webhook_log *l = g_new0(fc_webhook_log, 1);
  l->ref = 1;
  g_mutex_init(&l->lock);
  l->a = g_array_new(FALSE, TRUE, sizeof(attempt));
  return l;
}

fc_webhook_log *fc_webhook_log_ref(fc_webhook_log *l) {
  if (l) g_atomic_int_inc(&l->ref);
  return l;
}

void fc_webhook_log_unref(fc_webhook_log *l) {
  if (!l || !g_atomic_int_dec_and_test(&l->ref)) return;
  g_array_free(l->a, TRUE);
  g_mutex_clear(&l->lock);
  g_free(l);
}

static void log_add(fc_webhook_log *l, const attempt *at) {
  if (!l) return;
  g_mutex_lock(&l->lock);
  if (l->a->len >= FC_WEBHOOK_LOG_MAX) g_array_remove_index(l->a, 0);
  g_array_append_vals(l->a, at, 1);
  g_mutex_unlock(&l->lock);
}

static void json_str(GString *o, const char *s) { /* our own short texts: quote and escape */
  g_string_append_c(o, '"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') g_string_append_c(o, '\\');
    if ((unsigned char)*s < 0x20) g_string_append_printf(o, "\\u%04x", *s);
    else g_string_append_c(o, *s);
  }
  g_string_append_c(o, '"');
}

void fc_webhook_log_json(fc_webhook_log *l, GString *o) {
  g_string_append_c(o, '[');
  if (l) {
    g_mutex_lock(&l->lock);
    for (guint i = 0; i < l->a->len; i++) {
      const attempt *at = &g_array_index(l->a, attempt, i);
      g_string_append_printf(o, "%s{\"at\":%.3f,\"event\":", i ? "," : "", at->at_us / 1e6);
      json_str(o, at->event);
      if (at->status) {
        g_string_append_printf(o, ",\"status\":%d", at->status);
      } else {
        g_string_append(o, ",\"error\":");
        json_str(o, at->error);
      }
      g_string_append_printf(o, ",\"ms\":%d}", at->ms);
    }
    g_mutex_unlock(&l->lock);
  }
  g_string_append_c(o, ']');
}

/* ---- the sender ---- */

typedef struct delivery {
  char *url, *event, *json;
  char *request_id; /* NULL or the X-Request-ID header's value */
  char id[40];
  fc_webhook_log *log;
  int attempts; /* made so far */
  int ok;       /* one was answered 2xx */
  gint64 due;   /* monotonic µs */
} delivery;

struct fc_webhook {
  gint ref; /* the caller's and the thread's */
  char *secret;
  int base_ms, timeout_s;
  GMutex lock;
  GCond cond;
  GQueue queue; /* delivery*, oldest first (retries go to the back) */
  int stop, done;
  unsigned dropped, failures;
  GCancellable *cancel; /* the attempt in flight, at shutdown */
  GThread *thread;
};

static void delivery_free(delivery *d) {
  g_free(d->url);
  g_free(d->event);
  g_free(d->json);
  g_free(d->request_id);
  fc_webhook_log_unref(d->log);
  g_free(d);
}

/* One POST; records it and returns the wait before the next (ms), or -1: done. */
static gint64 attempt_once(fc_webhook *w, SoupSession *s, delivery *d) {
  attempt at = {.at_us = g_get_real_time()};
  g_strlcpy(at.event, d->event, sizeof at.event);
  int retry_after = -1;
  d->attempts++;
  SoupMessage *m = soup_message_new("POST", d->url);
  if (!m) {
    g_strlcpy(at.error, "not a URL", sizeof at.error);
    log_add(d->log, &at);
    return -1;
  }
  /* A redirect is an answer like any other (final: not 2xx): following it would turn the POST
   * into a GET elsewhere, or carry the signed body to an address the client never gave. */
  soup_message_add_flags(m, SOUP_MESSAGE_NO_REDIRECT);
  SoupMessageHeaders *h = soup_message_get_request_headers(m);
  const gint64 ts = at.at_us / G_USEC_PER_SEC;
  char tsbuf[24];
  g_snprintf(tsbuf, sizeof tsbuf, "%" G_GINT64_FORMAT, ts);
  soup_message_headers_replace(h, "X-Facecast-Event", d->event);
  soup_message_headers_replace(h, "X-Facecast-Delivery", d->id);
  soup_message_headers_replace(h, "X-Facecast-Timestamp", tsbuf);
  if (d->request_id) soup_message_headers_replace(h, "X-Request-ID", d->request_id);
  const size_t len = strlen(d->json);
  if (w->secret) {
    char *sig = fc_webhook_signature(w->secret, ts, d->json, len);
    soup_message_headers_replace(h, "X-Facecast-Signature", sig);
    g_free(sig);
  }
  GBytes *b = g_bytes_new_static(d->json, len); /* d outlives the call */
  soup_message_set_request_body_from_bytes(m, "application/json", b);
  g_bytes_unref(b);
  GError *e = NULL;
  const gint64 t0 = g_get_monotonic_time();
  GBytes *r = soup_session_send_and_read(s, m, w->cancel, &e);
  at.ms = (int)((g_get_monotonic_time() - t0) / 1000);
  if (e) {
    g_strlcpy(at.error, e->message, sizeof at.error);
  } else {
    at.status = (int)soup_message_get_status(m);
    if (fc_webhook_retryable(at.status))
      retry_after = fc_webhook_retry_after_s(
          soup_message_headers_get_one(soup_message_get_response_headers(m), "Retry-After"),
          g_get_real_time() / G_USEC_PER_SEC);
  }
  log_add(d->log, &at);
  gint64 wait = -1;
  d->ok = at.status >= 200 && at.status < 300;
  if (!d->ok) {
    if (fc_webhook_retryable(at.status)) wait = fc_webhook_delay_ms(d->attempts, w->base_ms, retry_after);
    if (wait < 0) /* the receiver's address is the client's; the secret never appears */
      g_warning("webhook %s %s to %s: %s%s", d->event, d->id, d->url,
                e ? e->message : soup_message_get_reason_phrase(m),
                fc_webhook_retryable(at.status) ? ", no attempts left" : " (not retried)");
  }
  if (r) g_bytes_unref(r);
  g_clear_error(&e);
  g_object_unref(m);
  return wait;
}

static void webhook_unref(fc_webhook *w) {
  if (!g_atomic_int_dec_and_test(&w->ref)) return;
  g_object_unref(w->cancel);
  g_cond_clear(&w->cond);
  g_mutex_clear(&w->lock);
  if (w->secret) {
    memset(w->secret, 0, strlen(w->secret));
    g_free(w->secret);
  }
  g_free(w);
}

static gpointer sender_thread(gpointer data) {
  fc_webhook *w = data;
  /* A session belongs to the context current where it is made: this thread's own, so that
   * nothing of it is ever dispatched by the server's main loop on another thread. */
  GMainContext *ctx = g_main_context_new();
  g_main_context_push_thread_default(ctx);
  SoupSession *s = NULL; /* made at the first delivery, long after start-up (see the top) */
  g_mutex_lock(&w->lock);
  while (!w->stop) {
    GList *first = NULL;
    for (GList *l = w->queue.head; l; l = l->next)
      if (!first || ((delivery *)l->data)->due < ((delivery *)first->data)->due) first = l;
    if (!first) {
      g_cond_wait(&w->cond, &w->lock);
      continue;
    }
    delivery *d = first->data;
    if (d->due > g_get_monotonic_time()) {
      g_cond_wait_until(&w->cond, &w->lock, d->due);
      continue;
    }
    g_queue_delete_link(&w->queue, first);
    g_mutex_unlock(&w->lock);
    if (!s)
      s = soup_session_new_with_options("timeout", w->timeout_s, "idle-timeout", w->timeout_s,
                                        "user-agent", "facecast-webhook", NULL);
    gint64 wait = attempt_once(w, s, d);
    g_mutex_lock(&w->lock);
    if (wait < 0 && !d->ok) w->failures++; /* no attempt left, or a final answer */
    if (wait < 0 || w->stop) {
      delivery_free(d);
    } else {
      d->due = g_get_monotonic_time() + wait * 1000;
      g_queue_push_tail(&w->queue, d);
    }
  }
  const unsigned left = w->queue.length;
  delivery *d;
  while ((d = g_queue_pop_head(&w->queue))) delivery_free(d);
  g_mutex_unlock(&w->lock);
  if (left) g_warning("webhook: %u deliveries dropped at shutdown", left);
  if (s) g_object_unref(s);
  g_main_context_pop_thread_default(ctx);
  g_main_context_unref(ctx);
  g_mutex_lock(&w->lock);
  w->done = 1;
  g_cond_broadcast(&w->cond);
  g_mutex_unlock(&w->lock);
  webhook_unref(w);
  return NULL;
}

static int env_int(const char *name, int dflt, int lo, int hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long n = strtol(v, &end, 10);
  return *end || n < lo || n > hi ? dflt : (int)n;
}

/* Makes, on the calling thread, the classes a session and a message need (see the top): a
 * session and a message made and dropped, no I/O. */
static gpointer make_client_classes(gpointer unused) {
  (void)unused;
  SoupSession *s = soup_session_new();
  SoupMessage *m = soup_message_new("POST", "http://127.0.0.1/");
  if (m) g_object_unref(m);
  g_object_unref(s);
  return NULL;
}

fc_webhook *fc_webhook_new(const char *secret) {
  static GOnce classes = G_ONCE_INIT;
  g_once(&classes, make_client_classes, NULL);
  fc_webhook *w = g_new0(fc_webhook, 1);
  w->ref = 2;
  w->secret = secret && *secret ? g_strdup(secret) : NULL;
  w->base_ms = env_int("FACECAST_WEBHOOK_BACKOFF_MS", 1000, 1, 60000);
  w->timeout_s = env_int("FACECAST_WEBHOOK_TIMEOUT_S", FC_WEBHOOK_TIMEOUT_S, 1, 60);
  g_mutex_init(&w->lock);
  g_cond_init(&w->cond);
  g_queue_init(&w->queue);
  w->cancel = g_cancellable_new();
  w->thread = g_thread_new("fc-webhook", sender_thread, w);
  return w;
}

void fc_webhook_free(fc_webhook *w) {
  if (!w) return;
  g_mutex_lock(&w->lock);
  w->stop = 1;
  g_cond_broadcast(&w->cond);
  gint64 until = g_get_monotonic_time() + 3 * G_USEC_PER_SEC;
  while (!w->done && g_cond_wait_until(&w->cond, &w->lock, until)) {}
  g_mutex_unlock(&w->lock);
  g_cancellable_cancel(w->cancel); /* an attempt still in flight ends now */
  g_mutex_lock(&w->lock);
  until = g_get_monotonic_time() + 2 * G_USEC_PER_SEC;
  while (!w->done && g_cond_wait_until(&w->cond, &w->lock, until)) {}
  const int done = w->done;
  g_mutex_unlock(&w->lock);
  if (done) {
    g_thread_join(w->thread);
  } else { /* stuck where cancelling cannot reach: it finishes, and frees w, on its own */
    g_warning("webhook: the sender is still busy 5 s after stopping; not waiting for it");
    g_thread_unref(w->thread);
  }
  webhook_unref(w);
}

void fc_webhook_send(fc_webhook *w, const char *url, const char *event, const char *json,
                     fc_webhook_log *log) {
  fc_webhook_send_rid(w, url, event, json, log, NULL);
}

void fc_webhook_send_rid(fc_webhook *w, const char *url, const char *event, const char *json,
                         fc_webhook_log *log, const char *request_id) {
  delivery *d = g_new0(delivery, 1);
  d->request_id = request_id && *request_id ? g_strdup(request_id) : NULL;
  d->url = g_strdup(url);
  d->event = g_strdup(event);
  d->json = g_strdup(json);
  char *uuid = g_uuid_string_random();
  g_strlcpy(d->id, uuid, sizeof d->id);
  g_free(uuid);
  d->log = fc_webhook_log_ref(log);
  d->due = g_get_monotonic_time();
  g_mutex_lock(&w->lock);
  delivery *old = NULL;
  if (w->queue.length >= FC_WEBHOOK_QUEUE) {
    old = g_queue_pop_head(&w->queue);
    w->dropped++;
  }
  const unsigned dropped = w->dropped;
  g_queue_push_tail(&w->queue, d);
  g_cond_broadcast(&w->cond);
  g_mutex_unlock(&w->lock);
  if (old) {
    g_warning("webhook: queue full (%d), dropped %s %s to %s (%u dropped so far)",
              FC_WEBHOOK_QUEUE, old->event, old->id, old->url, dropped);
    delivery_free(old);
  }
}

unsigned fc_webhook_dropped(fc_webhook *w) {
  g_mutex_lock(&w->lock);
  unsigned n = w->dropped;
  g_mutex_unlock(&w->lock);
  return n;
}

unsigned fc_webhook_failures(fc_webhook *w) {
  g_mutex_lock(&w->lock);
  unsigned n = w->failures;
  g_mutex_unlock(&w->lock);
  return n;
}
