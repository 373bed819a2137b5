/* Per-thread bodies of the DESI CUDA kernels (window, normal equations, regularisation, rows), plain C shared with the CPU. */
#ifndef SP_DESI_KERN_H
#define SP_DESI_KERN_H

/*
 * DESIGN.  What extract_cuda.cu's k_window, k_normal, k_regularise,
 * k_decorrelate, k_chi2pix, k_chi2core, k_write, k_stitch and psf_cuda.cu's spots
 * kernel compute, element by element, lives here, compiled as C for the
 * CPU (extract_cpu.c and extract_batch.c call the same functions) and as
 * __host__ __device__ for CUDA.  tests/test_desi_kern.c runs the kernels'
 * per-thread bodies on the host, block by block and thread by thread in
 * the kernels' own grids, and compares with desi_patch_batch_cpu() and
 * desi_extract_chi2_cpu() bit for bit: iCov, y, fluxweight, chi2pix and
 * pixmask_fraction are identical by construction (the same
 * operations in the same order; on the device every double operation is
 * an explicit round-to-nearest intrinsic, so no FMA contraction, and the
 * host builds with -ffp-contract=off).
 *
 * Geometry: a spot is sy x sx pixels with its corner at CCD (yc, xc); a
 * patch's pixel window is [ymin, ymin + ny) x [xmin, xmin + nx); a spot's
 * rectangle is clipped to the window (cut spots are not renormalised).
 */

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DSK_FN static __host__ __device__ inline
#else
#define DSK_FN static inline
#endif

#ifdef __CUDA_ARCH__
#define DSK_MUL(a, b) __dmul_rn((a), (b))
#define DSK_ADD(a, b) __dadd_rn((a), (b))
#define DSK_SUB(a, b) __dsub_rn((a), (b))
#define DSK_DIV(a, b) __ddiv_rn((a), (b))
#else
#define DSK_MUL(a, b) ((a) * (b))
#define DSK_ADD(a, b) ((a) + (b))
#define DSK_SUB(a, b) ((a) - (b))
#define DSK_DIV(a, b) ((a) / (b))
#endif

/* Launch shapes, shared with the host emulation: threads per block of the
 * element kernels, and the side of k_normal's square blocks. */
#define DSK_THREADS 256
#define DSK_TILE 16

/* A patch's pixel window and the spot size. */
typedef struct dsk_win {
	int ymin, xmin, ny, nx; /* ny, nx >= 0 */
	int sy, sx;
} dsk_win_t;

/* The spot rectangle clipped to the window: window rows [y0, y1), columns
 * [x0, x1); (oy, ox) is the spot's corner in window coordinates.  Returns
 * whether it is not empty. */
typedef struct dsk_rect {
	int y0, y1, x0, x1, oy, ox;
} dsk_rect_t;

DSK_FN int dsk_rect(const dsk_win_t *w, int32_t xc, int32_t yc, dsk_rect_t *r)
{
	long long ly = (long long)yc - w->ymin, lx = (long long)xc - w->xmin;
	if (ly >= w->ny || lx >= w->nx || ly + w->sy <= 0 || lx + w->sx <= 0)
		return 0;
	r->oy = (int)ly;
	r->ox = (int)lx;
	r->y0 = r->oy > 0 ? r->oy : 0;
	r->x0 = r->ox > 0 ? r->ox : 0;
	r->y1 = r->oy + w->sy < w->ny ? r->oy + w->sy : w->ny;
	r->x1 = r->ox + w->sx < w->nx ? r->ox + w->sx : w->nx;
	return r->y0 < r->y1 && r->x0 < r->x1;
}

/* One pixel of the window copy: CCD (yr, xr) of the float image as
 * doubles; outside the image, a non-finite value or an ivar that is not
 * finite and > 0 gives pix 0, ivar 0 (a masked pixel). */
DSK_FN void dsk_window_px(const float *img, const float *ivar, int npix_y, int npix_x,
			  long long yr, long long xr, double *pix, double *wivar)
{
	double v = 0.0, w = 0.0;
	if (yr >= 0 && yr < npix_y && xr >= 0 && xr < npix_x) {
		size_t s = (size_t)yr * (size_t)npix_x + (size_t)xr;
		float fv = img[s], fw = ivar[s];
		if (isfinite(fv) && isfinite(fw) && fw > 0.0f) {
			v = fv;
			w = fw;
		}
	}
	*pix = v;
	*wivar = w;
}

/* The order of the sums over a spot rectangle (dsk_column_sums(),
 * dsk_pair_sum()): row y of the rectangle, y = y0 + 4 b + l, goes to
 * partial sum l, its terms in column order, the rows of a partial sum in
 * order, and the result is (s0 + s1) + (s2 + s3).  Four independent chains
 * of adds, and on the CPU four rows in the four lanes of a vector, read
 * from spots held transposed (normal_simd.h): a column of four rows per
 * multiply-add, where the rows' terms (~7 on average for a pair) made
 * short loops.  The order is fixed, so the CPU and the GPU agree to the
 * bit. */

/* A'Np and A'N1 of one column: the sums over its rectangle in the order
 * above.  Returns A'Np; *fw receives A'N1. */
DSK_FN double dsk_column_sums(const double *s, const dsk_rect_t *r, int sx, const double *pix,
			      const double *ivar, int nx, double *fw)
{
	double w0 = 0.0, w1 = 0.0, w2 = 0.0, w3 = 0.0; /* A'N1 */
	double p0 = 0.0, p1 = 0.0, p2 = 0.0, p3 = 0.0; /* A'Np */
	for (int y = r->y0; y < r->y1; y += 4)
		for (int x = r->x0; x < r->x1; x++) {
#define DSK_COL(l, wl, pl)                                                                  \
	if (y + (l) < r->y1) {                                                              \
		const int yy = y + (l);                                                     \
		const double aw = DSK_MUL(s[(yy - r->oy) * sx + (x - r->ox)], ivar[yy * nx + x]); \
		wl = DSK_ADD(wl, aw);                                                       \
		pl = DSK_ADD(pl, DSK_MUL(aw, pix[yy * nx + x]));                            \
	}
			DSK_COL(0, w0, p0)
			DSK_COL(1, w1, p1)
			DSK_COL(2, w2, p2)
			DSK_COL(3, w3, p3)
#undef DSK_COL
		}
	*fw = DSK_ADD(DSK_ADD(w0, w1), DSK_ADD(w2, w3));
	return DSK_ADD(DSK_ADD(p0, p1), DSK_ADD(p2, p3));
}

/* A'NA of two columns: the sum of s1 ivar s2 over the intersection of
 * their rectangles (0 when they do not meet), in the order above. */
DSK_FN double dsk_pair_sum(const double *s1, const dsk_rect_t *a, const double *s2,
			   const dsk_rect_t *b, int sx, const double *ivar, int nx)
{
	int r0 = a->y0 > b->y0 ? a->y0 : b->y0, r1 = a->y1 < b->y1 ? a->y1 : b->y1;
	int q0 = a->x0 > b->x0 ? a->x0 : b->x0, q1 = a->x1 < b->x1 ? a->x1 : b->x1;
	double c0 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0;
	if (r0 >= r1 || q0 >= q1)
		return 0.0;
	for (int y = r0; y < r1; y += 4)
		for (int q = q0; q < q1; q++) {
#define DSK_PAIR(l, cl)                                                                     \
	if (y + (l) < r1) {                                                                 \
		const int yy = y + (l);                                                     \
		cl = DSK_ADD(cl, DSK_MUL(DSK_MUL(s1[(yy - a->oy) * sx + q - a->ox],          \
						 ivar[yy * nx + q]),                        \
					 s2[(yy - b->oy) * sx + q - b->ox]));               \
	}
			DSK_PAIR(0, c0)
			DSK_PAIR(1, c1)
			DSK_PAIR(2, c2)
			DSK_PAIR(3, c3)
#undef DSK_PAIR
		}
	return DSK_ADD(DSK_ADD(c0, c1), DSK_ADD(c2, c3));
}

/* The normal equations' entry (j1, j2), j1 <= j2, of one patch: column j's
 * spot is spot(j), its corner (xc(j), yc(j)).  Writes icov[j1][j2] and
 * [j2][j1] (n x n), and on the diagonal y[j1] and fw[j1]: k_normal's
 * thread body. */
DSK_FN void dsk_normal_entry(const dsk_win_t *w, int n, int j1, int j2, const double *s1,
			     int32_t xc1, int32_t yc1, const double *s2, int32_t xc2, int32_t yc2,
			     const double *pix, const double *ivar, double *icov, double *y,
			     double *fw)
{
	dsk_rect_t a, b;
	int in1 = dsk_rect(w, xc1, yc1, &a);
	double acc = 0.0;
	if (j1 == j2) {
		double sw = 0.0, sy_ = in1 ? dsk_column_sums(s1, &a, w->sx, pix, ivar, w->nx, &sw) : 0.0;
		y[j1] = sy_;
		fw[j1] = sw;
	}
	if (in1 && dsk_rect(w, xc2, yc2, &b))
		acc = dsk_pair_sum(s1, &a, s2, &b, w->sx, ivar, w->nx);
	icov[(size_t)j1 * n + j2] = acc;
	icov[(size_t)j2 * n + j1] = acc;
}

/* Step 2 for one bin: iCov[j][j] plus the regularisation, alpha =
 * minweight - fluxweight where fluxweight < minweight (minweight = 1e-4
 * max fluxweight), else `regularize`; plus 1e-15. */
DSK_FN double dsk_regularised(double diag, double fw, double minweight, double regularize)
{
	double a = fw < minweight ? DSK_SUB(minweight, fw) : regularize;
	return DSK_ADD(diag, DSK_ADD(DSK_MUL(a, a), 1e-15));
}

/* minweight from the largest fluxweight. */
DSK_FN double dsk_minweight(double fwmax)
{
	return DSK_MUL(1e-4, fwmax);
}

/* Where a patch's columns are: column j (fibre-major, j = f m + w) is spot
 * (fib0 + f) nfullwave + w0 + w of the arrays (the bundle's on the GPU; a
 * patch's own, fib0 = w0 = 0 and nfullwave = m, on the CPU). */
typedef struct dsk_cols {
	const double *spots; /* [..][sy][sx] */
	const int32_t *xc, *yc;
	int fib0, nfullwave, w0, m;
} dsk_cols_t;

DSK_FN size_t dsk_col(const dsk_cols_t *c, int j)
{
	return (size_t)(c->fib0 + j / c->m) * (size_t)c->nfullwave + (size_t)(c->w0 + j % c->m);
}

/* Steps 7-8 for one pixel, from the model A x at it: tivar = 1 / (1/mivar +
 * 1/ivar), mivar = (model psferr + 1e-32)^-2, chi2 = (pix - model)^2 tivar,
 * and whether tivar > 0. */
DSK_FN void dsk_chi2_from_model(double model, double pix, double ivar, double psferr,
				double *chi2, double *tpos)
{
	double sig = DSK_ADD(DSK_MUL(model, psferr), 1e-32), var = DSK_MUL(sig, sig), t = 0.0;
	if (ivar > 0.0 && isfinite(var))
		t = DSK_DIV(1.0, DSK_ADD(var, DSK_DIV(1.0, ivar)));
	double d = DSK_SUB(pix, model);
	*chi2 = DSK_MUL(DSK_MUL(d, d), t);
	*tpos = t > 0.0 ? 1.0 : 0.0;
}

/* Column j's term of the model at window pixel (r, q), added to *model
 * when x[j] != 0 and its clipped spot covers the pixel. */
DSK_FN void dsk_chi2_term(const dsk_win_t *w, const dsk_cols_t *c, const double *x, int j, int r,
			  int q, double *model)
{
	dsk_rect_t rc;
	if (x[j] == 0.0)
		return;
	size_t sj = dsk_col(c, j);
	if (!dsk_rect(w, c->xc[sj], c->yc[sj], &rc))
		return;
	if (r < rc.y0 || r >= rc.y1 || q < rc.x0 || q >= rc.x1)
		return;
	const size_t ss = (size_t)w->sy * w->sx;
	*model = DSK_ADD(*model, DSK_MUL(x[j], c->spots[sj * ss + (r - rc.oy) * w->sx + (q - rc.ox)]));
}

/* The model at window pixel (r, q), the columns in order (those with
 * x[j] = 0 skipped, as the CPU's), then dsk_chi2_from_model(). */
DSK_FN void dsk_chi2_pixel(const dsk_win_t *w, const dsk_cols_t *c, int n, const double *x,
			   int r, int q, double pix, double ivar, double psferr, double *chi2,
			   double *tpos)
{
	double model = 0.0;
	for (int j = 0; j < n; j++)
		dsk_chi2_term(w, c, x, j, r, q, &model);
	dsk_chi2_from_model(model, pix, ivar, psferr, chi2, tpos);
}

/* Whether column j can add to a pixel of window rows [r0, r1]: x[j] != 0
 * and its clipped spot meets those rows.  k_chi2pix lists these columns
 * for its block's pixels, in order, before its pixels' sums. */
DSK_FN int dsk_chi2_col_meets(const dsk_win_t *w, const dsk_cols_t *c, const double *x, int j,
			      int r0, int r1)
{
	dsk_rect_t rc;
	if (x[j] == 0.0)
		return 0;
	size_t sj = dsk_col(c, j);
	return dsk_rect(w, c->xc[sj], c->yc[sj], &rc) && rc.y0 <= r1 && rc.y1 > r0;
}

/* k_chi2pix's body: dsk_chi2_pixel() over the listed columns only (the
 * ascending list of those that meet the pixel's rows): the columns it
 * leaves out add nothing, so the sum is dsk_chi2_pixel()'s bit for bit. */
DSK_FN void dsk_chi2_pixel_cols(const dsk_win_t *w, const dsk_cols_t *c, const int *cols, int ncols,
				const double *x, int r, int q, double pix, double ivar,
				double psferr, double *chi2, double *tpos)
{
	double model = 0.0;
	for (int k = 0; k < ncols; k++)
		dsk_chi2_term(w, c, x, cols[k], r, q, &model);
	dsk_chi2_from_model(model, pix, ivar, psferr, chi2, tpos);
}

/* k_chi2core's body and the CPU's: chi2pix and pixmask_fraction of column j
 * from the chi2 and tivar > 0 maps of the window (nx wide). */
DSK_FN void dsk_chi2_core(const dsk_win_t *w, const dsk_cols_t *c, int j, const double *chi2,
			  const double *tpos, const double *ivar, double *chi2pix, double *pmask)
{
	const size_t ss = (size_t)w->sy * w->sx;
	const size_t sj = dsk_col(c, j);
	dsk_rect_t rc;
	double num = 0.0, den = 0.0, msk = 0.0;
	if (dsk_rect(w, c->xc[sj], c->yc[sj], &rc)) {
		const double *s = c->spots + sj * ss;
		for (int r = rc.y0; r < rc.y1; r++)
			for (int q = rc.x0; q < rc.x1; q++) {
				double a = s[(r - rc.oy) * w->sx + (q - rc.ox)];
				size_t o = (size_t)r * w->nx + q;
				num = DSK_ADD(num, DSK_MUL(a, chi2[o]));
				den = DSK_ADD(den, DSK_MUL(a, tpos[o]));
				if (ivar[o] == 0.0)
					msk = DSK_ADD(msk, a);
			}
	}
	*chi2pix = den > 0.0 ? DSK_DIV(num, den) : 0.0;
	*pmask = msk;
}

/* A frame row value from a core field k (0 flux, 1 ivar, then chi2pix,
 * pixmask_fraction, the resolution diagonals): flux / dw, ivar dw^2,
 * others as they are; 0 for a failed patch. */
DSK_FN float dsk_row_value(double v, int k, double dw, int bad)
{
	if (bad)
		return 0.0f;
	if (k == 0)
		v = v / dw;
	else if (k == 1)
		v = v * dw * dw;
	return (float)v;
}

/* k_stitch's element e (over core_nf x nf_out x nwave, a chunk's rows):
 * field k < nf_out of fibre f of the rows [core_nf][nfield][nwave] into
 * the subbundle's frame rows [core_nf][nf_out][grid] at column col0 + w.
 * desi_stitch_cpu() is the same copy, row by row (memcpy). */
DSK_FN void dsk_stitch_elem(size_t e, int nf_out, int nfield, int nwave, size_t grid, int col0,
			    const float *rows, float *frame)
{
	const size_t w = e % (size_t)nwave, r = e / (size_t)nwave;
	const size_t k = r % (size_t)nf_out, f = r / (size_t)nf_out;
	frame[(f * (size_t)nf_out + k) * grid + (size_t)col0 + w] =
		rows[(f * (size_t)nfield + k) * (size_t)nwave + w];
}

/* k_write's element e of patch i (e over core_nf x nf_out x cnw, the
 * patch's core columns): core [patch][core_nf][nf_out][m] into the rows
 * [core_nf][nfield][nwave_grid] at column col + w. */
DSK_FN void dsk_write_elem(int e, int i, int cnw, int core_nf, int nf_out, int m, int nfield,
			   int nwave_grid, int col, const double *core, int bad, double dw,
			   float *rows)
{
	const int w = e % cnw, k = (e / cnw) % nf_out, fc = e / (cnw * nf_out);
	const double v = core[(((size_t)i * core_nf + fc) * nf_out + k) * m + w];
	rows[((size_t)fc * nfield + k) * nwave_grid + col + w] = dsk_row_value(v, k, dw, bad);
}

/* k_pointers' body for patch i: the batched calls' pointers into the
 * chunk's iCov [np][n][n] (the CPU's normal-equation layout,
 * desi_patch_batch_cpu()) and x [np][n], and a cleared failure flag; and
 * the triangular solve's.  Z = L^-1 E (Z: [np][n k], k_eye's blocks,
 * k = core_nf m) has exact zeros above row `first` (E's first non-zero
 * row, core_f0 m; L is lower triangular), so cublasDtrsmBatched solves
 * only the trailing n - first rows: L's trailing diagonal block (pl,
 * lda n) against Z's trailing rows (pzt, ldb n).  (One call: five, one
 * per core fibre block, each on its own trailing rows, were slower on a
 * GPU, doc/gpu.md.) */
DSK_FN void dsk_pointers(int i, size_t n, size_t k, size_t first, double *icov, double *x,
			 double *z, double **pa, double **px, double **pl, double **pzt, int *fail)
{
	pa[i] = icov + (size_t)i * n * n;
	px[i] = x + (size_t)i * n;
	pl[i] = pa[i] + first * (n + 1);
	pzt[i] = z + (size_t)i * n * k + first;
	fail[i] = 0;
}

/* ---- k_solve: x = L'^-1 L^-1 y for one patch, in blocks of DSK_NB ----
 *
 * L: the Cholesky factor (lower, column-major, lda n) that
 * cusolverDnDpotrfBatched leaves in iCov; x: y on entry, in shared memory.
 * Forward, block by block: the block's DSK_NB x DSK_NB triangle is solved
 * by one thread (dsk_trsv_fwd_diag), then every row below takes the
 * block's contribution (dsk_trsv_fwd_row, one thread per row).  Backward
 * the same with L' from the last block (dsk_trsv_bwd_diag,
 * dsk_trsv_bwd_col, one thread per earlier unknown).  d: the block's
 * triangle, copied column-major (ld DSK_NB) from L. */
#define DSK_NB 32

DSK_FN void dsk_trsv_fwd_diag(const double *d, int nb, double *xb)
{
	for (int j = 0; j < nb; j++) {
		xb[j] = DSK_DIV(xb[j], d[j * DSK_NB + j]);
		for (int l = j + 1; l < nb; l++)
			xb[l] = DSK_SUB(xb[l], DSK_MUL(d[j * DSK_NB + l], xb[j]));
	}
}

/* Row i (below the block [kb, kb + nb)): x[i] -= L[i][kb..] . x[kb..]. */
DSK_FN void dsk_trsv_fwd_row(const double *L, size_t n, int kb, int nb, int i, double *x)
{
	double acc = 0.0;
	for (int j = 0; j < nb; j++)
		acc = DSK_ADD(acc, DSK_MUL(L[(size_t)(kb + j) * n + (size_t)i], x[kb + j]));
	x[i] = DSK_SUB(x[i], acc);
}

DSK_FN void dsk_trsv_bwd_diag(const double *d, int nb, double *xb)
{
	for (int j = nb - 1; j >= 0; j--) {
		xb[j] = DSK_DIV(xb[j], d[j * DSK_NB + j]);
		for (int l = 0; l < j; l++)
			xb[l] = DSK_SUB(xb[l], DSK_MUL(d[l * DSK_NB + j], xb[j]));
	}
}

/* Unknown j (before the block [kb, kb + nb)): x[j] -= L[kb..][j] . x[kb..]. */
DSK_FN void dsk_trsv_bwd_col(const double *L, size_t n, int kb, int nb, int j, double *x)
{
	double acc = 0.0;
	for (int i = 0; i < nb; i++)
		acc = DSK_ADD(acc, DSK_MUL(L[(size_t)j * n + (size_t)(kb + i)], x[kb + i]));
	x[j] = DSK_SUB(x[j], acc);
}

/* k_solve's step s of 2 ceil(n / DSK_NB): the forward blocks first, then
 * the backward ones from the last; returns the block's first unknown. */
DSK_FN int dsk_trsv_step(int n, int s, int *fwd)
{
	const int nblk = (n + DSK_NB - 1) / DSK_NB;
	*fwd = s < nblk;
	return (*fwd ? s : 2 * nblk - 1 - s) * DSK_NB;
}

/* The step's triangle, by one thread. */
DSK_FN void dsk_trsv_diag(const double *d, int nb, int fwd, double *xb)
{
	if (fwd)
		dsk_trsv_fwd_diag(d, nb, xb);
	else
		dsk_trsv_bwd_diag(d, nb, xb);
}

/* The step's k-th update (k < dsk_trsv_nupdate()), one thread each: the
 * rows after the block (forward), the unknowns before it (backward). */
DSK_FN int dsk_trsv_nupdate(int n, int kb, int nb, int fwd)
{
	return fwd ? n - kb - nb : kb;
}

DSK_FN void dsk_trsv_update(const double *L, size_t n, int kb, int nb, int fwd, int k, double *x)
{
	if (fwd)
		dsk_trsv_fwd_row(L, n, kb, nb, kb + nb + k, x);
	else
		dsk_trsv_bwd_col(L, n, kb, nb, k, x);
}

/* Element e of block [kb, kb + nb)'s triangle into d (column-major, ld DSK_NB). */
DSK_FN void dsk_trsv_load(const double *L, size_t n, int kb, int nb, int e, double *d)
{
	const int r = e % DSK_NB, c = e / DSK_NB;
	if (r < nb && c < nb)
		d[e] = L[(size_t)(kb + c) * n + (size_t)(kb + r)];
}

/* k_eye's element e of Z, the core columns of the identity, column-major
 * n x k per patch (k = core_nf m; first: the first core column's row). */
DSK_FN double dsk_eye(size_t e, size_t n, size_t k, size_t first)
{
	size_t row = e % n, col = (e / n) % k;
	return row == first + col ? 1.0 : 0.0;
}

/* ---- k_decorrelate: Q_bb = C_bb^-1/2 of one core fibre's m x m block ----
 *
 * A cyclic Jacobi eigensolver with the parallel (round-robin) ordering: in
 * round r of a sweep, pair k of the mm / 2 disjoint pairs (mm = m rounded up
 * to even; an odd m's extra index is a dummy) is rotated when its
 * off-diagonal entry is not negligible.  These are the bodies of the
 * kernel's thread loops, between its __syncthreads(); like the kernel they
 * use plain arithmetic (nvcc may contract it into FMA: the emulation agrees
 * with the device to rounding, not to the bit).  A, V: m x m, row-major. */

/* Pair k of round r and its rotation (*cs, *sn); returns 1 when it rotates
 * (|a_pq| > DBL_EPSILON sqrt(a_pp a_qq) and > 1e-300), else *sn = 0. */
DSK_FN int dsk_jacobi_pair(const double *A, int m, int mm, int r, int k, int *pp, int *pq,
			   double *cs, double *sn)
{
	int p, q;
	if (k == 0) {
		p = mm - 1;
		q = r;
	} else {
		p = (r + k) % (mm - 1);
		q = (r - k + mm - 1) % (mm - 1);
	}
	if (p > q) {
		int t = p;
		p = q;
		q = t;
	}
	double cc = 1.0, ss = 0.0;
	int rot = 0;
	if (q < m) {
		double apq = A[p * m + q], app = A[p * m + p], aqq = A[q * m + q];
		if (fabs(apq) > 1e-300 && fabs(apq) > DBL_EPSILON * sqrt(fabs(app)) * sqrt(fabs(aqq))) {
			double tau = (aqq - app) / (2.0 * apq);
			double t = 1.0 / (fabs(tau) + hypot(1.0, tau));
			if (tau < 0.0)
				t = -t;
			cc = 1.0 / sqrt(1.0 + t * t);
			ss = t * cc;
			rot = 1;
		}
	} else {
		q = p; /* a dummy pair: no rotation */
	}
	pp[k] = p;
	pq[k] = q;
	cs[k] = cc;
	sn[k] = ss;
	return rot;
}

/* A <- J' A for element e < (mm / 2) m: rows p, q of pair e / m, column e % m. */
DSK_FN void dsk_jacobi_rows(double *A, int m, int e, const int *pp, const int *pq,
			    const double *cs, const double *sn)
{
	int k = e / m, col = e % m, p = pp[k], q = pq[k];
	if (sn[k] == 0.0)
		return;
	double ap = A[p * m + col], aq = A[q * m + col];
	A[p * m + col] = cs[k] * ap - sn[k] * aq;
	A[q * m + col] = sn[k] * ap + cs[k] * aq;
}

/* A <- A J and V <- V J for element e: columns p, q of pair e / m, row e % m. */
DSK_FN void dsk_jacobi_cols(double *A, double *V, int m, int e, const int *pp, const int *pq,
			    const double *cs, const double *sn)
{
	int k = e / m, row = e % m, p = pp[k], q = pq[k];
	if (sn[k] == 0.0)
		return;
	double ap = A[row * m + p], aq = A[row * m + q];
	A[row * m + p] = cs[k] * ap - sn[k] * aq;
	A[row * m + q] = sn[k] * ap + cs[k] * aq;
	double vp = V[row * m + p], vq = V[row * m + q];
	V[row * m + p] = cs[k] * vp - sn[k] * vq;
	V[row * m + q] = sn[k] * vp + cs[k] * vq;
}

/* The rotated pair k's off-diagonal entries: exactly 0. */
DSK_FN void dsk_jacobi_zero(double *A, int m, int k, const int *pp, const int *pq, const double *sn)
{
	if (sn[k] != 0.0) {
		A[pp[k] * m + pq[k]] = 0.0;
		A[pq[k] * m + pp[k]] = 0.0;
	}
}

/* W = V diag(ev^-1/4), element e (in V). */
DSK_FN void dsk_decor_w(double *V, const double *ev, int m, int e)
{
	V[e] *= 1.0 / sqrt(sqrt(ev[e % m]));
}

/* Q = W W', element e. */
DSK_FN double dsk_decor_q(const double *V, int m, int e)
{
	int r = e / m, q = e % m;
	double acc = 0.0;
	for (int k = 0; k < m; k++)
		acc += V[r * m + k] * V[q * m + k];
	return acc;
}

/* s[r], the sum of Q's row r. */
DSK_FN double dsk_decor_rowsum(const double *Q, int m, int r)
{
	double si = 0.0;
	for (int q = 0; q < m; q++)
		si += Q[r * m + q];
	return si;
}

/* Core bin w of the fibre: flux (R x) into out[w], ivar (s^2) into out[m + w]. */
DSK_FN void dsk_decor_flux(const double *R, const double *s, const double *xb, int m, int core_w0,
			   int w, double *out)
{
	int wi = core_w0 + w;
	double acc = 0.0;
	for (int q = 0; q < m; q++)
		acc += R[wi * m + q] * xb[q];
	out[w] = acc;
	out[m + w] = s[wi] * s[wi];
}

/* The deconvolved flux x of core bin w (xb: the fibre's x, m bins) into
 * out[xf m + w], xf the rows' field after the resolution's (desi_batch_t.xflux). */
DSK_FN void dsk_decor_xflux(const double *xb, int m, int core_w0, int xf, int w, double *out)
{
	out[(size_t)xf * m + w] = xb[core_w0 + w];
}

/* Resolution diagonal k of core bin w (e = k cnw + w) into out[(4 + k) m + w]. */
DSK_FN void dsk_decor_rdiag(const double *R, int m, int core_w0, int ndiag, int cnw, int e,
			    double *out)
{
	int k = e / cnw, w = e % cnw, col = w + core_w0, row = col - ndiag + k;
	out[(size_t)(4 + k) * m + w] = row >= 0 && row < m ? R[row * m + col] : 0.0;
}

/* ---- the spots kernel (psf_cuda.cu), phase by phase ---- */

#define DSK_SQRT_2PI 2.5066282746310002 /* as psf.c */
#define DSK_SQRT2 1.4142135623730951
#define DSK_SPOT_THREADS 192

/* floor(c - hsize + 0.5) as int32, INT32_MIN when not an int32 (psf.c). */
DSK_FN int32_t dsk_corner(double c, int hsize)
{
	double v = floor(DSK_ADD(DSK_SUB(c, (double)hsize), 0.5));
	return v >= -2147483648.0 && v <= 2147483647.0 ? (int32_t)v : INT32_MIN;
}

/* Phase 1, edge k of n pixels around centre c: E[k] = erf(u / sqrt 2) and
 * H[m (n + 1) + k] = He_m(u) phi(u), m < deg. */
DSK_FN void dsk_edge(double c, double sigma, int n, int deg, int k, double *E, double *H)
{
	double t = DSK_ADD(c, 0.5);
	double d = DSK_SUB(DSK_SUB(t, floor(t)), 0.5);
	double u = DSK_DIV(DSK_SUB(DSK_SUB((double)(k - n / 2), 0.5), d), sigma);
	double phi = DSK_DIV(exp(DSK_MUL(-0.5, DSK_MUL(u, u))), DSK_SQRT_2PI);
	double h = 1.0, hm1 = 0.0;

	E[k] = erf(DSK_DIV(u, DSK_SQRT2));
	for (int m = 0; m < deg; m++) {
		double next = DSK_SUB(DSK_MUL(h, u), DSK_MUL(hm1, (double)m));
		H[m * (n + 1) + k] = DSK_MUL(h, phi);
		hm1 = h;
		h = next;
	}
}

/* Phase 2, g[m n + p] from the edge terms, q = m n + p < (deg + 1) n. */
DSK_FN double dsk_pgh(const double *E, const double *H, int n, int q)
{
	int m = q / n, p = q % n;
	if (m == 0)
		return DSK_MUL(0.5, DSK_SUB(E[p + 1], E[p]));
	const double *h = H + (m - 1) * (n + 1);
	return DSK_SUB(h[p], h[p + 1]);
}

/* Phase 3, T[j][ix] = sum_i GH_ij gx[i][ix], i ascending; q = j nx + ix. */
DSK_FN double dsk_spot_T(const double *gh, const double *gx, int dx, int dy, int nx, int q)
{
	int j = q / nx, ix = q % nx;
	double t = 0.0;
	for (int i = 0; i <= dx; i++)
		t = DSK_ADD(t, DSK_MUL(gh[i * (dy + 1) + j], gx[i * nx + ix]));
	return t;
}

/* Phase 4, pixel q = iy nx + ix: sum_j gy[j][iy] T[j][ix], j ascending,
 * clipped at 0. */
DSK_FN double dsk_spot_pixel(const double *gy, const double *T, int dy, int ny, int nx, int q)
{
	int iy = q / nx, ix = q % nx;
	double v = 0.0;
	for (int j = 0; j <= dy; j++)
		v = DSK_ADD(v, DSK_MUL(gy[j * ny + iy], T[j * nx + ix]));
	return v > 0.0 ? v : 0.0;
}

#endif /* SP_DESI_KERN_H */
