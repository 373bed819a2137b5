/* The item API of a stage's glue (item.h): status, task contexts, outputs, report figures. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"
#include "lanes.h"
#include "runtime.h"
#include "sched_hp.h"
#include "sim_host.h"

int sp_status_set(sp_status_t *st, int code, const char *fmt, ...)
{
	int expected = 0;
	if (atomic_compare_exchange_strong(&st->code, &expected, code)) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(st->err.msg, sizeof st->err.msg, fmt, ap);
		va_end(ap);
		st->err.code = code;
	}
	return code;
}

int sp_status_set_err(sp_status_t *st, const sp_err_t *err)
{
	return sp_status_set(st, err->code ? err->code : SP_EIO, "%s", err->msg);
}

void sp__item_free_ctxs(sp_item_t *it)
{
	struct sp_ctxnode *n = it->ctxs;
	while (n != NULL) {
		struct sp_ctxnode *next = n->next;
		free(n);
		n = next;
	}
	it->ctxs = NULL;
}

sp_taskctx_t *sp_item_taskctx(sp_item_t *item, const sp_gstage_t *stage, const char *kernel)
{
	struct sp_ctxnode *n = calloc(1, sizeof *n);
	if (n == NULL)
		return NULL;
	n->ctx.item = item;
	n->ctx.status = &item->status;
	n->ctx.path = item->path;
	n->ctx.stage = stage->name;
	n->ctx.kernel = kernel;
	n->ctx.stage_index = (int)(stage - item->g->stages);
	n->ctx.priority = stage->priority;
	n->ctx.where = -1;
	if (stage->where == SP_IMPL_CPU)
		n->ctx.where = STARPU_CPU;
	else if (stage->where == SP_IMPL_CUDA)
		n->ctx.where = STARPU_CUDA;
	n->ctx.sched_ctx = sp_runtime_lane_ctx(item->lane);
	/* heteroprio's buckets order the GPU lane's tasks; the CPU lane's
	 * scheduler (lws) keeps the stages' own priorities */
	if (sp_runtime_heteroprio() && item->lane <= 0)
		n->ctx.priority = sp_hp_bucket(kernel, n->ctx.where);
	starpu_pthread_mutex_lock(&item->lock);
	n->next = item->ctxs;
	item->ctxs = n;
	starpu_pthread_mutex_unlock(&item->lock);
	return &n->ctx;
}


static struct {
	char name[32];
	long value;
} sim_counts[8];
static size_t nsim_counts;

int sp_sim_count_set(const char *name, long value)
{
	for (size_t i = 0; i < nsim_counts; i++)
		if (strcmp(sim_counts[i].name, name) == 0) {
			sim_counts[i].value = value;
			return 0;
		}
	if (nsim_counts == sizeof sim_counts / sizeof sim_counts[0])
		return -1;
	snprintf(sim_counts[nsim_counts].name, sizeof sim_counts[0].name, "%s", name);
	sim_counts[nsim_counts++].value = value;
	return 0;
}

long sp_sim_count(const char *name, long def)
{
	for (size_t i = 0; i < nsim_counts; i++)
		if (strcmp(sim_counts[i].name, name) == 0)
			return sim_counts[i].value;
	return def;
}


/* ---- jobs: state shared by the stages of one item ---- */

/* The value sp_job_val() makes: the job is reached only through sp_job_of(). */
typedef struct job_val {
	sp_value_t base;
	sp_job_t *job;
} job_val_t;

void sp_job_ref(sp_job_t *job)
{
	job->refs++;
}

void sp_job_unref(sp_job_t *job)
{
	if (job == NULL || --job->refs > 0)
		return;
	job->free_cb(job);
}

static void job_val_free(sp_value_t *v)
{
	job_val_t *jv = (job_val_t *)v;
	sp_job_unref(jv->job);
	free(jv);
}

int sp_job_val(sp_job_t *job, const char *type, sp_value_t **out)
{
	job_val_t *jv = calloc(1, sizeof *jv);
	if (jv == NULL)
		return SP_ENOMEM;
	jv->base.type = type;
	jv->base.free_cb = job_val_free;
	jv->job = job;
	sp_job_ref(job);
	*out = &jv->base;
	return 0;
}

sp_job_t *sp_job_of(const sp_value_t *v)
{
	return ((const job_val_t *)v)->job;
}

int sp_item_output(sp_item_t *item, const char *path, const char **tmp, sp_err_t *err)
{
	starpu_pthread_mutex_lock(&item->lock);
	int rc = sp_outset_add(&item->out, path, tmp, err);
	starpu_pthread_mutex_unlock(&item->lock);
	return rc;
}

const char *sp_item_path(const sp_item_t *item) { return item->path; }
size_t sp_item_index(const sp_item_t *item) { return item->index; }
sp_status_t *sp_item_status(sp_item_t *item) { return &item->status; }

const sp_gstage_t *sp_item_producer(const sp_item_t *item, const sp_gstage_t *stage, size_t input)
{
	if (input >= stage->kind->ninputs || stage->inputs[input].stage >= item->g->nstages)
		return NULL;
	return &item->g->stages[stage->inputs[input].stage];
}

char *sp_item_param(sp_item_t *item, const sp_gstage_t *stage, const char *name)
{
	sp_err_t err = { 0 };
	char *t = sp_gstage_expand(stage, name, item->path, item->index, &err);
	if (t == NULL)
		sp_status_set_err(&item->status, &err);
	return t;
}

void sp_item_report_num(sp_item_t *item, const char *key, double value)
{
	starpu_pthread_mutex_lock(&item->lock);
	size_t k = 0;
	/* a key reported again replaces its value: a JSON object's keys are unique */
	while (k < item->nreport && strncmp(item->report[k].key, key, sizeof item->report[0].key) != 0)
		k++;
	if (k < SP__MAXREPORT) {
		snprintf(item->report[k].key, sizeof item->report[0].key, "%s", key);
		item->report[k].value = value;
		if (k == item->nreport)
			item->nreport++;
	}
	starpu_pthread_mutex_unlock(&item->lock);
}

unsigned sp_item_nworkers(const sp_item_t *item)
{
	const int lane = item != NULL ? item->lane : -1;
	return sp_runtime_lane_ncpu(lane) + sp_runtime_lane_ncuda(lane);
}

unsigned sp_item_ncuda_workers(const sp_item_t *item)
{
	return sp_runtime_lane_ncuda(item != NULL ? item->lane : -1);
}

int sp_item_vector_register(const sp_item_t *item, starpu_data_handle_t *h, size_t n, size_t elem)
{
	*h = NULL;
	if (n > UINT32_MAX)
		return SP_ENOMEM; /* StarPU's vectors count in 32 bits (the callers check first) */
	if (sp_item_ncuda_workers(item) > 0 || starpu_cuda_worker_get_count() == 0) {
		starpu_vector_data_register(h, -1, 0, (uint32_t)n, elem);
		return 0;
	}
	void *p = malloc(n * elem > 0 ? n * elem : 1);
	if (p == NULL)
		return SP_ENOMEM;
	starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)p, (uint32_t)n, elem);
	starpu_data_set_user_data(*h, p);
	return 0;
}

void sp_item_data_unregister(starpu_data_handle_t h)
{
	if (h == NULL)
		return;
	/* only a handle with a home of its own carries its memory as user data
	 * (starpipe-sim marks the others') */
	void *own = starpu_data_get_home_node(h) >= 0 ? starpu_data_get_user_data(h) : NULL;
	sp_data_unregister(h);
	free(own);
}

/* The buffers handed back: the most recent last.  A miss (no buffer of the
 * size asked) frees the oldest, so that a batch whose sizes change does not
 * keep buffers no item will take. */
static struct {
	void *p;
	size_t bytes;
} pool[SP_ITEM_POOL];
static int npool;
static starpu_pthread_mutex_t pool_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;
static int drain_hooked; /* the runtime calls drain_hook at its shutdown; under pool_lock */
static void drain_hook(void);

int sp_item_buffer_get(void **p, size_t bytes)
{
	void *old = NULL;
	starpu_pthread_mutex_lock(&pool_lock);
	for (int i = npool - 1; i >= 0; i--)
		if (pool[i].bytes == bytes) {
			*p = pool[i].p;
			memmove(&pool[i], &pool[i + 1], (size_t)(npool - 1 - i) * sizeof pool[0]);
			npool--;
			starpu_pthread_mutex_unlock(&pool_lock);
			return 0;
		}
	if (npool > 0) {
		old = pool[0].p;
		memmove(&pool[0], &pool[1], (size_t)(npool - 1) * sizeof pool[0]);
		npool--;
	}
	starpu_pthread_mutex_unlock(&pool_lock);
	if (old != NULL)
		starpu_free(old);
	return sp_sim_buffer_malloc(p, bytes);
}

void sp_item_buffer_put(void *p, size_t bytes)
{
	if (p == NULL)
		return;
	starpu_pthread_mutex_lock(&pool_lock);
	if (bytes >= ((size_t)1 << 20) && npool < SP_ITEM_POOL) {
		if (!drain_hooked)
			drain_hooked = sp_runtime_at_shutdown(drain_hook) == 0;
		pool[npool].p = p;
		pool[npool].bytes = bytes;
		npool++;
		p = NULL;
	}
	starpu_pthread_mutex_unlock(&pool_lock);
	if (p != NULL)
		starpu_free(p);
}

/* Frees the buffers kept.  Pinned memory is StarPU's to free, so the
 * runtime calls it before StarPU stops (sp_runtime_at_shutdown, hooked when
 * the first buffer is kept); a buffer kept with the hook unregistered
 * (out of room) is freed at its next get's eviction or never. */
int sp__item_buffers_drain(void)
{
	starpu_pthread_mutex_lock(&pool_lock);
	int n = npool;
	for (int i = 0; i < npool; i++)
		starpu_free(pool[i].p);
	npool = 0;
	drain_hooked = 0; /* the runtime forgets its hooks as it stops */
	starpu_pthread_mutex_unlock(&pool_lock);
	return n;
}

static void drain_hook(void)
{
	(void)sp__item_buffers_drain();
}
