/* StarPU glue of desi.stitch: a chunk's rows copied into the frame per task. */
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

/* Copies the chunk's rows into its columns of the subbundle's frame rows
 * (the frame's DESI_NFIELD fields: not the deconvolved flux). */
static void stitch_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	desi_stitch_cpu(&a->ch->batch, DESI_NFIELD, (size_t)a->ch->sub->batch.nwave_grid,
			(const float *)STARPU_VECTOR_GET_PTR(buffers[0]),
			(float *)STARPU_VECTOR_GET_PTR(buffers[1]));
}

#ifdef SP_HAVE_CUDA
/* The same on the GPU where decorrelate left the rows: they need not cross
 * the bus; the frame's part does once, when the writer gathers it. */
static void stitch_cuda(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	if (desi_stitch_cuda(&a->ch->batch, DESI_NFIELD, (size_t)a->ch->sub->batch.nwave_grid,
			     (const float *)STARPU_VECTOR_GET_PTR(buffers[0]),
			     (float *)STARPU_VECTOR_GET_PTR(buffers[1]),
			     (struct CUstream_st *)starpu_cuda_get_local_stream()) != 0)
		desi__chunk_failed(a, SP_ECUDA, sp_cuda_last_error());
}
#endif

/* Chunks of one subbundle write disjoint columns of its rows: any order. */
SP_CODELET(stitch_cl, "desi_stitch", stitch_cpu, SP_CUDA(stitch_cuda), NULL, NULL, 2, STARPU_R,
	   STARPU_RW | STARPU_COMMUTE);

/* ---- desi.stitch ---- */

static void frame_free(sp_value_t *v)
{
	desi_frame_val_t *fr = (desi_frame_val_t *)v;
	desi__job_unref(fr->job);
	free(fr);
}

static int stitch_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		      sp_value_t **out)
{
	struct desi_job *j = desi__job(in[0]);
	desi_frame_val_t *fr = calloc(1, sizeof *fr);

	if (fr == NULL)
		return SP_ENOMEM;
	fr->base.type = "desi.frame";
	fr->base.free_cb = frame_free;
	fr->job = j;
	sp_job_ref(&j->base);
	*out = &fr->base;
	fr->plan = j->plan;
	fr->buf = j->buf;
	fr->wave = j->wave;
	fr->h = j->hframe;
	fr->psf_path = j->psf_path;
	fr->image_path = j->iv->path;
	fr->fibermap_path = j->iv->fibermap;
	fr->heliocor = j->heliocor;
	fr->ntiles = j->nsubs;
	j->rows_readers++;
	j->ctx_stitch = sp_item_taskctx(item, st, "desi_stitch");
	return j->ctx_stitch == NULL ? SP_ENOMEM : 0;
}


/* Subbundle t's chunks into the frame; after the last one, the frame is
 * gathered from its partition for the writer (asynchronously). */
static int stitch_tile(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		       sp_value_t *out, int t)
{
	struct desi_job *j = ((desi_frame_val_t *)out)->job;
	int ret = 0;
	(void)item;
	(void)st;
	(void)in;
	for (int c = j->chunk0[t]; c < j->chunk0[t + 1] && ret == 0; c++) {
		struct desi_chunk *ch = &j->chunks[c];
		ch->a_stitch = (struct desi_task_arg){ j->ctx_stitch, ch };
		ret = sp_task_insert(j->ctx_stitch, &stitch_cl, STARPU_R, ch->hrows,
				     STARPU_RW | STARPU_COMMUTE, j->parts[ch->isub],
				     STARPU_CL_ARGS_NFREE, &ch->a_stitch, sizeof ch->a_stitch);
		if (ret == 0)
			desi__rows_release(ch);
	}
	if (ret == 0 && t == j->nsubs - 1) {
		starpu_data_unpartition_submit(j->hframe, (unsigned)j->nsubs, j->parts,
					       STARPU_MAIN_RAM);
		j->partitioned = 0;
	}
	return ret;
}


static const sp_port_spec_t stitch_outputs[] = {
	{ "frame", "desi.frame", "extracted spectra, resolution, chi2pix, stitched" },
};

static const sp_port_spec_t stitch_inputs[] = {
	{ "rows", "desi.rows", "the patches' rows" },
};

const sp_stage_kind_t sp_desi_stitch_kind = {
	.name = "desi.stitch",
	.help = "DESI: the patches' rows into the frame (a strided copy, CPU or CUDA)",
	SP_KIND_INPUTS(stitch_inputs),
	SP_KIND_OUTPUTS(stitch_outputs),
	.impl = SP_IMPL_CPU_CUDA,
	.codelets = "desi_stitch",
	.run = stitch_run,
	.run_tile = stitch_tile,
};
