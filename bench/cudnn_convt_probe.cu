/* cudnn_convt_probe: which layouts cuDNN runs fast for Wav2Lip's decoder, measured on the GPU.
 *
 * Question 1, the transposed convolutions (k3 s2 p1 op1, H -> 2H). facecast runs them as
 * cudnnConvolutionBackwardData plus a bias/ReLU pass; on the H200 cuDNN picks kernels without
 * tensor cores for them. The same layer is four sub-pixel convolutions: output (2m+a, 2n+b)
 * takes input rows {m} (a = 0, tap 1) or {m, m+1} (a = 1, taps 2, 0), the same for columns. With
 * one zero row and column after each image in the input, each phase is a plain forward
 * convolution (1x1, 1x2, 2x1, 2x2, no padding) whose output lands on every other row and column
 * of the result: a strided output descriptor, and bias + ReLU fused by cuDNN. Variants timed:
 *   A   backward data + our bias/ReLU kernel (what the engine does today)
 *   B4  the four phases, strided input and output, fused bias + ReLU (9 taps, no waste)
 *   B2  two convolutions (a = 0, 1), each writing both column phases as 2*Cout channels
 *       (12 taps of which 3 are zero; larger GEMMs)
 *   C   one 2x2 convolution to 4*Cout packed channels + our depth-to-space kernel (16 taps)
 *   O1, O2  a sub-pixel kernel of our own (bench/convt_subpixel.cu), two register budgets
 * Question 2, the decoder's concatenations: a 3x3 residual convolution writing its output
 * straight into the first channels of a buffer twice as wide (strided output) against a packed
 * output (the engine then copies it into the concat buffer).
 *
 * Every variant is checked against A (max abs difference) and timed with CUDA events (mean of
 * 20 runs after 3 warm-ups). A variant cuDNN refuses prints its status. Not part of the engine:
 * a measuring tool for bench/ (built by scripts/serve-device.sh pack, run by its `probe` mode).
 *
 * usage: cudnn_convt_probe [BATCH ...]     (default 1 16 256)
 * build: nvcc -O3 -arch=sm_90 bench/cudnn_convt_probe.cu bench/convt_subpixel.cu -lcudnn
 *        (scripts/serve-device.sh pack does; its kernel mode runs it) */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));              \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)
#define DK(x)                                                                                  \
  do {                                                                                         \
    cudnnStatus_t s_ = (x);                                                                    \
    if (s_ != CUDNN_STATUS_SUCCESS) {                                                          \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudnnGetErrorString(s_));             \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

/* bench/convt_subpixel.cu */
int convt_subpixel(const void *x, const void *w, const float *bias, void *y, int n, int h, int wd,
                   int cin, int cout, int variant, cudaStream_t s);

static cudnnHandle_t H;
static void *WS;
static size_t WS_SIZE = (size_t)1 << 30;
static cudnnActivationDescriptor_t RELU;

__global__ void k_bias_relu(__half *y, const float *b, size_t npix, int c) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= npix * c) return;
  float v = __half2float(y[i]) + b[i % c];
  y[i] = __float2half(v > 0.f ? v : 0.f);
}

/* t: [n][h][w][4c] (phases a, b, channel) -> y: [n][2h][2w][c] */
__global__ void k_d2s(const __half *t, __half *y, int n, int h, int w, int c) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t per = (size_t)h * w * 4 * c;
  if (i >= (size_t)n * per) return;
  size_t img = i / per, r = i % per;
  int pix = (int)(r / (4 * c)), k = (int)(r % (4 * c));
  int m = pix / w, q = pix % w, a = k / (2 * c), b = (k / c) % 2, ch = k % c;
  y[img * per + ((size_t)(2 * m + a) * 2 * w + 2 * q + b) * c + ch] = t[i];
}

static __half *to_dev(const float *h, size_t n) {
  __half *tmp = (__half *)malloc(n * sizeof(__half)), *d;
  for (size_t i = 0; i < n; i++) tmp[i] = __float2half(h[i]);
  CK(cudaMalloc(&d, n * sizeof(__half)));
  CK(cudaMemcpy(d, tmp, n * sizeof(__half), cudaMemcpyHostToDevice));
  free(tmp);
  return d;
}

static float *to_dev32(const float *h, size_t n) {
  float *d;
  CK(cudaMalloc(&d, n * sizeof(float)));
  CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

static float frand(unsigned *s) {
  *s = *s * 1664525u + 1013904223u;
  return (float)((*s >> 8) & 0xffff) / 65536.f * 2.f - 1.f;
}

static double maxdiff(const __half *a, const __half *b, size_t n) {
  __half *ha = (__half *)malloc(n * 2), *hb = (__half *)malloc(n * 2);
  CK(cudaMemcpy(ha, a, n * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hb, b, n * 2, cudaMemcpyDeviceToHost));
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)__half2float(ha[i]) - (double)__half2float(hb[i]));
    if (!(d <= m)) m = d; /* NaN wins */
  }
  free(ha), free(hb);
  return m;
}

static cudnnTensorDescriptor_t tdesc(int n, int c, int h, int w, int sn, int sh, int sw) {
  cudnnTensorDescriptor_t d;
  DK(cudnnCreateTensorDescriptor(&d));
  DK(cudnnSetTensor4dDescriptorEx(d, CUDNN_DATA_HALF, n, c, h, w, sn, 1, sh, sw));
  return d;
}

static cudnnFilterDescriptor_t fdesc(int k, int c, int r, int s) {
  cudnnFilterDescriptor_t d;
  DK(cudnnCreateFilterDescriptor(&d));
  DK(cudnnSetFilter4dDescriptor(d, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, k, c, r, s));
  return d;
}

static cudnnConvolutionDescriptor_t cdesc(int pad, int stride) {
  cudnnConvolutionDescriptor_t d;
  DK(cudnnCreateConvolutionDescriptor(&d));
  DK(cudnnSetConvolution2dDescriptor(d, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                     CUDNN_DATA_FLOAT));
  DK(cudnnSetConvolutionMathType(d, CUDNN_TENSOR_OP_MATH));
  return d;
}

/* One fused forward convolution, its algorithm found for exactly these descriptors. */
typedef struct fconv {
  cudnnTensorDescriptor_t x, y, z;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t c;
  cudnnTensorDescriptor_t bd;
  cudnnConvolutionFwdAlgo_t algo;
  const void *xp, *wp, *zp;
  void *yp;
  const __half *bp;
  float alpha2;
  cudnnStatus_t st; /* of the search, then of the first run */
} fconv;

static void fconv_find(fconv *f, int cout) {
  DK(cudnnCreateTensorDescriptor(&f->bd));
  DK(cudnnSetTensor4dDescriptor(f->bd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, 1, cout, 1, 1));
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int got = 0;
  f->st = cudnnFindConvolutionForwardAlgorithm(H, f->x, f->w, f->c, f->y, 8, &got, perf);
  if (f->st != CUDNN_STATUS_SUCCESS) return;
  f->st = CUDNN_STATUS_NOT_SUPPORTED;
  for (int k = 0; k < got; k++)
    if (perf[k].status == CUDNN_STATUS_SUCCESS && perf[k].memory <= WS_SIZE) {
      f->algo = perf[k].algo, f->st = CUDNN_STATUS_SUCCESS;
      break;
    }
}

static cudnnStatus_t fconv_run(const fconv *f) {
  const float one = 1.f;
  return cudnnConvolutionBiasActivationForward(H, &one, f->x, f->xp, f->w, f->wp, f->c, f->algo,
                                               WS, WS_SIZE, &f->alpha2, f->z ? f->z : f->y,
                                               f->zp ? f->zp : f->yp, f->bd, f->bp, RELU, f->y,
                                               f->yp);
}

typedef void (*runner)(void *);

static double time_ms(runner fn, void *arg) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; i++) fn(arg);
  CK(cudaEventRecord(e0));
  for (int i = 0; i < 20; i++) fn(arg);
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return ms / 20;
}

/* ---- question 1 ---- */
typedef struct convt {
  int n, cin, cout, h, w;
  cudnnTensorDescriptor_t xa, ya;
  cudnnFilterDescriptor_t wa;
  cudnnConvolutionDescriptor_t ca;
  cudnnConvolutionBwdDataAlgo_t aalgo;
  __half *x, *xpad, *wA, *y, *t;
  float *b32;
  fconv ph[4], two[2], one;
  __half *wO;
  int variant;
} convt;

static void run_O(void *p) {
  convt *c = (convt *)p;
  CK((cudaError_t)convt_subpixel(c->x, c->wO, c->b32, c->y, c->n, c->h, c->w, c->cin, c->cout,
                                     c->variant, 0));
}

static void run_A(void *p) {
  convt *c = (convt *)p;
  const float one = 1.f, zero = 0.f;
  DK(cudnnConvolutionBackwardData(H, &one, c->wa, c->wA, c->xa, c->x, c->ca, c->aalgo, WS,
                                  WS_SIZE, &zero, c->ya, c->y));
  size_t tot = (size_t)c->n * 4 * c->h * c->w * c->cout;
  k_bias_relu<<<(unsigned)((tot + 255) / 256), 256>>>(c->y, c->b32, tot / c->cout, c->cout);
}
static void run_B4(void *p) {
  convt *c = (convt *)p;
  for (int i = 0; i < 4; i++) fconv_run(&c->ph[i]);
}
static void run_B2(void *p) {
  convt *c = (convt *)p;
  for (int i = 0; i < 2; i++) fconv_run(&c->two[i]);
}
static void run_C(void *p) {
  convt *c = (convt *)p;
  fconv_run(&c->one);
  size_t tot = (size_t)c->n * 4 * c->h * c->w * c->cout;
  k_d2s<<<(unsigned)((tot + 255) / 256), 256>>>(c->t, c->y, c->n, c->h, c->w, c->cout);
}

/* ky of ConvT k3 s2 p1 for output phase a and input offset d (m + d): a=0: d=0 -> 1;
 * a=1: d=0 -> 2, d=1 -> 0; -1 = no tap */
static int tap(int a, int d) { return a == 0 ? (d == 0 ? 1 : -1) : (d == 0 ? 2 : 0); }

static const char *stname(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS ? "ok" : cudnnGetErrorString(s);
}

static void probe_convt(int n, int cin, int cout, int h) {
  convt c;
  memset(&c, 0, sizeof c);
  c.n = n, c.cin = cin, c.cout = cout, c.h = h, c.w = h;
  const int w = h, hp = h + 1, wp = w + 1;
  unsigned seed = 1234u + (unsigned)(cin * 7 + h);
  /* weights [cin][cout][3][3], PyTorch's ConvTranspose2d layout */
  size_t nw = (size_t)cin * cout * 9;
  float *W = (float *)malloc(nw * sizeof(float)), *b = (float *)malloc(4 * cout * sizeof(float));
  float sc = 1.f / sqrtf((float)cin * 2.25f);
  for (size_t i = 0; i < nw; i++) W[i] = frand(&seed) * sc;
  for (int i = 0; i < cout; i++) b[i] = frand(&seed) * 0.1f;
  for (int k = 1; k < 4; k++) memcpy(b + k * cout, b, cout * sizeof(float));
  /* inputs: packed, and with a zero row and column after each image */
  size_t nx = (size_t)n * h * w * cin, nxp = (size_t)n * hp * wp * cin;
  float *X = (float *)malloc(nx * sizeof(float)), *XP = (float *)calloc(nxp, sizeof(float));
  for (size_t i = 0; i < nx; i++) X[i] = fabsf(frand(&seed));
  for (int im = 0; im < n; im++)
    for (int y = 0; y < h; y++)
      memcpy(XP + (((size_t)im * hp + y) * wp) * cin, X + (((size_t)im * h + y) * w) * cin,
             (size_t)w * cin * sizeof(float));
  c.x = to_dev(X, nx), c.xpad = to_dev(XP, nxp);
  c.b32 = to_dev32(b, cout);
  __half *bh = to_dev(b, 4 * (size_t)cout);
  size_t ny = (size_t)n * 4 * h * w * cout;
  CK(cudaMalloc(&c.y, ny * 2));
  __half *yref;
  CK(cudaMalloc(&yref, ny * 2));
  CK(cudaMalloc(&c.t, ny * 2));

  /* A: backward data, filter KRSC with K = cin, C = cout */
  float *WA = (float *)malloc(nw * sizeof(float));
  for (int ci = 0; ci < cin; ci++)
    for (int co = 0; co < cout; co++)
      for (int r = 0; r < 9; r++) WA[((size_t)ci * 9 + r) * cout + co] = W[((size_t)ci * cout + co) * 9 + r];
  c.wA = to_dev(WA, nw);
  c.wa = fdesc(cin, cout, 3, 3);
  c.ca = cdesc(1, 2);
  c.xa = tdesc(n, cin, h, w, h * w * cin, w * cin, cin);
  c.ya = tdesc(n, cout, 2 * h, 2 * w, 4 * h * w * cout, 2 * w * cout, cout);
  cudnnConvolutionBwdDataAlgoPerf_t bp[8];
  int got = 0;
  DK(cudnnFindConvolutionBackwardDataAlgorithm(H, c.wa, c.xa, c.ca, c.ya, 8, &got, bp));
  c.aalgo = bp[0].algo;
  double tA = time_ms(run_A, &c);
  CK(cudaMemcpy(yref, c.y, ny * 2, cudaMemcpyDeviceToDevice));

  /* B4: four phase convolutions, strided in and out */
  float *WP = (float *)malloc((size_t)cout * 4 * cin * 4 * sizeof(float));
  __half *wph[4];
  cudnnStatus_t st4 = CUDNN_STATUS_SUCCESS;
  for (int a = 0; a < 2; a++)
    for (int bb = 0; bb < 2; bb++) {
      int R = a ? 2 : 1, S = bb ? 2 : 1;
      for (int co = 0; co < cout; co++)
        for (int dy = 0; dy < R; dy++)
          for (int dx = 0; dx < S; dx++)
            for (int ci = 0; ci < cin; ci++)
              WP[(((size_t)co * R + dy) * S + dx) * cin + ci] =
                  W[((size_t)ci * cout + co) * 9 + tap(a, dy) * 3 + tap(bb, dx)];
      fconv *f = &c.ph[a * 2 + bb];
      wph[a * 2 + bb] = to_dev(WP, (size_t)cout * R * S * cin);
      f->w = fdesc(cout, cin, R, S);
      f->c = cdesc(0, 1);
      f->x = tdesc(n, cin, h + a, w + bb, hp * wp * cin, wp * cin, cin);
      f->y = tdesc(n, cout, h, w, 4 * h * w * cout, 4 * w * cout, 2 * cout);
      f->xp = c.xpad, f->wp = wph[a * 2 + bb], f->bp = bh;
      f->yp = c.y + ((size_t)a * 2 * w + bb) * cout;
      fconv_find(f, cout);
      if (f->st == CUDNN_STATUS_SUCCESS) f->st = fconv_run(f);
      if (f->st != CUDNN_STATUS_SUCCESS) st4 = f->st;
    }
  double tB4 = -1, dB4 = -1;
  if (st4 == CUDNN_STATUS_SUCCESS) {
    CK(cudaMemset(c.y, 0, ny * 2));
    tB4 = time_ms(run_B4, &c);
    dB4 = maxdiff(c.y, yref, ny);
  }

  /* B2: per row phase, both column phases as 2*cout channels (width-2 filter, one tap zero) */
  __half *wtwo[2];
  cudnnStatus_t st2 = CUDNN_STATUS_SUCCESS;
  for (int a = 0; a < 2; a++) {
    int R = a ? 2 : 1, S = 2;
    for (int bb = 0; bb < 2; bb++)
      for (int co = 0; co < cout; co++)
        for (int dy = 0; dy < R; dy++)
          for (int dx = 0; dx < S; dx++)
            for (int ci = 0; ci < cin; ci++) {
              int kx = tap(bb, dx);
              WP[((((size_t)bb * cout + co) * R + dy) * S + dx) * cin + ci] =
                  kx < 0 ? 0.f : W[((size_t)ci * cout + co) * 9 + tap(a, dy) * 3 + kx];
            }
    fconv *f = &c.two[a];
    wtwo[a] = to_dev(WP, (size_t)2 * cout * R * S * cin);
    f->w = fdesc(2 * cout, cin, R, S);
    f->c = cdesc(0, 1);
    f->x = tdesc(n, cin, h + a, wp, hp * wp * cin, wp * cin, cin);
    f->y = tdesc(n, 2 * cout, h, w, 4 * h * w * cout, 4 * w * cout, 2 * cout);
    f->xp = c.xpad, f->wp = wtwo[a], f->bp = bh;
    f->yp = c.y + (size_t)a * 2 * w * cout;
    fconv_find(f, 2 * cout);
    if (f->st == CUDNN_STATUS_SUCCESS) f->st = fconv_run(f);
    if (f->st != CUDNN_STATUS_SUCCESS) st2 = f->st;
  }
  double tB2 = -1, dB2 = -1;
  if (st2 == CUDNN_STATUS_SUCCESS) {
    CK(cudaMemset(c.y, 0, ny * 2));
    tB2 = time_ms(run_B2, &c);
    dB2 = maxdiff(c.y, yref, ny);
  }

  /* C: one 2x2 convolution to 4*cout packed channels, then depth-to-space */
  for (int a = 0; a < 2; a++)
    for (int bb = 0; bb < 2; bb++)
      for (int co = 0; co < cout; co++)
        for (int dy = 0; dy < 2; dy++)
          for (int dx = 0; dx < 2; dx++)
            for (int ci = 0; ci < cin; ci++) {
              int ky = tap(a, dy), kx = tap(bb, dx);
              WP[(((((size_t)a * 2 + bb) * cout + co) * 2 + dy) * 2 + dx) * cin + ci] =
                  ky < 0 || kx < 0 ? 0.f : W[((size_t)ci * cout + co) * 9 + ky * 3 + kx];
            }
  __half *wone = to_dev(WP, (size_t)4 * cout * 4 * cin);
  fconv *f = &c.one;
  f->w = fdesc(4 * cout, cin, 2, 2);
  f->c = cdesc(0, 1);
  f->x = tdesc(n, cin, hp, wp, hp * wp * cin, wp * cin, cin);
  f->y = tdesc(n, 4 * cout, h, w, h * w * 4 * cout, w * 4 * cout, 4 * cout);
  f->xp = c.xpad, f->wp = wone, f->bp = bh, f->yp = c.t;
  fconv_find(f, 4 * cout);
  if (f->st == CUDNN_STATUS_SUCCESS) f->st = fconv_run(f);
  double tC = -1, dC = -1;
  if (f->st == CUDNN_STATUS_SUCCESS) {
    CK(cudaMemset(c.y, 0, ny * 2));
    tC = time_ms(run_C, &c);
    dC = maxdiff(c.y, yref, ny);
  }
  /* O: our own kernel, weights [9][cin][cout] */
  for (int t = 0; t < 9; t++)
    for (int ci = 0; ci < cin; ci++)
      for (int co = 0; co < cout; co++)
        WA[((size_t)t * cin + ci) * cout + co] = W[((size_t)ci * cout + co) * 9 + t];
  c.wO = to_dev(WA, nw);
  double tO[2], dO[2];
  for (int v = 0; v < 2; v++) {
    c.variant = v + 1;
    CK(cudaMemset(c.y, 0, ny * 2));
    tO[v] = time_ms(run_O, &c);
    dO[v] = maxdiff(c.y, yref, ny);
  }
  CK(cudaDeviceSynchronize());
  double gf = 2.0 * n * cin * cout * 9.0 * h * w / 1e9;
  printf("convt %4d->%-4d %2dx%-2d n=%-4d A %8.4f ms (%5.0f TF/s, algo %d) | O1 %8.4f ms (%5.0f TF/s)"
         " diff %.4g | O2 %8.4f ms (%5.0f TF/s) diff %.4g | B4 %8.4f ms %s diff %.4g"
         " | B2 %8.4f ms %s diff %.4g | C %8.4f ms %s diff %.4g\n",
         cin, cout, h, w, n, tA, gf / tA, (int)c.aalgo, tO[0], gf / tO[0], dO[0], tO[1],
         gf / tO[1], dO[1], tB4, stname(st4), dB4, tB2, stname(st2), dB2, tC, stname(c.one.st), dC);
  fflush(stdout);
  cudaFree(c.x), cudaFree(c.xpad), cudaFree(c.y), cudaFree(yref), cudaFree(c.t), cudaFree(c.wA);
  cudaFree(c.b32), cudaFree(bh), cudaFree(wone), cudaFree(c.wO);
  for (int i = 0; i < 4; i++) cudaFree(wph[i]);
  for (int i = 0; i < 2; i++) cudaFree(wtwo[i]);
  free(W), free(b), free(X), free(XP), free(WA), free(WP);
}

/* ---- question 2 ---- */
typedef struct rconv {
  fconv packed, wide;
} rconv;
static void run_packed(void *p) { fconv_run(&((rconv *)p)->packed); }
static void run_wide(void *p) { fconv_run(&((rconv *)p)->wide); }

static void probe_concat(int n, int ch, int h) {
  unsigned seed = 99u + (unsigned)ch;
  size_t nx = (size_t)n * h * h * ch, nw = (size_t)ch * 9 * ch;
  float *X = (float *)malloc(nx * sizeof(float)), *W = (float *)malloc(nw * sizeof(float));
  float *b = (float *)malloc(ch * sizeof(float));
  for (size_t i = 0; i < nx; i++) X[i] = fabsf(frand(&seed));
  for (size_t i = 0; i < nw; i++) W[i] = frand(&seed) / sqrtf(9.f * ch);
  for (int i = 0; i < ch; i++) b[i] = frand(&seed) * 0.1f;
  __half *x = to_dev(X, nx), *w = to_dev(W, nw), *bh = to_dev(b, ch), *y, *cat;
  CK(cudaMalloc(&y, nx * 2));
  CK(cudaMalloc(&cat, 2 * nx * 2));
  CK(cudaMemset(cat, 0, 2 * nx * 2));
  rconv r;
  memset(&r, 0, sizeof r);
  fconv *fs[2] = {&r.packed, &r.wide};
  for (int k = 0; k < 2; k++) {
    fconv *f = fs[k];
    f->w = fdesc(ch, ch, 3, 3);
    f->c = cdesc(1, 1);
    f->x = tdesc(n, ch, h, h, h * h * ch, h * ch, ch);
    f->z = f->x;
    f->zp = x, f->alpha2 = 1.f; /* residual: y = relu(conv(x) + b + x) */
    int cs = k ? 2 * ch : ch;
    f->y = tdesc(n, ch, h, h, h * h * cs, h * cs, cs);
    f->xp = x, f->wp = w, f->bp = bh, f->yp = k ? cat : y;
    fconv_find(f, ch);
    if (f->st == CUDNN_STATUS_SUCCESS) f->st = fconv_run(f);
  }
  double tp = r.packed.st == CUDNN_STATUS_SUCCESS ? time_ms(run_packed, &r) : -1;
  double tw = r.wide.st == CUDNN_STATUS_SUCCESS ? time_ms(run_wide, &r) : -1;
  double d = -1;
  if (tw >= 0 && tp >= 0) { /* compare the wide buffer's first half with the packed result */
    __half *hy = (__half *)malloc(nx * 2), *hc = (__half *)malloc(2 * nx * 2);
    CK(cudaMemcpy(hy, y, nx * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hc, cat, 2 * nx * 2, cudaMemcpyDeviceToHost));
    d = 0;
    for (size_t p = 0; p < nx / ch; p++)
      for (int k = 0; k < ch; k++) {
        double e = fabs((double)__half2float(hy[p * ch + k]) - (double)__half2float(hc[p * 2 * ch + k]));
        if (!(e <= d)) d = e;
      }
    free(hy), free(hc);
  }
  printf("res3x3 %4d %2dx%-2d n=%-4d packed %8.4f ms (algo %d) | into a %d-channel buffer %8.4f ms (algo %d) %s diff %.4g\n",
         ch, h, h, n, tp, (int)r.packed.algo, 2 * ch, tw, (int)r.wide.algo, stname(r.wide.st), d);
  fflush(stdout);
  cudaFree(x), cudaFree(w), cudaFree(bh), cudaFree(y), cudaFree(cat);
  free(X), free(W), free(b);
}

int main(int argc, char **argv) {
  int batches[16], nb = 0;
  for (int i = 1; i < argc && nb < 16; i++) batches[nb++] = atoi(argv[i]);
  if (!nb) batches[nb++] = 1, batches[nb++] = 16, batches[nb++] = 256;
  CK(cudaFree(0));
  DK(cudnnCreate(&H));
  CK(cudaMalloc(&WS, WS_SIZE));
  DK(cudnnCreateActivationDescriptor(&RELU));
  DK(cudnnSetActivationDescriptor(RELU, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 0));
  printf("%s, cuDNN %zu\n", pr.name, cudnnGetVersion());
  /* the 96 network's stride-2 ConvT layers (input channels, output channels, input size) */
  static const int L[5][3] = {{1024, 512, 3}, {768, 384, 6}, {512, 256, 12}, {320, 128, 24}, {160, 64, 48}};
  for (int bi = 0; bi < nb; bi++)
    for (int i = 0; i < 5; i++) probe_convt(batches[bi], L[i][0], L[i][1], L[i][2]);
  static const int R[4][2] = {{512, 6}, {256, 24}, {128, 48}, {64, 96}};
  for (int bi = 0; bi < nb; bi++)
    for (int i = 0; i < 4; i++) probe_concat(batches[bi], R[i][0], R[i][1]);
  cudnnDestroy(H);
  return 0;
}
