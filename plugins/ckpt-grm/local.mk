# ckpt-grm: see %reldir%/README.md
plugin_LTLIBRARIES += %reldir%/ckpt-grm.la
%canon_reldir%_ckpt_grm_la_SOURCES = %reldir%/plugin.c %reldir%/ckpt_grm.h \
	%reldir%/ckpt_grm_save.c %reldir%/ckpt_grm_load.c $(CKPT_FILE_SOURCES)
%canon_reldir%_ckpt_grm_la_CPPFLAGS = $(AM_CPPFLAGS) $(CKPT_FILE_CPPFLAGS) $(ZSTD_CFLAGS) \
	$(XXHASH_CFLAGS)
%canon_reldir%_ckpt_grm_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_ckpt_grm_la_LIBADD = $(ZSTD_LIBS) $(XXHASH_LIBS)
EXTRA_DIST += %reldir%/README.md

check_PROGRAMS += tests/test-ckpt-grm
TESTS += tests/test-ckpt-grm
tests_test_ckpt_grm_SOURCES = tests/test-ckpt-grm.c tests/ckpt_rows.h
tests_test_ckpt_grm_CPPFLAGS = $(AM_CPPFLAGS) $(ZSTD_CFLAGS) $(XXHASH_CFLAGS)
tests_test_ckpt_grm_LDADD = $(GRM_TEST_LIBS) $(ZSTD_LIBS) $(XXHASH_LIBS)
