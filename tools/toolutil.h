/* Helpers shared by the generators and simulators in tools/: strict number parsing, usage errors. */
#ifndef SP_TOOLUTIL_H
#define SP_TOOLUTIL_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Prints "PROG: <fmt with arg>" and the usage text on stderr; returns 2,
 * the exit status of a usage error. */
static inline int tool_bad_usage(const char *prog, const char *usage, const char *fmt,
				 const char *arg)
{
	fprintf(stderr, "%s: ", prog);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n%s", usage);
	return 2;
}

/* Parses a whole-string number into *x within [lo, hi]; 1 on success. */
static inline int tool_number(const char *s, double lo, double hi, double *x)
{
	char *end;
	errno = 0;
	*x = strtod(s, &end);
	return *s != '\0' && *end == '\0' && errno == 0 && isfinite(*x) && *x >= lo && *x <= hi;
}

/* The same for an integer value. */
static inline int tool_integer(const char *s, double lo, double hi, int *v)
{
	double x;
	if (!tool_number(s, lo, hi, &x) || x != floor(x))
		return 0;
	*v = (int)x;
	return 1;
}

#endif /* SP_TOOLUTIL_H */
