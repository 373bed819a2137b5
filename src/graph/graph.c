/* Pipeline graph files: YAML loading and validation into an sp_graph_t. */
#include "graph.h"
#include "graph_int.h"
#include "error.h"
#include "fsutil.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
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
 * command-line tools (graph_util.c).
 *
 * Every pass is linear in the size of the file (a graph may be generated,
 * with tens of thousands of keys): keys, variables and stage names are
 * looked up in hash tables, the topological sort is Kahn's with a heap
 * (graph_topo.c), the "did you mean" search has a work budget, and printing
 * the diagnostics indexes the lines once (diag.c).  What a diagnostic echoes
 * is bounded too: names are cut to SP__NAME_MAX bytes and source lines to
 * SP__SHOW_COLS columns around the caret, so a 10 MB key gives a few hundred
 * bytes of messages.
 *
 * The files of the graph: graph.c (this one: loading), diag.c (diagnostics
 * and "did you mean"), graph_topo.c (stage order, cycles), graph_items.c
 * (work items, ${item} expansion), graph_model.c (accessors, DOT, freeing),
 * graph_util.c (allocation, strings, hash map); graph_int.h declares what
 * they share.
 */

#define SP__MAX_DEPTH 64
#define SP__SUGGEST_BUDGET 100000000LL /* "did you mean" work per file */

/* --- YAML helpers -------------------------------------------------------- */

typedef struct {
	char *name;
	char *value; /* NULL: declared without a default and not --set */
	int used_set;
	sp_loc_t loc; /* its name under params: */
} var_t;

/* The loader's state. */
typedef struct {
	yaml_document_t *doc;
	sp_diag_t *d;
	sp_graph_t *g;
	const sp_registry_t *reg; /* the kinds, the scheduler check */
	var_t *vars;
	size_t nvars;
	smap_t var_index;       /* vars by name */
	const char **var_cand;  /* variable and builtin names, for suggestions */
	unsigned char *skip;    /* by node id: a key pass 3 ignores (a duplicate) */
	long long budget;       /* of sp__diag_dym() */
	char clip[4][SP__NAME_MAX + 4];
	unsigned nclip;
} ctx_t;

/* s cut for a message (see sp__diag_clipn); valid until four more calls. */
static const char *clipn(ctx_t *c, const char *s, size_t n)
{
	return sp__diag_clipn(c->clip[c->nclip++ % 4], s, n);
}

static const char *clip(ctx_t *c, const char *s)
{
	return sp__diag_clip(c->clip[c->nclip++ % 4], s);
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
				size_t first = sp__smap_add(&seen, (const char *)k->data.scalar.value,
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
		sp__smap_free(&seen);
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

/* Reports "LEAD 'WORD'TAIL" at loc, word being a name not among the n
 * candidates, followed by " (did you mean 'X'?)" when one of them is close
 * to it, else by hint ("" for nothing more).  Every "unknown name" message
 * of the loader is made here. */
static void unknown_name(ctx_t *c, sp_loc_t loc, const char *lead, const char *word,
			 const char *tail, const char *const *cand, size_t n, const char *hint)
{
	char buf[128];

	sp__diag_dym(&c->budget, buf, sizeof buf, word, cand, n);
	sp_diag_add(c->d, loc, "%s '%s'%s%s", lead, clip(c, word), tail,
		    buf[0] != '\0' ? buf : hint);
}

/* Reports keys of map not in `allowed` (what: "top-level key", ...). */
static void check_allowed(ctx_t *c, yaml_node_t *map, const char *const *allowed,
			  size_t n, const char *what, const char *where)
{
	char lead[64];

	snprintf(lead, sizeof lead, "unknown %s", what);
	FOR_PAIRS(c, map, p)
	{
		yaml_node_t *k = node(c, p->key);
		size_t i;

		for (i = 0; i < n; i++)
			if (strcmp(sval(k), allowed[i]) == 0)
				break;
		if (i == n)
			unknown_name(c, loc_of(k), lead, sval(k), where, allowed, n, "");
	}
}

/* --- ${var} -------------------------------------------------------------- */

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
			sp__sb_add(b, "$$");
			v += 2;
		} else if (v[0] == '$' && v[1] == '{') {
			const char *end = strchr(v, '}');

			if (end != NULL && sp__graph_is_builtin(v + 2, (size_t)(end - v - 2))) {
				sp__sb_addn(b, v, (size_t)(end - v + 1));
				*builtin = 1;
				v = end + 1;
			} else {
				sp__sb_add(b, "$$");
				v++;
			}
		} else if (v[0] == '$') {
			sp__sb_add(b, "$$");
			v++;
		} else {
			sp__sb_addn(b, v, 1);
			v++;
		}
	}
}

/* The first `${NAME}` of a variable's value that is not a builtin (a value
 * is not expanded, so `${HOME}` would name a folder "${HOME}"): its
 * length and *at its start, or 0. */
static size_t stray_ref(const char *v, const char **at)
{
	for (; *v != '\0'; v++) {
		if (v[0] == '$' && v[1] == '$') {
			v++;
			continue;
		}
		if (v[0] != '$' || v[1] != '{')
			continue;
		const char *end = strchr(v, '}');
		if (end == NULL || !sp__graph_is_builtin(v + 2, (size_t)(end - v - 2))) {
			*at = v;
			return end != NULL ? (size_t)(end - v + 1) : strlen(v);
		}
		v = end;
	}
	return 0;
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

/* Resolves the global ${var}s of src, a scalar of the file at loc (problems
 * are reported there).  Returns the text (malloc'd), or NULL after
 * reporting a problem.  *builtin tells whether the result still holds a
 * per-item builtin; then a literal '$' stays written `$$`, for
 * sp_graph_expand(); otherwise the text is plain. */
static char *subst_text(ctx_t *c, const char *src, sp_loc_t loc, int *builtin)
{
	const char *s = src;
	sbuf_t b = { 0 };
	int bad = 0;

	*builtin = 0;
	while (*s != '\0') {
		const char *end, *name;
		size_t len, i;

		if (s[0] != '$' || (s[1] != '$' && s[1] != '{')) {
			if (s[0] == '$')
				sp__sb_add(&b, "$$");
			else
				sp__sb_addn(&b, s, 1);
			s++;
			continue;
		}
		if (s[1] == '$') {
			sp__sb_add(&b, "$$");
			s += 2;
			continue;
		}
		end = strchr(s, '}');
		if (end == NULL) {
			sp_diag_add(c->d, loc,
				    "unterminated '${' in '%s' (write '$$' for a literal '$')",
				    clip(c, src));
			bad = 1;
			break;
		}
		name = s + 2;
		len = (size_t)(end - name);
		s = end + 1;
		if (sp__graph_is_builtin(name, len)) {
			sp__sb_add(&b, "${");
			sp__sb_addn(&b, name, len);
			sp__sb_add(&b, "}");
			*builtin = 1;
			continue;
		}
		if (!valid_var_name(name, len)) {
			sp_diag_add(c->d, loc, "invalid variable reference '${%s}'",
				    clipn(c, name, len));
			bad = 1;
			continue;
		}
		i = sp__smap_get(&c->var_index, name, len);
		if (i == SIZE_MAX) {
			char *nm = sp__xstrndup(name, len);

			if (c->var_cand == NULL) {
				c->var_cand = sp__xcalloc(c->nvars + SP__NBUILTINS, sizeof *c->var_cand);
				for (size_t j = 0; j < c->nvars; j++)
					c->var_cand[j] = c->vars[j].name;
				for (size_t j = 0; j < SP__NBUILTINS; j++)
					c->var_cand[c->nvars + j] = sp__graph_builtins[j];
			}
			unknown_name(c, loc, "unknown variable", nm, "", c->var_cand,
				     c->nvars + SP__NBUILTINS, "");
			free(nm);
			bad = 1;
		} else if (c->vars[i].value == NULL) {
			sp_diag_add(c->d, loc,
				    "variable '%s' is not set (give it a default under params: or pass --set %s=VALUE)",
				    clip(c, c->vars[i].name), clip(c, c->vars[i].name));
			bad = 1;
		} else {
			const char *at;
			size_t n = stray_ref(c->vars[i].value, &at);
			if (n > 0) {
				sp_diag_add(c->d, loc,
					    "variable '%s' holds '%.*s', which is not expanded (a value "
					    "may use only ${item}, ${stem} and ${index}; let the shell expand "
					    "environment variables, or write '$$' for a literal '$')",
					    clip(c, c->vars[i].name), (int)(n < 64 ? n : 64), at);
				bad = 1;
			}
			add_value(&b, c->vars[i].value, builtin);
		}
	}
	if (bad) {
		free(b.s);
		return NULL;
	}
	if (!*builtin) {
		char *t = sp__sb_take(&b);

		unescape(t);
		return t;
	}
	return sp__sb_take(&b);
}

/* subst_text() of scalar n. */
static char *subst(ctx_t *c, const yaml_node_t *n, int *builtin)
{
	return subst_text(c, sval(n), loc_of(n), builtin);
}

/* The first builtin a text uses, for messages. */
static const char *first_builtin(const char *t)
{
	for (; *t != '\0'; t++) {
		if (t[0] == '$' && t[1] == '$') {
			t++;
			continue;
		}
		for (size_t i = 0; i < SP__NBUILTINS; i++) {
			size_t n = strlen(sp__graph_builtins[i]);

			if (t[0] == '$' && t[1] == '{' && strncmp(t + 2, sp__graph_builtins[i], n) == 0 &&
			    t[2 + n] == '}')
				return sp__graph_builtins[i];
		}
	}
	return "item";
}

/* Checks and stores one parameter value, src, written at loc (problems are
 * reported there).  `what` names the parameter in messages; per_item tells
 * whether builtins are allowed at all (stage parameters) or not (runtime:). */
static void set_param_text(ctx_t *c, sp_gparam_t *gp, const char *src, sp_loc_t loc,
			   const char *what, int per_item)
{
	char msg[256];
	char *text;
	int builtin;

	text = subst_text(c, src, loc, &builtin);
	if (text == NULL)
		return;
	if (builtin && !per_item) {
		sp_diag_add(c->d, loc, "%s cannot use the per-item variable '${%s}'",
			    what, first_builtin(text));
		free(text);
		return;
	}
	if (builtin && gp->spec->type != SP_PT_PATH && gp->spec->type != SP_PT_OUTPUT &&
	    gp->spec->type != SP_PT_STRING) {
		sp_diag_add(c->d, loc,
			    "%s cannot use the per-item variable '${%s}' (only path and string parameters can)",
			    what, first_builtin(text));
		free(text);
		return;
	}
	if (!builtin && sp_param_check(gp->spec, text, msg, sizeof msg) != 0) {
		sp_diag_add(c->d, loc, "%s: %s", what, msg);
		free(text);
		return;
	}
	free(gp->text);
	gp->text = text;
	gp->loc = loc;
}

/* set_param_text() of the value v given in the file, which must be a scalar. */
static void set_param(ctx_t *c, sp_gparam_t *gp, yaml_node_t *v, const char *what,
		      int per_item)
{
	if (v->type != YAML_SCALAR_NODE) {
		sp_diag_add(c->d, loc_of(v), "%s must be a scalar, got %s", what, type_name(v));
		return;
	}
	set_param_text(c, gp, sval(v), loc_of(v), what, per_item);
}

static void fill_defaults(sp_gparam_t *gp, const sp_param_spec_t *specs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		gp[i].spec = &specs[i];
		gp[i].text = specs[i].def != NULL ? sp__xstrdup(specs[i].def) : NULL;
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
		c->vars = sp__xcalloc(map->data.mapping.pairs.top - map->data.mapping.pairs.start,
				      sizeof *c->vars);
		FOR_PAIRS(c, map, p)
		{
			yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
			const char *name = sval(k);
			var_t *var;

			if (sp__graph_is_builtin(name, strlen(name))) {
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
			var->name = sp__xstrdup(name);
			var->loc = loc_of(k);
			sp__smap_add(&c->var_index, var->name, strlen(var->name), c->nvars);
			c->nvars++;
			if (v->type == YAML_SCALAR_NODE) {
				if (!is_null(v))
					var->value = sp__xstrdup(sval(v));
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
					var->value = sp__xstrdup(sval(def));
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
		size_t j = sp__smap_get(&c->var_index, set[i].name, strlen(set[i].name));
		sp_loc_t none = { 0, 0 };

		if (j == SIZE_MAX && sp__graph_is_builtin(set[i].name, strlen(set[i].name))) {
			sp_diag_add(c->d, none,
				    "'%s' is a builtin variable and cannot be given with --set",
				    set[i].name);
			continue;
		}
		if (j == SIZE_MAX) {
			const char **cand = sp__xcalloc(c->nvars, sizeof *cand);

			for (size_t k = 0; k < c->nvars; k++)
				cand[k] = c->vars[k].name;
			unknown_name(c, none, "unknown variable", set[i].name, " given with --set",
				     cand, c->nvars, "");
			free(cand);
			continue;
		}
		free(c->vars[j].value);
		c->vars[j].value = sp__xstrdup(set[i].value != NULL ? set[i].value : "");
	}
	c->g->nvars = c->nvars;
	c->g->var_names = sp__xcalloc(c->nvars, sizeof(char *));
	c->g->var_values = sp__xcalloc(c->nvars, sizeof(char *));
	for (size_t i = 0; i < c->nvars; i++) {
		c->g->var_names[i] = sp__xstrdup(c->vars[i].name);
		c->g->var_values[i] = c->vars[i].value != NULL ? sp__xstrdup(c->vars[i].value) : NULL;
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
	static const char *const keys[] = { "files", "glob", "manifest", "folder" };
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
	check_allowed(c, map, keys, 4, "key", " in 'inputs'");
	FOR_PAIRS(c, map, p)
	{
		yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
		const char *key = sval(k);
		sp_items_kind_t kind;

		if (strcmp(key, "folder") == 0) {
			/* the pattern of the files a folder item stands for */
			char *t = input_path(c, v, key);

			if (t != NULL && strchr(t, '/') != NULL) {
				sp_diag_add(c->d, loc_of(v),
					    "'folder' is a file name pattern such as '*.mrc', not a path");
				free(t);
			} else if (t != NULL) {
				free(g->items_folder);
				g->items_folder = t;
			}
			continue;
		}
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
			g->items_spec = sp__xcalloc(n, sizeof(char *));
			for (; it < v->data.sequence.items.top; it++) {
				char *t = input_path(c, node(c, *it), key);

				if (t != NULL)
					g->items_spec[g->nitems_spec++] = t;
			}
		} else {
			char *t = input_path(c, v, key);

			if (t != NULL) {
				g->items_spec = sp__xcalloc(1, sizeof(char *));
				g->items_spec[g->nitems_spec++] = t;
			}
		}
	}
	if (first == NULL)
		sp_diag_add(c->d, loc_of(map), "'inputs' needs one of 'files', 'glob' or 'manifest'");
}

static void load_runtime(ctx_t *c, yaml_node_t *map)
{
	const char **names = sp__xcalloc(sp_runtime_nparams, sizeof *names);
	char what[160], msg[1024];

	c->g->runtime = sp__xcalloc(sp_runtime_nparams, sizeof *c->g->runtime);
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
				unknown_name(c, loc_of(k), "unknown runtime parameter", sval(k), "",
					     names, sp_runtime_nparams, "");
				continue;
			}
			snprintf(what, sizeof what, "runtime parameter '%s'", names[i]);
			set_param(c, &c->g->runtime[i], node(c, p->value), what, 0);
			/* A scheduler StarPU does not know is an error here, not
			 * StarPU's warning and fallback at run time. */
			if (strcmp(names[i], "scheduler") == 0 && c->g->runtime[i].loc.line != 0 &&
			    c->reg->check_sched != NULL &&
			    c->reg->check_sched(c->g->runtime[i].text, msg, sizeof msg) != 0)
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


static const char *const stage_keys[] = { "uses", "with", "in", "priority", "tile", "where" };

/* An optional integer key of a stage body (priority, tile) into *out. */
static void stage_int_key(ctx_t *c, yaml_node_t *body, const char *key, const char *sn,
			  double min, double max, int *out)
{
	const sp_param_spec_t spec = { key, SP_PT_INT, "0", min, max, NULL, NULL, 0 };
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

/* The kind of the stage that `uses:` names, and its parameters' defaults; NULL when unknown (said). */
static const sp_stage_kind_t *stage_kind(ctx_t *c, sp_gstage_t *st, yaml_node_t *uses)
{
	const sp_stage_kind_t *kind;

	kind = sp_stage_find(c->reg, sval(uses));
	if (kind == NULL) {
		size_t nk = c->reg->nkinds;
		const sp_stage_kind_t *const *kinds = c->reg->kinds;
		const char **names = sp__xcalloc(nk, sizeof *names);

		for (size_t i = 0; i < nk; i++)
			names[i] = kinds[i]->name;
		unknown_name(c, loc_of(uses), "unknown stage kind", sval(uses), "", names, nk,
			     " (run 'starpipe list' to see them)");
		free(names);
		return NULL;
	}
	st->kind = kind;
	st->params = sp__xcalloc(kind->nparams, sizeof *st->params);
	fill_defaults(st->params, kind->params, kind->nparams);
	st->inputs = sp__xcalloc(kind->ninputs, sizeof *st->inputs);
	for (size_t i = 0; i < kind->ninputs; i++)
		st->inputs[i].stage = NOT_CONNECTED;
	return kind;
}

/* The stage's `where:`. */
static void stage_where(ctx_t *c, sp_gstage_t *st, yaml_node_t *body, const char *sn)
{
	const sp_stage_kind_t *kind = st->kind;
	yaml_node_t *where = map_get(c, body, "where");

	if (where != NULL) {
		static const sp_param_spec_t spec = { "where", SP_PT_ENUM, "any", 0, -1,
						      "any|cpu|cuda", NULL, 0 };
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
}

/* The stage's `with:` parameters; marks them in given. */
static void stage_with(ctx_t *c, sp_gstage_t *st, yaml_node_t *body, const char *sn,
		       unsigned char *given)
{
	const sp_stage_kind_t *kind = st->kind;
	char what[SP__NAME_MAX + 256];
	yaml_node_t *with = map_get(c, body, "with");

	if (with != NULL && !is_null(with) && with->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, loc_of(with), "'with' of stage '%s' must be a mapping, got %s",
			    sn, type_name(with));
		with = NULL;
	}
	if (with != NULL && with->type == YAML_MAPPING_NODE) {
		const char **names = sp__xcalloc(kind->nparams, sizeof *names);

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
				char of[160], none[160];

				snprintf(of, sizeof of, " for '%s'", kind->name);
				snprintf(none, sizeof none, " ('%s' takes none)", kind->name);
				unknown_name(c, loc_of(k), "unknown parameter", sval(k),
					     kind->nparams != 0 ? of : "", names, kind->nparams,
					     kind->nparams != 0 ? "" : none);
				continue;
			}
			given[i] = 1;
			snprintf(what, sizeof what, "parameter '%s' of '%s'", names[i], kind->name);
			set_param(c, &st->params[i], node(c, p->value), what, 1);
		}
		free(names);
	}
}

/* The parameters neither `with:` nor given take from the graph's variables; marks them in given. */
static void params_from_vars(ctx_t *c, sp_gstage_t *st, const char *sn, unsigned char *given)
{
	const sp_stage_kind_t *kind = st->kind;
	char what[SP__NAME_MAX + 256], ref[128];

	/* A parameter that `with:` leaves out takes the graph's variable of the
	 * same name, as if the stage said `NAME: "${NAME}"`, before the kind's
	 * default: a pipeline's knobs are declared once, under params:, and
	 * --set reaches the stages without a line per parameter to forward
	 * them.  An unset variable is then an error, as any use of one. */
	for (size_t i = 0; i < kind->nparams; i++) {
		const char *pn = kind->params[i].name;
		size_t v;

		if (given[i])
			continue;
		v = sp__smap_get(&c->var_index, pn, strlen(pn));
		if (v == SIZE_MAX)
			continue;
		given[i] = 1;
		if (c->vars[v].value == NULL) {
			sp_diag_add(c->d, c->vars[v].loc,
				    "variable '%s' is not set, and stage '%s' (%s) takes its parameter '%s' from it "
				    "(give it a default, pass --set %s=VALUE, or set '%s' in the stage's 'with:')",
				    pn, sn, kind->name, pn, pn, pn);
			continue;
		}
		assert(strlen(pn) + 4 <= sizeof ref); /* kinds' names are short */
		snprintf(ref, sizeof ref, "${%s}", pn);
		snprintf(what, sizeof what, "parameter '%s' of '%s' (stage '%s', from variable '%s')",
			 pn, kind->name, sn, pn);
		set_param_text(c, &st->params[i], ref, c->vars[v].loc, what, 1);
	}
}

/* Says each required parameter not given. */
static void check_required(ctx_t *c, const sp_gstage_t *st, const char *sn,
			   const unsigned char *given)
{
	const sp_stage_kind_t *kind = st->kind;

	for (size_t i = 0; i < kind->nparams; i++)
		if (kind->params[i].def == NULL && !given[i])
			sp_diag_add(c->d, st->loc,
				    "stage '%s' (%s) is missing required parameter '%s'",
				    sn, kind->name, kind->params[i].name);
}

/* The stage's kind, params, priority, tile and where. */
static void load_stage_body(ctx_t *c, sp_gstage_t *st, tstage_t *ts)
{
	char sname[SP__NAME_MAX + 4];
	yaml_node_t *body = ts->val, *uses;
	const sp_stage_kind_t *kind;
	char buf[160];
	unsigned char *given; /* by parameter: set by `with:` or a variable */
	const char *sn = sp__diag_clip(sname, st->name);

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
	kind = stage_kind(c, st, uses);
	if (kind == NULL)
		return;
	stage_int_key(c, body, "priority", sn, -1000000, 1000000, &st->priority);
	stage_int_key(c, body, "tile", sn, 0, 100000000, &st->tile);
	if (st->tile != 0 && kind->tile == NULL) {
		sp_diag_add(c->d, loc_of(map_get(c, body, "tile")),
			    "stage '%s' cannot tile: '%s' runs as one task per item", sn, kind->name);
		st->tile = 0;
	}
	stage_where(c, st, body, sn);
	given = sp__xcalloc(kind->nparams + 1, 1);
	stage_with(c, st, body, sn, given);
	params_from_vars(c, st, sn, given);
	check_required(c, st, sn, given);
	free(given);
}

/* One stage's `in:` being read: the stages, and the names for suggestions. */
typedef struct {
	ctx_t *c;
	sp_gstage_t *all, *st;
	size_t n, self;
	const smap_t *names;
	const char ***cand; /* made on first need */
	const char *sn;
	const char **ports;
} in_ctx_t;

/* The input port key k names; SIZE_MAX when none (said). */
static size_t input_port(in_ctx_t *ic, yaml_node_t *k)
{
	const sp_stage_kind_t *kind = ic->st->kind;
	size_t i;

	for (i = 0; i < kind->ninputs; i++)
		if (strcmp(sval(k), ic->ports[i]) == 0)
			return i;
	char of[160], none[160];

	snprintf(of, sizeof of, " of '%s'", kind->name);
	snprintf(none, sizeof none, " ('%s' has no inputs)", kind->name);
	unknown_name(ic->c, loc_of(k), "unknown input port", sval(k), kind->ninputs != 0 ? of : "",
		     ic->ports, kind->ninputs, kind->ninputs != 0 ? "" : none);
	return SIZE_MAX;
}

/* The stage reference v names before its dot; SIZE_MAX when none or this one (said). */
static size_t ref_stage(in_ctx_t *ic, yaml_node_t *v, const char *ref, const char *dot)
{
	ctx_t *c = ic->c;
	size_t j = sp__smap_get(ic->names, ref, (size_t)(dot - ref));

	if (j == SIZE_MAX) {
		char *rs = sp__xstrndup(ref, (size_t)(dot - ref));

		if (*ic->cand == NULL) {
			*ic->cand = sp__xcalloc(ic->n, sizeof **ic->cand);
			for (size_t q = 0; q < ic->n; q++)
				(*ic->cand)[q] = ic->all[q].name;
		}
		unknown_name(c, loc_of(v), "reference to unknown stage", rs, "", *ic->cand, ic->n, "");
		free(rs);
		return SIZE_MAX;
	}
	if (j == ic->self) {
		sp_diag_add(c->d, loc_of(v), "stage '%s' is connected to itself", ic->sn);
		return SIZE_MAX;
	}
	return j;
}

/* The output of stage j (kind pk) named after the dot; SIZE_MAX when none (said). */
static size_t ref_output(in_ctx_t *ic, yaml_node_t *v, size_t j, const sp_stage_kind_t *pk,
			 const char *dot)
{
	ctx_t *c = ic->c;
	size_t o;

	for (o = 0; o < pk->noutputs; o++)
		if (strcmp(pk->outputs[o].name, dot + 1) == 0)
			return o;
	const char **outs = sp__xcalloc(pk->noutputs, sizeof *outs);

	for (size_t q = 0; q < pk->noutputs; q++)
		outs[q] = pk->outputs[q].name;
	if (pk->noutputs == 0) {
		sp_diag_add(c->d, loc_of(v), "stage '%s' (%s) has no outputs", clip(c, ic->all[j].name),
			    pk->name);
	} else {
		char lead[192];

		snprintf(lead, sizeof lead, "stage '%s' (%s) has no output", clip(c, ic->all[j].name),
			 pk->name);
		unknown_name(c, loc_of(v), lead, dot + 1, "", outs, pk->noutputs, "");
	}
	free(outs);
	return SIZE_MAX;
}

/* One `PORT: stage.port` of the stage's `in:`. */
static void connect_input(in_ctx_t *ic, yaml_node_t *k, yaml_node_t *v)
{
	ctx_t *c = ic->c;
	sp_gstage_t *st = ic->st;
	const sp_stage_kind_t *kind = st->kind, *pk;
	const char *ref, *dot;
	size_t i, j, o;

	if ((i = input_port(ic, k)) == SIZE_MAX)
		return;
	/* Mark it as handled even when the reference is bad, so
	 * that it is not also reported as not connected. */
	st->inputs[i].stage = NOT_CONNECTED - 1;
	if (v->type != YAML_SCALAR_NODE) {
		sp_diag_add(c->d, loc_of(v),
			    "input '%s' of stage '%s' must be a reference 'stage.port', got %s",
			    ic->ports[i], ic->sn, type_name(v));
		return;
	}
	ref = sval(v);
	dot = strchr(ref, '.');
	if (dot == NULL || dot == ref || dot[1] == '\0' || strchr(dot + 1, '.') != NULL) {
		sp_diag_add(c->d, loc_of(v), "malformed reference '%s' (expected 'stage.port')",
			    clip(c, ref));
		return;
	}
	if ((j = ref_stage(ic, v, ref, dot)) == SIZE_MAX)
		return;
	pk = ic->all[j].kind;
	if (pk == NULL)
		return; /* its kind was already reported */
	if ((o = ref_output(ic, v, j, pk, dot)) == SIZE_MAX)
		return;
	if (strcmp(pk->outputs[o].type, kind->inputs[i].type) != 0) {
		sp_diag_add(c->d, loc_of(v), "input '%s' of stage '%s' has type '%s' but '%s' is '%s'",
			    ic->ports[i], ic->sn, kind->inputs[i].type, clip(c, ref),
			    pk->outputs[o].type);
		/* Keep the edge: a cycle through it is worth
		 * reporting too. */
	}
	st->inputs[i].stage = j;
	st->inputs[i].port = o;
	st->inputs[i].loc = loc_of(v);
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
	in_ctx_t ic = { c, all, st, n, self, names, cand, sp__diag_clip(sname, st->name), NULL };

	if (kind == NULL)
		return;
	if (in != NULL && !is_null(in) && in->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, loc_of(in), "'in' of stage '%s' must be a mapping, got %s",
			    ic.sn, type_name(in));
		return;
	}
	if (in != NULL && in->type == YAML_MAPPING_NODE) {
		ic.ports = sp__xcalloc(kind->ninputs, sizeof *ic.ports);
		for (size_t i = 0; i < kind->ninputs; i++)
			ic.ports[i] = kind->inputs[i].name;
		FOR_PAIRS(c, in, p)
			connect_input(&ic, node(c, p->key), node(c, p->value));
		free(ic.ports);
	}
	for (size_t i = 0; i < kind->ninputs; i++) {
		if (st->inputs[i].stage == NOT_CONNECTED)
			sp_diag_add(c->d, st->loc, "input '%s' of stage '%s' is not connected",
				    kind->inputs[i].name, ic.sn);
		else if (st->inputs[i].stage == NOT_CONNECTED - 1)
			st->inputs[i].stage = NOT_CONNECTED;
	}
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
	ts = sp__xcalloc((size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start),
			 sizeof *ts);
	all = sp__xcalloc((size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start),
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
		all[n].name = sp__xstrdup(sval(k));
		all[n].loc = loc_of(k);
		sp__smap_add(&names, all[n].name, strlen(all[n].name), n);
		n++;
	}
	if (n == 0)
		sp_diag_add(c->d, loc_of(map), "'stages' has no stages");
	for (size_t i = 0; i < n; i++)
		load_stage_body(c, &all[i], &ts[i]);
	for (size_t i = 0; i < n; i++)
		load_stage_inputs(c, all, ts, n, i, &names, &cand);
	sp__smap_free(&names);
	free(cand);

	order = sp__xcalloc(n, sizeof *order);
	rank = sp__xcalloc(n, sizeof *rank);
	norder = sp__graph_toposort(c->d, all, n, order);
	if (norder == n) {
		g->stages = sp__xcalloc(n, sizeof *g->stages);
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
			sp__graph_free_stage(&all[i]);
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
		g->pipeline = sp__xstrdup(sval(v));
	v = map_get(c, root, "description");
	if (v != NULL && v->type != YAML_SCALAR_NODE)
		sp_diag_add(c->d, loc_of(v), "'description' must be a string, got %s",
			    type_name(v));
	else if (v != NULL)
		g->description = sp__xstrdup(sval(v));

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
		     size_t nvars, const sp_registry_t *reg, sp_graph_t **out, sp_diag_t *diag)
{
	yaml_parser_t p;
	yaml_document_t doc;
	yaml_node_t *root;
	ctx_t c = { 0 };
	size_t before = diag->n;

	*out = NULL;
	free(diag->source);
	diag->source = sp__xstrndup(text, len);
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
	c.reg = reg;
	c.g = sp__xcalloc(1, sizeof *c.g);
	c.g->file = sp__xstrdup(path);
	c.g->reg = reg;
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
		c.skip = sp__xcalloc((size_t)(doc.nodes.top - doc.nodes.start) + 1, 1);
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
	sp__smap_free(&c.var_index);
	yaml_document_delete(&doc);
	if (diag->n != before) {
		sp_graph_free(&c.g);
		return SP_EGRAPH;
	}
	/* Every value checked: the typed parameters, parsed once. */
	for (size_t s = 0; s < c.g->nstages; s++) {
		sp_gstage_t *st = &c.g->stages[s];
		const char *texts[64];
		if (st->kind->params_size == 0)
			continue;
		assert(st->kind->nparams <= sizeof texts / sizeof texts[0]);
		for (size_t i = 0; i < st->kind->nparams; i++)
			texts[i] = st->params[i].text;
		st->typed = sp__xcalloc(1, st->kind->params_size);
		sp_params_fill(st->kind->params, st->kind->nparams, texts, st->typed);
	}
	*out = c.g;
	return 0;
}

int sp_graph_load_string(const char *path, const char *text, const sp_var_t *vars,
			 size_t nvars, const sp_registry_t *reg, sp_graph_t **out, sp_diag_t *diag)
{
	return load_text(path, text, strlen(text), vars, nvars, reg, out, diag);
}
int sp_graph_load(const char *path, const sp_var_t *vars, size_t nvars, const sp_registry_t *reg,
		  sp_graph_t **out, sp_diag_t *diag)
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
		sp_diag_add(diag, none, "cannot open: %s", sp__open_reason(path, &oerr));
		return oerr.code == SP_ENOENT ? SP_ENOENT : SP_EIO;
	}
	/* A graph file is a page or two of text; a huge one (a data file given
	 * by mistake) takes some 30 times its size while it is parsed (a 200 MB
	 * file aborted under ulimit -v 1G): refused past SP_GRAPH_MAX_BYTES,
	 * which still takes 50,000 stages (graph-validate.test). */
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
		if (b.len + n > SP_GRAPH_MAX_BYTES) {
			fclose(f);
			free(b.s);
			sp_diag_add(diag, none, "the file is over %d MiB; a graph file is a few kB of "
						"YAML (is this the right file?)", SP_GRAPH_MAX_BYTES >> 20);
			return SP_EIO;
		}
		sp__sb_addn(&b, chunk, n);
	}
	if (ferror(f)) {
		int e = errno;

		fclose(f);
		free(b.s);
		sp_diag_add(diag, none, "cannot read: %s", strerror(e));
		return SP_EIO;
	}
	fclose(f);
	rc = load_text(path, b.s != NULL ? b.s : "", b.len, vars, nvars, reg, out, diag);
	free(b.s);
	return rc;
}
