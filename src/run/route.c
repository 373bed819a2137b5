/* Which lane takes the next item (lanes.h): the CPU lane takes one only
 * while it is predicted to finish it before the GPU lane would finish
 * every item left, from the lanes' measured item times. */
#include <stdio.h>
#include <string.h>

#include "batch_int.h"
#include "clock.h"
#include "lanes.h"

/*
 * DESIGN.  The GPU lane (lane 0) takes every item it asks for.  A CPU lane
 * driver asks before each item; with R items not yet handed out, the GPU
 * lane alone would end them all in R / r0 (r0: its rate, its drivers over
 * its mean item time), and the CPU lane ends one in t1 (its mean item
 * time).  Taking the item shortens the batch iff t1 < R / r0, so that is
 * the rule.  The means are exponential (weight 1/2 on each new item), so a
 * lane slower than it was loses items at once.  Before the CPU lane has
 * ended an item its time is unknown: its drivers' first items are probes,
 * taken only while at least ROUTE_PROBE_ITEMS items per driver (of every
 * lane) remain, so that a batch too short to keep every driver busy is
 * left to the GPU lane.  A
 * driver that is refused ends: the rule only tightens as items run out.  Under MPI the items left are
 * rank 0's to count; a rank's CPU lane then takes what it asks for.
 */

#define ROUTE_PROBE_ITEMS 1

void sp__route_init(struct sp_route *r, size_t items, const size_t *drivers, int nlanes)
{
	memset(r, 0, sizeof *r);
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

int sp__route_take(struct sp_route *r, int lane, int counted)
{
	int take = 1;
	starpu_pthread_mutex_lock(&r->lock);
	if (lane > 0 && counted) {
		size_t drivers = 0;
		for (int l = 0; l < r->nlanes; l++)
			drivers += r->drivers[l];
		if (r->done[lane] == 0)
			take = r->left >= ROUTE_PROBE_ITEMS * drivers;
		else if (r->done[0] > 0)
			take = r->mean_s[lane] < (double)r->left * r->mean_s[0] / (double)r->drivers[0];
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
	for (int l = 0; l < r->nlanes; l++)
		fprintf(f, "[starpipe] %s lane: %zu driver(s), %zu item(s), mean %.3f s per item%s\n",
			sp_runtime_lane_name(l), r->drivers[l], r->done[l], r->mean_s[l],
			l > 0 && r->declined[l] > 0 ? " (then predicted to end after the other lane)"
						    : "");
}
