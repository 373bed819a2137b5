/* Unit tests of the J-synchronization CUDA kernels against their CPU twins. */
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

#include "../codelets/jsync/jsync.h"
#include "../codelets/jsync/jsync_ref.h"

/*
 * Tolerance everywhere: none.  The choices are computed in the same order
 * without FMA on both devices, and wq is integer: bytes and words must be
 * identical.  On failure the count of differing entries and the norms of
 * the two wq are printed.
 */


/* Compares two wq vectors; prints the differences and norms first. */
static void check_w(const char *what, int64_t N, size_t split,
		    const int64_t *cpu, const int64_t *gpu, int64_t P)
{
	int64_t bad = 0;
	double nc = 0, ng = 0;
	for (int64_t p = 0; p < P; p++) {
		bad += cpu[p] != gpu[p];
		nc += (double)cpu[p] * (double)cpu[p];
		ng += (double)gpu[p] * (double)gpu[p];
	}
	if (bad)
		print_message("# %s N=%lld split %zu: %lld of %lld differ, "
			      "|w_cpu| = %.17g, |w_gpu| = %.17g\n", what,
			      (long long)N, split, (long long)bad, (long long)P,
			      sqrt(nc), sqrt(ng));
	assert_int_equal(bad, 0);
}

/* best, matvec (chunk partials reduced with zero/add) and fused on the GPU
 * against the CPU, for several splits. */
static void compare(const double *R, int64_t N, const double *v)
{
	int64_t P = jsync_npairs(N);
	size_t nb = jsync_choice_bytes(N, 0, P);
	uint8_t *ch = xmalloc(nb), *gch = xmalloc(nb);
	int64_t *vq = xmalloc((size_t)P * sizeof *vq);
	int64_t *w = xmalloc((size_t)P * sizeof *w);
	int64_t *wf = xmalloc((size_t)P * sizeof *wf);
	int64_t *gw = xmalloc((size_t)P * sizeof *gw);
	static const size_t splits[] = { 1, 2, 3, 7, 16 };
	cudaStream_t st;

	jsync_quantize(v, P, vq);
	jsync_best_cpu(R, N, 0, P, ch);
	memset(w, 0, (size_t)P * sizeof *w);
	memset(wf, 0, (size_t)P * sizeof *wf);
	jsync_matvec_cpu(ch, N, 0, P, vq, w);
	jsync_matvec_fused_cpu(R, N, 0, P, vq, wf);
	assert_memory_equal(w, wf, (size_t)P * sizeof *w);

	double *dR = dmalloc((size_t)P * 9 * sizeof *dR);
	uint8_t *dch = dmalloc(nb);
	int64_t *dvq = dmalloc((size_t)P * sizeof *dvq);
	int64_t *dw = dmalloc((size_t)P * sizeof *dw);
	int64_t *dpart = dmalloc((size_t)P * sizeof *dpart);
	int64_t *dwf = dmalloc((size_t)P * sizeof *dwf);
	CK(cudaStreamCreate(&st));
	CK(cudaMemcpy(dR, R, (size_t)P * 9 * sizeof *dR, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(dvq, vq, (size_t)P * sizeof *dvq, cudaMemcpyHostToDevice));
	for (size_t s = 0; s < sizeof splits / sizeof *splits; s++) {
		int64_t b[17];
		size_t k = jsync_split(N, splits[s], b);
		struct CUstream_st *cs = s % 2 ? (struct CUstream_st *)st : NULL;

		CK(cudaMemset(dch, 0x5A, nb));
		assert_int_equal(jsync_zero_cuda(dw, P, cs), 0);
		assert_int_equal(jsync_zero_cuda(dwf, P, cs), 0);
		/* Chunks in reverse order; matvec partials merged by add. */
		for (size_t q = k; q-- > 0;) {
			uint8_t *dst = dch + jsync_choice_bytes(N, 0, b[q]);
			assert_int_equal(jsync_best_cuda(dR, N, b[q], b[q + 1],
							 dst, cs), 0);
			assert_int_equal(jsync_zero_cuda(dpart, P, cs), 0);
			assert_int_equal(jsync_matvec_cuda(dst, N, b[q], b[q + 1],
							   dvq, dpart, cs), 0);
			assert_int_equal(jsync_add_cuda(dw, dpart, P, cs), 0);
			assert_int_equal(jsync_matvec_fused_cuda(dR, N, b[q],
								 b[q + 1], dvq,
								 dwf, cs), 0);
		}
		CK(cudaDeviceSynchronize());
		CK(cudaGetLastError());
		CK(cudaMemcpy(gch, dch, nb, cudaMemcpyDeviceToHost));
		int64_t badc = 0;
		for (size_t e = 0; e < nb; e++)
			badc += gch[e] != ch[e];
		if (badc)
			print_message("# best N=%lld split %zu: %lld of %zu bytes "
				      "differ\n", (long long)N, splits[s],
				      (long long)badc, nb);
		assert_int_equal(badc, 0);
		CK(cudaMemcpy(gw, dw, (size_t)P * sizeof *gw,
			      cudaMemcpyDeviceToHost));
		check_w("matvec", N, splits[s], w, gw, P);
		CK(cudaMemcpy(gw, dwf, (size_t)P * sizeof *gw,
			      cudaMemcpyDeviceToHost));
		check_w("fused", N, splits[s], w, gw, P);
	}
	CK(cudaStreamDestroy(st));
	CK(cudaFree(dR));
	CK(cudaFree(dch));
	CK(cudaFree(dvq));
	CK(cudaFree(dw));
	CK(cudaFree(dpart));
	CK(cudaFree(dwf));
	free(ch);
	free(gch);
	free(vq);
	free(w);
	free(wf);
	free(gw);
}

static void test_golden(void **state)
{
	(void)state;
	double R[90], v[10];
	for (int p = 0; p < 10; p++) {
		v[p] = 1.0;
		for (int a = 0; a < 3; a++)
			for (int c = 0; c < 3; c++)
				R[9 * p + 3 * a + c] = 9 * p + 1 + 3 * c + a;
	}
	compare(R, 5, v);
}

static void random_case(int64_t N, uint64_t seed, int synth)
{
	int64_t P = jsync_npairs(N);
	double *R = xmalloc((size_t)P * 9 * sizeof *R);
	double *v = xmalloc((size_t)P * sizeof *v);
	jsync_ref_rng_t r = { seed };

	if (synth)
		jsync_ref_synth(N, seed, 0.1, 0.1, 0, R, NULL, NULL);
	else
		for (int64_t e = 0; e < 9 * P; e++)
			R[e] = jsync_ref_gaussian(&r);
	for (int64_t p = 0; p < P; p++)
		v[p] = jsync_ref_gaussian(&r);
	compare(R, N, v);
	free(R);
	free(v);
}

static void test_random_100(void **state)
{
	(void)state;
	random_case(100, 1, 0);
	random_case(100, 2, 1);
}

static void test_random_257(void **state)
{
	(void)state;
	random_case(257, 3, 0);
	random_case(258, 4, 1);
}

int main(void)
{
	cuda_skip_without_device();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_random_100),
		cmocka_unit_test(test_random_257),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif /* SP_HAVE_CUDA */
