/* LiveTalking's coords.pkl (see ltcoords.h). The pickle VM builds the object; this file only
 * checks its shape: a pure function on bytes, so that the fuzzer reaches every branch. */
#include "modelfile/ltcoords.h"
#include "core/file.h"
#include "facecast/error.h"
#include "modelfile/ckpt_internal.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#define SHAPE "a list of (y1, y2, x1, x2) tuples of ints"

static int item_box(const pv *it, uint32_t i, const char *name, fc_lt_box *b) {
  if ((it->type != PV_TUPLE && it->type != PV_LIST) || it->u.seq.n != 4)
    return fc_error_set(FC_EFORMAT, "%s: item %u is a %s%s, expected (y1, y2, x1, x2): " SHAPE,
                        name, i, pk_type_name(it),
                        it->type == PV_TUPLE || it->type == PV_LIST ? " not of 4 items" : "");
  int64_t v[4];
  for (int k = 0; k < 4; k++) {
    const pv *x = it->u.seq.v[k];
    if (x->type != PV_INT)
      return fc_error_set(FC_EFORMAT, "%s: item %u value %d is a %s, not an int", name, i, k,
                          x->type == PV_BIGINT ? "too large int" : pk_type_name(x));
    if (x->u.i < INT_MIN || x->u.i > INT_MAX)
      return fc_error_set(FC_EFORMAT, "%s: item %u value %d (%lld) is out of range", name, i, k,
                          (long long)x->u.i);
    v[k] = x->u.i;
  }
  *b = (fc_lt_box){(int)v[0], (int)v[1], (int)v[2], (int)v[3]};
  return FC_OK;
}

int fc_lt_coords_parse(const void *data, size_t size, const char *name, int max_boxes,
                       fc_lt_box **out, int *n) {
  *out = NULL;
  *n = 0;
  if (!name) name = "coords.pkl";
  if (!data || size == 0) return fc_error_set(FC_EFORMAT, "%s: empty file, expected " SHAPE, name);
  pk_vm *vm = pk_vm_new(name);
  if (!vm) return fc_error_set(FC_ENOMEM, "out of memory");
  const pv *root = NULL;
  size_t used;
  fc_lt_box *boxes = NULL;
  int err = pk_run(vm, data, size, 0, 0, &used, &root);
  if (err) goto done;
  if (root->type != PV_LIST && root->type != PV_TUPLE) {
    err = fc_error_set(FC_EFORMAT, "%s: holds a %s, expected " SHAPE, name, pk_type_name(root));
    goto done;
  }
  uint32_t count = root->u.seq.n;
  if (count == 0) {
    err = fc_error_set(FC_EFORMAT, "%s: the list is empty, expected one box per frame", name);
    goto done;
  }
  if (max_boxes > 0 && count > (uint32_t)max_boxes) {
    err = fc_error_set(FC_EFORMAT, "%s: %u boxes, more than the %d frames an avatar may have",
                       name, count, max_boxes);
    goto done;
  }
  if (!(boxes = malloc(count * sizeof *boxes))) {
    err = fc_error_set(FC_ENOMEM, "out of memory");
    goto done;
  }
  for (uint32_t i = 0; i < count; i++)
    if ((err = item_box(root->u.seq.v[i], i, name, &boxes[i]))) goto done;
  *out = boxes, *n = (int)count;
  boxes = NULL;
done:
  free(boxes);
  pk_vm_free(vm);
  return err;
}

int fc_lt_coords_load(const char *path, int max_boxes, fc_lt_box **out, int *n) {
  uint8_t *data = NULL;
  size_t size = 0;
  *out = NULL;
  *n = 0;
  int err = fc_file_read(path, FC_LT_COORDS_MAX_BYTES, &data, &size);
  if (!err) err = fc_lt_coords_parse(data, size, path, max_boxes, out, n);
  free(data);
  return err;
}
