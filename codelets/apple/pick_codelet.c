/* StarPU glue of apple.pick: particle centres, overlap removal, original coordinates (CPU). */
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

static void pick_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	if (sp_status_failed(a->ctx->status))
		return;
	void *work = sp_scratch_get(apple_pick_work_size(&j->s));
	int n = work == NULL ? SP_ENOMEM
			     : apple_pick(&j->p, &j->s,
					  (const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
					  (int *)STARPU_VECTOR_GET_PTR(buffers[1]), j->picks->maxpick,
					  work);
	sp_scratch_put(work);
	if (n < 0)
		sp_status_set(a->ctx->status, n, "%s: out of memory", __func__);
	else {
		j->picks->npick = n < j->picks->maxpick ? n : j->picks->maxpick;
		apple_pick_scores(&j->p, &j->s, j->svm, (const double *)STARPU_VECTOR_GET_PTR(buffers[2]),
				  (const double *)STARPU_VECTOR_GET_PTR(buffers[3]),
				  (const int *)STARPU_VECTOR_GET_PTR(buffers[1]), j->picks->npick,
				  j->picks->score);
	}
}

SP_CODELET(pick_cl, "apple_pick", pick_cpu, SP_NO_CUDA, NULL, NULL, 4, STARPU_R, STARPU_W, STARPU_R,
	   STARPU_R);

static void picks_free(sp_value_t *v)
{
	apple_picks_val_t *pv = (apple_picks_val_t *)v;
	if (pv->h != NULL)
		starpu_data_unregister(pv->h);
	sp_job_unref(&pv->job->base);
	starpu_free(pv->xy);
	free(pv->score);
	free(pv);
}

static int pick_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		    sp_value_t **out)
{
	struct apple_job *j = apple__job(in[0]);
	const apple_sizes_t *s = &j->s;
	apple_picks_val_t *pv = calloc(1, sizeof *pv);

	if (pv == NULL)
		return SP_ENOMEM;
	pv->base.type = "apple.picks";
	pv->base.free_cb = picks_free;
	pv->job = j;
	pv->path = j->path;
	sp_job_ref(&j->base);
	j->picks = pv;
	*out = &pv->base;
	pv->params = j->p;
	if (sp_status_failed(sp_item_status(item)))
		return 0;
	/* bound the picks by the windows of the minimum particle */
	pv->maxpick = s->nwy * s->nwx / (s->min_size > 0 ? s->min_size * s->min_size : 1) + 16;
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_pick");
	pv->score = malloc((size_t)pv->maxpick * sizeof *pv->score);
	if (ctx == NULL || pv->score == NULL ||
	    apple__alloc_reg(&pv->h, (void **)&pv->xy, (size_t)pv->maxpick * 2, sizeof(int), 0) != 0)
		return sp_status_set(sp_item_status(item), SP_ENOMEM, "%s: out of memory", j->path);
	return sp_task_insert(ctx, &pick_cl, STARPU_R, j->hmorph, STARPU_W, pv->h, STARPU_R, j->hmean,
			      STARPU_R, j->hstd, APPLE_TASK_ARG(j, ctx, 0, 0, 0));
}

APPLE_KIND(sp_apple_pick_kind, "apple.pick",
	   "APPLE: particle centres, overlap removal, original coordinates (CPU only: 0.7 % of the time, doc/apple.md)",
	   pick_run, apple__mask_port, apple__picks_port, SP_IMPL_CPU, "apple_pick");
