/* libFuzzer target for the TIFF reader: our checks of what libtiff parses, strips and tiles, conversion. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../codelets/apple/tiff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	static int fd = -1;
	sp_err_t err;
	apple_tiff_t h;

	/* The reader takes a path: feed it through one in-memory file. */
	if (fd < 0) {
		fd = memfd_create("fuzz.tif", 0);
		if (fd < 0)
			abort();
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	if (apple_tiff_open(path, &h, &err) == 0 && (size_t)h.nx * h.ny < (1u << 20)) {
		float *x = malloc((size_t)h.nx * h.ny * sizeof *x + 4);
		if (x != NULL)
			apple_tiff_read_f32(path, &h, x, &err);
		free(x);
	}
	return 0;
}
