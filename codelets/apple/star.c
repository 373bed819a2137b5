/* RELION STAR and EMAN BOX coordinate files: writers in APPLE's layout, a tolerant STAR reader. */
#define _POSIX_C_SOURCE 200809L

#include "star.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"

/* A growing text buffer; a failed append sets oom and keeps the text. */
typedef struct text {
	char *s;
	size_t len, cap;
	int oom;
} text_t;

__attribute__((format(printf, 2, 3))) static void text_add(text_t *t, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int k = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (t->oom || k < 0) {
		t->oom = 1;
		return;
	}
	if (t->len + (size_t)k + 1 > t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 4096;
		while (cap < t->len + (size_t)k + 1)
			cap *= 2;
		char *s = realloc(t->s, cap);
		if (s == NULL) {
			t->oom = 1;
			return;
		}
		t->s = s;
		t->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(t->s + t->len, (size_t)k + 1, fmt, ap);
	va_end(ap);
	t->len += (size_t)k;
}

/* Writes the text to path atomically, or, when tmp is not NULL, into that
 * temporary of an output set (path is then only its final name). */
static int text_write(text_t *t, const char *tmp, const char *path, sp_err_t *err)
{
	const char *s = t->s != NULL ? t->s : "";
	int rc = t->oom ? sp_seterr(err, SP_ENOMEM, "%s: out of memory", path)
		 : tmp != NULL ? sp_write_file_into(tmp, path, s, t->len, err)
			       : sp_write_file_atomic(path, s, t->len, err);
	free(t->s);
	return rc;
}

static const char star_head[] = "data_root\n\nloop_\n_rlnCoordinateX #1\n_rlnCoordinateY #2\n";

int apple_star_write_into(const char *tmp, const char *path, const int *xy, size_t n,
			  sp_err_t *err)
{
	text_t t = { 0 };

	text_add(&t, "%s", star_head);
	for (size_t k = 0; k < n; k++)
		text_add(&t, "%d %d\n", xy[2 * k], xy[2 * k + 1]);
	return text_write(&t, tmp, path, err);
}

/* RELION's autopick score label; cryoSPARC imports it as the pick's score. */
#define FOM "_rlnAutopickFigureOfMerit"

int apple_picks_write_into(const char *tmp, const char *path, apple_star_format_t format,
			   const char *mic, const int *xy, const double *score, size_t n,
			   sp_err_t *err)
{
	text_t t = { 0 };

	if (format == APPLE_STAR_ASPIRE)
		return apple_star_write_into(tmp, path, xy, n, err);
	for (size_t k = 0; k < n; k++)
		if (!isfinite(score[k]))
			return sp_seterr(err, SP_ENONFINITE, "%s: pick %zu's score is %g", path, k,
					 score[k]);
	if (format == APPLE_STAR_CSV) {
		text_add(&t, "x,y,score\n");
		for (size_t k = 0; k < n; k++)
			text_add(&t, "%d,%d,%.6g\n", xy[2 * k], xy[2 * k + 1], score[k]);
		return text_write(&t, tmp, path, err);
	}
	if (format == APPLE_STAR_CRYOSPARC) {
		/* a STAR value is one token: a name with blanks or quotes would be
		 * read as several columns */
		if (mic == NULL || *mic == '\0' || strpbrk(mic, " \t\r\n\"'#") != NULL)
			return sp_seterr(err, SP_EINVAL, "%s: the micrograph name '%s' cannot be a STAR "
					 "value (empty, or has a blank, quote or '#')", path,
					 mic != NULL ? mic : "");
		text_add(&t, "data_root\n\nloop_\n_rlnMicrographName #1\n_rlnCoordinateX #2\n"
			     "_rlnCoordinateY #3\n" FOM " #4\n");
		for (size_t k = 0; k < n; k++)
			text_add(&t, "%s %d %d %.6g\n", mic, xy[2 * k], xy[2 * k + 1], score[k]);
		return text_write(&t, tmp, path, err);
	}
	text_add(&t, "%s" FOM " #3\n", star_head);
	for (size_t k = 0; k < n; k++)
		text_add(&t, "%d %d %.6g\n", xy[2 * k], xy[2 * k + 1], score[k]);
	return text_write(&t, tmp, path, err);
}

int apple_star_write(const char *path, const int *xy, size_t n, sp_err_t *err)
{
	return apple_star_write_into(NULL, path, xy, n, err);
}

int apple_star_write_f64(const char *path, const double *xy, size_t n, int decimals,
			 sp_err_t *err)
{
	text_t t = { 0 };

	if (decimals < 0 || decimals > 9)
		return sp_seterr(err, SP_EINVAL, "%s: decimals %d not in 0 .. 9", path, decimals);
	for (size_t k = 0; k < 2 * n; k++)
		if (!isfinite(xy[k]) || fabs(xy[k]) > 1e15)
			return sp_seterr(err, SP_EINVAL, "%s: coordinate %zu (%g) is not a finite "
					 "pixel position", path, k / 2, xy[k]);
	text_add(&t, "%s", star_head);
	for (size_t k = 0; k < n; k++) {
		if (decimals == 0)
			text_add(&t, "%lld %lld\n", llround(xy[2 * k]), llround(xy[2 * k + 1]));
		else
			text_add(&t, "%.*f %.*f\n", decimals, xy[2 * k], decimals, xy[2 * k + 1]);
	}
	return text_write(&t, NULL, path, err);
}

int apple_box_write(const char *path, const int *xy, size_t n, int box, sp_err_t *err)
{
	return apple_box_write_into(NULL, path, xy, n, box, err);
}

int apple_box_write_into(const char *tmp, const char *path, const int *xy, size_t n, int box,
			 sp_err_t *err)
{
	text_t t = { 0 };

	if (box < 1)
		return sp_seterr(err, SP_EINVAL, "%s: box size %d must be >= 1", path, box);
	for (size_t k = 0; k < n; k++)
		text_add(&t, "%d\t%d\t%d\t%d\n", xy[2 * k] - box / 2, xy[2 * k + 1] - box / 2, box,
			 box);
	return text_write(&t, tmp, path, err);
}

/* Reading.  States: outside a loop, in a loop's labels, in its rows. */
enum { OUTSIDE, LABELS, ROWS };

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

int apple_star_read(const char *path, double **xy, size_t *n, sp_err_t *err)
{
	*xy = NULL;
	*n = 0;
	FILE *f = sp_fopen_regular(path, err);
	if (f == NULL)
		return err ? err->code : SP_EIO;
	char *line = NULL, *tok[256];
	size_t lcap = 0, cnt = 0, cap = 0;
	double *out = NULL;
	int state = OUTSIDE, ncol = 0, xcol = -1, ycol = -1, found = 0, rc = 0;
	long lineno = 0;
	ssize_t len;

	while (!found && (len = getline(&line, &lcap, f)) >= 0) {
		lineno++;
		char *s = trim(line);
		if (*s == '#')
			continue;
		if (state == LABELS && *s == '\0')
			continue;
		if (state == LABELS && *s == '_') {
			char *end = s;
			while (*end != '\0' && !isspace((unsigned char)*end))
				end++;
			*end = '\0';
			if (strcmp(s, "_rlnCoordinateX") == 0)
				xcol = ncol;
			else if (strcmp(s, "_rlnCoordinateY") == 0)
				ycol = ncol;
			ncol++;
			continue;
		}
		if (state == LABELS)
			state = ROWS; /* the first row: falls through */
		if (state == ROWS) {
			if (*s == '\0' || strncmp(s, "data_", 5) == 0 || strncmp(s, "loop_", 5) == 0 ||
			    *s == '_') {
				if (xcol >= 0 && ycol >= 0) {
					found = 1;
					break;
				}
				state = OUTSIDE; /* another loop: look on */
			} else if (xcol >= 0 && ycol >= 0) {
				int nt = 0;
				for (char *p = strtok(s, " \t"); p != NULL && nt < 256;
				     p = strtok(NULL, " \t"))
					tok[nt++] = p;
				if ((nt < ncol && nt < 256) || nt <= xcol || nt <= ycol) {
					rc = sp_seterr(err, SP_EFORMAT,
						       "%s:%ld: expected %d columns, found %d", path,
						       lineno, ncol, nt);
					goto out;
				}
				if (cnt == cap) {
					size_t nc = cap ? 2 * cap : 256;
					double *o = realloc(out, nc * 2 * sizeof *o);
					if (o == NULL) {
						rc = sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
						goto out;
					}
					out = o;
					cap = nc;
				}
				for (int c = 0; c < 2; c++) {
					const char *v = tok[c == 0 ? xcol : ycol];
					char *end;
					errno = 0;
					double d = strtod(v, &end);
					if (*end != '\0' || errno != 0 || !isfinite(d)) {
						rc = sp_seterr(err, SP_EFORMAT,
							       "%s:%ld: '%s' is not a finite number "
							       "(%s)", path, lineno, v,
							       c == 0 ? "_rlnCoordinateX"
								      : "_rlnCoordinateY");
						goto out;
					}
					out[2 * cnt + c] = d;
				}
				cnt++;
				continue;
			} else {
				continue; /* rows of a loop we do not want */
			}
		}
		/* OUTSIDE: only "loop_" matters (data_ names and key-value
		 * pairs are ignored). */
		if (strncmp(s, "loop_", 5) == 0) {
			state = LABELS;
			ncol = 0;
			xcol = ycol = -1;
		}
	}
	if (!found && state != OUTSIDE && xcol >= 0 && ycol >= 0)
		found = 1; /* the loop ran to the end of the file */
	if (ferror(f))
		rc = sp_seterr(err, SP_EIO, "%s: read error", path);
	else if (!found)
		rc = sp_seterr(err, SP_EFORMAT,
			       "%s: no loop_ with both _rlnCoordinateX and _rlnCoordinateY", path);
out:
	free(line);
	fclose(f);
	if (rc != 0) {
		free(out);
		return rc;
	}
	*xy = cnt > 0 ? out : NULL;
	if (cnt == 0)
		free(out);
	*n = cnt;
	return 0;
}

/* The file's whole text (NUL-terminated) into *text, read from a regular
 * file only; it must not be empty and must end with a newline. */
static int read_whole(const char *path, char **text, size_t *len, sp_err_t *err)
{
	*text = NULL;
	FILE *f = sp_fopen_regular(path, err);
	if (f == NULL)
		return err ? err->code : SP_EIO;
	char *s = NULL;
	size_t cap = 0, n = 0, got;
	int rc = 0;
	do {
		if (cap - n < 65536) {
			char *t = realloc(s, cap = cap ? 2 * cap : 65536);
			if (t == NULL) {
				rc = sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
				break;
			}
			s = t;
		}
		got = fread(s + n, 1, cap - n - 1, f);
		n += got;
	} while (got > 0);
	if (rc == 0 && ferror(f))
		rc = sp_seterr(err, SP_EIO, "%s: read error", path);
	fclose(f);
	if (rc == 0 && n == 0)
		rc = sp_seterr(err, SP_EFORMAT, "%s: empty file", path);
	else if (rc == 0 && s[n - 1] != '\n')
		rc = sp_seterr(err, SP_EFORMAT, "%s: the last line is cut (no newline at the end)",
			       path);
	if (rc != 0) {
		free(s);
		return rc;
	}
	s[n] = '\0';
	*text = s;
	*len = n;
	return 0;
}

int apple_star_verify(const char *path, sp_err_t *err)
{
	char *text;
	size_t len;
	double *xy = NULL;
	size_t n = 0;
	int rc = read_whole(path, &text, &len, err);
	if (rc != 0)
		return rc;
	free(text);
	rc = apple_star_read(path, &xy, &n, err);
	free(xy);
	return rc;
}

int apple_box_verify(const char *path, sp_err_t *err)
{
	char *text;
	size_t len;
	int rc = read_whole(path, &text, &len, err);
	if (rc != 0)
		return rc;
	long lineno = 1;
	for (char *s = text; rc == 0 && *s != '\0'; lineno++) {
		char *nl = strchr(s, '\n'); /* there is one: the file ends with it */
		*nl = '\0';
		char *p = s;
		int k;
		for (k = 0; k < 4; k++) {
			char *end;
			errno = 0;
			(void)strtol(p, &end, 10);
			if (end == p || errno != 0)
				break;
			p = end;
		}
		if (k != 4 || p[strspn(p, " \t")] != '\0')
			rc = sp_seterr(err, SP_EFORMAT, "%s:%ld: expected 4 integers", path, lineno);
		s = nl + 1;
	}
	free(text);
	return rc;
}
