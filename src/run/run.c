/* Runs a graph over work items: one driver thread per item in flight. */
#define _GNU_SOURCE
#include "run.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "bound.h"
#include "fsutil.h"
#include "item.h"
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

enum item_state { IT_PENDING, IT_RUNNING, IT_OK, IT_FAILED, IT_SKIPPED, IT_CANCELLED,
		  IT_OTHER_SHARD /* not this shard's: not run, not reported */ };

/* "SIGTERM" */
static const char *sig_name(int sig)
{
	static _Thread_local char buf[32];
	const char *a = sigabbrev_np(sig);
	snprintf(buf, sizeof buf, "SIG%s", a != NULL ? a : "?");
	return buf;
}

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
	starpu_pthread_mutex_t lock;
	struct sp_ctxnode *ctxs;
	struct {
		char key[48];
		double value;
	} report[SP__MAXREPORT];
	size_t nreport;
	char **outputs; /* planned outputs, expanded */
	size_t noutputs;
	sp_outset_t out; /* their temporaries, while the item runs */
	_Atomic int state;
	double seconds;
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
	n->ctx.where = -1;
	if (stage->where == SP_IMPL_CPU)
		n->ctx.where = STARPU_CPU;
	else if (stage->where == SP_IMPL_CUDA)
		n->ctx.where = STARPU_CUDA;
	if (sp_runtime_heteroprio())
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

char *sp_item_param(const sp_item_t *item, const sp_gstage_t *stage, const char *name)
{
	const sp_gparam_t *p = sp_gstage_param(stage, name);
	return sp_graph_expand(p->text, item->path, item->index);
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

unsigned sp_item_nworkers(void)
{
	return starpu_worker_get_count();
}

struct sp_batch {
	const sp_graph_t *g;
	char *const *items;
	size_t nitems;
	int lazy_plan; /* MPI ranks: an item is planned by the rank it is handed to */
	const sp_run_opts_t *opts;
	sp_item_t *state; /* one per item, kept for the report */
	atomic_size_t nok, nfailed, nskipped, ncancelled;
	int journal_fd;           /* -1: no journal */
	const char *journal_path; /* for messages */
	int journal_failed;       /* a line could not be written: the batch exits 1 */
	starpu_pthread_mutex_t journal_lock;
	/* Batch-wide stages: those whose parameters and inputs do not depend
	 * on the item (the DESI PSF).  The first item that reaches one runs it
	 * for the batch, as a pseudo-item; every item borrows its values. */
	unsigned char *batch_wide; /* [nstages] */
	sp_item_t shared;          /* the pseudo-item; its status: the first failure */
	starpu_pthread_mutex_t shared_lock;
	unsigned char *shared_ran; /* [nstages] */
	sp_value_t **shared_values; /* value_slot() layout */
};

/* The batch being run, for sp_run_interrupt(). */
static starpu_pthread_mutex_t cur_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;
static struct sp_batch *cur_batch;
static atomic_int stop_signal;

void sp_run_interrupt(int signo)
{
	atomic_store(&stop_signal, signo);
	starpu_pthread_mutex_lock(&cur_lock);
	struct sp_batch *b = cur_batch;
	for (size_t i = 0; b != NULL && i < b->nitems; i++)
		if (atomic_load(&b->state[i].state) == IT_RUNNING)
			sp_status_set(&b->state[i].status, SP_ECANCELED, "%s: interrupted by %s",
				      b->state[i].path, sig_name(signo));
	starpu_pthread_mutex_unlock(&cur_lock);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const char *state_name(int s)
{
	switch (s) {
	case IT_OK: return "ok";
	case IT_FAILED: return "failed";
	case IT_SKIPPED: return "skipped";
	case IT_CANCELLED: return "cancelled";
	case IT_RUNNING: return "running";
	default: return "not run";
	}
}

/* One JSON line per finished item, written and synced at once, so that a
 * crash loses nothing already recorded.  A line that cannot be written (a
 * full disk, an I/O error) fails the batch: the journal is what a user
 * resumes from, so it must not be silently incomplete.  It is said once,
 * and nothing more is appended, so the journal never has a gap. */
static void journal_item(struct sp_batch *b, sp_item_t *it)
{
	if (b->journal_fd < 0)
		return;
	sp_json_t *j = sp_json_new();
	if (j == NULL) {
		starpu_pthread_mutex_lock(&b->journal_lock);
		if (!b->journal_failed)
			fprintf(stderr, "starpipe: %s: cannot write the journal: out of memory; %s and "
				"the items that end after it are not recorded\n", b->journal_path,
				it->path);
		b->journal_failed = 1;
		starpu_pthread_mutex_unlock(&b->journal_lock);
		return;
	}
	int st = atomic_load(&it->state);
	sp_json_begin_object(j);
	sp_json_kv_str(j, "item", it->path);
	sp_json_kv_str(j, "status", state_name(st));
	if (b->lazy_plan)
		sp_json_kv_int(j, "rank", sp_cluster_rank());
	sp_json_key(j, "outputs");
	sp_json_begin_array(j);
	for (size_t k = 0; k < it->noutputs; k++)
		sp_json_str(j, it->outputs[k]);
	sp_json_end_array(j);
	sp_json_kv_num(j, "seconds", it->seconds);
	if (st == IT_FAILED || st == IT_CANCELLED)
		sp_json_kv_str(j, "message", it->status.err.msg);
	sp_json_end_object(j);
	char *line = NULL;
	int len = sp_json_text(j) != NULL ? asprintf(&line, "%s\n", sp_json_text(j)) : -1;
	sp_json_free(&j);
	starpu_pthread_mutex_lock(&b->journal_lock);
	if (!b->journal_failed) {
		int e = 0;
		if (len < 0)
			e = ENOMEM;
		else if (sp_append_record(b->journal_fd, line, (size_t)len) != 0)
			e = errno != 0 ? errno : EIO;
		if (e != 0) {
			b->journal_failed = 1;
			fprintf(stderr, "starpipe: %s: cannot write the journal: %s; %s and the items "
				"that end after it are not recorded\n", b->journal_path, strerror(e),
				it->path);
		}
	}
	starpu_pthread_mutex_unlock(&b->journal_lock);
	if (len >= 0)
		free(line);
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

/* Runs batch-wide stage s once, for the first item that reaches it; later
 * items wait for it and borrow its values.  A failure fails every item. */
static void run_batch_wide(struct sp_batch *b, size_t s, sp_value_t *const *in, sp_item_t *item)
{
	const sp_gstage_t *st = &b->g->stages[s];
	starpu_pthread_mutex_lock(&b->shared_lock);
	if (!b->shared_ran[s]) {
		b->shared_ran[s] = 1;
		b->shared.path = item->path; /* for messages only: nothing expands it */
		int ret = st->kind->run(&b->shared, st, in,
					&b->shared_values[value_slot(b->g, s, 0)]);
		if (ret != 0)
			sp_status_set(&b->shared.status, ret, "stage '%s': %s", st->name,
				      sp_strerror(ret));
		if (b->opts->verbose)
			fprintf(stderr, "[starpipe] stage '%s' ran once for the batch\n", st->name);
	}
	starpu_pthread_mutex_unlock(&b->shared_lock);
	if (sp_status_failed(&b->shared.status))
		sp_status_set_err(&item->status, &b->shared.status.err);
}

/* Submits the tiles of the group of tiled stages that ends at stage last
 * (see sp_stage_tile_fn): tile by tile, each tile stage by stage. */
static void run_tiles(struct sp_batch *b, sp_item_t *item, sp_value_t **values, size_t last)
{
	const sp_graph_t *g = b->g;
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

static void run_item(struct sp_batch *b, size_t idx)
{
	const sp_graph_t *g = b->g;
	sp_item_t *item = &b->state[idx];
	size_t nslots = value_slot(g, g->nstages, 0);
	sp_value_t **values = calloc(nslots ? nslots : 1, sizeof *values);
	size_t s;

	double t0 = now_s();
	starpu_pthread_mutex_lock(&cur_lock);
	atomic_store(&item->state, IT_RUNNING);
	starpu_pthread_mutex_unlock(&cur_lock);
	if (atomic_load(&stop_signal) != 0)
		sp_status_set(&item->status, SP_ECANCELED, "%s: interrupted by %s", item->path,
			      sig_name(atomic_load(&stop_signal)));
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
		if (b->batch_wide[s]) {
			run_batch_wide(b, s, in, item);
			for (size_t p = 0; p < outputs_of(st); p++)
				values[value_slot(g, s, p)] = b->shared_values[value_slot(g, s, p)];
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
	/* Free in reverse order: consumers' handles before producers'; the
	 * batch-wide values are the batch's. */
	for (size_t v = nslots; v-- > 0;)
		if (values[v] != NULL && values[v]->free_cb != NULL && !b->batch_wide[slot_stage(g, v)])
			values[v]->free_cb(values[v]);
	/* A batch-wide stage's tasks that failed fail every item that used it
	 * (this item's tasks, which read its data, are done). */
	if (sp_status_failed(&b->shared.status))
		for (size_t t = 0; t < s; t++)
			if (b->batch_wide[t]) {
				sp_status_set_err(&item->status, &b->shared.status.err);
				break;
			}
	free(values);
report:
	/* Every task of the item is done (freeing the values waited for them):
	 * its outputs appear together, or not at all. */
#ifndef SP_SIMGRID
	if (!sp_status_failed(&item->status)) {
		sp_err_t err = { 0 };
		if (sp_outset_commit(&item->out, &err) != 0)
			sp_status_set_err(&item->status, &err);
	}
#else /* starpipe-sim: no codelet ran, so no output is kept; the commit's time is charged */
	sp_sim_item_end();
#endif
	sp_outset_free(&item->out);
	item->seconds = now_s() - t0;
	int cancelled = atomic_load(&stop_signal) != 0 &&
			atomic_load(&item->status.code) == SP_ECANCELED;
	starpu_pthread_mutex_lock(&cur_lock);
	atomic_store(&item->state, cancelled ? IT_CANCELLED
				   : sp_status_failed(&item->status) ? IT_FAILED : IT_OK);
	starpu_pthread_mutex_unlock(&cur_lock);
	journal_item(b, item);
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

static void plan_item(struct sp_batch *b, sp_item_t *it);

/* Whether item i is handed out at all: not another shard's, and (when
 * planned up front) not skipped or refused by the plan. */
static int want_item(size_t i, void *arg)
{
	struct sp_batch *b = arg;
	int s = atomic_load(&b->state[i].state);
	return b->lazy_plan ? s != IT_OTHER_SHARD : s == IT_PENDING;
}

static int batch_stopped(void) { return atomic_load(&stop_signal) != 0; }

static void *driver_main(void *arg)
{
	struct sp_batch *b = arg;
	for (;;) {
		/* nothing when interrupted: no new item */
		size_t i = sp_dispatch_next();
		if (i == SIZE_MAX)
			break;
		if (b->lazy_plan && atomic_load(&b->state[i].state) == IT_PENDING)
			plan_item(b, &b->state[i]);
		if (atomic_load(&b->state[i].state) != IT_PENDING)
			continue; /* skipped or refused when planned */
		run_item(b, i);
	}
	return NULL;
}

/* ---- planning ---- */

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Appends t to the list v (cnt, cap); frees t when it cannot. */
static int push_output(char ***v, size_t *cnt, size_t *cap, char *t)
{
	if (*cnt == *cap) {
		char **nv = realloc(*v, (*cap = *cap ? 2 * *cap : 4) * sizeof *nv);
		if (nv == NULL) {
			free(t);
			return SP_ENOMEM;
		}
		*v = nv;
	}
	(*v)[(*cnt)++] = t;
	return 0;
}

/* The item's outputs: every SP_PT_OUTPUT parameter of every stage, expanded
 * ("" is an optional output that is not written), and the files its kind
 * writes beside them (sp_stage_kind_t.sibling). */
static int plan_outputs(const sp_graph_t *g, const char *path, size_t index, char ***out,
			size_t *n)
{
	char **v = NULL;
	size_t cnt = 0, cap = 0;
	*out = NULL;
	*n = 0;
	for (size_t s = 0; s < g->nstages; s++) {
		const sp_gstage_t *st = &g->stages[s];
		for (size_t p = 0; p < st->kind->nparams; p++) {
			if (st->kind->params[p].type != SP_PT_OUTPUT)
				continue;
			char *t = sp_graph_expand(sp_gstage_param(st, st->kind->params[p].name)->text,
						  path, index);
			if (t == NULL)
				goto oom;
			if (t[0] == '\0') {
				free(t);
				continue;
			}
			char *sib = NULL;
			if (st->kind->sibling != NULL &&
			    st->kind->sibling(st, st->kind->params[p].name, t, &sib) != 0) {
				free(t);
				goto oom;
			}
			if (push_output(&v, &cnt, &cap, t) != 0) {
				free(sib);
				goto oom;
			}
			if (sib != NULL && push_output(&v, &cnt, &cap, sib) != 0)
				goto oom;
		}
	}
	*out = v;
	*n = cnt;
	return 0;
oom:
	free_strv(v, cnt);
	return SP_ENOMEM;
}

/* A name for comparing outputs: the longest existing ancestor folder
 * resolved (symlinks, "..", "./"), the rest as written. */
static char *canon_path(const char *path)
{
	char head[PATH_MAX], real[PATH_MAX], *out = NULL;
	if (snprintf(head, sizeof head, "%s", path) >= (int)sizeof head)
		return strdup(path);
	size_t len = strlen(head);
	for (;;) {
		char *slash = strrchr(head, '/');
		const char *dir = ".";
		if (slash == head)
			dir = "/";
		else if (slash != NULL) {
			*slash = '\0';
			dir = head;
		}
		if (realpath(dir, real) != NULL) {
			const char *tail = path + (slash == NULL ? 0 : (size_t)(slash - head) + 1);
			if (asprintf(&out, "%s/%s", strcmp(real, "/") == 0 ? "" : real, tail) < 0)
				out = NULL;
			return out;
		}
		if (slash == NULL || slash == head || (size_t)(slash - head) >= len)
			return strdup(path);
	}
}

struct outref {
	char *canon;
	const char *path; /* as expanded */
	size_t item;
};

static int cmp_outref(const void *a, const void *b)
{
	const struct outref *x = a, *y = b;
	int c = strcmp(x->canon, y->canon);
	return c ? c : (x->item > y->item) - (x->item < y->item);
}

/* Refuses two outputs that are one file, naming both inputs. */
static int check_collisions(char *const *items, char **const *outs, const size_t *nouts,
			    size_t nitems, sp_err_t *err)
{
	size_t n = 0, k = 0;
	int rc = 0;
	for (size_t i = 0; i < nitems; i++)
		n += nouts[i];
	struct outref *r = calloc(n ? n : 1, sizeof *r);
	if (r == NULL)
		return sp_seterr(err, SP_ENOMEM, "out of memory planning %zu outputs", n);
	for (size_t i = 0; i < nitems; i++)
		for (size_t o = 0; o < nouts[i]; o++, k++) {
			r[k].path = outs[i][o];
			r[k].item = i;
			if ((r[k].canon = canon_path(outs[i][o])) == NULL) {
				rc = sp_seterr(err, SP_ENOMEM, "out of memory");
				goto out;
			}
		}
	qsort(r, n, sizeof *r, cmp_outref);
	for (k = 1; k < n; k++) {
		if (strcmp(r[k - 1].canon, r[k].canon) != 0)
			continue;
		if (r[k - 1].item == r[k].item)
			rc = sp_seterr(err, SP_EINVAL, "output collision: %s: writes '%s' twice",
				       items[r[k].item], r[k].path);
		else
			rc = sp_seterr(err, SP_EINVAL,
				       "output collision: %s and %s would both write '%s'; "
				       "refused before running (make the output names differ, "
				       "e.g. with ${stem} and distinct folders)",
				       items[r[k - 1].item], items[r[k].item], r[k].path);
		break;
	}
out:
	for (k = 0; k < n; k++)
		free(r[k].canon);
	free(r);
	return rc;
}

int sp_run_plan_check(const sp_graph_t *g, char *const *items, size_t nitems, sp_err_t *err)
{
	char ***outs = calloc(nitems ? nitems : 1, sizeof *outs);
	size_t *nouts = calloc(nitems ? nitems : 1, sizeof *nouts);
	int rc = 0;
	if (outs == NULL || nouts == NULL)
		rc = sp_seterr(err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	for (size_t i = 0; rc == 0 && i < nitems; i++)
		if (plan_outputs(g, items[i], i, &outs[i], &nouts[i]) != 0)
			rc = sp_seterr(err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	if (rc == 0)
		rc = check_collisions(items, outs, nouts, nitems, err);
	for (size_t i = 0; outs != NULL && nouts != NULL && i < nitems; i++)
		free_strv(outs[i], nouts[i]);
	free(outs);
	free(nouts);
	return rc;
}

unsigned long long sp_run_machine_memory(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	unsigned long long mem = pages > 0 && psz > 0 ? (unsigned long long)pages * (unsigned long long)psz
						       : 0;
	/* cgroup v2: "0::/path" in /proc/self/cgroup, its memory.max */
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096], path[4200];
	while (f != NULL && fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
		FILE *m = fopen(path, "re");
		unsigned long long lim;
		if (m != NULL && fscanf(m, "%llu", &lim) == 1 && lim > 0 && (mem == 0 || lim < mem))
			mem = lim;
		if (m != NULL)
			fclose(m);
	}
	if (f != NULL)
		fclose(f);
	return mem;
}

/* The item's peak memory, estimated from its inputs' headers by the stages
 * that allocate (sp_stage_kind_t.estimate), plus the process's baseline. */
#define SP__BASE_BYTES (64ull << 20)
static int estimate_item(sp_item_t *it, unsigned long long *bytes, unsigned long long *out_bytes,
			 sp_err_t *err)
{
	sp_estimate_t e = { 0, SP__BASE_BYTES, 0 };
	for (size_t s = 0; s < it->g->nstages; s++) {
		const sp_gstage_t *st = &it->g->stages[s];
		if (st->kind->estimate != NULL) {
			int rc = st->kind->estimate(it, st, &e, err);
			if (rc != 0)
				return rc;
		}
	}
	*bytes = e.bytes;
	*out_bytes = e.out_bytes;
	return 0;
}

/* "1.5 GiB", "160 MiB", "551 KiB" */
static const char *human_bytes(unsigned long long b, char *buf, size_t size)
{
	if (b >= (1ull << 30))
		snprintf(buf, size, "%.1f GiB", (double)b / (double)(1ull << 30));
	else if (b >= (1ull << 20))
		snprintf(buf, size, "%.0f MiB", (double)b / (double)(1ull << 20));
	else
		snprintf(buf, size, "%.0f KiB", (double)b / 1024.0);
	return buf;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Removes the temporaries dead runs left in the batch's output folders:
 * each distinct folder is scanned once (a batch writes thousands of files
 * into a few folders). */
static void clean_stale(struct sp_batch *b)
{
	size_t n = 0, k = 0;
	for (size_t i = 0; i < b->nitems; i++)
		n += b->state[i].noutputs;
	char **dirs = calloc(n ? n : 1, sizeof *dirs);
	if (dirs == NULL)
		return;
	for (size_t i = 0; i < b->nitems; i++)
		for (size_t o = 0; o < b->state[i].noutputs; o++) {
			const char *p = b->state[i].outputs[o], *slash = strrchr(p, '/');
			dirs[k] = slash == NULL ? strdup(".")
				  : strndup(p, slash == p ? 1 : (size_t)(slash - p));
			if (dirs[k] != NULL)
				k++;
		}
	qsort(dirs, k, sizeof *dirs, cmp_str);
	for (size_t i = 0; i < k; i++) {
		if (i > 0 && strcmp(dirs[i], dirs[i - 1]) == 0)
			continue;
		size_t r = sp_outset_clean_stale_dir(dirs[i]);
		if (r > 0 && !b->opts->quiet)
			fprintf(stderr, "starpipe: %s: removed %zu temporary file(s) of a dead run\n",
				dirs[i], r);
	}
	free_strv(dirs, k);
}

/* The item's output folders exist (made now: a folder that cannot be made
 * fails the item before its work), and the file system of the first has
 * room for the outputs' estimated size (out_need, a lower bound). */
static int plan_output_space(sp_item_t *it, unsigned long long out_need, sp_err_t *err)
{
	for (size_t o = 0; o < it->noutputs; o++) {
		char dir[4096], base[1024];
		if (sp_split_path(it->outputs[o], dir, sizeof dir, base, sizeof base) != 0)
			return sp_seterr(err, SP_EINVAL, "%s: output path too long", it->outputs[o]);
		sp_err_t merr = { 0 };
		if (sp_mkdirs(dir, &merr) != 0)
			return sp_seterr(err, merr.code, "%s: %s", it->path, merr.msg);
		struct statvfs vs;
		if (o > 0 || out_need == 0 || statvfs(dir, &vs) != 0)
			continue;
		unsigned long long avail = (unsigned long long)vs.f_bavail * vs.f_frsize;
		char nb[32], ab[32];
		if (avail < out_need)
			return sp_seterr(err, SP_EIO,
					 "%s: its output needs about %s but '%s' has %s free; refused "
					 "before running",
					 it->path, human_bytes(out_need, nb, sizeof nb), dir,
					 human_bytes(avail, ab, sizeof ab));
	}
	return 0;
}

/* --skip-existing: the item's existing outputs, each checked by its stage's
 * kind (sp_stage_kind_t.verify), in plan_outputs()'s order.  0 when all are
 * whole; else SP_E* with err naming the first damaged file and why. */
static int verify_outputs(const sp_item_t *it, sp_err_t *err)
{
	const sp_graph_t *g = it->g;
	int rc = 0;
	for (size_t s = 0; rc == 0 && s < g->nstages; s++) {
		const sp_gstage_t *st = &g->stages[s];
		if (st->kind->verify == NULL)
			continue;
		for (size_t p = 0; rc == 0 && p < st->kind->nparams; p++) {
			const char *name = st->kind->params[p].name;
			if (st->kind->params[p].type != SP_PT_OUTPUT)
				continue;
			char *t = sp_graph_expand(sp_gstage_param(st, name)->text, it->path, it->index);
			char *sib = NULL;
			if (t == NULL || (t[0] != '\0' && st->kind->sibling != NULL &&
					  st->kind->sibling(st, name, t, &sib) != 0))
				rc = sp_seterr(err, SP_ENOMEM, "%s: out of memory", it->path);
			if (rc == 0 && t[0] != '\0')
				rc = st->kind->verify(st, name, t, err);
			if (rc == 0 && sib != NULL)
				rc = st->kind->verify(st, name, sib, err);
			free(t);
			free(sib);
		}
	}
	return rc;
}

/* Before the batch: refuses an item whose output exists and is not a
 * regular file, skips (on request) an item whose every output exists and
 * is whole, and refuses an item that would not fit in memory. */
static void plan_item(struct sp_batch *b, sp_item_t *it)
{
	sp_err_t err = { 0 }, verr = { 0 };
	size_t present = 0;
	for (size_t o = 0; o < it->noutputs; o++) {
		struct stat sb;
		if (sp_output_check(it->outputs[o], &err) != 0) {
			sp_status_set_err(&it->status, &err);
			fprintf(stderr, "starpipe: %s: %s\n", it->path, err.msg);
			atomic_store(&it->state, IT_FAILED);
			atomic_fetch_add(&b->nfailed, 1);
			journal_item(b, it);
			sp_runtime_item_done();
			return;
		}
		if (lstat(it->outputs[o], &sb) == 0 && S_ISREG(sb.st_mode))
			present++;
	}
	if (b->opts->skip_existing && it->noutputs > 0 && present == it->noutputs &&
	    verify_outputs(it, &verr) != 0) {
		/* truncated or damaged since it was written: made again, and
		 * said so (even with -q: it is about the data) */
		fprintf(stderr, "starpipe: %s; the output is damaged: %s is recomputed\n", verr.msg,
			it->path);
		present = 0;
	}
	if (b->opts->skip_existing && it->noutputs > 0 && present == it->noutputs) {
		atomic_store(&it->state, IT_SKIPPED);
		atomic_fetch_add(&b->nskipped, 1);
		if (b->opts->verbose)
			fprintf(stderr, "[starpipe] %s: every output exists; skipped\n", it->path);
		journal_item(b, it);
		sp_runtime_item_done();
		return;
	}
	/* Memory up front: an item that cannot fit fails now, with the figure,
	 * not after minutes of work or by the kernel's OOM killer. */
	unsigned long long need = 0, limit = b->opts->memory_limit ? b->opts->memory_limit
								   : sp_run_machine_memory();
	unsigned long long out_need = 0;
	int rc = estimate_item(it, &need, &out_need, &err);
	char nb[32], lb[32];
	if (rc == 0 && limit > 0 && need > limit)
		rc = sp_seterr(&err, SP_ENOMEM,
			       "%s: needs about %s of memory (estimated from its header), more than "
			       "the %s %s; refused before running",
			       it->path, human_bytes(need, nb, sizeof nb), human_bytes(limit, lb, sizeof lb),
			       b->opts->memory_limit ? "of --memory-limit" : "this machine (or its cgroup) has");
	if (rc == 0)
		rc = plan_output_space(it, out_need, &err);
	if (rc != 0) {
		sp_status_set_err(&it->status, &err);
		fprintf(stderr, "starpipe: %s\n", it->status.err.msg);
		atomic_store(&it->state, IT_FAILED);
		atomic_fetch_add(&b->nfailed, 1);
		journal_item(b, it);
		sp_runtime_item_done();
		return;
	}
	sp_item_report_num(it, "memory_estimate_bytes", (double)need);
}

static void item_json(sp_json_t *j, sp_item_t *it, int rank)
{
	int st = atomic_load(&it->state);
	sp_json_begin_object(j);
	sp_json_kv_str(j, "item", it->path);
	sp_json_kv_str(j, "status", state_name(st));
	if (rank >= 0)
		sp_json_kv_int(j, "rank", rank);
	if (st == IT_FAILED || st == IT_CANCELLED)
		sp_json_kv_str(j, "error", it->status.err.msg);
	if (st == IT_OK || st == IT_FAILED || st == IT_CANCELLED)
		sp_json_kv_num(j, "seconds", it->seconds);
	for (size_t k = 0; k < it->nreport; k++)
		sp_json_kv_num(j, it->report[k].key, it->report[k].value);
	sp_json_end_object(j);
}

/* The per-item figures: every item of this shard, or (handled_only: MPI
 * ranks) only the items this rank handled, with its rank. */
static char *items_json(struct sp_batch *b, int handled_only)
{
	sp_json_t *j = sp_json_new();
	char *out = NULL;
	if (j == NULL)
		return NULL;
	sp_json_begin_array(j);
	for (size_t i = 0; i < b->nitems; i++) {
		int st = atomic_load(&b->state[i].state);
		if (st == IT_OTHER_SHARD || (handled_only && st == IT_PENDING))
			continue;
		item_json(j, &b->state[i], handled_only ? sp_cluster_rank() : -1);
	}
	sp_json_end_array(j);
	if (sp_json_text(j) != NULL)
		out = strdup(sp_json_text(j));
	sp_json_free(&j);
	return out;
}

static void free_parts(char **p, int n)
{
	for (int r = 0; p != NULL && r < n; r++)
		free(p[r]);
	free(p);
}

/* Rank 0's view of a batch over MPI ranks: every item's final state (each
 * item was handled by one rank; the others still have it pending), the
 * counts, one items_detail array, per-stage figures of every rank and the
 * "cluster" object of the report.  Every rank calls it (collectives); the
 * counts are the batch's on every rank, so every rank exits alike. */
static int merge_ranks(struct sp_batch *b, sp_run_result_t *res)
{
	size_t n = b->nitems;
	int nr = sp_cluster_size(), me = sp_cluster_rank();
	int *st = calloc(n ? 2 * n : 1, sizeof *st), *who = st + n;
	double *sec = calloc(n ? n : 1, sizeof *sec);
	double *t0 = calloc(2 * (size_t)nr, sizeof *t0), *rtt = t0 + nr;
	char *mine = items_json(b, 1), *lines = sp_runtime_stage_lines();
	char **parts = NULL, **stages = NULL, **hosts = NULL;
	if (st == NULL || sec == NULL || t0 == NULL || mine == NULL || lines == NULL) {
		/* the collectives must still happen on every rank: MPI has no
		 * way to leave some out, so running out of memory here ends the job */
		fprintf(stderr, "starpipe: rank %d: out of memory merging the batch\n", me);
		abort();
	}
	for (size_t i = 0; i < n; i++) {
		int s = atomic_load(&b->state[i].state);
		st[i] = s;
		who[i] = s == IT_PENDING || s == IT_OTHER_SHARD ? -1 : me;
		sec[i] = s == IT_OK || s == IT_FAILED || s == IT_CANCELLED ? b->state[i].seconds : 0.0;
	}
	t0[me] = sp_runtime_t0_wall();
	rtt[me] = sp_dispatch_mean_request_s();
	sp_cluster_allmax_int(st, 2 * n);
	sp_cluster_allmax_double(sec, n);
	sp_cluster_allmax_double(t0, 2 * (size_t)nr);
	int rc = sp_cluster_gather_str(mine, &parts);
	rc |= sp_cluster_gather_str(lines, &stages);
	rc |= sp_cluster_gather_str(sp_cluster_host(), &hosts);
	if (b->opts->trace) {
		char label[320];
		snprintf(label, sizeof label, "rank %d (%s)", me, sp_cluster_host());
		char *ev = sp_runtime_trace_events(me, label, (t0[me] - t0[0]) * 1e6);
		rc |= sp_cluster_gather_str(ev != NULL ? ev : "[]", &res->trace_events);
		free(ev);
		res->ntrace_events = res->trace_events != NULL ? (size_t)nr : 0;
	}
	for (size_t i = 0; i < n; i++) {
		res->nok += st[i] == IT_OK;
		res->nfailed += st[i] == IT_FAILED;
		res->nskipped += st[i] == IT_SKIPPED;
		res->ncancelled += st[i] == IT_CANCELLED;
		res->nnotrun += st[i] == IT_PENDING;
	}
	if (me == 0 && rc == 0) {
		sp_json_t *j = sp_json_new();
		size_t tl = 1;
		for (int r = 0; r < nr; r++)
			tl += strlen(stages[r]);
		res->stage_lines = malloc(tl);
		if (res->stage_lines != NULL) {
			res->stage_lines[0] = '\0';
			for (int r = 0; r < nr; r++)
				strcat(res->stage_lines, stages[r]);
		}
		/* items_detail: the ranks' items, then those no rank started */
		sp_json_begin_array(j);
		for (int r = 0; r < nr; r++)
			sp_json_raw_elements(j, parts[r]);
		for (size_t i = 0; i < n; i++)
			if (st[i] == IT_PENDING)
				item_json(j, &b->state[i], -1);
		sp_json_end_array(j);
		if (sp_json_text(j) != NULL)
			res->items_json = strdup(sp_json_text(j));
		sp_json_free(&j);
		/* the cluster object: ranks, what each did, the slowest items */
		j = sp_json_new();
		sp_json_begin_object(j);
		sp_json_kv_int(j, "ranks", nr);
		sp_json_kv_num(j, "dispatch_answer_mean_us", 1e6 * sp_dispatch_mean_answer_s());
		sp_json_key(j, "per_rank");
		sp_json_begin_array(j);
		for (int r = 0; r < nr; r++) {
			size_t k[5] = { 0 };
			for (size_t i = 0; i < n; i++)
				if (who[i] == r) {
					k[0]++;
					k[1] += st[i] == IT_OK;
					k[2] += st[i] == IT_FAILED;
					k[3] += st[i] == IT_SKIPPED;
					k[4] += st[i] == IT_CANCELLED;
				}
			sp_json_begin_object(j);
			sp_json_kv_int(j, "rank", r);
			sp_json_kv_str(j, "host", hosts[r]);
			sp_json_kv_int(j, "items", (long long)k[0]);
			sp_json_kv_int(j, "ok", (long long)k[1]);
			sp_json_kv_int(j, "failed", (long long)k[2]);
			sp_json_kv_int(j, "skipped", (long long)k[3]);
			sp_json_kv_int(j, "cancelled", (long long)k[4]);
			if (r > 0)
				sp_json_kv_num(j, "request_roundtrip_mean_us", 1e6 * rtt[r]);
			sp_json_end_object(j);
		}
		sp_json_end_array(j);
		sp_json_key(j, "slowest_items");
		sp_json_begin_array(j);
		for (int top = 0; top < 10; top++) {
			size_t best = SIZE_MAX;
			for (size_t i = 0; i < n; i++)
				if (sec[i] > 0 && (best == SIZE_MAX || sec[i] > sec[best]))
					best = i;
			if (best == SIZE_MAX)
				break;
			sp_json_begin_object(j);
			sp_json_kv_str(j, "item", b->state[best].path);
			sp_json_kv_int(j, "rank", who[best]);
			sp_json_kv_num(j, "seconds", sec[best]);
			sp_json_end_object(j);
			sec[best] = 0;
		}
		sp_json_end_array(j);
		sp_json_end_object(j);
		if (sp_json_text(j) != NULL)
			res->cluster_json = strdup(sp_json_text(j));
		sp_json_free(&j);
	}
	free_parts(parts, me == 0 ? nr : 0);
	free_parts(stages, me == 0 ? nr : 0);
	free_parts(hosts, me == 0 ? nr : 0);
	free(mine);
	free(lines);
	free(st);
	free(sec);
	free(t0);
	return rc;
}

/* The journal's file: FILE, or FILE.rankR for rank R of an MPI batch (rank 0
 * appends them all to FILE at the end). */
static void journal_part(const char *journal, int rank, char *buf, size_t size)
{
	snprintf(buf, size, "%s.rank%d", journal, rank);
}

/* Appends the ranks' parts to the journal; 0, or -1 when one could not be
 * merged (it is kept, and said so). */
static int merge_journals(const char *journal, int nranks)
{
	sp_err_t err = { 0 };
	int out = sp_open_append(journal, "the journal", &err), rc = 0;
	if (out < 0) {
		fprintf(stderr, "starpipe: %s; the ranks' parts are kept\n", err.msg);
		return -1;
	}
	for (int r = 0; r < nranks; r++) {
		char part[PATH_MAX + 32];
		journal_part(journal, r, part, sizeof part);
		FILE *in = fopen(part, "re");
		if (in == NULL)
			continue;
		/* one part at a time, whole: a part is a few lines per item */
		char *text = NULL;
		size_t len = 0, got;
		FILE *mem = open_memstream(&text, &len);
		char buf[65536];
		int ok = mem != NULL;
		while (ok && (got = fread(buf, 1, sizeof buf, in)) > 0)
			ok = fwrite(buf, 1, got, mem) == got;
		ok = ok && !ferror(in);
		fclose(in);
		if (mem != NULL && fclose(mem) != 0)
			ok = 0;
		int e = ok ? 0 : EIO;
		if (ok && len > 0 && sp_append_record(out, text, len) != 0) {
			e = errno;
			ok = 0;
		}
		free(text);
		if (ok) {
			unlink(part); /* merged: the part goes */
		} else {
			fprintf(stderr, "starpipe: %s: could not merge %s (%s); it is kept\n", journal,
				part, strerror(e));
			rc = -1;
		}
	}
	if (close(out) != 0)
		rc = -1;
	return rc;
}

void sp_run_result_free(sp_run_result_t *res)
{
	free(res->items_json);
	free(res->stage_lines);
	free(res->cluster_json);
	free_parts(res->trace_events, (int)res->ntrace_events);
	res->items_json = res->stage_lines = res->cluster_json = NULL;
	res->trace_events = NULL;
	res->ntrace_events = 0;
}

static void free_ctxs(sp_item_t *it)
{
	struct sp_ctxnode *n = it->ctxs;
	while (n != NULL) {
		struct sp_ctxnode *next = n->next;
		free(n);
		n = next;
	}
	it->ctxs = NULL;
}

/* Frees the batch-wide values (their tasks are done), consumers first. */
static void free_shared(struct sp_batch *b)
{
	for (size_t v = b->shared_values != NULL ? value_slot(b->g, b->g->nstages, 0) : 0; v-- > 0;)
		if (b->shared_values[v] != NULL && b->shared_values[v]->free_cb != NULL)
			b->shared_values[v]->free_cb(b->shared_values[v]);
	free(b->shared_values);
	free(b->shared_ran);
	free(b->batch_wide);
	free_ctxs(&b->shared);
	starpu_pthread_mutex_destroy(&b->shared.lock);
	starpu_pthread_mutex_destroy(&b->shared_lock);
}

int sp_run(const sp_graph_t *g, char *const *items, size_t nitems, const sp_run_opts_t *opts,
	   sp_run_result_t *res)
{
	struct sp_batch b = { .g = g, .items = items, .nitems = nitems, .opts = opts };
	/* Two items keep a CPU node busy (one reads or writes while the other
	 * computes).  A GPU finishes an item's tasks long before its CPU-only
	 * stages (reads, training, picking, writes) are done: four more items
	 * per GPU keep it fed (doc/scheduling.md: APPLE on the H200 node,
	 * simulated, 1.12 s with 3 in flight, 0.71 s with 6). */
	size_t nthreads = opts->inflight ? opts->inflight : 2 + 4 * sp_runtime_ncuda_workers();
	if (nthreads > 64)
		nthreads = 64;
	starpu_pthread_t th[64];
	size_t started = 0;

	memset(res, 0, sizeof *res);
	b.state = calloc(nitems ? nitems : 1, sizeof *b.state);
	if (b.state == NULL)
		return SP_ENOMEM;
	char ***outs = calloc(nitems ? nitems : 1, sizeof *outs);
	size_t *nouts = calloc(nitems ? nitems : 1, sizeof *nouts);
	int rc = 0;
	if (outs == NULL || nouts == NULL)
		rc = sp_seterr(&res->err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	for (size_t i = 0; i < nitems; i++) {
		b.state[i].g = g;
		b.state[i].path = items[i];
		b.state[i].index = i;
		starpu_pthread_mutex_init(&b.state[i].lock, NULL);
		if (rc == 0 && plan_outputs(g, items[i], i, &outs[i], &nouts[i]) != 0)
			rc = sp_seterr(&res->err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	}
	if (rc == 0)
		rc = check_collisions(items, outs, nouts, nitems, &res->err);
	for (size_t s = 0; rc == 0 && s < g->nstages; s++)
		if (g->stages[s].where == SP_IMPL_CUDA && sp_runtime_ncuda_workers() == 0)
			rc = sp_seterr(&res->err, SP_EINVAL,
				       "%s:%d: stage '%s' says 'where: cuda' but this run has no CUDA "
				       "worker (no GPU found, or ncuda is 0)",
				       g->file, g->stages[s].loc.line, g->stages[s].name);
	for (size_t i = 0; i < nitems; i++) {
		b.state[i].outputs = outs != NULL ? outs[i] : NULL;
		b.state[i].noutputs = nouts != NULL ? nouts[i] : 0;
	}
	free(outs);
	free(nouts);
	b.batch_wide = calloc(g->nstages ? g->nstages : 1, 1);
	b.shared_ran = calloc(g->nstages ? g->nstages : 1, 1);
	b.shared_values = calloc(value_slot(g, g->nstages, 0) + 1, sizeof *b.shared_values);
	if (rc == 0 && (b.batch_wide == NULL || b.shared_ran == NULL || b.shared_values == NULL))
		rc = sp_seterr(&res->err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	if (b.batch_wide != NULL)
		sp_graph_batch_wide(g, b.batch_wide);
	b.shared.g = g;
	b.shared.path = "";
	starpu_pthread_mutex_init(&b.shared.lock, NULL);
	starpu_pthread_mutex_init(&b.shared_lock, NULL);
	b.lazy_plan = sp_cluster_size() > 1;
	char jpart[PATH_MAX + 32];
	const char *jpath = opts->journal;
	if (jpath != NULL && b.lazy_plan) {
		journal_part(opts->journal, sp_cluster_rank(), jpart, sizeof jpart);
		jpath = jpart;
	}
	/* The journal is checked as the outputs are, before any item runs: a
	 * symlink, a FIFO (which would block the open forever), a device or a
	 * folder is refused.  Under MPI, rank 0 also checks the file the parts
	 * are merged into. */
	b.journal_fd = -1;
	b.journal_path = jpath;
	if (rc == 0 && jpath != NULL) {
		b.journal_fd = sp_open_append(jpath, "the journal", &res->err);
		if (b.journal_fd < 0)
			rc = res->err.code;
	}
	if (rc == 0 && jpath != NULL && b.lazy_plan && sp_cluster_rank() == 0) {
		int fd = sp_open_append(opts->journal, "the journal", &res->err);
		if (fd < 0)
			rc = res->err.code;
		else
			close(fd);
	}
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
		if (b.journal_fd >= 0)
			close(b.journal_fd);
		for (size_t i = 0; i < nitems; i++) {
			free_strv(b.state[i].outputs, b.state[i].noutputs);
			starpu_pthread_mutex_destroy(&b.state[i].lock);
		}
		free(b.state);
		free_shared(&b);
		return rc == SP_ENOMEM ? rc : SP_EINVAL;
	}
	starpu_pthread_mutex_init(&b.journal_lock, NULL);
	size_t nmine = nitems;
	if (opts->shard_k > 0)
		for (size_t i = 0; i < nitems; i++)
			if (i % opts->shard_k != opts->shard_i) {
				atomic_store(&b.state[i].state, IT_OTHER_SHARD);
				nmine--;
			}
	sp_runtime_items(nmine);
	clean_stale(&b);
	for (size_t i = 0; !b.lazy_plan && i < nitems; i++)
		if (atomic_load(&b.state[i].state) == IT_PENDING)
			plan_item(&b, &b.state[i]);
	if ((rc = sp_dispatch_start(nitems, want_item, &b, batch_stopped, &res->err)) != 0) {
		/* only when the dispatcher thread cannot start: end the job */
		fprintf(stderr, "starpipe: %s\n", res->err.msg);
		abort();
	}
	starpu_pthread_mutex_lock(&cur_lock);
	cur_batch = &b;
	starpu_pthread_mutex_unlock(&cur_lock);
	if (nthreads > nitems)
		nthreads = nitems;
	if (nthreads > 64)
		nthreads = 64;
	for (size_t t = 0; t < nthreads; t++)
		if (starpu_pthread_create(&th[t], NULL, driver_main, &b) == 0)
			started++;
	if (started == 0)
		driver_main(&b);
	for (size_t t = 0; t < started; t++)
		starpu_pthread_join(th[t], NULL);
	sp_dispatch_end();
	starpu_task_wait_for_all();
	starpu_pthread_mutex_lock(&cur_lock);
	cur_batch = NULL;
	starpu_pthread_mutex_unlock(&cur_lock);
	if (b.journal_fd >= 0) {
		if (close(b.journal_fd) != 0 && !b.journal_failed) {
			fprintf(stderr, "starpipe: %s: cannot write the journal: %s\n", b.journal_path,
				strerror(errno));
			b.journal_failed = 1;
		}
		b.journal_fd = -1;
	}

	res->signal = atomic_load(&stop_signal);
	res->journal_failed = b.journal_failed;
	if (b.lazy_plan) {
		merge_ranks(&b, res);
		if (opts->journal != NULL && sp_cluster_rank() == 0 &&
		    merge_journals(opts->journal, sp_cluster_size()) != 0)
			res->journal_failed = 1;
		/* every rank exits with the batch's status */
		sp_cluster_allmax_int(&res->journal_failed, 1);
	} else {
		res->nok = atomic_load(&b.nok);
		res->nfailed = atomic_load(&b.nfailed);
		res->nskipped = atomic_load(&b.nskipped);
		res->ncancelled = atomic_load(&b.ncancelled);
		for (size_t i = 0; i < nitems; i++)
			if (atomic_load(&b.state[i].state) == IT_PENDING)
				res->nnotrun++;
		res->items_json = items_json(&b, 0);
	}
	for (size_t i = 0; i < nitems; i++) {
		free_ctxs(&b.state[i]);
		free_strv(b.state[i].outputs, b.state[i].noutputs);
		starpu_pthread_mutex_destroy(&b.state[i].lock);
	}
	free(b.state);
	free_shared(&b);
	starpu_pthread_mutex_destroy(&b.journal_lock);
	return res->nfailed || res->nnotrun || res->ncancelled ? SP_ECANCELED : 0;
}
