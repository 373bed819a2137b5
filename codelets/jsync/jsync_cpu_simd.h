/* The SIMD kernels of jsync_cpu.c, one variant per inclusion (JS_W lanes, names JS_FN(x)). */
/* No include guard: included once per variant of src/base/cpuisa.h, after
 * defining JS_W (doubles per vector: 2 for SSE2, 4 for AVX2) and
 * JS_FN(name) (the variant's names); it defines the variant's vector types
 * and undefines both macros at its end. */

typedef double JS_FN(vd) __attribute__((vector_size(8 * JS_W)));
typedef int64_t JS_FN(vl) __attribute__((vector_size(8 * JS_W)));
#define JS_VD JS_FN(vd)
#define JS_VL JS_FN(vl)

/* The four costs of JS_W consecutive triplets, A broadcast, B and C the
 * lanes; see DESIGN for the order of operations. */
static inline void JS_FN(costs)(const JS_VD *A, const JS_VD *B, const JS_VD *C, JS_VD cost[4])
{
	JS_VD c0 = { 0 }, c1 = { 0 }, c2 = { 0 }, c3 = { 0 };

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
static inline void JS_FN(load)(const double *Bp, const double *Cp, int64_t t,
			int64_t L, JS_VD B[9], JS_VD C[9])
{
	const double *b = Bp + 9 * t, *c = Cp + 9 * t;

	if (L - t >= JS_W) {
		for (int e = 0; e < 9; e++) {
#if JS_W == 4
			B[e] = (JS_VD){ b[e], b[9 + e], b[18 + e], b[27 + e] };
			C[e] = (JS_VD){ c[e], c[9 + e], c[18 + e], c[27 + e] };
#else
			B[e] = (JS_VD){ b[e], b[9 + e] };
			C[e] = (JS_VD){ c[e], c[9 + e] };
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
static inline unsigned JS_FN(choice_byte)(const JS_VD *A, const double *Bp,
				   const double *Cp, int64_t t, int64_t L)
{
	double cost[4][4];
	unsigned byte = 0;

	for (int h = 0; h < 4; h += JS_W) {
		JS_VD B[9], C[9], cv[4];
		JS_FN(load)(Bp, Cp, t + h, L, B, C);
		JS_FN(costs)(A, B, C, cv);
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
static inline void JS_FN(broadcast)(const double *A, JS_VD Av[9])
{
	for (int e = 0; e < 9; e++)
		for (int l = 0; l < JS_W; l++)
			Av[e][l] = A[e];
}

static void JS_FN(best)(const double *R, int64_t N, int64_t p0, int64_t p1,
		    uint8_t *choices)
{
	int64_t i, j;

	if (p0 >= p1)
		return;
	jsync_pair_ij(N, p0, &i, &j);
	for (int64_t p = p0; p < p1; p++) {
		if (JS_STOPPED(p - p0))
			return;
		int64_t L = N - 1 - j;
		const double *Bp = R + 9 * jsync_pair(N, j, j + 1);
		const double *Cp = R + 9 * (p + 1);
		JS_VD A[9];
		JS_FN(broadcast)(R + 9 * p, A);
		for (int64_t t = 0; t < L; t += 4)
			*choices++ = (uint8_t)JS_FN(choice_byte)(A, Bp, Cp, t, L);
		if (++j == N) {
			i++;
			j = i + 1;
		}
	}
}

/* wq[ij] is returned; wq[jk], wq[ik] of triplets t .. t+n-1 updated. */
static inline int64_t JS_FN(matvec_byte)(unsigned byte, int n, int64_t vij,
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
static inline void JS_FN(matvec4)(unsigned byte, int64_t vij, const int64_t *vjk,
			   const int64_t *vik, int64_t *wjk, int64_t *wik,
			   JS_VL *acc)
{
	for (int h = 0; h < 4; h += JS_W, byte >>= 2 * JS_W) {
#if JS_W == 4
		JS_VL c = { byte & 3, (byte >> 2) & 3, (byte >> 4) & 3,
			 (byte >> 6) & 3 };
		JS_VL vv = { vij, vij, vij, vij };
#else
		JS_VL c = { byte & 3, (byte >> 2) & 3 };
		JS_VL vv = { vij, vij };
#endif
		JS_VL m1 = -((c ^ (c >> 1)) & 1), m2 = -((c >> 1) & 1);
		JS_VL m3 = -(c & 1);
		JS_VL a, b, wa, wb;

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
static inline int64_t JS_FN(hsum)(const JS_VL *acc)
{
	int64_t s = 0;
	for (int l = 0; l < JS_W; l++)
		s += (*acc)[l];
	return s;
}

static void JS_FN(matvec)(const uint8_t *choices, int64_t N, int64_t p0, int64_t p1,
		      const int64_t *vq, int64_t *wq)
{
	int64_t i, j;

	if (p0 >= p1)
		return;
	jsync_pair_ij(N, p0, &i, &j);
	for (int64_t p = p0; p < p1; p++) {
		if (JS_STOPPED(p - p0))
			return;
		int64_t L = N - 1 - j, t = 0;
		int64_t jk = jsync_pair(N, j, j + 1), ik = p + 1;
		int64_t vij = vq[p];
		JS_VL acc = { 0 };
		for (; t + 4 <= L; t += 4)
			JS_FN(matvec4)(*choices++, vij, vq + jk + t, vq + ik + t,
				wq + jk + t, wq + ik + t, &acc);
		int64_t wij = JS_FN(hsum)(&acc);
		if (t < L)
			wij += JS_FN(matvec_byte)(*choices++, (int)(L - t), vij,
					   vq + jk + t, vq + ik + t,
					   wq + jk + t, wq + ik + t);
		wq[p] += wij;
		if (++j == N) {
			i++;
			j = i + 1;
		}
	}
}

static void JS_FN(fused)(const double *R, int64_t N, int64_t p0, int64_t p1,
			    const int64_t *vq, int64_t *wq)
{
	int64_t i, j;

	if (p0 >= p1)
		return;
	jsync_pair_ij(N, p0, &i, &j);
	for (int64_t p = p0; p < p1; p++) {
		if (JS_STOPPED(p - p0))
			return;
		int64_t L = N - 1 - j, t = 0;
		int64_t jk = jsync_pair(N, j, j + 1), ik = p + 1;
		int64_t vij = vq[p];
		JS_VL acc = { 0 };
		int64_t wij = 0;
		JS_VD A[9];
		JS_FN(broadcast)(R + 9 * p, A);
		for (; t < L; t += 4) {
			unsigned byte = JS_FN(choice_byte)(A, R + 9 * jk, R + 9 * ik, t, L);
			if (t + 4 <= L)
				JS_FN(matvec4)(byte, vij, vq + jk + t, vq + ik + t,
					wq + jk + t, wq + ik + t, &acc);
			else
				wij += JS_FN(matvec_byte)(byte, (int)(L - t), vij,
						   vq + jk + t, vq + ik + t,
						   wq + jk + t, wq + ik + t);
		}
		wq[p] += wij + JS_FN(hsum)(&acc);
		if (++j == N) {
			i++;
			j = i + 1;
		}
	}
}

#undef JS_VD
#undef JS_VL
#undef JS_W
#undef JS_FN
