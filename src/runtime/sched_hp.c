/* starpipe's heteroprio buckets (sched_hp.h). */
#include "sched_hp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <starpu_heteroprio.h>

#include "stage.h"

#define MAXCODELETS 128
static struct starpu_codelet *registry[MAXCODELETS];
static int nregistry;

void sp__codelet_register(struct starpu_codelet *cl)
{
	if (nregistry < MAXCODELETS)
		registry[nregistry++] = cl;
}

enum { ARCH_CPU = 1, ARCH_CUDA = 2 };

/* The CPU/GPU time ratio assumed for a codelet without models on both
 * (the smallest of the ratios calibrated on a real GPU node: doc/scheduling.md). */
#define SP_HP_RATIO_UNKNOWN 27.0

struct bucket {
	const char *symbol; /* NULL: bucket 0, StarPU's own tasks */
	unsigned archs;
	int stage;    /* first graph stage that uses it; 1 << 30: none */
	int prio;     /* that stage's `priority:` */
	double ratio; /* CPU time / GPU time; NAN: unknown */
	double slow;  /* the CPUs' slow factor */
};

static struct {
	const sp_graph_t *g;
	double margin;
	struct bucket b[STARPU_HETEROPRIO_MAX_PRIO];
	int n;
} hp;

static unsigned codelet_archs(const char *symbol)
{
	for (int i = 0; i < nregistry; i++) {
		const struct starpu_codelet *cl = registry[i];
		if (cl->model != NULL && cl->model->symbol != NULL && strcmp(cl->model->symbol, symbol) == 0)
			return (cl->cpu_funcs[0] != NULL ? ARCH_CPU : 0u) |
			       (cl->cuda_funcs[0] != NULL ? ARCH_CUDA : 0u);
	}
	return 0;
}

/* The CPU/GPU time ratio of a codelet from its history model: over the
 * footprints measured on both, weighted by the GPU's samples; else the
 * ratio of the overall means; NAN without both. */
static double model_ratio(const char *symbol)
{
	struct starpu_perfmodel model;
	char path[4096];
	memset(&model, 0, sizeof model);
	model.type = STARPU_HISTORY_BASED;
	starpu_perfmodel_get_model_path(symbol, path, sizeof path);
	if (access(path, R_OK) != 0 || starpu_perfmodel_load_symbol(symbol, &model) != 0)
		return NAN;
	enum { MAXFP = 256 };
	struct {
		uint32_t fp;
		double sum[2], n[2];
	} f[MAXFP];
	int nf = 0;
	int ncomb = starpu_perfmodel_get_narch_combs();
	for (int comb = 0; comb < ncomb; comb++) {
		struct starpu_perfmodel_arch *a = starpu_perfmodel_arch_comb_fetch(comb);
		if (a == NULL || a->ndevices != 1)
			continue;
		int t = a->devices[0].type == STARPU_CPU_WORKER ? 0
			: a->devices[0].type == STARPU_CUDA_WORKER ? 1
								      : -1;
		if (t < 0)
			continue;
		for (unsigned impl = 0; impl < STARPU_MAXIMPLEMENTATIONS; impl++) {
			struct starpu_perfmodel_per_arch *pa =
				starpu_perfmodel_get_model_per_arch(&model, a, impl);
			for (struct starpu_perfmodel_history_list *l = pa != NULL ? pa->list : NULL;
			     l != NULL; l = l->next) {
				const struct starpu_perfmodel_history_entry *e = l->entry;
				int k;
				for (k = 0; k < nf && f[k].fp != e->footprint; k++)
					;
				if (k == nf) {
					if (nf == MAXFP)
						continue;
					memset(&f[nf], 0, sizeof f[nf]);
					f[nf++].fp = e->footprint;
				}
				f[k].sum[t] += e->sum;
				f[k].n[t] += e->nsample;
			}
		}
	}
	starpu_perfmodel_unload_model(&model);
	double num = 0, den = 0, all[2] = { 0, 0 }, alln[2] = { 0, 0 };
	for (int k = 0; k < nf; k++) {
		for (int t = 0; t < 2; t++) {
			all[t] += f[k].sum[t];
			alln[t] += f[k].n[t];
		}
		if (f[k].n[0] > 0 && f[k].n[1] > 0 && f[k].sum[1] > 0) {
			double r = (f[k].sum[0] / f[k].n[0]) / (f[k].sum[1] / f[k].n[1]);
			num += r * f[k].n[1];
			den += f[k].n[1];
		}
	}
	if (den > 0)
		return num / den;
	if (alln[0] > 0 && alln[1] > 0 && all[1] > 0)
		return (all[0] / alln[0]) / (all[1] / alln[1]);
	return NAN;
}

static int find(const char *symbol, unsigned archs)
{
	for (int i = 1; i < hp.n; i++)
		if (strcmp(hp.b[i].symbol, symbol) == 0 && hp.b[i].archs == archs)
			return i;
	return -1;
}

static void add(const char *symbol, unsigned archs, int stage, int prio)
{
	int i = find(symbol, archs);
	if (i > 0) {
		if (stage < hp.b[i].stage) {
			hp.b[i].stage = stage;
			hp.b[i].prio = prio;
		}
		return;
	}
	if (archs == 0 || hp.n == STARPU_HETEROPRIO_MAX_PRIO)
		return;
	hp.b[hp.n++] = (struct bucket){ symbol, archs, stage, prio, NAN, 0 };
}

void sp_hp_plan(const sp_graph_t *g, double margin)
{
	hp.g = g;
	hp.margin = margin;
	if (hp.margin <= 0) {
		const char *e = getenv("STARPIPE_HP_MARGIN");
		hp.margin = e != NULL && atof(e) > 0 ? atof(e) : 2.0;
	}
}

/* The stage's restriction as architectures (0: none). */
static unsigned stage_archs(const sp_gstage_t *st)
{
	return st->where == SP_IMPL_CPU ? ARCH_CPU : st->where == SP_IMPL_CUDA ? ARCH_CUDA : 0;
}

/* Builds the buckets: 0 for StarPU's own tasks, then one per registered
 * codelet with its implementations, and one per stage restriction. */
static void build(void)
{
	unsigned any = 0;
	for (int i = 0; i < nregistry; i++)
		if (registry[i]->model != NULL && registry[i]->model->symbol != NULL)
			any |= codelet_archs(registry[i]->model->symbol);
	hp.n = 1;
	hp.b[0] = (struct bucket){ NULL, any & ARCH_CUDA ? ARCH_CPU | ARCH_CUDA : ARCH_CPU, -1, 0, NAN, 0 };
	/* the graph's codelets first, in stage order */
	for (size_t s = 0; hp.g != NULL && s < hp.g->nstages; s++) {
		const sp_gstage_t *st = &hp.g->stages[s];
		const char *c = st->kind->codelets;
		for (int i = 0; i < nregistry; i++) {
			const char *sym = registry[i]->model != NULL ? registry[i]->model->symbol : NULL;
			size_t len = sym != NULL ? strlen(sym) : 0;
			const char *p = c;
			while (sym != NULL && (p = strstr(p, sym)) != NULL) {
				if ((p == c || p[-1] == ' ') && (p[len] == '\0' || p[len] == ' '))
					break;
				p += len;
			}
			if (p == NULL)
				continue;
			unsigned a = codelet_archs(sym), r = stage_archs(st);
			add(sym, a, (int)s, st->priority);
			if (r != 0 && (a & r) != 0 && (a & r) != a)
				add(sym, a & r, (int)s, st->priority);
		}
	}
	for (int i = 0; i < nregistry; i++)
		if (registry[i]->model != NULL && registry[i]->model->symbol != NULL)
			add(registry[i]->model->symbol, codelet_archs(registry[i]->model->symbol), 1 << 30, 0);
	for (int i = 1; i < hp.n; i++) {
		struct bucket *b = &hp.b[i];
		if (b->archs != (ARCH_CPU | ARCH_CUDA))
			continue;
		b->ratio = model_ratio(b->symbol);
		/* A CPU at least as fast: no restriction.  Uncalibrated (a node
		 * type without models yet): assume the GPU SP_HP_RATIO_UNKNOWN
		 * times faster (the smallest calibrated ratio, so the least
		 * restrictive guess) rather than let CPUs take GPU work freely. */
		double r = isfinite(b->ratio) ? b->ratio : SP_HP_RATIO_UNKNOWN;
		b->slow = r > 1 ? r * hp.margin : 0;
	}
}

static int order_cpu(const void *x, const void *y)
{
	const struct bucket *a = &hp.b[*(const int *)x], *b = &hp.b[*(const int *)y];
	int sa = a->archs == ARCH_CPU, sb = b->archs == ARCH_CPU;
	if (a->symbol == NULL || b->symbol == NULL)
		return a->symbol == NULL ? -1 : 1;
	if (sa != sb)
		return sa ? -1 : 1; /* CPU-only buckets first */
	if (sa)
		return a->stage - b->stage;
	double ra = isfinite(a->ratio) ? a->ratio : 1, rb = isfinite(b->ratio) ? b->ratio : 1;
	return ra < rb ? -1 : ra > rb ? 1 : a->stage - b->stage;
}

static int order_gpu(const void *x, const void *y)
{
	const struct bucket *a = &hp.b[*(const int *)x], *b = &hp.b[*(const int *)y];
	if (a->symbol == NULL || b->symbol == NULL)
		return a->symbol == NULL ? -1 : 1;
	if (a->prio != b->prio)
		return b->prio - a->prio; /* the graph's `priority:` first */
	return b->stage - a->stage; /* the last stage first */
}

/* Maps a worker type's priorities 0, 1, ... to the buckets it may take,
 * in the order `cmp` gives. */
static void map_arch(unsigned ctx, enum starpu_heteroprio_types type, unsigned arch,
		     int (*cmp)(const void *, const void *))
{
	int idx[STARPU_HETEROPRIO_MAX_PRIO], n = 0;
	for (int i = 0; i < hp.n; i++)
		if (hp.b[i].archs & arch)
			idx[n++] = i;
	qsort(idx, (size_t)n, sizeof idx[0], cmp);
	starpu_heteroprio_set_nb_prios(ctx, type, (unsigned)n);
	for (int k = 0; k < n; k++)
		starpu_heteroprio_set_mapping(ctx, type, (unsigned)k, (unsigned)idx[k]);
}

void sp_hp_init_cb(unsigned ctx)
{
	build();
	map_arch(ctx, STARPU_CPU_IDX, ARCH_CPU, order_cpu);
	map_arch(ctx, STARPU_CUDA_IDX, ARCH_CUDA, order_gpu);
	for (int i = 0; i < hp.n; i++)
		if (hp.b[i].archs == (ARCH_CPU | ARCH_CUDA) && hp.b[i].slow > 0) {
			starpu_heteroprio_set_faster_arch(ctx, STARPU_CUDA_IDX, (unsigned)i);
			starpu_heteroprio_set_arch_slow_factor(ctx, STARPU_CPU_IDX, (unsigned)i,
							       (float)hp.b[i].slow);
		}
}

double sp_hp_ratio(const char *kernel)
{
	for (int i = 1; i < hp.n; i++)
		if (strcmp(hp.b[i].symbol, kernel) == 0 && !isnan(hp.b[i].ratio))
			return hp.b[i].ratio;
	const double r = model_ratio(kernel);
	return isnan(r) ? SP_HP_RATIO_UNKNOWN : r;
}

int sp_hp_bucket(const char *kernel, int32_t where)
{
	unsigned a = codelet_archs(kernel);
	if (where != -1) {
		unsigned r = ((where & STARPU_CPU) ? ARCH_CPU : 0u) | ((where & STARPU_CUDA) ? ARCH_CUDA : 0u);
		if ((a & r) != 0)
			a &= r;
	}
	int i = find(kernel, a);
	return i > 0 ? i : 0;
}

void sp_hp_describe(FILE *f)
{
	fprintf(f, "heteroprio buckets of the graph (CPU slow factor = CPU/GPU ratio x margin %.2g):\n",
		hp.margin);
	for (int i = 0; i < hp.n; i++)
		if (i == 0 || hp.b[i].stage < (1 << 30))
			fprintf(f, "  %2d %-20s %-8s ratio %8.3g%s  CPU slow factor %8.3g\n", i,
			hp.b[i].symbol ? hp.b[i].symbol : "(StarPU's)",
			hp.b[i].archs == 3 ? "cpu+cuda" : hp.b[i].archs == 1 ? "cpu" : "cuda",
			hp.b[i].ratio,
			hp.b[i].archs == 3 && !isfinite(hp.b[i].ratio) ? " (no model: 27 assumed)" : "",
			hp.b[i].slow);
}
