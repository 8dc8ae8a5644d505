# opt-adam: see %reldir%/README.md
plugin_LTLIBRARIES += %reldir%/opt-adam.la
%canon_reldir%_opt_adam_la_SOURCES = %reldir%/plugin.c %reldir%/adam.h %reldir%/adam_ref.c \
	$(OPT_GLUE_SOURCES)
%canon_reldir%_opt_adam_la_CPPFLAGS = $(AM_CPPFLAGS) $(OPT_GLUE_CPPFLAGS)
# sqrtf without errno (nothing here reads errno): a call that may set it keeps the update
# loop scalar (adam_ref.c)
%canon_reldir%_opt_adam_la_CFLAGS = $(AM_CFLAGS) -fno-math-errno
%canon_reldir%_opt_adam_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_opt_adam_la_LIBADD = -lm
EXTRA_DIST += %reldir%/README.md

# tests/test-opt covers opt-adam and opt-sgd
check_PROGRAMS += tests/test-opt
TESTS += tests/test-opt
tests_test_opt_SOURCES = tests/test-opt.c
tests_test_opt_LDADD = $(GRM_TEST_LIBS) -lm
