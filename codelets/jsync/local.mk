# The J-sync pipeline in the build (doc/jsync.md): included by Makefile.am, whose lists it extends; %D% is this folder.
SP_PIPELINES += jsync
SP_LIB_SOURCES += \
	%D%/jsync.h %D%/jsync_kern.h %D%/jsync_cpu_simd.h \
	%D%/jsync_cpu.c \
	%D%/jsync_glue.h \
	%D%/read_codelet.c \
	%D%/triplets_codelet.c \
	%D%/power_codelet.c \
	%D%/write_codelet.c
SP_CUDA_SOURCES += %D%/jsync_cuda.cu
SP_GRAPHS += graphs/jsync.yaml
EXTRA_DIST += doc/jsync.md bench/jsync bench/jsync_numpy_ref.py bench/jsync-plain.c

# the problem generator
bin_PROGRAMS += starpipe-jsync-gen
starpipe_jsync_gen_SOURCES = tools/jsync-gen.c tools/toolutil.h
starpipe_jsync_gen_LDADD = $(SP_LIBS)
AM_TESTS_ENVIRONMENT += JSYNC_GEN='$(abs_top_builddir)/starpipe-jsync-gen'; export JSYNC_GEN;

# tests: end to end, and the kernels against the slow reference (jsync_ref.c)
dist_check_SCRIPTS += tests/pipeline-jsync.test
SP_UNIT_TESTS += tests/test_jsync_cpu tests/test_jsync_kern tests/test_jsync_cuda
tests_test_jsync_cpu_SOURCES = tests/test_jsync_cpu.c %D%/jsync_ref.c %D%/jsync_ref.h
tests_test_jsync_cpu_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_jsync_cpu_LDADD = $(TEST_LIBS)
tests_test_jsync_kern_SOURCES = tests/test_jsync_kern.c %D%/jsync_ref.c %D%/jsync_ref.h
tests_test_jsync_kern_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_jsync_kern_LDADD = $(TEST_LIBS)
tests_test_jsync_cuda_SOURCES = tests/test_jsync_cuda.c %D%/jsync_ref.c
tests_test_jsync_cuda_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_jsync_cuda_LDADD = $(TEST_LIBS)

# benchmarks (not run by make check)
EXTRA_PROGRAMS += bench/jsync-kernels
bench_jsync_kernels_SOURCES = bench/jsync-kernels.c bench/benchutil.h %D%/jsync_ref.c
bench_jsync_kernels_LDADD = $(SP_LIBS)
