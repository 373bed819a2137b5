/* Child processes: a run of starpipe started with its output in a log, waited for, a stop signal passed on. */
#ifndef SP_CHILD_H
#define SP_CHILD_H

#include <signal.h>

/*
 * Runs argv (argv[0] exec'd as it is) as a child whose stdout and stderr go
 * to `log` (created or truncated); in the child, setup(arg) runs first when
 * not NULL (its environment).  Waits for it.  When *stop becomes non-zero
 * while it runs (the caller's SIGINT/SIGTERM handler sets it; the wait is
 * interrupted), the child gets that signal too, once, and *forwarded is set.
 * Returns 0 with the child's wait status in *wstatus, or -1 (errno) when
 * it could not be started; a child that cannot exec says so in its log,
 * prefixed by `who`, and exits 127.
 */
int sp_child_run(char *const *argv, const char *log, void (*setup)(void *), void *arg,
		 const char *who, volatile sig_atomic_t *stop, int *forwarded, int *wstatus);

#endif /* SP_CHILD_H */
