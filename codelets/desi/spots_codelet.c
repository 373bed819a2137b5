/* StarPU glue of desi.spots: the patches' geometry and a bundle's Gauss-Hermite spots per task. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "runtime.h"
#include "sizes.h"
#include "stage.h"
#include "barycorr.h"
#include "desi_job.h"
#include "fitskey.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

static void spots_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_spots_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	desi_spots_cpu((const double *)STARPU_VECTOR_GET_PTR(buffers[0]), a->n, a->shape,
		       (double *)STARPU_VECTOR_GET_PTR(buffers[1]),
		       (int32_t *)STARPU_VECTOR_GET_PTR(buffers[2]),
		       (int32_t *)STARPU_VECTOR_GET_PTR(buffers[3]));
	if (sp_cancel_requested()) /* it may have stopped early: the spots are partial */
		sp_status_set(a->ctx->status, SP_ECANCELED, "%s: cancelled", a->ctx->kernel);
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
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: %s", a->ctx->kernel,
			      sp_cuda_last_error());
}
#endif

SP_CODELET(spots_cl, "desi_spots", spots_cpu, SP_CUDA(spots_cuda), NULL, NULL, 4, STARPU_R, STARPU_W,
	   STARPU_W, STARPU_W);

/* The geometry of a subbundle's patches, from the corners of its spots,
 * computed from the trace positions in its bundle's spot parameters. */
static int plan_subbundle(struct desi_job *j, struct desi_sub *su, const double *params, int ns)
{
	const desi_plan_t *pl = &j->plan;
	const desi_psf_t *psf = j->psf;
	int c0, nc, f0, nf;
	int sy = 2 * psf->hsizey + 1, sx = 2 * psf->hsizex + 1;
	int nwp = pl->nwavestep + 2 * pl->wavepad, npw = pl->npatch_wave;
	int32_t *xc = malloc((size_t)desi__nf_max(pl) * nwp * sizeof *xc);
	int32_t *yc = malloc((size_t)desi__nf_max(pl) * nwp * sizeof *yc);

	su->geom = malloc(6 * (size_t)npw * sizeof *su->geom);
	if (xc == NULL || yc == NULL || su->geom == NULL) {
		free(xc);
		free(yc);
		return -1;
	}
	desi_plan_subbundle(pl, ns, su->k, &c0, &nc, &f0, &nf);
	int *ymin = su->geom, *ny = ymin + npw, *xmin = ny + npw, *nx = xmin + npw, *w0 = nx + npw,
	    *cnw = w0 + npw;
	for (int pw = 0; pw < npw; pw++) {
		w0[pw] = pw * pl->nwavestep;
		cnw[pw] = pl->nwave - w0[pw] < pl->nwavestep ? pl->nwave - w0[pw] : pl->nwavestep;
		for (int f = 0; f < nf; f++)
			for (int w = 0; w < nwp; w++) {
				const double *q = params + ((size_t)(f0 + f) * pl->nfullwave + w0[pw] + w) * j->npar;
				xc[f * nwp + w] = desi_spot_corner(q[0], psf->hsizex);
				yc[f * nwp + w] = desi_spot_corner(q[1], psf->hsizey);
			}
		desi_plan_window(pl, xc, yc, nf, nwp, pl->wavepad, cnw[pw], sy, sx, j->iv->img.ny,
				 j->iv->img.nx, &ymin[pw], &ny[pw], &xmin[pw], &nx[pw]);
	}
	free(xc);
	free(yc);
	su->batch = (desi_batch_t){
		.p = { .nfib = nf, .nwave = nwp, .sy = sy, .sx = sx, .core_f0 = c0 - f0, .core_nf = nc,
		       .core_w0 = pl->wavepad, .core_nw = pl->nwavestep, .ndiag = DESI_NDIAG,
		       .regularize = j->regularize, .psferr = j->psferr },
		.np = npw, .ymin = ymin, .ny = ny, .xmin = xmin, .nx = nx, .w0 = w0, .core_nw = cnw,
		.fib0 = f0, .nfullwave = pl->nfullwave, .npix_y = j->iv->img.ny,
		.npix_x = j->iv->img.nx, .nwave_grid = pl->nwave,
		.nfield = DESI_NFIELD + (j->model ? 1 : 0), .col0 = 0, .xflux = j->model,
		.dw = pl->dw,
	};
	return 0;
}

/* Spots of bundles in flight: enough to keep every worker busy, few enough
 * to bound memory (each ~90 MB). */
static int spots_window(const sp_item_t *item)
{
	return (int)sp_item_nworkers(item) / 5 + 2;
}

/* The most patches an item may have (subbundles x patches along the
 * grid): 3,500 times a full r frame's 4,700 (chunk and task counts stay
 * well inside an int). */
#define DESI_MAX_PATCHES (1 << 24)

/* The buffers of the job's plan and PSF, in size_t with checked products,
 * each registered as a StarPU vector (at most SP_VECTOR_MAX_NX elements):
 * the frame, a bundle's spots, corners and Legendre sums; and the patch
 * count.  Returns 0, or -1 with a one-line reason naming the parameters in
 * msg. */
static int job_sizes_check(const struct desi_job *j, const char *path, char *msg, size_t len)
{
	const desi_plan_t *pl = &j->plan;
	const size_t spix = (size_t)(2 * j->psf->hsizey + 1) * (size_t)(2 * j->psf->hsizex + 1);
	size_t frame, nspot, spots, params, npatch;
	const int nsub = pl->nsubbundles < pl->bundlesize ? pl->nsubbundles : pl->bundlesize;
	if (sp_mul3_size((size_t)pl->nspec, DESI_NFIELD, (size_t)pl->nwave, &frame) ||
	    !sp_vector_nx_ok(frame)) {
		snprintf(msg, len,
			 "%s: nspec %d x %d grid wavelengths (dw %g) x %d fields make a frame of %.3g "
			 "values, more than the %zu a StarPU vector holds; lower nspec or raise dw",
			 path, pl->nspec, pl->nwave, pl->dw, DESI_NFIELD,
			 (double)pl->nspec * pl->nwave * DESI_NFIELD, SP_VECTOR_MAX_NX);
		return -1;
	}
	if (sp_mul_size((size_t)pl->bundlesize, (size_t)pl->nfullwave, &nspot) ||
	    sp_mul_size(nspot, spix, &spots) || !sp_vector_nx_ok(spots) ||
	    sp_mul_size(nspot, (size_t)desi_psf_nparams(j->psf), &params) ||
	    !sp_vector_nx_ok(params)) {
		snprintf(msg, len,
			 "%s: bundlesize %d x %d padded wavelengths (the grid's %d, nwavestep %d and "
			 "the padding) x %zu spot pixels make a bundle's spots %.3g values, more than "
			 "the %zu a StarPU vector holds; lower bundlesize or raise dw",
			 path, pl->bundlesize, pl->nfullwave, pl->nwave, pl->nwavestep, spix,
			 (double)pl->bundlesize * pl->nfullwave * (double)spix, SP_VECTOR_MAX_NX);
		return -1;
	}
	if (sp_mul3_size((size_t)pl->nbundles, (size_t)nsub, (size_t)pl->npatch_wave, &npatch) ||
	    npatch > DESI_MAX_PATCHES) {
		snprintf(msg, len,
			 "%s: nwavestep %d on a grid of %d wavelengths (dw %g) makes %.3g patches "
			 "(at most %d); raise nwavestep or dw",
			 path, pl->nwavestep, pl->nwave, pl->dw,
			 (double)pl->nbundles * nsub * pl->npatch_wave, DESI_MAX_PATCHES);
		return -1;
	}
	return 0;
}

static int spots_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	const desi_psf_val_t *pv = (const desi_psf_val_t *)in[0];
	const desi_image_val_t *iv = (const desi_image_val_t *)in[1];
	const desi_psf_t *psf = pv->psf;
	struct desi_job *j = desi__job_new();
	char msg[256];

	if (j == NULL || sp_job_val(&j->base, "desi.spots", out) != 0) {
		free(j);
		return SP_ENOMEM;
	}
	j->psf = psf;
	j->psf_path = pv->path;
	j->iv = iv;

	const struct spots_params *sp = st->typed;
	desi_plan_t *pl = &j->plan;
	/* The default grid: the image's camera's arm grid (desi_proc's), within
	 * the wavelengths every fibre's trace has on the CCD; without a CAMERA
	 * keyword naming an arm, those wavelengths rounded inwards to whole
	 * Angstroms (desispec's default).  A header that cannot be read here
	 * fails the image's own read. */
	double wmin = sp->wmin, wmax = sp->wmax, dw = sp->dw, bary = 1;
	char camera[72] = "";
	sp_err_t cerr = { 0 };
	if ((wmin == 0 || wmax == 0) &&
	    desi_header_value(iv->path, "CAMERA", camera, sizeof camera, &cerr) != 0)
		camera[0] = '\0';
	if (desi_psf_default_grid(psf, camera, dw, &wmin, &wmax) != 0)
		return sp_status_set(status, SP_EINVAL,
				     "%s: cannot invert the PSF's YTRACE to find its wavelength range; "
				     "set wmin and wmax", pv->path);
	/* desispec --barycentric-correction: extract on the grid divided by
	 * the factor, label the result with the grid itself (wave *= factor),
	 * the spectra untouched. */
	if (sp->barycentric_correction) {
		double ra, dec, mjd;
		sp_err_t err = { 0 };
		if (desi_image_sky(iv->path, &ra, &dec, &mjd, &err) != 0)
			return sp_status_set_err(status, &err);
		if (desi_barycentric_factor(ra, dec, mjd, &bary) != 0)
			return sp_status_set(status, SP_EINVAL,
					     "%s: no barycentric correction for RA %g, DEC %g, MJD %g",
					     iv->path, ra, dec, mjd);
		wmin /= bary;
		wmax /= bary;
		dw /= bary;
		j->heliocor = bary;
	}
	if (desi_plan_init(pl, wmin, wmax, dw, (int)sp->specmin, (int)sp->nspec,
			   (int)sp->bundlesize, (int)sp->nsubbundles, (int)sp->nwavestep,
			   (int)sp->wavepad, sp->wavepad_frac, sp->pixpad_frac, msg, sizeof msg) != 0)
		return sp_status_set(status, SP_EINVAL, "%s: %s", iv->path, msg);
	if (desi_plan_check_patch((int)sp->nspec, (int)sp->bundlesize, (int)sp->nsubbundles,
				  (int)sp->nwavestep, (int)sp->wavepad, sp->wavepad_frac, NULL, msg,
				  sizeof msg) != 0)
		return sp_status_set(status, SP_EINVAL, "%s: %s", iv->path, msg);
	if (pl->specmin + pl->nspec > psf->nfib)
		return sp_status_set(status, SP_EINVAL, "%s: spectra %d..%d requested but the PSF has %d fibres",
				     pv->path, pl->specmin, pl->specmin + pl->nspec - 1, psf->nfib);
	/* The padding may extrapolate the PSF (as the reference does); the grid may not. */
	if (pl->wmin < psf->wmin || pl->wmax > psf->wmax)
		return sp_status_set(status, SP_EINVAL,
				     "%s: wavelengths %g..%g are outside the PSF's range %g..%g",
				     pv->path, pl->wmin, pl->wmax, psf->wmin, psf->wmax);

	if (job_sizes_check(j, iv->path, msg, sizeof msg) != 0)
		return sp_status_set(status, SP_EINVAL, "%s", msg);

	/* The subbundles, and the frame buffer partitioned by subbundle. */
	size_t rowlen = (size_t)DESI_NFIELD * pl->nwave;
	j->sub0 = calloc((size_t)pl->nbundles + 1, sizeof *j->sub0);
	j->subs = calloc((size_t)pl->nbundles * pl->nsubbundles, sizeof *j->subs);
	uint32_t *lens = calloc((size_t)pl->nbundles * pl->nsubbundles, sizeof *lens);
	j->wave = malloc((size_t)pl->nwave * sizeof *j->wave);
	j->fullwave = malloc((size_t)pl->nfullwave * sizeof *j->fullwave);
	int win = sp->spot_slots > 0 ? (int)sp->spot_slots : spots_window(item);
	j->nslots = win < pl->nbundles ? win : pl->nbundles;
	j->slots = calloc((size_t)j->nslots, sizeof *j->slots);
	if (!j->sub0 || !j->subs || !lens || !j->wave || !j->fullwave || !j->slots) {
		free(lens);
		return SP_ENOMEM;
	}
	for (int b = 0; b < pl->nbundles; b++) {
		int s0, ns;
		desi_plan_bundle(pl, b, &s0, &ns);
		int nk = pl->nsubbundles < ns ? pl->nsubbundles : ns;
		j->sub0[b] = j->nsubs;
		for (int k = 0; k < nk; k++) {
			int c0, nc, f0, nf;
			desi_plan_subbundle(pl, ns, k, &c0, &nc, &f0, &nf);
			j->subs[j->nsubs] = (struct desi_sub){ .bundle = b, .k = k };
			lens[j->nsubs++] = (uint32_t)(nc * rowlen);
		}
	}
	j->sub0[pl->nbundles] = j->nsubs;
	for (int w = 0; w < pl->nwave; w++)
		j->wave[w] = (pl->wmin + pl->dw * w) * bary;
	for (int i = 0; i < pl->nfullwave; i++)
		j->fullwave[i] = desi_plan_fullwave(pl, i);
	j->buf_bytes = (size_t)pl->nspec * rowlen * sizeof(float);
	if (sp_item_buffer_get((void **)&j->buf, j->buf_bytes) != 0) {
		j->buf = NULL;
		free(lens);
		return sp_status_set(status, SP_ENOMEM, "%s: cannot allocate the frame", iv->path);
	}
	memset(j->buf, 0, j->buf_bytes);
	starpu_vector_data_register(&j->hframe, STARPU_MAIN_RAM, (uintptr_t)j->buf,
				    (uint32_t)(pl->nspec * rowlen), sizeof(float));
	j->parts = calloc((size_t)j->nsubs, sizeof *j->parts);
	if (j->parts == NULL) {
		free(lens);
		return SP_ENOMEM;
	}
	struct starpu_data_filter filt = { .filter_func = starpu_vector_filter_list,
					   .nchildren = (unsigned)j->nsubs,
					   .filter_arg_ptr = lens };
	starpu_data_partition_plan(j->hframe, &filt, j->parts);
	free(lens);
	starpu_data_partition_submit(j->hframe, (unsigned)j->nsubs, j->parts);
	j->partitioned = 1;

	/* The pool of bundle slots, each for the largest bundle: made by
	 * spots_tile() when its first bundle is planned (their parameter
	 * buffers are pinned, which is slow: made together, before the first
	 * task, they delay a frame's start on a GPU node with many workers). */
	j->npar = desi_psf_nparams(psf);
	j->ctx_spots = sp_item_taskctx(item, st, "desi_spots");
	return j->ctx_spots == NULL ? SP_ENOMEM : 0;
}

/* Makes slot sl (its handles) and the Legendre-sum buffer if they are not
 * made yet. */
static int slot_make(const sp_item_t *item, struct desi_job *j, struct desi_slot *sl)
{
	const desi_plan_t *pl = &j->plan;
	int sy = 2 * j->psf->hsizey + 1, sx = 2 * j->psf->hsizex + 1;
	size_t nspot = (size_t)pl->bundlesize * pl->nfullwave;
	if (j->hparams == NULL) {
		/* from the item buffer pool: each bundle writes its Legendre
		 * sums before its spots task reads them */
		j->params_bytes = nspot * j->npar * sizeof(double);
		if (j->params == NULL && sp_item_buffer_get((void **)&j->params, j->params_bytes) != 0) {
			j->params = NULL;
			return -1;
		}
		starpu_vector_data_register(&j->hparams, STARPU_MAIN_RAM, (uintptr_t)j->params,
					    (uint32_t)(nspot * j->npar), sizeof(double));
	}
	if (sl->hspots != NULL)
		return 0;
	if (sl->arg == NULL && (sl->arg = calloc(1, sizeof *sl->arg)) == NULL)
		return -1;
	/* where the spots task runs (the CPU lane: memory of their own) */
	if (sp_item_vector_register(item, &sl->hspots, nspot * (size_t)(sy * sx), sizeof(double)) != 0 ||
	    sp_item_vector_register(item, &sl->hxc, nspot, sizeof(int32_t)) != 0 ||
	    sp_item_vector_register(item, &sl->hyc, nspot, sizeof(int32_t)) != 0) {
		sp_item_data_unregister(sl->hspots);
		sp_item_data_unregister(sl->hxc);
		sl->hspots = sl->hxc = sl->hyc = NULL;
		return -1;
	}
	return 0;
}

/* At the first subbundle t of a bundle: the bundle's Legendre sums (once
 * the slot's previous spots task is done), its subbundles' patch windows,
 * its spots task. */
static int spots_tile(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		      sp_value_t *out, int ts)
{
	struct desi_job *j = desi__job(out);
	const desi_plan_t *pl = &j->plan;
	(void)st;
	(void)in;
	if (ts >= j->nsubs)
		return SP_TILE_END;
	j->tiles_started = 1;
	int t = j->subs[ts].bundle;
	if (j->sub0[t] != ts)
		return 0;
	struct desi_slot *sl = &j->slots[t % j->nslots];
	int s0, ns;
	desi_plan_bundle(pl, t, &s0, &ns);
	if (slot_make(item, j, sl) != 0)
		return sp_status_set(sp_item_status(item), SP_ENOMEM, "%s: out of memory", j->iv->path);
	/* after the previous bundle's spots task has read its sums */
	starpu_data_acquire(j->hparams, STARPU_W);
	/* the driver thread's own work: starpipe-sim charges its time */
	sp_hostwork_t hw;
	sp_hostwork_begin(&hw, "desi.plan_bundle");
	desi_psf_params(j->psf, s0, ns, j->fullwave, pl->nfullwave, j->params);
	int rc = 0;
	for (int s = j->sub0[t]; s < j->sub0[t + 1] && rc == 0; s++)
		rc = plan_subbundle(j, &j->subs[s], j->params, ns);
	sp_hostwork_end(&hw);
	starpu_data_release(j->hparams);
	if (rc != 0)
		return sp_status_set(sp_item_status(item), SP_ENOMEM, "%s: out of memory", j->iv->path);
	*sl->arg = (struct desi_spots_arg){ j->ctx_spots, desi_psf_shape(j->psf),
					    (size_t)ns * pl->nfullwave };
	const desi_spot_shape_t sh = desi_psf_shape(j->psf);
	const double flops = desi_spots_flops(2 * sh.hsizex + 1, 2 * sh.hsizey + 1, sh.ghdegx,
					      sh.ghdegy, (size_t)ns * pl->nfullwave);
	return sp_task_insert(j->ctx_spots, &spots_cl, STARPU_R, j->hparams, STARPU_W, sl->hspots,
			      STARPU_W, sl->hxc, STARPU_W, sl->hyc, STARPU_FLOPS, flops,
			      STARPU_CL_ARGS_NFREE, sl->arg, sizeof *sl->arg);
}

#define SPOT(f) SP_AT(struct spots_params, f)
static const sp_param_spec_t spots_params[] = {
	{ "wmin", SP_PT_FLOAT, "0", 0, 20000, NULL,
	  "first wavelength of the output grid (A); 0: ceil of the PSF's wmin_all, as desispec",
	  SPOT(wmin) },
	{ "wmax", SP_PT_FLOAT, "0", 0, 20000, NULL,
	  "last wavelength of the grid, inclusive (A); 0: floor of the PSF's wmax_all, as desispec",
	  SPOT(wmax) },
	{ "dw", SP_PT_FLOAT, "0.8", 0.01, 100, NULL, "wavelength step (A)", SPOT(dw) },
	{ "barycentric_correction", SP_PT_BOOL, "false", 0, -1, NULL,
	  "desispec --barycentric-correction: extract on the grid / HELIOCOR (from the image "
	  "header's RA, DEC and MJD), write the grid itself", SPOT(barycentric_correction) },
	{ "specmin", SP_PT_INT, "0", 0, 10000, NULL, "first spectrum (fibre) to extract",
	  SPOT(specmin) },
	{ "nspec", SP_PT_INT, "500", 1, 10000, NULL, "number of spectra", SPOT(nspec) },
	{ "bundlesize", SP_PT_INT, "25", 1, 1000, NULL, "fibres per bundle", SPOT(bundlesize) },
	{ "nsubbundles", SP_PT_INT, "5", 1, 1000, NULL,
	  "subbundles per bundle (a patch's fibres: a subbundle and a neighbour each side)",
	  SPOT(nsubbundles) },
	{ "nwavestep", SP_PT_INT, "50", 1, 10000, NULL,
	  "core wavelengths per patch; a patch, fibres x (nwavestep + 2 padding), is bounded to "
	  "about 1 s of decorrelation on one core and 4096 unknowns: at most 500 with 7 fibres a "
	  "patch, else the item fails naming it (doc/desi.md)", SPOT(nwavestep) },
	{ "wavepad", SP_PT_INT, "10", 0, 1000, NULL,
	  "padding wavelengths each side (before wavepad_frac); they count in the patch's bound "
	  "(nwavestep)", SPOT(wavepad) },
	{ "wavepad_frac", SP_PT_FLOAT, "0.2", 0, 10, NULL, "extra padding as a fraction of wavepad",
	  SPOT(wavepad_frac) },
	{ "pixpad_frac", SP_PT_FLOAT, "0.8", 0, 1, NULL, "fraction of the padding rows in the pixel window",
	  SPOT(pixpad_frac) },
	{ "spot_slots", SP_PT_INT, "0", 0, 1000, NULL,
	  "bundles whose spots are held at once (~90 MB each for an r frame); 0: nworkers/5 + 2; "
	  "1 saves memory, and the next bundle's spots then wait for the previous bundle's tasks",
	  SPOT(spot_slots) },
};
#undef SPOT

static const sp_port_spec_t spots_inputs[] = {
	{ "psf", "desi.psf", "the PSF" },
	{ "image", "desi.image", "the pre-processed image" },
};
static const sp_port_spec_t spots_outputs[] = {
	{ "spots", "desi.spots", "the patches' geometry and every bundle's spots" },
};

/* Estimates made before the PSF is read take an r camera's spots: 11 x 17
 * pixels and 4 + 7 x 7 parameters each (hsize 5, 8; Gauss-Hermite degrees
 * 6, 6). */
#define EST_SPOT_PIXELS (11.0 * 17.0)
#define EST_NPAR (4.0 + 7.0 * 7.0)

/* Refuses a decomposition whose patches are too large (desi_plan_check_patch(),
 * before anything runs: the item fails with the message), and adds what the
 * parameters grow: the frame on disk (FLUX, IVAR, MASK, CHI2PIX and 2 ndiag + 1
 * RESOLUTION diagonals, 4 bytes each per spectrum and bin: sp_estimate_t's
 * out_bytes) and in memory, the spot slots (spot_slots bundles of spots and
 * corners over the padded axis, nwave + nwavestep + 2 wavepad) and one
 * bundle's Legendre sums.  The normal equations are desi.patch's. */
static int spots_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e, sp_err_t *err)
{
	const struct spots_params *sp = st->typed;
	char msg[320];
	if (desi_plan_check_patch((int)sp->nspec, (int)sp->bundlesize, (int)sp->nsubbundles,
				  (int)sp->nwavestep, (int)sp->wavepad, sp->wavepad_frac, NULL, msg,
				  sizeof msg) != 0)
		return sp_seterr(err, SP_EINVAL, "%s: %s", sp_item_path(item), msg);
	const double nwave = desi__est_nwave(sp, e);
	const double nfull = nwave + (double)sp->nwavestep +
			     2.0 * (double)desi_plan_wavepad((int)sp->wavepad, sp->wavepad_frac);
	const double ns = (double)(sp->bundlesize < sp->nspec ? sp->bundlesize : sp->nspec);
	const double nbundles = ceil((double)sp->nspec / (double)sp->bundlesize);
	double slots = sp->spot_slots > 0 ? (double)sp->spot_slots : (double)spots_window(item);
	slots = slots < nbundles ? slots : nbundles;
	const double frame = (double)sp->nspec * nwave * 4.0 * DESI_NFIELD;
	e->out_bytes += (unsigned long long)frame;
	e->bytes += (unsigned long long)(frame + slots * ns * nfull * (EST_SPOT_PIXELS * 8.0 + 8.0) +
					 ns * nfull * EST_NPAR * 8.0);
	return 0;
}

const sp_stage_kind_t sp_desi_spots_kind = {
	.name = "desi.spots",
	.estimate = spots_estimate,
	.help = "DESI: patch geometry and Gauss-Hermite spots of every fibre, a bundle per task",
	SP_KIND_PARAMS(spots_params, struct spots_params),
	SP_KIND_INPUTS(spots_inputs),
	SP_KIND_OUTPUTS(spots_outputs),
	.impl = SP_IMPL_CPU_CUDA,
	.codelets = "desi_spots",
	.run = spots_run,
	.run_tile = spots_tile,
};
