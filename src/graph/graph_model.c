/* The loaded graph: its accessors, Graphviz DOT output, and freeing it. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* strndup */
#endif
#include "graph_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sp__graph_free_params(sp_gparam_t *p, size_t n)
{
	if (p == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free(p[i].text);
	free(p);
}

void sp__graph_free_stage(sp_gstage_t *st)
{
	free(st->name);
	if (st->kind != NULL)
		sp__graph_free_params(st->params, st->kind->nparams);
	free(st->inputs);
	free(st->typed);
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
		sp__graph_free_stage(&g->stages[i]);
	free(g->stages);
	for (size_t i = 0; i < g->nitems_spec; i++)
		free(g->items_spec[i]);
	free(g->items_spec);
	free(g->items_folder);
	sp__graph_free_params(g->runtime, g->runtime != NULL ? sp_runtime_nparams : 0);
	for (size_t i = 0; i < g->nvars; i++) {
		free(g->var_names[i]);
		free(g->var_values[i]);
	}
	free(g->var_names);
	free(g->var_values);
	free(g->text);
	free(g);
}

/* Whether a stage's parameters name one work item (${item}, ${stem},
 * ${index}); ${item.dir} and ${header.KEY} keep a stage batch-wide, run
 * once per distinct expanded value (src/run/shared.c). */
static int uses_item(const sp_gstage_t *st)
{
	for (size_t i = 0; i < st->kind->nparams; i++)
		if (st->params[i].text != NULL && sp__graph_names_item(st->params[i].text))
			return 1;
	return 0;
}

void sp_graph_batch_wide(const sp_graph_t *g, unsigned char *wide)
{
	for (size_t s = 0; s < g->nstages; s++) {
		const sp_gstage_t *st = &g->stages[s];
		int w = st->kind->run_tile == NULL;
		for (size_t p = 0; w && p < st->kind->nparams; p++)
			if (st->kind->params[p].type == SP_PT_OUTPUT || uses_item(st))
				w = 0;
		for (size_t p = 0; w && p < st->kind->ninputs; p++)
			w = wide[st->inputs[p].stage];
		wide[s] = (unsigned char)w;
	}
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
	unsigned char *wide = calloc(g->nstages ? g->nstages : 1, 1);
	if (wide != NULL)
		sp_graph_batch_wide(g, wide);
	for (size_t i = 0; i < g->nstages; i++) {
		const sp_gstage_t *st = &g->stages[i];
		unsigned impl = st->where ? st->where : st->kind->impl;
		/* name, kind; where it may run; the graph's keys; once per batch */
		fprintf(f, "\t\"%s\" [label=\"%s\\n%s\\n%s%s%s", st->name, st->name, st->kind->name,
			(impl & SP_IMPL_CPU) ? "CPU" : "", impl == (SP_IMPL_CPU | SP_IMPL_CUDA) ? "+" : "",
			(impl & SP_IMPL_CUDA) ? "CUDA" : "");
		if (st->tile > 0)
			fprintf(f, ", tile %d", st->tile);
		if (st->priority != 0)
			fprintf(f, ", priority %d", st->priority);
		fprintf(f, "%s\"%s];\n", wide != NULL && wide[i] ? "\\nonce per batch" : "",
			wide != NULL && wide[i] ? ", style=dashed" : "");
	}
	free(wide);
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

/* Adds the space-separated symbols of `list` to syms[n..] (each once);
 * returns the new count. */
static size_t add_symbols(const char *list, char **syms, size_t n, size_t cap)
{
	for (const char *p = list != NULL ? list : ""; *p != '\0';) {
		size_t len = strcspn(p, " ");
		int seen = len == 0;
		for (size_t i = 0; !seen && i < n; i++)
			seen = strlen(syms[i]) == len && strncmp(syms[i], p, len) == 0;
		if (!seen && n < cap) {
			char *s = strndup(p, len);
			if (s != NULL)
				syms[n++] = s;
		}
		p += len;
		p += strspn(p, " ");
	}
	return n;
}

size_t sp_graph_codelets(const sp_registry_t *reg, const sp_graph_t *g, char **syms, size_t cap)
{
	if (g != NULL)
		reg = g->reg;
	size_t nk = reg->nkinds, n = 0;
	const sp_stage_kind_t *const *k = reg->kinds;
	for (size_t i = 0; i < nk; i++) {
		int used = g == NULL;
		for (size_t s = 0; g != NULL && s < g->nstages; s++)
			used |= g->stages[s].kind == k[i];
		if (used)
			n = add_symbols(k[i]->codelets, syms, n, cap);
	}
	return n;
}

const char *sp_graph_runtime(const sp_graph_t *g, const char *name)
{
	for (size_t i = 0; i < sp_runtime_nparams; i++)
		if (strcmp(sp_runtime_params[i].name, name) == 0)
			return g->runtime[i].text;
	return NULL;
}

void sp_graph_runtime_params(const sp_graph_t *g, const char *const over[SP_RT_NPARAMS],
			     sp_runtime_params_t *out)
{
	const char *texts[SP_RT_NPARAMS];
	for (size_t i = 0; i < SP_RT_NPARAMS; i++)
		texts[i] = over != NULL && over[i] != NULL ? over[i] : g->runtime[i].text;
	memset(out, 0, sizeof *out);
	sp_params_fill(sp_runtime_params, SP_RT_NPARAMS, texts, out);
}
