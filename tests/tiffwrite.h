/* Test helper: writes TIFF files with libtiff in the layouts the APPLE reader must read (and some it must refuse). */
#ifndef SP_TIFFWRITE_H
#define SP_TIFFWRITE_H

/*
 * Header only, shared by tests/test_apple_io.c and tests/mrc2tiff.c.  The
 * reader under test is codelets/apple/tiff.c; this writer uses libtiff's
 * plain scanline and tile interfaces, so the two meet only in the file
 * format.  Errors are printed (libtiff's default handlers) and returned.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiffio.h>

typedef struct tiffw_opts {
	int bits;           /* BitsPerSample: 1, 8, 16, 32, 64 */
	int sample_format;  /* SAMPLEFORMAT_*; 0: unsigned integer */
	int compression;    /* COMPRESSION_*; 0: none */
	int predictor;      /* PREDICTOR_*; 0: none written */
	int rows_per_strip; /* 0: one strip of every row */
	int tile;           /* > 0: square tiles of this side (a multiple of 16) instead of strips */
	int big_endian;     /* 1: "MM" file */
	int spp;            /* samples per pixel; 0: 1 */
	int photometric;    /* PHOTOMETRIC_*; -1: the tag is left out; 0 is min-is-white */
	int pages;          /* 0: 1; more: the same image on each page */
	int bigtiff;        /* 1: BigTIFF (64-bit offsets) */
} tiffw_opts_t;

/* Default: one page of 32-bit float, min-is-black, one strip, uncompressed. */
static inline tiffw_opts_t tiffw_defaults(void)
{
	tiffw_opts_t o = { 32, SAMPLEFORMAT_IEEEFP, COMPRESSION_NONE, 0, 0, 0, 0, 1,
			   PHOTOMETRIC_MINISBLACK, 1, 0 };
	return o;
}

/* Writes data, ny rows of nx pixels of spp samples each (host byte order,
 * rows packed; for bits 1, rows of (nx + 7) / 8 bytes), as path.  Returns 0,
 * or -1 after printing why. */
static inline int tiffw_write(const char *path, const void *data, int ny, int nx,
			      const tiffw_opts_t *o)
{
	int spp = o->spp > 0 ? o->spp : 1, pages = o->pages > 0 ? o->pages : 1;
	size_t row = o->bits == 1 ? ((size_t)nx + 7) / 8 : (size_t)nx * spp * (size_t)(o->bits / 8);
	char mode[4] = { 'w', o->big_endian ? 'b' : 'l', o->bigtiff ? '8' : '\0', '\0' };
	TIFF *t = TIFFOpen(path, mode);
	if (t == NULL)
		return -1;
	int ok = 1;
	for (int pg = 0; pg < pages && ok; pg++) {
		ok = TIFFSetField(t, TIFFTAG_IMAGEWIDTH, (uint32_t)nx) &&
		     TIFFSetField(t, TIFFTAG_IMAGELENGTH, (uint32_t)ny) &&
		     TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, (uint16_t)o->bits) &&
		     TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)spp) &&
		     TIFFSetField(t, TIFFTAG_SAMPLEFORMAT,
				  (uint16_t)(o->sample_format ? o->sample_format : SAMPLEFORMAT_UINT)) &&
		     TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG) &&
		     TIFFSetField(t, TIFFTAG_COMPRESSION,
				  (uint16_t)(o->compression ? o->compression : COMPRESSION_NONE));
		if (ok && o->photometric >= 0)
			ok = TIFFSetField(t, TIFFTAG_PHOTOMETRIC, (uint16_t)o->photometric);
		if (ok && o->photometric == PHOTOMETRIC_PALETTE) {
			static uint16_t map[3][256];
			ok = TIFFSetField(t, TIFFTAG_COLORMAP, map[0], map[1], map[2]);
		}
		if (ok && o->predictor > 0)
			ok = TIFFSetField(t, TIFFTAG_PREDICTOR, (uint16_t)o->predictor);
		if (ok && pages > 1)
			ok = TIFFSetField(t, TIFFTAG_SUBFILETYPE, FILETYPE_PAGE) &&
			     TIFFSetField(t, TIFFTAG_PAGENUMBER, (uint16_t)pg, (uint16_t)pages);
		if (ok && o->tile > 0) {
			int ts = o->tile;
			ok = TIFFSetField(t, TIFFTAG_TILEWIDTH, (uint32_t)ts) &&
			     TIFFSetField(t, TIFFTAG_TILELENGTH, (uint32_t)ts);
			size_t tb = (size_t)ts * ts * spp * (size_t)(o->bits / 8), sb = tb / ts;
			unsigned char *tile = ok ? malloc(tb) : NULL;
			ok = tile != NULL;
			for (int y0 = 0; ok && y0 < ny; y0 += ts)
				for (int x0 = 0; ok && x0 < nx; x0 += ts) {
					/* edge tiles are padded with a pattern the reader must not show */
					memset(tile, 0xA5, tb);
					for (int y = y0; y < y0 + ts && y < ny; y++) {
						size_t w = (size_t)(nx - x0 < ts ? nx - x0 : ts) * sb / ts;
						memcpy(tile + (size_t)(y - y0) * sb,
						       (const unsigned char *)data + (size_t)y * row +
							       (size_t)x0 * sb / ts,
						       w);
					}
					ok = TIFFWriteTile(t, tile, (uint32_t)x0, (uint32_t)y0, 0, 0) >= 0;
				}
			free(tile);
		} else if (ok) {
			ok = TIFFSetField(t, TIFFTAG_ROWSPERSTRIP,
					  (uint32_t)(o->rows_per_strip > 0 ? o->rows_per_strip : ny));
			unsigned char *line = malloc(row);
			ok = ok && line != NULL;
			for (int y = 0; ok && y < ny; y++) {
				/* TIFFWriteScanline may change its buffer (predictors) */
				memcpy(line, (const unsigned char *)data + (size_t)y * row, row);
				ok = TIFFWriteScanline(t, line, (uint32_t)y, 0) == 1;
			}
			free(line);
		}
		if (ok && pages > 1)
			ok = TIFFWriteDirectory(t);
	}
	TIFFClose(t);
	if (!ok) {
		fprintf(stderr, "tiffw_write: %s: libtiff refused to write the file\n", path);
		remove(path);
		return -1;
	}
	return 0;
}

#endif /* SP_TIFFWRITE_H */
