/* starpipe list (the stage kinds and the runtime: section) and starpipe models. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "runtime.h"
#include "tune.h"

static const char *ptype_name(sp_ptype_t t)
{
	switch (t) {
	case SP_PT_INT: return "int";
	case SP_PT_FLOAT: return "float";
	case SP_PT_BOOL: return "bool";
	case SP_PT_STRING: return "string";
	case SP_PT_PATH: return "path";
	case SP_PT_OUTPUT: return "output";
	case SP_PT_ENUM: return "enum";
	case SP_PT_SIZE: return "size";
	}
	return "?";
}

static void print_params(const sp_param_spec_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		printf("    %-16s %-6s ", p[i].name, ptype_name(p[i].type));
		if (p[i].def == NULL)
			printf("%-12s", "(required)");
		else
			printf("= %-10s", p[i].def[0] ? p[i].def : "\"\"");
		printf(" %s", p[i].help ? p[i].help : "");
		if (p[i].type == SP_PT_ENUM)
			printf(" [%s]", p[i].choices);
		else if ((p[i].type == SP_PT_INT || p[i].type == SP_PT_FLOAT) && p[i].min <= p[i].max)
			printf(" [%.15g, %.15g]", p[i].min, p[i].max);
		printf("\n");
	}
}

int cli_cmd_list(void)
{
	const sp_stage_kind_t *const *k = cli_registry()->kinds;
	size_t n = cli_registry()->nkinds;
	for (size_t i = 0; i < n; i++) {
		printf("%s  (%s%s%s)\n  %s\n", k[i]->name, (k[i]->impl & SP_IMPL_CPU) ? "CPU" : "",
		       (k[i]->impl & SP_IMPL_CPU) && (k[i]->impl & SP_IMPL_CUDA) ? "+" : "",
		       (k[i]->impl & SP_IMPL_CUDA) ? "CUDA" : "", k[i]->help);
		if (k[i]->nparams) {
			printf("  parameters:\n");
			print_params(k[i]->params, k[i]->nparams);
		}
		if (k[i]->tile != NULL)
			printf("  tile: %s\n", k[i]->tile);
		if (k[i]->codelets != NULL && k[i]->codelets[0] != '\0')
			printf("  codelets: %s\n", k[i]->codelets);
		for (size_t p = 0; p < k[i]->ninputs; p++)
			printf("  in  %-12s %s\n", k[i]->inputs[p].name, k[i]->inputs[p].type);
		for (size_t p = 0; p < k[i]->noutputs; p++)
			printf("  out %-12s %s\n", k[i]->outputs[p].name, k[i]->outputs[p].type);
		printf("\n");
	}
	printf("runtime: section\n");
	print_params(sp_runtime_params, sp_runtime_nparams);
#ifdef SP_HAVE_CUDA
	printf("\nThis build has CUDA implementations.\n");
#else
	printf("\nThis build has no CUDA implementations (configure --enable-cuda).\n");
#endif
	return 0;
}

/* `starpipe models [GRAPH]`: the perf models of the codelets of every kind,
 * or of GRAPH's kinds; the folder from --perfmodel-dir, else GRAPH's
 * runtime: section, else the default; the node type's (--node-type, else
 * the default: sp_runtime_node_type). */
int cli_cmd_models(const struct cli *c)
{
	char *syms[256], nt[256];
	size_t n;
	const char *dir = c->rt[SP_RT_PERFMODEL_DIR];
	sp_graph_t *g = NULL;
	sp_err_t err = { 0 };

	if (c->graph != NULL) {
		sp_diag_t d;
		sp_diag_init(&d, c->graph);
		if (sp_graph_load(c->graph, c->vars, c->nvars, cli_registry(), &g, &d) != 0) {
			sp_diag_print(&d, stderr);
			sp_diag_free(&d);
			return EXIT_USAGE;
		}
		sp_diag_free(&d);
		if (dir == NULL)
			dir = sp_graph_runtime(g, "perfmodel_dir");
	}
	n = sp_graph_codelets(cli_registry(), g, syms, sizeof syms / sizeof syms[0]);
	/* StarPU reads the node type's files, and so does the flagging of
	 * tools/sim-node's entries */
	const char *from = sp_runtime_node_type(c->node_type, nt, sizeof nt);
	setenv("STARPU_HOSTNAME", nt, 1);
	/* through a buffer: the entries tools/sim-node invented get flagged */
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	int ret = mem != NULL ? sp_runtime_models(dir, from, (const char *const *)syms, n, mem, &err)
			      : sp_seterr(&err, SP_ENOMEM, "out of memory");
	if (mem != NULL && fclose(mem) == 0 && text != NULL)
		sp_tune_flag_estimated(text, stdout);
	free(text);
	if (ret != 0)
		fprintf(stderr, "starpipe: %s\n", err.msg);
	for (size_t i = 0; i < n; i++)
		free(syms[i]);
	sp_graph_free(&g);
	return ret != 0 ? EXIT_RUNTIME : 0;
}
