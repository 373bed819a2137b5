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
 * lane alone would end them all in R / r0 (r0: the items it has ended over
 * the time since the batch began: its items overlap, so their mean time
 * says little of its rate, and early on this underrates it, which favours
 * the CPU lane's first items), and the CPU lane ends one in t1.  Taking the item shortens
 * the batch iff t1 < R / r0, so that is the rule.  t1 is the CPU lane's
 * mean item time once it has ended an item (exponential means, weight 1/2
 * on each new item, so a lane slower than it was loses items at once);
 * before that, the prior the caller gives (sp_runtime_cpu_lane_prior_s():
 * the items done so far in core-seconds, over the CPU lane's cores), which
 * needs an item ended: until then the CPU lane's drivers wait.  Without a
 * prior (NAN) they probe while at least ROUTE_PROBE_ITEMS items per driver
 * are left.  A driver that is refused ends: the rule only tightens as
 * items run out.  Under MPI the items left are rank 0's to count; a rank's
 * CPU lane then takes what it asks for.
 */

#define ROUTE_PROBE_ITEMS 1

void sp__route_init(struct sp_route *r, size_t items, const size_t *drivers, int nlanes,
		    double now_s)
{
	memset(r, 0, sizeof *r);
	r->t0_s = now_s;
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

int sp__route_take(struct sp_route *r, int lane, int counted, double prior_s, double now_s)
{
	int take = 1;
	starpu_pthread_mutex_lock(&r->lock);
	if (lane > 0 && counted) {
		size_t drivers = 0;
		for (int l = 0; l < r->nlanes; l++)
			drivers += r->drivers[l];
		const double t1 = r->done[lane] > 0 ? r->mean_s[lane] : prior_s;
		if (r->left == 0)
			take = 0;
		else if (r->done[0] > 0 && !isnan(t1)) {
			const double rest = (double)r->left * (now_s - r->t0_s) / (double)r->done[0];
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
	if (take)
		r->taken[lane]++;
	else
		r->declined[lane]++;
	starpu_pthread_mutex_unlock(&r->lock);
	return take;
}

void sp__route_done(struct sp_route *r, int lane, double seconds)
{
	if (lane < 0 || lane >= SP_MAX_LANES)
		return;
	starpu_pthread_mutex_lock(&r->lock);
	r->mean_s[lane] = r->done[lane] == 0 ? seconds : 0.5 * r->mean_s[lane] + 0.5 * seconds;
	r->done[lane]++;
	starpu_pthread_mutex_unlock(&r->lock);
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
