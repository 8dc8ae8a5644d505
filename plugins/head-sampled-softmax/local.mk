# head-sampled-softmax: see %reldir%/README.md. A head plugin (ABI 1.5). heads.h, heads.c,
# heads_ref.c, heads_cpu.c, heads_full.c, heads_tok.c and head_rows.c hold the numerics of
# both heads and are compiled into head-bce.so too; dense-mlp's mlp_ref.c gives the L2
# normalization.
HEADS_SOURCES = plugins/head-sampled-softmax/heads.h plugins/head-sampled-softmax/heads.c \
	plugins/head-sampled-softmax/heads_ref.c plugins/head-sampled-softmax/heads_cpu.c \
	plugins/head-sampled-softmax/heads_full.c plugins/head-sampled-softmax/heads_tok.c \
	plugins/head-sampled-softmax/head_rows.c plugins/dense-mlp/mlp_ref.c
HEADS_CPPFLAGS = -I$(srcdir)/plugins/head-sampled-softmax -I$(srcdir)/plugins/dense-mlp
plugin_LTLIBRARIES += %reldir%/head-sampled-softmax.la
%canon_reldir%_head_sampled_softmax_la_SOURCES = %reldir%/plugin.c $(HEADS_SOURCES)
%canon_reldir%_head_sampled_softmax_la_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS) $(HEADS_CPPFLAGS)
%canon_reldir%_head_sampled_softmax_la_LDFLAGS = $(PLUGIN_LDFLAGS)
%canon_reldir%_head_sampled_softmax_la_LIBADD = $(BLAS_LIBS) -lm
EXTRA_DIST += %reldir%/README.md tests/ref/heads.py tests/ref/heads_bce.py tests/ref/heads_full.py \
	bench/bench_head.py

check_PROGRAMS += tests/test-heads
TESTS += tests/test-heads
tests_test_heads_SOURCES = tests/test-heads.c tests/dense-checks.h tests/dense-checks.c
tests_test_heads_LDADD = $(GRM_TEST_LIBS) -lm

check_PROGRAMS += tests/test-heads-full
TESTS += tests/test-heads-full
tests_test_heads_full_SOURCES = tests/test-heads-full.c tests/dense-checks.h tests/dense-checks.c
tests_test_heads_full_LDADD = $(GRM_TEST_LIBS) -lm

check_PROGRAMS += tests/test-heads-token
TESTS += tests/test-heads-token
tests_test_heads_token_SOURCES = tests/test-heads-token.c tests/dense-checks.h tests/dense-checks.c
tests_test_heads_token_LDADD = $(GRM_TEST_LIBS) -lm

# bench/bench_head.py drives this C timing driver (built by `make bench`).
EXTRA_PROGRAMS += bench/bench-head
GRM_BENCH_BINS += bench/bench-head
bench_bench_head_SOURCES = bench/bench-head.c
bench_bench_head_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/tests
bench_bench_head_LDADD = $(GRM_TEST_LIBS) -lm
