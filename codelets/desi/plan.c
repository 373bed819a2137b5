/* DESI extraction plan: the decomposition of a frame into bundles and patches. */
#include "plan.h"

#include <math.h>
#include <stdio.h>

int desi_grid_len(double wmin, double wmax, double dw)
{
	/* numpy's arange length, ceil((stop - start) / step) with stop = wmax +
	 * dw/2: every wmin + dw i < wmax + dw/2. */
	return (int)ceil((wmax + dw / 2.0 - wmin) / dw);
}

int desi_plan_init(desi_plan_t *p, double wmin, double wmax, double dw, int specmin, int nspec,
		   int bundlesize, int nsubbundles, int nwavestep, int wavepad, double wavepad_frac,
		   double pixpad_frac, char *msg, int msglen)
{
	if (!(dw > 0) || !(wmax >= wmin) || !isfinite(wmin) || !isfinite(wmax)) {
		snprintf(msg, (size_t)msglen, "invalid wavelength grid %g,%g,%g (need wmin <= wmax, dw > 0)",
			 wmin, wmax, dw);
		return -1;
	}
	if (nspec < 1 || specmin < 0 || bundlesize < 1 || nsubbundles < 1 || nsubbundles > bundlesize ||
	    nwavestep < 1 || wavepad < 0 || wavepad_frac < 0 || pixpad_frac < 0 || pixpad_frac > 1) {
		snprintf(msg, (size_t)msglen,
			 "invalid decomposition (nspec %d, bundlesize %d, nsubbundles %d, nwavestep %d, "
			 "wavepad %d)", nspec, bundlesize, nsubbundles, nwavestep, wavepad);
		return -1;
	}
	p->wmin = wmin;
	p->wmax = wmax;
	p->dw = dw;
	p->nwave = desi_grid_len(wmin, wmax, dw);
	p->wavepad = wavepad + (int)(wavepad * wavepad_frac);
	p->nwavestep = nwavestep;
	p->nfullwave = p->nwave + 2 * p->wavepad + nwavestep;
	p->specmin = specmin;
	p->nspec = nspec;
	p->bundlesize = bundlesize;
	p->nsubbundles = nsubbundles;
	p->nbundles = (nspec + bundlesize - 1) / bundlesize;
	p->npatch_wave = (p->nwave + nwavestep - 1) / nwavestep;
	p->pixpad_frac = pixpad_frac;
	return 0;
}

void desi_plan_bundle(const desi_plan_t *p, int b, int *s0, int *ns)
{
	*s0 = p->specmin + b * p->bundlesize;
	int end = p->specmin + p->nspec;
	*ns = (*s0 + p->bundlesize <= end) ? p->bundlesize : end - *s0;
}

void desi_plan_subbundle(const desi_plan_t *p, int ns, int k, int *c0, int *nc, int *f0, int *nf)
{
	/* Near-equal subbundles, the larger first (as an array_split). */
	int nsub = p->nsubbundles < ns ? p->nsubbundles : ns;
	int q = ns / nsub, r = ns % nsub;
	*c0 = k * q + (k < r ? k : r);
	*nc = q + (k < r ? 1 : 0);
	*f0 = *c0 > 0 ? *c0 - 1 : 0;
	int end = *c0 + *nc < ns ? *c0 + *nc + 1 : ns;
	*nf = end - *f0;
}

void desi_plan_window(const desi_plan_t *p, const int32_t *xc, const int32_t *yc, int nf,
		      int nwave_patch, int cw0, int cnw, int sy, int sx, int npix_y, int npix_x,
		      int *ymin, int *ny, int *xmin, int *nx)
{
	int x0 = INT32_MAX, x1 = INT32_MIN;
	int cy0 = INT32_MAX, cy1 = INT32_MIN, py0 = INT32_MAX, py1 = INT32_MIN;

	for (int f = 0; f < nf; f++)
		for (int w = 0; w < nwave_patch; w++) {
			int i = f * nwave_patch + w;
			int xa = xc[i], xb = xc[i] + sx, ya = yc[i], yb = yc[i] + sy;
			if (xa < x0)
				x0 = xa;
			if (xb > x1)
				x1 = xb;
			if (ya < py0)
				py0 = ya;
			if (yb > py1)
				py1 = yb;
			if (w >= cw0 && w < cw0 + cnw) {
				if (ya < cy0)
					cy0 = ya;
				if (yb > cy1)
					cy1 = yb;
			}
		}
	/* Rows: the core's, extended into the padding by pixpad_frac of its
	 * rows, computed as gpu_specter's _prepare_patch does (offsets from the
	 * padded top, truncated by int()), so that windows match exactly. */
	int lo = (int)((cy0 - py0) * (1.0 - p->pixpad_frac));
	int hi = (int)((cy1 - py0) + (py1 - cy1) * p->pixpad_frac);
	int y0 = py0 + lo, y1 = py0 + hi;
	if (x0 < 0)
		x0 = 0;
	if (x1 > npix_x)
		x1 = npix_x;
	if (y0 < 0)
		y0 = 0;
	if (y1 > npix_y)
		y1 = npix_y;
	*xmin = x0;
	*nx = x1 > x0 ? x1 - x0 : 0;
	*ymin = y0;
	*ny = y1 > y0 ? y1 - y0 : 0;
}
