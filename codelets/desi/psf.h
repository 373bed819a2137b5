/* DESI GaussHermite PSF: reading, trace and parameter evaluation, and spots (CPU and CUDA). */
#ifndef SP_DESI_PSF_H
#define SP_DESI_PSF_H

/*
 * DESIGN: evaluating a spot has two parts.  The Legendre sums (trace X, Y
 * and the 2 + (GHDEGX+1)(GHDEGY+1) shape parameters of a fibre at one
 * wavelength) are cheap and done on the host into a flat "spot parameter"
 * array; the pixel-integrated Gauss-Hermite terms (erf and exp per pixel
 * edge) and the 11 x 17 outer products are the work, done by
 * desi_spots_cpu() or its CUDA twin desi_spots_cuda() over many (fibre,
 * wavelength) pairs at once (a bundle over the padded wavelength axis).
 * Units: wavelengths in Angstrom, positions in CCD pixels with (0, 0) the
 * centre of pixel [row 0][col 0], x along columns.  See
 * ../shared/science/desi-extraction.md, "Evaluating the PSF".
 */

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct desi_psf {
	int nfib;                 /* 500 */
	int ncx, ncy;             /* Legendre coefficients of XTRACE, YTRACE */
	double xwmin, xwmax;      /* XTRACE's WAVEMIN/WAVEMAX */
	double ywmin, ywmax;      /* YTRACE's */
	double *xcoef, *ycoef;    /* [nfib][ncx], [nfib][ncy] */
	double wmin, wmax;        /* PSF table's WAVEMIN/WAVEMAX */
	int ncoef;                /* LEGDEG + 1 */
	int hsizex, hsizey;       /* 8, 5: spots are (2 hsizey + 1) x (2 hsizex + 1) */
	int ghdegx, ghdegy;       /* 6, 6 */
	int npix_x, npix_y;       /* CCD size from the header */
	double psferr;            /* PSFERR, default 0.01 */
	double *ghsigx, *ghsigy;  /* [nfib][ncoef] */
	double *gh;               /* [(ghdegx+1)(ghdegy+1)][nfib][ncoef], i (x) major: index i*(ghdegy+1)+j for GH-i-j */
} desi_psf_t;

/* Reads a specex GaussHermite PSF (PSFTYPE GAUSS-HERMITE; HDUs found by
 * EXTNAME: XTRACE, YTRACE, PSF).  path is a plain file name (no CFITSIO
 * extended syntax; FIFOs and devices are refused: fitskey.h), every header
 * keyword is parsed and range-checked by us, and the evaluated model must
 * be sane (traces near the CCD, sigmas positive: check_values() in psf.c).
 * Errors name the file and the reason (missing HDU or parameter, another
 * PSF type, bad sizes, malformed keyword, garbage coefficients). */
int desi_psf_read(const char *path, desi_psf_t **psf, sp_err_t *err);
void desi_psf_free(desi_psf_t **psf);

/* Trace position of fibre f at wavelength w. */
void desi_psf_xy(const desi_psf_t *psf, int f, double w, double *x, double *y);

/* Wavelength of fibre f's trace at CCD row y (the YTRACE polynomial
 * inverted by the secant method to 1e-9 A; extrapolated outside its
 * WAVEMIN..WAVEMAX as the polynomial is); NaN if it does not converge. */
double desi_psf_wave_at_row(const desi_psf_t *psf, int f, double y);

/* The wavelengths every fibre of the PSF covers, as specter's
 * PSF.wmin_all / wmax_all: the largest wavelength at row 0 and the
 * smallest at row npix_y - 1 over all fibres.  0, or -1 (NaN) if a trace
 * cannot be inverted.  desispec's default grid is ceil(wmin_all) ..
 * floor(wmax_all). */
int desi_psf_wave_range(const desi_psf_t *psf, double *wmin_all, double *wmax_all);

/* The nightly grid's ends of the arm a camera name ("b0" .. "z9", as a
 * CAMERA keyword: case, blanks and specex's inner quotes aside) is in:
 * b 3600 .. 5800, r 5760 .. 7620, z 7520 .. 9824 Angstrom (desispec's
 * desi_proc).  1, or 0 when camera (NULL allowed) names no arm. */
int desi_camera_arm(const char *camera, double *lo, double *hi);

/* The default output grid's ends: a *wmin of 0 becomes the start of the
 * camera's arm grid (desi_camera_arm()), a *wmax of 0 its end, each kept
 * within the PSF's domain (ceil .. floor of the narrowest of its and its
 * traces' WAVEMIN .. WAVEMAX; on the arm's points, dw apart).  Without an
 * arm (camera NULL or unknown), or one the PSF's domain covers less than
 * half of (not its camera),
 * ceil(wmin_all) and floor(wmax_all), desispec's default without -w.
 * Others are kept.  0, or -1 when a 0 needs the range and
 * desi_psf_wave_range() fails. */
int desi_psf_default_grid(const desi_psf_t *psf, const char *camera, double dw, double *wmin,
			  double *wmax);

/* Number of doubles per (fibre, wavelength) in a spot-parameter array:
 * X, Y, GHSIGX, GHSIGY, then the GH-i-j coefficients, i major. */
static inline int desi_psf_nparams(const desi_psf_t *psf)
{
	return 4 + (psf->ghdegx + 1) * (psf->ghdegy + 1);
}

/* Spot parameters of fibres [f0, f0+nf) at waves[0..nw): params is
 * [nf][nw][desi_psf_nparams]. */
void desi_psf_params(const desi_psf_t *psf, int f0, int nf, const double *waves, int nw,
		     double *params);

/* Largest spot half-sizes and Gauss-Hermite degrees the kernels accept
 * (desi_psf_read() rejects larger ones): they size the kernels' scratch. */
#define DESI_PSF_MAX_HSIZE 32
#define DESI_PSF_MAX_GHDEG 15

/* Corner of a spot centred at c (X or Y) with half-size hsize:
 * floor(c - hsize + 0.5) as int32, INT32_MIN when that is not an int32 (a
 * non-finite or absurd position: no UB in the cast).  Shared by the spot
 * kernels and the planners that need corners before the spots exist. */
static inline int32_t desi_spot_corner(double c, int hsize)
{
	double v = __builtin_floor(c - (double)hsize + 0.5);
	return v >= -2147483648.0 && v <= 2147483647.0 ? (int32_t)v : INT32_MIN;
}

/* Shape of the spots: everything the spot kernels need besides params. */
typedef struct desi_spot_shape {
	int hsizex, hsizey, ghdegx, ghdegy;
} desi_spot_shape_t;

/* The spot shape of a PSF read by desi_psf_read(). */
static inline desi_spot_shape_t desi_psf_shape(const desi_psf_t *psf)
{
	desi_spot_shape_t s = { psf->hsizex, psf->hsizey, psf->ghdegx, psf->ghdegy };
	return s;
}

/* n spots from n parameter sets: spots [n][2 hsizey + 1][2 hsizex + 1]
 * (row-major, non-negative, sum 1), corners xc[n], yc[n] (the CCD column
 * and row of spot pixel [0][0]).  A shape beyond the DESI_PSF_MAX_* limits
 * aborts (desi_psf_read() never makes one); a corner that is not an int32
 * (non-finite X or Y) is INT32_MIN; a spot whose pixels all clip to 0
 * comes out NaN, as the reference's does.  A stop requested while it runs
 * (src/base/cancel.h, polled every 1024 spots) leaves the rest unwritten:
 * the caller then drops the spots (the item is cancelled). */
void desi_spots_cpu(const double *params, size_t n, desi_spot_shape_t shape, double *spots,
		    int32_t *xc, int32_t *yc);
/* The same with the SIMD variant isa of src/base/cpuisa.h (the baseline
 * where isa cannot run here): every variant gives the same bits. */
void desi_spots_cpu_isa(int isa, const double *params, size_t n, desi_spot_shape_t shape,
			double *spots, int32_t *xc, int32_t *yc);

/* CUDA twin, asynchronous on stream, device pointers; 0, SP_EINVAL (a
 * shape beyond the limits) or SP_ECUDA (the launch failed).  Pixels agree
 * with desi_spots_cpu() to a few 1e-16 (CUDA's erf and exp, and the order
 * of the normalising sum); corners exactly. */
struct CUstream_st;
int desi_spots_cuda(const double *params, size_t n, desi_spot_shape_t shape, double *spots,
		    int32_t *xc, int32_t *yc, struct CUstream_st *stream);

#endif /* SP_DESI_PSF_H */
