/* The DESI extraction's job: the state its tiled stages share for one image (desi_job.c). */
#ifndef SP_DESI_JOB_H
#define SP_DESI_JOB_H

#include <starpu.h>

#include "item.h"
#include "desi_glue.h"
#include "extract.h"

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
	sp_job_t base; /* first: the values carry it (sp_job_val(), item.h) */
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

/* The extraction stages' typed parameters (desi.patch's estimate reads its
 * producer's, desi.spots'). */
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

/* The chunk's spots, corners and image, as the kernels take them: buffers
 * 0-4 of the patch and decorrelate tasks. */
#define CHUNK_INPUTS(buffers)                                             \
	(const double *)STARPU_VECTOR_GET_PTR((buffers)[0]),              \
		(const int32_t *)STARPU_VECTOR_GET_PTR((buffers)[1]),     \
		(const int32_t *)STARPU_VECTOR_GET_PTR((buffers)[2]),     \
		(const float *)STARPU_VECTOR_GET_PTR((buffers)[3]),       \
		(const float *)STARPU_VECTOR_GET_PTR((buffers)[4])

/* A new job, holding no reference yet (sp_job_val() takes the first), or
 * NULL on ENOMEM; the last sp_job_unref() frees it. */
struct desi_job *desi__job_new(void);

/* The job of a value of port type desi.spots, desi.normal or desi.rows. */
static inline struct desi_job *desi__job(const sp_value_t *v)
{
	return (struct desi_job *)sp_job_of(v);
}

/* Drops the reference a value other than sp_job_val()'s holds (a frame's,
 * a model's); nothing when j is NULL. */
static inline void desi__job_unref(struct desi_job *j)
{
	if (j != NULL)
		sp_job_unref(&j->base);
}

/* Records that chunk a->ch failed: code, with the chunk named, then what. */
void desi__chunk_failed(const struct desi_task_arg *a, int code, const char *what);

/* The footprint of the patch and decorrelate tasks of a chunk. */
uint32_t desi__chunk_footprint(struct starpu_task *task);

/* The stage's spots and image inputs (in[ispots], in[iimage]; ispots < 0:
 * none) are the ones the job was planned on: 0, or the item failed. */
int desi__same_inputs(struct desi_job *j, sp_item_t *item, const sp_gstage_t *st,
		      sp_value_t *const *in, int ispots, int iimage);

/* Most fibres in a patch: a subbundle and a neighbour each side. */
int desi__nf_max(const desi_plan_t *pl);

/* The grid's bins, estimated before the PSF is read. */
double desi__est_nwave(const struct spots_params *sp, const sp_estimate_t *e);

/* Submits chunk ch's decorrelation task (decorrelate_codelet.c; desi.patch
 * calls it early when ch's normal-equations buffer is wanted again). */
int desi__decor_submit(struct desi_job *j, struct desi_chunk *ch);

/* A stage reading ch's rows has submitted its task; the last unregisters them. */
void desi__rows_release(struct desi_chunk *ch);

#ifdef SP_HAVE_CUDA
/* Stream-ordered scratch for a CUDA task of chunk a->ch, or NULL with the status set. */
void *desi__task_scratch(const struct desi_task_arg *a, size_t bytes, struct CUstream_st *stream);
#endif

#endif /* SP_DESI_JOB_H */
