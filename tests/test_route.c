/* The lanes' router (src/run/route.c): the CPU lane waits for a first item
 * to end, then takes an item iff t1 < R / r0 (t1: its prior, then its own
 * mean; R / r0: the items left times the time since the batch began over
 * the GPU lane's items ended), against figures worked out by hand. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "batch_int.h"

/* GPU lane: 4 drivers; CPU lane: 2.  Nothing ended yet: the CPU lane waits. */
static void test_wait_for_a_first_item(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	sp__route_init(&r, 7, drv, 2, 0.0);
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, 1.0), -1);
	assert_int_equal(sp__route_take(&r, 1, 1, 1.0, 1.0), -1);
	assert_int_equal(r.left, 7);                        /* waiting hands nothing out */
	assert_int_equal(sp__route_take(&r, 0, 1, NAN, 1.0), 1); /* the GPU lane always takes */
	assert_int_equal(r.left, 6);
	sp__route_free(&r);
}

/* The prior, then the lane's own mean: take iff t1 < R (now - t0) / ended0. */
static void test_rule_from_prior_then_means(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	sp__route_init(&r, 100, drv, 2, 0.0);
	sp__route_done(&r, 0, 0.8); /* one GPU-lane item ended by now = 1 s: r0 = 1/s */
	r.left = 11;                /* the GPU lane alone: 11 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 12.0, 1.0), 0); /* prior 12 s > 11 s: refuse */
	assert_true(r.refused_t1[1] == 12.0 && r.refused_rest[1] == 11.0); /* said by -v */
	assert_int_equal(sp__route_take(&r, 1, 1, 10.0, 1.0), 1); /* prior 10 s < 11 s: take */
	assert_int_equal(r.left, 10);
	sp__route_done(&r, 1, 10.0); /* t1 = 10 s now, the prior ignored */
	assert_int_equal(sp__route_take(&r, 1, 1, 0.1, 1.0), 0); /* 10 s, not < 10 x 1 / 1 */
	assert_int_equal(sp__route_take(&r, 1, 1, 0.1, 2.0), 1); /* at 2 s the rest is 20 s */
	/* the mean weighs each new item 1/2: 10 then 0 gives 5 s < 10 s */
	sp__route_done(&r, 1, 0.0);
	assert_true(r.mean_s[1] > 4.999 && r.mean_s[1] < 5.001);
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, 1.0), 1);
	/* under MPI (not counted) the CPU lane takes what it asks for */
	r.left = 0;
	assert_int_equal(sp__route_take(&r, 1, 0, NAN, 1.0), 1);
	/* counted, nothing left: the driver ends */
	assert_int_equal(sp__route_take(&r, 1, 1, 0.1, 1.0), 0);
	sp__route_free(&r);
}

/* Without a prior once an item has ended: probes while an item per driver is left. */
static void test_probe_without_prior(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	sp__route_init(&r, 7, drv, 2, 0.0);
	sp__route_done(&r, 0, 2.0);
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, 1.0), 1); /* 7 >= 6 */
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, 1.0), 1); /* 6 >= 6 */
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, 1.0), 0); /* 5 < 6 */
	assert_int_equal(r.left, 5);
	sp__route_free(&r);
}

/* One lane: every driver takes. */
static void test_one_lane(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 2, 0 };
	sp__route_init(&r, 3, drv, 1, 0.0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(sp__route_take(&r, 0, 1, NAN, 1.0), 1);
	assert_int_equal(r.left, 0);
	sp__route_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_for_a_first_item),
		cmocka_unit_test(test_rule_from_prior_then_means),
		cmocka_unit_test(test_probe_without_prior),
		cmocka_unit_test(test_one_lane),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
