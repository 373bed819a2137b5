/* Lanes: a GPU node split into a GPU lane and a CPU lane, each item run
 * whole in one of them, in that lane's plan (doc/scheduling.md, "Lanes"). */
#ifndef SP_LANES_H
#define SP_LANES_H

#include <stddef.h>
#include <stdio.h>

/* runtime: lanes: (and --lanes), the index of the word in "auto|off|on":
 * auto makes a CPU lane on a node with GPUs unless the scheduler or the CPU
 * workers were given, on makes one (on a CPU-only node too: two lanes of
 * CPU workers, the mechanism's test). */
enum { SP_LANES_AUTO, SP_LANES_OFF, SP_LANES_ON };
#define SP_MAX_LANES 2

/* Lanes of the session: 1 (no CPU lane) or 2.  Lane 0 is the GPU lane (on
 * a CPU-only node, the main lane): every worker, the session's scheduler;
 * lane 1 the CPU lane. */
int sp_runtime_nlanes(void);
/* The StarPU scheduling context of lane, for a task's STARPU_SCHED_CTX
 * (lane 0, or -1: StarPU's initial context). */
unsigned sp_runtime_lane_ctx(int lane);
/* The CPU / CUDA workers of lane; lane -1: the whole session's. */
unsigned sp_runtime_lane_ncpu(int lane);
unsigned sp_runtime_lane_ncuda(int lane);
/* The lanes' item model of a pipeline (lane_model.c, in
 * PMDIR/starpipe-lanes.NODE): what the CPU plan's item costs the CPU lane,
 * in core-seconds, the GPU lane's seconds per item, and its CPU workers'
 * seconds per item, each a mean over that many items (NAN and 0: never
 * measured). */
typedef struct {
	double cpu_core_s;
	long cpu_items;
	double gpu_item_s;
	long gpu_items;
	/* the CPU workers' seconds a GPU-lane item takes (its reads, stitches,
	 * writes: what the cores that feed the GPU do), over gpu_feed_items */
	double gpu_feed_s;
	long gpu_feed_items;
} sp_lane_model_t;
/* m: pipeline's model (NAN and 0 where none); 0, or -1 without one. */
int sp_runtime_lane_model_get(const char *pipeline, sp_lane_model_t *m);
/* Adds a batch's figures (a count of 0: not measured) to pipeline's model;
 * 0, or -1 with errno when the file cannot be written. */
int sp_runtime_lane_model_add(const char *pipeline, const sp_lane_model_t *batch);
/* The CPU lane's seconds per item (the whole lane's time for one item)
 * before it has run one: core_s (the item model's, when > 0) over the
 * lane's workers; without it, the core-seconds the items done so far took
 * (their CUDA time times each codelet's CPU/GPU ratio, sp_hp_ratio(), plus
 * their CPU time) per item instead, an overestimate (the CPU lane's own
 * plan is faster on a core than the GPU lane's tasks, which the ratios
 * describe), NAN before any item has ended.  NAN without a CPU lane. */
double sp_runtime_cpu_lane_prior_s(double core_s);
/* The CPU workers' busy seconds so far, over every task of the session. */
double sp_runtime_cpu_busy_s(void);
/* "gpu", "main" (lane 0 of a CPU-only node), "cpu", or "node" without lanes. */
const char *sp_runtime_lane_name(int lane);
/* The GPU lane's workers (its CUDA workers and the CPU workers it kept)
 * join the CPU lane's context, so that they take the CPU lane's tasks once
 * the GPU lane has no GPU work left (the router's call, route.c); the workers
 * that joined (0: none, no CPU lane, joined already, or
 * STARPIPE_LANES_JOIN=0).  The CUDA workers then run CPU-plan tasks. */
int sp_runtime_lanes_join(void);
/* When the last join was made (seconds since the runtime started), NAN
 * if none; *nworkers its workers (the report's lanes). */
double sp_runtime_lanes_joined_s(unsigned *nworkers);
/* Undoes it at the batch's end, once every task has ended. */
void sp_runtime_lanes_unjoin(void);
/* The GPU lane's tasks that a GPU may run, submitted and not yet ended:
 * the task layer adds 1 at each submission and -1 at each end (task.c). */
void sp_runtime_gpu_lane_cuda_tasks(int delta);
long sp_runtime_gpu_lane_cuda_pending(void);
/* The -v line: each lane's workers and policy, or why lanes asked for were
 * not made; nothing when lanes are off. */
void sp_runtime_lanes_describe(FILE *f);

#endif /* SP_LANES_H */
