/* Unit tests of sp_thread_buf(): a thread's kept work buffers (tbuf.h). */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tbuf.h"

/* A buffer is the thread's until a larger one is asked for: the same
 * memory, its content kept, for every call that fits. */
static void test_kept_while_it_fits(void **state)
{
	(void)state;
	unsigned char *a = sp_thread_buf(SP_TBUF_APPLE, 1000);
	assert_non_null(a);
	memset(a, 7, 1000);
	unsigned char *b = sp_thread_buf(SP_TBUF_APPLE, 10);
	assert_ptr_equal(a, b);
	assert_ptr_equal(sp_thread_buf(SP_TBUF_APPLE, 1000), a);
	assert_int_equal(a[999], 7);
	unsigned char *c = sp_thread_buf(SP_TBUF_APPLE, (size_t)4 << 20);
	assert_non_null(c);
	memset(c, 1, (size_t)4 << 20); /* all of it is there */
	assert_ptr_equal(sp_thread_buf(SP_TBUF_APPLE, 1000), c);
}

/* Slots are separate: a call on one leaves the others' buffers alone. */
static void test_slots_apart(void **state)
{
	(void)state;
	unsigned char *p = sp_thread_buf(SP_TBUF_DESI_PATCH, 4096);
	unsigned char *d = sp_thread_buf(SP_TBUF_DESI_DECOR, 4096);
	assert_non_null(p);
	assert_non_null(d);
	assert_ptr_not_equal(p, d);
	memset(p, 1, 4096);
	memset(d, 2, 4096);
	assert_non_null(sp_thread_buf(SP_TBUF_APPLE, (size_t)8 << 20));
	assert_ptr_equal(sp_thread_buf(SP_TBUF_DESI_PATCH, 4096), p);
	assert_ptr_equal(sp_thread_buf(SP_TBUF_DESI_DECOR, 4096), d);
	assert_int_equal(p[4095], 1);
	assert_int_equal(d[4095], 2);
	assert_non_null(sp_thread_buf(SP_TBUF_APPLE, 0)); /* 0 bytes: still a buffer */
}

static void test_bad_slot(void **state)
{
	(void)state;
	assert_null(sp_thread_buf(-1, 16));
	assert_null(sp_thread_buf(SP_TBUF_NSLOTS, 16));
}

static void *other_thread(void *arg)
{
	unsigned char *p = sp_thread_buf(SP_TBUF_APPLE, 1000);
	if (p != NULL)
		memset(p, 9, 1000);
	*(void **)arg = p;
	return NULL;
}

/* Each thread has its own buffer: another thread's writes do not reach
 * this one's (the other's is freed when it exits). */
static void test_threads_apart(void **state)
{
	(void)state;
	unsigned char *mine = sp_thread_buf(SP_TBUF_APPLE, 1000);
	assert_non_null(mine);
	memset(mine, 3, 1000);
	void *theirs = NULL;
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, other_thread, &theirs), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_non_null(theirs);
	assert_ptr_not_equal(theirs, mine);
	assert_int_equal(mine[0], 3);
	assert_int_equal(mine[999], 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kept_while_it_fits),
		cmocka_unit_test(test_slots_apart),
		cmocka_unit_test(test_bad_slot),
		cmocka_unit_test(test_threads_apart),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
