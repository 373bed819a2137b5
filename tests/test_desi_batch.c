/* Unit tests of desi_extract_batch_cpu() against the single-patch kernels and the reference patch.
 * The batch driver reads each patch's spots and corners in place in the
 * bundle's arrays (desi_patch_t.fstride); expected_rows() copies them into a
 * patch's own arrays first, so the strided addressing is checked bit for bit. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <fitsio.h>

#include "../codelets/desi/extract.h"
#include "../src/base/cancel.h"
#include "fitsread.h"

/*
 * DESIGN.  Two batches ("fixtures"), shared with test_desi_batch_cuda.c,
 * which includes this file with DESI_BATCH_FIXTURES_ONLY defined:
 *  - ref: ../shared/data/desi/ref_patch.fits as a one-patch batch: its
 *    SPOTS/XC/YC are a 7-fibre "bundle" with nfullwave = 74, the patch at
 *    w0 = 0 of a 50-bin grid, PIX/IVAR stored as floats at rows YMIN..,
 *    columns XMIN.. of an otherwise empty image;
 *  - synth: 3 patches of a 6-fibre bundle (4 patch fibres, 2 core), random
 *    spots, different windows (one reaching above the image, one cutting
 *    spots, one past its right edge), masked pixels of every kind (ivar 0,
 *    negative, NaN value, infinite value), the last patch truncated
 *    (core_nw 6 < 12).
 * The expectation of each patch is computed here with the single-patch
 * kernels on the same doubles (the float image widened, masked pixels at
 * pix 0, ivar 0): the rows must equal (float)(flux / dw) etc. bit for bit.
 * The ref batch is also compared with the reference's CORE_* arrays: the
 * rows are floats, so the tolerance is float rounding, 1e-6 relative.
 */

#define NDIAG 5
#define NFIELD (4 + 2 * NDIAG + 1)
#define MAXP 72

static void *bt_xmalloc(size_t n)
{
	void *p = malloc(n > 0 ? n : 1);
	assert_non_null(p);
	return p;
}

static const char *bt_shared_dir(void)
{
	const char *d = getenv("SP_SHARED");
	return d != NULL && *d ? d : "../shared";
}

typedef struct fixture {
	desi_batch_t b;
	int geom[6][MAXP]; /* ymin, ny, xmin, nx, w0, core_nw */
	double *spots;     /* bundle [nbfib][nfullwave][sy][sx] */
	int32_t *xc, *yc;  /* [nbfib][nfullwave] */
	int nbfib;
	float *img, *ivar; /* [npix_y][npix_x] */
	/* reference arrays (ref fixture only), [core_nf][core_nw] */
	double *cflux, *civar, *chi2pix, *pixmask, *rdiags;
} fixture_t;

static void fixture_free(fixture_t *fx)
{
	if (fx == NULL)
		return;
	void *a[] = { fx->spots, fx->xc, fx->yc, fx->img, fx->ivar, fx->cflux, fx->civar,
		      fx->chi2pix, fx->pixmask, fx->rdiags };
	for (size_t i = 0; i < sizeof a / sizeof *a; i++)
		free(a[i]);
	free(fx);
}

static void fixture_link(fixture_t *fx, int np)
{
	fx->b.np = np;
	fx->b.ymin = fx->geom[0];
	fx->b.ny = fx->geom[1];
	fx->b.xmin = fx->geom[2];
	fx->b.nx = fx->geom[3];
	fx->b.w0 = fx->geom[4];
	fx->b.core_nw = fx->geom[5];
}

static size_t rows_len(const desi_batch_t *b)
{
	return (size_t)b->p.core_nf * b->nfield * b->nwave_grid;
}

/* ---- the reference patch as a batch ---- */

/* NULL when the file is missing (the caller skips). */
static fixture_t *fixture_ref(void)
{
	char path[1024];
	fitsfile *f = NULL;
	int st = 0, v[10];
	static const char *keys[10] = { "YMIN", "XMIN", "NY", "NX", "SPECMIN_", "NSPECPAD",
					"IWAVE0", "NWAVETOT", "WAVEPAD", "NWAVESTE" };

	snprintf(path, sizeof path, "%s/data/desi/ref_patch.fits", bt_shared_dir());
	if (fits_open_file(&f, path, READONLY, &st) != 0)
		return NULL;
	for (int i = 0; i < 10; i++)
		fits_read_key(f, TINT, keys[i], &v[i], NULL, &st);
	assert_int_equal(st, 0);
	fixture_t *fx = calloc(1, sizeof *fx);
	assert_non_null(fx);
	desi_batch_t *b = &fx->b;
	const int ymin = v[0], xmin = v[1], ny = v[2], nx = v[3];
	b->p = (desi_patch_t){ .nfib = v[5], .nwave = v[7], .sy = 11, .sx = 17,
			       .core_f0 = 1, .core_nf = 5, .core_w0 = v[8], .core_nw = v[9],
			       .ndiag = NDIAG, .regularize = 0.0, .psferr = 0.01 };
	const desi_patch_t *p = &b->p;
	const size_t npix = (size_t)ny * nx, nw = (size_t)p->nfib * p->nwave;
	const size_t nc = (size_t)p->core_nf * p->core_nw;
	double *pix = tfits_read_hdu(f, "PIX", npix, TDOUBLE), *iv = tfits_read_hdu(f, "IVAR", npix, TDOUBLE);
	fx->spots = tfits_read_hdu(f, "SPOTS", nw * p->sy * p->sx, TDOUBLE);
	fx->xc = tfits_read_hdu(f, "XC", nw, TINT);
	fx->yc = tfits_read_hdu(f, "YC", nw, TINT);
	fx->cflux = tfits_read_hdu(f, "CORE_FLUX", nc, TDOUBLE);
	fx->civar = tfits_read_hdu(f, "CORE_IVAR", nc, TDOUBLE);
	fx->chi2pix = tfits_read_hdu(f, "CHI2PIX", nc, TDOUBLE);
	fx->pixmask = tfits_read_hdu(f, "PIXMASK_FRACTION", nc, TDOUBLE);
	fx->rdiags = tfits_read_hdu(f, "RDIAGS", nc * (2 * NDIAG + 1), TDOUBLE);
	fits_close_file(f, &st);
	fx->nbfib = p->nfib;

	/* The image: the window and a margin, zero (ivar 0) elsewhere. */
	assert_true(ymin >= 0 && xmin >= 0);
	b->npix_y = ymin + ny + 7;
	b->npix_x = xmin + nx + 5;
	const size_t nimg = (size_t)b->npix_y * b->npix_x;
	fx->img = calloc(nimg, sizeof *fx->img);
	fx->ivar = calloc(nimg, sizeof *fx->ivar);
	assert_true(fx->img != NULL && fx->ivar != NULL);
	size_t inexact = 0;
	for (int r = 0; r < ny; r++)
		for (int c = 0; c < nx; c++) {
			size_t s = (size_t)(ymin + r) * b->npix_x + (size_t)(xmin + c);
			size_t q = (size_t)r * nx + c;
			fx->img[s] = (float)pix[q];
			fx->ivar[s] = (float)iv[q];
			inexact += (double)fx->img[s] != pix[q] || (double)fx->ivar[s] != iv[q];
		}
	print_message("# ref patch: %zu of %zu pixels not exactly floats\n", inexact, npix);
	free(pix);
	free(iv);

	fx->geom[0][0] = ymin;
	fx->geom[1][0] = ny;
	fx->geom[2][0] = xmin;
	fx->geom[3][0] = nx;
	fx->geom[4][0] = 0;
	fx->geom[5][0] = p->core_nw;
	fixture_link(fx, 1);
	b->fib0 = 0;
	b->nfullwave = p->nwave;
	b->nwave_grid = p->core_nw;
	b->nfield = NFIELD;
	b->dw = 0.8;
	return fx;
}

/* ---- a synthetic subbundle of three patches ---- */

static uint64_t bt_rng = 0x2545f4914f6cdd1dull;
static double bt_urand(void)
{
	bt_rng ^= bt_rng << 13;
	bt_rng ^= bt_rng >> 7;
	bt_rng ^= bt_rng << 17;
	return (double)(bt_rng >> 11) * 0x1p-53;
}

enum { S_STEP = 12, S_PAD = 4, S_NBFIB = 6 };

/* Window rows of patch w0: [min yc, max yc + sy) over padded bins
 * [wa, wb) of the patch's fibres. */
static void rows_of(const fixture_t *fx, int w0, int wa, int wb, int *y0, int *y1)
{
	const desi_batch_t *b = &fx->b;
	*y0 = 1 << 30;
	*y1 = -(1 << 30);
	for (int f = 0; f < b->p.nfib; f++)
		for (int w = wa; w < wb; w++) {
			int y = fx->yc[(size_t)(b->fib0 + f) * b->nfullwave + w0 + w];
			*y0 = y < *y0 ? y : *y0;
			*y1 = y + b->p.sy > *y1 ? y + b->p.sy : *y1;
		}
}

/* np >= 3 patches (3 here; the CUDA test also uses 70: two chunks); the
 * last is truncated to 6 core bins. */
static fixture_t *fixture_synth(int np)
{
	const int grid = (np - 1) * S_STEP + 6;
	fixture_t *fx = calloc(1, sizeof *fx);
	assert_non_null(fx);
	desi_batch_t *b = &fx->b;
	const int nwp = S_STEP + 2 * S_PAD;
	b->p = (desi_patch_t){ .nfib = 4, .nwave = nwp, .sy = 11, .sx = 17, .core_f0 = 1,
			       .core_nf = 2, .core_w0 = S_PAD, .ndiag = NDIAG, .regularize = 0.0,
			       .psferr = 0.01 };
	b->fib0 = 1;
	b->nfullwave = grid + 2 * S_PAD + S_STEP;
	b->npix_y = -6 + (int)(1.8 * (b->nfullwave - 1)) + S_NBFIB + b->p.sy + 2;
	b->npix_x = 120;
	b->nwave_grid = grid;
	b->nfield = NFIELD;
	b->dw = 0.8;
	fx->nbfib = S_NBFIB;
	const int nfw = b->nfullwave, ss = b->p.sy * b->p.sx;
	const size_t nspot = (size_t)S_NBFIB * nfw;
	fx->spots = bt_xmalloc(nspot * ss * sizeof *fx->spots);
	fx->xc = bt_xmalloc(nspot * sizeof *fx->xc);
	fx->yc = bt_xmalloc(nspot * sizeof *fx->yc);
	for (int f = 0; f < S_NBFIB; f++)
		for (int w = 0; w < nfw; w++) {
			size_t j = (size_t)f * nfw + w;
			double sum = 0.0, *s = fx->spots + j * ss;
			for (int k = 0; k < ss; k++) {
				int iy = k / b->p.sx, ix = k % b->p.sx;
				double g = exp(-0.5 * ((iy - 5) * (iy - 5) / 2.0 +
						       (ix - 8) * (ix - 8) / 4.0));
				s[k] = g * (0.5 + bt_urand());
				sum += s[k];
			}
			for (int k = 0; k < ss; k++)
				s[k] /= sum;
			fx->xc[j] = 50 + 7 * f + (w % 3 == 0);
			fx->yc[j] = -6 + (int)(1.8 * w) + f;
		}
	const size_t nimg = (size_t)b->npix_y * b->npix_x;
	fx->img = bt_xmalloc(nimg * sizeof *fx->img);
	fx->ivar = bt_xmalloc(nimg * sizeof *fx->ivar);
	for (size_t i = 0; i < nimg; i++) {
		double u = bt_urand();
		fx->img[i] = (float)(100.0 * bt_urand() - 10.0);
		fx->ivar[i] = (float)(u < 0.04 ? 0.0 : u < 0.05 ? -1.0 : 0.5 + bt_urand());
	}
	fx->img[40 * b->npix_x + 70] = NAN;      /* non-finite value, ivar > 0 */
	fx->img[55 * b->npix_x + 75] = INFINITY;
	fx->ivar[30 * b->npix_x + 65] = INFINITY; /* non-finite weight */

	int *ymin = fx->geom[0], *ny = fx->geom[1], *xmin = fx->geom[2], *nx = fx->geom[3];
	int *w0 = fx->geom[4], *cnw = fx->geom[5];
	assert_true(np >= 3 && np <= MAXP);
	for (int i = 0; i < np; i++) {
		int y0, y1;
		w0[i] = i * S_STEP;
		cnw[i] = grid - w0[i] < S_STEP ? grid - w0[i] : S_STEP;
		xmin[i] = 50 + 7 * b->fib0;
		nx[i] = 7 * (b->p.nfib - 1) + 1 + b->p.sx;
		if (i == 2) /* every padded spot: the last pad bin is in the window */
			rows_of(fx, w0[i], 0, nwp, &y0, &y1);
		else
			rows_of(fx, w0[i], S_PAD, S_PAD + cnw[i], &y0, &y1);
		ymin[i] = y0 - 3;
		ny[i] = y1 - y0 + 6;
	}
	/* Patch 0 reaches above the image (ymin < 0); patch 1's window cuts
	 * the first fibre's spots; patch 2's runs past the right edge. */
	assert_true(ymin[0] < 0);
	xmin[1] += 4;
	nx[1] -= 4;
	nx[2] = b->npix_x - xmin[2] + 9;
	for (int i = 0; i < np; i++)
		assert_true(ymin[i] + ny[i] <= b->npix_y);
	fixture_link(fx, np);
	return fx;
}

/* ---- the expectation: single-patch kernels, patch by patch ---- */

/* Expected rows of fx's batch; returns the expected return value. */
static int expected_rows(const fixture_t *fx, float *rows)
{
	const desi_batch_t *b = &fx->b;
	const int nfib = b->p.nfib, nw = b->p.nwave, n = nfib * nw, nd = 2 * NDIAG + 1;
	const size_t ss = (size_t)b->p.sy * b->p.sx;
	int ret = 0;

	memset(rows, 0, rows_len(b) * sizeof *rows);
	for (int i = 0; i < b->np; i++) {
		desi_patch_t p = b->p;
		p.ymin = b->ymin[i];
		p.ny = b->ny[i];
		p.xmin = b->xmin[i];
		p.nx = b->nx[i];
		p.core_nw = b->core_nw[i];
		const size_t npix = (size_t)p.ny * p.nx, nc = (size_t)p.core_nf * p.core_nw;
		double *sp = bt_xmalloc((size_t)n * ss * sizeof *sp);
		int32_t *xc = bt_xmalloc((size_t)n * sizeof *xc), *yc = bt_xmalloc((size_t)n * sizeof *yc);
		double *pix = bt_xmalloc(npix * sizeof *pix), *iv = bt_xmalloc(npix * sizeof *iv);
		double *icov = bt_xmalloc((size_t)n * n * sizeof *icov);
		double *y = bt_xmalloc((size_t)n * sizeof *y), *fw = bt_xmalloc((size_t)n * sizeof *fw);
		double *x = bt_xmalloc((size_t)n * sizeof *x);
		double *out = bt_xmalloc(nc * (4 + (size_t)nd) * sizeof *out);
		double *work = bt_xmalloc(desi_extract_work_size(&p) * sizeof *work);
		for (int f = 0; f < nfib; f++)
			for (int w = 0; w < nw; w++) {
				size_t src = (size_t)(b->fib0 + f) * b->nfullwave + b->w0[i] + w;
				size_t dst = (size_t)f * nw + w;
				memcpy(sp + dst * ss, fx->spots + src * ss, ss * sizeof *sp);
				xc[dst] = fx->xc[src];
				yc[dst] = fx->yc[src];
			}
		for (int r = 0; r < p.ny; r++)
			for (int c = 0; c < p.nx; c++) {
				int yy = p.ymin + r, xx = p.xmin + c;
				double v = 0.0, w = 0.0;
				if (yy >= 0 && yy < b->npix_y && xx >= 0 && xx < b->npix_x) {
					float fv = fx->img[(size_t)yy * b->npix_x + xx];
					float fw_ = fx->ivar[(size_t)yy * b->npix_x + xx];
					if (isfinite(fv) && isfinite(fw_) && fw_ > 0) {
						v = fv;
						w = fw_;
					}
				}
				pix[(size_t)r * p.nx + c] = v;
				iv[(size_t)r * p.nx + c] = w;
			}
		double *flux = out, *fi = out + nc, *c2 = out + 2 * nc, *pm = out + 3 * nc;
		double *rd = out + 4 * nc;
		desi_extract_normal_cpu(&p, sp, xc, yc, pix, iv, icov, y, fw);
		int info = desi_extract_solve_cpu(&p, icov, y, x, work);
		if (info == 0)
			info = desi_decorrelate_cpu(&p, icov, x, flux, fi, rd, NULL, work);
		if (info != 0) {
			if (ret == 0)
				ret = i + 1;
		} else {
			desi_extract_chi2_cpu(&p, sp, xc, yc, pix, iv, x, c2, pm, work);
			for (int f = 0; f < p.core_nf; f++)
				for (int w = 0; w < p.core_nw; w++) {
					size_t k = (size_t)f * p.core_nw + w;
					float *row = rows + (size_t)f * b->nfield * b->nwave_grid +
						     b->w0[i] + w;
					size_t g = (size_t)b->nwave_grid;
					row[0] = (float)(flux[k] / b->dw);
					row[g] = (float)(fi[k] * b->dw * b->dw);
					row[2 * g] = (float)c2[k];
					row[3 * g] = (float)pm[k];
					for (int d = 0; d < nd; d++)
						row[(4 + d) * g] =
							(float)rd[((size_t)f * nd + d) * p.core_nw + w];
					size_t j = (size_t)(p.core_f0 + f) * nw + p.core_w0 + w;
					if (b->xflux) /* the deconvolved flux, as it is */
						row[(4 + nd) * g] = (float)x[j];
				}
		}
		void *a[] = { sp, xc, yc, pix, iv, icov, y, fw, x, out, work };
		for (size_t k = 0; k < sizeof a / sizeof *a; k++)
			free(a[k]);
	}
	return ret;
}

static const char *field_name(int k)
{
	static const char *nm[] = { "flux", "ivar", "chi2pix", "pixmask" };
	return k < 4 ? nm[k] : k < 4 + 2 * NDIAG + 1 ? "rdiag" : "xflux";
}

/* Per field: max |a - b| / max |b| over the batch's rows (NaN counts as
 * infinite); prints each and returns the largest. */
static double rows_dev(const desi_batch_t *b, const float *a, const float *e, const char *what)
{
	double worst = 0.0;
	for (int k = 0; k < b->nfield; k++) {
		double d = 0.0, m = 0.0;
		for (int f = 0; f < b->p.core_nf; f++)
			for (int w = 0; w < b->nwave_grid; w++) {
				size_t q = ((size_t)f * b->nfield + k) * b->nwave_grid + w;
				double x = fabs((double)a[q] - (double)e[q]);
				if (!(x <= d))
					d = isnan(x) ? INFINITY : x;
				if (fabs((double)e[q]) > m)
					m = fabs((double)e[q]);
			}
		double r = m > 0 ? d / m : d;
		if (k < 5 || k == b->nfield - 1 || r > worst)
			print_message("# %-10s %-8s%s rel dev %.2e\n", what, field_name(k),
				      k >= 4 ? "" : " ", r);
		worst = r > worst ? r : worst;
	}
	return worst;
}

#ifndef DESI_BATCH_FIXTURES_ONLY

static size_t count_diff(const float *a, const float *b, size_t n)
{
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += memcmp(&a[i], &b[i], sizeof *a) != 0;
	return bad;
}

/* The reference patch: bit for bit the single-patch chain; the reference's
 * CORE_* arrays to float rounding (1e-6 relative to each array's max). */
static void test_ref(void **state)
{
	(void)state;
	fixture_t *fx = fixture_ref();
	assert_non_null(fx);
	const desi_batch_t *b = &fx->b;
	const size_t len = rows_len(b);
	float *rows = bt_xmalloc(len * sizeof *rows), *exp_ = bt_xmalloc(len * sizeof *exp_);
	for (size_t i = 0; i < len; i++)
		rows[i] = NAN;
	assert_int_equal(expected_rows(fx, exp_), 0);
	assert_int_equal(desi_extract_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						rows), 0);
	size_t bad = count_diff(rows, exp_, len);
	print_message("# ref batch vs single-patch chain: %zu of %zu floats differ\n", bad, len);
	assert_int_equal(bad, 0);

	const int nc = b->p.core_nf * b->p.core_nw, g = b->nwave_grid, nd = 2 * NDIAG + 1;
	double *got = bt_xmalloc((size_t)nc * nd * sizeof *got);
	struct {
		const char *name;
		int field;
		const double *ref;
		double scale;
		double tol;
	} cmp[] = {
		{ "CORE_FLUX", 0, fx->cflux, b->dw, 1e-6 },
		{ "CORE_IVAR", 1, fx->civar, 1.0 / (b->dw * b->dw), 1e-6 },
		{ "CHI2PIX", 2, fx->chi2pix, 1.0, 1e-6 },
	};
	for (size_t c = 0; c < sizeof cmp / sizeof *cmp; c++) {
		double d = 0.0, m = 0.0;
		for (int f = 0; f < b->p.core_nf; f++)
			for (int w = 0; w < b->p.core_nw; w++) {
				double v = (double)rows[((size_t)f * b->nfield + cmp[c].field) * g + w] *
					   cmp[c].scale;
				double r = cmp[c].ref[f * b->p.core_nw + w];
				d = fabs(v - r) > d ? fabs(v - r) : d;
				m = fabs(r) > m ? fabs(r) : m;
			}
		print_message("# rows vs %-17s rel dev %.2e (tol %.0e)\n", cmp[c].name, d / m,
			      cmp[c].tol);
		assert_true(d <= cmp[c].tol * m);
	}
	/* PIXMASK_FRACTION: exact (all zero, no masked pixel in the patch). */
	for (int f = 0; f < b->p.core_nf; f++)
		for (int w = 0; w < b->p.core_nw; w++)
			assert_true((double)rows[((size_t)f * b->nfield + 3) * g + w] ==
				    (double)(float)fx->pixmask[f * b->p.core_nw + w]);
	/* RDIAGS [f][k][w] against rows [f][4 + k][w]: 1e-6 absolute (entries <= 1). */
	double dr = 0.0;
	for (int f = 0; f < b->p.core_nf; f++)
		for (int k = 0; k < nd; k++)
			for (int w = 0; w < b->p.core_nw; w++) {
				double v = rows[((size_t)f * b->nfield + 4 + k) * g + w];
				double r = fx->rdiags[((size_t)f * nd + k) * b->p.core_nw + w];
				dr = fabs(v - r) > dr ? fabs(v - r) : dr;
			}
	print_message("# rows vs %-17s abs dev %.2e (tol 1e-06)\n", "RDIAGS", dr);
	assert_true(dr <= 1e-6);
	free(got);
	free(rows);
	free(exp_);
	fixture_free(fx);
}

/* Three patches: bit for bit the per-patch calls; every grid column written. */
static void test_synth(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(3);
	const desi_batch_t *b = &fx->b;
	const size_t len = rows_len(b);
	float *rows = bt_xmalloc(len * sizeof *rows), *exp_ = bt_xmalloc(len * sizeof *exp_);
	for (size_t i = 0; i < len; i++)
		rows[i] = NAN;
	assert_int_equal(expected_rows(fx, exp_), 0);
	assert_int_equal(desi_extract_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						rows), 0);
	size_t bad = count_diff(rows, exp_, len);
	print_message("# synthetic batch vs per-patch calls: %zu of %zu floats differ\n", bad, len);
	rows_dev(b, rows, exp_, "synthetic");
	assert_int_equal(bad, 0);
	/* Sanity of the setup: the masks reach the outputs, ivar > 0 everywhere. */
	double pmmax = 0.0;
	for (int f = 0; f < b->p.core_nf; f++)
		for (int w = 0; w < b->nwave_grid; w++) {
			size_t q = (size_t)f * b->nfield * b->nwave_grid + w;
			assert_true(rows[q + b->nwave_grid] > 0.0f);
			pmmax = fmax(pmmax, rows[q + 3 * (size_t)b->nwave_grid]);
		}
	print_message("# synthetic: max pixmask_fraction %.3f\n", pmmax);
	assert_true(pmmax > 0.0);
	/* The two phases apart, the band slots cleared as the CUDA patch phase
	 * leaves them: the decorrelation scans for the bandwidth and gives the
	 * same bits. */
	const size_t nd = desi_normal_doubles(b), n = (size_t)desi_patch_n(&b->p);
	double *normal = bt_xmalloc(nd * sizeof *normal);
	float *rows2 = bt_xmalloc(len * sizeof *rows2);
	/* NaN where the patch phase does not write (icov's strictly lower
	 * triangle, extract.h): the decorrelation must not read it */
	memset(normal, 0xff, nd * sizeof *normal);
	assert_int_equal(desi_patch_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
					      normal), 0);
	const double *band = normal + (size_t)b->np * (n * n + 2 * n);
	for (int i = 0; i < b->np; i++)
		assert_true(band[i] >= 1.0); /* the CPU knows it */
	memset(normal + (size_t)b->np * (n * n + 2 * n), 0, (size_t)b->np * sizeof *normal);
	assert_int_equal(desi_decorrelate_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						    normal, rows2), 0);
	assert_memory_equal(rows2, rows, len * sizeof *rows);
	free(normal);
	free(rows2);
	free(rows);
	free(exp_);
	fixture_free(fx);
}

/* A NaN spot that only the last patch sees: that patch fails (return 3),
 * its core is zero, the others are still done. */
static void test_failure(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(3);
	const desi_batch_t *b = &fx->b;
	const size_t len = rows_len(b), ss = (size_t)b->p.sy * b->p.sx;
	const int wbad = b->w0[2] + b->p.nwave - 2; /* a right pad bin of patch 2 only */
	assert_true(wbad >= b->w0[1] + b->p.nwave);
	fx->spots[((size_t)(b->fib0 + 1) * b->nfullwave + wbad) * ss + 60] = NAN;
	float *rows = bt_xmalloc(len * sizeof *rows), *exp_ = bt_xmalloc(len * sizeof *exp_);
	for (size_t i = 0; i < len; i++)
		rows[i] = NAN;
	assert_int_equal(expected_rows(fx, exp_), 3);
	assert_int_equal(desi_extract_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						rows), 3);
	assert_int_equal(count_diff(rows, exp_, len), 0);
	for (int f = 0; f < b->p.core_nf; f++)
		for (int k = 0; k < b->nfield; k++)
			for (int w = b->w0[2]; w < b->w0[2] + b->core_nw[2]; w++)
				assert_true(rows[((size_t)f * b->nfield + k) * b->nwave_grid + w] == 0.0f);
	free(rows);
	free(exp_);
	fixture_free(fx);
}

/* xflux: the rows carry the deconvolved flux as one more field, bit for bit
 * (float)x of the single-patch solve; the other fields are those of the
 * batch without it. */
static void test_xflux(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(3);
	desi_batch_t *b = &fx->b;
	float *rows0 = bt_xmalloc(rows_len(b) * sizeof *rows0);
	assert_int_equal(desi_extract_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						rows0), 0);
	b->xflux = 1;
	b->nfield = NFIELD + 1;
	const size_t len = rows_len(b);
	float *rows = bt_xmalloc(len * sizeof *rows), *exp_ = bt_xmalloc(len * sizeof *exp_);
	for (size_t i = 0; i < len; i++)
		rows[i] = NAN;
	assert_int_equal(expected_rows(fx, exp_), 0);
	assert_int_equal(desi_extract_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						rows), 0);
	size_t bad = count_diff(rows, exp_, len), nonzero = 0;
	rows_dev(b, rows, exp_, "xflux");
	print_message("# xflux batch vs per-patch calls: %zu of %zu floats differ\n", bad, len);
	assert_int_equal(bad, 0);
	const size_t g = (size_t)b->nwave_grid;
	for (int f = 0; f < b->p.core_nf; f++) {
		const float *r = rows + (size_t)f * b->nfield * g, *r0 = rows0 + (size_t)f * NFIELD * g;
		assert_int_equal(count_diff(r, r0, NFIELD * g), 0);
		for (size_t w = 0; w < g; w++)
			nonzero += rows[((size_t)f * b->nfield + NFIELD) * g + w] != 0.0f;
	}
	assert_int_equal(nonzero, (size_t)b->p.core_nf * g); /* every core bin has its x */
	free(rows);
	free(rows0);
	free(exp_);
	fixture_free(fx);
}

/* The rows of patches [i0, i0 + np) of b (full rows `rows`), as the
 * extraction's chunks have them: columns w0[i0] .. of the subbundle's. */
static desi_batch_t chunk_of(const desi_batch_t *b, const float *rows, int i0, int np, float **out)
{
	desi_batch_t c = *b;
	c.np = np;
	c.ymin += i0;
	c.ny += i0;
	c.xmin += i0;
	c.nx += i0;
	c.w0 += i0;
	c.core_nw += i0;
	c.col0 = c.w0[0];
	c.nwave_grid = c.w0[np - 1] + c.core_nw[np - 1] - c.col0;
	*out = bt_xmalloc(rows_len(&c) * sizeof **out);
	for (int r = 0; r < c.p.core_nf * c.nfield; r++)
		memcpy(*out + (size_t)r * c.nwave_grid, rows + (size_t)r * b->nwave_grid + c.col0,
		       (size_t)c.nwave_grid * sizeof **out);
	return c;
}

/* desi_model_batch_cpu(): against the sum done here in double, spot by spot
 * (1e-6 of the image's largest value: the kernel rounds each term to
 * float), on an image narrower than the spots reach (clipped); the same
 * image to the bit when the subbundle comes as two chunks (patches 0-1,
 * then 2) in order, as with another tile:; nothing without xflux. */
static void test_model(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(3);
	desi_batch_t *b = &fx->b;
	b->xflux = 1;
	b->nfield = NFIELD + 1;
	const size_t len = rows_len(b);
	const size_t ss = (size_t)b->p.sy * b->p.sx, g = (size_t)b->nwave_grid;
	float *rows = bt_xmalloc(len * sizeof *rows);
	assert_int_equal(desi_extract_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						rows), 0);
	/* the model's image: the right-most fibre's spots run off it */
	b->npix_x = 80;
	const size_t npix = (size_t)b->npix_y * b->npix_x;
	float *one = calloc(npix, sizeof *one), *two = calloc(npix, sizeof *two);
	double *ref = calloc(npix, sizeof *ref);
	assert_true(one != NULL && two != NULL && ref != NULL);
	desi_model_batch_cpu(b, fx->spots, fx->xc, fx->yc, rows, one);
	float *r01, *r2;
	desi_batch_t c01 = chunk_of(b, rows, 0, 2, &r01), c2 = chunk_of(b, rows, 2, 1, &r2);
	desi_model_batch_cpu(&c01, fx->spots, fx->xc, fx->yc, r01, two);
	desi_model_batch_cpu(&c2, fx->spots, fx->xc, fx->yc, r2, two);
	size_t clipped = 0;
	for (int f = 0; f < b->p.core_nf; f++)
		for (size_t w = 0; w < g; w++) {
			const double x = rows[((size_t)f * b->nfield + NFIELD) * g + w];
			const size_t j = (size_t)(b->fib0 + b->p.core_f0 + f) * b->nfullwave + w +
					 b->p.core_w0;
			for (size_t k = 0; k < ss; k++) {
				long long r = fx->yc[j] + (long long)(k / b->p.sx);
				long long q = fx->xc[j] + (long long)(k % b->p.sx);
				if (r < 0 || r >= b->npix_y || q < 0 || q >= b->npix_x)
					clipped++;
				else
					ref[r * b->npix_x + q] += x * fx->spots[j * ss + k];
			}
		}
	double d = 0.0, m = 0.0, sum = 0.0;
	for (size_t i = 0; i < npix; i++) {
		d = fmax(d, fabs((double)one[i] - ref[i]));
		m = fmax(m, fabs(ref[i]));
		sum += one[i];
	}
	size_t bad = count_diff(one, two, npix);
	print_message("# model vs double sum: max dev %.2e of max %.3e (rel %.2e), %zu spot pixels "
		      "off the image; one call vs two chunks: %zu of %zu pixels differ\n",
		      d, m, d / m, clipped, bad, npix);
	assert_true(m > 0.0 && clipped > 0 && d <= 1e-6 * m);
	assert_int_equal(bad, 0);
	/* without the field, nothing is added */
	b->xflux = 0;
	float *none = calloc(npix, sizeof *none);
	assert_non_null(none);
	desi_model_batch_cpu(b, fx->spots, fx->xc, fx->yc, rows, none);
	for (size_t i = 0; i < npix; i++)
		assert_true(none[i] == 0.0f);
	free(none);
	free(r01);
	free(r2);
	free(one);
	free(two);
	free(ref);
	free(rows);
	fixture_free(fx);
}

extern void openblas_set_num_threads(int);

/* A stop requested (src/base/cancel.h, as sp_run_interrupt() does on
 * SIGTERM): both phases return DESI_CANCELLED at once, before their first
 * patch, and leave the rows alone.  The request is never cleared in a
 * process: this test runs last. */
static void test_cancel(void **state)
{
	(void)state;
	fixture_t *fx = fixture_synth(3);
	const desi_batch_t *b = &fx->b;
	const size_t len = rows_len(b), nd = desi_normal_doubles(b);
	float *rows = bt_xmalloc(len * sizeof *rows);
	double *normal = bt_xmalloc(nd * sizeof *normal);
	for (size_t i = 0; i < len; i++)
		rows[i] = -1.0f;
	memset(normal, 0, nd * sizeof *normal);
	sp_cancel_request();
	assert_true(sp_cancel_requested());
	assert_int_equal(desi_patch_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
					      normal), DESI_CANCELLED);
	assert_int_equal(desi_decorrelate_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						    normal, rows), DESI_CANCELLED);
	assert_int_equal(desi_extract_batch_cpu(b, fx->spots, fx->xc, fx->yc, fx->img, fx->ivar,
						rows), DESI_CANCELLED);
	for (size_t i = 0; i < len; i++)
		assert_true(rows[i] == -1.0f);
	free(normal);
	free(rows);
	fixture_free(fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ref),
		cmocka_unit_test(test_synth),
		cmocka_unit_test(test_failure),
		cmocka_unit_test(test_xflux),
		cmocka_unit_test(test_model),
		cmocka_unit_test(test_cancel), /* last: the stop request stays set */
	};
	char path[1024];
	FILE *f;

	openblas_set_num_threads(1);
	snprintf(path, sizeof path, "%s/data/desi/ref_patch.fits", bt_shared_dir());
	if ((f = fopen(path, "rb")) == NULL) {
		printf("1..0 # SKIP %s not found (set SP_SHARED)\n", path);
		return 0;
	}
	fclose(f);
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif /* DESI_BATCH_FIXTURES_ONLY */
