/* J-synchronization CPU kernels and the host-side index helpers of jsync.h. */
#include "jsync.h"

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

typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));

/* The 2-bit choice codes as branch-free sign masks (0: +, -1: -):
 * s_ij_jk is - for 1, 2; s_ik_jk is - for 2, 3; s_ij_ik is - for 1, 3. */
#define JS_M1(c) (-(int64_t)(((c) ^ ((c) >> 1)) & 1))
#define JS_M2(c) (-(int64_t)(((c) >> 1) & 1))
#define JS_M3(c) (-(int64_t)((c) & 1))

void jsync_pair_ij(int64_t N, int64_t p, int64_t *i, int64_t *j)
{
	/* pair(i, i+1) = (2N-i-1) i / 2 is the first pair of row i; invert the
	 * quadratic in double, then correct the rounding. */
	double b = (double)(2 * N - 1);
	int64_t r = (int64_t)((b - sqrt(b * b - 8.0 * (double)p)) / 2.0);

	if (r < 0)
		r = 0;
	if (r > N - 2)
		r = N - 2;
	while (r > 0 && jsync_pair(N, r, r + 1) > p)
		r--;
	while (r < N - 2 && jsync_pair(N, r + 1, r + 2) <= p)
		r++;
	*i = r;
	*j = p - jsync_pair(N, r, r + 1) + r + 1;
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

/* F(L) = sum_{l=0..L} ceil(l/4): choice bytes of runs of lengths 0..L. */
static int64_t bytes_upto(int64_t L)
{
	if (L < 0)
		return 0;
	int64_t q = L / 4, r = L % 4;
	return 2 * q * (q + 1) + r * (q + 1);
}

/* G(M) = sum_{L=0..M} F(L). */
static int64_t bytes_upto2(int64_t M)
{
	if (M < 0)
		return 0;
	int64_t Q = M / 4, R = M % 4;
	return 8 * (Q - 1) * Q * (Q + 1) / 3 + 3 * Q * (Q + 1) +
	       (R + 1) * 2 * Q * (Q + 1) + (Q + 1) * R * (R + 1) / 2;
}

/* Choice bytes of the runs of all pairs before p (0 <= p <= P). */
static int64_t bytes_before(int64_t N, int64_t p)
{
	int64_t i, j;

	if (p >= jsync_npairs(N))
		return bytes_upto2(N - 2);
	jsync_pair_ij(N, p, &i, &j);
	/* Rows i' < i hold runs of lengths N-2-i' .. 0; row i up to j-1 holds
	 * lengths N-2-i down to N-j. */
	return bytes_upto2(N - 2) - bytes_upto2(N - 2 - i) +
	       bytes_upto(N - 2 - i) - bytes_upto(N - 1 - j);
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

/* The four costs of 4 consecutive triplets of a run, A fixed, B and C the
 * lanes (each [9][4]); see DESIGN for the order of operations. */
static inline void costs4(const double *A, const v4d *B, const v4d *C,
			  v4d cost[4])
{
	v4d c0 = { 0 }, c1 = { 0 }, c2 = { 0 }, c3 = { 0 };

	for (int a = 0; a < 3; a++) {
		for (int c = 0; c < 3; c++) {
			v4d x = A[3 * a] * B[c] + A[3 * a + 1] * B[3 + c];
			v4d y = A[3 * a + 2] * B[6 + c];
			v4d s = x + y;
			v4d d = y - x;
			v4d cc = C[3 * a + c];
			v4d e0 = s - cc;
			v4d dp = d + cc, dm = d - cc;
			v4d e1 = a < 2 ? dp : dm;
			v4d e2 = c < 2 ? dp : dm;
			v4d e3 = (a < 2) == (c < 2) ? e0 : s + cc;
			c0 = c0 + e0 * e0;
			c1 = c1 + e1 * e1;
			c2 = c2 + e2 * e2;
			c3 = c3 + e3 * e3;
		}
	}
	cost[0] = c0;
	cost[1] = c1;
	cost[2] = c2;
	cost[3] = c3;
}

/* Loads triplets t .. t+3 (those < L; the rest zero) of the B and C runs
 * (consecutive 3x3 matrices) into lanes. */
static inline void load4(const double *Bp, const double *Cp, int64_t t,
			 int64_t L, v4d B[9], v4d C[9])
{
	double b[9][4], c[9][4];
	int n = L - t < 4 ? (int)(L - t) : 4;

	for (int l = 0; l < 4; l++) {
		for (int e = 0; e < 9; e++) {
			b[e][l] = l < n ? Bp[9 * (t + l) + e] : 0.0;
			c[e][l] = l < n ? Cp[9 * (t + l) + e] : 0.0;
		}
	}
	memcpy(B, b, sizeof b);
	memcpy(C, c, sizeof c);
}

/* The choice byte of 4 lanes of costs: first minimum, strict <. */
static inline uint8_t choose4(const v4d cost[4])
{
	unsigned byte = 0;

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
	return (uint8_t)byte;
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
		const double *A = R + 9 * p;
		const double *Bp = R + 9 * jsync_pair(N, j, j + 1);
		const double *Cp = R + 9 * (p + 1);
		for (int64_t t = 0; t < L; t += 4) {
			v4d B[9], C[9], cost[4];
			load4(Bp, Cp, t, L, B, C);
			costs4(A, B, C, cost);
			*choices++ = choose4(cost);
		}
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

/* Full bytes in lanes: four choices as sign masks, then +-vq sums; the
 * wq[ij] terms go to the lanes of *acc (by pointer: no vector return ABI). */
static inline void matvec4(unsigned byte, int64_t vij, const int64_t *vjk,
			   const int64_t *vik, int64_t *wjk, int64_t *wik,
			   v4l *acc)
{
	v4l c = { byte & 3, (byte >> 2) & 3, (byte >> 4) & 3, (byte >> 6) & 3 };
	v4l m1 = -((c ^ (c >> 1)) & 1), m2 = -((c >> 1) & 1), m3 = -(c & 1);
	v4l a, b, wa, wb, vv = { vij, vij, vij, vij };

	memcpy(&a, vjk, sizeof a);
	memcpy(&b, vik, sizeof b);
	memcpy(&wa, wjk, sizeof wa);
	memcpy(&wb, wik, sizeof wb);
	wa += ((vv ^ m1) - m1) + ((b ^ m2) - m2);
	wb += ((vv ^ m3) - m3) + ((a ^ m2) - m2);
	memcpy(wjk, &wa, sizeof wa);
	memcpy(wik, &wb, sizeof wb);
	*acc += ((a ^ m1) - m1) + ((b ^ m3) - m3);
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
		v4l acc = { 0 };
		for (; t + 4 <= L; t += 4)
			matvec4(*choices++, vij, vq + jk + t, vq + ik + t,
				wq + jk + t, wq + ik + t, &acc);
		int64_t wij = acc[0] + acc[1] + acc[2] + acc[3];
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
		const double *A = R + 9 * p;
		int64_t vij = vq[p];
		v4l acc = { 0 };
		int64_t wij = 0;
		for (; t < L; t += 4) {
			v4d B[9], C[9], cost[4];
			load4(R + 9 * jk, R + 9 * ik, t, L, B, C);
			costs4(A, B, C, cost);
			unsigned byte = choose4(cost);
			if (t + 4 <= L)
				matvec4(byte, vij, vq + jk + t, vq + ik + t,
					wq + jk + t, wq + ik + t, &acc);
			else
				wij += matvec_byte(byte, (int)(L - t), vij,
						   vq + jk + t, vq + ik + t,
						   wq + jk + t, wq + ik + t);
		}
		wq[p] += wij + acc[0] + acc[1] + acc[2] + acc[3];
		if (++j == N) {
			i++;
			j = i + 1;
		}
	}
}
