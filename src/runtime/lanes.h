/* Lanes: a GPU node split into a GPU lane and a CPU lane, each item run
 * whole in one of them, in that lane's plan (doc/scheduling.md, "Lanes"). */
#ifndef SP_LANES_H
#define SP_LANES_H

#include <stdio.h>

/* runtime: lanes: (and --lanes), the index of the word in "auto|off|on":
 * auto is one lane for now (doc/scheduling.md says when that changes), on
 * makes a CPU lane (on a CPU-only node too: two lanes of CPU workers, the
 * mechanism's test). */
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
/* The CPU lane's time for an item, before it has run one: the core-seconds
 * the items done so far took (their CUDA time times each codelet's CPU/GPU
 * ratio, sp_hp_ratio(), plus their CPU time) per item, over the CPU lane's
 * workers; NAN before any item has ended, or without a CPU lane.  An
 * overestimate: the CPU lane's own plan is faster on a core than the GPU
 * lane's tasks, which the ratios describe. */
double sp_runtime_cpu_lane_prior_s(void);
/* "gpu", "main" (lane 0 of a CPU-only node), "cpu", or "node" without lanes. */
const char *sp_runtime_lane_name(int lane);
/* The -v line: each lane's workers and policy, or why lanes asked for were
 * not made; nothing when lanes are off. */
void sp_runtime_lanes_describe(FILE *f);

#endif /* SP_LANES_H */
