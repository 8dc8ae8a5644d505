# dense-sasrec: see %reldir%/README.md. One SASRec self-attention block per instance.
# The linear layer is dense-mlp's (plugins/dense-mlp/linear.h, linear_ref.c, linear_cpu.c),
# compiled into this .so as well; that directory's local.mk distributes it.
plugin_LTLIBRARIES += %reldir%/dense-sasrec.la
%canon_reldir%_dense_sasrec_la_SOURCES = %reldir%/plugin.c %reldir%/sasrec.h \
	%reldir%/sasrec.c %reldir%/sasrec_ref.c %reldir%/sasrec_cpu.c \
	plugins/dense-mlp/linear_ref.c plugins/dense-mlp/linear_cpu.c
%canon_reldir%_dense_sasrec_la_CPPFLAGS = $(AM_CPPFLAGS) \
	-I$(srcdir)/plugins/dense-mlp
%canon_reldir%_dense_sasrec_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_dense_sasrec_la_LIBADD = -lm
EXTRA_DIST += %reldir%/README.md tests/ref/sasrec.py

check_PROGRAMS += tests/test-dense-sasrec
TESTS += tests/test-dense-sasrec
tests_test_dense_sasrec_SOURCES = tests/test-dense-sasrec.c tests/dense-checks.h \
	tests/dense-checks.c
tests_test_dense_sasrec_LDADD = $(GRM_TEST_LIBS) -lm
