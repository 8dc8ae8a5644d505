# dense-mlp: see %reldir%/README.md. One .so, one plugin: dense-mlp. linear.h, linear.c,
# linear_ref.c and linear_cpu.c (the linear layer) are compiled into dense-mmoe.so and
# dense-sasrec.so too, mlp_ref.c (the L2 normalization) into the two head plugins.
plugin_LTLIBRARIES += %reldir%/dense-mlp.la
%canon_reldir%_dense_mlp_la_SOURCES = %reldir%/plugin.c %reldir%/mlp.h %reldir%/mlp.c \
	%reldir%/mlp_ref.c %reldir%/linear.h %reldir%/linear.c %reldir%/linear_ref.c \
	%reldir%/linear_cpu.c
%canon_reldir%_dense_mlp_la_CPPFLAGS = $(AM_CPPFLAGS)
%canon_reldir%_dense_mlp_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_dense_mlp_la_LIBADD = -lm
EXTRA_DIST += %reldir%/README.md tests/ref/dense_mlp.py

check_PROGRAMS += tests/test-dense-mlp
TESTS += tests/test-dense-mlp
tests_test_dense_mlp_SOURCES = tests/test-dense-mlp.c tests/dense-checks.h tests/dense-checks.c
tests_test_dense_mlp_LDADD = $(GRM_TEST_LIBS) -lm
