/* Private to src/converse: the ASR providers' shared state (asr.c) and the pocketsphinx half
 * (asr_sphinx.c), which is the only file that includes pocketsphinx's headers. */
#ifndef FC_ASR_INTERNAL_H
#define FC_ASR_INTERNAL_H

#include "converse/asr.h"

enum { ASR_SPHINX, ASR_OPENAI, ASR_FUNASR };

struct fc_asr {
  int kind;
  char *url, *shown, *auth, *model, *lang;
  int timeout_s;
  size_t max_samples;
  /* pocketsphinx: one configuration, decoders kept for reuse (a decoder is one thread's) */
  void *config;
  GMutex lock; /* idle, in_use */
  GPtrArray *idle;
  int in_use, max_decoders;
};

int asr_sphinx_init(fc_asr *a);
void asr_sphinx_free(fc_asr *a);
/* A decoder with an utterance started: from the idle ones, or a new one up to max_decoders
 * (FC_EBUSY past it). */
void *asr_sphinx_take(fc_asr *a, int *err);
void asr_sphinx_give(fc_asr *a, void *ps);
int asr_sphinx_feed(void *ps, const int16_t *pcm, size_t n);
int asr_sphinx_finish(void *ps, char **text);

#endif
