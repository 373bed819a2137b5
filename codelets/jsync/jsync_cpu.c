/* J-synchronization CPU kernels and the host-side index helpers of jsync.h. */
#include "jsync.h"
#include "jsync_kern.h"

#include <assert.h>
#include <math.h>
#include <string.h>

/*
 * DESIGN.  The inner loops run over k in lanes of 4 triplets (one choice
 * byte) with GCC/Clang vector extensions, so they vectorise at -O2 whatever
 * the target (two SSE2 halves on plain x86-64, one AVX register with AVX).
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

/* Lanes of the residual code: as wide as the target's vector registers
 * (wider vectors are lowered through the stack by GCC, 4x slower). */
#if defined(__AVX__)
#define JS_W 4
#else
#define JS_W 2
#endif
typedef double vd __attribute__((vector_size(8 * JS_W)));
typedef int64_t vl __attribute__((vector_size(8 * JS_W)));

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

	for (int64_t p = 0; p < P; p++)
		vmax = fmax(vmax, fabs(v[p]));
	if (vmax == 0.0) {
		memset(vq, 0, (size_t)P * sizeof *vq);
		return 0;
	}
	/* vmax = m 2^x with m in [0.5, 1): vmax 2^(QBITS - x) <= 2^QBITS. */
	frexp(vmax, &x);
	e = JSYNC_QBITS - x;
	for (int64_t p = 0; p < P; p++)
		vq[p] = (int64_t)llrint(ldexp(v[p], e));
	return e;
}

/* One entry (a, c) of the four residuals, written out per entry so that the
 * sign pattern is fixed at compile time (E1, E2: the residual of c1, c2 is
 * dp = d + C or dm = d - C; E3: that of c3 is e0 = s - C or sp = s + C). */
#define JS_ENTRY(a, c, E1, E2, E3)                                          \
	do {                                                                \
		vd x = A[3 * (a)] * B[(c)] + A[3 * (a) + 1] * B[3 + (c)];   \
		vd y = A[3 * (a) + 2] * B[6 + (c)];                         \
		vd s = x + y, d = y - x, cc = C[3 * (a) + (c)];             \
		vd e0 = s - cc, dp = d + cc, dm = d - cc, sp = s + cc;      \
		(void)dp;                                                   \
		(void)dm;                                                   \
		(void)sp;                                                   \
		c0 = c0 + e0 * e0;                                          \
		c1 = c1 + (E1) * (E1);                                      \
		c2 = c2 + (E2) * (E2);                                      \
		c3 = c3 + (E3) * (E3);                                      \
	} while (0)

/* The four costs of JS_W consecutive triplets, A broadcast, B and C the
 * lanes; see DESIGN for the order of operations. */
static inline void costs(const vd *A, const vd *B, const vd *C, vd cost[4])
{
	vd c0 = { 0 }, c1 = { 0 }, c2 = { 0 }, c3 = { 0 };

	JS_ENTRY(0, 0, dp, dp, e0);
	JS_ENTRY(0, 1, dp, dp, e0);
	JS_ENTRY(0, 2, dp, dm, sp);
	JS_ENTRY(1, 0, dp, dp, e0);
	JS_ENTRY(1, 1, dp, dp, e0);
	JS_ENTRY(1, 2, dp, dm, sp);
	JS_ENTRY(2, 0, dm, dp, sp);
	JS_ENTRY(2, 1, dm, dp, sp);
	JS_ENTRY(2, 2, dm, dm, e0);
	cost[0] = c0;
	cost[1] = c1;
	cost[2] = c2;
	cost[3] = c3;
}

/* Triplets t .. t+JS_W-1 of a run (those < L; the rest zero) of the B and
 * C runs (consecutive 3x3 matrices) into lanes.  Lanes are built in
 * registers: scalar stores reloaded as a vector would stall on store
 * forwarding. */
static inline void load(const double *Bp, const double *Cp, int64_t t,
			int64_t L, vd B[9], vd C[9])
{
	const double *b = Bp + 9 * t, *c = Cp + 9 * t;

	if (L - t >= JS_W) {
		for (int e = 0; e < 9; e++) {
#if JS_W == 4
			B[e] = (vd){ b[e], b[9 + e], b[18 + e], b[27 + e] };
			C[e] = (vd){ c[e], c[9 + e], c[18 + e], c[27 + e] };
#else
			B[e] = (vd){ b[e], b[9 + e] };
			C[e] = (vd){ c[e], c[9 + e] };
#endif
		}
		return;
	}
	for (int e = 0; e < 9; e++) {
		for (int l = 0; l < JS_W; l++) {
			B[e][l] = t + l < L ? b[9 * l + e] : 0.0;
			C[e][l] = t + l < L ? c[9 * l + e] : 0.0;
		}
	}
}

/* The choice byte of triplets t .. t+3 of a run (pad lanes beyond L get
 * choice 0): first minimum, strict <. */
static inline unsigned choice_byte(const vd *A, const double *Bp,
				   const double *Cp, int64_t t, int64_t L)
{
	double cost[4][4];
	unsigned byte = 0;

	for (int h = 0; h < 4; h += JS_W) {
		vd B[9], C[9], cv[4];
		load(Bp, Cp, t + h, L, B, C);
		costs(A, B, C, cv);
		for (int q = 0; q < 4; q++)
			memcpy(&cost[q][h], &cv[q], sizeof cv[q]);
	}
	for (int l = 0; l < 4; l++) {
		double m = cost[0][l];
		unsigned best = 0;
		for (unsigned c = 1; c < 4; c++) {
			if (cost[c][l] < m) {
				m = cost[c][l];
				best = c;
			}
		}
		byte |= best << (2 * l);
	}
	return t + 4 <= L ? byte : byte & ((1u << (2 * (L - t))) - 1);
}

/* A (pair p's matrix) broadcast to lanes. */
static inline void broadcast(const double *A, vd Av[9])
{
	for (int e = 0; e < 9; e++)
		for (int l = 0; l < JS_W; l++)
			Av[e][l] = A[e];
}

void jsync_best_cpu(const double *R, int64_t N, int64_t p0, int64_t p1,
		    uint8_t *choices)
{
	int64_t i, j;

	if (p0 >= p1)
		return;
	jsync_pair_ij(N, p0, &i, &j);
	for (int64_t p = p0; p < p1; p++) {
		int64_t L = N - 1 - j;
		const double *Bp = R + 9 * jsync_pair(N, j, j + 1);
		const double *Cp = R + 9 * (p + 1);
		vd A[9];
		broadcast(R + 9 * p, A);
		for (int64_t t = 0; t < L; t += 4)
			*choices++ = (uint8_t)choice_byte(A, Bp, Cp, t, L);
		if (++j == N) {
			i++;
			j = i + 1;
		}
	}
}

/* wq[ij] is returned; wq[jk], wq[ik] of triplets t .. t+n-1 updated. */
static inline int64_t matvec_byte(unsigned byte, int n, int64_t vij,
				  const int64_t *vjk, const int64_t *vik,
				  int64_t *wjk, int64_t *wik)
{
	int64_t wij = 0;

	for (int l = 0; l < n; l++, byte >>= 2) {
		unsigned c = byte & 3;
		int64_t m1 = JS_M1(c), m2 = JS_M2(c), m3 = JS_M3(c);
		int64_t a = vjk[l], b = vik[l];
		wij += ((a ^ m1) - m1) + ((b ^ m3) - m3);
		wjk[l] += ((vij ^ m1) - m1) + ((b ^ m2) - m2);
		wik[l] += ((vij ^ m3) - m3) + ((a ^ m2) - m2);
	}
	return wij;
}

/* Full bytes in lanes: the choices as sign masks, then +-vq sums; the
 * wq[ij] terms go to the lanes of *acc (by pointer: no vector return ABI). */
static inline void matvec4(unsigned byte, int64_t vij, const int64_t *vjk,
			   const int64_t *vik, int64_t *wjk, int64_t *wik,
			   vl *acc)
{
	for (int h = 0; h < 4; h += JS_W, byte >>= 2 * JS_W) {
#if JS_W == 4
		vl c = { byte & 3, (byte >> 2) & 3, (byte >> 4) & 3,
			 (byte >> 6) & 3 };
		vl vv = { vij, vij, vij, vij };
#else
		vl c = { byte & 3, (byte >> 2) & 3 };
		vl vv = { vij, vij };
#endif
		vl m1 = -((c ^ (c >> 1)) & 1), m2 = -((c >> 1) & 1);
		vl m3 = -(c & 1);
		vl a, b, wa, wb;

		memcpy(&a, vjk + h, sizeof a);
		memcpy(&b, vik + h, sizeof b);
		memcpy(&wa, wjk + h, sizeof wa);
		memcpy(&wb, wik + h, sizeof wb);
		wa += ((vv ^ m1) - m1) + ((b ^ m2) - m2);
		wb += ((vv ^ m3) - m3) + ((a ^ m2) - m2);
		memcpy(wjk + h, &wa, sizeof wa);
		memcpy(wik + h, &wb, sizeof wb);
		*acc += ((a ^ m1) - m1) + ((b ^ m3) - m3);
	}
}

/* The sum of the lanes of acc. */
static inline int64_t hsum(const vl *acc)
{
	int64_t s = 0;
	for (int l = 0; l < JS_W; l++)
		s += (*acc)[l];
	return s;
}

void jsync_matvec_cpu(const uint8_t *choices, int64_t N, int64_t p0, int64_t p1,
		      const int64_t *vq, int64_t *wq)
{
	int64_t i, j;

	if (p0 >= p1)
		return;
	jsync_pair_ij(N, p0, &i, &j);
	for (int64_t p = p0; p < p1; p++) {
		int64_t L = N - 1 - j, t = 0;
		int64_t jk = jsync_pair(N, j, j + 1), ik = p + 1;
		int64_t vij = vq[p];
		vl acc = { 0 };
		for (; t + 4 <= L; t += 4)
			matvec4(*choices++, vij, vq + jk + t, vq + ik + t,
				wq + jk + t, wq + ik + t, &acc);
		int64_t wij = hsum(&acc);
		if (t < L)
			wij += matvec_byte(*choices++, (int)(L - t), vij,
					   vq + jk + t, vq + ik + t,
					   wq + jk + t, wq + ik + t);
		wq[p] += wij;
		if (++j == N) {
			i++;
			j = i + 1;
		}
	}
}

void jsync_matvec_fused_cpu(const double *R, int64_t N, int64_t p0, int64_t p1,
			    const int64_t *vq, int64_t *wq)
{
	int64_t i, j;

	if (p0 >= p1)
		return;
	jsync_pair_ij(N, p0, &i, &j);
	for (int64_t p = p0; p < p1; p++) {
		int64_t L = N - 1 - j, t = 0;
		int64_t jk = jsync_pair(N, j, j + 1), ik = p + 1;
		int64_t vij = vq[p];
		vl acc = { 0 };
		int64_t wij = 0;
		vd A[9];
		broadcast(R + 9 * p, A);
		for (; t < L; t += 4) {
			unsigned byte = choice_byte(A, R + 9 * jk, R + 9 * ik, t, L);
			if (t + 4 <= L)
				matvec4(byte, vij, vq + jk + t, vq + ik + t,
					wq + jk + t, wq + ik + t, &acc);
			else
				wij += matvec_byte(byte, (int)(L - t), vij,
						   vq + jk + t, vq + ik + t,
						   wq + jk + t, wq + ik + t);
		}
		wq[p] += wij + hsum(&acc);
		if (++j == N) {
			i++;
			j = i + 1;
		}
	}
}
