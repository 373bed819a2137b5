/* OpenBLAS's kernels for this CPU: a re-exec with OPENBLAS_CORETYPE when the library did not know it. */
#define _GNU_SOURCE

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"

/*
 * DESIGN.  OpenBLAS picks its kernels once, when it is loaded, from the
 * CPU's model number.  Debian 12's OpenBLAS 0.3.21 does not know recent
 * Intel Xeons (Sapphire Rapids, AVX-512) and falls back to "Prescott", its
 * SSE3 kernels, much slower than its Haswell ones on the same core
 * (doc/profiling.md).
 * The choice cannot be changed in a running process (OpenBLAS reads
 * OPENBLAS_CORETYPE in its load-time constructor), so starpipe execs
 * itself once (through its resolved path, so that it keeps its name) with OPENBLAS_CORETYPE=Haswell when OpenBLAS chose a generic
 * core on a CPU with AVX2 and FMA, before anything else (MPI included).
 * A user's OPENBLAS_CORETYPE is never overridden, and the child has the
 * variable set, so it does not exec again.  STARPIPE_BLAS_CORENAME stands
 * in for OpenBLAS's answer (for tests: tests/cli.test).
 */

char *openblas_get_corename(void);

/* OpenBLAS's generic x86-64 targets: the fallbacks for a CPU it does not know. */
static int generic_core(const char *core)
{
	static const char *const generic[] = { "Prescott", "Core2", "Katmai", "Coppermine",
					       "Northwood", "Banias", "Penryn", "Dunnington",
					       "Nehalem", "Unknown" };
	for (size_t i = 0; i < sizeof generic / sizeof generic[0]; i++)
		if (strcasecmp(core, generic[i]) == 0)
			return 1;
	return 0;
}

static const char *corename(void)
{
	const char *fake = getenv("STARPIPE_BLAS_CORENAME");
	if (fake != NULL && fake[0] != '\0' && getenv("OPENBLAS_CORETYPE") == NULL)
		return fake;
	const char *c = openblas_get_corename();
	return c != NULL ? c : "unknown";
}

void cli_blas_check(char **argv)
{
	if (getenv("OPENBLAS_CORETYPE") != NULL)
		return;
	char core[64];
	snprintf(core, sizeof core, "%s", corename());
	if (!generic_core(core))
		return;
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
		return;
	if (setenv("STARPIPE_BLAS_REEXEC", core, 1) != 0 ||
	    setenv("OPENBLAS_CORETYPE", "Haswell", 1) != 0)
		return;
	/* The resolved path, not /proc/self/exe: the kernel names a process
	 * after the file it executes, and ps, pgrep and job monitors must see
	 * "starpipe", not "exe".  argv[0] is kept as the user gave it. */
	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	if (len > 0 && (size_t)len < sizeof self - 1) {
		self[len] = '\0';
		execv(self, argv);
	}
	execv("/proc/self/exe", argv); /* the file was moved or deleted since */
	/* no exec: go on with the generic kernels, and say so */
	fprintf(stderr, "starpipe: warning: OpenBLAS chose its generic '%s' kernels for this CPU "
			"and re-running with OPENBLAS_CORETYPE=Haswell failed; set it yourself\n",
		core);
	unsetenv("OPENBLAS_CORETYPE");
	unsetenv("STARPIPE_BLAS_REEXEC");
}

void cli_blas_describe(char *buf, size_t len)
{
	const char *was = getenv("STARPIPE_BLAS_REEXEC");
	if (was != NULL)
		snprintf(buf, len, "BLAS: OpenBLAS, %s kernels (OPENBLAS_CORETYPE set by starpipe: "
				   "OpenBLAS chose '%s' for this CPU)", corename(), was);
	else
		snprintf(buf, len, "BLAS: OpenBLAS, %s kernels%s", corename(),
			 getenv("OPENBLAS_CORETYPE") != NULL ? " (OPENBLAS_CORETYPE)" : "");
}
