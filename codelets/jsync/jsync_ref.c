/* Slow, obvious J-synchronization reference used only by the tests. */
#include "jsync_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t ref_pair(int64_t N, int64_t i, int64_t j)
{
	/* Counted, not the closed form of jsync.h. */
	int64_t p = 0;
	for (int64_t a = 0; a < i; a++)
		p += N - 1 - a;
	return p + (j - i - 1);
}

static void mul3(const double *X, const double *Y, double *Z)
{
	for (int a = 0; a < 3; a++)
		for (int c = 0; c < 3; c++) {
			double s = 0.0;
			for (int b = 0; b < 3; b++)
				s += X[3 * a + b] * Y[3 * b + c];
			Z[3 * a + c] = s;
		}
}

static void conj3(const double *X, double *Y)
{
	static const double J[3] = { -1.0, -1.0, 1.0 };
	for (int a = 0; a < 3; a++)
		for (int c = 0; c < 3; c++)
			Y[3 * a + c] = J[a] * X[3 * a + c] * J[c];
}

static double dist2(const double *X, const double *Y)
{
	double s = 0.0;
	for (int e = 0; e < 9; e++)
		s += (X[e] - Y[e]) * (X[e] - Y[e]);
	return s;
}

int jsync_ref_best(const double A[9], const double B[9], const double C[9])
{
	double JA[9], JB[9], JC[9], AB[9], JAB[9], AJB[9], cost[4];

	conj3(A, JA);
	conj3(B, JB);
	conj3(C, JC);
	mul3(A, B, AB);
	mul3(JA, B, JAB);
	mul3(A, JB, AJB);
	cost[0] = dist2(AB, C);
	cost[1] = dist2(JAB, C);
	cost[2] = dist2(AJB, C);
	cost[3] = dist2(AB, JC);
	int best = 0;
	for (int c = 1; c < 4; c++)
		if (cost[c] < cost[best])
			best = c;
	return best;
}

void jsync_ref_choices(const double *R, int64_t N, uint8_t *best)
{
	int64_t t = 0;
	for (int64_t i = 0; i < N; i++)
		for (int64_t j = i + 1; j < N; j++)
			for (int64_t k = j + 1; k < N; k++)
				best[t++] = (uint8_t)jsync_ref_best(
					R + 9 * ref_pair(N, i, j),
					R + 9 * ref_pair(N, j, k),
					R + 9 * ref_pair(N, i, k));
}

/* (s_ij_jk, s_ik_jk, s_ij_ik) of each choice, from science/jsync.md. */
static const int edge_sign[4][3] = {
	{ +1, +1, +1 }, { -1, +1, -1 }, { -1, -1, +1 }, { +1, -1, -1 }
};

void jsync_ref_sign_matrix(const double *R, int64_t N, int8_t *S)
{
	int64_t P = N * (N - 1) / 2;

	memset(S, 0, (size_t)(P * P));
	for (int64_t i = 0; i < N; i++)
		for (int64_t j = i + 1; j < N; j++)
			for (int64_t k = j + 1; k < N; k++) {
				int64_t ij = ref_pair(N, i, j);
				int64_t jk = ref_pair(N, j, k);
				int64_t ik = ref_pair(N, i, k);
				const int *s = edge_sign[jsync_ref_best(
					R + 9 * ij, R + 9 * jk, R + 9 * ik)];
				S[ij * P + jk] = S[jk * P + ij] = (int8_t)s[0];
				S[ik * P + jk] = S[jk * P + ik] = (int8_t)s[1];
				S[ij * P + ik] = S[ik * P + ij] = (int8_t)s[2];
			}
}

void jsync_ref_matvec_dense(const int8_t *S, int64_t P, const double *v,
			    double *w)
{
	for (int64_t r = 0; r < P; r++) {
		double s = 0.0;
		for (int64_t c = 0; c < P; c++)
			s += S[r * P + c] * v[c];
		w[r] = s;
	}
}

void jsync_ref_matvec(const uint8_t *best, int64_t N, const double *v,
		      double *w)
{
	int64_t t = 0;

	memset(w, 0, (size_t)(N * (N - 1) / 2) * sizeof *w);
	for (int64_t i = 0; i < N; i++)
		for (int64_t j = i + 1; j < N; j++)
			for (int64_t k = j + 1; k < N; k++) {
				int64_t ij = ref_pair(N, i, j);
				int64_t jk = ref_pair(N, j, k);
				int64_t ik = ref_pair(N, i, k);
				const int *s = edge_sign[best[t++]];
				w[ij] += s[0] * v[jk] + s[2] * v[ik];
				w[jk] += s[0] * v[ij] + s[1] * v[ik];
				w[ik] += s[2] * v[ij] + s[1] * v[jk];
			}
}

static double norm(const double *v, int64_t n)
{
	double s = 0.0;
	for (int64_t p = 0; p < n; p++)
		s += v[p] * v[p];
	return sqrt(s);
}

int jsync_ref_power(const double *R, int64_t N, const double *v0, double eps,
		    int max_iters, int8_t *signs)
{
	int64_t P = N * (N - 1) / 2, T = N * (N - 1) * (N - 2) / 6;
	uint8_t *best = malloc((size_t)T + 1);
	double *v = malloc((size_t)P * sizeof *v);
	double *w = malloc((size_t)P * sizeof *w);
	int iters = -1;

	if (best == NULL || v == NULL || w == NULL)
		abort();
	jsync_ref_choices(R, N, best);
	double nv = norm(v0, P);
	for (int64_t p = 0; p < P; p++)
		v[p] = v0[p] / nv;
	for (int it = 1; it <= max_iters; it++) {
		jsync_ref_matvec(best, N, v, w);
		double nw = norm(w, P), res = 0.0;
		for (int64_t p = 0; p < P; p++) {
			w[p] /= nw;
			res += (w[p] - v[p]) * (w[p] - v[p]);
		}
		memcpy(v, w, (size_t)P * sizeof *v);
		if (sqrt(res) <= eps) {
			iters = it;
			break;
		}
	}
	for (int64_t p = 0; p < P; p++) {
		int s = v[p] > 0 ? 1 : v[p] < 0 ? -1 : 0;
		int s0 = v[0] > 0 ? 1 : v[0] < 0 ? -1 : 0;
		signs[p] = (int8_t)(s * s0);
	}
	free(best);
	free(v);
	free(w);
	return iters;
}

uint64_t jsync_ref_next(jsync_ref_rng_t *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

double jsync_ref_uniform(jsync_ref_rng_t *r)
{
	return (double)(jsync_ref_next(r) >> 11) * 0x1.0p-53;
}

double jsync_ref_gaussian(jsync_ref_rng_t *r)
{
	double u = 1.0 - jsync_ref_uniform(r), v = jsync_ref_uniform(r);
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void random_unit(jsync_ref_rng_t *r, double *x, int n)
{
	double s;
	do {
		s = 0.0;
		for (int e = 0; e < n; e++) {
			x[e] = jsync_ref_gaussian(r);
			s += x[e] * x[e];
		}
	} while (s < 1e-12);
	s = sqrt(s);
	for (int e = 0; e < n; e++)
		x[e] /= s;
}

static void random_rotation(jsync_ref_rng_t *r, double *Q)
{
	double q[4];
	random_unit(r, q, 4);
	double w = q[0], x = q[1], y = q[2], z = q[3];
	double M[9] = { 1 - 2 * (y * y + z * z), 2 * (x * y - z * w),
			2 * (x * z + y * w),     2 * (x * y + z * w),
			1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
			2 * (x * z - y * w),     2 * (y * z + x * w),
			1 - 2 * (x * x + y * y) };
	memcpy(Q, M, sizeof M);
}

/* Rotation by angle th about a random axis (Rodrigues). */
static void small_rotation(jsync_ref_rng_t *r, double th, double *Q)
{
	double u[3], c = cos(th), s = sin(th);
	random_unit(r, u, 3);
	double K[9] = { 0, -u[2], u[1], u[2], 0, -u[0], -u[1], u[0], 0 };
	double K2[9];
	mul3(K, K, K2);
	for (int e = 0; e < 9; e++)
		Q[e] = (e % 4 == 0 ? 1.0 : 0.0) + s * K[e] + (1 - c) * K2[e];
}

void jsync_ref_synth(int64_t N, uint64_t seed, double noise, double outliers,
		     int outer, double *R, int8_t *truth, uint8_t *outlier)
{
	jsync_ref_rng_t r = { seed };
	double *X = malloc((size_t)N * 9 * sizeof *X);
	int64_t p = 0;

	if (X == NULL)
		abort();
	for (int64_t i = 0; i < N; i++) {
		if (outer)
			random_unit(&r, X + 9 * i, 3);
		else
			random_rotation(&r, X + 9 * i);
	}
	for (int64_t i = 0; i < N; i++)
		for (int64_t j = i + 1; j < N; j++, p++) {
			double M[9], Q[9], T[9];
			for (int a = 0; a < 3; a++)
				for (int c = 0; c < 3; c++) {
					double s = 0.0;
					if (outer)
						s = X[9 * i + a] * X[9 * j + c];
					else
						for (int b = 0; b < 3; b++)
							s += X[9 * i + 3 * a + b] *
							     X[9 * j + 3 * c + b];
					M[3 * a + c] = s;
				}
			if (noise > 0) {
				small_rotation(&r, noise * jsync_ref_gaussian(&r), Q);
				mul3(Q, M, T);
				memcpy(M, T, sizeof M);
			}
			int out = jsync_ref_uniform(&r) < outliers;
			if (out) {
				if (outer) {
					double u[3], v[3];
					random_unit(&r, u, 3);
					random_unit(&r, v, 3);
					for (int e = 0; e < 9; e++)
						M[e] = u[e / 3] * v[e % 3];
				} else {
					random_rotation(&r, M);
				}
			}
			int conj = jsync_ref_uniform(&r) < 0.5;
			if (conj) {
				conj3(M, T);
				memcpy(M, T, sizeof M);
			}
			memcpy(R + 9 * p, M, sizeof M);
			if (truth != NULL)
				truth[p] = conj ? -1 : 1;
			if (outlier != NULL)
				outlier[p] = (uint8_t)out;
		}
	free(X);
}
