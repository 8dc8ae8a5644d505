# Test support: TAP header, the plugin harness, the tally script.
check_LTLIBRARIES += tests/libharness.la
tests_libharness_la_SOURCES = tests/harness.c tests/harness.h tests/tap.h
GRM_TEST_LIBS = tests/libharness.la libgrmcore.la
EXTRA_DIST += tests/tally.sh tests/tap.sh

# The out-of-tree SDK example, built by tests/test-sdk-example.sh against a DESTDIR install.
TESTS += tests/test-sdk-example.sh tests/test-train.sh tests/test-train-ml100k.sh \
	tests/test-train-ranking.sh tests/test-train-sequence.sh tests/test-train-sparse.sh \
	tests/test-train-dist.sh tests/test-train-sharded.sh tests/test-train-stream.sh tests/test-train-prefetch.sh \
	tests/test-pipelines-hstu.sh \
	tests/test-train-seqrank.sh tests/test-train-async.sh tests/test-train-device.sh \
	tests/test-train-heads.sh tests/test-train-errors.sh tests/test-valgrind.sh
EXTRA_DIST += tests/test-sdk-example.sh tests/test-train.sh tests/test-train-ml100k.sh \
	tests/test-train-ranking.sh tests/test-train-sequence.sh tests/test-train-sparse.sh \
	tests/test-train-dist.sh tests/test-train-sharded.sh tests/test-train-stream.sh tests/test-train-prefetch.sh \
	tests/test-pipelines-hstu.sh \
	tests/test-train-seqrank.sh tests/test-train-async.sh tests/test-train-device.sh \
	tests/test-train-heads.sh tests/test-train-errors.sh tests/test-valgrind.sh \
	sdk/examples/transform-filter/filter.c \
	sdk/examples/transform-filter/Makefile sdk/examples/transform-filter/README.md \
	sdk/examples/head-hinge/hinge.c sdk/examples/head-hinge/Makefile \
	sdk/examples/head-hinge/README.md

# The public ABI: struct layouts pinned, every header self-contained.
check_PROGRAMS += tests/test-abi-layout tests/test-alloc-failure
TESTS += tests/test-abi-layout tests/test-headers.sh tests/test-alloc-failure
tests_test_abi_layout_SOURCES = tests/test-abi-layout.c
tests_test_abi_layout_LDADD = $(GRM_TEST_LIBS)
EXTRA_DIST += tests/test-headers.sh
tests_test_alloc_failure_SOURCES = tests/test-alloc-failure.c
tests_test_alloc_failure_LDADD = $(GRM_TEST_LIBS)

# grm/param.h and grm/plugin.h registration macros build the same tables and entry as
# hand-written ones (their compile-time type checks are in tests/test-headers.sh).
check_PROGRAMS += tests/test-param-macros
TESTS += tests/test-param-macros
tests_test_param_macros_SOURCES = tests/test-param-macros.c
tests_test_param_macros_LDADD = $(GRM_TEST_LIBS)

# core/reshard.c: a checkpoint's rows filtered to their owner a piece at a time.
check_PROGRAMS += tests/test-reshard-rows
TESTS += tests/test-reshard-rows
tests_test_reshard_rows_SOURCES = tests/test-reshard-rows.c
tests_test_reshard_rows_LDADD = $(GRM_TEST_LIBS)
# core/sparse.c: table merging, segment unique, ids partition, pooling operators.
check_PROGRAMS += tests/test-sparse
TESTS += tests/test-sparse
tests_test_sparse_SOURCES = tests/test-sparse.c
tests_test_sparse_LDADD = $(GRM_TEST_LIBS)
# bench/bench_sparse.py's C driver (built by `make bench`).
EXTRA_PROGRAMS += bench/bench-sparse
GRM_BENCH_BINS += bench/bench-sparse
bench_bench_sparse_SOURCES = bench/bench-sparse.c
bench_bench_sparse_LDADD = libgrmcore.la -lm
EXTRA_DIST += bench/bench_sparse.py

# core/dist.c: distributed lookup/update. tests/test-dist is an MPI program (through the
# comm-mpi plugin, or comm-single alone); tests/test-dist.sh runs it at 1, 2 and 4 ranks.
check_PROGRAMS += tests/test-dist
TESTS += tests/test-dist.sh
tests_test_dist_SOURCES = tests/test-dist.c
tests_test_dist_LDADD = $(GRM_TEST_LIBS)
EXTRA_DIST += tests/test-dist.sh bench/bench_dist.sh

# grmhost reshard (checkpoints across world sizes) and crash safety of checkpoints (issue 5).
TESTS += tests/test-reshard.sh tests/test-train-crash.sh
EXTRA_DIST += tests/test-reshard.sh tests/test-train-crash.sh

# grm/backend.h: the cpu backend against the ref backend, op by op.
check_PROGRAMS += tests/test-backend
TESTS += tests/test-backend
tests_test_backend_SOURCES = tests/test-backend.c
tests_test_backend_LDADD = $(GRM_TEST_LIBS)

# issue 22: check's wiring checks, INI composition; metrics records, --fresh, plot;
# prepare.sh; man pages and installed docs
TESTS += tests/test-check.sh tests/test-watch.sh tests/test-prepare.sh tests/test-install-docs.sh
EXTRA_DIST += tests/test-check.sh tests/test-watch.sh tests/test-prepare.sh \
	tests/test-install-docs.sh
# Hostile checkpoints, --fresh, early-stop resume, the lock, resumed metrics (issue 25);
# tests/ckpt-edit forges checkpoints for it (checksums recomputed, meaning wrong).
check_PROGRAMS += tests/ckpt-edit
tests_ckpt_edit_SOURCES = tests/ckpt-edit.c
tests_ckpt_edit_LDADD = $(GRM_TEST_LIBS)
TESTS += tests/test-train-resume.sh tests/test-train-signal.sh tests/test-plugin-dirs.sh \
	tests/test-hostile-files.sh
EXTRA_DIST += tests/test-train-resume.sh tests/test-train-signal.sh tests/test-plugin-dirs.sh \
	tests/test-hostile-files.sh
# [train]'s learning-rate schedule (core/lr.c).
TESTS += tests/test-train-lr.sh
EXTRA_DIST += tests/test-train-lr.sh
EXTRA_DIST += tests/kill-campaign.sh
