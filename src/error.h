/* Error codes of starpipe: one table generates the enum and sp_strerror(). */
#ifndef SP_ERROR_H
#define SP_ERROR_H

#include <stddef.h>

/*
 * DESIGN: as in libuv, functions return 0 on success or a negative SP_E*
 * code.  Errors that need context (a file name, a line) also fill an
 * sp_err_t, which carries the code and one human-readable line.  Errors
 * from StarPU, CFITSIO, CUDA and the C library are wrapped at the boundary,
 * keeping their own message in the line.
 */
#define SP_ERRNO_MAP(X)                                                   \
	X(EINVAL, "invalid argument")                                     \
	X(ENOMEM, "out of memory")                                        \
	X(EIO, "input/output error")                                      \
	X(ENOENT, "no such file or directory")                            \
	X(EFORMAT, "malformed or unsupported file format")                \
	X(ESHAPE, "array has the wrong shape or type")                    \
	X(ENONFINITE, "non-finite value in input")                        \
	X(EGRAPH, "invalid pipeline graph")                               \
	X(ESTARPU, "StarPU error")                                        \
	X(ECUDA, "CUDA error")                                            \
	X(ENODEV, "no device can run this task")                          \
	X(ECANCELED, "operation canceled")                                \
	X(ENOTCONV, "iteration did not converge")

typedef enum {
	SP_OK = 0,
	SP__ERRBASE = -1000, /* keep clear of -errno values */
#define SP__ERR_ENUM(name, msg) SP_##name,
	SP_ERRNO_MAP(SP__ERR_ENUM)
#undef SP__ERR_ENUM
	SP__ERRLAST
} sp_errno_t;

/* The text of an SP_E* code, or "unknown error". */
const char *sp_strerror(int code);

/* The symbolic name of an SP_E* code ("EINVAL"), or "UNKNOWN". */
const char *sp_err_name(int code);

/* One error with its context: the code and one line of text, for the user. */
typedef struct sp_err {
	int code;
	char msg[512];
} sp_err_t;

/* Records code and a printf-style message in err (if err is not NULL) and
 * returns code, so that callers can write `return sp_seterr(err, ...)`. */
int sp_seterr(sp_err_t *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* SP_ERROR_H */
