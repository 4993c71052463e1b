/* The Wav2Lip CUDA backend's cuDNN algorithm cache (lipsync/wav2lip/algo_cache.h): plain C, so
 * its file handling is tested on every machine; the GPU tests (test_wav2lip on the accelerator
 * machine) check that a cached start gives the same results as a searched one. */
#include "fc_test.h"
#include "facecast/error.h"
#include "lipsync/wav2lip/algo_cache.h"

#include <glib.h>
#include <sys/stat.h>

static char *tmpdir(void) {
  char *d = g_strdup("/tmp/fc_algo_XXXXXX");
  return g_mkdtemp(d);
}

static void test_path(void) {
  char *p = w2l_algo_cache_path("/c", "NVIDIA H200 (x/y)", 9, 0, 91400, 13000);
  FC_REQUIRE(p != NULL);
  FC_CHECK(strcmp(p, "/c/cudnn-NVIDIA_H200__x_y_-sm90-cudnn91400-cuda13000.algos") == 0);
  g_free(p);
  char *old = g_strdup(getenv("FACECAST_CACHE_DIR"));
  setenv("FACECAST_CACHE_DIR", "off", 1);
  FC_CHECK(w2l_algo_cache_path(NULL, "g", 9, 0, 1, 1) == NULL);
  setenv("FACECAST_CACHE_DIR", "/somewhere", 1);
  p = w2l_algo_cache_path(NULL, "g", 9, 0, 1, 1);
  FC_CHECK(p && strncmp(p, "/somewhere/cudnn-g-", 19) == 0);
  g_free(p);
  unsetenv("FACECAST_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  FC_CHECK(strcmp(w2l_algo_cache_dir(), "/xdg/facecast") == 0);
  if (old) setenv("FACECAST_CACHE_DIR", old, 1);
  g_free(old);
}

static void test_round_trip(void) {
  char *dir = tmpdir(), *path = g_strdup_printf("%s/a/b/c.algos", dir);
  w2l_algo_cache *c = w2l_algo_cache_open(path);
  FC_REQUIRE(c != NULL);
  w2l_algo a;
  FC_CHECK(!w2l_algo_cache_get(c, "fwd.f16.n1", &a));
  FC_CHECK_INT(w2l_algo_cache_save(c), ==, FC_OK); /* nothing learnt: no file */
  FC_CHECK(!g_file_test(path, G_FILE_TEST_EXISTS));
  FC_CHECK_INT(w2l_algo_cache_put(c, "fwd.f16.n1", &(w2l_algo){1, 1, 4096}), ==, FC_OK);
  FC_CHECK_INT(w2l_algo_cache_put(c, "bwd.f16.n128", &(w2l_algo){5, 2, (size_t)3 << 30}), ==, FC_OK);
  FC_CHECK_INT(w2l_algo_cache_put(c, "fwd.f16.n1", &(w2l_algo){6, 1, 0}), ==, FC_OK); /* replaced */
  FC_CHECK_INT(w2l_algo_cache_put(c, "has blank", &(w2l_algo){1, 1, 0}), ==, FC_EINVAL);
  FC_CHECK_INT(w2l_algo_cache_put(c, "", &(w2l_algo){1, 1, 0}), ==, FC_EINVAL);
  FC_CHECK_INT(w2l_algo_cache_save(c), ==, FC_OK); /* the folders are made */
  w2l_algo_cache_close(c);

  c = w2l_algo_cache_open(path);
  FC_REQUIRE(c != NULL);
  int entries, hits, misses;
  FC_CHECK(w2l_algo_cache_get(c, "fwd.f16.n1", &a) && a.algo == 6 && a.math == 1 && a.ws_bytes == 0);
  FC_CHECK(w2l_algo_cache_get(c, "bwd.f16.n128", &a) && a.algo == 5 && a.ws_bytes == (size_t)3 << 30);
  FC_CHECK(!w2l_algo_cache_get(c, "fwd.f16.n2", &a));
  const char *p = NULL;
  w2l_algo_cache_stats(c, &entries, &hits, &misses, &p);
  FC_CHECK_INT(entries, ==, 2);
  FC_CHECK_INT(hits, ==, 2);
  FC_CHECK_INT(misses, ==, 1);
  FC_CHECK(p && strcmp(p, path) == 0);
  w2l_algo_cache_close(c);

  /* two servers learning at once: the file is one of theirs, whole */
  w2l_algo_cache *x = w2l_algo_cache_open(path), *y = w2l_algo_cache_open(path);
  FC_REQUIRE(x && y);
  w2l_algo_cache_put(x, "only.x", &(w2l_algo){1, 0, 1});
  w2l_algo_cache_put(y, "only.y", &(w2l_algo){2, 0, 2});
  FC_CHECK_INT(w2l_algo_cache_save(x), ==, FC_OK);
  FC_CHECK_INT(w2l_algo_cache_save(y), ==, FC_OK);
  w2l_algo_cache_close(x), w2l_algo_cache_close(y);
  c = w2l_algo_cache_open(path);
  w2l_algo_cache_stats(c, &entries, NULL, NULL, NULL);
  FC_CHECK_INT(entries, ==, 3);
  FC_CHECK(w2l_algo_cache_get(c, "only.y", &a) && !w2l_algo_cache_get(c, "only.x", &a));
  w2l_algo_cache_close(c);
  char *sub = g_strdup_printf("%s/a/b", dir);
  GDir *d = g_dir_open(sub, 0, NULL);
  int files = 0;
  while (d && g_dir_read_name(d)) files++;
  if (d) g_dir_close(d);
  FC_CHECK_INT(files, ==, 1); /* no temporary file left beside it */
  char *cmd = g_strdup_printf("rm -rf %s", dir);
  FC_CHECK(system(cmd) == 0);
  g_free(cmd), g_free(sub), g_free(path), g_free(dir);
}

static void test_bad_files(void) {
  w2l_algo_cache *c = w2l_algo_cache_open(NULL);
  FC_REQUIRE(c != NULL);
  const char *nohead = "fwd.a 1 1 0\n";
  FC_CHECK_INT(w2l_algo_cache_parse(c, nohead, strlen(nohead)), ==, 0);
  const char *old = "facecast-cudnn-algos 2\nfwd.a 1 1 0\n";
  FC_CHECK_INT(w2l_algo_cache_parse(c, old, strlen(old)), ==, 0);
  char big[400];
  memset(big, 'k', 300);
  big[300] = 0;
  char *text = g_strdup_printf(
      "facecast-cudnn-algos 1\n"
      "good.one 1 1 4096\n"
      "missing.field 1 1\n"
      "trailing.junk 1 1 0 x\n"
      "negative -1 1 0\n"
      "huge.ws 1 1 99999999999999999\n"
      " leading.blank 1 1 0\n"
      "crlf 1 1 0\r\n"
      "%s 1 1 0\n"
      "\n"
      "good.two 7 0 0", big);
  FC_CHECK_INT(w2l_algo_cache_parse(c, text, strlen(text)), ==, 2);
  w2l_algo a;
  FC_CHECK(w2l_algo_cache_get(c, "good.one", &a) && a.ws_bytes == 4096);
  FC_CHECK(w2l_algo_cache_get(c, "good.two", &a) && a.algo == 7);
  FC_CHECK(!w2l_algo_cache_get(c, "crlf", &a));
  FC_CHECK_INT(w2l_algo_cache_save(c), ==, FC_OK); /* memory only: nothing written, no error */
  g_free(text);
  w2l_algo_cache_close(c);

  /* a folder that cannot be made: an error to say, and the cache works on */
  char *dir = tmpdir(), *file = g_strdup_printf("%s/plain", dir);
  FC_CHECK(g_file_set_contents(file, "x", 1, NULL));
  char *path = g_strdup_printf("%s/sub/c.algos", file); /* under a plain file */
  c = w2l_algo_cache_open(path);
  FC_REQUIRE(c != NULL);
  w2l_algo_cache_put(c, "k", &(w2l_algo){1, 1, 1});
  fc_error_clear();
  FC_CHECK_INT(w2l_algo_cache_save(c), ==, FC_EIO);
  FC_CHECK(strstr(fc_error_detail(FC_EIO), "c.algos") != NULL);
  FC_CHECK(w2l_algo_cache_get(c, "k", &a) && a.algo == 1);
  w2l_algo_cache_close(c);
  char *cmd = g_strdup_printf("rm -rf %s", dir);
  FC_CHECK(system(cmd) == 0);
  g_free(cmd), g_free(path), g_free(file), g_free(dir);
}

int main(void) {
  FC_RUN(test_path);
  FC_RUN(test_round_trip);
  FC_RUN(test_bad_files);
  return fc_test_failed_ ? 1 : 0;
}
