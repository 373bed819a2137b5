/* starpipe run --follow DIR: the files of a folder processed as they appear, the runtime kept warm. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cluster.h"
#include "clock.h"
#include "run.h"
#include "runtime.h"

/*
 * DESIGN: one StarPU session for the whole watch.  The folder is polled
 * (inotify would miss files on NFS and other network file systems, where
 * microscopes and DAQs write): a file matching the graph's `inputs:
 * folder:` pattern counts once its size and mtime have stayed the same for
 * --settle seconds, which covers a writer that writes in place as well as
 * one that renames a finished file in.  Its mtime is when it was last
 * written, so a file first seen with an mtime older than that is complete
 * at once (one that arrived while a batch ran, or was moved in).  The complete files found by a poll
 * run as one batch (sp_run(), every guarantee of a batch: outputs
 * committed whole, a failed item reported and journaled); files that
 * become complete meanwhile wait for the next.  The journal says which
 * files are done (ok, failed or skipped), so each file runs once across
 * restarts; one that was running when the process died has no line and
 * runs again.  A stop signal cancels the items in flight (no partial
 * output) and ends the watch.
 */

#define POLL_S 0.1 /* between polls of the folder */

struct watched {
	char *path;
	char *real; /* realpath, to match the journal's lines */
	off_t size;
	struct timespec mtime;
	double stable_since; /* wall clock: its mtime, or when size or mtime were seen to change */
	int done;            /* ran (or was journaled done by an earlier process) */
	int failed;          /* it failed here: run again if it changes (a writer not done) */
};

struct watch {
	struct watched *f;
	size_t n, cap;
	struct jdone *journal_done; /* the journal's finished items, by realpath, sorted */
	size_t njd;
	size_t nok, nfailed, nwaiting;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* An item the journal says ended: its last line's.  A failed one keeps its
 * file's size and mtime then (input_size, input_mtime), when the line has
 * them: a file changed since is run again. */
struct jdone {
	char *real;
	size_t seq; /* its line's position: the last line of an item counts */
	int failed, stamped;
	long long size, sec;
	long nsec;
};

static int cmp_jdone(const void *a, const void *b)
{
	const struct jdone *x = a, *y = b;
	int c = strcmp(x->real, y->real);
	return c != 0 ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

/* The input_size and input_mtime of a journal line, if it has both. */
static int line_stamp(const char *line, struct jdone *e)
{
	const char *sz = strstr(line, "\"input_size\":"), *mt = strstr(line, "\"input_mtime\":\"");
	return sz != NULL && mt != NULL && sscanf(sz + 13, "%lld", &e->size) == 1 &&
	       sscanf(mt + 15, "%lld.%ld", &e->sec, &e->nsec) == 2;
}

/* A journal string's value (our own writer's escapes), malloc'd; *end past it. */
static char *json_string(const char *s, const char **end)
{
	char *out = malloc(strlen(s) + 1), *o = out;
	if (out == NULL)
		return NULL;
	for (; *s != '\0' && *s != '"'; s++) {
		if (*s != '\\') {
			*o++ = *s;
			continue;
		}
		s++;
		switch (*s) {
		case 'n': *o++ = '\n'; break;
		case 't': *o++ = '\t'; break;
		case 'r': *o++ = '\r'; break;
		case 'u': {
			unsigned v = 0;
			if (sscanf(s + 1, "%4x", &v) == 1 && v < 0x80)
				*o++ = (char)v;
			s += 4;
			break;
		}
		case '\0': s--; break;
		default: *o++ = *s;
		}
	}
	*o = '\0';
	*end = s;
	return out;
}

/* The journal's items that ended ok, failed or skipped (a cancelled one
 * runs again), by realpath, each by its last line.  A journal that does not
 * exist yet is empty. */
static int read_journal(const char *path, struct watch *w)
{
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return errno == ENOENT ? 0 : -1;
	char *line = NULL;
	size_t cap = 0, jcap = 0, seq = 0;
	while (getline(&line, &cap, f) >= 0) {
		const char *it = strstr(line, "\"item\":\""), *st = strstr(line, "\"status\":\"");
		seq++;
		if (it == NULL || st == NULL || strncmp(st + 10, "cancelled", 9) == 0)
			continue;
		const char *end;
		char *item = json_string(it + 8, &end);
		char *real = item != NULL ? realpath(item, NULL) : NULL;
		free(item);
		if (real == NULL)
			continue; /* gone since: nothing to compare with */
		if (w->njd == jcap) {
			jcap = jcap ? 2 * jcap : 64;
			struct jdone *v = realloc(w->journal_done, jcap * sizeof *v);
			if (v == NULL) {
				free(real);
				break;
			}
			w->journal_done = v;
		}
		struct jdone *e = &w->journal_done[w->njd++];
		*e = (struct jdone){ .real = real, .seq = seq,
				     .failed = strncmp(st + 10, "failed", 6) == 0 };
		e->stamped = e->failed && line_stamp(line, e);
	}
	free(line);
	fclose(f);
	if (w->njd > 1)
		qsort(w->journal_done, w->njd, sizeof *w->journal_done, cmp_jdone);
	size_t k = 0; /* the last line of each item */
	for (size_t i = 0; i < w->njd; i++) {
		if (i + 1 < w->njd && strcmp(w->journal_done[i].real, w->journal_done[i + 1].real) == 0) {
			free(w->journal_done[i].real);
			continue;
		}
		w->journal_done[k++] = w->journal_done[i];
	}
	w->njd = k;
	return 0;
}

/* Whether the journal says file real (now of size and mtime sb) is done:
 * ended ok or skipped, or failed and unchanged since (*failed then set). */
static int journaled(const struct watch *w, const char *real, const struct stat *sb, int *failed)
{
	struct jdone key = { .real = (char *)real };
	const struct jdone *e = NULL;
	size_t lo = 0, hi = w->njd;
	while (real != NULL && lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(w->journal_done[mid].real, key.real);
		if (c == 0) {
			e = &w->journal_done[mid];
			break;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (e == NULL)
		return 0;
	if (e->failed && e->stamped &&
	    (e->size != (long long)sb->st_size || e->sec != (long long)sb->st_mtim.tv_sec ||
	     e->nsec != sb->st_mtim.tv_nsec))
		return 0; /* changed since it failed */
	*failed = e->failed;
	return 1;
}

/* fnmatch(3) with glob(3)'s braces, as `inputs: folder:` takes them
 * (GLOB_BRACE): `*.{mrc,tif}` matches either; braces may nest. */
static int brace_match(const char *pat, const char *name)
{
	const char *open = strchr(pat, '{');
	if (open == NULL)
		return fnmatch(pat, name, FNM_PERIOD) == 0;
	/* the matching '}' and the top-level commas between */
	int depth = 0;
	const char *close = NULL;
	for (const char *q = open; *q != '\0' && close == NULL; q++)
		if (*q == '{')
			depth++;
		else if (*q == '}' && --depth == 0)
			close = q;
	if (close == NULL)
		return fnmatch(pat, name, FNM_PERIOD) == 0;
	size_t pre = (size_t)(open - pat), len = strlen(pat);
	char *alt = malloc(len + 1);
	if (alt == NULL)
		return 0;
	int hit = 0;
	for (const char *a = open + 1; !hit && a <= close;) {
		const char *e = a;
		for (depth = 0; e < close && !(depth == 0 && *e == ','); e++)
			depth += *e == '{' ? 1 : *e == '}' ? -1 : 0;
		snprintf(alt, len + 1, "%.*s%.*s%s", (int)pre, pat, (int)(e - a), a, close + 1);
		hit = brace_match(alt, name);
		a = e + 1;
	}
	free(alt);
	return hit;
}

static double wall_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static struct watched *find(struct watch *w, const char *path)
{
	for (size_t i = 0; i < w->n; i++)
		if (strcmp(w->f[i].path, path) == 0)
			return &w->f[i];
	return NULL;
}

/* One poll: new files recorded, changes noted; the complete ones not done
 * into *ready (paths owned by w), their count returned. */
static size_t poll_folder(const char *dir, const char *pat, struct watch *w, double settle,
			  char ***ready)
{
	DIR *d = opendir(dir);
	size_t nready = 0;
	*ready = NULL;
	if (d == NULL)
		return 0;
	const double now = wall_s();
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!brace_match(pat, e->d_name))
			continue;
		char path[PATH_MAX];
		struct stat sb;
		if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path ||
		    stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
			continue;
		struct watched *f = find(w, path);
		if (f == NULL) {
			if (w->n == w->cap) {
				size_t nc = w->cap ? 2 * w->cap : 64;
				struct watched *v = realloc(w->f, nc * sizeof *v);
				if (v == NULL)
					break;
				w->f = v;
				w->cap = nc;
			}
			f = &w->f[w->n++];
			const double mt = (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec;
			*f = (struct watched){ .path = strdup(path), .real = realpath(path, NULL),
					       .size = sb.st_size, .mtime = sb.st_mtim,
					       .stable_since = mt < now ? mt : now };
			f->done = f->path == NULL || journaled(w, f->real, &sb, &f->failed);
			continue;
		}
		if (f->done && !f->failed)
			continue;
		if (sb.st_size != f->size || sb.st_mtim.tv_sec != f->mtime.tv_sec ||
		    sb.st_mtim.tv_nsec != f->mtime.tv_nsec) {
			f->size = sb.st_size;
			f->mtime = sb.st_mtim;
			f->stable_since = now;
			f->done = f->failed = 0; /* failed while still being written */
		}
	}
	closedir(d);
	w->nwaiting = 0;
	for (size_t i = 0; i < w->n; i++) {
		if (w->f[i].done)
			continue;
		if (now - w->f[i].stable_since < settle) {
			w->nwaiting++;
			continue;
		}
		char **v = realloc(*ready, (nready + 1) * sizeof *v);
		if (v == NULL)
			break;
		*ready = v;
		(*ready)[nready++] = w->f[i].path;
	}
	if (nready > 1)
		qsort(*ready, nready, sizeof **ready, cmp_str);
	return nready;
}

/* Appends batch res's counts and items to the session's total. */
static void add_result(sp_run_result_t *tot, sp_run_result_t *res)
{
	tot->nok += res->nok;
	tot->nfailed += res->nfailed;
	tot->nskipped += res->nskipped;
	tot->ncancelled += res->ncancelled;
	tot->nnotrun += res->nnotrun;
	tot->journal_failed |= res->journal_failed;
	if (res->signal)
		tot->signal = res->signal;
	const char *a = tot->items_json, *b = res->items_json;
	if (b != NULL && strcmp(b, "[]") != 0) {
		char *m = NULL;
		if (a == NULL || strcmp(a, "[]") == 0)
			m = strdup(b);
		else if (asprintf(&m, "%.*s,%s", (int)strlen(a) - 1, a, b + 1) < 0)
			m = NULL;
		if (m != NULL) {
			free(tot->items_json);
			tot->items_json = m;
		}
	}
	free(res->items_json);
	res->items_json = NULL;
	sp_run_result_free(res);
}

static void say_state(const struct cli *c, const char *dir, const struct watch *w, size_t running)
{
	if (!c->quiet)
		cli_say("following %s: %zu waiting, %zu running, %zu done, %zu failed", dir,
			w->nwaiting, running, w->nok, w->nfailed);
}

/* Runs the complete files of one poll as a batch; 0, or an exit status
 * that ends the watch (a plan refused). */
static int run_ready(const struct cli *c, const sp_graph_t *g, struct sp_run_opts *ro,
		     char **ready, size_t n, struct watch *w, sp_run_result_t *tot)
{
	struct items it = { 0 };
	it.v = calloc(n, sizeof *it.v);
	for (size_t i = 0; it.v != NULL && i < n; i++)
		if ((it.v[it.n] = strdup(ready[i])) != NULL)
			it.n++;
	int status = it.n == n ? cli_plan_batch(c, g, &it, ro) : 1;
	for (size_t i = 0; i < n; i++) /* run or refused: never again in this process */
		find(w, ready[i])->done = 1;
	if (status != 0) {
		cli_items_free(&it);
		return status == EXIT_NO_INPUT ? 0 : status;
	}
	say_state(c, c->follow, w, it.n);
	sp_run_result_t res;
	int ret = sp_run(g, it.v, it.n, ro, &res);
	if (ret == SP_EINVAL) {
		cli_say("%s", res.err.msg);
		sp_run_result_free(&res);
		cli_items_free(&it);
		return 0; /* this poll's files are refused; the watch goes on */
	}
	w->nok += res.nok + res.nskipped;
	w->nfailed += res.nfailed;
	/* the items that failed: watched for a change (items_json names each
	 * with its status, in the batch's order) */
	const char *q = res.items_json;
	for (size_t i = 0; q != NULL && i < it.n; i++) {
		q = strstr(q, "\"status\":\"");
		if (q == NULL)
			break;
		q += 10;
		if (strncmp(q, "failed", 6) == 0)
			find(w, it.v[i])->failed = 1;
	}
	add_result(tot, &res);
	cli_items_free(&it);
	return 0;
}

int cli_cmd_follow(const struct cli *c, const sp_graph_t *g, const struct sp_runtime_params *p,
		   struct sp_run_opts *ro)
{
	char dir[PATH_MAX];
	struct stat sb;
	snprintf(dir, sizeof dir, "%s", c->follow);
	for (size_t l = strlen(dir); l > 1 && dir[l - 1] == '/'; l--)
		dir[l - 1] = '\0';
	if (sp_cluster_size() > 1)
		return cli_usage_error("%s", "--follow runs in one process, not under MPI");
	if (c->journal == NULL)
		return cli_usage_error("--follow %s needs --journal FILE: it says which files are done, "
				       "so that a restart runs each once", c->follow);
	if (stat(dir, &sb) != 0) {
		cli_say("--follow %s: %s", c->follow, strerror(errno));
		return EXIT_USAGE;
	}
	if (!S_ISDIR(sb.st_mode)) {
		cli_say("--follow %s: not a folder", c->follow);
		return EXIT_USAGE;
	}
	struct watch w = { 0 };
	if (read_journal(c->journal, &w) != 0) {
		cli_say("%s: cannot read the journal: %s", c->journal, strerror(errno));
		return EXIT_USAGE;
	}
	int status = cli_check_workers(g, p);
	if (status == 0)
		status = cli_session_start(c, g, p);
	if (status != 0)
		return status;
	cli_catch_stop_signals();
	const char *pat = g->items_folder != NULL ? g->items_folder : "*";
	const double settle = c->settle_s > 0 ? c->settle_s : 1.0;
	sp_run_result_t tot = { 0 };
	double last_busy = sp_now_s();
	size_t last_waiting = SIZE_MAX;
	if (!c->quiet)
		cli_say("following %s (files matching '%s', complete after %.3g s unchanged); %zu "
			"done by the journal", dir, pat, settle, w.njd);
	while (status == 0 && sp_run_stop_signal() == 0) {
		char **ready;
		size_t n = poll_folder(dir, pat, &w, settle, &ready);
		if (n > 0) {
			status = run_ready(c, g, ro, ready, n, &w, &tot);
			last_busy = sp_now_s();
			say_state(c, dir, &w, 0);
			last_waiting = w.nwaiting;
		} else if (w.nwaiting != last_waiting) {
			say_state(c, dir, &w, 0);
			last_waiting = w.nwaiting;
		}
		free(ready);
		if (w.nwaiting > 0)
			last_busy = sp_now_s();
		if (c->idle_exit_s > 0 && sp_now_s() - last_busy >= c->idle_exit_s) {
			if (!c->quiet)
				cli_say("nothing arrived in %s for %.3g s: done", dir, c->idle_exit_s);
			break;
		}
		if (n == 0)
			usleep((useconds_t)(POLL_S * 1e6));
	}
	if (sp_run_stop_signal() != 0)
		tot.signal = sp_run_stop_signal();
	size_t total = tot.nok + tot.nfailed + tot.nskipped + tot.ncancelled;
	int end = cli_session_end(c, g, tot.signal != 0 || tot.nfailed ? SP_ECANCELED : 0, &tot,
				  total);
	for (size_t i = 0; i < w.n; i++) {
		free(w.f[i].path);
		free(w.f[i].real);
	}
	free(w.f);
	for (size_t i = 0; i < w.njd; i++)
		free(w.journal_done[i].real);
	free(w.journal_done);
	return status != 0 ? status : end;
}
