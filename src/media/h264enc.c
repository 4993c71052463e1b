/* H.264 elementary streams for bulk shards (see h264enc.h): libx264 to Annex B, and Annex B
 * back to access units in AVC form.
 *
 * Settings: the preset without B-frames (a join may not cut between a picture and the one it
 * is predicted from ahead of it, and decode order = presentation order keeps a picture's index
 * its time), SPS/PPS before every IDR, a key frame every keyint pictures, one slice per picture
 * (frame threads, not sliced threads: the splitter below and the muxer see one VCL NAL per
 * picture either way, but frame threads are faster). With a constant quantizer the encoder is
 * told which macroblocks did not change (mb_info), which x264 honours only when the reference's
 * quantizer is not above the picture's, which a constant quantizer guarantees. No allocation
 * per picture: the mb_info arrays are made once.
 *
 * The default preset (params.preset NULL) is ultrafast with CABAC and the deblocking filter put
 * back: on a talking head most macroblocks are skipped, so what a preset costs is its analysis
 * of the few that are not, and ultrafast's is the cheapest; CABAC and the loop filter cost
 * next to nothing here and win back most of the quality and size. Measured on the default
 * avatar at QP 24 (FC_X264_STATS=1 prints x264's summary): veryfast 45.1 dB PSNR-Y, SSIM
 * 0.988, 237 kbit/s; this 44.6 dB, 0.987, 289 kbit/s, at about three quarters of the CPU per
 * frame of the whole render; plain ultrafast 44.3 dB, 313 kbit/s. */
#include "media/h264enc.h"

#include "facecast/error.h"

#include <stdlib.h>
#include <string.h>
#include <x264.h>

/* x264 reads a picture's mb_info while it encodes it, which with frame threads and look-ahead
 * is some pictures later; it tells when it is done through mb_info_free, but a ring longer
 * than anything it keeps needs no bookkeeping. */
#define MB_RING 64

struct fc_h264enc {
  x264_t *x;
  FILE *out;
  int w, h, mbw, mbh, use_mb_info;
  int64_t in, frames;
  uint8_t *mb[MB_RING];
  int mb_next;
};

fc_h264enc *fc_h264enc_create(const fc_h264enc_params *prm, FILE *out, int *err) {
  fc_h264enc *e = NULL;
  x264_param_t p;
  const char *preset = prm->preset ? prm->preset : "ultrafast";
  if (prm->width < 16 || prm->height < 16 || (prm->width | prm->height) & 1 || !out) {
    *err = fc_error_set(FC_EINVAL, "h264: bad size %dx%d", prm->width, prm->height);
    return NULL;
  }
  if (x264_param_default_preset(&p, preset, NULL) < 0) {
    *err = fc_error_set(FC_EINVAL, "h264: unknown x264 preset '%s'", preset);
    return NULL;
  }
  const int fps = prm->fps > 0 ? prm->fps : 25;
  p.i_log_level = X264_LOG_NONE;
  if (getenv("FC_X264_STATS")) { /* x264's PSNR/SSIM summary on stderr (tuning the settings) */
    p.i_log_level = X264_LOG_INFO;
    p.analyse.b_psnr = 1;
    p.analyse.b_ssim = 1;
  }
  if (!prm->preset) { /* ultrafast's analysis with the slower presets' entropy coder and loop
                       * filter: see the note at the top */
    p.b_cabac = 1;
    p.b_deblocking_filter = 1;
  }
  p.i_width = prm->width;
  p.i_height = prm->height;
  p.i_csp = X264_CSP_I420;
  p.i_threads = prm->threads > 0 ? prm->threads : 1;
  p.b_sliced_threads = 0;
  p.i_fps_num = (uint32_t)fps;
  p.i_fps_den = 1;
  p.i_timebase_num = 1;
  p.i_timebase_den = (uint32_t)fps;
  p.b_vfr_input = 0;
  p.i_bframe = 0;
  p.i_keyint_max = prm->keyint > 0 ? prm->keyint : 2 * fps;
  /* Key frames only at keyint: a talking head has no scene cuts, and without scene-cut
   * detection (nor B-frame decisions, VBV or MB-tree, none of which a constant quantizer
   * without B-frames uses) x264 needs no half-size look-ahead analysis of each picture. */
  p.i_scenecut_threshold = 0;
  p.rc.i_lookahead = 0;
  p.rc.b_mb_tree = 0;
  p.b_repeat_headers = 1;
  p.b_annexb = 1;
  p.b_aud = 0;
  if (prm->qp > 0) {
    p.rc.i_rc_method = X264_RC_CQP;
    p.rc.i_qp_constant = prm->qp;
    p.analyse.b_mb_info = 1;
  } else {
    p.rc.i_rc_method = X264_RC_CRF;
    p.rc.f_rf_constant = (float)(prm->crf > 0 ? prm->crf : 23);
  }
  if (x264_param_apply_profile(&p, "high") < 0) {
    *err = fc_error_set(FC_EINVAL, "h264: x264 refused the high profile");
    return NULL;
  }
  if (!(e = calloc(1, sizeof *e))) {
    *err = fc_error_set(FC_ENOMEM, "h264: out of memory");
    return NULL;
  }
  e->out = out;
  e->w = prm->width, e->h = prm->height;
  e->mbw = (e->w + 15) / 16, e->mbh = (e->h + 15) / 16;
  e->use_mb_info = prm->qp > 0;
  if (!(e->x = x264_encoder_open(&p))) {
    free(e);
    *err = fc_error_set(FC_EINVAL, "h264: x264 refused its settings (%dx%d, preset %s)",
                        prm->width, prm->height, preset);
    return NULL;
  }
  for (int i = 0; e->use_mb_info && i < MB_RING; i++)
    if (!(e->mb[i] = malloc((size_t)e->mbw * e->mbh))) {
      fc_h264enc_destroy(e);
      *err = fc_error_set(FC_ENOMEM, "h264: out of memory");
      return NULL;
    }
  *err = 0;
  return e;
}

static int write_nals(fc_h264enc *e, const x264_nal_t *nals, int size) {
  if (size <= 0) return 0;
  /* x264 lays a picture's NAL units out back to back from the first payload on. */
  if (fwrite(nals[0].p_payload, 1, (size_t)size, e->out) != (size_t)size)
    return fc_error_set(FC_EIO, "h264: cannot write the stream");
  e->frames++;
  return 0;
}

void fc_h264_mb_constant(uint8_t *map, int mbw, int mbh, const fc_rect *a, const fc_rect *b) {
  memset(map, X264_MBINFO_CONSTANT, (size_t)mbw * mbh);
  const fc_rect *rs[2] = {a, b};
  for (int k = 0; k < 2; k++) {
    const fc_rect r = *rs[k];
    if (r.w <= 0 || r.h <= 0) continue;
    int x0 = r.x / 16, y0 = r.y / 16, x1 = (r.x + r.w - 1) / 16, y1 = (r.y + r.h - 1) / 16;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 >= mbw) x1 = mbw - 1;
    if (y1 >= mbh) y1 = mbh - 1;
    for (int y = y0; y <= y1; y++) memset(map + (size_t)y * mbw + x0, 0, (size_t)(x1 - x0 + 1));
  }
}

/* Macroblocks outside the changed rect are the same as in the last picture. */
static uint8_t *constant_map(fc_h264enc *e, const fc_rect *changed) {
  uint8_t *m = e->mb[e->mb_next];
  e->mb_next = (e->mb_next + 1) % MB_RING;
  const fc_rect none = {0, 0, 0, 0};
  fc_h264_mb_constant(m, e->mbw, e->mbh, changed, &none);
  return m;
}

int fc_h264enc_encode(fc_h264enc *e, const uint8_t *i420, const fc_rect *changed) {
  x264_picture_t pic, out;
  x264_picture_init(&pic);
  pic.img.i_csp = X264_CSP_I420;
  pic.img.i_plane = 3;
  pic.img.plane[0] = (uint8_t *)i420;
  pic.img.plane[1] = (uint8_t *)i420 + (size_t)e->w * e->h;
  pic.img.plane[2] = pic.img.plane[1] + (size_t)(e->w / 2) * (e->h / 2);
  pic.img.i_stride[0] = e->w;
  pic.img.i_stride[1] = pic.img.i_stride[2] = e->w / 2;
  pic.i_pts = e->in;
  /* The first picture has nothing before it. */
  if (e->use_mb_info && changed && e->in > 0) pic.prop.mb_info = constant_map(e, changed);
  x264_nal_t *nals = NULL;
  int n = 0;
  const int size = x264_encoder_encode(e->x, &nals, &n, &pic, &out);
  if (size < 0) return fc_error_set(FC_EMEDIA, "h264: x264 failed to encode picture %lld",
                                    (long long)e->in);
  e->in++;
  return write_nals(e, nals, size);
}

int fc_h264enc_finish(fc_h264enc *e) {
  while (x264_encoder_delayed_frames(e->x) > 0) {
    x264_picture_t out;
    x264_nal_t *nals = NULL;
    int n = 0;
    const int size = x264_encoder_encode(e->x, &nals, &n, NULL, &out);
    if (size < 0) return fc_error_set(FC_EMEDIA, "h264: x264 failed to flush");
    int err = write_nals(e, nals, size);
    if (err) return err;
  }
  if (e->frames != e->in)
    return fc_error_set(FC_EMEDIA, "h264: %lld pictures in, %lld out", (long long)e->in,
                        (long long)e->frames);
  return fflush(e->out) ? fc_error_set(FC_EIO, "h264: cannot write the stream") : 0;
}

int64_t fc_h264enc_frames(const fc_h264enc *e) { return e->frames; }

void fc_h264enc_destroy(fc_h264enc *e) {
  if (!e) return;
  if (e->x) x264_encoder_close(e->x);
  for (int i = 0; i < MB_RING; i++) free(e->mb[i]);
  free(e);
}

/* ---- Annex B → access units ---- */

/* Index of the next 00 00 01 at or after `from`, or len. */
static size_t find_start(const uint8_t *b, size_t len, size_t from) {
  for (size_t i = from; i + 2 < len; i++) {
    if (b[i + 2] > 1) {
      i += 2; /* no start code can begin at i, i+1 or i+2 */
      continue;
    }
    if (!b[i] && !b[i + 1] && b[i + 2] == 1) return i;
  }
  return len;
}

int fc_h264_next_nal(const uint8_t *buf, size_t len, size_t *pos, const uint8_t **nal,
                     size_t *nal_len) {
  for (size_t p = find_start(buf, len, *pos); p < len; p = find_start(buf, len, p + 3)) {
    const size_t start = p + 3;
    size_t end = find_start(buf, len, start);
    *pos = end;
    while (end > start && !buf[end - 1]) end--; /* trailing zeros: the next start code's */
    if (end > start) {
      *nal = buf + start, *nal_len = end - start;
      return 1;
    }
  }
  *pos = len;
  return 0;
}

int fc_h264_next_au(const uint8_t *buf, size_t len, size_t *pos, uint8_t *out, size_t out_cap,
                    fc_h264_au *au) {
  memset(au, 0, sizeof *au);
  size_t p = *pos;
  while (p < len && !buf[p]) p++; /* leading zero bytes (a 4-byte start code's first) */
  if (p >= len) {
    *pos = len;
    return 0;
  }
  if (p < 2 || p + 1 >= len || buf[p] != 1 || buf[p - 1] || buf[p - 2])
    return fc_error_set(FC_EFORMAT, "h264: no start code at byte %zu", p);
  p -= 2; /* at the start code */
  int seen_vcl = 0;
  size_t w = 0;
  while (p < len) {
    const size_t nal = p + 3;
    size_t next = find_start(buf, len, nal);
    size_t end = next;
    while (end > nal && !buf[end - 1]) end--; /* trailing zeros: the next start code's */
    if (end <= nal) return fc_error_set(FC_EFORMAT, "h264: empty NAL unit at byte %zu", p);
    const int type = buf[nal] & 0x1f;
    const int vcl = type == 1 || type == 5;
    if (vcl) {
      if (end - nal < 2) return fc_error_set(FC_EFORMAT, "h264: short slice at byte %zu", p);
      /* first_mb_in_slice == 0 (ue(v) "1"): a new picture */
      if (seen_vcl && (buf[nal + 1] & 0x80)) break;
      seen_vcl = 1;
      au->key |= type == 5;
    } else if (seen_vcl && (type == 6 || type == 7 || type == 8 || type == 9 ||
                            (type >= 14 && type <= 18))) {
      break; /* what precedes the next picture */
    }
    if (type == 7 && !au->sps) au->sps = buf + nal, au->sps_len = end - nal;
    if (type == 8 && !au->pps) au->pps = buf + nal, au->pps_len = end - nal;
    if (type != 7 && type != 8 && type != 9) {
      const size_t n = end - nal;
      if (n > UINT32_MAX) return fc_error_set(FC_EFORMAT, "h264: NAL unit over 4 GB");
      if (w + 4 + n <= out_cap) { /* else only counted: the caller grows its buffer */
        out[w] = (uint8_t)(n >> 24), out[w + 1] = (uint8_t)(n >> 16);
        out[w + 2] = (uint8_t)(n >> 8), out[w + 3] = (uint8_t)n;
        memcpy(out + w + 4, buf + nal, n);
      }
      w += 4 + n;
    }
    p = next;
  }
  if (!seen_vcl) return fc_error_set(FC_EFORMAT, "h264: data without a picture at its end");
  au->size = w;
  if (w > out_cap) /* *pos stays: the same call with a buffer of au->size bytes succeeds */
    return fc_error_set(FC_ENOMEM, "h264: an access unit of %zu bytes, the buffer holds %zu", w,
                        out_cap);
  *pos = p;
  return 1;
}

int fc_h264_avcc(const uint8_t *sps, size_t sps_len, const uint8_t *pps, size_t pps_len,
                 uint8_t *out, size_t out_cap) {
  if (!sps || !pps || sps_len < 4 || pps_len < 1 || sps_len > 0xffff || pps_len > 0xffff)
    return fc_error_set(FC_EFORMAT, "h264: no usable SPS/PPS");
  const int high = sps[1] >= 100; /* profiles with chroma format fields in the record */
  const size_t n = 11 + sps_len + pps_len + (high ? 4 : 0);
  if (n > out_cap) return fc_error_set(FC_EFORMAT, "h264: parameter sets too large");
  size_t w = 0;
  out[w++] = 1;
  out[w++] = sps[1], out[w++] = sps[2], out[w++] = sps[3];
  out[w++] = 0xff; /* 4-byte NAL lengths */
  out[w++] = 0xe1; /* one SPS */
  out[w++] = (uint8_t)(sps_len >> 8), out[w++] = (uint8_t)sps_len;
  memcpy(out + w, sps, sps_len), w += sps_len;
  out[w++] = 1;
  out[w++] = (uint8_t)(pps_len >> 8), out[w++] = (uint8_t)pps_len;
  memcpy(out + w, pps, pps_len), w += pps_len;
  if (high) { /* 4:2:0, 8 bits (what the encoder above makes), no SPS extensions */
    out[w++] = 0xfc | 1;
    out[w++] = 0xf8;
    out[w++] = 0xf8;
    out[w++] = 0;
  }
  return (int)w;
}
