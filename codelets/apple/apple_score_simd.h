/* The score's per-pair loops in one SIMD variant, included by apple_cpu.c once per variant. */
/* No include guard: included once per variant of src/base/cpuisa.h, after
 * defining AS_W (doubles per vector: 2 for SSE2, 4 for AVX2) and
 * AS_FN(name) (the variant's names); it defines the variant's vector types
 * and undefines both macros at its end. */

typedef double AS_FN(vd) __attribute__((vector_size(8 * AS_W)));
typedef int64_t AS_FN(vl) __attribute__((vector_size(8 * AS_W)));
#define AS_VD AS_FN(vd)
#define AS_VL AS_FN(vl)

/* P = R conj(W) over ns interleaved complex values, in lanes: with
 * R = (a, b) and W = (c, d) per value, re = a c + b d and
 * im = b c + (-(a d)), the scalar code's b c - a d to the bit (negation is
 * exact, and x - y is x + (-y) in IEEE arithmetic). */
static void AS_FN(product)(const double *R, const double *W, double *P, size_t ns)
{
#if AS_W == 4
	const AS_VL swap = { 1, 0, 3, 2 }, re = { 0, 0, 2, 2 }, im = { 1, 1, 3, 3 };
	const AS_VL neg = { 0, INT64_MIN, 0, INT64_MIN };
#else
	const AS_VL swap = { 1, 0 }, re = { 0, 0 }, im = { 1, 1 };
	const AS_VL neg = { 0, INT64_MIN };
#endif
	size_t t = 0, n = 2 * ns;

	for (; t + AS_W <= n; t += AS_W) {
		AS_VD r, w;
		memcpy(&r, R + t, sizeof r);
		memcpy(&w, W + t, sizeof w);
		AS_VD ac_bc = r * __builtin_shuffle(w, re);
		AS_VD bd_ad = __builtin_shuffle(r, swap) * __builtin_shuffle(w, im);
		AS_VD p = ac_bc + (AS_VD)((AS_VL)bd_ad ^ neg);
		memcpy(P + t, &p, sizeof p);
	}
	for (; t < n; t += 2) {
		double a = R[t], b = R[t + 1], c = W[t], d = W[t + 1];
		P[t] = a * c + b * d;
		P[t + 1] = b * c - a * d;
	}
}

/* The maximum of a[0..n) (n >= 1), in two vectors of lanes (the maximum
 * does not depend on the order; a NaN is kept only where a[0] is one, as
 * in a scalar `x > m ? x : m` loop). */
static double AS_FN(max_of)(const double *a, size_t n)
{
	AS_VD m0, m1;
	size_t t = 0;

	for (int l = 0; l < AS_W; l++)
		m0[l] = m1[l] = a[0];
	for (; t + 2 * AS_W <= n; t += 2 * AS_W) {
		AS_VD x0, x1;
		memcpy(&x0, a + t, sizeof x0);
		memcpy(&x1, a + t + AS_W, sizeof x1);
		AS_VL g0 = x0 > m0, g1 = x1 > m1;
		m0 = (AS_VD)(((AS_VL)x0 & g0) | ((AS_VL)m0 & ~g0));
		m1 = (AS_VD)(((AS_VL)x1 & g1) | ((AS_VL)m1 & ~g1));
	}
	double m = a[0];
	for (int l = 0; l < AS_W; l++) {
		m = m0[l] > m ? m0[l] : m;
		m = m1[l] > m ? m1[l] : m;
	}
	for (; t < n; t++)
		m = a[t] > m ? a[t] : m;
	return m;
}

#undef AS_VD
#undef AS_VL
#undef AS_W
#undef AS_FN
