/* NPY files (NumPy's array format): header parsing, float64 reading and writing. */
#define _POSIX_C_SOURCE 200809L

#include "npy.h"
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c reads and writes '<f8' in place: a little-endian host is assumed"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1 << 20) /* numpy itself refuses more than 10000 */
#define NPY_MAX_ELEMS (INT64_C(1) << 58)

/* ---- header parser: the subset of Python literals numpy writes ---- */

typedef struct hparser {
	const char *s;
	size_t n, pos;
	char msg[160];
} hparser_t;

/* Describes the byte at the parser's position for messages. */
static const char *hp_here(const hparser_t *hp, char *buf, size_t size)
{
	if (hp->pos >= hp->n)
		snprintf(buf, size, "end of header");
	else if (hp->s[hp->pos] > 0x20 && hp->s[hp->pos] < 0x7f)
		snprintf(buf, size, "'%c'", hp->s[hp->pos]);
	else
		snprintf(buf, size, "byte 0x%02x",
			 (unsigned)(unsigned char)hp->s[hp->pos]);
	return buf;
}

static int hp_fail(hparser_t *hp, const char *expected)
{
	char here[32];
	snprintf(hp->msg, sizeof hp->msg,
		 "malformed header: expected %s, found %s at header offset %zu",
		 expected, hp_here(hp, here, sizeof here), hp->pos);
	return -1;
}

static void hp_ws(hparser_t *hp)
{
	while (hp->pos < hp->n &&
	       (hp->s[hp->pos] == ' ' || hp->s[hp->pos] == '\t' ||
		hp->s[hp->pos] == '\n' || hp->s[hp->pos] == '\r'))
		hp->pos++;
}

static int hp_peek(hparser_t *hp)
{
	hp_ws(hp);
	return hp->pos < hp->n ? (unsigned char)hp->s[hp->pos] : -1;
}

static int hp_expect(hparser_t *hp, char c, const char *what)
{
	if (hp_peek(hp) != (unsigned char)c)
		return hp_fail(hp, what);
	hp->pos++;
	return 0;
}

/* A quoted string of printable characters (backslash escapes one). */
static int hp_string(hparser_t *hp, char *out, size_t size)
{
	int q = hp_peek(hp);
	size_t len = 0;

	if (q != '\'' && q != '"')
		return hp_fail(hp, "a quoted string");
	hp->pos++;
	for (;;) {
		if (hp->pos >= hp->n)
			return hp_fail(hp, "a closing quote");
		unsigned char c = (unsigned char)hp->s[hp->pos];
		if (c == q) {
			hp->pos++;
			break;
		}
		if (c == '\\' && hp->pos + 1 < hp->n)
			c = (unsigned char)hp->s[++hp->pos];
		if (c < 0x20 || c >= 0x7f)
			return hp_fail(hp, "a printable character in a string");
		if (len + 1 >= size)
			return hp_fail(hp, "a shorter string");
		out[len++] = (char)c;
		hp->pos++;
	}
	out[len] = '\0';
	return 0;
}

static int hp_word(hparser_t *hp, const char *w)
{
	size_t len = strlen(w);
	if (hp->n - hp->pos < len || memcmp(hp->s + hp->pos, w, len) != 0)
		return 0;
	hp->pos += len;
	return 1;
}

/* A non-negative decimal integer (Python 2's 'L' suffix allowed). */
static int hp_int(hparser_t *hp, int64_t *v)
{
	int64_t x = 0;
	size_t start;

	hp_peek(hp);
	start = hp->pos;
	while (hp->pos < hp->n && hp->s[hp->pos] >= '0' && hp->s[hp->pos] <= '9') {
		if (x > NPY_MAX_ELEMS)
			return hp_fail(hp, "a smaller dimension");
		x = 10 * x + (hp->s[hp->pos++] - '0');
	}
	if (hp->pos == start)
		return hp_fail(hp, "a non-negative integer");
	if (hp->pos < hp->n && (hp->s[hp->pos] == 'L' || hp->s[hp->pos] == 'l'))
		hp->pos++;
	*v = x;
	return 0;
}

/* A tuple of integers: (), (n,), (n, m), (n, m,) ... */
static int hp_shape(hparser_t *hp, sp_npy_t *h)
{
	if (hp_expect(hp, '(', "'(' starting the shape tuple") < 0)
		return -1;
	int comma = 0;

	h->ndim = 0;
	for (;;) {
		if (hp_peek(hp) == ')') {
			if (h->ndim == 1 && !comma)
				return hp_fail(hp, "',' (a 1-tuple is '(n,)')");
			hp->pos++;
			return 0;
		}
		if (h->ndim == SP_NPY_MAXDIM)
			return hp_fail(hp, "at most 8 dimensions");
		if (hp_int(hp, &h->shape[h->ndim]) < 0)
			return -1;
		h->ndim++;
		int c = hp_peek(hp);
		comma = c == ',';
		if (comma) {
			hp->pos++;
		} else if (c != ')') {
			return hp_fail(hp, "',' or ')' in the shape tuple");
		}
	}
}

/* The header dict; descr is returned whole in descr (for messages). */
static int hp_dict(hparser_t *hp, sp_npy_t *h, char *descr, size_t dsize,
		   int *structured)
{
	int seen_descr = 0, seen_fo = 0, seen_shape = 0;

	*structured = 0;
	if (hp_expect(hp, '{', "'{' starting the header dict") < 0)
		return -1;
	for (;;) {
		char key[32];
		if (hp_peek(hp) == '}') {
			hp->pos++;
			break;
		}
		if (hp_string(hp, key, sizeof key) < 0)
			return -1;
		if (hp_expect(hp, ':', "':' after a key") < 0)
			return -1;
		if (strcmp(key, "descr") == 0 && !seen_descr) {
			seen_descr = 1;
			if (hp_peek(hp) == '[') {
				/* A structured dtype: not parsed, refused. */
				*structured = 1;
				snprintf(descr, dsize, "[...]");
				int depth = 0;
				do {
					char c = hp->s[hp->pos++];
					depth += (c == '[' || c == '(');
					depth -= (c == ']' || c == ')');
				} while (depth > 0 && hp->pos < hp->n);
				if (depth > 0)
					return hp_fail(hp, "']' closing descr");
			} else if (hp_string(hp, descr, dsize) < 0) {
				return -1;
			}
		} else if (strcmp(key, "fortran_order") == 0 && !seen_fo) {
			seen_fo = 1;
			hp_ws(hp);
			if (hp_word(hp, "True"))
				h->fortran_order = 1;
			else if (hp_word(hp, "False"))
				h->fortran_order = 0;
			else
				return hp_fail(hp, "True or False for fortran_order");
		} else if (strcmp(key, "shape") == 0 && !seen_shape) {
			seen_shape = 1;
			if (hp_shape(hp, h) < 0)
				return -1;
		} else {
			int known = !strcmp(key, "descr") || !strcmp(key, "shape") ||
				    !strcmp(key, "fortran_order");
			snprintf(hp->msg, sizeof hp->msg,
				 "malformed header: %s key '%s'",
				 known ? "duplicate" : "unexpected", key);
			return -1;
		}
		int c = hp_peek(hp);
		if (c == ',')
			hp->pos++;
		else if (c != '}')
			return hp_fail(hp, "',' or '}' in the header dict");
	}
	if (!seen_descr || !seen_fo || !seen_shape) {
		snprintf(hp->msg, sizeof hp->msg,
			 "malformed header: the dict lacks '%s'",
			 !seen_descr ? "descr" : !seen_fo ? "fortran_order" : "shape");
		return -1;
	}
	if (hp_peek(hp) != -1)
		return hp_fail(hp, "only spaces after the header dict");
	return 0;
}

/* ---- files ---- */

int64_t sp_npy_count(const sp_npy_t *h)
{
	int64_t n = 1;
	for (int d = 0; d < h->ndim; d++)
		n *= h->shape[d];
	return n;
}

/* The magic, the version and the header's length: the preamble's length in
 * *plen and the header's in *hlen; 0, or the error's code. */
static int npy_preamble(FILE *f, const char *path, off_t size, sp_npy_t *h, size_t *plen,
			size_t *hlen, sp_err_t *err)
{
	unsigned char pre[12];
	size_t got = fread(pre, 1, 10, f);

	if (got == 0 && size == 0)
		return sp_seterr(err, SP_EFORMAT, "%s: file is empty (expected an NPY file)", path);
	if (got < NPY_MAGIC_LEN || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: not an NPY file (bad magic: expected \\x93NUMPY)", path);
	if (got < 10)
		return sp_seterr(err, SP_EFORMAT, "%s: truncated header: file ends after %zu bytes",
				 path, got);
	h->major = pre[6];
	if ((pre[6] != 1 && pre[6] != 2 && pre[6] != 3) || pre[7] != 0)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: unsupported NPY version %u.%u (expected 1.0, 2.0 or 3.0)",
				 path, pre[6], pre[7]);
	if (h->major == 1) {
		*plen = 10;
		*hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
	} else {
		if (fread(pre + 10, 1, 2, f) != 2)
			return sp_seterr(err, SP_EFORMAT,
					 "%s: truncated header: file ends after 10 bytes", path);
		*plen = 12;
		*hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
			(size_t)pre[11] << 24;
	}
	if (*hlen > NPY_MAX_HEADER)
		return sp_seterr(err, SP_EFORMAT, "%s: header of %zu bytes is too long (at most %d)",
				 path, *hlen, NPY_MAX_HEADER);
	return 0;
}

/* The header dict read and parsed into h; its descr whole in descr (for
 * messages), h->descr cut to fit. */
static int npy_header(FILE *f, const char *path, size_t hlen, sp_npy_t *h, char *descr,
		      size_t dsize, int *structured, sp_err_t *err)
{
	char *hdr = malloc(hlen + 1);
	int rc = 0;

	if (hdr == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	size_t got = fread(hdr, 1, hlen, f);
	hparser_t hp = { .s = hdr, .n = hlen, .pos = 0 };
	if (got != hlen) {
		rc = sp_seterr(err, SP_EFORMAT, "%s: truncated header: expected %zu bytes, found %zu",
			       path, hlen, got);
	} else if (hp_dict(&hp, h, descr, dsize, structured) < 0) {
		rc = sp_seterr(err, SP_EFORMAT, "%s: %s", path, hp.msg);
	} else {
		size_t dl = strlen(descr);
		if (dl > sizeof h->descr - 1)
			dl = sizeof h->descr - 1; /* kept whole only in messages */
		memcpy(h->descr, descr, dl);
		h->descr[dl] = '\0';
	}
	free(hdr);
	return rc;
}

/* What starpipe reads: little-endian float64 in C order, a shape whose
 * bytes are the file's after the header. */
static int npy_check(const char *path, const sp_npy_t *h, const char *descr, int structured,
		     off_t size, sp_err_t *err)
{
	if (structured || strcmp(descr, "<f8") != 0)
		return sp_seterr(err, SP_ESHAPE,
				 "%s: %sdtype '%s' is not supported (expected "
				 "'<f8', little-endian float64)",
				 path, structured ? "structured " : "", descr);
	if (h->fortran_order)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: fortran_order True is not supported (expected "
				 "C order; use numpy.ascontiguousarray)",
				 path);
	int64_t count = 1;
	for (int d = 0; d < h->ndim; d++) {
		if (h->shape[d] != 0 && count > NPY_MAX_ELEMS / h->shape[d])
			return sp_seterr(err, SP_EFORMAT, "%s: shape too large", path);
		count *= h->shape[d];
	}
	int64_t want = count * 8, have = (int64_t)size - (int64_t)h->data_offset;
	if (have != want)
		return sp_seterr(err, SP_EFORMAT, "%s: %s: expected %lld data bytes, found %lld", path,
				 have < want ? "truncated" : "extra data", (long long)want,
				 (long long)have);
	return 0;
}

int sp_npy_open(const char *path, sp_npy_t *h, sp_err_t *err)
{
	struct stat st;
	char descr[64] = "";
	int structured = 0, rc;
	size_t hlen = 0, plen = 0;
	FILE *f = sp_fopen_regular(path, err);

	memset(h, 0, sizeof *h);
	if (f == NULL)
		return err ? err->code : SP_EIO;
	if (fstat(fileno(f), &st) != 0)
		rc = sp_seterr(err, SP_EIO, "%s: cannot stat: %s", path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		rc = sp_seterr(err, SP_EFORMAT, "%s: not a regular file", path);
	else if ((rc = npy_preamble(f, path, st.st_size, h, &plen, &hlen, err)) == 0 &&
		 (rc = npy_header(f, path, hlen, h, descr, sizeof descr, &structured, err)) == 0) {
		h->data_offset = plen + hlen;
		rc = npy_check(path, h, descr, structured, st.st_size, err);
	}
	fclose(f);
	return rc;
}

int sp_npy_read_f8(const char *path, const sp_npy_t *h, double *data,
		   sp_err_t *err)
{
	const size_t block = (size_t)1 << 23; /* 64 MiB of doubles */
	int64_t count = sp_npy_count(h), done = 0;
	int rc = 0;
	FILE *f = sp_fopen_regular(path, err);

	if (f == NULL)
		return err ? err->code : SP_EIO;
	if (fseeko(f, (off_t)h->data_offset, SEEK_SET) != 0) {
		rc = sp_seterr(err, SP_EIO, "%s: cannot seek: %s", path,
			       strerror(errno));
		goto out;
	}
	while (done < count) {
		size_t want = (size_t)(count - done) < block ? (size_t)(count - done)
							     : block;
		size_t got = fread(data + done, sizeof *data, want, f);
		if (got != want) {
			if (ferror(f))
				rc = sp_seterr(err, SP_EIO, "%s: read error: %s",
					       path, strerror(errno));
			else
				rc = sp_seterr(err, SP_EFORMAT,
					       "%s: truncated: expected %lld data "
					       "bytes, found %lld", path,
					       (long long)(count * 8),
					       (long long)((done + (int64_t)got) * 8));
			goto out;
		}
		done += (int64_t)got;
	}
	for (int64_t e = 0; e < count; e++) {
		if (!isfinite(data[e])) {
			rc = sp_seterr(err, SP_ENONFINITE,
				       "%s: non-finite value at element %lld (%s)",
				       path, (long long)e,
				       isnan(data[e]) ? "NaN" : "Inf");
			goto out;
		}
	}
out:
	fclose(f);
	return rc;
}

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static void copy_fill(void *ctx, int64_t first, int64_t n, double *buf)
{
	memcpy(buf, (const double *)ctx + first, (size_t)n * sizeof *buf);
}

int sp_npy_write_f8_fill(const char *tmp, const char *label, int ndim, const int64_t *shape,
			 sp_npy_fill_cb fill, void *ctx, sp_err_t *err)
{
	const char *path = label;
	char hdr[512];
	size_t len;
	int64_t count = 1;
	int fd, e;

	if (ndim < 0 || ndim > SP_NPY_MAXDIM)
		return sp_seterr(err, SP_EINVAL, "%s: %s: ndim %d is not in 0..%d",
				 path, __func__, ndim, SP_NPY_MAXDIM);
	len = (size_t)snprintf(hdr, sizeof hdr,
			       "{'descr': '<f8', 'fortran_order': False, 'shape': (");
	for (int d = 0; d < ndim; d++) {
		if (shape[d] < 0 ||
		    (shape[d] != 0 && count > NPY_MAX_ELEMS / shape[d]))
			return sp_seterr(err, SP_EINVAL,
					 "%s: %s: invalid extent %lld of dimension %d",
					 path, __func__, (long long)shape[d], d);
		count *= shape[d];
		len += (size_t)snprintf(hdr + len, sizeof hdr - len, "%s%lld%s",
					d > 0 ? ", " : "", (long long)shape[d],
					ndim == 1 ? "," : "");
	}
	len += (size_t)snprintf(hdr + len, sizeof hdr - len, "), }");
	/* Pad with spaces and a final '\n' so that the data starts on a
	 * multiple of 64 bytes, as numpy does. */
	size_t total = (10 + len + 1 + 63) / 64 * 64;
	memset(hdr + len, ' ', total - 10 - len - 1);
	hdr[total - 10 - 1] = '\n';
	len = total - 10;
	unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
				  (unsigned char)(len & 0xff),
				  (unsigned char)(len >> 8) };

	/* The data goes out in blocks, so a transformed copy of a large array
	 * never exists in full (J-sync's synchronized rotations). */
	const int64_t block = (int64_t)1 << 16;
	double *buf = malloc((size_t)(count < block ? (count ? count : 1) : block) * sizeof *buf);
	if (buf == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	fd = sp_open_tmp(tmp, path, err);
	if (fd < 0) {
		free(buf);
		return fd;
	}
	int bad = write_all(fd, pre, sizeof pre) < 0 || write_all(fd, hdr, len) < 0;
	for (int64_t k = 0; !bad && k < count; k += block) {
		int64_t n = count - k < block ? count - k : block;
		fill(ctx, k, n, buf);
		bad = write_all(fd, buf, (size_t)n * sizeof *buf) < 0;
	}
	free(buf);
	if (bad) {
		e = errno;
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: write error: %s", path, strerror(e));
	}
	if (fsync(fd) != 0) {
		e = errno;
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: fsync failed: %s", path, strerror(e));
	}
	if (close(fd) != 0)
		return sp_seterr(err, SP_EIO, "%s: close failed: %s", path, strerror(errno));
	return 0;
}

int sp_npy_write_f8_into(const char *tmp, const char *label, const double *data, int ndim,
			 const int64_t *shape, sp_err_t *err)
{
	return sp_npy_write_f8_fill(tmp, label, ndim, shape, copy_fill, (void *)data, err);
}

int sp_npy_write_f8(const char *path, const double *data, int ndim,
		    const int64_t *shape, sp_err_t *err)
{
	sp_outset_t set = { 0 };
	const char *tmp;
	int rc = sp_outset_add(&set, path, &tmp, err);
	if (rc == 0)
		rc = sp_npy_write_f8_into(tmp, path, data, ndim, shape, err);
	if (rc == 0)
		rc = sp_outset_commit(&set, err);
	sp_outset_free(&set);
	return rc;
}

/* "(10, 3)" or, with any = 1, "-1" shown as "any". */
static void shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
	size_t len = (size_t)snprintf(buf, size, "(");
	for (int d = 0; d < ndim && len < size; d++) {
		if (shape[d] < 0)
			len += (size_t)snprintf(buf + len, size - len, "%sany",
						d > 0 ? ", " : "");
		else
			len += (size_t)snprintf(buf + len, size - len, "%s%lld",
						d > 0 ? ", " : "",
						(long long)shape[d]);
	}
	if (len < size)
		snprintf(buf + len, size - len, "%s)", ndim == 1 ? "," : "");
}

int sp_npy_load_f8(const char *path, int ndim_expected,
		   const int64_t *shape_expected, double **data, sp_npy_t *h,
		   sp_err_t *err)
{
	sp_npy_t local;
	int rc, ok;

	*data = NULL;
	if (h == NULL)
		h = &local;
	rc = sp_npy_open(path, h, err);
	if (rc != 0)
		return rc;
	ok = h->ndim == ndim_expected;
	for (int d = 0; ok && d < ndim_expected; d++)
		ok = shape_expected[d] < 0 || shape_expected[d] == h->shape[d];
	if (!ok) {
		char got[128], want[128];
		shape_str(got, sizeof got, h->ndim, h->shape);
		shape_str(want, sizeof want, ndim_expected, shape_expected);
		return sp_seterr(err, SP_ESHAPE,
				 "%s: shape %s does not match expected %s", path,
				 got, want);
	}
	int64_t count = sp_npy_count(h);
	double *buf = malloc(count > 0 ? (size_t)count * sizeof *buf : 1);
	if (buf == NULL)
		return sp_seterr(err, SP_ENOMEM,
				 "%s: out of memory for %lld values", path,
				 (long long)count);
	rc = sp_npy_read_f8(path, h, buf, err);
	if (rc != 0) {
		free(buf);
		return rc;
	}
	*data = buf;
	return 0;
}
