/* The stop signals of a batch: handled from a thread, not from the handler. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
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

static void *signal_main(void *arg)
{
	(void)arg;
	int n = 0;
	for (;;) {
		unsigned char b;
		ssize_t got = read(sig_pipe[0], &b, 1);
		if (got < 0 && errno == EINTR)
			continue;
		if (got != 1)
			return NULL;
		int sig = b;
		if (++n == 1) {
			char msg[160];
			int len = snprintf(msg, sizeof msg,
					   "starpipe: SIG%s: no new item; cancelling the items in flight "
					   "(again to exit at once)\n", sigabbrev_np(sig));
			(void)!write(STDERR_FILENO, msg, (size_t)len);
			sp_run_interrupt(sig);
		} else {
			static const char msg[] = "starpipe: second signal: exiting now\n";
			(void)!write(STDERR_FILENO, msg, sizeof msg - 1);
			_exit(sig == SIGINT || sig == SIGTERM ? 128 + sig : EXIT_INTERRUPTED);
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
