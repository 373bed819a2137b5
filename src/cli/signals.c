/* The stop signals of a batch: handled from a thread, not from the handler. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "fsutil.h"
#include "run.h"


/*
 * Signals.  The handler of SIGINT, SIGTERM, SIGHUP and SIGUSR1 only writes
 * the signal's number to a pipe (async-signal-safe, whichever thread takes
 * it: OpenBLAS starts threads before main, so masks cannot route signals);
 * one thread reads the pipe and stops the batch from ordinary code: no new
 * item starts, the items in flight are cancelled (their temporaries removed,
 * previous outputs untouched), the report is written, and the exit status
 * says which signal.  A second signal exits at once; the next run removes
 * the dead run's temporaries.
 */
static int sig_pipe[2] = { -1, -1 };

static void on_stop_signal(int sig)
{
	int e = errno;
	unsigned char b = (unsigned char)sig;
	(void)!write(sig_pipe[1], &b, 1);
	errno = e;
}

static int install_stop_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1 };
	if (pipe2(sig_pipe, O_CLOEXEC) != 0)
		return -1;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigaction(sigs[i], &sa, NULL) != 0)
			return -1;
	return 0;
}

/* How long the items in flight get to end after a stop signal (seconds,
 * STARPIPE_STOP_GRACE_S, default 1.5, so that a
 * stop signal ends a run within 2 s): long kernels poll the stop request
 * (cancel.h), so they end well within it; a task that does not (a library
 * call that cannot be interrupted) must not keep the batch alive past it. */
static int grace_ms(void)
{
	const char *e = getenv("STARPIPE_STOP_GRACE_S");
	char *end;
	double s = e != NULL ? strtod(e, &end) : 1.5;
	if (e != NULL && (end == e || *end != '\0' || !(s > 0) || s > 86400))
		s = 1.5;
	return (int)(s * 1000);
}

/* Exits now: every temporary removed (no final name is touched, no output
 * set is left half renamed), no exit handler run (they would wait for the
 * workers). */
static void exit_now(int sig, const char *why)
{
	char msg[200];
	int len = snprintf(msg, sizeof msg, "starpipe: %s: exiting now\n", why);
	(void)!write(STDERR_FILENO, msg, (size_t)len);
	sp_outset_remove_live();
	_exit(sig == SIGINT || sig == SIGTERM ? 128 + sig : EXIT_INTERRUPTED);
}

static void *signal_main(void *arg)
{
	(void)arg;
	int n = 0, first = 0;
	for (;;) {
		unsigned char b;
		if (n > 0) {
			struct pollfd pf = { .fd = sig_pipe[0], .events = POLLIN };
			int r = poll(&pf, 1, grace_ms());
			if (r < 0 && errno == EINTR)
				continue;
			if (r == 0) {
				char why[120];
				snprintf(why, sizeof why, "SIG%s: items still running %.1f s after it",
					 sigabbrev_np(first), grace_ms() / 1000.0);
				exit_now(first, why);
			}
		}
		ssize_t got = read(sig_pipe[0], &b, 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got != 1)
			return NULL;
		int sig = b;
		if (++n == 1) {
			first = sig;
			/* STARPIPE_TEST_IGNORE_STOP=1 (tests only): the batch is not
			 * told, as if its tasks could not be stopped, so that the
			 * grace is what ends the run */
			const char *deaf = getenv("STARPIPE_TEST_IGNORE_STOP");
			if (deaf != NULL && deaf[0] == '1')
				continue;
			char msg[160];
			int len = snprintf(msg, sizeof msg,
					   "starpipe: SIG%s: no new item; cancelling the items in flight "
					   "(again to exit at once)\n", sigabbrev_np(sig));
			(void)!write(STDERR_FILENO, msg, (size_t)len);
			sp_run_interrupt(sig);
		} else {
			exit_now(sig, "second signal");
		}
	}
	return NULL;
}

int cli_exit_for_signal(int sig)
{
	return sig == SIGINT || sig == SIGTERM ? 128 + sig : EXIT_INTERRUPTED;
}

void cli_catch_stop_signals(void)
{
#ifndef SP_SIMGRID /* a thread outside SimGrid's actors must not call StarPU there */
	pthread_t th;
	if (install_stop_signals() == 0 && pthread_create(&th, NULL, signal_main, NULL) == 0)
		pthread_detach(th);
#else
	(void)install_stop_signals;
	(void)signal_main;
#endif
}
