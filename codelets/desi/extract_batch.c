/* DESI subbundle extraction on the CPU: every patch of a subbundle with the single-patch kernels. */
#include "extract.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * DESIGN.  A thin driver over extract_cpu.c: per patch it gathers the
 * patch's spots and corners out of the bundle's arrays (fibre stride
 * nfullwave), copies the pixel window out of the float image as doubles,
 * then runs normal -> solve -> decorrelate -> chi2 and writes the core
 * into the frame rows.  The work buffers are sized once for the largest
 * window and allocated once per call (one call per subbundle task), never
 * per patch.  The doubles are exactly what a caller of the single-patch
 * kernels would pass, so the rows equal (float)(kernel output / dw) etc.
 * bit for bit; the tests check that.
 *
 * Masking of the window copy: a pixel outside the image, with a
 * non-finite value, or with an ivar that is not finite and > 0 becomes
 * pix 0, ivar 0 (the kernels see a masked pixel).
 */

/* Copies window [ymin, ymin + ny) x [xmin, xmin + nx) of the image. */
static void copy_window(const desi_batch_t *b, const desi_patch_t *p, const float *img,
			const float *ivar, double *wpix, double *wivar)
{
	for (int r = 0; r < p->ny; r++) {
		const long yr = (long)p->ymin + r;
		for (int c = 0; c < p->nx; c++) {
			const long xc = (long)p->xmin + c;
			const size_t o = (size_t)r * (size_t)p->nx + (size_t)c;
			double v = 0.0, w = 0.0;
			if (yr >= 0 && yr < b->npix_y && xc >= 0 && xc < b->npix_x) {
				const size_t s = (size_t)yr * (size_t)b->npix_x + (size_t)xc;
				const float fv = img[s], fw = ivar[s];
				if (isfinite(fv) && isfinite(fw) && fw > 0.0f) {
					v = fv;
					w = fw;
				}
			}
			wpix[o] = v;
			wivar[o] = w;
		}
	}
}

/* Zeroes patch i's core columns in every field of the rows. */
static void zero_core(const desi_batch_t *b, int w0, int cnw, float *rows)
{
	for (int f = 0; f < b->p.core_nf; f++)
		for (int k = 0; k < b->nfield; k++)
			memset(rows + ((size_t)f * b->nfield + k) * b->nwave_grid + w0, 0,
			       (size_t)cnw * sizeof *rows);
}

int desi_extract_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			   const int32_t *yc, const float *img, const float *ivar, float *rows)
{
	const desi_patch_t *cp = &b->p;
	const int nfib = cp->nfib, nw = cp->nwave, n = nfib * nw;
	const int nd = 2 * cp->ndiag + 1;
	const size_t ss = (size_t)cp->sy * (size_t)cp->sx;
	int first_bad = 0;

	if (b->np <= 0)
		return 0;
	/* Largest window, and the core length every patch's arrays allow. */
	desi_patch_t big = *cp;
	size_t npix_max = 0;
	big.ny = 0;
	big.nx = 0;
	for (int i = 0; i < b->np; i++) {
		size_t np_ = (size_t)(b->ny[i] > 0 ? b->ny[i] : 0) *
			     (size_t)(b->nx[i] > 0 ? b->nx[i] : 0);
		if (np_ > npix_max) {
			npix_max = np_;
			big.ny = b->ny[i];
			big.nx = b->nx[i];
		}
	}
	big.core_nw = nw - cp->core_w0; /* >= any patch's core_nw */
	const size_t ncore = (size_t)cp->core_nf * (size_t)big.core_nw;
	const size_t nwork = desi_extract_work_size(&big);
	const size_t ndoubles = (size_t)n * ss +            /* spots */
				(size_t)n * (size_t)n +     /* icov */
				3 * (size_t)n +             /* y, fluxweight, x */
				2 * npix_max +              /* pix, ivar */
				ncore * (4 + (size_t)nd) +  /* flux, ivar, chi2, pixmask, rdiags */
				nwork;
	double *buf = malloc(ndoubles * sizeof *buf);
	int32_t *ibuf = malloc(2 * (size_t)n * sizeof *ibuf);
	if (buf == NULL || ibuf == NULL) {
		free(buf);
		free(ibuf);
		return -1;
	}
	double *pspots = buf, *icov = pspots + (size_t)n * ss, *y = icov + (size_t)n * n;
	double *fw = y + n, *x = fw + n, *wpix = x + n, *wivar = wpix + npix_max;
	double *core = wivar + npix_max, *work = core + ncore * (4 + (size_t)nd);
	int32_t *pxc = ibuf, *pyc = ibuf + n;

	for (int i = 0; i < b->np; i++) {
		desi_patch_t p = *cp;
		const int w0 = b->w0[i], cnw = b->core_nw[i];
		p.ymin = b->ymin[i];
		p.xmin = b->xmin[i];
		p.ny = b->ny[i] > 0 ? b->ny[i] : 0;
		p.nx = b->nx[i] > 0 ? b->nx[i] : 0;
		p.core_nw = cnw;
		for (int f = 0; f < nfib; f++) {
			const size_t src = (size_t)(b->fib0 + f) * (size_t)b->nfullwave + (size_t)w0;
			memcpy(pspots + (size_t)f * nw * ss, spots + src * ss,
			       (size_t)nw * ss * sizeof *spots);
			memcpy(pxc + (size_t)f * nw, xc + src, (size_t)nw * sizeof *pxc);
			memcpy(pyc + (size_t)f * nw, yc + src, (size_t)nw * sizeof *pyc);
		}
		copy_window(b, &p, img, ivar, wpix, wivar);

		/* Core arrays [core_nf][cnw] (the kernels' row length is cnw). */
		const size_t nc = (size_t)p.core_nf * (size_t)cnw;
		double *flux = core, *fivar = flux + nc, *chi2 = fivar + nc, *pmask = chi2 + nc;
		double *rd = pmask + nc;
		desi_extract_normal_cpu(&p, pspots, pxc, pyc, wpix, wivar, icov, y, fw);
		int info = desi_extract_solve_cpu(&p, icov, y, x, work);
		if (info == 0)
			info = desi_decorrelate_cpu(&p, icov, x, flux, fivar, rd, NULL, work);
		if (info != 0) {
			zero_core(b, w0, cnw, rows);
			if (first_bad == 0)
				first_bad = i + 1;
			continue;
		}
		desi_extract_chi2_cpu(&p, pspots, pxc, pyc, wpix, wivar, x, chi2, pmask, work);

		const double dw = b->dw;
		for (int f = 0; f < p.core_nf; f++) {
			float *row = rows + (size_t)f * b->nfield * b->nwave_grid + w0;
			const size_t g = (size_t)b->nwave_grid;
			for (int w = 0; w < cnw; w++) {
				const size_t k = (size_t)f * cnw + w;
				row[w] = (float)(flux[k] / dw);
				row[g + w] = (float)(fivar[k] * dw * dw);
				row[2 * g + w] = (float)chi2[k];
				row[3 * g + w] = (float)pmask[k];
				for (int d = 0; d < nd; d++)
					row[(4 + (size_t)d) * g + w] =
						(float)rd[((size_t)f * nd + d) * cnw + w];
			}
		}
	}
	free(buf);
	free(ibuf);
	return first_bad;
}
