# dense-mlp: see %reldir%/README.md. One .so, three plugins: dense-mlp, dense-bce,
# dense-sampled-softmax. linear.h, linear.c, linear_ref.c and linear_cpu.c (the linear layer)
# are compiled into dense-mmoe.so too (plugins/dense-mmoe/local.mk).
plugin_LTLIBRARIES += %reldir%/dense-mlp.la
%canon_reldir%_dense_mlp_la_SOURCES = %reldir%/plugin.c %reldir%/mlp.h %reldir%/mlp.c \
	%reldir%/mlp_ref.c %reldir%/linear.h %reldir%/linear.c %reldir%/linear_ref.c \
	%reldir%/linear_cpu.c %reldir%/heads.c %reldir%/heads_ref.c %reldir%/heads_cpu.c
%canon_reldir%_dense_mlp_la_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS)
%canon_reldir%_dense_mlp_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_dense_mlp_la_LIBADD = $(BLAS_LIBS) -lm
EXTRA_DIST += %reldir%/README.md tests/ref/dense_mlp.py tests/ref/heads_bce.py

check_PROGRAMS += tests/test-dense-mlp tests/test-dense-heads
TESTS += tests/test-dense-mlp tests/test-dense-heads
tests_test_dense_mlp_SOURCES = tests/test-dense-mlp.c tests/dense-checks.h tests/dense-checks.c
tests_test_dense_mlp_LDADD = $(GRM_TEST_LIBS) -lm
tests_test_dense_heads_SOURCES = tests/test-dense-heads.c tests/dense-checks.h \
	tests/dense-checks.c
tests_test_dense_heads_LDADD = $(GRM_TEST_LIBS) -lm
