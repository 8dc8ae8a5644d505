# emb-dynamic: see %reldir%/README.md
# The store's code past its descriptor (plugin.c), its flags and libraries: the plugin's,
# and the test fixtures' that put it behind another descriptor (below).
EMB_DYNAMIC_CORE = %reldir%/emb_dynamic.h %reldir%/table.c %reldir%/chunks.c \
	%reldir%/evict.c %reldir%/ops.c %reldir%/ckpt.c %reldir%/tier.c %reldir%/profile.c
EMB_DYNAMIC_CFLAGS = $(AM_CFLAGS) $(XXHASH_CFLAGS) $(URING_CFLAGS)
EMB_DYNAMIC_LIBS = -lm -lpthread $(XXHASH_LIBS) $(URING_LIBS)
plugin_LTLIBRARIES += %reldir%/emb-dynamic.la
%canon_reldir%_emb_dynamic_la_SOURCES = %reldir%/plugin.c $(EMB_DYNAMIC_CORE)
%canon_reldir%_emb_dynamic_la_CFLAGS = $(EMB_DYNAMIC_CFLAGS)
%canon_reldir%_emb_dynamic_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_emb_dynamic_la_LIBADD = $(EMB_DYNAMIC_LIBS)
EXTRA_DIST += %reldir%/README.md

check_PROGRAMS += tests/test-emb-dynamic tests/test-emb-dynamic-stress tests/test-emb-tiered
TESTS += tests/test-emb-dynamic tests/test-emb-dynamic-stress tests/test-emb-tiered
tests_test_emb_dynamic_SOURCES = tests/test-emb-dynamic.c tests/emb-fakes.h tests/emb-fakes.c
tests_test_emb_dynamic_LDADD = $(GRM_TEST_LIBS) -lm
tests_test_emb_dynamic_stress_SOURCES = tests/test-emb-dynamic-stress.c tests/emb-fakes.h \
	tests/emb-fakes.c
tests_test_emb_dynamic_stress_LDADD = $(GRM_TEST_LIBS) -lm -lpthread
# the tiered mode in training: bitwise against all-in-memory, prefetch, kill -9 and resume;
# kill-at-write.so (LD_PRELOAD) kills it inside a write-back or a checkpoint save
TESTS += tests/test-train-tiered.sh
EXTRA_DIST += tests/test-train-tiered.sh
TESTS += tests/test-train-tiered-dist.sh
EXTRA_DIST += tests/test-train-tiered-dist.sh
check_LTLIBRARIES += tests/kill-at-write.la
tests_kill_at_write_la_SOURCES = tests/kill-at-write.c
tests_kill_at_write_la_CFLAGS = $(AM_CFLAGS) -fvisibility=default
tests_kill_at_write_la_LDFLAGS = -module -avoid-version -rpath /nowhere
tests_kill_at_write_la_LIBADD = -ldl
tests_test_emb_tiered_SOURCES = tests/test-emb-tiered.c tests/emb-fakes.h tests/emb-fakes.c
tests_test_emb_tiered_LDADD = $(GRM_TEST_LIBS) -lm

# bench/bench_emb.py drives this C driver (emb-dynamic vs emb-static); make bench builds it.
EXTRA_PROGRAMS += bench/bench-emb
GRM_BENCH_BINS += bench/bench-emb
bench_bench_emb_SOURCES = bench/bench-emb.c
bench_bench_emb_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
bench_bench_emb_LDADD = $(GRM_TEST_LIBS) -lm
EXTRA_DIST += bench/bench_emb.py bench/bench-emb-absl.cc

# bench/bench_tiered.py drives this C driver (tiered vs in-memory emb-dynamic).
EXTRA_PROGRAMS += bench/bench-tiered
GRM_BENCH_BINS += bench/bench-tiered
bench_bench_tiered_SOURCES = bench/bench-tiered.c
bench_bench_tiered_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests
bench_bench_tiered_LDADD = $(GRM_TEST_LIBS) -lm -lpthread
EXTRA_DIST += bench/bench_tiered.py

# A keyed store of ABI 1.9 (no tensor_rows): emb-dynamic's code behind an older descriptor,
# for the host's whole-table path of export and incremental export (test-export-delta.sh).
check_LTLIBRARIES += tests/plugins/emb-legacy-keyed.la
tests_plugins_emb_legacy_keyed_la_SOURCES = tests/plugins/emb-legacy-keyed.c $(EMB_DYNAMIC_CORE)
tests_plugins_emb_legacy_keyed_la_CFLAGS = $(EMB_DYNAMIC_CFLAGS)
tests_plugins_emb_legacy_keyed_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_plugins_emb_legacy_keyed_la_LIBADD = $(EMB_DYNAMIC_LIBS)

# emb-dynamic with an oracle of the host's trim keep_from (test-train-tiered.sh).
check_LTLIBRARIES += tests/plugins/emb-trim-check.la
tests_plugins_emb_trim_check_la_SOURCES = tests/plugins/emb-trim-check.c $(EMB_DYNAMIC_CORE)
tests_plugins_emb_trim_check_la_CFLAGS = $(EMB_DYNAMIC_CFLAGS)
tests_plugins_emb_trim_check_la_LDFLAGS = $(FIXTURE_LDFLAGS)
tests_plugins_emb_trim_check_la_LIBADD = $(EMB_DYNAMIC_LIBS)
