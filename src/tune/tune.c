/* starpipe tune: the sweep's options, its runs as child processes, and the main loop (tune.h). */
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
#include "child.h"
#include "fsutil.h"
#include "tune.h"
#include "tune_int.h"


enum { TUNE_OK = 0, TUNE_FAILED = 1, TUNE_USAGE = 2 };

static const char tune_usage[] =
	"Usage: starpipe tune GRAPH [ITEM...] [RUN OPTIONS] --out DIR [SWEEP OPTIONS]\n"
	"\n"
	"Runs GRAPH once per configuration of the sweep and repeat (each run a\n"
	"`starpipe run` in its own process), then writes DIR/results.csv (one row per\n"
	"run; its column 'simulated' is 1 under --simulate), DIR/summary.txt\n"
	"(configurations ranked by median makespan, each marked against the fastest:\n"
	"'=' not distinguishable from it, '>' slower in every run, '?' not tested,\n"
	"fewer than 3 runs; the best as a runtime: section, or every configuration of\n"
	"a tie) and DIR/plots/ (gnuplot PNG and SVG: makespan per configuration,\n"
	"per-worker busy/idle of the best and worst, their Gantt charts).\n"
	"\n"
	"Sweep options (comma-separated lists; each defaults to the graph's own value):\n"
	"  --sched LIST        StarPU schedulers, e.g. eager,lws,dmda,dmdas\n"
	"  --ncpus LIST        CPU worker counts, e.g. 1,2\n"
	"  --ncuda LIST        CUDA GPU counts\n"
	"  --vary NAME=LIST    one more dimension (repeatable): STAGE.tile (the stage's\n"
	"                      tile:), inflight, workers-per-gpu, or a pipeline variable\n"
	"                      (as --set NAME=VALUE)\n"
	"  --repeat N          runs per configuration (default 3)\n"
	"  --out DIR           where the results go (required; created)\n"
	"  --simulate HOST     run the sweep in starpipe-sim on the platform HOST of the\n"
	"                      --perfmodel-dir folder (DIR/bus/HOST.*, its models\n"
	"                      SYMBOL.HOST); give the real run's loop counts with\n"
	"                      --sim-count (see doc/tuning.md)\n"
	"Every other option and the ITEMs are given to each run as they are (--set,\n"
	"--input, --output, --perfmodel-dir, --calibrate, --inflight...).  Calibrate\n"
	"the performance models first (starpipe run --calibrate 1): the lower bound\n"
	"and dmda's choices use them.\n";

/* Options of `run` that tune sets itself for every run. */
static const char *const owned[] = { "--report", "--trace", "--figures", "--tasks",
	"--skip-existing", "-q", "--quiet", "-v", "--verbose" };

/* SIGINT / SIGTERM: the running child gets it too (same process group) and
 * stops; the sweep then writes its summary and plots over the runs done. */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
	stop_signal = sig;
}

static int tune_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "starpipe tune: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'starpipe tune --help'.\n");
	return TUNE_USAGE;
}

static int in_list(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(list[i]);
		if (strncmp(s, list[i], l) == 0 && (s[l] == '\0' || (s[l] == '=' && list[i][1] == '-')))
			return 1;
	}
	return 0;
}

/* Splits "a,b,c" into a dimension's values; an empty value is refused. */
static int add_dim(tune_t *t, dimkind_t kind, const char *name, const char *list)
{
	if (t->ndims == sizeof t->dims / sizeof t->dims[0])
		return tune_error("%s", "too many sweep dimensions");
	for (size_t i = 0; i < t->ndims; i++)
		if (strcmp(t->dims[i].name, name) == 0)
			return tune_error("'%s' is swept twice", name);
	dim_t *d = &t->dims[t->ndims];
	char *copy = strdup(list), *save = NULL;
	*d = (dim_t){ .kind = kind, .name = strdup(name) };
	if (copy == NULL || d->name == NULL)
		return tune_error("%s", "out of memory");
	for (const char *p = list; *p; p++)
		if (*p == ',' && (p == list || p[1] == '\0' || p[1] == ','))
			return tune_error("empty value in '%s'", list);
	for (char *v = strtok_r(copy, ",", &save); v != NULL; v = strtok_r(NULL, ",", &save)) {
		char **nv = realloc(d->vals, (d->n + 1) * sizeof *nv);
		if (nv == NULL || (nv[d->n] = strdup(v)) == NULL)
			return tune_error("%s", "out of memory");
		d->vals = nv;
		d->n++;
	}
	free(copy);
	if (d->n == 0)
		return tune_error("no value in '%s'", list);
	if (kind == DIM_TILE) {
		d->stage = strndup(name, strlen(name) - strlen(".tile"));
		if (d->stage == NULL || d->stage[0] == '\0')
			return tune_error("--vary %s: expects STAGE.tile", name);
	}
	t->ndims++;
	return 0;
}

static int add_vary(tune_t *t, const char *spec)
{
	const char *eq = strchr(spec, '=');
	if (eq == NULL || eq == spec || eq[1] == '\0')
		return tune_error("--vary expects NAME=V1,V2,..., got '%s'", spec);
	char name[128];
	size_t len = (size_t)(eq - spec);
	if (len >= sizeof name)
		return tune_error("--vary: name too long in '%s'", spec);
	memcpy(name, spec, len);
	name[len] = '\0';
	dimkind_t kind = DIM_VAR;
	if (len > 5 && strcmp(name + len - 5, ".tile") == 0)
		kind = DIM_TILE;
	else if (strcmp(name, "inflight") == 0)
		kind = DIM_INFLIGHT;
	else if (strcmp(name, "workers-per-gpu") == 0)
		kind = DIM_WPG;
	else if (strchr(name, '.') != NULL)
		return tune_error("--vary %s: of a stage only STAGE.tile can vary (set parameters "
				  "through pipeline variables)", name);
	return add_dim(t, kind, name, eq + 1);
}

static int parse(tune_t *t, int argc, char **argv)
{
	t->repeat = 3;
	t->fwd = calloc((size_t)argc + 1, sizeof *t->fwd);
	if (t->fwd == NULL)
		return tune_error("%s", "out of memory");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;
		static const char *const mine[] = { "--sched", "--ncpus", "--ncuda", "--vary",
						    "--repeat", "--out", "--simulate" };
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			fputs(tune_usage, stdout);
			exit(0);
		}
		size_t m;
		for (m = 0; m < sizeof mine / sizeof mine[0]; m++) {
			size_t l = strlen(mine[m]);
			if (strncmp(a, mine[m], l) == 0 && (a[l] == '\0' || a[l] == '='))
				break;
		}
		if (m < sizeof mine / sizeof mine[0]) {
			const char *eq = strchr(a, '=');
			if (eq != NULL)
				val = eq + 1;
			else if (i + 1 < argc)
				val = argv[++i];
			else
				return tune_error("%s expects a value", a);
			int r = 0;
			switch (m) {
			case 0: r = add_dim(t, DIM_SCHED, "sched", val); break;
			case 1: r = add_dim(t, DIM_NCPUS, "ncpus", val); break;
			case 2: r = add_dim(t, DIM_NCUDA, "ncuda", val); break;
			case 3: r = add_vary(t, val); break;
			case 4: {
				char *end;
				t->repeat = strtol(val, &end, 10);
				if (*val == '\0' || *end != '\0' || t->repeat < 1 || t->repeat > 1000)
					return tune_error("--repeat expects an integer in [1, 1000], got '%s'", val);
				break;
			}
			case 5: t->out = val; break;
			case 6: t->simulate = val; break;
			}
			if (r != 0)
				return r;
			continue;
		}
		if (in_list(a, owned, sizeof owned / sizeof owned[0]))
			return tune_error("%s: tune sets it for every run (see DIR/runs/)", a);
		t->fwd[t->nfwd++] = argv[i];
		if (strncmp(a, "--perfmodel-dir=", 16) == 0)
			t->pmdir = a + 16;
		if (a[0] == '-' && strchr(a, '=') == NULL && t->takes_value(a) && i + 1 < argc) {
			if (strcmp(a, "--perfmodel-dir") == 0)
				t->pmdir = argv[i + 1];
			t->fwd[t->nfwd++] = argv[++i];
		}
		else if (a[0] != '-' && t->graph == NULL)
			t->graph = a;
	}
	if (t->graph == NULL)
		return tune_error("%s", "missing graph file");
	if (t->out == NULL)
		return tune_error("%s", "--out DIR is required");
	if (t->simulate != NULL) {
		/* starpipe-sim beside this program; the platform in the models' folder */
		char path[4200];
		const char *slash = strrchr(t->exe, '/');
		snprintf(t->sim_exe, sizeof t->sim_exe, "%.*sstarpipe-sim",
			 slash ? (int)(slash - t->exe + 1) : 0, t->exe);
		if (access(t->sim_exe, X_OK) != 0)
			return tune_error("--simulate: no %s (configure --with-starpu-simgrid=PREFIX)",
					  t->sim_exe);
		if (t->pmdir == NULL)
			return tune_error("%s", "--simulate needs --perfmodel-dir DIR, the folder of the "
					  "platform (DIR/bus/HOST.*) and of its models");
		snprintf(path, sizeof path, "%s/bus/%s.platform.v4.xml", t->pmdir, t->simulate);
		if (access(path, R_OK) != 0)
			return tune_error("--simulate: no platform file %s (tools/sim-node writes one "
					  "from tools/platforms/; a real run with STARPU_HOSTNAME=HOST "
					  "measures this machine's)", path);
		t->exe = t->sim_exe;
	}
	t->ncfg = 1;
	for (size_t d = 0; d < t->ndims; d++)
		t->ncfg *= t->dims[d].n;
	if (t->ncfg * (size_t)t->repeat > 100000)
		return tune_error("%s", "more than 100000 runs: narrow the sweep");
	return 0;
}


/* Makes every configuration's label ("sched=lws ncpus=2") once, whole, and
 * the longest's length: the summary's column and the plots' margins are
 * sized from it, so that no label is ever clipped.  0, or -1 out of memory. */
static int make_labels(tune_t *t)
{
	t->labels = calloc(t->ncfg, sizeof *t->labels);
	if (t->labels == NULL)
		return -1;
	for (size_t c = 0; c < t->ncfg; c++) {
		size_t len = 0;
		FILE *f = open_memstream(&t->labels[c], &len);
		if (f == NULL)
			return -1;
		for (size_t d = 0; d < t->ndims; d++)
			fprintf(f, "%s%s=%s", d ? " " : "", t->dims[d].name, tune_dim_val(t, c, d));
		if (t->ndims == 0)
			fputs("graph's runtime", f);
		if (fclose(f) != 0 || t->labels[c] == NULL)
			return -1;
		if (len > t->label_w)
			t->label_w = len;
	}
	return 0;
}


static void add_col(tune_t *t, const char *name)
{
	for (size_t i = 0; i < t->ncols; i++)
		if (strcmp(t->cols[i], name) == 0)
			return;
	char **c = realloc(t->cols, (t->ncols + 1) * sizeof *c);
	if (c == NULL || (c[t->ncols] = strdup(name)) == NULL)
		return;
	t->cols = c;
	t->ncols++;
}


/* Reads a child's NAME<TAB>VALUE figures; a missing file leaves none. */
static void read_figures(const char *path, row_t *r, tune_t *t)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	if (f == NULL)
		return;
	while ((n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[n - 1] = '\0';
		char *tab = strchr(line, '\t');
		if (tab == NULL)
			continue;
		*tab = '\0';
		kv_t *nf = realloc(r->f, (r->nf + 1) * sizeof *nf);
		if (nf == NULL)
			break;
		r->f = nf;
		r->f[r->nf].k = strdup(line);
		r->f[r->nf].v = strdup(tab + 1);
		if (r->f[r->nf].k == NULL || r->f[r->nf].v == NULL)
			break;
		add_col(t, line);
		r->nf++;
	}
	free(line);
	fclose(f);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_dur(char *buf, size_t len, double s)
{
	if (s < 60)
		snprintf(buf, len, "%.0f s", s);
	else if (s < 3600)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
	else
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* In a --simulate run's child: SimGrid loads the platform before
 * starpipe-sim starts. */
static void sim_env(void *arg)
{
	const tune_t *t = arg;
	setenv("STARPU_HOSTNAME", t->simulate, 1);
	setenv("STARPU_PERF_MODEL_DIR", t->pmdir, 1);
}

/* Runs configuration c's repeat rep as a child; fills row r. */
static void run_one(tune_t *t, size_t k, size_t c, int rep, row_t *r)
{
	char base[4096], figs[4200], tasks[4200], report[4200], logp[4200];
	char *argv[256], opt[16][512];
	size_t n = 0, no = 0;

	snprintf(base, sizeof base, "%s/runs/%04zu", t->out, k + 1);
	snprintf(figs, sizeof figs, "%s.fig", base);
	snprintf(tasks, sizeof tasks, "%s.tasks", base);
	snprintf(report, sizeof report, "%s.json", base);
	snprintf(logp, sizeof logp, "%s.log", base);
	unlink(figs);
	argv[n++] = (char *)t->exe;
	argv[n++] = "run";
	for (size_t i = 0; i < t->nfwd && n < 200; i++)
		argv[n++] = t->fwd[i];
	for (size_t d = 0; d < t->ndims; d++) {
		const dim_t *dm = &t->dims[d];
		const char *v = tune_dim_val(t, c, d);
		switch (dm->kind) {
		case DIM_SCHED: argv[n++] = "--sched"; argv[n++] = (char *)v; break;
		case DIM_NCPUS: argv[n++] = "--ncpus"; argv[n++] = (char *)v; break;
		case DIM_NCUDA: argv[n++] = "--ncuda"; argv[n++] = (char *)v; break;
		case DIM_INFLIGHT: argv[n++] = "--inflight"; argv[n++] = (char *)v; break;
		case DIM_WPG: argv[n++] = "--workers-per-gpu"; argv[n++] = (char *)v; break;
		case DIM_TILE:
			snprintf(opt[no], sizeof opt[no], "%s=%s", dm->stage, v);
			argv[n++] = "--tile";
			argv[n++] = opt[no++];
			break;
		case DIM_VAR:
			snprintf(opt[no], sizeof opt[no], "%s=%s", dm->name, v);
			argv[n++] = "--set";
			argv[n++] = opt[no++];
			break;
		}
	}
	argv[n++] = "--figures";
	argv[n++] = figs;
	argv[n++] = "--tasks";
	argv[n++] = tasks;
	argv[n++] = "--report";
	argv[n++] = report;
	argv[n++] = "-q";
	argv[n] = NULL;

	*r = (row_t){ .cfg = c, .rep = rep, .status = "crashed", .code = -1 };
	double t0 = now_s();
	int st = 0, forwarded = 0;
	if (sp_child_run(argv, logp, t->simulate != NULL ? sim_env : NULL, t, "starpipe tune",
			 &stop_signal, &forwarded, &st) != 0) {
		fprintf(stderr, "starpipe tune: fork: %s\n", strerror(errno));
		return;
	}
	r->stopped = forwarded;
	r->wall = now_s() - t0;
	if (WIFEXITED(st)) {
		r->code = WEXITSTATUS(st);
		r->status = r->code == 0 ? "ok" : "failed";
	} else if (WIFSIGNALED(st)) {
		r->code = WTERMSIG(st);
		r->status = "crashed";
	}
	read_figures(figs, r, t);
}


/* labels, the output folders and the rows: 0, or the exit status */
static int tune_prepare(tune_t *t, size_t total)
{
	char path[4200];
	sp_err_t err = { 0 };
	if (make_labels(t) != 0) {
		fprintf(stderr, "starpipe tune: out of memory\n");
		return TUNE_FAILED;
	}
	snprintf(path, sizeof path, "%s/runs", t->out);
	if (sp_mkdirs(path, &err) != 0 ||
	    (snprintf(path, sizeof path, "%s/plots", t->out), sp_mkdirs(path, &err)) != 0) {
		fprintf(stderr, "starpipe tune: %s\n", err.msg);
		return TUNE_USAGE;
	}
	t->rows = calloc(total, sizeof *t->rows);
	if (t->rows == NULL) {
		fprintf(stderr, "starpipe tune: out of memory\n");
		return TUNE_FAILED;
	}
	return 0;
}

/* run k's progress line, and why it failed; 1 when it failed */
static int say_run(const tune_t *t, size_t k, size_t total, long rep, double t0)
{
	const row_t *rw = &t->rows[k];
	char eta[32], took[32];
	double left = (now_s() - t0) / (double)t->nrows * (double)(total - t->nrows);
	fmt_dur(eta, sizeof eta, left);
	snprintf(took, sizeof took, "%.2f s", tune_fig_num(rw, "makespan_s"));
	int ok = strcmp(rw->status, "ok") == 0;
	fprintf(stderr, "[tune] %zu/%zu %s (repeat %ld): %s%s; about %s left\n", k + 1, total,
		tune_cfg_label(t, rw->cfg), rep, ok ? "makespan " : rw->status, ok ? took : "", eta);
	if (ok)
		return 0;
	char why[512];
	tune_why_failed(t->out, k, why, sizeof why);
	fprintf(stderr, "[tune]   %s (%s/runs/%04zu.log)\n", why[0] ? why : "no message", t->out,
		k + 1);
	return 1;
}

/* Every configuration, repeat after repeat, until done or stopped; the CSV
 * rewritten after each run.  1 when a run failed, -1 when the first was
 * refused as a usage error (the same for every run: nothing else is run). */
static int sweep(tune_t *t, size_t total)
{
	double t0 = now_s();
	int failed = 0;
	for (long rep = 1; rep <= t->repeat && !stop_signal; rep++) {
		for (size_t c = 0; c < t->ncfg && !stop_signal; c++) {
			size_t k = t->nrows;
			run_one(t, k, c, (int)rep, &t->rows[k]);
			t->nrows++;
			row_t *rw = &t->rows[k];
			if (rw->stopped) {
				/* the child was stopped mid-way: not a row of the sweep */
				t->nrows--;
				break;
			}
			if (say_run(t, k, total, rep, t0)) {
				failed = 1;
				if (k == 0 && strcmp(rw->status, "failed") == 0 && rw->code == 2) {
					tune_write_csv(t);
					fprintf(stderr, "starpipe tune: the first run was refused; "
						"nothing else was run\n");
					return -1;
				}
			}
			tune_write_csv(t);
		}
	}
	return failed;
}

/* summary.txt (and on stdout) and the plots: 0, 1 when one could not be
 * written, -1 out of memory */
static int write_results(tune_t *t)
{
	char path[4200];
	sp_err_t err = { 0 };
	int failed = 0;
	cstat_t *s = tune_config_stats(t);
	if (s == NULL)
		return -1;
	ranking_t rk = tune_compare_with_best(t, s, tune_nranked(t, s));
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (f != NULL) {
		tune_write_summary(t, s, &rk, f);
		snprintf(path, sizeof path, "%s/summary.txt", t->out);
		if (sp_write_memstream_atomic(path, f, &text, &len, &err) != 0) {
			fprintf(stderr, "starpipe tune: %s\n", err.msg);
			failed = 1;
		}
		if (text != NULL)
			fputs(text, stdout);
		free(text);
	}
	if (tune_plots(t, s, &rk) != 0)
		failed = 1;
	else if (tune_nranked(t, s) > 0)
		fprintf(stderr, "starpipe tune: plots in %s/plots/ (makespan, workers, gantt-best, "
			"gantt-worst; .png and .svg)\n", t->out);
	free(s);
	return failed;
}

int sp_tune_main(int argc, char **argv, const char *exe, int (*takes_value)(const char *opt))
{
	tune_t t = { .exe = exe, .takes_value = takes_value };
	int r = parse(&t, argc, argv);
	if (r != 0)
		return r;
	size_t total = t.ncfg * (size_t)t.repeat;
	if ((r = tune_prepare(&t, total)) != 0)
		return r;
	fprintf(stderr, "starpipe tune: %zu configuration(s) x %ld repeat(s) = %zu run(s) of %s; "
		"results in %s/\n", t.ncfg, t.repeat, total, t.graph, t.out);
	struct sigaction sa = { .sa_handler = on_stop };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	int failed = sweep(&t, total);
	if (failed < 0)
		return TUNE_USAGE;
	t.stopped = stop_signal != 0;
	int w = write_results(&t);
	if (w < 0) {
		fprintf(stderr, "starpipe tune: out of memory\n");
		return TUNE_FAILED;
	}
	failed |= w;
	if (stop_signal) {
		fprintf(stderr, "starpipe tune: interrupted by SIG%s after %zu of %zu run(s); the summary "
			"and plots cover those\n", sigabbrev_np(stop_signal), t.nrows, total);
		return 128 + stop_signal;
	}
	return failed ? TUNE_FAILED : TUNE_OK;
}
