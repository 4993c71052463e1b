/* WS /api/asr: speech recognition in the FunASR runtime's WebSocket protocol, which
 * LiveTalking's ASR page (webrtcapi-asr.html → asr/index.html) speaks to its own server at
 * ws(s)://HOST/api/asr; backed by the server's ASR (listen.h), whichever provider that is.
 *
 *   ← text {"mode": "2pass"|"online"|"offline", "wav_name", "is_speaking": true, "audio_fs"?,
 *           "wav_format"?, "chunk_size", "hotwords"?, "itn"?}: a (new) stream begins
 *   ← binary: PCM16LE at audio_fs (16000), or a whole WAV file's bytes (file mode: the header
 *           gives the rate), in any pieces
 *   ← text {"is_speaking": false} (or "is_finished": true): the end; what is left is answered
 *   → text {"mode": "2pass-offline" | "offline", "text", "wav_name", "is_final", "timestamp":
 *           null}: one per speech segment the VAD ends (is_final false, as FunASR's server
 *           sends them mid-stream) and one for the end (is_final true, text "" when nothing was
 *           left), after which the client may begin again on the same connection.
 *
 * FunASR's "2pass-online" partial results are not sent (LiveTalking's page only shows them).
 * A result the ASR could not make carries "error" and an empty text. */
#include "audio/resampler.h"
#include "core/jsonin.h"
#include "facecast/error.h"
#include "server/listen.h"
#include "server/listener.h"
#include "speech/voice.h"

#include <string.h>

typedef struct asr_conn {
  gint refs;
  fc_server *srv;
  fc_conn *conn;
  SoupWebsocketConnection *ws;
  fc_ear *ear;
  char mode[16], wav_name[64];
  fc_pcm_reader pcm;
  fc_resampler *rs;
  int rs_rate;
  uint32_t final_seg; /* the segment the end of the stream will be answered with */
  int16_t out[8192];
} asr_conn;

/* References: the connection's "closed" handler (until the connection object goes) and the
 * ear (until its last job is done). The connection object itself is held only while open:
 * holding it longer would keep it, its handler and so this alive in a cycle, and the client's
 * connection slot with them (found by fuzzing: 256 closed connections later, the client was
 * refused). */
static void conn_unref(gpointer p) {
  asr_conn *a = p;
  if (!g_atomic_int_dec_and_test(&a->refs)) return;
  fc_resampler_destroy(a->rs);
  if (a->ws) g_object_unref(a->ws);
  fc_conn_unref(a->conn);
  g_free(a);
}

static void send_json(asr_conn *a, JsonBuilder *b) {
  JsonGenerator *g = json_generator_new();
  JsonNode *root = json_builder_get_root(b);
  json_generator_set_root(g, root);
  char *t = json_generator_to_data(g, NULL);
  if (a->ws && soup_websocket_connection_get_state(a->ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text(a->ws, t);
  g_free(t);
  json_node_unref(root);
  g_object_unref(g);
}

static void on_final(void *user, uint32_t seg, const char *text, int err, const char *detail,
                     gint64 t_end, gint64 t_final) {
  asr_conn *a = user;
  int final = seg == a->final_seg;
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "mode");
  json_builder_add_string_value(b, !strcmp(a->mode, "2pass")    ? "2pass-offline"
                                   : !strcmp(a->mode, "online") ? "online"
                                                                : "offline");
  json_builder_set_member_name(b, "text");
  json_builder_add_string_value(b, text ? text : "");
  json_builder_set_member_name(b, "wav_name");
  json_builder_add_string_value(b, a->wav_name);
  json_builder_set_member_name(b, "is_final");
  json_builder_add_boolean_value(b, final);
  json_builder_set_member_name(b, "timestamp");
  json_builder_add_null_value(b);
  if (!text) {
    json_builder_set_member_name(b, "error");
    json_builder_add_string_value(b, detail ? detail : "speech recognition failed");
  }
  json_builder_end_object(b);
  send_json(a, b);
  g_object_unref(b);
}

/* Samples out of the PCM reader, at 16 kHz, to the ear. */
static int on_pcm(void *user, const int16_t *pcm, size_t n, int rate) {
  asr_conn *a = user;
  if (rate == FC_SAMPLE_RATE) {
    fc_ear_audio(a->ear, pcm, n);
    return 0;
  }
  int err = 0;
  if (!a->rs || a->rs_rate != rate) {
    fc_resampler_destroy(a->rs);
    if (!(a->rs = fc_resampler_create(rate, FC_SAMPLE_RATE, &err))) return err;
    a->rs_rate = rate;
  }
  const float *f;
  size_t k;
  if ((err = fc_resampler_s16(a->rs, pcm, n, 0, &f, &k))) return err;
  while (k) {
    size_t m = k < G_N_ELEMENTS(a->out) ? k : G_N_ELEMENTS(a->out);
    for (size_t i = 0; i < m; i++) {
      float v = f[i] * 32768.0f;
      a->out[i] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
    }
    fc_ear_audio(a->ear, a->out, m);
    f += m;
    k -= m;
  }
  return 0;
}

static void refuse(asr_conn *a, const char *why) {
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "text");
  json_builder_add_string_value(b, "");
  json_builder_set_member_name(b, "error");
  json_builder_add_string_value(b, why);
  json_builder_set_member_name(b, "is_final");
  json_builder_add_boolean_value(b, TRUE);
  json_builder_end_object(b);
  send_json(a, b);
  g_object_unref(b);
}

/* A new stream: its settings, fresh audio state. */
static void begin(asr_conn *a, JsonObject *o) {
  const char *mode = json_object_get_string_member_with_default(o, "mode", "2pass");
  const char *name = json_object_get_string_member_with_default(o, "wav_name", "microphone");
  gint64 fs = json_object_get_int_member_with_default(o, "audio_fs", FC_SAMPLE_RATE);
  g_strlcpy(a->mode, mode, sizeof a->mode);
  g_strlcpy(a->wav_name, name, sizeof a->wav_name);
  fc_pcm_reader_init(&a->pcm, fs >= 8000 && fs <= 48000 ? (int)fs : FC_SAMPLE_RATE);
}

static void on_message(SoupWebsocketConnection *ws, gint type, GBytes *msg, gpointer user) {
  asr_conn *a = user;
  fc_conn_ws_message(a->conn);
  gsize n;
  const char *d = g_bytes_get_data(msg, &n);
  if (type == SOUP_WEBSOCKET_DATA_BINARY) {
    int err = fc_pcm_reader_feed(&a->pcm, (const uint8_t *)d, n, on_pcm, a);
    if (err) refuse(a, fc_error_detail(err));
    return;
  }
  JsonObject *o;
  char why[128];
  JsonParser *jp = fc_json_parse_object(d, n, FC_JSON_MAX_DEPTH, &o, why, sizeof why);
  if (!jp) {
    char *m = g_strdup_printf("the message %s", why);
    refuse(a, m);
    g_free(m);
    return;
  }
  JsonNode *sp = json_object_get_member(o, "is_speaking");
  int speaking = sp && JSON_NODE_HOLDS_VALUE(sp) && json_node_get_value_type(sp) == G_TYPE_BOOLEAN
                     ? json_node_get_boolean(sp)
                     : -1;
  JsonNode *fin = json_object_get_member(o, "is_finished");
  if (fin && JSON_NODE_HOLDS_VALUE(fin) && json_node_get_value_type(fin) == G_TYPE_BOOLEAN &&
      json_node_get_boolean(fin))
    speaking = 0;
  if (speaking == 1) {
    begin(a, o);
  } else if (speaking == 0) {
    fc_ear_flush(a->ear, 1);
    a->final_seg = fc_ear_segment(a->ear);
  }
  g_object_unref(jp);
}

static void closure_unref(gpointer p, GClosure *c) { conn_unref(p); }

static void on_closed(SoupWebsocketConnection *ws, gpointer user) {
  asr_conn *a = user;
  fc_ear_close(a->ear); /* (drops its reference to a) */
  a->ear = NULL;
  g_object_unref(a->ws); /* (emitting, the connection holds itself) */
  a->ws = NULL;
}

void fc_route_asr(SoupServer *server, SoupServerMessage *msg, const char *path,
                  SoupWebsocketConnection *c, gpointer user) {
  fc_server *srv = user;
  int err;
  if (!fc_server_asr_enabled(srv, &err)) {
    soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_POLICY_VIOLATION,
                                    fc_error_detail(err));
    return;
  }
  asr_conn *a = g_new0(asr_conn, 1);
  a->refs = 2; /* the connection's and the ear's */
  a->srv = srv;
  a->conn = fc_conn_of(msg);
  fc_conn_mark_websocket(a->conn, FC_WS_MAX_MESSAGE);
  soup_websocket_connection_set_max_incoming_payload_size(c, FC_WS_MAX_MESSAGE);
  a->ws = g_object_ref(c);
  a->final_seg = (uint32_t)-1;
  g_strlcpy(a->mode, "2pass", sizeof a->mode);
  g_strlcpy(a->wav_name, "microphone", sizeof a->wav_name);
  fc_pcm_reader_init(&a->pcm, FC_SAMPLE_RATE);
  static const fc_ear_cbs cbs = {NULL, NULL, on_final};
  a->ear = fc_ear_new(srv, &cbs, a, conn_unref);
  g_signal_connect_data(c, "message", G_CALLBACK(on_message), a, NULL, 0);
  g_signal_connect_data(c, "closed", G_CALLBACK(on_closed), a, closure_unref, 0);
}
