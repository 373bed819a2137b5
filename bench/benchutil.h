/* Helpers shared by the single-core benchmarks in bench/: a monotonic clock, an allocation that exits on failure. */
#ifndef SP_BENCHUTIL_H
#define SP_BENCHUTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC (define _POSIX_C_SOURCE before any include). */
static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* malloc, or a message on stderr and exit status 1. */
static inline void *xmalloc(size_t n)
{
	void *p = malloc(n > 0 ? n : 1);
	if (p == NULL) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

#endif /* SP_BENCHUTIL_H */
