/* @name@ StarPU glue: the value that flows between the @name@ stages. */
#ifndef SP_@NAME@_GLUE_H
#define SP_@NAME@_GLUE_H

#include <starpu.h>
#include <stdint.h>

#include "item.h"
#include "npy.h"

/* Port type "@name@.array": an array of doubles, C order, with its NPY shape. */
typedef struct @name@_array {
	sp_value_t base;
	int ndim;
	int64_t shape[SP_NPY_MAXDIM];
	int64_t n;              /* elements: the product of shape, >= 1 */
	double *x;              /* starpu_malloc'd, n doubles */
	starpu_data_handle_t h; /* x, registered as a vector */
	void *arg;              /* the argument of the task that fills x, or NULL */
} @name@_array_t;

/* A new array value of the given shape (ndim <= SP_NPY_MAXDIM, n elements):
 * x allocated and registered, its task argument `arg` (may be NULL) freed
 * with it.  After the call, the passed arg belongs to the value (also when
 * NULL is returned).  NULL on ENOMEM. */
@name@_array_t *@name@_array_new(int ndim, const int64_t *shape, int64_t n, void *arg);

#endif /* SP_@NAME@_GLUE_H */
