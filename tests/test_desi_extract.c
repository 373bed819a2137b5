/* Unit tests of the DESI patch extraction CPU kernels against the reference patch and naive references. */
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
#include <fitsio.h>

#include "../codelets/desi/extract.h"
#include "cpuisa.h"
#include "fitsread.h"

#include <lapacke.h>

/*
 * DESIGN.  ../shared/data/desi/ref_patch.fits holds one real patch with
 * every intermediate of the reference extraction (gpu_specter CPU path):
 * the kernels are run on its PIX, IVAR, SPOTS, XC, YC and every output is
 * compared with the stored one, both chained (our iCov -> our x -> ...) and
 * fed with the reference's iCov and x, so each step's own error shows.
 * Deviations are max |ours - ref| / max |ref| over the array ("rel") and
 * printed as TAP comments.  Tolerances are a few hundred times the largest
 * deviations observed, still at rounding level for the conditioning
 * (iCov's condition number makes x and C lose ~4 digits).
 */

extern void openblas_set_num_threads(int);

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

static const char *shared_dir(void)
{
	const char *d = getenv("SP_SHARED");
	return d != NULL && *d ? d : "../shared";
}

/* max |a - b| / max |b| over n values (max |a - b| when b is all zero). */
static double reldev(const double *a, const double *b, size_t n)
{
	double d = 0.0, m = 0.0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs(a[i] - b[i]);
		if (!(e <= d))
			d = e; /* NaN propagates */
		if (fabs(b[i]) > m)
			m = fabs(b[i]);
	}
	return m > 0.0 ? d / m : d;
}

static void check(const char *what, const double *a, const double *b, size_t n, double tol)
{
	double d = reldev(a, b, n);
	print_message("# %-34s rel dev %.2e (tol %.0e)\n", what, d, tol);
	assert_true(d <= tol);
}

/* ---- the reference patch ---- */

typedef struct ref {
	desi_patch_t p;
	double *pix, *ivar, *spots, *icov, *y, *fw, *x, *r, *fluxivar, *fluxpad;
	double *cflux, *civar, *chi2pix, *pixmask, *rdiags;
	int32_t *xc, *yc;
} ref_t;

static ref_t *R0;

static int setup_ref(void **state)
{
	(void)state;
	char path[1024];
	fitsfile *f = NULL;
	int st = 0, v[10];
	static const char *keys[10] = { "YMIN", "XMIN", "NY", "NX", "SPECMIN_", "NSPECPAD",
					"IWAVE0", "NWAVETOT", "WAVEPAD", "NWAVESTE" };

	snprintf(path, sizeof path, "%s/data/desi/ref_patch.fits", shared_dir());
	if (fits_open_file(&f, path, READONLY, &st) != 0) {
		fprintf(stderr, "%s: cannot open (set SP_SHARED)\n", path);
		return -1;
	}
	for (int i = 0; i < 10; i++)
		fits_read_key(f, TINT, keys[i], &v[i], NULL, &st);
	if (st != 0)
		return -1;
	ref_t *r = calloc(1, sizeof *r);
	desi_patch_t *p = &r->p;
	p->ymin = v[0];
	p->xmin = v[1];
	p->ny = v[2];
	p->nx = v[3];
	p->nfib = v[5];
	p->nwave = v[7];
	p->sy = 11;
	p->sx = 17;
	/* Subbundle 1 of bundle 0 (fibres 5..9) padded by one fibre each
	 * side: the patch starts at fibre SPECMIN_ = 4 of the bundle, so the
	 * core is patch fibres 1..5 (checked against CORE_FLUX below). */
	p->core_f0 = 1;
	p->core_nf = 5;
	p->core_w0 = v[8];
	p->core_nw = v[9];
	p->ndiag = 5;
	p->regularize = 0.0;
	p->psferr = 0.01;
	const size_t npix = (size_t)p->ny * p->nx, n = (size_t)desi_patch_n(p);
	const size_t nw = (size_t)p->nfib * p->nwave, nc = (size_t)p->core_nf * p->core_nw;
	r->pix = tfits_read_hdu(f, "PIX", npix, TDOUBLE);
	r->ivar = tfits_read_hdu(f, "IVAR", npix, TDOUBLE);
	r->spots = tfits_read_hdu(f, "SPOTS", nw * p->sy * p->sx, TDOUBLE);
	r->xc = tfits_read_hdu(f, "XC", nw, TINT);
	r->yc = tfits_read_hdu(f, "YC", nw, TINT);
	r->icov = tfits_read_hdu(f, "ICOV", n * n, TDOUBLE);
	r->y = tfits_read_hdu(f, "Y", n, TDOUBLE);
	r->fw = tfits_read_hdu(f, "FLUXWEIGHT", n, TDOUBLE);
	r->x = tfits_read_hdu(f, "XFLUX", n, TDOUBLE);
	r->r = tfits_read_hdu(f, "R", n * n, TDOUBLE);
	r->fluxivar = tfits_read_hdu(f, "FLUXIVAR", n, TDOUBLE);
	r->fluxpad = tfits_read_hdu(f, "FLUX_PADDED", n, TDOUBLE);
	r->cflux = tfits_read_hdu(f, "CORE_FLUX", nc, TDOUBLE);
	r->civar = tfits_read_hdu(f, "CORE_IVAR", nc, TDOUBLE);
	r->chi2pix = tfits_read_hdu(f, "CHI2PIX", nc, TDOUBLE);
	r->pixmask = tfits_read_hdu(f, "PIXMASK_FRACTION", nc, TDOUBLE);
	r->rdiags = tfits_read_hdu(f, "RDIAGS", nc * (2 * p->ndiag + 1), TDOUBLE);
	fits_close_file(f, &st);
	R0 = r;
	return 0;
}

static int teardown_ref(void **state)
{
	(void)state;
	ref_t *r = R0;
	if (r == NULL)
		return 0;
	double *arrs[] = { r->pix, r->ivar, r->spots, r->icov, r->y, r->fw, r->x, r->r,
			   r->fluxivar, r->fluxpad, r->cflux, r->civar, r->chi2pix, r->pixmask,
			   r->rdiags };
	for (size_t i = 0; i < sizeof arrs / sizeof *arrs; i++)
		free(arrs[i]);
	free(r->xc);
	free(r->yc);
	free(r);
	R0 = NULL;
	return 0;
}

/* Core slice [core_nf][core_nw] of a padded [nfib][nwave] vector. */
static void core_of(const desi_patch_t *p, const double *v, double *out)
{
	for (int f = 0; f < p->core_nf; f++)
		memcpy(out + (size_t)f * p->core_nw,
		       v + (size_t)(p->core_f0 + f) * p->nwave + p->core_w0,
		       (size_t)p->core_nw * sizeof *out);
}

/* Max deviation of the core fibres' diagonal blocks of two n x n R. */
static double rblock_dev(const desi_patch_t *p, const double *a, const double *b)
{
	const int n = desi_patch_n(p), m = p->nwave;
	double d = 0.0;
	for (int f = p->core_f0; f < p->core_f0 + p->core_nf; f++)
		for (int i = 0; i < m; i++)
			for (int j = 0; j < m; j++) {
				size_t q = ((size_t)f * m + i) * n + (size_t)f * m + j;
				double e = fabs(a[q] - b[q]);
				if (!(e <= d))
					d = e;
			}
	return d;
}

typedef struct outs {
	double *icov, *y, *fw, *x, *flux, *ivar, *rdiags, *rfull, *chi2pix, *pixmask, *work;
} outs_t;

static void outs_alloc(const desi_patch_t *p, outs_t *o)
{
	const size_t n = (size_t)desi_patch_n(p), nc = (size_t)p->core_nf * p->core_nw;
	o->icov = xmalloc(n * n * sizeof(double));
	o->rfull = xmalloc(n * n * sizeof(double));
	o->y = xmalloc(n * sizeof(double));
	o->fw = xmalloc(n * sizeof(double));
	o->x = xmalloc(n * sizeof(double));
	o->flux = xmalloc(nc * sizeof(double));
	o->ivar = xmalloc(nc * sizeof(double));
	o->chi2pix = xmalloc(nc * sizeof(double));
	o->pixmask = xmalloc(nc * sizeof(double));
	o->rdiags = xmalloc(nc * (2 * (size_t)p->ndiag + 1) * sizeof(double));
	o->work = xmalloc(desi_extract_work_size(p) * sizeof(double));
}

static void outs_free(outs_t *o)
{
	double *a[] = { o->icov, o->y, o->fw, o->x, o->flux, o->ivar, o->rdiags, o->rfull,
			o->chi2pix, o->pixmask, o->work };
	for (size_t i = 0; i < sizeof a / sizeof *a; i++)
		free(a[i]);
}

/* Tolerances: iCov, y, fluxweight 1e-12 relative (same sums, another
 * order; observed ~1e-15). */
static void test_ref_normal(void **state)
{
	(void)state;
	const ref_t *r = R0;
	const desi_patch_t *p = &r->p;
	const size_t n = (size_t)desi_patch_n(p);
	outs_t o;
	outs_alloc(p, &o);
	desi_extract_normal_cpu(p, r->spots, r->xc, r->yc, r->pix, r->ivar, o.icov, o.y, o.fw);
	check("ICOV (after regularisation)", o.icov, r->icov, n * n, 1e-12);
	check("Y", o.y, r->y, n, 1e-12);
	check("FLUXWEIGHT", o.fw, r->fw, n, 1e-12);
	outs_free(&o);
}

/* The whole chain from the pixels, fast route.  Tolerances 1e-9 relative
 * for x, flux and ivar (observed ~1e-13: iCov's conditioning), 1e-10
 * absolute on R (entries <= 1), 1e-10 relative on chi2pix; pixmask_fraction
 * is exact here (no masked pixel: all zero). */
static void test_ref_chain(void **state)
{
	(void)state;
	const ref_t *r = R0;
	const desi_patch_t *p = &r->p;
	const size_t n = (size_t)desi_patch_n(p), nc = (size_t)p->core_nf * p->core_nw;
	const size_t nd = 2 * (size_t)p->ndiag + 1;
	double *tmp = xmalloc(nc * sizeof *tmp);
	outs_t o;
	outs_alloc(p, &o);
	desi_extract_normal_cpu(p, r->spots, r->xc, r->yc, r->pix, r->ivar, o.icov, o.y, o.fw);
	assert_int_equal(desi_extract_solve_cpu(p, o.icov, o.y, o.x, o.work), 0);
	check("XFLUX (chained)", o.x, r->x, n, 1e-9);
	assert_int_equal(desi_decorrelate_cpu(p, o.icov, o.x, o.flux, o.ivar, o.rdiags, o.rfull,
					      o.work), 0);
	check("CORE_FLUX (chained)", o.flux, r->cflux, nc, 1e-9);
	check("CORE_IVAR (chained)", o.ivar, r->civar, nc, 1e-9);
	core_of(p, r->fluxpad, tmp);
	check("FLUX_PADDED core (chained)", o.flux, tmp, nc, 1e-9);
	core_of(p, r->fluxivar, tmp);
	check("FLUXIVAR core (chained)", o.ivar, tmp, nc, 1e-9);
	check("RDIAGS (chained)", o.rdiags, r->rdiags, nc * nd, 1e-10);
	double dr = rblock_dev(p, o.rfull, r->r);
	print_message("# %-34s abs dev %.2e (tol 1e-10)\n", "R core blocks (chained)", dr);
	assert_true(dr <= 1e-10);
	desi_extract_chi2_cpu(p, r->spots, r->xc, r->yc, r->pix, r->ivar, o.x, o.chi2pix,
			      o.pixmask, o.work);
	check("CHI2PIX (chained)", o.chi2pix, r->chi2pix, nc, 1e-10);
	check("PIXMASK_FRACTION", o.pixmask, r->pixmask, nc, 0.0);
	free(tmp);
	outs_free(&o);
}

/* Each step fed with the reference's own inputs (its iCov, y, x). */
static void test_ref_steps(void **state)
{
	(void)state;
	const ref_t *r = R0;
	const desi_patch_t *p = &r->p;
	const size_t n = (size_t)desi_patch_n(p), nc = (size_t)p->core_nf * p->core_nw;
	const size_t nd = 2 * (size_t)p->ndiag + 1;
	outs_t o;
	outs_alloc(p, &o);
	assert_int_equal(desi_extract_solve_cpu(p, r->icov, r->y, o.x, o.work), 0);
	check("XFLUX (from ref ICOV, Y)", o.x, r->x, n, 1e-9);
	for (int route = 0; route < 2; route++) {
		int rc = route == 0 ? desi_decorrelate_cpu(p, r->icov, r->x, o.flux, o.ivar,
							   o.rdiags, o.rfull, o.work)
				    : desi_decorrelate_eigh_cpu(p, r->icov, r->x, o.flux, o.ivar,
								o.rdiags, o.rfull, o.work);
		assert_int_equal(rc, 0);
		const char *nm = route == 0 ? "fast" : "eigh";
		char what[64];
		snprintf(what, sizeof what, "CORE_FLUX (%s, ref inputs)", nm);
		check(what, o.flux, r->cflux, nc, 1e-9);
		snprintf(what, sizeof what, "CORE_IVAR (%s, ref inputs)", nm);
		check(what, o.ivar, r->civar, nc, 1e-9);
		snprintf(what, sizeof what, "RDIAGS (%s, ref inputs)", nm);
		check(what, o.rdiags, r->rdiags, nc * nd, 1e-10);
		double dr = rblock_dev(p, o.rfull, r->r);
		print_message("# %-34s abs dev %.2e (tol 1e-10)\n",
			      route == 0 ? "R core blocks (fast, ref inputs)"
					 : "R core blocks (eigh, ref inputs)", dr);
		assert_true(dr <= 1e-10);
	}
	desi_extract_chi2_cpu(p, r->spots, r->xc, r->yc, r->pix, r->ivar, r->x, o.chi2pix,
			      o.pixmask, o.work);
	check("CHI2PIX (from ref XFLUX)", o.chi2pix, r->chi2pix, nc, 1e-10);
	outs_free(&o);
}

/* The fast route against the eigendecomposition route, same input.
 * Tolerance 1e-11 (observed ~1e-14). */
static void test_fast_vs_eigh(void **state)
{
	(void)state;
	const ref_t *r = R0;
	const desi_patch_t *p = &r->p;
	const size_t n = (size_t)desi_patch_n(p), nc = (size_t)p->core_nf * p->core_nw;
	const size_t nd = 2 * (size_t)p->ndiag + 1;
	outs_t a, b;
	outs_alloc(p, &a);
	outs_alloc(p, &b);
	assert_int_equal(desi_decorrelate_cpu(p, r->icov, r->x, a.flux, a.ivar, a.rdiags, a.rfull,
					      a.work), 0);
	assert_int_equal(desi_decorrelate_eigh_cpu(p, r->icov, r->x, b.flux, b.ivar, b.rdiags,
						   b.rfull, b.work), 0);
	check("flux fast vs eigh", a.flux, b.flux, nc, 1e-11);
	check("ivar fast vs eigh", a.ivar, b.ivar, nc, 1e-11);
	check("rdiags fast vs eigh", a.rdiags, b.rdiags, nc * nd, 1e-11);
	check("R fast vs eigh (all n x n)", a.rfull, b.rfull, n * n, 1e-11);
	/* Non-core blocks are left zero. */
	for (int i = 0; i < p->nwave; i++)
		assert_true(a.rfull[(size_t)i * n + i] == 0.0);
	/* Without rfull, R's kept parts come from W without forming Q
	 * (block_finish()): the same values to rounding. */
	assert_int_equal(desi_decorrelate_cpu(p, r->icov, r->x, b.flux, b.ivar, b.rdiags, NULL,
					      b.work), 0);
	check("flux without Q vs with", b.flux, a.flux, nc, 1e-12);
	check("ivar without Q vs with", b.ivar, a.ivar, nc, 1e-12);
	check("rdiags without Q vs with", b.rdiags, a.rdiags, nc * nd, 1e-12);
	outs_free(&a);
	outs_free(&b);
}

/* ---- synthetic patches against a naive dense A ---- */

static uint64_t rng_s = 0x9e3779b97f4a7c15ull;
static double urand(void)
{
	rng_s ^= rng_s << 13;
	rng_s ^= rng_s >> 7;
	rng_s ^= rng_s << 17;
	return (double)(rng_s >> 11) * 0x1p-53;
}

/* A synthetic patch: nfib fibres 7 px apart, spots 11 x 17 random
 * non-negative, corners moving ~1.8 rows per wavelength, a window that cuts
 * the first and last wavelengths' spots. */
static void synth(desi_patch_t *p, double **spots, int32_t **xc, int32_t **yc, double **pix,
		  double **ivar, double masked_frac)
{
	memset(p, 0, sizeof *p);
	p->nfib = 3;
	p->nwave = 20;
	p->sy = 11;
	p->sx = 17;
	p->ymin = 1000;
	p->xmin = 500;
	p->ny = 40;
	p->nx = 7 * 2 + 17 + 1;
	p->core_f0 = 1;
	p->core_nf = 1;
	p->core_w0 = 4;
	p->core_nw = 12;
	p->ndiag = 5;
	p->regularize = 0.0;
	p->psferr = 0.01;
	const int nw = p->nfib * p->nwave, ss = p->sy * p->sx, npix = p->ny * p->nx;
	*spots = xmalloc((size_t)nw * ss * sizeof(double));
	*xc = xmalloc((size_t)nw * sizeof(int32_t));
	*yc = xmalloc((size_t)nw * sizeof(int32_t));
	*pix = xmalloc((size_t)npix * sizeof(double));
	*ivar = xmalloc((size_t)npix * sizeof(double));
	for (int f = 0; f < p->nfib; f++)
		for (int w = 0; w < p->nwave; w++) {
			int j = f * p->nwave + w;
			double sum = 0.0;
			for (int k = 0; k < ss; k++) {
				int iy = k / p->sx, ix = k % p->sx;
				double g = exp(-0.5 * ((iy - 5) * (iy - 5) / 2.0 +
						       (ix - 8) * (ix - 8) / 4.0));
				(*spots)[(size_t)j * ss + k] = g * (0.5 + urand());
				sum += (*spots)[(size_t)j * ss + k];
			}
			for (int k = 0; k < ss; k++)
				(*spots)[(size_t)j * ss + k] /= sum;
			(*xc)[j] = p->xmin + 7 * f + (w % 3 == 0);
			(*yc)[j] = p->ymin - 6 + (int)(1.8 * w) + f;
		}
	for (int i = 0; i < npix; i++) {
		(*ivar)[i] = urand() < masked_frac ? 0.0 : 0.5 + urand();
		(*pix)[i] = 100.0 * urand() - 10.0;
	}
}

/* Dense A [npix][n] built the obvious way. */
static double *dense_A(const desi_patch_t *p, const double *spots, const int32_t *xc,
		       const int32_t *yc)
{
	const int n = desi_patch_n(p), npix = p->ny * p->nx;
	double *A = calloc((size_t)npix * n, sizeof *A);
	assert_non_null(A);
	for (int j = 0; j < n; j++)
		for (int iy = 0; iy < p->sy; iy++)
			for (int ix = 0; ix < p->sx; ix++) {
				int r = yc[j] - p->ymin + iy, c = xc[j] - p->xmin + ix;
				if (r >= 0 && r < p->ny && c >= 0 && c < p->nx)
					A[((size_t)r * p->nx + c) * n + j] =
						spots[((size_t)j * p->sy + iy) * p->sx + ix];
			}
	return A;
}

/* The dense normal equations of A (dense_A()): ic = A'NA + the
 * regularisation, yy = A'Np, fw = A'N1 (calloc'd: n x n, n, n). */
static void dense_normal(const desi_patch_t *pp, const double *A, const double *pix,
			 const double *ivar, double *ic, double *yy, double *fw)
{
	const desi_patch_t p = *pp;
	const int n = desi_patch_n(&p), npix = p.ny * p.nx;
	for (int i = 0; i < npix; i++)
		for (int a = 0; a < n; a++) {
			double aw = A[(size_t)i * n + a] * ivar[i];
			if (aw == 0.0)
				continue;
			fw[a] += aw;
			yy[a] += aw * pix[i];
			for (int b = 0; b < n; b++)
				ic[(size_t)a * n + b] += aw * A[(size_t)i * n + b];
		}
	double mx = 0.0;
	for (int a = 0; a < n; a++)
		mx = fw[a] > mx ? fw[a] : mx;
	for (int a = 0; a < n; a++) {
		double al = fw[a] < 1e-4 * mx ? 1e-4 * mx - fw[a] : 0.0;
		ic[(size_t)a * n + a] += al * al + 1e-15;
	}
}

/* The kernel's A'NA, A'Np and A'N1 of patch p into o, checked against the
 * dense sums (1e-12 relative); returns the dense A (the caller frees it). */
static double *normal_vs_dense(const char *what, const desi_patch_t *p, const double *spots,
			       const int32_t *xc, const int32_t *yc, const double *pix,
			       const double *ivar, outs_t *o)
{
	const int n = desi_patch_n(p);
	char label[64];
	double *A = dense_A(p, spots, xc, yc);
	double *ic = calloc((size_t)n * n, sizeof *ic), *yy = calloc(n, sizeof *yy);
	double *fw = calloc(n, sizeof *fw);
	dense_normal(p, A, pix, ivar, ic, yy, fw);
	desi_extract_normal_cpu(p, spots, xc, yc, pix, ivar, o->icov, o->y, o->fw);
	snprintf(label, sizeof label, "%s A'NA vs dense", what);
	check(label, o->icov, ic, (size_t)n * n, 1e-12);
	snprintf(label, sizeof label, "%s A'Np vs dense", what);
	check(label, o->y, yy, n, 1e-12);
	snprintf(label, sizeof label, "%s A'N1 vs dense", what);
	check(label, o->fw, fw, n, 1e-12);
	free(ic);
	free(yy);
	free(fw);
	return A;
}

/* A'NA where the spots' rows are not sorted along a fibre (two of
 * fibre 1's wavelengths swapped): the kernel's pair search falls back to
 * scanning every later column (extract_cpu.c, rows_sorted()), and still
 * equals the dense sums; tolerance 1e-12 relative. */
static void test_normal_unsorted_rows(void **state)
{
	(void)state;
	desi_patch_t p;
	double *spots, *pix, *ivar;
	int32_t *xc, *yc;
	synth(&p, &spots, &xc, &yc, &pix, &ivar, 0.1);
	int32_t t = yc[p.nwave + 3];
	yc[p.nwave + 3] = yc[p.nwave + 12];
	yc[p.nwave + 12] = t;
	outs_t o;
	outs_alloc(&p, &o);
	double *A = normal_vs_dense("unsorted rows:", &p, spots, xc, yc, pix, ivar, &o);
	outs_free(&o);
	void *f[] = { spots, pix, ivar, xc, yc, A };
	for (size_t k = 0; k < sizeof f / sizeof *f; k++)
		free(f[k]);
}

/* Every SIMD variant of A'NA and of the model A x (normal_simd.h) against
 * the first one, and of R's kept parts against the obvious loops, to the
 * bit: on the reference patch and on a synthetic one whose spots the
 * window cuts and whose pixels are partly masked (test_desi_kern checks
 * the default variant against the CUDA body's emulation, to the bit). */
static void test_normal_variants(void **state)
{
	(void)state;
	desi_patch_t ps;
	double *spots, *pix, *ivar;
	int32_t *xc, *yc;
	synth(&ps, &spots, &xc, &yc, &pix, &ivar, 0.3);
	ps.ny -= 3; /* the last rows' spots cut by the window */
	const ref_t *r = R0;
	const desi_patch_t *pp[2] = { &r->p, &ps };
	const double *sp[2] = { r->spots, spots }, *px[2] = { r->pix, pix };
	const double *iv[2] = { r->ivar, ivar };
	const int32_t *xs[2] = { r->xc, xc }, *ys[2] = { r->yc, yc };
	int compared = 0;
	for (int c = 0; c < 2; c++) {
		const desi_patch_t *p = pp[c];
		const size_t n = (size_t)desi_patch_n(p);
		double *w = xmalloc(desi_extract_normal_work_size(p) * sizeof *w);
		outs_t o[SP_ISA_COUNT];
		int first = -1;
		for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
			if (!sp_isa_supported(isa))
				continue;
			outs_alloc(p, &o[isa]);
			/* a NaN pattern: icov's strictly lower triangle keeps it
			 * (the upper one only is written, extract.h) */
			memset(o[isa].icov, 0xff, n * n * sizeof(double));
			desi_extract_normal_cpu_isa(isa, p, sp[c], xs[c], ys[c], px[c], iv[c],
						    o[isa].icov, o[isa].y, o[isa].fw, w);
			size_t lower = 0;
			for (size_t r = 1; r < n; r++)
				for (size_t q = 0; q < r; q++) {
					uint64_t u;
					memcpy(&u, &o[isa].icov[r * n + q], sizeof u);
					lower += u != UINT64_MAX;
				}
			assert_int_equal(lower, 0);
			if (first < 0) {
				first = isa;
				/* without scratch: the direct sums, the same bits */
				outs_t d;
				outs_alloc(p, &d);
				memset(d.icov, 0xff, n * n * sizeof(double));
				assert_int_equal(desi_extract_normal_cpu_isa(isa, p, sp[c], xs[c], ys[c],
									     px[c], iv[c], d.icov, d.y,
									     d.fw, NULL),
						 desi_extract_normal_cpu_isa(isa, p, sp[c], xs[c], ys[c],
									     px[c], iv[c], o[isa].icov,
									     o[isa].y, o[isa].fw, w));
				assert_memory_equal(d.icov, o[isa].icov, n * n * sizeof(double));
				assert_memory_equal(d.y, o[isa].y, n * sizeof(double));
				assert_memory_equal(d.fw, o[isa].fw, n * sizeof(double));
				outs_free(&d);
				continue;
			}
			assert_memory_equal(o[isa].icov, o[first].icov, n * n * sizeof(double));
			assert_memory_equal(o[isa].y, o[first].y, n * sizeof(double));
			assert_memory_equal(o[isa].fw, o[first].fw, n * sizeof(double));
			/* the model A x, x = y: every column's spot */
			const size_t npix = (size_t)p->ny * (size_t)p->nx;
			double *m0 = xmalloc(npix * sizeof *m0), *m1 = xmalloc(npix * sizeof *m1);
			desi_extract_model_cpu_isa(first, p, sp[c], xs[c], ys[c], o[first].y, m0);
			desi_extract_model_cpu_isa(isa, p, sp[c], xs[c], ys[c], o[first].y, m1);
			assert_memory_equal(m0, m1, npix * sizeof *m0);
			free(m0);
			free(m1);
			outs_free(&o[isa]);
			compared++;
		}
		if (first >= 0)
			outs_free(&o[first]);
		free(w);
	}
	/* the kept parts of R (block_finish()): every variant against the
	 * obvious loops, to the bit, for core ranges at both ends of a block */
	enum { M = 74, ND0 = 5 };
	double *W = xmalloc(M * M * sizeof *W), xb[M], s0[M], q0[M], s1[M], q1[M];
	double dg0[(2 * ND0 + 1) * M], dg1[(2 * ND0 + 1) * M], kw[2 * M];
	for (int k = 0; k < M * M; k++)
		W[k] = sin(0.37 * k) * (1.0 + (k % 7) * 0.1);
	for (int i = 0; i < M; i++)
		xb[i] = cos(0.11 * i) * 30.0;
	static const int ranges[][2] = { { 12, 50 }, { 0, 24 }, { 50, 24 }, { 3, 71 } };
	for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
		const int w0 = ranges[r][0], cnw = ranges[r][1];
		double t[M], u[M];
		for (int k = 0; k < M; k++) {
			t[k] = u[k] = 0.0;
			for (int i = 0; i < M; i++) {
				t[k] += W[k * M + i];
				u[k] += W[k * M + i] * xb[i];
			}
		}
		for (int i = 0; i < M; i++)
			s0[i] = q0[i] = 0.0;
		for (int e = 0; e < (2 * ND0 + 1) * cnw; e++)
			dg0[e] = 0.0;
		for (int k = 0; k < M; k++) {
			for (int i = 0; i < M; i++) {
				s0[i] += W[k * M + i] * t[k];
				q0[i] += W[k * M + i] * u[k];
			}
			for (int d = 0; d < 2 * ND0 + 1; d++)
				for (int j = 0; j < cnw; j++) {
					const int row = w0 + j + d - ND0;
					if (row >= 0 && row < M)
						dg0[d * cnw + j] += W[k * M + row] * W[k * M + w0 + j];
				}
		}
		for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
			if (!sp_isa_supported(isa))
				continue;
			desi_kept_parts_isa(isa, M, W, xb, w0, cnw, ND0, s1, q1, dg1, kw);
			assert_memory_equal(s1, s0, sizeof s0);
			assert_memory_equal(q1, q0, sizeof q0);
			assert_memory_equal(dg1, dg0, (2 * ND0 + 1) * (size_t)cnw * sizeof *dg0);
		}
	}
	free(W);
	if (compared == 0)
		print_message("# only the baseline variant runs here: nothing to compare\n");
	void *f[] = { spots, pix, ivar, xc, yc };
	for (size_t k = 0; k < sizeof f / sizeof *f; k++)
		free(f[k]);
}

/* Tolerance 1e-12 relative (observed ~1e-16) for A'NA, y, fluxweight;
 * 1e-12 for chi2pix and pixmask_fraction against dense formulas. */
static void test_synthetic_normal(void **state)
{
	(void)state;
	desi_patch_t p;
	double *spots, *pix, *ivar;
	int32_t *xc, *yc;
	synth(&p, &spots, &xc, &yc, &pix, &ivar, 0.1);
	const int n = desi_patch_n(&p), npix = p.ny * p.nx;
	const size_t nc = (size_t)p.core_nf * p.core_nw;
	outs_t o;
	outs_alloc(&p, &o);
	double *A = normal_vs_dense("synthetic", &p, spots, xc, yc, pix, ivar, &o);

	/* Steps 3-8 on the synthetic patch: solve residual, fast = eigh,
	 * chi2pix and pixmask_fraction against dense formulas. */
	assert_int_equal(desi_extract_solve_cpu(&p, o.icov, o.y, o.x, o.work), 0);
	double res = 0.0, ny_ = 0.0;
	for (int a = 0; a < n; a++) {
		double s = -o.y[a];
		for (int b = 0; b < n; b++)
			s += o.icov[(size_t)a * n + b] * o.x[b];
		res = fabs(s) > res ? fabs(s) : res;
		ny_ = fabs(o.y[a]) > ny_ ? fabs(o.y[a]) : ny_;
	}
	print_message("# %-34s rel res %.2e (tol 1e-10)\n", "synthetic solve", res / ny_);
	assert_true(res / ny_ <= 1e-10);
	outs_t e;
	outs_alloc(&p, &e);
	assert_int_equal(desi_decorrelate_cpu(&p, o.icov, o.x, o.flux, o.ivar, o.rdiags, o.rfull,
					      o.work), 0);
	assert_int_equal(desi_decorrelate_eigh_cpu(&p, o.icov, o.x, e.flux, e.ivar, e.rdiags,
						   e.rfull, e.work), 0);
	check("synthetic flux fast vs eigh", o.flux, e.flux, nc, 1e-10);
	check("synthetic ivar fast vs eigh", o.ivar, e.ivar, nc, 1e-10);
	check("synthetic R fast vs eigh", o.rfull, e.rfull, (size_t)n * n, 1e-10);

	desi_extract_chi2_cpu(&p, spots, xc, yc, pix, ivar, o.x, o.chi2pix, o.pixmask, o.work);
	double *c2 = xmalloc(nc * sizeof *c2), *pm = xmalloc(nc * sizeof *pm);
	double *chi = xmalloc((size_t)npix * sizeof *chi), *tp = xmalloc((size_t)npix * sizeof *tp);
	for (int i = 0; i < npix; i++) {
		double mdl = 0.0;
		for (int b = 0; b < n; b++)
			mdl += A[(size_t)i * n + b] * o.x[b];
		double mivar = 1.0 / ((mdl * p.psferr + 1e-32) * (mdl * p.psferr + 1e-32));
		double t = (mivar > 0 && ivar[i] > 0) ? 1.0 / (1.0 / mivar + 1.0 / ivar[i]) : 0.0;
		chi[i] = (pix[i] - mdl) * (pix[i] - mdl) * t;
		tp[i] = t > 0;
	}
	for (int k = 0; k < p.core_nw; k++) {
		int j = p.core_f0 * p.nwave + p.core_w0 + k;
		double num = 0, den = 0, msk = 0;
		for (int i = 0; i < npix; i++) {
			num += A[(size_t)i * n + j] * chi[i];
			den += A[(size_t)i * n + j] * tp[i];
			msk += A[(size_t)i * n + j] * (ivar[i] == 0.0);
		}
		c2[k] = den > 0 ? num / den : 0.0;
		pm[k] = msk;
	}
	check("synthetic chi2pix vs dense", o.chi2pix, c2, nc, 1e-12);
	check("synthetic pixmask vs dense", o.pixmask, pm, nc, 1e-12);
	free(c2);
	free(pm);
	free(chi);
	free(tp);
	outs_free(&e);
	outs_free(&o);
	free(A);
	free(spots);
	free(xc);
	free(yc);
	free(pix);
	free(ivar);
}

static int all_finite(const double *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(a[i]))
			return 0;
	return 1;
}

/* All pixels masked (ivar = 0): every output finite, ivar ~0 (the only
 * weight left is the 1e-15 floor on iCov's diagonal), pixmask_fraction =
 * the spot's fraction inside the window, chi2pix 0. */
static void test_degenerate(void **state)
{
	(void)state;
	desi_patch_t p;
	double *spots, *pix, *ivar;
	int32_t *xc, *yc;
	synth(&p, &spots, &xc, &yc, &pix, &ivar, 1.0);
	const int n = desi_patch_n(&p);
	const size_t nc = (size_t)p.core_nf * p.core_nw, nd = 2 * (size_t)p.ndiag + 1;
	outs_t o;
	outs_alloc(&p, &o);
	desi_extract_normal_cpu(&p, spots, xc, yc, pix, ivar, o.icov, o.y, o.fw);
	assert_true(all_finite(o.icov, (size_t)n * n));
	assert_int_equal(desi_extract_solve_cpu(&p, o.icov, o.y, o.x, o.work), 0);
	assert_true(all_finite(o.x, n));
	for (int route = 0; route < 2; route++) {
		int rc = route == 0 ? desi_decorrelate_cpu(&p, o.icov, o.x, o.flux, o.ivar,
							   o.rdiags, o.rfull, o.work)
				    : desi_decorrelate_eigh_cpu(&p, o.icov, o.x, o.flux, o.ivar,
								o.rdiags, o.rfull, o.work);
		assert_int_equal(rc, 0);
		assert_true(all_finite(o.flux, nc));
		assert_true(all_finite(o.ivar, nc));
		assert_true(all_finite(o.rdiags, nc * nd));
		for (size_t i = 0; i < nc; i++)
			assert_true(o.ivar[i] >= 0.0 && o.ivar[i] <= 1e-14);
	}
	desi_extract_chi2_cpu(&p, spots, xc, yc, pix, ivar, o.x, o.chi2pix, o.pixmask, o.work);
	assert_true(all_finite(o.chi2pix, nc));
	for (size_t i = 0; i < nc; i++) {
		assert_true(o.chi2pix[i] == 0.0);
		assert_true(o.pixmask[i] > 0.0 && o.pixmask[i] <= 1.0 + 1e-12);
	}

	/* Half the fibres' pixels masked: a column no pixel sees gets the
	 * regularisation weight only (ivar = minweight^2 scale), still finite. */
	for (int i = 0; i < p.ny * p.nx; i++)
		ivar[i] = (i % p.nx) < 10 ? 0.0 : 1.0;
	desi_extract_normal_cpu(&p, spots, xc, yc, pix, ivar, o.icov, o.y, o.fw);
	assert_int_equal(desi_extract_solve_cpu(&p, o.icov, o.y, o.x, o.work), 0);
	assert_int_equal(desi_decorrelate_cpu(&p, o.icov, o.x, o.flux, o.ivar, o.rdiags, o.rfull,
					      o.work), 0);
	desi_extract_chi2_cpu(&p, spots, xc, yc, pix, ivar, o.x, o.chi2pix, o.pixmask, o.work);
	assert_true(all_finite(o.flux, nc) && all_finite(o.ivar, nc) &&
		    all_finite(o.chi2pix, nc) && all_finite(o.rdiags, nc * nd));
	outs_free(&o);
	free(spots);
	free(xc);
	free(yc);
	free(pix);
	free(ivar);
}

/* Timing, reported, not asserted. */
static void test_timing(void **state)
{
	(void)state;
	const ref_t *r = R0;
	const desi_patch_t *p = &r->p;
	const int reps = 20;
	double t[6] = { 0 };
	outs_t o;
	outs_alloc(p, &o);
	for (int k = 0; k < reps; k++) {
		double t0 = now();
		desi_extract_normal_cpu(p, r->spots, r->xc, r->yc, r->pix, r->ivar, o.icov, o.y,
					o.fw);
		double t1 = now();
		desi_extract_solve_cpu(p, o.icov, o.y, o.x, o.work);
		double t2 = now();
		desi_decorrelate_cpu(p, o.icov, o.x, o.flux, o.ivar, o.rdiags, NULL, o.work);
		double t3 = now();
		desi_extract_chi2_cpu(p, r->spots, r->xc, r->yc, r->pix, r->ivar, o.x, o.chi2pix,
				      o.pixmask, o.work);
		double t4 = now();
		desi_decorrelate_eigh_cpu(p, o.icov, o.x, o.flux, o.ivar, o.rdiags, NULL, o.work);
		double t5 = now();
		t[0] += t1 - t0;
		t[1] += t2 - t1;
		t[2] += t3 - t2;
		t[3] += t4 - t3;
		t[4] += t5 - t4;
	}
	for (int i = 0; i < 5; i++)
		t[i] *= 1e3 / reps;
	print_message("# ms per patch (n=%d, %d reps): normal %.3f, solve %.3f, decorrelate "
		      "%.3f (eigh route %.3f), chi2 %.3f; total %.3f (with eigh %.3f)\n",
		      desi_patch_n(p), reps, t[0], t[1], t[2], t[4], t[3],
		      t[0] + t[1] + t[2] + t[3], t[0] + t[1] + t[4] + t[3]);
	outs_free(&o);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The decorrelation's batched eigendecompositions (eigh_simd.h), every SIMD
 * variant this CPU has, on SPD matrices like the C_bb blocks (inverses of
 * banded matrices; condition up to ~1e6 and more): A v = lambda v to 1e-12 of
 * ||A||, V orthonormal to 1e-13, the eigenvalues dsyevd's to 1e-12 of the
 * largest, for sizes 1 .. 74 and group counts that leave short groups; the
 * variants give the same bits; a matrix gives the same bits alone and in
 * a group, decoupled rows included; a matrix the lanes cannot share (not
 * finite) comes back ok = 0 and untouched. */
static void test_eigh_batch(void **state)
{
	static const int sizes[] = { 1, 2, 3, 5, 17, 74 }, counts[] = { 1, 3, 5, 9 };
	const int mmax = 74, nbmax = 9;
	double *a0 = xmalloc(sizeof(double) * mmax * mmax * nbmax);
	double *a = xmalloc(sizeof(double) * mmax * mmax * nbmax);
	double *first = xmalloc(sizeof(double) * mmax * mmax * nbmax);
	double *ev = xmalloc(sizeof(double) * mmax * nbmax), *evf = xmalloc(sizeof(double) * mmax * nbmax);
	double *ref = xmalloc(sizeof(double) * mmax * mmax), *rev = xmalloc(sizeof(double) * mmax);
	double *srt = xmalloc(sizeof(double) * mmax);
	double *work = xmalloc(sizeof(double) * desi_eigh_batch_work(mmax));
	double *mat[9], *evp[9];
	int ok[9], ran = 0;
	double res = 0, orth = 0, dev = 0;
	(void)state;

	srand(7);
	for (size_t zi = 0; zi < sizeof sizes / sizeof *sizes; zi++)
		for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
			const int m = sizes[zi], nb = counts[ci];
			const size_t mm = (size_t)m * m;
			for (int k = 0; k < nb; k++) { /* B = L L' banded, A = B^-1 */
				double *A = a0 + k * mm;
				for (int i = 0; i < m; i++) /* L: diagonal 1e-3 .. 1, band 3 */
					rev[i] = pow(10.0, -3.0 * rand() / RAND_MAX);
				for (int c = 0; c < m; c++)
					for (int r = 0; r < m; r++)
						ref[c * m + r] = r == c ? rev[r] :
								 r > c && r - c <= 3 ?
								 0.6 * sqrt(rev[r] * rev[c]) * ((double)rand() / RAND_MAX - 0.5) : 0;
				for (int c = 0; c < m; c++)
					for (int r = 0; r < m; r++) {
						double b = 0;
						for (int t = 0; t < m; t++)
							b += ref[t * m + r] * ref[t * m + c];
						A[c * m + r] = b;
					}
				assert_int_equal(LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', m, A, m), 0);
				assert_int_equal(LAPACKE_dpotri(LAPACK_COL_MAJOR, 'L', m, A, m), 0);
				for (int c = 0; c < m; c++) /* the upper triangle: garbage */
					for (int r = 0; r < c; r++)
						A[c * m + r] = NAN;
			}
			int nvar = 0;
			for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
				memcpy(a, a0, sizeof(double) * mm * nb);
				for (int k = 0; k < nb; k++) {
					mat[k] = a + k * mm;
					evp[k] = ev + k * m;
				}
				if (desi_eigh_batch(isa, m, nb, mat, evp, ok, work) != 0)
					continue;
				for (int k = 0; k < nb; k++) {
					const double *A = a0 + k * mm, *V = mat[k];
					double anorm = 0, emax = 0;
					assert_int_equal(ok[k], 1);
					for (int c = 0; c < m; c++)
						for (int r = c; r < m; r++)
							anorm = fmax(anorm, fabs(A[c * m + r]));
					for (int i = 0; i < m; i++) {
						for (int r = 0; r < m; r++) {
							double av = 0;
							for (int c = 0; c < m; c++)
								av += (r >= c ? A[c * m + r] : A[r * m + c]) * V[i * m + c];
							res = fmax(res, fabs(av - evp[k][i] * V[i * m + r]) / anorm);
						}
						for (int j = 0; j <= i; j++) {
							double d = 0;
							for (int r = 0; r < m; r++)
								d += V[i * m + r] * V[j * m + r];
							orth = fmax(orth, fabs(d - (i == j)));
						}
					}
					memcpy(ref, A, sizeof(double) * mm);
					assert_int_equal(LAPACKE_dsyevd(LAPACK_COL_MAJOR, 'N', 'L', m, ref, m, rev), 0);
					memcpy(srt, evp[k], sizeof(double) * m);
					qsort(srt, (size_t)m, sizeof *srt, cmp_double);
					for (int i = 0; i < m; i++)
						emax = fmax(emax, fabs(rev[i]));
					for (int i = 0; i < m; i++)
						dev = fmax(dev, fabs(srt[i] - rev[i]) / emax);
				}
				if (nvar++ == 0) {
					memcpy(first, a, sizeof(double) * mm * nb);
					memcpy(evf, ev, sizeof(double) * m * nb);
				} else {
					assert_memory_equal(first, a, sizeof(double) * mm * nb);
					assert_memory_equal(evf, ev, sizeof(double) * m * nb);
				}
			}
			assert_true(nvar >= 1);
			ran += nvar;
		}
	print_message("# batched eigh, %d runs: |A v - l v| %.1e of |A|, |V'V - I| %.1e, eigenvalues "
		      "vs dsyevd %.1e of the largest\n", ran, res, orth, dev);
	assert_true(res <= 1e-12);
	assert_true(orth <= 1e-13);
	assert_true(dev <= 1e-12);

	/* Lanes are independent: each matrix of a group of 9 alone gives the
	 * same bits.  Among them, decoupled rows and columns (0 off the
	 * diagonal: a wavelength whose pixels are all masked) and a diagonal
	 * matrix, which the lanes reduce with the rest (no LAPACK). */
	const int m = 9, nb = 9, mm = m * m;
	for (int k = 0; k < nb; k++) {
		mat[k] = a0 + k * mm;
		for (int c = 0; c < m; c++)
			for (int r = c; r < m; r++)
				mat[k][c * m + r] = r == c ? 2.0 + r + k : 0.3 / (1 + r - c) + 0.01 * k;
		for (int c = 0; c < m; c++)
			for (int r = c + 1; r < m; r++)
				if (k == 8 || (k % 3 == 1 && (r == 4 || c == 4 || (k == 4 && r == m - 1))))
					mat[k][c * m + r] = 0.0;
	}
	memcpy(a, a0, sizeof(double) * mm * nb);
	for (int k = 0; k < nb; k++) {
		mat[k] = a + k * mm;
		evp[k] = ev + k * m;
	}
	assert_int_equal(desi_eigh_batch(sp_cpu_isa(), m, nb, mat, evp, ok, work), 0);
	for (int k = 0; k < nb; k++) {
		double *one = first + k * mm, e1[9];
		int ok1;
		assert_int_equal(ok[k], 1);
		memcpy(one, a0 + k * mm, sizeof(double) * mm);
		assert_int_equal(desi_eigh_batch(sp_cpu_isa(), m, 1, &one, &(double *){ e1 }, &ok1, work), 0);
		assert_int_equal(ok1, 1);
		assert_memory_equal(one, a + k * mm, sizeof(double) * mm);
		assert_memory_equal(e1, ev + k * m, sizeof(double) * m);
		/* and it is an eigendecomposition */
		for (int i = 0; i < m; i++)
			for (int r = 0; r < m; r++) {
				double av = 0;
				const double *A = a0 + k * mm, *V = a + k * mm;
				for (int c = 0; c < m; c++)
					av += (r >= c ? A[c * m + r] : A[r * m + c]) * V[i * m + c];
				assert_true(fabs(av - ev[k * m + i] * V[i * m + r]) <= 1e-13 * (2.0 + m + k));
			}
	}
	/* a value that is not finite fails its group, which stays as it was */
	memcpy(a, a0, sizeof(double) * mm * 5);
	a[4 * mm + 3] = NAN;
	memcpy(first, a, sizeof(double) * mm * 5);
	assert_int_equal(desi_eigh_batch(SP_ISA_BASELINE, m, 5, mat, evp, ok, work), 0);
	assert_int_equal(ok[4], 0);
	assert_memory_equal(first + 4 * mm, a + 4 * mm, sizeof(double) * mm);
	free(a0);
	free(a);
	free(first);
	free(ev);
	free(evf);
	free(ref);
	free(rev);
	free(srt);
	free(work);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ref_normal),
		cmocka_unit_test(test_ref_chain),
		cmocka_unit_test(test_ref_steps),
		cmocka_unit_test(test_fast_vs_eigh),
		cmocka_unit_test(test_synthetic_normal),
		cmocka_unit_test(test_normal_unsorted_rows),
		cmocka_unit_test(test_normal_variants),
		cmocka_unit_test(test_degenerate),
		cmocka_unit_test(test_eigh_batch),
		cmocka_unit_test(test_timing),
	};
	char path[1024];
	FILE *f;

	openblas_set_num_threads(1);
	snprintf(path, sizeof path, "%s/data/desi/ref_patch.fits", shared_dir());
	if ((f = fopen(path, "rb")) == NULL) {
		printf("1..0 # SKIP %s not found (set SP_SHARED)\n", path);
		return 0;
	}
	fclose(f);
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup_ref, teardown_ref);
}
