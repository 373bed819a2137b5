/* Writes small, valid seed files for the fuzz targets: a cut-down DESI PSF, a small DESI image and a 64 x 64 micrograph (MRC and TIFF). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fitsio.h>

#include "../../codelets/apple/mrc.h"
#include "../tiffwrite.h"

/*
 * Usage: fuzz_seeds SHARED OUTDIR
 * - OUTDIR/corpus_fits/psf.fits: the real PSF SHARED/data/desi/psf-r0-00051060.fits
 *   cut to its first 2 fibres and Gauss-Hermite degrees 2 x 2 (XTRACE,
 *   YTRACE [2][7]; a PSF table of 11 rows, COEFF [2][4]): ~17 kB.
 * - OUTDIR/corpus_fits/image.fits: an 8 x 12 pre-processed image (IMAGE
 *   with CAMERA and RDNOISE, IVAR, RICE-compressed MASK as desispec writes
 *   it, a 2-row FIBERMAP): ~23 kB.
 * - OUTDIR/corpus_mrc/micro.mrc: SHARED/data/apple/synth_2k_float32.mrc
 *   averaged in 32 x 32 blocks to 64 x 64, written by the project's own MRC
 *   writer: a complete file (header and data), 17 kB.
 * - OUTDIR/corpus_tiff/micro_*.tif: that micrograph as TIFFs (tests/tiffwrite.h):
 *   float32 LZW in strips of 16 rows, uint16 uncompressed big-endian in 16 x 16
 *   tiles, uint8 LZW with the horizontal predictor in one strip; 4-17 kB.
 * Small on purpose: libFuzzer mutates the whole input, and FITS pads every
 * HDU to 2880 bytes.
 */

#define NF 2   /* fibres kept */
#define GHD 2  /* Gauss-Hermite degree kept */

static void die(const char *what, int status)
{
	char txt[FLEN_STATUS];
	fits_get_errstatus(status, txt);
	fprintf(stderr, "fuzz_seeds: %s: %s\n", what, txt);
	exit(1);
}

static void copy_trace(fitsfile *in, fitsfile *out, const char *name)
{
	int status = 0, ncol = 0;
	long nax[2];
	double *c, v;
	char s[FLEN_VALUE];

	fits_movnam_hdu(in, IMAGE_HDU, (char *)name, 0, &status);
	fits_get_img_size(in, 2, nax, &status);
	ncol = (int)nax[0];
	c = malloc((size_t)ncol * NF * sizeof *c);
	fits_read_img(in, TDOUBLE, 1, (LONGLONG)ncol * NF, NULL, c, NULL, &status);
	long onax[2] = { ncol, NF };
	fits_create_img(out, DOUBLE_IMG, 2, onax, &status);
	fits_write_img(out, TDOUBLE, 1, (LONGLONG)ncol * NF, c, &status);
	fits_update_key(out, TSTRING, "EXTNAME", (char *)name, NULL, &status);
	fits_read_key(in, TDOUBLE, "WAVEMIN", &v, NULL, &status);
	fits_update_key(out, TDOUBLE, "WAVEMIN", &v, NULL, &status);
	fits_read_key(in, TDOUBLE, "WAVEMAX", &v, NULL, &status);
	fits_update_key(out, TDOUBLE, "WAVEMAX", &v, NULL, &status);
	strcpy(s, "GAUSS-HERMITE");
	fits_update_key(out, TSTRING, "PSFTYPE", s, NULL, &status);
	free(c);
	if (status != 0)
		die(name, status);
}

static void write_psf(const char *src, const char *dst)
{
	fitsfile *in, *out;
	int status = 0, cpar, ccoef, legdeg, v;
	long nrows, nfib_in, dims[2];
	double d;
	static const char *ikeys[] = { "HSIZEX", "HSIZEY", "NPIX_X", "NPIX_Y" };

	if (fits_open_diskfile(&in, src, READONLY, &status) != 0)
		die(src, status);
	unlink(dst);
	if (fits_create_diskfile(&out, dst, &status) != 0)
		die(dst, status);
	copy_trace(in, out, "XTRACE");
	copy_trace(in, out, "YTRACE");

	fits_movnam_hdu(in, BINARY_TBL, "PSF", 0, &status);
	fits_read_key(in, TINT, "LEGDEG", &legdeg, NULL, &status);
	fits_get_num_rows(in, &nrows, &status);
	fits_get_colnum(in, CASEINSEN, "PARAM", &cpar, &status);
	fits_get_colnum(in, CASEINSEN, "COEFF", &ccoef, &status);
	int nd;
	long idims[2];
	fits_read_tdim(in, ccoef, 2, &nd, idims, &status);
	nfib_in = idims[1];
	int nc = legdeg + 1;
	char tform[16];
	snprintf(tform, sizeof tform, "%dD", nc * NF);
	char *ttype[] = { "PARAM", "COEFF" }, *tforms[] = { "8A", tform };
	fits_create_tbl(out, BINARY_TBL, 0, 2, ttype, tforms, NULL, "PSF", &status);
	dims[0] = nc;
	dims[1] = NF;
	fits_write_tdim(out, 2, 2, dims, &status);
	char s[FLEN_VALUE] = "GAUSS-HERMITE";
	fits_update_key(out, TSTRING, "PSFTYPE", s, NULL, &status);
	fits_read_key(in, TDOUBLE, "WAVEMIN", &d, NULL, &status);
	fits_update_key(out, TDOUBLE, "WAVEMIN", &d, NULL, &status);
	fits_read_key(in, TDOUBLE, "WAVEMAX", &d, NULL, &status);
	fits_update_key(out, TDOUBLE, "WAVEMAX", &d, NULL, &status);
	fits_update_key(out, TINT, "LEGDEG", &legdeg, NULL, &status);
	for (int k = 0; k < 4; k++) {
		fits_read_key(in, TINT, (char *)ikeys[k], &v, NULL, &status);
		fits_update_key(out, TINT, (char *)ikeys[k], &v, NULL, &status);
	}
	v = GHD;
	fits_update_key(out, TINT, "GHDEGX", &v, NULL, &status);
	fits_update_key(out, TINT, "GHDEGY", &v, NULL, &status);
	double *coef = malloc((size_t)nc * nfib_in * sizeof *coef);
	long orow = 0;
	for (long r = 1; r <= nrows && status == 0; r++) {
		char name[16], *np = name;
		int i, j;
		fits_read_col(in, TSTRING, cpar, r, 1, 1, NULL, &np, NULL, &status);
		int keep = strcmp(name, "GHSIGX") == 0 || strcmp(name, "GHSIGY") == 0 ||
			   (sscanf(name, "GH-%d-%d", &i, &j) == 2 && i <= GHD && j <= GHD);
		if (!keep)
			continue;
		fits_read_col(in, TDOUBLE, ccoef, r, 1, (LONGLONG)nc * nfib_in, NULL, coef, NULL,
			      &status);
		orow++;
		fits_write_col(out, TSTRING, 1, orow, 1, 1, &np, &status);
		fits_write_col(out, TDOUBLE, 2, orow, 1, (LONGLONG)nc * NF, coef, &status);
	}
	free(coef);
	fits_close_file(in, &status);
	fits_close_file(out, &status);
	if (status != 0)
		die(dst, status);
}

static void write_image(const char *dst)
{
	enum { NY = 8, NX = 12 };
	fitsfile *f;
	int status = 0;
	long n2[2] = { NX, NY };
	float pix[NY * NX], ivar[NY * NX];
	short mask[NY * NX];
	double rd = 3.1;

	for (int i = 0; i < NY * NX; i++) {
		pix[i] = (float)(i % 7) * 1.5f;
		ivar[i] = 0.25f;
		mask[i] = i % 11 == 0 ? 16 : 0;
	}
	unlink(dst);
	if (fits_create_diskfile(&f, dst, &status) != 0)
		die(dst, status);
	fits_create_img(f, FLOAT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "IMAGE", NULL, &status);
	fits_update_key(f, TSTRING, "CAMERA", "r0", NULL, &status);
	fits_update_key(f, TDOUBLE, "RDNOISE", &rd, NULL, &status);
	fits_write_img(f, TFLOAT, 1, NY * NX, pix, &status);
	fits_create_img(f, FLOAT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "IVAR", NULL, &status);
	fits_write_img(f, TFLOAT, 1, NY * NX, ivar, &status);
	fits_set_compression_type(f, RICE_1, &status);
	fits_create_img(f, SHORT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "MASK", NULL, &status);
	fits_write_img(f, TSHORT, 1, NY * NX, mask, &status);
	fits_set_compression_type(f, 0, &status);
	char *ttype[] = { "FIBER", "TARGETID" }, *tform[] = { "J", "K" };
	fits_create_tbl(f, BINARY_TBL, 2, 2, ttype, tform, NULL, "FIBERMAP", &status);
	int fib[2] = { 0, 1 };
	LONGLONG tid[2] = { 39627000000000001LL, 39627000000000002LL };
	fits_write_col(f, TINT, 1, 1, 1, 2, fib, &status);
	fits_write_col(f, TLONGLONG, 2, 1, 1, 2, tid, &status);
	fits_close_file(f, &status);
	if (status != 0)
		die(dst, status);
}

static void write_mrc(const char *src, const char *dst)
{
	enum { N = 64 };
	apple_mrc_t h;
	float *big, small[N * N];
	sp_err_t err;

	if (apple_mrc_load_f32(src, &h, &big, &err) != 0) {
		fprintf(stderr, "fuzz_seeds: %s\n", err.msg);
		exit(1);
	}
	int by = h.ny / N, bx = h.nx / N;
	for (int y = 0; y < N; y++)
		for (int x = 0; x < N; x++) {
			double s = 0;
			for (int i = 0; i < by; i++)
				for (int j = 0; j < bx; j++)
					s += big[(size_t)(y * by + i) * h.nx + (size_t)(x * bx + j)];
			small[y * N + x] = (float)(s / (by * bx));
		}
	free(big);
	if (apple_mrc_write_f32(dst, small, N, N, h.pixel_size * bx, &err) != 0) {
		fprintf(stderr, "fuzz_seeds: %s\n", err.msg);
		exit(1);
	}
}

/* The micrograph of write_mrc() as TIFF seeds in three layouts. */
static void write_tiffs(const char *mrc, const char *dir)
{
	apple_mrc_t h;
	float *img;
	sp_err_t err;
	char path[4200];

	if (apple_mrc_load_f32(mrc, &h, &img, &err) != 0) {
		fprintf(stderr, "fuzz_seeds: %s\n", err.msg);
		exit(1);
	}
	size_t n = (size_t)h.nx * h.ny;
	uint16_t *u16 = malloc(n * sizeof *u16);
	uint8_t *u8 = malloc(n);
	float lo = img[0], hi = img[0];
	for (size_t e = 0; e < n; e++) {
		lo = img[e] < lo ? img[e] : lo;
		hi = img[e] > hi ? img[e] : hi;
	}
	for (size_t e = 0; e < n && u16 != NULL && u8 != NULL; e++) {
		double t = hi > lo ? (img[e] - lo) / (hi - lo) : 0;
		u16[e] = (uint16_t)(t * 65535);
		u8[e] = (uint8_t)(t * 255);
	}
	tiffw_opts_t o = tiffw_defaults();
	o.compression = COMPRESSION_LZW;
	o.rows_per_strip = 16;
	snprintf(path, sizeof path, "%s/micro_f32_lzw.tif", dir);
	int bad = u16 == NULL || u8 == NULL || tiffw_write(path, img, h.ny, h.nx, &o) != 0;
	o = tiffw_defaults();
	o.bits = 16;
	o.sample_format = SAMPLEFORMAT_UINT;
	o.tile = 16;
	o.big_endian = 1;
	snprintf(path, sizeof path, "%s/micro_u16_tiles.tif", dir);
	bad = bad || tiffw_write(path, u16, h.ny, h.nx, &o) != 0;
	o = tiffw_defaults();
	o.bits = 8;
	o.sample_format = SAMPLEFORMAT_UINT;
	o.compression = COMPRESSION_LZW;
	o.predictor = PREDICTOR_HORIZONTAL;
	snprintf(path, sizeof path, "%s/micro_u8_pred.tif", dir);
	bad = bad || tiffw_write(path, u8, h.ny, h.nx, &o) != 0;
	free(img);
	free(u16);
	free(u8);
	if (bad) {
		fprintf(stderr, "fuzz_seeds: cannot write the TIFF seeds in %s\n", dir);
		exit(1);
	}
}

int main(int argc, char **argv)
{
	char a[4096], b[4096];

	if (argc != 3) {
		fprintf(stderr, "usage: fuzz_seeds SHARED OUTDIR\n");
		return 2;
	}
	snprintf(a, sizeof a, "%s/data/desi/psf-r0-00051060.fits", argv[1]);
	snprintf(b, sizeof b, "%s/corpus_fits/psf.fits", argv[2]);
	write_psf(a, b);
	snprintf(b, sizeof b, "%s/corpus_fits/image.fits", argv[2]);
	write_image(b);
	snprintf(a, sizeof a, "%s/data/apple/synth_2k_float32.mrc", argv[1]);
	snprintf(b, sizeof b, "%s/corpus_mrc/micro.mrc", argv[2]);
	write_mrc(a, b);
	snprintf(a, sizeof a, "%s/corpus_tiff", argv[2]);
	write_tiffs(b, a);
	return 0;
}
