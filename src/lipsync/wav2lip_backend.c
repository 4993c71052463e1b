/* The "wav2lip" lip-sync backend: the Wav2Lip generator behind the lip-sync interface.
 *
 * Per request: the avatar frame's face box, padded 10 px down so the chin is in (Wav2Lip's
 * (0, 10, 0, 0), scaled from the photo to the output frame), is cut out and resized to 96×96;
 * fc_w2l_infer_u8 takes it as RGB bytes and gives the network it twice — lower half blanked
 * (rows 48..95) and whole as the reference, BGR/255 — with the frame's 80×16 mel window, on the
 * device that runs the model (fp16 on a GPU). Its 96×96 output is resized back to the box.
 * The blend mask keeps the upper face from the avatar (the generated face is softer than the
 * photo): transparent above 45 % of the box height, opaque from 60 %, feathered at the sides
 * and bottom, so only the mouth and jaw are replaced.
 * Buffers for a whole batch (crops, mel windows, outputs) are allocated once.
 */
#include "facecast/error.h"
#include "facecast/mel.h"
#include "facecast/wav2lip.h"
#include "lipsync/backend.h"

#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S FC_W2L_FACE
/* Frames per network call: a GPU is fed what the device scheduler gathers across sessions
 * (src/server: up to 64); on the CPU the cost is per frame and 16 keeps buffers small. */
#define CPU_BATCH 16
#define GPU_BATCH 64

struct w2l_state;
typedef struct task {
  struct w2l_state *st;
  int k, finish;
} task;

typedef struct w2l_state {
  fc_w2l *net;
  float *mel;
  uint8_t *crops, *out; /* max_batch × 96×96 RGB */
  int max_batch;
  int gpu; /* batches are rounded up to powers of two: one CUDA plan and graph per bucket */
  /* helper threads for the per-frame work of large batches (GPU only) */
  GThreadPool *pool;
  GMutex lock;
  GCond cond;
  int left;
  struct task *tasks;
  const fc_lipsync_req *cur_reqs;
  fc_patch *cur_out;
} w2l_state;

static void w2l_destroy(void *p) {
  w2l_state *st = p;
  if (!st) return;
  if (st->pool) {
    g_thread_pool_free(st->pool, FALSE, TRUE);
    g_mutex_clear(&st->lock);
    g_cond_clear(&st->cond);
  }
  free(st->tasks);
  fc_w2l_destroy(st->net);
  free(st->mel);
  free(st->crops);
  free(st->out);
  free(st);
}

static void run_task(gpointer data, gpointer user);

static int w2l_create(const fc_lipsync_params *p, void **state) {
  *state = NULL;
  if (!p || !p->checkpoint)
    return fc_error_set(FC_EINVAL, "the wav2lip model needs --checkpoint FILE (a Wav2Lip .pth)");
  w2l_state *st = calloc(1, sizeof *st);
  if (!st) return fc_error_set(FC_ENOMEM, "wav2lip: out of memory");
  int err;
  int gpu = p->device && strncmp(p->device, "cuda", 4) == 0;
  st->max_batch = gpu ? GPU_BATCH : CPU_BATCH;
  fc_w2l_params wp = {.device = p->device, .max_batch = st->max_batch,
                      .dtype = gpu ? FC_W2L_FP16 : FC_W2L_FP32};
  if (!(st->net = fc_w2l_load(p->checkpoint, &wp, &err))) goto fail;
  st->mel = malloc(sizeof(float) * st->max_batch * FC_W2L_MEL_H * FC_W2L_MEL_W);
  st->crops = malloc((size_t)st->max_batch * 3 * S * S);
  st->out = malloc((size_t)st->max_batch * 3 * S * S);
  if (!st->mel || !st->crops || !st->out) {
    err = fc_error_set(FC_ENOMEM, "wav2lip: out of memory");
    goto fail;
  }
  st->gpu = gpu;
  if (gpu) {
    int nt = (int)g_get_num_processors();
    g_mutex_init(&st->lock);
    g_cond_init(&st->cond);
    if (!(st->tasks = calloc((size_t)st->max_batch, sizeof *st->tasks)) ||
        !(st->pool = g_thread_pool_new(run_task, NULL, nt > 1 ? nt : 1, TRUE, NULL))) {
      err = fc_error_set(FC_ENOMEM, "wav2lip: cannot start helper threads");
      goto fail;
    }
  }
  if (gpu) { /* set up every bucket now (algorithm search, graph capture), not mid-stream */
    memset(st->mel, 0, sizeof(float) * st->max_batch * FC_W2L_MEL_H * FC_W2L_MEL_W);
    memset(st->crops, 0, (size_t)st->max_batch * 3 * S * S);
    for (int b = 1; b <= st->max_batch; b *= 2)
      for (int k = 0; k < 2; k++)
        if ((err = fc_w2l_infer_u8(st->net, st->mel, st->crops, st->out, b))) goto fail;
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
  return best;
}

/* Bilinear sample at (x, y) of channel c of a 96×96 RGB byte image. */
static float out_sample(const uint8_t *img, int c, float x, float y) {
  x = x < 0 ? 0 : x > S - 1.001f ? S - 1.001f : x;
  y = y < 0 ? 0 : y > S - 1.001f ? S - 1.001f : y;
  int xi = (int)x, yi = (int)y;
  float fx = x - xi, fy = y - yi;
  const uint8_t *p = img + (yi * S + xi) * 3 + c;
  float top = p[0] + fx * (p[3] - p[0]), bot = p[3 * S] + fx * (p[3 * S + 3] - p[3 * S]);
  return top + fy * (bot - top);
}

/* Frame k's input: the face box cut out and resized to 96×96, its mel window. */
static void prep_frame(w2l_state *st, int k) {
  const fc_lipsync_req *rq = &st->cur_reqs[k];
  fc_rect box = face_box(rq->avatar, rq->frame);
  fc_image crop = {.w = S, .h = S, .stride = 3 * S, .rgb = st->crops + (size_t)k * 3 * S * S};
  fc_rect where;
  const fc_image *im = fc_avatar_face_region(rq->avatar, rq->frame, &where);
  fc_image_resize_region(im, (fc_rect){box.x - where.x, box.y - where.y, box.w, box.h}, &crop);
  memcpy(st->mel + (size_t)k * FC_W2L_MEL_H * FC_W2L_MEL_W, rq->mel,
         sizeof(float) * FC_W2L_MEL_H * FC_W2L_MEL_W);
}

/* Frame k's patch: the network's 96×96 resized back over the box. Only the rows the mask shows
 * are made (it is transparent above 45 % of the box), so the patch starts there. */
static void finish_frame(w2l_state *st, int k) {
  const fc_lipsync_req *rq = &st->cur_reqs[k];
  fc_patch *pt = &st->cur_out[k];
  fc_rect box = face_box(rq->avatar, rq->frame);
  int y0 = (int)(0.45f * box.h) & ~1;
  fc_rect r = {box.x, box.y + y0, box.w, box.h - y0};
  pt->place = r;
  const uint8_t *o = st->out + (size_t)k * 3 * S * S;
  float sx = (float)S / box.w, sy = (float)S / box.h;
  for (int y = 0; y < r.h; y++) {
    int by = y + y0;                  /* row in the box */
    float v = (by + 0.5f) / box.h;    /* 0 at the top of the box, 1 at the bottom */
    float a_v = v < 0.45f ? 0 : v > 0.6f ? 1 : (v - 0.45f) / 0.15f;
    float a_b = v > 0.95f ? (1.0f - v) / 0.05f : 1.0f;
    for (int x = 0; x < r.w; x++) {
      float u = (x + 0.5f) / r.w;
      float a_s = u < 0.08f ? u / 0.08f : u > 0.92f ? (1.0f - u) / 0.08f : 1.0f;
      float fx = (x + 0.5f) * sx - 0.5f, fy = (by + 0.5f) * sy - 0.5f;
      uint8_t *px = pt->rgb + ((size_t)y * r.w + x) * 3;
      for (int c = 0; c < 3; c++) px[c] = (uint8_t)(out_sample(o, c, fx, fy) + 0.5f);
      pt->alpha[(size_t)y * r.w + x] = (uint8_t)lrintf(255.0f * a_v * a_b * a_s);
    }
  }
}

/* The per-frame work of a batch runs on helper threads (a GPU batch gathers many sessions'
 * frames, and these loops would otherwise run one frame after another on the scheduler's
 * thread): each task is one frame of one phase. */
static void run_task(gpointer data, gpointer user) {
  task *t = data;
  if (t->finish) finish_frame(t->st, t->k);
  else prep_frame(t->st, t->k);
  g_mutex_lock(&t->st->lock);
  if (--t->st->left == 0) g_cond_signal(&t->st->cond);
  g_mutex_unlock(&t->st->lock);
  (void)user;
}

static void each_frame(w2l_state *st, int n, int finish) {
  if (!st->pool || n < 4) {
    for (int k = 0; k < n; k++) finish ? finish_frame(st, k) : prep_frame(st, k);
    return;
  }
  st->left = n;
  for (int k = 0; k < n; k++) {
    st->tasks[k] = (task){st, k, finish};
    g_thread_pool_push(st->pool, &st->tasks[k], NULL);
  }
  g_mutex_lock(&st->lock);
  while (st->left > 0) g_cond_wait(&st->cond, &st->lock);
  g_mutex_unlock(&st->lock);
}

static int run_batch(w2l_state *st, const fc_lipsync_req *reqs, fc_patch *out, int n) {
  for (int k = 0; k < n; k++)
    if (!reqs[k].avatar || !reqs[k].mel) return fc_error_set(FC_EINVAL, "wav2lip: request without mel");
  st->cur_reqs = reqs, st->cur_out = out;
  each_frame(st, n, 0);
  int nb = n; /* on a GPU: up to a power of two (one plan and graph per bucket); the extra
               * frames compute garbage nobody reads */
  while (st->gpu && (nb & (nb - 1))) nb += nb & -nb;
  if (nb > st->max_batch) nb = st->max_batch;
  int err = fc_w2l_infer_u8(st->net, st->mel, st->crops, st->out, nb);
  if (err) return err;
  each_frame(st, n, 1);
  return FC_OK;
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
