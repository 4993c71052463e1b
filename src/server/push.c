/* Push transports (--transport): LiveTalking's rtmp and rtcpush modes, where the server itself
 * sends sessions to a media server (nginx-rtmp, SRS) for any number of players to pull,
 * instead of answering each viewer's offer.
 *
 * As LiveTalking does, the server makes those sessions at start: rtmp makes "0", pushed as FLV
 * to --push-url (media/rtmp.h); rtcpush makes "0".."max_sessions-1", each published over WHIP
 * (media/whip.h) to --push-url for "0" and to --push-url followed by its number for the others
 * (a plain string append, as LiveTalking's push_url + str(k): ...&stream=livestream1), with
 * "Authorization: Bearer $WHIP_TOKEN" when that is set. LiveTalking's pages (rtmpapi.html,
 * rtcpushapi.html) name them in POST /human {sessionid:"0"}. They are sessions like the others
 * (speech, /humanaudio, /interrupt_talk, SSE, recording) except for their output, a push sink
 * (never blocks the pacer, reconnects by itself), and their life: they have no viewer whose
 * going would close them, so nothing reaps them; DELETE is refused; they go when the server
 * stops. Each takes one of --max-sessions; /offer and /whep serve WebRTC viewers with what is
 * left: nothing under rtcpush, whose push sessions take every place (answered 503 "all N
 * sessions are in use", as LiveTalking's own /offer would have no room either), one fewer
 * under rtmp.
 *
 * Each transport is a case in fc_push_check, count and make_sink; "webrtc" (the default) has
 * no push session. */
#include "facecast/error.h"
#include "media/rtmp.h"
#include "media/whip.h"
#include "server/internal.h"

#include <stdio.h>
#include <string.h>

static int is_webrtc(const fc_server_params *p) {
  return !p->transport || !*p->transport || !strcmp(p->transport, "webrtc");
}

static int is_whip(const fc_server_params *p) {
  return p->transport && !strcmp(p->transport, "rtcpush");
}

int fc_push_check(const fc_server_params *p) {
  if (is_webrtc(p)) {
    /* LiveTalking ignores it there, and its users' files may carry one: said, not refused */
    if (p->push_url && *p->push_url)
      g_warning("--push-url is for a push transport (--transport rtmp or rtcpush); with webrtc "
                "it is ignored");
    return FC_OK;
  }
  if (strcmp(p->transport, "rtmp") != 0 && !is_whip(p))
    return fc_error_set(FC_EINVAL, "--transport '%s': expected webrtc, rtmp or rtcpush",
                        p->transport);
  if (!p->push_url || !*p->push_url)
    return fc_error_set(FC_EINVAL, is_whip(p) ? "--transport rtcpush needs --push-url "
                                                "http(s)://HOST[:PORT]/WHIP-ENDPOINT"
                                              : "--transport rtmp needs --push-url "
                                                "rtmp://HOST[:PORT]/APP/STREAM");
  return is_whip(p) ? fc_whip_check_url(p->push_url) : fc_rtmp_check_url(p->push_url);
}

/* The URL for the log: the stream name is often a key (a streaming service's), so it is left
 * out: an RTMP URL's last path segment, a WHIP URL's query (SRS: ?app=live&stream=NAME) or,
 * without one, its last path segment. */
void fc_push_shown_url(const char *url, char *out, size_t n) {
  const char *q = g_str_has_prefix(url, "http") ? strchr(url, '?') : NULL;
  if (q) {
    snprintf(out, n, "%.*s?...", (int)(q - url), url);
    return;
  }
  const char *last = strrchr(url, '/');
  snprintf(out, n, "%.*s/...", (int)(last ? last - url : (ptrdiff_t)strlen(url)), url);
}

/* From a push output's thread, on a change only (not per retry): the server's log. */
static void on_link(void *user, const fc_sink_link *l) {
  fc_push_out *po = user;
  char url[256];
  fc_push_shown_url(po->url, url, sizeof url);
  if (l->state == FC_SINK_LINK_CONNECTED)
    g_message("push \"%s\" to %s: connected%s", po->s->id, url, l->connects > 1 ? " again" : "");
  else if (l->state == FC_SINK_LINK_RETRYING)
    g_message("push \"%s\" to %s: %s: %s; retrying in %d s, then less often (up to every 30 s) "
              "until it connects",
              po->s->id, url, l->connects ? "connection lost" : "cannot connect", l->error,
              l->retry_in_ms / 1000);
}

static fc_sink *make_sink(fc_push_out *po, int *err) {
  fc_server *srv = po->srv;
  const fc_live_params lp = fc_session_live_params(srv, po->s, FC_LIVE_WEBRTC);
  const fc_sink_push_params out = {.width = lp.width,
                                   .height = lp.height,
                                   .fps = lp.fps,
                                   .sample_rate = lp.sample_rate,
                                   .video_qp = lp.video_qp,
                                   .x264_preset = lp.x264_preset,
                                   .on_link = on_link,
                                   .user = po};
  if (is_whip(&srv->p)) {
    const fc_whip_params wp = {
        .url = po->url, .token = g_getenv("WHIP_TOKEN"), .stun_server = lp.stun_server, .out = out};
    return fc_whip_sink_create(&wp, err);
  }
  const fc_rtmp_params rp = {.url = po->url, .out = out};
  return fc_rtmp_sink_create(&rp, err);
}

/* One push session: "k" with its output. */
static int start_one(fc_server *srv, int k) {
  int err;
  char id[16];
  snprintf(id, sizeof id, "%d", k);
  fc_push_out *po = &srv->push[k];
  po->srv = srv;
  po->url = k ? g_strdup_printf("%s%d", srv->p.push_url, k) : g_strdup(srv->p.push_url);
  fc_session *s = fc_session_new_id(srv, srv->avatar, NULL, id, &err);
  if (!s) return err;
  s->push = 1;
  s->state = FC_LIVE_CONNECTED; /* not a viewer's connection: there is nothing to wait for */
  po->s = s;                    /* the reference fc_session_new_id gave */
  srv->n_push = k + 1;
  fc_sink *out = make_sink(po, &err);
  if (!out) {
    fc_session_close(s, "its push output could not be made");
    return err;
  }
  g_mutex_lock(&s->out_lock);
  s->out = out;
  g_mutex_unlock(&s->out_lock);
  char url[256];
  fc_push_shown_url(po->url, url, sizeof url);
  g_message("session \"%s\" pushes to %s (%s)", id, url, srv->p.transport);
  return FC_OK;
}

int fc_push_start(fc_server *srv) {
  if (is_webrtc(&srv->p)) return FC_OK;
  const int n = is_whip(&srv->p) ? srv->p.max_sessions : 1;
  srv->push = g_new0(fc_push_out, n > 0 ? n : 1);
  for (int k = 0; k < n; k++) {
    int err = start_one(srv, k);
    if (err) return err;
  }
  return FC_OK;
}

void fc_push_stop(fc_server *srv) {
  for (int k = 0; k < srv->n_push; k++) {
    if (srv->push[k].s) fc_session_unref(srv->push[k].s);
    g_free(srv->push[k].url);
  }
  g_free(srv->push);
  srv->push = NULL;
  srv->n_push = 0;
}

/* A push output's figures, under its session's out_lock (it may be going away). 0 when there
 * is none. */
static int push_state(fc_push_out *po, fc_sink_link *l, fc_sink_stats *st) {
  fc_session *s = po->s;
  if (!s) return 0;
  memset(l, 0, sizeof *l);
  memset(st, 0, sizeof *st);
  g_mutex_lock(&s->out_lock);
  int have = s->out && fc_sink_get_link(s->out, l) == FC_OK;
  if (have) fc_sink_get_stats(s->out, st);
  g_mutex_unlock(&s->out_lock);
  return have;
}

static void one_json(fc_push_out *po, GString *o) {
  fc_sink_link l;
  fc_sink_stats st;
  if (!push_state(po, &l, &st)) {
    g_string_append(o, "null");
    return;
  }
  char *e = fc_http_json_quote(l.error);
  g_string_append_printf(o,
                         "{\"sessionid\":\"%s\",\"state\":\"%s\",\"connects\":%llu,"
                         "\"failures\":%llu,\"retry_in_ms\":%d,\"error\":%s,\"frames_pushed\":%llu,"
                         "\"frames_dropped\":%llu,\"frames_encoded\":%llu,\"bytes_out\":%llu}",
                         po->s->id, fc_sink_link_state_name(l.state),
                         (unsigned long long)l.connects, (unsigned long long)l.failures,
                         l.retry_in_ms, e, (unsigned long long)st.frames_pushed,
                         (unsigned long long)st.frames_dropped,
                         (unsigned long long)st.frames_encoded, (unsigned long long)st.bytes_out);
  g_free(e);
}

/* "push": session "0"'s output (the one RTMP has); "pushes": every push session's, in order. */
void fc_push_json(fc_server *srv, GString *o) {
  g_string_append_printf(o, ",\"transport\":\"%s\"",
                         is_webrtc(&srv->p) ? "webrtc" : srv->p.transport);
  if (!srv->n_push) return;
  g_string_append(o, ",\"push\":");
  one_json(&srv->push[0], o);
  g_string_append(o, ",\"pushes\":[");
  for (int k = 0; k < srv->n_push; k++) {
    if (k) g_string_append_c(o, ',');
    one_json(&srv->push[k], o);
  }
  g_string_append_c(o, ']');
}

void fc_push_metrics(fc_server *srv, GString *o) {
  static const struct {
    const char *name, *type, *help;
  } series[] = {
      {"facecast_push_connected", "gauge", "Whether the push output is connected to its server."},
      {"facecast_push_connects_total", "counter",
       "Connections the push output made (the first and every reconnection)."},
      {"facecast_push_failures_total", "counter",
       "Connection attempts failed and connections lost."},
      {"facecast_push_frames_dropped_total", "counter",
       "Frames the push output did not send (not connected, or behind)."},
      {"facecast_push_bytes_total", "counter",
       "Bytes the push output sent (muxed FLV for rtmp; encoded audio and video for rtcpush)."},
  };
  for (size_t i = 0; i < G_N_ELEMENTS(series); i++) {
    if (!srv->n_push) return;
    g_string_append_printf(o, "# HELP %s %s\n# TYPE %s %s\n", series[i].name, series[i].help,
                           series[i].name, series[i].type);
    for (int k = 0; k < srv->n_push; k++) {
      fc_sink_link l;
      fc_sink_stats st;
      if (!push_state(&srv->push[k], &l, &st)) continue;
      const unsigned long long v[] = {l.state == FC_SINK_LINK_CONNECTED, l.connects, l.failures,
                                      st.frames_dropped, st.bytes_out};
      g_string_append_printf(o, "%s{session=\"%s\"} %llu\n", series[i].name, srv->push[k].s->id,
                             v[i]);
    }
  }
}
