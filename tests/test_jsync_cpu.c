/* Unit tests of the J-synchronization CPU kernels against the slow reference and the shared data. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "../codelets/jsync/jsync.h"
#include "../codelets/jsync/jsync_ref.h"
#include "cpuisa.h"
#include "npy.h"

static void *xmalloc(size_t n)
{
	void *p = malloc(n > 0 ? n : 1);
	assert_non_null(p);
	return p;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The golden input of science/jsync.md: R[p] = M^T, M = 9p+1 .. 9p+9
 * row-major. */
static double *golden_R(void)
{
	double *R = xmalloc(10 * 9 * sizeof *R);
	for (int p = 0; p < 10; p++)
		for (int a = 0; a < 3; a++)
			for (int c = 0; c < 3; c++)
				R[9 * p + 3 * a + c] = 9 * p + 1 + 3 * c + a;
	return R;
}

static const double golden_w[10] = { 0, -2, -2, 0, -6, -4, -2, -2, -2, 0 };

/* Tolerance: none; integer inputs give exact residuals and v = 1
 * quantises exactly, so S v must be the golden vector exactly. */
static void test_golden(void **state)
{
	(void)state;
	double *R = golden_R(), v[10], w[10];
	int64_t vq[10], wq[10], wf[10];
	size_t nb = jsync_choice_bytes(5, 0, 10);
	uint8_t *ch = xmalloc(nb);
	int8_t S[100];

	for (int p = 0; p < 10; p++)
		v[p] = 1.0;
	int e = jsync_quantize(v, 10, vq);
	jsync_best_cpu(R, 5, 0, 10, ch);
	memset(wq, 0, sizeof wq);
	memset(wf, 0, sizeof wf);
	jsync_matvec_cpu(ch, 5, 0, 10, vq, wq);
	jsync_matvec_fused_cpu(R, 5, 0, 10, vq, wf);
	jsync_ref_sign_matrix(R, 5, S);
	jsync_ref_matvec_dense(S, 10, v, w);
	for (int p = 0; p < 10; p++) {
		if (ldexp((double)wq[p], -e) != golden_w[p] ||
		    ldexp((double)wf[p], -e) != golden_w[p] ||
		    w[p] != golden_w[p])
			print_message("# p=%d: matvec %g fused %g ref %g golden %g\n",
				      p, ldexp((double)wq[p], -e),
				      ldexp((double)wf[p], -e), w[p], golden_w[p]);
		assert_true(ldexp((double)wq[p], -e) == golden_w[p]);
		assert_true(ldexp((double)wf[p], -e) == golden_w[p]);
		assert_true(w[p] == golden_w[p]);
	}
	free(R);
	free(ch);
}

/* jsync_quantize() against the obvious llrint(ldexp(v, e)) with e from
 * frexp of max |v|: random vectors of several magnitudes and signs, values
 * whose scaled form is an exact tie (k + 0.5, both parities, both signs),
 * zeros and negative zeros, subnormals, and the zero vector (e = 0). */
static void test_quantize(void **state)
{
	enum { P = 4096 };
	double *v = xmalloc(sizeof(double) * P);
	int64_t *got = xmalloc(sizeof(int64_t) * P), *want = xmalloc(sizeof(int64_t) * P);
	unsigned long long r = 12345;
	(void)state;

	for (int trial = 0; trial < 6; trial++) {
		const double mag = ldexp(1.0, -20 * trial + 30); /* 2^30 .. 2^-70 */
		for (int p = 0; p < P; p++) {
			r = r * 6364136223846793005ULL + 1442695040888963407ULL;
			v[p] = ((double)(r >> 11) / 9007199254740992.0 - 0.5) * mag;
		}
		v[0] = mag / 2; /* the largest: vmax = 2^(x - 1) exactly */
		int x;
		frexp(mag / 2, &x);
		const int e = JSYNC_QBITS - x;
		for (int k = 1; k < 64; k++) /* exact ties after scaling: (k + 0.5) 2^-e */
			v[k] = ldexp((k % 2 ? -1.0 : 1.0) * (k + 0.5), -e);
		v[64] = 0.0;
		v[65] = -0.0;
		v[66] = 0x1p-1074 * (trial + 1); /* subnormal */
		assert_int_equal(jsync_quantize(v, P, got), e);
		for (int p = 0; p < P; p++)
			want[p] = (int64_t)llrint(ldexp(v[p], e));
		for (int p = 0; p < P; p++)
			if (got[p] != want[p])
				print_message("# trial %d p %d: v %a got %lld want %lld\n", trial, p, v[p],
					      (long long)got[p], (long long)want[p]);
		assert_memory_equal(got, want, sizeof(int64_t) * P);
	}
	memset(v, 0, sizeof(double) * P);
	got[0] = 7;
	assert_int_equal(jsync_quantize(v, P, got), 0);
	assert_int_equal(got[0], 0);
	free(v);
	free(got);
	free(want);
}

static void test_pair_index(void **state)
{
	(void)state;
	static const int64_t Ns[] = { 2, 3, 4, 5, 17, 100, 1001 };
	for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++) {
		int64_t N = Ns[n], p = 0;
		for (int64_t i = 0; i < N; i++)
			for (int64_t j = i + 1; j < N; j++, p++) {
				int64_t a, b;
				assert_int_equal(jsync_pair(N, i, j), p);
				jsync_pair_ij(N, p, &a, &b);
				if (a != i || b != j)
					print_message("# N=%lld p=%lld: (%lld,%lld) "
						      "!= (%lld,%lld)\n",
						      (long long)N, (long long)p,
						      (long long)a, (long long)b,
						      (long long)i, (long long)j);
				assert_true(a == i && b == j);
			}
	}
	/* Large N: row starts and ends, where the square root rounds. */
	static const int64_t Nl[] = { 65537, 1000003, JSYNC_MAX_N };
	for (size_t n = 0; n < sizeof Nl / sizeof *Nl; n++) {
		int64_t N = Nl[n];
		for (int64_t i = 0; i < N - 1; i += (i < 64 || i > N - 64) ? 1 : 997) {
			int64_t js[3] = { i + 1, i + 1 + (N - i - 2) / 2, N - 1 };
			for (int q = 0; q < 3; q++) {
				int64_t a, b;
				jsync_pair_ij(N, jsync_pair(N, i, js[q]), &a, &b);
				assert_true(a == i && b == js[q]);
			}
		}
	}
}

static void test_split(void **state)
{
	(void)state;
	static const int64_t Ns[] = { 0, 1, 2, 3, 4, 5, 10, 31, 100, 1000 };
	static const size_t Cs[] = { 1, 2, 3, 4, 5, 7, 9, 16, 64, 1000 };
	for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++) {
		int64_t N = Ns[n], P = jsync_npairs(N), T = jsync_ntriplets(N);
		/* Loop reference of the per-range counts. */
		int64_t tri = 0, bytes = 0;
		for (int64_t p = 0; p < P; p++) {
			int64_t i, j;
			jsync_pair_ij(N, p, &i, &j);
			assert_int_equal(jsync_chunk_triplets(N, 0, p), tri);
			assert_int_equal(jsync_choice_bytes(N, 0, p), bytes);
			tri += N - 1 - j;
			bytes += (N - 1 - j + 3) / 4;
		}
		assert_int_equal(jsync_chunk_triplets(N, 0, P), T);
		assert_int_equal(jsync_choice_bytes(N, 0, P), bytes);
		for (size_t c = 0; c < sizeof Cs / sizeof *Cs; c++) {
			int64_t b[1001];
			size_t k = jsync_split(N, Cs[c], b);
			int64_t sum = 0, maxc = 0;
			assert_true(k >= 1 && k <= Cs[c]);
			assert_int_equal(b[0], 0);
			assert_int_equal(b[k], P);
			for (size_t q = 0; q < k; q++) {
				int64_t t = jsync_chunk_triplets(N, b[q], b[q + 1]);
				assert_true(b[q] < b[q + 1] || P == 0);
				if (T > 0)
					assert_true(t > 0);
				sum += t;
				maxc = t > maxc ? t : maxc;
			}
			assert_int_equal(sum, T);
			/* Balance: no chunk exceeds the ideal share by more
			 * than one run (N - 2 triplets). */
			int64_t ideal = (T + (int64_t)Cs[c] - 1) / (int64_t)Cs[c];
			if (maxc > ideal + N)
				print_message("# N=%lld chunks=%zu: max %lld ideal %lld\n",
					      (long long)N, Cs[c], (long long)maxc,
					      (long long)ideal);
			assert_true(maxc <= ideal + N);
			if (T > 0 && T >= 100 * (int64_t)Cs[c] * N)
				assert_int_equal(k, Cs[c]);
		}
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

static int choice_at(const uint8_t *ch, int64_t t)
{
	return (ch[t / 4] >> (2 * (t % 4))) & 3;
}

/* Compares best_cpu with the reference choice of every triplet; also
 * checks that pad bits of each run's last byte are zero. */
static void check_choices(const double *R, int64_t N)
{
	int64_t P = jsync_npairs(N), T = jsync_ntriplets(N), t = 0, bad = 0;
	uint8_t *ch = xmalloc(jsync_choice_bytes(N, 0, P));
	uint8_t *ref = xmalloc((size_t)T);
	const uint8_t *run = ch;
	int hist[4] = { 0 };

	jsync_best_cpu(R, N, 0, P, ch);
	jsync_ref_choices(R, N, ref);
	for (int64_t p = 0; p < P; p++) {
		int64_t i, j;
		jsync_pair_ij(N, p, &i, &j);
		int64_t L = N - 1 - j;
		for (int64_t u = 0; u < L; u++, t++) {
			bad += choice_at(run, u) != ref[t];
			hist[ref[t]]++;
		}
		for (int64_t u = L; u < (L + 3) / 4 * 4; u++)
			assert_int_equal(choice_at(run, u), 0);
		run += (L + 3) / 4;
	}
	if (bad)
		print_message("# N=%lld: %lld of %lld choices differ\n",
			      (long long)N, (long long)bad, (long long)T);
	print_message("# N=%lld choices 0..3: %d %d %d %d\n", (long long)N,
		      hist[0], hist[1], hist[2], hist[3]);
	assert_int_equal(bad, 0);
	free(ch);
	free(ref);
}

/* Tolerance: none (same choice, residual ties have probability ~0 on
 * random input). */
static void test_best_vs_ref(void **state)
{
	(void)state;
	int64_t N = 30, P = jsync_npairs(N);
	double *R = random_R(N, 1);
	check_choices(R, N);
	jsync_ref_synth(N, 2, 0.0, 0.0, 0, R, NULL, NULL);
	check_choices(R, N);
	jsync_ref_synth(N, 3, 0.2, 0.1, 0, R, NULL, NULL);
	check_choices(R, N);
	jsync_ref_synth(N, 4, 0.1, 0.0, 1, R, NULL, NULL);
	check_choices(R, N);
	(void)P;
	free(R);
}

/* Tolerance: 1e-9 relative (2-norm) between dequantised wq and the dense
 * double product; quantisation alone gives ~2^-40. */
static void test_matvec_vs_dense(void **state)
{
	(void)state;
	int64_t Ns[] = { 3, 4, 7, 30 };
	for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++) {
		int64_t N = Ns[n], P = jsync_npairs(N);
		double *R = random_R(N, 10 + (uint64_t)N);
		double *v = xmalloc((size_t)P * sizeof *v);
		double *w = xmalloc((size_t)P * sizeof *w);
		int64_t *vq = xmalloc((size_t)P * sizeof *vq);
		int64_t *wq = xmalloc((size_t)P * sizeof *wq);
		int64_t *wf = xmalloc((size_t)P * sizeof *wf);
		int8_t *S = xmalloc((size_t)(P * P));
		uint8_t *ch = xmalloc(jsync_choice_bytes(N, 0, P));
		jsync_ref_rng_t r = { 99 };

		for (int64_t p = 0; p < P; p++)
			v[p] = jsync_ref_gaussian(&r);
		int e = jsync_quantize(v, P, vq);
		memset(wq, 0, (size_t)P * sizeof *wq);
		memset(wf, 0, (size_t)P * sizeof *wf);
		jsync_best_cpu(R, N, 0, P, ch);
		jsync_matvec_cpu(ch, N, 0, P, vq, wq);
		jsync_matvec_fused_cpu(R, N, 0, P, vq, wf);
		jsync_ref_sign_matrix(R, N, S);
		jsync_ref_matvec_dense(S, P, v, w);
		double dn = 0, rn = 0;
		for (int64_t p = 0; p < P; p++) {
			double d = ldexp((double)wq[p], -e) - w[p];
			dn += d * d;
			rn += w[p] * w[p];
			assert_true(wq[p] == wf[p]);
		}
		if (!(sqrt(dn) <= 1e-9 * sqrt(rn)))
			print_message("# N=%lld: |w - w_ref| = %g, |w_ref| = %g\n",
				      (long long)N, sqrt(dn), sqrt(rn));
		assert_true(sqrt(dn) <= 1e-9 * sqrt(rn));
		free(R);
		free(v);
		free(w);
		free(vq);
		free(wq);
		free(wf);
		free(S);
		free(ch);
	}
}

/* Tolerance: none; integer accumulation is split-independent. */
static void test_chunks(void **state)
{
	(void)state;
	int64_t N = 61, P = jsync_npairs(N);
	double *R = random_R(N, 7);
	size_t nb = jsync_choice_bytes(N, 0, P);
	uint8_t *whole = xmalloc(nb), *parts = xmalloc(nb);
	int64_t *vq = xmalloc((size_t)P * sizeof *vq);
	int64_t *w1 = xmalloc((size_t)P * sizeof *w1);
	int64_t *w2 = xmalloc((size_t)P * sizeof *w2);
	int64_t *w3 = xmalloc((size_t)P * sizeof *w3);
	double *v = xmalloc((size_t)P * sizeof *v);
	jsync_ref_rng_t r = { 5 };

	for (int64_t p = 0; p < P; p++)
		v[p] = jsync_ref_uniform(&r) - 0.5;
	jsync_quantize(v, P, vq);
	jsync_best_cpu(R, N, 0, P, whole);
	memset(w1, 0, (size_t)P * sizeof *w1);
	jsync_matvec_cpu(whole, N, 0, P, vq, w1);
	static const size_t splits[] = { 2, 3, 7, 13, 64 };
	for (size_t s = 0; s < sizeof splits / sizeof *splits; s++) {
		int64_t b[65];
		size_t k = jsync_split(N, splits[s], b);
		memset(parts, 0xAA, nb);
		memset(w2, 0, (size_t)P * sizeof *w2);
		memset(w3, 0, (size_t)P * sizeof *w3);
		/* Chunks in reverse order, each a separate partial sum. */
		for (size_t q = k; q-- > 0;) {
			uint8_t *dst = parts + jsync_choice_bytes(N, 0, b[q]);
			jsync_best_cpu(R, N, b[q], b[q + 1], dst);
			jsync_matvec_cpu(dst, N, b[q], b[q + 1], vq, w2);
			jsync_matvec_fused_cpu(R, N, b[q], b[q + 1], vq, w3);
		}
		assert_memory_equal(whole, parts, nb);
		assert_memory_equal(w1, w2, (size_t)P * sizeof *w1);
		assert_memory_equal(w1, w3, (size_t)P * sizeof *w1);
	}
	/* Arbitrary (unbalanced) ranges too, including single pairs. */
	int64_t cuts[] = { 0, 1, 2, 59, 60, 61, 500, 1000, 1769, P };
	memset(w2, 0, (size_t)P * sizeof *w2);
	for (size_t q = 0; q + 1 < sizeof cuts / sizeof *cuts; q++) {
		size_t off = jsync_choice_bytes(N, 0, cuts[q]);
		jsync_best_cpu(R, N, cuts[q], cuts[q + 1], parts + off);
		jsync_matvec_fused_cpu(R, N, cuts[q], cuts[q + 1], vq, w2);
	}
	assert_memory_equal(whole, parts, nb);
	assert_memory_equal(w1, w2, (size_t)P * sizeof *w1);
	free(R);
	free(whole);
	free(parts);
	free(vq);
	free(w1);
	free(w2);
	free(w3);
	free(v);
}

/* Every SIMD variant this CPU can run (cpuisa.h) against the reference
 * choices and against the baseline variant: the same choice bytes and the
 * same integer products, bit for bit, over chunks that start and end
 * anywhere (runs of every length mod 4).  Tolerance: none. */
static void test_variants(void **state)
{
	(void)state;
	int64_t N = 61, P = jsync_npairs(N), T = jsync_ntriplets(N);
	double *R = random_R(N, 17);
	size_t nb = jsync_choice_bytes(N, 0, P);
	uint8_t *ref = xmalloc((size_t)T), *base = xmalloc(nb), *ch = xmalloc(nb);
	int64_t *vq = xmalloc((size_t)P * sizeof *vq);
	int64_t *w0 = xmalloc((size_t)P * sizeof *w0), *w1 = xmalloc((size_t)P * sizeof *w1);
	int64_t *w2 = xmalloc((size_t)P * sizeof *w2);
	double *v = xmalloc((size_t)P * sizeof *v);
	const jsync_cpu_kernels_t *k0 = jsync_cpu_kernels(SP_ISA_BASELINE);
	jsync_ref_rng_t r = { 23 };
	int64_t cuts[] = { 0, 1, 2, 3, 58, 61, 500, 1001, 1768, 1829, P };
	size_t nc = sizeof cuts / sizeof *cuts;
	int ran = 0;

	assert_non_null(k0);
	assert_int_equal(sp_isa_supported(SP_ISA_BASELINE), 1);
	assert_in_range(sp_cpu_isa(), 0, SP_ISA_COUNT - 1);
	assert_int_equal(sp_isa_supported(sp_cpu_isa()), 1);
	for (int64_t p = 0; p < P; p++)
		v[p] = jsync_ref_uniform(&r) - 0.5;
	jsync_quantize(v, P, vq);
	jsync_ref_choices(R, N, ref);
	k0->best(R, N, 0, P, base);
	memset(w0, 0, (size_t)P * sizeof *w0);
	k0->matvec(base, N, 0, P, vq, w0);
	for (int64_t p = 0, t = 0, o = 0; p < P; p++) {
		int64_t i, j;
		jsync_pair_ij(N, p, &i, &j);
		for (int64_t u = 0; u < N - 1 - j; u++, t++)
			assert_int_equal(choice_at(base + o, u), ref[t]);
		o += (N - 1 - j + 3) / 4;
	}
	for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
		const jsync_cpu_kernels_t *k = jsync_cpu_kernels(isa);
		if (k == NULL) {
			assert_int_equal(sp_isa_supported(isa) && SP_HAVE_AVX2_VARIANT, 0);
			print_message("# variant %s: not on this CPU or build, not run\n",
				      sp_isa_name(isa));
			continue;
		}
		memset(ch, 0xAA, nb);
		memset(w1, 0, (size_t)P * sizeof *w1);
		memset(w2, 0, (size_t)P * sizeof *w2);
		for (size_t q = nc - 1; q-- > 0;) {
			size_t off = jsync_choice_bytes(N, 0, cuts[q]);
			k->best(R, N, cuts[q], cuts[q + 1], ch + off);
			k->matvec(ch + off, N, cuts[q], cuts[q + 1], vq, w1);
			k->fused(R, N, cuts[q], cuts[q + 1], vq, w2);
		}
		assert_memory_equal(base, ch, nb);
		assert_memory_equal(w0, w1, (size_t)P * sizeof *w0);
		assert_memory_equal(w0, w2, (size_t)P * sizeof *w0);
		print_message("# variant %s: same choices and products as baseline and the reference\n",
			      sp_isa_name(isa));
		ran++;
	}
	assert_true(ran >= 1);
	free(R);
	free(ref);
	free(base);
	free(ch);
	free(vq);
	free(w0);
	free(w1);
	free(w2);
	free(v);
}

/* The power method of science/jsync.md on the kernels, choices stored,
 * work split in 2 chunks (as 2 workers would).  Returns the iterations. */
static int power(const double *R, int64_t N, uint64_t seed, int8_t *signs)
{
	int64_t P = jsync_npairs(N), b[3];
	size_t k = jsync_split(N, 2, b);
	uint8_t *ch = xmalloc(jsync_choice_bytes(N, 0, P));
	double *v = xmalloc((size_t)P * sizeof *v);
	int64_t *vq = xmalloc((size_t)P * sizeof *vq);
	int64_t *wq = xmalloc((size_t)P * sizeof *wq);
	jsync_ref_rng_t r = { seed };
	double nv = 0, res = 1;
	int it = 0;

	for (size_t q = 0; q < k; q++)
		jsync_best_cpu(R, N, b[q], b[q + 1],
			       ch + jsync_choice_bytes(N, 0, b[q]));
	for (int64_t p = 0; p < P; p++) {
		v[p] = jsync_ref_uniform(&r);
		nv += v[p] * v[p];
	}
	for (int64_t p = 0; p < P; p++)
		v[p] /= sqrt(nv);
	while (res > 1e-2 && it < 1000) {
		int e = jsync_quantize(v, P, vq);
		memset(wq, 0, (size_t)P * sizeof *wq);
		for (size_t q = 0; q < k; q++)
			jsync_matvec_cpu(ch + jsync_choice_bytes(N, 0, b[q]), N,
					 b[q], b[q + 1], vq, wq);
		double nw = 0;
		for (int64_t p = 0; p < P; p++) {
			double w = ldexp((double)wq[p], -e);
			nw += w * w;
		}
		nw = sqrt(nw);
		res = 0;
		for (int64_t p = 0; p < P; p++) {
			double w = ldexp((double)wq[p], -e) / nw;
			res += (w - v[p]) * (w - v[p]);
			v[p] = w;
		}
		res = sqrt(res);
		it++;
	}
	for (int64_t p = 0; p < P; p++)
		signs[p] = (int8_t)((v[p] > 0 ? 1 : v[p] < 0 ? -1 : 0) *
				    (v[0] > 0 ? 1 : -1));
	free(ch);
	free(v);
	free(vq);
	free(wq);
	return it;
}

/* Pairs (where mask is NULL or 1) whose signs agree with truth up to a
 * global sign: the larger of the agreeing and disagreeing counts. */
static int64_t agree(const int8_t *s, const double *truth, const uint8_t *mask,
		     int64_t P, int64_t *n)
{
	int64_t same = 0, diff = 0;
	for (int64_t p = 0; p < P; p++) {
		if (mask != NULL && !mask[p])
			continue;
		if (s[p] == (truth[p] > 0 ? 1 : -1))
			same++;
		else
			diff++;
	}
	*n = same + diff;
	return same > diff ? same : diff;
}

static const char *shared_dir(void)
{
	const char *d = getenv("SP_SHARED");
	return d != NULL && *d ? d : "../shared";
}

static double *load(const char *name, int ndim, const int64_t *shape)
{
	char path[1024];
	double *data;
	sp_err_t err = { 0, "" };
	snprintf(path, sizeof path, "%s/data/jsync/%s", shared_dir(), name);
	int rc = sp_npy_load_f8(path, ndim, shape, &data, NULL, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
	return data;
}

/* Tolerance: none; 100 % of pairs, up to the global sign. */
static void test_power_shared(void **state)
{
	(void)state;
	static const int64_t Ns[] = { 20, 50, 100 };
	for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++) {
		int64_t N = Ns[n], P = jsync_npairs(N), cnt;
		int64_t s3[3] = { P, 3, 3 }, s1[1] = { P };
		char name[64];
		snprintf(name, sizeof name, "rijs_rot_n%lld.npy", (long long)N);
		double *R = load(name, 3, s3);
		snprintf(name, sizeof name, "rijs_rot_n%lld_truesigns.npy",
			 (long long)N);
		double *truth = load(name, 1, s1);
		snprintf(name, sizeof name, "aspire_signs_rot_n%lld.npy",
			 (long long)N);
		double *aspire = load(name, 1, s1);
		int8_t *s = xmalloc((size_t)P), *sref = xmalloc((size_t)P);
		double t0 = now();
		int it = power(R, N, 42, s);
		double t1 = now();
		int itref = jsync_ref_power(R, N, truth /* any start */, 1e-2,
					    1000, sref);
		(void)itref;
		int64_t a1 = agree(s, truth, NULL, P, &cnt);
		int64_t a2 = agree(s, aspire, NULL, P, &cnt);
		print_message("# N=%lld: %d iterations (%.3f s), %lld/%lld true, "
			      "%lld/%lld as ASPIRE\n", (long long)N, it, t1 - t0,
			      (long long)a1, (long long)P, (long long)a2,
			      (long long)P);
		assert_int_equal(a1, P);
		assert_int_equal(a2, P);
		/* The double reference agrees too. */
		double *sd = xmalloc((size_t)P * sizeof *sd);
		for (int64_t p = 0; p < P; p++)
			sd[p] = sref[p];
		assert_int_equal(agree(s, sd, NULL, P, &cnt), P);
		free(sd);
		free(R);
		free(truth);
		free(aspire);
		free(s);
		free(sref);
	}
}

/* The hackathon's outer products: every even pair (p = 0, 2, ...) was
 * conjugated, so the true signs are -1 for even p, +1 for odd p (up to the
 * global sign).  Tolerance: none. */
static void test_power_vijs(void **state)
{
	(void)state;
	static const int64_t Ns[] = { 10, 50 };
	for (size_t n = 0; n < sizeof Ns / sizeof *Ns; n++) {
		int64_t N = Ns[n], P = jsync_npairs(N), cnt;
		int64_t s3[3] = { P, 3, 3 };
		char name[64];
		snprintf(name, sizeof name, "vijs_conj_n%lld.npy", (long long)N);
		double *R = load(name, 3, s3);
		double *truth = xmalloc((size_t)P * sizeof *truth);
		int8_t *s = xmalloc((size_t)P);
		for (int64_t p = 0; p < P; p++)
			truth[p] = p % 2 == 0 ? -1 : 1;
		int it = power(R, N, 42, s);
		int64_t a = agree(s, truth, NULL, P, &cnt);
		print_message("# vijs N=%lld: %d iterations, %lld/%lld correct\n",
			      (long long)N, it, (long long)a, (long long)P);
		assert_int_equal(a, P);
		free(R);
		free(truth);
		free(s);
	}
}

/* Generated inputs.  Tolerance: none on noiseless data; with 20 % outlier
 * pairs, all inlier pairs must be correct; with 0.05 rad of rotation noise,
 * all pairs.  (Noise and outliers together can flip an inlier whose
 * triplets are mostly spoilt: not asserted here.) */
static void test_power_generated(void **state)
{
	(void)state;
	struct {
		int64_t N;
		double noise, outliers;
	} cases[] = { { 200, 0.0, 0.0 }, { 100, 0.0, 0.2 }, { 100, 0.05, 0.0 } };
	for (size_t n = 0; n < sizeof cases / sizeof *cases; n++) {
		int64_t N = cases[n].N, P = jsync_npairs(N), cnt;
		double *R = xmalloc((size_t)P * 9 * sizeof *R);
		double *truth = xmalloc((size_t)P * sizeof *truth);
		int8_t *t8 = xmalloc((size_t)P), *s = xmalloc((size_t)P);
		uint8_t *out = xmalloc((size_t)P), *in = xmalloc((size_t)P);
		jsync_ref_synth(N, 1000 + (uint64_t)n, cases[n].noise,
				cases[n].outliers, 0, R, t8, out);
		for (int64_t p = 0; p < P; p++) {
			truth[p] = t8[p];
			in[p] = !out[p];
		}
		double t0 = now();
		int it = power(R, N, 7, s);
		double t1 = now();
		int64_t a = agree(s, truth, in, P, &cnt);
		print_message("# generated N=%lld noise %g outliers %g: %d "
			      "iterations (%.3f s), %lld/%lld inliers correct\n",
			      (long long)N, cases[n].noise, cases[n].outliers, it,
			      t1 - t0, (long long)a, (long long)cnt);
		assert_int_equal(a, cnt);
		free(R);
		free(truth);
		free(t8);
		free(s);
		free(out);
		free(in);
	}
}

/* jsync_first_nonrotation: exact rotations (the shared N=20 input) pass;
 * a zero matrix, a scaled one, a NaN and an entry of 1e308 (R^T R
 * overflows) are found, first one first, with their deviation. */
static void test_nonrotation(void **state)
{
	(void)state;
	static const int64_t shape[3] = { 190, 3, 3 };
	double *R = load("rijs_rot_n20.npy", 3, shape);
	int64_t P = shape[0];
	double dev = -1;
	assert_int_equal(jsync_first_nonrotation(R, P, JSYNC_ROT_TOL, &dev), P);
	assert_true(dev == 0.0);
	R[9 * 150 + 4] = 1e308;
	assert_int_equal(jsync_first_nonrotation(R, P, JSYNC_ROT_TOL, &dev), 150);
	assert_true(isinf(dev));
	R[9 * 90] = NAN;
	assert_int_equal(jsync_first_nonrotation(R, P, JSYNC_ROT_TOL, &dev), 90);
	assert_true(isinf(dev));
	for (int k = 0; k < 9; k++)
		R[9 * 40 + k] *= 1.01; /* R^T R = 1.0201 I: ||.||_F = 0.0201 sqrt(3) */
	assert_int_equal(jsync_first_nonrotation(R, P, JSYNC_ROT_TOL, &dev), 40);
	if (fabs(dev - 0.0201 * sqrt(3.0)) > 1e-12)
		fail_msg("deviation %.15g, expected %.15g", dev, 0.0201 * sqrt(3.0));
	memset(R + 9 * 7, 0, 9 * sizeof *R);
	assert_int_equal(jsync_first_nonrotation(R, P, JSYNC_ROT_TOL, &dev), 7);
	if (fabs(dev - sqrt(3.0)) > 1e-15)
		fail_msg("deviation %.15g, expected sqrt(3)", dev);
	free(R);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_quantize),
		cmocka_unit_test(test_pair_index),
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_best_vs_ref),
		cmocka_unit_test(test_matvec_vs_dense),
		cmocka_unit_test(test_chunks),
		cmocka_unit_test(test_variants),
		cmocka_unit_test(test_power_shared),
		cmocka_unit_test(test_power_vijs),
		cmocka_unit_test(test_power_generated),
		cmocka_unit_test(test_nonrotation),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
