/* Private to src/speech: what the providers share (voice.c) and the Edge provider's
 * entry (voice_edge.c). */
#ifndef FC_SPEECH_VOICE_INTERNAL_H
#define FC_SPEECH_VOICE_INTERNAL_H

#include "audio/resampler.h"
#include "media/audio_dec.h"
#include "speech/voice.h"

enum { VOICE_OPENAI, VOICE_EDGE, VOICE_SOVITS, VOICE_COSYVOICE, VOICE_FISH };

struct fc_voice {
  int kind;
  char *url, *shown, *auth, *model, *voice, *ref_audio, *ref_text, *lang, *edge_version;
  int rate, timeout_s;
};

/* One call's way out: bytes from the service → 16 kHz float → the caller's callback. */
typedef struct voice_out {
  const fc_voice *v;
  GCancellable *cancel;
  fc_voice_audio_fn audio;
  void *user;
  fc_pcm_reader pcm;
  fc_resampler *rs;
  int rs_rate;
  fc_audio_dec *mp3;
  size_t delivered; /* 16 kHz samples handed on */
  int stop;         /* the callback said stop */
} voice_out;

/* Raw or WAV PCM (the reader decides), MP3 (a GStreamer decoder made on first use). */
int voice_out_pcm(voice_out *o, const void *data, size_t n);
int voice_out_mp3(voice_out *o, const void *data, size_t n);
/* The end of the audio: flushes the resampler, finishes the decoder. */
int voice_out_finish(voice_out *o);

/* The Edge provider: voice is a name such as zh-CN-YunxiaNeural. */
int voice_edge_speak(const fc_voice *v, const char *voice, const char *text, voice_out *o);

#endif
