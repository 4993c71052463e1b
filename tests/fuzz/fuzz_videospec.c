/* libFuzzer: bulk video requests and stored plans (bulk/video.h). The input as a POST /v1/videos
 * body (fc_video_spec_parse) and as a job's stored plan (fc_video_plan_parse). What parses must
 * survive its own JSON: the spec's normalised JSON parses to the same JSON, a plan cut from it
 * (shard counts picked by the input's first bytes) and any plan that parses give the same JSON
 * back; a long script's captions cut into pieces lose no character. */
#include "bulk/bulk_internal.h"
#include "fuzz.h"

#include <glib.h>

static void same_or_trap(const char *a, const char *b) {
  if (strcmp(a, b)) __builtin_trap();
}

static void plan_round_trip(const fc_video_plan *p) {
  char *j = fc_video_plan_json(p);
  fc_video_plan *q = NULL;
  int err = fc_video_plan_parse(j, strlen(j), &q);
  if (err) __builtin_trap();
  char *k = fc_video_plan_json(q);
  same_or_trap(j, k);
  g_free(j), g_free(k);
  fc_video_plan_free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *d = (const char *)data;
  fc_video_spec *s = NULL;
  int err = fc_video_spec_parse(d, size, &s);
  if (err) {
    fc_fuzz_refusal(err);
  } else {
    char *j = fc_video_spec_json(s);
    fc_video_spec *t = NULL;
    if (fc_video_spec_parse(j, strlen(j), &t)) __builtin_trap();
    char *k = fc_video_spec_json(t);
    same_or_trap(j, k);
    g_free(j), g_free(k);
    fc_video_spec_free(t);
    fc_video_plan *p = NULL;
    const int shards = size ? 1 + data[0] % 16 : 1, min_chars = size > 1 ? data[1] : 0;
    err = fc_video_plan_create(s, shards, min_chars, &p);
    if (err) fc_fuzz_refusal(err);
    else {
      if (fc_video_plan_shards(p) < 1 || fc_video_plan_shards(p) > shards) __builtin_trap();
      plan_round_trip(p);
      fc_video_plan_free(p);
    }
    if (s->script) {
      fc_cue c = {s->script, 0, 16000 * 10};
      int n = 0;
      fc_cue *pieces = fc_cues_split(&c, 1, 8 + (size ? data[0] % 80 : 0), &n);
      long chars = 0, total = g_utf8_strlen(s->script, -1);
      for (int i = 0; i < n; i++) {
        if (pieces[i].start > pieces[i].end || pieces[i].end > c.end) __builtin_trap();
        chars += g_utf8_strlen(pieces[i].text, -1);
      }
      if (chars > total) __builtin_trap();
      char *srt = fc_captions_srt(pieces, n), *vtt = fc_captions_vtt(pieces, n);
      g_free(srt), g_free(vtt);
      fc_cues_free(pieces, n);
    }
    fc_video_spec_free(s);
  }
  fc_video_plan *p = NULL;
  err = fc_video_plan_parse(d, size, &p);
  if (err) fc_fuzz_refusal(err);
  else {
    plan_round_trip(p);
    fc_video_plan_free(p);
  }
  return 0;
}
