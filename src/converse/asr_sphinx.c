/* pocketsphinx (Debian's 0.8+5prealpha API): decoders over one configuration, kept and reused
 * (loading one reads ~40 MB of model: a few hundred ms), at most max_decoders at once. Its own
 * logging goes nowhere (err_set_logfp(NULL)): facecast logs what matters. */
#include "converse/asr_internal.h"
#include "facecast/error.h"

#include <sphinxbase/err.h>
#include <pocketsphinx.h>
#include <string.h>

#define DEBIAN_MODEL "/usr/share/pocketsphinx/model/en-us"

int asr_sphinx_init(fc_asr *a) {
  const char *dir = a->model ? a->model : DEBIAN_MODEL;
  char *hmm = g_build_filename(dir, "en-us", NULL), *lm = g_build_filename(dir, "en-us.lm.bin", NULL),
       *dict = g_build_filename(dir, "cmudict-en-us.dict", NULL);
  int err = FC_OK;
  if (!g_file_test(hmm, G_FILE_TEST_IS_DIR) || !g_file_test(lm, G_FILE_TEST_IS_REGULAR) ||
      !g_file_test(dict, G_FILE_TEST_IS_REGULAR)) {
    err = fc_error_set(FC_ENOTFOUND, "pocketsphinx: no US English model in %s (Debian: apt install "
                                     "pocketsphinx-en-us)", dir);
  } else {
    err_set_logfp(NULL);
    a->config = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-lm", lm, "-dict", dict,
                            "-logfn", "/dev/null", NULL);
    if (!a->config) err = fc_error_set(FC_EINVAL, "pocketsphinx: the model in %s does not load", dir);
  }
  g_free(hmm);
  g_free(lm);
  g_free(dict);
  g_mutex_init(&a->lock);
  a->idle = g_ptr_array_new();
  if (!err) { /* one decoder now: a broken model shows at start, not at the first question */
    void *ps = asr_sphinx_take(a, &err);
    char *t = NULL;
    if (ps) { /* (idle decoders have no utterance open) */
      asr_sphinx_finish(ps, &t);
      asr_sphinx_give(a, ps);
    }
    g_free(t);
  }
  return err;
}

void asr_sphinx_free(fc_asr *a) {
  if (a->idle) {
    for (guint i = 0; i < a->idle->len; i++) ps_free(g_ptr_array_index(a->idle, i));
    g_ptr_array_free(a->idle, TRUE);
    g_mutex_clear(&a->lock);
  }
  if (a->config) cmd_ln_free_r(a->config);
}

void *asr_sphinx_take(fc_asr *a, int *err) {
  ps_decoder_t *ps = NULL;
  g_mutex_lock(&a->lock);
  if (a->idle->len) ps = g_ptr_array_steal_index_fast(a->idle, a->idle->len - 1);
  int room = ps || a->in_use < a->max_decoders;
  if (room) a->in_use++;
  g_mutex_unlock(&a->lock);
  if (!room) {
    *err = fc_error_set(FC_EBUSY, "pocketsphinx: all %d decoders are busy", a->max_decoders);
    return NULL;
  }
  if (!ps && !(ps = ps_init(a->config))) {
    g_mutex_lock(&a->lock);
    a->in_use--;
    g_mutex_unlock(&a->lock);
    *err = fc_error_set(FC_ENOMEM, "pocketsphinx: a decoder does not start");
    return NULL;
  }
  if (ps_start_utt(ps) < 0) {
    asr_sphinx_give(a, ps);
    *err = fc_error_set(FC_EINVAL, "pocketsphinx: an utterance does not start");
    return NULL;
  }
  return ps;
}

/* (the caller has ended the decoder's utterance) */
void asr_sphinx_give(fc_asr *a, void *ps) {
  g_mutex_lock(&a->lock);
  a->in_use--;
  g_ptr_array_add(a->idle, ps);
  g_mutex_unlock(&a->lock);
}

int asr_sphinx_feed(void *ps, const int16_t *pcm, size_t n) {
  if (n && ps_process_raw(ps, pcm, n, FALSE, FALSE) < 0)
    return fc_error_set(FC_EINVAL, "pocketsphinx: decoding failed");
  return FC_OK;
}

int asr_sphinx_finish(void *ps, char **text) {
  *text = NULL;
  if (ps_end_utt(ps) < 0) return fc_error_set(FC_EINVAL, "pocketsphinx: decoding failed");
  const char *h = ps_get_hyp(ps, NULL);
  *text = g_strdup(h ? h : "");
  return FC_OK;
}
