/* starpipe-jsync-gen: synthetic J-synchronization inputs (relative rotations with random J-conjugations). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "../codelets/jsync/jsync.h"
#include "npy.h"
#include "toolutil.h"

/*
 * DESIGN.  N rotations R_i are drawn uniformly (normalised Gaussian
 * quaternions); pair p = (i, j), i < j, gets R_ij = R_i R_j^T, so that
 * R_ij R_jk = R_i R_j^T R_j R_k^T = R_i R_k^T = R_ik, the relation
 * science/jsync.md uses.  With --kind outer, R_ij = u_i u_j^T of random unit
 * vectors u_i (rank 1, as the hackathon's inputs; then R_ij R_jk = R_ik
 * as well).  Each pair is then, in this order: multiplied on the left by a
 * rotation of angle N(0, sigma) about a uniform axis (--noise), replaced
 * with probability --outliers by an independent random matrix of the same
 * kind, and conjugated (J R J, J = diag(-1,-1,1)) with probability 1/2.
 * The true sign of a pair is -1 if it was conjugated, +1 otherwise.  A
 * synchronisation recovers the signs only up to one global sign (the
 * handedness of the whole set is unobservable), so compare truth and result
 * up to a global sign.  The PRNG is xoshiro256** seeded by splitmix64: the
 * same seed gives the same files on every platform.
 */

static const char usage_text[] =
	"usage: starpipe-jsync-gen -n N [-s SEED] [--noise SIGMA_RADIANS]\n"
	"                          [--outliers FRACTION] [--kind rot|outer]\n"
	"                          -o RIJS.npy [--truth SIGNS.npy]\n"
	"Writes N(N-1)/2 3x3 matrices [P,3,3] (float64) with random\n"
	"J-conjugations, and optionally the true signs [P] (-1 = conjugated;\n"
	"equal to a synchronisation's output up to a global sign).\n";

#define BAD_USAGE(fmt, arg) tool_bad_usage("starpipe-jsync-gen", usage_text, fmt, arg)

static void unit(sp_rng_t *r, double *x, int n)
{
	double s;
	do {
		s = 0;
		for (int e = 0; e < n; e++) {
			x[e] = sp_rng_gaussian(r);
			s += x[e] * x[e];
		}
	} while (s < 1e-20);
	s = sqrt(s);
	for (int e = 0; e < n; e++)
		x[e] /= s;
}

static void rotation(sp_rng_t *r, double *Q)
{
	double q[4];
	unit(r, q, 4);
	double w = q[0], x = q[1], y = q[2], z = q[3];
	Q[0] = 1 - 2 * (y * y + z * z);
	Q[1] = 2 * (x * y - z * w);
	Q[2] = 2 * (x * z + y * w);
	Q[3] = 2 * (x * y + z * w);
	Q[4] = 1 - 2 * (x * x + z * z);
	Q[5] = 2 * (y * z - x * w);
	Q[6] = 2 * (x * z - y * w);
	Q[7] = 2 * (y * z + x * w);
	Q[8] = 1 - 2 * (x * x + y * y);
}

static void mul3(const double *X, const double *Y, double *Z)
{
	for (int a = 0; a < 3; a++)
		for (int c = 0; c < 3; c++)
			Z[3 * a + c] = X[3 * a] * Y[c] + X[3 * a + 1] * Y[3 + c] +
				       X[3 * a + 2] * Y[6 + c];
}

/* Rotation of angle th about a uniform axis (Rodrigues' formula). */
static void axis_angle(sp_rng_t *r, double th, double *Q)
{
	double u[3], c = cos(th), s = sin(th);
	unit(r, u, 3);
	double K[9] = { 0, -u[2], u[1], u[2], 0, -u[0], -u[1], u[0], 0 }, K2[9];
	mul3(K, K, K2);
	for (int e = 0; e < 9; e++)
		Q[e] = (e % 4 == 0) + s * K[e] + (1 - c) * K2[e];
}

int main(int argc, char **argv)
{
	double nd = -1, seedd = 1, noise = 0, outliers = 0;
	const char *out = NULL, *truth_path = NULL, *kind = "rot";

	for (int a = 1; a < argc; a++) {
		const char *o = argv[a];
		if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
			fputs(usage_text, stdout);
			return 0;
		}
		if (a + 1 >= argc)
			return BAD_USAGE("unknown option or missing value: '%s'", o);
		const char *v = argv[++a];
		if (strcmp(o, "-n") == 0) {
			if (!tool_number(v, 3, JSYNC_MAX_N, &nd) || nd != floor(nd))
				return BAD_USAGE("-n: '%s' is not an integer in "
						 "3 .. 1048576", v);
		} else if (strcmp(o, "-s") == 0 || strcmp(o, "--seed") == 0) {
			if (!tool_number(v, 0, 9007199254740992.0, &seedd) ||
			    seedd != floor(seedd))
				return BAD_USAGE("-s: '%s' is not a non-negative "
						 "integer", v);
		} else if (strcmp(o, "--noise") == 0) {
			if (!tool_number(v, 0, 3.141592653589793, &noise))
				return BAD_USAGE("--noise: '%s' is not an angle "
						 "in 0 .. pi radians", v);
		} else if (strcmp(o, "--outliers") == 0) {
			if (!tool_number(v, 0, 1, &outliers))
				return BAD_USAGE("--outliers: '%s' is not a "
						 "fraction in 0 .. 1", v);
		} else if (strcmp(o, "--kind") == 0) {
			if (strcmp(v, "rot") != 0 && strcmp(v, "outer") != 0)
				return BAD_USAGE("--kind: '%s' is not rot or "
						 "outer", v);
			kind = v;
		} else if (strcmp(o, "-o") == 0) {
			out = v;
		} else if (strcmp(o, "--truth") == 0) {
			truth_path = v;
		} else {
			return BAD_USAGE("unknown option '%s'", o);
		}
	}
	if (nd < 0)
		return BAD_USAGE("%s", "-n N is required");
	if (out == NULL)
		return BAD_USAGE("%s", "-o RIJS.npy is required");

	int64_t N = (int64_t)nd, P = jsync_npairs(N);
	int outer = strcmp(kind, "outer") == 0;
	sp_rng_t r;
	sp_rng_seed(&r, (uint64_t)seedd, 0);
	double *X = malloc((size_t)N * 9 * sizeof *X);
	double *R = malloc((size_t)P * 9 * sizeof *R);
	double *truth = malloc((size_t)P * sizeof *truth);
	if (X == NULL || R == NULL || truth == NULL) {
		fprintf(stderr, "starpipe-jsync-gen: out of memory for N = %lld "
				"(%.3g GB)\n", (long long)N,
			(double)P * 80 / 1e9);
		return 1;
	}
	for (int64_t i = 0; i < N; i++) {
		if (outer)
			unit(&r, X + 9 * i, 3);
		else
			rotation(&r, X + 9 * i);
	}
	for (int64_t i = 0, p = 0; i < N; i++) {
		for (int64_t j = i + 1; j < N; j++, p++) {
			double *M = R + 9 * p, Q[9], T[9];
			for (int a = 0; a < 3; a++)
				for (int c = 0; c < 3; c++) {
					double s = 0;
					if (outer)
						s = X[9 * i + a] * X[9 * j + c];
					else /* (R_i R_j^T)_ac */
						for (int b = 0; b < 3; b++)
							s += X[9 * i + 3 * a + b] *
							     X[9 * j + 3 * c + b];
					M[3 * a + c] = s;
				}
			if (noise > 0) {
				axis_angle(&r, noise * sp_rng_gaussian(&r), Q);
				mul3(Q, M, T);
				memcpy(M, T, sizeof T);
			}
			if (outliers > 0 && sp_rng_uniform(&r) < outliers) {
				if (outer) {
					double u[3], w[3];
					unit(&r, u, 3);
					unit(&r, w, 3);
					for (int e = 0; e < 9; e++)
						M[e] = u[e / 3] * w[e % 3];
				} else {
					rotation(&r, M);
				}
			}
			truth[p] = 1;
			if (sp_rng_uniform(&r) < 0.5) {
				/* J M J negates entries 2, 5, 6, 7. */
				M[2] = -M[2];
				M[5] = -M[5];
				M[6] = -M[6];
				M[7] = -M[7];
				truth[p] = -1;
			}
		}
	}
	sp_err_t err = { 0, "" };
	int64_t shape[3] = { P, 3, 3 };
	int rc = sp_npy_write_f8(out, R, 3, shape, &err);
	if (rc == 0 && truth_path != NULL)
		rc = sp_npy_write_f8(truth_path, truth, 1, shape, &err);
	if (rc != 0)
		fprintf(stderr, "starpipe-jsync-gen: %s\n", err.msg);
	free(X);
	free(R);
	free(truth);
	return rc == 0 ? 0 : 1;
}
