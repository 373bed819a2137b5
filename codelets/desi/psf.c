/* DESI GaussHermite PSF: the specex FITS reader, trace and parameter evaluation, and the CPU spot kernel. */
#ifdef HAVE_CONFIG_H
#include <config.h> /* HAVE_LIBMVEC_ERF; tools/fuzz builds without it */
#endif

#include "psf.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fitsio.h>

#include "fitskey.h"
#include "cancel.h"
#include "cpuisa.h"

/*
 * DESIGN.  The arithmetic follows the reference (gpu_specter's
 * extract/cpu.py, desi-extraction.md "Evaluating the PSF") operation for
 * operation, so that our numbers differ from it only by its own choices we
 * cannot reproduce (BLAS summation order, scipy's erf):
 * - Legendre argument w = (lambda - WAVEMIN) * (2 / (WAVEMAX - WAVEMIN)) - 1,
 *   as gpu_specter writes it (not 2 (lambda - WAVEMIN) / (...) - 1, which
 *   rounds differently).
 * - The traces X, Y with NumPy's legval (Clenshaw, from the top
 *   coefficient): this reproduces the reference X and Y bit for bit, where
 *   the forward sum sum_k c_k P_k(w) is up to 1e-12 px off (Y runs to 4000
 *   px and its terms cancel).  The shape parameters as legvander(w) . coeff
 *   (P_k by the recurrence, then the sum in k order), as the reference does.
 * - Spots: edges u_k = ((k - nx/2 - 0.5) - dx) / sigma, one erf(u / sqrt 2)
 *   and one exp(-0.5 u^2) / sqrt(2 pi) per edge, Hermite He_m(u) by the
 *   recurrence, differences of neighbouring edges; the 2-D sum
 *   sum_ij GH_ij gy_j[iy] gx_i[ix] as two contractions, first over i
 *   (T_j[ix] = sum_i GH_ij gx_i[ix]), then over j, each sum in ascending
 *   order in a register, in vector lanes along ix; clip at 0 (NaN too);
 *   multiply by 1/sum (the reference divides: 1 ulp).  psf_cuda.cu
 *   evaluates the same expressions; only the order of the normalising sum
 *   differs.  Single-threaded: ~0.6 M spots/s on one core here (SSE2;
 *   ~0.8 M with -mavx2), 300x the obvious per-pixel evaluation
 *   (bench/desi-spots.c).
 * Tails (TAILAMP ...) are ignored, as gpu_specter does: both real DESI PSFs
 * have TAILAMP = 0.  PSFERR is read if present (default 0.01); specex's
 * PSFERROR keyword is something else and is not used.
 */

/* sqrt(2 pi) and sqrt(2), rounded as NumPy's np.sqrt(2. * np.pi) and
 * np.sqrt(2.) (correctly rounded). */
#define DESI_SQRT_2PI 2.5066282746310002
#define DESI_SQRT2 1.4142135623730951

/* Legendre argument of wavelength w on [wmin, wmax]. */
static double leg_arg(double w, double wmin, double wmax)
{
	return (w - wmin) * (2.0 / (wmax - wmin)) - 1.0;
}

/* NumPy's legval for one point: Clenshaw's recurrence, top down. */
static double legval(double x, const double *c, int n)
{
	double c0, c1;

	if (n == 1)
		return c[0];
	c0 = c[n - 2];
	c1 = c[n - 1];
	for (int i = 3, nd = n; i <= n; i++) {
		double tmp = c0;
		nd--;
		c0 = c[n - i] - (c1 * (double)(nd - 1)) / (double)nd;
		c1 = tmp + (c1 * x * (double)(2 * nd - 1)) / (double)nd;
	}
	return c0 + c1 * x;
}

/* NumPy's legvander for one point: P_0..P_{n-1}(x). */
static void legvander(double x, int n, double *P)
{
	P[0] = 1.0;
	if (n > 1)
		P[1] = x;
	for (int k = 2; k < n; k++)
		P[k] = (P[k - 1] * x * (double)(2 * k - 1) - P[k - 2] * (double)(k - 1)) /
		       (double)k;
}

static double dot(const double *c, const double *P, int n)
{
	double s = 0.0;
	for (int k = 0; k < n; k++)
		s += c[k] * P[k];
	return s;
}

void desi_psf_xy(const desi_psf_t *psf, int f, double w, double *x, double *y)
{
	*x = legval(leg_arg(w, psf->xwmin, psf->xwmax), psf->xcoef + (size_t)f * psf->ncx, psf->ncx);
	*y = legval(leg_arg(w, psf->ywmin, psf->ywmax), psf->ycoef + (size_t)f * psf->ncy, psf->ncy);
}

double desi_psf_wave_at_row(const desi_psf_t *psf, int f, double y)
{
	double x, w0 = psf->ywmin, w1 = psf->ywmax, y0, y1;

	desi_psf_xy(psf, f, w0, &x, &y0);
	desi_psf_xy(psf, f, w1, &x, &y1);
	for (int it = 0; it < 100; it++) {
		if (!(y1 != y0) || !isfinite(y0) || !isfinite(y1))
			return NAN;
		double w2 = w1 + (y - y1) * (w1 - w0) / (y1 - y0);
		if (fabs(w2 - w1) < 1e-9)
			return w2;
		w0 = w1;
		y0 = y1;
		w1 = w2;
		desi_psf_xy(psf, f, w1, &x, &y1);
	}
	return NAN;
}

int desi_psf_wave_range(const desi_psf_t *psf, double *wmin_all, double *wmax_all)
{
	double lo = -INFINITY, hi = INFINITY;

	for (int f = 0; f < psf->nfib; f++) {
		double a = desi_psf_wave_at_row(psf, f, 0.0);
		double b = desi_psf_wave_at_row(psf, f, (double)psf->npix_y - 1.0);
		if (isnan(a) || isnan(b)) {
			*wmin_all = *wmax_all = NAN;
			return -1;
		}
		if (a > lo)
			lo = a;
		if (b < hi)
			hi = b;
	}
	*wmin_all = lo;
	*wmax_all = hi;
	return 0;
}

int desi_camera_arm(const char *camera, double *lo, double *hi)
{
	/* desispec's nightly grids (desi_proc), the same for every spectrograph */
	static const struct {
		char arm;
		double lo, hi;
	} arms[] = { { 'b', 3600, 5800 }, { 'r', 5760, 7620 }, { 'z', 7520, 9824 } };
	if (camera == NULL)
		return 0;
	while (*camera == ' ' || *camera == '\'') /* specex writes CAMERA = '''r0      ''' */
		camera++;
	char c = camera[0] >= 'A' && camera[0] <= 'Z' ? (char)(camera[0] - 'A' + 'a') : camera[0];
	if (c == '\0' || camera[1] < '0' || camera[1] > '9' ||
	    (camera[2] != '\0' && camera[2] != ' ' && camera[2] != '\''))
		return 0;
	for (size_t i = 0; i < sizeof arms / sizeof arms[0]; i++)
		if (arms[i].arm == c) {
			*lo = arms[i].lo;
			*hi = arms[i].hi;
			return 1;
		}
	return 0;
}

int desi_psf_default_grid(const desi_psf_t *psf, const char *camera, double dw, double *wmin,
			  double *wmax)
{
	double lo, hi, alo, ahi;

	if (*wmin != 0 && *wmax != 0)
		return 0;
	if (desi_camera_arm(camera, &alo, &ahi) && dw > 0) {
		/* desi_proc's grid, its points kept, within the PSF's domain
		 * (WAVEMIN .. WAVEMAX) */
		lo = ceil(fmax(psf->wmin, fmax(psf->xwmin, psf->ywmin)));
		hi = floor(fmin(psf->wmax, fmin(psf->xwmax, psf->ywmax)));
		double a = *wmin, b = *wmax;
		if (a == 0)
			a = alo >= lo ? alo : alo + ceil((lo - alo) / dw - 1e-9) * dw;
		if (b == 0) /* the last point within the domain too */
			b = ahi <= hi ? ahi : a + floor((hi - a) / dw + 1e-9) * dw;
		/* a camera whose arm the PSF covers less than half of is not its
		 * camera (an r PSF given for a b image): the PSF's range then */
		if (a <= b && a >= lo && b <= hi && b - a >= 0.5 * (ahi - alo)) {
			*wmin = a;
			*wmax = b;
			return 0;
		}
	}
	if (desi_psf_wave_range(psf, &lo, &hi) != 0)
		return -1;
	if (*wmin == 0)
		*wmin = ceil(lo);
	if (*wmax == 0)
		*wmax = floor(hi);
	return 0;
}

void desi_psf_params(const desi_psf_t *psf, int f0, int nf, const double *waves, int nw,
		     double *params)
{
	int np = desi_psf_nparams(psf), ngh = (psf->ghdegx + 1) * (psf->ghdegy + 1);
	int nc = psf->ncoef;
	size_t plane = (size_t)psf->nfib * nc; /* one GH-i-j's [nfib][ncoef] */
	double P[64];

	for (int w = 0; w < nw; w++) {
		legvander(leg_arg(waves[w], psf->wmin, psf->wmax), nc, P);
		for (int f = f0; f < f0 + nf; f++) {
			double *p = params + ((size_t)(f - f0) * nw + w) * np;
			size_t o = (size_t)f * nc;
			desi_psf_xy(psf, f, waves[w], &p[0], &p[1]);
			p[2] = dot(psf->ghsigx + o, P, nc);
			p[3] = dot(psf->ghsigy + o, P, nc);
			for (int k = 0; k < ngh; k++)
				p[4 + k] = dot(psf->gh + k * plane + o, P, nc);
		}
	}
}

/* ---------------------------------------------------------------- reading */

/* Reading state: the file, its path, and the first error. */
typedef struct reader {
	const char *path;
	fitsfile *fp;
	int status;     /* CFITSIO's */
	sp_err_t *err;
} reader_t;

/* Records a CFITSIO failure as "PATH: what: CFITSIO's message". */
static int fits_fail(reader_t *r, int code, const char *what)
{
	char text[FLEN_STATUS];
	fits_get_errstatus(r->status, text);
	fits_clear_errmsg();
	return sp_seterr(r->err, code, "%s: %s: %s", r->path, what, text);
}

static int move_to(reader_t *r, const char *extname)
{
	char what[80];

	if (fits_movnam_hdu(r->fp, ANY_HDU, (char *)extname, 0, &r->status) == 0)
		return 0;
	if (r->status == BAD_HDU_NUM) {
		r->status = 0;
		fits_clear_errmsg();
		return sp_seterr(r->err, SP_EFORMAT, "%s: no %s HDU (is it a GaussHermite PSF?)",
				 r->path, extname);
	}
	snprintf(what, sizeof what, "looking for the %s HDU", extname);
	return fits_fail(r, SP_EIO, what);
}

/* Wavelength ranges a PSF may claim, in Angstrom: generous (DESI covers
 * 3600 to 9800); a range outside is a corrupt header, not a spectrograph. */
#define PSF_WAVE_LO 100.0
#define PSF_WAVE_HI 100000.0
/* Largest CCD side a PSF may claim (DESI's are 4114 x 4128). */
#define PSF_MAX_NPIX 100000

/* Keywords through fitskey.h, never CFITSIO's conversion (see there). */
static int key_double(reader_t *r, const char *hdu, const char *key, double lo, double hi,
		      const double *dflt, double *v)
{
	return desi_fitskey_double(r->fp, r->path, hdu, key, lo, hi, dflt, v, r->err);
}

static int key_int(reader_t *r, const char *hdu, const char *key, int lo, int hi, int *v)
{
	long l = 0;
	int rc = desi_fitskey_long(r->fp, r->path, hdu, key, lo, hi, NULL, &l, r->err);
	*v = (int)l;
	return rc;
}

/* WAVEMIN and WAVEMAX of the current HDU: in range and in order. */
static int wave_range(reader_t *r, const char *hdu, double *wmin, double *wmax)
{
	int rc;

	if ((rc = key_double(r, hdu, "WAVEMIN", PSF_WAVE_LO, PSF_WAVE_HI, NULL, wmin)) != 0 ||
	    (rc = key_double(r, hdu, "WAVEMAX", PSF_WAVE_LO, PSF_WAVE_HI, NULL, wmax)) != 0)
		return rc;
	if (!(*wmax - *wmin >= 1.0))
		return sp_seterr(r->err, SP_EFORMAT,
				 "%s: %s HDU: WAVEMIN %g, WAVEMAX %g: not an increasing range "
				 "(at least 1 Angstrom)", r->path, hdu, *wmin, *wmax);
	return 0;
}

/* Rejects PSFTYPE other than GAUSS-HERMITE in the current HDU (absent is
 * fine: the layout checks follow). */
static int check_type(reader_t *r, const char *hdu)
{
	char type[FLEN_VALUE];
	int rc = desi_fitskey_str(r->fp, r->path, hdu, "PSFTYPE", type, sizeof type,
				  "GAUSS-HERMITE", r->err);

	if (rc != 0)
		return rc;
	if (strcmp(type, "GAUSS-HERMITE") != 0)
		return sp_seterr(r->err, SP_EFORMAT,
				 "%s: %s HDU: PSFTYPE is '%s', only GAUSS-HERMITE PSFs are supported",
				 r->path, hdu, type);
	return 0;
}

static int finite_all(const double *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(v[i]))
			return 0;
	return 1;
}

/* One trace HDU: a float image [nfib][ncoef] and its wavelength range. */
static int read_trace(reader_t *r, const char *hdu, int *nfib, int *nc, double *wmin,
		      double *wmax, double **coef)
{
	int naxis, rc;
	long naxes[2];
	char what[80];

	if ((rc = move_to(r, hdu)) != 0 || (rc = check_type(r, hdu)) != 0)
		return rc;
	if (fits_get_img_dim(r->fp, &naxis, &r->status) != 0)
		return fits_fail(r, SP_EFORMAT, hdu);
	if (naxis != 2)
		return sp_seterr(r->err, SP_ESHAPE,
				 "%s: %s HDU is a %d-D image, expected [nfibre][ncoef]", r->path,
				 hdu, naxis);
	if (fits_get_img_size(r->fp, 2, naxes, &r->status) != 0)
		return fits_fail(r, SP_EFORMAT, hdu);
	if (naxes[0] < 1 || naxes[0] > 64 || naxes[1] < 1 || naxes[1] > 100000)
		return sp_seterr(r->err, SP_ESHAPE,
				 "%s: %s HDU is [%ld][%ld]: expected [nfibre][ncoef] with 1 to 64 "
				 "Legendre coefficients",
				 r->path, hdu, naxes[1], naxes[0]);
	if ((rc = wave_range(r, hdu, wmin, wmax)) != 0)
		return rc;
	*nfib = (int)naxes[1];
	*nc = (int)naxes[0];
	size_t n = (size_t)*nfib * (size_t)*nc;
	*coef = malloc(n * sizeof **coef);
	if (*coef == NULL)
		return sp_seterr(r->err, SP_ENOMEM, "%s: %s HDU: out of memory", r->path, hdu);
	snprintf(what, sizeof what, "reading the %s image", hdu);
	if (fits_read_img(r->fp, TDOUBLE, 1, (LONGLONG)n, NULL, *coef, NULL, &r->status) != 0)
		return fits_fail(r, SP_EIO, what);
	if (!finite_all(*coef, n))
		return sp_seterr(r->err, SP_ENONFINITE,
				 "%s: %s HDU has non-finite coefficients", r->path, hdu);
	return 0;
}

/* Where a PSF table row goes: GHSIGX, GHSIGY, GH-i-j, or nowhere (-1). */
static int param_slot(const desi_psf_t *psf, const char *name)
{
	int i, j, len;

	if (strcmp(name, "GHSIGX") == 0)
		return 0;
	if (strcmp(name, "GHSIGY") == 0)
		return 1;
	if (sscanf(name, "GH-%d-%d%n", &i, &j, &len) == 2 && name[len] == '\0' && i >= 0 &&
	    i <= psf->ghdegx && j >= 0 && j <= psf->ghdegy)
		return 2 + i * (psf->ghdegy + 1) + j;
	return -1;
}

static double *slot_ptr(desi_psf_t *psf, int slot)
{
	size_t plane = (size_t)psf->nfib * psf->ncoef;
	if (slot == 0)
		return psf->ghsigx;
	if (slot == 1)
		return psf->ghsigy;
	return psf->gh + (size_t)(slot - 2) * plane;
}

/* The PSF table: header keywords, then one row per parameter, PARAM
 * (string) and COEFF (double [nfib][ncoef], TDIM (ncoef, nfib)). */
static int read_table(reader_t *r, desi_psf_t *psf)
{
	static const double psferr_default = 0.01;
	int rc, hdutype, legdeg, cpar, ccoef, typecode, ndim;
	long nrows, repeat, width, dims[4];
	char what[120];

	if ((rc = move_to(r, "PSF")) != 0 || (rc = check_type(r, "PSF")) != 0)
		return rc;
	if (fits_get_hdu_type(r->fp, &hdutype, &r->status) != 0)
		return fits_fail(r, SP_EFORMAT, "PSF HDU");
	if (hdutype != BINARY_TBL)
		return sp_seterr(r->err, SP_EFORMAT, "%s: PSF HDU is not a binary table", r->path);
	if ((rc = wave_range(r, "PSF", &psf->wmin, &psf->wmax)) != 0 ||
	    (rc = key_int(r, "PSF", "LEGDEG", 0, 63, &legdeg)) != 0 ||
	    (rc = key_int(r, "PSF", "HSIZEX", 0, DESI_PSF_MAX_HSIZE, &psf->hsizex)) != 0 ||
	    (rc = key_int(r, "PSF", "HSIZEY", 0, DESI_PSF_MAX_HSIZE, &psf->hsizey)) != 0 ||
	    (rc = key_int(r, "PSF", "GHDEGX", 0, DESI_PSF_MAX_GHDEG, &psf->ghdegx)) != 0 ||
	    (rc = key_int(r, "PSF", "GHDEGY", 0, DESI_PSF_MAX_GHDEG, &psf->ghdegy)) != 0 ||
	    (rc = key_int(r, "PSF", "NPIX_X", 1, PSF_MAX_NPIX, &psf->npix_x)) != 0 ||
	    (rc = key_int(r, "PSF", "NPIX_Y", 1, PSF_MAX_NPIX, &psf->npix_y)) != 0 ||
	    (rc = key_double(r, "PSF", "PSFERR", 0.0, 1.0, &psferr_default, &psf->psferr)) != 0)
		return rc;
	psf->ncoef = legdeg + 1;

	/* Table layout. */
	if (fits_get_num_rows(r->fp, &nrows, &r->status) != 0)
		return fits_fail(r, SP_EFORMAT, "PSF table");
	if (fits_get_colnum(r->fp, CASEINSEN, "PARAM", &cpar, &r->status) != 0 ||
	    fits_get_colnum(r->fp, CASEINSEN, "COEFF", &ccoef, &r->status) != 0) {
		r->status = 0;
		fits_clear_errmsg();
		return sp_seterr(r->err, SP_EFORMAT,
				 "%s: PSF table needs columns PARAM and COEFF", r->path);
	}
	if (fits_get_coltype(r->fp, cpar, &typecode, &repeat, &width, &r->status) != 0)
		return fits_fail(r, SP_EFORMAT, "PSF table, column PARAM");
	if (typecode != TSTRING || repeat < 1 || repeat > 70)
		return sp_seterr(r->err, SP_EFORMAT,
				 "%s: PSF table: column PARAM is not a short string", r->path);
	if (fits_get_coltype(r->fp, ccoef, &typecode, &repeat, &width, &r->status) != 0)
		return fits_fail(r, SP_EFORMAT, "PSF table, column COEFF");
	if (typecode != TDOUBLE && typecode != TFLOAT)
		return sp_seterr(r->err, SP_EFORMAT,
				 "%s: PSF table: column COEFF is not floating point", r->path);
	if (fits_read_tdim(r->fp, ccoef, 4, &ndim, dims, &r->status) != 0)
		return fits_fail(r, SP_EFORMAT, "PSF table, column COEFF");
	if (ndim != 2)
		return sp_seterr(r->err, SP_ESHAPE,
				 "%s: PSF table: COEFF cells are %d-D (%ld values): expected "
				 "[nfibre %d][LEGDEG+1 = %d] (TDIM of the COEFF column)",
				 r->path, ndim, repeat, psf->nfib, psf->ncoef);
	if (dims[0] != psf->ncoef || dims[1] != psf->nfib)
		return sp_seterr(r->err, SP_ESHAPE,
				 "%s: PSF table: COEFF cells are [%ld][%ld]: expected "
				 "[nfibre %d][LEGDEG+1 = %d] (TDIM of the COEFF column)",
				 r->path, dims[1], dims[0], psf->nfib, psf->ncoef);

	size_t plane = (size_t)psf->nfib * psf->ncoef;
	int ngh = (psf->ghdegx + 1) * (psf->ghdegy + 1), nslot = 2 + ngh;
	psf->ghsigx = malloc(plane * sizeof(double));
	psf->ghsigy = malloc(plane * sizeof(double));
	psf->gh = malloc((size_t)ngh * plane * sizeof(double));
	char *seen = calloc((size_t)nslot, 1);
	if (psf->ghsigx == NULL || psf->ghsigy == NULL || psf->gh == NULL || seen == NULL) {
		free(seen);
		return sp_seterr(r->err, SP_ENOMEM, "%s: PSF table: out of memory", r->path);
	}
	rc = 0;
	for (long row = 1; row <= nrows && rc == 0; row++) {
		char name[72], *np = name;
		if (fits_read_col(r->fp, TSTRING, cpar, row, 1, 1, NULL, &np, NULL,
				  &r->status) != 0) {
			snprintf(what, sizeof what, "PSF table, PARAM of row %ld", row);
			rc = fits_fail(r, SP_EIO, what);
			break;
		}
		int slot = param_slot(psf, name);
		if (slot < 0)
			continue; /* tails, BUNDLE, STATUS, CONT, ... */
		if (seen[slot]) {
			rc = sp_seterr(r->err, SP_EFORMAT, "%s: PSF table: parameter %s appears twice",
				       r->path, name);
			break;
		}
		seen[slot] = 1;
		double *dst = slot_ptr(psf, slot);
		if (fits_read_col(r->fp, TDOUBLE, ccoef, row, 1, (LONGLONG)plane, NULL, dst, NULL,
				  &r->status) != 0) {
			snprintf(what, sizeof what, "PSF table, COEFF of %s", name);
			rc = fits_fail(r, SP_EIO, what);
		} else if (!finite_all(dst, plane)) {
			rc = sp_seterr(r->err, SP_ENONFINITE,
				       "%s: PSF table: parameter %s has non-finite coefficients",
				       r->path, name);
		}
	}
	if (rc == 0 && nrows > 0) {
		/* The rows we skip (CONT is last) are not read: check that the
		 * table's last byte is there, so that a cut file is an error. */
		long rowlen = 0;
		unsigned char last;
		rc = desi_fitskey_long(r->fp, r->path, "PSF", "NAXIS1", 1, LONG_MAX, NULL, &rowlen,
				       r->err);
		if (rc == 0 &&
		    fits_read_tblbytes(r->fp, nrows, rowlen, 1, &last, &r->status) != 0)
			rc = fits_fail(r, SP_EIO, "PSF table, end of its data");
	}
	for (int s = 0; s < nslot && rc == 0; s++) {
		if (seen[s])
			continue;
		if (s < 2)
			rc = sp_seterr(r->err, SP_EFORMAT, "%s: PSF table has no %s parameter",
				       r->path, s == 0 ? "GHSIGX" : "GHSIGY");
		else
			rc = sp_seterr(r->err, SP_EFORMAT,
				       "%s: PSF table has no GH-%d-%d parameter (GHDEGX %d, "
				       "GHDEGY %d)",
				       r->path, (s - 2) / (psf->ghdegy + 1), (s - 2) % (psf->ghdegy + 1),
				       psf->ghdegx, psf->ghdegy);
	}
	free(seen);
	return rc;
}

/* Sample points per fibre of check_values(): the ends and 31 between. */
#define PSF_NCHECK 33

/* The evaluated model, not just its coefficients, must be sane: finite
 * coefficients can still put a trace light-years off the CCD or make a
 * sigma negative (the spots are then NaN or 0/0, silently).  Per fibre, at
 * PSF_NCHECK wavelengths spanning each range: X within [-NPIX_X, 2 NPIX_X]
 * and Y within [-NPIX_Y, 2 NPIX_Y] (real traces overhang the CCD by ~100
 * px at their ends); GHSIGX, GHSIGY in (0, 2 HSIZE + 1] px (real ones are
 * ~1); every GH-i-j finite and at most 1e6 in size (real ones < 2).  With
 * Legendre polynomials bounded by 1 on [-1, 1], this bounds the model
 * between the samples too, unless coefficients cancel there on purpose. */
static int check_values(const desi_psf_t *psf, const char *path, sp_err_t *err)
{
	int np = desi_psf_nparams(psf);
	double *p = malloc((size_t)np * sizeof *p);

	if (p == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	for (int f = 0; f < psf->nfib; f++) {
		for (int k = 0; k < PSF_NCHECK; k++) {
			double t = (double)k / (PSF_NCHECK - 1), x, y;
			double wx = psf->xwmin + t * (psf->xwmax - psf->xwmin);
			double wy = psf->ywmin + t * (psf->ywmax - psf->ywmin);
			double w = psf->wmin + t * (psf->wmax - psf->wmin);
			const char *bad = NULL, *name = NULL;
			double v = 0, wv = w;
			desi_psf_xy(psf, f, wx, &x, &y);
			if (!(x >= -psf->npix_x && x <= 2.0 * psf->npix_x)) {
				bad = "is off the CCD";
				name = "XTRACE";
				v = x;
				wv = wx;
			}
			desi_psf_xy(psf, f, wy, &x, &y);
			if (bad == NULL && !(y >= -psf->npix_y && y <= 2.0 * psf->npix_y)) {
				bad = "is off the CCD";
				name = "YTRACE";
				v = y;
				wv = wy;
			}
			desi_psf_params(psf, f, 1, &w, 1, p);
			if (bad == NULL && !(p[2] > 0 && p[2] <= 2 * psf->hsizex + 1)) {
				bad = "is not a width in (0, 2 HSIZEX + 1] px";
				name = "GHSIGX";
				v = p[2];
			}
			if (bad == NULL && !(p[3] > 0 && p[3] <= 2 * psf->hsizey + 1)) {
				bad = "is not a width in (0, 2 HSIZEY + 1] px";
				name = "GHSIGY";
				v = p[3];
			}
			for (int q = 4; q < np && bad == NULL; q++)
				if (!(fabs(p[q]) <= 1e6)) {
					bad = "is not a finite amplitude below 1e6";
					name = "GH-i-j";
					v = p[q];
				}
			if (bad != NULL) {
				free(p);
				return sp_seterr(err, SP_EFORMAT,
						 "%s: garbage PSF: %s of fibre %d at %.1f Angstrom is %g, "
						 "which %s", path, name, f, wv, v, bad);
			}
		}
	}
	free(p);
	return 0;
}

int desi_psf_read(const char *path, desi_psf_t **out, sp_err_t *err)
{
	reader_t r = { path, NULL, 0, err };
	desi_psf_t *psf;
	int rc, nfiby;

	*out = NULL;
	if ((rc = desi_fits_open(path, &r.fp, err)) != 0)
		return rc;
	psf = calloc(1, sizeof *psf);
	if (psf == NULL) {
		rc = sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
		goto done;
	}
	if ((rc = read_trace(&r, "XTRACE", &psf->nfib, &psf->ncx, &psf->xwmin, &psf->xwmax,
			     &psf->xcoef)) != 0 ||
	    (rc = read_trace(&r, "YTRACE", &nfiby, &psf->ncy, &psf->ywmin, &psf->ywmax,
			     &psf->ycoef)) != 0)
		goto done;
	if (nfiby != psf->nfib) {
		rc = sp_seterr(err, SP_ESHAPE, "%s: XTRACE has %d fibres but YTRACE %d", path,
			       psf->nfib, nfiby);
		goto done;
	}
	if ((rc = read_table(&r, psf)) != 0)
		goto done;
	rc = check_values(psf, path, err);
done:
	desi_fits_close(&r.fp);
	if (rc != 0)
		desi_psf_free(&psf);
	*out = psf;
	return rc;
}

void desi_psf_free(desi_psf_t **psf)
{
	if (psf == NULL || *psf == NULL)
		return;
	free((*psf)->xcoef);
	free((*psf)->ycoef);
	free((*psf)->ghsigx);
	free((*psf)->ghsigy);
	free((*psf)->gh);
	free(*psf);
	*psf = NULL;
}

/* ------------------------------------------------------------------ spots */

#define MAXN (2 * DESI_PSF_MAX_HSIZE + 1)
#define MAXD (DESI_PSF_MAX_GHDEG + 1)


/* E[k] = erf(u[k] / sqrt 2) and phi[k] = exp(-u[k]^2 / 2) / sqrt(2 pi),
 * k < n.  With glibc's libmvec, two at a time (its SSE2 variants, within
 * 4 ulp of the scalar calls: the spots move by ~1e-16, test_desi_psf's
 * tolerance is 1e-12); they were a third of the spots' time (36 M calls of
 * each per full r frame).  libmvec picks its implementation by CPU (SSE2
 * or SSE4.1 here), so two machines may differ in the spots' last bits, as
 * the CUDA twin (CUDA's erf and exp) already does.  u has room for n + 1 values (the pair's last). */
#if defined(HAVE_LIBMVEC_ERF) && defined(__x86_64__)
typedef double v2d_t __attribute__((vector_size(16)));
extern v2d_t _ZGVbN2v_erf(v2d_t);
extern v2d_t _ZGVbN2v_exp(v2d_t);
#endif

static void edge_functions(double *u, int n, double *E, double *phi)
{
	int k = 0;
#if defined(HAVE_LIBMVEC_ERF) && defined(__x86_64__)
	if (n % 2)
		u[n] = 0.0; /* the last pair's second lane */
	for (; k < n; k += 2) {
		v2d_t v = { u[k], u[k + 1] };
		v2d_t e = _ZGVbN2v_erf(v / DESI_SQRT2);
		v2d_t p = _ZGVbN2v_exp(-0.5 * (v * v)) / DESI_SQRT_2PI;
		memcpy(E + k, &e, sizeof e);
		memcpy(phi + k, &p, sizeof p);
	}
#endif
	for (; k < n; k++) {
		E[k] = erf(u[k] / DESI_SQRT2);
		phi[k] = exp(-0.5 * (u[k] * u[k])) / DESI_SQRT_2PI;
	}
}

/* Pixel-integrated Gauss-Hermite terms along one axis: g[m][p] for
 * m = 0..deg, p = 0..n-1, centre c, width sigma. */
static void pgh(double c, double sigma, int n, int deg, double *g)
{
	double t = c + 0.5, d = t - floor(t) - 0.5; /* (c + 0.5) mod 1 - 0.5, exact */
	double E[MAXN + 2], H[MAXD][MAXN + 1], U[MAXN + 2], PHI[MAXN + 2];

	for (int k = 0; k <= n; k++)
		U[k] = ((double)(k - n / 2) - 0.5 - d) / sigma;
	edge_functions(U, n + 1, E, PHI);
	for (int k = 0; k <= n; k++) {
		double u = U[k];
		double phi = PHI[k];
		double h = 1.0, hm1 = 0.0; /* He_m, He_{m-1} */
		/* He_0..He_{deg-1}(u) phi(u); He_{m+1} = u He_m - m He_{m-1}
		 * (exactly u for m = 0) */
		for (int m = 0; m < deg; m++) {
			double next = h * u - hm1 * (double)m;
			H[m][k] = h * phi;
			hm1 = h;
			h = next;
		}
	}
	for (int p = 0; p < n; p++)
		g[p] = 0.5 * (E[p + 1] - E[p]);
	for (int m = 1; m <= deg; m++)
		for (int p = 0; p < n; p++)
			g[m * n + p] = H[m - 1][p] - H[m - 1][p + 1];
}

/* The contraction of the spots, compiled for the build's target and for
 * AVX2 (src/base/cpuisa.h): spots_simd.h.  Every variant gives the same
 * bits. */
#define PS_W SP_BASELINE_W
#define PS_FN(name) name##_base
#include "spots_simd.h"
#if SP_HAVE_AVX2_VARIANT
SP_AVX2_BEGIN
#define PS_W 4
#define PS_FN(name) name##_avx2
#include "spots_simd.h"
SP_AVX2_END
#endif

typedef void (*spots_fn)(const double *, size_t, desi_spot_shape_t, double *, int32_t *,
			 int32_t *);
static const spots_fn spots_variant[SP_ISA_COUNT] = {
	[SP_ISA_BASELINE] = spots_base,
#if SP_HAVE_AVX2_VARIANT
	[SP_ISA_AVX2] = spots_avx2,
#endif
};

void desi_spots_cpu_isa(int isa, const double *params, size_t n, desi_spot_shape_t shape,
			double *spots, int32_t *xc, int32_t *yc)
{
	if (shape.hsizex < 0 || shape.hsizex > DESI_PSF_MAX_HSIZE || shape.hsizey < 0 ||
	    shape.hsizey > DESI_PSF_MAX_HSIZE || shape.ghdegx < 0 ||
	    shape.ghdegx > DESI_PSF_MAX_GHDEG || shape.ghdegy < 0 ||
	    shape.ghdegy > DESI_PSF_MAX_GHDEG) {
		fprintf(stderr, "%s: impossible spot shape %d %d %d %d\n", __func__,
			shape.hsizex, shape.hsizey, shape.ghdegx, shape.ghdegy);
		abort();
	}
	if (isa < 0 || isa >= SP_ISA_COUNT || !sp_isa_supported(isa) || spots_variant[isa] == NULL)
		isa = SP_ISA_BASELINE;
	spots_variant[isa](params, n, shape, spots, xc, yc);
}

void desi_spots_cpu(const double *params, size_t n, desi_spot_shape_t shape, double *spots,
		    int32_t *xc, int32_t *yc)
{
	desi_spots_cpu_isa(sp_cpu_isa(), params, n, shape, spots, xc, yc);
}
