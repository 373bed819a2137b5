/* Test helper: writes an MRC micrograph as a TIFF (libtiff), for the end-to-end TIFF checks of tests/pipeline-apple.test. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiffwrite.h"
#include "../codelets/apple/mrc.h"

/*
 * Usage: mrc2tiff IN.mrc OUT.tif [none|lzw] [ROWS_PER_STRIP]
 * The pixels as float32, rows in the MRC file's order (the first stored row
 * is TIFF row 0), compression LZW by default, strips of 16 rows by default
 * (several strips, as cameras write them).  The MRC reader reads IN, so
 * every mode it reads can be converted; the values are kept exactly.
 */
int main(int argc, char **argv)
{
	if (argc < 3 || argc > 5 ||
	    (argc >= 4 && strcmp(argv[3], "none") != 0 && strcmp(argv[3], "lzw") != 0)) {
		fprintf(stderr, "usage: mrc2tiff IN.mrc OUT.tif [none|lzw] [ROWS_PER_STRIP]\n");
		return 2;
	}
	apple_mrc_t h;
	float *img;
	sp_err_t err;
	if (apple_mrc_load_f32(argv[1], &h, &img, &err) != 0) {
		fprintf(stderr, "mrc2tiff: %s\n", err.msg);
		return 1;
	}
	tiffw_opts_t o = tiffw_defaults();
	o.compression = argc >= 4 && strcmp(argv[3], "none") == 0 ? COMPRESSION_NONE : COMPRESSION_LZW;
	o.rows_per_strip = argc >= 5 ? atoi(argv[4]) : 16;
	int rc = tiffw_write(argv[2], img, h.ny, h.nx, &o);
	free(img);
	return rc == 0 ? 0 : 1;
}
