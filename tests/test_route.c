/* The lanes' router (src/run/route.c): the CPU lane's probes, then its rule
 * t1 < R / r0, against figures worked out by hand (ROUTE_PROBE_ITEMS 1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "batch_int.h"

/* GPU lane: 4 drivers; CPU lane: 2.  Probes need an item per driver left. */
static void test_probe_needs_items(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	sp__route_init(&r, 7, drv, 2);
	assert_true(sp__route_take(&r, 1, 1)); /* 7 >= 6: a probe */
	assert_int_equal(r.left, 6);
	assert_true(sp__route_take(&r, 1, 1)); /* 6 >= 6: the other driver's */
	assert_false(sp__route_take(&r, 1, 1)); /* 5 < 6 */
	assert_int_equal(r.left, 5);            /* refused: not handed out */
	assert_true(sp__route_take(&r, 0, 1));   /* the GPU lane always takes */
	assert_int_equal(r.left, 4);
	sp__route_free(&r);
}

/* After both lanes have ended an item: take iff t1 < R t0 / drivers0. */
static void test_rule_from_means(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	sp__route_init(&r, 100, drv, 2);
	sp__route_done(&r, 0, 2.0); /* r0 = 4 / 2 s = 2 items/s */
	sp__route_done(&r, 1, 5.0); /* t1 = 5 s */
	r.left = 11;                /* the GPU lane alone: 5.5 s > 5 s: take */
	assert_true(sp__route_take(&r, 1, 1));
	assert_int_equal(r.left, 10); /* now 5 s, not > 5 s: refuse */
	assert_false(sp__route_take(&r, 1, 1));
	/* the mean weighs each new item 1/2: 5 then 1 gives 3 s < 5 s */
	sp__route_done(&r, 1, 1.0);
	assert_true(r.mean_s[1] > 2.999 && r.mean_s[1] < 3.001);
	assert_true(sp__route_take(&r, 1, 1));
	/* under MPI (not counted) the CPU lane takes what it asks for */
	r.left = 0;
	assert_true(sp__route_take(&r, 1, 0));
	sp__route_free(&r);
}

/* One lane: every driver takes. */
static void test_one_lane(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 2, 0 };
	sp__route_init(&r, 3, drv, 1);
	for (int i = 0; i < 3; i++)
		assert_true(sp__route_take(&r, 0, 1));
	assert_int_equal(r.left, 0);
	sp__route_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_probe_needs_items),
		cmocka_unit_test(test_rule_from_means),
		cmocka_unit_test(test_one_lane),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
