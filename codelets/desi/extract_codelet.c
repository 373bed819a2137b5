/* StarPU glue of desi.extract: spots per bundle, then one extraction task per subbundle. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/stage.h"
#include "desi_glue.h"
#include "extract.h"
#ifdef SP_HAVE_CUDA
#include "../../src/cuda_handles.h"
#endif

/*
 * DESIGN: per bundle, the driver evaluates the Legendre sums of every
 * fibre at every padded wavelength (cheap) and submits one spots task (CPU
 * or CUDA) that integrates the Gauss-Hermite terms; then one task per
 * subbundle extracts its patches (A'NA, solve, decorrelate, chi2) from those
 * spots and the image, writing the subbundle's rows of the frame buffer, a
 * partition of it: the frame is stitched without a copy.  Spots take ~90 MB
 * per bundle; the driver unregisters the spots of bundle b - window before
 * submitting bundle b, which bounds a frame's memory whatever the scheduler
 * does.
 */

struct desi_bundle {
	int b, s0, ns;           /* bundle index, first spectrum, spectra */
	double *params;          /* [ns][nfullwave][np], starpu_malloc'd */
	starpu_data_handle_t hparams, hspots, hxc, hyc;
};

/* A subbundle task: its patches' geometry, computed by the driver from the
 * spot corners (known from the trace before the spots exist). */
struct desi_sub_arg {
	sp_taskctx_t *ctx;
	struct desi_bundle *bundle;
	int k;               /* subbundle within the bundle */
	desi_batch_t batch;  /* points into geom */
	int *geom;           /* [6][npatch]: ymin, ny, xmin, nx, w0, core_nw */
};

struct desi_spots_arg {
	sp_taskctx_t *ctx;
	desi_spot_shape_t shape;
	size_t n;
};

static void spots_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_spots_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	desi_spots_cpu((const double *)STARPU_VECTOR_GET_PTR(buffers[0]), a->n, a->shape,
		       (double *)STARPU_VECTOR_GET_PTR(buffers[1]),
		       (int32_t *)STARPU_VECTOR_GET_PTR(buffers[2]),
		       (int32_t *)STARPU_VECTOR_GET_PTR(buffers[3]));
}

#ifdef SP_HAVE_CUDA
static void spots_cuda(void *buffers[], void *cl_arg)
{
	const struct desi_spots_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	if (desi_spots_cuda((const double *)STARPU_VECTOR_GET_PTR(buffers[0]), a->n, a->shape,
			    (double *)STARPU_VECTOR_GET_PTR(buffers[1]),
			    (int32_t *)STARPU_VECTOR_GET_PTR(buffers[2]),
			    (int32_t *)STARPU_VECTOR_GET_PTR(buffers[3]),
			    (struct CUstream_st *)starpu_cuda_get_local_stream()) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: kernel launch failed", __func__);
}
#endif

static struct starpu_perfmodel spots_model = {
	.type = STARPU_HISTORY_BASED,
	.symbol = "desi_spots",
};

static struct starpu_codelet spots_cl = {
	.cpu_funcs = { spots_cpu },
#ifdef SP_HAVE_CUDA
	.cuda_funcs = { spots_cuda },
	.cuda_flags = { STARPU_CUDA_ASYNC },
#endif
	.nbuffers = 4,
	.modes = { STARPU_R, STARPU_W, STARPU_W, STARPU_W },
	.model = &spots_model,
	.name = "desi_spots",
};

/* Extracts every patch of one subbundle into its rows of the frame. */
static void subbundle_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_sub_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	int bad = desi_extract_batch_cpu(&a->batch, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]),
					 (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
					 (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[2]),
					 (const float *)STARPU_VECTOR_GET_PTR(buffers[3]),
					 (const float *)STARPU_VECTOR_GET_PTR(buffers[4]),
					 (float *)STARPU_VECTOR_GET_PTR(buffers[5]));
	if (bad < 0)
		sp_status_set(a->ctx->status, SP_ENOMEM, "bundle %d subbundle %d: out of memory",
			      a->bundle->b, a->k);
	else if (bad > 0)
		sp_status_set(a->ctx->status, SP_EINVAL,
			      "bundle %d subbundle %d, wavelengths from grid bin %d: the patch's normal "
			      "matrix is not positive definite",
			      a->bundle->b, a->k, a->batch.w0[bad - 1]);
}

#ifdef SP_HAVE_CUDA
static void subbundle_cuda(void *buffers[], void *cl_arg)
{
	const struct desi_sub_arg *a = cl_arg;
	struct CUstream_st *stream = (struct CUstream_st *)starpu_cuda_get_local_stream();
	void *blas, *solver, *scratch = NULL;
	if (sp_status_failed(a->ctx->status))
		return;
	sp_cuda_handles(&blas, &solver);
	size_t bytes = desi_extract_batch_cuda_scratch(&a->batch);
	/* Stream-ordered allocation: asynchronous, served from the pool. */
	if (sp_cuda_malloc_async(&scratch, bytes, stream) != 0) {
		sp_status_set(a->ctx->status, SP_ECUDA, "bundle %d subbundle %d: cannot allocate %zu "
			      "bytes of GPU scratch", a->bundle->b, a->k, bytes);
		return;
	}
	if (desi_extract_batch_cuda(&a->batch, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]),
				    (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
				    (const int32_t *)STARPU_VECTOR_GET_PTR(buffers[2]),
				    (const float *)STARPU_VECTOR_GET_PTR(buffers[3]),
				    (const float *)STARPU_VECTOR_GET_PTR(buffers[4]),
				    (float *)STARPU_VECTOR_GET_PTR(buffers[5]), scratch, blas, solver,
				    stream) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "bundle %d subbundle %d: %s failed", a->bundle->b,
			      a->k, "desi_extract_batch_cuda");
	sp_cuda_free_async(scratch, stream);
}
#endif

static uint32_t sub_footprint(struct starpu_task *task)
{
	const struct desi_sub_arg *a = task->cl_arg;
	return (uint32_t)(a->batch.p.nfib * 1000 + a->batch.np);
}

static struct starpu_perfmodel sub_model = {
	.type = STARPU_HISTORY_BASED,
	.symbol = "desi_extract",
	.footprint = sub_footprint,
};

static struct starpu_codelet sub_cl = {
	.cpu_funcs = { subbundle_cpu },
	.cpu_funcs_name = { "desi_extract_cpu" },
#ifdef SP_HAVE_CUDA
	.cuda_funcs = { subbundle_cuda },
	.cuda_flags = { STARPU_CUDA_ASYNC },
#endif
	.nbuffers = 6,
	.modes = { STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_W },
	.model = &sub_model,
	.name = "desi_extract",
};

struct desi_extract_state {
	desi_frame_val_t fr;
	struct desi_bundle *bundles;
	struct desi_sub_arg *subs;
	struct desi_spots_arg *spot_args;
	int nbundles, nsubs;
	int partitioned;
};

static void release_bundle(struct desi_bundle *b)
{
	if (b->hparams) {
		starpu_data_unregister(b->hparams);
		starpu_data_unregister(b->hspots);
		starpu_data_unregister(b->hxc);
		starpu_data_unregister(b->hyc);
		b->hparams = NULL;
	}
	starpu_free(b->params);
	b->params = NULL;
}

static void frame_free(sp_value_t *v)
{
	struct desi_extract_state *s = (struct desi_extract_state *)v;
	for (int b = 0; b < s->nbundles; b++)
		release_bundle(&s->bundles[b]);
	if (s->fr.h != NULL) {
		if (s->partitioned)
			starpu_data_unpartition(s->fr.h, STARPU_MAIN_RAM);
		starpu_data_unregister(s->fr.h);
	}
	starpu_free(s->fr.buf);
	free(s->fr.wave);
	free(s->bundles);
	for (int i = 0; s->subs != NULL && i < s->nsubs; i++)
		free(s->subs[i].geom);
	free(s->subs);
	free(s->spot_args);
	free(s);
}

/* Most fibres in a patch: a subbundle and a neighbour each side. */
static int nf_max(const desi_plan_t *pl)
{
	return (pl->bundlesize + pl->nsubbundles - 1) / pl->nsubbundles + 2;
}

/* Spots of bundles still registered at once: enough to keep every worker
 * busy, few enough to bound memory (each ~90 MB). */
static int spots_window(void)
{
	int w = (int)sp_item_nworkers() / 5 + 2;
	return w;
}

/* The geometry of a subbundle's patches, from the corners of its spots,
 * computed from the trace positions in the bundle's spot parameters. */
static int plan_subbundle(struct desi_sub_arg *sa, const desi_plan_t *pl, const desi_psf_t *psf,
			  const struct desi_bundle *bu, int np, int npix_y, int npix_x,
			  double regularize, double psferr)
{
	int c0, nc, f0, nf;
	int sy = 2 * psf->hsizey + 1, sx = 2 * psf->hsizex + 1;
	int nwp = pl->nwavestep + 2 * pl->wavepad, npw = pl->npatch_wave;
	int32_t *xc = malloc((size_t)nf_max(pl) * nwp * sizeof *xc);
	int32_t *yc = malloc((size_t)nf_max(pl) * nwp * sizeof *yc);

	sa->geom = malloc(6 * (size_t)npw * sizeof *sa->geom);
	if (xc == NULL || yc == NULL || sa->geom == NULL) {
		free(xc);
		free(yc);
		return -1;
	}
	desi_plan_subbundle(pl, bu->ns, sa->k, &c0, &nc, &f0, &nf);
	int *ymin = sa->geom, *ny = ymin + npw, *xmin = ny + npw, *nx = xmin + npw, *w0 = nx + npw,
	    *cnw = w0 + npw;
	for (int pw = 0; pw < npw; pw++) {
		w0[pw] = pw * pl->nwavestep;
		cnw[pw] = pl->nwave - w0[pw] < pl->nwavestep ? pl->nwave - w0[pw] : pl->nwavestep;
		for (int f = 0; f < nf; f++)
			for (int w = 0; w < nwp; w++) {
				const double *q = bu->params + ((size_t)(f0 + f) * pl->nfullwave + w0[pw] + w) * np;
				xc[f * nwp + w] = desi_spot_corner(q[0], psf->hsizex);
				yc[f * nwp + w] = desi_spot_corner(q[1], psf->hsizey);
			}
		desi_plan_window(pl, xc, yc, nf, nwp, pl->wavepad, cnw[pw], sy, sx, npix_y, npix_x,
				 &ymin[pw], &ny[pw], &xmin[pw], &nx[pw]);
	}
	free(xc);
	free(yc);
	sa->batch = (desi_batch_t){
		.p = { .nfib = nf, .nwave = nwp, .sy = sy, .sx = sx, .core_f0 = c0 - f0, .core_nf = nc,
		       .core_w0 = pl->wavepad, .core_nw = pl->nwavestep, .ndiag = DESI_NDIAG,
		       .regularize = regularize, .psferr = psferr },
		.np = npw, .ymin = ymin, .ny = ny, .xmin = xmin, .nx = nx, .w0 = w0, .core_nw = cnw,
		.fib0 = f0, .nfullwave = pl->nfullwave, .npix_y = npix_y, .npix_x = npix_x,
		.nwave_grid = pl->nwave, .nfield = DESI_NFIELD, .dw = pl->dw,
	};
	return 0;
}

static int extract_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		       sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	const desi_psf_val_t *pv = (const desi_psf_val_t *)in[0];
	const desi_image_val_t *iv = (const desi_image_val_t *)in[1];
	const desi_psf_t *psf = pv->psf;
	struct desi_extract_state *s = calloc(1, sizeof *s);
	char msg[256];

	if (s == NULL)
		return SP_ENOMEM;
	s->fr.base.type = "desi.frame";
	s->fr.base.free_cb = frame_free;
	*out = &s->fr.base;
	s->fr.psf_path = pv->path;
	s->fr.image_path = iv->path;

#define P(name) (sp_gstage_param(st, name)->text)
	desi_plan_t *pl = &s->fr.plan;
	if (desi_plan_init(pl, sp_param_float(P("wmin")), sp_param_float(P("wmax")),
			   sp_param_float(P("dw")), (int)sp_param_int(P("specmin")),
			   (int)sp_param_int(P("nspec")), (int)sp_param_int(P("bundlesize")),
			   (int)sp_param_int(P("nsubbundles")), (int)sp_param_int(P("nwavestep")),
			   (int)sp_param_int(P("wavepad")), sp_param_float(P("wavepad_frac")),
			   sp_param_float(P("pixpad_frac")), msg, sizeof msg) != 0)
		return sp_status_set(status, SP_EINVAL, "%s: %s", iv->path, msg);
	double regularize = sp_param_float(P("regularize"));
	double psferr = sp_param_float(P("psferr"));
#undef P
	if (psferr <= 0)
		psferr = psf->psferr;
	if (pl->specmin + pl->nspec > psf->nfib)
		return sp_status_set(status, SP_EINVAL, "%s: spectra %d..%d requested but the PSF has %d fibres",
				     pv->path, pl->specmin, pl->specmin + pl->nspec - 1, psf->nfib);
	/* The padding may extrapolate the PSF (as the reference does); the grid may not. */
	if (pl->wmin < psf->wmin || pl->wmax > psf->wmax)
		return sp_status_set(status, SP_EINVAL,
				     "%s: wavelengths %g..%g are outside the PSF's range %g..%g",
				     pv->path, pl->wmin, pl->wmax, psf->wmin, psf->wmax);

	/* The frame buffer, partitioned by subbundle. */
	size_t rowlen = (size_t)DESI_NFIELD * pl->nwave;
	if (starpu_malloc((void **)&s->fr.buf, (size_t)pl->nspec * rowlen * sizeof(float)) != 0)
		return sp_status_set(status, SP_ENOMEM, "%s: cannot allocate the frame", iv->path);
	memset(s->fr.buf, 0, (size_t)pl->nspec * rowlen * sizeof(float));
	s->fr.wave = malloc((size_t)pl->nwave * sizeof *s->fr.wave);
	s->nbundles = pl->nbundles;
	s->bundles = calloc((size_t)s->nbundles, sizeof *s->bundles);
	s->subs = calloc((size_t)s->nbundles * pl->nsubbundles, sizeof *s->subs);
	s->spot_args = calloc((size_t)s->nbundles, sizeof *s->spot_args);
	uint32_t *lens = calloc((size_t)s->nbundles * pl->nsubbundles, sizeof *lens);
	if (!s->fr.wave || !s->bundles || !s->subs || !s->spot_args || !lens) {
		free(lens);
		return SP_ENOMEM;
	}
	for (int w = 0; w < pl->nwave; w++)
		s->fr.wave[w] = pl->wmin + pl->dw * w;
	int nsub = 0;
	for (int b = 0; b < s->nbundles; b++) {
		struct desi_bundle *bu = &s->bundles[b];
		bu->b = b;
		desi_plan_bundle(pl, b, &bu->s0, &bu->ns);
		int nk = pl->nsubbundles < bu->ns ? pl->nsubbundles : bu->ns;
		for (int k = 0; k < nk; k++) {
			int c0, nc, f0, nf;
			desi_plan_subbundle(pl, bu->ns, k, &c0, &nc, &f0, &nf);
			lens[nsub++] = (uint32_t)(nc * rowlen);
		}
	}
	s->nsubs = nsub;
	starpu_vector_data_register(&s->fr.h, STARPU_MAIN_RAM, (uintptr_t)s->fr.buf,
				    (uint32_t)(pl->nspec * rowlen), sizeof(float));
	struct starpu_data_filter filt = { .filter_func = starpu_vector_filter_list,
					   .nchildren = (unsigned)nsub,
					   .filter_arg_ptr = lens };
	starpu_data_partition(s->fr.h, &filt);
	s->partitioned = 1;
	free(lens);

	sp_taskctx_t *sctx = sp_item_taskctx(item, st, "desi_spots");
	sp_taskctx_t *ectx = sp_item_taskctx(item, st, "desi_extract");
	if (sctx == NULL || ectx == NULL)
		return SP_ENOMEM;
	int np = desi_psf_nparams(psf), sy = 2 * psf->hsizey + 1, sx = 2 * psf->hsizex + 1;
	double *fullwave = malloc((size_t)pl->nfullwave * sizeof *fullwave);
	if (fullwave == NULL)
		return SP_ENOMEM;
	for (int i = 0; i < pl->nfullwave; i++)
		fullwave[i] = desi_plan_fullwave(pl, i);

	int window = spots_window(), isub = 0, ret = 0;
	for (int b = 0; b < s->nbundles && ret == 0 && !sp_status_failed(status); b++) {
		struct desi_bundle *bu = &s->bundles[b];
		size_t nspot = (size_t)bu->ns * pl->nfullwave;
		if (b >= window)
			release_bundle(&s->bundles[b - window]);
		if (starpu_malloc((void **)&bu->params, nspot * np * sizeof(double)) != 0) {
			ret = sp_status_set(status, SP_ENOMEM, "%s: out of memory", iv->path);
			break;
		}
		desi_psf_params(psf, bu->s0, bu->ns, fullwave, pl->nfullwave, bu->params);
		starpu_vector_data_register(&bu->hparams, STARPU_MAIN_RAM, (uintptr_t)bu->params,
					    (uint32_t)(nspot * np), sizeof(double));
		starpu_vector_data_register(&bu->hspots, -1, 0, (uint32_t)(nspot * sy * sx), sizeof(double));
		starpu_vector_data_register(&bu->hxc, -1, 0, (uint32_t)nspot, sizeof(int32_t));
		starpu_vector_data_register(&bu->hyc, -1, 0, (uint32_t)nspot, sizeof(int32_t));
		s->spot_args[b] = (struct desi_spots_arg){ sctx,
			{ psf->hsizex, psf->hsizey, psf->ghdegx, psf->ghdegy }, nspot };
		sp_taskctx_submitting(sctx);
		ret = starpu_task_insert(&spots_cl, STARPU_R, bu->hparams, STARPU_W, bu->hspots, STARPU_W,
					 bu->hxc, STARPU_W, bu->hyc, STARPU_CL_ARGS_NFREE, &s->spot_args[b],
					 sizeof s->spot_args[b], SP_TASK_ARGS(sctx), 0);
		int nk = pl->nsubbundles < bu->ns ? pl->nsubbundles : bu->ns;
		for (int k = 0; k < nk && ret == 0; k++, isub++) {
			struct desi_sub_arg *sa = &s->subs[isub];
			*sa = (struct desi_sub_arg){ .ctx = ectx, .bundle = bu, .k = k };
			if (plan_subbundle(sa, pl, psf, bu, np, iv->img.ny, iv->img.nx, regularize,
					   psferr) != 0) {
				ret = SP_ENOMEM;
				break;
			}
			sp_taskctx_submitting(ectx);
			ret = starpu_task_insert(&sub_cl, STARPU_R, bu->hspots, STARPU_R, bu->hxc, STARPU_R,
						 bu->hyc, STARPU_R, iv->pix, STARPU_R, iv->ivar, STARPU_W,
						 starpu_data_get_sub_data(s->fr.h, 1, isub),
						 STARPU_CL_ARGS_NFREE, sa, sizeof *sa, SP_TASK_ARGS(ectx), 0);
		}
	}
	free(fullwave);
	if (ret != 0)
		return sp_status_set(status, SP_ESTARPU, "%s: task submission failed (%d)", iv->path, ret);
	/* Gather the partition back (waits for the subbundle tasks) so that
	 * the write stage sees one stitched frame. */
	starpu_data_unpartition(s->fr.h, STARPU_MAIN_RAM);
	s->partitioned = 0;
	for (int b = 0; b < s->nbundles; b++)
		release_bundle(&s->bundles[b]);
	sp_item_report_num(item, "patches", (double)s->nsubs * pl->npatch_wave);
	return 0;
}

static const sp_param_spec_t extract_params[] = {
	{ "wmin", SP_PT_FLOAT, NULL, 1000, 20000, NULL, "first wavelength of the output grid (A)" },
	{ "wmax", SP_PT_FLOAT, NULL, 1000, 20000, NULL, "last wavelength of the grid, inclusive (A)" },
	{ "dw", SP_PT_FLOAT, "0.8", 0.01, 100, NULL, "wavelength step (A)" },
	{ "specmin", SP_PT_INT, "0", 0, 10000, NULL, "first spectrum (fibre) to extract" },
	{ "nspec", SP_PT_INT, "500", 1, 10000, NULL, "number of spectra" },
	{ "bundlesize", SP_PT_INT, "25", 1, 1000, NULL, "fibres per bundle" },
	{ "nsubbundles", SP_PT_INT, "5", 1, 1000, NULL, "subbundles per bundle" },
	{ "nwavestep", SP_PT_INT, "50", 1, 10000, NULL, "core wavelengths per patch" },
	{ "wavepad", SP_PT_INT, "10", 0, 1000, NULL, "padding wavelengths each side (before wavepad_frac)" },
	{ "wavepad_frac", SP_PT_FLOAT, "0.2", 0, 10, NULL, "extra padding as a fraction of wavepad" },
	{ "pixpad_frac", SP_PT_FLOAT, "0.8", 0, 1, NULL, "fraction of the padding rows in the pixel window" },
	{ "regularize", SP_PT_FLOAT, "0", 0, 1e10, NULL, "Tikhonov regularisation added to every bin" },
	{ "psferr", SP_PT_FLOAT, "0", 0, 1, NULL, "PSF model error for chi2pix; 0: the PSF's PSFERR (0.01)" },
};
static const sp_port_spec_t extract_inputs[] = {
	{ "psf", "desi.psf", "the PSF" },
	{ "image", "desi.image", "the pre-processed image" },
};
static const sp_port_spec_t extract_outputs[] = {
	{ "frame", "desi.frame", "extracted spectra, resolution, chi2pix, stitched" },
};

const sp_stage_kind_t sp_desi_extract_kind = {
	.name = "desi.extract",
	.help = "Spectro-perfectionism extraction: spots, patches, decorrelation, stitching",
	SP_KIND_PARAMS(extract_params),
	SP_KIND_INPUTS(extract_inputs),
	SP_KIND_OUTPUTS(extract_outputs),
	.impl = SP_IMPL_CPU_CUDA,
	.run = extract_run,
};
