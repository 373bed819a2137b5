/* Host emulation of the DESI CUDA kernels' bodies (desi_kern.h): spots, k_window, k_normal, k_regularise, k_decorrelate, k_chi2pix, k_chi2core, k_write and k_stitch, block by block, against the CPU. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cblas.h>
#include <lapacke.h>

#include "../codelets/desi/desi_kern.h"
#include "../codelets/desi/extract.h"
#include "../codelets/desi/psf.h"
#include "rng.h"

/*
 * A synthetic subbundle: NF fibres x M padded wavelengths per patch, NP
 * patches along the wavelength axis of a bundle of NB fibres, Gaussian-ish
 * positive spots of 5 x 7 pixels on a small image with masked, NaN and
 * zero-ivar pixels, and windows that reach outside the image (the clipping
 * paths).  The emulation walks the kernels' grids exactly as the launches
 * in extract_cuda.cu give them, with the block and thread indices the
 * bodies see, and compares with desi_patch_batch_cpu() bit for bit.
 */
enum { NB = 5, NF = 3, M = 12, NP = 4, SY = 5, SX = 7, NFULL = 60, IMY = 70, IMX = 48 };

typedef struct fixture {
	double spots[NB * NFULL * SY * SX];
	int32_t xc[NB * NFULL], yc[NB * NFULL];
	float img[IMY * IMX], ivar[IMY * IMX];
	int ymin[NP], ny[NP], xmin[NP], nx[NP], w0[NP], cnw[NP];
	desi_batch_t b;
} fixture_t;

static double uniform(uint64_t *s)
{
	return (double)(sp_splitmix64(s) >> 11) * 0x1.0p-53;
}

static void make_fixture(fixture_t *fx, int fib0)
{
	uint64_t s = 12345;
	for (int f = 0; f < NB; f++)
		for (int w = 0; w < NFULL; w++) {
			size_t j = (size_t)f * NFULL + w;
			for (int y = 0; y < SY; y++)
				for (int x = 0; x < SX; x++) {
					double dy = y - 2 + 0.3 * uniform(&s), dx = x - 3 + 0.3 * uniform(&s);
					fx->spots[j * SY * SX + y * SX + x] = exp(-0.5 * (dy * dy + dx * dx / 2));
				}
			fx->xc[j] = 4 + 8 * f + (int)(3 * uniform(&s)) - 6; /* fibre 0 starts left of the image */
			fx->yc[j] = w + (int)(2 * uniform(&s)) - 3;
		}
	for (int p = 0; p < IMY * IMX; p++) {
		fx->img[p] = (float)(100 * uniform(&s) - 5);
		double u = uniform(&s);
		fx->ivar[p] = u < 0.05 ? 0.0f : u < 0.07 ? -1.0f : (float)(0.01 + u);
	}
	fx->img[7 * IMX + 9] = NAN;
	fx->ivar[20 * IMX + 11] = INFINITY;
	for (int i = 0; i < NP; i++) {
		fx->w0[i] = 10 * i;
		fx->cnw[i] = 8;
		fx->ymin[i] = fx->w0[i] - 4;           /* the first window starts above the image */
		fx->ny[i] = M + 6;
		fx->xmin[i] = 8 * fib0 - 3;
		fx->nx[i] = 8 * NF + 5 + (i == NP - 1 ? 30 : 0); /* the last reaches past the image */
	}
	fx->b = (desi_batch_t){
		.p = { .nfib = NF, .nwave = M, .sy = SY, .sx = SX, .core_f0 = 1, .core_nf = 1,
		       .core_w0 = 2, .core_nw = 8, .ndiag = 2, .regularize = 0.5, .psferr = 0.01 },
		.np = NP, .ymin = fx->ymin, .ny = fx->ny, .xmin = fx->xmin, .nx = fx->nx,
		.w0 = fx->w0, .core_nw = fx->cnw, .fib0 = fib0, .nfullwave = NFULL, .npix_y = IMY,
		.npix_x = IMX, .nwave_grid = 60, .nfield = 4 + 5, .col0 = 0, .dw = 0.8,
	};
}

static int npix_of(const desi_batch_t *b, int i)
{
	return (b->ny[i] > 0 ? b->ny[i] : 0) * (b->nx[i] > 0 ? b->nx[i] : 0);
}

/* k_normal, k_window and k_regularise as desi_patch_batch_cuda() launches
 * them for one chunk (all NP patches), emulated; gridx: k_window's grid
 * width (the launch's grid_for(); small here, to run the grid-stride loop). */
static void emulate_patch(const desi_batch_t *b, const double *spots, const int32_t *xc,
			  const int32_t *yc, const float *img, const float *ivar, double *normal,
			  unsigned gridx)
{
	const int n = b->p.nfib * b->p.nwave, m = b->p.nwave, P = b->np;
	long long poff[NP], off = 0;
	for (int i = 0; i < P; i++) {
		poff[i] = off;
		off += npix_of(b, i);
	}
	double *wpix = calloc((size_t)off, sizeof *wpix), *wivar = calloc((size_t)off, sizeof *wivar);
	double *icov = normal, *y = icov + (size_t)P * n * n, *fw = y + (size_t)P * n;
	assert_non_null(wpix);
	/* desi_patch_batch_cuda()'s memset: the band slots unknown */
	for (int i = 0; i < P; i++)
		fw[(size_t)P * n + i] = 0.0;
	assert_non_null(wivar);

	/* k_window<<<(gridx, P), THREADS>>> */
	for (int by = 0; by < P; by++)
		for (unsigned bx = 0; bx < gridx; bx++)
			for (int tx = 0; tx < DSK_THREADS; tx++) {
				const int ny = b->ny[by] > 0 ? b->ny[by] : 0;
				const int nx = b->nx[by] > 0 ? b->nx[by] : 0;
				for (long long q = (long long)bx * DSK_THREADS + tx; q < (long long)ny * nx;
				     q += (long long)gridx * DSK_THREADS)
					dsk_window_px(img, ivar, b->npix_y, b->npix_x, b->ymin[by] + q / nx,
						      b->xmin[by] + q % nx, &wpix[poff[by] + q],
						      &wivar[poff[by] + q]);
			}
	/* k_normal<<<(nt, nt, P), (TILE, TILE)>>>, blocks in reverse order */
	const int nt = (n + DSK_TILE - 1) / DSK_TILE;
	const size_t ss = (size_t)b->p.sy * b->p.sx;
	for (int bz = P - 1; bz >= 0; bz--)
		for (int by = nt - 1; by >= 0; by--)
			for (int bx = nt - 1; bx >= 0; bx--) {
				if (bx < by)
					continue;
				for (int ty = 0; ty < DSK_TILE; ty++)
					for (int tx = 0; tx < DSK_TILE; tx++) {
						int j1 = by * DSK_TILE + ty, j2 = bx * DSK_TILE + tx;
						if (j1 >= n || j2 >= n || j2 < j1)
							continue;
						size_t s1 = (size_t)(b->fib0 + j1 / m) * b->nfullwave + b->w0[bz] + j1 % m;
						size_t s2 = (size_t)(b->fib0 + j2 / m) * b->nfullwave + b->w0[bz] + j2 % m;
						dsk_win_t w = { b->ymin[bz], b->xmin[bz],
								b->ny[bz] > 0 ? b->ny[bz] : 0,
								b->nx[bz] > 0 ? b->nx[bz] : 0, b->p.sy, b->p.sx };
						dsk_normal_entry(&w, n, j1, j2, spots + s1 * ss, xc[s1], yc[s1],
								 spots + s2 * ss, xc[s2], yc[s2],
								 wpix + poff[bz], wivar + poff[bz],
								 icov + (size_t)bz * n * n, y + (size_t)bz * n,
								 fw + (size_t)bz * n);
					}
			}
	/* k_regularise<<<P, THREADS>>>: a max reduction over the block, then
	 * a strided loop over the diagonal */
	for (int i = 0; i < P; i++) {
		double red[DSK_THREADS];
		const double *f = fw + (size_t)i * n;
		for (int t = 0; t < DSK_THREADS; t++) {
			double mx = 0.0;
			for (int j = t; j < n; j += DSK_THREADS)
				if (f[j] > mx)
					mx = f[j];
			red[t] = mx;
		}
		for (int st = DSK_THREADS / 2; st > 0; st >>= 1)
			for (int t = 0; t < st; t++)
				if (red[t + st] > red[t])
					red[t] = red[t + st];
		const double minweight = dsk_minweight(red[0]);
		double *ic = icov + (size_t)i * n * n;
		for (int t = 0; t < DSK_THREADS; t++)
			for (int j = t; j < n; j += DSK_THREADS)
				ic[(size_t)j * n + j] =
					dsk_regularised(ic[(size_t)j * n + j], f[j], minweight, b->p.regularize);
	}
	free(wpix);
	free(wivar);
}

static void check_patch_phase(int fib0, unsigned gridx)
{
	fixture_t *fx = calloc(1, sizeof *fx);
	assert_non_null(fx);
	make_fixture(fx, fib0);
	size_t nd = desi_normal_doubles(&fx->b);
	double *cpu = malloc(nd * sizeof *cpu), *emu = malloc(nd * sizeof *emu);
	assert_non_null(cpu);
	assert_non_null(emu);
	memset(emu, 0xff, nd * sizeof *emu); /* every entry must be written */
	/* the CPU writes icov's upper triangle only (extract.h): its strictly
	 * lower one keeps this pattern, a NaN */
	memset(cpu, 0xff, nd * sizeof *cpu);
	assert_int_equal(desi_patch_batch_cpu(&fx->b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
					      cpu), 0);
	emulate_patch(&fx->b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar, emu, gridx);
	/* not vacuous: the normal equations hold overlaps, fluxes and weights */
	const size_t n = NF * M;
	size_t nonzero = 0;
	for (size_t k = 0; k < (size_t)NP * n * n; k++)
		nonzero += cpu[k] != 0.0 && !isnan(cpu[k]);
	assert_true(nonzero > (size_t)NP * n * 4);
	size_t bad = 0, lower = 0;
	const size_t nsum = (size_t)NP * (n * n + 2 * n); /* icov, y, fluxweight */
	assert_int_equal(nd, nsum + NP);
	for (size_t k = 0; k < nsum; k++) {
		const size_t e = k % (n * n);
		if (k < (size_t)NP * n * n && e / n > e % n) { /* strictly lower */
			const unsigned char *cb = (const unsigned char *)&cpu[k];
			for (size_t q = 0; q < sizeof cpu[k]; q++)
				lower += cb[q] != 0xff;
			/* the GPU's patch phase writes it, the mirror of the upper */
			if (memcmp(&emu[k], &emu[k - e + (e % n) * n + e / n], sizeof emu[k]) != 0 &&
			    bad++ < 5)
				print_message("# entry %zu: emulated lower %.17g, not the upper's\n",
					      k, emu[k]);
			continue;
		}
		if (memcmp(&cpu[k], &emu[k], sizeof cpu[k]) != 0 && bad++ < 5)
			print_message("# entry %zu: cpu %.17g emulated %.17g\n", k, cpu[k], emu[k]);
	}
	assert_int_equal(bad, 0);
	assert_int_equal(lower, 0);
	/* the band slots: the GPU's unknown (0), the CPU's 1 + the largest
	 * offset of an entry != 0, as a scan of the matrix finds it */
	for (int i = 0; i < NP; i++) {
		const double *ic = cpu + (size_t)i * n * n;
		int maxoff = -1;
		for (size_t r = 0; r < n; r++)
			for (size_t c = r + 1; c < n; c++)
				if (ic[r * n + c] != 0.0 && (int)(c - r) > maxoff)
					maxoff = (int)(c - r);
		assert_true(maxoff > 0);
		assert_true(emu[nsum + i] == 0.0);
		assert_true(cpu[nsum + i] == 1.0 + maxoff);
	}
	free(cpu);
	free(emu);
	free(fx);
}

/* iCov, y, fluxweight: bit for bit, with the window reaching outside the
 * image on the left (fibre 0) and elsewhere. */
static void test_normal_left(void **state)
{
	(void)state;
	check_patch_phase(0, 1);
}

static void test_normal_inner(void **state)
{
	(void)state;
	check_patch_phase(2, 2);
}

/* k_chi2pix<<<(gridx, P), THREADS>>> then k_chi2core<<<P, THREADS>>>, from
 * a given x per patch (any x: chi2 only evaluates the model A x), against
 * desi_extract_chi2_cpu() on the patch's gathered spots, bit for bit. */
static void test_chi2(void **state)
{
	(void)state;
	fixture_t *fx = calloc(1, sizeof *fx);
	assert_non_null(fx);
	make_fixture(fx, 1);
	const desi_batch_t *b = &fx->b;
	const int n = NF * M, m = M;
	const size_t ss = SY * SX;
	const unsigned gridx = 2;
	uint64_t seed = 99;
	int nonzero = 0;

	for (int i = 0; i < NP; i++) {
		desi_patch_t p = b->p;
		p.ymin = b->ymin[i];
		p.xmin = b->xmin[i];
		p.ny = b->ny[i];
		p.nx = b->nx[i];
		p.core_nw = b->core_nw[i];
		const size_t npix = (size_t)p.ny * p.nx;
		double x[NF * M], *pspots = malloc((size_t)n * ss * sizeof *pspots);
		int32_t pxc[NF * M], pyc[NF * M];
		double *wpix = malloc(npix * sizeof *wpix), *wivar = malloc(npix * sizeof *wivar);
		double *work = malloc(desi_extract_work_size(&p) * sizeof *work);
		double *chi2 = malloc(npix * sizeof *chi2), *tpos = malloc(npix * sizeof *tpos);
		double cpu_c2[NF * M], cpu_pm[NF * M], emu_c2[NF * M], emu_pm[NF * M];
		assert_non_null(pspots);
		assert_non_null(work);
		for (int j = 0; j < n; j++) {
			size_t sj = (size_t)(b->fib0 + j / m) * NFULL + b->w0[i] + j % m;
			memcpy(pspots + (size_t)j * ss, fx->spots + sj * ss, ss * sizeof *pspots);
			pxc[j] = fx->xc[sj];
			pyc[j] = fx->yc[sj];
			x[j] = j % 7 == 3 ? 0.0 : 50 * uniform(&seed) - 5; /* some zeros: skipped */
		}
		for (size_t q = 0; q < npix; q++)
			dsk_window_px(fx->img, fx->ivar, IMY, IMX, p.ymin + (long long)(q / p.nx),
				      p.xmin + (long long)(q % p.nx), &wpix[q], &wivar[q]);
		desi_extract_chi2_cpu(&p, pspots, pxc, pyc, wpix, wivar, x, cpu_c2, cpu_pm, work);

		/* the kernels, on the bundle's arrays */
		const dsk_win_t w = { p.ymin, p.xmin, p.ny, p.nx, SY, SX };
		const dsk_cols_t cols = { fx->spots, fx->xc, fx->yc, b->fib0, NFULL, b->w0[i], m };
		/* each block's pass: the ordered list of the columns that meet
		 * its pixels' rows, then its threads' pixels over that list */
		memset(chi2, 0xff, npix * sizeof *chi2);
		int listed = 0, passes = 0;
		for (unsigned bx = 0; bx < gridx; bx++)
			for (long long base = (long long)bx * DSK_THREADS; base < (long long)npix;
			     base += (long long)gridx * DSK_THREADS) {
				const long long last = (base + DSK_THREADS < (long long)npix ? base + DSK_THREADS
											: (long long)npix) - 1;
				const int r0 = (int)(base / p.nx), r1 = (int)(last / p.nx);
				int list[NF * M], nl = 0;
				for (int j = 0; j < n; j++)
					if (dsk_chi2_col_meets(&w, &cols, x, j, r0, r1))
						list[nl++] = j;
				listed += nl;
				passes++;
				for (int tx = DSK_THREADS - 1; tx >= 0; tx--) {
					const long long q = base + tx;
					if (q >= (long long)npix)
						continue;
					double c2, tp;
					dsk_chi2_pixel_cols(&w, &cols, list, nl, x, (int)(q / p.nx),
							    (int)(q % p.nx), wpix[q], wivar[q], p.psferr,
							    &chi2[q], &tpos[q]);
					/* the same bits as the sum over every column */
					dsk_chi2_pixel(&w, &cols, n, x, (int)(q / p.nx), (int)(q % p.nx),
						       wpix[q], wivar[q], p.psferr, &c2, &tp);
					assert_memory_equal(&c2, &chi2[q], sizeof c2);
					assert_memory_equal(&tp, &tpos[q], sizeof tp);
				}
			}
		assert_true(passes > 0 && listed < passes * n); /* the lists leave columns out */
		const int ncore = p.core_nf * p.core_nw;
		for (int tx = 0; tx < DSK_THREADS; tx++)
			for (int e = tx; e < ncore; e += DSK_THREADS) {
				int fc = e / p.core_nw, wc = e % p.core_nw;
				int j = (p.core_f0 + fc) * m + p.core_w0 + wc;
				dsk_chi2_core(&w, &cols, j, chi2, tpos, wivar, &emu_c2[e], &emu_pm[e]);
			}
		for (int e = 0; e < ncore; e++)
			nonzero += cpu_c2[e] != 0.0;
		assert_memory_equal(emu_c2, cpu_c2, (size_t)ncore * sizeof *cpu_c2);
		assert_memory_equal(emu_pm, cpu_pm, (size_t)ncore * sizeof *cpu_pm);
		free(pspots);
		free(wpix);
		free(wivar);
		free(work);
		free(chi2);
		free(tpos);
	}
	assert_true(nonzero > NP * 4); /* not vacuous */
	free(fx);
}

/* decor_finish() of extract_cuda.cu for one block, from the eigenvalues ev
 * and the row-major eigenvectors V (column k the k-th) of C_bb: R, flux,
 * ivar, Rdiags and (xflux, desi_batch_t.xflux) the deconvolved flux into
 * out [nf_out][m], the kernel's thread loops in order.  Returns 1 when the
 * block fails (an eigenvalue not > 0). */
static int emulate_finish(double *A, double *V, const double *ev, const double *xb, int m,
			  int core_w0, int cnw, int ndiag, int xflux, double *out)
{
	const int nt = DSK_THREADS;
	double sv[128];
	for (int k = 0; k < m; k++)
		if (!(ev[k] > 0.0))
			return 1;
	for (int e = 0; e < m * m; e++)
		dsk_decor_w(V, ev, m, e);
	for (int e = 0; e < m * m; e++)
		A[e] = dsk_decor_q(V, m, e);
	for (int r = 0; r < m; r++)
		sv[r] = dsk_decor_rowsum(A, m, r);
	for (int e = 0; e < m * m; e++)
		A[e] *= 1.0 / sv[e / m];
	for (int w = 0; w < cnw; w++)
		dsk_decor_flux(A, sv, xb, m, core_w0, w, out);
	for (int e = 0; e < (2 * ndiag + 1) * cnw; e++)
		dsk_decor_rdiag(A, m, core_w0, ndiag, cnw, e, out);
	for (int t = 0; xflux && t < nt; t++)
		for (int w = t; w < cnw; w += nt)
			dsk_decor_xflux(xb, m, core_w0, 4 + 2 * ndiag + 1, w, out);
	return 0;
}

/* One block of k_decorrelate for a core fibre: C_bb -> Jacobi sweeps, as
 * the kernel's thread loops in order (each loop a phase between two
 * __syncthreads()), then emulate_finish(). */
static int emulate_decorrelate(const double *cbb, const double *xb, int m, int core_w0, int cnw,
			       int ndiag, int xflux, double *out)
{
	const int half = (m + 1) / 2, mm = 2 * half, nt = DSK_THREADS;
	double *A = malloc((size_t)m * m * sizeof *A), *V = malloc((size_t)m * m * sizeof *V);
	double ev[128], cs[64], sn[64];
	int pp[64], pq[64], rc = 0;
	assert_non_null(A);
	assert_non_null(V);
	for (int e = 0; e < m * m; e++) {
		A[e] = cbb[e];
		V[e] = e / m == e % m ? 1.0 : 0.0;
	}
	for (int sweep = 0; sweep < 40; sweep++) {
		int flag = 0;
		for (int r = 0; r < mm - 1; r++) {
			for (int t = 0; t < nt; t++)
				for (int k = t; k < half; k += nt)
					flag |= dsk_jacobi_pair(A, m, mm, r, k, pp, pq, cs, sn);
			for (int t = 0; t < nt; t++)
				for (int e = t; e < half * m; e += nt)
					dsk_jacobi_rows(A, m, e, pp, pq, cs, sn);
			for (int t = 0; t < nt; t++)
				for (int e = t; e < half * m; e += nt)
					dsk_jacobi_cols(A, V, m, e, pp, pq, cs, sn);
			for (int t = 0; t < nt; t++)
				for (int k = t; k < half; k += nt)
					dsk_jacobi_zero(A, m, k, pp, pq, sn);
		}
		if (!flag)
			break;
	}
	for (int k = 0; k < m; k++)
		ev[k] = A[k * m + k];
	rc = emulate_finish(A, V, ev, xb, m, core_w0, cnw, ndiag, xflux, out);
	free(A);
	free(V);
	return rc;
}

/* SP_DESI_EIGEN=syevb's route for one block: cusolverDnXsyevBatched on the
 * column-major C_bb (lower, lda m) replayed as LAPACK dsyevd, then
 * k_decor_finish (column-major vectors to row-major V), emulate_finish(). */
static int emulate_syevb(const double *cbb, const double *xb, int m, int core_w0, int cnw,
			 int ndiag, int xflux, double *out)
{
	double *A = malloc((size_t)m * m * sizeof *A), *V = malloc((size_t)m * m * sizeof *V);
	double ev[128];
	assert_non_null(A);
	assert_non_null(V);
	memcpy(A, cbb, (size_t)m * m * sizeof *A);
	int info = LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'V', 'L', m, A, m, ev);
	for (int e = 0; e < m * m; e++)
		V[(e % m) * m + e / m] = A[e];
	for (int k = 0; k < m; k++)
		ev[k] = info == 0 ? ev[k] : -1.0;
	int rc = emulate_finish(A, V, ev, xb, m, core_w0, cnw, ndiag, xflux, out);
	free(A);
	free(V);
	return rc;
}

static void emulate_solve(const double *L, int n, double *x);

/* desi_decorrelate_batch_cuda()'s library calls and kernels for one patch,
 * on the host with the same arguments (sizes, leading dimensions, strides,
 * column-major): cusolverDnDpotrfBatched as LAPACK dpotrf, k_solve
 * (emulate_solve), k_eye, cublasDtrsmBatched as cblas_dtrsm,
 * cublasDgemmStridedBatched as cblas_dgemm per core fibre, then
 * k_decorrelate; against desi_decorrelate_cpu() (band Cholesky, selected
 * inverse, dsyevd: another algorithm) from the same normal equations.
 * Agreement to 1e-11 of each field's largest value (measured: ~2e-14). */
static void test_decorrelate(void **state)
{
	(void)state;
	fixture_t *fx = calloc(1, sizeof *fx);
	assert_non_null(fx);
	make_fixture(fx, 2);
	const desi_batch_t *b = &fx->b;
	const int n = NF * M, m = M, nd = 2 * b->p.ndiag + 1;
	size_t nn = desi_normal_doubles(b);
	double *normal = malloc(nn * sizeof *normal);
	assert_non_null(normal);
	/* NaN where the CPU does not write (icov's strictly lower triangle):
	 * the device route replayed below must not read it */
	memset(normal, 0xff, nn * sizeof *normal);
	assert_int_equal(desi_patch_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar, normal), 0);
	double worst = 0.0;
	for (int i = 0; i < NP; i++) {
		desi_patch_t p = b->p;
		p.ymin = b->ymin[i];
		p.xmin = b->xmin[i];
		p.ny = b->ny[i];
		p.nx = b->nx[i];
		p.core_nw = b->core_nw[i];
		p.core_nf = 2; /* fibres 1 and 2: the strided batch has two members */
		const double *icov = normal + (size_t)i * n * n, *y = normal + (size_t)NP * n * n + (size_t)i * n;
		double x[NF * M], flux[NF * M], iv[NF * M], rd[NF * 5 * M];
		double *work = malloc(desi_extract_work_size(&p) * sizeof *work);
		double *C = malloc((size_t)n * n * sizeof *C);
		assert_non_null(work);
		assert_non_null(C);
		assert_int_equal(desi_extract_solve_cpu(&p, icov, y, x, work), 0);
		assert_int_equal(desi_decorrelate_cpu(&p, icov, x, flux, iv, rd, NULL, work), 0);
		/* the device's route: iCov (symmetric: its row-major copy is
		 * column-major) factored and solved in place, lda = n */
		const int K = p.core_nf * m;
		double xd[NF * M], *Z = malloc((size_t)n * K * sizeof *Z);
		double *cbb = malloc((size_t)p.core_nf * m * m * sizeof *cbb);
		assert_non_null(Z);
		assert_non_null(cbb);
		memcpy(C, icov, (size_t)n * n * sizeof *C);
		memcpy(xd, y, (size_t)n * sizeof *xd);
		assert_int_equal(LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', n, C, n), 0);
		emulate_solve(C, n, xd);
		for (int j = 0; j < n; j++)
			assert_true(fabs(xd[j] - x[j]) <= 1e-11 * (1.0 + fabs(x[j])));
		const size_t first = (size_t)p.core_f0 * m;
		for (int t = 0; t < DSK_THREADS; t++) /* k_eye, one patch */
			for (size_t e = (size_t)t; e < (size_t)n * K; e += DSK_THREADS)
				Z[e] = dsk_eye(e, (size_t)n, (size_t)K, first);
		/* the trailing rows only, from dsk_pointers()'s pointers (lda n) */
		double *pa[1], *px[1], *pl[1], *pzt[1];
		int fl[1];
		dsk_pointers(0, (size_t)n, (size_t)K, first, C, xd, Z, pa, px, pl, pzt, fl);
		cblas_dtrsm(CblasColMajor, CblasLeft, CblasLower, CblasNoTrans, CblasNonUnit,
			    n - (int)first, K, 1.0, pl[0], n, pzt[0], n);
		for (int bb = 0; bb < p.core_nf; bb++) /* strided batch: n m apart, C_bb m m apart */
			cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, m, m, n, 1.0,
				    Z + (size_t)bb * n * m, n, Z + (size_t)bb * n * m, n, 0.0,
				    cbb + (size_t)bb * m * m, m);
		for (int fc = 0; fc < p.core_nf; fc++) {
			const int f = p.core_f0 + fc, cnw = p.core_nw;
			double out[(4 + 5 + 1) * M];
			assert_int_equal(nd, 5);
			for (int route = 0; route < 2; route++) {
				if (route == 0)
					assert_int_equal(emulate_decorrelate(cbb + (size_t)fc * m * m, xd + f * m, m,
									     p.core_w0, cnw, p.ndiag, 1, out), 0);
				else
					assert_int_equal(emulate_syevb(cbb + (size_t)fc * m * m, xd + f * m, m,
								       p.core_w0, cnw, p.ndiag, 1, out), 0);
				double fbig = 0.0, ibig = 0.0, xbig = 0.0, df = 0.0, di = 0.0, dr = 0.0, dx = 0.0;
				for (int w = 0; w < cnw; w++) {
					fbig = fmax(fbig, fabs(flux[fc * cnw + w]));
					ibig = fmax(ibig, fabs(iv[fc * cnw + w]));
					df = fmax(df, fabs(out[w] - flux[fc * cnw + w]));
					di = fmax(di, fabs(out[m + w] - iv[fc * cnw + w]));
					for (int k = 0; k < nd; k++)
						dr = fmax(dr, fabs(out[(4 + k) * m + w] - rd[((size_t)fc * nd + k) * cnw + w]));
					/* the deconvolved flux: the CPU's x (its band solve) */
					xbig = fmax(xbig, fabs(x[f * m + p.core_w0 + w]));
					dx = fmax(dx, fabs(out[(4 + nd) * m + w] - x[f * m + p.core_w0 + w]));
				}
				assert_true(fbig > 0.0 && ibig > 0.0 && xbig > 0.0);
				worst = fmax(worst, fmax(fmax(df / fbig, dx / xbig), fmax(di / ibig, dr)));
				if (df > 1e-11 * fbig || di > 1e-11 * ibig || dr > 1e-11 || dx > 1e-11 * xbig)
					print_message("# patch %d fibre %d: flux %.3g ivar %.3g rdiag %.3g x %.3g\n",
						      i, fc, df / fbig, di / ibig, dr, dx / xbig);
				assert_true(df <= 1e-11 * fbig && di <= 1e-11 * ibig && dr <= 1e-11 &&
					    dx <= 1e-11 * xbig);
			}
		}
		free(work);
		free(C);
		free(Z);
		free(cbb);
	}
	print_message("# k_decorrelate vs the CPU: worst relative difference %.2g\n", worst);
	free(normal);
	free(fx);
}

/* One block of spots_kernel (psf_cuda.cu) for spot params p: its phases
 * thread by thread, the warp-shuffle sums in the order the hardware forms
 * them (lane l adds lane l + off, or itself past the warp's end). */
static void emulate_spot(const double *p, desi_spot_shape_t sh, double *out, int32_t *xc,
			 int32_t *yc)
{
	const int nx = 2 * sh.hsizex + 1, ny = 2 * sh.hsizey + 1, dx = sh.ghdegx, dy = sh.ghdegy;
	const int nt = DSK_SPOT_THREADS, npix = nx * ny, nwarp = (nt + 31) / 32;
	double Ex[64], Hx[16 * 64], Ey[64], Hy[16 * 64], gx[16 * 64], gy[16 * 64], T[16 * 64];
	double pix[64 * 64], part[DSK_SPOT_THREADS], red[32];
	const double *gh = p + 4;

	*xc = dsk_corner(p[0], sh.hsizex);
	*yc = dsk_corner(p[1], sh.hsizey);
	for (int t = 0; t < nt; t++) /* 1 */
		for (int k = t; k < nx + 1 + ny + 1; k += nt) {
			if (k <= nx)
				dsk_edge(p[0], p[2], nx, dx, k, Ex, Hx);
			else
				dsk_edge(p[1], p[3], ny, dy, k - (nx + 1), Ey, Hy);
		}
	for (int t = 0; t < nt; t++) /* 2 */
		for (int q = t; q < (dx + 1) * nx + (dy + 1) * ny; q += nt) {
			if (q < (dx + 1) * nx)
				gx[q] = dsk_pgh(Ex, Hx, nx, q);
			else
				gy[q - (dx + 1) * nx] = dsk_pgh(Ey, Hy, ny, q - (dx + 1) * nx);
		}
	for (int t = 0; t < nt; t++) /* 3 */
		for (int q = t; q < (dy + 1) * nx; q += nt)
			T[q] = dsk_spot_T(gh, gx, dx, dy, nx, q);
	for (int t = 0; t < nt; t++) { /* 4 */
		part[t] = 0.0;
		for (int q = t; q < npix; q += nt) {
			pix[q] = dsk_spot_pixel(gy, T, dy, ny, nx, q);
			part[t] += pix[q];
		}
	}
	for (int w = 0; w < nwarp; w++) {
		double *v = part + 32 * w;
		for (int off = 16; off > 0; off >>= 1) {
			double nv[32];
			for (int l = 0; l < 32; l++)
				nv[l] = v[l] + (l + off < 32 ? v[l + off] : v[l]);
			memcpy(v, nv, sizeof nv);
		}
		red[w] = v[0];
	}
	double v[32];
	for (int l = 0; l < 32; l++)
		v[l] = l < nwarp ? red[l] : 0.0;
	for (int off = 16; off > 0; off >>= 1) {
		double nv[32];
		for (int l = 0; l < 32; l++)
			nv[l] = v[l] + (l + off < 32 ? v[l + off] : v[l]);
		memcpy(v, nv, sizeof nv);
	}
	const double inv = 1.0 / v[0];
	for (int q = 0; q < npix; q++)
		out[q] = pix[q] * inv;
}

/* spots_kernel against desi_spots_cpu(): corners identical, pixels to the
 * order of the normalising sum (a few 1e-16 on pixels <= 1; the host's erf
 * and exp are the CPU's, so nothing else differs). */
static void test_spots(void **state)
{
	(void)state;
	const desi_spot_shape_t shapes[] = { { 8, 5, 6, 6 }, { 3, 4, 2, 3 }, { 10, 10, 0, 0 } };
	uint64_t s = 31;
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		const desi_spot_shape_t sh = shapes[k];
		const int np = 4 + (sh.ghdegx + 1) * (sh.ghdegy + 1);
		const int npix = (2 * sh.hsizex + 1) * (2 * sh.hsizey + 1);
		enum { NS = 5 };
		double params[NS * 64], cpu[NS * 64 * 64], emu[64 * 64];
		int32_t cxc[NS], cyc[NS], exc, eyc;
		for (int i = 0; i < NS; i++) {
			double *p = params + i * np;
			p[0] = 1000 * uniform(&s) - 20; /* some centres off the CCD */
			p[1] = 4000 * uniform(&s);
			p[2] = 0.8 + uniform(&s);
			p[3] = 0.9 + uniform(&s);
			for (int g = 4; g < np; g++)
				p[g] = g == 4 ? 1.0 : 0.1 * uniform(&s) - 0.05;
		}
		desi_spots_cpu(params, NS, sh, cpu, cxc, cyc);
		for (int i = 0; i < NS; i++) {
			emulate_spot(params + i * np, sh, emu, &exc, &eyc);
			assert_int_equal(exc, cxc[i]);
			assert_int_equal(eyc, cyc[i]);
			double sum = 0.0, maxdiff = 0.0;
			for (int q = 0; q < npix; q++) {
				double d = fabs(emu[q] - cpu[(size_t)i * npix + q]);
				maxdiff = d > maxdiff ? d : maxdiff;
				sum += emu[q];
			}
			if (maxdiff > 1e-15)
				print_message("# shape %zu spot %d: max |diff| %.3g\n", k, i, maxdiff);
			assert_true(maxdiff <= 1e-15);
			assert_true(fabs(sum - 1.0) < 1e-13);
		}
	}
}

/* k_write<<<P, THREADS>>>: the core fields into the rows at their columns
 * (col0 shifts them), scaled, zeros for a failed patch; against the
 * layout written out independently.  nfo 9: flux, ivar, chi2pix,
 * pixmask, 5 diagonals; 10: and the deconvolved flux (xflux, unscaled). */
static void write_case(int nfo)
{
	enum { P = 3, CNF = 2, MAXNFO = 10, MW = 10, COL0 = 4 };
	const int NFO = nfo, NFIELD = nfo;
	const int cnw[P] = { 10, 10, 6 }, w0[P] = { 4, 14, 24 }, bad[P] = { 0, 1, 0 };
	const int grid = 30, ncols = grid - COL0;
	double core[P * CNF * MAXNFO * MW];
	float rows[CNF * MAXNFO * 26], want[CNF * MAXNFO * 26];
	const double dw = 0.8;
	uint64_t s = 7;
	for (size_t k = 0; k < sizeof core / sizeof core[0]; k++)
		core[k] = 1000 * uniform(&s) - 100;
	memset(rows, 0xff, sizeof rows);
	memset(want, 0xff, sizeof want);
	for (int i = 0; i < P; i++)
		for (int t = 0; t < DSK_THREADS; t++)
			for (int e = t; e < CNF * NFO * cnw[i]; e += DSK_THREADS)
				dsk_write_elem(e, i, cnw[i], CNF, NFO, MW, NFIELD, ncols, w0[i] - COL0,
					       core, bad[i], dw, rows);
	for (int i = 0; i < P; i++)
		for (int f = 0; f < CNF; f++)
			for (int k = 0; k < NFO; k++)
				for (int w = 0; w < cnw[i]; w++) {
					double v = core[((i * CNF + f) * NFO + k) * MW + w];
					float x = bad[i] ? 0.0f : k == 0 ? (float)(v / dw)
							 : k == 1 ? (float)(v * dw * dw) : (float)v;
					want[(f * NFIELD + k) * ncols + (w0[i] - COL0) + w] = x;
				}
	assert_memory_equal(rows, want, sizeof rows);
}

static void test_write(void **state)
{
	(void)state;
	write_case(9);
	write_case(10);
}

/* k_pointers<<<grid, THREADS>>> thread by thread: patch i's pointers are
 * where the CPU's normal buffer (desi_patch_batch_cpu()) has patch i's
 * iCov, x is [np][n], and the trailing solve's are L[first][first] of
 * patch i and row `first` of Z's block i (the n x k blocks k_eye fills,
 * dsk_eye's index e = i n k + ...: contiguous, disjoint, in patch order). */
static void test_pointers(void **state)
{
	(void)state;
	enum { NP = 5, NFIB = 3, M = 7, CNF = 2, BLOCKS = 2 };
	const size_t n = NFIB * M, k = CNF * M, first = M; /* core_f0 = 1 */
	double icov[NP * NFIB * M * NFIB * M], x[NP * NFIB * M], z[NP * NFIB * M * CNF * M];
	double *pa[NP], *px[NP], *pl[NP], *pzt[NP];
	int fail[NP];
	memset(fail, 0x55, sizeof fail);
	for (int b = 0; b < BLOCKS; b++)
		for (int t = 0; t < DSK_THREADS; t++) {
			int i = b * DSK_THREADS + t;
			if (i < NP)
				dsk_pointers(i, n, k, first, icov, x, z, pa, px, pl, pzt, fail);
		}
	for (int i = 0; i < NP; i++) {
		/* the CPU's layout, written out: icov + i n^2, y after np n^2 */
		assert_ptr_equal(pa[i], &icov[(size_t)i * n * n]);
		assert_ptr_equal(px[i], &x[(size_t)i * n]);
		assert_int_equal(fail[i], 0);
		assert_ptr_equal(pl[i], &icov[(size_t)i * n * n + first * n + first]);
		assert_ptr_equal(pzt[i], &z[(size_t)i * n * k + first]);
		/* the last column's last row stays inside patch i's blocks */
		assert_true(pl[i] + (n - first - 1) * n + (n - first - 1) < pa[i] + n * n);
		assert_true(pzt[i] + (k - 1) * n + (n - first - 1) < z + (size_t)(i + 1) * n * k);
		assert_true(pzt[i] >= z + (size_t)i * n * k);
	}
	assert_ptr_equal(pa[NP - 1] + n * n, icov + sizeof icov / sizeof icov[0]);
}

/* k_solve<<<1, THREADS>>> for one patch, phase by phase (each loop a phase
 * between two __syncthreads()): x = L'^-1 L^-1 y in place. */
static void emulate_solve(const double *L, int n, double *x)
{
	double d[DSK_NB * DSK_NB];
	for (int step = 0; step < 2 * ((n + DSK_NB - 1) / DSK_NB); step++) {
		int fwd;
		const int kb = dsk_trsv_step(n, step, &fwd), nb = n - kb < DSK_NB ? n - kb : DSK_NB;
		memset(d, 0xff, sizeof d);
		for (int t = 0; t < DSK_THREADS; t++)
			for (int e = t; e < DSK_NB * DSK_NB; e += DSK_THREADS)
				dsk_trsv_load(L, (size_t)n, kb, nb, e, d);
		dsk_trsv_diag(d, nb, fwd, x + kb);
		for (int t = DSK_THREADS - 1; t >= 0; t--)
			for (int k = t; k < dsk_trsv_nupdate(n, kb, nb, fwd); k += DSK_THREADS)
				dsk_trsv_update(L, (size_t)n, kb, nb, fwd, k, x);
	}
}

/* k_solve against LAPACK's dpotrs on random SPD matrices whose size is and
 * is not a multiple of DSK_NB: x to 1e-12 of its largest element. */
static void test_solve(void **state)
{
	(void)state;
	static const int sizes[] = { 1, 31, 32, 33, 64, 97, 150 };
	uint64_t seed = 7;
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		const int n = sizes[s];
		double *A = malloc((size_t)n * n * sizeof *A), *G = malloc((size_t)n * n * sizeof *G);
		double *L = malloc((size_t)n * n * sizeof *L), *x = malloc((size_t)n * sizeof *x);
		double *xr = malloc((size_t)n * sizeof *xr), *y = malloc((size_t)n * sizeof *y);
		assert_true(A && G && L && x && xr && y);
		for (int e = 0; e < n * n; e++)
			G[e] = uniform(&seed) - 0.5;
		/* A = G G' + n I: SPD, condition ~10 */
		cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0, G, n, G, n, 0.0, A, n);
		for (int j = 0; j < n; j++) {
			A[(size_t)j * n + j] += n;
			y[j] = 10 * uniform(&seed) - 5;
		}
		memcpy(L, A, (size_t)n * n * sizeof *L);
		assert_int_equal(LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', n, L, n), 0);
		memcpy(x, y, (size_t)n * sizeof *x);
		memcpy(xr, y, (size_t)n * sizeof *xr);
		emulate_solve(L, n, x);
		assert_int_equal(LAPACKE_dpotrs(LAPACK_COL_MAJOR, 'L', n, 1, L, n, xr, n), 0);
		double big = 0.0, dev = 0.0;
		for (int j = 0; j < n; j++) {
			big = fmax(big, fabs(xr[j]));
			dev = fmax(dev, fabs(x[j] - xr[j]));
		}
		assert_true(big > 0.0);
		assert_true(dev <= 1e-12 * big);
		free(A);
		free(G);
		free(L);
		free(x);
		free(xr);
		free(y);
	}
}

/* k_stitch, block by block in its launch grid (grid-stride, at most 4096
 * blocks of DSK_THREADS), against desi_stitch_cpu(): the same frame to the
 * bit, nothing written outside the chunk's columns. */
static void test_stitch(void **state)
{
	(void)state;
	const int nf_out = 9, nfield = 10, core_nf = 3, nwave = 37, col0 = 11;
	const size_t grid = 80, nframe = (size_t)core_nf * nf_out * grid;
	desi_batch_t b = { .np = 1, .nwave_grid = nwave, .nfield = nfield, .col0 = col0 };
	b.p.core_nf = core_nf;
	float *rows = malloc((size_t)core_nf * nfield * nwave * sizeof *rows);
	float *want = malloc(nframe * sizeof *want), *got = malloc(nframe * sizeof *got);
	assert_non_null(rows);
	assert_non_null(want);
	assert_non_null(got);
	for (size_t i = 0; i < (size_t)core_nf * nfield * nwave; i++)
		rows[i] = (float)i + 0.25f;
	for (size_t i = 0; i < nframe; i++)
		want[i] = got[i] = -1.0f;
	desi_stitch_cpu(&b, nf_out, grid, rows, want);
	const size_t n = (size_t)core_nf * nf_out * nwave, threads = DSK_THREADS;
	size_t blocks = (n + threads - 1) / threads;
	blocks = blocks < 4096 ? blocks : 4096;
	for (size_t bx = 0; bx < blocks; bx++)
		for (size_t tx = 0; tx < threads; tx++)
			for (size_t e = bx * threads + tx; e < n; e += blocks * threads)
				dsk_stitch_elem(e, nf_out, nfield, nwave, grid, col0, rows, got);
	assert_memory_equal(want, got, nframe * sizeof *got);
	size_t touched = 0;
	for (int f = 0; f < core_nf; f++)
		for (int k = 0; k < nf_out; k++)
			for (size_t c = 0; c < grid; c++) {
				const float v = got[((size_t)f * nf_out + k) * grid + c];
				const int in = c >= (size_t)col0 && c < (size_t)(col0 + nwave);
				assert_true(in ? v == rows[((size_t)f * nfield + k) * nwave + c - col0] + 0.0f
					       : v == -1.0f);
				touched += in;
			}
	assert_int_equal(touched, n);
	free(rows);
	free(want);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pointers),
		cmocka_unit_test(test_normal_left),
		cmocka_unit_test(test_normal_inner),
		cmocka_unit_test(test_decorrelate),
		cmocka_unit_test(test_solve),
		cmocka_unit_test(test_chi2),
		cmocka_unit_test(test_spots),
		cmocka_unit_test(test_write),
		cmocka_unit_test(test_stitch),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
