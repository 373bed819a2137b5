/* StarPU glue of apple.train: score map, training set and SVM (libsvm, CPU). */
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

static void train_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	const apple_sizes_t *s = &j->s;
	if (sp_status_failed(a->ctx->status))
		return;
	const double *resp = (const double *)STARPU_VECTOR_GET_PTR(buffers[0]);
	const double *im = (const double *)STARPU_VECTOR_GET_PTR(buffers[1]);
	double *svc = (double *)STARPU_VECTOR_GET_PTR(buffers[2]);
	int npos = 0, nneg = 0;
	const size_t nfeat = (size_t)(s->ny / s->query) * (s->nx / s->query) * 2;
	double *feat = sp_scratch_get(nfeat * sizeof *feat + 2 * (size_t)s->ny * s->nx);
	if (feat == NULL) {
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
		return;
	}
	unsigned char *work = (unsigned char *)(feat + nfeat);
	apple_score_finish(resp, s->gy * s->gx, s->nref, j->score);
	if (apple_training_set(s, im, j->score, s->tau1, s->tau2, feat, &npos, &nneg, work) != 0) {
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
		goto out;
	}
	apple_svm_free(&j->svm); /* a retry replaces the classifier */
	j->svm = apple_svm_new(feat, npos, nneg);
	if (j->svm == NULL)
		sp_status_set(a->ctx->status, SP_EINVAL,
			      "no classifier: the training set has %d particle and %d noise examples "
			      "(particle_size or tau1/tau2 may not suit this micrograph)", npos, nneg);
	else if (j->svm->nsv > j->maxsv) /* nsv <= npos + nneg <= nb^2: cannot happen */
		sp_status_set(a->ctx->status, SP_EINVAL, "%s: %d support vectors, room for %d",
			      __func__, j->svm->nsv, j->maxsv);
	else
		apple_svm_cuda_pack(j->svm, svc);
out:
	sp_scratch_put(feat);
}

SP_CODELET(train_cl, "apple_train", train_cpu, SP_NO_CUDA, NULL, NULL, 3, STARPU_R, STARPU_R,
	   STARPU_W);

int apple__submit_train(struct apple_job *j, sp_taskctx_t *ctx)
{
	return sp_task_insert(ctx, &train_cl, STARPU_R, j->hresp, STARPU_R, j->him, STARPU_W, j->hsvc,
			      APPLE_TASK_ARG(j, ctx, 0, 0, 0));
}

static int train_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	struct apple_job *j = apple__job(in[0]);

	if (sp_job_val(&j->base, "apple.classifier", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(sp_item_status(item)))
		return 0;
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_train");
	if (ctx == NULL)
		return SP_ENOMEM;
	return apple__submit_train(j, ctx);
}

APPLE_KIND(sp_apple_train_kind, "apple.train",
	   "APPLE: score map, training set and SVM (libsvm; CPU only: 0.4 % of the time, doc/apple.md)",
	   train_run, apple__scores_port, apple__classifier_port, SP_IMPL_CPU, "apple_train");
