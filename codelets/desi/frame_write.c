/* DESI frame I/O with CFITSIO: the extracted frame and the model image
 * out, and their verification (the image in: frame_io.c). */
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
 * DESIGN.  The frame goes to a temporary of an output set (src/io/fsutil.h)
 * in the same folder, with a checksum in every HDU, and is renamed over PATH
 * (with the item's other outputs) only when CFITSIO has closed it without
 * error; any failure removes the temporary file.
 */

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
 * three passes over the frame's data (its two write_chksum() calls, then
 * fits_close_file()'s flush), most of the write's time.  The FITS
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
		return desi_fits_fail(err, SP_EFORMAT, image_path, "cannot read FIBERMAP", status);
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
 * the pivot, O(n) on average where a sort is O(n log n) (a frame's
 * write takes one median per fibre).  v holds no NaN. */
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

/* The end of a write into the temporary file out: closed when the steps
 * went well (failed 0), and then 0; else, or when the close fails, what
 * failed (the step) and CFITSIO's status into err, out deleted unless it
 * could not be closed, CFITSIO's message stack cleared, and SP_EIO. */
static int end_output(fitsfile *out, const char *path, const char *what, int status, int failed,
		      sp_err_t *err)
{
	if (!failed) {
		if (fits_close_file(out, &status) == 0)
			return 0;
		what = "cannot close the temporary file";
		out = NULL;
	}
	int rc = desi_fits_fail(err, SP_EIO, path, what, status);
	if (out != NULL) {
		int st = 0;
		fits_delete_file(out, &st);
	}
	fits_clear_errmsg();
	return rc;
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
		rc = desi_fits_open(image_path, &in, err);
	if (rc == 0 && fm_path != NULL) {
		rc = desi_fits_open(fm_path, &fm, err);
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
	errno = 0; /* desi_fits_fail() names a write's system error */
	if (fits_create_diskfile(&out, tmp, &status) != 0) {
		out = NULL;
		rc = desi_fits_fail(err, SP_EIO, path, "cannot create the temporary file", status);
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
	rc = end_output(out, path, what, status, 0, err);
	goto out;

fail:
	rc = end_output(out, path, what, status, 1, err);
out:
	if (fm != in)
		desi_fits_close(&fm);
	desi_fits_close(&in);
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
	if (image_path != NULL && (rc = desi_fits_open(image_path, &in, err)) != 0)
		return rc;
	/* as the frame: the set's temporary is replaced in place */
	unlink(tmp);
	if (fits_create_diskfile(&out, tmp, &status) != 0) {
		out = NULL;
		rc = desi_fits_fail(err, SP_EIO, path, "cannot create the temporary file", status);
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
	rc = end_output(out, path, what, status, 0, err);
	goto out;

fail:
	rc = end_output(out, path, what, status, 1, err);
out:
	desi_fits_close(&in);
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
		rc = desi_fits_fail(err, SP_EFORMAT, path, "cannot count the HDUs", status);
	for (int h = 1; rc == 0 && h <= nhdu; h++) {
		char name[FLEN_VALUE] = "", label[32];
		int type, dok = 0, hok = 0;
		snprintf(label, sizeof label, "number %d", h);
		if (fits_movabs_hdu(f, h, &type, &status) != 0 ||
		    fits_verify_chksum(f, &dok, &hok, &status) != 0) {
			rc = desi_fits_fail(err, SP_EFORMAT, path, "cannot verify the checksums", status);
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
	desi_fits_close(&f);
	return rc;
}
