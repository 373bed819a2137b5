/* DESI extraction plan: the decomposition of a frame into bundles and patches. */
#include "plan.h"
#include "extract.h"

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

/* The nominal decorrelation flops of a patch of nf fibres x m padded
 * wavelengths with core fibres [core_f0, core_f0 + cnf) (extract.h's count;
 * the spot size, DESI's 11 x 17, adds a negligible term). */
static double patch_flops(int nf, long long m, int core_f0, int cnf)
{
	const desi_patch_t p = { .nfib = nf, .nwave = (int)m, .sy = 11, .sx = 17,
				 .core_f0 = core_f0, .core_nf = cnf };
	return desi_decorrelate_flops(&p);
}

/* Whether a patch of nf fibres x m wavelengths is within the limits. */
static int patch_fits(int nf, long long m, int core_f0, int cnf)
{
	return (long long)nf * m <= DESI_PATCH_MAX_UNKNOWNS && m <= DESI_PATCH_MAX_WAVES &&
	       patch_flops(nf, m, core_f0, cnf) <= DESI_PATCH_MAX_FLOPS;
}

/* The most padded wavelengths a patch of nf fibres may have (0: none). */
static long long patch_max_wave(int nf, int core_f0, int cnf)
{
	long long lo = 0, hi = DESI_PATCH_MAX_UNKNOWNS / (nf > 0 ? nf : 1);
	if (hi > DESI_PATCH_MAX_WAVES)
		hi = DESI_PATCH_MAX_WAVES;
	while (lo < hi) { /* the largest m that fits: fits(lo), !fits(hi + 1) */
		long long mid = lo + (hi - lo + 1) / 2;
		if (patch_fits(nf, mid, core_f0, cnf))
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

int desi_plan_check_patch(int nspec, int bundlesize, int nsubbundles, int nwavestep, int wavepad,
			  double wavepad_frac, int *nmax, char *msg, int msglen)
{
	if (nmax != NULL)
		*nmax = 0;
	if (nspec < 1 || bundlesize < 1 || nsubbundles < 1 || nsubbundles > bundlesize ||
	    nwavestep < 1 || wavepad < 0 || !(wavepad_frac >= 0) || wavepad_frac > 1e6)
		return 0; /* desi_plan_init() says what is wrong */
	const long long wp = desi_plan_wavepad(wavepad, wavepad_frac);
	const long long m = (long long)nwavestep + 2 * wp;
	/* the first bundle is the largest; its subbundles as the plan splits it */
	const int ns = bundlesize < nspec ? bundlesize : nspec;
	desi_plan_t pl = { .nsubbundles = nsubbundles };
	const int nsub = nsubbundles < ns ? nsubbundles : ns;
	int wnf = 0, wcf0 = 0, wcnf = 0;
	double wflops = -1;
	for (int k = 0; k < nsub; k++) {
		int c0, nc, f0, nf;
		desi_plan_subbundle(&pl, ns, k, &c0, &nc, &f0, &nf);
		/* (a patch beyond the unknowns' limit is refused whatever its flops) */
		const double fl = (double)nf * (double)m > 1e9 ? INFINITY :
				  patch_flops(nf, m, c0 - f0, nc);
		if (fl > wflops || (fl == wflops && nf > wnf)) {
			wflops = fl;
			wnf = nf;
			wcf0 = c0 - f0;
			wcnf = nc;
		}
	}
	const long long n = (long long)wnf * m;
	if (nmax != NULL)
		*nmax = n < 0x7fffffff ? (int)n : 0x7fffffff;
	if (n <= DESI_PATCH_MAX_UNKNOWNS && m <= DESI_PATCH_MAX_WAVES && wflops <= DESI_PATCH_MAX_FLOPS)
		return 0;
	const long long mmax = patch_max_wave(wnf, wcf0, wcnf);
	const char *why = (long long)wnf * (mmax + 1) > DESI_PATCH_MAX_UNKNOWNS ?
				  "its normal matrix would take more than 128 MiB" :
				  "its decorrelation would take more than about 1 s on one core";
	if (mmax >= 2 * wp + 1) /* a smaller nwavestep fits */
		snprintf(msg, (size_t)msglen,
			 "nwavestep %d makes a patch of %d x %lld = %lld unknowns (at most %d x %lld = "
			 "%lld: %s; lower nwavestep or raise nsubbundles)",
			 nwavestep, wnf, m, n, wnf, mmax, wnf * mmax, why);
	else if (2 * wp + 1 <= patch_max_wave(3, 1, 1)) /* fewer fibres would fit */
		snprintf(msg, (size_t)msglen,
			 "bundlesize %d and nsubbundles %d make patches of %d fibres x %lld wavelengths "
			 "= %lld unknowns (at most %d x %lld = %lld: %s; raise nsubbundles)",
			 bundlesize, nsubbundles, wnf, m, n, wnf, mmax, wnf * mmax, why);
	else
		snprintf(msg, (size_t)msglen,
			 "wavepad %d (wavepad_frac %g: %lld padding wavelengths each side) makes a patch "
			 "of %d x %lld = %lld unknowns (at most %d x %lld = %lld: %s; lower wavepad)",
			 wavepad, wavepad_frac, wp, wnf, m, n, wnf, mmax, wnf * mmax, why);
	return -1;
}
