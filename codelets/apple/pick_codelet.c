/* StarPU glue of apple.pick: preprocess, query scores and classification split into tasks, morphology and picks. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/stage.h"
#include "apple_glue.h"
#ifdef SP_HAVE_CUDA
#include "../../src/cuda_handles.h"
#endif

/*
 * DESIGN: one micrograph becomes
 *   prepare (preprocess, moments, reference windows and their spectra)
 *   -> K score tasks over ranges of query windows (the heavy FFT part),
 *      each writing its rows of the response cube, a partition of it
 *   -> train (threshold, score map, training set, SVM; CPU: libsvm)
 *   -> K classify tasks over ranges of window rows (a partition of seg)
 *   -> morph (hole filling, erosions, component filter)
 *   -> pick (centres, overlap removal, original coordinates; CPU).
 * prepare, score, classify and morph have CPU and CUDA implementations
 * (apple_cpu.c, apple_cuda.cu) giving the same bits but for the score's
 * transforms (see apple.h), so StarPU's scheduler may put any task on any
 * worker.  The trained classifier lives in the job (its scalars, read by
 * both implementations) and, packed, in a registered vector that StarPU
 * moves to the GPU for the CUDA classification.  FFTW plans (CPU) and
 * cuFFT plan sets (CUDA) are made once per worker and size, serialised,
 * and reused; GPU scratch comes from the stream-ordered pool.
 */

struct apple_job {
	apple_params_t p;
	apple_sizes_t s;
	int ny, nx;
	int k_score, k_class;
	int *qb;          /* [k_score + 1] query range bounds */
	int *rb;          /* [k_class + 1] row range bounds */
	double *im, *mean, *std, *spec, *resp;
	int32_t *ref, *score;
	uint8_t *seg, *morph;
	double *svc;      /* packed support vectors [maxsv][3] (apple_svm_cuda_pack()) */
	int maxsv;
	apple_svm_t *svm;
	starpu_data_handle_t him, hmean, hstd, hspec, hresp, hseg, hmorph, hsvc;
	struct apple_task_arg *args;
	sp_taskctx_t *ctx_prep, *ctx_score, *ctx_train, *ctx_class, *ctx_morph, *ctx_pick;
	apple_picks_val_t *picks;
};

/* Retraining rounds when the segmentation comes out uniform. */
#define APPLE_MAX_RETRAIN 8

struct apple_task_arg {
	struct apple_job *job;
	sp_taskctx_t *ctx;
	int lo, hi; /* range of the task (queries or rows) */
};

/* ---- per-worker FFTW plans ---- */
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;
static apple_score_fft_t *plans[STARPU_NMAXWORKERS];
static int plan_q[STARPU_NMAXWORKERS];

static void free_plans(void)
{
	for (int w = 0; w < STARPU_NMAXWORKERS; w++)
		apple_score_fft_free(&plans[w]);
}

static apple_score_fft_t *worker_plan(int q)
{
	int w = starpu_worker_get_id();
	static int registered;
	if (w < 0)
		w = 0;
	if (plans[w] != NULL && plan_q[w] == q)
		return plans[w];
	pthread_mutex_lock(&plan_lock);
	if (!registered) {
		atexit(free_plans);
		registered = 1;
	}
	apple_score_fft_free(&plans[w]);
	plans[w] = apple_score_fft_init(q);
	plan_q[w] = q;
	pthread_mutex_unlock(&plan_lock);
	return plans[w];
}

/* ---- per-worker cuFFT plan sets ---- */
#ifdef SP_HAVE_CUDA
/* Device scratch a score task may use; the chunk of queries per batched
 * transform follows from it (apple_score_cuda_chunk()). */
#define APPLE_CUDA_SCORE_BYTES ((size_t)256 << 20)

static apple_score_cuda_t *cplans[STARPU_NMAXWORKERS];
static int cplan_key[STARPU_NMAXWORKERS][3];

static void free_cplans(void)
{
	int w = starpu_worker_get_id();
	if (w >= 0)
		apple_score_cuda_free(&cplans[w]);
}

/* The calling CUDA worker's plan set for (q, nref) and its chunk. */
static apple_score_cuda_t *worker_cplan(const apple_sizes_t *s, int *chunk)
{
	int w = starpu_worker_get_id(), q = s->query, nref = s->nref;
	int c = apple_score_cuda_chunk(q, nref, s->gy * s->gx, APPLE_CUDA_SCORE_BYTES);
	*chunk = c;
	if (cplans[w] != NULL && cplan_key[w][0] == q && cplan_key[w][1] == nref &&
	    cplan_key[w][2] == c)
		return cplans[w];
	sp_cuda_at_shutdown(free_cplans);
	apple_score_cuda_free(&cplans[w]);
	cplans[w] = apple_score_cuda_new(q, nref, c);
	cplan_key[w][0] = q;
	cplan_key[w][1] = nref;
	cplan_key[w][2] = c;
	return cplans[w];
}

static size_t max3(size_t a, size_t b, size_t c)
{
	size_t m = a > b ? a : b;
	return m > c ? m : c;
}
#endif

/* ---- codelets ---- */

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
	size_t nw1 = apple_preprocess_work_size(&j->p, s), nw2 = (size_t)s->n * s->nw * 2;
	double *work = malloc((nw1 > nw2 ? nw1 : nw2) * sizeof *work);
	apple_score_fft_t *f = worker_plan(s->query);
	if (work == NULL || f == NULL) {
		free(work);
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
		return;
	}
	apple_preprocess(&j->p, s, mic, j->ny, j->nx, im, NULL, work);
	apple_moments(im, s->n, s->query, mean, std, work);
	apple_refs_select(s, mean, std, j->ref);
	apple_score_refs_fft(f, im, s->n, s->query, j->ref, s->nref, spec);
	free(work);
}

static void score_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	const apple_sizes_t *s = &a->job->s;
	if (sp_status_failed(a->ctx->status))
		return;
	apple_score_fft_t *f = worker_plan(s->query);
	if (f == NULL) {
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
		return;
	}
	apple_score_responses(f, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]), s->n, s->query,
			      s->gx, (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), s->nref, a->lo,
			      a->hi, (double *)STARPU_VECTOR_GET_PTR(buffers[2]));
}

#ifdef SP_HAVE_CUDA
/* Stream-ordered scratch for a CUDA task, or NULL with the status set. */
static void *task_scratch(struct apple_task_arg *a, size_t bytes, struct CUstream_st *stream)
{
	void *p = NULL;
	if (sp_cuda_malloc_async(&p, bytes, stream) != 0) {
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: cannot allocate %zu bytes of GPU memory",
			      a->ctx->kernel, bytes);
		return NULL;
	}
	return p;
}

/* The worker's cuFFT plan set for a task that uses one, or NULL (the item
 * failed already, or the plans cannot be made: status set). */
static apple_score_cuda_t *task_cplan(struct apple_task_arg *a, int *chunk)
{
	if (sp_status_failed(a->ctx->status))
		return NULL;
	apple_score_cuda_t *pl = worker_cplan(&a->job->s, chunk);
	if (pl == NULL)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: cannot make the cuFFT plans", a->ctx->kernel);
	return pl;
}

static void prepare_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	const apple_sizes_t *s = &j->s;
	struct CUstream_st *st = (struct CUstream_st *)starpu_cuda_get_local_stream();
	int chunk;
	apple_score_cuda_t *pl = task_cplan(a, &chunk);
	if (pl == NULL)
		return;
	/* ref [nref][2] first, then one region the steps reuse in turn */
	size_t rb = ((size_t)s->nref * 2 * sizeof(int32_t) + 255) / 256 * 256;
	size_t bytes = rb + max3(apple_preprocess_cuda_scratch(s),
				 apple_moments_cuda_scratch(s->n, s->query),
				 apple_score_cuda_scratch(s->query, s->nref, chunk));
	char *scr = task_scratch(a, bytes, st);
	if (scr == NULL)
		return;
	double *im = (double *)STARPU_VECTOR_GET_PTR(buffers[1]);
	double *mean = (double *)STARPU_VECTOR_GET_PTR(buffers[2]);
	double *std = (double *)STARPU_VECTOR_GET_PTR(buffers[3]);
	int32_t *ref = (int32_t *)scr;
	int rc = apple_preprocess_cuda(&j->p, s, (const float *)STARPU_VECTOR_GET_PTR(buffers[0]),
				       j->ny, j->nx, im, scr + rb, st);
	if (rc == 0)
		rc = apple_moments_cuda(im, s->n, s->query, mean, std, scr + rb, st);
	if (rc == 0)
		rc = apple_refs_select_cuda(s, mean, std, ref, st);
	if (rc == 0)
		rc = apple_score_refs_fft_cuda(pl, im, s->n, s->query, ref, s->nref,
					       (double *)STARPU_VECTOR_GET_PTR(buffers[4]), scr + rb,
					       st);
	if (rc != 0)
		sp_status_set(a->ctx->status, rc, "%s: a CUDA kernel or cuFFT call failed", a->ctx->kernel);
	sp_cuda_free_async(scr, st);
}

static void score_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	const apple_sizes_t *s = &a->job->s;
	struct CUstream_st *st = (struct CUstream_st *)starpu_cuda_get_local_stream();
	int chunk;
	apple_score_cuda_t *pl = task_cplan(a, &chunk);
	if (pl == NULL)
		return;
	void *scr = task_scratch(a, apple_score_cuda_scratch(s->query, s->nref, chunk), st);
	if (scr == NULL)
		return;
	if (apple_score_responses_cuda(pl, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]), s->n,
				       s->query, s->gx,
				       (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), s->nref,
				       a->lo, a->hi, (double *)STARPU_VECTOR_GET_PTR(buffers[2]), scr,
				       st) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: a CUDA kernel or cuFFT call failed",
			      a->ctx->kernel);
	sp_cuda_free_async(scr, st);
}
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
	int nb = s->n / s->query, npos = 0, nneg = 0;
	double *feat = malloc((size_t)nb * nb * 2 * sizeof *feat);
	unsigned char *work = malloc(2 * (size_t)s->n * s->n);
	if (feat == NULL || work == NULL) {
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
		goto out;
	}
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
	free(feat);
	free(work);
}

static void classify_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	if (sp_status_failed(a->ctx->status))
		return;
	apple_classify_rows(j->svm, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]),
			    (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), j->s.nw, a->lo, a->hi,
			    (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[3]));
}

static void morph_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	if (sp_status_failed(a->ctx->status))
		return;
	size_t nn = (size_t)j->s.nw * j->s.nw;
	uint8_t *work8 = malloc(nn);
	int32_t *work32 = malloc(apple_morphology_work_size(j->s.nw) * sizeof *work32);
	if (work8 == NULL || work32 == NULL)
		sp_status_set(a->ctx->status, SP_ENOMEM, "%s: out of memory", __func__);
	else
		apple_morphology(&j->s, (const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
				 (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[1]), work8, work32);
	free(work8);
	free(work32);
}

#ifdef SP_HAVE_CUDA
static void classify_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	if (sp_status_failed(a->ctx->status))
		return;
	if (apple_classify_rows_cuda(j->svm, (const double *)STARPU_VECTOR_GET_PTR(buffers[2]),
				     (const double *)STARPU_VECTOR_GET_PTR(buffers[0]),
				     (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), j->s.nw, a->lo,
				     a->hi, (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[3]),
				     (struct CUstream_st *)starpu_cuda_get_local_stream()) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: kernel launch failed", a->ctx->kernel);
}

static void morph_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	struct CUstream_st *st = (struct CUstream_st *)starpu_cuda_get_local_stream();
	if (sp_status_failed(a->ctx->status))
		return;
	void *scr = task_scratch(a, apple_morphology_cuda_scratch(j->s.nw), st);
	if (scr == NULL)
		return;
	if (apple_morphology_cuda(&j->s, (const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
				  (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[1]), scr, st) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: kernel launch failed", a->ctx->kernel);
	sp_cuda_free_async(scr, st);
}
#endif

static void pick_cpu(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	if (sp_status_failed(a->ctx->status))
		return;
	int n = apple_pick(&j->p, &j->s, (const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
			   (int *)STARPU_VECTOR_GET_PTR(buffers[1]), j->picks->maxpick);
	if (n < 0)
		sp_status_set(a->ctx->status, n, "%s: out of memory", __func__);
	else
		j->picks->npick = n < j->picks->maxpick ? n : j->picks->maxpick;
}

#ifdef SP_HAVE_CUDA
#define SP__APPLE_CUDA(fn) .cuda_funcs = { fn }, .cuda_flags = { STARPU_CUDA_ASYNC },
#else
#define SP__APPLE_CUDA(fn)
#endif

#define SP__APPLE_CL(var, cuda, nb, ...)               \
	static struct starpu_perfmodel var##_model = { \
		.type = STARPU_HISTORY_BASED,          \
		.symbol = "apple_" #var,               \
	};                                             \
	static struct starpu_codelet var##_cl = {      \
		.cpu_funcs = { var##_cpu },            \
		cuda                                   \
		.nbuffers = nb,                        \
		.modes = { __VA_ARGS__ },              \
		.model = &var##_model,                 \
		.name = "apple_" #var,                 \
	}

SP__APPLE_CL(prepare, SP__APPLE_CUDA(prepare_cuda), 5, STARPU_R, STARPU_W, STARPU_W, STARPU_W,
	     STARPU_W);
SP__APPLE_CL(score, SP__APPLE_CUDA(score_cuda), 3, STARPU_R, STARPU_R, STARPU_W);
SP__APPLE_CL(train, , 3, STARPU_R, STARPU_R, STARPU_W);
SP__APPLE_CL(classify, SP__APPLE_CUDA(classify_cuda), 4, STARPU_R, STARPU_R, STARPU_R, STARPU_W);
SP__APPLE_CL(morph, SP__APPLE_CUDA(morph_cuda), 2, STARPU_R, STARPU_W);
SP__APPLE_CL(pick, , 2, STARPU_R, STARPU_W);

static void job_free(struct apple_job *j)
{
	if (j == NULL)
		return;
	starpu_data_handle_t hs[] = { j->him,  j->hmean,  j->hstd, j->hspec,
				      j->hresp, j->hseg, j->hmorph, j->hsvc };
	for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
		if (hs[i] != NULL)
			starpu_data_unregister(hs[i]);
	starpu_free(j->im);
	starpu_free(j->mean);
	starpu_free(j->std);
	starpu_free(j->spec);
	starpu_free(j->resp);
	starpu_free(j->seg);
	starpu_free(j->morph);
	starpu_free(j->svc);
	free(j->ref);
	free(j->score);
	free(j->qb);
	free(j->rb);
	free(j->args);
	apple_svm_free(&j->svm);
	free(j);
}

static void picks_free(sp_value_t *v)
{
	apple_picks_val_t *pv = (apple_picks_val_t *)v;
	if (pv->h != NULL)
		starpu_data_unregister(pv->h);
	job_free(pv->job);
	starpu_free(pv->xy);
	free(pv);
}

/* Splits [0, n) into k near-equal ranges: b[0..k]. */
static void split(int n, int k, int *b)
{
	for (int i = 0; i <= k; i++)
		b[i] = (int)((long long)n * i / k);
}

static int alloc_reg(starpu_data_handle_t *h, void **buf, size_t n, size_t elem)
{
	if (starpu_malloc(buf, (n ? n : 1) * elem) != 0) {
		*buf = NULL;
		return -1;
	}
	starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)*buf, (uint32_t)n, elem);
	return 0;
}

static int pick_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		    sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	apple_mic_val_t *m = (apple_mic_val_t *)in[0];
	apple_picks_val_t *pv = calloc(1, sizeof *pv);
	struct apple_job *j = calloc(1, sizeof *j);
	sp_err_t err = { 0 };

	if (pv == NULL || j == NULL) {
		free(pv);
		free(j);
		return SP_ENOMEM;
	}
	pv->base.type = "apple.picks";
	pv->base.free_cb = picks_free;
	pv->job = j;
	j->picks = pv;
	*out = &pv->base;

#define P(name) ((int)sp_param_int(sp_gstage_param(st, name)->text))
	apple_params_t *p = &j->p;
	p->particle_size = P("particle_size");
	p->max_particle_size = P("max_particle_size");
	p->min_particle_size = P("min_particle_size");
	p->minimum_overlap_amount = P("minimum_overlap_amount");
	p->query_image_size = P("query_image_size");
	p->tau1 = P("tau1");
	p->tau2 = P("tau2");
	p->container_size = P("container_size");
	p->fix_quirks = sp_param_bool(sp_gstage_param(st, "fix_quirks")->text);
	int ntasks = P("tasks");
#undef P
	apple_params_defaults(p);
	pv->params = *p;
	j->ny = m->hdr.ny;
	j->nx = m->hdr.nx;
	if (apple_params_derive(p, j->ny, j->nx, &j->s, &err) != 0)
		return sp_status_set(status, err.code ? err.code : SP_EINVAL, "%s: %s", m->path, err.msg);
	const apple_sizes_t *s = &j->s;
	int nquery = s->gy * s->gx;
	int k = ntasks > 0 ? ntasks : 4 * (int)sp_item_nworkers();
	j->k_score = k < nquery ? k : nquery;
	j->k_class = k < s->nw ? k : s->nw;
	j->qb = malloc((size_t)(j->k_score + 1) * sizeof *j->qb);
	j->rb = malloc((size_t)(j->k_class + 1) * sizeof *j->rb);
	j->ref = malloc((size_t)s->nref * 2 * sizeof *j->ref);
	j->score = malloc((size_t)nquery * sizeof *j->score);
	j->args = calloc((size_t)(j->k_score + (j->k_class + 1) * (APPLE_MAX_RETRAIN + 1) + 3),
			 sizeof *j->args);
	/* At most one pick per window row and column pair is impossible to
	 * exceed: bound by the windows of the minimum particle. */
	pv->maxpick = s->nw * s->nw / (s->min_size > 0 ? s->min_size * s->min_size : 1) + 16;
	/* support vectors <= training examples <= (n / q)^2 blocks */
	j->maxsv = (s->n / s->query) * (s->n / s->query);
	if (j->maxsv < 1)
		j->maxsv = 1;
	if (!j->qb || !j->rb || !j->ref || !j->score || !j->args ||
	    alloc_reg(&j->him, (void **)&j->im, (size_t)s->n * s->n, sizeof(double)) ||
	    alloc_reg(&j->hmean, (void **)&j->mean, (size_t)s->nw * s->nw, sizeof(double)) ||
	    alloc_reg(&j->hstd, (void **)&j->std, (size_t)s->nw * s->nw, sizeof(double)) ||
	    alloc_reg(&j->hspec, (void **)&j->spec, (size_t)s->nref * 2 * apple_score_spec_size(s->query),
		      sizeof(double)) ||
	    alloc_reg(&j->hresp, (void **)&j->resp, (size_t)nquery * s->nref, sizeof(double)) ||
	    alloc_reg(&j->hseg, (void **)&j->seg, (size_t)s->nw * s->nw, 1) ||
	    alloc_reg(&j->hmorph, (void **)&j->morph, (size_t)s->nw * s->nw, 1) ||
	    alloc_reg(&j->hsvc, (void **)&j->svc, (size_t)j->maxsv * 3, sizeof(double)) ||
	    alloc_reg(&pv->h, (void **)&pv->xy, (size_t)pv->maxpick * 2, sizeof(int)))
		return sp_status_set(status, SP_ENOMEM, "%s: out of memory", m->path);
	split(nquery, j->k_score, j->qb);
	split(s->nw, j->k_class, j->rb);

	j->ctx_prep = sp_item_taskctx(item, st, "apple_prepare");
	j->ctx_score = sp_item_taskctx(item, st, "apple_score");
	j->ctx_train = sp_item_taskctx(item, st, "apple_train");
	j->ctx_class = sp_item_taskctx(item, st, "apple_classify");
	j->ctx_morph = sp_item_taskctx(item, st, "apple_morph");
	j->ctx_pick = sp_item_taskctx(item, st, "apple_pick");
	if (!j->ctx_prep || !j->ctx_score || !j->ctx_train || !j->ctx_class || !j->ctx_morph ||
	    !j->ctx_pick)
		return SP_ENOMEM;

	struct apple_task_arg *a = j->args;
	int ret = 0;
#define SUBMIT(cl, ctxp, ...)                                                              \
	do {                                                                               \
		a->job = j;                                                                \
		a->ctx = (ctxp);                                                           \
		if (ret == 0) {                                                            \
			sp_taskctx_submitting(a->ctx);                                     \
			ret = starpu_task_insert(&cl, __VA_ARGS__, STARPU_CL_ARGS_NFREE, a, \
						 sizeof *a, SP_TASK_ARGS(a->ctx), 0);      \
		}                                                                          \
		a++;                                                                       \
	} while (0)

	SUBMIT(prepare_cl, j->ctx_prep, STARPU_R, m->h, STARPU_W, j->him, STARPU_W, j->hmean, STARPU_W,
	       j->hstd, STARPU_W, j->hspec);

	/* Score tasks write their query rows of the response cube. */
	uint32_t *len = malloc((size_t)(j->k_score > j->k_class ? j->k_score : j->k_class) * sizeof *len);
	if (len == NULL)
		return SP_ENOMEM;
	for (int i = 0; i < j->k_score; i++)
		len[i] = (uint32_t)((j->qb[i + 1] - j->qb[i]) * s->nref);
	struct starpu_data_filter fq = { .filter_func = starpu_vector_filter_list,
					 .nchildren = (unsigned)j->k_score, .filter_arg_ptr = len };
	starpu_data_partition(j->hresp, &fq);
	for (int i = 0; i < j->k_score; i++) {
		a->lo = j->qb[i];
		a->hi = j->qb[i + 1];
		SUBMIT(score_cl, j->ctx_score, STARPU_R, j->him, STARPU_R, j->hspec, STARPU_W,
		       starpu_data_get_sub_data(j->hresp, 1, i));
	}
	/* Gathering the cube waits for the score tasks (this item's driver only). */
	starpu_data_unpartition(j->hresp, STARPU_MAIN_RAM);
	for (int i = 0; i < j->k_class; i++)
		len[i] = (uint32_t)((j->rb[i + 1] - j->rb[i]) * s->nw);
	struct starpu_data_filter fr = { .filter_func = starpu_vector_filter_list,
					 .nchildren = (unsigned)j->k_class, .filter_arg_ptr = len };
	/* Train and classify; as ASPIRE, retrain with larger tau when the whole
	 * micrograph comes out one class (bounded here; ASPIRE's loop is not). */
	for (int attempt = 0; attempt <= APPLE_MAX_RETRAIN && ret == 0; attempt++) {
		SUBMIT(train_cl, j->ctx_train, STARPU_R, j->hresp, STARPU_R, j->him, STARPU_W, j->hsvc);
		starpu_data_partition(j->hseg, &fr);
		for (int i = 0; i < j->k_class; i++) {
			a->lo = j->rb[i];
			a->hi = j->rb[i + 1];
			SUBMIT(classify_cl, j->ctx_class, STARPU_R, j->hmean, STARPU_R, j->hstd, STARPU_R,
			       j->hsvc, STARPU_W, starpu_data_get_sub_data(j->hseg, 1, i));
		}
		starpu_data_unpartition(j->hseg, STARPU_MAIN_RAM);
		if (ret != 0 || attempt == APPLE_MAX_RETRAIN)
			break;
		starpu_data_acquire(j->hseg, STARPU_R);
		int u = sp_status_failed(status) ? 0 : apple_seg_uniform(j->seg, (size_t)s->nw * s->nw);
		starpu_data_release(j->hseg);
		if (u == 0)
			break;
		if (u > 0)
			j->s.tau2 += 500; /* ASPIRE: all particle -> tau2 += 500, none -> tau1 += 500 */
		else
			j->s.tau1 += 500;
		sp_item_report_num(item, "retrain_attempts", attempt + 1);
	}
	free(len);
	SUBMIT(morph_cl, j->ctx_morph, STARPU_R, j->hseg, STARPU_W, j->hmorph);
	SUBMIT(pick_cl, j->ctx_pick, STARPU_R, j->hmorph, STARPU_W, pv->h);
#undef SUBMIT
	if (ret != 0)
		return sp_status_set(status, SP_ESTARPU, "%s: task submission failed (%d)", m->path, ret);
	return 0;
}

static const sp_param_spec_t pick_params[] = {
	{ "particle_size", SP_PT_INT, NULL, 5, 2999, NULL, "particle diameter (pixels of the micrograph)" },
	{ "max_particle_size", SP_PT_INT, "0", 0, 100000, NULL, "0: 2 particle_size" },
	{ "min_particle_size", SP_PT_INT, "0", 0, 100000, NULL, "0: particle_size / 4" },
	{ "minimum_overlap_amount", SP_PT_INT, "0", 0, 100000, NULL, "0: particle_size / 10" },
	{ "query_image_size", SP_PT_INT, "0", 0, 100000, NULL,
	  "0: round(2/3 particle_size) minus its remainder mod 4" },
	{ "tau1", SP_PT_INT, "0", 0, 100000000, NULL, "query windows that surely hold a particle; 0: 3% of q_box" },
	{ "tau2", SP_PT_INT, "0", 0, 100000000, NULL, "query windows that are surely not noise; 0: 30% of q_box" },
	{ "container_size", SP_PT_INT, "450", 1, 1900, NULL, "container of the reference windows" },
	{ "fix_quirks", SP_PT_BOOL, "false", 0, -1, NULL,
	  "false: ASPIRE's exact picks; true: every component and isolated centre (see doc/apple.md)" },
	{ "tasks", SP_PT_INT, "0", 0, 100000, NULL, "score and classification tasks per micrograph; 0: 4 per worker" },
};
static const sp_port_spec_t pick_inputs[] = {
	{ "micrograph", "apple.micrograph", "the micrograph" },
};
static const sp_port_spec_t pick_outputs[] = {
	{ "picks", "apple.picks", "particle centres (x, y), original pixels" },
};

const sp_stage_kind_t sp_apple_pick_kind = {
	.name = "apple.pick",
	.help = "APPLE-Picker: query scores, SVM, morphology and particle centres",
	.params = pick_params,
	.nparams = sizeof pick_params / sizeof pick_params[0],
	.inputs = pick_inputs,
	.ninputs = 1,
	.outputs = pick_outputs,
	.noutputs = 1,
	.impl = SP_IMPL_CPU_CUDA,
	.run = pick_run,
};
