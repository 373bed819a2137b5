/* Launch and layout helpers of the APPLE CUDA files (apple_cuda.cu,
 * apple_cuda_image.cu); CUDA only. */
#ifndef SP_APPLE_CUDA_UTIL_H
#define SP_APPLE_CUDA_UTIL_H

#ifndef __CUDACC__
#error "apple_cuda_util.h is for the .cu files"
#endif

#include <stddef.h>

#define MAX_BLOCKS (1u << 20) /* a grid-stride kernel's grid, at most */
#define ALIGN 256             /* scratch buffers' alignment, bytes */

/* x rounded up to ALIGN. */
static inline size_t align_up(size_t x)
{
	return (x + ALIGN - 1) / ALIGN * ALIGN;
}

/* Blocks of `threads` for `work` items: at least 1, at most MAX_BLOCKS
 * (the kernels loop over the rest). */
static inline unsigned grid_for(size_t work, unsigned threads)
{
	size_t b = (work + threads - 1) / threads;
	return (unsigned)(b < 1 ? 1 : b < MAX_BLOCKS ? b : MAX_BLOCKS);
}

#endif
