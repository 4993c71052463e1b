/* HTTP routes of a running session: speech (/human, /humanaudio, /interrupt_talk,
 * /is_speaking), action clips (/set_audiotype), recording (/record), events (/sse) and
 * microphone audio (WS /ws/audio: lip-synced by the avatar, or heard for voice chat with
 * ?mode=chat|echo, listen.c); see http.c for the plumbing they share. */
#include "facecast/error.h"
#include "server/internal.h"
#include "server/listen.h"
#include "server/listener.h"
#include "speech/voice.h"

#include <json-glib/json-glib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Text of one /human request: more than a session queues anyway (120 s of speech), small
 * enough that synthesis cannot tie a worker up for long before the queue says no. */
#define MAX_TEXT 8192

/* ---- speech ----------------------------------------------------------------------------- */

/* A voice name: espeak's are short ASCII names; a service's may be anything printable
 * ("zh-CN-YunxiaNeural", "alloy", CosyVoice's "中文女"). */
static int bad_voice(const fc_server *srv, const char *v) {
  if (!srv->voice)
    return !*v || strlen(v) > 64 ||
           strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+") !=
               strlen(v);
  if (!*v || strlen(v) > 128 || !g_utf8_validate(v, -1, NULL)) return 1;
  for (const char *p = v; *p; p++)
    if ((unsigned char)*p < 32 || *p == 127) return 1;
  return 0;
}

/* A string member of o (absent or null: *out stays NULL): 0, or -1 after answering. */
static int opt_text(SoupServerMessage *msg, JsonObject *o, const char *obj, const char *name,
                    size_t max, char **out) {
  JsonNode *n = o ? json_object_get_member(o, name) : NULL;
  if (!n || JSON_NODE_HOLDS_NULL(n)) return 0;
  const char *v = JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING
                      ? json_node_get_string(n)
                      : NULL;
  if (!v || strlen(v) > max) {
    fc_http_error(msg, 400, "'%s%s%s' must be a string of at most %zu bytes", obj ? obj : "",
                  obj ? "." : "", name, max);
    return -1;
  }
  g_free(*out);
  *out = g_strdup(v);
  return 0;
}

int fc_http_say_opts(fc_server *srv, SoupServerMessage *msg, JsonObject *o, int session_keys,
                     fc_say_opts *out) {
  memset(out, 0, sizeof *out);
  JsonNode *tn = json_object_get_member(o, "tts");
  JsonObject *t = NULL;
  if (tn && !JSON_NODE_HOLDS_NULL(tn)) {
    if (!JSON_NODE_HOLDS_OBJECT(tn)) {
      fc_http_error(msg, 400, "'tts' must be an object ({\"voice\": ..., \"emotion\": ...})");
      return -1;
    }
    t = json_node_get_object(tn);
  }
  /* LiveTalking's per-request fields, then facecast's own, which win */
  if (opt_text(msg, t, "tts", "voice", 256, &out->voice) ||
      opt_text(msg, t, "tts", "emotion", 256, &out->emotion) ||
      opt_text(msg, t, "tts", "ref_file", 4096, &out->ref_audio) ||
      opt_text(msg, t, "tts", "ref_text", 4096, &out->ref_text) ||
      opt_text(msg, o, NULL, "voice", 256, &out->voice) ||
      (session_keys && (opt_text(msg, o, NULL, "refaudio", 4096, &out->ref_audio) ||
                        opt_text(msg, o, NULL, "reftext", 4096, &out->ref_text))))
    goto fail;
  if (out->voice && bad_voice(srv, out->voice)) {
    fc_http_error(msg, 400, srv->voice ? "'voice' must be printable UTF-8 of at most 128 bytes"
                                       : "'voice' must be a voice name such as \"en\" or \"de\"");
    goto fail;
  }
  if (out->ref_audio && srv->voice) {
    int kind = fc_voice_ref_kind(srv->voice);
    if (kind == FC_VOICE_REF_FILE || (kind == FC_VOICE_REF_EITHER && g_path_is_absolute(out->ref_audio))) {
      char *real = NULL;
      if (fc_media_path_check(srv, msg, out->ref_audio, &real)) goto fail;
      g_free(out->ref_audio);
      out->ref_audio = g_strdup(real);
      free(real);
      out->ref_local = 1;
    }
  }
  return 0;
fail:
  g_free(out->voice);
  g_free(out->emotion);
  g_free(out->ref_audio);
  g_free(out->ref_text);
  memset(out, 0, sizeof *out);
  return -1;
}

/* /human type=chat: the LLM answers, sentence by sentence into speech (chat.c); answered at
 * once with the turn's number, the rest comes as SSE "chat" events. */
static void human_chat(SoupServerMessage *msg, fc_session *s, const char *text,
                       const fc_say_opts *tts, int interrupt) {
  if (interrupt && s->srv->llm) {
    fc_session_chat_cancel(s);
    fc_session_interrupt(s);
  }
  uint32_t turn = 0;
  int err = fc_session_chat_say(s, text, tts, 0, 0, &turn);
  if (err) {
    fc_http_error(msg, err == FC_EUNSUPPORTED ? 501 : fc_http_status_of(err), "%s",
                  fc_error_detail(err));
    return;
  }
  char data[32];
  snprintf(data, sizeof data, "{\"turn\":%u}", turn);
  fc_http_ok(msg, data);
}

void fc_route_human(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                    gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = fc_http_session_of(srv, msg, o);
  const char *text = s ? fc_http_str_member(msg, o, "text") : NULL;
  const char *type = NULL;
  fc_say_opts tts = {0};
  if (text && (fc_http_opt_str(msg, o, "type", &type) || fc_http_say_opts(srv, msg, o, 0, &tts)))
    text = NULL;
  if (!type) type = "echo";
  if (text) {
    JsonNode *in = json_object_get_member(o, "interrupt");
    int interrupt = 0, bad_interrupt = 0;
    if (in && JSON_NODE_HOLDS_VALUE(in) && json_node_get_value_type(in) == G_TYPE_BOOLEAN)
      interrupt = json_node_get_boolean(in);
    else if (in && !JSON_NODE_HOLDS_NULL(in))
      bad_interrupt = 1;
    size_t len = strlen(text);
    int chat = strcmp(type, "chat") == 0;
    if (bad_interrupt) {
      fc_http_error(msg, 400, "'interrupt' must be true or false");
    } else if (!chat && strcmp(type, "echo") != 0) {
      fc_http_error(msg, 400, "'type' must be \"echo\" or \"chat\"");
    } else if (len > MAX_TEXT) {
      fc_http_error(msg, 413,
                    "'text' is %zu bytes: at most %d per request (a session queues at most "
                    "120 s of speech)", len, MAX_TEXT);
    } else if (chat) {
      human_chat(msg, s, text, &tts, interrupt);
    } else if (srv->voice) {
      /* a TTS service: sentence by sentence into the session's queue, each spoken as its
       * audio arrives (say.c); answered at once, as LiveTalking does */
      if (interrupt) {
        fc_session_chat_cancel(s);
        fc_session_interrupt(s);
      }
      int err = fc_session_say_text(s, text, &tts);
      if (err)
        fc_http_error(msg, fc_http_status_of(err), "%s", fc_error_detail(err));
      else
        fc_http_ok(msg, NULL);
    } else {
      if (interrupt) fc_session_chat_cancel(s); /* the LLM's turn stops too */
      fc_job *j = g_new0(fc_job, 1);
      j->kind = FC_JOB_SPEAK;
      j->s = s;
      fc_session_ref(s);
      j->text = g_strdup(text);
      j->voice = g_strdup(tts.voice);
      j->interrupt = interrupt;
      fc_http_queue_paused(srv, msg, j);
    }
  }
  g_free(tts.voice);
  g_free(tts.emotion);
  g_free(tts.ref_audio);
  g_free(tts.ref_text);
  if (s) fc_session_unref(s);
  g_object_unref(jp);
}

void fc_route_humanaudio(SoupServer *server, SoupServerMessage *msg, const char *path,
                         GHashTable *q, gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "POST")) return;
  if (!fc_http_has_content_type(msg, "multipart/form-data")) {
    fc_http_error(msg, 415, "expected multipart/form-data with 'file' and 'sessionid'");
    return;
  }
  GBytes *file = NULL;
  char *name = NULL, *sid = NULL;
  static const char *const file_fields[] = {"file", NULL}, *const names[] = {"sessionid"};
  if (fc_http_multipart(msg, file_fields, &file, &name, names, &sid, 1)) return;
  fc_session *s = NULL;
  if (!sid)
    fc_http_error(msg, 400, "'sessionid' field is required");
  else if (!file)
    fc_http_error(msg, 400, "'file' field (a WAV file) is required");
  else if (!(s = fc_http_session_find(srv, msg, sid)))
    fc_http_error(msg, 404, "unknown session");
  else {
    fc_job *j = g_new0(fc_job, 1);
    j->kind = FC_JOB_AUDIO;
    j->s = s;
    j->data = file;
    j->name = name;
    file = NULL;
    name = NULL;
    fc_http_queue_paused(srv, msg, j);
  }
  if (file) g_bytes_unref(file);
  g_free(name);
  g_free(sid);
}

void fc_route_interrupt(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                        gpointer user) {
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = fc_http_session_of(user, msg, o);
  if (s) {
    fc_session_chat_cancel(s); /* the LLM's connection closes, its queued sentences go */
    fc_session_interrupt(s);
    fc_http_ok(msg, NULL);
    fc_session_unref(s);
  }
  g_object_unref(jp);
}

void fc_route_is_speaking(SoupServer *server, SoupServerMessage *msg, const char *path,
                          GHashTable *q, gpointer user) {
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = fc_http_session_of(user, msg, o);
  if (s) {
    fc_http_ok(msg, fc_session_is_speaking(s) ? "true" : "false");
    fc_session_unref(s);
  }
  g_object_unref(jp);
}

/* ---- recording -------------------------------------------------------------------------- */

/* POST /set_audiotype {sessionid, audiotype}: plays one of the avatar's action clips in the
 * session's idle time. audiotype: a clip's name, or a number as LiveTalking's pages send it
 * (N >= 1: the N-th clip; 0: stop the clip playing). */
void fc_route_set_audiotype(SoupServer *server, SoupServerMessage *msg, const char *path,
                            GHashTable *q, gpointer user) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = fc_http_session_of(srv, msg, o);
  JsonNode *n = s ? json_object_get_member(o, "audiotype") : NULL;
  int clip = -2;
  if (!s) {
    /* answered */
  } else if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
    clip = fc_avatar_find_clip(s->avatar, json_node_get_string(n));
    if (clip < 0) {
      fc_http_error(msg, 404, "%s", fc_error_detail(clip));
      clip = -2;
    }
  } else if (n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64) {
    gint64 v = json_node_get_int(n);
    if (v < 0 || v > fc_avatar_clip_count(s->avatar))
      fc_http_error(msg, 404, "audiotype %lld: the avatar has %d action clips", (long long)v,
                    fc_avatar_clip_count(s->avatar));
    else
      clip = (int)v - 1;
  } else {
    fc_http_error(msg, 400, "'audiotype' must be a clip name or a number");
  }
  if (clip >= -1) {
    g_mutex_lock(&s->lock);
    int err = fc_stream_play_clip(s->stream, clip);
    g_mutex_unlock(&s->lock);
    if (err) fc_http_error(msg, 400, "%s", fc_error_detail(err));
    else fc_http_ok(msg, NULL);
  }
  if (s) fc_session_unref(s);
  g_object_unref(jp);
}


void fc_route_record(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                     gpointer user) {
  fc_server *srv = user;
  if (g_str_has_prefix(path, "/record/")) {
    if (!fc_http_require_method(msg, "GET")) return;
    const fc_recording *r = g_hash_table_lookup(srv->recordings, path + 8);
    const char *who = fc_http_owner(msg);
    if (!r || (srv->keys && who && strcmp(who, r->owner) != 0)) {
      fc_http_error(msg, 404, "no finished recording for this session");
      return;
    }
    fc_http_serve_file(msg, r->path, "video/mp4");
    return;
  }
  if (!fc_http_require_method(msg, "POST")) return;
  JsonParser *jp = NULL;
  JsonObject *o = fc_http_json_body(msg, &jp);
  if (!o) return;
  fc_session *s = fc_http_session_of(srv, msg, o);
  const char *type = s ? fc_http_str_member(msg, o, "type") : NULL;
  if (type && strcmp(type, "start_record") == 0) {
    g_mutex_lock(&s->out_lock);
    int busy = s->rec != NULL;
    g_mutex_unlock(&s->out_lock);
    if (busy) {
      fc_http_error(msg, 409, "the session is already recording");
    } else {
      int err;
      char *file =
          g_strdup_printf("%s/%s-%lld.mp4", srv->record_dir, s->id, (long long)g_get_real_time());
      fc_recorder *rec = fc_recorder_start(file, fc_avatar_width(s->avatar),
                                           fc_avatar_height(s->avatar), &err);
      g_free(file);
      if (!rec) {
        fc_http_error(msg, 500, "cannot record: %s", fc_error_detail(err));
      } else {
        g_mutex_lock(&s->out_lock);
        s->rec = rec;
        s->rec_first = -1; /* the pacer numbers the recording from its first frame */
        g_mutex_unlock(&s->out_lock);
        fc_http_ok(msg, NULL);
      }
    }
  } else if (type && strcmp(type, "end_record") == 0) {
    g_mutex_lock(&s->out_lock);
    fc_recorder *rec = s->rec;
    s->rec = NULL;
    g_mutex_unlock(&s->out_lock);
    if (!rec) {
      fc_http_error(msg, 409, "the session is not recording");
    } else {
      fc_job *j = g_new0(fc_job, 1);
      j->kind = FC_JOB_RECORD_STOP;
      j->s = s;
      fc_session_ref(s);
      j->rec = rec;
      fc_http_queue_paused(srv, msg, j);
    }
  } else if (type) {
    fc_http_error(msg, 400, "'type' must be \"start_record\" or \"end_record\"");
  }
  if (s) fc_session_unref(s);
  g_object_unref(jp);
}

/* ---- events and audio in ---------------------------------------------------------------- */

void fc_route_sse(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                  gpointer user) {
  if (!fc_http_require_method(msg, "GET")) return;
  const char *id = fc_http_query_get(q, "sessionid");
  if (!id) {
    fc_http_error(msg, 400, "'sessionid' query parameter is required");
    return;
  }
  fc_session *s = fc_http_session_find(user, msg, id);
  if (!s) {
    fc_http_error(msg, 404, "unknown session");
    return;
  }
  SoupMessageHeaders *h = soup_server_message_get_response_headers(msg);
  soup_message_headers_set_encoding(h, SOUP_ENCODING_CHUNKED);
  soup_message_headers_set_content_type(h, "text/event-stream", NULL);
  soup_message_headers_replace(h, "Cache-Control", "no-cache");
  soup_server_message_set_status(msg, 200, NULL);
  static const char hello[] = ": facecast events\n\n";
  soup_message_body_append(soup_server_message_get_response_body(msg), SOUP_MEMORY_STATIC, hello,
                           sizeof hello - 1);
  fc_session_add_sse(s, msg);
  fc_session_unref(s);
}

typedef struct ws_ctx {
  fc_server *srv;
  fc_conn *conn; /* the connection (listener.h): a message may not grow past its cap */
  char id[40];
  int mode;      /* 0: the avatar lip-syncs the microphone; FC_LISTEN_*: voice chat */
  float buf[8192];
  int16_t pcm[8192];
} ws_ctx;

static void ws_message(SoupWebsocketConnection *c, gint type, GBytes *msg, gpointer user) {
  ws_ctx *w = user;
  fc_conn_ws_message(w->conn);
  /* A message can still arrive after a close frame began the closing handshake; then there
   * is nothing to answer (libsoup sends only on an open connection). */
  const int open = soup_websocket_connection_get_state(c) == SOUP_WEBSOCKET_STATE_OPEN;
  if (type != SOUP_WEBSOCKET_DATA_BINARY) {
    if (open)
      soup_websocket_connection_send_text(
          c, "{\"code\":-1,\"msg\":\"send binary PCM16LE, 16 kHz mono\"}");
    return;
  }
  fc_session *s = fc_session_find(w->srv, w->id);
  if (!s) {
    if (open)
      soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION, "session closed");
    return;
  }
  gsize n;
  const uint8_t *d = g_bytes_get_data(msg, &n);
  size_t samples = n / 2;
  if (w->mode) { /* voice chat: to the session's ear (listen.c), not into the stream */
    for (size_t off = 0; off < samples;) {
      size_t k = samples - off < G_N_ELEMENTS(w->pcm) ? samples - off : G_N_ELEMENTS(w->pcm);
      for (size_t i = 0; i < k; i++)
        w->pcm[i] = (int16_t)(d[2 * (off + i)] | d[2 * (off + i) + 1] << 8);
      fc_session_listen_audio(s, w->mode, w->pcm, k);
      off += k;
    }
    fc_session_unref(s);
    return;
  }
  for (size_t off = 0; off < samples;) {
    size_t k = samples - off < G_N_ELEMENTS(w->buf) ? samples - off : G_N_ELEMENTS(w->buf);
    for (size_t i = 0; i < k; i++) {
      const uint8_t *p = d + 2 * (off + i);
      w->buf[i] = (int16_t)(p[0] | p[1] << 8) / 32768.0f;
    }
    g_mutex_lock(&s->lock);
    int err = g_atomic_int_get(&s->closed) ? FC_ENOTFOUND
                                           : fc_stream_push_audio(s->stream, w->buf, k);
    if (!err) fc_session_want_fill_locked(s);
    g_mutex_unlock(&s->lock);
    if (err) break; /* queue full: the rest of this message is dropped */
    off += k;
  }
  fc_session_unref(s);
}

static void ws_closed(SoupWebsocketConnection *c, gpointer user) {
  ws_ctx *w = user;
  fc_session *s = fc_session_find(w->srv, w->id);
  if (s) {
    GList *l = g_list_find(s->ws, c);
    if (l) {
      s->ws = g_list_delete_link(s->ws, l);
      g_object_unref(c);
    }
    if (w->mode) fc_session_listen_flush(s); /* what was being said is answered */
    fc_session_unref(s);
  }
}

static void free_ws_ctx(gpointer data, GClosure *closure) {
  ws_ctx *w = data;
  fc_conn_unref(w->conn);
  g_free(w);
}

void fc_route_ws_audio(SoupServer *server, SoupServerMessage *msg, const char *path,
                       SoupWebsocketConnection *c, gpointer user) {
  fc_server *srv = user;
  GUri *uri = soup_server_message_get_uri(msg);
  const char *query = g_uri_get_query(uri);
  GHashTable *q = query ? g_uri_parse_params(query, -1, "&", G_URI_PARAMS_NONE, NULL) : NULL;
  const char *id = q ? g_hash_table_lookup(q, "sessionid") : NULL;
  const char *m = q ? g_hash_table_lookup(q, "mode") : NULL;
  int mode = !m || !strcmp(m, "lipsync") ? 0
             : !strcmp(m, "chat")         ? FC_LISTEN_CHAT
             : !strcmp(m, "echo")         ? FC_LISTEN_ECHO
                                          : -1;
  fc_session *s = id ? fc_http_session_find(srv, msg, id) : NULL;
  if (!s) {
    soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION,
                                    id ? "unknown session" : "sessionid query parameter required");
  } else if (mode < 0) {
    soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION,
                                    "mode must be lipsync, chat or echo");
  } else if (mode == FC_LISTEN_CHAT && !srv->llm) {
    soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION,
                                    "voice chat needs an LLM (--llm-url); try mode=echo");
  } else if (mode && srv->p.asr && !g_ascii_strcasecmp(srv->p.asr, "none")) {
    soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION,
                                    "speech recognition is off on this server (--asr none)");
  } else {
    ws_ctx *w = g_new0(ws_ctx, 1);
    w->srv = srv;
    w->conn = fc_conn_of(msg);
    fc_conn_mark_websocket(w->conn, FC_WS_MAX_MESSAGE);
    /* libsoup checks each frame; the listener the whole message (fragments add up) */
    soup_websocket_connection_set_max_incoming_payload_size(c, FC_WS_MAX_MESSAGE);
    g_strlcpy(w->id, s->id, sizeof w->id);
    w->mode = mode;
    s->ws = g_list_prepend(s->ws, g_object_ref(c));
    g_signal_connect_data(c, "message", G_CALLBACK(ws_message), w, NULL, 0);
    g_signal_connect_data(c, "closed", G_CALLBACK(ws_closed), w, free_ws_ctx, 0);
    fc_session_unref(s);
  }
  if (q) g_hash_table_destroy(q);
}

