/* Live sessions: creation, the ready queue, speech, events and closing (see internal.h). */
#include "facecast/error.h"
#include "compose/compose.h"
#include "server/internal.h"
#include "server/fleet.h"
#include "server/listen.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* The pool's deadline for a session's next lip-sync call: the frame after the ones already
 * waiting for the pacer, 40 ms apart. An approximation of the pacer's clock, good enough to
 * order sessions by urgency. */
static int64_t first_due(void *user) {
  fc_session *s = user;
  g_mutex_lock(&s->q_lock);
  int ahead = s->r_count;
  g_mutex_unlock(&s->q_lock);
  return fc_sched_now_ns() + (int64_t)(ahead + 1) * 40000000;
}

/* Without the scheduler (benchmarks' solo_batches): the session's own batch, one backend call
 * at a time across the server. */
static int solo_lipsync(void *session, const fc_lipsync_req *reqs, fc_patch *out,
                        const fc_frame_info *info, int n) {
  fc_server *srv = ((fc_session *)session)->srv;
  g_mutex_lock(&srv->solo_lock);
  int err = fc_lipsync_run(srv->lipsync, reqs, out, n); /* solo runs use the first device */
  srv->solo_calls++, srv->solo_frames += (uint64_t)n;
  g_mutex_unlock(&srv->solo_lock);
  (void)info;
  return err;
}

/* x264's constant quantizer for a still avatar. On a talking photo (bench/x264_still_quality.sh,
 * docs/BENCHMARKS.md) 18 beats the capped CRF 23 that moving avatars get in the worst frame,
 * whole picture and mouth, is 0.2-0.6 dB below it on average (CRF keeps refining the still
 * background) and takes 0.86x its bits, for about a quarter less encoder time. */
#define STILL_QP 18

fc_live_params fc_session_live_params(const fc_server *srv, const fc_session *s, fc_live_kind k) {
  return (fc_live_params){.kind = k,
                          .width = fc_avatar_width(s->avatar),
                          .height = fc_avatar_height(s->avatar),
                          .fps = FC_FPS,
                          .sample_rate = FC_SAMPLE_RATE,
                          .video_qp = fc_avatar_frame_count(s->avatar) == 1 ? STILL_QP : 0,
                          .stun_server = srv->p.stun_server,
                          .turn_server = srv->p.turn_server,
                          .ice_port_min = srv->p.ice_port_min,
                          .ice_port_max = srv->p.ice_port_max,
                          .ice_no_tcp = srv->p.ice_no_tcp,
                          .x264_preset = srv->p.x264_preset,
                          .opus_complexity = srv->p.opus_complexity};
}

fc_session *fc_session_new(fc_server *srv, fc_avatar *av, const char *owner, int *err) {
  return fc_session_new_id(srv, av, owner, NULL, err);
}

fc_session *fc_session_new_id(fc_server *srv, fc_avatar *av, const char *owner, const char *id,
                              int *err) {
  fc_session *s = NULL;
  g_mutex_lock(&srv->lock);
  guint n = g_hash_table_size(srv->sessions);
  g_mutex_unlock(&srv->lock);
  if (srv->closing) { /* an /offer whose request got in just before the server began to stop */
    *err = fc_error_set(FC_EBUSY, "the server is stopping");
    fc_server_avatar_put(srv, av);
    return NULL;
  }
  if ((int)n >= srv->p.max_sessions) {
    srv->sessions_rejected++;
    *err =
        fc_error_set(FC_EBUSY, "all %d sessions are in use; try again later", srv->p.max_sessions);
    fc_server_avatar_put(srv, av);
    return NULL;
  }
  s = g_new0(fc_session, 1);
  s->refs = 1;
  s->srv = srv;
  g_strlcpy(s->owner, owner ? owner : "", sizeof s->owner);
  s->avatar = av;
  const guint nth = (guint)g_atomic_int_add(&srv->next_shard, 1);
  const guint shards = (guint)(srv->n_pacers > 0 ? srv->n_pacers : 1);
  s->shard = (int)(nth % shards);
  s->phase = (int)(nth / shards % FC_PACER_PHASES);
  g_mutex_init(&s->lock);
  g_mutex_init(&s->q_lock);
  g_mutex_init(&s->out_lock);
  g_mutex_init(&s->chat_lock);
  g_mutex_init(&s->text_lock);
  g_queue_init(&s->chat_q);
  s->state = FC_LIVE_CONNECTING;
  fc_lipsync_client_params cp = {.cls = FC_SCHED_LIVE, .first_due = first_due, .user = s};
  if (srv->pool && !(s->lsc = fc_lipsync_client_add(srv->pool, &cp, err))) goto fail;
  fc_stream_params sp = {.avatar = av,
                         .lipsync = srv->lipsync,
                         .run = srv->pool ? fc_lipsync_pool_hook : solo_lipsync,
                         .run_user = srv->pool ? (void *)s->lsc : (void *)s,
                         /* On the CPU one frame per lip-sync call: the pacer's fallback (a
                          * frame the workers have not made yet) then costs one frame, not a
                          * batch; batching across sessions is the device scheduler's job. On
                          * a GPU a call is a round trip through a batch whatever its size, so
                          * a worker asks for a ready queue's worth at once. */
                         .batch = !srv->pool ? 16 : srv->gpu ? FC_READY_FRAMES : 1,
                         .max_pending = (size_t)120 * FC_SAMPLE_RATE};
  if (!(s->stream = fc_stream_create(&sp, err))) goto fail;
  size_t fsz = (size_t)fc_avatar_width(av) * fc_avatar_height(av) * 3 / 2;
  for (int i = 0; i < FC_READY_FRAMES; i++)
    if (!(s->ready[i].i420 = malloc(fsz))) {
      *err = fc_error_set(FC_ENOMEM, "out of memory");
      goto fail;
    }
  g_mutex_lock(&srv->lock);
  if (id && g_hash_table_contains(srv->sessions, id)) {
    g_mutex_unlock(&srv->lock);
    *err = fc_error_set(FC_EBUSY, "session '%s' exists already", id);
    goto fail;
  }
  if (id) g_strlcpy(s->id, id, sizeof s->id);
  /* Otherwise a random (version 4) UUID, as LiveTalking's own ids: clients only echo it back,
   * and whoever knows it may act on the session, so it comes from the kernel's generator. */
  while (!id && (!s->id[0] || g_hash_table_contains(srv->sessions, s->id))) {
    uint8_t r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
      g_mutex_unlock(&srv->lock);
      *err = fc_error_set(FC_EIO, "no random bytes for a session id");
      goto fail;
    }
    r[6] = (uint8_t)((r[6] & 0x0f) | 0x40), r[8] = (uint8_t)((r[8] & 0x3f) | 0x80);
    snprintf(s->id, sizeof s->id,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0], r[1],
             r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14],
             r[15]);
  }
  /* Checked again under the lock: two offers may race for the last place. */
  if ((int)g_hash_table_size(srv->sessions) >= srv->p.max_sessions) {
    g_mutex_unlock(&srv->lock);
    srv->sessions_rejected++;
    *err =
        fc_error_set(FC_EBUSY, "all %d sessions are in use; try again later", srv->p.max_sessions);
    goto fail;
  }
  fc_session_ref(s);
  g_hash_table_insert(srv->sessions, s->id, s);
  s->serial = ++srv->sessions_created;
  s->opened_us = g_get_monotonic_time();
  g_mutex_unlock(&srv->lock);
  fc_fleet_kick(srv->fleet); /* other nodes learn where it is now, not at the next beat */
  return s;
fail:
  fc_session_unref(s);
  return NULL;
}

void fc_session_ref(fc_session *s) { g_atomic_int_inc(&s->refs); }

void fc_session_unref(fc_session *s) {
  if (!s || !g_atomic_int_dec_and_test(&s->refs)) return;
  /* The last reference: nobody can reach the session any more. The output and recorder were
   * stopped by fc_session_close (or never started). */
  fc_stream_destroy(s->stream);
  fc_lipsync_client_remove(s->lsc); /* nothing of ours is queued by now */
  for (int i = 0; i < FC_READY_FRAMES; i++) free(s->ready[i].i420);
  fc_server_avatar_put(s->srv, s->avatar);
  g_mutex_clear(&s->lock);
  g_mutex_clear(&s->q_lock);
  g_mutex_clear(&s->out_lock);
  g_queue_clear(&s->chat_q); /* emptied at close */
  g_free(s->ref_audio);
  g_free(s->ref_text);
  g_mutex_clear(&s->chat_lock);
  for (size_t i = 0; i < G_N_ELEMENTS(s->texts); i++) g_free(s->texts[i].text);
  g_mutex_clear(&s->text_lock);
  g_free(s);
}

fc_session *fc_session_find(fc_server *srv, const char *id) {
  if (!id) return NULL;
  g_mutex_lock(&srv->lock);
  fc_session *s = g_hash_table_lookup(srv->sessions, id);
  if (s) fc_session_ref(s);
  g_mutex_unlock(&srv->lock);
  return s;
}

static void note_pending_locked(fc_session *s) {
  g_atomic_int_set(&s->pending, fc_stream_producible(s->stream));
  g_atomic_int_set(&s->speech, fc_stream_pending_frames(s->stream) > 0);
}

void fc_session_want_fill(fc_session *s) {
  if (!g_atomic_int_get(&s->pending)) return;
  g_mutex_lock(&s->q_lock);
  int want = !s->fill_queued && s->r_count < FC_READY_FRAMES;
  if (want) s->fill_queued = 1;
  g_mutex_unlock(&s->q_lock);
  if (!want) return;
  fc_job *j = g_new0(fc_job, 1);
  j->kind = FC_JOB_FILL;
  j->s = s;
  fc_session_ref(s);
  if (fc_job_push(s->srv, j)) {
    g_mutex_lock(&s->q_lock);
    s->fill_queued = 0;
    g_mutex_unlock(&s->q_lock);
  }
}

void fc_session_want_fill_locked(fc_session *s) {
  note_pending_locked(s);
  if (!g_atomic_int_get(&s->closed)) fc_session_want_fill(s);
}

/* Drops the speech of the stream and of the ready queue (s->lock held); returns the utterance
 * whose end the caller posts (0: none was on the way out). Keeps only the slot the pacer is
 * pushing right now, and takes its utterance marks: one that would start now never will. */
static uint32_t interrupt_locked(fc_session *s) {
  fc_stream_interrupt(s->stream);
  note_pending_locked(s);
  g_mutex_lock(&s->q_lock);
  uint32_t cut = s->pushed_utt;
  s->pushed_utt = 0;
  s->r_count = s->r_peeked ? 1 : 0;
  if (s->r_peeked) {
    s->ready[s->r_head].info.utt_started = 0;
    s->ready[s->r_head].info.utt_ended = 0;
  }
  g_mutex_unlock(&s->q_lock);
  return cut;
}

/* Production holds the stream lock (s->lock) throughout, waiting for the lip-sync batch
 * included; the ready queue is touched under q_lock only to find the free slot and to publish
 * the frame. The copy in between needs no lock: only this producer writes that slot (the
 * stream lock makes it the only one), the pacer reads only slots counted in r_count, and an
 * interrupt (which shortens the queue) needs the stream lock too. */
void fc_session_fill_locked(fc_session *s, int max) {
  const int w = fc_avatar_width(s->avatar), h = fc_avatar_height(s->avatar);
  for (int made = 0; made < max && !g_atomic_int_get(&s->closed); made++) {
    g_mutex_lock(&s->q_lock);
    int room = s->r_count < FC_READY_FRAMES;
    fc_ready_slot *slot = &s->ready[(s->r_head + s->r_count) % FC_READY_FRAMES];
    g_mutex_unlock(&s->q_lock);
    if (!room) break;
    fc_frame_info fi;
    const uint8_t *img;
    const int16_t *pcm;
    int err = fc_stream_next_frame(s->stream, &fi, &img, &pcm);
    if (err) {
      if (err != FC_EAGAIN && err != FC_EEOF) {
        /* Speech that cannot be made is dropped, as by an interrupt: otherwise the session
         * would wait for it for ever (on a GPU the pacer sends nothing while speech is
         * pending) instead of going back to its idle frames. */
        g_atomic_int_inc(&s->srv->production_failures);
        g_warning("session %llu: frame production failed, speech dropped: %s", (unsigned long long)s->serial,
                  fc_error_detail(err));
        uint32_t cut = interrupt_locked(s);
        if (cut) fc_session_post_event(s, "end", cut);
      }
      break;
    }
    /* A talking photo differs from its still picture only around the mouth: the slot gets
     * two rectangles instead of a whole frame (the copies were a tenth of a session's CPU). */
    const fc_i420_delta d = fc_stream_frame_delta(s->stream);
    uint8_t *dp[3];
    int ds[3];
    fc_i420_planes(slot->i420, w, h, dp, ds);
    fc_i420_update(dp, ds, &slot->held, img, &d, w, h);
    memcpy(slot->pcm, pcm, sizeof slot->pcm);
    slot->info = fi;
    g_mutex_lock(&s->q_lock);
    s->r_count++;
    s->infer_total++;
    g_mutex_unlock(&s->q_lock);
  }
  note_pending_locked(s);
}

void fc_session_fill(fc_session *s) {
  g_mutex_lock(&s->lock);
  fc_session_fill_locked(s, FC_READY_FRAMES);
  g_mutex_lock(&s->q_lock);
  s->fill_queued = 0;
  g_mutex_unlock(&s->q_lock);
  g_mutex_unlock(&s->lock);
}

int fc_session_is_speaking(fc_session *s) {
  g_mutex_lock(&s->q_lock);
  int busy = s->r_count > 0 || g_atomic_int_get(&s->speech);
  g_mutex_unlock(&s->q_lock);
  return busy || s->heard != 0;
}

void fc_session_interrupt(fc_session *s) {
  g_mutex_lock(&s->lock);
  uint32_t cut = interrupt_locked(s);
  g_mutex_unlock(&s->lock);
  if (cut) fc_session_post_event(s, "end", cut);
}

/* What other threads hand the main loop, in order: SSE events, and the timeline's first
 * audio (type NULL). */
typedef struct sse_event {
  fc_session *s;
  const char *type;
  uint32_t utt, turn;
  char *json; /* an event named type with this data (fc_session_post_sse_json) */
  gint64 at;
} sse_event;

static gboolean deliver_event(gpointer data) {
  sse_event *ev = data;
  if (!ev->type)
    fc_session_turn_audio(ev->s, ev->turn, ev->utt, ev->at);
  else if (ev->json)
    fc_session_send_sse_json(ev->s, ev->type, ev->json);
  else
    fc_session_send_sse(ev->s, ev->type, ev->utt);
  return G_SOURCE_REMOVE;
}

static void free_event(gpointer data) {
  sse_event *ev = data;
  fc_session_unref(ev->s);
  g_free(ev->json);
  g_free(ev);
}

static void post_event(fc_session *s, const char *type, uint32_t utt, uint32_t turn,
                       const char *json) {
  sse_event *ev = g_new(sse_event, 1);
  fc_session_ref(s);
  *ev = (sse_event){s, type, utt, turn, g_strdup(json), g_get_monotonic_time()};
  /* An idle source rather than g_main_context_invoke, which would run at once on the main
   * thread and could overtake a start event the pacer queued before. */
  GSource *src = g_idle_source_new();
  g_source_set_priority(src, G_PRIORITY_DEFAULT);
  g_source_set_callback(src, deliver_event, ev, free_event);
  g_source_attach(src, s->srv->ctx);
  g_source_unref(src);
}

void fc_session_post_event(fc_session *s, const char *type, uint32_t utt) {
  post_event(s, type, utt, 0, NULL);
}

void fc_session_post_sse_json(fc_session *s, const char *name, const char *json) {
  post_event(s, name, 0, 0, json);
}

void fc_session_post_turn_audio(fc_session *s, uint32_t turn, uint32_t utt) {
  post_event(s, NULL, utt, turn, NULL);
}

void fc_session_send_sse(fc_session *s, const char *type, uint32_t utt) {
  if (strcmp(type, "start") == 0) {
    s->heard = utt;
    fc_session_turn_frame(s, utt); /* a conversation turn's first speaking frame went out */
  } else if (s->heard == utt) {
    s->heard = 0;
  }
  /* LiveTalking's shape (an unnamed event whose data has status and text) with facecast's
   * fields after it; "event" names the kind as the named events' lines do. */
  GString *ev = g_string_new("data: {\"status\":");
  char *q = fc_http_json_quote(type);
  g_string_append(ev, q);
  g_free(q);
  g_mutex_lock(&s->text_lock);
  for (size_t i = 0; i < G_N_ELEMENTS(s->texts); i++) {
    if (s->texts[i].text && s->texts[i].utt == utt) {
      q = fc_http_json_quote(s->texts[i].text);
      g_string_append_printf(ev, ",\"text\":%s", q);
      g_free(q);
      break;
    }
  }
  g_mutex_unlock(&s->text_lock);
  g_string_append_printf(ev, ",\"event\":\"speech\",\"sessionid\":\"%s\",\"type\":\"%s\",\"id\":%u}\n\n",
                         s->id, type, utt);
  for (GList *l = s->sse; l; l = l->next) {
    SoupServerMessage *m = l->data;
    soup_message_body_append(soup_server_message_get_response_body(m), SOUP_MEMORY_COPY, ev->str,
                             ev->len);
    soup_server_message_unpause(m);
  }
  /* the stream's client gets the same JSON as a text message (without "data: " and the
   * blank line) */
  if (s->wsout) fc_wsout_send_text(s->wsout, ev->str + 6, ev->len - 8);
  g_string_free(ev, TRUE);
}

void fc_session_utt_text(fc_session *s, uint32_t utt, const char *text) {
  if (!utt || !text) return;
  char *t = g_strdup(text);
  g_mutex_lock(&s->text_lock);
  unsigned i = s->text_next++ % G_N_ELEMENTS(s->texts);
  char *old = s->texts[i].text;
  s->texts[i].utt = utt;
  s->texts[i].text = t;
  g_mutex_unlock(&s->text_lock);
  g_free(old);
}

void fc_session_send_sse_json(fc_session *s, const char *name, const char *json) {
  char *ev = g_strdup_printf("event: %s\ndata: %s\n\n", name, json);
  size_t n = strlen(ev);
  for (GList *l = s->sse; l; l = l->next) {
    SoupServerMessage *m = l->data;
    soup_message_body_append(soup_server_message_get_response_body(m), SOUP_MEMORY_COPY, ev, n);
    soup_server_message_unpause(m);
  }
  g_free(ev);
}

static void sse_finished(SoupServerMessage *msg, gpointer user) {
  fc_session *s = user;
  GList *l = g_list_find(s->sse, msg);
  if (l) {
    s->sse = g_list_delete_link(s->sse, l);
    g_object_unref(msg);
  }
}

void fc_session_add_sse(fc_session *s, SoupServerMessage *msg) {
  s->sse = g_list_prepend(s->sse, g_object_ref(msg));
  /* No reference for the handler: fc_session_close disconnects it before the session can go. */
  g_signal_connect(msg, "finished", G_CALLBACK(sse_finished), s);
}

static gboolean trim_again(gpointer flag) {
  malloc_trim(0);
  *(guint *)flag = 0;
  return G_SOURCE_REMOVE;
}

void fc_session_close(fc_session *s, const char *why) {
  fc_server *srv = s->srv;
  g_mutex_lock(&srv->lock);
  int owned = g_hash_table_lookup(srv->sessions, s->id) == s;
  if (owned) {
    /* Its counters join the closed sessions' in the same critical section as it leaves the
     * table, so a scrape sees them in one place or the other (frames after this are not
     * counted). Lock order as in /metrics: srv->lock, then out_lock. */
    fc_sink_stats ls;
    g_mutex_lock(&s->out_lock);
    fc_sink_get_stats(s->out, &ls);
    g_mutex_unlock(&s->out_lock);
    srv->closed_infer += FC_STAT_GET(s->infer_frames);
    srv->closed_dropped += FC_STAT_GET(s->dropped_frames);
    srv->closed_enc_late += ls.frames_encoded_late;
    if (s->wsout) {
      uint64_t vd, ad, backlog;
      fc_wsout_stats(s->wsout, &vd, &ad, &backlog);
      srv->closed_ws_dropped[0] += vd;
      srv->closed_ws_dropped[1] += ad;
    }
    fc_metrics_session_closed(srv, (g_get_monotonic_time() - s->opened_us) / 1e6);
    g_hash_table_remove(srv->sessions, s->id);
  }
  g_mutex_unlock(&srv->lock);
  if (!owned) return; /* closed already */
  fc_fleet_kick(srv->fleet); /* its place is free again, its key goes */
  fc_session_ref(s);  /* keep it alive through this function */
  /* Atomic, read without locks by pacers and producers; not under the stream lock, which a
   * worker may hold for a whole lip-sync batch while this runs on the main loop. */
  g_atomic_int_set(&s->closed, 1);
  if (s->connect_timer) g_source_remove(s->connect_timer);
  s->connect_timer = 0;
  fc_session_chat_free(s); /* the LLM's connection closes now, queued sentences go */
  fc_session_listen_free(s); /* (the ear held a reference: it goes once its jobs are done) */
  if (s->offer_msg) {
    fc_http_error(s->offer_msg, 500, "session closed before the answer: %s", why);
    soup_server_message_unpause(s->offer_msg);
    g_object_unref(s->offer_msg);
    s->offer_msg = NULL;
  }
  while (s->sse) {
    SoupServerMessage *m = s->sse->data;
    s->sse = g_list_delete_link(s->sse, s->sse);
    g_signal_handlers_disconnect_by_func(m, sse_finished, s);
    soup_message_body_complete(soup_server_message_get_response_body(m));
    soup_server_message_unpause(m);
    g_object_unref(m);
  }
  while (s->ws) {
    SoupWebsocketConnection *c = s->ws->data;
    s->ws = g_list_delete_link(s->ws, s->ws);
    if (soup_websocket_connection_get_state(c) == SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close(c, SOUP_WEBSOCKET_CLOSE_NORMAL, "session closed");
    g_object_unref(c);
  }
  fc_wsout *wsout = s->wsout; /* its WebSocket closes with the reason; freed after the output */
  fc_wsout_close(wsout, why);
  g_mutex_lock(&s->out_lock);
  fc_sink *out = s->out;
  fc_recorder *rec = s->rec;
  s->out = NULL;
  s->rec = NULL;
  g_mutex_unlock(&s->out_lock);
  fc_sink_destroy(out); /* after this the output calls nothing of wsout's */
  s->wsout = NULL;
  fc_wsout_free(wsout);
  /* A session's pipeline frees a few megabytes in many small blocks; hand them back to the
   * system now, so the resident size tracks the sessions that are open — and once more when
   * its streaming threads have finished tearing down (they free after this returns: without
   * the second trim, anonymous RSS after a churn drifted up by ~8 % while malloc's memory in
   * use stayed flat). */
  malloc_trim(0);
  static guint trim_later;
  if (!trim_later) trim_later = g_timeout_add_seconds(3, trim_again, &trim_later);
  if (rec) {
    fc_job *j = g_new0(fc_job, 1);
    j->kind = FC_JOB_RECORD_STOP;
    j->s = s;
    j->rec = rec;
    fc_session_ref(s);
    fc_job_push(srv, j);
  }
  if (!srv->p.quiet) g_message("session %llu closed: %s", (unsigned long long)s->serial, why);
  fc_session_unref(s); /* the table's reference */
  fc_session_unref(s);
}
