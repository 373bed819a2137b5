/* starpipe tune: runs a graph under every configuration of a sweep and compares them (tune.h). */
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

/* Options of `run` that take a value, so their value is not taken for the graph. */
static const char *const valued[] = { "-s", "-i", "-o", "--set", "--input", "--output",
	"--workers-per-gpu", "--perfmodel-dir", "--calibrate", "--inflight", "--progress-every",
	"--journal", "--shard", "--memory-limit", "--tile", "--sim-count" };
/* Options of `run` that tune sets itself for every run. */
static const char *const owned[] = { "--report", "--trace", "--figures", "--tasks",
	"--skip-existing", "-q", "--quiet", "-v", "--verbose" };

typedef enum { DIM_SCHED, DIM_NCPUS, DIM_NCUDA, DIM_TILE, DIM_INFLIGHT, DIM_WPG, DIM_VAR } dimkind_t;

typedef struct dim {
	dimkind_t kind;
	char *name;   /* CSV column: sched, ncpus, ncuda, STAGE.tile, inflight, ... */
	char *stage;  /* DIM_TILE: the stage */
	char **vals;
	size_t n;
} dim_t;

typedef struct kv {
	char *k, *v;
} kv_t;

typedef struct row {
	size_t cfg;      /* configuration index */
	int rep;         /* 1-based */
	const char *status; /* "ok", "failed" (exit status), "crashed" (signal) */
	int code;        /* exit status or signal number */
	double wall;     /* seconds the child ran */
	kv_t *f;         /* its figures */
	size_t nf;
	int stopped;     /* tune passed a SIGINT/SIGTERM on to it: not a row of the sweep */
} row_t;

typedef struct tune {
	const char *exe, *graph, *out;
	const char *simulate; /* --simulate HOST: the platform's name; NULL: real runs */
	const char *pmdir;    /* the runs' --perfmodel-dir (the platform lives there) */
	char sim_exe[4096];
	char **fwd; /* forwarded arguments */
	size_t nfwd;
	dim_t dims[16];
	size_t ndims;
	long repeat;
	size_t ncfg;
	row_t *rows;
	size_t nrows;
	char **cols;
	size_t ncols;
	char **labels;  /* per configuration (make_labels) */
	size_t label_w; /* the longest label's length */
} tune_t;

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
		if (a[0] == '-' && strchr(a, '=') == NULL &&
		    in_list(a, valued, sizeof valued / sizeof valued[0]) && i + 1 < argc) {
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

/* The value of dimension d in configuration c (mixed radix, first dimension slowest). */
static const char *dim_val(const tune_t *t, size_t c, size_t d)
{
	size_t stride = 1;
	for (size_t e = d + 1; e < t->ndims; e++)
		stride *= t->dims[e].n;
	return t->dims[d].vals[(c / stride) % t->dims[d].n];
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
			fprintf(f, "%s%s=%s", d ? " " : "", t->dims[d].name, dim_val(t, c, d));
		if (t->ndims == 0)
			fputs("graph's runtime", f);
		if (fclose(f) != 0 || t->labels[c] == NULL)
			return -1;
		if (len > t->label_w)
			t->label_w = len;
	}
	return 0;
}

static const char *cfg_label(const tune_t *t, size_t c)
{
	return t->labels[c];
}

/* The graph file's name without its folder: plot titles name what ran, not
 * where it lay on the machine that ran it. */
static const char *graph_name(const tune_t *t)
{
	const char *slash = strrchr(t->graph, '/');
	return slash != NULL ? slash + 1 : t->graph;
}

static const char *fig(const row_t *r, const char *key)
{
	for (size_t i = 0; i < r->nf; i++)
		if (strcmp(r->f[i].k, key) == 0)
			return r->f[i].v;
	return NULL;
}

static double fig_num(const row_t *r, const char *key)
{
	const char *v = fig(r, key);
	return v != NULL ? strtod(v, NULL) : NAN;
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
static int write_csv(const tune_t *t)
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
		csv_field(f, cfg_label(t, r->cfg));
		fprintf(f, ",%d", t->simulate != NULL);
		for (size_t d = 0; d < t->ndims; d++)
			fputc(',', f), csv_field(f, dim_val(t, r->cfg, d));
		snprintf(num, sizeof num, "%.3f", r->wall);
		fprintf(f, ",%d,%s,%d,%s", r->rep, r->status, r->code, num);
		for (size_t c = 0; c < t->ncols; c++)
			fputc(',', f), csv_field(f, fig(r, t->cols[c]));
		fputc('\n', f);
	}
	snprintf(path, sizeof path, "%s/results.csv", t->out);
	int rc = sp_write_memstream_atomic(path, f, &text, &len, &err);
	if (rc != 0)
		fprintf(stderr, "starpipe tune: %s\n", err.msg);
	free(text);
	return rc;
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
		const char *v = dim_val(t, c, d);
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
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (t->simulate != NULL) {
			/* SimGrid loads the platform before starpipe-sim starts */
			setenv("STARPU_HOSTNAME", t->simulate, 1);
			setenv("STARPU_PERF_MODEL_DIR", t->pmdir, 1);
		}
		execv(t->exe, argv);
		fprintf(stderr, "starpipe tune: cannot run %s: %s\n", t->exe, strerror(errno));
		_exit(127);
	}
	int st = 0;
	if (pid < 0) {
		fprintf(stderr, "starpipe tune: fork: %s\n", strerror(errno));
		return;
	}
	/* A kill of tune alone stops its run too. A child that ended before the
	 * signal came is a complete run and keeps its row. */
	int forwarded = 0;
	for (;;) {
		if (stop_signal && !forwarded) {
			kill(pid, stop_signal);
			forwarded = 1;
		}
		if (waitpid(pid, &st, 0) >= 0 || errno != EINTR)
			break;
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

/* Why a child failed: its own first message ("starpipe: ...",
 * "starpipe-sim: ..."), else the first line of its log that is neither
 * StarPU's or SimGrid's ("[starpu]...") nor the indented excerpt under a
 * graph diagnostic (SimGrid also writes unbracketed advice lines). */
static void why_failed(const char *out, size_t k, char *buf, size_t len)
{
	char path[4200], *line = NULL;
	size_t cap = 0;
	ssize_t n;
	snprintf(path, sizeof path, "%s/runs/%04zu.log", out, k + 1);
	buf[0] = '\0';
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return;
	while ((n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[--n] = '\0';
		if (strncmp(line, "starpipe", 8) == 0) {
			snprintf(buf, len, "%s", line);
			break;
		}
		if (buf[0] == '\0' && n > 0 && line[0] != '[' && line[0] != ' ' && line[0] != '\t')
			snprintf(buf, len, "%s", line);
	}
	free(line);
	fclose(f);
}

typedef struct cstat {
	size_t cfg, nok, nrun;
	double med, min, max, bound;
	const char *binds;
	size_t best_row, worst_row; /* its median run's row, for the plots */
	char vs;                    /* against rank 1: VS_TIED, VS_SLOWER, VS_UNTESTED */
} cstat_t;

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
static cstat_t *config_stats(const tune_t *t)
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
			double x = fig_num(r, "makespan_s");
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
			double x = fig_num(r, "makespan_s");
			if (r->cfg == c && strcmp(r->status, "ok") == 0 && fabs(x - s[c].med) < bestd) {
				bestd = fabs(x - s[c].med);
				s[c].best_row = i;
			}
		}
		s[c].bound = fig_num(&t->rows[s[c].best_row], "bound_s");
		s[c].binds = fig(&t->rows[s[c].best_row], "bound_binds");
	}
	free(m);
	qsort(s, t->ncfg, sizeof *s, cmp_cstat);
	return s;
}

static size_t nranked(const tune_t *t, const cstat_t *s)
{
	size_t n = 0;
	while (n < t->ncfg && s[n].nok > 0)
		n++;
	return n;
}

/* How a configuration compares with rank 1, the fastest median (cstat_t.vs). */
enum { VS_TIED = '=', VS_SLOWER = '>', VS_UNTESTED = '?' };

/* Fewest successful runs for a configuration's rank to be tested.  The test:
 * every run of it took longer than every run of rank 1 (their min-max
 * intervals do not overlap).  Two configurations that are in fact the same
 * pass it by chance with probability n! m! / (n + m)! for n and m runs:
 * 1/20 with 3 and 3, the one-sided Mann-Whitney rank test at 5 % (U = 0),
 * less with more runs; with 2 and 2 it is 1/6, far too often. */
#define MIN_TESTED 3

typedef struct ranking {
	int tested;        /* rank 1 had enough runs to be compared with the others */
	int deterministic; /* simulated, and every configuration's repeats agree exactly */
	int checked;       /* ... over 2 repeats or more (with 1, by design only) */
	size_t ntied, nslower, nuntested;
} ranking_t;

/* Marks each ranked configuration '=', '>' or '?' against rank 1. */
static ranking_t compare_with_best(const tune_t *t, cstat_t *s, size_t nr)
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

static void write_summary(const tune_t *t, const cstat_t *s, const ranking_t *k, FILE *f)
{
	size_t nr = nranked(t, s);
	size_t nok = 0, nmeasured = 0;
	int w = (int)(t->label_w > 13 ? t->label_w : 13); /* at least "configuration" */
	for (size_t i = 0; i < t->nrows; i++) {
		nok += strcmp(t->rows[i].status, "ok") == 0;
		nmeasured += fig_num(&t->rows[i], "bound_measured_tasks") > 0;
	}
	fprintf(f, "starpipe tune: %s, %zu configuration(s) x %ld repeat(s): %zu of %zu run(s) ok%s\n",
		t->graph, t->ncfg, t->repeat, nok, t->nrows,
		stop_signal ? " (interrupted: the sweep is incomplete)" : "");
	if (t->simulate != NULL) {
		fprintf(f, "SIMULATED (starpipe-sim, SimGrid) on platform %s: every time below is a "
			"prediction from the performance models in %s\n", t->simulate, t->pmdir);
		const char *hm = NULL;
		for (size_t i = 0; i < t->nrows && hm == NULL; i++)
			hm = fig(&t->rows[i], "sim_host_model");
		if (hm != NULL && strcmp(hm, "none") != 0)
			fprintf(f, "with the host model %s (CPU contention, starvation, host work: "
				"doc/scheduling.md)\n", hm);
		else if (hm != NULL)
			fprintf(f, "without a host model: the models' times alone, as if no task slowed "
				"another (doc/scheduling.md)\n");
	}
	fputc('\n', f);
	fprintf(f, "Ranked by median makespan (first task start to last task end), seconds:\n\n");
	fprintf(f, "%4s %4s  %-*s %5s %9s %19s %9s %7s %s\n", "rank", "vs#1", w, "configuration",
		"runs", "median", "min-max", "bound", "/bound", "binds");
	for (size_t i = 0; i < t->ncfg; i++) {
		const char *label = cfg_label(t, s[i].cfg);
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
	fputc('\n', f);
	if (nr > 0) {
		write_vs_legend(t, k, f);
		fputc('\n', f);
	}
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
			why_failed(t->out, i, why, sizeof why);
			fprintf(f, "run %zu (%s, repeat %d) %s (%s %d): %s\n", i + 1,
				cfg_label(t, t->rows[i].cfg), t->rows[i].rep, t->rows[i].status,
				strcmp(t->rows[i].status, "crashed") ? "exit" : "signal", t->rows[i].code,
				why[0] ? why : "no message");
		}
	if (nr == 0) {
		fprintf(f, "\nNo configuration ran: see the runs' logs in %s/runs/.\n", t->out);
		return;
	}
	const row_t *b = &t->rows[s[0].best_row];
	if (k->tested && k->ntied > 1) {
		/* no winner to crown: every configuration rank 1 cannot be told from */
		fprintf(f, "\nBest: a tie of %zu configurations (vs#1 '='), in rank order:\n",
			k->ntied);
		for (size_t i = 0; i < nr; i++)
			if (s[i].vs == VS_TIED)
				fprintf(f, "  %-*s  median %.3f s (%.3f-%.3f)\n", w, cfg_label(t, s[i].cfg),
					s[i].med, s[i].min, s[i].max);
		fprintf(f, "%s  Rank 1's, for the graph file:\n\nruntime:\n",
			k->deterministic ? "The models predict the same makespan for each: any will do."
					 : "None can be told from rank 1 by these runs: any will do.");
	} else {
		fprintf(f, "\nBest%s: %s (median %.3f s", k->tested ? "" : " by median, not tested",
			cfg_label(t, s[0].cfg), s[0].med);
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
	fprintf(f, "  scheduler: %s\n", fig(b, "scheduler") ? fig(b, "scheduler") : "auto");
	for (size_t d = 0; d < t->ndims; d++) {
		const char *v = dim_val(t, s[0].cfg, d);
		if (t->dims[d].kind == DIM_NCPUS)
			fprintf(f, "  ncpus: %s\n", v);
		else if (t->dims[d].kind == DIM_NCUDA)
			fprintf(f, "  ncuda: %s\n", v);
		else if (t->dims[d].kind == DIM_WPG)
			fprintf(f, "  workers_per_gpu: %s\n", v);
	}
	for (size_t d = 0; d < t->ndims; d++) {
		const char *v = dim_val(t, s[0].cfg, d);
		if (t->dims[d].kind == DIM_TILE)
			fprintf(f, "# and in stages: %s: tile: %s\n", t->dims[d].stage, v);
		else if (t->dims[d].kind == DIM_VAR)
			fprintf(f, "# and in params: %s: %s\n", t->dims[d].name, v);
		else if (t->dims[d].kind == DIM_INFLIGHT)
			fprintf(f, "# and run with --inflight %s\n", v);
	}
}

/* Writes a file under DIR/plots; returns 0 or -1 (with a message). */
static FILE *plot_file(const tune_t *t, const char *name, char *path, size_t len)
{
	snprintf(path, len, "%s/plots/%s", t->out, name);
	FILE *f = fopen(path, "w");
	if (f == NULL)
		fprintf(stderr, "starpipe tune: %s: %s\n", path, strerror(errno));
	return f;
}

/* Pixels per character and per line of the plots' font (sans 10 in
 * pngcairo, generous: a label a little short of its room is still whole). */
enum { CHAR_PX = 8, LINE_PX = 17 };

/* A canvas width (pixels) that holds a title line of the given characters:
 * gnuplot centres a title over the plot, not the canvas, so the margins
 * (a key outside on the right) count twice. */
static int canvas_w(size_t chars, int atleast)
{
	size_t w = chars * CHAR_PX + 2 * 260;
	return w > (size_t)atleast ? (int)(w < 20000 ? w : 20000) : atleast;
}

/* gnuplot's terminal lines for the script's two outputs, PNG then SVG. */
static void plot_outputs(FILE *g, const char *stem, const char *plot, int w, int h)
{
	fprintf(g, "set terminal pngcairo size %d,%d font 'sans,10'\nset output '%s.png'\n%s\n", w,
		h, stem, plot);
	fprintf(g, "set terminal svg size %d,%d font 'sans,10' background '#ffffff'\n"
		   "set output '%s.svg'\n%s\n",
		w, h, stem, plot);
}

/* Text inside a double-quoted gnuplot string. */
static void gp_str(FILE *g, const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', g);
		if (*s == '\n')
			fputs("\\n", g);
		else
			fputc(*s, g);
	}
}

/* `set title`: a line for what ran (SIMULATED and the platform when it was:
 * a plot is often seen without its summary; the graph file's name), then
 * text, whose '\n' break lines.  Returns the longest line's length. */
static size_t gp_title(FILE *g, const tune_t *t, const char *text)
{
	char *head = NULL;
	size_t len = 0, longest = 0, run = 0;
	FILE *m = open_memstream(&head, &len);
	if (m == NULL)
		return 0;
	if (t->simulate != NULL)
		fprintf(m, "SIMULATED (SimGrid, platform %s): ", t->simulate);
	fprintf(m, "%s\n%s", graph_name(t), text);
	if (fclose(m) != 0 || head == NULL)
		return 0;
	fputs("set title \"", g);
	gp_str(g, head);
	fputs("\" noenhanced\n", g);
	for (const char *p = head;; p++) {
		if (*p == '\n' || *p == '\0') {
			longest = run > longest ? run : longest;
			run = 0;
			if (*p == '\0')
				break;
		} else {
			run++;
		}
	}
	free(head);
	return longest;
}

/* A plot script's head: its comment line and its title (printf-style).
 * Returns the canvas width the title needs (at least 1200), or -1. */
static int plot_head(FILE *g, const tune_t *t, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int plot_head(FILE *g, const tune_t *t, const char *fmt, ...)
{
	char *title = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&title, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	fprintf(g, "# gnuplot script written by starpipe tune; run it in this folder\n");
	int w = canvas_w(gp_title(g, t, title), 1200);
	free(title);
	return w;
}

/* Orders worker names as people count them: cpu2 before cpu10, CPUs before
 * cuda0 (runs of digits compare as numbers). */
static int natcmp(const char *a, const char *b)
{
	while (*a != '\0' && *b != '\0') {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			char *ea, *eb;
			unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
			if (x != y)
				return x < y ? -1 : 1;
			a = ea;
			b = eb;
			continue;
		}
		if (*a != *b)
			break;
		a++;
		b++;
	}
	return (unsigned char)*a - (unsigned char)*b;
}

static int natcmp_p(const void *a, const void *b)
{
	return natcmp(*(const char *const *)a, *(const char *const *)b);
}

static int plot_makespan(const tune_t *t, const cstat_t *s, size_t nr)
{
	char path[4200];
	int has[3] = { 0, 0, 0 }; /* '=', '>', '?' */
	FILE *d = plot_file(t, "makespan.dat", path, sizeof path);
	if (d == NULL)
		return -1;
	fprintf(d, "# rank median min max bound vs#1 label\n");
	for (size_t i = 0; i < nr; i++) {
		fprintf(d, "%zu %.6f %.6f %.6f %.6f %c \"%s\"\n", i + 1, s[i].med, s[i].min, s[i].max,
			s[i].bound, s[i].vs, cfg_label(t, s[i].cfg));
		has[s[i].vs == VS_TIED ? 0 : s[i].vs == VS_SLOWER ? 1 : 2] = 1;
	}
	fclose(d);
	FILE *g = plot_file(t, "makespan.gp", path, sizeof path);
	if (g == NULL)
		return -1;
	char title[160];
	snprintf(title, sizeof title,
		 "makespan per configuration, fastest first (%ld repeat(s); bar: median, whiskers: "
		 "min-max)", t->repeat);
	fprintf(g, "# gnuplot script written by starpipe tune; run it in this folder\n");
	size_t tw = gp_title(g, t, title);
	/* The labels stand vertical under their bars (slanted, a long first one
	 * would run off the left edge), with the bottom margin their length; no
	 * xlabel (gnuplot places it by its own, shorter, estimate of theirs). The
	 * key goes inside, over headroom, leaving the plot the canvas' width. */
	int margin = (int)(t->label_w * CHAR_PX / LINE_PX) + 2;
	int w = canvas_w(tw, 1200), h = 450 + margin * LINE_PX;
	if ((int)nr * 2 * LINE_PX + 200 > w)
		w = (int)nr * 2 * LINE_PX + 200; /* a label's line per bar, and a gap */
	fprintf(g, "set ylabel 'makespan (s)'\n"
		   "set yrange [0:*]\nset offsets 0, 0, graph 0.35, 0\nset xrange [0.3:%zu.7]\n"
		   "set grid ytics\nset xtics rotate by 90 right noenhanced\n"
		   "set key inside left top noenhanced\n"
		   "set style fill solid 0.35\nset boxwidth 0.6\nset bmargin %d\n",
		nr, margin);
	/* a colour per vs#1 mark, so the plot does not crown a winner either */
	static const char *const cls[3][3] = {
		{ "=", "#4477aa", "median, not distinguishable from the fastest (=)" },
		{ ">", "#99bbdd", "median, slower than the fastest (>)" },
		{ "?", "#4477aa", "median (not tested: ?)" },
	};
	char plot[2048];
	size_t o = (size_t)snprintf(plot, sizeof plot, "plot ");
	for (int c = 0; c < 3; c++)
		if (has[c])
			o += (size_t)snprintf(plot + o, sizeof plot - o,
					      "'makespan.dat' using 1:(strcol(6) eq '%s' ? $2 : NaN) with boxes "
					      "lc rgb '%s' title '%s', \\\n     ",
					      cls[c][0], cls[c][1], cls[c][2]);
	snprintf(plot + o, sizeof plot - o,
		 "'makespan.dat' using 1:2:3:4:xtic(7) with yerrorbars lc rgb '#222222' pt -1 "
		 "title 'min-max', \\\n"
		 "     '' using 1:5 with points pt 9 ps 1.5 lc rgb '#cc3311' title 'lower bound (models)'");
	plot_outputs(g, "makespan", plot, w, h);
	fclose(g);
	return 0;
}

/* Worker names of a run (cpu0, cpu1, ..., cuda0), in natural order. */
static size_t worker_names(const row_t *r, const char **w, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < r->nf && n < max; i++)
		if (strncmp(r->f[i].k, "busy:", 5) == 0)
			w[n++] = r->f[i].k + 5;
	qsort(w, n, sizeof *w, natcmp_p);
	return n;
}

static int plot_workers(const tune_t *t, const cstat_t *s, size_t nr)
{
	char path[4200], key[80];
	FILE *d = plot_file(t, "workers.dat", path, sizeof path);
	if (d == NULL)
		return -1;
	fprintf(d, "# label busy transfer idle (fractions of the makespan)\n");
	size_t pick[2] = { 0, nr - 1 }, nbars = 0, longest = 0;
	for (int b = 0; b < (nr > 1 ? 2 : 1); b++) {
		const row_t *r = &t->rows[s[pick[b]].best_row];
		const char *w[512];
		size_t nw = worker_names(r, w, 512);
		for (size_t i = 0; i < nw; i++) {
			double x[3];
			const char *what[3] = { "busy", "transfer", "idle" };
			for (int k = 0; k < 3; k++) {
				snprintf(key, sizeof key, "%s:%s", what[k], w[i]);
				x[k] = fig_num(r, key);
			}
			fprintf(d, "\"%s: %s\" %.4f %.4f %.4f\n", b == 0 ? "best" : "worst", w[i], x[0],
				x[1], x[2]);
			if (strlen(w[i]) + 7 > longest)
				longest = strlen(w[i]) + 7;
		}
		nbars += nw;
		fprintf(d, "# %s: %s\n", b == 0 ? "best" : "worst", cfg_label(t, s[pick[b]].cfg));
	}
	fclose(d);
	char worst[1200] = "";
	if (nr > 1)
		snprintf(worst, sizeof worst, "\nworst (rank %zu): %s", nr, cfg_label(t, s[nr - 1].cfg));
	FILE *g = plot_file(t, "workers.gp", path, sizeof path);
	int w = g == NULL ? -1 : plot_head(g, t, "per-worker time of the median run of\nbest (rank 1, "
					  "the fastest median): %s%s", cfg_label(t, s[0].cfg), worst);
	if (w < 0) {
		if (g != NULL)
			fclose(g);
		return -1;
	}
	if ((int)nbars * LINE_PX + 300 > w)
		w = (int)nbars * LINE_PX + 300;
	fprintf(g, "set ylabel 'fraction of the makespan'\nset yrange [0:1.05]\nset grid ytics\n"
		   "set style data histograms\nset style histogram rowstacked\n"
		   "set style fill solid 0.8 border -1\nset boxwidth 0.7\n"
		   "set key outside right top\nset xtics rotate by 90 right noenhanced\n"
		   "set bmargin %d\n",
		(int)(longest * CHAR_PX / LINE_PX) + 3);
	plot_outputs(g, "workers",
		     "plot 'workers.dat' using 2:xtic(1) lc rgb '#228833' title 'busy (tasks)', \\\n"
		     "     '' using 3 lc rgb '#ccbb44' title 'transfers (estimated)', \\\n"
		     "     '' using 4 lc rgb '#bbbbbb' title 'idle'",
		     w, 700);
	fclose(g);
	return 0;
}

/* A Gantt chart of one run from its task file: a row per worker, in natural
 * order from the top, a colour per stage. */
static int plot_gantt(const tune_t *t, const char *stem, const char *what, size_t row,
		      const char *label)
{
	char src[4200], path[4200], *line = NULL;
	size_t cap = 0;
	ssize_t n;
	snprintf(src, sizeof src, "%s/runs/%04zu.tasks", t->out, row + 1);
	FILE *in = fopen(src, "r");
	if (in == NULL)
		return -1;
	char *stages[64], *workers[512];
	size_t ns = 0, nw = 0;
	double t_end = 0;
	/* two passes over the file: the stage and worker names, then the boxes */
	char dat[256];
	snprintf(dat, sizeof dat, "%s.dat", stem);
	FILE *d = plot_file(t, dat, path, sizeof path);
	if (d == NULL) {
		fclose(in);
		return -1;
	}
	for (int pass = 0; pass < 2; pass++) {
		rewind(in);
		if (pass)
			qsort(workers, nw, sizeof *workers, natcmp_p);
		for (size_t st = 0; st < (pass ? ns : 1); st++) {
			if (pass)
				fprintf(d, "# stage %s\n", stages[st]);
			rewind(in);
			while ((n = getline(&line, &cap, in)) > 0) {
				char *f[5], *save = NULL;
				int k = 0;
				for (char *p = strtok_r(line, "\t\n", &save); p && k < 5;
				     p = strtok_r(NULL, "\t\n", &save))
					f[k++] = p;
				if (k < 5)
					continue;
				size_t si, wi;
				for (si = 0; si < ns && strcmp(stages[si], f[1]) != 0; si++)
					;
				for (wi = 0; wi < nw && strcmp(workers[wi], f[0]) != 0; wi++)
					;
				if (!pass) {
					if (si == ns && ns < 64)
						stages[ns++] = strdup(f[1]);
					if (wi == nw && nw < 512)
						workers[nw++] = strdup(f[0]);
					if (strtod(f[4], NULL) > t_end)
						t_end = strtod(f[4], NULL);
				} else if (si == st && wi < nw) {
					fprintf(d, "%s %s %zu\n", f[3], f[4], wi);
				}
			}
			if (pass)
				fprintf(d, "\n\n");
		}
	}
	free(line);
	fclose(in);
	fclose(d);
	char gpn[256];
	snprintf(gpn, sizeof gpn, "%s.gp", stem);
	FILE *g = plot_file(t, gpn, path, sizeof path);
	int w = g == NULL ? -1 : plot_head(g, t, "%s run: %s", what, label);
	if (w < 0) {
		if (g != NULL)
			fclose(g);
		return -1;
	}
	int h = (int)nw * LINE_PX + 250;
	h = h > 700 ? h : 700;
	/* reversed: the first worker on top, as the ytics read */
	fprintf(g, "set xlabel 'time since the first task started (s)'\n"
		   "set ylabel 'worker'\nset yrange [%zu.6:-0.6]\nset ytics (", nw ? nw - 1 : 0);
	for (size_t i = 0; i < nw; i++)
		fprintf(g, "%s'%s' %zu", i ? ", " : "", workers[i], i);
	/* Boxes without a border: a row of many short tasks would be the border's
	 * black alone.  Boxes wider than a few pixels get an outline (drawn
	 * after), so that long tasks of one stage still read as separate. */
	double wide = 4.0 * t_end / (w > 400 ? w - 300 : 100);
	fprintf(g, ")\nset grid xtics\nset key outside right top noenhanced\n"
		   "set style fill solid 0.85 noborder\nstages = \"");
	for (size_t i = 0; i < ns; i++)
		fprintf(g, "%s%s", i ? " " : "", stages[i]);
	fprintf(g, "\"\nwide = %.9g\n", wide);
	char plot[1024];
	snprintf(plot, sizeof plot,
		 "plot for [i=0:%zu] '%s' index i using 1:3:1:2:($3-0.38):($3+0.38) "
		 "with boxxyerror lc i+1 title word(stages, i+1), \\\n"
		 "     '%s' using (($2-$1) >= wide ? $1 : NaN):3:1:2:($3-0.38):($3+0.38) "
		 "with boxxyerror lc rgb '#333333' fs empty border lc rgb '#333333' notitle",
		 ns ? ns - 1 : 0, dat, dat);
	plot_outputs(g, stem, plot, w, h);
	fclose(g);
	for (size_t i = 0; i < ns; i++)
		free(stages[i]);
	for (size_t i = 0; i < nw; i++)
		free(workers[i]);
	return 0;
}

/* Runs gnuplot on one script in DIR/plots; 0 when it worked. */
static int gnuplot(const tune_t *t, const char *script)
{
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/plots", t->out);
	pid_t pid = fork();
	if (pid == 0) {
		if (chdir(dir) != 0)
			_exit(127);
		execlp("gnuplot", "gnuplot", script, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	if (pid < 0)
		return -1;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : WIFEXITED(st) && WEXITSTATUS(st) == 127 ? 127 : -1;
}

static int plots(const tune_t *t, const cstat_t *s, const ranking_t *k)
{
	size_t nr = nranked(t, s);
	if (nr == 0)
		return 0;
	int bad = 0;
	bad |= plot_makespan(t, s, nr) != 0;
	bad |= plot_workers(t, s, nr) != 0;
	char *full = NULL;
	/* in a tie, "best" is only the fastest median: the title says so */
	if (asprintf(&full, "%s (makespan %.3f s)%s", cfg_label(t, s[0].cfg),
		     fig_num(&t->rows[s[0].best_row], "makespan_s"),
		     k->tested && k->ntied > 1 ? "\nrank 1 of a tie: see summary.txt" : "") < 0)
		return -1;
	bad |= plot_gantt(t, "gantt-best", "best", s[0].best_row, full) != 0;
	free(full);
	if (asprintf(&full, "%s (makespan %.3f s)", cfg_label(t, s[nr - 1].cfg),
		     fig_num(&t->rows[s[nr - 1].best_row], "makespan_s")) < 0)
		return -1;
	bad |= plot_gantt(t, "gantt-worst", "worst", s[nr - 1].best_row, full) != 0;
	free(full);
	if (bad)
		return -1;
	static const char *const scripts[] = { "makespan.gp", "workers.gp", "gantt-best.gp",
					       "gantt-worst.gp" };
	for (size_t i = 0; i < 4; i++) {
		int r = gnuplot(t, scripts[i]);
		if (r == 127) {
			fprintf(stderr, "starpipe tune: gnuplot not found: the plot data and scripts are in "
				"%s/plots/, no images (install gnuplot-nox)\n", t->out);
			return -1;
		}
		if (r != 0) {
			fprintf(stderr, "starpipe tune: gnuplot failed on %s/plots/%s\n", t->out, scripts[i]);
			return -1;
		}
	}
	return 0;
}

int sp_tune_main(int argc, char **argv, const char *exe)
{
	tune_t t = { .exe = exe };
	char path[4200], eta[32], took[32];
	sp_err_t err = { 0 };
	int r = parse(&t, argc, argv);
	if (r != 0)
		return r;
	if (make_labels(&t) != 0) {
		fprintf(stderr, "starpipe tune: out of memory\n");
		return TUNE_FAILED;
	}
	snprintf(path, sizeof path, "%s/runs", t.out);
	if (sp_mkdirs(path, &err) != 0 ||
	    (snprintf(path, sizeof path, "%s/plots", t.out), sp_mkdirs(path, &err)) != 0) {
		fprintf(stderr, "starpipe tune: %s\n", err.msg);
		return TUNE_USAGE;
	}
	size_t total = t.ncfg * (size_t)t.repeat;
	t.rows = calloc(total, sizeof *t.rows);
	if (t.rows == NULL) {
		fprintf(stderr, "starpipe tune: out of memory\n");
		return TUNE_FAILED;
	}
	fprintf(stderr, "starpipe tune: %zu configuration(s) x %ld repeat(s) = %zu run(s) of %s; "
		"results in %s/\n", t.ncfg, t.repeat, total, t.graph, t.out);
	double t0 = now_s();
	int failed = 0;
	struct sigaction sa = { .sa_handler = on_stop };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	for (long rep = 1; rep <= t.repeat && !stop_signal; rep++) {
		for (size_t c = 0; c < t.ncfg && !stop_signal; c++) {
			size_t k = t.nrows;
			const char *label = cfg_label(&t, c);
			run_one(&t, k, c, (int)rep, &t.rows[k]);
			t.nrows++;
			row_t *rw = &t.rows[k];
			if (rw->stopped) {
				/* the child was stopped mid-way: not a row of the sweep */
				t.nrows--;
				break;
			}
			double left = (now_s() - t0) / (double)t.nrows * (double)(total - t.nrows);
			fmt_dur(eta, sizeof eta, left);
			snprintf(took, sizeof took, "%.2f s", fig_num(rw, "makespan_s"));
			fprintf(stderr, "[tune] %zu/%zu %s (repeat %ld): %s%s; about %s left\n", k + 1,
				total, label, rep, strcmp(rw->status, "ok") == 0 ? "makespan " : rw->status,
				strcmp(rw->status, "ok") == 0 ? took : "", eta);
			if (strcmp(rw->status, "ok") != 0) {
				char why[512];
				failed = 1;
				why_failed(t.out, k, why, sizeof why);
				fprintf(stderr, "[tune]   %s (%s/runs/%04zu.log)\n", why[0] ? why : "no message",
					t.out, k + 1);
				/* a usage error is the same for every run: stop at once */
				if (k == 0 && strcmp(rw->status, "failed") == 0 && rw->code == 2) {
					write_csv(&t);
					fprintf(stderr, "starpipe tune: the first run was refused; "
						"nothing else was run\n");
					return TUNE_USAGE;
				}
			}
			write_csv(&t);
		}
	}
	cstat_t *s = config_stats(&t);
	if (s == NULL) {
		fprintf(stderr, "starpipe tune: out of memory\n");
		return TUNE_FAILED;
	}
	ranking_t rk = compare_with_best(&t, s, nranked(&t, s));
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (f != NULL) {
		write_summary(&t, s, &rk, f);
		snprintf(path, sizeof path, "%s/summary.txt", t.out);
		if (sp_write_memstream_atomic(path, f, &text, &len, &err) != 0) {
			fprintf(stderr, "starpipe tune: %s\n", err.msg);
			failed = 1;
		}
		if (text != NULL)
			fputs(text, stdout);
		free(text);
	}
	if (plots(&t, s, &rk) != 0)
		failed = 1;
	else if (nranked(&t, s) > 0)
		fprintf(stderr, "starpipe tune: plots in %s/plots/ (makespan, workers, gantt-best, "
			"gantt-worst; .png and .svg)\n", t.out);
	free(s);
	if (stop_signal) {
		fprintf(stderr, "starpipe tune: interrupted by SIG%s after %zu of %zu run(s); the summary "
			"and plots cover those\n", sigabbrev_np(stop_signal), t.nrows, total);
		return 128 + stop_signal;
	}
	return failed ? TUNE_FAILED : TUNE_OK;
}

/* One line of PMDIR/starpipe-estimated.tsv (tools/sim-node). */
typedef struct est_entry {
	char sym[128], worker[16], origin[128];
	unsigned long fp, n;
	double mean_us;
} est_entry_t;

/* The host name StarPU files the models under (its _starpu_gethostname):
 * STARPU_HOSTNAME, else this machine's name up to its first dot. */
static void models_host(char *buf, size_t len)
{
	const char *forced = getenv("STARPU_HOSTNAME");
	if (forced != NULL && forced[0] != '\0') {
		snprintf(buf, len, "%s", forced);
		return;
	}
	if (gethostname(buf, len - 1) != 0)
		buf[0] = '\0';
	buf[len - 1] = '\0';
	buf[strcspn(buf, ".")] = '\0';
}

/* tools/sim-node's entries for host in dir; *n of them (NULL when none). */
static est_entry_t *read_estimated(const char *dir, const char *host, size_t *n)
{
	char path[4200], *line = NULL, hst[256];
	size_t cap = 0;
	est_entry_t *e = NULL;
	*n = 0;
	snprintf(path, sizeof path, "%s/starpipe-estimated.tsv", dir);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return NULL;
	while (getline(&line, &cap, f) > 0) {
		est_entry_t x;
		if (line[0] == '#' ||
		    sscanf(line, "%127[^\t]\t%255[^\t]\t%15[^\t]\t%lx\t%lu\t%lf\t%127[^\n]", x.sym, hst,
			   x.worker, &x.fp, &x.n, &x.mean_us, x.origin) != 7 ||
		    strcmp(hst, host) != 0)
			continue;
		est_entry_t *ne = realloc(e, (*n + 1) * sizeof *ne);
		if (ne == NULL)
			break;
		e = ne;
		e[(*n)++] = x;
	}
	free(line);
	fclose(f);
	return e;
}

void sp_tune_flag_estimated(const char *listing, FILE *out)
{
	char dir[4096], host[256];
	size_t ne = 0, nflag = 0;
	/* the listing's first line names the folder it read */
	if (sscanf(listing, "# performance models in %4095[^\n]", dir) != 1) {
		fputs(listing, out);
		return;
	}
	models_host(host, sizeof host);
	est_entry_t *e = read_estimated(dir, host, &ne);
	for (const char *p = listing; *p != '\0';) {
		size_t len = strcspn(p, "\n");
		const char *fpp = memmem(p, len, " 0x", 3);
		size_t symlen = strcspn(p, " \n");
		const char *arch = p + symlen + strspn(p + symlen, " ");
		unsigned fp, n;
		double ms;
		const est_entry_t *hit = NULL;
		if (p[0] != '#' && fpp != NULL && sscanf(fpp, " 0x%x %u %lf ms", &fp, &n, &ms) == 3)
			for (size_t i = 0; i < ne && hit == NULL; i++)
				if (strlen(e[i].sym) == symlen && strncmp(e[i].sym, p, symlen) == 0 &&
				    strncmp(arch, e[i].worker, strlen(e[i].worker)) == 0 &&
				    isdigit((unsigned char)arch[strlen(e[i].worker)]) && e[i].fp == fp)
					hit = &e[i];
		fwrite(p, 1, len, out);
		if (hit != NULL) {
			/* the listing rounds the mean to the microsecond */
			int same = n == hit->n && fabs(ms * 1e3 - hit->mean_us) <= 0.5 + 1e-6 * hit->mean_us;
			const char *sep = len >= 2 && p[len - 1] == ' ' && p[len - 2] == ' ' ? "" : "; ";
			if (same)
				fprintf(out, "%sESTIMATED by tools/sim-node: %s", sep, hit->origin);
			else if (n > hit->n)
				fprintf(out, "%sESTIMATED in part: calibrated since, but may keep tools/sim-node's "
					"%lu samples (--calibrate 2 drops them)", sep, hit->n);
			nflag += same || n > hit->n;
		}
		p += len;
		if (*p == '\n')
			fputc(*p++, out);
	}
	if (nflag > 0)
		fprintf(out, "# %zu entr%s ESTIMATED by tools/sim-node for %s, not measured there "
			"(%s/starpipe-estimated.tsv): calibrate on that node to replace them\n",
			nflag, nflag > 1 ? "ies" : "y", host, dir);
	free(e);
}
