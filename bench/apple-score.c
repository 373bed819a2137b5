/* Single-core speed of APPLE's score (responses per second), both CPU routes of apple_score_responses() on the same image in one run. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codelets/apple/apple.h"
#include "../src/base/cpuisa.h"
#include "benchutil.h"

/*
 * Usage: bench/apple-score [Q...]   (default 26 30 28)
 *
 * For each query size q: a 640 x 640 image of uniform noise, 64 reference
 * windows, every query window of the half-step grid; the responses through
 * FFTW's route and through the lanes route (where q has one), alternated
 * three times, the best time of each.  Prints microseconds per (query,
 * reference) pair, the ratio, and the largest difference between the two
 * routes relative to the largest response.  One core, no StarPU.
 */

static double run(apple_score_fft_t *f, const double *im, int n, int q, int g, const double *spec,
		  int nref, double *resp)
{
	double t0 = now();
	apple_score_responses(f, im, n, q, g, spec, nref, 0, g * g, resp);
	return now() - t0;
}

int main(int argc, char **argv)
{
	enum { N = 640, NREF = 64 };
	static const int defq[] = { 26, 30, 28 };
	int nq = argc > 1 ? argc - 1 : (int)(sizeof defq / sizeof *defq);

	printf("# variant %s; %d x %d image, %d references, every query window\n",
	       sp_isa_name(sp_cpu_isa()), N, N, NREF);
	printf("%4s %8s %12s %12s %8s %10s\n", "q", "pairs", "fftw_us", "lanes_us", "ratio", "max_diff");
	for (int a = 0; a < nq; a++) {
		const int q = argc > 1 ? atoi(argv[a + 1]) : defq[a];
		if (q < 4 || q % 2 || q > N / 4) {
			fprintf(stderr, "apple-score: q %s: an even size in [4, %d]\n",
				argc > 1 ? argv[a + 1] : "?", N / 4);
			return 2;
		}
		const int g = 2 * N / q - 1;
		const size_t ns = apple_score_spec_size(q), pairs = (size_t)g * g * NREF;
		double *im = xmalloc(sizeof(double) * N * N), *spec = xmalloc(sizeof(double) * 2 * ns * NREF);
		double *r0 = xmalloc(sizeof(double) * pairs), *r1 = xmalloc(sizeof(double) * pairs);
		int32_t ref[2 * NREF];
		uint64_t x = 88172645463325252ull;
		for (int i = 0; i < N * N; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			im[i] = (double)(x >> 11) * 0x1p-53;
		}
		for (int k = 0; k < NREF; k++) {
			ref[2 * k] = (k * 37) % (N - q);
			ref[2 * k + 1] = (k * 101) % (N - q);
		}
		apple_score_fft_t *f = apple_score_fft_init(q);
		if (f == NULL) {
			fprintf(stderr, "apple-score: out of memory\n");
			return 1;
		}
		apple_score_refs_fft(f, im, N, q, ref, NREF, spec);
		apple_score_fft_set_lanes(f, 1);
		const int has = apple_score_fft_lanes(f);
		double tf = INFINITY, tl = INFINITY;
		for (int rep = 0; rep < 3; rep++) {
			apple_score_fft_set_lanes(f, 0);
			double t = run(f, im, N, q, g, spec, NREF, r0);
			tf = t < tf ? t : tf;
			if (has) {
				apple_score_fft_set_lanes(f, 1);
				t = run(f, im, N, q, g, spec, NREF, r1);
				tl = t < tl ? t : tl;
			}
		}
		if (has) {
			double dmax = 0, rmax = 0;
			for (size_t i = 0; i < pairs; i++) {
				dmax = fmax(dmax, fabs(r1[i] - r0[i]));
				rmax = fmax(rmax, fabs(r0[i]));
			}
			printf("%4d %8zu %12.3f %12.3f %8.2f %10.1e\n", q, pairs, tf / pairs * 1e6,
			       tl / pairs * 1e6, tf / tl, dmax / rmax);
		} else {
			printf("%4d %8zu %12.3f %12s %8s %10s\n", q, pairs, tf / pairs * 1e6, "-", "-", "-");
		}
		apple_score_fft_free(&f);
		free(im);
		free(spec);
		free(r0);
		free(r1);
	}
	return 0;
}
