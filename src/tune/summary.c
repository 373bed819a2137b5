/* starpipe tune's results: results.csv, the configurations ranked and compared with the fastest, summary.txt. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "fsutil.h"
#include "tune.h"
#include "tune_int.h"

static void csv_field(FILE *f, const char *s)
{
	if (s == NULL)
		return;
	if (strpbrk(s, ",\"\n") == NULL) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

/* Writes DIR/results.csv atomically.  Its third column, simulated (1 for a
 * --simulate sweep, 0 for real runs), stays with every row, so that a row
 * copied out of its sweep still says whether its times were measured. */
int tune_write_csv(const tune_t *t)
{
	char *text = NULL, path[4096], num[64];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	sp_err_t err = { 0 };
	if (f == NULL)
		return -1;
	fputs("run,config,simulated", f);
	for (size_t d = 0; d < t->ndims; d++)
		fprintf(f, ","), csv_field(f, t->dims[d].name);
	fputs(",repeat,status,exit,child_wall_s", f);
	for (size_t c = 0; c < t->ncols; c++)
		fputc(',', f), csv_field(f, t->cols[c]);
	fputc('\n', f);
	for (size_t i = 0; i < t->nrows; i++) {
		const row_t *r = &t->rows[i];
		fprintf(f, "%zu,", i + 1);
		csv_field(f, tune_cfg_label(t, r->cfg));
		fprintf(f, ",%d", t->simulate != NULL);
		for (size_t d = 0; d < t->ndims; d++)
			fputc(',', f), csv_field(f, tune_dim_val(t, r->cfg, d));
		snprintf(num, sizeof num, "%.3f", r->wall);
		fprintf(f, ",%d,%s,%d,%s", r->rep, r->status, r->code, num);
		for (size_t c = 0; c < t->ncols; c++)
			fputc(',', f), csv_field(f, tune_fig(r, t->cols[c]));
		fputc('\n', f);
	}
	snprintf(path, sizeof path, "%s/results.csv", t->out);
	int rc = sp_write_memstream_atomic(path, f, &text, &len, &err);
	if (rc != 0)
		fprintf(stderr, "starpipe tune: %s\n", err.msg);
	free(text);
	return rc;
}




static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int cmp_cstat(const void *a, const void *b)
{
	const cstat_t *x = a, *y = b;
	if (x->nok == 0 || y->nok == 0)
		return (x->nok == 0) - (y->nok == 0);
	return (x->med > y->med) - (x->med < y->med);
}

/* Per-configuration statistics over its successful runs, ranked by median makespan. */
cstat_t *tune_config_stats(const tune_t *t)
{
	cstat_t *s = calloc(t->ncfg, sizeof *s);
	double *m = malloc(((size_t)t->repeat + 1) * sizeof *m);
	if (s == NULL || m == NULL) {
		free(s);
		free(m);
		return NULL;
	}
	for (size_t c = 0; c < t->ncfg; c++) {
		s[c] = (cstat_t){ .cfg = c, .med = NAN, .min = NAN, .max = NAN, .bound = NAN };
		for (size_t i = 0; i < t->nrows; i++) {
			const row_t *r = &t->rows[i];
			if (r->cfg != c)
				continue;
			s[c].nrun++;
			double x = tune_fig_num(r, "makespan_s");
			if (strcmp(r->status, "ok") != 0 || !isfinite(x))
				continue;
			m[s[c].nok++] = x;
		}
		if (s[c].nok == 0)
			continue;
		qsort(m, s[c].nok, sizeof *m, cmp_double);
		s[c].med = s[c].nok % 2 ? m[s[c].nok / 2] : 0.5 * (m[s[c].nok / 2 - 1] + m[s[c].nok / 2]);
		s[c].min = m[0];
		s[c].max = m[s[c].nok - 1];
		/* the run closest to the median stands for the configuration */
		double bestd = INFINITY;
		for (size_t i = 0; i < t->nrows; i++) {
			const row_t *r = &t->rows[i];
			double x = tune_fig_num(r, "makespan_s");
			if (r->cfg == c && strcmp(r->status, "ok") == 0 && fabs(x - s[c].med) < bestd) {
				bestd = fabs(x - s[c].med);
				s[c].best_row = i;
			}
		}
		s[c].bound = tune_fig_num(&t->rows[s[c].best_row], "bound_s");
		s[c].binds = tune_fig(&t->rows[s[c].best_row], "bound_binds");
	}
	free(m);
	qsort(s, t->ncfg, sizeof *s, cmp_cstat);
	return s;
}

size_t tune_nranked(const tune_t *t, const cstat_t *s)
{
	size_t n = 0;
	while (n < t->ncfg && s[n].nok > 0)
		n++;
	return n;
}




/* Marks each ranked configuration '=', '>' or '?' against rank 1. */
ranking_t tune_compare_with_best(const tune_t *t, cstat_t *s, size_t nr)
{
	ranking_t k = { .deterministic = t->simulate != NULL };
	for (size_t i = 0; i < nr; i++) {
		k.deterministic &= s[i].min == s[i].max;
		k.checked |= s[i].nok >= 2;
	}
	/* A deterministic simulation's run is the models' prediction, without
	 * noise to sample: one run says all that more would. */
	size_t need = k.deterministic ? 1 : MIN_TESTED;
	k.tested = nr > 0 && s[0].nok >= need;
	for (size_t i = 0; i < nr; i++) {
		if (!k.tested || s[i].nok < need)
			s[i].vs = VS_UNTESTED, k.nuntested++;
		else if (s[i].min <= s[0].max)
			s[i].vs = VS_TIED, k.ntied++;
		else
			s[i].vs = VS_SLOWER, k.nslower++;
	}
	return k;
}

/* The legend of the vs#1 column, for the kind of sweep this was. */
static void write_vs_legend(const tune_t *t, const ranking_t *k, FILE *f)
{
	if (k->deterministic) {
		if (k->checked)
			fprintf(f, "SIMULATED, and the simulation is deterministic: every configuration's "
				   "repeats\nagree exactly.");
		else
			fprintf(f, "SIMULATED: the simulation is deterministic by design (not checked "
				   "here: no\nconfiguration ran twice).");
		fprintf(f, "  This ranking is of the performance models' predictions,\n"
			   "not of measurement noise: vs#1 '=' is a predicted makespan equal to rank 1's,\n"
			   "'>' a longer one.  How far a prediction is from a real run is not measured\n"
			   "here: compare with a real sweep where you can.\n");
		return;
	}
	if (t->simulate != NULL)
		fprintf(f, "warning: SIMULATED, yet some configuration's repeats differ: the simulation "
			   "was\nnot deterministic here; its ranks are tested as real runs' are.\n");
	if (!k->tested) {
		if (t->repeat < MIN_TESTED)
			fprintf(f, "%ld repeat(s): ranks are not tested (vs#1 '?'); rerun with --repeat %d "
				   "or more.\nWith fewer than %d runs per configuration, close medians "
				   "can be in any order by\nchance: the order above is of the medians "
				   "alone and claims no difference.\n",
				t->repeat, MIN_TESTED, MIN_TESTED);
		else
			fprintf(f, "Rank 1 has fewer than %d successful runs: ranks are not tested "
				   "(vs#1 '?');\nthe order above is of the medians alone and claims no "
				   "difference.\n", MIN_TESTED);
		return;
	}
	fprintf(f, "vs#1, against rank 1 (the fastest median), with %d successful runs or more each:\n"
		   "  '=' not distinguishable from rank 1: the min-max intervals overlap;\n"
		   "  '>' slower: every run took longer than every run of rank 1 (configurations\n"
		   "      that are in fact equal do that by chance 1 time in 20 with 3 runs each,\n"
		   "      less often with more: a one-sided Mann-Whitney test at 5 %% or stricter);\n"
		   "  '?' not tested: fewer than %d successful runs.\n"
		   "Each '>' is a separate test against rank 1, which was picked as the fastest (and a\n"
		   "lucky configuration gets picked): in a large sweep a few '>' can be chance.\n",
		MIN_TESTED, MIN_TESTED);
}

/* the summary's first lines: the sweep, and SIMULATED with its platform */
static void summary_head(const tune_t *t, FILE *f)
{
	size_t nok = 0;
	for (size_t i = 0; i < t->nrows; i++)
		nok += strcmp(t->rows[i].status, "ok") == 0;
	fprintf(f, "starpipe tune: %s, %zu configuration(s) x %ld repeat(s): %zu of %zu run(s) ok%s\n",
		t->graph, t->ncfg, t->repeat, nok, t->nrows,
		t->stopped ? " (interrupted: the sweep is incomplete)" : "");
	if (t->simulate == NULL)
		return;
	fprintf(f, "SIMULATED (starpipe-sim, SimGrid) on platform %s: every time below is a "
		"prediction from the performance models in %s\n", t->simulate, t->pmdir);
	const char *hm = NULL;
	for (size_t i = 0; i < t->nrows && hm == NULL; i++)
		hm = tune_fig(&t->rows[i], "sim_host_model");
	if (hm != NULL && strcmp(hm, "none") != 0)
		fprintf(f, "with the host model %s (CPU contention, starvation, host work: "
			"doc/scheduling.md)\n", hm);
	else if (hm != NULL)
		fprintf(f, "without a host model: the models' times alone, as if no task slowed "
			"another (doc/scheduling.md)\n");
	/* the runs the fidelity table does not vouch for (results.csv's
	 * validated column), with the first one's reason */
	size_t nbad = 0, nsim = 0;
	const char *why = NULL;
	for (size_t i = 0; i < t->nrows; i++) {
		const char *v = tune_fig(&t->rows[i], "validated");
		if (v == NULL || v[0] == '\0')
			continue;
		nsim++;
		if (strcmp(v, "0") == 0 && nbad++ == 0)
			why = tune_fig(&t->rows[i], "validation");
	}
	if (nbad > 0)
		fprintf(f, "warning: %zu of %zu simulated run(s) not validated (results.csv's validated "
			"column): %s (tools/fidelity)\n", nbad, nsim, why != NULL ? why : "");
}

/* the ranking table, one line per configuration */
static void summary_table(const tune_t *t, const cstat_t *s, int w, FILE *f)
{
	fprintf(f, "Ranked by median makespan (first task start to last task end), seconds:\n\n");
	fprintf(f, "%4s %4s  %-*s %5s %9s %19s %9s %7s %s\n", "rank", "vs#1", w, "configuration",
		"runs", "median", "min-max", "bound", "/bound", "binds");
	for (size_t i = 0; i < t->ncfg; i++) {
		const char *label = tune_cfg_label(t, s[i].cfg);
		if (s[i].nok == 0) {
			fprintf(f, "%4s %4s  %-*s %2zu/%-2zu all failed\n", "-", "", w, label, s[i].nok,
				s[i].nrun);
			continue;
		}
		char mm[64];
		snprintf(mm, sizeof mm, "%.3f-%.3f", s[i].min, s[i].max);
		fprintf(f, "%4zu %3c   %-*s %2zu/%-2zu %9.3f %19s %9.3f %7.2f %s\n", i + 1, s[i].vs, w,
			label, s[i].nok, s[i].nrun, s[i].med, mm, s[i].bound, s[i].med / s[i].bound,
			s[i].binds ? s[i].binds : "-");
	}
}

/* what the bound is, the uncalibrated runs, and why each failed run failed */
static void summary_notes(const tune_t *t, FILE *f)
{
	size_t nmeasured = 0;
	for (size_t i = 0; i < t->nrows; i++)
		nmeasured += tune_fig_num(&t->rows[i], "bound_measured_tasks") > 0;
	fprintf(f, "bound: the larger of the area bound (every task on its fastest worker type,\n"
		   "work spread perfectly) and the critical path (the longest chain of dependent\n"
		   "tasks), from the performance models; 'binds' says which is larger.\n");
	if (nmeasured > 0)
		fprintf(f, "warning: in %zu run(s) some tasks had no calibrated model and were timed by\n"
			   "their measured duration: calibrate first (starpipe run --calibrate 1).\n",
			nmeasured);
	for (size_t i = 0; i < t->nrows; i++)
		if (strcmp(t->rows[i].status, "ok") != 0) {
			char why[512];
			tune_why_failed(t->out, i, why, sizeof why);
			fprintf(f, "run %zu (%s, repeat %d) %s (%s %d): %s\n", i + 1,
				tune_cfg_label(t, t->rows[i].cfg), t->rows[i].rep, t->rows[i].status,
				strcmp(t->rows[i].status, "crashed") ? "exit" : "signal", t->rows[i].code,
				why[0] ? why : "no message");
		}
}

/* the best configuration, or the tie, and how it compares */
static void summary_best(const tune_t *t, const cstat_t *s, const ranking_t *k, size_t nr, int w,
			 FILE *f)
{
	if (k->tested && k->ntied > 1) {
		/* no winner to crown: every configuration rank 1 cannot be told from */
		fprintf(f, "\nBest: a tie of %zu configurations (vs#1 '='), in rank order:\n",
			k->ntied);
		for (size_t i = 0; i < nr; i++)
			if (s[i].vs == VS_TIED)
				fprintf(f, "  %-*s  median %.3f s (%.3f-%.3f)\n", w, tune_cfg_label(t, s[i].cfg),
					s[i].med, s[i].min, s[i].max);
		fprintf(f, "%s  Rank 1's, for the graph file:\n\nruntime:\n",
			k->deterministic ? "The models predict the same makespan for each: any will do."
					 : "None can be told from rank 1 by these runs: any will do.");
		return;
	}
	fprintf(f, "\nBest%s: %s (median %.3f s", k->tested ? "" : " by median, not tested",
		tune_cfg_label(t, s[0].cfg), s[0].med);
	if (nr > 1)
		fprintf(f, ", %.2fx faster than the worst, %.3f s", s[nr - 1].med / s[0].med,
			s[nr - 1].med);
	if (k->tested && nr > 1 && k->nuntested == 0)
		fprintf(f, "; every other configuration is slower ('>')");
	else if (k->tested && nr > 1)
		fprintf(f, "; %zu other(s) slower ('>'), %zu not tested ('?')", k->nslower,
			k->nuntested);
	fprintf(f, ").  For the graph file:\n\nruntime:\n");
}

/* rank 1's settings as the graph file's runtime: block, then the rest */
static void summary_settings(const tune_t *t, const cstat_t *s, FILE *f)
{
	const row_t *b = &t->rows[s[0].best_row];
	fprintf(f, "  scheduler: %s\n", tune_fig(b, "scheduler") ? tune_fig(b, "scheduler") : "auto");
	for (size_t d = 0; d < t->ndims; d++) {
		const char *v = tune_dim_val(t, s[0].cfg, d);
		if (t->dims[d].kind == DIM_NCPUS)
			fprintf(f, "  ncpus: %s\n", v);
		else if (t->dims[d].kind == DIM_NCUDA)
			fprintf(f, "  ncuda: %s\n", v);
		else if (t->dims[d].kind == DIM_WPG)
			fprintf(f, "  workers_per_gpu: %s\n", v);
	}
	for (size_t d = 0; d < t->ndims; d++) {
		const char *v = tune_dim_val(t, s[0].cfg, d);
		if (t->dims[d].kind == DIM_TILE)
			fprintf(f, "# and in stages: %s: tile: %s\n", t->dims[d].stage, v);
		else if (t->dims[d].kind == DIM_VAR)
			fprintf(f, "# and in params: %s: %s\n", t->dims[d].name, v);
		else if (t->dims[d].kind == DIM_INFLIGHT)
			fprintf(f, "# and run with --inflight %s\n", v);
	}
}

void tune_write_summary(const tune_t *t, const cstat_t *s, const ranking_t *k, FILE *f)
{
	size_t nr = tune_nranked(t, s);
	int w = (int)(t->label_w > 13 ? t->label_w : 13); /* at least "configuration" */
	summary_head(t, f);
	fputc('\n', f);
	summary_table(t, s, w, f);
	fputc('\n', f);
	if (nr > 0) {
		write_vs_legend(t, k, f);
		fputc('\n', f);
	}
	summary_notes(t, f);
	if (nr == 0) {
		fprintf(f, "\nNo configuration ran: see the runs' logs in %s/runs/.\n", t->out);
		return;
	}
	summary_best(t, s, k, nr, w, f);
	summary_settings(t, s, f);
}
