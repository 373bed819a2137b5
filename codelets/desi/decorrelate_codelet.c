/* StarPU glue of desi.decorrelate: solve and decorrelate a chunk of patches per task. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "runtime.h"
#include "sizes.h"
#include "stage.h"
#include "desi_job.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

static void decorrelate_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	int bad = desi_decorrelate_batch_cpu(&a->ch->batch, CHUNK_INPUTS(buffers),
					     (const double *)STARPU_VECTOR_GET_PTR(buffers[5]),
					     (float *)STARPU_VECTOR_GET_PTR(buffers[6]));
	if (bad == DESI_CANCELLED)
		desi__chunk_failed(a, SP_ECANCELED, "cancelled");
	else if (bad < 0)
		desi__chunk_failed(a, SP_ENOMEM, "out of memory");
	else if (bad > 0)
		sp_status_set(a->ctx->status, SP_EINVAL,
			      "bundle %d subbundle %d, wavelengths from grid bin %d: the patch's normal "
			      "matrix is not positive definite",
			      a->ch->sub->bundle, a->ch->sub->k, a->ch->batch.w0[bad - 1]);
}

#ifdef SP_HAVE_CUDA
static void decorrelate_cuda(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	struct CUstream_st *stream = (struct CUstream_st *)starpu_cuda_get_local_stream();
	void *blas, *solver;
	if (sp_status_failed(a->ctx->status))
		return;
	sp_cuda_handles(&blas, &solver);
	void *scratch = desi__task_scratch(a, desi_decorrelate_cuda_scratch(&a->ch->batch), stream);
	if (scratch == NULL)
		return;
	if (desi_decorrelate_batch_cuda(&a->ch->batch, CHUNK_INPUTS(buffers),
					(double *)STARPU_VECTOR_GET_PTR(buffers[5]),
					(float *)STARPU_VECTOR_GET_PTR(buffers[6]), scratch, blas,
					solver, stream) != 0)
		desi__chunk_failed(a, SP_ECUDA, sp_cuda_last_error());
	sp_cuda_free_async(scratch, stream);
}
#endif


static size_t decorrelate_size(struct starpu_task *task, unsigned nimpl)
{
	const struct desi_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)desi_decorrelate_bytes(&a->ch->batch, a->ch->nrows);
}

/* RW normal: the CUDA twin factors the matrices in place. */
SP_CODELET(decor_cl, "desi_decorrelate", decorrelate_cpu, SP_CUDA(decorrelate_cuda),
	   desi__chunk_footprint, decorrelate_size, 7, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_RW,
	   STARPU_W);

/* The decorrelation task of chunk ch (desi.decorrelate's; patch_tile()
 * submits it early when ch's normal-equations buffer is wanted again). */
int desi__decor_submit(struct desi_job *j, struct desi_chunk *ch)
{
	struct desi_slot *sl = &j->slots[ch->slot];

	/* the rows are allocated where the task runs, freed after the stitch */
	ch->readers = j->rows_readers;
	ch->decor_done = 1;
	starpu_vector_data_register(&ch->hrows, -1, 0, (uint32_t)ch->nrows, sizeof(float));
	ch->a_decor = (struct desi_task_arg){ j->ctx_decor, ch };
	return sp_task_insert(j->ctx_decor, &decor_cl, STARPU_R, sl->hspots, STARPU_R, sl->hxc,
			      STARPU_R, sl->hyc, STARPU_R, j->iv->pix, STARPU_R, j->iv->ivar,
			      STARPU_RW, j->normals[ch->normal], STARPU_W, ch->hrows, STARPU_FLOPS,
			      ch->batch.np * desi_decorrelate_flops(&ch->batch.p),
			      STARPU_CL_ARGS_NFREE, &ch->a_decor, sizeof ch->a_decor);
}

/* ---- desi.decorrelate ---- */

static int decorrelate_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
			   sp_value_t **out)
{
	struct desi_job *j = desi__job(in[0]);

	if (sp_job_val(&j->base, "desi.rows", out) != 0)
		return SP_ENOMEM;
	if (desi__same_inputs(j, item, st, in, 1, 2) != 0)
		return 0;
	j->psferr = ((const struct decorrelate_params *)st->typed)->psferr;
	if (j->psferr <= 0)
		j->psferr = j->psf->psferr;
	j->ctx_decor = sp_item_taskctx(item, st, "desi_decorrelate");
	return j->ctx_decor == NULL ? SP_ENOMEM : 0;
}

static int decorrelate_tile(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
			    sp_value_t *out, int t)
{
	struct desi_job *j = desi__job(out);
	int ret = 0;
	(void)item;
	(void)st;
	(void)in;
	for (int c = j->chunk0[t]; c < j->chunk0[t + 1] && ret == 0; c++)
		if (!j->chunks[c].decor_done)
			ret = desi__decor_submit(j, &j->chunks[c]);
	return ret;
}


static const sp_param_spec_t decorrelate_params[] = {
	{ "psferr", SP_PT_FLOAT, "0", 0, 1, NULL, "PSF model error for chi2pix; 0: the PSF's PSFERR (0.01)",
	  SP_AT(struct decorrelate_params, psferr) },
};

static const sp_port_spec_t decorrelate_outputs[] = {
	{ "rows", "desi.rows", "flux, ivar, resolution, chi2pix of every patch's core" },
};

static const sp_port_spec_t decorrelate_inputs[] = {
	{ "normal", "desi.normal", "the normal equations" },
	{ "spots", "desi.spots", "the spots (for the model of chi2pix)" },
	{ "image", "desi.image", "the image (for chi2pix)" },
};

const sp_stage_kind_t sp_desi_decorrelate_kind = {
	.name = "desi.decorrelate",
	.help = "DESI: solve, resolution matrix, ivar, Rdiags, chi2pix (the patch stage's tasks)",
	SP_KIND_PARAMS(decorrelate_params, struct decorrelate_params),
	SP_KIND_INPUTS(decorrelate_inputs),
	SP_KIND_OUTPUTS(decorrelate_outputs),
	.impl = SP_IMPL_CPU_CUDA,
	.codelets = "desi_decorrelate",
	.run = decorrelate_run,
	.run_tile = decorrelate_tile,
};
