/* starpipe calibrate: runs of a graph with --calibrate 1 until its performance models are calibrated. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child.h"
#include "cli.h"
#include "cluster.h"
#include "runtime.h"

/*
 * DESIGN: each run is `starpipe run GRAPH ... --calibrate 1` in a child, as
 * starpipe tune runs its configurations: its own StarPU session, which
 * writes the models at its shutdown, one process at a time (two writing
 * them at once would lose one's samples).  Between runs the parent reads
 * the models with StarPU's reader, outside any session
 * (sp_runtime_model_rows), and compares each row (codelet, worker type,
 * footprint) with the previous run's.  It goes on while a row under StarPU's
 * threshold gained samples in the last run; a row that did not is not the
 * runs' to fill (a footprint of other inputs, a worker type this node
 * lacks) or got no task from the scheduler.  The runs use dmda unless told
 * otherwise: with calibration on it sends tasks to the worker types whose
 * model is not calibrated yet, which is how StarPU calibrates.  StarPU
 * drops the first measurement of a new footprint ("very often quite bogus",
 * perfmodel_history.c), so a codelet that runs once per item needs the
 * threshold plus one items over the runs: give several items to need fewer
 * runs.
 */

enum { DEFAULT_MAX_RUNS = 20 };


static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
	stop_signal = sig;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int is_opt(const char *a, const char *name, const char **val)
{
	size_t l = strlen(name);
	if (strncmp(a, name, l) != 0)
		return 0;
	if (a[l] == '\0') {
		*val = NULL;
		return 1;
	}
	if (a[l] == '=') {
		*val = a + l + 1;
		return 1;
	}
	return 0;
}


/* In the child: a run of its own, not a rank of a job that started us (srun). */
static void own_run(void *arg)
{
	(void)arg;
	sp_cluster_forget_launcher();
}

/* The run, as a child: its exit status (128 + signal when one ended it), or
 * -1 when it could not start. */
static int run_child(char **argv, const char *log)
{
	int st, forwarded;
	if (sp_child_run(argv, log, own_run, NULL, "starpipe calibrate", &stop_signal, &forwarded,
			 &st) != 0) {
		fprintf(stderr, "starpipe calibrate: fork: %s\n", strerror(errno));
		return -1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Prints a failed run's log (its first lines), indented. */
static void show_log(const char *log)
{
	char line[1024];
	int n = 0;
	FILE *f = fopen(log, "r");
	while (f != NULL && n < 12 && fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, "[starpu]", 8) == 0)
			continue; /* StarPU's notes (kept for count_flushes) */
		fprintf(stderr, "  %s%s", line, strchr(line, '\n') ? "" : "\n");
		n++;
	}
	if (f != NULL)
		fclose(f);
}

/* The CUDA workers of the last run, from its --figures (-1: unknown). */
static long cuda_workers(const char *figures)
{
	char line[512];
	long n = -1;
	FILE *f = fopen(figures, "r");
	while (f != NULL && fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "cuda_workers\t%ld", &n) == 1)
			break;
	if (f != NULL)
		fclose(f);
	return n;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* The row of rows[0..n) with r's codelet, worker type and footprint. */
static const sp_model_row_t *find_row(const sp_model_row_t *rows, size_t n, const sp_model_row_t *r)
{
	for (size_t i = 0; i < n; i++)
		if (rows[i].state == SP_MODEL_MEASURED && strcmp(rows[i].symbol, r->symbol) == 0 &&
		    strcmp(rows[i].key, r->key) == 0 && rows[i].footprint == r->footprint)
			return &rows[i];
	return NULL;
}

/* Whether row r changed since `before` (a new row counts). */
static int moved(const sp_model_row_t *before, size_t nb, const sp_model_row_t *r)
{
	const sp_model_row_t *b = find_row(before, nb, r);
	return b == NULL || b->nsample != r->nsample;
}

/* The state of the session: every row it has read. */
struct calib {
	const char *const *syms;
	size_t nsyms;
	const char *dir;
	char folder[4096];
	sp_model_row_t *first, *prev, *now;
	size_t nfirst, nprev, nnow;
	unsigned min;
	unsigned char *touched; /* per row of `now`: it gained samples in these runs */
	unsigned flushed[256];  /* per codelet of `syms`: StarPU flushed its history */
};

/* Counts, per codelet, StarPU's "Too big deviation for model SYM on ARCH
 * ... flushing the performance model" in a run's log: it empties a
 * footprint's history when as many of its measurements fell more than
 * STARPU_HISTORY_MAX_ERROR from the mean as it has samples. */
static void count_flushes(struct calib *c, const char *log)
{
	static const char tag[] = "Too big deviation for model ";
	char line[2048];
	FILE *f = fopen(log, "r");
	while (f != NULL && fgets(line, sizeof line, f) != NULL) {
		const char *p = strstr(line, tag);
		if (p == NULL)
			continue;
		p += sizeof tag - 1;
		size_t len = strcspn(p, " ");
		for (size_t i = 0; i < c->nsyms && i < sizeof c->flushed / sizeof c->flushed[0]; i++)
			if (strlen(c->syms[i]) == len && strncmp(c->syms[i], p, len) == 0)
				c->flushed[i]++;
	}
	if (f != NULL)
		fclose(f);
}

/* How many times StarPU flushed codelet sym's history in these runs. */
static unsigned flushes(const struct calib *c, const char *sym)
{
	for (size_t i = 0; i < c->nsyms && i < sizeof c->flushed / sizeof c->flushed[0]; i++)
		if (strcmp(c->syms[i], sym) == 0)
			return c->flushed[i];
	return 0;
}

/* Reads the models into c->now, remembering which rows moved; 0 or the error said. */
static int read_rows(struct calib *c)
{
	sp_err_t err = { 0 };
	sp_model_row_t *rows;
	size_t n;
	if (sp_runtime_model_rows(c->dir, c->syms, c->nsyms, &rows, &n, c->folder, sizeof c->folder,
				  &err) != 0) {
		fprintf(stderr, "starpipe calibrate: %s\n", err.msg);
		return -1;
	}
	unsigned char *t = calloc(n ? n : 1, 1);
	if (t == NULL) {
		free(rows);
		fprintf(stderr, "starpipe calibrate: out of memory\n");
		return -1;
	}
	for (size_t i = 0; c->first != NULL && i < n; i++)
		t[i] = rows[i].state == SP_MODEL_MEASURED && moved(c->first, c->nfirst, &rows[i]);
	if (c->prev != c->first)
		free(c->prev);
	c->prev = c->now;
	c->nprev = c->nnow;
	c->now = rows;
	c->nnow = n;
	free(c->touched);
	c->touched = t;
	return 0;
}

/* Whether codelet `sym`'s footprint fp got samples in these runs on some worker type. */
static int footprint_touched(const struct calib *c, const char *sym, uint32_t fp)
{
	for (size_t i = 0; i < c->nnow; i++)
		if (c->touched[i] && c->now[i].footprint == fp && strcmp(c->now[i].symbol, sym) == 0)
			return 1;
	return 0;
}

/* The last run's progress: the rows under the threshold, how many of them
 * gained samples in it, and how many in these runs. */
static void progress(const struct calib *c, size_t *nrows, size_t *nshort, size_t *nmoving,
		     size_t *nlive, const sp_model_row_t **fewest)
{
	*nrows = *nshort = *nmoving = *nlive = 0;
	*fewest = NULL;
	for (size_t i = 0; i < c->nnow; i++) {
		const sp_model_row_t *r = &c->now[i];
		if (r->state != SP_MODEL_MEASURED)
			continue;
		++*nrows;
		if (r->nsample >= c->min)
			continue;
		++*nshort;
		*nlive += c->touched[i];
		if (moved(c->prev, c->nprev, r)) {
			++*nmoving;
			if (*fewest == NULL || r->nsample < (*fewest)->nsample)
				*fewest = r;
		}
	}
}

/* The summary on stdout; returns the number of rows this node could have
 * calibrated and did not. */
static size_t summary(const struct calib *c, long max, int out_of_runs, long ncuda)
{
	size_t nok = 0, nnot = 0, nelse = 0, nbad = 0;
	printf("%-20s %-18s %-10s %7s %7s  %s\n", "# codelet", "worker type", "footprint", "before",
	       "after", "status");
	for (size_t i = 0; i < c->nnow; i++) {
		const sp_model_row_t *r = &c->now[i];
		if (r->state != SP_MODEL_MEASURED) {
			printf("%-20s %-18s %-10s %7s %7s  %s\n", r->symbol, "-", "-", "-", "0",
			       "not run: none of its tasks ran (a variant the graph's parameters do not "
			       "choose, or a reduction's init, which StarPU runs outside tasks)");
			nnot++;
			continue;
		}
		const sp_model_row_t *b = find_row(c->first, c->nfirst, r);
		char before[16] = "-";
		if (b != NULL)
			snprintf(before, sizeof before, "%u", b->nsample);
		const char *why;
		char buf[160];
		int bad = 0;
		if (r->stale) {
			why = "stale: its samples are of other code (calibrate again with --calibrate 2)";
			bad = 1;
		} else if (r->nsample >= c->min) {
			why = "calibrated";
			nok++;
		} else if (c->touched[i] && flushes(c, r->symbol) > 0) {
			const char *mx = getenv("STARPU_HISTORY_MAX_ERROR");
			snprintf(buf, sizeof buf, "SHORT: StarPU flushed its samples %u time(s): its "
				 "times vary more than STARPU_HISTORY_MAX_ERROR=%s %% allows",
				 flushes(c, r->symbol), mx != NULL ? mx : "50");
			why = buf;
			bad = 1;
		} else if (c->touched[i]) {
			if (out_of_runs)
				snprintf(buf, sizeof buf, "SHORT: out of runs (--max-runs %ld; more items "
					 "per run need fewer)", max);
			else
				snprintf(buf, sizeof buf, "SHORT: the last run gave it no task");
			why = buf;
			bad = 1;
		} else if (r->cuda && ncuda == 0) {
			why = "not here: this node ran no CUDA worker (no GPU, or --ncuda 0)";
			nelse++;
		} else if (!footprint_touched(c, r->symbol, r->footprint)) {
			why = "not here: a footprint of other inputs (not measured by these runs)";
			nelse++;
		} else {
			why = "SHORT: the scheduler gave this worker type no task (try --sched dmda)";
			bad = 1;
		}
		nbad += bad;
		printf("%-20s %-18s 0x%08" PRIx32 " %7s %7u  %s\n", r->symbol, r->arch, r->footprint,
		       before, r->nsample, why);
	}
	printf("# %zu footprint(s) calibrated, %zu short, %zu not this node's or these inputs'; "
	       "%zu codelet(s) not run\n", nok, nbad, nelse, nnot);
	return nbad;
}

/* One calibrate command: the children's command line, the scratch folder, the
 * models' rows and the runs' count. */
struct session {
	const struct cli *cl;
	const char *exe, *from;
	char nt[256], scratch[4096], log[4200], figures[4200], out[4200], *syms[256];
	char **cargv;
	size_t n, calarg;
	int first_calibrate, out_of_runs;
	sp_graph_t *g;
	struct calib c;
	long max, runs, ncuda;
	double t0;
};

/* Allocates the children's command line and loads the graph; 0 or the exit status. */
static int load(struct session *s, int argc)
{
	sp_diag_t d;
	s->cargv = calloc((size_t)argc + 24, sizeof *s->cargv);
	if (s->cargv == NULL) {
		fprintf(stderr, "starpipe calibrate: out of memory\n");
		return EXIT_ITEMS_FAILED;
	}
	if (s->cl->skip_existing)
		return cli_usage_error("%s", "calibrate: --skip-existing would skip what the runs "
				       "must measure");
	sp_diag_init(&d, s->cl->graph);
	if (sp_graph_load(s->cl->graph, s->cl->vars, s->cl->nvars, cli_registry(), &s->g, &d) != 0) {
		sp_diag_print(&d, stderr);
		sp_diag_free(&d);
		return EXIT_USAGE;
	}
	sp_diag_free(&d);
	return 0;
}

/* The children's command line: run, what was given but ours; 0 or the exit status. */
static int given_args(struct session *s, int argc, char **argv)
{
	s->first_calibrate = 1;
	s->cargv[s->n++] = (char *)s->exe;
	s->cargv[s->n++] = "run";
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v;
		int mine = is_opt(a, "--max-runs", &v), cal = !mine && is_opt(a, "--calibrate", &v);
		if (mine || cal) {
			if (v == NULL)
				v = i + 1 < argc ? argv[++i] : "";
			if (cal)
				s->first_calibrate = atoi(v); /* checked by the parser */
			continue;
		}
		if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0 || strcmp(a, "-v") == 0 ||
		    strcmp(a, "--verbose") == 0)
			continue;
		s->cargv[s->n++] = argv[i];
		if (cli_run_option_takes_value(a) && i + 1 < argc)
			s->cargv[s->n++] = argv[++i];
	}
	if (s->first_calibrate == 0)
		return cli_usage_error("%s", "calibrate: --calibrate 0 would measure nothing (1, the "
				       "default, adds samples; 2 starts the models afresh)");
	return 0;
}

/* The node type and StarPU's settings for the children. */
static void children_env(struct session *s)
{
	s->from = sp_runtime_node_type(s->cl->node_type, s->nt, sizeof s->nt);
	/* the children name it as we read it */
	setenv("STARPU_HOSTNAME", s->nt, 1);
	/* StarPU flushes a footprint's samples when as many measurements fell
	 * more than STARPU_HISTORY_MAX_ERROR (50 %) from the mean as it holds:
	 * an I/O codelet, whose time follows the page cache, then never
	 * reaches the threshold (samples 0, 1, 0, 1...).  Calibration collects
	 * samples, so it tolerates a wide spread unless the user chose one;
	 * StarPU's messages are kept in the runs' logs, where its flushes are
	 * counted. */
	setenv("STARPU_HISTORY_MAX_ERROR", "1000", 0);
	setenv("STARPU_SILENT", "0", 1);
}

/* The scratch folder of the runs' log, figures and outputs; 0 or the exit status. */
static int make_scratch(struct session *s)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(s->scratch, sizeof s->scratch, "%s/starpipe-calibrate.XXXXXX",
		 tmp != NULL && tmp[0] == '/' ? tmp : "/tmp");
	if (mkdtemp(s->scratch) == NULL) {
		fprintf(stderr, "starpipe calibrate: cannot create a scratch folder under %s: %s\n",
			tmp != NULL && tmp[0] == '/' ? tmp : "/tmp", strerror(errno));
		return EXIT_ITEMS_FAILED;
	}
	snprintf(s->log, sizeof s->log, "%s/run.log", s->scratch);
	snprintf(s->figures, sizeof s->figures, "%s/run.fig", s->scratch);
	snprintf(s->out, sizeof s->out, "%s/out", s->scratch);
	return 0;
}

/* The children's command line: ours after what was given. */
static void our_args(struct session *s)
{
	int user_output = 0, scratch_output = 0;
	for (size_t i = 0; i < s->cl->nvars; i++)
		user_output |= strcmp(s->cl->vars[i].name, "output") == 0;
	s->calarg = s->n + 1;
	s->cargv[s->n++] = "--calibrate";
	s->cargv[s->n++] = s->first_calibrate == 2 ? "2" : "1";
	s->cargv[s->n++] = "-q";
	s->cargv[s->n++] = "--figures";
	s->cargv[s->n++] = s->figures;
	if (s->cl->rt[SP_RT_SCHEDULER] == NULL) {
		s->cargv[s->n++] = "--sched";
		s->cargv[s->n++] = "dmda";
	}
	if (s->cl->node_type == NULL) {
		s->cargv[s->n++] = "--node-type";
		s->cargv[s->n++] = s->nt;
	}
	/* the outputs of a graph with an `output` folder go to scratch, unless asked */
	for (size_t i = 0; !user_output && i < s->g->nvars; i++)
		scratch_output |= strcmp(s->g->var_names[i], "output") == 0;
	if (scratch_output) {
		s->cargv[s->n++] = "--output";
		s->cargv[s->n++] = s->out;
	}
	s->cargv[s->n] = NULL;
}

/* Reads the models before the runs and says what is to come; 0 or the exit status. */
static int first_rows(struct session *s)
{
	const struct cli *cl = s->cl;
	struct calib *c = &s->c;
	c->nsyms = sp_graph_codelets(NULL, s->g, s->syms, sizeof s->syms / sizeof s->syms[0]);
	c->syms = (const char *const *)s->syms;
	c->dir = cl->rt[SP_RT_PERFMODEL_DIR] != NULL ? cl->rt[SP_RT_PERFMODEL_DIR]
						       : sp_graph_runtime(s->g, "perfmodel_dir");
	c->min = sp_runtime_calibration_minimum();
	s->max = cl->max_runs > 0 ? cl->max_runs : DEFAULT_MAX_RUNS;
	s->ncuda = -1;
	if (read_rows(c) != 0)
		return EXIT_USAGE;
	c->first = c->now;
	c->nfirst = c->nnow;
	if (!cl->quiet)
		fprintf(stderr, "starpipe calibrate: %s, node type '%s' (%s), models in %s; at most %ld "
			"run(s) until every footprint they measure has %u samples\n", cl->graph, s->nt,
			s->from, c->folder, s->max, c->min);
	return 0;
}

/* One run and its reading; sets *status when the runs must stop on it. Returns
 * the number of footprints under the threshold that gained samples in it, and
 * *nlive those that did in these runs. */
static size_t one_run(struct session *s, int *status, size_t *nlive)
{
	double t1 = now_s();
	int rc = run_child(s->cargv, s->log);
	s->runs++;
	if (stop_signal) {
		fprintf(stderr, "starpipe calibrate: interrupted by SIG%s in run %ld\n",
			sigabbrev_np(stop_signal), s->runs);
		*status = 128 + stop_signal;
		return 0;
	}
	if (rc != 0) {
		fprintf(stderr, "starpipe calibrate: run %ld failed (exit %d); its messages:\n", s->runs,
			rc);
		show_log(s->log);
		*status = rc == EXIT_USAGE ? EXIT_USAGE : EXIT_ITEMS_FAILED;
		return 0;
	}
	s->ncuda = cuda_workers(s->figures);
	count_flushes(&s->c, s->log);
	s->cargv[s->calarg] = "1"; /* --calibrate 2 starts afresh once */
	if (read_rows(&s->c) != 0) {
		*status = EXIT_ITEMS_FAILED;
		return 0;
	}
	size_t nrows, nshort, nmoving;
	const sp_model_row_t *few;
	progress(&s->c, &nrows, &nshort, &nmoving, nlive, &few);
	if (!s->cl->quiet) {
		fprintf(stderr, "starpipe calibrate: run %ld (%.1f s): %zu of %zu footprint(s) "
			"calibrated", s->runs, now_s() - t1, nrows - nshort, nrows);
		if (few != NULL)
			fprintf(stderr, "; %zu gaining samples, fewest %s on %s: %u", nmoving,
				few->symbol, few->arch, few->nsample);
		fputc('\n', stderr);
	}
	return nmoving;
}

/* The runs, until the models are calibrated, stall or the runs run out; the exit status. */
static int run_until_calibrated(struct session *s)
{
	struct sigaction sa = { .sa_handler = on_stop };
	int status = 0, stalled = 0;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	s->t0 = now_s();
	for (;;) {
		size_t nlive = 0, nmoving = one_run(s, &status, &nlive);
		if (status != 0)
			break;
		/* Done when no footprint under the threshold gained a sample in
		 * this run, unless one of them gained some earlier in the
		 * session: then one more run.  StarPU drops a measurement far
		 * from its footprint's mean (STARPU_HISTORY_MAX_ERROR, 50 %), and
		 * a quick run's few samples (an item's read and write) can all be
		 * dropped (seen once in CI's ASAN build: 9 write samples, then a
		 * 0.1 s run adding none).  Footprints of other inputs or worker
		 * types never gain any, and cost no extra run. */
		if (nmoving > 0)
			stalled = 0;
		else if (nlive == 0 || ++stalled >= 2)
			break;
		if (s->runs == s->max) {
			s->out_of_runs = 1;
			break;
		}
	}
	return status;
}

/* The summary of the runs on stdout; the exit status, given the runs' one. */
static int report(struct session *s, int status)
{
	if (s->runs == 0 || (status != 0 && !stop_signal)) /* a failed run's messages said it */
		return status;
	printf("# starpipe calibrate %s: %ld run(s) in %.1f s; node type '%s' (%s), models in "
	       "%s; StarPU's threshold: %u samples\n", s->cl->graph, s->runs, now_s() - s->t0, s->nt,
	       s->from, s->c.folder, s->c.min);
	size_t nbad = summary(&s->c, s->max, s->out_of_runs, s->ncuda);
	fflush(stdout);
	if (status == 0 && nbad > 0) {
		fprintf(stderr, "starpipe calibrate: %zu footprint(s) this node runs are still "
			"under %u samples\n", nbad, s->c.min);
		status = EXIT_ITEMS_FAILED;
	}
	return status;
}

/* Frees the session; removes its scratch folder when it made one. */
static void session_free(struct session *s, int scratched)
{
	struct calib *c = &s->c;
	if (scratched)
		nftw(s->scratch, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	if (c->prev != c->first)
		free(c->prev);
	if (c->now != c->first)
		free(c->now);
	free(c->first);
	free(c->touched);
	for (size_t i = 0; i < c->nsyms; i++)
		free(s->syms[i]);
	sp_graph_free(&s->g);
	free(s->cargv);
}

int cli_cmd_calibrate(const struct cli *cl, int argc, char **argv, const char *exe)
{
	struct session s = { .cl = cl, .exe = exe };
	int status = load(&s, argc);
	if (status == 0)
		status = given_args(&s, argc, argv);
	if (status == 0) {
		children_env(&s);
		status = make_scratch(&s);
	}
	if (status != 0) {
		session_free(&s, 0);
		return status;
	}
	our_args(&s);
	status = first_rows(&s);
	if (status == 0)
		status = report(&s, run_until_calibrated(&s));
	session_free(&s, 1);
	return status;
}
