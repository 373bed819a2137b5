dnl SP_CHECK_CUDA: --enable-cuda[=auto|yes|no].  CUDA is on when nvcc is found
dnl and StarPU was built with CUDA (STARPU_USE_CUDA in starpu_config.h).
AC_DEFUN([SP_CHECK_CUDA], [
AC_ARG_ENABLE([cuda],
	[AS_HELP_STRING([--enable-cuda], [build the CUDA kernels (default: auto)])],
	[sp_enable_cuda=$enableval], [sp_enable_cuda=auto])
AC_ARG_VAR([NVCC], [CUDA compiler])
AC_ARG_VAR([NVCCFLAGS], [flags for nvcc])
AC_ARG_VAR([CUDA_HOME], [CUDA toolkit folder (default: /usr, Debian's nvidia-cuda-toolkit, when it is installed; else /usr/local/cuda)])
dnl Debian's toolkit (nvidia-cuda-toolkit 11.8, the one StarPU is built
dnl against by tools/build-starpu --cuda) comes first: one CUDA runtime.
AS_IF([test -z "$CUDA_HOME"], [
	AS_IF([test -x /usr/lib/nvidia-cuda-toolkit/bin/nvcc], [CUDA_HOME=/usr], [CUDA_HOME=/usr/local/cuda])])
AS_IF([test "x$sp_enable_cuda" != xno], [
	AC_PATH_PROG([NVCC], [nvcc], [], [$CUDA_HOME/bin:$PATH])
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
		      [AC_MSG_ERROR([--enable-cuda needs nvcc and a CUDA-enabled StarPU (tools/build-starpu --cuda PREFIX, then --with-starpu=PREFIX)])])
		sp_enable_cuda=no])
])
AS_IF([test "x$sp_enable_cuda" = xyes], [
	AC_DEFINE([SP_HAVE_CUDA], [1], [CUDA kernels are built])
	dnl A100 and H100 code, and PTX for newer GPUs.
	: ${NVCCFLAGS:=-O3 -std=c++17 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90}
	AS_IF([test "x$CUDA_HOME" = x/usr], [
		dnl Debian's toolkit: headers and libraries in the system folders
		CUDA_CFLAGS=
		CUDA_LIBS="-lcufft -lcusolver -lcublas -lcudart -lstdc++"
	], [
		# -isystem: the toolkit's headers (cusparse.h, included by starpu.h) warn
		# about their own deprecated types; that is not ours to fix
		CUDA_CFLAGS="-isystem $CUDA_HOME/include"
		CUDA_LIBS="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcufft -lcusolver -lcublas -lcudart -lstdc++"
	])
	sp_nvcc_version=`$NVCC --version 2>/dev/null | sed -n 's/.*release \([[0-9.]]*\).*/\1/p'`
])
AC_SUBST([CUDA_CFLAGS])
AC_SUBST([CUDA_LIBS])
AM_CONDITIONAL([HAVE_CUDA], [test "x$sp_enable_cuda" = xyes])
])
