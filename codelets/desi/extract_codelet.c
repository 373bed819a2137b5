/* StarPU glue of the DESI extraction stages: desi.spots, desi.patch, desi.decorrelate, desi.stitch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "runtime.h"
#include "sizes.h"
#include "stage.h"
#include "barycorr.h"
#include "desi_glue.h"
#include "extract.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

/*
 * DESIGN: four graph stages share one job per image and are submitted tile
 * by tile, a tile being a subbundle of fibres (sp_stage_tile_fn): tile t of
 * spots, patch, decorrelate and stitch, then tile t + 1.
 *
 *   desi.spots        per bundle, the driver evaluates the Legendre sums of
 *                     every fibre at every padded wavelength (cheap) and
 *                     plans the patches' pixel windows from them; one task
 *                     (CPU or CUDA) integrates the Gauss-Hermite spots.
 *   desi.patch        per chunk of a subbundle's patches (`tile:` patches),
 *                     one task builds the normal equations A'NA, A'Np, A'N1.
 *   desi.decorrelate  per chunk, one task solves, decorrelates (resolution
 *                     matrix, ivar, Rdiags) and computes chi2pix and
 *                     pixmask_fraction into the chunk's rows.
 *   desi.stitch       per chunk, a CPU task copies its rows into its
 *                     subbundle's rows of the frame (a partition of it);
 *                     the last tile gathers the partition, asynchronously.
 *   desi.model        with model=true (its run(), before any tile, asks
 *                     for it), the rows also carry the deconvolved flux and
 *                     a CPU task per chunk adds the chunk's spots times it
 *                     into the model image; the last writes the image's
 *                     file.  The chunk's rows go when the last of the
 *                     stages reading them (stitch, model) has submitted
 *                     its task (rows_release()).  These tasks all write that one
 *                     image (RW), so StarPU runs them one after the other
 *                     in submission order, subbundle by subbundle and
 *                     along the wavelengths: the image is the same for any
 *                     number of workers and any `tile:` (extract.h,
 *                     desi_model_batch_cpu()).  They read the bundle's spots
 *                     before its slot is reused, as the patch tasks do.
 *
 * No stage waits for another: StarPU's implicit dependencies on the data
 * handles order a chunk's three tasks and let everything else overlap.
 * Memory is bounded by pools reused tile after tile: W bundle slots of
 * spots (~90 MB each) and K buffers of normal equations (~2 MB per patch);
 * the reuse of a slot or buffer is a write after the reads of an earlier
 * chunk, which StarPU orders because that chunk's reader was submitted
 * first: when a buffer is wanted again inside one subbundle, the patch
 * stage submits the earlier chunk's decorrelation itself (decor_submit()),
 * so the pool (normals_pool()) may be smaller than a subbundle's chunks.  The bundles' Legendre sums
 * (~29 MB) share one buffer: a spots task reads them once, at its start.
 * The only wait in the driver is for the previous bundle's spots task,
 * before that buffer is overwritten.
 */

/* A slot of the spots pool: one bundle's spots at a time. */
struct desi_slot {
	starpu_data_handle_t hspots, hxc, hyc;
	struct desi_spots_arg *arg;
};

struct desi_spots_arg {
	sp_taskctx_t *ctx;
	desi_spot_shape_t shape;
	size_t n;
};

/* A subbundle: its patches' geometry, planned when its bundle's tile is. */
struct desi_sub {
	desi_batch_t batch; /* every patch; points into geom */
	int *geom;          /* [6][npatch]: ymin, ny, xmin, nx, w0, core_nw */
	int bundle, k;      /* bundle, subbundle within it */
};

struct desi_chunk;
/* The argument of one task of a chunk: its stage's context and the chunk. */
struct desi_task_arg {
	sp_taskctx_t *ctx;
	struct desi_chunk *ch;
};

/* Patches [i0, i0 + batch.np) of a subbundle: one task of each stage. */
struct desi_chunk {
	desi_batch_t batch; /* rows: the chunk's own [core_nf][nfield][ncols] */
	struct desi_sub *sub;
	int isub;           /* the subbundle's index in the frame */
	int slot, normal;   /* spots slot, normal-equations buffer */
	size_t nrows;       /* floats of the chunk's rows */
	starpu_data_handle_t hrows;
	int readers;        /* stages still to submit a task reading hrows */
	int decor_done;     /* its decorrelation task was submitted */
	struct desi_task_arg a_patch, a_decor, a_stitch, a_model;
};

struct desi_job {
	int refs;
	desi_plan_t plan;
	const desi_psf_t *psf;
	const desi_image_val_t *iv;
	const char *psf_path;
	double heliocor; /* barycentric factor (barycentric_correction), 0: none */
	float *buf;   /* the frame [nspec][DESI_NFIELD][nwave], sp_item_buffer_get()'s */
	size_t buf_bytes;
	double *wave, *fullwave;
	starpu_data_handle_t hframe, *parts;
	int partitioned;
	int npar;     /* PSF parameters per spot */
	int nsubs;
	struct desi_sub *subs;
	int *sub0;    /* [nbundles + 1]: the bundles' first subbundles */
	struct desi_slot *slots;
	int nslots;
	double *params; /* [bundlesize][nfullwave][npar] Legendre sums, one bundle's at a
			 * time, sp_item_buffer_get()'s (params_bytes) */
	size_t params_bytes;
	starpu_data_handle_t hparams;
	struct desi_chunk *chunks;
	int nchunks, maxchunks;
	int *chunk0;  /* [nsubs + 1]: the subbundles' first chunks */
	starpu_data_handle_t *normals;
	int *normal_last; /* [nnormals] the last chunk given each buffer, -1: none */
	int nnormals, next_normal, chunk;
	double regularize, psferr;
	sp_taskctx_t *ctx_spots, *ctx_patch, *ctx_decor, *ctx_stitch, *ctx_model;
	int tiles_started; /* the first tile was submitted */
	int rows_readers;  /* stages reading the chunks' rows (desi.stitch, desi.model) */
	/* The 2-D model, when desi.model asks for it (model=true): [img.ny][img.nx],
	 * sp_item_buffer_get()'s */
	int model;
	float *model_img;
	size_t model_bytes;
	starpu_data_handle_t hmodel;
};

/* Port types "desi.spots", "desi.normal" and "desi.rows": the job, at the
 * stage that made it; "desi.frame" is desi_frame_val_t. */
typedef struct desi_job_val {
	sp_value_t base;
	struct desi_job *job;
} desi_job_val_t;

/* ---- codelets ---- */

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

/* The chunk's spots, corners and image, as the kernels take them: buffers
 * 0-4 of the patch and decorrelate tasks. */
#define CHUNK_INPUTS(buffers)                                             \
	(const double *)STARPU_VECTOR_GET_PTR((buffers)[0]),              \
		(const int32_t *)STARPU_VECTOR_GET_PTR((buffers)[1]),     \
		(const int32_t *)STARPU_VECTOR_GET_PTR((buffers)[2]),     \
		(const float *)STARPU_VECTOR_GET_PTR((buffers)[3]),       \
		(const float *)STARPU_VECTOR_GET_PTR((buffers)[4])

static void chunk_failed(const struct desi_task_arg *a, int code, const char *what)
{
	const struct desi_chunk *ch = a->ch;
	sp_status_set(a->ctx->status, code, "bundle %d subbundle %d, wavelengths from grid bin %d: %s",
		      ch->sub->bundle, ch->sub->k, ch->batch.w0[0], what);
}

static void patch_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	int rc = desi_patch_batch_cpu(&a->ch->batch, CHUNK_INPUTS(buffers),
				      (double *)STARPU_VECTOR_GET_PTR(buffers[5]));
	if (rc == DESI_CANCELLED)
		chunk_failed(a, SP_ECANCELED, "cancelled");
	else if (rc != 0)
		chunk_failed(a, SP_ENOMEM, "out of memory");
}

static void decorrelate_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	int bad = desi_decorrelate_batch_cpu(&a->ch->batch, CHUNK_INPUTS(buffers),
					     (const double *)STARPU_VECTOR_GET_PTR(buffers[5]),
					     (float *)STARPU_VECTOR_GET_PTR(buffers[6]));
	if (bad == DESI_CANCELLED)
		chunk_failed(a, SP_ECANCELED, "cancelled");
	else if (bad < 0)
		chunk_failed(a, SP_ENOMEM, "out of memory");
	else if (bad > 0)
		sp_status_set(a->ctx->status, SP_EINVAL,
			      "bundle %d subbundle %d, wavelengths from grid bin %d: the patch's normal "
			      "matrix is not positive definite",
			      a->ch->sub->bundle, a->ch->sub->k, a->ch->batch.w0[bad - 1]);
}

#ifdef SP_HAVE_CUDA
/* Stream-ordered scratch for a CUDA task, or NULL with the status set. */
static void *task_scratch(const struct desi_task_arg *a, size_t bytes, struct CUstream_st *stream)
{
	void *p = NULL;
	if (sp_cuda_malloc_async(&p, bytes, stream) != 0) {
		char what[96];
		snprintf(what, sizeof what, "cannot allocate %zu bytes of GPU scratch", bytes);
		chunk_failed(a, SP_ECUDA, what);
		return NULL;
	}
	return p;
}

static void patch_cuda(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	struct CUstream_st *stream = (struct CUstream_st *)starpu_cuda_get_local_stream();
	if (sp_status_failed(a->ctx->status))
		return;
	void *scratch = task_scratch(a, desi_patch_cuda_scratch(&a->ch->batch), stream);
	if (scratch == NULL)
		return;
	if (desi_patch_batch_cuda(&a->ch->batch, CHUNK_INPUTS(buffers),
				  (double *)STARPU_VECTOR_GET_PTR(buffers[5]), scratch, stream) != 0)
		chunk_failed(a, SP_ECUDA, sp_cuda_last_error());
	sp_cuda_free_async(scratch, stream);
}

static void decorrelate_cuda(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	struct CUstream_st *stream = (struct CUstream_st *)starpu_cuda_get_local_stream();
	void *blas, *solver;
	if (sp_status_failed(a->ctx->status))
		return;
	sp_cuda_handles(&blas, &solver);
	void *scratch = task_scratch(a, desi_decorrelate_cuda_scratch(&a->ch->batch), stream);
	if (scratch == NULL)
		return;
	if (desi_decorrelate_batch_cuda(&a->ch->batch, CHUNK_INPUTS(buffers),
					(double *)STARPU_VECTOR_GET_PTR(buffers[5]),
					(float *)STARPU_VECTOR_GET_PTR(buffers[6]), scratch, blas,
					solver, stream) != 0)
		chunk_failed(a, SP_ECUDA, sp_cuda_last_error());
	sp_cuda_free_async(scratch, stream);
}
#endif

/* Copies the chunk's rows into its columns of the subbundle's frame rows
 * (the frame's DESI_NFIELD fields: not the deconvolved flux). */
static void stitch_cpu(void *buffers[], void *cl_arg)
{
	const struct desi_task_arg *a = cl_arg;
	const desi_batch_t *b = &a->ch->batch;
	const float *src = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
	float *dst = (float *)STARPU_VECTOR_GET_PTR(buffers[1]);
	const size_t grid = (size_t)a->ch->sub->batch.nwave_grid;
	if (sp_status_failed(a->ctx->status))
		return;
	for (int f = 0; f < b->p.core_nf; f++)
		for (int k = 0; k < DESI_NFIELD; k++)
			memcpy(dst + ((size_t)f * DESI_NFIELD + k) * grid + b->col0,
			       src + ((size_t)f * b->nfield + k) * b->nwave_grid,
			       (size_t)b->nwave_grid * sizeof *dst);
}

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

/* Patch and decorrelate tasks of a chunk: what their cost follows, the
 * unknowns of a patch (fibres x padded wavelengths), its core fibres (the
 * decorrelation's selected inverse and blocks) and the patches; so that
 * the tasks of a footprint declare the same flops (extract.h). */
static uint32_t chunk_footprint(struct starpu_task *task)
{
	const desi_batch_t *b = &((const struct desi_task_arg *)task->cl_arg)->ch->batch;
	uint32_t h = starpu_hash_crc32c_be((uint32_t)b->p.nfib, 0);
	h = starpu_hash_crc32c_be((uint32_t)b->p.nwave, h);
	h = starpu_hash_crc32c_be((uint32_t)b->p.core_f0, h);
	h = starpu_hash_crc32c_be((uint32_t)b->p.core_nf, h);
	return starpu_hash_crc32c_be((uint32_t)b->np, h);
}

/* The size column of their models: the bytes the kernels move (extract.h),
 * not the whole image they window into. */
static size_t patch_size(struct starpu_task *task, unsigned nimpl)
{
	const struct desi_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)desi_patch_bytes(&a->ch->batch);
}

static size_t decorrelate_size(struct starpu_task *task, unsigned nimpl)
{
	const struct desi_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)desi_decorrelate_bytes(&a->ch->batch, a->ch->nrows);
}

SP_CODELET(spots_cl, "desi_spots", spots_cpu, SP_CUDA(spots_cuda), NULL, NULL, 4, STARPU_R, STARPU_W,
	   STARPU_W, STARPU_W);
SP_CODELET(patch_cl, "desi_patch", patch_cpu, SP_CUDA(patch_cuda), chunk_footprint, patch_size, 6,
	   STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_W);
/* RW normal: the CUDA twin factors the matrices in place. */
SP_CODELET(decor_cl, "desi_decorrelate", decorrelate_cpu, SP_CUDA(decorrelate_cuda),
	   chunk_footprint, decorrelate_size, 7, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_R, STARPU_RW,
	   STARPU_W);
/* Chunks of one subbundle write disjoint columns of its rows: any order. */
SP_CODELET(stitch_cl, "desi_stitch", stitch_cpu, SP_NO_CUDA, NULL, NULL, 2, STARPU_R,
	   STARPU_RW | STARPU_COMMUTE);
/* Rows, spots, xc, yc; the model image RW (not COMMUTE): in submission order. */
SP_CODELET(model_cl, "desi_model", model_cpu, SP_NO_CUDA, NULL, NULL, 5, STARPU_R, STARPU_R,
	   STARPU_R, STARPU_R, STARPU_RW);

/* ---- the job ---- */

static void job_unref(struct desi_job *j)
{
	if (j == NULL || --j->refs > 0)
		return;
	for (int c = 0; c < j->nchunks; c++)
		if (j->chunks[c].hrows != NULL)
			starpu_data_unregister(j->chunks[c].hrows);
	for (int k = 0; j->normals != NULL && k < j->nnormals; k++)
		if (j->normals[k] != NULL)
			sp_data_unregister(j->normals[k]);
	for (int s = 0; j->slots != NULL && s < j->nslots; s++) {
		struct desi_slot *sl = &j->slots[s];
		if (sl->hspots != NULL) {
			sp_data_unregister(sl->hspots);
			sp_data_unregister(sl->hxc);
			sp_data_unregister(sl->hyc);
		}
		free(sl->arg);
	}
	if (j->hparams != NULL)
		starpu_data_unregister(j->hparams);
	sp_item_buffer_put(j->params, j->params_bytes); /* to the next frame's bundles */
	if (j->hframe != NULL) {
		if (j->partitioned)
			starpu_data_unpartition_submit(j->hframe, (unsigned)j->nsubs, j->parts,
						       STARPU_MAIN_RAM);
		if (j->parts != NULL)
			starpu_data_partition_clean(j->hframe, (unsigned)j->nsubs, j->parts);
		starpu_data_unregister(j->hframe);
	}
	if (j->hmodel != NULL)
		starpu_data_unregister(j->hmodel);
	sp_item_buffer_put(j->model_img, j->model_bytes); /* (the image may be gone by now) */
	sp_item_buffer_put(j->buf, j->buf_bytes);
	for (int s = 0; j->subs != NULL && s < j->nsubs; s++)
		free(j->subs[s].geom);
	free(j->subs);
	free(j->sub0);
	free(j->slots);
	free(j->chunks);
	free(j->chunk0);
	free(j->normals);
	free(j->normal_last);
	free(j->parts);
	free(j->wave);
	free(j->fullwave);
	free(j);
}

static void job_val_free(sp_value_t *v)
{
	desi_job_val_t *jv = (desi_job_val_t *)v;
	job_unref(jv->job);
	free(jv);
}

static int job_val(struct desi_job *j, const char *type, sp_value_t **out)
{
	desi_job_val_t *jv = calloc(1, sizeof *jv);
	if (jv == NULL)
		return SP_ENOMEM;
	jv->base.type = type;
	jv->base.free_cb = job_val_free;
	jv->job = j;
	j->refs++;
	*out = &jv->base;
	return 0;
}

static struct desi_job *in_job(sp_value_t *const *in)
{
	return ((desi_job_val_t *)in[0])->job;
}

/* The stage's spots and image inputs (in[ispots], in[iimage]) must be the
 * ones the job was planned on: one item's, from the same stages. */
static int same_inputs(struct desi_job *j, sp_item_t *item, const sp_gstage_t *st,
		       sp_value_t *const *in, int ispots, int iimage)
{
	if ((ispots < 0 || ((desi_job_val_t *)in[ispots])->job == j) &&
	    (const desi_image_val_t *)in[iimage] == j->iv)
		return 0;
	return sp_status_set(sp_item_status(item), SP_EINVAL,
			     "%s: stage '%s' reads another image or other spots than its normal "
			     "equations were planned on (check its in: section)",
			     j->iv->path, st->name);
}

/* Most fibres in a patch: a subbundle and a neighbour each side. */
static int nf_max(const desi_plan_t *pl)
{
	return (pl->bundlesize + pl->nsubbundles - 1) / pl->nsubbundles + 2;
}

/* The geometry of a subbundle's patches, from the corners of its spots,
 * computed from the trace positions in its bundle's spot parameters. */
static int plan_subbundle(struct desi_job *j, struct desi_sub *su, const double *params, int ns)
{
	const desi_plan_t *pl = &j->plan;
	const desi_psf_t *psf = j->psf;
	int c0, nc, f0, nf;
	int sy = 2 * psf->hsizey + 1, sx = 2 * psf->hsizex + 1;
	int nwp = pl->nwavestep + 2 * pl->wavepad, npw = pl->npatch_wave;
	int32_t *xc = malloc((size_t)nf_max(pl) * nwp * sizeof *xc);
	int32_t *yc = malloc((size_t)nf_max(pl) * nwp * sizeof *yc);

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
static int spots_window(void)
{
	return (int)sp_item_nworkers() / 5 + 2;
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

/* ---- desi.spots ---- */

/* The stages' parameters, parsed once when the graph is loaded. */
struct spots_params {
	double wmin, wmax, dw, wavepad_frac, pixpad_frac;
	long long specmin, nspec, bundlesize, nsubbundles, nwavestep, wavepad, spot_slots;
	int barycentric_correction;
};
struct patch_params {
	double regularize;
};
struct decorrelate_params {
	double psferr;
};

static int spots_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	const desi_psf_val_t *pv = (const desi_psf_val_t *)in[0];
	const desi_image_val_t *iv = (const desi_image_val_t *)in[1];
	const desi_psf_t *psf = pv->psf;
	struct desi_job *j = calloc(1, sizeof *j);
	char msg[256];

	if (j == NULL || job_val(j, "desi.spots", out) != 0) {
		free(j);
		return SP_ENOMEM;
	}
	j->psf = psf;
	j->psf_path = pv->path;
	j->iv = iv;

	const struct spots_params *sp = st->typed;
	desi_plan_t *pl = &j->plan;
	/* desispec's default grid: the wavelengths every fibre's trace has on
	 * the CCD, rounded inwards to whole Angstroms. */
	double wmin = sp->wmin, wmax = sp->wmax, dw = sp->dw, bary = 1;
	if (desi_psf_default_grid(psf, &wmin, &wmax) != 0)
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
	int win = sp->spot_slots > 0 ? (int)sp->spot_slots : spots_window();
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
	 * spots_tile() when its first bundle is planned (their pinned
	 * parameter buffers take 0.65 ms per MiB: made together, before the
	 * first task, they delayed a frame's start by tens of ms on a GPU node
	 * with many workers). */
	j->npar = desi_psf_nparams(psf);
	j->ctx_spots = sp_item_taskctx(item, st, "desi_spots");
	return j->ctx_spots == NULL ? SP_ENOMEM : 0;
}

/* Makes slot sl (its handles) and the Legendre-sum buffer if they are not
 * made yet. */
static int slot_make(struct desi_job *j, struct desi_slot *sl)
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
	starpu_vector_data_register(&sl->hspots, -1, 0, (uint32_t)(nspot * sy * sx), sizeof(double));
	starpu_vector_data_register(&sl->hxc, -1, 0, (uint32_t)nspot, sizeof(int32_t));
	starpu_vector_data_register(&sl->hyc, -1, 0, (uint32_t)nspot, sizeof(int32_t));
	return 0;
}

/* At the first subbundle t of a bundle: the bundle's Legendre sums (once
 * the slot's previous spots task is done), its subbundles' patch windows,
 * its spots task. */
static int spots_tile(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		      sp_value_t *out, int ts)
{
	struct desi_job *j = ((desi_job_val_t *)out)->job;
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
	if (slot_make(j, sl) != 0)
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

/* The decorrelation task of chunk ch (desi.decorrelate's; patch_tile()
 * submits it early when ch's normal-equations buffer is wanted again). */
static int decor_submit(struct desi_job *j, struct desi_chunk *ch)
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

/* ---- desi.patch ---- */

/* Normal-equation buffers in the pool: two per worker, at least 4.  The
 * pool may be smaller than a subbundle's chunks: patch_tile() submits a
 * chunk's decorrelation itself when the chunk's buffer is wanted again
 * before decorrelate_tile() came to it. */
static int normals_pool(void)
{
	int k = 2 * (int)sp_item_nworkers();
	return k < 4 ? 4 : k;
}

static int patch_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	struct desi_job *j = in_job(in);
	const desi_plan_t *pl = &j->plan;

	if (job_val(j, "desi.normal", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(sp_item_status(item)) || same_inputs(j, item, st, in, -1, 1) != 0)
		return 0;
	j->regularize = ((const struct patch_params *)st->typed)->regularize;
	/* patches per task: a tile of the subbundle's, the whole subbundle
	 * when the run has GPUs (their batched solvers want many) */
	int per = st->tile > 0 ? st->tile : sp_runtime_ncuda_workers() > 0 ? pl->npatch_wave : 4;
	j->chunk = per < pl->npatch_wave ? per : pl->npatch_wave;
	/* a chunk's normal equations are one StarPU vector: at most
	 * SP_VECTOR_MAX_NX doubles (a default chunk is cut to fit) */
	const size_t n = (size_t)nf_max(pl) * (size_t)(pl->nwavestep + 2 * pl->wavepad);
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
	j->nnormals = normals_pool() < j->maxchunks ? normals_pool() : j->maxchunks;
	j->normals = calloc((size_t)j->nnormals, sizeof *j->normals);
	j->normal_last = malloc(sizeof *j->normal_last * (size_t)j->nnormals);
	for (int k = 0; j->normal_last != NULL && k < j->nnormals; k++)
		j->normal_last[k] = -1;
	j->ctx_patch = sp_item_taskctx(item, st, "desi_patch");
	if (!j->chunks || !j->chunk0 || !j->normals || !j->normal_last || !j->ctx_patch)
		return SP_ENOMEM;
	for (int k = 0; k < j->nnormals; k++)
		starpu_vector_data_register(&j->normals[k], -1, 0, (uint32_t)((size_t)j->chunk * per_patch),
					    sizeof(double));
	sp_item_report_num(item, "patches", (double)j->nsubs * pl->npatch_wave);
	return 0;
}

/* The chunks of subbundle t, and their patch tasks. */
static int patch_tile(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		      sp_value_t *out, int t)
{
	struct desi_job *j = ((desi_job_val_t *)out)->job;
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
			    (ret = decor_submit(j, &j->chunks[prev])) != 0)
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

/* ---- desi.decorrelate ---- */

static int decorrelate_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
			   sp_value_t **out)
{
	struct desi_job *j = in_job(in);

	if (job_val(j, "desi.rows", out) != 0)
		return SP_ENOMEM;
	if (same_inputs(j, item, st, in, 1, 2) != 0)
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
	struct desi_job *j = ((desi_job_val_t *)out)->job;
	int ret = 0;
	(void)item;
	(void)st;
	(void)in;
	for (int c = j->chunk0[t]; c < j->chunk0[t + 1] && ret == 0; c++)
		if (!j->chunks[c].decor_done)
			ret = decor_submit(j, &j->chunks[c]);
	return ret;
}

/* ---- desi.stitch ---- */

static void frame_free(sp_value_t *v)
{
	desi_frame_val_t *fr = (desi_frame_val_t *)v;
	job_unref(fr->job);
	free(fr);
}

static int stitch_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		      sp_value_t **out)
{
	struct desi_job *j = in_job(in);
	desi_frame_val_t *fr = calloc(1, sizeof *fr);

	if (fr == NULL)
		return SP_ENOMEM;
	fr->base.type = "desi.frame";
	fr->base.free_cb = frame_free;
	fr->job = j;
	j->refs++;
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

/* A stage reading a chunk's rows has submitted its task: the last one
 * unregisters them (StarPU frees them once the tasks reading them are done). */
static void rows_release(struct desi_chunk *ch)
{
	if (--ch->readers > 0)
		return;
	starpu_data_unregister_submit(ch->hrows);
	ch->hrows = NULL;
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
			rows_release(ch);
	}
	if (ret == 0 && t == j->nsubs - 1) {
		starpu_data_unpartition_submit(j->hframe, (unsigned)j->nsubs, j->parts,
					       STARPU_MAIN_RAM);
		j->partitioned = 0;
	}
	return ret;
}

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
	job_unref(m->job);
	free(m);
}

/* With model=true: the image allocated and the extraction told, before any
 * of its tiles, that its rows carry the deconvolved flux (desi_batch_t.xflux)
 * and that this stage reads them too. */
static int model_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	struct desi_job *j = in_job(in);
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
	j->refs++;
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
			rows_release(ch);
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

/* ---- the kinds ---- */

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
static const sp_param_spec_t patch_params[] = {
	{ "regularize", SP_PT_FLOAT, "0", 0, 1e10, NULL, "Tikhonov regularisation added to every bin",
	  SP_AT(struct patch_params, regularize) },
};
static const sp_param_spec_t decorrelate_params[] = {
	{ "psferr", SP_PT_FLOAT, "0", 0, 1, NULL, "PSF model error for chi2pix; 0: the PSF's PSFERR (0.01)",
	  SP_AT(struct decorrelate_params, psferr) },
};
static const sp_port_spec_t spots_inputs[] = {
	{ "psf", "desi.psf", "the PSF" },
	{ "image", "desi.image", "the pre-processed image" },
};
static const sp_port_spec_t spots_outputs[] = {
	{ "spots", "desi.spots", "the patches' geometry and every bundle's spots" },
};
static const sp_port_spec_t patch_outputs[] = {
	{ "normal", "desi.normal", "A'NA, A'Np and A'N1 of every patch" },
};
static const sp_port_spec_t decorrelate_outputs[] = {
	{ "rows", "desi.rows", "flux, ivar, resolution, chi2pix of every patch's core" },
};
static const sp_port_spec_t stitch_outputs[] = {
	{ "frame", "desi.frame", "extracted spectra, resolution, chi2pix, stitched" },
};

static const sp_port_spec_t patch_inputs[] = {
	{ "spots", "desi.spots", "the spots" },
	{ "image", "desi.image", "the image the spots were planned on" },
};
static const sp_port_spec_t decorrelate_inputs[] = {
	{ "normal", "desi.normal", "the normal equations" },
	{ "spots", "desi.spots", "the spots (for the model of chi2pix)" },
	{ "image", "desi.image", "the image (for chi2pix)" },
};
static const sp_port_spec_t stitch_inputs[] = {
	{ "rows", "desi.rows", "the patches' rows" },
};

/* Estimates made before the PSF is read take an r camera's spots: 11 x 17
 * pixels and 4 + 7 x 7 parameters each (hsize 5, 8; Gauss-Hermite degrees
 * 6, 6). */
#define EST_SPOT_PIXELS (11.0 * 17.0)
#define EST_NPAR (4.0 + 7.0 * 7.0)

/* The grid's bins before the PSF is read: wmin .. wmax when both are set,
 * else bounded below by half the image's rows (sqrt of its pixels): DESI's
 * cameras have 0.6-0.7 bins per row at 0.8 A. */
static double est_nwave(const struct spots_params *sp, const sp_estimate_t *e)
{
	if (sp->wmin > 0 && sp->wmax >= sp->wmin)
		return desi_grid_len(sp->wmin, sp->wmax, sp->dw);
	return 0.5 * sqrt(e->size) * (0.8 / sp->dw);
}

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
	const double nwave = est_nwave(sp, e);
	const double nfull = nwave + (double)sp->nwavestep +
			     2.0 * (double)desi_plan_wavepad((int)sp->wavepad, sp->wavepad_frac);
	const double ns = (double)(sp->bundlesize < sp->nspec ? sp->bundlesize : sp->nspec);
	const double nbundles = ceil((double)sp->nspec / (double)sp->bundlesize);
	double slots = sp->spot_slots > 0 ? (double)sp->spot_slots : (double)spots_window();
	slots = slots < nbundles ? slots : nbundles;
	const double frame = (double)sp->nspec * nwave * 4.0 * DESI_NFIELD;
	e->out_bytes += (unsigned long long)frame;
	e->bytes += (unsigned long long)(frame + slots * ns * nfull * (EST_SPOT_PIXELS * 8.0 + 8.0) +
					 ns * nfull * EST_NPAR * 8.0);
	return 0;
}

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
	const double npw = ceil(est_nwave(sp, e) / (double)sp->nwavestep);
	double chunk = st->tile > 0 ? st->tile : sp_runtime_ncuda_workers() > 0 ? npw : 4;
	chunk = chunk < npw ? chunk : npw;
	const double nchunks = ceil((double)sp->nspec / (double)sp->bundlesize) * nsub * ceil(npw / chunk);
	const double pool = normals_pool() < nchunks ? normals_pool() : nchunks;
	const double nworkers = sp_item_nworkers() > 0 ? sp_item_nworkers() : 1;
	e->bytes += (unsigned long long)(8.0 * (pool * chunk * (n * n + 2 * n + 1) +
						nworkers * (3 * n * n + chunk * (n + cnf * (m * m + m)))));
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

const sp_stage_kind_t sp_desi_stitch_kind = {
	.name = "desi.stitch",
	.help = "DESI: the patches' rows into the frame (a copy: CPU, where the frame is written)",
	SP_KIND_INPUTS(stitch_inputs),
	SP_KIND_OUTPUTS(stitch_outputs),
	.impl = SP_IMPL_CPU,
	.codelets = "desi_stitch",
	.run = stitch_run,
	.run_tile = stitch_tile,
};

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
