/* Unit tests of the kept work buffers (tbuf.h): sp_thread_buf(), per thread,
 * and the pool, sp_scratch_get()/sp_scratch_put(). */
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
	unsigned char *a = sp_thread_buf(SP_TBUF_DESI_PATCH, 1000);
	assert_non_null(a);
	memset(a, 7, 1000);
	unsigned char *b = sp_thread_buf(SP_TBUF_DESI_PATCH, 10);
	assert_ptr_equal(a, b);
	assert_ptr_equal(sp_thread_buf(SP_TBUF_DESI_PATCH, 1000), a);
	assert_int_equal(a[999], 7);
	unsigned char *c = sp_thread_buf(SP_TBUF_DESI_PATCH, (size_t)4 << 20);
	assert_non_null(c);
	memset(c, 1, (size_t)4 << 20); /* all of it is there */
	assert_ptr_equal(sp_thread_buf(SP_TBUF_DESI_PATCH, 1000), c);
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
	unsigned char *q = sp_thread_buf(SP_TBUF_DESI_PATCH, (size_t)8 << 20); /* replaces p */
	assert_non_null(q);
	memset(q, 3, 4096);
	assert_ptr_equal(sp_thread_buf(SP_TBUF_DESI_DECOR, 4096), d);
	assert_int_equal(d[4095], 2);
	assert_ptr_equal(sp_thread_buf(SP_TBUF_DESI_PATCH, 4096), q);
	assert_non_null(sp_thread_buf(SP_TBUF_DESI_PATCH, 0)); /* 0 bytes: still a buffer */
}

static void test_bad_slot(void **state)
{
	(void)state;
	assert_null(sp_thread_buf(-1, 16));
	assert_null(sp_thread_buf(SP_TBUF_NSLOTS, 16));
}

static void *other_thread(void *arg)
{
	unsigned char *p = sp_thread_buf(SP_TBUF_DESI_PATCH, 1000);
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
	unsigned char *mine = sp_thread_buf(SP_TBUF_DESI_PATCH, 1000);
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

/* The pool hands back the smallest kept buffer that fits; a miss replaces
 * the largest kept one that is too small (the buffers stay as many as the
 * users at one time); at most SP_SCRATCH_KEEP are kept. */
static void test_pool_reuse(void **state)
{
	(void)state;
	sp_scratch_drain();
	unsigned char *a = sp_scratch_get(1000), *b = sp_scratch_get(5000);
	assert_non_null(a);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	memset(a, 1, 1000);
	memset(b, 2, 5000);
	sp_scratch_put(b);
	sp_scratch_put(a);
	sp_scratch_put(NULL);
	assert_ptr_equal(sp_scratch_get(900), a);   /* the smallest that fits, not the first */
	assert_ptr_equal(sp_scratch_get(1000), b);  /* a is out: the next that fits */
	sp_scratch_put(a);
	sp_scratch_put(b);
	/* both too small: the larger (b) is freed, a stays */
	unsigned char *c = sp_scratch_get(100000);
	assert_non_null(c);
	memset(c, 3, 100000);
	sp_scratch_put(c);
	assert_int_equal(sp_scratch_drain(), 2); /* a and c */
	assert_int_equal(sp_scratch_drain(), 0);
}

static void test_pool_cap(void **state)
{
	(void)state;
	enum { N = SP_SCRATCH_KEEP + 3 };
	void *v[N];
	sp_scratch_drain();
	for (int i = 0; i < N; i++) { /* N users at once, sizes 1..N KiB */
		v[i] = sp_scratch_get((size_t)(i + 1) << 10);
		assert_non_null(v[i]);
		memset(v[i], i, (size_t)(i + 1) << 10);
	}
	for (int i = 0; i < N; i++)
		sp_scratch_put(v[i]);
	/* the largest SP_SCRATCH_KEEP were kept: one of N KiB is there */
	void *big = sp_scratch_get((size_t)N << 10);
	assert_ptr_equal(big, v[N - 1]);
	sp_scratch_put(big);
	/* the smallest kept is of 4 KiB (N - KEEP + 1): a 1 KiB request gets it */
	void *small = sp_scratch_get(1);
	assert_ptr_equal(small, v[N - SP_SCRATCH_KEEP]);
	assert_int_equal(sp_scratch_drain(), SP_SCRATCH_KEEP - 1);
	sp_scratch_put(small);
	assert_int_equal(sp_scratch_drain(), 1);
	assert_null(sp_scratch_get((size_t)-1)); /* no overflow of the header's room */
}

static void *pool_user(void *arg)
{
	static const char failed[] = "out of memory";
	(void)arg;
	for (int i = 0; i < 2000; i++) {
		unsigned char *p = sp_scratch_get((size_t)((i * 7919) % 50000) + 1);
		if (p == NULL)
			return (void *)failed;
		p[0] = (unsigned char)i;
		sp_scratch_put(p);
	}
	return NULL;
}

/* Four threads getting and putting at once: no buffer handed out twice
 * (ASan and the allocator would see it), the pool within its cap. */
static void test_pool_threads(void **state)
{
	(void)state;
	pthread_t t[4];
	sp_scratch_drain();
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, pool_user, NULL), 0);
	for (int i = 0; i < 4; i++) {
		void *rc;
		assert_int_equal(pthread_join(t[i], &rc), 0);
		assert_null(rc);
	}
	int n = sp_scratch_drain();
	assert_true(n >= 1 && n <= 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kept_while_it_fits),
		cmocka_unit_test(test_slots_apart),
		cmocka_unit_test(test_bad_slot),
		cmocka_unit_test(test_threads_apart),
		cmocka_unit_test(test_pool_reuse),
		cmocka_unit_test(test_pool_cap),
		cmocka_unit_test(test_pool_threads),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
