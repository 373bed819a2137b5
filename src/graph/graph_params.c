/* Pipeline graph files: ${var} substitution and the params:, inputs: and runtime: sections. */
#include "graph.h"
#include "graph_int.h"
#include "graph_load.h"
#include "error.h"
#include "fsutil.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Reports name[0..len) of a `${...}` that is neither a builtin nor a
 * variable's name; 1 if it did. */
static int bad_reference(ctx_t *c, sp_loc_t loc, const char *name, size_t len)
{
	if (len >= 7 && strncmp(name, "header.", 7) == 0)
		sp_diag_add(c->d, loc,
			    "invalid header reference '${%s}' (write ${header.KEY}, or "
			    "${header.KEY:08d} for an integer zero-padded to 8 digits)",
			    sp__clipn(c, name, len));
	else if (!valid_var_name(name, len))
		sp_diag_add(c->d, loc, "invalid variable reference '${%s}'", sp__clipn(c, name, len));
	else
		return 0;
	return 1;
}

/* Resolves the global ${var}s of src, a scalar of the file at loc (problems
 * are reported there).  Returns the text (malloc'd), or NULL after
 * reporting a problem.  *builtin tells whether the result still holds a
 * per-item builtin; then a literal '$' stays written `$$`, for
 * sp_graph_expand_item(); otherwise the text is plain. */
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
				    sp__clip(c, src));
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
		if (bad_reference(c, loc, name, len)) {
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
			sp__unknown_name(c, loc, "unknown variable", nm, "", c->var_cand,
				     c->nvars + SP__NBUILTINS, "");
			free(nm);
			bad = 1;
		} else if (c->vars[i].value == NULL) {
			sp_diag_add(c->d, loc,
				    "variable '%s' is not set (give it a default under params: or pass --set %s=VALUE)",
				    sp__clip(c, c->vars[i].name), sp__clip(c, c->vars[i].name));
			bad = 1;
		} else {
			const char *at;
			size_t n = stray_ref(c->vars[i].value, &at);
			if (n > 0) {
				sp_diag_add(c->d, loc,
					    "variable '%s' holds '%.*s', which is not expanded (a value "
					    "may use only ${item}, ${stem}, ${index}, ${item.dir} and ${header.KEY}; let the shell expand "
					    "environment variables, or write '$$' for a literal '$')",
					    sp__clip(c, c->vars[i].name), (int)(n < 64 ? n : 64), at);
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
	return subst_text(c, sp__sval(n), sp__loc_of(n), builtin);
}

/* The first builtin a text uses, for messages (malloc'd: "item",
 * "header.CAMERA", ...). */
static char *first_builtin(const char *t)
{
	for (; *t != '\0'; t++) {
		if (t[0] == '$' && t[1] == '$') {
			t++;
			continue;
		}
		const char *end = t[0] == '$' && t[1] == '{' ? strchr(t, '}') : NULL;
		if (end != NULL && sp__graph_is_builtin(t + 2, (size_t)(end - t - 2)))
			return sp__xstrndup(t + 2, (size_t)(end - t - 2));
	}
	return sp__xstrdup("item");
}

/* Checks and stores one parameter value, src, written at loc (problems are
 * reported there).  `what` names the parameter in messages; per_item tells
 * whether builtins are allowed at all (stage parameters) or not (runtime:). */
void sp__set_param_text(ctx_t *c, sp_gparam_t *gp, const char *src, sp_loc_t loc,
			   const char *what, int per_item)
{
	char msg[256];
	char *text;
	int builtin;

	text = subst_text(c, src, loc, &builtin);
	if (text == NULL)
		return;
	if (builtin && !per_item) {
		char *fb = first_builtin(text);
		sp_diag_add(c->d, loc, "%s cannot use the per-item variable '${%s}'", what, fb);
		free(fb);
		free(text);
		return;
	}
	if (builtin && gp->spec->type != SP_PT_PATH && gp->spec->type != SP_PT_OUTPUT &&
	    gp->spec->type != SP_PT_STRING) {
		char *fb = first_builtin(text);
		sp_diag_add(c->d, loc,
			    "%s cannot use the per-item variable '${%s}' (only path and string parameters can)",
			    what, fb);
		free(fb);
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

/* sp__set_param_text() of the value v given in the file, which must be a scalar. */
void sp__set_param(ctx_t *c, sp_gparam_t *gp, yaml_node_t *v, const char *what,
		      int per_item)
{
	if (v->type != YAML_SCALAR_NODE) {
		sp_diag_add(c->d, sp__loc_of(v), "%s must be a scalar, got %s", what, sp__type_name(v));
		return;
	}
	sp__set_param_text(c, gp, sp__sval(v), sp__loc_of(v), what, per_item);
}

void sp__fill_defaults(sp_gparam_t *gp, const sp_param_spec_t *specs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		gp[i].spec = &specs[i];
		gp[i].text = specs[i].def != NULL ? sp__xstrdup(specs[i].def) : NULL;
		gp[i].loc.line = gp[i].loc.col = 0;
	}
}

/* --- sections ------------------------------------------------------------ */

int sp__valid_name(const char *s, const char *extra)
{
	if (*s == '\0')
		return 0;
	for (; *s != '\0'; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr(extra, *s) != NULL))
			return 0;
	return 1;
}

void sp__load_params(ctx_t *c, yaml_node_t *map, const sp_var_t *set, size_t nset)
{
	static const char *const keys[] = { "default", "help" };
	char buf[128];

	if (map != NULL && !sp__is_null(map) && map->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, sp__loc_of(map), "'params' must be a mapping, got %s",
			    sp__type_name(map));
		map = NULL;
	}
	if (map != NULL && map->type == YAML_MAPPING_NODE) {
		c->vars = sp__xcalloc(map->data.mapping.pairs.top - map->data.mapping.pairs.start,
				      sizeof *c->vars);
		FOR_PAIRS(c, map, p)
		{
			yaml_node_t *k = sp__node(c, p->key), *v = sp__node(c, p->value);
			const char *name = sp__sval(k);
			var_t *var;

			if (sp__graph_is_builtin(name, strlen(name))) {
				sp_diag_add(c->d, sp__loc_of(k),
					    "'%s' is a builtin variable and cannot be declared",
					    sp__clip(c, name));
				continue;
			}
			if (!valid_var_name(name, strlen(name))) {
				sp_diag_add(c->d, sp__loc_of(k),
					    "invalid variable name '%s' (use letters, digits and '_')",
					    sp__clip(c, name));
				continue;
			}
			var = &c->vars[c->nvars];
			var->name = sp__xstrdup(name);
			var->loc = sp__loc_of(k);
			sp__smap_add(&c->var_index, var->name, strlen(var->name), c->nvars);
			c->nvars++;
			if (v->type == YAML_SCALAR_NODE) {
				if (!sp__is_null(v))
					var->value = sp__xstrdup(sp__sval(v));
			} else if (v->type == YAML_MAPPING_NODE) {
				yaml_node_t *def = sp__map_get(c, v, "default");
				yaml_node_t *help = sp__map_get(c, v, "help");

				snprintf(buf, sizeof buf, " of variable '%s'", sp__clip(c, name));
				sp__check_allowed(c, v, keys, 2, "key", buf);
				if (def != NULL && def->type != YAML_SCALAR_NODE)
					sp_diag_add(c->d, sp__loc_of(def),
						    "default of variable '%s' must be a scalar, got %s",
						    sp__clip(c, name), sp__type_name(def));
				else if (def != NULL && !sp__is_null(def))
					var->value = sp__xstrdup(sp__sval(def));
				if (help != NULL && help->type != YAML_SCALAR_NODE)
					sp_diag_add(c->d, sp__loc_of(help),
						    "help of variable '%s' must be a scalar, got %s",
						    sp__clip(c, name), sp__type_name(help));
			} else {
				sp_diag_add(c->d, sp__loc_of(v),
					    "variable '%s' must be a scalar (its default) or a mapping with 'default:' and 'help:', got %s",
					    sp__clip(c, name), sp__type_name(v));
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
			sp__unknown_name(c, none, "unknown variable", set[i].name, " given with --set",
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
		sp_diag_add(c->d, sp__loc_of(v), "'%s' must be a path, got %s", key, sp__type_name(v));
		return NULL;
	}
	t = subst(c, v, &builtin);
	if (t != NULL && builtin) {
		char *fb = first_builtin(t);
		sp_diag_add(c->d, sp__loc_of(v), "'inputs' cannot use the per-item variable '${%s}'",
			    fb);
		free(fb);
		free(t);
		return NULL;
	}
	if (t != NULL && t[0] == '\0') {
		sp_diag_add(c->d, sp__loc_of(v), "'%s' is empty", key);
		free(t);
		return NULL;
	}
	return t;
}

void sp__load_inputs(ctx_t *c, yaml_node_t *map)
{
	static const char *const keys[] = { "files", "glob", "manifest", "folder" };
	sp_graph_t *g = c->g;
	yaml_node_t *first = NULL;

	if (sp__is_null(map))
		return;
	if (map->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, sp__loc_of(map),
			    "'inputs' must be a mapping with one of 'files', 'glob' or 'manifest', got %s",
			    sp__type_name(map));
		return;
	}
	sp__check_allowed(c, map, keys, 4, "key", " in 'inputs'");
	FOR_PAIRS(c, map, p)
	{
		yaml_node_t *k = sp__node(c, p->key), *v = sp__node(c, p->value);
		const char *key = sp__sval(k);
		sp_items_kind_t kind;

		if (strcmp(key, "folder") == 0) {
			/* the pattern of the files a folder item stands for */
			char *t = input_path(c, v, key);

			if (t != NULL && strchr(t, '/') != NULL) {
				sp_diag_add(c->d, sp__loc_of(v),
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
			sp_loc_t l0 = sp__loc_of(first);

			sp_diag_add(c->d, sp__loc_of(k),
				    "'inputs' takes only one of 'files', 'glob' and 'manifest' ('%s' given at %d:%d)",
				    sp__sval(first), l0.line, l0.col);
			continue;
		}
		first = k;
		g->items_kind = kind;
		g->items_loc = sp__loc_of(v);
		if (kind == SP_ITEMS_FILES && v->type == YAML_SEQUENCE_NODE) {
			yaml_node_item_t *it = v->data.sequence.items.start;
			size_t n = (size_t)(v->data.sequence.items.top - it);

			if (n == 0)
				sp_diag_add(c->d, sp__loc_of(v), "'files' is empty");
			g->items_spec = sp__xcalloc(n, sizeof(char *));
			for (; it < v->data.sequence.items.top; it++) {
				char *t = input_path(c, sp__node(c, *it), key);

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
		sp_diag_add(c->d, sp__loc_of(map), "'inputs' needs one of 'files', 'glob' or 'manifest'");
}

void sp__load_runtime(ctx_t *c, yaml_node_t *map)
{
	const char **names = sp__xcalloc(sp_runtime_nparams, sizeof *names);
	char what[160], msg[1024];

	c->g->runtime = sp__xcalloc(sp_runtime_nparams, sizeof *c->g->runtime);
	sp__fill_defaults(c->g->runtime, sp_runtime_params, sp_runtime_nparams);
	for (size_t i = 0; i < sp_runtime_nparams; i++)
		names[i] = sp_runtime_params[i].name;
	if (map != NULL && !sp__is_null(map) && map->type != YAML_MAPPING_NODE)
		sp_diag_add(c->d, sp__loc_of(map), "'runtime' must be a mapping, got %s",
			    sp__type_name(map));
	else if (map != NULL && map->type == YAML_MAPPING_NODE) {
		FOR_PAIRS(c, map, p)
		{
			yaml_node_t *k = sp__node(c, p->key);
			size_t i;

			for (i = 0; i < sp_runtime_nparams; i++)
				if (strcmp(sp__sval(k), names[i]) == 0)
					break;
			if (i == sp_runtime_nparams) {
				sp__unknown_name(c, sp__loc_of(k), "unknown runtime parameter", sp__sval(k), "",
					     names, sp_runtime_nparams, "");
				continue;
			}
			snprintf(what, sizeof what, "runtime parameter '%s'", names[i]);
			sp__set_param(c, &c->g->runtime[i], sp__node(c, p->value), what, 0);
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

