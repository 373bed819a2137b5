/* The StarPU session of a starpipe process: workers, statistics, reports. */
#ifndef SP_RUNTIME_H
#define SP_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

/*
 * DESIGN: one StarPU session per process, configured from the command line
 * and the graph's `runtime:` section (never only from STARPU_* variables).
 * Per-task profiling is on: every task's completion callback records its
 * worker and its start/end dates, from which the run report (tasks per stage
 * per worker type, busy fraction per worker) and the Chrome trace are built.
 * Bytes moved come from StarPU's bus profiling counters.
 */

typedef struct sp_runtime_conf {
	const char *scheduler;     /* "auto": heteroprio (sched_hp.h) with GPUs, lws without */
	const struct sp_graph *graph; /* the graph run (heteroprio's buckets); may be NULL */
	int ncpus;                 /* -1: all cores */
	int ncuda;                 /* -1: all GPUs */
	int workers_per_gpu;       /* >= 1 */
	const char *perfmodel_dir; /* "" or NULL: per-user default */
	int calibrate;             /* 0, 1 (calibrate), 2 (recalibrate from scratch) */
	int progress;              /* 0 off, 1 on stderr */
	double progress_period;    /* seconds between lines; 0: 0.5 on a terminal, 10 otherwise */
	int trace;                 /* record per-task records for a trace */
	int bound;                 /* record tasks and dependencies for the lower bounds */
	int lanes;                 /* SP_LANES_* (lanes.h) */
	const char *pipeline;      /* the graph's pipeline: its lanes' item model (lanes.h) */
	int cpu_lane;              /* CPU workers of the CPU lane; -1: the default split */
	int cpu_first, cpu_count;  /* cpu_count > 0: CPU workers bound to cores cpu_first ..
				    * cpu_first + cpu_count - 1 (MPI ranks sharing a node),
				    * and ncpus -1 means cpu_count */
	const char *node_type;     /* STARPU_HOSTNAME: the name of the models and bus files
				    * (sp_runtime_node_type); NULL: the default */
	const char *node_type_from; /* where node_type came from (sp_runtime_node_type) */
	int record_versions;       /* with calibrate: record the codelets' code versions
				    * beside the models (one process per batch: MPI rank 0) */
} sp_runtime_conf_t;

/* Sets HWLOC_COMPONENTS=-gl where it is not set: before anything loads an
 * hwloc topology (MPI_Init, starpu_init); sp_runtime_init calls it too. */
void sp_runtime_hwloc_env(void);

/* Starts StarPU.  Returns 0 or SP_ESTARPU/SP_ENODEV with err set. */
int sp_runtime_init(const sp_runtime_conf_t *conf, sp_err_t *err);

/* Waits for every task, stops the progress display and StarPU. */
void sp_runtime_shutdown(void);

/* The per-user default folder of performance models: under
 * $XDG_CACHE_HOME, else ~/.cache, else (no HOME) $TMPDIR/starpipe-UID (or
 * /tmp/starpipe-UID), which sp_runtime_init() creates 0700 and refuses if
 * it is a symbolic link, someone else's, or group/world-writable. */
const char *sp_runtime_default_perfmodel_dir(char *buf, size_t len);

/* Checks before StarPU starts (StarPU aborts on a perf-model "folder" that
 * is a file): returns 0, or -1 with a one-line reason in msg.  A folder
 * that does not exist yet is valid (it is created). */
int sp_runtime_check_perfmodel_dir(const char *path, char *msg, size_t len);

/* Registers fn to run in sp_runtime_shutdown() once every task has ended
 * and before StarPU stops (the last registered first; each once; the list
 * is emptied there): a layer above that keeps StarPU memory, such as
 * pinned buffers, frees it then.  0, or SP_ENOMEM when the list is full. */
int sp_runtime_at_shutdown(void (*fn)(void));

/* Whether `name` is a scheduler this StarPU knows ("auto" and "" are):
 * returns 0, or -1 with a one-line reason in msg (len bytes; 1024 holds the
 * list of schedulers).  StarPU only warns about an unknown one, and falls
 * back; the command line refuses it, and hands it to the graph loader in
 * its registry (stage.h) for the graph's `runtime: scheduler:`. */
int sp_runtime_check_sched(const char *name, char *msg, size_t len);

/* Number of CPU / CUDA workers of the session. */
unsigned sp_runtime_ncpu_workers(void);
unsigned sp_runtime_ncuda_workers(void);

/* The least address space (MiB, for ulimit -v) that starpipe needs from
 * now on: what is mapped now, a margin, and either OpenBLAS's load-time
 * buffers (nthreads 0: at program start) or `nthreads` more threads (before
 * StarPU starts them).  sp_runtime_check_address_space() says whether the
 * limit allows it (0) or not (SP_ENOMEM, err naming both figures);
 * sp_runtime_init() checks it for its workers. */
unsigned long sp_runtime_min_address_space_mib(int nthreads);
/* Bytes that ulimit -v leaves beyond what is mapped now (ULLONG_MAX without
 * a limit): the items' memory bound counts it. */
unsigned long long sp_runtime_address_space_left(void);
int sp_runtime_check_address_space(int nthreads, sp_err_t *err);
/* Number of GPUs the session's CUDA workers drive (several workers may
 * share one: --workers-per-gpu). */
unsigned sp_runtime_ngpus(void);

/* Whether the run uses heteroprio: a task's priority is then its bucket
 * (sched_hp.h), not its stage's `priority:`. */
int sp_runtime_heteroprio(void);

/* Whether the session's scheduler places tasks by the performance models:
 * StarPU's dm* and heft ones, and starpipe's heteroprio (its buckets come
 * from them); lws and eager do not read them. */
int sp_runtime_uses_models(void);

/* Progress: a batch's item count (added: a session of several batches,
 * --follow, counts them all) and completed items. */
/* "StarPU 1.3.10 (at most 4 CPU workers, 4 CUDA devices; CUDA no)": the
 * library starpipe runs on and the caps it was built with. */
void sp_runtime_describe(char *buf, size_t size);

void sp_runtime_items(size_t total);
void sp_runtime_item_done(void);

/* A batch-wide stage's count for the report ("shared_stages"): it ran
 * `runs` times for `values` distinct values of its parameters (more runs
 * than values: an idle value was freed and read again).  This process's. */
void sp_runtime_shared_stage(const char *stage, unsigned runs, unsigned values);

/* Counting of tasks (used by sp_task_insert() and the callback, task.c). */
void sp__runtime_task_submitted(void);
void sp__runtime_task_done(const char *stage, const char *kernel, int workerid,
			   double start_us, double end_us);

/* A batch run by several processes (MPI ranks), its figures gathered on
 * rank 0 (src/run/merge.c), so that the summary and the report speak
 * for the batch, not for rank 0 alone.  The reports take NULL for this
 * process's own figures (one process). */
typedef struct sp_runtime_batch {
	size_t items;             /* handled by any rank: ok, failed, skipped or cancelled */
	int ranks;
	const char *stage_lines;  /* every rank's sp_runtime_stage_lines(), concatenated */
	const char *worker_lines; /* every rank's sp_runtime_worker_lines(), concatenated */
} sp_runtime_batch_t;

/* Writes the run report as JSON (items_json: a JSON array text of per-item
 * figures, or NULL; batch: see above; cluster_json is written as-is under
 * "cluster").  Returns 0 or SP_EIO. */
int sp_runtime_write_report(const char *path, const char *pipeline, const char *items_json,
			    const sp_runtime_batch_t *batch, const char *cluster_json, sp_err_t *err);
/* This process's per-stage figures as text, one line per (stage, kernel):
 * "STAGE\tKERNEL\tCPU_TASKS\tCUDA_TASKS\tCPU_BUSY_US\tCUDA_BUSY_US\n"
 * (malloc'd; NULL on ENOMEM).  The reports sum the lines of several ranks. */
char *sp_runtime_stage_lines(void);
/* This process's workers as text, one line each, rank being this process's:
 * "RANK\tNAME\tCPU|CUDA\tTASKS\tBUSY_US\n" (malloc'd; NULL on ENOMEM). */
char *sp_runtime_worker_lines(int rank);

/* Prints the human-readable report to stderr (batch: as for the JSON report). */
void sp_runtime_print_report(const char *pipeline, const sp_runtime_batch_t *batch);

/* Writes the run's figures for starpipe tune, one "NAME<TAB>VALUE" line
 * each (the names are in doc/tuning.md): configuration, makespan (first
 * task start to last task end), tasks per stage per worker type, busy /
 * transfer / idle fraction per worker, bytes moved, and the lower bounds
 * when the session records them (conf.bound).  failed: the failed items.
 * Atomic (temporary name, rename).  Returns 0 or SP_EIO. */
int sp_runtime_write_figures(const char *path, size_t failed, sp_err_t *err);
/* Writes one line per task: "WORKER<TAB>STAGE<TAB>KERNEL<TAB>START_S<TAB>END_S",
 * seconds since the first task started (needs conf.trace).  Atomic. */
int sp_runtime_write_tasks(const char *path, sp_err_t *err);

/* Writes the per-task timeline in Chrome trace-event format. */
int sp_runtime_write_trace(const char *path, char *const *events, size_t nevents, sp_err_t *err);
/* This process's trace events as a JSON array (malloc'd): Chrome trace
 * events with this pid, a process_name label when label is not NULL, and
 * timestamps shifted by shift_us (ranks of one batch on one time line).
 * sp_runtime_write_trace() writes the union of such arrays, or this
 * process's own when events is NULL. */
char *sp_runtime_trace_events(int pid, const char *label, double shift_us);
/* Seconds since sp_runtime_init(): the simulated node's under starpipe-sim
 * (StarPU's clock, as the workers' busy times), else this machine's. */
double sp_runtime_elapsed_s(void);
/* Wall-clock seconds (CLOCK_REALTIME) at sp_runtime_init(). */
double sp_runtime_t0_wall(void);

/* ---- performance models (models.c) ---- */

/* The node type: the name StarPU files this machine's performance models
 * and bus measurements under (codelets/45/SYMBOL.NAME, bus/NAME.*: its
 * STARPU_HOSTNAME), so that every node of one type shares them in a shared
 * --perfmodel-dir.  At most SP_NODE_TYPE_MAX characters. */
#define SP_NODE_TYPE_MAX 63
/* Whether name is a valid node type (letters, digits, '_', '-'; it names
 * files): 0, or -1 with a one-line reason in msg. */
int sp_runtime_check_node_type(const char *name, char *msg, size_t len);
/* The node type into buf: `asked` (--node-type) when not NULL or "", else
 * STARPU_HOSTNAME, else Slurm's SLURM_JOB_PARTITION (when a valid name),
 * else the host name up to its first dot (StarPU's default).  Returns where
 * it came from: "--node-type", "STARPU_HOSTNAME", "Slurm partition" or
 * "host name". */
const char *sp_runtime_node_type(const char *asked, char *buf, size_t len);

/* Whether the folder (NULL or "": the default) holds the bus measurements
 * of node_type (bus/NAME.config): StarPU measures the bus at start and
 * writes them when it does not. */
int sp_runtime_bus_measured(const char *perfmodel_dir, const char *node_type);

/* StarPU's calibration threshold: a history model's footprint with fewer
 * samples is not used (STARPU_CALIBRATE_MINIMUM, default 10). */
unsigned sp_runtime_calibration_minimum(void);

/* One row of a codelet's history model: its samples for one worker type and
 * footprint.  A codelet without a model file, or whose model holds no
 * measurement, has one row saying so. */
typedef enum { SP_MODEL_MEASURED, SP_MODEL_NONE, SP_MODEL_EMPTY } sp_model_state_t;
typedef struct sp_model_row {
	const char *symbol;     /* the caller's string: the rows of a codelet follow each other */
	sp_model_state_t state;
	int stale;              /* the model was started with another code version */
	char arch[64];          /* StarPU's name of the worker type: "cpu0_impl0 (Comb0)" */
	char key[48];           /* the same, stable from one load to the next */
	int cuda;               /* a CUDA worker type's */
	uint32_t footprint;
	unsigned nsample;
	double mean_us, spread; /* spread: standard deviation / mean */
	double flops;           /* the tasks' declared flops */
} sp_model_row_t;

/* Reads the history-based models of `symbols` for the node type that
 * STARPU_HOSTNAME names (set it to sp_runtime_node_type's first) from the
 * folder dir (NULL or "": the default one; StarPU makes its empty
 * sub-folders there, no model is written): *rows (malloc'd, *nrows of
 * them), the folder read into `folder`.  Only outside a StarPU session, in
 * a process that starts none afterwards (sp_runtime_init reads its graph's
 * models itself): it uses StarPU's model reader as its tools do, and reads
 * one folder per process.  Returns 0, or SP_EIO when dir is unusable,
 * SP_ENOMEM. */
int sp_runtime_model_rows(const char *dir, const char *const *symbols, size_t n,
			  sp_model_row_t **rows, size_t *nrows, char *folder, size_t flen,
			  sp_err_t *err);

/* Prints those rows (`starpipe models`): per symbol and worker type, each
 * footprint's samples, mean and relative spread, flagging a model with
 * fewer samples than StarPU's threshold as uncalibrated, one with a relative
 * spread above 25 % as noisy, one started with other code as stale; then a
 * summary line.  node_type_from: where the node type came from (its line).  Needs no starpu_init().  Returns as sp_runtime_model_rows. */
int sp_runtime_models(const char *dir, const char *node_type_from, const char *const *symbols,
		      size_t n, FILE *out, sp_err_t *err);

/* One line of PMDIR/starpipe-estimated.tsv: a model entry tools/sim-node or
 * tools/fit-cpu-models wrote for a node that never measured it. */
typedef struct sp_estimated {
	char sym[128], worker[16], origin[128];
	unsigned long fp, n;
	double mean_us;
} sp_estimated_t;
/* The entries for host in dir's starpipe-estimated.tsv, *n of them (NULL
 * when none, or the file is missing); the caller frees them. */
sp_estimated_t *sp_runtime_estimated_read(const char *dir, const char *host, size_t *n);

/* What the session found of its graph's models before it started
 * (conf.graph; all zero without one): the node type, where it came from,
 * and how many of the graph's codelets have a calibrated footprint (one
 * with at least the threshold's samples) for that node type. */
typedef struct sp_runtime_models_seen {
	const char *node_type, *node_type_from, *folder;
	size_t ncodelets, ncalibrated;
	int calibrate; /* the session's: StarPU writes its models at shutdown when not 0 */
} sp_runtime_models_seen_t;
void sp_runtime_models_seen(sp_runtime_models_seen_t *out);

#endif /* SP_RUNTIME_H */
