/* DESI frame I/O with CFITSIO: the pre-processed CCD image in, the extracted frame out. */
#define _POSIX_C_SOURCE 200809L

#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "(unknown version)" /* built outside the build system: tools/fuzz */
#endif

#include "frame_io.h"
#include "fsutil.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
 *
 * Writing.  The frame goes to a temporary of an output set (src/io/fsutil.h)
 * in the same folder, with a checksum in every HDU, and is renamed over PATH
 * (with the item's other outputs) only when CFITSIO has closed it without
 * error; any failure removes the temporary file.
 */

#define MASK_BADREADNOISE (1u << 8)

/* Wraps a CFITSIO status into err with the path and what was being done. */
/* errno of the system call that failed a CFITSIO write: CFITSIO keeps only
 * its own status, so a full disk or a file-size limit read "error writing
 * to FITS file" alone.  Cleared before a file is written, read when a write
 * status comes back. */
static const char *write_errno_text(int status, int errnum)
{
	if (status != WRITE_ERROR && status != FILE_NOT_CLOSED && status != FILE_NOT_CREATED)
		return NULL;
	return errnum == ENOSPC || errnum == EFBIG || errnum == EDQUOT || errnum == EIO ||
			       errnum == EROFS || errnum == EACCES
		       ? strerror(errnum)
		       : NULL;
}

static int fits_fail(sp_err_t *err, int code, const char *path, const char *what, int status)
{
	char txt[FLEN_STATUS] = "", msg[FLEN_ERRMSG] = "";
	const char *sys = write_errno_text(status, errno);
	if (sys != NULL)
		return sp_seterr(err, code, "%s: %s: %s", path, what, sys);

	fits_get_errstatus(status, txt);
	fits_read_errmsg(msg);
	fits_clear_errmsg();
	for (size_t n = strlen(msg); n > 0 && (msg[n - 1] == ' ' || msg[n - 1] == '\n'); n--)
		msg[n - 1] = '\0';
	if (*msg != '\0' && strcmp(msg, txt) != 0)
		return sp_seterr(err, code, "%s: %s: %s (%s)", path, what, txt, msg);
	return sp_seterr(err, code, "%s: %s: %s", path, what, txt);
}

/* Opens path read-only as a plain disk file (fitskey.h: no extended
 * file-name syntax, FIFOs and devices refused without blocking, every HDU
 * header parsed, truncation detected). */
static int open_input(const char *path, fitsfile **f, sp_err_t *err)
{
	return desi_fits_open(path, f, err);
}

static void close_quietly(fitsfile *f)
{
	desi_fits_close(&f);
}

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
		return fits_fail(err, SP_EFORMAT, path, what, status);
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
		return fits_fail(err, SP_EFORMAT, path, "corrupt FIBERMAP", status);
	}
	if (fits_get_hdu_type(f, &hdutype, &status) != 0 || hdutype != BINARY_TBL) {
		fits_clear_errmsg();
		return sp_seterr(err, SP_EFORMAT, "%s: corrupt FIBERMAP: not a binary table", path);
	}
	if (fits_get_num_rows(f, &nrows, &status) != 0)
		return fits_fail(err, SP_EFORMAT, path, "corrupt FIBERMAP", status);
	if (nrows < 1)
		return sp_seterr(err, SP_EFORMAT, "%s: corrupt FIBERMAP: no rows", path);
	if (fits_get_colnum(f, CASESEN, "FIBER", &col, &status) != 0) {
		fits_clear_errmsg();
		return sp_seterr(err, SP_EFORMAT, "%s: corrupt FIBERMAP: no FIBER column", path);
	}
	if (fits_get_coltype(f, col, &typecode, &repeat, &width, &status) != 0)
		return fits_fail(err, SP_EFORMAT, path, "corrupt FIBERMAP, column FIBER", status);
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
		rc = fits_fail(err, SP_EFORMAT, path, "corrupt FIBERMAP, column FIBER", status);
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
	int status = 0, rc = open_input(path, &f, err);

	if (rc != 0)
		return rc;
	if (fits_movnam_hdu(f, ANY_HDU, "FIBERMAP", 0, &status) == BAD_HDU_NUM) {
		fits_clear_errmsg();
		rc = sp_seterr(err, SP_EFORMAT, "%s: no FIBERMAP HDU (not a fibermap file?)", path);
	} else {
		rc = check_fibermap(f, path, err);
	}
	close_quietly(f);
	return rc;
}

int desi_image_size(const char *path, int *ny, int *nx, sp_err_t *err)
{
	fitsfile *f;
	int rc = open_input(path, &f, err);

	if (rc == 0)
		rc = check_hdus(f, path, ny, nx, err);
	if (rc == 0)
		rc = check_fibermap(f, path, err);
	close_quietly(f);
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
		return fits_fail(err, SP_EFORMAT, path, what, status);
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
			return fits_fail(err, SP_EFORMAT, path, "cannot read the header", status);
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
			return fits_fail(err, SP_EFORMAT, path, "cannot read the header", status);
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
	int rc = open_input(path, &f, err);

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
	close_quietly(f);
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
	rc = open_input(path, &f, err);
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
			rc = fits_fail(err, SP_EFORMAT, path,
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
	close_quietly(f);
	return rc;
}

/* Header cards of the input worth carrying over: not structural, not
 * compression, scaling, HDU identity or checksums, and not CFITSIO's two
 * standard COMMENT lines (the new primary HDU has its own). */
static int keep_card(const char *card)
{
	if (fits_get_keyclass((char *)card) < TYP_WCS_KEY)
		return 0;
	if (strncmp(card, "COMMENT", 7) == 0 &&
	    (strstr(card, "FITS (Flexible Image Transport System)") != NULL ||
	     strstr(card, "and Astrophysics', volume 376") != NULL))
		return 0;
	return 1;
}

/* Copies the kept cards of the input's IMAGE HDU into out's current HDU. */
static int copy_header(fitsfile *in, fitsfile *out, int *status)
{
	int nkeys = 0, more = 0;
	char card[FLEN_CARD];

	if (fits_get_hdrspace(in, &nkeys, &more, status) != 0)
		return *status;
	for (int k = 1; k <= nkeys; k++) {
		if (fits_read_record(in, k, card, status) != 0)
			return *status;
		if (keep_card(card) && fits_write_record(out, card, status) != 0)
			return *status;
	}
	return 0;
}

/*
 * fits_write_chksum() without the time.  CFITSIO's own puts the write time
 * in the comments ("HDU checksum updated 2024-05-01T12:00:00": date-ok), so
 * two runs a second apart give different bytes, and a re-run (after a kill -9, a
 * --skip-existing that recomputes) never reproduces a file.  Here the
 * comments are fixed, and the values are computed as CFITSIO computes them
 * (fits_update_chksum's steps): fits_verify_chksum() still passes.
 * fits_write_chksum() is still called first, for what only it can do with
 * the public API: close the header and write the data unit's fill bytes,
 * which the data checksum covers; its dated comments are then replaced and
 * the CHECKSUM recomputed over the final header.  No other card of ours
 * carries a time (no DATE card is written; an input's are its own).
 */
static int write_chksum(fitsfile *out, int *status)
{
	unsigned long datasum = 0, hdusum = 0;
	char ascii[17];

	if (*status != 0)
		return *status;
	if (fits_write_chksum(out, status) != 0 ||
	    fits_modify_comment(out, "DATASUM", "data unit checksum", status) != 0 ||
	    /* the value is zeroed while the HDU is summed, as CFITSIO does:
	     * the encoded complement then makes the whole HDU sum to -0 */
	    fits_modify_key_str(out, "CHECKSUM", "0000000000000000", "HDU checksum", status) != 0 ||
	    fits_get_chksum(out, &datasum, &hdusum, status) != 0)
		return *status;
	fits_encode_chksum(hdusum, 1, ascii);
	return fits_modify_key_str(out, "CHECKSUM", ascii, "&", status);
}

/*
 * The data checksum from the data in memory.  fits_write_chksum() and
 * fits_get_chksum() each read the HDU's data back from the file to sum it:
 * three passes over the frame's 60 MB (its two write_chksum() calls, then
 * fits_close_file()'s flush), which took 60 % of the write.  The FITS
 * standard's checksum (appendix J) is a 32-bit ones' complement sum of the
 * data unit's big-endian 32-bit words, fill bytes (zeros) included: a
 * float's word is its bit pattern, a double's two words are its high and
 * low halves, and an unsigned 32-bit integer is stored as a signed one with
 * BZERO 2^31, its bit pattern with the top bit flipped.  So the sum is
 * taken from the arrays as they are written.
 */
typedef struct fits_sum {
	uint64_t hi, lo; /* sums of the words' high and low 16 bits */
} fits_sum_t;

static void sum_words(fits_sum_t *fs, const uint32_t *w, size_t n, uint32_t flip)
{
	uint64_t hi = 0, lo = 0;
	for (size_t i = 0; i < n; i++) {
		const uint32_t v = w[i] ^ flip;
		hi += v >> 16;
		lo += v & 0xffffu;
	}
	fs->hi += hi;
	fs->lo += lo;
}

/* The 32-bit ones' complement value: the carries out of each half folded
 * into the other, as the standard's accumulation does. */
static unsigned long sum_value(fits_sum_t fs)
{
	while ((fs.hi >> 16) != 0 || (fs.lo >> 16) != 0) {
		const uint64_t hc = fs.hi >> 16, lc = fs.lo >> 16;
		fs.hi = (fs.hi & 0xffffu) + lc;
		fs.lo = (fs.lo & 0xffffu) + hc;
	}
	return (unsigned long)((fs.hi << 16) | fs.lo);
}

/* Ones' complement sum of two 32-bit checksums. */
static unsigned long sum_add(unsigned long a, unsigned long b)
{
	uint64_t s = (uint64_t)a + (uint64_t)b;
	while (s >> 32)
		s = (s & 0xffffffffu) + (s >> 32);
	return (unsigned long)s;
}

/* n values of FITS type `type` (TFLOAT, TDOUBLE or TUINT, written as
 * FLOAT_IMG, DOUBLE_IMG and ULONG_IMG) into fs. */
static void sum_values(fits_sum_t *fs, int type, const void *data, size_t n)
{
	if (type == TDOUBLE)
		sum_words(fs, data, 2 * n, 0); /* a word's halves: the order does not matter */
	else
		sum_words(fs, data, n, type == TUINT ? 0x80000000u : 0);
}

/* write_chksum() given the data unit's checksum: the header alone is read
 * back (a few 2880-byte records), with CFITSIO's ffcsum(). */
static int write_chksum_known(fitsfile *out, unsigned long datasum, int *status)
{
	LONGLONG hs = 0, ds = 0, de = 0;
	unsigned long hsum = 0;
	char ascii[17], dval[24];

	if (*status != 0)
		return *status;
	snprintf(dval, sizeof dval, "%lu", datasum);
	/* the value is zeroed while the HDU is summed, as CFITSIO does: the
	 * encoded complement then makes the whole HDU sum to -0 */
	if (fits_update_key_str(out, "CHECKSUM", "0000000000000000", "HDU checksum", status) != 0 ||
	    fits_update_key_str(out, "DATASUM", dval, "data unit checksum", status) != 0 ||
	    fits_set_hdustruc(out, status) != 0 ||
	    fits_get_hduaddrll(out, &hs, &ds, &de, status) != 0 ||
	    ffmbyt(out, hs, 0 /* fitsio2.h: REPORT_EOF */, status) != 0 ||
	    ffcsum(out, (long)((ds - hs) / 2880), &hsum, status) != 0)
		return *status;
	fits_encode_chksum(sum_add(hsum, datasum), 1, ascii);
	return fits_modify_key_str(out, "CHECKSUM", ascii, "&", status);
}

/* A new image HDU with EXTNAME (and BUNIT if given), holding data. */
/* copy_header() from the input's IMAGE HDU (its primary HDU when it has
 * none) into out's current HDU. */
static int copy_image_header(fitsfile *in, fitsfile *out, int *status)
{
	if (fits_movnam_hdu(in, IMAGE_HDU, "IMAGE", 0, status) != 0) {
		*status = 0;
		fits_clear_errmsg();
		fits_movabs_hdu(in, 1, NULL, status);
	}
	return *status != 0 ? *status : copy_header(in, out, status);
}

/* An image HDU from data; with stride > 0, data are floats whose slices
 * along the last axis (the spectra) start stride floats apart, written one
 * by one (CFITSIO converts through its own small buffer: no copy of the
 * whole array); *datasum (if not NULL) gets the data unit's checksum. */
static int put_image(fitsfile *out, int bitpix, int type, int naxis, const long *naxes,
		     const char *extname, const char *bunit, const void *data, size_t stride,
		     unsigned long *datasum, int *status)
{
	long fpixel[3] = { 1, 1, 1 };
	LONGLONG n = 1;
	fits_sum_t fs = { 0, 0 };
	const size_t esize = type == TDOUBLE ? 8 : 4;

	for (int d = 0; d < naxis - 1; d++)
		n *= naxes[d];
	if (fits_create_img(out, bitpix, naxis, (long *)naxes, status) != 0 ||
	    fits_update_key(out, TSTRING, "EXTNAME", (char *)extname, NULL, status) != 0)
		return *status;
	if (bunit != NULL &&
	    fits_update_key(out, TSTRING, "BUNIT", (char *)bunit, NULL, status) != 0)
		return *status;
	if (stride == 0) {
		n *= naxes[naxis - 1];
		if (n > 0) {
			fits_write_pix(out, type, fpixel, n, (void *)data, status);
			sum_values(&fs, type, data, (size_t)n);
		}
	}
	for (long s = 0; stride > 0 && s < naxes[naxis - 1] && n > 0 && *status == 0; s++) {
		const char *slice = (const char *)data + (size_t)s * stride * esize;
		fpixel[naxis - 1] = s + 1;
		fits_write_pix(out, type, fpixel, n, (void *)slice, status);
		sum_values(&fs, type, slice, (size_t)n);
	}
	if (datasum != NULL)
		*datasum = sum_value(fs);
	return *status;
}

/* Rows in the FIBERMAP of `in` (0 and no error if it has none and is the
 * image, an error if it is a fibermap file), checked to cover the frame's
 * spectra. */
static int fibermap_rows(fitsfile *in, const char *image_path, int required,
			 const desi_frame_t *fr, long *nrows, sp_err_t *err)
{
	int status = 0;

	*nrows = 0;
	if (fits_movnam_hdu(in, BINARY_TBL, "FIBERMAP", 0, &status) != 0) {
		fits_clear_errmsg();
		return required ? sp_seterr(err, SP_EFORMAT, "%s: no FIBERMAP HDU", image_path) : 0;
	}
	if (fits_get_num_rows(in, nrows, &status) != 0)
		return fits_fail(err, SP_EFORMAT, image_path, "cannot read FIBERMAP", status);
	if (*nrows < (long)fr->specmin + fr->nspec)
		return sp_seterr(err, SP_ESHAPE,
				 "%s: FIBERMAP has %ld rows, too few for spectra %d .. %d",
				 image_path, *nrows, fr->specmin, fr->specmin + fr->nspec - 1);
	return 0;
}

/* Appends rows [specmin, specmin + nspec) of the input's FIBERMAP (which
 * has nrows rows) to out. */
static int put_fibermap(fitsfile *in, fitsfile *out, int specmin, int nspec, long nrows,
			int *status)
{
	if (fits_movnam_hdu(in, BINARY_TBL, "FIBERMAP", 0, status) != 0 ||
	    fits_copy_hdu(in, out, 0, status) != 0)
		return *status;
	if (nrows > (long)specmin + nspec &&
	    fits_delete_rows(out, (LONGLONG)specmin + nspec + 1,
			     (LONGLONG)(nrows - specmin - nspec), status) != 0)
		return *status;
	if (specmin > 0 && fits_delete_rows(out, 1, specmin, status) != 0)
		return *status;
	return write_chksum(out, status);
}

/* The k-th smallest of v[0..n-1] (k < n; v is reordered so that v[0..k)
 * <= v[k] <= v[k+1..n)): Hoare's selection with the median of three as
 * the pivot, O(n) on average where a sort was O(n log n) (the frame's
 * 1000 medians of ~2300 values took 43 ms of its write sorted).  v holds
 * no NaN. */
static double select_kth(double *v, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;
	while (hi > lo) {
		size_t mid = lo + (hi - lo) / 2;
		double t;
		/* v[lo] <= v[mid] <= v[hi] */
		if (v[mid] < v[lo])
			t = v[mid], v[mid] = v[lo], v[lo] = t;
		if (v[hi] < v[lo])
			t = v[hi], v[hi] = v[lo], v[lo] = t;
		if (v[hi] < v[mid])
			t = v[hi], v[hi] = v[mid], v[mid] = t;
		const double pivot = v[mid];
		size_t i = lo, j = hi;
		while (i <= j) {
			while (v[i] < pivot)
				i++;
			while (pivot < v[j])
				j--;
			if (i <= j) {
				t = v[i], v[i] = v[j], v[j] = t;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		/* v[lo..j] <= pivot <= v[i..hi], and v(j..i) == pivot */
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return v[k];
	}
	return v[k];
}

/* numpy.median of v[0..n-1] (n >= 1; v is reordered): NaN where v holds
 * one, as numpy's. */
static double median(double *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (isnan(v[i]))
			return v[i];
	const double hi = select_kth(v, n, n / 2);
	if (n % 2)
		return hi;
	/* the largest of v[0 .. n/2), which selection left below v[n/2] */
	double lo = v[0];
	for (size_t i = 1; i < n / 2; i++)
		lo = v[i] > lo ? v[i] : lo;
	return 0.5 * (lo + hi);
}

int desi_frame_scores(const desi_frame_t *fr, char *band, float *sum, double *count,
		      double *snr)
{
	static const struct { char band; double lo, hi; } tophat[3] = {
		{ 'B', 4000, 5800 }, { 'R', 5800, 7600 }, { 'Z', 7600, 9800 } };
	int nw = fr->nwave, b = 1;
	if (nw < 2)
		return -1;
	double mean = 0;
	for (int w = 0; w < nw; w++)
		mean += fr->wave[w];
	mean /= nw;
	if (mean <= tophat[0].hi)
		b = 0;
	else if (mean >= tophat[2].lo)
		b = 2;
	*band = tophat[b].band;
	int *in = malloc((size_t)nw * sizeof *in);
	double *dwave = malloc((size_t)nw * sizeof *dwave);
	double *v = malloc((size_t)nw * sizeof *v), *sqdw = malloc((size_t)nw * sizeof *sqdw);
	int n = 0, rc = 0;
	if (in == NULL || dwave == NULL || v == NULL || sqdw == NULL) {
		rc = -1;
		goto out;
	}
	for (int w = 0; w < nw; w++) {
		/* numpy.gradient: central differences, one-sided at the ends */
		dwave[w] = w == 0 ? fr->wave[1] - fr->wave[0] :
			   w == nw - 1 ? fr->wave[w] - fr->wave[w - 1] :
			   (fr->wave[w + 1] - fr->wave[w - 1]) / 2;
		if (fr->wave[w] >= tophat[b].lo && fr->wave[w] < tophat[b].hi)
			in[n++] = w;
	}
	if (n == 0) {
		rc = -1;
		goto out;
	}
	for (int k = 0; k < n; k++)
		sqdw[k] = sqrt(dwave[in[k]]); /* the same for every spectrum */
	for (int s = 0; s < fr->nspec; s++) {
		size_t row = fr->stride > 0 ? fr->stride : (size_t)nw;
		const float *f = fr->flux + (size_t)s * row, *iv = fr->ivar + (size_t)s * row;
		double acc = 0;
		for (int k = 0; k < n; k++)
			acc += f[in[k]];
		sum[s] = (float)acc;
		for (int k = 0; k < n; k++)
			v[k] = f[in[k]] / dwave[in[k]];
		count[s] = median(v, (size_t)n);
		for (int k = 0; k < n; k++)
			v[k] = sqrt(iv[in[k]] > 0 ? (double)iv[in[k]] : 0.0) * f[in[k]] / sqdw[k];
		snr[s] = median(v, (size_t)n);
	}
out:
	free(in);
	free(dwave);
	free(v);
	free(sqdw);
	return rc;
}

/* A frame's SCORES (desi_frame_scores()), computed before any file is
 * opened, so that a grid without a band fails before the work. */
typedef struct frame_scores {
	char band;
	float *sum;
	double *count, *snr;
} frame_scores_t;

static void scores_free(frame_scores_t *sc)
{
	free(sc->sum);
	free(sc->count);
	free(sc->snr);
}

static int scores_compute(const desi_frame_t *fr, const char *path, frame_scores_t *sc,
			  sp_err_t *err)
{
	size_t ns = (size_t)fr->nspec;
	sc->sum = malloc(ns * sizeof *sc->sum);
	sc->count = malloc(ns * sizeof *sc->count);
	sc->snr = malloc(ns * sizeof *sc->snr);
	if (sc->sum == NULL || sc->count == NULL || sc->snr == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: SCORES: out of memory", path);
	if (desi_frame_scores(fr, &sc->band, sc->sum, sc->count, sc->snr) != 0)
		return sp_seterr(err, SP_EINVAL,
				 "%s: SCORES: no wavelength of the grid %g .. %g is in its band's "
				 "top hat (desispec's specscore); set no_scores=true", path,
				 fr->wave[0], fr->wave[fr->nwave - 1]);
	return 0;
}

/* Appends the SCORES table of nspec rows, with desispec's column comments
 * on the TTYPE cards. */
static int put_scores(fitsfile *out, const frame_scores_t *sc, int nspec, int *status)
{
	char n0[32], n1[32], n2[32], c[3][64];
	char *ttype[3] = { n0, n1, n2 }, *tform[3] = { "E", "D", "D" };
	char band = sc->band;
	int lo = band == 'B' ? 4000 : band == 'R' ? 5800 : 7600;
	int hi = band == 'B' ? 5800 : band == 'R' ? 7600 : 9800;
	snprintf(n0, sizeof n0, "SUM_RAW_COUNT_%c", band);
	snprintf(n1, sizeof n1, "MEDIAN_RAW_COUNT_%c", band);
	snprintf(n2, sizeof n2, "MEDIAN_RAW_SNR_%c", band);
	snprintf(c[0], sizeof c[0], "sum counts in wave. range %d,%dA", lo, hi);
	snprintf(c[1], sizeof c[1], "median counts/A in wave. range %d,%dA", lo, hi);
	snprintf(c[2], sizeof c[2], "median SNR/sqrt(A) in wave. range %d,%dA", lo, hi);
	fits_create_tbl(out, BINARY_TBL, nspec, 3, ttype, tform, NULL, "SCORES", status);
	for (int k = 0; k < 3; k++) {
		char key[16];
		snprintf(key, sizeof key, "TTYPE%d", k + 1);
		fits_modify_comment(out, key, c[k], status);
	}
	fits_write_col(out, TFLOAT, 1, 1, 1, nspec, sc->sum, status);
	fits_write_col(out, TDOUBLE, 2, 1, 1, nspec, sc->count, status);
	fits_write_col(out, TDOUBLE, 3, 1, 1, nspec, sc->snr, status);
	return write_chksum(out, status);
}

int desi_frame_write(const char *path, const desi_frame_t *fr, const char *image_path,
		     sp_err_t *err)
{
	sp_outset_t set = { 0 };
	const char *tmp;
	int rc = sp_outset_add(&set, path, &tmp, err);
	if (rc == 0)
		rc = desi_frame_write_into(tmp, path, fr, image_path, err);
	if (rc == 0)
		rc = sp_outset_commit(&set, err);
	sp_outset_free(&set);
	return rc;
}

int desi_frame_write_into(const char *tmp, const char *path, const desi_frame_t *fr,
			  const char *image_path, sp_err_t *err)
{
	fitsfile *out = NULL, *in = NULL, *fm = NULL;
	int status = 0, rc = 0;
	const char *what = "cannot write";
	const char *fm_path = fr != NULL && fr->fibermap != NULL && fr->fibermap[0] != '\0' ?
		fr->fibermap : NULL;

	if (fr == NULL || fr->nspec < 1 || fr->nwave < 1 || fr->ndiag < 0 || fr->specmin < 0 ||
	    fr->wave == NULL || fr->flux == NULL || fr->ivar == NULL || fr->mask == NULL ||
	    fr->resolution == NULL || fr->chi2pix == NULL)
		return sp_seterr(err, SP_EINVAL, "%s: %s: incomplete frame", path, __func__);
	frame_scores_t sc = { 0 };
	if (fr->scores)
		rc = scores_compute(fr, path, &sc, err);
	long fm_rows = 0;
	if (rc == 0 && image_path != NULL)
		rc = open_input(image_path, &in, err);
	if (rc == 0 && fm_path != NULL) {
		rc = open_input(fm_path, &fm, err);
		if (rc == 0)
			rc = fibermap_rows(fm, fm_path, 1, fr, &fm_rows, err);
	} else if (rc == 0 && in != NULL) {
		fm = in;
		rc = fibermap_rows(in, image_path, 0, fr, &fm_rows, err);
	}
	if (rc != 0)
		goto out;
	/* CFITSIO creates its file itself and refuses an existing one: the
	 * set's temporary (a unique, unguessable name made with O_EXCL) is
	 * replaced in place. */
	unlink(tmp);
	errno = 0; /* fits_fail() names a write's system error */
	if (fits_create_diskfile(&out, tmp, &status) != 0) {
		out = NULL;
		rc = fits_fail(err, SP_EIO, path, "cannot create the temporary file", status);
		goto out;
	}

	long n2[2] = { fr->nwave, fr->nspec };
	long n1[1] = { fr->nwave };
	long n3[3] = { fr->nwave, 2 * fr->ndiag + 1, fr->nspec };
	double wmin = fr->wave[0], wmax = fr->wave[fr->nwave - 1];
	double step = fr->nwave > 1 ? (wmax - wmin) / (fr->nwave - 1) : 0;
	int specmax = fr->specmin + fr->nspec - 1;

	what = "cannot write FLUX";
	unsigned long dsum = 0;
	if (put_image(out, FLOAT_IMG, TFLOAT, 2, n2, "FLUX", "electron/Angstrom", fr->flux,
		      fr->stride, &dsum, &status) != 0)
		goto fail;
	what = "cannot copy the header of the input image";
	if (in != NULL && copy_image_header(in, out, &status) != 0)
		goto fail;
	what = "cannot write the FLUX header";
	fits_update_key(out, TINT, "NSPEC", (void *)&fr->nspec, "Number of spectra", &status);
	fits_update_key(out, TINT, "SPECMIN", (void *)&fr->specmin, "First spectrum", &status);
	fits_update_key(out, TINT, "SPECMAX", &specmax, "Last spectrum", &status);
	fits_update_key(out, TDOUBLE, "WAVEMIN", &wmin, "First wavelength [Angstrom]", &status);
	fits_update_key(out, TDOUBLE, "WAVEMAX", &wmax, "Last wavelength [Angstrom]", &status);
	fits_update_key(out, TDOUBLE, "WAVESTEP", &step, "Wavelength step size [Angstrom]",
			&status);
	fits_update_key_longstr(out, "IN_PSF", (char *)(fr->in_psf ? fr->in_psf : ""),
				"Input PSF", &status);
	fits_update_key_longstr(out, "IN_IMG", (char *)(fr->in_img ? fr->in_img : ""),
				"Input image", &status);
	if (fm_path != NULL)
		fits_update_key_longstr(out, "IN_FMAP", (char *)fm_path, "Input fibermap", &status);
	if (fr->heliocor > 0)
		fits_update_key_fixdbl(out, "HELIOCOR", fr->heliocor, 15,
				       "Barycentric correction factor applied to wave", &status);
	if (status != 0 || write_chksum_known(out, dsum, &status) != 0)
		goto fail;
	what = "cannot write IVAR";
	if (put_image(out, FLOAT_IMG, TFLOAT, 2, n2, "IVAR", "Angstrom**2/electron**2", fr->ivar,
		      fr->stride, &dsum, &status) != 0 || write_chksum_known(out, dsum, &status) != 0)
		goto fail;
	what = "cannot write MASK";
	if (put_image(out, ULONG_IMG, TUINT, 2, n2, "MASK", NULL, fr->mask, 0, &dsum, &status) != 0 ||
	    write_chksum_known(out, dsum, &status) != 0)
		goto fail;
	what = "cannot write WAVELENGTH";
	if (put_image(out, DOUBLE_IMG, TDOUBLE, 1, n1, "WAVELENGTH", "Angstrom", fr->wave,
		      0, &dsum, &status) != 0 || write_chksum_known(out, dsum, &status) != 0)
		goto fail;
	what = "cannot write RESOLUTION";
	if (put_image(out, FLOAT_IMG, TFLOAT, 3, n3, "RESOLUTION", NULL, fr->resolution,
		      fr->stride, &dsum, &status) != 0 || write_chksum_known(out, dsum, &status) != 0)
		goto fail;
	what = "cannot copy FIBERMAP";
	if (fm_rows > 0 && put_fibermap(fm, out, fr->specmin, fr->nspec, fm_rows, &status) != 0)
		goto fail;
	what = "cannot write CHI2PIX";
	if (put_image(out, FLOAT_IMG, TFLOAT, 2, n2, "CHI2PIX", NULL, fr->chi2pix, fr->stride,
		      &dsum, &status) != 0 ||
	    write_chksum_known(out, dsum, &status) != 0)
		goto fail;
	what = "cannot write SCORES";
	if (fr->scores && put_scores(out, &sc, fr->nspec, &status) != 0)
		goto fail;
	what = "cannot close the temporary file";
	if (fits_close_file(out, &status) != 0) {
		out = NULL;
		goto fail;
	}
	rc = 0;
	goto out;

fail:
	rc = fits_fail(err, SP_EIO, path, what, status);
	if (out != NULL) {
		int st = 0;
		fits_delete_file(out, &st);
	}
	fits_clear_errmsg();
out:
	if (fm != in)
		close_quietly(fm);
	close_quietly(in);
	scores_free(&sc);
	return rc;
}

int desi_model_write_into(const char *tmp, const char *path, const desi_model_t *m,
			  const char *image_path, sp_err_t *err)
{
	fitsfile *out = NULL, *in = NULL;
	int status = 0, rc = 0;
	const char *what = "cannot write MODEL";

	if (m == NULL || m->ny < 1 || m->nx < 1 || m->pix == NULL || m->nspec < 1)
		return sp_seterr(err, SP_EINVAL, "%s: %s: incomplete model", path, __func__);
	if (image_path != NULL && (rc = open_input(image_path, &in, err)) != 0)
		return rc;
	/* as the frame: the set's temporary is replaced in place */
	unlink(tmp);
	if (fits_create_diskfile(&out, tmp, &status) != 0) {
		out = NULL;
		rc = fits_fail(err, SP_EIO, path, "cannot create the temporary file", status);
		goto out;
	}
	long n2[2] = { m->nx, m->ny };
	int specmax = m->specmin + m->nspec - 1;
	char creator[64];
	snprintf(creator, sizeof creator, "starpipe %s", PACKAGE_VERSION);
	unsigned long dsum = 0;
	if (put_image(out, FLOAT_IMG, TFLOAT, 2, n2, "MODEL", "electron", m->pix, 0, &dsum, &status) != 0)
		goto fail;
	what = "cannot copy the header of the input image";
	if (in != NULL && copy_image_header(in, out, &status) != 0)
		goto fail;
	what = "cannot write the MODEL header";
	/* after the image's cards: ours win over any of the same name */
	fits_update_key(out, TSTRING, "EXTNAME", "MODEL", NULL, &status);
	fits_update_key(out, TSTRING, "BUNIT", "electron", NULL, &status);
	fits_update_key(out, TSTRING, "CREATOR", creator, "2-D model of the extraction by starpipe",
			&status);
	fits_update_key_longstr(out, "IN_IMG", (char *)(m->in_img ? m->in_img : ""), "Input image",
				&status);
	fits_update_key_longstr(out, "IN_PSF", (char *)(m->in_psf ? m->in_psf : ""), "Input PSF",
				&status);
	fits_update_key(out, TINT, "SPECMIN", (void *)&m->specmin, "First spectrum modelled",
			&status);
	fits_update_key(out, TINT, "SPECMAX", &specmax, "Last spectrum modelled", &status);
	fits_update_key(out, TDOUBLE, "WAVEMIN", (void *)&m->wmin,
			"First wavelength modelled [Angstrom]", &status);
	fits_update_key(out, TDOUBLE, "WAVEMAX", (void *)&m->wmax,
			"Last wavelength modelled [Angstrom]", &status);
	fits_write_comment(out,
			   "starpipe's 2-D model: the sum over every extracted spectrum and grid "
			   "wavelength of its PSF spot times its deconvolved flux (the solution "
			   "of A'NA f = A'Np before decorrelation), from the patch where it is "
			   "core; residual = IMAGE - MODEL.", &status);
	if (status != 0 || write_chksum_known(out, dsum, &status) != 0)
		goto fail;
	what = "cannot close the temporary file";
	if (fits_close_file(out, &status) != 0) {
		out = NULL;
		goto fail;
	}
	rc = 0;
	goto out;

fail:
	rc = fits_fail(err, SP_EIO, path, what, status);
	if (out != NULL) {
		int st = 0;
		fits_delete_file(out, &st);
	}
	fits_clear_errmsg();
out:
	close_quietly(in);
	return rc;
}

int desi_output_verify(const char *path, sp_err_t *err)
{
	static const char *const frame_hdus[] = { "IVAR", "MASK", "WAVELENGTH", "RESOLUTION",
						   "CHI2PIX" };
	fitsfile *f = NULL;
	int rc = desi_fits_open(path, &f, err), status = 0, nhdu = 0, frame = 0;
	unsigned found = 0;

	if (rc != 0)
		return rc;
	if (fits_get_num_hdus(f, &nhdu, &status) != 0)
		rc = fits_fail(err, SP_EFORMAT, path, "cannot count the HDUs", status);
	for (int h = 1; rc == 0 && h <= nhdu; h++) {
		char name[FLEN_VALUE] = "", label[32];
		int type, dok = 0, hok = 0;
		snprintf(label, sizeof label, "number %d", h);
		if (fits_movabs_hdu(f, h, &type, &status) != 0 ||
		    fits_verify_chksum(f, &dok, &hok, &status) != 0) {
			rc = fits_fail(err, SP_EFORMAT, path, "cannot verify the checksums", status);
			break;
		}
		if ((rc = desi_fitskey_str(f, path, label, "EXTNAME", name, sizeof name, "", err)) != 0)
			break;
		if (dok == 0 || hok == 0)
			rc = sp_seterr(err, SP_EFORMAT, "%s: HDU %d (%s) has no %s", path, h,
				       name[0] ? name : "unnamed", hok == 0 ? "CHECKSUM" : "DATASUM");
		else if (dok < 0)
			rc = sp_seterr(err, SP_EFORMAT, "%s: HDU %d (%s): its data do not match its "
				       "DATASUM", path, h, name[0] ? name : "unnamed");
		else if (hok < 0)
			rc = sp_seterr(err, SP_EFORMAT, "%s: HDU %d (%s): it does not match its "
				       "CHECKSUM", path, h, name[0] ? name : "unnamed");
		if (h == 1)
			frame = strcmp(name, "FLUX") == 0;
		for (size_t k = 0; k < sizeof frame_hdus / sizeof frame_hdus[0]; k++)
			if (strcmp(name, frame_hdus[k]) == 0)
				found |= 1u << k;
	}
	for (size_t k = 0; rc == 0 && frame && k < sizeof frame_hdus / sizeof frame_hdus[0]; k++)
		if (!(found & (1u << k)))
			rc = sp_seterr(err, SP_EFORMAT, "%s: the frame has no %s HDU", path,
				       frame_hdus[k]);
	fits_clear_errmsg();
	close_quietly(f);
	return rc;
}
