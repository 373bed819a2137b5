/* Host emulation of the J-sync CUDA kernels' per-thread bodies (jsync_kern.h) against the CPU kernels, bit for bit. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../codelets/jsync/jsync.h"
#include "../codelets/jsync/jsync_kern.h"
#include "../codelets/jsync/jsync_ref.h"
#include "npy.h"

/*
 * DESIGN.  jsync_cuda.cu gives each block a run (pair p of a chunk
 * [p0, p1), grid stride) and each thread of the block a share of it; the
 * thread's work is a function of jsync_kern.h.  Here the blocks run one
 * after another and, inside a block, the threads too, in an order that
 * changes from run to run (identity, reversed, shuffled): the GPU's
 * threads race on wq, whose integer sums must not depend on it.  The
 * results must equal jsync_cpu.c's bit for bit: the choice bytes of every
 * chunk, and wq after the matvec and fused kernels (from a non-zero wq,
 * since the kernels add to it).  Inputs: Gaussian matrices (every choice
 * occurs) for N from 3 to 300 (runs longer than a block's threads, so the
 * thread-stride loops turn), entries in {-1, 0, 1} (ties between the
 * residual sums: the tie rule), and the shared rotations of N = 50.  This
 * checks the kernels' arithmetic, indexing, launch geometry and chunk
 * offsets on every build; device-only faults are test_jsync_cuda's, on a
 * GPU.
 */

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	assert_non_null(p);
	return p;
}

static uint64_t rng_state = 0x243f6a8885a308d3ULL;

static uint64_t urand(void)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return rng_state >> 11;
}

/* A thread order for a block of n threads: 0 identity, 1 reversed, else shuffled. */
static void thread_order(int *perm, int n, int kind)
{
	for (int t = 0; t < n; t++)
		perm[t] = kind == 1 ? n - 1 - t : t;
	if (kind >= 2)
		for (int t = n - 1; t > 0; t--) {
			int u = (int)(urand() % (uint64_t)(t + 1)), x = perm[t];
			perm[t] = perm[u];
			perm[u] = x;
		}
}

static double *random_R(int64_t N, uint64_t seed)
{
	int64_t P = jsync_npairs(N);
	double *R = xmalloc((size_t)P * 9 * sizeof *R);
	jsync_ref_rng_t r = { seed };
	for (int64_t e = 0; e < 9 * P; e++)
		R[e] = jsync_ref_gaussian(&r);
	return R;
}

/* Entries in {-1, 0, 1}: residual sums tie often, so the tie rule (the
 * first smallest wins) is exercised too. */
static double *ties_R(int64_t N)
{
	int64_t P = jsync_npairs(N);
	double *R = xmalloc((size_t)P * 9 * sizeof *R);
	for (int64_t e = 0; e < 9 * P; e++)
		R[e] = (double)((int)(urand() % 3) - 1);
	return R;
}

/* best_kernel over [p0, p1), blocks and threads as host loops. */
static void emulate_best(const double *R, int64_t N, int64_t p0, int64_t p1, int64_t base,
			 uint8_t *choices, int order)
{
	int perm[JSK_BEST_THREADS];
	for (int64_t p = p0; p < p1; p++) {
		jsk_run_t r = jsk_run(N, p, base);
		int64_t nbytes = (r.L + 3) / 4;
		thread_order(perm, JSK_BEST_THREADS, order);
		for (int q = 0; q < JSK_BEST_THREADS; q++)
			for (int64_t b = perm[q]; b < nbytes; b += JSK_BEST_THREADS)
				choices[r.off + b] = jsk_best_byte(R + 9 * p, R + 9 * r.jk,
								   R + 9 * r.ik, b, r.L);
	}
}

/* matvec_kernel (R == NULL: from choices) or fused_kernel (from R). */
static void emulate_matvec(const uint8_t *choices, const double *R, int64_t N, int64_t p0,
			   int64_t p1, int64_t base, const int64_t *vq, int64_t *wq, int order)
{
	int perm[JSK_MV_THREADS];
	for (int64_t p = p0; p < p1; p++) {
		jsk_run_t r = jsk_run(N, p, R != NULL ? 0 : base);
		int64_t block = 0; /* the block reduction: integer, any order */
		thread_order(perm, JSK_MV_THREADS, order);
		for (int q = 0; q < JSK_MV_THREADS; q++) {
			int64_t wij = 0;
			for (int64_t t = perm[q]; t < r.L; t += JSK_MV_THREADS) {
				unsigned c = R != NULL
						     ? jsk_choice(R + 9 * p, R + 9 * (r.jk + t),
								  R + 9 * (r.ik + t))
						     : jsk_choice_at(choices + r.off, t);
				wij += jsk_update(c, vq[p], vq[r.jk + t], vq[r.ik + t],
						  wq + r.jk + t, wq + r.ik + t);
			}
			block += wij;
		}
		wq[p] = (int64_t)((uint64_t)wq[p] + (uint64_t)block);
	}
}

/* Every kernel, chunk by chunk (nchunks splits), against jsync_cpu.c. */
static void check_problem(const double *R, int64_t N, size_t nchunks, int order)
{
	int64_t P = jsync_npairs(N), bounds[65];
	size_t nb = jsync_split(N, nchunks, bounds);
	int64_t *vq = xmalloc((size_t)P * sizeof *vq);
	int64_t *w0 = xmalloc((size_t)P * sizeof *w0);
	int64_t *wcpu = xmalloc((size_t)P * sizeof *wcpu), *wemu = xmalloc((size_t)P * sizeof *wemu);
	int64_t *wfc = xmalloc((size_t)P * sizeof *wfc), *wfe = xmalloc((size_t)P * sizeof *wfe);
	int hist[4] = { 0 };

	for (int64_t p = 0; p < P; p++) {
		vq[p] = (int64_t)(urand() % (2ULL << 40)) - (1LL << 40);
		w0[p] = (int64_t)(urand() % 2000) - 1000; /* the kernels add to wq */
	}
	memcpy(wcpu, w0, (size_t)P * sizeof *w0);
	memcpy(wemu, w0, (size_t)P * sizeof *w0);
	memcpy(wfc, w0, (size_t)P * sizeof *w0);
	memcpy(wfe, w0, (size_t)P * sizeof *w0);
	for (size_t c = 0; c < nb; c++) {
		int64_t p0 = bounds[c], p1 = bounds[c + 1];
		size_t n = jsync_choice_bytes(N, p0, p1);
		int64_t base = (int64_t)jsync_choice_bytes(N, 0, p0);
		uint8_t *cpu = xmalloc(n), *emu = xmalloc(n);
		memset(emu, 0xA5, n); /* a byte no thread writes shows */
		jsync_best_cpu(R, N, p0, p1, cpu);
		emulate_best(R, N, p0, p1, base, emu, order);
		if (n > 0 && memcmp(cpu, emu, n) != 0) {
			size_t k = 0;
			while (cpu[k] == emu[k])
				k++;
			fail_msg("N=%lld chunk [%lld, %lld): choice byte %zu is %#x, CPU %#x",
				 (long long)N, (long long)p0, (long long)p1, k, emu[k], cpu[k]);
		}
		for (size_t k = 0; k < n; k++)
			for (int l = 0; l < 4; l++)
				hist[(cpu[k] >> (2 * l)) & 3]++;
		jsync_matvec_cpu(cpu, N, p0, p1, vq, wcpu);
		emulate_matvec(emu, NULL, N, p0, p1, base, vq, wemu, order);
		jsync_matvec_fused_cpu(R, N, p0, p1, vq, wfc);
		emulate_matvec(NULL, R, N, p0, p1, base, vq, wfe, order);
		free(cpu);
		free(emu);
	}
	for (int64_t p = 0; p < P; p++) {
		if (wemu[p] != wcpu[p])
			fail_msg("N=%lld matvec: wq[%lld] = %lld, CPU %lld", (long long)N, (long long)p,
				 (long long)wemu[p], (long long)wcpu[p]);
		if (wfe[p] != wfc[p])
			fail_msg("N=%lld fused: wq[%lld] = %lld, CPU %lld", (long long)N, (long long)p,
				 (long long)wfe[p], (long long)wfc[p]);
	}
	/* the inputs exercise every choice (N >= 5), so a wrong branch shows */
	if (N >= 5)
		for (int k = 0; k < 4; k++)
			assert_true(hist[k] > 0);
	free(vq);
	free(w0);
	free(wcpu);
	free(wemu);
	free(wfc);
	free(wfe);
}

/* The index arithmetic against the obvious walk: pairs in row-major order,
 * each run taking ceil(L/4) bytes. */
static void test_pair_geometry(void **state)
{
	(void)state;
	static const int64_t Ns[] = { 2, 3, 4, 5, 17, 300, 1001 };
	for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++) {
		int64_t N = Ns[n], p = 0, bytes = 0;
		for (int64_t i = 0; i < N - 1; i++)
			for (int64_t j = i + 1; j < N; j++, p++) {
				int64_t pi, pj;
				jsk_pair_ij(N, p, &pi, &pj);
				assert_int_equal(pi, i);
				assert_int_equal(pj, j);
				assert_int_equal(jsk_pair(N, i, j), p);
				assert_int_equal(jsk_bytes_before(N, i, j), bytes);
				jsk_run_t r = jsk_run(N, p, 0);
				assert_int_equal(r.L, N - 1 - j);
				assert_int_equal(r.jk, j + 1 < N ? jsk_pair(N, j, j + 1) : r.jk);
				assert_int_equal(r.off, bytes);
				bytes += (N - 1 - j + 3) / 4;
			}
		assert_int_equal(p, jsync_npairs(N));
		assert_int_equal((int64_t)jsync_choice_bytes(N, 0, p), bytes);
	}
	/* the largest problems: the closed form at the ends of rows */
	static const int64_t Nl[] = { 65537, JSYNC_MAX_N };
	for (size_t n = 0; n < 2; n++) {
		int64_t N = Nl[n];
		const int64_t rows[] = { 0, 1, N / 2, N - 3, N - 2 };
		for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
			int64_t i = rows[k], pi, pj;
			/* first and last pair of row i */
			jsk_pair_ij(N, jsk_pair(N, i, i + 1), &pi, &pj);
			assert_int_equal(pi, i);
			assert_int_equal(pj, i + 1);
			jsk_pair_ij(N, jsk_pair(N, i, N - 1), &pi, &pj);
			assert_int_equal(pi, i);
			assert_int_equal(pj, N - 1);
		}
	}
}

static void test_random_problems(void **state)
{
	(void)state;
	static const int64_t Ns[] = { 3, 4, 5, 9, 17, 40, 150, 300 };
	static const size_t chunks[] = { 1, 3, 7 };
	for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++) {
		double *R = random_R(Ns[n], 100 + (uint64_t)n);
		for (size_t c = 0; c < 3; c++)
			for (int order = 0; order < 3; order++) {
				if (Ns[n] == 300 && (c > 0 || order > 0))
					continue; /* the big one once: it is for the long runs */
				check_problem(R, Ns[n], chunks[c], order);
			}
		free(R);
	}
}

static void test_ties(void **state)
{
	(void)state;
	static const int64_t Ns[] = { 5, 17, 40 };
	for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++) {
		double *R = ties_R(Ns[n]);
		for (int order = 0; order < 3; order++)
			check_problem(R, Ns[n], 3, order);
		free(R);
	}
}

static void test_shared_rotations(void **state)
{
	(void)state;
	const char *d = getenv("SP_SHARED");
	char path[1024];
	int64_t N = 50, shape[3] = { jsync_npairs(50), 3, 3 };
	double *R = NULL;
	sp_err_t err = { 0, "" };
	snprintf(path, sizeof path, "%s/data/jsync/rijs_rot_n50.npy", d != NULL && *d ? d : "../shared");
	int rc = sp_npy_load_f8(path, 3, shape, &R, NULL, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
	for (int order = 0; order < 4; order++)
		check_problem(R, N, 4, order);
	free(R);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pair_geometry),
		cmocka_unit_test(test_random_problems),
		cmocka_unit_test(test_ties),
		cmocka_unit_test(test_shared_rotations),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
