/* DESI FITS inputs opened safely: plain disk files only, every HDU checked, header keywords parsed by us. */
#ifndef SP_DESI_FITSKEY_H
#define SP_DESI_FITSKEY_H

/*
 * DESIGN.  Two CFITSIO behaviours are unsafe on files we do not trust:
 * - fits_open_file() interprets its argument (extended file-name syntax:
 *   "x.fits(/other/path)" copies the file there, "x.fits[1]" selects an
 *   HDU, URLs, filters...).  desi_fits_open() opens a path as a plain disk
 *   file (fits_open_diskfile) after sp_check_regular(), so a FIFO or a
 *   device is refused without blocking and a name is only a name.
 * - CFITSIO 4.2's keyword-to-number conversion (fits_read_key with TINT,
 *   TLONG, TLONGLONG on a value card holding ~30 or more digits, or a long
 *   string) overflows a stack buffer: glibc's fortify check then aborts
 *   the whole process ("*** buffer overflow detected ***", exit 134).  So
 *   no keyword is converted by CFITSIO here: desi_fitskey_*() fetch the raw
 *   card (fits_read_card: a string compare, no conversion), cut the value
 *   text out of it themselves, and parse it with strtol/strtod, requiring
 *   the whole text to be consumed and the value to be in a stated range.
 * The structural keywords CFITSIO parses itself when it reads a header
 * (BITPIX, NAXIS, NAXISn, PCOUNT, GCOUNT, TFIELDS, TFORMn, TDIMn, ...) go
 * through its own checked path: crafted values there (30 digits, text)
 * give an error status, not a crash (tests/test_desi_fitskey.c checks
 * NAXIS1 and BITPIX; tests/fuzz/fuzz_fits.c covers the rest).
 * desi_fits_open() walks every HDU at open, so such an HDU makes the file
 * an error naming the HDU, rather than an HDU that silently "is not
 * there".
 */

#include <stddef.h>

#include <fitsio.h>

#include "error.h"

/* Opens path read-only as a plain disk file.  Refuses (one line naming
 * the file and the reason): anything but a regular file, a file CFITSIO
 * cannot open, an HDU whose header CFITSIO cannot parse, a file shorter
 * than its last HDU.  Returns 0 with *f open at the primary HDU, or a
 * negative SP_E* code with *f = NULL. */
int desi_fits_open(const char *path, fitsfile **f, sp_err_t *err);

/* Closes f (NULL is fine), clears CFITSIO's message stack and *f. */
void desi_fits_close(fitsfile **f);

/* Wraps a CFITSIO status into err, with the path and what was being done:
 * "PATH: what: CFITSIO's status text (its oldest stacked message)", or
 * "PATH: what: strerror" when a write failed on a system error (a full
 * disk, a file-size limit: the caller clears errno before it writes).
 * Clears CFITSIO's message stack; returns code. */
int desi_fits_fail(sp_err_t *err, int code, const char *path, const char *what, int status);

/* Keyword readers for the current HDU of f.  path and hdu (a name such as
 * "PSF" or "IMAGE") are only for messages: "PATH: HDU X, keyword K: ...".
 * A missing keyword is an error when dflt is NULL, else *v = *dflt. */

/* String value (quotes removed, '' unescaped, trailing blanks dropped)
 * into out[n]; an over-long or non-string value is an error. */
int desi_fitskey_str(fitsfile *f, const char *path, const char *hdu, const char *key,
		     char *out, size_t n, const char *dflt, sp_err_t *err);

/* Integer value in [lo, hi] (a real with an integral value is accepted,
 * as CFITSIO did). */
int desi_fitskey_long(fitsfile *f, const char *path, const char *hdu, const char *key, long lo,
		      long hi, const long *dflt, long *v, sp_err_t *err);

/* Finite real value in [lo, hi] (FITS 'D' exponents accepted). */
int desi_fitskey_double(fitsfile *f, const char *path, const char *hdu, const char *key,
			double lo, double hi, const double *dflt, double *v, sp_err_t *err);

/* The parsers on their own: the value text of an 80-character card
 * (without the keyword), and the text to a number.  0 or SP_EFORMAT (no
 * message: the callers above write it).  Exposed for the tests. */
int desi_fitskey_value_text(const char *card, char *val, size_t n, int *is_string);
int desi_fitskey_parse_long(const char *text, long *v);
int desi_fitskey_parse_double(const char *text, double *v);

/* ${header.KEY} of a graph (sp_graph_set_header_reader()): keyword key of
 * FITS file path, from the first HDU that has it (a string without its
 * quotes, a number as written), into value[n].  Opened as desi_fits_open()
 * does; recent answers are kept while the file is unchanged. */
int desi_header_value(const char *path, const char *key, char *value, size_t n, sp_err_t *err);

#endif /* SP_DESI_FITSKEY_H */
