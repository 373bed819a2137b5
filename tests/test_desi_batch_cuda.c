/* Unit tests of desi_extract_batch_cuda() against its CPU twin desi_extract_batch_cpu(). */
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
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

/* The batches (reference patch, synthetic subbundles) of the CPU test. */
#define DESI_BATCH_FIXTURES_ONLY
#include "test_desi_batch.c"

/*
 * DESIGN.  The same batches go through both twins; the GPU's rows are
 * compared with the CPU's field by field.  iCov, y and fluxweight are the
 * same on both; the GPU then takes a dense route (batched Cholesky, L^-1 E,
 * Jacobi eigendecomposition of each C_bb) where the CPU takes a banded one
 * (band Cholesky, Takahashi, dsyevd): the doubles agree to ~1e-13
 * relative (the route emulated on the CPU reproduces the reference's flux
 * to 5e-14, ivar to 3e-13, Rdiags to 9e-14 absolute).  The rows are
 * floats, so the tolerance is float rounding: max |gpu - cpu| <= 1e-6 x
 * the field's max, per field.  A patch whose normal matrix fails must
 * come out as zeros on both.  On failure the deviations are printed.
 */

#define TOL 1e-6

typedef struct gpu_ctx {
	cudaStream_t st;
	cublasHandle_t blas;
	cusolverDnHandle_t solver;
} gpu_ctx_t;

static gpu_ctx_t G;

static int setup(void **state)
{
	(void)state;
	if (cudaStreamCreate(&G.st) != cudaSuccess)
		return -1;
	if (cublasCreate(&G.blas) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetStream(G.blas, G.st) != CUBLAS_STATUS_SUCCESS)
		return -1;
	if (cusolverDnCreate(&G.solver) != CUSOLVER_STATUS_SUCCESS ||
	    cusolverDnSetStream(G.solver, G.st) != CUSOLVER_STATUS_SUCCESS)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	cusolverDnDestroy(G.solver);
	cublasDestroy(G.blas);
	cudaStreamDestroy(G.st);
	return 0;
}

static void *to_device(const void *h, size_t bytes)
{
	void *d = dmalloc(bytes);
	CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
	return d;
}

/* The GPU's rows of fx's batch (prefilled with NaN: all must be written). */
static void run_gpu(const fixture_t *fx, float *rows)
{
	const desi_batch_t *b = &fx->b;
	const size_t nspot = (size_t)fx->nbfib * b->nfullwave, ss = (size_t)b->p.sy * b->p.sx;
	const size_t nimg = (size_t)b->npix_y * b->npix_x, len = rows_len(b);
	double *ds = to_device(fx->spots, nspot * ss * sizeof(double));
	int32_t *dxc = to_device(fx->xc, nspot * sizeof(int32_t));
	int32_t *dyc = to_device(fx->yc, nspot * sizeof(int32_t));
	float *dimg = to_device(fx->img, nimg * sizeof(float));
	float *div = to_device(fx->ivar, nimg * sizeof(float));
	float *drows = dmalloc(len * sizeof(float));
	size_t bytes = desi_extract_batch_cuda_scratch(b);
	void *scratch = dmalloc(bytes);
	print_message("# %d patches: %.1f MB of GPU scratch\n", b->np, bytes / 1e6);

	CK(cudaMemset(drows, 0xff, len * sizeof(float))); /* NaN */
	CK(cudaMemset(scratch, 0xff, bytes));             /* no reliance on zeroed scratch */
	assert_int_equal(desi_extract_batch_cuda(b, ds, dxc, dyc, dimg, div, drows, scratch, G.blas,
						 G.solver, (struct CUstream_st *)G.st), 0);
	CK(cudaStreamSynchronize(G.st));
	CK(cudaGetLastError());
	CK(cudaMemcpy(rows, drows, len * sizeof(float), cudaMemcpyDeviceToHost));
	void *a[] = { ds, dxc, dyc, dimg, div, drows, scratch };
	for (size_t i = 0; i < sizeof a / sizeof *a; i++)
		CK(cudaFree(a[i]));
}

/* CPU and GPU rows of fx; returns the CPU's return value. */
static int compare(const fixture_t *fx, const char *what)
{
	const desi_batch_t *b = &fx->b;
	const size_t len = rows_len(b);
	float *cpu = xmalloc(len * sizeof *cpu), *gpu = xmalloc(len * sizeof *gpu);
	memset(cpu, 0, len * sizeof *cpu);
	int ret = desi_extract_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar, cpu);
	run_gpu(fx, gpu);
	size_t same = 0;
	for (size_t i = 0; i < len; i++)
		same += memcmp(&cpu[i], &gpu[i], sizeof *cpu) == 0;
	print_message("# %s: %zu of %zu floats identical\n", what, same, len);
	double d = rows_dev(b, gpu, cpu, what);
	print_message("# %s: worst field rel dev %.2e (tol %.0e)\n", what, d, TOL);
	assert_true(d <= TOL);
	free(cpu);
	free(gpu);
	return ret;
}

static void test_ref(void **state)
{
	(void)state;
	fixture_t *fx = fixture_ref();
	assert_non_null(fx);
	assert_int_equal(compare(fx, "ref patch"), 0);
	fixture_free(fx);
}

static void test_synth(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(3);
	assert_int_equal(compare(fx, "synthetic"), 0);
	fixture_free(fx);
}

/* 70 patches: two chunks of the GPU batch (64 + 6). */
static void test_chunks(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(70);
	assert_int_equal(compare(fx, "70 patches"), 0);
	fixture_free(fx);
}

/* xflux: the GPU's rows carry the deconvolved flux too (the model's),
 * within the tolerance of the CPU's (rows_dev compares every field). */
static void test_xflux(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(3);
	fx->b.xflux = 1;
	fx->b.nfield = NFIELD + 1;
	assert_int_equal(compare(fx, "xflux"), 0);
	fixture_free(fx);
}

/* The CPU test's failing patch: zeros on both, the other patches agree. */
static void test_failure(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(3);
	const desi_batch_t *b = &fx->b;
	const size_t ss = (size_t)b->p.sy * b->p.sx;
	const int wbad = b->w0[2] + b->p.nwave - 2;
	fx->spots[((size_t)(b->fib0 + 1) * b->nfullwave + wbad) * ss + 60] = NAN;
	assert_int_equal(compare(fx, "failing patch"), 3);
	float *gpu = xmalloc(rows_len(b) * sizeof *gpu);
	run_gpu(fx, gpu);
	for (int f = 0; f < b->p.core_nf; f++)
		for (int k = 0; k < 4 + 2 * NDIAG + 1; k++)
			for (int w = b->w0[2]; w < b->w0[2] + b->core_nw[2]; w++)
				assert_true(gpu[((size_t)f * b->nfield + k) * b->nwave_grid + w] == 0.0f);
	free(gpu);
	fixture_free(fx);
}

extern void openblas_set_num_threads(int);

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ref),
		cmocka_unit_test(test_synth),
		cmocka_unit_test(test_chunks),
		cmocka_unit_test(test_failure),
		cmocka_unit_test(test_xflux),
	};
	char path[1024];
	FILE *f;

	cuda_skip_without_device();
	openblas_set_num_threads(1);
	snprintf(path, sizeof path, "%s/data/desi/ref_patch.fits", bt_shared_dir());
	if ((f = fopen(path, "rb")) == NULL) {
		printf("1..0 # SKIP %s not found (set SP_SHARED)\n", path);
		return 0;
	}
	fclose(f);
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}

#endif /* SP_HAVE_CUDA */
