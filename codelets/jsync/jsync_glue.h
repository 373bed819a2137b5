/* J-sync StarPU glue: the values that flow between the jsync stages. */
#ifndef SP_JSYNC_GLUE_H
#define SP_JSYNC_GLUE_H

#include <starpu.h>

#include "item.h"
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

/*
 * Nominal costs of the tasks, for StarPU's performance models
 * (STARPU_FLOPS, and the size column through size_base) and the GPU times
 * tools/sim-node estimates from them.  A model entry keeps one flop count
 * per footprint (StarPU makes it NaN when two tasks of the footprint
 * declare different counts), and near-equal chunks share a footprint: so
 * a chunk task declares the costs of its footprint's triplet count,
 * jsync_chunk_model_triplets(), which is within 1/32 of its own.  flops:
 * add, multiply, comparison 1 each; the products' 64-bit integer terms
 * count as their floating-point equivalents.  bytes: what the CUDA
 * kernel's loads and stores move per triplet (L2 may serve part: a run's
 * R_ik and R_jk are read again by neighbouring runs).
 */

/* The triplet count a footprint stands for: the mean of the counts of its
 * bucket (the count itself below 32). */
double jsync_chunk_model_triplets(int64_t ntriplets);

/* jsync_best: per triplet and entry (a, c) of R_ij R_jk, x (2 mul, 1 add),
 * y (1 mul), s, d, e0 (3) and the 4 costs += r^2 (8), 9 entries; the 17
 * dp/dm/sp residuals the costs use; 3 comparisons: 155 per triplet. */
static inline double jsync_best_flops(double ntriplets)
{
	return 155 * ntriplets;
}

/* R_jk and R_ik read (2 x 9 doubles), 2 bits of choice written. */
static inline double jsync_best_bytes(double ntriplets)
{
	return 144.25 * ntriplets;
}

/* jsync_matvec: the 6 signed terms +-v a triplet adds into w (its 6
 * nonzeros of S): a sign and an add each, 12 per triplet. */
static inline double jsync_matvec_flops(double ntriplets)
{
	return 12 * ntriplets;
}

/* choice read (2 bits), vq[jk], vq[ik] read, wq[jk], wq[ik] read and
 * written (atomic adds): 48.25 per triplet. */
static inline double jsync_matvec_bytes(double ntriplets)
{
	return 48.25 * ntriplets;
}

/* jsync_matvec_fused: the choice, then the product: 155 + 12. */
static inline double jsync_fused_flops(double ntriplets)
{
	return jsync_best_flops(ntriplets) + jsync_matvec_flops(ntriplets);
}

/* R_jk and R_ik read, the product's vq and wq: 144 + 48 per triplet. */
static inline double jsync_fused_bytes(double ntriplets)
{
	return 192 * ntriplets;
}

/* jsync_add (the reduction's merge of n entries): n integer adds; dst read
 * and written, src read: 24 n bytes.  jsync_zero: no arithmetic, 8 n bytes
 * written. */
static inline double jsync_add_flops(double n)
{
	return n;
}

static inline double jsync_add_bytes(double n)
{
	return 24 * n;
}

static inline double jsync_zero_bytes(double n)
{
	return 8 * n;
}

#endif /* SP_JSYNC_GLUE_H */
