/* Child processes of starpipe tune and calibrate (child.h). */
#define _GNU_SOURCE
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int sp_child_run(char *const *argv, const char *log, void (*setup)(void *), void *arg,
		 const char *who, volatile sig_atomic_t *stop, int *forwarded, int *wstatus)
{
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		if (setup != NULL)
			setup(arg);
		execv(argv[0], argv);
		fprintf(stderr, "%s: cannot run %s: %s\n", who, argv[0], strerror(errno));
		_exit(127);
	}
	if (pid < 0)
		return -1;
	/* A kill of the parent alone stops its child too.  A child that ended
	 * before the signal came is a complete run. */
	*forwarded = 0;
	*wstatus = 0;
	for (;;) {
		if (*stop && !*forwarded) {
			kill(pid, *stop);
			*forwarded = 1;
		}
		if (waitpid(pid, wstatus, 0) >= 0 || errno != EINTR)
			break;
	}
	return 0;
}
