/* Per-thread bodies of the J-sync CUDA kernels, plain C shared with a host emulation. */
#ifndef SP_JSYNC_KERN_H
#define SP_JSYNC_KERN_H

/*
 * DESIGN.  jsync_cuda.cu's kernels give each block a run (the triplets of
 * one pair p = (i, j), see jsync.h) with a grid stride, and each thread of
 * the block a share of the run: whole choice bytes (4 triplets) in
 * best_kernel, single triplets in the matvec kernels.  What one thread
 * computes is a function here, compiled as __host__ __device__ for CUDA and
 * as plain C for tests/test_jsync_kern.c, which runs the blocks and their
 * threads as host loops (threads in shuffled order: they race on wq) and
 * compares with jsync_cpu.c bit for bit.  Those functions are twins of
 * jsync_cpu.c's loops, written apart: the residuals use the same double
 * operations in the same order (on the device explicit round-to-nearest
 * intrinsics, never contracted into FMA; on the host the project builds
 * with -ffp-contract=off), and wq gathers integer terms, whose sum does not
 * depend on the order.  The index arithmetic (pairs, runs, byte offsets) is
 * not a twin but shared: jsync_cpu.c calls it.  The block reduction (warp shuffles) stays in the
 * .cu: it adds integers, which the emulation adds in a plain loop.
 */

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define JSK_FN static __host__ __device__ inline
#else
#define JSK_FN static inline
#endif

#ifdef __CUDA_ARCH__
#define JSK_MUL(a, b) __dmul_rn((a), (b))
#define JSK_ADD(a, b) __dadd_rn((a), (b))
#define JSK_SUB(a, b) __dsub_rn((a), (b))
#define JSK_LDG(p) __ldg(p)
#define JSK_ATOMIC_ADD(p, v) atomicAdd((unsigned long long *)(p), (unsigned long long)(v))
#else
#define JSK_MUL(a, b) ((a) * (b))
#define JSK_ADD(a, b) ((a) + (b))
#define JSK_SUB(a, b) ((a) - (b))
#define JSK_LDG(p) (*(p))
#define JSK_ATOMIC_ADD(p, v) (*(p) = (int64_t)((uint64_t)*(p) + (uint64_t)(v)))
#endif

/* Launch geometry, shared with the emulation. */
#define JSK_BEST_THREADS 64
#define JSK_MV_THREADS 128

JSK_FN int64_t jsk_pair(int64_t N, int64_t i, int64_t j)
{
	return (2 * N - i - 1) * i / 2 + j - i - 1;
}

/* Inverse of jsk_pair: pair(i, i+1) = (2N-i-1) i / 2 is the first pair of
 * row i; the quadratic is inverted in double, then the rounding corrected.
 * The CPU code uses it too (jsync_pair_ij). */
JSK_FN void jsk_pair_ij(int64_t N, int64_t p, int64_t *i, int64_t *j)
{
	double b = (double)(2 * N - 1);
	int64_t r = (int64_t)((b - sqrt(b * b - 8.0 * (double)p)) / 2.0);

	if (r < 0)
		r = 0;
	if (r > N - 2)
		r = N - 2;
	while (r > 0 && jsk_pair(N, r, r + 1) > p)
		r--;
	while (r < N - 2 && jsk_pair(N, r + 1, r + 2) <= p)
		r++;
	*i = r;
	*j = p - jsk_pair(N, r, r + 1) + r + 1;
}

/* F(L) = sum_{l=0..L} ceil(l/4): the choice bytes of runs of lengths
 * 0..L; and G(M) = sum_{L=0..M} F(L). */
JSK_FN int64_t jsk_bytes_upto(int64_t L)
{
	if (L < 0)
		return 0;
	int64_t q = L / 4, r = L % 4;
	return 2 * q * (q + 1) + r * (q + 1);
}

JSK_FN int64_t jsk_bytes_upto2(int64_t M)
{
	if (M < 0)
		return 0;
	int64_t Q = M / 4, R = M % 4;
	return 8 * (Q - 1) * Q * (Q + 1) / 3 + 3 * Q * (Q + 1) +
	       (R + 1) * 2 * Q * (Q + 1) + (Q + 1) * R * (R + 1) / 2;
}

/* Choice bytes of the runs of pairs before p = (i, j): rows i' < i hold
 * runs of lengths N-2-i' .. 0; row i up to j-1 holds lengths N-2-i down to
 * N-j. */
JSK_FN int64_t jsk_bytes_before(int64_t N, int64_t i, int64_t j)
{
	return jsk_bytes_upto2(N - 2) - jsk_bytes_upto2(N - 2 - i) +
	       jsk_bytes_upto(N - 2 - i) - jsk_bytes_upto(N - 1 - j);
}

/* One run: its pair (i, j), its L triplets, the first pairs (j, j+1) and
 * (i, j+1) of its k loop, and its choice bytes' offset in a chunk whose
 * choices start at byte `base` of the whole problem's. */
typedef struct jsk_run {
	int64_t i, j, L, jk, ik, off;
} jsk_run_t;

JSK_FN jsk_run_t jsk_run(int64_t N, int64_t p, int64_t base)
{
	jsk_run_t r;
	jsk_pair_ij(N, p, &r.i, &r.j);
	r.L = N - 1 - r.j;
	r.jk = jsk_pair(N, r.j, r.j + 1);
	r.ik = p + 1;
	r.off = jsk_bytes_before(N, r.i, r.j) - base;
	return r;
}

/* One entry (a, c) of the residuals; E1, E2, E3 as in jsync_cpu.c. */
#define JSK_ENTRY(a, c, E1, E2, E3)                                           \
	do {                                                                  \
		double x = JSK_ADD(JSK_MUL(A[3 * (a)], B[(c)]),               \
				   JSK_MUL(A[3 * (a) + 1], B[3 + (c)]));      \
		double y = JSK_MUL(A[3 * (a) + 2], B[6 + (c)]);               \
		double s = JSK_ADD(x, y), d = JSK_SUB(y, x), cc = C[3 * (a) + (c)]; \
		double e0 = JSK_SUB(s, cc), dp = JSK_ADD(d, cc), dm = JSK_SUB(d, cc); \
		double sp = JSK_ADD(s, cc);                                   \
		(void)dp;                                                     \
		(void)dm;                                                     \
		(void)sp;                                                     \
		c0 = JSK_ADD(c0, JSK_MUL(e0, e0));                            \
		c1 = JSK_ADD(c1, JSK_MUL((E1), (E1)));                        \
		c2 = JSK_ADD(c2, JSK_MUL((E2), (E2)));                        \
		c3 = JSK_ADD(c3, JSK_MUL((E3), (E3)));                        \
	} while (0)

/* The choice (0..3) of one triplet: A = R_ij in registers, Bg = R_jk and
 * Cg = R_ik in global memory. */
JSK_FN unsigned jsk_choice(const double *A, const double *Bg, const double *Cg)
{
	double B[9], C[9];
	double c0 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0;

	for (int e = 0; e < 9; e++) {
		B[e] = JSK_LDG(Bg + e);
		C[e] = JSK_LDG(Cg + e);
	}
	JSK_ENTRY(0, 0, dp, dp, e0);
	JSK_ENTRY(0, 1, dp, dp, e0);
	JSK_ENTRY(0, 2, dp, dm, sp);
	JSK_ENTRY(1, 0, dp, dp, e0);
	JSK_ENTRY(1, 1, dp, dp, e0);
	JSK_ENTRY(1, 2, dp, dm, sp);
	JSK_ENTRY(2, 0, dm, dp, sp);
	JSK_ENTRY(2, 1, dm, dp, sp);
	JSK_ENTRY(2, 2, dm, dm, e0);
	unsigned best = 0;
	double m = c0;
	if (c1 < m) {
		m = c1;
		best = 1;
	}
	if (c2 < m) {
		m = c2;
		best = 2;
	}
	if (c3 < m)
		best = 3;
	return best;
}

/* best_kernel's thread body: choice byte b of a run (triplets 4b .. 4b+3
 * of its L), from A = R_ij and the run's first R_jk (Bp) and R_ik (Cp). */
JSK_FN uint8_t jsk_best_byte(const double *A, const double *Bp, const double *Cp, int64_t b,
			     int64_t L)
{
	unsigned byte = 0;
	for (int l = 0; l < 4; l++) {
		int64_t t = 4 * b + l;
		if (t < L)
			byte |= jsk_choice(A, Bp + 9 * t, Cp + 9 * t) << (2 * l);
	}
	return (uint8_t)byte;
}

/* Triplet t's choice in a run's packed bytes. */
JSK_FN unsigned jsk_choice_at(const uint8_t *run, int64_t t)
{
	return (run[t / 4] >> (2 * (t % 4))) & 3;
}

/* The matvec kernels' thread body: the three edge updates of one triplet
 * of choice c; adds the wq[jk] and wq[ik] terms (atomically on the device)
 * and returns the wq[ij] term, which the block sums. */
JSK_FN int64_t jsk_update(unsigned c, int64_t vij, int64_t vjk, int64_t vik, int64_t *wjk,
			  int64_t *wik)
{
	int64_t m1 = -(int64_t)((c ^ (c >> 1)) & 1);
	int64_t m2 = -(int64_t)((c >> 1) & 1);
	int64_t m3 = -(int64_t)(c & 1);
	int64_t a = ((vij ^ m1) - m1) + ((vik ^ m2) - m2);
	int64_t b = ((vij ^ m3) - m3) + ((vjk ^ m2) - m2);

	JSK_ATOMIC_ADD(wjk, a);
	JSK_ATOMIC_ADD(wik, b);
	return ((vjk ^ m1) - m1) + ((vik ^ m3) - m3);
}

#endif /* SP_JSYNC_KERN_H */
