/* The TTS services' wire formats, without any network (voice.h): streamed PCM and WAV, Edge's
 * frames, SSML and token, error bodies. Everything here takes bytes from a remote service, so
 * everything is bounded and fuzzed (tests/fuzz/fuzz_voice.c). */
#include "core/jsonin.h"
#include "facecast/error.h"
#include "speech/voice.h"

#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

/* ---- PCM and WAV ---- */

void fc_pcm_reader_init(fc_pcm_reader *r, int default_rate) {
  memset(r, 0, sizeof *r);
  r->rate = default_rate;
  r->channels = 1;
}

static uint32_t le32(const uint8_t *p) {
  return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* Parses the header collected so far: 1 needs more, 0 done (*used: header bytes, the rest
 * are samples), or an error. */
static int wav_header(fc_pcm_reader *r, size_t *used) {
  const uint8_t *h = r->hdr;
  size_t n = r->n_hdr;
  if (n < 12) return 1;
  if (memcmp(h + 8, "WAVE", 4)) return fc_error_set(FC_EREMOTE, "audio: RIFF but not WAVE");
  int have_fmt = 0;
  for (size_t at = 12;;) {
    if (at + 8 > n) return 1;
    uint32_t size = le32(h + at + 4);
    if (!memcmp(h + at, "data", 4)) {
      if (!have_fmt) return fc_error_set(FC_EREMOTE, "audio: WAV data before its format");
      *used = at + 8;
      return 0;
    }
    if (size > sizeof r->hdr) return fc_error_set(FC_EREMOTE, "audio: WAV header too long");
    if (at + 8 + size > n) return 1;
    if (!memcmp(h + at, "fmt ", 4)) {
      if (size < 16) return fc_error_set(FC_EREMOTE, "audio: WAV fmt chunk too short");
      unsigned fmt = le16(h + at + 8), ch = le16(h + at + 10), bits = le16(h + at + 22);
      uint32_t rate = le32(h + at + 12);
      if ((fmt != 1 && fmt != 0xFFFE) || bits != 16)
        return fc_error_set(FC_EREMOTE, "audio: WAV format %u, %u bits (16-bit PCM expected)",
                            fmt, bits);
      if (ch < 1 || ch > 8 || rate < 1000 || rate > 384000)
        return fc_error_set(FC_EREMOTE, "audio: WAV with %u channels at %u Hz", ch, rate);
      r->channels = (int)ch;
      r->rate = (int)rate;
      have_fmt = 1;
    }
    at += 8 + size + (size & 1);
  }
}

static int samples(fc_pcm_reader *r, const uint8_t *d, size_t n,
                   int (*out)(void *, const int16_t *, size_t, int), void *user) {
  size_t fb = 2 * (size_t)r->channels; /* bytes per sample frame */
  size_t k = 0;
  int err;
  const size_t cap = sizeof r->buf / sizeof r->buf[0];
  while (n) {
    if (r->n_carry || n < fb) { /* finish (or start) a frame cut by a piece's end */
      size_t take = fb - r->n_carry < n ? fb - r->n_carry : n;
      memcpy(r->carry + r->n_carry, d, take);
      r->n_carry += take;
      d += take;
      n -= take;
      if (r->n_carry < fb) break;
      r->n_carry = 0;
      int sum = 0;
      for (int c = 0; c < r->channels; c++) sum += (int16_t)le16(r->carry + 2 * c);
      r->buf[k++] = (int16_t)(sum / r->channels);
    } else {
      int sum = 0;
      for (int c = 0; c < r->channels; c++) sum += (int16_t)le16(d + 2 * c);
      r->buf[k++] = (int16_t)(sum / r->channels);
      d += fb;
      n -= fb;
    }
    if (k == cap) {
      if ((err = out(user, r->buf, k, r->rate))) return err;
      k = 0;
    }
  }
  return k ? out(user, r->buf, k, r->rate) : 0;
}

int fc_pcm_reader_feed(fc_pcm_reader *r, const uint8_t *data, size_t n,
                       int (*out)(void *user, const int16_t *pcm, size_t n, int rate),
                       void *user) {
  while (n && r->state < 2) {
    size_t room = sizeof r->hdr - r->n_hdr, take = n < room ? n : room;
    if (r->state == 0) take = take < 4 - r->n_hdr ? take : 4 - r->n_hdr;
    memcpy(r->hdr + r->n_hdr, data, take);
    r->n_hdr += take;
    data += take;
    n -= take;
    if (r->state == 0) {
      if (r->n_hdr < 4) return 0;
      if (memcmp(r->hdr, "RIFF", 4)) { /* headerless: the sniffed bytes are samples */
        r->state = 2;
        size_t k = r->n_hdr;
        r->n_hdr = 0;
        int err = samples(r, r->hdr, k, out, user);
        if (err) return err;
        break;
      }
      r->state = 1;
      continue;
    }
    size_t used = 0;
    int st = wav_header(r, &used);
    if (st < 0) return st;
    if (st == 1) {
      if (r->n_hdr == sizeof r->hdr)
        return fc_error_set(FC_EREMOTE, "audio: no WAV data within %zu bytes", sizeof r->hdr);
      continue;
    }
    r->state = 2;
    size_t extra = r->n_hdr - used;
    r->n_hdr = 0;
    if (extra) {
      uint8_t tmp[sizeof r->hdr];
      memcpy(tmp, r->hdr + used, extra);
      int err = samples(r, tmp, extra, out, user);
      if (err) return err;
    }
  }
  return n ? samples(r, data, n, out, user) : 0;
}

/* ---- Edge ---- */

#define EDGE_TOKEN "6A5AA1D4EAFF4E9FB37E23D68491D6F4"

void fc_edge_gec(int64_t unix_s, char out[65]) {
  /* Windows file time (100 ns ticks since 1601) rounded down to five minutes, then the token */
  uint64_t s = (uint64_t)(unix_s < 0 ? 0 : unix_s) + 11644473600ULL;
  char in[64];
  snprintf(in, sizeof in, "%llu%s", (unsigned long long)(s / 300 * 300 * 10000000ULL),
           EDGE_TOKEN);
  char *hex = g_compute_checksum_for_string(G_CHECKSUM_SHA256, in, -1);
  for (int i = 0; i < 64; i++) out[i] = g_ascii_toupper(hex[i]);
  out[64] = 0;
  g_free(hex);
}

char *fc_edge_ssml(const char *text, const char *voice) {
  char *clean = g_strdup(text);
  for (char *p = clean; *p; p++) /* control characters the service refuses */
    if ((unsigned char)*p < 32 && *p != '\n' && *p != '\r') *p = ' ';
  char *t = g_markup_escape_text(clean, -1);
  g_free(clean);
  /* a short name, lang-REGION-NameNeural, is sent in the long form Edge itself sends */
  char *name = NULL;
  const char *d1 = strchr(voice, '-'), *d2 = d1 ? strchr(d1 + 1, '-') : NULL;
  if (d2 && g_str_has_suffix(voice, "Neural") && !strstr(voice, "Microsoft")) {
    const char *last = strrchr(voice, '-');
    name = g_strdup_printf("Microsoft Server Speech Text to Speech Voice (%.*s, %s)",
                           (int)(last - voice), voice, last + 1);
  }
  char *v = g_markup_escape_text(name ? name : voice, -1);
  char *s = g_strdup_printf("<speak version='1.0' xmlns='http://www.w3.org/2001/10/synthesis' "
                            "xml:lang='en-US'><voice name='%s'><prosody pitch='+0Hz' "
                            "rate='+0%%' volume='+0%%'>%s</prosody></voice></speak>",
                            v, t);
  g_free(v);
  g_free(name);
  g_free(t);
  return s;
}

/* The value of header `key` in "Key:Value\r\n..." text (bounded), or NULL. */
static const char *header(const char *h, size_t n, const char *key, size_t *len) {
  size_t kl = strlen(key);
  for (size_t at = 0; at < n;) {
    const char *line = h + at;
    const char *end = memchr(line, '\n', n - at);
    size_t ll = end ? (size_t)(end - line) : n - at;
    if (ll > kl && !g_ascii_strncasecmp(line, key, kl) && line[kl] == ':') {
      size_t vl = ll - kl - 1;
      const char *v = line + kl + 1;
      while (vl && (*v == ' ')) v++, vl--;
      while (vl && (v[vl - 1] == '\r' || v[vl - 1] == ' ')) vl--;
      *len = vl;
      return v;
    }
    at += ll + 1;
  }
  return NULL;
}

int fc_edge_binary(const uint8_t *data, size_t size, const uint8_t **audio, size_t *n) {
  *audio = NULL;
  *n = 0;
  if (size < 2) return fc_error_set(FC_EREMOTE, "a binary frame of %zu bytes", size);
  size_t hl = (size_t)data[0] << 8 | data[1];
  if (2 + hl > size)
    return fc_error_set(FC_EREMOTE, "a frame's headers (%zu bytes) pass its end", hl);
  size_t pl, cl;
  const char *path = header((const char *)data + 2, hl, "Path", &pl);
  const char *ct = header((const char *)data + 2, hl, "Content-Type", &cl);
  if (!path || pl != 5 || memcmp(path, "audio", 5))
    return fc_error_set(FC_EREMOTE, "a binary frame that is not audio");
  if (ct && !(cl == 10 && !memcmp(ct, "audio/mpeg", 10)))
    return fc_error_set(FC_EREMOTE, "audio of type '%.*s' (MP3 expected)",
                        (int)(cl > 40 ? 40 : cl), ct);
  *audio = data + 2 + hl;
  *n = size - 2 - hl;
  return 0;
}

int fc_edge_text_path(const char *data, size_t size, char *path, size_t cap) {
  const char *end = g_strstr_len(data, (gssize)size, "\r\n\r\n");
  size_t pl, hl = end ? (size_t)(end - data) : size;
  const char *p = header(data, hl, "Path", &pl);
  if (!p || !cap) return fc_error_set(FC_EREMOTE, "a text frame without a Path");
  if (pl >= cap) pl = cap - 1;
  memcpy(path, p, pl);
  path[pl] = 0;
  return 0;
}

/* ---- errors ---- */

char *fc_voice_error_text(const char *body, size_t n) {
  char *out = NULL;
  JsonParser *jp = json_parser_new();
  if (n && n < 65536 && !fc_json_prescan(body, n, FC_JSON_MAX_DEPTH) &&
      json_parser_load_from_data(jp, body, (gssize)n, NULL)) {
    JsonNode *root = json_parser_get_root(jp);
    JsonObject *o = root && JSON_NODE_HOLDS_OBJECT(root) ? json_node_get_object(root) : NULL;
    JsonNode *e = o ? json_object_get_member(o, "error") : NULL;
    const char *m = NULL;
    if (e && JSON_NODE_HOLDS_OBJECT(e)) m = fc_json_str_member(json_node_get_object(e), "message");
    if (!m) m = fc_json_str_member(o, "message");
    if (!m) m = fc_json_str_member(o, "detail");
    if (!m) m = fc_json_str_member(o, "error");
    JsonNode *d = o ? json_object_get_member(o, "detail") : NULL;
    if (!m && d && JSON_NODE_HOLDS_ARRAY(d) && json_array_get_length(json_node_get_array(d))) {
      JsonNode *d0 = json_array_get_element(json_node_get_array(d), 0);
      if (JSON_NODE_HOLDS_OBJECT(d0)) m = fc_json_str_member(json_node_get_object(d0), "msg");
    }
    if (m && *m) out = g_strdup(m);
  }
  g_object_unref(jp);
  if (!out) out = g_strndup(body, n < 200 ? n : 200);
  /* one line of printable text */
  for (char *p = out; *p; p++) {
    if (*p == '\n' || *p == '\r') {
      *p = 0;
      break;
    }
    if ((unsigned char)*p < 32) *p = ' ';
  }
  /* validity first: g_utf8_strlen trusts lead bytes, and one that promises more bytes than
   * are left (0xfd at the end) walks past the terminator (fuzz target voice, 2026-12-02) */
  if (!g_utf8_validate(out, -1, NULL) || g_utf8_strlen(out, -1) > 200) {
    char *v = g_utf8_make_valid(out, -1);
    g_free(out);
    out = v;
    if (g_utf8_strlen(out, -1) > 200) *g_utf8_offset_to_pointer(out, 200) = 0;
  }
  return out;
}
