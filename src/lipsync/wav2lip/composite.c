/* fc_w2l_composite (wav2lip.h): job checks and the dispatch to a backend's own composite()
 * (the CUDA backend: everything on the GPU), else the host path — the C reference of the
 * arithmetic in w2l_composite.h around fc_w2l_infer_u8.
 *
 * Host path per batch: each job's background is asked for (written into its out buffer), its
 * face box resized to the model's S×S crop (S = 96 or 256), the batch runs through the network,
 * and each job's patch rect is blended in place over the background. The three batch buffers
 * are allocated on the first call and kept. */
#include "facecast/error.h"
#include "lipsync/wav2lip/w2l_composite.h"
#include "lipsync/wav2lip/w2l_internal.h"

#include <stdlib.h>
#include <string.h>

#define MEL (FC_W2L_MEL_H * FC_W2L_MEL_W)

static int check_job(const fc_w2l_job *j, int k) {
  if (!j->key || !j->rgb || !j->mel || !j->out || j->box_w < 2 || j->box_h < 2 ||
      j->box_w > 2048 || j->box_h > 2048 || (j->box_w | j->box_h | j->y0) & 1 || j->y0 < 0 ||
      j->y0 >= j->box_h || j->rgb_stride < 3 * j->box_w)
    return fc_error_set(FC_EINVAL, "wav2lip composite: job %d is malformed (box %dx%d, y0 %d)",
                        k, j->box_w, j->box_h, j->y0);
  return FC_OK;
}

static int host_batch(fc_w2l *m, const fc_w2l_job *jobs, int n, fc_w2l_base_fn base,
                      void *user, int first) {
  const int S = m->face;
  for (int k = 0; k < n; k++) {
    const fc_w2l_job *j = &jobs[k];
    int err = base(user, first + k);
    if (err) return err;
    uint8_t *crop = m->c_crops + (size_t)k * 3 * S * S;
    for (int y = 0; y < S; y++)
      for (int x = 0; x < S; x++)
        w2l_crop_px(j->rgb, j->rgb_stride, j->box_w, j->box_h, S, x, y, crop + 3 * (y * S + x));
    memcpy(m->c_mel + (size_t)k * MEL, j->mel, sizeof(float) * MEL);
  }
  int err = fc_w2l_infer_u8(m, m->c_mel, m->c_crops, m->c_out, n);
  if (err) return err;
  for (int k = 0; k < n; k++) {
    const fc_w2l_job *j = &jobs[k];
    const uint8_t *net = m->c_out + (size_t)k * 3 * S * S;
    for (int by = 0; by < (j->box_h - j->y0) / 2; by++)
      for (int bx = 0; bx < j->box_w / 2; bx++)
        w2l_paste_block(net, S, j->box_w, j->box_h, j->y0, bx, by, j->out, j->out);
  }
  return FC_OK;
}

int fc_w2l_composite(fc_w2l *m, const fc_w2l_job *jobs, int n, fc_w2l_base_fn base, void *user) {
  if (!m || !jobs || n < 1 || !base) return fc_error_set(FC_EINVAL, "wav2lip composite: bad arguments");
  for (int k = 0; k < n; k++) {
    int err = check_job(&jobs[k], k);
    if (err) return err;
  }
  if (!m->be->composite && !m->c_crops) {
    const size_t crop = (size_t)3 * m->face * m->face;
    m->c_crops = malloc((size_t)m->max_batch * crop);
    m->c_out = malloc((size_t)m->max_batch * crop);
    m->c_mel = malloc(sizeof(float) * m->max_batch * MEL);
    if (!m->c_crops || !m->c_out || !m->c_mel) {
      free(m->c_crops), free(m->c_out), free(m->c_mel);
      m->c_crops = m->c_out = NULL, m->c_mel = NULL;
      return fc_error_set(FC_ENOMEM, "wav2lip composite: out of memory");
    }
  }
  for (int i = 0; i < n; i += m->max_batch) {
    int b = n - i < m->max_batch ? n - i : m->max_batch;
    int err = m->be->composite ? m->be->composite(m->bstate, m, jobs + i, b, base, user, i)
                               : host_batch(m, jobs + i, b, base, user, i);
    if (err) return err;
  }
  return FC_OK;
}
