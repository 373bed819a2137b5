/* Unit tests of the DESI extraction plan against the reference patch's geometry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fitsio.h>

#include "../codelets/desi/plan.h"

static char ref_path[4096];

/* Reads HDU `name` of the reference patch as a C-order array of type `type`
 * (TDOUBLE, TINT); returns its element count. */
static long read_hdu(const char *name, int type, void *out, long max)
{
	fitsfile *f = NULL;
	int st = 0, naxis = 0, anynul = 0;
	long dims[4] = { 1, 1, 1, 1 }, n = 1;

	fits_open_file(&f, ref_path, READONLY, &st);
	fits_movnam_hdu(f, ANY_HDU, (char *)name, 0, &st);
	fits_get_img_dim(f, &naxis, &st);
	fits_get_img_size(f, 4, dims, &st);
	for (int i = 0; i < naxis; i++)
		n *= dims[i];
	assert_true(n <= max);
	fits_read_img(f, type, 1, n, NULL, out, &anynul, &st);
	fits_close_file(f, &st);
	if (st != 0) {
		char msg[FLEN_STATUS];
		fits_get_errstatus(st, msg);
		fail_msg("%s[%s]: %s", ref_path, name, msg);
	}
	return n;
}

static long read_key(const char *key)
{
	fitsfile *f = NULL;
	int st = 0;
	long v = 0;
	fits_open_file(&f, ref_path, READONLY, &st);
	fits_read_key(f, TLONG, key, &v, NULL, &st);
	fits_close_file(f, &st);
	assert_int_equal(st, 0);
	return v;
}

static desi_plan_t r_plan(void)
{
	desi_plan_t p;
	char msg[128];
	/* desispec's r grid and gpu_specter's defaults. */
	assert_int_equal(desi_plan_init(&p, 5760, 7620, 0.8, 0, 500, 25, 5, 50, 10, 0.2, 0.8, msg,
					sizeof msg), 0);
	return p;
}

/* The grid, the padding and the patch count of an r frame. */
static void test_grid(void **state)
{
	(void)state;
	desi_plan_t p = r_plan();
	static double fw[4096];
	assert_int_equal(p.nwave, 2326);
	assert_int_equal(p.wavepad, 12);
	assert_int_equal(p.nfullwave, 2400);
	assert_int_equal(p.nbundles, 20);
	assert_int_equal(p.npatch_wave, 47);
	/* FULLWAVE is the reference's padded axis; tolerance: accumulated
	 * rounding of its arange (1e-9 A). */
	long n = read_hdu("FULLWAVE", TDOUBLE, fw, 4096);
	assert_int_equal(n, p.nfullwave);
	double worst = 0;
	for (long i = 0; i < n; i++) {
		double d = fabs(desi_plan_fullwave(&p, (int)i) - fw[i]);
		worst = d > worst ? d : worst;
	}
	if (worst > 1e-9)
		fail_msg("padded wavelengths differ from FULLWAVE by %g A", worst);
}

/* Subbundles: the reference patch is subbundle 1 of bundle 0: fibres 4..10
 * of the bundle, core 5..9. */
static void test_subbundles(void **state)
{
	(void)state;
	desi_plan_t p = r_plan();
	int c0, nc, f0, nf, covered = 0;
	desi_plan_subbundle(&p, 25, 1, &c0, &nc, &f0, &nf);
	assert_int_equal(f0, read_key("SPECMIN_"));
	assert_int_equal(nf, read_key("NSPECPAD"));
	assert_int_equal(c0, 5);
	assert_int_equal(nc, 5);
	/* Subbundles tile the bundle, edge patches have 6 fibres. */
	for (int k = 0; k < 5; k++) {
		desi_plan_subbundle(&p, 25, k, &c0, &nc, &f0, &nf);
		assert_int_equal(c0, covered);
		covered += nc;
		assert_int_equal(nf, (k == 0 || k == 4) ? 6 : 7);
	}
	assert_int_equal(covered, 25);
	/* An uneven last bundle: 23 spectra. */
	desi_plan_t q;
	char msg[128];
	assert_int_equal(desi_plan_init(&q, 5760, 7620, 0.8, 0, 48, 25, 5, 50, 10, 0.2, 0.8, msg,
					sizeof msg), 0);
	int s0, ns;
	desi_plan_bundle(&q, 1, &s0, &ns);
	assert_int_equal(s0, 25);
	assert_int_equal(ns, 23);
	covered = 0;
	for (int k = 0; k < 5; k++) {
		desi_plan_subbundle(&q, ns, k, &c0, &nc, &f0, &nf);
		assert_int_equal(c0, covered);
		covered += nc;
	}
	assert_int_equal(covered, 23);
}

/* The pixel window from the reference spots' corners equals the reference's. */
static void test_window(void **state)
{
	(void)state;
	desi_plan_t p = r_plan();
	static int32_t xc[7 * 74], yc[7 * 74];
	int ymin, ny, xmin, nx;
	assert_int_equal(read_hdu("XC", TINT, xc, 7 * 74), 7 * 74);
	assert_int_equal(read_hdu("YC", TINT, yc, 7 * 74), 7 * 74);
	desi_plan_window(&p, xc, yc, 7, 74, 12, 50, 11, 17, 4128, 4114, &ymin, &ny, &xmin, &nx);
	assert_int_equal(ymin, read_key("YMIN"));
	assert_int_equal(ny, read_key("NY"));
	assert_int_equal(xmin, read_key("XMIN"));
	assert_int_equal(nx, read_key("NX"));
	/* Clipping at the CCD edge. */
	desi_plan_window(&p, xc, yc, 7, 74, 12, 50, 11, 17, 700, 150, &ymin, &ny, &xmin, &nx);
	assert_int_equal(ymin + ny, 700);
	assert_int_equal(xmin + nx, 150);
}

static void test_bad(void **state)
{
	(void)state;
	desi_plan_t p;
	char msg[128];
	assert_int_equal(desi_plan_init(&p, 7620, 5760, 0.8, 0, 500, 25, 5, 50, 10, 0.2, 0.8, msg,
					sizeof msg), -1);
	assert_non_null(strstr(msg, "wavelength grid"));
	assert_int_equal(desi_plan_init(&p, 5760, 7620, 0.8, 0, 500, 25, 30, 50, 10, 0.2, 0.8, msg,
					sizeof msg), -1);
}

/* The largest patch a plan may make (plan.h): gpu_specter's 7 x 74 is far
 * inside; nwavestep 500 is the most with 7 fibres a patch (0.70 s of
 * decorrelation measured, 1.18 s at 600), 626 with 3; the 10000
 * (a SIGSEGV: 4.9e9 doubles counted in 32 bits) is refused naming it. */
static void test_patch_limit(void **state)
{
	char msg[320];
	int n;
	(void)state;
	assert_int_equal(desi_plan_check_patch(500, 25, 5, 50, 10, 0.2, &n, msg, sizeof msg), 0);
	assert_int_equal(n, 7 * 74);
	assert_int_equal(desi_plan_check_patch(500, 25, 5, 500, 10, 0.2, &n, msg, sizeof msg), 0);
	assert_int_equal(n, 7 * 524);
	assert_int_equal(desi_plan_check_patch(500, 25, 5, 501, 10, 0.2, &n, msg, sizeof msg), -1);
	assert_string_equal(msg, "nwavestep 501 makes a patch of 7 x 525 = 3675 unknowns (at most "
				 "7 x 524 = 3668: its decorrelation would take more than about 1 s on "
				 "one core; lower nwavestep or raise nsubbundles)");
	assert_int_equal(desi_plan_check_patch(25, 25, 5, 10000, 10, 0.2, &n, msg, sizeof msg), -1);
	assert_int_equal(n, 70168);
	assert_non_null(strstr(msg, "nwavestep 10000 makes a patch of 7 x 10024 = 70168 unknowns"));
	/* 3-fibre patches (a fibre per subbundle) may be longer, up to 650
	 * padded wavelengths (0.40 s measured at 600, 0.85 s at 700) */
	assert_int_equal(desi_plan_check_patch(500, 25, 25, 626, 10, 0.2, &n, msg, sizeof msg), 0);
	assert_int_equal(desi_plan_check_patch(500, 25, 25, 627, 10, 0.2, &n, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "(at most 3 x 650 = 1950: its decorrelation"));
	/* the unknowns' bound (the normal matrix), whatever the flops */
	assert_int_equal(desi_plan_check_patch(500, 500, 1, 50, 10, 0.2, &n, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "bundlesize 500 and nsubbundles 1 make patches of 500 fibres"));
	assert_non_null(strstr(msg, "128 MiB"));
	/* the padding alone */
	assert_int_equal(desi_plan_check_patch(500, 25, 5, 1, 1000, 10, &n, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "wavepad 1000 (wavepad_frac 10: 11000 padding wavelengths"));
	/* an invalid decomposition is desi_plan_init()'s to refuse */
	assert_int_equal(desi_plan_check_patch(500, 25, 30, 50, 10, 0.2, &n, msg, sizeof msg), 0);
}

int main(void)
{
	const char *sh = getenv("SP_SHARED");
	snprintf(ref_path, sizeof ref_path, "%s/data/desi/ref_patch.fits", sh ? sh : "../shared");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grid),
		cmocka_unit_test(test_subbundles),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_bad),
		cmocka_unit_test(test_patch_limit),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
