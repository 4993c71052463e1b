/* Session recording to MP4 without ever blocking the pacer.
 *
 * The pacer copies each frame into a bounded ring (QUEUE frames, preallocated); a recorder
 * thread feeds them to an fc_mp4_writer, whose pushes may block while x264 catches up. When
 * the ring is full the new frame is dropped and counted — the recording then misses a frame
 * rather than the live session stuttering: the picture before it stays up 40 ms longer and its
 * audio becomes silence (the MP4 writer's audiorate), so what follows stays in sync.
 */
#include "facecast/error.h"
#include "facecast/mp4.h"
#include "server/internal.h"

#include <stdlib.h>
#include <string.h>

#define QUEUE 50 /* 2 s of frames */

typedef struct rec_slot {
  uint8_t *i420;
  int16_t pcm[FC_SAMPLES_PER_FRAME];
  int64_t index;
} rec_slot;

struct fc_recorder {
  fc_mp4_writer *w;
  char *path;
  size_t fsz;
  GMutex lock;
  GCond cond;
  rec_slot slots[QUEUE];
  int head, count, stop, err;
  uint64_t dropped;
  GThread *thread;
};

static gpointer rec_main(gpointer data) {
  fc_recorder *r = data;
  g_mutex_lock(&r->lock);
  for (;;) {
    while (!r->count && !r->stop) g_cond_wait(&r->cond, &r->lock);
    if (!r->count) break; /* stopping and drained */
    rec_slot *sl = &r->slots[r->head];
    g_mutex_unlock(&r->lock);
    int err = r->err ? r->err : fc_mp4_writer_push_video(r->w, sl->i420, sl->index);
    if (!err)
      err = fc_mp4_writer_push_audio(r->w, sl->pcm, FC_SAMPLES_PER_FRAME,
                                     sl->index * FC_SAMPLES_PER_FRAME);
    g_mutex_lock(&r->lock);
    if (err && !r->err) r->err = err;
    r->head = (r->head + 1) % QUEUE;
    r->count--;
  }
  g_mutex_unlock(&r->lock);
  return NULL;
}

static void rec_free(fc_recorder *r) {
  if (!r) return;
  fc_mp4_writer_destroy(r->w);
  for (int i = 0; i < QUEUE; i++) free(r->slots[i].i420);
  g_mutex_clear(&r->lock);
  g_cond_clear(&r->cond);
  g_free(r->path);
  g_free(r);
}

fc_recorder *fc_recorder_start(const char *path, int w, int h, int *err) {
  fc_recorder *r = g_new0(fc_recorder, 1);
  g_mutex_init(&r->lock);
  g_cond_init(&r->cond);
  r->path = g_strdup(path);
  r->fsz = (size_t)w * h * 3 / 2;
  for (int i = 0; i < QUEUE; i++)
    if (!(r->slots[i].i420 = malloc(r->fsz))) {
      *err = fc_error_set(FC_ENOMEM, "recorder: out of memory");
      goto fail;
    }
  fc_mp4_params mp = fc_mp4_params_default(w, h);
  mp.threads = 1; /* one of many encoders on the machine */
  if (!(r->w = fc_mp4_writer_create(path, &mp, err))) goto fail;
  GError *e = NULL;
  if (!(r->thread = g_thread_try_new("fc-recorder", rec_main, r, &e))) {
    *err = fc_error_set(FC_ENOMEM, "recorder: cannot start a thread: %s", e->message);
    g_error_free(e);
    goto fail;
  }
  return r;
fail:
  rec_free(r);
  return NULL;
}

void fc_recorder_push(fc_recorder *r, const uint8_t *i420, const int16_t *pcm, int64_t index) {
  g_mutex_lock(&r->lock);
  if (r->count == QUEUE || r->stop) {
    r->dropped++;
  } else {
    /* Copying under the lock is fine: the recorder thread never holds it while encoding. */
    rec_slot *sl = &r->slots[(r->head + r->count) % QUEUE];
    memcpy(sl->i420, i420, r->fsz);
    memcpy(sl->pcm, pcm, sizeof sl->pcm);
    sl->index = index;
    r->count++;
    g_cond_signal(&r->cond);
  }
  g_mutex_unlock(&r->lock);
}

int fc_recorder_finish(fc_recorder *r, char **path) {
  g_mutex_lock(&r->lock);
  r->stop = 1;
  g_cond_signal(&r->cond);
  g_mutex_unlock(&r->lock);
  g_thread_join(r->thread);
  int err = r->err ? r->err : fc_mp4_writer_finish(r->w);
  if (r->dropped)
    g_message("recording %s: %llu frames dropped (encoder behind)", r->path,
              (unsigned long long)r->dropped);
  if (path) *path = err ? NULL : g_strdup(r->path);
  rec_free(r);
  return err;
}
