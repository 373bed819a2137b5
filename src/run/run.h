/* Running a validated graph over its work items. */
#ifndef SP_RUN_H
#define SP_RUN_H

#include <stddef.h>

#include "error.h"
#include "graph.h"

typedef struct sp_run_opts {
	size_t inflight;   /* items driven at once; 0: 2, and 4 more per GPU, within the memory (2 overlaps I/O of one item with compute of another) */
	int verbose;       /* per-item lines on stderr */
	int quiet;         /* no notices on stderr (errors still) */
	int skip_existing; /* skip an item whose every output exists */
	const char *journal; /* JSON-lines file appended as each item ends, or NULL */
	unsigned long long memory_limit; /* bytes an item may need; 0: the machine's (or cgroup's) */
	size_t shard_i, shard_k; /* run only items with index % shard_k == shard_i (k = 0: all) */
	int trace;         /* MPI ranks: gather every rank's trace events (res->trace_events) */
	double item_timeout; /* seconds an item may run before it is failed (0: no limit) */
	/* Each item's graph (a manifest row's values over g's variables:
	 * sp_graph_variant()), NULL entries or a NULL array for g itself.
	 * Every one has g's stages. */
	const sp_graph_t *const *item_graphs;
} sp_run_opts_t;

/* Item i's graph: ig[i], or g when ig or ig[i] is NULL. */
const sp_graph_t *sp_run_item_graph(const sp_graph_t *g, const sp_graph_t *const *ig, size_t i);

/* The reason an MPI rank gives when another rank refused the batch. */
#define SP_RUN_OTHER_RANK "another rank could not start the batch"

typedef struct sp_run_result {
	size_t nok, nfailed, nskipped;
	size_t ncancelled, nnotrun; /* interrupted while running, or before it started */
	int signal;       /* the signal that interrupted the batch, or 0 */
	int journal_failed; /* a journal line could not be written (said on stderr): exit 1 */
	char *items_json; /* JSON array of per-item figures; caller frees */
	/* An MPI batch (rank 0; NULL elsewhere and in one process): the ranks'
	 * per-stage and per-worker lines (sp_runtime_stage_lines,
	 * sp_runtime_worker_lines), the report's "cluster" object, and every
	 * rank's trace events (ntrace_events arrays).  sp_run_result_free()
	 * frees them and items_json. */
	char *stage_lines, *worker_lines, *cluster_json;
	char **trace_events;
	size_t ntrace_events;
	sp_err_t err;     /* why the batch was refused, when sp_run returns SP_EINVAL */
} sp_run_result_t;

/* Plans the batch: expands every item's outputs (SP_PT_OUTPUT parameters,
 * of the item's graph: ig as sp_run_item_graph() takes it) and refuses two
 * items, or two outputs of one item, that would write the same file
 * (SP_EINVAL, both inputs named in err).  Needs no StarPU. */
int sp_run_plan_check(const sp_graph_t *g, const sp_graph_t *const *ig, char *const *items,
		      size_t nitems, sp_err_t *err);

/* Inputs that are outputs: for each item, producer[i] is the index of
 * another item of the batch that would write the file items[i] (same
 * device and inode, so symlinks and hard links count), or SIZE_MAX.  An item
 * whose own output is its input is refused (SP_EINVAL, err names it).
 * Needs no StarPU. */
int sp_run_plan_inputs(const sp_graph_t *g, const sp_graph_t *const *ig, char *const *items,
		       size_t nitems, size_t *producer, sp_err_t *err);

/* The graph file or the item that `path` is (same device and inode), or
 * NULL when it is neither or does not exist: a log the run would write
 * (--report, --journal...) must not replace an input. */
const char *sp_run_path_is_input(const sp_graph_t *g, char *const *items, size_t nitems,
				 const char *path);

/* Runs every item through the graph's stages.  A failing item is reported on
 * stderr as "starpipe: ITEM: reason" and the batch goes on; an item's
 * outputs are committed together when it succeeds (fsutil.h output sets).
 * StarPU must be up (sp_runtime_init).  Returns 0 when every item succeeded
 * or was skipped, SP_ECANCELED when some failed or the batch was
 * interrupted, SP_EINVAL when the plan was refused (res->err), or another
 * SP_E* for a failure of the run itself. */
int sp_run(const sp_graph_t *g, char *const *items, size_t nitems, const sp_run_opts_t *opts,
	   sp_run_result_t *res);

void sp_run_result_free(sp_run_result_t *res);

/* The stop signal that sp_run_interrupt() was given, or 0: a caller that
 * runs several batches (--follow) ends when it is set. */
int sp_run_stop_signal(void);

/* The memory an item may use by default: physical memory, or the cgroup's
 * limit (Slurm's --mem) or the address space that ulimit -v leaves beyond
 * the program's floor, when lower. */
unsigned long long sp_run_machine_memory(void);

/* Interrupts the running batch (call from a signal-handling thread, not a
 * handler): no new item starts, and the items in flight are cancelled (their
 * temporaries removed, their previous outputs untouched). */
void sp_run_interrupt(int signo);

/* starpipe-sim's --sim-count NAME=N (see sp_sim_count() in item.h);
 * returns 0, or -1 when the table is full. */
int sp_sim_count_set(const char *name, long value);

#endif /* SP_RUN_H */
