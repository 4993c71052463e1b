/* Push transports (--transport): LiveTalking's rtmp mode, where the server itself sends one
 * session to a media server (nginx-rtmp, SRS) for any number of players to pull, instead of
 * answering each viewer's offer.
 *
 * As LiveTalking does, the server makes that session at start with the id "0", which its
 * pages (rtmpapi.html) name in POST /human {sessionid:"0"}. It is a session like the others
 * (speech, /humanaudio, /interrupt_talk, SSE, recording) except for its output, which is the
 * push sink (media/rtmp.h: never blocks the pacer, reconnects by itself), and its life: it
 * has no viewer whose going would close it, so nothing reaps it; DELETE is refused; it goes
 * when the server stops. It takes one of --max-sessions; /offer and /whep keep working for
 * WebRTC viewers beside it.
 *
 * Each transport is a case in make_sink and in fc_push_check; "webrtc" (the default) has no
 * push session. WHIP push (LiveTalking's rtcpush) would be one more case. */
#include "facecast/error.h"
#include "media/rtmp.h"
#include "server/internal.h"

#include <stdio.h>
#include <string.h>

#define PUSH_SESSION_ID "0"

static int is_webrtc(const fc_server_params *p) {
  return !p->transport || !*p->transport || !strcmp(p->transport, "webrtc");
}

int fc_push_check(const fc_server_params *p) {
  if (is_webrtc(p)) {
    /* LiveTalking ignores it there, and its users' files may carry one: said, not refused */
    if (p->push_url && *p->push_url)
      g_warning("--push-url is for a push transport (--transport rtmp); with webrtc it is ignored");
    return FC_OK;
  }
  if (strcmp(p->transport, "rtmp") != 0)
    return fc_error_set(FC_EINVAL, "--transport '%s': expected webrtc or rtmp", p->transport);
  if (!p->push_url || !*p->push_url)
    return fc_error_set(FC_EINVAL,
                        "--transport rtmp needs --push-url rtmp://HOST[:PORT]/APP/STREAM");
  return fc_rtmp_check_url(p->push_url);
}

/* The URL for the log: the stream name is often a key (a streaming service's), so it is left
 * out. */
void fc_push_shown_url(const char *url, char *out, size_t n) {
  const char *last = strrchr(url, '/');
  snprintf(out, n, "%.*s/...", (int)(last ? last - url : (ptrdiff_t)strlen(url)), url);
}

/* From the push output's thread, on a change only (not per retry): the server's log. */
static void on_link(void *user, const fc_sink_link *l) {
  fc_server *srv = user;
  char url[256];
  fc_push_shown_url(srv->p.push_url, url, sizeof url);
  if (l->state == FC_SINK_LINK_CONNECTED)
    g_message("push %s: connected%s", url, l->connects > 1 ? " again" : "");
  else if (l->state == FC_SINK_LINK_RETRYING)
    g_message("push %s: %s: %s; retrying in %d s, then less often (up to every 30 s) until it "
              "connects",
              url, l->connects ? "connection lost" : "cannot connect", l->error,
              l->retry_in_ms / 1000);
}

static fc_sink *make_sink(fc_server *srv, fc_session *s, int *err) {
  const fc_live_params lp = fc_session_live_params(srv, s, FC_LIVE_WEBRTC);
  const fc_rtmp_params rp = {.url = srv->p.push_url,
                             .width = lp.width,
                             .height = lp.height,
                             .fps = lp.fps,
                             .sample_rate = lp.sample_rate,
                             .video_qp = lp.video_qp,
                             .x264_preset = lp.x264_preset,
                             .on_link = on_link,
                             .user = srv};
  return fc_rtmp_sink_create(&rp, err);
}

int fc_push_start(fc_server *srv) {
  if (is_webrtc(&srv->p)) return FC_OK;
  int err;
  fc_session *s = fc_session_new_id(srv, srv->avatar, NULL, PUSH_SESSION_ID, &err);
  if (!s) return err;
  s->push = 1;
  s->state = FC_LIVE_CONNECTED; /* not a viewer's connection: there is nothing to wait for */
  fc_sink *out = make_sink(srv, s, &err);
  if (!out) {
    fc_session_close(s, "its push output could not be made");
    fc_session_unref(s);
    return err;
  }
  g_mutex_lock(&s->out_lock);
  s->out = out;
  g_mutex_unlock(&s->out_lock);
  srv->push = s; /* the reference fc_session_new_id gave */
  char url[256];
  fc_push_shown_url(srv->p.push_url, url, sizeof url);
  g_message("session \"" PUSH_SESSION_ID "\" pushes to %s (%s)", url, srv->p.transport);
  return FC_OK;
}

/* The push output's figures, under its session's out_lock (it may be going away). 0 when
 * there is none. */
static int push_state(fc_server *srv, fc_sink_link *l, fc_sink_stats *st) {
  fc_session *s = srv->push;
  if (!s) return 0;
  g_mutex_lock(&s->out_lock);
  int have = s->out && fc_sink_get_link(s->out, l) == FC_OK;
  if (have) fc_sink_get_stats(s->out, st);
  g_mutex_unlock(&s->out_lock);
  return have;
}

void fc_push_json(fc_server *srv, GString *o) {
  g_string_append_printf(o, ",\"transport\":\"%s\"",
                         is_webrtc(&srv->p) ? "webrtc" : srv->p.transport);
  fc_sink_link l;
  fc_sink_stats st;
  if (!push_state(srv, &l, &st)) return;
  char *e = fc_http_json_quote(l.error);
  g_string_append_printf(
      o,
      ",\"push\":{\"sessionid\":\"" PUSH_SESSION_ID "\",\"state\":\"%s\",\"connects\":%llu,"
      "\"failures\":%llu,\"retry_in_ms\":%d,\"error\":%s,\"frames_pushed\":%llu,"
      "\"frames_dropped\":%llu,\"frames_encoded\":%llu,\"bytes_out\":%llu}",
      fc_sink_link_state_name(l.state), (unsigned long long)l.connects,
      (unsigned long long)l.failures, l.retry_in_ms, e, (unsigned long long)st.frames_pushed,
      (unsigned long long)st.frames_dropped, (unsigned long long)st.frames_encoded,
      (unsigned long long)st.bytes_out);
  g_free(e);
}

void fc_push_metrics(fc_server *srv, GString *o) {
  fc_sink_link l;
  fc_sink_stats st;
  if (!push_state(srv, &l, &st)) return;
  g_string_append_printf(
      o,
      "# HELP facecast_push_connected Whether the push output is connected to its server.\n"
      "# TYPE facecast_push_connected gauge\nfacecast_push_connected %d\n"
      "# HELP facecast_push_connects_total Connections the push output made (the first and "
      "every reconnection).\n# TYPE facecast_push_connects_total counter\n"
      "facecast_push_connects_total %llu\n"
      "# HELP facecast_push_failures_total Connection attempts failed and connections lost.\n"
      "# TYPE facecast_push_failures_total counter\nfacecast_push_failures_total %llu\n"
      "# HELP facecast_push_frames_dropped_total Frames the push output did not send (not "
      "connected, or behind).\n# TYPE facecast_push_frames_dropped_total counter\n"
      "facecast_push_frames_dropped_total %llu\n"
      "# HELP facecast_push_bytes_total Bytes the push output sent (muxed FLV).\n"
      "# TYPE facecast_push_bytes_total counter\nfacecast_push_bytes_total %llu\n",
      l.state == FC_SINK_LINK_CONNECTED, (unsigned long long)l.connects,
      (unsigned long long)l.failures, (unsigned long long)st.frames_dropped,
      (unsigned long long)st.bytes_out);
}
