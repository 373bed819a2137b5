/* Unit tests of the NPY reader and writer, on valid and corrupt files. */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

#include "npy.h"

static int setup(void **state)
{
	(void)state;
	return tmpdir_make("test_npy");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove();
}


static void write_raw(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* An NPY file with the given header dict text (padded as numpy does) and
 * ndata doubles 0, 1, 2 ...; version 1 or 2. */
static void write_npy(const char *path, int major, const char *dict,
		      size_t ndata)
{
	size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
	size_t hlen = (pre + dl + 1 + 63) / 64 * 64 - pre;
	size_t total = pre + hlen + 8 * ndata;
	unsigned char *buf = malloc(total);
	assert_non_null(buf);
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (unsigned char)major;
	buf[7] = 0;
	buf[8] = (unsigned char)(hlen & 0xff);
	buf[9] = (unsigned char)(hlen >> 8);
	if (major != 1)
		buf[10] = buf[11] = 0;
	memcpy(buf + pre, dict, dl);
	memset(buf + pre + dl, ' ', hlen - dl - 1);
	buf[pre + hlen - 1] = '\n';
	for (size_t e = 0; e < ndata; e++) {
		double x = (double)e;
		memcpy(buf + pre + hlen + 8 * e, &x, 8);
	}
	write_raw(path, buf, total);
	free(buf);
}

/* Asserts that opening (and, if that works, reading) path fails with code
 * and a message containing the path and phrase. */
static void expect_error(const char *path, int code, const char *phrase)
{
	sp_npy_t h;
	sp_err_t err = { 0, "" };
	int rc = sp_npy_open(path, &h, &err);
	if (rc == 0) {
		double *buf = malloc((size_t)sp_npy_count(&h) * 8 + 8);
		assert_non_null(buf);
		rc = sp_npy_read_f8(path, &h, buf, &err);
		free(buf);
	}
	if (rc != code || strstr(err.msg, path) != err.msg ||
	    strstr(err.msg, phrase) == NULL)
		print_message("# got %s (%d) \"%s\", expected %s and \"%s\"\n",
			      sp_err_name(rc), rc, err.msg, sp_err_name(code),
			      phrase);
	assert_int_equal(rc, code);
	assert_int_equal(err.code, code);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_non_null(strstr(err.msg, phrase));
}

#define DICT(descr, fo, shape)                                          \
	"{'descr': '" descr "', 'fortran_order': " fo ", 'shape': " shape \
	", }"

static void test_round_trip(void **state)
{
	(void)state;
	struct {
		int ndim;
		int64_t shape[3];
	} cases[] = { { 3, { 45, 3, 3 } }, { 1, { 10 } }, { 0, { 0 } },
		      { 2, { 0, 3 } }, { 2, { 7, 5 } } };
	char path[600];
	tmp_path(path, sizeof path, "rt.npy");
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		int64_t n = 1;
		for (int d = 0; d < cases[c].ndim; d++)
			n *= cases[c].shape[d];
		double *x = malloc((size_t)n * 8 + 8), *y = NULL;
		assert_non_null(x);
		for (int64_t e = 0; e < n; e++)
			x[e] = sin((double)e) * 1e10 + 1e-300 * (double)e;
		sp_err_t err = { 0, "" };
		sp_npy_t h;
		int rc = sp_npy_write_f8(path, x, cases[c].ndim, cases[c].shape,
					 &err);
		if (rc != 0)
			print_message("# %s\n", err.msg);
		assert_int_equal(rc, 0);
		rc = sp_npy_load_f8(path, cases[c].ndim, cases[c].shape, &y, &h,
				    &err);
		if (rc != 0)
			print_message("# %s\n", err.msg);
		assert_int_equal(rc, 0);
		assert_int_equal(h.major, 1);
		assert_string_equal(h.descr, "<f8");
		assert_int_equal(h.fortran_order, 0);
		assert_int_equal(h.data_offset % 64, 0);
		assert_int_equal(h.ndim, cases[c].ndim);
		for (int d = 0; d < h.ndim; d++)
			assert_int_equal(h.shape[d], cases[c].shape[d]);
		if (n > 0)
			assert_memory_equal(x, y, (size_t)n * 8);
		free(x);
		free(y);
	}
	/* No temp file is left behind. */
	char tmp[700];
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	assert_int_not_equal(access(tmp, F_OK), 0);
}

/* Our header is byte for byte numpy's (the shared data was written by
 * numpy): rewriting a shared file reproduces it exactly. */
static void test_numpy_identical(void **state)
{
	(void)state;
	const char *sh = getenv("SP_SHARED");
	char src[600], dst[600];
	snprintf(src, sizeof src, "%s/data/jsync/vijs_conj_n10.npy",
		 sh != NULL && *sh ? sh : "../shared");
	tmp_path(dst, sizeof dst, "copy.npy");
	double *x;
	sp_npy_t h;
	sp_err_t err = { 0, "" };
	int64_t shape[3] = { -1, 3, 3 };
	int rc = sp_npy_load_f8(src, 3, shape, &x, &h, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
	assert_int_equal(sp_npy_write_f8(dst, x, h.ndim, h.shape, &err), 0);
	free(x);
	FILE *a = fopen(src, "rb"), *b = fopen(dst, "rb");
	assert_non_null(a);
	assert_non_null(b);
	int ca, cb;
	long pos = 0;
	do {
		ca = getc(a);
		cb = getc(b);
		if (ca != cb)
			print_message("# differ at byte %ld\n", pos);
		assert_int_equal(ca, cb);
		pos++;
	} while (ca != EOF);
	fclose(a);
	fclose(b);
}

static void test_version2(void **state)
{
	(void)state;
	char path[600];
	tmp_path(path, sizeof path, "v2.npy");
	write_npy(path, 2, DICT("<f8", "False", "(2, 2)"), 4);
	sp_npy_t h;
	sp_err_t err = { 0, "" };
	double x[4];
	assert_int_equal(sp_npy_open(path, &h, &err), 0);
	assert_int_equal(h.major, 2);
	assert_int_equal(h.data_offset % 64, 0);
	assert_int_equal(sp_npy_read_f8(path, &h, x, &err), 0);
	assert_true(x[3] == 3.0);
	/* Python 2 longs, double quotes, no spaces, no trailing comma. */
	write_npy(path, 1, "{\"descr\":\"<f8\",\"shape\":(2L,2L),"
			   "\"fortran_order\":False}", 4);
	assert_int_equal(sp_npy_open(path, &h, &err), 0);
	assert_int_equal(h.ndim, 2);
	assert_int_equal(h.shape[1], 2);
}

static void test_corrupt(void **state)
{
	(void)state;
	char path[600];
	struct {
		const char *name, *dict;
		int major;
		size_t ndata;
		int code;
		const char *phrase;
	} cases[] = {
		{ "f4.npy", DICT("<f4", "False", "(3,)"), 1, 3, SP_ESHAPE,
		  "dtype '<f4' is not supported (expected '<f8', little-endian "
		  "float64)" },
		{ "be.npy", DICT(">f8", "False", "(3,)"), 1, 3, SP_ESHAPE,
		  "dtype '>f8' is not supported" },
		{ "u1.npy", DICT("|u1", "False", "(3,)"), 1, 3, SP_ESHAPE,
		  "dtype '|u1' is not supported" },
		{ "struct.npy",
		  "{'descr': [('a', '<f8')], 'fortran_order': False, "
		  "'shape': (3,), }", 1, 3, SP_ESHAPE,
		  "structured dtype" },
		{ "fortran.npy", DICT("<f8", "True", "(3, 2)"), 1, 6, SP_EFORMAT,
		  "fortran_order True is not supported" },
		{ "short.npy", DICT("<f8", "False", "(4,)"), 1, 3, SP_EFORMAT,
		  "truncated: expected 32 data bytes, found 24" },
		{ "extra.npy", DICT("<f8", "False", "(4,)"), 1, 5, SP_EFORMAT,
		  "extra data: expected 32 data bytes, found 40" },
		{ "garbage.npy", "{'descr': '<f8', \x01\xff junk", 1, 0,
		  SP_EFORMAT, "malformed header: expected a quoted string, "
			      "found byte 0x01" },
		{ "nobrace.npy", "'descr': '<f8'", 1, 0, SP_EFORMAT,
		  "malformed header: expected '{'" },
		{ "nokey.npy", "{'descr': '<f8', 'shape': (3,)}", 1, 3,
		  SP_EFORMAT, "lacks 'fortran_order'" },
		{ "dupkey.npy",
		  "{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, "
		  "'shape': (3,)}", 1, 3, SP_EFORMAT, "duplicate key 'descr'" },
		{ "unkey.npy",
		  "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), "
		  "'x': 1}", 1, 3, SP_EFORMAT, "unexpected key 'x'" },
		{ "notuple.npy", DICT("<f8", "False", "(3)"), 1, 3, SP_EFORMAT,
		  "a 1-tuple" },
		{ "negshape.npy", DICT("<f8", "False", "(-3,)"), 1, 0,
		  SP_EFORMAT, "non-negative integer" },
		{ "fo.npy", DICT("<f8", "0", "(3,)"), 1, 3, SP_EFORMAT,
		  "True or False" },
		{ "after.npy", DICT("<f8", "False", "(3,)") " x", 1, 3,
		  SP_EFORMAT, "only spaces after the header dict" },
		{ "unterminated.npy", "{'descr': '<f8", 1, 0, SP_EFORMAT,
		  "malformed header" },
	};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		tmp_path(path, sizeof path, cases[c].name);
		write_npy(path, cases[c].major, cases[c].dict, cases[c].ndata);
		expect_error(path, cases[c].code, cases[c].phrase);
	}

	/* Byte-level damage. */
	unsigned char buf[200];
	tmp_path(path, sizeof path, "magic.npy");
	write_raw(path, "\x93NUMPX\x01\x00\x10\x00{}", 12);
	expect_error(path, SP_EFORMAT, "not an NPY file (bad magic");
	tmp_path(path, sizeof path, "text.npy");
	write_raw(path, "hello", 5);
	expect_error(path, SP_EFORMAT, "bad magic");
	tmp_path(path, sizeof path, "empty.npy");
	write_raw(path, "", 0);
	expect_error(path, SP_EFORMAT, "file is empty");
	tmp_path(path, sizeof path, "hdrshort.npy");
	memcpy(buf, "\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fo", 30);
	write_raw(path, buf, 30);
	expect_error(path, SP_EFORMAT,
		     "truncated header: expected 118 bytes, found 20");
	tmp_path(path, sizeof path, "preshort.npy");
	write_raw(path, "\x93NUMPY\x01", 7);
	expect_error(path, SP_EFORMAT, "truncated header");
	tmp_path(path, sizeof path, "v4.npy");
	write_raw(path, "\x93NUMPY\x04\x00\x10\x00{}", 12);
	expect_error(path, SP_EFORMAT, "unsupported NPY version 4.0");

	/* Non-finite values, reported by flat C-order index. */
	double x[6] = { 0, 1, NAN, 3, 4, 5 };
	int64_t shape[2] = { 2, 3 };
	sp_err_t err = { 0, "" };
	tmp_path(path, sizeof path, "nan.npy");
	assert_int_equal(sp_npy_write_f8(path, x, 2, shape, &err), 0);
	expect_error(path, SP_ENONFINITE, "non-finite value at element 2");
	x[2] = 2;
	x[5] = -INFINITY;
	tmp_path(path, sizeof path, "inf.npy");
	assert_int_equal(sp_npy_write_f8(path, x, 2, shape, &err), 0);
	expect_error(path, SP_ENONFINITE, "non-finite value at element 5");

	/* Missing file, and a directory. */
	tmp_path(path, sizeof path, "nonexistent.npy");
	expect_error(path, SP_ENOENT, "no such file");
	expect_error(tmpdir, SP_EFORMAT, "is a folder");
	/* A FIFO nobody writes to must be refused, not block the reader. */
	tmp_path(path, sizeof path, "fifo.npy");
	assert_int_equal(mkfifo(path, 0600), 0);
	expect_error(path, SP_EFORMAT, "is a FIFO");
	expect_error("/dev/zero", SP_EFORMAT, "is a character device");
}

static void test_load_shape(void **state)
{
	(void)state;
	char path[600];
	double x[30] = { 0 }, *y = (double *)&y;
	int64_t shape[2] = { 10, 3 }, want[3] = { -1, 3, 3 };
	sp_err_t err = { 0, "" };
	tmp_path(path, sizeof path, "shape.npy");
	assert_int_equal(sp_npy_write_f8(path, x, 2, shape, &err), 0);
	int rc = sp_npy_load_f8(path, 3, want, &y, NULL, &err);
	if (rc != SP_ESHAPE)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, SP_ESHAPE);
	assert_null(y);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_non_null(strstr(err.msg, "shape (10, 3) does not match "
					"expected (any, 3, 3)"));
	int64_t want2[2] = { 10, 4 };
	rc = sp_npy_load_f8(path, 2, want2, &y, NULL, &err);
	assert_int_equal(rc, SP_ESHAPE);
	assert_non_null(strstr(err.msg, "expected (10, 4)"));
	int64_t want3[2] = { -1, 3 };
	assert_int_equal(sp_npy_load_f8(path, 2, want3, &y, NULL, &err), 0);
	free(y);
}

/* A failed write leaves no file at path and no temp file. */
static void test_write_fails(void **state)
{
	(void)state;
	char path[600];
	double x[3] = { 1, 2, 3 };
	int64_t shape[1] = { 3 };
	sp_err_t err = { 0, "" };

	/* The folder cannot be made (a file is in the way). */
	char blocker[700];
	tmp_path(blocker, sizeof blocker, "blocker");
	write_raw(blocker, "x", 1);
	tmp_path(path, sizeof path, "blocker/out.npy");
	int rc = sp_npy_write_f8(path, x, 1, shape, &err);
	assert_int_equal(rc, SP_EIO);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_int_not_equal(access(path, F_OK), 0);

	/* The output exists and is a folder, or a symlink: refused before any
	 * temporary is made, and nothing is touched. */
	tmp_path(path, sizeof path, "isdir.npy");
	assert_int_equal(mkdir(path, 0700), 0);
	char inner[700];
	snprintf(inner, sizeof inner, "%s/keep", path);
	write_raw(inner, "x", 1);
	rc = sp_npy_write_f8(path, x, 1, shape, &err);
	assert_int_equal(rc, SP_EIO);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_non_null(strstr(err.msg, "is a folder"));
	assert_int_equal(temps_beside(path), 0);
	assert_int_equal(access(inner, F_OK), 0);
	unlink(inner);
	rmdir(path);
	tmp_path(path, sizeof path, "link.npy");
	assert_int_equal(symlink(blocker, path), 0);
	rc = sp_npy_write_f8(path, x, 1, shape, &err);
	assert_int_equal(rc, SP_EIO);
	assert_non_null(strstr(err.msg, "symbolic link"));
	char got[4] = { 0 };
	FILE *bf = fopen(blocker, "r");
	assert_non_null(bf);
	assert_int_equal(fread(got, 1, 3, bf), 1);
	fclose(bf);
	assert_string_equal(got, "x"); /* the link's target is untouched */
	unlink(path);
	unlink(blocker);

	/* Bad arguments. */
	tmp_path(path, sizeof path, "bad.npy");
	assert_int_equal(sp_npy_write_f8(path, x, 9, shape, &err), SP_EINVAL);
	int64_t neg[1] = { -1 };
	assert_int_equal(sp_npy_write_f8(path, x, 1, neg, &err), SP_EINVAL);
	assert_int_not_equal(access(path, F_OK), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_numpy_identical),
		cmocka_unit_test(test_version2),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_load_shape),
		cmocka_unit_test(test_write_fails),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
