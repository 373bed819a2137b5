/* J-synchronization CPU kernels and the host-side index helpers of jsync.h. */
#include "jsync.h"
#include "jsync_kern.h"

#include "cancel.h"
#include "cpuisa.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/*
 * DESIGN.  The inner loops run over k in lanes of 4 triplets (one choice
 * byte) with GCC/Clang vector extensions, so they vectorise at -O2 whatever
 * the target.  jsync_cpu_simd.h holds them, and is compiled twice here
 * (cpuisa.h): two SSE2 halves of a byte for the build's x86-64 target, one
 * AVX2 register under `#pragma GCC target("avx2")`; each call goes to the
 * variant sp_cpu_isa() names.  Both compute the same bits.
 * The residual arithmetic is written in one explicit order, without any
 * fused multiply-add (the file must be compiled with -ffp-contract=off,
 * which -std=c11 implies for GCC), and jsync_cuda.cu evaluates the same
 * expressions with __dmul_rn/__dadd_rn/__dsub_rn: the choices are then
 * bit-identical on both devices.  The order, per entry (a, c) of the 3x3
 * products, row-major, each cost summed from entry (0,0) to (2,2):
 *   x = A[a][0]*B[0][c] + A[a][1]*B[1][c];  y = A[a][2]*B[2][c]
 *   s = x + y            (AB)         d = y - x   (J-conjugated products)
 *   c0 += (s - C)^2
 *   c1 += (d + C)^2 if a < 2, (d - C)^2 if a == 2     (-d - C = -(d + C))
 *   c2 += (d + C)^2 if c < 2, (d - C)^2 if c == 2
 *   c3 += (s - C)^2 if (a < 2) == (c < 2), (s + C)^2 otherwise
 * Negation is exact and rounding is symmetric, so (+-e)^2 is the same double;
 * the sums start from +0, which adds exactly.
 */

/* The 2-bit choice codes as branch-free sign masks (0: +, -1: -):
 * s_ij_jk is - for 1, 2; s_ik_jk is - for 2, 3; s_ij_ik is - for 1, 3. */
#define JS_M1(c) (-(int64_t)(((c) ^ ((c) >> 1)) & 1))
#define JS_M2(c) (-(int64_t)(((c) >> 1) & 1))
#define JS_M3(c) (-(int64_t)((c) & 1))

/* The index arithmetic is jsync_kern.h's, shared with the CUDA kernels. */
void jsync_pair_ij(int64_t N, int64_t p, int64_t *i, int64_t *j)
{
	jsk_pair_ij(N, p, i, j);
}

/* Triplets in the runs of all pairs before p (0 <= p <= P). */
static int64_t tri_before(int64_t N, int64_t p)
{
	int64_t i, j;

	if (p >= jsync_npairs(N))
		return jsync_ntriplets(N);
	jsync_pair_ij(N, p, &i, &j);
	/* Rows before i, then runs j' = i+1 .. j-1 of row i, whose lengths
	 * N-1-j' run from N-2-i down to N-j. */
	int64_t m = N - i, hi = N - 2 - i, lo = N - j - 1;
	return jsync_ntriplets(N) - m * (m - 1) * (m - 2) / 6 +
	       hi * (hi + 1) / 2 - lo * (lo + 1) / 2;
}

/* Choice bytes of the runs of all pairs before p (0 <= p <= P). */
static int64_t bytes_before(int64_t N, int64_t p)
{
	int64_t i, j;

	if (p >= jsync_npairs(N))
		return jsk_bytes_upto2(N - 2);
	jsk_pair_ij(N, p, &i, &j);
	return jsk_bytes_before(N, i, j);
}

size_t jsync_choice_bytes(int64_t N, int64_t p0, int64_t p1)
{
	return (size_t)(bytes_before(N, p1) - bytes_before(N, p0));
}

int64_t jsync_chunk_triplets(int64_t N, int64_t p0, int64_t p1)
{
	return tri_before(N, p1) - tri_before(N, p0);
}

size_t jsync_split(int64_t N, size_t nchunks, int64_t *bounds)
{
	int64_t P = jsync_npairs(N), T = jsync_ntriplets(N);
	size_t n = 0;

	assert(nchunks >= 1);
	bounds[0] = 0;
	if (T > 0) {
		int64_t q = T / (int64_t)nchunks, rem = T % (int64_t)nchunks;
		for (size_t c = 1; c < nchunks; c++) {
			/* Smallest p with tri_before(p) >= c T / nchunks. */
			int64_t target = q * (int64_t)c +
					 (rem * (int64_t)c + (int64_t)nchunks - 1) /
						 (int64_t)nchunks;
			int64_t lo = bounds[n], hi = P;
			while (lo < hi) {
				int64_t mid = lo + (hi - lo) / 2;
				if (tri_before(N, mid) >= target)
					hi = mid;
				else
					lo = mid + 1;
			}
			/* A chunk whose runs are all empty would start at the
			 * first pair after the last triplet: never open one. */
			if (lo > bounds[n] && tri_before(N, lo) < T)
				bounds[++n] = lo;
		}
	}
	bounds[++n] = P;
	return n;
}

int64_t jsync_first_nonrotation(const double *R, int64_t P, double tol, double *dev)
{
	for (int64_t p = 0; p < P; p++) {
		const double *M = R + 9 * p;
		double f = 0.0;
		for (int a = 0; a < 3; a++)
			for (int c = 0; c < 3; c++) {
				/* (R^T R)[a][c] - I[a][c]: columns a and c */
				double g = M[a] * M[c] + M[3 + a] * M[3 + c] + M[6 + a] * M[6 + c];
				g -= a == c;
				f += g * g;
			}
		f = sqrt(f);
		/* !(f <= tol): a NaN or an overflow to inf fails too */
		if (!(f <= tol)) {
			*dev = isfinite(f) ? f : INFINITY;
			return p;
		}
	}
	*dev = 0.0;
	return P;
}

int jsync_quantize(const double *v, int64_t P, int64_t *vq)
{
	double vmax = 0.0;
	int x, e;

	/* inline compares and bit arithmetic: fmax() and llrint(ldexp()) are
	 * library calls per value, most of the host time of an iteration */
	for (int64_t p = 0; p < P; p++) {
		const double a = fabs(v[p]);
		vmax = a > vmax ? a : vmax; /* a NaN is skipped, as fmax() does */
	}
	if (vmax == 0.0) {
		memset(vq, 0, (size_t)P * sizeof *vq);
		return 0;
	}
	/* vmax = m 2^x with m in [0.5, 1): vmax 2^(QBITS - x) <= 2^QBITS. */
	frexp(vmax, &x);
	e = JSYNC_QBITS - x;
	/* v 2^e is exact (a power of two, no overflow: |v 2^e| <= 2^QBITS);
	 * adding and subtracting 1.5 2^52 rounds it to an integer, to nearest
	 * with ties to even (the ulp there is 1, and |v 2^e| < 2^51), which
	 * is llrint() in the default rounding mode; the difference converts
	 * to int64 exactly. */
	const double scale = ldexp(1.0, e), magic = 0x1.8p52;
	for (int64_t p = 0; p < P; p++) {
		const double y = v[p] * scale;
		vq[p] = (int64_t)((y + magic) - magic);
	}
	return e;
}

/* One entry (a, c) of the four residuals, written out per entry so that the
 * sign pattern is fixed at compile time (E1, E2: the residual of c1, c2 is
 * dp = d + C or dm = d - C; E3: that of c3 is e0 = s - C or sp = s + C). */
#define JS_ENTRY(a, c, E1, E2, E3)                                          \
	do {                                                                \
		JS_VD x = A[3 * (a)] * B[(c)] + A[3 * (a) + 1] * B[3 + (c)];   \
		JS_VD y = A[3 * (a) + 2] * B[6 + (c)];                         \
		JS_VD s = x + y, d = y - x, cc = C[3 * (a) + (c)];             \
		JS_VD e0 = s - cc, dp = d + cc, dm = d - cc, sp = s + cc;      \
		(void)dp;                                                   \
		(void)dm;                                                   \
		(void)sp;                                                   \
		c0 = c0 + e0 * e0;                                          \
		c1 = c1 + (E1) * (E1);                                      \
		c2 = c2 + (E2) * (E2);                                      \
		c3 = c3 + (E3) * (E3);                                      \
	} while (0)

/* Whether a stop was requested (src/base/cancel.h), asked every 64 pairs of
 * a kernel's range (a pair's run is up to N - 2 triplets: a few
 * microseconds at N = 1000, ~10 us at N = 20,000): the kernel then returns
 * with its output partial, and the glue fails the task as cancelled. */
#define JS_STOPPED(k) (((k) & 63) == 0 && sp_cancel_requested())

/* The kernels in the baseline variant (the build's own target) and the AVX2
 * one (src/base/cpuisa.h). */
#define JS_W SP_BASELINE_W
#define JS_FN(name) name##_base
#include "jsync_cpu_simd.h"
#if SP_HAVE_AVX2_VARIANT
SP_AVX2_BEGIN
#define JS_W 4
#define JS_FN(name) name##_avx2
#include "jsync_cpu_simd.h"
SP_AVX2_END
#endif

static const jsync_cpu_kernels_t variants[SP_ISA_COUNT] = {
	[SP_ISA_BASELINE] = { best_base, matvec_base, fused_base },
#if SP_HAVE_AVX2_VARIANT
	[SP_ISA_AVX2] = { best_avx2, matvec_avx2, fused_avx2 },
#endif
};

const jsync_cpu_kernels_t *jsync_cpu_kernels(int isa)
{
	if (isa < 0 || isa >= SP_ISA_COUNT || !sp_isa_supported(isa) || variants[isa].best == NULL)
		return NULL;
	return &variants[isa];
}

void jsync_best_cpu(const double *R, int64_t N, int64_t p0, int64_t p1, uint8_t *choices)
{
	variants[sp_cpu_isa()].best(R, N, p0, p1, choices);
}

void jsync_matvec_cpu(const uint8_t *choices, int64_t N, int64_t p0, int64_t p1,
		      const int64_t *vq, int64_t *wq)
{
	variants[sp_cpu_isa()].matvec(choices, N, p0, p1, vq, wq);
}

void jsync_matvec_fused_cpu(const double *R, int64_t N, int64_t p0, int64_t p1,
			    const int64_t *vq, int64_t *wq)
{
	variants[sp_cpu_isa()].fused(R, N, p0, p1, vq, wq);
}
