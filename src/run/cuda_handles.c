/* Per-worker cuBLAS/cuSOLVER handles bound to the workers' streams, and async scratch. */
#include "cuda_handles.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
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

static void create_cb(void *arg)
{
	(void)arg;
	int w = starpu_worker_get_id();
	cudaStream_t s = starpu_cuda_get_local_stream();
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
