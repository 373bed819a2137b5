/* The lanes' router (src/run/route.c): the CPU lane takes an item iff
 * t1 < (R + B) / r0, in lane-seconds (an item's time over the items in
 * flight beside it): t1 its prior, then its own mean, times the items it
 * would run at once; 1 / r0 the item model's seconds per GPU-lane item
 * until the GPU lane's first items in flight have ended, then the GPU
 * lane's own mean; B the GPU lane's items in flight, each by the share of
 * its time still to run; waiting for a first item without a model; and
 * what a batch measures for the item model; against figures worked out by
 * hand, on a clock the tests set. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "batch_int.h"

static double now_s; /* the router's clock here */
static double test_clock(void) { return now_s; }

static void init(struct sp_route *r, size_t items, const size_t *drivers, int nlanes)
{
	sp__route_init(r, items, drivers, nlanes);
	r->clock = test_clock;
	now_s = 0;
}

/* An item of lane ends now after s seconds, inflight in flight at its start. */
static void end(struct sp_route *r, int lane, double s, size_t inflight)
{
	const struct sp_route_ticket tk = { inflight, now_s - s, -1 }; /* not timed */
	sp__route_done(r, lane, &tk);
}

/* GPU lane: 4 drivers; CPU lane: 2.  Nothing ended, no model: the CPU lane waits. */
static void test_wait_for_a_first_item(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	struct sp_route_ticket n = { 0, -1 };
	init(&r, 7, drv, 2);
	now_s = 3.0;
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, &n), -1);
	assert_int_equal(sp__route_take(&r, 1, 1, 1.0, &n), -1);
	assert_int_equal(r.left, 7);                            /* waiting hands nothing out */
	assert_int_equal(sp__route_take(&r, 0, 1, NAN, &n), 1); /* the GPU lane always takes */
	assert_int_equal(n.inflight, 1);
	assert_true(n.t0 == 3.0); /* its start, on the router's clock */
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
	struct sp_route_ticket g[4], c1, c2;
	init(&r, 100, drv, 2);
	for (int i = 0; i < 4; i++)
		assert_int_equal(sp__route_take(&r, 0, 1, NAN, &g[i]), 1);
	assert_int_equal(g[3].inflight, 4);
	now_s = 4.0;
	sp__route_done(&r, 0, &g[3]); /* 4 s, 4 in flight at its start and end: 1 s */
	assert_true(fabs(r.w_sum[0] - 1.0) < 1e-12);
	/* the other 3 are as old as the lane's mean item (4 s): nothing left
	 * of them to count */
	r.left = 7;                                              /* the GPU lane alone: 7 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 7.5, &c1), 0); /* prior 7.5 s > 7 s: refuse */
	assert_true(r.refused_t1[1] == 7.5 && r.refused_rest[1] == 7.0); /* said by -v */
	assert_int_equal(sp__route_take(&r, 1, 1, 6.5, &c1), 1); /* 6.5 s < 7 s: take */
	assert_int_equal(c1.inflight, 1);
	assert_int_equal(r.left, 6);                             /* 6 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 2.5, &c2), 1); /* beside the first: 2 x 2.5 = 5 s */
	assert_int_equal(c2.inflight, 2);
	assert_int_equal(sp__route_take(&r, 1, 1, 2.0, NULL), 0); /* 3 x 2 = 6 s, not < 5 s */
	/* its first item: 10 s, 1 in flight at its start, 2 at its end: 20/3 s */
	now_s = 14.0;
	sp__route_done(&r, 1, &c1);
	assert_true(fabs(r.w_ema[1] - 20.0 / 3.0) < 1e-12);
	r.left = 10;                                              /* 10 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 0.1, NULL), 0); /* 2 x 20/3 = 13.3 s */
	now_s = 15.0;
	sp__route_done(&r, 1, &c2); /* 11 s, 2 at its start, 1 at its end: 22/3 s */
	assert_true(fabs(r.w_ema[1] - 7.0) < 1e-12);             /* 0.5 x 20/3 + 0.5 x 22/3 */
	assert_int_equal(sp__route_take(&r, 1, 1, NAN, NULL), 1); /* alone: 7 s < 10 s */
	/* under MPI (not counted) the CPU lane takes what it asks for */
	r.left = 0;
	assert_int_equal(sp__route_take(&r, 1, 0, NAN, &c1), 1);
	/* counted, nothing left: the driver ends */
	assert_int_equal(sp__route_take(&r, 1, 1, 0.1, NULL), 0);
	/* an item taken that did not run leaves the count */
	const size_t running = r.running[1];
	sp__route_release(&r, 1, &c1);
	assert_int_equal(r.running[1], running - 1);
	sp__route_free(&r);
}

/* The GPU lane's items in flight count by the share of their time still
 * to run: (R + B) x 1.5 s, B from their age over the lane's item time. */
static void test_gpu_work_in_hand(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	struct sp_route_ticket g[4], c;
	init(&r, 8, drv, 2);
	r.gpu_item_s = 1.5;
	for (int i = 0; i < 4; i++)
		assert_int_equal(sp__route_take(&r, 0, 1, NAN, &g[i]), 1);
	/* none ended: an item takes 1.5 s x 4 drivers = 6 s; the 4 just
	 * started are all in hand: (4 + 4) x 1.5 = 12 s (R alone: 6 s) */
	assert_int_equal(sp__route_take(&r, 1, 1, 11.0, &c), 1);
	sp__route_release(&r, 1, &c);
	/* 3 s on, half of each is left: (3 + 2) x 1.5 = 7.5 s */
	now_s = 3.0;
	assert_int_equal(sp__route_take(&r, 1, 1, 7.6, NULL), 0);
	assert_true(fabs(r.refused_rest[1] - 7.5) < 1e-12);
	assert_int_equal(sp__route_take(&r, 1, 1, 7.4, &c), 1);
	sp__route_release(&r, 1, &c);
	/* one ends at 4.5 s (4.5 s, 4 at its start and end: 1.125 s a lane
	 * item, mean item 4.5 s); the other 3, 4.5 s old: none left in hand,
	 * (2 left) x 1.5 s (the model until 4 have ended) = 3 s */
	now_s = 4.5;
	sp__route_done(&r, 0, &g[0]);
	assert_int_equal(sp__route_take(&r, 1, 1, 3.1, NULL), 0);
	assert_true(fabs(r.refused_rest[1] - 3.0) < 1e-12);
	/* a new GPU item at 4.5 s is all in hand beside them: (1 + 1) x 1.5 */
	assert_int_equal(sp__route_take(&r, 0, 1, NAN, &g[0]), 1);
	assert_int_equal(sp__route_take(&r, 1, 1, 3.1, NULL), 0);
	assert_true(fabs(r.refused_rest[1] - 3.0) < 1e-12);
	/* 6.75 s: the new one half done, the 3 older ones (past the mean
	 * item) none, not less: (1 + 0.5) x 1.5 = 2.25 s */
	now_s = 6.75;
	assert_int_equal(sp__route_take(&r, 1, 1, 2.3, NULL), 0);
	assert_true(fabs(r.refused_rest[1] - 2.25) < 1e-12);
	assert_int_equal(sp__route_take(&r, 1, 1, 2.2, &c), 1);
	assert_int_equal(r.left, 0);
	/* the GPU items that end free their slots: nothing in hand */
	for (int i = 0; i < 4; i++)
		sp__route_done(&r, 0, &g[i]);
	for (int k = 0; k < SP_ROUTE_SLOTS; k++)
		assert_true(isnan(r.t0[0][k]));
	sp__route_free(&r);
}

/* Without a prior once an item has ended: probes while an item per driver is left. */
static void test_probe_without_prior(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 4, 2 };
	init(&r, 7, drv, 2);
	now_s = 2.0;
	end(&r, 0, 2.0, 1);
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
	struct sp_route_ticket c;
	init(&r, 8, drv, 2);
	r.gpu_item_s = 1.5;                                     /* 8 left: 12 s */
	assert_int_equal(sp__route_take(&r, 1, 1, 13.0, NULL), 0); /* 13 > 12: refuse */
	assert_true(r.refused_rest[1] == 12.0);
	assert_int_equal(sp__route_take(&r, 1, 1, 11.0, &c), 1); /* 11 < 12: take */
	sp__route_release(&r, 1, &c);
	/* the GPU lane keeps 4 in flight, started at 0: at 10 s, as old as
	 * its mean item, none is left in hand */
	r.running[0] = 4;
	now_s = 10.0;
	end(&r, 0, 10.0, 4);                                      /* 1 of 4 ended: still the model */
	assert_int_equal(sp__route_take(&r, 1, 1, 10.0, &c), 1); /* 7 left: 10.5 s */
	sp__route_release(&r, 1, &c);
	assert_int_equal(sp__route_take(&r, 1, 1, 9.5, NULL), 0); /* 6 left: 9 s */
	for (int i = 0; i < 3; i++) {
		r.running[0] = 4;
		end(&r, 0, 10.0, 4);
	}
	/* 4 ended, each 10 s over 4 in flight: 2.5 s an item; 5 left: 12.5 s */
	r.left = 5;
	assert_int_equal(sp__route_take(&r, 1, 1, 12.0, &c), 1);
	sp__route_release(&r, 1, &c);
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
	init(&r, 10, drv, 2);
	end(&r, 0, 9.0, 6); /* 6 at its start and (none counted running) 0: 3 s */
	sp__route_measured(&r, ncpu, ncuda, &m);
	assert_int_equal(m.gpu_items, 0); /* 1 item: not yet */
	assert_int_equal(m.cpu_items, 0);
	end(&r, 0, 3.0, 6); /* 1 s */
	end(&r, 1, 4.0, 2); /* 4 s */
	end(&r, 1, 6.0, 6); /* 2 s */
	sp__route_measured(&r, ncpu, ncuda, &m);
	assert_int_equal(m.gpu_items, 2);
	assert_true(fabs(m.gpu_item_s - 2.0) < 1e-12); /* (3 + 1) / 2 */
	assert_int_equal(m.cpu_items, 2);
	assert_true(fabs(m.cpu_core_s - 36.0) < 1e-12); /* 3 s x 12 cores */
	sp__route_free(&r);
	/* one lane of CPU workers: its seconds per item times its cores */
	const unsigned ncpu1[2] = { 16, 0 }, ncuda1[2] = { 0, 0 };
	init(&r, 4, drv, 1);
	for (int i = 0; i < 4; i++)
		end(&r, 0, 2.0 * (i + 1), 2 * (i + 1)); /* 2 s over 1, 2, 3, 4 in flight... */
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
	init(&r, 3, drv, 1);
	for (int i = 0; i < 3; i++)
		assert_int_equal(sp__route_take(&r, 0, 1, NAN, NULL), 1);
	assert_int_equal(r.left, 0);
	sp__route_free(&r);
}

/* The GPU lane's workers join the CPU lane once: every item handed out,
 * the GPU lane's all submitted, none of its GPU tasks left, and the CPU
 * lane still running one; not before, not twice, not for an idle CPU lane. */
static void test_join_when_the_gpu_lane_is_done(void **state)
{
	(void)state;
	struct sp_route r;
	const size_t drv[2] = { 2, 2 };
	struct sp_route_ticket g[2], c;
	init(&r, 3, drv, 2);
	r.gpu_item_s = 10.0; /* the model: the CPU lane's 1 s item beats (R + B) x 10 s */
	assert_int_equal(sp__route_take(&r, 0, 1, NAN, &g[0]), 1);
	assert_int_equal(sp__route_take(&r, 1, 1, 1.0, &c), 1);
	assert_false(sp__route_join_now(&r, 0)); /* an item left to hand out */
	assert_int_equal(sp__route_take(&r, 0, 1, NAN, &g[1]), 1);
	assert_int_equal(r.left, 0);
	assert_false(sp__route_join_now(&r, 0)); /* the GPU lane's items still submitting */
	sp__route_submitted(&r, 0);
	sp__route_submitted(&r, 1); /* the CPU lane's own does not count */
	assert_false(sp__route_join_now(&r, 0)); /* one GPU-lane item still submitting */
	sp__route_submitted(&r, 0);
	assert_false(sp__route_join_now(&r, 3)); /* 3 of its GPU tasks not ended */
	now_s = 4.0;
	assert_true(sp__route_join_now(&r, 0));
	assert_true(r.joined_s == 4.0);
	assert_int_equal(r.joined_items, 1);
	assert_false(sp__route_join_now(&r, 0)); /* once */
	sp__route_free(&r);
	/* the CPU lane has nothing in flight: no join */
	init(&r, 1, drv, 2);
	assert_int_equal(sp__route_take(&r, 0, 1, NAN, &g[0]), 1);
	sp__route_submitted(&r, 0);
	assert_false(sp__route_join_now(&r, 0));
	/* an item taken and released (none left to run) submits nothing */
	struct sp_route r2;
	init(&r2, 1, drv, 2);
	r2.gpu_item_s = 10.0;
	assert_int_equal(sp__route_take(&r2, 1, 1, 1.0, &c), 1);
	assert_int_equal(sp__route_take(&r2, 0, 1, NAN, &g[0]), 1);
	sp__route_release(&r2, 0, &g[0]);
	assert_true(sp__route_join_now(&r2, 0));
	sp__route_free(&r2);
	/* one lane: never */
	const size_t one[1] = { 2 };
	init(&r2, 1, one, 1);
	assert_int_equal(sp__route_take(&r2, 0, 1, NAN, &g[0]), 1);
	sp__route_submitted(&r2, 0);
	assert_false(sp__route_join_now(&r2, 0));
	sp__route_free(&r2);
	sp__route_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wait_for_a_first_item),
		cmocka_unit_test(test_rule_from_prior_then_means),
		cmocka_unit_test(test_probe_without_prior),
		cmocka_unit_test(test_gpu_work_in_hand),
		cmocka_unit_test(test_gpu_rate_from_the_model),
		cmocka_unit_test(test_measured_for_the_model),
		cmocka_unit_test(test_one_lane),
		cmocka_unit_test(test_join_when_the_gpu_lane_is_done),
	};

	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
