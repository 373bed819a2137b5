/* Stage kinds: the registry of what a graph file's `uses:` may name. */
#ifndef SP_STAGE_H
#define SP_STAGE_H

#include <stddef.h>

#include "error.h"

/*
 * DESIGN: a stage kind is static data (its parameters and typed ports, used
 * by the graph validator, `starpipe list` and the docs) plus one function
 * that expands the stage into StarPU tasks for one work item.  The graph
 * layer only reads the data; it never calls `run`, so it links and is tested
 * without StarPU.
 */

typedef enum {
	SP_PT_INT,    /* decimal integer, checked against [min, max] */
	SP_PT_FLOAT,  /* real number (strtod syntax), checked against [min, max] */
	SP_PT_BOOL,   /* true/false (also yes/no, on/off) */
	SP_PT_STRING, /* any text */
	SP_PT_PATH,   /* a file or directory name; may use ${item}, ${stem} */
	SP_PT_OUTPUT, /* an output file of the item, as PATH; "" when optional and
		       * not written.  Outputs are planned before the batch runs
		       * (collisions, --skip-existing) and written as one set. */
	SP_PT_ENUM,   /* one of the '|'-separated words in `choices` */
	SP_PT_SIZE    /* bytes, with optional K/M/G/T suffix (powers of 1024) */
} sp_ptype_t;

typedef struct sp_param_spec {
	const char *name;
	sp_ptype_t type;
	const char *def;     /* default, as text; NULL: the parameter is required */
	double min, max;     /* range for INT, FLOAT, SIZE; ignored when min > max */
	const char *choices; /* ENUM: "auto|store|recompute" */
	const char *help;    /* one line */
	size_t at;           /* SP_AT(struct, field): where the parsed value goes in
			      * the kind's typed parameters; 0: not there */
} sp_param_spec_t;

/*
 * Typed parameters: a kind may declare a struct of its parameters and give
 * each numeric, boolean, size or enum spec its field with SP_AT; the graph
 * loader parses and range-checks every value once and fills the struct
 * (sp_gstage_t.typed), so a stage reads `params->nspec` instead of looking
 * a name up and parsing text for every item.  Field types: INT long long,
 * FLOAT double, BOOL int, SIZE unsigned long long, ENUM int (the index of
 * the word in `choices`).  Path and string parameters may hold per-item
 * variables, so a stage reads them as text (sp_item_param()); a spec of
 * such a type with `at` set gets the text's pointer (const char *, not
 * copied: the runtime: section's scheduler and perfmodel_dir).
 */
#define SP_AT(type, field) (offsetof(type, field) + 1)

typedef struct sp_port_spec {
	const char *name;
	const char *type; /* connected ports must have equal types */
	const char *help;
} sp_port_spec_t;

enum { SP_IMPL_CPU = 1u << 0, SP_IMPL_CUDA = 1u << 1 };

/* The implementations of a kind whose codelets have CPU and CUDA functions:
 * CUDA only in a build configured with --enable-cuda, or in starpipe-sim
 * (simulated GPUs). */
#if defined(SP_HAVE_CUDA) || defined(SP_SIMGRID)
#define SP_IMPL_CPU_CUDA (SP_IMPL_CPU | SP_IMPL_CUDA)
#else
#define SP_IMPL_CPU_CUDA SP_IMPL_CPU
#endif

struct sp_item;
struct sp_gstage;
struct sp_value;

/* Expands one stage for one work item into tasks: `in` holds the values of
 * the kind's input ports (in spec order), `out` receives its outputs.  May
 * block (an iterative stage waits for its own tasks).  Returns 0 or SP_E*. */
typedef int (*sp_stage_run_fn)(struct sp_item *item,
			       const struct sp_gstage *stage,
			       struct sp_value *const *in, struct sp_value **out);

/*
 * Tiled submission (optional).  Stages whose kinds have run_tile and that
 * follow each other in the graph's order form a group.  The driver calls
 * run() of each stage of the group (it makes the output value; it submits
 * no tile), then, for tile t = 0, 1, ..., run_tile(t) of every stage of the
 * group in order, until the group's first stage returns SP_TILE_END.  Tile
 * t of every stage is submitted before tile t + 1 of any, so a stage may
 * take its buffers from a pool (tile t + W reusing tile t's) and StarPU
 * orders the reuse after tile t's readers, without a wait in the driver.
 * Returns 0, SP_TILE_END (first stage only: no tile t) or SP_E*.
 */
#define SP_TILE_END 1
typedef int (*sp_stage_tile_fn)(struct sp_item *item, const struct sp_gstage *stage,
				struct sp_value *const *in, struct sp_value *out, int tile);

/* A work item's memory estimate, built up stage by stage before it runs:
 * the read stage sets the problem size from the input's header, later
 * stages add what they allocate for it. */
typedef struct sp_estimate {
	double size;              /* J-sync: N images; APPLE, DESI: pixels of the image */
	unsigned long long bytes; /* peak host memory of the item so far */
	/* A lower bound of the bytes the item's outputs take on disk: an item
	 * whose output file system has less free is refused before it runs. */
	unsigned long long out_bytes;
} sp_estimate_t;

/* Whether the stage writes the file of its SP_PT_OUTPUT parameter `param`,
 * by its typed parameters (desi.model: only with model=true), so that the
 * run plans only the files it will write: collisions, --skip-existing, an
 * output that is not a regular file, the output folders and their free
 * space.  Without it, every non-empty expanded output is written. */
typedef int (*sp_stage_writes_fn)(const struct sp_gstage *stage, const char *param);

/* Checks an output file that exists, for --skip-existing: `path` is the
 * expansion of the stage's SP_PT_OUTPUT parameter `param`.  Outputs appear only complete (fsutil.h), but someone may have
 * truncated or damaged one since: returns 0 when the file is whole (its
 * format's structure parses, its size or checksums agree), or SP_E* with
 * err naming the file and what is wrong (the item is then recomputed). */
typedef int (*sp_stage_verify_fn)(const struct sp_gstage *stage, const char *param,
				  const char *path, sp_err_t *err);

/* Adds the stage's memory to e (optional).  May read input headers, never
 * data; returns 0, or SP_E* with err naming the file (the item then fails
 * before any of its tasks runs). */
typedef int (*sp_stage_estimate_fn)(struct sp_item *item, const struct sp_gstage *stage,
				    sp_estimate_t *e, sp_err_t *err);

typedef struct sp_stage_kind {
	const char *name; /* "jsync.read": pipeline, dot, stage */
	const char *help; /* one line */
	const sp_param_spec_t *params;
	size_t nparams;
	const sp_port_spec_t *inputs;
	size_t ninputs;
	const sp_port_spec_t *outputs;
	size_t noutputs;
	size_t params_size; /* sizeof the typed parameters; 0: none */
	unsigned impl; /* SP_IMPL_* bits compiled into this build */
	const char *codelets; /* its codelets' perf-model symbols, space-separated
			       * (`starpipe models`); "" when it runs none */
	const char *tile; /* what the graph's `tile:` counts, and its default;
			   * NULL: the kind does not tile */
	sp_stage_run_fn run;
	sp_stage_tile_fn run_tile;     /* NULL: run() submits everything */
	sp_stage_estimate_fn estimate; /* NULL: the stage's memory is negligible */
	sp_stage_writes_fn writes;     /* NULL: every non-empty SP_PT_OUTPUT is written */
	sp_stage_verify_fn verify;     /* NULL: an existing output is taken as whole */
} sp_stage_kind_t;

/* A kind's spec arrays with their lengths, for its designated initialiser:
 * `SP_KIND_PARAMS(my_params, struct my_params), SP_KIND_INPUTS(my_inputs),
 * ...` (lengths and sizes are never typed by hand).  SP_KIND_PARAMS names
 * the struct that the specs' SP_AT offsets point into, so the graph layer
 * allocates that struct's size; SP_KIND_TEXT_PARAMS is for a kind whose
 * parameters are all read as text (paths, outputs, strings: no SP_AT, no
 * typed struct, params_size 0).
 * sp_stage_kind_check() holds every offset against that size. */
#define SP__NELEMS(a) (sizeof(a) / sizeof((a)[0]))
#define SP_KIND_PARAMS(a, T) .params = (a), .nparams = SP__NELEMS(a), .params_size = sizeof(T)
#define SP_KIND_TEXT_PARAMS(a) .params = (a), .nparams = SP__NELEMS(a)
#define SP_KIND_INPUTS(a) .inputs = (a), .ninputs = SP__NELEMS(a)
#define SP_KIND_OUTPUTS(a) .outputs = (a), .noutputs = SP__NELEMS(a)

/*
 * The registry: what the graph layer knows of the layers above it, passed
 * in by whoever loads a graph (the command line builds it from the linked
 * kinds and the runtime; a unit test from its own kinds), so
 * that this layer calls nothing above it.
 */
typedef struct sp_registry {
	const sp_stage_kind_t *const *kinds; /* sorted by name */
	size_t nkinds;
	/* Whether `name` is a scheduler the runtime knows ("auto" and "" are):
	 * 0, or -1 with a one-line reason in msg (len bytes; 1024 holds a list
	 * of schedulers).  NULL: every name is taken. */
	int (*check_sched)(const char *name, char *msg, size_t len);
} sp_registry_t;

/* Whether kind's parameter specs fit its typed struct: every SP_AT field
 * inside params_size (SP_KIND_PARAMS's sizeof), none when params_size is 0.
 * 0, or -1 with the first misfit, naming the kind and the parameter, in msg
 * (len bytes).  A misfit is a bug in the kind, never the user's. */
int sp_stage_kind_check(const sp_stage_kind_t *kind, char *msg, size_t len);

/* The kind called `name` in reg, or NULL (binary search). */
const sp_stage_kind_t *sp_stage_find(const sp_registry_t *reg, const char *name);

/* The program's kinds: a program that has pipelines links a list of them
 * (codelets/kinds.c), which hands itself here when the program loads (a
 * constructor), so that the command line finds the kinds without naming
 * the layer above it.  sp_stage_kinds_linked() returns that list, sorted
 * by name, and its length in *n (NULL and 0 when none was linked). */
void sp_stage_kinds_link(const sp_stage_kind_t *const *kinds, size_t n);
const sp_stage_kind_t *const *sp_stage_kinds_linked(size_t *n);

/* The parameters accepted by a graph's `runtime:` section (and the
 * command line's --sched, --ncpus ...), typed as stage parameters are. */
enum sp_runtime_param {
	SP_RT_SCHEDULER,
	SP_RT_NCPUS,
	SP_RT_NCUDA,
	SP_RT_WORKERS_PER_GPU,
	SP_RT_PERFMODEL_DIR,
	SP_RT_CALIBRATE,
	SP_RT_LANES,
	SP_RT_CPU_LANE,
	SP_RT_NPARAMS
};
typedef struct sp_runtime_params {
	const char *scheduler;     /* "auto", or a StarPU policy */
	long long ncpus, ncuda;    /* -1: all */
	long long workers_per_gpu;
	const char *perfmodel_dir; /* "": the per-user default */
	long long calibrate;       /* 0, 1, 2 */
	int lanes;                 /* the index in "auto|off|on" (lanes.h's SP_LANES_*) */
	long long cpu_lane;        /* CPU workers of the CPU lane; -1: the default split */
} sp_runtime_params_t;
extern const sp_param_spec_t sp_runtime_params[SP_RT_NPARAMS];
extern const size_t sp_runtime_nparams;

/* Checks `text` against a parameter spec.  Returns 0, or SP_EINVAL with a
 * message such as "expected an integer in [1, 100000], got '0'" in msg. */
int sp_param_check(const sp_param_spec_t *spec, const char *text, char *msg,
		   size_t msglen);

/* Fills the typed parameters `out` (params_size bytes, zeroed) from the
 * texts of the n specs' values, each already accepted by sp_param_check().
 * Specs whose `at` is 0 are skipped. */
void sp_params_fill(const sp_param_spec_t *specs, size_t n, const char *const *texts, void *out);

/* Parses a value already accepted by sp_param_check(). */
long long sp_param_int(const char *text);
double sp_param_float(const char *text);
int sp_param_bool(const char *text);
unsigned long long sp_param_size(const char *text);

#endif /* SP_STAGE_H */
