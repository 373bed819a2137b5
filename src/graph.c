/* Pipeline graph files: YAML loading, validation, ${var} expansion, DOT. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* strdup, getline, strcasecmp */
#endif
#include "graph.h"
#include "error.h"
#include "fsutil.h"
#include "runtime.h"

#include <assert.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

/*
 * DESIGN: loading is three passes over the same text.  (1) libyaml's event
 * parser checks the syntax and rejects aliases (a graph never needs them,
 * and refusing them rules out "billion laughs" and alias cycles, which the
 * document API would otherwise hand us as shared or cyclic nodes) and
 * nesting deeper than SP__MAX_DEPTH (so the recursive walks below are
 * bounded).  (2) yaml_parser_load() builds the node tree; a generic walk
 * reports duplicate keys in every mapping.  (3) the semantic walk fills an
 * sp_graph_t, reporting every problem it can without stopping, so a file's
 * errors are all shown at once.  A mapping's later duplicate keys are
 * ignored by pass 3, so a duplicate is reported once.
 *
 * Out of memory while loading is treated as impossible (abort), as in most
 * command-line tools; sp_graph_expand() returns NULL instead, since it runs
 * per work item inside a batch.
 *
 * Every pass is linear in the size of the file (a graph may be generated,
 * with tens of thousands of keys): keys, variables and stage names are
 * looked up in hash tables, the topological sort is Kahn's with a heap, the
 * "did you mean" search has a work budget, and printing the diagnostics
 * indexes the lines once.  What a diagnostic echoes is bounded too: names
 * are cut to SP__NAME_MAX bytes and source lines to SP__SHOW_COLS columns
 * around the caret, so a 10 MB key gives a few hundred bytes of messages.
 */

#define SP__MAX_DEPTH 64
#define SP__NAME_MAX 64   /* bytes of a name echoed in a message */
#define SP__SHOW_COLS 200 /* columns of a source line shown under a message */
#define SP__SUGGEST_BUDGET 100000000LL /* "did you mean" work per file */

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n != 0 ? n : 1);
	if (p == NULL) {
		fprintf(stderr, "%s: out of memory\n", __func__);
		abort();
	}
	return p;
}

static void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n != 0 ? n : 1, size != 0 ? size : 1);

	if (p == NULL) {
		fprintf(stderr, "%s: out of memory\n", __func__);
		abort();
	}
	return p;
}

static char *xstrndup(const char *s, size_t n)
{
	char *p = xrealloc(NULL, n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

/* A growable string. */
typedef struct {
	char *s;
	size_t len, cap;
} sbuf_t;

static void sb_addn(sbuf_t *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->s = xrealloc(b->s, b->cap);
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

static void sb_add(sbuf_t *b, const char *s)
{
	sb_addn(b, s, strlen(s));
}

static char *sb_take(sbuf_t *b)
{
	char *s = b->s != NULL ? b->s : xstrdup("");

	b->s = NULL;
	b->len = b->cap = 0;
	return s;
}

/* An open-addressing hash table from byte strings to indices.  Keys are
 * not copied: they live in the YAML document or in the stages. */
typedef struct {
	struct smap_slot {
		const char *key; /* NULL: empty */
		size_t len, val;
	} *v;
	size_t cap, n; /* cap: 0 or a power of two */
} smap_t;

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603u; /* FNV-1a */

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211u;
	}
	return h ^ (h >> 29);
}

/* The value of key, or SIZE_MAX. */
static size_t smap_get(const smap_t *m, const char *key, size_t len)
{
	if (m->cap == 0)
		return SIZE_MAX;
	for (size_t i = (size_t)hash_bytes(key, len) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		const struct smap_slot *sl = &m->v[i];

		if (sl->key == NULL)
			return SIZE_MAX;
		if (sl->len == len && memcmp(sl->key, key, len) == 0)
			return sl->val;
	}
}

/* Adds key -> val unless key is there; returns the value already there,
 * or SIZE_MAX after adding. */
static size_t smap_add(smap_t *m, const char *key, size_t len, size_t val)
{
	size_t i;

	if (2 * (m->n + 1) > m->cap) {
		smap_t big = { xcalloc(m->cap ? 2 * m->cap : 16, sizeof *big.v),
			       m->cap ? 2 * m->cap : 16, 0 };

		for (size_t j = 0; j < m->cap; j++)
			if (m->v[j].key != NULL)
				smap_add(&big, m->v[j].key, m->v[j].len, m->v[j].val);
		free(m->v);
		*m = big;
	}
	for (i = (size_t)hash_bytes(key, len) & (m->cap - 1); m->v[i].key != NULL;
	     i = (i + 1) & (m->cap - 1))
		if (m->v[i].len == len && memcmp(m->v[i].key, key, len) == 0)
			return m->v[i].val;
	m->v[i].key = key;
	m->v[i].len = len;
	m->v[i].val = val;
	m->n++;
	return SIZE_MAX;
}

static void smap_free(smap_t *m)
{
	free(m->v);
	m->v = NULL;
	m->cap = m->n = 0;
}

/* --- diagnostics --------------------------------------------------------- */

void sp_diag_init(sp_diag_t *d, const char *file)
{
	d->file = file;
	d->source = NULL;
	d->n = 0;
	d->cap = 0;
	d->v = NULL;
}

void sp_diag_add(sp_diag_t *d, sp_loc_t loc, const char *fmt, ...)
{
	va_list ap;
	int len;
	char *msg;

	va_start(ap, fmt);
	len = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (len < 0)
		len = 0;
	msg = xrealloc(NULL, (size_t)len + 1);
	va_start(ap, fmt);
	vsnprintf(msg, (size_t)len + 1, fmt, ap);
	va_end(ap);
	if (d->n == d->cap) {
		d->cap = d->cap != 0 ? 2 * d->cap : 16;
		d->v = xrealloc(d->v, d->cap * sizeof *d->v);
	}
	d->v[d->n].loc = loc;
	d->v[d->n].msg = msg;
	d->n++;
}

/* The byte after the character at pos of line (UTF-8). */
static size_t next_char(const char *line, size_t len, size_t pos)
{
	pos++;
	while (pos < len && ((unsigned char)line[pos] & 0xC0) == 0x80)
		pos++;
	return pos;
}

/* Where the last excerpt stopped scanning, so that many diagnostics on one
 * long line (a flow mapping) do not rescan it from its start each time. */
struct excerpt_cache {
	const char *line;
	size_t pos, ch; /* byte offset and character index of a character */
};

/* Prints the source line under a diagnostic, at most SP__SHOW_COLS
 * characters of it around column col (with "..." where cut), and a caret
 * under that column.  Columns count characters (as libyaml does), not
 * bytes; tabs are copied so that the caret lines up under them. */
static void print_excerpt(FILE *f, const char *line, size_t len, int col,
			  struct excerpt_cache *cc)
{
	size_t ci = col > 1 ? (size_t)col - 1 : 0; /* the caret's character index */
	size_t first = ci > SP__SHOW_COLS / 2 ? ci - SP__SHOW_COLS / 2 : 0;
	size_t pos = 0, ch = 0, end, k;
	int cut_left;

	if (cc->line == line && cc->ch <= first) {
		pos = cc->pos;
		ch = cc->ch;
	}
	while (ch < first && pos < len) {
		pos = next_char(line, len, pos);
		ch++;
	}
	cc->line = line;
	cc->pos = pos;
	cc->ch = ch;
	if (ch < first) {
		/* The caret is far past the end of the line: show its end. */
		first = ch > SP__SHOW_COLS ? ch - SP__SHOW_COLS : 0;
		for (pos = 0, ch = 0; ch < first; ch++)
			pos = next_char(line, len, pos);
	}
	cut_left = pos > 0;
	for (end = pos, k = 0; end < len && k < SP__SHOW_COLS; k++)
		end = next_char(line, len, end);
	fprintf(f, "  %s%.*s%s\n  %s", cut_left ? "..." : "", (int)(end - pos), line + pos,
		end < len ? "..." : "", cut_left ? "   " : "");
	for (k = 0; ch < ci && k <= SP__SHOW_COLS + 3; ch++, k++) {
		if (pos < end) {
			fputc(line[pos] == '\t' ? '\t' : ' ', f);
			pos = next_char(line, len, pos);
		} else {
			fputc(' ', f);
		}
	}
	fputs("^\n", f);
}

void sp_diag_print(const sp_diag_t *d, FILE *f)
{
	/* Start and length of each line of the source, found once. */
	size_t *start = NULL, *len = NULL, nlines = 0;
	struct excerpt_cache cc = { NULL, 0, 0 };

	if (d->source != NULL) {
		const char *s = d->source;
		size_t cap = 0;

		for (size_t at = 0;;) {
			if (nlines == cap) {
				cap = cap != 0 ? 2 * cap : 64;
				start = xrealloc(start, cap * sizeof *start);
				len = xrealloc(len, cap * sizeof *len);
			}
			start[nlines] = at;
			len[nlines] = strcspn(s + at, "\r\n");
			nlines++;
			{
				const char *nl = strchr(s + at + len[nlines - 1], '\n');

				if (nl == NULL)
					break;
				at = (size_t)(nl - s) + 1;
			}
		}
	}
	for (size_t i = 0; i < d->n; i++) {
		const struct sp_diag_entry *e = &d->v[i];

		if (e->loc.line <= 0) {
			fprintf(f, "%s: %s\n", d->file, e->msg);
			continue;
		}
		fprintf(f, "%s:%d:%d: %s\n", d->file, e->loc.line, e->loc.col, e->msg);
		if ((size_t)e->loc.line > nlines)
			continue;
		print_excerpt(f, d->source + start[e->loc.line - 1], len[e->loc.line - 1],
			      e->loc.col, &cc);
	}
	free(start);
	free(len);
}

void sp_diag_free(sp_diag_t *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->v[i].msg);
	free(d->v);
	free(d->source);
	d->v = NULL;
	d->source = NULL;
	d->n = 0;
}

/* --- did you mean -------------------------------------------------------- */

static size_t levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t row[65];

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* The candidate closest to word (edit distance at most 3 and less than the
 * longer length, or one a prefix of the other of at least 3 characters),
 * or NULL.  *budget bounds the work over a whole file (characters compared),
 * so that thousands of unknown names among thousands of candidates stay
 * linear; once spent, no more suggestions. */
static const char *suggest(long long *budget, const char *word, const char *const *cand,
			   size_t n)
{
	const char *best = NULL;
	size_t bestd = SIZE_MAX;
	size_t lw = strlen(word);

	for (size_t i = 0; i < n && *budget > 0; i++) {
		size_t lc = strlen(cand[i]);
		size_t longer = lw > lc ? lw : lc;
		size_t shorter = lw < lc ? lw : lc;
		size_t d;
		int ok;

		*budget -= (long long)lc + 1;
		if (shorter >= 3 && strncmp(word, cand[i], shorter) == 0) {
			d = longer - shorter; /* the distance of a prefix */
			ok = 1;
		} else if (longer - shorter > 3) {
			continue; /* the distance is at least the difference */
		} else {
			*budget -= (long long)(lw * lc);
			d = levenshtein(word, cand[i]);
			ok = d <= 3 && d < longer;
		}
		if (ok && d < bestd) {
			best = cand[i];
			bestd = d;
		}
	}
	return best;
}

/* word[0..n) for a message, cut to SP__NAME_MAX bytes (at a character
 * boundary, "..." added) if longer: in buf, which holds SP__NAME_MAX + 4
 * bytes, or word itself when it is whole and short. */
static const char *clipn_to(char *buf, const char *word, size_t n)
{
	size_t k = SP__NAME_MAX - 3;

	if (n <= SP__NAME_MAX && word[n] == '\0')
		return word;
	if (n <= SP__NAME_MAX) {
		memcpy(buf, word, n);
		buf[n] = '\0';
		return buf;
	}
	while (k > 0 && ((unsigned char)word[k] & 0xC0) == 0x80)
		k--;
	memcpy(buf, word, k);
	memcpy(buf + k, "...", 4);
	return buf;
}

/* " (did you mean 'x'?)" into buf, or "". */
static const char *dym(long long *budget, char *buf, size_t len, const char *word,
		       const char *const *cand, size_t n)
{
	const char *s = suggest(budget, word, cand, n);
	char cut[SP__NAME_MAX + 4];

	if (s == NULL)
		buf[0] = '\0';
	else
		snprintf(buf, len, " (did you mean '%s'?)", clipn_to(cut, s, strlen(s)));
	return buf;
}

/* --- YAML helpers -------------------------------------------------------- */

typedef struct {
	char *name;
	char *value; /* NULL: declared without a default and not --set */
	int used_set;
} var_t;

/* The loader's state. */
typedef struct {
	yaml_document_t *doc;
	sp_diag_t *d;
	sp_graph_t *g;
	var_t *vars;
	size_t nvars;
	smap_t var_index;       /* vars by name */
	const char **var_cand;  /* variable and builtin names, for suggestions */
	unsigned char *skip;    /* by node id: a key pass 3 ignores (a duplicate) */
	long long budget;       /* of suggest() */
	char clip[4][SP__NAME_MAX + 4];
	unsigned nclip;
} ctx_t;

/* s cut for a message (see clipn_to); valid until four more calls. */
static const char *clipn(ctx_t *c, const char *s, size_t n)
{
	return clipn_to(c->clip[c->nclip++ % 4], s, n);
}

static const char *clip(ctx_t *c, const char *s)
{
	return clipn(c, s, strnlen(s, SP__NAME_MAX + 1));
}

static sp_loc_t loc_of(const yaml_node_t *n)
{
	sp_loc_t l = { (int)n->start_mark.line + 1, (int)n->start_mark.column + 1 };
	return l;
}

static yaml_node_t *node(ctx_t *c, int i)
{
	return yaml_document_get_node(c->doc, i);
}

static const char *sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static const char *type_name(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return "a scalar";
	case YAML_SEQUENCE_NODE:
		return "a sequence";
	case YAML_MAPPING_NODE:
		return "a mapping";
	default:
		return "nothing";
	}
}

/* A plain empty scalar, `~` or `null`: YAML's null. */
static int is_null(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE &&
	       n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       (strcmp(sval(n), "") == 0 || strcmp(sval(n), "~") == 0 ||
		strcmp(sval(n), "null") == 0);
}

/* Pass 2: duplicate and non-scalar keys in every mapping (a hash of each
 * mapping's keys), and NUL characters in every string: YAML's "\0" escape
 * would cut a name or a path silently at the first one. */
static void check_tree(ctx_t *c, yaml_node_t *n, int depth)
{
	if (n == NULL || depth > SP__MAX_DEPTH + 1)
		return;
	if (n->type == YAML_SCALAR_NODE) {
		if (memchr(n->data.scalar.value, '\0', n->data.scalar.length) != NULL)
			sp_diag_add(c->d, loc_of(n),
				    "string '%s' holds a NUL character ('\\0'), which no name, path or value may",
				    clip(c, sval(n)));
	} else if (n->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     it < n->data.sequence.items.top; it++)
			check_tree(c, node(c, *it), depth + 1);
	} else if (n->type == YAML_MAPPING_NODE) {
		yaml_node_pair_t *s = n->data.mapping.pairs.start;
		smap_t seen = { 0 };

		for (yaml_node_pair_t *p = s; p < n->data.mapping.pairs.top; p++) {
			yaml_node_t *k = node(c, p->key);

			if (k->type != YAML_SCALAR_NODE) {
				sp_diag_add(c->d, loc_of(k), "mapping keys must be scalars, got %s",
					    type_name(k));
				c->skip[p->key] = 1;
			} else {
				size_t first = smap_add(&seen, (const char *)k->data.scalar.value,
							k->data.scalar.length, (size_t)(p - s));

				if (first != SIZE_MAX) {
					sp_loc_t l0 = loc_of(node(c, s[first].key));

					sp_diag_add(c->d, loc_of(k),
						    "duplicate key '%s' (first at %d:%d)",
						    clip(c, sval(k)), l0.line, l0.col);
					c->skip[p->key] = 1;
				}
			}
			check_tree(c, node(c, p->key), depth + 1);
			check_tree(c, node(c, p->value), depth + 1);
		}
		smap_free(&seen);
	}
}

/* Whether pass 3 should ignore a pair: a non-scalar key, or a key seen
 * earlier in its mapping (pass 2 marked those). */
static int pair_skip(ctx_t *c, const yaml_node_t *map, const yaml_node_pair_t *p)
{
	(void)map;
	return node(c, p->key)->type != YAML_SCALAR_NODE || c->skip[p->key];
}

#define FOR_PAIRS(c, map, p)                                              \
	for (yaml_node_pair_t *p = (map)->data.mapping.pairs.start;       \
	     p < (map)->data.mapping.pairs.top; p++)                      \
		if (!pair_skip(c, map, p))

/* The value of `key` in map, or NULL. */
static yaml_node_t *map_get(ctx_t *c, yaml_node_t *map, const char *key)
{
	FOR_PAIRS(c, map, p)
	{
		if (strcmp(sval(node(c, p->key)), key) == 0)
			return node(c, p->value);
	}
	return NULL;
}

/* Reports keys of map not in `allowed` (what: "top-level key", ...). */
static void check_allowed(ctx_t *c, yaml_node_t *map, const char *const *allowed,
			  size_t n, const char *what, const char *where)
{
	char buf[128];

	FOR_PAIRS(c, map, p)
	{
		yaml_node_t *k = node(c, p->key);
		size_t i;

		for (i = 0; i < n; i++)
			if (strcmp(sval(k), allowed[i]) == 0)
				break;
		if (i == n)
			sp_diag_add(c->d, loc_of(k), "unknown %s '%s'%s%s", what,
				    clip(c, sval(k)), where,
				    dym(&c->budget, buf, sizeof buf, sval(k), allowed, n));
	}
}

/* --- ${var} -------------------------------------------------------------- */

static const char *const builtins[] = { "item", "stem", "index" };

static int is_builtin(const char *s, size_t n)
{
	for (size_t i = 0; i < 3; i++)
		if (strlen(builtins[i]) == n && memcmp(builtins[i], s, n) == 0)
			return 1;
	return 0;
}

static int valid_var_name(const char *s, size_t n)
{
	if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_'))
			return 0;
	}
	return 1;
}

/* Appends a variable's value in "template" form: a value may itself use
 * the per-item builtins and `$$`, and nothing else (other `$` are literal,
 * so values are never expanded recursively).  Sets *builtin if it has one. */
static void add_value(sbuf_t *b, const char *v, int *builtin)
{
	while (*v != '\0') {
		if (v[0] == '$' && v[1] == '$') {
			sb_add(b, "$$");
			v += 2;
		} else if (v[0] == '$' && v[1] == '{') {
			const char *end = strchr(v, '}');

			if (end != NULL && is_builtin(v + 2, (size_t)(end - v - 2))) {
				sb_addn(b, v, (size_t)(end - v + 1));
				*builtin = 1;
				v = end + 1;
			} else {
				sb_add(b, "$$");
				v++;
			}
		} else if (v[0] == '$') {
			sb_add(b, "$$");
			v++;
		} else {
			sb_addn(b, v, 1);
			v++;
		}
	}
}

/* Removes the `$$` escapes of a text that holds no builtin. */
static void unescape(char *s)
{
	char *w = s;

	for (const char *r = s; *r != '\0'; r++) {
		*w++ = *r;
		if (r[0] == '$' && r[1] == '$')
			r++;
	}
	*w = '\0';
}

/* Resolves the global ${var}s of scalar n.  Returns the text (malloc'd), or
 * NULL after reporting a problem.  *builtin tells whether the result still
 * holds a per-item builtin; then a literal '$' stays written `$$`, for
 * sp_graph_expand(); otherwise the text is plain. */
static char *subst(ctx_t *c, const yaml_node_t *n, int *builtin)
{
	const char *s = sval(n);
	sbuf_t b = { 0 };
	char buf[128];
	int bad = 0;

	*builtin = 0;
	while (*s != '\0') {
		const char *end, *name;
		size_t len, i;

		if (s[0] != '$' || (s[1] != '$' && s[1] != '{')) {
			if (s[0] == '$')
				sb_add(&b, "$$");
			else
				sb_addn(&b, s, 1);
			s++;
			continue;
		}
		if (s[1] == '$') {
			sb_add(&b, "$$");
			s += 2;
			continue;
		}
		end = strchr(s, '}');
		if (end == NULL) {
			sp_diag_add(c->d, loc_of(n),
				    "unterminated '${' in '%s' (write '$$' for a literal '$')",
				    clip(c, sval(n)));
			bad = 1;
			break;
		}
		name = s + 2;
		len = (size_t)(end - name);
		s = end + 1;
		if (is_builtin(name, len)) {
			sb_add(&b, "${");
			sb_addn(&b, name, len);
			sb_add(&b, "}");
			*builtin = 1;
			continue;
		}
		if (!valid_var_name(name, len)) {
			sp_diag_add(c->d, loc_of(n), "invalid variable reference '${%s}'",
				    clipn(c, name, len));
			bad = 1;
			continue;
		}
		i = smap_get(&c->var_index, name, len);
		if (i == SIZE_MAX) {
			char *nm = xstrndup(name, len);

			if (c->var_cand == NULL) {
				c->var_cand = xcalloc(c->nvars + 3, sizeof *c->var_cand);
				for (size_t j = 0; j < c->nvars; j++)
					c->var_cand[j] = c->vars[j].name;
				for (size_t j = 0; j < 3; j++)
					c->var_cand[c->nvars + j] = builtins[j];
			}
			sp_diag_add(c->d, loc_of(n), "unknown variable '%s'%s", clip(c, nm),
				    dym(&c->budget, buf, sizeof buf, nm, c->var_cand,
					c->nvars + 3));
			free(nm);
			bad = 1;
		} else if (c->vars[i].value == NULL) {
			sp_diag_add(c->d, loc_of(n),
				    "variable '%s' is not set (give it a default under params: or pass --set %s=VALUE)",
				    clip(c, c->vars[i].name), clip(c, c->vars[i].name));
			bad = 1;
		} else {
			add_value(&b, c->vars[i].value, builtin);
		}
	}
	if (bad) {
		free(b.s);
		return NULL;
	}
	if (!*builtin) {
		char *t = sb_take(&b);

		unescape(t);
		return t;
	}
	return sb_take(&b);
}

/* The first builtin a text uses, for messages. */
static const char *first_builtin(const char *t)
{
	for (; *t != '\0'; t++) {
		if (t[0] == '$' && t[1] == '$') {
			t++;
			continue;
		}
		for (size_t i = 0; i < 3; i++) {
			size_t n = strlen(builtins[i]);

			if (t[0] == '$' && t[1] == '{' && strncmp(t + 2, builtins[i], n) == 0 &&
			    t[2 + n] == '}')
				return builtins[i];
		}
	}
	return "item";
}

/* Checks and stores one parameter value given in the file.  `what` names
 * the parameter in messages; per_item tells whether builtins are allowed
 * at all (stage parameters) or not (runtime:). */
static void set_param(ctx_t *c, sp_gparam_t *gp, yaml_node_t *v, const char *what,
		      int per_item)
{
	char msg[256];
	char *text;
	int builtin;

	if (v->type != YAML_SCALAR_NODE) {
		sp_diag_add(c->d, loc_of(v), "%s must be a scalar, got %s", what, type_name(v));
		return;
	}
	text = subst(c, v, &builtin);
	if (text == NULL)
		return;
	if (builtin && !per_item) {
		sp_diag_add(c->d, loc_of(v), "%s cannot use the per-item variable '${%s}'",
			    what, first_builtin(text));
		free(text);
		return;
	}
	if (builtin && gp->spec->type != SP_PT_PATH && gp->spec->type != SP_PT_OUTPUT &&
	    gp->spec->type != SP_PT_STRING) {
		sp_diag_add(c->d, loc_of(v),
			    "%s cannot use the per-item variable '${%s}' (only path and string parameters can)",
			    what, first_builtin(text));
		free(text);
		return;
	}
	if (!builtin && sp_param_check(gp->spec, text, msg, sizeof msg) != 0) {
		sp_diag_add(c->d, loc_of(v), "%s: %s", what, msg);
		free(text);
		return;
	}
	free(gp->text);
	gp->text = text;
	gp->loc = loc_of(v);
}

static void fill_defaults(sp_gparam_t *gp, const sp_param_spec_t *specs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		gp[i].spec = &specs[i];
		gp[i].text = specs[i].def != NULL ? xstrdup(specs[i].def) : NULL;
		gp[i].loc.line = gp[i].loc.col = 0;
	}
}

/* --- sections ------------------------------------------------------------ */

static int valid_name(const char *s, const char *extra)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr(extra, *s) != NULL))
			return 0;
	return 1;
}

static void load_params(ctx_t *c, yaml_node_t *map, const sp_var_t *set, size_t nset)
{
	static const char *const keys[] = { "default", "help" };
	char buf[128];

	if (map != NULL && !is_null(map) && map->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, loc_of(map), "'params' must be a mapping, got %s",
			    type_name(map));
		map = NULL;
	}
	if (map != NULL && map->type == YAML_MAPPING_NODE) {
		c->vars = xcalloc(map->data.mapping.pairs.top - map->data.mapping.pairs.start,
				  sizeof *c->vars);
		FOR_PAIRS(c, map, p)
		{
			yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
			const char *name = sval(k);
			var_t *var;

			if (is_builtin(name, strlen(name))) {
				sp_diag_add(c->d, loc_of(k),
					    "'%s' is a builtin variable and cannot be declared",
					    clip(c, name));
				continue;
			}
			if (!valid_var_name(name, strlen(name))) {
				sp_diag_add(c->d, loc_of(k),
					    "invalid variable name '%s' (use letters, digits and '_')",
					    clip(c, name));
				continue;
			}
			var = &c->vars[c->nvars];
			var->name = xstrdup(name);
			smap_add(&c->var_index, var->name, strlen(var->name), c->nvars);
			c->nvars++;
			if (v->type == YAML_SCALAR_NODE) {
				if (!is_null(v))
					var->value = xstrdup(sval(v));
			} else if (v->type == YAML_MAPPING_NODE) {
				yaml_node_t *def = map_get(c, v, "default");
				yaml_node_t *help = map_get(c, v, "help");

				snprintf(buf, sizeof buf, " of variable '%s'", clip(c, name));
				check_allowed(c, v, keys, 2, "key", buf);
				if (def != NULL && def->type != YAML_SCALAR_NODE)
					sp_diag_add(c->d, loc_of(def),
						    "default of variable '%s' must be a scalar, got %s",
						    clip(c, name), type_name(def));
				else if (def != NULL && !is_null(def))
					var->value = xstrdup(sval(def));
				if (help != NULL && help->type != YAML_SCALAR_NODE)
					sp_diag_add(c->d, loc_of(help),
						    "help of variable '%s' must be a scalar, got %s",
						    clip(c, name), type_name(help));
			} else {
				sp_diag_add(c->d, loc_of(v),
					    "variable '%s' must be a scalar (its default) or a mapping with 'default:' and 'help:', got %s",
					    clip(c, name), type_name(v));
			}
		}
	}
	for (size_t i = 0; i < nset; i++) {
		size_t j = smap_get(&c->var_index, set[i].name, strlen(set[i].name));
		sp_loc_t none = { 0, 0 };

		if (j == SIZE_MAX && is_builtin(set[i].name, strlen(set[i].name))) {
			sp_diag_add(c->d, none,
				    "'%s' is a builtin variable and cannot be given with --set",
				    set[i].name);
			continue;
		}
		if (j == SIZE_MAX) {
			const char **cand = xcalloc(c->nvars, sizeof *cand);

			for (size_t k = 0; k < c->nvars; k++)
				cand[k] = c->vars[k].name;
			sp_diag_add(c->d, none, "unknown variable '%s' given with --set%s",
				    clip(c, set[i].name),
				    dym(&c->budget, buf, sizeof buf, set[i].name, cand, c->nvars));
			free(cand);
			continue;
		}
		free(c->vars[j].value);
		c->vars[j].value = xstrdup(set[i].value != NULL ? set[i].value : "");
	}
	c->g->nvars = c->nvars;
	c->g->var_names = xcalloc(c->nvars, sizeof(char *));
	c->g->var_values = xcalloc(c->nvars, sizeof(char *));
	for (size_t i = 0; i < c->nvars; i++) {
		c->g->var_names[i] = xstrdup(c->vars[i].name);
		c->g->var_values[i] = c->vars[i].value != NULL ? xstrdup(c->vars[i].value) : NULL;
	}
}

/* One path of `inputs:`, global variables resolved; NULL after a report. */
static char *input_path(ctx_t *c, yaml_node_t *v, const char *key)
{
	char *t;
	int builtin;

	if (v->type != YAML_SCALAR_NODE) {
		sp_diag_add(c->d, loc_of(v), "'%s' must be a path, got %s", key, type_name(v));
		return NULL;
	}
	t = subst(c, v, &builtin);
	if (t != NULL && builtin) {
		sp_diag_add(c->d, loc_of(v), "'inputs' cannot use the per-item variable '${%s}'",
			    first_builtin(t));
		free(t);
		return NULL;
	}
	if (t != NULL && t[0] == '\0') {
		sp_diag_add(c->d, loc_of(v), "'%s' is empty", key);
		free(t);
		return NULL;
	}
	return t;
}

static void load_inputs(ctx_t *c, yaml_node_t *map)
{
	static const char *const keys[] = { "files", "glob", "manifest" };
	sp_graph_t *g = c->g;
	yaml_node_t *first = NULL;

	if (is_null(map))
		return;
	if (map->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, loc_of(map),
			    "'inputs' must be a mapping with one of 'files', 'glob' or 'manifest', got %s",
			    type_name(map));
		return;
	}
	check_allowed(c, map, keys, 3, "key", " in 'inputs'");
	FOR_PAIRS(c, map, p)
	{
		yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
		const char *key = sval(k);
		sp_items_kind_t kind;

		if (strcmp(key, "files") == 0)
			kind = SP_ITEMS_FILES;
		else if (strcmp(key, "glob") == 0)
			kind = SP_ITEMS_GLOB;
		else if (strcmp(key, "manifest") == 0)
			kind = SP_ITEMS_MANIFEST;
		else
			continue;
		if (first != NULL) {
			sp_loc_t l0 = loc_of(first);

			sp_diag_add(c->d, loc_of(k),
				    "'inputs' takes only one of 'files', 'glob' and 'manifest' ('%s' given at %d:%d)",
				    sval(first), l0.line, l0.col);
			continue;
		}
		first = k;
		g->items_kind = kind;
		g->items_loc = loc_of(v);
		if (kind == SP_ITEMS_FILES && v->type == YAML_SEQUENCE_NODE) {
			yaml_node_item_t *it = v->data.sequence.items.start;
			size_t n = (size_t)(v->data.sequence.items.top - it);

			if (n == 0)
				sp_diag_add(c->d, loc_of(v), "'files' is empty");
			g->items_spec = xcalloc(n, sizeof(char *));
			for (; it < v->data.sequence.items.top; it++) {
				char *t = input_path(c, node(c, *it), key);

				if (t != NULL)
					g->items_spec[g->nitems_spec++] = t;
			}
		} else {
			char *t = input_path(c, v, key);

			if (t != NULL) {
				g->items_spec = xcalloc(1, sizeof(char *));
				g->items_spec[g->nitems_spec++] = t;
			}
		}
	}
	if (first == NULL)
		sp_diag_add(c->d, loc_of(map), "'inputs' needs one of 'files', 'glob' or 'manifest'");
}

static void load_runtime(ctx_t *c, yaml_node_t *map)
{
	const char **names = xcalloc(sp_runtime_nparams, sizeof *names);
	char what[160], buf[128], msg[1024];

	c->g->runtime = xcalloc(sp_runtime_nparams, sizeof *c->g->runtime);
	fill_defaults(c->g->runtime, sp_runtime_params, sp_runtime_nparams);
	for (size_t i = 0; i < sp_runtime_nparams; i++)
		names[i] = sp_runtime_params[i].name;
	if (map != NULL && !is_null(map) && map->type != YAML_MAPPING_NODE)
		sp_diag_add(c->d, loc_of(map), "'runtime' must be a mapping, got %s",
			    type_name(map));
	else if (map != NULL && map->type == YAML_MAPPING_NODE) {
		FOR_PAIRS(c, map, p)
		{
			yaml_node_t *k = node(c, p->key);
			size_t i;

			for (i = 0; i < sp_runtime_nparams; i++)
				if (strcmp(sval(k), names[i]) == 0)
					break;
			if (i == sp_runtime_nparams) {
				sp_diag_add(c->d, loc_of(k), "unknown runtime parameter '%s'%s",
					    clip(c, sval(k)),
					    dym(&c->budget, buf, sizeof buf, sval(k), names,
						sp_runtime_nparams));
				continue;
			}
			snprintf(what, sizeof what, "runtime parameter '%s'", names[i]);
			set_param(c, &c->g->runtime[i], node(c, p->value), what, 0);
			/* A scheduler StarPU does not know is an error here, not
			 * StarPU's warning and fallback at run time. */
			if (strcmp(names[i], "scheduler") == 0 && c->g->runtime[i].loc.line != 0 &&
			    sp_runtime_check_sched(c->g->runtime[i].text, msg, sizeof msg) != 0)
				sp_diag_add(c->d, c->g->runtime[i].loc, "%s: %s", what, msg);
		}
	}
	free(names);
}

/* --- stages -------------------------------------------------------------- */

/* A stage while loading, in file order. */
typedef struct {
	yaml_node_t *key, *val; /* name and body */
	int ok;                 /* body is a mapping and `uses:` was found */
} tstage_t;

#define NOT_CONNECTED SIZE_MAX

static const char *const stage_keys[] = { "uses", "with", "in", "priority", "tile", "where" };

/* An optional integer key of a stage body (priority, tile) into *out. */
static void stage_int_key(ctx_t *c, yaml_node_t *body, const char *key, const char *sn,
			  double min, double max, int *out)
{
	const sp_param_spec_t spec = { key, SP_PT_INT, "0", min, max, NULL, NULL };
	yaml_node_t *v = map_get(c, body, key);
	char msg[192];

	if (v == NULL)
		return;
	if (v->type != YAML_SCALAR_NODE)
		sp_diag_add(c->d, loc_of(v), "%s of stage '%s' must be an integer, got %s", key, sn,
			    type_name(v));
	else if (sp_param_check(&spec, sval(v), msg, sizeof msg) != 0)
		sp_diag_add(c->d, loc_of(v), "%s of stage '%s': %s", key, sn, msg);
	else
		*out = (int)sp_param_int(sval(v));
}

/* The stage's kind, params, priority, tile and where. */
static void load_stage_body(ctx_t *c, sp_gstage_t *st, tstage_t *ts)
{
	char sname[SP__NAME_MAX + 4];
	yaml_node_t *body = ts->val, *uses, *with, *where;
	const sp_stage_kind_t *kind;
	char buf[160], what[192];
	const char *sn = clipn_to(sname, st->name, strlen(st->name));

	if (body->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, loc_of(body),
			    "stage '%s' must be a mapping with 'uses:', got %s", sn,
			    type_name(body));
		return;
	}
	snprintf(buf, sizeof buf, " in stage '%s'", sn);
	check_allowed(c, body, stage_keys, 6, "key", buf);
	uses = map_get(c, body, "uses");
	if (uses == NULL) {
		sp_diag_add(c->d, st->loc, "stage '%s' has no 'uses:' (the stage kind)", sn);
		return;
	}
	if (uses->type != YAML_SCALAR_NODE) {
		sp_diag_add(c->d, loc_of(uses), "'uses' of stage '%s' must be a stage kind, got %s",
			    sn, type_name(uses));
		return;
	}
	ts->ok = 1;
	kind = sp_stage_find(sval(uses));
	if (kind == NULL) {
		size_t nk;
		const sp_stage_kind_t *const *kinds = sp_stage_kinds(&nk);
		const char **names = xcalloc(nk, sizeof *names);
		const char *s;

		for (size_t i = 0; i < nk; i++)
			names[i] = kinds[i]->name;
		s = suggest(&c->budget, sval(uses), names, nk);
		if (s != NULL)
			sp_diag_add(c->d, loc_of(uses),
				    "unknown stage kind '%s' (did you mean '%s'?)",
				    clip(c, sval(uses)), s);
		else
			sp_diag_add(c->d, loc_of(uses),
				    "unknown stage kind '%s' (run 'starpipe list' to see them)",
				    clip(c, sval(uses)));
		free(names);
		return;
	}
	st->kind = kind;
	st->params = xcalloc(kind->nparams, sizeof *st->params);
	fill_defaults(st->params, kind->params, kind->nparams);
	st->inputs = xcalloc(kind->ninputs, sizeof *st->inputs);
	for (size_t i = 0; i < kind->ninputs; i++)
		st->inputs[i].stage = NOT_CONNECTED;

	stage_int_key(c, body, "priority", sn, -1000000, 1000000, &st->priority);
	stage_int_key(c, body, "tile", sn, 0, 100000000, &st->tile);
	if (st->tile != 0 && kind->tile == NULL) {
		sp_diag_add(c->d, loc_of(map_get(c, body, "tile")),
			    "stage '%s' cannot tile: '%s' runs as one task per item", sn, kind->name);
		st->tile = 0;
	}
	where = map_get(c, body, "where");
	if (where != NULL) {
		static const sp_param_spec_t spec = { "where", SP_PT_ENUM, "any", 0, -1,
						      "any|cpu|cuda", NULL };
		char msg[192];

		if (where->type != YAML_SCALAR_NODE)
			sp_diag_add(c->d, loc_of(where),
				    "'where' of stage '%s' must be any, cpu or cuda, got %s", sn,
				    type_name(where));
		else if (sp_param_check(&spec, sval(where), msg, sizeof msg) != 0)
			sp_diag_add(c->d, loc_of(where), "'where' of stage '%s': %s", sn, msg);
		else if (strcmp(sval(where), "any") != 0) {
			unsigned w = strcmp(sval(where), "cpu") == 0 ? SP_IMPL_CPU : SP_IMPL_CUDA;

			if ((kind->impl & w) == 0)
				sp_diag_add(c->d, loc_of(where),
					    "stage '%s' cannot run on %s: '%s' has no %s "
					    "implementation%s",
					    sn, sval(where), kind->name, w == SP_IMPL_CPU ? "CPU" : "CUDA",
					    w == SP_IMPL_CUDA ? " in this build" : "");
			else
				st->where = w;
		}
	}

	with = map_get(c, body, "with");
	if (with != NULL && !is_null(with) && with->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, loc_of(with), "'with' of stage '%s' must be a mapping, got %s",
			    sn, type_name(with));
		with = NULL;
	}
	if (with != NULL && with->type == YAML_MAPPING_NODE) {
		const char **names = xcalloc(kind->nparams, sizeof *names);

		for (size_t i = 0; i < kind->nparams; i++)
			names[i] = kind->params[i].name;
		FOR_PAIRS(c, with, p)
		{
			yaml_node_t *k = node(c, p->key);
			size_t i;

			for (i = 0; i < kind->nparams; i++)
				if (strcmp(sval(k), names[i]) == 0)
					break;
			if (i == kind->nparams) {
				if (kind->nparams == 0)
					sp_diag_add(c->d, loc_of(k),
						    "unknown parameter '%s' ('%s' takes none)",
						    clip(c, sval(k)), kind->name);
				else
					sp_diag_add(c->d, loc_of(k),
						    "unknown parameter '%s' for '%s'%s",
						    clip(c, sval(k)), kind->name,
						    dym(&c->budget, buf, sizeof buf, sval(k), names,
							kind->nparams));
				continue;
			}
			snprintf(what, sizeof what, "parameter '%s' of '%s'", names[i], kind->name);
			set_param(c, &st->params[i], node(c, p->value), what, 1);
		}
		free(names);
	}
	for (size_t i = 0; i < kind->nparams; i++) {
		int given = with != NULL && with->type == YAML_MAPPING_NODE &&
			    map_get(c, with, kind->params[i].name) != NULL;

		if (kind->params[i].def == NULL && !given)
			sp_diag_add(c->d, st->loc,
				    "stage '%s' (%s) is missing required parameter '%s'",
				    sn, kind->name, kind->params[i].name);
	}
}

/* The stage's `in:` connections.  names indexes the stages by name; *cand
 * is their names for suggestions, made on first need. */
static void load_stage_inputs(ctx_t *c, sp_gstage_t *all, tstage_t *ts, size_t n, size_t self,
			      const smap_t *names, const char ***cand)
{
	char sname[SP__NAME_MAX + 4];
	sp_gstage_t *st = &all[self];
	const sp_stage_kind_t *kind = st->kind;
	yaml_node_t *in = ts[self].val->type == YAML_MAPPING_NODE ?
				  map_get(c, ts[self].val, "in") : NULL;
	char buf[160];
	const char *sn = clipn_to(sname, st->name, strlen(st->name));

	if (kind == NULL)
		return;
	if (in != NULL && !is_null(in) && in->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, loc_of(in), "'in' of stage '%s' must be a mapping, got %s",
			    sn, type_name(in));
		return;
	}
	if (in != NULL && in->type == YAML_MAPPING_NODE) {
		const char **ports = xcalloc(kind->ninputs, sizeof *ports);

		for (size_t i = 0; i < kind->ninputs; i++)
			ports[i] = kind->inputs[i].name;
		FOR_PAIRS(c, in, p)
		{
			yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
			const char *ref, *dot;
			const sp_stage_kind_t *pk;
			size_t i, j, o;

			for (i = 0; i < kind->ninputs; i++)
				if (strcmp(sval(k), ports[i]) == 0)
					break;
			if (i == kind->ninputs) {
				if (kind->ninputs == 0)
					sp_diag_add(c->d, loc_of(k),
						    "unknown input port '%s' ('%s' has no inputs)",
						    clip(c, sval(k)), kind->name);
				else
					sp_diag_add(c->d, loc_of(k),
						    "unknown input port '%s' of '%s'%s",
						    clip(c, sval(k)), kind->name,
						    dym(&c->budget, buf, sizeof buf, sval(k), ports,
							kind->ninputs));
				continue;
			}
			/* Mark it as handled even when the reference is bad, so
			 * that it is not also reported as not connected. */
			st->inputs[i].stage = NOT_CONNECTED - 1;
			if (v->type != YAML_SCALAR_NODE) {
				sp_diag_add(c->d, loc_of(v),
					    "input '%s' of stage '%s' must be a reference 'stage.port', got %s",
					    ports[i], sn, type_name(v));
				continue;
			}
			ref = sval(v);
			dot = strchr(ref, '.');
			if (dot == NULL || dot == ref || dot[1] == '\0' || strchr(dot + 1, '.') != NULL) {
				sp_diag_add(c->d, loc_of(v),
					    "malformed reference '%s' (expected 'stage.port')",
					    clip(c, ref));
				continue;
			}
			j = smap_get(names, ref, (size_t)(dot - ref));
			if (j == SIZE_MAX) {
				char *rs = xstrndup(ref, (size_t)(dot - ref));

				if (*cand == NULL) {
					*cand = xcalloc(n, sizeof **cand);
					for (size_t q = 0; q < n; q++)
						(*cand)[q] = all[q].name;
				}
				sp_diag_add(c->d, loc_of(v), "reference to unknown stage '%s'%s",
					    clip(c, rs), dym(&c->budget, buf, sizeof buf, rs, *cand, n));
				free(rs);
				continue;
			}
			if (j == self) {
				sp_diag_add(c->d, loc_of(v), "stage '%s' is connected to itself",
					    sn);
				continue;
			}
			pk = all[j].kind;
			if (pk == NULL)
				continue; /* its kind was already reported */
			for (o = 0; o < pk->noutputs; o++)
				if (strcmp(pk->outputs[o].name, dot + 1) == 0)
					break;
			if (o == pk->noutputs) {
				const char **outs = xcalloc(pk->noutputs, sizeof *outs);

				for (size_t q = 0; q < pk->noutputs; q++)
					outs[q] = pk->outputs[q].name;
				if (pk->noutputs == 0)
					sp_diag_add(c->d, loc_of(v),
						    "stage '%s' (%s) has no outputs",
						    clip(c, all[j].name), pk->name);
				else
					sp_diag_add(c->d, loc_of(v),
						    "stage '%s' (%s) has no output '%s'%s",
						    clip(c, all[j].name), pk->name, clip(c, dot + 1),
						    dym(&c->budget, buf, sizeof buf, dot + 1, outs,
							pk->noutputs));
				free(outs);
				continue;
			}
			if (strcmp(pk->outputs[o].type, kind->inputs[i].type) != 0) {
				sp_diag_add(c->d, loc_of(v),
					    "input '%s' of stage '%s' has type '%s' but '%s' is '%s'",
					    ports[i], sn, kind->inputs[i].type, clip(c, ref),
					    pk->outputs[o].type);
				/* Keep the edge: a cycle through it is worth
				 * reporting too. */
			}
			st->inputs[i].stage = j;
			st->inputs[i].port = o;
			st->inputs[i].loc = loc_of(v);
		}
		free(ports);
	}
	for (size_t i = 0; i < kind->ninputs; i++) {
		if (st->inputs[i].stage == NOT_CONNECTED)
			sp_diag_add(c->d, st->loc, "input '%s' of stage '%s' is not connected",
				    kind->inputs[i].name, sn);
		else if (st->inputs[i].stage == NOT_CONNECTED - 1)
			st->inputs[i].stage = NOT_CONNECTED;
	}
}

/* The graph's edges for toposort(): a stage's producers are its inputs;
 * its consumers are cons[cstart[i] .. cstart[i + 1]), one per input that
 * it feeds (an edge counts as often as it appears, on both sides). */
typedef struct {
	sp_gstage_t *all;
	size_t n, *cstart, *cons;
	char *left;     /* still to be explained: on or around a cycle */
	size_t *lp, *lc; /* per stage: edges from / to stages still left */
	size_t *queue, nq;
} topo_t;

static size_t nin(const sp_gstage_t *st)
{
	return st->kind != NULL ? st->kind->ninputs : 0;
}

/* Drops stage i from the left ones; queues those it leaves with no left
 * producer or consumer. */
static void topo_drop(topo_t *t, size_t i)
{
	const sp_gstage_t *st = &t->all[i];

	t->left[i] = 0;
	for (size_t k = 0; k < nin(st); k++) {
		size_t j = st->inputs[k].stage;

		if (j != NOT_CONNECTED && t->left[j] && --t->lc[j] == 0)
			t->queue[t->nq++] = j;
	}
	for (size_t e = t->cstart[i]; e < t->cstart[i + 1]; e++) {
		size_t j = t->cons[e];

		if (t->left[j] && --t->lp[j] == 0)
			t->queue[t->nq++] = j;
	}
}

/* Drops, until none is left, stages with no remaining producer or no
 * remaining consumer: the rest lies on cycles. */
static void topo_prune(topo_t *t)
{
	while (t->nq > 0) {
		size_t i = t->queue[--t->nq];

		if (t->left[i])
			topo_drop(t, i);
	}
}

/* A binary min-heap of stage indices: among ready stages, file order first. */
static void heap_push(size_t *h, size_t *n, size_t v)
{
	size_t i = (*n)++;

	while (i > 0 && h[(i - 1) / 2] > v) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = v;
}

static size_t heap_pop(size_t *h, size_t *n)
{
	size_t top = h[0], v = h[--*n], i = 0;

	for (;;) {
		size_t k = 2 * i + 1;

		if (k >= *n)
			break;
		if (k + 1 < *n && h[k + 1] < h[k])
			k++;
		if (h[k] >= v)
			break;
		h[i] = h[k];
		i = k;
	}
	if (*n > 0)
		h[i] = v;
	return top;
}

/* Sorts the stages topologically (among ready stages, file order first)
 * into order[]; reports each cycle once.  Returns the number sorted.
 * Linear in stages and edges, but for the walks that find cycles. */
static size_t toposort(ctx_t *c, sp_gstage_t *all, size_t n, size_t *order)
{
	topo_t t = { all, n, NULL, NULL, NULL, NULL, NULL, NULL, 0 };
	size_t *indeg = xcalloc(n, sizeof *indeg), *heap = xcalloc(n, sizeof *heap);
	size_t *path = xcalloc(n + 1, sizeof *path), *pos = xcalloc(n, sizeof *pos);
	size_t norder = 0, nheap = 0, ne = 0;

	t.cstart = xcalloc(n + 1, sizeof *t.cstart);
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < nin(&all[i]); k++)
			if (all[i].inputs[k].stage != NOT_CONNECTED) {
				t.cstart[all[i].inputs[k].stage + 1]++;
				indeg[i]++;
				ne++;
			}
	for (size_t i = 0; i < n; i++)
		t.cstart[i + 1] += t.cstart[i];
	t.cons = xcalloc(ne, sizeof *t.cons);
	{
		size_t *fill = xcalloc(n, sizeof *fill);

		for (size_t i = 0; i < n; i++)
			for (size_t k = 0; k < nin(&all[i]); k++) {
				size_t j = all[i].inputs[k].stage;

				if (j != NOT_CONNECTED)
					t.cons[t.cstart[j] + fill[j]++] = i;
			}
		free(fill);
	}

	/* Kahn's algorithm. */
	for (size_t i = 0; i < n; i++)
		if (indeg[i] == 0)
			heap_push(heap, &nheap, i);
	while (nheap > 0) {
		size_t i = heap_pop(heap, &nheap);

		order[norder++] = i;
		for (size_t e = t.cstart[i]; e < t.cstart[i + 1]; e++)
			if (--indeg[t.cons[e]] == 0)
				heap_push(heap, &nheap, t.cons[e]);
	}

	/* What is left is on a cycle, or downstream or upstream of one. */
	t.left = xcalloc(n, 1);
	t.lp = indeg; /* what Kahn's left of it counts the edges from left stages */
	t.lc = xcalloc(n, sizeof *t.lc);
	t.queue = xcalloc(3 * n + 1, sizeof *t.queue); /* each stage queued <= 3 times */
	for (size_t i = 0; i < n; i++)
		t.left[i] = indeg[i] != 0;
	for (size_t i = 0; i < n; i++)
		for (size_t e = t.cstart[i]; e < t.cstart[i + 1]; e++)
			t.lc[i] += t.left[i] && t.left[t.cons[e]];
	for (size_t i = 0; i < n; i++)
		if (t.left[i] && (t.lp[i] == 0 || t.lc[i] == 0))
			t.queue[t.nq++] = i;
	topo_prune(&t);
	for (size_t i = 0; i < n; i++)
		pos[i] = SIZE_MAX;

	for (size_t first = 0; first < n;) {
		size_t len = 0, at, start;
		sbuf_t b = { 0 };

		if (!t.left[first]) {
			first++;
			continue;
		}
		/* Walk producers (the first in file order) from `first` until
		 * a stage repeats. */
		at = first;
		while (pos[at] == SIZE_MAX) {
			size_t j = NOT_CONNECTED;

			pos[at] = len;
			path[len++] = at;
			for (size_t k = 0; k < nin(&all[at]); k++) {
				size_t p = all[at].inputs[k].stage;

				if (p != NOT_CONNECTED && t.left[p] && (j == NOT_CONNECTED || p < j))
					j = p;
			}
			assert(j != NOT_CONNECTED);
			at = j;
		}
		start = pos[at];
		for (size_t k = 0; k < len; k++)
			pos[path[k]] = SIZE_MAX;
		/* path[start..len) is the cycle against the data flow; print
		 * it with the flow, from its first stage in file order (at most
		 * 16 stages of it). */
		{
			size_t m = start, clen = len - start;

			for (size_t k = start; k < len; k++)
				if (path[k] < path[m])
					m = k;
			sb_add(&b, "cycle: ");
			for (size_t k = 0, q = m; k <= clen; k++) {
				if (k < 15 || k == clen) {
					sb_add(&b, clip(c, all[path[q]].name));
					if (k < clen)
						sb_add(&b, " -> ");
				} else if (k == 15) {
					char more[64];

					snprintf(more, sizeof more, "... (%zu more) -> ", clen - 15);
					sb_add(&b, more);
				}
				q = q == start ? len - 1 : q - 1;
			}
			sp_diag_add(c->d, all[path[m]].loc, "%s", b.s);
			free(b.s);
			/* Stages that were only on this cycle's path are
			 * dropped by pruning again. */
			for (size_t k = start; k < len; k++)
				if (t.left[path[k]])
					topo_drop(&t, path[k]);
			topo_prune(&t);
		}
		/* Stages before `first` are all done with: going on from it is
		 * rescanning from the start of the file. */
	}
	free(indeg);
	free(heap);
	free(path);
	free(pos);
	free(t.cstart);
	free(t.cons);
	free(t.left);
	free(t.lc);
	free(t.queue);
	return norder;
}

static void free_params(sp_gparam_t *p, size_t n)
{
	if (p == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(p[i].text);
	free(p);
}

static void free_stage(sp_gstage_t *st)
{
	free(st->name);
	if (st->kind != NULL)
		free_params(st->params, st->kind->nparams);
	free(st->inputs);
}

static void load_stages(ctx_t *c, yaml_node_t *map)
{
	sp_graph_t *g = c->g;
	tstage_t *ts;
	sp_gstage_t *all;
	size_t n = 0, *order, *rank, norder;
	smap_t names = { 0 };
	const char **cand = NULL;

	if (map->type != YAML_MAPPING_NODE || is_null(map)) {
		sp_diag_add(c->d, loc_of(map),
			    "'stages' must be a mapping of stage names to stages, got %s",
			    is_null(map) ? "nothing" : type_name(map));
		return;
	}
	ts = xcalloc((size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start),
		     sizeof *ts);
	all = xcalloc((size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start),
		      sizeof *all);
	FOR_PAIRS(c, map, p)
	{
		yaml_node_t *k = node(c, p->key);

		if (!valid_name(sval(k), "_-")) {
			sp_diag_add(c->d, loc_of(k),
				    "invalid stage name '%s' (use letters, digits, '_' and '-')",
				    clip(c, sval(k)));
			continue;
		}
		ts[n].key = k;
		ts[n].val = node(c, p->value);
		all[n].name = xstrdup(sval(k));
		all[n].loc = loc_of(k);
		smap_add(&names, all[n].name, strlen(all[n].name), n);
		n++;
	}
	if (n == 0)
		sp_diag_add(c->d, loc_of(map), "'stages' has no stages");
	for (size_t i = 0; i < n; i++)
		load_stage_body(c, &all[i], &ts[i]);
	for (size_t i = 0; i < n; i++)
		load_stage_inputs(c, all, ts, n, i, &names, &cand);
	smap_free(&names);
	free(cand);

	order = xcalloc(n, sizeof *order);
	rank = xcalloc(n, sizeof *rank);
	norder = toposort(c, all, n, order);
	if (norder == n) {
		g->stages = xcalloc(n, sizeof *g->stages);
		for (size_t i = 0; i < n; i++)
			rank[order[i]] = i;
		for (size_t i = 0; i < n; i++) {
			sp_gstage_t *st = &g->stages[i];

			*st = all[order[i]];
			if (st->kind != NULL)
				for (size_t j = 0; j < st->kind->ninputs; j++)
					if (st->inputs[j].stage != NOT_CONNECTED)
						st->inputs[j].stage = rank[st->inputs[j].stage];
		}
		g->nstages = n;
	} else {
		for (size_t i = 0; i < n; i++)
			free_stage(&all[i]);
	}
	free(order);
	free(rank);
	free(all);
	free(ts);
}

/* --- loading ------------------------------------------------------------- */

/* 1-based line and column of a byte offset (columns count characters). */
static sp_loc_t loc_at(const char *text, size_t len, size_t off)
{
	sp_loc_t l = { 1, 1 };

	for (size_t i = 0; i < off && i < len; i++) {
		if (text[i] == '\n') {
			l.line++;
			l.col = 1;
		} else if (((unsigned char)text[i] & 0xC0) != 0x80) {
			l.col++;
		}
	}
	return l;
}

static void yaml_error(sp_diag_t *d, const yaml_parser_t *p, const char *text, size_t len)
{
	sp_loc_t l;

	if (p->error == YAML_MEMORY_ERROR) {
		fprintf(stderr, "%s: out of memory\n", __func__);
		abort();
	}
	if (p->error == YAML_READER_ERROR) {
		l = loc_at(text, len, p->problem_offset);
		if (p->problem_value != -1)
			sp_diag_add(d, l, "YAML syntax error: %s (byte 0x%02X)",
				    p->problem != NULL ? p->problem : "unreadable input",
				    (unsigned)p->problem_value & 0xFFu);
		else
			sp_diag_add(d, l, "YAML syntax error: %s",
				    p->problem != NULL ? p->problem : "unreadable input");
		return;
	}
	l.line = (int)p->problem_mark.line + 1;
	l.col = (int)p->problem_mark.column + 1;
	if (p->context != NULL)
		sp_diag_add(d, l, "YAML syntax error: %s (%s)",
			    p->problem != NULL ? p->problem : "invalid YAML", p->context);
	else
		sp_diag_add(d, l, "YAML syntax error: %s",
			    p->problem != NULL ? p->problem : "invalid YAML");
}

/* Pass 1: syntax, aliases, depth, one document.  Returns 0 if all is well. */
static int scan_events(const char *text, size_t len, sp_diag_t *d)
{
	yaml_parser_t p;
	yaml_event_t ev;
	int depth = 0, ndocs = 0, rc = 0;

	if (!yaml_parser_initialize(&p)) {
		fprintf(stderr, "%s: out of memory\n", __func__);
		abort();
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	for (;;) {
		yaml_event_type_t type;
		sp_loc_t l;

		if (!yaml_parser_parse(&p, &ev)) {
			yaml_error(d, &p, text, len);
			rc = -1;
			break;
		}
		type = ev.type;
		l.line = (int)ev.start_mark.line + 1;
		l.col = (int)ev.start_mark.column + 1;
		if (type == YAML_ALIAS_EVENT) {
			sp_diag_add(d, l, "YAML aliases are not supported");
			rc = -1;
		} else if (type == YAML_DOCUMENT_START_EVENT && ++ndocs == 2) {
			sp_diag_add(d, l, "a graph file holds one YAML document, found a second");
			rc = -1;
		} else if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
			if (++depth > SP__MAX_DEPTH) {
				sp_diag_add(d, l, "nesting deeper than %d levels", SP__MAX_DEPTH);
				yaml_event_delete(&ev);
				rc = -1;
				break;
			}
		} else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
			depth--;
		}
		yaml_event_delete(&ev);
		if (type == YAML_STREAM_END_EVENT)
			break;
	}
	yaml_parser_delete(&p);
	return rc;
}

static void check_version(ctx_t *c, yaml_node_t *v)
{
	if (v->type != YAML_SCALAR_NODE || strcmp(sval(v), "1") != 0)
		sp_diag_add(c->d, loc_of(v),
			    "unsupported format version '%s' (this starpipe reads 'starpipe: 1')",
			    v->type == YAML_SCALAR_NODE ? clip(c, sval(v)) : type_name(v));
}

static void load_root(ctx_t *c, yaml_node_t *root, const sp_var_t *set, size_t nset)
{
	static const char *const keys[] = { "starpipe", "pipeline", "description", "params",
					    "inputs",   "stages",   "runtime" };
	sp_graph_t *g = c->g;
	yaml_node_t *v;

	check_allowed(c, root, keys, sizeof keys / sizeof keys[0], "top-level key", "");
	v = map_get(c, root, "starpipe");
	if (v == NULL)
		sp_diag_add(c->d, loc_of(root), "missing 'starpipe:' (the format version, 1)");
	else
		check_version(c, v);
	v = map_get(c, root, "pipeline");
	if (v == NULL)
		sp_diag_add(c->d, loc_of(root), "missing 'pipeline:' (the pipeline's name)");
	else if (v->type != YAML_SCALAR_NODE || !valid_name(sval(v), "_.-"))
		sp_diag_add(c->d, loc_of(v),
			    "invalid pipeline name '%s' (use letters, digits, '_', '.' and '-')",
			    v->type == YAML_SCALAR_NODE ? clip(c, sval(v)) : type_name(v));
	else
		g->pipeline = xstrdup(sval(v));
	v = map_get(c, root, "description");
	if (v != NULL && v->type != YAML_SCALAR_NODE)
		sp_diag_add(c->d, loc_of(v), "'description' must be a string, got %s",
			    type_name(v));
	else if (v != NULL)
		g->description = xstrdup(sval(v));

	load_params(c, map_get(c, root, "params"), set, nset);
	v = map_get(c, root, "inputs");
	if (v != NULL)
		load_inputs(c, v);
	v = map_get(c, root, "stages");
	if (v == NULL)
		sp_diag_add(c->d, loc_of(root), "missing 'stages:' (the pipeline's stages)");
	else
		load_stages(c, v);
	load_runtime(c, map_get(c, root, "runtime"));
}

static int load_text(const char *path, const char *text, size_t len, const sp_var_t *vars,
		     size_t nvars, sp_graph_t **out, sp_diag_t *diag)
{
	yaml_parser_t p;
	yaml_document_t doc;
	yaml_node_t *root;
	ctx_t c = { 0 };
	size_t before = diag->n;

	*out = NULL;
	free(diag->source);
	diag->source = xstrndup(text, len);
	if (scan_events(text, len, diag) != 0)
		return SP_EGRAPH;
	if (!yaml_parser_initialize(&p)) {
		fprintf(stderr, "%s: out of memory\n", __func__);
		abort();
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	if (!yaml_parser_load(&p, &doc)) {
		yaml_error(diag, &p, text, len);
		yaml_parser_delete(&p);
		return SP_EGRAPH;
	}
	yaml_parser_delete(&p);

	c.doc = &doc;
	c.d = diag;
	c.g = xcalloc(1, sizeof *c.g);
	c.g->file = xstrdup(path);
	root = yaml_document_get_root_node(&doc);
	if (root == NULL || is_null(root)) {
		sp_loc_t l = { 1, 1 };

		if (root != NULL)
			l = loc_of(root);
		sp_diag_add(diag, l,
			    "empty graph file (expected a mapping with 'starpipe:', 'pipeline:' and 'stages:')");
	} else if (root->type != YAML_MAPPING_NODE) {
		sp_diag_add(diag, loc_of(root),
			    "the top level must be a mapping with 'starpipe:', 'pipeline:' and 'stages:', got %s",
			    type_name(root));
	} else {
		c.skip = xcalloc((size_t)(doc.nodes.top - doc.nodes.start) + 1, 1);
		c.budget = SP__SUGGEST_BUDGET;
		check_tree(&c, root, 0);
		load_root(&c, root, vars, nvars);
	}
	for (size_t i = 0; i < c.nvars; i++) {
		free(c.vars[i].name);
		free(c.vars[i].value);
	}
	free(c.vars);
	free(c.var_cand);
	free(c.skip);
	smap_free(&c.var_index);
	yaml_document_delete(&doc);
	if (diag->n != before) {
		sp_graph_free(&c.g);
		return SP_EGRAPH;
	}
	*out = c.g;
	return 0;
}

int sp_graph_load_string(const char *path, const char *text, const sp_var_t *vars,
			 size_t nvars, sp_graph_t **out, sp_diag_t *diag)
{
	return load_text(path, text, strlen(text), vars, nvars, out, diag);
}

/* Why sp_fopen_regular() refused path, without the path it starts with. */
static const char *open_reason(const char *path, const sp_err_t *e)
{
	size_t pl = strlen(path);
	if (e->code == SP_ENOENT)
		return strerror(ENOENT);
	return strncmp(e->msg, path, pl) == 0 && e->msg[pl] == ':' ? e->msg + pl + 2 : e->msg;
}

int sp_graph_load(const char *path, const sp_var_t *vars, size_t nvars, sp_graph_t **out,
		  sp_diag_t *diag)
{
	sp_loc_t none = { 0, 0 };
	sp_err_t oerr = { 0 };
	/* a regular file only: a FIFO or a device must not block or be read */
	FILE *f = sp_fopen_regular(path, &oerr);
	sbuf_t b = { 0 };
	char chunk[8192];
	size_t n;
	int rc;

	*out = NULL;
	if (f == NULL) {
		sp_diag_add(diag, none, "cannot open: %s", open_reason(path, &oerr));
		return oerr.code == SP_ENOENT ? SP_ENOENT : SP_EIO;
	}
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		sb_addn(&b, chunk, n);
	if (ferror(f)) {
		int e = errno;

		fclose(f);
		free(b.s);
		sp_diag_add(diag, none, "cannot read: %s", strerror(e));
		return SP_EIO;
	}
	fclose(f);
	rc = load_text(path, b.s != NULL ? b.s : "", b.len, vars, nvars, out, diag);
	free(b.s);
	return rc;
}

void sp_graph_free(sp_graph_t **gp)
{
	sp_graph_t *g = *gp;

	if (g == NULL)
		return;
	*gp = NULL;
	free(g->file);
	free(g->pipeline);
	free(g->description);
	for (size_t i = 0; i < g->nstages; i++)
		free_stage(&g->stages[i]);
	free(g->stages);
	for (size_t i = 0; i < g->nitems_spec; i++)
		free(g->items_spec[i]);
	free(g->items_spec);
	free_params(g->runtime, g->runtime != NULL ? sp_runtime_nparams : 0);
	for (size_t i = 0; i < g->nvars; i++) {
		free(g->var_names[i]);
		free(g->var_values[i]);
	}
	free(g->var_names);
	free(g->var_values);
	free(g);
}

/* --- after loading ------------------------------------------------------- */

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

			if (end != NULL && is_builtin(t + 2, (size_t)(end - t - 2)))
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

static int manifest_items(const char *path, char ***items, size_t *n, sp_err_t *err)
{
	sp_err_t oerr = { 0 };
	FILE *f = sp_fopen_regular(path, &oerr);
	const char *slash = strrchr(path, '/');
	size_t dirlen = slash != NULL ? (size_t)(slash - path + 1) : 0;
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	char **v = NULL;
	size_t nv = 0;

	if (f == NULL)
		return sp_seterr(err, oerr.code == SP_ENOENT ? SP_ENOENT : SP_EIO, "manifest '%s': %s",
				 path, open_reason(path, &oerr));
	while ((len = getline(&line, &cap, f)) >= 0) {
		char *s = line, *e = line + len;

		while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
			*--e = '\0';
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s == '\0' || *s == '#')
			continue;
		v = realloc(v, (nv + 1) * sizeof *v);
		if (v == NULL)
			abort();
		if (*s == '/' || dirlen == 0) {
			v[nv] = strdup(s);
		} else {
			v[nv] = malloc(dirlen + strlen(s) + 1);
			if (v[nv] != NULL) {
				memcpy(v[nv], path, dirlen);
				strcpy(v[nv] + dirlen, s);
			}
		}
		if (v[nv] == NULL)
			abort();
		nv++;
	}
	free(line);
	if (ferror(f)) {
		int e = errno;

		fclose(f);
		free_items(v, nv);
		return sp_seterr(err, SP_EIO, "manifest '%s': %s", path, strerror(e));
	}
	fclose(f);
	if (nv == 0)
		return sp_seterr(err, SP_ENOENT, "manifest '%s' lists no files", path);
	*items = v;
	*n = nv;
	return 0;
}

int sp_graph_items(const sp_graph_t *g, char ***items, size_t *n, struct sp_err *err)
{
	*items = NULL;
	*n = 0;
	switch (g->items_kind) {
	case SP_ITEMS_NONE:
		return 0;
	case SP_ITEMS_FILES: {
		char **v = xcalloc(g->nitems_spec, sizeof *v);

		for (size_t i = 0; i < g->nitems_spec; i++)
			v[i] = xstrdup(g->items_spec[i]);
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
		v = xcalloc(gl.gl_pathc, sizeof *v);
		for (size_t i = 0; i < gl.gl_pathc; i++)
			v[i] = xstrdup(gl.gl_pathv[i]);
		*items = v;
		*n = gl.gl_pathc;
		globfree(&gl);
		return 0;
	}
	case SP_ITEMS_MANIFEST:
		return manifest_items(g->items_spec[0], items, n, err);
	}
	return 0;
}

/* Whether a stage's parameters name the work item (${item}, ${stem}, ${index}). */
static int uses_item(const sp_gstage_t *st)
{
	for (size_t i = 0; i < st->kind->nparams; i++) {
		const char *t = st->params[i].text;
		for (size_t b = 0; t != NULL && b < sizeof builtins / sizeof builtins[0]; b++) {
			char ref[16];
			snprintf(ref, sizeof ref, "${%s}", builtins[b]);
			if (strstr(t, ref) != NULL)
				return 1;
		}
	}
	return 0;
}

void sp_graph_dot(const sp_graph_t *g, FILE *f)
{
	fprintf(f, "digraph \"%s\" {\n", g->pipeline != NULL ? g->pipeline : "pipeline");
	fprintf(f, "\trankdir=LR;\n\tnode [shape=box];\n");
	if (g->items_kind != SP_ITEMS_NONE) {
		static const char *const what[] = { "", "files", "glob", "manifest" };

		fprintf(f, "\t\"inputs\" [shape=folder, label=\"inputs\\n%s\"];\n",
			what[g->items_kind]);
	}
	for (size_t i = 0; i < g->nstages; i++)
		fprintf(f, "\t\"%s\" [label=\"%s\\n%s\"];\n", g->stages[i].name,
			g->stages[i].name, g->stages[i].kind->name);
	for (size_t i = 0; i < g->nstages; i++) {
		const sp_gstage_t *st = &g->stages[i];

		if (g->items_kind != SP_ITEMS_NONE && uses_item(st))
			fprintf(f, "\t\"inputs\" -> \"%s\" [label=\"item\"];\n", st->name);
		for (size_t j = 0; j < st->kind->ninputs; j++) {
			const sp_gstage_t *src = &g->stages[st->inputs[j].stage];
			const char *out = src->kind->outputs[st->inputs[j].port].name;
			const char *in = st->kind->inputs[j].name;

			if (strcmp(out, in) == 0)
				fprintf(f, "\t\"%s\" -> \"%s\" [label=\"%s\"];\n", src->name,
					st->name, in);
			else
				fprintf(f, "\t\"%s\" -> \"%s\" [label=\"%s -> %s\"];\n", src->name,
					st->name, out, in);
		}
	}
	fprintf(f, "}\n");
}

const sp_gparam_t *sp_gstage_param(const sp_gstage_t *st, const char *name)
{
	for (size_t i = 0; i < st->kind->nparams; i++)
		if (strcmp(st->params[i].spec->name, name) == 0)
			return &st->params[i];
	assert(!"no such parameter");
	abort();
}

const char *sp_graph_runtime(const sp_graph_t *g, const char *name)
{
	for (size_t i = 0; i < sp_runtime_nparams; i++)
		if (strcmp(sp_runtime_params[i].name, name) == 0)
			return g->runtime[i].text;
	return NULL;
}
