/* Private: the Wav2Lip layer graph shared by model.c (loading, planning, the infer loop) and the
 * backends (cpu_ref.c, cpu_dnnl.c).
 *
 * The network is a fixed list of ops over tensors. Every tensor is NHWC float32 per sample,
 * [batch][h][w][c] densely packed, and lives in one of a few slots (buffers sized for max_batch)
 * that model.c assigns from the tensors' lifetimes, so ops never allocate and buffers are
 * reused once a tensor is dead. Weights are stored BatchNorm-folded in PyTorch's layouts
 * (Conv2d [Cout][Cin][kh][kw], ConvTranspose2d [Cin][Cout][kh][kw]); each backend re-lays them
 * out as it likes when it is created. */
#ifndef FC_W2L_INTERNAL_H
#define FC_W2L_INTERNAL_H

#include "lipsync/wav2lip/wav2lip.h"

#include <stddef.h>

enum { W2L_CONV, W2L_CONVT };

typedef struct w2l_layer {
  char name[48]; /* state-dict prefix without "module.", e.g. "audio_encoder.3" */
  int kind;      /* W2L_CONV or W2L_CONVT */
  int bn;        /* has a BatchNorm (folded at load) */
  int residual;  /* y = relu(conv(x) + x) */
  int relu;
  int cin, cout;
  int kh, kw, sh, sw, ph, pw, oph, opw; /* oph/opw: ConvTranspose2d output_padding */
  float *w;                             /* folded weights, PyTorch layout (see above) */
  float *b;                             /* folded bias [cout] */
} w2l_layer;

typedef struct w2l_tensor {
  int h, w, c;
  int slot;        /* index into fc_w2l.slots */
  int first, last; /* op index that writes it (-1: a model input) and the last that reads it */
  char tap[16];    /* debug name ("face_f3", "logits", ...) or "" */
} w2l_tensor;

enum { W2L_OP_CONV, W2L_OP_CONCAT };

typedef struct w2l_op {
  int kind;
  int layer;   /* W2L_OP_CONV: index into layers */
  int in, in2; /* input tensor(s); CONCAT: out = cat((in, in2), channels) */
  int out;
  int tmp;     /* W2L_CONVT: a scratch tensor of the output's size (-1 otherwise) */
} w2l_op;

/* Table sizes, with room, for the larger variant (256: 55 convs, 8 concatenations, 72 tensors,
 * 63 ops; the 96 model has 51, 7, 66 and 58). */
#define W2L_NLAYERS 55
#define W2L_MAX_TENSORS 96
#define W2L_MAX_OPS 80

/* The key whose presence makes a checkpoint the 256×256 variant (LiveTalking's wav2lip_v2):
 * the first conv of the eighth encoder block, which the 96 model does not have. */
#define W2L_KEY_256 "face_encoder_blocks.7.0.conv_block.0.weight"

typedef struct w2l_backend w2l_backend;

struct fc_w2l {
  w2l_layer layers[W2L_NLAYERS];
  int nlayers;
  w2l_tensor tensors[W2L_MAX_TENSORS];
  int ntensors;
  w2l_op ops[W2L_MAX_OPS];
  int nops;
  int face; /* face crop side: FC_W2L_FACE (96) or FC_W2L_FACE_256 */
  int t_mel, t_face, t_logits;
  float **slots;        /* nslots buffers of slot_floats[i] * max_batch floats, 64-byte aligned */
  size_t *slot_floats;  /* per-sample capacity */
  int nslots;
  int max_batch, threads;
  int dtype;       /* FC_W2L_FP32 / FP16 / BF16 (16-bit types: cuda only) */
  int warm;        /* an infer call has filled the inputs (fc_w2l_run_resident) */
  int cuda_device; /* N of "cuda:N" */
  int search_upto; /* fc_w2l_params.search_upto, or W2L_CUDA_SEARCH_UPTO */
  const w2l_backend *be;
  void *bstate;
  /* fc_w2l_composite's host buffers for backends without composite() (composite.c), max_batch
   * each, allocated on first use */
  unsigned char *c_crops, *c_out;
  float *c_mel;
};

/* A backend runs the ops on the slots. create() sees the loaded model (layers, tensors, slots);
 * prepare() is called before each batch (the oneDNN backend builds its primitives for a batch
 * size there, once); run_op() executes op i for batch samples. */
struct w2l_backend {
  const char *name;
  int (*create)(const fc_w2l *m, void **state);
  void (*destroy)(void *state);
  int (*prepare)(void *state, const fc_w2l *m, int batch);
  int (*run_op)(void *state, const fc_w2l *m, int op, int batch);
  /* Optional: runs the whole batch itself (inputs to outputs, sigmoid included) after
   * prepare(), instead of the run_op loop; io says what in and out are (W2L_IO_*). A backend
   * with it keeps its tensors elsewhere: model.c then plans the slots (slot_floats,
   * tensors[].slot) but allocates no host slots (slots[i] NULL), and the tap debug hook is not
   * available (FC_EUNSUPPORTED). */
  int (*infer)(void *state, const fc_w2l *m, int io, const float *mel, const void *in, void *out,
               int batch);
  /* Optional: fc_w2l_composite on the device (jobs checked, n <= max_batch; base() is called
   * with first + the job's index in jobs); without it, composite.c does the resizing and
   * blending on the host around infer_u8. */
  int (*composite)(void *state, const fc_w2l *m, const fc_w2l_job *jobs, int n,
                   fc_w2l_base_fn base, void *user, int first);
  /* Optional: device memory held at the peak so far (fc_w2l_device_bytes). */
  size_t (*device_bytes)(void *state);
  /* Optional: the device's free and total memory now (fc_w2l_device_memory). */
  int (*device_memory)(void *state, size_t *free_bytes, size_t *total_bytes);
  /* Optional: how the backend got ready, one line for the start-up log (fc_w2l_describe). */
  void (*describe)(void *state, char *buf, size_t n);
  /* Optional: the composite path's face-feature cache (fc_w2l_set_feature_cache). */
  int (*features)(void *state, int on);
  void (*feature_stats)(void *state, fc_w2l_feature_stats *st);
  /* Optional, asked before the slot plan (m->dtype set): non-zero when the backend may run a
   * concat and the transposed convolution that alone reads it as one kernel, which writes the
   * ConvT's output while it reads the concat's inputs; the plan then keeps those inputs alive
   * through the ConvT, so that its output never shares their slots (more activation memory:
   * the ConvT's output, the 96 network's largest tensor, can no longer reuse an input's slot) */
  int (*fuses_concat_convt)(const fc_w2l *m);
};

/* What infer() moves: float NCHW tensors (in = faces, out = sigmoid output), RGB byte crops
 * (fc_w2l_infer_u8), or nothing (fc_w2l_run_resident: the inputs already on the device);
 * W2L_IO_COMPOSITE is the CUDA backend's own composite() pass (crops made and patches blended
 * on the device), W2L_IO_COMPOSITE_CACHED the same without the face encoder (its outputs read
 * from the feature cache). */
enum { W2L_IO_F32, W2L_IO_U8, W2L_IO_RESIDENT, W2L_IO_COMPOSITE, W2L_IO_COMPOSITE_CACHED,
       W2L_IO_COUNT };

extern const w2l_backend fc_w2l_backend_ref;
extern const w2l_backend fc_w2l_backend_dnnl;
#ifdef FC_HAVE_CUDA
extern const w2l_backend fc_w2l_backend_cudnn; /* cuda_cudnn.c */
#endif

/* Output size of a layer along one dimension. */
static inline int w2l_out_dim(const w2l_layer *l, int in, int vertical) {
  int k = vertical ? l->kh : l->kw, s = vertical ? l->sh : l->sw, p = vertical ? l->ph : l->pw;
  int op = vertical ? l->oph : l->opw;
  return l->kind == W2L_CONVT ? (in - 1) * s - 2 * p + k + op : (in + 2 * p - k) / s + 1;
}

/* Debug hook: the same as fc_w2l_infer, but calls tap() with every named intermediate tensor
 * right after it is computed (NHWC, all batch samples, densely packed), for parity tests of the
 * layers. Tap names follow tools/wav2lip_ref.py: audio_emb, face_f0..face_f6 (..face_f7 in the
 * 256 model), dec{i}_out, dec{i}_cat, out_conv0, logits. */
typedef void (*fc_w2l_tap_fn)(const char *name, const float *nhwc, int n, int h, int w, int c,
                              void *user);
int fc_w2l_infer_tap(fc_w2l *m, const float *mel, const float *faces, float *out, int batch,
                     fc_w2l_tap_fn tap, void *user);

/* fc_w2l_load on a checkpoint's bytes data[0..size) rather than a file (the fuzzer, tests): the
 * same checks and errors; the buffer is only read during the call. name stands for the file in
 * error details (NULL: "(memory)"). */
fc_w2l *fc_w2l_load_mem(const void *data, size_t size, const char *name, const fc_w2l_params *p,
                        int *err);

/* The face encoder's part of the graph, for keeping its outputs per avatar frame (the CUDA
 * backend's feature cache): ops [0, face_ops) read only the face input and each other's
 * outputs, and every tensor of theirs that a later op reads is the second input of a
 * concatenation (a skip connection). skip[k] is the k-th such concatenation in op order, with
 * the offset of its tensor in one frame's feature record, in elements (each part rounded up to
 * 8 elements, so 16-bit vectors stay 16-byte aligned); frame_elems is the record's size. */
#define W2L_MAX_SKIPS 10
typedef struct w2l_face_split {
  int face_ops;
  int nskip;
  int skip_op[W2L_MAX_SKIPS];     /* the concatenation's op index */
  size_t skip_off[W2L_MAX_SKIPS]; /* elements into the record */
  size_t frame_elems;
} w2l_face_split;
/* Fills *fs for m: 1, or 0 with *fs zeroed when the graph does not split so. */
int w2l_face_split_of(const fc_w2l *m, w2l_face_split *fs);

/* Multiply-adds per frame of the loaded network's convolutions (for reports and tests). */
long long fc_w2l_macs_per_frame(const fc_w2l *m);

#endif
