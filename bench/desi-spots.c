/* Single-core timing of the DESI GaussHermite spot kernel against the obvious per-pixel evaluation. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codelets/desi/psf.h"
#include "benchutil.h"

/* Usage: desi-spots [PSF.fits]; default $SP_SHARED/data/desi/psf-r0-00051060.fits.
 * One bundle: 25 fibres x 2400 wavelengths (0.8 A from 5750.4 A, the r
 * grid with its padding). */

/* The obvious spot: each pixel's 1-D terms from its own two edges (erf,
 * exp and Hermite per pixel, per degree), the GH double sum per pixel. */
static double he(int m, double u)
{
	double a = 1.0, b = u;
	if (m == 0)
		return 1.0;
	for (int k = 2; k <= m; k++) {
		double c = u * b - (double)(k - 1) * a;
		a = b;
		b = c;
	}
	return b;
}

static double pix1d(int m, int p, int n, double c, double sigma)
{
	double d = fmod(c + 0.5, 1.0);
	d = (d < 0 ? d + 1.0 : d) - 0.5;
	double a = ((double)(p - n / 2) - 0.5 - d) / sigma;
	double b = ((double)(p + 1 - n / 2) - 0.5 - d) / sigma;
	double r2pi = sqrt(2 * 3.14159265358979323846);
	if (m == 0)
		return 0.5 * (erf(b / sqrt(2.0)) - erf(a / sqrt(2.0)));
	return he(m - 1, a) * exp(-0.5 * a * a) / r2pi - he(m - 1, b) * exp(-0.5 * b * b) / r2pi;
}

static void slow_spots(const double *par, size_t n, desi_spot_shape_t s, double *spots,
		       int32_t *xc, int32_t *yc)
{
	int nx = 2 * s.hsizex + 1, ny = 2 * s.hsizey + 1;
	int np = 4 + (s.ghdegx + 1) * (s.ghdegy + 1);
	for (size_t q = 0; q < n; q++) {
		const double *p = par + q * np;
		double *spot = spots + q * nx * ny, sum = 0;
		xc[q] = (int32_t)floor(p[0] - s.hsizex + 0.5);
		yc[q] = (int32_t)floor(p[1] - s.hsizey + 0.5);
		for (int iy = 0; iy < ny; iy++)
			for (int ix = 0; ix < nx; ix++) {
				double v = 0;
				for (int i = 0; i <= s.ghdegx; i++)
					for (int j = 0; j <= s.ghdegy; j++)
						v += p[4 + i * (s.ghdegy + 1) + j] *
						     pix1d(j, iy, ny, p[1], p[3]) *
						     pix1d(i, ix, nx, p[0], p[2]);
				spot[iy * nx + ix] = v > 0 ? v : 0;
				sum += spot[iy * nx + ix];
			}
		for (int k = 0; k < nx * ny; k++)
			spot[k] /= sum;
	}
}

int main(int argc, char **argv)
{
	char path[1024];
	const char *sh = getenv("SP_SHARED");
	desi_psf_t *psf = NULL;
	sp_err_t err = { 0, "" };
	enum { NF = 25, NW = 2400, NSLOW = 1000, REPS = 5 };

	if (argc > 1)
		snprintf(path, sizeof path, "%s", argv[1]);
	else
		snprintf(path, sizeof path, "%s/data/desi/psf-r0-00051060.fits",
			 sh != NULL && *sh ? sh : "../shared");
	if (desi_psf_read(path, &psf, &err) != 0) {
		fprintf(stderr, "desi-spots: %s\n", err.msg);
		return 1;
	}
	desi_spot_shape_t shape = desi_psf_shape(psf);
	size_t n = (size_t)NF * NW, np = (size_t)desi_psf_nparams(psf);
	size_t npix = (size_t)(2 * shape.hsizex + 1) * (2 * shape.hsizey + 1);
	double *waves = xmalloc(NW * sizeof *waves), *par = xmalloc(n * np * sizeof *par);
	double *spots = xmalloc(n * npix * sizeof *spots);
	double *slow = xmalloc((size_t)NSLOW * npix * sizeof *slow);
	int32_t *xc = xmalloc(n * sizeof *xc), *yc = xmalloc(n * sizeof *yc);
	int32_t sxc[NSLOW], syc[NSLOW];

	for (int w = 0; w < NW; w++)
		waves[w] = 5750.4 + 0.8 * w;
	double tp = INFINITY, ts = INFINITY, tslow;
	for (int r = 0; r < REPS; r++) {
		double t0 = now();
		desi_psf_params(psf, 0, NF, waves, NW, par);
		double t1 = now();
		desi_spots_cpu(par, n, shape, spots, xc, yc);
		double t2 = now();
		tp = fmin(tp, t1 - t0);
		ts = fmin(ts, t2 - t1);
	}
	/* The slow one on NSLOW spots spread over the bundle. */
	double *sub = xmalloc((size_t)NSLOW * np * sizeof *sub);
	for (int q = 0; q < NSLOW; q++)
		memcpy(sub + q * np, par + (size_t)q * (n / NSLOW) * np, np * sizeof *par);
	double t0 = now();
	slow_spots(sub, NSLOW, shape, slow, sxc, syc);
	tslow = now() - t0;
	double dmax = 0;
	for (int q = 0; q < NSLOW; q++)
		for (size_t k = 0; k < npix; k++)
			dmax = fmax(dmax, fabs(slow[q * npix + k] - spots[(size_t)q * (n / NSLOW) * npix + k]));

	double fast = (double)n / ts, slowr = NSLOW / tslow;
	printf("desi-spots: %s, one bundle %d fibres x %d waves = %zu spots (%zux%d px, GH degree %d/%d)\n",
	       path, NF, NW, n, npix / (2 * shape.hsizex + 1), 2 * shape.hsizex + 1, shape.ghdegx,
	       shape.ghdegy);
	printf("  desi_psf_params: %.1f ms (%.3g sets/s)\n", 1e3 * tp, (double)n / tp);
	printf("  desi_spots_cpu:  %.1f ms (%.3g spots/s, best of %d)\n", 1e3 * ts, fast, REPS);
	printf("  per-pixel obvious: %.3g spots/s (%d spots); speed-up %.1fx; max |diff| %.2g\n",
	       slowr, NSLOW, fast / slowr, dmax);
	free(waves);
	free(par);
	free(spots);
	free(slow);
	free(sub);
	free(xc);
	free(yc);
	desi_psf_free(&psf);
	return 0;
}
