/* StarPU glue of apple.classify: SVM classification of every window, tasks over ranges of rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cancel.h"
#include "sizes.h"
#include "stage.h"
#include "apple_job.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif


/* apple.classify's parameters (the retrain bounds). */
struct classify_params {
	long long max_retrains;
	double retrain_seconds;
};

/* A classify task's count depends on the number of support vectors, which
 * the train task fixes after the classify tasks were submitted: it goes on
 * the running task, which StarPU records in the model once the function has
 * returned.  Tasks of one footprint that see different numbers (a batch of
 * micrographs) make StarPU set the entry's count to NaN: no count rather
 * than a wrong one (the bound maxsv would overstate it, 1225 against 23 on
 * the 2k test micrograph). */
static void classify_declare_flops(const struct apple_task_arg *a)
{
	struct starpu_task *task = starpu_task_get_current();
	if (task != NULL && a->job->svm != NULL)
		task->flops = apple_classify_flops(&a->job->s, a->hi - a->lo, a->job->svm->nsv);
}

static void classify_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	if (sp_status_failed(a->ctx->status))
		return;
	classify_declare_flops(a);
	apple_classify_rows(j->svm, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]),
			    (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), j->s.nwx, a->lo, a->hi,
			    (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[3]));
	apple__task_cancelled(a);
}

#ifdef SP_HAVE_CUDA
static void classify_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	if (sp_status_failed(a->ctx->status))
		return;
	classify_declare_flops(a);
	if (apple_classify_rows_cuda(j->svm, (const double *)STARPU_VECTOR_GET_PTR(buffers[2]),
				     (const double *)STARPU_VECTOR_GET_PTR(buffers[0]),
				     (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), j->s.nwx, a->lo,
				     a->hi, (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[3]),
				     (struct CUstream_st *)starpu_cuda_get_local_stream()) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: %s", a->ctx->kernel,
			      sp_cuda_last_error());
}
#endif

static size_t classify_size(struct starpu_task *task, unsigned nimpl)
{
	const struct apple_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)apple_classify_bytes(&a->job->s, a->hi - a->lo, a->job->maxsv);
}

SP_CODELET(classify_cl, "apple_classify", classify_cpu, SP_CUDA(classify_cuda), NULL,
	   classify_size, 4, STARPU_R, STARPU_R, STARPU_R, STARPU_W);

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Tiles over window rows, each writing its rows of the segmentation.  As
 * ASPIRE, when the whole micrograph comes out one class the classifier is
 * retrained with a larger tau and the rows classified again (bounded here;
 * ASPIRE's loop is not): the test reads the segmentation, so this stage
 * waits for its tasks. */
static int classify_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
			sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	struct apple_job *j = apple__job(in[0]);
	const apple_sizes_t *s = &j->s;
	int ret = 0;

	if (sp_job_val(&j->base, "apple.segmentation", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(status))
		return 0;
	j->k_class = apple__tiles(item, st, s->nwy);
	j->rb = malloc((size_t)(j->k_class + 1) * sizeof *j->rb);
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_classify");
	sp_taskctx_t *ctx_train = sp_item_taskctx(item, st, "apple_train");
	if (j->rb == NULL || ctx == NULL || ctx_train == NULL)
		return SP_ENOMEM;
	apple__split(s->nwy, j->k_class, j->rb);
	if (apple__plan_parts(j->hseg, j->rb, j->k_class, s->nwx, &j->hseg_parts) != 0)
		return SP_ENOMEM;
	const struct classify_params *cp = st->typed;
	const double t0 = now_s();
	struct apple_task_arg *round0 = j->next_arg;
	for (int attempt = 0; ret == 0; attempt++) {
		/* the last round's tasks are done (its segmentation was read) */
		j->next_arg = round0;
		if (attempt > 0)
			ret = apple__submit_train(j, ctx_train);
		starpu_data_partition_submit(j->hseg, (unsigned)j->k_class, j->hseg_parts);
		/* counted when they run: classify_declare_flops() */
		for (int i = 0; i < j->k_class && ret == 0; i++)
			ret = sp_task_insert(ctx, &classify_cl, STARPU_R, j->hmean, STARPU_R, j->hstd,
					     STARPU_R, j->hsvc, STARPU_W, j->hseg_parts[i],
					     APPLE_TASK_ARG(j, ctx, j->rb[i], j->rb[i + 1], 0));
		starpu_data_unpartition_submit(j->hseg, (unsigned)j->k_class, j->hseg_parts,
					       STARPU_MAIN_RAM);
		if (ret != 0)
			break;
		starpu_data_acquire(j->hseg, STARPU_R);
		int u = sp_status_failed(status) ? 0 : apple_seg_uniform(j->seg, (size_t)s->nwy * s->nwx);
		starpu_data_release(j->hseg);
#ifdef SP_SIMGRID
		/* no segmentation was computed: retrain as often as the real run
		 * did (--sim-count retrain_attempts=N, its report's figure), else never */
		u = attempt < sp_sim_count("retrain_attempts", 0) ? 1 : 0;
#endif
		if (u == 0)
			break;
		/* ASPIRE's loop is unbounded; a micrograph whose classes never
		 * separate fails here, by count or by time, rather than running on
		 * or ending with a meaningless segmentation. */
		double dt = now_s() - t0;
		if (attempt >= cp->max_retrains || dt >= cp->retrain_seconds) {
			sp_status_set(status, SP_ENOTCONV,
				      "%s: every window classified as %s after %d retrain(s) in %.1f s "
				      "(max_retrains=%lld, retrain_seconds=%g): particle_size or tau1/tau2 "
				      "may not suit this micrograph",
				      j->path, u > 0 ? "particle" : "noise", attempt, dt,
				      cp->max_retrains, cp->retrain_seconds);
			break;
		}
		if (u > 0)
			j->s.tau2 += 500; /* ASPIRE: all particle -> tau2 += 500, none -> tau1 += 500 */
		else
			j->s.tau1 += 500;
		sp_item_report_num(item, "retrain_attempts", attempt + 1);
	}
	return ret;
}

#define CP(f) SP_AT(struct classify_params, f)
static const sp_param_spec_t classify_params[] = {
	{ "max_retrains", SP_PT_INT, "8", 0, 1000, NULL,
	  "retrains at most (ASPIRE: unbounded); then the micrograph fails", CP(max_retrains) },
	{ "retrain_seconds", SP_PT_FLOAT, "120", 0, 1e6, NULL,
	  "no retrain starts this long after the first classification; then the micrograph fails",
	  CP(retrain_seconds) },
};
#undef CP

APPLE_KIND(sp_apple_classify_kind, "apple.classify",
	   "APPLE: SVM classification of every window (tiles of rows); retrains if uniform",
	   classify_run, apple__classifier_port, apple__seg_port, SP_IMPL_CPU_CUDA, "apple_classify apple_train",
	   .tile = "tasks over ranges of window rows; default 4 per worker",
	   SP_KIND_PARAMS(classify_params, struct classify_params));
