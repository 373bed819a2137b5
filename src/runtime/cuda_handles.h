/* Per-worker CUDA library handles (cuBLAS, cuSOLVER) and stream-ordered scratch memory. */
#ifndef SP_CUDA_HANDLES_H
#define SP_CUDA_HANDLES_H

#include <stddef.h>

#include "error.h"

/*
 * DESIGN: starpipe creates its own library handles from the CUDA toolkit it
 * was compiled with, one per CUDA worker, bound to that worker's stream, once
 * per session (StarPU's starpu_cublas_init() is never called: see
 * doc/gpu.md).  Scratch memory comes from cudaMallocAsync on the worker's
 * stream: asynchronous and served from the device's memory pool, so no
 * synchronising cudaMalloc runs in a task; the pool keeps what it served
 * (up to an eighth of the device, STARPIPE_CUDA_POOL_KEEP_MB) instead of
 * CUDA's default of handing it all back at each synchronisation.
 */

struct CUstream_st;

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the handles on every CUDA worker; 0 or SP_ECUDA with err set. */
int sp_cuda_handles_init(sp_err_t *err);
void sp_cuda_handles_shutdown(void);

/* The calling CUDA worker's handles (cublasHandle_t, cusolverDnHandle_t). */
void sp_cuda_handles(void **blas, void **solver);

/* Registers fn to run on every CUDA worker at sp_cuda_handles_shutdown(),
 * before the handles go (to free per-worker plans or buffers a codelet
 * made on first use); at most 8, each once (later calls are ignored).
 * Thread-safe. */
void sp_cuda_at_shutdown(void (*fn)(void));

int sp_cuda_malloc_async(void **p, size_t bytes, struct CUstream_st *stream);
void sp_cuda_free_async(void *p, struct CUstream_st *stream);

/* The first failed CUDA, cuBLAS or cuSOLVER call of the calling thread's
 * last failure, as "cusolverDnDpotrfBatched: status 7" or
 * "cudaFuncSetAttribute: invalid argument" (cudaGetErrorString,
 * cublasGetStatusString).  The .cu host functions note it before they
 * return SP_ECUDA; sp_cuda_last_error() reads it (never NULL). */
void sp_cuda_note_error(const char *call, const char *why);
const char *sp_cuda_last_error(void);

/* For the .cu files: err (a cudaError_t) is 0, or noted for `where` with
 * cudaGetErrorString and SP_ECUDA returned; cufft is a cufftResult, noted
 * as "cuFFT status N". */
int sp_cuda_status(int err, const char *where);
int sp_cufft_status(int res, const char *where);

#ifdef __cplusplus
}
#endif

#endif /* SP_CUDA_HANDLES_H */
