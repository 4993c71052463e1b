/* The pacer: the one place where wall-clock time decides anything.
 *
 * Every 40 ms (absolute deadlines on CLOCK_MONOTONIC, so sleeps do not drift) it takes one
 * frame per session: the head of the session's ready queue; if that is empty while speech is
 * pending, the frame is produced here and then (counted late); if no speech is pending, the
 * idle frame (cached rest picture, silence). The frame goes to the live output and the
 * recorder; utterance marks become SSE events; the ready queue is topped up by a worker.
 * Lateness (push time minus the tick's deadline) feeds the histogram in /metrics.
 * Drop policy: when a whole tick finishes more than 5 frames behind schedule (the machine is
 * overloaded), the missed ticks are skipped — frames are not sent in a burst to catch up — and
 * counted as ticks_skipped; every session's clock stays continuous (frames are numbered, not
 * timed), so audio and video stay together.
 */
#include "facecast/error.h"
#include "server/internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#define TICK_NS (1000000000LL / FC_FPS)

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(int64_t t) {
  struct timespec ts = {(time_t)(t / 1000000000LL), (long)(t % 1000000000LL)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static void log_rates(fc_session *s, int64_t now) {
  if (s->out_frames - s->log_out0 < 100) return;
  double dt = (now - s->log_t0) / 1e9;
  if (dt > 0) {
    s->infer_fps = (s->infer_frames - s->log_infer0) / dt;
    s->final_fps = (s->out_frames - s->log_out0) / dt;
    if (!s->srv->p.quiet)
      g_message("session %s: actual avg infer fps %.1f, actual avg final fps %.1f", s->id,
                s->infer_fps, s->final_fps);
  }
  s->log_t0 = now;
  s->log_out0 = s->out_frames;
  s->log_infer0 = s->infer_frames;
}

#define STILL_EVERY 5 /* a still frame is sent 5 times a second */

static void pace_one(fc_server *srv, fc_session *s, int64_t deadline) {
  const uint8_t *img;
  const int16_t *pcm;
  fc_frame_info fi;
  int from_queue = 0, late = 0, err = 0;

  g_mutex_lock(&s->lock);
  if (s->closed) {
    g_mutex_unlock(&s->lock);
    return;
  }
  if (!s->r_count && fc_stream_pending_frames(s->stream) > 0) {
    /* Speech is waiting but the workers have not produced it yet: make this one frame here
     * (the workers catch up with the rest). */
    fc_session_fill_locked(s, 1);
    late = 1;
  }
  if (s->r_count) {
    fc_ready_slot *slot = &s->ready[s->r_head];
    s->r_peeked = 1;
    img = slot->i420;
    pcm = slot->pcm;
    fi = slot->info;
    from_queue = 1;
  } else {
    err = fc_stream_idle_frame(s->stream, &fi, &img, &pcm);
  }
  g_mutex_unlock(&s->lock);
  if (err) {
    g_warning("session %s: no frame: %s", s->id, fc_error_detail(err));
    return;
  }

  /* A still picture at rest (a photo) is re-sent only every STILL_EVERY frames: silent
   * sessions then cost their encoder a fifth; speech resumes at the full rate at once. */
  const uint8_t *send = img;
  if (fi.still && ++s->still_run % STILL_EVERY != 0) send = NULL;
  if (!fi.still) s->still_run = 0;
  if (g_mutex_trylock(&s->out_lock)) {
    if (s->live && fc_live_push(s->live, send, fi.index, pcm, FC_SAMPLES_PER_FRAME,
                                fi.index * FC_SAMPLES_PER_FRAME))
      s->dropped_frames++;
    if (s->rec) fc_recorder_push(s->rec, img, pcm, fi.index - s->rec_first);
    g_mutex_unlock(&s->out_lock);
  } else {
    s->dropped_frames++; /* the output is being torn down */
  }

  g_mutex_lock(&s->lock);
  if (from_queue) {
    /* Marks are read after the push: an interrupt meanwhile may have cleared them. */
    fi = s->ready[s->r_head].info;
    s->r_head = (s->r_head + 1) % FC_READY_FRAMES;
    s->r_count--;
    s->r_peeked = 0;
  }
  if (fi.utt_started) s->pushed_utt = fi.utt_started;
  int ended = fi.utt_ended && fi.utt_ended == s->pushed_utt;
  if (ended) s->pushed_utt = 0;
  fc_session_want_fill_locked(s);
  s->infer_frames = s->infer_total;
  g_mutex_unlock(&s->lock);
  if (fi.utt_started) fc_session_post_event(s, "start", fi.utt_started);
  if (ended) fc_session_post_event(s, "end", fi.utt_ended);

  int64_t now = now_ns();
  double ms = (now - deadline) / 1e6;
  fc_metrics_late(srv, ms < 0 ? 0 : ms);
  s->out_frames++;
  srv->frames_out++;
  if (!fi.speaking) srv->frames_idle++;
  if (late) {
    s->late_frames++;
    srv->frames_late++;
  }
  if (!s->log_t0) s->log_t0 = now;
  log_rates(s, now);
}

static gpointer pacer_main(gpointer data) {
  fc_server *srv = data;
  /* The pacer's wake-ups are the stream's timing: ask for a real-time slot above the workers
   * and encoders (where the system allows it; otherwise it runs as an ordinary thread). Its
   * work per tick is bounded: a push per session, and production only for a lagging one. */
  struct sched_param sp = {.sched_priority = 1};
  if (pthread_setschedparam(pthread_self(), SCHED_RR, &sp) == 0) srv->pacer_realtime = 1;
  int64_t deadline = now_ns();
  while (!g_atomic_int_get(&srv->stopping)) {
    deadline += TICK_NS;
    sleep_until(deadline);
    g_mutex_lock(&srv->lock);
    int n = 0;
    GHashTableIter it;
    gpointer v;
    g_hash_table_iter_init(&it, srv->sessions);
    while (n < srv->p.max_sessions && g_hash_table_iter_next(&it, NULL, &v)) {
      fc_session_ref(v);
      srv->tick[n++] = v;
    }
    g_mutex_unlock(&srv->lock);
    for (int i = 0; i < n; i++) {
      pace_one(srv, srv->tick[i], deadline);
      fc_session_unref(srv->tick[i]);
    }
    int64_t behind = now_ns() - deadline;
    if (behind > 5 * TICK_NS) {
      int64_t skip = behind / TICK_NS;
      srv->ticks_skipped += (uint64_t)skip;
      deadline += skip * TICK_NS;
    }
  }
  return NULL;
}

int fc_pacer_start(fc_server *srv) {
  GError *e = NULL;
  srv->tick = g_new0(fc_session *, srv->p.max_sessions > 0 ? srv->p.max_sessions : 1);
  srv->pacer = g_thread_try_new("fc-pacer", pacer_main, srv, &e);
  if (!srv->pacer) {
    int err = fc_error_set(FC_ENOMEM, "cannot start the pacer thread: %s", e->message);
    g_error_free(e);
    return err;
  }
  return FC_OK;
}

void fc_pacer_stop(fc_server *srv) {
  if (!srv->pacer) return;
  g_atomic_int_set(&srv->stopping, 1);
  g_thread_join(srv->pacer);
  srv->pacer = NULL;
  g_free(srv->tick);
  srv->tick = NULL;
}
