/* The session's reports: the summary on stderr, the JSON report, the
 * figures for starpipe tune, the task list and the Chrome trace. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bound.h"
#include "fsutil.h"
#include "json.h"
#include "lanes.h"
#include "runtime.h"
#include "runtime_int.h"
#include "sim_host.h"


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

/* A (stage, kernel)'s figures summed over the ranks' stage lines. */
struct stage_sum {
	char stage[128], kernel[128];
	unsigned long long n[2]; /* tasks: [0] CPU, [1] CUDA */
	double busy_us[2];
};

/* Sums sp_runtime_stage_lines() texts (ranks) per (stage, kernel), in the
 * order they first appear (rank 0's order first); a malformed line is
 * ignored.  Returns a malloc'd array of *n entries (NULL when empty, or
 * out of memory: then the entries summed so far). */
static struct stage_sum *sum_stages(const char *lines, size_t *n)
{
	struct stage_sum *m = NULL;
	size_t nm = 0, cap = 0;
	const char *l = lines;
	while (l != NULL && *l != '\0') {
		const char *nl = strchr(l, '\n');
		size_t len = nl != NULL ? (size_t)(nl - l) : strlen(l);
		char buf[512];
		struct stage_sum r = { 0 };
		if (len < sizeof buf) {
			memcpy(buf, l, len);
			buf[len] = '\0';
			if (sscanf(buf, "%127[^\t]\t%127[^\t]\t%llu\t%llu\t%lf\t%lf", r.stage, r.kernel,
				   &r.n[0], &r.n[1], &r.busy_us[0], &r.busy_us[1]) == 6) {
				size_t i;
				for (i = 0; i < nm; i++)
					if (strcmp(m[i].stage, r.stage) == 0 && strcmp(m[i].kernel, r.kernel) == 0)
						break;
				if (i == nm && nm == cap) {
					size_t c = cap ? 2 * cap : 16;
					struct stage_sum *t = realloc(m, c * sizeof *t);
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
						m[i].busy_us[k] += r.busy_us[k];
					}
			}
		}
		l = nl != NULL ? nl + 1 : NULL;
	}
	*n = nm;
	return m;
}

/* One line of sp_runtime_worker_lines(). */
struct worker_line {
	int rank;
	char name[64], type[8];
	unsigned long long tasks;
	double busy_us;
};

/* Reads the line at *l into w and moves *l to the next; 0 at the end.  A
 * malformed line reads as rank -1 (counted nowhere). */
static int next_worker(const char **l, struct worker_line *w)
{
	if (*l == NULL || **l == '\0')
		return 0;
	const char *nl = strchr(*l, '\n');
	size_t len = nl != NULL ? (size_t)(nl - *l) : strlen(*l);
	char buf[256];
	memset(w, 0, sizeof *w);
	w->rank = -1;
	if (len < sizeof buf) {
		memcpy(buf, *l, len);
		buf[len] = '\0';
		if (sscanf(buf, "%d\t%63[^\t]\t%7[^\t]\t%llu\t%lf", &w->rank, w->name, w->type,
			   &w->tasks, &w->busy_us) != 5)
			w->rank = -1;
	}
	*l = nl != NULL ? nl + 1 : NULL;
	return 1;
}

/* The batch's CPU and CUDA workers, counted over its ranks' worker lines
 * (rank: one rank's only, or -1 for all). */
static void count_workers(const char *lines, int rank, unsigned n[2], unsigned long long *tasks,
			  double *busy_us)
{
	struct worker_line w;
	n[0] = n[1] = 0;
	*tasks = 0;
	*busy_us = 0;
	for (const char *l = lines; next_worker(&l, &w);)
		if (w.rank >= 0 && (rank < 0 || w.rank == rank)) {
			n[strcmp(w.type, "CUDA") == 0]++;
			*tasks += w.tasks;
			*busy_us += w.busy_us;
		}
}

/* The summary of a batch over MPI ranks: its items, the ranks' workers and
 * tasks per stage summed, a line per rank (a line per worker would be
 * thousands on a cluster).  The wall time is rank 0's: it handed every
 * item out and prints this once every rank has ended, so it spans the
 * batch. */
static void print_batch_report(const char *pipeline, const sp_runtime_batch_t *batch, double wall)
{
	size_t ns = 0;
	struct stage_sum *s = sum_stages(batch->stage_lines, &ns);
	unsigned n[2];
	unsigned long long tasks;
	double busy;
	count_workers(batch->worker_lines, -1, n, &tasks, &busy);
	fprintf(stderr, "[starpipe] %s: %zu item(s) in %.3f s, scheduler %s, %d ranks: %u CPU + %u CUDA workers\n",
		pipeline, batch->items, wall, sp__rt.sched, batch->ranks, n[0], n[1]);
	fprintf(stderr, "[starpipe] %-20s %-18s %10s %10s %12s %12s\n", "stage", "kernel", "CPU tasks",
		"CUDA tasks", "CPU s", "CUDA s");
	for (size_t i = 0; i < ns; i++)
		fprintf(stderr, "[starpipe] %-20s %-18s %10llu %10llu %12.3f %12.3f\n", s[i].stage,
			s[i].kernel, s[i].n[0], s[i].n[1], s[i].busy_us[0] * 1e-6, s[i].busy_us[1] * 1e-6);
	free(s);
	for (int r = 0; r < batch->ranks; r++) {
		count_workers(batch->worker_lines, r, n, &tasks, &busy);
		double slots = wall * (n[0] + n[1]); /* the rank's worker-seconds */
		fprintf(stderr, "[starpipe] rank %-4d %u CPU + %u CUDA workers, busy %5.1f%%  %llu tasks\n",
			r, n[0], n[1], slots > 0 ? 100.0 * busy * 1e-6 / slots : 0.0, tasks);
	}
	fprintf(stderr, "[starpipe] bytes moved between memory nodes (rank 0): %llu\n", bytes_moved(NULL));
}

void sp_runtime_print_report(const char *pipeline, const sp_runtime_batch_t *batch)
{
	double wall = sp_runtime_elapsed_s();
	unsigned nw = starpu_worker_get_count();
	char name[64];

	sp__progress_stop();
	if (batch != NULL) {
		print_batch_report(pipeline, batch, wall);
		return;
	}
	fprintf(stderr, "[starpipe] %s: %zu item(s) in %.3f s, scheduler %s, %u CPU + %u CUDA workers\n",
		pipeline, atomic_load(&sp__rt.items_done), wall, sp__rt.sched, sp_runtime_ncpu_workers(),
		sp_runtime_ncuda_workers());
	fprintf(stderr, "[starpipe] %-20s %-18s %10s %10s %12s %12s\n", "stage", "kernel", "CPU tasks",
		"CUDA tasks", "CPU s", "CUDA s");
	starpu_pthread_mutex_lock(&sp__rt.lock);
	for (size_t i = 0; i < sp__rt.nk; i++)
		fprintf(stderr, "[starpipe] %-20s %-18s %10llu %10llu %12.3f %12.3f\n", sp__rt.k[i].stage,
			sp__rt.k[i].kernel, sp__rt.k[i].ntasks[0], sp__rt.k[i].ntasks[1], sp__rt.k[i].busy_us[0] * 1e-6,
			sp__rt.k[i].busy_us[1] * 1e-6);
	for (unsigned w = 0; w < nw; w++) {
		starpu_worker_get_name((int)w, name, sizeof name);
		fprintf(stderr, "[starpipe] worker %-24s %4s busy %5.1f%%  %llu tasks\n", name,
			worker_kind((int)w), wall > 0 ? 100.0 * sp__rt.worker_busy_us[w] * 1e-6 / wall : 0.0,
			sp__rt.worker_ntasks[w]);
	}
	starpu_pthread_mutex_unlock(&sp__rt.lock);
	fprintf(stderr, "[starpipe] bytes moved between memory nodes: %llu\n", bytes_moved(NULL));
}

char *sp_runtime_stage_lines(void)
{
	char *out = NULL, *p;
	size_t size = 1;
	starpu_pthread_mutex_lock(&sp__rt.lock);
	for (size_t i = 0; i < sp__rt.nk; i++)
		size += strlen(sp__rt.k[i].stage) + strlen(sp__rt.k[i].kernel) + 4 * 32;
	out = malloc(size);
	if (out != NULL) {
		p = out;
		*p = '\0';
		for (size_t i = 0; i < sp__rt.nk; i++)
			p += sprintf(p, "%s\t%s\t%llu\t%llu\t%.17g\t%.17g\n", sp__rt.k[i].stage,
				     sp__rt.k[i].kernel, sp__rt.k[i].ntasks[0], sp__rt.k[i].ntasks[1],
				     sp__rt.k[i].busy_us[0], sp__rt.k[i].busy_us[1]);
	}
	starpu_pthread_mutex_unlock(&sp__rt.lock);
	return out;
}

char *sp_runtime_worker_lines(int rank)
{
	unsigned nw = starpu_worker_get_count();
	char name[64];
	char *out = malloc(1 + (size_t)nw * (sizeof name + 4 * 32)), *p = out;
	if (out == NULL)
		return NULL;
	*p = '\0';
	starpu_pthread_mutex_lock(&sp__rt.lock);
	for (unsigned w = 0; w < nw; w++) {
		starpu_worker_get_name((int)w, name, sizeof name);
		p += sprintf(p, "%d\t%s\t%s\t%llu\t%.17g\n", rank, name, worker_kind((int)w),
			     sp__rt.worker_ntasks[w], sp__rt.worker_busy_us[w]);
	}
	starpu_pthread_mutex_unlock(&sp__rt.lock);
	return out;
}

/* The report's stages, tasks and workers for a batch over MPI ranks: summed
 * over the ranks, every rank's workers listed with their rank. */
static void write_batch_figures(sp_json_t *j, const sp_runtime_batch_t *batch, double wall)
{
	size_t ns = 0;
	struct stage_sum *s = sum_stages(batch->stage_lines, &ns);
	unsigned long long tasks = 0;
	for (size_t i = 0; i < ns; i++)
		tasks += s[i].n[0] + s[i].n[1];
	sp_json_kv_int(j, "items", (long long)batch->items);
	sp_json_kv_int(j, "tasks", (long long)tasks);
	sp_json_key(j, "stages");
	sp_json_begin_array(j);
	for (size_t i = 0; i < ns; i++) {
		sp_json_begin_object(j);
		sp_json_kv_str(j, "stage", s[i].stage);
		sp_json_kv_str(j, "kernel", s[i].kernel);
		sp_json_kv_int(j, "cpu_tasks", (long long)s[i].n[0]);
		sp_json_kv_int(j, "cuda_tasks", (long long)s[i].n[1]);
		sp_json_kv_num(j, "cpu_busy_s", s[i].busy_us[0] * 1e-6);
		sp_json_kv_num(j, "cuda_busy_s", s[i].busy_us[1] * 1e-6);
		sp_json_end_object(j);
	}
	sp_json_end_array(j);
	free(s);
	sp_json_key(j, "workers");
	sp_json_begin_array(j);
	struct worker_line w;
	int id = 0, prev = -1;
	for (const char *l = batch->worker_lines; next_worker(&l, &w);) {
		if (w.rank < 0)
			continue;
		id = w.rank == prev ? id + 1 : 0; /* a rank's lines are together, in worker order */
		prev = w.rank;
		sp_json_begin_object(j);
		sp_json_kv_int(j, "rank", w.rank);
		sp_json_kv_int(j, "id", id);
		sp_json_kv_str(j, "name", w.name);
		sp_json_kv_str(j, "type", w.type);
		sp_json_kv_int(j, "tasks", (long long)w.tasks);
		sp_json_kv_num(j, "busy_fraction", wall > 0 ? w.busy_us * 1e-6 / wall : 0.0);
		sp_json_end_object(j);
	}
	sp_json_end_array(j);
}

/* The report's items, tasks, stages and workers: this process's own. */
static void write_own_figures(sp_json_t *j, double wall)
{
	unsigned nw = starpu_worker_get_count();
	char name[64];
	sp_json_kv_int(j, "items", (long long)atomic_load(&sp__rt.items_done));
	sp_json_kv_int(j, "tasks", (long long)atomic_load(&sp__rt.done));
	sp_json_key(j, "stages");
	sp_json_begin_array(j);
	starpu_pthread_mutex_lock(&sp__rt.lock);
	for (size_t i = 0; i < sp__rt.nk; i++) {
		sp_json_begin_object(j);
		sp_json_kv_str(j, "stage", sp__rt.k[i].stage);
		sp_json_kv_str(j, "kernel", sp__rt.k[i].kernel);
		sp_json_kv_int(j, "cpu_tasks", (long long)sp__rt.k[i].ntasks[0]);
		sp_json_kv_int(j, "cuda_tasks", (long long)sp__rt.k[i].ntasks[1]);
		sp_json_kv_num(j, "cpu_busy_s", sp__rt.k[i].busy_us[0] * 1e-6);
		sp_json_kv_num(j, "cuda_busy_s", sp__rt.k[i].busy_us[1] * 1e-6);
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
		sp_json_kv_int(j, "tasks", (long long)sp__rt.worker_ntasks[w]);
		sp_json_kv_num(j, "busy_fraction", wall > 0 ? sp__rt.worker_busy_us[w] * 1e-6 / wall : 0.0);
		sp_json_end_object(j);
	}
	sp_json_end_array(j);
	starpu_pthread_mutex_unlock(&sp__rt.lock);
}

int sp_runtime_write_report(const char *path, const char *pipeline, const char *items_json,
			    const sp_runtime_batch_t *batch, const char *cluster_json, sp_err_t *err)
{
	double wall = sp_runtime_elapsed_s(); /* under MPI, the batch's: see print_batch_report */
	unsigned n[2] = { sp_runtime_ncpu_workers(), sp_runtime_ncuda_workers() };
	unsigned long long tasks;
	double busy;
	sp_json_t *j = sp_json_new();
	if (j == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	if (batch != NULL)
		count_workers(batch->worker_lines, -1, n, &tasks, &busy);

	sp_json_begin_object(j);
	sp_json_kv_str(j, "pipeline", pipeline);
	sp_json_kv_str(j, "starpipe_version", PACKAGE_VERSION);
	sp_json_kv_num(j, "wall_s", wall);
#ifdef SP_SIMGRID
	/* wall_s is the simulated node's; this machine's own time beside it */
	sp_json_key(j, "simulated");
	sp_json_raw(j, "true");
	sp_json_kv_num(j, "host_wall_s", sp_now_s() - sp__rt.t0);
	/* asked, and what the simulator ran (one per GPU) */
	sp_json_kv_int(j, "workers_per_gpu_asked", sp__rt.workers_per_gpu_asked);
	sp_json_kv_int(j, "workers_per_gpu_simulated", starpu_cuda_worker_get_count() > 0 ? 1 : 0);
	/* whether tools/fidelity's table vouches for this configuration */
	{
		const char *why;
		const int valid = sp__sim_validation(&why);
		sp_json_key(j, "validated");
		sp_json_raw(j, valid ? "true" : "false");
		if (!valid)
			sp_json_kv_str(j, "validation", why);
	}
#endif
	sp_json_kv_str(j, "scheduler", sp__rt.sched);
	sp_json_kv_int(j, "cores", sp__rt.cores);
	sp_json_kv_int(j, "starpu_maxcpus", STARPU_MAXCPUS);
	sp_json_kv_int(j, "cpu_workers", n[0]);
	sp_json_kv_int(j, "cuda_workers", n[1]);
	if (sp__rt.cap_note[0] != '\0')
		sp_json_kv_str(j, "cpu_cap_warning", sp__rt.cap_note);
	if (sp_runtime_nlanes() > 1) { /* items_detail names each item's lane */
		sp_json_key(j, "lanes");
		sp_json_begin_array(j);
		for (int l = 0; l < sp_runtime_nlanes(); l++) {
			sp_json_begin_object(j);
			sp_json_kv_str(j, "name", sp_runtime_lane_name(l));
			sp_json_kv_int(j, "cpu_workers", sp_runtime_lane_ncpu(l));
			sp_json_kv_int(j, "cuda_workers", sp_runtime_lane_ncuda(l));
			sp_json_kv_str(j, "scheduler", l == 0 ? sp__rt.sched : "lws");
			unsigned nj = 0;
			const double js = sp_runtime_lanes_joined_s(&nj);
			if (l == 0 && !isnan(js)) { /* its workers joined the CPU lane then */
				sp_json_kv_num(j, "joined_cpu_lane_at_s", js);
				sp_json_kv_int(j, "joined_workers", nj);
			}
			sp_json_end_object(j);
		}
		sp_json_end_array(j);
	}
	/* this process's (rank 0's under MPI; every rank's under cluster) */
	sp_json_kv_str(j, "node_type", sp__rt.node_type);
	sp_json_key(j, "perfmodels");
	sp_json_begin_object(j);
	sp_json_kv_str(j, "folder", sp__rt.pmdir);
	sp_json_kv_str(j, "node_type_from", sp__rt.node_type_from != NULL ? sp__rt.node_type_from : "");
	sp_json_kv_int(j, "codelets", (long long)sp__rt.ncodelets);
	sp_json_kv_int(j, "calibrated_codelets", (long long)sp__rt.ncalibrated);
	sp_json_kv_int(j, "calibrate", sp__rt.calibrate);
	sp_json_end_object(j);
	if (batch != NULL)
		write_batch_figures(j, batch, wall);
	else
		write_own_figures(j, wall);
	sp_json_kv_int(j, "bytes_moved", (long long)bytes_moved(j));
	/* stages run once per distinct value (the DESI PSF): how many reads */
	sp_json_key(j, "shared_stages");
	sp_json_begin_array(j);
	for (size_t k = 0; k < sp__rt.nshared; k++) {
		sp_json_begin_object(j);
		sp_json_kv_str(j, "stage", sp__rt.shared[k].stage);
		sp_json_kv_int(j, "runs", sp__rt.shared[k].runs);
		sp_json_kv_int(j, "values", sp__rt.shared[k].values);
		sp_json_end_object(j);
	}
	sp_json_end_array(j);
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
	double wall = sp_runtime_elapsed_s();
	starpu_pthread_mutex_lock(&sp__rt.lock);
	double makespan = sp__rt.first_start_us > 0 ? (sp__rt.last_end_us - sp__rt.first_start_us) * 1e-6 : 0;
	fprintf(f, "scheduler\t%s\ncpu_workers\t%u\ncuda_workers\t%u\n", sp__rt.sched,
		sp_runtime_ncpu_workers(), sp_runtime_ncuda_workers());
	fprintf(f, "items\t%zu\nfailed_items\t%zu\ntasks\t%llu\n", atomic_load(&sp__rt.items_done),
		failed, (unsigned long long)atomic_load(&sp__rt.done));
	fprintf(f, "wall_s\t%.6f\nmakespan_s\t%.6f\n", wall, makespan);
#ifdef SP_SIMGRID
	/* what the simulation charged beyond the models (sim_host.h) */
	const char *hmf = sp_sim_host_file(), *slash = hmf != NULL ? strrchr(hmf, '/') : NULL;
	fprintf(f, "sim_host_model\t%s\n", hmf == NULL ? "none" : slash != NULL ? slash + 1 : hmf);
	const char *why;
	const int valid = sp__sim_validation(&why);
	fprintf(f, "validated\t%d\nvalidation\t%s\n", valid, valid ? "within the fidelity table" : why);
#endif
	/* tasks per stage per worker type, stages in order of first start */
	for (size_t i = 0; i < sp__rt.nk; i++) {
		size_t first = i;
		for (size_t k = 0; k < i; k++)
			if (sp__rt.k[k].stage == sp__rt.k[i].stage)
				first = k;
		if (first != i)
			continue;
		unsigned long long n[2] = { 0, 0 };
		for (size_t k = i; k < sp__rt.nk; k++)
			if (sp__rt.k[k].stage == sp__rt.k[i].stage)
				n[0] += sp__rt.k[k].ntasks[0], n[1] += sp__rt.k[k].ntasks[1];
		fprintf(f, "tasks:%s:cpu\t%llu\ntasks:%s:cuda\t%llu\n", sp__rt.k[i].stage, n[0],
			sp__rt.k[i].stage, n[1]);
	}
	for (unsigned w = 0; w < starpu_worker_get_count(); w++) {
		double busy = makespan > 0 ? sp__rt.worker_busy_us[w] * 1e-6 / makespan : 0;
		double xfer = makespan > 0 ? transfer_s((int)w) / makespan : 0;
		if (busy > 1)
			busy = 1;
		if (xfer > 1 - busy)
			xfer = 1 - busy;
		short_name((int)w, name, sizeof name);
		fprintf(f, "busy:%s\t%.4f\ntransfer:%s\t%.4f\nidle:%s\t%.4f\n", name, busy, name, xfer,
			name, 1 - busy - xfer);
	}
	starpu_pthread_mutex_unlock(&sp__rt.lock);
	fprintf(f, "bytes_moved\t%llu\n", bytes_moved(NULL));
	sp_bound_t b;
	if (sp__rt.bound && sp_bound_compute(&b) == 0) {
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
	starpu_pthread_mutex_lock(&sp__rt.lock);
	for (size_t i = 0; i < sp__rt.nrec; i++) {
		const struct sp__trace_rec *r = &sp__rt.rec[i];
		if (r->worker < 0)
			continue;
		short_name(r->worker, name, sizeof name);
		fprintf(f, "%s\t%s\t%s\t%.6f\t%.6f\n", name, r->stage, r->kernel,
			(r->start_us - sp__rt.first_start_us) * 1e-6, (r->end_us - sp__rt.first_start_us) * 1e-6);
	}
	starpu_pthread_mutex_unlock(&sp__rt.lock);
	int ret = sp_write_memstream_atomic(path, f, &text, &len, err);
	free(text);
	return ret;
}

double sp_runtime_t0_wall(void) { return sp__rt.t0_wall; }

double sp_runtime_elapsed_s(void)
{
#ifdef SP_SIMGRID
	/* the simulated node's time, as the workers' busy times are */
	return 1e-6 * (starpu_timing_now() - sp__rt.t0_clock_us);
#else
	return sp_now_s() - sp__rt.t0;
#endif
}

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
	starpu_pthread_mutex_lock(&sp__rt.lock);
	for (size_t i = 0; i < sp__rt.nrec; i++) {
		const struct sp__trace_rec *r = &sp__rt.rec[i];
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
	starpu_pthread_mutex_unlock(&sp__rt.lock);
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
