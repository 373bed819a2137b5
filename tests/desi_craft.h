/* Crafted DESI inputs for the tests: raw header-card edits, garbage coefficients, all-NaN images, broken FIBERMAPs. */
#ifndef SP_TEST_DESI_CRAFT_H
#define SP_TEST_DESI_CRAFT_H

/*
 * Shared by the unit tests (test_desi_fitskey.c, test_desi_psf.c,
 * test_desi_frame_io.c) and by tests/desi-craft.c, which the shell tests
 * call.  Each function copies or edits a file and returns 0, or -1 with a
 * line on stderr.  Card edits are done on the raw bytes, because CFITSIO
 * refuses to write the malformed cards we want (a 30-digit integer, text
 * in a numeric card).
 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fitsio.h>

static inline int craft_copy(const char *src, const char *dst)
{
	FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
	char buf[65536];
	size_t n;
	int rc = 0;

	if (a == NULL || b == NULL) {
		fprintf(stderr, "craft: cannot copy %s to %s\n", src, dst);
		rc = -1;
	}
	while (rc == 0 && (n = fread(buf, 1, sizeof buf, a)) > 0)
		if (fwrite(buf, 1, n, b) != n)
			rc = -1;
	if (a != NULL)
		fclose(a);
	if (b != NULL && fclose(b) != 0)
		rc = -1;
	return rc;
}

/* Value of an integer card in a header block run (trusted file). */
static inline long long craft_hdr_int(const char *h, size_t ncards, const char *key, long long dflt)
{
	for (size_t c = 0; c < ncards; c++) {
		const char *card = h + c * 80;
		if (strncmp(card, key, strlen(key)) == 0 && card[strlen(key)] == ' ' && card[8] == '=')
			return strtoll(card + 10, NULL, 10);
	}
	return dflt;
}

/* Replaces the card KEY of the HDU whose EXTNAME is extname (NULL: the
 * primary HDU) of path, in place, by "KEY     = value" (value as raw
 * text: quote strings yourself).  The card must exist. */
static inline int craft_card_bytes(const char *path, const char *extname, const char *key,
				   const char *bytes);

static inline int craft_card(const char *path, const char *extname, const char *key,
			     const char *value)
{
	char card[81];
	snprintf(card, sizeof card, "%-8.8s= %-70.70s", key, value);
	return craft_card_bytes(path, extname, key, card);
}

/* Replaces the card KEY as craft_card() does, by text padded to 80
 * characters, not formatted ("KEY     =;  1" is possible). */
static inline int craft_card_raw(const char *path, const char *extname, const char *key,
				 const char *text)
{
	char card[81];
	snprintf(card, sizeof card, "%-80.80s", text);
	return craft_card_bytes(path, extname, key, card);
}

/* Replaces the card KEY (KEY "END": the END card) by the 80 bytes at
 * bytes, NULs included. */
static inline int craft_card_bytes(const char *path, const char *extname, const char *key,
				   const char *bytes)
{
	FILE *f = fopen(path, "r+b");
	char *buf;
	long size;
	int rc = -1;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) <= 0) {
		fprintf(stderr, "craft: cannot open %s\n", path);
		if (f != NULL)
			fclose(f);
		return -1;
	}
	buf = malloc((size_t)size);
	rewind(f);
	if (buf == NULL || fread(buf, 1, (size_t)size, f) != (size_t)size) {
		fclose(f);
		free(buf);
		return -1;
	}
	for (long pos = 0, hdu = 0; pos < size && rc != 0; hdu++) {
		size_t ncards = 0;
		long keyat = -1;
		int match = extname == NULL && hdu == 0;
		for (;;) {
			if (pos + (long)(ncards + 1) * 80 > size)
				goto out;
			const char *card = buf + pos + ncards * 80;
			if (strncmp(card, "END     ", 8) == 0) {
				if (strcmp(key, "END") == 0)
					keyat = pos + (long)ncards * 80;
				break;
			}
			if (strncmp(card, key, strlen(key)) == 0 && card[strlen(key)] == ' ')
				keyat = pos + (long)ncards * 80;
			if (extname != NULL && strncmp(card, "EXTNAME = '", 11) == 0 &&
			    strncmp(card + 11, extname, strlen(extname)) == 0 &&
			    (card[11 + strlen(extname)] == '\'' || card[11 + strlen(extname)] == ' '))
				match = 1;
			ncards++;
		}
		ncards++;
		const char *h = buf + pos;
		if (match && keyat >= 0) {
			memcpy(buf + keyat, bytes, 80);
			rewind(f);
			rc = fwrite(buf, 1, (size_t)size, f) == (size_t)size ? 0 : -1;
			break;
		}
		long long naxis = craft_hdr_int(h, ncards, "NAXIS", 0), n = naxis > 0 ? 1 : 0;
		for (long long k = 1; k <= naxis; k++) {
			char nk[32];
			snprintf(nk, sizeof nk, "NAXIS%lld", k);
			n *= craft_hdr_int(h, ncards, nk, 0);
		}
		long long bitpix = craft_hdr_int(h, ncards, "BITPIX", 8);
		n = (n * (bitpix < 0 ? -bitpix : bitpix) / 8 + craft_hdr_int(h, ncards, "PCOUNT", 0)) *
		    craft_hdr_int(h, ncards, "GCOUNT", 1);
		pos += (long)((ncards * 80 + 2879) / 2880 * 2880) + (long)((n + 2879) / 2880 * 2880);
	}
out:
	if (rc != 0)
		fprintf(stderr, "craft: %s: no card %s in HDU %s\n", path, key,
			extname ? extname : "PRIMARY");
	if (fclose(f) != 0)
		rc = -1;
	free(buf);
	return rc;
}

static inline int craft_fits_done(fitsfile *f, int status, const char *what)
{
	int st = 0;
	if (f != NULL)
		fits_close_file(f, &st);
	if (status == 0)
		status = st;
	if (status != 0) {
		char txt[FLEN_STATUS];
		fits_get_errstatus(status, txt);
		fprintf(stderr, "craft: %s: %s\n", what, txt);
		return -1;
	}
	return 0;
}

/* Sets element idx (0-based, flat) of the image HDU extname to v. */
static inline int craft_pixel(const char *path, const char *extname, long idx, double v)
{
	fitsfile *f = NULL;
	int status = 0;

	fits_open_diskfile(&f, path, READWRITE, &status);
	fits_movnam_hdu(f, IMAGE_HDU, (char *)extname, 0, &status);
	fits_write_img(f, TDOUBLE, (LONGLONG)idx + 1, 1, &v, &status);
	return craft_fits_done(f, status, path);
}

/* Sets element idx (0-based) of the COEFF cell of the PSF table row whose
 * PARAM is param to v. */
static inline int craft_psf_coeff(const char *path, const char *param, long idx, double v)
{
	fitsfile *f = NULL;
	int status = 0, cpar = 0, ccoef = 0;
	long nrows = 0, row = 0;

	fits_open_diskfile(&f, path, READWRITE, &status);
	fits_movnam_hdu(f, BINARY_TBL, "PSF", 0, &status);
	fits_get_num_rows(f, &nrows, &status);
	fits_get_colnum(f, CASEINSEN, "PARAM", &cpar, &status);
	fits_get_colnum(f, CASEINSEN, "COEFF", &ccoef, &status);
	for (long r = 1; r <= nrows && status == 0 && row == 0; r++) {
		char name[72], *np = name;
		fits_read_col(f, TSTRING, cpar, r, 1, 1, NULL, &np, NULL, &status);
		if (strcmp(name, param) == 0)
			row = r;
	}
	if (row == 0 && status == 0)
		status = KEY_NO_EXIST;
	fits_write_col(f, TDOUBLE, ccoef, row, (LONGLONG)idx + 1, 1, &v, &status);
	return craft_fits_done(f, status, path);
}

/* Fills the IMAGE HDU with NaN. */
static inline int craft_all_nan(const char *path)
{
	fitsfile *f = NULL;
	int status = 0, naxis = 0;
	long nax[2] = { 0, 0 };

	fits_open_diskfile(&f, path, READWRITE, &status);
	fits_movnam_hdu(f, IMAGE_HDU, "IMAGE", 0, &status);
	fits_get_img_dim(f, &naxis, &status);
	fits_get_img_size(f, 2, nax, &status);
	size_t n = (size_t)nax[0] * (size_t)nax[1];
	float *nan = malloc(n * sizeof *nan + 1);
	for (size_t i = 0; nan != NULL && i < n; i++)
		nan[i] = NAN;
	if (nan == NULL)
		status = MEMORY_ALLOCATION;
	fits_write_img(f, TFLOAT, 1, (LONGLONG)n, nan, &status);
	free(nan);
	return craft_fits_done(f, status, path);
}

/* FIBERMAP damage: what = "nofiber" deletes the FIBER column, "badfiber"
 * sets row 3's FIBER to 123456. */
static inline int craft_fibermap(const char *path, const char *what)
{
	fitsfile *f = NULL;
	int status = 0, col = 0;
	long bad = 123456;

	fits_open_diskfile(&f, path, READWRITE, &status);
	fits_movnam_hdu(f, BINARY_TBL, "FIBERMAP", 0, &status);
	fits_get_colnum(f, CASESEN, "FIBER", &col, &status);
	if (strcmp(what, "nofiber") == 0)
		fits_delete_col(f, col, &status);
	else
		fits_write_col(f, TLONG, col, 4, 1, 1, &bad, &status);
	return craft_fits_done(f, status, path);
}

/* Fills the compressed bytes of the first tile of the tile-compressed
 * image extname with 0xff: a RICE stream that claims more bits than it
 * has (raw 16-bit pixels), which makes CFITSIO's decoder read past its
 * buffer (the class of a crash found by tests/fuzz/fuzz_fits.c). */
static inline int craft_garble_tile(const char *path, const char *extname)
{
	fitsfile *f = NULL;
	int status = 0, col = 0;
	long naxis1 = 0, naxis2 = 0;
	LONGLONG len = 0, off = 0, head = 0, data = 0, end = 0;

	fits_open_diskfile(&f, path, READONLY, &status);
	fits_movnam_hdu(f, IMAGE_HDU, (char *)extname, 0, &status);
	fits_get_colnum(f, CASEINSEN, "COMPRESSED_DATA", &col, &status);
	fits_read_descriptll(f, col, 1, &len, &off, &status);
	fits_read_key(f, TLONG, "NAXIS1", &naxis1, NULL, &status);
	fits_read_key(f, TLONG, "NAXIS2", &naxis2, NULL, &status);
	fits_get_hduaddrll(f, &head, &data, &end, &status);
	if (craft_fits_done(f, status, path) != 0)
		return -1;
	FILE *raw = fopen(path, "r+b");
	if (raw == NULL || fseek(raw, (long)(data + naxis1 * naxis2 + off), SEEK_SET) != 0)
		return -1;
	for (LONGLONG i = 0; i < len; i++)
		putc(0xff, raw);
	return fclose(raw) == 0 ? 0 : -1;
}

#endif /* SP_TEST_DESI_CRAFT_H */
