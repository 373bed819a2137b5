/* The graph loader's YAML helpers (graph_load.h): names cut for messages,
 * node lookups, mapping access with pass 2's duplicates skipped, and the
 * "unknown key" diagnostic with its suggestions.  Below the passes
 * (graph.c) and the sections (graph_params.c, graph_stages.c), which all
 * use them. */
#include "graph.h"
#include "graph_int.h"
#include "graph_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* s cut for a message (see sp__diag_clipn); valid until four more calls. */
const char *sp__clipn(ctx_t *c, const char *s, size_t n)
{
	return sp__diag_clipn(c->clip[c->nclip++ % 4], s, n);
}

const char *sp__clip(ctx_t *c, const char *s)
{
	return sp__diag_clip(c->clip[c->nclip++ % 4], s);
}

sp_loc_t sp__loc_of(const yaml_node_t *n)
{
	sp_loc_t l = { (int)n->start_mark.line + 1, (int)n->start_mark.column + 1 };
	return l;
}

yaml_node_t *sp__node(ctx_t *c, int i)
{
	return yaml_document_get_node(c->doc, i);
}

const char *sp__sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

const char *sp__type_name(const yaml_node_t *n)
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
int sp__is_null(const yaml_node_t *n)
{
	return n->type == YAML_SCALAR_NODE &&
	       n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
	       (strcmp(sp__sval(n), "") == 0 || strcmp(sp__sval(n), "~") == 0 ||
		strcmp(sp__sval(n), "null") == 0);
}

/* Whether pass 3 should ignore a pair: a non-scalar key, or a key seen
 * earlier in its mapping (pass 2 marked those). */
int sp__pair_skip(ctx_t *c, const yaml_node_t *map, const yaml_node_pair_t *p)
{
	(void)map;
	return sp__node(c, p->key)->type != YAML_SCALAR_NODE || c->skip[p->key];
}

/* The value of `key` in map, or NULL. */
yaml_node_t *sp__map_get(ctx_t *c, yaml_node_t *map, const char *key)
{
	FOR_PAIRS(c, map, p)
	{
		if (strcmp(sp__sval(sp__node(c, p->key)), key) == 0)
			return sp__node(c, p->value);
	}
	return NULL;
}

/* Reports "LEAD 'WORD'TAIL" at loc, word being a name not among the n
 * candidates, followed by " (did you mean 'X'?)" when one of them is close
 * to it, else by hint ("" for nothing more).  Every "unknown name" message
 * of the loader is made here. */
void sp__unknown_name(ctx_t *c, sp_loc_t loc, const char *lead, const char *word,
			 const char *tail, const char *const *cand, size_t n, const char *hint)
{
	char buf[128];

	sp__diag_dym(&c->budget, buf, sizeof buf, word, cand, n);
	sp_diag_add(c->d, loc, "%s '%s'%s%s", lead, sp__clip(c, word), tail,
		    buf[0] != '\0' ? buf : hint);
}

/* Reports keys of map not in `allowed` (what: "top-level key", ...). */
void sp__check_allowed(ctx_t *c, yaml_node_t *map, const char *const *allowed,
			  size_t n, const char *what, const char *where)
{
	char lead[64];

	snprintf(lead, sizeof lead, "unknown %s", what);
	FOR_PAIRS(c, map, p)
	{
		yaml_node_t *k = sp__node(c, p->key);
		size_t i;

		for (i = 0; i < n; i++)
			if (strcmp(sp__sval(k), allowed[i]) == 0)
				break;
		if (i == n)
			sp__unknown_name(c, sp__loc_of(k), lead, sp__sval(k), where, allowed, n, "");
	}
}
