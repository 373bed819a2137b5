/* Per-worker cuBLAS/cuSOLVER handles bound to the workers' streams, and async scratch. */
#include "cuda_handles.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#include <starpu.h>

static _Thread_local char last_error[256];

void sp_cuda_note_error(const char *call, const char *why)
{
	size_t n = strcspn(call, "( "); /* the function's name, not its arguments */
	snprintf(last_error, sizeof last_error, "%.*s: %s", (int)(n < 96 ? n : 96), call, why);
}

const char *sp_cuda_last_error(void)
{
	return last_error[0] != '\0' ? last_error : "a CUDA call failed";
}

int sp_cuda_status(int err, const char *where)
{
	if (err == 0)
		return 0;
	sp_cuda_note_error(where, cudaGetErrorString((cudaError_t)err));
	return SP_ECUDA;
}

int sp_cufft_status(int res, const char *where)
{
	char why[32];
	if (res == 0)
		return 0;
	snprintf(why, sizeof why, "cuFFT status %d", res);
	sp_cuda_note_error(where, why);
	return SP_ECUDA;
}

static cublasHandle_t blas[STARPU_NMAXWORKERS];
static cusolverDnHandle_t solver[STARPU_NMAXWORKERS];
static atomic_int failures;
static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;
static void (*hooks[8])(void);
static int nhooks;

void sp_cuda_at_shutdown(void (*fn)(void))
{
	pthread_mutex_lock(&hooks_lock);
	int known = 0;
	for (int i = 0; i < nhooks; i++)
		known |= hooks[i] == fn;
	if (!known && nhooks < (int)(sizeof hooks / sizeof hooks[0]))
		hooks[nhooks++] = fn;
	pthread_mutex_unlock(&hooks_lock);
}

static void hooks_cb(void *arg)
{
	(void)arg;
	for (int i = 0; i < nhooks; i++)
		hooks[i]();
}

/* The bytes the device's memory pool keeps after a synchronisation: at
 * most STARPIPE_CUDA_POOL_KEEP_MB MiB when set (0: CUDA's default, which
 * keeps nothing), else an eighth of the device's memory.  CUDA's default
 * hands every freed byte back to the driver at the next stream, event or
 * device synchronisation, so that a task's cudaMallocAsync (256 MiB for an
 * APPLE score task, cuSOLVER's workspace for DESI) maps the pages afresh
 * after one.  The pool keeps only what tasks asked for at once, not a
 * reservation: this bounds it. */
static unsigned long long pool_keep_bytes(void)
{
	const char *v = getenv("STARPIPE_CUDA_POOL_KEEP_MB");
	if (v != NULL && *v != '\0') {
		char *end;
		errno = 0;
		unsigned long long mb = strtoull(v, &end, 10);
		if (errno == 0 && *end == '\0' && v[0] != '-')
			return mb << 20;
		/* not a count: the default, as for an unset variable */
	}
	size_t free_b = 0, total_b = 0;
	if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
		return 0;
	return (unsigned long long)total_b / 8;
}

/* Sets the calling worker's device's default memory pool to keep
 * pool_keep_bytes(); a failure leaves CUDA's default (slower, not wrong). */
static void pool_keep(void)
{
	int dev;
	cudaMemPool_t pool;
	uint64_t keep = pool_keep_bytes();
	if (cudaGetDevice(&dev) == cudaSuccess &&
	    cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess)
		cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
}

static void create_cb(void *arg)
{
	(void)arg;
	int w = starpu_worker_get_id();
	cudaStream_t s = starpu_cuda_get_local_stream();
	pool_keep();
	if (cublasCreate(&blas[w]) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetStream(blas[w], s) != CUBLAS_STATUS_SUCCESS ||
	    cusolverDnCreate(&solver[w]) != CUSOLVER_STATUS_SUCCESS ||
	    cusolverDnSetStream(solver[w], s) != CUSOLVER_STATUS_SUCCESS)
		atomic_fetch_add(&failures, 1);
}

static void destroy_cb(void *arg)
{
	(void)arg;
	int w = starpu_worker_get_id();
	if (blas[w] != NULL)
		cublasDestroy(blas[w]);
	if (solver[w] != NULL)
		cusolverDnDestroy(solver[w]);
	blas[w] = NULL;
	solver[w] = NULL;
}

int sp_cuda_handles_init(sp_err_t *err)
{
	if (starpu_cuda_worker_get_count() == 0)
		return 0;
	atomic_store(&failures, 0);
	starpu_execute_on_each_worker(create_cb, NULL, STARPU_CUDA);
	if (atomic_load(&failures) != 0)
		return sp_seterr(err, SP_ECUDA, "cannot create cuBLAS/cuSOLVER handles on %d CUDA worker(s)",
				 atomic_load(&failures));
	return 0;
}

void sp_cuda_handles_shutdown(void)
{
	if (starpu_cuda_worker_get_count() == 0)
		return;
	pthread_mutex_lock(&hooks_lock);
	if (nhooks > 0)
		starpu_execute_on_each_worker(hooks_cb, NULL, STARPU_CUDA);
	nhooks = 0;
	pthread_mutex_unlock(&hooks_lock);
	starpu_execute_on_each_worker(destroy_cb, NULL, STARPU_CUDA);
}

void sp_cuda_handles(void **b, void **s)
{
	int w = starpu_worker_get_id();
	*b = blas[w];
	*s = solver[w];
}

int sp_cuda_malloc_async(void **p, size_t bytes, struct CUstream_st *stream)
{
	return cudaMallocAsync(p, bytes ? bytes : 1, (cudaStream_t)stream) == cudaSuccess ? 0 : SP_ECUDA;
}

void sp_cuda_free_async(void *p, struct CUstream_st *stream)
{
	if (p != NULL)
		cudaFreeAsync(p, (cudaStream_t)stream);
}
