/* StarPU glue of apple.morphology: hole filling, erosions and the component size filter. */
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

static void morph_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	if (sp_status_failed(a->ctx->status))
		return;
	size_t nn = (size_t)j->s.nwy * j->s.nwx, n32 = apple_morphology_work_size(j->s.nwy, j->s.nwx);
	int32_t *work32 = sp_scratch_get(n32 * sizeof *work32 + nn);
	if (work32 == NULL)
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
	else
		apple_morphology(&j->s, (const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
				 (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
				 (uint8_t *)(work32 + n32), work32);
	sp_scratch_put(work32);
}

#ifdef SP_HAVE_CUDA
static void morph_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	struct CUstream_st *st = (struct CUstream_st *)starpu_cuda_get_local_stream();
	if (sp_status_failed(a->ctx->status))
		return;
	void *scr = apple__task_scratch(a, apple_morphology_cuda_scratch(j->s.nwy, j->s.nwx), st);
	if (scr == NULL)
		return;
	if (apple_morphology_cuda(&j->s, (const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
				  (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[1]), scr, st) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: %s", a->ctx->kernel,
			      sp_cuda_last_error());
	sp_cuda_free_async(scr, st);
}
#endif

static size_t morph_size(struct starpu_task *task, unsigned nimpl)
{
	const struct apple_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)apple_morph_bytes(&a->job->s);
}

SP_CODELET(morph_cl, "apple_morph", morph_cpu, SP_CUDA(morph_cuda), NULL, morph_size, 2,
	   STARPU_R, STARPU_W);

static int morphology_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
			  sp_value_t **out)
{
	struct apple_job *j = apple__job(in[0]);

	if (sp_job_val(&j->base, "apple.mask", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(sp_item_status(item)))
		return 0;
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_morph");
	if (ctx == NULL)
		return SP_ENOMEM;
	return sp_task_insert(ctx, &morph_cl, STARPU_R, j->hseg, STARPU_W, j->hmorph,
			      APPLE_TASK_ARG(j, ctx, 0, 0, apple_morph_flops(&j->s)));
}

APPLE_KIND(sp_apple_morphology_kind, "apple.morphology",
	   "APPLE: hole filling, erosions and the component size filter",
	   morphology_run, apple__seg_port, apple__mask_port, SP_IMPL_CPU_CUDA, "apple_morph");
