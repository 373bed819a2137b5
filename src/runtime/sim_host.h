/* starpipe-sim's host model: what a node's performance models cannot know. */
#ifndef SP_SIM_HOST_H
#define SP_SIM_HOST_H

/*
 * DESIGN: a history model is the mean time of a codelet measured in whatever
 * load it was calibrated in.  On a real node a task's time also depends on
 * what runs beside it, and StarPU's simulator charges none of that (it
 * predicted mixed CPU+GPU runs far too fast: doc/scheduling.md).  The host model adds three
 * things, each with its parameters in the platform's file
 * PMDIR/starpipe-sim/HOST.conf (key = value; doc/scheduling.md says how each
 * was calibrated, tools/fit-host-model derives them from a real sweep):
 *
 * - CPU contention: a CPU task of codelet C progresses at 1 / (a + b (k - 1))
 *   of its model's speed while k CPU workers run tasks (k counts it; the
 *   rate follows k as other tasks start and end): `cpu_slowdown.C = a b`,
 *   `cpu_slowdown.default` for the others.  `cpu_slowdown_small.C =
 *   BYTES a b`: C's tasks of fewer than BYTES bytes of data take this line
 *   instead (a plan's small tasks, whose working sets stay in cache, contend
 *   less than its large ones); give C a cpu_slowdown line too.
 * - Host starvation: when the StarPU workers' threads (CPU workers + CUDA
 *   workers) take every core (`cores`), starpipe's own threads (the item
 *   drivers, which plan and submit) and the CUDA drivers' launches share
 *   cores with them: CPU tasks without a cpu_slowdown line take
 *   `starved_cpu_slowdown` times their model, and the drivers' host work
 *   `starved_host_slowdown` times.  (GPU tasks keep their model's time: on
 *   the real node their median did not move with the CPUs' load.)
 * - The drivers' host work: the computations an item's driver thread does
 *   itself (DESI's per-bundle PSF sums, `desi.plan_bundle`) take no
 *   simulated time unless charged: `host_work_s.NAME = seconds` per call
 *   (deterministic), else this machine's thread CPU time times
 *   `host_time_scale` when that is set (the platform's core against this
 *   one; 0, the default: not charged); each item's end charges
 *   `item_commit_s` (the outputs' fsync and rename, which the simulator
 *   skips, and the driver's own work for the item), or
 *   `item_commit_s.PIPELINE` for the graph whose `pipeline:` is PIPELINE.
 * - Pinned memory: on a GPU node StarPU allocates main-memory replicas
 *   pinned (cudaHostAlloc; StarPU's simulator already charges the
 *   allocation), and releasing them costs the thread that
 *   unregisters: `pinned_free_s_per_GiB` (sp_data_unregister()).  With
 *   `pinned_alloc_serial = 1` the item buffers' pinned allocations
 *   (sp_sim_buffer_malloc()) run one at a time, as a real GPU node's first
 *   wave of items appeared to (doc/scheduling.md).
 * - The node's main memory: `memory_bytes`, which bounds the items in
 *   flight (the batch's memory limit) as the node's memory would, not this
 *   machine's (sp_sim_host_memory()).
 *
 * Without the file (or in `starpipe`, where tasks really run) all of this is
 * off and a simulated task takes its model's time, as StarPU charges it.
 */

#include <stdio.h>

#include <starpu.h>

#include "error.h"

#ifdef SP_SIMGRID
/* Loads PMDIR/starpipe-sim/HOST.conf when it exists (path NULL: look there;
 * else that file), after starpu_init (it reads the worker counts).  Returns
 * 0, or SP_EINVAL with err naming the file and line. */
int sp_sim_host_init(const char *pmdir, const char *host, const char *path, sp_err_t *err);

/* The file loaded, or NULL. */
const char *sp_sim_host_file(void);

/* The simulated node's main memory in bytes (`memory_bytes`), or 0. */
unsigned long long sp_sim_host_memory(void);

/* Whether a simulated run lies in the envelope the fidelity table validated
 * (tools/fidelity writes PMDIR/starpipe-sim/HOST.validated: pipeline,
 * scheduler, CPU and CUDA workers, error of each real run it simulated):
 * 1 iff the host model is loaded, no kernel that ran (kernels[0..nk)) has
 * an ESTIMATED model for host, and a run of the same pipeline and
 * scheduler, with GPUs iff this one has them and a CPU-worker count
 * within a factor 2 of ncpu, simulated within 25 % of its measurement.
 * Else 0, and why says what is missing (one line). */
int sp_sim_validated(const char *pmdir, const char *host, const char *pipeline,
		     const char *sched, unsigned ncpu, unsigned ncuda, const char *const *kernels,
		     size_t nk, char *why, size_t n);

/* The codelets' stand-ins (SP_CODELET in a SimGrid build).  The CPU one
 * (STARPU_CODELET_SIMGRID_EXECUTE) charges the task's model time with the
 * host model applied.  The CUDA one is asynchronous, as the real codelets
 * are (StarPU then charges the model's time on the simulated GPU's pipeline
 * itself); it is only called directly, for a reduction's replica, and does
 * nothing. */
void sp__sim_cpu_task(void *buffers[], void *cl_arg);
void sp__sim_cuda_task(void *buffers[], void *cl_arg);

/* Brackets a driver thread's own computation: charged in simulated time. */
typedef struct { double t0; const char *name; } sp_hostwork_t;
void sp_hostwork_begin(sp_hostwork_t *w, const char *name);
void sp_hostwork_end(sp_hostwork_t *w);

/* An item's end: charges item_commit_s, or the pipeline's own
 * item_commit_s.PIPELINE (the graph's `pipeline:` name) when set. */
void sp_sim_item_end(const char *pipeline);

/* starpu_malloc for an item buffer; one at a time when the host model has
 * `pinned_alloc_serial = 1` and the platform has GPUs. */
int sp_sim_buffer_malloc(void **p, size_t bytes);

/* Unregisters h (as starpu_data_unregister); a handle StarPU allocated
 * (registered with home node -1) that has a main-memory replica charges
 * `pinned_free_s_per_GiB` for it: that replica is pinned memory on a GPU
 * node, and unpinning it is the driver thread's work. */
void sp_data_unregister(starpu_data_handle_t h);
#else
static inline unsigned long long sp_sim_host_memory(void) { return 0; }
static inline void sp_data_unregister(starpu_data_handle_t h)
{
	starpu_data_unregister(h);
}
static inline int sp_sim_buffer_malloc(void **p, size_t bytes)
{
	return starpu_malloc(p, bytes);
}
typedef struct { int unused; } sp_hostwork_t;
static inline void sp_hostwork_begin(sp_hostwork_t *w, const char *name)
{
	(void)w;
	(void)name;
}
static inline void sp_hostwork_end(sp_hostwork_t *w) { (void)w; }
#endif

#endif
