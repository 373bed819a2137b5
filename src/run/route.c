/* Which lane takes the next item (lanes.h): the CPU lane takes one only
 * while it is predicted to finish it before the GPU lane would finish
 * every item left and the work it has in hand, from the lanes' measured
 * item times. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "batch_int.h"
#include "lanes.h"
#include "runtime.h"

/*
 * DESIGN.  The GPU lane (lane 0) takes every item it asks for.  A CPU lane
 * driver asks before each item.  With R items not yet handed out and B
 * items' worth of work still in the GPU lane's hands (its items in flight,
 * each counted by the share of an item's time it has still to run), the
 * GPU lane alone would end them all in (R + B) / r0, and the CPU lane ends
 * one in t1.  Taking the item shortens the batch iff t1 < (R + B) / r0, so
 * that is the rule.  B matters at the batch's end: the GPU lane keeps
 * several items in flight to stay fed, and it has taken the last of them
 * seconds before it ends them, so R alone would refuse the CPU lane items
 * it would have ended first and leave its cores idle for the batch's last
 * seconds.  r0 and t1 are in lane-seconds, an item's time over the items
 * in flight beside it (itself included, the mean of its start's and its
 * end's), so that a lane's items, which overlap, give its rate.  1 / r0,
 * the GPU lane's seconds per item, is the item model's (lanes.h) until the
 * GPU lane's first items in flight have ended, then its own mean (its
 * first items, which pay the batch's start-up, make that an overestimate
 * early on, which favours the CPU lane's first items).  An item's share
 * still to run is 1 - its age over the GPU lane's mean item time (before
 * one has ended: 1 / r0 times its drivers, a full lane's).  t1 is the CPU
 * lane's seconds per item times the items it would then run at once: its
 * own exponential mean once it has ended an item (weight 1/2 on each new
 * item, so a lane slower than it was loses items at once); before that,
 * the prior the caller gives (sp_runtime_cpu_lane_prior_s(): the item
 * model's, else an overestimate from the items done so far, which needs an
 * item ended).  Without r0 or t1 the CPU lane's drivers wait for an item
 * to end; without a prior once one has, they probe while at least
 * ROUTE_PROBE_ITEMS items per driver are left.  A driver that is refused
 * ends: the rule only tightens as items run out and the GPU lane's work
 * shrinks.  Once every item has been handed out while the CPU lane still
 * runs some, the GPU lane's workers join the CPU lane's context
 * (sp_runtime_lanes_join()): whole items would leave the CPU lane's last
 * ones to its own cores while the GPU idles between its lane's last
 * tasks and after them.  A worker in both contexts pops its own lane's
 * tasks first (StarPU pops the first context in its list with tasks
 * counted, the initial one first), the CPU lane's when it has none.
 * Joining earlier costs more than it gains: the GPU lane's items then
 * wait behind the CPU lane's tasks (doc/scheduling.md, "Lanes").  Under
 * MPI the items left are rank 0's to count; a rank's CPU
 * lane then takes what it asks for.
 */

#define ROUTE_PROBE_ITEMS 1

void sp__route_init(struct sp_route *r, size_t items, const size_t *drivers, int nlanes)
{
	memset(r, 0, sizeof *r);
	r->clock = sp_runtime_elapsed_s; /* the simulated node's under starpipe-sim */
	for (int l = 0; l < SP_MAX_LANES; l++)
		for (int k = 0; k < SP_ROUTE_SLOTS; k++)
			r->t0[l][k] = NAN;
	r->gpu_item_s = NAN;
	r->joined_s = NAN;
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

/* Lane l's work in hand at now, in items: each item in flight counted by
 * the share of its time still to run, 1 - its age over the lane's mean
 * item time (before one has ended: per times the lane's drivers), at
 * least 0 (an item older than the mean is about to end). */
static double in_hand(const struct sp_route *r, int l, double now, double per)
{
	const double item_s = r->done[l] > 0 ? r->mean_s[l] : per * (double)r->drivers[l];
	double b = 0;
	for (int k = 0; k < SP_ROUTE_SLOTS; k++) {
		if (isnan(r->t0[l][k]))
			continue;
		const double left = item_s > 0 ? 1 - (now - r->t0[l][k]) / item_s : 1;
		b += left < 0 ? 0 : left > 1 ? 1 : left;
	}
	return b;
}

/* Frees tk's slot of lane (the item ended, or did not run). */
static void untime(struct sp_route *r, int lane, const struct sp_route_ticket *tk)
{
	if (r->running[lane] > 0)
		r->running[lane]--;
	if (tk->slot >= 0 && tk->slot < SP_ROUTE_SLOTS)
		r->t0[lane][tk->slot] = NAN;
}

int sp__route_take(struct sp_route *r, int lane, int counted, double prior_w,
		   struct sp_route_ticket *tk)
{
	int take = 1;
	starpu_pthread_mutex_lock(&r->lock);
	const double now = r->clock();
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
			const double rest = ((double)r->left + in_hand(r, 0, now, per)) * per;
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
		r->submitting[lane]++;
		int slot = 0;
		while (slot < SP_ROUTE_SLOTS && !isnan(r->t0[lane][slot]))
			slot++;
		if (slot < SP_ROUTE_SLOTS)
			r->t0[lane][slot] = now;
		else
			slot = -1;
		if (tk != NULL)
			*tk = (struct sp_route_ticket){ r->running[lane], now, slot };
	}
	else
		r->declined[lane]++;
	starpu_pthread_mutex_unlock(&r->lock);
	return take;
}

void sp__route_release(struct sp_route *r, int lane, const struct sp_route_ticket *tk)
{
	if (lane < 0 || lane >= SP_MAX_LANES)
		return;
	starpu_pthread_mutex_lock(&r->lock);
	untime(r, lane, tk);
	if (r->submitting[lane] > 0) /* it submitted nothing */
		r->submitting[lane]--;
	starpu_pthread_mutex_unlock(&r->lock);
}

void sp__route_done(struct sp_route *r, int lane, const struct sp_route_ticket *tk)
{
	if (lane < 0 || lane >= SP_MAX_LANES)
		return;
	starpu_pthread_mutex_lock(&r->lock);
	const double seconds = r->clock() - tk->t0;
	const size_t inflight = tk->inflight;
	/* the items in flight beside it: the mean of its start's and its end's */
	const double n = 0.5 * (double)(inflight + r->running[lane]);
	const double w = seconds / (n >= 1 ? n : 1);
	r->mean_s[lane] = r->done[lane] == 0 ? seconds : 0.5 * r->mean_s[lane] + 0.5 * seconds;
	r->w_ema[lane] = r->done[lane] == 0 ? w : 0.5 * r->w_ema[lane] + 0.5 * w;
	r->w_sum[lane] += w;
	r->done[lane]++;
	untime(r, lane, tk);
	starpu_pthread_mutex_unlock(&r->lock);
}

void sp__route_submitted(struct sp_route *r, int lane)
{
	if (lane < 0 || lane >= SP_MAX_LANES)
		return;
	starpu_pthread_mutex_lock(&r->lock);
	if (r->submitting[lane] > 0)
		r->submitting[lane]--;
	starpu_pthread_mutex_unlock(&r->lock);
}

int sp__route_join_now(struct sp_route *r, long gpu_cuda_pending)
{
	int join = 0;
	starpu_pthread_mutex_lock(&r->lock);
	if (r->nlanes > 1 && r->left == 0 && r->submitting[0] == 0 && gpu_cuda_pending <= 0 &&
	    r->running[1] > 0 && isnan(r->joined_s)) {
		r->joined_s = r->clock();
		r->joined_items = r->running[1];
		join = 1;
	}
	starpu_pthread_mutex_unlock(&r->lock);
	return join;
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
				   "to end the items left and those in its hands", r->refused_t1[l],
				r->done[l] > 0 ? "" : " (the prior)", r->refused_rest[l]);
		fputc('\n', f);
	}
	if (!isnan(r->joined_s))
		fprintf(f, "[starpipe] %s lane: no item and no GPU task left at %.3f s: its workers "
			   "joined the cpu lane (%zu item(s) in flight there)\n",
			sp_runtime_lane_name(0), r->joined_s, r->joined_items);
}
