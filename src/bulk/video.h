/* Bulk videos in pieces (issue 17): a request's spec, its plan of shards, each shard rendered on
 * its own — by any thread of any process that sees the shared output folder — and the join.
 *
 * Why shards: a long script rendered as one stream uses one encoder and one stream's batches;
 * cut at sentence boundaries, its pieces render in parallel (here, or on other workers through
 * Redis) and are joined without re-encoding the video. The join is exact by construction: every
 * shard's audio is padded with silence to a whole number of frames (640 samples at 16 kHz), each
 * shard's video starts with a key frame and has exactly samples/640 frames, the video streams are
 * concatenated as they are and the joined audio (the shards' PCM end to end) is encoded once. So
 * the joined file has Σ frames, Σ samples, no gap and no repeated frame; captions (SRT/VTT, and
 * burned in when asked) come from the TTS timing of each sentence, offset by the shards before.
 *
 * Files a shard leaves in `dir`: its video and audio under names of the render's own
 * (shard-K.TOKEN.h264, .pcm), then shard-K.json, which names them, written under a temporary
 * name and renamed into place. So a shard whose .json exists is complete, and a shard rendered
 * twice at once (a worker thought dead was not) never mixes the two renders' files: the .json
 * renamed last names one whole render. fc_video_shards_remove removes every render's files.
 *
 * Everything here is thread-safe for distinct shards; nothing here knows HTTP or Redis. */
#ifndef FC_BULK_VIDEO_H
#define FC_BULK_VIDEO_H

#include "stream/lipsync_pool.h"
#include "facecast/avatar.h"

#include <stddef.h>
#include <stdint.h>

/* What a client asked for (POST /v1/videos' body, checked and normalised). */
typedef struct fc_video_spec {
  char *script;      /* the words to speak; NULL when audio */
  char *audio;       /* a file of speech (WAV/MP3/... as GStreamer decodes) in the shared
                      * folder, relative to it; NULL when script */
  char *avatar;      /* avatar id; NULL: the default */
  char *voice;       /* "voice" or "provider:voice"; NULL: the default */
  int width, height; /* output size (even); 0: the avatar's */
  uint32_t background_rgb; /* 0xRRGGBB around the avatar when the size is not the avatar's */
  char *background_image;  /* or an image (shared-folder relative), scaled to cover */
  int captions;            /* 1: burn captions in (SRT and VTT are written either way for a
                            * script) */
  char *callback_url;      /* NULL or http(s) URL */
} fc_video_spec;

/* Parses and checks a request body (JSON object). 0 and *out, or FC_EINVAL with a detail naming
 * the field ("size: expected WIDTHxHEIGHT, e.g. 1280x720"; a script over FC_VIDEO_MAX_SCRIPT
 * bytes: "script: longer than ..."). Members it does not know are ignored. */
#define FC_VIDEO_MAX_SCRIPT 200000
int fc_video_spec_parse(const char *json, size_t len, fc_video_spec **out);
/* The spec as normalised JSON (what a job stores; parse of it gives the same spec). g_free. */
char *fc_video_spec_json(const fc_video_spec *s);
void fc_video_spec_free(fc_video_spec *s);

/* The shards: sentence groups of the script (or frame-aligned ranges of the audio). */
typedef struct fc_video_plan fc_video_plan;
/* Cuts s into at most max_shards shards of at least min_shard_chars characters each (0: 200). */
int fc_video_plan_create(const fc_video_spec *s, int max_shards, int min_shard_chars,
                         fc_video_plan **out);
/* For an audio spec (fc_video_plan_create gives it one shard, its length being unknown): the
 * file (spec->audio under shared_dir) decoded and cut into at most max_shards frame-aligned
 * ranges of at least min_seconds (0: 20) each, every cut at the quietest frame within 2 s of
 * an even cut. Errors: those of decoding, named "audio: ...". */
int fc_video_plan_create_audio(const fc_video_spec *s, const char *shared_dir, int max_shards,
                               double min_seconds, fc_video_plan **out);
int fc_video_plan_shards(const fc_video_plan *p);
/* Shard k's sentences (script plans; 0 for audio) and sentence i of them (borrowed). */
int fc_video_plan_sentences(const fc_video_plan *p, int k);
const char *fc_video_plan_sentence(const fc_video_plan *p, int k, int i);
/* As JSON (stored with the job, so every worker renders the same cut) and back. g_free. */
char *fc_video_plan_json(const fc_video_plan *p);
int fc_video_plan_parse(const char *json, size_t len, fc_video_plan **out);
void fc_video_plan_free(fc_video_plan *p);

/* What a shard renders with: the process's lip-sync pool (the shard is a bulk client of it) and
 * its avatars. */
typedef struct fc_video_env {
  fc_lipsync_pool *pool;
  /* The avatar named id (NULL: the default), referenced; NULL and *err when unknown. */
  fc_avatar *(*avatar_get)(void *user, const char *id, int *err);
  void (*avatar_put)(void *user, fc_avatar *a);
  void *user;
  const char *shared_dir; /* where spec->audio and background_image are relative to */
  int encoder_threads;    /* x264 threads per shard (0: 1) */
  const char *preset;     /* x264 preset of the shards (NULL: bulk's default); every shard of a
                           * video must use the same one (the join checks) */
  /* Speaks one sentence with a voice of a TTS provider (spec->voice "provider:voice", e.g.
   * "edge:en-US-AriaNeural"): 16 kHz mono into out (phonemes optional: without them the mouth
   * follows the audio), 0 or an error with its detail; FC_EUNSUPPORTED for a provider it does
   * not have. NULL: only espeak's voices ("voice" or "espeak:voice"). Called from the shard's
   * thread, once per sentence (the audio's length is the sentence's caption time). */
  int (*speak)(void *user, const char *provider, const char *voice, const char *text,
               fc_speech *out);
} fc_video_env;

typedef void (*fc_video_progress_cb)(void *user, int64_t frames_done, int64_t frames_total);

/* Renders shard k of p into dir (its video, its PCM and its cues). cancel: checked before each
 * sentence's speech and at each lip-sync request (a nonzero value stops with FC_ECANCELED,
 * leaving no file). progress: after each frame, with the shard's frames done and its total.
 * 0 or an error with its detail. */
int fc_video_shard_render(const fc_video_spec *s, const fc_video_plan *p, int k,
                          const fc_video_env *env, const char *dir, const int *cancel,
                          fc_video_progress_cb progress, void *user);
/* The path of shard k's metadata in dir for ext "json" (written last: its frames, samples,
 * size, caption cues and the names of its video, an H.264 elementary stream that starts with a
 * key frame, and its audio, 16 kHz mono s16le of whole frames). g_free. */
char *fc_video_shard_file(const char *dir, int k, const char *ext);
/* Whether shard k's files are all in dir (complete). */
int fc_video_shard_done(const fc_video_plan *p, int k, const char *dir);
/* Joins every shard in dir into out_mp4 (and, for a script, out_srt / out_vtt beside it; NULL:
 * not written). Written under a temporary name, renamed into place. Reports what it made. */
typedef struct fc_video_result {
  int64_t frames;       /* video frames (25 fps) */
  int64_t samples;      /* audio samples (16 kHz) */
  double seconds;       /* frames / 25 */
} fc_video_result;
int fc_video_join(const fc_video_spec *s, const fc_video_plan *p, const char *dir,
                  const char *out_mp4, const char *out_srt, const char *out_vtt,
                  fc_video_result *res);
/* Removes the shards' files from dir. */
void fc_video_shards_remove(const fc_video_plan *p, const char *dir);

#endif
