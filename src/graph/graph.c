/* Pipeline graph files: YAML loading and validation into an sp_graph_t. */
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
 * The files of the graph: graph.c (this one: the passes, the document
 * walk), graph_params.c and graph_stages.c (its sections; graph_load.h),
 * graph_yaml.c (the YAML helpers they all use), diag.c (diagnostics
 * and "did you mean"), graph_topo.c (stage order, cycles), graph_items.c
 * (work items, ${item} expansion), graph_model.c (accessors, DOT, freeing),
 * graph_util.c (allocation, strings, hash map); graph_int.h declares what
 * they share.
 */

#define SP__MAX_DEPTH 64
#define SP__SUGGEST_BUDGET 100000000LL /* "did you mean" work per file */

/* Pass 2: duplicate and non-scalar keys in every mapping (a hash of each
 * mapping's keys), and NUL characters in every string: YAML's "\0" escape
 * would cut a name or a path silently at the first one. */
static void check_tree(ctx_t *c, yaml_node_t *n, int depth)
{
	if (n == NULL || depth > SP__MAX_DEPTH + 1)
		return;
	if (n->type == YAML_SCALAR_NODE) {
		if (memchr(n->data.scalar.value, '\0', n->data.scalar.length) != NULL)
			sp_diag_add(c->d, sp__loc_of(n),
				    "string '%s' holds a NUL character ('\\0'), which no name, path or value may",
				    sp__clip(c, sp__sval(n)));
	} else if (n->type == YAML_SEQUENCE_NODE) {
		for (yaml_node_item_t *it = n->data.sequence.items.start;
		     it < n->data.sequence.items.top; it++)
			check_tree(c, sp__node(c, *it), depth + 1);
	} else if (n->type == YAML_MAPPING_NODE) {
		yaml_node_pair_t *s = n->data.mapping.pairs.start;
		smap_t seen = { 0 };

		for (yaml_node_pair_t *p = s; p < n->data.mapping.pairs.top; p++) {
			yaml_node_t *k = sp__node(c, p->key);

			if (k->type != YAML_SCALAR_NODE) {
				sp_diag_add(c->d, sp__loc_of(k), "mapping keys must be scalars, got %s",
					    sp__type_name(k));
				c->skip[p->key] = 1;
			} else {
				size_t first = sp__smap_add(&seen, (const char *)k->data.scalar.value,
							    k->data.scalar.length, (size_t)(p - s));

				if (first != SIZE_MAX) {
					sp_loc_t l0 = sp__loc_of(sp__node(c, s[first].key));

					sp_diag_add(c->d, sp__loc_of(k),
						    "duplicate key '%s' (first at %d:%d)",
						    sp__clip(c, sp__sval(k)), l0.line, l0.col);
					c->skip[p->key] = 1;
				}
			}
			check_tree(c, sp__node(c, p->key), depth + 1);
			check_tree(c, sp__node(c, p->value), depth + 1);
		}
		sp__smap_free(&seen);
	}
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
	if (v->type != YAML_SCALAR_NODE || strcmp(sp__sval(v), "1") != 0)
		sp_diag_add(c->d, sp__loc_of(v),
			    "unsupported format version '%s' (this starpipe reads 'starpipe: 1')",
			    v->type == YAML_SCALAR_NODE ? sp__clip(c, sp__sval(v)) : sp__type_name(v));
}

static void load_root(ctx_t *c, yaml_node_t *root, const sp_var_t *set, size_t nset)
{
	static const char *const keys[] = { "starpipe", "pipeline", "description", "params",
					    "inputs",   "stages",   "runtime" };
	sp_graph_t *g = c->g;
	yaml_node_t *v;

	sp__check_allowed(c, root, keys, sizeof keys / sizeof keys[0], "top-level key", "");
	v = sp__map_get(c, root, "starpipe");
	if (v == NULL)
		sp_diag_add(c->d, sp__loc_of(root), "missing 'starpipe:' (the format version, 1)");
	else
		check_version(c, v);
	v = sp__map_get(c, root, "pipeline");
	if (v == NULL)
		sp_diag_add(c->d, sp__loc_of(root), "missing 'pipeline:' (the pipeline's name)");
	else if (v->type != YAML_SCALAR_NODE || !sp__valid_name(sp__sval(v), "_.-"))
		sp_diag_add(c->d, sp__loc_of(v),
			    "invalid pipeline name '%s' (use letters, digits, '_', '.' and '-')",
			    v->type == YAML_SCALAR_NODE ? sp__clip(c, sp__sval(v)) : sp__type_name(v));
	else
		g->pipeline = sp__xstrdup(sp__sval(v));
	v = sp__map_get(c, root, "description");
	if (v != NULL && v->type != YAML_SCALAR_NODE)
		sp_diag_add(c->d, sp__loc_of(v), "'description' must be a string, got %s",
			    sp__type_name(v));
	else if (v != NULL)
		g->description = sp__xstrdup(sp__sval(v));

	sp__load_params(c, sp__map_get(c, root, "params"), set, nset);
	v = sp__map_get(c, root, "inputs");
	if (v != NULL)
		sp__load_inputs(c, v);
	v = sp__map_get(c, root, "stages");
	if (v == NULL)
		sp_diag_add(c->d, sp__loc_of(root), "missing 'stages:' (the pipeline's stages)");
	else
		sp__load_stages(c, v);
	sp__load_runtime(c, sp__map_get(c, root, "runtime"));
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
	c.g->text = sp__xstrndup(text, len);
	root = yaml_document_get_root_node(&doc);
	if (root == NULL || sp__is_null(root)) {
		sp_loc_t l = { 1, 1 };

		if (root != NULL)
			l = sp__loc_of(root);
		sp_diag_add(diag, l,
			    "empty graph file (expected a mapping with 'starpipe:', 'pipeline:' and 'stages:')");
	} else if (root->type != YAML_MAPPING_NODE) {
		sp_diag_add(diag, sp__loc_of(root),
			    "the top level must be a mapping with 'starpipe:', 'pipeline:' and 'stages:', got %s",
			    sp__type_name(root));
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

