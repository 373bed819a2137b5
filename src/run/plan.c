/* Output planning: every item's outputs expanded before the batch runs,
 * collisions refused, dead runs' temporaries removed, and each item checked
 * before it runs (--skip-existing, memory, free space). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "batch_int.h"
#include "sim_host.h"
#include "runtime.h"

const sp_graph_t *sp_run_item_graph(const sp_graph_t *g, const sp_graph_t *const *ig, size_t i)
{
	return ig != NULL && ig[i] != NULL ? ig[i] : g;
}

void sp__free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Appends t to the list v (cnt, cap); frees t when it cannot. */
static int push_output(char ***v, size_t *cnt, size_t *cap, char *t)
{
	if (*cnt == *cap) {
		char **nv = realloc(*v, (*cap = *cap ? 2 * *cap : 4) * sizeof *nv);
		if (nv == NULL) {
			free(t);
			return SP_ENOMEM;
		}
		*v = nv;
	}
	(*v)[(*cnt)++] = t;
	return 0;
}

/* The file of stage st's parameter p for the item (malloc'd), or NULL when
 * the stage does not write it: not an output, an optional output left ""
 * or one its kind's writes() declines.  0, SP_ENOMEM, or the code of a
 * ${header.KEY} that cannot be read (why says it). */
static int output_file(const sp_gstage_t *st, size_t p, const char *item, size_t index,
		       char **file, sp_err_t *why)
{
	const sp_param_spec_t *spec = &st->kind->params[p];
	*file = NULL;
	if (spec->type != SP_PT_OUTPUT ||
	    (st->kind->writes != NULL && !st->kind->writes(st, spec->name)))
		return 0;
	sp_err_t e = { 0 };
	char *t = sp_gstage_expand(st, spec->name, item, index, &e);
	if (t == NULL && e.code != SP_ENOMEM && why != NULL)
		*why = e;
	if (t == NULL)
		return e.code;
	if (t[0] == '\0')
		free(t);
	else
		*file = t;
	return 0;
}

/* The item's outputs: the files of every stage's SP_PT_OUTPUT parameters
 * that it writes, in stage and parameter order.  An output named by a
 * header keyword that cannot be read gives the item no outputs at all (so
 * --skip-existing never takes it for done) and why says it: the item
 * fails when its stage expands the name. */
int sp__plan_outputs(const sp_graph_t *g, const char *path, size_t index, char ***out,
			size_t *n, sp_err_t *why)
{
	char **v = NULL;
	size_t cnt = 0, cap = 0;
	*out = NULL;
	*n = 0;
	for (size_t s = 0; s < g->nstages; s++)
		for (size_t p = 0; p < g->stages[s].kind->nparams; p++) {
			char *t;
			int rc = output_file(&g->stages[s], p, path, index, &t, why);
			if (rc != 0 && rc != SP_ENOMEM) {
				sp__free_strv(v, cnt);
				return 0;
			}
			if (rc != 0 || (t != NULL && push_output(&v, &cnt, &cap, t) != 0))
				goto oom;
		}
	*out = v;
	*n = cnt;
	return 0;
oom:
	sp__free_strv(v, cnt);
	return SP_ENOMEM;
}

/* A name for comparing outputs: the longest existing ancestor folder
 * resolved (symlinks, "..", "./"), the rest as written. */
static char *canon_path(const char *path)
{
	char head[PATH_MAX], real[PATH_MAX], *out = NULL;
	if (snprintf(head, sizeof head, "%s", path) >= (int)sizeof head)
		return strdup(path);
	size_t len = strlen(head);
	for (;;) {
		char *slash = strrchr(head, '/');
		const char *dir = ".";
		if (slash == head)
			dir = "/";
		else if (slash != NULL) {
			*slash = '\0';
			dir = head;
		}
		if (realpath(dir, real) != NULL) {
			const char *tail = path + (slash == NULL ? 0 : (size_t)(slash - head) + 1);
			if (asprintf(&out, "%s/%s", strcmp(real, "/") == 0 ? "" : real, tail) < 0)
				out = NULL;
			return out;
		}
		if (slash == NULL || slash == head || (size_t)(slash - head) >= len)
			return strdup(path);
	}
}

struct outref {
	char *canon;
	const char *path; /* as expanded */
	size_t item;
};

static int cmp_outref(const void *a, const void *b)
{
	const struct outref *x = a, *y = b;
	int c = strcmp(x->canon, y->canon);
	return c ? c : (x->item > y->item) - (x->item < y->item);
}

/* Refuses two outputs that are one file, naming both inputs. */
int sp__check_collisions(char *const *items, char **const *outs, const size_t *nouts,
			    size_t nitems, sp_err_t *err)
{
	size_t n = 0, k = 0;
	int rc = 0;
	for (size_t i = 0; i < nitems; i++)
		n += nouts[i];
	struct outref *r = calloc(n ? n : 1, sizeof *r);
	if (r == NULL)
		return sp_seterr(err, SP_ENOMEM, "out of memory planning %zu outputs", n);
	for (size_t i = 0; i < nitems; i++)
		for (size_t o = 0; o < nouts[i]; o++, k++) {
			r[k].path = outs[i][o];
			r[k].item = i;
			if ((r[k].canon = canon_path(outs[i][o])) == NULL) {
				rc = sp_seterr(err, SP_ENOMEM, "out of memory");
				goto out;
			}
		}
	qsort(r, n, sizeof *r, cmp_outref);
	for (k = 1; k < n; k++) {
		if (strcmp(r[k - 1].canon, r[k].canon) != 0)
			continue;
		if (r[k - 1].item == r[k].item)
			rc = sp_seterr(err, SP_EINVAL, "output collision: %s: writes '%s' twice",
				       items[r[k].item], r[k].path);
		else
			rc = sp_seterr(err, SP_EINVAL,
				       "output collision: %s and %s would both write '%s'; "
				       "refused before running (make the output names differ, "
				       "e.g. with ${stem} and distinct folders)",
				       items[r[k - 1].item], items[r[k].item], r[k].path);
		break;
	}
out:
	for (k = 0; k < n; k++)
		free(r[k].canon);
	free(r);
	return rc;
}

int sp_run_plan_check(const sp_graph_t *g, const sp_graph_t *const *ig, char *const *items,
		      size_t nitems, sp_err_t *err)
{
	char ***outs = calloc(nitems ? nitems : 1, sizeof *outs);
	size_t *nouts = calloc(nitems ? nitems : 1, sizeof *nouts);
	int rc = 0;
	if (outs == NULL || nouts == NULL)
		rc = sp_seterr(err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	for (size_t i = 0; rc == 0 && i < nitems; i++)
		if (sp__plan_outputs(sp_run_item_graph(g, ig, i), items[i], i, &outs[i], &nouts[i], NULL) != 0)
			rc = sp_seterr(err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	if (rc == 0)
		rc = sp__check_collisions(items, outs, nouts, nitems, err);
	for (size_t i = 0; outs != NULL && nouts != NULL && i < nitems; i++)
		sp__free_strv(outs[i], nouts[i]);
	free(outs);
	free(nouts);
	return rc;
}

struct fileid {
	dev_t dev;
	ino_t ino;
	size_t item;
};

static int cmp_fileid(const void *a, const void *b)
{
	const struct fileid *x = a, *y = b;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return (x->item > y->item) - (x->item < y->item);
}

/* The items' files by device and inode, sorted; the items that cannot be
 * stat()ed are left out (their read fails them later). */
static struct fileid *item_ids(char *const *items, size_t nitems, size_t *n)
{
	struct fileid *id = calloc(nitems ? nitems : 1, sizeof *id);
	struct stat sb;
	*n = 0;
	for (size_t i = 0; id != NULL && i < nitems; i++)
		if (stat(items[i], &sb) == 0 && S_ISREG(sb.st_mode))
			id[(*n)++] = (struct fileid){ sb.st_dev, sb.st_ino, i };
	if (id != NULL)
		qsort(id, *n, sizeof *id, cmp_fileid);
	return id;
}

/* The first item whose file is `path` (same device and inode: symlinks and
 * hard links included), or SIZE_MAX. */
static size_t find_item(const struct fileid *id, size_t n, const char *path)
{
	struct stat sb;
	if (path == NULL || stat(path, &sb) != 0)
		return SIZE_MAX;
	struct fileid key = { sb.st_dev, sb.st_ino, 0 };
	const struct fileid *lo = id, *hi = id + n;
	while (lo < hi) { /* lower bound: the first item of that file */
		const struct fileid *mid = lo + (hi - lo) / 2;
		if (cmp_fileid(mid, &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < id + n && lo->dev == key.dev && lo->ino == key.ino ? lo->item : SIZE_MAX;
}

int sp_run_plan_inputs(const sp_graph_t *g, const sp_graph_t *const *ig, char *const *items,
		       size_t nitems, size_t *producer, sp_err_t *err)
{
	size_t nid;
	struct fileid *id = item_ids(items, nitems, &nid);
	int rc = 0;
	if (id == NULL)
		return sp_seterr(err, SP_ENOMEM, "out of memory planning %zu items", nitems);
	for (size_t i = 0; i < nitems; i++)
		producer[i] = SIZE_MAX;
	for (size_t i = 0; rc == 0 && i < nitems; i++) {
		char **outs = NULL;
		size_t nouts = 0;
		if (sp__plan_outputs(sp_run_item_graph(g, ig, i), items[i], i, &outs, &nouts, NULL) != 0) {
			rc = sp_seterr(err, SP_ENOMEM, "out of memory planning %zu items", nitems);
			break;
		}
		for (size_t o = 0; o < nouts; o++) {
			size_t k = find_item(id, nid, outs[o]);
			if (k == i) {
				rc = sp_seterr(err, SP_EINVAL, "%s: its output '%s' is the input itself; "
							       "refused before running", items[i], outs[o]);
				break;
			}
			if (k != SIZE_MAX && producer[k] == SIZE_MAX)
				producer[k] = i;
		}
		sp__free_strv(outs, nouts);
	}
	free(id);
	return rc;
}

const char *sp_run_path_is_input(const sp_graph_t *g, char *const *items, size_t nitems,
				 const char *path)
{
	struct stat sb, gb;
	if (path == NULL || stat(path, &sb) != 0)
		return NULL;
	if (g->file != NULL && stat(g->file, &gb) == 0 && gb.st_dev == sb.st_dev &&
	    gb.st_ino == sb.st_ino)
		return g->file;
	for (size_t i = 0; i < nitems; i++)
		if (stat(items[i], &gb) == 0 && gb.st_dev == sb.st_dev && gb.st_ino == sb.st_ino)
			return items[i];
	return NULL;
}

unsigned long long sp_run_machine_memory(void)
{
	/* starpipe-sim: the simulated node's, when its host model says */
	if (sp_sim_host_memory() > 0)
		return sp_sim_host_memory();
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	unsigned long long mem = pages > 0 && psz > 0 ? (unsigned long long)pages * (unsigned long long)psz
						       : 0;
	/* cgroup v2: "0::/path" in /proc/self/cgroup, its memory.max */
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096], path[4200];
	while (f != NULL && fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
		FILE *m = fopen(path, "re");
		unsigned long long lim;
		if (m != NULL && fscanf(m, "%llu", &lim) == 1 && lim > 0 && (mem == 0 || lim < mem))
			mem = lim;
		if (m != NULL)
			fclose(m);
	}
	if (f != NULL)
		fclose(f);
	/* ulimit -v: the address space left beyond what is mapped now; at
	 * least 1 byte, 0 meaning unknown */
	unsigned long long left = sp_runtime_address_space_left();
	if (left != ULLONG_MAX && (mem == 0 || left < mem))
		mem = left > 0 ? left : 1;
	return mem;
}

/* The item's peak memory, estimated from its inputs' headers by the stages
 * that allocate (sp_stage_kind_t.estimate), plus the process's baseline. */
#define SP__BASE_BYTES (64ull << 20)
static int estimate_item(sp_item_t *it, unsigned long long *bytes, unsigned long long *out_bytes,
			 sp_err_t *err)
{
	sp_estimate_t e = { 0, SP__BASE_BYTES, 0 };
	for (size_t s = 0; s < it->g->nstages; s++) {
		const sp_gstage_t *st = &it->g->stages[s];
		if (st->kind->estimate != NULL) {
			int rc = st->kind->estimate(it, st, &e, err);
			if (rc != 0)
				return rc;
		}
	}
	*bytes = e.bytes;
	*out_bytes = e.out_bytes;
	return 0;
}

unsigned long long sp__memory_limit(const sp_run_opts_t *opts)
{
	return opts->memory_limit ? opts->memory_limit : sp_run_machine_memory();
}

const char *sp__human_bytes(unsigned long long b, char *buf, size_t size)
{
	if (b >= (1ull << 30))
		snprintf(buf, size, "%.1f GiB", (double)b / (double)(1ull << 30));
	else if (b >= (1ull << 20))
		snprintf(buf, size, "%.0f MiB", (double)b / (double)(1ull << 20));
	else
		snprintf(buf, size, "%.0f KiB", (double)b / 1024.0);
	return buf;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Removes the temporaries dead runs left in the batch's output folders:
 * each distinct folder is scanned once (a batch writes thousands of files
 * into a few folders). */
void sp__clean_stale(struct sp_batch *b)
{
	size_t n = 0, k = 0;
	for (size_t i = 0; i < b->nitems; i++)
		n += b->state[i].noutputs;
	char **dirs = calloc(n ? n : 1, sizeof *dirs);
	if (dirs == NULL)
		return;
	for (size_t i = 0; i < b->nitems; i++)
		for (size_t o = 0; o < b->state[i].noutputs; o++) {
			const char *p = b->state[i].outputs[o], *slash = strrchr(p, '/');
			dirs[k] = slash == NULL ? strdup(".")
				  : strndup(p, slash == p ? 1 : (size_t)(slash - p));
			if (dirs[k] != NULL)
				k++;
		}
	qsort(dirs, k, sizeof *dirs, cmp_str);
	for (size_t i = 0; i < k; i++) {
		if (i > 0 && strcmp(dirs[i], dirs[i - 1]) == 0)
			continue;
		size_t r = sp_outset_clean_stale_dir(dirs[i]);
		if (r > 0 && !b->opts->quiet)
			fprintf(stderr, "starpipe: %s: removed %zu temporary file(s) of a dead run\n",
				dirs[i], r);
	}
	sp__free_strv(dirs, k);
}

/* The item's output folders exist (made now: a folder that cannot be made
 * fails the item before its work), and the file system of the first has
 * room for the outputs' estimated size (out_need, a lower bound). */
static int plan_output_space(sp_item_t *it, unsigned long long out_need, sp_err_t *err)
{
	for (size_t o = 0; o < it->noutputs; o++) {
		char dir[4096], base[1024];
		if (sp_split_path(it->outputs[o], dir, sizeof dir, base, sizeof base) != 0)
			return sp_seterr(err, SP_EINVAL, "%s: output path too long", it->outputs[o]);
		sp_err_t merr = { 0 };
		if (sp_mkdirs(dir, &merr) != 0)
			return sp_seterr(err, merr.code, "%s: %s", it->path, merr.msg);
		struct statvfs vs;
		if (o > 0 || out_need == 0 || statvfs(dir, &vs) != 0)
			continue;
		unsigned long long avail = (unsigned long long)vs.f_bavail * vs.f_frsize;
		char nb[32], ab[32];
		if (avail < out_need)
			return sp_seterr(err, SP_EIO,
					 "%s: its output needs about %s but '%s' has %s free; refused "
					 "before running",
					 it->path, sp__human_bytes(out_need, nb, sizeof nb), dir,
					 sp__human_bytes(avail, ab, sizeof ab));
	}
	return 0;
}

/* --skip-existing: the item's existing outputs, each checked by its stage's
 * kind (sp_stage_kind_t.verify), in sp__plan_outputs()'s order.  0 when all are
 * whole; else SP_E* with err naming the first damaged file and why. */
static int verify_outputs(const sp_item_t *it, sp_err_t *err)
{
	const sp_graph_t *g = it->g;
	int rc = 0;
	for (size_t s = 0; rc == 0 && s < g->nstages; s++) {
		const sp_gstage_t *st = &g->stages[s];
		for (size_t p = 0; rc == 0 && st->kind->verify != NULL && p < st->kind->nparams; p++) {
			char *t;
			int r = output_file(st, p, it->path, it->index, &t, err);
			if (r != 0 && r != SP_ENOMEM)
				rc = r;
			else if (r != 0)
				rc = sp_seterr(err, SP_ENOMEM, "%s: out of memory", it->path);
			else if (t != NULL)
				rc = st->kind->verify(st, st->kind->params[p].name, t, err);
			free(t);
		}
	}
	return rc;
}

/* Before the batch: refuses an item whose output exists and is not a
 * regular file, skips (on request) an item whose every output exists and
 * is whole, and refuses an item that would not fit in memory. */
void sp__plan_item(struct sp_batch *b, sp_item_t *it)
{
	sp_err_t err = { 0 }, verr = { 0 };
	size_t present = 0;
	for (size_t o = 0; o < it->noutputs; o++) {
		struct stat sb;
		if (sp_output_check(it->outputs[o], &err) != 0) {
			sp_status_set_err(&it->status, &err);
			fprintf(stderr, "starpipe: %s: %s\n", it->path, err.msg);
			atomic_store(&it->state, IT_FAILED);
			atomic_fetch_add(&b->nfailed, 1);
			sp__journal_item(b, it);
			sp_runtime_item_done();
			return;
		}
		if (lstat(it->outputs[o], &sb) == 0 && S_ISREG(sb.st_mode))
			present++;
	}
	if (b->opts->skip_existing && it->noutputs > 0 && present == it->noutputs &&
	    verify_outputs(it, &verr) != 0) {
		/* truncated or damaged since it was written: made again, and
		 * said so (even with -q: it is about the data) */
		fprintf(stderr, "starpipe: %s; the output is damaged: %s is recomputed\n", verr.msg,
			it->path);
		present = 0;
	}
	if (b->opts->skip_existing && it->noutputs > 0 && present == it->noutputs) {
		atomic_store(&it->state, IT_SKIPPED);
		atomic_fetch_add(&b->nskipped, 1);
		if (b->opts->verbose)
			fprintf(stderr, "[starpipe] %s: every output exists; skipped\n", it->path);
		sp__journal_item(b, it);
		sp_runtime_item_done();
		return;
	}
	/* Memory up front: an item that cannot fit fails now, with the figure,
	 * not after minutes of work or by the kernel's OOM killer. */
	unsigned long long need = 0, limit = sp__memory_limit(b->opts);
	unsigned long long out_need = 0;
	int rc = estimate_item(it, &need, &out_need, &err);
	char nb[32], lb[32];
	if (rc == 0 && limit > 0 && need > limit)
		rc = sp_seterr(&err, SP_ENOMEM,
			       "%s: needs about %s of memory (estimated from its header), more than "
			       "the %s %s; refused before running",
			       it->path, sp__human_bytes(need, nb, sizeof nb), sp__human_bytes(limit, lb, sizeof lb),
			       b->opts->memory_limit ? "of --memory-limit" : "this machine has (or its cgroup, or ulimit -v beyond the program)");
	if (rc == 0)
		rc = plan_output_space(it, out_need, &err);
	if (rc != 0) {
		sp_status_set_err(&it->status, &err);
		fprintf(stderr, "starpipe: %s\n", it->status.err.msg);
		atomic_store(&it->state, IT_FAILED);
		atomic_fetch_add(&b->nfailed, 1);
		sp__journal_item(b, it);
		sp_runtime_item_done();
		return;
	}
	sp_item_report_num(it, "memory_estimate_bytes", (double)need);
	unsigned long long m = atomic_load(&b->need_max);
	while (need > m && !atomic_compare_exchange_weak(&b->need_max, &m, need))
		;
}
