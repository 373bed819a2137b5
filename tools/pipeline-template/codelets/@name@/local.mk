# The @name@ pipeline in the build (doc/@name@.md): included by Makefile.am, whose lists it extends; %D% is this folder.
SP_PIPELINES += @name@
SP_LIB_SOURCES += \
	%D%/@name@_kern.h \
	%D%/scale.h %D%/scale_cpu.c \
	%D%/@name@_glue.h \
	%D%/read_codelet.c \
	%D%/scale_codelet.c \
	%D%/write_codelet.c
# A CUDA twin of a kernel goes here (SP_CUDA_SOURCES += %D%/scale_cuda.cu),
# with SP_CUDA(fn) in its SP_CODELET (doc/adding-a-pipeline.md).
SP_GRAPHS += graphs/@name@.yaml
EXTRA_DIST += doc/@name@.md

# tests: end to end, and the kernel against a reference
dist_check_SCRIPTS += tests/pipeline-@name@.test
SP_UNIT_TESTS += tests/test_@name@_scale
tests_test_@name@_scale_SOURCES = tests/test_@name@_scale.c
tests_test_@name@_scale_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_@name@_scale_LDADD = $(TEST_LIBS)
