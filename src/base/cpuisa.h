/* Which SIMD variant of the CPU kernels runs: AVX2 where the CPU has it, chosen at run time. */
#ifndef SP_CPUISA_H
#define SP_CPUISA_H

/*
 * DESIGN.  The project is built for plain x86-64 (SSE2), as Debian builds
 * it, so that one binary runs on every node of a cluster.  The hot
 * hand-written CPU kernels (J-sync's triplet choices and products, APPLE's
 * score loops, DESI's block eigendecompositions) are compiled twice: once for the build's target, once under
 * `#pragma GCC target("avx2")`, and each call goes to the widest variant the
 * CPU and the OS support (doc/profiling.md: 2.0x on J-sync's kernels).  The
 * variants compute the same bits: no FMA contraction (-ffp-contract=off),
 * the same operations in the same order, only more lanes at a time; the
 * tests run every variant this CPU has against the same reference.
 *
 * STARPIPE_CPU_ISA=baseline (or avx2) caps the choice, for A/B runs and for
 * tests; an unknown value is a warning and no cap.
 */

enum sp_isa {
	SP_ISA_BASELINE = 0, /* the build's target: SSE2 on x86-64 */
	SP_ISA_AVX2 = 1,
	SP_ISA_COUNT
};

/* Whether this build has an AVX2 variant of its kernels (x86-64 and GCC). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SP_HAVE_AVX2_VARIANT 1
#else
#define SP_HAVE_AVX2_VARIANT 0
#endif

/* Doubles per vector in the baseline variant: the build's own target (SSE2
 * on plain x86-64; one AVX register when the whole build targets AVX). */
#if defined(__AVX__)
#define SP_BASELINE_W 4
#else
#define SP_BASELINE_W 2
#endif

/* Around the AVX2 variant's code (a body header included a second time):
 * GCC compiles it for AVX2, and only it.  No FMA appears: the project
 * builds with -ffp-contract=off.  Wider vectors than AVX2's 4 doubles are
 * lowered through the stack by GCC (4x slower): the AVX2 bodies use 4. */
#define SP_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2\")")
#define SP_AVX2_END _Pragma("GCC pop_options")

/* Whether variant `isa` can run here: built in, and the CPU and OS have it. */
int sp_isa_supported(int isa);

/* The variant the kernels use: the widest supported, capped by
 * STARPIPE_CPU_ISA.  Decided once per process. */
int sp_cpu_isa(void);

/* "baseline" or "avx2". */
const char *sp_isa_name(int isa);

#endif /* SP_CPUISA_H */
