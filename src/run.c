/* Runs a graph over work items: one driver thread per item in flight. */
#define _GNU_SOURCE
#include "run.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "item.h"
#include "json.h"
#include "runtime.h"

/*
 * DESIGN: items are pulled from a shared counter by `inflight` driver
 * threads.  A driver calls each stage's run() in topological order; run()
 * submits tasks and returns at once (or waits, for iterative stages), so
 * item k+1's read tasks are queued while item k computes.  Values are freed
 * in reverse order at the end of the item; freeing unregisters handles,
 * which waits for the item's tasks.  Errors stay with their item.
 */

#define SP__MAXREPORT 32

struct sp_ctxnode {
	struct sp_ctxnode *next;
	sp_taskctx_t ctx;
};

struct sp_item {
	const sp_graph_t *g;
	const char *path;
	size_t index;
	sp_status_t status;
	pthread_mutex_t lock;
	struct sp_ctxnode *ctxs;
	struct {
		char key[48];
		double value;
	} report[SP__MAXREPORT];
	size_t nreport;
};

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

sp_taskctx_t *sp_item_taskctx(sp_item_t *item, const sp_gstage_t *stage, const char *kernel)
{
	struct sp_ctxnode *n = calloc(1, sizeof *n);
	if (n == NULL)
		return NULL;
	n->ctx.item = item;
	n->ctx.status = &item->status;
	n->ctx.stage = stage->name;
	n->ctx.kernel = kernel;
	n->ctx.stage_index = (int)(stage - item->g->stages);
	n->ctx.priority = stage->priority;
	pthread_mutex_lock(&item->lock);
	n->next = item->ctxs;
	item->ctxs = n;
	pthread_mutex_unlock(&item->lock);
	return &n->ctx;
}

void sp_taskctx_submitting(sp_taskctx_t *ctx)
{
	(void)ctx;
	sp__runtime_task_submitted();
}

int sp_task_submit_joinable(struct starpu_task *task, sp_taskctx_t *ctx)
{
	task->detach = 0;
	task->cl_arg_free = 0; /* the stage owns it (StarPU 1.3's task_build ignores _NFREE) */
	sp_taskctx_submitting(ctx);
	int ret = starpu_task_submit(task);
	if (ret != 0)
		starpu_task_destroy(task);
	return ret;
}

void sp_task_join(struct starpu_task **task)
{
	if (*task != NULL)
		(void)!starpu_task_wait(*task);
	*task = NULL;
}

static double ts_us(const struct timespec *t)
{
	return t->tv_sec * 1e6 + t->tv_nsec * 1e-3;
}

void sp__task_done_cb(void *arg)
{
	sp_taskctx_t *ctx = arg;
	struct starpu_task *task = starpu_task_get_current();
	int worker = starpu_worker_get_id();
	double t0 = 0, t1 = 0;
	if (task != NULL && task->profiling_info != NULL) {
		t0 = ts_us(&task->profiling_info->start_time);
		t1 = ts_us(&task->profiling_info->end_time);
		worker = task->profiling_info->workerid;
	}
	sp__runtime_task_done(ctx->stage, ctx->kernel, worker, t0, t1);
}

const char *sp_item_path(const sp_item_t *item) { return item->path; }
size_t sp_item_index(const sp_item_t *item) { return item->index; }
sp_status_t *sp_item_status(sp_item_t *item) { return &item->status; }

char *sp_item_param(const sp_item_t *item, const sp_gstage_t *stage, const char *name)
{
	const sp_gparam_t *p = sp_gstage_param(stage, name);
	return sp_graph_expand(p->text, item->path, item->index);
}

void sp_item_report_num(sp_item_t *item, const char *key, double value)
{
	pthread_mutex_lock(&item->lock);
	if (item->nreport < SP__MAXREPORT) {
		snprintf(item->report[item->nreport].key, sizeof item->report[0].key, "%s", key);
		item->report[item->nreport].value = value;
		item->nreport++;
	}
	pthread_mutex_unlock(&item->lock);
}

unsigned sp_item_nworkers(void)
{
	return starpu_worker_get_count();
}

struct sp_batch {
	const sp_graph_t *g;
	char *const *items;
	size_t nitems;
	atomic_size_t next;
	const sp_run_opts_t *opts;
	sp_item_t *state; /* one per item, kept for the report */
	atomic_size_t nok, nfailed;
};

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

static void run_item(struct sp_batch *b, size_t idx)
{
	const sp_graph_t *g = b->g;
	sp_item_t *item = &b->state[idx];
	size_t nslots = value_slot(g, g->nstages, 0);
	sp_value_t **values = calloc(nslots ? nslots : 1, sizeof *values);
	size_t s;

	if (values == NULL) {
		sp_status_set(&item->status, SP_ENOMEM, "%s: out of memory", item->path);
		goto report;
	}
	if (b->opts->verbose)
		fprintf(stderr, "[starpipe] item %zu/%zu: %s\n", idx + 1, b->nitems, item->path);
	for (s = 0; s < g->nstages && !sp_status_failed(&item->status); s++) {
		const sp_gstage_t *st = &g->stages[s];
		sp_value_t *in[16] = { 0 };
		for (size_t p = 0; p < st->kind->ninputs && p < 16; p++)
			in[p] = values[value_slot(g, st->inputs[p].stage, st->inputs[p].port)];
		int ret = st->kind->run(item, st, in, &values[value_slot(g, s, 0)]);
		if (ret != 0)
			sp_status_set(&item->status, ret, "%s: stage '%s': %s", item->path, st->name,
				      sp_strerror(ret));
	}
	/* Free in reverse order: consumers' handles before producers'. */
	for (size_t v = nslots; v-- > 0;)
		if (values[v] != NULL && values[v]->free_cb != NULL)
			values[v]->free_cb(values[v]);
	free(values);
report:
	if (sp_status_failed(&item->status)) {
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

static void *driver_main(void *arg)
{
	struct sp_batch *b = arg;
	for (;;) {
		size_t i = atomic_fetch_add(&b->next, 1);
		if (i >= b->nitems)
			break;
		run_item(b, i);
	}
	return NULL;
}

static char *items_json(struct sp_batch *b)
{
	sp_json_t *j = sp_json_new();
	char *out = NULL;
	if (j == NULL)
		return NULL;
	sp_json_begin_array(j);
	for (size_t i = 0; i < b->nitems; i++) {
		sp_item_t *it = &b->state[i];
		sp_json_begin_object(j);
		sp_json_kv_str(j, "item", it->path);
		sp_json_kv_str(j, "status", sp_status_failed(&it->status) ? "failed" : "ok");
		if (sp_status_failed(&it->status))
			sp_json_kv_str(j, "error", it->status.err.msg);
		for (size_t k = 0; k < it->nreport; k++)
			sp_json_kv_num(j, it->report[k].key, it->report[k].value);
		sp_json_end_object(j);
	}
	sp_json_end_array(j);
	if (sp_json_text(j) != NULL)
		out = strdup(sp_json_text(j));
	sp_json_free(&j);
	return out;
}

int sp_run(const sp_graph_t *g, char *const *items, size_t nitems, const sp_run_opts_t *opts,
	   sp_run_result_t *res)
{
	struct sp_batch b = { .g = g, .items = items, .nitems = nitems, .opts = opts };
	size_t nthreads = opts->inflight ? opts->inflight : 1;
	pthread_t th[64];
	size_t started = 0;

	memset(res, 0, sizeof *res);
	b.state = calloc(nitems ? nitems : 1, sizeof *b.state);
	if (b.state == NULL)
		return SP_ENOMEM;
	for (size_t i = 0; i < nitems; i++) {
		b.state[i].g = g;
		b.state[i].path = items[i];
		b.state[i].index = i;
		pthread_mutex_init(&b.state[i].lock, NULL);
	}
	sp_runtime_items(nitems);
	if (nthreads > nitems)
		nthreads = nitems;
	if (nthreads > 64)
		nthreads = 64;
	for (size_t t = 0; t < nthreads; t++)
		if (pthread_create(&th[t], NULL, driver_main, &b) == 0)
			started++;
	if (started == 0)
		driver_main(&b);
	for (size_t t = 0; t < started; t++)
		pthread_join(th[t], NULL);
	starpu_task_wait_for_all();

	res->nok = atomic_load(&b.nok);
	res->nfailed = atomic_load(&b.nfailed);
	res->items_json = items_json(&b);
	for (size_t i = 0; i < nitems; i++) {
		struct sp_ctxnode *n = b.state[i].ctxs;
		while (n != NULL) {
			struct sp_ctxnode *next = n->next;
			free(n);
			n = next;
		}
		pthread_mutex_destroy(&b.state[i].lock);
	}
	free(b.state);
	return res->nfailed ? SP_ECANCELED : 0;
}
