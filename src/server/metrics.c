/* /metrics in Prometheus' text format, each family's samples together after its HELP and TYPE
 * lines. The pacers' counters are copied under stat_lock (one consistent histogram); the
 * sessions' own counters are read under the server lock without their writers' locks: the
 * pacer, their only writer, stores them atomically (FC_STAT_SET), so a read sees an old or a
 * new value, never a torn one. */
#include "jobs/webhook.h"
#include "server/internal.h"
#include "server/fleet.h"
#include "server/listener.h"

#include <malloc.h>
#include <stdio.h>

const double fc_late_bounds_ms[FC_LATE_BUCKETS] = {1, 2, 5, 10, 20, 40, 80, 160};
const double fc_turn_bounds_s[FC_TURN_BUCKETS] = {0.025, 0.05, 0.1, 0.15, 0.2, 0.3,
                                                  0.4,   0.6,  1,   1.5,  3,   10};
const char *const fc_turn_stage_names[FC_TURN_STAGES] = {"asr", "llm_first_token",
                                                         "first_sentence", "first_audio",
                                                         "first_frame"};
const double fc_life_bounds_s[FC_LIFE_BUCKETS] = {10, 30, 60, 120, 300, 600, 1800, 3600, 7200};

void fc_metrics_late(fc_server *srv, double ms) { /* stat_lock held */
  int b = 0;
  while (b < FC_LATE_BUCKETS && ms > fc_late_bounds_ms[b]) b++;
  srv->late_hist[b]++;
  srv->late_sum_ms += ms;
  if (srv->late_samples && srv->late_n < srv->late_cap) srv->late_samples[srv->late_n++] = (float)ms;
}

void fc_metrics_session_closed(fc_server *srv, double seconds) { /* lock held */
  int b = 0;
  while (b < FC_LIFE_BUCKETS && seconds > fc_life_bounds_s[b]) b++;
  srv->life_hist[b]++;
  srv->life_sum_s += seconds;
}

/* One open session's figures, copied under the server lock and written out after it. */
typedef struct session_row {
  char id[40];
  int ready;
  unsigned long long frames, pictures_late, keyframes; /* %llu below */
  double infer_fps, final_fps, encoder_delay_ms;
  /* live-session figures (issue 17): per session what the totals sum, and its state */
  unsigned long long infer, dropped, late;
  int speaking;
  double age_s;
} session_row;

/* The text format wants each family's samples together, after its HELP and TYPE lines. */
static void family(GString *o, const char *name, const char *type, const char *help) {
  g_string_append_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(GString *o, const char *name, const char *help, uint64_t v) {
  family(o, name, "counter", help);
  g_string_append_printf(o, "%s %llu\n", name, (unsigned long long)v);
}

#define SESSION_FAMILY(name, type, help, fmt, field)                                      \
  do {                                                                                    \
    family(o, name, type, help);                                                          \
    for (int i = 0; i < n; i++)                                                           \
      g_string_append_printf(o, name "{session=\"%s\"} " fmt "\n", rows[i].id, rows[i].field); \
  } while (0)

void fc_metrics_render(fc_server *srv, GString *o, const char *owner) {
  uint64_t infer = 0, dropped = 0, enc_late = 0, ws_dropped[2] = {0, 0};
  int speaking = 0;
  g_mutex_lock(&srv->lock);
  int n = (int)g_hash_table_size(srv->sessions);
  session_row *rows = g_new0(session_row, n > 0 ? n : 1);
  GHashTableIter it;
  gpointer v;
  g_hash_table_iter_init(&it, srv->sessions);
  const int total = n;
  session_row hidden; /* a session whose id this request may not see: counted, not listed */
  n = 0;
  for (int i = 0; i < total && g_hash_table_iter_next(&it, NULL, &v); i++) {
    fc_session *s = v;
    /* ids are credentials: with keys, a key is shown its own sessions' only */
    int listed = !(srv->p.metrics_session_ids && srv->keys && (!owner || strcmp(owner, s->owner)));
    session_row *r = listed ? &rows[n++] : &hidden;
    /* The id is a credential: only the serial number, unless the operator asks for ids. */
    if (srv->p.metrics_session_ids)
      g_strlcpy(r->id, s->id, sizeof r->id);
    else
      snprintf(r->id, sizeof r->id, "%llu", (unsigned long long)s->serial);
    g_mutex_lock(&s->q_lock);
    r->ready = s->r_count;
    /* as fc_session_is_speaking (main loop, as this), without taking q_lock twice */
    r->speaking = s->r_count > 0 || g_atomic_int_get(&s->speech) || s->heard != 0;
    g_mutex_unlock(&s->q_lock);
    speaking += r->speaking;
    r->age_s = (g_get_monotonic_time() - s->opened_us) / 1e6;
    r->infer = FC_STAT_GET(s->infer_frames);
    r->dropped = FC_STAT_GET(s->dropped_frames);
    r->late = FC_STAT_GET(s->late_frames);
    r->frames = FC_STAT_GET(s->out_frames);
    r->infer_fps = FC_STAT_GET(s->infer_fps);
    r->final_fps = FC_STAT_GET(s->final_fps);
    /* The output's encoder (out_lock: the output may be going away). */
    fc_sink_stats ls;
    g_mutex_lock(&s->out_lock);
    fc_sink_get_stats(s->out, &ls);
    g_mutex_unlock(&s->out_lock);
    r->encoder_delay_ms = ls.frames_encoded ? ls.encode_delay_us / 1000.0 / ls.frames_encoded : 0;
    r->pictures_late = ls.frames_encoded_late;
    r->keyframes = ls.keyframes;
    infer += FC_STAT_GET(s->infer_frames);
    dropped += FC_STAT_GET(s->dropped_frames);
    enc_late += ls.frames_encoded_late;
    if (s->wsout) { /* main loop, as this: a WebSocket stream's drops for a slow client */
      uint64_t vd, ad, backlog;
      fc_wsout_stats(s->wsout, &vd, &ad, &backlog);
      ws_dropped[0] += vd, ws_dropped[1] += ad;
    }
  }
  infer += srv->closed_infer; /* the totals stay monotonic when sessions close */
  dropped += srv->closed_dropped;
  enc_late += srv->closed_enc_late;
  ws_dropped[0] += srv->closed_ws_dropped[0];
  ws_dropped[1] += srv->closed_ws_dropped[1];
  uint64_t created = srv->sessions_created, rejected = srv->sessions_rejected;
  uint64_t life[FC_LIFE_BUCKETS + 1];
  memcpy(life, srv->life_hist, sizeof life);
  const double life_sum = srv->life_sum_s;
  g_mutex_unlock(&srv->lock);

  /* The pacers' counters, one consistent copy. */
  uint64_t hist[FC_LATE_BUCKETS + 1], frames_out, frames_idle, frames_late, skipped, busy;
  double late_sum;
  g_mutex_lock(&srv->stat_lock);
  memcpy(hist, srv->late_hist, sizeof hist);
  late_sum = srv->late_sum_ms;
  frames_out = srv->frames_out, frames_idle = srv->frames_idle, frames_late = srv->frames_late;
  skipped = srv->ticks_skipped, busy = srv->ticks_busy;
  g_mutex_unlock(&srv->stat_lock);

  family(o, "facecast_sessions", "gauge", "Live sessions.");
  g_string_append_printf(o, "facecast_sessions %d\n", total);
  /* The allocator's view beside the kernel's RSS: memory in use that grows with sessions
   * opened and closed is a leak; RSS growing while this stays flat is fragmentation. */
  struct mallinfo2 mi = mallinfo2();
  family(o, "facecast_heap_bytes", "gauge",
         "malloc's heap: in_use (allocated, mmapped blocks included), free (held, not in use).");
  g_string_append_printf(o, "facecast_heap_bytes{kind=\"in_use\"} %zu\n", mi.uordblks + mi.hblkhd);
  g_string_append_printf(o, "facecast_heap_bytes{kind=\"free\"} %zu\n", mi.fordblks);
  family(o, "facecast_sessions_max", "gauge", "The server's --max-sessions.");
  g_string_append_printf(o, "facecast_sessions_max %d\n", srv->p.max_sessions);
  counter(o, "facecast_sessions_created_total", "Sessions opened.", created);
  counter(o, "facecast_sessions_rejected_total", "Sessions refused: all places in use.", rejected);
  fc_fleet_metrics(srv->fleet, o); /* the other nodes' places, requests routed to them */
  counter(o, "facecast_infer_frames_total", "Frames produced by lip-sync.", infer);
  counter(o, "facecast_final_frames_total", "Frames sent to outputs.", frames_out);
  counter(o, "facecast_idle_frames_total", "Frames sent while the session was not speaking.",
          frames_idle);
  counter(o, "facecast_late_frames_total",
          "Frames the pacer had to produce itself or could not send on time.", frames_late);
  counter(o, "facecast_dropped_frames_total", "Frames an output could not take.", dropped);
  family(o, "facecast_wsstream_dropped_total", "counter",
         "WebSocket stream (/ws/stream) messages dropped for clients that read too slowly.");
  g_string_append_printf(o, "facecast_wsstream_dropped_total{kind=\"video\"} %llu\n",
                         (unsigned long long)ws_dropped[0]);
  g_string_append_printf(o, "facecast_wsstream_dropped_total{kind=\"audio\"} %llu\n",
                         (unsigned long long)ws_dropped[1]);
  counter(o, "facecast_pacer_ticks_skipped_total",
          "Ticks skipped, not caught up, when a pacer fell more than 5 frames behind.", skipped);
  counter(o, "facecast_pacer_ticks_busy_total",
          "Session ticks without a frame: the session's frame was still being made.", busy);
  counter(o, "facecast_pictures_late_total",
          "Pictures that left their session's video encoder more than a frame period after the "
          "pacer pushed them.",
          enc_late);
  family(o, "facecast_frame_lateness_ms", "histogram", "Push time minus the frame's deadline.");
  uint64_t cum = 0;
  for (int b = 0; b <= FC_LATE_BUCKETS; b++) {
    cum += hist[b];
    if (b < FC_LATE_BUCKETS)
      g_string_append_printf(o, "facecast_frame_lateness_ms_bucket{le=\"%g\"} %llu\n",
                             fc_late_bounds_ms[b], (unsigned long long)cum);
    else
      g_string_append_printf(o, "facecast_frame_lateness_ms_bucket{le=\"+Inf\"} %llu\n",
                             (unsigned long long)cum);
  }
  g_string_append_printf(
      o, "facecast_frame_lateness_ms_sum %.3f\nfacecast_frame_lateness_ms_count %llu\n", late_sum,
      (unsigned long long)cum);
  /* conversation turns: main loop only, like this rendering */
  family(o, "facecast_turn_seconds", "histogram",
         "Conversation turns: seconds from the turn's start (the end of the user's speech, or "
         "the request) to each milestone.");
  for (int k = 0; k < FC_TURN_STAGES; k++) {
    uint64_t c = 0;
    for (int b = 0; b <= FC_TURN_BUCKETS; b++) {
      c += srv->turn_hist[k][b];
      char le[16];
      if (b < FC_TURN_BUCKETS) snprintf(le, sizeof le, "%g", fc_turn_bounds_s[b]);
      g_string_append_printf(o, "facecast_turn_seconds_bucket{stage=\"%s\",le=\"%s\"} %llu\n",
                             fc_turn_stage_names[k], b < FC_TURN_BUCKETS ? le : "+Inf",
                             (unsigned long long)c);
    }
    g_string_append_printf(o, "facecast_turn_seconds_sum{stage=\"%s\"} %.6f\n"
                              "facecast_turn_seconds_count{stage=\"%s\"} %llu\n",
                           fc_turn_stage_names[k], srv->turn_sum[k], fc_turn_stage_names[k],
                           (unsigned long long)srv->turn_count[k]);
  }

  if (srv->listener) {
    fc_listener_stats ls;
    fc_listener_get_stats(srv->listener, &ls);
    family(o, "facecast_http_connections", "gauge", "Open HTTP connections.");
    g_string_append_printf(o, "facecast_http_connections %llu\n", (unsigned long long)ls.open);
    counter(o, "facecast_http_connections_total", "HTTP connections accepted.", ls.accepted);
    family(o, "facecast_http_refused_total", "counter",
           "Connections refused at once: per_client (429, --max-conns-per-client), no_fd (503, "
           "out of file descriptors), malformed (a request libsoup refused, its body unread).");
    g_string_append_printf(o, "facecast_http_refused_total{reason=\"per_client\"} %llu\n"
                              "facecast_http_refused_total{reason=\"no_fd\"} %llu\n"
                              "facecast_http_refused_total{reason=\"malformed\"} %llu\n",
                           (unsigned long long)ls.refused_per_client, (unsigned long long)ls.refused_no_fd,
                           (unsigned long long)ls.refused_malformed);
    family(o, "facecast_http_closed_total", "counter",
           "Connections the server closed: header/body/idle/write timeouts, failed TLS "
           "handshakes, WebSocket messages over the limit.");
    g_string_append_printf(
        o,
        "facecast_http_closed_total{reason=\"header_timeout\"} %llu\n"
        "facecast_http_closed_total{reason=\"body_timeout\"} %llu\n"
        "facecast_http_closed_total{reason=\"idle_timeout\"} %llu\n"
        "facecast_http_closed_total{reason=\"write_timeout\"} %llu\n"
        "facecast_http_closed_total{reason=\"tls_failed\"} %llu\n"
        "facecast_http_closed_total{reason=\"ws_too_large\"} %llu\n",
        (unsigned long long)ls.timeout_header, (unsigned long long)ls.timeout_body,
        (unsigned long long)ls.timeout_idle, (unsigned long long)ls.timeout_write,
        (unsigned long long)ls.tls_failed,
        (unsigned long long)ls.ws_too_large);
  }

  if (srv->webhook) { /* notifications (notifyurl; jobs/webhook.h) */
    counter(o, "facecast_webhook_failures_total",
            "Webhook deliveries that ended without a 2xx answer: attempts used up, or a final "
            "answer (4xx, a redirect).",
            fc_webhook_failures(srv->webhook));
    counter(o, "facecast_webhook_dropped_total",
            "Webhook deliveries dropped unsent because the sender's queue was full.",
            fc_webhook_dropped(srv->webhook));
  }

  SESSION_FAMILY("facecast_session_ready_frames", "gauge", "Frames produced ahead, per session.",
                 "%d", ready);
  SESSION_FAMILY("facecast_session_frames_total", "counter", "Frames sent, per session.", "%llu",
                 frames);
  SESSION_FAMILY("facecast_session_infer_fps", "gauge", "Lip-sync frames a second, per session.",
                 "%.2f", infer_fps);
  SESSION_FAMILY("facecast_session_final_fps", "gauge", "Frames sent a second, per session.",
                 "%.2f", final_fps);
  SESSION_FAMILY("facecast_session_encoder_delay_ms", "gauge",
                 "Mean delay from push to leaving the video encoder, per session.", "%.2f",
                 encoder_delay_ms);
  SESSION_FAMILY("facecast_session_pictures_late_total", "counter",
                 "Pictures out of the video encoder more than a frame late, per session.", "%llu",
                 pictures_late);
  SESSION_FAMILY("facecast_session_keyframes_total", "counter",
                 "Key frames the video encoder made, per session.", "%llu", keyframes);
  /* ---- live sessions (issue 17): per-session state and totals, and closed sessions ---- */
  SESSION_FAMILY("facecast_session_speaking", "gauge",
                 "1 while the session speaks: speech queued, being made into frames, or being sent.",
                 "%d", speaking);
  SESSION_FAMILY("facecast_session_age_seconds", "gauge", "Seconds since the session opened.",
                 "%.1f", age_s);
  SESSION_FAMILY("facecast_session_infer_frames_total", "counter",
                 "Frames lip-sync made, per session.", "%llu", infer);
  SESSION_FAMILY("facecast_session_dropped_frames_total", "counter",
                 "Frames the session's output could not take.", "%llu", dropped);
  SESSION_FAMILY("facecast_session_late_frames_total", "counter",
                 "Ticks the pacer sent nothing or a frame made late on the spot, per session.",
                 "%llu", late);
  family(o, "facecast_sessions_speaking", "gauge", "Live sessions speaking now.");
  g_string_append_printf(o, "facecast_sessions_speaking %d\n", speaking);
  counter(o, "facecast_production_failures_total",
          "Frame productions that failed (their speech dropped).",
          (uint64_t)g_atomic_int_get(&srv->production_failures));
  family(o, "facecast_session_duration_seconds", "histogram",
         "How long closed sessions stayed open; _sum is the session-seconds served.");
  uint64_t lc = 0;
  for (int b = 0; b <= FC_LIFE_BUCKETS; b++) {
    lc += life[b];
    char le[16] = "+Inf";
    if (b < FC_LIFE_BUCKETS) snprintf(le, sizeof le, "%g", fc_life_bounds_s[b]);
    g_string_append_printf(o, "facecast_session_duration_seconds_bucket{le=\"%s\"} %llu\n", le,
                           (unsigned long long)lc);
  }
  g_string_append_printf(o,
                         "facecast_session_duration_seconds_sum %.3f\n"
                         "facecast_session_duration_seconds_count %llu\n",
                         life_sum, (unsigned long long)lc);
  /* ---- end of the live-session figures ---- */
  g_free(rows);
  fc_metrics_process(o);
  fc_push_metrics(srv, o);
  fc_videos_metrics(srv, o); /* bulk video jobs (src/jobs/videos.c) */

  if (!srv->sched) return;
  int nd = srv->n_devs;
  fc_sched_stats *st = g_new0(fc_sched_stats, nd > 0 ? nd : 1);
  int *ok = g_new0(int, nd > 0 ? nd : 1);
  for (int k = 0; k < nd; k++) ok[k] = fc_sched_stats_get(srv->sched, k, &st[k]) == 0;
#define DEVICE_FAMILY(name, type, help, fmt, expr)                                         \
  do {                                                                                     \
    family(o, name, type, help);                                                           \
    for (int k = 0; k < nd; k++)                                                           \
      if (ok[k]) g_string_append_printf(o, name "{device=\"%d\"} " fmt "\n", k, (expr));   \
  } while (0)
  DEVICE_FAMILY("facecast_sched_batches_total", "counter", "Lip-sync batches the device ran.",
                "%llu", (unsigned long long)st[k].batches);
  DEVICE_FAMILY("facecast_sched_frames_total", "counter", "Frames in those batches.", "%llu",
                (unsigned long long)st[k].frames);
  DEVICE_FAMILY("facecast_sched_late_total", "counter", "Requests completed after their deadline.",
                "%llu", (unsigned long long)st[k].late);
  DEVICE_FAMILY("facecast_sched_oom_retries_total", "counter",
                "Batches halved and retried after running out of device memory.", "%llu",
                (unsigned long long)st[k].oom_retries);
  DEVICE_FAMILY("facecast_sched_rejected_total", "counter", "Requests the scheduler refused.",
                "%llu", (unsigned long long)st[k].rejected);
  DEVICE_FAMILY("facecast_sched_mean_batch", "gauge", "Mean frames per batch.", "%.2f",
                st[k].mean_batch);
  DEVICE_FAMILY("facecast_sched_batch_ms_p95", "gauge", "p95 batch time of recent batches, ms.",
                "%.3f", st[k].p95_ms);
  DEVICE_FAMILY("facecast_sched_batch_limit", "gauge", "The current batch size limit.", "%d",
                st[k].limit);
  DEVICE_FAMILY("facecast_sched_queued", "gauge", "Requests waiting.", "%d", st[k].queued);
  DEVICE_FAMILY("facecast_sched_live_clients", "gauge", "Live sessions placed on the device.",
                "%d", st[k].live_clients);
#undef DEVICE_FAMILY
  g_free(ok);
  g_free(st);
}
