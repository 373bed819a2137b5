/* The @name@.scale kernel on the CPU (scale.h). */
#include "scale.h"
#include "@name@_kern.h"

void @name@_scale_cpu(const double *x, double *y, size_t n, double factor)
{
	for (size_t i = 0; i < n; i++)
		y[i] = @name@_scale_one(x[i], factor);
}
