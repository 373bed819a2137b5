/* The starpipe command's options: --help's text and the parser. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cpuisa.h"
#include "cluster.h"
#include "run.h"
#include "runtime.h"

const char cli_usage_text[] =
	"Usage: starpipe COMMAND [OPTIONS]\n"
	"\n"
	"A task-graph runtime for heterogeneous nodes: runs declarative pipeline graphs\n"
	"as StarPU tasks over every CPU core and GPU of the node.\n"
	"\n"
	"Commands:\n"
	"  run GRAPH [ITEM...]\n"
	"                  run the pipeline over its work items: the ITEMs given,\n"
	"                  else those of the graph's inputs: section (both when\n"
	"                  --input or --set input= is given too)\n"
	"  validate GRAPH  check a graph file; print its problems as file:line:col\n"
	"  dot GRAPH       print the pipeline as Graphviz DOT\n"
	"  list            print every stage kind, its parameters and implementations\n"
	"  tune GRAPH [ITEM...] --out DIR [--sched LIST] [--ncpus LIST] [--vary NAME=LIST]\n"
	"                  run GRAPH under every configuration of a sweep, repeated;\n"
	"                  write results.csv, summary.txt and plots (starpipe tune --help)\n"
	"  models [GRAPH]  print the performance models of every codelet (of GRAPH's\n"
	"                  stages): samples, mean and spread per footprint and worker\n"
	"                  type; flags the uncalibrated and the noisy ones\n"
	"  calibrate GRAPH [ITEM...] [--max-runs N]\n"
	"                  run GRAPH with --calibrate 1, each run a child process,\n"
	"                  until every footprint its runs measure has StarPU's 10\n"
	"                  samples (at most N runs, default 20); print each codelet's\n"
	"                  samples before and after, and why any is still short; exit 0\n"
	"                  when all this node runs are calibrated.  Takes run's options\n"
	"\n"
	"Options of run, validate and dot:\n"
	"  -s, --set NAME=VALUE     set a pipeline variable (see the graph's params:)\n"
	"  -i, --input PATH         same as --set input=PATH\n"
	"  -o, --output PATH        same as --set output=PATH\n"
	"      --manifest FILE      the work items: FILE's lines, instead of the graph's\n"
	"                           inputs:; a header `item NAME ...` (tab- or comma-\n"
	"                           separated) makes columns that set the variable NAME\n"
	"                           for each row's item (starpipe-graph(5))\n"
	"Options of run (they override the graph's runtime: section):\n"
	"      --sched NAME         StarPU scheduler (auto: heteroprio with GPUs, lws without)\n"
	"      --ncpus N            CPU workers (-1: all cores)\n"
	"      --ncuda N            CUDA GPUs (-1: all)\n"
	"      --workers-per-gpu N  CUDA workers (streams) per GPU\n"
	"      --lanes auto|off|on  on: a CPU lane beside the GPU lane, each item run whole\n"
	"                           in one, in its own plan (auto: on with GPUs, unless\n"
	"                           --sched or --ncpus is given)\n"
	"      --cpu-lane N         CPU workers of the CPU lane (-1: all but the cores the\n"
	"                           GPU lane needs, from the item model; 2 per GPU without)\n"
	"      --cores FIRST-LAST   bind this process's CPU workers to cores FIRST..LAST (MPI\n"
	"                           ranks sharing a node, one per device set: doc/cluster.md)\n"
	"      --perfmodel-dir DIR  folder of StarPU performance models\n"
	"                           (default: $XDG_CACHE_HOME/starpipe/perfmodels)\n"
	"      --calibrate N        0: use models, 1: calibrate, 2: recalibrate from scratch\n"
	"      --node-type NAME     the models' and bus measurements' name (SYMBOL.NAME files):\n"
	"                           nodes of one type share them in a shared --perfmodel-dir\n"
	"                           (default: STARPU_HOSTNAME, else Slurm's partition, else\n"
	"                           the host name); also for models and calibrate\n"
	"      --inflight N         work items driven at once (default 2; 2 + 4 per GPU on a\n"
	"                           node with GPUs; at most what the memory holds)\n"
	"      --report FILE.json   write the run report as JSON\n"
	"      --trace FILE.json    write a task timeline (Chrome trace format, Perfetto)\n"
	"      --progress-every S   seconds between progress lines (default: 0.5 on a\n"
	"                           terminal, 10 otherwise)\n"
	"      --skip-existing      skip an item whose every output exists and is whole\n"
	"                           (a re-run after a crash or a kill does only what is\n"
	"                           missing; a damaged output is made again)\n"
	"      --item-timeout S     fail an item still running S seconds after it started\n"
	"                           (its tasks not yet started are skipped; one running\n"
	"                           ends first); the other items go on\n"
	"      --follow DIR         process DIR's files (the graph's inputs: folder: pattern)\n"
	"                           as they appear, the runtime kept warm, each file once\n"
	"                           across restarts (needs --journal); ends on SIGTERM or\n"
	"                           SIGINT, or after --idle-exit S with nothing to do\n"
	"      --settle S           a followed file is complete once its size and mtime\n"
	"                           have not changed for S seconds (default 1)\n"
	"      --idle-exit S        with --follow: end after S seconds with no file waiting\n"
	"                           or running (default: never)\n"
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
	OPT_LANES,
	OPT_CPU_LANE,
	OPT_CORES,
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
	OPT_NODETYPE,
	OPT_MAXRUNS,
	OPT_MANIFEST,
	OPT_FOLLOW,
	OPT_SETTLE,
	OPT_ITEM_TIMEOUT,
	OPT_IDLE_EXIT,
};

int cli_usage_error(const char *fmt, const char *arg)
{
	if (sp_cluster_rank() != 0)
		return EXIT_USAGE;
	fprintf(stderr, "starpipe: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'starpipe --help'.\n");
	return EXIT_USAGE;
}

static int add_var(struct cli *c, const char *name, size_t nlen, const char *value)
{
	if (c->nvars == sizeof c->vars / sizeof c->vars[0])
		return cli_usage_error("%s", "too many --set options");
	char *n = strndup(name, nlen);
	if (n == NULL)
		return cli_usage_error("%s", "out of memory");
	c->vars[c->nvars].name = n;
	c->vars[c->nvars].value = value;
	c->nvars++;
	return 0;
}

/* --sched, --ncpus ...: a value of the runtime: section, checked as the
 * graph's would be. */
static int set_rt(struct cli *c, enum sp_runtime_param i, const char *value, const char *opt)
{
	char msg[1024];
	if (sp_param_check(&sp_runtime_params[i], value, msg, sizeof msg) != 0 ||
	    (i == SP_RT_SCHEDULER && sp_runtime_check_sched(value, msg, sizeof msg) != 0) ||
	    (i == SP_RT_PERFMODEL_DIR &&
	     sp_runtime_check_perfmodel_dir(value, msg, sizeof msg) != 0)) {
		fprintf(stderr, "starpipe: %s: %s\nTry 'starpipe --help'.\n", opt, msg);
		return EXIT_USAGE;
	}
	c->rt[i] = value;
	return 0;
}

/* The options of run (and validate, dot, models, calibrate), for getopt_long. */
static const struct option lo[] = {
	{ "set", required_argument, NULL, 's' },
	{ "input", required_argument, NULL, 'i' },
	{ "output", required_argument, NULL, 'o' },
	{ "sched", required_argument, NULL, OPT_SCHED },
	{ "ncpus", required_argument, NULL, OPT_NCPUS },
	{ "ncuda", required_argument, NULL, OPT_NCUDA },
	{ "workers-per-gpu", required_argument, NULL, OPT_WPG },
	{ "lanes", required_argument, NULL, OPT_LANES },
	{ "cpu-lane", required_argument, NULL, OPT_CPU_LANE },
	{ "cores", required_argument, NULL, OPT_CORES },
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
	{ "node-type", required_argument, NULL, OPT_NODETYPE },
	{ "max-runs", required_argument, NULL, OPT_MAXRUNS },
	{ "manifest", required_argument, NULL, OPT_MANIFEST },
	{ "follow", required_argument, NULL, OPT_FOLLOW },
	{ "settle", required_argument, NULL, OPT_SETTLE },
	{ "item-timeout", required_argument, NULL, OPT_ITEM_TIMEOUT },
	{ "idle-exit", required_argument, NULL, OPT_IDLE_EXIT },
	{ "quiet", no_argument, NULL, 'q' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};
#define SHORT_OPTS "s:i:o:qvhV"

int cli_run_option_takes_value(const char *arg)
{
	if (arg[0] == '-' && arg[1] != '-' && arg[1] != '\0' && arg[2] == '\0') {
		const char *p = strchr(SHORT_OPTS, arg[1]);
		return p != NULL && p[1] == ':';
	}
	if (strncmp(arg, "--", 2) != 0)
		return 0;
	for (const struct option *o = lo; o->name != NULL; o++)
		if (strcmp(arg + 2, o->name) == 0)
			return o->has_arg == required_argument;
	return 0;
}

static int opt_set(struct cli *c, const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (eq == NULL || eq == arg)
		return cli_usage_error("--set expects NAME=VALUE, got '%s'", arg);
	return add_var(c, arg, (size_t)(eq - arg), eq + 1);
}

/* strtol of the whole of arg into [lo, hi]; -1 (and *v untouched) otherwise */
static int whole_long(const char *arg, long lo, long hi, long *v)
{
	char *end;
	long x = strtol(arg, &end, 10);
	if (*arg == '\0' || *end != '\0' || x < lo || x > hi)
		return -1;
	*v = x;
	return 0;
}

/* --OPT's integer in [lo, hi] into *v, or the usage error naming OPT */
static int opt_long(const char *opt, const char *arg, long lo, long hi, long *v)
{
	char fmt[96];
	if (whole_long(arg, lo, hi, v) == 0)
		return 0;
	snprintf(fmt, sizeof fmt, "--%s expects an integer in [%ld, %ld], got '%%s'", opt, lo, hi);
	return cli_usage_error(fmt, arg);
}

static int opt_progress(struct cli *c, const char *arg)
{
	char *end;
	c->progress_every = strtod(arg, &end);
	if (*arg == '\0' || *end != '\0' || !(c->progress_every > 0) || c->progress_every > 86400)
		return cli_usage_error("--progress-every expects seconds in (0, 86400], got '%s'", arg);
	return 0;
}

/* --settle, --idle-exit: seconds in [lo, 86400] */
static int opt_seconds(const char *opt, const char *arg, double lo, double *v)
{
	char *end;
	char fmt[96];
	*v = strtod(arg, &end);
	if (*arg != '\0' && *end == '\0' && *v >= lo && *v <= 86400)
		return 0;
	snprintf(fmt, sizeof fmt, "--%s expects seconds in [%g, 86400], got '%%s'", opt, lo);
	return cli_usage_error(fmt, arg);
}

static int opt_tile(struct cli *c, char *arg)
{
	if (strchr(arg, '=') == NULL || *arg == '=')
		return cli_usage_error("--tile expects STAGE=N, got '%s'", arg);
	if (c->ntiles == sizeof c->tiles / sizeof c->tiles[0])
		return cli_usage_error("%s", "too many --tile options");
	c->tiles[c->ntiles++] = arg;
	return 0;
}

static int opt_sim_count(const char *arg)
{
#ifndef SP_SIMGRID
	return cli_usage_error("--sim-count %s: only starpipe-sim simulates", arg);
#else
	const char *eq = strchr(arg, '=');
	long v;
	if (eq == NULL || eq == arg || eq - arg >= 32 || whole_long(eq + 1, 0, 100000000, &v) != 0)
		return cli_usage_error("--sim-count expects NAME=N (N in [0, 100000000]), got '%s'", arg);
	char name[32];
	snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
	if (sp_sim_count_set(name, v) != 0)
		return cli_usage_error("%s", "too many --sim-count options");
	return 0;
#endif
}

static int opt_node_type(struct cli *c, char *arg)
{
#ifdef SP_SIMGRID
	/* SimGrid loads the platform before starpipe-sim starts */
	(void)c;
	return cli_usage_error("--node-type %s: starpipe-sim's platform is named by "
			       "STARPU_HOSTNAME; set it instead", arg);
#else
	char msg[256];
	if (sp_runtime_check_node_type(arg, msg, sizeof msg) != 0) {
		fprintf(stderr, "starpipe: --node-type: %s\nTry 'starpipe --help'.\n", msg);
		return EXIT_USAGE;
	}
	c->node_type = arg;
	return 0;
#endif
}

static int opt_shard(struct cli *c, const char *arg)
{
	char *slash, *end;
	c->shard_i = strtol(arg, &slash, 10);
	if (slash == arg || *slash != '/' ||
	    (c->shard_k = strtol(slash + 1, &end, 10), end == slash + 1 || *end != '\0') ||
	    c->shard_k < 1 || c->shard_i < 0 || c->shard_i >= c->shard_k)
		return cli_usage_error("--shard expects I/K with 0 <= I < K, got '%s'", arg);
	return 0;
}

static int opt_cores(struct cli *c, const char *arg)
{
	char *dash, *end;
	const long ncores = sysconf(_SC_NPROCESSORS_ONLN);
	c->core_first = strtol(arg, &dash, 10);
	if (dash == arg || *dash != '-' ||
	    (c->core_last = strtol(dash + 1, &end, 10), end == dash + 1 || *end != '\0') ||
	    c->core_first < 0 || c->core_last < c->core_first || c->core_last >= ncores) {
		c->core_last = -1;
		return cli_usage_error("--cores expects FIRST-LAST with 0 <= FIRST <= LAST < the "
				       "number of this node's cores, got '%s'", arg);
	}
	return 0;
}

static int opt_memory_limit(struct cli *c, const char *arg)
{
	static const sp_param_spec_t spec = { "memory-limit", SP_PT_SIZE, "", 1, 1e18, NULL, NULL, 0 };
	char msg[256];
	if (sp_param_check(&spec, arg, msg, sizeof msg) != 0) {
		fprintf(stderr, "starpipe: --memory-limit: %s\nTry 'starpipe --help'.\n", msg);
		return EXIT_USAGE;
	}
	c->memory_limit = sp_param_size(arg);
	return 0;
}

static void print_version(void)
{
	char d[160], bl[200];
	sp_runtime_describe(d, sizeof d);
	cli_blas_describe(bl, sizeof bl);
	printf("starpipe %s\n%s\n%s\n%s\nCPU kernels: %s%s\n", PACKAGE_VERSION, d,
	       sp_cluster_describe(), bl, sp_isa_name(sp_cpu_isa()),
	       getenv("STARPIPE_CPU_ISA") != NULL ? " (STARPIPE_CPU_ISA)" : "");
	sp_cluster_finalize();
}

/* one option from getopt_long: 0, or the exit status of a usage error */
static int parse_option(struct cli *c, int o, char *arg)
{
	switch (o) {
	case 's': return opt_set(c, arg);
	case 'i': return add_var(c, "input", 5, arg);
	case 'o': return add_var(c, "output", 6, arg);
	case OPT_SCHED: return set_rt(c, SP_RT_SCHEDULER, arg, "--sched");
	case OPT_NCPUS: return set_rt(c, SP_RT_NCPUS, arg, "--ncpus");
	case OPT_NCUDA: return set_rt(c, SP_RT_NCUDA, arg, "--ncuda");
	case OPT_WPG: return set_rt(c, SP_RT_WORKERS_PER_GPU, arg, "--workers-per-gpu");
	case OPT_LANES: return set_rt(c, SP_RT_LANES, arg, "--lanes");
	case OPT_CPU_LANE: return set_rt(c, SP_RT_CPU_LANE, arg, "--cpu-lane");
	case OPT_CORES: return opt_cores(c, arg);
	case OPT_PMDIR: return set_rt(c, SP_RT_PERFMODEL_DIR, arg, "--perfmodel-dir");
	case OPT_CALIB: return set_rt(c, SP_RT_CALIBRATE, arg, "--calibrate");
	case OPT_INFLIGHT: return opt_long("inflight", arg, 1, 64, &c->inflight);
	case OPT_REPORT: c->report = arg; return 0;
	case OPT_TRACE: c->trace = arg; return 0;
	case OPT_PROGRESS: return opt_progress(c, arg);
	case OPT_SKIP: c->skip_existing = 1; return 0;
	case OPT_TILE: return opt_tile(c, arg);
	case OPT_FIGURES: c->figures = arg; return 0;
	case OPT_TASKS: c->tasks = arg; return 0;
	case OPT_SIMCOUNT: return opt_sim_count(arg);
	case OPT_NODETYPE: return opt_node_type(c, arg);
	case OPT_MAXRUNS: return opt_long("max-runs", arg, 1, 1000, &c->max_runs);
	case OPT_MANIFEST: c->manifest = arg; return 0;
	case OPT_FOLLOW: c->follow = arg; return 0;
	case OPT_SETTLE: return opt_seconds("settle", arg, 0.05, &c->settle_s);
	case OPT_ITEM_TIMEOUT: return opt_seconds("item-timeout", arg, 0.01, &c->item_timeout_s);
	case OPT_IDLE_EXIT: return opt_seconds("idle-exit", arg, 0, &c->idle_exit_s);
	case OPT_JOURNAL: c->journal = arg; return 0;
	case OPT_SHARD: return opt_shard(c, arg);
	case OPT_MEMLIMIT: return opt_memory_limit(c, arg);
	case 'q': c->quiet = 1; return 0;
	case 'v': c->verbose = 1; return 0;
	case 'h': fputs(cli_usage_text, stdout); exit(0);
	case 'V': print_version(); exit(0);
	default: return cli_usage_error("%s", "invalid option");
	}
}

/* the command, its graph file and the items after the options */
static int parse_operands(int argc, char **argv, struct cli *c)
{
	if (optind >= argc)
		return cli_usage_error("%s", "missing command");
	c->cmd = argv[optind++];
	if (strcmp(c->cmd, "models") == 0) {
		if (optind < argc)
			c->graph = argv[optind++]; /* optional */
	} else if (strcmp(c->cmd, "list") != 0 && strcmp(c->cmd, "help") != 0) {
		if (optind >= argc)
			return cli_usage_error("%s: missing graph file", c->cmd);
		c->graph = argv[optind++];
	}
	if (c->max_runs != 0 && strcmp(c->cmd, "calibrate") != 0)
		return cli_usage_error("--max-runs: only starpipe calibrate takes it (%s does not)",
				       c->cmd);
	if ((c->follow != NULL || c->settle_s > 0 || c->idle_exit_s > 0) && strcmp(c->cmd, "run") != 0)
		return cli_usage_error("--follow, --settle, --idle-exit: only starpipe run takes them (%s "
				       "does not)", c->cmd);
	if ((c->settle_s > 0 || c->idle_exit_s > 0) && c->follow == NULL)
		return cli_usage_error("%s", "--settle and --idle-exit go with --follow DIR");
	if (c->follow != NULL && (c->shard_k > 0 || c->manifest != NULL))
		return cli_usage_error("%s", "--follow takes every file of its folder: not with --shard or "
				       "--manifest");
	if (c->follow != NULL && optind < argc)
		return cli_usage_error("--follow takes its items from the folder; '%s' is one more",
				       argv[optind]);
	if (optind < argc && (strcmp(c->cmd, "run") == 0 || strcmp(c->cmd, "calibrate") == 0)) {
		c->items = argv + optind;
		c->nitems = (size_t)(argc - optind);
	} else if (optind < argc) {
		return cli_usage_error("unexpected argument '%s'", argv[optind]);
	}
	return 0;
}

int cli_parse_args(int argc, char **argv, struct cli *c)
{
	int o, r;

	c->inflight = 0; /* 0: sp_run() decides from the workers */
	c->core_last = -1; /* no --cores */
	while ((o = getopt_long(argc, argv, SHORT_OPTS, lo, NULL)) != -1)
		if ((r = parse_option(c, o, optarg)) != 0)
			return r;
	return parse_operands(argc, argv, c);
}

void cli_say(const char *fmt, ...)
{
	if (sp_cluster_rank() != 0)
		return;
	va_list ap;
	va_start(ap, fmt);
	fputs("starpipe: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}
