/* starpipe's heteroprio: buckets and their CPU slow factors from the models. */
#ifndef SP_SCHED_HP_H
#define SP_SCHED_HP_H

/*
 * DESIGN: on a node with GPUs, StarPU's heteroprio policy (Agullo et al.)
 * keeps one queue ("bucket") per kind of task; each worker type visits the
 * buckets in its own order, and a slow worker type takes a task from a
 * bucket only while that bucket holds at least `slow factor` tasks per
 * worker of the fast type.  starpipe makes one bucket per codelet (and per
 * stage `where:` restriction), and derives everything from the performance
 * models, so that no graph file or flag is needed:
 *
 * - the slow factor of a codelet with both implementations is its CPU/GPU
 *   time ratio (the models' means over the footprints measured on both),
 *   times a margin (default 2: a CPU under load runs slower than its model;
 *   doc/scheduling.md): a CPU takes such a task only when the GPUs have
 *   enough of them queued to finish after it anyway, which is what dmda
 *   gets wrong when the CPU models are optimistic; without models on both
 *   (a node type not calibrated yet) the ratio is SP_HP_RATIO_UNKNOWN, the
 *   smallest calibrated on a real GPU node (doc/scheduling.md);
 * - CPUs visit the CPU-only buckets first, in stage order (reads early,
 *   then stitching and writes: they free items' memory), then the shared
 *   buckets by increasing ratio (what they do least badly);
 * - GPUs visit the shared buckets by the graph's `priority:` (higher first),
 *   then from the last stage back (finish the items that are furthest along:
 *   their writes overlap the next items' work);
 * - within a bucket tasks are served first in, first out, so items finish
 *   in order and the batch's I/O overlaps its computation.
 *
 * A task's priority is its bucket under heteroprio (sp_hp_bucket()).
 * Bucket 0 takes tasks StarPU itself submits with priority 0 (a reduction's
 * init and reduce tasks: codelets with both implementations).
 */

#include <stdint.h>
#include <stdio.h>

#include <starpu.h>

#include "graph.h"

/* Records a codelet (SP_CODELET does it at program start), so that its
 * implementations are known by its model's symbol. */
void sp__codelet_register(struct starpu_codelet *cl);

/* Plans the buckets for every registered codelet, and the graph's stage
 * restrictions, from the models of STARPU_PERF_MODEL_DIR and
 * STARPU_HOSTNAME (call after they are set, before starpu_init).  margin
 * <= 0: the default (2, or STARPIPE_HP_MARGIN). */
void sp_hp_plan(const sp_graph_t *g, double margin);

/* The starpu_conf.sched_policy_init callback of heteroprio. */
void sp_hp_init_cb(unsigned sched_ctx_id);

/* The bucket of a task of `kernel` with StarPU worker mask `where` (-1:
 * the codelet's own). */
int sp_hp_bucket(const char *kernel, int32_t where);

/* A codelet's CPU/GPU time ratio: its bucket's, else its history model's,
 * else the ratio assumed without models (the smallest measured on a GPU
 * node). */
double sp_hp_ratio(const char *kernel);

/* Prints the graph's buckets (symbol, archs, CPU/GPU ratio, slow factor):
 * starpipe run -v on a GPU node. */
void sp_hp_describe(FILE *f);

#endif
