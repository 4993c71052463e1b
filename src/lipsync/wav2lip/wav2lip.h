/* The Wav2Lip generator, run on the CPU or a CUDA GPU from a PyTorch checkpoint.
 *
 * What: fc_w2l_load() reads a Wav2Lip checkpoint (torch zip or legacy .pth, or safetensors; keys
 * with or without "module."; the state dict alone or wrapped as {"state_dict": ...}), derives
 * every channel count from the tensor shapes (so the real network and narrower test networks of
 * the same topology both load), folds each BatchNorm into its convolution and prepares a
 * backend; fc_w2l_infer() runs a batch.
 *
 * Two networks load: the original Wav2Lip on 96×96 face crops, and "wav2lip256" (LiveTalking's
 * models/wav2lip.pth, its wav2lip_v2 network: one more encoder and decoder level) on 256×256
 * crops. The file decides: a checkpoint with face_encoder_blocks.7 is the 256 model.
 * fc_w2l_face_size() says which was loaded; S below is that side.
 *
 * Tensors are NCHW float32, exactly as the PyTorch model takes and returns them:
 *   mel   [B,1,80,16]  normalised mel window per video frame
 *   faces [B,6,S,S]    [masked crop (rows S/2.. of channels 0..2 zero), reference crop], BGR/255
 *   out   [B,3,S,S]    sigmoid output in [0,1], BGR
 *
 * Devices: "cpu" (oneDNN, multi-threaded, the fast path) and "cpu-ref" (plain C loops, one
 * thread: slow, but simple enough to be obviously right; other backends are tested against it).
 * "cuda[:N]": cuDNN on GPU N (0 by default), fp32, fp16 or bf16 (params.dtype), in builds with
 * CUDA; without CUDA support in the build, or without a GPU, it fails with FC_EUNSUPPORTED.
 *
 * Two ways in: fc_w2l_infer() takes and returns the float tensors above (parity with PyTorch);
 * fc_w2l_infer_u8() takes the S×S RGB face crops as bytes and returns the generated crops as
 * bytes, building the six input channels (BGR/255, lower half masked) and the ×255 output on the
 * device that runs the model, so only 27 KB per frame cross the bus each way. That is the path
 * the engine uses (256: 196 KB).
 *
 * Memory: all activation buffers are sized for max_batch at load; fc_w2l_infer() does not
 * allocate, except that the "cpu" and "cuda" backends build their plans (oneDNN primitives;
 * cuDNN descriptors, algorithm choice and workspace) the first time each batch size is used
 * and keep them. On "cuda" the weights and activations live on the GPU (activations in device
 * buffers sized for max_batch) and inputs/outputs pass through pinned host buffers; each batch
 * size's whole sequence (copies, kernels) is captured once as a CUDA graph and replayed.
 *
 * Threads: a model is used by one thread at a time (infer writes its internal buffers).
 * Errors: negative FC_E* codes with a one-line detail (fc_error_detail). */
#ifndef FACECAST_WAV2LIP_H
#define FACECAST_WAV2LIP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FC_W2L_MEL_H 80
#define FC_W2L_MEL_W 16
#define FC_W2L_FACE 96      /* face crop side of the original model */
#define FC_W2L_FACE_256 256 /* face crop side of wav2lip256 */
#define FC_W2L_FACE_C 6
#define FC_W2L_OUT_C 3

typedef struct fc_w2l fc_w2l;

/* Compute type of the activations and weights; accumulation is fp32 in every case. */
enum { FC_W2L_FP32 = 0, FC_W2L_FP16 = 1, FC_W2L_BF16 = 2 };

/* A zero-initialised struct (or a NULL pointer) means: device "cpu", max_batch 16, threads
 * default (the OpenMP default, i.e. OMP_NUM_THREADS or every core). */
typedef struct fc_w2l_params {
  const char *device; /* "cpu" (oneDNN), "cpu-ref" (plain C), "cuda[:N]" (cuDNN) */
  int max_batch;      /* largest batch fc_w2l_infer accepts; 0 = 16 */
  int threads;        /* worker threads for "cpu"; 0 = default. oneDNN runs on OpenMP, so this
                       * is omp_set_num_threads() on the threads that load and infer */
  int dtype;          /* FC_W2L_FP32 (0), or FC_W2L_FP16 / FC_W2L_BF16: weights and activations
                       * in 16 bits (fp16 within ~2e-2 of fp32 on the output, bf16 ~1e-1);
                       * "cuda" only, else FC_EUNSUPPORTED. Inputs and outputs are as below */
  int search_upto;    /* "cuda": convolution algorithms are timed (cudnnFind) at batch sizes up
                       * to this; a larger batch takes the choice made at exactly this size for
                       * the same convolution when there is one, rather than timing its own
                       * (not written to the disk cache). 0 = time every size. The server uses
                       * 32: a first start's search is mostly its largest sizes, and they chose
                       * the same algorithms (docs/BENCHMARKS.md). W2L_CUDA_SEARCH_UPTO=N
                       * overrides it (0: every size) */
} fc_w2l_params;

/* Loads and prepares the model. NULL on failure with *err (if not NULL) set: FC_ENOTFOUND /
 * FC_EIO (file), FC_EFORMAT (not a Wav2Lip checkpoint: the detail names missing and unexpected
 * keys and shape mismatches), FC_EINVAL (bad params), FC_EUNSUPPORTED (device), FC_ENOMEM. */
fc_w2l *fc_w2l_load(const char *checkpoint, const fc_w2l_params *p, int *err);

/* The loaded network's face crop side: FC_W2L_FACE (96) or FC_W2L_FACE_256 (256); 0 for NULL. */
int fc_w2l_face_size(const fc_w2l *m);

/* Runs batch (1..max_batch) frames: out = G(mel, faces). Returns 0, FC_EINVAL (bad batch or
 * NULL pointers) or FC_ENOMEM / FC_EUNSUPPORTED (the backend could not set up this batch size). */
int fc_w2l_infer(fc_w2l *m, const float *mel, const float *faces, float *out, int batch);

/* The engine's path: crops [B][S][S][3] RGB bytes (the face box resized to S×S; the network
 * sees it as the reference and, lower half zeroed, as the masked input), mel as above; out
 * [B][S][S][3] RGB bytes, round(255 · sigmoid). Same errors as fc_w2l_infer. */
int fc_w2l_infer_u8(fc_w2l *m, const float *mel, const unsigned char *crops, unsigned char *out,
                    int batch);

/* Lip-sync with compositing (the engine's path): per job, the face box of an avatar frame is
 * resized to S×S, run through the network with its mel window, and the output is resized back
 * over the box's lower part (rows y0..box_h-1, "the patch rect"), blended into the frame's own
 * pixels there and converted to I420 — all on the model's device, so on a GPU only the
 * finished I420 rect comes back (and the avatar's pixels are sent once per key, then kept).
 *
 * Blend mask: transparent above 45 % of the box height, opaque from 60 % (linear between),
 * fading out over the last 5 % of the height and over 8 % of the width at either side, so only
 * mouth and jaw change. Resizing is bilinear with 8-bit weights, I420 is BT.601 limited range
 * (as libyuv) with 2×2-averaged chroma and mask; the C reference (every device but "cuda") and
 * the CUDA kernels share this arithmetic and give the same bytes for the same network output. */
typedef struct fc_w2l_job {
  unsigned long long key; /* the source pixels' identity, never 0: equal keys, equal pixels
                           * (fc_avatar_frame_key); a GPU keeps each key's pixels resident */
  int box_w, box_h;       /* the face box, even, 2..2048 */
  int y0;                 /* first row of the patch rect in the box: even, 0 <= y0 < box_h */
  const unsigned char *rgb; /* the face box as RGB bytes, rgb_stride apart */
  int rgb_stride;
  const float *mel;         /* this frame's mel window, 80 × 16 */
  unsigned char *out;       /* box_w × (box_h - y0) I420 (Y, then U, V at half size): the
                             * frame's own pixels there when base() is called for this job (the
                             * blend's background), the finished pixels when the call returns */
} fc_w2l_job;

/* Asks the caller for job j's background: write the frame's I420 of the patch rect into
 * jobs[j].out. Called only while fc_w2l_composite runs, for every job on the CPU and for keys
 * not yet resident on a GPU. 0, or an error that fc_w2l_composite returns. */
typedef int (*fc_w2l_base_fn)(void *user, int j);

/* Runs n jobs (any n >= 1: batches of max_batch; on "cuda" padded up to a power of two). 0,
 * FC_EINVAL (bad job), the base callback's error, or the errors of fc_w2l_infer_u8; on an error
 * the outputs are undefined. */
int fc_w2l_composite(fc_w2l *m, const fc_w2l_job *jobs, int n, fc_w2l_base_fn base, void *user);

/* The composite path's face-feature cache ("cuda" only; the CPU backends have none). The face
 * encoder's outputs depend on the crop alone, i.e. on the job's key, so the first pass that
 * sees a key keeps them on the device (the skip tensors the decoder concatenates: 568 KB a
 * frame for the 96 network in fp16), and a batch whose every job is kept runs without the face
 * encoder: the same bytes out for less work. The arena is min(2 GiB, an eighth of the free device
 * memory) by default (W2L_CUDA_FEATURE_MB unset or auto), =N N MiB, =0 none, read at load;
 * where it exists the cache is on. fc_w2l_set_feature_cache turns it
 * off (every pass computes the face encoder, for measuring) or on again; either drops what is
 * kept. FC_EUNSUPPORTED when turning it on where there is no arena. */
typedef struct fc_w2l_feature_stats {
  int on;                    /* in use */
  long long records;         /* frames kept now */
  long long capacity;        /* frames the arena holds (0: no cache) */
  size_t record_bytes;       /* device bytes a frame */
  long long cached_frames;   /* jobs run without the face encoder so far */
  long long full_frames;     /* jobs run with it */
  long long drops;           /* times every record was dropped (the arena full, or switched) */
} fc_w2l_feature_stats;
int fc_w2l_set_feature_cache(fc_w2l *m, int on);
/* Zeroes *st where there is no cache (the CPU, or before the first composite call). */
void fc_w2l_feature_stats_get(const fc_w2l *m, fc_w2l_feature_stats *st);

/* For benchmarks: runs the network again on the inputs of the previous infer call, leaving the
 * result on the device: the model alone, as the PyTorch anchors time it (tensors resident).
 * FC_EINVAL before any infer call of that batch size. */
int fc_w2l_run_resident(fc_w2l *m, int batch);

/* Device memory this model holds on its GPU at its peak so far (weights, activations, workspace,
 * staging, graphs; measured as the drop in free device memory since before it was loaded), in
 * bytes; 0 on the CPU. */
size_t fc_w2l_device_bytes(const fc_w2l *m);

/* Free and total memory of the model's GPU right now (cudaMemGetInfo), for schedulers that
 * size batches by headroom. FC_EUNSUPPORTED on the CPU. */
int fc_w2l_device_memory(const fc_w2l *m, size_t *free_bytes, size_t *total_bytes);

/* How the device got ready, for the start-up log (e.g. the CUDA backend's cuDNN algorithms: how
 * many came from the disk cache, how many were searched and for how long); "" when the backend
 * has nothing to say. Writes at most n bytes, NUL-terminated. */
void fc_w2l_describe(const fc_w2l *m, char *buf, size_t n);

void fc_w2l_destroy(fc_w2l *m);

#ifdef __cplusplus
}
#endif
#endif
