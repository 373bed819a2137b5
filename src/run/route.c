/* Which lane takes the next item (lanes.h): the CPU lane takes one only
 * while it is predicted to finish it before the GPU lane would finish
 * every item left, from the lanes' measured item times. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "batch_int.h"
#include "clock.h"
#include "lanes.h"

/*
 * DESIGN.  The GPU lane (lane 0) takes every item it asks for.  A CPU lane
 * driver asks before each item; with R items not yet handed out, the GPU
 * lane alone would end them all in R / r0, and the CPU lane ends one in
 * t1.  Taking the item shortens the batch iff t1 < R / r0, so that is the
 * rule.  Both are in lane-seconds, an item's time over the items in flight
 * beside it (itself included, the mean of its start's and its end's), so
 * that a lane's items, which overlap, give its rate.  1 / r0, the GPU
 * lane's seconds per item, is the item model's (lanes.h) until the GPU
 * lane's first items in flight have ended, then its own mean (its first
 * items, which pay the batch's start-up, make that an overestimate early
 * on, which favours the CPU lane's first items).  t1 is the CPU lane's
 * seconds per item times the items it would then run at once: its own
 * exponential mean once it has ended an item (weight 1/2 on each new item,
 * so a lane slower than it was loses items at once); before that, the
 * prior the caller gives (sp_runtime_cpu_lane_prior_s(): the item model's,
 * else an overestimate from the items done so far, which needs an item
 * ended).  Without r0 or t1 the CPU lane's drivers wait for an item to
 * end; without a prior once one has, they probe while at least
 * ROUTE_PROBE_ITEMS items per driver
 * are left.  A driver that is refused ends: the rule only tightens as
 * items run out.  Under MPI the items left are rank 0's to count; a rank's
 * CPU lane then takes what it asks for.
 */

#define ROUTE_PROBE_ITEMS 1

void sp__route_init(struct sp_route *r, size_t items, const size_t *drivers, int nlanes)
{
	memset(r, 0, sizeof *r);
	r->gpu_item_s = NAN;
	starpu_pthread_mutex_init(&r->lock, NULL);
	r->nlanes = nlanes;
	r->left = items;
	for (int l = 0; l < nlanes && l < SP_MAX_LANES; l++)
		r->drivers[l] = drivers[l];
}

void sp__route_free(struct sp_route *r)
{
	starpu_pthread_mutex_destroy(&r->lock);
}

/* Lane l's seconds per item (its lane-seconds: an item's time over the
 * items in flight beside it, itself included), or NAN before min items. */
static double per_item(const struct sp_route *r, int l, size_t min)
{
	if (r->done[l] < min || r->done[l] == 0)
		return NAN;
	return r->w_sum[l] / (double)r->done[l];
}

int sp__route_take(struct sp_route *r, int lane, int counted, double prior_w, size_t *inflight)
{
	int take = 1;
	starpu_pthread_mutex_lock(&r->lock);
	if (lane > 0 && counted) {
		size_t drivers = 0;
		for (int l = 0; l < r->nlanes; l++)
			drivers += r->drivers[l];
		/* the item would share the lane with those running there */
		const double w = r->done[lane] > 0 ? r->w_ema[lane] : prior_w;
		const double t1 = w * (double)(r->running[lane] + 1);
		double per = NAN; /* 1 / r0 */
		if (r->done[0] > 0 && (r->done[0] >= r->drivers[0] || isnan(r->gpu_item_s)))
			per = per_item(r, 0, 1);
		else if (!isnan(r->gpu_item_s))
			per = r->gpu_item_s;
		if (r->left == 0)
			take = 0;
		else if (!isnan(per) && !isnan(t1)) {
			const double rest = (double)r->left * per;
			take = t1 < rest;
			if (!take) { /* for -v: what the refusal compared */
				r->refused_t1[lane] = t1;
				r->refused_rest[lane] = rest;
			}
		}
		else if (r->done[lane] == 0 && r->done[0] == 0)
			take = -1; /* no item ended yet: wait for the first (the prior) */
		else if (r->done[lane] == 0)
			take = r->left >= ROUTE_PROBE_ITEMS * drivers;
	}
	if (take < 0) {
		starpu_pthread_mutex_unlock(&r->lock);
		return -1;
	}
	if (take && r->left > 0)
		r->left--;
	if (take) {
		r->taken[lane]++;
		r->running[lane]++;
		if (inflight != NULL)
			*inflight = r->running[lane];
	}
	else
		r->declined[lane]++;
	starpu_pthread_mutex_unlock(&r->lock);
	return take;
}

void sp__route_release(struct sp_route *r, int lane)
{
	if (lane < 0 || lane >= SP_MAX_LANES)
		return;
	starpu_pthread_mutex_lock(&r->lock);
	if (r->running[lane] > 0)
		r->running[lane]--;
	starpu_pthread_mutex_unlock(&r->lock);
}

void sp__route_done(struct sp_route *r, int lane, double seconds, size_t inflight)
{
	if (lane < 0 || lane >= SP_MAX_LANES)
		return;
	starpu_pthread_mutex_lock(&r->lock);
	/* the items in flight beside it: the mean of its start's and its end's */
	const double n = 0.5 * (double)(inflight + r->running[lane]);
	const double w = seconds / (n >= 1 ? n : 1);
	r->mean_s[lane] = r->done[lane] == 0 ? seconds : 0.5 * r->mean_s[lane] + 0.5 * seconds;
	r->w_ema[lane] = r->done[lane] == 0 ? w : 0.5 * r->w_ema[lane] + 0.5 * w;
	r->w_sum[lane] += w;
	r->done[lane]++;
	if (r->running[lane] > 0)
		r->running[lane]--;
	starpu_pthread_mutex_unlock(&r->lock);
}

void sp__route_measured(const struct sp_route *r, const unsigned *ncpu, const unsigned *ncuda,
			sp_lane_model_t *m)
{
	*m = (sp_lane_model_t){ NAN, 0, NAN, 0, NAN, 0 };
	for (int l = 0; l < r->nlanes && l < SP_MAX_LANES; l++) {
		const long n = (long)r->done[l];
		if (ncuda[l] > 0) {
			const double per = per_item(r, l, 2);
			if (l == 0 && !isnan(per))
				m->gpu_item_s = per, m->gpu_items = n;
		}
		else if (l > 0 || r->nlanes == 1) {
			const double per = per_item(r, l, 1);
			if (!isnan(per))
				m->cpu_core_s = per * ncpu[l], m->cpu_items = n;
		}
	}
}

void sp__route_describe(const struct sp_route *r, FILE *f)
{
	if (r->nlanes < 2)
		return;
	for (int l = 0; l < r->nlanes; l++) {
		fprintf(f, "[starpipe] %s lane: %zu driver(s), %zu item(s)", sp_runtime_lane_name(l),
			r->drivers[l], r->done[l]);
		if (r->done[l] > 0)
			fprintf(f, ", mean %.3f s per item", r->mean_s[l]);
		if (l > 0 && r->refused_t1[l] > 0)
			fprintf(f, "; then refused: %.3f s an item%s against %.3f s for the other lane "
				   "to end the items left", r->refused_t1[l],
				r->done[l] > 0 ? "" : " (the prior)", r->refused_rest[l]);
		fputc('\n', f);
	}
}
