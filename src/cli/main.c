/* The starpipe command: parses the command line, prints, and calls the library. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "graph.h"
#include "cluster.h"
#include "run.h"
#include "sched_hp.h"
#include "runtime.h"
#include "stage.h"
#include "tune.h"
#ifdef SP_SIMGRID
#include <starpu_simgrid_wrap.h> /* main becomes an actor of the simulation */
#endif

/* Exit statuses (documented in starpipe.1; tests/cli.test checks them). */
enum {
	EXIT_ITEMS_FAILED = 1, /* some work items failed; the others are done */
	EXIT_USAGE = 2,        /* bad usage, invalid graph, refused plan */
	EXIT_NO_INPUT = 3,     /* nothing matched the inputs */
	EXIT_RUNTIME = 4,      /* the runtime (StarPU) could not start */
	EXIT_INTERRUPTED = 5,  /* stopped on request by SIGHUP or SIGUSR1 */
	/* SIGINT and SIGTERM give 128 + the signal: 130 and 143 */
};

static const char usage_text[] =
	"Usage: starpipe COMMAND [OPTIONS]\n"
	"\n"
	"A task-graph runtime for heterogeneous nodes: runs declarative pipeline graphs\n"
	"as StarPU tasks over every CPU core and GPU of the node.\n"
	"\n"
	"Commands:\n"
	"  run GRAPH [ITEM...]\n"
	"                  run the pipeline over its work items: the ITEMs given,\n"
	"                  else those of the graph's inputs: section\n"
	"  validate GRAPH  check a graph file; print its problems as file:line:col\n"
	"  dot GRAPH       print the pipeline as Graphviz DOT\n"
	"  list            print every stage kind, its parameters and implementations\n"
	"  tune GRAPH [ITEM...] --out DIR [--sched LIST] [--ncpus LIST] [--vary NAME=LIST]\n"
	"                  run GRAPH under every configuration of a sweep, repeated;\n"
	"                  write results.csv, summary.txt and plots (starpipe tune --help)\n"
	"  models [GRAPH]  print the performance models of every codelet (of GRAPH's\n"
	"                  stages): samples, mean and spread per footprint and worker\n"
	"                  type; flags the uncalibrated and the noisy ones\n"
	"\n"
	"Options of run, validate and dot:\n"
	"  -s, --set NAME=VALUE     set a pipeline variable (see the graph's params:)\n"
	"  -i, --input PATH         same as --set input=PATH\n"
	"  -o, --output PATH        same as --set output=PATH\n"
	"Options of run (they override the graph's runtime: section):\n"
	"      --sched NAME         StarPU scheduler (auto: dmdas with GPUs, lws without)\n"
	"      --ncpus N            CPU workers (-1: all cores)\n"
	"      --ncuda N            CUDA GPUs (-1: all)\n"
	"      --workers-per-gpu N  CUDA workers (streams) per GPU\n"
	"      --perfmodel-dir DIR  folder of StarPU performance models\n"
	"                           (default: $XDG_CACHE_HOME/starpipe/perfmodels)\n"
	"      --calibrate N        0: use models, 1: calibrate, 2: recalibrate from scratch\n"
	"      --inflight N         work items driven at once (default 2; 2 + 4 per GPU on a\n"
	"                           node with GPUs)\n"
	"      --report FILE.json   write the run report as JSON\n"
	"      --trace FILE.json    write a task timeline (Chrome trace format, Perfetto)\n"
	"      --progress-every S   seconds between progress lines (default: 0.5 on a\n"
	"                           terminal, 10 otherwise)\n"
	"      --skip-existing      skip an item whose every output exists and is whole\n"
	"                           (a re-run after a crash or a kill does only what is\n"
	"                           missing; a damaged output is made again)\n"
	"      --journal FILE       append one JSON line per finished item to FILE\n"
	"      --shard I/K          run only the items whose index is I modulo K (0 <= I < K):\n"
	"                           one part of a batch, e.g. one Slurm array task\n"
	"      --tile STAGE=N       the stage's tile: (tasks it splits into), as in the graph\n"
	"      --figures FILE       write the run's figures as NAME<TAB>VALUE lines: makespan,\n"
	"                           per-worker busy/idle, lower bounds (starpipe tune reads it)\n"
	"      --tasks FILE         write one line per task: worker, stage, kernel, start, end\n"
	"      --sim-count NAME=N   starpipe-sim: run a data-dependent loop N times, as the real\n"
	"                           run did (iterations, retrain_attempts: from its report)\n"
	"      --memory-limit SIZE  refuse an item estimated to need more (default: the\n"
	"                           machine's memory, or its cgroup's limit)\n"
	"  -q, --quiet              no progress, no report on stderr\n"
	"  -v, --verbose            one line per item started\n"
	"  -h, --help               this help\n"
	"  -V, --version            print the version\n"
	"\n"
	"Exit status: 0 every item done or skipped, 1 some items failed, 2 bad usage,\n"
	"invalid graph or output collision, 3 nothing matched the inputs, 4 the runtime\n"
	"could not start, 5 stopped by SIGHUP or SIGUSR1, 130/143 stopped by SIGINT/SIGTERM.\n";

enum {
	OPT_SCHED = 256,
	OPT_NCPUS,
	OPT_NCUDA,
	OPT_WPG,
	OPT_PMDIR,
	OPT_CALIB,
	OPT_INFLIGHT,
	OPT_REPORT,
	OPT_TRACE,
	OPT_PROGRESS,
	OPT_SKIP,
	OPT_JOURNAL,
	OPT_MEMLIMIT,
	OPT_SHARD,
	OPT_TILE,
	OPT_FIGURES,
	OPT_TASKS,
	OPT_SIMCOUNT,
};

struct cli {
	const char *cmd, *graph;
	sp_var_t vars[128];
	size_t nvars;
	const char *rt[6]; /* overrides of sp_runtime_params, by index */
	const char *report, *trace, *journal, *figures, *tasks;
	const char *tiles[32]; /* --tile STAGE=N */
	size_t ntiles;
	int skip_existing;
	unsigned long long memory_limit;
	long shard_i, shard_k; /* --shard I/K; K = 0: all items */
	char **items; /* work items given after the graph (run only) */
	size_t nitems;
	long inflight;
	double progress_every;
	int quiet, verbose;
};

static int usage_error(const char *fmt, const char *arg)
{
	if (sp_cluster_rank() != 0)
		return EXIT_USAGE; /* MPI: every rank has the same command line; rank 0 says it */
	fprintf(stderr, "starpipe: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'starpipe --help'.\n");
	return EXIT_USAGE;
}

static int add_var(struct cli *c, const char *name, size_t nlen, const char *value)
{
	if (c->nvars == sizeof c->vars / sizeof c->vars[0])
		return usage_error("%s", "too many --set options");
	char *n = strndup(name, nlen);
	if (n == NULL)
		return usage_error("%s", "out of memory");
	c->vars[c->nvars].name = n;
	c->vars[c->nvars].value = value;
	c->nvars++;
	return 0;
}

static size_t rt_index(const char *name)
{
	for (size_t i = 0; i < sp_runtime_nparams; i++)
		if (strcmp(sp_runtime_params[i].name, name) == 0)
			return i;
	abort(); /* the option table names only existing parameters */
}

static int set_rt(struct cli *c, const char *name, const char *value, const char *opt)
{
	size_t i = rt_index(name);
	char msg[1024];
	if (sp_param_check(&sp_runtime_params[i], value, msg, sizeof msg) != 0 ||
	    (strcmp(name, "scheduler") == 0 && sp_runtime_check_sched(value, msg, sizeof msg) != 0) ||
	    (strcmp(name, "perfmodel_dir") == 0 &&
	     sp_runtime_check_perfmodel_dir(value, msg, sizeof msg) != 0)) {
		fprintf(stderr, "starpipe: %s: %s\nTry 'starpipe --help'.\n", opt, msg);
		return EXIT_USAGE;
	}
	c->rt[i] = value;
	return 0;
}

static int parse_args(int argc, char **argv, struct cli *c)
{
	static const struct option lo[] = {
		{ "set", required_argument, NULL, 's' },
		{ "input", required_argument, NULL, 'i' },
		{ "output", required_argument, NULL, 'o' },
		{ "sched", required_argument, NULL, OPT_SCHED },
		{ "ncpus", required_argument, NULL, OPT_NCPUS },
		{ "ncuda", required_argument, NULL, OPT_NCUDA },
		{ "workers-per-gpu", required_argument, NULL, OPT_WPG },
		{ "perfmodel-dir", required_argument, NULL, OPT_PMDIR },
		{ "calibrate", required_argument, NULL, OPT_CALIB },
		{ "inflight", required_argument, NULL, OPT_INFLIGHT },
		{ "report", required_argument, NULL, OPT_REPORT },
		{ "trace", required_argument, NULL, OPT_TRACE },
		{ "progress-every", required_argument, NULL, OPT_PROGRESS },
		{ "skip-existing", no_argument, NULL, OPT_SKIP },
		{ "journal", required_argument, NULL, OPT_JOURNAL },
		{ "memory-limit", required_argument, NULL, OPT_MEMLIMIT },
		{ "shard", required_argument, NULL, OPT_SHARD },
		{ "tile", required_argument, NULL, OPT_TILE },
		{ "figures", required_argument, NULL, OPT_FIGURES },
		{ "tasks", required_argument, NULL, OPT_TASKS },
		{ "sim-count", required_argument, NULL, OPT_SIMCOUNT },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int o, r = 0;
	char *end;

	c->inflight = 0; /* 0: sp_run() decides from the workers */
	while ((o = getopt_long(argc, argv, "s:i:o:qvhV", lo, NULL)) != -1) {
		switch (o) {
		case 's': {
			const char *eq = strchr(optarg, '=');
			if (eq == NULL || eq == optarg)
				return usage_error("--set expects NAME=VALUE, got '%s'", optarg);
			r = add_var(c, optarg, (size_t)(eq - optarg), eq + 1);
			break;
		}
		case 'i': r = add_var(c, "input", 5, optarg); break;
		case 'o': r = add_var(c, "output", 6, optarg); break;
		case OPT_SCHED: r = set_rt(c, "scheduler", optarg, "--sched"); break;
		case OPT_NCPUS: r = set_rt(c, "ncpus", optarg, "--ncpus"); break;
		case OPT_NCUDA: r = set_rt(c, "ncuda", optarg, "--ncuda"); break;
		case OPT_WPG: r = set_rt(c, "workers_per_gpu", optarg, "--workers-per-gpu"); break;
		case OPT_PMDIR: r = set_rt(c, "perfmodel_dir", optarg, "--perfmodel-dir"); break;
		case OPT_CALIB: r = set_rt(c, "calibrate", optarg, "--calibrate"); break;
		case OPT_INFLIGHT:
			c->inflight = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || c->inflight < 1 || c->inflight > 64)
				return usage_error("--inflight expects an integer in [1, 64], got '%s'", optarg);
			break;
		case OPT_REPORT: c->report = optarg; break;
		case OPT_TRACE: c->trace = optarg; break;
		case OPT_PROGRESS:
			c->progress_every = strtod(optarg, &end);
			if (*optarg == '\0' || *end != '\0' || !(c->progress_every > 0) ||
			    c->progress_every > 86400)
				return usage_error("--progress-every expects seconds in (0, 86400], got '%s'",
						   optarg);
			break;
		case OPT_SKIP: c->skip_existing = 1; break;
		case OPT_TILE:
			if (strchr(optarg, '=') == NULL || *optarg == '=')
				return usage_error("--tile expects STAGE=N, got '%s'", optarg);
			if (c->ntiles == sizeof c->tiles / sizeof c->tiles[0])
				return usage_error("%s", "too many --tile options");
			c->tiles[c->ntiles++] = optarg;
			break;
		case OPT_FIGURES: c->figures = optarg; break;
		case OPT_TASKS: c->tasks = optarg; break;
		case OPT_SIMCOUNT: {
			const char *eq = strchr(optarg, '=');
			long v = eq ? strtol(eq + 1, &end, 10) : -1;
#ifndef SP_SIMGRID
			return usage_error("--sim-count %s: only starpipe-sim simulates", optarg);
#endif
			if (eq == NULL || eq == optarg || eq - optarg >= 32 || eq[1] == '\0' || *end != '\0' ||
			    v < 0 || v > 100000000)
				return usage_error("--sim-count expects NAME=N (N in [0, 100000000]), got '%s'",
						   optarg);
			char name[32];
			snprintf(name, sizeof name, "%.*s", (int)(eq - optarg), optarg);
			if (sp_sim_count_set(name, v) != 0)
				return usage_error("%s", "too many --sim-count options");
			break;
		}
		case OPT_JOURNAL: c->journal = optarg; break;
		case OPT_SHARD: {
			char *slash;
			c->shard_i = strtol(optarg, &slash, 10);
			if (slash == optarg || *slash != '/' ||
			    (c->shard_k = strtol(slash + 1, &end, 10), end == slash + 1 || *end != '\0') ||
			    c->shard_k < 1 || c->shard_i < 0 || c->shard_i >= c->shard_k)
				return usage_error("--shard expects I/K with 0 <= I < K, got '%s'", optarg);
			break;
		}
		case OPT_MEMLIMIT: {
			static const sp_param_spec_t spec = { "memory-limit", SP_PT_SIZE, "", 1, 1e18,
							      NULL, NULL, 0 };
			char msg[256];
			if (sp_param_check(&spec, optarg, msg, sizeof msg) != 0) {
				fprintf(stderr, "starpipe: --memory-limit: %s\nTry 'starpipe --help'.\n", msg);
				return EXIT_USAGE;
			}
			c->memory_limit = sp_param_size(optarg);
			break;
		}
		case 'q': c->quiet = 1; break;
		case 'v': c->verbose = 1; break;
		case 'h': fputs(usage_text, stdout); exit(0);
		case 'V': {
			char d[160];
			sp_runtime_describe(d, sizeof d);
			printf("starpipe %s\n%s\n%s\n", PACKAGE_VERSION, d, sp_cluster_describe());
			sp_cluster_finalize();
			exit(0);
		}
		default: return usage_error("%s", "invalid option");
		}
		if (r != 0)
			return r;
	}
	if (optind >= argc)
		return usage_error("%s", "missing command");
	c->cmd = argv[optind++];
	if (strcmp(c->cmd, "models") == 0) {
		if (optind < argc)
			c->graph = argv[optind++]; /* optional */
	} else if (strcmp(c->cmd, "list") != 0 && strcmp(c->cmd, "help") != 0) {
		if (optind >= argc)
			return usage_error("%s: missing graph file", c->cmd);
		c->graph = argv[optind++];
	}
	if (optind < argc && strcmp(c->cmd, "run") == 0) {
		c->items = argv + optind;
		c->nitems = (size_t)(argc - optind);
	} else if (optind < argc) {
		return usage_error("unexpected argument '%s'", argv[optind]);
	}
	return 0;
}

static const char *ptype_name(sp_ptype_t t)
{
	switch (t) {
	case SP_PT_INT: return "int";
	case SP_PT_FLOAT: return "float";
	case SP_PT_BOOL: return "bool";
	case SP_PT_STRING: return "string";
	case SP_PT_PATH: return "path";
	case SP_PT_OUTPUT: return "output";
	case SP_PT_ENUM: return "enum";
	case SP_PT_SIZE: return "size";
	}
	return "?";
}

static void print_params(const sp_param_spec_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		printf("    %-16s %-6s ", p[i].name, ptype_name(p[i].type));
		if (p[i].def == NULL)
			printf("%-12s", "(required)");
		else
			printf("= %-10s", p[i].def[0] ? p[i].def : "\"\"");
		printf(" %s", p[i].help ? p[i].help : "");
		if (p[i].type == SP_PT_ENUM)
			printf(" [%s]", p[i].choices);
		else if ((p[i].type == SP_PT_INT || p[i].type == SP_PT_FLOAT) && p[i].min <= p[i].max)
			printf(" [%.15g, %.15g]", p[i].min, p[i].max);
		printf("\n");
	}
}

static int cmd_list(void)
{
	size_t n;
	const sp_stage_kind_t *const *k = sp_stage_kinds(&n);
	for (size_t i = 0; i < n; i++) {
		printf("%s  (%s%s%s)\n  %s\n", k[i]->name, (k[i]->impl & SP_IMPL_CPU) ? "CPU" : "",
		       (k[i]->impl & SP_IMPL_CPU) && (k[i]->impl & SP_IMPL_CUDA) ? "+" : "",
		       (k[i]->impl & SP_IMPL_CUDA) ? "CUDA" : "", k[i]->help);
		if (k[i]->nparams) {
			printf("  parameters:\n");
			print_params(k[i]->params, k[i]->nparams);
		}
		if (k[i]->tile != NULL)
			printf("  tile: %s\n", k[i]->tile);
		if (k[i]->codelets != NULL && k[i]->codelets[0] != '\0')
			printf("  codelets: %s\n", k[i]->codelets);
		for (size_t p = 0; p < k[i]->ninputs; p++)
			printf("  in  %-12s %s\n", k[i]->inputs[p].name, k[i]->inputs[p].type);
		for (size_t p = 0; p < k[i]->noutputs; p++)
			printf("  out %-12s %s\n", k[i]->outputs[p].name, k[i]->outputs[p].type);
		printf("\n");
	}
	printf("runtime: section\n");
	print_params(sp_runtime_params, sp_runtime_nparams);
#ifdef SP_HAVE_CUDA
	printf("\nThis build has CUDA implementations.\n");
#else
	printf("\nThis build has no CUDA implementations (configure --enable-cuda).\n");
#endif
	return 0;
}

/* Adds the space-separated symbols of `list` to syms[n..] (malloc'd, each
 * once); returns the new count. */
static size_t add_symbols(const char *list, const char **syms, size_t n, size_t cap)
{
	for (const char *p = list != NULL ? list : ""; *p != '\0';) {
		size_t len = strcspn(p, " ");
		int seen = len == 0;
		for (size_t i = 0; !seen && i < n; i++)
			seen = strlen(syms[i]) == len && strncmp(syms[i], p, len) == 0;
		if (!seen && n < cap) {
			char *s = strndup(p, len);
			if (s != NULL)
				syms[n++] = s;
		}
		p += len;
		p += strspn(p, " ");
	}
	return n;
}

/* `starpipe models [GRAPH]`: the perf models of the codelets of every kind,
 * or of GRAPH's kinds; the folder from --perfmodel-dir, else GRAPH's
 * runtime: section, else the default. */
static int cmd_models(const struct cli *c)
{
	size_t nk, n = 0;
	const sp_stage_kind_t *const *k = sp_stage_kinds(&nk);
	const char *syms[256];
	const char *dir = c->rt[rt_index("perfmodel_dir")];
	sp_graph_t *g = NULL;
	sp_err_t err = { 0 };

	if (c->graph != NULL) {
		sp_diag_t d;
		sp_diag_init(&d, c->graph);
		if (sp_graph_load(c->graph, c->vars, c->nvars, &g, &d) != 0) {
			sp_diag_print(&d, stderr);
			sp_diag_free(&d);
			return EXIT_USAGE;
		}
		sp_diag_free(&d);
		if (dir == NULL)
			dir = sp_graph_runtime(g, "perfmodel_dir");
	}
	for (size_t i = 0; i < nk; i++) {
		int used = g == NULL;
		for (size_t s = 0; g != NULL && s < g->nstages; s++)
			used |= g->stages[s].kind == k[i];
		if (used)
			n = add_symbols(k[i]->codelets, syms, n, sizeof syms / sizeof syms[0]);
	}
	/* through a buffer: the entries tools/sim-node invented get flagged */
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	int ret = mem != NULL ? sp_runtime_models(dir, syms, n, mem, &err)
			      : sp_seterr(&err, SP_ENOMEM, "out of memory");
	if (mem != NULL && fclose(mem) == 0 && text != NULL)
		sp_tune_flag_estimated(text, stdout);
	free(text);
	if (ret != 0)
		fprintf(stderr, "starpipe: %s\n", err.msg);
	for (size_t i = 0; i < n; i++)
		free((char *)syms[i]);
	sp_graph_free(&g);
	return ret != 0 ? EXIT_RUNTIME : 0;
}

/* The value of runtime parameter i: command line, else graph, else default. */
static const char *rt_value(const struct cli *c, const sp_graph_t *g, size_t i)
{
	if (c->rt[i] != NULL)
		return c->rt[i];
	return sp_graph_runtime(g, sp_runtime_params[i].name);
}

/*
 * Signals.  The handler of SIGINT, SIGTERM, SIGHUP and SIGUSR1 only writes
 * the signal's number to a pipe (async-signal-safe, whichever thread takes
 * it: OpenBLAS starts threads before main, so masks cannot route signals);
 * one thread reads the pipe and stops the batch from ordinary code: no new
 * item starts, the items in flight are cancelled (their temporaries removed,
 * previous outputs untouched), the report is written, and the exit status
 * says which signal.  A second signal exits at once; the next run removes
 * the dead run's temporaries.
 */
static int sig_pipe[2] = { -1, -1 };

static void on_stop_signal(int sig)
{
	int e = errno;
	unsigned char b = (unsigned char)sig;
	(void)!write(sig_pipe[1], &b, 1);
	errno = e;
}

static int install_stop_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1 };
	if (pipe2(sig_pipe, O_CLOEXEC) != 0)
		return -1;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigaction(sigs[i], &sa, NULL) != 0)
			return -1;
	return 0;
}

static void *signal_main(void *arg)
{
	(void)arg;
	int n = 0;
	for (;;) {
		unsigned char b;
		ssize_t got = read(sig_pipe[0], &b, 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got != 1)
			return NULL;
		int sig = b;
		if (++n == 1) {
			char msg[160];
			int len = snprintf(msg, sizeof msg,
					   "starpipe: SIG%s: no new item; cancelling the items in flight "
					   "(again to exit at once)\n", sigabbrev_np(sig));
			(void)!write(STDERR_FILENO, msg, (size_t)len);
			sp_run_interrupt(sig);
		} else {
			static const char msg[] = "starpipe: second signal: exiting now\n";
			(void)!write(STDERR_FILENO, msg, sizeof msg - 1);
			_exit(sig == SIGINT || sig == SIGTERM ? 128 + sig : EXIT_INTERRUPTED);
		}
	}
	return NULL;
}

static int exit_for_signal(int sig)
{
	return sig == SIGINT || sig == SIGTERM ? 128 + sig : EXIT_INTERRUPTED;
}

/* --tile STAGE=N: a stage's `tile:` from the command line (starpipe tune varies it). */
static int apply_tiles(const struct cli *c, sp_graph_t *g)
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
			return usage_error("--tile %s: the graph has no such stage", c->tiles[i]);
		if (st->kind->tile == NULL)
			return usage_error("--tile %s: the stage's kind runs as one task per item "
					   "(starpipe list shows the kinds that tile)", c->tiles[i]);
		if (eq[1] == '\0' || *end != '\0' || n < 0 || n > 100000000)
			return usage_error("--tile %s: expects an integer in [0, 100000000]", c->tiles[i]);
		st->tile = (int)n;
	}
	return 0;
}

static int cmd_run(struct cli *c, sp_graph_t *g)
{
	char **items = NULL;
	size_t nitems = 0;
	sp_err_t err = { 0 };
	sp_runtime_conf_t conf;
	sp_run_opts_t ro = { .inflight = (size_t)c->inflight, .verbose = c->verbose,
			     .quiet = c->quiet, .skip_existing = c->skip_existing,
			     .journal = c->journal, .memory_limit = c->memory_limit };
	sp_run_result_t res;
	int status = 0;
	pthread_t sig_thread;
	int rank0 = sp_cluster_rank() == 0;

	int istatus = 0;
	if (c->nitems > 0) {
		items = calloc(c->nitems, sizeof *items);
		for (nitems = 0; items != NULL && nitems < c->nitems; nitems++)
			if ((items[nitems] = strdup(c->items[nitems])) == NULL)
				break;
		if (items == NULL || nitems < c->nitems) {
			fprintf(stderr, "starpipe: out of memory\n");
			istatus = 1;
		}
	} else if (sp_graph_items(g, &items, &nitems, &err) != 0) {
		if (rank0)
			fprintf(stderr, "starpipe: %s\n", err.msg);
		istatus = err.code == SP_ENOENT ? EXIT_NO_INPUT : EXIT_USAGE;
	}
	if (istatus == 0 && sp_graph_folders(g, &items, &nitems, &err) != 0) {
		if (rank0)
			fprintf(stderr, "starpipe: %s\n", err.msg);
		/* nothing matched: 3; a folder that cannot be read: 2, as a
		 * manifest that cannot be read */
		istatus = err.code == SP_ENOENT ? EXIT_NO_INPUT : EXIT_USAGE;
	} else if (istatus == 0 && nitems == 0) {
		if (rank0)
			fprintf(stderr, "starpipe: %s: no work item (give them after the graph file or in its inputs: section)\n",
				g->file);
		istatus = EXIT_NO_INPUT;
	}
	/* One file named twice (a folder given twice, a folder and a file in
	 * it) is one item, not an output collision of the file with itself. */
	if (istatus == 0) {
		char ex[1024];
		size_t nd = sp_graph_dedupe(items, &nitems, ex, sizeof ex);
		if (nd > 0 && !c->quiet && rank0)
			fprintf(stderr, "starpipe: %zu input(s) named a file already listed (%s); "
				"each file is one item\n", nd, ex);
	}
	/* MPI ranks run rank 0's list, whatever their own globs saw (files
	 * still arriving, a file system's caches): one batch, one indexing. */
	if (sp_cluster_size() > 1 && sp_cluster_bcast_items(&items, &nitems, &istatus) != 0) {
		fprintf(stderr, "starpipe: out of memory sharing the batch's items\n");
		sp_cluster_abort(1);
	}
	if (istatus != 0) {
		for (size_t i = 0; items != NULL && i < nitems; i++)
			free(items[i]);
		free(items);
		return istatus;
	}
	/* Output collisions are refused before anything starts, over the whole
	 * batch: shards of it must not collide with each other either. */
	if (sp_run_plan_check(g, items, nitems, &err) != 0) {
		if (rank0)
			fprintf(stderr, "starpipe: %s\n", err.msg);
		status = EXIT_USAGE;
		goto out;
	}
	if (c->shard_k > 0) {
		/* Round robin, so each shard gets large and small items alike;
		 * items keep their index in the whole batch (${index}). */
		size_t mine = nitems / (size_t)c->shard_k +
			      ((size_t)c->shard_i < nitems % (size_t)c->shard_k);
		if (mine == 0) {
			if (rank0)
				fprintf(stderr, "starpipe: shard %ld/%ld of %zu item(s) is empty\n", c->shard_i,
				c->shard_k, nitems);
			status = EXIT_NO_INPUT;
			goto out;
		}
		if (!c->quiet && rank0)
			fprintf(stderr, "starpipe: shard %ld/%ld: %zu of %zu item(s)\n", c->shard_i,
				c->shard_k, mine, nitems);
		ro.shard_i = (size_t)c->shard_i;
		ro.shard_k = (size_t)c->shard_k;
	}
#ifndef SP_SIMGRID /* a thread outside SimGrid's actors must not call StarPU there */
	if (install_stop_signals() == 0 && pthread_create(&sig_thread, NULL, signal_main, NULL) == 0)
		pthread_detach(sig_thread);
#else
	(void)sig_thread;
	(void)install_stop_signals;
	(void)signal_main;
#endif
	conf.scheduler = rt_value(c, g, rt_index("scheduler"));
	conf.graph = g;
	conf.ncpus = (int)sp_param_int(rt_value(c, g, rt_index("ncpus")));
	conf.ncuda = (int)sp_param_int(rt_value(c, g, rt_index("ncuda")));
	conf.workers_per_gpu = (int)sp_param_int(rt_value(c, g, rt_index("workers_per_gpu")));
	/* GPU workers asked for and no CPU worker: a stage with CPU tasks only
	 * (readers, writers) could never run, and StarPU would refuse its first
	 * task (ENODEV) mid-batch.  (--ncpus 0 with the default --ncuda is left
	 * to the runtime: without a GPU it has no worker at all, exit 4.) */
	for (size_t k = 0; conf.ncpus == 0 && conf.ncuda > 0 && k < g->nstages; k++) {
		const sp_gstage_t *st = &g->stages[k];
		unsigned can = st->kind->impl & (st->where ? st->where : SP_IMPL_CPU | SP_IMPL_CUDA);
		if (st->kind->codelets != NULL && st->kind->codelets[0] != '\0' &&
		    !(can & SP_IMPL_CUDA)) {
			if (rank0)
				fprintf(stderr, "starpipe: %s: stage '%s' (%s) runs on CPU workers "
					"only, and --ncpus 0 leaves none: give it at least 1\n",
					g->file, st->name, st->kind->name);
			status = EXIT_USAGE;
			goto out;
		}
	}
	conf.perfmodel_dir = rt_value(c, g, rt_index("perfmodel_dir"));
	conf.calibrate = (int)sp_param_int(rt_value(c, g, rt_index("calibrate")));
	conf.progress = !c->quiet && rank0; /* MPI: rank 0's progress only */
#ifdef SP_SIMGRID
	conf.progress = 0; /* its timed waits are real time, not simulated */
	/* A SimGrid StarPU built --with-fxt writes an FxT trace of every run
	 * (~100 MB for a DESI batch) and slows it down: only on request
	 * (STARPU_FXT_TRACE=1, STARPU_FXT_PREFIX=DIR; doc/tuning.md). */
	setenv("STARPU_FXT_TRACE", "0", 0);
#endif
	conf.progress_period = c->progress_every;
	conf.trace = c->trace != NULL || c->tasks != NULL;
	conf.bound = c->figures != NULL;
	ro.trace = c->trace != NULL;
	conf.cpu_first = conf.cpu_count = 0;
	int lrank, lsize;
	sp_cluster_local(&lrank, &lsize);
	if (lsize > 1) {
		/* several ranks on one node (a test, or a launcher placing one
		 * rank per socket): the node's cores are split between them */
		long cores = sysconf(_SC_NPROCESSORS_ONLN);
		if (cores < 1)
			cores = 1;
		if (cores >= lsize) {
			conf.cpu_first = (int)(lrank * cores / lsize);
			conf.cpu_count = (int)((lrank + 1) * cores / lsize) - conf.cpu_first;
		} else {
			conf.cpu_first = lrank % (int)cores;
			conf.cpu_count = 1;
		}
		if (!c->quiet && lrank == 0)
			fprintf(stderr, "starpipe: %d ranks share this node; each binds its CPU workers "
				"to its share of the %ld cores (one rank per node uses them all)\n",
				lsize, cores);
	}
	if (sp_cluster_size() > 1 && rank0 && !c->quiet)
		fprintf(stderr, "starpipe: %d MPI ranks; items handed out by rank 0 as ranks ask\n",
			sp_cluster_size());

	if (sp_runtime_init(&conf, &err) != 0) {
		fprintf(stderr, "starpipe: %s\n", err.msg);
		/* the other ranks would wait for this one in the batch's collectives */
		sp_cluster_abort(EXIT_RUNTIME);
		status = EXIT_RUNTIME;
		goto out;
	}
	if (c->verbose && rank0 && sp_runtime_heteroprio())
		sp_hp_describe(stderr); /* what auto chose on a GPU node, and why */
	int ret = sp_run(g, items, nitems, &ro, &res);
	if (ret == SP_EINVAL) {
		/* every rank refuses alike; the rank with the reason says it */
		if (rank0 || strncmp(res.err.msg, SP_RUN_OTHER_RANK, strlen(SP_RUN_OTHER_RANK)) != 0)
			fprintf(stderr, "starpipe: %s\n", res.err.msg);
		sp_runtime_shutdown();
		status = EXIT_USAGE;
		goto out;
	}
	if (ret != 0 && ret != SP_ECANCELED) {
		fprintf(stderr, "starpipe: %s: %s\n", g->file, ret == SP_ENOMEM ? res.err.msg : sp_strerror(ret));
		status = EXIT_ITEMS_FAILED;
	}
	if (res.nfailed) {
		if (rank0)
			fprintf(stderr, "starpipe: %zu of %zu item(s) failed\n", res.nfailed, nitems);
		status = EXIT_ITEMS_FAILED;
	}
	if (res.journal_failed) /* said when it happened */
		status = EXIT_ITEMS_FAILED;
	if (res.nskipped && !c->quiet && rank0)
		fprintf(stderr, "starpipe: %zu of %zu item(s) skipped: their outputs exist\n",
			res.nskipped, nitems);
	if (res.signal != 0) {
		if (rank0)
			fprintf(stderr, "starpipe: interrupted by SIG%s: %zu item(s) done, %zu cancelled, "
			"%zu not started; the same command with --skip-existing finishes the batch\n",
			sigabbrev_np(res.signal), res.nok, res.ncancelled, res.nnotrun);
		status = exit_for_signal(res.signal);
	}
	/* An MPI batch: rank 0 speaks for the batch (the counts are the
	 * batch's on every rank, so every rank exits alike). */
	if (!c->quiet && rank0)
		sp_runtime_print_report(g->pipeline);
	if (c->report != NULL && rank0 &&
	    sp_runtime_write_report(c->report, g->pipeline, res.items_json, res.stage_lines,
				    res.cluster_json, &err) != 0) {
		fprintf(stderr, "starpipe: %s\n", err.msg);
		if (status == 0)
			status = EXIT_ITEMS_FAILED;
	}
	if (c->trace != NULL && rank0 &&
	    sp_runtime_write_trace(c->trace, res.trace_events, res.ntrace_events, &err) != 0) {
		fprintf(stderr, "starpipe: %s\n", err.msg);
		if (status == 0)
			status = EXIT_ITEMS_FAILED;
	}
	if (c->figures != NULL && rank0 && sp_runtime_write_figures(c->figures, res.nfailed, &err) != 0) {
		fprintf(stderr, "starpipe: %s\n", err.msg);
		if (status == 0)
			status = EXIT_ITEMS_FAILED;
	}
	if (c->tasks != NULL && rank0 && sp_runtime_write_tasks(c->tasks, &err) != 0) {
		fprintf(stderr, "starpipe: %s\n", err.msg);
		if (status == 0)
			status = EXIT_ITEMS_FAILED;
	}
	sp_run_result_free(&res);
	sp_runtime_shutdown();
out:
	for (size_t i = 0; i < nitems; i++)
		free(items[i]);
	free(items);
	return status;
}

int main(int argc, char **argv)
{
	struct cli c = { 0 };
	sp_graph_t *g = NULL;
	sp_diag_t d;
	sp_err_t cerr = { 0 };
	if (argc > 1 && strcmp(argv[1], "tune") == 0) {
		/* the sweep starts runs as children and never StarPU nor MPI itself */
		char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
		if (n <= 0)
			snprintf(exe, sizeof exe, "%s", argv[0]);
		else
			exe[n] = '\0';
		return sp_tune_main(argc - 1, argv + 1, exe);
	}
	/* MPI first (when mpirun or srun started us), before any thread */
	if (sp_cluster_init(&argc, &argv, &cerr) != 0) {
		fprintf(stderr, "starpipe: %s\n", cerr.msg);
		return EXIT_RUNTIME;
	}
	int r = parse_args(argc, argv, &c);

	if (r == 0 && (strcmp(c.cmd, "list") == 0)) {
		r = cmd_list();
		goto out;
	}
	if (r == 0 && strcmp(c.cmd, "models") == 0) {
		r = cmd_models(&c);
		goto out;
	}
	if (r == 0 && strcmp(c.cmd, "help") == 0) {
		fputs(usage_text, stdout);
		goto out;
	}
	if (r == 0 && strcmp(c.cmd, "run") != 0 && strcmp(c.cmd, "validate") != 0 &&
	    strcmp(c.cmd, "dot") != 0)
		r = usage_error("unknown command '%s'", c.cmd);
	if (r != 0)
		goto out;

	sp_diag_init(&d, c.graph);
	int ret = sp_graph_load(c.graph, c.vars, c.nvars, &g, &d);
	if (ret != 0) {
		if (sp_cluster_rank() == 0) /* MPI: one copy of the diagnostics */
			sp_diag_print(&d, stderr);
		sp_diag_free(&d);
		r = EXIT_USAGE;
		goto out;
	}
	sp_diag_free(&d);
	if ((r = apply_tiles(&c, g)) != 0)
		;
	else if (strcmp(c.cmd, "dot") == 0)
		sp_graph_dot(g, stdout);
	else if (strcmp(c.cmd, "run") == 0)
		r = cmd_run(&c, g);
	sp_graph_free(&g);
out:
	for (size_t i = 0; i < c.nvars; i++)
		free((char *)c.vars[i].name);
	sp_cluster_finalize();
	return r;
}
