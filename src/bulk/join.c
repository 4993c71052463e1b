/* The join (video.h): every shard's pictures muxed as they were encoded, the shards' PCM end to
 * end encoded once as AAC, and the captions of all shards on one clock.
 *
 * Exactness: shard k's frame j becomes frame F_k + j of the file (F_k: the frames of the
 * shards before it) and its 640 samples become samples 640·(F_k + j) onward, so pictures and
 * sound stay on one clock across every join and nothing is dropped or repeated; the checks
 * below refuse a shard whose files disagree with its metadata (a picture count that is not
 * its frame count, audio that is not 640 samples a frame, a first picture that is not a key
 * frame, parameter sets that differ from the first shard's) rather than write a file that
 * drifts. Video and audio are pushed frame by frame, interleaved, as the muxer wants them. */
#include "bulk/bulk_internal.h"

#include "facecast/audio.h"
#include "facecast/error.h"
#include "media/h264enc.h"
#include "media/mp4_coded.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


typedef struct join_state {
  fc_mp4_writer *w;
  uint8_t *sps, *pps; /* the first shard's, which every shard must repeat */
  size_t sps_len, pps_len;
  int64_t frames; /* written so far */
} join_state;

/* Parameter sets of an access unit against the first shard's. */
static int check_params(join_state *j, const fc_h264_au *au, int k) {
  if (au->sps && (au->sps_len != j->sps_len || memcmp(au->sps, j->sps, j->sps_len)))
    return fc_error_set(FC_EFORMAT, "shard %d: encoded with other settings (SPS) than shard 0", k);
  if (au->pps && (au->pps_len != j->pps_len || memcmp(au->pps, j->pps, j->pps_len)))
    return fc_error_set(FC_EFORMAT, "shard %d: encoded with other settings (PPS) than shard 0", k);
  return 0;
}

/* The writer, from the first access unit's parameter sets (shard 0). */
static int open_writer(join_state *j, const fc_h264_au *au, const fc_shard_meta *m,
                       const char *path) {
  if (!au->key || !au->sps || !au->pps)
    return fc_error_set(FC_EFORMAT, "shard 0 does not start with a key frame and its SPS/PPS");
  uint8_t avcc[1024];
  int n = fc_h264_avcc(au->sps, au->sps_len, au->pps, au->pps_len, avcc, sizeof avcc);
  if (n < 0) return n;
  j->sps = g_memdup2(au->sps, au->sps_len), j->sps_len = au->sps_len;
  j->pps = g_memdup2(au->pps, au->pps_len), j->pps_len = au->pps_len;
  fc_mp4_params mp = fc_mp4_params_default(m->width, m->height);
  int err;
  j->w = fc_mp4_writer_create_coded(path, &mp, avcc, (size_t)n, &err);
  return j->w ? 0 : err;
}

static int join_shard(join_state *j, int k, const char *dir, const fc_shard_meta *m,
                      const char *tmp_mp4) {
  char *vpath = fc_shard_data_file(dir, k, m->token, "h264"),
       *apath = fc_shard_data_file(dir, k, m->token, "pcm");
  GMappedFile *map = NULL;
  uint8_t *au_buf = NULL;
  FILE *af = NULL;
  int err = 0;
  int16_t pcm[FC_SAMPLES_PER_FRAME];
  GError *ge = NULL;
  /* mapped, not read: a shard of an hour is hundreds of MB, and only a picture at a time is
   * needed (the muxer copies each) */
  if (!(map = g_mapped_file_new(vpath, FALSE, &ge))) {
    err = fc_error_set(FC_ENOTFOUND, "shard %d: no video (%s)", k, ge ? ge->message : "?");
    goto done;
  }
  const uint8_t *v = (const uint8_t *)g_mapped_file_get_contents(map);
  const size_t vlen = g_mapped_file_get_length(map);
  if (!(af = g_fopen(apath, "rb"))) {
    err = fc_error_set(FC_ENOTFOUND, "shard %d: no audio (%s)", k, g_strerror(errno));
    goto done;
  }
  size_t cap = 1u << 20; /* grown to the largest picture */
  au_buf = g_malloc(cap);
  size_t pos = 0;
  int64_t f = 0;
  for (;; f++) {
    fc_h264_au au;
    int r = vlen ? fc_h264_next_au(v, vlen, &pos, au_buf, cap, &au) : 0;
    if (r == FC_ENOMEM && au.size > cap) {
      g_free(au_buf);
      au_buf = g_malloc(cap = au.size + au.size / 2);
      r = fc_h264_next_au(v, vlen, &pos, au_buf, cap, &au);
    }
    if (r < 0) {
      err = fc_error_set(r, "shard %d: %s", k, fc_error_detail(r));
      goto done;
    }
    if (r == 0) break;
    if (f == 0 && !au.key) {
      err = fc_error_set(FC_EFORMAT, "shard %d does not start with a key frame", k);
      goto done;
    }
    if (f >= m->frames) {
      err = fc_error_set(FC_EFORMAT, "shard %d: more pictures than its %lld frames", k,
                         (long long)m->frames);
      goto done;
    }
    if (!j->w && (err = open_writer(j, &au, m, tmp_mp4))) goto done;
    if ((err = check_params(j, &au, k))) goto done;
    if (fread(pcm, sizeof *pcm, FC_SAMPLES_PER_FRAME, af) != FC_SAMPLES_PER_FRAME) {
      err = fc_error_set(FC_EFORMAT, "shard %d: audio shorter than its %lld frames", k,
                         (long long)m->frames);
      goto done;
    }
    if ((err = fc_mp4_writer_push_coded(j->w, au_buf, au.size, au.key, j->frames)) ||
        (err = fc_mp4_writer_push_audio(j->w, pcm, FC_SAMPLES_PER_FRAME,
                                        j->frames * FC_SAMPLES_PER_FRAME)))
      goto done;
    j->frames++;
  }
  if (f != m->frames) {
    err = fc_error_set(FC_EFORMAT, "shard %d: %lld pictures for %lld frames", k, (long long)f,
                       (long long)m->frames);
    goto done;
  }
  if (fread(pcm, 1, 1, af) != 0)
    err = fc_error_set(FC_EFORMAT, "shard %d: audio longer than its %lld frames", k,
                       (long long)m->frames);
done:
  if (ge) g_error_free(ge);
  if (af) fclose(af);
  if (map) g_mapped_file_unref(map);
  g_free(au_buf), g_free(vpath), g_free(apath);
  return err;
}

/* All cues on the joined clock, long sentences in pieces of two lines of 42 characters (the
 * usual width of a caption line; files.c wraps them). */
#define CAPTION_CHARS 84

static int write_captions(const fc_cue *all, int n_all, const char *srt, const char *vtt) {
  int err = 0, n = 0;
  fc_cue *cues = fc_cues_split(all, n_all, CAPTION_CHARS, &n);
  if (srt) {
    char *t = fc_captions_srt(cues, n);
    err = fc_bulk_write_atomic(srt, t, strlen(t));
    g_free(t);
  }
  if (!err && vtt) {
    char *t = fc_captions_vtt(cues, n);
    err = fc_bulk_write_atomic(vtt, t, strlen(t));
    g_free(t);
  }
  fc_cues_free(cues, n);
  return err;
}

int fc_video_join(const fc_video_spec *s, const fc_video_plan *p, const char *dir,
                  const char *out_mp4, const char *out_srt, const char *out_vtt,
                  fc_video_result *res) {
  if (!s || !p || !dir || !out_mp4) return fc_error_set(FC_EINVAL, "join: bad arguments");
  if (res) memset(res, 0, sizeof *res);
  join_state j = {0};
  fc_shard_meta *metas = g_new0(fc_shard_meta, p->n);
  GArray *cues = g_array_new(FALSE, FALSE, sizeof(fc_cue));
  char *tmp = g_strconcat(out_mp4, ".tmp-XXXXXX", NULL);
  int fd = -1, err = 0;
  int64_t at = 0;
  for (int k = 0; k < p->n && !err; k++) {
    if ((err = fc_shard_open(dir, k, &metas[k], NULL, NULL))) break;
    if (metas[k].width != metas[0].width || metas[k].height != metas[0].height)
      err = fc_error_set(FC_EFORMAT, "shard %d is %dx%d, shard 0 %dx%d", k, metas[k].width,
                         metas[k].height, metas[0].width, metas[0].height);
    for (int i = 0; i < metas[k].n_cues; i++) {
      fc_cue c = metas[k].cues[i];
      c.start += at, c.end += at;
      g_array_append_val(cues, c);
    }
    at += metas[k].samples;
  }
  if (err) goto done;
  if ((fd = g_mkstemp(tmp)) < 0) {
    err = fc_error_set(FC_EIO, "%s: cannot create: %s", out_mp4, g_strerror(errno));
    goto done;
  }
  close(fd);
  for (int k = 0; k < p->n && !err; k++) err = join_shard(&j, k, dir, &metas[k], tmp);
  if (!err && !j.w) err = fc_error_set(FC_EFORMAT, "join: no pictures");
  if (!err) err = fc_mp4_writer_finish(j.w);
  if (!err && g_rename(tmp, out_mp4) != 0)
    err = fc_error_set(FC_EIO, "%s: cannot rename into place: %s", out_mp4, g_strerror(errno));
  if (!err && s->script)
    err = write_captions((fc_cue *)(void *)cues->data, (int)cues->len, out_srt, out_vtt);
  if (!err && res) {
    res->frames = j.frames;
    res->samples = j.frames * FC_SAMPLES_PER_FRAME;
    res->seconds = j.frames / 25.0;
  }
done:
  fc_mp4_writer_destroy(j.w); /* removes an unfinished file */
  if (fd >= 0) g_remove(tmp);   /* still there only on failure */
  g_free(tmp);
  g_free(j.sps), g_free(j.pps);
  for (int k = 0; k < p->n; k++) fc_shard_meta_free(&metas[k]);
  g_free(metas);
  g_array_free(cues, TRUE);
  return err;
}
