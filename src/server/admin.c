/* The admin API in LiveTalking's shapes (its admin.html polls these):
 *
 *   GET    /api/admin/config          → data.config: the settings under LiveTalking's names
 *                                       (model, avatar_id, tts, REF_FILE, transport, listenport,
 *                                       batch_size, fps, push_url, max_session, ...) and under
 *                                       facecast's own (port, device, llm_model, ...)
 *   GET    /api/admin/sessions        → data.sessions[]: sessionid, speaking, recording, model,
 *                                       avatar_id, REF_FILE, transport, batch_size, customopt,
 *                                       and facecast's serial, state, age_ms, fps figures
 *   DELETE /api/admin/sessions/{id}   → closes it (LiveTalking has no such route; its pages
 *   POST   /api/admin/sessions/{id}/stop  can only wait for a peer to leave)
 *
 * Secrets never appear: API keys, the LLM/TTS/ASR keys (environment only) are reported as
 * whether they are set. With API keys a key sees and stops only the sessions it opened, as on
 * every other route. */
#include "server/internal.h"

#include "facecast/error.h"
#include "core/file.h"
#include "speech/voice.h"

#include <json-glib/json-glib.h>
#include <string.h>

static void str(JsonBuilder *b, const char *k, const char *v) {
  json_builder_set_member_name(b, k);
  if (v)
    json_builder_add_string_value(b, v);
  else
    json_builder_add_null_value(b);
}

static void num(JsonBuilder *b, const char *k, gint64 v) {
  json_builder_set_member_name(b, k);
  json_builder_add_int_value(b, v);
}

static void flag(JsonBuilder *b, const char *k, int v) {
  json_builder_set_member_name(b, k);
  json_builder_add_boolean_value(b, v != 0);
}

static void answer(SoupServerMessage *msg, JsonBuilder *b) {
  JsonNode *root = json_builder_get_root(b);
  char *d = json_to_string(root, FALSE);
  fc_http_ok(msg, d);
  g_free(d);
  json_node_unref(root);
  g_object_unref(b);
}


static const char *model_name(const fc_server *srv) { return srv->p.model ? srv->p.model : "parametric"; }

static const char *ref_file(const fc_server *srv) {
  return srv->p.tts_ref_audio ? srv->p.tts_ref_audio : srv->p.tts_voice;
}

static const char *transport(const fc_server *srv) {
  return srv->p.transport && *srv->p.transport ? srv->p.transport : "webrtc";
}

static void h_config(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                     gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "GET")) return;
  const fc_server_params *p = &srv->p;
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "config");
  json_builder_begin_object(b);
  /* LiveTalking's names */
  num(b, "fps", 25);
  str(b, "model", model_name(srv));
  str(b, "avatar_id", fc_avatar_id(srv->avatar));
  num(b, "batch_size", fc_server_max_batch(srv));
  str(b, "modelfile", p->checkpoint ? p->checkpoint : "");
  str(b, "tts", srv->voice ? fc_voice_name(srv->voice) : "espeak");
  str(b, "REF_FILE", ref_file(srv) ? ref_file(srv) : "");
  str(b, "REF_TEXT", p->tts_ref_text ? p->tts_ref_text : "");
  str(b, "TTS_SERVER", p->tts_url ? p->tts_url : "");
  char shown[600] = "";
  if (p->push_url && *p->push_url) fc_push_shown_url(p->push_url, shown, sizeof shown);
  str(b, "transport", transport(srv));
  str(b, "stun", p->stun_server ? p->stun_server : "");
  str(b, "push_url", shown); /* without the stream name: often a streaming service's key */
  num(b, "max_session", p->max_sessions);
  num(b, "listenport", fc_server_port(srv));
  json_builder_set_member_name(b, "customopt");
  json_builder_begin_array(b);
  json_builder_end_array(b);
  /* facecast's own */
  str(b, "host", p->host ? p->host : "0.0.0.0");
  num(b, "port", fc_server_port(srv));
  num(b, "width", p->width);
  num(b, "height", p->height);
  str(b, "checkpoint", p->checkpoint);
  str(b, "device", p->device ? p->device : "cpu");
  str(b, "turn", p->turn_server ? "set" : NULL); /* its URL holds a password */
  str(b, "cors_origins", p->cors_origins ? p->cors_origins : "*");
  str(b, "tts_voice", p->tts_voice);
  str(b, "llm_url", p->llm_url);
  str(b, "llm_model", srv->llm ? (p->llm_model ? p->llm_model : "gpt-4o-mini") : NULL);
  flag(b, "llm_key", p->llm_key != NULL);
  flag(b, "tts_key", p->tts_key != NULL);
  str(b, "asr", p->asr ? p->asr : "pocketsphinx");
  flag(b, "asr_key", p->asr_key != NULL);
  flag(b, "api_keys", srv->keys != NULL);
  flag(b, "barge_in", p->barge_in);
  str(b, "data_dir", fc_data_dir());
  json_builder_end_object(b);
  json_builder_end_object(b);
  answer(msg, b);
}

static const char *state_name(fc_live_state st) {
  switch (st) {
  case FC_LIVE_CONNECTING: return "connecting";
  case FC_LIVE_CONNECTED: return "connected";
  case FC_LIVE_FAILED: return "failed";
  case FC_LIVE_CLOSED: return "closed";
  }
  return "unknown";
}

static void session_json(JsonBuilder *b, fc_session *s) {
  fc_server *srv = s->srv;
  json_builder_begin_object(b);
  str(b, "sessionid", s->id);
  flag(b, "speaking", fc_session_is_speaking(s));
  g_mutex_lock(&s->out_lock);
  int recording = s->rec != NULL;
  const char *kind = s->out ? fc_sink_kind(s->out) : NULL;
  g_mutex_unlock(&s->out_lock);
  flag(b, "recording", recording);
  str(b, "model", model_name(srv));
  str(b, "avatar_id", fc_avatar_id(s->avatar));
  str(b, "REF_FILE", s->ref_audio ? s->ref_audio : ref_file(srv) ? ref_file(srv) : "");
  str(b, "transport", s->push      ? transport(srv)
                      : s->whep    ? "whep"
                      : s->wsout   ? "websocket"
                      : kind && strcmp(kind, "null") ? kind
                                                     : "webrtc");
  if (s->wsout) { /* main loop, as s->wsout: what a slow client lost, what waits for it */
    uint64_t vd, ad, backlog;
    fc_wsout_stats(s->wsout, &vd, &ad, &backlog);
    json_builder_set_member_name(b, "stream");
    json_builder_begin_object(b);
    num(b, "video_dropped", (gint64)vd);
    num(b, "audio_dropped", (gint64)ad);
    num(b, "backlog_bytes", (gint64)backlog);
    json_builder_end_object(b);
  }
  num(b, "batch_size", fc_server_max_batch(srv));
  json_builder_set_member_name(b, "customopt");
  json_builder_begin_array(b);
  json_builder_end_array(b);
  num(b, "serial", (gint64)s->serial);
  str(b, "state", state_name(s->state));
  /* whole numbers: json-glib writes doubles with 17 digits */
  num(b, "age_ms", (g_get_monotonic_time() - s->opened_us) / 1000);
  num(b, "final_fps", (gint64)(s->final_fps + 0.5));
  num(b, "infer_fps", (gint64)(s->infer_fps + 0.5));
  json_builder_end_object(b);
}

static void list_sessions(fc_server *srv, SoupServerMessage *msg) {
  const char *who = fc_http_owner(msg);
  GPtrArray *all = g_ptr_array_new();
  g_mutex_lock(&srv->lock);
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init(&it, srv->sessions);
  while (g_hash_table_iter_next(&it, &k, &v)) {
    fc_session *s = v;
    if (srv->keys && who && strcmp(who, s->owner) != 0) continue;
    fc_session_ref(s);
    g_ptr_array_add(all, s);
  }
  g_mutex_unlock(&srv->lock);
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "sessions");
  json_builder_begin_array(b);
  for (guint i = 0; i < all->len; i++) {
    session_json(b, all->pdata[i]);
    fc_session_unref(all->pdata[i]);
  }
  json_builder_end_array(b);
  json_builder_end_object(b);
  g_ptr_array_free(all, TRUE);
  answer(msg, b);
}

static void h_sessions(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                       gpointer user) {
  fc_server *srv = user;
  const char *rest = path + strlen("/api/admin/sessions");
  if (!*rest || !strcmp(rest, "/")) {
    if (fc_http_require_method(msg, "GET")) list_sessions(srv, msg);
    return;
  }
  /* /{id} (DELETE) or /{id}/stop (POST) */
  char *id = g_strdup(rest + 1);
  char *slash = strchr(id, '/');
  int stop = slash && !strcmp(slash, "/stop");
  if (slash) *slash = 0;
  if ((slash && !stop) || !fc_http_require_method(msg, stop ? "POST" : "DELETE")) {
    if (slash && !stop) fc_http_error(msg, 404, "no route %s", path);
    g_free(id);
    return;
  }
  fc_session *s = fc_http_session_find(srv, msg, id);
  if (!s) {
    fc_http_error(msg, 404, "unknown session");
  } else {
    char *d = g_strdup_printf("{\"sessionid\":\"%s\",\"closed\":true}", s->id);
    fc_session_close(s, "stopped through the admin API");
    fc_session_unref(s);
    fc_http_ok(msg, d);
    g_free(d);
  }
  g_free(id);
}

void fc_admin_register(fc_server *srv) {
  fc_http_route(srv, "/api/admin/config", h_config);
  fc_http_route(srv, "/api/admin/sessions", h_sessions);
}
