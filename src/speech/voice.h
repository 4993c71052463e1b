/* Voices from TTS services: one interface, a provider per service, each speaking the service's
 * own wire protocol (libsoup), audio handed on as it arrives as 16 kHz mono float on the
 * engine's clock.
 *
 *   openai      POST {url}/audio/speech, response_format "pcm" (s16le, 24 kHz by default):
 *               OpenAI and the many local servers that copy it
 *   edge        Microsoft Edge's read-aloud WebSocket (SSML in, MP3 frames out, decoded by
 *               GStreamer as they come); LiveTalking's default voice
 *   gpt-sovits  GPT-SoVITS api_v2 POST {url}/tts, streaming WAV (rate from its header)
 *   cosyvoice   CosyVoice's FastAPI server: POST {url}/inference_zero_shot (multipart, the
 *               reference WAV uploaded) or /inference_sft (a built-in speaker); raw s16le
 *   fish        fish-speech POST {url}/v1/tts, streaming (raw s16le at 44.1 kHz, or WAV)
 *
 * The embedded espeak-ng voice (facecast/tts.h) is not a provider here: it also gives phoneme
 * timing, and its callers use it directly; it is what they fall back to.
 *
 * Threads and calls: a fc_voice is immutable after create and may be used from any number of
 * threads at once. fc_voice_speak is synchronous: it runs the request on a GMainContext of its
 * own (pushed as the calling thread's default for the call), calls `audio` from the calling
 * thread as pieces arrive, and returns when the service is done, failed, timed out or
 * `cancel` was cancelled (from any thread: the connection is closed at once). The API key is
 * never logged. */
#ifndef FC_SPEECH_VOICE_H
#define FC_SPEECH_VOICE_H

#include <gio/gio.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fc_voice fc_voice;

typedef struct fc_voice_params {
  const char *provider;  /* openai | edge | gpt-sovits | cosyvoice | fish (also LiveTalking's
                          * names: edgetts, fishtts) */
  const char *url;       /* the service; NULL = its usual local address (edge: Microsoft's) */
  const char *api_key;   /* bearer token (openai, fish); NULL = none */
  const char *model;     /* openai: NULL = "tts-1" */
  const char *voice;     /* default voice / speaker; NULL = the provider's */
  const char *ref_audio; /* default reference: a WAV here (cosyvoice; fish, unless it names a
                          * reference id), a path on the server (gpt-sovits) */
  const char *ref_text;  /* what the reference audio says */
  const char *lang;      /* gpt-sovits text_lang and prompt_lang; NULL = "auto" */
  int rate;              /* rate of headerless PCM; 0 = the provider's (24000, fish 44100) */
  int timeout_s;         /* connect, and between two pieces of audio; 0 = 10 */
  const char *edge_version; /* edge's Sec-MS-GEC-Version; NULL = "1-143.0.3650.75" */
} fc_voice_params;

/* One utterance; NULL fields take the provider's defaults. */
typedef struct fc_voice_req {
  const char *text;
  const char *voice, *emotion, *ref_audio, *ref_text;
  int ref_local; /* ref_audio may be read from this machine's disk (the caller checked where it
                  * lies); else it is only a name for the service (a path on it, an id) */
} fc_voice_req;

/* Audio as it arrives (16 kHz mono float, borrowed). Non-zero stops the call (it returns
 * FC_ECANCELED). */
typedef int (*fc_voice_audio_fn)(void *user, const float *pcm, size_t n);

/* FC_EINVAL (one-line detail) for an unknown provider or a URL that is not http(s)/ws(s). */
fc_voice *fc_voice_create(const fc_voice_params *p, int *err);
void fc_voice_destroy(fc_voice *v);
const char *fc_voice_name(const fc_voice *v);  /* the provider */
const char *fc_voice_url(const fc_voice *v);   /* the service's address, for logs */
/* What a request's reference audio is to the provider: */
enum {
  FC_VOICE_REF_NAME,   /* a name for the service only (gpt-sovits: a path on its machine) */
  FC_VOICE_REF_FILE,   /* a file here, uploaded (cosyvoice) */
  FC_VOICE_REF_EITHER, /* a file here when it is a path, else a name (fish: a reference id) */
};
int fc_voice_ref_kind(const fc_voice *v);
/* The voice used when a request names none (NULL: the provider decides). */
const char *fc_voice_default(const fc_voice *v);

/* Speaks r->text. 0 when the service finished; FC_ECANCELED (cancelled, or `audio` said
 * stop); FC_EREMOTE (unreachable, HTTP error, timeout, garbage) or FC_EINVAL (a request the
 * provider cannot make, such as no reference audio) with a one-line detail. Audio already
 * handed on stays handed on. */
int fc_voice_speak(fc_voice *v, const fc_voice_req *r, GCancellable *cancel,
                   fc_voice_audio_fn audio, void *user);

/* ---- the wire formats, pure (tests, the fuzzer) ---- */

/* Signed 16-bit PCM in pieces cut anywhere: a WAV header at the start (RIFF, with the zero or
 * 0xFFFFFFFF sizes streaming servers write) gives rate and channels, else raw at the default
 * rate, mono. Samples come out (mono, int16) with their rate through `out`. */
typedef struct fc_pcm_reader {
  int rate, channels, state; /* state: 0 sniffing, 1 in a WAV header, 2 samples */
  uint8_t hdr[512];
  size_t n_hdr;
  uint8_t carry[16]; /* a partial sample frame */
  size_t n_carry;
  int16_t buf[2048];
} fc_pcm_reader;
void fc_pcm_reader_init(fc_pcm_reader *r, int default_rate);
/* FC_EREMOTE for a WAV header that is not 16-bit PCM or is malformed; out's non-zero
 * return is passed back. */
int fc_pcm_reader_feed(fc_pcm_reader *r, const uint8_t *data, size_t n,
                       int (*out)(void *user, const int16_t *pcm, size_t n, int rate),
                       void *user);

/* Edge: Sec-MS-GEC for a Unix time (64 upper-case hex digits and a NUL). */
void fc_edge_gec(int64_t unix_s, char out[65]);
/* The SSML of one utterance (text XML-escaped, control characters blanked; voice given as a
 * short name such as zh-CN-YunxiaNeural is expanded as Edge does). g_free it. */
char *fc_edge_ssml(const char *text, const char *voice);
/* A binary frame: its MP3 payload (*audio, *n; n = 0 for the empty closing frame). FC_EREMOTE
 * for a malformed frame. */
int fc_edge_binary(const uint8_t *data, size_t size, const uint8_t **audio, size_t *n);
/* A text frame's Path header into path (NUL-terminated, cut to cap). FC_EREMOTE if none. */
int fc_edge_text_path(const char *data, size_t size, char *path, size_t cap);

/* The message of a service's JSON error body ({"error":{"message"}}, {"message"}, {"detail"}),
 * else the body's first line; g_free it. */
char *fc_voice_error_text(const char *body, size_t n);

#endif
