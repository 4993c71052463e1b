/* WAV reading and writing.
 *
 * The reader walks RIFF chunks (skipping the ones it does not need, honouring the pad byte of odd
 * sizes), validates "fmt " against what the data can hold, and converts PCM 8/16/24/32-bit and
 * IEEE float 32/64 (plain or WAVE_FORMAT_EXTENSIBLE) to mono float by averaging the channels.
 * Everything is bounds-checked against the buffer: a truncated or lying header is FC_EFORMAT with
 * a detail, never a read past the end. A data chunk whose size is 0 or 0xFFFFFFFF (what streaming
 * writers leave behind) is taken to run to the end of the file.
 */
#include "core/file.h"
#include "facecast/audio.h"
#include "facecast/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WAVE_PCM = 1, WAVE_FLOAT = 3, WAVE_EXTENSIBLE = 0xFFFE };

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void fc_audio_free(fc_audio *a) {
  if (!a) return;
  free(a->samples);
  a->samples = NULL;
  a->n = 0;
}

/* One sample of the given encoding as float in [-1, 1]. */
static float sample_at(const uint8_t *p, int fmt, int bits) {
  if (fmt == WAVE_FLOAT) {
    if (bits == 32) {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    double d;
    memcpy(&d, p, 8);
    return (float)d;
  }
  switch (bits) {
  case 8: return ((int)p[0] - 128) / 128.0f;
  case 16: return (int16_t)rd16(p) / 32768.0f;
  case 24: {
    int32_t v = (int32_t)((uint32_t)p[0] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 24);
    return (float)(v / 2147483648.0);
  }
  default: return (float)((int32_t)rd32(p) / 2147483648.0);
  }
}

int fc_wav_read_mem(const void *data, size_t size, const char *name, fc_audio *out) {
  const uint8_t *b = data;
  memset(out, 0, sizeof *out);
  if (!name) name = "audio";
  if (size < 12 || memcmp(b, "RIFF", 4) != 0 || memcmp(b + 8, "WAVE", 4) != 0)
    return fc_error_set(size >= 4 && memcmp(b, "RIFX", 4) == 0 ? FC_EUNSUPPORTED : FC_EFORMAT,
                        "%s: not a RIFF/WAVE file", name);

  int have_fmt = 0, fmt = 0, channels = 0, bits = 0;
  uint32_t rate = 0;
  size_t pos = 12;
  while (pos + 8 <= size) {
    const uint8_t *ck = b + pos;
    uint32_t ck_size = rd32(ck + 4);
    size_t body = pos + 8, avail = size - body;
    if (memcmp(ck, "fmt ", 4) == 0) {
      if (ck_size < 16 || ck_size > avail)
        return fc_error_set(FC_EFORMAT, "%s: truncated fmt chunk", name);
      fmt = rd16(b + body);
      channels = rd16(b + body + 2);
      rate = rd32(b + body + 4);
      int block_align = rd16(b + body + 12);
      bits = rd16(b + body + 14);
      if (fmt == WAVE_EXTENSIBLE) {
        if (ck_size < 40) return fc_error_set(FC_EFORMAT, "%s: truncated extensible fmt", name);
        fmt = rd16(b + body + 24); /* first two bytes of the sub-format GUID */
      }
      if (fmt != WAVE_PCM && fmt != WAVE_FLOAT)
        return fc_error_set(FC_EUNSUPPORTED, "%s: unsupported WAV encoding 0x%04x "
                            "(PCM and IEEE float are supported)", name, fmt);
      if (channels < 1 || channels > 64)
        return fc_error_set(FC_EFORMAT, "%s: bad channel count %d", name, channels);
      if (rate < 1000 || rate > 768000)
        return fc_error_set(FC_EFORMAT, "%s: bad sample rate %u", name, rate);
      int ok_bits = fmt == WAVE_FLOAT ? (bits == 32 || bits == 64)
                                      : (bits == 8 || bits == 16 || bits == 24 || bits == 32);
      if (!ok_bits)
        return fc_error_set(FC_EUNSUPPORTED, "%s: unsupported sample size %d bits", name, bits);
      if (block_align != channels * bits / 8)
        return fc_error_set(FC_EFORMAT, "%s: block align %d does not match %d channels of %d "
                            "bits", name, block_align, channels, bits);
      have_fmt = 1;
    } else if (memcmp(ck, "data", 4) == 0) {
      if (!have_fmt) return fc_error_set(FC_EFORMAT, "%s: data chunk before fmt chunk", name);
      size_t len = ck_size;
      if (ck_size == 0 || ck_size == 0xFFFFFFFFu) len = avail; /* streamed, size never filled */
      else if (len > avail)
        return fc_error_set(FC_EFORMAT, "%s: truncated: data chunk says %u bytes, %zu present",
                            name, ck_size, avail);
      size_t frame_bytes = (size_t)channels * (size_t)bits / 8;
      size_t frames = len / frame_bytes;
      if (frames == 0) return fc_error_set(FC_EFORMAT, "%s: no audio samples", name);
      out->samples = malloc(frames * sizeof(float));
      if (!out->samples) return fc_error_set(FC_ENOMEM, "%s: out of memory", name);
      const uint8_t *p = b + body;
      const float inv = 1.0f / (float)channels;
      for (size_t i = 0; i < frames; i++) {
        float acc = 0;
        for (int c = 0; c < channels; c++, p += bits / 8) acc += sample_at(p, fmt, bits);
        float v = acc * inv;
        out->samples[i] = v != v ? 0.0f : v; /* a NaN in float data would poison the DSP */
      }
      out->n = frames;
      out->rate = (int)rate;
      return FC_OK;
    }
    if (ck_size > avail) break;
    pos = body + ck_size + (ck_size & 1);
  }
  return fc_error_set(FC_EFORMAT, "%s: %s", name, have_fmt ? "no data chunk" : "no fmt chunk");
}

int fc_wav_read(const char *path, fc_audio *out) {
  uint8_t *data = NULL;
  size_t size = 0;
  memset(out, 0, sizeof *out);
  int err = fc_file_read(path, (size_t)1 << 31, &data, &size);
  if (err) return err;
  err = fc_wav_read_mem(data, size, path, out);
  free(data);
  return err;
}

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  put16(p, (uint16_t)v);
  put16(p + 2, (uint16_t)(v >> 16));
}

int fc_wav_write(const char *path, const float *samples, size_t n, int rate) {
  if (n > (0xFFFFFFFFu - 36) / 2) return fc_error_set(FC_EINVAL, "%s: too long for WAV", path);
  FILE *f = fopen(path, "wb");
  if (!f) return fc_error_set(FC_EIO, "%s: %s", path, strerror(errno));
  uint8_t h[44];
  memcpy(h, "RIFF", 4);
  put32(h + 4, (uint32_t)(36 + 2 * n));
  memcpy(h + 8, "WAVEfmt ", 8);
  put32(h + 16, 16);
  put16(h + 20, WAVE_PCM);
  put16(h + 22, 1);
  put32(h + 24, (uint32_t)rate);
  put32(h + 28, (uint32_t)rate * 2);
  put16(h + 32, 2);
  put16(h + 34, 16);
  memcpy(h + 36, "data", 4);
  put32(h + 40, (uint32_t)(2 * n));
  int ok = fwrite(h, 1, 44, f) == 44;
  uint8_t buf[4096];
  for (size_t i = 0; ok && i < n;) {
    size_t k = 0;
    for (; k < sizeof buf / 2 && i < n; k++, i++) {
      float v = samples[i] * 32767.0f;
      v = v > 32767.0f ? 32767.0f : v < -32768.0f ? -32768.0f : v;
      put16(buf + 2 * k, (uint16_t)(int16_t)lrintf(v));
    }
    ok = fwrite(buf, 2, k, f) == k;
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok) {
    remove(path);
    return fc_error_set(FC_EIO, "%s: write failed", path);
  }
  return FC_OK;
}
