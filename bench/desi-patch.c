/* Single-core timing of the DESI patch extraction kernels on the reference patch, fast and eigh routes. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fitsio.h>

#include "../codelets/desi/extract.h"
#include "../src/base/cpuisa.h"
#include "benchutil.h"

/*
 * DESIGN.  Usage: desi-patch [ref_patch.fits [reps [K]]] (default
 * $SP_SHARED/data/desi/ref_patch.fits, 50 repetitions).  Times each step
 * per patch, averaged over the repetitions, the eigendecomposition route of
 * the decorrelation in the same run, and splits the fast decorrelation
 * into its band Cholesky + selected inverse part (timed with no core
 * fibre) and the per-block part.  GFLOP/s use nominal operation counts:
 * A'NA 3 flops per (pair, shared pixel) term; band Cholesky n kd^2
 * (kd = 156 fibre-major, for the decorrelation and the solve alone; in the
 * pipeline the solve reuses the decorrelation's factor, extract_batch.c);
 * Takahashi 2 kd^2 per column; an eigendecomposition with vectors
 * ~4.7 m^3 (tridiagonal reduction 4/3, divide and conquer ~4/3,
 * back-transformation 2: dsyevd's; the batched QL of eigh_simd.h does
 * more, so its GFLOP/s are nominal).  A patch's 5 blocks go through the
 * SIMD lanes as 4 + 1 here; the pipeline fills the lanes across patches.
 *
 * Streaming (a third argument K > 1): the normal equations of repetition k
 * go to buffer k mod K, and the solve and the decorrelations read the
 * buffer written K - 1 repetitions before, as the pipeline's decorrelate
 * task reads what a patch task wrote earlier, from memory rather than
 * from the cache (K = 32: 69 MB of 2.1 MB matrices).  Every buffer holds
 * the same patch, so the results do not change; the times then include
 * the matrices' traffic to and from memory (bench/percore runs both
 * modes side by side on many cores).  The eigendecomposition route is not
 * run when streaming: its ~30 ms per repetition would leave the memory
 * idle most of the time, unlike the pipeline's patch and decorrelate
 * tasks.
 */

extern void openblas_set_num_threads(int);

static void *read_hdu(fitsfile *f, const char *name, size_t n, int type, int *st)
{
	int anynul = 0;
	void *buf = xmalloc(n * (type == TDOUBLE ? sizeof(double) : sizeof(int32_t)));
	fits_movnam_hdu(f, IMAGE_HDU, (char *)name, 0, st);
	fits_read_img(f, type, 1, (LONGLONG)n, NULL, buf, &anynul, st);
	return buf;
}

/* (pair, shared pixel) terms of A'NA, and the fibre-major half-bandwidth. */
static void count_terms(const desi_patch_t *p, const int32_t *xc, const int32_t *yc,
			double *terms, int *kd)
{
	const int n = desi_patch_n(p);
	*terms = 0;
	*kd = 0;
	for (int a = 0; a < n; a++)
		for (int b = a; b < n; b++) {
			int r0 = yc[a] > yc[b] ? yc[a] : yc[b], c0 = xc[a] > xc[b] ? xc[a] : xc[b];
			int r1 = (yc[a] < yc[b] ? yc[a] : yc[b]) + p->sy;
			int c1 = (xc[a] < xc[b] ? xc[a] : xc[b]) + p->sx;
			r0 = r0 > p->ymin ? r0 : p->ymin;
			r1 = r1 < p->ymin + p->ny ? r1 : p->ymin + p->ny;
			c0 = c0 > p->xmin ? c0 : p->xmin;
			c1 = c1 < p->xmin + p->nx ? c1 : p->xmin + p->nx;
			if (r0 < r1 && c0 < c1) {
				*terms += (double)(r1 - r0) * (c1 - c0);
				if (b - a > *kd)
					*kd = b - a;
			}
		}
}

int main(int argc, char **argv)
{
	char def[1024];
	const char *sh = getenv("SP_SHARED");
	snprintf(def, sizeof def, "%s/data/desi/ref_patch.fits", sh && *sh ? sh : "../shared");
	const char *path = argc > 1 ? argv[1] : def;
	const int reps = argc > 2 ? atoi(argv[2]) : 50;
	const int nbuf = argc > 3 ? atoi(argv[3]) : 1;
	fitsfile *f = NULL;
	int st = 0, v[6];
	static const char *keys[6] = { "YMIN", "XMIN", "NY", "NX", "NSPECPAD", "NWAVETOT" };

	openblas_set_num_threads(1);
	if (fits_open_file(&f, path, READONLY, &st) != 0) {
		fprintf(stderr, "%s: cannot open\n", path);
		return 1;
	}
	if (reps < 1 || nbuf < 1 || nbuf > 4096) {
		fprintf(stderr, "desi-patch: reps must be >= 1 and K in 1..4096\n");
		return 2;
	}
	for (int i = 0; i < 6; i++)
		fits_read_key(f, TINT, keys[i], &v[i], NULL, &st);
	desi_patch_t p = { .nfib = v[4], .nwave = v[5], .sy = 11, .sx = 17, .ymin = v[0],
			   .xmin = v[1], .ny = v[2], .nx = v[3], .core_f0 = 1, .core_nf = 5,
			   .core_w0 = 12, .core_nw = 50, .ndiag = 5, .regularize = 0.0,
			   .psferr = 0.01 };
	const int n = desi_patch_n(&p), m = p.nwave;
	const size_t npix = (size_t)p.ny * p.nx, nc = (size_t)p.core_nf * p.core_nw;
	double *pix = read_hdu(f, "PIX", npix, TDOUBLE, &st);
	double *ivar = read_hdu(f, "IVAR", npix, TDOUBLE, &st);
	double *spots = read_hdu(f, "SPOTS", (size_t)n * p.sy * p.sx, TDOUBLE, &st);
	int32_t *xc = read_hdu(f, "XC", (size_t)n, TINT, &st);
	int32_t *yc = read_hdu(f, "YC", (size_t)n, TINT, &st);
	fits_close_file(f, &st);
	if (st != 0) {
		char msg[FLEN_STATUS];
		fits_get_errstatus(st, msg);
		fprintf(stderr, "%s: %s\n", path, msg);
		return 1;
	}
	double *icovs = xmalloc((size_t)nbuf * n * n * sizeof *icovs), *y = xmalloc(n * sizeof *y);
	double *fw = xmalloc(n * sizeof *fw), *x = xmalloc(n * sizeof *x);
	double *flux = xmalloc(nc * sizeof *flux), *iv = xmalloc(nc * sizeof *iv);
	double *rd = xmalloc(nc * (2 * p.ndiag + 1) * sizeof *rd);
	double *c2 = xmalloc(nc * sizeof *c2), *pm = xmalloc(nc * sizeof *pm);
	double *work = xmalloc(desi_extract_work_size(&p) * sizeof *work);
	/* A'NA's scratch, as the pipeline's per-thread buffer */
	double *nwork = xmalloc(desi_extract_normal_work_size(&p) * sizeof *nwork);
	desi_patch_t p0 = p;
	p0.core_nf = 0;

	/* every buffer holds the patch's normal equations before the timing,
	 * and x its solution (the decorrelation's input, the same for all) */
	for (int k = 0; k < nbuf; k++)
		desi_extract_normal_cpu_isa(sp_cpu_isa(), &p, spots, xc, yc, pix, ivar,
					    icovs + (size_t)k * n * n, y, fw, nwork);
	desi_extract_solve_cpu(&p, icovs, y, x, work);
	double t[7] = { 0 };
	for (int k = 0; k < reps; k++) {
		/* written now; read: the one written nbuf - 1 repetitions ago
		 * (the same with one buffer), first by the fast decorrelation,
		 * so that in streaming mode it is the step that finds the
		 * matrix in memory, as in the pipeline (where the solve shares
		 * its factor); the steps after it find the band cached */
		double *wcov = icovs + (size_t)(k % nbuf) * n * n;
		const double *icov = icovs + (size_t)((k + 1) % nbuf) * n * n;
		double t0 = now();
		desi_extract_normal_cpu_isa(sp_cpu_isa(), &p, spots, xc, yc, pix, ivar, wcov, y, fw,
					    nwork);
		double t1 = now();
		desi_decorrelate_cpu(&p, icov, x, flux, iv, rd, NULL, work);
		double t2 = now();
		desi_extract_solve_cpu(&p, icov, y, x, work);
		double t3 = now();
		desi_extract_chi2_cpu(&p, spots, xc, yc, pix, ivar, x, c2, pm, work);
		double t4 = now();
		/* not when streaming: its ~30 ms would dilute the traffic */
		if (nbuf == 1)
			desi_decorrelate_eigh_cpu(&p, icov, x, flux, iv, rd, NULL, work);
		double t5 = now();
		desi_decorrelate_cpu(&p0, icov, x, flux, iv, rd, NULL, work);
		double t6 = now();
		t[0] += t1 - t0;
		t[2] += t2 - t1;
		t[1] += t3 - t2;
		t[3] += t4 - t3;
		t[4] += t5 - t4;
		t[5] += t6 - t5;
	}
	for (int i = 0; i < 6; i++)
		t[i] *= 1e3 / reps; /* ms */
	double terms;
	int kd;
	count_terms(&p, xc, yc, &terms, &kd);
	if (kd < m - 1)
		kd = m - 1;
	const double fl_norm = 3 * terms, fl_chol = (double)n * kd * kd;
	const double fl_taka = 2.0 * (n - p.core_f0 * m) * kd * kd;
	const double fl_blk = p.core_nf * 4.7 * m * m * m;
	const double fl_eigh = 4.7 * (double)n * n * n + p.core_nf * 2.0 * n * m * m + fl_blk;
	printf("desi-patch: n = %d, %zu pixels, kd = %d, %d repetitions, ms per patch, one core%s\n",
	       n, npix, kd, reps, nbuf > 1 ? "" : ", cache-resident");
	if (nbuf > 1)
		printf("  streaming: %d normal-equation buffers (%.1f MB), each read %d repetitions "
		       "after it was written\n",
		       nbuf, (double)nbuf * n * n * sizeof *icovs / 1e6, nbuf - 1);
	printf("  normal (A'NA, y, fw)   %8.3f ms  %6.2f GFLOP/s\n", t[0], fl_norm / t[0] * 1e-6);
	printf("  solve alone (band Cholesky, fibre-major kd = %d) %8.3f ms  %6.2f GFLOP/s\n",
	       kd, t[1], ((double)n * kd * kd + 4.0 * n * kd) / t[1] * 1e-6);
	printf("  decorrelate, fast      %8.3f ms  %6.2f GFLOP/s\n", t[2],
	       (fl_chol + fl_taka + fl_blk) / t[2] * 1e-6);
	printf("    band Cholesky + selected inverse %8.3f ms, %d blocks %8.3f ms\n", t[5],
	       p.core_nf, t[2] - t[5]);
	if (nbuf == 1)
		printf("  decorrelate, eigh      %8.3f ms  %6.2f GFLOP/s\n", t[4],
		       fl_eigh / t[4] * 1e-6);
	printf("  chi2, pixmask          %8.3f ms\n", t[3]);
	if (nbuf == 1)
		printf("  total fast %.3f ms, with eigh %.3f ms (speed-up of decorrelation %.1fx)\n",
		       t[0] + t[1] + t[2] + t[3], t[0] + t[1] + t[4] + t[3], t[4] / t[2]);
	else
		printf("  total fast %.3f ms\n", t[0] + t[1] + t[2] + t[3]);
	free(pix);
	free(ivar);
	free(spots);
	free(xc);
	free(yc);
	free(icovs);
	free(y);
	free(fw);
	free(x);
	free(flux);
	free(iv);
	free(rd);
	free(c2);
	free(pm);
	free(work);
	free(nwork);
	return 0;
}
