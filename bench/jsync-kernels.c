/* Single-core timing of the J-synchronization CPU kernels against the slow reference. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codelets/jsync/jsync.h"
#include "../codelets/jsync/jsync_ref.h"
#include "benchutil.h"

/* Reference throughput (triplets/s) of choices + one double matvec. */
static void reference(int64_t N, double *best_rate, double *mv_rate)
{
	int64_t P = jsync_npairs(N), T = jsync_ntriplets(N);
	double *R = xmalloc((size_t)P * 9 * sizeof *R);
	double *v = xmalloc((size_t)P * sizeof *v), *w = xmalloc((size_t)P * sizeof *w);
	uint8_t *best = xmalloc((size_t)T);

	jsync_ref_synth(N, 1, 0.0, 0.0, 0, R, NULL, NULL);
	for (int64_t p = 0; p < P; p++)
		v[p] = 1.0 / (double)(p + 1);
	double t0 = now();
	jsync_ref_choices(R, N, best);
	double t1 = now();
	jsync_ref_matvec(best, N, v, w);
	double t2 = now();
	*best_rate = (double)T / (t1 - t0);
	*mv_rate = (double)T / (t2 - t1);
	free(R);
	free(v);
	free(w);
	free(best);
}

int main(int argc, char **argv)
{
	int64_t Ns[8] = { 200, 500, 1000 };
	int nN = 3, reps = 3;
	double rb, rm;

	if (argc > 1) {
		nN = 0;
		for (int a = 1; a < argc && nN < 8; a++)
			Ns[nN++] = strtoll(argv[a], NULL, 10);
	}
	reference(100, &rb, &rm);
	printf("reference N=100: best %.3g triplets/s, matvec %.3g triplets/s\n",
	       rb, rm);
	printf("%6s %12s %12s %8s %12s %8s %12s\n", "N", "triplets",
	       "best/s", "x ref", "matvec/s", "x ref", "fused/s");
	for (int n = 0; n < nN; n++) {
		int64_t N = Ns[n], P = jsync_npairs(N), T = jsync_ntriplets(N);
		double *R = xmalloc((size_t)P * 9 * sizeof *R);
		uint8_t *ch = xmalloc(jsync_choice_bytes(N, 0, P));
		int64_t *vq = xmalloc((size_t)P * sizeof *vq);
		int64_t *wq = xmalloc((size_t)P * sizeof *wq);
		double *v = xmalloc((size_t)P * sizeof *v);
		double tb = 1e30, tm = 1e30, tf = 1e30;

		jsync_ref_synth(N, 1, 0.0, 0.0, 0, R, NULL, NULL);
		for (int64_t p = 0; p < P; p++)
			v[p] = 1.0 / (double)(p + 1);
		jsync_quantize(v, P, vq);
		for (int r = 0; r < reps; r++) {
			double t0 = now();
			jsync_best_cpu(R, N, 0, P, ch);
			double t1 = now();
			memset(wq, 0, (size_t)P * sizeof *wq);
			jsync_matvec_cpu(ch, N, 0, P, vq, wq);
			double t2 = now();
			tb = t1 - t0 < tb ? t1 - t0 : tb;
			tm = t2 - t1 < tm ? t2 - t1 : tm;
			if (r == 0) {
				memset(wq, 0, (size_t)P * sizeof *wq);
				jsync_matvec_fused_cpu(R, N, 0, P, vq, wq);
				tf = now() - t2;
			}
		}
		printf("%6lld %12lld %12.3g %8.1f %12.3g %8.1f %12.3g\n",
		       (long long)N, (long long)T, (double)T / tb,
		       (double)T / tb / rb, (double)T / tm, (double)T / tm / rm,
		       (double)T / tf);
		free(R);
		free(ch);
		free(vq);
		free(wq);
		free(v);
	}
	return 0;
}
