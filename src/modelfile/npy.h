/* NumPy .npy files as float32 arrays.
 *
 * What: fc_npy_read_f32() reads a .npy (format versions 1.0, 2.0 and 3.0) of float (<f2 <f4 <f8
 * and their big-endian forms), signed/unsigned integer or bool elements, C or Fortran order, and
 * returns float32 values in C order. fc_npy_write_f32() writes float32 C-order version 1.0 files
 * byte-identical to numpy 1.24's np.save.
 *
 * Why: goldens, debug dumps and converted weights travel as .npy. The header is a Python dict
 * literal; it is parsed by hand (never evaluated), and object arrays (which hold pickles) are
 * refused.
 *
 * Ownership: *data is malloc'd and owned by the caller (free()); never NULL on success, even for
 * an empty array. Limits: at most FC_NPY_MAX_DIMS dimensions. Errors: FC_ENOTFOUND, FC_EIO,
 * FC_ENOMEM, FC_EFORMAT (malformed or truncated), FC_EUNSUPPORTED (structured, complex, string or
 * object dtypes), each with a detail (fc_error_detail).
 */
#ifndef FACECAST_NPY_H
#define FACECAST_NPY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FC_NPY_MAX_DIMS 8

int fc_npy_read_f32(const char *path, float **data, int64_t shape[FC_NPY_MAX_DIMS], int *ndim);

/* shape has ndim (0..FC_NPY_MAX_DIMS) non-negative entries; data holds their product floats. */
int fc_npy_write_f32(const char *path, const float *data, const int64_t *shape, int ndim);

#ifdef __cplusplus
}
#endif
#endif
