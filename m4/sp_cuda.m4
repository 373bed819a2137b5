dnl SP_CHECK_CUDA: --enable-cuda[=auto|yes|no].  CUDA is on when nvcc is found
dnl and StarPU was built with CUDA (STARPU_USE_CUDA in starpu_config.h).
AC_DEFUN([SP_CHECK_CUDA], [
AC_ARG_ENABLE([cuda],
	[AS_HELP_STRING([--enable-cuda], [build the CUDA kernels (default: auto)])],
	[sp_enable_cuda=$enableval], [sp_enable_cuda=auto])
AC_ARG_VAR([NVCC], [CUDA compiler])
AC_ARG_VAR([NVCCFLAGS], [flags for nvcc])
AC_ARG_VAR([CUDA_HOME], [CUDA toolkit folder (default /usr/local/cuda)])
: ${CUDA_HOME:=/usr/local/cuda}
AS_IF([test "x$sp_enable_cuda" != xno], [
	AC_PATH_PROG([NVCC], [nvcc], [], [$PATH:$CUDA_HOME/bin])
	sp_save_CPPFLAGS=$CPPFLAGS
	CPPFLAGS="$CPPFLAGS $STARPU_CFLAGS"
	AC_MSG_CHECKING([whether StarPU was built with CUDA])
	AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <starpu_config.h>
#ifndef STARPU_USE_CUDA
#error no CUDA
#endif]], [])], [sp_starpu_cuda=yes], [sp_starpu_cuda=no])
	AC_MSG_RESULT([$sp_starpu_cuda])
	CPPFLAGS=$sp_save_CPPFLAGS
	AS_IF([test -n "$NVCC" && test "x$sp_starpu_cuda" = xyes], [sp_enable_cuda=yes], [
		AS_IF([test "x$sp_enable_cuda" = xyes],
		      [AC_MSG_ERROR([--enable-cuda needs nvcc and a CUDA-enabled StarPU (see tools/cuda-starpu)])])
		sp_enable_cuda=no])
])
AS_IF([test "x$sp_enable_cuda" = xyes], [
	AC_DEFINE([SP_HAVE_CUDA], [1], [CUDA kernels are built])
	: ${NVCCFLAGS:=-O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90}
	# -isystem: the toolkit's headers (cusparse.h, included by starpu.h) warn
	# about their own deprecated types; that is not ours to fix
	CUDA_CFLAGS="-isystem $CUDA_HOME/include"
	CUDA_LIBS="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcufft -lcusolver -lcublas -lcudart -lstdc++"
])
AC_SUBST([CUDA_CFLAGS])
AC_SUBST([CUDA_LIBS])
AM_CONDITIONAL([HAVE_CUDA], [test "x$sp_enable_cuda" = xyes])
])
