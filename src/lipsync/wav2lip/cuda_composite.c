/* The GPU side of fc_w2l_composite for the "cuda" backend: the avatars' face pixels kept on the
 * device, and each batch's job table (see w2l_cuda.h's w2l_ccache_*).
 *
 * Source cache. Every job names its source pixels by a key (fc_avatar_frame_key): the face box
 * as RGB and the patch rect's background as I420. The first time a key is seen its pixels are
 * staged in pinned memory and copied into one device arena (bump-allocated, 256-byte aligned);
 * later jobs with that key read them there, so a talking session sends nothing but its mel
 * window each frame. The arena holds min(1 GiB, an eighth of the free device memory) and the
 * key table 8,192 keys (16,384 slots, half full at most); when either is full the whole cache
 * is dropped and refilled from the jobs that follow — a working set larger than the arena
 * (hundreds of long 1080p avatars at once) costs re-uploads, never wrong pixels.
 *
 * Output. The finished I420 rects of a batch are packed (256-byte aligned) into one device
 * buffer and copied back in one transfer of exactly their size, then handed to the jobs. The
 * buffer grows when a batch needs more; the caller then drops the graphs that name it. */
#include "facecast/error.h"
#include "lipsync/wav2lip/w2l_composite.h"
#include "lipsync/wav2lip/w2l_cuda.h"
#include "lipsync/wav2lip/w2l_internal.h"

#include <stdlib.h>
#include <string.h>

#define TAB_SLOTS 16384 /* power of two */
#define ARENA_MAX ((size_t)1 << 30)
#define ALIGN(x) (((x) + 255) & ~(size_t)255)

typedef struct centry {
  uint64_t key;
  uint64_t rgb, base; /* arena offsets */
  int bw, bh, y0;
} centry;

struct w2l_ccache {
  cudaStream_t st;
  uint8_t *d_src;
  size_t src_cap, src_used;
  centry *tab;
  int tab_used;
  uint8_t *h_stage; /* pinned staging for uploads of new keys */
  size_t stage_cap;
  w2l_cjob *h_jobs, *d_jobs; /* max_batch each */
  uint8_t *h_out, *d_out;
  size_t out_cap;
};

#define CK W2L_CU

void w2l_ccache_destroy(w2l_ccache *c) {
  if (!c) return;
  if (c->st) cudaStreamSynchronize(c->st);
  cudaFree(c->d_src);
  cudaFree(c->d_jobs);
  cudaFree(c->d_out);
  cudaFreeHost(c->h_stage);
  cudaFreeHost(c->h_jobs);
  cudaFreeHost(c->h_out);
  free(c->tab);
  free(c);
}

int w2l_ccache_create(w2l_ccache **out, int max_batch, cudaStream_t st) {
  w2l_ccache *c = calloc(1, sizeof *c);
  *out = NULL;
  if (!c || !(c->tab = calloc(TAB_SLOTS, sizeof *c->tab))) {
    free(c);
    return fc_error_set(FC_ENOMEM, "wav2lip cuda composite: out of memory");
  }
  c->st = st;
  size_t fr = 0, total = 0;
  int err = FC_OK;
  cudaError_t e = cudaMemGetInfo(&fr, &total);
  if (e != cudaSuccess) {
    err = w2l_cuda_error(e, "cudaMemGetInfo");
    goto fail;
  }
  c->src_cap = fr / 8 < ARENA_MAX ? fr / 8 : ARENA_MAX;
  c->out_cap = (size_t)max_batch * 96 * 1024;
  if ((e = cudaMalloc((void **)&c->d_src, c->src_cap)) != cudaSuccess ||
      (e = cudaMalloc((void **)&c->d_jobs, sizeof(w2l_cjob) * max_batch)) != cudaSuccess ||
      (e = cudaMallocHost((void **)&c->h_jobs, sizeof(w2l_cjob) * max_batch)) != cudaSuccess ||
      (e = cudaMalloc((void **)&c->d_out, c->out_cap)) != cudaSuccess ||
      (e = cudaMallocHost((void **)&c->h_out, c->out_cap)) != cudaSuccess) {
    err = w2l_cuda_error(e, "device buffers");
    goto fail;
  }
  *out = c;
  return FC_OK;
fail:
  w2l_ccache_destroy(c);
  return err;
}

static size_t rect_bytes(int bw, int bh, int y0) { return (size_t)bw * (bh - y0) * 3 / 2; }

static centry *lookup(w2l_ccache *c, uint64_t key, int *found) {
  uint64_t h = (key * 0x9E3779B97F4A7C15ull) >> 50; /* 14 bits: TAB_SLOTS */
  for (;; h = (h + 1) & (TAB_SLOTS - 1)) {
    centry *e = &c->tab[h];
    if (e->key == key || !e->key) {
      *found = e->key == key;
      return e;
    }
  }
}

static int grow_stage(w2l_ccache *c, size_t need) {
  if (need <= c->stage_cap) return FC_OK;
  CK(cudaStreamSynchronize(c->st), "staging"); /* copies from the old buffer are done */
  cudaFreeHost(c->h_stage);
  c->h_stage = NULL, c->stage_cap = 0;
  size_t cap = need < ((size_t)4 << 20) ? (size_t)4 << 20 : 2 * need;
  CK(cudaMallocHost((void **)&c->h_stage, cap), "pinned staging");
  c->stage_cap = cap;
  return FC_OK;
}

/* Uploads job j's source pixels (asking the caller for the background) into entry e. */
static int upload(w2l_ccache *c, centry *e, const fc_w2l_job *j, fc_w2l_base_fn base, void *user,
                  int index) {
  size_t nrgb = (size_t)j->box_w * j->box_h * 3, nbase = rect_bytes(j->box_w, j->box_h, j->y0);
  int err = base(user, index);
  if (err) return err;
  /* one miss at a time through the staging buffer: wait for the previous one's copy */
  CK(cudaStreamSynchronize(c->st), "staging");
  if ((err = grow_stage(c, nrgb + nbase))) return err;
  for (int y = 0; y < j->box_h; y++)
    memcpy(c->h_stage + (size_t)y * 3 * j->box_w, j->rgb + (size_t)y * j->rgb_stride,
           (size_t)3 * j->box_w);
  memcpy(c->h_stage + nrgb, j->out, nbase);
  uint64_t rgb = c->src_used, bg = c->src_used + ALIGN(nrgb);
  CK(cudaMemcpyAsync(c->d_src + rgb, c->h_stage, nrgb, cudaMemcpyHostToDevice, c->st), "upload");
  CK(cudaMemcpyAsync(c->d_src + bg, c->h_stage + nrgb, nbase, cudaMemcpyHostToDevice, c->st),
     "upload");
  /* the entry becomes visible only once its pixels are on their way */
  *e = (centry){.key = j->key, .rgb = rgb, .base = bg, .bw = j->box_w, .bh = j->box_h, .y0 = j->y0};
  c->src_used += ALIGN(nrgb) + ALIGN(nbase);
  c->tab_used++;
  return FC_OK;
}

int w2l_ccache_resolve(w2l_ccache *c, const fc_w2l_job *jobs, int n, int nb, fc_w2l_base_fn base,
                       void *user, int first, size_t *out_bytes, int *grew) {
  *grew = 0;
  int reset = 0;
restart:
  for (int k = 0; k < n; k++) {
    const fc_w2l_job *j = &jobs[k];
    int found;
    centry *e = lookup(c, j->key, &found);
    if (found && (e->bw != j->box_w || e->bh != j->box_h || e->y0 != j->y0))
      return fc_error_set(FC_EINVAL, "wav2lip composite: key %llx reused for another box",
                          (unsigned long long)j->key);
    if (!found) {
      size_t need = ALIGN((size_t)j->box_w * j->box_h * 3) + ALIGN(rect_bytes(j->box_w, j->box_h, j->y0));
      if (c->src_used + need > c->src_cap || c->tab_used >= TAB_SLOTS / 2) {
        if (reset)
          return fc_error_set(FC_ENOMEM, "wav2lip composite: one batch's faces exceed the %zu MB "
                              "device cache", c->src_cap >> 20);
        CK(cudaStreamSynchronize(c->st), "cache reset");
        memset(c->tab, 0, TAB_SLOTS * sizeof *c->tab);
        c->tab_used = 0, c->src_used = 0;
        reset = 1;
        goto restart;
      }
      int err = upload(c, e, j, base, user, first + k);
      if (err) return err;
    }
    c->h_jobs[k] = (w2l_cjob){.rgb = e->rgb, .base = e->base, .bw = j->box_w, .bh = j->box_h,
                              .y0 = j->y0, .live = 1};
  }
  size_t total = 0;
  for (int k = 0; k < n; k++) {
    c->h_jobs[k].out = total;
    total += ALIGN(rect_bytes(jobs[k].box_w, jobs[k].box_h, jobs[k].y0));
  }
  for (int k = n; k < nb; k++) c->h_jobs[k] = (w2l_cjob){.live = 0};
  if (total > c->out_cap) {
    CK(cudaStreamSynchronize(c->st), "output buffer");
    /* Moved from here on, even if the new one cannot be had: graphs naming the old one must go
     * (a retry at half the batch would otherwise fit the old capacity and write freed memory). */
    *grew = 1;
    cudaFree(c->d_out);
    cudaFreeHost(c->h_out);
    c->d_out = c->h_out = NULL;
    c->out_cap = 0;
    CK(cudaMalloc((void **)&c->d_out, 2 * total), "output buffer");
    CK(cudaMallocHost((void **)&c->h_out, 2 * total), "output buffer");
    c->out_cap = 2 * total;
  }
  *out_bytes = total;
  return FC_OK;
}

void w2l_ccache_deliver(const w2l_ccache *c, const fc_w2l_job *jobs, int n) {
  for (int k = 0; k < n; k++)
    memcpy(jobs[k].out, c->h_out + c->h_jobs[k].out,
           rect_bytes(jobs[k].box_w, jobs[k].box_h, jobs[k].y0));
}

void w2l_ccache_buffers(const w2l_ccache *c, w2l_ccache_bufs *b) {
  b->d_src = c->d_src, b->d_jobs = c->d_jobs, b->h_jobs = c->h_jobs;
  b->d_out = c->d_out, b->h_out = c->h_out;
}
