/* DESI extraction plan: wavelength grid, padding, bundles, subbundles, patches, pixel windows. */
#ifndef SP_DESI_PLAN_H
#define SP_DESI_PLAN_H

/*
 * DESIGN: pure arithmetic, no I/O and no StarPU, so it is unit-tested on
 * its own against the reference patch.  The padded wavelength axis is
 * wavepad bins below wmin, the grid, and wavepad + nwavestep bins above, so
 * that every patch (nwavestep core bins + wavepad each side) lies inside it:
 * patch k of a subbundle covers padded bins [k nwavestep, k nwavestep +
 * nwavestep + 2 wavepad) and its core is grid bins [k nwavestep,
 * min((k+1) nwavestep, nwave)).
 */

#include <stdint.h>

typedef struct desi_plan {
	double wmin, wmax, dw;
	int nwave;        /* grid bins, wmin + dw*i up to wmax inclusive */
	int wavepad;      /* after wavepad_frac */
	int nwavestep;
	int nfullwave;    /* padded axis: nwave + 2 wavepad + nwavestep */
	int specmin, nspec, bundlesize, nsubbundles;
	int nbundles;     /* ceil(nspec / bundlesize) */
	int npatch_wave;  /* patches per subbundle: ceil(nwave / nwavestep) */
	double pixpad_frac;
} desi_plan_t;

/* Fills the plan; returns 0 or -1 with a reason in msg (e.g. wmax < wmin,
 * nsubbundles > bundlesize). */
/* Length of the output grid wmin + dw i, as the references'
 * numpy.arange(wmin, wmax + dw/2, dw): wmax is included when on the grid. */
int desi_grid_len(double wmin, double wmax, double dw);

int desi_plan_init(desi_plan_t *p, double wmin, double wmax, double dw, int specmin, int nspec,
		   int bundlesize, int nsubbundles, int nwavestep, int wavepad, double wavepad_frac,
		   double pixpad_frac, char *msg, int msglen);

/* The largest patch a plan may make.  A patch of nfib fibres x m padded
 * wavelengths has n = nfib m unknowns: its normal matrix takes n^2 doubles
 * and its decorrelation desi_decorrelate_flops() (extract.h: ~n (2m)^2 for
 * the band Cholesky and the selected inverse, ~7 m^3 per core fibre).
 * DESI_PATCH_MAX_FLOPS is about 1 s of one core (doc/desi.md has the
 * patch times it comes from); DESI_PATCH_MAX_UNKNOWNS bounds the normal
 * matrix at 128 MiB whatever the fibres; DESI_PATCH_MAX_WAVES bounds m,
 * where the flops undercount the time (the m x m blocks fall out of cache
 * and run at a fraction of the rate beyond ~600, doc/desi.md).
 * gpu_specter's default patch is 7 x 74 = 518 unknowns, 4.8e7 flops. */
#define DESI_PATCH_MAX_FLOPS 1.6e10
#define DESI_PATCH_MAX_UNKNOWNS 4096
#define DESI_PATCH_MAX_WAVES 650

/* Checks the decomposition's largest patch against those limits, from the
 * parameters alone (the grid does not change a patch): returns 0, or -1
 * with a one-line reason in msg naming the parameter, its value and the
 * limit, e.g. "nwavestep 10000 makes a patch of 7 x 10024 = 70168 unknowns
 * (at most 7 x 527 = 3689: ...)".  *nmax, when not NULL, receives the
 * largest patch's unknowns (0 when the parameters are invalid). */
int desi_plan_check_patch(int nspec, int bundlesize, int nsubbundles, int nwavestep, int wavepad,
			  double wavepad_frac, int *nmax, char *msg, int msglen);

/* Padding wavelengths each side of a patch: wavepad + int(wavepad
 * wavepad_frac), as desi_plan_init() sets it. */
static inline long long desi_plan_wavepad(int wavepad, double wavepad_frac)
{
	return (long long)wavepad + (long long)(wavepad * wavepad_frac);
}

/* Wavelength of padded bin i (may be below wmin or above wmax). */
static inline double desi_plan_fullwave(const desi_plan_t *p, int i)
{
	return p->wmin + p->dw * (double)(i - p->wavepad);
}

/* Spectra [*s0, *s0 + *ns) of bundle b (absolute fibre numbers). */
void desi_plan_bundle(const desi_plan_t *p, int b, int *s0, int *ns);

/* Subbundle k of a bundle of ns spectra: its spectra [*c0, *c0 + *nc)
 * relative to the bundle start, and the patch's fibres with one neighbour
 * each side inside the bundle: [*f0, *f0 + *nf). */
void desi_plan_subbundle(const desi_plan_t *p, int ns, int k, int *c0, int *nc, int *f0, int *nf);

/* Pixel window of a patch from its spots' corners xc/yc [nf][nwave_patch]
 * (spot size sy x sx), core bins [cw0, cw0 + cnw): columns span every spot;
 * rows span the core bins' spots, extended by pixpad_frac of the padding
 * bins' extra rows each side.  Clipped to the CCD [0, npix_y) x [0, npix_x);
 * an empty window gives *ny or *nx = 0. */
void desi_plan_window(const desi_plan_t *p, const int32_t *xc, const int32_t *yc, int nf,
		      int nwave_patch, int cw0, int cnw, int sy, int sx, int npix_y, int npix_x,
		      int *ymin, int *ny, int *xmin, int *nx);

#endif /* SP_DESI_PLAN_H */
