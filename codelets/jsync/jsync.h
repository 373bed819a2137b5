/* J-synchronization kernels: the contract shared by the CPU and CUDA twins. */
#ifndef SP_JSYNC_H
#define SP_JSYNC_H

/*
 * DESIGN.  N images give P = N(N-1)/2 pairs (i < j, row-major upper
 * triangle) and T = N(N-1)(N-2)/6 triplets (i < j < k).  Triplets are
 * grouped by their first pair (i, j): the "run" of pair p = (i, j) holds the
 * L = N-1-j triplets k = j+1 .. N-1.  This makes every kernel loop over k
 * touch v[pair(j,k)] and v[pair(i,k)] at consecutive addresses, so CPU loops
 * vectorise and GPU loads coalesce.  Work is split into chunks of whole runs
 * (a pair range [p0, p1)), with near-equal triplet counts.
 *
 * Per-triplet choice ("best" in 0..3, see science/jsync.md): 2 bits, packed
 * per run: triplet t = k-j-1 of a run lives in byte t/4 of the run at bit
 * 2*(t%4); each run starts on a byte boundary (ceil(L/4) bytes).  A chunk's
 * buffer is the concatenation of the runs of its pairs.
 *
 * The product w = S v is accumulated in 64-bit integers: v is quantised as
 * vq = v * 2^e (e chosen so that max|vq| <= 2^40), then every kernel adds
 * +-vq terms.  Integer addition is associative, so w is bit-identical
 * whatever the task split, the reduction order or the device (CPU or CUDA),
 * and so is the whole power iteration.  |w| <= 2(N-2) * 2^40 < 2^62 for
 * N <= 2^20 (JSYNC_MAX_N); w * 2^-e is exact in double (|w| < 2^53 * 2^9 is
 * rounded at 1e-16 relative).  The quantisation error, 2^-40 of max|v|, is far
 * below any eps the power method is run with.
 *
 * All arrays are C order.  R is [P][3][3] float64, row-major matrices.
 * Kernels never include StarPU.  CUDA kernels are asynchronous on `stream`
 * and take device pointers.
 */

#include <stddef.h>
#include <stdint.h>

#define JSYNC_MAX_N (1 << 20)
/* The largest N whose rotations, 9 N (N - 1) / 2 doubles, fit one StarPU
 * vector (src/base/sizes.h: 2^32 - 1 elements); jsync.read refuses more. */
#define JSYNC_MAX_N_VECTOR 30894
#define JSYNC_QBITS 40

/* Pair index of (i, j), 0 <= i < j < N. */
static inline int64_t jsync_pair(int64_t N, int64_t i, int64_t j)
{
	return (2 * N - i - 1) * i / 2 + j - i - 1;
}

/* Inverse of jsync_pair(). */
void jsync_pair_ij(int64_t N, int64_t p, int64_t *i, int64_t *j);

static inline int64_t jsync_npairs(int64_t N) { return N * (N - 1) / 2; }
static inline int64_t jsync_ntriplets(int64_t N) { return N * (N - 1) * (N - 2) / 6; }

/* Bytes of the packed choices of the runs of pairs [p0, p1). */
size_t jsync_choice_bytes(int64_t N, int64_t p0, int64_t p1);

/* Triplets in the runs of pairs [p0, p1). */
int64_t jsync_chunk_triplets(int64_t N, int64_t p0, int64_t p1);

/* Splits pairs [0, P) into at most nchunks ranges of near-equal triplet
 * counts (empty runs are never a chunk of their own): bounds[0] = 0,
 * bounds[n] = P, n returned (n <= nchunks; bounds has nchunks+1 room). */
size_t jsync_split(int64_t N, size_t nchunks, int64_t *bounds);

/* Signs of the three edges of a triplet for choice c:
 * (s_ij_jk, s_ik_jk, s_ij_ik) = 0:(+,+,+) 1:(-,+,-) 2:(-,-,+) 3:(+,-,-). */

/* Quantises v[0..P) into vq; returns e (so vq = rint(v * 2^e)).  A zero
 * vector gives e = 0 and vq = 0. */
int jsync_quantize(const double *v, int64_t P, int64_t *vq);

/* The first of the P matrices of R that is not a rotation: a non-finite
 * entry, or ||R^T R - I||_F > tol.  J-sync's power method assumes rotations;
 * on an all-zero or a scaled matrix (1e308) it "converges" to meaningless
 * signs, so such an input is refused instead.  Returns its index, or P when
 * every matrix is a rotation; *dev receives that matrix's deviation (inf
 * when it is not finite). */
int64_t jsync_first_nonrotation(const double *R, int64_t P, double tol, double *dev);

/* The tolerance jsync.read applies: rotations written in float32 and read
 * back deviate by about 1e-7. */
#define JSYNC_ROT_TOL 1e-3

/* ---- CPU kernels (single-threaded) ----
 * Each polls sp_cancel_requested() (src/base/cancel.h) every 64 pairs and
 * returns early when a stop was requested: its output is then partial, and
 * the caller drops it (the item is cancelled). */

/* The choices of every triplet in the runs of pairs [p0, p1) of R, written
 * packed into choices (jsync_choice_bytes(N, p0, p1) bytes). */
void jsync_best_cpu(const double *R, int64_t N, int64_t p0, int64_t p1,
		    uint8_t *choices);

/* wq += S_chunk vq: the contribution of the triplets of runs [p0, p1), with
 * choices as written by jsync_best_*.  vq, wq have P entries. */
void jsync_matvec_cpu(const uint8_t *choices, int64_t N, int64_t p0, int64_t p1,
		      const int64_t *vq, int64_t *wq);

/* Same as jsync_best_cpu followed by jsync_matvec_cpu, without storing the
 * choices (the "recompute" memory mode). */
void jsync_matvec_fused_cpu(const double *R, int64_t N, int64_t p0, int64_t p1,
			    const int64_t *vq, int64_t *wq);

/* The same three kernels in one SIMD variant (src/base/cpuisa.h): the
 * functions above call those of sp_cpu_isa(); this gives a given variant,
 * NULL where it cannot run (not built, or the CPU lacks it).  For tests and
 * benchmarks: every variant computes the same bits. */
typedef struct jsync_cpu_kernels {
	void (*best)(const double *R, int64_t N, int64_t p0, int64_t p1, uint8_t *choices);
	void (*matvec)(const uint8_t *choices, int64_t N, int64_t p0, int64_t p1,
		       const int64_t *vq, int64_t *wq);
	void (*fused)(const double *R, int64_t N, int64_t p0, int64_t p1, const int64_t *vq,
		      int64_t *wq);
} jsync_cpu_kernels_t;
const jsync_cpu_kernels_t *jsync_cpu_kernels(int isa);

/* ---- CUDA kernels (asynchronous on stream; return 0 or SP_ECUDA) ---- */
struct CUstream_st;
int jsync_best_cuda(const double *R, int64_t N, int64_t p0, int64_t p1,
		    uint8_t *choices, struct CUstream_st *stream);
int jsync_matvec_cuda(const uint8_t *choices, int64_t N, int64_t p0, int64_t p1,
		      const int64_t *vq, int64_t *wq, struct CUstream_st *stream);
int jsync_matvec_fused_cuda(const double *R, int64_t N, int64_t p0, int64_t p1,
			    const int64_t *vq, int64_t *wq, struct CUstream_st *stream);
/* w[0..n) = 0, and dst[0..n) += src[0..n): the reduction's init and merge. */
int jsync_zero_cuda(int64_t *w, int64_t n, struct CUstream_st *stream);
int jsync_add_cuda(int64_t *dst, const int64_t *src, int64_t n,
		   struct CUstream_st *stream);

#endif /* SP_JSYNC_H */
