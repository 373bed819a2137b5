/* StarPU glue of apple.preprocess: margins, binning, low-pass, window moments and reference spectra (one task). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "sizes.h"
#include "stage.h"
#include "apple_job.h"
#include "tbuf.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

static void prepare_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	const apple_sizes_t *s = &j->s;
	if (sp_status_failed(a->ctx->status))
		return;
	const float *mic = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
	double *im = (double *)STARPU_VECTOR_GET_PTR(buffers[1]);
	double *mean = (double *)STARPU_VECTOR_GET_PTR(buffers[2]);
	double *std = (double *)STARPU_VECTOR_GET_PTR(buffers[3]);
	double *spec = (double *)STARPU_VECTOR_GET_PTR(buffers[4]);
	size_t nw1 = apple_preprocess_work_size(&j->p, s), nw2 = (size_t)s->ny * s->nwx * 2;
	double *work = sp_scratch_get((nw1 > nw2 ? nw1 : nw2) * sizeof *work);
	apple_score_fft_t *f = apple__worker_plan(s->query);
	if (work == NULL || f == NULL) {
		sp_scratch_put(work);
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
		return;
	}
	/* a stop (cancel.h) between the steps, and in the spectra's loop */
	apple_preprocess(&j->p, s, mic, j->ny, j->nx, im, NULL, work);
	if (!sp_cancel_requested())
		apple_moments(im, s->ny, s->nx, s->query, mean, std, work);
	if (!sp_cancel_requested())
		apple_refs_select(s, mean, std, j->ref);
	if (!sp_cancel_requested())
		apple_score_refs_fft(f, im, s->nx, s->query, j->ref, s->nref, spec);
	sp_scratch_put(work);
	apple__task_cancelled(a);
}

#ifdef SP_HAVE_CUDA
static size_t max3(size_t a, size_t b, size_t c)
{
	size_t m = a > b ? a : b;
	return m > c ? m : c;
}

static void prepare_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	const apple_sizes_t *s = &j->s;
	struct CUstream_st *st = (struct CUstream_st *)starpu_cuda_get_local_stream();
	int chunk;
	apple_score_cuda_t *pl = apple__task_cplan(a, &chunk);
	if (pl == NULL)
		return;
	/* ref [nref][2] first, then one region the steps reuse in turn */
	size_t rb = ((size_t)s->nref * 2 * sizeof(int32_t) + 255) / 256 * 256;
	size_t bytes = rb + max3(apple_preprocess_cuda_scratch(s),
				 apple_moments_cuda_scratch(s->ny, s->nx, s->query),
				 apple_score_cuda_scratch(s->query, s->nref, chunk));
	char *scr = apple__task_scratch(a, bytes, st);
	if (scr == NULL)
		return;
	double *im = (double *)STARPU_VECTOR_GET_PTR(buffers[1]);
	double *mean = (double *)STARPU_VECTOR_GET_PTR(buffers[2]);
	double *std = (double *)STARPU_VECTOR_GET_PTR(buffers[3]);
	int32_t *ref = (int32_t *)scr;
	int rc = apple_preprocess_cuda(&j->p, s, (const float *)STARPU_VECTOR_GET_PTR(buffers[0]),
				       j->ny, j->nx, im, scr + rb, st);
	if (rc == 0)
		rc = apple_moments_cuda(im, s->ny, s->nx, s->query, mean, std, scr + rb, st);
	if (rc == 0)
		rc = apple_refs_select_cuda(s, mean, std, ref, st);
	if (rc == 0)
		rc = apple_score_refs_fft_cuda(pl, im, s->nx, s->query, ref, s->nref,
					       (double *)STARPU_VECTOR_GET_PTR(buffers[4]), scr + rb,
					       st);
	if (rc != 0)
		sp_status_set(a->ctx->status, rc, "%s: %s", a->ctx->kernel, sp_cuda_last_error());
	sp_cuda_free_async(scr, st);
}
#endif

/* The size column of the compute tasks' models: the bytes their kernels
 * move (apple_glue.h), not the sizes of the whole buffers they window into.
 * The classification counts its support vectors at their bound maxsv (a
 * small term, known without the trained model). */
static size_t prepare_size(struct starpu_task *task, unsigned nimpl)
{
	const struct apple_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)apple_prepare_bytes(&a->job->s);
}

SP_CODELET(prepare_cl, "apple_prepare", prepare_cpu, SP_CUDA(prepare_cuda), NULL, prepare_size,
	   5, STARPU_R, STARPU_W, STARPU_W, STARPU_W, STARPU_W);

/* apple.preprocess's parameters, parsed once when the graph is loaded. */
struct preprocess_params {
	long long particle_size, max_particle_size, min_particle_size, minimum_overlap_amount;
	long long query_image_size, tau1, tau2, container_size;
	int fix_quirks;
};

static int preprocess_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
			  sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	apple_mic_val_t *m = (apple_mic_val_t *)in[0];
	struct apple_job *j = apple__job_new();
	sp_err_t err = { 0 };

	if (j == NULL || sp_job_val(&j->base, "apple.image", out) != 0) {
		free(j);
		return SP_ENOMEM;
	}
	j->path = m->path;

	const struct preprocess_params *pp = st->typed;
	apple_params_t *p = &j->p;
	p->particle_size = (int)pp->particle_size;
	p->max_particle_size = (int)pp->max_particle_size;
	p->min_particle_size = (int)pp->min_particle_size;
	p->minimum_overlap_amount = (int)pp->minimum_overlap_amount;
	p->query_image_size = (int)pp->query_image_size;
	p->tau1 = (int)pp->tau1;
	p->tau2 = (int)pp->tau2;
	p->container_size = (int)pp->container_size;
	p->fix_quirks = pp->fix_quirks;
	apple_params_defaults(p);
	j->ny = m->hdr.ny;
	j->nx = m->hdr.nx;
	if (apple_params_derive(p, j->ny, j->nx, &j->s, &err) != 0)
		return sp_status_set(status, err.code ? err.code : SP_EINVAL, "%s: %s", m->path, err.msg);
	const apple_sizes_t *s = &j->s;
	int nquery = s->gy * s->gx;
	j->ref = malloc((size_t)s->nref * 2 * sizeof *j->ref);
	j->score = malloc((size_t)nquery * sizeof *j->score);
	/* task arguments: prepare, the score and classify tiles (at most one
	 * per query window and per row), a train per attempt, morph, pick */
	/* a round of classify (and its retrain) reuses the previous round's
	 * arguments: classify_run() reads the segmentation between rounds */
	j->nargs = 3 + nquery + (s->nwy + 1);
	j->args = j->next_arg = calloc((size_t)j->nargs, sizeof *j->args);
	/* support vectors <= training examples <= (ny / q) (nx / q) blocks */
	j->maxsv = (s->ny / s->query) * (s->nx / s->query);
	if (j->maxsv < 1)
		j->maxsv = 1;
	if (!j->ref || !j->score || !j->args ||
	    apple__alloc_reg(&j->him, (void **)&j->im, (size_t)s->ny * s->nx, sizeof(double), 1) ||
	    apple__alloc_reg(&j->hmean, (void **)&j->mean, (size_t)s->nwy * s->nwx, sizeof(double), 1) ||
	    apple__alloc_reg(&j->hstd, (void **)&j->std, (size_t)s->nwy * s->nwx, sizeof(double), 1) ||
	    apple__alloc_reg(&j->hspec, (void **)&j->spec, (size_t)s->nref * 2 * apple_score_spec_size(s->query),
		      sizeof(double), 1) ||
	    apple__alloc_reg(&j->hresp, (void **)&j->resp, (size_t)nquery * s->nref, sizeof(double), 1) ||
	    apple__alloc_reg(&j->hseg, (void **)&j->seg, (size_t)s->nwy * s->nwx, 1, 1) ||
	    apple__alloc_reg(&j->hmorph, (void **)&j->morph, (size_t)s->nwy * s->nwx, 1, 1) ||
	    apple__alloc_reg(&j->hsvc, (void **)&j->svc, (size_t)j->maxsv * 3, sizeof(double), 0))
		return sp_status_set(status, SP_ENOMEM, "%s: out of memory", m->path);

	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_prepare");
	if (ctx == NULL)
		return SP_ENOMEM;
	return sp_task_insert(ctx, &prepare_cl, STARPU_R, m->h, STARPU_W, j->him, STARPU_W, j->hmean,
			      STARPU_W, j->hstd, STARPU_W, j->hspec,
			      APPLE_TASK_ARG(j, ctx, 0, 0, apple_prepare_flops(s)));
}

/* The memory the parameters grow, from the micrograph's header (its
 * producer's file) and the sizes they derive (apple_params_derive(), whose
 * refusal fails the item before anything runs): the response cube (a
 * double per query window and reference), the references' spectra, the
 * scores and the task arguments per query window, and the picks' bound.
 * apple.read's bytes per pixel cover the image-sized buffers. */
static int preprocess_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e,
			       sp_err_t *err)
{
	const sp_gstage_t *rst = sp_item_producer(item, st, 0);
	if (rst == NULL || strcmp(rst->kind->name, "apple.read") != 0)
		return 0;
	char *path = sp_item_param(item, rst, "file");
	apple_micfile_t hdr;
	if (path == NULL)
		return sp_seterr(err, SP_ENOMEM, "out of memory");
	int rc = apple_micfile_open(path, &hdr, err);
	if (rc != 0) {
		free(path);
		return rc;
	}
	const struct preprocess_params *pp = st->typed;
	apple_params_t p = { .particle_size = (int)pp->particle_size,
			     .max_particle_size = (int)pp->max_particle_size,
			     .min_particle_size = (int)pp->min_particle_size,
			     .minimum_overlap_amount = (int)pp->minimum_overlap_amount,
			     .query_image_size = (int)pp->query_image_size,
			     .tau1 = (int)pp->tau1, .tau2 = (int)pp->tau2,
			     .container_size = (int)pp->container_size,
			     .fix_quirks = pp->fix_quirks };
	apple_sizes_t s;
	sp_err_t derr = { 0 };
	apple_params_defaults(&p);
	if (apple_params_derive(&p, hdr.ny, hdr.nx, &s, &derr) != 0) {
		rc = sp_seterr(err, derr.code ? derr.code : SP_EINVAL, "%s: %s", path, derr.msg);
		free(path);
		return rc;
	}
	free(path);
	const double nquery = (double)s.gy * s.gx, nw = (double)s.nwy * s.nwx;
	const double maxpick = nw / (s.min_size > 0 ? (double)s.min_size * s.min_size : 1.0) + 16;
	e->bytes += (unsigned long long)(8.0 * nquery * s.nref +
					 16.0 * s.nref * (double)apple_score_spec_size(s.query) +
					 (4.0 + sizeof(struct apple_task_arg)) * nquery +
					 (2.0 * sizeof(int) + sizeof(double)) * maxpick);
	return 0;
}

#define PP(f) SP_AT(struct preprocess_params, f)
static const sp_param_spec_t preprocess_params[] = {
	{ "particle_size", SP_PT_INT, NULL, 5, 2999, NULL, "particle diameter (pixels of the micrograph)",
	  PP(particle_size) },
	{ "max_particle_size", SP_PT_INT, "0", 0, 100000, NULL, "0: 2 particle_size",
	  PP(max_particle_size) },
	{ "min_particle_size", SP_PT_INT, "0", 0, 100000, NULL, "0: particle_size / 4",
	  PP(min_particle_size) },
	{ "minimum_overlap_amount", SP_PT_INT, "0", 0, 100000, NULL, "0: particle_size / 10",
	  PP(minimum_overlap_amount) },
	{ "query_image_size", SP_PT_INT, "0", 0, 100000, NULL,
	  "0: round(2/3 particle_size) minus its remainder mod 4; the query windows times the "
	  "references (container_size) are at most 2^28, else the micrograph fails naming both",
	  PP(query_image_size) },
	{ "tau1", SP_PT_INT, "0", 0, 100000000, NULL,
	  "query windows that surely hold a particle; 0: 3% of q_box", PP(tau1) },
	{ "tau2", SP_PT_INT, "0", 0, 100000000, NULL,
	  "query windows that are surely not noise; 0: 30% of q_box", PP(tau2) },
	{ "container_size", SP_PT_INT, "450", 1, 1900, NULL,
	  "container of the reference windows (4 references per container; see query_image_size's "
	  "bound)", PP(container_size) },
	{ "fix_quirks", SP_PT_BOOL, "false", 0, -1, NULL,
	  "false: ASPIRE's exact picks; true: every component and isolated centre (see doc/apple.md)",
	  PP(fix_quirks) },
};
#undef PP

APPLE_KIND(sp_apple_preprocess_kind, "apple.preprocess",
	   "APPLE: margins (the whole rectangle), bin x2, low-pass; window moments; reference spectra",
	   preprocess_run, apple__mic_port, apple__image_port, SP_IMPL_CPU_CUDA, "apple_prepare",
	   SP_KIND_PARAMS(preprocess_params, struct preprocess_params), .estimate = preprocess_estimate);
