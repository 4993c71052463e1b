/* libFuzzer: the Wav2Lip loader (src/lipsync/wav2lip/model.c) on mutated checkpoints of both
 * variants (96×96 and wav2lip256, told apart by the file's keys), in every format the checkpoint
 * reader takes. Seeds: tests/fuzz/corpus/w2l (tools/gen_w2l_fuzz_seeds.py: the full topologies
 * with two channels a layer).
 *
 * What it checks beyond the checkpoint target: the graph builder's key and shape checks, the
 * variant choice, the sanity bounds (a header that asks for gigabytes must be refused, not
 * allocated: libFuzzer's malloc limit and ASan see it), BatchNorm folding and the buffer plan.
 * A model that loads runs one frame on "cpu-ref" (max_batch 1), so a plan whose slots are too
 * small for what the layers write shows as an ASan overflow. A refusal must be an input error
 * with a detail (fuzz.h).
 *
 * Speed: most mutations that still load only change weight values, and a 256 frame costs about
 * a second under ASan, which would hold the target to a few inputs a second. What the frame can
 * break on (the buffer plan, the loops' bounds) depends only on the variant and the channel
 * counts, not on the values (float arithmetic has no undefined behaviour here), so the frame
 * runs once per distinct layer shape list in this process: an input that crashes also crashes
 * when replayed alone, where its shapes are new. Networks past a few hundred million
 * multiply-adds a frame are loaded but not run: the plain C reference would take minutes under
 * ASan (the fuzzer's timeout), and the plan is the same code at any width. */
#include "lipsync/wav2lip/w2l_internal.h"
#include "lipsync/wav2lip/wav2lip.h"

#include "fuzz.h"

#define MAX_RUN_MACS 400000000LL

/* FNV-1a over what the plan and the loops depend on. */
static uint64_t shape_hash(const fc_w2l *m) {
  uint64_t h = 1469598103934665603ull;
  int v[3 + W2L_NLAYERS * 2];
  int n = 0;
  v[n++] = m->face, v[n++] = m->nlayers, v[n++] = m->ntensors;
  for (int i = 0; i < m->nlayers; i++) v[n++] = m->layers[i].cin, v[n++] = m->layers[i].cout;
  const unsigned char *b = (const unsigned char *)v;
  for (size_t i = 0; i < (size_t)n * sizeof *v; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h ? h : 1;
}

/* Whether h was seen before in this process (a set of 64 K hashes; when full, never). */
static int seen(uint64_t h) {
  static uint64_t set[1 << 16];
  for (size_t i = h & 0xffff, k = 0; k < 1 << 16; i = (i + 1) & 0xffff, k++) {
    if (set[i] == h) return 1;
    if (!set[i]) {
      set[i] = h;
      return 0;
    }
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static float mel[FC_W2L_MEL_H * FC_W2L_MEL_W];
  static unsigned char crop[FC_W2L_FACE_256 * FC_W2L_FACE_256 * 3], out[sizeof crop];
  if (!mel[1]) {
    for (int i = 0; i < FC_W2L_MEL_H * FC_W2L_MEL_W; i++) mel[i] = (float)(i % 65) / 8.0f - 4.0f;
    for (size_t i = 0; i < sizeof crop; i++) crop[i] = (unsigned char)(i * 7 + (i >> 9));
  }
  int err;
  fc_w2l_params p = {.device = "cpu-ref", .max_batch = 1};
  fc_w2l *m = fc_w2l_load_mem(data, size, "fuzz.pth", &p, &err);
  if (!m) {
    fc_fuzz_refusal(err);
    return 0;
  }
  int s = fc_w2l_face_size(m);
  if (s != FC_W2L_FACE && s != FC_W2L_FACE_256) __builtin_trap();
  if (fc_w2l_macs_per_frame(m) <= MAX_RUN_MACS && !seen(shape_hash(m))) {
    memset(out, 0, (size_t)s * s * 3);
    if (fc_w2l_infer_u8(m, mel, crop, out, 1) != FC_OK) __builtin_trap();
    if (fc_w2l_infer_u8(m, mel, crop, out, 2) != FC_EINVAL) __builtin_trap(); /* max_batch 1 */
  }
  fc_w2l_destroy(m);
  return 0;
}
