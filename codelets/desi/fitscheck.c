/* DESI FITS inputs opened safely (desi_fits_open, fitskey.h): plain disk
 * files only, every header pre-scanned on its raw bytes before CFITSIO
 * parses it, and every RICE tile stream walked for its length (fitskey.h's
 * DESIGN says why). */
#define _POSIX_C_SOURCE 200809L

#include "fitskey.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsutil.h"

/* ----------------------------------------------------- raw pre-scan */

/* Whether key is one of exact[] or one of indexed[] followed by digits
 * (both NULL-terminated). */
static int key_in(const char *key, const char *const *exact, const char *const *indexed)
{
	for (int k = 0; exact[k] != NULL; k++)
		if (strcmp(key, exact[k]) == 0)
			return 1;
	for (int k = 0; indexed[k] != NULL; k++) {
		size_t n = strlen(indexed[k]);
		if (strncmp(key, indexed[k], n) == 0 && key[n] != '\0' &&
		    strspn(key + n, "0123456789") == strlen(key + n))
			return 1;
	}
	return 0;
}

/* Integer keywords that CFITSIO converts itself when it reads a header
 * (structure, tables, tile compression): exact names, and names followed
 * by an index. */
static int cfitsio_int_key(const char *key)
{
	static const char *const exact[] = { "BITPIX", "NAXIS", "PCOUNT", "GCOUNT", "TFIELDS",
					     "THEAP", "BLANK", "EXTVER", "EXTLEVEL", "ZBITPIX",
					     "ZNAXIS", "ZBLANK", "ZPCOUNT", "ZGCOUNT", "ZTHEAP",
					     "ZDITHER0", NULL };
	static const char *const indexed[] = { "NAXIS", "TBCOL", "TNULL", "ZNAXIS", "ZTILE",
					       "ZVAL", NULL };
	return key_in(key, exact, indexed);
}

/* Real keywords CFITSIO converts itself (scaling). */
static int cfitsio_real_key(const char *key)
{
	static const char *const exact[] = { "BSCALE", "BZERO", "ZSCALE", "ZZERO", NULL };
	static const char *const indexed[] = { "TSCAL", "TZERO", NULL };
	return key_in(key, exact, indexed);
}

/* Is text an integer (sign and digits only)? */
static int int_text(const char *text)
{
	const char *p = text + (*text == '+' || *text == '-');
	return *p != '\0' && strspn(p, "0123456789") == strlen(p);
}

/* One HDU's header as the pre-scan needs it. */
typedef struct raw_hdu {
	long long bitpix, naxis, pcount, gcount, nax[1000];
	int have_bitpix, have_naxis, zimage;
	char zcmptype[FLEN_VALUE];
	/* tile compression: the first bad value of ZNAXIS, ZNAXISn, ZTILEn,
	 * ZVALn, ZDITHER0, which CFITSIO divides by or indexes with */
	char zbad[16];
	long long zbadval;
} raw_hdu_t;

/* Tile-compression integers CFITSIO uses without checking (it divides by
 * ZTILEn, ZNAXISn is ZTILE1's default, BLOCKSIZE sizes its RICE blocks,
 * ZDITHER0 indexes its random table): ZNAXIS 1..6 (its MAX_COMPRESS_DIM),
 * ZNAXISn, ZTILEn, ZVALn >= 1 (ZVALn are BLOCKSIZE and BYTEPIX for the
 * RICE and GZIP we accept), ZDITHER0 1..10000 (the FITS standard's). */
static int zkey_ok(const char *key, long long v)
{
	if (strcmp(key, "ZNAXIS") == 0)
		return v >= 1 && v <= 6;
	if (strcmp(key, "ZDITHER0") == 0)
		return v >= 1 && v <= 10000;
	if (strncmp(key, "ZNAXIS", 6) == 0 || strncmp(key, "ZTILE", 5) == 0 ||
	    strncmp(key, "ZVAL", 4) == 0)
		return v >= 1;
	return 1;
}

/*
 * Walks the headers of path on the raw bytes, before CFITSIO parses any of
 * them, and refuses what would make CFITSIO 4.2 overflow a buffer while
 * converting a card it reads by itself (fitskey.h): an integer value that
 * does not fit in 64 bits in any card, or a string in one of the integer
 * cards CFITSIO converts (cfitsio_int_key()); also a structural card
 * (BITPIX, NAXIS, NAXISn, PCOUNT, GCOUNT) that is not a plain integer, so
 * that this scan and CFITSIO agree on where every HDU is, and tile
 * compression other than RICE_1 and GZIP (whose decoders are checked, see
 * check_rice()).  A header without its END card is an error here.
 */
static int prescan(const char *path, FILE *fp, long long size, sp_err_t *err)
{
	char blk[2880], val[FLEN_VALUE], key[9];
	long long pos = 0;
	raw_hdu_t *h = malloc(sizeof *h);

	if (h == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	if (fread(blk, 1, 10, fp) != 10 || memcmp(blk, "SIMPLE  = ", 10) != 0) {
		free(h);
		return sp_seterr(err, SP_EFORMAT,
				 "%s: not a FITS file (it does not start with a SIMPLE card; a "
				 "gzipped file must be uncompressed first)", path);
	}
	if (size < 2880) {
		free(h);
		return sp_seterr(err, SP_EFORMAT,
				 "%s: truncated: %lld bytes, less than one 2880-byte FITS block",
				 path, size);
	}
	for (int hdu = 1; pos < size; hdu++) {
		int end = 0, rc = 0;
		memset(h, 0, sizeof *h);
		h->gcount = 1;
		while (!end) {
			if (fseeko(fp, (off_t)pos, SEEK_SET) != 0 || fread(blk, 1, 2880, fp) != 2880) {
				free(h);
				return sp_seterr(err, SP_EFORMAT,
						 "%s: truncated: the header of HDU %d has no END card",
						 path, hdu);
			}
			pos += 2880;
			for (int c = 0; c < 36 && !end && rc == 0; c++) {
				const char *card = blk + 80 * c;
				int is_string;
				memcpy(key, card, 8);
				key[8] = '\0';
				for (int k = 7; k >= 0 && key[k] == ' '; k--)
					key[k] = '\0';
				/* END as FITS writes it.  CFITSIO also ends the header
				 * at "END" followed by a NUL or '=' ..., where this
				 * scan and CFITSIO could then disagree on what is
				 * header: such a card is refused. */
				if (memcmp(card, "END     ", 8) == 0) {
					end = 1;
					break;
				}
				if (memcmp(card, "END", 3) == 0 &&
				    !((card[3] >= 'A' && card[3] <= 'Z') ||
				      (card[3] >= '0' && card[3] <= '9') || card[3] == '-' ||
				      card[3] == '_')) {
					rc = sp_seterr(err, SP_EFORMAT,
						       "%s: HDU %d: malformed END card", path, hdu);
					break;
				}
				/* CFITSIO takes any card with '=' in column 9 as
				 * valued (not requiring the blank in column 10),
				 * so such a card is checked too: our value_text()
				 * refuses it as malformed. */
				if (card[8] != '=')
					continue; /* commentary card */
				char cbuf[81];
				memcpy(cbuf, card, 80);
				cbuf[80] = '\0';
				int vrc = desi_fitskey_value_text(cbuf, val, sizeof val, &is_string);
				int ikey = cfitsio_int_key(key);
				if (vrc != 0 && ikey)
					rc = sp_seterr(err, SP_EFORMAT,
						       "%s: HDU %d, keyword %s: malformed value", path,
						       hdu, key);
				if (vrc != 0 || rc != 0)
					continue;
				if (is_string && ikey)
					rc = sp_seterr(err, SP_EFORMAT,
						       "%s: HDU %d, keyword %s: a string where an "
						       "integer is required", path, hdu, key);
				/* Anything but a plain number in a card CFITSIO converts
				 * (a complex "(1111..., 2)" crashes its integer
				 * conversion too): ZVALn may be real (NOISEBIT...). */
				double dv;
				int plain = int_text(val) ||
					    ((strncmp(key, "ZVAL", 4) == 0 || !ikey) &&
					     desi_fitskey_parse_double(val, &dv) == 0);
				if (rc == 0 && !is_string && (ikey || cfitsio_real_key(key)) &&
				    !plain)
					rc = sp_seterr(err, SP_EFORMAT,
						       "%s: HDU %d, keyword %s: '%.20s' is not a "
						       "plain number", path, hdu, key, val);
				if (rc == 0 && is_string && cfitsio_real_key(key))
					rc = sp_seterr(err, SP_EFORMAT,
						       "%s: HDU %d, keyword %s: a string where a "
						       "number is required", path, hdu, key);
				long long ll = 0;
				if (!is_string && int_text(val)) {
					errno = 0;
					ll = strtoll(val, NULL, 10);
					if (errno == ERANGE)
						rc = sp_seterr(err, SP_EFORMAT,
							       "%s: HDU %d, keyword %s: integer of %zu "
							       "characters does not fit in 64 bits",
							       path, hdu, key, strlen(val));
				}
				int structural = strcmp(key, "BITPIX") == 0 || strcmp(key, "NAXIS") == 0 ||
						 strcmp(key, "PCOUNT") == 0 || strcmp(key, "GCOUNT") == 0 ||
						 (strncmp(key, "NAXIS", 5) == 0 && key[5] != '\0' &&
						  ikey);
				if (rc == 0 && structural && (is_string || !int_text(val)))
					rc = sp_seterr(err, SP_EFORMAT,
						       "%s: HDU %d, keyword %s: '%.20s' is not an integer",
						       path, hdu, key, val);
				if (rc == 0 && ikey && key[0] == 'Z' && h->zbad[0] == '\0' &&
				    (!int_text(val) || !zkey_ok(key, ll)) &&
				    strncmp(key, "ZVAL", 4) != 0) {
					snprintf(h->zbad, sizeof h->zbad, "%s", key);
					h->zbadval = ll;
				}
				/* ZVALn as CFITSIO reads BLOCKSIZE and BYTEPIX: an
				 * integer, a real truncated toward zero (".2" is the 0
				 * it then divides by) */
				if (rc == 0 && strncmp(key, "ZVAL", 4) == 0 && !is_string &&
				    h->zbad[0] == '\0') {
					long long zv = ll;
					if (!int_text(val))
						zv = desi_fitskey_parse_double(val, &dv) == 0 &&
								     dv >= 1.0 && dv < 9.0e18
							     ? (long long)dv
							     : 0;
					if (!zkey_ok(key, zv)) {
						snprintf(h->zbad, sizeof h->zbad, "%s", key);
						h->zbadval = zv;
					}
				}
				if (rc != 0 || !structural) {
					/* CFITSIO takes a logical from its first character
					 * ("T$" is true to it): anything but F counts */
					if (strcmp(key, "ZIMAGE") == 0 && (is_string || val[0] != 'F'))
						h->zimage = 1;
					if (strcmp(key, "ZCMPTYPE") == 0 && is_string)
						snprintf(h->zcmptype, sizeof h->zcmptype, "%s", val);
					continue;
				}
				if (strcmp(key, "BITPIX") == 0) {
					h->bitpix = ll;
					h->have_bitpix = 1;
				} else if (strcmp(key, "NAXIS") == 0) {
					h->naxis = ll;
					h->have_naxis = 1;
				} else if (strcmp(key, "PCOUNT") == 0) {
					h->pcount = ll;
				} else if (strcmp(key, "GCOUNT") == 0) {
					h->gcount = ll;
				} else {
					long n = strtol(key + 5, NULL, 10);
					if (n >= 1 && n <= 999)
						h->nax[n] = ll;
				}
			}
			if (rc != 0) {
				free(h);
				return rc;
			}
		}
		if (h->zimage && strcmp(h->zcmptype, "RICE_1") != 0 &&
		    strcmp(h->zcmptype, "RICE_ONE") != 0 && strcmp(h->zcmptype, "GZIP_1") != 0 &&
		    strcmp(h->zcmptype, "GZIP_2") != 0) {
			int rc = sp_seterr(err, SP_EFORMAT,
					   "%s: HDU %d: tile compression '%.20s' is not supported "
					   "(RICE_1, GZIP_1, GZIP_2 are)", path, hdu, h->zcmptype);
			free(h);
			return rc;
		}
		if (hdu == 1 && h->naxis > 1 && h->nax[1] == 0) {
			/* random groups: sized otherwise, and not DESI's */
			free(h);
			return sp_seterr(err, SP_EFORMAT,
					 "%s: random-groups FITS (NAXIS1 = 0) is not supported", path);
		}
		if (h->zimage && h->zbad[0] != '\0') {
			int rc = sp_seterr(err, SP_EFORMAT,
					   "%s: HDU %d: tile compression keyword %s = %lld is out of "
					   "range", path, hdu, h->zbad, h->zbadval);
			free(h);
			return rc;
		}
		/* Data size: |BITPIX|/8 * GCOUNT * (PCOUNT + NAXIS1 * ... * NAXISn) */
		long long b = h->bitpix, n = h->naxis > 0 ? 1 : 0, bytes;
		int ok = h->have_bitpix && h->have_naxis && h->naxis >= 0 && h->naxis <= 999 &&
			 (b == 8 || b == 16 || b == 32 || b == 64 || b == -32 || b == -64) &&
			 h->pcount >= 0 && h->gcount >= 0;
		for (long long k = 1; ok && k <= h->naxis; k++)
			ok = h->nax[k] >= 0 && !__builtin_mul_overflow(n, h->nax[k], &n);
		ok = ok && !__builtin_add_overflow(n, h->pcount, &n) &&
		     !__builtin_mul_overflow(n, h->gcount, &n) &&
		     !__builtin_mul_overflow(n, (b < 0 ? -b : b) / 8, &bytes) &&
		     bytes <= size;
		if (!ok) {
			free(h);
			return sp_seterr(err, SP_EFORMAT,
					 "%s: HDU %d: BITPIX, NAXIS, NAXISn, PCOUNT, GCOUNT do not "
					 "describe data that fits in the file", path, hdu);
		}
		pos += (bytes + 2879) / 2880 * 2880;
	}
	free(h);
	return 0;
}

/* ------------------------------------------------ RICE tile streams */

/* Number of significant bits of b (0 < b < 256), CFITSIO's nonzero_count[]. */
static int nbits_of(unsigned long long b)
{
	int n = 0;
	while (b != 0) {
		n++;
		b >>= 1;
	}
	return n;
}

/*
 * Does CFITSIO's RICE decoder (fits_rdecomp, _short, _byte in ricecomp.c)
 * stay inside the nc bytes of c when it decodes nx pixels of bytepix bytes
 * in blocks of nblock?  It does not check while it decodes: a run of zero
 * bytes, or a stream cut short, makes it read past the tile's buffer (a
 * crash found by tests/fuzz/fuzz_fits.c; its check comes after the block).
 * This walks the stream as the decoder does, with the same bit
 * bookkeeping, counting the bytes it would read, and computes no pixel.
 */
static int rice_fits(const unsigned char *c, size_t nc, long long nx, int nblock, int bytepix)
{
	int fsbits = bytepix == 1 ? 3 : bytepix == 2 ? 4 : 5;
	int fsmax = bytepix == 1 ? 6 : bytepix == 2 ? 14 : 25;
	int bbits = 8 * bytepix;
	size_t p = (size_t)bytepix;
	unsigned long long b;
	int nbits = 8;

	if (nc < (size_t)bytepix + 1 || nblock < 1)
		return 0;
	b = c[p++];
	for (long long i = 0; i < nx;) {
		nbits -= fsbits;
		while (nbits < 0) {
			if (p >= nc)
				return 0;
			b = (b << 8) | c[p++];
			nbits += 8;
		}
		int fs = (int)(b >> nbits) - 1;
		b &= (1ULL << nbits) - 1;
		long long imax = i + nblock < nx ? i + nblock : nx;
		if (fs < 0) {
			i = imax;
		} else if (fs == fsmax) {
			for (; i < imax; i++) {
				for (int k = bbits - nbits - 8; k >= 0; k -= 8) {
					if (p >= nc)
						return 0;
					p++;
				}
				if (nbits > 0) {
					if (p >= nc)
						return 0;
					b = c[p++] & ((1ULL << nbits) - 1);
				} else {
					b = 0;
				}
			}
		} else {
			for (; i < imax; i++) {
				while (b == 0) {
					if (p >= nc)
						return 0;
					nbits += 8;
					b = c[p++];
				}
				nbits = nbits_of(b) - 1;
				b ^= 1ULL << nbits;
				nbits -= fs;
				while (nbits < 0) {
					if (p >= nc)
						return 0;
					b = ((b << 8) | c[p++]) & 0xffffffffULL; /* its b is 32-bit */
					nbits += 8;
				}
				b &= (1ULL << nbits) - 1;
			}
		}
	}
	return 1;
}

/* Checks every RICE-compressed tile of the current HDU (a tile-compressed
 * image) with rice_fits() before CFITSIO decodes any.  Tiles stored with
 * GZIP or uncompressed are zlib's and CFITSIO's checked copies. */
static int check_rice(fitsfile *f, const char *path, int hdu, sp_err_t *err)
{
	char name[16], what[40], zname[FLEN_VALUE];
	long znaxis = 0, zn[8], zt[8], blocksize = 32, bytepix = 4, nrows = 0, pcount = 0, v;
	int status = 0, col = 0, rc;

	snprintf(what, sizeof what, "HDU %d", hdu);
	if ((rc = desi_fitskey_long(f, path, what, "ZNAXIS", 1, 7, NULL, &znaxis, err)) != 0 ||
	    (rc = desi_fitskey_long(f, path, what, "NAXIS2", 0, LONG_MAX, NULL, &nrows, err)) != 0 ||
	    (rc = desi_fitskey_long(f, path, what, "PCOUNT", 0, LONG_MAX, NULL, &pcount, err)) != 0)
		return rc;
	long long ntile = 1, tilepix = 1;
	for (int k = 0; k < znaxis; k++) {
		snprintf(name, sizeof name, "ZNAXIS%d", k + 1);
		if ((rc = desi_fitskey_long(f, path, what, name, 1, LONG_MAX, NULL, &zn[k], err)) != 0)
			return rc;
		long dflt = k == 0 ? zn[0] : 1;
		snprintf(name, sizeof name, "ZTILE%d", k + 1);
		if ((rc = desi_fitskey_long(f, path, what, name, 1, zn[k], &dflt, &zt[k], err)) != 0)
			return rc;
		if (__builtin_mul_overflow(ntile, (zn[k] + zt[k] - 1) / zt[k], &ntile) ||
		    __builtin_mul_overflow(tilepix, zt[k], &tilepix))
			return sp_seterr(err, SP_EFORMAT, "%s: HDU %d: absurd tiles", path, hdu);
	}
	for (int k = 1; k < 1000; k++) {
		snprintf(name, sizeof name, "ZNAME%d", k);
		rc = desi_fitskey_str(f, path, what, name, zname, sizeof zname, "", err);
		if (rc != 0)
			return rc;
		if (zname[0] == '\0')
			break;
		snprintf(name, sizeof name, "ZVAL%d", k);
		if (strcmp(zname, "BLOCKSIZE") == 0 || strcmp(zname, "BYTEPIX") == 0) {
			rc = desi_fitskey_long(f, path, what, name, 1, 1 << 20, NULL, &v, err);
			if (rc != 0)
				return rc;
			*(strcmp(zname, "BLOCKSIZE") == 0 ? &blocksize : &bytepix) = v;
		}
	}
	if (ntile != nrows)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: HDU %d: %lld tiles by ZNAXISn/ZTILEn but %ld table rows", path,
				 hdu, ntile, nrows);
	if (fits_get_colnum(f, CASEINSEN, "COMPRESSED_DATA", &col, &status) != 0)
		return desi_fits_fail(err, SP_EFORMAT, path, "compressed image without COMPRESSED_DATA",
				 status);
	unsigned char *buf = NULL;
	size_t cap = 0;
	rc = 0;
	for (long row = 1; row <= nrows && rc == 0; row++) {
		LONGLONG len = 0, off = 0;
		if (fits_read_descriptll(f, col, row, &len, &off, &status) != 0) {
			rc = desi_fits_fail(err, SP_EFORMAT, path, "compressed image tile", status);
			break;
		}
		if (len == 0)
			continue; /* stored in GZIP_COMPRESSED_DATA or UNCOMPRESSED_DATA */
		if (len < 0 || off < 0 || len > pcount || off > pcount - len) {
			rc = sp_seterr(err, SP_EFORMAT,
				       "%s: HDU %d: tile %ld lies outside the heap", path, hdu, row);
			break;
		}
		if ((size_t)len > cap) {
			unsigned char *nb = realloc(buf, (size_t)len);
			if (nb == NULL) {
				rc = sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
				break;
			}
			buf = nb;
			cap = (size_t)len;
		}
		if (fits_read_col(f, TBYTE, col, row, 1, len, NULL, buf, NULL, &status) != 0) {
			rc = desi_fits_fail(err, SP_EFORMAT, path, "compressed image tile", status);
			break;
		}
		/* This tile's pixels: edge tiles are cut at the image's edge. */
		long long t = row - 1, npix = 1;
		for (int k = 0; k < znaxis; k++) {
			long long nt = (zn[k] + zt[k] - 1) / zt[k], idx = t % nt;
			t /= nt;
			long long w = zn[k] - idx * zt[k];
			npix *= w < zt[k] ? w : zt[k];
		}
		/* CFITSIO decodes BYTEPIX other than 1 and 2 as 4. */
		int bp = bytepix == 1 || bytepix == 2 ? (int)bytepix : 4;
		if (!rice_fits(buf, (size_t)len, npix, (int)blocksize, bp))
			rc = sp_seterr(err, SP_EFORMAT,
				       "%s: HDU %d: RICE-compressed tile %ld is corrupt (its bit "
				       "stream ends before its %lld pixels)", path, hdu, row, npix);
	}
	free(buf);
	return rc;
}

/* ------------------------------------------------------------- opening */

int desi_fits_open(const char *path, fitsfile **f, sp_err_t *err)
{
	struct stat st;
	int status = 0, rc, nhdu = 0;
	char what[64];

	*f = NULL;
	if ((rc = sp_check_regular(path, err)) != 0)
		return rc;
	if (stat(path, &st) != 0)
		return sp_seterr(err, SP_EIO, "%s: cannot stat: %s", path, strerror(errno));
	FILE *raw = fopen(path, "rb");
	if (raw == NULL)
		return sp_seterr(err, SP_EIO, "%s: cannot open: %s", path, strerror(errno));
	rc = prescan(path, raw, (long long)st.st_size, err);
	fclose(raw);
	if (rc != 0)
		return rc;
	if (fits_open_diskfile(f, path, READONLY, &status) != 0) {
		*f = NULL;
		return desi_fits_fail(err, SP_EFORMAT, path, "cannot open as FITS", status);
	}
	/* Every HDU's header, now: one CFITSIO cannot parse is an error here,
	 * not an HDU that movnam later skips as if it were absent. */
	while (fits_movabs_hdu(*f, nhdu + 1, NULL, &status) == 0) {
		char zcmp[FLEN_VALUE] = "", hname[16];
		nhdu++;
		snprintf(hname, sizeof hname, "HDU %d", nhdu);
		if (fits_is_compressed_image(*f, &status) &&
		    ((rc = desi_fitskey_str(*f, path, hname, "ZCMPTYPE", zcmp, sizeof zcmp, "",
					    err)) != 0 ||
		     ((strcmp(zcmp, "RICE_1") == 0 || strcmp(zcmp, "RICE_ONE") == 0) &&
		      (rc = check_rice(*f, path, nhdu, err)) != 0))) {
			desi_fits_close(f);
			return rc;
		}
	}
	if (status != END_OF_FILE) {
		snprintf(what, sizeof what, "HDU %d has a header CFITSIO cannot read", nhdu + 1);
		rc = desi_fits_fail(err, SP_EFORMAT, path, what, status);
		desi_fits_close(f);
		return rc;
	}
	fits_clear_errmsg();
	status = 0;
	/* A truncated file otherwise shows up as a read error long after:
	 * compare the last HDU's end with the file's size. */
	LONGLONG start = 0, data = 0, end = 0;
	if (nhdu > 0 &&
	    fits_movabs_hdu(*f, nhdu, NULL, &status) == 0 &&
	    fits_get_hduaddrll(*f, &start, &data, &end, &status) == 0 &&
	    end > (LONGLONG)st.st_size) {
		desi_fits_close(f);
		return sp_seterr(err, SP_EFORMAT,
				 "%s: truncated: HDU %d ends at byte %lld but the file has %lld "
				 "bytes", path, nhdu, (long long)end, (long long)st.st_size);
	}
	status = 0;
	fits_movabs_hdu(*f, 1, NULL, &status);
	fits_clear_errmsg();
	return 0;
}

void desi_fits_close(fitsfile **f)
{
	int status = 0;

	if (f != NULL && *f != NULL)
		fits_close_file(*f, &status);
	fits_clear_errmsg();
	if (f != NULL)
		*f = NULL;
}
