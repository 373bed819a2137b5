/* What each compiled variant of APPLE's score loops (apple_score_simd.h) needs, and the variants' tables. */
#ifndef STARPIPE_APPLE_SCORE_ISA_H
#define STARPIPE_APPLE_SCORE_ISA_H

#ifdef HAVE_CONFIG_H
#include <config.h> /* HAVE_LIBMVEC_ERF; tools/fuzz builds without it */
#endif
#include "apple.h"
#include "cpuisa.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/*
 * DESIGN.  The variants are translation units of their own,
 * apple_score_base.c (the build's target) and apple_score_avx2.c (AVX2),
 * each one inclusion of apple_score_simd.h, so that `make -j` compiles
 * them side by side: the lanes route unrolls one function per query size
 * and variant, and the two variants in one file were one long compile
 * on CI's critical path.  apple_cpu.c picks one
 * at run time (apple_score_simd()); they compute the same bits.
 */

#if defined(HAVE_LIBMVEC_ERF) && defined(__x86_64__)
/* glibc's libmvec (configure's check): exp of two doubles, its SSE2
 * variant (libmvec picks SSE2 or SSE4.1 code by CPU), within 4 ulp of
 * exp(); several times faster than exp() per value (doc/profiling.md) */
#define AS_MVEC_EXP 1
typedef double as_v2d_t __attribute__((vector_size(16)));
extern as_v2d_t _ZGVbN2v_exp(as_v2d_t);
#endif

/* The lanes route's table layout and sizes (apple_score_simd.h, where the
 * route is described; apple_score_lane_tab() fills the table). */
#define AS_LANE_MAXM APPLE_LANE_MAXM
#define AS_LANE_MAXH APPLE_LANE_H
#define AS_LANE_MAXM4 13 /* the largest m with P = 4, 8 or 16 */
#define AS_LANE_T ((AS_LANE_MAXH + 1) * (AS_LANE_MAXH + 1))
#define AS_TAB(t, c, j, k) (t)[(c) * AS_LANE_T + (j) * (AS_LANE_MAXH + 1) + (k)]
/* The sizes q = P m the route covers, as X(P, m): the one list that both
 * the variants' functions and apple_score_lane_m() are made from.  Not
 * 2 x 25 (q = 50), 16 x 1 or 32 x 1: FFTW's codelets were as fast there
 * (doc/profiling.md). */
#define AS_LANE_ROUTES(X)                                                                       \
	X(2, 3) X(2, 5) X(2, 7) X(2, 9) X(2, 11) X(2, 13) X(2, 15) X(2, 17) X(2, 19) X(2, 21)     \
	X(2, 23) X(2, 29) X(2, 31) X(4, 3) X(4, 5) X(4, 7) X(4, 9) X(4, 11) X(4, 13) X(8, 3)     \
	X(8, 5) X(8, 7) X(16, 3)

/* each variant's table (apple_score_simd.h's last lines) */
extern const apple_score_simd_t apple_score_simd_tab_base;
#if SP_HAVE_AVX2_VARIANT
extern const apple_score_simd_t apple_score_simd_tab_avx2;
#endif

#endif
