/* The pacers: the one place where wall-clock time decides anything.
 *
 * Sessions are spread over a few pacer threads (each session keeps its shard for its
 * lifetime) and over FC_PACER_PHASES slots of the 40 ms tick (its phase, likewise): with every
 * session sent at the same instant, every encoder woke in the same millisecond, and for that
 * burst the workers that make the next frames waited for a core. Each pacer wakes once per
 * slot (absolute deadlines on CLOCK_MONOTONIC, so sleeps do not drift) and, for each session
 * of its shard and of that slot, takes one frame: the head of the session's ready queue; if
 * that is empty while speech is pending, on the CPU the frame is produced here and then
 * (counted late) — on a GPU, or while a worker holds the session's stream, the session sends
 * nothing this tick (counted late and busy) rather than make every other session wait; if no
 * speech is pending, the idle frame (cached rest picture, silence). The frame goes to the live
 * output and the recorder; utterance marks become SSE events; the ready queue is topped up by
 * a worker.
 * Lateness (push time minus the tick's deadline) feeds the histogram in /metrics.
 * Drop policy: when a whole tick finishes more than 5 frames behind schedule (the machine is
 * overloaded), the missed ticks are skipped — frames are not sent in a burst to catch up — and
 * counted as ticks_skipped; every session's clock stays continuous (frames are numbered, not
 * timed), so audio and video stay together.
 */
#include "facecast/error.h"
#include "server/internal.h"

#include <errno.h>
#include <stdio.h>
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
    const double infer = (s->infer_frames - s->log_infer0) / dt;
    const double final = (s->out_frames - s->log_out0) / dt;
    FC_STAT_SET(s->infer_fps, infer);
    FC_STAT_SET(s->final_fps, final);
    if (!s->srv->p.quiet)
      g_message("session %llu: actual avg infer fps %.1f, actual avg final fps %.1f",
                (unsigned long long)s->serial, infer, final);
  }
  s->log_t0 = now;
  s->log_out0 = s->out_frames;
  s->log_infer0 = s->infer_frames;
}

#define STILL_EVERY 5 /* a still frame is sent 5 times a second */

/* The ready queue's head, marked as being pushed (an interrupt keeps it); 0 when empty. */
static int peek(fc_session *s, fc_frame_info *fi, const uint8_t **img, const int16_t **pcm,
                fc_i420_delta *held) {
  g_mutex_lock(&s->q_lock);
  int have = s->r_count > 0;
  if (have) {
    fc_ready_slot *slot = &s->ready[s->r_head];
    s->r_peeked = 1;
    *img = slot->i420;
    *pcm = slot->pcm;
    *fi = slot->info;
    *held = slot->held;
  }
  g_mutex_unlock(&s->q_lock);
  return have;
}

/* A tick this session sends nothing: its frame is being made (counted late, a whole tick). */
static void tick_busy(fc_server *srv, fc_session *s) {
  FC_STAT_SET(s->late_frames, s->late_frames + 1);
  g_mutex_lock(&srv->stat_lock);
  srv->frames_late++;
  srv->ticks_busy++;
  fc_metrics_late(srv, TICK_NS / 1e6);
  g_mutex_unlock(&srv->stat_lock);
}

static void pace_one(fc_server *srv, fc_session *s, int64_t deadline) {
  const uint8_t *img;
  const int16_t *pcm;
  fc_frame_info fi;
  fc_i420_delta held = {0};
  int from_queue = 0, late = 0, err = 0;

  if (g_atomic_int_get(&s->closed)) return; /* set once; a stale read costs one more frame */
  from_queue = peek(s, &fi, &img, &pcm, &held);
  if (!from_queue) {
    /* Nothing ready: the stream itself (idle frame, or on the CPU speech made here on the
     * spot, late). A worker producing for this session holds its stream (waiting for its
     * lip-sync batch): then this session sends nothing this tick rather than hold up every
     * other session; so too when speech is pending on a GPU, where making a frame means
     * waiting for a batch's round trip (the workers make it). */
    int gpu_pending = srv->gpu && g_atomic_int_get(&s->pending);
    if (gpu_pending) fc_session_want_fill(s);
    if (gpu_pending || !g_mutex_trylock(&s->lock)) {
      tick_busy(srv, s);
      return;
    }
    if (g_atomic_int_get(&s->closed)) {
      g_mutex_unlock(&s->lock);
      return;
    }
    if (fc_stream_producible(s->stream)) {
      if (srv->gpu) { /* speech arrived since the check above: as above, the workers make it */
        g_mutex_unlock(&s->lock);
        fc_session_want_fill(s);
        tick_busy(srv, s);
        return;
      }
      /* On the CPU, speech the workers have not produced yet: make this one frame here (the
       * workers catch up with the rest). */
      fc_session_fill_locked(s, 1);
      from_queue = late = peek(s, &fi, &img, &pcm, &held);
    }
    if (!from_queue) err = fc_stream_idle_frame(s->stream, &fi, &img, &pcm);
    g_mutex_unlock(&s->lock);
  }
  if (err) {
    g_warning("session %llu: no frame: %s", (unsigned long long)s->serial, fc_error_detail(err));
    return;
  }

  /* A still picture at rest (a photo) is re-sent only every STILL_EVERY frames: silent
   * sessions then cost their encoder a fifth; speech resumes at the full rate at once. */
  const uint8_t *send = img;
  if (fi.still && ++s->still_run % STILL_EVERY != 0) send = NULL;
  if (!fi.still) s->still_run = 0;
  if (g_mutex_trylock(&s->out_lock)) {
    const fc_sink_frame f = {.index = fi.index, .i420 = send, .delta = from_queue ? &held : NULL,
                             .pcm = pcm, .n_samples = FC_SAMPLES_PER_FRAME,
                             .first_sample = fi.index * FC_SAMPLES_PER_FRAME};
    if (s->out && fc_sink_push(s->out, &f)) FC_STAT_SET(s->dropped_frames, s->dropped_frames + 1);
    if (s->rec) { /* every picture, numbered from the recording's first frame */
      if (s->rec_first < 0) s->rec_first = fi.index;
      const int64_t k = fi.index - s->rec_first;
      const fc_sink_frame rf = {.index = k, .i420 = img, .pcm = pcm,
                                .n_samples = FC_SAMPLES_PER_FRAME,
                                .first_sample = k * FC_SAMPLES_PER_FRAME};
      fc_sink_push(fc_recorder_sink(s->rec), &rf); /* a full queue drops it (counted) */
    }
    g_mutex_unlock(&s->out_lock);
  } else {
    FC_STAT_SET(s->dropped_frames, s->dropped_frames + 1); /* the output is being torn down */
  }

  g_mutex_lock(&s->q_lock);
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
  FC_STAT_SET(s->infer_frames, s->infer_total);
  g_mutex_unlock(&s->q_lock);
  fc_session_want_fill(s);
  if (fi.utt_started) fc_session_post_event(s, "start", fi.utt_started);
  if (ended) fc_session_post_event(s, "end", fi.utt_ended);

  int64_t now = now_ns();
  double ms = (now - deadline) / 1e6;
  FC_STAT_SET(s->out_frames, s->out_frames + 1);
  if (late) FC_STAT_SET(s->late_frames, s->late_frames + 1);
  g_mutex_lock(&srv->stat_lock);
  fc_metrics_late(srv, ms < 0 ? 0 : ms);
  srv->frames_out++;
  if (!fi.speaking) srv->frames_idle++;
  if (late) srv->frames_late++;
  g_mutex_unlock(&srv->stat_lock);
  if (!s->log_t0) s->log_t0 = now;
  log_rates(s, now);
}

typedef struct fc_pacer {
  fc_server *srv;
  int index;
  GThread *thread;
  fc_session **tick; /* the per-tick snapshot of its sessions, max_sessions long */
} fc_pacer;

static gpointer pacer_main(gpointer data) {
  fc_pacer *pc = data;
  fc_server *srv = pc->srv;
  /* The pacer's wake-ups are the stream's timing: ask for a real-time slot above the workers
   * and encoders (where the system allows it; otherwise it runs as an ordinary thread). Its
   * work per tick is bounded: a push per session, and production only for a lagging one. */
  struct sched_param sp = {.sched_priority = 1};
  pthread_setschedparam(pthread_self(), SCHED_RR, &sp); /* refused: an ordinary thread */
  const int64_t slot_ns = TICK_NS / FC_PACER_PHASES;
  int64_t deadline = now_ns();
  int phase = 0;
  while (!g_atomic_int_get(&srv->stopping)) {
    deadline += slot_ns;
    phase = (phase + 1) % FC_PACER_PHASES;
    sleep_until(deadline);
    g_mutex_lock(&srv->lock);
    int n = 0;
    GHashTableIter it;
    gpointer v;
    g_hash_table_iter_init(&it, srv->sessions);
    while (n < srv->p.max_sessions && g_hash_table_iter_next(&it, NULL, &v)) {
      const fc_session *s = v;
      if (s->shard != pc->index || s->phase != phase) continue;
      fc_session_ref(v);
      pc->tick[n++] = v;
    }
    g_mutex_unlock(&srv->lock);
    for (int i = 0; i < n; i++) {
      pace_one(srv, pc->tick[i], deadline);
      fc_session_unref(pc->tick[i]);
    }
    int64_t behind = now_ns() - deadline;
    if (behind > 5 * TICK_NS) {
      int64_t skip = behind / TICK_NS;
      g_mutex_lock(&srv->stat_lock);
      srv->ticks_skipped += (uint64_t)skip;
      g_mutex_unlock(&srv->stat_lock);
      deadline += skip * TICK_NS;
    }
  }
  return NULL;
}

/* One pacer per 4 cores (at most 8): a push costs the pacer 50-100 us (a frame copied into a
 * pooled buffer, two queue hand-offs), so one thread would spend a whole 40 ms tick on ~400
 * sessions and the last ones would always be late. On 2-4 cores there is one. */
int fc_pacer_start(fc_server *srv) {
  int n = (int)g_get_num_processors() / 4;
  n = n < 1 ? 1 : n > 8 ? 8 : n;
  srv->pacers = g_new0(fc_pacer, n);
  for (int k = 0; k < n; k++) {
    fc_pacer *pc = &srv->pacers[k];
    *pc = (fc_pacer){.srv = srv, .index = k};
    pc->tick = g_new0(fc_session *, srv->p.max_sessions > 0 ? srv->p.max_sessions : 1);
    char name[16];
    snprintf(name, sizeof name, "fc-pacer-%d", k % 1000000); /* thread names: 15 bytes */
    GError *e = NULL;
    if (!(pc->thread = g_thread_try_new(name, pacer_main, pc, &e))) {
      int err = fc_error_set(FC_ENOMEM, "cannot start the pacer thread: %s", e->message);
      g_error_free(e);
      srv->n_pacers = k;
      fc_pacer_stop(srv);
      return err;
    }
    srv->n_pacers = k + 1;
  }
  return FC_OK;
}

void fc_pacer_stop(fc_server *srv) {
  if (!srv->pacers) return;
  g_atomic_int_set(&srv->stopping, 1);
  for (int k = 0; k < srv->n_pacers; k++) g_thread_join(srv->pacers[k].thread);
  for (int k = 0; k < srv->n_pacers; k++) g_free(srv->pacers[k].tick);
  g_free(srv->pacers);
  srv->pacers = NULL;
  srv->n_pacers = 0;
}
