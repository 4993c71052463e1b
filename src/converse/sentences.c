/* The sentence splitter (sentences.h). One buffer of what has not come out yet; each call scans
 * it from the start for the first place a sentence ends. Answers are a few KB, so scanning again
 * is cheaper than keeping state across pushes that may cut a character in half. */
#include "converse/sentences.h"

#include <glib.h>
#include <string.h>

struct fc_sentences {
  GString *buf;
  size_t max;
};

fc_sentences *fc_sentences_create(size_t max_bytes) {
  fc_sentences *sp = g_try_new0(fc_sentences, 1);
  if (!sp) return NULL;
  sp->buf = g_string_new(NULL);
  sp->max = max_bytes ? (max_bytes < 16 ? 16 : max_bytes) : 300;
  return sp;
}

void fc_sentences_destroy(fc_sentences *sp) {
  if (!sp) return;
  g_string_free(sp->buf, TRUE);
  g_free(sp);
}

void fc_sentences_push(fc_sentences *sp, const char *text, size_t n) {
  if (n) g_string_append_len(sp->buf, text, (gssize)n);
}

void fc_sentences_reset(fc_sentences *sp) { g_string_truncate(sp->buf, 0); }

/* Length of the UTF-8 sequence that starts with byte c (1 for stray bytes: they move on). */
static size_t seq_len(unsigned char c) {
  return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 1;
}

static int is_ascii_end(unsigned char c) { return c == '.' || c == '!' || c == '?'; }

static int starts(const char *p, size_t left, const char *seq) {
  size_t k = strlen(seq);
  return left >= k && memcmp(p, seq, k) == 0;
}

/* A mark that ends a sentence only before white space: . ! ? … (0 if none; else its bytes). */
static size_t latin_end(const char *p, size_t left) {
  if (is_ascii_end((unsigned char)*p)) return 1;
  return starts(p, left, "\xE2\x80\xA6") ? 3 : 0; /* … */
}

/* A CJK full stop, exclamation, question mark or semicolon: 。！？； */
static size_t cjk_end(const char *p, size_t left) {
  static const char *const marks[] = {"\xE3\x80\x82", "\xEF\xBC\x81", "\xEF\xBC\x9F",
                                      "\xEF\xBC\x9B"};
  for (size_t i = 0; i < G_N_ELEMENTS(marks); i++)
    if (starts(p, left, marks[i])) return 3;
  return 0;
}

/* Closing quotes and brackets that belong to the sentence before them. */
static size_t closer(const char *p, size_t left) {
  if (*p && strchr("\"')]", *p)) return 1;
  static const char *const cl[] = {"\xE2\x80\x9D", "\xE2\x80\x99", "\xE3\x80\x8D",
                                    "\xE3\x80\x8F", "\xEF\xBC\x89", "\xE3\x80\x8B"};
  for (size_t i = 0; i < G_N_ELEMENTS(cl); i++)
    if (starts(p, left, cl[i])) return 3;
  return 0;
}

/* Where the first sentence ends (bytes), 0 when it is not known yet. */
static size_t find_end(const char *s, size_t n, int end) {
  size_t i = 0;
  while (i < n) {
    size_t k;
    if (s[i] == '\n') return i + 1;
    int cjk = 0;
    if ((k = latin_end(s + i, n - i)) || (cjk = (k = cjk_end(s + i, n - i)) != 0)) {
      size_t j = i + k, c;
      /* more marks ("?!", "...", "！？") and closers stay with this sentence */
      while (j < n && ((c = latin_end(s + j, n - j)) || (c = cjk_end(s + j, n - j)) ||
                       (c = closer(s + j, n - j))))
        j += c;
      /* what follows decides (a closer may be on its way, even half of one): wait for it */
      if (j >= n || j + seq_len((unsigned char)s[j]) > n) return end ? n : 0;
      if (cjk || s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') return j;
      i = j;
      continue;
    }
    i += seq_len((unsigned char)s[i]);
  }
  return 0;
}

/* Where to cut a sentence that ran past max bytes: after the last comma or space before max,
 * else at the last character boundary before it. */
static size_t cut_long(const char *s, size_t max) {
  size_t best = 0;
  for (size_t i = 0; i < max;) {
    size_t k = seq_len((unsigned char)s[i]);
    if (i + k > max) break;
    if (s[i] == ',' || s[i] == ' ' || s[i] == ';' || starts(s + i, max - i, "\xEF\xBC\x8C") ||
        starts(s + i, max - i, "\xE3\x80\x81"))
      best = i + k;
    i += k;
  }
  if (best) return best;
  size_t b = max;
  while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--; /* not inside a character */
  return b ? b : max;
}

static int has_word(const char *s) {
  for (const char *p = s; *p; p = g_utf8_next_char(p))
    if (g_unichar_isalnum(g_utf8_get_char(p))) return 1;
  return 0;
}

char *fc_sentences_next(fc_sentences *sp, int end) {
  GString *b = sp->buf;
  while (b->len) {
    size_t cut = find_end(b->str, b->len, end);
    if (cut > sp->max || (!cut && b->len > sp->max)) cut = cut_long(b->str, sp->max);
    if (!cut) {
      if (!end) return NULL;
      cut = b->len;
    }
    char *valid = g_utf8_make_valid(b->str, (gssize)cut);
    g_string_erase(b, 0, (gssize)cut);
    g_strstrip(valid);
    if (*valid && has_word(valid)) return valid;
    g_free(valid);
  }
  return NULL;
}
