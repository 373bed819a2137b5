/* Batch-wide stages: run once per distinct value, shared by the items that use it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"
#include "runtime.h"

/*
 * DESIGN: a batch-wide stage (sp_graph_batch_wide(): its parameters and
 * inputs do not depend on the item, as DESI's PSF) runs once for every
 * distinct value of its parameters among the items' graphs (a manifest's
 * columns give items their own), and the items with that value borrow its
 * outputs.  A value is an entry keyed by the stage's expanded parameter
 * texts and its inputs' entries.  An entry is run by the first item that
 * reaches it, under the batch's shared lock; it is freed when no item of
 * the batch needs it any more (its users, counted when the batch is
 * planned), or, while later items still need it, when more than
 * SP_SHARED_IDLE entries are held by no item in flight (the one idle
 * longest goes first, and runs again if an item needs it later): memory
 * is bounded by the items in flight, not by the batch.  MPI ranks do not
 * know which items they will be handed, so they free by the bound alone.
 */

/* Entries kept with no item in flight using them: 30 cameras' PSFs of a
 * DESI exposure stay between exposures of a night; more are read again.
 * STARPIPE_SHARED_IDLE overrides it (tests, memory-tight runs). */
#define SP_SHARED_IDLE 32
static size_t idle_cap(void)
{
	const char *e = getenv("STARPIPE_SHARED_IDLE");
	char *end;
	long v = e != NULL ? strtol(e, &end, 10) : -1;
	return e != NULL && *e != '\0' && *end == '\0' && v >= 0 ? (size_t)v : SP_SHARED_IDLE;
}

struct sp_shared {
	size_t stage;
	char *key;
	sp_item_t it;        /* the pseudo-item that ran it: its status, its contexts */
	sp_value_t **values; /* [outputs of the stage] */
	int ran;             /* values made (or it failed: it.status) */
	size_t users;        /* items planned here that have not released it */
	size_t holders;      /* items in flight that ran or borrowed it, and entries made from it */
	unsigned long idle_since; /* b->shared_clock when holders fell to 0 */
	struct sp_shared *inputs[16]; /* the batch-wide entries it reads */
	size_t ninputs;
	struct sp_shared *next;
};

static size_t nouts(const sp_gstage_t *st)
{
	return st->kind->noutputs ? st->kind->noutputs : 1;
}

/* Frees e's values (their readers are done: every item that held it has
 * released it); its inputs lose a holder.  The entry stays, not run. */
static void drop_values(struct sp_batch *b, struct sp_shared *e);

static void unhold(struct sp_batch *b, struct sp_shared *e)
{
	if (--e->holders == 0)
		e->idle_since = ++b->shared_clock;
}

static void drop_values(struct sp_batch *b, struct sp_shared *e)
{
	const sp_gstage_t *st = &b->g->stages[e->stage];
	for (size_t p = nouts(st); p-- > 0;)
		if (e->values[p] != NULL && e->values[p]->free_cb != NULL)
			e->values[p]->free_cb(e->values[p]);
	memset(e->values, 0, nouts(st) * sizeof *e->values);
	sp__item_free_ctxs(&e->it);
	if (e->ran)
		for (size_t k = 0; k < e->ninputs; k++)
			unhold(b, e->inputs[k]);
	e->ran = 0;
}

/* The entry of stage s for item it (of graph it->g) whose earlier
 * batch-wide stages have the entries in[]: found, or made.  Its key is the
 * stage's parameters expanded for the item (${item.dir}, ${header.KEY}).
 * NULL when out of memory, or with it's status set when a parameter cannot
 * be expanded for it (a header keyword missing) or an input's entry is
 * missing: that item fails alone. */
static struct sp_shared *entry_for(struct sp_batch *b, sp_item_t *it, size_t s,
				   struct sp_shared *const *in)
{
	const sp_graph_t *ig = it->g;
	const sp_gstage_t *st = &ig->stages[s];
	for (size_t p = 0; p < st->kind->ninputs; p++)
		if (in[st->inputs[p].stage] == NULL)
			return NULL;
	size_t len = 32;
	char **txt = calloc(st->kind->nparams + 1, sizeof *txt);
	if (txt == NULL)
		return NULL;
	for (size_t p = 0; p < st->kind->nparams; p++) {
		if ((txt[p] = sp_item_param(it, st, st->kind->params[p].name)) == NULL) {
			sp__free_strv(txt, p);
			return NULL;
		}
		len += strlen(txt[p]) + 1;
	}
	len += 24 * st->kind->ninputs;
	char *key = malloc(len), *o = key;
	if (key != NULL) {
		o += sprintf(o, "%zu", s);
		for (size_t p = 0; p < st->kind->nparams; p++)
			o += sprintf(o, "\x1f%s", txt[p]);
		for (size_t p = 0; p < st->kind->ninputs; p++)
			o += sprintf(o, "\x1f%p", (void *)in[st->inputs[p].stage]);
	}
	sp__free_strv(txt, st->kind->nparams);
	if (key == NULL)
		return NULL;
	for (struct sp_shared *e = b->shared_list; e != NULL; e = e->next)
		if (e->stage == s && strcmp(e->key, key) == 0) {
			free(key);
			return e;
		}
	struct sp_shared *e = calloc(1, sizeof *e);
	if (e != NULL)
		e->values = calloc(nouts(st), sizeof *e->values);
	if (e == NULL || e->values == NULL || st->kind->ninputs > 16) {
		if (e != NULL)
			free(e->values);
		free(e);
		free(key);
		return NULL;
	}
	e->stage = s;
	e->key = key;
	for (size_t p = 0; p < st->kind->ninputs; p++)
		e->inputs[e->ninputs++] = in[st->inputs[p].stage];
	e->it.lane = -1; /* batch-wide stages run in the GPU lane */
	e->it.path = "";
	starpu_pthread_mutex_init(&e->it.lock, NULL);
	e->next = b->shared_list;
	b->shared_list = e;
	b->shared_values_n[s]++;
	return e;
}

int sp__shared_plan(struct sp_batch *b)
{
	const sp_graph_t *g = b->g;
	const size_t ns = g->nstages;
	b->batch_wide = calloc(ns ? ns : 1, 1);
	b->shared_runs = calloc(ns ? ns : 1, sizeof *b->shared_runs);
	b->shared_values_n = calloc(ns ? ns : 1, sizeof *b->shared_values_n);
	unsigned char *w = calloc(ns ? ns : 1, 1);
	if (b->batch_wide == NULL || w == NULL || b->shared_runs == NULL || b->shared_values_n == NULL) {
		free(w);
		return SP_ENOMEM;
	}
	/* batch-wide in every item's graph (a column's value may hold ${stem}) */
	sp_graph_batch_wide(g, b->batch_wide);
	const sp_graph_t *last = g;
	for (size_t i = 0; i < b->nitems; i++) {
		const sp_graph_t *ig = b->state[i].g;
		if (ig == last)
			continue;
		last = ig;
		sp_graph_batch_wide(ig, w);
		for (size_t s = 0; s < ns; s++)
			b->batch_wide[s] &= w[s];
	}
	free(w);
	int any = 0;
	for (size_t s = 0; s < ns; s++)
		any |= b->batch_wide[s];
	if (!any)
		return 0;
	b->shared_counted = !b->lazy_plan;
	for (size_t i = 0; i < b->nitems; i++) {
		sp_item_t *it = &b->state[i];
		if (atomic_load(&it->state) == IT_OTHER_SHARD)
			continue;
		it->shared = calloc(ns, sizeof *it->shared);
		if (it->shared == NULL)
			return SP_ENOMEM;
		for (size_t s = 0; s < ns; s++) {
			if (!b->batch_wide[s])
				continue;
			if ((it->shared[s] = entry_for(b, it, s, it->shared)) == NULL) {
				if (!sp_status_failed(&it->status))
					return SP_ENOMEM;
				continue; /* it fails alone: sp__shared_run() */
			}
			it->shared[s]->users++;
		}
	}
	return 0;
}

void sp__shared_run(struct sp_batch *b, sp_item_t *item, size_t s, sp_value_t *const *in,
		    sp_value_t **out)
{
	const sp_gstage_t *st = &item->g->stages[s];
	struct sp_shared *e = item->shared != NULL ? item->shared[s] : NULL;
	if (e == NULL) { /* planned for every item that runs */
		sp_status_set(&item->status, SP_ENOMEM, "%s: stage '%s': out of memory",
			      item->path, st->name);
		return;
	}
	starpu_pthread_mutex_lock(&b->shared_lock);
	if (!e->ran) {
		e->ran = 1;
		for (size_t k = 0; k < e->ninputs; k++)
			e->inputs[k]->holders++;
		memset(&e->it.status, 0, sizeof e->it.status);
		e->it.g = item->g;
		e->it.path = item->path; /* its expansions are the key's: item is a user */
		int ret = st->kind->run(&e->it, st, in, e->values);
		if (ret != 0)
			sp_status_set(&e->it.status, ret, "stage '%s': %s", st->name, sp_strerror(ret));
		b->shared_runs[s]++;
		if (b->opts->verbose) {
			if (b->shared_values_n[s] == 1 && b->shared_runs[s] == 1)
				fprintf(stderr, "[starpipe] stage '%s' ran once for the batch\n", st->name);
			else
				fprintf(stderr, "[starpipe] stage '%s' ran for %s (run %u; %u value(s) in the batch)\n",
					st->name, item->path, b->shared_runs[s], b->shared_values_n[s]);
		}
	}
	e->holders++;
	item->shared_held |= 1ull << (s < 63 ? s : 63);
	starpu_pthread_mutex_unlock(&b->shared_lock);
	for (size_t p = 0; p < nouts(st); p++)
		out[p] = e->values[p];
	if (sp_status_failed(&e->it.status))
		sp_status_set_err(&item->status, &e->it.status.err);
}

/* More than SP_SHARED_IDLE entries made and held by nobody: the oldest idle goes. */
static void evict_idle(struct sp_batch *b)
{
	const size_t cap = idle_cap();
	for (;;) {
		size_t nidle = 0;
		struct sp_shared *old = NULL;
		for (struct sp_shared *e = b->shared_list; e != NULL; e = e->next)
			if (e->ran && e->holders == 0) {
				nidle++;
				if (old == NULL || e->idle_since < old->idle_since)
					old = e;
			}
		if (nidle <= cap || old == NULL)
			return;
		drop_values(b, old);
	}
}

void sp__shared_release(struct sp_batch *b, sp_item_t *item, int ran)
{
	if (item->shared == NULL)
		return;
	const size_t ns = b->g->nstages;
	starpu_pthread_mutex_lock(&b->shared_lock);
	for (size_t s = ns; s-- > 0;) { /* consumers first */
		struct sp_shared *e = item->shared[s];
		if (e == NULL)
			continue;
		const int held = ran && (item->shared_held & (1ull << (s < 63 ? s : 63)));
		/* a failure of its tasks (a PSF that would not read) fails every
		 * item that used it: those tasks are done now */
		if (held && sp_status_failed(&e->it.status))
			sp_status_set_err(&item->status, &e->it.status.err);
		if (held)
			unhold(b, e);
		if (b->shared_counted && e->users > 0 && --e->users == 0 && e->ran && e->holders == 0)
			drop_values(b, e);
	}
	evict_idle(b);
	starpu_pthread_mutex_unlock(&b->shared_lock);
	free(item->shared);
	item->shared = NULL;
	item->shared_held = 0;
}

void sp__shared_free(struct sp_batch *b)
{
	/* consumers before producers: later stages first */
	for (size_t s = b->g->nstages; s-- > 0;)
		for (struct sp_shared *e = b->shared_list; e != NULL; e = e->next)
			if (e->stage == s && e->ran)
				drop_values(b, e);
	while (b->shared_list != NULL) {
		struct sp_shared *e = b->shared_list;
		b->shared_list = e->next;
		starpu_pthread_mutex_destroy(&e->it.lock);
		free(e->values);
		free(e->key);
		free(e);
	}
	for (size_t i = 0; i < b->nitems && b->state != NULL; i++) {
		free(b->state[i].shared);
		b->state[i].shared = NULL;
	}
	/* the report's count: runs and distinct values of each batch-wide stage */
	for (size_t s = 0; b->batch_wide != NULL && s < b->g->nstages; s++)
		if (b->batch_wide[s] && b->shared_runs[s] > 0)
			sp_runtime_shared_stage(b->g->stages[s].name, b->shared_runs[s],
						b->shared_values_n[s]);
	free(b->shared_runs);
	free(b->shared_values_n);
	free(b->batch_wide);
	b->shared_runs = b->shared_values_n = NULL;
	b->batch_wide = NULL;
}
