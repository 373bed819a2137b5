/* Pipeline graph files: the stages: section, their bodies and connections. */
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
	yaml_node_t *v = sp__map_get(c, body, key);
	char msg[192];

	if (v == NULL)
		return;
	if (v->type != YAML_SCALAR_NODE)
		sp_diag_add(c->d, sp__loc_of(v), "%s of stage '%s' must be an integer, got %s", key, sn,
			    sp__type_name(v));
	else if (sp_param_check(&spec, sp__sval(v), msg, sizeof msg) != 0)
		sp_diag_add(c->d, sp__loc_of(v), "%s of stage '%s': %s", key, sn, msg);
	else
		*out = (int)sp_param_int(sp__sval(v));
}

/* The kind of the stage that `uses:` names, and its parameters' defaults; NULL when unknown (said). */
static const sp_stage_kind_t *stage_kind(ctx_t *c, sp_gstage_t *st, yaml_node_t *uses)
{
	const sp_stage_kind_t *kind;

	kind = sp_stage_find(c->reg, sp__sval(uses));
	if (kind == NULL) {
		size_t nk = c->reg->nkinds;
		const sp_stage_kind_t *const *kinds = c->reg->kinds;
		const char **names = sp__xcalloc(nk, sizeof *names);

		for (size_t i = 0; i < nk; i++)
			names[i] = kinds[i]->name;
		sp__unknown_name(c, sp__loc_of(uses), "unknown stage kind", sp__sval(uses), "", names, nk,
			     " (run 'starpipe list' to see them)");
		free(names);
		return NULL;
	}
	st->kind = kind;
	st->params = sp__xcalloc(kind->nparams, sizeof *st->params);
	sp__fill_defaults(st->params, kind->params, kind->nparams);
	st->inputs = sp__xcalloc(kind->ninputs, sizeof *st->inputs);
	for (size_t i = 0; i < kind->ninputs; i++)
		st->inputs[i].stage = NOT_CONNECTED;
	return kind;
}

/* The stage's `where:`. */
static void stage_where(ctx_t *c, sp_gstage_t *st, yaml_node_t *body, const char *sn)
{
	const sp_stage_kind_t *kind = st->kind;
	yaml_node_t *where = sp__map_get(c, body, "where");

	if (where != NULL) {
		static const sp_param_spec_t spec = { "where", SP_PT_ENUM, "any", 0, -1,
						      "any|cpu|cuda", NULL, 0 };
		char msg[192];

		if (where->type != YAML_SCALAR_NODE)
			sp_diag_add(c->d, sp__loc_of(where),
				    "'where' of stage '%s' must be any, cpu or cuda, got %s", sn,
				    sp__type_name(where));
		else if (sp_param_check(&spec, sp__sval(where), msg, sizeof msg) != 0)
			sp_diag_add(c->d, sp__loc_of(where), "'where' of stage '%s': %s", sn, msg);
		else if (strcmp(sp__sval(where), "any") != 0) {
			unsigned w = strcmp(sp__sval(where), "cpu") == 0 ? SP_IMPL_CPU : SP_IMPL_CUDA;

			if ((kind->impl & w) == 0)
				sp_diag_add(c->d, sp__loc_of(where),
					    "stage '%s' cannot run on %s: '%s' has no %s "
					    "implementation%s",
					    sn, sp__sval(where), kind->name, w == SP_IMPL_CPU ? "CPU" : "CUDA",
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
	yaml_node_t *with = sp__map_get(c, body, "with");

	if (with != NULL && !sp__is_null(with) && with->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, sp__loc_of(with), "'with' of stage '%s' must be a mapping, got %s",
			    sn, sp__type_name(with));
		with = NULL;
	}
	if (with != NULL && with->type == YAML_MAPPING_NODE) {
		const char **names = sp__xcalloc(kind->nparams, sizeof *names);

		for (size_t i = 0; i < kind->nparams; i++)
			names[i] = kind->params[i].name;
		FOR_PAIRS(c, with, p)
		{
			yaml_node_t *k = sp__node(c, p->key);
			size_t i;

			for (i = 0; i < kind->nparams; i++)
				if (strcmp(sp__sval(k), names[i]) == 0)
					break;
			if (i == kind->nparams) {
				char of[160], none[160];

				snprintf(of, sizeof of, " for '%s'", kind->name);
				snprintf(none, sizeof none, " ('%s' takes none)", kind->name);
				sp__unknown_name(c, sp__loc_of(k), "unknown parameter", sp__sval(k),
					     kind->nparams != 0 ? of : "", names, kind->nparams,
					     kind->nparams != 0 ? "" : none);
				continue;
			}
			given[i] = 1;
			snprintf(what, sizeof what, "parameter '%s' of '%s'", names[i], kind->name);
			sp__set_param(c, &st->params[i], sp__node(c, p->value), what, 1);
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
		sp__set_param_text(c, &st->params[i], ref, c->vars[v].loc, what, 1);
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
		sp_diag_add(c->d, sp__loc_of(body),
			    "stage '%s' must be a mapping with 'uses:', got %s", sn,
			    sp__type_name(body));
		return;
	}
	snprintf(buf, sizeof buf, " in stage '%s'", sn);
	sp__check_allowed(c, body, stage_keys, 6, "key", buf);
	uses = sp__map_get(c, body, "uses");
	if (uses == NULL) {
		sp_diag_add(c->d, st->loc, "stage '%s' has no 'uses:' (the stage kind)", sn);
		return;
	}
	if (uses->type != YAML_SCALAR_NODE) {
		sp_diag_add(c->d, sp__loc_of(uses), "'uses' of stage '%s' must be a stage kind, got %s",
			    sn, sp__type_name(uses));
		return;
	}
	ts->ok = 1;
	kind = stage_kind(c, st, uses);
	if (kind == NULL)
		return;
	stage_int_key(c, body, "priority", sn, -1000000, 1000000, &st->priority);
	stage_int_key(c, body, "tile", sn, 0, 100000000, &st->tile);
	if (st->tile != 0 && kind->tile == NULL) {
		sp_diag_add(c->d, sp__loc_of(sp__map_get(c, body, "tile")),
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
		if (strcmp(sp__sval(k), ic->ports[i]) == 0)
			return i;
	char of[160], none[160];

	snprintf(of, sizeof of, " of '%s'", kind->name);
	snprintf(none, sizeof none, " ('%s' has no inputs)", kind->name);
	sp__unknown_name(ic->c, sp__loc_of(k), "unknown input port", sp__sval(k), kind->ninputs != 0 ? of : "",
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
		sp__unknown_name(c, sp__loc_of(v), "reference to unknown stage", rs, "", *ic->cand, ic->n, "");
		free(rs);
		return SIZE_MAX;
	}
	if (j == ic->self) {
		sp_diag_add(c->d, sp__loc_of(v), "stage '%s' is connected to itself", ic->sn);
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
		sp_diag_add(c->d, sp__loc_of(v), "stage '%s' (%s) has no outputs", sp__clip(c, ic->all[j].name),
			    pk->name);
	} else {
		char lead[192];

		snprintf(lead, sizeof lead, "stage '%s' (%s) has no output", sp__clip(c, ic->all[j].name),
			 pk->name);
		sp__unknown_name(c, sp__loc_of(v), lead, dot + 1, "", outs, pk->noutputs, "");
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
		sp_diag_add(c->d, sp__loc_of(v),
			    "input '%s' of stage '%s' must be a reference 'stage.port', got %s",
			    ic->ports[i], ic->sn, sp__type_name(v));
		return;
	}
	ref = sp__sval(v);
	dot = strchr(ref, '.');
	if (dot == NULL || dot == ref || dot[1] == '\0' || strchr(dot + 1, '.') != NULL) {
		sp_diag_add(c->d, sp__loc_of(v), "malformed reference '%s' (expected 'stage.port')",
			    sp__clip(c, ref));
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
		sp_diag_add(c->d, sp__loc_of(v), "input '%s' of stage '%s' has type '%s' but '%s' is '%s'",
			    ic->ports[i], ic->sn, kind->inputs[i].type, sp__clip(c, ref),
			    pk->outputs[o].type);
		/* Keep the edge: a cycle through it is worth
		 * reporting too. */
	}
	st->inputs[i].stage = j;
	st->inputs[i].port = o;
	st->inputs[i].loc = sp__loc_of(v);
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
				  sp__map_get(c, ts[self].val, "in") : NULL;
	in_ctx_t ic = { c, all, st, n, self, names, cand, sp__diag_clip(sname, st->name), NULL };

	if (kind == NULL)
		return;
	if (in != NULL && !sp__is_null(in) && in->type != YAML_MAPPING_NODE) {
		sp_diag_add(c->d, sp__loc_of(in), "'in' of stage '%s' must be a mapping, got %s",
			    ic.sn, sp__type_name(in));
		return;
	}
	if (in != NULL && in->type == YAML_MAPPING_NODE) {
		ic.ports = sp__xcalloc(kind->ninputs, sizeof *ic.ports);
		for (size_t i = 0; i < kind->ninputs; i++)
			ic.ports[i] = kind->inputs[i].name;
		FOR_PAIRS(c, in, p)
			connect_input(&ic, sp__node(c, p->key), sp__node(c, p->value));
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

void sp__load_stages(ctx_t *c, yaml_node_t *map)
{
	sp_graph_t *g = c->g;
	tstage_t *ts;
	sp_gstage_t *all;
	size_t n = 0, *order, *rank, norder;
	smap_t names = { 0 };
	const char **cand = NULL;

	if (map->type != YAML_MAPPING_NODE || sp__is_null(map)) {
		sp_diag_add(c->d, sp__loc_of(map),
			    "'stages' must be a mapping of stage names to stages, got %s",
			    sp__is_null(map) ? "nothing" : sp__type_name(map));
		return;
	}
	ts = sp__xcalloc((size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start),
			 sizeof *ts);
	all = sp__xcalloc((size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start),
			  sizeof *all);
	FOR_PAIRS(c, map, p)
	{
		yaml_node_t *k = sp__node(c, p->key);

		if (!sp__valid_name(sp__sval(k), "_-")) {
			sp_diag_add(c->d, sp__loc_of(k),
				    "invalid stage name '%s' (use letters, digits, '_' and '-')",
				    sp__clip(c, sp__sval(k)));
			continue;
		}
		ts[n].key = k;
		ts[n].val = sp__node(c, p->value);
		all[n].name = sp__xstrdup(sp__sval(k));
		all[n].loc = sp__loc_of(k);
		sp__smap_add(&names, all[n].name, strlen(all[n].name), n);
		n++;
	}
	if (n == 0)
		sp_diag_add(c->d, sp__loc_of(map), "'stages' has no stages");
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

