/* J-sync StarPU glue: the values that flow between the jsync stages. */
#ifndef SP_JSYNC_GLUE_H
#define SP_JSYNC_GLUE_H

#include <starpu.h>

#include "../../src/item.h"
#include "jsync.h"

/* Port type "jsync.rijs": the relative rotations R[P][3][3]. */
typedef struct jsync_rijs {
	sp_value_t base;
	int64_t N, P;
	double *R; /* starpu_malloc'd, P*9 */
	starpu_data_handle_t h;
	struct jsync_read_arg *arg;
} jsync_rijs_t;

/* Task argument of one chunk of runs: pairs [p0, p1). */
typedef struct jsync_chunk_arg {
	sp_taskctx_t *ctx;
	int64_t N, p0, p1;
	int64_t ntriplets;
} jsync_chunk_arg_t;

/* Port type "jsync.triplets": per-chunk choices, or the rotations again when
 * the choices are recomputed at every product (memory mode "recompute"). */
typedef struct jsync_triplets {
	sp_value_t base;
	jsync_rijs_t *rijs; /* borrowed: the producer's value outlives ours */
	int64_t N;
	size_t nchunks;
	int64_t *bounds;           /* nchunks + 1 */
	jsync_chunk_arg_t *args;   /* nchunks */
	starpu_data_handle_t *h;   /* nchunks choice buffers; NULL when recomputing */
	int recompute;
} jsync_triplets_t;

/* Port type "jsync.signs": one sign per pair. */
typedef struct jsync_signs {
	sp_value_t base;
	int64_t N, P;
	double *s; /* starpu_malloc'd, P entries of +-1 */
	starpu_data_handle_t h;
} jsync_signs_t;

/* Footprint of a chunk task: its triplet count, bucketed to 1/16 of a
 * power of two, so near-equal chunks share one history entry. */
uint32_t jsync_chunk_footprint(struct starpu_task *task);
size_t jsync_chunk_size_base(struct starpu_task *task, unsigned nimpl);

#endif /* SP_JSYNC_GLUE_H */
