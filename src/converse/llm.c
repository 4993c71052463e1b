/* The network half of the LLM client (llm.h), on libsoup 3.
 *
 * Each call has its own SoupSession: cancelling must close the call's connection at once (a
 * paying API writes on otherwise, and LiveTalking's users wait seconds for exactly that), and
 * soup_session_abort is the one public way to drop a connection whose body is half read. The
 * price is a new connection per turn. A call holds a reference while an operation of it is
 * pending; fc_llm_cancel turns the user's callbacks off, aborts, and the pending operation's
 * completion (with G_IO_ERROR_CANCELLED) drops the last reference. */
#include "converse/llm.h"
#include "facecast/error.h"

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <string.h>

#define MAX_RAW (1 << 20) /* a non-streamed body (a whole completion or an error page) */

struct fc_llm {
  GMainContext *ctx;
  char *url, *auth, *model;
  int timeout_s, max_tokens;
  size_t max_answer;
  GList *calls; /* running, not cancelled */
};

struct fc_llm_call {
  int refs;
  fc_llm *l; /* NULL once cancelled */
  SoupSession *soup;
  SoupMessage *msg;
  GCancellable *cancel;
  GInputStream *in;
  fc_llm_cbs cbs;
  void *user;
  int off; /* the user's callbacks are off (cancelled or done) */
  int is_sse, status;
  fc_sse_parser *sse;
  GString *piece, *raw;
  size_t answered;
  char buf[8192];
};

fc_llm *fc_llm_create(const fc_llm_params *p, GMainContext *ctx, int *err) {
  const char *b = p->base_url ? p->base_url : "";
  if (!g_str_has_prefix(b, "http://") && !g_str_has_prefix(b, "https://")) {
    *err = fc_error_set(FC_EINVAL, "the LLM's base URL must start with http:// or https://");
    return NULL;
  }
  fc_llm *l = g_new0(fc_llm, 1);
  l->ctx = g_main_context_ref(ctx);
  size_t n = strlen(b);
  while (n && b[n - 1] == '/') n--;
  l->url = g_strdup_printf("%.*s/chat/completions", (int)n, b);
  l->auth = p->api_key && *p->api_key ? g_strdup_printf("Bearer %s", p->api_key) : NULL;
  l->model = g_strdup(p->model && *p->model ? p->model : "gpt-4o-mini");
  l->timeout_s = p->timeout_s > 0 ? p->timeout_s : 30;
  l->max_tokens = p->max_tokens;
  l->max_answer = p->max_answer ? p->max_answer : 16 * 1024;
  return l;
}

static void call_unref(fc_llm_call *c) {
  if (--c->refs) return;
  if (c->in) g_object_unref(c->in);
  g_object_unref(c->msg);
  g_object_unref(c->soup);
  g_object_unref(c->cancel);
  fc_sse_parser_destroy(c->sse);
  g_string_free(c->piece, TRUE);
  g_string_free(c->raw, TRUE);
  g_free(c);
}

/* Turns the callbacks off and drops the connection (no callback is called from here). */
static void call_stop(fc_llm_call *c) {
  c->off = 1;
  if (c->l) c->l->calls = g_list_remove(c->l->calls, c);
  c->l = NULL;
  g_cancellable_cancel(c->cancel);
  soup_session_abort(c->soup);
}

void fc_llm_cancel(fc_llm_call *c) {
  if (c && !c->off) call_stop(c);
}

void fc_llm_destroy(fc_llm *l) {
  if (!l) return;
  while (l->calls) call_stop(l->calls->data);
  g_main_context_unref(l->ctx);
  g_free(l->url);
  if (l->auth) memset(l->auth, 0, strlen(l->auth));
  g_free(l->auth);
  g_free(l->model);
  g_free(l);
}

/* The one `done`; the call stops (and its connection goes) with it. */
static void call_finish(fc_llm_call *c, int err, const char *detail) {
  if (c->off) return;
  fc_llm_cbs cbs = c->cbs;
  void *user = c->user;
  call_stop(c);
  cbs.done(user, err, detail);
}

static void call_fail(fc_llm_call *c, int err) { call_finish(c, err, fc_error_detail(err)); }

/* Whatever went wrong with what the service sent is the service's fault: FC_EREMOTE. */
static int as_remote(int err) {
  if (err == FC_EREMOTE) return err;
  char *why = g_strdup(fc_error_detail(err));
  err = fc_error_set(FC_EREMOTE, "%s", why);
  g_free(why);
  return err;
}

/* Hands text on, up to max_answer in all; 1 when the answer is complete by length. */
static int deliver(fc_llm_call *c, const char *t, size_t n) {
  size_t max = c->l ? c->l->max_answer : 0;
  int full = 0;
  if (c->answered + n >= max) {
    n = max > c->answered ? max - c->answered : 0;
    full = 1;
  }
  c->answered += n;
  if (n && !c->off) c->cbs.text(c->user, t, n);
  return full;
}

static int on_event(void *user, const char *data, size_t n) {
  fc_llm_call *c = user;
  int finished = 0;
  g_string_truncate(c->piece, 0);
  int err = fc_llm_parse_event(data, n, c->piece, &finished);
  if (err) return err;
  if (deliver(c, c->piece->str, c->piece->len)) finished = 1;
  if (c->off) return 1; /* cancelled from inside the text callback */
  return finished ? 2 : 0;
}

/* The whole body of a non-streamed answer: a completion (2xx) or an error page. */
static void take_raw(fc_llm_call *c) {
  if (c->status >= 200 && c->status < 300) {
    int finished = 0;
    g_string_truncate(c->piece, 0);
    int err = fc_llm_parse_event(c->raw->str, c->raw->len, c->piece, &finished);
    if (err) return call_fail(c, as_remote(err));
    deliver(c, c->piece->str, c->piece->len);
    return call_finish(c, 0, NULL);
  }
  /* {"error": {"message": …}} where the service says why; else the status alone */
  int finished = 0;
  g_string_truncate(c->piece, 0);
  if (fc_llm_parse_event(c->raw->str, c->raw->len, c->piece, &finished) == FC_EREMOTE) {
    const char *d = fc_error_detail(FC_EREMOTE), *pre = "the LLM answered an error: ";
    char *why = g_strdup(g_str_has_prefix(d, pre) ? d + strlen(pre) : d);
    int err = fc_error_set(FC_EREMOTE, "the LLM answered HTTP %d: %s", c->status, why);
    g_free(why);
    return call_fail(c, err);
  }
  call_fail(c, fc_error_set(FC_EREMOTE, "the LLM answered HTTP %d %s", c->status,
                            soup_status_get_phrase((guint)c->status)));
}

static void read_more(fc_llm_call *c);

static void on_read(GObject *src, GAsyncResult *res, gpointer user) {
  fc_llm_call *c = user;
  GError *e = NULL;
  gssize n = g_input_stream_read_finish(G_INPUT_STREAM(src), res, &e);
  if (c->off) {
    g_clear_error(&e);
    return call_unref(c);
  }
  if (n < 0) {
    call_fail(c, fc_error_set(FC_EREMOTE, "reading the LLM's answer: %s", e->message));
  } else if (n == 0) { /* the end */
    if (c->is_sse && c->status < 300) {
      /* a last event without its blank line still counts */
      int r = fc_sse_parser_feed(c->sse, "\n\n", 2, on_event, c);
      if (r < 0)
        call_fail(c, as_remote(r));
      else if (r == 2)
        call_finish(c, 0, NULL);
      else
        call_fail(c, fc_error_set(FC_EREMOTE, "the LLM's stream ended before the answer did"));
    } else {
      take_raw(c);
    }
  } else if (c->is_sse && c->status < 300) {
    int r = fc_sse_parser_feed(c->sse, c->buf, (size_t)n, on_event, c);
    if (r < 0)
      call_fail(c, as_remote(r));
    else if (r == 2)
      call_finish(c, 0, NULL);
    else if (!c->off)
      return read_more(c); /* keeps the reference */
  } else if (c->raw->len + (size_t)n > MAX_RAW) {
    call_fail(c, fc_error_set(FC_EREMOTE, "the LLM's answer is over %d bytes", MAX_RAW));
  } else {
    g_string_append_len(c->raw, c->buf, n);
    return read_more(c);
  }
  g_clear_error(&e);
  call_unref(c);
}

static void read_more(fc_llm_call *c) {
  g_input_stream_read_async(c->in, c->buf, sizeof c->buf, G_PRIORITY_DEFAULT, c->cancel, on_read,
                            c);
}

static void on_sent(GObject *src, GAsyncResult *res, gpointer user) {
  fc_llm_call *c = user;
  GError *e = NULL;
  c->in = soup_session_send_finish(SOUP_SESSION(src), res, &e);
  if (c->off) {
    g_clear_error(&e);
    return call_unref(c);
  }
  if (!c->in) {
    GUri *u = soup_message_get_uri(c->msg);
    call_fail(c, fc_error_set(FC_EREMOTE, "the LLM at %s: %s", u ? g_uri_get_host(u) : "?",
                              e->message));
    g_clear_error(&e);
    return call_unref(c);
  }
  c->status = (int)soup_message_get_status(c->msg);
  const char *ct =
      soup_message_headers_get_content_type(soup_message_get_response_headers(c->msg), NULL);
  c->is_sse = ct && g_ascii_strcasecmp(ct, "text/event-stream") == 0;
  read_more(c);
}

static GBytes *request_body(fc_llm *l, const fc_llm_msg *msgs, size_t n) {
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "model");
  json_builder_add_string_value(b, l->model);
  json_builder_set_member_name(b, "stream");
  json_builder_add_boolean_value(b, TRUE);
  if (l->max_tokens > 0) {
    json_builder_set_member_name(b, "max_tokens");
    json_builder_add_int_value(b, l->max_tokens);
  }
  json_builder_set_member_name(b, "messages");
  json_builder_begin_array(b);
  for (size_t i = 0; i < n; i++) {
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "role");
    json_builder_add_string_value(b, msgs[i].role);
    json_builder_set_member_name(b, "content");
    json_builder_add_string_value(b, msgs[i].content);
    json_builder_end_object(b);
  }
  json_builder_end_array(b);
  json_builder_end_object(b);
  JsonNode *root = json_builder_get_root(b);
  char *s = json_to_string(root, FALSE);
  size_t len = strlen(s);
  json_node_unref(root);
  g_object_unref(b);
  return g_bytes_new_take(s, len);
}

fc_llm_call *fc_llm_stream(fc_llm *l, const fc_llm_msg *msgs, size_t n, const fc_llm_cbs *cbs,
                           void *user, int *err) {
  SoupMessage *msg = soup_message_new("POST", l->url);
  if (!msg) {
    *err = fc_error_set(FC_EINVAL, "the LLM's URL does not parse");
    return NULL;
  }
  fc_llm_call *c = g_new0(fc_llm_call, 1);
  c->refs = 1; /* the pending operation's */
  c->l = l;
  c->msg = msg;
  c->cbs = *cbs;
  c->user = user;
  c->cancel = g_cancellable_new();
  c->sse = fc_sse_parser_create(1 << 20);
  c->piece = g_string_new(NULL);
  c->raw = g_string_new(NULL);
  GBytes *body = request_body(l, msgs, n);
  soup_message_set_request_body_from_bytes(msg, "application/json", body);
  g_bytes_unref(body);
  SoupMessageHeaders *h = soup_message_get_request_headers(msg);
  soup_message_headers_replace(h, "Accept", "text/event-stream");
  if (l->auth) soup_message_headers_replace(h, "Authorization", l->auth);
  g_main_context_push_thread_default(l->ctx);
  c->soup = soup_session_new_with_options("timeout", (guint)l->timeout_s, "idle-timeout",
                                          (guint)l->timeout_s, "user-agent", "facecast", NULL);
  soup_session_send_async(c->soup, msg, G_PRIORITY_DEFAULT, c->cancel, on_sent, c);
  g_main_context_pop_thread_default(l->ctx);
  l->calls = g_list_prepend(l->calls, c);
  return c;
}
