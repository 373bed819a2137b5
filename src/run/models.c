/* Performance models: their folder (per user, private), the code version each
 * was calibrated with, and `starpipe models` (samples, spread, stale ones flagged). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "runtime.h"
#include "runtime_int.h"


/* The per-user default folder of performance models into buf; returns 1
 * when it is the fallback under $TMPDIR (or /tmp), whose parent
 * `starpipe-UID` must then be private (see private_dir), else 0. */
static int default_dir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	const char *tmp = getenv("TMPDIR");

	if (xdg != NULL && xdg[0] == '/') {
		snprintf(buf, len, "%s/starpipe/perfmodels", xdg);
		return 0;
	}
	if (home != NULL && home[0] != '\0') {
		snprintf(buf, len, "%s/.cache/starpipe/perfmodels", home);
		return 0;
	}
	snprintf(buf, len, "%s/starpipe-%u/perfmodels",
		 tmp != NULL && tmp[0] == '/' ? tmp : "/tmp", (unsigned)getuid());
	return 1;
}

const char *sp_runtime_default_perfmodel_dir(char *buf, size_t len)
{
	default_dir(buf, len);
	return buf;
}

/* Makes sure `path` (the fallback's `starpipe-UID` under a shared,
 * world-writable folder) is ours alone before anything is written under it:
 * created 0700 if missing; refused if it is a symbolic link, not a folder,
 * owned by another user, or writable by group or others, since whoever
 * controls it controls the performance models we load (and, through a
 * link, where we write). */
static int private_dir(const char *path, sp_err_t *err)
{
	struct stat st;
	int fd;

	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return sp_seterr(err, SP_EIO, "cannot create folder '%s': %s", path,
				 strerror(errno));
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;

		if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
			return sp_seterr(err, SP_EIO,
					 "refusing perf-model folder '%s': it is a symbolic link (remove it, or set HOME or --perfmodel-dir)",
					 path);
		return sp_seterr(err, SP_EIO, "refusing perf-model folder '%s': %s", path,
				 e == ENOTDIR ? "not a folder" : strerror(e));
	}
	if (fstat(fd, &st) != 0) {
		int e = errno;

		close(fd);
		return sp_seterr(err, SP_EIO, "cannot inspect folder '%s': %s", path, strerror(e));
	}
	close(fd);
	if (st.st_uid != getuid())
		return sp_seterr(err, SP_EIO,
				 "refusing perf-model folder '%s': it is owned by uid %u, not by you (uid %u)",
				 path, (unsigned)st.st_uid, (unsigned)getuid());
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
		return sp_seterr(err, SP_EIO,
				 "refusing perf-model folder '%s': it is writable by %s (chmod 700 it)",
				 path, (st.st_mode & S_IWOTH) != 0 ? "everyone" : "its group");
	return 0;
}

int sp_runtime_check_perfmodel_dir(const char *path, char *msg, size_t len)
{
	struct stat st;

	if (path == NULL || path[0] == '\0')
		return 0;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return 0;
		sp_fmt_fit(msg, len, "'%s' is not a folder", path);
		return -1;
	}
	if (errno == ENOENT)
		return 0; /* created at start */
	sp_fmt_fit(msg, len, "'%s': %s", path, strerror(errno));
	return -1;
}

int sp__models_dir(const char *asked, char *dir, size_t len, sp_err_t *err)
{
	char msg[sizeof err->msg];
	int ret;

	if (asked != NULL && asked[0] != '\0') {
		snprintf(dir, len, "%s", asked);
	} else if (default_dir(dir, len)) {
		char *slash = strrchr(dir, '/');

		*slash = '\0';
		ret = private_dir(dir, err);
		*slash = '/';
		if (ret != 0)
			return ret;
	}
	if (sp_runtime_check_perfmodel_dir(dir, msg, sizeof msg) != 0)
		return sp_seterr(err, SP_EIO, "perf-model folder: %s", msg);
	return sp_mkdirs(dir, err); /* err names the folder */
}

/* The code version of each pipeline's codelets, by symbol prefix (generated
 * by the build: a checksum of codelets/PIPELINE/'s sources). */
static const struct {
	const char *prefix, *version;
} code_versions[] = {
#include "codelet_versions.h"
};

static const char *code_version(const char *symbol)
{
	for (size_t i = 0; i < sizeof code_versions / sizeof code_versions[0]; i++)
		if (strncmp(symbol, code_versions[i].prefix, strlen(code_versions[i].prefix)) == 0)
			return code_versions[i].version;
	return "";
}

/* The versions file beside the models: "SYMBOL<TAB>VERSION" lines, the code
 * version each model was started with.  At most SP__MAXKERNELS * 4 entries. */
#define SP__VERSIONS "starpipe-codelets.tsv"
struct sp__ver {
	char sym[96], ver[32];
};

static size_t read_versions(const char *dir, struct sp__ver *v, size_t max)
{
	char path[4200], line[160];
	size_t n = 0;
	snprintf(path, sizeof path, "%s/%s", dir, SP__VERSIONS);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	while (n < max && fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "%95[^\t]\t%31s", v[n].sym, v[n].ver) == 2)
			n++;
	fclose(f);
	return n;
}

static const char *recorded_version(const struct sp__ver *v, size_t n, const char *sym)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(v[i].sym, sym) == 0)
			return v[i].ver;
	return NULL;
}

/* sp__runtime_update_versions (runtime_int.h) */
void sp__runtime_update_versions(void)
{
	struct sp__ver v[SP__MAXKERNELS * 4];
	size_t n = read_versions(sp__rt.pmdir, v, SP__MAXKERNELS * 3), n0 = n;
	int changed = 0;
	for (size_t i = 0; i < sp__rt.nk; i++) {
		const char *now = code_version(sp__rt.k[i].kernel);
		size_t j;
		for (j = 0; j < n && strcmp(v[j].sym, sp__rt.k[i].kernel) != 0; j++)
			;
		if (j == n && n < sizeof v / sizeof v[0]) {
			snprintf(v[n].sym, sizeof v[n].sym, "%s", sp__rt.k[i].kernel);
			snprintf(v[n].ver, sizeof v[n].ver, "%s", now);
			n++;
		} else if (j < n && sp__rt.calibrate == 2 && strcmp(v[j].ver, now) != 0) {
			snprintf(v[j].ver, sizeof v[j].ver, "%s", now);
			changed = 1;
		}
	}
	if (n == n0 && !changed)
		return;
	char path[4200], text[sizeof v];
	size_t len = 0;
	for (size_t j = 0; j < n; j++)
		len += (size_t)snprintf(text + len, sizeof text - len, "%s\t%s\n", v[j].sym, v[j].ver);
	sp_err_t err = { 0 };
	snprintf(path, sizeof path, "%s/%s", sp__rt.pmdir, SP__VERSIONS);
	if (sp_write_file_atomic(path, text, len, &err) != 0)
		fprintf(stderr, "starpipe: warning: %s\n", err.msg);
}

int sp_runtime_models(const char *dir, const char *const *symbols, size_t n, FILE *out,
		      sp_err_t *err)
{
	char path[4096], msg[sizeof err->msg], arch[64];
	size_t nmodel = 0, nuncal = 0, nnoisy = 0, nstale = 0;
	struct sp__ver ver[SP__MAXKERNELS * 4];

	if (dir != NULL && dir[0] != '\0')
		snprintf(path, sizeof path, "%s", dir);
	else
		sp_runtime_default_perfmodel_dir(path, sizeof path);
	if (access(path, F_OK) == 0 && sp_runtime_check_perfmodel_dir(path, msg, sizeof msg) != 0)
		return sp_seterr(err, SP_EIO, "perf-model folder: %s", msg);
	setenv("STARPU_PERF_MODEL_DIR", path, 1);
	if (getenv("STARPU_SILENT") == NULL)
		setenv("STARPU_SILENT", "1", 1);
	starpu_perfmodel_initialize();
	size_t nver = read_versions(path, ver, sizeof ver / sizeof ver[0]);
	fprintf(out, "# performance models in %s\n", path);
	fprintf(out, "# %-18s %-18s %-10s %8s %12s %8s %8s  %s\n", "codelet", "worker type",
		"footprint", "samples", "mean", "spread", "GFLOP/s", "flags");
	for (size_t i = 0; i < n; i++) {
		struct starpu_perfmodel model;
		int rows = 0;

		char mpath[4096];
		memset(&model, 0, sizeof model);
		model.type = STARPU_HISTORY_BASED;
		starpu_perfmodel_get_model_path(symbols[i], mpath, sizeof mpath);
		if (access(mpath, R_OK) != 0 || starpu_perfmodel_load_symbol(symbols[i], &model) != 0) {
			fprintf(out, "%-20s %-18s %-10s %8s %12s %8s %8s  %s\n", symbols[i], "-", "-", "0",
				"-", "-", "-", "uncalibrated: no model yet (run the graph with --calibrate 1)");
			nuncal++;
			continue;
		}
		nmodel++;
		const char *rec = recorded_version(ver, nver, symbols[i]);
		int stale = rec != NULL && strcmp(rec, code_version(symbols[i])) != 0;
		int ncomb = starpu_perfmodel_get_narch_combs(), bad = 0, noisy = 0;
		for (int comb = 0; comb < ncomb; comb++) {
			struct starpu_perfmodel_arch *a = starpu_perfmodel_arch_comb_fetch(comb);
			for (unsigned impl = 0; impl < STARPU_MAXIMPLEMENTATIONS; impl++) {
				struct starpu_perfmodel_per_arch *pa =
					starpu_perfmodel_get_model_per_arch(&model, a, impl);
				if (pa == NULL)
					continue;
				starpu_perfmodel_get_arch_name(a, arch, sizeof arch, impl);
				for (struct starpu_perfmodel_history_list *l = pa->list; l != NULL;
				     l = l->next) {
					const struct starpu_perfmodel_history_entry *e = l->entry;
					double nn = e->nsample, mean = nn > 0 ? e->sum / nn : 0.0;
					double var = nn > 0 ? e->sum2 / nn - mean * mean : 0.0;
					double rel = mean > 0 ? sqrt(var > 0 ? var : 0) / mean : 0.0;
					const char *flag =
						stale ? "stale: calibrated on other code (rerun with --calibrate 2)"
						: e->nsample < 10 ? "uncalibrated: fewer than 10 samples"
						: rel > 0.25      ? "noisy: spread above 25 %"
								  : "";
					bad |= e->nsample < 10;
					noisy |= e->nsample >= 10 && rel > 0.25;
					/* the task's declared flops (STARPU_FLOPS) over its mean time */
					char gf[32] = "-";
					if (e->flops > 0 && mean > 0)
						snprintf(gf, sizeof gf, "%.3g", e->flops / mean * 1e-3);
					fprintf(out, "%-20s %-18s 0x%08" PRIx32 " %8u %9.3f ms %6.1f %% %8s  %s\n",
						symbols[i], arch, e->footprint, e->nsample, mean / 1e3,
						100 * rel, gf, flag);
					rows++;
				}
			}
		}
		if (rows == 0) {
			fprintf(out, "%-20s %-18s %-10s %8s %12s %8s %8s  %s\n", symbols[i], "-", "-", "0",
				"-", "-", "-", "uncalibrated: the model holds no measurement");
			bad = 1;
		}
		nuncal += bad != 0;
		nnoisy += noisy != 0;
		nstale += stale;
		starpu_perfmodel_unload_model(&model);
	}
	fprintf(out, "# %zu codelet(s): %zu with a model, %zu uncalibrated, %zu noisy, %zu stale; "
		"calibrate with `starpipe run GRAPH --calibrate 1` on representative inputs\n",
		n, nmodel, nuncal, nnoisy, nstale);
	return 0;
}
