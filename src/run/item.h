/* What a stage's glue sees of a running work item: values, tasks, errors. */
#ifndef SP_ITEM_H
#define SP_ITEM_H

/*
 * DESIGN: a work item (one input file, or one manifest line) runs in its own
 * driver thread, which calls each stage's `run` in topological order.  A
 * stage's run submits StarPU tasks and returns output values that wrap data
 * handles; later stages' tasks depend on them through StarPU's implicit data
 * dependencies, so stages of one item, and different items, overlap.
 *
 * Codelet functions return void: a failing kernel records the first error of
 * its item in the item's sp_status_t (atomically, as Chameleon's sequence
 * status); the driver checks it when it waits, and the run reports it.
 */

#include <stdatomic.h>
#include <starpu.h>

#include "error.h"
#include "graph.h"
#include "sim_host.h"

/* The first error of an item; set from any worker thread. */
typedef struct sp_status {
	atomic_int code; /* 0 until the first error */
	sp_err_t err;    /* written once, by the thread that set code */
} sp_status_t;

/* Records an error if none is recorded yet; returns code. */
int sp_status_set(sp_status_t *st, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Copies an sp_err_t into the status if none is recorded yet; returns its code. */
int sp_status_set_err(sp_status_t *st, const sp_err_t *err);

static inline int sp_status_failed(sp_status_t *st)
{
	return atomic_load_explicit(&st->code, memory_order_acquire) != 0;
}

/* A stage's output: stage-specific structs embed this as their first member.
 * free_cb unregisters handles and frees buffers; it may block until the
 * tasks using them are done. */
typedef struct sp_value {
	const char *type; /* the port type, as in sp_port_spec_t */
	void (*free_cb)(struct sp_value *v);
} sp_value_t;

/*
 * A job: the state that several stages of one item share (DESI's frame and
 * its pools, APPLE's micrograph and its images), held by the values that
 * carry it from stage to stage.  Glue embeds sp_job_t as its job struct's
 * first member and sets free_cb; sp_job_val() wraps a reference in a value
 * of a port type, and the last sp_job_unref() (a value's free, or the
 * glue's own) calls free_cb.  A job is touched only by its item's driver
 * thread (values are made and freed there), so the count is a plain int.
 */
typedef struct sp_job {
	int refs; /* values, and others, holding it; 0 when made */
	void (*free_cb)(struct sp_job *job);
} sp_job_t;

/* Takes one more reference on job. */
void sp_job_ref(sp_job_t *job);
/* Drops one reference; at the last (or none was taken), frees the job with
 * its free_cb.  Does nothing when job is NULL. */
void sp_job_unref(sp_job_t *job);
/* A new value of port type `type` holding a reference to job, in *out:
 * 0, or SP_ENOMEM with job untouched. */
int sp_job_val(sp_job_t *job, const char *type, sp_value_t **out);
/* The job of a value that sp_job_val() made. */
sp_job_t *sp_job_of(const sp_value_t *v);

typedef struct sp_item sp_item_t;

/* The per-(item, stage) context every task carries as its callback argument:
 * it names the task in traces and reports, and points to the status. */
typedef struct sp_taskctx {
	sp_item_t *item;
	sp_status_t *status;
	const char *path;   /* the item's input path (sp_item_path), for messages */
	const char *stage;  /* stage name in the graph */
	const char *kernel; /* codelet name, e.g. "jsync_matvec" */
	int stage_index;
	int priority;
	int32_t where; /* StarPU worker mask of the stage's `where:`; -1: the codelet's */
	unsigned sched_ctx; /* the StarPU context of the item's lane (lanes.h) */
	atomic_int pending; /* tasks submitted whose completion callback has not returned */
} sp_taskctx_t;

/* Returns a context for tasks of `kernel` in the current stage; it lives as
 * long as the item.  NULL on ENOMEM. */
sp_taskctx_t *sp_item_taskctx(sp_item_t *item, const sp_gstage_t *stage,
			      const char *kernel);

/* Waits until every task submitted through ctx has finished, its
 * completion callback included.  Call it before freeing what the tasks'
 * cl_arg points to (STARPU_CL_ARGS_NFREE): StarPU releases a task's data,
 * which wakes a starpu_data_acquire() on it, before the task's callback
 * runs, and the callback may still read cl_arg (the bound figures ask the
 * performance model, whose footprint function reads it: a use after free
 * that ASan caught in a J-sync sweep). */
void sp_taskctx_quiesce(sp_taskctx_t *ctx);

/*
 * Submitting tasks: every starpipe task goes through one of these two
 * macros (as Chameleon's single insert-task macro), which count it for
 * progress and reports, add the arguments that name it, time it and apply
 * the stage's `priority:` and `where:`, and on failure record in
 * ctx->status one message naming the item, the stage, the codelet and
 * StarPU's error:
 *   PATH: stage 'STAGE': StarPU refused a task of codelet KERNEL: No such
 *   device (StarPU error -19)[: no worker of this run can execute it; ...]
 * Both return 0, or SP_ESTARPU with the status set.
 *
 *   sp_task_insert(ctx, cl, ...): a detached task (starpu_task_insert());
 *   `...` are its starpu_task_insert() arguments (access modes and handles,
 *   STARPU_FLOPS, STARPU_CL_ARGS_NFREE arg, size, ...) without the final 0.
 *     ret = sp_task_insert(ctx, &read_cl, STARPU_W, h, STARPU_CL_ARGS_NFREE, a, sizeof *a);
 *
 *   sp_task_insert_joinable(ctx, &task, cl, ...): a task the stage waits for
 *   with sp_task_join() (StarPU frees it then), whose cl_arg the stage owns
 *   and frees after the join; *task is the task, or NULL when submission
 *   failed (the task is destroyed).  Returns SP_ENOMEM, with no status set,
 *   when StarPU could not build the task.
 *
 * ctx is evaluated once; cl and the other arguments as in
 * starpu_task_insert().  A stage submits tasks in no other way: no
 * codelets/<pipeline>/<stage>_codelet.c calls starpu_task_insert,
 * starpu_task_build or starpu_task_submit (tests/stage-kinds.test).
 */
#define sp_task_insert(ctx, cl, ...)                                                 \
	__extension__({                                                              \
		sp_taskctx_t *const sp__ti_ctx = (ctx);                              \
		struct starpu_codelet *const sp__ti_cl = (cl);                       \
		sp__task_submitting(sp__ti_ctx, sp__ti_cl);                          \
		sp__task_submit_check(sp__ti_ctx, sp__ti_cl, starpu_task_insert(     \
				sp__ti_cl, __VA_ARGS__, SP__TASK_ARGS(sp__ti_ctx), 0)); \
	})
#define sp_task_insert_joinable(ctx, taskp, ...)                                     \
	__extension__({                                                              \
		sp_taskctx_t *const sp__ti_ctx = (ctx);                              \
		sp__task_submit_joinable(sp__ti_ctx, (taskp), starpu_task_build(     \
				__VA_ARGS__, SP__TASK_ARGS(sp__ti_ctx), 0));         \
	})

/* Waits for a task of sp_task_insert_joinable() (StarPU frees it) and
 * clears *task; does nothing when *task is NULL. */
void sp_task_join(struct starpu_task **task);

/* Internal to the macros above (src/run/task.c); not for stages. */
/* Counts a task of codelet cl about to be submitted (before: it may end,
 * and be counted done, before the submission returns). */
void sp__task_submitting(sp_taskctx_t *ctx, const struct starpu_codelet *cl);
/* The one error path of task submission: ret is StarPU's return code;
 * returns 0, or records the failure in ctx->status and returns SP_ESTARPU. */
int sp__task_submit_check(sp_taskctx_t *ctx, const struct starpu_codelet *cl, int ret);
/* Makes a built task (NULL: SP_ENOMEM) joinable, counts and submits it; sets
 * *out to it, or to NULL when submission failed (the task is destroyed). */
int sp__task_submit_joinable(sp_taskctx_t *ctx, struct starpu_task **out,
			     struct starpu_task *task);
/* The completion callback: the task's worker and dates, for the report. */
void sp__task_done_cb(void *arg);
/* The starpu_task_insert()/starpu_task_build() arguments every task carries. */
#define SP__TASK_ARGS(ctx)                                                  \
	STARPU_CALLBACK_WITH_ARG_NFREE, sp__task_done_cb, (void *)(ctx),     \
		STARPU_NAME, (ctx)->kernel, STARPU_PRIORITY, (ctx)->priority,    \
		STARPU_EXECUTE_WHERE, (unsigned long long)(long long)(ctx)->where, \
		STARPU_SCHED_CTX, (ctx)->sched_ctx

/*
 * One way to define a codelet: its history-based performance model (symbol
 * = name; optional footprint and size_base functions), its CPU function and, in a CUDA
 * build, its CUDA function (asynchronous: it queues work on the worker's
 * stream and returns; StarPU waits for the stream).  cuda is SP_CUDA(fn)
 * or SP_NO_CUDA; the modes follow nbuffers.
 *   SP_CODELET(score_cl, "apple_score", score_cpu, SP_CUDA(score_cuda), NULL, NULL,
 *              3, STARPU_R, STARPU_R, STARPU_W);
 */
#ifdef SP_HAVE_CUDA
#define SP_CUDA(fn) .cuda_funcs = { fn }, .cuda_flags = { STARPU_CUDA_ASYNC },
#elif defined(SP_SIMGRID)
/* starpipe-sim: no codelet runs; stand-ins (src/runtime/sim_host.h) charge each task
 * its model's time, with the platform's host model applied, and let StarPU
 * place tasks on simulated GPUs. */
#define SP_CUDA(fn) .cuda_funcs = { sp__sim_cuda_task },
#else
#define SP_CUDA(fn)
#endif
#define SP_NO_CUDA
#ifdef SP_SIMGRID
#define SP__CPU_FUNCS(cpu) .cpu_funcs = { sp__sim_cpu_task }, \
	.flags = STARPU_CODELET_SIMGRID_EXECUTE,
/* the kernel is not called, but stays referenced */
#define SP__CPU_REF(var, cpu) \
	static void (*const var##_cpu_ref)(void *[], void *) __attribute__((unused)) = cpu;
#else
#define SP__CPU_FUNCS(cpu) .cpu_funcs = { cpu },
#define SP__CPU_REF(var, cpu)
#endif
void sp__codelet_register(struct starpu_codelet *cl); /* sched_hp.h */
#define SP_CODELET(var, name_, cpu, cuda, footprint_, size_base_, nb, ...) \
	SP__CPU_REF(var, cpu)                                              \
	static struct starpu_codelet var;                                  \
	__attribute__((constructor)) static void var##_register(void)     \
	{                                                                  \
		sp__codelet_register(&var);                                \
	}                                                                  \
	static struct starpu_perfmodel var##_model = {                     \
		.type = STARPU_HISTORY_BASED,                              \
		.symbol = name_,                                           \
		.footprint = footprint_,                                   \
		.size_base = size_base_,                                   \
	};                                                                 \
	static struct starpu_codelet var = {                     \
		SP__CPU_FUNCS(cpu)                               \
		cuda                                             \
		.nbuffers = nb,                                  \
		.modes = { __VA_ARGS__ },                        \
		.model = &var##_model,                           \
		.name = name_,                                   \
	}

/* Registers `path` as an output of the item and returns, in *tmp, the
 * temporary file to write it into (see sp_outset_add() in fsutil.h).  The
 * item's outputs are renamed into place together once every stage of the
 * item has succeeded, and removed if it fails.  Call from a stage's run(),
 * not from a task.  Returns 0, or SP_E* with err naming the file. */
int sp_item_output(sp_item_t *item, const char *path, const char **tmp, sp_err_t *err);

/* The item's input path, its index, its status. */
const char *sp_item_path(const sp_item_t *item);
size_t sp_item_index(const sp_item_t *item);
sp_status_t *sp_item_status(sp_item_t *item);

/* A parameter of the stage for this item: its text with the per-item
 * builtins expanded (sp_graph_expand_item(): malloc'd).  NULL when out of
 * memory or when a ${header.KEY} cannot be read: the item's status then
 * says why (the caller's SP_ENOMEM does not replace it: the first error
 * stays). */
char *sp_item_param(sp_item_t *item, const sp_gstage_t *stage, const char *name);

/* The stage of the item's graph whose output feeds input `input` of
 * `stage` (NULL when there is no such input), e.g. for an estimate that
 * needs its producer's parameters (sp_stage_estimate_fn): the caller checks
 * its kind before reading its typed parameters. */
const sp_gstage_t *sp_item_producer(const sp_item_t *item, const sp_gstage_t *stage, size_t input);

/* An item's large buffers (a micrograph and APPLE's images, moments,
 * spectra, responses and masks; a frame's pixels and model):
 * sp_item_buffer_get() is starpu_malloc() (pinned host memory where there
 * are CUDA workers), but it first takes a buffer of exactly `bytes` that an
 * item of the batch has handed back with sp_item_buffer_put(), so that
 * items of one size do not each pay for fresh memory: the page faults of
 * its first touch and, on a GPU node, its pinning (doc/scheduling.md).  sp_item_buffer_put() keeps at
 * most SP_ITEM_POOL buffers of 1 MiB or more, and starpu_free()s the others;
 * the runtime frees what is kept before StarPU shuts down.  Unregister a
 * buffer's StarPU handle before handing it back.  get returns 0 or
 * starpu_malloc's error; put accepts NULL. */
/* (an APPLE micrograph hands back 8 buffers of 1 MiB or more, a DESI frame
 * 4: 32 keep four micrographs' worth, for items that end close together,
 * as the 6 in flight on a one-GPU node do; a buffer freed and allocated
 * again there is unpinned and pinned again, which costs the driver far
 * more than the item's other host work) */
#define SP_ITEM_POOL 32
int sp_item_buffer_get(void **p, size_t bytes);
void sp_item_buffer_put(void *p, size_t bytes);
int sp__item_buffers_drain(void); /* frees the kept buffers (at the runtime's shutdown); how many */

/* Adds a figure to the item's section of the run report (JSON number); a key
 * reported again keeps its last value. */
void sp_item_report_num(sp_item_t *item, const char *key, double value);

/* starpipe-sim: how many times a data-dependent loop runs in the simulated
 * run (no codelet computes there): the value given by --sim-count NAME=N,
 * else def.  Names: "iterations" (J-sync's power iterations),
 * "retrain_attempts" (APPLE's retraining), as in the real run's report. */
long sp_sim_count(const char *name, long def);

/* Number of CPU and CUDA workers that run item's tasks, for task
 * splitting: its lane's (lanes.h: the CPU lane has no CUDA worker, so an
 * item there is planned in the CPU's shape); item NULL, or an item not yet
 * handed to a lane (a memory estimate): the whole session's. */
unsigned sp_item_nworkers(const sp_item_t *item);

/* Number of CUDA workers that run item's tasks (as above; 0 in a CPU-only
 * build or run, and in the CPU lane). */
unsigned sp_item_ncuda_workers(const sp_item_t *item);

/* A vector handle of n elements of elem bytes for item's working data,
 * which StarPU allocates where its first task runs (home -1): except for
 * an item of a lane without CUDA workers on a node with some (the CPU
 * lane), whose main-memory copy StarPU would pin (cudaHostAlloc, which a
 * CUDA worker of the GPU lane runs for it), so it gets ordinary memory of
 * its own instead (home main memory).  Unregister it with
 * sp_item_data_unregister().  0, or SP_ENOMEM. */
int sp_item_vector_register(const sp_item_t *item, starpu_data_handle_t *h, size_t n, size_t elem);
/* Unregisters a handle of sp_item_vector_register() (sp_data_unregister())
 * and frees its memory when it had its own. */
void sp_item_data_unregister(starpu_data_handle_t h);

#endif /* SP_ITEM_H */
