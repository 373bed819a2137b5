/* Unit tests of the DESI frame I/O: reading pre-processed images, writing frames. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"
#include <fitsio.h>

#include "../codelets/desi/frame_io.h"
#include "fsutil.h"
#include "desi_craft.h"

/* desispec.maskbits.ccdmask */
#define HOT (1 << 1)
#define COSMIC (1 << 4)
#define BADREADNOISE (1 << 8)
#define BADAMP (1 << 9)

#define NY 20
#define NX 30

static int setup(void **state)
{
	(void)state;
	return tmpdir_make("test_desi_frame_io");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove();
}


static void check_fits(int status, const char *what)
{
	if (status != 0) {
		char txt[FLEN_STATUS];
		fits_get_errstatus(status, txt);
		print_message("# %s: CFITSIO %d %s\n", what, status, txt);
	}
	assert_int_equal(status, 0);
}

/* What write_image leaves out or changes. */
enum { IMG_FULL = 0, IMG_NO_IVAR = 1, IMG_IVAR_SHAPE = 2, IMG_NO_FIBERMAP = 4,
       IMG_PLAIN_MASK = 8 };

static float pix_value(int y, int x)
{
	return (float)(y * NX + x) + 0.25f;
}

static float ivar_value(int y, int x)
{
	(void)y;
	return 1.0f + (float)(x % 3);
}

/* A small pre-processed image: IMAGE (primary, EXTNAME IMAGE, CAMERA b1,
 * RDNOISE 2.5, FOO 42), IVAR, MASK (RICE-compressed unless IMG_PLAIN_MASK),
 * FIBERMAP (500 rows: FIBER = 500 + row, TARGETID, OBJTYPE).  Special
 * pixels: (1,1) COSMIC, (2,2) BADREADNOISE, (3,3) BADREADNOISE|HOT,
 * (4,4) BADAMP, (5,5) IMAGE NaN, (6,6) IVAR NaN, (7,7) IVAR -1,
 * (8,8) IMAGE +inf with MASK COSMIC. */
static void write_image(const char *path, int flags)
{
	fitsfile *f;
	int status = 0;
	long n2[2] = { NX, NY }, fp[2] = { 1, 1 };
	float pix[NY][NX], ivar[NY][NX];
	short mask[NY][NX];

	for (int y = 0; y < NY; y++)
		for (int x = 0; x < NX; x++) {
			pix[y][x] = pix_value(y, x);
			ivar[y][x] = ivar_value(y, x);
			mask[y][x] = 0;
		}
	mask[1][1] = COSMIC;
	mask[2][2] = BADREADNOISE;
	mask[3][3] = BADREADNOISE | HOT;
	mask[4][4] = BADAMP;
	pix[5][5] = NAN;
	ivar[6][6] = NAN;
	ivar[7][7] = -1;
	pix[8][8] = INFINITY;
	mask[8][8] = COSMIC;

	unlink(path);
	fits_create_diskfile(&f, path, &status);
	fits_create_img(f, FLOAT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "IMAGE", NULL, &status);
	fits_update_key(f, TSTRING, "CAMERA", "b1", "camera", &status);
	double rd = 2.5;
	int foo = 42;
	fits_update_key(f, TDOUBLE, "RDNOISE", &rd, NULL, &status);
	fits_update_key(f, TINT, "FOO", &foo, "a user key", &status);
	fits_write_pix(f, TFLOAT, fp, NY * NX, pix, &status);
	check_fits(status, "IMAGE");
	if (!(flags & IMG_NO_IVAR)) {
		long n2i[2] = { NX + (flags & IMG_IVAR_SHAPE ? 1 : 0), NY };
		float big[NY][NX + 1];
		for (int y = 0; y < NY; y++)
			for (int x = 0; x < n2i[0]; x++)
				big[y][x] = x < NX ? ivar[y][x] : 1;
		fits_create_img(f, FLOAT_IMG, 2, n2i, &status);
		fits_update_key(f, TSTRING, "EXTNAME", "IVAR", NULL, &status);
		if (n2i[0] == NX)
			fits_write_pix(f, TFLOAT, fp, NY * NX, ivar, &status);
		else
			for (int y = 0; y < NY; y++) {
				long fr[2] = { 1, y + 1 };
				fits_write_pix(f, TFLOAT, fr, n2i[0], big[y], &status);
			}
		check_fits(status, "IVAR");
	}
	if (!(flags & IMG_PLAIN_MASK))
		fits_set_compression_type(f, RICE_1, &status);
	fits_create_img(f, SHORT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "MASK", NULL, &status);
	fits_write_pix(f, TSHORT, fp, NY * NX, mask, &status);
	fits_set_compression_type(f, 0, &status);
	check_fits(status, "MASK");
	if (!(flags & IMG_NO_FIBERMAP)) {
		char *ttype[] = { "FIBER", "TARGETID", "OBJTYPE" };
		char *tform[] = { "J", "K", "3A" };
		fits_create_tbl(f, BINARY_TBL, 500, 3, ttype, tform, NULL, "FIBERMAP", &status);
		for (int i = 0; i < 500; i++) {
			int fiber = 500 + i;
			LONGLONG tid = 1000000000000LL + i;
			char *obj = i % 10 == 0 ? "SKY" : "TGT";
			fits_write_col(f, TINT, 1, i + 1, 1, 1, &fiber, &status);
			fits_write_col(f, TLONGLONG, 2, i + 1, 1, 1, &tid, &status);
			fits_write_col(f, TSTRING, 3, i + 1, 1, 1, &obj, &status);
		}
		check_fits(status, "FIBERMAP");
	}
	fits_close_file(f, &status);
	check_fits(status, "close");
}

static void test_read(void **state)
{
	(void)state;
	char path[600];
	int flags[2] = { IMG_FULL, IMG_PLAIN_MASK };

	for (int c = 0; c < 2; c++) {
		tmp_path(path, sizeof path, "img.fits");
		write_image(path, flags[c]);
		sp_err_t err = { 0, "" };
		int ny = 0, nx = 0;
		int rc = desi_image_size(path, &ny, &nx, &err);
		if (rc != 0)
			print_message("# %s\n", err.msg);
		assert_int_equal(rc, 0);
		assert_int_equal(ny, NY);
		assert_int_equal(nx, NX);
		desi_image_t img = { .ny = ny, .nx = nx };
		img.pix = malloc(NY * NX * sizeof *img.pix);
		img.ivar = malloc(NY * NX * sizeof *img.ivar);
		assert_non_null(img.pix);
		assert_non_null(img.ivar);
		size_t nbad = 99;
		rc = desi_image_read(path, &img, &nbad, &err);
		if (rc != 0)
			print_message("# %s\n", err.msg);
		assert_int_equal(rc, 0);
		assert_string_equal(img.camera, "b1");
		assert_true(img.rdnoise == 2.5);
		/* NaN IMAGE, NaN IVAR, negative IVAR, inf IMAGE */
		assert_int_equal(nbad, 4);
		for (int y = 0; y < NY; y++)
			for (int x = 0; x < NX; x++) {
				float p = img.pix[y * NX + x], iv = img.ivar[y * NX + x];
				int masked = y == x && (y == 1 || y == 3 || y == 4 ||
							y == 5 || y == 6 || y == 7 || y == 8);
				assert_true(isfinite(p));
				if (y == x && (y == 5 || y == 8))
					assert_true(p == 0.0f);
				else
					assert_true(p == pix_value(y, x));
				if (masked)
					assert_true(iv == 0.0f);
				else
					assert_true(iv == ivar_value(y, x));
			}
		/* The buffers must match the file. */
		img.nx = NX - 1;
		rc = desi_image_read(path, &img, &nbad, &err);
		assert_int_equal(rc, SP_ESHAPE);
		assert_ptr_equal(strstr(err.msg, path), err.msg);
		assert_non_null(strstr(err.msg, "the image is 20 x 30 but the buffers are for "
						"20 x 29"));
		free(img.pix);
		free(img.ivar);
	}
}

/* Asserts that sizing (and, if that works, reading) path fails with code
 * and a message that starts with the path and contains phrase. */
static void expect_error(const char *path, int code, const char *phrase)
{
	sp_err_t err = { 0, "" };
	int ny = 0, nx = 0;
	int rc = desi_image_size(path, &ny, &nx, &err);
	if (rc == 0) {
		desi_image_t img = { .ny = ny, .nx = nx };
		img.pix = malloc((size_t)ny * nx * sizeof *img.pix);
		img.ivar = malloc((size_t)ny * nx * sizeof *img.ivar);
		assert_non_null(img.pix);
		assert_non_null(img.ivar);
		rc = desi_image_read(path, &img, NULL, &err);
		free(img.pix);
		free(img.ivar);
	}
	if (rc != code || strstr(err.msg, path) != err.msg || strstr(err.msg, phrase) == NULL)
		print_message("# got %s (%d) \"%s\", expected %s and \"%s\"\n",
			      sp_err_name(rc), rc, err.msg, sp_err_name(code), phrase);
	assert_int_equal(rc, code);
	assert_int_equal(err.code, code);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_non_null(strstr(err.msg, phrase));
}

static void copy_truncated(const char *src, const char *dst, long keep)
{
	FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
	int c;
	assert_non_null(a);
	assert_non_null(b);
	for (long n = 0; n < keep && (c = getc(a)) != EOF; n++)
		putc(c, b);
	fclose(a);
	assert_int_equal(fclose(b), 0);
}

static void test_read_errors(void **state)
{
	(void)state;
	char path[600], good[600];

	tmp_path(path, sizeof path, "nonexistent.fits");
	expect_error(path, SP_ENOENT, "no such file");
	expect_error(tmpdir, SP_EFORMAT, "not a regular file");

	tmp_path(path, sizeof path, "noivar.fits");
	write_image(path, IMG_NO_IVAR);
	expect_error(path, SP_EFORMAT, "no image HDU with EXTNAME 'IVAR'");

	tmp_path(path, sizeof path, "shape.fits");
	write_image(path, IMG_IVAR_SHAPE);
	expect_error(path, SP_ESHAPE, "HDU IVAR is 20 x 31 but IMAGE is 20 x 30");

	tmp_path(path, sizeof path, "text.fits");
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("this is not FITS\n", f);
	fclose(f);
	expect_error(path, SP_EFORMAT, "not a FITS file");

	/* Truncated in the IVAR data (header blocks and IMAGE intact), and
	 * in the IMAGE data. */
	tmp_path(good, sizeof good, "good.fits");
	write_image(good, IMG_PLAIN_MASK | IMG_NO_FIBERMAP);
	tmp_path(path, sizeof path, "trunc.fits");
	copy_truncated(good, path, 2880 * 2 + 2880 + 1000);
	expect_error(path, SP_EFORMAT,
		     "truncated: HDU 2 ends at byte 11520 but the file has 9640 bytes");
	copy_truncated(good, path, 2880 + 100);
	expect_error(path, SP_EFORMAT, "truncated: HDU 1 ends at byte 5760");
	copy_truncated(good, path, 1000);
	expect_error(path, SP_EFORMAT, "truncated: 1000 bytes, less than one 2880-byte FITS block");

	/* A real FITS file that is not an image: the shared PSF. */
	const char *sh = getenv("SP_SHARED");
	snprintf(path, sizeof path, "%s/data/desi/psf-r0-00051060.fits",
		 sh != NULL && *sh ? sh : "../shared");
	if (access(path, R_OK) == 0)
		expect_error(path, SP_EFORMAT, "no image HDU with EXTNAME 'IMAGE'");
	else
		print_message("# %s not found: PSF case skipped\n", path);
}

/* Degenerate inputs that used to pass silently: an all-NaN image, an
 * all-masked one, and broken FIBERMAPs (which were skipped as absent, or
 * copied through). */
static void test_degenerate(void **state)
{
	(void)state;
	char good[600], path[600];

	tmp_path(good, sizeof good, "good-degenerate.fits");
	write_image(good, IMG_FULL);

	tmp_path(path, sizeof path, "allnan.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_all_nan(path), 0);
	expect_error(path, SP_ENONFINITE, "no usable pixel: all 600 are masked, non-finite");

	tmp_path(path, sizeof path, "nofiber.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_fibermap(path, "nofiber"), 0);
	expect_error(path, SP_EFORMAT, "corrupt FIBERMAP: no FIBER column");

	tmp_path(path, sizeof path, "badfiber.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_fibermap(path, "badfiber"), 0);
	expect_error(path, SP_EFORMAT, "corrupt FIBERMAP: FIBER of row 3 is 123456");

	/* A FIBERMAP header CFITSIO cannot parse: was "no FIBERMAP" */
	tmp_path(path, sizeof path, "fibermap-tform.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "FIBERMAP", "TFORM2", "'Q?'"), 0);
	expect_error(path, SP_EFORMAT, "HDU 4 has a header CFITSIO cannot read");

	/* A FIBERMAP that is an image */
	fitsfile *f;
	int status = 0;
	long n1[1] = { 3 };
	tmp_path(path, sizeof path, "fibermap-image.fits");
	write_image(path, IMG_NO_FIBERMAP);
	fits_open_diskfile(&f, path, READWRITE, &status);
	fits_movabs_hdu(f, 3, NULL, &status);
	fits_create_img(f, BYTE_IMG, 1, n1, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "FIBERMAP", NULL, &status);
	fits_close_file(f, &status);
	check_fits(status, "FIBERMAP image");
	expect_error(path, SP_EFORMAT, "corrupt FIBERMAP: not a binary table");
}

/* A small frame: nspec 7 from specmin 3, nwave 13, ndiag 5. */
#define FS 7
#define FW 13
#define FD 11
typedef struct frame_data {
	double wave[FW];
	float flux[FS][FW], ivar[FS][FW], chi2[FS][FW], res[FS][FD][FW];
	uint32_t mask[FS][FW];
	desi_frame_t fr;
} frame_data_t;

static void make_frame(frame_data_t *d, int specmin, const char *in_psf)
{
	for (int w = 0; w < FW; w++)
		d->wave[w] = 5760.0 + 0.8 * w;
	for (int s = 0; s < FS; s++)
		for (int w = 0; w < FW; w++) {
			d->flux[s][w] = (float)(s * 100 + w) + 0.5f;
			d->ivar[s][w] = 1.0f / (float)(1 + s + w);
			d->chi2[s][w] = (float)(s + w) * 0.125f;
			d->mask[s][w] = (s + w) % 5 == 0 ? 1u : (s == 6 && w == 12 ? 0x80000003u : 0);
			for (int k = 0; k < FD; k++)
				d->res[s][k][w] = (float)(s * 1000 + k * 50 + w);
		}
	d->fr = (desi_frame_t){ .nspec = FS, .nwave = FW, .ndiag = 5, .specmin = specmin,
				.wave = d->wave, .flux = &d->flux[0][0],
				.ivar = &d->ivar[0][0], .mask = &d->mask[0][0],
				.resolution = &d->res[0][0][0], .chi2pix = &d->chi2[0][0],
				.in_psf = in_psf, .in_img = "img.fits" };
}

/* Moves f to HDU number hdu (1-based), checks its EXTNAME, and reads the
 * shape (C order: slowest first). */
static void expect_hdu(fitsfile *f, int hdu, const char *name, int naxis, const long *shape)
{
	int status = 0, type = 0, nax = 0;
	char ext[FLEN_VALUE];
	long naxes[3];

	fits_movabs_hdu(f, hdu, &type, &status);
	fits_read_key(f, TSTRING, "EXTNAME", ext, NULL, &status);
	check_fits(status, name);
	assert_string_equal(ext, name);
	if (naxis == 0)
		return;
	assert_int_equal(type, IMAGE_HDU);
	fits_get_img_dim(f, &nax, &status);
	fits_get_img_size(f, 3, naxes, &status);
	check_fits(status, name);
	assert_int_equal(nax, naxis);
	for (int a = 0; a < naxis; a++)
		assert_int_equal(naxes[a], shape[naxis - 1 - a]);
	int dataok = 0, hduok = 0;
	fits_verify_chksum(f, &dataok, &hduok, &status);
	check_fits(status, "checksum");
	assert_int_equal(dataok, 1);
	assert_int_equal(hduok, 1);
}

static void no_temp_left(const char *path)
{
	assert_int_equal(temps_beside(path), 0);
}

static void test_write_round_trip(void **state)
{
	(void)state;
	char img[600], out[600], psf[400];
	static frame_data_t d;
	sp_err_t err = { 0, "" };

	/* A long IN_PSF needs the long-string convention. */
	snprintf(psf, sizeof psf, "/some/very/long/folder/name/that/goes/on/and/on/%s",
		 "for/more/than/sixty-eight/characters/psf-r0-00051060.fits");
	make_frame(&d, 3, psf);
	tmp_path(img, sizeof img, "in.fits");
	write_image(img, IMG_FULL);
	tmp_path(out, sizeof out, "frame.fits");
	int rc = desi_frame_write(out, &d.fr, img, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
	no_temp_left(out);

	fitsfile *f;
	int status = 0, nhdu = 0, anynul;
	fits_open_diskfile(&f, out, READONLY, &status);
	fits_get_num_hdus(f, &nhdu, &status);
	check_fits(status, "open");
	assert_int_equal(nhdu, 7);
	long s2[2] = { FS, FW }, s1[1] = { FW }, s3[3] = { FS, FD, FW };
	long fp[3] = { 1, 1, 1 };

	expect_hdu(f, 1, "FLUX", 2, s2);
	float fb[FS][FW];
	fits_read_pix(f, TFLOAT, fp, FS * FW, NULL, fb, &anynul, &status);
	check_fits(status, "FLUX data");
	assert_memory_equal(fb, d.flux, sizeof fb);
	char s[FLEN_VALUE], *lng = NULL;
	int nspec = 0, foo = 0, specmin = -1;
	double v;
	fits_read_key(f, TSTRING, "BUNIT", s, NULL, &status);
	assert_string_equal(s, "electron/Angstrom");
	fits_read_key(f, TINT, "NSPEC", &nspec, NULL, &status);
	assert_int_equal(nspec, FS);
	fits_read_key(f, TINT, "SPECMIN", &specmin, NULL, &status);
	assert_int_equal(specmin, 3);
	fits_read_key(f, TDOUBLE, "WAVEMIN", &v, NULL, &status);
	assert_true(v == 5760.0);
	fits_read_key(f, TDOUBLE, "WAVEMAX", &v, NULL, &status);
	assert_true(v == d.wave[FW - 1]);
	fits_read_key(f, TDOUBLE, "WAVESTEP", &v, NULL, &status);
	assert_true(fabs(v - 0.8) < 1e-12);
	fits_read_key_longstr(f, "IN_PSF", &lng, NULL, &status);
	check_fits(status, "keys");
	assert_string_equal(lng, psf);
	fits_free_memory(lng, &status);
	fits_read_key(f, TSTRING, "IN_IMG", s, NULL, &status);
	assert_string_equal(s, "img.fits");
	/* Carried over from the input image's header. */
	fits_read_key(f, TSTRING, "CAMERA", s, NULL, &status);
	assert_string_equal(s, "b1");
	fits_read_key(f, TINT, "FOO", &foo, NULL, &status);
	assert_int_equal(foo, 42);
	check_fits(status, "keys");

	expect_hdu(f, 2, "IVAR", 2, s2);
	fits_read_pix(f, TFLOAT, fp, FS * FW, NULL, fb, &anynul, &status);
	assert_memory_equal(fb, d.ivar, sizeof fb);

	expect_hdu(f, 3, "MASK", 2, s2);
	int bitpix = 0;
	fits_get_img_equivtype(f, &bitpix, &status);
	assert_int_equal(bitpix, ULONG_IMG);
	uint32_t mb[FS][FW];
	fits_read_pix(f, TUINT, fp, FS * FW, NULL, mb, &anynul, &status);
	check_fits(status, "MASK data");
	assert_memory_equal(mb, d.mask, sizeof mb);

	expect_hdu(f, 4, "WAVELENGTH", 1, s1);
	double wb[FW];
	fits_read_pix(f, TDOUBLE, fp, FW, NULL, wb, &anynul, &status);
	assert_memory_equal(wb, d.wave, sizeof wb);

	expect_hdu(f, 5, "RESOLUTION", 3, s3);
	static float rb[FS][FD][FW];
	fits_read_pix(f, TFLOAT, fp, FS * FD * FW, NULL, rb, &anynul, &status);
	check_fits(status, "RESOLUTION data");
	assert_memory_equal(rb, d.res, sizeof rb);

	expect_hdu(f, 6, "FIBERMAP", 0, NULL);
	long nrows = 0;
	int fib[FS];
	fits_get_num_rows(f, &nrows, &status);
	assert_int_equal(nrows, FS);
	fits_read_col(f, TINT, 1, 1, 1, FS, NULL, fib, &anynul, &status);
	check_fits(status, "FIBERMAP data");
	for (int r = 0; r < FS; r++)
		assert_int_equal(fib[r], 503 + r);
	int dataok = 0, hduok = 0;
	fits_verify_chksum(f, &dataok, &hduok, &status);
	assert_int_equal(dataok, 1);
	assert_int_equal(hduok, 1);

	expect_hdu(f, 7, "CHI2PIX", 2, s2);
	fits_read_pix(f, TFLOAT, fp, FS * FW, NULL, fb, &anynul, &status);
	assert_memory_equal(fb, d.chi2, sizeof fb);
	fits_close_file(f, &status);
	check_fits(status, "close");

	/* Without a FIBERMAP in the image, or without an image: no FIBERMAP
	 * HDU, CHI2PIX is HDU 6. */
	for (int c = 0; c < 2; c++) {
		if (c == 0)
			write_image(img, IMG_NO_FIBERMAP);
		rc = desi_frame_write(out, &d.fr, c == 0 ? img : NULL, &err);
		if (rc != 0)
			print_message("# %s\n", err.msg);
		assert_int_equal(rc, 0);
		fits_open_diskfile(&f, out, READONLY, &status);
		fits_get_num_hdus(f, &nhdu, &status);
		check_fits(status, "open");
		assert_int_equal(nhdu, 6);
		expect_hdu(f, 6, "CHI2PIX", 2, s2);
		fits_close_file(f, &status);
	}
}

static void test_write_fails(void **state)
{
	(void)state;
	char img[600], path[600], inner[700];
	static frame_data_t d;
	sp_err_t err = { 0, "" };

	make_frame(&d, 0, "psf.fits");
	tmp_path(img, sizeof img, "in2.fits");
	write_image(img, IMG_FULL);

	/* The folder cannot be made: a file is in the way. */
	tmp_path(path, sizeof path, "in2.fits/frame.fits");
	int rc = desi_frame_write(path, &d.fr, img, &err);
	assert_int_equal(rc, SP_EIO);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_non_null(strstr(err.msg, "cannot create a temporary file"));
	assert_int_not_equal(access(path, F_OK), 0);

	/* The target is a non-empty directory: refused before writing. */
	tmp_path(path, sizeof path, "isdir.fits");
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(inner, sizeof inner, "%s/keep", path);
	FILE *f = fopen(inner, "w");
	assert_non_null(f);
	fclose(f);
	rc = desi_frame_write(path, &d.fr, img, &err);
	assert_int_equal(rc, SP_EIO);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_non_null(strstr(err.msg, "is a folder"));
	no_temp_left(path);
	unlink(inner);
	rmdir(path);

	/* FIBERMAP too short for the spectra: nothing is written. */
	tmp_path(path, sizeof path, "short.fits");
	d.fr.specmin = 495;
	rc = desi_frame_write(path, &d.fr, img, &err);
	assert_int_equal(rc, SP_ESHAPE);
	assert_ptr_equal(strstr(err.msg, img), err.msg);
	assert_non_null(strstr(err.msg, "FIBERMAP has 500 rows, too few for spectra 495 .. 501"));
	assert_int_not_equal(access(path, F_OK), 0);
	no_temp_left(path);

	/* A missing input image, and an incomplete frame. */
	d.fr.specmin = 0;
	char missing[600];
	tmp_path(missing, sizeof missing, "missing.fits");
	rc = desi_frame_write(path, &d.fr, missing, &err);
	assert_int_equal(rc, SP_ENOENT);
	assert_ptr_equal(strstr(err.msg, missing), err.msg);
	d.fr.flux = NULL;
	rc = desi_frame_write(path, &d.fr, img, &err);
	assert_int_equal(rc, SP_EINVAL);
	assert_int_not_equal(access(path, F_OK), 0);
}

/* A fibermap file as desispec writes one: an empty primary HDU and a
 * FIBERMAP table of nrows rows, FIBER = base + row. */
static void write_fibermap_file(const char *path, int nrows, int base)
{
	fitsfile *f;
	int status = 0;
	char *ttype[] = { "FIBER", "TARGETID" };
	char *tform[] = { "J", "K" };

	unlink(path);
	fits_create_diskfile(&f, path, &status);
	fits_create_img(f, BYTE_IMG, 0, NULL, &status);
	fits_create_tbl(f, BINARY_TBL, nrows, 2, ttype, tform, NULL, "FIBERMAP", &status);
	for (int i = 0; i < nrows; i++) {
		int fiber = base + i;
		LONGLONG tid = 2000000000000LL + i;
		fits_write_col(f, TINT, 1, i + 1, 1, 1, &fiber, &status);
		fits_write_col(f, TLONGLONG, 2, i + 1, 1, 1, &tid, &status);
	}
	fits_close_file(f, &status);
	check_fits(status, "fibermap file");
}

/* desispec's -f/--fibermap: the fibermap file's FIBERMAP rows specmin ..
 * replace the image's (or stand in for a FIBERMAP the image lacks); the
 * file is recorded as IN_FMAP.  A file without a FIBERMAP, or with too few
 * rows, fails naming that file, and nothing is written. */
static void test_separate_fibermap(void **state)
{
	(void)state;
	char img[600], fm[600], out[600], bad[600];
	static frame_data_t d;
	sp_err_t err = { 0, "" };

	make_frame(&d, 3, "psf.fits");
	tmp_path(img, sizeof img, "in3.fits");
	tmp_path(fm, sizeof fm, "fibermap-3.fits");
	tmp_path(out, sizeof out, "frame3.fits");
	write_fibermap_file(fm, 500, 1000);
	assert_int_equal(desi_fibermap_check(fm, &err), 0);
	d.fr.fibermap = fm;
	for (int c = 0; c < 2; c++) {
		write_image(img, c == 0 ? IMG_FULL : IMG_NO_FIBERMAP);
		int rc = desi_frame_write(out, &d.fr, img, &err);
		if (rc != 0)
			print_message("# %s\n", err.msg);
		assert_int_equal(rc, 0);
		fitsfile *f;
		int status = 0, anynul = 0, fib[FS];
		long nrows = 0;
		char *lng = NULL;
		fits_open_diskfile(&f, out, READONLY, &status);
		fits_read_key_longstr(f, "IN_FMAP", &lng, NULL, &status);
		check_fits(status, "IN_FMAP");
		assert_string_equal(lng, fm);
		fits_free_memory(lng, &status);
		expect_hdu(f, 6, "FIBERMAP", 0, NULL);
		fits_get_num_rows(f, &nrows, &status);
		assert_int_equal(nrows, FS);
		fits_read_col(f, TINT, 1, 1, 1, FS, NULL, fib, &anynul, &status);
		check_fits(status, "FIBERMAP data");
		for (int r = 0; r < FS; r++)
			assert_int_equal(fib[r], 1003 + r);
		fits_close_file(f, &status);
	}

	/* An image as the fibermap file when it has no FIBERMAP; a fibermap
	 * file with a FIBER outside DESI's fibres; a missing one. */
	assert_int_equal(desi_fibermap_check(img, &err), SP_EFORMAT);
	assert_ptr_equal(strstr(err.msg, img), err.msg);
	assert_non_null(strstr(err.msg, "no FIBERMAP HDU"));
	tmp_path(bad, sizeof bad, "fibermap-bad.fits");
	write_fibermap_file(bad, 10, 4995);
	assert_int_equal(desi_fibermap_check(bad, &err), SP_EFORMAT);
	assert_ptr_equal(strstr(err.msg, bad), err.msg);
	assert_non_null(strstr(err.msg, "FIBER of row 5 is 5000, not a DESI fibre"));
	tmp_path(bad, sizeof bad, "fibermap-missing.fits");
	assert_int_equal(desi_fibermap_check(bad, &err), SP_ENOENT);

	/* Too few rows in the fibermap file (the image's 500 would do). */
	write_image(img, IMG_FULL);
	tmp_path(bad, sizeof bad, "fibermap-short.fits");
	write_fibermap_file(bad, 5, 0);
	d.fr.fibermap = bad;
	unlink(out);
	int rc = desi_frame_write(out, &d.fr, img, &err);
	assert_int_equal(rc, SP_ESHAPE);
	assert_ptr_equal(strstr(err.msg, bad), err.msg);
	assert_non_null(strstr(err.msg, "FIBERMAP has 5 rows, too few for spectra 3 .. 9"));
	assert_int_not_equal(access(out, F_OK), 0);
	no_temp_left(out);
	/* Given, but not a fibermap file: an error, not a frame without one. */
	d.fr.fibermap = img;
	write_image(img, IMG_NO_FIBERMAP);
	rc = desi_frame_write(out, &d.fr, img, &err);
	assert_int_equal(rc, SP_EFORMAT);
	assert_non_null(strstr(err.msg, "no FIBERMAP HDU"));
	assert_int_not_equal(access(out, F_OK), 0);
}

/* desi_frame_scores() on a frame whose values are known in closed form:
 * the grid 5760 + 0.8 w (13 bins) is b by its mean, all in b's top hat;
 * flux s 100 + w + 1/2 and sqrt(ivar) flux both monotonic in w, so the
 * medians are bin 6's.  A grid in no top hat fails, and so does the write
 * that asks for SCORES then, with nothing left. */
static void test_scores(void **state)
{
	(void)state;
	static frame_data_t d;
	float sum[FS];
	double count[FS], snr[FS];
	char band = 0, out[600];
	sp_err_t err = { 0, "" };

	make_frame(&d, 0, "psf.fits");
	assert_int_equal(desi_frame_scores(&d.fr, &band, sum, count, snr), 0);
	assert_int_equal(band, 'B');
	for (int s = 0; s < FS; s++) {
		double f6 = s * 100 + 6.5, dw = d.wave[7] - d.wave[6];
		assert_float_equal(sum[s], 13 * (s * 100 + 0.5) + 78, 1e-6 * sum[s]);
		assert_float_equal(count[s], f6 / ((d.wave[7] - d.wave[5]) / 2), 1e-12 * count[s]);
		assert_float_equal(snr[s], f6 / sqrt(7.0 + s) / sqrt(dw), 1e-6 * snr[s]);
	}
	for (int w = 0; w < FW; w++)
		d.wave[w] = 9850.0 + 0.8 * w;
	assert_int_equal(desi_frame_scores(&d.fr, &band, sum, count, snr), -1);
	assert_int_equal(band, 'Z');
	d.fr.scores = 1;
	tmp_path(out, sizeof out, "noband.fits");
	assert_int_equal(desi_frame_write(out, &d.fr, NULL, &err), SP_EINVAL);
	assert_non_null(strstr(err.msg, "no wavelength of the grid 9850 .. 9859.6"));
	assert_int_not_equal(access(out, F_OK), 0);
	no_temp_left(out);
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The slow, obvious median: sort, take the middle (or the middle two). */
static double sorted_median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_dbl);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* SCORES' medians (a selection, not a sort) against sorting, to the bit:
 * odd and even lengths from 1 to 2001, values with many ties, sorted,
 * reversed and constant rows; a NaN gives NaN, as numpy.median. */
static void test_scores_median(void **state)
{
	(void)state;
	static const int lens[] = { 1, 2, 3, 4, 5, 10, 11, 64, 999, 1000, 2001 };
	enum { NS = 6 };
	unsigned seed = 12345;
	for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
		const int nw = lens[li] + 1; /* + a bin past the top hat's end */
		double *wave = malloc((size_t)nw * sizeof *wave), *v = malloc((size_t)nw * sizeof *v);
		float *flux = malloc((size_t)NS * nw * sizeof *flux);
		float *ivar = malloc((size_t)NS * nw * sizeof *ivar), sum[NS];
		double count[NS], snr[NS];
		char band = 0;
		assert_non_null(wave);
		assert_non_null(v);
		assert_non_null(flux);
		assert_non_null(ivar);
		/* the R top hat [5800, 7600): the last bin is past it unless nw is 2 */
		const double step = nw > 2 ? 1700.0 / (nw - 2) : 1.0;
		for (int w = 0; w < nw; w++)
			wave[w] = 5850.0 + step * w;
		if (nw > 2)
			wave[nw - 1] = 7650.0;
		for (int s = 0; s < NS; s++)
			for (int w = 0; w < nw; w++) {
				seed = seed * 1103515245u + 12345u;
				int r = (int)((seed >> 16) % 17) - 5; /* ties */
				float f = s == 0 ? (float)w : s == 1 ? (float)(nw - w) : s == 2 ? 3.0f :
					  (float)r * 0.25f;
				flux[(size_t)s * nw + w] = f;
				ivar[(size_t)s * nw + w] = (float)((seed >> 8) % 5);
			}
		desi_frame_t fr = { .nspec = NS, .nwave = nw, .ndiag = 0, .wave = wave,
				    .flux = flux, .ivar = ivar };
		assert_int_equal(desi_frame_scores(&fr, &band, sum, count, snr), 0);
		assert_int_equal(band, 'R');
		int nin = 0;
		for (int w = 0; w < nw; w++)
			nin += wave[w] >= 5800.0 && wave[w] < 7600.0;
		for (int s = 0; s < NS; s++) {
			int k = 0;
			for (int w = 0; w < nw; w++) {
				if (!(wave[w] >= 5800.0 && wave[w] < 7600.0))
					continue;
				const double dw = w == 0 ? wave[1] - wave[0] :
						  w == nw - 1 ? wave[w] - wave[w - 1] :
						  (wave[w + 1] - wave[w - 1]) / 2;
				v[k++] = flux[(size_t)s * nw + w] / dw;
			}
			assert_int_equal(k, nin);
			double ref = sorted_median(v, (size_t)k);
			assert_memory_equal(&count[s], &ref, sizeof ref);
		}
		/* a NaN anywhere in the band: NaN */
		flux[(size_t)(NS - 1) * nw + nin / 2] = NAN;
		assert_int_equal(desi_frame_scores(&fr, &band, sum, count, snr), 0);
		assert_true(isnan(count[NS - 1]));
		assert_false(isnan(count[NS - 2]));
		free(wave);
		free(v);
		free(flux);
		free(ivar);
	}
}

static const char astropy_check[] =
	"import sys, warnings\n"
	"try:\n"
	"    from astropy.io import fits\n"
	"except ImportError:\n"
	"    sys.exit(77)\n"
	"warnings.simplefilter('error')\n"
	"h = fits.open(sys.argv[1], checksum=True)\n"
	"want = {'FLUX': (7, 13), 'IVAR': (7, 13), 'MASK': (7, 13), 'WAVELENGTH': (13,),\n"
	"        'RESOLUTION': (7, 11, 13), 'CHI2PIX': (7, 13)}\n"
	"for k, s in want.items():\n"
	"    assert h[k].data.shape == s, (k, h[k].data.shape)\n"
	"assert h[0].name == 'FLUX' and h[0].header['BUNIT'] == 'electron/Angstrom'\n"
	"assert h['MASK'].data.dtype.kind == 'u', h['MASK'].data.dtype\n"
	"assert int(h['MASK'].data[6, 12]) == 0x80000003\n"
	"assert float(h['FLUX'].data[2, 5]) == 205.5\n"
	"assert float(h['RESOLUTION'].data[1, 10, 3]) == 1503.0\n"
	"assert list(h['FIBERMAP'].data['FIBER']) == list(range(503, 510))\n"
	"assert h['FLUX'].header['IN_PSF'].endswith('psf-r0-00051060.fits')\n"
	"h.close()\n"
	"print('# astropy', __import__('astropy').__version__, 'reads the frame')\n";

static void test_astropy(void **state)
{
	(void)state;
	char img[600], out[600], script[600], cmd[2400];
	static frame_data_t d;
	sp_err_t err = { 0, "" };
	const char *py = getenv("PYTHON");

	if (py == NULL || *py == '\0')
		py = "/usr/bin/python3";
	if (access(py, X_OK) != 0) {
		/* A TAP comment, not cmocka's skip(): "not ok # SKIP" is a
		 * failure for automake's TAP driver. */
		print_message("# SKIP astropy check: %s not found\n", py);
		return;
	}
	make_frame(&d, 3, "/a/long/path/that/needs/the/long/string/convention/in/fits/"
			  "psf-r0-00051060.fits");
	tmp_path(img, sizeof img, "in3.fits");
	write_image(img, IMG_FULL);
	tmp_path(out, sizeof out, "frame3.fits");
	assert_int_equal(desi_frame_write(out, &d.fr, img, &err), 0);
	tmp_path(script, sizeof script, "check.py");
	FILE *f = fopen(script, "w");
	assert_non_null(f);
	fputs(astropy_check, f);
	assert_int_equal(fclose(f), 0);
	snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", py, script, out);
	int st = system(cmd);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
		print_message("# SKIP astropy check: astropy is not installed\n");
		return;
	}
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* The 2-D model (desi.write model=true): written into an output set's
 * temporary and committed, read back: the primary HDU is the float32 image
 * (EXTNAME MODEL, the image's shape, its pixels to the bit), with IN_IMG,
 * IN_PSF (a long name), SPECMIN/SPECMAX, WAVEMIN/WAVEMAX, CREATOR and the
 * input image's own cards; checksums valid.  A missing input image or an
 * incomplete model fails, and aborting the set leaves nothing. */
static void test_model(void **state)
{
	(void)state;
	char img[600], out[600], psf[400], missing[600];
	static float pix[NY][NX];
	sp_err_t err = { 0, "" };

	for (int y = 0; y < NY; y++)
		for (int x = 0; x < NX; x++)
			pix[y][x] = (float)(y * 1000 + x) * 0.37f - 3.0f;
	snprintf(psf, sizeof psf, "/some/very/long/folder/name/that/goes/on/and/on/%s",
		 "for/more/than/sixty-eight/characters/psf-r0-00051060.fits");
	tmp_path(img, sizeof img, "in-model.fits");
	write_image(img, IMG_FULL);
	tmp_path(out, sizeof out, "model-in.fits");
	desi_model_t m = { .ny = NY, .nx = NX, .pix = &pix[0][0], .specmin = 25, .nspec = 50,
			   .wmin = 5760.0, .wmax = 6060.0, .in_psf = psf, .in_img = img };
	sp_outset_t set = { 0 };
	const char *tmp = NULL;
	assert_int_equal(sp_outset_add(&set, out, &tmp, &err), 0);
	int rc = desi_model_write_into(tmp, out, &m, img, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
	assert_int_equal(sp_outset_commit(&set, &err), 0);
	sp_outset_free(&set);
	no_temp_left(out);

	fitsfile *f;
	int status = 0, nhdu = 0, anynul = 0, bitpix = 0, i = 0;
	long shape[2] = { NY, NX }, fp[2] = { 1, 1 };
	static float back[NY][NX];
	char s[FLEN_VALUE], *lng = NULL;
	double v = 0;
	fits_open_diskfile(&f, out, READONLY, &status);
	fits_get_num_hdus(f, &nhdu, &status);
	check_fits(status, "open");
	assert_int_equal(nhdu, 1);
	expect_hdu(f, 1, "MODEL", 2, shape);
	fits_get_img_type(f, &bitpix, &status);
	assert_int_equal(bitpix, FLOAT_IMG);
	fits_read_pix(f, TFLOAT, fp, NY * NX, NULL, back, &anynul, &status);
	check_fits(status, "MODEL data");
	assert_memory_equal(back, pix, sizeof back);
	fits_read_key(f, TSTRING, "BUNIT", s, NULL, &status);
	assert_string_equal(s, "electron");
	fits_read_key(f, TSTRING, "CREATOR", s, NULL, &status);
	assert_int_equal(strncmp(s, "starpipe ", 9), 0);
	fits_read_key_longstr(f, "IN_PSF", &lng, NULL, &status);
	check_fits(status, "keys");
	assert_string_equal(lng, psf);
	fits_free_memory(lng, &status);
	fits_read_key_longstr(f, "IN_IMG", &lng, NULL, &status);
	check_fits(status, "keys");
	assert_string_equal(lng, img);
	fits_free_memory(lng, &status);
	fits_read_key(f, TINT, "SPECMIN", &i, NULL, &status);
	assert_int_equal(i, 25);
	fits_read_key(f, TINT, "SPECMAX", &i, NULL, &status);
	assert_int_equal(i, 74);
	fits_read_key(f, TDOUBLE, "WAVEMIN", &v, NULL, &status);
	assert_true(v == 5760.0);
	fits_read_key(f, TDOUBLE, "WAVEMAX", &v, NULL, &status);
	assert_true(v == 6060.0);
	fits_read_key(f, TSTRING, "CAMERA", s, NULL, &status); /* the image's card */
	assert_string_equal(s, "b1");
	check_fits(status, "keys");
	fits_close_file(f, &status);
	check_fits(status, "close");

	/* A missing input image, an incomplete model: errors; nothing left. */
	tmp_path(missing, sizeof missing, "missing-model-in.fits");
	tmp_path(out, sizeof out, "model-bad.fits");
	assert_int_equal(sp_outset_add(&set, out, &tmp, &err), 0);
	rc = desi_model_write_into(tmp, out, &m, missing, &err);
	assert_int_equal(rc, SP_ENOENT);
	assert_ptr_equal(strstr(err.msg, missing), err.msg);
	m.pix = NULL;
	rc = desi_model_write_into(tmp, out, &m, img, &err);
	assert_int_equal(rc, SP_EINVAL);
	sp_outset_free(&set);
	assert_int_not_equal(access(out, F_OK), 0);
	no_temp_left(out);
}

/* The whole file into a malloc'd buffer; its size in *n. */
static unsigned char *read_all(const char *path, long *n)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	*n = ftell(f);
	rewind(f);
	unsigned char *b = malloc((size_t)*n + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, (size_t)*n, f), (size_t)*n);
	fclose(f);
	return b;
}

static void expect_verify_error(const char *path, const char *phrase)
{
	sp_err_t err = { 0, "" };
	int rc = desi_output_verify(path, &err);
	if (rc == 0 || strstr(err.msg, phrase) == NULL || strstr(err.msg, path) == NULL) {
		print_message("# %s: expected an error with '%s', got %d '%s'\n", path, phrase, rc,
			      err.msg);
		fail();
	}
}

/* Issue 23: the frame's bytes do not depend on when it is written (no time
 * in the CHECKSUM/DATASUM comments, no DATE card), its checksums verify,
 * and desi_output_verify() tells a whole frame from a damaged one. */
static void test_deterministic_verified(void **state)
{
	(void)state;
	char img[600], a[600], b[600], cut[600];
	static frame_data_t d;
	sp_err_t err = { 0, "" };

	make_frame(&d, 0, "psf.fits");
	tmp_path(img, sizeof img, "det-in.fits");
	write_image(img, IMG_FULL);
	tmp_path(a, sizeof a, "det-a.fits");
	tmp_path(b, sizeof b, "det-b.fits");
	assert_int_equal(desi_frame_write(a, &d.fr, img, &err), 0);
	sleep(1); /* CFITSIO's own comments change every second */
	assert_int_equal(desi_frame_write(b, &d.fr, img, &err), 0);
	long na, nb;
	unsigned char *ba = read_all(a, &na), *bb = read_all(b, &nb);
	assert_int_equal(na, nb);
	assert_memory_equal(ba, bb, (size_t)na);
	free(bb);

	fitsfile *f;
	int status = 0, nhdu = 0, type;
	check_fits(fits_open_diskfile(&f, a, READONLY, &status), "open");
	check_fits(fits_get_num_hdus(f, &nhdu, &status), "num_hdus");
	assert_true(nhdu >= 7);
	for (int h = 1; h <= nhdu; h++) {
		int dok = 0, hok = 0, nkeys = 0;
		char val[FLEN_VALUE], com[FLEN_COMMENT], card[FLEN_CARD];
		check_fits(fits_movabs_hdu(f, h, &type, &status), "movabs");
		check_fits(fits_verify_chksum(f, &dok, &hok, &status), "verify");
		assert_int_equal(dok, 1);
		assert_int_equal(hok, 1);
		check_fits(fits_read_keyword(f, "CHECKSUM", val, com, &status), "CHECKSUM");
		assert_string_equal(com, "HDU checksum");
		check_fits(fits_read_keyword(f, "DATASUM", val, com, &status), "DATASUM");
		assert_string_equal(com, "data unit checksum");
		check_fits(fits_get_hdrspace(f, &nkeys, NULL, &status), "hdrspace");
		for (int k = 1; k <= nkeys; k++) {
			check_fits(fits_read_record(f, k, card, &status), "record");
			if (strncmp(card, "DATE    ", 8) == 0 || strstr(card, "updated") != NULL) {
				print_message("# HDU %d has a dated card: %s\n", h, card);
				fail();
			}
		}
	}
	LONGLONG start3 = 0, hstart, dstart1 = 0, dstart, dend;
	check_fits(fits_movabs_hdu(f, 1, &type, &status), "movabs 1");
	check_fits(fits_get_hduaddrll(f, &hstart, &dstart1, &dend, &status), "hduaddr");
	check_fits(fits_movabs_hdu(f, 3, &type, &status), "movabs 3");
	check_fits(fits_get_hduaddrll(f, &start3, &dstart, &dend, &status), "hduaddr");
	fits_close_file(f, &status);

	sp_err_t verr = { 0, "" };
	int rc = desi_output_verify(a, &verr);
	if (rc != 0) {
		print_message("# a whole frame is refused: %s\n", verr.msg);
		fail();
	}
	/* cut to 100 bytes; cut after its first two HDUs (the rest missing,
	 * every checksum that is left right); one flipped bit in FLUX's data */
	tmp_path(cut, sizeof cut, "det-cut.fits");
	copy_truncated(a, cut, 100);
	expect_verify_error(cut, "truncated");
	copy_truncated(a, cut, (long)start3);
	expect_verify_error(cut, "the frame has no MASK HDU");
	ba[dstart1 + 5] ^= 1;
	FILE *o = fopen(cut, "wb");
	assert_non_null(o);
	assert_int_equal(fwrite(ba, 1, (size_t)na, o), (size_t)na);
	assert_int_equal(fclose(o), 0);
	expect_verify_error(cut, "HDU 1 (FLUX): its data do not match its DATASUM");
	free(ba);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read),
		cmocka_unit_test(test_read_errors),
		cmocka_unit_test(test_degenerate),
		cmocka_unit_test(test_write_round_trip),
		cmocka_unit_test(test_write_fails),
		cmocka_unit_test(test_separate_fibermap),
		cmocka_unit_test(test_scores),
		cmocka_unit_test(test_scores_median),
		cmocka_unit_test(test_astropy),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_deterministic_verified),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
