/* Internal to the graph files (graph*.c, diag.c): helpers they share; not installed. */
#ifndef SP_GRAPH_INT_H
#define SP_GRAPH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "diag.h"
#include "error.h"
#include "graph.h"

/*
 * Every name with external linkage here starts with sp__, so that nothing
 * of the loader's insides can clash with a program linking libstarpipe.a.
 */

/* --- graph_util.c: memory (abort when out of it), strings, hash map ------ */

void *sp__xrealloc(void *p, size_t n);
void *sp__xcalloc(size_t n, size_t size);
char *sp__xstrndup(const char *s, size_t n);
char *sp__xstrdup(const char *s);

/* A growable string. */
typedef struct {
	char *s;
	size_t len, cap;
} sbuf_t;

void sp__sb_addn(sbuf_t *b, const char *s, size_t n);
void sp__sb_add(sbuf_t *b, const char *s);
/* The string (b->s, or "" if nothing was added), which b gives up. */
char *sp__sb_take(sbuf_t *b);

/* An open-addressing hash table from byte strings to indices.  Keys are
 * not copied: they live in the YAML document or in the stages. */
typedef struct {
	struct smap_slot {
		const char *key; /* NULL: empty */
		size_t len, val;
	} *v;
	size_t cap, n; /* cap: 0 or a power of two */
} smap_t;

/* The value of key, or SIZE_MAX. */
size_t sp__smap_get(const smap_t *m, const char *key, size_t len);
/* Adds key -> val unless key is there; returns the value already there,
 * or SIZE_MAX after adding. */
size_t sp__smap_add(smap_t *m, const char *key, size_t len, size_t val);
void sp__smap_free(smap_t *m);

/* Why sp_fopen_regular() refused path, without the path it starts with. */
const char *sp__open_reason(const char *path, const sp_err_t *e);

/* --- graph_items.c: the per-item builtins -------------------------------- */

#define SP__NBUILTINS 5

/* ${item}, ${stem}, ${index}, ${item.dir}, by name, and "header.KEY" (for
 * messages: a header reference is ${header.KEY} or ${header.KEY:08d}). */
extern const char *const sp__graph_builtins[SP__NBUILTINS];

/* Whether s[0..n) names a builtin (a well-formed header reference included). */
int sp__graph_is_builtin(const char *s, size_t n);

/* Whether text t holds a per-item builtin (then its literal '$' are `$$`). */
int sp__graph_has_builtin(const char *t);

/* Whether t holds ${item}, ${stem} or ${index}: a value of one item alone. */
int sp__graph_names_item(const char *t);

/* --- graph_topo.c -------------------------------------------------------- */

/* sp_ginput_t.stage of an input not (or not validly) connected. */
#define NOT_CONNECTED SIZE_MAX

/* Sorts the stages topologically (among ready stages, file order first)
 * into order[]; reports each cycle once into d.  Returns the number sorted
 * (n when there is no cycle). */
size_t sp__graph_toposort(sp_diag_t *d, sp_gstage_t *all, size_t n, size_t *order);

/* --- graph_model.c ------------------------------------------------------- */

void sp__graph_free_params(sp_gparam_t *p, size_t n);
/* Frees what st holds, not st. */
void sp__graph_free_stage(sp_gstage_t *st);

#endif /* SP_GRAPH_INT_H */
