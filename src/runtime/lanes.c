/* Lanes: the node split into a GPU lane (StarPU's initial context: every
 * worker, the session's scheduler) and a CPU lane (a scheduling context of
 * CPU workers under lws), each item run whole in one of them (lanes.h). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "lanes.h"
#include "runtime.h"
#include "runtime_int.h"
#include "sched_hp.h"

/*
 * DESIGN.  The GPU lane is StarPU's initial context, unchanged: every
 * worker, the session's scheduler (heteroprio on a GPU node).  The CPU
 * lane is one more context holding the last k CPU workers, under lws.  A
 * worker may belong to several contexts (StarPU 1.3 keeps the CPU lane's
 * workers in the initial one too), so the GPU lane's CPU-only stages
 * (reads, stitches, writes) still use every core, and a batch whose CPU
 * lane takes no item runs exactly as without lanes: that is what keeps a
 * pipeline whose cores are worth little beside the GPU no slower.  Each
 * task names its lane's context (SP__TASK_ARGS, item.h), so the CPU
 * lane's tasks only ever run on its own workers, in the CPU's plan
 * (sp_item_ncuda_workers() is 0 there).
 */

/* StarPU's initial context: id 0 (STARPU_GLOBAL_SCHED_CTX, which 1.3's
 * public headers do not define). */
#define SP_INITIAL_CTX 0u

/* The cores the GPU lane keeps beside its GPUs, from the item model: its
 * items keep need = gpu_feed_s / gpu_item_s CPU workers busy on average
 * (reads, stitches, writes), so it keeps half as many again, at least one
 * per GPU; without a model two per GPU.  Said by -v (lanes.split). */
#define FEED_MARGIN 1.5

static struct {
	int n;                     /* 1: no lanes (the initial context only) */
	unsigned ctx[SP_MAX_LANES]; /* StarPU context ids */
	unsigned ncpu[SP_MAX_LANES], ncuda[SP_MAX_LANES];
	char why[160];             /* lanes asked for but not made: the reason */
	char split[200];           /* how the CPU lane's size was chosen */
	/* the GPU lane's workers that joined the CPU lane (sp_runtime_lanes_join) */
	int joined[STARPU_NMAXWORKERS];
	unsigned njoined;
	double joined_at_s; /* the last join's time (sp_runtime_elapsed_s), NAN: none */
	unsigned joined_n;  /* and its workers */
} lanes = { .n = 1, .joined_at_s = NAN };

/* The CPU lane's size: cpu_lane when given, else all CPU workers but those
 * that feed the GPUs on a GPU node (above), else half of them. */
static int cpu_lane_size(int cpu_lane, unsigned ncpu, unsigned ngpus, const char *pipeline)
{
	if (cpu_lane >= 0) {
		snprintf(lanes.split, sizeof lanes.split, "as asked (cpu_lane)");
		return cpu_lane;
	}
	if (ngpus == 0) {
		snprintf(lanes.split, sizeof lanes.split, "half the CPU workers (no GPU)");
		return (int)ncpu / 2;
	}
	sp_lane_model_t m;
	sp_runtime_lane_model_get(pipeline, &m);
	if (m.gpu_feed_items > 0 && m.gpu_items > 0 && m.gpu_item_s > 0) {
		const double need = m.gpu_feed_s / m.gpu_item_s;
		int keep = (int)ceil(FEED_MARGIN * need);
		if (keep < (int)ngpus)
			keep = (int)ngpus;
		snprintf(lanes.split, sizeof lanes.split,
			 "the GPU lane keeps %d core(s): its items keep %.2f busy (%.3g s of CPU "
			 "workers each, %.3g s apart; the item model)", keep, need, m.gpu_feed_s,
			 m.gpu_item_s);
		return (int)ncpu - keep;
	}
	snprintf(lanes.split, sizeof lanes.split,
		 "the GPU lane keeps 2 cores per GPU (no item model of its CPU work yet)");
	return (int)ncpu - 2 * (int)ngpus;
}

int sp__lanes_start(int mode, int cpu_lane, unsigned ngpus, int workers_given,
		    const char *pipeline, sp_err_t *err)
{
	int ids[STARPU_NMAXWORKERS];
	const unsigned ncpu = starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids, STARPU_NMAXWORKERS);

	lanes.n = 1;
	lanes.ctx[0] = SP_INITIAL_CTX;
	lanes.ncpu[0] = ncpu;
	lanes.ncuda[0] = starpu_cuda_worker_get_count();
	lanes.why[0] = '\0';
	/* auto: a CPU lane on a GPU node, where the router gives it only the
	 * items it is predicted to end first (doc/scheduling.md), unless the
	 * scheduler or the CPU workers were chosen (then the session is
	 * theirs) */
	if (mode == SP_LANES_OFF || (mode == SP_LANES_AUTO && (ngpus == 0 || workers_given)))
		return 0;
	const int k = cpu_lane_size(cpu_lane, ncpu, ngpus, pipeline);
	if (k < 1 || k >= (int)ncpu) {
		snprintf(lanes.why, sizeof lanes.why,
			 "no CPU lane: %d of %u CPU workers would leave %s", k, ncpu,
			 k < 1 ? "it empty" : "the GPU lane no core of its own");
		return 0;
	}
	const unsigned ctx = starpu_sched_ctx_create(ids + ncpu - (unsigned)k, k, "cpu-lane",
						     STARPU_SCHED_CTX_POLICY_NAME, "lws", 0);
	if (ctx >= STARPU_NMAX_SCHED_CTXS)
		return sp_seterr(err, SP_ESTARPU, "StarPU could not make the CPU lane's context");
	lanes.n = 2;
	lanes.ctx[1] = ctx;
	lanes.ncpu[1] = (unsigned)k;
	lanes.ncuda[1] = 0;
	return 0;
}

static atomic_long gpu_cuda_pending;

void sp_runtime_gpu_lane_cuda_tasks(int delta) { atomic_fetch_add(&gpu_cuda_pending, delta); }

long sp_runtime_gpu_lane_cuda_pending(void) { return atomic_load(&gpu_cuda_pending); }

int sp_runtime_lanes_join(void)
{
	const char *e = getenv("STARPIPE_LANES_JOIN");
	if (lanes.n < 2 || lanes.njoined > 0 || (e != NULL && strcmp(e, "0") == 0))
		return 0;
	/* the initial context's workers that are not the CPU lane's: every
	 * CUDA worker and the CPU workers the GPU lane kept (the first ones) */
	int ids[STARPU_NMAXWORKERS];
	const unsigned ncpu = starpu_worker_get_ids_by_type(STARPU_CPU_WORKER, ids, STARPU_NMAXWORKERS);
	unsigned n = 0;
	for (unsigned i = 0; i + lanes.ncpu[1] < ncpu; i++)
		lanes.joined[n++] = ids[i];
	const unsigned ncuda = starpu_worker_get_ids_by_type(STARPU_CUDA_WORKER, ids, STARPU_NMAXWORKERS);
	for (unsigned i = 0; i < ncuda; i++)
		lanes.joined[n++] = ids[i];
	if (n == 0)
		return 0;
	starpu_sched_ctx_add_workers(lanes.joined, n, lanes.ctx[1]);
	lanes.njoined = n;
	lanes.joined_n = n;
	lanes.joined_at_s = sp_runtime_elapsed_s();
	return (int)n;
}

void sp_runtime_lanes_unjoin(void)
{
	if (lanes.n < 2 || lanes.njoined == 0)
		return;
	/* every task has ended (the batch waited for them) */
	starpu_sched_ctx_remove_workers(lanes.joined, lanes.njoined, lanes.ctx[1]);
	lanes.njoined = 0;
}

void sp__lanes_stop(void)
{
	/* every task has ended (sp_runtime_shutdown): the workers go back to
	 * the initial context */
	for (int l = 1; l < lanes.n; l++)
		starpu_sched_ctx_delete(lanes.ctx[l]);
	lanes.n = 1;
}

double sp_runtime_cpu_busy_s(void)
{
	double us = 0.0;
	starpu_pthread_mutex_lock(&sp__rt.lock);
	for (size_t i = 0; i < sp__rt.nk; i++)
		us += sp__rt.k[i].busy_us[0];
	starpu_pthread_mutex_unlock(&sp__rt.lock);
	return 1e-6 * us;
}

double sp_runtime_cpu_lane_prior_s(double core_s)
{
	if (lanes.n < 2)
		return NAN;
	const double k = (double)lanes.ncpu[1];
	if (core_s > 0)
		return core_s / k;
	double core_us = 0.0;
	starpu_pthread_mutex_lock(&sp__rt.lock);
	for (size_t i = 0; i < sp__rt.nk; i++) {
		const struct sp__kstat *ks = &sp__rt.k[i];
		core_us += ks->busy_us[0];
		if (ks->busy_us[1] > 0.0)
			core_us += ks->busy_us[1] * sp_hp_ratio(ks->kernel);
	}
	starpu_pthread_mutex_unlock(&sp__rt.lock);
	const size_t done = atomic_load(&sp__rt.items_done);
	return done > 0 ? 1e-6 * core_us / (double)done / k : NAN;
}

int sp_runtime_nlanes(void) { return lanes.n; }

double sp_runtime_lanes_joined_s(unsigned *nworkers)
{
	if (nworkers != NULL)
		*nworkers = lanes.joined_n;
	return lanes.joined_at_s;
}

unsigned sp_runtime_lane_ctx(int lane)
{
	return lane > 0 && lane < lanes.n ? lanes.ctx[lane] : SP_INITIAL_CTX;
}

unsigned sp_runtime_lane_ncpu(int lane)
{
	return lane >= 0 && lane < lanes.n ? lanes.ncpu[lane] : starpu_cpu_worker_get_count();
}

unsigned sp_runtime_lane_ncuda(int lane)
{
	return lane >= 0 && lane < lanes.n ? lanes.ncuda[lane] : starpu_cuda_worker_get_count();
}

const char *sp_runtime_lane_name(int lane)
{
	if (lanes.n == 1)
		return "node";
	return lane == 0 ? (lanes.ncuda[0] > 0 ? "gpu" : "main") : "cpu";
}

void sp_runtime_lanes_describe(FILE *f)
{
	if (lanes.n == 1) {
		if (lanes.why[0] != '\0')
			fprintf(f, "[starpipe] lanes: %s\n", lanes.why);
		return;
	}
	fprintf(f, "[starpipe] lanes: %s lane: %u CPU + %u CUDA workers (%s); cpu lane: the last %u "
		   "CPU workers (lws), which the %s lane's tasks may use too; split: %s\n",
		sp_runtime_lane_name(0), lanes.ncpu[0], lanes.ncuda[0], sp__rt.sched, lanes.ncpu[1],
		sp_runtime_lane_name(0), lanes.split);
}
