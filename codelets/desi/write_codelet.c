/* StarPU glue of desi.write: the frame FITS file in desispec's layout, written atomically. */
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsutil.h"
#include "stage.h"
#include "desi_glue.h"

/*
 * DESIGN: desi.write is a tiled stage, the last of the extraction's group
 * (spots, patch, decorrelate, stitch, model, write), although it writes one
 * file: its write task is submitted with the last tile, after every stitch
 * task, and reads the frame.  The 2-D model image is desi.model's
 * (model_codelet.c), which writes its own file.
 */

struct desi_write_params {
	int no_scores;
};

struct desi_write_arg {
	sp_taskctx_t *ctx;
	desi_frame_val_t *fr;
	char *path;
	const char *tmp; /* its temporary in the item's output set */
	int scores;
};

typedef struct desi_write_val {
	sp_value_t base;
	struct desi_write_arg arg;
	struct starpu_task *task; /* not detached: waited for before freeing arg */
} desi_write_val_t;

static void write_cpu(void *buffers[], void *cl_arg)
{
	struct desi_write_arg *a = cl_arg;
	const desi_plan_t *pl = &a->fr->plan;
	const float *buf = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
	size_t nw = (size_t)pl->nwave, ns = (size_t)pl->nspec;
	sp_err_t err = { 0 };

	if (sp_status_failed(a->ctx->status))
		return;
	/* FLUX, IVAR, CHI2PIX and RESOLUTION are written from the frame's rows
	 * in place (desi_frame_t.stride); only MASK is computed */
	uint32_t *mask = malloc(ns * nw * sizeof *mask);
	if (mask == NULL) {
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", a->path);
		return;
	}
	for (size_t s = 0; s < ns; s++) {
		const float *row = buf + s * DESI_NFIELD * nw;
		for (size_t w = 0; w < nw; w++) {
			float f = row[DESI_F_PIXMASK * nw + w];
			/* desispec: SOMEBADPIX above half masked, ALLBADPIX all,
			 * BAD2DFIT where chi2pix > 100. */
			mask[s * nw + w] = (f > 0.5f ? DESI_SOMEBADPIX : 0u) |
					   (f >= 1.0f ? DESI_ALLBADPIX : 0u) |
					   (row[DESI_F_CHI2PIX * nw + w] > 100.0f ? DESI_BAD2DFIT : 0u);
		}
	}
	desi_frame_t fr = { .nspec = pl->nspec, .nwave = pl->nwave, .ndiag = DESI_NDIAG,
			    .specmin = pl->specmin, .stride = DESI_NFIELD * nw, .wave = a->fr->wave,
			    .flux = buf + DESI_F_FLUX * nw, .ivar = buf + DESI_F_IVAR * nw,
			    .mask = mask, .resolution = buf + DESI_F_RES0 * nw,
			    .chi2pix = buf + DESI_F_CHI2PIX * nw,
			    .in_psf = a->fr->psf_path, .in_img = a->fr->image_path,
			    .fibermap = a->fr->fibermap_path, .scores = a->scores,
			    .heliocor = a->fr->heliocor };
	if (desi_frame_write_into(a->tmp, a->path, &fr, a->fr->image_path, &err) != 0)
		sp_status_set_err(a->ctx->status, &err);
	free(mask);
}

SP_CODELET(write_cl, "desi_write", write_cpu, SP_NO_CUDA, NULL, NULL, 1, STARPU_R);

static void write_free(sp_value_t *v)
{
	desi_write_val_t *w = (desi_write_val_t *)v;
	sp_task_join(&w->task);
	free(w->arg.path);
	free(w);
}

static int write_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	const struct desi_write_params *wp = st->typed;
	desi_write_val_t *w = calloc(1, sizeof *w);
	if (w == NULL)
		return SP_ENOMEM;
	w->base.type = "desi.write";
	w->base.free_cb = write_free;
	*out = &w->base;
	w->arg.fr = (desi_frame_val_t *)in[0];
	w->arg.path = sp_item_param(item, st, "file");
	w->arg.scores = !wp->no_scores;
	w->arg.ctx = sp_item_taskctx(item, st, "desi_write");
	if (w->arg.path == NULL || w->arg.ctx == NULL)
		return SP_ENOMEM;
	sp_err_t err = { 0 };
	if (sp_item_output(item, w->arg.path, &w->arg.tmp, &err) != 0)
		return sp_status_set_err(sp_item_status(item), &err);
	return 0;
}

/* The write task, with the extraction's last tile: after every stitch task
 * of the frame. */
static int write_tile(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		      sp_value_t *out, int t)
{
	desi_write_val_t *w = (desi_write_val_t *)out;
	desi_frame_val_t *fr = w->arg.fr;
	(void)item;
	(void)st;
	(void)in;
	if (t >= fr->ntiles)
		return SP_TILE_END; /* alone in its group: after the extraction's tiles */
	if (t != fr->ntiles - 1)
		return 0;
	return sp_task_insert_joinable(w->arg.ctx, &w->task, &write_cl, STARPU_R, fr->h,
				       STARPU_CL_ARGS_NFREE, &w->arg, sizeof w->arg);
}

int desi_stage_verify(const sp_gstage_t *st, const char *param, const char *path,
		      sp_err_t *err)
{
	(void)st;
	(void)param;
	return desi_output_verify(path, err);
}

static const sp_param_spec_t write_params[] = {
	{ "file", SP_PT_OUTPUT, NULL, 0, -1, NULL, "output frame FITS (desispec layout)", 0 },
	{ "no_scores", SP_PT_BOOL, "false", 0, -1, NULL,
	  "do not write the SCORES table (desispec --no-scores)",
	  SP_AT(struct desi_write_params, no_scores) },
};
static const sp_port_spec_t write_inputs[] = {
	{ "frame", "desi.frame", "the extracted frame" },
};

const sp_stage_kind_t sp_desi_write_kind = {
	.name = "desi.write",
	.help = "Write the extracted frame (FLUX, IVAR, MASK, WAVELENGTH, RESOLUTION, FIBERMAP, CHI2PIX, "
		"SCORES)",
	SP_KIND_PARAMS(write_params, struct desi_write_params),
	SP_KIND_INPUTS(write_inputs),
	.impl = SP_IMPL_CPU,
	.codelets = "desi_write",
	.run = write_run,
	.run_tile = write_tile,
	.verify = desi_stage_verify,
};
