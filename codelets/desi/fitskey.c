/* DESI FITS header keywords parsed by us, and CFITSIO failures said one way (the safe
 * opening: fitscheck.c). */
#define _POSIX_C_SOURCE 200809L

#include "fitskey.h"

#include <errno.h>
#include <pthread.h>
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

/* ------------------------------------------- ${header.KEY} of an item */

/* Recent answers: a frame's parameters expand the same keyword several
 * times (its PSF, its output folder and name, when planned and when run);
 * a file that changed (size, mtime, inode) is read again. */
#define HDR_CACHE 64
static struct hdr_entry {
	char path[512], key[72], value[FLEN_VALUE];
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
} hdr_cache[HDR_CACHE];
static size_t hdr_next, hdr_used;
static pthread_mutex_t hdr_lock = PTHREAD_MUTEX_INITIALIZER;

static int same_file(const struct hdr_entry *e, const char *path, const char *key,
		     const struct stat *st)
{
	return strcmp(e->path, path) == 0 && strcmp(e->key, key) == 0 && e->dev == st->st_dev &&
	       e->ino == st->st_ino && e->size == st->st_size &&
	       e->mtime.tv_sec == st->st_mtim.tv_sec && e->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* The keyword's value text in the first HDU that has it. */
static int header_lookup(const char *path, const char *key, char *val, size_t n, sp_err_t *err)
{
	fitsfile *f = NULL;
	int rc = desi_fits_open(path, &f, err), status = 0, is_string;
	for (int h = 1; rc == 0; h++) {
		if (fits_movabs_hdu(f, h, NULL, &status) != 0) {
			fits_clear_errmsg();
			rc = sp_seterr(err, SP_EFORMAT, "%s: no HDU has header keyword %s", path, key);
			break;
		}
		char hname[16];
		snprintf(hname, sizeof hname, "HDU %d", h);
		int r = raw_value(f, path, hname, key, val, n, &is_string, err);
		if (r != 1) {
			rc = r;
			break;
		}
	}
	desi_fits_close(&f);
	return rc;
}

int desi_header_value(const char *path, const char *key, char *value, size_t n, sp_err_t *err)
{
	struct stat st;
	char val[FLEN_VALUE];
	if (stat(path, &st) != 0)
		return sp_seterr(err, SP_ENOENT, "%s: cannot read its header: %s", path, strerror(errno));
	pthread_mutex_lock(&hdr_lock);
	for (size_t i = 0; i < hdr_used; i++)
		if (same_file(&hdr_cache[i], path, key, &st)) {
			snprintf(val, sizeof val, "%s", hdr_cache[i].value);
			pthread_mutex_unlock(&hdr_lock);
			goto found;
		}
	pthread_mutex_unlock(&hdr_lock);
	int rc = header_lookup(path, key, val, sizeof val, err);
	if (rc != 0)
		return rc;
	if (strlen(path) < sizeof hdr_cache[0].path && strlen(key) < sizeof hdr_cache[0].key) {
		pthread_mutex_lock(&hdr_lock);
		struct hdr_entry *e = &hdr_cache[hdr_next];
		hdr_next = (hdr_next + 1) % HDR_CACHE;
		hdr_used += hdr_used < HDR_CACHE;
		snprintf(e->path, sizeof e->path, "%s", path);
		snprintf(e->key, sizeof e->key, "%s", key);
		snprintf(e->value, sizeof e->value, "%s", val);
		e->dev = st.st_dev;
		e->ino = st.st_ino;
		e->size = st.st_size;
		e->mtime = st.st_mtim;
		pthread_mutex_unlock(&hdr_lock);
	}
found:
	if (strlen(val) >= n)
		return sp_seterr(err, SP_EFORMAT, "%s: header keyword %s is longer than %zu characters",
				 path, key, n - 1);
	memcpy(value, val, strlen(val) + 1);
	return 0;
}
