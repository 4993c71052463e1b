/* A minimal test harness: each tests/test_*.c is one executable (one CTest entry) whose main()
 * calls FC_RUN(test_fn) for each case. A failed check prints file:line and both values and marks
 * the case failed; the executable exits non-zero if any case failed. */
#ifndef FC_TEST_H
#define FC_TEST_H

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fc_test_failed_ = 0;
static int fc_test_case_failed_ = 0;

#define FC_CHECK(cond)                                                                         \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                 \
      fc_test_case_failed_ = 1;                                                                \
    }                                                                                          \
  } while (0)

#define FC_CHECK_INT(a, op, b)                                                                 \
  do {                                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                                        \
    if (!(a_ op b_)) {                                                                         \
      fprintf(stderr, "%s:%d: check failed: %s %s %s (%lld vs %lld)\n", __FILE__, __LINE__,   \
              #a, #op, #b, a_, b_);                                                            \
      fc_test_case_failed_ = 1;                                                                \
    }                                                                                          \
  } while (0)

#define FC_CHECK_NEAR(a, b, tol)                                                               \
  do {                                                                                         \
    double a_ = (double)(a), b_ = (double)(b);                                                 \
    if (!(fabs(a_ - b_) <= (tol))) {                                                           \
      fprintf(stderr, "%s:%d: check failed: |%s - %s| <= %g (%.6g vs %.6g)\n", __FILE__,       \
              __LINE__, #a, #b, (double)(tol), a_, b_);                                        \
      fc_test_case_failed_ = 1;                                                                \
    }                                                                                          \
  } while (0)

/* Stops the current case (after a failed check that later code depends on). */
#define FC_REQUIRE(cond)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: required: %s\n", __FILE__, __LINE__, #cond);                     \
      fc_test_case_failed_ = 1;                                                                \
      return;                                                                                  \
    }                                                                                          \
  } while (0)

/* FC_TEST_ONLY=NAME[,NAME...] runs only those cases (a GPU session's second pass, say) */
static inline int fc_test_selected_(const char *name) {
  const char *only = getenv("FC_TEST_ONLY");
  if (!only || !*only) return 1;
  const size_t n = strlen(name);
  for (const char *p = only; (p = strstr(p, name)); p += n)
    if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
  return 0;
}

#define FC_RUN(fn)                                                                             \
  do {                                                                                         \
    if (!fc_test_selected_(#fn)) break;                                                        \
    fc_test_case_failed_ = 0;                                                                  \
    fn();                                                                                      \
    fprintf(stderr, "%s %s\n", fc_test_case_failed_ ? "FAIL" : "ok  ", #fn);                   \
    fc_test_failed_ |= fc_test_case_failed_;                                                   \
  } while (0)

/* Removes a temporary test directory and the files in it (tests keep them flat), including
 * whatever a failed case left behind. */
static inline void fc_test_rmtree(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[4096];
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      unlink(path);
    }
  if (d) closedir(d);
  rmdir(dir);
}

/* A whole file in a malloc'd buffer (NULL if it cannot be read); its length in *n. */
static inline unsigned char *fc_test_read_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  unsigned char *b = NULL;
  long len = -1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
    b = malloc(len > 0 ? (size_t)len : 1);
  if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
    free(b);
    b = NULL;
  }
  if (f) fclose(f);
  *n = b ? (size_t)len : 0;
  return b;
}

/* Writes n bytes as the whole file; 1 on success. */
static inline int fc_test_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  int ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

#define FC_TEST_EXIT() return fc_test_failed_ ? 1 : 0

#endif
