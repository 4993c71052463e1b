/* Speech recognition: a speech segment (16 kHz mono) in, its transcript out, from one of
 *
 *   pocketsphinx  CMU PocketSphinx with Debian's US English model (pocketsphinx-en-us): the
 *                 embedded default, no download, decoding while the audio comes
 *   openai        POST {url}/audio/transcriptions (multipart WAV): OpenAI, faster-whisper and
 *                 whisper.cpp servers (speaches, whisper-server with an OpenAI path)
 *   funasr        the FunASR runtime's WebSocket protocol (offline mode: a JSON start, binary
 *                 PCM, {"is_speaking": false}, the "offline"/"2pass-offline" result); SenseVoice
 *
 * An fc_asr is configured once and shared by any number of threads. Each segment is an
 * fc_asr_stream: begin, feed (pocketsphinx decodes right there: call it from a worker, not an
 * event loop), finish (a remote provider sends the audio then). finish is synchronous and
 * bounded by the timeout; `cancel` ends it at once. Errors: FC_EREMOTE (the service failed:
 * one-line detail), FC_EBUSY (every pocketsphinx decoder is in use), FC_EINVAL (a segment
 * longer than the cap). Keys are never logged. */
#ifndef FC_ASR_H
#define FC_ASR_H

#include <gio/gio.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fc_asr fc_asr;
typedef struct fc_asr_stream fc_asr_stream;

typedef struct fc_asr_params {
  const char *provider;  /* pocketsphinx (NULL), openai, funasr */
  const char *url;       /* openai: base URL (http://127.0.0.1:8000/v1); funasr: ws(s)://… */
  const char *api_key;   /* openai: bearer token */
  const char *model;     /* openai: NULL = "whisper-1"; pocketsphinx: the model folder, NULL
                          * = Debian's /usr/share/pocketsphinx/model/en-us */
  const char *lang;      /* openai: ISO-639-1 language, NULL = the service detects it */
  int timeout_s;         /* connect, and waiting for the answer; 0 = 15 */
  int max_decoders;      /* pocketsphinx decoders at once; 0 = 4 */
  int max_seconds;       /* longest segment; 0 = 30 */
} fc_asr_params;

/* pocketsphinx: loads a decoder now, so that a missing model fails at start (FC_ENOTFOUND
 * naming the package). FC_EINVAL for an unknown provider or a bad URL. */
fc_asr *fc_asr_create(const fc_asr_params *p, int *err);
void fc_asr_destroy(fc_asr *a);
const char *fc_asr_name(const fc_asr *a);
const char *fc_asr_url(const fc_asr *a); /* "" for pocketsphinx */

fc_asr_stream *fc_asr_begin(fc_asr *a, int *err);
int fc_asr_feed(fc_asr_stream *s, const int16_t *pcm, size_t n);
/* The transcript (g_free it; "" when nothing was understood). */
int fc_asr_finish(fc_asr_stream *s, GCancellable *cancel, char **text);
void fc_asr_stream_free(fc_asr_stream *s);

/* ---- the services' answers, pure (tests, the fuzzer) ---- */

/* An OpenAI transcription body: {"text": …} (or plain text when is_json is 0). FC_EREMOTE for
 * an error body or anything else. */
int fc_asr_parse_openai(const char *body, size_t n, int is_json, char **text);
/* A FunASR result message: *final = 1 and the text for an "offline"/"2pass-offline" result,
 * 0 for a partial one ("online", "2pass-online"). FC_EREMOTE for anything else. */
int fc_asr_parse_funasr(const char *msg, size_t n, char **text, int *final);

#endif
