/* DESI patch extraction CPU kernels: sparse normal equations, banded solve, decorrelation, chi2. */
#include "extract.h"
#include "desi_kern.h"

#include "cancel.h"
#include "cpuisa.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <lapacke.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/*
 * DESIGN.  A is never formed.  A'NA is accumulated pair by pair of columns
 * whose clipped spot rectangles intersect (a column meets only its
 * neighbours within ~8 wavelengths and 2 fibres), over the intersection
 * only: ~1.5 M multiply-adds instead of the dense 7,000 x 518 x 518.
 *
 * iCov is banded: half-bandwidth 156 in the fibre-major order on the
 * reference patch (a fibre's spots overlap its second neighbours' by ~3
 * columns, so kd = 2 nwave + 8), 58 in the wavelength-major order.  The
 * decorrelation factors the fibre-major band (LAPACK's band Cholesky,
 * dpbtrf, ~n kd^2 flops), and the solve uses that factor (dpbtrs): it
 * used to factor the narrower wavelength-major band of its own, which cost
 * more than the triangular solves (scanning and permuting the dense
 * matrix, a second factorisation).
 * The decorrelation needs only the diagonal fibre blocks of C = iCov^-1.
 * They lie inside the band once kd >= nwave - 1, so the Takahashi
 * recurrence (selected inverse: C restricted to the band of L, from
 * L' C = L^-1, from the last column) yields them exactly, at ~n kd^2
 * flops, no dense inverse.  For column j, with l = L[j+1.., j]:
 *   C[j+1.., j] = -(C[j+1.., j+1..] l) / L[j][j]
 *   C[j][j]     = (1 / L[j][j] - l . C[j+1.., j]) / L[j][j]
 * computed 32 columns at a time with level-3 BLAS (selected_inverse():
 * dsymm, dtrmm, dgemm; it was one dsbmv per column).
 * Each core block then gives Q_bb = C_bb^-1/2 by the eigendecomposition of
 * the m x m block: a patch's core blocks at once, one per SIMD lane
 * (eigh_simd.h: Householder tridiagonalisation and implicit QL, ~2.5x
 * faster than one dsyevd per block at m = 74, doc/profiling.md), with
 * dsyevd for a group the lanes cannot share.  desi_decorrelate_eigh_cpu() is the
 * reference's route (eigendecomposition of the whole iCov), sharing the
 * block step, so the two differ only in how C_bb is obtained.
 *
 * All LAPACK calls are the column-major *_work variants: symmetric
 * matrices read the same in both orders, and the row-major wrappers would
 * malloc a transposed copy (the kernels must not allocate).
 */

/* The patch's window for desi_kern.h. */
static dsk_win_t win_of(const desi_patch_t *p)
{
	dsk_win_t w = { p->ymin, p->xmin, p->ny, p->nx, p->sy, p->sx };
	return w;
}

/* Whether the spots' corner rows never decrease along each fibre's
 * wavelengths (the traces' dispersion, on every real PSF). */
static int rows_sorted(const desi_patch_t *p, const int32_t *yc)
{
	for (int f = 0; f < p->nfib; f++)
		for (int w = 1; w < p->nwave; w++)
			if (yc[desi_patch_col(p, f * p->nwave + w)] <
			    yc[desi_patch_col(p, f * p->nwave + w - 1)])
				return 0;
	return 1;
}

/* The arithmetic is desi_kern.h's, shared with k_normal and k_regularise;
 * the loops skip the pairs whose rectangles cannot meet.  A column meets
 * only the columns of each fibre whose corner rows lie within a spot of
 * its own: where the rows are sorted along the fibres (rows_sorted()), a
 * binary search finds the first and the scan stops after the last, so a
 * column looks at a few dozen columns instead of every later one (the
 * pairs summed, and so the bits, are the same).  The sums run in the SIMD
 * variants of normal_simd.h: four rows of a rectangle in the four lanes,
 * from the spots and the window transposed (doc/profiling.md), to the bit
 * of desi_kern.h's. */
#define NS_W SP_BASELINE_W
#define NS_FN(name) name##_base
#include "normal_simd.h"
#if SP_HAVE_AVX2_VARIANT
SP_AVX2_BEGIN
#define NS_W 4
#define NS_FN(name) name##_avx2
#include "normal_simd.h"
SP_AVX2_END
#endif

typedef int (*normal_fn)(const desi_patch_t *, const double *, const int32_t *, const int32_t *,
			  const double *, const double *, double *, double *, double *, int,
			  double *);
static const normal_fn normal_variant[SP_ISA_COUNT] = {
	[SP_ISA_BASELINE] = normal_pairs_base,
#if SP_HAVE_AVX2_VARIANT
	[SP_ISA_AVX2] = normal_pairs_avx2,
#endif
};
typedef void (*kept_fn)(int, const double *, const double *, int, int, int, double *, double *,
			double *, double *);
static const kept_fn kept_variant[SP_ISA_COUNT] = {
	[SP_ISA_BASELINE] = kept_parts_base,
#if SP_HAVE_AVX2_VARIANT
	[SP_ISA_AVX2] = kept_parts_avx2,
#endif
};
void desi_kept_parts_isa(int isa, int m, const double *w, const double *xb, int w0, int cnw,
			 int nd0, double *s, double *qx, double *dg, double *work)
{
	if (isa < 0 || isa >= SP_ISA_COUNT || !sp_isa_supported(isa) || kept_variant[isa] == NULL)
		isa = SP_ISA_BASELINE;
	kept_variant[isa](m, w, xb, w0, cnw, nd0, s, qx, dg, work);
}

typedef void (*model_fn)(const desi_patch_t *, const double *, const int32_t *, const int32_t *,
			 const double *, double *);
static const model_fn model_variant[SP_ISA_COUNT] = {
	[SP_ISA_BASELINE] = model_base,
#if SP_HAVE_AVX2_VARIANT
	[SP_ISA_AVX2] = model_avx2,
#endif
};

size_t desi_extract_normal_work_size(const desi_patch_t *p)
{
	/* the spots transposed, a weighted spot, the window's pixels and
	 * inverse variances transposed (normal_simd.h) */
	const size_t ts = (size_t)(p->sx > 0 ? p->sx : 0) * (size_t)(p->sy + 3);
	const size_t wt = (size_t)(p->nx > 0 ? p->nx : 0) * (size_t)((p->ny > 0 ? p->ny : 0) + 3);
	return ((size_t)desi_patch_n(p) + 1) * ts + 2 * wt;
}

/* The pair loop without scratch: every pair (j1, j2 >= j1) through
 * desi_kern.h's sums directly, the bits of the variants (the order is the
 * same), in O(n^2) rectangle tests; for work == NULL.  Returns the largest
 * j2 - j1 of an entry != 0, -1 if none. */
static int normal_direct(const desi_patch_t *p, const double *spots, const int32_t *xc,
			 const int32_t *yc, const double *pix, const double *ivar, double *icov,
			 double *y, double *fluxweight)
{
	const int n = desi_patch_n(p);
	const size_t ss = (size_t)p->sy * (size_t)p->sx;
	const dsk_win_t w = win_of(p);
	int maxoff = -1;

	for (int j1 = 0; j1 < n; j1++) {
		dsk_rect_t a, b;
		const size_t c1 = desi_patch_col(p, j1);
		y[j1] = fluxweight[j1] = 0.0;
		if (!dsk_rect(&w, xc[c1], yc[c1], &a))
			continue;
		y[j1] = dsk_column_sums(spots + c1 * ss, &a, p->sx, pix, ivar, p->nx,
					&fluxweight[j1]);
		for (int j2 = j1; j2 < n; j2++) {
			const size_t c2 = desi_patch_col(p, j2);
			if (!dsk_rect(&w, xc[c2], yc[c2], &b))
				continue;
			const double acc = dsk_pair_sum(spots + c1 * ss, &a, spots + c2 * ss, &b, p->sx,
							ivar, p->nx);
			icov[(size_t)j1 * n + j2] = acc; /* the upper triangle only */
			if (acc != 0.0 && j2 - j1 > maxoff)
				maxoff = j2 - j1;
		}
	}
	return maxoff;
}

void desi_extract_normal_cpu(const desi_patch_t *p, const double *spots, const int32_t *xc,
			     const int32_t *yc, const double *pix, const double *ivar, double *icov,
			     double *y, double *fluxweight)
{
	/* out of memory: work NULL, the direct sums (the same bits) */
	double *work = malloc((desi_extract_normal_work_size(p) + 1) * sizeof *work);
	(void)desi_extract_normal_cpu_isa(sp_cpu_isa(), p, spots, xc, yc, pix, ivar, icov, y,
					  fluxweight, work);
	free(work);
	/* the strictly lower triangle from the upper one */
	const int n = desi_patch_n(p);
	for (int j1 = 0; j1 < n; j1++)
		for (int j2 = j1 + 1; j2 < n; j2++)
			icov[(size_t)j2 * n + j1] = icov[(size_t)j1 * n + j2];
}

int desi_extract_normal_cpu_isa(int isa, const desi_patch_t *p, const double *spots,
				const int32_t *xc, const int32_t *yc, const double *pix,
				const double *ivar, double *icov, double *y, double *fluxweight,
				double *work)
{
	const int n = desi_patch_n(p);

	if (isa < 0 || isa >= SP_ISA_COUNT || !sp_isa_supported(isa) || normal_variant[isa] == NULL)
		isa = SP_ISA_BASELINE;
	for (int j = 0; j < n; j++) /* the upper triangle; the pairs write into it */
		memset(icov + (size_t)j * n + j, 0, (size_t)(n - j) * sizeof *icov);
	const int maxoff = work != NULL ?
		normal_variant[isa](p, spots, xc, yc, pix, ivar, icov, y, fluxweight,
				    rows_sorted(p, yc), work) :
		normal_direct(p, spots, xc, yc, pix, ivar, icov, y, fluxweight);

	/* Regularisation (step 2).  Bins with fluxweight <= minweight get
	 * alpha = minweight - fluxweight (0 when equal, so < and <= agree). */
	double fwmax = 0.0;
	for (int j = 0; j < n; j++)
		if (fluxweight[j] > fwmax)
			fwmax = fluxweight[j];
	const double minweight = dsk_minweight(fwmax);
	for (int j = 0; j < n; j++)
		icov[(size_t)j * n + j] = dsk_regularised(icov[(size_t)j * n + j], fluxweight[j],
							  minweight, p->regularize);
	return maxoff;
}

/* Half-bandwidth of icov (fibre-major), at least kdmin, at most n - 1. */
static int band_width(int n, const double *icov, int kdmin)
{
	int kd = kdmin < n - 1 ? kdmin : n - 1;
	for (int i = 0; i < n; i++)
		for (int j = n - 1; j > i + kd; j--)
			if (icov[(size_t)i * n + j] != 0.0) {
				kd = j - i;
				break;
			}
	return kd;
}

/* Band Cholesky of icov: ab (lower band storage, column-major, ldab =
 * kd + 1, element (i, j) at ab[(i - j) + j ldab]) holds L on return. */
static int band_factor(int n, const double *icov, int kd, double *ab)
{
	const int ldab = kd + 1;
	for (int j = 0; j < n; j++) {
		int m = n - j < ldab ? n - j : ldab;
		memcpy(ab + (size_t)j * ldab, icov + (size_t)j * n + j, (size_t)m * sizeof *ab);
		for (int d = m; d < ldab; d++)
			ab[(size_t)j * ldab + d] = 0.0;
	}
	return LAPACKE_dpbtrf_work(LAPACK_COL_MAJOR, 'L', n, kd, ab, ldab);
}

/* The solve uses the wavelength-major order, index w nfib + f, where the
 * bandwidth is ~58 instead of ~156 (fibre-major: a fibre overlaps its
 * second neighbours by a few columns), a 7x cheaper band Cholesky. */
int desi_extract_solve_cpu(const desi_patch_t *p, const double *icov, const double *y, double *x,
			   double *work)
{
	const int n = desi_patch_n(p);
	const int kd = band_width(n, icov, p->nwave - 1), ldab = kd + 1;
	double *ab = work;

	/* the factor desi_decorrelate_blocks_cpu() makes, so that a solve
	 * alone and one fused with the decorrelation give the same bits */
	int info = band_factor(n, icov, kd, ab);
	if (info == 0) {
		memcpy(x, y, (size_t)n * sizeof *x);
		info = LAPACKE_dpbtrs_work(LAPACK_COL_MAJOR, 'L', n, kd, 1, ab, ldab, x, n);
	}
	if (info != 0)
		memset(x, 0, (size_t)n * sizeof *x);
	return info;
}

/* Scratch doubles of block_finish() for blocks of m wavelengths. */
static size_t block_work(int m)
{
	size_t mm = (size_t)m * (size_t)m;
	size_t liw = 3 + 5 * (size_t)m;
	return 2 * mm + 2 * (size_t)m + (1 + 6 * (size_t)m + 2 * mm) +
	       (liw * sizeof(lapack_int) + sizeof(double) - 1) / sizeof(double) + 1;
}

/* The eigendecomposition of cbb (m x m, lower triangle column-major) by
 * LAPACK: eigenvectors into cbb, eigenvalues into ev.  work: block_work(m). */
static int block_eigh_lapack(int m, double *cbb, double *ev, double *work)
{
	const size_t mm = (size_t)m * (size_t)m;
	double *lw = work + mm + 2 * (size_t)m;
	const lapack_int lwork = (lapack_int)(1 + 6 * (size_t)m + 2 * mm);
	lapack_int *iw = (lapack_int *)(lw + lwork);

	return LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', m, cbb, m, ev, lw, lwork, iw,
				   3 + 5 * m);
}

/* Batched eigendecompositions: the SIMD variants of eigh_simd.h. */
#define EH_MAXIT 60 /* QL sweeps per eigenvalue, at most (LAPACK: 30 n in all) */
#define EH_W SP_BASELINE_W
#define EH_FN(name) name##_base
#include "eigh_simd.h"
#if SP_HAVE_AVX2_VARIANT
SP_AVX2_BEGIN
#define EH_W 4
#define EH_FN(name) name##_avx2
#include "eigh_simd.h"
SP_AVX2_END
#endif

typedef void (*eigh_fn)(int, int, double *const *, double *const *, int *, double *);
/* the variants; desi_eigh_batch() for a chosen one */
static const eigh_fn eigh_variant[SP_ISA_COUNT] = {
	[SP_ISA_BASELINE] = eigh_base,
#if SP_HAVE_AVX2_VARIANT
	[SP_ISA_AVX2] = eigh_avx2,
#endif
};

/* Doubles of eigh_batch()'s work for m x m matrices (the widest variant's
 * lanes, and room to align). */
static size_t eigh_batch_work(int m)
{
	return 4 * (2 * (size_t)m * (size_t)m + 3 * (size_t)m) + 8;
}

int desi_eigh_batch(int isa, int m, int nb, double *const *mat, double *const *ev, int *ok,
		    double *work)
{
	if (isa < 0 || isa >= SP_ISA_COUNT || !sp_isa_supported(isa) || eigh_variant[isa] == NULL)
		return -1;
	eigh_variant[isa](m, nb, mat, ev, ok, work);
	return 0;
}

size_t desi_eigh_batch_work(int m)
{
	return eigh_batch_work(m);
}

/* Step 4-6 for fibre block f, given its eigendecomposition: the
 * eigenvectors as the columns of v (m x m, column-major; destroyed) and
 * the eigenvalues ev.  work: block_work(m) doubles. */
static int block_finish(const desi_patch_t *p, int f, double *cbb, const double *ev,
			const double *x, double *flux, double *ivar, double *rdiags, double *rfull,
			double *work)
{
	const int m = p->nwave, n = desi_patch_n(p), nd = 2 * p->ndiag + 1;
	const size_t mm = (size_t)m * (size_t)m;
	double *q = work, *s = q + mm;
	const int fc = f - p->core_f0;
	const double *xb = x + (size_t)f * m;

	/* Q = V diag(ev^-1/2) V' = W W' with W = V diag(ev^-1/4). */
	for (int k = 0; k < m; k++) {
		if (!(ev[k] > 0.0))
			return m + 1 + k; /* C_bb not positive definite */
		double sc = 1.0 / sqrt(sqrt(ev[k]));
		for (int i = 0; i < m; i++)
			cbb[(size_t)k * m + i] *= sc;
	}
	if (rfull == NULL) {
		/* What is kept of R needs Q's row sums s = W (W' 1), Q x_b =
		 * W (W' x_b) and the 2 ndiag + 1 diagonals at the core columns:
		 * ~60 k multiply-adds instead of Q's 400 k, every loop along W's
		 * columns (contiguous): W[i][k] = cbb[k m + i]. */
		const int w0 = p->core_w0, cnw = p->core_nw, nd0 = p->ndiag;
		double *t = work, *s = t + 2 * m, *qx = s + m, *dg = qx + m; /* dg [nd][cnw] */
		kept_variant[sp_cpu_isa()](m, cbb, xb, w0, cnw, nd0, s, qx, dg, t);
		for (int i = 0; i < cnw; i++) {
			const int wi = w0 + i;
			flux[(size_t)fc * cnw + i] = qx[wi] * (1.0 / s[wi]);
			ivar[(size_t)fc * cnw + i] = s[wi] * s[wi];
		}
		/* Rdiags[fc][d][j] = R[j + w0 - ndiag + d][j + w0] (zero outside) */
		for (int d = 0; d < nd; d++)
			for (int j = 0; j < cnw; j++) {
				const int row = j + w0 - nd0 + d;
				rdiags[((size_t)fc * nd + d) * cnw + j] =
					row >= 0 && row < m ? dg[(size_t)d * cnw + j] * (1.0 / s[row]) : 0.0;
			}
		return 0;
	}
	cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, m, m, m, 1.0, cbb, m, cbb, m, 0.0, q,
		    m);
	/* q is symmetric; row i of Q is column i (contiguous). */
	for (int i = 0; i < m; i++) {
		double si = 0.0;
		const double *qi = q + (size_t)i * m;
		for (int j = 0; j < m; j++)
			si += qi[j];
		s[i] = si;
	}
	for (int i = 0; i < m; i++) {
		double *ri = q + (size_t)i * m, inv = 1.0 / s[i];
		for (int j = 0; j < m; j++)
			ri[j] *= inv; /* ri[j] = R[i][j] */
	}
	for (int i = 0; i < p->core_nw; i++) {
		int wi = p->core_w0 + i;
		const double *ri = q + (size_t)wi * m;
		double acc = 0.0;
		for (int j = 0; j < m; j++)
			acc += ri[j] * xb[j];
		flux[(size_t)fc * p->core_nw + i] = acc;
		ivar[(size_t)fc * p->core_nw + i] = s[wi] * s[wi];
	}
	/* Rdiags[fc][k][j] = R[j + w0 - ndiag + k][j + w0] (zero outside). */
	for (int k = 0; k < nd; k++)
		for (int j = 0; j < p->core_nw; j++) {
			int col = j + p->core_w0, row = col - p->ndiag + k;
			rdiags[((size_t)fc * nd + k) * p->core_nw + j] =
				row >= 0 && row < m ? q[(size_t)row * m + col] : 0.0;
		}
	if (rfull)
		for (int i = 0; i < m; i++)
			memcpy(rfull + ((size_t)f * m + i) * n + (size_t)f * m, q + (size_t)i * m,
			       (size_t)m * sizeof *rfull);
	return 0;
}

/* Columns per block of the selected inverse. */
#define TAKA_NB 32

/* Scratch doubles of selected_inverse() for a band of half-width kd. */
static size_t taka_work(size_t kd)
{
	return 2 * kd * TAKA_NB + 2 * (size_t)TAKA_NB * TAKA_NB;
}

/* The selected inverse C = iCov^-1 on the band of L (ab, lower band
 * storage, ldab = kd + 1) into cb (the same storage), columns n - 1 down
 * to jstop, by blocks J of TAKA_NB columns (the Takahashi recurrence as
 * BLAS-3; it was one dsbmv per column).  With T the rows after J that L's
 * band reaches (rt <= kd of them), from C L = L'^-1:
 *   C_TJ = -C_TT L_TJ L_JJ^-1                (dsymm, dtrsm)
 *   C_JJ = (L_JJ^-T - C_TJ' L_TJ) L_JJ^-1    (dtrtri, dgemm, dtrsm)
 * C_TT lies inside the band already computed (rows and columns of T are
 * fewer than kd apart).  Band storage reads as a dense column-major matrix
 * of leading dimension kd (element (i, j) at i + j kd) wherever
 * 0 <= i - j <= kd, which holds for C_TT's lower triangle; L_JJ and L_TJ
 * are copied out with the zeros beyond the band (a block may be wider
 * than the band), and only C's band is written back.  w: taka_work(kd) doubles.
 * Returns dtrtri's info (0: L_JJ is invertible, as potrf's factor is). */
static int selected_inverse(int n, int kd, const double *ab, double *cb, int jstop, double *w)
{
	const int ldab = kd + 1, ld = kd > 0 ? kd : 1;
	double *ltj = w, *ctj = ltj + (size_t)kd * TAKA_NB, *linv = ctj + (size_t)kd * TAKA_NB;
	double *mjj = linv + TAKA_NB * TAKA_NB;

	if (kd == 0) { /* diagonal: C_jj = 1 / L_jj^2 */
		for (int j = jstop; j < n; j++)
			cb[j] = 1.0 / (ab[j] * ab[j]);
		return 0;
	}
	for (int j1 = n; j1 > jstop; j1 -= TAKA_NB) {
		const int j0 = j1 - TAKA_NB > jstop ? j1 - TAKA_NB : jstop, b = j1 - j0;
		const int rt = n - j1 < kd ? n - j1 : kd;
		const double *ljj = ab + (size_t)j0 * ldab; /* (j0, j0), ld kd */
		/* L_JJ^-1 (lower), then its transpose into M */
		for (int c = 0; c < b; c++)
			for (int r = 0; r < b; r++)
				linv[(size_t)c * TAKA_NB + r] =
					r >= c && r - c <= kd ? ljj[(size_t)c * kd + r] : 0.0;
		int info = LAPACKE_dtrtri_work(LAPACK_COL_MAJOR, 'L', 'N', b, linv, TAKA_NB);
		if (info != 0)
			return info;
		for (int c = 0; c < b; c++)
			for (int r = 0; r < b; r++)
				mjj[(size_t)c * TAKA_NB + r] = linv[(size_t)r * TAKA_NB + c];
		if (rt > 0) {
			/* L_TJ: rows j1 .. j1 + rt - 1, columns J, zero beyond the band
			 * (column c's rows i - j = b - c + r, r <= kd - b + c) */
			for (int c = 0; c < b; c++) {
				const int nv = kd - b + c + 1 < rt ? kd - b + c + 1 : rt;
				const int nk = nv > 0 ? nv : 0;
				memcpy(ltj + (size_t)c * rt, ab + (size_t)(j0 + c) * ldab + (b - c),
				       (size_t)nk * sizeof *ltj);
				memset(ltj + (size_t)c * rt + nk, 0, (size_t)(rt - nk) * sizeof *ltj);
			}
			/* C_TJ = -(C_TT L_TJ) L_JJ^-1 */
			cblas_dsymm(CblasColMajor, CblasLeft, CblasLower, rt, b, -1.0,
				    cb + (size_t)j1 * ldab, ld, ltj, rt, 0.0, ctj, rt);
			cblas_dtrmm(CblasColMajor, CblasRight, CblasLower, CblasNoTrans, CblasNonUnit, rt, b,
				    1.0, linv, TAKA_NB, ctj, rt);
			/* M = L_JJ^-T - C_TJ' L_TJ */
			cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, b, b, rt, -1.0, ctj, rt, ltj, rt,
				    1.0, mjj, TAKA_NB);
			/* C_TJ into the band */
			for (int c = 0; c < b; c++) {
				const int nv = kd - b + c + 1 < rt ? kd - b + c + 1 : rt;
				if (nv > 0)
					memcpy(cb + (size_t)(j0 + c) * ldab + (b - c), ctj + (size_t)c * rt,
					       (size_t)nv * sizeof *cb);
			}
		}
		/* C_JJ = M L_JJ^-1; its lower triangle into the band */
		cblas_dtrmm(CblasColMajor, CblasRight, CblasLower, CblasNoTrans, CblasNonUnit, b, b, 1.0,
			    linv, TAKA_NB, mjj, TAKA_NB);
		for (int c = 0; c < b; c++)
			for (int r = c; r < b && r - c <= kd; r++)
				cb[(size_t)(j0 + c) * ldab + (r - c)] = mjj[(size_t)c * TAKA_NB + r];
	}
	return 0;
}

int desi_decorrelate_blocks_cpu(const desi_patch_t *p, const double *icov, const double *y,
				double *x, double *cbb, double *work)
{
	return desi_decorrelate_blocks_cpu_kd(p, icov, -2, y, x, cbb, work);
}

int desi_decorrelate_blocks_cpu_kd(const desi_patch_t *p, const double *icov, int maxoff,
				   const double *y, double *x, double *cbb, double *work)
{
	const int n = desi_patch_n(p), m = p->nwave;
	/* band_width()'s result, from the patch phase's largest offset where
	 * it is known */
	const int kdmin = m - 1 < n - 1 ? m - 1 : n - 1;
	const int kd = maxoff < -1 ? band_width(n, icov, m - 1) :
		       maxoff > kdmin ? (maxoff < n - 1 ? maxoff : n - 1) : kdmin;
	const int ldab = kd + 1;
	const size_t mm = (size_t)m * (size_t)m;
	double *ab = work, *cb = ab + (size_t)n * ldab, *bw = cb + (size_t)n * ldab;

	int info = band_factor(n, icov, kd, ab);
	if (info == 0 && y != NULL) { /* step 3 with the same factor */
		memcpy(x, y, (size_t)n * sizeof *x);
		info = LAPACKE_dpbtrs_work(LAPACK_COL_MAJOR, 'L', n, kd, 1, ab, ldab, x, n);
	}
	if (info != 0)
		return info;
	/* the selected inverse, columns n-1 down to the first core column */
	info = selected_inverse(n, kd, ab, cb, p->core_f0 * m, bw);
	if (info != 0)
		return info;
	for (int c = 0; c < p->core_nf; c++) {
		const size_t b0 = (size_t)(p->core_f0 + c) * m;
		double *blk = cbb + (size_t)c * mm;
		for (int k = 0; k < m; k++) /* rows k .. m-1 of column k: within the band (m <= kd + 1) */
			memcpy(blk + (size_t)k * m + k, cb + (b0 + k) * ldab, (size_t)(m - k) * sizeof *blk);
	}
	return 0;
}

int desi_decorrelate_finish_cpu(const desi_patch_t *p, int c0, int nb, double *const *vecs,
				double *const *ev, const int *ok, const double *x, double *flux,
				double *ivar, double *rdiags, double *rfull, double *work)
{
	for (int c = 0; c < nb; c++) {
		int info = ok[c] ? 0 : block_eigh_lapack(p->nwave, vecs[c], ev[c], work);
		if (info == 0)
			info = block_finish(p, p->core_f0 + c0 + c, vecs[c], ev[c], x, flux, ivar, rdiags,
					    rfull, work);
		if (info != 0)
			return info;
	}
	return 0;
}

int desi_decorrelate_cpu(const desi_patch_t *p, const double *icov, const double *x,
			 double *flux, double *ivar, double *rdiags, double *rfull, double *work)
{
	const int n = desi_patch_n(p), m = p->nwave, ncore = p->core_nf;
	const size_t mm = (size_t)m * (size_t)m;
	double *cbb = work, *evs = cbb + (size_t)ncore * mm, *w = evs + (size_t)ncore * m;

	if (rfull)
		memset(rfull, 0, (size_t)n * (size_t)n * sizeof *rfull);
	int info = desi_decorrelate_blocks_cpu(p, icov, NULL, NULL, cbb, w);
	/* the core blocks' eigendecompositions, up to EIGH_GROUP at once */
	enum { EIGH_GROUP = 8 };
	const eigh_fn eigh = eigh_variant[sp_cpu_isa()];
	for (int c0 = 0; c0 < ncore && info == 0; c0 += EIGH_GROUP) {
		const int nb = ncore - c0 < EIGH_GROUP ? ncore - c0 : EIGH_GROUP;
		double *mats[EIGH_GROUP], *evp[EIGH_GROUP];
		int ok[EIGH_GROUP];
		for (int c = 0; c < nb; c++) {
			mats[c] = cbb + (size_t)(c0 + c) * mm;
			evp[c] = evs + (size_t)(c0 + c) * m;
		}
		eigh(m, nb, mats, evp, ok, w);
		info = desi_decorrelate_finish_cpu(p, c0, nb, mats, evp, ok, x, flux, ivar, rdiags,
						   rfull, w);
	}
	return info;
}

int desi_decorrelate_eigh_cpu(const desi_patch_t *p, const double *icov, const double *x,
			      double *flux, double *ivar, double *rdiags, double *rfull,
			      double *work)
{
	const int n = desi_patch_n(p), m = p->nwave;
	const size_t nn = (size_t)n * (size_t)n;
	double *v = work, *u = v + nn, *cbb = u + n, *lw = cbb + (size_t)m * m;
	const lapack_int lwork = (lapack_int)(1 + 6 * (size_t)n + 2 * nn);
	lapack_int *iw = (lapack_int *)(lw + lwork);
	const lapack_int liwork = 3 + 5 * n;

	if (rfull)
		memset(rfull, 0, nn * sizeof *rfull);
	memcpy(v, icov, nn * sizeof *v);
	int info = LAPACKE_dsyevd_work(LAPACK_COL_MAJOR, 'V', 'L', n, v, n, u, lw, lwork, iw,
				       liwork);
	if (info != 0)
		return info;
	/* C_bb = V_b diag(1/u) V_b' = W_b W_b', W = V diag(u^-1/2). */
	for (int k = 0; k < n; k++) {
		if (!(u[k] > 0.0))
			return n + 1 + k;
		cblas_dscal(n, 1.0 / sqrt(u[k]), v + (size_t)k * n, 1);
	}
	for (int f = p->core_f0; f < p->core_f0 + p->core_nf; f++) {
		cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, m, n, 1.0, v + (size_t)f * m,
			    n, 0.0, cbb, m);
		double *ev = lw, *bw = lw + m;
		info = block_eigh_lapack(m, cbb, ev, bw);
		if (info == 0)
			info = block_finish(p, f, cbb, ev, x, flux, ivar, rdiags, rfull, bw);
		if (info != 0)
			return info;
	}
	return 0;
}

void desi_extract_model_cpu_isa(int isa, const desi_patch_t *p, const double *spots,
				const int32_t *xc, const int32_t *yc, const double *x, double *model)
{
	if (isa < 0 || isa >= SP_ISA_COUNT || !sp_isa_supported(isa) || model_variant[isa] == NULL)
		isa = SP_ISA_BASELINE;
	memset(model, 0, (size_t)(p->ny > 0 ? p->ny : 0) * (size_t)(p->nx > 0 ? p->nx : 0) *
				 sizeof *model);
	model_variant[isa](p, spots, xc, yc, x, model);
}

void desi_extract_chi2_cpu(const desi_patch_t *p, const double *spots, const int32_t *xc,
			   const int32_t *yc, const double *pix, const double *ivar, const double *x,
			   double *chi2pix, double *pixmask_fraction, double *work)
{
	const int nx = p->nx;
	const size_t npix = (size_t)p->ny * (size_t)nx;
	double *model = work, *chi2 = model + npix, *tpos = chi2 + npix;

	desi_extract_model_cpu_isa(sp_cpu_isa(), p, spots, xc, yc, x, model);
	for (size_t i = 0; i < npix; i++)
		dsk_chi2_from_model(model[i], pix[i], ivar[i], p->psferr, &chi2[i], &tpos[i]);
	const dsk_win_t w = win_of(p);
	const dsk_cols_t cols = { spots, xc, yc, 0, p->fstride > 0 ? p->fstride : p->nwave, 0, p->nwave };
	for (int fc = 0; fc < p->core_nf; fc++)
		for (int wc = 0; wc < p->core_nw; wc++) {
			const int j = (p->core_f0 + fc) * p->nwave + p->core_w0 + wc;
			const size_t o = (size_t)fc * p->core_nw + wc;
			dsk_chi2_core(&w, &cols, j, chi2, tpos, ivar, &chi2pix[o], &pixmask_fraction[o]);
		}
}

size_t desi_extract_work_size(const desi_patch_t *p)
{
	const size_t n = (size_t)desi_patch_n(p), m = (size_t)p->nwave, nn = n * n;
	const size_t npix = (size_t)p->ny * (size_t)p->nx;
	const size_t liw = 3 + 5 * n;
	size_t solve = nn + n;                                  /* band L (ldab <= n), b */
	const size_t nc = (size_t)p->core_nf, bands = 2 * nn + taka_work(n);
	size_t fast = block_work((int)m) > eigh_batch_work((int)m) ? block_work((int)m) :
								     eigh_batch_work((int)m);
	if (bands > fast) /* L, C bands; then the eigendecompositions, the blocks' step */
		fast = bands;
	fast += nc * (m * m + m); /* C_bb, ev */
	size_t eigh = nn + n + m * m + (1 + 6 * n + 2 * nn) +   /* V, u, C_bb, dsyevd */
		      (liw * sizeof(lapack_int) + sizeof(double) - 1) / sizeof(double) + 1;
	size_t bw = block_work((int)m);
	size_t chi2 = 3 * npix;
	size_t w = solve;

	if (fast > w)
		w = fast;
	if (eigh > w)
		w = eigh;
	if (eigh - (1 + 6 * n + 2 * nn) + m + bw > w) /* block step: dsyevd's space */
		w = eigh - (1 + 6 * n + 2 * nn) + m + bw;
	if (chi2 > w)
		w = chi2;
	return w;
}

void desi_stitch_cpu(const desi_batch_t *b, int nf_out, size_t grid, const float *rows,
		     float *frame)
{
	for (int f = 0; f < b->p.core_nf; f++)
		for (int k = 0; k < nf_out; k++)
			memcpy(frame + ((size_t)f * nf_out + k) * grid + b->col0,
			       rows + ((size_t)f * b->nfield + k) * b->nwave_grid,
			       (size_t)b->nwave_grid * sizeof *frame);
}
