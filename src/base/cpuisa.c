/* Run-time choice of the CPU kernels' SIMD variant (see cpuisa.h). */
#include "cpuisa.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[SP_ISA_COUNT] = { "baseline", "avx2" };

const char *sp_isa_name(int isa)
{
	return isa >= 0 && isa < SP_ISA_COUNT ? names[isa] : "unknown";
}

int sp_isa_supported(int isa)
{
	if (isa == SP_ISA_BASELINE)
		return 1;
#if SP_HAVE_AVX2_VARIANT
	if (isa == SP_ISA_AVX2) {
		/* libgcc checks the OS's XSAVE state for AVX too */
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") != 0;
	}
#endif
	return 0;
}

static int decide(void)
{
	int best = SP_ISA_BASELINE, cap = SP_ISA_COUNT - 1;
	const char *env = getenv("STARPIPE_CPU_ISA");

	if (env != NULL && env[0] != '\0') {
		int k;
		for (k = 0; k < SP_ISA_COUNT; k++)
			if (strcmp(env, names[k]) == 0)
				break;
		if (k < SP_ISA_COUNT)
			cap = k;
		else
			fprintf(stderr, "starpipe: warning: STARPIPE_CPU_ISA='%s' is not 'baseline' "
					"or 'avx2': ignored\n", env);
	}
	for (int k = 1; k <= cap; k++)
		if (sp_isa_supported(k))
			best = k;
	return best;
}

static int chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void)
{
	chosen = decide();
}

int sp_cpu_isa(void)
{
	pthread_once(&once, choose);
	return chosen;
}
