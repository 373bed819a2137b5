/* A test-local NPY reader (2-D, C order, any fixed-size dtype), independent of src/io/npy.c; include after cmocka.h. */
#ifndef SP_NPYREAD_H
#define SP_NPYREAD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* Reads ../shared/<rel>, an NPY file (v1/v2) of dtype `descr` ("<f4",
 * "|u1", "<i2"...) and shape [h][w]; every mismatch fails the test. */
static inline void *npy_read_shared(const char *rel, const char *descr, int h, int w, size_t esize)
{
	char path[1024], hdr[1024], want[128];
	unsigned char pre[12];
	FILE *f = fopen(shared_path(path, sizeof path, rel), "rb");
	size_t hl, off;
	void *d;

	assert_non_null(f);
	assert_int_equal(fread(pre, 1, 12, f), 12);
	assert_memory_equal(pre, "\x93NUMPY", 6);
	if (pre[6] == 1) {
		hl = pre[8] | (size_t)pre[9] << 8;
		off = 10;
	} else {
		hl = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
		off = 12;
	}
	assert_true(hl < sizeof hdr);
	assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
	assert_int_equal(fread(hdr, 1, hl, f), hl);
	hdr[hl] = 0;
	snprintf(want, sizeof want, "'descr': '%s'", descr);
	assert_non_null(strstr(hdr, want));
	assert_non_null(strstr(hdr, "'fortran_order': False"));
	snprintf(want, sizeof want, "'shape': (%d, %d)", h, w);
	assert_non_null(strstr(hdr, want));
	d = malloc(esize * (size_t)h * w);
	assert_non_null(d);
	assert_int_equal(fread(d, esize, (size_t)h * w, f), (size_t)h * w);
	fclose(f);
	return d;
}

#endif /* SP_NPYREAD_H */
