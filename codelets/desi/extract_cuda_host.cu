/* The DESI extraction's CUDA host helpers: the scratch layout, the kernels'
 * parameter structs, the step timing (SP_CUDA_STEPS) and the batched
 * eigensolver call (extract_cuda.h; the kernels: extract_cuda.cu). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "extract_cuda.h"

namespace desi_cu {

static size_t take(size_t *at, size_t bytes)
{
	size_t o = *at;
	*at += (bytes + 255) / 256 * 256;
	return o;
}

static int npix_of(const desi_batch_t *b, int i)
{
	return (b->ny[i] > 0 ? b->ny[i] : 0) * (b->nx[i] > 0 ? b->nx[i] : 0);
}

size_t smem_bytes(int m)
{
	const int half = (m + 1) / 2;
	return (2 * (size_t)m * m + 2 * (size_t)m + 2 * (size_t)half) * sizeof(double) +
	       (2 * (size_t)half + 1) * sizeof(int);
}

layout make_layout(const desi_batch_t *b, phase ph)
{
	layout L = {};
	const size_t m = (size_t)b->p.nwave, n = (size_t)b->p.nfib * m;
	const size_t k = (size_t)b->p.core_nf * m, nf_out = (size_t)desi_batch_fields(b);
	L.cap = b->np < CHUNK ? b->np : CHUNK;
	for (int c0 = 0; c0 < b->np; c0 += CHUNK) {
		size_t s = 0;
		for (int i = c0; i < b->np && i < c0 + CHUNK; i++)
			s += (size_t)npix_of(b, i);
		L.pixcap = s > L.pixcap ? s : L.pixcap;
	}
	const size_t P = (size_t)(L.cap > 0 ? L.cap : 1), px = L.pixcap > 0 ? L.pixcap : 1;
	size_t at = 0;
	L.pix = take(&at, px * sizeof(double));
	L.ivar = take(&at, px * sizeof(double));
	if (ph == PATCH) {
		L.total = at;
		return L;
	}
	L.chi2 = take(&at, px * sizeof(double));
	L.tpos = take(&at, px * sizeof(double));
	L.z = take(&at, P * n * k * sizeof(double));
	L.c = take(&at, P * (size_t)b->p.core_nf * m * m * sizeof(double));
	L.core = take(&at, P * (size_t)b->p.core_nf * nf_out * m * sizeof(double));
	L.pa = take(&at, P * sizeof(double *));
	L.px = take(&at, P * sizeof(double *));
	L.pl = take(&at, P * sizeof(double *));
	L.pzt = take(&at, P * sizeof(double *));
	L.info = take(&at, P * sizeof(int));
	L.info_rs = take(&at, sizeof(int));
	L.fail = take(&at, P * sizeof(int));
	L.ev = take(&at, P * (size_t)b->p.core_nf * m * sizeof(double));
	L.einfo = take(&at, P * (size_t)b->p.core_nf * sizeof(int));
	L.total = at;
	return L;
}

static const char *const step_name[S_N] = { "window+pointers", "potrf (batched)",
					     "solve x (k_solve)", "eye+trsm Z (trailing)",
					     "gemm C_bb (strided)", "eigen (syevb|jacobi+R)",
					     "R, flux, ivar (syevb)", "chi2pix+chi2core", "write" };
static pthread_mutex_t steps_mu = PTHREAD_MUTEX_INITIALIZER;
static double steps_ms[S_N];
static long steps_chunks, steps_patches;

static void steps_print(void)
{
	double tot = 0.0;
	for (int k = 0; k < S_N; k++)
		tot += steps_ms[k];
	fprintf(stderr, "desi_decorrelate_batch_cuda steps (SP_CUDA_STEPS): %ld chunks, %ld patches, "
			"%.3f ms GPU in all\n", steps_chunks, steps_patches, tot);
	for (int k = 0; k < S_N; k++)
		fprintf(stderr, "  %-22s %10.3f ms  %5.1f %%  %8.4f ms/chunk\n", step_name[k],
			steps_ms[k], tot > 0.0 ? 100.0 * steps_ms[k] / tot : 0.0,
			steps_chunks > 0 ? steps_ms[k] / (double)steps_chunks : 0.0);
}

/* 1 when SP_CUDA_STEPS is set (not "0"); the first call registers the report. */
static int steps_on(void)
{
	static int on = -1;
	pthread_mutex_lock(&steps_mu);
	if (on < 0) {
		const char *v = getenv("SP_CUDA_STEPS");
		on = v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
		if (on)
			atexit(steps_print);
	}
	pthread_mutex_unlock(&steps_mu);
	return on;
}


void steps_begin(steps *t)
{
	t->on = steps_on();
	for (int k = 0; t->on && k <= S_N; k++)
		if (cudaEventCreate(&t->ev[k]) != cudaSuccess)
			t->on = 0; /* no timing rather than a failed task */
}

void steps_mark(steps *t, int k, cudaStream_t st)
{
	if (t->on)
		cudaEventRecord(t->ev[k], st);
}

void steps_end(steps *t, int np)
{
	if (!t->on)
		return;
	float ms[S_N] = { 0 };
	if (cudaEventSynchronize(t->ev[S_N]) == cudaSuccess)
		for (int k = 0; k < S_N; k++)
			cudaEventElapsedTime(&ms[k], t->ev[k], t->ev[k + 1]);
	for (int k = 0; k <= S_N; k++)
		cudaEventDestroy(t->ev[k]);
	pthread_mutex_lock(&steps_mu);
	for (int k = 0; k < S_N; k++)
		steps_ms[k] += ms[k];
	steps_chunks++;
	steps_patches += np;
	pthread_mutex_unlock(&steps_mu);
}

/* 1 when step 5 uses cuSOLVER's batched eigensolver: in CUDA 13 builds,
 * unless SP_DESI_EIGEN=jacobi. */
int eigen_syevb(void)
{
#if CUDART_VERSION >= 13000
	const char *v = getenv("SP_DESI_EIGEN");
	return v == NULL || strcmp(v, "jacobi") != 0;
#else
	return 0;
#endif
}

/* 1 when SP_DESI_SOLVE=potrs asks for cusolverDnDpotrsBatched. */
int solve_potrs(void)
{
	const char *v = getenv("SP_DESI_SOLVE");
	return v != NULL && strcmp(v, "potrs") == 0;
}

#if CUDART_VERSION >= 13000
/* cusolverDnXsyevBatched over the nb m x m blocks of cbb (column-major,
 * m m apart): eigenvectors in place, eigenvalues into ev, infos into
 * einfo.  Its device workspace is stream-ordered (cudaMallocAsync), its
 * host workspace (none in CUDA 13.0) malloc'ed. */
int syev_batched(cusolverDnHandle_t hs, cudaStream_t st, int m, int nb, double *cbb,
			double *ev, int *einfo)
{
	cusolverDnParams_t prm;
	size_t dbytes = 0, hbytes = 0;
	void *dws = NULL, *hws = NULL;
	int ret = 0;
	if (cusolverDnCreateParams(&prm) != CUSOLVER_STATUS_SUCCESS) {
		sp_cuda_note_error("cusolverDnCreateParams", "failed");
		return SP_ECUDA;
	}
	cusolverStatus_t s = cusolverDnXsyevBatched_bufferSize(
		hs, prm, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, m, CUDA_R_64F, cbb, m,
		CUDA_R_64F, ev, CUDA_R_64F, &dbytes, &hbytes, nb);
	if (s == CUSOLVER_STATUS_SUCCESS && dbytes > 0 &&
	    cudaMallocAsync(&dws, dbytes, st) != cudaSuccess)
		s = CUSOLVER_STATUS_ALLOC_FAILED;
	if (s == CUSOLVER_STATUS_SUCCESS && hbytes > 0 && (hws = malloc(hbytes)) == NULL)
		s = CUSOLVER_STATUS_ALLOC_FAILED;
	if (s == CUSOLVER_STATUS_SUCCESS)
		s = cusolverDnXsyevBatched(hs, prm, CUSOLVER_EIG_MODE_VECTOR,
					   CUBLAS_FILL_MODE_LOWER, m, CUDA_R_64F, cbb, m,
					   CUDA_R_64F, ev, CUDA_R_64F, dws, dbytes, hws, hbytes,
					   einfo, nb);
	if (s != CUSOLVER_STATUS_SUCCESS) {
		char why[32];
		snprintf(why, sizeof why, "status %d", (int)s);
		sp_cuda_note_error("cusolverDnXsyevBatched", why);
		ret = SP_ECUDA;
	}
	if (dws != NULL)
		cudaFreeAsync(dws, st);
	if (hws != NULL) {
		cudaStreamSynchronize(st); /* the host workspace is the call's until then */
		free(hws);
	}
	cusolverDnDestroyParams(prm);
	return ret;
}
#endif

/* The kernels' scalar parameters of batch b. */
common common_of(const desi_batch_t *b)
{
	const desi_patch_t *p = &b->p;
	common c;
	c.nfib = p->nfib;
	c.m = p->nwave;
	c.n = p->nfib * p->nwave;
	c.sy = p->sy;
	c.sx = p->sx;
	c.core_f0 = p->core_f0;
	c.core_nf = p->core_nf;
	c.core_w0 = p->core_w0;
	c.ndiag = p->ndiag;
	c.nd = 2 * p->ndiag + 1;
	c.xflux = b->xflux != 0;
	c.nf_out = desi_batch_fields(b);
	c.fib0 = b->fib0;
	c.nfullwave = b->nfullwave;
	c.npix_y = b->npix_y;
	c.npix_x = b->npix_x;
	c.nwave_grid = b->nwave_grid;
	c.nfield = b->nfield;
	c.col0 = b->col0;
	c.regularize = p->regularize;
	c.psferr = p->psferr;
	c.dw = b->dw;
	return c;
}

/* The geometry of patches [c0, c0 + CHUNK) of b; *maxpix: the largest window. */
geom geom_of(const desi_batch_t *b, int c0, size_t *maxpix)
{
	geom g;
	long long off = 0;
	*maxpix = 0;
	g.np = b->np - c0 < CHUNK ? b->np - c0 : CHUNK;
	for (int k = 0; k < g.np; k++) {
		const int i = c0 + k;
		g.ymin[k] = b->ymin[i];
		g.ny[k] = b->ny[i];
		g.xmin[k] = b->xmin[i];
		g.nx[k] = b->nx[i];
		g.w0[k] = b->w0[i];
		g.cnw[k] = b->core_nw[i];
		g.poff[k] = off;
		off += npix_of(b, i);
		*maxpix = (size_t)npix_of(b, i) > *maxpix ? (size_t)npix_of(b, i) : *maxpix;
	}
	return g;
}

/* Geometry the kernels support: SP_EINVAL otherwise. */
int check_batch(const desi_batch_t *b)
{
	const desi_patch_t *p = &b->p;
	if (p->nwave <= 0 || p->nfib <= 0 || p->core_nf <= 0 || p->core_f0 < 0 ||
	    p->core_f0 + p->core_nf > p->nfib || b->nfield < desi_batch_fields(b) || p->core_w0 < 0)
		return SP_EINVAL;
	for (int i = 0; i < b->np; i++)
		if (b->core_nw[i] < 0 || p->core_w0 + b->core_nw[i] > p->nwave)
			return SP_EINVAL;
	if (((size_t)DSK_NB * DSK_NB + (size_t)p->nfib * p->nwave) * sizeof(double) > 48 * 1024)
		return SP_EINVAL; /* k_solve's x and k_chi2pix's column list: n <= 5120 */
	return 0;
}

} /* namespace desi_cu */
