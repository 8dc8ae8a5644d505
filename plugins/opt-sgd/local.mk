# opt-sgd: see %reldir%/README.md (tests/test-opt is registered in plugins/opt-adam/local.mk)
plugin_LTLIBRARIES += %reldir%/opt-sgd.la
%canon_reldir%_opt_sgd_la_SOURCES = %reldir%/plugin.c %reldir%/sgd.h %reldir%/sgd_ref.c \
	$(OPT_GLUE_SOURCES)
%canon_reldir%_opt_sgd_la_CPPFLAGS = $(AM_CPPFLAGS) $(OPT_GLUE_CPPFLAGS)
%canon_reldir%_opt_sgd_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_opt_sgd_la_LIBADD =
EXTRA_DIST += %reldir%/README.md
