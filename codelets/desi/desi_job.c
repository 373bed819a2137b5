/* The DESI extraction's job: its free, and the helpers its stages share (desi_job.h). */
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

void desi__chunk_failed(const struct desi_task_arg *a, int code, const char *what)
{
	const struct desi_chunk *ch = a->ch;
	sp_status_set(a->ctx->status, code, "bundle %d subbundle %d, wavelengths from grid bin %d: %s",
		      ch->sub->bundle, ch->sub->k, ch->batch.w0[0], what);
}

#ifdef SP_HAVE_CUDA
/* Stream-ordered scratch for a CUDA task, or NULL with the status set. */
void *desi__task_scratch(const struct desi_task_arg *a, size_t bytes, struct CUstream_st *stream)
{
	void *p = NULL;
	if (sp_cuda_malloc_async(&p, bytes, stream) != 0) {
		char what[96];
		snprintf(what, sizeof what, "cannot allocate %zu bytes of GPU scratch", bytes);
		desi__chunk_failed(a, SP_ECUDA, what);
		return NULL;
	}
	return p;
}
#endif

/* Patch and decorrelate tasks of a chunk: what their cost follows, the
 * unknowns of a patch (fibres x padded wavelengths), its core fibres (the
 * decorrelation's selected inverse and blocks) and the patches; so that
 * the tasks of a footprint declare the same flops (extract.h). */
uint32_t desi__chunk_footprint(struct starpu_task *task)
{
	const desi_batch_t *b = &((const struct desi_task_arg *)task->cl_arg)->ch->batch;
	uint32_t h = starpu_hash_crc32c_be((uint32_t)b->p.nfib, 0);
	h = starpu_hash_crc32c_be((uint32_t)b->p.nwave, h);
	h = starpu_hash_crc32c_be((uint32_t)b->p.core_f0, h);
	h = starpu_hash_crc32c_be((uint32_t)b->p.core_nf, h);
	return starpu_hash_crc32c_be((uint32_t)b->np, h);
}

/* The last reference gone: every handle unregistered, every buffer back. */
static void job_free(sp_job_t *job)
{
	struct desi_job *j = (struct desi_job *)job;
	for (int c = 0; c < j->nchunks; c++)
		if (j->chunks[c].hrows != NULL)
			starpu_data_unregister(j->chunks[c].hrows);
	for (int k = 0; j->normals != NULL && k < j->nnormals; k++)
		if (j->normals[k] != NULL)
			sp_item_data_unregister(j->normals[k]);
	for (int s = 0; j->slots != NULL && s < j->nslots; s++) {
		struct desi_slot *sl = &j->slots[s];
		if (sl->hspots != NULL) {
			sp_item_data_unregister(sl->hspots);
			sp_item_data_unregister(sl->hxc);
			sp_item_data_unregister(sl->hyc);
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

struct desi_job *desi__job_new(void)
{
	struct desi_job *j = calloc(1, sizeof *j);
	if (j != NULL)
		j->base.free_cb = job_free;
	return j;
}

/* The stage's spots and image inputs (in[ispots], in[iimage]) must be the
 * ones the job was planned on: one item's, from the same stages. */
int desi__same_inputs(struct desi_job *j, sp_item_t *item, const sp_gstage_t *st,
		       sp_value_t *const *in, int ispots, int iimage)
{
	if ((ispots < 0 || desi__job(in[ispots]) == j) &&
	    (const desi_image_val_t *)in[iimage] == j->iv)
		return 0;
	return sp_status_set(sp_item_status(item), SP_EINVAL,
			     "%s: stage '%s' reads another image or other spots than its normal "
			     "equations were planned on (check its in: section)",
			     j->iv->path, st->name);
}

/* Most fibres in a patch: a subbundle and a neighbour each side. */
int desi__nf_max(const desi_plan_t *pl)
{
	return (pl->bundlesize + pl->nsubbundles - 1) / pl->nsubbundles + 2;
}

/* A stage reading a chunk's rows has submitted its task: the last one
 * unregisters them (StarPU frees them once the tasks reading them are done). */
void desi__rows_release(struct desi_chunk *ch)
{
	if (--ch->readers > 0)
		return;
	starpu_data_unregister_submit(ch->hrows);
	ch->hrows = NULL;
}

/* Estimates made before the PSF is read take an r camera's spots: 11 x 17
 * pixels and 4 + 7 x 7 parameters each (hsize 5, 8; Gauss-Hermite degrees
 * 6, 6). */
#define EST_SPOT_PIXELS (11.0 * 17.0)
#define EST_NPAR (4.0 + 7.0 * 7.0)

/* The grid's bins before the PSF is read: wmin .. wmax when both are set,
 * else bounded below by half the image's rows (sqrt of its pixels): DESI's
 * cameras have 0.6-0.7 bins per row at 0.8 A. */
double desi__est_nwave(const struct spots_params *sp, const sp_estimate_t *e)
{
	if (sp->wmin > 0 && sp->wmax >= sp->wmin)
		return desi_grid_len(sp->wmin, sp->wmax, sp->dw);
	return 0.5 * sqrt(e->size) * (0.8 / sp->dw);
}
