/* libFuzzer target for the NPY reader: header parsing, size checks, data. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	static int fd = -1;
	sp_err_t err;
	sp_npy_t h;
	double *x = NULL;
	int64_t any[3] = { -1, 3, 3 };

	/* The reader takes a path: feed it through one in-memory file. */
	if (fd < 0) {
		fd = memfd_create("fuzz.npy", 0);
		if (fd < 0)
			abort();
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	if (sp_npy_load_f8(path, 3, any, &x, &h, &err) == 0)
		free(x);
	if (sp_npy_open(path, &h, &err) == 0 && sp_npy_count(&h) < (1 << 20)) {
		x = malloc((size_t)sp_npy_count(&h) * sizeof *x + 8);
		if (x != NULL)
			sp_npy_read_f8(path, &h, x, &err);
		free(x);
	}
	return 0;
}
