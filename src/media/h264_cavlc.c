/* CAVLC and NAL writing (see h264_cavlc.h). The variable-length code tables are ITU-T H.264's
 * Tables 9-5 (coeff_token), 9-7/9-8/9-9a (total_zeros) and 9-10 (run_before), written here as
 * the standard prints them — strings of bits — and turned into (code, length) pairs once. The
 * test (test_h264_still) decodes what they write with libavcodec and openh264 and compares
 * every pixel with the encoder's own reconstruction. */
#include "media/h264_cavlc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* coeff_token by nC range (0-1, 2-3, 4-7, 8+), [TotalCoeff][TrailingOnes]; "" cannot occur. */
static const char *const COEFF_TOKEN[4][17][4] = {
    {{"1", "", "", ""},
     {"000101", "01", "", ""},
     {"00000111", "000100", "001", ""},
     {"000000111", "00000110", "0000101", "00011"},
     {"0000000111", "000000110", "00000101", "000011"},
     {"00000000111", "0000000110", "000000101", "0000100"},
     {"0000000001111", "00000000110", "0000000101", "00000100"},
     {"0000000001011", "0000000001110", "00000000101", "000000100"},
     {"0000000001000", "0000000001010", "0000000001101", "0000000100"},
     {"00000000001111", "00000000001110", "0000000001001", "00000000100"},
     {"00000000001011", "00000000001010", "00000000001101", "0000000001100"},
     {"000000000001111", "000000000001110", "00000000001001", "00000000001100"},
     {"000000000001011", "000000000001010", "000000000001101", "00000000001000"},
     {"0000000000001111", "000000000000001", "000000000001001", "000000000001100"},
     {"0000000000001011", "0000000000001110", "0000000000001101", "000000000001000"},
     {"0000000000000111", "0000000000001010", "0000000000001001", "0000000000001100"},
     {"0000000000000100", "0000000000000110", "0000000000000101", "0000000000001000"}},
    {{"11", "", "", ""},
     {"001011", "10", "", ""},
     {"000111", "00111", "011", ""},
     {"0000111", "001010", "001001", "0101"},
     {"00000111", "000110", "000101", "0100"},
     {"00000100", "0000110", "0000101", "00110"},
     {"000000111", "00000110", "00000101", "001000"},
     {"00000001111", "000000110", "000000101", "000100"},
     {"00000001011", "00000001110", "00000001101", "0000100"},
     {"000000001111", "00000001010", "00000001001", "000000100"},
     {"000000001011", "000000001110", "000000001101", "00000001100"},
     {"000000001000", "000000001010", "000000001001", "00000001000"},
     {"0000000001111", "0000000001110", "0000000001101", "000000001100"},
     {"0000000001011", "0000000001010", "0000000001001", "0000000001100"},
     {"0000000000111", "00000000001011", "0000000000110", "0000000001000"},
     {"00000000001001", "00000000001000", "00000000001010", "0000000000001"},
     {"00000000000111", "00000000000110", "00000000000101", "00000000000100"}},
    {{"1111", "", "", ""},
     {"001111", "1110", "", ""},
     {"001011", "01111", "1101", ""},
     {"001000", "01100", "01110", "1100"},
     {"0001111", "01010", "01011", "1011"},
     {"0001011", "01000", "01001", "1010"},
     {"0001001", "001110", "001101", "1001"},
     {"0001000", "001010", "001001", "1000"},
     {"00001111", "0001110", "0001101", "01101"},
     {"00001011", "00001110", "0001010", "001100"},
     {"000001111", "00001010", "00001101", "0001100"},
     {"000001011", "000001110", "00001001", "00001100"},
     {"000001000", "000001010", "000001101", "00001000"},
     {"0000001101", "000000111", "000001001", "000001100"},
     {"0000001001", "0000001100", "0000001011", "0000001010"},
     {"0000000101", "0000001000", "0000000111", "0000000110"},
     {"0000000001", "0000000100", "0000000011", "0000000010"}},
    {{0}}, /* nC >= 8: a 6-bit fixed-length code, made in init() */
};
/* 4:2:0 chroma DC (nC == -1), [TotalCoeff 0..4][TrailingOnes] */
static const char *const COEFF_TOKEN_CDC[5][4] = {
    {"01", "", "", ""},
    {"000111", "1", "", ""},
    {"000100", "000110", "001", ""},
    {"000011", "0000011", "0000010", "000101"},
    {"000010", "00000011", "00000010", "0000000"},
};
/* total_zeros of 4x4 blocks, [TotalCoeff 1..15][total_zeros] */
static const char *const TOTAL_ZEROS[16][16] = {
    {0},
    {"1", "011", "010", "0011", "0010", "00011", "00010", "000011", "000010", "0000011", "0000010",
     "00000011", "00000010", "000000011", "000000010", "000000001"},
    {"111", "110", "101", "100", "011", "0101", "0100", "0011", "0010", "00011", "00010",
     "000011", "000010", "000001", "000000"},
    {"0101", "111", "110", "101", "0100", "0011", "100", "011", "0010", "00011", "00010",
     "000001", "00001", "000000"},
    {"00011", "111", "0101", "0100", "110", "101", "100", "0011", "011", "0010", "00010",
     "00001", "00000"},
    {"0101", "0100", "0011", "111", "110", "101", "100", "011", "0010", "00001", "0001", "00000"},
    {"000001", "00001", "111", "110", "101", "100", "011", "010", "0001", "001", "000000"},
    {"000001", "00001", "101", "100", "011", "11", "010", "0001", "001", "000000"},
    {"000001", "0001", "00001", "011", "11", "10", "010", "001", "000000"},
    {"000001", "000000", "0001", "11", "10", "001", "01", "00001"},
    {"00001", "00000", "001", "11", "10", "01", "0001"},
    {"0000", "0001", "001", "010", "1", "011"},
    {"0000", "0001", "01", "1", "001"},
    {"000", "001", "1", "01"},
    {"00", "01", "1"},
    {"0", "1"},
};
/* total_zeros of 4:2:0 chroma DC, [TotalCoeff 1..3][total_zeros] */
static const char *const TOTAL_ZEROS_CDC[4][4] = {
    {0}, {"1", "01", "001", "000"}, {"1", "01", "00"}, {"1", "0"}};
/* run_before, [min(zerosLeft, 7)][run_before] */
static const char *const RUN_BEFORE[8][15] = {
    {0},
    {"1", "0"},
    {"1", "01", "00"},
    {"11", "10", "01", "00"},
    {"11", "10", "01", "001", "000"},
    {"11", "10", "011", "010", "001", "000"},
    {"11", "000", "001", "011", "010", "101", "100"},
    {"111", "110", "101", "100", "011", "010", "001", "0001", "00001", "000001", "0000001",
     "00000001", "000000001", "0000000001", "00000000001"},
};
/* Table 9-4, inter column: code number -> coded_block_pattern; inverted in init(). */
static const uint8_t CBP_INTER[48] = {0,  16, 1,  2,  4,  8,  32, 3,  5,  10, 12, 15,
                                      47, 7,  11, 13, 14, 6,  9,  31, 35, 37, 42, 44,
                                      33, 34, 36, 40, 39, 43, 45, 46, 17, 18, 20, 24,
                                      19, 21, 26, 28, 23, 27, 29, 30, 22, 25, 38, 41};

typedef struct vlc {
  uint16_t code;
  uint8_t len;
} vlc;

static vlc ct[4][17][4], ct_cdc[5][4], tz[16][16], tz_cdc[4][4], rb[8][15];
static uint8_t cbp_code[48];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static vlc from_bits(const char *s) {
  vlc v = {0, 0};
  for (; s && *s; s++) v.code = (uint16_t)(v.code << 1 | (*s == '1')), v.len++;
  return v;
}

static void init(void) {
  for (int t = 0; t < 3; t++)
    for (int c = 0; c <= 16; c++)
      for (int o = 0; o < 4; o++) ct[t][c][o] = from_bits(COEFF_TOKEN[t][c][o]);
  /* nC >= 8: xxxxyy with xxxx = TotalCoeff - 1 and yy = TrailingOnes; 000011 for none */
  for (int c = 0; c <= 16; c++)
    for (int o = 0; o < 4 && o <= c; o++)
      ct[3][c][o] = c ? (vlc){(uint16_t)((c - 1) << 2 | o), 6} : (vlc){3, 6};
  for (int c = 0; c <= 4; c++)
    for (int o = 0; o < 4; o++) ct_cdc[c][o] = from_bits(COEFF_TOKEN_CDC[c][o]);
  for (int c = 1; c < 16; c++)
    for (int z = 0; z < 16; z++) tz[c][z] = from_bits(TOTAL_ZEROS[c][z]);
  for (int c = 1; c < 4; c++)
    for (int z = 0; z < 4; z++) tz_cdc[c][z] = from_bits(TOTAL_ZEROS_CDC[c][z]);
  for (int z = 1; z < 8; z++)
    for (int r = 0; r < 15; r++) rb[z][r] = from_bits(RUN_BEFORE[z][r]);
  for (int k = 0; k < 48; k++) cbp_code[CBP_INTER[k]] = (uint8_t)k;
}

void fc_bitw_init(fc_bitw *w, uint8_t *p, size_t cap) {
  memset(w, 0, sizeof *w);
  w->p = p;
  w->cap = cap;
  pthread_once(&once, init);
}

static inline void out_byte(fc_bitw *w, unsigned b) {
  if (w->escape && w->zeros >= 2 && b <= 3) {
    if (w->n < w->cap) w->p[w->n] = 3;
    w->n++;
    w->zeros = 0;
  }
  if (w->n < w->cap) w->p[w->n] = (uint8_t)b;
  w->n++;
  w->zeros = b ? 0 : w->zeros + 1;
}

void fc_bitw_put(fc_bitw *w, uint32_t v, int n) {
  if (n <= 0) return;
  w->acc = w->acc << n | (n == 32 ? v : v & ((1u << n) - 1));
  w->bits += n;
  while (w->bits >= 8) {
    w->bits -= 8;
    out_byte(w, (unsigned)(w->acc >> w->bits) & 0xff);
  }
}

void fc_bitw_ue(fc_bitw *w, uint32_t v) {
  const uint64_t x = (uint64_t)v + 1;
  const int len = 64 - __builtin_clzll(x);
  fc_bitw_put(w, 0, len - 1);
  if (len > 32) { /* v >= 2^32 - 1 cannot be asked for here; keep the code well-formed */
    fc_bitw_put(w, (uint32_t)(x >> 32), len - 32);
    fc_bitw_put(w, (uint32_t)x, 32);
  } else {
    fc_bitw_put(w, (uint32_t)x, len);
  }
}

void fc_bitw_se(fc_bitw *w, int32_t v) {
  fc_bitw_ue(w, v > 0 ? 2u * (uint32_t)v - 1 : 2u * (uint32_t)(-(int64_t)v));
}

void fc_bitw_nal_begin(fc_bitw *w, int nal_ref_idc, int nal_unit_type) {
  w->escape = 0;
  fc_bitw_put(w, 1, 32); /* 00 00 00 01 */
  fc_bitw_put(w, (uint32_t)(nal_ref_idc << 5 | nal_unit_type), 8);
  w->escape = 1;
  w->zeros = 0;
}

void fc_bitw_nal_end(fc_bitw *w) {
  fc_bitw_put(w, 1, 1);
  if (w->bits) fc_bitw_put(w, 0, 8 - w->bits);
  w->escape = 0;
}

void fc_bitw_cbp_inter(fc_bitw *w, int cbp) { fc_bitw_ue(w, cbp_code[cbp >= 0 && cbp < 48 ? cbp : 0]); }

static inline void put_vlc(fc_bitw *w, vlc v) { fc_bitw_put(w, v.code, v.len); }

/* One level (clause 9.2.2.1 read backwards): level_prefix and level_suffix for levelCode. */
static void put_level(fc_bitw *w, int code, int suffix_len) {
  if (suffix_len == 0) {
    if (code < 14) {
      fc_bitw_put(w, 1, code + 1);
    } else if (code < 30) {
      fc_bitw_put(w, 1, 15);
      fc_bitw_put(w, (uint32_t)(code - 14), 4);
    } else {
      fc_bitw_put(w, 1, 16);
      fc_bitw_put(w, (uint32_t)(code - 30), 12);
    }
  } else if (code < (15 << suffix_len)) {
    fc_bitw_put(w, 1, (code >> suffix_len) + 1);
    fc_bitw_put(w, (uint32_t)code & ((1u << suffix_len) - 1), suffix_len);
  } else {
    fc_bitw_put(w, 1, 16);
    fc_bitw_put(w, (uint32_t)(code - (15 << suffix_len)), 12);
  }
}

int fc_cavlc_block(fc_bitw *w, const int16_t *coeff, int max_coeff, int nc) {
  int lev[16], pos[16], total = 0;
  for (int i = max_coeff - 1; i >= 0; i--)
    if (coeff[i]) lev[total] = coeff[i], pos[total++] = i;
  int ones = 0;
  while (ones < total && ones < 3 && (lev[ones] == 1 || lev[ones] == -1)) ones++;

  if (nc < 0) put_vlc(w, ct_cdc[total][ones]);
  else put_vlc(w, ct[nc < 2 ? 0 : nc < 4 ? 1 : nc < 8 ? 2 : 3][total][ones]);
  if (!total) return 0;

  for (int i = 0; i < ones; i++) fc_bitw_put(w, lev[i] < 0, 1);
  int suffix_len = total > 10 && ones < 3;
  for (int i = ones; i < total; i++) {
    const int v = lev[i], a = abs(v);
    int code = v > 0 ? 2 * v - 2 : -2 * v - 1;
    if (i == ones && ones < 3) code -= 2; /* the first after fewer than 3 ones is not +-1 */
    put_level(w, code, suffix_len);
    if (!suffix_len) suffix_len = 1;
    if (a > (3 << (suffix_len - 1)) && suffix_len < 6) suffix_len++;
  }
  int zeros = pos[0] + 1 - total;
  if (total < max_coeff) put_vlc(w, nc < 0 ? tz_cdc[total][zeros] : tz[total][zeros]);
  for (int i = 0; i < total - 1 && zeros > 0; i++) {
    const int run = pos[i] - pos[i + 1] - 1;
    put_vlc(w, rb[zeros < 7 ? zeros : 7][run]);
    zeros -= run;
  }
  return total;
}
