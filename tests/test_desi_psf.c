/* Unit tests of the DESI GaussHermite PSF: the reader, evaluation against the reference, spot properties, bad files. */
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
#include <unistd.h>

#include <cmocka.h>

#include "cpuisa.h"
#include "testutil.h"
#include <fitsio.h>

#include "../codelets/desi/psf.h"
#include "desi_craft.h"

/*
 * Tolerances (the reference is gpu_specter's CPU path, ref_psf_eval.fits):
 * - X, Y: 1e-12 px.  We evaluate the traces as NumPy's legval does, and
 *   expect them bit for bit.
 * - GHSIGX, GHSIGY, GH-i-j: 1e-12 * max(1, |ref|).  The reference sums
 *   legvander . coeff with BLAS, in an order we cannot know: ~1e-16 off.
 * - Spots: 1e-12 absolute per pixel (glibc's erf is not scipy's; ~1e-16).
 * - Corners: exact.
 * - Properties, on both real PSFs: every pixel >= 0 and finite, the sum 1
 *   to 1e-12, the centroid within 0.7 px of (X, Y); and the fast kernel
 *   equal to the obvious per-pixel formula to 1e-14 absolute.
 * The measured maxima are printed as TAP comments.
 */

static const char *shared_dir(void)
{
	const char *d = getenv("SP_SHARED");
	return d != NULL && *d ? d : "../shared";
}

static void data_path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/data/desi/%s", shared_dir(), name);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n > 0 ? n : 1);
	assert_non_null(p);
	return p;
}

static desi_psf_t *load_psf(const char *name)
{
	char path[1024];
	desi_psf_t *psf = NULL;
	sp_err_t err = { 0, "" };
	data_path(path, sizeof path, name);
	int rc = desi_psf_read(path, &psf, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
	assert_non_null(psf);
	return psf;
}

/* The obvious spot: every pixel from its own edges, GH sum as the
 * reference's multispot (i outer, j inner); clip; normalise. */
static double he(int m, double u)
{
	double a = 1.0, b = u;
	if (m == 0)
		return 1.0;
	for (int k = 2; k <= m; k++) {
		double c = u * b - (double)(k - 1) * a;
		a = b;
		b = c;
	}
	return b;
}

static double pix1d(int m, int p, int n, double c, double sigma)
{
	double d = fmod(c + 0.5, 1.0);
	d = (d < 0 ? d + 1.0 : d) - 0.5;
	double a = ((double)(p - n / 2) - 0.5 - d) / sigma;
	double b = ((double)(p + 1 - n / 2) - 0.5 - d) / sigma;
	double r2pi = sqrt(2 * 3.14159265358979323846);
	if (m == 0)
		return 0.5 * (erf(b / sqrt(2.0)) - erf(a / sqrt(2.0)));
	return he(m - 1, a) * exp(-0.5 * a * a) / r2pi - he(m - 1, b) * exp(-0.5 * b * b) / r2pi;
}

static void slow_spot(const double *p, desi_spot_shape_t s, double *spot)
{
	int nx = 2 * s.hsizex + 1, ny = 2 * s.hsizey + 1;
	double sum = 0;
	for (int iy = 0; iy < ny; iy++)
		for (int ix = 0; ix < nx; ix++) {
			double v = 0;
			for (int i = 0; i <= s.ghdegx; i++)
				for (int j = 0; j <= s.ghdegy; j++)
					v += p[4 + i * (s.ghdegy + 1) + j] *
					     pix1d(j, iy, ny, p[1], p[3]) *
					     pix1d(i, ix, nx, p[0], p[2]);
			spot[iy * nx + ix] = v > 0 ? v : 0;
			sum += spot[iy * nx + ix];
		}
	for (int k = 0; k < nx * ny; k++)
		spot[k] /= sum;
}

/* One image HDU of the reference file, as a C-order array. */
static void ref_read(fitsfile *fp, const char *ext, int type, long n, void *buf)
{
	int status = 0, naxis;
	long naxes[4], total = 1;
	char name[32];
	snprintf(name, sizeof name, "%s", ext);
	fits_movnam_hdu(fp, IMAGE_HDU, name, 0, &status);
	fits_get_img_dim(fp, &naxis, &status);
	assert_true(naxis >= 1 && naxis <= 4);
	fits_get_img_size(fp, naxis, naxes, &status);
	for (int k = 0; k < naxis; k++)
		total *= naxes[k];
	if (status != 0 || total != n)
		print_message("# %s: status %d, %ld values (expected %ld)\n", ext, status,
			      total, n);
	assert_int_equal(status, 0);
	assert_int_equal(total, n);
	fits_read_img(fp, type, 1, n, NULL, buf, NULL, &status);
	assert_int_equal(status, 0);
}

enum { NF = 6, NW = 7, NG = 7, SY = 11, SX = 17 };

static double maxrel(double a, double ref)
{
	return fabs(a - ref) / fmax(1.0, fabs(ref));
}

static void test_reference(void **state)
{
	(void)state;
	char path[1024];
	fitsfile *fp;
	int status = 0, fib[NF], rxc[NF * NW], ryc[NF * NW];
	double waves[NW], *X = xmalloc(NF * NW * sizeof *X), *Y = xmalloc(NF * NW * sizeof *Y);
	double *SX_ = xmalloc(NF * NW * sizeof(double)), *SY_ = xmalloc(NF * NW * sizeof(double));
	double *GH = xmalloc((size_t)NF * NG * NG * NW * sizeof *GH);
	double *SP = xmalloc((size_t)NF * NW * SY * SX * sizeof *SP);

	data_path(path, sizeof path, "ref_psf_eval.fits");
	fits_open_file(&fp, path, READONLY, &status);
	if (status != 0)
		print_message("# cannot open %s (CFITSIO status %d)\n", path, status);
	assert_int_equal(status, 0);
	ref_read(fp, "FIBERS", TINT, NF, fib);
	ref_read(fp, "WAVES", TDOUBLE, NW, waves);
	ref_read(fp, "X", TDOUBLE, NF * NW, X);
	ref_read(fp, "Y", TDOUBLE, NF * NW, Y);
	ref_read(fp, "GHSIGX", TDOUBLE, NF * NW, SX_);
	ref_read(fp, "GHSIGY", TDOUBLE, NF * NW, SY_);
	ref_read(fp, "GH", TDOUBLE, NF * NG * NG * NW, GH); /* [f][i][j][w] */
	ref_read(fp, "SPOTS", TDOUBLE, NF * NW * SY * SX, SP);
	ref_read(fp, "XC", TINT, NF * NW, rxc);
	ref_read(fp, "YC", TINT, NF * NW, ryc);
	fits_close_file(fp, &status);

	desi_psf_t *psf = load_psf("psf-r0-00051060.fits");
	assert_int_equal(psf->nfib, 500);
	assert_int_equal(psf->ncoef, 4);
	assert_int_equal(psf->ncx, 7);
	assert_int_equal(psf->hsizex, 8);
	assert_int_equal(psf->hsizey, 5);
	assert_int_equal(psf->ghdegx, 6);
	assert_int_equal(psf->ghdegy, 6);
	assert_int_equal(psf->npix_x, 4114);
	assert_int_equal(psf->npix_y, 4128);
	assert_true(psf->psferr == 0.01);
	assert_int_equal(desi_psf_nparams(psf), 4 + NG * NG);

	int np = desi_psf_nparams(psf);
	double *par = xmalloc((size_t)NF * NW * np * sizeof *par);
	double *spots = xmalloc((size_t)NF * NW * SY * SX * sizeof *spots);
	int32_t xc[NF * NW], yc[NF * NW];
	for (int a = 0; a < NF; a++)
		desi_psf_params(psf, fib[a], 1, waves, NW, par + (size_t)a * NW * np);
	desi_spots_cpu(par, NF * NW, desi_psf_shape(psf), spots, xc, yc);

	double dxy = 0, dsig = 0, dgh = 0, dspot = 0;
	int badc = 0;
	for (int a = 0; a < NF; a++)
		for (int b = 0; b < NW; b++) {
			int s = a * NW + b;
			const double *p = par + (size_t)s * np;
			double x, y;
			desi_psf_xy(psf, fib[a], waves[b], &x, &y);
			assert_true(x == p[0] && y == p[1]);
			dxy = fmax(dxy, fmax(fabs(p[0] - X[s]), fabs(p[1] - Y[s])));
			dsig = fmax(dsig, fmax(maxrel(p[2], SX_[s]), maxrel(p[3], SY_[s])));
			for (int i = 0; i < NG; i++)
				for (int j = 0; j < NG; j++)
					dgh = fmax(dgh, maxrel(p[4 + i * NG + j],
							       GH[((a * NG + i) * NG + j) * NW + b]));
			for (int k = 0; k < SY * SX; k++)
				dspot = fmax(dspot, fabs(spots[(size_t)s * SY * SX + k] -
							 SP[(size_t)s * SY * SX + k]));
			badc += xc[s] != rxc[s] || yc[s] != ryc[s];
		}
	print_message("# reference (6 fibres x 7 waves): max |dX|,|dY| = %.3g px, "
		      "GHSIG rel %.3g, GH rel %.3g, spots abs %.3g, %d corners differ\n",
		      dxy, dsig, dgh, dspot, badc);
	assert_true(dxy <= 1e-12);
	assert_true(dsig <= 1e-12);
	assert_true(dgh <= 1e-12);
	assert_true(dspot <= 1e-12);
	assert_int_equal(badc, 0);

	desi_psf_free(&psf);
	assert_null(psf);
	desi_psf_free(&psf); /* twice: a no-op */
	free(X);
	free(Y);
	free(SX_);
	free(SY_);
	free(GH);
	free(SP);
	free(par);
	free(spots);
}

/* Non-negative, sum 1, centroid near (X, Y), equal to the slow formula. */
static void check_properties(const char *name)
{
	desi_psf_t *psf = load_psf(name);
	desi_spot_shape_t sh = desi_psf_shape(psf);
	int np = desi_psf_nparams(psf), nx = 2 * sh.hsizex + 1, ny = 2 * sh.hsizey + 1;
	enum { NWV = 97 };
	double waves[NWV];
	int fibres[80], nfb = 0;

	for (int f = 0; f < psf->nfib; f += 7)
		fibres[nfb++] = f;
	fibres[nfb++] = psf->nfib - 1;
	for (int w = 0; w < NWV; w++)
		waves[w] = psf->wmin + (psf->wmax - psf->wmin) * w / (NWV - 1);
	size_t n = (size_t)nfb * NWV;
	double *par = xmalloc(n * np * sizeof *par);
	double *spots = xmalloc(n * nx * ny * sizeof *spots), slow[65 * 65];
	int32_t *xc = xmalloc(n * sizeof *xc), *yc = xmalloc(n * sizeof *yc);
	for (int a = 0; a < nfb; a++)
		desi_psf_params(psf, fibres[a], 1, waves, NWV, par + (size_t)a * NWV * np);
	desi_spots_cpu(par, n, sh, spots, xc, yc);

	double dsum = 0, dcen = 0, dslow = 0, minv = INFINITY;
	for (size_t s = 0; s < n; s++) {
		const double *p = par + s * np, *sp = spots + s * nx * ny;
		double sum = 0, cx = 0, cy = 0;
		for (int iy = 0; iy < ny; iy++)
			for (int ix = 0; ix < nx; ix++) {
				double v = sp[iy * nx + ix];
				assert_true(isfinite(v));
				minv = fmin(minv, v);
				sum += v;
				cx += v * (xc[s] + ix);
				cy += v * (yc[s] + iy);
			}
		dsum = fmax(dsum, fabs(sum - 1));
		dcen = fmax(dcen, fmax(fabs(cx - p[0]), fabs(cy - p[1])));
		if (s % 7 == 0) { /* the slow formula on a seventh of them */
			slow_spot(p, sh, slow);
			for (int k = 0; k < nx * ny; k++)
				dslow = fmax(dslow, fabs(slow[k] - sp[k]));
		}
	}
	print_message("# %s: %zu spots, min pixel %.3g, max |sum - 1| %.3g, max centroid "
		      "offset %.3f px, max |fast - slow| %.3g\n",
		      name, n, minv, dsum, dcen, dslow);
	assert_true(minv >= 0);
	assert_true(dsum <= 1e-12);
	assert_true(dcen <= 0.7);
	assert_true(dslow <= 1e-14);
	/* every SIMD variant gives these spots to the bit, and a shape that
	 * is not DESI's (the general contraction: odd widths, other degrees)
	 * too */
	double *sp2 = xmalloc(n * nx * ny * sizeof *sp2);
	int32_t *xc2 = xmalloc(n * sizeof *xc2), *yc2 = xmalloc(n * sizeof *yc2);
	desi_spot_shape_t odd = sh;
	odd.hsizex = sh.hsizex - 1;
	odd.ghdegy = sh.ghdegy > 0 ? sh.ghdegy - 1 : 0;
	const int nxo = 2 * odd.hsizex + 1, nyo = 2 * odd.hsizey + 1;
	double *so = xmalloc(n * nxo * nyo * sizeof *so), *so2 = xmalloc(n * nxo * nyo * sizeof *so2);
	desi_spots_cpu_isa(SP_ISA_BASELINE, par, n, odd, so, xc2, yc2);
	for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
		if (!sp_isa_supported(isa))
			continue;
		desi_spots_cpu_isa(isa, par, n, sh, sp2, xc2, yc2);
		assert_memory_equal(sp2, spots, n * nx * ny * sizeof *sp2);
		assert_memory_equal(xc2, xc, n * sizeof *xc);
		assert_memory_equal(yc2, yc, n * sizeof *yc);
		desi_spots_cpu_isa(isa, par, n, odd, so2, xc2, yc2);
		assert_memory_equal(so2, so, n * nxo * nyo * sizeof *so2);
	}
	free(sp2);
	free(xc2);
	free(yc2);
	free(so);
	free(so2);
	free(par);
	free(spots);
	free(xc);
	free(yc);
	desi_psf_free(&psf);
}

static void test_properties_51060(void **state)
{
	(void)state;
	check_properties("psf-r0-00051060.fits");
}

static void test_properties_67784(void **state)
{
	(void)state;
	check_properties("psf-r0-00067784.fits");
}

/* The camera's arm grid (desi_proc's), kept inside the PSF's domain; an
 * unknown camera, or an arm the PSF does not cover, takes the PSF's range. */
static void test_default_grid(void **state)
{
	(void)state;
	double lo, hi, a, b, wa, wb;
	assert_int_equal(desi_camera_arm("b3", &lo, &hi), 1);
	assert_true(lo == 3600 && hi == 5800);
	assert_int_equal(desi_camera_arm("'r0      '", &lo, &hi), 1); /* specex's CAMERA */
	assert_true(lo == 5760 && hi == 7620);
	assert_int_equal(desi_camera_arm("Z9", &lo, &hi), 1);
	assert_true(lo == 7520 && hi == 9824);
	assert_int_equal(desi_camera_arm("r", &lo, &hi), 0);
	assert_int_equal(desi_camera_arm("x1", &lo, &hi), 0);
	assert_int_equal(desi_camera_arm("r10", &lo, &hi), 0);
	assert_int_equal(desi_camera_arm(NULL, &lo, &hi), 0);

	desi_psf_t *psf = load_psf("psf-r0-00051060.fits");
	assert_int_equal(desi_psf_wave_range(psf, &wa, &wb), 0);
	a = b = 0;
	assert_int_equal(desi_psf_default_grid(psf, "r0", 0.8, &a, &b), 0);
	assert_true(a == 5760 && b == 7620);
	a = b = 0; /* no camera: desispec's ceil(wmin_all) .. floor(wmax_all) */
	assert_int_equal(desi_psf_default_grid(psf, "", 0.8, &a, &b), 0);
	assert_true(a == ceil(wa) && b == floor(wb));
	a = b = 0; /* a b camera on an r PSF: less than half its arm covered */
	assert_int_equal(desi_psf_default_grid(psf, "b0", 0.8, &a, &b), 0);
	assert_true(a == ceil(wa) && b == floor(wb));
	a = 6000, b = 0; /* a given end is kept */
	assert_int_equal(desi_psf_default_grid(psf, "r0", 0.8, &a, &b), 0);
	assert_true(a == 6000 && b == 7620);
	/* the domain cut short: the grid ends on the arm's last point inside it */
	psf->wmax = psf->xwmax = psf->ywmax = 6999.9;
	a = b = 0;
	assert_int_equal(desi_psf_default_grid(psf, "r0", 0.8, &a, &b), 0);
	assert_true(a == 5760 && fabs(b - 6998.4) < 1e-9);
	/* a z PSF covering its whole arm: desi_proc's 7520 .. 9824 */
	psf->wmin = psf->xwmin = psf->ywmin = 7400;
	psf->wmax = psf->xwmax = psf->ywmax = 9900;
	a = b = 0;
	assert_int_equal(desi_psf_default_grid(psf, "z1", 0.8, &a, &b), 0);
	assert_true(a == 7520 && b == 9824);
	desi_psf_free(&psf);
}

/* ------------------------------------------------------------ bad files */

static int setup(void **state)
{
	(void)state;
	return tmpdir_make("test_desi_psf");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove();
}

/* desi_psf_read must fail on path with code (0: any) and a message that
 * starts with the path and contains want. */
static void expect_error(const char *path, int code, const char *want)
{
	desi_psf_t *psf = (desi_psf_t *)&psf; /* must be cleared */
	sp_err_t err = { 0, "" };
	int rc = desi_psf_read(path, &psf, &err);
	print_message("# rc %s: %s\n", sp_err_name(rc), err.msg);
	assert_true(rc < 0);
	assert_int_equal(err.code, rc);
	if (code != 0)
		assert_int_equal(rc, code);
	assert_null(psf);
	assert_int_equal(strncmp(err.msg, path, strlen(path)), 0);
	assert_true(strncmp(err.msg + strlen(path), ": ", 2) == 0);
	assert_null(strchr(err.msg, '\n'));
	if (want != NULL && strstr(err.msg, want) == NULL)
		print_message("# expected '%s' in the message\n", want);
	if (want != NULL)
		assert_non_null(strstr(err.msg, want));
}

/* A writable copy of the real PSF, left at its HDU extname (or open at
 * the primary when extname is NULL). */
static fitsfile *copy_psf(const char *dst, const char *extname)
{
	char src[1024], out[700];
	fitsfile *in, *fp;
	int status = 0;
	data_path(src, sizeof src, "psf-r0-00051060.fits");
	snprintf(out, sizeof out, "!%s", dst);
	fits_open_file(&in, src, READONLY, &status);
	fits_create_file(&fp, out, &status);
	fits_copy_file(in, fp, 1, 1, 1, &status);
	fits_close_file(in, &status);
	if (extname != NULL)
		fits_movnam_hdu(fp, ANY_HDU, (char *)extname, 0, &status);
	assert_int_equal(status, 0);
	return fp;
}

static void close_fits(fitsfile *fp)
{
	int status = 0;
	fits_close_file(fp, &status);
	assert_int_equal(status, 0);
}

static void test_missing_file(void **state)
{
	(void)state;
	char path[600];
	snprintf(path, sizeof path, "%s/no-such-psf.fits", tmpdir);
	expect_error(path, SP_ENOENT, NULL);
}

static void test_not_fits(void **state)
{
	(void)state;
	char path[600];
	snprintf(path, sizeof path, "%s/not-fits.fits", tmpdir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("this is not a FITS file\n", f);
	fclose(f);
	expect_error(path, 0, NULL);
}

static void test_no_psf_hdu(void **state)
{
	(void)state;
	char src[1024], path[600], out[700];
	fitsfile *in, *fp;
	int status = 0;
	data_path(src, sizeof src, "psf-r0-00051060.fits");
	snprintf(path, sizeof path, "%s/no-psf-hdu.fits", tmpdir);
	snprintf(out, sizeof out, "!%s", path);
	fits_open_file(&in, src, READONLY, &status);
	fits_create_file(&fp, out, &status);
	fits_copy_hdu(in, fp, 0, &status); /* XTRACE */
	fits_movabs_hdu(in, 2, NULL, &status);
	fits_copy_hdu(in, fp, 0, &status); /* YTRACE */
	fits_close_file(in, &status);
	assert_int_equal(status, 0);
	close_fits(fp);
	expect_error(path, SP_EFORMAT, "no PSF HDU");
}

static void test_other_type(void **state)
{
	(void)state;
	char path[600];
	int status = 0;
	snprintf(path, sizeof path, "%s/spotgrid.fits", tmpdir);
	fitsfile *fp = copy_psf(path, "PSF");
	fits_update_key(fp, TSTRING, "PSFTYPE", "SPOTGRID", NULL, &status);
	assert_int_equal(status, 0);
	close_fits(fp);
	expect_error(path, SP_EFORMAT, "PSFTYPE is 'SPOTGRID'");
}

static void test_missing_param(void **state)
{
	(void)state;
	char path[600];
	int status = 0, col;
	long nrows;
	snprintf(path, sizeof path, "%s/no-gh-3-4.fits", tmpdir);
	fitsfile *fp = copy_psf(path, "PSF");
	fits_get_num_rows(fp, &nrows, &status);
	fits_get_colnum(fp, CASEINSEN, "PARAM", &col, &status);
	for (long r = 1; r <= nrows && status == 0; r++) {
		char name[16], *np = name;
		fits_read_col(fp, TSTRING, col, r, 1, 1, NULL, &np, NULL, &status);
		if (strcmp(name, "GH-3-4") == 0) {
			fits_delete_rows(fp, r, 1, &status);
			break;
		}
	}
	assert_int_equal(status, 0);
	close_fits(fp);
	expect_error(path, SP_EFORMAT, "no GH-3-4 parameter");
}

static void test_missing_key(void **state)
{
	(void)state;
	char path[600];
	int status = 0;
	snprintf(path, sizeof path, "%s/no-hsizex.fits", tmpdir);
	fitsfile *fp = copy_psf(path, "PSF");
	fits_delete_key(fp, "HSIZEX", &status);
	assert_int_equal(status, 0);
	close_fits(fp);
	expect_error(path, SP_EFORMAT, "PSF HDU has no HSIZEX keyword");

	snprintf(path, sizeof path, "%s/no-wavemin.fits", tmpdir);
	fp = copy_psf(path, "YTRACE");
	fits_delete_key(fp, "WAVEMIN", &status);
	assert_int_equal(status, 0);
	close_fits(fp);
	expect_error(path, SP_EFORMAT, "YTRACE HDU has no WAVEMIN keyword");
}

static void test_bad_layout(void **state)
{
	(void)state;
	char path[600];
	int status = 0, v = 5;
	snprintf(path, sizeof path, "%s/legdeg5.fits", tmpdir);
	fitsfile *fp = copy_psf(path, "PSF");
	fits_update_key(fp, TINT, "LEGDEG", &v, NULL, &status);
	assert_int_equal(status, 0);
	close_fits(fp);
	expect_error(path, SP_ESHAPE, "COEFF cells are [500][4]");

	snprintf(path, sizeof path, "%s/ghdeg20.fits", tmpdir);
	fp = copy_psf(path, "PSF");
	v = 20;
	fits_update_key(fp, TINT, "GHDEGX", &v, NULL, &status);
	assert_int_equal(status, 0);
	close_fits(fp);
	expect_error(path, SP_EFORMAT, "GHDEGX: 20 is not an integer in 0..15");

	snprintf(path, sizeof path, "%s/xtrace-1d.fits", tmpdir);
	fp = copy_psf(path, "XTRACE");
	v = 1;
	fits_update_key(fp, TINT, "NAXIS", &v, NULL, &status);
	v = 7 * 500; /* the same data size, so that the next HDU stays in place */
	fits_update_key(fp, TINT, "NAXIS1", &v, NULL, &status);
	fits_delete_key(fp, "NAXIS2", &status);
	assert_int_equal(status, 0);
	close_fits(fp);
	expect_error(path, SP_ESHAPE, "XTRACE HDU is a 1-D image");
}

/* Copies of the real file cut inside every HDU's header and data, and
 * just before the end of the table's data: each an error, never a crash. */
static void test_truncated(void **state)
{
	(void)state;
	char src[1024], path[600];
	fitsfile *fp;
	int status = 0, nhdu;
	long long cuts[16];
	int ncut = 0;

	data_path(src, sizeof src, "psf-r0-00051060.fits");
	fits_open_file(&fp, src, READONLY, &status);
	fits_get_num_hdus(fp, &nhdu, &status);
	for (int h = 1; h <= nhdu && status == 0; h++) {
		LONGLONG head, data, end;
		long naxis1 = 0, naxis2 = 0;
		fits_movabs_hdu(fp, h, NULL, &status);
		fits_get_hduaddrll(fp, &head, &data, &end, &status);
		cuts[ncut++] = head + 100;
		cuts[ncut++] = data + 100;
		if (h == nhdu) {
			fits_read_key(fp, TLONG, "NAXIS1", &naxis1, NULL, &status);
			fits_read_key(fp, TLONG, "NAXIS2", &naxis2, NULL, &status);
			cuts[ncut++] = data + (LONGLONG)naxis1 * naxis2 - 8;
		}
	}
	fits_close_file(fp, &status);
	assert_int_equal(status, 0);
	cuts[ncut++] = 0;
	long long most = 0;
	for (int c = 0; c < ncut; c++)
		most = cuts[c] > most ? cuts[c] : most;

	FILE *in = fopen(src, "rb");
	assert_non_null(in);
	char *buf = xmalloc((size_t)most);
	size_t got = fread(buf, 1, (size_t)most, in);
	fclose(in);
	assert_true(got == (size_t)most);
	for (int c = 0; c < ncut; c++) {
		snprintf(path, sizeof path, "%s/truncated-%lld.fits", tmpdir, cuts[c]);
		FILE *out = fopen(path, "wb");
		assert_non_null(out);
		assert_true(fwrite(buf, 1, (size_t)cuts[c], out) == (size_t)cuts[c]);
		fclose(out);
		print_message("# cut at byte %lld\n", cuts[c]);
		expect_error(path, 0, NULL);
	}
	free(buf);
}

/* Finite but absurd values, and NaN/inf: each makes the read fail with the
 * file, the parameter and the reason (before, most were read and gave
 * NaN or off-CCD spots, and exit 0). */
static void garbage(const char *name, char *path, size_t n)
{
	char src[1024];
	data_path(src, sizeof src, "psf-r0-00051060.fits");
	snprintf(path, n, "%s/%s", tmpdir, name);
	assert_int_equal(craft_copy(src, path), 0);
}

static void test_garbage_values(void **state)
{
	(void)state;
	char path[600];

	garbage("xtrace-1e30.fits", path, sizeof path);
	assert_int_equal(craft_pixel(path, "XTRACE", 7 * 3, 1e30), 0); /* fibre 3, c0 */
	expect_error(path, SP_EFORMAT, "XTRACE of fibre 3 at 5543.0 Angstrom is 1e+30");
	garbage("ytrace-c1.fits", path, sizeof path);
	assert_int_equal(craft_pixel(path, "YTRACE", 7 * 499 + 1, 1e5), 0); /* fibre 499, c1 */
	expect_error(path, SP_EFORMAT, "YTRACE of fibre 499");
	garbage("ytrace-nan.fits", path, sizeof path);
	assert_int_equal(craft_pixel(path, "YTRACE", 5, NAN), 0);
	expect_error(path, SP_ENONFINITE, "YTRACE HDU has non-finite coefficients");
	garbage("ghsigx-neg.fits", path, sizeof path);
	assert_int_equal(craft_psf_coeff(path, "GHSIGX", 4 * 10, -1.0), 0); /* fibre 10, c0 */
	expect_error(path, SP_EFORMAT, "GHSIGX of fibre 10");
	garbage("ghsigy-huge.fits", path, sizeof path);
	assert_int_equal(craft_psf_coeff(path, "GHSIGY", 4 * 2 + 3, 1e4), 0);
	expect_error(path, SP_EFORMAT, "GHSIGY of fibre 2");
	garbage("gh-inf.fits", path, sizeof path);
	assert_int_equal(craft_psf_coeff(path, "GH-2-3", 0, INFINITY), 0);
	expect_error(path, SP_ENONFINITE, "parameter GH-2-3 has non-finite coefficients");
	garbage("gh-huge.fits", path, sizeof path);
	assert_int_equal(craft_psf_coeff(path, "GH-1-1", 4 * 7, 1e200), 0);
	expect_error(path, SP_EFORMAT, "GH-i-j of fibre 7");
	/* Wavelength ranges */
	garbage("wavemax-huge.fits", path, sizeof path);
	assert_int_equal(craft_card(path, "XTRACE", "WAVEMAX", "1E+300"), 0);
	expect_error(path, SP_EFORMAT, "XTRACE HDU, keyword WAVEMAX: 1E+300 is not a number in 100..100000");
	garbage("wave-reversed.fits", path, sizeof path);
	assert_int_equal(craft_card(path, "PSF", "WAVEMIN", "7900.0"), 0);
	expect_error(path, SP_EFORMAT, "PSF HDU: WAVEMIN 7900, WAVEMAX 7827: not an increasing range");
	garbage("wave-negative.fits", path, sizeof path);
	assert_int_equal(craft_card(path, "YTRACE", "WAVEMIN", "-5543.0"), 0);
	expect_error(path, SP_EFORMAT, "YTRACE HDU, keyword WAVEMIN: -5543.0 is not a number");
	garbage("psferr-neg.fits", path, sizeof path);
	assert_int_equal(craft_card(path, "PSF", "HSIZEY", "-5"), 0);
	expect_error(path, SP_EFORMAT, "keyword HSIZEY: -5 is not an integer in 0..32");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference),
		cmocka_unit_test(test_properties_51060),
		cmocka_unit_test(test_properties_67784),
		cmocka_unit_test(test_default_grid),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_not_fits),
		cmocka_unit_test(test_no_psf_hdu),
		cmocka_unit_test(test_other_type),
		cmocka_unit_test(test_missing_param),
		cmocka_unit_test(test_missing_key),
		cmocka_unit_test(test_bad_layout),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_garbage_values),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
