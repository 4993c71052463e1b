/* TTS providers over HTTP (voice.h): openai, gpt-sovits, cosyvoice, fish; the Edge provider is
 * in voice_edge.c. A call is synchronous on its own SoupSession (one per call: cancelling
 * must drop its connection, and it keeps calls of different threads apart); the session's
 * I/O timeout bounds the connect and every wait for the next piece. Bytes go through
 * voice_out: the PCM reader (WAV header or raw, carry of a cut sample), a streaming
 * resampler to 16 kHz, and the caller's callback. */
#include "facecast/error.h"
#include "speech/voice_internal.h"

#include <json-glib/json-glib.h>
#include <libsoup/soup.h>
#include <string.h>

#define MAX_REF (20 << 20) /* a reference WAV uploaded with each request */
#define MAX_ERR_BODY 8192

static const struct {
  const char *name, *alias, *url;
  int kind, rate;
} providers[] = {
    {"openai", NULL, "https://api.openai.com/v1", VOICE_OPENAI, 24000},
    {"edge", "edgetts",
     "wss://speech.platform.bing.com/consumer/speech/synthesize/readaloud/edge/v1"
     "?TrustedClientToken=6A5AA1D4EAFF4E9FB37E23D68491D6F4",
     VOICE_EDGE, 24000},
    {"gpt-sovits", "sovits", "http://127.0.0.1:9880", VOICE_SOVITS, 32000},
    {"cosyvoice", NULL, "http://127.0.0.1:50000", VOICE_COSYVOICE, 24000},
    {"fish", "fishtts", "http://127.0.0.1:8080", VOICE_FISH, 44100},
};

fc_voice *fc_voice_create(const fc_voice_params *p, int *err) {
  *err = FC_OK;
  int k = -1;
  for (size_t i = 0; i < G_N_ELEMENTS(providers) && k < 0; i++)
    if (p->provider && (!g_ascii_strcasecmp(p->provider, providers[i].name) ||
                        (providers[i].alias && !g_ascii_strcasecmp(p->provider, providers[i].alias))))
      k = (int)i;
  if (k < 0) {
    *err = fc_error_set(FC_EINVAL, "unknown TTS provider '%s' (espeak, openai, edge, gpt-sovits, "
                        "cosyvoice, fish)", p->provider ? p->provider : "");
    return NULL;
  }
  const char *url = p->url && *p->url ? p->url : providers[k].url;
  int ws = providers[k].kind == VOICE_EDGE;
  if (!(g_str_has_prefix(url, ws ? "ws://" : "http://") ||
        g_str_has_prefix(url, ws ? "wss://" : "https://"))) {
    *err = fc_error_set(FC_EINVAL, "the %s TTS URL must start with %s", providers[k].name,
                        ws ? "ws:// or wss://" : "http:// or https://");
    return NULL;
  }
  fc_voice *v = g_new0(fc_voice, 1);
  v->kind = providers[k].kind;
  size_t n = strlen(url);
  while (n && url[n - 1] == '/') n--;
  v->url = g_strndup(url, n);
  v->shown = g_strndup(v->url, strcspn(v->url, "?")); /* (edge's query is its token) */
  v->auth = p->api_key && *p->api_key ? g_strdup_printf("Bearer %s", p->api_key) : NULL;
  v->model = g_strdup(p->model && *p->model ? p->model : "tts-1");
  v->voice = g_strdup(p->voice && *p->voice ? p->voice : NULL);
  v->ref_audio = g_strdup(p->ref_audio && *p->ref_audio ? p->ref_audio : NULL);
  v->ref_text = g_strdup(p->ref_text);
  v->lang = g_strdup(p->lang && *p->lang ? p->lang : "auto");
  v->edge_version = g_strdup(p->edge_version && *p->edge_version ? p->edge_version
                                                                 : "1-143.0.3650.75");
  v->rate = p->rate > 0 ? p->rate : providers[k].rate;
  v->timeout_s = p->timeout_s > 0 ? p->timeout_s : 10;
  return v;
}

void fc_voice_destroy(fc_voice *v) {
  if (!v) return;
  g_free(v->url);
  g_free(v->shown);
  if (v->auth) memset(v->auth, 0, strlen(v->auth));
  g_free(v->auth);
  g_free(v->model);
  g_free(v->voice);
  g_free(v->ref_audio);
  g_free(v->ref_text);
  g_free(v->lang);
  g_free(v->edge_version);
  g_free(v);
}

const char *fc_voice_name(const fc_voice *v) {
  for (size_t i = 0; i < G_N_ELEMENTS(providers); i++)
    if (providers[i].kind == v->kind) return providers[i].name;
  return "?";
}

const char *fc_voice_url(const fc_voice *v) { return v->shown; }

int fc_voice_ref_kind(const fc_voice *v) {
  return v->kind == VOICE_COSYVOICE ? FC_VOICE_REF_FILE
         : v->kind == VOICE_FISH    ? FC_VOICE_REF_EITHER
                                    : FC_VOICE_REF_NAME;
}
const char *fc_voice_default(const fc_voice *v) { return v->voice; }

/* ---- the way out ---- */

static int deliver(voice_out *o, const float *pcm, size_t n) {
  if (!n || o->stop) return o->stop ? FC_ECANCELED : 0;
  if (o->audio(o->user, pcm, n)) {
    o->stop = 1;
    return fc_error_set(FC_ECANCELED, "speech stopped");
  }
  o->delivered += n;
  return 0;
}

static int on_s16(void *user, const int16_t *pcm, size_t n, int rate) {
  voice_out *o = user;
  int err;
  if (o->rs && rate != o->rs_rate) { /* a service changed rates mid-stream: start afresh */
    const float *tail;
    size_t k;
    if ((err = fc_resampler_s16(o->rs, NULL, 0, 1, &tail, &k)) || (err = deliver(o, tail, k)))
      return err;
    fc_resampler_destroy(o->rs);
    o->rs = NULL;
  }
  if (!o->rs) {
    if (!(o->rs = fc_resampler_create(rate, 16000, &err))) return err;
    o->rs_rate = rate;
  }
  const float *f;
  size_t k;
  if ((err = fc_resampler_s16(o->rs, pcm, n, 0, &f, &k))) return err;
  return deliver(o, f, k);
}

int voice_out_pcm(voice_out *o, const void *data, size_t n) {
  return fc_pcm_reader_feed(&o->pcm, data, n, on_s16, o);
}

static int take_mp3(voice_out *o, int timeout_ms, int *done) {
  const float *f;
  size_t k;
  int err = fc_audio_dec_take(o->mp3, timeout_ms, &f, &k, done);
  if (!err) err = deliver(o, f, k);
  return err;
}

int voice_out_mp3(voice_out *o, const void *data, size_t n) {
  int err, done;
  if (!o->mp3 && !(o->mp3 = fc_audio_dec_create("audio/mpeg, mpegversion=(int)1", &err)))
    return err;
  if ((err = fc_audio_dec_push(o->mp3, data, n))) return err;
  return take_mp3(o, 0, &done);
}

int voice_out_finish(voice_out *o) {
  int err = 0, done = 0;
  if (o->rs) {
    const float *f;
    size_t k;
    if (!(err = fc_resampler_s16(o->rs, NULL, 0, 1, &f, &k))) err = deliver(o, f, k);
  }
  if (!err && o->mp3 && !(err = fc_audio_dec_end(o->mp3))) err = take_mp3(o, 5000, &done);
  return err;
}

/* ---- HTTP ---- */

/* A failure of the service, as a one-line FC_EREMOTE naming it. */
static int remote_fail(const fc_voice *v, const char *what) {
  return fc_error_set(FC_EREMOTE, "%s TTS at %s: %s", fc_voice_name(v), v->shown, what);
}

/* Sends msg and streams the answer through o (raw/WAV PCM, or MP3). */
static int http_stream(voice_out *o, SoupMessage *msg, int mp3) {
  const fc_voice *v = o->v;
  if (v->auth)
    soup_message_headers_replace(soup_message_get_request_headers(msg), "Authorization", v->auth);
  SoupSession *ss = soup_session_new_with_options("timeout", (guint)v->timeout_s, "idle-timeout",
                                                  (guint)v->timeout_s, "user-agent", "facecast",
                                                  NULL);
  GError *e = NULL;
  int err = 0;
  GInputStream *in = soup_session_send(ss, msg, o->cancel, &e);
  char *buf = g_malloc(16384);
  if (!in) {
    err = g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED)
              ? fc_error_set(FC_ECANCELED, "speech cancelled")
              : remote_fail(v, e ? e->message : "no answer");
  } else if (!SOUP_STATUS_IS_SUCCESSFUL(soup_message_get_status(msg))) {
    gsize got = 0;
    g_input_stream_read_all(in, buf, MAX_ERR_BODY < 16383 ? MAX_ERR_BODY : 16383, &got, o->cancel,
                            NULL);
    char *why = fc_voice_error_text(buf, got);
    char *line = g_strdup_printf("HTTP %u: %s", soup_message_get_status(msg), why);
    err = remote_fail(v, line);
    g_free(line);
    g_free(why);
  } else {
    for (;;) {
      gssize n = g_input_stream_read(in, buf, 16384, o->cancel, &e);
      if (n == 0) break;
      if (n < 0) {
        err = g_error_matches(e, G_IO_ERROR, G_IO_ERROR_CANCELLED)
                  ? fc_error_set(FC_ECANCELED, "speech cancelled")
                  : remote_fail(v, e ? e->message : "read failed");
        break;
      }
      if ((err = mp3 ? voice_out_mp3(o, buf, (size_t)n) : voice_out_pcm(o, buf, (size_t)n))) {
        if (err != FC_ECANCELED) {
          char *why = g_strdup(fc_error_detail(err));
          err = remote_fail(v, why);
          g_free(why);
        }
        break;
      }
    }
    /* what came before a failure is still spoken: the resampler gives up what it holds */
    if (err != FC_ECANCELED) {
      char *why = err ? g_strdup(fc_error_detail(err)) : NULL;
      int ferr = voice_out_finish(o);
      if (!err && ferr && ferr != FC_ECANCELED) {
        why = g_strdup(fc_error_detail(ferr));
        err = remote_fail(v, why);
      } else if (err) {
        err = fc_error_set(err, "%s", why); /* the first failure is the one to tell */
      } else {
        err = ferr;
      }
      g_free(why);
    }
  }
  g_free(buf);
  g_clear_error(&e);
  if (in) g_object_unref(in);
  soup_session_abort(ss); /* cancelled or cut short: the connection goes now */
  g_object_unref(ss);
  return err;
}

/* Ends b's object, posts it as JSON to {url}{route} and streams the answer through o. */
static int post_json(voice_out *o, const char *route, JsonBuilder *b) {
  json_builder_end_object(b);
  JsonGenerator *g = json_generator_new();
  JsonNode *root = json_builder_get_root(b);
  json_generator_set_root(g, root);
  gsize n;
  char *body = json_generator_to_data(g, &n);
  json_node_unref(root);
  g_object_unref(g);
  g_object_unref(b);
  char *url = g_strdup_printf("%s%s", o->v->url, route);
  SoupMessage *m = soup_message_new("POST", url);
  g_free(url);
  if (!m) {
    g_free(body);
    return remote_fail(o->v, "bad URL");
  }
  GBytes *bb = g_bytes_new_take(body, n);
  soup_message_set_request_body_from_bytes(m, "application/json", bb);
  g_bytes_unref(bb);
  int err = http_stream(o, m, 0);
  g_object_unref(m);
  return err;
}

static void add_str(JsonBuilder *b, const char *k, const char *v) {
  json_builder_set_member_name(b, k);
  json_builder_add_string_value(b, v);
}

/* The reference WAV a request uploads (cosyvoice, fish). */
static int read_ref(const char *path, GBytes **out) {
  char *d = NULL;
  gsize n = 0;
  GError *e = NULL;
  *out = NULL;
  if (!g_file_get_contents(path, &d, &n, &e)) {
    int err = fc_error_set(FC_EINVAL, "reference audio %s: %s", path, e->message);
    g_error_free(e);
    return err;
  }
  if (n > MAX_REF) {
    g_free(d);
    return fc_error_set(FC_EINVAL, "reference audio %s: over %d MB", path, MAX_REF >> 20);
  }
  *out = g_bytes_new_take(d, n);
  return 0;
}

static int speak_openai(const fc_voice *v, const fc_voice_req *r, voice_out *o) {
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  add_str(b, "model", v->model);
  add_str(b, "input", r->text);
  add_str(b, "voice", r->voice ? r->voice : v->voice ? v->voice : "alloy");
  add_str(b, "response_format", "pcm");
  if (r->emotion) {
    char *ins = g_strdup_printf("Speak in a %s tone.", r->emotion);
    add_str(b, "instructions", ins);
    g_free(ins);
  }
  return post_json(o, "/audio/speech", b);
}

static int speak_sovits(const fc_voice *v, const fc_voice_req *r, voice_out *o) {
  const char *ref = r->ref_audio ? r->ref_audio : v->ref_audio;
  if (!ref)
    return fc_error_set(FC_EINVAL, "gpt-sovits needs reference audio: a WAV path on its server "
                                   "(--tts-ref-audio, or refaudio per session)");
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  add_str(b, "text", r->text);
  add_str(b, "text_lang", v->lang);
  add_str(b, "ref_audio_path", ref);
  add_str(b, "prompt_text", r->ref_text ? r->ref_text : v->ref_text ? v->ref_text : "");
  add_str(b, "prompt_lang", v->lang);
  add_str(b, "media_type", "wav");
  json_builder_set_member_name(b, "streaming_mode");
  json_builder_add_boolean_value(b, TRUE);
  return post_json(o, "/tts", b);
}

static int speak_cosyvoice(const fc_voice *v, const fc_voice_req *r, voice_out *o) {
  const char *ref = r->ref_audio ? r->ref_audio : v->ref_audio;
  if (r->ref_audio && !r->ref_local)
    return fc_error_set(FC_EINVAL, "cosyvoice uploads its reference audio, so it must be a file "
                                   "under a --media-dir folder");
  SoupMultipart *mp = soup_multipart_new("multipart/form-data");
  soup_multipart_append_form_string(mp, "tts_text", r->text);
  const char *route;
  int err;
  if (ref) { /* cloning: the reference is uploaded with every request, as the server wants */
    GBytes *wav;
    if ((err = read_ref(ref, &wav))) {
      soup_multipart_free(mp);
      return err;
    }
    if (r->emotion) {
      route = "inference_instruct2";
      soup_multipart_append_form_string(mp, "instruct_text", r->emotion);
    } else {
      route = "inference_zero_shot";
      soup_multipart_append_form_string(mp, "prompt_text",
                                        r->ref_text ? r->ref_text : v->ref_text ? v->ref_text : "");
    }
    soup_multipart_append_form_file(mp, "prompt_wav", "prompt_wav", "application/octet-stream",
                                    wav);
    g_bytes_unref(wav);
  } else { /* a speaker the model has built in */
    route = "inference_sft";
    soup_multipart_append_form_string(mp, "spk_id",
                                      r->voice ? r->voice : v->voice ? v->voice : "中文女");
  }
  char *url = g_strdup_printf("%s/%s", v->url, route);
  SoupMessage *m = soup_message_new_from_multipart(url, mp);
  g_free(url);
  soup_multipart_free(mp);
  if (!m) return remote_fail(v, "bad URL");
  err = http_stream(o, m, 0);
  g_object_unref(m);
  return err;
}

static int speak_fish(const fc_voice *v, const fc_voice_req *r, voice_out *o) {
  const char *ref = r->ref_audio ? r->ref_audio : v->ref_audio;
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  add_str(b, "text", r->text);
  add_str(b, "format", "wav");
  json_builder_set_member_name(b, "streaming");
  json_builder_add_boolean_value(b, TRUE);
  add_str(b, "use_memory_cache", "on");
  int local = r->ref_audio ? r->ref_local : 1; /* the configured one is the operator's */
  if (ref && local && g_file_test(ref, G_FILE_TEST_IS_REGULAR)) { /* a WAV here, sent along */
    GBytes *wav;
    int err = read_ref(ref, &wav);
    if (err) {
      g_object_unref(b);
      return err;
    }
    gsize n;
    const guchar *d = g_bytes_get_data(wav, &n);
    char *b64 = g_base64_encode(d, n);
    json_builder_set_member_name(b, "references");
    json_builder_begin_array(b);
    json_builder_begin_object(b);
    add_str(b, "audio", b64);
    add_str(b, "text", r->ref_text ? r->ref_text : v->ref_text ? v->ref_text : "");
    json_builder_end_object(b);
    json_builder_end_array(b);
    g_free(b64);
    g_bytes_unref(wav);
  } else if (ref || r->voice || v->voice) { /* a reference id on the server */
    add_str(b, "reference_id", ref ? ref : r->voice ? r->voice : v->voice);
  }
  return post_json(o, "/v1/tts", b);
}

/* An Edge voice for a bare language ("en", "zh"), so that voices meant for espeak work. */
static const char *edge_voice(const char *voice) {
  static const char *const map[][2] = {
      {"zh-hk", "zh-HK-HiuGaaiNeural"}, {"yue", "zh-HK-HiuGaaiNeural"},
      {"zh", "zh-CN-YunxiaNeural"},    {"cmn", "zh-CN-YunxiaNeural"},
      {"en", "en-US-AriaNeural"},      {"de", "de-DE-KatjaNeural"},
      {"fr", "fr-FR-DeniseNeural"},    {"es", "es-ES-ElviraNeural"},
      {"it", "it-IT-ElsaNeural"},      {"ja", "ja-JP-NanamiNeural"},
      {"ko", "ko-KR-SunHiNeural"},     {"ru", "ru-RU-SvetlanaNeural"},
      {"pt", "pt-BR-FranciscaNeural"}, {"nl", "nl-NL-ColetteNeural"}};
  if (!voice) return "zh-CN-YunxiaNeural"; /* LiveTalking's default */
  if (g_str_has_suffix(voice, "Neural")) return voice;
  for (size_t i = 0; i < G_N_ELEMENTS(map); i++) {
    size_t k = strlen(map[i][0]);
    if (!g_ascii_strncasecmp(voice, map[i][0], k) && (!voice[k] || voice[k] == '-'))
      return map[i][1];
  }
  return voice;
}

int fc_voice_speak(fc_voice *v, const fc_voice_req *r, GCancellable *cancel,
                   fc_voice_audio_fn audio, void *user) {
  if (!r->text || !*r->text) return fc_error_set(FC_EINVAL, "speech: empty text");
  voice_out o = {.v = v, .cancel = cancel, .audio = audio, .user = user};
  fc_pcm_reader_init(&o.pcm, v->rate);
  int err;
  switch (v->kind) {
  case VOICE_OPENAI: err = speak_openai(v, r, &o); break;
  case VOICE_SOVITS: err = speak_sovits(v, r, &o); break;
  case VOICE_COSYVOICE: err = speak_cosyvoice(v, r, &o); break;
  case VOICE_FISH: err = speak_fish(v, r, &o); break;
  default:
    err = voice_edge_speak(v, edge_voice(r->voice ? r->voice : v->voice), r->text, &o);
    break;
  }
  if (!err && !o.delivered) err = remote_fail(v, "no audio in the answer");
  fc_resampler_destroy(o.rs);
  fc_audio_dec_destroy(o.mp3);
  return err;
}
