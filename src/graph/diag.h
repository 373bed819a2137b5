/* Internal to the graph files: "did you mean" suggestions and names cut for messages. */
#ifndef SP_DIAG_H
#define SP_DIAG_H

#include <stddef.h>

/*
 * The diagnostic list itself (sp_diag_t, sp_diag_init/add/print/free) is
 * public and declared in graph.h; diag.c defines it along with these.
 */

#define SP__NAME_MAX 64 /* bytes of a name echoed in a message */

/* word[0..n) for a message, cut to SP__NAME_MAX bytes (at a character
 * boundary, "..." added) if longer: in buf, which holds SP__NAME_MAX + 4
 * bytes, or word itself when it is whole and short. */
const char *sp__diag_clipn(char *buf, const char *word, size_t n);

/* The same for a whole string, looking at no more of it than needed. */
const char *sp__diag_clip(char *buf, const char *word);

/* " (did you mean 'x'?)" into buf (len bytes), x being the candidate
 * closest to word among cand[0..n), cut for a message; "" when none is
 * close enough.  *budget bounds the work over a whole file (characters
 * compared); once spent, nothing more is suggested. */
const char *sp__diag_dym(long long *budget, char *buf, size_t len, const char *word,
			 const char *const *cand, size_t n);

#endif /* SP_DIAG_H */
