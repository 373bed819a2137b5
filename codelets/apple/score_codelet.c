/* StarPU glue of apple.score: FFT cross-correlation scores, tasks over ranges of query windows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "sizes.h"
#include "stage.h"
#include "apple_job.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

static void score_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	const apple_sizes_t *s = &a->job->s;
	if (sp_status_failed(a->ctx->status))
		return;
	apple_score_fft_t *f = apple__worker_plan(s->query);
	if (f == NULL) {
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
		return;
	}
	apple_score_responses(f, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]), s->nx, s->query,
			      s->gx, (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), s->nref, a->lo,
			      a->hi, (double *)STARPU_VECTOR_GET_PTR(buffers[2]));
	apple__task_cancelled(a);
}

#ifdef SP_HAVE_CUDA
static void score_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	const apple_sizes_t *s = &a->job->s;
	struct CUstream_st *st = (struct CUstream_st *)starpu_cuda_get_local_stream();
	int chunk;
	apple_score_cuda_t *pl = apple__task_cplan(a, &chunk);
	if (pl == NULL)
		return;
	void *scr = apple__task_scratch(a, apple_score_cuda_scratch(s->query, s->nref, chunk), st);
	if (scr == NULL)
		return;
	if (apple_score_responses_cuda(pl, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]), s->nx,
				       s->query, s->gx,
				       (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), s->nref,
				       a->lo, a->hi, (double *)STARPU_VECTOR_GET_PTR(buffers[2]), scr,
				       st) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: %s", a->ctx->kernel,
			      sp_cuda_last_error());
	sp_cuda_free_async(scr, st);
}
#endif

static size_t score_size(struct starpu_task *task, unsigned nimpl)
{
	const struct apple_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)apple_score_bytes(&a->job->s, a->hi - a->lo);
}

SP_CODELET(score_cl, "apple_score", score_cpu, SP_CUDA(score_cuda), NULL, score_size, 3,
	   STARPU_R, STARPU_R, STARPU_W);

/* Tiles over query windows, each writing its rows of the response cube; the
 * cube is gathered (asynchronously) for the training. */
static int score_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	struct apple_job *j = apple__job(in[0]);
	const apple_sizes_t *s = &j->s;
	int nquery = s->gy * s->gx, ret = 0;

	if (sp_job_val(&j->base, "apple.scores", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(sp_item_status(item)))
		return 0;
	j->k_score = apple__tiles(item, st, nquery);
	j->qb = malloc((size_t)(j->k_score + 1) * sizeof *j->qb);
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_score");
	if (j->qb == NULL || ctx == NULL)
		return SP_ENOMEM;
	apple__split(nquery, j->k_score, j->qb);
	if (apple__plan_parts(j->hresp, j->qb, j->k_score, s->nref, &j->hresp_parts) != 0)
		return SP_ENOMEM;
	starpu_data_partition_submit(j->hresp, (unsigned)j->k_score, j->hresp_parts);
	for (int i = 0; i < j->k_score && ret == 0; i++)
		ret = sp_task_insert(ctx, &score_cl, STARPU_R, j->him, STARPU_R, j->hspec, STARPU_W,
				     j->hresp_parts[i],
				     APPLE_TASK_ARG(j, ctx, j->qb[i], j->qb[i + 1],
						    apple_score_flops(s, j->qb[i + 1] - j->qb[i])));
	starpu_data_unpartition_submit(j->hresp, (unsigned)j->k_score, j->hresp_parts, STARPU_MAIN_RAM);
	return ret;
}

APPLE_KIND(sp_apple_score_kind, "apple.score",
	   "APPLE: FFT cross-correlation scores of every query window (tiles of windows)",
	   score_run, apple__image_port, apple__scores_port, SP_IMPL_CPU_CUDA, "apple_score",
	   .tile = "tasks over ranges of query windows; default 4 per worker");
