/* Unit tests of the DESI GaussHermite CUDA spot kernel against its CPU twin. */
#define _POSIX_C_SOURCE 200809L

#include "cudatest.h"

#ifdef SP_HAVE_CUDA
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "../codelets/desi/psf.h"

/*
 * Tolerance: 1e-12 absolute per pixel (the kernels share every expression
 * but CUDA's erf and exp, 1-2 ulp, and the order of the normalising sum:
 * we expect a few 1e-16); corners exact.  The maximum deviation is printed
 * as a TAP comment.
 */


static const char *shared_dir(void)
{
	const char *d = getenv("SP_SHARED");
	return d != NULL && *d ? d : "../shared";
}

/* Runs both kernels on n parameter sets; returns the largest pixel
 * difference and asserts equal corners and the tolerance. */
static double compare(const char *what, const double *par, size_t n, desi_spot_shape_t sh)
{
	size_t np = 4 + (size_t)(sh.ghdegx + 1) * (sh.ghdegy + 1);
	size_t npix = (size_t)(2 * sh.hsizex + 1) * (2 * sh.hsizey + 1);
	double *cs = xmalloc(n * npix * sizeof *cs), *gs = xmalloc(n * npix * sizeof *gs);
	int32_t *cx = xmalloc(n * sizeof *cx), *cy = xmalloc(n * sizeof *cy);
	int32_t *gx = xmalloc(n * sizeof *gx), *gy = xmalloc(n * sizeof *gy);
	double *d_par = dmalloc(n * np * sizeof(double)), *d_s = dmalloc(n * npix * sizeof(double));
	int32_t *d_x = dmalloc(n * sizeof(int32_t)), *d_y = dmalloc(n * sizeof(int32_t));
	cudaStream_t st;

	desi_spots_cpu(par, n, sh, cs, cx, cy);
	CK(cudaStreamCreate(&st));
	CK(cudaMemcpyAsync(d_par, par, n * np * sizeof(double), cudaMemcpyHostToDevice, st));
	CK(cudaMemsetAsync(d_s, 0xff, n * npix * sizeof(double), st)); /* NaN */
	assert_int_equal(desi_spots_cuda(d_par, n, sh, d_s, d_x, d_y, (struct CUstream_st *)st),
			 0);
	CK(cudaMemcpyAsync(gs, d_s, n * npix * sizeof(double), cudaMemcpyDeviceToHost, st));
	CK(cudaMemcpyAsync(gx, d_x, n * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
	CK(cudaMemcpyAsync(gy, d_y, n * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	CK(cudaStreamDestroy(st));

	double dmax = 0, ncpu = 0, ngpu = 0;
	size_t badc = 0, nonfinite = 0;
	for (size_t s = 0; s < n; s++) {
		badc += cx[s] != gx[s] || cy[s] != gy[s];
		for (size_t k = 0; k < npix; k++) {
			double a = cs[s * npix + k], b = gs[s * npix + k];
			nonfinite += !isfinite(b);
			dmax = fmax(dmax, fabs(a - b));
			ncpu += a * a;
			ngpu += b * b;
		}
	}
	print_message("# %s: %zu spots, max |gpu - cpu| %.3g, |cpu| %.17g, |gpu| %.17g, "
		      "%zu corners differ, %zu non-finite\n",
		      what, n, dmax, sqrt(ncpu), sqrt(ngpu), badc, nonfinite);
	assert_int_equal(nonfinite, 0);
	assert_int_equal(badc, 0);
	assert_true(dmax <= 1e-12);
	free(cs);
	free(gs);
	free(cx);
	free(cy);
	free(gx);
	free(gy);
	CK(cudaFree(d_par));
	CK(cudaFree(d_s));
	CK(cudaFree(d_x));
	CK(cudaFree(d_y));
	return dmax;
}

/* A bundle's worth of the real PSFs: 25 fibres x 160 wavelengths. */
static void real_psf(const char *name)
{
	char path[1024];
	desi_psf_t *psf = NULL;
	sp_err_t err = { 0, "" };
	snprintf(path, sizeof path, "%s/data/desi/%s", shared_dir(), name);
	int rc = desi_psf_read(path, &psf, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);

	enum { NFB = 25, NWV = 160 };
	double waves[NWV];
	int np = desi_psf_nparams(psf);
	for (int w = 0; w < NWV; w++)
		waves[w] = psf->wmin - 10 + (psf->wmax - psf->wmin + 20) * w / (NWV - 1);
	double *par = xmalloc((size_t)NFB * NWV * np * sizeof *par);
	desi_psf_params(psf, 475, NFB, waves, NWV, par);
	compare(name, par, (size_t)NFB * NWV, desi_psf_shape(psf));
	free(par);
	desi_psf_free(&psf);
}

static void test_real_51060(void **state)
{
	(void)state;
	real_psf("psf-r0-00051060.fits");
}

static void test_real_67784(void **state)
{
	(void)state;
	real_psf("psf-r0-00067784.fits");
}

/* Other shapes, synthetic parameters: odd sizes and degrees, and the
 * largest shape (dynamic shared memory above 48 KB). */
static void test_shapes(void **state)
{
	(void)state;
	static const desi_spot_shape_t shapes[] = {
		{ 3, 2, 2, 1 },
		{ 0, 0, 0, 0 },
		{ 12, 7, 8, 4 },
		{ DESI_PSF_MAX_HSIZE, DESI_PSF_MAX_HSIZE, DESI_PSF_MAX_GHDEG, DESI_PSF_MAX_GHDEG },
	};
	unsigned long long r = 12345;
	for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
		desi_spot_shape_t sh = shapes[k];
		size_t n = 300, np = 4 + (size_t)(sh.ghdegx + 1) * (sh.ghdegy + 1);
		double *par = xmalloc(n * np * sizeof *par);
		for (size_t s = 0; s < n; s++) {
			double *p = par + s * np;
			for (size_t q = 0; q < np; q++) {
				r = r * 6364136223846793005ULL + 1442695040888963407ULL;
				double u = (double)(r >> 11) * 0x1p-53;
				p[q] = q == 0 ? 50 + 4000 * u : q == 1 ? 20 + 4000 * u
				     : q < 4 ? 0.8 + 0.6 * u : q == 4 ? 1.0 : 0.04 * (u - 0.5);
			}
		}
		char what[64];
		snprintf(what, sizeof what, "shape %d %d %d %d", sh.hsizex, sh.hsizey,
			 sh.ghdegx, sh.ghdegy);
		compare(what, par, n, sh);
		free(par);
	}
	/* No spots: nothing launched; a bad shape: SP_EINVAL. */
	desi_spot_shape_t bad = { DESI_PSF_MAX_HSIZE + 1, 5, 6, 6 };
	assert_int_equal(desi_spots_cuda(NULL, 0, shapes[0], NULL, NULL, NULL, NULL), 0);
	assert_int_equal(desi_spots_cuda(NULL, 1, bad, NULL, NULL, NULL, NULL), SP_EINVAL);
}

int main(void)
{
	cuda_skip_without_device();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_real_51060),
		cmocka_unit_test(test_real_67784),
		cmocka_unit_test(test_shapes),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* SP_HAVE_CUDA */
