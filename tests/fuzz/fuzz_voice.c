/* libFuzzer: what a TTS service may send (src/speech/voice_wire.c). The first byte picks the
 * parser and where the rest is cut in two: streamed PCM/WAV (fed in the two pieces, then the
 * whole again a byte at a time: the samples must be the same), Edge's binary and text frames,
 * and an error body. Refusals are FC_EREMOTE with a detail (the service's fault); samples come
 * out at a sane rate; error texts are one line of valid UTF-8 of at most 200 characters. */
#include "fuzz.h"
#include "speech/voice.h"

#include <glib.h>

typedef struct {
  uint64_t sum;
  size_t n;
} tally;

static int count(void *user, const int16_t *pcm, size_t n, int rate) {
  tally *t = user;
  if (rate < 1000 || rate > 384000 || !n) __builtin_trap();
  for (size_t i = 0; i < n; i++) t->sum = t->sum * 31 + (uint16_t)pcm[i];
  t->n += n;
  return 0;
}

static void remote_refusal(int err) {
  if (err != FC_EREMOTE || !fc_error_detail(err)[0]) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  int which = data[0] & 3;
  data++, size--;
  size_t cut = size ? (size_t)data[0] % (size + 1) : 0;
  if (which == 0) {
    tally a = {0}, b = {0};
    fc_pcm_reader r;
    fc_pcm_reader_init(&r, 24000);
    int err = fc_pcm_reader_feed(&r, data, cut, count, &a);
    if (!err) err = fc_pcm_reader_feed(&r, data + cut, size - cut, count, &a);
    fc_pcm_reader_init(&r, 24000);
    int err1 = 0;
    for (size_t i = 0; i < size && !err1; i++) err1 = fc_pcm_reader_feed(&r, data + i, 1, count, &b);
    if (err) remote_refusal(err);
    if (err1) remote_refusal(err1);
    if (!err && !err1 && (a.n != b.n || a.sum != b.sum)) __builtin_trap(); /* cut-independent */
  } else if (which == 1) {
    const uint8_t *audio;
    size_t n;
    int err = fc_edge_binary(data, size, &audio, &n);
    if (err) remote_refusal(err);
    else if (n > size || (n && (audio < data || audio + n != data + size))) __builtin_trap();
  } else if (which == 2) {
    char path[64];
    int err = fc_edge_text_path((const char *)data, size, path, sizeof path);
    if (err) remote_refusal(err);
    else if (strlen(path) >= sizeof path) __builtin_trap();
  } else {
    char *m = fc_voice_error_text((const char *)data, size);
    if (!m || !g_utf8_validate(m, -1, NULL) || g_utf8_strlen(m, -1) > 200 || strchr(m, '\n'))
      __builtin_trap();
    g_free(m);
  }
  return 0;
}
