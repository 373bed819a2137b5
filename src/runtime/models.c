/* Performance models: their folder (per user, private), the node type they are
 * filed under, the code version each was calibrated with, and reading them
 * (`starpipe models`, `calibrate`, a session's census of its graph's). */
#define _GNU_SOURCE
#include <ctype.h>
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
#include "graph.h"
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
	const char *pm = getenv("STARPU_PERF_MODEL_DIR");
	const char *sphome = getenv("STARPU_HOME");

	/* StarPU's own variables first, as StarPU reads them: a site that
	 * sets them for every StarPU program gets one folder of models. */
	if (pm != NULL && pm[0] != '\0') {
		snprintf(buf, len, "%s", pm);
		return 0;
	}
	if (sphome != NULL && sphome[0] != '\0') {
		snprintf(buf, len, "%s/.starpu/sampling", sphome);
		return 0;
	}
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

int sp_runtime_check_node_type(const char *name, char *msg, size_t len)
{
	size_t n = name != NULL ? strlen(name) : 0;
	size_t ok = name != NULL ? strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
					       "0123456789_-") : 0;
	if (n == 0 || n > SP_NODE_TYPE_MAX || ok != n || !isalnum((unsigned char)name[0])) {
		sp_fmt_fit(msg, len, "expected a name of 1 to %d letters, digits, '_' or '-', "
			   "starting with a letter or digit (it names files), got '%s'",
			   SP_NODE_TYPE_MAX, name != NULL ? name : "");
		return -1;
	}
	return 0;
}

/*
 * The default node type is Slurm's partition: a site's partitions usually
 * group one kind of node, and every node of a job's partition then shares
 * its models.  Slurm gives a job no variable naming its nodes' features
 * (sbatch(1), OUTPUT ENVIRONMENT VARIABLES; SLURM_CONSTRAINT is an input),
 * so a partition that mixes node kinds needs --node-type.  Outside Slurm,
 * StarPU's own name: the host name up to its first dot.  STARPU_HOSTNAME,
 * StarPU's knob, still wins over both (starpipe-sim's platform is named by
 * it).
 */
const char *sp_runtime_node_type(const char *asked, char *buf, size_t len)
{
	const char *forced = getenv("STARPU_HOSTNAME");
	if (asked != NULL && asked[0] != '\0') {
		snprintf(buf, len, "%s", asked);
		return "--node-type";
	}
	if (forced != NULL && forced[0] != '\0') {
		snprintf(buf, len, "%s", forced);
		return "STARPU_HOSTNAME";
	}
#ifndef SP_SIMGRID
	const char *part = getenv("SLURM_JOB_PARTITION");
	char msg[256];
	if (part != NULL && sp_runtime_check_node_type(part, msg, sizeof msg) == 0) {
		snprintf(buf, len, "%s", part);
		return "Slurm partition";
	}
#endif
	if (gethostname(buf, len - 1) != 0)
		snprintf(buf, len, "localhost");
	buf[len - 1] = '\0';
	buf[strcspn(buf, ".")] = '\0';
	return "host name";
}

int sp_runtime_bus_measured(const char *perfmodel_dir, const char *node_type)
{
	char dir[4096], path[4400];
	if (perfmodel_dir != NULL && perfmodel_dir[0] != '\0')
		snprintf(dir, sizeof dir, "%s", perfmodel_dir);
	else
		default_dir(dir, sizeof dir);
	/* StarPU's get_config_path (perfmodel_bus.c) */
	snprintf(path, sizeof path, "%s/bus/%s.config", dir, node_type);
	return access(path, F_OK) == 0;
}

unsigned sp_runtime_calibration_minimum(void)
{
	/* StarPU's threshold, and its variable (perfmodel_history.c) */
	const char *e = getenv("STARPU_CALIBRATE_MINIMUM");
	char *end;
	long v = e != NULL ? strtol(e, &end, 10) : -1;
	return e != NULL && *e != '\0' && *end == '\0' && v >= 0 && v < 1000000 ? (unsigned)v : 10;
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
	if (sp__rt.calibrate == 0 || !sp__rt.record_versions)
		return;
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

/* The folder `starpipe models` and `calibrate` read: dir, else the default;
 * checked when it exists (a file there is refused). */
static int read_folder(const char *dir, char *path, size_t len, sp_err_t *err)
{
	char msg[sizeof err->msg];
	if (dir != NULL && dir[0] != '\0')
		snprintf(path, len, "%s", dir);
	else
		sp_runtime_default_perfmodel_dir(path, len);
	if (access(path, F_OK) == 0 && sp_runtime_check_perfmodel_dir(path, msg, sizeof msg) != 0)
		return sp_seterr(err, SP_EIO, "perf-model folder: %s", msg);
	return 0;
}

/* Appends a row; 0 or SP_ENOMEM. */
static int add_row(sp_model_row_t **rows, size_t *n, size_t *cap, const sp_model_row_t *r,
		   sp_err_t *err)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		sp_model_row_t *nr = realloc(*rows, c * sizeof *nr);
		if (nr == NULL)
			return sp_seterr(err, SP_ENOMEM, "out of memory reading the models");
		*rows = nr;
		*cap = c;
	}
	(*rows)[(*n)++] = *r;
	return 0;
}

/* One codelet's rows: one per worker type and footprint of its model. */
static int symbol_rows(const char *symbol, const struct sp__ver *ver, size_t nver,
		       sp_model_row_t **rows, size_t *n, size_t *cap, sp_err_t *err)
{
	struct starpu_perfmodel model;
	char mpath[4096];
	sp_model_row_t r = { .symbol = symbol, .state = SP_MODEL_NONE };
	int ret = 0;

	memset(&model, 0, sizeof model);
	model.type = STARPU_HISTORY_BASED;
	starpu_perfmodel_get_model_path(symbol, mpath, sizeof mpath);
	if (access(mpath, R_OK) != 0 || starpu_perfmodel_load_symbol(symbol, &model) != 0)
		return add_row(rows, n, cap, &r, err);
	const char *rec = recorded_version(ver, nver, symbol);
	r.stale = rec != NULL && strcmp(rec, code_version(symbol)) != 0;
	size_t first = *n;
	int ncomb = starpu_perfmodel_get_narch_combs();
	for (int comb = 0; comb < ncomb && ret == 0; comb++) {
		struct starpu_perfmodel_arch *a = starpu_perfmodel_arch_comb_fetch(comb);
		for (unsigned impl = 0; impl < STARPU_MAXIMPLEMENTATIONS && ret == 0; impl++) {
			struct starpu_perfmodel_per_arch *pa =
				starpu_perfmodel_get_model_per_arch(&model, a, impl);
			if (pa == NULL)
				continue;
			starpu_perfmodel_get_arch_name(a, r.arch, sizeof r.arch, impl);
			/* StarPU numbers the combinations in the order it meets
			 * them, which differs between loads: the key does not */
			r.cuda = a->ndevices > 0 && a->devices[0].type == STARPU_CUDA_WORKER;
			snprintf(r.key, sizeof r.key, "%s:%d:%d:%u",
				 a->ndevices > 0 ? starpu_perfmodel_get_archtype_name(a->devices[0].type) : "-",
				 a->ndevices > 0 ? a->devices[0].devid : 0,
				 a->ndevices > 0 ? a->devices[0].ncores : 0, impl);
			for (struct starpu_perfmodel_history_list *l = pa->list; l != NULL && ret == 0;
			     l = l->next) {
				const struct starpu_perfmodel_history_entry *e = l->entry;
				double nn = e->nsample, mean = nn > 0 ? e->sum / nn : 0.0;
				double var = nn > 0 ? e->sum2 / nn - mean * mean : 0.0;
				r.state = SP_MODEL_MEASURED;
				r.footprint = e->footprint;
				r.nsample = e->nsample;
				r.mean_us = mean;
				r.spread = mean > 0 ? sqrt(var > 0 ? var : 0) / mean : 0.0;
				r.flops = e->flops;
				ret = add_row(rows, n, cap, &r, err);
			}
		}
	}
	if (ret == 0 && *n == first) {
		memset(&r, 0, sizeof r);
		r.symbol = symbol;
		r.state = SP_MODEL_EMPTY;
		r.stale = rec != NULL && strcmp(rec, code_version(symbol)) != 0;
		ret = add_row(rows, n, cap, &r, err);
	}
	starpu_perfmodel_unload_model(&model);
	return ret;
}

int sp_runtime_model_rows(const char *dir, const char *const *symbols, size_t n,
			  sp_model_row_t **rows, size_t *nrows, char *folder, size_t flen,
			  sp_err_t *err)
{
	struct sp__ver ver[SP__MAXKERNELS * 4];
	size_t cap = 0;
	int ret;

	*rows = NULL;
	*nrows = 0;
	if ((ret = read_folder(dir, folder, flen, err)) != 0)
		return ret;
	/* StarPU's reader outside a session, as its tools use it; it keeps
	 * the folder and the worker-type combinations it met from one read to
	 * the next; a session reads its own models (sp__models_census) */
	setenv("STARPU_PERF_MODEL_DIR", folder, 1);
	if (getenv("STARPU_SILENT") == NULL)
		setenv("STARPU_SILENT", "1", 1);
	starpu_perfmodel_initialize();
	size_t nver = read_versions(folder, ver, sizeof ver / sizeof ver[0]);
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = symbol_rows(symbols[i], ver, nver, rows, nrows, &cap, err);
	if (ret != 0) {
		free(*rows);
		*rows = NULL;
		*nrows = 0;
	}
	return ret;
}

int sp_runtime_models(const char *dir, const char *node_type_from, const char *const *symbols,
		      size_t n, FILE *out, sp_err_t *err)
{
	char path[4096];
	const char *nt = getenv("STARPU_HOSTNAME");
	size_t nmodel = 0, nuncal = 0, nnoisy = 0, nstale = 0, nrows;
	unsigned min = sp_runtime_calibration_minimum();
	sp_model_row_t *rows;
	int ret = sp_runtime_model_rows(dir, symbols, n, &rows, &nrows, path, sizeof path, err);

	if (ret != 0)
		return ret;
	fprintf(out, "# performance models in %s\n", path);
	if (nt != NULL)
		fprintf(out, "# node type %s (%s): files SYMBOL.%s\n", nt, node_type_from, nt);
	fprintf(out, "# %-18s %-18s %-10s %8s %12s %8s %8s  %s\n", "codelet", "worker type",
		"footprint", "samples", "mean", "spread", "GFLOP/s", "flags");
	for (size_t i = 0; i < nrows;) {
		const char *sym = rows[i].symbol;
		int bad = 0, noisy = 0, stale = rows[i].stale;
		if (rows[i].state == SP_MODEL_NONE) {
			fprintf(out, "%-20s %-18s %-10s %8s %12s %8s %8s  %s\n", sym, "-", "-", "0", "-",
				"-", "-", "uncalibrated: no model yet (run the graph with --calibrate 1)");
			nuncal++;
			i++;
			continue;
		}
		nmodel++;
		for (; i < nrows && rows[i].symbol == sym; i++) {
			const sp_model_row_t *r = &rows[i];
			if (r->state == SP_MODEL_EMPTY) {
				fprintf(out, "%-20s %-18s %-10s %8s %12s %8s %8s  %s\n", sym, "-", "-", "0",
					"-", "-", "-", "uncalibrated: the model holds no measurement");
				bad = 1;
				continue;
			}
			char uncal[64];
			snprintf(uncal, sizeof uncal, "uncalibrated: fewer than %u samples", min);
			const char *flag = stale ? "stale: calibrated on other code (rerun with --calibrate 2)"
					   : r->nsample < min ? uncal
					   : r->spread > 0.25 ? "noisy: spread above 25 %"
							      : "";
			bad |= r->nsample < min;
			noisy |= r->nsample >= min && r->spread > 0.25;
			/* the task's declared flops (STARPU_FLOPS) over its mean time */
			char gf[32] = "-";
			if (r->flops > 0 && r->mean_us > 0)
				snprintf(gf, sizeof gf, "%.3g", r->flops / r->mean_us * 1e-3);
			fprintf(out, "%-20s %-18s 0x%08" PRIx32 " %8u %9.3f ms %6.1f %% %8s  %s\n", sym,
				r->arch, r->footprint, r->nsample, r->mean_us / 1e3, 100 * r->spread, gf,
				flag);
		}
		nuncal += bad != 0;
		nnoisy += noisy != 0;
		nstale += stale;
	}
	fprintf(out, "# %zu codelet(s): %zu with a model, %zu uncalibrated, %zu noisy, %zu stale; "
		"calibrate with `starpipe calibrate GRAPH ITEM...` on representative inputs\n",
		n, nmodel, nuncal, nnoisy, nstale);
	free(rows);
	return 0;
}

/* Whether the history model of `symbol` (in the session's folder) has a
 * footprint with at least min samples on some worker type.  Read inside the
 * session, as sched_hp.c reads its ratios: StarPU 1.3's reader used outside
 * a session before starpu_init, then freed, crashed a later starpu_init
 * (seen with the CUDA build, whose init may restart without its GPU). */
static int symbol_calibrated(const char *symbol, unsigned min)
{
	struct starpu_perfmodel model;
	char path[4096];
	int ok = 0;
	memset(&model, 0, sizeof model);
	model.type = STARPU_HISTORY_BASED;
	starpu_perfmodel_get_model_path(symbol, path, sizeof path);
	if (access(path, R_OK) != 0 || starpu_perfmodel_load_symbol(symbol, &model) != 0)
		return 0;
	int ncomb = starpu_perfmodel_get_narch_combs();
	for (int comb = 0; comb < ncomb && !ok; comb++) {
		struct starpu_perfmodel_arch *a = starpu_perfmodel_arch_comb_fetch(comb);
		for (unsigned impl = 0; a != NULL && impl < STARPU_MAXIMPLEMENTATIONS; impl++) {
			struct starpu_perfmodel_per_arch *pa =
				starpu_perfmodel_get_model_per_arch(&model, a, impl);
			for (struct starpu_perfmodel_history_list *l = pa != NULL ? pa->list : NULL;
			     l != NULL && !ok; l = l->next)
				ok = l->entry != NULL && l->entry->nsample >= min;
		}
	}
	starpu_perfmodel_unload_model(&model);
	return ok;
}

/* sp__models_census (runtime_int.h) */
void sp__models_census(const sp_graph_t *g)
{
	char *syms[256];
	size_t n = sp_graph_codelets(NULL, g, syms, sizeof syms / sizeof syms[0]);
	unsigned min = sp_runtime_calibration_minimum();

	sp__rt.ncodelets = n;
	sp__rt.ncalibrated = 0;
	for (size_t i = 0; i < n; i++) {
		sp__rt.ncalibrated += symbol_calibrated(syms[i], min) != 0;
		free(syms[i]);
	}
}

sp_estimated_t *sp_runtime_estimated_read(const char *dir, const char *host, size_t *n)
{
	char path[4200], *line = NULL, hst[256];
	size_t cap = 0;
	sp_estimated_t *e = NULL;
	*n = 0;
	snprintf(path, sizeof path, "%s/starpipe-estimated.tsv", dir);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return NULL;
	while (getline(&line, &cap, f) > 0) {
		sp_estimated_t x;
		if (line[0] == '#' ||
		    sscanf(line, "%127[^\t]\t%255[^\t]\t%15[^\t]\t%lx\t%lu\t%lf\t%127[^\n]", x.sym, hst,
			   x.worker, &x.fp, &x.n, &x.mean_us, x.origin) != 7 ||
		    strcmp(hst, host) != 0)
			continue;
		sp_estimated_t *ne = realloc(e, (*n + 1) * sizeof *ne);
		if (ne == NULL)
			break;
		e = ne;
		e[(*n)++] = x;
	}
	free(line);
	fclose(f);
	return e;
}
