/* Redis replies (core/resp.h): every reply type of RESP2 and RESP3, each cut at every byte
 * (a cut reply must ask for more, never parse or fail), nesting, nulls, errors, a big bulk
 * string, the limits, and malformed inputs refused with a detail that says what is wrong;
 * commands encoded and parsed back byte for byte. */
#include "core/resp.h"
#include "facecast/error.h"
#include "fc_test.h"

#include <limits.h>
#include <math.h>

/* Parses whole (with trailing bytes after it, which must be left) and every proper prefix
 * (FC_EAGAIN each); the tree of the whole in *out. */
static int parse_all_cuts(const char *d, size_t n, fc_resp **out) {
  int ok = 1;
  for (size_t k = 0; k < n; k++) {
    fc_resp *r = NULL;
    size_t used = 99;
    int err = fc_resp_parse(d, k, NULL, &r, &used);
    if (err != FC_EAGAIN || r || used) {
      fprintf(stderr, "  cut at %zu of %zu: %d (%s)\n", k, n, err, fc_error_detail(err));
      ok = 0;
    }
    fc_resp_free(r);
  }
  char *more = malloc(n + 5);
  memcpy(more, d, n);
  memcpy(more + n, "+X\r\n", 5);
  size_t used = 0;
  int err = fc_resp_parse(more, n + 4, NULL, out, &used);
  free(more);
  if (err || used != n) {
    fprintf(stderr, "  whole: %d (%s), used %zu of %zu\n", err, fc_error_detail(err), used, n);
    ok = 0;
  }
  return ok;
}

#define PARSE(lit, r) parse_all_cuts(lit, sizeof(lit) - 1, &(r))

static void test_resp2_scalars(void) {
  fc_resp *r = NULL;
  FC_CHECK(PARSE("+OK\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_STRING && r->len == 2 && !strcmp(r->str, "OK"));
  fc_resp_free(r);
  FC_CHECK(PARSE("-ERR unknown command 'FOO'\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_ERROR && !strcmp(r->str, "ERR unknown command 'FOO'"));
  fc_resp_free(r);
  FC_CHECK(PARSE(":-9223372036854775808\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_INTEGER && r->integer == LLONG_MIN);
  fc_resp_free(r);
  FC_CHECK(PARSE(":9223372036854775807\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_INTEGER && r->integer == LLONG_MAX);
  fc_resp_free(r);
  FC_CHECK(PARSE("$0\r\n\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_BULK && r->len == 0 && r->str && !r->str[0]);
  fc_resp_free(r);
  FC_CHECK(PARSE("$7\r\na\0b\r\nc!\r\n", r)); /* binary: NUL and CRLF inside */
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_BULK && r->len == 7 && !memcmp(r->str, "a\0b\r\nc!", 7));
  fc_resp_free(r);
  FC_CHECK(PARSE("$-1\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_NIL);
  fc_resp_free(r);
  FC_CHECK(PARSE("*-1\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_NIL);
  fc_resp_free(r);
  FC_CHECK(PARSE("*0\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_ARRAY && r->n == 0);
  fc_resp_free(r);
}

static void test_resp3_types(void) {
  fc_resp *r = NULL;
  FC_CHECK(PARSE("_\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_NIL);
  fc_resp_free(r);
  FC_CHECK(PARSE("#t\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_BOOL && r->integer == 1);
  fc_resp_free(r);
  FC_CHECK(PARSE(",-1.5e3\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_DOUBLE && r->dbl == -1500.0);
  fc_resp_free(r);
  FC_CHECK(PARSE(",-inf\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_DOUBLE && isinf(r->dbl) && r->dbl < 0);
  fc_resp_free(r);
  FC_CHECK(PARSE(",nan\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_DOUBLE && isnan(r->dbl));
  fc_resp_free(r);
  FC_CHECK(PARSE("(-3492890328409238509324850943850943825024385\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_BIGNUM && !strcmp(r->str, "-3492890328409238509324850943850943825024385"));
  fc_resp_free(r);
  FC_CHECK(PARSE("!21\r\nSYNTAX invalid syntax\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_ERROR && !strcmp(r->str, "SYNTAX invalid syntax"));
  fc_resp_free(r);
  FC_CHECK(PARSE("=15\r\ntxt:Some string\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_VERBATIM && !strcmp(r->fmt, "txt") && !strcmp(r->str, "Some string"));
  fc_resp_free(r);
  FC_CHECK(PARSE("%2\r\n+first\r\n:1\r\n$6\r\nsecond\r\n#f\r\n", r));
  FC_REQUIRE(r);
  FC_REQUIRE(r->type == FC_RESP_MAP && r->n == 4);
  FC_CHECK(!strcmp(r->elem[0].str, "first") && r->elem[1].integer == 1);
  FC_CHECK(!strcmp(r->elem[2].str, "second") && r->elem[3].type == FC_RESP_BOOL && !r->elem[3].integer);
  fc_resp_free(r);
  FC_CHECK(PARSE("~2\r\n+a\r\n+b\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_SET && r->n == 2 && !strcmp(r->elem[1].str, "b"));
  fc_resp_free(r);
  FC_CHECK(PARSE(">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_PUSH && r->n == 3 && !strcmp(r->elem[2].str, "hi"));
  fc_resp_free(r);
  /* attributes annotate the value after them and are dropped, also inside aggregates */
  FC_CHECK(PARSE("|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*2\r\n:2039123\r\n|1\r\n+x\r\n+y\r\n:9\r\n", r));
  FC_REQUIRE(r);
  FC_REQUIRE(r->type == FC_RESP_ARRAY && r->n == 2);
  FC_CHECK(r->elem[0].integer == 2039123 && r->elem[1].type == FC_RESP_INTEGER && r->elem[1].integer == 9);
  fc_resp_free(r);
}

static void test_nested(void) {
  /* an XREADGROUP reply's shape, with nulls and an error inside */
  static const char d[] = "*2\r\n*2\r\n$1\r\ns\r\n*2\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
                          "*2\r\n$3\r\n2-0\r\n*-1\r\n*3\r\n$-1\r\n-ERR inner\r\n*1\r\n*0\r\n";
  fc_resp *r = NULL;
  FC_CHECK(parse_all_cuts(d, sizeof d - 1, &r));
  FC_REQUIRE(r && r->type == FC_RESP_ARRAY && r->n == 2);
  fc_resp *s = &r->elem[0];
  FC_REQUIRE(s->n == 2 && !strcmp(s->elem[0].str, "s"));
  fc_resp *entries = &s->elem[1];
  FC_REQUIRE(entries->n == 2);
  FC_CHECK(!strcmp(entries->elem[0].elem[0].str, "1-0"));
  FC_CHECK(!strcmp(entries->elem[0].elem[1].elem[1].str, "v"));
  FC_CHECK(entries->elem[1].elem[1].type == FC_RESP_NIL);
  fc_resp *t = &r->elem[1];
  FC_REQUIRE(t->n == 3);
  FC_CHECK(t->elem[0].type == FC_RESP_NIL && t->elem[1].type == FC_RESP_ERROR);
  FC_CHECK(t->elem[2].type == FC_RESP_ARRAY && t->elem[2].n == 1 && t->elem[2].elem[0].n == 0);
  fc_resp_free(r);
  /* 16 levels is the default limit: 16 pass, 17 are refused */
  char deep[200] = "";
  for (int i = 0; i < 16; i++) strcat(deep, "*1\r\n");
  strcat(deep, ":1\r\n");
  FC_CHECK(parse_all_cuts(deep, strlen(deep), &r));
  fc_resp *x = r;
  for (int i = 0; x && i < 16; i++) x = x->n == 1 ? &x->elem[0] : NULL;
  FC_CHECK(x && x->type == FC_RESP_INTEGER && x->integer == 1);
  fc_resp_free(r);
  char deeper[200] = "*1\r\n";
  strcat(deeper, deep);
  size_t used;
  int err = fc_resp_parse(deeper, strlen(deeper), NULL, &r, &used);
  FC_CHECK(err == FC_EFORMAT && strstr(fc_error_detail(err), "deeper than the limit"));
}

static void test_big_bulk(void) {
  size_t n = 300000;
  char head[32];
  int h = snprintf(head, sizeof head, "$%zu\r\n", n);
  char *d = malloc(n + (size_t)h + 2);
  memcpy(d, head, (size_t)h);
  for (size_t i = 0; i < n; i++) d[h + i] = (char)(i * 7 + (i >> 8));
  memcpy(d + h + n, "\r\n", 2);
  fc_resp *r = NULL;
  FC_CHECK(parse_all_cuts(d, n + (size_t)h + 2, &r));
  FC_REQUIRE(r);
  FC_CHECK(r->type == FC_RESP_BULK && r->len == n && !memcmp(r->str, d + h, n) && r->str[n] == 0);
  fc_resp_free(r);
  free(d);
}

static void test_malformed(void) {
  static const struct {
    const char *in, *why;
  } bad[] = {
      {"?x\r\n", "unknown type byte 0x3f"},
      {"+OK\r\r", "CR not followed by LF"},
      {"+a\nb\r\n", "LF without CR"},
      {":12a\r\n", "not a decimal digit"},
      {":\r\n", "empty number"},
      {":99999999999999999999\r\n", "out of the 64-bit range"},
      {"$3\r\nabcd\r\n", "not followed by CRLF"},
      {"$3\r\nabc\rx", "not followed by CRLF"},
      {"$-2\r\n", "negative length"},
      {"*-3\r\n", "negative length"},
      {"%-1\r\n", "negative length"},
      {"$?\r\n", "streamed"},
      {"#x\r\n", "boolean"},
      {"_x\r\n", "null with a payload"},
      {",abc\r\n", "not a double"},
      {",\r\n", "double empty"},
      {"(12x\r\n", "big number"},
      {"=2\r\nab\r\n", "without its format"},
      {"=5\r\ntxtXa\r\n", "not followed by ':'"},
      {"*2\r\n:1\r\n?\r\n", "unknown type"},
      {"*2000000000\r\n", "more elements than the limit"},
      {"$999999999999\r\n", "longer than the limit"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    fc_resp *r = (fc_resp *)1;
    size_t used = 5;
    fc_error_clear();
    int err = fc_resp_parse(bad[i].in, strlen(bad[i].in), NULL, &r, &used);
    const char *d = fc_error_detail(err);
    if (err != FC_EFORMAT || r || used || !strstr(d, bad[i].why) || !strstr(d, "RESP: byte ")) {
      fprintf(stderr, "  '%s': %d '%s' (wanted '%s')\n", bad[i].in, err, d, bad[i].why);
      fc_test_case_failed_ = 1;
    }
  }
  /* limits from the caller; a line without CRLF stops at max_line, not at the buffer's end */
  fc_resp_limits lim = {.max_line = 10, .max_bulk = 4, .max_elements = 3, .max_depth = 2};
  static const struct {
    const char *in, *why;
  } over[] = {
      {"+0123456789ab", "line longer"},
      {"$5\r\n", "bulk string longer"},
      {"*4\r\n", "more elements"},
      {"*2\r\n*1\r\n:1\r\n:2\r\n", "more elements"},
      {"*1\r\n*1\r\n*1\r\n", "deeper"},
  };
  for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
    fc_resp *r = NULL;
    size_t used;
    int err = fc_resp_parse(over[i].in, strlen(over[i].in), &lim, &r, &used);
    if (err != FC_EFORMAT || !strstr(fc_error_detail(err), over[i].why)) {
      fprintf(stderr, "  limit '%s': %d '%s'\n", over[i].in, err, fc_error_detail(err));
      fc_test_case_failed_ = 1;
    }
  }
  fc_resp_limits tot = {.max_total = 64};
  fc_resp *r = NULL;
  size_t used;
  int err = fc_resp_parse("$100\r\n", 6, &tot, &r, &used);
  FC_CHECK(err == FC_EFORMAT && strstr(fc_error_detail(err), "reply larger"));
  /* a huge declared array with nothing behind it asks for more and allocates nothing yet */
  FC_CHECK_INT(fc_resp_parse("*1000000\r\n:1\r\n", 14, NULL, &r, &used), ==, FC_EAGAIN);
  FC_CHECK(!r);
  FC_CHECK_INT(fc_resp_parse(NULL, 0, NULL, &r, &used), ==, FC_EAGAIN);
  FC_CHECK_INT(fc_resp_parse("+x\r\n", 4, NULL, NULL, &used), ==, FC_EINVAL);
}

static void test_command(void) {
  const char *argv[] = {"SET", "k\r\n", "v\0x\r\n*1"};
  size_t lens[] = {3, 3, 7};
  char *b = NULL;
  size_t n = 0;
  FC_REQUIRE(fc_resp_command(3, argv, lens, &b, &n) == 0);
  static const char want[] = "*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$7\r\nv\0x\r\n*1\r\n";
  FC_CHECK(n == sizeof want - 1 && !memcmp(b, want, n));
  fc_resp *r = NULL;
  FC_CHECK(parse_all_cuts(b, n, &r));
  FC_REQUIRE(r && r->type == FC_RESP_ARRAY && r->n == 3);
  for (int i = 0; i < 3; i++)
    FC_CHECK(r->elem[i].type == FC_RESP_BULK && r->elem[i].len == lens[i] &&
             !memcmp(r->elem[i].str, argv[i], lens[i]));
  fc_resp_free(r);
  free(b);
  const char *one[] = {"PING"};
  FC_REQUIRE(fc_resp_command(1, one, NULL, &b, &n) == 0);
  FC_CHECK(n == 14 && !memcmp(b, "*1\r\n$4\r\nPING\r\n", 14));
  free(b);
  FC_CHECK_INT(fc_resp_command(0, one, NULL, &b, &n), ==, FC_EINVAL);
  const char *nul[] = {"GET", NULL};
  FC_CHECK_INT(fc_resp_command(2, nul, NULL, &b, &n), ==, FC_EINVAL);
  FC_CHECK(!strcmp(fc_resp_type_name(FC_RESP_BULK), "bulk string"));
}

int main(void) {
  FC_RUN(test_resp2_scalars);
  FC_RUN(test_resp3_types);
  FC_RUN(test_nested);
  FC_RUN(test_big_bulk);
  FC_RUN(test_malformed);
  FC_RUN(test_command);
  FC_TEST_EXIT();
}
