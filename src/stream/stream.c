/* One talking stream (see include/facecast/stream.h).
 *
 * State:
 *  - the FIFO of pending speech (`pcm[head .. head+len)`), whose head is the next frame's first
 *    sample; phonemes and utterance bounds are kept relative to that head and shifted when a
 *    frame is consumed (an idle frame consumes nothing, so pending audio keeps its place);
 *  - the viseme tracker (causal, one step per speech frame);
 *  - a ring of up to `batch` produced frames (I420, PCM16, info) and one batch of patches.
 * When the ring is empty, next_frame fills it: up to `batch` frames off the FIFO through the
 * tracker, one lip-sync call, then compositing into the ring.
 * Bounds: the FIFO holds at most max_pending samples (pushes beyond fail with FC_EAGAIN); the
 * ring holds one batch; phonemes and utterances are dropped once behind the head.
 * Idle frames of a recorded avatar (and action clip frames) are assembled from the pack's tiles
 * into one frame buffer of the stream's, allocated at creation for avatars that have such
 * frames, so the idle path allocates nothing.
 */
#include "facecast/audio.h"
#include "compose/compose.h"
#include "facecast/error.h"
#include "audio/mel.h"
#include "facecast/stream.h"
#include "lipsync/visemes.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SPF FC_SAMPLES_PER_FRAME

typedef struct utterance {
  uint32_t id;
  int64_t start, end; /* samples relative to the FIFO head; end exclusive */
  int started;        /* its first frame has been produced */
  int open;           /* streamed speech still arriving (fc_stream_open_speech): it grows with
                       * every push and its end is not reported until it is closed */
  float *mel;         /* backends that need it: the utterance's whole mel (owned) */
  size_t mel_cols;
} utterance;

/* Samples a streamed frame needs past its start for its mel window: 16 columns of hop 200
 * centred on their samples, the last one reaching 15·200 + 400 samples ahead. */
#define MEL_LOOKAHEAD (15 * FC_MEL_HOP + 400)

struct fc_stream {
  const fc_avatar *av;
  fc_lipsync *ls;
  int (*run)(void *user, const fc_lipsync_req *reqs, fc_patch *out, const fc_frame_info *info,
             int n);
  void *run_user;
  int batch;
  size_t max_pending;

  float *pcm; /* FIFO storage: pending samples are pcm[head .. head + len) */
  size_t head, len, cap;
  fc_phoneme *ph; /* relative to the FIFO head */
  size_t n_ph, cap_ph;
  utterance *utt;
  size_t n_utt, cap_utt;
  uint32_t next_utt_id;
  uint32_t playing; /* utterance whose first frame was taken and last frame not yet */
  int ended;

  fc_viseme_tracker tracker;
  int64_t next_index; /* clock: the next frame's number */
  int ready, taken;   /* frames in the ring, frames handed out */
  uint8_t **i420;     /* batch × w·h·3/2 */
  fc_i420_delta *held; /* batch: what each i420 buffer holds (composed by rects) */
  int last_slot;      /* the slot next_frame handed out last */
  int16_t *pcm16;     /* batch × 640 */
  fc_frame_info *info;
  fc_lipsync_req *reqs;
  fc_patch *patches;
  uint8_t *patch_mem, *scratch;
  float frame_pcm[SPF];

  fc_mel *mel;         /* set when the backend needs mel windows */
  float *mel_win;      /* batch × 80 × 16 */
  float *mel_scratch;  /* 80 × 16 columns of a streamed frame */

  uint8_t *rest;       /* a one-frame avatar's rest picture, made on first use */
  uint8_t *idle;       /* a recorded avatar's idle or clip frame, assembled per idle frame */
  int clip, clip_pos;  /* the action clip playing in idle time (-1: none), its next frame */
  int resting;         /* the last frame handed out was the photo's rest picture */
  int16_t silence[SPF];
};

void fc_stream_destroy(fc_stream *s) {
  if (!s) return;
  for (int i = 0; s->i420 && i < s->batch; i++) free(s->i420[i]);
  free(s->rest);
  free(s->idle);
  free(s->i420);
  free(s->held);
  free(s->pcm16);
  free(s->info);
  free(s->reqs);
  free(s->patches);
  free(s->patch_mem);
  free(s->scratch);
  free(s->pcm);
  free(s->ph);
  for (size_t u = 0; u < s->n_utt; u++) free(s->utt[u].mel);
  free(s->utt);
  fc_mel_destroy(s->mel);
  free(s->mel_win);
  free(s->mel_scratch);
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
  s->run = p->run;
  s->run_user = p->run_user;
  s->batch = p->batch > 0 ? p->batch : 16;
  s->max_pending = p->max_pending ? p->max_pending : (size_t)600 * FC_SAMPLE_RATE;
  s->next_utt_id = 1;
  fc_viseme_tracker_init(&s->tracker);
  size_t fsz = (size_t)fc_avatar_width(s->av) * fc_avatar_height(s->av) * 3 / 2;
  size_t cap = fc_lipsync_patch_capacity(s->ls, s->av);
  s->i420 = calloc((size_t)s->batch, sizeof *s->i420);
  s->held = calloc((size_t)s->batch, sizeof *s->held);
  s->pcm16 = malloc((size_t)s->batch * SPF * sizeof(int16_t));
  s->info = calloc((size_t)s->batch, sizeof *s->info);
  s->reqs = calloc((size_t)s->batch, sizeof *s->reqs);
  s->patches = calloc((size_t)s->batch, sizeof *s->patches);
  s->patch_mem = malloc((size_t)s->batch * cap * 4 + 1);
  s->scratch = malloc(cap * 3 + 1);
  s->clip = -1;
  if (fc_avatar_frame_count(s->av) > 1 || fc_avatar_clip_count(s->av) > 0)
    s->idle = malloc(fsz);
  if (!s->i420 || !s->held || !s->pcm16 || !s->info || !s->reqs || !s->patches || !s->patch_mem ||
      !s->scratch || ((fc_avatar_frame_count(s->av) > 1 || fc_avatar_clip_count(s->av) > 0) &&
                      !s->idle))
    goto oom;
  if (fc_lipsync_needs_mel(s->ls)) {
    if (!(s->mel = fc_mel_create(err))) goto fail;
    s->mel_win = malloc((size_t)s->batch * FC_MEL_BANDS * FC_MEL_WINDOW * sizeof(float));
    s->mel_scratch = malloc((size_t)FC_MEL_BANDS * FC_MEL_WINDOW * sizeof(float));
    if (!s->mel_win || !s->mel_scratch) goto oom;
  }
  for (int i = 0; i < s->batch; i++) {
    if (!(s->i420[i] = malloc(fsz))) goto oom;
    s->patches[i].rgb = s->patch_mem + (size_t)i * cap * 4;
    s->patches[i].alpha = s->patches[i].rgb + cap * 3;
  }
  *err = FC_OK;
  return s;
oom:
  *err = fc_error_set(FC_ENOMEM, "stream: out of memory");
fail:
  fc_stream_destroy(s);
  return NULL;
}

static int reserve(void **p, size_t *cap, size_t need, size_t elem, size_t first) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : first;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return fc_error_set(FC_ENOMEM, "stream: out of memory");
  *p = q;
  *cap = c;
  return 0;
}

/* Appends samples (and `pad` zeros) to the FIFO, compacting consumed space first. */
static int fifo_append(fc_stream *s, const float *pcm, size_t n, size_t pad) {
  if (s->ended) return fc_error_set(FC_EINVAL, "stream: speech pushed after the end");
  if (s->len + n + pad > s->max_pending)
    return fc_error_set(FC_EAGAIN,
                        "%.1f s of speech does not fit: a session queues at most %.0f s (%.1f s "
                        "queued now)",
                        (double)(n + pad) / FC_SAMPLE_RATE, (double)s->max_pending / FC_SAMPLE_RATE,
                        (double)s->len / FC_SAMPLE_RATE);
  if (s->head && s->head + s->len + n + pad > s->cap) {
    memmove(s->pcm, s->pcm + s->head, s->len * sizeof(float));
    s->head = 0;
  }
  int err = reserve((void **)&s->pcm, &s->cap, s->head + s->len + n + pad, sizeof(float), 16000);
  if (err) return err;
  if (n) memcpy(s->pcm + s->head + s->len, pcm, n * sizeof(float)); /* (pcm is NULL for padding) */
  memset(s->pcm + s->head + s->len + n, 0, pad * sizeof(float));
  s->len += n + pad;
  if (s->n_utt && s->utt[s->n_utt - 1].open) s->utt[s->n_utt - 1].end = (int64_t)s->len;
  return FC_OK;
}

int fc_stream_push_speech(fc_stream *s, const float *pcm, size_t n, const fc_phoneme *ph,
                          size_t n_ph, uint32_t *id) {
  if (id) *id = 0;
  if (n == 0) return fc_error_set(FC_EINVAL, "stream: empty utterance");
  fc_stream_close_speech(s);
  /* A streamed tail that is not a whole frame gets finished with silence first, so the
   * utterance starts on a frame boundary. */
  size_t tail = s->len % SPF, lead = tail ? SPF - tail : 0;
  size_t pad = (SPF - n % SPF) % SPF;
  int err;
  if ((err = reserve((void **)&s->ph, &s->cap_ph, s->n_ph + n_ph, sizeof(fc_phoneme), 64)) ||
      (err = reserve((void **)&s->utt, &s->cap_utt, s->n_utt + 1, sizeof(utterance), 8)))
    return err;
  if (lead && (err = fifo_append(s, NULL, 0, lead))) return err;
  int64_t start = (int64_t)s->len;
  if ((err = fifo_append(s, pcm, n, pad))) return err;
  for (size_t k = 0; k < n_ph; k++) {
    s->ph[s->n_ph + k] = ph[k];
    s->ph[s->n_ph + k].sample += start;
  }
  s->n_ph += n_ph;
  uint32_t uid = s->next_utt_id++;
  if (!s->next_utt_id) s->next_utt_id = 1;
  utterance ut = {uid, start, start + (int64_t)n, 0, 0, NULL, 0};
  if (s->mel) {
    /* The whole utterance's mel, as Wav2Lip computes it for a file: frames then take windows
     * of it, looking 200 ms ahead, with the same edges. */
    ut.mel_cols = fc_mel_columns(n);
    if (!(ut.mel = malloc(ut.mel_cols * FC_MEL_BANDS * sizeof(float))))
      return fc_error_set(FC_ENOMEM, "stream: out of memory");
    if ((err = fc_mel_compute(s->mel, pcm, n, ut.mel))) {
      free(ut.mel);
      return err;
    }
  }
  s->utt[s->n_utt++] = ut;
  if (id) *id = uid;
  return FC_OK;
}

int fc_stream_push_audio(fc_stream *s, const float *pcm, size_t n) {
  return fifo_append(s, pcm, n, 0);
}

int fc_stream_open_speech(fc_stream *s, uint32_t *id) {
  if (id) *id = 0;
  fc_stream_close_speech(s);
  if (s->ended) return fc_error_set(FC_EINVAL, "stream: speech pushed after the end");
  size_t tail = s->len % SPF, lead = tail ? SPF - tail : 0;
  int err;
  if ((err = reserve((void **)&s->utt, &s->cap_utt, s->n_utt + 1, sizeof(utterance), 8)) ||
      (lead && (err = fifo_append(s, NULL, 0, lead))))
    return err;
  uint32_t uid = s->next_utt_id++;
  if (!s->next_utt_id) s->next_utt_id = 1;
  s->utt[s->n_utt++] = (utterance){uid, (int64_t)s->len, (int64_t)s->len, 0, 1, NULL, 0};
  if (id) *id = uid;
  return FC_OK;
}

void fc_stream_close_speech(fc_stream *s) {
  utterance *ut = s->n_utt ? &s->utt[s->n_utt - 1] : NULL;
  if (!ut || !ut->open) return;
  ut->open = 0;
  /* Padded to a whole frame like any utterance. One that has all gone out already (the
   * service was slower than real time at its end) or never had audio gets a frame of silence,
   * so that its end is still reported, in that frame. */
  size_t tail = s->len % SPF, pad = tail ? SPF - tail : 0;
  int64_t end = ut->end;
  if (end <= 0 || ut->end == ut->start) {
    pad += SPF;
    end = (int64_t)s->len + 1;
  }
  if (fifo_append(s, NULL, 0, pad) == FC_OK) ut->end = end;
  else ut->end = s->len > 0 ? (int64_t)s->len : 1; /* no room: ends where the FIFO ends */
}

void fc_stream_end(fc_stream *s) {
  fc_stream_close_speech(s);
  s->ended = 1;
}

uint32_t fc_stream_interrupt(fc_stream *s) {
  /* Only an utterance whose start was taken counts as cut: one still waiting, or waiting in
   * the ring, was never heard, so nobody expects its end. */
  uint32_t cut = s->playing;
  s->playing = 0;
  s->head = s->len = 0;
  for (size_t u = 0; u < s->n_utt; u++) free(s->utt[u].mel);
  s->n_ph = s->n_utt = 0;
  /* Frames produced but not taken are dropped: the clock rewinds to the first of them. */
  if (s->ready > s->taken) s->next_index = s->info[s->taken].index;
  s->ready = s->taken = 0;
  s->tracker.cur = (fc_mouth){0, 0, 0};
  return cut;
}

int64_t fc_stream_pending_frames(const fc_stream *s) {
  return (int64_t)((s->len + SPF - 1) / SPF) + (s->ready - s->taken);
}

int fc_stream_producible(const fc_stream *s) {
  if (s->taken != s->ready) return 1;
  size_t full = s->len / SPF + (s->ended && s->len % SPF ? 1 : 0);
  if (!full) return 0;
  if (!s->mel || s->ended || s->len >= (size_t)(SPF + MEL_LOOKAHEAD)) return 1;
  for (size_t u = 0; u < s->n_utt; u++) /* an utterance's mel is computed whole; a closed
                                          * streamed one has all its audio */
    if (s->utt[u].start <= 0 && s->utt[u].end > 0 && (s->utt[u].mel || !s->utt[u].open))
      return 1;
  return 0;
}

int64_t fc_stream_frames_total(const fc_stream *s) {
  return s->next_index + (int64_t)((s->len + SPF - 1) / SPF);
}

/* Removes one frame from the FIFO head and shifts what is kept relative to it. */
static void consume_frame(fc_stream *s) {
  size_t k = s->len < SPF ? s->len : SPF;
  s->head += k;
  s->len -= k;
  if (!s->len) s->head = 0;
  size_t keep = 0;
  for (size_t i = 0; i < s->n_ph; i++) {
    s->ph[i].sample -= SPF;
    /* Keep a phoneme while it is still active: the next one has not started by the head. */
    if (i + 1 < s->n_ph && s->ph[i + 1].sample - SPF <= 0) continue;
    s->ph[keep++] = s->ph[i];
  }
  s->n_ph = keep;
  keep = 0;
  for (size_t i = 0; i < s->n_utt; i++) {
    s->utt[i].start -= SPF;
    s->utt[i].end -= SPF;
    if (s->utt[i].end > 0 || s->utt[i].open) s->utt[keep++] = s->utt[i];
    else free(s->utt[i].mel);
  }
  s->n_utt = keep;
  /* Phonemes belong to utterances: once the last one has gone out, none is active any more
   * (streamed audio after it must drive the mouth by itself). */
  if (!s->n_utt) s->n_ph = 0;
}

static int lipsync(fc_stream *s, const fc_lipsync_req *reqs, fc_patch *out,
                   const fc_frame_info *info, int n) {
  return s->run ? s->run(s->run_user, reqs, out, info, n) : fc_lipsync_run(s->ls, reqs, out, n);
}

/* Fills the ring with up to `batch` frames. Returns how many, or an error. */
static int produce(fc_stream *s) {
  size_t full = s->len / SPF + (s->ended && s->len % SPF ? 1 : 0);
  int k = full < (size_t)s->batch ? (int)full : s->batch;
  for (int i = 0; i < k; i++) {
    /* The utterance the frame starts in (utterances start on frame boundaries). */
    const utterance *cur = NULL;
    for (size_t u = 0; u < s->n_utt && !cur; u++)
      if (s->utt[u].start <= 0 && s->utt[u].end > 0) cur = &s->utt[u];
    if (s->mel) {
      float *win = s->mel_win + (size_t)i * FC_MEL_BANDS * FC_MEL_WINDOW;
      if (cur && cur->mel) {
        fc_mel_window(cur->mel, cur->mel_cols, (int)(-cur->start / SPF), win);
      } else {
        /* Streamed audio: the window looks 200 ms ahead, so wait for that much (or the end);
         * the signal is taken to start at this frame. */
        if (!s->ended && s->len < (size_t)(SPF + MEL_LOOKAHEAD) && !(cur && !cur->open)) {
          k = i;
          break;
        }
        size_t n = s->len < (size_t)(SPF + MEL_LOOKAHEAD) ? s->len : (size_t)(SPF + MEL_LOOKAHEAD);
        size_t cols = fc_mel_columns(n) < FC_MEL_WINDOW ? fc_mel_columns(n) : FC_MEL_WINDOW;
        int err = fc_mel_compute_columns(s->mel, s->pcm + s->head, n, 0, cols, s->mel_scratch, cols);
        if (err) return err;
        fc_mel_window(s->mel_scratch, cols, 0, win);
      }
    }
    size_t have = s->len < SPF ? s->len : SPF;
    memcpy(s->frame_pcm, s->pcm + s->head, have * sizeof(float));
    memset(s->frame_pcm + have, 0, (SPF - have) * sizeof(float));
    int16_t *out = s->pcm16 + (size_t)i * SPF;
    for (int j = 0; j < SPF; j++) {
      float v = s->frame_pcm[j] * 32767.0f;
      out[j] = (int16_t)lrintf(v > 32767.0f ? 32767.0f : v < -32768.0f ? -32768.0f : v);
    }
    fc_frame_info *fi = &s->info[i];
    *fi = (fc_frame_info){.index = s->next_index + i, .speaking = 1};
    for (size_t u = 0; u < s->n_utt; u++) {
      utterance *ut = &s->utt[u];
      if (!ut->started && ut->start < SPF) {
        fi->utt_started = ut->id;
        ut->started = 1;
      }
      if (ut->end > 0 && ut->end <= SPF && !ut->open) fi->utt_ended = ut->id;
    }
    s->reqs[i].avatar = s->av;
    s->reqs[i].frame = (int)(fi->index % (1 << 30));
    s->reqs[i].mel = s->mel ? s->mel_win + (size_t)i * FC_MEL_BANDS * FC_MEL_WINDOW : NULL;
    /* Inside an utterance the phonemes say what the mouth does; elsewhere the audio does. A
     * backend that takes mel windows (a neural one) makes the mouth from them and ignores the
     * shape, so its sessions skip the tracker (four FFTs a frame). */
    int in_utt = cur != NULL;
    if (!s->mel)
      s->reqs[i].mouth = fc_viseme_tracker_push(&s->tracker, s->frame_pcm, 0,
                                                in_utt ? s->ph : NULL, in_utt ? s->n_ph : 0);
    consume_frame(s);
  }
  if (k <= 0) return 0;
  int err = lipsync(s, s->reqs, s->patches, s->info, k);
  if (err) return err;
  for (int i = 0; i < k; i++)
    if ((err = fc_compose_i420_update(s->av, s->reqs[i].frame, &s->patches[i], s->i420[i],
                                      &s->held[i], s->scratch)))
      return err;
  s->next_index += k;
  return k;
}

int fc_stream_next_frame(fc_stream *s, fc_frame_info *info, const uint8_t **i420,
                         const int16_t **pcm) {
  if (s->taken == s->ready) {
    int k = produce(s);
    if (k < 0) return k;
    s->ready = k;
    s->taken = 0;
    if (k == 0) return s->ended ? FC_EEOF : FC_EAGAIN;
  }
  int slot = s->taken++;
  *info = s->info[slot];
  s->clip = -1; /* speech ends an action clip */
  s->resting = 0;
  if (info->utt_started) s->playing = info->utt_started;
  if (info->utt_ended == s->playing) s->playing = 0;
  *i420 = s->i420[slot];
  *pcm = s->pcm16 + (size_t)slot * SPF;
  s->last_slot = slot;
  return FC_OK;
}

fc_i420_delta fc_stream_frame_delta(const fc_stream *s) { return s->held[s->last_slot]; }

int fc_stream_play_clip(fc_stream *s, int clip) {
  int frames = 0;
  const int16_t *pcm;
  size_t n;
  if (clip >= 0 && !fc_avatar_clip_info(s->av, clip, &frames, &pcm, &n))
    return fc_error_set(FC_EINVAL, "stream: no clip %d", clip);
  s->clip = clip < 0 ? -1 : clip;
  s->clip_pos = 0;
  return FC_OK;
}

int fc_stream_clip_playing(const fc_stream *s) { return s->clip; }

/* The next frame of the playing clip into s->idle, with its audio (silence past its end). */
static int clip_frame(fc_stream *s, const uint8_t **i420, const int16_t **pcm) {
  int frames;
  const int16_t *a;
  size_t n;
  fc_avatar_clip_info(s->av, s->clip, &frames, &a, &n);
  int err = fc_avatar_clip_copy_i420(s->av, s->clip, s->clip_pos, s->idle);
  if (err) return err;
  *i420 = s->idle;
  size_t at = (size_t)s->clip_pos * SPF;
  *pcm = a && at + SPF <= n ? a + at : s->silence;
  if (++s->clip_pos >= frames) s->clip = -1;
  return FC_OK;
}

int fc_stream_idle_frame(fc_stream *s, fc_frame_info *info, const uint8_t **i420,
                         const int16_t **pcm) {
  if (s->taken != s->ready)
    return fc_error_set(FC_EINVAL, "stream: idle frame requested while speech frames wait");
  int af = fc_avatar_frame_count(s->av);
  int still = 0;
  if (s->clip >= 0) {
    int err = clip_frame(s, i420, pcm);
    if (err) return err;
  } else if (af > 1) {
    /* A recorded avatar rests as recorded: its own frames, untouched (no lip-sync work and
     * nothing cached per session but the one frame they are assembled into). */
    int err = fc_avatar_copy_i420(s->av, (int)s->next_index, s->idle);
    if (err) return err;
    *i420 = s->idle;
    *pcm = s->silence;
  } else {
    if (!s->rest) {
      /* A photo's rest picture, made once: what the backend draws for a closed mouth (a
       * smiling photo shows teeth). A neural backend (one that takes mel windows) draws from
       * speech only; at rest the photo shows as it is, as in LiveTalking. */
      size_t fsz = (size_t)fc_avatar_width(s->av) * fc_avatar_height(s->av) * 3 / 2;
      uint8_t *img = malloc(fsz);
      if (!img) return fc_error_set(FC_ENOMEM, "stream: out of memory");
      fc_lipsync_req rq = {.avatar = s->av, .frame = 0};
      fc_frame_info fi = {.index = s->next_index};
      int err = s->mel ? 0 : lipsync(s, &rq, &s->patches[0], &fi, 1);
      if (!err) err = fc_compose_i420(s->av, 0, s->mel ? NULL : &s->patches[0], img, s->scratch);
      if (err) {
        free(img);
        return err;
      }
      s->rest = img;
    }
    *i420 = s->rest;
    *pcm = s->silence;
    still = s->resting;
  }
  s->resting = af == 1 && s->clip < 0 && *i420 == s->rest;
  *info = (fc_frame_info){.index = s->next_index++, .still = still};
  s->tracker.cur = (fc_mouth){0, 0, 0};
  return FC_OK;
}
