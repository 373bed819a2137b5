/* starpipe-sim's host model (sim_host.h): contention, starvation, host work. */
#define _GNU_SOURCE
#include "sim_host.h"
#include "runtime.h"
#include "runtime_int.h"

#ifdef SP_SIMGRID
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <starpu.h>

#define MAXSLOW 64

struct slowdown {
	char symbol[128];
	double a, b; /* a + b (k - 1) */
	/* cpu_slowdown_small.SYMBOL: tasks of fewer than small_bytes bytes of
	 * data take small_a + small_b (k - 1) instead (0: no such line) */
	double small_bytes, small_a, small_b;
};

static struct {
	char file[4096];
	int loaded;
	int starved;
	long cores;
	double host_time_scale, item_commit_s;
	double starved_cpu, starved_host, pinned_free, pinned_alloc_gpu, starved_gpu;
	int pinned_alloc_serial;
	double memory_bytes;
	struct slowdown slow[MAXSLOW];
	int nslow;
	struct slowdown work[MAXSLOW]; /* host_work_s.NAME: a = seconds per call */
	int nwork;
	struct slowdown commit[MAXSLOW]; /* item_commit_s.PIPELINE: a = seconds */
	int ncommit;
	struct slowdown dflt;
} hm = { .host_time_scale = 0, .starved_gpu = 1, .starved_cpu = 1, .starved_host = 1,
	 .dflt = { "default", 1, 0 } };

/* CPU workers running a task now.  SimGrid runs one actor at a time. */
static int busy_cpus;

/* Seconds the GPUs owe for pinned allocations made by CPU workers (the
 * driver's lock): the next GPU task pays them. */
static double gpu_debt;

/* A handle (home node -1) whose main-memory replica has been charged is
 * marked by its user data (a new handle starts unmarked, even at a freed
 * one's address; starpipe gives such handles no user data of its own). */
static char charged_mark;

/* A CPU task's buffers that StarPU allocated in main memory for it: on a
 * GPU node that replica is pinned, and pinning takes the CUDA driver's lock. */
static void note_pinned(struct starpu_task *task)
{
	if (hm.pinned_alloc_gpu <= 0 || starpu_cuda_worker_get_count() == 0)
		return;
	unsigned n = STARPU_TASK_GET_NBUFFERS(task);
	for (unsigned i = 0; i < n; i++) {
		starpu_data_handle_t h = STARPU_TASK_GET_HANDLE(task, i);
		if (starpu_data_get_home_node(h) >= 0 || starpu_data_get_user_data(h) == &charged_mark)
			continue;
		starpu_data_set_user_data(h, &charged_mark);
		gpu_debt += hm.pinned_alloc_gpu * (double)starpu_data_get_size(h) / 1073741824.0;
	}
}

/* A stand-in's step: short enough to follow k as tasks start and end. */
#define QUANTUM_S 0.002

/* The cpu_slowdown entry of codelet SYM (made with the default's a and b
 * when new), or NULL when the table is full. */
static struct slowdown *slowdown_line(const char *sym)
{
	if (strcmp(sym, "default") == 0)
		return &hm.dflt;
	for (int i = 0; i < hm.nslow; i++)
		if (strcmp(hm.slow[i].symbol, sym) == 0)
			return &hm.slow[i];
	if (hm.nslow == MAXSLOW)
		return NULL;
	struct slowdown *s = &hm.slow[hm.nslow++];
	*s = hm.dflt;
	snprintf(s->symbol, sizeof s->symbol, "%s", sym);
	return s;
}

static int parse_line(char *line, const char *path, int lineno, sp_err_t *err)
{
	char *hash = strchr(line, '#');
	if (hash != NULL)
		*hash = '\0';
	char *eq = strchr(line, '=');
	char key[128];
	if (eq == NULL) {
		for (char *p = line; *p; p++)
			if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
				return sp_seterr(err, SP_EINVAL, "%s:%d: expected 'key = value'", path,
						 lineno);
		return 0;
	}
	*eq = '\0';
	if (sscanf(line, " %127s", key) != 1)
		return sp_seterr(err, SP_EINVAL, "%s:%d: a value without a key", path, lineno);
	const char *val = eq + 1;
	double x, y;
	int n = sscanf(val, "%lf %lf", &x, &y);
	if (n < 1 || !isfinite(x) || x < 0)
		return sp_seterr(err, SP_EINVAL, "%s:%d: %s: expected a number >= 0", path, lineno,
				 key);
	if (strncmp(key, "cpu_slowdown.", 13) == 0) {
		if (n != 2 || !isfinite(y) || y < 0 || x <= 0)
			return sp_seterr(err, SP_EINVAL,
					 "%s:%d: %s: expected 'a b' (a > 0, b >= 0: a + b (k - 1))",
					 path, lineno, key);
		struct slowdown *s = slowdown_line(key + 13);
		if (s == NULL)
			return sp_seterr(err, SP_EINVAL, "%s:%d: more than %d codelets", path, lineno,
					 MAXSLOW);
		s->a = x;
		s->b = y;
		return 0;
	}
	if (strncmp(key, "cpu_slowdown_small.", 19) == 0) {
		double z;
		if (sscanf(val, "%lf %lf %lf", &x, &y, &z) != 3 || !isfinite(x) || x < 1 ||
		    !isfinite(y) || y <= 0 || !isfinite(z) || z < 0)
			return sp_seterr(err, SP_EINVAL,
					 "%s:%d: %s: expected 'BYTES a b' (BYTES >= 1, a > 0, b >= 0)",
					 path, lineno, key);
		struct slowdown *s = slowdown_line(key + 19);
		if (s == NULL || s == &hm.dflt)
			return sp_seterr(err, SP_EINVAL, "%s:%d: %s: %s", path, lineno, key,
					 s == NULL ? "too many codelets" : "a codelet's name expected");
		s->small_bytes = x;
		s->small_a = y;
		s->small_b = z;
		return 0;
	}
	if (n != 1)
		return sp_seterr(err, SP_EINVAL, "%s:%d: %s: one number expected", path, lineno, key);
	if (strncmp(key, "host_work_s.", 12) == 0) {
		if (hm.nwork == MAXSLOW)
			return sp_seterr(err, SP_EINVAL, "%s:%d: more than %d host works", path, lineno,
					 MAXSLOW);
		struct slowdown *w = &hm.work[hm.nwork++];
		snprintf(w->symbol, sizeof w->symbol, "%s", key + 12);
		w->a = x;
		return 0;
	}
	if (strncmp(key, "item_commit_s.", 14) == 0 && x >= 0) {
		if (hm.ncommit == MAXSLOW)
			return sp_seterr(err, SP_EINVAL, "%s:%d: more than %d item commits", path,
					 lineno, MAXSLOW);
		struct slowdown *c = &hm.commit[hm.ncommit++];
		snprintf(c->symbol, sizeof c->symbol, "%s", key + 14);
		c->a = x;
		return 0;
	}
	if (strcmp(key, "cores") == 0 && x >= 1)
		hm.cores = (long)x;
	else if (strcmp(key, "host_time_scale") == 0 && x > 0)
		hm.host_time_scale = x;
	else if (strcmp(key, "item_commit_s") == 0)
		hm.item_commit_s = x;
	else if (strcmp(key, "starved_cpu_slowdown") == 0 && x > 0)
		hm.starved_cpu = x;
	else if (strcmp(key, "starved_host_slowdown") == 0 && x > 0)
		hm.starved_host = x;
	else if (strcmp(key, "pinned_free_s_per_GiB") == 0)
		hm.pinned_free = x;
	else if (strcmp(key, "pinned_alloc_gpu_stall_s_per_GiB") == 0)
		hm.pinned_alloc_gpu = x;
	else if (strcmp(key, "starved_gpu_slowdown") == 0 && x > 0)
		hm.starved_gpu = x;
	else if (strcmp(key, "memory_bytes") == 0 && x >= 1)
		hm.memory_bytes = x;
	else if (strcmp(key, "pinned_alloc_serial") == 0 && (x == 0 || x == 1))
		hm.pinned_alloc_serial = (int)x;
	else
		return sp_seterr(err, SP_EINVAL, "%s:%d: unknown key or value out of range: %s", path,
				 lineno, key);
	return 0;
}

int sp_sim_host_init(const char *pmdir, const char *host, const char *path, sp_err_t *err)
{
	char buf[1024];
	if (path == NULL || path[0] == '\0') {
		if (pmdir == NULL || host == NULL)
			return 0;
		snprintf(hm.file, sizeof hm.file, "%s/starpipe-sim/%s.conf", pmdir, host);
	} else {
		snprintf(hm.file, sizeof hm.file, "%s", path);
	}
	FILE *f = fopen(hm.file, "r");
	if (f == NULL) {
		if (errno == ENOENT && (path == NULL || path[0] == '\0'))
			return 0; /* no host model for this platform: models only */
		return sp_seterr(err, SP_EIO, "%s: %s", hm.file, strerror(errno));
	}
	int lineno = 0, rc = 0;
	while (rc == 0 && fgets(buf, sizeof buf, f) != NULL)
		rc = parse_line(buf, hm.file, ++lineno, err);
	fclose(f);
	if (rc != 0)
		return rc;
	if (hm.cores <= 0)
		return sp_seterr(err, SP_EINVAL, "%s: no 'cores = N' (the platform's cores)", hm.file);
	hm.loaded = 1;
	long threads = (long)starpu_cpu_worker_get_count() + (long)starpu_cuda_worker_get_count();
	hm.starved = threads >= hm.cores;
	return 0;
}

const char *sp_sim_host_file(void)
{
	return hm.loaded ? hm.file : NULL;
}

unsigned long long sp_sim_host_memory(void)
{
	return hm.loaded ? (unsigned long long)hm.memory_bytes : 0;
}

/* Whether the stand-in runs a task (StarPU also calls a reduction's init and
 * reduce functions directly on a replica: nothing to charge then). */
static struct starpu_task *task_of(void *buffers[])
{
	struct starpu_task *task = starpu_task_get_current();
	if (task == NULL || task->cl == NULL || task->cl->model == NULL)
		return NULL;
	void **ifs = task->dyn_handles != NULL ? task->dyn_interfaces : task->interfaces;
	return (void **)buffers == ifs ? task : NULL;
}

/* The task's model time on this worker, in seconds (as StarPU charges it). */
static double model_s(struct starpu_task *task)
{
	int w = starpu_worker_get_id();
	struct starpu_perfmodel_arch *arch = starpu_worker_get_perf_archtype(w, task->sched_ctx);
	double us = starpu_task_expected_length(task, arch, starpu_task_get_implementation(task));
	if (isnan(us) || us <= 0) {
		fprintf(stderr,
			"starpipe-sim: codelet %s has no calibrated model for worker %d's type in "
			"%s: calibrate it on the platform first (starpipe run --calibrate 1)\n",
			task->cl->model->symbol, w, getenv("STARPU_PERF_MODEL_DIR"));
		abort();
	}
	return us * 1e-6;
}

static const struct slowdown *slowdown_of(const char *symbol)
{
	for (int i = 0; i < hm.nslow; i++)
		if (strcmp(hm.slow[i].symbol, symbol) == 0)
			return &hm.slow[i];
	return NULL;
}

/* The bytes of data a task works on, as its model's size column counts
 * them: the codelet's size_base when it has one, else its buffers' sizes. */
static double task_bytes(struct starpu_task *task)
{
	if (task->cl->model->size_base != NULL)
		return (double)task->cl->model->size_base(task, starpu_task_get_implementation(task));
	double bytes = 0;
	for (unsigned i = 0; i < STARPU_TASK_GET_NBUFFERS(task); i++)
		bytes += (double)starpu_data_get_size(STARPU_TASK_GET_HANDLE(task, i));
	return bytes;
}

void sp__sim_cpu_task(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	struct starpu_task *task = task_of(buffers);
	if (task == NULL)
		return;
	double left = model_s(task); /* the model's seconds still to run */
	if (!hm.loaded) {
		starpu_sleep((float)left);
		return;
	}
	note_pinned(task);
	const struct slowdown *s = slowdown_of(task->cl->model->symbol);
	double extra = 1;
	if (s == NULL) {
		s = &hm.dflt;
		extra = hm.starved ? hm.starved_cpu : 1;
	}
	double a = s->a, b = s->b;
	if (s->small_bytes > 0 && task_bytes(task) < s->small_bytes) {
		a = s->small_a;
		b = s->small_b;
	}
	busy_cpus++;
	while (left > 0) {
		double f = extra * (a + b * (busy_cpus - 1));
		if (left * f <= QUANTUM_S) {
			starpu_sleep((float)(left * f));
			break;
		}
		starpu_sleep((float)QUANTUM_S);
		left -= QUANTUM_S / f;
	}
	busy_cpus--;
}

void sp__sim_cuda_task(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	struct starpu_task *task = task_of(buffers);
	if (task == NULL)
		return;
	double t = model_s(task);
	if (hm.loaded) {
		t = t * (hm.starved ? hm.starved_gpu : 1) + gpu_debt;
		gpu_debt = 0;
	}
	starpu_sleep((float)t);
}

void sp_hostwork_begin(sp_hostwork_t *w, const char *name)
{
	w->name = name;
	w->t0 = hm.loaded ? sp_thread_cpu_s() : 0;
}

void sp_hostwork_end(sp_hostwork_t *w)
{
	if (!hm.loaded)
		return;
	/* the platform's figure for this work when it has one (deterministic);
	 * else this machine's thread CPU time, scaled, when host_time_scale is set */
	double dt = 0;
	for (int i = 0; i < hm.nwork; i++)
		if (strcmp(hm.work[i].symbol, w->name) == 0)
			dt = hm.work[i].a, w->t0 = -1;
	if (w->t0 >= 0)
		dt = hm.host_time_scale > 0 ? (sp_thread_cpu_s() - w->t0) * hm.host_time_scale : 0;
	if (hm.starved)
		dt *= hm.starved_host;
	if (dt > 0)
		starpu_sleep((float)dt);
}

/* One pinned allocation at a time, when the host model says so. */
static starpu_pthread_mutex_t pin_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;

int sp_sim_buffer_malloc(void **p, size_t bytes)
{
	if (!hm.loaded || !hm.pinned_alloc_serial || starpu_cuda_worker_get_count() == 0)
		return starpu_malloc(p, bytes);
	/* SimGrid's mutex: a second driver waits in simulated time while the
	 * first one's allocation (StarPU charges its pinning) goes on */
	starpu_pthread_mutex_lock(&pin_lock);
	int rc = starpu_malloc(p, bytes);
	starpu_pthread_mutex_unlock(&pin_lock);
	return rc;
}

void sp_sim_item_end(const char *pipeline)
{
	if (!hm.loaded)
		return;
	double c = hm.item_commit_s;
	for (int i = 0; i < hm.ncommit && pipeline != NULL; i++)
		if (strcmp(hm.commit[i].symbol, pipeline) == 0)
			c = hm.commit[i].a;
	if (c > 0)
		starpu_sleep((float)(c * (hm.starved ? hm.starved_host : 1)));
}
#endif /* SP_SIMGRID */

#ifdef SP_SIMGRID
void sp_data_unregister(starpu_data_handle_t h)
{
	double s = 0;
	if (hm.loaded && hm.pinned_free > 0 && starpu_cuda_worker_get_count() > 0 &&
	    starpu_data_get_home_node(h) < 0 && starpu_data_test_if_allocated_on_node(h, STARPU_MAIN_RAM))
		s = hm.pinned_free * (double)starpu_data_get_size(h) / 1073741824.0;
	starpu_data_unregister(h);
	if (s > 0)
		starpu_sleep((float)s);
}
#endif

/* ---- the validated envelope (tools/fidelity) ---- */

/* A configuration a real run validated: tools/fidelity's table, the runs
 * it simulated within VALID_ERROR of their measurement. */
#define VALID_ERROR 0.25

int sp_sim_validated(const char *pmdir, const char *host, const char *pipeline,
		     const char *sched, unsigned ncpu, unsigned ncuda, const char *const *kernels,
		     size_t nk, char *why, size_t n)
{
	if (pmdir == NULL || host == NULL) {
		snprintf(why, n, "no platform named (STARPU_HOSTNAME)");
		return 0;
	}
	/* any entry of a codelet that ran (its footprints are not known
	 * here): the model may still hold the estimate */
	size_t ne = 0;
	sp_estimated_t *est = sp_runtime_estimated_read(pmdir, host, &ne);
	for (size_t i = 0; i < nk; i++)
		for (size_t k = 0; k < ne && kernels[i] != NULL; k++)
			if (strcmp(est[k].sym, kernels[i]) == 0) {
				snprintf(why, n, "a model of %s on %s is ESTIMATED (starpipe-estimated.tsv)",
					 kernels[i], host);
				free(est);
				return 0;
			}
	free(est);
	if (!hm.loaded) {
		snprintf(why, n, "no host model (the fidelity table's runs had %s's)", host);
		return 0;
	}
	char path[4200], line[1024];
	snprintf(path, sizeof path, "%s/starpipe-sim/%s.validated", pmdir, host);
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		snprintf(why, n, "no validated runs for %s (%s: %s)", host, path, strerror(errno));
		return 0;
	}
	int ok = 0, same_pipe = 0, same_sched = 0;
	while (!ok && fgets(line, sizeof line, f) != NULL) {
		char p[64], s[64];
		unsigned c, g;
		double e;
		if (line[0] == '#' || sscanf(line, "%63s %63s %u %u %lf", p, s, &c, &g, &e) != 5)
			continue;
		if (strcmp(p, pipeline) != 0 || !(fabs(e) <= VALID_ERROR))
			continue;
		same_pipe = 1;
		if (strcmp(s, sched) != 0 || (g > 0) != (ncuda > 0))
			continue;
		same_sched = 1;
		/* a neighbour: as many CPU workers within a factor 2 */
		ok = 2 * ncpu >= c && ncpu <= 2 * c;
	}
	fclose(f);
	if (!ok)
		snprintf(why, n, "%s", !same_pipe ? "no real run of this pipeline simulated within 25 %"
				      : !same_sched ? "no real run of this scheduler and worker types "
						      "simulated within 25 %"
						    : "no real run with about as many CPU workers (within "
						      "2x) simulated within 25 %");
	return ok;
}
