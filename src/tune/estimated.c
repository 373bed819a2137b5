/* Models estimated by tools/sim-node or tools/fit-cpu-models, flagged ESTIMATED in `starpipe models` (sp_tune_flag_estimated, tune.h). */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "fsutil.h"
#include "runtime.h"
#include "tune.h"
#include "tune_int.h"

/* The host name StarPU files the models under (its _starpu_gethostname):
 * STARPU_HOSTNAME, else this machine's name up to its first dot. */
static void models_host(char *buf, size_t len)
{
	const char *forced = getenv("STARPU_HOSTNAME");
	if (forced != NULL && forced[0] != '\0') {
		snprintf(buf, len, "%s", forced);
		return;
	}
	if (gethostname(buf, len - 1) != 0)
		buf[0] = '\0';
	buf[len - 1] = '\0';
	buf[strcspn(buf, ".")] = '\0';
}

void sp_tune_flag_estimated(const char *listing, FILE *out)
{
	char dir[4096], host[256];
	size_t ne = 0, nflag = 0;
	/* the listing's first line names the folder it read */
	if (sscanf(listing, "# performance models in %4095[^\n]", dir) != 1) {
		fputs(listing, out);
		return;
	}
	models_host(host, sizeof host);
	sp_estimated_t *e = sp_runtime_estimated_read(dir, host, &ne);
	for (const char *p = listing; *p != '\0';) {
		size_t len = strcspn(p, "\n");
		const char *fpp = memmem(p, len, " 0x", 3);
		size_t symlen = strcspn(p, " \n");
		const char *arch = p + symlen + strspn(p + symlen, " ");
		unsigned fp, n;
		double ms;
		const sp_estimated_t *hit = NULL;
		if (p[0] != '#' && fpp != NULL && sscanf(fpp, " 0x%x %u %lf ms", &fp, &n, &ms) == 3)
			for (size_t i = 0; i < ne && hit == NULL; i++)
				if (strlen(e[i].sym) == symlen && strncmp(e[i].sym, p, symlen) == 0 &&
				    strncmp(arch, e[i].worker, strlen(e[i].worker)) == 0 &&
				    isdigit((unsigned char)arch[strlen(e[i].worker)]) && e[i].fp == fp)
					hit = &e[i];
		fwrite(p, 1, len, out);
		if (hit != NULL) {
			/* the listing rounds the mean to the microsecond */
			int same = n == hit->n && fabs(ms * 1e3 - hit->mean_us) <= 0.5 + 1e-6 * hit->mean_us;
			const char *sep = len >= 2 && p[len - 1] == ' ' && p[len - 2] == ' ' ? "" : "; ";
			/* an origin that names its tool ("tools/fit-cpu-models: ...")
			 * is printed as it is; sim-node's do not */
			const int named = strncmp(hit->origin, "tools/", 6) == 0;
			char tool[64];
			snprintf(tool, sizeof tool, "%.*s",
				 named ? (int)strcspn(hit->origin, ":") : (int)strlen("tools/sim-node"),
				 named ? hit->origin : "tools/sim-node");
			if (same)
				fprintf(out, "%sESTIMATED by %s%s", sep, named ? "" : "tools/sim-node: ",
					hit->origin);
			else if (n > hit->n)
				fprintf(out, "%sESTIMATED in part: calibrated since, but may keep %s's "
					"%lu samples (--calibrate 2 drops them)", sep, tool, hit->n);
			nflag += same || n > hit->n;
		}
		p += len;
		if (*p == '\n')
			fputc(*p++, out);
	}
	if (nflag > 0)
		fprintf(out, "# %zu entr%s ESTIMATED (tools/sim-node, tools/fit-cpu-models) for %s, not measured there "
			"(%s/starpipe-estimated.tsv): calibrate on that node to replace them\n",
			nflag, nflag > 1 ? "ies" : "y", host, dir);
	free(e);
}
