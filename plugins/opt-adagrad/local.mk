# opt-adagrad: see %reldir%/README.md
plugin_LTLIBRARIES += %reldir%/opt-adagrad.la
%canon_reldir%_opt_adagrad_la_SOURCES = %reldir%/plugin.c %reldir%/adagrad.h \
	%reldir%/adagrad_ref.c $(OPT_GLUE_SOURCES)
%canon_reldir%_opt_adagrad_la_CPPFLAGS = $(AM_CPPFLAGS) $(OPT_GLUE_CPPFLAGS)
%canon_reldir%_opt_adagrad_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_opt_adagrad_la_LIBADD = -lm
EXTRA_DIST += %reldir%/README.md tests/ref/opt_adagrad.py

check_PROGRAMS += tests/test-opt-adagrad
TESTS += tests/test-opt-adagrad
tests_test_opt_adagrad_SOURCES = tests/test-opt-adagrad.c
tests_test_opt_adagrad_LDADD = $(GRM_TEST_LIBS) -lm
