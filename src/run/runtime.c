/* The StarPU session: configuration, task accounting, progress, reports, traces. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include "runtime.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
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
#include "json.h"
#include "sched_hp.h"
#include "sim_host.h"

/*
 * DESIGN: the statistics are written by task callbacks (any worker thread)
 * under one mutex; a callback does a few additions, so contention is
 * negligible next to tasks of a millisecond or more.  The progress thread
 * only reads atomics.
 */

#define SP__MAXKERNELS 64

/* The code version of each pipeline's codelets, by symbol prefix (generated
 * by the build: a checksum of codelets/PIPELINE/'s sources). */
static const struct {
	const char *prefix, *version;
} code_versions[] = {
#include "codelet_versions.h"
};

static const char *code_version(const char *symbol)
{
	for (size_t i = 0; i < sizeof code_versions / sizeof code_versions[0]; i++)
		if (strncmp(symbol, code_versions[i].prefix, strlen(code_versions[i].prefix)) == 0)
			return code_versions[i].version;
	return "";
}

/* The versions file beside the models: "SYMBOL<TAB>VERSION" lines, the code
 * version each model was started with.  At most SP__MAXKERNELS * 4 entries. */
#define SP__VERSIONS "starpipe-codelets.tsv"
struct sp__ver {
	char sym[96], ver[32];
};

static size_t read_versions(const char *dir, struct sp__ver *v, size_t max)
{
	char path[4200], line[160];
	size_t n = 0;
	snprintf(path, sizeof path, "%s/%s", dir, SP__VERSIONS);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	while (n < max && fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "%95[^\t]\t%31s", v[n].sym, v[n].ver) == 2)
			n++;
	fclose(f);
	return n;
}

static const char *recorded_version(const struct sp__ver *v, size_t n, const char *sym)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].sym, sym) == 0)
			return v[i].ver;
	return NULL;
}

struct sp__kstat {
	const char *stage, *kernel; /* not owned: graph and codelet strings */
	unsigned long long ntasks[2]; /* [0] CPU, [1] CUDA */
	double busy_us[2];
	double first_start_us;        /* the earliest start of its tasks */
};

struct sp__trace_rec {
	const char *stage, *kernel;
	int worker;
	double start_us, end_us;
};

static struct {
	int up;
	double t0; /* monotonic seconds at init */
	double t0_wall; /* the same instant, wall-clock seconds (traces of several ranks) */
	starpu_pthread_mutex_t lock;
	struct sp__kstat k[SP__MAXKERNELS];
	size_t nk;
	double worker_busy_us[STARPU_NMAXWORKERS];
	unsigned long long worker_ntasks[STARPU_NMAXWORKERS];
	int trace, bound;
	double first_start_us, last_end_us; /* the makespan's ends; first_start 0: no task */
	struct sp__trace_rec *rec;
	size_t nrec, caprec;
	atomic_ullong submitted, done;
	atomic_size_t items_total, items_done;
	int progress;
	double progress_period;
	starpu_pthread_t progress_thread;
	atomic_int stop_progress;
	starpu_pthread_mutex_t plock;
	starpu_pthread_cond_t pcond;
	char sched[64];
	int heteroprio; /* task priorities are sched_hp.h buckets */
	char pmdir[4096];   /* the performance models' folder */
	int calibrate;
	char cap_note[512]; /* why fewer CPU workers than asked, or "" */
	long cores;
} rt = { .lock = STARPU_PTHREAD_MUTEX_INITIALIZER,
	 .plock = STARPU_PTHREAD_MUTEX_INITIALIZER,
	 .pcond = STARPU_PTHREAD_COND_INITIALIZER };

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* The per-user default folder of performance models into buf; returns 1
 * when it is the fallback under $TMPDIR (or /tmp), whose parent
 * `starpipe-UID` must then be private (see private_dir), else 0. */
static int default_dir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	const char *tmp = getenv("TMPDIR");

	if (xdg != NULL && xdg[0] == '/') {
		snprintf(buf, len, "%s/starpipe/perfmodels", xdg);
		return 0;
	}
	if (home != NULL && home[0] != '\0') {
		snprintf(buf, len, "%s/.cache/starpipe/perfmodels", home);
		return 0;
	}
	snprintf(buf, len, "%s/starpipe-%u/perfmodels",
		 tmp != NULL && tmp[0] == '/' ? tmp : "/tmp", (unsigned)getuid());
	return 1;
}

const char *sp_runtime_default_perfmodel_dir(char *buf, size_t len)
{
	default_dir(buf, len);
	return buf;
}

/* Makes sure `path` (the fallback's `starpipe-UID` under a shared,
 * world-writable folder) is ours alone before anything is written under it:
 * created 0700 if missing; refused if it is a symbolic link, not a folder,
 * owned by another user, or writable by group or others, since whoever
 * controls it controls the performance models we load (and, through a
 * link, where we write). */
static int private_dir(const char *path, sp_err_t *err)
{
	struct stat st;
	int fd;

	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return sp_seterr(err, SP_EIO, "cannot create folder '%s': %s", path,
				 strerror(errno));
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
			return sp_seterr(err, SP_EIO,
					 "refusing perf-model folder '%s': it is a symbolic link (remove it, or set HOME or --perfmodel-dir)",
					 path);
		return sp_seterr(err, SP_EIO, "refusing perf-model folder '%s': %s", path,
				 e == ENOTDIR ? "not a folder" : strerror(e));
	}
	if (fstat(fd, &st) != 0) {
		int e = errno;

		close(fd);
		return sp_seterr(err, SP_EIO, "cannot inspect folder '%s': %s", path, strerror(e));
	}
	close(fd);
	if (st.st_uid != getuid())
		return sp_seterr(err, SP_EIO,
				 "refusing perf-model folder '%s': it is owned by uid %u, not by you (uid %u)",
				 path, (unsigned)st.st_uid, (unsigned)getuid());
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
		return sp_seterr(err, SP_EIO,
				 "refusing perf-model folder '%s': it is writable by %s (chmod 700 it)",
				 path, (st.st_mode & S_IWOTH) != 0 ? "everyone" : "its group");
	return 0;
}

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

int sp_runtime_check_perfmodel_dir(const char *path, char *msg, size_t len)
{
	struct stat st;

	if (path == NULL || path[0] == '\0')
		return 0;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return 0;
		sp_fmt_fit(msg, len, "'%s' is not a folder", path);
		return -1;
	}
	if (errno == ENOENT)
		return 0; /* created at start */
	sp_fmt_fit(msg, len, "'%s': %s", path, strerror(errno));
	return -1;
}

static void *progress_main(void *arg);

/* OpenBLAS's own control (cblas.h of other BLAS builds lacks it): kernels run
 * one per worker, so BLAS must not start threads of its own. */
void openblas_set_num_threads(int n);

int sp_runtime_init(const sp_runtime_conf_t *c, sp_err_t *err)
{
	struct starpu_conf conf;
	char dir[4096], msg[sizeof err->msg];
	char num[32];
	int ret;

	if (starpu_conf_init(&conf) != 0)
		return sp_seterr(err, SP_ESTARPU, "starpu_conf_init failed");

	/* StarPU reads its perf-model folder and workers-per-GPU count from
	 * the environment only (1.3); set them before starpu_init.  StarPU
	 * aborts when the folder is a file: say so here instead. */
	if (c->perfmodel_dir != NULL && c->perfmodel_dir[0] != '\0') {
		snprintf(dir, sizeof dir, "%s", c->perfmodel_dir);
	} else if (default_dir(dir, sizeof dir)) {
		char *slash = strrchr(dir, '/');

		*slash = '\0';
		ret = private_dir(dir, err);
		*slash = '/';
		if (ret != 0)
			return ret;
	}
	if (sp_runtime_check_perfmodel_dir(dir, msg, sizeof msg) != 0)
		return sp_seterr(err, SP_EIO, "perf-model folder: %s", msg);
	if ((ret = sp_mkdirs(dir, err)) != 0)
		return ret; /* err names the folder */
	setenv("STARPU_PERF_MODEL_DIR", dir, 1);
	snprintf(rt.pmdir, sizeof rt.pmdir, "%s", dir);
	rt.calibrate = c->calibrate;
	snprintf(num, sizeof num, "%d", c->workers_per_gpu > 0 ? c->workers_per_gpu : 1);
	setenv("STARPU_NWORKER_PER_CUDA", num, 1);
	if (getenv("STARPU_SILENT") == NULL)
		setenv("STARPU_SILENT", "1", 1);

	openblas_set_num_threads(1);
	conf.ncpus = c->ncpus;
	if (c->cpu_count > 0) {
		/* ranks sharing a node: each its own cores, or StarPU would bind
		 * every rank's first worker to core 0 */
		if (conf.ncpus < 0)
			conf.ncpus = c->cpu_count;
		conf.use_explicit_workers_bindid = 1;
		for (int w = 0; w < STARPU_NMAXWORKERS; w++)
			conf.workers_bindid[w] = (unsigned)(c->cpu_first + w % c->cpu_count);
	}
	conf.ncuda = c->ncuda;
	conf.nopencl = 0;
	conf.calibrate = c->calibrate;
	/* starpipe handles SIGINT itself (main.c).  StarPU's own handler saves
	 * the previous one at each starpu_init, so after the restart below (a
	 * CUDA build on a node without GPU) it would save itself and spin in
	 * raise(SIGINT) forever; it only dumps FxT traces, which we do not use. */
	conf.catch_signals = 0;
	int autosched = c->scheduler == NULL || c->scheduler[0] == '\0' ||
			strcmp(c->scheduler, "auto") == 0;
	if (!autosched) {
		snprintf(rt.sched, sizeof rt.sched, "%s", c->scheduler);
	} else {
		/* With GPUs, heteroprio with buckets from the models (sched_hp.h;
		 * doc/scheduling.md: measured on an H200 node, dmdas lost to its
		 * optimistic CPU models); decided again after init if the build
		 * has CUDA but the node has no GPU. */
#if defined(STARPU_USE_CUDA) || defined(STARPU_SIMGRID)
		snprintf(rt.sched, sizeof rt.sched, "%s", c->ncuda == 0 ? "lws" : "heteroprio");
#else
		snprintf(rt.sched, sizeof rt.sched, "lws");
#endif
	}
	conf.sched_policy_name = rt.sched;
	if (strcmp(rt.sched, "heteroprio") == 0) {
		sp_hp_plan(c->graph, 0);
		conf.sched_policy_init = sp_hp_init_cb;
		rt.heteroprio = 1;
	}
	/* A GPU node: the workers' threads must leave a core to starpipe's own
	 * (the item drivers plan and submit, the CUDA drivers launch): with
	 * every core taken, the H200 node lost 1-1.6 s per 3-frame batch
	 * (doc/scheduling.md).  Only when every core was asked for (--ncpus
	 * -1), and STARPU_RESERVE_NCPU (StarPU's own knob) still decides. */
#if defined(STARPU_USE_CUDA) || defined(STARPU_SIMGRID)
	if (c->ncpus < 0 && c->cpu_count == 0 && c->ncuda != 0 && getenv("STARPU_RESERVE_NCPU") == NULL)
		conf.reserve_ncpus = 1;
	/* StarPU keeps 5-10 % of a GPU's memory chunks clean by writing dirty
	 * ones back to main memory, however much memory is free: each write-back
	 * is a pinned host allocation (0.65 ms per MiB) and a copy on the CUDA
	 * worker's thread, for data (DESI's normal equations, 100 MB a chunk)
	 * that never leaves the GPU.  Eviction when the GPU is really full
	 * writes back on demand anyway (doc/scheduling.md; StarPU's own
	 * variables still decide). */
	if (c->ncuda != 0) {
		setenv("STARPU_MINIMUM_CLEAN_BUFFERS", "0", 0);
		setenv("STARPU_TARGET_CLEAN_BUFFERS", "0", 0);
	}
#endif

	ret = starpu_init(&conf);
	if (ret == -ENODEV)
		return sp_seterr(err, SP_ENODEV, "StarPU found no worker to run tasks on");
	if (ret != 0)
		return sp_seterr(err, SP_ESTARPU, "starpu_init failed: %s", strerror(-ret));

	if (starpu_cuda_worker_get_count() == 0 && conf.reserve_ncpus > 0 &&
	    (!autosched || strcmp(rt.sched, "lws") == 0)) {
		/* No GPU after all: every core for the CPU workers. */
		starpu_shutdown();
		conf.reserve_ncpus = 0;
		ret = starpu_init(&conf);
		if (ret != 0)
			return sp_seterr(err, SP_ESTARPU, "starpu_init failed: %s", strerror(-ret));
	}
	if (autosched && starpu_cuda_worker_get_count() == 0 && strcmp(rt.sched, "lws") != 0) {
		/* No GPU after all: restart with the CPU scheduler. */
		starpu_shutdown();
		snprintf(rt.sched, sizeof rt.sched, "lws");
		conf.sched_policy_name = rt.sched;
		conf.sched_policy_init = NULL;
		conf.reserve_ncpus = 0;
		rt.heteroprio = 0;
		ret = starpu_init(&conf);
		if (ret != 0)
			return sp_seterr(err, SP_ESTARPU, "starpu_init failed: %s", strerror(-ret));
	}

	/* This StarPU's CPU cap (Debian's binary: 4) must never hide cores
	 * silently: say so once, here and in the report. */
#ifdef SP_SIMGRID
	{
		const char *hmf = getenv("SP_SIM_HOST_MODEL");
		if (hmf == NULL || strcmp(hmf, "none") != 0) {
			ret = sp_sim_host_init(rt.pmdir, getenv("STARPU_HOSTNAME"), hmf, err);
			if (ret != 0) {
				starpu_shutdown();
				return ret;
			}
		}
	}
#endif
	rt.cores = sysconf(_SC_NPROCESSORS_ONLN);
	rt.cap_note[0] = '\0';
	long want = c->ncpus < 0 ? rt.cores : c->ncpus;
	if (want > STARPU_MAXCPUS) {
		snprintf(rt.cap_note, sizeof rt.cap_note,
			 "this StarPU was built for at most %d CPU workers (STARPU_MAXCPUS) and %s "
			 "%ld: running %u CPU workers; lift the cap with tools/build-starpu PREFIX, "
			 "then ./configure --with-starpu=PREFIX",
			 STARPU_MAXCPUS, c->ncpus < 0 ? "this machine has" : "--ncpus asked for", want,
			 starpu_cpu_worker_get_count());
		fprintf(stderr, "starpipe: warning: %s\n", rt.cap_note);
	}

#ifdef SP_HAVE_CUDA
	if ((ret = sp_cuda_handles_init(err)) != 0) {
		starpu_shutdown();
		return ret;
	}
#endif
	starpu_profiling_status_set(STARPU_PROFILING_ENABLE);
	rt.up = 1;
	rt.t0 = now_s();
	{
		struct timespec w;
		clock_gettime(CLOCK_REALTIME, &w);
		rt.t0_wall = (double)w.tv_sec + 1e-9 * (double)w.tv_nsec;
	}
	rt.trace = c->trace;
	rt.bound = c->bound;
	rt.first_start_us = rt.last_end_us = 0;
	if (rt.bound)
		sp_bound_begin();
	rt.progress = c->progress;
	rt.progress_period = c->progress_period;
	atomic_store(&rt.stop_progress, 0);
	if (rt.progress && starpu_pthread_create(&rt.progress_thread, NULL, progress_main, NULL) != 0)
		rt.progress = 0;
	return 0;
}

unsigned sp_runtime_ncpu_workers(void) { return starpu_cpu_worker_get_count(); }

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
	return rt.heteroprio;
}

unsigned sp_runtime_ncuda_workers(void) { return starpu_cuda_worker_get_count(); }

void sp_runtime_items(size_t total) { atomic_store(&rt.items_total, total); }
void sp_runtime_item_done(void) { atomic_fetch_add(&rt.items_done, 1); }
void sp__runtime_task_submitted(void) { atomic_fetch_add(&rt.submitted, 1); }

void sp__runtime_task_done(const char *stage, const char *kernel, int workerid,
			   double start_us, double end_us)
{
	int cuda = workerid >= 0 && starpu_worker_get_type(workerid) == STARPU_CUDA_WORKER;
	double dur = end_us - start_us;

	starpu_pthread_mutex_lock(&rt.lock);
	size_t i;
	for (i = 0; i < rt.nk; i++)
		if (rt.k[i].stage == stage && strcmp(rt.k[i].kernel, kernel) == 0)
			break;
	if (i == rt.nk && rt.nk < SP__MAXKERNELS) {
		rt.k[i].stage = stage;
		rt.k[i].kernel = kernel;
		rt.k[i].first_start_us = start_us;
		rt.nk++;
	}
	if (i < rt.nk) {
		rt.k[i].ntasks[cuda]++;
		rt.k[i].busy_us[cuda] += dur;
		if (start_us < rt.k[i].first_start_us)
			rt.k[i].first_start_us = start_us;
		/* entries in order of their first start: the pipeline's order
		 * (completion order is not: StarPU releases a task's data, so its
		 * successor may run and end, before the task's callback) */
		for (; i > 0 && rt.k[i].first_start_us < rt.k[i - 1].first_start_us; i--) {
			struct sp__kstat t = rt.k[i];
			rt.k[i] = rt.k[i - 1];
			rt.k[i - 1] = t;
		}
	}
	if (start_us > 0 && (rt.first_start_us == 0 || start_us < rt.first_start_us))
		rt.first_start_us = start_us;
	if (end_us > rt.last_end_us)
		rt.last_end_us = end_us;
	if (workerid >= 0 && workerid < STARPU_NMAXWORKERS) {
		rt.worker_busy_us[workerid] += dur;
		rt.worker_ntasks[workerid]++;
	}
	if (rt.trace) {
		if (rt.nrec == rt.caprec) {
			size_t cap = rt.caprec ? 2 * rt.caprec : 4096;
			struct sp__trace_rec *r = realloc(rt.rec, cap * sizeof *r);
			if (r != NULL) {
				rt.rec = r;
				rt.caprec = cap;
			}
		}
		if (rt.nrec < rt.caprec)
			rt.rec[rt.nrec++] = (struct sp__trace_rec){ stage, kernel, workerid,
								   start_us, end_us };
	}
	starpu_pthread_mutex_unlock(&rt.lock);
	atomic_fetch_add(&rt.done, 1);
}

static void fmt_duration(char *buf, size_t len, double s)
{
	if (!isfinite(s) || s < 0)
		snprintf(buf, len, "?");
	else if (s < 60)
		snprintf(buf, len, "%.0fs", s);
	else if (s < 3600)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
	else
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

static void progress_line(int tty, int final)
{
	double el = now_s() - rt.t0;
	unsigned long long sub = atomic_load(&rt.submitted), done = atomic_load(&rt.done);
	size_t it = atomic_load(&rt.items_total), id = atomic_load(&rt.items_done);
	char left[32], elapsed[32];
	double frac = it ? (double)id / it : 0;
	/* Within the items in flight, count their finished tasks as progress. */
	if (it && id < it && sub > 0)
		frac += (1.0 / it) * ((double)done / sub) * (double)(sub > done ? 1 : 0);
	fmt_duration(elapsed, sizeof elapsed, el);
	if (frac > 0.01 && !final)
		fmt_duration(left, sizeof left, el / frac - el);
	else
		snprintf(left, sizeof left, final ? "0s" : "?");
	fprintf(stderr, "%s[starpipe] items %zu/%zu  tasks %llu/%llu  %.0f tasks/s  elapsed %s  left %s%s",
		tty ? "\r\033[K" : "", id, it, done, sub, el > 0 ? done / el : 0.0, elapsed, left,
		tty ? "" : "\n");
	fflush(stderr);
}

static void *progress_main(void *arg)
{
	(void)arg;
	int tty = isatty(STDERR_FILENO);
	double period = rt.progress_period > 0 ? rt.progress_period : tty ? 0.5 : 10.0;
	long wake_ns = (long)(1e9 * (period < 0.25 ? period : 0.25));
	double last = now_s();
	starpu_pthread_mutex_lock(&rt.plock);
	while (!atomic_load(&rt.stop_progress)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += wake_ns;
		while (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		starpu_pthread_cond_timedwait(&rt.pcond, &rt.plock, &ts);
		if (!atomic_load(&rt.stop_progress) && now_s() - last >= period) {
			progress_line(tty, 0);
			last = now_s();
		}
	}
	starpu_pthread_mutex_unlock(&rt.plock);
	if (tty)
		progress_line(tty, 1), fputc('\n', stderr);
	return NULL;
}

static void stop_progress(void)
{
	if (!rt.progress)
		return;
	starpu_pthread_mutex_lock(&rt.plock);
	atomic_store(&rt.stop_progress, 1);
	starpu_pthread_cond_signal(&rt.pcond);
	starpu_pthread_mutex_unlock(&rt.plock);
	starpu_pthread_join(rt.progress_thread, NULL);
	rt.progress = 0;
}

/* Records the code version of each codelet that ran whose model has none
 * yet, or was started afresh (--calibrate 2). */
static void update_versions(void)
{
	struct sp__ver v[SP__MAXKERNELS * 4];
	size_t n = read_versions(rt.pmdir, v, SP__MAXKERNELS * 3), n0 = n;
	int changed = 0;
	for (size_t i = 0; i < rt.nk; i++) {
		const char *now = code_version(rt.k[i].kernel);
		size_t j;
		for (j = 0; j < n && strcmp(v[j].sym, rt.k[i].kernel) != 0; j++)
			;
		if (j == n && n < sizeof v / sizeof v[0]) {
			snprintf(v[n].sym, sizeof v[n].sym, "%s", rt.k[i].kernel);
			snprintf(v[n].ver, sizeof v[n].ver, "%s", now);
			n++;
		} else if (j < n && rt.calibrate == 2 && strcmp(v[j].ver, now) != 0) {
			snprintf(v[j].ver, sizeof v[j].ver, "%s", now);
			changed = 1;
		}
	}
	if (n == n0 && !changed)
		return;
	char path[4200], text[sizeof v];
	size_t len = 0;
	for (size_t j = 0; j < n; j++)
		len += (size_t)snprintf(text + len, sizeof text - len, "%s\t%s\n", v[j].sym, v[j].ver);
	sp_err_t err = { 0 };
	snprintf(path, sizeof path, "%s/%s", rt.pmdir, SP__VERSIONS);
	if (sp_write_file_atomic(path, text, len, &err) != 0)
		fprintf(stderr, "starpipe: warning: %s\n", err.msg);
}

void sp_runtime_shutdown(void)
{
	if (!rt.up)
		return;
	starpu_task_wait_for_all();
	stop_progress();
	sp_bound_end();
	update_versions();
#ifdef SP_HAVE_CUDA
	sp_cuda_handles_shutdown();
#endif
	starpu_shutdown();
	rt.up = 0;
	free(rt.rec);
	rt.rec = NULL;
	rt.nrec = rt.caprec = 0;
}

static const char *worker_kind(int w)
{
	return starpu_worker_get_type(w) == STARPU_CUDA_WORKER ? "CUDA" : "CPU";
}

/* Sum of bytes moved over every bus, and the per-bus figures into j. */
static unsigned long long bus_bytes(sp_json_t *j)
{
	unsigned long long total = 0;
	int nb = starpu_bus_get_count();
	if (j)
		sp_json_key(j, "transfers"), sp_json_begin_array(j);
	for (int b = 0; b < nb; b++) {
		struct starpu_profiling_bus_info info;
		memset(&info, 0, sizeof info);
		if (starpu_bus_get_profiling_info(b, &info) != 0)
			continue;
		total += (unsigned long long)info.transferred_bytes;
		if (j) {
			sp_json_begin_object(j);
			sp_json_kv_int(j, "src_node", starpu_bus_get_src(b));
			sp_json_kv_int(j, "dst_node", starpu_bus_get_dst(b));
			sp_json_kv_int(j, "bytes", info.transferred_bytes);
			sp_json_kv_int(j, "count", info.transfer_count);
			sp_json_end_object(j);
		}
	}
	if (j)
		sp_json_end_array(j);
	return total;
}

static unsigned long long bytes_moved_cache;
static int bytes_moved_read;

/* Bus counters reset when read: read them once per run. */
static unsigned long long bytes_moved(sp_json_t *j)
{
	if (!bytes_moved_read || j != NULL) {
		bytes_moved_cache = bus_bytes(j);
		bytes_moved_read = 1;
	}
	return bytes_moved_cache;
}

void sp_runtime_print_report(const char *pipeline)
{
	double wall = now_s() - rt.t0;
	unsigned nw = starpu_worker_get_count();
	char name[64];

	stop_progress();
	fprintf(stderr, "[starpipe] %s: %zu item(s) in %.3f s, scheduler %s, %u CPU + %u CUDA workers\n",
		pipeline, atomic_load(&rt.items_done), wall, rt.sched, sp_runtime_ncpu_workers(),
		sp_runtime_ncuda_workers());
	fprintf(stderr, "[starpipe] %-20s %-18s %10s %10s %12s %12s\n", "stage", "kernel", "CPU tasks",
		"CUDA tasks", "CPU s", "CUDA s");
	starpu_pthread_mutex_lock(&rt.lock);
	for (size_t i = 0; i < rt.nk; i++)
		fprintf(stderr, "[starpipe] %-20s %-18s %10llu %10llu %12.3f %12.3f\n", rt.k[i].stage,
			rt.k[i].kernel, rt.k[i].ntasks[0], rt.k[i].ntasks[1], rt.k[i].busy_us[0] * 1e-6,
			rt.k[i].busy_us[1] * 1e-6);
	for (unsigned w = 0; w < nw; w++) {
		starpu_worker_get_name((int)w, name, sizeof name);
		fprintf(stderr, "[starpipe] worker %-24s %4s busy %5.1f%%  %llu tasks\n", name,
			worker_kind((int)w), wall > 0 ? 100.0 * rt.worker_busy_us[w] * 1e-6 / wall : 0.0,
			rt.worker_ntasks[w]);
	}
	starpu_pthread_mutex_unlock(&rt.lock);
	fprintf(stderr, "[starpipe] bytes moved between memory nodes: %llu\n", bytes_moved(NULL));
}

char *sp_runtime_stage_lines(void)
{
	char *out = NULL, *p;
	size_t size = 1;
	starpu_pthread_mutex_lock(&rt.lock);
	for (size_t i = 0; i < rt.nk; i++)
		size += strlen(rt.k[i].stage) + strlen(rt.k[i].kernel) + 4 * 32;
	out = malloc(size);
	if (out != NULL) {
		p = out;
		*p = '\0';
		for (size_t i = 0; i < rt.nk; i++)
			p += sprintf(p, "%s\t%s\t%llu\t%llu\t%.17g\t%.17g\n", rt.k[i].stage,
				     rt.k[i].kernel, rt.k[i].ntasks[0], rt.k[i].ntasks[1],
				     rt.k[i].busy_us[0], rt.k[i].busy_us[1]);
	}
	starpu_pthread_mutex_unlock(&rt.lock);
	return out;
}

/* Per-stage figures summed over sp_runtime_stage_lines() texts (ranks),
 * into the report's "stages" array; a malformed line is ignored. */
static void merged_stages(sp_json_t *j, const char *lines)
{
	struct ms { char stage[128], kernel[128]; unsigned long long n[2]; double busy[2]; } *m = NULL;
	size_t nm = 0, cap = 0;
	const char *l = lines;
	while (l != NULL && *l != '\0') {
		const char *nl = strchr(l, '\n');
		size_t len = nl != NULL ? (size_t)(nl - l) : strlen(l);
		char buf[512];
		struct ms r = { 0 };
		if (len < sizeof buf) {
			memcpy(buf, l, len);
			buf[len] = '\0';
			if (sscanf(buf, "%127[^\t]\t%127[^\t]\t%llu\t%llu\t%lf\t%lf", r.stage, r.kernel,
				   &r.n[0], &r.n[1], &r.busy[0], &r.busy[1]) == 6) {
				size_t i;
				for (i = 0; i < nm; i++)
					if (strcmp(m[i].stage, r.stage) == 0 && strcmp(m[i].kernel, r.kernel) == 0)
						break;
				if (i == nm && nm == cap) {
					size_t c = cap ? 2 * cap : 16;
					struct ms *t = realloc(m, c * sizeof *t);
					if (t == NULL)
						break;
					m = t;
					cap = c;
				}
				if (i == nm)
					m[nm++] = r;
				else
					for (int k = 0; k < 2; k++) {
						m[i].n[k] += r.n[k];
						m[i].busy[k] += r.busy[k];
					}
			}
		}
		l = nl != NULL ? nl + 1 : NULL;
	}
	for (size_t i = 0; i < nm; i++) {
		sp_json_begin_object(j);
		sp_json_kv_str(j, "stage", m[i].stage);
		sp_json_kv_str(j, "kernel", m[i].kernel);
		sp_json_kv_int(j, "cpu_tasks", (long long)m[i].n[0]);
		sp_json_kv_int(j, "cuda_tasks", (long long)m[i].n[1]);
		sp_json_kv_num(j, "cpu_busy_s", m[i].busy[0] * 1e-6);
		sp_json_kv_num(j, "cuda_busy_s", m[i].busy[1] * 1e-6);
		sp_json_end_object(j);
	}
	free(m);
}

int sp_runtime_write_report(const char *path, const char *pipeline, const char *items_json,
			    const char *stage_lines, const char *cluster_json, sp_err_t *err)
{
	double wall = now_s() - rt.t0;
	unsigned nw = starpu_worker_get_count();
	char name[64];
	sp_json_t *j = sp_json_new();
	if (j == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);

	sp_json_begin_object(j);
	sp_json_kv_str(j, "pipeline", pipeline);
	sp_json_kv_str(j, "starpipe_version", PACKAGE_VERSION);
	sp_json_kv_num(j, "wall_s", wall);
	sp_json_kv_str(j, "scheduler", rt.sched);
	sp_json_kv_int(j, "cores", rt.cores);
	sp_json_kv_int(j, "starpu_maxcpus", STARPU_MAXCPUS);
	sp_json_kv_int(j, "cpu_workers", sp_runtime_ncpu_workers());
	sp_json_kv_int(j, "cuda_workers", sp_runtime_ncuda_workers());
	if (rt.cap_note[0] != '\0')
		sp_json_kv_str(j, "cpu_cap_warning", rt.cap_note);
	sp_json_kv_int(j, "items", (long long)atomic_load(&rt.items_done));
	sp_json_kv_int(j, "tasks", (long long)atomic_load(&rt.done));
	sp_json_key(j, "stages");
	sp_json_begin_array(j);
	if (stage_lines != NULL)
		merged_stages(j, stage_lines);
	starpu_pthread_mutex_lock(&rt.lock);
	for (size_t i = 0; stage_lines == NULL && i < rt.nk; i++) {
		sp_json_begin_object(j);
		sp_json_kv_str(j, "stage", rt.k[i].stage);
		sp_json_kv_str(j, "kernel", rt.k[i].kernel);
		sp_json_kv_int(j, "cpu_tasks", (long long)rt.k[i].ntasks[0]);
		sp_json_kv_int(j, "cuda_tasks", (long long)rt.k[i].ntasks[1]);
		sp_json_kv_num(j, "cpu_busy_s", rt.k[i].busy_us[0] * 1e-6);
		sp_json_kv_num(j, "cuda_busy_s", rt.k[i].busy_us[1] * 1e-6);
		sp_json_end_object(j);
	}
	sp_json_end_array(j);
	sp_json_key(j, "workers");
	sp_json_begin_array(j);
	for (unsigned w = 0; w < nw; w++) {
		starpu_worker_get_name((int)w, name, sizeof name);
		sp_json_begin_object(j);
		sp_json_kv_int(j, "id", w);
		sp_json_kv_str(j, "name", name);
		sp_json_kv_str(j, "type", worker_kind((int)w));
		sp_json_kv_int(j, "tasks", (long long)rt.worker_ntasks[w]);
		sp_json_kv_num(j, "busy_fraction", wall > 0 ? rt.worker_busy_us[w] * 1e-6 / wall : 0.0);
		sp_json_end_object(j);
	}
	sp_json_end_array(j);
	starpu_pthread_mutex_unlock(&rt.lock);
	sp_json_kv_int(j, "bytes_moved", (long long)bytes_moved(j));
	if (cluster_json != NULL) {
		sp_json_key(j, "cluster");
		sp_json_raw(j, cluster_json);
	}
	if (items_json != NULL) {
		sp_json_key(j, "items_detail");
		sp_json_raw(j, items_json);
	}
	sp_json_end_object(j);
	int ret = sp_json_write_file(j, path, err);
	sp_json_free(&j);
	return ret;
}

/* "cpu0", "cuda1": the worker's type and rank among the workers of its type. */
static void short_name(int w, char *buf, size_t len)
{
	int k = 0;
	for (int v = 0; v < w; v++)
		k += starpu_worker_get_type(v) == starpu_worker_get_type(w);
	snprintf(buf, len, "%s%d", starpu_worker_get_type(w) == STARPU_CUDA_WORKER ? "cuda" : "cpu", k);
}

/* Seconds worker w's memory node spent receiving or sending data, estimated
 * from the bytes each bus moved and StarPU's sampled bus bandwidth, shared
 * between the workers of that node.  0 for CPU workers (main memory). */
static double transfer_s(int w)
{
	unsigned node = starpu_worker_get_memory_node((unsigned)w);
	if (starpu_node_get_kind(node) == STARPU_CPU_RAM)
		return 0;
	double s = 0;
	for (int b = 0; b < starpu_bus_get_count(); b++) {
		struct starpu_profiling_bus_info info;
		int src = starpu_bus_get_src(b), dst = starpu_bus_get_dst(b);
		if (((unsigned)src != node && (unsigned)dst != node) ||
		    starpu_bus_get_profiling_info(b, &info) != 0)
			continue;
		double mbps = starpu_transfer_bandwidth((unsigned)src, (unsigned)dst);
		if (mbps > 0)
			s += (double)info.transferred_bytes / (mbps * 1e6);
	}
	unsigned share = 0;
	for (unsigned v = 0; v < starpu_worker_get_count(); v++)
		share += starpu_worker_get_memory_node(v) == node;
	return share ? s / share : s;
}

int sp_runtime_write_figures(const char *path, size_t failed, sp_err_t *err)
{
	char *text = NULL, name[32];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (f == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	double wall = now_s() - rt.t0;
	starpu_pthread_mutex_lock(&rt.lock);
	double makespan = rt.first_start_us > 0 ? (rt.last_end_us - rt.first_start_us) * 1e-6 : 0;
	fprintf(f, "scheduler\t%s\ncpu_workers\t%u\ncuda_workers\t%u\n", rt.sched,
		sp_runtime_ncpu_workers(), sp_runtime_ncuda_workers());
	fprintf(f, "items\t%zu\nfailed_items\t%zu\ntasks\t%llu\n", atomic_load(&rt.items_done),
		failed, (unsigned long long)atomic_load(&rt.done));
	fprintf(f, "wall_s\t%.6f\nmakespan_s\t%.6f\n", wall, makespan);
#ifdef SP_SIMGRID
	/* what the simulation charged beyond the models (sim_host.h) */
	const char *hmf = sp_sim_host_file(), *slash = hmf != NULL ? strrchr(hmf, '/') : NULL;
	fprintf(f, "sim_host_model\t%s\n", hmf == NULL ? "none" : slash != NULL ? slash + 1 : hmf);
#endif
	/* tasks per stage per worker type, stages in order of first start */
	for (size_t i = 0; i < rt.nk; i++) {
		size_t first = i;
		for (size_t k = 0; k < i; k++)
			if (rt.k[k].stage == rt.k[i].stage)
				first = k;
		if (first != i)
			continue;
		unsigned long long n[2] = { 0, 0 };
		for (size_t k = i; k < rt.nk; k++)
			if (rt.k[k].stage == rt.k[i].stage)
				n[0] += rt.k[k].ntasks[0], n[1] += rt.k[k].ntasks[1];
		fprintf(f, "tasks:%s:cpu\t%llu\ntasks:%s:cuda\t%llu\n", rt.k[i].stage, n[0],
			rt.k[i].stage, n[1]);
	}
	for (unsigned w = 0; w < starpu_worker_get_count(); w++) {
		double busy = makespan > 0 ? rt.worker_busy_us[w] * 1e-6 / makespan : 0;
		double xfer = makespan > 0 ? transfer_s((int)w) / makespan : 0;
		if (busy > 1)
			busy = 1;
		if (xfer > 1 - busy)
			xfer = 1 - busy;
		short_name((int)w, name, sizeof name);
		fprintf(f, "busy:%s\t%.4f\ntransfer:%s\t%.4f\nidle:%s\t%.4f\n", name, busy, name, xfer,
			name, 1 - busy - xfer);
	}
	starpu_pthread_mutex_unlock(&rt.lock);
	fprintf(f, "bytes_moved\t%llu\n", bytes_moved(NULL));
	sp_bound_t b;
	if (rt.bound && sp_bound_compute(&b) == 0) {
		double lb = fmax(b.area_s, b.path_s);
		fprintf(f, "bound_area_s\t%.6f\nbound_path_s\t%.6f\nbound_s\t%.6f\nbound_binds\t%s\n",
			b.area_s, b.path_s, lb, b.area_s >= b.path_s ? "area" : "path");
		fprintf(f, "makespan_over_bound\t%.4f\n", lb > 0 ? makespan / lb : NAN);
		fprintf(f, "bound_tasks\t%zu\nbound_measured_tasks\t%zu\nbound_dependencies\t%zu\n",
			b.ntasks, b.nmeasured, b.nedges);
	}
	int ret = sp_write_memstream_atomic(path, f, &text, &len, err);
	free(text);
	return ret;
}

int sp_runtime_write_tasks(const char *path, sp_err_t *err)
{
	char *text = NULL, name[32];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (f == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	starpu_pthread_mutex_lock(&rt.lock);
	for (size_t i = 0; i < rt.nrec; i++) {
		const struct sp__trace_rec *r = &rt.rec[i];
		if (r->worker < 0)
			continue;
		short_name(r->worker, name, sizeof name);
		fprintf(f, "%s\t%s\t%s\t%.6f\t%.6f\n", name, r->stage, r->kernel,
			(r->start_us - rt.first_start_us) * 1e-6, (r->end_us - rt.first_start_us) * 1e-6);
	}
	starpu_pthread_mutex_unlock(&rt.lock);
	int ret = sp_write_memstream_atomic(path, f, &text, &len, err);
	free(text);
	return ret;
}

double sp_runtime_t0_wall(void) { return rt.t0_wall; }

/* A metadata event naming a process (tid < 0) or one of its threads. */
static void trace_meta(sp_json_t *j, const char *what, int pid, int tid, const char *label)
{
	sp_json_begin_object(j);
	sp_json_kv_str(j, "name", what);
	sp_json_kv_str(j, "ph", "M");
	sp_json_kv_int(j, "pid", pid);
	if (tid >= 0)
		sp_json_kv_int(j, "tid", tid);
	sp_json_key(j, "args");
	sp_json_begin_object(j);
	sp_json_kv_str(j, "name", label);
	sp_json_end_object(j);
	sp_json_end_object(j);
}

char *sp_runtime_trace_events(int pid, const char *label, double shift_us)
{
	unsigned nw = starpu_worker_get_count();
	char name[64];
	char *out = NULL;
	sp_json_t *j = sp_json_new();
	if (j == NULL)
		return NULL;
	sp_json_begin_array(j);
	if (label != NULL)
		trace_meta(j, "process_name", pid, -1, label);
	for (unsigned w = 0; w < nw; w++) {
		starpu_worker_get_name((int)w, name, sizeof name);
		trace_meta(j, "thread_name", pid, (int)w, name);
	}
	starpu_pthread_mutex_lock(&rt.lock);
	for (size_t i = 0; i < rt.nrec; i++) {
		const struct sp__trace_rec *r = &rt.rec[i];
		sp_json_begin_object(j);
		sp_json_kv_str(j, "name", r->stage);
		sp_json_kv_str(j, "cat", r->kernel);
		sp_json_kv_str(j, "ph", "X");
		sp_json_kv_int(j, "pid", pid);
		sp_json_kv_int(j, "tid", r->worker);
		sp_json_kv_num(j, "ts", r->start_us + shift_us);
		sp_json_kv_num(j, "dur", r->end_us - r->start_us);
		sp_json_end_object(j);
	}
	starpu_pthread_mutex_unlock(&rt.lock);
	sp_json_end_array(j);
	if (sp_json_text(j) != NULL)
		out = strdup(sp_json_text(j));
	sp_json_free(&j);
	return out;
}

int sp_runtime_write_trace(const char *path, char *const *events, size_t nevents, sp_err_t *err)
{
	char *own = NULL;
	if (events == NULL) {
		own = sp_runtime_trace_events(0, NULL, 0.0);
		if (own == NULL)
			return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
		events = &own;
		nevents = 1;
	}
	sp_json_t *j = sp_json_new();
	if (j == NULL) {
		free(own);
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	}
	sp_json_begin_object(j);
	sp_json_kv_str(j, "displayTimeUnit", "ms");
	sp_json_key(j, "traceEvents");
	sp_json_begin_array(j);
	for (size_t e = 0; e < nevents; e++)
		if (events[e] != NULL)
			sp_json_raw_elements(j, events[e]);
	sp_json_end_array(j);
	sp_json_end_object(j);
	int ret = sp_json_write_file(j, path, err);
	sp_json_free(&j);
	free(own);
	return ret;
}

int sp_runtime_models(const char *dir, const char *const *symbols, size_t n, FILE *out,
		      sp_err_t *err)
{
	char path[4096], msg[sizeof err->msg], arch[64];
	size_t nmodel = 0, nuncal = 0, nnoisy = 0, nstale = 0;
	struct sp__ver ver[SP__MAXKERNELS * 4];

	if (dir != NULL && dir[0] != '\0')
		snprintf(path, sizeof path, "%s", dir);
	else
		default_dir(path, sizeof path);
	if (access(path, F_OK) == 0 && sp_runtime_check_perfmodel_dir(path, msg, sizeof msg) != 0)
		return sp_seterr(err, SP_EIO, "perf-model folder: %s", msg);
	setenv("STARPU_PERF_MODEL_DIR", path, 1);
	if (getenv("STARPU_SILENT") == NULL)
		setenv("STARPU_SILENT", "1", 1);
	starpu_perfmodel_initialize();
	size_t nver = read_versions(path, ver, sizeof ver / sizeof ver[0]);
	fprintf(out, "# performance models in %s\n", path);
	fprintf(out, "# %-18s %-18s %-10s %8s %12s %8s %8s  %s\n", "codelet", "worker type",
		"footprint", "samples", "mean", "spread", "GFLOP/s", "flags");
	for (size_t i = 0; i < n; i++) {
		struct starpu_perfmodel model;
		int rows = 0;

		char mpath[4096];
		memset(&model, 0, sizeof model);
		model.type = STARPU_HISTORY_BASED;
		starpu_perfmodel_get_model_path(symbols[i], mpath, sizeof mpath);
		if (access(mpath, R_OK) != 0 || starpu_perfmodel_load_symbol(symbols[i], &model) != 0) {
			fprintf(out, "%-20s %-18s %-10s %8s %12s %8s %8s  %s\n", symbols[i], "-", "-", "0",
				"-", "-", "-", "uncalibrated: no model yet (run the graph with --calibrate 1)");
			nuncal++;
			continue;
		}
		nmodel++;
		const char *rec = recorded_version(ver, nver, symbols[i]);
		int stale = rec != NULL && strcmp(rec, code_version(symbols[i])) != 0;
		int ncomb = starpu_perfmodel_get_narch_combs(), bad = 0, noisy = 0;
		for (int comb = 0; comb < ncomb; comb++) {
			struct starpu_perfmodel_arch *a = starpu_perfmodel_arch_comb_fetch(comb);
			for (unsigned impl = 0; impl < STARPU_MAXIMPLEMENTATIONS; impl++) {
				struct starpu_perfmodel_per_arch *pa =
					starpu_perfmodel_get_model_per_arch(&model, a, impl);
				if (pa == NULL)
					continue;
				starpu_perfmodel_get_arch_name(a, arch, sizeof arch, impl);
				for (struct starpu_perfmodel_history_list *l = pa->list; l != NULL;
				     l = l->next) {
					const struct starpu_perfmodel_history_entry *e = l->entry;
					double nn = e->nsample, mean = nn > 0 ? e->sum / nn : 0.0;
					double var = nn > 0 ? e->sum2 / nn - mean * mean : 0.0;
					double rel = mean > 0 ? sqrt(var > 0 ? var : 0) / mean : 0.0;
					const char *flag =
						stale ? "stale: calibrated on other code (rerun with --calibrate 2)"
						: e->nsample < 10 ? "uncalibrated: fewer than 10 samples"
						: rel > 0.25      ? "noisy: spread above 25 %"
								  : "";
					bad |= e->nsample < 10;
					noisy |= e->nsample >= 10 && rel > 0.25;
					/* the task's declared flops (STARPU_FLOPS) over its mean time */
					char gf[32] = "-";
					if (e->flops > 0 && mean > 0)
						snprintf(gf, sizeof gf, "%.3g", e->flops / mean * 1e-3);
					fprintf(out, "%-20s %-18s 0x%08" PRIx32 " %8u %9.3f ms %6.1f %% %8s  %s\n",
						symbols[i], arch, e->footprint, e->nsample, mean / 1e3,
						100 * rel, gf, flag);
					rows++;
				}
			}
		}
		if (rows == 0) {
			fprintf(out, "%-20s %-18s %-10s %8s %12s %8s %8s  %s\n", symbols[i], "-", "-", "0",
				"-", "-", "-", "uncalibrated: the model holds no measurement");
			bad = 1;
		}
		nuncal += bad != 0;
		nnoisy += noisy != 0;
		nstale += stale;
		starpu_perfmodel_unload_model(&model);
	}
	fprintf(out, "# %zu codelet(s): %zu with a model, %zu uncalibrated, %zu noisy, %zu stale; "
		"calibrate with `starpipe run GRAPH --calibrate 1` on representative inputs\n",
		n, nmodel, nuncal, nnoisy, nstale);
	return 0;
}
