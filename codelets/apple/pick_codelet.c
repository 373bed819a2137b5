/* StarPU glue of the APPLE stages: preprocess, score, train, classify, morphology, pick. */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cancel.h"
#include "sizes.h"
#include "stage.h"
#include "apple_glue.h"
#include "apple_kern.h"
#include "tbuf.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

/*
 * DESIGN: one micrograph flows through six graph stages, each a codelet
 * with CPU and CUDA functions but train and pick (see below):
 *   apple.preprocess  margins, bicubic x2, low-pass, window moments,
 *                     reference windows and their spectra (one task)
 *   apple.score       `tile` tasks over ranges of query windows (the heavy
 *                     FFT part), each writing its rows of the response
 *                     cube, an asynchronous partition of it
 *   apple.train       threshold, score map, training set, SVM (CPU: libsvm)
 *   apple.classify    `tile` tasks over ranges of window rows (a partition
 *                     of the segmentation); retrains as ASPIRE does when the
 *                     whole micrograph comes out one class
 *   apple.morphology  hole filling, erosions, component filter
 *   apple.pick        centres, overlap removal, original coordinates (CPU)
 * The stages share one job: the sizes derived from the parameters, and the
 * registered buffers that carry the dependencies between the stages' tasks
 * (StarPU's implicit data dependencies: a stage's run() only submits, it
 * never waits, but for classify's retrain test).  Every value holds a
 * reference to the job; the last one freed unregisters its buffers.  CPU and
 * CUDA functions give the same bits but for the score's transforms (see
 * apple.h), so StarPU's scheduler may put any task on any worker.  The
 * trained classifier lives in the job (its scalars, read by both
 * implementations) and, packed, in a registered vector that StarPU moves to
 * the GPU for the CUDA classification.  FFTW plans (CPU) and cuFFT plan sets
 * (CUDA) are made once per worker and size, serialised, and reused; GPU
 * scratch comes from the stream-ordered pool.  Training stays on the CPU:
 * libsvm's SMO solver is sequential and takes 0.4 % of a micrograph's
 * busy time (doc/apple.md).
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
	starpu_data_handle_t *hresp_parts, *hseg_parts; /* partition plans */
	struct apple_task_arg *args, *next_arg;
	int nargs;
	int refs;         /* values pointing at the job */
	apple_picks_val_t *picks;
	const char *path; /* the micrograph's, borrowed from its value */
};

/* Port types "apple.image", "apple.scores", "apple.classifier",
 * "apple.segmentation" and "apple.mask": the job, at the stage that made it. */
typedef struct apple_job_val {
	sp_value_t base;
	struct apple_job *job;
} apple_job_val_t;

/* apple.classify's parameters (the retrain bounds). */
struct classify_params {
	long long max_retrains;
	double retrain_seconds;
};

struct apple_task_arg {
	struct apple_job *job;
	sp_taskctx_t *ctx;
	int lo, hi; /* range of the task (queries or rows) */
};

/* ---- per-worker FFTW plans ---- */
static starpu_pthread_mutex_t plan_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;
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
	starpu_pthread_mutex_lock(&plan_lock);
	if (!registered) {
		atexit(free_plans);
		registered = 1;
	}
	apple_score_fft_free(&plans[w]);
	plans[w] = apple_score_fft_init(q);
	plan_q[w] = q;
	starpu_pthread_mutex_unlock(&plan_lock);
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

/* ---- nominal costs (apple_glue.h) ---- */

/* Window positions apple_refs_select() scans: the containers' ranges
 * (apk_container_range()), rows times columns. */
static double refs_scanned(const apple_sizes_t *s)
{
	int r0, r1, c0, c1;
	double rows = 0, cols = 0;
	for (int c = 0; c < s->ncy; c++) {
		apk_container_range(s->ny, s->nx, s->query, s->container, c, 0, &r0, &r1, &c0, &c1);
		rows += r1 > r0 ? r1 - r0 : 0;
	}
	for (int c = 0; c < s->ncx; c++) {
		apk_container_range(s->ny, s->nx, s->query, s->container, 0, c, &r0, &r1, &c0, &c1);
		cols += c1 > c0 ? c1 - c0 : 0;
	}
	return rows * cols;
}

/* One q x q real transform (r2c or c2r): 2.5 N log2 N, N = q^2. */
static double rfft2_flops(int q)
{
	double nn = (double)q * q;
	return nn > 1 ? 2.5 * nn * log2(nn) : 0.0;
}

/* prepare: bicubic resize, 2 per tap at 4 side/n taps per output (borders
 * not discounted), sidey nx then ny nx outputs: 8 sidey sidex + 8 sidey nx;
 * low-pass 2 APPLE_LOWPASS_TAPS ny nx; moments 3 q ny nwx + 2 q nwy nwx +
 * 6 nwy nwx; reference search 4 comparisons per scanned position; nref
 * reference spectra.  (A square: side = sidey = sidex, n = ny = nx.) */
double apple_prepare_flops(const apple_sizes_t *s)
{
	double sy = s->sidey, sx = s->sidex, ny = s->ny, nx = s->nx, q = s->query;
	double nwy = s->nwy, nwx = s->nwx;
	return 8 * sy * sx + 8 * sy * nx + 2.0 * APPLE_LOWPASS_TAPS * ny * nx +
	       3 * q * ny * nwx + 2 * q * nwy * nwx + 6 * nwy * nwx + 4 * refs_scanned(s) +
	       s->nref * rfft2_flops(s->query);
}

/* read inside the margins 4 sidey sidex, resize intermediate 8 sidey nx,
 * resized 8 ny nx, low-passed 16 ny nx (8 written, 8 read by the moments),
 * row sums 32 ny nwx, moments 16 nwy nwx, reference search 16 per scanned
 * position + 8 nref, per reference 24 q^2 + 48 ns (ns =
 * apple_score_spec_size(q) complex values: the window gathered,
 * transformed, copied into the spectra). */
double apple_prepare_bytes(const apple_sizes_t *s)
{
	double sy = s->sidey, sx = s->sidex, ny = s->ny, nx = s->nx, q = s->query;
	double nwy = s->nwy, nwx = s->nwx;
	double ns = (double)apple_score_spec_size(s->query);
	return 4 * sy * sx + 8 * sy * nx + 24 * ny * nx + 32 * ny * nwx + 16 * nwy * nwx +
	       16 * refs_scanned(s) + 8.0 * s->nref + s->nref * (24 * q * q + 48 * ns);
}

/* score: per query its window's r2c, then per reference the product
 * R conj(W) (6 per complex value, ns of them), the c2r, the maximum (q^2
 * comparisons) and (max - p0) / q^2 (2):
 * nquery (F + nref (6 ns + F + q^2 + 2)), F = 2.5 q^2 log2 q^2. */
double apple_score_flops(const apple_sizes_t *s, int nquery)
{
	double ns = (double)apple_score_spec_size(s->query), nn = (double)s->query * s->query;
	double f = rfft2_flops(s->query);
	return nquery * (f + s->nref * (6 * ns + f + nn + 2));
}

/* per query: window gathered (16 q^2), r2c (8 q^2 + 16 ns), its spectrum
 * read by the products (16 ns); per (query, reference): product written
 * and read by the c2r (32 ns), correlation written and read (16 q^2), the
 * response (8); the references' spectra once (16 nref ns).  Real queries
 * only: a chunk's padding is not counted. */
double apple_score_bytes(const apple_sizes_t *s, int nquery)
{
	double ns = (double)apple_score_spec_size(s->query), nn = (double)s->query * s->query;
	return nquery * (24 * nn + 32 * ns) + (double)nquery * s->nref * (32 * ns + 16 * nn + 8) +
	       16.0 * s->nref * ns;
}

/* classify: per window position standardise (2 sub, 2 div), then per
 * support vector d0, d1 (2), d0^2 + d1^2 (3), -gamma d2 (1), exp
 * (APPLE_EXP_FLOPS), coef exp and the sum (2), then - rho and the sign (2):
 * nrows nw (6 + nsv (8 + APPLE_EXP_FLOPS)). */
double apple_classify_flops(const apple_sizes_t *s, int nrows, int nsv)
{
	return (double)nrows * s->nwx * (6 + (double)nsv * (8 + APPLE_EXP_FLOPS));
}

/* mean and std read, segmentation written: 17 per window position; the
 * packed support vectors (3 doubles each) once. */
double apple_classify_bytes(const apple_sizes_t *s, int nrows, int nsv)
{
	return 17.0 * nrows * s->nwx + 24.0 * nsv;
}

/* morphology: comparisons and integer arithmetic per window position of
 * apple_morphology(), data-dependent loops (flood, envelope pops,
 * union-find walks) taken once per position: hole filling 20 (border test
 * 4, flood 4 neighbours x (bound, value, visited) + 4 bounds), all-filled
 * scan 1, Meijster's distance transform 53 (columns 7; rows: 2 envelope
 * tests of 10, the separator 19, the back scan 7), erosion 1, 8-labelling
 * 27 (neighbour tests 10, 2 unions of 6, labels 5), component hits 3:
 * 105 nwy nwx. */
double apple_morph_flops(const apple_sizes_t *s)
{
	return 105.0 * s->nwy * s->nwx;
}

/* per window position, the CUDA twin's passes: hole filling 27 (labels
 * initialised 5, merged 5, compressed 8, flags 2, filled 7), distance
 * transform 37 (columns 13, rows 24 with their envelopes), erosion 5,
 * 8-labelling 18, hits 13 (flags 1, marks 5, output 7): 100 nwy nwx (the
 * corner-cleared refill runs only when the fill leaves no 0). */
double apple_morph_bytes(const apple_sizes_t *s)
{
	return 100.0 * s->nwy * s->nwx;
}

/* ---- codelets ---- */

/* After a kernel that polls sp_cancel_requested(): when a stop was
 * requested its output may be partial, and the task fails as cancelled
 * (the item is, already: sp_run_interrupt()), so nothing reads it. */
static void task_cancelled(struct apple_task_arg *a)
{
	if (sp_cancel_requested())
		sp_status_set(a->ctx->status, SP_ECANCELED, "%s: cancelled", a->ctx->kernel);
}

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
	apple_score_fft_t *f = worker_plan(s->query);
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
	task_cancelled(a);
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
	apple_score_responses(f, (const double *)STARPU_VECTOR_GET_PTR(buffers[0]), s->nx, s->query,
			      s->gx, (const double *)STARPU_VECTOR_GET_PTR(buffers[1]), s->nref, a->lo,
			      a->hi, (double *)STARPU_VECTOR_GET_PTR(buffers[2]));
	task_cancelled(a);
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
				 apple_moments_cuda_scratch(s->ny, s->nx, s->query),
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
	task_cancelled(a);
}

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

static void morph_cuda(void *buffers[], void *cl_arg)
{
	struct apple_task_arg *a = cl_arg;
	struct apple_job *j = a->job;
	struct CUstream_st *st = (struct CUstream_st *)starpu_cuda_get_local_stream();
	if (sp_status_failed(a->ctx->status))
		return;
	void *scr = task_scratch(a, apple_morphology_cuda_scratch(j->s.nwy, j->s.nwx), st);
	if (scr == NULL)
		return;
	if (apple_morphology_cuda(&j->s, (const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
				  (uint8_t *)STARPU_VECTOR_GET_PTR(buffers[1]), scr, st) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: %s", a->ctx->kernel,
			      sp_cuda_last_error());
	sp_cuda_free_async(scr, st);
}
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

static size_t score_size(struct starpu_task *task, unsigned nimpl)
{
	const struct apple_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)apple_score_bytes(&a->job->s, a->hi - a->lo);
}

static size_t classify_size(struct starpu_task *task, unsigned nimpl)
{
	const struct apple_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)apple_classify_bytes(&a->job->s, a->hi - a->lo, a->job->maxsv);
}

static size_t morph_size(struct starpu_task *task, unsigned nimpl)
{
	const struct apple_task_arg *a = task->cl_arg;
	(void)nimpl;
	return (size_t)apple_morph_bytes(&a->job->s);
}

SP_CODELET(prepare_cl, "apple_prepare", prepare_cpu, SP_CUDA(prepare_cuda), NULL, prepare_size,
	   5, STARPU_R, STARPU_W, STARPU_W, STARPU_W, STARPU_W);
SP_CODELET(score_cl, "apple_score", score_cpu, SP_CUDA(score_cuda), NULL, score_size, 3,
	   STARPU_R, STARPU_R, STARPU_W);
SP_CODELET(train_cl, "apple_train", train_cpu, SP_NO_CUDA, NULL, NULL, 3, STARPU_R, STARPU_R,
	   STARPU_W);
SP_CODELET(classify_cl, "apple_classify", classify_cpu, SP_CUDA(classify_cuda), NULL,
	   classify_size, 4, STARPU_R, STARPU_R, STARPU_R, STARPU_W);
SP_CODELET(morph_cl, "apple_morph", morph_cpu, SP_CUDA(morph_cuda), NULL, morph_size, 2,
	   STARPU_R, STARPU_W);
SP_CODELET(pick_cl, "apple_pick", pick_cpu, SP_NO_CUDA, NULL, NULL, 4, STARPU_R, STARPU_W, STARPU_R,
	   STARPU_R);

/* Hands buf, registered in h by alloc_reg(..., 1), back to the item buffer
 * pool, with the size its handle records, h unregistered without
 * coherency: every task is done and nothing reads the content any more,
 * so none is copied back from a GPU that wrote it last. */
static void pool_unreg(starpu_data_handle_t h, void *buf)
{
	if (h == NULL)
		return; /* then buf was not allocated either */
	const size_t bytes = (size_t)starpu_vector_get_nx(h) * starpu_vector_get_elemsize(h);
	starpu_data_unregister_no_coherency(h);
	sp_item_buffer_put(buf, bytes);
}

static void job_unref(struct apple_job *j)
{
	if (j == NULL || --j->refs > 0)
		return;
	if (j->hresp_parts != NULL)
		starpu_data_partition_clean(j->hresp, (unsigned)j->k_score, j->hresp_parts);
	if (j->hseg_parts != NULL)
		starpu_data_partition_clean(j->hseg, (unsigned)j->k_class, j->hseg_parts);
	/* the buffers to the next micrograph of this size (up to ~95 MB a 4k
	 * micrograph that the GPU may have written last) */
	pool_unreg(j->him, j->im);
	pool_unreg(j->hmean, j->mean);
	pool_unreg(j->hstd, j->std);
	pool_unreg(j->hspec, j->spec);
	pool_unreg(j->hresp, j->resp);
	pool_unreg(j->hseg, j->seg);
	pool_unreg(j->hmorph, j->morph);
	if (j->hsvc != NULL)
		starpu_data_unregister_no_coherency(j->hsvc);
	starpu_free(j->svc);
	free(j->hresp_parts);
	free(j->hseg_parts);
	free(j->ref);
	free(j->score);
	free(j->qb);
	free(j->rb);
	free(j->args);
	apple_svm_free(&j->svm);
	free(j);
}

static void job_val_free(sp_value_t *v)
{
	apple_job_val_t *jv = (apple_job_val_t *)v;
	job_unref(jv->job);
	free(jv);
}

/* A new value of port type `type` holding a reference to j, in *out. */
static int job_val(struct apple_job *j, const char *type, sp_value_t **out)
{
	apple_job_val_t *jv = calloc(1, sizeof *jv);
	if (jv == NULL)
		return SP_ENOMEM;
	jv->base.type = type;
	jv->base.free_cb = job_val_free;
	jv->job = j;
	j->refs++;
	*out = &jv->base;
	return 0;
}

static void picks_free(sp_value_t *v)
{
	apple_picks_val_t *pv = (apple_picks_val_t *)v;
	if (pv->h != NULL)
		starpu_data_unregister(pv->h);
	job_unref(pv->job);
	starpu_free(pv->xy);
	free(pv->score);
	free(pv);
}

/* Splits [0, n) into k near-equal ranges: b[0..k]. */
static void split(int n, int k, int *b)
{
	for (int i = 0; i <= k; i++)
		b[i] = (int)((long long)n * i / k);
}

/* n elements registered in *h, from starpu_malloc(), or with pooled from the
 * item buffer pool (sp_item_buffer_get(): a buffer of an earlier
 * micrograph of the same size, whose stale content does not matter where
 * the producer writes it whole before anything reads it; pool_unreg()
 * hands it back); -1 when out of memory. */
static int alloc_reg(starpu_data_handle_t *h, void **buf, size_t n, size_t elem, int pooled)
{
	size_t bytes;
	*buf = NULL;
	if (!sp_vector_nx_ok(n) || sp_mul_size(n ? n : 1, elem, &bytes))
		return -1; /* not one StarPU vector (apple_params_derive() bounds the sizes) */
	if ((pooled ? sp_item_buffer_get(buf, bytes) : starpu_malloc(buf, bytes)) != 0) {
		*buf = NULL;
		return -1;
	}
	starpu_vector_data_register(h, STARPU_MAIN_RAM, (uintptr_t)*buf, (uint32_t)n, elem);
	return 0;
}

/* Plans the partition of vector h into the ranges b[0..k] of `unit`
 * elements each; the children go to *parts.  Returns 0 or SP_ENOMEM. */
static int plan_parts(starpu_data_handle_t h, const int *b, int k, int unit,
		      starpu_data_handle_t **parts)
{
	uint32_t *len = malloc((size_t)k * sizeof *len);
	*parts = calloc((size_t)k, sizeof **parts);
	if (len == NULL || *parts == NULL) {
		free(len);
		free(*parts);
		*parts = NULL;
		return SP_ENOMEM;
	}
	for (int i = 0; i < k; i++)
		len[i] = (uint32_t)((b[i + 1] - b[i]) * unit);
	struct starpu_data_filter f = { .filter_func = starpu_vector_filter_list,
					.nchildren = (unsigned)k, .filter_arg_ptr = len };
	starpu_data_partition_plan(h, &f, *parts);
	free(len);
	return 0;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The argument of the job's next task, for the stage's ctx over [lo, hi). */
static struct apple_task_arg *next_arg(struct apple_job *j, sp_taskctx_t *ctx, int lo, int hi)
{
	struct apple_task_arg *a = j->next_arg++;
	assert(a < j->args + j->nargs);
	a->job = j;
	a->ctx = ctx;
	a->lo = lo;
	a->hi = hi;
	return a;
}

/* sp_task_insert()'s arguments for a task's flops (apple_glue.h; 0: not
 * counted) and its argument over [lo, hi), which lives in the job. */
#define APPLE_TASK_ARG(j, ctx, lo, hi, flops)                                             \
	STARPU_FLOPS, (double)(flops), STARPU_CL_ARGS_NFREE, next_arg(j, ctx, lo, hi),     \
		sizeof(struct apple_task_arg)

/* The job behind a stage's input value. */
static struct apple_job *in_job(sp_value_t *const *in)
{
	return ((apple_job_val_t *)in[0])->job;
}

/* Tasks a tiled stage splits into: its `tile:`, else 4 per worker; at most n. */
static int tiles(const sp_gstage_t *st, int n)
{
	int k = st->tile > 0 ? st->tile : 4 * (int)sp_item_nworkers();
	if (k < 1)
		k = 1;
	return k < n ? k : n;
}

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
	struct apple_job *j = calloc(1, sizeof *j);
	sp_err_t err = { 0 };

	if (j == NULL || job_val(j, "apple.image", out) != 0) {
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
	    alloc_reg(&j->him, (void **)&j->im, (size_t)s->ny * s->nx, sizeof(double), 1) ||
	    alloc_reg(&j->hmean, (void **)&j->mean, (size_t)s->nwy * s->nwx, sizeof(double), 1) ||
	    alloc_reg(&j->hstd, (void **)&j->std, (size_t)s->nwy * s->nwx, sizeof(double), 1) ||
	    alloc_reg(&j->hspec, (void **)&j->spec, (size_t)s->nref * 2 * apple_score_spec_size(s->query),
		      sizeof(double), 1) ||
	    alloc_reg(&j->hresp, (void **)&j->resp, (size_t)nquery * s->nref, sizeof(double), 1) ||
	    alloc_reg(&j->hseg, (void **)&j->seg, (size_t)s->nwy * s->nwx, 1, 1) ||
	    alloc_reg(&j->hmorph, (void **)&j->morph, (size_t)s->nwy * s->nwx, 1, 1) ||
	    alloc_reg(&j->hsvc, (void **)&j->svc, (size_t)j->maxsv * 3, sizeof(double), 0))
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

/* Tiles over query windows, each writing its rows of the response cube; the
 * cube is gathered (asynchronously) for the training. */
static int score_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	struct apple_job *j = in_job(in);
	const apple_sizes_t *s = &j->s;
	int nquery = s->gy * s->gx, ret = 0;

	if (job_val(j, "apple.scores", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(sp_item_status(item)))
		return 0;
	j->k_score = tiles(st, nquery);
	j->qb = malloc((size_t)(j->k_score + 1) * sizeof *j->qb);
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_score");
	if (j->qb == NULL || ctx == NULL)
		return SP_ENOMEM;
	split(nquery, j->k_score, j->qb);
	if (plan_parts(j->hresp, j->qb, j->k_score, s->nref, &j->hresp_parts) != 0)
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

static int submit_train(struct apple_job *j, sp_taskctx_t *ctx)
{
	return sp_task_insert(ctx, &train_cl, STARPU_R, j->hresp, STARPU_R, j->him, STARPU_W, j->hsvc,
			      APPLE_TASK_ARG(j, ctx, 0, 0, 0));
}

static int train_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	struct apple_job *j = in_job(in);

	if (job_val(j, "apple.classifier", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(sp_item_status(item)))
		return 0;
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_train");
	if (ctx == NULL)
		return SP_ENOMEM;
	return submit_train(j, ctx);
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
	struct apple_job *j = in_job(in);
	const apple_sizes_t *s = &j->s;
	int ret = 0;

	if (job_val(j, "apple.segmentation", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(status))
		return 0;
	j->k_class = tiles(st, s->nwy);
	j->rb = malloc((size_t)(j->k_class + 1) * sizeof *j->rb);
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_classify");
	sp_taskctx_t *ctx_train = sp_item_taskctx(item, st, "apple_train");
	if (j->rb == NULL || ctx == NULL || ctx_train == NULL)
		return SP_ENOMEM;
	split(s->nwy, j->k_class, j->rb);
	if (plan_parts(j->hseg, j->rb, j->k_class, s->nwx, &j->hseg_parts) != 0)
		return SP_ENOMEM;
	const struct classify_params *cp = st->typed;
	const double t0 = now_s();
	struct apple_task_arg *round0 = j->next_arg;
	for (int attempt = 0; ret == 0; attempt++) {
		/* the last round's tasks are done (its segmentation was read) */
		j->next_arg = round0;
		if (attempt > 0)
			ret = submit_train(j, ctx_train);
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

static int morphology_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
			  sp_value_t **out)
{
	struct apple_job *j = in_job(in);

	if (job_val(j, "apple.mask", out) != 0)
		return SP_ENOMEM;
	if (sp_status_failed(sp_item_status(item)))
		return 0;
	sp_taskctx_t *ctx = sp_item_taskctx(item, st, "apple_morph");
	if (ctx == NULL)
		return SP_ENOMEM;
	return sp_task_insert(ctx, &morph_cl, STARPU_R, j->hseg, STARPU_W, j->hmorph,
			      APPLE_TASK_ARG(j, ctx, 0, 0, apple_morph_flops(&j->s)));
}

static int pick_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		    sp_value_t **out)
{
	struct apple_job *j = in_job(in);
	const apple_sizes_t *s = &j->s;
	apple_picks_val_t *pv = calloc(1, sizeof *pv);

	if (pv == NULL)
		return SP_ENOMEM;
	pv->base.type = "apple.picks";
	pv->base.free_cb = picks_free;
	pv->job = j;
	pv->path = j->path;
	j->refs++;
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
	    alloc_reg(&pv->h, (void **)&pv->xy, (size_t)pv->maxpick * 2, sizeof(int), 0) != 0)
		return sp_status_set(sp_item_status(item), SP_ENOMEM, "%s: out of memory", j->path);
	return sp_task_insert(ctx, &pick_cl, STARPU_R, j->hmorph, STARPU_W, pv->h, STARPU_R, j->hmean,
			      STARPU_R, j->hstd, APPLE_TASK_ARG(j, ctx, 0, 0, 0));
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

#define CP(f) SP_AT(struct classify_params, f)
static const sp_param_spec_t classify_params[] = {
	{ "max_retrains", SP_PT_INT, "8", 0, 1000, NULL,
	  "retrains at most (ASPIRE: unbounded); then the micrograph fails", CP(max_retrains) },
	{ "retrain_seconds", SP_PT_FLOAT, "120", 0, 1e6, NULL,
	  "no retrain starts this long after the first classification; then the micrograph fails",
	  CP(retrain_seconds) },
};
#undef CP

#define APPLE_PORT(var, name, type, help) \
	static const sp_port_spec_t var[] = { { name, type, help } }

APPLE_PORT(mic_port, "micrograph", "apple.micrograph", "the micrograph");
APPLE_PORT(image_port, "image", "apple.image",
	   "binned, filtered image; window moments; reference spectra (and the job's sizes)");
APPLE_PORT(scores_port, "scores", "apple.scores", "query x reference response cube");
APPLE_PORT(classifier_port, "classifier", "apple.classifier", "the trained SVM");
APPLE_PORT(seg_port, "segmentation", "apple.segmentation", "particle/noise class of every window");
APPLE_PORT(mask_port, "mask", "apple.mask", "segmentation after hole filling and erosion");
APPLE_PORT(picks_port, "picks", "apple.picks", "particle centres (x, y), original pixels");

/* A stage kind of this file: one input port, one output; `...` adds
 * initialisers (preprocess's parameters: the sizes derive from them all
 * together, as ASPIRE's configuration). */
#define APPLE_KIND(var, name_, help_, run_, in_, out_, impl_, codelets_, ...) \
	const sp_stage_kind_t var = {                               \
		.name = name_,                                      \
		.codelets = codelets_,                              \
		.help = help_,                                      \
		SP_KIND_INPUTS(in_),                                \
		SP_KIND_OUTPUTS(out_),                              \
		.impl = impl_,                                      \
		.run = run_,                                        \
		__VA_ARGS__                                         \
	}

APPLE_KIND(sp_apple_preprocess_kind, "apple.preprocess",
	   "APPLE: margins (the whole rectangle), bin x2, low-pass; window moments; reference spectra",
	   preprocess_run, mic_port, image_port, SP_IMPL_CPU_CUDA, "apple_prepare",
	   SP_KIND_PARAMS(preprocess_params, struct preprocess_params), .estimate = preprocess_estimate);
APPLE_KIND(sp_apple_score_kind, "apple.score",
	   "APPLE: FFT cross-correlation scores of every query window (tiles of windows)",
	   score_run, image_port, scores_port, SP_IMPL_CPU_CUDA, "apple_score",
	   .tile = "tasks over ranges of query windows; default 4 per worker");
APPLE_KIND(sp_apple_train_kind, "apple.train",
	   "APPLE: score map, training set and SVM (libsvm; CPU only: 0.4 % of the time, doc/apple.md)",
	   train_run, scores_port, classifier_port, SP_IMPL_CPU, "apple_train");
APPLE_KIND(sp_apple_classify_kind, "apple.classify",
	   "APPLE: SVM classification of every window (tiles of rows); retrains if uniform",
	   classify_run, classifier_port, seg_port, SP_IMPL_CPU_CUDA, "apple_classify apple_train",
	   .tile = "tasks over ranges of window rows; default 4 per worker",
	   SP_KIND_PARAMS(classify_params, struct classify_params));
APPLE_KIND(sp_apple_morphology_kind, "apple.morphology",
	   "APPLE: hole filling, erosions and the component size filter",
	   morphology_run, seg_port, mask_port, SP_IMPL_CPU_CUDA, "apple_morph");
APPLE_KIND(sp_apple_pick_kind, "apple.pick",
	   "APPLE: particle centres, overlap removal, original coordinates (CPU only: 0.7 % of the time, doc/apple.md)",
	   pick_run, mask_port, picks_port, SP_IMPL_CPU, "apple_pick");
