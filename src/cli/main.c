/* The starpipe command: the command line parsed, the graph loaded, the command called.
 *
 * src/cli/ is the top layer: args.c (options, --help), cmd_run.c (starpipe
 * run), cmd_calibrate.c (calibrate), cmd_info.c (list, models), signals.c,
 * blas.c (OpenBLAS's kernels);
 * `tune` is src/tune/'s. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cluster.h"
#include "graph.h"
#include "runtime.h"
#include "tune.h"
#ifdef SP_SIMGRID
#include <starpu_simgrid_wrap.h> /* main becomes an actor of the simulation */
#endif

/* the running program's path, for the children of tune and calibrate */
static void self_exe(char *exe, size_t size, const char *argv0)
{
	ssize_t n = readlink("/proc/self/exe", exe, size - 1);
	if (n <= 0)
		snprintf(exe, size, "%s", argv0);
	else
		exe[n] = '\0';
}

static void free_vars(struct cli *c)
{
	for (size_t i = 0; i < c->nvars; i++)
		free((char *)c->vars[i].name);
}

/* starpipe calibrate: runs as children (cmd_calibrate.c), never StarPU nor
 * MPI itself; the options are parsed as run's, on a copy (getopt reorders
 * it), and the children get them as given */
static int main_calibrate(int argc, char **argv)
{
	struct cli c = { 0 };
	char exe[4096], **copy = calloc((size_t)argc + 1, sizeof *copy);
	self_exe(exe, sizeof exe, argv[0]);
	if (copy == NULL) {
		fprintf(stderr, "starpipe: out of memory\n");
		return EXIT_ITEMS_FAILED;
	}
	memcpy(copy, argv, (size_t)argc * sizeof *copy);
	int r = cli_parse_args(argc, copy, &c);
	if (r == 0)
		r = cli_cmd_calibrate(&c, argc, argv, exe);
	free_vars(&c);
	free(copy);
	return r;
}

/* list, models and help need no graph: 1 when c's command was one of them
 * (its status in *r) */
static int info_command(struct cli *c, int *r)
{
	if (strcmp(c->cmd, "list") == 0)
		*r = cli_cmd_list();
	else if (strcmp(c->cmd, "models") == 0)
		*r = cli_cmd_models(c);
	else if (strcmp(c->cmd, "help") == 0)
		fputs(cli_usage_text, stdout);
	else
		return 0;
	return 1;
}

/* srun started several tasks of `starpipe run` that no MPI joined into one
 * job (slurm.conf's MpiDefault=none, no --mpi=): each would run the whole
 * batch into the same outputs.  Refused, unless --shard gives each its
 * part.  (With MPI started, sp_cluster_init() checks the same.) */
static int check_bare_srun(const struct cli *c)
{
	const char *nt = getenv("SLURM_STEP_NUM_TASKS");
	if (strcmp(c->cmd, "run") != 0 || sp_cluster_size() > 1 || c->shard_k > 0 || nt == NULL ||
	    atoi(nt) <= 1)
		return 0;
	fprintf(stderr,
		"starpipe: srun started %s tasks that no MPI joined into one job (slurm.conf's "
		"MpiDefault=none, no --mpi=): each would run the whole batch into the same "
		"outputs; use srun --mpi=pmix (doc/cluster.md), or give each task its part: "
		"--shard $SLURM_PROCID/$SLURM_NTASKS\n", nt);
	return EXIT_RUNTIME;
}

static int check_command(const struct cli *c)
{
	if (strcmp(c->cmd, "calibrate") == 0 || strcmp(c->cmd, "tune") == 0)
		return cli_usage_error("give the command first: starpipe %s GRAPH [OPTIONS]", c->cmd);
	if (strcmp(c->cmd, "run") != 0 && strcmp(c->cmd, "validate") != 0 &&
	    strcmp(c->cmd, "dot") != 0)
		return cli_usage_error("unknown command '%s'", c->cmd);
	return check_bare_srun(c);
}

/* validate, dot, run: the graph loaded, then the command */
static int graph_command(struct cli *c)
{
	sp_graph_t *g = NULL;
	sp_diag_t d;
	int r = 0;

	sp_diag_init(&d, c->graph);
	if (sp_graph_load(c->graph, c->vars, c->nvars, cli_registry(), &g, &d) != 0) {
		if (sp_cluster_rank() == 0) /* MPI: one copy of the diagnostics */
			sp_diag_print(&d, stderr);
		sp_diag_free(&d);
		return EXIT_USAGE;
	}
	sp_diag_free(&d);
	cli_apply_manifest(c, g);
	if ((r = cli_apply_tiles(c, g)) != 0)
		;
	else if (strcmp(c->cmd, "validate") == 0)
		r = cli_check_manifest(c, g);
	else if (strcmp(c->cmd, "dot") == 0)
		sp_graph_dot(g, stdout);
	else if (strcmp(c->cmd, "run") == 0)
		r = cli_cmd_run(c, g);
	sp_graph_free(&g);
	return r;
}

int main(int argc, char **argv)
{
	struct cli c = { 0 };
	sp_err_t cerr = { 0 };
	/* Under an address-space limit too low to start, OpenBLAS's load-time
	 * threads spin retrying their buffers: refuse at once (_exit: exit()
	 * would wait for them). */
	if (sp_runtime_check_address_space(0, &cerr) != 0) {
		fprintf(stderr, "starpipe: %s\n", cerr.msg);
		_exit(EXIT_RUNTIME);
	}
	cli_blas_check(argv); /* first: it may exec starpipe again */
	/* An output over the file-size limit (ulimit -f) must fail its item
	 * with EFBIG ("File too large"), not kill the batch with SIGXFSZ. */
	signal(SIGXFSZ, SIG_IGN);
	sp_runtime_hwloc_env(); /* before MPI_Init loads a topology */
	if (argc > 1 && strcmp(argv[1], "tune") == 0) {
		/* the sweep starts runs as children and never StarPU nor MPI itself */
		char exe[4096];
		self_exe(exe, sizeof exe, argv[0]);
		return sp_tune_main(argc - 1, argv + 1, exe, cli_run_option_takes_value);
	}
	if (argc > 1 && strcmp(argv[1], "calibrate") == 0)
		return main_calibrate(argc, argv);
	/* MPI first (when mpirun or srun started us), before any thread */
	if (sp_cluster_init(&argc, &argv, &cerr) != 0) {
		fprintf(stderr, "starpipe: %s\n", cerr.msg);
		return EXIT_RUNTIME;
	}
	int r = cli_parse_args(argc, argv, &c);
	if (r == 0 && !info_command(&c, &r) && (r = check_command(&c)) == 0)
		r = graph_command(&c);
	free_vars(&c);
	sp_cluster_finalize();
	return r;
}
