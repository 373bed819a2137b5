/* Unit tests of the JSON writer's strings: always valid UTF-8, controls escaped. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "json.h"

/* The JSON text of one string value. */
static void check_str(const char *in, const char *want)
{
	sp_json_t *j = sp_json_new();

	assert_non_null(j);
	sp_json_str(j, in);
	assert_non_null(sp_json_text(j));
	assert_string_equal(sp_json_text(j), want);
	sp_json_free(&j);
	assert_null(j);
}

static void test_valid_utf8_kept(void **state)
{
	(void)state;
	check_str("plain.npy", "\"plain.npy\"");
	check_str("caf\xC3\xA9/\xE2\x82\xAC/\xF0\x9F\x98\x80", "\"caf\xC3\xA9/\xE2\x82\xAC/\xF0\x9F\x98\x80\"");
	check_str("\xEF\xBF\xBF\xF4\x8F\xBF\xBF", "\"\xEF\xBF\xBF\xF4\x8F\xBF\xBF\""); /* U+FFFF, U+10FFFF */
}

static void test_controls_escaped(void **state)
{
	(void)state;
	check_str("a\nb\tc\rd\"e\\f\x01g\x1f", "\"a\\nb\\tc\\rd\\\"e\\\\f\\u0001g\\u001f\"");
}

static void test_invalid_bytes_replaced(void **state)
{
	(void)state;
	/* The test of the issue: bytes 0xff 0xfe and a newline. */
	check_str("a\xFF\xFE\nb.npy", "\"a\\ufffd\\ufffd\\nb.npy\"");
	/* A lone continuation byte, a cut sequence, an overlong '/', a
	 * surrogate (U+D800), a code point past U+10FFFF, 0xC0/0xC1 leads. */
	check_str("\x80", "\"\\ufffd\"");
	check_str("\xC3", "\"\\ufffd\"");
	check_str("\xE2\x82", "\"\\ufffd\\ufffd\"");
	check_str("\xC0\xAF", "\"\\ufffd\\ufffd\"");
	check_str("\xE0\x80\xAF", "\"\\ufffd\\ufffd\\ufffd\"");
	check_str("\xED\xA0\x80", "\"\\ufffd\\ufffd\\ufffd\"");
	check_str("\xF4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
	check_str("\xC1\xBF", "\"\\ufffd\\ufffd\"");
	/* Valid text right after an invalid byte is kept. */
	check_str("\xFF\xC3\xA9", "\"\\ufffd\xC3\xA9\"");
}

static void test_keys_too(void **state)
{
	sp_json_t *j = sp_json_new();

	(void)state;
	sp_json_begin_object(j);
	sp_json_kv_str(j, "k\xFF", "v\xFE");
	sp_json_end_object(j);
	assert_string_equal(sp_json_text(j), "{\"k\\ufffd\":\"v\\ufffd\"}");
	sp_json_free(&j);
}

/* Arrays of several ranks merged into one: elements kept in order, commas
 * only between elements, empty arrays adding nothing. */
static void test_raw_elements_merge(void **state)
{
	(void)state;
	sp_json_t *j = sp_json_new();
	assert_non_null(j);
	sp_json_begin_array(j);
	sp_json_raw_elements(j, "[]");
	sp_json_raw_elements(j, "[{\"a\":1},{\"b\":[2,3]}]");
	sp_json_raw_elements(j, " [ ] ");
	sp_json_int(j, 4);
	sp_json_raw_elements(j, "[\"x\"]");
	sp_json_raw_elements(j, "not an array");
	sp_json_end_array(j);
	assert_string_equal(sp_json_text(j), "[{\"a\":1},{\"b\":[2,3]},4,\"x\"]");
	sp_json_free(&j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_utf8_kept),
		cmocka_unit_test(test_controls_escaped),
		cmocka_unit_test(test_invalid_bytes_replaced),
		cmocka_unit_test(test_keys_too),
		cmocka_unit_test(test_raw_elements_merge),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
