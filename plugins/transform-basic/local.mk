# transform-basic: see %reldir%/README.md
plugin_LTLIBRARIES += %reldir%/transform-basic.la
%canon_reldir%_transform_basic_la_SOURCES = %reldir%/plugin.c %reldir%/basic.h \
	%reldir%/basic_ref.c %reldir%/basic_cpu.c
%canon_reldir%_transform_basic_la_CPPFLAGS = $(AM_CPPFLAGS) $(XXHASH_CFLAGS)
%canon_reldir%_transform_basic_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_transform_basic_la_LIBADD = $(XXHASH_LIBS)
EXTRA_DIST += %reldir%/README.md

check_PROGRAMS += tests/test-transform-basic
TESTS += tests/test-transform-basic
tests_test_transform_basic_SOURCES = tests/test-transform-basic.c
tests_test_transform_basic_CPPFLAGS = $(AM_CPPFLAGS) $(XXHASH_CFLAGS)
tests_test_transform_basic_LDADD = $(GRM_TEST_LIBS) $(XXHASH_LIBS)

# The feature-engine benchmark (bench/bench_transform.py drives it): cost per input byte of
# 10 vs 256 declared transforms.
EXTRA_PROGRAMS += bench/bench-transform
GRM_BENCH_BINS += bench/bench-transform
bench_bench_transform_SOURCES = bench/bench-transform.c
bench_bench_transform_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
bench_bench_transform_LDADD = $(GRM_TEST_LIBS)
EXTRA_DIST += bench/bench_transform.py
