# emb-static: see %reldir%/README.md
plugin_LTLIBRARIES += %reldir%/emb-static.la
%canon_reldir%_emb_static_la_SOURCES = %reldir%/plugin.c %reldir%/emb_static.h \
	%reldir%/emb_static_ref.c %reldir%/emb_static_cpu.c
%canon_reldir%_emb_static_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_emb_static_la_LIBADD = -lm
EXTRA_DIST += %reldir%/README.md

check_PROGRAMS += tests/test-emb-static
TESTS += tests/test-emb-static
tests_test_emb_static_SOURCES = tests/test-emb-static.c tests/emb-fakes.h tests/emb-fakes.c
tests_test_emb_static_LDADD = $(GRM_TEST_LIBS) -lm
