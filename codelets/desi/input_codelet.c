/* StarPU glue of desi.psf and desi.image: the PSF and the pre-processed CCD image. */
#include <stdlib.h>
#include <string.h>

#include "sizes.h"
#include "stage.h"
#include "desi_glue.h"

static void psf_free(sp_value_t *v)
{
	desi_psf_val_t *p = (desi_psf_val_t *)v;
	desi_psf_free(&p->psf);
	free(p->path);
	free(p);
}

/* The PSF is ~1 MB: read in the driver, where its sizes are needed at once. */
static int psf_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		   sp_value_t **out)
{
	desi_psf_val_t *p = calloc(1, sizeof *p);
	sp_err_t err = { 0 };
	(void)in;
	if (p == NULL)
		return SP_ENOMEM;
	p->base.type = "desi.psf";
	p->base.free_cb = psf_free;
	*out = &p->base;
	p->path = sp_item_param(item, st, "file");
	if (p->path == NULL)
		return SP_ENOMEM;
	if (desi_psf_read(p->path, &p->psf, &err) != 0)
		return sp_status_set_err(sp_item_status(item), &err);
	return 0;
}

static const sp_param_spec_t psf_params[] = {
	{ "file", SP_PT_PATH, NULL, 0, -1, NULL, "GaussHermite PSF FITS file (specex, PSFVER 3)", 0 },
};
static const sp_port_spec_t psf_outputs[] = {
	{ "psf", "desi.psf", "traces and spot shapes of every fibre" },
};

const sp_stage_kind_t sp_desi_psf_kind = {
	.name = "desi.psf",
	.help = "Read a DESI GaussHermite PSF",
	SP_KIND_TEXT_PARAMS(psf_params),
	SP_KIND_OUTPUTS(psf_outputs),
	.impl = SP_IMPL_CPU,
	.codelets = "",
	.run = psf_run,
};

struct desi_image_arg {
	sp_taskctx_t *ctx;
	desi_image_val_t *v;
};

static void image_read_cpu(void *buffers[], void *cl_arg)
{
	struct desi_image_arg *a = cl_arg;
	sp_err_t err = { 0 };
	size_t nbad = 0;
	desi_image_t img = a->v->img;

	if (sp_status_failed(a->ctx->status))
		return;
	img.pix = (float *)STARPU_VECTOR_GET_PTR(buffers[0]);
	img.ivar = (float *)STARPU_VECTOR_GET_PTR(buffers[1]);
	if (desi_image_read(a->v->path, &img, &nbad, &err) != 0)
		sp_status_set_err(a->ctx->status, &err);
	else
		sp_item_report_num(a->ctx->item, "image_nonfinite_pixels", (double)nbad);
}

SP_CODELET(image_read_cl, "desi_read_image", image_read_cpu, SP_NO_CUDA, NULL, NULL, 2, STARPU_W, STARPU_W);

static void image_free(sp_value_t *v)
{
	desi_image_val_t *im = (desi_image_val_t *)v;
	if (im->pix != NULL)
		starpu_data_unregister(im->pix);
	if (im->ivar != NULL)
		starpu_data_unregister(im->ivar);
	const size_t bytes = (size_t)im->img.ny * (size_t)im->img.nx * sizeof(float);
	sp_item_buffer_put(im->img.pix, bytes);
	sp_item_buffer_put(im->img.ivar, bytes);
	free(im->arg);
	free(im->path);
	free(im->fibermap);
	free(im);
}

/* The image and its inverse variances are StarPU vectors of floats: at most
 * SP_VECTOR_MAX_NX pixels (desi_image_size() bounds each side to an int). */
static int pixels_check(const char *path, int ny, int nx, sp_err_t *err)
{
	if (!sp_vector_nx_ok((size_t)ny * (size_t)nx))
		return sp_seterr(err, SP_ESHAPE,
				 "%s: %d x %d pixels, more than the %zu a StarPU vector holds", path,
				 ny, nx, SP_VECTOR_MAX_NX);
	return 0;
}

/* What of the extraction follows the image's size (the image, its inverse
 * variances, the reading): DESI_BYTES_PER_PIXEL is the peak resident memory
 * of a full simulated r frame less the buffers the parameters grow, which
 * desi.spots and desi.patch estimate (spot slots, frame, Legendre sums,
 * normal equations, work buffers: 294 MB at the defaults on 2 workers),
 * over its pixels, with a margin (doc/reliability.md). */
#define DESI_BYTES_PER_PIXEL 24.0
static int image_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e,
			  sp_err_t *err)
{
	char *path = sp_item_param(item, st, "file");
	char *fibermap = sp_item_param(item, st, "fibermap");
	int ny = 0, nx = 0, rc;
	if (path == NULL || fibermap == NULL)
		rc = sp_seterr(err, SP_ENOMEM, "out of memory");
	else
		rc = desi_image_size(path, &ny, &nx, err);
	if (rc == 0)
		rc = pixels_check(path, ny, nx, err);
	if (rc == 0 && fibermap[0] != '\0')
		rc = desi_fibermap_check(fibermap, err);
	free(path);
	free(fibermap);
	if (rc != 0)
		return rc;
	e->size = (double)nx * (double)ny;
	e->bytes += (unsigned long long)(DESI_BYTES_PER_PIXEL * e->size);
	return 0;
}

static int image_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	desi_image_val_t *im = calloc(1, sizeof *im);
	sp_err_t err = { 0 };
	(void)in;
	if (im == NULL)
		return SP_ENOMEM;
	im->base.type = "desi.image";
	im->base.free_cb = image_free;
	*out = &im->base;
	im->path = sp_item_param(item, st, "file");
	im->fibermap = sp_item_param(item, st, "fibermap");
	im->arg = calloc(1, sizeof *im->arg);
	if (im->path == NULL || im->fibermap == NULL || im->arg == NULL)
		return SP_ENOMEM;
	/* Sizes now, data by a task: reading frame k+1 overlaps frame k's work. */
	if (desi_image_size(im->path, &im->img.ny, &im->img.nx, &err) != 0 ||
	    pixels_check(im->path, im->img.ny, im->img.nx, &err) != 0 ||
	    (im->fibermap[0] != '\0' && desi_fibermap_check(im->fibermap, &err) != 0))
		return sp_status_set_err(status, &err);
	size_t n = (size_t)im->img.ny * (size_t)im->img.nx;
	if (sp_item_buffer_get((void **)&im->img.pix, n * sizeof(float)) != 0 ||
	    sp_item_buffer_get((void **)&im->img.ivar, n * sizeof(float)) != 0)
		return sp_status_set(status, SP_ENOMEM, "%s: cannot allocate %zu bytes for the image",
				     im->path, 2 * n * sizeof(float));
	starpu_vector_data_register(&im->pix, STARPU_MAIN_RAM, (uintptr_t)im->img.pix, (uint32_t)n,
				    sizeof(float));
	starpu_vector_data_register(&im->ivar, STARPU_MAIN_RAM, (uintptr_t)im->img.ivar, (uint32_t)n,
				    sizeof(float));
	im->arg->v = im;
	im->arg->ctx = sp_item_taskctx(item, st, "desi_read_image");
	if (im->arg->ctx == NULL)
		return SP_ENOMEM;
	return sp_task_insert(im->arg->ctx, &image_read_cl, STARPU_W, im->pix, STARPU_W, im->ivar,
			      STARPU_CL_ARGS_NFREE, im->arg, sizeof *im->arg);
}

static const sp_param_spec_t image_params[] = {
	{ "file", SP_PT_PATH, NULL, 0, -1, NULL,
	  "pre-processed CCD image FITS (IMAGE, IVAR, MASK, optional FIBERMAP)", 0 },
	{ "fibermap", SP_PT_PATH, "", 0, -1, NULL,
	  "separate fibermap FITS whose FIBERMAP goes into the frame (desispec -f); "
	  "empty: the image's own FIBERMAP, if any", 0 },
};
static const sp_port_spec_t image_outputs[] = {
	{ "image", "desi.image", "pixels and inverse variances, masked pixels at ivar 0" },
};

const sp_stage_kind_t sp_desi_image_kind = {
	.name = "desi.image",
	.help = "Read a DESI pre-processed CCD image",
	SP_KIND_TEXT_PARAMS(image_params),
	SP_KIND_OUTPUTS(image_outputs),
	.impl = SP_IMPL_CPU,
	.codelets = "desi_read_image",
	.run = image_run,
	.estimate = image_estimate,
};
