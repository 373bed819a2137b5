/* Pipeline graph files: parse, validate, expand ${var}, print as DOT. */
#ifndef SP_GRAPH_H
#define SP_GRAPH_H

#include <stddef.h>
#include <stdio.h>

#include "stage.h"

/*
 * DESIGN: the YAML document is loaded with libyaml (every node keeps its
 * line and column), then walked once into an sp_graph_t; each problem found
 * becomes one diagnostic `file:line:col: message` followed by the source
 * line and a caret, so the user sees all problems of a file at once.  ${var}
 * references are resolved against the graph's `params:` defaults and the
 * command line's --set values at load time; the per-item builtins ${item},
 * ${stem} and ${index} stay in the text and are expanded per work item by
 * sp_graph_expand_item().  A stage parameter that `with:` leaves out is
 * `${NAME}` when `params:` declares a variable of its name NAME, and the
 * kind's default otherwise (doc/graph-format.md).
 */

typedef struct sp_loc {
	int line, col; /* 1-based; 0 when the value is a default */
} sp_loc_t;

/* A diagnostic list.  Diagnostics are printed in the order found. */
typedef struct sp_diag {
	const char *file; /* as given by the user */
	char *source;     /* whole file text, for the caret lines; may be NULL */
	size_t n, cap;
	struct sp_diag_entry {
		sp_loc_t loc;
		char *msg;
	} *v;
} sp_diag_t;

void sp_diag_init(sp_diag_t *d, const char *file);
void sp_diag_add(sp_diag_t *d, sp_loc_t loc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prints the diagnostics as "file:line:col: msg", the source line and a
 * caret under the column.  A long line is cut to 200 columns around the
 * caret, with "..." where cut.  At most the first 50 are printed, then one
 * line "file: ... and N more problems". */
void sp_diag_print(const sp_diag_t *d, FILE *f);
void sp_diag_free(sp_diag_t *d);

/* A `--set name=value` from the command line. */
typedef struct sp_var {
	const char *name;
	const char *value;
} sp_var_t;

typedef struct sp_gparam {
	const sp_param_spec_t *spec;
	char *text;   /* global ${var}s resolved; may still hold ${item} etc. */
	sp_loc_t loc; /* where set; {0,0} for a default */
} sp_gparam_t;

typedef struct sp_ginput {
	size_t stage; /* index into sp_graph_t.stages of the producer */
	size_t port;  /* index into that stage kind's outputs */
	sp_loc_t loc;
} sp_ginput_t;

typedef struct sp_gstage {
	char *name;
	const sp_stage_kind_t *kind;
	sp_loc_t loc;
	int priority;        /* `priority:`, default 0; higher runs first */
	int tile;            /* `tile:`, tasks the stage splits into; 0: the kind's default */
	unsigned where;      /* `where:` as SP_IMPL_* bits; 0: any worker */
	sp_gparam_t *params; /* kind->nparams entries, in spec order */
	sp_ginput_t *inputs; /* kind->ninputs entries, in spec order */
	void *typed;         /* the kind's typed parameters (kind->params_size
			      * bytes, sp_params_fill()), or NULL */
} sp_gstage_t;

typedef enum { SP_ITEMS_NONE, SP_ITEMS_FILES, SP_ITEMS_GLOB, SP_ITEMS_MANIFEST } sp_items_kind_t;

typedef struct sp_graph {
	char *file;        /* the graph file's path */
	char *pipeline;    /* `pipeline:` */
	char *description; /* `description:`, or NULL */
	sp_gstage_t *stages; /* topologically sorted, producers first */
	size_t nstages;
	sp_items_kind_t items_kind; /* `inputs:` section */
	char **items_spec;          /* files, or one glob, or one manifest path */
	size_t nitems_spec;
	char *items_folder;         /* `inputs: folder:` pattern, or NULL */
	sp_loc_t items_loc;
	sp_gparam_t *runtime; /* sp_runtime_nparams entries, spec order */
	char **var_names;     /* `params:` section, after --set */
	char **var_values;
	size_t nvars;
	const sp_registry_t *reg; /* what it was loaded against */
	char *text;               /* the graph file's text, for sp_graph_variant() */
} sp_graph_t;

/* The largest graph file sp_graph_load() reads (bytes). */
#define SP_GRAPH_MAX_BYTES (16 << 20)

/* Loads and validates `path`.  vars are the command line's --set values (a
 * name not declared in `params:` is an error); reg the stage kinds and the
 * scheduler check it is validated against (kept in the graph: it must
 * outlive it).  On success returns 0 and
 * *out; otherwise SP_EGRAPH (or SP_ENOENT/SP_EIO when the file cannot be
 * read) and every problem found is in diag (which must be initialised with
 * sp_diag_init; it also receives the file's text). */
int sp_graph_load(const char *path, const sp_var_t *vars, size_t nvars,
		  const sp_registry_t *reg, sp_graph_t **out, sp_diag_t *diag);

/* Same, from text in memory; `path` is used in messages only. */
int sp_graph_load_string(const char *path, const char *text, const sp_var_t *vars,
			 size_t nvars, const sp_registry_t *reg, sp_graph_t **out, sp_diag_t *diag);

void sp_graph_free(sp_graph_t **g);

/* Expands the per-item builtins in text: ${item} (the item's path), ${stem}
 * (its base name without directory and last extension), ${index} (its
 * 0-based position), ${item.dir} (its folder: "." for a bare name) and
 * ${header.KEY} (keyword KEY of the item's header, by the reader
 * sp_graph_set_header_reader() set; ${header.KEY:08d} formats an integer
 * value zero-padded to 8 digits, ${header.KEY:8d} space-padded).  Returns a
 * malloc'd string, or NULL with err set (when err is not NULL): out of
 * memory, or a header keyword that cannot be read (naming the item). */
char *sp_graph_expand_item(const char *text, const char *item, size_t index, sp_err_t *err);

/* Stage st's parameter `name` expanded for the item; NULL with err saying
 * why, the stage and the parameter named (SP_ENOMEM, or a header
 * keyword's code). */
char *sp_gstage_expand(const sp_gstage_t *st, const char *name, const char *item, size_t index,
		       sp_err_t *err);

/* Reads keyword key of file path's header into value[n] (a string's text
 * without its quotes; a number as written); 0, or an SP_E* code with err
 * set to one line naming the file and the reason. */
typedef int (*sp_header_reader_fn)(const char *path, const char *key, char *value, size_t n,
				   sp_err_t *err);

/* The reader of ${header.KEY}: the stage kinds give it (codelets/kinds.c),
 * before main(); without one such a reference fails its item. */
void sp_graph_set_header_reader(sp_header_reader_fn fn);

/* Replaces every item of items[0..*n) that names a folder by the files in
 * it whose names match g's `inputs: folder:` pattern (glob(3) with braces,
 * GLOB_BRACE: dot files only when the pattern starts with '.'), sorted as one
 * list, each file once;
 * other items stay as they are, in order.  Without that key the list is
 * unchanged (a folder is then an item, which its reader refuses).  A folder
 * with no match is an error (SP_ENOENT, naming it and the pattern), one
 * that cannot be read is SP_EIO with the reason ("cannot read the folder:
 * Permission denied"); the list is then freed and *items NULL. */
int sp_graph_folders(const sp_graph_t *g, char ***items, size_t *n, struct sp_err *err);

/* Drops from items[0..*n) every item that names the same file as an
 * earlier one, compared by realpath(3) (an item that does not resolve, a
 * missing file, by its text): the same folder given twice, a folder and a
 * file in it, `a/x.npy` and `a/./x.npy` are one item, not an output
 * collision of a file with itself.  The first of each stays, in order; the
 * dropped strings are freed.  Returns how many were dropped; when any,
 * `example` (exsize bytes) receives the first pair ("'B' is 'A'", or
 * "'A' twice"). */
size_t sp_graph_dedupe(char **items, size_t *n, char *example, size_t exsize);

/* Lists the work items named by the `inputs:` section (files in order; glob
 * matches sorted; manifest lines, '#' comments and blank lines skipped,
 * relative paths taken from the manifest's folder).  Returns 0 and a
 * malloc'd array of malloc'd paths, or SP_ENOENT/SP_EIO with err set. */
struct sp_err;
int sp_graph_items(const sp_graph_t *g, char ***items, size_t *n, struct sp_err *err);

/*
 * A manifest with columns (doc/graph-format.md): a header line `item NAME
 * NAME ...`, its fields separated by tabs (or by commas when the header has
 * no tab), then one row per item, the item's path first and each column's
 * value after it; an empty field leaves the variable as --set or params:
 * gives it.  Each NAME is a variable of the graph's params:.
 */
typedef struct sp_item_table {
	char *file;      /* the manifest, for messages */
	char **cols;     /* [ncols] the variables the columns set */
	size_t ncols;
	size_t nrows;
	char **paths;    /* [nrows] the rows' items, as sp_graph_items() lists them */
	char **vals;     /* [nrows * ncols]: NULL where the field is empty */
	unsigned *lines; /* [nrows] the row's line in the manifest */
	size_t *order;   /* rows by path, for sp_item_table_find() */
} sp_item_table_t;

/* sp_graph_items(), and for a manifest with columns its table into *tab
 * (zeroed otherwise; tab may be NULL).  A header column that names no
 * variable of g, a column given twice, a row whose field count differs from
 * the header's or that lists an item twice with other values are errors
 * (SP_EGRAPH), with the manifest's file:line:col in err's message. */
int sp_graph_items_table(const sp_graph_t *g, char ***items, size_t *n, sp_item_table_t *tab,
			 struct sp_err *err);

/* The row of `path`: the row that lists it, else the row of the nearest
 * folder above it (a folder row's files, `inputs: folder:`); SIZE_MAX when
 * none.  Paths are compared as text. */
size_t sp_item_table_find(const sp_item_table_t *tab, const char *path);
void sp_item_table_free(sp_item_table_t *tab);

/* The table as strings (for an MPI broadcast), and back: *n strings,
 * malloc'd; unpack takes them as pack made them.  0, or SP_ENOMEM /
 * SP_EINVAL (not a packed table). */
int sp_item_table_pack(const sp_item_table_t *tab, char ***v, size_t *n);
int sp_item_table_unpack(char *const *v, size_t n, sp_item_table_t *tab);

/* g loaded again with row `row`'s values over its variables: the graph of
 * that row's items.  Its stages must be g's (names, kinds, inputs: a value
 * may change parameters, never the pipeline's shape).  0 and *out, or
 * SP_EGRAPH with err naming the manifest's line, the column and the
 * graph's first diagnostic. */
int sp_graph_variant(const sp_graph_t *g, const sp_item_table_t *tab, size_t row,
		     sp_graph_t **out, struct sp_err *err);

/* Marks in wide[nstages] the stages that run once per batch: a kind that
 * does not tile, no output file, no per-item variable that names one item
 * (${item}, ${stem}, ${index}) in its parameters, and inputs from such
 * stages only.  Their value is shared by every item of the batch that has
 * the same expanded parameters (${item.dir}, ${header.KEY} and a
 * manifest's columns may differ between items). */
void sp_graph_batch_wide(const sp_graph_t *g, unsigned char *wide);

/* Writes the pipeline as Graphviz DOT: each stage with its kind, where it
 * may run, its tile and priority, and whether it runs once per batch. */
void sp_graph_dot(const sp_graph_t *g, FILE *f);

/* The stage parameter `name` of st (its spec must exist: asserts). */
const sp_gparam_t *sp_gstage_param(const sp_gstage_t *st, const char *name);

/* The perf-model symbols of the codelets of g's stages (of every kind of reg
 * when g is NULL: `starpipe models` without a graph; g's own registry
 * otherwise, reg may be NULL), each once, in the kinds' order:
 * up to cap of them into syms, malloc'd (the caller frees each); returns
 * how many.  A kind lists its symbols space-separated (its `codelets`). */
size_t sp_graph_codelets(const sp_registry_t *reg, const sp_graph_t *g, char **syms, size_t cap);

/* The runtime: parameter `name` of g. */
const char *sp_graph_runtime(const sp_graph_t *g, const char *name);

/* The run's typed runtime parameters: over[i] (SP_RT_*; NULL: not given,
 * each already accepted by sp_param_check()), else g's runtime: section,
 * else the defaults.  The strings point into over or g. */
void sp_graph_runtime_params(const sp_graph_t *g, const char *const over[SP_RT_NPARAMS],
			     sp_runtime_params_t *out);

#endif /* SP_GRAPH_H */
