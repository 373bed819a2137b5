/* Plain OpenMP C J-synchronization: the reference bench/jsync measures starpipe against. */

/*
 * What a group writes when it ports ASPIRE's J-sync to C with OpenMP, in
 * the obvious way, and what issue 26's "plain OpenMP C" reference did (one
 * byte per triplet: 215 MB at N = 1000):
 *
 *   1. For every triplet i < j < k, the four costs of science/jsync.md
 *      from 3x3 products of R_ij, R_jk, R_ik and their J-conjugates, and
 *      the index of the smallest, one byte per triplet (OpenMP over i,
 *      dynamic schedule: rows shrink with i).
 *   2. A fixed number of power iterations w = S v in double precision,
 *      OpenMP over i, each thread adding into its own copy of w, the
 *      copies summed, then v = w / |w|.
 *
 * The iteration count is given (starpipe's own, from its report) so that
 * both do the same work; the start vector is seeded uniform.  Built by
 * bench/jsync with `cc -O2 -fopenmp` (the distribution's flags: no -march),
 * self-contained, sharing no code with starpipe.  Input checking is minimal:
 * this is a benchmark reference, fed by starpipe-jsync-gen.
 *
 * Usage: jsync-plain RIJS.npy ITERS [TRUTH.npy]
 * Prints: N, seconds for the choices, seconds for the iterations, total
 * seconds, peak of the two big arrays in MB, and (with TRUTH) the fraction
 * of signs that agree with it up to a global sign.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, const char *path)
{
	fprintf(stderr, "jsync-plain: %s: %s\n", path, what);
	exit(1);
}

/* A C-order '<f8' NPY file: its first dimension in *n0, the data malloc'ed. */
static double *load_npy(const char *path, int64_t *n0, int64_t *count)
{
	FILE *f = fopen(path, "rb");
	unsigned char pre[10];
	if (f == NULL)
		die("cannot open", path);
	if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] != 1)
		die("not an NPY v1 file", path);
	size_t hl = (size_t)pre[8] | (size_t)pre[9] << 8;
	char *h = malloc(hl + 1);
	if (h == NULL || fread(h, 1, hl, f) != hl)
		die("short header", path);
	h[hl] = '\0';
	if (strstr(h, "'<f8'") == NULL || strstr(h, "'fortran_order': False") == NULL)
		die("not C-order float64", path);
	char *s = strstr(h, "'shape': (");
	if (s == NULL)
		die("no shape", path);
	s += 10;
	int64_t c = 1;
	*n0 = -1;
	while (*s != ')') {
		char *e;
		long long d = strtoll(s, &e, 10);
		if (e == s)
			break;
		if (*n0 < 0)
			*n0 = d;
		c *= d;
		s = e;
		while (*s == ',' || *s == ' ')
			s++;
	}
	free(h);
	double *x = malloc((size_t)c * sizeof *x);
	if (x == NULL || fread(x, sizeof *x, (size_t)c, f) != (size_t)c)
		die("short data", path);
	fclose(f);
	*count = c;
	return x;
}

static int64_t pair(int64_t n, int64_t i, int64_t j)
{
	return (2 * n - i - 1) * i / 2 + j - i - 1;
}

static void mul3(const double *X, const double *Y, double *Z)
{
	for (int a = 0; a < 3; a++)
		for (int c = 0; c < 3; c++)
			Z[3 * a + c] = X[3 * a] * Y[c] + X[3 * a + 1] * Y[3 + c] + X[3 * a + 2] * Y[6 + c];
}

static void conj3(const double *X, double *Y)
{
	static const double J[3] = { -1, -1, 1 };
	for (int a = 0; a < 3; a++)
		for (int c = 0; c < 3; c++)
			Y[3 * a + c] = J[a] * X[3 * a + c] * J[c];
}

static double dist2(const double *X, const double *Y)
{
	double s = 0;
	for (int e = 0; e < 9; e++)
		s += (X[e] - Y[e]) * (X[e] - Y[e]);
	return s;
}

static double now(void)
{
	return omp_get_wtime();
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: jsync-plain RIJS.npy ITERS [TRUTH.npy]\n");
		return 2;
	}
	int64_t P, cnt;
	double *R = load_npy(argv[1], &P, &cnt);
	int iters = atoi(argv[2]);
	int64_t n = (int64_t)((1 + sqrt(1 + 8.0 * (double)P)) / 2);
	if (n * (n - 1) / 2 != P || cnt != 9 * P)
		die("not N(N-1)/2 3x3 matrices", argv[1]);
	int64_t T = n * (n - 1) * (n - 2) / 6;
	uint8_t *best = malloc((size_t)T);
	double *v = malloc((size_t)P * sizeof *v), *w = malloc((size_t)P * sizeof *w);
	if (best == NULL || v == NULL || w == NULL)
		die("out of memory", argv[1]);

	double t0 = now();
	/* Triplet (i, j, k) lives at offset[i] + (its place among row i's). */
#pragma omp parallel for schedule(dynamic)
	for (int64_t i = 0; i < n - 2; i++) {
		int64_t m = n - i, t = T - m * (m - 1) * (m - 2) / 6;
		for (int64_t j = i + 1; j < n - 1; j++) {
			const double *A = R + 9 * pair(n, i, j);
			double JA[9];
			conj3(A, JA);
			for (int64_t k = j + 1; k < n; k++, t++) {
				const double *B = R + 9 * pair(n, j, k), *C = R + 9 * pair(n, i, k);
				double JB[9], JC[9], X[9], c[4];
				conj3(B, JB);
				conj3(C, JC);
				mul3(A, B, X);
				c[0] = dist2(X, C);
				c[3] = dist2(X, JC);
				mul3(JA, B, X);
				c[1] = dist2(X, C);
				mul3(A, JB, X);
				c[2] = dist2(X, C);
				int b = 0;
				for (int q = 1; q < 4; q++)
					if (c[q] < c[b])
						b = q;
				best[t] = (uint8_t)b;
			}
		}
	}
	double t1 = now();

	uint64_t seed = 1;
	double nv = 0;
	for (int64_t p = 0; p < P; p++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		v[p] = (double)(seed >> 11) * 0x1p-53;
		nv += v[p] * v[p];
	}
	for (int64_t p = 0; p < P; p++)
		v[p] /= sqrt(nv);
	/* (s_ij_jk, s_ik_jk, s_ij_ik) per choice, science/jsync.md */
	static const double S1[4] = { 1, -1, -1, 1 }, S2[4] = { 1, 1, -1, -1 },
			    S3[4] = { 1, -1, 1, -1 };
	/* One w per thread (an OpenMP array reduction would put each on its
	 * thread's stack: 16 MB at N = 2000), summed after each product. */
	int nt = omp_get_max_threads();
	double *wt = malloc((size_t)nt * (size_t)P * sizeof *wt);
	if (wt == NULL)
		die("out of memory", argv[1]);
	for (int it = 0; it < iters; it++) {
#pragma omp parallel
		{
			double *wm = wt + (size_t)omp_get_thread_num() * (size_t)P;
			memset(wm, 0, (size_t)P * sizeof *wm);
#pragma omp for schedule(dynamic)
			for (int64_t i = 0; i < n - 2; i++) {
				int64_t m = n - i, t = T - m * (m - 1) * (m - 2) / 6;
				for (int64_t j = i + 1; j < n - 1; j++) {
					int64_t ij = pair(n, i, j);
					for (int64_t k = j + 1; k < n; k++, t++) {
						int64_t jk = pair(n, j, k), ik = pair(n, i, k);
						int b = best[t];
						wm[ij] += S1[b] * v[jk] + S3[b] * v[ik];
						wm[jk] += S1[b] * v[ij] + S2[b] * v[ik];
						wm[ik] += S3[b] * v[ij] + S2[b] * v[jk];
					}
				}
			}
#pragma omp for
			for (int64_t p = 0; p < P; p++) {
				double s = 0;
				for (int q = 0; q < nt; q++)
					s += wt[(size_t)q * (size_t)P + (size_t)p];
				w[p] = s;
			}
		}
		double nw = 0;
		for (int64_t p = 0; p < P; p++)
			nw += w[p] * w[p];
		nw = sqrt(nw);
		for (int64_t p = 0; p < P; p++)
			v[p] = w[p] / nw;
	}
	double t2 = now();

	printf("%lld %.4f %.4f %.4f %.1f", (long long)n, t1 - t0, t2 - t1, t2 - t0,
	       ((double)T + 8.0 * (double)P * (9 + 2 + nt)) / 1e6);
	if (argc > 3) {
		int64_t Pt, ct;
		double *truth = load_npy(argv[3], &Pt, &ct);
		if (ct != P)
			die("truth has the wrong length", argv[3]);
		int64_t same = 0;
		for (int64_t p = 0; p < P; p++)
			same += (v[p] >= 0 ? 1.0 : -1.0) == truth[p];
		double f = (double)same / (double)P;
		printf(" %.4f", f > 1 - f ? f : 1 - f);
		free(truth);
	}
	printf("\n");
	free(R);
	free(best);
	free(v);
	free(w);
	free(wt);
	return 0;
}
