# reader-text: see %reldir%/README.md
plugin_LTLIBRARIES += %reldir%/reader-text.la
%canon_reldir%_reader_text_la_SOURCES = %reldir%/plugin.c %reldir%/text.h \
	%reldir%/text_ref.c %reldir%/text_src.c
%canon_reldir%_reader_text_la_CPPFLAGS = $(AM_CPPFLAGS) $(ZSTD_CFLAGS)
%canon_reldir%_reader_text_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_reader_text_la_LIBADD = $(ZSTD_LIBS)
EXTRA_DIST += %reldir%/README.md

check_PROGRAMS += tests/test-reader-text
TESTS += tests/test-reader-text
tests_test_reader_text_SOURCES = tests/test-reader-text.c
tests_test_reader_text_CPPFLAGS = $(AM_CPPFLAGS) $(ZSTD_CFLAGS)
tests_test_reader_text_LDADD = $(GRM_TEST_LIBS) $(ZSTD_LIBS)
