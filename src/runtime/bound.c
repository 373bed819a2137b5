/* Lower bounds of a run's makespan: the area bound and the critical path (see bound.h). */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <starpu.h>

#include "bound.h"

#define sp__btask sp_bound_rec

static struct {
	starpu_pthread_mutex_t lock;
	int on;
	struct sp__btask *task;
	size_t n, cap, nmeasured;
	int first[2]; /* a worker of each type, -1 if none */
} bd = { .lock = STARPU_PTHREAD_MUTEX_INITIALIZER };

void sp_bound_begin(void)
{
	starpu_pthread_mutex_lock(&bd.lock);
	bd.first[0] = bd.first[1] = -1;
	for (unsigned w = 0; w < starpu_worker_get_count(); w++) {
		int k = starpu_worker_get_type((int)w) == STARPU_CUDA_WORKER;
		if (starpu_worker_get_type((int)w) != STARPU_CPU_WORKER && !k)
			continue;
		if (bd.first[k] < 0)
			bd.first[k] = (int)w;
	}
	bd.n = bd.nmeasured = 0;
	bd.on = 1;
	starpu_pthread_mutex_unlock(&bd.lock);
}

void sp_bound_task(struct starpu_task *task, int worker, double duration_us)
{
	if (!bd.on || task == NULL)
		return;
	struct sp__btask b = { starpu_task_get_job_id(task), { INFINITY, INFINITY }, 0, { 0 }, { 0 } };
	unsigned nb = STARPU_TASK_GET_NBUFFERS(task);
	for (unsigned i = 0; i < nb && b.nbuf < SP_BOUND_MAXBUF; i++) {
		b.handle[b.nbuf] = STARPU_TASK_GET_HANDLE(task, i);
		b.mode[b.nbuf++] = (int)STARPU_TASK_GET_MODE(task, i);
	}
	int ran = worker >= 0 && starpu_worker_get_type(worker) == STARPU_CUDA_WORKER;
	int measured = 0;
	for (int k = 0; k < 2; k++) {
		int w = bd.first[k];
		if (w < 0 || !starpu_worker_can_execute_task((unsigned)w, task, 0))
			continue;
		struct starpu_perfmodel_arch *arch =
			starpu_worker_get_perf_archtype(w, task->sched_ctx);
		double us = task->cl != NULL && task->cl->model != NULL ?
			starpu_task_expected_length(task, arch, 0) : NAN;
		if (isfinite(us) && us >= 0) {
			b.t[k] = us * 1e-6;
		} else if (k == ran) {
			b.t[k] = duration_us * 1e-6;
			measured = 1;
		}
	}
	if (!isfinite(b.t[0]) && !isfinite(b.t[1])) { /* ran where no model was asked */
		b.t[ran] = duration_us * 1e-6;
		measured = 1;
	}
	starpu_pthread_mutex_lock(&bd.lock);
	if (bd.n == bd.cap) {
		size_t cap = bd.cap ? 2 * bd.cap : 4096;
		struct sp__btask *t = realloc(bd.task, cap * sizeof *t);
		if (t != NULL) {
			bd.task = t;
			bd.cap = cap;
		}
	}
	if (bd.n < bd.cap) {
		bd.task[bd.n++] = b;
		bd.nmeasured += (size_t)measured;
	}
	starpu_pthread_mutex_unlock(&bd.lock);
}

struct ratio {
	double c, g, r;
};

static int by_ratio(const void *a, const void *b)
{
	double x = ((const struct ratio *)a)->r, y = ((const struct ratio *)b)->r;
	return (x > y) - (x < y);
}

/* Whether the tasks (sorted GPU-friendliest first) fit in time T: the GPUs
 * take them in that order, the last one in part, up to ncuda T; the CPUs
 * take the rest. */
static int fits(const struct ratio *t, size_t n, unsigned ncpu, unsigned ncuda, double T)
{
	double gpu = ncuda * T, cpu = 0;
	for (size_t i = 0; i < n; i++) {
		if (isfinite(t[i].g) && gpu > 0) {
			double f = t[i].g > 0 ? gpu / t[i].g : 1.0;
			if (f >= 1.0) {
				gpu -= t[i].g;
				continue;
			}
			gpu = 0;
			if (!isfinite(t[i].c))
				return 0;
			cpu += (1.0 - f) * t[i].c;
		} else {
			if (!isfinite(t[i].c) || ncpu == 0)
				return 0;
			cpu += t[i].c;
		}
	}
	return cpu <= ncpu * T * (1 + 1e-12);
}

double sp_bound_area(const double *cpu, const double *cuda, size_t n, unsigned ncpu,
		     unsigned ncuda)
{
	struct ratio *t = malloc((n ? n : 1) * sizeof *t);
	double hi = 0;
	if (t == NULL)
		return NAN;
	for (size_t i = 0; i < n; i++) {
		double c = ncpu ? cpu[i] : INFINITY, g = ncuda ? cuda[i] : INFINITY;
		t[i] = (struct ratio){ c, g, !isfinite(c) ? 0 : !isfinite(g) ? INFINITY :
						c > 0 ? g / c : 1.0 };
		hi += fmin(c, g);
	}
	if (!isfinite(hi)) { /* a task that no worker of this node can run */
		free(t);
		return NAN;
	}
	qsort(t, n, sizeof *t, by_ratio);
	double lo = 0;
	for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; it++) {
		double mid = 0.5 * (lo + hi);
		if (fits(t, n, ncpu, ncuda, mid))
			hi = mid;
		else
			lo = mid;
	}
	free(t);
	return hi;
}

static int by_id(const void *a, const void *b)
{
	unsigned long x = ((const struct sp__btask *)a)->id, y = ((const struct sp__btask *)b)->id;
	return (x > y) - (x < y);
}

/* A growable list of task indices. */
struct ilist {
	size_t *v, n, cap;
};

static int ipush(struct ilist *l, size_t x)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 4;
		size_t *v = realloc(l->v, cap * sizeof *v);
		if (v == NULL)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = x;
	return 0;
}

/* What StarPU's sequential consistency makes the next access of a handle wait for. */
struct hstate {
	void *h;
	struct ilist writers; /* the last write, or the open group of commuting/reduction writes */
	struct ilist readers; /* reads since */
	struct ilist before;  /* the open group's own predecessors */
	int group;            /* the writers are a commuting group (STARPU_COMMUTE, STARPU_REDUX) */
};

struct edges {
	size_t *e, n, cap;
	int oom;
};

static void edge(struct edges *E, size_t from, size_t to)
{
	if (E->n == E->cap) {
		size_t cap = E->cap ? 2 * E->cap : 1024;
		size_t *e = realloc(E->e, 2 * cap * sizeof *e);
		if (e == NULL) {
			E->oom = 1;
			return;
		}
		E->e = e;
		E->cap = cap;
	}
	E->e[2 * E->n] = from;
	E->e[2 * E->n + 1] = to;
	E->n++;
}

static void edges_from(struct edges *E, const struct ilist *l, size_t to)
{
	for (size_t k = 0; k < l->n; k++)
		edge(E, l->v[k], to);
}

/* The data dependencies of the tasks (sorted by job id, i.e. in submission
 * order), rebuilt as StarPU's implicit dependencies make them: a read waits
 * for the last write, a write for the last write and the reads since; the
 * members of a group of commuting or reduction accesses wait for what the
 * group waits for, not for each other.  Pairs of task indices (from, to). */
static size_t data_edges(const struct sp__btask *t, size_t n, size_t **out)
{
	size_t cap = 64;
	while (cap < 4 * n)
		cap *= 2;
	struct hstate *hs = calloc(cap, sizeof *hs);
	struct edges E = { 0 };
	*out = NULL;
	if (hs == NULL)
		return 0;
	for (size_t i = 0; i < n && !E.oom; i++) {
		for (unsigned b = 0; b < t[i].nbuf; b++) {
			void *h = t[i].handle[b];
			int m = t[i].mode[b];
			size_t slot = ((uintptr_t)h >> 4) * 0x9E3779B97F4A7C15ull & (cap - 1);
			while (hs[slot].h != NULL && hs[slot].h != h)
				slot = (slot + 1) & (cap - 1);
			struct hstate *s = &hs[slot];
			s->h = h;
			if (m & STARPU_SCRATCH)
				continue;
			int commute = (m & STARPU_REDUX) == STARPU_REDUX ||
				      ((m & STARPU_COMMUTE) && (m & STARPU_W));
			if (commute) {
				if (!s->group) { /* a new group waits for everything before it */
					s->before.n = 0;
					for (size_t k = 0; k < s->writers.n; k++)
						ipush(&s->before, s->writers.v[k]);
					for (size_t k = 0; k < s->readers.n; k++)
						ipush(&s->before, s->readers.v[k]);
					s->writers.n = s->readers.n = 0;
					s->group = 1;
				}
				edges_from(&E, &s->before, i);
				ipush(&s->writers, i);
			} else if (m & STARPU_W) {
				edges_from(&E, &s->writers, i);
				edges_from(&E, &s->readers, i);
				s->writers.n = s->readers.n = 0;
				s->group = 0;
				ipush(&s->writers, i);
			} else if (m & STARPU_R) {
				edges_from(&E, &s->writers, i);
				if (s->group) { /* a read closes the group */
					s->group = 0;
				}
				ipush(&s->readers, i);
			}
		}
	}
	for (size_t k = 0; k < cap; k++) {
		free(hs[k].writers.v);
		free(hs[k].readers.v);
		free(hs[k].before.v);
	}
	free(hs);
	if (E.oom) {
		free(E.e);
		return 0;
	}
	*out = E.e;
	return E.n;
}

/* The longest chain, by Kahn's topological order over the edges. */
static double longest_path(const struct sp__btask *t, size_t n, const size_t *e, size_t ne)
{
	size_t *indeg = calloc(n, sizeof *indeg), *start = calloc(n + 1, sizeof *start);
	size_t *adj = malloc((ne ? ne : 1) * sizeof *adj), *queue = malloc(n * sizeof *queue);
	double *fin = calloc(n, sizeof *fin), best = NAN;
	if (indeg == NULL || start == NULL || adj == NULL || queue == NULL || fin == NULL)
		goto out;
	for (size_t k = 0; k < ne; k++) {
		start[e[2 * k] + 1]++;
		indeg[e[2 * k + 1]]++;
	}
	for (size_t i = 0; i < n; i++)
		start[i + 1] += start[i];
	{
		size_t *pos = queue; /* borrowed as fill positions */
		memcpy(pos, start, n * sizeof *pos);
		for (size_t k = 0; k < ne; k++)
			adj[pos[e[2 * k]]++] = e[2 * k + 1];
	}
	size_t qh = 0, qt = 0;
	for (size_t i = 0; i < n; i++) {
		fin[i] = 0; /* the latest finish of a predecessor, then the own finish */
		if (indeg[i] == 0)
			queue[qt++] = i;
	}
	best = 0;
	while (qh < qt) {
		size_t i = queue[qh++];
		fin[i] += fmin(t[i].t[0], t[i].t[1]);
		if (fin[i] > best)
			best = fin[i];
		for (size_t k = start[i]; k < start[i + 1]; k++) {
			size_t j = adj[k];
			if (fin[i] > fin[j])
				fin[j] = fin[i];
			if (--indeg[j] == 0)
				queue[qt++] = j;
		}
	}
	if (qt < n)
		best = NAN; /* a cycle: impossible for StarPU's dependencies */
out:
	free(indeg);
	free(start);
	free(adj);
	free(queue);
	free(fin);
	return best;
}

double sp_bound_path(struct sp_bound_rec *t, size_t n, size_t *nedges)
{
	size_t *e = NULL;
	qsort(t, n, sizeof *t, by_id);
	*nedges = data_edges(t, n, &e);
	double p = longest_path(t, n, e, *nedges);
	free(e);
	return p;
}

int sp_bound_compute(sp_bound_t *b)
{
	memset(b, 0, sizeof *b);
	starpu_pthread_mutex_lock(&bd.lock);
	size_t n = bd.n;
	struct sp__btask *t = n ? malloc(n * sizeof *t) : NULL;
	if (t != NULL)
		memcpy(t, bd.task, n * sizeof *t);
	b->nmeasured = bd.nmeasured;
	starpu_pthread_mutex_unlock(&bd.lock);
	if (t == NULL)
		return -1;
	double *c = malloc(n * sizeof *c), *g = malloc(n * sizeof *g);
	int rc = -1;
	if (c == NULL || g == NULL)
		goto out;
	for (size_t i = 0; i < n; i++) {
		c[i] = t[i].t[0];
		g[i] = t[i].t[1];
	}
	b->ntasks = n;
	b->ncpu = starpu_cpu_worker_get_count();
	b->ncuda = starpu_cuda_worker_get_count();
	b->area_s = sp_bound_area(c, g, n, b->ncpu, b->ncuda);
	b->path_s = sp_bound_path(t, n, &b->nedges);
	rc = 0;
out:
	free(c);
	free(g);
	free(t);
	return rc;
}

void sp_bound_end(void)
{
	if (!bd.on)
		return;
	starpu_pthread_mutex_lock(&bd.lock);
	bd.on = 0;
	free(bd.task);
	bd.task = NULL;
	bd.n = bd.cap = bd.nmeasured = 0;
	starpu_pthread_mutex_unlock(&bd.lock);
}
