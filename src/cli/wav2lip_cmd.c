/* facecast wav2lip: run the Wav2Lip network on .npy tensors (parity checks and timing).
 *
 * wav2lip infer: reads mel [B,1,80,16] and faces [B,6,S,S] (float32 .npy, as
 * tools/gen_wav2lip_golden.py writes them; S = 96, or 256 for a wav2lip256 checkpoint, and it
 * must be the checkpoint's), runs the network in chunks of at most --max-batch frames and writes
 * out [B,3,S,S]. The output is written only when every chunk succeeded, so
 * a failed run leaves no file. --repeat N runs the whole set N times for timing; the summary
 * (stdout) gives load time, the first pass (which includes building the primitives of a batch
 * size other than max-batch) and the best later pass, in frames/s. */
#include "cli/cli.h"
#include "facecast/error.h"
#include "modelfile/npy.h"
#include "lipsync/wav2lip/wav2lip.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void w2l_usage(FILE *f) {
  fputs("usage: facecast wav2lip infer --checkpoint FILE --mel MEL.npy --faces FACES.npy\n"
        "                              --out OUT.npy [--device cpu|cpu-ref|cuda[:N]] [--dtype fp32|fp16|bf16]\n"
        "                              [--max-batch N] [--threads N] [--repeat N]\n"
        "  mel [B,1,80,16], faces [B,6,S,S] float32 NCHW -> out [B,3,S,S] in [0,1];\n"
        "  S = 96, or 256 for a wav2lip256 checkpoint\n",
        f);
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *v) {
  char *end;
  long x = strtol(s, &end, 10);
  if (end == s || *end || x < lo || x > hi)
    return fc_error_set(FC_EINVAL, "%s '%s': expected %d..%d", opt, s, lo, hi);
  *v = (int)x;
  return FC_OK;
}

/* Reads an .npy and checks it is [B, d1, d2, d3]; d2 = d3 = 0: square, 96 or 256 (faces of
 * either model), the side in *side. */
static int read_input(const char *path, const char *what, int d1, int d2, int d3, float **data,
                      int64_t *batch, int *side) {
  int64_t shape[FC_NPY_MAX_DIMS];
  int ndim, err = fc_npy_read_f32(path, data, shape, &ndim);
  if (err) return err;
  int any = d2 == 0 && ndim == 4 && shape[2] == shape[3] &&
            (shape[2] == FC_W2L_FACE || shape[2] == FC_W2L_FACE_256);
  if (any) d2 = d3 = (int)shape[2];
  if (ndim != 4 || shape[0] < 1 || shape[1] != d1 || shape[2] != d2 || shape[3] != d3) {
    char got[96] = "";
    size_t o = 0;
    for (int i = 0; i < ndim && o < sizeof got; i++)
      o += (size_t)snprintf(got + o, sizeof got - o, i ? ",%lld" : "%lld", (long long)shape[i]);
    free(*data);
    *data = NULL;
    if (!d2)
      return fc_error_set(FC_EINVAL, "%s: %s has shape [%s], expected [B,%d,S,S] with S 96 or 256",
                          path, what, got, d1);
    return fc_error_set(FC_EINVAL, "%s: %s has shape [%s], expected [B,%d,%d,%d]", path, what, got,
                        d1, d2, d3);
  }
  *batch = shape[0];
  if (side) *side = d2;
  return FC_OK;
}

static int w2l_infer(int argc, char **argv) {
  static const struct option opts[] = {
      {"checkpoint", required_argument, 0, 'c'}, {"mel", required_argument, 0, 'm'},
      {"faces", required_argument, 0, 'f'},      {"out", required_argument, 0, 'o'},
      {"device", required_argument, 0, 'd'},     {"dtype", required_argument, 0, 't'},
      {"max-batch", required_argument, 0, 'b'},  {"threads", required_argument, 0, 'j'},
      {"repeat", required_argument, 0, 'r'},     {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *ckpt = NULL, *melp = NULL, *facep = NULL, *outp = NULL, *dtype = "fp32";
  fc_w2l_params p = {.device = "cpu", .max_batch = 16};
  int repeat = 1, c, err = FC_OK, rc;
  float *mel = NULL, *faces = NULL, *out = NULL;
  fc_w2l *m = NULL;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'c': ckpt = optarg; break;
    case 'm': melp = optarg; break;
    case 'f': facep = optarg; break;
    case 'o': outp = optarg; break;
    case 'd': p.device = optarg; break;
    case 't': dtype = optarg; break;
    case 'b': err = parse_int("--max-batch", optarg, 1, 4096, &p.max_batch); break;
    case 'j': err = parse_int("--threads", optarg, 1, 4096, &p.threads); break;
    case 'r': err = parse_int("--repeat", optarg, 1, 100000, &repeat); break;
    case 'h': w2l_usage(stdout); return FC_EXIT_OK;
    default:
      fprintf(stderr, "facecast: error: wav2lip infer: unknown or incomplete option '%s'\n",
              argv[optind - 1]);
      return FC_EXIT_INPUT;
    }
    if (err) return fc_cli_fail(err);
  }
  if (optind < argc) {
    fprintf(stderr, "facecast: error: wav2lip infer: unexpected argument '%s'\n", argv[optind]);
    return FC_EXIT_INPUT;
  }
  if (!ckpt || !melp || !facep || !outp) {
    fprintf(stderr, "facecast: error: wav2lip infer: --checkpoint, --mel, --faces and --out are "
                    "required\n");
    return FC_EXIT_INPUT;
  }
  int on_cuda = strncmp(p.device, "cuda", 4) == 0;
  int half = strcmp(dtype, "fp16") == 0 ? FC_W2L_FP16 : strcmp(dtype, "bf16") == 0 ? FC_W2L_BF16 : 0;
  if (half && on_cuda) p.dtype = half;
  else if (half)
    return fc_cli_fail(fc_error_set(FC_EUNSUPPORTED,
                                    "--dtype %s is not supported on the CPU (devices cpu, cpu-ref "
                                    "compute in fp32); use --dtype fp32",
                                    dtype));
  else if (strcmp(dtype, "fp32") != 0)
    return fc_cli_fail(fc_error_set(FC_EINVAL, "--dtype '%s': expected fp32%s", dtype,
                                    on_cuda ? ", fp16 or bf16" : ""));

  int64_t nb = 0, nf = 0;
  int side = 0;
  if ((err = read_input(melp, "mel", 1, FC_W2L_MEL_H, FC_W2L_MEL_W, &mel, &nb, NULL))) goto out;
  if ((err = read_input(facep, "faces", FC_W2L_FACE_C, 0, 0, &faces, &nf, &side))) goto out;
  if (nb != nf) {
    err = fc_error_set(FC_EINVAL, "%s has %lld frames but %s has %lld", melp, (long long)nb, facep,
                       (long long)nf);
    goto out;
  }
  const size_t per_mel = (size_t)FC_W2L_MEL_H * FC_W2L_MEL_W;
  const size_t per_face = (size_t)FC_W2L_FACE_C * side * side;
  const size_t per_out = (size_t)FC_W2L_OUT_C * side * side;
  if (!(out = malloc((size_t)nb * per_out * sizeof(float)))) {
    err = fc_error_set(FC_ENOMEM, "wav2lip: out of memory for %lld frames", (long long)nb);
    goto out;
  }
  if (p.max_batch > nb) p.max_batch = (int)nb; /* no buffers larger than the job */

  double t0 = fc_cli_now();
  if (!(m = fc_w2l_load(ckpt, &p, &err))) goto out;
  if (fc_w2l_face_size(m) != side) {
    err = fc_error_set(FC_EINVAL, "%s: faces are %dx%d but %s is the %dx%d model", facep, side,
                       side, ckpt, fc_w2l_face_size(m), fc_w2l_face_size(m));
    goto out;
  }
  double t_load = fc_cli_now() - t0, t_first = 0, t_best = 0;
  for (int r = 0; r < repeat; r++) {
    double t = fc_cli_now();
    for (int64_t i = 0; i < nb; i += p.max_batch) {
      int n = (int)(nb - i < p.max_batch ? nb - i : p.max_batch);
      if ((err = fc_w2l_infer(m, mel + i * per_mel, faces + i * per_face, out + i * per_out, n)))
        goto out;
    }
    t = fc_cli_now() - t;
    if (r == 0) t_first = t;
    else if (r == 1 || t < t_best) t_best = t;
  }
  int64_t shape[4] = {nb, FC_W2L_OUT_C, side, side};
  if ((err = fc_npy_write_f32(outp, out, shape, 4))) goto out;
  printf("wav2lip: %lld frames, batch %d, device %s: load %.3f s, first pass %.3f s (%.2f frames/s)",
         (long long)nb, p.max_batch, p.device, t_load, t_first, nb / t_first);
  if (repeat > 1) printf(", best of %d more %.3f s (%.2f frames/s)", repeat - 1, t_best, nb / t_best);
  printf("\n");
out:
  rc = err ? fc_cli_fail(err) : FC_EXIT_OK;
  fc_w2l_destroy(m);
  free(mel);
  free(faces);
  free(out);
  return rc;
}

int fc_cmd_wav2lip(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "infer") == 0) return w2l_infer(argc - 1, argv + 1);
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    w2l_usage(stdout);
    return FC_EXIT_OK;
  }
  if (argc >= 2) fprintf(stderr, "facecast: error: wav2lip: unknown subcommand '%s'\n", argv[1]);
  w2l_usage(stderr);
  return FC_EXIT_INPUT;
}
