/* espeak-ng synthesis (see include/facecast/tts.h).
 *
 * espeak runs in synchronous mode: espeak_Synth() calls our callback with blocks of 22050 Hz PCM
 * and the events of each block, and returns when the utterance is done. We collect the PCM and
 * the PHONEME events (their audio_position is milliseconds from the utterance start), then
 * resample to 16 kHz with libsoxr and express each phoneme start in 16 kHz samples. One global
 * mutex covers espeak, because it is one global engine.
 */
#include "facecast/error.h"
#include "facecast/tts.h"

#include <ctype.h>
#include <espeak-ng/speak_lib.h>
#include <glib.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t espeak_lock = PTHREAD_MUTEX_INITIALIZER;
static int espeak_rate; /* espeak's output rate once initialised, 0 before, -1 if it failed */

typedef struct collect {
  int16_t *pcm;
  size_t n, cap;
  fc_phoneme *ph;
  size_t n_ph, cap_ph;
  int oom;
} collect;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q) return -1;
  *p = q;
  *cap = c;
  return 0;
}

static int on_synth(short *wav, int n, espeak_EVENT *ev) {
  collect *c = ev ? ev->user_data : NULL;
  if (!c) return 0;
  if (wav && n > 0 && !c->oom) {
    if (grow((void **)&c->pcm, &c->cap, c->n + (size_t)n, sizeof(int16_t))) c->oom = 1;
    else {
      memcpy(c->pcm + c->n, wav, (size_t)n * sizeof(int16_t));
      c->n += (size_t)n;
    }
  }
  for (; ev && ev->type != espeakEVENT_LIST_TERMINATED; ev++) {
    if (ev->type != espeakEVENT_PHONEME || c->oom) continue;
    if (grow((void **)&c->ph, &c->cap_ph, c->n_ph + 1, sizeof(fc_phoneme))) {
      c->oom = 1;
      continue;
    }
    fc_phoneme *p = &c->ph[c->n_ph++];
    p->sample = (int64_t)ev->audio_position * (FC_SAMPLE_RATE / 1000);
    memcpy(p->name, ev->id.string, 8);
    p->name[8] = 0;
  }
  return 0;
}

void fc_speech_free(fc_speech *s) {
  if (!s) return;
  fc_audio_free(&s->audio);
  free(s->ph);
  s->ph = NULL;
  s->n_ph = 0;
}

/* Language tags people use for Chinese mapped to espeak-ng's voice files (whose names are
 * not the tags: "zh" alone names no voice; through the English voice every character is read
 * out as "Chinese letter"). Mandarin is "cmn-Latn-pinyin": in espeak-ng 1.51 (Debian 12) the
 * plain "cmn" voice turns characters into pinyin and then reads that as English, tone digits
 * and all ("ni three hao three"); the pinyin voice reads the same pinyin as Mandarin, and
 * English words in the text still switch to English. */
#define MANDARIN "cmn-Latn-pinyin"
static const char *voice_file(const char *v) {
  static const struct {
    const char *tag, *file;
  } map[] = {{"zh", MANDARIN},      {"zh-cn", MANDARIN},    {"zh-hans", MANDARIN},
             {"zh-tw", MANDARIN},   {"zh-hant", MANDARIN},  {"zh-sg", MANDARIN},
             {"zh-cmn", MANDARIN},  {"cmn", MANDARIN},      {"mandarin", MANDARIN},
             {"chinese", MANDARIN}, {"zh_cn", MANDARIN},    {"zh_tw", MANDARIN},
             {"zh-hk", "yue"},      {"zh-yue", "yue"},      {"zh_hk", "yue"},
             {"cantonese", "yue"}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (g_ascii_strcasecmp(v, map[i].tag) == 0) return map[i].file;
  return v;
}

/* A cloud voice name as LiveTalking's pages send it ("zh-CN-YunxiaNeural", Edge's and Azure's
 * LANG-REGION-NameNeural): espeak speaks its language instead. buf gets "zh-CN". */
static const char *cloud_voice_language(const char *v, char *buf, size_t size) {
  const char *d1 = strchr(v, '-'), *d2 = d1 ? strchr(d1 + 1, '-') : NULL;
  size_t n = d2 ? (size_t)(d2 - v) : 0;
  if (!d2 || !g_str_has_suffix(v, "Neural") || n >= size) return NULL;
  memcpy(buf, v, n);
  buf[n] = 0;
  return buf;
}

/* No voice asked for: Mandarin when most of the letters are Han characters, else English. */
static const char *default_voice(const char *t) {
  size_t han = 0, letters = 0;
  for (const char *q = t; *q; q = g_utf8_next_char(q)) {
    gunichar c = g_utf8_get_char(q);
    if (g_unichar_isalpha(c)) letters++;
    if (g_unichar_get_script(c) == G_UNICODE_SCRIPT_HAN) han++;
  }
  return letters && han * 2 >= letters ? MANDARIN : "en";
}

int fc_tts_speak(const char *text, const fc_tts_params *p, fc_speech *out) {
  memset(out, 0, sizeof *out);
  const char *t = text;
  while (t && *t && isspace((unsigned char)*t)) t++;
  if (!t || !*t) return fc_error_set(FC_EINVAL, "empty text");
  if (!g_utf8_validate(t, -1, NULL)) return fc_error_set(FC_EINVAL, "the text is not UTF-8");
  char lang[16];
  const char *asked = p && p->voice && *p->voice ? p->voice : NULL;
  const char *cloud = asked ? cloud_voice_language(asked, lang, sizeof lang) : NULL;
  const char *voice = asked ? voice_file(cloud ? cloud : asked) : default_voice(t);

  int err = FC_OK;
  collect c = {0};
  pthread_mutex_lock(&espeak_lock);
  if (espeak_rate == 0) {
    espeak_rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, NULL,
                                    espeakINITIALIZE_PHONEME_EVENTS | 0x8000 /* don't exit */);
    if (espeak_rate <= 0) espeak_rate = -1;
    else espeak_SetSynthCallback(on_synth);
  }
  if (espeak_rate < 0) {
    err = fc_error_set(FC_ETTS, "espeak-ng could not start (is espeak-ng-data installed?)");
    goto unlock;
  }
  /* "de-DE" where espeak has "de": a two- or three-letter language without its region (not
   * any prefix: "klingon-xx" is no voice, though espeak has a "klingon") */
  char base[4] = "";
  const char *dash = strchr(voice, '-');
  size_t bl = dash ? (size_t)(dash - voice) : 0;
  if ((bl == 2 || bl == 3) && strspn(voice, "abcdefghijklmnopqrstuvwxyz") == bl)
    g_strlcpy(base, voice, bl + 1);
  if (espeak_SetVoiceByName(voice) != EE_OK && !(*base && espeak_SetVoiceByName(base) == EE_OK)) {
    err = fc_error_set(FC_EINVAL, "unknown voice '%s' (try en, en-us, de, fr, es, zh …)",
                       p && p->voice ? p->voice : voice);
    goto unlock;
  }
  espeak_SetParameter(espeakRATE, p && p->rate_wpm > 0 ? p->rate_wpm : 175, 0);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  /* Fuzzing builds speak at most the first 40 bytes (at a character boundary): the routes are
   * what is fuzzed, and seconds of espeak and resampling per long text (under ASan) held the
   * http target to tens of inputs a second. */
  char short_text[48];
  if (strlen(text) > 40) {
    size_t k = 40;
    while (k && ((unsigned char)text[k] & 0xC0) == 0x80) k--;
    memcpy(short_text, text, k);
    short_text[k] = 0;
    text = short_text;
  }
#endif
  if (espeak_Synth(text, strlen(text) + 1, 0, POS_CHARACTER, 0, espeakCHARS_UTF8, NULL, &c) !=
          EE_OK ||
      espeak_Synchronize() != EE_OK) {
    err = fc_error_set(FC_ETTS, "espeak-ng failed to synthesise the text");
    goto unlock;
  }
unlock:
  pthread_mutex_unlock(&espeak_lock);
  if (err) goto fail;
  if (c.oom) {
    err = fc_error_set(FC_ENOMEM, "speech synthesis: out of memory");
    goto fail;
  }
  if (c.n == 0) {
    err = fc_error_set(FC_EINVAL, "the text produced no speech");
    goto fail;
  }
  fc_audio raw = {malloc(c.n * sizeof(float)), c.n, espeak_rate};
  if (!raw.samples) {
    err = fc_error_set(FC_ENOMEM, "speech synthesis: out of memory");
    goto fail;
  }
  for (size_t i = 0; i < c.n; i++) raw.samples[i] = c.pcm[i] / 32768.0f;
  err = fc_resample(&raw, FC_SAMPLE_RATE, &out->audio);
  fc_audio_free(&raw);
  if (err) goto fail;
  free(c.pcm);
  out->ph = c.ph;
  out->n_ph = c.n_ph;
  return FC_OK;
fail:
  free(c.pcm);
  free(c.ph);
  memset(out, 0, sizeof *out);
  return err;
}
