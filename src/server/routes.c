/* The route table (LiveTalking's API plus WHEP, SSE, metrics, the web page) and its small
 * routes: health, metrics, static files. Plumbing is http.c; the other routes live in
 * routes_session.c, routes_speech.c and src/jobs/. */
#include "facecast/error.h"
#include "server/internal.h"
#include "server/fleet.h"
#include "server/listen.h"
#include "speech/voice.h"
#include "converse/asr.h"

#include <stdio.h>
#include <string.h>

/* ---- health, metrics, static files ------------------------------------------------------ */

static void h_healthz(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                      gpointer user) {
  fc_server *srv = user;
  g_mutex_lock(&srv->lock);
  guint n = g_hash_table_size(srv->sessions);
  g_mutex_unlock(&srv->lock);
  /* The frame size and the mouth's box let clients (and tests) watch the lips. */
  const fc_mouth_geom *m = fc_avatar_mouth(srv->avatar, 0);
  /* and what the conversation runs on: the voice, the ears, whether chat is on */
  const char *asr = srv->p.asr && *srv->p.asr ? srv->p.asr : "pocketsphinx";
  char *d = g_strdup_printf(
      "{\"sessions\":%u,\"max_sessions\":%d,\"model\":\"%s\",\"width\":%d,\"height\":%d,"
      "\"mouth\":{\"x\":%d,\"y\":%d,\"w\":%d,\"h\":%d},\"tts\":\"%s\",\"asr\":\"%s\","
      "\"chat\":%s",
      n, srv->p.max_sessions, fc_lipsync_name(srv->lipsync), fc_avatar_width(srv->avatar),
      fc_avatar_height(srv->avatar), (int)(m->cx - m->half_w), (int)(m->cy - 0.05f * m->face_h),
      (int)(2 * m->half_w), (int)(0.2f * m->face_h),
      srv->voice ? fc_voice_name(srv->voice) : "espeak",
      !g_ascii_strcasecmp(asr, "none") ? "none" : srv->asr ? fc_asr_name(srv->asr) : asr,
      srv->llm ? "true" : "false");
  GString *o = g_string_new(d);
  fc_push_json(srv, o); /* the transport, and a push output's connection */
  g_string_append_c(o, '}');
  fc_http_ok(msg, o->str);
  g_string_free(o, TRUE);
  g_free(d);
}

static void h_metrics(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                      gpointer user) {
  GString *o = g_string_new(NULL);
  fc_metrics_render(user, o, fc_http_owner(msg));
  soup_server_message_set_status(msg, 200, NULL);
  gsize len = o->len;
  soup_server_message_set_response(msg, "text/plain; version=0.0.4", SOUP_MEMORY_TAKE,
                                   g_string_free(o, FALSE), len);
}

static const char *mime_of(const char *path) {
  const char *dot = strrchr(path, '.');
  static const char *const map[][2] = {{".html", "text/html; charset=utf-8"},
                                       {".js", "text/javascript"},
                                       {".mjs", "text/javascript"},
                                       {".css", "text/css"},
                                       {".json", "application/json"},
                                       {".svg", "image/svg+xml"},
                                       {".png", "image/png"},
                                       {".ico", "image/x-icon"}};
  for (size_t i = 0; dot && i < G_N_ELEMENTS(map); i++)
    if (g_ascii_strcasecmp(dot, map[i][0]) == 0) return map[i][1];
  return "application/octet-stream";
}

static void h_static(SoupServer *server, SoupServerMessage *msg, const char *path, GHashTable *q,
                     gpointer user) {
  fc_server *srv = user;
  if (!fc_http_is_method(msg, "GET") && !fc_http_is_method(msg, "HEAD")) {
    fc_http_error(msg, 404, "no route %s %s", soup_server_message_get_method(msg), path);
    return;
  }
  if (strcmp(path, "/") == 0) path = "/index.html";
  if (strstr(path, "..") || strchr(path, '\\')) {
    fc_http_error(msg, 400, "bad path");
    return;
  }
  char *file = g_build_filename(srv->web_dir, path + 1, NULL);
  if (g_file_test(file, G_FILE_TEST_IS_REGULAR))
    fc_http_serve_file(msg, file, mime_of(file));
  else
    fc_http_error(msg, 404, "not found: %s", path);
  g_free(file);
}

void fc_http_register(fc_server *srv) {
  static const struct {
    const char *path;
    SoupServerCallback cb;
    int api; /* a control route: API keys apply */
  } routes[] = {{"/offer", fc_route_offer, 1},
                {"/whep", fc_route_whep, 1},
                {"/session", fc_route_session, 1},
                {"/human", fc_route_human, 1},
                {"/humanaudio", fc_route_humanaudio, 1},
                {"/interrupt_talk", fc_route_interrupt, 1},
                {"/is_speaking", fc_route_is_speaking, 1},
                {"/set_audiotype", fc_route_set_audiotype, 1},
                {"/record", fc_route_record, 1},
                {"/sse", fc_route_sse, 1},
                {"/api/ice-servers", fc_route_ice_servers, 1},
                {"/metrics", h_metrics, 1},
                {"/healthz", h_healthz, 0},
                {NULL, h_static, 0}};
  SoupServer *s = srv->soup;
  /* libsoup keeps early and normal handlers in one entry per path and picks the most specific
   * path, so the body check is registered on every path, not once at the root. */
  for (size_t i = 0; i < G_N_ELEMENTS(routes); i++) {
    soup_server_add_early_handler(s, routes[i].path, routes[i].api ? fc_http_early_api : fc_http_early_page, srv,
                                  NULL);
    fc_fleet_add_handler(srv, routes[i].path, routes[i].cb); /* fleet.h: maybe routed on */
  }
  soup_server_add_early_handler(s, "/ws/audio", fc_http_early_api, srv, NULL);
  soup_server_add_websocket_handler(s, "/ws/audio", NULL, NULL, fc_route_ws_audio, srv, NULL);
  /* the plain handler refuses before the upgrade; the WebSocket one makes the session */
  soup_server_add_early_handler(s, "/ws/stream", fc_http_early_api, srv, NULL);
  soup_server_add_handler(s, "/ws/stream", fc_route_ws_stream_check, srv, NULL);
  soup_server_add_websocket_handler(s, "/ws/stream", NULL, NULL, fc_route_ws_stream, srv, NULL);
  soup_server_add_early_handler(s, "/api/asr", fc_http_early_api, srv, NULL);
  soup_server_add_websocket_handler(s, "/api/asr", NULL, NULL, fc_route_asr, srv, NULL);
  fc_avatar_tasks_register(srv);
  fc_render_tasks_register(srv);
  fc_admin_register(srv);
  fc_fleet_register(srv);
}
