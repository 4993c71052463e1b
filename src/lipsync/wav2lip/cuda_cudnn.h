/* Private to the Wav2Lip "cuda" backend: its state, shared by cuda_cudnn.c (set-up, inference,
 * graphs) and cuda_plan.c (a batch size's plan: descriptors and the algorithm search). See
 * cuda_cudnn.c's note for the design. */
#ifndef FC_W2L_CUDA_CUDNN_H
#define FC_W2L_CUDA_CUDNN_H

#include "lipsync/wav2lip/algo_cache.h"
#include "lipsync/wav2lip/w2l_cuda.h"
#include "lipsync/wav2lip/w2l_internal.h"

#include <cuda_runtime.h>
#include <cudnn.h>

#define WS_LIMIT ((size_t)2 << 30) /* largest workspace an algorithm may ask for */
#define NALGO 8
/* The face input is stored with 8 channels (6 and two zeros): tensor-core convolutions want
 * channel counts in multiples of 8, and the first layer on 6 was the slowest layer per FLOP. */
#define FACE_CP 8

typedef struct clayer {
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnTensorDescriptor_t bd_dt, bd_f32; /* bias [1][cout][1][1] in the data type / fp32 */
  void *w;                               /* KRSC, data type */
  float *b32;                            /* fp32 bias */
  void *bdt;                             /* bias in the data type (== b32 for fp32) */
  int fused;                             /* 0 untried, 1 bias in dt, 2 fp32 bias, -1 unfused */
} clayer;

typedef struct cop {
  cudnnTensorDescriptor_t x, y;
  int algo;
  cudnnMathType_t math;
  int dense; /* on w2l_cuda_dense instead of cuDNN (a whole-input convolution, small batch) */
} cop;

typedef struct cplan {
  int batch;
  int warm;                           /* a whole pass ran once eagerly */
  int warm_cached;                    /* a pass without the face encoder did */
  double search_s;                    /* seconds its algorithm search took */
  int passes;                         /* eager passes so far (W2L_CUDA_TIMING) */
  cudaGraphExec_t graph[W2L_IO_COUNT]; /* per I/O kind, captured on the second call */
  int nograph[W2L_IO_COUNT];          /* capture failed: stay eager */
  cop ops[W2L_MAX_OPS];
  struct cplan *next;
} cplan;

typedef struct cstate {
  int dev, dtype;
  size_t esz;
  cudnnDataType_t dt;
  cudaStream_t st;
  cudnnHandle_t h;
  cudnnActivationDescriptor_t relu;
  clayer layers[W2L_NLAYERS];
  int nlayers;
  void **slots;
  int nslots;
  /* staging, sized for the float I/O; the byte I/O uses the same buffers: in = faces (floats
   * or bytes) at 0, then mel (floats) at mel_off bytes; out = floats or bytes */
  char *d_in, *h_in;
  void *d_out, *h_out;
  size_t mel_off;
  void *ws;
  size_t ws_size;
  /* the audio encoder runs on a second lane (stream, cuDNN handle, workspace) beside the face
   * encoder: they are independent, and at small batches the critical path is the op count */
  cudaStream_t st2;
  cudnnHandle_t h2;
  void *ws2;
  cudaEvent_t fork, join;
  int audio_first, audio_last; /* op range of the audio encoder; -1: none (one lane) */
  void *abuf[2];               /* its activations, ping-pong: model.c's slot plan assumes one
                                * op at a time, so the concurrent lane must not use its slots */
  void *tp[W2L_MAX_TENSORS];   /* where each tensor lives on the device */
  void *face;    /* the face input, NHWC with FACE_CP channels (not a model.c slot) */
  int face_op;   /* the op that reads it */
  float *head_w; /* the last layer (1x1, -> 3 channels) as [3][cin] fp32, for w2l_cuda_head */
  cplan *plans;
  size_t free0, peak; /* free device memory before load; peak held since (bytes) */
  w2l_ccache *cc;     /* fc_w2l_composite's device state, made on its first call */
  /* the face-feature cache (cuda_composite.c): the face encoder's split (model.c; face_ops 0:
   * none), each op's skip part + 1 (0: not a concatenation of one), the store kernel's parts,
   * and whether it is wanted (fc_w2l_set_feature_cache; applied when cc is made) */
  w2l_face_split fsplit;
  int skip_part[W2L_MAX_OPS];
  w2l_skip_parts parts;
  int feat_want;
  long feat_mb; /* W2L_CUDA_FEATURE_MB, read at load: MiB, -1 "auto" (unset), 0 no cache */
  /* diagnostics from the environment, read at load: W2L_CUDA_NOFUSE=1 never uses the fused
   * cuDNN call; W2L_CUDA_FIXED_ALGO=1 takes IMPLICIT_PRECOMP_GEMM / BWD_DATA_ALGO_1 instead of
   * timing the algorithms; W2L_CUDA_DEBUG=1 prints each op's algorithm and output range */
  int nofuse, fixed_algo, debug, nograph, timing, profile;
  cudaEvent_t ev[W2L_MAX_OPS + 1]; /* W2L_CUDA_TIMING */
  w2l_algo_cache *algos; /* the algorithms chosen so far, from and to the disk */
  /* the first layer (face_op) by our own kernel (w2l_conv_first.cu) instead of cuDNN: fp16,
   * unless W2L_CUDA_OWN=0; its weights in that kernel's layout */
  int own_first;
  void *first_w;
  /* whole-input convolutions at batches up to W2L_DENSE_MAX_BATCH on w2l_cuda_dense: 0 none
   * (W2L_CUDA_DENSE=0, W2L_CUDA_OWN=0), 1 the 1x1 ones (default), 2 the 3x3 ones too
   * (W2L_CUDA_DENSE=all); n_dense: ops planned on it, over every plan */
  int own_dense, n_dense;
  /* the last three ops (the concat before the output block, its 3x3 convolution, the head) as
   * one kernel of ours (w2l_tail.cu): fp16, unless W2L_CUDA_TAIL=0 or W2L_CUDA_OWN=0; tail_op
   * is the concat's op index, tail_w the convolution's weights in that kernel's layout */
  int own_tail, tail_op;
  void *tail_w;
  /* a concat and the stride-2 ConvT reading it (the 96 network's 48x48 -> 96x96 one) as one
   * kernel of ours (w2l_convt.cu): fp16, with W2L_CUDA_CONVT=1 (opt-in); convt_op is
   * the concat's op index, convt_w the ConvT's weights in that kernel's layout */
  int own_convt, convt_op;
  void *convt_w;
  double search_s;       /* seconds spent in cudnnFind* */
  int find_plain;        /* W2L_CUDA_FIND=plain: cudnnFind* (cuDNN's own buffers), not *Ex */
  void *search_ws;       /* cudnnFind*Ex's workspace, while a plan is built */
  size_t search_ws_size;
  int n_cached, n_searched; /* convolutions set up from the cache / by a search */
  int n_inherited;          /* ... as at batch search_upto (fc_w2l_params) */
  int search_upto;
  int retime;            /* small batches: Find's close candidates timed again (cuda_plan.c) */
  int n_retimed, n_retimed_changed; /* ... convolutions, and those whose pick it changed */
  int save_failed;       /* the cache file could not be written (said once) */
} cstate;

/* A failed cuDNN call as an fc error: FC_ENOMEM for an allocation, FC_EUNSUPPORTED otherwise. */
int w2l_dnn_err(cudnnStatus_t s, const char *what);
#define DNN(call, what)                                                                            \
  do {                                                                                             \
    cudnnStatus_t s_ = (call);                                                                     \
    if (s_ != CUDNN_STATUS_SUCCESS) return w2l_dnn_err(s_, what);                                  \
  } while (0)

/* Raises s->peak to what the device holds now beyond what it held before the load (cuda_cudnn.c). */
void w2l_cudnn_note_memory(cstate *s);
/* Fills plan p (p->batch set, ops zeroed): each convolution's descriptors and algorithm, from
 * the cache, as at s->search_upto, or timed; grows the workspaces to the largest need
 * (cuda_plan.c). On error p holds what was made: free_plan it. */
int w2l_cudnn_build_plan(cstate *s, const fc_w2l *m, cplan *p);
/* Writes the algorithm cache when it learned something; a failure is said once. */
void w2l_cudnn_save_algos(cstate *s);

#endif
