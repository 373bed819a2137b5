/* Internal to starpipe tune (src/tune/): the sweep, its runs' rows, the
 * configurations' statistics, and the functions its files share. */
#ifndef SP_TUNE_INT_H
#define SP_TUNE_INT_H

#include <stdio.h>

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
	int (*takes_value)(const char *opt); /* run's options that take a value */
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
	int stopped;    /* a SIGINT or SIGTERM stopped the sweep: it is incomplete */
	size_t label_w; /* the longest label's length */
} tune_t;

typedef struct cstat {
	size_t cfg, nok, nrun;
	double med, min, max, bound;
	const char *binds;
	size_t best_row, worst_row; /* its median run's row, for the plots */
	char vs;                    /* against rank 1: VS_TIED, VS_SLOWER, VS_UNTESTED */
} cstat_t;

/* How a configuration compares with rank 1, the fastest median (cstat_t.vs). */
enum { VS_TIED = '=', VS_SLOWER = '>', VS_UNTESTED = '?' };

typedef struct ranking {
	int tested;        /* rank 1 had enough runs to be compared with the others */
	int deterministic; /* simulated, and every configuration's repeats agree exactly */
	int checked;       /* ... over 2 repeats or more (with 1, by design only) */
	size_t ntied, nslower, nuntested;
} ranking_t;

/* Fewest successful runs for a configuration's rank to be tested.  The test:
 * every run of it took longer than every run of rank 1 (their min-max
 * intervals do not overlap).  Two configurations that are in fact the same
 * pass it by chance with probability n! m! / (n + m)! for n and m runs:
 * 1/20 with 3 and 3, the one-sided Mann-Whitney rank test at 5 % (U = 0),
 * less with more runs; with 2 and 2 it is 1/6, far too often. */
#define MIN_TESTED 3

/* sweep.c: a configuration's label ("sched=lws ncpus=2"), the graph's file
 * name, a run's figure (NULL / NaN when absent). */
const char *tune_cfg_label(const tune_t *t, size_t c);
const char *tune_graph_name(const tune_t *t);
const char *tune_fig(const row_t *r, const char *key);
double tune_fig_num(const row_t *r, const char *key);
/* The value of dimension d in configuration c; why run k failed (from its log). */
const char *tune_dim_val(const tune_t *t, size_t c, size_t d);
void tune_why_failed(const char *out, size_t k, char *buf, size_t len);

/* summary.c: results.csv; per-configuration statistics ranked by median
 * makespan and compared with the fastest; summary.txt. */
int tune_write_csv(const tune_t *t);
cstat_t *tune_config_stats(const tune_t *t);
size_t tune_nranked(const tune_t *t, const cstat_t *s);
ranking_t tune_compare_with_best(const tune_t *t, cstat_t *s, size_t nr);
void tune_write_summary(const tune_t *t, const cstat_t *s, const ranking_t *k, FILE *f);

/* plots.c: DIR/plots/ (gnuplot): makespans, workers' busy/idle, Gantt charts. */
int tune_plots(const tune_t *t, const cstat_t *s, const ranking_t *k);

#endif /* SP_TUNE_INT_H */
