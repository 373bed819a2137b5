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
 * DESIGN: the per-item builtins ${item}, ${stem}, ${index}, ${item.dir}
 * and ${header.KEY} stay in a parameter's text after loading (a literal
 * '$' then written `$$`), and are expanded here once per work item.  The
 * dotted names cannot be a variable's (a variable's name has no '.'), so
 * no graph's params: can shadow them.  A header keyword is read by the
 * reader the stage kinds give (sp_graph_set_header_reader(): the graph
 * layer reads no image format itself).  Unlike loading, which aborts when
 * out of memory, sp_graph_expand_item() returns NULL, since it runs per
 * work item inside a batch; a keyword that is missing fails that item only.
 */

const char *const sp__graph_builtins[SP__NBUILTINS] = { "item", "stem", "index", "item.dir",
							 "header.KEY" };

static sp_header_reader_fn header_reader;

void sp_graph_set_header_reader(sp_header_reader_fn fn) { header_reader = fn; }

/* ${header.KEY} or ${header.KEY:FMT}: KEY a FITS keyword (letters, digits,
 * '-', '_'; at most 70), FMT an integer's width as Python's format spec:
 * `08d` (zero-padded) or `8d`.  *keylen and *width (0: none; negative:
 * space-padded) on success. */
static int header_ref(const char *s, size_t n, size_t *keylen, int *width)
{
	if (n <= 7 || memcmp(s, "header.", 7) != 0)
		return 0;
	s += 7;
	n -= 7;
	size_t k = 0;
	while (k < n && s[k] != ':') {
		char ch = s[k];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
		      ch == '-' || ch == '_'))
			return 0;
		k++;
	}
	if (k == 0 || k > 70)
		return 0;
	*keylen = k;
	*width = 0;
	if (k == n)
		return 1;
	const char *f = s + k + 1, *e = s + n;
	int zero = f < e && *f == '0';
	f += zero;
	int w = 0;
	if (f == e || *f < '1' || *f > '9')
		return 0;
	while (f < e && *f >= '0' && *f <= '9' && w < 100)
		w = 10 * w + (*f++ - '0');
	if (w >= 100 || f + 1 != e || *f != 'd')
		return 0;
	*width = zero ? w : -w;
	return 1;
}

int sp__graph_is_builtin(const char *s, size_t n)
{
	size_t kl;
	int w;
	for (size_t i = 0; i < SP__NBUILTINS - 1; i++)
		if (strlen(sp__graph_builtins[i]) == n && memcmp(sp__graph_builtins[i], s, n) == 0)
			return 1;
	return header_ref(s, n, &kl, &w);
}

/* Whether t holds a builtin; with bound set, one of ${item}, ${stem} and
 * ${index} only (those that name one item; ${item.dir} and ${header.KEY}
 * are shared by the items of a folder, a camera). */
static int scan_builtins(const char *t, int bound)
{
	for (; *t != '\0'; t++) {
		if (t[0] == '$' && t[1] == '$') {
			t++;
			continue;
		}
		if (t[0] == '$' && t[1] == '{') {
			const char *end = strchr(t, '}');

			size_t n = end != NULL ? (size_t)(end - t - 2) : 0;
			if (end != NULL && sp__graph_is_builtin(t + 2, n) &&
			    (!bound || (n == 4 && memcmp(t + 2, "item", 4) == 0) ||
			     (n == 4 && memcmp(t + 2, "stem", 4) == 0) ||
			     (n == 5 && memcmp(t + 2, "index", 5) == 0)))
				return 1;
		}
	}
	return 0;
}

int sp__graph_has_builtin(const char *t) { return scan_builtins(t, 0); }
int sp__graph_names_item(const char *t) { return scan_builtins(t, 1); }

/* A growing string that reports running out of memory instead of aborting. */
struct xbuf {
	char *s;
	size_t len, cap;
	int oom;
};

static void xb_add(struct xbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *t = realloc(b->s, cap);
		if (t == NULL) {
			b->oom = 1;
			return;
		}
		b->s = t;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

/* Appends the value of keyword key[0..kl) of item's header, formatted as
 * width says; 0, or an SP_E* code with err naming the item and the key. */
static int add_header(struct xbuf *b, const char *item, const char *key, size_t kl, int width,
		      sp_err_t *err)
{
	char k[72], v[128];
	snprintf(k, sizeof k, "%.*s", (int)kl, key);
	if (header_reader == NULL)
		return sp_seterr(err, SP_EINVAL, "%s: ${header.%s}: no header reader in this program",
				 item, k);
	int rc = header_reader(item, k, v, sizeof v, err);
	if (rc != 0)
		return rc;
	if (width == 0) {
		xb_add(b, v, strlen(v));
		return 0;
	}
	char *end;
	errno = 0;
	long long x = strtoll(v, &end, 10);
	if (errno != 0 || end == v || *end != '\0')
		return sp_seterr(err, SP_EFORMAT,
				 "%s: header keyword %s is '%s', not an integer (for ${header.%s:%s%dd})",
				 item, k, v, k, width > 0 ? "0" : "", width > 0 ? width : -width);
	char num[160];
	snprintf(num, sizeof num, width > 0 ? "%0*lld" : "%*lld", width > 0 ? width : -width, x);
	xb_add(b, num, strlen(num));
	return 0;
}

char *sp_graph_expand_item(const char *text, const char *item, size_t index, sp_err_t *err)
{
	if (item == NULL)
		item = "";
	if (!sp__graph_has_builtin(text)) {
		char *t = strdup(text);
		if (t == NULL)
			sp_seterr(err, SP_ENOMEM, "out of memory");
		return t;
	}
	const char *base = strrchr(item, '/');
	base = base != NULL ? base + 1 : item;
	const char *dot = strrchr(base, '.');
	size_t stemlen = dot != NULL && dot != base ? (size_t)(dot - base) : strlen(base);
	struct xbuf b = { 0 };
	int rc = 0;

	xb_add(&b, "", 0);
	for (const char *t = text; *t != '\0' && rc == 0;) {
		const char *end = t[0] == '$' && t[1] == '{' ? strchr(t, '}') : NULL;
		size_t n = end != NULL ? (size_t)(end - t - 2) : 0, kl;
		int width;
		if (t[0] == '$' && t[1] == '$') {
			xb_add(&b, "$", 1);
			t += 2;
			continue;
		}
		if (end == NULL || !sp__graph_is_builtin(t + 2, n)) {
			xb_add(&b, t++, 1);
			continue;
		}
		const char *name = t + 2;
		t = end + 1;
		if (n == 4 && memcmp(name, "item", 4) == 0)
			xb_add(&b, item, strlen(item));
		else if (n == 4 && memcmp(name, "stem", 4) == 0)
			xb_add(&b, base, stemlen);
		else if (n == 5 && memcmp(name, "index", 5) == 0) {
			char num[32];
			snprintf(num, sizeof num, "%zu", index);
			xb_add(&b, num, strlen(num));
		} else if (n == 8 && memcmp(name, "item.dir", 8) == 0) {
			if (base == item)
				xb_add(&b, ".", 1);
			else
				xb_add(&b, item, base - item > 1 ? (size_t)(base - item - 1) : 1);
		} else if (header_ref(name, n, &kl, &width))
			rc = add_header(&b, item, name + 7, kl, width, err);
	}
	if (rc == 0 && b.oom)
		rc = sp_seterr(err, SP_ENOMEM, "out of memory expanding a parameter for %s", item);
	if (rc != 0) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

char *sp_gstage_expand(const sp_gstage_t *st, const char *name, const char *item, size_t index,
		       sp_err_t *err)
{
	sp_err_t e = { 0 };
	char *t = sp_graph_expand_item(sp_gstage_param(st, name)->text, item, index, &e);
	if (t == NULL && e.code != 0 && e.code != SP_ENOMEM)
		sp_seterr(err, e.code, "%s (stage '%s', parameter %s)", e.msg, st->name, name);
	else if (t == NULL)
		sp_seterr(err, SP_ENOMEM, "%s: stage '%s': out of memory", item != NULL ? item : "",
			  st->name);
	return t;
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
