# dense-mmoe: see %reldir%/README.md (MTGRBoost §2 eq. 4, multi-gate mixture of experts).
# The linear layer is dense-mlp's (plugins/dense-mlp/linear.h, linear.c, linear_ref.c,
# linear_cpu.c), compiled into this .so as well; that directory's local.mk distributes it.
plugin_LTLIBRARIES += %reldir%/dense-mmoe.la
%canon_reldir%_dense_mmoe_la_SOURCES = %reldir%/plugin.c %reldir%/mmoe.h %reldir%/mmoe.c \
	%reldir%/mmoe_ref.c plugins/dense-mlp/linear.c plugins/dense-mlp/linear_ref.c \
	plugins/dense-mlp/linear_cpu.c
%canon_reldir%_dense_mmoe_la_CPPFLAGS = $(AM_CPPFLAGS) \
	-I$(srcdir)/plugins/dense-mlp
%canon_reldir%_dense_mmoe_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_dense_mmoe_la_LIBADD = -lm
EXTRA_DIST += %reldir%/README.md tests/ref/mmoe.py tests/ref/heads.py

check_PROGRAMS += tests/test-dense-mmoe
TESTS += tests/test-dense-mmoe
tests_test_dense_mmoe_SOURCES = tests/test-dense-mmoe.c tests/dense-checks.h \
	tests/dense-checks.c
tests_test_dense_mmoe_LDADD = $(GRM_TEST_LIBS) -lm
