/* What the bulk module's files share (spec.c, shard.c, join.c, captions.c): the plan's layout
 * and the shard files' names. Internal to src/bulk. */
#ifndef FC_BULK_INTERNAL_H
#define FC_BULK_INTERNAL_H

#include "bulk/video.h"

#include <stdio.h>

enum { FC_PLAN_SCRIPT = 1, FC_PLAN_AUDIO = 2 };

typedef struct fc_plan_shard {
  char **sentences; /* script: the sentences this shard speaks, in order */
  int n_sentences;
  int64_t from, frames; /* audio: first frame and frame count (-1: to the end) */
} fc_plan_shard;

struct fc_video_plan {
  int kind;
  int n;
  fc_plan_shard *shards;
};

/* Limits on what a plan (from a job's stored JSON) may hold. */
#define FC_PLAN_MAX_SHARDS 4096
#define FC_PLAN_MAX_SENTENCES 100000

/* A shard's cue: one sentence, its samples within the shard ([start, end), 16 kHz). */
typedef struct fc_cue {
  char *text;
  int64_t start, end;
} fc_cue;

/* What a shard's .json holds. */
typedef struct fc_shard_meta {
  char token[20]; /* names the render's video and audio files (fc_shard_data_file) */
  int width, height;
  int64_t frames, samples;
  fc_cue *cues;
  int n_cues;
} fc_shard_meta;

/* Shard k's video ("h264") or audio ("pcm") file of the render named token. g_free. */
char *fc_shard_data_file(const char *dir, int k, const char *token, const char *ext);
/* Shard k's metadata and the paths of the files it names (either may be NULL). 0, or
 * FC_ENOTFOUND (not rendered) / FC_EFORMAT with a detail. */
int fc_shard_open(const char *dir, int k, fc_shard_meta *m, char **video, char **audio);

int fc_shard_meta_write(const fc_shard_meta *m, const char *path);
int fc_shard_meta_read(const char *path, fc_shard_meta *m);
void fc_shard_meta_free(fc_shard_meta *m);

/* Writes data to path through a temporary file in the same folder, renamed into place. */
int fc_bulk_write_atomic(const char *path, const char *data, size_t len);
/* A new temporary file beside path (path.tmp-XXXXXX), opened for writing; *tmp: its name
 * (g_free). NULL and an error detail on failure. */
FILE *fc_bulk_tmp_open(const char *path, char **tmp, int *err);
/* Closes f (flushing it) and renames tmp to path; on any failure removes tmp. */
int fc_bulk_tmp_commit(FILE *f, char *tmp, const char *path);

/* Cues whose text is longer than max_chars characters cut into pieces (at spaces), each shown
 * for its share of the cue's time by characters: captions of at most two lines. Texts owned
 * (fc_cues_free). */
fc_cue *fc_cues_split(const fc_cue *cues, int n, int max_chars, int *n_out);
void fc_cues_free(fc_cue *cues, int n);

/* SRT / VTT text of cues (times in samples at 16 kHz). g_free. */
char *fc_captions_srt(const fc_cue *cues, int n);
char *fc_captions_vtt(const fc_cue *cues, int n);

#endif
