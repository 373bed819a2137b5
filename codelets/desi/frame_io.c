/* DESI frame I/O with CFITSIO: the pre-processed CCD image in (the frame
 * out: frame_write.c). */
#define _POSIX_C_SOURCE 200809L

#include "frame_io.h"
#include "fsutil.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fitsio.h>

#include "fitskey.h"

/*
 * DESIGN.  HDUs are found by EXTNAME (fits_movnam_hdu also finds a
 * tile-compressed image, which CFITSIO then decompresses transparently).
 * Files are opened and created with the "diskfile" calls, which do not
 * parse CFITSIO's extended file-name syntax: a path with '[' or '!' is
 * just a path.  Every CFITSIO failure is wrapped as "PATH: what: CFITSIO's
 * status text (its oldest stacked message)", and the stack is cleared.
 *
 * Masking.  A pixel is unusable (ivar = 0) when MASK has any bit set other
 * than BADREADNOISE.  desispec.maskbits.ccdmask: BAD 1<<0, HOT 1<<1,
 * DEAD 1<<2, SATURATED 1<<3, COSMIC 1<<4, PIXFLATZERO 1<<5, PIXFLATLOW 1<<6,
 * HIGHVAR 1<<7, BADREADNOISE 1<<8, BADAMP 1<<9 (the reader keeps any other
 * bit as "bad" as well, which is desispec's "any set bit" rule).  A
 * non-finite IMAGE or IVAR value, or a negative IVAR, also gives ivar = 0;
 * such a pixel is counted in *nbad and a non-finite IMAGE value is replaced
 * by 0, so that the products with ivar = 0 downstream stay 0, not NaN.
 */

#define MASK_BADREADNOISE (1u << 8)

/* Moves to the 2-D image HDU named name and returns its shape. */
static int find_image(fitsfile *f, const char *path, const char *name, int *ny, int *nx,
		      int *bitpix, sp_err_t *err)
{
	int status = 0, naxis = 0;
	long naxes[3] = { 0, 0, 0 };
	char what[64];

	if (fits_movnam_hdu(f, IMAGE_HDU, (char *)name, 0, &status) != 0) {
		fits_clear_errmsg();
		return sp_seterr(err, SP_EFORMAT, "%s: no image HDU with EXTNAME '%s'", path,
				 name);
	}
	snprintf(what, sizeof what, "cannot read the header of HDU %s", name);
	if (fits_get_img_param(f, 3, bitpix, &naxis, naxes, &status) != 0)
		return desi_fits_fail(err, SP_EFORMAT, path, what, status);
	if (naxis != 2 || naxes[0] < 1 || naxes[1] < 1 || naxes[0] > INT_MAX ||
	    naxes[1] > INT_MAX)
		return sp_seterr(err, SP_ESHAPE,
				 "%s: HDU %s is not a non-empty 2-D image (NAXIS = %d)", path,
				 name, naxis);
	*nx = (int)naxes[0];
	*ny = (int)naxes[1];
	return 0;
}

/* Checks that IMAGE, IVAR and MASK exist and have one shape. */
static int check_hdus(fitsfile *f, const char *path, int *ny, int *nx, sp_err_t *err)
{
	static const char *const names[3] = { "IMAGE", "IVAR", "MASK" };
	int y, x, bitpix, rc;

	for (int h = 0; h < 3; h++) {
		rc = find_image(f, path, names[h], &y, &x, &bitpix, err);
		if (rc != 0)
			return rc;
		if (h == 2 && bitpix < 0)
			return sp_seterr(err, SP_ESHAPE,
					 "%s: MASK is a floating-point image (BITPIX %d); "
					 "expected integer bits", path, bitpix);
		if (h == 0) {
			*ny = y;
			*nx = x;
		} else if (y != *ny || x != *nx) {
			return sp_seterr(err, SP_ESHAPE,
					 "%s: HDU %s is %d x %d but IMAGE is %d x %d (rows x "
					 "columns)", path, names[h], y, x, *ny, *nx);
		}
	}
	return 0;
}

/* DESI fibre numbers: 10 petals of 500. */
#define DESI_NFIBER_MAX 5000

/*
 * A FIBERMAP the image has must be sound; one it lacks is fine.  desispec
 * (scripts/extract.py) reads the image's FIBERMAP if there is one (an
 * absent one gives fibermap = None and the frame goes out without it),
 * slices rows [specmin, specmin + nspec) and takes fibermap['FIBER'] as the
 * frame's fibres: a FIBERMAP it cannot parse, without a FIBER column or
 * with too few rows raises there, and the extraction of that frame fails.
 * We do the same, as an item failure, at the image's first read (before
 * any extraction work), and go one step further on values: a FIBER outside
 * DESI's 0..4999 is garbage that desispec would copy into the frame, and
 * downstream steps (sky, flux calibration) would then match the wrong
 * targets; failing is the only outcome that cannot be mistaken for a good
 * frame.  The row count against specmin + nspec is checked at writing,
 * where those are known (fibermap_rows()).
 */
static int check_fibermap(fitsfile *f, const char *path, sp_err_t *err)
{
	int status = 0, hdutype = 0, col = 0, typecode = 0, anynul = 0;
	long nrows = 0, repeat = 0, width = 0;

	if (fits_movnam_hdu(f, ANY_HDU, "FIBERMAP", 0, &status) != 0) {
		if (status == BAD_HDU_NUM) {
			fits_clear_errmsg();
			return 0;
		}
		return desi_fits_fail(err, SP_EFORMAT, path, "corrupt FIBERMAP", status);
	}
	if (fits_get_hdu_type(f, &hdutype, &status) != 0 || hdutype != BINARY_TBL) {
		fits_clear_errmsg();
		return sp_seterr(err, SP_EFORMAT, "%s: corrupt FIBERMAP: not a binary table", path);
	}
	if (fits_get_num_rows(f, &nrows, &status) != 0)
		return desi_fits_fail(err, SP_EFORMAT, path, "corrupt FIBERMAP", status);
	if (nrows < 1)
		return sp_seterr(err, SP_EFORMAT, "%s: corrupt FIBERMAP: no rows", path);
	if (fits_get_colnum(f, CASESEN, "FIBER", &col, &status) != 0) {
		fits_clear_errmsg();
		return sp_seterr(err, SP_EFORMAT, "%s: corrupt FIBERMAP: no FIBER column", path);
	}
	if (fits_get_coltype(f, col, &typecode, &repeat, &width, &status) != 0)
		return desi_fits_fail(err, SP_EFORMAT, path, "corrupt FIBERMAP, column FIBER", status);
	if ((typecode != TSHORT && typecode != TINT && typecode != TLONG &&
	     typecode != TINT32BIT && typecode != TLONGLONG) || repeat != 1)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: corrupt FIBERMAP: column FIBER is not one integer per row",
				 path);
	long *fib = malloc((size_t)nrows * sizeof *fib);
	if (fib == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: FIBERMAP: out of memory for %ld rows", path,
				 nrows);
	int rc = 0;
	if (fits_read_col(f, TLONG, col, 1, 1, (LONGLONG)nrows, NULL, fib, &anynul, &status) != 0)
		rc = desi_fits_fail(err, SP_EFORMAT, path, "corrupt FIBERMAP, column FIBER", status);
	for (long r = 0; r < nrows && rc == 0; r++)
		if (fib[r] < 0 || fib[r] >= DESI_NFIBER_MAX)
			rc = sp_seterr(err, SP_EFORMAT,
				       "%s: corrupt FIBERMAP: FIBER of row %ld is %ld, not a DESI "
				       "fibre (0..%d)", path, r, fib[r], DESI_NFIBER_MAX - 1);
	free(fib);
	return rc;
}

int desi_fibermap_check(const char *path, sp_err_t *err)
{
	fitsfile *f;
	int status = 0, rc = desi_fits_open(path, &f, err);

	if (rc != 0)
		return rc;
	if (fits_movnam_hdu(f, ANY_HDU, "FIBERMAP", 0, &status) == BAD_HDU_NUM) {
		fits_clear_errmsg();
		rc = sp_seterr(err, SP_EFORMAT, "%s: no FIBERMAP HDU (not a fibermap file?)", path);
	} else {
		rc = check_fibermap(f, path, err);
	}
	desi_fits_close(&f);
	return rc;
}

int desi_image_size(const char *path, int *ny, int *nx, sp_err_t *err)
{
	fitsfile *f;
	int rc = desi_fits_open(path, &f, err);

	if (rc == 0)
		rc = check_hdus(f, path, ny, nx, err);
	if (rc == 0)
		rc = check_fibermap(f, path, err);
	desi_fits_close(&f);
	return rc;
}

/* Reads one whole 2-D HDU as float into buf. */
static int read_floats(fitsfile *f, const char *path, const char *name, size_t n, float *buf,
		       sp_err_t *err)
{
	int status = 0, anynul = 0, y, x, bitpix;
	long fpixel[2] = { 1, 1 };
	char what[64];
	int rc = find_image(f, path, name, &y, &x, &bitpix, err);

	if (rc != 0)
		return rc;
	snprintf(what, sizeof what, "cannot read HDU %s (truncated or corrupt?)", name);
	if (fits_read_pix(f, TFLOAT, fpixel, (LONGLONG)n, NULL, buf, &anynul, &status) != 0)
		return desi_fits_fail(err, SP_EFORMAT, path, what, status);
	return 0;
}

/* CAMERA and RDNOISE from the IMAGE HDU, else the primary HDU.  Without
 * RDNOISE, the mean of desispec's per-amplifier RDNOISEA..D if any.  The
 * values are parsed by fitskey.h, not CFITSIO: a malformed one is an error
 * naming the keyword. */
static int read_keys(fitsfile *f, const char *path, desi_image_t *img, sp_err_t *err)
{
	static const double rd_max = 1e6; /* electrons; DESI's are ~3 */
	const double none = -1;
	int hdus[2], n = 0, status = 0, cur = 0, rc;
	char cam[FLEN_VALUE];

	fits_get_hdu_num(f, &cur);
	hdus[n++] = cur;
	if (cur != 1)
		hdus[n++] = 1;
	img->camera[0] = '\0';
	img->rdnoise = 0;
	int have_cam = 0, have_rd = 0;
	for (int h = 0; h < n; h++) {
		const char *hname = hdus[h] == 1 ? "primary" : "IMAGE";
		double rd;
		status = 0;
		if (fits_movabs_hdu(f, hdus[h], NULL, &status) != 0)
			return desi_fits_fail(err, SP_EFORMAT, path, "cannot read the header", status);
		if (!have_cam) {
			rc = desi_fitskey_str(f, path, hname, "CAMERA", cam, sizeof cam, "", err);
			if (rc != 0)
				return rc;
			/* quotes too: specex writes CAMERA = '''r0      ''' */
			char *b = cam, *e = cam + strlen(cam);
			while (*b == '\'' || *b == ' ')
				b++;
			while (e > b && (e[-1] == '\'' || e[-1] == ' '))
				e--;
			size_t len = (size_t)(e - b);
			if (len > sizeof img->camera - 1)
				len = sizeof img->camera - 1;
			memcpy(img->camera, b, len);
			img->camera[len] = '\0';
			have_cam = len > 0;
		}
		if (!have_rd) {
			rc = desi_fitskey_double(f, path, hname, "RDNOISE", 0, rd_max, &none, &rd, err);
			if (rc != 0)
				return rc;
			if (rd >= 0) {
				img->rdnoise = rd;
				have_rd = 1;
			}
		}
		if (!have_rd) {
			double s = 0;
			int k = 0;
			char key[16];
			for (char a = 'A'; a <= 'D'; a++) {
				snprintf(key, sizeof key, "RDNOISE%c", a);
				rc = desi_fitskey_double(f, path, hname, key, 0, rd_max, &none, &rd, err);
				if (rc != 0)
					return rc;
				if (rd >= 0) {
					s += rd;
					k++;
				}
			}
			if (k > 0) {
				img->rdnoise = s / k;
				have_rd = 1;
			}
		}
	}
	fits_clear_errmsg();
	return 0;
}

/* The first of keys[] present, looked for in the IMAGE HDU then the
 * primary one; *found 0 if none is. */
static int first_key(fitsfile *f, const char *path, int image_hdu, const char *const *keys,
		     double lo, double hi, double *v, int *found, sp_err_t *err)
{
	const double none = -1e300;
	int hdus[2] = { image_hdu, 1 };

	*found = 0;
	for (int h = 0; h < (image_hdu == 1 ? 1 : 2); h++) {
		int status = 0;
		if (fits_movabs_hdu(f, hdus[h], NULL, &status) != 0)
			return desi_fits_fail(err, SP_EFORMAT, path, "cannot read the header", status);
		for (int k = 0; keys[k] != NULL; k++) {
			int rc = desi_fitskey_double(f, path, hdus[h] == 1 ? "primary" : "IMAGE",
						     keys[k], lo, hi, &none, v, err);
			if (rc != 0)
				return rc;
			if (*v != none) {
				*found = 1;
				return 0;
			}
		}
	}
	return 0;
}

int desi_image_sky(const char *path, double *ra, double *dec, double *mjd, sp_err_t *err)
{
	static const char *const ra_keys[] = { "TARGTRA", "SKYRA", "TELRA", "RA", NULL };
	static const char *const dec_keys[] = { "TARGTDEC", "SKYDEC", "TELDEC", "DEC", NULL };
	static const char *const mjd_keys[] = { "MJD-OBS", "MJD", NULL };
	fitsfile *f;
	int ny, nx, bitpix, hdu = 1, found = 0;
	int rc = desi_fits_open(path, &f, err);

	if (rc == 0)
		rc = find_image(f, path, "IMAGE", &ny, &nx, &bitpix, err);
	if (rc == 0)
		fits_get_hdu_num(f, &hdu);
	if (rc == 0 && (rc = first_key(f, path, hdu, ra_keys, -360, 360, ra, &found, err)) == 0 &&
	    !found)
		rc = sp_seterr(err, SP_EFORMAT, "%s: no TARGTRA, SKYRA, TELRA nor RA in the header "
			       "(needed by barycentric_correction)", path);
	if (rc == 0 &&
	    (rc = first_key(f, path, hdu, dec_keys, -90, 90, dec, &found, err)) == 0 && !found)
		rc = sp_seterr(err, SP_EFORMAT, "%s: no TARGTDEC, SKYDEC, TELDEC nor DEC in the "
			       "header (needed by barycentric_correction)", path);
	/* ERFA's leap-second table starts in 1960 (MJD 36934). */
	if (rc == 0 &&
	    (rc = first_key(f, path, hdu, mjd_keys, 36934, 1e6, mjd, &found, err)) == 0 && !found)
		rc = sp_seterr(err, SP_EFORMAT, "%s: no MJD-OBS nor MJD in the header (needed by "
			       "barycentric_correction)", path);
	desi_fits_close(&f);
	return rc;
}

int desi_image_read(const char *path, desi_image_t *img, size_t *nbad, sp_err_t *err)
{
	fitsfile *f;
	int ny, nx, rc, status = 0, anynul = 0;
	int *mbuf = NULL;
	size_t bad = 0;

	if (nbad != NULL)
		*nbad = 0;
	if (img == NULL || img->pix == NULL || img->ivar == NULL)
		return sp_seterr(err, SP_EINVAL, "%s: %s: no buffers to read into", path,
				 __func__);
	rc = desi_fits_open(path, &f, err);
	if (rc != 0)
		return rc;
	rc = check_hdus(f, path, &ny, &nx, err);
	if (rc != 0)
		goto out;
	if (ny != img->ny || nx != img->nx) {
		rc = sp_seterr(err, SP_ESHAPE,
			       "%s: the image is %d x %d but the buffers are for %d x %d", path,
			       ny, nx, img->ny, img->nx);
		goto out;
	}
	size_t n = (size_t)ny * (size_t)nx;
	rc = read_floats(f, path, "IMAGE", n, img->pix, err);
	if (rc == 0)
		rc = read_keys(f, path, img, err);
	if (rc == 0)
		rc = read_floats(f, path, "IVAR", n, img->ivar, err);
	if (rc != 0)
		goto out;

	/* MASK by blocks of rows (it is usually compressed by rows), as int
	 * (CFITSIO decompresses into int but not into long long; a uint32 mask
	 * with bit 31 set would overflow: no desispec bit is that high). */
	int bh = 64, y, x, bitpix;
	rc = find_image(f, path, "MASK", &y, &x, &bitpix, err);
	if (rc != 0)
		goto out;
	mbuf = malloc((size_t)bh * (size_t)nx * sizeof *mbuf);
	if (mbuf == NULL) {
		rc = sp_seterr(err, SP_ENOMEM, "%s: out of memory for MASK rows", path);
		goto out;
	}
	for (int r0 = 0; r0 < ny; r0 += bh) {
		int nr = ny - r0 < bh ? ny - r0 : bh;
		long fpixel[2] = { 1, r0 + 1 };
		size_t cnt = (size_t)nr * (size_t)nx, off = (size_t)r0 * (size_t)nx;
		if (fits_read_pix(f, TINT, fpixel, (LONGLONG)cnt, NULL, mbuf, &anynul,
				  &status) != 0) {
			rc = desi_fits_fail(err, SP_EFORMAT, path,
				       "cannot read HDU MASK (truncated or corrupt?)", status);
			goto out;
		}
		for (size_t e = 0; e < cnt; e++) {
			float *p = img->pix + off + e, *iv = img->ivar + off + e;
			if (((unsigned)mbuf[e] & ~MASK_BADREADNOISE) != 0)
				*iv = 0;
			if (!isfinite(*p) || !isfinite(*iv) || *iv < 0) {
				bad++;
				if (!isfinite(*p))
					*p = 0;
				*iv = 0;
			}
		}
	}
	if (nbad != NULL)
		*nbad = bad;
	/* Nothing to extract from: an all-NaN (or all-masked) image is a
	 * failed item, not a frame of zeros with ivar 0 and exit 0. */
	size_t usable = 0;
	for (size_t e = 0; e < n && usable == 0; e++)
		usable += img->ivar[e] > 0;
	if (usable == 0)
		rc = sp_seterr(err, SP_ENONFINITE,
			       "%s: no usable pixel: all %zu are masked, non-finite or have IVAR "
			       "<= 0 (%zu non-finite or negative)", path, n, bad);
out:
	free(mbuf);
	desi_fits_close(&f);
	return rc;
}
