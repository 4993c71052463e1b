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
 * Face features. A key's crop is the same every time, so the face encoder's outputs for it
 * (the skip tensors the decoder concatenates, w2l_face_split: 568 KB a frame for the 96 network
 * in fp16) are too: the first pass that sees a key stores them in a second arena (fixed-size
 * records), and a batch whose every job has its record runs a pass without the face encoder,
 * its concatenations reading the records (cuda_cudnn.c). A record counts only once the pass
 * that wrote it has finished (w2l_ccache_commit), so a failed pass leaves no half-written
 * record in use. The arena is min(2 GiB, an eighth of the free device memory) unless
 * W2L_CUDA_FEATURE_MB says otherwise (=N N MiB, =0 none); it needs room for max_batch records,
 * else there is no feature cache; when it is full every record is dropped and refilled, and
 * dropping the source cache drops them too. A full pass costs what it did without the cache,
 * plus the copy of its new records.
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
#define FEAT_MAX ((size_t)2 << 30)
#define ALIGN(x) (((x) + 255) & ~(size_t)255)

typedef struct centry {
  uint64_t key;
  uint64_t rgb, base; /* arena offsets */
  int bw, bh, y0;
  int fstate;     /* face features: 0 none, 1 a record given (being stored), 2 stored */
  unsigned fpass; /* the resolve pass that last gave its record to a job to store */
  uint64_t feat;  /* the record's offset in the feature arena */
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
  uint8_t *d_feat;            /* the feature arena: feat_slots records of feat_rec bytes */
  size_t feat_rec, feat_slots, feat_used;
  int feat_on;                /* w2l_ccache_features */
  long long n_cached, n_full; /* live jobs run without / with the face encoder */
  long long n_drops;          /* feature arena resets */
  unsigned pass;              /* counts resolve passes (restarts too): fpass's clock */
};

#define CK W2L_CU

void w2l_ccache_destroy(w2l_ccache *c) {
  if (!c) return;
  if (c->st) cudaStreamSynchronize(c->st);
  cudaFree(c->d_src);
  cudaFree(c->d_jobs);
  cudaFree(c->d_out);
  cudaFree(c->d_feat);
  cudaFreeHost(c->h_stage);
  cudaFreeHost(c->h_jobs);
  cudaFreeHost(c->h_out);
  free(c->tab);
  free(c);
}

/* The feature arena, when it can hold max_batch records: cap_mb MiB (< 0: from the free memory
 * after the other buffers). Not having one is not an error. */
static void make_feature_arena(w2l_ccache *c, int max_batch, size_t rec, long cap_mb) {
  size_t fr = 0, total = 0, cap;
  if (!rec || !cap_mb || cudaMemGetInfo(&fr, &total) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (cap_mb > 0) cap = (size_t)cap_mb << 20;
  else cap = fr / 8 < FEAT_MAX ? fr / 8 : FEAT_MAX;
  c->feat_rec = ALIGN(rec);
  size_t slots = cap / c->feat_rec;
  if (slots < (size_t)max_batch || cudaMalloc((void **)&c->d_feat, slots * c->feat_rec) != cudaSuccess) {
    cudaGetLastError();
    c->d_feat = NULL;
    return;
  }
  c->feat_slots = slots;
  c->feat_on = 1;
}

int w2l_ccache_create(w2l_ccache **out, int max_batch, size_t feat_bytes, long feat_mb,
                      cudaStream_t st) {
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
  make_feature_arena(c, max_batch, feat_bytes, feat_mb);
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

/* Drops every feature record (the arena is full, or the cache was switched). */
static void drop_features(w2l_ccache *c) {
  for (int i = 0; i < TAB_SLOTS; i++) c->tab[i].fstate = 0;
  c->feat_used = 0;
  c->n_drops++;
}

/* Job k's feature fields: the record to read (all = still 1 when it is stored) or to write.
 * 1 when the arena had to be emptied for it (the caller starts the batch again). */
static int job_features(w2l_ccache *c, centry *e, w2l_cjob *j, int *all) {
  j->feat = 0, j->store = 0;
  if (!c->feat_on) {
    *all = 0;
    return 0;
  }
  if (e->fstate == 2) {
    j->feat = e->feat;
    return 0;
  }
  *all = 0;
  if (e->fstate == 0) {
    if (c->feat_used == c->feat_slots) {
      drop_features(c);
      return 1;
    }
    e->feat = c->feat_used++ * c->feat_rec, e->fstate = 1;
  }
  /* given by a pass that failed, or earlier in this batch: the same key twice in one batch is
   * stored by its first job only (others at other batch positions need not round the same,
   * and one copy of the record is enough) */
  j->feat = e->feat, j->store = e->fpass != c->pass;
  e->fpass = c->pass;
  return 0;
}

int w2l_ccache_resolve(w2l_ccache *c, const fc_w2l_job *jobs, int n, int nb, fc_w2l_base_fn base,
                       void *user, int first, size_t *out_bytes, int *grew, int *cached) {
  *grew = 0;
  int reset = 0, freset = 0, all;
restart:
  all = 1;
  c->pass++;
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
        memset(c->tab, 0, TAB_SLOTS * sizeof *c->tab); /* the feature records go with them */
        if (c->feat_used) c->n_drops++;
        c->tab_used = 0, c->src_used = 0, c->feat_used = 0;
        reset = 1;
        goto restart;
      }
      int err = upload(c, e, j, base, user, first + k);
      if (err) return err;
    }
    c->h_jobs[k] = (w2l_cjob){.rgb = e->rgb, .base = e->base, .bw = j->box_w, .bh = j->box_h,
                              .y0 = j->y0, .live = 1};
    if (job_features(c, e, &c->h_jobs[k], &all)) {
      if (freset) /* cannot happen: the arena holds max_batch records */
        return fc_error_set(FC_ENOMEM, "wav2lip composite: feature records exhausted");
      freset = 1;
      goto restart;
    }
  }
  *cached = all;
  if (all) c->n_cached += n;
  else c->n_full += n;
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

void w2l_ccache_commit(w2l_ccache *c, const fc_w2l_job *jobs, int n) {
  for (int k = 0; k < n; k++) {
    if (!c->h_jobs[k].store) continue;
    int found;
    centry *e = lookup(c, jobs[k].key, &found);
    if (found && e->fstate == 1) e->fstate = 2;
  }
}

int w2l_ccache_features(w2l_ccache *c, int on) {
  if (on && !c->d_feat) return 0;
  if (on != c->feat_on) drop_features(c);
  c->feat_on = on;
  return 1;
}

void w2l_ccache_feature_stats(const w2l_ccache *c, fc_w2l_feature_stats *fs) {
  fs->on = c->feat_on;
  fs->records = (long long)c->feat_used, fs->capacity = (long long)c->feat_slots;
  fs->record_bytes = c->feat_rec;
  fs->cached_frames = c->n_cached, fs->full_frames = c->n_full, fs->drops = c->n_drops;
}

void w2l_ccache_deliver(const w2l_ccache *c, const fc_w2l_job *jobs, int n) {
  for (int k = 0; k < n; k++)
    memcpy(jobs[k].out, c->h_out + c->h_jobs[k].out,
           rect_bytes(jobs[k].box_w, jobs[k].box_h, jobs[k].y0));
}

void w2l_ccache_buffers(const w2l_ccache *c, w2l_ccache_bufs *b) {
  b->d_src = c->d_src, b->d_jobs = c->d_jobs, b->h_jobs = c->h_jobs;
  b->d_out = c->d_out, b->h_out = c->h_out;
  b->d_feat = c->d_feat;
}
