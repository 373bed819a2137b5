/* The batch driver: runs a graph over work items, one driver thread per item in flight. */
#define _GNU_SOURCE
#include "run.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cancel.h"
#include "cluster.h"
#include "bound.h"
#include "fsutil.h"
#include "batch_int.h"
#include "item.h"
#include "clock.h"
#include "json.h"
#include "runtime.h"
#include "sched_hp.h"

/*
 * DESIGN: items are pulled from a shared counter by `inflight` driver
 * threads.  A driver calls each stage's run() in topological order; run()
 * submits tasks and returns at once (or waits, for iterative stages), so
 * item k+1's read tasks are queued while item k computes.  Values are freed
 * in reverse order at the end of the item; freeing unregisters handles,
 * which waits for the item's tasks.  Errors stay with their item.
 *
 * Outputs: before anything runs, every item's output files are planned
 * (the stages' SP_PT_OUTPUT parameters, expanded); collisions refuse the
 * batch, complete outputs let --skip-existing skip the item, and dead runs'
 * temporaries are removed.  Writers write into temporaries of the item's
 * output set (sp_item_output), which is committed when the item has ended
 * well and aborted otherwise: an item's outputs appear together or not at
 * all, and a failed re-run never touches the previous good ones.
 */

/* "SIGTERM" */
static const char *sig_name(int sig)
{
	static _Thread_local char buf[32];
	const char *a = sigabbrev_np(sig);
	snprintf(buf, sizeof buf, "SIG%s", a != NULL ? a : "?");
	return buf;
}


/* The batch being run, for sp_run_interrupt(). */
static starpu_pthread_mutex_t cur_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;
static struct sp_batch *cur_batch;
static atomic_int stop_signal;

void sp_run_interrupt(int signo)
{
	atomic_store(&stop_signal, signo);
	sp_cancel_request(); /* the kernels running now return early */
	starpu_pthread_mutex_lock(&cur_lock);
	struct sp_batch *b = cur_batch;
	for (size_t i = 0; b != NULL && i < b->nitems; i++)
		if (atomic_load(&b->state[i].state) == IT_RUNNING)
			sp_status_set(&b->state[i].status, SP_ECANCELED, "%s: interrupted by %s",
				      b->state[i].path, sig_name(signo));
	starpu_pthread_mutex_unlock(&cur_lock);
}



/* Index of a stage's output in a flat values array.  A stage without
 * outputs still has one slot, for a value that only holds its resources
 * until the end of the item. */
static size_t value_slot(const sp_graph_t *g, size_t stage, size_t port)
{
	size_t off = 0;
	for (size_t s = 0; s < stage; s++)
		off += g->stages[s].kind->noutputs ? g->stages[s].kind->noutputs : 1;
	return off + port;
}

static size_t outputs_of(const sp_gstage_t *st)
{
	return st->kind->noutputs ? st->kind->noutputs : 1;
}

/* The stage whose value is in slot v. */
static size_t slot_stage(const sp_graph_t *g, size_t v)
{
	size_t s = 0;
	for (size_t off = 0; s < g->nstages; s++) {
		off += outputs_of(&g->stages[s]);
		if (v < off)
			break;
	}
	return s;
}

/* Submits the tiles of the group of tiled stages that ends at stage last
 * (see sp_stage_tile_fn): tile by tile, each tile stage by stage. */
static void run_tiles(struct sp_batch *b, sp_item_t *item, sp_value_t **values, size_t last)
{
	const sp_graph_t *g = item->g; /* b->g's stages, with the item's parameters */
	size_t first = last;
	while (first > 0 && g->stages[first - 1].kind->run_tile != NULL && !b->batch_wide[first - 1])
		first--;
	for (int t = 0; !sp_status_failed(&item->status); t++) {
		for (size_t s = first; s <= last && !sp_status_failed(&item->status); s++) {
			const sp_gstage_t *st = &g->stages[s];
			sp_value_t *in[16] = { 0 };
			for (size_t p = 0; p < st->kind->ninputs && p < 16; p++)
				in[p] = values[value_slot(g, st->inputs[p].stage, st->inputs[p].port)];
			int ret = st->kind->run_tile(item, st, in, values[value_slot(g, s, 0)], t);
			if (ret == SP_TILE_END && s == first)
				return;
			if (ret != 0)
				sp_status_set(&item->status, ret, "%s: stage '%s', tile %d: %s",
					      item->path, st->name, t, sp_strerror(ret));
		}
	}
}

/* the item's stages in order, until one fails; the number started */
static size_t run_stages(struct sp_batch *b, sp_item_t *item, sp_value_t **values)
{
	const sp_graph_t *g = item->g; /* b->g's stages, with the item's parameters */
	size_t s;
	for (s = 0; s < g->nstages && !sp_status_failed(&item->status); s++) {
		const sp_gstage_t *st = &g->stages[s];
		sp_value_t *in[16] = { 0 };
		for (size_t p = 0; p < st->kind->ninputs && p < 16; p++)
			in[p] = values[value_slot(g, st->inputs[p].stage, st->inputs[p].port)];
		if (b->batch_wide[s]) {
			sp__shared_run(b, item, s, in, &values[value_slot(g, s, 0)]);
			continue;
		}
		int ret = st->kind->run(item, st, in, &values[value_slot(g, s, 0)]);
		if (ret != 0)
			sp_status_set(&item->status, ret, "%s: stage '%s': %s", item->path, st->name,
				      sp_strerror(ret));
		/* the end of a group of tiled stages: submit their tiles */
		if (st->kind->run_tile != NULL &&
		    (s + 1 == g->nstages || g->stages[s + 1].kind->run_tile == NULL))
			run_tiles(b, item, values, s);
	}
	return s;
}

/* The values freed in reverse order, consumers' handles before producers'
 * (the batch-wide values are their entries'); then the item's hold on
 * those entries, which fails it if one of them failed. */
static void release_values(struct sp_batch *b, sp_item_t *item, sp_value_t **values,
			   size_t nslots)
{
	const sp_graph_t *g = b->g;
	for (size_t v = nslots; v-- > 0;)
		if (values[v] != NULL && values[v]->free_cb != NULL && !b->batch_wide[slot_stage(g, v)])
			values[v]->free_cb(values[v]);
	/* this item's tasks, which read the batch-wide data, are done */
	sp__shared_release(b, item, 1);
}

/* Every task of the item is done (freeing the values waited for them):
 * its outputs appear together, or not at all. */
static void commit_outputs(struct sp_batch *b, sp_item_t *item)
{
#ifndef SP_SIMGRID
	(void)b;
	if (!sp_status_failed(&item->status)) {
		sp_err_t err = { 0 };
		if (sp_outset_commit(&item->out, &err) != 0)
			sp_status_set_err(&item->status, &err);
	}
#else /* starpipe-sim: no codelet ran, so no output is kept; the commit's time is charged */
	sp_sim_item_end(b->g->pipeline);
#endif
	sp_outset_free(&item->out);
}

/* the item's end state, its journal line, its one-line failure, the counts */
static void finish_item(struct sp_batch *b, sp_item_t *item)
{
	int cancelled = atomic_load(&stop_signal) != 0 &&
			atomic_load(&item->status.code) == SP_ECANCELED;
	starpu_pthread_mutex_lock(&cur_lock);
	atomic_store(&item->state, cancelled ? IT_CANCELLED
				   : sp_status_failed(&item->status) ? IT_FAILED : IT_OK);
	starpu_pthread_mutex_unlock(&cur_lock);
	sp__journal_item(b, item);
	if (cancelled) {
		atomic_fetch_add(&b->ncancelled, 1);
	} else if (sp_status_failed(&item->status)) {
		/* one line naming the item, whichever task set the message */
		if (strstr(item->status.err.msg, item->path) == NULL)
			fprintf(stderr, "starpipe: %s: %s\n", item->path, item->status.err.msg);
		else
			fprintf(stderr, "starpipe: %s\n", item->status.err.msg);
		atomic_fetch_add(&b->nfailed, 1);
	} else {
		atomic_fetch_add(&b->nok, 1);
	}
	sp_runtime_item_done();
}

static void run_item(struct sp_batch *b, size_t idx)
{
	const sp_graph_t *g = b->g;
	sp_item_t *item = &b->state[idx];
	size_t nslots = value_slot(g, g->nstages, 0);
	sp_value_t **values = calloc(nslots ? nslots : 1, sizeof *values);

	/* the runtime's clock: the simulated node's under starpipe-sim */
	const double t0 = sp_runtime_elapsed_s();
#ifndef SP_SIMGRID
	const double c0 = sp_thread_cpu_s(); /* the report's driver_cpu_s */
#endif
	starpu_pthread_mutex_lock(&cur_lock);
	atomic_store(&item->state, IT_RUNNING);
	atomic_store(&item->started, sp_now_s());
	starpu_pthread_mutex_unlock(&cur_lock);
	if (atomic_load(&stop_signal) != 0)
		sp_status_set(&item->status, SP_ECANCELED, "%s: interrupted by %s", item->path,
			      sig_name(atomic_load(&stop_signal)));
	if (values == NULL) {
		sp_status_set(&item->status, SP_ENOMEM, "%s: out of memory", item->path);
		sp__route_submitted(&b->route, item->lane);
	} else {
		if (b->opts->verbose)
			fprintf(stderr, "[starpipe] item %zu/%zu: %s\n", idx + 1, b->nitems,
				item->path);
		run_stages(b, item, values);
		/* every task submitted (the router's join waits for it) */
		sp__route_submitted(&b->route, item->lane);
		release_values(b, item, values, nslots);
		free(values);
	}
	commit_outputs(b, item);
	const double t1 = sp_runtime_elapsed_s();
	item->seconds = t1 - t0;
	/* When it started and ended, seconds since the runtime started: a
	 * batch's steady rate is the rate its later items end at, free of the
	 * start's costs (first buffers, plans, pinning) */
	sp_item_report_num(item, "start_s", t0);
	sp_item_report_num(item, "end_s", t1);
#ifndef SP_SIMGRID
	/* What the item cost its driver thread (the report's driver_cpu_s):
	 * planning, submitting, its buffers' allocation (pinning on a GPU
	 * node) and release, the host work of stages that do some, the
	 * commit; not the tasks, which run on the workers.  (The simulator's
	 * host model charges these instead.) */
	sp_item_report_num(item, "driver_cpu_s", sp_thread_cpu_s() - c0);
#endif
	finish_item(b, item);
}


/* Whether item i is handed out at all: not another shard's, and (when
 * planned up front) not skipped or refused by the plan. */
static int want_item(size_t i, void *arg)
{
	struct sp_batch *b = arg;
	int s = atomic_load(&b->state[i].state);
	return b->lazy_plan ? s != IT_OTHER_SHARD : s == IT_PENDING;
}

static int batch_stopped(void) { return atomic_load(&stop_signal) != 0; }
int sp_run_stop_signal(void) { return atomic_load(&stop_signal); }

/* A driver thread: its batch and its lane. */
struct driver {
	struct sp_batch *b;
	int lane;
};

/* The GPU lane's workers join the CPU lane once the GPU lane has no GPU
 * work left (route.c): a thread that looks every JOIN_POLL_US while the
 * CPU lane still has items (its tasks end the wait: none of the drivers,
 * all waiting on their items' tasks, can).  NAN again when not made
 * (STARPIPE_LANES_JOIN=0). */
#define JOIN_POLL_US 2000
static void *joiner_main(void *arg)
{
	struct sp_batch *b = arg;
	while (!atomic_load(&b->drivers_done)) {
		if (sp__route_join_now(&b->route, sp_runtime_gpu_lane_cuda_pending())) {
			if (sp_runtime_lanes_join() == 0) {
				starpu_pthread_mutex_lock(&b->route.lock);
				b->route.joined_s = NAN;
				starpu_pthread_mutex_unlock(&b->route.lock);
			}
			break;
		}
		starpu_usleep(JOIN_POLL_US); /* SimGrid's clock under starpipe-sim */
	}
	return NULL;
}

/* --item-timeout: a thread that fails the items still running past the
 * limit.  StarPU cannot pre-empt a running task, so the item's tasks not
 * yet started return at once (they test its status), and the one running
 * ends first; the item then fails, its outputs never committed, and its
 * driver takes the next.  Polled every TIMEOUT_POLL_US; not under
 * starpipe-sim (no task runs there). */
#define TIMEOUT_POLL_US 20000
static void *timeout_main(void *arg)
{
	struct sp_batch *b = arg;
	const double limit = b->opts->item_timeout;
	while (!atomic_load(&b->drivers_done)) {
		const double now = sp_now_s();
		for (size_t i = 0; i < b->nitems; i++) {
			sp_item_t *it = &b->state[i];
			const double t0 = atomic_load(&it->started);
			if (atomic_load(&it->state) == IT_RUNNING && t0 > 0 && now - t0 > limit &&
			    !sp_status_failed(&it->status))
				sp_status_set(&it->status, SP_ETIMEDOUT,
					      "%s: timed out: still running %.3g s after it started "
					      "(--item-timeout %g)", it->path, now - t0, limit);
		}
		starpu_usleep(TIMEOUT_POLL_US);
	}
	return NULL;
}

static void *driver_main(void *arg)
{
	const struct driver *d = arg;
	struct sp_batch *b = d->b;
	for (;;) {
		/* a CPU lane's driver asks the router first (route.c); the
		 * prior is NAN before any item has ended (a wait) */
		int take;
		struct sp_route_ticket tk;
		while ((take = sp__route_take(&b->route, d->lane, !b->lazy_plan,
					      d->lane > 0 ? sp_runtime_cpu_lane_prior_s(
								    b->lane_model.cpu_core_s)
							  : NAN,
					      &tk)) < 0 &&
		       !batch_stopped())
			starpu_usleep(20000); /* SimGrid's clock under starpipe-sim */
		if (take <= 0)
			break;
		/* nothing when interrupted: no new item */
		size_t i = sp_dispatch_next();
		if (i == SIZE_MAX) {
			sp__route_release(&b->route, d->lane, &tk);
			break;
		}
		if (b->lazy_plan && atomic_load(&b->state[i].state) == IT_PENDING)
			sp__plan_item(b, &b->state[i]);
		if (atomic_load(&b->state[i].state) != IT_PENDING) {
			sp__route_release(&b->route, d->lane, &tk);
			sp__shared_release(b, &b->state[i], 0);
			continue; /* skipped or refused when planned */
		}
		b->state[i].lane = d->lane;
		/* the router times items on StarPU's clock, which starpipe-sim
		 * simulates (sp_now_s() is the host's) */
		run_item(b, i);
		sp__route_done(&b->route, d->lane, &tk);
	}
	return NULL;
}


/* The items' states and planned outputs; collisions between outputs and
 * `where: cuda` without a GPU refuse the batch (SP_EINVAL, res->err); the
 * batch-wide stages found.  The states exist even when it fails. */
static int batch_plan(struct sp_batch *b, sp_run_result_t *res)
{
	const sp_graph_t *g = b->g;
	size_t nitems = b->nitems;
	char ***outs = calloc(nitems ? nitems : 1, sizeof *outs);
	size_t *nouts = calloc(nitems ? nitems : 1, sizeof *nouts);
	int rc = 0;
	if (outs == NULL || nouts == NULL)
		rc = sp_seterr(&res->err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	for (size_t i = 0; i < nitems; i++) {
		b->state[i].g = sp_run_item_graph(g, b->opts->item_graphs, i);
		b->state[i].path = b->items[i];
		b->state[i].index = i;
		b->state[i].lane = -1; /* until a lane's driver takes it (the memory estimate: the node's) */
		starpu_pthread_mutex_init(&b->state[i].lock, NULL);
		sp_err_t why = { 0 };
		if (rc == 0 && sp__plan_outputs(b->state[i].g, b->items[i], i, &outs[i], &nouts[i], &why) != 0)
			rc = sp_seterr(&res->err, SP_ENOMEM, "out of memory planning %zu items", nitems);
		if (why.code != 0) /* this item fails alone, when it runs */
			sp_status_set_err(&b->state[i].status, &why);
	}
	if (rc == 0)
		rc = sp__check_collisions(b->items, outs, nouts, nitems, &res->err);
	for (size_t s = 0; rc == 0 && s < g->nstages; s++)
		if (g->stages[s].where == SP_IMPL_CUDA && sp_runtime_ncuda_workers() == 0)
			rc = sp_seterr(&res->err, SP_EINVAL,
				       "%s:%d: stage '%s' says 'where: cuda' but this run has no CUDA "
				       "worker (no GPU found, or ncuda is 0)",
				       g->file, g->stages[s].loc.line, g->stages[s].name);
	for (size_t i = 0; i < nitems; i++) {
		b->state[i].outputs = outs != NULL ? outs[i] : NULL;
		b->state[i].noutputs = nouts != NULL ? nouts[i] : 0;
	}
	free(outs);
	free(nouts);
	starpu_pthread_mutex_init(&b->shared_lock, NULL);
	if (rc == 0 && sp__shared_plan(b) != 0)
		rc = sp_seterr(&res->err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	/* the CPU lane runs items whole on CPUs: every stage must be able to */
	b->cpu_lane_ok = 1;
	for (size_t s = 0; s < g->nstages; s++)
		if (g->stages[s].where == SP_IMPL_CUDA || !(g->stages[s].kind->impl & SP_IMPL_CPU))
			b->cpu_lane_ok = 0;
	return rc;
}

/* Opens the journal (an MPI rank: its part, FILE.rankR).  It is checked as
 * the outputs are, before any item runs: a symlink, a FIFO (which would
 * block the open forever), a device or a folder is refused.  Under MPI,
 * rank 0 also checks the file the parts are merged into. */
static int batch_open_journal(struct sp_batch *b, char *part, size_t size, sp_err_t *err)
{
	const char *journal = b->opts->journal;
	b->journal_fd = -1;
	b->journal_path = journal;
	if (journal == NULL)
		return 0;
	if (b->lazy_plan) {
		sp__journal_part(journal, sp_cluster_rank(), part, size);
		b->journal_path = part;
	}
	b->journal_fd = sp_open_append(b->journal_path, "the journal", err);
	if (b->journal_fd < 0)
		return err->code;
	if (b->lazy_plan && sp_cluster_rank() == 0) {
		int fd = sp_open_append(journal, "the journal", err);
		if (fd < 0)
			return err->code;
		close(fd);
	}
	return 0;
}

/* --shard I/K: the items of other shards are marked, not run nor reported;
 * returns this shard's count. */
static size_t batch_select_shard(struct sp_batch *b)
{
	size_t nmine = b->nitems;
	for (size_t i = 0; b->opts->shard_k > 0 && i < b->nitems; i++)
		if (i % b->opts->shard_k != b->opts->shard_i) {
			atomic_store(&b->state[i].state, IT_OTHER_SHARD);
			nmine--;
		}
	return nmine;
}

/* What this batch measured of an item's cost in each lane, into the
 * lanes' item model (lanes.h) that the next batch's router starts from. */
static void record_lane_model(const struct sp_batch *b)
{
	unsigned ncpu[SP_MAX_LANES], ncuda[SP_MAX_LANES];
	for (int l = 0; l < b->route.nlanes && l < SP_MAX_LANES; l++) {
		ncpu[l] = sp_runtime_lane_ncpu(l);
		ncuda[l] = sp_runtime_lane_ncuda(l);
	}
	sp_lane_model_t m;
	sp__route_measured(&b->route, ncpu, ncuda, &m);
	/* the CPU workers' time per GPU-lane item, where no CPU-lane item
	 * shares it */
	if (m.gpu_items > 0 && (b->route.nlanes < 2 || b->route.done[1] == 0)) {
		m.gpu_feed_s = sp_runtime_cpu_busy_s() / (double)b->route.done[0];
		m.gpu_feed_items = m.gpu_items;
	}
	if ((m.cpu_items > 0 || m.gpu_items > 0) &&
	    sp_runtime_lane_model_add(b->g->pipeline, &m) != 0 && b->opts->verbose)
		fprintf(stderr, "[starpipe] lanes: the item model could not be written: %s\n",
			strerror(errno));
	if (b->opts->verbose && m.cpu_items > 0)
		fprintf(stderr, "[starpipe] lanes' item model: %.3g core-s a CPU-plan item, from %ld "
			"item(s) of this batch\n", m.cpu_core_s, m.cpu_items);
	if (b->opts->verbose && m.gpu_items > 0)
		fprintf(stderr, "[starpipe] lanes' item model: %.3g s per GPU-lane item%s, from %ld "
			"item(s) of this batch\n", m.gpu_item_s,
			m.gpu_feed_items > 0 ? "" : " (its CPU work not measured: CPU-lane items "
						   "shared the cores)", m.gpu_items);
	if (b->opts->verbose && m.gpu_feed_items > 0)
		fprintf(stderr, "[starpipe] lanes' item model: %.3g s of CPU workers per GPU-lane "
			"item\n", m.gpu_feed_s);
}

/* Driver threads of the CPU lane: two items keep a lane of CPU workers
 * busy (one computes while the other reads or writes), as on a CPU-only
 * node (default_inflight()). */
#define CPU_LANE_DRIVERS 2

/* Runs the items: `nthreads` driver threads of the GPU lane (the node's,
 * without lanes) and CPU_LANE_DRIVERS of the CPU lane pull them from the
 * dispatcher (rank 0's under MPI) until none is left, the router refuses
 * a CPU lane's driver, or the batch is interrupted. */
static void batch_drive(struct sp_batch *b, size_t nthreads)
{
	starpu_pthread_t th[64];
	struct driver drv[64];
	size_t started = 0;
	sp_err_t err = { 0 };
	if (sp_dispatch_start(b->nitems, want_item, b, batch_stopped, &err) != 0) {
		/* only when the dispatcher thread cannot start: end the job */
		fprintf(stderr, "starpipe: %s\n", err.msg);
		abort();
	}
	starpu_pthread_mutex_lock(&cur_lock);
	cur_batch = b;
	starpu_pthread_mutex_unlock(&cur_lock);
	size_t pending = 0;
	for (size_t i = 0; i < b->nitems; i++)
		pending += want_item(i, b) != 0;
	size_t drivers[SP_MAX_LANES] = { nthreads, 0 };
	const int nlanes = sp_runtime_nlanes();
	if (nlanes > 1 && b->cpu_lane_ok)
		drivers[1] = CPU_LANE_DRIVERS;
	sp__route_init(&b->route, pending, drivers, nlanes);
	sp_runtime_lane_model_get(b->g->pipeline, &b->lane_model);
	b->route.gpu_item_s = b->lane_model.gpu_item_s;
	if (b->opts->verbose && nlanes > 1)
		fprintf(stderr, "[starpipe] lanes' item model of %s: %.3g core-s a CPU-plan item (%ld "
			"item(s)), %.3g s per GPU-lane item (%ld; nan: not measured yet)\n",
			b->g->pipeline, b->lane_model.cpu_core_s, b->lane_model.cpu_items,
			b->lane_model.gpu_item_s, b->lane_model.gpu_items);
	size_t n = 0;
	drv[0] = (struct driver){ b, 0 }; /* the caller's own, when no thread starts */
	for (int l = 0; l < nlanes; l++)
		for (size_t t = 0; t < drivers[l] && t < b->nitems && n < 64; t++)
			drv[n++] = (struct driver){ b, l };
	for (size_t t = 0; t < n; t++)
		if (starpu_pthread_create(&th[started], NULL, driver_main, &drv[t]) == 0)
			started++;
	atomic_store(&b->drivers_done, 0);
	starpu_pthread_t joiner;
	const int joining = drivers[1] > 0 &&
			    starpu_pthread_create(&joiner, NULL, joiner_main, b) == 0;
#ifndef SP_SIMGRID
	starpu_pthread_t timer;
	const int timing = b->opts->item_timeout > 0 &&
			   starpu_pthread_create(&timer, NULL, timeout_main, b) == 0;
#else
	(void)timeout_main;
#endif
	if (started == 0)
		driver_main(&drv[0]);
	for (size_t t = 0; t < started; t++)
		starpu_pthread_join(th[t], NULL);
	atomic_store(&b->drivers_done, 1);
	if (joining)
		starpu_pthread_join(joiner, NULL);
#ifndef SP_SIMGRID
	if (timing)
		starpu_pthread_join(timer, NULL);
#endif
	sp_dispatch_end();
	starpu_task_wait_for_all();
	sp_runtime_lanes_unjoin();
	if (b->opts->verbose && nlanes > 1) {
		if (!b->cpu_lane_ok)
			fprintf(stderr, "[starpipe] cpu lane: no item (a stage cannot run on CPUs)\n");
		sp__route_describe(&b->route, stderr);
	}
	if (!batch_stopped())
		record_lane_model(b);
	sp__route_free(&b->route);
	starpu_pthread_mutex_lock(&cur_lock);
	cur_batch = NULL;
	starpu_pthread_mutex_unlock(&cur_lock);
	if (b->journal_fd >= 0) {
		if (close(b->journal_fd) != 0 && !b->journal_failed) {
			fprintf(stderr, "starpipe: %s: cannot write the journal: %s\n", b->journal_path,
				strerror(errno));
			b->journal_failed = 1;
		}
		b->journal_fd = -1;
	}
}

/* The batch's counts and per-item figures: this process's, or under MPI
 * the whole batch's on every rank (gathered, the journal parts merged). */
static void batch_collect(struct sp_batch *b, sp_run_result_t *res)
{
	res->signal = atomic_load(&stop_signal);
	res->journal_failed = b->journal_failed;
	if (b->lazy_plan) {
		sp__cluster_merge_batch(b, res);
		if (b->opts->journal != NULL && sp_cluster_rank() == 0 &&
		    sp__cluster_merge_journals(b->opts->journal, sp_cluster_size()) != 0)
			res->journal_failed = 1;
		/* a part not written, on any rank, fails the batch: rank 0 exits 1 */
		sp_cluster_allmax_int(&res->journal_failed, 1);
		return;
	}
	res->nok = atomic_load(&b->nok);
	res->nfailed = atomic_load(&b->nfailed);
	res->nskipped = atomic_load(&b->nskipped);
	res->ncancelled = atomic_load(&b->ncancelled);
	for (size_t i = 0; i < b->nitems; i++)
		if (atomic_load(&b->state[i].state) == IT_PENDING)
			res->nnotrun++;
	res->items_json = sp__items_json(b, 0);
}

static void batch_free(struct sp_batch *b)
{
	if (b->journal_fd >= 0)
		close(b->journal_fd);
	for (size_t i = 0; i < b->nitems; i++) {
		sp__item_free_ctxs(&b->state[i]);
		sp__free_strv(b->state[i].outputs, b->state[i].noutputs);
		starpu_pthread_mutex_destroy(&b->state[i].lock);
	}
	sp__shared_free(b);
	starpu_pthread_mutex_destroy(&b->shared_lock);
	free(b->state);
}

/* Items driven at once when --inflight is not given.  Two items keep a CPU
 * node busy (one reads or writes while the other computes).  A GPU
 * finishes an item's tasks long before its CPU-only stages (reads,
 * training, picking, writes) are done: four more items per GPU (not per
 * CUDA worker: DESI drives each GPU with 4) keep it fed.  More do not help:
 * items started together end together (their tasks interleave), and each
 * item of the first wave pins its buffers, one item at a time, so more in
 * flight delay every first output and gain no steady rate
 * (doc/scheduling.md).  Never more than the memory
 * holds: the items' estimates (the plan's, the largest of the batch)
 * within --memory-limit or the machine's memory, at least 1 (one process,
 * which plans every item first; an MPI rank plans an item when it is
 * handed it).  An MPI batch with few items per rank takes no more than a
 * rank's share: the first requests of every rank's threads would
 * otherwise hand a few ranks all the items while the others wait
 * (bench/dispatch-sim, doc/cluster.md).  The memory's
 * bound is batch_inflight()'s. */
static size_t default_inflight(const struct sp_batch *b)
{
	size_t n = 2 + 4 * (size_t)sp_runtime_ngpus();
	size_t ranks = (size_t)sp_cluster_size();
	size_t share = (b->nitems + ranks - 1) / ranks;
	if (b->lazy_plan && share < n)
		n = share > 1 ? share : 1;
	return n;
}

/* The count in flight, and what limited it, for the verbose line and for
 * a warning when --inflight asks for more than the memory holds. */
static size_t batch_inflight(const struct sp_batch *b)
{
	char nb[32], lb[32];
	const unsigned long long need = atomic_load(&b->need_max);
	const unsigned long long limit = sp__memory_limit(b->opts);
	/* the items the memory holds at once (no bound when unknown) */
	const unsigned long long fit = need > 0 && limit > 0 ? limit / need : (unsigned long long)-1;
	size_t n = b->opts->inflight ? b->opts->inflight : default_inflight(b);
	const size_t used = n < b->nitems ? n : b->nitems; /* more drive nothing */
	const int over = fit < used, by_memory = over && !b->opts->inflight;
	if (by_memory)
		n = fit > 1 ? (size_t)fit : 1;
	if (sp_cluster_rank() != 0)
		return n;
	if (over && b->opts->inflight)
		fprintf(stderr,
			"starpipe: warning: --inflight %zu: an item may need about %s, and %zu of them "
			"more than the %s %s\n",
			n, sp__human_bytes(need, nb, sizeof nb), used,
			sp__human_bytes(limit, lb, sizeof lb),
			b->opts->memory_limit ? "of --memory-limit" : "this machine has (or its cgroup, or ulimit -v beyond the program)");
	if (b->opts->verbose) {
		fprintf(stderr, "[starpipe] %zu item(s) in flight%s", n,
			sp_cluster_size() > 1 ? " per rank" : "");
		if (by_memory)
			fprintf(stderr, " (as many as %s of memory holds at about %s each)",
				sp__human_bytes(limit, lb, sizeof lb),
				sp__human_bytes(need, nb, sizeof nb));
		fputc('\n', stderr);
	}
	return n;
}

int sp_run(const sp_graph_t *g, char *const *items, size_t nitems, const sp_run_opts_t *opts,
	   sp_run_result_t *res)
{
	struct sp_batch b = { .g = g, .items = items, .nitems = nitems, .opts = opts,
			      .journal_fd = -1, .lazy_plan = sp_cluster_size() > 1 };
	char jpart[PATH_MAX + 32];

	memset(res, 0, sizeof *res);
	b.state = calloc(nitems ? nitems : 1, sizeof *b.state);
	if (b.state == NULL)
		return SP_ENOMEM;
	int rc = batch_plan(&b, res);
	if (rc == 0)
		rc = batch_open_journal(&b, jpart, sizeof jpart, &res->err);
	if (b.lazy_plan) {
		/* every rank goes on, or none: a rank that stopped here would
		 * leave the others waiting in the batch's collectives */
		int any = rc != 0;
		sp_cluster_allmax_int(&any, 1);
		if (any && rc == 0)
			rc = sp_seterr(&res->err, SP_EINVAL, "%s (its message says why)",
				       SP_RUN_OTHER_RANK);
	}
	if (rc != 0) {
		batch_free(&b);
		return rc == SP_ENOMEM ? rc : SP_EINVAL;
	}
	starpu_pthread_mutex_init(&b.journal_lock, NULL);
	sp_runtime_items(batch_select_shard(&b));
	sp__clean_stale(&b);
	/* One process plans every item now; MPI ranks plan the items they are
	 * handed (lazy_plan). */
	for (size_t i = 0; !b.lazy_plan && i < nitems; i++)
		if (atomic_load(&b.state[i].state) == IT_PENDING)
			sp__plan_item(&b, &b.state[i]);
	/* skipped or refused: their batch-wide values are not needed for them */
	for (size_t i = 0; !b.lazy_plan && i < nitems; i++)
		if (atomic_load(&b.state[i].state) != IT_PENDING)
			sp__shared_release(&b, &b.state[i], 0);
	size_t inflight = batch_inflight(&b);
	batch_drive(&b, inflight);
	batch_collect(&b, res);
	batch_free(&b);
	starpu_pthread_mutex_destroy(&b.journal_lock);
	return res->nfailed || res->nnotrun || res->ncancelled ? SP_ECANCELED : 0;
}
