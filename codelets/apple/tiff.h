/* TIFF micrographs (libtiff): checks of the first and only page, reading as float32. */
#ifndef SP_APPLE_TIFF_H
#define SP_APPLE_TIFF_H

/*
 * DESIGN: a micrograph is one grey page: a file with more than one page (a
 * movie, as detectors write them) is refused with its page count, not
 * summed (motion correction, which APPLE does not do, comes first).  Pixels
 * read: one sample per pixel, SampleFormat unsigned or signed integer of 8
 * or 16 bits, or IEEE float of 32 bits; all become float32 exactly.
 * Strips or tiles, classic TIFF or BigTIFF, either byte order, any compression and predictor this
 * libtiff decodes (none, LZW, Deflate, PackBits, ...), decoded by libtiff
 * (TIFFReadEncodedStrip/Tile), never through its RGBA interface (8 bits
 * only).  PhotometricInterpretation must be min-is-black (or absent, taken
 * as such): min-is-white, palette and colour images are refused, since
 * their values are not the intensities.  At open every strip or tile must
 * lie inside the file (a cut file is "truncated" at once, as an MRC file
 * is); a strip that does not decode to its full size is an error when the
 * pixels are read.  libtiff's own errors become the message of the error
 * (its warnings are dropped): nothing is printed, and the handlers are the
 * file handle's own (TIFFOpenExt), so threads reading different files do
 * not share them.  Every message starts with the file's path.
 *
 * Layout in memory: float out[ny][nx], row y = the file's row y (TIFF row 0
 * is the first stored, the top of the image as viewers show it), column x =
 * the file's column x.  No flip, as the MRC reader (mrc.h): an MRC file and
 * a TIFF that store the same rows in the same order give the same
 * micrograph and the same picks (STAR y = row).
 */

#include <stdint.h>

#include "error.h"

typedef struct apple_tiff {
	int nx, ny;          /* ImageWidth (columns), ImageLength (rows) */
	int bits;            /* BitsPerSample: 8, 16 or 32 */
	int sample_format;   /* libtiff's SAMPLEFORMAT_UINT, _INT or _IEEEFP */
	int compression;     /* libtiff's COMPRESSION_* value */
	int tiled;           /* 1: tiles of tile_w x tile_h, else strips */
	int tile_w, tile_h;  /* tiled: the tile size */
	int rows_per_strip;  /* strips: RowsPerStrip (at most ny) */
} apple_tiff_t;

/* 1 if path's name ends in ".tif" or ".tiff", in any case. */
int apple_tiff_is_tiff_name(const char *path);

/* Reads and checks `path`'s header and first directory into hdr (see
 * DESIGN).  Returns 0, SP_ENOENT (no such file), SP_EIO (unreadable),
 * SP_EFORMAT (not a regular file, not a TIFF, sample format, bits,
 * samples per pixel or photometric interpretation not read, an unknown
 * compression, bad or too large sizes, a strip or tile beyond the end of
 * the file: "truncated") or SP_ESHAPE (more than one page: "multi-page").
 * Returns SP_ENOMEM when libtiff cannot allocate. */
int apple_tiff_open(const char *path, apple_tiff_t *hdr, sp_err_t *err);

/* Reads the ny * nx pixels of `path`, described by hdr (from
 * apple_tiff_open()), into out[ny][nx] as float32.  Returns 0, the codes
 * of apple_tiff_open(), SP_EFORMAT (a strip or tile that does not decode:
 * "strip 3 (rows 12-15): ..." with libtiff's reason; or the file changed
 * since it was opened), SP_ENOMEM or SP_ENONFINITE (a NaN or infinite
 * float pixel: "non-finite pixel at (row, col)").  On failure out holds
 * no meaning. */
int apple_tiff_read_f32(const char *path, const apple_tiff_t *hdr, float *out, sp_err_t *err);

#endif /* SP_APPLE_TIFF_H */
