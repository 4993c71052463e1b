/* One talking stream (see include/facecast/stream.h).
 *
 * State: the timeline (speech samples and phonemes, growable: offline inputs are pushed whole),
 * the viseme tracker (causal, one step per frame), and a ring of `batch` ready frames (I420 and
 * PCM16) with the patch buffers of one lip-sync batch. When the ring is empty, next_frame fills
 * it: it walks up to `batch` frames of the timeline through the tracker, runs the backend once
 * and composes every patch into its slot.
 */
#include "facecast/audio.h"
#include "facecast/compose.h"
#include "facecast/error.h"
#include "facecast/stream.h"
#include "facecast/visemes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct fc_stream {
  const fc_avatar *av;
  fc_lipsync *ls;
  int batch;

  float *pcm; /* timeline */
  size_t n, cap;
  fc_phoneme *ph;
  size_t n_ph, cap_ph;
  int ended;

  fc_viseme_tracker tracker;
  int64_t next_index;    /* next frame to produce */
  int ready, taken;      /* frames in the ring, frames handed out */
  int64_t ring_first;    /* index of ring slot 0 */
  uint8_t **i420;        /* batch × w·h·3/2 */
  int16_t *pcm16;        /* batch × 640 */
  fc_lipsync_req *reqs;
  fc_patch *patches;
  uint8_t *patch_mem, *scratch;
  float frame_pcm[FC_SAMPLES_PER_FRAME];
};

void fc_stream_destroy(fc_stream *s) {
  if (!s) return;
  for (int i = 0; s->i420 && i < s->batch; i++) free(s->i420[i]);
  free(s->i420);
  free(s->pcm16);
  free(s->reqs);
  free(s->patches);
  free(s->patch_mem);
  free(s->scratch);
  free(s->pcm);
  free(s->ph);
  free(s);
}

fc_stream *fc_stream_create(const fc_stream_params *p, int *err) {
  if (!p || !p->avatar || !p->lipsync) {
    *err = fc_error_set(FC_EINVAL, "stream: avatar and lip-sync backend are required");
    return NULL;
  }
  fc_stream *s = calloc(1, sizeof *s);
  if (!s) goto oom;
  s->av = p->avatar;
  s->ls = p->lipsync;
  s->batch = p->batch > 0 ? p->batch : 16;
  fc_viseme_tracker_init(&s->tracker);
  size_t fsz = (size_t)fc_avatar_width(s->av) * fc_avatar_height(s->av) * 3 / 2;
  size_t cap = fc_lipsync_patch_capacity(s->ls, s->av);
  s->i420 = calloc((size_t)s->batch, sizeof *s->i420);
  s->pcm16 = malloc((size_t)s->batch * FC_SAMPLES_PER_FRAME * sizeof(int16_t));
  s->reqs = calloc((size_t)s->batch, sizeof *s->reqs);
  s->patches = calloc((size_t)s->batch, sizeof *s->patches);
  s->patch_mem = malloc((size_t)s->batch * cap * 4 + 1);
  s->scratch = malloc(cap * 3 + 1);
  if (!s->i420 || !s->pcm16 || !s->reqs || !s->patches || !s->patch_mem || !s->scratch) goto oom;
  for (int i = 0; i < s->batch; i++) {
    if (!(s->i420[i] = malloc(fsz))) goto oom;
    s->patches[i].rgb = s->patch_mem + (size_t)i * cap * 4;
    s->patches[i].alpha = s->patches[i].rgb + cap * 3;
  }
  *err = FC_OK;
  return s;
oom:
  fc_stream_destroy(s);
  *err = fc_error_set(FC_ENOMEM, "stream: out of memory");
  return NULL;
}

static int reserve(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 16000;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return fc_error_set(FC_ENOMEM, "stream: out of memory");
  *p = q;
  *cap = c;
  return 0;
}

int fc_stream_push_speech(fc_stream *s, const float *pcm, size_t n, const fc_phoneme *ph,
                          size_t n_ph) {
  if (s->ended) return fc_error_set(FC_EINVAL, "stream: speech pushed after the end");
  int err;
  if ((err = reserve((void **)&s->pcm, &s->cap, s->n + n, sizeof(float))) ||
      (err = reserve((void **)&s->ph, &s->cap_ph, s->n_ph + n_ph, sizeof(fc_phoneme))))
    return err;
  for (size_t k = 0; k < n_ph; k++) {
    s->ph[s->n_ph + k] = ph[k];
    s->ph[s->n_ph + k].sample += (int64_t)s->n;
  }
  s->n_ph += n_ph;
  memcpy(s->pcm + s->n, pcm, n * sizeof(float));
  s->n += n;
  return FC_OK;
}

void fc_stream_end(fc_stream *s) { s->ended = 1; }

int64_t fc_stream_frames_total(const fc_stream *s) {
  return (int64_t)((s->n + FC_SAMPLES_PER_FRAME - 1) / FC_SAMPLES_PER_FRAME);
}

/* Fills the ring with up to `batch` frames. Returns how many, or an error. */
static int produce(fc_stream *s) {
  int64_t total = fc_stream_frames_total(s);
  int64_t full = (int64_t)(s->n / FC_SAMPLES_PER_FRAME); /* frames with all their samples */
  int64_t avail = (s->ended ? total : full) - s->next_index;
  int k = avail < s->batch ? (int)avail : s->batch;
  for (int i = 0; i < k; i++) {
    int64_t idx = s->next_index + i;
    size_t start = (size_t)idx * FC_SAMPLES_PER_FRAME;
    size_t have = s->n - start < FC_SAMPLES_PER_FRAME ? s->n - start : FC_SAMPLES_PER_FRAME;
    memcpy(s->frame_pcm, s->pcm + start, have * sizeof(float));
    memset(s->frame_pcm + have, 0, (FC_SAMPLES_PER_FRAME - have) * sizeof(float));
    int16_t *out = s->pcm16 + (size_t)i * FC_SAMPLES_PER_FRAME;
    for (int j = 0; j < FC_SAMPLES_PER_FRAME; j++) {
      float v = s->frame_pcm[j] * 32767.0f;
      out[j] = (int16_t)lrintf(v > 32767.0f ? 32767.0f : v < -32768.0f ? -32768.0f : v);
    }
    s->reqs[i].avatar = s->av;
    s->reqs[i].frame = (int)(idx % (1 << 30));
    s->reqs[i].mel = NULL;
    s->reqs[i].mouth = fc_viseme_tracker_push(&s->tracker, s->frame_pcm, (int64_t)start, s->ph,
                                              s->n_ph);
  }
  if (k <= 0) return 0;
  int err = fc_lipsync_run(s->ls, s->reqs, s->patches, k);
  if (err) return err;
  for (int i = 0; i < k; i++)
    if ((err = fc_compose_i420(s->av, s->reqs[i].frame, &s->patches[i], s->i420[i], s->scratch)))
      return err;
  s->ring_first = s->next_index;
  s->next_index += k;
  return k;
}

int fc_stream_next_frame(fc_stream *s, int64_t *index, const uint8_t **i420,
                         const int16_t **pcm) {
  if (s->taken == s->ready) {
    int k = produce(s);
    if (k < 0) return k;
    s->ready = k;
    s->taken = 0;
    if (k == 0) return s->ended ? FC_EEOF : FC_EAGAIN;
  }
  int slot = s->taken++;
  *index = s->ring_first + slot;
  *i420 = s->i420[slot];
  *pcm = s->pcm16 + (size_t)slot * FC_SAMPLES_PER_FRAME;
  return FC_OK;
}
