/* Outputs behind one interface (sink.h): the calls, the queued sink (a bounded ring and a
 * thread in front of another sink), and what the pushing outputs share (their parameters'
 * defaults and checks, their connection's bookkeeping). */
#include "media/sink.h"

#include "facecast/error.h"
#include "media/live.h"

#include <glib.h>
#include <stdlib.h>
#include <string.h>

int fc_sink_push(fc_sink *s, const fc_sink_frame *f) {
  if (!s || !f) return fc_error_set(FC_EINVAL, "fc_sink_push: no sink or frame");
  return s->ops->push(s->self, f);
}

void fc_sink_get_stats(fc_sink *s, fc_sink_stats *out) {
  memset(out, 0, sizeof *out);
  if (s) s->ops->stats(s->self, out);
}

int fc_sink_finish(fc_sink *s) {
  if (!s) return fc_error_set(FC_EINVAL, "fc_sink_finish: no sink");
  return s->ops->finish ? s->ops->finish(s->self) : FC_OK;
}

void fc_sink_destroy(fc_sink *s) {
  if (s) s->ops->destroy(s->self);
}

const char *fc_sink_kind(const fc_sink *s) { return s ? s->ops->kind : "none"; }

int fc_sink_get_link(fc_sink *s, fc_sink_link *out) {
  memset(out, 0, sizeof *out);
  if (!s || !s->ops->link) return FC_EUNSUPPORTED;
  return s->ops->link(s->self, out);
}

const char *fc_sink_link_state_name(fc_sink_link_state s) {
  switch (s) {
  case FC_SINK_LINK_CONNECTING: return "connecting";
  case FC_SINK_LINK_CONNECTED: return "connected";
  case FC_SINK_LINK_RETRYING: return "retrying";
  }
  return "unknown";
}

/* ---- what pushing outputs share ---- */

int fc_sink_push_params_fill(fc_sink_push_params *p, const char *who) {
  if (!p->fps) p->fps = 25;
  if (!p->sample_rate) p->sample_rate = 16000;
  if (!p->video_kbps) p->video_kbps = 1500;
  if (!p->queue_frames) p->queue_frames = 25;
  if (!p->connect_timeout_ms) p->connect_timeout_ms = 10000;
  if (!p->x264_preset) p->x264_preset = FC_LIVE_X264_PRESET;
  if (p->width <= 0 || p->height <= 0 || (p->width | p->height) & 1 || p->width > 8192 ||
      p->height > 8192 || p->fps < 1 || p->fps > 240 || p->sample_rate < 8000 ||
      p->sample_rate > 192000 || p->video_kbps < 1 || p->video_kbps > 100000 ||
      p->video_qp < 0 || p->video_qp > 51 || p->queue_frames < 1 || p->queue_frames > 1000 ||
      p->connect_timeout_ms < 100 || p->connect_timeout_ms > 600000)
    return fc_error_set(FC_EINVAL,
                        "%s: invalid parameters (%dx%d, fps %d, sample rate %d, %d kbit/s, QP %d, "
                        "queue %d, connect timeout %d ms)",
                        who, p->width, p->height, p->fps, p->sample_rate, p->video_kbps,
                        p->video_qp, p->queue_frames, p->connect_timeout_ms);
  return fc_live_check_preset(p->x264_preset);
}

/* ---- a pushing output's connection bookkeeping ---- */

#define RETRY_FIRST_S 1
#define RETRY_MAX_S 30

void fc_sink_retry_init(fc_sink_retry *r, void (*on_link)(void *, const fc_sink_link *),
                        void *user) {
  memset(r, 0, sizeof *r);
  g_mutex_init(&r->lock);
  r->link.state = FC_SINK_LINK_CONNECTING; /* the first frame starts the first attempt */
  r->backoff_s = RETRY_FIRST_S;
  r->on_link = on_link;
  r->user = user;
}

void fc_sink_retry_clear(fc_sink_retry *r) { g_mutex_clear(&r->lock); }

static void retry_tell(fc_sink_retry *r) {
  if (!r->on_link) return;
  fc_sink_link l;
  g_mutex_lock(&r->lock);
  l = r->link;
  g_mutex_unlock(&r->lock);
  l.retry_in_ms = l.state == FC_SINK_LINK_RETRYING ? r->backoff_s * 1000 : 0;
  r->on_link(r->user, &l);
}

void fc_sink_retry_attempt(fc_sink_retry *r) {
  g_mutex_lock(&r->lock);
  r->link.state = FC_SINK_LINK_CONNECTING;
  g_mutex_unlock(&r->lock);
}

int fc_sink_retry_due(fc_sink_retry *r, gint64 now_us) {
  g_mutex_lock(&r->lock);
  const int due = now_us >= r->retry_at_us;
  g_mutex_unlock(&r->lock);
  return due;
}

void fc_sink_retry_connected(fc_sink_retry *r) {
  g_mutex_lock(&r->lock);
  r->link.state = FC_SINK_LINK_CONNECTED;
  r->link.connects++;
  g_mutex_unlock(&r->lock);
  r->backoff_s = RETRY_FIRST_S;
  r->told_down = 0;
  retry_tell(r);
}

void fc_sink_retry_failed(fc_sink_retry *r, gint64 now_us, const char *why) {
  g_mutex_lock(&r->lock);
  const int was_up = r->link.state == FC_SINK_LINK_CONNECTED;
  r->link.state = FC_SINK_LINK_RETRYING;
  r->link.failures++;
  g_strlcpy(r->link.error, why ? why : "", sizeof r->link.error);
  r->retry_at_us = now_us + (gint64)r->backoff_s * G_TIME_SPAN_SECOND;
  g_mutex_unlock(&r->lock);
  if (was_up || !r->told_down) retry_tell(r);
  r->told_down = 1;
  r->backoff_s = r->backoff_s * 2 > RETRY_MAX_S ? RETRY_MAX_S : r->backoff_s * 2;
}

fc_sink_link_state fc_sink_retry_state(fc_sink_retry *r) {
  g_mutex_lock(&r->lock);
  const fc_sink_link_state st = r->link.state;
  g_mutex_unlock(&r->lock);
  return st;
}

void fc_sink_retry_get(fc_sink_retry *r, fc_sink_link *out) {
  g_mutex_lock(&r->lock);
  *out = r->link;
  const gint64 left = r->retry_at_us - g_get_monotonic_time();
  g_mutex_unlock(&r->lock);
  out->retry_in_ms = out->state == FC_SINK_LINK_RETRYING && left > 0 ? (int)(left / 1000) : 0;
}

/* ---- the queued sink ---------------------------------------------------------------------- */

typedef struct slot {
  uint8_t *i420; /* the picture, when has_pic */
  int16_t *pcm;
  int has_pic;
  fc_sink_frame f; /* pointers into the slot's own buffers */
} slot;

typedef struct queued {
  fc_sink sink;
  fc_sink *inner;
  size_t pic_bytes, max_samples;
  int depth;
  slot *slots;
  GMutex lock; /* the ring, stop, err, the counters */
  GCond cond;
  int head, count, stop, err;
  uint64_t pushed, dropped;
  GThread *thread;
} queued;

static gpointer q_main(gpointer data) {
  queued *q = data;
  g_mutex_lock(&q->lock);
  for (;;) {
    while (!q->count && !q->stop) g_cond_wait(&q->cond, &q->lock);
    if (!q->count) break; /* stopping and drained */
    slot *sl = &q->slots[q->head];
    const int failed = q->err;
    g_mutex_unlock(&q->lock);
    /* The inner sink may block (an encoder catching up): never under the lock, which the
     * pusher takes for every frame. */
    int err = failed ? failed : fc_sink_push(q->inner, &sl->f);
    g_mutex_lock(&q->lock);
    if (err && !q->err) q->err = err;
    q->head = (q->head + 1) % q->depth;
    q->count--;
  }
  g_mutex_unlock(&q->lock);
  return NULL;
}

static int q_push(void *self, const fc_sink_frame *f) {
  queued *q = self;
  if (f->n_samples > q->max_samples || (f->n_samples && !f->pcm))
    return fc_error_set(FC_EINVAL, "queued output: %zu samples in a frame (at most %zu)",
                        f->n_samples, q->max_samples);
  g_mutex_lock(&q->lock);
  q->pushed++;
  if (q->count == q->depth || q->stop) {
    q->dropped++;
  } else {
    /* Copying under the lock is fine: the thread never holds it while pushing on. */
    slot *sl = &q->slots[(q->head + q->count) % q->depth];
    sl->has_pic = f->i420 != NULL;
    if (sl->has_pic) memcpy(sl->i420, f->i420, q->pic_bytes);
    if (f->n_samples) memcpy(sl->pcm, f->pcm, f->n_samples * sizeof *sl->pcm);
    sl->f = (fc_sink_frame){.index = f->index, .i420 = sl->has_pic ? sl->i420 : NULL,
                            .pcm = sl->pcm, .n_samples = f->n_samples,
                            .first_sample = f->first_sample};
    q->count++;
    g_cond_signal(&q->cond);
  }
  g_mutex_unlock(&q->lock);
  return FC_OK;
}

static void q_stats(void *self, fc_sink_stats *out) {
  queued *q = self;
  fc_sink_get_stats(q->inner, out); /* its own lock: any thread */
  g_mutex_lock(&q->lock);
  out->frames_dropped += q->dropped;
  out->frames_pushed = q->pushed;
  g_mutex_unlock(&q->lock);
}

/* Lets the thread drain the ring and stop (once). */
static void q_stop(queued *q) {
  if (!q->thread) return;
  g_mutex_lock(&q->lock);
  q->stop = 1;
  g_cond_signal(&q->cond);
  g_mutex_unlock(&q->lock);
  g_thread_join(q->thread);
  q->thread = NULL;
}

static int q_finish(void *self) {
  queued *q = self;
  q_stop(q);
  return q->err ? q->err : fc_sink_finish(q->inner);
}

static void q_destroy(void *self) {
  queued *q = self;
  if (!q) return;
  q_stop(q);
  fc_sink_destroy(q->inner);
  for (int i = 0; q->slots && i < q->depth; i++) free(q->slots[i].i420), free(q->slots[i].pcm);
  free(q->slots);
  g_mutex_clear(&q->lock);
  g_cond_clear(&q->cond);
  free(q);
}

/* The inner output's connection, if it has one (it answers from any thread). */
static int q_link(void *self, fc_sink_link *out) {
  return fc_sink_get_link(((queued *)self)->inner, out);
}

static const fc_sink_ops queued_ops = {.kind = "queued", .push = q_push, .stats = q_stats,
                                       .finish = q_finish, .destroy = q_destroy, .link = q_link};

fc_sink *fc_sink_queued_create(fc_sink *inner, int width, int height, size_t max_samples, int depth,
                               int *err) {
  if (!inner || width <= 0 || height <= 0 || (width | height) & 1 || depth < 1) {
    fc_sink_destroy(inner);
    *err = fc_error_set(FC_EINVAL, "queued output: a sink, even sides and a depth of 1 or more");
    return NULL;
  }
  queued *q = calloc(1, sizeof *q);
  if (!q) {
    fc_sink_destroy(inner);
    *err = fc_error_set(FC_ENOMEM, "queued output: out of memory");
    return NULL;
  }
  q->sink = (fc_sink){&queued_ops, q};
  q->inner = inner;
  q->pic_bytes = (size_t)width * height * 3 / 2;
  q->max_samples = max_samples;
  q->depth = depth;
  g_mutex_init(&q->lock);
  g_cond_init(&q->cond);
  if (!(q->slots = calloc((size_t)depth, sizeof *q->slots))) goto oom;
  for (int i = 0; i < depth; i++)
    if (!(q->slots[i].i420 = malloc(q->pic_bytes)) ||
        !(q->slots[i].pcm = malloc((max_samples ? max_samples : 1) * sizeof(int16_t))))
      goto oom;
  GError *e = NULL;
  if (!(q->thread = g_thread_try_new("fc-sink-queue", q_main, q, &e))) {
    *err = fc_error_set(FC_ENOMEM, "queued output: cannot start a thread: %s", e->message);
    g_error_free(e);
    q_destroy(q);
    return NULL;
  }
  return &q->sink;
oom:
  q_destroy(q);
  *err = fc_error_set(FC_ENOMEM, "queued output: out of memory");
  return NULL;
}
