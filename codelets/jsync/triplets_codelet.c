/* StarPU glue of jsync.triplets: each triplet's best J-configuration, in chunk tasks. */
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "sizes.h"
#include "stage.h"
#include "jsync_glue.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

uint32_t jsync_chunk_footprint(struct starpu_task *task)
{
	const jsync_chunk_arg_t *a = task->cl_arg;
	uint64_t n = (uint64_t)a->ntriplets;
	int lg = 63 - __builtin_clzll(n | 1);
	uint32_t mant = lg >= 4 ? (uint32_t)(n >> (lg - 4)) : (uint32_t)n;
	return ((uint32_t)lg << 8) ^ mant;
}

double jsync_chunk_model_triplets(int64_t ntriplets)
{
	uint64_t n = (uint64_t)ntriplets;
	int lg = 63 - __builtin_clzll(n | 1);
	if (lg < 5)
		return (double)n; /* buckets of one count */
	/* jsync_chunk_footprint()'s bucket: the counts sharing the top 5 bits */
	uint64_t w = (uint64_t)1 << (lg - 4), lo = n & ~(w - 1);
	return (double)lo + (double)(w - 1) / 2;
}

/* The size column of jsync_best's model: the bytes its kernel moves for
 * the footprint's triplet count (jsync_glue.h). */
static size_t best_size_base(struct starpu_task *task, unsigned nimpl)
{
	(void)nimpl;
	const jsync_chunk_arg_t *a = task->cl_arg;
	return (size_t)jsync_best_bytes(jsync_chunk_model_triplets(a->ntriplets));
}

static void best_cpu(void *buffers[], void *cl_arg)
{
	const jsync_chunk_arg_t *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	jsync_best_cpu((const double *)STARPU_VECTOR_GET_PTR(buffers[0]), a->N, a->p0, a->p1,
		       (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[1]));
	if (sp_cancel_requested()) /* it may have stopped early: the choices are partial */
		sp_status_set(a->ctx->status, SP_ECANCELED, "%s: cancelled", a->ctx->kernel);
}

#ifdef SP_HAVE_CUDA
static void best_cuda(void *buffers[], void *cl_arg)
{
	const jsync_chunk_arg_t *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	if (jsync_best_cuda((const double *)STARPU_VECTOR_GET_PTR(buffers[0]), a->N, a->p0, a->p1,
			    (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
			    (struct CUstream_st *)starpu_cuda_get_local_stream()) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: %s", __func__, sp_cuda_last_error());
}
#endif

SP_CODELET(best_cl, "jsync_best", best_cpu, SP_CUDA(best_cuda), jsync_chunk_footprint,
	   best_size_base, 2, STARPU_R, STARPU_W);

static void triplets_free(sp_value_t *v)
{
	jsync_triplets_t *t = (jsync_triplets_t *)v;
	if (t->h != NULL) {
		for (size_t c = 0; c < t->nchunks; c++)
			if (t->h[c] != NULL)
				starpu_data_unregister_no_coherency(t->h[c]);
		free(t->h);
	}
	free(t->bounds);
	free(t->args);
	free(t);
}

/* Chunks: on CPU workers 8 per worker, enough for the schedulers to
 * balance, few enough that each task lasts milliseconds.  Where the stage
 * may use CUDA workers and the runtime has some, 4 per CUDA worker
 * instead: a GPU does a chunk orders of magnitude faster than a core, so with 8 per
 * worker its tasks last microseconds, the runtime's cost per task
 * dominates the item, and the CPU workers take none (doc/jsync.md). */
#define JSYNC_CHUNKS_PER_WORKER 8
#define JSYNC_CHUNKS_PER_CUDA_WORKER 4
#define JSYNC_MIN_CHUNK_TRIPLETS (1 << 16)
/* A chunk's stored choices are one StarPU vector of bytes (at most
 * SP_VECTOR_MAX_NX): the default split makes chunks of at most 1 GiB of
 * choices (N = 12,000 stored: 72 GB in 67 chunks or more). */
#define JSYNC_MAX_CHUNK_CHOICE_BYTES ((size_t)1 << 30)

static size_t auto_chunks(const sp_item_t *item, int64_t N, unsigned where)
{
	int64_t T = jsync_ntriplets(N);
	const size_t bytes = jsync_choice_bytes(N, 0, jsync_npairs(N));
	const size_t least = (bytes + JSYNC_MAX_CHUNK_CHOICE_BYTES - 1) / JSYNC_MAX_CHUNK_CHOICE_BYTES;
	unsigned ncuda = where == 0 || (where & SP_IMPL_CUDA) ? sp_item_ncuda_workers(item) : 0;
	size_t n = ncuda > 0 ? (size_t)ncuda * JSYNC_CHUNKS_PER_CUDA_WORKER
			     : (size_t)sp_item_nworkers(item) * JSYNC_CHUNKS_PER_WORKER;
	if (n < 1)
		n = 1;
	if ((int64_t)n > T / JSYNC_MIN_CHUNK_TRIPLETS)
		n = (size_t)(T / JSYNC_MIN_CHUNK_TRIPLETS);
	if (n < least)
		n = least;
	return n < 1 ? 1 : n;
}

/* jsync.triplets' parameters, parsed once when the graph is loaded. */
enum { STORE_AUTO, STORE_STORE, STORE_RECOMPUTE }; /* the order of `store`'s choices */
struct triplets_params {
	int store;
	unsigned long long memory_budget;
};

/* The 2-bit triplet choices, when they are stored, and per chunk its bounds,
 * argument and handle (a tile: of up to P chunks; the power stage copies
 * the arguments). */
static int triplets_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e,
			     sp_err_t *err)
{
	(void)item;
	(void)err;
	const struct triplets_params *tp = st->typed;
	int64_t N = (int64_t)e->size;
	size_t bytes = jsync_choice_bytes(N, 0, jsync_npairs(N));
	if (tp->store == STORE_STORE || (tp->store == STORE_AUTO && bytes <= tp->memory_budget))
		e->bytes += bytes;
	double chunks = st->tile > 0 ? (double)st->tile : (double)auto_chunks(item, N, st->where);
	if (chunks > (double)jsync_npairs(N))
		chunks = (double)jsync_npairs(N);
	e->bytes += (unsigned long long)(chunks * (sizeof(int64_t) + 2 * sizeof(jsync_chunk_arg_t) +
						   sizeof(starpu_data_handle_t)));
	return 0;
}

static int triplets_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
			sp_value_t **out)
{
	jsync_rijs_t *r = (jsync_rijs_t *)in[0];
	jsync_triplets_t *t = calloc(1, sizeof *t);
	const struct triplets_params *tp = st->typed;

	if (t == NULL)
		return SP_ENOMEM;
	t->base.type = "jsync.triplets";
	t->base.free_cb = triplets_free;
	*out = &t->base;
	t->rijs = r;
	t->N = r->N;

	size_t want = st->tile > 0 ? (size_t)st->tile : auto_chunks(item, r->N, st->where);
	if (want > (size_t)jsync_npairs(r->N)) /* a chunk holds whole runs: at most P */
		want = (size_t)jsync_npairs(r->N);
	t->bounds = malloc((want + 1) * sizeof *t->bounds);
	if (t->bounds == NULL)
		return SP_ENOMEM;
	t->nchunks = jsync_split(r->N, want, t->bounds);
	t->args = calloc(t->nchunks, sizeof *t->args);
	if (t->args == NULL)
		return SP_ENOMEM;

	size_t bytes = jsync_choice_bytes(r->N, 0, jsync_npairs(r->N));
	if (tp->store == STORE_RECOMPUTE)
		t->recompute = 1;
	else if (tp->store == STORE_AUTO)
		t->recompute = bytes > tp->memory_budget;
	sp_item_report_num(item, "triplet_choice_bytes", t->recompute ? 0.0 : (double)bytes);

	sp_taskctx_t *ctx = sp_item_taskctx(item, st, t->recompute ? "jsync_matvec_fused" : "jsync_best");
	if (ctx == NULL)
		return SP_ENOMEM;
	for (size_t c = 0; c < t->nchunks; c++) {
		t->args[c] = (jsync_chunk_arg_t){ ctx, r->N, t->bounds[c], t->bounds[c + 1],
						  jsync_chunk_triplets(r->N, t->bounds[c],
								       t->bounds[c + 1]) };
	}
	if (t->recompute)
		return 0; /* the power stage's products recompute the choices */

	size_t most = 0; /* the largest chunk's choices: one StarPU vector */
	for (size_t c = 0; c < t->nchunks; c++) {
		size_t nb = jsync_choice_bytes(r->N, t->bounds[c], t->bounds[c + 1]);
		most = nb > most ? nb : most;
	}
	if (!sp_vector_nx_ok(most))
		return sp_status_set(sp_item_status(item), SP_EINVAL,
				     "%s: stage '%s': tile %d makes chunks of up to %zu bytes of triplet "
				     "choices, more than the %zu a StarPU vector holds; raise tile "
				     "(at least %zu) or set store=recompute",
				     sp_item_path(item), st->name, st->tile, most, SP_VECTOR_MAX_NX,
				     (bytes + JSYNC_MAX_CHUNK_CHOICE_BYTES - 1) /
					     JSYNC_MAX_CHUNK_CHOICE_BYTES);
	t->h = calloc(t->nchunks, sizeof *t->h);
	if (t->h == NULL)
		return SP_ENOMEM;
	for (size_t c = 0; c < t->nchunks; c++) {
		size_t nb = jsync_choice_bytes(r->N, t->bounds[c], t->bounds[c + 1]);
		/* No home buffer: StarPU allocates the choices where the tasks run. */
		starpu_vector_data_register(&t->h[c], -1, 0, (uint32_t)nb, 1);
		double flops = jsync_best_flops(jsync_chunk_model_triplets(t->args[c].ntriplets));
		int ret = sp_task_insert(ctx, &best_cl, STARPU_R, r->h, STARPU_W, t->h[c],
					 STARPU_FLOPS, flops, STARPU_CL_ARGS_NFREE, &t->args[c],
					 sizeof t->args[c]);
		if (ret != 0)
			return ret;
	}
	return 0;
}

static const sp_param_spec_t triplets_params[] = {
	{ "store", SP_PT_ENUM, "auto", 0, -1, "auto|store|recompute",
	  "keep the 2-bit choices (store), recompute them in every product, or store when they fit memory_budget",
	  SP_AT(struct triplets_params, store) },
	{ "memory_budget", SP_PT_SIZE, "2G", 0, 1e18, NULL,
	  "largest choice array kept in memory (about N^3/24 bytes) in auto mode",
	  SP_AT(struct triplets_params, memory_budget) },
};
static const sp_port_spec_t triplets_inputs[] = {
	{ "rijs", "jsync.rijs", "relative rotations" },
};
static const sp_port_spec_t triplets_outputs[] = {
	{ "triplets", "jsync.triplets", "per-triplet best configuration (2 bits each)" },
};

const sp_stage_kind_t sp_jsync_triplets_kind = {
	.name = "jsync.triplets",
	.help = "Best J-configuration of every triplet",
	SP_KIND_PARAMS(triplets_params, struct triplets_params),
	.tile = "chunk tasks over ranges of pairs; default 8 per worker, 4 per CUDA worker where there "
		"are some (and chunks of at most 1 GiB of stored choices)",
	SP_KIND_INPUTS(triplets_inputs),
	SP_KIND_OUTPUTS(triplets_outputs),
	.impl = SP_IMPL_CPU_CUDA,
	.codelets = "jsync_best",
	.run = triplets_run,
	.estimate = triplets_estimate,
};
