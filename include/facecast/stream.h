/* A talking stream: speech in, composed frames out, on one sample clock.
 *
 * The stream holds a FIFO of pending speech whose head is always the next frame's first
 * sample. Frames are pulled one at a time (FFmpeg-style receive): each takes the next 640
 * samples (16 kHz) off the FIFO, so frame i covers samples [640·i, 640·(i+1)) of the stream's
 * clock and its video pts is i/25 s. Internally frames are produced in batches: features for up
 * to `batch` frames, one lip-sync call, compositing into a ring of I420 buffers; nothing is
 * allocated per frame.
 *
 * Offline (render, bulk jobs) pushes everything, ends the input and pulls as fast as the sink
 * takes frames. Live sessions pull at their pacer's rate; when no speech is pending the pacer
 * takes an idle frame instead (the avatar at rest, silence), which advances the clock without
 * lip-sync work, and speech pushed later starts at the next frame.
 *
 * Utterances (fc_stream_push_speech) are padded to whole frames and numbered; frames report
 * when an utterance's first and last samples go out, so "speech started/ended" events can be
 * sent when the audio is actually played. One thread drives a stream at a time; the caller
 * serialises pushes with pulls. */
#ifndef FACECAST_STREAM_H
#define FACECAST_STREAM_H

#include "facecast/lipsync.h"
#include "facecast/tts.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fc_stream fc_stream;

struct fc_frame_info;

typedef struct fc_stream_params {
  const fc_avatar *avatar; /* borrowed; outlives the stream */
  fc_lipsync *lipsync;     /* borrowed; outlives the stream */
  int batch;               /* frames per lip-sync call; 0 = 16 */
  size_t max_pending;      /* most samples of speech that may wait; 0 = 10 minutes */
  /* Optional: runs the lip-sync calls instead of fc_lipsync_run (a server routes them through
   * its device scheduler, which batches the frames of many sessions). info[i] is the stream
   * frame of reqs[i]. Same contract as fc_lipsync_run; called from the thread that pulls. */
  int (*run)(void *user, const fc_lipsync_req *reqs, fc_patch *out, const struct fc_frame_info *info,
             int n);
  void *run_user;
} fc_stream_params;

typedef struct fc_frame_info {
  int64_t index;        /* frame number on the stream's clock */
  int speaking;         /* the frame carries pending speech (not an idle frame) */
  uint32_t utt_started; /* id of the utterance whose first sample is in this frame, or 0 */
  uint32_t utt_ended;   /* id of the utterance whose last sample is in this frame, or 0 */
  int still;            /* an idle frame showing the same picture as the frame before it (a
                         * photo at rest): an output may send it as "unchanged" */
} fc_frame_info;

fc_stream *fc_stream_create(const fc_stream_params *p, int *err);
void fc_stream_destroy(fc_stream *s);

/* Queues a whole utterance (TTS output, an uploaded file): copied, padded with silence to whole
 * frames; phoneme samples are relative to pcm[0]. *id (may be NULL) receives its number (> 0).
 * FC_EAGAIN when it would exceed max_pending (the queue's bound), FC_EINVAL after the end. */
int fc_stream_push_speech(fc_stream *s, const float *pcm, size_t n, const fc_phoneme *ph,
                          size_t n_ph, uint32_t *id);

/* Appends streamed audio (a microphone): no padding, no utterance; frames are produced as soon
 * as 640 samples are there. Same bound and errors as push_speech. */
int fc_stream_push_audio(fc_stream *s, const float *pcm, size_t n);

/* Streamed speech (a TTS service's audio as it arrives): opens an utterance that starts on a
 * frame boundary and takes every fc_stream_push_audio until fc_stream_close_speech, which pads
 * it to a whole frame. Its start is reported like push_speech's, its end only once closed (a
 * gap in the audio meanwhile is idle frames, not its end). The mouth follows the audio (no
 * phonemes; a neural backend's mel windows look 200 ms ahead, or to the end once closed).
 * Opening, or push_speech, closes one still open; interrupt drops it. */
int fc_stream_open_speech(fc_stream *s, uint32_t *id);
void fc_stream_close_speech(fc_stream *s);

/* No more speech will come: the last partial frame is padded, then FC_EEOF. */
void fc_stream_end(fc_stream *s);

/* Drops all pending speech and every frame produced but not yet taken. Returns the id of the
 * utterance that was cut (its end will never be reported), or 0. */
uint32_t fc_stream_interrupt(fc_stream *s);

/* Frames that pending speech will still make (produced-but-not-taken ones included). */
int64_t fc_stream_pending_frames(const fc_stream *s);
/* Whether fc_stream_next_frame would give a frame now (1) or answer FC_EAGAIN/FC_EEOF (0):
 * pending frames minus those that wait for more streamed audio (a mel window looks 200 ms
 * ahead). */
int fc_stream_producible(const fc_stream *s);

/* Frames taken so far plus fc_stream_pending_frames: the length of an offline stream. */
int64_t fc_stream_frames_total(const fc_stream *s);

/* Produces the next speech frame: info, I420 pixels and its 640 samples of PCM (both borrowed,
 * valid until the next call). Returns 0, FC_EAGAIN when no full frame of speech is pending and
 * the input has not ended, FC_EEOF after the last frame, or an error. */
int fc_stream_next_frame(fc_stream *s, fc_frame_info *info, const uint8_t **i420,
                         const int16_t **pcm);

/* What the picture of the last fc_stream_next_frame holds against its avatar's still picture
 * (image.h; base: the frame's own picture in memory, NULL for a pack, whose frames are
 * tiles), so that a consumer keeping copies can update them by rectangles. Valid as long as
 * that picture. */
fc_i420_delta fc_stream_frame_delta(const fc_stream *s);

/* Live only, when next_frame said FC_EAGAIN: the next frame at rest, advancing the clock by one
 * frame. Pending partial audio stays at the head of the FIFO. At rest a photo avatar shows its
 * closed-mouth picture (made once) with silence, a recorded avatar its own frames as recorded
 * with silence, and a playing action clip its frames with its audio. Pixels and PCM are
 * borrowed, valid until the next idle_frame call on this stream. */
int fc_stream_idle_frame(fc_stream *s, fc_frame_info *info, const uint8_t **i420,
                         const int16_t **pcm);

/* Plays the avatar's action clip `clip` (fc_avatar_find_clip) in the idle frames from the next
 * one on, once, with its audio; speech cuts it short. clip < 0 stops one. FC_EINVAL for a clip
 * the avatar does not have. */
int fc_stream_play_clip(fc_stream *s, int clip);
/* The clip playing, or -1. */
int fc_stream_clip_playing(const fc_stream *s);

#ifdef __cplusplus
}
#endif
#endif
