/* Internal to the starpipe command (src/cli/): its options, commands and exit statuses. */
#ifndef SP_CLI_H
#define SP_CLI_H

#include <stddef.h>

#include "graph.h"
#include "stage.h"

/* Exit statuses (documented in starpipe.1; tests/cli.test checks them). */
enum {
	EXIT_ITEMS_FAILED = 1, /* some work items failed; the others are done */
	EXIT_USAGE = 2,        /* bad usage, invalid graph, refused plan */
	EXIT_NO_INPUT = 3,     /* nothing matched the inputs */
	EXIT_RUNTIME = 4,      /* the runtime (StarPU) could not start */
	EXIT_INTERRUPTED = 5,  /* stopped on request by SIGHUP or SIGUSR1 */
	/* SIGINT and SIGTERM give 128 + the signal: 130 and 143 */
};

/* The command line, parsed. */
struct cli {
	const char *cmd, *graph;
	sp_var_t vars[128];
	size_t nvars;
	const char *rt[SP_RT_NPARAMS]; /* --sched, --ncpus ...: the runtime: section's values, by SP_RT_* */
	const char *report, *trace, *journal, *figures, *tasks;
	const char *tiles[32]; /* --tile STAGE=N */
	size_t ntiles;
	int skip_existing;
	unsigned long long memory_limit;
	long shard_i, shard_k; /* --shard I/K; K = 0: all items */
	long core_first, core_last; /* --cores FIRST-LAST; core_last < 0: not given */
	char **items; /* work items given after the graph (run only) */
	size_t nitems;
	long inflight;
	double progress_every;
	int quiet, verbose;
	const char *node_type; /* --node-type; NULL: the default (sp_runtime_node_type) */
	const char *manifest;  /* --manifest FILE: the items, instead of the graph's inputs: */
	const char *follow;    /* --follow DIR: process files as they appear in DIR */
	double settle_s;       /* --settle S: a file is complete when unchanged for S */
	double idle_exit_s;    /* --idle-exit S: end after S with nothing to do; 0: never */
	double item_timeout_s; /* --item-timeout S: an item running longer fails; 0: none */
	long max_runs;         /* calibrate --max-runs; 0: not given */
};

/* --manifest FILE: g's inputs become that manifest (run, validate, dot). */
void cli_apply_manifest(const struct cli *c, sp_graph_t *g);
/* validate: a manifest's columns (of the graph's inputs: or --manifest)
 * checked against g, and every distinct row's values loaded: 0, or the
 * problem said and EXIT_USAGE. */
int cli_check_manifest(const struct cli *c, const sp_graph_t *g);

/* cmd_run.c: the batch's work items (malloc'd strings); a manifest's
 * columns, and the graph of each item (NULL: g) among the distinct rows'
 * graphs. */
struct items {
	char **v;
	size_t n;
	sp_item_table_t tab;
	sp_graph_t **graphs;   /* [n] */
	sp_graph_t **variants; /* [nvariants], owned */
	size_t nvariants;
};
void cli_items_free(struct items *it);
struct sp_run_opts;
struct sp_run_result;
struct sp_runtime_params;
/* The plan of a batch's items (collisions, inputs that are outputs, the
 * logs, --shard) into ro: 0 or the exit status. */
int cli_plan_batch(const struct cli *c, const sp_graph_t *g, struct items *it,
		   struct sp_run_opts *ro);
/* --ncpus 0 with CPU-only stages: 0 or EXIT_USAGE, said. */
int cli_check_workers(const sp_graph_t *g, const struct sp_runtime_params *p);
/* StarPU started for the command (0 or EXIT_RUNTIME, said), and ended:
 * sp_run's return ret and its result res (freed) give the exit status; the
 * summary and the report files are written first. */
int cli_session_start(const struct cli *c, const sp_graph_t *g, const struct sp_runtime_params *p);
int cli_session_end(const struct cli *c, const sp_graph_t *g, int ret, struct sp_run_result *res,
		    size_t nitems);
/* cmd_follow.c: starpipe run --follow DIR. */
int cli_cmd_follow(const struct cli *c, const sp_graph_t *g, const struct sp_runtime_params *p,
		   struct sp_run_opts *ro);

/* args.c */
int cli_parse_args(int argc, char **argv, struct cli *c);
/* Whether `arg` ("-s", "--perfmodel-dir") is an option of run that takes
 * the next argument as its value: for the commands that pass run's options
 * on to child runs (tune, calibrate), from the one option table. */
int cli_run_option_takes_value(const char *arg);
/* Prints "starpipe: MESSAGE" and the --help hint on rank 0 (MPI: every rank
 * has the same command line; rank 0 says it); returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, const char *arg);
extern const char cli_usage_text[];

/* Prints "starpipe: MESSAGE\n" on stderr, on rank 0 only: what concerns
 * the batch is said once in an MPI job. */
void cli_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* cmd_info.c: starpipe list, starpipe models [GRAPH]. */
/* The stage kinds of the pipelines and the runtime's scheduler check, for
 * sp_graph_load() (src/cli/registry.c): the layers below are handed what
 * they need of those above, and call nothing up. */
const sp_registry_t *cli_registry(void);

int cli_cmd_list(void);
int cli_cmd_models(const struct cli *c);

/* cmd_calibrate.c: starpipe calibrate GRAPH [ITEM...]: runs of GRAPH as
 * children of exe (this program) until its models are calibrated. */
int cli_cmd_calibrate(const struct cli *c, int argc, char **argv, const char *exe);

/* cmd_run.c: starpipe run GRAPH [ITEM...]; --tile STAGE=N applied to g. */
int cli_cmd_run(struct cli *c, sp_graph_t *g);
int cli_apply_tiles(const struct cli *c, sp_graph_t *g);

/* signals.c: SIGINT, SIGTERM, SIGHUP and SIGUSR1 stop the batch cleanly;
 * the exit status for the signal that stopped it. */
/* Execs starpipe again with OPENBLAS_CORETYPE=Haswell when OpenBLAS chose
 * generic kernels on a CPU with AVX2 (blas.c); returns when it does not. */
void cli_blas_check(char **argv);
/* "BLAS: OpenBLAS, <core> kernels ..." for --version. */
void cli_blas_describe(char *buf, size_t len);

void cli_catch_stop_signals(void);
int cli_exit_for_signal(int sig);

#endif /* SP_CLI_H */
