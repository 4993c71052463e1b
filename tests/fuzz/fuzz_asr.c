/* libFuzzer: what a speech recognition service may answer (src/converse/asr.c) and what a
 * microphone may send the VAD. The first byte picks: an OpenAI transcription body (as JSON, or
 * as plain text), a FunASR result message, or the rest as PCM16 through the VAD in pieces the
 * second byte sizes (events must alternate start, end, start... at rising positions within
 * what was fed). Refusals are FC_EREMOTE with a detail; transcripts valid UTF-8. */
#include "converse/asr.h"
#include "converse/vad.h"
#include "fuzz.h"

#include <glib.h>

static void text_ok(int err, char *t) {
  if (err) {
    if (err != FC_EREMOTE || !fc_error_detail(err)[0] || t) __builtin_trap();
  } else if (!t || !g_utf8_validate(t, -1, NULL)) {
    __builtin_trap();
  }
  g_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int which = data[0] % 4;
  size_t piece = data[1] * 7 + 1;
  data += 2, size -= 2;
  char *t = NULL;
  if (which == 0 || which == 1) {
    text_ok(fc_asr_parse_openai((const char *)data, size, which == 0, &t), t);
  } else if (which == 2) {
    int final = -1;
    int err = fc_asr_parse_funasr((const char *)data, size, &t, &final);
    if (!err && final != 0 && final != 1) __builtin_trap();
    text_ok(err, t);
  } else {
    fc_vad_params p = {.onset_ms = 20 + (int)(piece % 100), .hangover_ms = 100 + (int)(size % 400)};
    fc_vad *v = fc_vad_create(&p);
    const int16_t *pcm = (const int16_t *)data; /* (libFuzzer's buffers are aligned) */
    size_t n = size / 2, at = 0;
    int speaking = 0;
    int64_t last = -1;
    while (at < n) {
      size_t used, k = n - at < piece ? n - at : piece;
      int64_t when;
      int ev = fc_vad_feed(v, pcm + at, k, &used, &when);
      if (!used && k) __builtin_trap(); /* progress */
      at += used;
      if (!ev) continue;
      if ((ev == FC_VAD_START) == speaking || when < last || when > (int64_t)at) __builtin_trap();
      speaking = ev == FC_VAD_START;
      last = when;
      if (speaking != fc_vad_speaking(v)) __builtin_trap();
    }
    if (fc_vad_position(v) != (int64_t)n) __builtin_trap();
    fc_vad_destroy(v);
  }
  return 0;
}
