/* starpipe run: the batch's items, its plan, the StarPU session, the run and its reports. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cluster.h"
#include "run.h"
#include "lanes.h"
#include "runtime.h"
#include "sched_hp.h"

/*
 * DESIGN: cmd_run is a sequence of steps, each returning 0 or the exit
 * status that ends the command: the items (given, or the graph's inputs:),
 * the plan (collisions over the whole batch, the shard), the session's
 * configuration (command line over the graph's runtime: section over the
 * defaults, all typed), the run, and what it writes.  Under MPI every rank
 * runs every step (the batch's collectives need them all); what concerns
 * the batch is said by rank 0 (cli_say).
 */

/* --tile STAGE=N: a stage's `tile:` from the command line (starpipe tune varies it). */
int cli_apply_tiles(const struct cli *c, sp_graph_t *g)
{
	for (size_t i = 0; i < c->ntiles; i++) {
		const char *eq = strchr(c->tiles[i], '=');
		size_t nlen = (size_t)(eq - c->tiles[i]);
		sp_gstage_t *st = NULL;
		for (size_t k = 0; k < g->nstages && st == NULL; k++)
			if (strlen(g->stages[k].name) == nlen &&
			    strncmp(g->stages[k].name, c->tiles[i], nlen) == 0)
				st = &g->stages[k];
		char *end;
		long n = strtol(eq + 1, &end, 10);
		if (st == NULL)
			return cli_usage_error("--tile %s: the graph has no such stage", c->tiles[i]);
		if (st->kind->tile == NULL)
			return cli_usage_error("--tile %s: the stage's kind runs as one task per item "
					       "(starpipe list shows the kinds that tile)", c->tiles[i]);
		if (eq[1] == '\0' || *end != '\0' || n < 0 || n > 100000000)
			return cli_usage_error("--tile %s: expects an integer in [0, 100000000]",
					       c->tiles[i]);
		st->tile = (int)n;
	}
	return 0;
}

void cli_apply_manifest(const struct cli *c, sp_graph_t *g)
{
	if (c->manifest == NULL)
		return;
	for (size_t i = 0; i < g->nitems_spec; i++)
		free(g->items_spec[i]);
	free(g->items_spec);
	g->items_spec = calloc(1, sizeof *g->items_spec);
	if (g->items_spec == NULL || (g->items_spec[0] = strdup(c->manifest)) == NULL) {
		fprintf(stderr, "starpipe: out of memory\n");
		exit(1);
	}
	g->nitems_spec = 1;
	g->items_kind = SP_ITEMS_MANIFEST;
}

void cli_items_free(struct items *it)
{
	for (size_t i = 0; it->v != NULL && i < it->n; i++)
		free(it->v[i]);
	free(it->v);
	it->v = NULL;
	it->n = 0;
	for (size_t k = 0; k < it->nvariants; k++)
		sp_graph_free(&it->variants[k]);
	free(it->variants);
	free(it->graphs);
	sp_item_table_free(&it->tab);
}

/* A row's values as one string, to find the rows that share a graph. */
static char *row_key(const sp_item_table_t *t, size_t r)
{
	size_t len = 1;
	for (size_t c = 0; c < t->ncols; c++)
		len += (t->vals[r * t->ncols + c] ? strlen(t->vals[r * t->ncols + c]) : 0) + 2;
	char *k = malloc(len), *o = k;
	if (k == NULL)
		return NULL;
	*o = '\0';
	for (size_t c = 0; c < t->ncols; c++)
		o += sprintf(o, "%c%s\x1f", t->vals[r * t->ncols + c] ? '=' : '-',
			     t->vals[r * t->ncols + c] ? t->vals[r * t->ncols + c] : "");
	return k;
}

static const char *const *sort_keys;
static int cmp_key(const void *a, const void *b)
{
	return strcmp(sort_keys[*(const size_t *)a], sort_keys[*(const size_t *)b]);
}

/* The graph of every distinct row of it->tab (g's, with the row's values:
 * sp_graph_variant(), --tile applied), and each item's: the row that lists
 * it or its folder.  A row whose values the graph refuses ends the command
 * before anything runs (exit 2).  Rows with every field empty are g's. */
static int item_graphs(const struct cli *c, const sp_graph_t *g, struct items *it)
{
	const sp_item_table_t *t = &it->tab;
	if (t->ncols == 0)
		return 0;
	char **keys = calloc(t->nrows, sizeof *keys);
	size_t *ord = calloc(t->nrows, sizeof *ord), *var = calloc(t->nrows, sizeof *var);
	it->variants = calloc(t->nrows, sizeof *it->variants);
	it->graphs = calloc(it->n ? it->n : 1, sizeof *it->graphs);
	int status = 0;
	if (keys == NULL || ord == NULL || var == NULL || it->variants == NULL || it->graphs == NULL)
		status = 1;
	for (size_t r = 0; status == 0 && r < t->nrows; r++)
		if ((keys[r] = row_key(t, r)) == NULL)
			status = 1;
	if (status != 0)
		fprintf(stderr, "starpipe: out of memory\n");
	for (size_t r = 0; status == 0 && r < t->nrows; r++)
		ord[r] = r;
	if (status == 0) {
		sort_keys = (const char *const *)keys;
		qsort(ord, t->nrows, sizeof *ord, cmp_key);
		sort_keys = NULL;
	}
	/* rows in key order: a new key loads its graph, from its first row */
	for (size_t k = 0; status == 0 && k < t->nrows; k++) {
		size_t r = ord[k];
		if (k > 0 && strcmp(keys[r], keys[ord[k - 1]]) == 0) {
			var[r] = var[ord[k - 1]];
			continue;
		}
		size_t first = r;
		for (size_t j = k + 1; j < t->nrows && strcmp(keys[ord[j]], keys[r]) == 0; j++)
			first = ord[j] < first ? ord[j] : first;
		int any = 0;
		for (size_t col = 0; col < t->ncols; col++)
			any |= t->vals[first * t->ncols + col] != NULL;
		var[r] = SIZE_MAX; /* g's own */
		if (!any)
			continue;
		sp_err_t err = { 0 };
		sp_graph_t *v = NULL;
		if (sp_graph_variant(g, t, first, &v, &err) != 0) {
			cli_say("%s", err.msg);
			status = EXIT_USAGE;
		} else if ((status = cli_apply_tiles(c, v)) != 0) {
			sp_graph_free(&v);
		} else {
			var[r] = it->nvariants;
			it->variants[it->nvariants++] = v;
		}
	}
	for (size_t i = 0; status == 0 && i < it->n; i++) {
		size_t r = sp_item_table_find(t, it->v[i]);
		it->graphs[i] = r != SIZE_MAX && var[r] != SIZE_MAX ? it->variants[var[r]] : NULL;
	}
	for (size_t r = 0; keys != NULL && r < t->nrows; r++)
		free(keys[r]);
	free(keys);
	free(ord);
	free(var);
	return status;
}

/* An MPI rank takes rank 0's table, as it takes its items. */
static int bcast_table(struct items *it, int *status)
{
	char **v = NULL;
	size_t n = 0;
	if (sp_cluster_rank() == 0 && *status == 0 && it->tab.ncols > 0 &&
	    sp_item_table_pack(&it->tab, &v, &n) != 0)
		return SP_ENOMEM;
	if (sp_cluster_bcast_items(&v, &n, status) != 0)
		return SP_ENOMEM;
	int rc = 0;
	if (sp_cluster_rank() != 0 && *status == 0 && n > 0) {
		sp_item_table_free(&it->tab);
		rc = sp_item_table_unpack(v, n, &it->tab);
	}
	for (size_t k = 0; k < n; k++)
		free(v[k]);
	free(v);
	return rc;
}

int cli_check_manifest(const struct cli *c, const sp_graph_t *g)
{
	struct items it = { 0 };
	sp_err_t err = { 0 };
	if (g->items_kind != SP_ITEMS_MANIFEST)
		return 0;
	if (sp_graph_items_table(g, &it.v, &it.n, &it.tab, &err) != 0) {
		/* a manifest not there yet is the run's business, not the graph's */
		if (err.code != SP_EGRAPH) {
			cli_items_free(&it);
			return 0;
		}
		cli_say("%s", err.msg);
		cli_items_free(&it);
		return EXIT_USAGE;
	}
	int status = item_graphs(c, g, &it);
	cli_items_free(&it);
	return status;
}

/* 1 when the command line set the graph's variable `input` (--input, or
 * --set input=). */
static int input_set(const struct cli *c)
{
	for (size_t i = 0; i < c->nvars; i++)
		if (strcmp(c->vars[i].name, "input") == 0)
			return 1;
	return 0;
}

/* The items: those after the graph file, else the graph's inputs: (globs,
 * a manifest), and both when the command line also set `input` (as in
 * `--input a.fits b.fits`: a.fits is --input's, b.fits an item; items
 * alone would leave a.fits unread); folders expanded, a file named twice
 * taken once; MPI ranks take rank 0's list, whatever their own globs saw
 * (files still arriving, a file system's caches): one batch, one indexing. */
static int collect_items(const struct cli *c, const sp_graph_t *g, struct items *it)
{
	sp_err_t err = { 0 };
	int status = 0;
	if ((c->nitems == 0 || input_set(c) || c->manifest != NULL) &&
	    sp_graph_items_table(g, &it->v, &it->n, &it->tab, &err) != 0) {
		cli_say("%s", err.msg);
		status = err.code == SP_ENOENT ? EXIT_NO_INPUT : EXIT_USAGE;
	}
	if (status == 0 && c->nitems > 0) {
		char **v = realloc(it->v, (it->n + c->nitems) * sizeof *v);
		size_t k = 0;
		if (v != NULL)
			for (it->v = v; k < c->nitems; k++, it->n++)
				if ((it->v[it->n] = strdup(c->items[k])) == NULL)
					break;
		if (v == NULL || k < c->nitems) {
			fprintf(stderr, "starpipe: out of memory\n");
			status = 1;
		}
	}
	if (status == 0 && sp_graph_folders(g, &it->v, &it->n, &err) != 0) {
		cli_say("%s", err.msg);
		/* nothing matched: 3; a folder that cannot be read: 2, as a
		 * manifest that cannot be read */
		status = err.code == SP_ENOENT ? EXIT_NO_INPUT : EXIT_USAGE;
	} else if (status == 0 && it->n == 0) {
		cli_say("%s: no work item (give them after the graph file or in its inputs: section)",
			g->file);
		status = EXIT_NO_INPUT;
	}
	/* One file named twice (a folder given twice, a folder and a file in
	 * it) is one item, not an output collision of the file with itself. */
	if (status == 0) {
		char ex[1024];
		size_t nd = sp_graph_dedupe(it->v, &it->n, ex, sizeof ex);
		/* said even under -q: items the user named are not run */
		if (nd > 0)
			cli_say("%zu input(s) named a file already listed (%s); each file is one item",
				nd, ex);
	}
	if (sp_cluster_size() > 1 && (sp_cluster_bcast_items(&it->v, &it->n, &status) != 0 ||
				       bcast_table(it, &status) != 0)) {
		fprintf(stderr, "starpipe: out of memory sharing the batch's items\n");
		sp_cluster_abort(1);
	}
	if (status == 0)
		status = item_graphs(c, g, it);
	return status;
}

/* 1 when the command line named `path` as an item itself (not a glob's,
 * a manifest's or a folder's file). */
static int named_item(const struct cli *c, const char *path)
{
	for (size_t k = 0; k < c->nitems; k++)
		if (strcmp(c->items[k], path) == 0)
			return 1;
	return 0;
}

/* An item that another item's outputs would replace: refused when the
 * command line named it (the user asked for both), dropped when a glob, a
 * manifest or a folder brought it in (a previous run's output in the
 * input folder), and said in one line even under -q. */
static int drop_outputs_of_batch(const struct cli *c, const sp_graph_t *g, struct items *it)
{
	sp_err_t err = { 0 };
	size_t *prod = malloc((it->n ? it->n : 1) * sizeof *prod);
	if (prod == NULL) {
		fprintf(stderr, "starpipe: out of memory\n");
		return 1;
	}
	if (sp_run_plan_inputs(g, (const sp_graph_t *const *)it->graphs, it->v, it->n, prod,
			       &err) != 0) {
		free(prod);
		cli_say("%s", err.msg);
		return EXIT_USAGE;
	}
	int status = 0;
	size_t ndrop = 0, keep = 0;
	for (size_t i = 0; i < it->n && status == 0; i++)
		if (prod[i] != SIZE_MAX && named_item(c, it->v[i])) {
			cli_say("%s is an input, and %s's outputs would replace it; refused before "
				"running (give the outputs another folder or name)",
				it->v[i], it->v[prod[i]]);
			status = EXIT_USAGE;
		}
	char ex_item[512] = "", ex_prod[512] = "";
	for (size_t i = 0; i < it->n && status == 0; i++) {
		if (prod[i] == SIZE_MAX) {
			if (it->graphs != NULL)
				it->graphs[keep] = it->graphs[i];
			it->v[keep++] = it->v[i];
			continue;
		}
		if (ndrop++ == 0) {
			snprintf(ex_item, sizeof ex_item, "%s", it->v[i]);
			snprintf(ex_prod, sizeof ex_prod, "%s", it->v[prod[i]]);
		}
		free(it->v[i]);
	}
	if (status == 0 && ndrop > 0) {
		cli_say("%zu input(s) are this graph's outputs for other items (%s, of %s); not "
			"taken as items", ndrop, ex_item, ex_prod);
		it->n = keep;
		if (it->n == 0) {
			cli_say("%s: no work item left", g->file);
			status = EXIT_NO_INPUT;
		}
	}
	free(prod);
	return status;
}

/* --report, --trace, --figures, --tasks and --journal must not replace (or
 * append to) an input or the graph file: compared as files (device and
 * inode), so a symlink or a hard link is caught too. */
static int check_logs(const struct cli *c, const sp_graph_t *g, const struct items *it)
{
	const struct {
		const char *opt, *path;
	} logs[] = { { "--report", c->report }, { "--trace", c->trace }, { "--figures", c->figures },
		     { "--tasks", c->tasks }, { "--journal", c->journal } };
	for (size_t k = 0; k < sizeof logs / sizeof logs[0]; k++) {
		const char *in = sp_run_path_is_input(g, it->v, it->n, logs[k].path);
		if (in != NULL) {
			cli_say("%s: '%s' is %s %s; refused before running", logs[k].opt,
				logs[k].path, in == g->file ? "the graph file" : "the input",
				in);
			return EXIT_USAGE;
		}
	}
	return 0;
}

/* Output collisions are refused before anything starts, over the whole
 * batch: shards of it must not collide with each other either.  --shard
 * I/K takes items round robin, so each shard gets large and small items
 * alike; items keep their index in the whole batch (${index}). */
int cli_plan_batch(const struct cli *c, const sp_graph_t *g, struct items *it,
		   sp_run_opts_t *ro)
{
	sp_err_t err = { 0 };
	int dropped = drop_outputs_of_batch(c, g, it);
	if (dropped != 0)
		return dropped;
	if (sp_run_plan_check(g, (const sp_graph_t *const *)it->graphs, it->v, it->n, &err) != 0) {
		cli_say("%s", err.msg);
		return EXIT_USAGE;
	}
	int status = check_logs(c, g, it);
	if (status != 0)
		return status;
	if (c->shard_k == 0)
		return 0;
	size_t k = (size_t)c->shard_k, i = (size_t)c->shard_i;
	size_t mine = it->n / k + (i < it->n % k);
	if (mine == 0) {
		cli_say("shard %ld/%ld of %zu item(s) is empty", c->shard_i, c->shard_k, it->n);
		return EXIT_NO_INPUT;
	}
	if (!c->quiet)
		cli_say("shard %ld/%ld: %zu of %zu item(s)", c->shard_i, c->shard_k, mine, it->n);
	ro->shard_i = i;
	ro->shard_k = k;
	return 0;
}

/* GPU workers asked for and no CPU worker: a stage with CPU tasks only
 * (readers, writers) could never run, and StarPU would refuse its first
 * task (ENODEV) mid-batch.  (--ncpus 0 with the default --ncuda is left to
 * the runtime: without a GPU it has no worker at all, exit 4.) */
int cli_check_workers(const sp_graph_t *g, const sp_runtime_params_t *p)
{
	for (size_t k = 0; p->ncpus == 0 && p->ncuda > 0 && k < g->nstages; k++) {
		const sp_gstage_t *st = &g->stages[k];
		unsigned can = st->kind->impl & (st->where ? st->where : SP_IMPL_CPU | SP_IMPL_CUDA);
		if (st->kind->codelets != NULL && st->kind->codelets[0] != '\0' &&
		    !(can & SP_IMPL_CUDA)) {
			cli_say("%s: stage '%s' (%s) runs on CPU workers only, and --ncpus 0 leaves "
				"none: give it at least 1", g->file, st->name, st->kind->name);
			return EXIT_USAGE;
		}
	}
	return 0;
}

/*
 * The node type's models, shared by its nodes (a shared --perfmodel-dir):
 * StarPU rewrites every model it loaded at shutdown when calibrating, each
 * process from its own copy in memory, so ranks of one node type would
 * overwrite each other's samples (its file lock only orders the writes).
 * Under MPI the lowest rank of each node type calibrates and writes; the
 * others run with calibration off (they read the same models, and what they
 * measure is not kept).  Ranks of different types write different files.
 * StarPU also measures the bus at start when the node type's bus files are
 * missing, and writes them: then the writers start StarPU first, the others
 * once they have.  The versions file is rank 0's.
 */
struct models_plan {
	char node_type[256];
	const char *from;
	int writer;        /* the lowest rank of its node type */
	int ordered_start; /* some node type's bus is not measured yet */
};

static void plan_models(const struct cli *c, const sp_runtime_params_t *p, struct models_plan *m)
{
	m->from = sp_runtime_node_type(c->node_type, m->node_type, sizeof m->node_type);
	m->writer = sp_cluster_first_of(m->node_type) == sp_cluster_rank();
	m->ordered_start = !sp_runtime_bus_measured(p->perfmodel_dir, m->node_type);
	sp_cluster_allmax_int(&m->ordered_start, 1);
	if (sp_cluster_size() > 1 && p->calibrate != 0 && !c->quiet)
		cli_say("calibrating over MPI: the lowest rank of each node type measures and writes "
			"its models, the other ranks run with calibration off");
}

/* What the session found of the node type's models: -v says it, and a node
 * type without any calibrated model is said once, by its lowest rank. */
static void say_models(const struct cli *c, const sp_graph_t *g, const sp_runtime_params_t *p,
		       const struct models_plan *m)
{
	sp_runtime_models_seen_t seen;
	char who[320] = "";
	sp_runtime_models_seen(&seen);
	if (!m->writer)
		return;
	if (sp_cluster_size() > 1)
		snprintf(who, sizeof who, "rank %d (%s): ", sp_cluster_rank(), sp_cluster_host());
	if (c->verbose)
		fprintf(stderr, "starpipe: %snode type '%s' (%s): %zu of the graph's %zu codelet(s) "
			"have a calibrated model in %s%s\n", who, seen.node_type, seen.node_type_from,
			seen.ncalibrated, seen.ncodelets, seen.folder,
			seen.calibrate != 0 ? "; this process calibrates and writes them" : "");
	if (p->calibrate == 0 && seen.ncodelets > 0 && seen.ncalibrated == 0 &&
	    sp_runtime_uses_models())
		fprintf(stderr, "starpipe: warning: %snode type '%s' has no calibrated performance "
			"model in %s: the scheduler has no measurement to go by; calibrate with "
			"`starpipe calibrate %s ITEM... --node-type %s --perfmodel-dir %s`\n", who,
			seen.node_type, seen.folder, g->file, seen.node_type, seen.folder);
}

/* The StarPU session's configuration: the typed runtime parameters, the
 * command line's reporting options, and this rank's share of the node's
 * cores when several ranks share it (a test, or a launcher placing one rank
 * per socket). */
static void session_conf(const struct cli *c, const sp_graph_t *g, const sp_runtime_params_t *p,
			 const struct models_plan *m, sp_runtime_conf_t *conf)
{
	memset(conf, 0, sizeof *conf);
	conf->scheduler = p->scheduler;
	conf->graph = g;
	conf->ncpus = (int)p->ncpus;
	conf->ncuda = (int)p->ncuda;
	conf->workers_per_gpu = (int)p->workers_per_gpu;
	conf->lanes = p->lanes;
	conf->pipeline = g->pipeline;
	conf->cpu_lane = (int)p->cpu_lane;
	conf->perfmodel_dir = p->perfmodel_dir;
	conf->calibrate = m->writer ? (int)p->calibrate : 0;
	conf->node_type = m->node_type;
	conf->node_type_from = m->from;
	conf->record_versions = sp_cluster_rank() == 0;
	conf->progress = !c->quiet && sp_cluster_rank() == 0; /* MPI: rank 0's progress only */
#ifdef SP_SIMGRID
	conf->progress = 0; /* its timed waits are real time, not simulated */
	/* A SimGrid StarPU built --with-fxt writes an FxT trace of every run
	 * (~100 MB for a DESI batch) and slows it down: only on request
	 * (STARPU_FXT_TRACE=1, STARPU_FXT_PREFIX=DIR; doc/tuning.md). */
	setenv("STARPU_FXT_TRACE", "0", 0);
#endif
	conf->progress_period = c->progress_every;
	conf->trace = c->trace != NULL || c->tasks != NULL;
	conf->bound = c->figures != NULL;
	int lrank, lsize;
	sp_cluster_local(&lrank, &lsize);
	if (c->core_last >= 0) {
		/* --cores: this process's cores, as asked (ranks with different
		 * devices take different shares: doc/cluster.md) */
		conf->cpu_first = (int)c->core_first;
		conf->cpu_count = (int)(c->core_last - c->core_first + 1);
	} else if (lsize > 1) {
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		if (cores < 1)
			cores = 1;
		if (cores >= lsize) {
			conf->cpu_first = (int)(lrank * cores / lsize);
			conf->cpu_count = (int)((lrank + 1) * cores / lsize) - conf->cpu_first;
		} else {
			conf->cpu_first = lrank % (int)cores;
			conf->cpu_count = 1;
		}
		if (!c->quiet && lrank == 0)
			fprintf(stderr, "starpipe: %d ranks share this node; each binds its CPU workers "
				"to its share of the %ld cores (one rank per node uses them all)\n",
				lsize, cores);
	}
	if (sp_cluster_size() > 1 && !c->quiet)
		cli_say("%d MPI ranks; items handed out by rank 0 as ranks ask", sp_cluster_size());
}

/* The exit status from the batch's counts, each said once. */
static int batch_status(const struct cli *c, int ret, const sp_graph_t *g,
			const sp_run_result_t *res, size_t nitems)
{
	int status = 0;
	if (ret != 0 && ret != SP_ECANCELED) {
		fprintf(stderr, "starpipe: %s: %s\n", g->file,
			ret == SP_ENOMEM ? res->err.msg : sp_strerror(ret));
		status = EXIT_ITEMS_FAILED;
	}
	if (res->nfailed) {
		cli_say("%zu of %zu item(s) failed", res->nfailed, nitems);
		status = EXIT_ITEMS_FAILED;
	}
	if (res->journal_failed) /* said when it happened */
		status = EXIT_ITEMS_FAILED;
	if (res->nskipped && !c->quiet)
		cli_say("%zu of %zu item(s) skipped: their outputs exist", res->nskipped, nitems);
	if (res->signal != 0) {
		cli_say("interrupted by SIG%s: %zu item(s) done, %zu cancelled, %zu not started; the "
			"same command with --skip-existing finishes the batch",
			sigabbrev_np(res->signal), res->nok, res->ncancelled, res->nnotrun);
		status = cli_exit_for_signal(res->signal);
	}
	return status;
}

/* A report file written (rc 0), or its error said: a successful run then exits 1. */
static int written(int status, int rc, const sp_err_t *err)
{
	if (rc == 0)
		return status;
	fprintf(stderr, "starpipe: %s\n", err->msg);
	return status == 0 ? EXIT_ITEMS_FAILED : status;
}

/* What the run writes besides its outputs: the summary, --report,
 * --trace, --figures, --tasks.  Rank 0 speaks for an MPI batch: its
 * summary and report count the batch's items, workers and tasks, gathered
 * from every rank (rank 0's own figures only if gathering them ran out of
 * memory); --figures and --tasks stay rank 0's. */
static int write_reports(const struct cli *c, const sp_graph_t *g, const sp_run_result_t *res,
			 int status)
{
	sp_err_t err = { 0 };
	sp_runtime_batch_t batch = { .items = res->nok + res->nfailed + res->nskipped + res->ncancelled,
				     .ranks = sp_cluster_size(), .stage_lines = res->stage_lines,
				     .worker_lines = res->worker_lines };
	const sp_runtime_batch_t *bp = batch.stage_lines != NULL && batch.worker_lines != NULL
					       ? &batch : NULL;
	if (sp_cluster_rank() != 0)
		return status;
	if (!c->quiet)
		sp_runtime_print_report(g->pipeline, bp);
	if (c->report != NULL)
		status = written(status, sp_runtime_write_report(c->report, g->pipeline, res->items_json,
								 bp, res->cluster_json, &err), &err);
	if (c->trace != NULL)
		status = written(status, sp_runtime_write_trace(c->trace, res->trace_events,
								res->ntrace_events, &err), &err);
	if (c->figures != NULL)
		status = written(status, sp_runtime_write_figures(c->figures, res->nfailed, &err), &err);
	if (c->tasks != NULL)
		status = written(status, sp_runtime_write_tasks(c->tasks, &err), &err);
	return status;
}

int cli_session_start(const struct cli *c, const sp_graph_t *g, const sp_runtime_params_t *p)
{
	sp_runtime_conf_t conf;
	sp_err_t err = { 0 };
	struct models_plan m;
	plan_models(c, p, &m);
	session_conf(c, g, p, &m, &conf);
	if (m.ordered_start && !m.writer)
		sp_cluster_barrier(); /* the writers measure the bus first */
	if (sp_runtime_init(&conf, &err) != 0) {
		fprintf(stderr, "starpipe: %s\n", err.msg);
		/* the other ranks would wait for this one in the batch's collectives */
		sp_cluster_abort(EXIT_RUNTIME);
		return EXIT_RUNTIME;
	}
	if (m.ordered_start && m.writer)
		sp_cluster_barrier();
	say_models(c, g, p, &m);
	if (c->verbose && sp_cluster_rank() == 0 && sp_runtime_heteroprio())
		sp_hp_describe(stderr); /* what auto chose on a GPU node, and why */
	if (c->verbose && sp_cluster_rank() == 0)
		sp_runtime_lanes_describe(stderr);
	return 0;
}

int cli_session_end(const struct cli *c, const sp_graph_t *g, int ret, sp_run_result_t *res,
		    size_t nitems)
{
	if (ret == SP_EINVAL) {
		/* every rank refuses alike; the rank with the reason says it */
		if (sp_cluster_rank() == 0 ||
		    strncmp(res->err.msg, SP_RUN_OTHER_RANK, strlen(SP_RUN_OTHER_RANK)) != 0)
			fprintf(stderr, "starpipe: %s\n", res->err.msg);
		sp_run_result_free(res);
		sp_runtime_shutdown();
		return EXIT_USAGE;
	}
	int status = batch_status(c, ret, g, res, nitems);
	status = write_reports(c, g, res, status);
	/* Under MPI, rank 0's status is the job's: failed items (and a journal
	 * or report that could not be written) are the batch's, said by rank
	 * 0, which exits 1; the other ranks exit 0, so that the launcher
	 * reports one failed rank, not every rank (doc/cluster.md).  A signal
	 * stopped every rank: each exits with its status. */
	if (status == EXIT_ITEMS_FAILED && sp_cluster_rank() != 0)
		status = 0;
	sp_run_result_free(res);
	sp_runtime_shutdown();
	return status;
}

/* Starts StarPU, runs the batch, writes the reports, stops StarPU. */
static int run_batch(const struct cli *c, const sp_graph_t *g, const struct items *it,
		     const sp_runtime_params_t *p, const sp_run_opts_t *ro)
{
	sp_run_result_t res;
	int status = cli_session_start(c, g, p);
	if (status != 0)
		return status;
	int ret = sp_run(g, it->v, it->n, ro, &res);
	return cli_session_end(c, g, ret, &res, it->n);
}

int cli_cmd_run(struct cli *c, sp_graph_t *g)
{
	struct items it = { 0 };
	sp_run_opts_t ro = { .inflight = (size_t)c->inflight, .verbose = c->verbose,
			     .quiet = c->quiet, .skip_existing = c->skip_existing,
			     .item_timeout = c->item_timeout_s,
			     .journal = c->journal, .memory_limit = c->memory_limit,
			     .trace = c->trace != NULL };
	sp_runtime_params_t p;

	sp_graph_runtime_params(g, c->rt, &p);
	if (c->follow != NULL)
		return cli_cmd_follow(c, g, &p, &ro);
	int status = collect_items(c, g, &it);
	if (status == 0)
		status = cli_plan_batch(c, g, &it, &ro);
	ro.item_graphs = (const sp_graph_t *const *)it.graphs;
	if (status == 0)
		status = cli_check_workers(g, &p);
	if (status == 0) {
		cli_catch_stop_signals();
		status = run_batch(c, g, &it, &p, &ro);
	}
	cli_items_free(&it);
	return status;
}
