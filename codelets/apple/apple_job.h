/* The APPLE stages' job: the micrograph's sizes and registered buffers, shared by its six stages (apple_job.c). */
#ifndef SP_APPLE_JOB_H
#define SP_APPLE_JOB_H

#include <starpu.h>

#include "item.h"
#include "apple_glue.h"
#include "apple_kern.h"

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
 * libsvm's SMO solver is sequential and a small share of a micrograph's
 * busy time (doc/apple.md).
 */

struct apple_job {
	sp_job_t base;    /* first: the values carry it (sp_job_val(), item.h) */
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
	apple_picks_val_t *picks;
	const char *path; /* the micrograph's, borrowed from its value */
};

struct apple_task_arg {
	struct apple_job *job;
	sp_taskctx_t *ctx;
	int lo, hi; /* range of the task (queries or rows) */
};

/* sp_task_insert()'s arguments for a task's flops (apple_glue.h; 0: not
 * counted) and its argument over [lo, hi), which lives in the job. */
#define APPLE_TASK_ARG(j, ctx, lo, hi, flops)                                             \
	STARPU_FLOPS, (double)(flops), STARPU_CL_ARGS_NFREE, apple__next_arg(j, ctx, lo, hi),     \
		sizeof(struct apple_task_arg)

/* The stages' ports: one input and one output each (apple_job.c). */
extern const sp_port_spec_t apple__mic_port[1], apple__image_port[1], apple__scores_port[1],
	apple__classifier_port[1], apple__seg_port[1], apple__mask_port[1], apple__picks_port[1];

/* An APPLE stage kind: one input port, one output; `...` adds
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

/* A new job, holding no reference yet (sp_job_val() takes the first), or
 * NULL on ENOMEM; the last sp_job_unref() frees it. */
struct apple_job *apple__job_new(void);

/* The job of a stage's input value (every APPLE port but the micrograph). */
static inline struct apple_job *apple__job(const sp_value_t *v)
{
	return (struct apple_job *)sp_job_of(v);
}

/* The calling worker's FFTW plans for q x q windows (made once per worker and size). */
apple_score_fft_t *apple__worker_plan(int q);

/* After a kernel that polls sp_cancel_requested(): the task fails as cancelled. */
void apple__task_cancelled(struct apple_task_arg *a);

/* n elements registered in *h (pooled: from the item buffer pool); -1 when out of memory. */
int apple__alloc_reg(starpu_data_handle_t *h, void **buf, size_t n, size_t elem, int pooled);

/* Splits [0, n) into k near-equal ranges: b[0..k]. */
void apple__split(int n, int k, int *b);

/* Plans the partition of vector h into the ranges b[0..k] of `unit` elements. */
int apple__plan_parts(starpu_data_handle_t h, const int *b, int k, int unit,
		      starpu_data_handle_t **parts);

/* The argument of the job's next task, for the stage's ctx over [lo, hi). */
struct apple_task_arg *apple__next_arg(struct apple_job *j, sp_taskctx_t *ctx, int lo, int hi);

/* Tasks a tiled stage splits into: its `tile:`, else 4 per worker; at most n. */
int apple__tiles(const sp_item_t *item, const sp_gstage_t *st, int n);

/* Submits the job's training task (apple.train's; apple.classify's retrains too). */
int apple__submit_train(struct apple_job *j, sp_taskctx_t *ctx);

#ifdef SP_HAVE_CUDA
/* Stream-ordered scratch for a CUDA task, or NULL with the status set. */
void *apple__task_scratch(struct apple_task_arg *a, size_t bytes, struct CUstream_st *stream);
/* The worker's cuFFT plan set for a task, or NULL with the status set. */
apple_score_cuda_t *apple__task_cplan(struct apple_task_arg *a, int *chunk);
#endif

#endif /* SP_APPLE_JOB_H */
