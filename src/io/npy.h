/* NPY files (NumPy's array format): header parsing, float64 reading and writing. */
#ifndef SP_NPY_H
#define SP_NPY_H

/*
 * DESIGN: only what the pipelines exchange is supported: C-order
 * little-endian float64 ('<f8'), any number of dimensions up to 8.  The
 * header is parsed as the Python literal it is (a dict of 'descr',
 * 'fortran_order', 'shape'), never by searching substrings, and every
 * malformed input gives a message that starts with the file's path.  Writes
 * go to `PATH.tmp.<pid>`, are fsync'ed and renamed, so that readers never
 * see a partial file and a failed write leaves nothing at PATH.
 */

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define SP_NPY_MAXDIM 8

typedef struct sp_npy {
	int major;          /* format version 1, 2 or 3 */
	char descr[8];      /* dtype string, e.g. "<f8" (truncated if longer) */
	int fortran_order;  /* always 0 after a successful sp_npy_open() */
	int ndim;
	int64_t shape[SP_NPY_MAXDIM];
	size_t data_offset; /* bytes before the data */
} sp_npy_t;

/* Parses and validates the header of `path` into h: magic, version,
 * header syntax, dtype '<f8', C order, and a file size of exactly
 * data_offset + prod(shape) * 8.  Returns 0, SP_ENOENT, SP_EIO, SP_EFORMAT
 * (not NPY, malformed, Fortran order, wrong size) or SP_ESHAPE (dtype). */
int sp_npy_open(const char *path, sp_npy_t *h, sp_err_t *err);

/* Number of elements of h (the product of its shape; 1 for ndim 0). */
int64_t sp_npy_count(const sp_npy_t *h);

/* Reads the prod(shape) doubles of `path`, described by h (from
 * sp_npy_open()), into data.  Returns 0, SP_EIO, SP_EFORMAT (the file
 * changed since it was opened) or SP_ENONFINITE (NaN or Inf). */
int sp_npy_read_f8(const char *path, const sp_npy_t *h, double *data,
		   sp_err_t *err);

/* Writes data (prod(shape) doubles, C order) as an NPY v1.0 '<f8' file,
 * atomically (a one-file output set of fsutil.h: unique temporary, fsync,
 * rename).  Returns 0, SP_EINVAL, SP_ENOMEM or SP_EIO. */
int sp_npy_write_f8(const char *path, const double *data, int ndim,
		    const int64_t *shape, sp_err_t *err);

/* Writes the NPY file into `tmp`, a temporary of an output set (see
 * sp_outset_add()), and fsyncs it; `label` is the final name, for messages. */
int sp_npy_write_f8_into(const char *tmp, const char *label, const double *data, int ndim,
			 const int64_t *shape, sp_err_t *err);

/* As sp_npy_write_f8_into(), with the data produced in blocks by
 * fill(ctx, first, n, buf): elements [first, first + n) in C order. */
typedef void (*sp_npy_fill_cb)(void *ctx, int64_t first, int64_t n, double *buf);
int sp_npy_write_f8_fill(const char *tmp, const char *label, int ndim, const int64_t *shape,
			 sp_npy_fill_cb fill, void *ctx, sp_err_t *err);

/* sp_npy_open() + shape check + malloc + sp_npy_read_f8().  shape_expected
 * has ndim_expected entries, -1 meaning any extent.  On success *data is a
 * malloc'ed array that the caller frees; on failure *data is NULL.  h may be
 * NULL.  Returns 0, any code of the above, SP_ESHAPE or SP_ENOMEM. */
int sp_npy_load_f8(const char *path, int ndim_expected,
		   const int64_t *shape_expected, double **data, sp_npy_t *h,
		   sp_err_t *err);

#endif /* SP_NPY_H */
