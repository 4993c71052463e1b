/* Model checkpoints: the tensors of a PyTorch state dict or a safetensors file, read in C.
 *
 * What: fc_checkpoint_load() maps a file once and lists its tensors (name, dtype, shape);
 * fc_checkpoint_read_f32() converts one tensor to float32 on demand. The format is detected from
 * the bytes, not the file name:
 *   - zip archives written by torch.save (torch >= 1.6): <prefix>/data.pkl + <prefix>/data/<key>,
 *     STORED entries, ZIP64 included;
 *   - the legacy torch.save stream (torch < 1.6, or _use_new_zipfile_serialization=False), which
 *     is how the original 2020 Wav2Lip checkpoints were written;
 *   - safetensors.
 * For torch files the tensors are those of the top-level dict's "state_dict" entry when there is
 * one (Wav2Lip's {"state_dict", "optimizer", "global_step", "global_epoch"}), else those of the
 * top-level dict itself; everything else (optimizer state, counters, strings) is parsed and
 * ignored. A leading "module." (left by nn.DataParallel) is stripped from every name.
 *
 * Why: the lip-sync network's weights come as .pth files; loading them in C avoids a Python
 * conversion step. Pickle is a program, not a data format, so the reader is a tiny VM that runs
 * only the opcodes a state dict uses and resolves only the globals that rebuild tensors
 * (collections.OrderedDict, torch._utils._rebuild_tensor_v2/_rebuild_parameter and the
 * torch.*Storage classes): nothing is ever executed, and anything else is refused with
 * FC_EUNSUPPORTED and a detail naming the opcode or global.
 *
 * Safety: every length, index, offset and shape is checked against the bytes present; bad or
 * truncated files fail with FC_EFORMAT and a one-line detail (fc_error_detail), missing files
 * with FC_ENOTFOUND. Parser memory is bounded (stack, memo and heap limits in the pickle VM).
 *
 * Ownership: the checkpoint owns the mapping and the tensor table; fc_tensor_info pointers and
 * names stay valid until fc_checkpoint_destroy(). A loaded checkpoint is immutable: reading from
 * several threads at once is fine. The file is mapped, not copied, so it must not be truncated
 * while loaded (replacing it by rename is fine).
 */
#ifndef FACECAST_CHECKPOINT_H
#define FACECAST_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fc_dtype {
  FC_DT_F32,
  FC_DT_F16,
  FC_DT_BF16,
  FC_DT_F64,
  FC_DT_I64,
  FC_DT_I32,
  FC_DT_I16,
  FC_DT_I8,
  FC_DT_U8,
  FC_DT_BOOL
} fc_dtype;

#define FC_TENSOR_MAX_DIMS 8

typedef struct fc_tensor_info {
  const char *name; /* "module." already stripped; owned by the checkpoint */
  fc_dtype dtype;   /* as stored in the file */
  int ndim;         /* 0 for a scalar (numel 1) */
  int64_t shape[FC_TENSOR_MAX_DIMS];
} fc_tensor_info;

typedef struct fc_checkpoint fc_checkpoint;

/* Loads a checkpoint (format detected from the bytes). NULL on failure, with *err (if err is
 * not NULL) set to FC_ENOTFOUND, FC_EIO, FC_ENOMEM, FC_EFORMAT or FC_EUNSUPPORTED and a detail. */
fc_checkpoint *fc_checkpoint_load(const char *path, int *err);

/* Number of tensors, in the order the file lists them. */
int fc_checkpoint_count(const fc_checkpoint *c);

/* Tensor i (0 <= i < count), or NULL when i is out of range. */
const fc_tensor_info *fc_checkpoint_info(const fc_checkpoint *c, int i);

/* Index of the tensor with this name ("module." stripped), or -1. */
int fc_checkpoint_find(const fc_checkpoint *c, const char *name);

/* Number of elements of tensor i (1 for a scalar), or -1 when i is out of range. Every element
 * lies inside the file, but a broadcast view (stride 0) may have far more elements than its
 * storage: compare shapes with what the model expects before allocating. */
int64_t fc_checkpoint_numel(const fc_checkpoint *c, int i);

/* Converts tensor i to float32 in logical C order (storage offset and strides honoured; f16,
 * bf16, f64, integers and bool converted as torch's .float() does). count must equal the
 * tensor's element count, else FC_EINVAL. */
int fc_checkpoint_read_f32(const fc_checkpoint *c, int i, float *out, size_t count);

void fc_checkpoint_destroy(fc_checkpoint *c);

#ifdef __cplusplus
}
#endif
#endif
