/* Voice activity detection for a microphone stream: where the user's speech starts and where it
 * ends, so that a speech segment can go to ASR and a barge-in can stop the avatar.
 *
 * Energy-based, on 20 ms frames of 16 kHz audio: a frame is voiced when its level stands
 * `margin_db` above the noise floor and above an absolute floor. The noise floor is the
 * quietest frame of the last 1.5 s (speech has dips between syllables and words; steady noise,
 * a fan or an open window, has none), so the stream is taken to start without speech. Speech
 * starts after `onset_ms` of voiced frames in a row (a click or a cough is shorter), and ends
 * after `hangover_ms` of unvoiced ones (the pause between words is shorter): endpointing. A
 * segment longer than `max_ms` is ended there. Pure and deterministic: no threads, no I/O, no
 * allocation after create. */
#ifndef FC_VAD_H
#define FC_VAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct fc_vad fc_vad;

typedef struct fc_vad_params {
  int onset_ms;     /* voiced audio before speech is declared; 0 = 80 */
  int hangover_ms;  /* silence that ends speech; 0 = 500 */
  int max_ms;       /* longest segment; 0 = 15000 */
  float margin_db;  /* above the noise floor; 0 = 12 */
  float floor_dbfs; /* never voiced below this level; 0 = -45 */
} fc_vad_params;

enum {
  FC_VAD_NONE = 0,
  FC_VAD_START = 1, /* speech began onset_ms ago: its first sample is at *at */
  FC_VAD_END = 2,   /* speech ended (hangover passed, or max_ms): its last voiced sample at *at */
};

fc_vad *fc_vad_create(const fc_vad_params *p);
void fc_vad_destroy(fc_vad *v);
/* Forgets the current speech (the floor is kept). */
void fc_vad_reset(fc_vad *v);

/* Feeds samples up to the first event: *used of the n were taken (all of them when the
 * result is FC_VAD_NONE; call again with the rest after an event), and an event's position in
 * samples since the stream's first sample is in *at. */
int fc_vad_feed(fc_vad *v, const int16_t *pcm, size_t n, size_t *used, int64_t *at);

/* Whether speech is in progress (started and not ended). */
int fc_vad_speaking(const fc_vad *v);
/* Samples fed so far. */
int64_t fc_vad_position(const fc_vad *v);

#endif
