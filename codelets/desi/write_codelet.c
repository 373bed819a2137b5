/* StarPU glue of desi.write: the frame FITS file in desispec's layout (and the 2-D model), written atomically. */
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
 * (spots, patch, decorrelate, stitch, write), although it writes one file:
 * its run() comes before any tile is submitted, which is when it can ask
 * the extraction for the 2-D model (model=true; desi_frame_model(): the
 * rows then carry the deconvolved flux and the stitch stage adds each
 * chunk's model while its bundle's spots are still in their slot).  Its
 * write task is submitted with the last tile, after every stitch task;
 * it reads the frame and, with model=true, the model image (a second
 * buffer: the codelet takes a variable number).  The model file is
 * model-<stem>.fits beside frame-<stem>.fits (model_name()); the run plans
 * it as an output of the item (sp_stage_kind_t.sibling), so it is checked
 * before any task and renamed into place with the frame, or neither.
 */

struct desi_write_params {
	int no_scores;
	int model;
};

struct desi_write_arg {
	sp_taskctx_t *ctx;
	desi_frame_val_t *fr;
	char *path, *model_path;
	const char *tmp, *model_tmp; /* temporaries of the item's output set */
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
	size_t nw = (size_t)pl->nwave, ns = (size_t)pl->nspec, nd = 2 * DESI_NDIAG + 1;
	sp_err_t err = { 0 };

	if (sp_status_failed(a->ctx->status))
		return;
	float *flux = malloc(ns * nw * sizeof *flux), *ivar = malloc(ns * nw * sizeof *ivar);
	float *chi2 = malloc(ns * nw * sizeof *chi2), *res = malloc(ns * nd * nw * sizeof *res);
	uint32_t *mask = malloc(ns * nw * sizeof *mask);
	if (!flux || !ivar || !chi2 || !res || !mask) {
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", a->path);
		goto out;
	}
	for (size_t s = 0; s < ns; s++) {
		const float *row = buf + s * DESI_NFIELD * nw;
		memcpy(flux + s * nw, row + DESI_F_FLUX * nw, nw * sizeof *flux);
		memcpy(ivar + s * nw, row + DESI_F_IVAR * nw, nw * sizeof *ivar);
		memcpy(chi2 + s * nw, row + DESI_F_CHI2PIX * nw, nw * sizeof *chi2);
		memcpy(res + s * nd * nw, row + DESI_F_RES0 * nw, nd * nw * sizeof *res);
		for (size_t w = 0; w < nw; w++) {
			float f = row[DESI_F_PIXMASK * nw + w];
			/* desispec: SOMEBADPIX above half masked, ALLBADPIX all,
			 * BAD2DFIT where chi2pix > 100. */
			mask[s * nw + w] = (f > 0.5f ? DESI_SOMEBADPIX : 0u) |
					   (f >= 1.0f ? DESI_ALLBADPIX : 0u) |
					   (chi2[s * nw + w] > 100.0f ? DESI_BAD2DFIT : 0u);
		}
	}
	desi_frame_t fr = { .nspec = pl->nspec, .nwave = pl->nwave, .ndiag = DESI_NDIAG,
			    .specmin = pl->specmin, .wave = a->fr->wave, .flux = flux, .ivar = ivar,
			    .mask = mask, .resolution = res, .chi2pix = chi2,
			    .in_psf = a->fr->psf_path, .in_img = a->fr->image_path,
			    .fibermap = a->fr->fibermap_path, .scores = a->scores,
			    .heliocor = a->fr->heliocor };
	if (desi_frame_write_into(a->tmp, a->path, &fr, a->fr->image_path, &err) != 0) {
		sp_status_set_err(a->ctx->status, &err);
		goto out;
	}
	if (a->model_tmp != NULL) {
		const desi_model_t md = { .ny = a->fr->model_ny, .nx = a->fr->model_nx,
					  .pix = (const float *)STARPU_VECTOR_GET_PTR(buffers[1]),
					  .specmin = pl->specmin, .nspec = pl->nspec,
					  .wmin = a->fr->wave[0], .wmax = a->fr->wave[pl->nwave - 1],
					  .in_psf = a->fr->psf_path, .in_img = a->fr->image_path };
		if (desi_model_write_into(a->model_tmp, a->model_path, &md, a->fr->image_path,
					  &err) != 0)
			sp_status_set_err(a->ctx->status, &err);
	}
out:
	free(flux);
	free(ivar);
	free(chi2);
	free(res);
	free(mask);
}

/* The frame, and the model image with model=true: a variable number of
 * buffers, their modes given when the task is built. */
SP_CODELET(write_cl, "desi_write", write_cpu, SP_NO_CUDA, NULL, NULL, STARPU_VARIABLE_NBUFFERS,
	   STARPU_R);

static void write_free(sp_value_t *v)
{
	desi_write_val_t *w = (desi_write_val_t *)v;
	sp_task_join(&w->task);
	free(w->arg.path);
	free(w->arg.model_path);
	free(w);
}

/* model-<stem>.fits beside frame-<stem>.fits: the frame's name with its
 * leading "frame-" replaced by "model-", or "model-" prepended. */
static char *model_name(const char *frame)
{
	const char *slash = strrchr(frame, '/'), *base = slash != NULL ? slash + 1 : frame;
	const size_t dir = (size_t)(base - frame);
	if (strncmp(base, "frame-", 6) == 0)
		base += 6;
	char *m = malloc(dir + 6 + strlen(base) + 1);
	if (m != NULL) {
		memcpy(m, frame, dir);
		memcpy(m + dir, "model-", 6);
		strcpy(m + dir + 6, base);
	}
	return m;
}

/* sp_stage_kind_t.sibling: the model file beside the frame, with model=true. */
static int write_sibling(const sp_gstage_t *st, const char *param, const char *path,
			 char **sibling)
{
	*sibling = NULL;
	if (strcmp(param, "file") != 0 || !((const struct desi_write_params *)st->typed)->model)
		return 0;
	*sibling = model_name(path);
	return *sibling == NULL ? SP_ENOMEM : 0;
}

/* The model image on disk and in memory, with model=true: float32 of the
 * image's shape (e->size pixels, from the image stage), and its headers. */
static int write_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e,
			  sp_err_t *err)
{
	(void)item;
	(void)err;
	if (!((const struct desi_write_params *)st->typed)->model)
		return 0;
	e->out_bytes += (unsigned long long)(4.0 * e->size) + 3 * 2880;
	e->bytes += (unsigned long long)(4.0 * e->size);
	return 0;
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
	if (w->arg.path == NULL || w->arg.ctx == NULL ||
	    write_sibling(st, "file", w->arg.path, &w->arg.model_path) != 0)
		return SP_ENOMEM;
	sp_err_t err = { 0 };
	if (sp_item_output(item, w->arg.path, &w->arg.tmp, &err) != 0 ||
	    (w->arg.model_path != NULL &&
	     sp_item_output(item, w->arg.model_path, &w->arg.model_tmp, &err) != 0))
		return sp_status_set_err(sp_item_status(item), &err);
	if (w->arg.model_path != NULL)
		return desi_frame_model(w->arg.fr, item, st);
	return 0;
}

/* The write task, with the extraction's last tile: after every stitch task
 * (and model task) of the frame. */
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
	if (w->arg.model_tmp != NULL)
		return sp_task_insert_joinable(w->arg.ctx, &w->task, &write_cl, STARPU_R, fr->h,
					       STARPU_R, fr->hmodel, STARPU_CL_ARGS_NFREE, &w->arg,
					       sizeof w->arg);
	return sp_task_insert_joinable(w->arg.ctx, &w->task, &write_cl, STARPU_R, fr->h,
				       STARPU_CL_ARGS_NFREE, &w->arg, sizeof w->arg);
}

/* --skip-existing: the frame and the model verified (desi_output_verify). */
static int write_verify(const sp_gstage_t *st, const char *param, const char *path,
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
	{ "model", SP_PT_BOOL, "false", 0, -1, NULL,
	  "also write the 2-D model image (desispec -m/--model): model-<stem>.fits beside "
	  "frame-<stem>.fits, float32 of the CCD's shape, the sum over the extracted spectra "
	  "and wavelengths of spot x deconvolved flux, for residuals (image - model)",
	  SP_AT(struct desi_write_params, model) },
};
static const sp_port_spec_t write_inputs[] = {
	{ "frame", "desi.frame", "the extracted frame" },
};

const sp_stage_kind_t sp_desi_write_kind = {
	.name = "desi.write",
	.help = "Write the extracted frame (FLUX, IVAR, MASK, WAVELENGTH, RESOLUTION, FIBERMAP, CHI2PIX, "
		"SCORES) and, with model=true, the 2-D model image beside it",
	SP_KIND_PARAMS(write_params),
	.params_size = sizeof(struct desi_write_params),
	SP_KIND_INPUTS(write_inputs),
	.impl = SP_IMPL_CPU,
	.codelets = "desi_write",
	.run = write_run,
	.run_tile = write_tile,
	.estimate = write_estimate,
	.sibling = write_sibling,
	.verify = write_verify,
};
