/* DESI subbundle extraction on the CPU: every patch of a subbundle with the single-patch kernels. */
#include "extract.h"
#include "desi_kern.h"

#include "cancel.h"
#include "cpuisa.h"
#include "tbuf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * DESIGN.  A thin driver over extract_cpu.c, in two phases that are two
 * graph stages: desi_patch_batch_cpu() builds every patch's normal
 * equations (A'NA, A'Np, A'N1) into one buffer; desi_decorrelate_batch_cpu()
 * solves, decorrelates, computes chi2 and writes the cores into the frame
 * rows.  The kernels read a patch's spots and corners in place in the
 * bundle's arrays (desi_patch_t.fstride = nfullwave: no copy, the CUDA
 * kernels' addressing); per patch each phase copies only the pixel window
 * out of the float image as doubles (cheap next to the n^3 solve).  The
 * work buffers are sized for the largest window and kept by the calling
 * thread from call to call (one call per task: a worker allocates only
 * when a task needs more than any before it), never allocated per patch
 * nor per task (the ~6 MB of the decorrelate phase: no measurable cost on
 * the machines of doc/profiling.md, but none is better).  The doubles are exactly what a caller of the single-patch
 * kernels would pass, so the rows equal (float)(kernel output / dw) etc.
 * bit for bit; the tests check that.
 *
 * Masking of the window copy: a pixel outside the image, with a
 * non-finite value, or with an ivar that is not finite and > 0 becomes
 * pix 0, ivar 0 (the kernels see a masked pixel).
 */

/* Copies window [ymin, ymin + ny) x [xmin, xmin + nx) of the image
 * (desi_kern.h's pixel, as k_window). */
static void copy_window(const desi_batch_t *b, const desi_patch_t *p, const float *img,
			const float *ivar, double *wpix, double *wivar)
{
	for (int r = 0; r < p->ny; r++) {
		const long long y = (long long)p->ymin + r;
		if (y >= 0 && y < b->npix_y && p->xmin >= 0 && (long long)p->xmin + p->nx <= b->npix_x) {
			/* the row inside the image: dsk_window_px's test, in a
			 * loop the compiler can vectorise */
			const float *fv = img + (size_t)y * (size_t)b->npix_x + (size_t)p->xmin;
			const float *fw = ivar + (size_t)y * (size_t)b->npix_x + (size_t)p->xmin;
			double *op = wpix + (size_t)r * (size_t)p->nx, *ow = wivar + (size_t)r * (size_t)p->nx;
			for (int c = 0; c < p->nx; c++) {
				const int ok = isfinite(fv[c]) && isfinite(fw[c]) && fw[c] > 0.0f;
				op[c] = ok ? (double)fv[c] : 0.0;
				ow[c] = ok ? (double)fw[c] : 0.0;
			}
			continue;
		}
		for (int c = 0; c < p->nx; c++) {
			const size_t o = (size_t)r * (size_t)p->nx + (size_t)c;
			dsk_window_px(img, ivar, b->npix_y, b->npix_x, (long long)p->ymin + r,
				      (long long)p->xmin + c, &wpix[o], &wivar[o]);
		}
	}
}

/* Zeroes patch i's core columns in every field of the rows. */
static void zero_core(const desi_batch_t *b, int w0, int cnw, float *rows)
{
	for (int f = 0; f < b->p.core_nf; f++)
		for (int k = 0; k < b->nfield; k++)
			memset(rows + ((size_t)f * b->nfield + k) * b->nwave_grid + (w0 - b->col0), 0,
			       (size_t)cnw * sizeof *rows);
}

/* Per-call buffers: the largest window, the kernels' work space, the core
 * arrays; and the current patch's spots and corners (in the bundle's). */
struct batch_bufs {
	desi_patch_t big;
	size_t npix_max;
	double *buf, *wpix, *wivar, *core, *work;
	/* the decorrelate phase's per-patch state, np patches: solutions x [np][n],
	 * core blocks [np][core_nf][m][m] and eigenvalues [np][core_nf][m],
	 * pointers to both and the eigendecompositions' flags [np core_nf],
	 * whether each patch failed before them [np] */
	double *xs, *cbbs, *evs;
	double **vecp, **evp;
	int *ok, *pfail;
	const double *pspots;
	const int32_t *pxc, *pyc;
};

/* full: also the core arrays and the kernels' work space (the decorrelate
 * phase); the patch phase needs only the window. */
static int bufs_init(const desi_batch_t *b, struct batch_bufs *B, int full)
{
	const desi_patch_t *cp = &b->p;
	const int nw = cp->nwave;
	const int nd = 2 * cp->ndiag + 1;

	/* Largest window, and the core length every patch's arrays allow. */
	B->big = *cp;
	B->npix_max = 0;
	B->big.ny = 0;
	B->big.nx = 0;
	for (int i = 0; i < b->np; i++) {
		size_t np_ = (size_t)(b->ny[i] > 0 ? b->ny[i] : 0) *
			     (size_t)(b->nx[i] > 0 ? b->nx[i] : 0);
		if (np_ > B->npix_max) {
			B->npix_max = np_;
			B->big.ny = b->ny[i];
			B->big.nx = b->nx[i];
		}
	}
	B->big.core_nw = nw - cp->core_w0; /* >= any patch's core_nw */
	const size_t ncore = full ? (size_t)cp->core_nf * (size_t)B->big.core_nw : 0;
	size_t nwork = full ? desi_extract_work_size(&B->big) : 0;
	if (!full) /* the patch phase: A'NA's scratch, the largest patch's */
		for (int i = 0; i < b->np; i++) {
			desi_patch_t q = *cp;
			q.ny = b->ny[i] > 0 ? b->ny[i] : 0;
			q.nx = b->nx[i] > 0 ? b->nx[i] : 0;
			const size_t nn = desi_extract_normal_work_size(&q);
			nwork = nn > nwork ? nn : nwork;
		}
	const size_t np = full ? (size_t)b->np : 0, nblk = np * (size_t)cp->core_nf;
	const size_t n = (size_t)desi_patch_n(cp), mm = (size_t)nw * (size_t)nw;
	const size_t nstate = np * n + nblk * (mm + (size_t)nw) + /* xs, cbbs, evs */
			      2 * nblk + nblk;                    /* pointers; ok and pfail ints */
	const size_t ndoubles = 2 * B->npix_max +           /* pix, ivar */
				ncore * (4 + (size_t)nd) +  /* flux, ivar, chi2, pixmask, rdiags */
				nwork + nstate;
	/* one slot per phase: a worker running both keeps each buffer as it
	 * was (tbuf.h) */
	B->buf = sp_thread_buf(full ? SP_TBUF_DESI_DECOR : SP_TBUF_DESI_PATCH,
			       (ndoubles > 0 ? ndoubles : 1) * sizeof(double));
	if (B->buf == NULL)
		return -1;
	B->wpix = B->buf;
	B->wivar = B->wpix + B->npix_max;
	B->core = B->wivar + B->npix_max;
	B->work = B->core + ncore * (4 + (size_t)nd);
	B->xs = B->work + nwork;
	B->cbbs = B->xs + np * n;
	B->evs = B->cbbs + nblk * mm;
	B->vecp = (double **)(void *)(B->evs + nblk * (size_t)nw);
	B->evp = B->vecp + nblk;
	B->ok = (int *)(void *)(B->evp + nblk);
	B->pfail = B->ok + nblk; /* nblk doubles hold 2 nblk >= nblk + np ints */
	return 0;
}

/* The buffer stays the thread's (sp_thread_buf). */
static void bufs_free(struct batch_bufs *B)
{
	B->buf = NULL;
}

/* Patch i's geometry, where its spots and corners start in the bundle's
 * arrays and, unless img is NULL, its pixel window into B; returns its
 * desi_patch_t. */
static desi_patch_t gather_patch(const desi_batch_t *b, int i, const double *spots,
				 const int32_t *xc, const int32_t *yc, const float *img,
				 const float *ivar, struct batch_bufs *B)
{
	const desi_patch_t *cp = &b->p;
	const size_t ss = (size_t)cp->sy * (size_t)cp->sx;
	const size_t first = (size_t)b->fib0 * (size_t)b->nfullwave + (size_t)b->w0[i];
	desi_patch_t p = *cp;

	p.ymin = b->ymin[i];
	p.xmin = b->xmin[i];
	p.ny = b->ny[i] > 0 ? b->ny[i] : 0;
	p.nx = b->nx[i] > 0 ? b->nx[i] : 0;
	p.core_nw = b->core_nw[i];
	p.fstride = b->nfullwave;
	B->pspots = spots + first * ss;
	B->pxc = xc + first;
	B->pyc = yc + first;
	if (img != NULL)
		copy_window(b, &p, img, ivar, B->wpix, B->wivar);
	return p;
}

size_t desi_normal_doubles(const desi_batch_t *b)
{
	const size_t n = (size_t)desi_patch_n(&b->p);
	return (size_t)(b->np > 0 ? b->np : 0) * (n * n + 2 * n + 1);
}

int desi_patch_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			 const int32_t *yc, const float *img, const float *ivar, double *normal)
{
	const size_t n = (size_t)desi_patch_n(&b->p), np = (size_t)(b->np > 0 ? b->np : 0);
	struct batch_bufs B;

	if (b->np <= 0)
		return 0;
	if (bufs_init(b, &B, 0) != 0)
		return -1;
	double *icov = normal, *y = icov + np * n * n, *fw = y + np * n, *band = fw + np * n;
	for (int i = 0; i < b->np; i++) {
		if (sp_cancel_requested()) { /* the item is cancelled: its equations are not read */
			bufs_free(&B);
			return DESI_CANCELLED;
		}
		desi_patch_t p = gather_patch(b, i, spots, xc, yc, img, ivar, &B);
		const int maxoff = desi_extract_normal_cpu_isa(sp_cpu_isa(), &p, B.pspots, B.pxc,
							       B.pyc, B.wpix, B.wivar,
							       icov + (size_t)i * n * n,
							       y + (size_t)i * n, fw + (size_t)i * n,
							       B.work);
		band[i] = 1.0 + maxoff; /* 0 only where unknown */
	}
	bufs_free(&B);
	return 0;
}

int desi_decorrelate_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			       const int32_t *yc, const float *img, const float *ivar,
			       const double *normal, float *rows)
{
	const size_t n = (size_t)desi_patch_n(&b->p), np = (size_t)(b->np > 0 ? b->np : 0);
	const int nd = 2 * b->p.ndiag + 1, m = b->p.nwave, ncf = b->p.core_nf;
	const size_t mm = (size_t)m * (size_t)m;
	struct batch_bufs B;
	int first_bad = 0;

	if (b->np <= 0)
		return 0;
	if (bufs_init(b, &B, 1) != 0)
		return -1;
	const double *icov = normal, *y = icov + np * n * n, *band = y + 2 * np * n;
	/* 1. per patch: one band Cholesky factor for the solve and the core
	 * blocks of iCov^-1 */
	int nblk = 0;
	for (int i = 0; i < b->np; i++) {
		if (sp_cancel_requested()) /* the item is cancelled: its rows are not read */
			goto cancelled;
		desi_patch_t p = gather_patch(b, i, spots, xc, yc, NULL, NULL, &B); /* no pixels */
		const double *ic = icov + (size_t)i * n * n;
		double *x = B.xs + (size_t)i * n, *cbb = B.cbbs + (size_t)i * ncf * mm;
		/* the band's width from the patch phase where it knows it (a CPU
		 * patch task: band[i] >= 1), else scanned */
		const int maxoff = band[i] >= 1.0 && band[i] <= (double)n ? (int)band[i] - 1 : -2;
		int info = desi_decorrelate_blocks_cpu_kd(&p, ic, maxoff, y + (size_t)i * n, x, cbb,
							  B.work);
		B.pfail[i] = info;
		for (int c = 0; c < ncf && info == 0; c++) {
			B.vecp[nblk] = cbb + (size_t)c * mm;
			B.evp[nblk++] = B.evs + ((size_t)i * ncf + c) * m;
		}
	}
	/* 2. every block's eigendecomposition, SIMD lanes across patches */
	if (sp_cancel_requested())
		goto cancelled;
	(void)desi_eigh_batch(sp_cpu_isa(), m, nblk, B.vecp, B.evp, B.ok, B.work);
	if (sp_cancel_requested()) /* it stopped early: blocks left undone */
		goto cancelled;
	/* 3. per patch: finish the blocks, chi2, the rows */
	for (int i = 0, k = 0; i < b->np; i++) {
		if (sp_cancel_requested())
			goto cancelled;
		desi_patch_t p = gather_patch(b, i, spots, xc, yc, img, ivar, &B);
		const int w0 = b->w0[i], cnw = b->core_nw[i];
		const double *x = B.xs + (size_t)i * n;

		/* Core arrays [core_nf][cnw] (the kernels' row length is cnw). */
		const size_t nc = (size_t)p.core_nf * (size_t)cnw;
		double *flux = B.core, *fivar = flux + nc, *chi2 = fivar + nc, *pmask = chi2 + nc;
		double *rd = pmask + nc;
		int info = B.pfail[i];
		if (info == 0) {
			info = desi_decorrelate_finish_cpu(&p, 0, ncf, B.vecp + k, B.evp + k, B.ok + k, x,
							   flux, fivar, rd, NULL, B.work);
			k += ncf;
		}
		if (info != 0) {
			zero_core(b, w0, cnw, rows);
			if (first_bad == 0)
				first_bad = i + 1;
			continue;
		}
		desi_extract_chi2_cpu(&p, B.pspots, B.pxc, B.pyc, B.wpix, B.wivar, x, chi2, pmask,
				      B.work);

		const double dw = b->dw;
		for (int f = 0; f < p.core_nf; f++) {
			float *row = rows + (size_t)f * b->nfield * b->nwave_grid + (w0 - b->col0);
			const size_t g = (size_t)b->nwave_grid;
			for (int w = 0; w < cnw; w++) {
				const size_t kk = (size_t)f * cnw + w;
				row[w] = dsk_row_value(flux[kk], 0, dw, 0);
				row[g + w] = dsk_row_value(fivar[kk], 1, dw, 0);
				row[2 * g + w] = dsk_row_value(chi2[kk], 2, dw, 0);
				row[3 * g + w] = dsk_row_value(pmask[kk], 3, dw, 0);
				for (int d = 0; d < nd; d++)
					row[(4 + (size_t)d) * g + w] =
						dsk_row_value(rd[((size_t)f * nd + d) * cnw + w], 4 + d, dw, 0);
				if (b->xflux) {
					const size_t j = (size_t)(p.core_f0 + f) * p.nwave + p.core_w0 + w;
					row[(4 + (size_t)nd) * g + w] = dsk_row_value(x[j], 4 + nd, dw, 0);
				}
			}
		}
	}
	bufs_free(&B);
	return first_bad;
cancelled:
	bufs_free(&B);
	return DESI_CANCELLED;
}

int desi_extract_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			   const int32_t *yc, const float *img, const float *ivar, float *rows)
{
	if (b->np <= 0)
		return 0;
	double *normal = malloc(desi_normal_doubles(b) * sizeof *normal);
	if (normal == NULL)
		return -1;
	int ret = desi_patch_batch_cpu(b, spots, xc, yc, img, ivar, normal);
	if (ret == 0)
		ret = desi_decorrelate_batch_cpu(b, spots, xc, yc, img, ivar, normal, rows);
	free(normal);
	return ret;
}

void desi_model_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			  const int32_t *yc, const float *rows, float *model)
{
	const desi_patch_t *p = &b->p;
	const size_t ss = (size_t)p->sy * (size_t)p->sx, g = (size_t)b->nwave_grid;
	const int xf = 4 + 2 * p->ndiag + 1;

	if (!b->xflux || b->nfield <= xf)
		return; /* no deconvolved flux in the rows */
	for (int c = 0; c < b->nwave_grid; c++)
		for (int f = 0; f < p->core_nf; f++) {
			const double x = rows[((size_t)f * b->nfield + xf) * g + c];
			const size_t j = (size_t)(b->fib0 + p->core_f0 + f) * (size_t)b->nfullwave +
					 (size_t)(b->col0 + c + p->core_w0);
			if (x == 0.0)
				continue; /* a failed patch, or nothing to add */
			const double *s = spots + j * ss;
			for (int iy = 0; iy < p->sy; iy++) {
				const long long r = (long long)yc[j] + iy;
				if (r < 0 || r >= b->npix_y)
					continue;
				float *out = model + (size_t)r * (size_t)b->npix_x;
				for (int ix = 0; ix < p->sx; ix++) {
					const long long q = (long long)xc[j] + ix;
					const double v = x * s[iy * p->sx + ix];
					if (q >= 0 && q < b->npix_x)
						out[q] = (float)((double)out[q] + v);
				}
			}
		}
}

/* ---- nominal costs (extract.h) ---- */

double desi_patch_flops(const desi_patch_t *p)
{
	const double n = desi_patch_n(p), s = (double)p->sy * p->sx, kdw = 8.0 * p->nfib + 2;
	return 3 * 8.7 * n * s + 4 * n * s + n * kdw * kdw + 4 * n * kdw;
}

double desi_decorrelate_flops(const desi_patch_t *p)
{
	const double n = desi_patch_n(p), m = p->nwave, kd = 2.0 * p->nwave + 8;
	const double s = (double)p->sy * p->sx;
	return n * kd * kd + 2 * (n - (double)p->core_f0 * m) * kd * kd +
	       p->core_nf * (4.7 + 2.0) * m * m * m + 2 * n * s;
}

double desi_spots_flops(int sx, int sy, int dx, int dy, size_t nspots)
{
	const double per = 2.0 * (dx + 1) * (dy + 1) * sx + 2.0 * (dy + 1) * sx * sy +
			   2.0 * sx * sy + 8.0 * (sx + sy) * ((dx > dy ? dx : dy) + 1);
	return per * (double)nspots;
}

/* The pixel windows' and the spots' bytes of the batch's patches. */
static double windows_spots_bytes(const desi_batch_t *b)
{
	const double n = desi_patch_n(&b->p), s = (double)b->p.sy * b->p.sx;
	double pix = 0;
	for (int i = 0; i < b->np; i++)
		if (b->ny[i] > 0 && b->nx[i] > 0)
			pix += (double)b->ny[i] * b->nx[i];
	return 2 * sizeof(float) * pix + b->np * n * (s * sizeof(double) + 2 * sizeof(int32_t));
}

double desi_patch_bytes(const desi_batch_t *b)
{
	return windows_spots_bytes(b) + (double)desi_normal_doubles(b) * sizeof(double);
}

double desi_decorrelate_bytes(const desi_batch_t *b, size_t nrows)
{
	return windows_spots_bytes(b) + 2.0 * (double)desi_normal_doubles(b) * sizeof(double) +
	       (double)nrows * sizeof(float);
}
