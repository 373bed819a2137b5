/* Slow, obvious J-synchronization reference used only by the tests. */
#ifndef SP_JSYNC_REF_H
#define SP_JSYNC_REF_H

/*
 * DESIGN: nothing here shares code or tricks with jsync_cpu.c.  Every
 * residual is a plain 3x3 product (AB, (JAJ)B, A(JBJ), then JCJ) and a
 * Frobenius norm; the sign matrix is dense; products are in double.  Arrays
 * are C order; R is [P][3][3] float64, as in jsync.h.  Triplet index t counts
 * (i, j, k), i < j < k, in lexicographic order, which is also the order of
 * the runs of jsync.h.
 */

#include <stdint.h>

/* Choice 0..3 of one triplet (first minimum, strict <). */
int jsync_ref_best(const double A[9], const double B[9], const double C[9]);

/* One choice byte per triplet, t in lexicographic order (T bytes). */
void jsync_ref_choices(const double *R, int64_t N, uint8_t *best);

/* Dense P x P sign matrix S (entries -1, 0, +1), row-major. */
void jsync_ref_sign_matrix(const double *R, int64_t N, int8_t *S);

/* w = S v with a dense S (double). */
void jsync_ref_matvec_dense(const int8_t *S, int64_t P, const double *v,
			    double *w);

/* w = S v in double, by a triplet loop over the choices of
 * jsync_ref_choices() (no dense matrix: for larger N). */
void jsync_ref_matvec(const uint8_t *best, int64_t N, const double *v,
		      double *w);

/* ASPIRE's power method in double (science/jsync.md): v0 [P] is the start
 * vector (normalised here), signs [P] receive +-1 with signs[0] = +1;
 * returns the number of iterations (matrix-vector products) done, or -1 if
 * max_iters were done without res <= eps. */
int jsync_ref_power(const double *R, int64_t N, const double *v0, double eps,
		    int max_iters, int8_t *signs);

/* A portable seeded generator (splitmix64), for tests. */
typedef struct jsync_ref_rng {
	uint64_t s;
} jsync_ref_rng_t;
uint64_t jsync_ref_next(jsync_ref_rng_t *r);
double jsync_ref_uniform(jsync_ref_rng_t *r);  /* [0, 1) */
double jsync_ref_gaussian(jsync_ref_rng_t *r); /* N(0, 1) */

/* Synthetic input: N uniform random rotations R_i, R[p] = R_i R_j^T (so
 * R_ij R_jk = R_ik); with outer != 0 rank-1 R_ij = u_i u_j^T of random unit
 * vectors instead.  Each pair is then multiplied by a random rotation of
 * angle N(0, noise) radians, with probability `outliers` replaced by a
 * random matrix of the same kind, and with probability 1/2 conjugated
 * (J R J): truth[p] = -1 where conjugated, +1 otherwise (truth may be NULL).
 * outlier[p] (may be NULL) is 1 for outlier pairs. */
void jsync_ref_synth(int64_t N, uint64_t seed, double noise, double outliers,
		     int outer, double *R, int8_t *truth, uint8_t *outlier);

#endif /* SP_JSYNC_REF_H */
