/* Core-to-core latency (issue 26): how far apart the node's CPUs are.
 *
 * Two threads, one pinned to CPU `ref` and one to CPU j, hand a cache line
 * back and forth (each waits for the other's store): the time of one
 * hand-over is the latency of moving a line between the two cores.  On
 * one socket it is about the same for every pair (tens of ns); across two
 * sockets, or two chiplets of one, it is 2-3x that.  A VM that shows one
 * socket may still run its vCPUs on two: a second group of CPUs here says
 * so, and with it that one process's threads share data across the slow
 * link, which separate processes (bench/percore's kernels-alone copies)
 * do not.
 *
 * Usage: bench/c2c [REF [ROUNDS]]   (defaults: CPU 0, 100000 hand-overs)
 * Prints one line per CPU j of the process's affinity: the median of 5
 * timings of ROUNDS hand-overs, in ns per hand-over; then the groups: the
 * CPUs within 1.5x of the nearest, and the others.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Alignas(64) atomic_long line;
static long rounds = 100000;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* The far side: waits for each odd value and answers with the next. */
static void *answer(void *arg)
{
	int cpu = *(int *)arg;
	if (pin(cpu) != 0)
		return (void *)1;
	for (long i = 0; i < 6 * rounds; i++) {
		while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 1)
			;
		atomic_store_explicit(&line, 2 * i + 2, memory_order_release);
	}
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* ns per hand-over between ref (the calling thread) and cpu: the median
 * of 5 timings, after one warm-up of as many rounds; < 0 when a thread
 * cannot be pinned. */
static double latency(int ref, int cpu)
{
	pthread_t t;
	double ns[5];
	atomic_store(&line, 0);
	if (pin(ref) != 0 || pthread_create(&t, NULL, answer, &cpu) != 0)
		return -1;
	long v = 0;
	for (int k = 0; k < 6; k++) {
		double t0 = now();
		for (long i = 0; i < rounds; i++, v++) {
			atomic_store_explicit(&line, 2 * v + 1, memory_order_release);
			while (atomic_load_explicit(&line, memory_order_acquire) != 2 * v + 2)
				;
		}
		if (k > 0) /* the first is the warm-up */
			ns[k - 1] = (now() - t0) * 1e9 / (2.0 * (double)rounds);
	}
	void *rc;
	pthread_join(t, &rc);
	if (rc != NULL)
		return -1;
	qsort(ns, 5, sizeof ns[0], cmp_double);
	return ns[2];
}

int main(int argc, char **argv)
{
	int ref = argc > 1 ? atoi(argv[1]) : 0;
	if (argc > 2)
		rounds = atol(argv[2]);
	cpu_set_t mine;
	if (rounds < 1 || sched_getaffinity(0, sizeof mine, &mine) != 0 || !CPU_ISSET(ref, &mine)) {
		fprintf(stderr, "usage: c2c [REF [ROUNDS]]: REF a CPU this process may run on, "
				"ROUNDS >= 1\n");
		return 2;
	}
	int ncpu = 0, cpus[CPU_SETSIZE];
	double lat[CPU_SETSIZE], lo = 0;
	for (int j = 0; j < CPU_SETSIZE; j++) {
		if (j == ref || !CPU_ISSET(j, &mine))
			continue;
		double l = latency(ref, j);
		if (l < 0) {
			fprintf(stderr, "c2c: cannot pin threads to CPUs %d and %d\n", ref, j);
			return 1;
		}
		printf("cpu %d <-> cpu %d: %.0f ns per hand-over\n", ref, j, l);
		cpus[ncpu] = j;
		lat[ncpu++] = l;
		lo = ncpu == 1 || l < lo ? l : lo;
	}
	if (ncpu == 0) {
		printf("c2c: one CPU only: nothing to measure\n");
		return 0;
	}
	for (int far = 0; far <= 1; far++) {
		int n = 0;
		printf(far ? "farther than 1.5x the nearest:" : "within 1.5x of the nearest:");
		for (int k = 0; k < ncpu; k++)
			if ((lat[k] > 1.5 * lo) == far) {
				printf(" %d", cpus[k]);
				n++;
			}
		printf(n ? "\n" : " none\n");
	}
	return 0;
}
