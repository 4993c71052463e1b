/* The "wav2lip" lip-sync backend: the Wav2Lip generator behind the lip-sync interface.
 *
 * Per request: the avatar frame's face box, padded 10 px down so the chin is in (Wav2Lip's
 * (0, 10, 0, 0), scaled from the photo to the output frame), goes to fc_w2l_composite with the
 * frame's 80×16 mel window and a key for its pixels (fc_avatar_frame_key). That call resizes the
 * box to the network's face side (96×96, or 256×256 for a wav2lip256 checkpoint: the file
 * decides), runs the network (fp16 on a GPU) and blends the output back over the box's lower
 * 55 % (the mask keeps the upper face from the avatar: the generated face is softer than the
 * photo) in I420 — on the GPU when the model runs there, where the avatar's face pixels stay
 * resident after their first use. So the patch comes back finished (fc_patch.i420) and the
 * compositor only copies it: per frame the host touches the mel window and the finished rect.
 * The background of the rect (the frame's own I420 there) is read only when the model asks
 * for it (every frame on the CPU; once per avatar frame on a GPU).
 */
#include "facecast/error.h"
#include "audio/mel.h"
#include "lipsync/wav2lip/wav2lip.h"
#include "lipsync/backend.h"

#include <math.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Frames per network call: a GPU is fed what the device scheduler gathers across sessions
 * (src/server: up to 128); on the CPU the cost is per frame and 16 keeps buffers small (the 96
 * model's activations take 130 MB at 16 frames, wav2lip256's about 0.9 GB). */
#define CPU_BATCH 16
#define GPU_BATCH 128
/* A GPU's algorithm search times batch sizes up to this; 64 and 128 take its choices (a first
 * start's search was 2.9 s with them timed, 1.74 s of it theirs, for the same algorithms: the
 * H200's figures in docs/BENCHMARKS.md). */
#define SEARCH_UPTO 32
/* The second batch size set up (then powers of two): see warm_up */
#define WARM_SECOND 16
/* The warm-up jobs' keys count down from this: avatar keys are a serial shifted left by 24
 * bits, far below. */
#define WARM_KEY (~0ull)

typedef struct w2l_state {
  fc_w2l *net;
  int max_batch;
  fc_w2l_job *jobs;
  int *job_req; /* jobs[k] is for request job_req[k] of the batch in flight */
  /* the batch in flight, for the background callback */
  const fc_lipsync_req *cur_reqs;
  fc_patch *cur_out;
} w2l_state;

static void w2l_destroy(void *p) {
  w2l_state *st = p;
  if (!st) return;
  fc_w2l_destroy(st->net);
  free(st->jobs);
  free(st->job_req);
  free(st);
}

static int warm_base(void *user, int j) {
  w2l_state *st = user;
  const int s = fc_w2l_face_size(st->net);
  memset(st->jobs[j].out, 128, (size_t)s * (s / 2) * 3 / 2);
  return FC_OK;
}

/* Sets up the batch sizes a GPU will run (algorithm search, graph capture) now rather than in
 * the middle of a stream. 1, then 16 and every power of two up to the largest:
 * fc_w2l_composite pads a batch to the smallest size set up, and 2-15 frames cost about what 16
 * do (a latency-bound pass: 0.57 ms at 1, 0.72 at 16 on the H200), so sizes 2, 4 and 8 would
 * only add search and capture to every first start. Each size three times, with keys of its
 * own: a new key (a whole pass, eager: it keeps the key's face features), the same key again
 * (the pass without the face encoder, captured), another new key (the whole pass, captured). */
static int warm_up(w2l_state *st) {
  static const float mel[FC_W2L_MEL_H * FC_W2L_MEL_W];
  const int s = fc_w2l_face_size(st->net); /* a box of the crop's own size */
  uint8_t *rgb = calloc(1, (size_t)s * s * 3), *out = malloc((size_t)s * (s / 2) * 3 / 2);
  int err = rgb && out ? FC_OK : fc_error_set(FC_ENOMEM, "wav2lip: out of memory");
  for (int k = 0; k < st->max_batch; k++)
    st->jobs[k] = (fc_w2l_job){.key = WARM_KEY, .box_w = s, .box_h = s, .y0 = s / 2, .rgb = rgb,
                               .rgb_stride = s * 3, .mel = mel, .out = out};
  unsigned long long key = WARM_KEY;
  for (int b = 1; !err; b = b == 1 ? WARM_SECOND : b * 2) {
    if (b > st->max_batch) b = st->max_batch;
    for (int k = 0; !err && k < 3; k++) {
      if (k != 1) key--;
      for (int j = 0; j < b; j++) st->jobs[j].key = key;
      err = fc_w2l_composite(st->net, st->jobs, b, warm_base, st);
    }
    if (b == st->max_batch) break;
  }
  free(rgb);
  free(out);
  return err;
}

static int w2l_create(const fc_lipsync_params *p, void **state) {
  *state = NULL;
  if (!p || !p->checkpoint)
    return fc_error_set(FC_EINVAL, "the wav2lip model needs --checkpoint FILE (a Wav2Lip .pth)");
  w2l_state *st = calloc(1, sizeof *st);
  if (!st) return fc_error_set(FC_ENOMEM, "wav2lip: out of memory");
  int err;
  int gpu = p->device && strncmp(p->device, "cuda", 4) == 0;
  /* A GPU's buffers, algorithms and graphs are made for the largest batch at start. When the
   * card has too little memory left for it (another process holds most of it), the largest
   * batch is halved until it fits: a server that runs with smaller batches beats one that does
   * not start. Without even the weights' room this still fails. */
  gint64 t0 = g_get_monotonic_time(), t_loaded = t0;
  for (st->max_batch = gpu ? GPU_BATCH : CPU_BATCH;; st->max_batch /= 2) {
    fc_w2l_params wp = {.device = p->device, .max_batch = st->max_batch,
                        .dtype = gpu ? FC_W2L_FP16 : FC_W2L_FP32, .search_upto = SEARCH_UPTO};
    if (!(st->net = fc_w2l_load(p->checkpoint, &wp, &err))) goto retry;
    t_loaded = g_get_monotonic_time();
    if (!(st->jobs = calloc((size_t)st->max_batch, sizeof *st->jobs)) ||
        !(st->job_req = calloc((size_t)st->max_batch, sizeof *st->job_req))) {
      err = fc_error_set(FC_ENOMEM, "wav2lip: out of memory");
      goto fail;
    }
    if (!gpu || !(err = warm_up(st))) break;
  retry:
    if (err != FC_ENOMEM || !gpu || st->max_batch == 1) goto fail;
    fc_w2l_destroy(st->net);
    st->net = NULL;
    free(st->jobs), free(st->job_req);
    st->jobs = NULL, st->job_req = NULL;
    fprintf(stderr, "facecast: wav2lip %s: not enough device memory for batches of %d frames (%s); "
                    "trying %d\n", p->device, st->max_batch, fc_error_detail(err), st->max_batch / 2);
  }
  if (gpu) { /* where a GPU server's start-up went (docs/BENCHMARKS.md, bench startup) */
    char how[512];
    gint64 t1 = g_get_monotonic_time();
    fc_w2l_describe(st->net, how, sizeof how);
    fprintf(stderr, "facecast: wav2lip on %s ready in %.2f s: network loaded in %.2f s, batch "
                    "sizes up to %d set up and captured in %.2f s; %s\n", p->device, (double)(t1 - t0) / 1e6,
            (double)(t_loaded - t0) / 1e6, st->max_batch, (double)(t1 - t_loaded) / 1e6, how);
  }
  *state = st;
  return FC_OK;
fail:
  w2l_destroy(st);
  return err;
}

/* The padded face box in the output frame, even-aligned and inside the frame. */
static fc_rect face_box(const fc_avatar *av, int frame) {
  fc_rect f = fc_avatar_face(av, frame), src = fc_avatar_source_face(av);
  int pad = src.h > 0 ? (int)lround(10.0 * f.h / src.h) : 10;
  int x0 = f.x, y0 = f.y, x1 = f.x + f.w, y1 = f.y + f.h + pad;
  int w = fc_avatar_width(av), h = fc_avatar_height(av);
  x0 = x0 < 0 ? 0 : x0 & ~1;
  y0 = y0 < 0 ? 0 : y0 & ~1;
  x1 = x1 > w ? w : x1;
  y1 = y1 > h ? h : y1;
  return (fc_rect){x0, y0, (x1 - x0) & ~1, (y1 - y0) & ~1};
}

static size_t w2l_capacity(void *p, const fc_avatar *av) {
  size_t best = 0;
  for (int i = 0; i < fc_avatar_frame_count(av); i++) {
    fc_rect r = face_box(av, i);
    if ((size_t)r.w * r.h > best) best = (size_t)r.w * r.h;
  }
  (void)p;
  return best;
}

/* The model asks for request j's background: the frame's I420 under the patch rect. */
static int request_base(void *user, int j) {
  w2l_state *st = user;
  const int r = st->job_req[j];
  const fc_lipsync_req *rq = &st->cur_reqs[r];
  return fc_avatar_copy_i420_rect(rq->avatar, rq->frame, st->cur_out[r].place, st->jobs[j].out);
}

static int run_batch(w2l_state *st, const fc_lipsync_req *reqs, fc_patch *out, int n) {
  int nj = 0;
  for (int k = 0; k < n; k++) {
    const fc_lipsync_req *rq = &reqs[k];
    if (!rq->avatar || !rq->mel) return fc_error_set(FC_EINVAL, "wav2lip: request without mel");
    fc_rect box = face_box(rq->avatar, rq->frame), where;
    const fc_image *im = fc_avatar_face_region(rq->avatar, rq->frame, &where);
    /* the box as the face region holds it (a pack keeps only the region around the face) */
    int x0 = box.x > where.x ? box.x : where.x, y0 = box.y > where.y ? box.y : where.y;
    int x1 = box.x + box.w < where.x + where.w ? box.x + box.w : where.x + where.w;
    int y1 = box.y + box.h < where.y + where.h ? box.y + box.h : where.y + where.h;
    box = (fc_rect){x0, y0, (x1 - x0) & ~1, (y1 - y0) & ~1};
    out[k].i420 = 1;
    if (box.w < 8 || box.h < 8) { /* no mouth to make: the frame as it is, the others go on */
      out[k].place = (fc_rect){0};
      continue;
    }
    int top = (int)(0.45f * box.h) & ~1; /* the mask is transparent above 45 % of the box */
    out[k].place = (fc_rect){box.x, box.y + top, box.w, box.h - top};
    st->job_req[nj] = k;
    st->jobs[nj++] = (fc_w2l_job){
        .key = fc_avatar_frame_key(rq->avatar, rq->frame),
        .box_w = box.w, .box_h = box.h, .y0 = top,
        .rgb = im->rgb + (size_t)(box.y - where.y) * im->stride + (size_t)(box.x - where.x) * 3,
        .rgb_stride = im->stride, .mel = rq->mel, .out = out[k].rgb};
  }
  st->cur_reqs = reqs, st->cur_out = out;
  return nj ? fc_w2l_composite(st->net, st->jobs, nj, request_base, st) : FC_OK;
}

static int w2l_run(void *p, const fc_lipsync_req *reqs, fc_patch *out, int n) {
  w2l_state *st = p;
  for (int i = 0; i < n; i += st->max_batch) {
    int err = run_batch(st, reqs + i, out + i, n - i < st->max_batch ? n - i : st->max_batch);
    if (err) return err;
  }
  return FC_OK;
}

static int w2l_memory_used(void *p, double *fraction) {
  w2l_state *st = p;
  size_t fr = 0, total = 0;
  int err = fc_w2l_device_memory(st->net, &fr, &total);
  if (err) return err;
  *fraction = total ? 1.0 - (double)fr / total : 0;
  return FC_OK;
}

const fc_lipsync_backend fc_lipsync_wav2lip = {
    .name = "wav2lip",
    .needs_mel = 1,
    .create = w2l_create,
    .destroy = w2l_destroy,
    .patch_capacity = w2l_capacity,
    .run = w2l_run,
    .memory_used = w2l_memory_used,
};
