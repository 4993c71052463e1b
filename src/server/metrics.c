/* /metrics in Prometheus' text format. Counters are written by the pacer thread and read here
 * without locks: each is a naturally aligned 64-bit word, so a read sees an old or a new value,
 * never a torn one; a scrape is a snapshot good to a frame. */
#include "server/internal.h"

const double fc_late_bounds_ms[FC_LATE_BUCKETS] = {1, 2, 5, 10, 20, 40, 80, 160};

void fc_metrics_late(fc_server *srv, double ms) { /* stat_lock held */
  int b = 0;
  while (b < FC_LATE_BUCKETS && ms > fc_late_bounds_ms[b]) b++;
  srv->late_hist[b]++;
  srv->late_sum_ms += ms;
  if (srv->late_samples && srv->late_n < srv->late_cap) srv->late_samples[srv->late_n++] = (float)ms;
}

typedef struct totals {
  uint64_t infer, out, late, dropped, enc_late;
  int n, speaking;
} totals;

void fc_metrics_render(fc_server *srv, GString *o) {
  totals t = {0};
  GString *per = g_string_new(NULL);
  g_mutex_lock(&srv->lock);
  GHashTableIter it;
  gpointer v;
  g_hash_table_iter_init(&it, srv->sessions);
  while (g_hash_table_iter_next(&it, NULL, &v)) {
    fc_session *s = v;
    t.n++;
    t.infer += s->infer_frames;
    t.out += s->out_frames;
    t.late += s->late_frames;
    t.dropped += s->dropped_frames;
    g_mutex_lock(&s->q_lock);
    int depth = s->r_count;
    g_mutex_unlock(&s->q_lock);
    g_string_append_printf(per, "facecast_session_ready_frames{session=\"%s\"} %d\n", s->id, depth);
    g_string_append_printf(per, "facecast_session_frames_total{session=\"%s\"} %llu\n", s->id,
                           (unsigned long long)s->out_frames);
    g_string_append_printf(per, "facecast_session_infer_fps{session=\"%s\"} %.2f\n", s->id,
                           s->infer_fps);
    g_string_append_printf(per, "facecast_session_final_fps{session=\"%s\"} %.2f\n", s->id,
                           s->final_fps);
    /* The output's encoder (out_lock: the output may be going away). */
    fc_live_stats ls = {0};
    g_mutex_lock(&s->out_lock);
    if (s->live) fc_live_get_stats(s->live, &ls);
    g_mutex_unlock(&s->out_lock);
    t.enc_late += ls.frames_encoded_late;
    g_string_append_printf(per, "facecast_session_encoder_delay_ms{session=\"%s\"} %.2f\n", s->id,
                           ls.frames_encoded ? ls.encode_delay_us / 1000.0 / ls.frames_encoded : 0);
    g_string_append_printf(per, "facecast_session_pictures_late_total{session=\"%s\"} %llu\n",
                           s->id, (unsigned long long)ls.frames_encoded_late);
    g_string_append_printf(per, "facecast_session_keyframes_total{session=\"%s\"} %llu\n", s->id,
                           (unsigned long long)ls.keyframes);
  }
  t.infer += srv->closed_infer; /* the counters stay monotonic when sessions close */
  t.dropped += srv->closed_dropped;
  t.enc_late += srv->closed_enc_late;
  g_mutex_unlock(&srv->lock);

  g_string_append_printf(o,
                         "# HELP facecast_sessions Live sessions.\n# TYPE facecast_sessions gauge\n"
                         "facecast_sessions %d\n"
                         "facecast_sessions_max %d\n"
                         "# TYPE facecast_sessions_created_total counter\n"
                         "facecast_sessions_created_total %llu\n"
                         "# TYPE facecast_sessions_rejected_total counter\n"
                         "facecast_sessions_rejected_total %llu\n",
                         t.n, srv->p.max_sessions, (unsigned long long)srv->sessions_created,
                         (unsigned long long)srv->sessions_rejected);
  g_string_append_printf(
      o,
      "# HELP facecast_infer_frames_total Frames produced by lip-sync.\n"
      "# TYPE facecast_infer_frames_total counter\n"
      "facecast_infer_frames_total %llu\n"
      "# HELP facecast_final_frames_total Frames sent to outputs.\n"
      "# TYPE facecast_final_frames_total counter\n"
      "facecast_final_frames_total %llu\n"
      "facecast_idle_frames_total %llu\n"
      "# HELP facecast_late_frames_total Frames the pacer had to produce itself or could not "
      "send on time.\n"
      "facecast_late_frames_total %llu\n"
      "# HELP facecast_dropped_frames_total Frames an output could not take.\n"
      "facecast_dropped_frames_total %llu\n"
      "facecast_pacer_ticks_skipped_total %llu\n"
      "# HELP facecast_pacer_ticks_busy_total Session ticks without a frame: nothing was ready "
      "and a worker was producing.\n"
      "facecast_pacer_ticks_busy_total %llu\n"
      "# HELP facecast_pictures_late_total Pictures that left their session's video "
      "encoder more than a frame period after the pacer pushed them.\n"
      "facecast_pictures_late_total %llu\n",
      (unsigned long long)t.infer, (unsigned long long)srv->frames_out,
      (unsigned long long)srv->frames_idle, (unsigned long long)srv->frames_late,
      (unsigned long long)t.dropped, (unsigned long long)srv->ticks_skipped,
      (unsigned long long)srv->ticks_busy, (unsigned long long)t.enc_late);
  g_string_append(o, "# HELP facecast_frame_lateness_ms Push time minus the frame's deadline.\n"
                     "# TYPE facecast_frame_lateness_ms histogram\n");
  uint64_t cum = 0;
  for (int b = 0; b <= FC_LATE_BUCKETS; b++) {
    cum += srv->late_hist[b];
    if (b < FC_LATE_BUCKETS)
      g_string_append_printf(o, "facecast_frame_lateness_ms_bucket{le=\"%g\"} %llu\n",
                             fc_late_bounds_ms[b], (unsigned long long)cum);
    else
      g_string_append_printf(o, "facecast_frame_lateness_ms_bucket{le=\"+Inf\"} %llu\n",
                             (unsigned long long)cum);
  }
  g_string_append_printf(
      o, "facecast_frame_lateness_ms_sum %.3f\nfacecast_frame_lateness_ms_count %llu\n",
      srv->late_sum_ms, (unsigned long long)cum);
  g_string_append(o, "# HELP facecast_session_ready_frames Frames produced ahead, per session.\n"
                     "# TYPE facecast_session_ready_frames gauge\n");
  g_string_append_len(o, per->str, (gssize)per->len);
  g_string_free(per, TRUE);
  fc_sched_stats st;
  for (int k = 0; srv->sched && k < srv->n_devs; k++) {
    if (fc_sched_stats_get(srv->sched, k, &st) != 0) continue;
    if (k == 0)
      g_string_append(o, "# HELP facecast_sched_batches_total Lip-sync batches the device scheduler ran.\n"
                         "# TYPE facecast_sched_batches_total counter\n");
    g_string_append_printf(
        o,
        "facecast_sched_batches_total{device=\"%d\"} %llu\n"
        "facecast_sched_frames_total{device=\"%d\"} %llu\n"
        "facecast_sched_late_total{device=\"%d\"} %llu\n"
        "facecast_sched_oom_retries_total{device=\"%d\"} %llu\n"
        "facecast_sched_rejected_total{device=\"%d\"} %llu\n"
        "facecast_sched_mean_batch{device=\"%d\"} %.2f\n"
        "facecast_sched_batch_ms_p95{device=\"%d\"} %.3f\n"
        "facecast_sched_batch_limit{device=\"%d\"} %d\n"
        "facecast_sched_queued{device=\"%d\"} %d\n"
        "facecast_sched_live_clients{device=\"%d\"} %d\n",
        k, (unsigned long long)st.batches, k, (unsigned long long)st.frames, k,
        (unsigned long long)st.late, k, (unsigned long long)st.oom_retries, k,
        (unsigned long long)st.rejected, k, st.mean_batch, k, st.p95_ms, k, st.limit, k, st.queued,
        k, st.live_clients);
  }
}
