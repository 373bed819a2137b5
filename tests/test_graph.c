/* Unit tests of the graph layer alone (src/graph/graph*.c, src/graph/stage.c): a registry of test kinds, no StarPU, no pipeline. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "error.h"
#include "graph.h"
#include "runtime.h"
#include "stage.h"
#include "test_kinds.h"

static sp_graph_t *load(const char *text, sp_diag_t *d, int *rc)
{
	sp_graph_t *g = NULL;
	sp_diag_init(d, "t.yaml");
	*rc = sp_graph_load_string("t.yaml", text, NULL, 0, &sp_test_registry, &g, d);
	return g;
}

/* The first diagnostic's message, or "". */
static const char *first_msg(const sp_diag_t *d)
{
	return d->n > 0 ? d->v[0].msg : "";
}

static void test_find(void **state)
{
	(void)state;
	assert_ptr_equal(sp_stage_find(&sp_test_registry, "t.src"), &sp_test_src_kind);
	assert_ptr_equal(sp_stage_find(&sp_test_registry, "t.sink"), &sp_test_sink_kind);
	assert_null(sp_stage_find(&sp_test_registry, "t.none"));
	assert_null(sp_stage_find(&sp_test_registry, ""));
}

/* A kind's specs must fit the struct SP_KIND_PARAMS names: the test kinds
 * pass; a spec past a smaller struct, or a typed spec in a text-only kind,
 * is refused with the kind and the parameter named. */
struct small_params {
	int flag;
};
static void test_kind_check(void **state)
{
	(void)state;
	char msg[256] = "";
	for (size_t i = 0; i < sp_test_registry.nkinds; i++)
		assert_int_equal(sp_stage_kind_check(sp_test_registry.kinds[i], msg, sizeof msg), 0);
	static const sp_param_spec_t specs[] = {
		{ "flag", SP_PT_BOOL, "false", 0, -1, NULL, "a switch", SP_AT(struct small_params, flag) },
		{ "n", SP_PT_INT, "3", 1, 9, NULL, "a count", SP_AT(struct src_params, n) },
	};
	const sp_stage_kind_t bad = { .name = "t.bad", SP_KIND_PARAMS(specs, struct small_params) };
	assert_int_equal(sp_stage_kind_check(&bad, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "kind 't.bad': parameter 'n'"));
	const sp_stage_kind_t untyped = { .name = "t.untyped", SP_KIND_TEXT_PARAMS(specs) };
	assert_int_equal(sp_stage_kind_check(&untyped, msg, sizeof msg), -1);
	assert_non_null(strstr(msg, "parameter 'flag'"));
	const sp_stage_kind_t good = { .name = "t.good", .params = specs, .nparams = 1,
				       .params_size = sizeof(struct small_params) };
	assert_int_equal(sp_stage_kind_check(&good, msg, sizeof msg), 0);
}

/* Values are parsed once into the typed struct; stage keys into the stage. */
static void test_typed_and_keys(void **state)
{
	(void)state;
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nstages:\n"
			     "  b:\n    uses: t.sink\n    in: {in: a.out}\n    tile: 7\n"
			     "    where: cuda\n    priority: -2\n"
			     "  a:\n    uses: t.src\n    where: cpu\n"
			     "    with: {file: \"${item}\", n: 42, x: 0.25, mode: c, flag: yes, big: 2M}\n",
			     &d, &rc);
	assert_int_equal(rc, 0);
	assert_non_null(g);
	assert_int_equal(g->nstages, 2);
	const sp_gstage_t *a = &g->stages[0], *b = &g->stages[1];
	assert_string_equal(a->name, "a"); /* producers first */
	const struct src_params *p = a->typed;
	assert_non_null(p);
	assert_int_equal(p->n, 42);
	assert_true(p->x == 0.25);
	assert_int_equal(p->mode, 2);
	assert_int_equal(p->flag, 1);
	assert_int_equal(p->big, 2ULL << 20);
	assert_string_equal(sp_gstage_param(a, "file")->text, "${item}"); /* text: per item */
	assert_int_equal(a->where, SP_IMPL_CPU);
	assert_int_equal(a->tile, 0);
	assert_null(b->typed); /* no params_size */
	assert_int_equal(b->tile, 7);
	assert_int_equal(b->where, SP_IMPL_CUDA);
	assert_int_equal(b->priority, -2);
	sp_graph_free(&g);
	sp_diag_free(&d);
}

/* The runtime: section is typed as stage parameters are: the command line's
 * value over the graph's over the default. */
static void test_runtime_params(void **state)
{
	(void)state;
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nruntime:\n  ncpus: 3\n  scheduler: lws\n"
			     "stages:\n  a:\n    uses: t.src\n    with: {file: x}\n", &d, &rc);
	assert_int_equal(rc, 0);
	sp_runtime_params_t p;
	sp_graph_runtime_params(g, NULL, &p);
	assert_int_equal(p.ncpus, 3);
	assert_string_equal(p.scheduler, "lws");
	assert_int_equal(p.ncuda, -1);          /* defaults */
	assert_int_equal(p.workers_per_gpu, 1);
	assert_string_equal(p.perfmodel_dir, "");
	assert_int_equal(p.calibrate, 0);
	const char *over[SP_RT_NPARAMS] = { 0 };
	over[SP_RT_NCPUS] = "5";
	over[SP_RT_CALIBRATE] = "2";
	over[SP_RT_PERFMODEL_DIR] = "/tmp/m";
	sp_graph_runtime_params(g, over, &p);
	assert_int_equal(p.ncpus, 5);
	assert_int_equal(p.calibrate, 2);
	assert_string_equal(p.perfmodel_dir, "/tmp/m");
	assert_string_equal(p.scheduler, "lws"); /* not overridden: the graph's */
	for (size_t i = 0; i < SP_RT_NPARAMS; i++) /* the enum names the spec table's order */
		assert_string_equal(sp_graph_runtime(g, sp_runtime_params[i].name), g->runtime[i].text);
	sp_graph_free(&g);
	sp_diag_free(&d);
}

/* Defaults fill the struct too. */
static void test_defaults(void **state)
{
	(void)state;
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nstages:\n"
			     "  a:\n    uses: t.src\n    with: {file: f}\n", &d, &rc);
	assert_int_equal(rc, 0);
	const struct src_params *p = g->stages[0].typed;
	assert_int_equal(p->n, 3);
	assert_true(p->x == 0.5);
	assert_int_equal(p->mode, 1);
	assert_int_equal(p->flag, 0);
	assert_int_equal(p->big, 1024);
	sp_graph_free(&g);
	sp_diag_free(&d);
}

/* A chain through the filter kind: string and optional output parameters,
 * stages ordered producers first whatever the file's order. */
static void test_chain(void **state)
{
	(void)state;
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nstages:\n"
			     "  c:\n    uses: t.sink\n    in: {in: b.out}\n"
			     "  b:\n    uses: t.map\n    in: {in: a.out}\n    with: {label: \"x y\"}\n"
			     "  a:\n    uses: t.src\n    with: {file: f}\n",
			     &d, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(g->nstages, 3);
	assert_string_equal(g->stages[0].name, "a");
	assert_string_equal(g->stages[1].name, "b");
	assert_string_equal(g->stages[2].name, "c");
	const sp_gparam_t *label = sp_gstage_param(&g->stages[1], "label");
	const sp_gparam_t *log = sp_gstage_param(&g->stages[1], "log");
	assert_non_null(label);
	assert_string_equal(label->text, "x y");
	assert_non_null(log);
	assert_true(log->text == NULL || log->text[0] == '\0');
	sp_graph_free(&g);
	sp_diag_free(&d);
}

/* The registry shared with the fuzz target uses every parameter type, so
 * that fuzzing it reaches every parser of src/stage.c. */
static void test_registry_types(void **state)
{
	(void)state;
	size_t n = sp_test_registry.nkinds, seen = 0;
	const sp_stage_kind_t *const *k = sp_test_registry.kinds;
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			assert_true(strcmp(k[i - 1]->name, k[i]->name) < 0);
		for (size_t j = 0; j < k[i]->nparams; j++)
			seen |= (size_t)1 << k[i]->params[j].type;
	}
	assert_int_equal(seen, ((size_t)1 << (SP_PT_SIZE + 1)) - 1);
}

/* The fuzz target's seeds (tests/fuzz/graphs/) are valid graphs of this
 * registry, so that fuzzing starts past the validator. */
static void test_fuzz_seeds(void **state)
{
	(void)state;
	const char *top = getenv("srcdir");
	const char *seeds[] = { "chain.yaml", "batch.yaml" };
	char path[4096];
	for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
		sp_diag_t d;
		sp_graph_t *g = NULL;
		snprintf(path, sizeof path, "%s/tests/fuzz/graphs/%s", top != NULL ? top : ".",
			 seeds[i]);
		sp_diag_init(&d, path);
		int rc = sp_graph_load(path, NULL, 0, &sp_test_registry, &g, &d);
		if (rc != 0)
			sp_diag_print(&d, stderr);
		assert_int_equal(rc, 0);
		assert_non_null(g);
		sp_graph_free(&g);
		sp_diag_free(&d);
	}
}

static void expect_error(const char *text, const char *msg)
{
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load(text, &d, &rc);
	assert_int_equal(rc, SP_EGRAPH);
	assert_null(g);
	assert_string_equal(first_msg(&d), msg);
	sp_diag_free(&d);
}

static void test_key_errors(void **state)
{
	(void)state;
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n    tile: 2\n"
		     "    with: {file: f}\n",
		     "stage 'a' cannot tile: 't.src' runs as one task per item");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n    where: cuda\n"
		     "    with: {file: f}\n",
		     "stage 'a' cannot run on cuda: 't.src' has no CUDA implementation in this build");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n    where: gpu\n"
		     "    with: {file: f}\n",
		     "'where' of stage 'a': expected one of any|cpu|cuda, got 'gpu'");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n"
		     "    with: {file: f, mode: d}\n",
		     "parameter 'mode' of 't.src': expected one of a|b|c, got 'd'");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.srcc\n",
		     "unknown stage kind 't.srcc' (did you mean 't.src'?)");
}

/* inputs: folder: a folder item stands for its matching files, sorted;
 * other items stay in place; a folder without a match is an error.  A
 * pattern with braces is the union of its alternatives, sorted as one
 * list, each file once; braces in the folder's own name are literal. */
static void test_folder_items(void **state)
{
	(void)state;
	char dir[] = "/tmp/sp-[test]*{a,b}graph.XXXXXX" /* glob metacharacters: escaped */, path[256],
	     text[1024];
	const char *files[] = { "b.npy", "a.npy", "c.txt", ".hidden.npy", "D.NPY" };
	assert_non_null(mkdtemp(dir));
	for (size_t i = 0; i < 5; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, files[i]);
		FILE *f = fopen(path, "w");
		assert_non_null(f);
		fclose(f);
	}
	snprintf(path, sizeof path, "%s/sub.npy", dir); /* a folder that matches: skipped */
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof path, "%s/empty", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(text, sizeof text,
		 "starpipe: 1\npipeline: t\ninputs:\n  files: [x.npy, \"%s\", y.npy]\n"
		 "  folder: \"*.npy\"\nstages:\n  a:\n    uses: t.src\n    with: {file: f}\n",
		 dir);
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load(text, &d, &rc);
	assert_int_equal(rc, 0);
	char **items;
	size_t n;
	sp_err_t err = { 0 };
	assert_int_equal(sp_graph_items(g, &items, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_int_equal(sp_graph_folders(g, &items, &n, &err), 0);
	assert_int_equal(n, 4);
	assert_string_equal(items[0], "x.npy");
	snprintf(path, sizeof path, "%s/a.npy", dir);
	assert_string_equal(items[1], path);
	snprintf(path, sizeof path, "%s/b.npy", dir);
	assert_string_equal(items[2], path);
	assert_string_equal(items[3], "y.npy");
	for (size_t i = 0; i < n; i++)
		free(items[i]);
	free(items);
	/* the empty folder: an error naming it and the pattern */
	items = malloc(sizeof *items);
	snprintf(path, sizeof path, "%s/empty", dir);
	items[0] = strdup(path);
	n = 1;
	assert_int_equal(sp_graph_folders(g, &items, &n, &err), SP_ENOENT);
	assert_null(items);
	assert_int_equal(n, 0);
	assert_non_null(strstr(err.msg, "/empty' has no file matching '*.npy'"));
	sp_graph_free(&g);
	sp_diag_free(&d);
	/* braces: glob() lists c.txt, then a.npy, b.npy (and a.npy again, the
	 * third alternative), then D.NPY; one sorted list comes out */
	snprintf(text, sizeof text,
		 "starpipe: 1\npipeline: t\ninputs:\n  files: [\"%s\"]\n"
		 "  folder: \"*.{txt,npy,[a]*y,NPY,tif}\"\nstages:\n  a:\n    uses: t.src\n"
		 "    with: {file: f}\n", dir);
	g = load(text, &d, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(sp_graph_items(g, &items, &n, &err), 0);
	assert_int_equal(sp_graph_folders(g, &items, &n, &err), 0);
	const char *want[] = { "D.NPY", "a.npy", "b.npy", "c.txt" };
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, want[i]);
		assert_string_equal(items[i], path);
		free(items[i]);
	}
	free(items);
	sp_graph_free(&g);
	sp_diag_free(&d);
	expect_error("starpipe: 1\npipeline: t\ninputs:\n  glob: \"*.npy\"\n  folder: a/*.npy\n"
		     "stages:\n  a:\n    uses: t.src\n    with: {file: f}\n",
		     "'folder' is a file name pattern such as '*.mrc', not a path");
	const char *rm[] = { "b.npy", "a.npy", "c.txt", ".hidden.npy", "D.NPY", "sub.npy", "empty" };
	for (size_t i = 0; i < 7; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, rm[i]);
		remove(path);
	}
	rmdir(dir);
}

/* A stage parameter left out of `with:` takes the graph's variable of its
 * name, before the kind's default: typed (n, x), string (label) and a
 * required path (file), which then need no `with:` at all.  A variable no
 * stage takes (unused) is fine; a parameter with no variable of its name
 * (mode, big) keeps the kind's default. */
static void test_param_from_variable(void **state)
{
	(void)state;
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\n"
			     "params:\n  n: 7\n  x:\n    default: 0.125\n    help: a fraction\n"
			     "  label: lbl\n  file: in.npy\n  unused: whatever\n"
			     "stages:\n"
			     "  a:\n    uses: t.src\n"
			     "  b:\n    uses: t.map\n    in: {in: a.out}\n"
			     "  c:\n    uses: t.sink\n    in: {in: b.out}\n",
			     &d, &rc);
	if (rc != 0)
		sp_diag_print(&d, stderr);
	assert_int_equal(rc, 0);
	const sp_gstage_t *a = &g->stages[0], *b = &g->stages[1];
	const struct src_params *p = a->typed;
	assert_int_equal(p->n, 7);
	assert_true(p->x == 0.125);
	assert_int_equal(p->mode, 1);    /* the kind's default, b */
	assert_int_equal(p->big, 1024);  /* the kind's default, 1K */
	assert_string_equal(sp_gstage_param(a, "file")->text, "in.npy");
	assert_string_equal(sp_gstage_param(a, "n")->text, "7");
	assert_int_equal(sp_gstage_param(a, "n")->loc.line, 4); /* the variable's line */
	assert_int_equal(sp_gstage_param(a, "mode")->loc.line, 0);
	assert_string_equal(sp_gstage_param(b, "label")->text, "lbl");
	sp_graph_free(&g);
	sp_diag_free(&d);
}

/* Precedence: `with:` (a literal or another variable) over the variable of
 * the parameter's name, stage by stage. */
static void test_param_with_wins(void **state)
{
	(void)state;
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nparams:\n  n: 7\n  m: 5\n  file: f\n"
			     "stages:\n"
			     "  a:\n    uses: t.src\n    with: {n: 9}\n"
			     "  b:\n    uses: t.src\n"
			     "  c:\n    uses: t.src\n    with: {n: \"${m}\"}\n",
			     &d, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(((const struct src_params *)g->stages[0].typed)->n, 9);
	assert_int_equal(((const struct src_params *)g->stages[1].typed)->n, 7);
	assert_int_equal(((const struct src_params *)g->stages[2].typed)->n, 5);
	sp_graph_free(&g);
	sp_diag_free(&d);
}

/* --set NAME=VALUE reaches every stage that takes the variable NAME, per-item
 * builtins included where the parameter's type allows them. */
static void test_param_set_reaches(void **state)
{
	(void)state;
	const char *text = "starpipe: 1\npipeline: t\nparams:\n  n: 7\n  label: lbl\n"
			   "stages:\n"
			   "  a:\n    uses: t.src\n    with: {file: f}\n"
			   "  b:\n    uses: t.map\n    in: {in: a.out}\n"
			   "  c:\n    uses: t.map\n    in: {in: b.out}\n";
	const sp_var_t set[] = { { "n", "11" }, { "label", "x-${stem}" } };
	sp_diag_t d;
	sp_graph_t *g = NULL;
	sp_diag_init(&d, "t.yaml");
	int rc = sp_graph_load_string("t.yaml", text, set, 2, &sp_test_registry, &g, &d);
	assert_int_equal(rc, 0);
	assert_int_equal(((const struct src_params *)g->stages[0].typed)->n, 11);
	assert_string_equal(sp_gstage_param(&g->stages[1], "label")->text, "x-${stem}");
	assert_string_equal(sp_gstage_param(&g->stages[2], "label")->text, "x-${stem}");
	sp_graph_free(&g);
	sp_diag_free(&d);
	/* a bad --set value is reported at the variable, naming the stage */
	const sp_var_t bad[] = { { "n", "0" } };
	sp_diag_init(&d, "t.yaml");
	rc = sp_graph_load_string("t.yaml", text, bad, 1, &sp_test_registry, &g, &d);
	assert_int_equal(rc, SP_EGRAPH);
	assert_string_equal(first_msg(&d), "parameter 'n' of 't.src' (stage 'a', from variable 'n'): "
					   "expected an integer in [1, 1000], got '0'");
	assert_int_equal(d.v[0].loc.line, 4);
	assert_int_equal(d.v[0].loc.col, 3);
	sp_diag_free(&d);
}

/* What a stage takes from a variable is checked as any value: its type, the
 * per-item builtins, and a variable with no value. */
static void test_param_variable_errors(void **state)
{
	(void)state;
	expect_error("starpipe: 1\npipeline: t\nparams:\n  mode: d\n"
		     "stages:\n  a:\n    uses: t.src\n    with: {file: f}\n",
		     "parameter 'mode' of 't.src' (stage 'a', from variable 'mode'): "
		     "expected one of a|b|c, got 'd'");
	expect_error("starpipe: 1\npipeline: t\nparams:\n  n: \"${index}\"\n"
		     "stages:\n  a:\n    uses: t.src\n    with: {file: f}\n",
		     "parameter 'n' of 't.src' (stage 'a', from variable 'n') cannot use the "
		     "per-item variable '${index}' (only path and string parameters can)");
	expect_error("starpipe: 1\npipeline: t\nparams:\n  n:\n    help: a count\n"
		     "stages:\n  a:\n    uses: t.src\n    with: {file: f}\n",
		     "variable 'n' is not set, and stage 'a' (t.src) takes its parameter 'n' from it "
		     "(give it a default, pass --set n=VALUE, or set 'n' in the stage's 'with:')");
	/* unset but overridden by with: -- the variable is not used */
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nparams:\n  n:\n"
			     "stages:\n  a:\n    uses: t.src\n    with: {file: f, n: 2}\n",
			     &d, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(((const struct src_params *)g->stages[0].typed)->n, 2);
	sp_graph_free(&g);
	sp_diag_free(&d);
	/* the required file: neither with: nor a variable */
	expect_error("starpipe: 1\npipeline: t\nparams:\n  n: 3\nstages:\n  a:\n    uses: t.src\n",
		     "stage 'a' (t.src) is missing required parameter 'file'");
}


/* A header reader for the tests: CAMERA b0, EXPID 67784, NAME 'abc'. */
static int fake_header(const char *path, const char *key, char *value, size_t n, sp_err_t *err)
{
	static const char *const kv[][2] = { { "CAMERA", "b0" }, { "EXPID", "67784" },
					     { "NAME", "abc" } };
	for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
		if (strcmp(kv[i][0], key) == 0) {
			snprintf(value, n, "%s", kv[i][1]);
			return 0;
		}
	return sp_seterr(err, SP_EFORMAT, "%s: no HDU has header keyword %s", path, key);
}

/* stage a's file expanded for item, or the error's message in buf. */
static const char *expand_file(const char *file, const char *item, char *buf, size_t len)
{
	char text[512];
	sp_diag_t d;
	int rc;
	snprintf(text, sizeof text,
		 "starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n    with: {file: \"%s\"}\n",
		 file);
	sp_graph_t *g = load(text, &d, &rc);
	assert_int_equal(rc, 0);
	sp_err_t err = { 0 };
	char *t = sp_graph_expand_item(sp_gstage_param(&g->stages[0], "file")->text, item, 3, &err);
	snprintf(buf, len, "%s", t != NULL ? t : err.msg);
	if (t == NULL)
		assert_int_not_equal(err.code, 0);
	free(t);
	sp_graph_free(&g);
	sp_diag_free(&d);
	return buf;
}

/* ${item.dir} and ${header.KEY}: expansion, formats, a missing keyword, the
 * checks at load, and batch-wide stages (a header value is no item's own). */
static void test_item_builtins(void **state)
{
	(void)state;
	char b[512];
	sp_graph_set_header_reader(fake_header);
	assert_string_equal(expand_file("${item.dir}/x-${stem}.fits", "a/b/c.fits", b, sizeof b),
			    "a/b/x-c.fits");
	assert_string_equal(expand_file("${item.dir}/x", "c.fits", b, sizeof b), "./x");
	assert_string_equal(expand_file("${item.dir}x", "/c.fits", b, sizeof b), "/x");
	assert_string_equal(expand_file("p-${header.CAMERA}-${header.EXPID:08d}-${index}.fits",
					"i.fits", b, sizeof b),
			    "p-b0-00067784-3.fits");
	assert_string_equal(expand_file("[${header.EXPID:7d}] $$5", "i.fits", b, sizeof b),
			    "[  67784] $5");
	assert_string_equal(expand_file("${header.NAME:08d}", "i.fits", b, sizeof b),
			    "i.fits: header keyword NAME is 'abc', not an integer (for "
			    "${header.NAME:08d})");
	assert_string_equal(expand_file("psf-${header.SPECGRPH}.fits", "i.fits", b, sizeof b),
			    "i.fits: no HDU has header keyword SPECGRPH");
	sp_graph_set_header_reader(NULL);
	assert_string_equal(expand_file("${header.CAMERA}", "i.fits", b, sizeof b),
			    "i.fits: ${header.CAMERA}: no header reader in this program");
	/* checked at load: the reference's form, and where it may be used */
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n"
		     "    with: {file: \"${header.CAMERA:x}\"}\n",
		     "invalid header reference '${header.CAMERA:x}' (write ${header.KEY}, or "
		     "${header.KEY:08d} for an integer zero-padded to 8 digits)");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n"
		     "    with: {file: \"${header.}\"}\n",
		     "invalid header reference '${header.}' (write ${header.KEY}, or "
		     "${header.KEY:08d} for an integer zero-padded to 8 digits)");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n"
		     "    with: {file: f, n: \"${header.EXPID}\"}\n",
		     "parameter 'n' of 't.src' cannot use the per-item variable "
		     "'${header.EXPID}' (only path and string parameters can)");
	/* a stage whose file is a header's value stays batch-wide; ${stem} does not */
	sp_diag_t d;
	int rc;
	unsigned char wide[2];
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n"
			     "    with: {file: \"${item.dir}/p-${header.CAMERA}.npy\"}\n"
			     "  b:\n    uses: t.src\n    with: {file: \"${stem}.npy\"}\n",
			     &d, &rc);
	assert_int_equal(rc, 0);
	sp_graph_batch_wide(g, wide);
	assert_int_equal(wide[0], 1);
	assert_int_equal(wide[1], 0);
	sp_graph_free(&g);
	sp_diag_free(&d);
}

/* Writes text to a fresh file in dir, named name; returns its path in buf. */
static const char *put_file(const char *dir, const char *name, const char *text, char *buf,
			    size_t len)
{
	snprintf(buf, len, "%s/%s", dir, name);
	FILE *f = fopen(buf, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	return buf;
}

/* The graph of the manifest tests: n is typed (an int in [1, 1000]). */
static sp_graph_t *manifest_graph(const char *manifest, sp_diag_t *d)
{
	char text[1024];
	int rc;
	snprintf(text, sizeof text,
		 "starpipe: 1\npipeline: t\nparams:\n  n: 7\n  file: in.npy\n  label: lbl\n"
		 "inputs:\n  manifest: \"%s\"\n"
		 "stages:\n  a:\n    uses: t.src\n  b:\n    uses: t.map\n    in: {in: a.out}\n",
		 manifest);
	sp_graph_t *g = load(text, d, &rc);
	if (rc != 0)
		sp_diag_print(d, stderr);
	assert_int_equal(rc, 0);
	return g;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* A manifest's columns: header, rows, empty fields, folders, errors at
 * line:col, the packed form, and each row's graph with its values over
 * the graph's (typed, range-checked). */
static void test_manifest_columns(void **state)
{
	(void)state;
	char dir[] = "/tmp/sp-manifest.XXXXXX", path[256];
	assert_non_null(mkdtemp(dir));
	put_file(dir, "m.tsv",
		 "# a comment, then the header\n"
		 "item\tn\tlabel\n"
		 "x.npy\t12\tfirst\n"
		 "\n"
		 "sub/y.npy\t\tsecond\n"
		 "/abs/z.npy  \t 900 \t\n"
		 "folder\t5\t\n",
		 path, sizeof path);
	sp_diag_t d;
	sp_graph_t *g = manifest_graph(path, &d);
	char **items;
	size_t n;
	sp_item_table_t t;
	sp_err_t err = { 0 };
	assert_int_equal(sp_graph_items_table(g, &items, &n, &t, &err), 0);
	assert_int_equal(n, 4);
	assert_int_equal(t.ncols, 2);
	assert_string_equal(t.cols[0], "n");
	assert_string_equal(t.cols[1], "label");
	snprintf(path, sizeof path, "%s/x.npy", dir);
	assert_string_equal(items[0], path);
	assert_string_equal(items[2], "/abs/z.npy");
	assert_int_equal(t.lines[1], 5);
	assert_null(t.vals[1 * 2 + 0]);              /* empty: keeps the variable */
	assert_string_equal(t.vals[2 * 2 + 0], "900"); /* trimmed */
	/* lookups: the row itself, a file under a folder row, none */
	assert_int_equal(sp_item_table_find(&t, items[1]), 1);
	snprintf(path, sizeof path, "%s/folder/deep/f.npy", dir);
	assert_int_equal(sp_item_table_find(&t, path), 3);
	assert_int_equal(sp_item_table_find(&t, "/elsewhere/x.npy"), SIZE_MAX);
	/* each row's graph: its values over g's */
	sp_graph_t *v = NULL;
	assert_int_equal(sp_graph_variant(g, &t, 0, &v, &err), 0);
	assert_int_equal(((const struct src_params *)v->stages[0].typed)->n, 12);
	assert_string_equal(sp_gstage_param(&v->stages[1], "label")->text, "first");
	sp_graph_free(&v);
	assert_int_equal(sp_graph_variant(g, &t, 1, &v, &err), 0);
	assert_int_equal(((const struct src_params *)v->stages[0].typed)->n, 7); /* g's */
	assert_string_equal(sp_gstage_param(&v->stages[1], "label")->text, "second");
	sp_graph_free(&v);
	assert_int_equal(((const struct src_params *)g->stages[0].typed)->n, 7); /* g untouched */
	/* packed and back: the same table */
	char **pk;
	size_t np;
	sp_item_table_t u;
	assert_int_equal(sp_item_table_pack(&t, &pk, &np), 0);
	assert_int_equal(sp_item_table_unpack(pk, np, &u), 0);
	assert_int_equal(u.nrows, t.nrows);
	assert_int_equal(u.ncols, t.ncols);
	for (size_t r = 0; r < t.nrows; r++) {
		assert_string_equal(u.paths[r], t.paths[r]);
		assert_int_equal(u.lines[r], t.lines[r]);
		for (size_t c = 0; c < t.ncols; c++)
			if (t.vals[r * 2 + c] == NULL)
				assert_null(u.vals[r * 2 + c]);
			else
				assert_string_equal(u.vals[r * 2 + c], t.vals[r * 2 + c]);
	}
	assert_int_equal(sp_item_table_find(&u, path), 3);
	sp_item_table_free(&u);
	free_strv(pk, np);
	sp_item_table_free(&t);
	free_strv(items, n);
	sp_graph_free(&g);
	sp_diag_free(&d);

	/* the errors, each at its manifest's line and column */
	static const struct {
		const char *text, *msg;
	} bad[] = {
		{ "item\tn\tlabl\nx.npy\t1\ta\n", "m.tsv:1:8: column 'labl' names no variable of t.yaml's params: (did you mean 'label'?)" },
		{ "item,n,n\nx.npy,1,2\n", "m.tsv:1:8: column 'n' given twice" },
		{ "item,n\nx.npy,1\ny.npy,1,2\n", "m.tsv:3:9: 3 field(s), the header has 2" },
		{ "item,n\n,1\n", "m.tsv:2:1: the row names no item" },
		{ "item,n\nx.npy,1\nx.npy,2\n", "m.tsv:3: '" },
		{ "item,n\nx.npy,abc\n", "m.tsv:2: " },
		{ "item,n\nx.npy,5000\n", "m.tsv:2: " },
		{ "item\tn\n", "lists no files" },
	};
	char dir2[] = "/tmp/sp-manifest.XXXXXX";
	assert_non_null(mkdtemp(dir2));
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		put_file(dir2, "m.tsv", bad[k].text, path, sizeof path);
		g = manifest_graph(path, &d);
		memset(&err, 0, sizeof err);
		int rc = sp_graph_items_table(g, &items, &n, &t, &err);
		if (rc == 0) { /* a value: refused by the row's graph */
			assert_int_equal(sp_graph_variant(g, &t, 0, &v, &err), SP_EGRAPH);
			assert_null(v);
			assert_non_null(strstr(err.msg, "x.npy's values: t.yaml:"));
			free_strv(items, n);
			sp_item_table_free(&t);
		}
		if (strstr(err.msg, bad[k].msg) == NULL)
			fprintf(stderr, "# case %zu: %s\n", k, err.msg);
		assert_non_null(strstr(err.msg, bad[k].msg));
		sp_graph_free(&g);
		sp_diag_free(&d);
	}
	/* one path per line, as before: no table, the same items */
	put_file(dir2, "m.tsv", "a.npy\n# c\nitem\n", path, sizeof path);
	g = manifest_graph(path, &d);
	assert_int_equal(sp_graph_items_table(g, &items, &n, &t, &err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(t.ncols, 0);
	snprintf(path, sizeof path, "%s/item", dir2);
	assert_string_equal(items[1], path);
	free_strv(items, n);
	sp_graph_free(&g);
	sp_diag_free(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_kind_check),
		cmocka_unit_test(test_typed_and_keys),
		cmocka_unit_test(test_runtime_params),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_key_errors),
		cmocka_unit_test(test_chain),
		cmocka_unit_test(test_registry_types),
		cmocka_unit_test(test_fuzz_seeds),
		cmocka_unit_test(test_folder_items),
		cmocka_unit_test(test_param_from_variable),
		cmocka_unit_test(test_param_with_wins),
		cmocka_unit_test(test_param_set_reaches),
		cmocka_unit_test(test_param_variable_errors),
		cmocka_unit_test(test_manifest_columns),
		cmocka_unit_test(test_item_builtins),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
