/* The lanes' router (src/run/route.c): the CPU lane takes an item iff
 * t1 < R / r0, in lane-seconds (an item's time over the items in flight
 * beside it): t1 its prior, then its own mean, times the items it would
 * run at once; 1 / r0 the item model's seconds per GPU-lane item until the
 * GPU lane's first items in flight have ended, then the GPU lane's own
 * mean; waiting for a first item without a model; and what a batch
 * measures for the item model; against figures worked out by hand. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "batch_int.h"

/* GPU lane: 4 drivers; CPU lane: 2.  Nothing ended, no model: the CPU lane waits. */
static void test_wait_for_a_first_item(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	size_t n = 0;
	sp__route_init(&r, 7, drv, 2);
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, &n), -1);
	assert_int_equal(sp__route_take(&r, 1, 1, 1.0, &n), -1);
	assert_int_equal(r.left, 7);                            /* waiting hands nothing out */
	assert_int_equal(sp__route_take(&r, 0, 1, NAN, &n), 1); /* the GPU lane always takes */
	assert_int_equal(n, 1);
	assert_int_equal(r.left, 6);
	sp__route_free(&r);
}

/* The prior, then the lane's own mean, times the items it would run at
 * once: take iff t1 < R x the GPU lane's seconds per item. */
static void test_rule_from_prior_then_means(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	size_t g[4], c1 = 0, c2 = 0;
	sp__route_init(&r, 100, drv, 2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(sp__route_take(&r, 0, 1, NAN, &g[i]), 1);
	assert_int_equal(g[3], 4);
	sp__route_done(&r, 0, 4.0, g[3]); /* 4 s, 4 in flight at its start and end: 1 s */
	assert_true(fabs(r.w_sum[0] - 1.0) < 1e-12);
	r.left = 7;                                              /* the GPU lane alone: 7 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 7.5, &c1), 0); /* prior 7.5 s > 7 s: refuse */
	assert_true(r.refused_t1[1] == 7.5 && r.refused_rest[1] == 7.0); /* said by -v */
	assert_int_equal(sp__route_take(&r, 1, 1, 6.5, &c1), 1); /* 6.5 s < 7 s: take */
	assert_int_equal(c1, 1);
	assert_int_equal(r.left, 6);                             /* 6 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 2.5, &c2), 1); /* beside the first: 2 x 2.5 = 5 s */
	assert_int_equal(c2, 2);
	assert_int_equal(sp__route_take(&r, 1, 1, 2.0, NULL), 0); /* 3 x 2 = 6 s, not < 5 s */
	/* its first item: 10 s, 1 in flight at its start, 2 at its end: 20/3 s */
	sp__route_done(&r, 1, 10.0, c1);
	assert_true(fabs(r.w_ema[1] - 20.0 / 3.0) < 1e-12);
	r.left = 10;                                              /* 10 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 0.1, NULL), 0); /* 2 x 20/3 = 13.3 s */
	sp__route_done(&r, 1, 1.0, c2); /* 1 s, 2 at its start, 1 at its end: 2/3 s */
	assert_true(fabs(r.w_ema[1] - 11.0 / 3.0) < 1e-12);      /* 0.5 x 20/3 + 0.5 x 2/3 */
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, NULL), 1); /* alone: 11/3 s < 10 s */
	/* under MPI (not counted) the CPU lane takes what it asks for */
	r.left = 0;
	assert_int_equal(sp__route_take(&r, 1, 0, NAN, NULL), 1);
	/* counted, nothing left: the driver ends */
	assert_int_equal(sp__route_take(&r, 1, 1, 0.1, NULL), 0);
	/* an item taken that did not run leaves the count */
	const size_t running = r.running[1];
	sp__route_release(&r, 1);
	assert_int_equal(r.running[1], running - 1);
	sp__route_free(&r);
}

/* Without a prior once an item has ended: probes while an item per driver is left. */
static void test_probe_without_prior(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	sp__route_init(&r, 7, drv, 2);
	sp__route_done(&r, 0, 2.0, 1);
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, NULL), 1); /* 7 >= 6 */
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, NULL), 1); /* 6 >= 6 */
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, NULL), 0); /* 5 < 6 */
	assert_int_equal(r.left, 5);
	sp__route_free(&r);
}

/* With the item model's GPU rate the CPU lane need not wait: R x 1.5 s
 * until the GPU lane's 4 drivers' first items have ended, then measured. */
static void test_gpu_rate_from_the_model(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	size_t c = 0;
	sp__route_init(&r, 8, drv, 2);
	r.gpu_item_s = 1.5;                                     /* 8 left: 12 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 13.0, NULL), 0); /* 13 > 12: refuse */
	assert_true(r.refused_rest[1] == 12.0);
	assert_int_equal(sp__route_take(&r, 1, 1, 11.0, &c), 1); /* 11 < 12: take */
	sp__route_release(&r, 1);
	r.running[0] = 4; /* the GPU lane keeps 4 in flight */
	sp__route_done(&r, 0, 10.0, 4);                         /* 1 of 4 ended: still the model */
	assert_int_equal(sp__route_take(&r, 1, 1, 10.0, &c), 1); /* 7 left: 10.5 s */
	sp__route_release(&r, 1);
	assert_int_equal(sp__route_take(&r, 1, 1, 9.5, NULL), 0); /* 6 left: 9 s */
	for (int i = 0; i < 3; i++) {
		r.running[0] = 4;
		sp__route_done(&r, 0, 10.0, 4);
	}
	/* 4 ended, each 10 s over 4 in flight: 2.5 s an item; 5 left: 12.5 s */
	r.left = 5;
	assert_int_equal(sp__route_take(&r, 1, 1, 12.0, &c), 1);
	sp__route_release(&r, 1);
	assert_int_equal(sp__route_take(&r, 1, 1, 10.5, NULL), 0); /* 4 x 2.5 = 10 s */
	sp__route_free(&r);
}

/* What a batch measures: the GPU lane's seconds per item (from 2 items),
 * the CPU lane's times its cores. */
static void test_measured_for_the_model(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 6, 2 };
	const unsigned ncpu[2] = { 14, 12 }, ncuda[2] = { 1, 0 };
	sp_lane_model_t m;
	sp__route_init(&r, 10, drv, 2);
	sp__route_done(&r, 0, 9.0, 6); /* 6 at its start and (none counted running) 0: 3 s */
	sp__route_measured(&r, ncpu, ncuda, &m);
	assert_int_equal(m.gpu_items, 0); /* 1 item: not yet */
	assert_int_equal(m.cpu_items, 0);
	sp__route_done(&r, 0, 3.0, 6); /* 1 s */
	sp__route_done(&r, 1, 4.0, 2); /* 4 s */
	sp__route_done(&r, 1, 6.0, 6); /* 2 s */
	sp__route_measured(&r, ncpu, ncuda, &m);
	assert_int_equal(m.gpu_items, 2);
	assert_true(fabs(m.gpu_item_s - 2.0) < 1e-12); /* (3 + 1) / 2 */
	assert_int_equal(m.cpu_items, 2);
	assert_true(fabs(m.cpu_core_s - 36.0) < 1e-12); /* 3 s x 12 cores */
	sp__route_free(&r);
	/* one lane of CPU workers: its seconds per item times its cores */
	const unsigned ncpu1[2] = { 16, 0 }, ncuda1[2] = { 0, 0 };
	sp__route_init(&r, 4, drv, 1);
	for (int i = 0; i < 4; i++)
		sp__route_done(&r, 0, 2.0 * (i + 1), 2 * (i + 1)); /* 2 s over 1, 2, 3, 4 in flight... */
	sp__route_measured(&r, ncpu1, ncuda1, &m);
	assert_int_equal(m.cpu_items, 4);
	assert_true(fabs(m.cpu_core_s - 32.0) < 1e-12); /* ...each 2 s of lane: 2 s x 16 */
	assert_int_equal(m.gpu_items, 0);
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
		assert_int_equal(sp__route_take(&r, 0, 1, NAN, NULL), 1);
	assert_int_equal(r.left, 0);
	sp__route_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_for_a_first_item),
		cmocka_unit_test(test_rule_from_prior_then_means),
		cmocka_unit_test(test_probe_without_prior),
		cmocka_unit_test(test_gpu_rate_from_the_model),
		cmocka_unit_test(test_measured_for_the_model),
		cmocka_unit_test(test_one_lane),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
