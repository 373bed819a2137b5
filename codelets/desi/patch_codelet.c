/* StarPU glue of desi.patch: the normal equations A'NA, A'Np, A'N1 of a chunk of patches per task. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "sizes.h"
#include "stage.h"
#include "desi_job.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

static void patch_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	int rc = desi_patch_batch_cpu(&a->ch->batch, CHUNK_INPUTS(buffers),
				      (double *)STARPU_VECTOR_GET_PTR(buffers[5]));
	if (rc == DESI_CANCELLED)
		desi__chunk_failed(a, SP_ECANCELED, "cancelled");
	else if (rc != 0)
		desi__chunk_failed(a, SP_ENOMEM, "out of memory");
}

#ifdef SP_HAVE_CUDA
static void patch_cuda(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	struct CUstream_st *stream = (struct CUstream_st *)starpu_cuda_get_local_stream();
	if (sp_status_failed(a->ctx->status))
		return;
	void *scratch = desi__task_scratch(a, desi_patch_cuda_scratch(&a->ch->batch), stream);
	if (scratch == NULL)
		return;
	if (desi_patch_batch_cuda(&a->ch->batch, CHUNK_INPUTS(buffers),
				  (double *)STARPU_VECTOR_GET_PTR(buffers[5]), scratch, stream) != 0)
		desi__chunk_failed(a, SP_ECUDA, sp_cuda_last_error());
	sp_cuda_free_async(scratch, stream);
}
#endif

/* The size column of their models: the bytes the kernels move (extract.h),
 * not the whole image they window into. */
static size_t patch_size(struct starpu_task *task, unsigned nimpl)
{
	const struct desi_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)desi_patch_bytes(&a->ch->batch);
}

SP_CODELET(patch_cl, "desi_patch", patch_cpu, SP_CUDA(patch_cuda), desi__chunk_footprint, patch_size, 6,
	   STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_W);

/* ---- desi.patch ---- */

/* Normal-equation buffers in the pool: two per worker, at least 4.  The
 * pool may be smaller than a subbundle's chunks: patch_tile() submits a
 * chunk's decorrelation itself when the chunk's buffer is wanted again
 * before decorrelate_tile() came to it. */
static int normals_pool(const sp_item_t *item)
{
	int k = 2 * (int)sp_item_nworkers(item);
	return k < 4 ? 4 : k;
}

static int patch_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	struct desi_job *j = desi__job(in[0]);
	const desi_plan_t *pl = &j->plan;

	if (sp_job_val(&j->base, "desi.normal", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(sp_item_status(item)) || desi__same_inputs(j, item, st, in, -1, 1) != 0)
		return 0;
	j->regularize = ((const struct patch_params *)st->typed)->regularize;
	/* patches per task: a tile of the subbundle's, the whole subbundle
	 * when the item's lane has GPUs (their batched solvers want many) */
	int per = st->tile > 0 ? st->tile : sp_item_ncuda_workers(item) > 0 ? pl->npatch_wave : 4;
	j->chunk = per < pl->npatch_wave ? per : pl->npatch_wave;
	/* a chunk's normal equations are one StarPU vector: at most
	 * SP_VECTOR_MAX_NX doubles (a default chunk is cut to fit) */
	const size_t n = (size_t)desi__nf_max(pl) * (size_t)(pl->nwavestep + 2 * pl->wavepad);
	const size_t per_patch = n * n + 2 * n + 1, fit = SP_VECTOR_MAX_NX / per_patch;
	if ((size_t)j->chunk > fit) {
		if (st->tile > 0)
			return sp_status_set(sp_item_status(item), SP_EINVAL,
					     "%s: stage '%s': tile %d makes tasks of %d patches x %zu "
					     "doubles of normal equations, more than the %zu a StarPU "
					     "vector holds; lower tile (at most %zu)",
					     j->iv->path, st->name, st->tile, j->chunk, per_patch,
					     SP_VECTOR_MAX_NX, fit);
		j->chunk = fit > 0 ? (int)fit : 1;
	}
	int per_sub = (pl->npatch_wave + j->chunk - 1) / j->chunk;
	j->maxchunks = j->nsubs * per_sub;
	j->chunks = calloc((size_t)j->maxchunks, sizeof *j->chunks);
	j->chunk0 = calloc((size_t)j->nsubs + 1, sizeof *j->chunk0);
	j->nnormals = normals_pool(item) < j->maxchunks ? normals_pool(item) : j->maxchunks;
	j->normals = calloc((size_t)j->nnormals, sizeof *j->normals);
	j->normal_last = malloc(sizeof *j->normal_last * (size_t)j->nnormals);
	for (int k = 0; j->normal_last != NULL && k < j->nnormals; k++)
		j->normal_last[k] = -1;
	j->ctx_patch = sp_item_taskctx(item, st, "desi_patch");
	if (!j->chunks || !j->chunk0 || !j->normals || !j->normal_last || !j->ctx_patch)
		return SP_ENOMEM;
	for (int k = 0; k < j->nnormals; k++)
		if (sp_item_vector_register(item, &j->normals[k], (size_t)j->chunk * per_patch,
					    sizeof(double)) != 0)
			return SP_ENOMEM;
	sp_item_report_num(item, "patches", (double)j->nsubs * pl->npatch_wave);
	return 0;
}

/* The chunks of subbundle t, and their patch tasks. */
static int patch_tile(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		      sp_value_t *out, int t)
{
	struct desi_job *j = desi__job(out);
	struct desi_slot *sl = &j->slots[j->subs[t].bundle % j->nslots];
	int ret = 0;
	(void)item;
	(void)st;
	(void)in;
	j->chunk0[t] = j->nchunks;
	for (int s = t; s == t && ret == 0; s++) {
		struct desi_sub *su = &j->subs[s];
		for (int i0 = 0; i0 < su->batch.np && ret == 0; i0 += j->chunk) {
			struct desi_chunk *ch = &j->chunks[j->nchunks++];
			desi_batch_t *b = &ch->batch;
			*b = su->batch;
			b->np = su->batch.np - i0 < j->chunk ? su->batch.np - i0 : j->chunk;
			b->ymin += i0;
			b->ny += i0;
			b->xmin += i0;
			b->nx += i0;
			b->w0 += i0;
			b->core_nw += i0;
			b->col0 = b->w0[0];
			b->nwave_grid = b->w0[b->np - 1] + b->core_nw[b->np - 1] - b->col0;
			ch->sub = su;
			ch->isub = s;
			ch->slot = su->bundle % j->nslots;
			ch->normal = j->next_normal++ % j->nnormals;
			/* the buffer's previous chunk must have its reader first */
			int prev = j->normal_last[ch->normal];
			if (prev >= 0 && !j->chunks[prev].decor_done && j->ctx_decor != NULL &&
			    (ret = desi__decor_submit(j, &j->chunks[prev])) != 0)
				break;
			j->normal_last[ch->normal] = j->nchunks - 1;
			ch->nrows = (size_t)b->p.core_nf * b->nfield * b->nwave_grid;
			ch->a_patch = (struct desi_task_arg){ j->ctx_patch, ch };
			ret = sp_task_insert(j->ctx_patch, &patch_cl, STARPU_R, sl->hspots, STARPU_R,
					     sl->hxc, STARPU_R, sl->hyc, STARPU_R, j->iv->pix, STARPU_R,
					     j->iv->ivar, STARPU_W, j->normals[ch->normal],
					     STARPU_FLOPS, b->np * desi_patch_flops(&b->p),
					     STARPU_CL_ARGS_NFREE, &ch->a_patch, sizeof ch->a_patch);
		}
	}
	j->chunk0[t + 1] = j->nchunks;
	return ret;
}


static const sp_param_spec_t patch_params[] = {
	{ "regularize", SP_PT_FLOAT, "0", 0, 1e10, NULL, "Tikhonov regularisation added to every bin",
	  SP_AT(struct patch_params, regularize) },
};

static const sp_port_spec_t patch_outputs[] = {
	{ "normal", "desi.normal", "A'NA, A'Np and A'N1 of every patch" },
};

static const sp_port_spec_t patch_inputs[] = {
	{ "spots", "desi.spots", "the spots" },
	{ "image", "desi.image", "the image the spots were planned on" },
};

/* The normal equations in flight and the decorrelation's work buffers, from
 * the spots stage's decomposition (its producer): a pool of
 * normals_pool() buffers of `tile` patches (4 by default, a subbundle's
 * with GPUs) of n^2 + 2 n + 1 doubles, n = fibres x (nwavestep + 2
 * wavepad); and each worker's buffers, ~3 n^2 doubles and the chunk's
 * core blocks (extract_batch.c's, kept by the worker's thread). */
static int patch_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e, sp_err_t *err)
{
	const sp_gstage_t *pst = sp_item_producer(item, st, 0);
	(void)err;
	if (pst == NULL || strcmp(pst->kind->name, "desi.spots") != 0 || pst->typed == NULL)
		return 0;
	const struct spots_params *sp = pst->typed;
	char msg[320];
	int nmax = 0;
	if (desi_plan_check_patch((int)sp->nspec, (int)sp->bundlesize, (int)sp->nsubbundles,
				  (int)sp->nwavestep, (int)sp->wavepad, sp->wavepad_frac, &nmax, msg,
				  sizeof msg) != 0)
		return 0; /* desi.spots refuses it */
	const double m = (double)sp->nwavestep +
			 2.0 * (double)desi_plan_wavepad((int)sp->wavepad, sp->wavepad_frac);
	const double n = nmax, ns = (double)(sp->bundlesize < sp->nspec ? sp->bundlesize : sp->nspec);
	const double nsub = (double)(sp->nsubbundles < ns ? sp->nsubbundles : ns);
	const double cnf = ceil(ns / nsub);
	const double npw = ceil(desi__est_nwave(sp, e) / (double)sp->nwavestep);
	double chunk = st->tile > 0 ? st->tile : sp_item_ncuda_workers(item) > 0 ? npw : 4;
	chunk = chunk < npw ? chunk : npw;
	const double nchunks = ceil((double)sp->nspec / (double)sp->bundlesize) * nsub * ceil(npw / chunk);
	const double pool = normals_pool(item) < nchunks ? normals_pool(item) : nchunks;
	const double nworkers = sp_item_nworkers(item) > 0 ? sp_item_nworkers(item) : 1;
	e->bytes += (unsigned long long)(8.0 * (pool * chunk * (n * n + 2 * n + 1) +
						nworkers * (3 * n * n + chunk * (n + cnf * (m * m + m)))));
	return 0;
}


const sp_stage_kind_t sp_desi_patch_kind = {
	.name = "desi.patch",
	.help = "DESI: normal equations A'NA, A'Np of every patch",
	SP_KIND_PARAMS(patch_params, struct patch_params),
	SP_KIND_INPUTS(patch_inputs),
	SP_KIND_OUTPUTS(patch_outputs),
	.impl = SP_IMPL_CPU_CUDA,
	.codelets = "desi_patch",
	.tile = "patches per task; default 4, a whole subbundle when the run has GPUs",
	.estimate = patch_estimate,
	.run = patch_run,
	.run_tile = patch_tile,
};
