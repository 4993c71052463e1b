/* Streaming sample-rate conversion (libsoxr): audio that arrives in pieces of any size (a TTS
 * service's chunks) converted piece by piece with the filter state carried across, so the
 * joins are seamless, unlike resampling each piece alone. Input is int16 or float mono; output
 * float mono at the engine's rate. The output buffer is the resampler's, reused and grown only
 * when a piece needs more room than any before it. */
#ifndef FC_RESAMPLER_H
#define FC_RESAMPLER_H

#include <stddef.h>
#include <stdint.h>

typedef struct fc_resampler fc_resampler;

/* NULL and *err (FC_EINVAL for a rate outside 1000..384000, FC_ENOMEM) on failure. */
fc_resampler *fc_resampler_create(int in_rate, int out_rate, int *err);
void fc_resampler_destroy(fc_resampler *r);

/* Converts n samples (flush: and returns what the filter still holds; no input may follow).
 * *out points into the resampler's buffer, valid until the next call; *n_out samples. */
int fc_resampler_s16(fc_resampler *r, const int16_t *in, size_t n, int flush, const float **out,
                     size_t *n_out);
int fc_resampler_f32(fc_resampler *r, const float *in, size_t n, int flush, const float **out,
                     size_t *n_out);

#endif
