/* A video request's spec and its plan of shards (video.h), as JSON both ways.
 *
 * The spec is checked here once, with a detail naming the field, so everything after it (the
 * runner, the workers, the shard renderer) can trust it. Unknown members are ignored: the API
 * may carry fields this module does not act on (a client's own tags), and a stored spec of a
 * newer version still renders.
 *
 * The plan cuts a script at sentence ends into shards of whole sentences: each sentence is one
 * TTS call (so its timing is the caption's) and a shard is a run of sentences long enough that
 * its fixed costs (an encoder, a key frame, a stream) stay small against its work. The plan is
 * stored with the job as JSON, so every worker renders the same cut whatever version of this
 * cutting rule it runs. */
#include "bulk/bulk_internal.h"

#include "core/jsonin.h"
#include "facecast/error.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SCRIPT FC_VIDEO_MAX_SCRIPT /* bytes: about 3 hours of speech */
#define MAX_BODY (6 * MAX_SCRIPT + 64 * 1024)
#define MAX_NAME 1024      /* a path, a voice, a URL */
#define MAX_SIDE 4096
#define MIN_SIDE 16
#define SENTENCE_MAX 400   /* bytes: a longer run without a sentence end is cut at a space */
#define DEFAULT_MIN_CHARS 200

void fc_video_spec_free(fc_video_spec *s) {
  if (!s) return;
  g_free(s->script), g_free(s->audio), g_free(s->avatar), g_free(s->voice);
  g_free(s->background_image), g_free(s->callback_url);
  g_free(s);
}

/* A path inside the shared folder: relative, no "..", no NUL, printable. */
static int path_ok(const char *p) {
  if (!*p || p[0] == '/' || strlen(p) > MAX_NAME) return 0;
  for (const char *c = p; *c; c++)
    if ((unsigned char)*c < 0x20) return 0;
  char **parts = g_strsplit(p, "/", -1);
  int ok = 1;
  for (int i = 0; parts[i]; i++)
    if (!strcmp(parts[i], "..")) ok = 0;
  g_strfreev(parts);
  return ok;
}

/* "#RRGGBB" (or "RRGGBB"). */
static int parse_rgb(const char *s, uint32_t *out) {
  if (*s == '#') s++;
  if (strlen(s) != 6) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 6; i++) {
    if (!isxdigit((unsigned char)s[i])) return 0;
    v = v << 4 | (uint32_t)g_ascii_xdigit_value(s[i]);
  }
  *out = v;
  return 1;
}

static int parse_side(const char *s, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || !isdigit((unsigned char)*s)) return 0;
  *out = v > 100000 ? 100000 : (int)v;
  return (int)(end - s);
}

static int check_size(int w, int h) {
  if (w < MIN_SIDE || h < MIN_SIDE || w > MAX_SIDE || h > MAX_SIDE)
    return fc_error_set(FC_EINVAL, "size: %dx%d is out of range (%d to %d per side)", w, h,
                        MIN_SIDE, MAX_SIDE);
  if ((w | h) & 1) return fc_error_set(FC_EINVAL, "size: %dx%d: width and height must be even", w, h);
  return 0;
}

/* A member that must be a string when present (NULL when absent or null). */
static int str_member(JsonObject *o, const char *name, const char **out) {
  *out = NULL;
  JsonNode *n = json_object_get_member(o, name);
  if (!n || JSON_NODE_HOLDS_NULL(n)) return 0;
  if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_STRING)
    return fc_error_set(FC_EINVAL, "%s: expected a string", name);
  *out = json_node_get_string(n);
  /* json-glib takes a broken \u escape ("\uF2" and then no hex) and makes what it makes of it;
   * such text could not be written back as JSON */
  if (!g_utf8_validate(*out, -1, NULL)) return fc_error_set(FC_EINVAL, "%s: not UTF-8 text", name);
  return 0;
}

static int int_member(JsonObject *o, const char *field, const char *name, int *out) {
  JsonNode *n = json_object_get_member(o, name);
  if (!n || !JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_INT64)
    return fc_error_set(FC_EINVAL, "%s: expected {\"width\": W, \"height\": H} with whole "
                        "numbers", field);
  gint64 v = json_node_get_int(n);
  *out = v < 0 ? -1 : v > 100000 ? 100000 : (int)v;
  return 0;
}

static int parse_size(JsonNode *n, fc_video_spec *s) {
  if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
    const char *v = json_node_get_string(n);
    int a = parse_side(v, &s->width), b = 0;
    if (!a || (v[a] != 'x' && v[a] != 'X') || !(b = parse_side(v + a + 1, &s->height)) ||
        v[a + 1 + b])
      return fc_error_set(FC_EINVAL, "size: expected WIDTHxHEIGHT, e.g. 1280x720");
  } else if (JSON_NODE_HOLDS_OBJECT(n)) {
    JsonObject *o = json_node_get_object(n);
    int err;
    if ((err = int_member(o, "size", "width", &s->width)) ||
        (err = int_member(o, "size", "height", &s->height)))
      return err;
  } else {
    return fc_error_set(FC_EINVAL, "size: expected WIDTHxHEIGHT, e.g. 1280x720, or "
                        "{\"width\": W, \"height\": H}");
  }
  return check_size(s->width, s->height);
}

static int parse_background(JsonNode *n, fc_video_spec *s) {
  const char *color = NULL, *image = NULL;
  int err;
  if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING) {
    color = json_node_get_string(n);
  } else if (JSON_NODE_HOLDS_OBJECT(n)) {
    JsonObject *o = json_node_get_object(n);
    if ((err = str_member(o, "color", &color)) || (err = str_member(o, "image", &image)))
      return fc_error_set(err, "background.%s", fc_error_detail(err));
    if (!color && !image)
      return fc_error_set(FC_EINVAL, "background: expected {\"color\": \"#RRGGBB\"} or "
                          "{\"image\": FILE}");
  } else {
    return fc_error_set(FC_EINVAL, "background: expected \"#RRGGBB\", {\"color\": \"#RRGGBB\"} "
                        "or {\"image\": FILE}");
  }
  if (color && !parse_rgb(color, &s->background_rgb))
    return fc_error_set(FC_EINVAL, "background: colour '%.20s' is not #RRGGBB", color);
  if (image) {
    if (!path_ok(image))
      return fc_error_set(FC_EINVAL, "background.image: expected a file name in the shared "
                          "folder (relative, without '..')");
    s->background_image = g_strdup(image);
  }
  return 0;
}

static int has_words(const char *t) {
  for (const unsigned char *c = (const unsigned char *)t; *c; c++)
    if (*c >= 0x80 || isalnum(*c)) return 1;
  return 0;
}

static int spec_from_object(JsonObject *o, fc_video_spec *s) {
  const char *script, *audio, *avatar, *voice, *cb;
  int err;
  if ((err = str_member(o, "script", &script)) || (err = str_member(o, "audio", &audio)) ||
      (err = str_member(o, "avatar", &avatar)) || (err = str_member(o, "voice", &voice)) ||
      (err = str_member(o, "callback_url", &cb)))
    return err;
  if (script && audio)
    return fc_error_set(FC_EINVAL, "script: give either a script or audio, not both");
  if (!script && !audio)
    return fc_error_set(FC_EINVAL, "script: required (the words to speak), or audio");
  if (script) {
    if (strlen(script) > MAX_SCRIPT)
      return fc_error_set(FC_EINVAL, "script: longer than %d bytes", MAX_SCRIPT);
    if (!has_words(script)) return fc_error_set(FC_EINVAL, "script: no words to speak");
    s->script = g_strdup(script);
  }
  if (audio) {
    if (!path_ok(audio))
      return fc_error_set(FC_EINVAL, "audio: expected a file name in the shared folder "
                          "(relative, without '..')");
    s->audio = g_strdup(audio);
  }
  if (avatar) {
    if (!fc_avatar_id_valid(avatar))
      return fc_error_set(FC_EINVAL, "avatar: use 1-63 letters, digits, '_' or '-'");
    s->avatar = g_strdup(avatar);
  }
  if (voice) {
    if (!*voice || strlen(voice) > 200)
      return fc_error_set(FC_EINVAL, "voice: expected \"voice\" or \"provider:voice\" (1-200 "
                          "bytes)");
    for (const char *c = voice; *c; c++)
      if ((unsigned char)*c < 0x20)
        return fc_error_set(FC_EINVAL, "voice: control characters are not allowed");
    s->voice = g_strdup(voice);
  }
  JsonNode *n = json_object_get_member(o, "size");
  if (n && !JSON_NODE_HOLDS_NULL(n) && (err = parse_size(n, s))) return err;
  n = json_object_get_member(o, "background");
  if (n && !JSON_NODE_HOLDS_NULL(n) && (err = parse_background(n, s))) return err;
  n = json_object_get_member(o, "captions");
  if (n && !JSON_NODE_HOLDS_NULL(n)) {
    if (!JSON_NODE_HOLDS_VALUE(n) || json_node_get_value_type(n) != G_TYPE_BOOLEAN)
      return fc_error_set(FC_EINVAL, "captions: expected true or false");
    s->captions = json_node_get_boolean(n);
  }
  if (cb) {
    if ((g_ascii_strncasecmp(cb, "http://", 7) && g_ascii_strncasecmp(cb, "https://", 8)) ||
        strlen(cb) > 2048 || strpbrk(cb, " \t\r\n"))
      return fc_error_set(FC_EINVAL, "callback_url: expected an http:// or https:// URL (at "
                          "most 2048 bytes, no spaces)");
    s->callback_url = g_strdup(cb);
  }
  return 0;
}

int fc_video_spec_parse(const char *json, size_t len, fc_video_spec **out) {
  *out = NULL;
  if (!json) return fc_error_set(FC_EINVAL, "body: empty");
  /* room for a script at its limit written with escapes (\u00XX: 6 bytes a character), as
   * fc_video_spec_json may write it back */
  if (len > MAX_BODY) return fc_error_set(FC_EINVAL, "body: longer than %d bytes", MAX_BODY);
  char why[200];
  JsonObject *o;
  JsonParser *p = fc_json_parse_object(json, len, FC_JSON_MAX_DEPTH, &o, why, sizeof why);
  if (!p) return fc_error_set(FC_EINVAL, "body: %s", why);
  fc_video_spec *s = g_new0(fc_video_spec, 1);
  int err = spec_from_object(o, s);
  g_object_unref(p);
  if (err) {
    fc_video_spec_free(s);
    return err;
  }
  *out = s;
  return 0;
}

static void add_str(JsonBuilder *b, const char *name, const char *v) {
  if (!v) return;
  json_builder_set_member_name(b, name);
  json_builder_add_string_value(b, v);
}

static char *builder_text(JsonBuilder *b) {
  JsonNode *root = json_builder_get_root(b);
  JsonGenerator *g = json_generator_new();
  json_generator_set_root(g, root);
  char *t = json_generator_to_data(g, NULL);
  g_object_unref(g);
  json_node_unref(root);
  g_object_unref(b);
  return t;
}

char *fc_video_spec_json(const fc_video_spec *s) {
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  add_str(b, "script", s->script);
  add_str(b, "audio", s->audio);
  add_str(b, "avatar", s->avatar);
  add_str(b, "voice", s->voice);
  if (s->width > 0 && s->height > 0) {
    json_builder_set_member_name(b, "size");
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "width");
    json_builder_add_int_value(b, s->width);
    json_builder_set_member_name(b, "height");
    json_builder_add_int_value(b, s->height);
    json_builder_end_object(b);
  }
  char rgb[8];
  snprintf(rgb, sizeof rgb, "#%06x", (unsigned)(s->background_rgb & 0xffffff));
  json_builder_set_member_name(b, "background");
  json_builder_begin_object(b);
  add_str(b, "color", rgb);
  add_str(b, "image", s->background_image);
  json_builder_end_object(b);
  json_builder_set_member_name(b, "captions");
  json_builder_add_boolean_value(b, s->captions != 0);
  add_str(b, "callback_url", s->callback_url);
  json_builder_end_object(b);
  return builder_text(b);
}

/* ---- the plan ---- */

void fc_video_plan_free(fc_video_plan *p) {
  if (!p) return;
  for (int k = 0; k < p->n; k++) {
    for (int i = 0; i < p->shards[k].n_sentences; i++) g_free(p->shards[k].sentences[i]);
    g_free(p->shards[k].sentences);
  }
  g_free(p->shards);
  g_free(p);
}

int fc_video_plan_shards(const fc_video_plan *p) { return p ? p->n : 0; }

int fc_video_plan_sentences(const fc_video_plan *p, int k) {
  return p && k >= 0 && k < p->n ? p->shards[k].n_sentences : 0;
}

const char *fc_video_plan_sentence(const fc_video_plan *p, int k, int i) {
  return i >= 0 && i < fc_video_plan_sentences(p, k) ? p->shards[k].sentences[i] : NULL;
}

/* Where the sentence that starts at t ends (bytes): after ., !, ? or an ellipsis followed by
 * space (closing quotes and brackets go with it), at a line break, after CJK full stops, or at
 * a space near SENTENCE_MAX when none comes. */
static size_t sentence_len(const char *t) {
  size_t space = 0, i = 0;
  for (; t[i]; i++) {
    const unsigned char c = (unsigned char)t[i];
    if (c == '\n') return i + 1;
    if (c == '.' || c == '!' || c == '?' || c == ';') {
      size_t j = i + 1;
      while (t[j] && strchr("\"')]", t[j])) j++;
      if (!t[j] || t[j] == ' ' || t[j] == '\n' || t[j] == '\t') return j;
    }
    /* 。！？ (E3 80 82, EF BC 81, EF BC 9F) */
    if (c == 0xE3 && (unsigned char)t[i + 1] == 0x80 && (unsigned char)t[i + 2] == 0x82)
      return i + 3;
    if (c == 0xEF && (unsigned char)t[i + 1] == 0xBC &&
        ((unsigned char)t[i + 2] == 0x81 || (unsigned char)t[i + 2] == 0x9F))
      return i + 3;
    if (c == ' ') space = i + 1;
    if (i >= SENTENCE_MAX && space) return space;
    if (i >= 2 * SENTENCE_MAX && (c & 0xC0) != 0x80) return i; /* no space at all: at a char */
  }
  return i;
}

/* The script's sentences, stripped, the ones without words dropped. */
static GPtrArray *split_sentences(const char *script) {
  GPtrArray *a = g_ptr_array_new();
  for (const char *t = script; *t;) {
    size_t n = sentence_len(t);
    char *s = g_strstrip(g_strndup(t, n));
    /* runs of white space inside (line breaks kept as spaces) */
    for (char *c = s; *c; c++)
      if (*c == '\n' || *c == '\r' || *c == '\t') *c = ' ';
    if (has_words(s)) g_ptr_array_add(a, s);
    else g_free(s);
    t += n;
  }
  return a;
}

int fc_video_plan_create(const fc_video_spec *s, int max_shards, int min_shard_chars,
                         fc_video_plan **out) {
  *out = NULL;
  if (!s || (!s->script && !s->audio))
    return fc_error_set(FC_EINVAL, "plan: a spec with a script or audio is needed");
  if (max_shards < 1) max_shards = 1;
  if (max_shards > FC_PLAN_MAX_SHARDS) max_shards = FC_PLAN_MAX_SHARDS;
  if (min_shard_chars <= 0) min_shard_chars = DEFAULT_MIN_CHARS;
  fc_video_plan *p = g_new0(fc_video_plan, 1);
  if (s->audio) { /* one shard: the length is known only once decoded */
    p->kind = FC_PLAN_AUDIO;
    p->n = 1;
    p->shards = g_new0(fc_plan_shard, 1);
    p->shards[0].frames = -1;
    *out = p;
    return 0;
  }
  p->kind = FC_PLAN_SCRIPT;
  GPtrArray *sent = split_sentences(s->script);
  if (!sent->len) {
    g_ptr_array_free(sent, TRUE);
    g_free(p);
    return fc_error_set(FC_EINVAL, "script: no words to speak");
  }
  size_t total = 0;
  for (guint i = 0; i < sent->len; i++) total += strlen(sent->pdata[i]);
  /* Each shard at least min chars and at least total/max_shards, so there are at most
   * max_shards of them; a short tail joins the shard before it. */
  size_t target = (total + (size_t)max_shards - 1) / (size_t)max_shards;
  if (target < (size_t)min_shard_chars) target = (size_t)min_shard_chars;
  p->shards = g_new0(fc_plan_shard, sent->len);
  size_t acc = 0;
  for (guint i = 0; i < sent->len; i++) {
    if (p->n == 0 || acc >= target) {
      p->n++;
      acc = 0;
    }
    fc_plan_shard *sh = &p->shards[p->n - 1];
    sh->sentences = g_renew(char *, sh->sentences, sh->n_sentences + 1);
    sh->sentences[sh->n_sentences++] = sent->pdata[i];
    acc += strlen(sent->pdata[i]);
  }
  if (p->n > 1 && acc < (size_t)min_shard_chars / 2) { /* a short tail: onto the one before */
    fc_plan_shard *a = &p->shards[p->n - 2], *b = &p->shards[p->n - 1];
    a->sentences = g_renew(char *, a->sentences, a->n_sentences + b->n_sentences);
    for (int i = 0; i < b->n_sentences; i++) a->sentences[a->n_sentences++] = b->sentences[i];
    g_free(b->sentences);
    b->sentences = NULL, b->n_sentences = 0;
    p->n--;
  }
  g_ptr_array_free(sent, TRUE); /* the strings moved into the shards */
  *out = p;
  return 0;
}

char *fc_video_plan_json(const fc_video_plan *p) {
  JsonBuilder *b = json_builder_new();
  json_builder_begin_object(b);
  json_builder_set_member_name(b, "version");
  json_builder_add_int_value(b, 1);
  add_str(b, "kind", p->kind == FC_PLAN_AUDIO ? "audio" : "script");
  json_builder_set_member_name(b, "shards");
  json_builder_begin_array(b);
  for (int k = 0; k < p->n; k++) {
    const fc_plan_shard *sh = &p->shards[k];
    if (p->kind == FC_PLAN_AUDIO) {
      json_builder_begin_object(b);
      json_builder_set_member_name(b, "from");
      json_builder_add_int_value(b, sh->from);
      json_builder_set_member_name(b, "frames");
      json_builder_add_int_value(b, sh->frames);
      json_builder_end_object(b);
      continue;
    }
    json_builder_begin_array(b);
    for (int i = 0; i < sh->n_sentences; i++) json_builder_add_string_value(b, sh->sentences[i]);
    json_builder_end_array(b);
  }
  json_builder_end_array(b);
  json_builder_end_object(b);
  return builder_text(b);
}

static int plan_from_object(JsonObject *o, fc_video_plan *p) {
  const char *kind = fc_json_str_member(o, "kind");
  JsonNode *v = json_object_get_member(o, "version");
  if (!v || !JSON_NODE_HOLDS_VALUE(v) || json_node_get_value_type(v) != G_TYPE_INT64 ||
      json_node_get_int(v) != 1)
    return fc_error_set(FC_EUNSUPPORTED, "plan: version 1 expected");
  if (!kind || (strcmp(kind, "script") && strcmp(kind, "audio")))
    return fc_error_set(FC_EFORMAT, "plan: kind must be \"script\" or \"audio\"");
  p->kind = strcmp(kind, "audio") ? FC_PLAN_SCRIPT : FC_PLAN_AUDIO;
  JsonNode *sn = json_object_get_member(o, "shards");
  if (!sn || !JSON_NODE_HOLDS_ARRAY(sn)) return fc_error_set(FC_EFORMAT, "plan: no shards");
  JsonArray *a = json_node_get_array(sn);
  guint n = json_array_get_length(a);
  if (n < 1 || n > FC_PLAN_MAX_SHARDS)
    return fc_error_set(FC_EFORMAT, "plan: 1 to %d shards expected", FC_PLAN_MAX_SHARDS);
  p->shards = g_new0(fc_plan_shard, n);
  long sentences = 0;
  for (guint k = 0; k < n; k++) {
    JsonNode *e = json_array_get_element(a, k);
    fc_plan_shard *sh = &p->shards[p->n++]; /* counted first: freed whatever happens below */
    if (p->kind == FC_PLAN_AUDIO) {
      if (!JSON_NODE_HOLDS_OBJECT(e)) return fc_error_set(FC_EFORMAT, "plan: shard %u", k);
      JsonObject *so = json_node_get_object(e);
      JsonNode *f = json_object_get_member(so, "from"), *c = json_object_get_member(so, "frames");
      if (!f || !c || !JSON_NODE_HOLDS_VALUE(f) || !JSON_NODE_HOLDS_VALUE(c) ||
          json_node_get_value_type(f) != G_TYPE_INT64 ||
          json_node_get_value_type(c) != G_TYPE_INT64)
        return fc_error_set(FC_EFORMAT, "plan: shard %u: from and frames expected", k);
      sh->from = json_node_get_int(f), sh->frames = json_node_get_int(c);
      if (sh->from < 0 || sh->from > INT32_MAX || sh->frames < -1 || sh->frames > INT32_MAX)
        return fc_error_set(FC_EFORMAT, "plan: shard %u: range out of bounds", k);
      continue;
    }
    if (!JSON_NODE_HOLDS_ARRAY(e)) return fc_error_set(FC_EFORMAT, "plan: shard %u", k);
    JsonArray *sa = json_node_get_array(e);
    guint m = json_array_get_length(sa);
    if (m < 1 || (sentences += m) > FC_PLAN_MAX_SENTENCES)
      return fc_error_set(FC_EFORMAT, "plan: shard %u: 1 to %d sentences expected", k,
                          FC_PLAN_MAX_SENTENCES);
    sh->sentences = g_new0(char *, m);
    for (guint i = 0; i < m; i++) {
      JsonNode *t = json_array_get_element(sa, i);
      if (!JSON_NODE_HOLDS_VALUE(t) || json_node_get_value_type(t) != G_TYPE_STRING ||
          !g_utf8_validate(json_node_get_string(t), -1, NULL) ||
          !has_words(json_node_get_string(t)))
        return fc_error_set(FC_EFORMAT, "plan: shard %u: sentence %u is not text", k, i);
      sh->sentences[sh->n_sentences++] = g_strdup(json_node_get_string(t));
    }
  }
  return 0;
}

int fc_video_plan_parse(const char *json, size_t len, fc_video_plan **out) {
  *out = NULL;
  if (!json) return fc_error_set(FC_EFORMAT, "plan: empty");
  char why[200];
  JsonObject *o;
  JsonParser *jp = fc_json_parse_object(json, len, FC_JSON_MAX_DEPTH, &o, why, sizeof why);
  if (!jp) return fc_error_set(FC_EFORMAT, "plan: %s", why);
  fc_video_plan *p = g_new0(fc_video_plan, 1);
  int err = plan_from_object(o, p);
  g_object_unref(jp);
  if (err) {
    fc_video_plan_free(p);
    return err;
  }
  *out = p;
  return 0;
}
