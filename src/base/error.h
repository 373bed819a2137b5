/* Error codes of starpipe: one table generates the enum and sp_strerror(). */
#ifndef SP_ERROR_H
#define SP_ERROR_H

#include <stdarg.h>
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
	X(ENOTCONV, "iteration did not converge")                         \
	X(ETIMEDOUT, "timed out")

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
 * returns code, so that callers can write `return sp_seterr(err, ...)`.
 * A message longer than err->msg is shortened as sp_fmt_fit() does, so the
 * reason at its end survives a long path.  The arguments may point into
 * err->msg itself. */
int sp_seterr(sp_err_t *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* snprintf that keeps both ends of a message too long for buf (size bytes,
 * at least 16): the middle of its longest word (a run without spaces or
 * quotes, typically a path) is replaced by "...", or if that is not enough,
 * the middle of the message.  Cuts fall between UTF-8 characters.  Returns
 * the length written. */
size_t sp_fmt_fit(char *buf, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* sp_fmt_fit() with a va_list. */
size_t sp_vfmt_fit(char *buf, size_t size, const char *fmt, va_list ap);

#endif /* SP_ERROR_H */
