# reader-grmcol: see %reldir%/README.md. The format code (core/grmcol.c) is compiled into
# the plugin as well as into libgrmcore: plugins never link libgrmcore (STYLE.md §5.7).
plugin_LTLIBRARIES += %reldir%/reader-grmcol.la
%canon_reldir%_reader_grmcol_la_SOURCES = %reldir%/plugin.c %reldir%/colr.h \
	%reldir%/colr_ref.c %reldir%/colr_uv.c core/grmcol.h core/grmcol.c
%canon_reldir%_reader_grmcol_la_CPPFLAGS = $(AM_CPPFLAGS) $(UV_CFLAGS) $(ZSTD_CFLAGS) \
	$(XXHASH_CFLAGS)
%canon_reldir%_reader_grmcol_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_reader_grmcol_la_LIBADD = $(UV_LIBS) $(ZSTD_LIBS)
EXTRA_DIST += %reldir%/README.md

check_PROGRAMS += tests/test-grmcol tests/test-reader-grmcol
TESTS += tests/test-grmcol tests/test-reader-grmcol tests/test-convert.sh
tests_test_grmcol_SOURCES = tests/test-grmcol.c
tests_test_grmcol_CPPFLAGS = $(AM_CPPFLAGS) $(ZSTD_CFLAGS) $(XXHASH_CFLAGS)
tests_test_grmcol_LDADD = $(GRM_TEST_LIBS) $(ZSTD_LIBS)
tests_test_reader_grmcol_SOURCES = tests/test-reader-grmcol.c
tests_test_reader_grmcol_CPPFLAGS = $(AM_CPPFLAGS) $(ZSTD_CFLAGS) $(XXHASH_CFLAGS)
tests_test_reader_grmcol_LDADD = $(GRM_TEST_LIBS) $(ZSTD_LIBS)
EXTRA_DIST += tests/test-convert.sh tests/fuzz/run.sh tests/fuzz/fuzz_grmcol.c \
	tests/fuzz/fuzz_text.c tests/fuzz/README.md tests/fuzz/corpus-grmcol/empty.grmcol \
	tests/fuzz/corpus-grmcol/list-f32.grmcol tests/fuzz/corpus-grmcol/list-i64.grmcol \
	tests/fuzz/corpus-grmcol/types.grmcol tests/fuzz/corpus-text/csv-skip \
	tests/fuzz/corpus-text/movielens tests/fuzz/corpus-text/ssv-list-header \
	tests/fuzz/corpus-text/tsv-ratings tests/fuzz/corpus-text/tsv-str-list \
	tests/fuzz/corpus-text/tsv-zst

# bench/bench_read.py times readers through this driver (`make bench` only).
EXTRA_PROGRAMS += bench/bench-read
GRM_BENCH_BINS += bench/bench-read
bench_bench_read_SOURCES = bench/bench_read.c
bench_bench_read_LDADD = libgrmcore.la
EXTRA_DIST += bench/bench_read.py
