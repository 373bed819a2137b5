/* A batch over the ranks of an Open MPI job: one starpipe process per node,
 * items handed out on request by a dispatcher thread on rank 0.
 *
 * Without MPI (configure --without-mpi, or a process not started by
 * mpirun/srun) every function here is the one-process case: rank 0 of 1,
 * items taken from a local counter, reductions that copy.  Nothing here
 * includes starpu.h. */
#ifndef SP_CLUSTER_H
#define SP_CLUSTER_H

#include <stddef.h>

#include "error.h"

/* Starts MPI when this process was launched by mpirun or srun (Open MPI's,
 * PMIx's, PMI's or Cray PALS's environment variables), with
 * MPI_THREAD_SERIALIZED; does nothing otherwise.  Returns 0, or SP_EIO with
 * err set when MPI refused, or when srun started several tasks but MPI sees
 * one rank (a PMI the library does not read; MPI is finalized again). */
int sp_cluster_init(int *argc, char ***argv, sp_err_t *err);
/* "cluster mode: Open MPI 4.1.4 (mpirun/srun)" or "cluster mode: none
 * (built without MPI; --shard splits batches)". */
const char *sp_cluster_describe(void);
/* MPI_Finalize when sp_cluster_init started MPI, after a barrier (every rank
 * calls it); safe to call twice. */
void sp_cluster_finalize(void);
/* Ends every rank of an MPI job with this exit code (MPI_Abort), when this
 * rank cannot go on and the others would wait for it; nothing otherwise. */
void sp_cluster_abort(int code);
int sp_cluster_rank(void);
int sp_cluster_size(void);
/* This rank's host name (for the report). */
const char *sp_cluster_host(void);
/* This rank's place among the ranks on its node (MPI_COMM_TYPE_SHARED);
 * 0 of 1 without MPI. */
void sp_cluster_local(int *rank, int *size);

/* ---- dynamic dispatch of item indices 0..n-1 ----
 * want(i) says whether item i is to be run at all (a --shard); stopped()
 * says whether the batch was interrupted (then no more items are handed
 * out).  Every rank calls start, then next() from any number of threads,
 * then end(); next() returns SIZE_MAX when there is nothing left.  Rank 0
 * answers other ranks' requests from a thread that sleeps between polls
 * (it does not spin on a core StarPU's workers need). */
int sp_dispatch_start(size_t nitems, int (*want)(size_t i, void *arg), void *arg,
		      int (*stopped)(void), sp_err_t *err);
size_t sp_dispatch_next(void);
void sp_dispatch_end(void);
/* The dispatcher's mean time to answer a request, in seconds (rank 0). */
double sp_dispatch_mean_answer_s(void);
/* A rank > 0's mean round trip of a request (send, wait, answer), in
 * seconds, over every request but the first (which also waits for rank 0
 * to start): the dispatch overhead an item pays there; 0 on rank 0. */
double sp_dispatch_mean_request_s(void);

/* ---- collectives (every rank calls them, in the same order) ---- */
/* Element-wise max over ranks, result on every rank. */
void sp_cluster_allmax_int(int *v, size_t n);
void sp_cluster_allmax_double(double *v, size_t n);
/* Every rank takes rank 0's status and, when it is 0, rank 0's item list
 * (the others' lists are freed and replaced).  Returns 0 or SP_ENOMEM. */
int sp_cluster_bcast_items(char ***items, size_t *nitems, int *status);
/* Rank 0 receives every rank's string (parts[r], malloc'd, parts itself
 * too); other ranks get NULL.  Returns 0 or SP_ENOMEM. */
int sp_cluster_gather_str(const char *s, char ***parts);
/* The lowest rank whose key (at most SP_CLUSTER_KEY_MAX characters; longer
 * ones compare by that prefix) is this rank's: ranks of one node type elect
 * the one that writes their performance models.  This rank's own without MPI. */
#define SP_CLUSTER_KEY_MAX 255
int sp_cluster_first_of(const char *key);
/* Waits until every rank has called it. */
void sp_cluster_barrier(void);

/* Removes the launcher's variables from this process's environment, so
 * that a `starpipe run` it starts (starpipe calibrate's runs) is a process
 * of its own, not a rank of the job that started this one. */
void sp_cluster_forget_launcher(void);

#endif /* SP_CLUSTER_H */
