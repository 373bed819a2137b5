/* Work items: the per-item builtins, their expansion, and the list named by inputs:. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* strdup, getline, glob */
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* GLOB_BRACE */
#endif
#include "graph_int.h"
#include "error.h"
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/*
 * DESIGN: the per-item builtins ${item}, ${stem} and ${index} stay in a
 * parameter's text after loading (a literal '$' then written `$$`), and are
 * expanded here once per work item.  Unlike loading, which aborts when out
 * of memory, sp_graph_expand() returns NULL, since it runs per work item
 * inside a batch.
 */

const char *const sp__graph_builtins[SP__NBUILTINS] = { "item", "stem", "index" };

int sp__graph_is_builtin(const char *s, size_t n)
{
	for (size_t i = 0; i < SP__NBUILTINS; i++)
		if (strlen(sp__graph_builtins[i]) == n && memcmp(sp__graph_builtins[i], s, n) == 0)
			return 1;
	return 0;
}

/* Whether t holds a per-item builtin (then its literal '$' are `$$`). */
static int has_builtin(const char *t)
{
	for (; *t != '\0'; t++) {
		if (t[0] == '$' && t[1] == '$') {
			t++;
			continue;
		}
		if (t[0] == '$' && t[1] == '{') {
			const char *end = strchr(t, '}');

			if (end != NULL && sp__graph_is_builtin(t + 2, (size_t)(end - t - 2)))
				return 1;
		}
	}
	return 0;
}

char *sp_graph_expand(const char *text, const char *item, size_t index)
{
	char num[32];
	const char *base, *dot;
	size_t cap, len = 0, stemlen;
	char *out;

	if (item == NULL)
		item = "";
	if (!has_builtin(text))
		return strdup(text);
	base = strrchr(item, '/');
	base = base != NULL ? base + 1 : item;
	dot = strrchr(base, '.');
	stemlen = dot != NULL && dot != base ? (size_t)(dot - base) : strlen(base);
	snprintf(num, sizeof num, "%zu", index);

	/* Each builtin's replacement is at most this long. */
	cap = strlen(item) + sizeof num;
	{
		size_t nrefs = 0;

		for (const char *t = text; (t = strchr(t, '$')) != NULL; t++)
			nrefs++;
		if (nrefs > (SIZE_MAX - strlen(text) - 1) / cap)
			return NULL;
		cap = strlen(text) + nrefs * cap + 1;
	}
	out = malloc(cap);
	if (out == NULL)
		return NULL;
	for (const char *t = text; *t != '\0';) {
		const char *rep = NULL;
		size_t rlen = 0, skip = 0;

		if (t[0] == '$' && t[1] == '$') {
			rep = "$";
			rlen = 1;
			skip = 2;
		} else if (strncmp(t, "${item}", 7) == 0) {
			rep = item;
			rlen = strlen(item);
			skip = 7;
		} else if (strncmp(t, "${stem}", 7) == 0) {
			rep = base;
			rlen = stemlen;
			skip = 7;
		} else if (strncmp(t, "${index}", 8) == 0) {
			rep = num;
			rlen = strlen(num);
			skip = 8;
		}
		if (rep == NULL) {
			out[len++] = *t++;
			continue;
		}
		memcpy(out + len, rep, rlen);
		len += rlen;
		t += skip;
	}
	out[len] = '\0';
	return out;
}

static void free_items(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

int sp_graph_items(const sp_graph_t *g, char ***items, size_t *n, struct sp_err *err)
{
	*items = NULL;
	*n = 0;
	switch (g->items_kind) {
	case SP_ITEMS_NONE:
		return 0;
	case SP_ITEMS_FILES: {
		char **v = sp__xcalloc(g->nitems_spec, sizeof *v);

		for (size_t i = 0; i < g->nitems_spec; i++)
			v[i] = sp__xstrdup(g->items_spec[i]);
		*items = v;
		*n = g->nitems_spec;
		return 0;
	}
	case SP_ITEMS_GLOB: {
		glob_t gl;
		int rc = glob(g->items_spec[0], 0, NULL, &gl);
		char **v;

		if (rc == GLOB_NOMATCH)
			return sp_seterr(err, SP_ENOENT, "no file matches '%s'", g->items_spec[0]);
		if (rc != 0)
			return sp_seterr(err, SP_EIO, "glob '%s': %s", g->items_spec[0],
					 rc == GLOB_NOSPACE ? "out of memory" : "read error");
		v = sp__xcalloc(gl.gl_pathc, sizeof *v);
		for (size_t i = 0; i < gl.gl_pathc; i++)
			v[i] = sp__xstrdup(gl.gl_pathv[i]);
		*items = v;
		*n = gl.gl_pathc;
		globfree(&gl);
		return 0;
	}
	case SP_ITEMS_MANIFEST:
		return sp_graph_items_table(g, items, n, NULL, err);
	}
	return 0;
}

/* Appends s to v[*nv] (capacity *cap), growing it. */
static void push(char ***v, size_t *nv, size_t *cap, char *s)
{
	if (*nv == *cap) {
		*cap = *cap ? 2 * *cap : 16;
		*v = sp__xrealloc(*v, *cap * sizeof **v);
	}
	(*v)[(*nv)++] = s;
}

static int cmp_coll(const void *a, const void *b)
{
	return strcoll(*(char *const *)a, *(char *const *)b);
}

/* Appends the files (not folders) of folder `dir` matching `pat`, sorted,
 * to v: glob() of the folder's name, its metacharacters escaped, and the
 * pattern; GLOB_MARK marks the folders among the matches with a '/'.
 * GLOB_BRACE: `*.{mrc,tif}` is the union of `*.mrc` and `*.tif`, which
 * glob() lists one alternative after the other: sorted again here as one
 * list (glob's order, strcoll), a file matched by two alternatives once. */
static int folder_items(const char *dir, const char *pat, char ***v, size_t *nv, size_t *cap,
			sp_err_t *err)
{
	char *q, *o;
	size_t n0 = *nv;
	glob_t gl;

	/* glob() reports an unreadable folder as no match: "has no file
	 * matching" would send the user looking for files that are there */
	DIR *dd = opendir(dir);
	if (dd == NULL) {
		int e = errno;
		return sp_seterr(err, e == ENOENT ? SP_ENOENT : SP_EIO,
				 "%s: cannot read the folder: %s", dir, strerror(e));
	}
	closedir(dd);
	q = o = sp__xcalloc(2 * strlen(dir) + strlen(pat) + 2, 1);

	for (const char *s = dir; *s != '\0'; s++) {
		if (strchr("*?[\\{}", *s) != NULL)
			*o++ = '\\';
		*o++ = *s;
	}
	if (o == q || o[-1] != '/')
		*o++ = '/';
	strcpy(o, pat);
	int rc = glob(q, GLOB_MARK | GLOB_BRACE, NULL, &gl);
	free(q);
	if (rc != 0 && rc != GLOB_NOMATCH)
		return sp_seterr(err, SP_EIO, "folder '%s': %s", dir,
				 rc == GLOB_NOSPACE ? "out of memory" : "read error");
	for (size_t i = 0; rc == 0 && i < gl.gl_pathc; i++) {
		const char *m = gl.gl_pathv[i];
		if (m[strlen(m) - 1] != '/')
			push(v, nv, cap, sp__xstrdup(m));
	}
	if (rc == 0)
		globfree(&gl);
	if (*nv - n0 > 1)
		qsort(*v + n0, *nv - n0, sizeof **v, cmp_coll);
	size_t k = n0;
	for (size_t i = n0; i < *nv; i++) {
		if (k > n0 && strcmp((*v)[k - 1], (*v)[i]) == 0)
			free((*v)[i]);
		else
			(*v)[k++] = (*v)[i];
	}
	*nv = k;
	if (*nv == n0)
		return sp_seterr(err, SP_ENOENT, "folder '%s' has no file matching '%s'", dir, pat);
	return 0;
}

int sp_graph_folders(const sp_graph_t *g, char ***items, size_t *n, struct sp_err *err)
{
	char **in = *items, **v = NULL;
	size_t nin = *n, nv = 0, cap = 0;
	int rc = 0;

	if (g->items_folder == NULL)
		return 0;
	for (size_t i = 0; i < nin && rc == 0; i++) {
		struct stat st;
		if (stat(in[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			rc = folder_items(in[i], g->items_folder, &v, &nv, &cap, err);
		} else {
			push(&v, &nv, &cap, in[i]);
			in[i] = NULL;
		}
	}
	free_items(in, nin); /* the folders, and what was not moved after an error */
	if (rc != 0) {
		free_items(v, nv);
		v = NULL;
		nv = 0;
	}
	*items = v;
	*n = nv;
	return rc;
}

struct dedupe_key {
	char *key; /* realpath, or the item's text */
	size_t idx;
};

static int cmp_dedupe(const void *a, const void *b)
{
	const struct dedupe_key *x = a, *y = b;
	int c = strcmp(x->key, y->key);
	return c ? c : (x->idx > y->idx) - (x->idx < y->idx);
}

size_t sp_graph_dedupe(char **items, size_t *n, char *example, size_t exsize)
{
	size_t nin = *n, dropped = 0, k = 0;
	struct dedupe_key *v = sp__xcalloc(nin ? nin : 1, sizeof *v);
	unsigned char *drop = sp__xcalloc(nin ? nin : 1, 1);

	for (size_t i = 0; i < nin; i++) {
		v[i].key = realpath(items[i], NULL);
		if (v[i].key == NULL)
			v[i].key = sp__xstrdup(items[i]);
		v[i].idx = i;
	}
	/* sorted by name, then position: the first of a run is the one kept */
	qsort(v, nin, sizeof *v, cmp_dedupe);
	for (size_t i = 1, first = 0; i < nin; i++) {
		if (strcmp(v[i].key, v[first].key) != 0) {
			first = i;
			continue;
		}
		if (dropped++ == 0 && exsize > 0) {
			const char *again = items[v[i].idx], *kept = items[v[first].idx];
			if (strcmp(again, kept) == 0)
				snprintf(example, exsize, "'%s' twice", again);
			else
				snprintf(example, exsize, "'%s' is '%s'", again, kept);
		}
		drop[v[i].idx] = 1;
	}
	for (size_t i = 0; i < nin; i++)
		free(v[i].key);
	for (size_t i = 0; i < nin; i++) {
		if (drop[i])
			free(items[i]);
		else
			items[k++] = items[i];
	}
	*n = k;
	free(v);
	free(drop);
	return dropped;
}
