/* StarPU glue of desi.model: the 2-D model image, spots times deconvolved flux, with model=true. */
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

/* Adds the chunk's part of the 2-D model into the model image. */
static void model_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	desi_model_batch_cpu(&a->ch->batch, (const double *)STARPU_VECTOR_GET_PTR(buffers[1]),
			     (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[2]),
			     (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[3]),
			     (const float *)STARPU_VECTOR_GET_PTR(buffers[0]),
			     (float *)STARPU_VECTOR_GET_PTR(buffers[4]));
}

/* Rows, spots, xc, yc; the model image RW (not COMMUTE): in submission order. */
SP_CODELET(model_cl, "desi_model", model_cpu, SP_NO_CUDA, NULL, NULL, 5, STARPU_R, STARPU_R,
	   STARPU_R, STARPU_R, STARPU_RW);

/* ---- desi.model ---- */

struct model_params {
	int model;
};

/* The model file's write task: the image once every desi_model task is done. */
struct model_write_arg {
	sp_taskctx_t *ctx;
	char *path;
	const char *tmp; /* its temporary in the item's output set */
	desi_model_t md; /* pix set by the task */
};

/* Port type "desi.model": the model image and its write task. */
typedef struct desi_model_val {
	sp_value_t base;
	struct desi_job *job; /* a reference; NULL with model=false */
	struct model_write_arg arg;
	struct starpu_task *task; /* not detached: joined before arg is freed */
} desi_model_val_t;

static void model_write_cpu(void *buffers[], void *cl_arg)
{
	struct model_write_arg *a = cl_arg;
	sp_err_t err = { 0 };
	if (sp_status_failed(a->ctx->status))
		return;
	desi_model_t md = a->md;
	md.pix = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
	if (desi_model_write_into(a->tmp, a->path, &md, md.in_img, &err) != 0)
		sp_status_set_err(a->ctx->status, &err);
}

SP_CODELET(model_write_cl, "desi_write_model", model_write_cpu, SP_NO_CUDA, NULL, NULL, 1,
	   STARPU_R);

static void model_free(sp_value_t *v)
{
	desi_model_val_t *m = (desi_model_val_t *)v;
	sp_task_join(&m->task);
	free(m->arg.path);
	desi__job_unref(m->job);
	free(m);
}

/* With model=true: the image allocated and the extraction told, before any
 * of its tiles, that its rows carry the deconvolved flux (desi_batch_t.xflux)
 * and that this stage reads them too. */
static int model_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	struct desi_job *j = desi__job(in[0]);
	desi_model_val_t *m = calloc(1, sizeof *m);
	sp_err_t err = { 0 };

	if (m == NULL)
		return SP_ENOMEM;
	m->base.type = "desi.model";
	m->base.free_cb = model_free;
	*out = &m->base;
	if (!((const struct model_params *)st->typed)->model)
		return 0;
	if (j->tiles_started || j->model)
		return sp_status_set(sp_item_status(item), SP_EINVAL,
				     "%s: stage '%s' must be one of the extraction's tiled stages, "
				     "next to desi.stitch in the graph, and the only desi.model",
				     j->iv->path, st->name);
	const size_t npix = (size_t)j->iv->img.ny * (size_t)j->iv->img.nx;
	j->model_bytes = npix * sizeof *j->model_img;
	if (sp_item_buffer_get((void **)&j->model_img, j->model_bytes) != 0) {
		j->model_img = NULL;
		return sp_status_set(sp_item_status(item), SP_ENOMEM,
				     "%s: cannot allocate the 2-D model (%zu pixels)", j->iv->path,
				     npix);
	}
	memset(j->model_img, 0, npix * sizeof *j->model_img);
	starpu_vector_data_register(&j->hmodel, STARPU_MAIN_RAM, (uintptr_t)j->model_img,
				    (uint32_t)npix, sizeof *j->model_img);
	j->model = 1;
	j->rows_readers++;
	m->job = j;
	sp_job_ref(&j->base);
	m->arg.path = sp_item_param(item, st, "file");
	j->ctx_model = sp_item_taskctx(item, st, "desi_model");
	m->arg.ctx = sp_item_taskctx(item, st, "desi_write_model");
	if (m->arg.path == NULL || j->ctx_model == NULL || m->arg.ctx == NULL)
		return SP_ENOMEM;
	if (sp_item_output(item, m->arg.path, &m->arg.tmp, &err) != 0)
		return sp_status_set_err(sp_item_status(item), &err);
	return 0;
}

/* Subbundle t's chunks: each chunk's spots times its deconvolved flux added
 * into the image, in submission order (RW, not COMMUTE: the image is the
 * same for any number of workers and any tile:); after the last, the file. */
static int model_tile(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		      sp_value_t *out, int t)
{
	desi_model_val_t *m = (desi_model_val_t *)out;
	struct desi_job *j = m->job;
	int ret = 0;
	(void)item;
	(void)st;
	(void)in;
	if (j == NULL)
		return 0; /* model=false */
	for (int c = j->chunk0[t]; c < j->chunk0[t + 1] && ret == 0; c++) {
		struct desi_chunk *ch = &j->chunks[c];
		struct desi_slot *sl = &j->slots[ch->slot];
		ch->a_model = (struct desi_task_arg){ j->ctx_model, ch };
		ret = sp_task_insert(j->ctx_model, &model_cl, STARPU_R, ch->hrows, STARPU_R,
				     sl->hspots, STARPU_R, sl->hxc, STARPU_R, sl->hyc, STARPU_RW,
				     j->hmodel, STARPU_CL_ARGS_NFREE, &ch->a_model,
				     sizeof ch->a_model);
		if (ret == 0)
			desi__rows_release(ch);
	}
	if (ret != 0 || t != j->nsubs - 1)
		return ret;
	const desi_plan_t *pl = &j->plan;
	m->arg.md = (desi_model_t){ .ny = j->iv->img.ny, .nx = j->iv->img.nx,
				    .specmin = pl->specmin, .nspec = pl->nspec,
				    .wmin = j->wave[0], .wmax = j->wave[pl->nwave - 1],
				    .in_psf = j->psf_path, .in_img = j->iv->path };
	return sp_task_insert_joinable(m->arg.ctx, &m->task, &model_write_cl, STARPU_R, j->hmodel,
				       STARPU_CL_ARGS_NFREE, &m->arg, sizeof m->arg);
}

/* Only with model=true is the file planned (collisions, --skip-existing,
 * free space) and written. */
static int model_writes(const sp_gstage_t *st, const char *param)
{
	(void)param;
	return ((const struct model_params *)st->typed)->model;
}

/* The image on disk and in memory, with model=true: float32 of the image's
 * shape (e->size pixels, from the image stage), and its headers. */
static int model_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e,
			  sp_err_t *err)
{
	(void)item;
	(void)err;
	if (!((const struct model_params *)st->typed)->model)
		return 0;
	e->out_bytes += (unsigned long long)(4.0 * e->size) + 3 * 2880;
	e->bytes += (unsigned long long)(4.0 * e->size);
	return 0;
}

static const sp_param_spec_t model_params[] = {
	{ "model", SP_PT_BOOL, "false", 0, -1, NULL,
	  "compute and write the 2-D model image (desispec -m/--model): float32 of the CCD's "
	  "shape, the sum over the extracted spectra and wavelengths of spot x deconvolved flux, "
	  "for residuals (image - model); false: nothing is computed or written",
	  SP_AT(struct model_params, model) },
	{ "file", SP_PT_OUTPUT, NULL, 0, -1, NULL,
	  "the model image's FITS file (written only with model=true)", 0 },
};
static const sp_port_spec_t model_inputs[] = {
	{ "rows", "desi.rows", "the patches' rows, with their deconvolved flux" },
};
static const sp_port_spec_t model_outputs[] = {
	{ "model", "desi.model", "the 2-D model image" },
};

const sp_stage_kind_t sp_desi_model_kind = {
	.name = "desi.model",
	.help = "DESI: the 2-D model image (spots x deconvolved flux on the CCD), written beside "
		"the frame, with model=true",
	SP_KIND_PARAMS(model_params, struct model_params),
	SP_KIND_INPUTS(model_inputs),
	SP_KIND_OUTPUTS(model_outputs),
	.impl = SP_IMPL_CPU,
	.codelets = "desi_model desi_write_model",
	.run = model_run,
	.run_tile = model_tile,
	.estimate = model_estimate,
	.writes = model_writes,
	.verify = desi_stage_verify,
};
