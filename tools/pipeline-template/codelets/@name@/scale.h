/* The @name@.scale kernel's contract: y = factor x over an array of doubles; no StarPU. */
#ifndef SP_@NAME@_SCALE_H
#define SP_@NAME@_SCALE_H

#include <stddef.h>

/* y[i] = factor * x[i] for i < n (@name@_scale_one() of @name@_kern.h).
 * x and y hold n doubles in any layout (the operation is element-wise) and
 * may be the same array; y has the unit of x times that of factor. */
void @name@_scale_cpu(const double *x, double *y, size_t n, double factor);

#endif /* SP_@NAME@_SCALE_H */
