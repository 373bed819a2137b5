/* The APPLE stages' job, the helpers they share, and their nominal costs (apple_job.h, apple_glue.h). */
#include <assert.h>
#include <pthread.h>
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

/* ---- per-worker FFTW plans ---- */
static starpu_pthread_mutex_t plan_lock = STARPU_PTHREAD_MUTEX_INITIALIZER;
static apple_score_fft_t *plans[STARPU_NMAXWORKERS];
static int plan_q[STARPU_NMAXWORKERS];

static void free_plans(void)
{
	for (int w = 0; w < STARPU_NMAXWORKERS; w++)
		apple_score_fft_free(&plans[w]);
}

apple_score_fft_t *apple__worker_plan(int q)
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


/* After a kernel that polls sp_cancel_requested(): when a stop was
 * requested its output may be partial, and the task fails as cancelled
 * (the item is, already: sp_run_interrupt()), so nothing reads it. */
void apple__task_cancelled(struct apple_task_arg *a)
{
	if (sp_cancel_requested())
		sp_status_set(a->ctx->status, SP_ECANCELED, "%s: cancelled", a->ctx->kernel);
}

#ifdef SP_HAVE_CUDA
/* Stream-ordered scratch for a CUDA task, or NULL with the status set. */
void *apple__task_scratch(struct apple_task_arg *a, size_t bytes, struct CUstream_st *stream)
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
apple_score_cuda_t *apple__task_cplan(struct apple_task_arg *a, int *chunk)
{
	if (sp_status_failed(a->ctx->status))
		return NULL;
	apple_score_cuda_t *pl = worker_cplan(&a->job->s, chunk);
	if (pl == NULL)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: cannot make the cuFFT plans", a->ctx->kernel);
	return pl;
}
#endif

/* Hands buf, registered in h by apple__alloc_reg(..., 1), back to the item buffer
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


/* The last reference gone: the buffers back to the pool, the handles unregistered. */
static void job_free(sp_job_t *job)
{
	struct apple_job *j = (struct apple_job *)job;
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

struct apple_job *apple__job_new(void)
{
	struct apple_job *j = calloc(1, sizeof *j);
	if (j != NULL)
		j->base.free_cb = job_free;
	return j;
}

/* Splits [0, n) into k near-equal ranges: b[0..k]. */
void apple__split(int n, int k, int *b)
{
	for (int i = 0; i <= k; i++)
		b[i] = (int)((long long)n * i / k);
}

/* n elements registered in *h, from starpu_malloc(), or with pooled from the
 * item buffer pool (sp_item_buffer_get(): a buffer of an earlier
 * micrograph of the same size, whose stale content does not matter where
 * the producer writes it whole before anything reads it; pool_unreg()
 * hands it back); -1 when out of memory. */
int apple__alloc_reg(starpu_data_handle_t *h, void **buf, size_t n, size_t elem, int pooled)
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
int apple__plan_parts(starpu_data_handle_t h, const int *b, int k, int unit,
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

/* The argument of the job's next task, for the stage's ctx over [lo, hi). */
struct apple_task_arg *apple__next_arg(struct apple_job *j, sp_taskctx_t *ctx, int lo, int hi)
{
	struct apple_task_arg *a = j->next_arg++;
	assert(a < j->args + j->nargs);
	a->job = j;
	a->ctx = ctx;
	a->lo = lo;
	a->hi = hi;
	return a;
}

/* Tasks a tiled stage splits into: its `tile:`, else 4 per worker of the
 * item's lane; at most n. */
int apple__tiles(const sp_item_t *item, const sp_gstage_t *st, int n)
{
	int k = st->tile > 0 ? st->tile : 4 * (int)sp_item_nworkers(item);
	if (k < 1)
		k = 1;
	return k < n ? k : n;
}

/* The ports (apple_job.h): each stage's one input and one output. */
#define APPLE_PORT(var, name, type, help) \
	const sp_port_spec_t var[1] = { { name, type, help } }

APPLE_PORT(apple__mic_port, "micrograph", "apple.micrograph", "the micrograph");
APPLE_PORT(apple__image_port, "image", "apple.image",
	   "binned, filtered image; window moments; reference spectra (and the job's sizes)");
APPLE_PORT(apple__scores_port, "scores", "apple.scores", "query x reference response cube");
APPLE_PORT(apple__classifier_port, "classifier", "apple.classifier", "the trained SVM");
APPLE_PORT(apple__seg_port, "segmentation", "apple.segmentation", "particle/noise class of every window");
APPLE_PORT(apple__mask_port, "mask", "apple.mask", "segmentation after hole filling and erosion");
APPLE_PORT(apple__picks_port, "picks", "apple.picks", "particle centres (x, y), original pixels");
