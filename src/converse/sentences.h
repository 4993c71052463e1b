/* Sentences out of streamed text: an LLM writes its answer a few characters at a time, and
 * speech should start as soon as the first sentence is whole, not when the answer is.
 *
 * Text is pushed as it arrives (pieces may cut UTF-8 characters anywhere); a sentence is
 * complete at ".", "!", "?" or "…" followed by white space (so "3.14" and "e.g.x" do not
 * split), at the CJK "。！？；" (at once: CJK text has no spaces), or at a newline, with
 * closing quotes and brackets after the mark kept in it. A sentence longer than max_bytes is cut
 * at its last comma or space before that (a CJK comma too), else at a character boundary, so
 * the voice never waits for a run-on answer. Sentences are trimmed; ones with no letter or digit
 * in them ("...", "**") are dropped. Pure: no threads, no I/O. */
#ifndef FC_SENTENCES_H
#define FC_SENTENCES_H

#include <stddef.h>

typedef struct fc_sentences fc_sentences;

/* max_bytes: the cap on one sentence (0 = 300; at least 16). NULL on allocation failure. */
fc_sentences *fc_sentences_create(size_t max_bytes);
void fc_sentences_destroy(fc_sentences *sp);

/* Appends n bytes of text (any bytes; invalid UTF-8 is replaced by U+FFFD on output, so a
 * sentence of invalid bytes may come out longer than max_bytes). */
void fc_sentences_push(fc_sentences *sp, const char *text, size_t n);

/* The next complete sentence (UTF-8, NUL-terminated, g_free it), or NULL when none is whole
 * yet. With end set the text is over: the rest comes out as a last sentence. */
char *fc_sentences_next(fc_sentences *sp, int end);

/* Forgets everything pushed (an interrupted turn). */
void fc_sentences_reset(fc_sentences *sp);

#endif
