/* Checked size arithmetic for buffers sized from parameters and input shapes. */
#ifndef SP_SIZES_H
#define SP_SIZES_H

/*
 * DESIGN.  A buffer whose size is a product of parameters (DESI's patch
 * unknowns squared, APPLE's windows times references, J-sync's pairs) is
 * sized in size_t, each product checked: an overflow is a refused item
 * with a message, never a short buffer that a kernel then writes past.
 * StarPU 1.3's vectors count their elements in a uint32_t: a buffer handed
 * to starpu_vector_data_register() must also have at most SP_VECTOR_MAX_NX
 * elements (sp_vector_nx_ok()), else its handle describes a smaller buffer
 * than the kernels use.  Plain C, no StarPU: kernels may include it.
 */

#include <stddef.h>
#include <stdint.h>

/* *out = a * b; nonzero when the product does not fit a size_t (*out is
 * then unspecified). */
static inline int sp_mul_size(size_t a, size_t b, size_t *out)
{
	return __builtin_mul_overflow(a, b, out);
}

/* *out = a + b; nonzero on overflow. */
static inline int sp_add_size(size_t a, size_t b, size_t *out)
{
	return __builtin_add_overflow(a, b, out);
}

/* *out = a * b * c; nonzero on overflow. */
static inline int sp_mul3_size(size_t a, size_t b, size_t c, size_t *out)
{
	size_t ab;
	return sp_mul_size(a, b, &ab) || sp_mul_size(ab, c, out);
}

/* The most elements a StarPU vector holds (its nx is a uint32_t). */
#define SP_VECTOR_MAX_NX ((size_t)UINT32_MAX)

static inline int sp_vector_nx_ok(size_t n)
{
	return n <= SP_VECTOR_MAX_NX;
}

#endif /* SP_SIZES_H */
