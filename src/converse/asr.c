/* Speech recognition providers (asr.h): the interface and the two remote ones, openai
 * (multipart POST, synchronous on a SoupSession of the call's own) and funasr (a WebSocket
 * exchange on converse/wsc.h); pocketsphinx is in asr_sphinx.c. Remote providers buffer the
 * segment (bounded by max_seconds) and send it at finish. */
#include "converse/asr_internal.h"
#include "converse/wsc.h"
#include "core/jsonin.h"
#include "facecast/error.h"

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <stdio.h>
#include <string.h>

#define MAX_ANSWER (256 << 10)

struct fc_asr_stream {
  fc_asr *a;
  void *ps; /* pocketsphinx: the decoder, an utterance open */
  int16_t *pcm;
  size_t n, cap, fed;
};

fc_asr *fc_asr_create(const fc_asr_params *p, int *err) {
  static const char *const names[] = {"pocketsphinx", "openai", "funasr"};
  int kind = -1;
  const char *prov = p->provider && *p->provider ? p->provider : "pocketsphinx";
  for (int i = 0; i < 3; i++)
    if (!g_ascii_strcasecmp(prov, names[i])) kind = i;
  if (kind < 0) {
    *err = fc_error_set(FC_EINVAL, "unknown ASR provider '%s' (pocketsphinx, openai, funasr)",
                        prov);
    return NULL;
  }
  const char *url = p->url && *p->url ? p->url
                    : kind == ASR_OPENAI ? "http://127.0.0.1:8000/v1"
                    : kind == ASR_FUNASR ? "ws://127.0.0.1:10095"
                                         : "";
  int ws = kind == ASR_FUNASR;
  if (kind != ASR_SPHINX && !g_str_has_prefix(url, ws ? "ws://" : "http://") &&
      !g_str_has_prefix(url, ws ? "wss://" : "https://")) {
    *err = fc_error_set(FC_EINVAL, "the %s ASR URL must start with %s", names[kind],
                        ws ? "ws:// or wss://" : "http:// or https://");
    return NULL;
  }
  fc_asr *a = g_new0(fc_asr, 1);
  a->kind = kind;
  size_t n = strlen(url);
  while (n && url[n - 1] == '/') n--;
  a->url = g_strndup(url, n);
  a->shown = g_strndup(a->url, strcspn(a->url, "?"));
  a->auth = p->api_key && *p->api_key ? g_strdup_printf("Bearer %s", p->api_key) : NULL;
  a->model = g_strdup(p->model && *p->model ? p->model : kind == ASR_OPENAI ? "whisper-1" : NULL);
  a->lang = g_strdup(p->lang && *p->lang ? p->lang : NULL);
  a->timeout_s = p->timeout_s > 0 ? p->timeout_s : 15;
  a->max_samples = (size_t)(p->max_seconds > 0 ? p->max_seconds : 30) * 16000;
  a->max_decoders = p->max_decoders > 0 ? p->max_decoders : 4;
  if (kind == ASR_SPHINX && (*err = asr_sphinx_init(a))) {
    fc_asr_destroy(a);
    return NULL;
  }
  *err = FC_OK;
  return a;
}

void fc_asr_destroy(fc_asr *a) {
  if (!a) return;
  if (a->kind == ASR_SPHINX) asr_sphinx_free(a);
  g_free(a->url);
  g_free(a->shown);
  if (a->auth) memset(a->auth, 0, strlen(a->auth));
  g_free(a->auth);
  g_free(a->model);
  g_free(a->lang);
  g_free(a);
}

const char *fc_asr_name(const fc_asr *a) {
  return a->kind == ASR_SPHINX ? "pocketsphinx" : a->kind == ASR_OPENAI ? "openai" : "funasr";
}

const char *fc_asr_url(const fc_asr *a) { return a->shown; }

fc_asr_stream *fc_asr_begin(fc_asr *a, int *err) {
  *err = FC_OK;
  void *ps = NULL;
  if (a->kind == ASR_SPHINX && !(ps = asr_sphinx_take(a, err))) return NULL;
  fc_asr_stream *s = g_new0(fc_asr_stream, 1);
  s->a = a;
  s->ps = ps;
  return s;
}

int fc_asr_feed(fc_asr_stream *s, const int16_t *pcm, size_t n) {
  if (s->fed + n > s->a->max_samples)
    return fc_error_set(FC_EINVAL, "speech segment over %zu s", s->a->max_samples / 16000);
  s->fed += n;
  if (s->ps) return asr_sphinx_feed(s->ps, pcm, n);
  if (s->n + n > s->cap) {
    s->cap = MAX(s->cap * 2, s->n + n + 16000);
    s->pcm = g_realloc_n(s->pcm, s->cap, sizeof(int16_t));
  }
  memcpy(s->pcm + s->n, pcm, n * sizeof(int16_t));
  s->n += n;
  return FC_OK;
}

void fc_asr_stream_free(fc_asr_stream *s) {
  if (!s) return;
  if (s->ps) { /* an utterance left open (cancelled): closed before the decoder goes back */
    char *t = NULL;
    asr_sphinx_finish(s->ps, &t);
    g_free(t);
    asr_sphinx_give(s->a, s->ps);
  }
  g_free(s->pcm);
  g_free(s);
}

/* ---- answers ---- */

/* Parses a JSON object out of untrusted bytes (NUL-free, bounded), or NULL. */
static JsonParser *parse_obj(const char *d, size_t n, JsonObject **o) {
  *o = NULL;
  /* (the guard first: json-glib recurses per nesting level, on a worker's smaller stack) */
  if (!n || n > MAX_ANSWER || fc_json_prescan(d, n, FC_JSON_MAX_DEPTH)) return NULL;
  JsonParser *jp = json_parser_new();
  if (json_parser_load_from_data(jp, d, (gssize)n, NULL)) {
    JsonNode *r = json_parser_get_root(jp);
    if (r && JSON_NODE_HOLDS_OBJECT(r)) *o = json_node_get_object(r);
  }
  if (!*o) {
    g_object_unref(jp);
    return NULL;
  }
  return jp;
}

static char *clean_text(const char *t, size_t n) {
  char *s = g_utf8_make_valid(t, (gssize)n);
  return g_strstrip(s);
}

int fc_asr_parse_openai(const char *body, size_t n, int is_json, char **text) {
  *text = NULL;
  if (!is_json) {
    if (n > MAX_ANSWER || memchr(body, 0, n))
      return fc_error_set(FC_EREMOTE, "a transcript that is not text");
    *text = clean_text(body, n);
    return FC_OK;
  }
  JsonObject *o;
  JsonParser *jp = parse_obj(body, n, &o);
  const char *t = jp ? fc_json_str_member(o, "text") : NULL;
  int err = FC_OK;
  if (t) {
    *text = clean_text(t, strlen(t));
  } else {
    JsonNode *e = jp ? json_object_get_member(o, "error") : NULL;
    JsonObject *eo = e && JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
    const char *m = eo ? fc_json_str_member(eo, "message") : fc_json_str_member(o, "error");
    if (!m && jp) m = fc_json_str_member(o, "detail");
    err = fc_error_set(FC_EREMOTE, "%s", m && *m ? m : jp ? "an error without a message"
                                                          : "an answer without 'text'");
  }
  if (jp) g_object_unref(jp);
  return err;
}

int fc_asr_parse_funasr(const char *msg, size_t n, char **text, int *final) {
  *text = NULL;
  *final = 0;
  JsonObject *o;
  JsonParser *jp = parse_obj(msg, n, &o);
  const char *mode = jp ? fc_json_str_member(o, "mode") : NULL, *t = jp ? fc_json_str_member(o, "text") : NULL;
  int err = FC_OK;
  if (!mode) {
    err = fc_error_set(FC_EREMOTE, "a message that is not a FunASR result");
  } else {
    /* is_final differs between server versions: the mode says what a result is */
    *final = !strcmp(mode, "offline") || !strcmp(mode, "2pass-offline");
    if (!*final && strcmp(mode, "online") && strcmp(mode, "2pass-online"))
      err = fc_error_set(FC_EREMOTE, "a result of mode '%.32s'", mode);
    else
      *text = clean_text(t ? t : "", t ? strlen(t) : 0);
  }
  if (jp) g_object_unref(jp);
  return err;
}

/* ---- the remote providers ---- */

static int remote_fail(const fc_asr *a, const char *what) {
  return fc_error_set(FC_EREMOTE, "%s ASR at %s: %s", fc_asr_name(a), a->shown, what);
}

static int as_fail(const fc_asr *a, int err) {
  if (err == FC_ECANCELED) return err;
  char *why = g_strdup(fc_error_detail(err));
  err = remote_fail(a, why);
  g_free(why);
  return err;
}

/* A mono 16-bit WAV of the segment. */
static GBytes *wav_of(const int16_t *pcm, size_t n) {
  size_t bytes = n * 2;
  uint8_t *w = g_malloc(44 + bytes);
  uint32_t v[] = {(uint32_t)(36 + bytes), 16, 16000, 32000, (uint32_t)bytes};
  memcpy(w, "RIFF", 4);
  memcpy(w + 4, &v[0], 4);
  memcpy(w + 8, "WAVEfmt ", 8);
  memcpy(w + 16, &v[1], 4);
  const uint16_t fmt[] = {1, 1};
  memcpy(w + 20, fmt, 4);
  memcpy(w + 24, &v[2], 4);
  memcpy(w + 28, &v[3], 4);
  const uint16_t blk[] = {2, 16};
  memcpy(w + 32, blk, 4);
  memcpy(w + 36, "data", 4);
  memcpy(w + 40, &v[4], 4);
  if (bytes) memcpy(w + 44, pcm, bytes);
  return g_bytes_new_take(w, 44 + bytes);
}

static int finish_openai(fc_asr_stream *s, GCancellable *cancel, char **text) {
  fc_asr *a = s->a;
  SoupMultipart *mp = soup_multipart_new("multipart/form-data");
  GBytes *wav = wav_of(s->pcm, s->n);
  soup_multipart_append_form_file(mp, "file", "speech.wav", "audio/wav", wav);
  g_bytes_unref(wav);
  soup_multipart_append_form_string(mp, "model", a->model);
  soup_multipart_append_form_string(mp, "response_format", "json");
  if (a->lang) soup_multipart_append_form_string(mp, "language", a->lang);
  char *url = g_strdup_printf("%s/audio/transcriptions", a->url);
  SoupMessage *m = soup_message_new_from_multipart(url, mp);
  g_free(url);
  soup_multipart_free(mp);
  if (!m) return remote_fail(a, "bad URL");
  if (a->auth) soup_message_headers_replace(soup_message_get_request_headers(m), "Authorization", a->auth);
  SoupSession *ss = soup_session_new_with_options("timeout", (guint)a->timeout_s, "user-agent",
                                                  "facecast", NULL);
  GError *e = NULL;
  /* the answer, read up to MAX_ANSWER (a service's body is not trusted to be small) */
  GInputStream *in = soup_session_send(ss, m, cancel, &e);
  char *d = in ? g_malloc(MAX_ANSWER + 1) : NULL;
  gsize n = 0;
  if (in && !g_input_stream_read_all(in, d, MAX_ANSWER + 1, &n, cancel, &e)) {
    g_free(d);
    d = NULL;
  }
  int err;
  if (!d) {
    err = g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED)
              ? fc_error_set(FC_ECANCELED, "cancelled")
              : remote_fail(a, e ? e->message : "no answer");
  } else if (n > MAX_ANSWER) {
    err = remote_fail(a, "an answer over 256 KiB");
  } else {
    unsigned st = soup_message_get_status(m);
    const char *ct = soup_message_headers_get_content_type(soup_message_get_response_headers(m), NULL);
    err = fc_asr_parse_openai(d, n, !ct || strstr(ct, "json") != NULL, text);
    if (err || !SOUP_STATUS_IS_SUCCESSFUL(st)) {
      char *why = g_strdup_printf("HTTP %u: %s", st, err ? fc_error_detail(err) : *text);
      g_free(*text);
      *text = NULL;
      err = remote_fail(a, why);
      g_free(why);
    }
  }
  g_free(d);
  if (in) g_object_unref(in);
  g_clear_error(&e);
  soup_session_abort(ss);
  g_object_unref(ss);
  g_object_unref(m);
  return err;
}

typedef struct funasr_call {
  char *text;
} funasr_call;

static int funasr_msg(void *user, int binary, const uint8_t *d, size_t n) {
  funasr_call *c = user;
  if (binary) return fc_error_set(FC_EREMOTE, "a binary message from the server");
  char *t;
  int final, err = fc_asr_parse_funasr((const char *)d, n, &t, &final);
  if (err) return err;
  if (!final) {
    g_free(t);
    return 0;
  }
  g_free(c->text);
  c->text = t;
  return 1;
}

static int finish_funasr(fc_asr_stream *s, GCancellable *cancel, char **text) {
  fc_asr *a = s->a;
  char who[512];
  snprintf(who, sizeof who, "funasr ASR at %s", a->shown);
  SoupMessage *m = soup_message_new("GET", a->url);
  if (!m) return remote_fail(a, "bad URL");
  static const char *const protocols[] = {"binary", NULL}; /* FunASR's servers offer it */
  int err;
  fc_wsc *w = fc_wsc_connect(m, NULL, protocols, a->timeout_s, cancel, who, &err);
  g_object_unref(m);
  if (!w) return err;
  fc_wsc_send_text(w, "{\"mode\":\"offline\",\"chunk_size\":[5,10,5],\"chunk_interval\":10,"
                      "\"wav_name\":\"facecast\",\"is_speaking\":true,\"wav_format\":\"pcm\","
                      "\"audio_fs\":16000,\"itn\":true}");
  for (size_t i = 0; i < s->n; i += 960) /* 60 ms frames, as FunASR's clients send them */
    fc_wsc_send_binary(w, s->pcm + i, (s->n - i < 960 ? s->n - i : 960) * sizeof(int16_t));
  fc_wsc_send_text(w, "{\"is_speaking\":false}");
  funasr_call c = {NULL};
  err = fc_wsc_run(w, funasr_msg, &c);
  fc_wsc_close(w);
  if (err) {
    g_free(c.text);
    return err == FC_EREMOTE && !g_str_has_prefix(fc_error_detail(err), "funasr ASR at ")
               ? as_fail(a, err)
               : err;
  }
  *text = c.text;
  return FC_OK;
}

int fc_asr_finish(fc_asr_stream *s, GCancellable *cancel, char **text) {
  *text = NULL;
  if (s->ps) {
    int err = asr_sphinx_finish(s->ps, text);
    asr_sphinx_give(s->a, s->ps);
    s->ps = NULL;
    return err;
  }
  return s->a->kind == ASR_OPENAI ? finish_openai(s, cancel, text)
                                  : finish_funasr(s, cancel, text);
}
