/* The graph loader's state and YAML helpers, shared by graph.c (the YAML
 * passes and the document walk), graph_params.c (variables, params:,
 * inputs:, runtime:) and graph_stages.c (stages:). */
#ifndef SP_GRAPH_LOAD_H
#define SP_GRAPH_LOAD_H

#include "graph.h"
#include "graph_int.h"

#include <yaml.h>

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


#define FOR_PAIRS(c, map, p)                                              \
	for (yaml_node_pair_t *p = (map)->data.mapping.pairs.start;       \
	     p < (map)->data.mapping.pairs.top; p++)                      \
		if (!sp__pair_skip(c, map, p))

const char *sp__clipn(ctx_t *c, const char *s, size_t n);
const char *sp__clip(ctx_t *c, const char *s);
sp_loc_t sp__loc_of(const yaml_node_t *n);
yaml_node_t *sp__node(ctx_t *c, int i);
const char *sp__sval(const yaml_node_t *n);
const char *sp__type_name(const yaml_node_t *n);
int sp__is_null(const yaml_node_t *n);
yaml_node_t *sp__map_get(ctx_t *c, yaml_node_t *map, const char *key);
void sp__unknown_name(ctx_t *c, sp_loc_t loc, const char *lead, const char *word,
			 const char *tail, const char *const *cand, size_t n, const char *hint);
void sp__check_allowed(ctx_t *c, yaml_node_t *map, const char *const *allowed,
			  size_t n, const char *what, const char *where);
void sp__set_param_text(ctx_t *c, sp_gparam_t *gp, const char *src, sp_loc_t loc,
			   const char *what, int per_item);
void sp__set_param(ctx_t *c, sp_gparam_t *gp, yaml_node_t *v, const char *what,
		      int per_item);
void sp__fill_defaults(sp_gparam_t *gp, const sp_param_spec_t *specs, size_t n);
int sp__valid_name(const char *s, const char *extra);
void sp__load_params(ctx_t *c, yaml_node_t *map, const sp_var_t *set, size_t nset);
void sp__load_inputs(ctx_t *c, yaml_node_t *map);
void sp__load_runtime(ctx_t *c, yaml_node_t *map);
void sp__load_stages(ctx_t *c, yaml_node_t *map);
int sp__pair_skip(ctx_t *c, const yaml_node_t *map, const yaml_node_pair_t *p);

#endif /* SP_GRAPH_LOAD_H */
