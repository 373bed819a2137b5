/* DESI FITS header keywords parsed by us, and CFITSIO failures said one way (the safe
 * opening: fitscheck.c). */
#define _POSIX_C_SOURCE 200809L

#include "fitskey.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


/* errno of the system call that failed a CFITSIO write: CFITSIO keeps only
 * its own status, so a full disk or a file-size limit read "error writing
 * to FITS file" alone.  The writers clear errno before a file is written
 * (frame_write.c); it is read when a write status comes back. */
static const char *write_errno_text(int status, int errnum)
{
	if (status != WRITE_ERROR && status != FILE_NOT_CLOSED && status != FILE_NOT_CREATED)
		return NULL;
	return errnum == ENOSPC || errnum == EFBIG || errnum == EDQUOT || errnum == EIO ||
			       errnum == EROFS || errnum == EACCES
		       ? strerror(errnum)
		       : NULL;
}

int desi_fits_fail(sp_err_t *err, int code, const char *path, const char *what, int status)
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

/* ------------------------------------------------------------- parsing */

int desi_fitskey_value_text(const char *card, char *val, size_t n, int *is_string)
{
	size_t len = strnlen(card, 80), i = 10, o = 0;

	*is_string = 0;
	if (n == 0)
		return SP_EFORMAT;
	val[0] = '\0';
	if (len < 10 || card[8] != '=' || card[9] != ' ')
		return SP_EFORMAT; /* no value indicator */
	while (i < len && card[i] == ' ')
		i++;
	if (i < len && card[i] == '\'') {
		*is_string = 1;
		for (i++;; i++) {
			if (i >= len)
				return SP_EFORMAT; /* no closing quote */
			if (card[i] == '\'') {
				if (i + 1 < len && card[i + 1] == '\'') {
					i++;
				} else {
					i++;
					break;
				}
			}
			if (o + 1 >= n)
				return SP_EFORMAT;
			val[o++] = card[i];
		}
		while (o > 0 && val[o - 1] == ' ') /* trailing blanks are not significant */
			o--;
		val[o] = '\0';
		while (i < len && card[i] == ' ')
			i++;
		return i == len || card[i] == '/' ? 0 : SP_EFORMAT;
	}
	size_t b = i;
	while (i < len && card[i] != '/')
		i++;
	while (i > b && card[i - 1] == ' ')
		i--;
	if (i == b || i - b >= n)
		return SP_EFORMAT; /* undefined value, or too long */
	memcpy(val, card + b, i - b);
	val[i - b] = '\0';
	return 0;
}

int desi_fitskey_parse_double(const char *text, double *v)
{
	char buf[FLEN_VALUE];
	size_t len = strlen(text);
	int digits = 0;

	if (len == 0 || len >= sizeof buf)
		return SP_EFORMAT;
	/* FITS reals only: no "nan", "inf" or hexadecimal, which strtod takes. */
	for (size_t k = 0; k <= len; k++) {
		char c = text[k];
		if (c == 'D' || c == 'd')
			c = 'E';
		if (c >= '0' && c <= '9')
			digits = 1;
		else if (c != '\0' && c != '+' && c != '-' && c != '.' && c != 'E' && c != 'e')
			return SP_EFORMAT;
		buf[k] = c;
	}
	if (!digits)
		return SP_EFORMAT;
	char *end;
	errno = 0;
	double d = strtod(buf, &end);
	if (end != buf + len || !isfinite(d) || (errno == ERANGE && fabs(d) > 1.0))
		return SP_EFORMAT;
	*v = d;
	return 0;
}

int desi_fitskey_parse_long(const char *text, long *v)
{
	const char *p = text;
	char *end;

	if (*p == '+' || *p == '-')
		p++;
	if (*p >= '0' && *p <= '9') {
		errno = 0;
		long l = strtol(text, &end, 10);
		if (*end == '\0') {
			if (errno == ERANGE)
				return SP_EFORMAT;
			*v = l;
			return 0;
		}
	}
	/* "8.0", "8.E0": integral reals, which CFITSIO also took as 8 */
	double d;
	if (desi_fitskey_parse_double(text, &d) != 0 || d != floor(d) || d < (double)LONG_MIN ||
	    d >= -(double)LONG_MIN)
		return SP_EFORMAT;
	*v = (long)d;
	return 0;
}

/* ----------------------------------------------------------- reading */

/* The value text as a short, printable excerpt for messages. */
static const char *excerpt(const char *val, char *buf, size_t n)
{
	size_t len = strlen(val), keep = n - 4;

	if (len < n) {
		snprintf(buf, n, "%s", val);
	} else {
		memcpy(buf, val, keep);
		strcpy(buf + keep, "...");
	}
	for (char *c = buf; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '?';
	return buf;
}

/* The value text of key: 0, 1 when absent, or an error. */
static int raw_value(fitsfile *f, const char *path, const char *hdu, const char *key, char *val,
		     size_t n, int *is_string, sp_err_t *err)
{
	char card[FLEN_CARD];
	int status = 0;
	char what[96];

	if (fits_read_card(f, (char *)key, card, &status) != 0) {
		if (status == KEY_NO_EXIST) {
			fits_clear_errmsg();
			return 1;
		}
		snprintf(what, sizeof what, "%s HDU, keyword %s", hdu, key);
		return desi_fits_fail(err, SP_EFORMAT, path, what, status);
	}
	if (desi_fitskey_value_text(card, val, n, is_string) != 0) {
		char ex[32];
		return sp_seterr(err, SP_EFORMAT,
				 "%s: %s HDU, keyword %s: malformed value card '%s'", path, hdu,
				 key, excerpt(card, ex, sizeof ex));
	}
	return 0;
}

static int missing(const char *path, const char *hdu, const char *key, sp_err_t *err)
{
	return sp_seterr(err, SP_EFORMAT, "%s: %s HDU has no %s keyword", path, hdu, key);
}

int desi_fitskey_str(fitsfile *f, const char *path, const char *hdu, const char *key,
		     char *out, size_t n, const char *dflt, sp_err_t *err)
{
	char val[FLEN_VALUE], ex[32];
	int is_string, rc = raw_value(f, path, hdu, key, val, sizeof val, &is_string, err);

	if (rc < 0)
		return rc;
	if (rc == 1) {
		if (dflt == NULL)
			return missing(path, hdu, key, err);
		snprintf(out, n, "%s", dflt);
		return 0;
	}
	if (!is_string)
		return sp_seterr(err, SP_EFORMAT, "%s: %s HDU, keyword %s: %s is not a string",
				 path, hdu, key, excerpt(val, ex, sizeof ex));
	if (strlen(val) >= n)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: %s HDU, keyword %s: '%s' is longer than %zu characters", path,
				 hdu, key, excerpt(val, ex, sizeof ex), n - 1);
	memcpy(out, val, strlen(val) + 1);
	return 0;
}

int desi_fitskey_long(fitsfile *f, const char *path, const char *hdu, const char *key, long lo,
		      long hi, const long *dflt, long *v, sp_err_t *err)
{
	char val[FLEN_VALUE], ex[32];
	int is_string, rc = raw_value(f, path, hdu, key, val, sizeof val, &is_string, err);
	long l;

	if (rc < 0)
		return rc;
	if (rc == 1) {
		if (dflt == NULL)
			return missing(path, hdu, key, err);
		*v = *dflt;
		return 0;
	}
	if (is_string || desi_fitskey_parse_long(val, &l) != 0 || l < lo || l > hi)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: %s HDU, keyword %s: %s%s%s is not an integer in %ld..%ld",
				 path, hdu, key, is_string ? "'" : "", excerpt(val, ex, sizeof ex),
				 is_string ? "'" : "", lo, hi);
	*v = l;
	return 0;
}

int desi_fitskey_double(fitsfile *f, const char *path, const char *hdu, const char *key,
			double lo, double hi, const double *dflt, double *v, sp_err_t *err)
{
	char val[FLEN_VALUE], ex[32];
	int is_string, rc = raw_value(f, path, hdu, key, val, sizeof val, &is_string, err);
	double d;

	if (rc < 0)
		return rc;
	if (rc == 1) {
		if (dflt == NULL)
			return missing(path, hdu, key, err);
		*v = *dflt;
		return 0;
	}
	if (is_string || desi_fitskey_parse_double(val, &d) != 0 || !(d >= lo && d <= hi))
		return sp_seterr(err, SP_EFORMAT,
				 "%s: %s HDU, keyword %s: %s%s%s is not a number in %g..%g", path,
				 hdu, key, is_string ? "'" : "", excerpt(val, ex, sizeof ex),
				 is_string ? "'" : "", lo, hi);
	*v = d;
	return 0;
}
