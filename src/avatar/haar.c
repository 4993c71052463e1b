/* Viola-Jones Haar cascade evaluation, reproducing OpenCV's CascadeClassifier::detectMultiScale
 * (CPU path) so that boxes match cv2's exactly.
 *
 * Design notes.
 * - The algorithm follows the written description in shared/research/formats.md §2 (no OpenCV
 *   code was used): per scale, the grey image is resized from the original with
 *   INTER_LINEAR_EXACT's 8-bit fixed-point weights, integral images of values and squares are
 *   built, and every window (step 2 below factor 2, else 1) is normalised by its standard
 *   deviation and run through the boosted stages. The float32/double split below is deliberate:
 *   it is what makes borderline windows go the same way as in OpenCV.
 * - Two cv2 4.6 behaviours that formats.md does not describe were found by probing cv2 with
 *   hand-made cascades and are reproduced: the row stripes of its thread pool can leave the
 *   last row of windows of a level unscanned (see the scan loop), and when no scale lies in
 *   [min_size, max_size] the one nearest min_size is used (pick_scales).
 * - The XML is read with GLib's GMarkupParser. Parsing tracks the element path
 *   ("stages/_/weakClassifiers/_/leafValues") and fills flat arrays; every index read from
 *   the file is validated before detection may use it, so a hostile file cannot make the
 *   evaluator read out of bounds or loop.
 * - The loaded cascade is immutable; all scratch (pyramid level, integral images, compiled
 *   feature offsets, candidates) is allocated per call, so fc_haar_detect is thread-safe.
 * - Speed: integral images of every scale share one buffer with the stride of the full image,
 *   so each feature rectangle compiles once per call to four integer offsets.
 * - Integral images are uint32 and may wrap on huge images; unsigned wrap-around keeps window
 *   differences exact, as they are far below 2^32.
 */
#include "avatar/haar.h"

#include "facecast/error.h"

#include <glib.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HAAR_MAX_RECTS 3
#define HAAR_MAX_WIN 1024   /* sanity bound on the cascade window side */
#define HAAR_MAX_SIDE 65535 /* sanity bound on the image side */
#define THRESHOLD_EPS 1e-5f /* OpenCV lowers every stage threshold by this when loading */
#define GROUP_EPS 0.2       /* groupRectangles' eps in detectMultiScale */

typedef struct {
  int x, y, w, h;
  float weight;
} haar_rect;
typedef struct {
  int nrects;
  haar_rect r[HAAR_MAX_RECTS];
} haar_feature;
/* left/right: > 0 is a node index within the tree, <= 0 is leaf number -child. */
typedef struct {
  int left, right, feature;
  float threshold;
} haar_node;
typedef struct {
  int node0, nnodes, leaf0, nleaves;
} haar_weak;
typedef struct {
  int weak0, nweak, max_weak;
  float threshold;
  int has_threshold;
} haar_stage;

struct fc_haar {
  int win_w, win_h;
  int nstages, nweaks, nnodes, nfeatures;
  haar_stage *stages;
  haar_weak *weaks;
  haar_node *nodes;
  float *leaves;
  haar_feature *features;
};

fc_haar_params fc_haar_params_default(void) {
  fc_haar_params p = {1.1, 3, 0, 0};
  return p;
}

const char *fc_haar_default_cascade(void) {
  return "/usr/share/opencv4/haarcascades/haarcascade_frontalface_default.xml";
}

void fc_haar_destroy(fc_haar *h) {
  if (!h) return;
  g_free(h->stages); /* these came from GArrays, see take() */
  g_free(h->weaks);
  g_free(h->nodes);
  g_free(h->leaves);
  g_free(h->features);
  free(h);
}

/* ---- XML loading ----------------------------------------------------------------------- */

typedef struct parse_ctx {
  GString *path; /* element path from the root, '/'-separated */
  GArray *lens;  /* path length before each open element */
  GString *text; /* character data of the innermost element */
  GArray *nums;  /* scratch for parsed numbers (double) */
  int err;       /* FC_E* of the first semantic problem, 0 if none */
  char detail[200];
  int saw_cascade;
  char stage_type[16], feature_type[16];
  int win_w, win_h, stage_num, max_cat;
  GArray *stages, *weaks, *nodes, *leaves, *features;
} parse_ctx;

#define CASCADE_PREFIX "opencv_storage/cascade/"

/* Records the first problem (code and detail) and, during parsing, stops the parser.
 * Returns code so that validate() can `return fail(...)`. */
static int fail(parse_ctx *c, GError **error, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(parse_ctx *c, GError **error, int code, const char *fmt, ...) {
  if (!c->err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof c->detail, fmt, ap);
    va_end(ap);
    c->err = code;
  }
  if (error && !*error)
    g_set_error_literal(error, G_MARKUP_ERROR, G_MARKUP_ERROR_INVALID_CONTENT, c->detail);
  return code;
}

/* Parses whitespace-separated numbers into c->nums; FALSE on a token that is not a number. */
static gboolean parse_numbers(parse_ctx *c, const char *s) {
  g_array_set_size(c->nums, 0);
  for (;;) {
    while (g_ascii_isspace(*s)) s++;
    if (!*s) return TRUE;
    char *end;
    double v = g_ascii_strtod(s, &end);
    if (end == s || !isfinite(v) || (*end && !g_ascii_isspace(*end))) return FALSE;
    g_array_append_val(c->nums, v);
    s = end;
  }
}

static gboolean is_int(double v) { return v == floor(v) && fabs(v) <= 1e9; }

/* The single integer in c->text, or FALSE. */
static gboolean parse_int(parse_ctx *c, int *out) {
  if (!parse_numbers(c, c->text->str) || c->nums->len != 1) return FALSE;
  double v = g_array_index(c->nums, double, 0);
  if (!is_int(v)) return FALSE;
  *out = (int)v;
  return TRUE;
}

static void on_start(GMarkupParseContext *mc, const char *name, const char **attr_names,
                     const char **attr_values, gpointer user, GError **error) {
  parse_ctx *c = user;
  int depth = (int)c->lens->len;
  if (depth == 0 && strcmp(name, "opencv_storage") != 0) {
    fail(c, error, FC_EFORMAT, "root element is <%s>, not <opencv_storage>", name);
    return;
  }
  if (depth == 1) {
    const char *type = NULL;
    for (int i = 0; attr_names[i]; i++)
      if (!strcmp(attr_names[i], "type_id")) type = attr_values[i];
    if (type && !strcmp(type, "opencv-haar-classifier")) {
      fail(c, error, FC_EUNSUPPORTED, "old-format (opencv-haar-classifier) cascade");
      return;
    }
    if (!strcmp(name, "cascade")) {
      /* Files written by opencv_traincascade may omit type_id (catface, russian plate). */
      if (type && strcmp(type, "opencv-cascade-classifier") != 0) {
        fail(c, error, FC_EFORMAT, "<cascade> has type_id \"%s\", not opencv-cascade-classifier",
             type);
        return;
      }
      if (c->saw_cascade++) {
        fail(c, error, FC_EFORMAT, "more than one <cascade> element");
        return;
      }
    }
  }
  guint len = (guint)c->path->len;
  g_array_append_val(c->lens, len);
  if (depth) g_string_append_c(c->path, '/');
  g_string_append(c->path, name);
  g_string_truncate(c->text, 0);

  if (!g_str_has_prefix(c->path->str, CASCADE_PREFIX)) return;
  const char *rel = c->path->str + strlen(CASCADE_PREFIX);
  if (!strcmp(rel, "stages/_")) {
    haar_stage st = {(int)c->weaks->len, 0, -1, 0.f, 0};
    g_array_append_val(c->stages, st);
  } else if (!strcmp(rel, "stages/_/weakClassifiers/_")) {
    haar_weak wk = {0, 0, 0, 0};
    g_array_append_val(c->weaks, wk);
    g_array_index(c->stages, haar_stage, c->stages->len - 1).nweak++;
  } else if (!strcmp(rel, "features/_")) {
    haar_feature f;
    memset(&f, 0, sizeof f);
    g_array_append_val(c->features, f);
  }
}

/* Reads one weak classifier's "left right feature threshold" groups. */
static void read_nodes(parse_ctx *c, haar_weak *wk, GError **error) {
  guint n = c->nums->len;
  if (n == 0 || n % 4 != 0 || wk->nnodes) {
    fail(c, error, FC_EFORMAT, "<internalNodes> needs groups of 4 numbers, got %u", n);
    return;
  }
  wk->node0 = (int)c->nodes->len;
  wk->nnodes = (int)(n / 4);
  for (guint i = 0; i < n; i += 4) {
    const double *v = &g_array_index(c->nums, double, i);
    if (!is_int(v[0]) || !is_int(v[1]) || !is_int(v[2]) || v[2] < 0) {
      fail(c, error, FC_EFORMAT, "<internalNodes> has a non-integer child or feature index");
      return;
    }
    haar_node nd = {(int)v[0], (int)v[1], (int)v[2], (float)v[3]};
    g_array_append_val(c->nodes, nd);
  }
}

static void read_rect(parse_ctx *c, haar_feature *f, GError **error) {
  const double *v = (const double *)(void *)c->nums->data;
  if (c->nums->len != 5 || !is_int(v[0]) || !is_int(v[1]) || !is_int(v[2]) || !is_int(v[3])) {
    fail(c, error, FC_EFORMAT, "a feature rect needs \"x y w h weight\"");
    return;
  }
  if (f->nrects == HAAR_MAX_RECTS) {
    fail(c, error, FC_EUNSUPPORTED, "a feature has more than %d rects", HAAR_MAX_RECTS);
    return;
  }
  haar_rect r = {(int)v[0], (int)v[1], (int)v[2], (int)v[3], (float)v[4]};
  f->r[f->nrects++] = r;
}

static void on_end(GMarkupParseContext *mc, const char *name, gpointer user, GError **error) {
  parse_ctx *c = user;
  const char *rel =
      g_str_has_prefix(c->path->str, CASCADE_PREFIX) ? c->path->str + strlen(CASCADE_PREFIX) : NULL;
  haar_stage *st =
      c->stages->len ? &g_array_index(c->stages, haar_stage, c->stages->len - 1) : NULL;
  haar_weak *wk = c->weaks->len ? &g_array_index(c->weaks, haar_weak, c->weaks->len - 1) : NULL;
  gboolean ok = TRUE;
  if (!rel) {
  } else if (!strcmp(rel, "stageType") || !strcmp(rel, "featureType")) {
    /* Checked here, before the stages, so that an LBP file is called unsupported rather than
     * malformed when its (differently shaped) nodes are reached. */
    int is_stage = rel[0] == 's';
    const char *want = is_stage ? "BOOST" : "HAAR";
    char *dst = is_stage ? c->stage_type : c->feature_type;
    g_strlcpy(dst, g_strstrip(c->text->str), sizeof c->stage_type);
    if (strcmp(dst, want) != 0)
      fail(c, error, FC_EUNSUPPORTED, "%s %s is not supported (only %s)", name, dst, want);
  } else if (!strcmp(rel, "width")) {
    ok = parse_int(c, &c->win_w);
  } else if (!strcmp(rel, "height")) {
    ok = parse_int(c, &c->win_h);
  } else if (!strcmp(rel, "stageNum")) {
    ok = parse_int(c, &c->stage_num);
  } else if (!strcmp(rel, "featureParams/maxCatCount")) {
    ok = parse_int(c, &c->max_cat);
  } else if (!strcmp(rel, "stages/_/maxWeakCount")) {
    ok = parse_int(c, &st->max_weak);
  } else if (!strcmp(rel, "stages/_/stageThreshold")) {
    ok = parse_numbers(c, c->text->str) && c->nums->len == 1;
    /* Same float arithmetic as OpenCV's loader, so the comparison matches bit for bit. */
    if (ok) st->threshold = (float)g_array_index(c->nums, double, 0) - THRESHOLD_EPS;
    st->has_threshold = ok;
  } else if (!strcmp(rel, "stages/_")) {
    if (st->nweak == 0 || !st->has_threshold || (st->max_weak >= 0 && st->max_weak != st->nweak))
      fail(c, error, FC_EFORMAT, "stage %u: %d weak classifiers (maxWeakCount %d)%s",
           c->stages->len - 1, st->nweak, st->max_weak,
           st->has_threshold ? "" : ", no stageThreshold");
  } else if (!strcmp(rel, "stages/_/weakClassifiers/_/internalNodes")) {
    if ((ok = parse_numbers(c, c->text->str))) read_nodes(c, wk, error);
  } else if (!strcmp(rel, "stages/_/weakClassifiers/_/leafValues")) {
    if ((ok = parse_numbers(c, c->text->str)) && !wk->nleaves && c->nums->len) {
      wk->leaf0 = (int)c->leaves->len;
      wk->nleaves = (int)c->nums->len;
      for (guint i = 0; i < c->nums->len; i++) {
        float v = (float)g_array_index(c->nums, double, i);
        g_array_append_val(c->leaves, v);
      }
    } else {
      ok = FALSE;
    }
  } else if (!strcmp(rel, "features/_/rects/_")) {
    if ((ok = parse_numbers(c, c->text->str)))
      read_rect(c, &g_array_index(c->features, haar_feature, c->features->len - 1), error);
  } else if (!strcmp(rel, "features/_/tilted")) {
    int tilted = 0;
    if ((ok = parse_int(c, &tilted)) && tilted)
      fail(c, error, FC_EUNSUPPORTED, "tilted features are not supported");
  }
  if (!ok) fail(c, error, FC_EFORMAT, "bad content in <%s>: \"%.40s\"", name, c->text->str);
  g_string_truncate(c->path, g_array_index(c->lens, guint, c->lens->len - 1));
  g_array_set_size(c->lens, c->lens->len - 1);
  g_string_truncate(c->text, 0);
}

static void on_text(GMarkupParseContext *mc, const char *text, gsize len, gpointer user,
                    GError **error) {
  parse_ctx *c = user;
  g_string_append_len(c->text, text, (gssize)len);
}

/* Whole-cascade checks, run once the file is read: everything detection relies on. */
static int validate(parse_ctx *c) {
  if (!c->saw_cascade) return fail(c, NULL, FC_EFORMAT, "no <cascade> element");
  if (!c->stage_type[0] || !c->feature_type[0])
    return fail(c, NULL, FC_EFORMAT, "missing <stageType> or <featureType>");
  if (c->max_cat != 0) return fail(c, NULL, FC_EUNSUPPORTED, "categorical features");
  if (c->win_w < 3 || c->win_h < 3 || c->win_w > HAAR_MAX_WIN || c->win_h > HAAR_MAX_WIN)
    return fail(c, NULL, FC_EFORMAT, "bad window size %dx%d", c->win_w, c->win_h);
  if (c->stages->len == 0) return fail(c, NULL, FC_EFORMAT, "no stages");
  if (c->stage_num >= 0 && c->stage_num != (int)c->stages->len)
    return fail(c, NULL, FC_EFORMAT, "stageNum %d but %u stages", c->stage_num, c->stages->len);
  if (c->features->len == 0) return fail(c, NULL, FC_EFORMAT, "no features");
  for (guint i = 0; i < c->features->len; i++) {
    const haar_feature *f = &g_array_index(c->features, haar_feature, i);
    if (f->nrects == 0) return fail(c, NULL, FC_EFORMAT, "feature %u has no rects", i);
    for (int k = 0; k < f->nrects; k++) {
      const haar_rect *r = &f->r[k];
      if (r->x < 0 || r->y < 0 || r->w < 0 || r->h < 0 || r->x + r->w > c->win_w ||
          r->y + r->h > c->win_h || !isfinite(r->weight))
        return fail(c, NULL, FC_EFORMAT, "feature %u: rect outside the %dx%d window", i, c->win_w,
                    c->win_h);
    }
  }
  for (guint i = 0; i < c->weaks->len; i++) {
    const haar_weak *wk = &g_array_index(c->weaks, haar_weak, i);
    if (wk->nnodes == 0 || wk->nleaves != wk->nnodes + 1)
      return fail(c, NULL, FC_EFORMAT, "weak classifier %u: %d nodes, %d leaves", i, wk->nnodes,
                  wk->nleaves);
    for (int j = 0; j < wk->nnodes; j++) {
      const haar_node *nd = &g_array_index(c->nodes, haar_node, wk->node0 + j);
      /* Children must point forward, which also rules out cycles. */
      int kids[2] = {nd->left, nd->right};
      for (int k = 0; k < 2; k++)
        if ((kids[k] > 0 && (kids[k] <= j || kids[k] >= wk->nnodes)) ||
            (kids[k] <= 0 && -kids[k] >= wk->nleaves))
          return fail(c, NULL, FC_EFORMAT, "weak classifier %u: bad child %d", i, kids[k]);
      if (nd->feature >= (int)c->features->len)
        return fail(c, NULL, FC_EFORMAT, "weak classifier %u: feature %d of %u", i, nd->feature,
                    c->features->len);
    }
  }
  return FC_OK;
}

/* Keeps a GArray's storage (freed with g_free) and drops the GArray wrapper. */
static void *take(GArray **a) {
  void *p = g_array_free(*a, FALSE);
  *a = NULL;
  return p;
}

/* From the file xml_path, or from mem (size bytes; xml_path names it in messages). */
static fc_haar *load(const char *xml_path, const char *mem, size_t mem_size, int *err) {
  int dummy;
  if (!err) err = &dummy;
  *err = FC_OK;
  if (!xml_path) {
    *err = fc_error_set(FC_EINVAL, "fc_haar_load: NULL path");
    return NULL;
  }
  fc_haar *h = NULL;
  char *data = NULL;
  gsize size = 0;
  GError *gerr = NULL;
  GMarkupParseContext *mc = NULL;
  parse_ctx c;
  memset(&c, 0, sizeof c);
  c.max_cat = 0;
  c.stage_num = -1;
  c.path = g_string_new(NULL);
  c.text = g_string_new(NULL);
  c.lens = g_array_new(FALSE, FALSE, sizeof(guint));
  c.nums = g_array_new(FALSE, FALSE, sizeof(double));
  c.stages = g_array_new(FALSE, FALSE, sizeof(haar_stage));
  c.weaks = g_array_new(FALSE, FALSE, sizeof(haar_weak));
  c.nodes = g_array_new(FALSE, FALSE, sizeof(haar_node));
  c.leaves = g_array_new(FALSE, FALSE, sizeof(float));
  c.features = g_array_new(FALSE, FALSE, sizeof(haar_feature));

  if (mem) {
    data = g_strndup(mem, mem_size); /* g_markup wants no NUL inside: a NUL ends the text */
    size = strlen(data);
  } else if (!g_file_get_contents(xml_path, &data, &size, &gerr)) {
    int code = g_error_matches(gerr, G_FILE_ERROR, G_FILE_ERROR_NOENT) ? FC_ENOTFOUND : FC_EIO;
    *err = fc_error_set(code, "%s: %s", xml_path, gerr->message);
    goto cleanup;
  }
  static const GMarkupParser parser = {on_start, on_end, on_text, NULL, NULL};
  mc = g_markup_parse_context_new(&parser, 0, &c, NULL);
  if (!g_markup_parse_context_parse(mc, data, (gssize)size, &gerr) ||
      !g_markup_parse_context_end_parse(mc, &gerr)) {
    int line = 0;
    g_markup_parse_context_get_position(mc, &line, NULL);
    if (c.err)
      *err = fc_error_set(c.err, "%s:%d: %s", xml_path, line, c.detail);
    else
      *err = fc_error_set(FC_EFORMAT, "%s: malformed XML: %s", xml_path, gerr->message);
    goto cleanup;
  }
  int rc = validate(&c);
  if (rc != FC_OK) {
    *err = fc_error_set(rc, "%s: %s", xml_path, c.detail);
    goto cleanup;
  }

  h = calloc(1, sizeof *h);
  if (!h) {
    *err = fc_error_set(FC_ENOMEM, "%s: out of memory", xml_path);
    goto cleanup;
  }
  h->win_w = c.win_w;
  h->win_h = c.win_h;
  h->nstages = (int)c.stages->len;
  h->nweaks = (int)c.weaks->len;
  h->nnodes = (int)c.nodes->len;
  h->nfeatures = (int)c.features->len;
  h->stages = take(&c.stages);
  h->weaks = take(&c.weaks);
  h->nodes = take(&c.nodes);
  h->leaves = take(&c.leaves);
  h->features = take(&c.features);

cleanup:
  if (mc) g_markup_parse_context_free(mc);
  if (gerr) g_error_free(gerr);
  g_free(data);
  g_string_free(c.path, TRUE);
  g_string_free(c.text, TRUE);
  g_array_free(c.lens, TRUE);
  g_array_free(c.nums, TRUE);
  if (c.stages) g_array_free(c.stages, TRUE);
  if (c.weaks) g_array_free(c.weaks, TRUE);
  if (c.nodes) g_array_free(c.nodes, TRUE);
  if (c.leaves) g_array_free(c.leaves, TRUE);
  if (c.features) g_array_free(c.features, TRUE);
  return h;
}

fc_haar *fc_haar_load(const char *xml_path, int *err) { return load(xml_path, NULL, 0, err); }

fc_haar *fc_haar_load_mem(const void *data, size_t size, const char *name, int *err) {
  if (!data) {
    if (err) *err = fc_error_set(FC_EINVAL, "fc_haar_load_mem: NULL data");
    return NULL;
  }
  return load(name ? name : "cascade", data, size, err);
}

/* ---- Detection ------------------------------------------------------------------------- */

/* A tree node compiled for one integral-image stride, with its feature inlined so that the
 * evaluator walks one sequential array: the four corner offsets of each rect (top-left,
 * top-right, bottom-left, bottom-right) relative to the window's corner, the weights, and
 * the two successors (>= 0: node index in this array; < 0: a leaf, whose value is in leaf[]).
 * Holding leaf values here lets the compiler select them without a dependent load. */
typedef struct cnode {
  int off[HAAR_MAX_RECTS][4];
  float weight[HAAR_MAX_RECTS];
  float threshold;
  int next[2];
  float leaf[2];
  int nrects;
} cnode;

static void rect_offsets(int x, int y, int w, int h, int stride, int off[4]) {
  off[0] = y * stride + x;
  off[1] = y * stride + x + w;
  off[2] = (y + h) * stride + x;
  off[3] = (y + h) * stride + x + w;
}

/* Window sums are below 2^31, so the uint32 difference is exact even when the table wrapped,
 * and fits an int (whose conversion to float is cheaper than uint32's). */
static inline int rect_sum(const uint32_t *p, const int off[4]) {
  return (int)(p[off[3]] - p[off[1]] - p[off[2]] + p[off[0]]);
}

/* One axis of INTER_LINEAR_EXACT from S to D samples: source indices i0/i1 and the weight
 * of i1 in 1/256 (formats.md §2.2 step 3). Outside the image the edge pixel stands alone. */
static void exact_axis(int S, int D, int *tab) {
  double scale = 1.0 / ((double)D / S);
  for (int d = 0; d < D; d++, tab += 3) {
    double s = (d + 0.5) * scale - 0.5, fl = floor(s);
    if (fl < 0) {
      tab[0] = tab[1] = 0, tab[2] = 0;
    } else if (fl >= S - 1) {
      tab[0] = tab[1] = S - 1, tab[2] = 0;
    } else {
      tab[0] = (int)fl, tab[1] = (int)fl + 1, tab[2] = (int)lrint((s - fl) * 256.0);
    }
  }
}

static void exact_hpass(const uint8_t *src, const int *xt, int dw, int32_t *out) {
  for (int x = 0; x < dw; x++, xt += 3) out[x] = (256 - xt[2]) * src[xt[0]] + xt[2] * src[xt[1]];
}

/* Bit-exact cv2.resize(INTER_LINEAR_EXACT) of 8-bit grey. Keeps the two most recent
 * horizontal-pass rows, since consecutive output rows mostly share source rows. */
static void resize_exact(const uint8_t *src, int sw, int sh, int sstride, uint8_t *dst, int dw,
                         int dh, int *xt, int *yt, int32_t *rows[2]) {
  exact_axis(sw, dw, xt);
  exact_axis(sh, dh, yt);
  int tag[2] = {-1, -1};
  for (int y = 0; y < dh; y++) {
    int y0 = yt[3 * y], y1 = yt[3 * y + 1], c1 = yt[3 * y + 2], c0 = 256 - c1;
    int a = tag[0] == y0 ? 0 : tag[1] == y0 ? 1 : -1;
    if (a < 0) {
      a = tag[0] == y1 ? 1 : 0;
      exact_hpass(src + (size_t)y0 * sstride, xt, dw, rows[a]);
      tag[a] = y0;
    }
    int b = tag[0] == y1 ? 0 : tag[1] == y1 ? 1 : -1;
    if (b < 0) {
      b = 1 - a;
      exact_hpass(src + (size_t)y1 * sstride, xt, dw, rows[b]);
      tag[b] = y1;
    }
    uint8_t *d = dst + (size_t)y * dw;
    for (int x = 0; x < dw; x++)
      d[x] = (uint8_t)((c0 * rows[a][x] + c1 * rows[b][x] + 32768) >> 16);
  }
}

/* Integral images of values and squares, (w+1)×(h+1) with row and column 0 zero (left so by
 * calloc: only rows/columns >= 1 are written). */
static void integrals(const uint8_t *img, int w, int h, int istride, uint32_t *sum, uint32_t *sq,
                      size_t st) {
  for (int y = 0; y < h; y++) {
    const uint8_t *px = img + (size_t)y * istride;
    const uint32_t *s0 = sum + y * st, *q0 = sq + y * st;
    uint32_t *s1 = sum + (y + 1) * st, *q1 = sq + (y + 1) * st;
    uint32_t rs = 0, rq = 0;
    for (int x = 0; x < w; x++) {
      uint32_t v = px[x];
      rs += v;
      rq += v * v;
      s1[x + 1] = s0[x + 1] + rs;
      q1[x + 1] = q0[x + 1] + rq;
    }
  }
}

/* Runs the cascade on the window whose integral-image corner is p (q for squares).
 * Returns 1 if every stage passes, 0 if stage 0 fails (the caller then skips a position),
 * -1 if the window is too flat (σ <= 10) or a later stage fails. */
static int run_window(const fc_haar *h, const cnode *cn, const uint32_t *p, const uint32_t *q,
                      const int norm[4], int area) {
  int s = rect_sum(p, norm), s2 = rect_sum(q, norm);
  double nf = (double)area * s2 - (double)s * s;
  if (nf <= 0) return -1;
  float vnf = (float)(1.0 / sqrt(nf));
  if ((float)area * vnf >= 0.1) return -1;
  for (int si = 0; si < h->nstages; si++) {
    const haar_stage *st = &h->stages[si];
    double acc = 0; /* leaves summed in double, as OpenCV does */
    for (int k = 0; k < st->nweak; k++) {
      const cnode *nd = &cn[h->weaks[st->weak0 + k].node0];
      for (;;) {
        /* float32 throughout, and in this order, to round like OpenCV */
        float v = nd->weight[0] * (float)rect_sum(p, nd->off[0]) +
                  nd->weight[1] * (float)rect_sum(p, nd->off[1]);
        if (nd->nrects > 2) v += nd->weight[2] * (float)rect_sum(p, nd->off[2]);
        v *= vnf;
        int right = !(v < nd->threshold);
        int next = nd->next[right];
        if (next < 0) {
          acc += nd->leaf[right];
          break;
        }
        nd = &cn[next]; /* validated at load: always forward, so this terminates */
      }
    }
    if (acc < st->threshold) return si == 0 ? 0 : -1;
  }
  return 1;
}

static int similar(const fc_rect *a, const fc_rect *b) {
  double delta = GROUP_EPS * (MIN(a->w, b->w) + MIN(a->h, b->h)) * 0.5;
  return abs(a->x - b->x) <= delta && abs(a->y - b->y) <= delta &&
         abs(a->x + a->w - b->x - b->w) <= delta && abs(a->y + a->h - b->y - b->h) <= delta;
}

static int uf_root(int *parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

/* groupRectangles(min_neighbors, 0.2), formats.md §2.3: clusters of similar rectangles are
 * averaged; small clusters and ones nested inside stronger clusters are dropped. Rewrites r in
 * place and returns the new count, or FC_ENOMEM. */
static int group_rects(fc_rect *r, int n, int min_neighbors) {
  if (min_neighbors <= 0 || n == 0) return n;
  int *parent = malloc(sizeof(int) * 2 * (size_t)n);
  long long *acc = calloc((size_t)n, 4 * sizeof(long long));
  fc_rect *avg = malloc(sizeof *avg * (size_t)n);
  int kept = FC_ENOMEM;
  if (!parent || !acc || !avg) goto cleanup;
  int *label = parent + n, *count = parent; /* count reuses parent once labels are known */

  for (int i = 0; i < n; i++) parent[i] = i;
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (similar(&r[i], &r[j])) {
        int a = uf_root(parent, i), b = uf_root(parent, j);
        if (a != b) parent[b < a ? a : b] = b < a ? b : a;
      }
  int ncls = 0;
  for (int i = 0; i < n; i++) label[i] = -1;
  for (int i = 0; i < n; i++) {
    int root = uf_root(parent, i);
    if (label[root] < 0) label[root] = ncls++;
    label[i] = label[root];
  }
  memset(parent, 0, sizeof(int) * (size_t)n);
  for (int i = 0; i < n; i++) {
    long long *a = acc + 4 * label[i];
    a[0] += r[i].x, a[1] += r[i].y, a[2] += r[i].w, a[3] += r[i].h;
    count[label[i]]++;
  }
  for (int c = 0; c < ncls; c++) {
    float s = 1.f / (float)count[c]; /* sum × float reciprocal, rounded half to even */
    const long long *a = acc + 4 * c;
    avg[c] = (fc_rect){(int)lrintf((float)a[0] * s), (int)lrintf((float)a[1] * s),
                       (int)lrintf((float)a[2] * s), (int)lrintf((float)a[3] * s)};
  }
  kept = 0;
  for (int i = 0; i < ncls; i++) {
    int n1 = count[i], j;
    if (n1 <= min_neighbors) continue;
    const fc_rect *r1 = &avg[i];
    for (j = 0; j < ncls; j++) {
      int n2 = count[j];
      if (j == i || n2 <= min_neighbors) continue;
      const fc_rect *r2 = &avg[j];
      int dx = (int)lrint(r2->w * GROUP_EPS), dy = (int)lrint(r2->h * GROUP_EPS);
      if (r1->x >= r2->x - dx && r1->y >= r2->y - dy && r1->x + r1->w <= r2->x + r2->w + dx &&
          r1->y + r1->h <= r2->y + r2->h + dy && (n2 > MAX(3, n1) || n1 < 3))
        break; /* r1 sits inside a stronger detection */
    }
    if (j == ncls) r[kept++] = *r1; /* kept <= i < n, and avg is separate: safe in place */
  }

cleanup:
  free(parent);
  free(acc);
  free(avg);
  return kept;
}

#define HAAR_MAX_SCALES 100000 /* a scale factor of 1 + 1e-9 would otherwise run for ever */

/* The factors detectMultiScale scans, as cv2 4.6 chooses them: of 1, s, s², … whose window
 * (rounded from the double factor) fits the image, those whose window (rounded from the float
 * factor) lies within [min_size, max_size], stopping at the first above max_size; if none does,
 * the single one whose window is nearest min_size (first of equals). The fallback is not in
 * formats.md; it was found by probing cv2 and is reproduced for the sake of identical boxes.
 * Returns the count and a malloc'd list in *out, or a negative error. */
static int pick_scales(const fc_haar *h, int w, int hgt, const fc_haar_params *p, float **out) {
  float *all = NULL;
  int n = 0, cap = 0;
  *out = NULL;
  for (double factor = 1.0;; factor *= p->scale_factor) {
    if (lrint(h->win_w * factor) > w || lrint(h->win_h * factor) > hgt) break;
    if (n == cap) {
      if (cap >= HAAR_MAX_SCALES) {
        free(all);
        return fc_error_set(FC_EINVAL, "fc_haar_detect: scale factor %.17g gives too many scales",
                            p->scale_factor);
      }
      float *grown = realloc(all, sizeof *all * (size_t)(cap = cap ? 2 * cap : 64));
      if (!grown) {
        free(all);
        return fc_error_set(FC_ENOMEM, "fc_haar_detect: out of memory for scales");
      }
      all = grown;
    }
    all[n++] = (float)factor;
  }
  int max_w = p->max_size > 0 ? p->max_size : w, max_h = p->max_size > 0 ? p->max_size : hgt;
  int kept = 0, best = 0;
  double best_d = INFINITY;
  for (int i = 0; i < n; i++) {
    int ww = (int)lrintf((float)h->win_w * all[i]), wh = (int)lrintf((float)h->win_h * all[i]);
    double d = (double)(p->min_size - ww) * (p->min_size - ww) +
               (double)(p->min_size - wh) * (p->min_size - wh);
    if (d < best_d) best = i, best_d = d;
  }
  for (int i = 0; i < n; i++) {
    int ww = (int)lrintf((float)h->win_w * all[i]), wh = (int)lrintf((float)h->win_h * all[i]);
    if (ww > max_w || wh > max_h) break;
    if (ww < p->min_size || wh < p->min_size) continue;
    all[kept++] = all[i]; /* kept <= i: compacting in place is safe */
  }
  if (kept == 0 && n > 0) all[kept++] = all[best];
  *out = all;
  return kept;
}

static int by_area_desc(const void *pa, const void *pb) {
  const fc_rect *a = pa, *b = pb;
  long long aa = (long long)a->w * a->h, ab = (long long)b->w * b->h;
  if (aa != ab) return aa < ab ? 1 : -1;
  if (a->y != b->y) return a->y < b->y ? -1 : 1;
  return a->x < b->x ? -1 : a->x > b->x;
}

int fc_haar_detect(const fc_haar *h, const uint8_t *gray, int w, int hgt, int stride,
                   const fc_haar_params *p, fc_rect *out, int max_out) {
  fc_haar_params defaults = fc_haar_params_default();
  if (!p) p = &defaults;
  if (!h || !gray || w <= 0 || hgt <= 0 || w > HAAR_MAX_SIDE || hgt > HAAR_MAX_SIDE || stride < w ||
      max_out < 0 || (max_out > 0 && !out))
    return fc_error_set(FC_EINVAL, "fc_haar_detect: invalid image or output (%dx%d, stride %d)", w,
                        hgt, stride);
  if (!(p->scale_factor > 1.0) || !isfinite(p->scale_factor) || p->min_size < 0 || p->max_size < 0)
    return fc_error_set(FC_EINVAL, "fc_haar_detect: invalid parameters (scale %g, size %d..%d)",
                        p->scale_factor, p->min_size, p->max_size);

  size_t st = (size_t)w + 1, ncand = 0, cap = 0;
  uint8_t *level = malloc((size_t)w * hgt);
  int32_t *rows = malloc(sizeof(int32_t) * 2 * (size_t)w);
  int *axis = malloc(sizeof(int) * 3 * ((size_t)w + hgt));
  uint32_t *sum = calloc(st * (hgt + 1), sizeof(uint32_t));
  uint32_t *sq = calloc(st * (hgt + 1), sizeof(uint32_t));
  cnode *cn = calloc((size_t)h->nnodes, sizeof *cn);
  fc_rect *cand = NULL;
  float *scales = NULL;
  int rc = FC_OK;
  if (!level || !rows || !axis || !sum || !sq || !cn) {
    rc = fc_error_set(FC_ENOMEM, "fc_haar_detect: out of memory for a %dx%d image", w, hgt);
    goto cleanup;
  }
  /* Every level's integral image uses stride st, so offsets are compiled once per call.
   * Unused rect slots keep zero offsets and weight: they add 0. */
  for (int i = 0; i < h->nweaks; i++) {
    const haar_weak *wk = &h->weaks[i];
    for (int j = 0; j < wk->nnodes; j++) {
      const haar_node *nd = &h->nodes[wk->node0 + j];
      const haar_feature *f = &h->features[nd->feature];
      cnode *c = &cn[wk->node0 + j];
      c->nrects = f->nrects;
      for (int k = 0; k < f->nrects; k++) {
        rect_offsets(f->r[k].x, f->r[k].y, f->r[k].w, f->r[k].h, (int)st, c->off[k]);
        c->weight[k] = f->r[k].weight;
      }
      c->threshold = nd->threshold;
      int kids[2] = {nd->left, nd->right};
      for (int k = 0; k < 2; k++) {
        c->next[k] = kids[k] > 0 ? wk->node0 + kids[k] : -1;
        c->leaf[k] = kids[k] > 0 ? 0.f : h->leaves[wk->leaf0 - kids[k]];
      }
    }
  }
  int norm[4], area = (h->win_w - 2) * (h->win_h - 2);
  rect_offsets(1, 1, h->win_w - 2, h->win_h - 2, (int)st, norm);
  int32_t *hrows[2] = {rows, rows + w};
  int nstripes = 0; /* set at the first level */
  int nscales = pick_scales(h, w, hgt, p, &scales);
  if (nscales < 0) {
    rc = nscales;
    goto cleanup;
  }

  for (int si = 0; si < nscales; si++) {
    float f = scales[si];
    int sw = (int)lrintf((float)w / f), sh = (int)lrintf((float)hgt / f);
    if (sw > w) sw = w; /* f >= 1, so only float noise could do this */
    if (sh > hgt) sh = hgt;
    /* cv2 cuts each level's rows into stripes for its thread pool, as many as the first
     * level's window columns / 32, rounded up, and each stripe a whole number of steps; the
     * stripes can end one window row short of the bottom, and those windows are never run.
     * Found by probing cv2 (formats.md §2.2 step 5 says every row is scanned). */
    if (!nstripes) nstripes = MAX((sw - h->win_w + 1 + 31) / 32, 1);
    if (sw < h->win_w || sh < h->win_h) continue;
    const uint8_t *img = gray;
    int istride = stride;
    if (sw != w || sh != hgt) { /* a same-size INTER_LINEAR_EXACT resize is the identity */
      resize_exact(gray, w, hgt, stride, level, sw, sh, axis, axis + 3 * (size_t)w, hrows);
      img = level;
      istride = sw;
    }
    integrals(img, sw, sh, istride, sum, sq, st);
    int step = f >= 2.0f ? 1 : 2;
    int out_w = (int)lrintf((float)h->win_w * f), out_h = (int)lrintf((float)h->win_h * f);
    int ny = sh - h->win_h + 1, nx = sw - h->win_w + 1; /* window positions */
    long long stripe = (long long)MAX((ny / step + nstripes - 1) / nstripes, 1) * step;
    int y_end = (int)MIN(stripe * nstripes, (long long)ny);
    for (int y = 0; y < y_end; y += step) {
      for (int x = 0; x < nx; x += step) {
        size_t base = (size_t)y * st + (size_t)x;
        int r = run_window(h, cn, sum + base, sq + base, norm, area);
        if (r == 0) {
          x += step; /* OpenCV skips the next position after a stage-0 rejection */
          continue;
        }
        if (r < 0) continue;
        if (ncand == cap) {
          size_t ncap = cap ? 2 * cap : 64;
          fc_rect *grown = ncap <= INT_MAX ? realloc(cand, ncap * sizeof *grown) : NULL;
          if (!grown) { /* cand is still valid and is freed at cleanup */
            rc = fc_error_set(FC_ENOMEM, "fc_haar_detect: out of memory for candidates");
            goto cleanup;
          }
          cand = grown;
          cap = ncap;
        }
        cand[ncand++] =
            (fc_rect){(int)lrintf((float)x * f), (int)lrintf((float)y * f), out_w, out_h};
      }
    }
  }

  int n = group_rects(cand, (int)ncand, p->min_neighbors);
  if (n < 0) {
    rc = fc_error_set(FC_ENOMEM, "fc_haar_detect: out of memory grouping rectangles");
    goto cleanup;
  }
  /* Clip to the image and drop empty boxes (OpenCV does this even for raw candidates). */
  int kept = 0;
  for (int i = 0; i < n; i++) {
    int x0 = MAX(cand[i].x, 0), y0 = MAX(cand[i].y, 0);
    int x1 = MIN(cand[i].x + cand[i].w, w), y1 = MIN(cand[i].y + cand[i].h, hgt);
    if (x1 > x0 && y1 > y0) cand[kept++] = (fc_rect){x0, y0, x1 - x0, y1 - y0};
  }
  if (kept > 1) qsort(cand, (size_t)kept, sizeof *cand, by_area_desc);
  for (int i = 0; i < kept && i < max_out; i++) out[i] = cand[i];
  rc = kept;

cleanup:
  free(level);
  free(rows);
  free(axis);
  free(sum);
  free(sq);
  free(cn);
  free(cand);
  free(scales);
  return rc;
}
