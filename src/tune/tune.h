/* starpipe tune: a sweep of runs over schedulers, worker counts and graph values. */
#ifndef SP_TUNE_H
#define SP_TUNE_H

#include <stdio.h>

/*
 * DESIGN: every configuration runs as `starpipe run` in a child process
 * (its own StarPU session; a crash is one failed row, not a lost sweep).
 * A child writes its figures (--figures: NAME<TAB>VALUE lines) and its task
 * timeline (--tasks); the parent only reads those text files, so it needs no
 * JSON parser and never starts StarPU itself.  Runs go repeat by repeat
 * (every configuration once, then again), so a machine's slow minute
 * spreads over all configurations instead of biasing one.  results.csv is
 * rewritten (atomically) after every run: an interrupted sweep keeps its
 * rows.  The summary ranks by median makespan but claims a difference only
 * where the runs show one (every run slower than every run of the fastest,
 * with 3 runs or more each: MIN_TESTED in tune.c); a simulated sweep is
 * deterministic, and its ranking says it is the models'.
 */

/* argv[0] is "tune"; exe is this program (for the children); takes_value
 * says which of run's options take the next argument (the command line's
 * table: they are passed on to every run).  Returns the exit status: 0
 * when every run worked, 1 when some failed, 2 bad usage. */
int sp_tune_main(int argc, char **argv, const char *exe, int (*takes_value)(const char *opt));

/* Writes to out the text of `starpipe models` (listing: what
 * sp_runtime_models() printed, its first line naming the folder), with
 * the entries that tools/sim-node wrote for a node without measuring them
 * (FOLDER/starpipe-estimated.tsv, for the host StarPU reads the models of)
 * flagged ESTIMATED, and a line counting them. */
void sp_tune_flag_estimated(const char *listing, FILE *out);

#endif /* SP_TUNE_H */
