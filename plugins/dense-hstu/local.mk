# dense-hstu: see %reldir%/README.md. The HSTU layer as a dense block (MTGRBoost §2).
plugin_LTLIBRARIES += %reldir%/dense-hstu.la
# The linear layers are dense-mlp's (plugins/dense-mlp/linear.h), compiled in.
%canon_reldir%_dense_hstu_la_SOURCES = %reldir%/plugin.c %reldir%/hstu.h %reldir%/hstu.c \
	%reldir%/hstu_ref.c %reldir%/hstu_cpu.c \
	plugins/dense-mlp/linear.c plugins/dense-mlp/linear_ref.c plugins/dense-mlp/linear_cpu.c
%canon_reldir%_dense_hstu_la_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS) -I$(srcdir)/plugins/dense-mlp
# the elementwise loops vectorize (hstu.h, HSTU_VECTOR_CLONES); explicit -f flags hold
# whatever -O level CFLAGS names; no code here reads the floating-point exception flags
HSTU_VEC_CFLAGS = -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math
%canon_reldir%_dense_hstu_la_CFLAGS = $(AM_CFLAGS) $(HSTU_VEC_CFLAGS)
%canon_reldir%_dense_hstu_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_dense_hstu_la_LIBADD = $(BLAS_LIBS) -lm
EXTRA_DIST += %reldir%/README.md tests/ref/hstu.py bench/bench_hstu.py bench/bench_ref_train.py

# The test drives the plugin through its ops table and also links the layer's sources
# (hstu.c, hstu_ref.c, hstu_cpu.c) to call the kernels and the documented size functions.
check_PROGRAMS += tests/test-dense-hstu
TESTS += tests/test-dense-hstu
tests_test_dense_hstu_SOURCES = tests/test-dense-hstu.c %reldir%/hstu.c %reldir%/hstu_ref.c \
	%reldir%/hstu_cpu.c tests/dense-checks.h tests/dense-checks.c \
	plugins/dense-mlp/linear.c plugins/dense-mlp/linear_ref.c plugins/dense-mlp/linear_cpu.c
tests_test_dense_hstu_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS) -I$(srcdir)/%reldir% \
	-I$(srcdir)/plugins/dense-mlp
tests_test_dense_hstu_CFLAGS = $(AM_CFLAGS) $(HSTU_VEC_CFLAGS)
tests_test_dense_hstu_LDADD = $(GRM_TEST_LIBS) $(BLAS_LIBS) -lm

# bench/bench_hstu.py drives this C timing driver (built by `make bench`).
EXTRA_PROGRAMS += bench/bench-hstu
GRM_BENCH_BINS += bench/bench-hstu
bench_bench_hstu_SOURCES = bench/bench-hstu.c %reldir%/hstu.c %reldir%/hstu_ref.c \
	%reldir%/hstu_cpu.c \
	plugins/dense-mlp/linear.c plugins/dense-mlp/linear_ref.c plugins/dense-mlp/linear_cpu.c
bench_bench_hstu_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS) -I$(srcdir)/%reldir% -I$(srcdir)/tests \
	-I$(srcdir)/plugins/dense-mlp
bench_bench_hstu_CFLAGS = $(AM_CFLAGS) $(HSTU_VEC_CFLAGS)
bench_bench_hstu_LDADD = $(GRM_TEST_LIBS) $(BLAS_LIBS) -lm
