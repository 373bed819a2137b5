/* Manifests: one item per line, and a header's columns giving each item its own variables. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* strdup, getline */
#endif
#include "graph_int.h"
#include "diag.h"
#include "error.h"
#include "fsutil.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * DESIGN: a manifest's columns are variables of the graph's params:, set
 * per item.  A row's values reach the stages as a --set would: the graph
 * is loaded again from its text with them (sp_graph_variant()), so typed
 * parameters are parsed and range-checked once per distinct row, as at
 * load, and a stage reads its parameters the same way whether they came
 * from a column or not.  The columns are checked against the graph before
 * any item runs; a wrong name is named at its line and column.
 */

/* The separators of a field, and the field's trimmed bounds. */
static char *trim(char *s, char **end)
{
	char *e = *end;
	while (s < e && (*s == ' ' || *s == '\t'))
		s++;
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		e--;
	*end = e;
	return s;
}

/* Splits line (len bytes, NUL-terminated) at sep into at most cap fields,
 * each trimmed and NUL-terminated in place; their columns (1-based) in
 * col[].  Returns the number of fields. */
static size_t split(char *line, char sep, char **f, unsigned *col, size_t cap)
{
	size_t n = 0;
	char *s = line;
	for (;;) {
		char *e = strchr(s, sep);
		char *end = e != NULL ? e : s + strlen(s);
		char *b = trim(s, &end);
		if (n < cap) {
			f[n] = b;
			col[n] = (unsigned)(b - line) + 1;
			*end = '\0';
		}
		n++;
		if (e == NULL)
			break;
		s = e + 1;
	}
	return n;
}

/* Whether the line is a header: "item" then a tab or a comma. */
static int header_sep(const char *s)
{
	if (strncmp(s, "item", 4) != 0)
		return 0;
	const char *t = s + 4;
	while (*t == ' ')
		t++;
	if (*t == '\t')
		return '\t';
	if (*t == ',')
		return strchr(s, '\t') != NULL ? '\t' : ',';
	return 0;
}

static int cmp_row(const void *a, const void *b, void *arg)
{
	const sp_item_table_t *t = arg;
	return strcmp(t->paths[*(const size_t *)a], t->paths[*(const size_t *)b]);
}

/* qsort_r is a GNU extension; a file-static table keeps this portable C. */
static const sp_item_table_t *sort_tab;
static int cmp_row_static(const void *a, const void *b)
{
	return cmp_row(a, b, (void *)sort_tab);
}

static void sort_rows(sp_item_table_t *t)
{
	t->order = sp__xcalloc(t->nrows ? t->nrows : 1, sizeof *t->order);
	for (size_t r = 0; r < t->nrows; r++)
		t->order[r] = r;
	sort_tab = t;
	qsort(t->order, t->nrows, sizeof *t->order, cmp_row_static);
	sort_tab = NULL;
}

void sp_item_table_free(sp_item_table_t *t)
{
	if (t == NULL)
		return;
	free(t->file);
	for (size_t c = 0; c < t->ncols; c++)
		free(t->cols[c]);
	free(t->cols);
	for (size_t r = 0; r < t->nrows; r++) {
		free(t->paths[r]);
		for (size_t c = 0; c < t->ncols; c++)
			free(t->vals[r * t->ncols + c]);
	}
	free(t->paths);
	free(t->vals);
	free(t->lines);
	free(t->order);
	memset(t, 0, sizeof *t);
}

/* The header's columns checked against g's variables into t->cols. */
static int header_cols(const sp_graph_t *g, const char *path, unsigned line, char **f,
		       const unsigned *col, size_t nf, sp_item_table_t *t, sp_err_t *err)
{
	char clip[SP__NAME_MAX + 4], dym[SP__NAME_MAX + 32];
	long long budget = 1 << 20;
	t->cols = sp__xcalloc(nf, sizeof *t->cols);
	for (size_t k = 1; k < nf; k++) {
		size_t v = 0;
		while (v < g->nvars && strcmp(g->var_names[v], f[k]) != 0)
			v++;
		if (f[k][0] == '\0')
			return sp_seterr(err, SP_EGRAPH, "%s:%u:%u: empty column name in the header",
					 path, line, col[k]);
		if (v == g->nvars)
			return sp_seterr(err, SP_EGRAPH,
					 "%s:%u:%u: column '%s' names no variable of %s's params:%s",
					 path, line, col[k], sp__diag_clip(clip, f[k]), g->file,
					 sp__diag_dym(&budget, dym, sizeof dym, f[k],
						      (const char *const *)g->var_names, g->nvars));
		for (size_t j = 0; j < t->ncols; j++)
			if (strcmp(t->cols[j], f[k]) == 0)
				return sp_seterr(err, SP_EGRAPH, "%s:%u:%u: column '%s' given twice",
						 path, line, col[k], sp__diag_clip(clip, f[k]));
		t->cols[t->ncols++] = sp__xstrdup(f[k]);
	}
	return 0;
}

/* The item's path: absolute, or from the manifest's folder. */
static char *item_path(const char *manifest, const char *s)
{
	const char *slash = strrchr(manifest, '/');
	size_t dirlen = slash != NULL ? (size_t)(slash - manifest + 1) : 0;
	if (*s == '/' || dirlen == 0)
		return sp__xstrdup(s);
	char *p = sp__xcalloc(dirlen + strlen(s) + 1, 1);
	memcpy(p, manifest, dirlen);
	strcpy(p + dirlen, s);
	return p;
}

/* Two rows of one item must agree: the item runs once. */
static int check_twice(const sp_item_table_t *t, sp_err_t *err)
{
	char clip[SP__NAME_MAX + 4];
	for (size_t k = 1; k < t->nrows; k++) {
		size_t a = t->order[k - 1], b = t->order[k];
		if (strcmp(t->paths[a], t->paths[b]) != 0)
			continue;
		if (a > b) {
			size_t x = a;
			a = b;
			b = x;
		}
		for (size_t c = 0; c < t->ncols; c++) {
			const char *x = t->vals[a * t->ncols + c], *y = t->vals[b * t->ncols + c];
			if ((x == NULL) != (y == NULL) || (x != NULL && strcmp(x, y) != 0))
				return sp_seterr(err, SP_EGRAPH,
						 "%s:%u: '%s' is listed at line %u too, with another %s",
						 t->file, t->lines[b], sp__diag_clip(clip, t->paths[b]),
						 t->lines[a], t->cols[c]);
		}
	}
	return 0;
}

/* Row `s` (at line ln; s points into `line`) appended to t, which has room. */
static int add_row(sp_item_table_t *t, const char *path, const char *line, char *s, unsigned ln,
		   int sep, char **fv, unsigned *cv, size_t fcap, sp_err_t *err)
{
	if (sep == 0) {
		t->paths[t->nrows] = item_path(path, s);
		t->lines[t->nrows++] = ln;
		return 0;
	}
	const size_t off = (size_t)(s - line);
	size_t nf = split(s, (char)sep, fv, cv, fcap);
	if (nf != t->ncols + 1)
		return sp_seterr(err, SP_EGRAPH, "%s:%u:%u: %zu field(s), the header has %zu", path,
				 ln, (unsigned)(nf > fcap ? off + 1 : off + cv[nf - 1]), nf,
				 t->ncols + 1);
	if (fv[0][0] == '\0')
		return sp_seterr(err, SP_EGRAPH, "%s:%u:1: the row names no item", path, ln);
	t->paths[t->nrows] = item_path(path, fv[0]);
	t->lines[t->nrows] = ln;
	for (size_t c = 0; c < t->ncols; c++)
		t->vals[t->nrows * t->ncols + c] = fv[c + 1][0] != '\0' ? sp__xstrdup(fv[c + 1]) : NULL;
	t->nrows++;
	return 0;
}

int sp_graph_items_table(const sp_graph_t *g, char ***items, size_t *n, sp_item_table_t *tab,
			 struct sp_err *err)
{
	sp_item_table_t t = { 0 };
	if (tab != NULL)
		memset(tab, 0, sizeof *tab);
	if (g->items_kind != SP_ITEMS_MANIFEST)
		return sp_graph_items(g, items, n, err);
	*items = NULL;
	*n = 0;
	const char *path = g->items_spec[0];
	sp_err_t oerr = { 0 };
	FILE *f = sp_fopen_regular(path, &oerr);
	if (f == NULL)
		return sp_seterr(err, oerr.code == SP_ENOENT ? SP_ENOENT : SP_EIO, "manifest '%s': %s",
				 path, sp__open_reason(path, &oerr));
	t.file = sp__xstrdup(path);
	char *line = NULL;
	size_t cap = 0, rcap = 0;
	ssize_t len;
	unsigned ln = 0;
	int sep = -1, rc = 0; /* -1: no line seen yet; 0: no columns */
	char **fv = NULL;
	unsigned *cv = NULL;
	size_t fcap = 0;
	while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
		ln++;
		char *end = line + len;
		char *s;
		if (sep > 0) { /* a trailing tab ends an empty last field: only spaces go */
			s = line;
			while (*s == ' ')
				s++;
			while (end > s && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
				end--;
		} else {
			s = trim(line, &end);
		}
		*end = '\0';
		if (*s == '\0' || *s == '#')
			continue;
		if (sep < 0) {
			sep = header_sep(s);
			if (sep != 0) {
				size_t nf = split(s, (char)sep, NULL, NULL, 0);
				fcap = nf + 1;
				fv = sp__xcalloc(fcap, sizeof *fv);
				cv = sp__xcalloc(fcap, sizeof *cv);
				split(s, (char)sep, fv, cv, fcap);
				for (size_t k = 0; k < nf; k++)
					cv[k] += (unsigned)(s - line);
				rc = header_cols(g, path, ln, fv, cv, nf, &t, err);
				continue;
			}
		}
		if (t.nrows == rcap) {
			rcap = rcap ? 2 * rcap : 64;
			t.paths = sp__xrealloc(t.paths, rcap * sizeof *t.paths);
			t.lines = sp__xrealloc(t.lines, rcap * sizeof *t.lines);
			t.vals = sp__xrealloc(t.vals, rcap * (t.ncols ? t.ncols : 1) * sizeof *t.vals);
		}
		rc = add_row(&t, path, line, s, ln, sep, fv, cv, fcap, err);
	}
	free(fv);
	free(cv);
	free(line);
	if (rc == 0 && ferror(f))
		rc = sp_seterr(err, SP_EIO, "manifest '%s': %s", path, strerror(errno));
	fclose(f);
	if (rc == 0 && t.nrows == 0)
		rc = sp_seterr(err, SP_ENOENT, "manifest '%s' lists no files", path);
	if (rc == 0) {
		sort_rows(&t);
		rc = check_twice(&t, err);
	}
	if (rc != 0) {
		sp_item_table_free(&t);
		return rc;
	}
	char **v = sp__xcalloc(t.nrows, sizeof *v);
	for (size_t r = 0; r < t.nrows; r++)
		v[r] = sp__xstrdup(t.paths[r]);
	*items = v;
	*n = t.nrows;
	if (tab != NULL && t.ncols > 0)
		*tab = t;
	else
		sp_item_table_free(&t);
	return 0;
}

static size_t find_exact(const sp_item_table_t *t, const char *path, size_t len)
{
	size_t lo = 0, hi = t->nrows;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *p = t->paths[t->order[mid]];
		int c = strncmp(p, path, len);
		if (c == 0 && p[len] != '\0')
			c = 1;
		if (c == 0) {
			/* the first row of that path, in file order: they agree */
			size_t best = t->order[mid];
			for (size_t k = mid; k-- > 0 && strcmp(t->paths[t->order[k]], p) == 0;)
				best = t->order[k] < best ? t->order[k] : best;
			return best;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return SIZE_MAX;
}

size_t sp_item_table_find(const sp_item_table_t *t, const char *path)
{
	if (t == NULL || t->nrows == 0 || t->order == NULL)
		return SIZE_MAX;
	size_t len = strlen(path);
	for (;;) {
		size_t r = find_exact(t, path, len);
		if (r != SIZE_MAX)
			return r;
		/* the folder above: "a/b/c" -> "a/b" (and "a/b/"), as rows may name it */
		while (len > 0 && path[len - 1] == '/')
			len--;
		while (len > 0 && path[len - 1] != '/')
			len--;
		if (len == 0)
			return SIZE_MAX;
		if ((r = find_exact(t, path, len)) != SIZE_MAX)
			return r;
		len--;
	}
}

/* Packed: "FILE\x1fCOL\x1fCOL...", then per row "LINE\x1fPATH\x1fVAL...", an
 * empty field for NULL (an empty field is NULL in the manifest too). */
#define US '\x1f'

static char *join(const char *first, char *const *rest, size_t n)
{
	size_t len = strlen(first) + 1;
	for (size_t k = 0; k < n; k++)
		len += (rest[k] != NULL ? strlen(rest[k]) : 0) + 1;
	char *s = malloc(len), *o = s;
	if (s == NULL)
		return NULL;
	o += sprintf(o, "%s", first);
	for (size_t k = 0; k < n; k++)
		o += sprintf(o, "%c%s", US, rest[k] != NULL ? rest[k] : "");
	return s;
}

int sp_item_table_pack(const sp_item_table_t *t, char ***vp, size_t *np)
{
	char **v = calloc(t->nrows + 1, sizeof *v);
	if (v == NULL)
		return SP_ENOMEM;
	int ok = (v[0] = join(t->file, t->cols, t->ncols)) != NULL;
	for (size_t r = 0; ok && r < t->nrows; r++) {
		char *head = malloc(strlen(t->paths[r]) + 16);
		ok = head != NULL;
		if (ok) {
			sprintf(head, "%u%c%s", t->lines[r], US, t->paths[r]);
			ok = (v[r + 1] = join(head, t->vals + r * t->ncols, t->ncols)) != NULL;
		}
		free(head);
	}
	if (!ok) {
		for (size_t r = 0; r <= t->nrows; r++)
			free(v[r]);
		free(v);
		return SP_ENOMEM;
	}
	*vp = v;
	*np = t->nrows + 1;
	return 0;
}

/* s split at US into fresh strings (NULL for empty ones past the first
 * `keep` fields); how many. */
static size_t unjoin(const char *s, char **out, size_t cap, size_t keep)
{
	size_t n = 0;
	for (;;) {
		const char *e = strchr(s, US);
		size_t l = e != NULL ? (size_t)(e - s) : strlen(s);
		if (n < cap)
			out[n] = l > 0 || n < keep ? sp__xstrndup(s, l) : NULL;
		n++;
		if (e == NULL)
			return n;
		s = e + 1;
	}
}

int sp_item_table_unpack(char *const *v, size_t n, sp_item_table_t *t)
{
	memset(t, 0, sizeof *t);
	if (n == 0)
		return SP_EINVAL;
	size_t nf = unjoin(v[0], NULL, 0, 0);
	char **f = sp__xcalloc(nf, sizeof *f);
	unjoin(v[0], f, nf, nf);
	t->file = f[0];
	t->ncols = nf - 1;
	t->cols = sp__xcalloc(nf, sizeof *t->cols);
	memcpy(t->cols, f + 1, t->ncols * sizeof *f);
	free(f);
	t->nrows = n - 1;
	t->paths = sp__xcalloc(n, sizeof *t->paths);
	t->lines = sp__xcalloc(n, sizeof *t->lines);
	t->vals = sp__xcalloc(n * (t->ncols ? t->ncols : 1), sizeof *t->vals);
	char **row = sp__xcalloc(t->ncols + 2, sizeof *row);
	for (size_t r = 0; r < t->nrows; r++) {
		if (unjoin(v[r + 1], NULL, 0, 0) != t->ncols + 2) {
			free(row);
			sp_item_table_free(t);
			return SP_EINVAL;
		}
		unjoin(v[r + 1], row, t->ncols + 2, 2);
		t->lines[r] = (unsigned)strtoul(row[0], NULL, 10);
		free(row[0]);
		t->paths[r] = row[1];
		for (size_t c = 0; c < t->ncols; c++)
			t->vals[r * t->ncols + c] = row[c + 2];
	}
	free(row);
	sort_rows(t);
	return 0;
}

int sp_graph_variant(const sp_graph_t *g, const sp_item_table_t *t, size_t row,
		     sp_graph_t **out, struct sp_err *err)
{
	sp_var_t *vars = sp__xcalloc(g->nvars + t->ncols + 1, sizeof *vars);
	size_t nv = 0;
	char clip[SP__NAME_MAX + 4];
	/* g's own values (its --set and defaults), then the row's over them */
	for (size_t i = 0; i < g->nvars; i++)
		if (g->var_values[i] != NULL)
			vars[nv++] = (sp_var_t){ g->var_names[i], g->var_values[i] };
	for (size_t c = 0; c < t->ncols; c++)
		if (t->vals[row * t->ncols + c] != NULL)
			vars[nv++] = (sp_var_t){ t->cols[c], t->vals[row * t->ncols + c] };
	sp_diag_t d;
	sp_diag_init(&d, g->file);
	*out = NULL;
	int rc = sp_graph_load_string(g->file, g->text != NULL ? g->text : "", vars, nv, g->reg,
				      out, &d);
	free(vars);
	if (rc != 0) {
		if (d.n > 0 && d.v[0].loc.line > 0)
			sp_seterr(err, SP_EGRAPH, "%s:%u: %s's values: %s:%d:%d: %s", t->file,
				  t->lines[row], sp__diag_clip(clip, t->paths[row]), g->file,
				  d.v[0].loc.line, d.v[0].loc.col, d.v[0].msg);
		else
			sp_seterr(err, SP_EGRAPH, "%s:%u: %s's values: %s", t->file, t->lines[row],
				  sp__diag_clip(clip, t->paths[row]), d.n > 0 ? d.v[0].msg : "refused");
		sp_diag_free(&d);
		return SP_EGRAPH;
	}
	sp_diag_free(&d);
	const sp_graph_t *v = *out;
	int same = v->nstages == g->nstages;
	for (size_t s = 0; same && s < g->nstages; s++) {
		same = strcmp(v->stages[s].name, g->stages[s].name) == 0 &&
		       v->stages[s].kind == g->stages[s].kind;
		for (size_t p = 0; same && p < g->stages[s].kind->ninputs; p++)
			same = v->stages[s].inputs[p].stage == g->stages[s].inputs[p].stage &&
			       v->stages[s].inputs[p].port == g->stages[s].inputs[p].port;
	}
	if (!same) {
		sp_graph_free(out);
		return sp_seterr(err, SP_EGRAPH, "%s:%u: %s's values change the pipeline's stages "
				 "(a column may set parameters, not the graph's shape)",
				 t->file, t->lines[row], sp__diag_clip(clip, t->paths[row]));
	}
	return 0;
}
