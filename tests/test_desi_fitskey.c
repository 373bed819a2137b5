/* Unit tests of the safe FITS input layer: keyword parsing, crafted header cards, file names that must not be interpreted, FIFOs. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
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
#include "desi_craft.h"

#include "../codelets/desi/fitskey.h"
#include "../codelets/desi/frame_io.h"
#include "../codelets/desi/psf.h"

/*
 * DESIGN.  Every read of a crafted file runs in a child process (run_read):
 * CFITSIO 4.2 aborts the process on some crafted cards (a 30-digit integer
 * read as TLONG/TINT: "*** buffer overflow detected ***"), and a FIFO
 * opened the ordinary way blocks forever.  The parent reports a signal
 * (crash, or SIGALRM after 20 s for a hang) as a failure with its name,
 * instead of dying or hanging itself.
 */

static int setup(void **state)
{
	(void)state;
	return tmpdir_make("test_desi_fitskey");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove();
}

static const char *D30 = "123456789012345678901234567890";

/* ------------------------------------------------------------ parsers */

static void card(char *buf, const char *key, const char *val)
{
	snprintf(buf, 81, "%-8.8s= %-70.70s", key, val);
}

static void test_value_text(void **state)
{
	(void)state;
	char c[81], v[FLEN_VALUE];
	int s;

	card(c, "A", "                  42 / comment");
	assert_int_equal(desi_fitskey_value_text(c, v, sizeof v, &s), 0);
	assert_string_equal(v, "42");
	assert_int_equal(s, 0);
	card(c, "A", "'it''s   '  / c");
	assert_int_equal(desi_fitskey_value_text(c, v, sizeof v, &s), 0);
	assert_string_equal(v, "it's");
	assert_int_equal(s, 1);
	card(c, "A", "'''r0  '''");
	assert_int_equal(desi_fitskey_value_text(c, v, sizeof v, &s), 0);
	assert_string_equal(v, "'r0  '");
	card(c, "A", "'unterminated");
	assert_int_equal(desi_fitskey_value_text(c, v, sizeof v, &s), SP_EFORMAT);
	card(c, "A", "'x' junk");
	assert_int_equal(desi_fitskey_value_text(c, v, sizeof v, &s), SP_EFORMAT);
	card(c, "A", "      / no value");
	assert_int_equal(desi_fitskey_value_text(c, v, sizeof v, &s), SP_EFORMAT);
	assert_int_equal(desi_fitskey_value_text("A       42", v, sizeof v, &s), SP_EFORMAT);
	/* a value as long as the card allows: no overflow of a small buffer */
	char small[8];
	card(c, "A", D30);
	assert_int_equal(desi_fitskey_value_text(c, small, sizeof small, &s), SP_EFORMAT);
}

static void test_parse_numbers(void **state)
{
	(void)state;
	long l;
	double d;
	char big[80];

	assert_int_equal(desi_fitskey_parse_long("42", &l), 0);
	assert_int_equal(l, 42);
	assert_int_equal(desi_fitskey_parse_long("-7", &l), 0);
	assert_int_equal(l, -7);
	assert_int_equal(desi_fitskey_parse_long("8.0", &l), 0);
	assert_int_equal(l, 8);
	assert_int_equal(desi_fitskey_parse_long("8.5", &l), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_long(D30, &l), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_long("1e30", &l), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_long("12abc", &l), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_long("", &l), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_long("T", &l), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_double("5543.", &d), 0);
	assert_true(d == 5543.0);
	assert_int_equal(desi_fitskey_parse_double("1.5D2", &d), 0);
	assert_true(d == 150.0);
	assert_int_equal(desi_fitskey_parse_double(D30, &d), 0);
	assert_true(d > 1e29);
	memset(big, '9', 68);
	big[68] = '\0';
	assert_int_equal(desi_fitskey_parse_double(big, &d), 0);
	assert_int_equal(desi_fitskey_parse_double("1e999", &d), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_double("nan", &d), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_double("inf", &d), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_double("0x10", &d), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_double("1.5.5", &d), SP_EFORMAT);
	assert_int_equal(desi_fitskey_parse_double("-", &d), SP_EFORMAT);
}

/* --------------------------------------------------- reads in a child */

enum { READ_PSF, READ_IMAGE };

/* Reads path as a PSF or an image in a child process; returns the rc and
 * fills err; a child killed by a signal fails the test. */
static int run_read(int what, const char *path, sp_err_t *err)
{
	int fds[2];
	struct { int rc; sp_err_t err; } res = { 0, { 0, "" } };

	assert_int_equal(pipe(fds), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		alarm(20);
		if (what == READ_PSF) {
			desi_psf_t *psf = NULL;
			res.rc = desi_psf_read(path, &psf, &res.err);
			desi_psf_free(&psf);
		} else {
			int ny = 0, nx = 0;
			res.rc = desi_image_size(path, &ny, &nx, &res.err);
			if (res.rc == 0) {
				desi_image_t img = { .ny = ny, .nx = nx };
				img.pix = malloc((size_t)ny * nx * sizeof(float) + 4);
				img.ivar = malloc((size_t)ny * nx * sizeof(float) + 4);
				res.rc = desi_image_read(path, &img, NULL, &res.err);
			}
		}
		ssize_t w = write(fds[1], &res, sizeof res);
		_exit(w == (ssize_t)sizeof res ? 0 : 1);
	}
	close(fds[1]);
	ssize_t got = read(fds[0], &res, sizeof res);
	close(fds[0]);
	int wst = 0;
	assert_int_equal(waitpid(pid, &wst, 0), pid);
	if (WIFSIGNALED(wst))
		print_message("# %s: the reader was killed by signal %d (%s)\n", path,
			      WTERMSIG(wst), strsignal(WTERMSIG(wst)));
	assert_false(WIFSIGNALED(wst));
	assert_int_equal(got, (ssize_t)sizeof res);
	*err = res.err;
	return res.rc;
}

/* The read of path fails with a one-line message that starts with the
 * path and contains phrase. */
static void expect_fail(int what, const char *path, const char *phrase)
{
	sp_err_t err;
	int rc = run_read(what, path, &err);

	print_message("# %s -> %s: %s\n", path, sp_err_name(rc), err.msg);
	assert_true(rc < 0);
	assert_int_equal(strncmp(err.msg, path, strlen(path)), 0);
	assert_null(strchr(err.msg, '\n'));
	if (strstr(err.msg, phrase) == NULL)
		print_message("# expected '%s' in the message\n", phrase);
	assert_non_null(strstr(err.msg, phrase));
}

static const char *real_psf(char *buf, size_t n)
{
	return shared_path(buf, n, "data/desi/psf-r0-00051060.fits");
}

/* A copy of the real PSF with one raw card replaced. */
static void psf_card(const char *name, const char *ext, const char *key, const char *val,
		     char *path, size_t n)
{
	char src[1024];
	tmp_path(path, n, name);
	assert_int_equal(craft_copy(real_psf(src, sizeof src), path), 0);
	assert_int_equal(craft_card(path, ext, key, val), 0);
}

/* The crash: CFITSIO converting a 30-digit LEGDEG (read as TINT) aborted
 * the process; now an error naming the HDU and keyword. */
static void test_crafted_psf_cards(void **state)
{
	(void)state;
	char path[600], longstr[80];

	/* 30 digits in any card: refused on the raw bytes, before CFITSIO
	 * sees the header (it converts some cards by itself, see fitskey.h) */
	psf_card("legdeg-digits.fits", "PSF", "LEGDEG", D30, path, sizeof path);
	expect_fail(READ_PSF, path,
		    "HDU 3, keyword LEGDEG: integer of 30 characters does not fit in 64 bits");
	/* numbers that pass that check: ours to parse and range-check */
	psf_card("legdeg-real.fits", "PSF", "LEGDEG", "1E30", path, sizeof path);
	expect_fail(READ_PSF, path, "PSF HDU, keyword LEGDEG: 1E30 is not an integer in 0..63");
	psf_card("legdeg-19.fits", "PSF", "LEGDEG", "1234567890123456789", path, sizeof path);
	expect_fail(READ_PSF, path,
		    "PSF HDU, keyword LEGDEG: 1234567890123456789 is not an integer in 0..63");
	psf_card("hsizex-string.fits", "PSF", "HSIZEX",
		 "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'", path,
		 sizeof path);
	expect_fail(READ_PSF, path, "keyword HSIZEX: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxx...' is not an integer in 0..32");
	psf_card("npixx-garbage.fits", "PSF", "NPIX_X", "12x4", path, sizeof path);
	expect_fail(READ_PSF, path, "keyword NPIX_X: 12x4 is not an integer in 1..100000");
	psf_card("wavemin-text.fits", "XTRACE", "WAVEMIN", "abc", path, sizeof path);
	expect_fail(READ_PSF, path, "XTRACE HDU, keyword WAVEMIN: abc is not a number");
	psf_card("wavemax-digits.fits", "YTRACE", "WAVEMAX", D30, path, sizeof path);
	expect_fail(READ_PSF, path, "HDU 2, keyword WAVEMAX: integer of 30 characters");
	psf_card("wavemax-real.fits", "YTRACE", "WAVEMAX", "1.0E30", path, sizeof path);
	expect_fail(READ_PSF, path, "YTRACE HDU, keyword WAVEMAX: 1.0E30 is not a number in 100..100000");
	psf_card("wavemin-nan.fits", "PSF", "WAVEMIN", "NaN", path, sizeof path);
	expect_fail(READ_PSF, path, "PSF HDU, keyword WAVEMIN: NaN is not a number");
	psf_card("psftype-number.fits", "PSF", "PSFTYPE", D30, path, sizeof path);
	expect_fail(READ_PSF, path, "HDU 3, keyword PSFTYPE: integer of 30 characters");
	psf_card("psftype-int.fits", "PSF", "PSFTYPE", "42", path, sizeof path);
	expect_fail(READ_PSF, path, "PSF HDU, keyword PSFTYPE: 42 is not a string");
	memset(longstr, '9', 70);
	longstr[70] = '\0';
	psf_card("ghdegy-70.fits", "PSF", "GHDEGY", longstr, path, sizeof path);
	expect_fail(READ_PSF, path, "HDU 3, keyword GHDEGY: integer of 70 characters");
	/* Structural cards CFITSIO parses itself at open: an error, never a
	 * crash, and the HDU is named rather than "missing". */
	psf_card("naxis1-digits.fits", "YTRACE", "NAXIS1", D30, path, sizeof path);
	expect_fail(READ_PSF, path, "HDU 2, keyword NAXIS1: integer of 30 characters");
	psf_card("bitpix-text.fits", "YTRACE", "BITPIX", "'abc'", path, sizeof path);
	expect_fail(READ_PSF, path, "HDU 2, keyword BITPIX: a string where an integer is required");
	psf_card("naxis2-real.fits", "YTRACE", "NAXIS2", "500.0", path, sizeof path);
	expect_fail(READ_PSF, path, "HDU 2, keyword NAXIS2: '500.0' is not a plain number");

	psf_card("tform-digits.fits", "PSF", "TFORM2", "'123456789012345678901234567890D'", path,
		 sizeof path);
	expect_fail(READ_PSF, path, "HDU 3 has a header CFITSIO cannot read");
	psf_card("tdim-digits.fits", "PSF", "TDIM2", "'(123456789012345678901234567890, 500)'",
		 path, sizeof path);
	expect_fail(READ_PSF, path, "PSF table, column COEFF");
}

/* A small image written by CFITSIO (IMAGE with CAMERA and RDNOISE, IVAR,
 * MASK, FIBERMAP). */
static void write_small_image(const char *path, int compress)
{
	fitsfile *f;
	int status = 0;
	long n2[2] = { 6, 4 };
	float pix[24], ivar[24];
	short mask[24] = { 0 };
	double rd = 2.5;

	for (int i = 0; i < 24; i++) {
		pix[i] = (float)i;
		ivar[i] = 1;
	}
	unlink(path);
	fits_create_diskfile(&f, path, &status);
	fits_create_img(f, FLOAT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "IMAGE", NULL, &status);
	fits_update_key(f, TSTRING, "CAMERA", "r0", NULL, &status);
	fits_update_key(f, TDOUBLE, "RDNOISE", &rd, NULL, &status);
	fits_write_img(f, TFLOAT, 1, 24, pix, &status);
	fits_create_img(f, FLOAT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "IVAR", NULL, &status);
	fits_write_img(f, TFLOAT, 1, 24, ivar, &status);
	if (compress)
		fits_set_compression_type(f, compress, &status);
	fits_create_img(f, SHORT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "MASK", NULL, &status);
	fits_write_img(f, TSHORT, 1, 24, mask, &status);
	fits_set_compression_type(f, 0, &status);
	char *ttype[] = { "FIBER" }, *tform[] = { "J" };
	fits_create_tbl(f, BINARY_TBL, 4, 1, ttype, tform, NULL, "FIBERMAP", &status);
	int fib[4] = { 0, 1, 2, 3 };
	fits_write_col(f, TINT, 1, 1, 1, 4, fib, &status);
	fits_close_file(f, &status);
	assert_int_equal(status, 0);
}

static void test_crafted_image_cards(void **state)
{
	(void)state;
	char good[600], path[600];
	sp_err_t err;

	tmp_path(good, sizeof good, "small.fits");
	write_small_image(good, 0);
	assert_int_equal(run_read(READ_IMAGE, good, &err), 0);

	tmp_path(path, sizeof path, "rdnoise-digits.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, NULL, "RDNOISE", D30), 0);
	expect_fail(READ_IMAGE, path, "HDU 1, keyword RDNOISE: integer of 30 characters");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, NULL, "RDNOISE", "1.5E7"), 0);
	expect_fail(READ_IMAGE, path, "primary HDU, keyword RDNOISE: 1.5E7 is not a number in 0..1e+06");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, NULL, "RDNOISE", "'2.5'"), 0);
	expect_fail(READ_IMAGE, path, "keyword RDNOISE: '2.5' is not a number");
	tmp_path(path, sizeof path, "camera-number.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, NULL, "CAMERA", D30), 0);
	expect_fail(READ_IMAGE, path, "HDU 1, keyword CAMERA: integer of 30 characters");
	tmp_path(path, sizeof path, "naxis2-digits.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "IVAR", "NAXIS2", D30), 0);
	expect_fail(READ_IMAGE, path, "HDU 2, keyword NAXIS2: integer of 30 characters");

	/* Tile compression: CFITSIO parses ZTILEn, ZVALn... itself, and its
	 * RICE decoder trusts the stream. */
	tmp_path(good, sizeof good, "small-rice.fits");
	write_small_image(good, RICE_1);
	assert_int_equal(run_read(READ_IMAGE, good, &err), 0);
	tmp_path(path, sizeof path, "zval1-digits.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZVAL1", D30), 0);
	expect_fail(READ_IMAGE, path, "HDU 3, keyword ZVAL1: integer of 30 characters");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZTILE1", "'6'"), 0);
	expect_fail(READ_IMAGE, path, "HDU 3, keyword ZTILE1: a string where an integer");
	/* CFITSIO divides by ZTILEn: SIGFPE (found by tests/fuzz/fuzz_fits.c) */
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZTILE2", "0"), 0);
	expect_fail(READ_IMAGE, path, "HDU 3: tile compression keyword ZTILE2 = 0 is out of range");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZVAL1", "0"), 0);
	expect_fail(READ_IMAGE, path, "HDU 3: tile compression keyword ZVAL1 = 0 is out of range");
	/* a real BLOCKSIZE: CFITSIO truncates .2 to the 0 it divides by
	 * (SIGFPE in imcomp_calc_max_elem, found by CI's tests/fuzz/fuzz_fits.c
	 * on 2026-11-26) */
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZVAL1", ".2"), 0);
	expect_fail(READ_IMAGE, path, "HDU 3: tile compression keyword ZVAL1 = 0 is out of range");
	/* A complex-looking value in a card CFITSIO converts to an integer:
	 * its conversion message overflows (found by tests/fuzz/fuzz_fits.c) */
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZVAL2", "(                 2"), 0);
	expect_fail(READ_IMAGE, path, "HDU 3, keyword ZVAL2: '(                 2' is not a plain");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZVAL2",
				    "(1111111111111111111111111111111111111111, 2)"), 0);
	expect_fail(READ_IMAGE, path, "HDU 3, keyword ZVAL2: '(111111111111111111");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "IVAR", "PCOUNT", "(1111111111111111111111111111, 2)"), 0);
	expect_fail(READ_IMAGE, path, "HDU 2, keyword PCOUNT: '(111111111111111111");
	/* '=' without the blank after it: CFITSIO takes the card as valued
	 * and, with ZTILE2 = 12 before it, divides by zero (found by
	 * tests/fuzz/fuzz_fits.c) */
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZTILE1", "12"), 0);
	assert_int_equal(craft_card_raw(path, "MASK", "ZTILE1", "ZTILE2  = 12"), 0);
	assert_int_equal(craft_card_raw(path, "MASK", "ZTILE2", "ZTILE2  =;                   1"), 0);
	expect_fail(READ_IMAGE, path, "HDU 3, keyword ZTILE2: malformed value");
	/* An END card CFITSIO accepts and the FITS standard does not ("END"
	 * then NULs): the pre-scan must not read on into the data while
	 * CFITSIO parses the header (found by tests/fuzz/fuzz_fits.c with
	 * ZTILE2 = 0 before it: SIGFPE) */
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZTILE2", "0"), 0);
	char endnul[80] = "END "; /* then 76 NULs */
	assert_int_equal(craft_card_bytes(path, "MASK", "END", endnul), 0);
	expect_fail(READ_IMAGE, path, "HDU 3: malformed END card");
	/* ZIMAGE = T followed by junk: CFITSIO reads it as true, the
	 * pre-scan took the HDU for an uncompressed one and skipped the checks
	 * (found by tests/fuzz/fuzz_fits.c in the 10^7 run: SIGFPE) */
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_card(path, "MASK", "ZTILE2", "0"), 0);
	assert_int_equal(craft_card_raw(path, "MASK", "ZIMAGE",
					"ZIMAGE  =                    T$/ extension contains compressed image"),
			 0);
	expect_fail(READ_IMAGE, path, "HDU 3: tile compression keyword ZTILE2 = 0 is out of range");
	tmp_path(path, sizeof path, "rice-garbled.fits");
	assert_int_equal(craft_copy(good, path), 0);
	assert_int_equal(craft_garble_tile(path, "MASK"), 0);
	expect_fail(READ_IMAGE, path, "HDU 3: RICE-compressed tile 1 is corrupt");
	tmp_path(path, sizeof path, "plio.fits");
	write_small_image(path, PLIO_1);
	expect_fail(READ_IMAGE, path, "HDU 3: tile compression 'PLIO_1' is not supported");
	tmp_path(path, sizeof path, "gzip.fits");
	write_small_image(path, GZIP_2);
	assert_int_equal(run_read(READ_IMAGE, path, &err), 0);
}

/* ------------------------------------------- names are only names */

static void test_extended_names(void **state)
{
	(void)state;
	char src[1024], path[2048], target[600], img[600];
	struct stat st;

	real_psf(src, sizeof src);
	tmp_path(target, sizeof target, "copied-here.fits");
	/* CFITSIO's syntax: "in(out)" copies in to out, "[1]" picks an HDU. */
	snprintf(path, sizeof path, "%s(%s)", src, target);
	expect_fail(READ_PSF, path, "no such file");
	assert_int_equal(stat(target, &st), -1);
	snprintf(path, sizeof path, "%s[1]", src);
	expect_fail(READ_PSF, path, "no such file");
	snprintf(path, sizeof path, "%s[PSF][col COEFF]", src);
	expect_fail(READ_PSF, path, "no such file");
	tmp_path(img, sizeof img, "named.fits");
	write_small_image(img, 0);
	snprintf(path, sizeof path, "%s(%s)", img, target);
	expect_fail(READ_IMAGE, path, "no such file");
	assert_int_equal(stat(target, &st), -1);
	snprintf(path, sizeof path, "%s[IMAGE]", img);
	expect_fail(READ_IMAGE, path, "no such file");
	/* A real file whose name has CFITSIO's characters is read as is. */
	tmp_path(path, sizeof path, "odd[1](x).fits");
	assert_int_equal(craft_copy(src, path), 0);
	sp_err_t err;
	int rc = run_read(READ_PSF, path, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
}

static void test_fifo(void **state)
{
	(void)state;
	char path[600];

	tmp_path(path, sizeof path, "psf.fifo");
	assert_int_equal(mkfifo(path, 0600), 0);
	expect_fail(READ_PSF, path, "is a FIFO");
	expect_fail(READ_IMAGE, path, "is a FIFO");
	expect_fail(READ_IMAGE, "/dev/null", "is a character device");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_value_text),
		cmocka_unit_test(test_parse_numbers),
		cmocka_unit_test(test_crafted_psf_cards),
		cmocka_unit_test(test_crafted_image_cards),
		cmocka_unit_test(test_extended_names),
		cmocka_unit_test(test_fifo),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
