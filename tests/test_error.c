/* Unit tests of sp_seterr(): messages too long for sp_err_t keep their end. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "error.h"

/* A 4000-byte path of 40-byte components. */
static void long_path(char *p, size_t size)
{
	size_t n = 0;

	while (n + 41 < size && n < 4000)
		n += (size_t)snprintf(p + n, size - n, "/%s", "component-of-a-long-path-0123456789abcd");
	snprintf(p + n, size - n, "/file.npy");
}

/* Whether s is well-formed UTF-8 (here: no cut sequences). */
static int utf8_ok(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		int n = *p < 0x80 ? 1 : *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : *p >= 0xC2 ? 2 : 0;

		if (n == 0)
			return 0;
		for (int i = 1; i < n; i++)
			if ((p[i] & 0xC0) != 0x80)
				return 0;
		p += n;
	}
	return 1;
}

static void test_short_message_unchanged(void **state)
{
	sp_err_t err = { 0 };

	(void)state;
	assert_int_equal(sp_seterr(&err, SP_EIO, "%s: %s", "a.npy", "no such file"), SP_EIO);
	assert_int_equal(err.code, SP_EIO);
	assert_string_equal(err.msg, "a.npy: no such file");
	assert_int_equal(sp_seterr(NULL, SP_EINVAL, "x"), SP_EINVAL);
}

static void test_long_path_keeps_reason(void **state)
{
	sp_err_t err = { 0 };
	char path[4200];
	size_t n;

	(void)state;
	long_path(path, sizeof path);
	assert_true(strlen(path) >= 4000);
	sp_seterr(&err, SP_EIO, "cannot create folder '%s': %s", path, "Permission denied");
	n = strlen(err.msg);
	assert_true(n < sizeof err.msg);
	assert_true(n > sizeof err.msg - 16); /* uses the room it has */
	/* The start, the reason at the end, and the path's two ends. */
	assert_memory_equal(err.msg, "cannot create folder '/component", 32);
	assert_string_equal(err.msg + n - strlen("/file.npy': Permission denied"),
			    "/file.npy': Permission denied");
	assert_non_null(strstr(err.msg, "..."));
}

static void test_argument_is_the_message(void **state)
{
	sp_err_t err = { 0 };
	char path[4200];
	size_t n;

	(void)state;
	long_path(path, sizeof path);
	sp_seterr(&err, SP_EIO, "%s: No such file or directory", path);
	sp_seterr(&err, SP_EIO, "item 7: %s", err.msg);
	n = strlen(err.msg);
	assert_true(n < sizeof err.msg);
	assert_memory_equal(err.msg, "item 7: /component", 18);
	assert_string_equal(err.msg + n - strlen(": No such file or directory"),
			    ": No such file or directory");
}

static void test_no_long_word(void **state)
{
	sp_err_t err = { 0 };
	char words[3000];
	size_t n = 0;

	(void)state;
	while (n + 6 < sizeof words - 1)
		n += (size_t)snprintf(words + n, sizeof words - n, "word ");
	sp_seterr(&err, SP_EIO, "start %s: the reason", words);
	n = strlen(err.msg);
	assert_true(n < sizeof err.msg);
	assert_memory_equal(err.msg, "start word", 10);
	assert_string_equal(err.msg + n - strlen("word : the reason"), "word : the reason");
}

static void test_utf8_not_cut(void **state)
{
	sp_err_t err = { 0 };
	char path[4200];
	size_t n = 0;

	(void)state;
	while (n + 2 < 4000) { /* "é" is 2 bytes; an odd offset would cut one */
		path[n++] = '\xC3';
		path[n++] = '\xA9';
	}
	path[n] = '\0';
	for (int shift = 0; shift < 4; shift++) {
		sp_seterr(&err, SP_EIO, "%.*s'%s': reason", shift, "abc", path);
		assert_true(utf8_ok(err.msg));
		assert_string_equal(err.msg + strlen(err.msg) - 9, "': reason");
	}
}

static void test_fmt_fit(void **state)
{
	char small[16], tiny[4];

	(void)state;
	assert_int_equal(sp_fmt_fit(small, sizeof small, "%s", "short"), 5);
	assert_string_equal(small, "short");
	sp_fmt_fit(small, sizeof small, "%s: %s", "/a/very/long/path/name", "bad");
	assert_true(strlen(small) < sizeof small);
	assert_string_equal(small + strlen(small) - 5, ": bad");
	sp_fmt_fit(tiny, sizeof tiny, "%s", "abcdef");
	assert_string_equal(tiny, "abc");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_short_message_unchanged),
		cmocka_unit_test(test_long_path_keeps_reason),
		cmocka_unit_test(test_argument_is_the_message),
		cmocka_unit_test(test_no_long_word),
		cmocka_unit_test(test_utf8_not_cut),
		cmocka_unit_test(test_fmt_fit),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
