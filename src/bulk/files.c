/* A shard's files (video.h): names, the metadata file written last, atomic writes, and the
 * SRT/VTT text of caption cues.
 *
 * A render writes its video and audio under names of its own (shard-K.TOKEN.h264 / .pcm, TOKEN
 * random), then the .json that names them, under a temporary name renamed into place. So two
 * workers rendering the same shard (one was thought dead) never mix their files: whichever
 * .json is renamed last names a whole render's files, and the .json's presence says the shard
 * is done. */
#include "bulk/bulk_internal.h"

#include "core/jsonin.h"
#include "facecast/error.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAMPLE_RATE 16000
#define MAX_META_BYTES (16u << 20)

char *fc_video_shard_file(const char *dir, int k, const char *ext) {
  char name[64];
  snprintf(name, sizeof name, "shard-%04d.%s", k, ext);
  return g_build_filename(dir, name, NULL);
}

char *fc_shard_data_file(const char *dir, int k, const char *token, const char *ext) {
  char name[80];
  snprintf(name, sizeof name, "shard-%04d.%s.%s", k, token, ext);
  return g_build_filename(dir, name, NULL);
}

int fc_shard_open(const char *dir, int k, fc_shard_meta *m, char **video, char **audio) {
  char *mpath = fc_video_shard_file(dir, k, "json");
  int err = fc_shard_meta_read(mpath, m);
  g_free(mpath);
  if (err) return err;
  if (video) *video = fc_shard_data_file(dir, k, m->token, "h264");
  if (audio) *audio = fc_shard_data_file(dir, k, m->token, "pcm");
  return 0;
}

int fc_video_shard_done(const fc_video_plan *p, int k, const char *dir) {
  if (!p || k < 0 || k >= p->n || !dir) return 0;
  fc_shard_meta m;
  char *v = NULL, *a = NULL;
  int ok = !fc_shard_open(dir, k, &m, &v, &a) && g_file_test(v, G_FILE_TEST_IS_REGULAR) &&
           g_file_test(a, G_FILE_TEST_IS_REGULAR);
  if (v) fc_shard_meta_free(&m);
  g_free(v), g_free(a);
  return ok;
}

/* Every file of shard k: its .json first (the shard is not done from then on), then the data
 * files of every render of it (a render that lost the race to the .json leaves its own). */
void fc_video_shards_remove(const fc_video_plan *p, const char *dir) {
  if (!p || !dir) return;
  for (int k = 0; k < p->n; k++) {
    char *f = fc_video_shard_file(dir, k, "json");
    g_remove(f);
    g_free(f);
  }
  GDir *d = g_dir_open(dir, 0, NULL);
  for (const char *name; d && (name = g_dir_read_name(d));) {
    int k = -1, used = 0;
    if (sscanf(name, "shard-%d.%n", &k, &used) != 1 || used <= 0 || k < 0 || k >= p->n) continue;
    char *f = g_build_filename(dir, name, NULL);
    g_remove(f);
    g_free(f);
  }
  if (d) g_dir_close(d);
}

FILE *fc_bulk_tmp_open(const char *path, char **tmp, int *err) {
  *tmp = g_strconcat(path, ".tmp-XXXXXX", NULL);
  int fd = g_mkstemp(*tmp);
  FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!f) {
    *err = fc_error_set(FC_EIO, "%s: cannot create: %s", path, g_strerror(errno));
    if (fd >= 0) {
      close(fd);
      g_remove(*tmp);
    }
    g_free(*tmp);
    *tmp = NULL;
    return NULL;
  }
  *err = 0;
  return f;
}

int fc_bulk_tmp_commit(FILE *f, char *tmp, const char *path) {
  int err = 0;
  if (fflush(f) != 0 || ferror(f)) err = fc_error_set(FC_EIO, "%s: cannot write", path);
  if (fclose(f) != 0 && !err) err = fc_error_set(FC_EIO, "%s: cannot write", path);
  if (!err && g_rename(tmp, path) != 0)
    err = fc_error_set(FC_EIO, "%s: cannot rename into place: %s", path, g_strerror(errno));
  if (err) g_remove(tmp);
  g_free(tmp);
  return err;
}

int fc_bulk_write_atomic(const char *path, const char *data, size_t len) {
  char *tmp;
  int err;
  FILE *f = fc_bulk_tmp_open(path, &tmp, &err);
  if (!f) return err;
  if (len && fwrite(data, 1, len, f) != len) {
    fclose(f);
    g_remove(tmp);
    g_free(tmp);
    return fc_error_set(FC_EIO, "%s: cannot write", path);
  }
  return fc_bulk_tmp_commit(f, tmp, path);
}

/* ---- the shard's metadata ---- */

int fc_shard_meta_write(const fc_shard_meta *m, const char *path) {
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "token");
  json_builder_add_string_value(b, m->token);
  json_builder_set_member_name(b, "width");
  json_builder_add_int_value(b, m->width);
  json_builder_set_member_name(b, "height");
  json_builder_add_int_value(b, m->height);
  json_builder_set_member_name(b, "frames");
  json_builder_add_int_value(b, m->frames);
  json_builder_set_member_name(b, "samples");
  json_builder_add_int_value(b, m->samples);
  json_builder_set_member_name(b, "cues");
  json_builder_begin_array(b);
  for (int i = 0; i < m->n_cues; i++) {
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "text");
    json_builder_add_string_value(b, m->cues[i].text);
    json_builder_set_member_name(b, "start");
    json_builder_add_int_value(b, m->cues[i].start);
    json_builder_set_member_name(b, "end");
    json_builder_add_int_value(b, m->cues[i].end);
    json_builder_end_object(b);
  }
  json_builder_end_array(b);
  json_builder_end_object(b);
  JsonNode *root = json_builder_get_root(b);
  JsonGenerator *g = json_generator_new();
  json_generator_set_root(g, root);
  gsize len = 0;
  char *t = json_generator_to_data(g, &len);
  g_object_unref(g);
  json_node_unref(root);
  g_object_unref(b);
  int err = fc_bulk_write_atomic(path, t, len);
  g_free(t);
  return err;
}

void fc_shard_meta_free(fc_shard_meta *m) {
  for (int i = 0; i < m->n_cues; i++) g_free(m->cues[i].text);
  g_free(m->cues);
  memset(m, 0, sizeof *m);
}

static int64_t int_of(JsonObject *o, const char *name, int64_t lo, int64_t hi, int *ok) {
  JsonNode *n = json_object_get_member(o, name);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64) {
    *ok = 0;
    return 0;
  }
  int64_t v = json_node_get_int(n);
  if (v < lo || v > hi) *ok = 0;
  return v;
}

int fc_shard_meta_read(const char *path, fc_shard_meta *m) {
  memset(m, 0, sizeof *m);
  char *d = NULL;
  gsize len = 0;
  if (!g_file_get_contents(path, &d, &len, NULL))
    return fc_error_set(FC_ENOTFOUND, "%s: shard not rendered", path);
  if (len > MAX_META_BYTES) {
    g_free(d);
    return fc_error_set(FC_EFORMAT, "%s: too large", path);
  }
  char why[200];
  JsonObject *o;
  JsonParser *p = fc_json_parse_object(d, len, FC_JSON_MAX_DEPTH, &o, why, sizeof why);
  g_free(d);
  if (!p) return fc_error_set(FC_EFORMAT, "%s: %s", path, why);
  int ok = 1;
  const char *token = fc_json_str_member(o, "token");
  /* a file name's part: letters and digits only */
  if (!token || !*token || strlen(token) >= sizeof m->token ||
      strspn(token, "0123456789abcdefghijklmnopqrstuvwxyz") != strlen(token))
    ok = 0;
  else
    memcpy(m->token, token, strlen(token) + 1);
  m->width = (int)int_of(o, "width", 16, 16384, &ok);
  m->height = (int)int_of(o, "height", 16, 16384, &ok);
  m->frames = int_of(o, "frames", 1, INT32_MAX, &ok);
  m->samples = int_of(o, "samples", 1, (int64_t)INT32_MAX * 640, &ok);
  JsonNode *cn = json_object_get_member(o, "cues");
  JsonArray *ca = cn && JSON_NODE_HOLDS_ARRAY(cn) ? json_node_get_array(cn) : NULL;
  if (!ca) ok = 0;
  const guint n = ok ? json_array_get_length(ca) : 0;
  if (n) m->cues = g_new0(fc_cue, n);
  for (guint i = 0; ok && i < n; i++) {
    JsonNode *e = json_array_get_element(ca, i);
    JsonObject *c = JSON_NODE_HOLDS_OBJECT(e) ? json_node_get_object(e) : NULL;
    const char *text = fc_json_str_member(c, "text");
    if (!text) {
      ok = 0;
      break;
    }
    m->cues[i].start = int_of(c, "start", 0, m->samples, &ok);
    m->cues[i].end = int_of(c, "end", m->cues[i].start, m->samples, &ok);
    m->cues[i].text = g_strdup(text);
    m->n_cues++;
  }
  g_object_unref(p);
  if (ok && m->samples != m->frames * 640) ok = 0;
  if (!ok) {
    fc_shard_meta_free(m);
    return fc_error_set(FC_EFORMAT, "%s: not a shard's metadata", path);
  }
  return 0;
}

/* ---- captions ---- */

/* hh:mm:ss<sep>mmm of a sample count. */
static void stamp(GString *o, int64_t samples, char sep) {
  const int64_t ms = (samples * 1000 + SAMPLE_RATE / 2) / SAMPLE_RATE;
  g_string_append_printf(o, "%02lld:%02lld:%02lld%c%03lld", (long long)(ms / 3600000),
                         (long long)(ms / 60000 % 60), (long long)(ms / 1000 % 60), sep,
                         (long long)(ms % 1000));
}

/* The cue's text on one line, or, over 42 characters (broadcast captions' width), on two
 * broken at the space nearest the middle (pieces are at most two lines' worth: see
 * fc_cues_split). A caption never holds a blank line (it would end the cue). */
static void cue_text(GString *o, const char *t) {
  const glong n = g_utf8_strlen(t, -1);
  const char *brk = NULL;
  if (n > 42) {
    glong best = n, i = 0;
    for (const char *c = t; *c; c = g_utf8_next_char(c), i++)
      if (*c == ' ' && labs(2 * i - n) < best) best = labs(2 * i - n), brk = c;
  }
  for (const char *c = t; *c; c++) {
    if (*c == '\n' || *c == '\r') continue;
    g_string_append_c(o, c == brk ? '\n' : *c);
  }
  g_string_append_c(o, '\n');
}

char *fc_captions_srt(const fc_cue *cues, int n) {
  GString *o = g_string_new(NULL);
  for (int i = 0; i < n; i++) {
    g_string_append_printf(o, "%d\n", i + 1);
    stamp(o, cues[i].start, ',');
    g_string_append(o, " --> ");
    stamp(o, cues[i].end, ',');
    g_string_append_c(o, '\n');
    cue_text(o, cues[i].text);
    g_string_append_c(o, '\n');
  }
  return g_string_free(o, FALSE);
}

char *fc_captions_vtt(const fc_cue *cues, int n) {
  GString *o = g_string_new("WEBVTT\n\n");
  for (int i = 0; i < n; i++) {
    stamp(o, cues[i].start, '.');
    g_string_append(o, " --> ");
    stamp(o, cues[i].end, '.');
    g_string_append_c(o, '\n');
    /* "-->" inside a cue's text would read as timing; & and < as markup */
    GString *t = g_string_new(NULL);
    for (const char *c = cues[i].text; *c; c++) {
      if (*c == '&') g_string_append(t, "&amp;");
      else if (*c == '<') g_string_append(t, "&lt;");
      else if (*c == '>') g_string_append(t, "&gt;");
      else g_string_append_c(t, *c);
    }
    cue_text(o, t->str);
    g_string_free(t, TRUE);
    g_string_append_c(o, '\n');
  }
  return g_string_free(o, FALSE);
}

/* ---- long cues in pieces ---- */

fc_cue *fc_cues_split(const fc_cue *cues, int n, int max_chars, int *n_out) {
  GArray *a = g_array_new(FALSE, FALSE, sizeof(fc_cue));
  if (max_chars < 8) max_chars = 8;
  for (int i = 0; i < n; i++) {
    const char *t = cues[i].text;
    const glong total = g_utf8_strlen(t, -1);
    if (total <= max_chars) {
      fc_cue c = {g_strdup(t), cues[i].start, cues[i].end};
      g_array_append_val(a, c);
      continue;
    }
    /* Pieces of about total / ceil(total / max_chars) characters, cut at spaces (or, with no
     * space near, at a character), each shown for its share of the cue's time. */
    const glong pieces = (total + max_chars - 1) / max_chars, want = (total + pieces - 1) / pieces;
    glong done = 0;
    const char *p = t;
    while (*p) {
      const char *q = p, *space = NULL, *pause = NULL;
      glong k = 0;
      /* what is left fits one piece: all of it (no short last piece) */
      const glong lim = g_utf8_strlen(p, -1) <= max_chars ? max_chars : want;
      while (*q && k < lim) {
        if (*q == ' ') {
          space = q;
          /* after a comma, semicolon or colon in the last 40 %: where a reader pauses */
          if (q > p && strchr(",;:", q[-1]) && k * 5 >= lim * 3) pause = q;
        }
        q = g_utf8_next_char(q);
        k++;
      }
      if (*q && *q != ' ' && (pause || (space && space > p))) { /* back to a pause or a space */
        const char *at = pause ? pause : space;
        k -= g_utf8_pointer_to_offset(at, q);
        q = at;
      }
      fc_cue c = {g_strstrip(g_strndup(p, (gsize)(q - p))), 0, 0};
      c.start = cues[i].start + (cues[i].end - cues[i].start) * done / total;
      done += k;
      while (*q == ' ') q = g_utf8_next_char(q), done++;
      c.end = *q ? cues[i].start + (cues[i].end - cues[i].start) * done / total : cues[i].end;
      if (c.text[0]) g_array_append_val(a, c);
      else g_free(c.text);
      p = q;
    }
  }
  *n_out = (int)a->len;
  return (fc_cue *)(void *)g_array_free(a, FALSE);
}

void fc_cues_free(fc_cue *cues, int n) {
  for (int i = 0; i < n; i++) g_free(cues[i].text);
  g_free(cues);
}
