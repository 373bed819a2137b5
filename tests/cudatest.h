/* Shared frame of the CUDA-against-CPU tests: skips, checked CUDA calls, allocations. */
#ifndef SP_CUDATEST_H
#define SP_CUDATEST_H

/*
 * A test file includes this first, then wraps its tests in
 * #ifdef SP_HAVE_CUDA.  Without CUDA in the build, this header supplies a
 * main() that reports a skip; with CUDA but no device, the test's main()
 * calls cuda_skip_without_device() first.  A skip is "1..0 # SKIP reason"
 * with exit 0, never a pass.
 */

#include <stdio.h>

#ifndef SP_HAVE_CUDA
int main(void)
{
	puts("1..0 # SKIP starpipe was built without CUDA (configure --enable-cuda)");
	return 0;
}
#else
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#define CK(call)                                                              \
	do {                                                                  \
		cudaError_t e_ = (call);                                      \
		if (e_ != cudaSuccess)                                        \
			print_message("# %s:%d: %s: %s\n", __func__, __LINE__, \
				      #call, cudaGetErrorString(e_));         \
		assert_int_equal(e_, cudaSuccess);                            \
	} while (0)

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n > 0 ? n : 1);
	assert_non_null(p);
	return p;
}

static inline void *dmalloc(size_t n)
{
	void *p = NULL;
	CK(cudaMalloc(&p, n > 0 ? n : 1));
	return p;
}

/* Exits the program with the skip line when no CUDA device is usable. */
static inline void cuda_skip_without_device(void)
{
	int n = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		puts("1..0 # SKIP no CUDA device");
		exit(0);
	}
}
#endif /* SP_HAVE_CUDA */

#endif /* SP_CUDATEST_H */
