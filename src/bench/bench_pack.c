/* facecast bench pack: what an avatar pack costs on this machine (recorded in
 * docs/BENCHMARKS.md).
 *
 * Writes three synthetic avatars (default: 250 frames of 1920x1080, crops at 96 and 256, the
 * size of a 10 s 1080p avatar): every frame distinct everywhere (no tile can be reused: the
 * worst case), a "presenter" (a fixed background, a 480x540 block that changes every frame
 * and moves 4 px a frame: the tiles it covers or leaves are stored again), and a photo (one
 * frame repeated). Then measures, on the distinct and the presenter avatar: opening,
 * fc_pack_verify warm and cold, an in-order pass assembling every frame's I420 and reading
 * its crops as the engine does (cold and warm), a whole-file CRC under two madvise advices
 * (verify's reading), and N processes that each play the whole avatar and hold it (Rss and Pss
 * of each mapping, and what the page cache holds). "Cold" means the file's pages were dropped
 * from the page cache with POSIX_FADV_DONTNEED first, which needs no privileges; on tmpfs
 * nothing can be dropped, so --dir should name a directory on a disk. The files are removed at
 * the end. */
#include "cli/cli.h"
#include "facecast/error.h"
#include "avatar/pack.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

enum { CROP0 = 96, CROP1 = 256 };

enum { DISTINCT, PRESENTER, PHOTO };

/* A cheap pattern: 64-byte runs of pseudo-random values from seed, over [from, to). */
static void pattern(uint8_t *f, size_t from, size_t to, uint32_t s) {
  for (size_t k = from; k < to; k += 64) {
    s = s * 1103515245u + 12345u;
    memset(f + k, (int)(s >> 16), to - k < 64 ? to - k : 64);
  }
}

/* Writes n frames of w x h of the given kind. */
static int write_avatar(const char *path, int w, int h, int n, int kind) {
  int photo = kind == PHOTO;
  fc_pack_info in = {.width = w, .height = h, .fps_num = 25, .fps_den = 1, .frames = n,
                     .ncrops = 2, .crop_size = {CROP0, CROP1}};
  snprintf(in.id, sizeof in.id, "bench");
  int err;
  fc_pack_writer *wr = fc_pack_writer_create(path, &in, "{\"source\":\"facecast bench pack\"}",
                                             &err);
  if (!wr) return err;
  size_t fb = (size_t)w * h * 3 / 2;
  uint8_t *f = malloc(fb), *c0 = malloc(CROP0 * CROP0 * 4), *c1 = malloc(CROP1 * CROP1 * 4);
  if (!f || !c0 || !c1) err = fc_error_set(FC_ENOMEM, "bench pack: out of memory");
  for (int i = 0; i < n && !err; i++) {
    pattern(f, 0, fb, kind == DISTINCT ? (uint32_t)i + 1 : 1);
    if (kind == PRESENTER) { /* the block's luma rows (its chroma stays: enough to differ) */
      int bw = 480 < w ? 480 : w, bh = 540 < h ? 540 : h, bx = (w - bw) / 2 + (4 * i) % 64;
      bx = bx + bw > w ? w - bw : bx;
      for (int y = (h - bh) / 2; y < (h - bh) / 2 + bh; y++)
        pattern(f, (size_t)y * w + bx, (size_t)y * w + bx + bw, (uint32_t)(i * 7919 + y));
    }
    memset(c0, photo ? 0 : i, CROP0 * CROP0 * 4);
    memset(c1, photo ? 0 : i, CROP1 * CROP1 * 4);
    fc_pack_frame fr = {.i420 = f, .box = {w / 3, h / 4, w / 4, h / 3},
                        .crop = {c0, c1}, .mask = {c0 + CROP0 * CROP0 * 3, c1 + CROP1 * CROP1 * 3}};
    for (int k = 0; k < FC_LANDMARKS; k++) fr.landmarks[k] = (fc_point){w / 2.0f + k, h / 2.0f};
    err = fc_pack_writer_add_frame(wr, &fr);
  }
  if (!err) err = fc_pack_writer_finish(wr);
  fc_pack_writer_destroy(wr);
  free(f);
  free(c0);
  free(c1);
  return err;
}

static long long file_bytes(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  long long n = fd >= 0 ? (long long)lseek(fd, 0, SEEK_END) : -1;
  if (fd >= 0) close(fd);
  return n;
}

static void drop_cache(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

/* kB of the file in the page cache (mincore over a mapping of its own). */
static long long cached_kb(const char *path) {
  long long n = file_bytes(path), pages = (n + 4095) / 4096, c = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  void *m = fd >= 0 && n > 0 ? mmap(NULL, (size_t)n, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  unsigned char *v = malloc(pages > 0 ? (size_t)pages : 1);
  if (m != MAP_FAILED && v && mincore(m, (size_t)n, v) == 0)
    for (long long i = 0; i < pages; i++) c += v[i] & 1;
  free(v);
  if (m != MAP_FAILED) munmap(m, (size_t)n);
  if (fd >= 0) close(fd);
  return c * 4;
}

/* Assembles every frame's I420 and copies its crops and masks in order into dst, as the
 * engine reads them. */
static void pass(const fc_pack *p, uint8_t *dst) {
  const fc_pack_info *in = fc_pack_get_info(p);
  size_t fb = (size_t)in->width * in->height * 3 / 2;
  fc_pack_frame f;
  for (int i = 0; i < in->frames; i++) {
    fc_pack_get_frame(p, i, &f);
    fc_pack_copy_i420(p, i, dst);
    memcpy(dst + fb, f.crop[0], CROP0 * CROP0 * 3);
    memcpy(dst + fb, f.mask[0], CROP0 * CROP0);
    memcpy(dst + fb, f.crop[1], CROP1 * CROP1 * 3);
    memcpy(dst + fb, f.mask[1], CROP1 * CROP1);
  }
}

/* One pass over a fresh open (the engine's advice, MADV_NORMAL). Seconds, or -1. */
static double play(const char *path, uint8_t *dst) {
  int err;
  fc_pack *p = fc_pack_open(path, &err);
  if (!p) return -1;
  double t = fc_cli_now();
  pass(p, dst);
  t = fc_cli_now() - t;
  fc_pack_close(p);
  return t;
}

/* A CRC over the whole file through a mapping of its own with advice, as fc_pack_verify reads
 * it (which uses MADV_SEQUENTIAL). Seconds, or -1. */
static double crc_pass(const char *path, int advice) {
  long long n = file_bytes(path);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint8_t *m = fd >= 0 && n > 0 ? mmap(NULL, (size_t)n, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (fd >= 0) close(fd);
  if (m == MAP_FAILED) return -1;
  madvise(m, (size_t)n, advice);
  double t = fc_cli_now();
  volatile uLong crc = crc32_z(0, m, (z_size_t)n);
  (void)crc;
  t = fc_cli_now() - t;
  munmap(m, (size_t)n);
  return t;
}

/* nproc processes each play the whole avatar, then report their mapping's Rss and Pss while
 * all of them still hold it. */
static int shared_use(const char *path, int nproc, uint8_t *dst) {
  int up[2], down[2];
  if (pipe(up) || pipe(down)) return fc_error_set(FC_EIO, "bench pack: pipe failed");
  pid_t pid[64];
  int started = 0;
  for (; started < nproc; started++) {
    pid[started] = fork();
    if (pid[started] < 0) break;
    if (pid[started] == 0) {
      int64_t v[2] = {0, 0};
      char c;
      int err;
      fc_pack *p = fc_pack_open(path, &err);
      if (!p) _exit(1);
      pass(p, dst);
      if (write(up[1], "r", 1) != 1 || read(down[0], &c, 1) != 1) _exit(1);
      if (fc_pack_resident(p, &v[0], &v[1]) != FC_OK) _exit(1);
      if (write(up[1], v, sizeof v) != sizeof v || read(down[0], &c, 1) != 1) _exit(1);
      fc_pack_close(p);
      _exit(0);
    }
  }
  char c;
  int ok = started == nproc;
  for (int k = 0; ok && k < nproc; k++) ok = read(up[0], &c, 1) == 1;
  for (int k = 0; ok && k < nproc; k++) ok = write(down[1], "g", 1) == 1;
  for (int k = 0; ok && k < nproc; k++) {
    int64_t v[2];
    ok = read(up[0], v, sizeof v) == sizeof v;
    if (ok)
      printf("  process %d of %d: pack mapping Rss %lld kB, Pss %lld kB\n", k + 1, nproc,
             (long long)v[0], (long long)v[1]);
  }
  if (ok) printf("  page cache holding the pack: %lld kB\n", cached_kb(path));
  for (int k = 0; k < started; k++) {
    if (write(down[1], "x", 1) != 1) ok = 0;
  }
  for (int k = 0; k < started; k++) waitpid(pid[k], NULL, 0);
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
  return ok ? FC_OK : fc_error_set(FC_EIO, "bench pack: a measuring process failed");
}

static void pack_usage(FILE *f) {
  fputs("usage: facecast bench pack [--frames N] [--size WxH] [--processes P] [--runs R]\n"
        "                           [--dir DIR]\n",
        f);
}

int fc_bench_pack(int argc, char **argv) {
  static const struct option opts[] = {
      {"frames", required_argument, 0, 'n'}, {"size", required_argument, 0, 's'},
      {"processes", required_argument, 0, 'p'}, {"runs", required_argument, 0, 'r'},
      {"dir", required_argument, 0, 'd'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int frames = 250, w = 1920, h = 1080, nproc = 4, runs = 3, c, err;
  const char *dir = ".";
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'n': frames = atoi(optarg); break;
    case 's':
      if ((err = fc_cli_parse_size(optarg, &w, &h))) return fc_cli_fail(err);
      break;
    case 'p': nproc = atoi(optarg); break;
    case 'r': runs = atoi(optarg); break;
    case 'd': dir = optarg; break;
    case 'h': pack_usage(stdout); return FC_EXIT_OK;
    default: pack_usage(stderr); return FC_EXIT_INPUT;
    }
  }
  if (frames < 1 || frames > 100000 || nproc < 1 || nproc > 64 || runs < 1 || runs > 20) {
    fprintf(stderr, "facecast: error: bench pack: --frames 1..100000, --processes 1..64, "
                    "--runs 1..20\n");
    return FC_EXIT_INPUT;
  }
  char path[2][4096], photo[4096];
  snprintf(path[0], sizeof path[0], "%s/bench-%d.fcpack", dir, (int)getpid());
  snprintf(path[1], sizeof path[1], "%s/bench-%d-presenter.fcpack", dir, (int)getpid());
  snprintf(photo, sizeof photo, "%s/bench-%d-photo.fcpack", dir, (int)getpid());
  size_t fb = (size_t)w * h * 3 / 2;
  uint8_t *dst = malloc(fb + CROP1 * CROP1 * 3);
  if (!dst) return fc_cli_fail(fc_error_set(FC_ENOMEM, "bench pack: out of memory"));
  memset(dst, 1, fb + CROP1 * CROP1 * 3);
  fc_pack *p = NULL;
  static const char *const name[2] = {"every frame distinct", "presenter"};

  printf("avatar: %d frames of %dx%d (%zu bytes of I420 each), crops %d and %d\n", frames, w, h,
         fb, CROP0, CROP1);
  for (int a = 0; a < 2; a++) {
    double t = fc_cli_now();
    if ((err = write_avatar(path[a], w, h, frames, a == 0 ? DISTINCT : PRESENTER))) goto fail;
    printf("write, %s: %.2f s, %lld bytes\n", name[a], fc_cli_now() - t, file_bytes(path[a]));
  }
  double t = fc_cli_now();
  if ((err = write_avatar(photo, w, h, frames, PHOTO))) goto fail;
  printf("write, one picture (a photo avatar): %.3f s, %lld bytes\n", fc_cli_now() - t,
         file_bytes(photo));
  unlink(photo);

  for (int a = 0; a < 2; a++) {
    printf("-- %s\n", name[a]);
    double best = 1e9;
    for (int k = 0; k < 20; k++) {
      t = fc_cli_now();
      p = fc_pack_open(path[a], &err);
      t = fc_cli_now() - t;
      if (!p) goto fail;
      if (t < best) best = t;
      fc_pack_close(p);
    }
    p = NULL;
    printf("open (warm, best of 20): %.3f ms\n", best * 1e3);
    for (int cold = 0; cold < 2; cold++) {
      if (cold) drop_cache(path[a]);
      long long cached = cached_kb(path[a]);
      if (!(p = fc_pack_open(path[a], &err))) goto fail;
      t = fc_cli_now();
      if ((err = fc_pack_verify(p))) goto fail;
      printf("verify, %s: %.3f s (%lld kB cached before)\n", cold ? "cold" : "warm",
             fc_cli_now() - t, cached);
      fc_pack_close(p);
      p = NULL;
    }
    /* Runs alternate between the readings, so a slow spell of the disk hits each alike. */
    double lo[3] = {1e9, 1e9, 1e9}, hi[3] = {0};
    for (int k = 0; k < runs; k++)
      for (int m = 0; m < 3; m++) {
        drop_cache(path[a]);
        double s = m == 0 ? play(path[a], dst)
                          : crc_pass(path[a], m == 1 ? MADV_NORMAL : MADV_SEQUENTIAL);
        if (s < 0) goto fail_open;
        lo[m] = s < lo[m] ? s : lo[m];
        hi[m] = s > hi[m] ? s : hi[m];
      }
    printf("in-order pass assembling every frame and reading its crops (the engine's "
           "reading), cold: %.2f-%.2f s (%d runs)\n", lo[0], hi[0], runs);
    printf("whole-file CRC (verify's reading), cold, MADV_NORMAL: %.2f-%.2f s, MADV_SEQUENTIAL: "
           "%.2f-%.2f s\n", lo[1], hi[1], lo[2], hi[2]);
    play(path[a], dst);
    double s = play(path[a], dst);
    if (s < 0) goto fail_open;
    printf("in-order pass, warm: %.3f s (%.0f us a frame)\n", s, s * 1e6 / frames);
    if (a == 0) { /* what assembling costs against copying a contiguous frame */
      if (!(p = fc_pack_open(path[a], &err))) goto fail;
      /* 16 distinct frames to copy from, as many bytes as 16 of the pack's frames: neither
       * source stays in the cache from one copy to the next */
      uint8_t *whole = malloc(16 * fb);
      if (!whole) {
        err = fc_error_set(FC_ENOMEM, "bench pack: out of memory");
        goto fail;
      }
      memset(whole, 3, 16 * fb);
      double best_t = 1e9, best_m = 1e9;
      for (int k = 0; k < 50; k++) {
        t = fc_cli_now();
        fc_pack_copy_i420(p, k % (frames < 16 ? frames : 16), dst);
        double ct = fc_cli_now() - t;
        t = fc_cli_now();
        memcpy(dst, whole + (size_t)(k % 16) * fb, fb);
        double m = fc_cli_now() - t;
        best_t = ct < best_t ? ct : best_t;
        best_m = m < best_m ? m : best_m;
      }
      free(whole);
      fc_pack_close(p);
      p = NULL;
      printf("one frame, warm, best of 50: fc_pack_copy_i420 %.0f us, memcpy of a contiguous "
             "frame %.0f us\n", best_t * 1e6, best_m * 1e6);
    }
    if ((err = shared_use(path[a], nproc, dst))) goto fail;
  }
  unlink(path[0]);
  unlink(path[1]);
  free(dst);
  return FC_EXIT_OK;
fail_open:
  err = fc_error_set(FC_EIO, "bench pack: a pack could not be reopened");
fail:
  fc_pack_close(p);
  unlink(path[0]);
  unlink(path[1]);
  unlink(photo);
  free(dst);
  return fc_cli_fail(err);
}
