/* The StarPU session: configuration, workers, start and shutdown. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include "runtime.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <starpu.h>

#include "bound.h"
#include "fsutil.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif
#include "sched_hp.h"
#include "sim_host.h"
#include "stage.h"
#include "tbuf.h"
#include "runtime_int.h"



int sp_runtime_check_sched(const char *name, char *msg, size_t len)
{
	struct starpu_sched_policy **p = starpu_sched_get_predefined_policies();
	char list[2048];
	size_t n;

	if (name == NULL || name[0] == '\0' || strcmp(name, "auto") == 0)
		return 0;
	for (size_t i = 0; p != NULL && p[i] != NULL; i++)
		if (p[i]->policy_name != NULL && strcmp(p[i]->policy_name, name) == 0)
			return 0;
	n = (size_t)snprintf(list, sizeof list, "auto");
	for (size_t i = 0; p != NULL && p[i] != NULL && n < sizeof list; i++)
		if (p[i]->policy_name != NULL)
			n += (size_t)snprintf(list + n, sizeof list - n, ", %s", p[i]->policy_name);
	sp_fmt_fit(msg, len, "unknown scheduler '%s' (available: %s)", name, list);
	return -1;
}


/* OpenBLAS's own control (cblas.h of other BLAS builds lacks it): kernels run
 * one per worker, so BLAS must not start threads of its own. */
void openblas_set_num_threads(int n);

void sp_runtime_hwloc_env(void)
{
	/* hwloc's "gl" component (libhwloc-plugins, which Debian's CUDA
	 * toolkit pulls in) looks for GPUs by opening X displays :0, :1, ...;
	 * on a node without an X server that takes seconds per start.  StarPU finds GPUs through CUDA and PCI, not GL.  A
	 * user's HWLOC_COMPONENTS is kept.  hwloc reads the variable at each
	 * topology load. */
	setenv("HWLOC_COMPONENTS", "-gl", 0);
}

/*
 * The address-space limit (ulimit -v).  Below a floor the process cannot
 * start: OpenBLAS's load-time threads each reserve a 128 MiB buffer and,
 * when the reservation fails, retry it for ever (a thread at 100 % that
 * exit() then waits for), and StarPU aborts on a thread it cannot create.
 * So the limit is checked twice, and the run refused (exit 4) with the
 * floor named: at program start against what is mapped already (the
 * libraries: a CUDA build's map several times a CPU build's) plus
 * OpenBLAS's buffers and a margin for what the program maps before StarPU
 * starts, exiting at once, before those threads are waited for; and
 * before StarPU starts, against what is mapped then plus, per thread, a
 * stack and a malloc arena's reservation, and the least an item takes.  Starting one or two workers
 * under OPENBLAS_NUM_THREADS=1 failed at random between 260 and 290 MiB,
 * and always below; the floors there are about 100 MiB higher.
 */
#define SP_AS_MARGIN_MIB 128
#define SP_AS_BLAS_THREAD_MIB 136
#define SP_AS_THREAD_MIB 32
#define SP_AS_ITEM_MIB 64 /* the least an item takes (the batch's estimate: its base) */

int openblas_get_num_threads(void);

/* The address space mapped now, MiB (0 if unknown). */
static unsigned long mapped_mib(void)
{
	unsigned long pages = 0;
	FILE *f = fopen("/proc/self/statm", "re");
	if (f != NULL) {
		if (fscanf(f, "%lu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	long psz = sysconf(_SC_PAGESIZE);
	return psz > 0 ? (unsigned long)(((unsigned long long)pages * (unsigned long long)psz) >> 20) : 0;
}

unsigned long sp_runtime_min_address_space_mib(int nthreads)
{
	static int blas_pool; /* OpenBLAS's load-time pool, before set_num_threads(1) */
	if (blas_pool == 0)
		blas_pool = openblas_get_num_threads() > 0 ? openblas_get_num_threads() : 1;
	unsigned long need = mapped_mib() + SP_AS_MARGIN_MIB;
	if (nthreads > 0) /* the pool's buffers are mapped by now */
		need += SP_AS_THREAD_MIB * (unsigned long)nthreads + SP_AS_ITEM_MIB;
	else
		need += SP_AS_BLAS_THREAD_MIB * (unsigned long)(blas_pool - 1);
	return (need + 15) / 16 * 16;
}

unsigned long long sp_runtime_address_space_left(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return ULLONG_MAX;
	unsigned long long used = (unsigned long long)mapped_mib() << 20;
	return (unsigned long long)rl.rlim_cur > used ? (unsigned long long)rl.rlim_cur - used : 0;
}

int sp_runtime_check_address_space(int nthreads, sp_err_t *err)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	unsigned long need = sp_runtime_min_address_space_mib(nthreads);
	unsigned long have = (unsigned long)(rl.rlim_cur >> 20);
	if (have >= need)
		return 0;
	return sp_seterr(err, SP_ENOMEM,
			 "the address-space limit (ulimit -v) is %lu MiB; starpipe needs at least %lu "
			 "MiB here%s (raise the limit%s)",
			 have, need, nthreads > 0 ? " with these workers" : "",
			 nthreads > 0 ? ", or ask for fewer workers with --ncpus" : "");
}

static int check_address_space(const sp_runtime_conf_t *c, sp_err_t *err)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = c->ncpus >= 0 ? c->ncpus : cores > 0 ? (int)cores : 1;
	if (c->ncuda > 0)
		threads += c->ncuda * (c->workers_per_gpu > 0 ? c->workers_per_gpu : 1);
	threads += 4; /* the item drivers, the signal thread, StarPU's own */
	return sp_runtime_check_address_space(threads, err);
}

/* The environment StarPU reads at its init, and the session's settings; 0 or the error. */
static int runtime_env(const sp_runtime_conf_t *c, sp_err_t *err)
{
	char dir[4096];
	char num[32];
	int ret;

	/* StarPU reads its perf-model folder and workers-per-GPU count from
	 * the environment only (1.3); set them before starpu_init.  StarPU
	 * aborts when the folder is a file: say so here instead. */
	if ((ret = sp__models_dir(c->perfmodel_dir, dir, sizeof dir, err)) != 0)
		return ret;
	setenv("STARPU_PERF_MODEL_DIR", dir, 1);
	snprintf(sp__rt.pmdir, sizeof sp__rt.pmdir, "%s", dir);
	sp__rt.calibrate = c->calibrate;
	sp__rt.record_versions = c->record_versions;
	/* StarPU names the models and bus files after STARPU_HOSTNAME: the
	 * node type, so that nodes of one type share them (sp_runtime_node_type) */
	sp__rt.node_type_from = sp_runtime_node_type(c->node_type, sp__rt.node_type,
						      sizeof sp__rt.node_type);
	if (c->node_type_from != NULL)
		sp__rt.node_type_from = c->node_type_from;
	setenv("STARPU_HOSTNAME", sp__rt.node_type, 1);
	sp__rt.ncodelets = sp__rt.ncalibrated = 0;
	snprintf(num, sizeof num, "%d", c->workers_per_gpu > 0 ? c->workers_per_gpu : 1);
	setenv("STARPU_NWORKER_PER_CUDA", num, 1);
	if (getenv("STARPU_SILENT") == NULL)
		setenv("STARPU_SILENT", "1", 1);
	sp_runtime_hwloc_env();
	return 0;
}

/* StarPU's configuration from ours; returns whether starpipe chooses the scheduler. */
static int fill_conf(const sp_runtime_conf_t *c, struct starpu_conf *cf)
{
	openblas_set_num_threads(1);
	cf->ncpus = c->ncpus;
	if (c->cpu_count > 0) {
		/* ranks sharing a node: each its own cores, or StarPU would bind
		 * every rank's first worker to core 0 */
		if (cf->ncpus < 0)
			cf->ncpus = c->cpu_count;
		cf->use_explicit_workers_bindid = 1;
		for (int w = 0; w < STARPU_NMAXWORKERS; w++)
			cf->workers_bindid[w] = (unsigned)(c->cpu_first + w % c->cpu_count);
	}
	cf->ncuda = c->ncuda;
	cf->nopencl = 0;
	cf->calibrate = c->calibrate;
	/* starpipe handles SIGINT itself (main.c).  StarPU's own handler saves
	 * the previous one at each starpu_init, so after the restart below (a
	 * CUDA build on a node without GPU) it would save itself and spin in
	 * raise(SIGINT) forever; it only dumps FxT traces, which we do not use. */
	cf->catch_signals = 0;
	int autosched = c->scheduler == NULL || c->scheduler[0] == '\0' ||
			strcmp(c->scheduler, "auto") == 0;
	if (!autosched) {
		snprintf(sp__rt.sched, sizeof sp__rt.sched, "%s", c->scheduler);
	} else {
		/* With GPUs, heteroprio with buckets from the models (sched_hp.h;
		 * doc/scheduling.md: on a real GPU node dmdas lost to its
		 * optimistic CPU models); decided again after init if the build
		 * has CUDA but the node has no GPU. */
#if defined(STARPU_USE_CUDA) || defined(STARPU_SIMGRID)
		snprintf(sp__rt.sched, sizeof sp__rt.sched, "%s", c->ncuda == 0 ? "lws" : "heteroprio");
#else
		snprintf(sp__rt.sched, sizeof sp__rt.sched, "lws");
#endif
	}
	cf->sched_policy_name = sp__rt.sched;
	if (strcmp(sp__rt.sched, "heteroprio") == 0) {
		sp_hp_plan(c->graph, 0);
		cf->sched_policy_init = sp_hp_init_cb;
		sp__rt.heteroprio = 1;
	}
	/* A GPU node: the workers' threads must leave a core to starpipe's own
	 * (the item drivers plan and submit, the CUDA drivers launch): with
	 * every core taken, the drivers starve and the GPU waits for
	 * submissions (doc/scheduling.md).  Only when every core was asked for (--ncpus
	 * -1), and STARPU_RESERVE_NCPU (StarPU's own knob) still decides. */
#if defined(STARPU_USE_CUDA) || defined(STARPU_SIMGRID)
	if (c->ncpus < 0 && c->cpu_count == 0 && c->ncuda != 0 && getenv("STARPU_RESERVE_NCPU") == NULL)
		cf->reserve_ncpus = 1;
	/* StarPU keeps a share of a GPU's memory chunks clean by writing dirty
	 * ones back to main memory, however much memory is free: each write-back
	 * is a pinned host allocation and a copy on the CUDA worker's thread,
	 * for data (DESI's normal equations) that never leaves the GPU.  Eviction when the GPU is really full
	 * writes back on demand anyway (doc/scheduling.md; StarPU's own
	 * variables still decide). */
	if (c->ncuda != 0) {
		setenv("STARPU_MINIMUM_CLEAN_BUFFERS", "0", 0);
		setenv("STARPU_TARGET_CLEAN_BUFFERS", "0", 0);
	}
#endif
	return autosched;
}

/* starpu_init, again without the GPU settings on a node without GPU; 0 or the error. */
static int start_starpu(struct starpu_conf *cf, int autosched, sp_err_t *err)
{
	int ret;

	ret = starpu_init(cf);
	if (ret == -ENODEV)
		return sp_seterr(err, SP_ENODEV, "StarPU found no worker to run tasks on");
	if (ret != 0)
		return sp_seterr(err, SP_ESTARPU, "starpu_init failed: %s", strerror(-ret));

	if (starpu_cuda_worker_get_count() == 0 && cf->reserve_ncpus > 0 &&
	    (!autosched || strcmp(sp__rt.sched, "lws") == 0)) {
		/* No GPU after all: every core for the CPU workers. */
		starpu_shutdown();
		cf->reserve_ncpus = 0;
		ret = starpu_init(cf);
		if (ret != 0)
			return sp_seterr(err, SP_ESTARPU, "starpu_init failed: %s", strerror(-ret));
	}
	if (autosched && starpu_cuda_worker_get_count() == 0 && strcmp(sp__rt.sched, "lws") != 0) {
		/* No GPU after all: restart with the CPU scheduler. */
		starpu_shutdown();
		snprintf(sp__rt.sched, sizeof sp__rt.sched, "lws");
		cf->sched_policy_name = sp__rt.sched;
		cf->sched_policy_init = NULL;
		cf->reserve_ncpus = 0;
		sp__rt.heteroprio = 0;
		ret = starpu_init(cf);
		if (ret != 0)
			return sp_seterr(err, SP_ESTARPU, "starpu_init failed: %s", strerror(-ret));
	}
	return 0;
}

/* What follows StarPU's init: models census, CPU cap note, CUDA handles; 0 or the error. */
static int after_init(const sp_runtime_conf_t *c, sp_err_t *err)
{
	int ret = 0;

	(void)err; /* the SimGrid and CUDA builds' */
#ifndef SP_SIMGRID
	/* How many of the graph's codelets have calibrated models here (-v,
	 * the report, the notice of a node type without any) */
	if (c->graph != NULL)
		sp__models_census(c->graph);
#endif
	/* This StarPU's CPU cap (Debian's binary: 4) must never hide cores
	 * silently: say so once, here and in the report. */
#ifdef SP_SIMGRID
	{
		const char *hmf = getenv("SP_SIM_HOST_MODEL");
		if (hmf == NULL || strcmp(hmf, "none") != 0) {
			ret = sp_sim_host_init(sp__rt.pmdir, getenv("STARPU_HOSTNAME"), hmf, err);
			if (ret != 0) {
				starpu_shutdown();
				return ret;
			}
		}
	}
#endif
	sp__rt.cores = sysconf(_SC_NPROCESSORS_ONLN);
	sp__rt.cap_note[0] = '\0';
	long want = c->ncpus < 0 ? sp__rt.cores : c->ncpus;
	if (want > STARPU_MAXCPUS) {
		snprintf(sp__rt.cap_note, sizeof sp__rt.cap_note,
			 "this StarPU was built for at most %d CPU workers (STARPU_MAXCPUS) and %s "
			 "%ld: running %u CPU workers; lift the cap with tools/build-starpu PREFIX, "
			 "then ./configure --with-starpu=PREFIX",
			 STARPU_MAXCPUS, c->ncpus < 0 ? "this machine has" : "--ncpus asked for", want,
			 starpu_cpu_worker_get_count());
		fprintf(stderr, "starpipe: warning: %s\n", sp__rt.cap_note);
	}

#ifdef SP_HAVE_CUDA
	if ((ret = sp_cuda_handles_init(err)) != 0) {
		starpu_shutdown();
		return ret;
	}
#endif
	return ret;
}

/* The session's clocks, trace, bound and progress. */
static void session_begin(const sp_runtime_conf_t *c)
{
	snprintf(sp__rt.pipeline, sizeof sp__rt.pipeline, "%s", c->pipeline != NULL ? c->pipeline : "");
	starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
	sp__rt.up = 1;
	sp__rt.t0 = sp_now_s();
	sp__rt.t0_clock_us = starpu_timing_now();
	{
		struct timespec w;
		clock_gettime(CLOCK_REALTIME, &w);
		sp__rt.t0_wall = (double)w.tv_sec + 1e-9 * (double)w.tv_nsec;
	}
	sp__rt.trace = c->trace;
	sp__rt.bound = c->bound;
	sp__rt.first_start_us = sp__rt.last_end_us = 0;
	if (sp__rt.bound)
		sp_bound_begin();
	sp__rt.progress = c->progress;
	sp__rt.progress_period = c->progress_period;
	sp__progress_start();
}

int sp_runtime_init(const sp_runtime_conf_t *c, sp_err_t *err)
{
	struct starpu_conf conf;
	int ret;

	if ((ret = check_address_space(c, err)) != 0)
		return ret;
	if (starpu_conf_init(&conf) != 0)
		return sp_seterr(err, SP_ESTARPU, "starpu_conf_init failed");
	if ((ret = runtime_env(c, err)) != 0)
		return ret;
	int autosched = fill_conf(c, &conf);
	if ((ret = start_starpu(&conf, autosched, err)) != 0)
		return ret;
	if ((ret = after_init(c, err)) != 0)
		return ret;
	sp__rt.workers_per_gpu_asked = c->workers_per_gpu > 0 ? c->workers_per_gpu : 1;
#ifdef SP_SIMGRID
	/* StarPU 1.3's simulator runs one CUDA worker per GPU: its drivers
	 * block under SimGrid, which caps STARPU_NWORKER_PER_CUDA at 1, and
	 * its CUDA driver refuses concurrent kernels there.  Said, not
	 * silent: the GPU's concurrency and heteroprio's per-worker shares
	 * differ from a real node's (doc/scheduling.md). */
	if (sp__rt.workers_per_gpu_asked > 1 && starpu_cuda_worker_get_count() > 0)
		fprintf(stderr, "starpipe-sim: warning: %d CUDA workers per GPU asked, simulated as 1 "
			"(StarPU's simulator runs one per GPU)\n", sp__rt.workers_per_gpu_asked);
#endif
	if ((ret = sp__lanes_start(c->lanes, c->cpu_lane, sp_runtime_ngpus(),
				   !autosched || c->ncpus >= 0,
				   c->pipeline, err)) != 0) {
		starpu_shutdown();
		return ret;
	}
	session_begin(c);
	return 0;
}

unsigned sp_runtime_ncpu_workers(void) { return starpu_cpu_worker_get_count(); }

void sp_runtime_models_seen(sp_runtime_models_seen_t *out)
{
	out->node_type = sp__rt.node_type;
	out->node_type_from = sp__rt.node_type_from;
	out->folder = sp__rt.pmdir;
	out->ncodelets = sp__rt.ncodelets;
	out->ncalibrated = sp__rt.ncalibrated;
	out->calibrate = sp__rt.calibrate;
}

void sp_runtime_describe(char *buf, size_t size)
{
	int maj = 0, min = 0, rel = 0;
	starpu_get_version(&maj, &min, &rel);
	snprintf(buf, size, "StarPU %d.%d.%d (at most %d CPU workers, %d CUDA devices; CUDA %s)", maj,
		 min, rel, STARPU_MAXCPUS, STARPU_MAXCUDADEVS,
#ifdef STARPU_USE_CUDA
		 "yes"
#else
		 "no"
#endif
	);
}
int sp_runtime_heteroprio(void)
{
	return sp__rt.heteroprio;
}

int sp_runtime_uses_models(void)
{
	const char *s = sp__rt.sched;
	return sp__rt.heteroprio || strstr(s, "dm") != NULL || strstr(s, "heft") != NULL;
}

unsigned sp_runtime_ncuda_workers(void) { return starpu_cuda_worker_get_count(); }

unsigned sp_runtime_ngpus(void)
{
	int ids[STARPU_NMAXWORKERS];
	const unsigned n = starpu_worker_get_ids_by_type(STARPU_CUDA_WORKER, ids, STARPU_NMAXWORKERS);
	unsigned ndev = 0;
	for (unsigned i = 0; i < n; i++) {
		const int dev = starpu_worker_get_devid(ids[i]);
		unsigned j = 0;
		while (j < i && starpu_worker_get_devid(ids[j]) != dev)
			j++;
		ndev += j == i; /* the first worker of its device */
	}
	return ndev;
}


/* The layers above that keep StarPU memory free it here (item.c's pool of
 * pinned buffers): called back, not called, so that this layer calls
 * nothing above it. */
static void (*shutdown_hooks[8])(void);
static int nshutdown_hooks;
static starpu_pthread_mutex_t hooks_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;

int sp_runtime_at_shutdown(void (*fn)(void))
{
	int rc = SP_ENOMEM;
	starpu_pthread_mutex_lock(&hooks_lock);
	for (int i = 0; i < nshutdown_hooks; i++)
		if (shutdown_hooks[i] == fn)
			rc = 0;
	if (rc != 0 && nshutdown_hooks < (int)(sizeof shutdown_hooks / sizeof shutdown_hooks[0])) {
		shutdown_hooks[nshutdown_hooks++] = fn;
		rc = 0;
	}
	starpu_pthread_mutex_unlock(&hooks_lock);
	return rc;
}

#ifdef SP_SIMGRID
static struct {
	int done, ok;
	char why[256];
} validation;
#endif

int sp__sim_validation(const char **why)
{
#ifdef SP_SIMGRID
	if (!validation.done) {
		const char *ks[SP__MAXKERNELS];
		size_t nk = 0;
		starpu_pthread_mutex_lock(&sp__rt.lock);
		for (size_t i = 0; i < sp__rt.nk && nk < SP__MAXKERNELS; i++)
			if (sp__rt.k[i].ntasks[0] + sp__rt.k[i].ntasks[1] > 0)
				ks[nk++] = sp__rt.k[i].kernel;
		starpu_pthread_mutex_unlock(&sp__rt.lock);
		validation.ok = sp_sim_validated(sp__rt.pmdir, getenv("STARPU_HOSTNAME"),
						 sp__rt.pipeline, sp__rt.sched,
						 starpu_cpu_worker_get_count(),
						 starpu_cuda_worker_get_count(), ks, nk, validation.why,
						 sizeof validation.why);
		validation.done = 1;
	}
	if (why != NULL)
		*why = validation.why;
	return validation.ok;
#else
	if (why != NULL)
		*why = "";
	return 1;
#endif
}

void sp_runtime_shutdown(void)
{
	if (!sp__rt.up)
		return;
	starpu_task_wait_for_all();
#ifdef SP_SIMGRID
	/* one line: where the fidelity table cannot vouch for this run */
	{
		const char *why;
		if (!sp__sim_validation(&why))
			fprintf(stderr, "starpipe-sim: warning: not validated: %s (tools/fidelity; "
				"doc/scheduling.md, section 3)\n", why);
	}
#endif
	sp__progress_stop();
	sp_bound_end();
	sp__runtime_update_versions();
	for (int i = nshutdown_hooks - 1; i >= 0; i--)
		shutdown_hooks[i]();
	nshutdown_hooks = 0;
	(void)sp_scratch_drain(); /* no task runs now */
	sp__lanes_stop();
#ifdef SP_HAVE_CUDA
	sp_cuda_handles_shutdown();
#endif
	starpu_shutdown();
	sp__rt.up = 0;
	free(sp__rt.rec);
	sp__rt.rec = NULL;
	sp__rt.nrec = sp__rt.caprec = 0;
}
