/* The clocks every layer times with: monotonic wall time and a thread's CPU time. */
#ifndef SP_CLOCK_H
#define SP_CLOCK_H

#include <time.h>

/* Monotonic seconds (an arbitrary origin: for differences). */
static inline double sp_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The calling thread's CPU time (user + system), seconds; 0 if unknown. */
static inline double sp_thread_cpu_s(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0.0;
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
