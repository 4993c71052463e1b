/* One shard of a bulk video (video.h): its sentences spoken (espeak, or a provider through the
 * env's hook; one call per sentence, so each sentence's timing is its caption's), a stream as a
 * bulk client of the lip-sync pool, every frame encoded straight to an H.264 elementary stream
 * (media/h264enc.h) and its audio appended to a raw PCM file, both under names of this render's
 * own; then the metadata file that names them and says the shard is done (files.c).
 *
 * The stream pads every utterance to whole frames (640 samples), so a shard's audio is a whole
 * number of frames by construction and frame i of the shard covers exactly its samples
 * [640·i, 640·(i+1)). The encoder starts with an IDR picture and never looks past the shard
 * (no B-frames), so its stream decodes on its own and the join only concatenates.
 *
 * Pictures go to the encoder with the rect in which they differ from the last one (frame.c,
 * from the stream's fc_i420_delta): with the constant quantizer bulk uses, x264 skips the
 * unchanged macroblocks without analysing them, the main cost of encoding a talking photo. */
#include "bulk/bulk_internal.h"
#include "bulk/frame.h"

#include "facecast/audio.h"
#include "facecast/error.h"
#include "facecast/tts.h"
#include "media/audio_dec.h"
#include "media/h264enc.h"

#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>

#define BULK_BATCH 16 /* frames per lip-sync request (the pool's largest call) */
#define SPEECH_AHEAD 50 /* frames of speech kept waiting in the stream (2 s, three batches) */
#define MAX_AUDIO_SECONDS (3 * 3600.0)
#define BULK_QP 24    /* constant quantizer: about x264's CRF 23 on these pictures */

typedef struct shard_run {
  fc_lipsync_client *lsc;
  const int *cancel;
} shard_run;

static int bulk_hook(void *user, const fc_lipsync_req *reqs, fc_patch *out,
                     const fc_frame_info *info, int n) {
  shard_run *r = user;
  if (r->cancel && __atomic_load_n(r->cancel, __ATOMIC_RELAXED))
    return fc_error_set(FC_ECANCELED, "canceled");
  return fc_lipsync_pool_hook(r->lsc, reqs, out, info, n);
}

/* spec->voice as provider and voice: "voice" and "espeak:voice" are espeak's (provider NULL),
 * "provider:voice" another's (the env's speak hook). */
static void split_voice(const char *v, char *provider, size_t cap, const char **voice) {
  provider[0] = 0;
  *voice = v;
  const char *colon = v ? strchr(v, ':') : NULL;
  if (!colon) return;
  *voice = colon[1] ? colon + 1 : NULL;
  if ((size_t)(colon - v) == 6 && !strncmp(v, "espeak", 6)) return;
  snprintf(provider, cap, "%.*s", (int)(colon - v), v);
}

/* One sentence's speech: espeak, or the provider through the env's hook. */
static int speak(const fc_video_spec *s, const fc_video_env *env, const char *text,
                 fc_speech *out) {
  char provider[64];
  const char *voice;
  split_voice(s->voice, provider, sizeof provider, &voice);
  if (!provider[0]) {
    fc_tts_params tp = {.voice = voice};
    return fc_tts_speak(text, &tp, out);
  }
  if (!env->speak)
    return fc_error_set(FC_EUNSUPPORTED, "voice: provider '%s' is not available for videos "
                        "(espeak voices only here)", provider);
  int err = env->speak(env->user, provider, voice, text, out);
  if (!err && out->audio.rate && out->audio.rate != FC_SAMPLE_RATE) {
    fc_speech_free(out);
    return fc_error_set(FC_EINVAL, "voice: provider '%s' gave audio at %d Hz, not 16000",
                        provider, out->audio.rate);
  }
  return err;
}

/* The shard's sentences into the stream as the frames need them: one TTS call each, spoken
 * while fewer than `ahead` frames wait (so a shard holds a few seconds of speech, not all of
 * it, and espeak's one lock is taken a sentence at a time between frames of work); cues[i] is
 * sentence i's speech within the shard (padding excluded). The stream's input ends after the
 * last sentence. */
typedef struct speech_feed {
  const fc_video_spec *s;
  const fc_video_env *env;
  const fc_plan_shard *sh;
  fc_stream *st;
  const int *cancel;
  fc_cue *cues;
  int n_cues, next, ended;
  int64_t at;               /* samples pushed */
  size_t chars, chars_done; /* of all sentences, of those pushed: the total's estimate */
} speech_feed;

static int feed(speech_feed *f, int64_t ahead) {
  int err = 0;
  while (!err && f->next < f->sh->n_sentences && fc_stream_pending_frames(f->st) < ahead) {
    if (f->cancel && __atomic_load_n(f->cancel, __ATOMIC_RELAXED))
      return fc_error_set(FC_ECANCELED, "canceled");
    const char *text = f->sh->sentences[f->next++];
    fc_speech sp = {0};
    if (!(err = speak(f->s, f->env, text, &sp)) && sp.audio.n > 0 &&
        !(err = fc_stream_push_speech(f->st, sp.audio.samples, sp.audio.n, sp.ph, sp.n_ph, NULL))) {
      f->cues[f->n_cues++] = (fc_cue){(char *)text, f->at, f->at + (int64_t)sp.audio.n};
      f->at += ((int64_t)sp.audio.n + FC_SAMPLES_PER_FRAME - 1) / FC_SAMPLES_PER_FRAME *
               FC_SAMPLES_PER_FRAME;
    }
    f->chars_done += strlen(text);
    fc_speech_free(&sp);
  }
  if (!err && f->next >= f->sh->n_sentences && !f->ended) {
    if (!f->at) return fc_error_set(FC_EINVAL, "script: no words to speak");
    fc_stream_end(f->st);
    f->ended = 1;
  }
  return err;
}

/* The shard's frames to come, all told: exact once every sentence is spoken, else the frames
 * so far scaled by the characters still to speak. */
static int64_t frames_estimate(const speech_feed *f, int64_t done) {
  const int64_t known = done + fc_stream_pending_frames(f->st);
  if (f->ended || !f->chars_done) return known;
  return known + (int64_t)((double)(f->at / FC_SAMPLES_PER_FRAME) *
                           (double)(f->chars - f->chars_done) / (double)f->chars_done);
}

/* The audio file's range of frames into the stream. */
static int push_audio(const fc_video_spec *s, const fc_plan_shard *sh, const fc_video_env *env,
                      fc_stream *st) {
  char *path = g_build_filename(env->shared_dir ? env->shared_dir : ".", s->audio, NULL);
  fc_audio a = {0};
  int err = fc_audio_decode_file(path, MAX_AUDIO_SECONDS, &a);
  g_free(path);
  if (err) return fc_error_set(err, "audio: %s", fc_error_detail(err));
  const size_t from = (size_t)sh->from * FC_SAMPLES_PER_FRAME;
  size_t n = from < a.n ? a.n - from : 0;
  if (sh->frames >= 0 && (size_t)sh->frames * FC_SAMPLES_PER_FRAME < n)
    n = (size_t)sh->frames * FC_SAMPLES_PER_FRAME;
  if (!n) err = fc_error_set(FC_EINVAL, "audio: no sound in frames from %lld",
                             (long long)sh->from);
  else err = fc_stream_push_speech(st, a.samples + from, n, NULL, 0, NULL);
  fc_audio_free(&a);
  return err;
}

int fc_video_plan_create_audio(const fc_video_spec *s, const char *shared_dir, int max_shards,
                               double min_seconds, fc_video_plan **out) {
  *out = NULL;
  if (!s || !s->audio) return fc_error_set(FC_EINVAL, "plan: not an audio spec");
  if (min_seconds <= 0) min_seconds = 20;
  if (max_shards < 1) max_shards = 1;
  if (max_shards > FC_PLAN_MAX_SHARDS) max_shards = FC_PLAN_MAX_SHARDS;
  char *path = g_build_filename(shared_dir ? shared_dir : ".", s->audio, NULL);
  fc_audio a = {0};
  int err = fc_audio_decode_file(path, MAX_AUDIO_SECONDS, &a);
  g_free(path);
  if (err) return fc_error_set(err, "audio: %s", fc_error_detail(err));
  const int64_t frames = ((int64_t)a.n + FC_SAMPLES_PER_FRAME - 1) / FC_SAMPLES_PER_FRAME;
  int n = (int)(frames / (int64_t)(min_seconds * 25));
  if (n > max_shards) n = max_shards;
  if (n < 1) n = 1;
  fc_video_plan *p = g_new0(fc_video_plan, 1);
  p->kind = FC_PLAN_AUDIO;
  p->shards = g_new0(fc_plan_shard, n);
  /* Each cut at the quietest frame within 2 s of where an even cut would be: a join inside a
   * pause is one nobody can see. */
  int64_t from = 0;
  for (int k = 0; k < n; k++) {
    int64_t cut = frames;
    if (k < n - 1) {
      const int64_t even = frames * (k + 1) / n;
      double best = -1;
      for (int64_t f = even - 50; f <= even + 50; f++) {
        if (f <= from + 25 || f >= frames - 25) continue;
        double e = 0;
        for (size_t i = (size_t)f * FC_SAMPLES_PER_FRAME; i < (size_t)(f + 1) * FC_SAMPLES_PER_FRAME && i < a.n; i++)
          e += (double)a.samples[i] * a.samples[i];
        /* the quietest; of equally quiet ones (digital silence) the nearest */
        if (best < 0 || e < best || (e == best && llabs(f - even) < llabs(cut - even)))
          best = e, cut = f;
      }
      if (best < 0) cut = even > from ? even : from + 1;
    }
    p->shards[k].from = from;
    p->shards[k].frames = k < n - 1 ? cut - from : -1;
    p->n++;
    from = cut;
  }
  fc_audio_free(&a);
  *out = p;
  return 0;
}

int fc_video_shard_render(const fc_video_spec *s, const fc_video_plan *p, int k,
                          const fc_video_env *env, const char *dir, const int *cancel,
                          fc_video_progress_cb progress, void *user) {
  if (!s || !p || !env || !env->pool || !env->avatar_get || !dir || k < 0 || k >= p->n)
    return fc_error_set(FC_EINVAL, "shard: bad arguments");
  const fc_plan_shard *sh = &p->shards[k];
  int err = 0;
  fc_avatar *av = NULL;
  fc_stream *st = NULL;
  fc_h264enc *enc = NULL;
  fc_bulk_frame *fr = NULL;
  FILE *vf = NULL, *af = NULL;
  char *vtmp = NULL, *atmp = NULL;
  shard_run run = {.cancel = cancel};
  fc_shard_meta meta = {0};
  /* this render's own names for its video and audio (see files.c) */
  snprintf(meta.token, sizeof meta.token, "%08x%08x", g_random_int(), g_random_int());
  char *vpath = fc_shard_data_file(dir, k, meta.token, "h264"),
       *apath = fc_shard_data_file(dir, k, meta.token, "pcm"),
       *mpath = fc_video_shard_file(dir, k, "json");
  fc_cue *cues = g_new0(fc_cue, sh->n_sentences + 1);

  if (!(av = env->avatar_get(env->user, s->avatar, &err))) {
    if (!err) err = fc_error_set(FC_ENOTFOUND, "avatar: not found");
    goto done;
  }
  fc_lipsync_client_params cp = {.cls = FC_SCHED_BULK};
  if (!(run.lsc = fc_lipsync_client_add(env->pool, &cp, &err))) goto done;
  fc_stream_params spar = {.avatar = av, .lipsync = fc_lipsync_client_backend(run.lsc),
                           .run = bulk_hook, .run_user = &run, .batch = BULK_BATCH,
                           .max_pending = (size_t)(MAX_AUDIO_SECONDS * FC_SAMPLE_RATE)};
  if (!(st = fc_stream_create(&spar, &err))) goto done;
  /* the picture's set-up first: a bad background image fails before any speech is made */
  if (!(fr = fc_bulk_frame_create(s, av, env->shared_dir, &err))) goto done;
  fc_bulk_frame_size(fr, &meta.width, &meta.height);
  speech_feed sf = {.s = s, .env = env, .sh = sh, .st = st, .cancel = cancel, .cues = cues};
  for (int i = 0; i < sh->n_sentences; i++) sf.chars += strlen(sh->sentences[i]);
  if (p->kind == FC_PLAN_AUDIO) {
    if ((err = push_audio(s, sh, env, st))) goto done;
    fc_stream_end(st);
    sf.ended = 1;
  } else if ((err = feed(&sf, SPEECH_AHEAD))) {
    goto done;
  }

  fc_h264enc_params ep = {.width = meta.width, .height = meta.height, .qp = BULK_QP,
                          .preset = env->preset, /* NULL: h264enc's bulk default */
                          .threads = env->encoder_threads > 0 ? env->encoder_threads : 1};
  if (!(vf = fc_bulk_tmp_open(vpath, &vtmp, &err)) || !(af = fc_bulk_tmp_open(apath, &atmp, &err)))
    goto done;
  if (!(enc = fc_h264enc_create(&ep, vf, &err))) goto done;
  for (;;) {
    fc_frame_info fi;
    const uint8_t *img;
    const int16_t *pcm;
    if (!sf.ended && (err = feed(&sf, SPEECH_AHEAD))) goto done;
    err = fc_stream_next_frame(st, &fi, &img, &pcm);
    if (err == FC_EAGAIN && !sf.ended) { /* the next frame waits for more speech (a mel
                                          * window's look-ahead): one more sentence */
      if ((err = feed(&sf, fc_stream_pending_frames(st) + 1))) goto done;
      continue;
    }
    if (err == FC_EEOF) {
      err = 0;
      break;
    }
    if (err) goto done;
    fc_i420_delta d = fc_stream_frame_delta(st);
    fc_rect changed;
    int known;
    const uint8_t *pic = fc_bulk_frame_draw(fr, img, &d, fi.index * FC_SAMPLES_PER_FRAME, cues,
                                            sf.n_cues, &changed, &known);
    if ((err = fc_h264enc_encode(enc, pic, known ? &changed : NULL))) goto done;
    if (fwrite(pcm, sizeof *pcm, FC_SAMPLES_PER_FRAME, af) != FC_SAMPLES_PER_FRAME) {
      err = fc_error_set(FC_EIO, "%s: cannot write", apath);
      goto done;
    }
    meta.frames++;
    if (progress) progress(user, meta.frames, frames_estimate(&sf, meta.frames));
  }
  if ((err = fc_h264enc_finish(enc))) goto done;
  if (!meta.frames) {
    err = fc_error_set(FC_EINVAL, "shard %d: no frames", k);
    goto done;
  }
  meta.samples = meta.frames * FC_SAMPLES_PER_FRAME;
  meta.cues = cues;
  meta.n_cues = sf.n_cues;
  err = fc_bulk_tmp_commit(vf, vtmp, vpath);
  vf = NULL, vtmp = NULL;
  if (!err) err = fc_bulk_tmp_commit(af, atmp, apath);
  af = NULL, atmp = NULL;
  if (!err) err = fc_shard_meta_write(&meta, mpath); /* last: the shard is done */
  if (err) g_remove(vpath), g_remove(apath);
done:
  fc_h264enc_destroy(enc);
  if (vf) fclose(vf), g_remove(vtmp);
  if (af) fclose(af), g_remove(atmp);
  g_free(vtmp), g_free(atmp);
  fc_bulk_frame_destroy(fr);
  fc_stream_destroy(st);
  fc_lipsync_client_remove(run.lsc);
  if (av && env->avatar_put) env->avatar_put(env->user, av);
  g_free(cues); /* the texts are the plan's */
  g_free(vpath), g_free(apath), g_free(mpath);
  return err;
}
